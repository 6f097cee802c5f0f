// Scheduler unit tests with a fake runner: plans are answered by deterministic functions
// of (request, position, step), so every property is checked without a model.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "sched/scheduler.h"

namespace fathom {
namespace {

constexpr int64_t kBlock = 4, kLayers = 2;
int64_t BlocksFor(int64_t, int64_t len) { return kLayers * ((len + kBlock - 1) / kBlock); }

SchedConfig Config(SchedMode mode, int32_t width = 4, int32_t k = 1, int64_t blocks = 1000) {
  SchedConfig c;
  c.mode = mode;
  c.width = width;
  c.min_coda = k;
  c.kv_blocks = blocks;
  c.prefill_budget = 8;
  c.reserve_tokens = 0;
  c.blocks_for = BlocksFor;
  return c;
}

int32_t TokenAt(RequestId r, int64_t pos) { return static_cast<int32_t>((r * 31 + pos * 7) % 97); }

// Answers plans; `exit_after(req, pos, steps_run)` says whether the policy fires.
struct FakeRunner {
  std::function<bool(RequestId, int64_t, int32_t)> exit_after = [](RequestId, int64_t, int32_t) { return false; };
  std::vector<Plan> log;
  Outcome Run(const Scheduler& s, const Plan& p) {
    log.push_back(p);
    Outcome o;
    if (p.stage == Stage::kPrefill)
      for (const PrefillWork& c : p.chunks)
        o.tokens.push_back(c.sample ? TokenAt(c.req, c.pos0 + c.n) : -1);
    for (const WorkItem& it : p.items) {
      if (p.stage == Stage::kPrelude) {
        EXPECT_EQ(it.token, TokenAt(it.req, it.pos)) << p.ToString();
      }
      if (p.stage == Stage::kCore) o.exit.push_back(exit_after(it.req, it.pos, it.step + 1) ? 1 : 0);
      if (p.stage == Stage::kCoda) o.tokens.push_back(TokenAt(it.req, it.pos + 1));
    }
    (void)s;
    return o;
  }
};

// Runs to completion, checking invariants after every update; returns events.
std::vector<TokenEvent> Drive(Scheduler& s, FakeRunner& f, int64_t max_steps = 100000) {
  std::vector<TokenEvent> ev;
  Plan p;
  for (int64_t i = 0; i < max_steps && s.HasWork(); ++i) {
    s.Schedule(&p);
    EXPECT_FALSE(p.empty()) << "no progress at step " << i;
    if (p.empty()) break;
    if (getenv("SCHED_TRACE") && i < 80) fprintf(stderr, "%s\n", p.ToString().c_str());
    Outcome o = f.Run(s, p);
    s.Update(p, o, &ev);
    s.CheckInvariants();
  }
  EXPECT_FALSE(s.HasWork());
  return ev;
}

SchedRequest Req(int64_t prompt, int32_t max_tokens, int32_t loops) {
  SchedRequest r;
  r.prompt_len = prompt;
  r.max_tokens = max_tokens;
  r.loops = loops;
  return r;
}

class AllModes : public ::testing::TestWithParam<SchedMode> {};

TEST_P(AllModes, RandomWorkloadKeepsInvariantsAndFinishesEverything) {
  std::mt19937 rng(7);
  for (int64_t blocks : {1000, 24})
  for (bool lookahead : {false, true}) {
    SchedConfig c = Config(GetParam(), 4, 2, blocks);
    c.lookahead = lookahead;
    Scheduler s(c);
    FakeRunner f;
    f.exit_after = [](RequestId r, int64_t pos, int32_t steps) { return (r + pos + steps) % 3 == 0; };
    std::vector<RequestId> ids;
    for (int i = 0; i < 20; ++i)
      ids.push_back(s.AddRequest(Req(1 + rng() % 12, 1 + static_cast<int32_t>(rng() % 9), 4)).value());
    Drive(s, f);
    for (RequestId id : ids) {
      const auto& r = s.request(id);
      ASSERT_TRUE(r.done);
      EXPECT_EQ(r.finish, FinishReason::kLength);
      ASSERT_EQ(static_cast<int32_t>(r.tokens.size()), r.spec.max_tokens);
      for (size_t t = 0; t < r.tokens.size(); ++t)
        EXPECT_EQ(r.tokens[t], TokenAt(id, r.spec.prompt_len + static_cast<int64_t>(t)));
      EXPECT_EQ(r.depths[0], 4);
      for (size_t t = 1; t < r.depths.size(); ++t) {
        EXPECT_GE(r.depths[t], GetParam() == SchedMode::kCb ? 4 : lookahead ? 2 : 1);
        EXPECT_LE(r.depths[t], 4);
      }
    }
    EXPECT_EQ(s.free_blocks(), blocks);
    if (blocks == 24) {
      EXPECT_GT(s.preemptions(), 0);
    }
  }
}

std::string ModeName(const ::testing::TestParamInfo<SchedMode>& p) {
  std::string n(SchedModeName(p.param));
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}
INSTANTIATE_TEST_SUITE_P(Modes, AllModes,
                         ::testing::Values(SchedMode::kCb, SchedMode::kCdbNoRefill, SchedMode::kCdbRefill),
                         ModeName);

TEST(Scheduler, PlanIsPrintableAndScheduleMutatesNothing) {
  Scheduler s(Config(SchedMode::kCdbRefill));
  ASSERT_TRUE(s.AddRequest(Req(5, 3, 4)).ok());
  Plan a, b;
  s.Schedule(&a);
  s.Schedule(&b);
  EXPECT_EQ(a.ToString(), b.ToString());
  EXPECT_EQ(a.ToString(), "prefill grow(r0->5) [r0 pos 0+5 last]");
}

TEST(Scheduler, LookaheadDecisionAtStepRTakesEffectAtRPlus2) {
  for (bool lookahead : {true, false}) {
    SchedConfig c = Config(SchedMode::kCdbRefill);
    c.lookahead = lookahead;
    Scheduler s(c);
    ASSERT_TRUE(s.AddRequest(Req(3, 2, 6)).ok());
    FakeRunner f;
    f.exit_after = [](RequestId, int64_t, int32_t steps) { return steps == 2; };  // decided at r=2
    Drive(s, f);
    std::vector<int32_t> core_steps;
    for (const Plan& p : f.log)
      if (p.stage == Stage::kCore) core_steps.push_back(p.items[0].step);
    // Lookahead: steps 0,1 then step 2 runs regardless (the token does not join step 3).
    EXPECT_EQ(core_steps, lookahead ? std::vector<int32_t>({0, 1, 2}) : std::vector<int32_t>({0, 1}));
    EXPECT_EQ(s.request(0).depths, std::vector<int32_t>({6, lookahead ? 3 : 2}));
  }
  // Earliest decision (after step 1) gives the minimum exit depth: 2 under lookahead, 1
  // without it (the default).
  EXPECT_FALSE(SchedConfig().lookahead);
  for (bool lookahead : {true, false}) {
    SchedConfig c = Config(SchedMode::kCdbRefill);
    c.lookahead = lookahead;
    Scheduler s(c);
    ASSERT_TRUE(s.AddRequest(Req(3, 3, 6)).ok());
    FakeRunner f;
    f.exit_after = [](RequestId, int64_t, int32_t) { return true; };
    Drive(s, f);
    EXPECT_EQ(s.request(0).depths, lookahead ? std::vector<int32_t>({6, 2, 2}) : std::vector<int32_t>({6, 1, 1}));
  }
}

TEST(Scheduler, RefillPriorityOrder) {
  Scheduler s(Config(SchedMode::kCdbRefill, 4, 1));
  FakeRunner f;
  f.exit_after = [](RequestId r, int64_t, int32_t steps) { return steps >= 1 + r; };
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.AddRequest(Req(4, 4, 4)).ok());
  Drive(s, f);
  // With K=1, a core step never runs while an exited token waits.
  std::vector<TokenEvent> ev;
  Scheduler t(Config(SchedMode::kCdbRefill, 4, 1));
  Plan p;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(t.AddRequest(Req(4, 6, 4)).ok());
  for (int i = 0; i < 300 && t.HasWork(); ++i) {
    t.Schedule(&p);
    // After a prefill or a coda produced tokens (slots free): their prelude.
    if (!t.ready().empty() && t.free_slots() > 0) {
      EXPECT_EQ(p.stage, Stage::kPrelude);
    }
    if (!t.exited().empty() && (t.ready().empty() || t.free_slots() == 0)) {
      EXPECT_EQ(p.stage, Stage::kCoda);
    }
    if (!t.waiting().empty() && t.exited().empty() && (t.ready().empty() || t.free_slots() == 0)) {
      EXPECT_EQ(p.stage, Stage::kPrefill);
    }
    t.Update(p, f.Run(t, p), &ev);
  }
  EXPECT_FALSE(t.HasWork());
}

TEST(Scheduler, MinCodaBatchWaitsForKThenFlushes) {
  SchedConfig c = Config(SchedMode::kCdbRefill, 8, 3);
  c.flush_steps = 5;
  Scheduler s(c);
  FakeRunner f;
  // Request 0 exits early (depth 2); the others run all 8 steps.
  f.exit_after = [](RequestId r, int64_t, int32_t) { return r == 0; };
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(s.AddRequest(Req(2, 3, 8)).ok());
  std::vector<TokenEvent> ev;
  Plan p;
  int64_t waited_max = 0;
  for (int i = 0; i < 1000 && s.HasWork(); ++i) {
    s.Schedule(&p);
    if (p.stage == Stage::kCoda) {
      const int64_t waited = s.steps() - s.request(s.exited().front()).coda_since;
      waited_max = std::max(waited_max, waited);
      // K reached, or flushed (age or nothing left looping).
      EXPECT_TRUE(s.exited().size() >= 3 || waited >= 5 || s.looping().empty()) << p.ToString();
    }
    s.Update(p, f.Run(s, p), &ev);
    s.CheckInvariants();
  }
  EXPECT_FALSE(s.HasWork());
  EXPECT_LE(waited_max, 5);  // no token waits past the flush age
  for (RequestId r = 0; r < 4; ++r) EXPECT_EQ(s.request(r).tokens.size(), 3u);
}

TEST(Scheduler, NoRefillCohortShrinksAndRunsOneCoda) {
  Scheduler s(Config(SchedMode::kCdbNoRefill, 4));
  FakeRunner f;
  f.exit_after = [](RequestId r, int64_t, int32_t steps) { return steps >= 1 + r; };  // depths 1,2,3,4
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(s.AddRequest(Req(2, 2, 4)).ok());
  Drive(s, f);
  std::vector<size_t> core_sizes;
  int codas = 0, preludes = 0;
  for (const Plan& p : f.log) {
    if (p.stage == Stage::kCore) core_sizes.push_back(p.items.size());
    codas += p.stage == Stage::kCoda;
    preludes += p.stage == Stage::kPrelude;
  }
  EXPECT_EQ(core_sizes, std::vector<size_t>({4, 3, 2, 1}));
  EXPECT_EQ(codas, 1);
  EXPECT_EQ(preludes, 1);
  EXPECT_EQ(s.request(0).depths[1], 1);
  EXPECT_EQ(s.request(1).depths[1], 2);
  EXPECT_EQ(s.request(3).depths[1], 4);
}

// The exit depth of the token at `pos` of request `req`, by the rule of scheduler.h: the
// first step s after which exit_after fires, plus one step under the lookahead gate, at
// most `loops` (no decision: `loops`). Computed from the script, not by the scheduler.
int32_t ScriptedDepth(const FakeRunner& f, RequestId req, int64_t pos, int32_t loops, bool lookahead) {
  for (int32_t s = 1; s <= loops; ++s)
    if (f.exit_after(req, pos, s)) return std::min(loops, s + (lookahead ? 1 : 0));
  return loops;
}

// DESIGN.md §2's central claim, counted on plain plans. A workload of many more requests
// than slots, with exits at depths 1..4 varying by request and position, runs to the end
// while the test keeps its own account from the workload and the plans' items alone
// (each request's tokens emitted against its max_tokens, each token's scripted depth and
// the core steps it has run):
//   cdb-refill    every core step carries min(W, requests not finished) rows minus the
//                 exited tokens holding a slot while they wait for the coda (none with
//                 K = 1): W until the drain at the end, because freed slots are refilled;
//   cdb-norefill  the core step s of a cohort carries the cohort's tokens deeper than s:
//                 the batch shrinks as tokens exit and is refilled only between cohorts.
struct CoreBatchAccount {
  int64_t core_steps = 0, rows = 0, full_steps = 0, shrinking_cohorts = 0;
  std::set<int32_t> depths;
};

CoreBatchAccount RunCoreBatchWorkload(SchedMode mode, int32_t k, bool lookahead) {
  constexpr int32_t kW = 4, kLoops = 4, kRequests = 24;
  SchedConfig c = Config(mode, kW, k);  // 1000 blocks: no request ever waits for KV
  c.lookahead = lookahead;
  Scheduler s(c);
  FakeRunner f;
  f.exit_after = [](RequestId r, int64_t pos, int32_t steps) { return steps >= 1 + (r * 3 + pos) % kLoops; };
  std::vector<int32_t> max_tokens;
  for (int i = 0; i < kRequests; ++i) {
    max_tokens.push_back(2 + (i * 5) % 7);
    EXPECT_TRUE(s.AddRequest(Req(2 + i % 5, max_tokens.back(), kLoops)).ok());
  }
  std::vector<int32_t> emitted(kRequests, 0), depth(kRequests, 0), ran(kRequests, 0);
  std::vector<bool> waits_for_coda(kRequests, false);
  int64_t unfinished = kRequests, want_rows = 0;
  std::vector<int32_t> cohort;  // norefill: depths of the current cohort's tokens
  int32_t cohort_step = 0;
  const auto emit = [&](RequestId r) {
    if (++emitted[static_cast<size_t>(r)] == max_tokens[static_cast<size_t>(r)]) --unfinished;
  };
  CoreBatchAccount a;
  std::vector<TokenEvent> ev;
  Plan p;
  for (int i = 0; i < 100000 && s.HasWork(); ++i) {
    s.Schedule(&p);
    switch (p.stage) {
      case Stage::kPrefill:
        for (const PrefillWork& ch : p.chunks)
          if (ch.sample) emit(ch.req);
        break;
      case Stage::kPrelude:
        if (mode == SchedMode::kCdbNoRefill) {
          EXPECT_TRUE(cohort.empty()) << "a new cohort before the last one's coda: " << p.ToString();
          cohort_step = 0;
        }
        for (const WorkItem& it : p.items) {
          const auto r = static_cast<size_t>(it.req);
          depth[r] = ScriptedDepth(f, it.req, it.pos, kLoops, lookahead);
          ran[r] = 0;
          want_rows += depth[r];
          a.depths.insert(depth[r]);
          if (mode == SchedMode::kCdbNoRefill) cohort.push_back(depth[r]);
        }
        if (mode == SchedMode::kCdbNoRefill &&
            std::count(cohort.begin(), cohort.end(), kLoops) < static_cast<std::ptrdiff_t>(cohort.size()))
          ++a.shrinking_cohorts;
        break;
      case Stage::kCore: {
        const auto rows = static_cast<int64_t>(p.items.size());
        if (mode == SchedMode::kCdbRefill) {
          const int64_t holding = std::count(waits_for_coda.begin(), waits_for_coda.end(), true);
          if (k == 1) {
            EXPECT_EQ(holding, 0) << "K = 1: a core step while an exited token waits";
          }
          EXPECT_EQ(rows, std::min<int64_t>(kW, unfinished) - holding)
              << "step " << i << ", " << unfinished << " requests not finished: " << p.ToString();
        } else {
          const int64_t deeper = std::count_if(cohort.begin(), cohort.end(), [&](int32_t d) { return d > cohort_step; });
          EXPECT_EQ(rows, deeper) << "cohort step " << cohort_step << ": " << p.ToString();
          ++cohort_step;
        }
        for (const WorkItem& it : p.items) {
          const auto r = static_cast<size_t>(it.req);
          if (++ran[r] == depth[r]) waits_for_coda[r] = true;
        }
        ++a.core_steps;
        a.rows += rows;
        a.full_steps += rows == kW;
        break;
      }
      case Stage::kCoda:
        if (mode == SchedMode::kCdbNoRefill) {
          EXPECT_EQ(p.items.size(), cohort.size()) << "one coda per cohort: " << p.ToString();
          cohort.clear();
        }
        for (const WorkItem& it : p.items) {
          EXPECT_TRUE(waits_for_coda[static_cast<size_t>(it.req)]) << "coda before the scripted depth";
          waits_for_coda[static_cast<size_t>(it.req)] = false;
          emit(it.req);
        }
        break;
      case Stage::kIdle: ADD_FAILURE() << "idle step " << i; break;
    }
    s.Update(p, f.Run(s, p), &ev);
    s.CheckInvariants();
  }
  EXPECT_FALSE(s.HasWork());
  EXPECT_EQ(unfinished, 0);
  EXPECT_EQ(s.preemptions(), 0);
  EXPECT_EQ(a.rows, want_rows);  // every token ran exactly its scripted depth
  return a;
}

TEST(Scheduler, RefillKeepsTheCoreBatchAtWidth) {
  for (bool lookahead : {false, true})
    for (int32_t k : {1, 3}) {
      SCOPED_TRACE("lookahead " + std::to_string(lookahead) + ", K " + std::to_string(k));
      const CoreBatchAccount a = RunCoreBatchWorkload(SchedMode::kCdbRefill, k, lookahead);
      EXPECT_GE(a.depths.size(), lookahead ? 3u : 4u);  // exits at varied depths
      // Both regimes occurred: full batches, and shorter ones (the drain; with K = 3 also
      // slots held by tokens waiting for the coda).
      EXPECT_GT(a.full_steps, 0);
      EXPECT_GT(a.core_steps, a.full_steps);
    }
}

TEST(Scheduler, NoRefillCohortBatchesShrinkAsTokensExit) {
  for (bool lookahead : {false, true}) {
    SCOPED_TRACE("lookahead " + std::to_string(lookahead));
    const CoreBatchAccount norefill = RunCoreBatchWorkload(SchedMode::kCdbNoRefill, 1, lookahead);
    EXPECT_GT(norefill.shrinking_cohorts, 0);
    // The contrast: the same tokens and depths (the same core rows) take more, smaller
    // core steps without refill.
    const CoreBatchAccount refill = RunCoreBatchWorkload(SchedMode::kCdbRefill, 1, lookahead);
    EXPECT_EQ(norefill.rows, refill.rows);
    EXPECT_GT(norefill.core_steps, refill.core_steps);
    EXPECT_LT(norefill.full_steps, refill.full_steps);
  }
}

TEST(Scheduler, CbIgnoresExitsAndRunsWholeTokens) {
  Scheduler s(Config(SchedMode::kCb, 4));
  FakeRunner f;
  f.exit_after = [](RequestId, int64_t, int32_t) { return true; };
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(s.AddRequest(Req(2, 3, 4)).ok());
  Drive(s, f);
  for (RequestId r = 0; r < 4; ++r) EXPECT_EQ(s.request(r).depths, std::vector<int32_t>({4, 4, 4}));
}

TEST(Scheduler, PreemptsNewestAndResumesWithIdenticalOutput) {
  // 12 blocks: two requests of prompt 4 growing to 4 + 9 positions cannot both fit.
  Scheduler s(Config(SchedMode::kCdbRefill, 4, 1, 8));
  FakeRunner f;
  f.exit_after = [](RequestId r, int64_t pos, int32_t steps) { return (r + pos) % 2 == 0 && steps >= 2; };
  ASSERT_TRUE(s.AddRequest(Req(4, 10, 4)).ok());
  ASSERT_TRUE(s.AddRequest(Req(4, 10, 4)).ok());
  auto ev = Drive(s, f);
  EXPECT_GT(s.preemptions(), 0);
  EXPECT_EQ(s.request(0).preemptions, 0);  // the oldest is never the victim
  EXPECT_GT(s.request(1).preemptions, 0);
  bool replayed = false;
  for (const Plan& p : f.log)
    for (const WorkItem& it : p.items) replayed = replayed || it.replay;
  EXPECT_TRUE(replayed);
  // Each output token was emitted exactly once, in order.
  std::map<RequestId, std::vector<int32_t>> streamed;
  for (const TokenEvent& e : ev) streamed[e.req].push_back(e.token);
  for (RequestId r = 0; r < 2; ++r) {
    EXPECT_EQ(streamed[r], s.request(r).tokens);
    std::vector<int32_t> depths_alone;  // depth of token t: (r + pos) even -> 2, else 4
    for (int64_t t = 0; t < 10; ++t) {
      const int64_t pos = 4 + t - 1;
      depths_alone.push_back(t == 0 ? 4 : ((r + pos) % 2 == 0 ? 2 : 4));
    }
    EXPECT_EQ(s.request(r).depths, depths_alone);
  }
}

// aligned_chunks (LCKV): every prompt is cut at multiples of the budget (8) from its start,
// whatever else shares the step, also when it is prefilled again after a preemption; without
// it a prompt queued behind another takes what is left of the step's budget.
TEST(Scheduler, AlignedChunksCutEveryPromptAtMultiplesOfTheBudget) {
  for (bool aligned : {true, false}) {
    for (int64_t blocks : {1000, 20}) {
      SchedConfig c = Config(SchedMode::kCdbRefill, 4, 1, blocks);
      c.aligned_chunks = aligned;
      Scheduler s(c);
      FakeRunner f;
      for (int64_t prompt : {5, 19, 13, 3, 11}) ASSERT_TRUE(s.AddRequest(Req(prompt, 6, 2)).ok());
      Drive(s, f);
      bool unaligned = false;
      for (const Plan& p : f.log) {
        int64_t tokens = 0;
        for (const PrefillWork& w : p.chunks) {
          tokens += w.n;
          const int64_t end = w.pos0 + w.n, prompt = s.request(w.req).spec.prompt_len;
          const bool at_boundary = w.pos0 % 8 == 0 && (end % 8 == 0 || end == prompt);
          unaligned = unaligned || !at_boundary;
          if (aligned) {
            EXPECT_TRUE(at_boundary) << p.ToString();
          }
        }
        EXPECT_LE(tokens, 8) << p.ToString();
      }
      if (!aligned) {
        EXPECT_TRUE(unaligned) << "the workload must exercise unaligned cuts without the option";
      }
      if (blocks == 20) {
        EXPECT_GT(s.preemptions(), 0);
      }
    }
  }
}

TEST(Scheduler, RejectsWhatCanNeverFitAndCancels) {
  Scheduler s(Config(SchedMode::kCdbRefill, 4, 1, 8));
  auto bad = s.AddRequest(Req(10, 10, 4));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("rejected"), std::string::npos);
  const RequestId a = s.AddRequest(Req(3, 5, 4)).value();
  const RequestId b = s.AddRequest(Req(3, 5, 4)).value();
  FakeRunner f;
  std::vector<TokenEvent> ev;
  Plan p;
  for (int i = 0; i < 4; ++i) {
    s.Schedule(&p);
    s.Update(p, f.Run(s, p), &ev);
  }
  ev.clear();
  EXPECT_TRUE(s.Cancel(a, &ev));
  EXPECT_FALSE(s.Cancel(a, &ev));
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].finish, FinishReason::kCancelled);
  s.CheckInvariants();
  Drive(s, f);
  EXPECT_EQ(s.request(b).tokens.size(), 5u);
  EXPECT_EQ(s.free_blocks(), 8);
}

