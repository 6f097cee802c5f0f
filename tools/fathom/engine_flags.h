// The engine's options (EngineOptions, src/engine/engine.h) as command-line flags, each
// declared here once: its name, its default (read from EngineOptions{} itself, so a help
// text cannot disagree with what the engine does), its help and its validation. A command
// registers the ones it takes on its FlagSet and, after parsing, gets its EngineOptions:
//
//   EngineFlags engine(kServeEngineFlags);
//   engine.Declare(flags);
//   ... flags.Parse(args) ...
//   auto opt = engine.Options();  // errors name the flag
//
// Also declared here once: --lookahead (the exit gate, off by default everywhere; it sets
// EngineOptions::lookahead, and GenerateOptions::exit_lookahead in single-sequence
// generate), the benchmarks' --min-depth that follows from it, and --threads.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "engine/engine.h"
#include "exec/exit_spec.h"
#include "flags.h"
#include "kernels/matmul.h"
#include "model/model.h"

namespace fathom::cli {

// One bit per engine option; the flag and the EngineOptions field it sets.
enum EngineFlag : uint32_t {
  kFlagScheduler = 1u << 0,         // --scheduler NAME       mode
  kFlagLayout = 1u << 1,            // --layout NAME          layout
  kFlagSharedAfter = 1u << 2,       // --shared-after S       shared_after (first-then-shared)
  kFlagWidth = 1u << 3,             // --width W              width
  kFlagK = 1u << 4,                 // --k K                  min_coda
  kFlagFlushSteps = 1u << 5,        // --flush-steps N        flush_steps
  kFlagPrefillBudget = 1u << 6,     // --prefill-budget N     prefill_budget
  kFlagMaxDepth = 1u << 7,          // --max-depth R          max_depth
  kFlagKvBytes = 1u << 8,           // --kv-memory BYTES      kv_bytes
  kFlagKvMib = 1u << 9,             // --kv-mb N              kv_bytes = N MiB
  kFlagBlockSize = 1u << 10,        // --block-size N         block_size
  kFlagLookahead = 1u << 11,        // --lookahead            lookahead
  kFlagKvDtype = 1u << 12,          // --kv-dtype TYPE        kv_dtype (bf16, int8, f32)
  kFlagAdaptiveThreads = 1u << 13,  // --adaptive-threads  adaptive_threads
  kFlagBudgetPrompts = 1u << 14,    // --budget-prompts    budget_prompts
};

// Every option but the KV pool's size, whose unit a command chooses (kFlagKvBytes or
// kFlagKvMib).
constexpr uint32_t kEngineFlagsAll = kFlagScheduler | kFlagLayout | kFlagSharedAfter | kFlagWidth | kFlagK |
                                     kFlagFlushSteps | kFlagPrefillBudget | kFlagMaxDepth | kFlagBlockSize |
                                     kFlagLookahead | kFlagKvDtype | kFlagAdaptiveThreads |
                                     kFlagBudgetPrompts;

class EngineFlags {
 public:
  // `which`: EngineFlag bits. `max_depth_default`: what an absent --max-depth means in
  // this command, for its help (EngineOptions{}.max_depth = 0 is the model's loop count;
  // `generate --requests` takes the largest loops of its requests instead).
  explicit EngineFlags(uint32_t which, std::string max_depth_default = "the model's loop count")
      : which_(which), max_depth_default_(std::move(max_depth_default)) {}

  // Registers the chosen flags, in one fixed order, bound to this object.
  void Declare(FlagSet& flags);
  // After a successful FlagSet::Parse: EngineOptions{} with the chosen flags applied.
  // Errors (an unknown scheduler or layout) name the flag.
  Result<EngineOptions> Options() const;
  bool lookahead() const { return lookahead_; }

 private:
  bool Has(EngineFlag f) const { return (which_ & f) != 0; }

