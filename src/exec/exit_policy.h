// Exit policies for looped models: after each loop step r (1-based) the runner hands the
// token's exit signal to the policy, which says whether it leaves the loop now.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fathom {

struct StepSignal {
  float gate_lambda = 0.f;  // Ouro: sigmoid(gate(h_r))
  float latent_diff = 0.f;  // Huginn: ||x_r - x_{r-1}|| / ||x_r||
  float kl = 0.f;           // Huginn: KL(p_{r-1} || p_r), successive predictions, p_0 uniform
};

// The budget b ∈ [0, 1] (src/budget/budget.h) moves a signal policy's threshold so that a
// lower budget exits earlier, monotonically, and b = 1 gives the request's own threshold
// exactly (bit for bit: q·1 and t/1). Ouro exits once the cumulative exit probability
// reaches q(b) = q·b (b = 0: at the first step allowed); Huginn exits once the latent
// change (or the KL) falls below threshold(b) = t / b (b = 0: +inf, the first step
// allowed). The minimum depth (MinDepthExit) and the request's loop count (the runner's
// depth cap) hold at every b. Replayed, fixed and seeded depths ignore b.
inline double HazardThresholdAt(double q, double b) { return q * b; }
inline double SignalThresholdAt(double t, double b) {
  return b > 0 ? t / b : std::numeric_limits<double>::infinity();
}
// The loop steps a prompt's tokens run under budget b when prompts follow the budget
// (EngineOptions::budget_prompts): ceil(b · loops), at least min_depth, at most loops.
// Monotone in b; b = 1 gives loops exactly (today's full-depth prefill).
inline int32_t PromptDepthAt(double b, int32_t loops, int32_t min_depth) {
  const auto d = static_cast<int32_t>(std::ceil(std::clamp(b, 0.0, 1.0) * loops));
  return std::clamp(d, std::min(std::max(min_depth, 1), loops), loops);
}

class ExitPolicy {
 public:
  virtual ~ExitPolicy() = default;
  virtual void Reset() = 0;  // before each token
  // After Reset, before the token's first step: the budget the token runs under.
  virtual void SetBudget(double /*b*/) {}
  // True when the token exits after step `step` (1-based). The runner exits at the last
  // step regardless.
  virtual bool ShouldExit(int32_t step, const StepSignal& s) = 0;
  virtual bool needs_kl() const { return false; }
  // True when SetBudget moves the exits (the signal policies); replayed, fixed and seeded
  // depths ignore b.
  virtual bool follows_budget() const { return false; }
  virtual std::string Describe() const = 0;
};

// Ouro: exit at the first step whose cumulative exit probability reaches q, where
// p_t = lambda_t * prod_{j<t} (1 - lambda_j) (not a per-step threshold on lambda).
class CumulativeHazardExit final : public ExitPolicy {
 public:
  explicit CumulativeHazardExit(double q) : q_(q), q_b_(q) {}
  void Reset() override { survive_ = 1.0, cdf_ = 0.0, q_b_ = q_; }
  void SetBudget(double b) override { q_b_ = HazardThresholdAt(q_, b); }
  bool ShouldExit(int32_t step, const StepSignal& s) override;
  bool follows_budget() const override { return true; }
  std::string Describe() const override;

 private:
  double q_, q_b_, survive_ = 1.0, cdf_ = 0.0;  // q_b_: this token's q(b)
};

// Huginn: exit once the latent state changes by less than `threshold` (relative), or once
// the KL divergence between successive steps' predictions is below `threshold`.
class LatentDiffExit final : public ExitPolicy {
 public:
  explicit LatentDiffExit(double threshold) : t_(threshold), t_b_(threshold) {}
  void Reset() override { t_b_ = t_; }
  void SetBudget(double b) override { t_b_ = SignalThresholdAt(t_, b); }
  bool ShouldExit(int32_t, const StepSignal& s) override { return s.latent_diff < t_b_; }
  bool follows_budget() const override { return true; }
  std::string Describe() const override;

 private:
  double t_, t_b_;  // t_b_: this token's threshold(b)
};

class KlExit final : public ExitPolicy {
 public:
  explicit KlExit(double threshold) : t_(threshold), t_b_(threshold) {}
  void Reset() override { t_b_ = t_; }
  void SetBudget(double b) override { t_b_ = SignalThresholdAt(t_, b); }
  bool ShouldExit(int32_t, const StepSignal& s) override { return s.kl < t_b_; }
  bool needs_kl() const override { return true; }
  bool follows_budget() const override { return true; }
  std::string Describe() const override;

 private:
  double t_, t_b_;
};

// A signal policy that may not exit before `min_depth` loop steps (the serving API's
// `min_loops`). The inner policy sees every step, so stateful signals (Ouro's cumulative
// exit probability) keep accumulating; an exit it asks for earlier happens at the first
// step allowed, if it still holds there. `ahead`: steps between a decision and the exit.
class MinDepthExit final : public ExitPolicy {
 public:
  MinDepthExit(std::unique_ptr<ExitPolicy> inner, int32_t min_depth, int32_t ahead)
      : inner_(std::move(inner)), min_depth_(min_depth), ahead_(ahead) {}
  void Reset() override { inner_->Reset(); }
  void SetBudget(double b) override { inner_->SetBudget(b); }
  bool ShouldExit(int32_t step, const StepSignal& s) override {
    const bool inner = inner_->ShouldExit(step, s);
    return inner && step + ahead_ >= min_depth_;
  }
  bool needs_kl() const override { return inner_->needs_kl(); }
  bool follows_budget() const override { return inner_->follows_budget(); }
  std::string Describe() const override;

 private:
  std::unique_ptr<ExitPolicy> inner_;
  int32_t min_depth_, ahead_;
};

// Replayed exit depths (benchmarks, tests): the i-th token (counting Reset calls from 0)
// exits after depths[i] steps; past the end of the list the last depth repeats. `ahead`
// is the number of steps between a decision and the exit (1 under the lookahead gate), so
// the policy fires after step depths[i] - ahead and a depth below 1 + ahead is unreachable.
// A fixed depth d is ReplayExit({d}, ahead).
class ReplayExit final : public ExitPolicy {
 public:
  ReplayExit(std::vector<int32_t> depths, int32_t ahead)
      : depths_(std::move(depths)), ahead_(ahead) {}
  void Reset() override { cur_ = next_++; }
  bool ShouldExit(int32_t step, const StepSignal&) override;
  std::string Describe() const override;

 private:
  std::vector<int32_t> depths_;
  int32_t ahead_;
  int64_t next_ = 0, cur_ = 0;
};

// Exit depths drawn per token from a seeded distribution: min_depth plus a binomial count
// of the max_depth - min_depth remaining steps, with mean `mean` (clamped to the range).
// Depth of token i depends only on (seed, i), so it is independent of scheduling.
class RandomDepthExit final : public ExitPolicy {
 public:
  RandomDepthExit(double mean, int32_t min_depth, int32_t max_depth, uint64_t seed, int32_t ahead);
  void Reset() override { cur_ = next_++; }
  bool ShouldExit(int32_t step, const StepSignal&) override { return step + ahead_ >= Depth(cur_); }
  int32_t Depth(int64_t token) const;
  std::string Describe() const override;

 private:
  double mean_, p_;
  int32_t min_, max_, ahead_;
  uint64_t seed_;
  int64_t next_ = 0, cur_ = 0;
};

}  // namespace fathom