TEST(Scheduler, ForgetReclaimsFinishedRequestsInIdOrder) {
  Scheduler s(Config(SchedMode::kCdbRefill));
  FakeRunner f;
  std::vector<RequestId> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(s.AddRequest(Req(3, 2, 4)).value());
  Drive(s, f);
  const std::vector<int32_t> tokens2 = s.request(ids[2]).tokens;
  s.Forget(ids[1]);  // not the oldest: its storage waits for request 0
  EXPECT_EQ(s.retained(), 3);
  EXPECT_TRUE(s.request(ids[0]).done);
  s.Forget(ids[0]);
  EXPECT_EQ(s.retained(), 1);
  EXPECT_EQ(s.request(ids[2]).tokens, tokens2);  // the survivor is intact
  EXPECT_EQ(s.num_requests(), 3);                // ids are never reused
  // New requests keep running after the reclaim, with fresh ids.
  const RequestId next = s.AddRequest(Req(3, 2, 4)).value();
  EXPECT_EQ(next, 3);
  Drive(s, f);
  EXPECT_EQ(s.request(next).tokens.size(), 2u);
  s.Forget(ids[2]);
  s.Forget(next);
  EXPECT_EQ(s.retained(), 0);
  s.CheckInvariants();
}

}  // namespace
}  // namespace fathom
