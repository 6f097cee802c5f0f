#include <cstdio>

#include <nlohmann/json.hpp>

#include "cmd_requests.h"
#include "commands.h"
#include "engine_flags.h"
#include "exec/generate.h"
#include "flags.h"
#include "generate_text.h"
#include "tokenizer/tokenizer.h"

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

// What `fathom generate` was asked for on its command line (one request).
struct GenerateFlags {
  std::string model_dir, prompt_ids, prompt, init = "zero", criterion = "auto", color = "auto";
  std::string kv_dtype{KvDtypeName(GenerateOptions{}.kv_dtype)};
  LoadFlags load;
  int64_t max_tokens = 16, loops = 0, top_k = 0, seed = 0, threads = 0;
  double exit_threshold = -1, temperature = 0, top_p = 1;
  bool json = false, ignore_eos = false, lookahead = false;

  void Declare(FlagSet& flags) {
    flags.String("--model", &model_dir, "Hugging Face model directory");
    flags.String("--prompt-ids", &prompt_ids, "comma-separated prompt token ids");
    flags.String("--prompt", &prompt, "prompt text, encoded with the model's tokenizer.json; the output is text");
    flags.Int("--max-tokens", &max_tokens, "tokens to generate (default 16)", 1, 1 << 20);
    flags.Int("--loops", &loops, "loop steps (default: the model's)", 1, 4096);
    flags.Double("--exit-threshold", &exit_threshold,
                 "exit early: Ouro cumulative exit probability q, Huginn latent change (or KL)", 0, 1e9);
    flags.String("--exit-criterion", &criterion, "auto (default), hazard, latent-diff or kl");
    DeclareLookahead(flags, &lookahead);
    DeclareKvDtype(flags, &kv_dtype);
    load.Declare(flags);
    flags.Double("--temperature", &temperature, "sampling temperature; 0 = greedy (default)", 0, 100);
    flags.Double("--top-p", &top_p, "nucleus sampling mass (default 1 = off)", 1e-6, 1);
    flags.Int("--top-k", &top_k, "keep the k most likely tokens (default 0 = off)", 0, 1 << 30);
    flags.Int("--seed", &seed, "sampling seed (default 0)", 0, INT64_MAX);
    flags.String("--init-state", &init, "Huginn's initial state: zero (default) or seed:N");
    flags.Bool("--ignore-eos", &ignore_eos, "keep generating after the end-of-sequence token");
    flags.String("--color", &color, "--prompt's text coloured by exit depth: auto (a terminal), always, never");
    DeclareThreads(flags, &threads);
    flags.Bool("--json", &json, "print one JSON object");
    flags.Require("--model");
  }

  // The options of Generate; the prompt is set by the caller (ids or encoded text).
  Result<GenerateOptions> Options(const FlagSet& flags) const {
    if (flags.Seen("--loops") && flags.Seen("--exit-threshold"))
      return Status::Error("--loops and --exit-threshold are exclusive");
    if (flags.Seen("--prompt") == flags.Seen("--prompt-ids"))
      return Status::Error("give exactly one of --prompt-ids and --prompt");
    GenerateOptions opt;
    FATHOM_ASSIGN_OR_RETURN(opt.init_seed, ParseInitState(init));
    FATHOM_ASSIGN_OR_RETURN(opt.criterion, ParseCriterion(criterion));
    FATHOM_ASSIGN_OR_RETURN(opt.kv_dtype, ParseKvDtypeFlag(kv_dtype));
    FATHOM_RETURN_IF_ERROR(ParseColorMode(color).status());
    opt.max_tokens = static_cast<int32_t>(max_tokens);
    opt.loops = static_cast<int32_t>(loops);
    if (flags.Seen("--exit-threshold")) opt.exit_threshold = exit_threshold;
    opt.exit_lookahead = lookahead;
    opt.sampling = {static_cast<float>(temperature), static_cast<int32_t>(top_k), static_cast<float>(top_p)};
    opt.seed = static_cast<uint64_t>(seed);
    opt.stop_at_eos = !ignore_eos;
    return opt;
  }
};

