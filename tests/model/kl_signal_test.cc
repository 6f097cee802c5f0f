// Huginn's KL exit signal from batched core steps, KL(p_{r-1} || p_r) with p_0 uniform and
// p_r the prediction of the token exiting after r steps, against the PyTorch reference's
// decode-mode KL (tests/reference/reference.py --decode-ids: decode_kl.f32), on a checkpoint
// written by the reference's make_tiny.py.
#include <gtest/gtest.h>

#include <cmath>

#include "exec/kv_setup.h"
#include "exec/stage_runner.h"
#include "model/test_util.h"

namespace fathom {
namespace {

const std::vector<int32_t> kPrompt = {12, 200, 7, 91, 45};
constexpr int32_t kToken = 77, kLoops = 4;

// `n` sequences with the same prompt, each prefilled, and the same decode token kToken
// after it through the prelude in slot i: items[i] is ready for core step 0.
struct Fixture {
  std::unique_ptr<KvManager> kv;
  std::unique_ptr<StageRunner> runner;
  std::vector<DecodeItem> items;
  Fixture(const Model& m, int32_t n) {
    kv = std::move(MakeKvManager(m.spec(), kLoops, KvLayout::kLastExited, 1, 256, 16, DType::kF32)).value();
    runner = std::make_unique<StageRunner>(m, *kv, n);
    for (int32_t i = 0; i < n; ++i) {
      const auto seq = kv->AddSequence(static_cast<int64_t>(kPrompt.size()));
      EXPECT_TRUE(kv->Grow(seq, static_cast<int64_t>(kPrompt.size()) + 1));
      runner->AddSequence(seq, kLoops);
      PrefillChunk c;
      c.seq = seq;
      c.ids = kPrompt.data();
      c.n = static_cast<int64_t>(kPrompt.size());
      c.loops = kLoops;
      PrefillResult pre;
      EXPECT_TRUE(runner->Prefill({c}, false, &pre).ok());
      DecodeItem it;
      it.slot = i;
      it.seq = seq;
      it.pos = c.n;
      it.token = kToken;
      items.push_back(it);
    }
    EXPECT_TRUE(runner->Prelude(items).ok());
  }
};

TEST(KlSignalTest, MatchesReferenceAtEveryStep) {
  testing::TempDir dir;
  testing::MakeUpstreamTinyModel("huginn", dir / "model", DType::kF32);
  auto m = Model::Load(dir / "model");
  ASSERT_TRUE(m.ok()) << m.status().message();

  Fixture f(**m, 1);
  std::vector<float> kl;
  for (int32_t r = 0; r < kLoops; ++r) {
    f.items[0].step = r;
    f.items[0].kl = true;
    CoreStepResult out;
    ASSERT_TRUE(f.runner->CoreStep(f.items, &out).ok());
    kl.push_back(out.signals[0].kl);
  }
  testing::RunReference(dir / "model", kPrompt, kLoops, dir.path(),
                        "--decode-ids " + std::to_string(kToken) + " --layout last-exited");
  const auto want = testing::ReadF32File(dir / "decode_kl.f32");  // [1 decode token, R]
  ASSERT_EQ(want.size(), static_cast<size_t>(kLoops));
  for (int32_t r = 0; r < kLoops; ++r) {
    const float w = want[static_cast<size_t>(r)];
    EXPECT_NEAR(kl[static_cast<size_t>(r)], w, 1e-4 * std::max(1.f, w)) << "step " << r + 1;
  }
  // The signal must be informative for the test to mean anything: it changes across steps.
  EXPECT_GT(std::abs(want[0] - want[static_cast<size_t>(kLoops - 1)]), 1e-3);
}

// The KL signal is computed only for the rows that ask for it: in a batch of two sequences,
// the row without `kl` gets none, and the row with it gets the value it gets alone.
TEST(KlSignalTest, OnlyTheRowsThatAskForIt) {
  testing::TempDir dir;
  testing::MakeUpstreamTinyModel("huginn", dir / "model", DType::kF32);
  auto m = Model::Load(dir / "model");
  ASSERT_TRUE(m.ok()) << m.status().message();
  Fixture alone(**m, 1);
  alone.items[0].kl = true;
  CoreStepResult want;
  ASSERT_TRUE(alone.runner->CoreStep(alone.items, &want).ok());

  Fixture both(**m, 2);
  both.items[1].kl = true;
  CoreStepResult got;
  ASSERT_TRUE(both.runner->CoreStep(both.items, &got).ok());
  EXPECT_EQ(got.signals[0].kl, 0.f);
  EXPECT_GT(got.signals[1].kl, 0.f);
  EXPECT_NEAR(got.signals[1].kl, want.signals[0].kl, 1e-5 * std::max(1.f, want.signals[0].kl));
  EXPECT_FLOAT_EQ(got.signals[0].latent_diff, got.signals[1].latent_diff);  // same token, same state
}

}  // namespace
}  // namespace fathom
