// tokenizer_config.json as ParseTokenizerConfig reads it, and its chat_template as
// ChatTemplate::Detect recognises it, rendered: errors, never crashes.
#include <cstdint>

#include "fuzz_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  auto cfg = ParseTokenizerConfig(fuzz::AsView(data, size), "tokenizer_config.json");
  if (!cfg.ok() || cfg->chat_template.empty()) return 0;
  const ChatTemplate chat =
      ChatTemplate::Detect(cfg->chat_template, cfg->bos_token.value_or(""), cfg->eos_token.value_or(""));
  (void)chat.Render({{"system", "s"}, {"user", "u"}, {"assistant", "a"}, {"user", "v"}}, true);
  (void)chat.Render({{"user", "u"}}, false);
  return 0;
}
