// A model's results do not depend on the number of threads that compute them: the logits
// of every prompt position, bit for bit, on 1, 2 and 3 threads. This is what lets
// `--adaptive-threads` (engine/thread_governor.h) run each step on whatever count is
// fastest without changing what the engine returns, and what makes a result reproducible
// on another --threads. The prompt runs whole (the matmuls above the GEMV's rows: oneDNN's
// whole-M primitive on 1 thread, the pool's tiles on more; tiled prompt attention), in
// chunks of 7 rows (the multi-row GEMV) and one token at a time (the one-row GEMV, decode
// attention split into units by KV head once a row has >= 128 keys), on the small presets
// of the looped families (real widths: the parallel paths run), bf16 and int4 weights.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <random>

#include "exec/prompt.h"
#include "kernels/gemv_bf16.h"
#include "model/test_util.h"

namespace fathom {
namespace {

using testing::TempDir;

struct Case {
  const char* family;
  const char* preset;
  WeightFormat weights;
};

class ThreadInvarianceTest : public ::testing::TestWithParam<Case> {};

TEST_P(ThreadInvarianceTest, LogitsAreTheSameBitsOnOneTwoAndThreeThreads) {
  const Case& c = GetParam();
  // bf16 weights on a CPU with AVX-512 but not its BF16 instructions run on oneDNN's own
  // OpenMP team, whose split oneDNN chooses (kernels/matmul_test.cc,
  // LinearTest.BitsDoNotDependOnTheThreadCount).
  if (c.weights == WeightFormat::kCheckpoint && !internal::CpuHasAvx512Bf16() &&
      __builtin_cpu_supports("avx512f"))
    GTEST_SKIP() << "bf16 matmuls on oneDNN's OpenMP team on this CPU";
  TempDir dir;
  const std::string model_dir = dir / "model";
  const auto made = testing::RunCommand(testing::FathomBinary() + " make-model " + c.family + " " +
                                        model_dir + " --preset " + c.preset + " --seed 3");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  LoadOptions load;
  load.weights = c.weights;
  auto model = Model::Load(model_dir, load);
  ASSERT_TRUE(model.ok()) << model.status().message();
  std::mt19937 rng(5);
  std::vector<int32_t> ids(136);  // the last rows attend to >= 128 keys: split by KV head
  for (int32_t& t : ids)
    t = static_cast<int32_t>(rng() % static_cast<uint32_t>((*model)->spec().vocab));
  const int threads = omp_get_max_threads();
  for (const int64_t chunk : {int64_t{0}, int64_t{7}, int64_t{1}}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    std::vector<float> one;
    for (const int t : {1, 2, 3}) {
      SCOPED_TRACE(std::to_string(t) + " threads");
      omp_set_num_threads(t);
      PromptOptions opt;
      opt.chunk = chunk;
      opt.loops = 4;  // Huginn's default (32) would only repeat the core's paths
      opt.layout = KvLayout::kLastExited;
      auto r = RunPrompt(**model, ids, opt);
      ASSERT_TRUE(r.ok()) << r.status().message();
      if (t == 1) {
        one = r->logits;
        continue;
      }
      ASSERT_EQ(r->logits.size(), one.size());
      EXPECT_EQ(std::memcmp(r->logits.data(), one.data(), one.size() * sizeof(float)), 0)
          << "largest relative difference " << testing::RelativeError(r->logits, one);
    }
  }
  omp_set_num_threads(threads);
}

INSTANTIATE_TEST_SUITE_P(LoopedFamilies, ThreadInvarianceTest,
                         ::testing::Values(Case{"ouro", "ouro-small", WeightFormat::kCheckpoint},
                                           Case{"huginn", "huginn-small", WeightFormat::kInt4}),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           return std::string(p.param.family) + "_" +
                                  (p.param.weights == WeightFormat::kInt4 ? "int4" : "bf16");
                         });

}  // namespace
}  // namespace fathom