// The generated ids (and exit depths of a looped model) with prompt and decode speed;
// with a tokenizer (--prompt), the text too.
void Print(const GenerateResult& res, const GenerateOptions& opt, const Model& model, const Tokenizer* tok,
           const GenerateFlags& f) {
  const double decode_tps = res.decode_seconds > 0 ? static_cast<double>(res.decode_steps) / res.decode_seconds : 0;
  const double prompt_tps = res.prefill_seconds > 0 ? static_cast<double>(opt.prompt.size()) / res.prefill_seconds : 0;
  const bool looped = model.spec().loop.looped;
  Result<int32_t> loops = ResolveLoops(model.spec(), opt.loops);
  const int32_t max_depth = loops.ok() ? *loops : 1;
  if (f.json) {
    nlohmann::json j = {{"output_ids", res.ids},
                        {"finish_reason", res.finish_reason},
                        {"prompt_tokens", opt.prompt.size()},
                        {"prompt_tokens_per_s", prompt_tps},
                        {"decode_tokens_per_s", decode_tps}};
    if (looped) j["exit_depths"] = res.exit_depths;
    if (tok) j["text"] = RenderDepthText(*tok, res.ids, {}, max_depth, false);
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  Result<ColorMode> color = ParseColorMode(f.color);  // checked in Options
  if (tok && color.ok() && UseColor(*color)) {
    // A terminal: the prompt, then the continuation coloured by depth, then the legend.
    std::printf("%s%s\n", f.prompt.c_str(),
                RenderDepthText(*tok, res.ids, res.exit_depths, max_depth, true).c_str());
    if (looped) std::printf("%s\n", DepthLegend(max_depth).c_str());
  } else {
    if (tok) std::printf("text: %s\n", RenderDepthText(*tok, res.ids, {}, max_depth, false).c_str());
    std::printf("output ids: %s\n", Join(res.ids).c_str());
    if (looped) std::printf("exit depths: %s\n", Join(res.exit_depths).c_str());
  }
  std::printf("finish reason: %s\n", res.finish_reason.c_str());
  std::printf("prompt: %zu tokens, %.1f tok/s; decode: %lld tokens, %.2f tok/s\n", opt.prompt.size(), prompt_tps,
              static_cast<long long>(res.decode_steps), decode_tps);
}

}  // namespace

int RunGenerate(const std::vector<std::string>& args) {
  // --requests FILE: many requests through the batched engine (cmd_requests.cc).
  for (const std::string& a : args)
    if (a == "--requests" || a.rfind("--requests=", 0) == 0) return RunGenerateRequests(args);
  GenerateFlags f;
  FlagSet flags(
      "fathom generate",
      "fathom generate --model DIR (--prompt-ids 1,2,3 | --prompt TEXT) --max-tokens N\n"
      "                [--loops R | --exit-threshold Q] [--temperature T --top-p P --top-k K --seed S]\n"
      "                [--lookahead] [--weights checkpoint|int8|w8a8|int4] [--batch-invariant] [--color auto|always|never] [--json]",
      "Generates tokens from a prompt and prints the ids (the text, with --prompt), decode\n"
      "tokens/s and, for looped models, the exit depth (loop steps run) of every generated\n"
      "token; in a terminal, --prompt's text is coloured by exit depth. Prompt tokens run\n"
      "every loop step; each decode token leaves the loop where its exit policy says, and\n"
      "the KV slots it skipped hold its last state (the last-exited rule).");
  f.Declare(flags);
  if (Status s = flags.Parse(args); !s.ok()) return Fail("generate", s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  auto opt = f.Options(flags);
  if (!opt.ok()) return Fail("generate", opt.status().message(), 2);
  std::unique_ptr<Tokenizer> tok;
  if (flags.Seen("--prompt")) {
    auto loaded = Tokenizer::Load(f.model_dir);
    if (!loaded.ok()) return Fail("generate", "--prompt needs the model's tokenizer: " + loaded.status().message(), 1);
    tok = std::move(*loaded);
    auto ids = tok->Encode(f.prompt, /*add_special_tokens=*/true);
    if (!ids.ok()) return Fail("generate", "--prompt: " + ids.status().message(), 1);
    opt->prompt = *ids;
  } else {
    auto ids = ParseIdList("--prompt-ids", f.prompt_ids);
    if (!ids.ok()) return Fail("generate", ids.status().message(), 2);
    opt->prompt = *ids;
  }
  auto load = f.load.Options();
  if (!load.ok()) return Fail("generate", load.status().message(), 2);
  ApplyThreads(f.threads);
  auto model = Model::Load(f.model_dir, *load);
  if (!model.ok()) return Fail("generate", model.status().message(), 1);
  auto res = Generate(**model, *opt);
  if (!res.ok()) return Fail("generate", res.status().message(), 1);
  Print(*res, *opt, **model, tok.get(), f);
  return 0;
}

}  // namespace fathom::cli
