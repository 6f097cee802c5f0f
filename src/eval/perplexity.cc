#include "eval/perplexity.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

#include "exec/generate.h"
#include "exec/kv_setup.h"
#include "exec/stage_runner.h"

namespace fathom {
namespace {

double WallNow() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

double CpuNow() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// -log softmax(logits)[target] in double (logits: [vocab]).
double Nll(const float* logits, int64_t vocab, int32_t target) {
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < vocab; ++v) max = std::max(max, static_cast<double>(logits[v]));
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - max);
  return max + std::log(sum) - static_cast<double>(logits[target]);
}

struct Window {
  int64_t begin = 0, n = 0;  // ids [begin, begin + n)
  KvManager::SeqId seq = -1;
  std::unique_ptr<ExitPolicy> policy;  // null: every token runs all loop steps
};

// Runs groups of windows through one StageRunner: per group one prefill of every window's
// first token, then one decode position at a time over the windows still running.
class Evaluator {
 public:
  Evaluator(const Model& model, const std::vector<int32_t>& ids, const PerplexityOptions& opt,
            int32_t loops, KvManager& kv)
      : model_(model), ids_(ids), opt_(opt), loops_(loops), kv_(kv), runner_(model, kv, opt.batch),
        nll_(ids.size(), std::numeric_limits<float>::quiet_NaN()), depth_(ids.size(), -1) {}

  Status RunGroup(std::vector<Window>& group) {
    for (Window& w : group) {
      w.seq = kv_.AddSequence(1);
      if (!kv_.Grow(w.seq, w.n)) return Status::Error("internal: KV pool too small");
      runner_.AddSequence(w.seq, loops_);
    }
    Status s = Prefill(group);
    int64_t longest = 0;
    for (const Window& w : group) longest = std::max(longest, w.n);
    // Token at window position p predicts p + 1, so the last token runs no stage.
    for (int64_t p = 1; s.ok() && p + 1 < longest; ++p) s = DecodePosition(group, p);
    for (Window& w : group) {
      runner_.ReleaseSequence(w.seq);
      kv_.Release(w.seq);
    }
    return s;
  }

  // NLL and depth by target position (NaN / -1: not a target).
  const std::vector<float>& nll() const { return nll_; }
  const std::vector<int32_t>& depth() const { return depth_; }
  double nll_sum() const { return nll_sum_; }  // in double, over every target
  const StageRunner::GateCounts& gate_counts() const { return runner_.gate_counts(); }

 private:
  Status Prefill(const std::vector<Window>& group) {
    chunks_.clear();
    for (const Window& w : group) {
      PrefillChunk c;
      c.seq = w.seq;
      c.ids = ids_.data() + w.begin;
      c.pos0 = 0;
      c.n = 1;
      c.loops = loops_;
      c.logits = PrefillChunk::Logits::kLast;
      c.budget = static_cast<float>(opt_.budget.value_or(1.0));
      chunks_.push_back(c);
    }
    FATHOM_RETURN_IF_ERROR(runner_.Prefill(chunks_, false, &pre_));
    for (size_t i = 0; i < group.size(); ++i)
      Record(group[i].begin + 1, pre_.logits.data() + static_cast<int64_t>(i) * model_.spec().vocab, loops_);
    return Status::Ok();
  }

  // Window position p of every window that has a target at p + 1: prelude, loop steps until
  // each token's policy exits it (or `loops`), coda; the logits score the target.
  Status DecodePosition(const std::vector<Window>& group, int64_t p) {
    items_.clear();
    policies_.clear();
    for (size_t i = 0; i < group.size(); ++i) {
      if (p + 1 >= group[i].n) continue;
      DecodeItem d;
      d.slot = static_cast<int32_t>(i);
      d.seq = group[i].seq;
      d.pos = p;
      d.token = ids_[group[i].begin + p];
      d.budget = static_cast<float>(opt_.budget.value_or(1.0));
      items_.push_back(d);
      ExitPolicy* policy = group[i].policy.get();
      if (policy) {
        policy->Reset();
        if (opt_.budget) policy->SetBudget(*opt_.budget);
      }
      policies_.push_back(policy);
    }
    FATHOM_RETURN_IF_ERROR(runner_.Prelude(items_));
    FATHOM_RETURN_IF_ERROR(LoopSteps());
    FATHOM_RETURN_IF_ERROR(runner_.Coda(items_, &coda_));
    for (size_t k = 0; k < items_.size(); ++k) {
      const Window& w = group[static_cast<size_t>(items_[k].slot)];
      Record(w.begin + p + 1, coda_.logits.data() + static_cast<int64_t>(k) * model_.spec().vocab, items_[k].step);
    }
    return Status::Ok();
  }

