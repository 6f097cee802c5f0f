// fathom eval (src/eval/perplexity.h) against the PyTorch reference's teacher-forced
// perplexity (tests/reference/reference.py --perplexity) on f32 checkpoints with the upstream
// tensor names (make_tiny.py): dense, Ouro at fixed depth 1..4 and under exit thresholds (each
// decode token at its own exit depth, under several KV layouts), Ouro at a budget, Huginn at
// fixed recurrence and under a latent-change threshold, LCKV. Per prediction the NLLs must
// agree and the depths be equal; the perplexity within 1e-4 relative. And the test can fail:
// a different policy or layout gives a perplexity that differs by far more than 1e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "eval/eval_input.h"
#include "eval/perplexity.h"
#include "model/test_util.h"
#include "tokenizer/byte_level.h"

namespace fathom {
namespace {

using testing::TempDir;

constexpr int64_t kContext = 16;  // 40 ids: windows of 16, 16, 8 -> 37 predictions

// The checkpoints (one per family, made on first use: ctest runs each test in a process of
// its own) and a fixed id sequence.
class EvalReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = new TempDir(); }
  static void TearDownTestSuite() {
    models_.clear();
    delete dir_;
    dir_ = nullptr;
  }

  static std::string ModelDir(const std::string& family) {
    const std::string dir = (*dir_) / family;
    if (!made_.count(family)) {
      testing::MakeUpstreamTinyModel(family, dir, DType::kF32, "--seed 3");
      made_.insert(family);
    }
    return dir;
  }
  static const Model& Get(const std::string& family) {
    auto& m = models_[family];
    if (!m) {
      auto loaded = Model::Load(ModelDir(family));
      EXPECT_TRUE(loaded.ok()) << loaded.status().message();
      m = std::move(loaded).value();
    }
    return *m;
  }

  static std::vector<int32_t> Ids(size_t n = 40) {
    std::mt19937 rng(7);
    std::vector<int32_t> ids(n);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 250);
    return ids;
  }

  struct Ref {
    std::vector<float> nll, depths;
    double perplexity = 0;
  };
  // reference.py --perplexity on the same ids; `args` e.g. "--loops 2 --exit-threshold 0.5".
  // The layout is always given: the reference's default is depth-indexed, fathom's (the
  // engine's) last-exited.
  static Ref Reference(const std::string& family, const std::vector<int32_t>& ids, const std::string& args,
                       const std::string& layout = "last-exited") {
    return ReferenceOf(ModelDir(family), ids, "--layout " + layout + " " + args);
  }
  // reference.py --perplexity on the checkpoint in model_dir.
  static Ref ReferenceOf(const std::string& model_dir, const std::vector<int32_t>& ids, const std::string& args) {
    TempDir out;
    testing::RunReference(model_dir, ids, 0, out.path(), "--perplexity --context " + std::to_string(kContext) + " " + args);
    Ref r;
    r.nll = testing::ReadF32File(out / "nll.f32");
    r.depths = testing::ReadF32File(out / "nll_depths.f32");
    std::ifstream f(out / "perplexity.json");
    r.perplexity = nlohmann::json::parse(f)["perplexity"].get<double>();
    return r;
  }

  static PerplexityResult Fathom(const std::string& family, const std::vector<int32_t>& ids, PerplexityOptions opt) {
    opt.kv_dtype = DType::kF32;
    opt.context = kContext;
    opt.keep_tokens = true;
    auto res = EvaluatePerplexity(Get(family), ids, opt);
    EXPECT_TRUE(res.ok()) << res.status().message();
    return res.ok() ? *res : PerplexityResult{};
  }

  // Same predictions, per-token NLL within 1e-4 (absolute, on NLLs of ~5 nats), the same
  // depth for every token (looped), perplexity within 1e-4 relative.
  static void ExpectMatch(const PerplexityResult& got, const Ref& ref, bool looped) {
    ASSERT_EQ(got.nll.size(), ref.nll.size());
    ASSERT_EQ(got.depths.size(), ref.depths.size());
    for (size_t i = 0; i < ref.nll.size(); ++i) {
      EXPECT_NEAR(got.nll[i], ref.nll[i], 1e-4) << "prediction " << i;
      if (looped) {
        EXPECT_EQ(got.depths[i], static_cast<int32_t>(ref.depths[i])) << "prediction " << i;
      }
    }
    EXPECT_LT(std::abs(got.perplexity / ref.perplexity - 1), 1e-4) << got.perplexity << " vs " << ref.perplexity;
  }

  static PerplexityOptions Threshold(double q, KvLayout layout = KvLayout::kLastExited) {
    PerplexityOptions o;
    o.exit.kind = ExitSpec::Kind::kThreshold;
    o.exit.threshold = q;
    o.layout = layout;
    return o;
  }

  static size_t DistinctDepths(const PerplexityResult& r) {
    size_t n = 0;
    for (int64_t c : r.depth_histogram) n += c > 0;
    return n;
  }

  static TempDir* dir_;
  static std::set<std::string> made_;
  static std::map<std::string, std::unique_ptr<Model>> models_;
};

