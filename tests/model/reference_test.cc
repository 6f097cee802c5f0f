// fathom against the PyTorch reference (tests/reference/reference.py) on tiny random
// checkpoints with the real tensor names: full-prompt logits for every family and loop
// count, Ouro's exit probabilities and exit steps, Huginn's latent changes, bf16 weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "exec/exit_policy.h"
#include "exec/prompt.h"
#include "kv/block_pool.h"
#include "model/test_util.h"

namespace fathom {
namespace {

using testing::ReadF32File;
using testing::RelativeError;
using testing::TempDir;

const std::vector<int32_t> kPrompt = {1, 17, 42, 200, 3, 99, 7, 150, 64, 5, 255, 0, 31};

struct Fathom {
  PrefillResult out;
  // f32 K/V unless a test asks for bf16: the f32 comparisons are at 1e-4.
  void Run(const Model& m, const std::vector<int32_t>& ids, int32_t loops, DType kv_dtype = DType::kF32) {
    PromptOptions opt;
    opt.kv_dtype = kv_dtype;
    opt.loops = loops;
    opt.record_signals = true;
    auto r = RunPrompt(m, ids, opt);
    ASSERT_TRUE(r.ok()) << r.status().message();
    out = std::move(r).value();
  }
};

std::unique_ptr<Model> Load(const std::string& dir) {
  auto m = Model::Load(dir);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(m).value() : nullptr;
}

class DenseReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DenseReferenceTest, FullPromptLogitsMatchF32) {
  TempDir dir;
  testing::MakeTinyModel(GetParam(), dir / "model", DType::kF32);
  auto m = Load(dir / "model");
  ASSERT_TRUE(m);
  Fathom f;
  f.Run(*m, kPrompt, 0);
  testing::RunReference(dir / "model", kPrompt, 0, dir.path());
  const auto ref = ReadF32File(dir / "logits.f32");
  ASSERT_EQ(ref.size(), kPrompt.size() * static_cast<size_t>(m->spec().vocab));
  EXPECT_LE(RelativeError(f.out.logits, ref), 1e-4);
}

TEST_P(DenseReferenceTest, Bf16LogitsWithin2e2) {
  TempDir dir;
  testing::MakeTinyModel(GetParam(), dir / "model", DType::kBF16);
  auto m = Load(dir / "model");
  ASSERT_TRUE(m);
  Fathom f;
  f.Run(*m, kPrompt, 0);
  testing::RunReference(dir / "model", kPrompt, 0, dir.path());
  EXPECT_LE(RelativeError(f.out.logits, ReadF32File(dir / "logits.f32")), 2e-2);
}

INSTANTIATE_TEST_SUITE_P(Families, DenseReferenceTest,
                         ::testing::Values("llama", "qwen2", "qwen3"));

// llama3 RoPE scaling (Llama 3.1 / 3.2) in a Llama and an Ouro checkpoint: an original
// length of 16 with high / low frequency factors 2 / 0.5 puts the tiny models' frequencies
// in all three bands (kept, blended, divided by 8) within the 13-token prompt.
TEST(ScaledRopeReferenceTest, Llama3ScalingMatchesTheReference) {
  for (const auto& [family, loops] : {std::pair<std::string, int32_t>{"llama", 0}, {"ouro", 2}}) {
    SCOPED_TRACE(family);
    TempDir dir;
    testing::MakeTinyModel(family, dir / "model", DType::kF32);
    auto plain = Load(dir / "model");
    ASSERT_TRUE(plain);
    Fathom unscaled;
    unscaled.Run(*plain, kPrompt, loops);
    const std::string config = dir / "model/config.json";
    nlohmann::json j = nlohmann::json::parse(std::ifstream(config));
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 0.5},
                         {"high_freq_factor", 2.0},
                         {"original_max_position_embeddings", 16}};
    std::ofstream(config) << j.dump(2);
    auto m = Load(dir / "model");
    ASSERT_TRUE(m);
    Fathom f;
    f.Run(*m, kPrompt, loops);
    testing::RunReference(dir / "model", kPrompt, loops, dir.path());
    const auto ref = ReadF32File(dir / "logits.f32");
    EXPECT_LE(RelativeError(f.out.logits, ref), 1e-4);
    EXPECT_GT(RelativeError(unscaled.out.logits, ref), 1e-2) << "the scaling changed nothing";
  }
}

class OuroReferenceTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(OuroReferenceTest, LogitsExitProbabilitiesAndExitSteps) {
  const int32_t loops = GetParam();
  TempDir dir;
  testing::MakeTinyModel("ouro", dir / "model", DType::kF32);
  auto m = Load(dir / "model");
  ASSERT_TRUE(m);
  Fathom f;
  f.Run(*m, kPrompt, loops);
  const std::vector<double> qs = {0.2, 0.5, 0.9};
  testing::RunReference(dir / "model", kPrompt, loops, dir.path(),
                        "--exit-thresholds 0.2,0.5,0.9");
  EXPECT_LE(RelativeError(f.out.logits, ReadF32File(dir / "logits.f32")), 1e-4);

  // Per-step gate lambda [R, n] and the exit probability p_t it implies.
  const auto ref_lambda = ReadF32File(dir / "ouro_lambda.f32");
  ASSERT_EQ(f.out.gate_lambda.size(), ref_lambda.size());
  EXPECT_LE(RelativeError(f.out.gate_lambda, ref_lambda), 1e-4);
  const size_t n = kPrompt.size();
  const auto ref_pdf = ReadF32File(dir / "ouro_pdf.f32");
  ASSERT_EQ(ref_pdf.size(), static_cast<size_t>(loops) * n);
  for (size_t t = 0; t < n; ++t) {
    double survive = 1;
    for (int32_t r = 0; r < loops; ++r) {
      const double lambda = f.out.gate_lambda[static_cast<size_t>(r) * n + t];
      const double p = r + 1 == loops ? survive : lambda * survive;
      survive *= 1 - lambda;
      EXPECT_NEAR(p, ref_pdf[static_cast<size_t>(r) * n + t], 1e-5) << "token " << t << " step " << r;
    }
  }
  // Exit steps chosen by fathom's policy against the reference's, for each q.
  const auto ref_exit = ReadF32File(dir / "ouro_exit_step.f32");
  ASSERT_EQ(ref_exit.size(), qs.size() * n);
  for (size_t qi = 0; qi < qs.size(); ++qi) {
    for (size_t t = 0; t < n; ++t) {
      CumulativeHazardExit policy(qs[qi]);
      policy.Reset();
      int32_t exit_step = loops;
      for (int32_t r = 1; r <= loops; ++r) {
        StepSignal s;
        s.gate_lambda = f.out.gate_lambda[static_cast<size_t>(r - 1) * n + t];
        if (policy.ShouldExit(r, s)) {
          exit_step = r;
          break;
        }
      }
      EXPECT_EQ(exit_step, static_cast<int32_t>(ref_exit[qi * n + t])) << "q " << qs[qi] << " token " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Loops, OuroReferenceTest, ::testing::Values(1, 2, 3, 4));

class HuginnReferenceTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(HuginnReferenceTest, LogitsAndLatentDiff) {
  const int32_t loops = GetParam();
  TempDir dir;
  testing::MakeTinyModel("huginn", dir / "model", DType::kF32);
  auto m = Load(dir / "model");
  ASSERT_TRUE(m);
  Fathom f;
  f.Run(*m, kPrompt, loops);
  testing::RunReference(dir / "model", kPrompt, loops, dir.path());
  EXPECT_LE(RelativeError(f.out.logits, ReadF32File(dir / "logits.f32")), 1e-4);
  const auto ref_diff = ReadF32File(dir / "huginn_latent_diff.f32");
  ASSERT_EQ(f.out.latent_diff.size(), ref_diff.size());
  EXPECT_LE(RelativeError(f.out.latent_diff, ref_diff), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Loops, HuginnReferenceTest, ::testing::Values(1, 2, 5, 8));

// bf16 checkpoints against the f32 reference, at the tiny preset's depth and at Huginn-0125's
// default depth (mean_recurrence 32). Which path runs depends on the CPU: with AVX-512 the
// matmuls take bf16 activations (the fast default) or split them into hi + lo bf16 parts
// (LoadOptions::split_bf16_activations, ~16 mantissa bits); without it oneDNN 2.6 has no bf16
// matmul and the bf16 weights run exactly as f32, so both loads are the f32 path.
// Tolerances, from the worst of three seeds measured (2026-12-01) with fathom and with the
// reference emulating each path (every matmul input rounded to bf16, or split):
//   loops  f32 path      split           bf16 activations
//   3-4    7e-6 -> 1e-4  8e-5 -> 1e-3    3.3e-2 (Ouro < 1e-2) -> 5e-2
//   32     4e-3 -> 1e-2  2.4e-2 -> 5e-2  10-55%: no elementwise tolerance holds
// At 32 steps the random core is not contractive: it amplifies any rounding, even f32's
// (4e-3 from the same weights in f32 with another summation order). A trained Huginn
// converges to a fixed point, where this amplification is absent; there the fast path is
// measured by quality (issue 17), not here. So at 32 loops the fast path is not asserted.
struct Bf16Case {
  const char* family;
  int32_t loops;
  double f32_path, split, fast;  // tolerances; fast < 0: not asserted
};

std::string Bf16Name(const ::testing::TestParamInfo<Bf16Case>& p) {
  return std::string(p.param.family) + "_loops" + std::to_string(p.param.loops);
}

class LoopedBf16Test : public ::testing::TestWithParam<Bf16Case> {};

TEST_P(LoopedBf16Test, LogitsWithinTheToleranceOfEachPath) {
  const Bf16Case& c = GetParam();
  TempDir dir;
  testing::MakeTinyModel(c.family, dir / "model", DType::kBF16);
  testing::RunReference(dir / "model", kPrompt, c.loops, dir.path());
  const auto ref = ReadF32File(dir / "logits.f32");
  LoadOptions accurate;
  accurate.split_bf16_activations = true;
  auto split = Model::Load(dir / "model", accurate);
  ASSERT_TRUE(split.ok()) << split.status().message();
  auto fast = Load(dir / "model");
  ASSERT_TRUE(fast);
  const bool bf16_compute = fast->weights().lm_head.compute_dtype() == DType::kBF16;
  Fathom f;
  f.Run(**split, kPrompt, c.loops);
  EXPECT_LE(RelativeError(f.out.logits, ref), bf16_compute ? c.split : c.f32_path) << "split activations";
  f.Run(*fast, kPrompt, c.loops);
  const double tol = bf16_compute ? c.fast : c.f32_path;
  if (tol >= 0) {
    EXPECT_LE(RelativeError(f.out.logits, ref), tol) << "default (bf16 activations)";
  }
}

// The bf16 KV cache (the default) with f32 weights against the f32 reference. Storing K and
// V in bf16 (round to nearest, 8 significant bits) moves each element by at most
// u = 2^-8 of itself. In one attention, a score s = scale q.k moves by at most
// u * scale * sum_d |q_d k_d| and the output by about u * (1 + 2 |s|) of its size
// (BoundForStorage in paged_attention_test.cc has the exact form); each attention's
// output enters the residual stream once, so to first order the logits' relative error is
// at most u times the number of attention evaluations on a token's path (prelude + loops x
// core + coda layers) times c, the gain through the norms and MLPs that follow. The test
// takes c = 1: tolerance u x attentions (7.8e-3 for 2 dense layers, 0.14 for Huginn's 36
// at 8 loops). Measured (2026-12-01): 0.18-0.36 of it (llama 1.4e-3, qwen2 8.9e-4, qwen3
// 1.1e-3, lckv 2.6e-3, ouro x4 5.0e-3, huginn x4 2.3e-2, huginn x8 5.1e-2; Huginn's random
// core amplifies rounding, see LoopedBf16Test). So that the test cannot pass on f32 K/V,
// the bf16 run must also be further from the reference than the f32 run.
struct KvCase {
  const char* family;
  int32_t loops;  // 0: a dense model
};

std::string KvCaseName(const ::testing::TestParamInfo<KvCase>& p) {
  return std::string(p.param.family) + "_loops" + std::to_string(p.param.loops);
}

// A family's logits with K/V stored as `t` and as f32, each against the PyTorch reference;
// `attentions`: the attention evaluations on a token's path (prelude + loops x core + coda).
struct StoredKvRun {
  double err = 0, err_f32 = 0;
  int64_t attentions = 0;
};

void RunStoredKv(const KvCase& c, DType t, StoredKvRun* out) {
  TempDir dir;
  testing::MakeTinyModel(c.family, dir / "model", DType::kF32);
  auto m = Load(dir / "model");
  ASSERT_TRUE(m);
  testing::RunReference(dir / "model", kPrompt, c.loops, dir.path());
  const auto ref = ReadF32File(dir / "logits.f32");
  Fathom exact, stored;
  exact.Run(*m, kPrompt, c.loops, DType::kF32);
  stored.Run(*m, kPrompt, c.loops, t);
  const ModelSpec& s = m->spec();
  const int32_t loops = s.loop.looped ? c.loops : 0;
  out->attentions = s.n_prelude + int64_t{loops} * s.n_core + s.n_coda;
  out->err = RelativeError(stored.out.logits, ref);
  out->err_f32 = RelativeError(exact.out.logits, ref);
}

class Bf16KvReferenceTest : public ::testing::TestWithParam<KvCase> {};

// Runs the case and expects the stored-K/V error within per_attention x the attentions on a
// token's path, the f32 run at the reference, and the stored run visibly further from it.
void ExpectStoredKvWithin(const KvCase& c, DType t, double per_attention) {
  StoredKvRun r;
  ASSERT_NO_FATAL_FAILURE(RunStoredKv(c, t, &r));
  const double tol = per_attention * static_cast<double>(r.attentions);
  std::printf("%s loops %d: %lld attentions, %s KV %.3g (tolerance %.3g), f32 KV %.3g\n", c.family,
              c.loops, static_cast<long long>(r.attentions), KvDtypeName(t).data(), r.err, tol,
              r.err_f32);
  EXPECT_LE(r.err, tol);
  EXPECT_LE(r.err_f32, 1e-4);
  EXPECT_GT(r.err, r.err_f32);
}

TEST_P(Bf16KvReferenceTest, LogitsWithinTheBf16StorageBound) {
  ExpectStoredKvWithin(GetParam(), DType::kBF16, std::ldexp(1.0, -8));
}

INSTANTIATE_TEST_SUITE_P(Families, Bf16KvReferenceTest,
                         ::testing::Values(KvCase{"llama", 0}, KvCase{"qwen2", 0}, KvCase{"qwen3", 0},
                                           KvCase{"lckv", 0}, KvCase{"ouro", 4}, KvCase{"huginn", 4},
                                           KvCase{"huginn", 8}),
                         KvCaseName);

// The int8 KV cache (--kv-dtype int8) the same way. An element moves by at most u = 1/254 of
// its head's max |x| (round to the nearest multiple of max / 127), so a score by at most
// u * scale * sum_d |q_d| * max_d |k_d|, against bf16's 2^-8 * scale * sum_d |q_d k_d|: the
// same first-order argument with the per-score term larger by about max |k| / mean |k|, which
// is about 3-3.5 for normally distributed values of 32-128 dimensions. The test takes 4:
// tolerance 4 u x attentions. Measured (2026-12-07): llama 3.9e-3, qwen2 2.5e-3, qwen3
// 2.6e-3, lckv 5.9e-3, ouro x4 1.3e-2 (0.08-0.12 of it; 2.3-2.8x bf16 KV's error), huginn x4
// 9.1e-2 and x8 0.39 (0.29 and 0.69 of it; 3.9x and 7.9x bf16's: Huginn's random core
// amplifies a larger rounding more than in proportion, see LoopedBf16Test). The int8 run must also
// be further from the reference than the f32 run.
class Int8KvReferenceTest : public ::testing::TestWithParam<KvCase> {};

TEST_P(Int8KvReferenceTest, LogitsWithinTheInt8StorageBound) {
  ExpectStoredKvWithin(GetParam(), DType::kI8, 4.0 / 254);
}

INSTANTIATE_TEST_SUITE_P(Families, Int8KvReferenceTest,
                         ::testing::Values(KvCase{"llama", 0}, KvCase{"qwen2", 0},
                                           KvCase{"qwen3", 0}, KvCase{"lckv", 0}, KvCase{"ouro", 4},
                                           KvCase{"huginn", 4}, KvCase{"huginn", 8}),
                         KvCaseName);

INSTANTIATE_TEST_SUITE_P(Depths, LoopedBf16Test,
                         ::testing::Values(Bf16Case{"ouro", 4, 1e-4, 1e-3, 2e-2},
                                           Bf16Case{"huginn", 4, 1e-4, 1e-3, 5e-2},
                                           Bf16Case{"huginn", 32, 1e-2, 5e-2, -1}),
                         Bf16Name);

}  // namespace
}  // namespace fathom
