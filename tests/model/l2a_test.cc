// L2A gate checkpoints (docs/L2A_FORMAT.md) on tiny random checkpoints written by
// tests/reference/make_tiny.py: format errors name the field or tensor; fathom's logits
// equal the PyTorch reference's (tests/reference/reference.py, the same hard decisions) within
// 1e-4 at several budgets, for the compute and mask K/V policies, MLP and linear routers,
// head gates and LoRA, with the prompt whole or in chunks; the gates ran exactly what the
// reference decided; routers forced on give the plain model's full compute, forced off the
// minimal path; generation (the decode path) follows the reference's argmax.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "exec/generate.h"
#include "exec/prompt.h"
#include "model/test_util.h"

namespace fathom {
namespace {

using testing::ReadF32File;
using testing::RelativeError;
using testing::TempDir;

const std::vector<int32_t> kPrompt = {1, 17, 42, 200, 3, 99, 7, 150, 64, 5, 255, 0, 31, 77, 12, 9};

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}
void WriteJson(const std::string& path, const nlohmann::json& j) { std::ofstream(path) << j.dump(2); }

std::unique_ptr<Model> Load(const std::string& dir, bool batch_invariant = false) {
  LoadOptions opt;
  opt.batch_invariant = batch_invariant;
  auto m = Model::Load(dir, opt);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::string LoadError(const std::string& dir) {
  auto m = Model::Load(dir);
  return m.ok() ? std::string("(loaded)") : m.status().message();
}

// ---- format ---------------------------------------------------------------------------

class L2aFormatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::MakeUpstreamTinyModel("llama", dir_ / "model", DType::kF32,
                                   "--l2a-gates attention,mlp,heads --l2a-router-hidden 16 --l2a-budget-features 2");
    config_ = ReadJson(dir_ / "model/config.json");
  }
  // Loads with config["l2a"] changed by `edit`; returns the error.
  template <typename F>
  std::string ErrorWith(F edit) {
    nlohmann::json c = config_;
    edit(c["l2a"]);
    WriteJson(dir_ / "model/config.json", c);
    return LoadError(dir_ / "model");
  }
  TempDir dir_;
  nlohmann::json config_;
};

TEST_F(L2aFormatTest, TheUneditedCheckpointLoads) {
  auto m = Load(dir_ / "model");
  ASSERT_TRUE(m);
  const L2aSpec& l = m->spec().l2a;
  EXPECT_TRUE(l.enabled && l.gate_attention && l.gate_mlp && l.gate_heads);
  EXPECT_EQ(l.router_hidden, 16);
  EXPECT_EQ(l.features(), 5);
}

TEST_F(L2aFormatTest, ConfigErrorsNameTheField) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](nlohmann::json& l) { l["version"] = 2; }, "field 'version'"},
      {[](nlohmann::json& l) { l["gates"] = nlohmann::json::array(); }, "'gates'"},
      {[](nlohmann::json& l) { l["gates"] = {"attention", "bogus"}; }, "'gates[1]': unknown value 'bogus'"},
      {[](nlohmann::json& l) { l["gates"] = {"mlp", "mlp"}; }, "listed twice"},
      {[](nlohmann::json& l) { l["gates"] = {"mlp", 3}; }, "'gates[1]': expected a string"},
      {[](nlohmann::json& l) { l["router_hidden"] = -1; }, "field 'router_hidden'"},
      {[](nlohmann::json& l) { l["router_hidden"] = "16"; }, "router_hidden"},
      {[](nlohmann::json& l) { l["budget_features"] = 65; }, "field 'budget_features'"},
      {[](nlohmann::json& l) { l["skipped_attention_kv"] = "drop"; }, "'skipped_attention_kv': unknown value 'drop'"},
      {[](nlohmann::json& l) { l.erase("skipped_attention_kv"); }, "skipped_attention_kv"},
      {[](nlohmann::json& l) { l["lora"] = {{"rank", 4}, {"alpha", 8}, {"targets", {"w_proj"}}}; },
       "'targets[0]': unknown value 'w_proj'"},
      {[](nlohmann::json& l) { l["lora"] = {{"rank", 0}, {"alpha", 8}, {"targets", {"q_proj"}}}; }, "field 'rank'"},
      {[](nlohmann::json& l) { l["lora"] = {{"rank", 4}, {"alpha", -1}, {"targets", {"q_proj"}}}; }, "field 'alpha'"},
      {[](nlohmann::json& l) {
         l["lora"] = {{"rank", 4}, {"alpha", 8}, {"targets", {"q_proj"}}, {"budget_ramp", {0.9, 0.5}}};
       },
       "field 'budget_ramp': expected 0 <= b_full < b_off <= 1, found [0.9, 0.5]"},
      {[](nlohmann::json& l) {
         l["lora"] = {{"rank", 4}, {"alpha", 8}, {"targets", {"q_proj"}}, {"budget_ramp", {0.5, 1.5}}};
       },
       "field 'budget_ramp'"},
      {[](nlohmann::json& l) {
         l["lora"] = {{"rank", 4}, {"alpha", 8}, {"targets", {"q_proj"}}, {"budget_ramp", {0.5}}};
       },
       "field 'budget_ramp': expected [b_full, b_off], two numbers"},
      {[](nlohmann::json& l) {
         l["lora"] = {{"rank", 4}, {"alpha", 8}, {"targets", {"q_proj"}}, {"budget_ramp", "0.5,1"}};
       },
       "field 'budget_ramp'"},
      {[](nlohmann::json& l) { l = 5; }, "l2a"},
  };
  for (const Case& c : cases) {
    const std::string err = ErrorWith(c.edit);
    EXPECT_NE(err.find(c.want), std::string::npos) << "want '" << c.want << "' in: " << err;
    EXPECT_NE(err.find("config.json"), std::string::npos) << err;
  }
}

