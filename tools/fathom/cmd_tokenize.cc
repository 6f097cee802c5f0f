// fathom tokenize: a checkpoint's tokenizer from the command line (encode text, decode ids,
// render a one-message chat prompt), for inspecting prompts and for tests.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "flags.h"
#include "tokenizer/tokenizer.h"

namespace fathom::cli {

int RunTokenize(const std::vector<std::string>& args) {
  std::string model_dir, text, text_file, decode_ids;
  bool no_special = false, json = false, chat = false;
  FlagSet flags("fathom tokenize",
                "fathom tokenize --model DIR (--text TEXT | --text-file FILE | --decode-ids 1,2,3)\n"
                "                [--chat] [--no-special] [--json]",
                "Encodes text with the tokenizer of a model directory (tokenizer.json and\n"
                "tokenizer_config.json) and prints the ids, space-separated, or decodes ids to text.");
  flags.String("--model", &model_dir, "model directory holding tokenizer.json");
  flags.String("--text", &text, "text to encode");
  flags.String("--text-file", &text_file, "file whose contents to encode (bytes as they are)");
  flags.String("--decode-ids", &decode_ids, "comma-separated ids to decode instead");
  flags.Bool("--chat", &chat,
             "render the text as one user message through the chat template (generation\n"
             "      prompt on) before encoding; the template's special tokens are matched as such");
  flags.Bool("--no-special", &no_special,
             "encoding: do not add the post-processor's special tokens (e.g. bos);\n"
             "      decoding: skip special tokens");
  flags.Bool("--json", &json, "print {\"ids\": [...], \"tokens\": [...]} (decoding: {\"text\": ...})");
  flags.Require("--model");
  if (Status s = flags.Parse(args); !s.ok()) return Fail("tokenize", s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  const int sources = int{flags.Seen("--text")} + int{flags.Seen("--text-file")} + int{flags.Seen("--decode-ids")};
  if (sources != 1) return Fail("tokenize", "give exactly one of --text, --text-file and --decode-ids", 2);
  if (chat && flags.Seen("--decode-ids")) return Fail("tokenize", "--chat applies to encoding only", 2);

  auto tok = Tokenizer::Load(model_dir);
  if (!tok.ok()) return Fail("tokenize", tok.status().message(), 1);

  if (flags.Seen("--decode-ids")) {
    auto ids = ParseIdList("--decode-ids", decode_ids);
    if (!ids.ok()) return Fail("tokenize", ids.status().message(), 2);
    auto decoded = (*tok)->Decode(*ids, /*skip_special_tokens=*/no_special);
    if (!decoded.ok()) return Fail("tokenize", decoded.status().message(), 1);
    if (json) {
      std::printf("%s\n", nlohmann::json{{"text", *decoded}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::fwrite(decoded->data(), 1, decoded->size(), stdout);
      std::fputc('\n', stdout);
    }
    return 0;
  }

  if (flags.Seen("--text-file")) {
    std::ifstream f(text_file, std::ios::binary);
    if (!f) return Fail("tokenize", "--text-file: cannot open " + text_file, 1);
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  }
  bool add_special = !no_special;
  if (chat) {
    const ChatTemplate* tmpl = (*tok)->chat_template();
    if (tmpl == nullptr) return Fail("tokenize", model_dir + "/tokenizer_config.json has no chat_template", 1);
    auto prompt = tmpl->Render({{"user", text}}, /*add_generation_prompt=*/true);
    if (!prompt.ok()) return Fail("tokenize", prompt.status().message(), 1);
    text = *prompt;
    add_special = false;  // the template holds its special tokens
  }
  auto ids = (*tok)->Encode(text, add_special);
  if (!ids.ok()) return Fail("tokenize", ids.status().message(), 1);
  if (json) {
    nlohmann::json tokens = nlohmann::json::array();
    for (int32_t id : *ids) tokens.push_back((*tok)->IdToToken(id).value_or(""));
    std::printf("%s\n", nlohmann::json{{"ids", *ids}, {"tokens", tokens}}.dump().c_str());
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids->size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string((*ids)[i]);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace fathom::cli
