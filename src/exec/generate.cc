#include "exec/generate.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "exec/exit_spec.h"
#include "exec/kv_setup.h"
#include "exec/stage_runner.h"

namespace fathom {
namespace {

double Now() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// generate's threshold and criterion as an ExitSpec, for the one factory (exit_spec.h).
Result<std::unique_ptr<ExitPolicy>> MakePolicy(const ModelSpec& spec, const GenerateOptions& opt,
                                               int32_t loops) {
  if (!opt.exit_threshold) return std::unique_ptr<ExitPolicy>();
  ExitSpec exit;
  exit.threshold = *opt.exit_threshold;
  switch (opt.criterion) {
    case ExitCriterion::kAuto: exit.kind = ExitSpec::Kind::kThreshold; break;
    case ExitCriterion::kHazard: exit.kind = ExitSpec::Kind::kHazard; break;
    case ExitCriterion::kLatentDiff: exit.kind = ExitSpec::Kind::kLatentDiff; break;
    case ExitCriterion::kKl: exit.kind = ExitSpec::Kind::kKl; break;
  }
  return MakeExitPolicy(spec, exit, loops, opt.exit_lookahead);
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
  const auto n_prompt = static_cast<int64_t>(opt.prompt.size());
  const int64_t total = n_prompt + opt.max_tokens;
  if (total > model.rope().max_positions())
    return Status::Error("prompt (" + std::to_string(n_prompt) + " tokens) plus max_tokens (" +
                         std::to_string(opt.max_tokens) + ") exceeds the model's " +
                         std::to_string(model.rope().max_positions()) + " positions");
  FATHOM_ASSIGN_OR_RETURN(int32_t loops, ResolveLoops(spec, opt.loops));
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<ExitPolicy> own_policy, MakePolicy(spec, opt, loops));
  ExitPolicy* policy = opt.exit_policy ? opt.exit_policy.get() : own_policy.get();
  const int32_t prompt_loops = opt.prompt_loops > 0 ? opt.prompt_loops : loops;
  if (opt.prompt_loops < 0 || prompt_loops > loops || (opt.prompt_loops != 0 && !spec.loop.looped))
    return Status::Error("prompt_loops: " + std::to_string(opt.prompt_loops) + " is outside [1, " +
                         std::to_string(loops) + "] (the request's loops; looped models only)");

  // KV for the whole sequence: every physical layer may hold every position.
  const int32_t block = 16;
  FATHOM_ASSIGN_OR_RETURN(KvLayerTable table, KvLayerTable::Build(KvShapeOf(spec, loops),
                                                                  opt.layout, opt.shared_after));
  const int64_t blocks = table.num_physical_layers() * ((total + block - 1) / block);
  FATHOM_ASSIGN_OR_RETURN(auto kv, MakeKvManager(spec, loops, opt.layout, opt.shared_after, blocks, block,
                                                   opt.kv_dtype));
  // One sequence: stage calls of at most one prefill chunk, positions up to `total`.
  RunLimits limits;
  limits.max_rows = std::max<int64_t>(1, std::min(opt.prefill_chunk, n_prompt));
  limits.max_context = total;
  StageRunner runner(model, *kv, 1, limits);
  const KvManager::SeqId seq = kv->AddSequence(n_prompt);
  runner.AddSequence(seq, loops);
  Sampler sampler(opt.seed);
  GenerateResult res;

  // Prefill, chunk by chunk, at prompt_loops (full depth unless asked).
  const double t0 = Now();
  if (!kv->Grow(seq, n_prompt)) return Status::Error("internal: KV pool too small");
  PrefillResult pre;
  for (int64_t p = 0; p < n_prompt; p += opt.prefill_chunk) {
    PrefillChunk c;
    c.seq = seq;
    c.ids = opt.prompt.data() + p;
    c.pos0 = p;
    c.n = std::min(opt.prefill_chunk, n_prompt - p);
    c.loops = prompt_loops;
    c.random_init = opt.init_seed;
    c.budget = static_cast<float>(opt.budget.value_or(1.0));
    c.logits = p + c.n == n_prompt ? PrefillChunk::Logits::kLast : PrefillChunk::Logits::kNone;
    FATHOM_RETURN_IF_ERROR(runner.Prefill({c}, false, &pre));
  }
  res.prefill_seconds = Now() - t0;

  // Decode: prelude, core steps until the policy says exit, coda.
  const double t1 = Now();
  int32_t token = sampler.Sample(pre.logits.data(), spec.vocab, opt.sampling);
  res.ids.push_back(token);
  res.exit_depths.push_back(prompt_loops);
  res.finish_reason = "length";
  DecodeItem item;
  item.slot = 0;
  item.seq = seq;
  item.random_init = opt.init_seed;
  item.sampler = &sampler;
  item.sampling = opt.sampling;
  CoreStepResult step;
  CodaResult coda;
  while (static_cast<int32_t>(res.ids.size()) < opt.max_tokens) {
    if (opt.stop_at_eos && token == spec.eos_id) break;
    item.pos = n_prompt + static_cast<int64_t>(res.ids.size()) - 1;
    item.token = token;
    const size_t decode_index = res.ids.size() - 1;
    item.budget = opt.budget_trace.empty()
                      ? static_cast<float>(opt.budget.value_or(1.0))
                      : opt.budget_trace[std::min(decode_index, opt.budget_trace.size() - 1)];
    if (!kv->Grow(seq, item.pos + 1)) return Status::Error("internal: KV pool too small");
    FATHOM_RETURN_IF_ERROR(runner.Prelude({item}));
    int32_t steps = loops, exit_at = loops;
    bool decided = false;
    if (policy) policy->Reset();
    for (int32_t r = 0; r < loops; ++r) {
      item.step = r;
      item.kl = policy && policy->needs_kl();
      FATHOM_RETURN_IF_ERROR(runner.CoreStep({item}, &step));
      if (policy && !decided && policy->ShouldExit(r + 1, step.signals[0])) {
        decided = true;
        exit_at = std::min(loops, r + 1 + (opt.exit_lookahead ? 1 : 0));
      }
      if (r + 1 >= exit_at) {
        steps = r + 1;
        break;
      }
    }
    item.step = steps;
    FATHOM_RETURN_IF_ERROR(runner.Coda({item}, &coda));
    ++res.decode_steps;
    token = coda.tokens[0];
    res.ids.push_back(token);
    res.exit_depths.push_back(steps);
  }
  if (opt.stop_at_eos && token == spec.eos_id) res.finish_reason = "stop";
  res.decode_seconds = Now() - t1;
  return res;
}

}  // namespace fathom