TEST_F(L2aFormatTest, TensorErrorsNameTheTensor) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      // fc1 is [16, E + 5] in the file
      {[](nlohmann::json& l) { l["router_hidden"] = 8; }, {"model.layers.0.l2a_router.fc1.weight", "expected shape [8, "}},
      {[](nlohmann::json& l) { l["router_hidden"] = 0; }, {"missing tensor 'model.layers.0.l2a_router.fc.weight'"}},
      {[](nlohmann::json& l) { l["budget_features"] = 3; }, {"l2a_router.fc1.weight", "expected shape"}},
      {[](nlohmann::json& l) { l["gates"] = {"attention", "mlp"}; }, {"l2a_router.fc2.weight", "expected shape [2, 16]"}},
      {[](nlohmann::json& l) { l["lora"] = {{"rank", 4}, {"alpha", 8}, {"targets", {"v_proj"}}}; },
       {"missing tensor 'model.layers.0.self_attn.v_proj.lora_A.weight'"}},
  };
  for (const Case& c : cases) {
    const std::string err = ErrorWith(c.edit);
    for (const std::string& w : c.want) EXPECT_NE(err.find(w), std::string::npos) << "want '" << w << "' in: " << err;
  }
  // Without the block the router tensors are unexpected.
  nlohmann::json c = config_;
  c.erase("l2a");
  WriteJson(dir_ / "model/config.json", c);
  const std::string err = LoadError(dir_ / "model");
  EXPECT_NE(err.find("unexpected tensor 'model.layers."), std::string::npos) << err;
  EXPECT_NE(err.find("l2a_router"), std::string::npos) << err;
}

TEST(L2aFormat, OnlyDenseFamiliesTakeGates) {
  TempDir dir;
  testing::MakeTinyModel("ouro", dir / "model", DType::kF32);
  nlohmann::json c = ReadJson(dir / "model/config.json");
  c["l2a"] = {{"version", 1}, {"gates", {"mlp"}}, {"router_hidden", 0}, {"budget_features", 0}};
  WriteJson(dir / "model/config.json", c);
  const std::string err = LoadError(dir / "model");
  EXPECT_NE(err.find("field 'l2a': L2A gates are defined for the dense model types"), std::string::npos) << err;
  EXPECT_NE(err.find("'ouro'"), std::string::npos) << err;
}

// ---- against the reference ------------------------------------------------------------

struct Variant {
  std::string name, family, args;
};

std::string PrintVariant(const ::testing::TestParamInfo<Variant>& info) { return info.param.name; }