  // Core steps over items_ until each exits; leaves each item's depth in its `step` (what
  // Coda reads as the steps run). As generate.cc: a decision after step r exits at r + 1,
  // or r + 2 under the lookahead gate, and every token exits at `loops`.
  Status LoopSteps() {
    const int32_t ahead = opt_.lookahead ? 1 : 0;
    exit_at_.assign(items_.size(), loops_);
    active_.clear();
    for (size_t k = 0; k < items_.size(); ++k) active_.push_back(k);
    for (int32_t r = 0; r < loops_ && !active_.empty(); ++r) {
      step_items_.clear();
      for (size_t k : active_) {
        items_[k].step = r;
        items_[k].kl = policies_[k] && policies_[k]->needs_kl();
        step_items_.push_back(items_[k]);
      }
      FATHOM_RETURN_IF_ERROR(runner_.CoreStep(step_items_, &step_));
      size_t kept = 0;
      for (size_t j = 0; j < active_.size(); ++j) {
        const size_t k = active_[j];
        ExitPolicy* policy = policies_[k];
        if (policy && exit_at_[k] == loops_ && policy->ShouldExit(r + 1, step_.signals[j]))
          exit_at_[k] = std::min(loops_, r + 1 + ahead);
        if (r + 1 >= exit_at_[k]) {
          items_[k].step = r + 1;
        } else {
          active_[kept++] = k;
        }
      }
      active_.resize(kept);
    }
    if (loops_ == 0)
      for (DecodeItem& d : items_) d.step = 0;
    return Status::Ok();
  }

  void Record(int64_t target, const float* logits, int32_t depth) {
    const double nll = Nll(logits, model_.spec().vocab, ids_[target]);
    nll_[target] = static_cast<float>(nll);
    nll_sum_ += nll;
    depth_[target] = depth;
  }

  const Model& model_;
  const std::vector<int32_t>& ids_;
  const PerplexityOptions& opt_;
  int32_t loops_;
  KvManager& kv_;
  StageRunner runner_;
  std::vector<float> nll_;
  std::vector<int32_t> depth_;
  double nll_sum_ = 0;
  // Reused per call.
  std::vector<PrefillChunk> chunks_;
  PrefillResult pre_;
  std::vector<DecodeItem> items_, step_items_;
  std::vector<ExitPolicy*> policies_;  // per item of items_
  std::vector<int32_t> exit_at_;       // per item: the depth it leaves at
  std::vector<size_t> active_;         // items still in the loop
  CoreStepResult step_;
  CodaResult coda_;
};

Status CheckOptions(const Model& model, const std::vector<int32_t>& ids, const PerplexityOptions& opt,
                    int64_t context) {
  const ModelSpec& spec = model.spec();
  if (ids.size() < 2)
    return Status::Error("ids: " + std::to_string(ids.size()) +
                         " token(s); perplexity needs at least 2 (one predicts the next)");
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= spec.vocab)
      return Status::Error("ids: token " + std::to_string(i) + " has id " + std::to_string(ids[i]) +
                           ", outside the vocabulary [0, " + std::to_string(spec.vocab) + ")");
  if (context < 2 || context > model.rope().max_positions())
    return Status::Error("context: " + std::to_string(context) + " outside [2, " +
                         std::to_string(model.rope().max_positions()) + "] (the model's positions)");
  if (opt.batch < 1) return Status::Error("batch: must be at least 1");
  if (opt.budget) {
    if (!(*opt.budget >= 0 && *opt.budget <= 1))
      return Status::Error("budget: " + std::to_string(*opt.budget) + " outside [0, 1]");
    if (opt.exit.kind == ExitSpec::Kind::kNone && !spec.l2a.enabled)
      return Status::Error("budget: scales an exit threshold (q*b for Ouro, t/b for Huginn); give one "
                           "(or use an L2A gate checkpoint, whose routers read b)");
  }
  return Status::Ok();
}

