#include "budget/budget.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace fathom {
namespace {

// 1 at x <= lo, 0 at x >= hi, linear between.
double Ramp(double x, double lo, double hi) {
  if (x <= lo) return 1;
  if (x >= hi) return 0;
  return (hi - x) / (hi - lo);
}

}  // namespace

Result<ServiceTier> ParseServiceTier(std::string_view name) {
  if (name == "priority") return ServiceTier::kPriority;
  if (name == "default" || name == "auto") return ServiceTier::kDefault;
  if (name == "flex") return ServiceTier::kFlex;
  return Status::Error("service_tier: '" + std::string(name) + "' is not one of priority, default, flex, auto");
}

std::string_view ServiceTierName(ServiceTier t) {
  switch (t) {
    case ServiceTier::kPriority: return "priority";
    case ServiceTier::kDefault: return "default";
    case ServiceTier::kFlex: return "flex";
  }
  return "?";
}

Status BudgetConfig::Validate() const {
  for (int i = 0; i < kNumServiceTiers; ++i) {
    const TierRange& t = tiers[i];
    if (!(t.b_min >= 0 && t.b_min <= t.b_max && t.b_max <= 1))
      return Status::Error("tier " + std::string(ServiceTierName(static_cast<ServiceTier>(i))) +
                           ": [b_min, b_max] must satisfy 0 <= b_min <= b_max <= 1");
  }
  if (!(queue_target_s >= 0 && queue_full_s > queue_target_s))
    return Status::Error("budget queue_full_s: must exceed queue_target_s >= 0");
  if (!(kv_floor >= 0 && kv_floor < 1)) return Status::Error("budget kv_floor: must be in [0, 1)");
  if (!(reclaim_safety > 0 && reclaim_safety <= 1))
    return Status::Error("budget reclaim_safety: must be in (0, 1]");
  return Status::Ok();
}

double BudgetForTime(const TimeNeed& t) {
  if (t.full_s <= t.left_s) return 1;
  if (t.min_s >= t.left_s) return 0;
  // min_s < left_s < full_s here, so the division is by a positive span.
  return std::clamp((t.left_s - t.min_s) / (t.full_s - t.min_s), 0.0, 1.0);
}

BudgetDecision BudgetController::Decide(const Pressure& p) const {
  BudgetDecision d;
  for (const TimeNeed& t : p.deadlines) {
    if (t.left_s < t.min_s) {
      ++d.hopeless;
      continue;
    }
    d.deadline = std::min(d.deadline, BudgetForTime(t));
  }
  double delay = 0;
  if (p.prompt_tokens_per_s > 0)
    delay = std::max(delay, static_cast<double>(p.waiting_prompt_tokens) / p.prompt_tokens_per_s);
  if (p.requests_per_s > 0)
    delay = std::max(delay, static_cast<double>(p.waiting_requests) / p.requests_per_s);
  d.queue = Ramp(delay, cfg_.queue_target_s, cfg_.queue_full_s);
  if (p.needed_blocks > 0) {
    const double headroom = static_cast<double>(p.free_blocks) / static_cast<double>(p.needed_blocks);
    d.kv = 1 - Ramp(headroom, cfg_.kv_floor, 1.0);
  }
  if (p.reclaim) {
    TimeNeed t = *p.reclaim;
    t.left_s *= cfg_.reclaim_safety;
    d.reclaim = BudgetForTime(t);
  }
  d.b = std::min({d.deadline, d.queue, d.kv, d.reclaim});
  return d;
}

double BudgetController::ForRequest(double b, ServiceTier tier, std::optional<double> fixed) const {
  if (fixed) return std::clamp(*fixed, 0.0, 1.0);
  const TierRange& t = cfg_.tiers[TierRank(tier)];
  return std::clamp(b, t.b_min, t.b_max);
}

std::string BudgetDecision::ToString() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "b=%.3f (deadline %.3f, queue %.3f, kv %.3f, reclaim %.3f, hopeless %lld)", b,
                deadline, queue, kv, reclaim, static_cast<long long>(hopeless));
  return buf;
}

}  // namespace fathom
