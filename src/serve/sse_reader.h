// A reader of server-sent events (the text/event-stream wire format of the WHATWG HTML
// standard, §9.2) from byte chunks split anywhere: mid-line, mid-"\r\n", mid-UTF-8.
//
// Lines end with "\r\n", "\n" or "\r". A blank line dispatches the event built so far;
// "data: x" lines append x (one leading space dropped) joined by "\n"; "event:" and "id:"
// set those fields; lines starting with ':' are comments (the server's ": keep-alive");
// other fields ("retry") are ignored. An event with no data line is not dispatched, and
// neither is a last event the stream never ended with a blank line (see pending()).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fathom::serve {

// One dispatched event (named so, not SseEvent: openai_api.h's writer of a data line).
struct SseMessage {
  std::string event;  // "event:" field; empty = the default type, "message"
  std::string data;   // the data lines joined by "\n"
  std::string id;
};

class SseReader {
 public:
  // Consumes `bytes` and appends every event they complete to `out`.
  void Feed(std::string_view bytes, std::vector<SseMessage>* out);
  // Whether bytes of an undispatched event (or an unended line) are held back.
  bool pending() const { return !line_.empty() || has_fields_; }
  int64_t comments() const { return comments_; }  // comment lines seen

 private:
  void Line(std::vector<SseMessage>* out);

  std::string line_;         // the current, unended line
  bool after_cr_ = false;    // the last byte was '\r': a following '\n' belongs to it
  SseMessage event_;           // fields of the event being built
  bool has_data_ = false, has_fields_ = false;
  int64_t comments_ = 0;
};

}  // namespace fathom::serve
