#include <cstdio>

#include <nlohmann/json.hpp>

#include "cmd_requests.h"
#include "commands.h"
#include "engine_flags.h"
#include "exec/generate.h"
#include "flags.h"

namespace fathom::cli {

Result<std::optional<uint64_t>> ParseInitState(const std::string& v);  // cmd_logits.cc

namespace {

std::string Join(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

Result<ExitCriterion> ParseCriterion(const std::string& v) {
  if (v == "auto") return ExitCriterion::kAuto;
  if (v == "hazard") return ExitCriterion::kHazard;
  if (v == "latent-diff") return ExitCriterion::kLatentDiff;
  if (v == "kl") return ExitCriterion::kKl;
  return Status::Error("--exit-criterion: expected auto, hazard, latent-diff or kl, found '" + v + "'");
}

// The generated ids (and exit depths of a looped model) with prompt and decode speed.
void Print(const GenerateResult& res, const GenerateOptions& opt, bool looped, bool json) {
  const double decode_tps = res.decode_seconds > 0 ? static_cast<double>(res.decode_steps) / res.decode_seconds : 0;
  const double prompt_tps = res.prefill_seconds > 0 ? static_cast<double>(opt.prompt.size()) / res.prefill_seconds : 0;
  if (json) {
    nlohmann::json j = {{"output_ids", res.ids},
                        {"finish_reason", res.finish_reason},
                        {"prompt_tokens", opt.prompt.size()},
                        {"prompt_tokens_per_s", prompt_tps},
                        {"decode_tokens_per_s", decode_tps}};
    if (looped) j["exit_depths"] = res.exit_depths;
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("output ids: %s\n", Join(res.ids).c_str());
  if (looped) std::printf("exit depths: %s\n", Join(res.exit_depths).c_str());
  std::printf("finish reason: %s\n", res.finish_reason.c_str());
  std::printf("prompt: %zu tokens, %.1f tok/s; decode: %lld tokens, %.2f tok/s\n", opt.prompt.size(), prompt_tps,
              static_cast<long long>(res.decode_steps), decode_tps);
}

}  // namespace

int RunGenerate(const std::vector<std::string>& args) {
  // --requests FILE: many requests through the batched engine (cmd_requests.cc).
  for (const std::string& a : args)
    if (a == "--requests" || a.rfind("--requests=", 0) == 0) return RunGenerateRequests(args);
  std::string model_dir, prompt_text, init = "zero", criterion = "auto";
  std::string kv_dtype{KvDtypeName(GenerateOptions{}.kv_dtype)};
  int64_t max_tokens = 16, loops = 0, top_k = 0, seed = 0, threads = 0;
  double exit_threshold = -1, temperature = 0, top_p = 1;
  bool json = false, ignore_eos = false, lookahead = false;
  FlagSet flags(
      "fathom generate",
      "fathom generate --model DIR --prompt-ids 1,2,3 --max-tokens N [--loops R | --exit-threshold Q]\n"
      "                [--temperature T --top-p P --top-k K --seed S] [--lookahead] [--json]",
      "Generates tokens from a prompt and prints the ids, decode tokens/s and, for looped\n"
      "models, the exit depth (loop steps run) of every generated token. Prompt tokens run\n"
      "every loop step; each decode token leaves the loop where its exit policy says, and\n"
      "the KV slots it skipped hold its last state (the last-exited rule).");
  flags.String("--model", &model_dir, "Hugging Face model directory");
  flags.String("--prompt-ids", &prompt_text, "comma-separated prompt token ids");
  flags.Int("--max-tokens", &max_tokens, "tokens to generate (default 16)", 1, 1 << 20);
  flags.Int("--loops", &loops, "loop steps (default: the model's)", 1, 4096);
  flags.Double("--exit-threshold", &exit_threshold,
               "exit early: Ouro cumulative exit probability q, Huginn latent change (or KL)", 0, 1e9);
  flags.String("--exit-criterion", &criterion, "auto (default), hazard, latent-diff or kl");
  DeclareLookahead(flags, &lookahead);
  DeclareKvDtype(flags, &kv_dtype);
  flags.Double("--temperature", &temperature, "sampling temperature; 0 = greedy (default)", 0, 100);
  flags.Double("--top-p", &top_p, "nucleus sampling mass (default 1 = off)", 1e-6, 1);
  flags.Int("--top-k", &top_k, "keep the k most likely tokens (default 0 = off)", 0, 1 << 30);
  flags.Int("--seed", &seed, "sampling seed (default 0)", 0, INT64_MAX);
  flags.String("--init-state", &init, "Huginn's initial state: zero (default) or seed:N");
  flags.Bool("--ignore-eos", &ignore_eos, "keep generating after the end-of-sequence token");
  DeclareThreads(flags, &threads);
  flags.Bool("--json", &json, "print one JSON object");
  for (const char* r : {"--model", "--prompt-ids"}) flags.Require(r);
  if (Status s = flags.Parse(args); !s.ok()) return Fail("generate", s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (flags.Seen("--loops") && flags.Seen("--exit-threshold"))
    return Fail("generate", "--loops and --exit-threshold are exclusive", 2);
  GenerateOptions opt;
  auto prompt = ParseIdList("--prompt-ids", prompt_text);
  if (!prompt.ok()) return Fail("generate", prompt.status().message(), 2);
  auto init_seed = ParseInitState(init);
  if (!init_seed.ok()) return Fail("generate", init_seed.status().message(), 2);
  auto crit = ParseCriterion(criterion);
  if (!crit.ok()) return Fail("generate", crit.status().message(), 2);
  auto kv = ParseKvDtypeFlag(kv_dtype);
  if (!kv.ok()) return Fail("generate", kv.status().message(), 2);
  opt.kv_dtype = *kv;
  opt.prompt = *prompt;
  opt.max_tokens = static_cast<int32_t>(max_tokens);
  opt.loops = static_cast<int32_t>(loops);
  if (flags.Seen("--exit-threshold")) opt.exit_threshold = exit_threshold;
  opt.criterion = *crit;
  opt.exit_lookahead = lookahead;
  opt.sampling = {static_cast<float>(temperature), static_cast<int32_t>(top_k),
                  static_cast<float>(top_p)};
  opt.seed = static_cast<uint64_t>(seed);
  opt.init_seed = *init_seed;
  opt.stop_at_eos = !ignore_eos;
  ApplyThreads(threads);

  auto model = Model::Load(model_dir);
  if (!model.ok()) return Fail("generate", model.status().message(), 1);
  auto res = Generate(**model, opt);
  if (!res.ok()) return Fail("generate", res.status().message(), 1);
  Print(*res, opt, (*model)->spec().loop.looped, json);
  return 0;
}

}  // namespace fathom::cli
