// Chat messages rendered by the real chat templates (Qwen3's ChatML, Llama 3's): a selector
// byte (template, add_generation_prompt), then messages separated by kSplit, each
// "role\x1fcontent". Errors (an empty role, no messages), never crashes; a
// rendered prompt encodes with the same tokenizer.
#include <cstdint>

#include "real_tokenizers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  if (size == 0) return 0;
  // The tokenizers whose tokenizer_config.json has a chat template (the Llama 2 package's
  // has none).
  static const std::vector<const Tokenizer*> toks = [] {
    std::vector<const Tokenizer*> v;
    for (const auto& t : fuzz::RealTokenizers())
      if (t->chat_template()) v.push_back(t.get());
    FUZZ_CHECK(!v.empty(), "no tokenizer with a chat template");
    return v;
  }();
  const Tokenizer& t = *toks[data[0] % toks.size()];
  const bool add_generation_prompt = (data[0] / toks.size()) % 2 == 1;
  std::vector<ChatMessage> messages;
  for (std::string_view m : fuzz::Split(fuzz::AsView(data + 1, size - 1), fuzz::kSplit)) {
    const size_t sep = m.find('\x1f');
    messages.push_back({std::string(m.substr(0, sep)),
                        sep == std::string_view::npos ? std::string() : std::string(m.substr(sep + 1))});
  }
  auto prompt = t.chat_template()->Render(messages, add_generation_prompt);
  if (!prompt.ok()) return 0;
  (void)t.Encode(*prompt, false);
  return 0;
}
