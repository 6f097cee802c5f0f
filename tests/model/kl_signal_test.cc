// Huginn's KL exit signal from batched core steps: KL(p_{r-1} || p_r) with p_0 uniform,
// where p_r is the prediction of the token exiting after r steps, which the test obtains
// independently by running the token to depth r and through the coda, once per r.
#include <gtest/gtest.h>

#include <cmath>

#include "exec/kv_setup.h"
#include "exec/stage_runner.h"
#include "model/test_util.h"

namespace fathom {
namespace {

const std::vector<int32_t> kPrompt = {12, 200, 7, 91, 45};
constexpr int32_t kToken = 77, kLoops = 4;

struct Fixture {
  std::unique_ptr<KvManager> kv;
  std::unique_ptr<StageRunner> runner;
  DecodeItem item;
  explicit Fixture(const Model& m) {
    kv = std::move(MakeKvManager(m.spec(), kLoops, KvLayout::kLastExited, 1, 256, 16)).value();
    runner = std::make_unique<StageRunner>(m, *kv, 1);
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
    item.slot = 0;
    item.seq = seq;
    item.pos = c.n;
    item.token = kToken;
    EXPECT_TRUE(runner->Prelude({item}).ok());
  }
};

std::vector<double> LogSoftmaxD(const std::vector<float>& x) {
  double mx = -INFINITY, sum = 0;
  for (float v : x) mx = std::max(mx, static_cast<double>(v));
  for (float v : x) sum += std::exp(v - mx);
  std::vector<double> out;
  for (float v : x) out.push_back(v - mx - std::log(sum));
  return out;
}

TEST(KlSignalTest, MatchesPredictionsOfEachExitDepth) {
  testing::TempDir dir;
  testing::MakeTinyModel("huginn", dir / "model", DType::kF32);
  auto m = Model::Load(dir / "model");
  ASSERT_TRUE(m.ok()) << m.status().message();
  const int64_t V = (*m)->spec().vocab;

  Fixture with_kl(**m);
  std::vector<float> kl;
  for (int32_t r = 0; r < kLoops; ++r) {
    with_kl.item.step = r;
    CoreStepResult out;
    ASSERT_TRUE(with_kl.runner->CoreStep({with_kl.item}, true, &out).ok());
    kl.push_back(out.signals[0].kl);
  }
  std::vector<double> prev(static_cast<size_t>(V), -std::log(static_cast<double>(V)));
  for (int32_t depth = 1; depth <= kLoops; ++depth) {
    Fixture f(**m);
    for (int32_t r = 0; r < depth; ++r) {
      f.item.step = r;
      CoreStepResult out;
      ASSERT_TRUE(f.runner->CoreStep({f.item}, false, &out).ok());
    }
    f.item.step = depth;
    CodaResult coda;
    ASSERT_TRUE(f.runner->Coda({f.item}, &coda).ok());
    const std::vector<double> cur = LogSoftmaxD(coda.logits);
    double want = 0;
    for (int64_t t = 0; t < V; ++t)
      want += std::exp(prev[static_cast<size_t>(t)]) * (prev[static_cast<size_t>(t)] - cur[static_cast<size_t>(t)]);
    EXPECT_NEAR(kl[static_cast<size_t>(depth - 1)], want, 1e-4 * std::max(1.0, want)) << "step " << depth;
    prev = cur;
  }
}

}  // namespace
}  // namespace fathom
