// The budget controller (DESIGN.md §4, issue 14): maps runtime pressure to a compute
// budget b ∈ [0, 1] (1 = full compute) once per engine step. It is a pure policy, like the
// scheduler: the engine measures and fills a plain `Pressure`, `BudgetController::Decide`
// turns it into b, and what b drives (exit thresholds of looped models, later the gates of
// layer-skip checkpoints) is applied per request after its tier's range clamps it.
//
// Each pressure gives its own b and the controller takes the smallest:
//   deadline  for each request with a deadline: the b at which its predicted time to
//             finish equals its time left, where time(b) = min_s + b·(full_s − min_s)
//             (full_s at full depth, min_s at minimum depth, from StepLatencyModel);
//             a request that misses even at b = 0 (left_s < min_s) is hopeless: counted,
//             served, and ignored here (it would pin b to 0 for everyone).
//   queue     delay = max(waiting prompt tokens / prompt tokens drained per s,
//                         waiting requests / requests finished per s);
//             b = 1 up to queue_target_s, falling linearly to 0 at queue_full_s.
//   kv        headroom = free blocks / blocks that running + waiting requests will need;
//             b = 1 at headroom ≥ 1, falling linearly to 0 at kv_floor.
//   reclaim   a notice with T seconds left: the b at which the in-flight work's time(b)
//             equals reclaim_safety · T (the same time model as a deadline).
// Every component is monotone non-decreasing in its slack (time left, drain rate, free
// blocks) and non-increasing in its load (waiting requests, tokens, needed blocks).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace fathom {

// OpenAI's `service_tier` values. A tier is a [b_min, b_max] range of the budget.
enum class ServiceTier : uint8_t { kPriority, kDefault, kFlex };
constexpr int kNumServiceTiers = 3;
Result<ServiceTier> ParseServiceTier(std::string_view name);  // "priority", "default", "flex"
std::string_view ServiceTierName(ServiceTier t);
// Waiting-queue order: lower rank is served first (priority, default, flex).
constexpr int TierRank(ServiceTier t) { return static_cast<int>(t); }

struct TierRange {
  double b_min = 0, b_max = 1;
};

struct BudgetConfig {
  // The documented defaults: priority never below 0.8; default down to 0.25; flex down to 0.
  TierRange tiers[kNumServiceTiers] = {{0.8, 1.0}, {0.25, 1.0}, {0.0, 1.0}};
  double queue_target_s = 1.0;  // queueing delay that costs nothing
  double queue_full_s = 8.0;    // queueing delay at which the queue alone asks for b = 0
  double kv_floor = 0.5;        // KV headroom at which the KV alone asks for b = 0
  double reclaim_safety = 0.8;  // plan to finish in this fraction of the notice's time
  Status Validate() const;      // errors name the field
};

// Time a piece of work needs: `left_s` seconds remain; it needs `full_s` at b = 1 and
// `min_s` at b = 0 (minimum depth).
struct TimeNeed {
  double left_s = std::numeric_limits<double>::infinity();
  double full_s = 0, min_s = 0;
};

struct Pressure {
  std::vector<TimeNeed> deadlines;  // one per running or waiting request with a deadline
  int64_t waiting_requests = 0, waiting_prompt_tokens = 0;
  double prompt_tokens_per_s = 0;   // drain rates measured by the engine; 0: not measured yet
  double requests_per_s = 0;
  int64_t free_blocks = 0, needed_blocks = 0;
  std::optional<TimeNeed> reclaim;  // set once a reclaim notice arrived
};

struct BudgetDecision {
  double b = 1;  // min of the components
  double deadline = 1, queue = 1, kv = 1, reclaim = 1;
  int64_t hopeless = 0;  // deadlines that cannot be met even at b = 0
  std::string ToString() const;
};

// The b at which time(b) = min_s + b·(full_s − min_s) fits in `left_s`, in [0, 1];
// 1 when it fits at full compute, 0 when not even min_s fits.
double BudgetForTime(const TimeNeed& t);

class BudgetController {
 public:
  explicit BudgetController(BudgetConfig cfg) : cfg_(cfg) {}
  BudgetDecision Decide(const Pressure& p) const;
  // A request's budget for one token: its own fixed budget if set, else the controller's
  // b clamped to its tier's range.
  double ForRequest(double b, ServiceTier tier, std::optional<double> fixed) const;
  const BudgetConfig& config() const { return cfg_; }

 private:
  BudgetConfig cfg_;
};

}  // namespace fathom
