#include "exec/generate.h"

#include <chrono>
#include <memory>

#include "exec/runner.h"

namespace fathom {
namespace {

double Now() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

Result<std::unique_ptr<ExitPolicy>> MakePolicy(const ModelSpec& spec, const GenerateOptions& opt) {
  if (!opt.exit_threshold) return std::unique_ptr<ExitPolicy>();
  if (!spec.loop.looped)
    return Status::Error("exit threshold: model_type '" + spec.model_type + "' is not looped");
  ExitCriterion c = opt.criterion;
  if (c == ExitCriterion::kAuto)
    c = spec.loop.exit_signal == ExitSignal::kGateHazard ? ExitCriterion::kHazard
                                                          : ExitCriterion::kLatentDiff;
  const double t = *opt.exit_threshold;
  switch (c) {
    case ExitCriterion::kHazard:
      if (spec.loop.exit_signal != ExitSignal::kGateHazard)
        return Status::Error("exit criterion 'hazard' needs an exit gate (Ouro)");
      return std::unique_ptr<ExitPolicy>(std::make_unique<CumulativeHazardExit>(t));
    case ExitCriterion::kLatentDiff:
      return std::unique_ptr<ExitPolicy>(std::make_unique<LatentDiffExit>(t));
    case ExitCriterion::kKl:
      return std::unique_ptr<ExitPolicy>(std::make_unique<KlExit>(t));
    case ExitCriterion::kAuto: break;
  }
  return Status::Error("internal: unresolved exit criterion");
}

}  // namespace

Result<int32_t> ResolveLoops(const ModelSpec& spec, int32_t loops) {
  if (!spec.loop.looped) {
    if (loops > 0)
      return Status::Error("loops: model_type '" + spec.model_type + "' is not a looped model");
    return 0;
  }
  const int32_t r = loops > 0 ? loops : spec.loop.default_loops;
  if (r < 1 || r > spec.loop.max_loops)
    return Status::Error("loops: " + std::to_string(r) + " is outside [1, " +
                         std::to_string(spec.loop.max_loops) + "] for model_type '" +
                         spec.model_type + "'");
  return r;
}

Result<GenerateResult> Generate(const Model& model, const GenerateOptions& opt) {
  const ModelSpec& spec = model.spec();
  if (opt.prompt.empty()) return Status::Error("prompt: no token ids");
  if (opt.max_tokens < 1) return Status::Error("max_tokens must be at least 1");
  for (size_t i = 0; i < opt.prompt.size(); ++i)
    if (opt.prompt[i] < 0 || opt.prompt[i] >= spec.vocab)
      return Status::Error("prompt: token " + std::to_string(i) + " has id " +
                           std::to_string(opt.prompt[i]) + ", outside the vocabulary [0, " +
                           std::to_string(spec.vocab) + ")");
  const int64_t total = static_cast<int64_t>(opt.prompt.size()) + opt.max_tokens;
  if (total > model.rope().max_positions())
    return Status::Error("prompt (" + std::to_string(opt.prompt.size()) + " tokens) plus max_tokens (" +
                         std::to_string(opt.max_tokens) + ") exceeds the model's " +
                         std::to_string(model.rope().max_positions()) + " positions");
  FATHOM_ASSIGN_OR_RETURN(int32_t loops, ResolveLoops(spec, opt.loops));
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<ExitPolicy> policy, MakePolicy(spec, opt));

  Runner runner(model);
  SequenceKv kv(spec, loops, total);
  Sampler sampler(opt.seed);
  GenerateResult res;
  ForwardResult fr;
  ForwardRequest req;
  req.loops = loops;
  req.random_init = opt.init_seed;

  // Prefill, chunk by chunk, at full depth.
  const double t0 = Now();
  const auto n_prompt = static_cast<int64_t>(opt.prompt.size());
  for (int64_t p = 0; p < n_prompt; p += opt.prefill_chunk) {
    req.ids = opt.prompt.data() + p;
    req.n = std::min(opt.prefill_chunk, n_prompt - p);
    req.pos0 = p;
    FATHOM_RETURN_IF_ERROR(runner.Forward(kv, req, &fr));
  }
  res.prefill_seconds = Now() - t0;

  // Decode.
  req.exit_policy = policy.get();
  req.compute_kl = policy && policy->needs_kl();
  const double t1 = Now();
  int32_t token = sampler.Sample(fr.logits.data(), spec.vocab, opt.sampling);
  res.ids.push_back(token);
  res.exit_depths.push_back(fr.steps_run);
  res.finish_reason = "length";
  while (static_cast<int32_t>(res.ids.size()) < opt.max_tokens) {
    if (opt.stop_at_eos && token == spec.eos_id) {
      res.finish_reason = "stop";
      break;
    }
    req.ids = &token;
    req.n = 1;
    req.pos0 = n_prompt + static_cast<int64_t>(res.ids.size()) - 1;
    FATHOM_RETURN_IF_ERROR(runner.Forward(kv, req, &fr));
    ++res.decode_steps;
    token = sampler.Sample(fr.logits.data(), spec.vocab, opt.sampling);
    res.ids.push_back(token);
    res.exit_depths.push_back(fr.steps_run);
  }
  if (opt.stop_at_eos && token == spec.eos_id) res.finish_reason = "stop";
  res.decode_seconds = Now() - t1;
  return res;
}

}  // namespace fathom
