// Batch invariance of the StageRunner: random mixes of sequences, positions and loop depths
// batched into one stage give every item the outputs of the same item run alone (batches
// of one; prompts prefilled in pieces), for dense, Ouro and Huginn, under every KV layout,
// with f32 and bf16 K/V.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "exec/kv_setup.h"
#include "exec/stage_runner.h"
#include "model/test_util.h"

namespace fathom {
namespace {

using testing::RelativeError;
using testing::TempDir;

// One engine: a KV manager and a runner, driven either batched or one item at a time.
struct Engine {
  std::unique_ptr<KvManager> kv;
  std::unique_ptr<StageRunner> runner;
  Engine(const Model& m, int32_t loops, KvLayout layout, int32_t slots, DType kv_dtype) {
    auto k = MakeKvManager(m.spec(), loops, layout, 2, 4096, 16, kv_dtype);
    EXPECT_TRUE(k.ok()) << k.status().message();
    kv = std::move(k).value();
    runner = std::make_unique<StageRunner>(m, *kv, slots);
  }
};

struct Seq {
  std::vector<int32_t> prompt;
  int32_t target_depth = 1;  // loop steps of its decode tokens
  int32_t offset = 0;        // round at which its decode token enters the loop
};

// How far batched may be from alone. The matmuls (oneDNN) are not bitwise batch-invariant:
// their results for a row differ with the batch by ~1e-7 relative, which f32 K/V carry
// through (1e-5). bf16 storage turns such a difference into a whole bf16 step (2^-7 of the
// element) wherever it crosses a rounding boundary, so a few K/V elements differ by one
// ulp and the logits by up to 1.4e-3 (measured 2026-12-01, Huginn; dense 2e-5 to 7e-5):
// 5e-3 for bf16, far below what a batching bug (another row's KV, a wrong position) gives.
double Tolerance(DType kv_dtype) { return kv_dtype == DType::kBF16 ? 5e-3 : 1e-5; }

void ExpectNear(const std::vector<float>& a, const std::vector<float>& b, double tol, const std::string& what) {
  EXPECT_LE(RelativeError(a, b), tol) << what;
}

// tol: Tolerance(kv_dtype) with oneDNN's matmuls, 0 (bit for bit) with batch-invariant ones.
void RunScenario(const Model& m, KvLayout layout, uint64_t seed, DType kv_dtype, double tol) {
  const ModelSpec& spec = m.spec();
  const int32_t R = spec.loop.looped ? 4 : 0;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<Seq> seqs(6);
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].prompt.resize(3 + rng() % 18);
    for (int32_t& t : seqs[i].prompt) t = static_cast<int32_t>(rng() % spec.vocab);
    seqs[i].target_depth = R ? 1 + static_cast<int32_t>(rng() % R) : 0;
    seqs[i].offset = static_cast<int32_t>(rng() % 3);
  }
  const auto n_seq = static_cast<int32_t>(seqs.size());
  Engine batched(m, std::max(R, 1), layout, n_seq, kv_dtype), alone(m, std::max(R, 1), layout, n_seq, kv_dtype);
  std::vector<KvManager::SeqId> ids;
  for (Engine* e : {&batched, &alone})
    for (const Seq& s : seqs) {
      const auto id = e->kv->AddSequence(static_cast<int64_t>(s.prompt.size()));
      ASSERT_TRUE(e->kv->Grow(id, static_cast<int64_t>(s.prompt.size()) + 4));
      e->runner->AddSequence(id, R);
      if (e == &batched) ids.push_back(id);
    }

  // Prefill: all sequences in one call vs. each alone, cut into pieces of 2, 1 and the
  // remaining rows, as a schedule may cut it (the engine's prefill budget, Generate's chunk).
  // The tiled prompt attention takes runs of 4+ rows and its bits differ from the per-row
  // kernel's, so the cut moves rows between kernels unless the model is batch-invariant.
  // Not cut under the slot-sharing layouts, whose prompts depend on the cut by definition
  // (kv_layout.h, "Chunked prefill under the slot-sharing layouts").
  const bool cut =
      !spec.loop.looped || (layout != KvLayout::kShared && layout != KvLayout::kFirstThenShared);
  std::vector<PrefillChunk> chunks;
  for (int32_t i = 0; i < n_seq; ++i) {
    PrefillChunk c;
    c.seq = ids[static_cast<size_t>(i)];
    c.ids = seqs[static_cast<size_t>(i)].prompt.data();
    c.n = static_cast<int64_t>(seqs[static_cast<size_t>(i)].prompt.size());
    c.loops = R;
    c.logits = PrefillChunk::Logits::kLast;
    chunks.push_back(c);
  }
  PrefillResult all;
  ASSERT_TRUE(batched.runner->Prefill(chunks, false, &all).ok());
  const int64_t V = spec.vocab;
  std::vector<int32_t> next(static_cast<size_t>(n_seq));
  for (int32_t i = 0; i < n_seq; ++i) {
    PrefillResult one;
    const PrefillChunk& whole = chunks[static_cast<size_t>(i)];
    for (int64_t pos0 = 0; pos0 < whole.n;) {
      PrefillChunk piece = whole;
      piece.pos0 = pos0;
      piece.ids = whole.ids + pos0;
      piece.n = !cut        ? whole.n
                : pos0 == 0 ? 2
                : pos0 == 2 ? 1
                            : whole.n - pos0;  // prompts have 3+ tokens
      piece.logits =
          pos0 + piece.n == whole.n ? PrefillChunk::Logits::kLast : PrefillChunk::Logits::kNone;
      ASSERT_TRUE(alone.runner->Prefill({piece}, false, &one).ok());
      pos0 += piece.n;
    }
    std::vector<float> part(all.logits.begin() + i * V, all.logits.begin() + (i + 1) * V);
    ExpectNear(part, one.logits, tol, "prefill logits of sequence " + std::to_string(i));
    next[static_cast<size_t>(i)] = Argmax(one.logits.data(), V);
  }

