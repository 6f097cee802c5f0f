// Heap allocations in the steady decode loop (issue 12): none by fathom's code in the
// runner's decode stages (Prelude, CoreStep with mixed depths and the KL signal, Coda),
// counted with the replaced allocation functions of alloc_counter.h.
//
// What "steady" means here. A fresh StageRunner (its RunState allocated at construction)
// runs decode steps over sequences whose KV was grown to its final length before the
// window (growth is the KvManager's, planned by the engine; not the runner's). Before it,
// another runner ran the same batch shapes at longer contexts on the same model, because
// state that outlives a runner is sized by use: oneDNN's primitive for each row count
// (Linear's cache, built on first use of an M) and the kernels' thread-local scratch
// (paged attention's per-key arrays, grown to the most keys a thread has seen; the bf16
// matmul's rounding buffer). A runner that grew its own buffers on demand would still be
// caught: the counted runner is new.
//
// What is and is not counted: operator new in every form and, outside ASan builds, the
// malloc family, from every thread, attributed to the object that asked (libstdc++ and
// libc acting for a caller are looked through). oneDNN 2.6 (Debian's libdnnl2) allocates
// inside each matmul call (operator new and malloc / posix_memalign inside libdnnl), and
// libgomp mallocs a team for parallel regions; both are counted and reported under their
// library, not asserted. The engine's whole step (scheduler plan, events, per-request
// bookkeeping) is measured and reported by the last test, not asserted to be zero: the
// scheduler's per-request token and depth lists still grow as tokens are emitted.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "alloc/alloc_counter.h"
#include "engine/engine.h"
#include "exec/kv_setup.h"
#include "exec/stage_runner.h"
#include "model/test_util.h"

namespace fathom {
namespace {

using testing::AllocCounts;
using testing::AllocSource;

struct Loaded {
  testing::TempDir dir;
  std::unique_ptr<Model> model;
};

const Model& TinyModel(const std::string& family) {
  static std::map<std::string, std::unique_ptr<Loaded>> cache;
  auto& slot = cache[family];
  if (!slot) {
    slot = std::make_unique<Loaded>();
    testing::MakeTinyModel(family, slot->dir / "model", DType::kBF16);
    auto m = Model::Load(slot->dir / "model");
    EXPECT_TRUE(m.ok()) << m.status().message();
    slot->model = std::move(m).value();
  }
  return *slot->model;
}

void Report(const char* what, const AllocCounts& c) {
  std::printf("[alloc] %s:\n%s", what, c.Describe().c_str());
  ::testing::Test::RecordProperty(std::string(what) + "_fathom", std::to_string(c.total_from(AllocSource::kFathom)));
  ::testing::Test::RecordProperty(std::string(what) + "_onednn", std::to_string(c.total_from(AllocSource::kOneDnn)));
}

TEST(AllocCounter, SeesADeliberateAllocation) {
  testing::StartCounting();
  auto* v = new std::vector<int>(100);           // operator new from this executable
  std::string s(200, 'x');                       // through libstdc++, for this executable
  void* p = testing::CountsMalloc() ? std::malloc(64) : nullptr;
  asm volatile("" : : "r"(v), "r"(s.data()), "r"(p) : "memory");  // keep them
  const AllocCounts c = testing::StopCounting();
  delete v;
  std::free(p);
  EXPECT_GE(c.new_from(AllocSource::kFathom), 2) << c.Describe();
  if (testing::CountsMalloc()) {
    EXPECT_GE(c.malloc_from(AllocSource::kFathom), 1) << c.Describe();
  }
  EXPECT_EQ(c.total_from(AllocSource::kStdCpp), 0) << "a libstdc++ call not traced to its caller\n" << c.Describe();
  testing::StartCounting();
  const AllocCounts none = testing::StopCounting();
  EXPECT_EQ(none.total_from(AllocSource::kFathom), 0) << none.Describe();
}

// A batch of decode sequences on one runner: prompts of prompt_len + b tokens, KV for
// prompt + steps positions, prefilled in one call.
struct DecodeBatch {
  std::unique_ptr<KvManager> kv;
  std::unique_ptr<StageRunner> runner;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<DecodeItem> items;
  int32_t loops = 0;
  // The caller's result storage, reserved once as the engine's is: it is not the runner's.
  std::vector<DecodeItem> looping;
  CoreStepResult core;
  CodaResult coda;

