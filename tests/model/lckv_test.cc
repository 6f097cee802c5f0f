// LCKV (model_type "lckv-llama"): config parsing and its errors, the KV a layout stores,
// and fathom's logits against the PyTorch reference (tests/reference/reference.py,
// lckv_forward, written from upstream's modeling_lckv.py) for several layer_types: plain,
// the w=2 and w=10 shapes in small, CLA, sliding windows, force_nodiag off; prompts
// shorter and longer than m + b; whole prompts, chunks and token by token.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "exec/kv_setup.h"
#include "exec/prompt.h"
#include "model/family.h"
#include "model/make_model.h"
#include "model/test_util.h"

namespace fathom {
namespace {

using testing::ReadF32File;
using testing::RelativeError;
using testing::TempDir;

// A tiny LCKV checkpoint: the `tiny` preset (E 64, 4 heads, 2 KV heads, vocab 256) with
// `overrides` on its config.json (layer_types, num_hidden_layers, ...).
void MakeLckv(const std::string& dir, const nlohmann::json& overrides, DType dtype = DType::kF32) {
  MakeModelOptions opt;
  opt.family = "lckv";
  opt.out_dir = dir;
  opt.dtype = dtype;
  opt.seed = 7;
  opt.config_overrides = overrides;
  Status s = MakeRandomModel(opt);
  ASSERT_TRUE(s.ok()) << s.message();
}

Result<ModelSpec> SpecOf(const TempDir& dir, const nlohmann::json& overrides) {
  auto preset = FindFamilyByName("lckv")->preset_config("tiny");
  EXPECT_TRUE(preset.ok());
  nlohmann::json c = *preset;
  c.update(overrides);
  std::ofstream(dir / "config.json") << c.dump();
  return SpecFromConfigFile(dir / "config.json");
}

std::string ErrorOf(const nlohmann::json& overrides) {
  TempDir dir;
  auto spec = SpecOf(dir, overrides);
  return spec.ok() ? "" : spec.status().message();
}

TEST(LckvConfig, MalformedLayerTypesNameTheFieldAndEntry) {
  EXPECT_NE(ErrorOf({{"layer_types", "0_2_2"}}).find("layer_types has 3 entries, num_hidden_layers is 4"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"layer_types", "0_2_9_3"}}).find("layer_types entry 2 ('9') names layer 9, outside [0, 4)"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"layer_types", "0_2x_2_3"}}).find("layer_types entry 1 ('2x') is not a layer index"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"layer_types", "0__2_3"}}).find("layer_types entry 1 ('')"), std::string::npos);
  EXPECT_NE(ErrorOf({{"layer_types", 7}}).find("layer_types"), std::string::npos);
  EXPECT_NE(ErrorOf({{"forward_passes", -1}}).find("forward_passes"), std::string::npos);
  EXPECT_NE(ErrorOf({{"layer_types", "0s_1_2_3"}, {"sliding_window", 0}}).find("sliding_window must be positive"),
            std::string::npos);
  nlohmann::json old = {{"target_layer", 3}};
  TempDir dir;
  auto preset = FindFamilyByName("lckv")->preset_config("tiny");
  nlohmann::json c = *preset;
  c.erase("layer_types");
  c.update(old);
  std::ofstream(dir / "config.json") << c.dump();
  auto spec = SpecFromConfigFile(dir / "config.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("older LCKV revision"), std::string::npos);
}

