// Checkpoints written by tests/reference/make_tiny.py, not by fathom's own writer: the
// upstream tensor names and config fields as the upstream code writes them (Huginn's
// vocab_size 256 with padding_multiple 4096 and padded_vocab_size, tied embeddings without
// lm_head.weight, sharded files with model.safetensors.index.json). fathom must load each
// one unchanged and match the PyTorch reference on it, for every family.
#include <gtest/gtest.h>

#include "exec/prompt.h"
#include "model/test_util.h"

namespace fathom {
namespace {

using testing::ReadF32File;
using testing::RelativeError;
using testing::TempDir;

const std::vector<int32_t> kPrompt = {3, 17, 200, 5, 99, 42, 7, 255, 0, 128};

struct Case {
  std::string family;
  std::string args;  // make_tiny.py flags
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.family + info.param.args;
  for (char& ch : n)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

class UpstreamCheckpointTest : public ::testing::TestWithParam<Case> {};

// Loads unchanged and gives the reference's logits at the checkpoint's default depth
// (f32 weights, f32 activations: 1e-4, the tolerance of every other f32 reference test).
TEST_P(UpstreamCheckpointTest, LoadsAndMatchesReference) {
  const Case& c = GetParam();
  TempDir dir;
  testing::MakeUpstreamTinyModel(c.family, dir / "model", DType::kF32, c.args);
  auto m = Model::Load(dir / "model");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ((*m)->spec().vocab, 256);  // make_tiny.py's vocabulary, never padded
  PromptOptions opt;
  opt.kv_dtype = DType::kF32;  // exact K/V: the 1e-4 of the f32 reference tests
  opt.record_signals = true;
  auto out = RunPrompt(**m, kPrompt, opt);
  ASSERT_TRUE(out.ok()) << out.status().message();
  testing::RunReference(dir / "model", kPrompt, 0, dir.path());
  const auto ref = ReadF32File(dir / "logits.f32");
  ASSERT_EQ(ref.size(), out->logits.size());
  EXPECT_LE(RelativeError(out->logits, ref), 1e-4);
  if (c.family == "huginn") {
    const auto diff = ReadF32File(dir / "huginn_latent_diff.f32");
    ASSERT_EQ(diff.size(), out->latent_diff.size());
    EXPECT_LE(RelativeError(out->latent_diff, diff), 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, UpstreamCheckpointTest,
    ::testing::Values(Case{"llama", ""}, Case{"llama", " --tied"}, Case{"qwen2", ""},
                      Case{"qwen2", " --shards 2"}, Case{"qwen3", ""}, Case{"ouro", ""},
                      Case{"ouro", " --tied --shards 3"}, Case{"huginn", ""},
                      Case{"huginn", " --tied --shards 2"}, Case{"lckv", ""}, Case{"lckv", " --tied --shards 2"}),
    Name);

// Ouro: the logits a token gets when it exits after t steps, lm_head(h_t), are the
// reference's ouro_step_logits[t - 1] of one R-step run; fathom computes them by running the
// prompt with t loops (the first t steps of an R-step forward are the same computation).
TEST(UpstreamOuroTest, LogitsAtEveryExitDepth) {
  TempDir dir;
  testing::MakeUpstreamTinyModel("ouro", dir / "model", DType::kF32);
  auto m = Model::Load(dir / "model");
  ASSERT_TRUE(m.ok()) << m.status().message();
  const int32_t R = (*m)->spec().loop.default_loops;
  ASSERT_EQ(R, 4);
  testing::RunReference(dir / "model", kPrompt, R, dir.path());
  const auto step_logits = ReadF32File(dir / "ouro_step_logits.f32");  // [R, n, V]
  const size_t per_step = kPrompt.size() * 256;
  ASSERT_EQ(step_logits.size(), static_cast<size_t>(R) * per_step);
  for (int32_t t = 1; t <= R; ++t) {
    PromptOptions opt;
    opt.kv_dtype = DType::kF32;
    opt.loops = t;
    auto out = RunPrompt(**m, kPrompt, opt);
    ASSERT_TRUE(out.ok()) << out.status().message();
    const auto first = step_logits.begin() + static_cast<std::ptrdiff_t>((t - 1) * per_step);
    const std::vector<float> want(first, first + static_cast<std::ptrdiff_t>(per_step));
    EXPECT_LE(RelativeError(out->logits, want), 1e-4) << "exit after step " << t;
  }
}

}  // namespace
}  // namespace fathom
