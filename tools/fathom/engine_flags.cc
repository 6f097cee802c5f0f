#include "engine_flags.h"

#include <malloc.h>
#include <omp.h>

#include <cstdlib>

namespace fathom::cli {
namespace {

// engine.cc's pool when EngineOptions::kv_bytes is 0 (for the help text).
constexpr int kDefaultKvBlocks = 4096;

std::string Default(int64_t v) { return " (default " + std::to_string(v) + ")"; }

std::string LayoutNames() {
  std::string names;
  for (KvLayout l : {KvLayout::kDepthIndexed, KvLayout::kLastExited, KvLayout::kShared, KvLayout::kFirstThenShared,
                     KvLayout::kHybrid})
    names.append(names.empty() ? "" : ", ").append(KvLayoutName(l));
  return names;
}

}  // namespace

void EngineFlags::Declare(FlagSet& flags) {
  const EngineOptions& d = defaults_;
  const std::string pool = "(default: the engine's " + std::to_string(kDefaultKvBlocks) + " blocks)";
  if (Has(kFlagScheduler))
    flags.String("--scheduler", &scheduler_,
                 "cb, cdb-norefill or cdb-refill (default " + std::string(SchedModeName(d.mode)) + ")");
  if (Has(kFlagLayout))
    flags.String("--layout", &layout_,
                 "KV layout: " + LayoutNames() + " (default " + std::string(KvLayoutName(d.layout)) + ")");
  if (Has(kFlagSharedAfter))
    flags.Int("--shared-after", &shared_after_,
              "first-then-shared: S, the core slot of step r is min(r, S-1)" + Default(d.shared_after), 1, 4096);
  if (Has(kFlagWidth))
    flags.Int("--width", &width_, "decode width W: tokens in flight" + Default(d.width), 1, 1 << 16);
  if (Has(kFlagK))
    flags.Int("--k", &k_, "minimum coda batch K of cdb-refill" + Default(d.min_coda), 1, 1 << 20);
  if (Has(kFlagFlushSteps))
    flags.Int("--flush-steps", &flush_steps_, "cdb-refill: coda flush age in steps" + Default(d.flush_steps), 1,
              1 << 20);
  if (Has(kFlagPrefillBudget))
    flags.Int("--prefill-budget", &prefill_budget_, "prompt tokens per prefill step" + Default(d.prefill_budget),
              1, 1 << 24);
  if (Has(kFlagMaxDepth))
    flags.Int("--max-depth", &max_depth_, "KV depth r_max (default: " + max_depth_default_ + ")", 1, 4096);
  if (Has(kFlagKvBytes)) flags.Int("--kv-memory", &kv_bytes_, "KV pool in bytes " + pool, 1, INT64_MAX);
  if (Has(kFlagKvMib)) flags.Int("--kv-mb", &kv_mib_, "KV pool in MiB " + pool, 1, 1 << 24);
  if (Has(kFlagBlockSize))
    flags.Int("--block-size", &block_size_, "KV block size in token positions" + Default(d.block_size), 1, 4096);
  if (Has(kFlagLookahead)) DeclareLookahead(flags, &lookahead_);
  if (Has(kFlagKvDtype)) DeclareKvDtype(flags, &kv_dtype_);
  if (Has(kFlagAdaptiveThreads))
    flags.Bool(
        "--adaptive-threads", &adaptive_threads_,
        "each step on the count of --threads, --threads/2, ..., 1 that steps of its stage\n"
        "      and rows measured fastest, fewer threads winning on any margin where they\n"
        "      wait for cores and no probe of fewer threads while the host is idle (for\n"
        "      shared hosts: under one busy process on 2 cores 0.89-1.24 of 1 thread, fixed\n"
        "      threads 0.86-1.08; idle 0.95-1.02 of fixed threads; results the same bits on\n"
        "      any count; default off: every step on --threads)");
  if (Has(kFlagBudgetPrompts))
    flags.Bool("--budget-prompts", &budget_prompts_,
               "prompts follow the budget b too: a looped request whose exits follow b prefills its\n"
               "      prompt at ceil(b x loops) steps (at least its minimum depth); L2A gates read b\n"
               "      (default off: prompts at full depth)");
}

Result<EngineOptions> EngineFlags::Options() const {
  EngineOptions o = defaults_;
  auto mode = ParseSchedMode(scheduler_);
  if (!mode.ok()) return Status::Error("--" + mode.status().message());
  auto layout = ParseKvLayout(layout_);
  if (!layout.ok()) return Status::Error("--layout: " + layout.status().message());
  o.mode = *mode;
  o.layout = *layout;
  o.shared_after = static_cast<int32_t>(shared_after_);
  o.width = static_cast<int32_t>(width_);
  o.min_coda = static_cast<int32_t>(k_);
  o.flush_steps = static_cast<int32_t>(flush_steps_);
  o.prefill_budget = prefill_budget_;
  o.max_depth = static_cast<int32_t>(max_depth_);
  o.kv_bytes = Has(kFlagKvMib) ? static_cast<size_t>(kv_mib_) << 20 : static_cast<size_t>(kv_bytes_);
  o.block_size = static_cast<int32_t>(block_size_);
  o.lookahead = lookahead_;
  o.adaptive_threads = adaptive_threads_;
  o.budget_prompts = budget_prompts_;
  FATHOM_ASSIGN_OR_RETURN(o.kv_dtype, ParseKvDtypeFlag(kv_dtype_));
  return o;
}

void DeclareKvDtype(FlagSet& flags, std::string* name) {
  flags.String(
      "--kv-dtype", name,
      "K/V cache storage: bf16, int8 or f32 (default " + *name +
          ")\n"
          "      bf16: half of f32's bytes per token; int8: a quarter, plus a 4-byte scale per\n"
          "      token and KV head (quantized per head: docs/QUALITY.md); f32: exact");
}

Result<DType> ParseKvDtypeFlag(const std::string& name) {
  const std::optional<DType> t = ParseKvDtype(name);
  if (!t) return Status::Error("--kv-dtype: '" + name + "' is not bf16, int8 or f32");
  return *t;
}

void LoadFlags::Declare(FlagSet& flags) {
  flags.String(
      "--weights", &weights,
      "matmul weights of the layers: checkpoint (the checkpoint's dtype, exact), int8 "
      "(quantized at load per output channel, about half of bf16's bytes; f32 activations) or "
      "w8a8 (int8's weights times activations quantized to int8 per 32 values at every matmul: "
      "integer dot products, AVX512-VNNI where the CPU has it) or int4 (groups of 32 with f16 "
      "scales, Q4_0's shape, times w8a8's activations); the LM head has --lm-head-weights, "
      "the embedding stays in the checkpoint's dtype (default " +
          weights + ")");
  flags.String("--lm-head-weights", &lm_head_weights,
               "the LM head's weights, one of --weights' formats: checkpoint (its own dtype, the "
               "least error); "
               "w8a8 or int8 halve a 16-bit head's bytes per token, as llama.cpp's Q8_0 and Q4_0 "
               "files quantize theirs (to Q8_0, Q6_K); docs/QUALITY.md (default " +
                   lm_head_weights + ")");
  flags.Bool("--batch-invariant", &batch_invariant,
             "every matmul through fathom's batch-invariant f32 kernel and attention row by row:\n"
             "      each request's output is bit for bit what it gives alone, whatever is batched\n"
             "      with it (oneDNN's per-M kernels and the tiled prompt attention can change the\n"
             "      last bits); slower prompt processing (default off)");
}

namespace {
Result<WeightFormat> ParseWeightFlag(const std::string& flag, const std::string& value) {
  const std::optional<WeightFormat> f = ParseWeightFormat(value);
  if (!f) return Status::Error(flag + ": '" + value + "' is not checkpoint, int8, w8a8 or int4");
  return *f;
}
}  // namespace

Result<LoadOptions> LoadFlags::Options() const {
  LoadOptions o;
  FATHOM_ASSIGN_OR_RETURN(o.weights, ParseWeightFlag("--weights", weights));
  FATHOM_ASSIGN_OR_RETURN(o.lm_head, ParseWeightFlag("--lm-head-weights", lm_head_weights));
  o.batch_invariant = batch_invariant;
  return o;
}

void DeclareLookahead(FlagSet& flags, bool* lookahead) {
  flags.Bool("--lookahead", lookahead,
             "exit decided after loop step r takes effect after step r+1 (minimum depth " +
                 std::to_string(MinExitDepth(true)) + "; default off)");
}

std::string MinDepthHelp() {
  return "minimum exit depth (default " + std::to_string(MinExitDepth(false)) + ", or " +
         std::to_string(MinExitDepth(true)) + " with --lookahead)";
}

std::string ResolveMinDepth(const FlagSet& flags, bool lookahead, int64_t* min_depth) {
  const int32_t lo = MinExitDepth(lookahead);
  if (!flags.Seen("--min-depth")) *min_depth = lo;
  if (*min_depth < lo)
    return "--min-depth: " + std::to_string(*min_depth) + " is below " + std::to_string(lo) +
           ", the lookahead gate's minimum exit depth";
  return "";
}

void DeclareThreads(FlagSet& flags, int64_t* threads) {
  flags.Int("--threads", threads,
            "worker threads (default" + (*threads > 0 ? " " + std::to_string(*threads) : std::string(": all cores")) + ")",
            1, 1024);
}

void ApplyThreads(int64_t threads) {
  if (threads > 0) omp_set_num_threads(static_cast<int>(threads));
}

void LimitMallocArenasForServing() {
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 2);
}

}  // namespace fathom::cli
