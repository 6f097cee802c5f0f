// L2A gate checkpoints in the engine: requests with their own budgets and budget traces,
// batched under every scheduler (the routers' rows gathered per sub-layer, ragged across the
// batch), give every request exactly the tokens of generating it alone (Generate) under the
// same budgets; with the `mask` policy a skipped position stays invisible across steps; a
// KV pool small enough to preempt recomputes generated tokens at the budgets they ran.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <random>

#include "engine/engine.h"
#include "exec/generate.h"
#include "exec/kv_setup.h"
#include "model/test_util.h"

namespace fathom {
namespace {

struct Case {
  std::string name, family, args;
};

class L2aEngineTest : public ::testing::TestWithParam<Case> {};

std::vector<RequestSpec> Requests(const ModelSpec& spec, int n, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<RequestSpec> out;
  for (int i = 0; i < n; ++i) {
    RequestSpec r;
    r.prompt.resize(1 + rng() % 14);
    for (int32_t& t : r.prompt) t = static_cast<int32_t>(rng() % spec.vocab);
    r.max_tokens = 4 + static_cast<int32_t>(rng() % 16);
    r.seed = rng();
    r.stop_at_eos = false;
    if (i % 5 == 4) r.sampling.temperature = 0.8f;
    if (i % 4 != 3) r.budget = 0.1 * static_cast<double>(1 + rng() % 10);
    if (i % 2 == 0)  // a budget per decode token; the prompt runs at `budget` (default 1)
      for (int k = 0; k < r.max_tokens; ++k) r.budget_trace.push_back(0.1f * static_cast<float>(rng() % 11));
    out.push_back(r);
  }
  return out;
}

std::vector<int32_t> Alone(const Model& m, const RequestSpec& r) {
  GenerateOptions g;
  g.prompt = r.prompt;
  g.max_tokens = r.max_tokens;
  g.sampling = r.sampling;
  g.seed = r.seed;
  g.stop_at_eos = r.stop_at_eos;
  g.budget = r.budget;
  g.budget_trace = r.budget_trace;
  auto res = Generate(m, g);
  EXPECT_TRUE(res.ok()) << res.status().message();
  return res.ok() ? res->ids : std::vector<int32_t>{};
}

TEST_P(L2aEngineTest, BatchedEqualsAloneUnderPerRequestBudgets) {
  omp_set_num_threads(1);
  testing::TempDir dir;
  testing::MakeUpstreamTinyModel(GetParam().family, dir / "model", DType::kF32, GetParam().args);
  LoadOptions load;
  load.batch_invariant = true;  // a row's matmul result independent of the rows around it
  auto m = Model::Load(dir / "model", load);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const std::vector<RequestSpec> reqs = Requests((*m)->spec(), 20, 7);
  std::vector<std::vector<int32_t>> alone;
  for (const RequestSpec& r : reqs) alone.push_back(Alone(**m, r));
  // A KV pool of 4-row blocks with room for the largest request and one block more: concurrent
  // requests must preempt, and their generated tokens are recomputed at the budgets they ran.
  const DType kv_dtype = EngineOptions{}.kv_dtype;
  auto kv = MakeKvManager((*m)->spec(), 1, KvLayout::kLastExited, 1, 1, 4, kv_dtype);
  ASSERT_TRUE(kv.ok()) << kv.status().message();
  int64_t most = 0;
  for (const RequestSpec& r : reqs) {
    const auto n = static_cast<int64_t>(r.prompt.size());
    most = std::max(most, (*kv)->BlocksFor(n, n + r.max_tokens - 1));
  }
  const size_t small_pool = BlockPool::BytesPerBlock(4, (*m)->spec().kv_dim(), kv_dtype) * static_cast<size_t>(most + 1);
  for (const bool preempt : {false, true}) {
    for (SchedMode mode : {SchedMode::kCb, SchedMode::kCdbRefill}) {
      SCOPED_TRACE(preempt ? "small KV pool" : "default KV pool");
      EngineOptions opt;
      opt.mode = mode;
      opt.width = 5;
      opt.prefill_budget = 11;  // prompts split across steps and batched with decode tokens' steps
      if (preempt) opt.kv_bytes = small_pool, opt.block_size = 4;
      auto e = Engine::Create(**m, opt);
      ASSERT_TRUE(e.ok()) << e.status().message();
      std::vector<RequestId> ids;
      for (const RequestSpec& r : reqs) {
        auto id = (*e)->AddRequest(r);
        ASSERT_TRUE(id.ok()) << id.status().message();
        ids.push_back(*id);
      }
      ASSERT_TRUE((*e)->RunToCompletion().ok());
      if (preempt) {
        EXPECT_GT((*e)->stats().preemptions, 0);
      }
      for (size_t i = 0; i < reqs.size(); ++i)
        EXPECT_EQ((*e)->request(ids[i]).tokens, alone[i]) << "request " << i << " mode " << static_cast<int>(mode);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    L2a, L2aEngineTest,
    ::testing::Values(Case{"llama_compute", "llama", "--l2a-gates attention,mlp,heads --l2a-kv compute"},
                      Case{"llama_mask", "llama", "--l2a-gates attention,mlp,heads --l2a-kv mask"},
                      Case{"qwen3_mask_lora", "qwen3",
                           "--l2a-gates attention,heads --l2a-kv mask --l2a-router-hidden 0 --l2a-lora-rank 2 "
                           "--l2a-lora-alpha 4 --l2a-lora-targets q_proj,o_proj"},
                      // LoRA kept apart: rows at different budgets in one step add different shares
                      Case{"llama_lora_budget_ramp", "llama",
                           "--l2a-gates attention,mlp,heads --l2a-kv compute --l2a-lora-rank 2 "
                           "--l2a-lora-targets q_proj,v_proj,o_proj,up_proj,down_proj --l2a-lora-budget-ramp 0.3,0.8"}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
}  // namespace fathom