const std::vector<Variant>& Variants() {
  static const std::vector<Variant> v = {
      {"llama_all_gates_compute", "llama", "--l2a-gates attention,mlp,heads --l2a-kv compute"},
      {"llama_all_gates_mask", "llama", "--l2a-gates attention,mlp,heads --l2a-kv mask"},
      {"qwen3_heads_mlp_linear_router", "qwen3", "--l2a-gates mlp,heads --l2a-router-hidden 0 --l2a-budget-features 3"},
      {"qwen2_attention_mask_lora", "qwen2",
       "--l2a-gates attention --l2a-kv mask --l2a-lora-rank 4 --l2a-lora-alpha 8 "
       "--l2a-lora-targets q_proj,v_proj,o_proj,down_proj"},
      {"llama_mlp_lora_all_targets", "llama",
       "--l2a-gates mlp,attention --l2a-kv compute --l2a-lora-rank 2 --l2a-lora-alpha 4 "
       "--l2a-lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"},
      // The LoRA's share follows b: whole at 0.2, 0.6 of it at 0.5, none at 1 (and in
      // generation at 0.3 and 0.9); o_proj's adapter reads the head-pruned attention output.
      {"llama_lora_budget_ramp", "llama",
       "--l2a-gates attention,mlp,heads --l2a-kv compute --l2a-lora-rank 3 --l2a-lora-alpha 6 "
       "--l2a-lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj --l2a-lora-budget-ramp 0.3,0.8"},
  };
  return v;
}

class L2aReferenceTest : public ::testing::TestWithParam<Variant> {
 protected:
  static void SetUpTestSuite() { omp_set_num_threads(1); }
  void SetUp() override {
    testing::MakeUpstreamTinyModel(GetParam().family, dir_ / "model", DType::kF32, GetParam().args);
    model_ = Load(dir_ / "model");
  }
  struct Ref {
    std::vector<float> logits, decisions, router_logits;
  };
  Ref Reference(const std::vector<int32_t>& ids, double b, const std::string& tag) {
    const std::string out = dir_ / ("ref_" + tag);
    testing::RunReference(dir_ / "model", ids, 0, out, "--budget " + std::to_string(b));
    return {ReadF32File(out + "/logits.f32"), ReadF32File(out + "/l2a_decisions.f32"),
            ReadF32File(out + "/l2a_router_logits.f32")};
  }
  // Totals of the reference's decisions, as StageRunner::GateCounts counts them (a head
  // counts only where the attention runs).
  StageRunner::GateCounts Totals(const Ref& r, int64_t n) const {
    const ModelSpec& s = model_->spec();
    const int64_t G = s.l2a.outputs(s.n_heads), L = static_cast<int64_t>(s.layers.size());
    StageRunner::GateCounts c;
    for (int64_t l = 0; l < L; ++l)
      for (int64_t t = 0; t < n; ++t) {
        const float* d = r.decisions.data() + (l * n + t) * G;
        int64_t g = 0;
        const bool attn = s.l2a.gate_attention ? d[g++] > 0.5f : true;
        const bool mlp = s.l2a.gate_mlp ? d[g++] > 0.5f : true;
        ++c.token_layers;
        c.attention += attn;
        c.mlp += mlp;
        if (attn)
          for (int64_t h = 0; h < s.n_heads; ++h) c.heads += s.l2a.gate_heads ? d[g + h] > 0.5f : 1;
      }
    return c;
  }
  // The smallest |z| of the reference's router logits: decisions closer than this to the
  // threshold may differ in the last bits between two correct implementations.
  static double Margin(const Ref& r) {
    double m = INFINITY;
    for (float z : r.router_logits) m = std::min(m, std::abs(static_cast<double>(z)));
    return m;
  }
  TempDir dir_;
  std::unique_ptr<Model> model_;
};

TEST_P(L2aReferenceTest, LogitsAndDecisionsMatchAtSeveralBudgets) {
  ASSERT_TRUE(model_);
  const int64_t n = static_cast<int64_t>(kPrompt.size());
  std::vector<float> low_decisions;
  for (double b : {0.2, 0.5, 1.0}) {
    SCOPED_TRACE("budget " + std::to_string(b));
    const Ref ref = Reference(kPrompt, b, std::to_string(b));
    ASSERT_EQ(ref.logits.size(), static_cast<size_t>(n * model_->spec().vocab));
    for (int64_t chunk : {int64_t{0}, int64_t{5}}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk));
      PromptOptions opt;
      opt.kv_dtype = DType::kF32;
      opt.budget = static_cast<float>(b);
      opt.chunk = chunk;
      StageRunner::GateCounts counts;
      opt.gate_counts = &counts;
      auto r = RunPrompt(*model_, kPrompt, opt);
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_LE(RelativeError(r->logits, ref.logits), 1e-4);
      ASSERT_GT(Margin(ref), 1e-5) << "a router logit within 1e-5 of the threshold: pick another seed";
      const StageRunner::GateCounts want = Totals(ref, n);
      EXPECT_EQ(counts.token_layers, want.token_layers);
      EXPECT_EQ(counts.attention, want.attention);
      EXPECT_EQ(counts.mlp, want.mlp);
      EXPECT_EQ(counts.heads, want.heads);
      EXPECT_LT(counts.matmul_flops, counts.dense_matmul_flops);  // the random routers skip something
    }
    if (b == 0.2) low_decisions = ref.decisions;
    if (b == 1.0) {
      EXPECT_NE(ref.decisions, low_decisions) << "the budget changes no decision: the test checks nothing of b";
    }
  }
}