// Per layer: the source, whether it produces KV, the masks; the cyclic groups of upstream's
// iteration plan, derived by hand from LayerTypeParser.iteration_plan.
TEST(LckvConfig, LayerTableAndCyclicGroups) {
  TempDir dir;
  auto s = SpecOf(dir, {{"num_hidden_layers", 8}, {"layer_types", "0_1_5_5s_5_5_7_6"}, {"force_nodiag", false}});
  ASSERT_TRUE(s.ok()) << s.status().message();
  const std::vector<int32_t> src = {0, 1, 5, 5, 5, 5, 7, 6};
  const std::vector<bool> produces = {true, true, false, false, false, true, true, true};
  const std::vector<bool> no_diag = {false, false, true, true, true, false, true, false};
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(s->layers[i].attn.kv_source, src[i]) << i;
    EXPECT_EQ(s->layers[i].attn.produces_kv, produces[i]) << i;
    EXPECT_EQ(s->layers[i].attn.no_diag, no_diag[i]) << i;
    EXPECT_EQ(s->layers[i].attn.window, i == 3 ? 4096 : 0) << i;
    EXPECT_EQ(s->layers[i].names.qkv.size(), produces[i] ? 3u : 1u) << i;
  }
  // Groups: layer 2 reads 5 -> [2, 6); layer 6 reads 7 -> [6, 8). 7 + 2 passes.
  ASSERT_EQ(s->prompt_iteration.groups.size(), 2u);
  EXPECT_EQ(s->prompt_iteration.groups[0].begin, 2);
  EXPECT_EQ(s->prompt_iteration.groups[0].end, 6);
  EXPECT_EQ(s->prompt_iteration.groups[0].zero_kv, std::vector<int32_t>{5});
  EXPECT_EQ(s->prompt_iteration.groups[1].begin, 6);
  EXPECT_EQ(s->prompt_iteration.groups[1].end, 8);
  EXPECT_EQ(s->prompt_iteration.groups[1].zero_kv, std::vector<int32_t>{7});
  EXPECT_EQ(s->prompt_iteration.passes, 9);
  EXPECT_EQ(s->prompt_iteration.sequential_max, 9);
  // A group grows to the highest layer its members read: 1 reads 3, 2 reads 5.
  auto g = SpecOf(dir, {{"num_hidden_layers", 6}, {"layer_types", "0_3_5_3_4_5"}});
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->prompt_iteration.groups.size(), 1u);
  EXPECT_EQ(g->prompt_iteration.groups[0].begin, 1);
  EXPECT_EQ(g->prompt_iteration.groups[0].end, 6);
  EXPECT_EQ(g->prompt_iteration.groups[0].zero_kv, (std::vector<int32_t>{3, 5}));
  // No layer reads a later one (CLA): no iteration.
  auto cla = SpecOf(dir, {{"layer_types", "0_0_2_2"}});
  ASSERT_TRUE(cla.ok());
  EXPECT_FALSE(cla->prompt_iteration.active());
}

// Only producing layers own KV: blocks per token = producing layers (block = 16 rows of one
// KV layer), for each layout, the real shapes included.
TEST(LckvKv, BlocksPerTokenAreProducingLayers) {
  struct Case {
    const char* preset;
    nlohmann::json overrides;
    int32_t producing;
  };
  const std::vector<Case> cases = {
      {"tiny", {{"layer_types", "0_1_2_3"}}, 4},
      {"tiny", {{"layer_types", "0_2_2_3"}}, 3},
      {"tiny", {{"layer_types", "0_0_2_2"}}, 2},
      {"tiny", {{"layer_types", "3_3_3_3"}}, 1},
      {"tinyllama-lckv-w10", nlohmann::json::object(), 11},  // 0-4, 16, 17-21
      {"tinyllama-lckv-w2", nlohmann::json::object(), 3},    // 0, 20, 21
  };
  for (const Case& c : cases) {
    TempDir dir;
    auto preset = FindFamilyByName("lckv")->preset_config(c.preset);
    ASSERT_TRUE(preset.ok());
    nlohmann::json cfg = *preset;
    cfg.update(c.overrides);
    std::ofstream(dir / "config.json") << cfg.dump();
    auto spec = SpecFromConfigFile(dir / "config.json");
    ASSERT_TRUE(spec.ok()) << spec.status().message();
    auto kv = MakeKvManager(*spec, 1, KvLayout::kLastExited, 1, 64, 16, DType::kF32);
    ASSERT_TRUE(kv.ok()) << kv.status().message();
    EXPECT_EQ((*kv)->table().num_physical_layers(), c.producing) << c.preset << " " << c.overrides.dump();
    // 100 tokens = 7 blocks of 16 rows per producing layer.
    EXPECT_EQ((*kv)->BlocksFor(100, 100), 7 * c.producing) << c.preset;
  }
}

// fathom against the reference, f32 weights.
struct RefCase {
  const char* name;
  nlohmann::json overrides;
};

void PrintTo(const RefCase& c, std::ostream* os) { *os << c.name << " " << c.overrides.dump(); }

std::vector<RefCase> RefCases() {
  return {
      {"plain", {{"layer_types", "0_1_2_3"}}},
      {"w2_shape", {{"layer_types", "0_2_2_3"}}},
      {"w10_shape", {{"num_hidden_layers", 6}, {"layer_types", "0_1_4_4_4_5"}}},
      {"cla", {{"layer_types", "0_0_2_2"}}},
      {"sliding", {{"layer_types", "0s_2s_2_3s"}, {"sliding_window", 3}}},
      {"diag", {{"layer_types", "0_2_2_3"}, {"force_nodiag", false}}},
      {"two_groups", {{"num_hidden_layers", 6}, {"layer_types", "0_2_2_4s_4_5"}, {"sliding_window", 5}}},
  };
}

