#include "serve/text_generation.h"

#include "serve/stop_matcher.h"

namespace fathom::serve {

// OpenAI-compatible servers (and HF's decode default in vLLM) hide special tokens.
TextGeneration::TextGeneration(const Tokenizer& tok, std::vector<std::string> stop)
    : dec_(tok, /*skip_special_tokens=*/true), stop_(std::make_unique<StopMatcher>(std::move(stop))) {}

TextGeneration::~TextGeneration() = default;

std::string TextGeneration::Push(const TokenEvent& e) {
  if (done_) return {};
  std::string out;
  if (e.token >= 0) {
    ++tokens_;
    depth_sum_ += e.depth;
    budget_sum_ += e.budget;
    out = stop_->Push(dec_.Push(e.token));
  }
  if (stop_->stopped()) {
    done_ = true;
    by_string_ = e.finish == FinishReason::kNone;
    finish_ = "stop";
  } else if (e.finish != FinishReason::kNone) {
    out += stop_->Push(dec_.Finish());
    if (stop_->stopped()) {
      finish_ = "stop";
    } else {
      out += stop_->Finish();
      finish_ = std::string(FinishReasonName(e.finish));
    }
    done_ = true;
  }
  text_ += out;
  return out;
}

}  // namespace fathom::serve