TEST_P(L2aReferenceTest, GenerationFollowsTheReferenceArgmax) {
  ASSERT_TRUE(model_);
  for (double b : {0.3, 0.9}) {
    GenerateOptions g;
    g.prompt = {kPrompt.begin(), kPrompt.begin() + 6};
    g.max_tokens = 10;
    g.stop_at_eos = false;
    g.kv_dtype = DType::kF32;
    g.budget = b;
    auto r = Generate(*model_, g);
    ASSERT_TRUE(r.ok()) << r.status().message();
    std::vector<int32_t> all = g.prompt;
    all.insert(all.end(), r->ids.begin(), r->ids.end() - 1);
    const Ref ref = Reference(all, b, "gen" + std::to_string(b));
    const int64_t V = model_->spec().vocab;
    for (size_t i = 0; i < r->ids.size(); ++i) {
      const float* row = ref.logits.data() + (g.prompt.size() - 1 + i) * static_cast<size_t>(V);
      const int32_t want = static_cast<int32_t>(std::max_element(row, row + V) - row);
      EXPECT_EQ(r->ids[i], want) << "token " << i << " at budget " << b;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(L2a, L2aReferenceTest, ::testing::ValuesIn(Variants()), PrintVariant);

// Routers forced on run the whole model; forced off, the minimal path (embedding, final
// norm, head; under `compute` the K/V projections still run).
TEST(L2aForced, OnIsTheFullModelAndOffTheMinimalPath) {
  omp_set_num_threads(1);
  for (const std::string kv : {"compute", "mask"})
    for (const std::string force : {"on", "off"}) {
      SCOPED_TRACE(kv + " " + force);
      TempDir dir;
      testing::MakeUpstreamTinyModel("llama", dir / "model", DType::kF32,
                                     "--l2a-gates attention,mlp,heads --l2a-kv " + kv + " --l2a-force " + force);
      auto m = Load(dir / "model");
      ASSERT_TRUE(m);
      PromptOptions opt;
      opt.kv_dtype = DType::kF32;
      opt.budget = 0.5f;
      StageRunner::GateCounts counts;
      opt.gate_counts = &counts;
      auto r = RunPrompt(*m, kPrompt, opt);
      ASSERT_TRUE(r.ok()) << r.status().message();
      testing::RunReference(dir / "model", kPrompt, 0, dir.path(), "--budget 0.5");
      EXPECT_LE(RelativeError(r->logits, ReadF32File(dir / "logits.f32")), 1e-4);
      const ModelSpec& s = m->spec();
      const int64_t tl = static_cast<int64_t>(kPrompt.size() * s.layers.size());
      EXPECT_EQ(counts.token_layers, tl);
      if (force == "on") {
        EXPECT_EQ(counts.attention, tl);
        EXPECT_EQ(counts.mlp, tl);
        EXPECT_EQ(counts.heads, tl * s.n_heads);
        EXPECT_DOUBLE_EQ(counts.matmul_flops, counts.dense_matmul_flops);
      } else {
        EXPECT_EQ(counts.attention + counts.mlp + counts.heads, 0);
        const double qkv_share = static_cast<double>(s.q_dim() + 2 * s.kv_dim()) /
                                 static_cast<double>(s.q_dim() + 2 * s.kv_dim() + s.q_dim() + 3 * s.intermediate);
        EXPECT_NEAR(counts.matmul_flops / counts.dense_matmul_flops, kv == "compute" ? qkv_share : 0.0, 1e-12);
      }
    }
}

}  // namespace
}  // namespace fathom