  DecodeBatch(const Model& m, KvLayout layout, int32_t batch, int64_t prompt_len, int32_t steps) {
    const ModelSpec& spec = m.spec();
    loops = spec.loop.looped ? 4 : 0;
    auto k = MakeKvManager(spec, std::max(loops, 1), layout, 2, 2048, 16, DType::kBF16);
    EXPECT_TRUE(k.ok()) << k.status().message();
    kv = std::move(k).value();
    RunLimits limits;
    limits.max_rows = batch * (prompt_len + batch);
    limits.max_context = prompt_len + batch + steps + 1;
    runner = std::make_unique<StageRunner>(m, *kv, batch, limits);
    std::vector<PrefillChunk> chunks;
    for (int32_t b = 0; b < batch; ++b) {
      const int64_t n = prompt_len + b;
      std::vector<int32_t>& p = prompts.emplace_back();
      for (int64_t i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((b * 31 + i * 7 + 3) % spec.vocab));
      const KvManager::SeqId seq = kv->AddSequence(n);
      EXPECT_TRUE(kv->Grow(seq, n + steps));
      runner->AddSequence(seq, loops);
      PrefillChunk c;
      c.seq = seq;
      c.ids = p.data();
      c.n = n;
      c.loops = loops;
      c.logits = PrefillChunk::Logits::kLast;
      chunks.push_back(c);
      DecodeItem it;
      it.slot = b;
      it.seq = seq;
      it.pos = n;
      it.token = static_cast<int32_t>((b * 13 + 5) % spec.vocab);
      items.push_back(it);
    }
    PrefillResult pre;
    const Status s = runner->Prefill(chunks, false, &pre);
    EXPECT_TRUE(s.ok()) << s.message();
    looping.reserve(items.size());
    core.signals.reserve(items.size());
    coda.logits.reserve(items.size() * static_cast<size_t>(spec.vocab));
    coda.tokens.reserve(items.size());
  }