TempDir* EvalReference::dir_ = nullptr;
std::set<std::string> EvalReference::made_;
std::map<std::string, std::unique_ptr<Model>> EvalReference::models_;

// An L2A gate checkpoint (docs/L2A_FORMAT.md, `mask` K/V, all three gates): every token,
// prompt and decode, at budget b through the KV cache, against reference.py --perplexity
// --budget b; the gates' counts show the budget moves compute.
TEST_F(EvalReference, L2aGatesMatchReferenceAtEachBudget) {
  TempDir dir;
  testing::MakeUpstreamTinyModel("llama", dir / "model", DType::kF32,
                                 "--seed 3 --l2a-gates attention,mlp,heads --l2a-kv mask");
  auto m = Model::Load(dir / "model");
  ASSERT_TRUE(m.ok()) << m.status().message();
  const auto ids = Ids();
  double low_fraction = 0;
  for (double b : {0.2, 1.0}) {
    SCOPED_TRACE("budget " + std::to_string(b));
    const Ref ref = ReferenceOf(dir / "model", ids, "--budget " + std::to_string(b));
    PerplexityOptions opt;
    opt.kv_dtype = DType::kF32;
    opt.context = kContext;
    opt.keep_tokens = true;
    opt.budget = b;
    auto got = EvaluatePerplexity(**m, ids, opt);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ExpectMatch(*got, ref, false);
    EXPECT_GT(got->matmul_fraction, 0.0);
    EXPECT_LT(got->matmul_fraction, 1.0);
    if (b == 0.2) low_fraction = got->matmul_fraction;
    if (b == 1.0) {
      EXPECT_NE(got->matmul_fraction, low_fraction);
    }
  }
}

TEST_F(EvalReference, DenseMatchesReference) {
  const auto ids = Ids();
  for (const char* family : {"llama", "qwen3"}) {
    SCOPED_TRACE(family);
    const PerplexityResult got = Fathom(family, ids, {});
    EXPECT_EQ(got.windows, 3);
    EXPECT_EQ(got.predictions, 37);
    EXPECT_EQ(got.loops, 0);
    EXPECT_EQ(got.mean_depth, 0);
    EXPECT_EQ(got.layers_per_token, 2);
    ExpectMatch(got, Reference(family, ids, ""), false);
  }
}

TEST_F(EvalReference, OuroFixedDepthMatchesReference) {
  const auto ids = Ids();
  std::vector<double> ppl;
  for (int32_t r = 1; r <= 4; ++r) {
    SCOPED_TRACE("loops " + std::to_string(r));
    PerplexityOptions o;
    o.loops = r;
    const PerplexityResult got = Fathom("ouro", ids, o);
    EXPECT_EQ(got.mean_depth, r);
    ExpectMatch(got, Reference("ouro", ids, "--loops " + std::to_string(r)), true);
    ppl.push_back(got.perplexity);
  }
  // Depth changes the model's predictions: the check is not blind to the loop count.
  for (int32_t r = 1; r < 4; ++r) EXPECT_GT(std::abs(ppl[r] / ppl[r - 1] - 1), 1e-3) << r;
}

