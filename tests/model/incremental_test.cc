// The KV cache path: the same prompt fed token by token, or in chunks, gives the logits of
// the full-prompt forward; greedy generation picks the reference's argmax at every step.
#include <gtest/gtest.h>

#include <algorithm>

#include "exec/generate.h"
#include "exec/prompt.h"
#include "kernels/sampling.h"
#include "model/test_util.h"

namespace fathom {
namespace {

using testing::ReadF32File;
using testing::RelativeError;
using testing::TempDir;

const std::vector<int32_t> kPrompt = {5, 88, 13, 250, 7, 7, 120, 33, 1, 64, 199};

// Logits of every position, feeding the prompt in chunks of `chunk` tokens.
std::vector<float> ChunkedLogits(const Model& m, const std::vector<int32_t>& ids, int64_t chunk,
                                 int32_t loops, std::optional<uint64_t> init = std::nullopt) {
  PromptOptions opt;
  opt.loops = loops;
  opt.chunk = chunk;
  opt.random_init = init;
  auto r = RunPrompt(m, ids, opt);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->logits : std::vector<float>{};
}

struct Case {
  const char* family;
  int32_t loops;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& p) {
  return std::string(p.param.family) + "_loops" + std::to_string(p.param.loops);
}

class IncrementalTest : public ::testing::TestWithParam<Case> {};

TEST_P(IncrementalTest, TokenByTokenAndChunksMatchFullPrompt) {
  const Case c = GetParam();
  TempDir dir;
  testing::MakeTinyModel(c.family, dir / "model", DType::kF32);
  auto m = Model::Load(dir / "model");
  ASSERT_TRUE(m.ok()) << m.status().message();
  const auto full = ChunkedLogits(**m, kPrompt, 1000, c.loops);
  EXPECT_LE(RelativeError(ChunkedLogits(**m, kPrompt, 1, c.loops), full), 1e-5);
  EXPECT_LE(RelativeError(ChunkedLogits(**m, kPrompt, 4, c.loops), full), 1e-5);
  // And the token-by-token path against the PyTorch reference's full prompt.
  testing::RunReference(dir / "model", kPrompt, c.loops, dir.path());
  EXPECT_LE(RelativeError(ChunkedLogits(**m, kPrompt, 1, c.loops), ReadF32File(dir / "logits.f32")),
            1e-4);
}

INSTANTIATE_TEST_SUITE_P(Families, IncrementalTest,
                         ::testing::Values(Case{"llama", 0}, Case{"qwen2", 0}, Case{"qwen3", 0},
                                           Case{"ouro", 4}, Case{"ouro", 2}, Case{"huginn", 3}),
                         CaseName);

class GreedyGenerationTest : public ::testing::TestWithParam<Case> {};

// Generation reuses the KV cache step by step; the reference recomputes the whole sequence.
TEST_P(GreedyGenerationTest, EachTokenIsTheReferenceArgmax) {
  const Case c = GetParam();
  TempDir dir;
  testing::MakeTinyModel(c.family, dir / "model", DType::kF32);
  auto m = Model::Load(dir / "model");
  ASSERT_TRUE(m.ok()) << m.status().message();
  GenerateOptions opt;
  opt.prompt = kPrompt;
  opt.max_tokens = 10;
  opt.loops = c.loops;
  opt.stop_at_eos = false;
  auto res = Generate(**m, opt);
  ASSERT_TRUE(res.ok()) << res.status().message();
  ASSERT_EQ(res->ids.size(), 10u);

  std::vector<int32_t> seq = kPrompt;
  seq.insert(seq.end(), res->ids.begin(), res->ids.end() - 1);
  testing::RunReference(dir / "model", seq, c.loops, dir.path());
  const auto ref = ReadF32File(dir / "logits.f32");
  const int64_t V = (*m)->spec().vocab;
  ASSERT_EQ(ref.size(), seq.size() * static_cast<size_t>(V));
  for (size_t i = 0; i < res->ids.size(); ++i) {
    const float* row = ref.data() + (kPrompt.size() - 1 + i) * static_cast<size_t>(V);
    const int32_t want = Argmax(row, V);
    if (res->ids[i] != want) {  // only a near-tie may differ
      EXPECT_NEAR(row[res->ids[i]], row[want], 1e-4f * std::abs(row[want])) << "token " << i;
    }
  }
  if ((*m)->spec().loop.looped) {
    for (int32_t d : res->exit_depths) EXPECT_EQ(d, c.loops);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GreedyGenerationTest,
                         ::testing::Values(Case{"llama", 0}, Case{"qwen3", 0}, Case{"ouro", 4},
                                           Case{"huginn", 4}),
                         CaseName);

TEST(ExitTest, OuroExitDepthsFollowTheThreshold) {
  TempDir dir;
  testing::MakeTinyModel("ouro", dir / "model", DType::kF32);
  auto m = Model::Load(dir / "model");
  ASSERT_TRUE(m.ok());
  GenerateOptions opt;
  opt.prompt = kPrompt;
  opt.max_tokens = 24;
  opt.stop_at_eos = false;
  opt.exit_threshold = 1.0;  // cumulative probability reaches 1 only at the last step
  auto never = Generate(**m, opt);
  ASSERT_TRUE(never.ok()) << never.status().message();
  for (int32_t d : never->exit_depths) EXPECT_EQ(d, 4);
  opt.loops = 4;
  opt.exit_threshold.reset();
  auto fixed = Generate(**m, opt);
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(never->ids, fixed->ids);

  opt.loops = 0;
  opt.exit_threshold = 0.05;  // nearly every token leaves at step 1
  auto early = Generate(**m, opt);
  ASSERT_TRUE(early.ok());
  double mean = 0;
  for (size_t i = 1; i < early->exit_depths.size(); ++i) mean += early->exit_depths[i];
  mean /= static_cast<double>(early->exit_depths.size() - 1);
  EXPECT_LT(mean, 4.0);
  for (int32_t d : early->exit_depths) {
    EXPECT_GE(d, 1);
    EXPECT_LE(d, 4);
  }
}

TEST(HuginnInitTest, SeededRandomStateIsReproducibleAndDiffersFromZero) {
  TempDir dir;
  testing::MakeTinyModel("huginn", dir / "model", DType::kF32);
  auto m = Model::Load(dir / "model");
  ASSERT_TRUE(m.ok());
  auto run = [&](std::optional<uint64_t> seed, int64_t chunk) {
    return ChunkedLogits(**m, kPrompt, chunk, 2, seed);
  };
  const auto zero = run(std::nullopt, 100), a = run(7, 100), b = run(7, 3), c = run(8, 100);
  EXPECT_LE(RelativeError(a, b), 1e-5);  // per-position seeding: chunking does not matter
  EXPECT_GT(RelativeError(a, zero), 1e-3);
  EXPECT_GT(RelativeError(a, c), 1e-3);
}

}  // namespace
}  // namespace fathom
