// Per-request exit parameters turned into policies (exec/exit_spec.h): min_loops holds
// a signal policy's exit back to the minimum depth without losing its accumulated state.
#include <gtest/gtest.h>

#include "exec/exit_spec.h"

namespace fathom {
namespace {

ModelSpec OuroLike() {
  ModelSpec s;
  s.model_type = "ouro";
  s.loop.looped = true;
  s.loop.default_loops = s.loop.max_loops = 4;
  s.loop.exit_signal = ExitSignal::kGateHazard;
  return s;
}

// The step after which `p` decides to exit (1-based), with gate lambda `lambda` at every
// step; 0 if it never does within `steps`.
int32_t DecisionStep(ExitPolicy& p, float lambda, int32_t steps) {
  p.Reset();
  StepSignal sig;
  sig.gate_lambda = lambda;
  for (int32_t r = 1; r <= steps; ++r)
    if (p.ShouldExit(r, sig)) return r;
  return 0;
}

TEST(ExitSpec, MinLoopsHoldsASignalExitBack) {
  ExitSpec e;
  e.kind = ExitSpec::Kind::kThreshold;
  e.threshold = 0.1;  // lambda 0.5: cumulative exit probability 0.5 after step 1
  auto plain = MakeExitPolicy(OuroLike(), e, 4, /*lookahead=*/true);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(DecisionStep(**plain, 0.5f, 4), 1);

  e.min_depth = 3;  // with the lookahead gate a decision after step r exits at depth r + 1
  auto held = MakeExitPolicy(OuroLike(), e, 4, true);
  ASSERT_TRUE(held.ok()) << held.status().message();
  EXPECT_EQ(DecisionStep(**held, 0.5f, 4), 2);
  EXPECT_EQ(DecisionStep(**held, 0.5f, 4), 2);  // Reset between tokens restores the state
  auto no_ahead = MakeExitPolicy(OuroLike(), e, 4, false);
  ASSERT_TRUE(no_ahead.ok());
  EXPECT_EQ(DecisionStep(**no_ahead, 0.5f, 4), 3);
  // A signal that never fires still never fires.
  EXPECT_EQ(DecisionStep(**held, 0.0f, 4), 0);
}

TEST(ExitSpec, MinLoopsAboveTheLoopCountIsAnError) {
  ExitSpec e;
  e.kind = ExitSpec::Kind::kThreshold;
  e.threshold = 0.5;
  e.min_depth = 5;
  auto p = MakeExitPolicy(OuroLike(), e, 4, true);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("min_loops: 5 above the request's 4 loops"), std::string::npos)
      << p.status().message();
}

}  // namespace
}  // namespace fathom
