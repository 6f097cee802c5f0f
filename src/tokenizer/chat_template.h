// Chat templates. fathom does not run Jinja: it recognises the chat formats of the model
// families it serves from the template text in tokenizer_config.json and renders them
// natively:
//   ChatML  (Ouro, Qwen 2/3):  <|im_start|>{role}\n{content}<|im_end|>\n ...
//                              generation prompt <|im_start|>assistant\n
//   Llama 3:                   <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n
//                              {content}<|eot_id|> ... generation prompt for "assistant"
//   Huginn:                    <|begin_text|><|begin_header|>{role}<|end_header|>\n\n
//                              {content}<|end_turn|> ... generation prompt for the role
//                              "Huginn"; without one the template ends with <|end_text|>
//                              (the template of seal-rg/recurrent-pretraining's tokenizer
//                              script, as uploaded with tomg-group-umd/huginn-0125)
//   Llama 2 (Meta's chat template, also TinyLlama-derived and CodeLlama checkpoints):
//                              <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s>
//                              <s>[INST] {user} [/INST] ... contents stripped; roles must
//                              alternate user / assistant after the optional system message
//                              (the template's raise_exception, here an error); no generation
//                              prompt of its own (the prompt ends with [/INST]); a literal
//                              default system prompt and a branch for later system messages
//                              when the template has them. Recognised by [INST] with <<SYS>>
//                              (Mistral's [INST] template, without <<SYS>>, is not Llama 2's).
//   Zephyr (TinyLlama-1.1B-Chat): <|system|>\n{content}</s>\n<|user|>\n{content}</s>\n ...
//                              generation prompt <|assistant|>\n; other roles render nothing
//                              (the newlines are those HF's trim_blocks leaves after each
//                              expression: present when the template's lines end with `}}`)
// What fathom follows of each template: ChatML's default system prompt when the template
// writes one as a literal (Qwen 2.5), Qwen 3's <think> handling of assistant turns and its
// tool-response turns (thinking enabled, its default: nothing after the generation
// header); Llama 3's and Huginn's trimmed contents and bos before the first turn, Llama
// 3.1's dated system header (the template's default date; fathom has no strftime_now);
// a template without an add_generation_prompt test (the original Llama 3 one) always gets
// the generation prompt. Tools and tool calls are not rendered.
// A template in none of these formats is an error when it is used, naming the template's
// first characters, never a silently wrong prompt.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace fathom {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant" (others are passed through)
  std::string content;
};

class ChatTemplate {
 public:
  enum class Format { kUnknown, kChatMl, kLlama3, kHuginn, kLlama2, kZephyr };

  // Recognises the format from the Jinja source (tokenizer_config.json "chat_template").
  // `bos_token` / `eos_token` are the config's strings (used by formats whose template
  // emits them).
  static ChatTemplate Detect(std::string_view jinja_source, std::string bos_token,
                             std::string eos_token = "");

  Format format() const { return format_; }
  std::string_view FormatName() const;  // "chatml", "llama3", "huginn", "llama2", "zephyr", "unknown"
  // The prompt text (special tokens as text; encode with add_special_tokens=false).
  // Errors: unknown format, no messages, an empty role. `enable_thinking` false: Qwen 3's
  // template switch (an empty <think></think> block after the generation prompt, so the
  // model answers without thinking); other templates ignore it, as Jinja would.
  Result<std::string> Render(const std::vector<ChatMessage>& messages,
                             bool add_generation_prompt, bool enable_thinking = true) const;

 private:
  Format format_ = Format::kUnknown;
  std::string source_head_;     // first characters of an unrecognised template, for errors
  Result<std::string> RenderLlama2(const std::vector<ChatMessage>& messages) const;
  Result<std::string> RenderZephyr(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  std::string bos_, eos_;
  std::string default_system_;  // a system prompt the template inserts when none is given
  // Llama 2: bos before every [INST] (Meta's template) or once at the start; whether
  // system messages after the first render as their own <<SYS>> block.
  bool bos_per_turn_ = false;
  bool llama2_system_branch_ = false;
  // Zephyr: the newline after each turn and after the generation prompt.
  std::string turn_newline_, generation_newline_;
  // ChatML as Qwen 3 writes it: assistant turns after the last user query carry their
  // reasoning in <think>...</think> (an empty block on the final one), earlier ones drop it;
  // "tool" messages become <tool_response> blocks in a user turn.
  bool qwen3_reasoning_ = false;
  // Llama 3 / Huginn header formats: the tokens around a role and after a turn, the role
  // the generation prompt opens, whether the template appends it even when not asked (the
  // original Llama 3 template has no add_generation_prompt test), what it appends when
  // not asked (Huginn: <|end_text|>), and Llama 3.1's dated system header.
  std::string begin_header_, end_header_, end_turn_, generation_role_ = "assistant";
  bool always_generation_prompt_ = false;
  std::string no_generation_suffix_;
  bool dated_system_ = false;
  std::string date_string_;
};

}  // namespace fathom
