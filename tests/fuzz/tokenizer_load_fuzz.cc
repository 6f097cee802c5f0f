// tokenizer.json (and after kSplit, tokenizer_config.json) as Tokenizer::FromJson loads
// them: anything unsupported is an error naming the field; an accepted tokenizer encodes,
// decodes and renders a chat without crashing.
#include <cstdint>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  const auto parts = fuzz::Split(fuzz::AsView(data, size), fuzz::kSplit);
  auto tok = Tokenizer::FromJson(parts[0], parts.size() > 1 ? parts[1] : std::string_view(), "fuzz");
  if (!tok.ok()) return 0;
  const Tokenizer& t = **tok;
  for (const char* text : {"Hello world, hi! 123", "  x\n\ny  ", "caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd"}) {
    auto ids = t.Encode(text, true);
    if (!ids.ok()) continue;
    for (int32_t id : *ids) FUZZ_CHECK(id >= 0 && id < t.vocab_size(), "id %d of %d", id, t.vocab_size());
    (void)t.Decode(*ids, false);
  }
  std::vector<int32_t> all;
  for (int32_t id = 0; id < std::min(t.vocab_size(), 512); ++id) all.push_back(id);
  (void)t.Decode(all, true);
  if (const ChatTemplate* chat = t.chat_template())
    (void)chat->Render({{"system", "s"}, {"user", "u"}, {"assistant", "a"}}, true);
  return 0;
}