TEST_F(EvalReference, OuroExitThresholdMatchesReferenceUnderEachLayout) {
  const auto ids = Ids();
  const double full = Fathom("ouro", ids, {}).perplexity;
  const std::pair<KvLayout, const char*> layouts[] = {{KvLayout::kLastExited, "last-exited"},
                                                      {KvLayout::kDepthIndexed, "depth-indexed"},
                                                      {KvLayout::kHybrid, "hybrid"},
                                                      {KvLayout::kShared, "shared"}};
  std::vector<double> ppl;
  for (const auto& [layout, name] : layouts) {
    SCOPED_TRACE(name);
    const PerplexityResult got = Fathom("ouro", ids, Threshold(0.5, layout));
    // The exits really vary: tokens at several depths, on average below full depth.
    EXPECT_GE(DistinctDepths(got), 2u);
    EXPECT_LT(got.mean_depth, 3.5);
    ExpectMatch(got, Reference("ouro", ids, "--exit-threshold 0.5", name), true);
    EXPECT_GT(std::abs(got.perplexity / full - 1), 1e-3) << "an exit policy that changes nothing";
    ppl.push_back(got.perplexity);
  }
  // The layouts differ once tokens exit early (last-exited vs depth-indexed vs shared).
  EXPECT_GT(std::abs(ppl[0] / ppl[1] - 1), 1e-4);
  EXPECT_GT(std::abs(ppl[0] / ppl[3] - 1), 1e-4);
}

TEST_F(EvalReference, OuroThresholdsAndBudgetMatchReference) {
  const auto ids = Ids();
  for (double q : {0.2, 0.8}) {
    SCOPED_TRACE("q " + std::to_string(q));
    ExpectMatch(Fathom("ouro", ids, Threshold(q)), Reference("ouro", ids, "--exit-threshold " + std::to_string(q)),
                true);
  }
  PerplexityOptions o = Threshold(0.8);
  o.budget = 0.5;  // q * b = 0.4
  const PerplexityResult got = Fathom("ouro", ids, o);
  ExpectMatch(got, Reference("ouro", ids, "--exit-threshold 0.8 --budget 0.5"), true);
  EXPECT_LT(got.mean_depth, Fathom("ouro", ids, Threshold(0.8)).mean_depth);
}

TEST_F(EvalReference, HuginnMatchesReference) {
  const auto ids = Ids();
  PerplexityOptions fixed;
  fixed.loops = 3;
  const PerplexityResult f = Fathom("huginn", ids, fixed);
  EXPECT_EQ(f.mean_depth, 3);
  EXPECT_EQ(f.layers_per_token, 2 + 2 + 3 * 3);  // prelude 2, coda 2, 3 steps of 3 core layers
  ExpectMatch(f, Reference("huginn", ids, "--loops 3"), true);
  // The random tiny Huginn's latent change stays near 1 (it never converges): 0.9 exits some.
  const PerplexityResult t = Fathom("huginn", ids, Threshold(0.9));
  EXPECT_GE(DistinctDepths(t), 2u);
  ExpectMatch(t, Reference("huginn", ids, "--exit-threshold 0.9"), true);
}

TEST_F(EvalReference, LckvMatchesReference) {
  const auto ids = Ids();
  const PerplexityResult got = Fathom("lckv", ids, {});
  ExpectMatch(got, Reference("lckv", ids, ""), false);
  // layer_types 0_2_2_3: layers 0, 2 and 3 produce KV (3 of 4), f32, 2 KV heads of 16.
  EXPECT_EQ(got.kv_bytes_per_decode_token, 3u * 2 * 32 * 4);
}

TEST_F(EvalReference, BatchedWindowsEqualWindowsAlone) {
  const auto ids = Ids(90);  // 6 windows
  PerplexityOptions one = Threshold(0.5);
  one.batch = 1;
  PerplexityOptions many = Threshold(0.5);
  many.batch = 4;  // a group of 4, then one of 2
  const PerplexityResult a = Fathom("ouro", ids, one), b = Fathom("ouro", ids, many);
  EXPECT_EQ(a.depths, b.depths);
  ASSERT_EQ(a.nll.size(), b.nll.size());
  for (size_t i = 0; i < a.nll.size(); ++i) EXPECT_NEAR(a.nll[i], b.nll[i], 1e-4) << i;
}