  // Two decode tokens per sequence. Rounds: a sequence's token runs its prelude at its
  // offset, then one core step per round until its depth, then its coda; every stage
  // batches whatever is ready, so batches mix sequences, positions and depths.
  for (int token = 0; token < 2; ++token) {
    std::vector<int32_t> depth(static_cast<size_t>(n_seq), -1);  // -1: not started
    std::vector<bool> done(static_cast<size_t>(n_seq), false);
    for (int32_t round = 0; std::count(done.begin(), done.end(), true) < n_seq; ++round) {
      std::vector<DecodeItem> prelude, core, coda;
      for (int32_t i = 0; i < n_seq; ++i) {
        const Seq& s = seqs[static_cast<size_t>(i)];
        DecodeItem it;
        it.slot = i;
        it.seq = ids[static_cast<size_t>(i)];
        it.pos = static_cast<int64_t>(s.prompt.size()) + token;
        it.token = next[static_cast<size_t>(i)];
        int32_t& d = depth[static_cast<size_t>(i)];
        if (done[static_cast<size_t>(i)]) continue;
        if (d < 0) {
          if (round >= s.offset) prelude.push_back(it), d = 0;
        } else if (d < s.target_depth) {
          it.step = d++;
          core.push_back(it);
        } else {
          it.step = d;
          coda.push_back(it);
          done[static_cast<size_t>(i)] = true;
        }
      }
      if (!prelude.empty()) {
        ASSERT_TRUE(batched.runner->Prelude(prelude).ok());
        for (const DecodeItem& it : prelude) ASSERT_TRUE(alone.runner->Prelude({it}).ok());
      }
      if (!core.empty()) {
        CoreStepResult b, a;
        ASSERT_TRUE(batched.runner->CoreStep(core, &b).ok());
        for (size_t j = 0; j < core.size(); ++j) {
          ASSERT_TRUE(alone.runner->CoreStep({core[j]}, &a).ok());
          const auto t = static_cast<float>(tol);
          EXPECT_NEAR(b.signals[j].gate_lambda, a.signals[0].gate_lambda, t);
          EXPECT_NEAR(b.signals[j].latent_diff, a.signals[0].latent_diff, t * std::max(1.f, a.signals[0].latent_diff));
        }
      }
      if (!coda.empty()) {
        CodaResult b, a;
        ASSERT_TRUE(batched.runner->Coda(coda, &b).ok());
        for (size_t j = 0; j < coda.size(); ++j) {
          ASSERT_TRUE(alone.runner->Coda({coda[j]}, &a).ok());
          std::vector<float> part(b.logits.begin() + static_cast<int64_t>(j) * V,
                                  b.logits.begin() + static_cast<int64_t>(j + 1) * V);
          ExpectNear(part, a.logits, tol, "coda logits, token " + std::to_string(token));
          next[static_cast<size_t>(coda[j].slot)] = a.tokens[0];
        }
      }
    }
  }
}

using Param = std::tuple<std::string, KvLayout>;
std::string ParamName(const ::testing::TestParamInfo<Param>& p) {
  std::string name = std::get<0>(p.param) + "_" + std::string(KvLayoutName(std::get<1>(p.param)));
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

class BatchInvarianceTest : public ::testing::TestWithParam<std::tuple<std::string, KvLayout>> {};

TEST_P(BatchInvarianceTest, BatchedStagesEqualItemsAlone) {
  const auto& [family, layout] = GetParam();
  TempDir dir;
  testing::MakeTinyModel(family, dir / "model", DType::kF32);
  auto m = Model::Load(dir / "model");
  ASSERT_TRUE(m.ok()) << m.status().message();
  for (uint64_t seed : {1u, 2u, 3u}) RunScenario(**m, layout, seed, DType::kF32, Tolerance(DType::kF32));
  for (uint64_t seed : {1u, 2u}) RunScenario(**m, layout, seed, DType::kBF16, Tolerance(DType::kBF16));
}

// With batch-invariant matmuls (LoadOptions::batch_invariant) and every other kernel per
// row, batched stages give every item exactly its outputs alone, in f32, bf16 and int8 K/V.
TEST_P(BatchInvarianceTest, BatchInvariantMatmulsMakeThemEqualBitForBit) {
  const auto& [family, layout] = GetParam();
  TempDir dir;
  testing::MakeTinyModel(family, dir / "model", DType::kF32);
  auto m = Model::Load(dir / "model", {.batch_invariant = true});
  ASSERT_TRUE(m.ok()) << m.status().message();
  for (uint64_t seed : {1u, 2u}) RunScenario(**m, layout, seed, DType::kF32, 0.0);
  RunScenario(**m, layout, 3, DType::kBF16, 0.0);
  RunScenario(**m, layout, 4, DType::kI8, 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    Looped, BatchInvarianceTest,
    ::testing::Combine(::testing::Values("ouro", "huginn"),
                       ::testing::Values(KvLayout::kDepthIndexed, KvLayout::kLastExited,
                                         KvLayout::kShared, KvLayout::kFirstThenShared,
                                         KvLayout::kHybrid)),
    ParamName);
INSTANTIATE_TEST_SUITE_P(Dense, BatchInvarianceTest,
                         ::testing::Combine(::testing::Values("llama", "qwen3"),
                                            ::testing::Values(KvLayout::kDepthIndexed)),
                         ParamName);

}  // namespace
}  // namespace fathom
