// TextGeneration: one request's token events turned into the text the client sees, the same
// way for streamed and whole responses: tokens are detokenized incrementally (StreamDecoder,
// special tokens skipped, never half a UTF-8 character), stop strings are matched on the
// text with the tail that could start one held back, and the finish reason, token count and
// exit depths are kept for the response.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sched/plan.h"
#include "tokenizer/tokenizer.h"

namespace fathom::serve {

class StopMatcher;

class TextGeneration {
 public:
  TextGeneration(const Tokenizer& tok, std::vector<std::string> stop);
  ~TextGeneration();

  // Consumes one event; returns the text it makes safe to emit (possibly empty).
  std::string Push(const TokenEvent& e);
  // A finish event arrived or a stop string matched: nothing more will be emitted.
  bool done() const { return done_; }
  // The generation ended on a stop string while the engine was still running it: the
  // caller must cancel the request in the engine.
  bool stopped_by_string() const { return by_string_; }
  // "length", "stop", or "cancelled" (the engine dropped it).
  const std::string& finish_reason() const { return finish_; }
  int64_t tokens() const { return tokens_; }
  double mean_depth() const { return tokens_ ? static_cast<double>(depth_sum_) / static_cast<double>(tokens_) : 0.0; }
  double mean_budget() const { return tokens_ ? budget_sum_ / static_cast<double>(tokens_) : 1.0; }
  const std::string& text() const { return text_; }  // everything emitted so far

 private:
  StreamDecoder dec_;
  std::unique_ptr<StopMatcher> stop_;
  std::string text_, finish_;
  int64_t tokens_ = 0, depth_sum_ = 0;
  double budget_sum_ = 0;
  bool done_ = false, by_string_ = false;
};

}  // namespace fathom::serve
