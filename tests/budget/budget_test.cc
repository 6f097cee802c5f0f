// The budget controller on hand-made Pressure values: b monotone in every input, each
// component's documented shape, tiers and fixed budgets, reclaim notices; and the online
// step-latency fit.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "budget/budget.h"
#include "budget/latency_model.h"

namespace fathom {
namespace {

Pressure Calm() {
  Pressure p;
  p.prompt_tokens_per_s = 1000;
  p.requests_per_s = 10;
  p.free_blocks = 100;
  p.needed_blocks = 50;
  return p;
}

TEST(Budget, NoPressureIsFullCompute) {
  BudgetController c{BudgetConfig{}};
  EXPECT_EQ(c.Decide(Pressure{}).b, 1.0);
  EXPECT_EQ(c.Decide(Calm()).b, 1.0);
}

// b as a function of one scalar input, on a grid; checks the direction of monotonicity
// and that the input moves b at all somewhere in the grid.
void ExpectMonotone(const std::function<void(Pressure&, double)>& set, double lo, double hi, bool increasing,
                    const char* what) {
  BudgetController c{BudgetConfig{}};
  double prev = increasing ? -1 : 2, first = -1, last = -1;
  for (int i = 0; i <= 200; ++i) {
    Pressure p = Calm();
    const double x = lo + (hi - lo) * i / 200.0;
    set(p, x);
    const double b = c.Decide(p).b;
    EXPECT_GE(b, 0.0) << what;
    EXPECT_LE(b, 1.0) << what;
    if (increasing) EXPECT_GE(b, prev) << what << " at " << x;
    else EXPECT_LE(b, prev) << what << " at " << x;
    prev = b;
    if (i == 0) first = b;
    last = b;
  }
  EXPECT_NE(first, last) << what << " never moved b";
}

TEST(Budget, MonotoneInEveryInput) {
  auto deadline = [](double full, double min) {
    return [full, min](Pressure& p, double left) { p.deadlines.push_back({left, full, min}); };
  };
  ExpectMonotone(deadline(10, 2), 2, 12, true, "deadline time left");
  ExpectMonotone([](Pressure& p, double full) { p.deadlines.push_back({5, full, 1}); }, 1, 20, false,
                 "deadline full-compute time");
  ExpectMonotone([](Pressure& p, double n) { p.waiting_requests = static_cast<int64_t>(n); }, 0, 200, false,
                 "waiting requests");
  ExpectMonotone([](Pressure& p, double n) { p.waiting_prompt_tokens = static_cast<int64_t>(n); }, 0, 20000,
                 false, "waiting prompt tokens");
  ExpectMonotone(
      [](Pressure& p, double r) {
        p.waiting_prompt_tokens = 4000;
        p.prompt_tokens_per_s = r;
      },
      100, 5000, true, "prompt drain rate");
  ExpectMonotone(
      [](Pressure& p, double r) {
        p.waiting_requests = 40;
        p.requests_per_s = r;
      },
      1, 50, true, "request drain rate");
  ExpectMonotone([](Pressure& p, double f) { p.free_blocks = static_cast<int64_t>(f); }, 0, 100, true,
                 "free blocks");
  ExpectMonotone([](Pressure& p, double n) { p.needed_blocks = static_cast<int64_t>(n); }, 50, 400, false,
                 "needed blocks");
  ExpectMonotone([](Pressure& p, double t) { p.reclaim = TimeNeed{t, 10, 2}; }, 1, 20, true,
                 "reclaim seconds left");
}

TEST(Budget, TheSmallestComponentWins) {
  BudgetController c{BudgetConfig{}};
  Pressure p = Calm();
  p.needed_blocks = 133;  // headroom 0.75: kv = 0.5
  p.waiting_requests = 50;  // 5 s of requests: queue = (8 - 5) / 7
  const BudgetDecision d = c.Decide(p);
  EXPECT_NEAR(d.kv, 0.5, 0.01);
  EXPECT_NEAR(d.queue, 3.0 / 7, 1e-9);
  EXPECT_EQ(d.b, std::min(d.kv, d.queue));
  EXPECT_EQ(d.deadline, 1.0);
  EXPECT_EQ(d.reclaim, 1.0);
}

TEST(Budget, DeadlineGivesTheBudgetThatJustFits) {
  // time(b) = min + b (full - min) = left  =>  b = (left - min) / (full - min).
  EXPECT_DOUBLE_EQ(BudgetForTime({6, 10, 2}), 0.5);
  EXPECT_DOUBLE_EQ(BudgetForTime({10, 10, 2}), 1.0);
  EXPECT_DOUBLE_EQ(BudgetForTime({1, 10, 2}), 0.0);
  BudgetController c{BudgetConfig{}};
  Pressure p;
  p.deadlines = {{6, 10, 2}, {100, 10, 2}, {8, 10, 2}};
  EXPECT_DOUBLE_EQ(c.Decide(p).b, 0.5);  // the tightest request sets it
}

TEST(Budget, HopelessDeadlinesAreCountedAndDoNotPinTheBudget) {
  BudgetController c{BudgetConfig{}};
  Pressure p;
  p.deadlines = {{1, 10, 2}, {0.5, 3, 1}, {8, 10, 2}};
  const BudgetDecision d = c.Decide(p);
  EXPECT_EQ(d.hopeless, 2);
  EXPECT_DOUBLE_EQ(d.b, 0.75);  // from the one that can still be met
}

TEST(Budget, TiersAndFixedBudgetsBoundTheRequestsBudget) {
  BudgetController c{BudgetConfig{}};
  for (double b : {0.0, 0.1, 0.3, 0.5, 0.79, 0.8, 0.95, 1.0}) {
    const double pri = c.ForRequest(b, ServiceTier::kPriority, std::nullopt);
    const double def = c.ForRequest(b, ServiceTier::kDefault, std::nullopt);
    const double flex = c.ForRequest(b, ServiceTier::kFlex, std::nullopt);
    EXPECT_GE(pri, 0.8);
    EXPECT_GE(def, 0.25);
    EXPECT_DOUBLE_EQ(flex, b);  // flex goes down to 0
    EXPECT_GE(pri, def);
    EXPECT_GE(def, flex);
    EXPECT_DOUBLE_EQ(c.ForRequest(b, ServiceTier::kFlex, 0.6), 0.6);  // a fixed budget ignores b
  }
  BudgetConfig cfg;
  cfg.tiers[TierRank(ServiceTier::kFlex)] = {0.1, 0.5};
  BudgetController capped{cfg};
  EXPECT_DOUBLE_EQ(capped.ForRequest(1.0, ServiceTier::kFlex, std::nullopt), 0.5);
  EXPECT_DOUBLE_EQ(capped.ForRequest(0.0, ServiceTier::kFlex, std::nullopt), 0.1);
}

TEST(Budget, ReclaimDrivesTheInFlightWorkToFinishBeforeTheNotice) {
  BudgetConfig cfg;
  BudgetController c{cfg};
  for (double left : {3.0, 5.0, 8.0, 12.0, 20.0}) {
    Pressure p;
    p.reclaim = TimeNeed{left, 10, 2};
    const double b = c.Decide(p).b;
    const double needed = 2 + b * (10 - 2);  // the time model the engine predicts with
    EXPECT_LE(needed, left * cfg.reclaim_safety + 1e-9) << "T = " << left;
    if (b < 1) {
      EXPECT_NEAR(needed, left * cfg.reclaim_safety, 1e-9) << "T = " << left << ": b should not fall further";
    }
  }
  Pressure p;
  p.reclaim = TimeNeed{1, 10, 2};  // cannot finish even at b = 0
  EXPECT_EQ(c.Decide(p).b, 0.0);
}

TEST(Budget, ConfigValidationNamesTheField) {
  BudgetConfig cfg;
  cfg.tiers[0] = {0.9, 0.5};
  EXPECT_NE(cfg.Validate().message().find("tier priority"), std::string::npos);
  cfg = BudgetConfig{};
  cfg.queue_full_s = 0.5;
  EXPECT_NE(cfg.Validate().message().find("queue_full_s"), std::string::npos);
  EXPECT_TRUE(BudgetConfig{}.Validate().ok());
  EXPECT_EQ(ParseServiceTier("flex").value(), ServiceTier::kFlex);
  EXPECT_EQ(ParseServiceTier("auto").value(), ServiceTier::kDefault);
  EXPECT_NE(ParseServiceTier("gold").status().message().find("service_tier"), std::string::npos);
}

TEST(StepLatencyModel, RecoversTheCoefficientsFromNoisySteps) {
  StepLatencyModel m;
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(0, 1e-5);
  for (int i = 0; i < 400; ++i) {
    const double n = static_cast<double>(1 + rng() % 32), ctx = n * static_cast<double>(16 + rng() % 400);
    m.Add(n, ctx, 2e-3 + 5e-4 * n + 1e-6 * ctx + noise(rng));
  }
  const LatencyFit f = m.fit();
  EXPECT_NEAR(f.delta, 2e-3, 1e-4);
  EXPECT_NEAR(f.gamma, 5e-4, 2e-5);
  EXPECT_NEAR(f.alpha_kv, 1e-6, 1e-7);
  EXPECT_NEAR(m.Predict(8, 2000), 2e-3 + 4e-3 + 2e-3, 1e-4);
}

TEST(StepLatencyModel, SingularStepsStillPredictTheirTime) {
  StepLatencyModel m;
  EXPECT_EQ(m.Predict(1, 10), 0.0);
  for (int i = 0; i < 50; ++i) m.Add(1, 100, 0.01);  // one shape only: N and N_ctx never vary
  EXPECT_NEAR(m.Predict(1, 100), 0.01, 1e-6);
}

TEST(StepLatencyModel, FollowsAMachineThatSlowsDown) {
  StepLatencyModel m(32);
  for (int i = 0; i < 200; ++i) m.Add(1 + i % 8, 100.0 * (1 + i % 5), 0.01);
  for (int i = 0; i < 400; ++i) m.Add(1 + i % 8, 100.0 * (1 + i % 5), 0.02);
  EXPECT_NEAR(m.Predict(4, 300), 0.02, 1e-3);
}

}  // namespace
}  // namespace fathom