  // `steps` decode tokens for every item: prelude, core steps to a depth that varies by item
  // and token (so core batches shrink as items exit; the KL signal for every other item on
  // models whose exit signal is the latent change, i.e. Huginn), coda with greedy sampling.
  void Decode(int32_t steps, bool kl) {
    for (int32_t t = 0; t < steps; ++t) {
      ASSERT_TRUE(runner->Prelude(items).ok());
      for (int32_t r = 0; r < loops; ++r) {
        looping.clear();
        for (size_t b = 0; b < items.size(); ++b) {
          const int32_t depth = 1 + static_cast<int32_t>((b + static_cast<size_t>(t)) % static_cast<size_t>(loops));
          if (r >= depth) continue;
          DecodeItem it = items[b];
          it.step = r;
          it.kl = kl && b % 2 == 0;
          looping.push_back(it);
        }
        ASSERT_TRUE(runner->CoreStep(looping, &core).ok());
      }
      for (size_t b = 0; b < items.size(); ++b)
        items[b].step = loops ? 1 + static_cast<int32_t>((b + static_cast<size_t>(t)) % static_cast<size_t>(loops)) : 0;
      ASSERT_TRUE(runner->Coda(items, &coda).ok());
      for (size_t b = 0; b < items.size(); ++b) {
        items[b].token = coda.tokens[b];
        ++items[b].pos;
      }
    }
  }
};

struct Case {
  const char* family;
  KvLayout layout;
  bool kl;
};

class RunnerDecode : public ::testing::TestWithParam<Case> {};

TEST_P(RunnerDecode, AllocatesNothingInFathom) {
  const Case& c = GetParam();
  omp_set_num_threads(2);  // the worker threads' allocations count too
  const Model& m = TinyModel(c.family);
  constexpr int32_t kBatch = 4, kSteps = 12;
  {  // warm-up: the same batch shapes at longer contexts, on a runner thrown away
    DecodeBatch warm(m, c.layout, kBatch, 40, kSteps);
    warm.Decode(kSteps, c.kl);
  }
  DecodeBatch run(m, c.layout, kBatch, 9, kSteps);
  std::vector<DecodeItem> before = run.items;
  testing::StartCounting();
  run.Decode(kSteps, c.kl);
  const AllocCounts counts = testing::StopCounting();
  Report("runner_decode", counts);
  EXPECT_EQ(counts.total_from(AllocSource::kFathom), 0) << counts.Describe();
  EXPECT_EQ(counts.total_from(AllocSource::kStdCpp) + counts.total_from(AllocSource::kLibc), 0)
      << "calls not traced to a caller\n" << counts.Describe();
  EXPECT_EQ(run.items[0].pos, before[0].pos + kSteps);  // the loop ran
}

INSTANTIATE_TEST_SUITE_P(Families, RunnerDecode,
                         ::testing::Values(Case{"llama", KvLayout::kLastExited, false},
                                           Case{"ouro", KvLayout::kLastExited, false},
                                           Case{"ouro", KvLayout::kDepthIndexed, false},
                                           Case{"huginn", KvLayout::kHybrid, true}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.family) + "_" + std::to_string(i.index);
                         });

// The counter sees an allocation made inside a runner call: a Prefill into a fresh result
// (whose logits vector, the caller's, grows once). So a runner that allocated would fail.
TEST(RunnerDecode, CountsARunnerSideAllocation) {
  omp_set_num_threads(2);
  const Model& m = TinyModel("ouro");
  DecodeBatch run(m, KvLayout::kLastExited, 2, 9, 2);
  PrefillChunk c;
  c.seq = run.items[0].seq;
  c.ids = run.prompts[0].data();
  c.n = 1;
  c.loops = run.loops;
  c.logits = PrefillChunk::Logits::kLast;
  PrefillResult fresh;
  testing::StartCounting();
  const Status s = run.runner->Prefill({c}, false, &fresh);
  const AllocCounts counts = testing::StopCounting();
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_GE(counts.total_from(AllocSource::kFathom), 1) << counts.Describe();
}

// Calls beyond the runner's limits are errors, not reallocations.
TEST(RunnerLimits, CallsBeyondThemAreErrors) {
  const Model& m = TinyModel("ouro");
  auto k = MakeKvManager(m.spec(), 4, KvLayout::kLastExited, 1, 64, 16, DType::kBF16);
  ASSERT_TRUE(k.ok()) << k.status().message();
  KvManager& kv = **k;
  RunLimits limits;
  limits.max_rows = 2;
  limits.max_context = 8;
  StageRunner runner(m, kv, 2, limits);
  const KvManager::SeqId seq = kv.AddSequence(3);
  ASSERT_TRUE(kv.Grow(seq, 12));
  runner.AddSequence(seq, 4);
  const std::vector<int32_t> ids = {1, 2, 3};
  PrefillChunk c;
  c.seq = seq;
  c.ids = ids.data();
  c.n = 3;
  c.loops = 4;
  PrefillResult out;
  const Status rows = runner.Prefill({c}, false, &out);
  EXPECT_FALSE(rows.ok());
  EXPECT_NE(rows.message().find("max_rows 2"), std::string::npos) << rows.message();
  c.n = 2;
  ASSERT_TRUE(runner.Prefill({c}, false, &out).ok());
  DecodeItem it;
  it.slot = 0;
  it.seq = seq;
  it.token = 1;
  it.pos = 3;
  const Status items = runner.Prelude({it, it, it});
  EXPECT_FALSE(items.ok());
  EXPECT_NE(items.message().find("max_rows 2"), std::string::npos) << items.message();
  it.pos = 8;
  const Status context = runner.Prelude({it});
  EXPECT_FALSE(context.ok());
  EXPECT_NE(context.message().find("max_context 8"), std::string::npos) << context.message();
}

// The engine's whole step in steady decode (scheduler plan, runner, events, sampling):
// nothing allocated by fathom's code once the requests are admitted.
TEST(EngineDecode, AllocatesNothingInFathom) {
  omp_set_num_threads(2);
  const Model& m = TinyModel("ouro");
  EngineOptions opt;
  opt.width = 4;
  opt.kv_dtype = DType::kBF16;
  // The ThreadGovernor's probes of 1 thread build that count's matmul primitives (once per
  // M, a warm-up whenever it happens): this test measures the steady step on 2 threads.
  opt.adaptive_threads = false;
  auto e = Engine::Create(m, opt);
  ASSERT_TRUE(e.ok()) << e.status().message();
  Engine& engine = **e;
  auto add = [&](int64_t prompt_len, int32_t max_tokens) {
    for (int32_t b = 0; b < 4; ++b) {
      RequestSpec r;
      for (int64_t i = 0; i < prompt_len + b; ++i) r.prompt.push_back(static_cast<int32_t>((b * 17 + i) % m.spec().vocab));
      r.max_tokens = max_tokens;
      r.stop_at_eos = false;
      r.exit.kind = ExitSpec::Kind::kThreshold;
      r.exit.threshold = 0.5;
      ASSERT_TRUE(engine.AddRequest(r).ok());
    }
  };
  add(40, 12);  // warm-up, run to completion
  ASSERT_TRUE(engine.RunToCompletion().ok());
  add(9, 40);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(engine.Step().ok());  // the prefill, then well into decode
  ASSERT_NE(engine.last_plan().stage, Stage::kPrefill);
  const int64_t steps0 = engine.stats().steps;
  testing::StartCounting();
  int64_t finished = 0;
  for (int i = 0; i < 60 && engine.HasWork(); ++i) {
    if (!engine.Step().ok()) break;
    for (const TokenEvent& ev : engine.events()) finished += ev.finish != FinishReason::kNone;
    if (finished) break;
  }
  const AllocCounts counts = testing::StopCounting();
  std::printf("[alloc] engine: %lld steps of steady decode\n", static_cast<long long>(engine.stats().steps - steps0));
  Report("engine_step", counts);
  EXPECT_GT(engine.stats().steps - steps0, 10);  // steady decode was reached and counted
  EXPECT_EQ(counts.total_from(AllocSource::kFathom), 0) << counts.Describe();
}

}  // namespace
}  // namespace fathom
