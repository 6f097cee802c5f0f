#include "serve/sse_reader.h"

namespace fathom::serve {

void SseReader::Feed(std::string_view bytes, std::vector<SseMessage>* out) {
  for (char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // the '\n' of a "\r\n" split across chunks or not
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      Line(out);
      line_.clear();
    } else {
      line_ += c;
    }
  }
}

void SseReader::Line(std::vector<SseMessage>* out) {
  if (line_.empty()) {  // dispatch
    if (has_data_) out->push_back(std::move(event_));
    event_ = SseMessage{};
    has_data_ = has_fields_ = false;
    return;
  }
  if (line_[0] == ':') {
    ++comments_;
    return;
  }
  const size_t colon = line_.find(':');
  const std::string_view field = std::string_view(line_).substr(0, colon);
  std::string_view value;
  if (colon != std::string::npos) {
    value = std::string_view(line_).substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  has_fields_ = true;
  if (field == "data") {
    if (has_data_) event_.data += '\n';
    event_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.event = value;
  } else if (field == "id" && value.find('\0') == std::string_view::npos) {
    event_.id = value;
  }
}

}  // namespace fathom::serve
