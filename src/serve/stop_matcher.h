// Stop strings over streamed text. Generated text arrives in pieces (one detokenized token
// at a time); a stop string may straddle pieces, so the matcher holds back the longest tail
// that could still be the start of a stop string and releases it once it cannot. When a
// stop string appears, the text before it is the last output and the matcher is stopped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fathom::serve {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends `piece`; returns the text now safe to emit (possibly empty). After a stop
  // string matched, returns the text before it once and then nothing.
  std::string Push(std::string_view piece);
  // The end of generation: releases the held-back tail (nothing if stopped).
  std::string Finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // text not yet emitted
  bool stopped_ = false;
};

}  // namespace fathom::serve
