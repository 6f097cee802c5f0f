// Per-request exit policy parameters (plain data, parsed from a request) and the one factory
// that turns them into an ExitPolicy (exec/exit_policy.h) for one model: the engine, the
// server and single-sequence generation (generate.h) all build their policies here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/exit_policy.h"
#include "model/model_spec.h"

namespace fathom {

struct ExitSpec {
  enum class Kind {
    kNone,        // every token runs the request's loop count
    kThreshold,   // the model's own signal: Ouro hazard q, Huginn latent diff
    kHazard,      // Ouro cumulative exit probability >= threshold
    kLatentDiff,  // Huginn latent change < threshold
    kKl,          // KL between successive predictions < threshold
    kFixed,       // every token exits at `depth`
    kTrace,       // per-token depths from `trace`
    kRandom,      // seeded depths with mean `mean`, at least `min_depth`
  } kind = Kind::kNone;
  double threshold = 0;
  int32_t depth = 0;
  std::vector<int32_t> trace;
  double mean = 0;
  int32_t min_depth = 1;  // kRandom and the signal kinds: no exit before this depth
  uint64_t seed = 0;
};

// The smallest exit depth the exit policies can give: 1, or 2 under the lookahead gate
// (a decision read after step 1 takes effect at step 2). Replayed depths, seeded depths'
// minimum and recorded traces are validated against it.
constexpr int32_t MinExitDepth(bool lookahead) { return lookahead ? 2 : 1; }

// Null for kNone. `lookahead`: decisions take effect one step later (replayed depths
// account for it so the token exits at the depth asked for). Errors name the field.
Result<std::unique_ptr<ExitPolicy>> MakeExitPolicy(const ModelSpec& spec, const ExitSpec& exit,
                                                   int32_t loops, bool lookahead);

}  // namespace fathom