  uint32_t which_;
  std::string max_depth_default_;
  const EngineOptions defaults_{};
  std::string scheduler_{SchedModeName(defaults_.mode)}, layout_{KvLayoutName(defaults_.layout)},
      kv_dtype_{KvDtypeName(defaults_.kv_dtype)};
  int64_t shared_after_ = defaults_.shared_after, width_ = defaults_.width, k_ = defaults_.min_coda,
          flush_steps_ = defaults_.flush_steps, prefill_budget_ = defaults_.prefill_budget,
          max_depth_ = defaults_.max_depth, kv_bytes_ = static_cast<int64_t>(defaults_.kv_bytes),
          kv_mib_ = static_cast<int64_t>(defaults_.kv_bytes >> 20), block_size_ = defaults_.block_size;
  bool lookahead_ = defaults_.lookahead, adaptive_threads_ = defaults_.adaptive_threads,
       budget_prompts_ = defaults_.budget_prompts;
};

// The flags of the engine commands (what each took before this file, plus the options it
// had no flag for): `generate --requests` sizes its KV pool in bytes, the others in MiB.
constexpr uint32_t kRequestsEngineFlags = kEngineFlagsAll | kFlagKvBytes;
constexpr uint32_t kServeEngineFlags = kEngineFlagsAll | kFlagKvMib;
// bench online / k-sweep: the schedulers (and k-sweep's K) are lists of their own.
constexpr uint32_t kSweepEngineFlags = (kEngineFlagsAll | kFlagKvMib) & ~kFlagScheduler & ~kFlagK & ~kFlagBudgetPrompts;

// --lookahead alone, for commands without an Engine (single-sequence generate).
void DeclareLookahead(FlagSet& flags, bool* lookahead);
// --kv-dtype alone, for commands without an Engine (single-sequence generate, logits);
// *name holds the default on entry. ParseKvDtypeFlag: the dtype, or an error naming the flag.
void DeclareKvDtype(FlagSet& flags, std::string* name);
Result<DType> ParseKvDtypeFlag(const std::string& name);

// The --min-depth flag of the benchmarks: its default follows --lookahead.
std::string MinDepthHelp();
// After parsing: the default when --min-depth was not given, else an error message when
// the given depth is one the gate cannot produce (empty when fine).
std::string ResolveMinDepth(const FlagSet& flags, bool lookahead, int64_t* min_depth);

// How a model loads (LoadOptions, src/model/model.h), the same flags on every command that
// loads one:
//   --weights checkpoint|int8|w8a8|int4  the per-layer matmul weights (the embedding keeps
//                              the checkpoint's dtype)
//   --lm-head-weights checkpoint|int8|w8a8|int4  the LM head's (default checkpoint)
//   --batch-invariant          every matmul through the batch-invariant kernel, attention
//                              row by row: batched output equals each request alone, bit
//                              for bit
// Options(): the LoadOptions, or an error naming the flag and the bad value.
struct LoadFlags {
  std::string weights{WeightFormatName(LoadOptions{}.weights)};
  std::string lm_head_weights{WeightFormatName(LoadOptions{}.lm_head)};
  bool batch_invariant = LoadOptions{}.batch_invariant;

  void Declare(FlagSet& flags);
  Result<LoadOptions> Options() const;
};

// --threads N, OpenMP's worker threads; *threads holds the command's default on entry
// (0: all cores, OpenMP's own default). ApplyThreads sets them (0: leaves OpenMP's).
void DeclareThreads(FlagSet& flags, int64_t* threads);
void ApplyThreads(int64_t threads);

// Long-running servers (serve, bench soak): glibc's malloc at most 2 arenas unless the
// environment sets MALLOC_ARENA_MAX. With one arena per busy thread (64 HTTP workers, the
// clients, the engine) freed memory scatters across arenas and resident memory creeps: a
// 3-minute soak grew 3.5% after warm-up with glibc's default, 0.04% with 2 arenas.
// Call before any thread starts.
void LimitMallocArenasForServing();

}  // namespace fathom::cli
