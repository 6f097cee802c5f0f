// StopMatcher over arbitrary pieces: stop strings separated by 0x1f, then 0x1e, then the
// pieces separated by 0x1f. What it emits is a prefix of the text containing no stop
// string; unstopped, it is all of the text; stopped, a stop string follows it.
#include <cstdint>

#include "fuzz_util.h"
#include "serve/stop_matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  const std::string_view in = fuzz::AsView(data, size);
  const size_t sep = in.find('\x1e');
  std::vector<std::string> stops;
  if (sep != std::string_view::npos)
    for (std::string_view s : fuzz::Split(in.substr(0, sep), "\x1f")) stops.emplace_back(s);
  const std::string_view rest = sep == std::string_view::npos ? in : in.substr(sep + 1);
  serve::StopMatcher m(stops);
  std::string full, out;
  for (std::string_view piece : fuzz::Split(rest, "\x1f")) {
    full += piece;
    out += m.Push(piece);
  }
  out += m.Finish();
  FUZZ_CHECK(full.compare(0, out.size(), out) == 0, "output is not a prefix of the text");
  for (const std::string& s : stops)
    if (!s.empty()) FUZZ_CHECK(out.find(s) == std::string::npos, "a stop string was emitted");
  if (!m.stopped()) {
    FUZZ_CHECK(out == full, "unstopped output lost text");
  } else {
    bool follows = false;
    for (const std::string& s : stops) follows |= !s.empty() && full.compare(out.size(), s.size(), s) == 0;
    FUZZ_CHECK(follows, "stopped without a stop string after the output");
  }
  return 0;
}