std::vector<int32_t> Prompt(int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((i * 37 + 11) % 256);
  return ids;
}

std::vector<float> FathomLogits(const Model& m, const std::vector<int32_t>& ids, int64_t chunk) {
  PromptOptions opt;
  opt.kv_dtype = DType::kF32;  // exact K/V: compared with the f32 reference at 1e-4
  opt.chunk = chunk;
  auto r = RunPrompt(m, ids, opt);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->logits : std::vector<float>{};
}

class LckvReferenceTest : public ::testing::TestWithParam<RefCase> {};

// A prompt of 7 tokens (<= m + b = 9: token by token) and one of 30 (parallel, iterated
// groups) whole, in chunks of 12 (parallel, parallel, then 6 token by token) and token by
// token: each against the reference run the same way.
TEST_P(LckvReferenceTest, LogitsMatchTheReference) {
  TempDir dir;
  MakeLckv(dir / "model", GetParam().overrides);
  auto m = Model::Load(dir / "model");
  ASSERT_TRUE(m.ok()) << m.status().message();
  for (int n : {7, 30}) {
    const std::vector<int32_t> ids = Prompt(n);
    for (int64_t chunk : {int64_t{0}, int64_t{12}, int64_t{1}}) {
      if (n == 7 && chunk != 0) continue;  // 7 <= m + b: whole is already token by token
      const std::string args = chunk == 0 ? "" : chunk == 1 ? "--incremental" : "--chunk " + std::to_string(chunk);
      testing::RunReference(dir / "model", ids, 0, dir.path(), args);
      const auto ref = ReadF32File(dir / "logits.f32");
      const auto got = FathomLogits(**m, ids, chunk);
      ASSERT_EQ(got.size(), ref.size());
      EXPECT_LE(RelativeError(got, ref), 1e-4) << GetParam().name << " n=" << n << " chunk=" << chunk;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(LayerTypes, LckvReferenceTest, ::testing::ValuesIn(RefCases()),
                         [](const ::testing::TestParamInfo<RefCase>& p) { return std::string(p.param.name); });

// Prompt-parallel against token by token (the exact, sequential meaning). After k passes
// the first k positions of a chunk are exact (position p reads the group's later layers
// at positions < p only), so with m + b = 9 passes positions 0..8 must agree to float
// rounding; later positions carry the fixed-point iteration's residual, which nothing
// bounds on random weights (a trained model is what makes it small: the paper measures
// it as perplexity). The reference's token-by-token logits are the yardstick.
TEST(LckvParallel, FirstPassesPositionsAreExactAgainstTokenByToken) {
  TempDir dir;
  MakeLckv(dir / "model", {{"layer_types", "0_2_2_3"}});
  auto m = Model::Load(dir / "model");
  ASSERT_TRUE(m.ok()) << m.status().message();
  const std::vector<int32_t> ids = Prompt(30);
  testing::RunReference(dir / "model", ids, 0, dir.path(), "--incremental");
  const auto seq = ReadF32File(dir / "logits.f32");
  const auto par = FathomLogits(**m, ids, 0);
  const auto V = static_cast<size_t>((*m)->spec().vocab);
  ASSERT_EQ(par.size(), seq.size());
  const size_t exact = static_cast<size_t>((*m)->spec().prompt_iteration.passes) * V;
  const std::vector<float> par_head(par.begin(), par.begin() + static_cast<std::ptrdiff_t>(exact));
  const std::vector<float> seq_head(seq.begin(), seq.begin() + static_cast<std::ptrdiff_t>(exact));
  EXPECT_LE(RelativeError(par_head, seq_head), 1e-4);
  const std::vector<float> par_tail(par.begin() + static_cast<std::ptrdiff_t>(exact), par.end());
  const std::vector<float> seq_tail(seq.begin() + static_cast<std::ptrdiff_t>(exact), seq.end());
  std::printf("LCKV parallel vs token by token beyond %d passes: relative error %.3g\n",
              (*m)->spec().prompt_iteration.passes, RelativeError(par_tail, seq_tail));
}

TEST(LckvReference, Bf16WeightsWithin2e2) {
  TempDir dir;
  MakeLckv(dir / "model", {{"layer_types", "0_2_2_3"}}, DType::kBF16);
  auto m = Model::Load(dir / "model");
  ASSERT_TRUE(m.ok()) << m.status().message();
  const std::vector<int32_t> ids = Prompt(13);
  testing::RunReference(dir / "model", ids, 0, dir.path());
  EXPECT_LE(RelativeError(FathomLogits(**m, ids, 0), ReadF32File(dir / "logits.f32")), 2e-2);
}

}  // namespace
}  // namespace fathom
