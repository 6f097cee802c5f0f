#include "exec/exit_spec.h"

#include <algorithm>

namespace fathom {

Result<std::unique_ptr<ExitPolicy>> MakeExitPolicy(const ModelSpec& spec, const ExitSpec& exit,
                                                   int32_t loops, bool lookahead) {
  using K = ExitSpec::Kind;
  if (exit.kind == K::kNone) return std::unique_ptr<ExitPolicy>();
  if (!spec.loop.looped)
    return Status::Error("exit policy: model_type '" + spec.model_type + "' is not looped");
  const int32_t ahead = lookahead ? 1 : 0;
  const int32_t min_depth = MinExitDepth(lookahead);
  auto check_depth = [&](int32_t d, const std::string& what) -> Status {
    if (d < min_depth || d > loops)
      return Status::Error(what + ": depth " + std::to_string(d) + " outside [" +
                           std::to_string(min_depth) + ", " + std::to_string(loops) + "]" +
                           (lookahead ? " (the lookahead gate exits at depth 2 or more)" : ""));
    return Status::Ok();
  };
  K kind = exit.kind;
  if (kind == K::kThreshold)
    kind = spec.loop.exit_signal == ExitSignal::kGateHazard ? K::kHazard : K::kLatentDiff;
  // The signal policies, with the request's minimum depth (min_loops) when above 1.
  auto with_min_depth = [&](std::unique_ptr<ExitPolicy> p) -> Result<std::unique_ptr<ExitPolicy>> {
    if (exit.min_depth <= 1) return p;
    if (exit.min_depth > loops)
      return Status::Error("min_loops: " + std::to_string(exit.min_depth) + " above the request's " +
                           std::to_string(loops) + " loops");
    return std::unique_ptr<ExitPolicy>(std::make_unique<MinDepthExit>(std::move(p), exit.min_depth, ahead));
  };
  switch (kind) {
    case K::kHazard:
      if (spec.loop.exit_signal != ExitSignal::kGateHazard)
        return Status::Error("exit_threshold: criterion 'hazard' needs an exit gate (Ouro)");
      return with_min_depth(std::make_unique<CumulativeHazardExit>(exit.threshold));
    case K::kLatentDiff:
      if (spec.loop.exit_signal != ExitSignal::kLatentDiff)
        return Status::Error("exit_threshold: criterion 'latent-diff' applies to Huginn-style models");
      return with_min_depth(std::make_unique<LatentDiffExit>(exit.threshold));
    case K::kKl:
      return with_min_depth(std::make_unique<KlExit>(exit.threshold));
    case K::kFixed:
      FATHOM_RETURN_IF_ERROR(check_depth(exit.depth, "exit_depth"));
      return std::unique_ptr<ExitPolicy>(std::make_unique<ReplayExit>(std::vector<int32_t>{exit.depth}, ahead));
    case K::kTrace:
      if (exit.trace.empty()) return Status::Error("exit_trace: empty");
      for (size_t i = 0; i < exit.trace.size(); ++i)
        FATHOM_RETURN_IF_ERROR(check_depth(exit.trace[i], "exit_trace[" + std::to_string(i) + "]"));
      return std::unique_ptr<ExitPolicy>(std::make_unique<ReplayExit>(exit.trace, ahead));
    case K::kRandom: {
      FATHOM_RETURN_IF_ERROR(check_depth(std::max(exit.min_depth, min_depth), "exit_min_depth"));
      const int32_t lo = std::max(exit.min_depth, min_depth);
      if (exit.mean < lo || exit.mean > loops)
        return Status::Error("exit_mean: " + std::to_string(exit.mean) + " outside [" +
                             std::to_string(lo) + ", " + std::to_string(loops) + "]");
      return std::unique_ptr<ExitPolicy>(
          std::make_unique<RandomDepthExit>(exit.mean, lo, loops, exit.seed, ahead));
    }
    case K::kNone:
    case K::kThreshold: break;
  }
  return Status::Error("internal: unresolved exit policy");
}

}  // namespace fathom
