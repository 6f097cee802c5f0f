// Arbitrary bytes encoded by the real tokenizers (first byte: which, and whether to add
// special tokens): valid UTF-8 always encodes to ids in the vocabulary, invalid UTF-8 is an
// error; the ids decode, and decode streamed as whole; Llama 3's pipeline (no normalizer,
// byte-level) gives back exactly the text.
#include <cstdint>

#include "real_tokenizers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  if (size == 0) return 0;
  const auto& toks = fuzz::RealTokenizers();
  const size_t which = data[0] % toks.size();
  const bool add_special = (data[0] / toks.size()) % 2 == 1;
  const std::string_view text = fuzz::AsView(data + 1, size - 1);
  const Tokenizer& t = *toks[which];
  auto ids = t.Encode(text, add_special);
  if (!ids.ok()) return 0;
  for (int32_t id : *ids) FUZZ_CHECK(id >= 0 && id < t.vocab_size(), "id %d of %d", id, t.vocab_size());
  fuzz::CheckStreamDecode(t, *ids, false);
  fuzz::CheckStreamDecode(t, *ids, true);
  if (which == 1 && !add_special) {
    auto back = t.Decode(*ids, false);
    FUZZ_CHECK(back.ok() && *back == text, "llama3 round trip");
  }
  return 0;
}
