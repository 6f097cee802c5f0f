// Each KV layout against the PyTorch reference extended with that layout's rule: a prompt
// prefilled in one chunk, then teacher-forced decode tokens that exit at scripted depths.
// With no exits, depth-indexed (and hybrid, for its first decode token) equal the plain
// model; with exits, every layout equals its rule.
#include <gtest/gtest.h>

#include "exec/kv_setup.h"
#include "exec/stage_runner.h"
#include "model/test_util.h"

namespace fathom {
namespace {

using testing::ReadF32File;
using testing::RelativeError;
using testing::TempDir;

const std::vector<int32_t> kPrompt = {3, 141, 59, 26, 53, 58, 97};
const std::vector<int32_t> kDecode = {93, 23, 84, 62, 64, 33};

struct FathomDecode {
  std::vector<float> logits;   // [n_decode, V]
  std::vector<float> signals;  // [n_decode, R]
};

FathomDecode RunFathom(const Model& m, KvLayout layout, int32_t shared_after, int32_t R,
                       const std::vector<int32_t>& depths, int32_t prompt_depth) {
  FathomDecode res;
  auto kv = MakeKvManager(m.spec(), R, layout, shared_after, 1024, 4, DType::kF32);
  EXPECT_TRUE(kv.ok()) << kv.status().message();
  if (!kv.ok()) return res;
  StageRunner runner(m, **kv, 1);
  const auto n_prompt = static_cast<int64_t>(kPrompt.size());
  const auto seq = (*kv)->AddSequence(n_prompt);
  EXPECT_TRUE((*kv)->Grow(seq, n_prompt + static_cast<int64_t>(kDecode.size())));
  runner.AddSequence(seq, R);
  PrefillChunk c;
  c.seq = seq;
  c.ids = kPrompt.data();
  c.n = n_prompt;
  c.loops = prompt_depth;
  PrefillResult pre;
  EXPECT_TRUE(runner.Prefill({c}, false, &pre).ok());
  const bool ouro = m.spec().loop.exit_signal == ExitSignal::kGateHazard;
  for (size_t i = 0; i < kDecode.size(); ++i) {
    DecodeItem it;
    it.slot = 0;
    it.seq = seq;
    it.pos = n_prompt + static_cast<int64_t>(i);
    it.token = kDecode[i];
    EXPECT_TRUE(runner.Prelude({it}).ok());
    for (int32_t r = 0; r < R; ++r) {
      CoreStepResult step;
      if (r < depths[i]) {
        it.step = r;
        EXPECT_TRUE(runner.CoreStep({it}, &step).ok());
        res.signals.push_back(ouro ? step.signals[0].gate_lambda : step.signals[0].latent_diff);
      } else {
        res.signals.push_back(0.f);
      }
    }
    it.step = depths[i];
    CodaResult coda;
    EXPECT_TRUE(runner.Coda({it}, &coda).ok());
    res.logits.insert(res.logits.end(), coda.logits.begin(), coda.logits.end());
  }
  return res;
}

struct LayoutCase {
  const char* family;
  int32_t loops;
  KvLayout layout;
  int32_t shared_after;
  std::vector<int32_t> depths;
  int32_t prompt_depth = 0;  // loop steps of the prompt's tokens (0: loops)
};

std::string Join(const std::vector<int32_t>& v) { return testing::JoinIds(v); }

void CheckAgainstReference(const LayoutCase& c) {
  TempDir dir;
  testing::MakeTinyModel(c.family, dir / "model", DType::kF32);
  auto m = Model::Load(dir / "model");
  ASSERT_TRUE(m.ok()) << m.status().message();
  const int32_t prompt_depth = c.prompt_depth > 0 ? c.prompt_depth : c.loops;
  const FathomDecode f = RunFathom(**m, c.layout, c.shared_after, c.loops, c.depths, prompt_depth);
  std::string extra = "--decode-ids " + Join(kDecode) + " --exit-depths " + Join(c.depths) +
                      " --layout " + std::string(KvLayoutName(c.layout)) +
                      " --prompt-depth " + std::to_string(prompt_depth);
  if (c.layout == KvLayout::kFirstThenShared) extra += " --shared-after " + std::to_string(c.shared_after);
  testing::RunReference(dir / "model", kPrompt, c.loops, dir.path(), extra);
  EXPECT_LE(RelativeError(f.logits, ReadF32File(dir / "decode_logits.f32")), 1e-4)
      << c.family << " " << KvLayoutName(c.layout) << " depths " << Join(c.depths) << " prompt depth "
      << prompt_depth;
  EXPECT_LE(RelativeError(f.signals, ReadF32File(dir / "decode_signals.f32")), 1e-4);
}

TEST(LayoutReferenceTest, EveryLayoutMatchesItsRuleWithScriptedExits) {
  const std::vector<int32_t> ouro_exits = {4, 1, 3, 2, 1, 4}, huginn_exits = {5, 2, 1, 4, 3, 5};
  for (KvLayout layout : {KvLayout::kDepthIndexed, KvLayout::kLastExited, KvLayout::kShared,
                          KvLayout::kFirstThenShared, KvLayout::kHybrid}) {
    CheckAgainstReference({"ouro", 4, layout, 2, ouro_exits});
    CheckAgainstReference({"huginn", 5, layout, 3, huginn_exits});
  }
}

// Prompts prefilled at fewer loop steps than decode tokens run (EngineOptions::
// budget_prompts): the deeper decode tokens read the prompt's skipped steps by each
// layout's rule (last-exited and hybrid copy the prompt's last step into them; depth-indexed
// and first-then-shared mask them; shared keeps the last step written).
TEST(LayoutReferenceTest, ShallowPromptsMatchTheRuleUnderEveryLayout) {
  const std::vector<int32_t> ouro_exits = {4, 1, 3, 2, 4, 4}, huginn_exits = {5, 2, 1, 4, 5, 3};
  for (KvLayout layout : {KvLayout::kDepthIndexed, KvLayout::kLastExited, KvLayout::kShared,
                          KvLayout::kFirstThenShared, KvLayout::kHybrid}) {
    CheckAgainstReference({"ouro", 4, layout, 3, ouro_exits, 1});
    CheckAgainstReference({"ouro", 4, layout, 2, ouro_exits, 2});
    CheckAgainstReference({"huginn", 5, layout, 3, huginn_exits, 2});
  }
}

TEST(LayoutReferenceTest, NoExitsDepthIndexedAndHybridFirstTokenEqualThePlainModel) {
  for (const char* family : {"ouro", "huginn"}) {
    TempDir dir;
    testing::MakeTinyModel(family, dir / "model", DType::kF32);
    auto m = Model::Load(dir / "model");
    ASSERT_TRUE(m.ok());
    const int32_t R = 4;
    const std::vector<int32_t> full(kDecode.size(), R);
    // The plain model: one causal forward over prompt + decode ids.
    std::vector<int32_t> seq = kPrompt;
    seq.insert(seq.end(), kDecode.begin(), kDecode.end());
    testing::RunReference(dir / "model", seq, R, dir.path());
    const auto plain = ReadF32File(dir / "logits.f32");
    const int64_t V = (*m)->spec().vocab;
    // Decode token i's logits are the plain model's row at position n_prompt + i.
    const std::vector<float> plain_decode(plain.begin() + static_cast<int64_t>(kPrompt.size()) * V, plain.end());
    EXPECT_LE(RelativeError(RunFathom(**m, KvLayout::kDepthIndexed, 1, R, full, R).logits, plain_decode), 1e-4) << family;
    EXPECT_LE(RelativeError(RunFathom(**m, KvLayout::kLastExited, 1, R, full, R).logits, plain_decode), 1e-4) << family;
    // Hybrid: later decode tokens read earlier decode tokens' last state, so only the first
    // decode token equals the plain model.
    const auto hybrid = RunFathom(**m, KvLayout::kHybrid, 1, R, full, R).logits;
    EXPECT_LE(RelativeError(std::vector<float>(hybrid.begin(), hybrid.begin() + V),
                            std::vector<float>(plain_decode.begin(), plain_decode.begin() + V)), 1e-4);
  }
}

}  // namespace
}  // namespace fathom
