// Arbitrary token ids through the stream decoder and the server's TextGeneration (stop
// strings over detokenized pieces). Input: a selector byte (tokenizer), stop strings
// separated by 0x1f, kSplit, then ids as little-endian u16 pairs (taken modulo the
// vocabulary, so that most are valid; 0xffff stays out of range).
#include <cstdint>

#include "real_tokenizers.h"
#include "serve/text_generation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  if (size == 0) return 0;
  const auto& toks = fuzz::RealTokenizers();
  const Tokenizer& t = *toks[data[0] % toks.size()];
  const auto parts = fuzz::Split(fuzz::AsView(data + 1, size - 1), fuzz::kSplit);
  std::vector<std::string> stops;
  if (parts.size() > 1)
    for (std::string_view s : fuzz::Split(parts[0], "\x1f")) stops.emplace_back(s);
  const std::string_view id_bytes = parts.back();
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < id_bytes.size(); i += 2) {
    const uint32_t v = static_cast<uint8_t>(id_bytes[i]) | static_cast<uint32_t>(static_cast<uint8_t>(id_bytes[i + 1])) << 8;
    ids.push_back(v == 0xffff ? -1 : static_cast<int32_t>(v * 37 % static_cast<uint32_t>(t.vocab_size())));
  }
  fuzz::CheckStreamDecode(t, ids, false);
  fuzz::CheckStreamDecode(t, ids, true);

  // TextGeneration: what it emits is a prefix of the decoded text without a stop string.
  serve::TextGeneration gen(t, stops);
  std::string emitted;
  std::vector<int32_t> valid;
  for (size_t i = 0; i < ids.size() && !gen.done(); ++i) {
    if (ids[i] < 0) continue;  // the engine only emits vocabulary ids
    valid.push_back(ids[i]);
    TokenEvent e;
    e.req = 1;
    e.token = ids[i];
    e.depth = 1;
    if (i + 1 == ids.size()) e.finish = FinishReason::kLength;
    emitted += gen.Push(e);
  }
  FUZZ_CHECK(emitted == gen.text(), "text() differs from what was emitted");
  auto whole = t.Decode(valid, true);
  FUZZ_CHECK(whole.ok(), "decode of valid ids failed");
  // A stop string may also match in the last token's text: finish_reason is then "stop"
  // too, though stopped_by_string() is false (the engine has already finished it).
  if (gen.done() && gen.finish_reason() != "stop")
    FUZZ_CHECK(emitted == *whole, "emitted '%s' != decoded '%s'", emitted.c_str(), whole->c_str());
  for (const std::string& s : stops)
    if (!s.empty()) FUZZ_CHECK(emitted.find(s) == std::string::npos, "emitted a stop string");
  return 0;
}
