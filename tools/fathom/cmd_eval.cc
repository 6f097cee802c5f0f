// fathom eval: perplexity under an exit policy as served (src/eval/perplexity.h), and
// `fathom eval sweep`: the same for a list of settings, as a table and a plot.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cmd_eval.h"
#include "commands.h"
#include "eval/eval_input.h"

namespace fathom::cli {

void EvalCommon::Declare(FlagSet& flags) {
  flags.String("--model", &model_dir, "Hugging Face model directory");
  flags.String("--text-file", &text_file, "text to score, encoded with the model directory's tokenizer.json");
  flags.String("--ids-file", &ids_file, "token ids to score instead (separated by spaces, newlines or commas)");
  flags.Bool("--no-special", &no_special, "--text-file: do not add the tokenizer's special tokens (e.g. bos)");
  flags.Int("--context", &context,
            "window length: the ids are cut into non-overlapping windows of N tokens, each its own\n"
            "      sequence; the first token of a window is only context (default: the model's\n"
            "      positions, at most 1024)",
            2, 1 << 24);
  flags.Int("--batch", &batch, "windows evaluated side by side (default " + std::to_string(batch) + ")", 1, 4096);
  engine.Declare(flags);
  load.Declare(flags);
  DeclareThreads(flags, &threads);
  flags.Require("--model");
}

Status EvalCommon::CheckInput(const FlagSet& flags) const {
  const bool text = flags.Seen("--text-file"), ids = flags.Seen("--ids-file");
  if (text == ids) return Status::Error("give exactly one of --text-file and --ids-file");
  if (ids && no_special) return Status::Error("--no-special applies to --text-file only");
  return load.Options().status();
}

Result<std::vector<int32_t>> EvalCommon::Ids() const {
  if (!ids_file.empty()) return ReadIdsFile(ids_file);
  return ReadTextIds(model_dir, text_file, !no_special);
}

Result<std::unique_ptr<Model>> EvalCommon::LoadModel() const {
  FATHOM_ASSIGN_OR_RETURN(LoadOptions options, load.Options());
  return Model::Load(model_dir, options);
}

Result<PerplexityOptions> EvalCommon::Options() const {
  FATHOM_ASSIGN_OR_RETURN(EngineOptions e, engine.Options());
  PerplexityOptions o;
  o.layout = e.layout;
  o.shared_after = e.shared_after;
  o.lookahead = e.lookahead;
  o.kv_dtype = e.kv_dtype;
  o.context = context;
  o.batch = static_cast<int32_t>(batch);
  return o;
}

namespace {

Result<ExitSpec::Kind> ParseCriterion(const std::string& v) {
  if (v == "auto") return ExitSpec::Kind::kThreshold;
  if (v == "hazard") return ExitSpec::Kind::kHazard;
  if (v == "latent-diff") return ExitSpec::Kind::kLatentDiff;
  if (v == "kl") return ExitSpec::Kind::kKl;
  return Status::Error("--exit-criterion: expected auto, hazard, latent-diff or kl, found '" + v + "'");
}

std::string PolicyText(const PerplexityOptions& o, const PerplexityResult& r, const std::string& criterion) {
  if (r.loops == 0)
    return o.budget ? "L2A gates at budget " + std::to_string(*o.budget) : std::string("dense (every layer)");
  std::string s = std::to_string(r.loops) + " loop steps";
  if (o.exit.kind == ExitSpec::Kind::kNone) return s + ", every token at full depth";
  s += ", exit threshold " + std::to_string(o.exit.threshold) + " (" + criterion + ")";
  if (o.budget) s += " at budget " + std::to_string(*o.budget);
  return s;
}

}  // namespace

nlohmann::json EvalResultJson(const PerplexityOptions& o, const PerplexityResult& r) {
  nlohmann::json j = {{"perplexity", r.perplexity},
                      {"mean_nll", r.mean_nll},
                      {"tokens", r.tokens},
                      {"predictions", r.predictions},
                      {"windows", r.windows},
                      {"context", r.context},
                      {"loops", r.loops},
                      {"mean_depth", r.mean_depth},
                      {"core_steps", r.core_steps},
                      {"depth_histogram", r.depth_histogram},
                      {"layers_per_token", r.layers_per_token},
                      {"kv_bytes_per_decode_token", r.kv_bytes_per_decode_token},
                      {"kv_bytes_per_prompt_token", r.kv_bytes_per_prompt_token},
                      {"layout", std::string(KvLayoutName(o.layout))},
                      {"kv_dtype", std::string(KvDtypeName(o.kv_dtype))},
                      {"seconds", r.seconds},
                      {"cpu_seconds", r.cpu_seconds},
                      {"tokens_per_s", r.tokens_per_s}};
  j["exit_threshold"] = o.exit.kind == ExitSpec::Kind::kNone ? nlohmann::json() : nlohmann::json(o.exit.threshold);
  j["budget"] = o.budget ? nlohmann::json(*o.budget) : nlohmann::json();
  j["l2a"] = r.matmul_fraction > 0 ? nlohmann::json{{"attention_fraction", r.attention_fraction},
                                                    {"mlp_fraction", r.mlp_fraction},
                                                    {"heads_fraction", r.heads_fraction},
                                                    {"matmul_fraction", r.matmul_fraction}}
                                   : nlohmann::json();
  return j;
}

namespace {

void PrintText(const PerplexityOptions& o, const PerplexityResult& r, const std::string& criterion) {
  std::printf("policy: %s; KV layout %s, %s\n", PolicyText(o, r, criterion).c_str(),
              std::string(KvLayoutName(o.layout)).c_str(), std::string(KvDtypeName(o.kv_dtype)).c_str());
  std::printf("tokens: %lld in %lld non-overlapping windows of up to %lld; %lld predictions\n",
              static_cast<long long>(r.tokens), static_cast<long long>(r.windows),
              static_cast<long long>(r.context), static_cast<long long>(r.predictions));
  std::printf("perplexity: %.6g (mean NLL %.6f nats)\n", r.perplexity, r.mean_nll);
  if (r.loops > 0) {
    std::printf("mean depth: %.4f core steps per token (of %d); by depth:", r.mean_depth, r.loops);
    for (size_t d = 1; d < r.depth_histogram.size(); ++d)
      std::printf(" %zu: %lld", d, static_cast<long long>(r.depth_histogram[d]));
    std::printf("\n");
  }
  std::printf("layers per token: %.3f\n", r.layers_per_token);
  if (r.matmul_fraction > 0)
    std::printf("L2A gates: attention run %.4f, MLP run %.4f, heads kept %.4f of (token, layer); layer matmul flops %.4f of dense\n",
                r.attention_fraction, r.mlp_fraction, r.heads_fraction, r.matmul_fraction);
  std::printf("KV: %zu bytes per decode token, %zu per prompt token\n", r.kv_bytes_per_decode_token,
              r.kv_bytes_per_prompt_token);
  std::printf("speed: %.1f tokens/s (%.3f s wall, %.3f s process CPU)\n", r.tokens_per_s, r.seconds, r.cpu_seconds);
}

// Per-prediction NLLs (f32) and depths (i32), raw little-endian, in text order.
Status WriteTokens(const PerplexityResult& r, const std::string& nll_out, const std::string& depths_out) {
  auto write = [](const std::string& path, const char* flag, const void* data, size_t bytes) -> Status {
    if (path.empty()) return Status::Ok();
    std::ofstream f(path, std::ios::binary);
    if (!f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes)))
      return Status::Error(std::string(flag) + ": cannot write " + path);
    return Status::Ok();
  };
  FATHOM_RETURN_IF_ERROR(write(nll_out, "--nll-out", r.nll.data(), r.nll.size() * sizeof(float)));
  return write(depths_out, "--depths-out", r.depths.data(), r.depths.size() * sizeof(int32_t));
}