void Summarize(const Model& model, const Evaluator& ev, const PerplexityOptions& opt, PerplexityResult* res) {
  const ModelSpec& spec = model.spec();
  res->depth_histogram.assign(static_cast<size_t>(res->loops) + 1, 0);
  for (size_t t = 0; t < ev.depth().size(); ++t) {
    const int32_t d = ev.depth()[t];
    if (d < 0) continue;
    ++res->predictions;
    res->core_steps += d;
    ++res->depth_histogram[static_cast<size_t>(d)];
    if (opt.keep_tokens) res->nll.push_back(ev.nll()[t]), res->depths.push_back(d);
  }
  res->nll_sum = ev.nll_sum();
  res->mean_nll = res->nll_sum / static_cast<double>(res->predictions);
  res->perplexity = std::exp(res->mean_nll);
  res->mean_depth = static_cast<double>(res->core_steps) / static_cast<double>(res->predictions);
  res->layers_per_token = spec.n_prelude + spec.n_coda + res->mean_depth * spec.n_core;
  if (!spec.loop.looped) res->layers_per_token = static_cast<double>(spec.layers.size());
  const StageRunner::GateCounts& g = ev.gate_counts();
  if (g.token_layers > 0) {
    const auto tl = static_cast<double>(g.token_layers);
    res->attention_fraction = static_cast<double>(g.attention) / tl;
    res->mlp_fraction = static_cast<double>(g.mlp) / tl;
    res->heads_fraction = static_cast<double>(g.heads) / (tl * static_cast<double>(spec.n_heads));
    res->matmul_fraction = g.matmul_flops / g.dense_matmul_flops;
  }
}

}  // namespace

int64_t DefaultContext(const Model& model) { return std::min<int64_t>(model.rope().max_positions(), 1024); }

Result<PerplexityResult> EvaluatePerplexity(const Model& model, const std::vector<int32_t>& ids,
                                            const PerplexityOptions& opt) {
  const double wall0 = WallNow(), cpu0 = CpuNow();
  const ModelSpec& spec = model.spec();
  const int64_t context = opt.context > 0 ? opt.context : DefaultContext(model);
  FATHOM_RETURN_IF_ERROR(CheckOptions(model, ids, opt, context));
  FATHOM_ASSIGN_OR_RETURN(int32_t loops, ResolveLoops(spec, opt.loops));
  // One window of every group in flight holds `context` positions in every physical layer.
  const int32_t block = 16;
  FATHOM_ASSIGN_OR_RETURN(KvLayerTable table,
                          KvLayerTable::Build(KvShapeOf(spec, loops), opt.layout, opt.shared_after));
  const int64_t blocks = table.num_physical_layers() * ((context + block - 1) / block) * opt.batch;
  FATHOM_ASSIGN_OR_RETURN(auto kv, MakeKvManager(spec, loops, opt.layout, opt.shared_after, blocks, block,
                                                 opt.kv_dtype));
  PerplexityResult res;
  res.loops = loops;
  res.context = context;
  res.tokens = static_cast<int64_t>(ids.size());
  res.kv_bytes_per_prompt_token = kv->BytesPerToken(TokenPhase::kPrompt);
  res.kv_bytes_per_decode_token = kv->BytesPerToken(TokenPhase::kDecode);

  // Non-overlapping windows; a last window of one token has no prediction and is dropped.
  std::vector<Window> windows;
  for (int64_t begin = 0; begin + 1 < res.tokens; begin += context) {
    Window w;
    w.begin = begin;
    w.n = std::min(context, res.tokens - begin);
    FATHOM_ASSIGN_OR_RETURN(w.policy, MakeExitPolicy(spec, opt.exit, loops, opt.lookahead));
    windows.push_back(std::move(w));
  }
  res.windows = static_cast<int64_t>(windows.size());
  Evaluator ev(model, ids, opt, loops, *kv);
  std::vector<Window> group;
  for (size_t i = 0; i < windows.size(); ++i) {
    group.push_back(std::move(windows[i]));
    if (static_cast<int32_t>(group.size()) == opt.batch || i + 1 == windows.size()) {
      FATHOM_RETURN_IF_ERROR(ev.RunGroup(group));
      group.clear();
    }
  }
  Summarize(model, ev, opt, &res);
  res.seconds = WallNow() - wall0;
  res.cpu_seconds = CpuNow() - cpu0;
  res.tokens_per_s = res.seconds > 0 ? static_cast<double>(res.predictions) / res.seconds : 0;
  return res;
}

}  // namespace fathom