TEST_F(EvalReference, WindowsAreNonOverlappingAndALastSingleTokenIsDropped) {
  // 33 ids at context 16: windows [0, 16), [16, 32) and a last one of one token.
  const PerplexityResult r = Fathom("llama", Ids(33), {});
  EXPECT_EQ(r.windows, 2);
  EXPECT_EQ(r.predictions, 30);
  // Each window starts from an empty cache: its first prediction equals the same two ids
  // scored on their own.
  const auto ids = Ids(33);
  const PerplexityResult head = Fathom("llama", {ids[16], ids[17]}, {});
  EXPECT_NEAR(r.nll[15], head.nll[0], 1e-5);
}

TEST_F(EvalReference, OptionErrorsNameTheOption) {
  const Model& ouro = Get("ouro");
  const auto ids = Ids();
  auto expect_error = [&](const Model& m, std::vector<int32_t> v, PerplexityOptions o, const std::string& needle) {
    auto r = EvaluatePerplexity(m, v, o);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  expect_error(ouro, {5}, {}, "at least 2");
  expect_error(ouro, {5, 400}, {}, "outside the vocabulary");
  PerplexityOptions o;
  o.context = 1;
  expect_error(ouro, ids, o, "context");
  o = {};
  o.budget = 0.5;
  expect_error(ouro, ids, o, "budget");
  expect_error(Get("llama"), ids, Threshold(0.5), "not looped");
  o = {};
  o.loops = 9;
  expect_error(ouro, ids, o, "loops");
}

// ---- the CLI: inputs, output and errors ------------------------------------------------

// A byte-level tokenizer.json whose ids are the 256 bytes (the tiny models' vocabulary is 256).
void WriteByteTokenizer(const std::string& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  int id = 0;
  for (const std::string& c : byte_level::ByteToChars()) vocab[c] = id++;
  const nlohmann::json tok = {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  std::ofstream(dir + "/tokenizer.json") << tok.dump();
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

testing::CommandResult Eval(const std::string& args) {
  return testing::RunCommand(testing::FathomBinary() + " eval " + args);
}

TEST_F(EvalReference, CliTextFileEqualsItsBytesAsIds) {
  TempDir work;
  const std::string model = ModelDir("ouro");
  WriteByteTokenizer(model);
  const std::string text = "The quick brown fox jumps over the lazy dog.";
  WriteText(work / "text.txt", text);
  std::string ids;
  for (unsigned char c : text) ids += std::to_string(c) + " ";
  WriteText(work / "ids.txt", ids);
  const std::string common = " --model " + model + " --exit-threshold 0.5 --context 16 --kv-dtype f32 --json";
  const auto a = Eval("--text-file " + work / "text.txt" + common + " --nll-out " + work / "nll.f32");
  const auto b = Eval("--ids-file " + work / "ids.txt" + common);
  std::remove((model + "/tokenizer.json").c_str());
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const auto ja = nlohmann::json::parse(a.output), jb = nlohmann::json::parse(b.output);
  EXPECT_EQ(ja["perplexity"], jb["perplexity"]);
  EXPECT_EQ(ja["predictions"].get<int64_t>(), static_cast<int64_t>(text.size()) - 3);  // windows 16, 16, 12
  EXPECT_EQ(ja["layout"], "last-exited");
  EXPECT_EQ(testing::ReadF32File(work / "nll.f32").size(), text.size() - 3);
  // The CLI's number is the library's.
  std::vector<int32_t> v(text.begin(), text.end());
  EXPECT_DOUBLE_EQ(ja["perplexity"].get<double>(), Fathom("ouro", v, Threshold(0.5)).perplexity);
}

TEST_F(EvalReference, CliSweepWritesTablesAndPlot) {
  TempDir work;
  std::string ids;
  for (int32_t id : Ids()) ids += std::to_string(id) + ",";
  WriteText(work / "ids.txt", ids);
  const std::string input = " --model " + ModelDir("ouro") + " --ids-file " + work / "ids.txt" + " --context 16";
  const auto r = Eval("sweep" + input + " --loops 1,4 --exit-thresholds 0.5 --layouts last-exited,hybrid --out " +
                      work / "sweep");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(work / "sweep/sweep.json");
  const auto j = nlohmann::json::parse(f);
  ASSERT_EQ(j["rows"].size(), 6u);  // per layout: loops 1, loops 4, exit 0.5
  EXPECT_EQ(j["rows"][2]["policy"], "exit 0.5");
  EXPECT_EQ(j["rows"][5]["layout"], "hybrid");
  // A row is what `fathom eval` alone gives for that setting.
  const auto one = Eval(input + " --exit-threshold 0.5 --layout hybrid --json");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(j["rows"][5]["perplexity"], nlohmann::json::parse(one.output)["perplexity"]);
  std::ifstream csv(work / "sweep/sweep.csv");
  int lines = 0;
  for (std::string line; std::getline(csv, line);) ++lines;
  EXPECT_EQ(lines, 7);  // header + 6
  EXPECT_TRUE(std::ifstream(work / "sweep/sweep.md").good());
  EXPECT_TRUE(std::ifstream(work / "sweep/sweep.png").good()) << r.output;  // scripts/render-eval-sweep.py
  // A dense model takes no thresholds: the error names the setting.
  const auto dense = Eval("sweep --model " + ModelDir("llama") + " --ids-file " + work / "ids.txt" +
                          " --exit-thresholds 0.5 --no-plot --out " + work / "d");
  EXPECT_EQ(dense.exit_code, 1) << dense.output;
  EXPECT_NE(dense.output.find("exit 0.5"), std::string::npos) << dense.output;
}

TEST_F(EvalReference, CliErrorsNameTheFileOrFlag) {
  TempDir work;
  const std::string model = " --model " + ModelDir("ouro");
  WriteText(work / "empty.txt", "");
  WriteText(work / "one.txt", "7");
  WriteText(work / "bad.txt", "1 2 x3");
  WriteText(work / "text.txt", "some text");
  auto expect = [](const testing::CommandResult& r, int code, const std::vector<std::string>& needles) {
    EXPECT_EQ(r.exit_code, code) << r.output;
    for (const std::string& n : needles) EXPECT_NE(r.output.find(n), std::string::npos) << n << "\n" << r.output;
  };
  expect(Eval("--text-file " + work / "missing.txt" + model), 1, {"--text-file", "missing.txt"});
  expect(Eval("--text-file " + work / "empty.txt" + model), 1, {"--text-file", "empty.txt", "empty"});
  expect(Eval("--ids-file " + work / "empty.txt" + model), 1, {"--ids-file", "empty.txt", "empty"});
  expect(Eval("--ids-file " + work / "one.txt" + model), 1, {"--ids-file", "one.txt", "at least 2"});
  expect(Eval("--ids-file " + work / "bad.txt" + model), 1, {"--ids-file", "bad.txt", "'x3'"});
  expect(Eval("--text-file " + work / "text.txt" + model), 1, {"no tokenizer.json", "--ids-file"});
  expect(Eval(model), 2, {"--text-file", "--ids-file"});
  // --budget on a looped model scales an exit threshold; without one (and not an L2A gate
  // checkpoint, whose routers read b) it is an error.
  WriteText(work / "ids.txt", "1 2 3 4");
  expect(Eval("--ids-file " + work / "ids.txt" + model + " --budget 0.5"), 1, {"budget", "exit threshold", "L2A"});
  expect(Eval("--ids-file " + work / "bad.txt" + model + " --layout diagonal"), 2, {"--layout"});
  // One token of text: the tokenizer gives fewer than 2 ids.
  WriteByteTokenizer(ModelDir("ouro"));
  const auto one = Eval("--text-file " + work / "one.txt" + model);
  std::remove((ModelDir("ouro") + "/tokenizer.json").c_str());
  expect(one, 1, {"--text-file", "one.txt", "1 token(s)"});
}

}  // namespace
}  // namespace fathom