constexpr const char* kEvalHelp =
    "Perplexity of a model on a text under an exit policy, as served: teacher-forced, token by\n"
    "token through the engine's KV cache (--layout), each token leaving the loop at its own\n"
    "exit depth. No policy flag: every token runs the model's loop count. --loops R: every token\n"
    "runs R steps. --exit-threshold Q: each decode token exits by the model's signal (Ouro:\n"
    "cumulative exit probability >= Q; Huginn: latent change < Q), at --budget B if given\n"
    "(Q*B, Q/B), after at most the loop count. An L2A gate checkpoint (docs/L2A_FORMAT.md) runs\n"
    "every token's routers at --budget B (default 1) and also reports the fraction of attention,\n"
    "MLP, heads and layer matmul flops its gates ran.\n"
    "Windows: non-overlapping, --context tokens each; the first token of a window is prefilled\n"
    "(every loop step) and predicts the second; each later token is a decode token. Reports\n"
    "perplexity, mean depth (core steps per token), layers per token, KV bytes per token and\n"
    "tokens/s with process CPU time. `fathom eval sweep --help`: a table over settings.";

}  // namespace

int RunEval(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "sweep") return RunEvalSweep({args.begin() + 1, args.end()});
  EvalCommon common;
  std::string criterion = "auto", nll_out, depths_out;
  int64_t loops = 0;
  double threshold = 0, budget = 1;
  bool json = false;
  FlagSet flags("fathom eval",
                "fathom eval --model DIR (--text-file F | --ids-file F) [--loops R] [--exit-threshold Q] [--budget B]\n"
                "            [--context N] [--layout NAME] [--json]",
                kEvalHelp);
  common.Declare(flags);
  flags.Int("--loops", &loops, "loop steps of every token, or with --exit-threshold the most (default: the model's)",
            1, 4096);
  flags.Double("--exit-threshold", &threshold, "exit early by the model's signal at this threshold", 0, 1e9);
  flags.String("--exit-criterion", &criterion, "auto (default: Ouro hazard, Huginn latent-diff), hazard, latent-diff, kl");
  flags.Double("--budget", &budget, "budget b in [0, 1]: scales --exit-threshold (q*b, t/b); L2A: the routers' b", 0, 1);
  flags.String("--nll-out", &nll_out, "write each prediction's NLL (f32, text order) to this file");
  flags.String("--depths-out", &depths_out, "write each prediction's depth (int32, text order) to this file");
  flags.Bool("--json", &json, "print one JSON object");
  if (Status s = flags.Parse(args); !s.ok()) return Fail("eval", s.message(), 2);
  if (flags.help_requested()) return std::fputs(flags.Help().c_str(), stdout), 0;
  if (Status s = common.CheckInput(flags); !s.ok()) return Fail("eval", s.message(), 2);
  auto kind = ParseCriterion(criterion);
  if (!kind.ok()) return Fail("eval", kind.status().message(), 2);
  auto opt = common.Options();
  if (!opt.ok()) return Fail("eval", opt.status().message(), 2);
  opt->loops = static_cast<int32_t>(loops);
  if (flags.Seen("--exit-threshold")) opt->exit.kind = *kind, opt->exit.threshold = threshold;
  if (flags.Seen("--budget")) opt->budget = budget;
  opt->keep_tokens = !nll_out.empty() || !depths_out.empty();
  ApplyThreads(common.threads);

  auto ids = common.Ids();
  if (!ids.ok()) return Fail("eval", ids.status().message(), 1);
  auto model = common.LoadModel();
  if (!model.ok()) return Fail("eval", model.status().message(), 1);
  auto res = EvaluatePerplexity(**model, *ids, *opt);
  if (!res.ok()) return Fail("eval", res.status().message(), 1);
  if (Status s = WriteTokens(*res, nll_out, depths_out); !s.ok()) return Fail("eval", s.message(), 1);
  if (json) {
    std::printf("%s\n", EvalResultJson(*opt, *res).dump().c_str());
  } else {
    PrintText(*opt, *res, criterion);
  }
  return 0;
}

}  // namespace fathom::cli
