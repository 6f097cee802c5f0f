// `generate --requests` files: one JSON request per line (cmd_requests.h). Apart from the
// command so that the parser builds without the engine (tests/fuzz fuzzes it).
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cmd_requests.h"

namespace fathom::cli {
namespace {

using nlohmann::json;

Status FieldError(int64_t line, const std::string& field, const std::string& what) {
  return Status::Error("line " + std::to_string(line) + ": field '" + field + "': " + what);
}

Result<int64_t> Int(const json& j, int64_t line, const std::string& f, int64_t lo, int64_t hi) {
  if (!j.is_number_integer()) return FieldError(line, f, "expected an integer, found " + j.dump());
  const auto v = j.get<int64_t>();
  if (v < lo || v > hi)
    return FieldError(line, f, std::to_string(v) + " outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

Result<double> Num(const json& j, int64_t line, const std::string& f, double lo, double hi) {
  if (!j.is_number()) return FieldError(line, f, "expected a number, found " + j.dump());
  const auto v = j.get<double>();
  if (!(v >= lo && v <= hi)) return FieldError(line, f, j.dump() + " outside the accepted range");
  return v;
}

Result<std::vector<int32_t>> Ids(const json& j, int64_t line, const std::string& f) {
  if (!j.is_array()) return FieldError(line, f, "expected an array of integers");
  std::vector<int32_t> out;
  for (const json& e : j) {
    if (!e.is_number_integer()) return FieldError(line, f, "expected integers, found " + e.dump());
    const auto v = e.get<int64_t>();
    if (v < 0 || v > INT32_MAX) return FieldError(line, f, "id " + std::to_string(v) + " out of range");
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

// The replayed and seeded exit policies' fields: exit_depth, exit_trace, exit_mean,
// exit_min_depth, exit_seed (exit_threshold and exit_criterion are ParseOne's).
Status ExitField(const std::string& k, const json& v, int64_t line, ExitSpec* exit) {
  if (k == "exit_depth") {
    FATHOM_ASSIGN_OR_RETURN(int64_t n, Int(v, line, k, 1, 4096));
    exit->kind = ExitSpec::Kind::kFixed;
    exit->depth = static_cast<int32_t>(n);
  } else if (k == "exit_trace") {
    FATHOM_ASSIGN_OR_RETURN(exit->trace, Ids(v, line, k));
    exit->kind = ExitSpec::Kind::kTrace;
  } else if (k == "exit_mean") {
    FATHOM_ASSIGN_OR_RETURN(exit->mean, Num(v, line, k, 0, 4096));
    exit->kind = ExitSpec::Kind::kRandom;
  } else if (k == "exit_min_depth") {
    FATHOM_ASSIGN_OR_RETURN(int64_t n, Int(v, line, k, 1, 4096));
    exit->min_depth = static_cast<int32_t>(n);
  } else if (k == "exit_seed") {
    FATHOM_ASSIGN_OR_RETURN(int64_t n, Int(v, line, k, 0, INT64_MAX));
    exit->seed = static_cast<uint64_t>(n);
  } else {
    return FieldError(line, k, "unknown field");
  }
  return Status::Ok();
}

Result<RequestSpec> ParseOne(const json& j, int64_t line) {
  if (!j.is_object()) return Status::Error("line " + std::to_string(line) + ": expected a JSON object");
  RequestSpec r;
  r.name = "line" + std::to_string(line);
  bool has_threshold = false;
  std::string criterion = "auto";
  double threshold = 0;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "id") {
      if (v.is_string()) r.name = v.get<std::string>();
      else if (v.is_number_integer()) r.name = std::to_string(v.get<int64_t>());
      else return FieldError(line, k, "expected a string or an integer");
    } else if (k == "prompt_ids") {
      FATHOM_ASSIGN_OR_RETURN(r.prompt, Ids(v, line, k));
    } else if (k == "stop_ids") {
      FATHOM_ASSIGN_OR_RETURN(r.stop_ids, Ids(v, line, k));
    } else if (k == "max_tokens") {
      FATHOM_ASSIGN_OR_RETURN(int64_t n, Int(v, line, k, 1, 1 << 20));
      r.max_tokens = static_cast<int32_t>(n);
    } else if (k == "temperature") {
      FATHOM_ASSIGN_OR_RETURN(double t, Num(v, line, k, 0, 100));
      r.sampling.temperature = static_cast<float>(t);
    } else if (k == "top_p") {
      FATHOM_ASSIGN_OR_RETURN(double t, Num(v, line, k, 1e-6, 1));
      r.sampling.top_p = static_cast<float>(t);
    } else if (k == "top_k") {
      FATHOM_ASSIGN_OR_RETURN(int64_t n, Int(v, line, k, 0, 1 << 30));
      r.sampling.top_k = static_cast<int32_t>(n);
    } else if (k == "seed") {
      FATHOM_ASSIGN_OR_RETURN(int64_t n, Int(v, line, k, 0, INT64_MAX));
      r.seed = static_cast<uint64_t>(n);
    } else if (k == "init_seed") {
      FATHOM_ASSIGN_OR_RETURN(int64_t n, Int(v, line, k, 0, INT64_MAX));
      r.init_seed = static_cast<uint64_t>(n);
    } else if (k == "loops") {
      FATHOM_ASSIGN_OR_RETURN(int64_t n, Int(v, line, k, 1, 4096));
      r.loops = static_cast<int32_t>(n);
    } else if (k == "ignore_eos") {
      if (!v.is_boolean()) return FieldError(line, k, "expected true or false");
      r.stop_at_eos = !v.get<bool>();
    } else if (k == "budget") {
      FATHOM_ASSIGN_OR_RETURN(double b, Num(v, line, k, 0, 1));
      r.budget = b;
    } else if (k == "deadline_ms") {
      FATHOM_ASSIGN_OR_RETURN(double ms, Num(v, line, k, 1e-3, 1e12));
      r.deadline_s = ms / 1000;
    } else if (k == "service_tier") {
      if (!v.is_string()) return FieldError(line, k, "expected priority, default or flex");
      auto tier = ParseServiceTier(v.get<std::string>());
      if (!tier.ok()) return FieldError(line, k, "'" + v.get<std::string>() + "' is not one of priority, default, flex, auto");
      r.tier = *tier;
    } else if (k == "exit_threshold") {
      FATHOM_ASSIGN_OR_RETURN(threshold, Num(v, line, k, 0, 1e9));
      has_threshold = true;
    } else if (k == "exit_criterion") {
      if (!v.is_string()) return FieldError(line, k, "expected auto, hazard, latent-diff or kl");
      criterion = v.get<std::string>();
      if (criterion != "auto" && criterion != "hazard" && criterion != "latent-diff" && criterion != "kl")
        return FieldError(line, k, "expected auto, hazard, latent-diff or kl, found '" + criterion + "'");
    } else if (k.rfind("exit_", 0) == 0) {
      FATHOM_RETURN_IF_ERROR(ExitField(k, v, line, &r.exit));
    } else {
      return FieldError(line, k, "unknown field");
    }
  }
  if (!j.contains("prompt_ids")) return FieldError(line, "prompt_ids", "missing");
  if (has_threshold) {
    if (r.exit.kind != ExitSpec::Kind::kNone)
      return FieldError(line, "exit_threshold", "combined with another exit policy");
    r.exit.threshold = threshold;
    r.exit.kind = criterion == "hazard"        ? ExitSpec::Kind::kHazard
                  : criterion == "latent-diff" ? ExitSpec::Kind::kLatentDiff
                  : criterion == "kl"          ? ExitSpec::Kind::kKl
                                               : ExitSpec::Kind::kThreshold;
  }
  return r;
}

}  // namespace

Result<std::vector<RequestSpec>> ParseRequests(const std::string& text) {
  std::vector<RequestSpec> out;
  std::istringstream in(text);
  std::string s;
  for (int64_t line = 1; std::getline(in, s); ++line) {
    if (s.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(s, nullptr, false);
    if (j.is_discarded()) return Status::Error("line " + std::to_string(line) + ": not valid JSON");
    FATHOM_ASSIGN_OR_RETURN(RequestSpec r, ParseOne(j, line));
    out.push_back(std::move(r));
  }
  if (out.empty()) return Status::Error("no requests");
  return out;
}

}  // namespace fathom::cli
