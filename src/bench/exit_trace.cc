#include "bench/exit_trace.h"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

namespace fathom::bench {
namespace {

// Appends one record's depths (all but the first) to `out`.
Status AddRecord(const nlohmann::json& rec, const std::string& where, int32_t min_depth, int32_t r_max,
                 RecordedExitTrace* out) {
  if (!rec.is_object() || !rec.contains("exit_depths"))
    return Status::Error(where + ": no \"exit_depths\" (expected the output of `fathom generate --json`)");
  const nlohmann::json& d = rec["exit_depths"];
  if (!d.is_array()) return Status::Error(where + ": \"exit_depths\" is not an array");
  for (size_t i = 1; i < d.size(); ++i) {
    if (!d[i].is_number_integer())
      return Status::Error(where + ": exit_depths[" + std::to_string(i) + "] is not an integer");
    const int64_t v = d[i].get<int64_t>();
    if (v < min_depth || v > r_max)
      return Status::Error(where + ": exit_depths[" + std::to_string(i) + "] = " + std::to_string(v) +
                           " is outside [" + std::to_string(min_depth) + ", " + std::to_string(r_max) +
                           "] (r_max is this model's loop count" +
                           (v < min_depth && min_depth > 1
                                ? "; the lookahead gate exits at depth " + std::to_string(min_depth) +
                                      " or more: record the trace with --lookahead too, or replay it without"
                                : std::string()) +
                           ")");
    out->depths.push_back(static_cast<int32_t>(v));
  }
  ++out->records;
  return Status::Ok();
}

}  // namespace

double RecordedExitTrace::mean() const {
  if (depths.empty()) return 0;
  double s = 0;
  for (int32_t d : depths) s += d;
  return s / static_cast<double>(depths.size());
}

Result<RecordedExitTrace> LoadExitTrace(const std::string& path, int32_t min_depth, int32_t r_max) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error(path + ": cannot open");
  RecordedExitTrace out;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + " line " + std::to_string(line_no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e309
      return Status::Error(where + ": malformed JSON (" + e.what() + ")");
    }
    if (j.is_object() && j.contains("requests")) {  // `fathom generate --requests F --json`
      const nlohmann::json& reqs = j["requests"];
      if (!reqs.is_array()) return Status::Error(where + ": \"requests\" is not an array");
      for (size_t i = 0; i < reqs.size(); ++i)
        FATHOM_RETURN_IF_ERROR(AddRecord(reqs[i], where + " requests[" + std::to_string(i) + "]", min_depth, r_max, &out));
    } else {
      FATHOM_RETURN_IF_ERROR(AddRecord(j, where, min_depth, r_max, &out));
    }
  }
  if (out.depths.empty())
    return Status::Error(path + ": no decode-token exit depths (" + std::to_string(out.records) +
                         " records; each record's first depth, the prefill token's, is not used)");
  return out;
}

std::vector<std::vector<int32_t>> SliceExitTrace(const RecordedExitTrace& trace,
                                                 const std::vector<int64_t>& outputs) {
  std::vector<std::vector<int32_t>> out;
  out.reserve(outputs.size());
  const size_t n = trace.depths.size();
  size_t at = 0;
  for (int64_t len : outputs) {
    const auto k = static_cast<size_t>(std::max<int64_t>(1, len - 1));
    std::vector<int32_t> s(k);
    for (size_t i = 0; i < k; ++i, at = (at + 1) % n) s[i] = trace.depths[at];
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace fathom::bench
