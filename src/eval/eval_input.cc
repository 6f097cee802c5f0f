#include "eval/eval_input.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/tokenizer.h"

namespace fathom {
namespace {

Result<std::string> ReadFile(const std::string& flag, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::Error(flag + ": cannot open " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  if (ss.str().empty()) return Status::Error(flag + " " + path + ": the file is empty; nothing to evaluate");
  return ss.str();
}

Status AtLeastTwo(const std::string& flag, const std::string& path, size_t n, const char* what) {
  if (n >= 2) return Status::Ok();
  return Status::Error(flag + " " + path + ": " + std::to_string(n) + " token(s) " + what +
                       "; perplexity needs at least 2 (the first predicts the second)");
}

}  // namespace

Result<std::vector<int32_t>> ReadTextIds(const std::string& model_dir, const std::string& path,
                                         bool add_special_tokens) {
  FATHOM_ASSIGN_OR_RETURN(std::string text, ReadFile("--text-file", path));
  if (!std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json"))
    return Status::Error("--text-file: " + model_dir +
                         " has no tokenizer.json to encode the text with; give the token ids with --ids-file");
  FATHOM_ASSIGN_OR_RETURN(auto tok, Tokenizer::Load(model_dir));
  auto ids = tok->Encode(text, add_special_tokens);
  if (!ids.ok()) return Status::Error("--text-file " + path + ": " + ids.status().message());
  FATHOM_RETURN_IF_ERROR(AtLeastTwo("--text-file", path, ids->size(), "after encoding"));
  return *ids;
}

Result<std::vector<int32_t>> ReadIdsFile(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(std::string text, ReadFile("--ids-file", path));
  for (char& c : text)
    if (c == ',') c = ' ';
  std::istringstream in(text);
  std::vector<int32_t> ids;
  std::string item;
  while (in >> item) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (end != item.c_str() + item.size() || errno != 0 || v < 0 || v > INT32_MAX)
      return Status::Error("--ids-file " + path + ": item " + std::to_string(ids.size()) + " '" + item +
                           "' is not a token id (a non-negative integer)");
    ids.push_back(static_cast<int32_t>(v));
  }
  FATHOM_RETURN_IF_ERROR(AtLeastTwo("--ids-file", path, ids.size(), "in the file"));
  return ids;
}

}  // namespace fathom
