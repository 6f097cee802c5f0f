#include "bench/dataset.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>

namespace fathom::bench {
namespace {

// One entry's two texts before tokenization.
struct TextPair {
  std::string prompt, output;
};

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<nlohmann::json> ParseJson(const std::string& text, const std::string& where) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e309
    return Status::Error(where + ": malformed JSON (" + e.what() + ")");
  }
}

// obj[field] as a string; `where` names the entry.
Result<std::string> StringField(const nlohmann::json& obj, const char* field, const std::string& where,
                                bool optional = false) {
  if (!obj.is_object()) return Status::Error(where + ": expected a JSON object");
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) {
    if (optional) return std::string();
    return Status::Error(where + ": missing field '" + field + "'");
  }
  if (!it->is_string())
    return Status::Error(where + ": field '" + field + "' must be a string, found " + it->type_name());
  return it->get<std::string>();
}

Result<std::vector<TextPair>> ReadAlpaca(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  FATHOM_ASSIGN_OR_RETURN(nlohmann::json doc, ParseJson(text, path));
  if (!doc.is_array()) return Status::Error(path + ": expected a JSON array of Alpaca entries");
  std::vector<TextPair> out;
  for (size_t i = 0; i < doc.size(); ++i) {
    const std::string where = path + ": entry " + std::to_string(i);
    FATHOM_ASSIGN_OR_RETURN(std::string instruction, StringField(doc[i], "instruction", where));
    FATHOM_ASSIGN_OR_RETURN(std::string input, StringField(doc[i], "input", where, true));
    FATHOM_ASSIGN_OR_RETURN(std::string output, StringField(doc[i], "output", where));
    if (!input.empty()) instruction.append("\n\n").append(input);
    out.push_back({std::move(instruction), std::move(output)});
  }
  return out;
}

Result<std::vector<TextPair>> ReadShareGpt(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  FATHOM_ASSIGN_OR_RETURN(nlohmann::json doc, ParseJson(text, path));
  if (!doc.is_array()) return Status::Error(path + ": expected a JSON array of ShareGPT conversations");
  std::vector<TextPair> out;
  for (size_t i = 0; i < doc.size(); ++i) {
    const std::string where = path + ": entry " + std::to_string(i);
    if (!doc[i].is_object()) return Status::Error(where + ": expected a JSON object");
    auto it = doc[i].find("conversations");
    if (it == doc[i].end() || !it->is_array())
      return Status::Error(where + ": missing array field 'conversations'");
    if (it->size() < 2) continue;  // no reference answer
    FATHOM_ASSIGN_OR_RETURN(std::string prompt, StringField((*it)[0], "value", where + ": conversations[0]"));
    FATHOM_ASSIGN_OR_RETURN(std::string output, StringField((*it)[1], "value", where + ": conversations[1]"));
    out.push_back({std::move(prompt), std::move(output)});
  }
  return out;
}

Result<std::vector<TextPair>> ReadArxiv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error(path + ": cannot open");
  std::vector<TextPair> out;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ": line " + std::to_string(n);
    FATHOM_ASSIGN_OR_RETURN(nlohmann::json obj, ParseJson(line, where));
    FATHOM_ASSIGN_OR_RETURN(std::string article, StringField(obj, "article", where));
    FATHOM_ASSIGN_OR_RETURN(std::string abstract, StringField(obj, "abstract", where));
    out.push_back({std::move(article), std::move(abstract)});
  }
  return out;
}

}  // namespace

Result<std::vector<DatasetRequest>> LoadDataset(WorkloadKind kind, const std::string& path,
                                                const Tokenizer& tok, int64_t n, uint64_t seed,
                                                DatasetStats* stats) {
  if (n < 1) return Status::Error("requests: expected at least 1, found " + std::to_string(n));
  Result<std::vector<TextPair>> pairs = kind == WorkloadKind::kAlpaca     ? ReadAlpaca(path)
                                        : kind == WorkloadKind::kShareGpt ? ReadShareGpt(path)
                                                                          : ReadArxiv(path);
  if (!pairs.ok()) return pairs.status();
  std::vector<size_t> order(pairs->size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);

  // Tokenize in sampling order until n pass: an arXiv file is large and its articles long,
  // so tokenizing every entry up front would dominate the benchmark's set-up.
  std::vector<DatasetRequest> out;
  DatasetStats st;
  st.entries = static_cast<int64_t>(pairs->size());
  for (size_t idx : order) {
    if (static_cast<int64_t>(out.size()) == n) break;
    const TextPair& p = (*pairs)[idx];
    const std::string where = path + ": entry " + std::to_string(idx);
    auto prompt = tok.Encode(p.prompt, /*add_special_tokens=*/true);
    if (!prompt.ok()) return prompt.status().WithContext(where + " prompt");
    auto output = tok.Encode(p.output, /*add_special_tokens=*/false);
    if (!output.ok()) return output.status().WithContext(where + " output");
    const RequestShape shape{static_cast<int64_t>(prompt->size()), static_cast<int64_t>(output->size())};
    if (!PassesFilters(shape)) {
      ++st.filtered;
      continue;
    }
    out.push_back({std::move(prompt).value(), shape.output});
  }
  if (stats) *stats = st;
  if (static_cast<int64_t>(out.size()) < n)
    return Status::Error(path + ": only " + std::to_string(out.size()) + " of " + std::to_string(st.entries) +
                         " entries pass the filters (prompt >= 4, output >= 4, prompt + output <= 16384); asked for " +
                         std::to_string(n) + " requests");
  return out;
}

}  // namespace fathom::bench
