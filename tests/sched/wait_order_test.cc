// The waiting queue's order (SchedConfig::order): service tier, then earliest deadline,
// then arrival; FIFO as an option; a preempted request returns to its key's place. A fake
// runner answers the plans (every token exits at full depth), as in scheduler_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <vector>

#include "sched/scheduler.h"

namespace fathom {
namespace {

int64_t BlocksFor(int64_t, int64_t len) { return (len + 3) / 4; }

SchedConfig Config(WaitOrder order, int64_t blocks = 1000) {
  SchedConfig c;
  c.mode = SchedMode::kCdbRefill;
  c.width = 1;
  c.kv_blocks = blocks;
  c.prefill_budget = 8;
  c.reserve_tokens = 0;
  c.blocks_for = BlocksFor;
  c.order = order;
  return c;
}

SchedRequest Req(int32_t rank, double deadline, int64_t prompt = 8) {
  SchedRequest r;
  r.prompt_len = prompt;
  r.max_tokens = 2;
  r.loops = 2;
  r.rank = rank;
  r.deadline = deadline;
  return r;
}

// Runs to completion; returns the requests in the order their prefill first started.
std::vector<RequestId> PrefillOrder(Scheduler& s) {
  std::vector<RequestId> order;
  std::vector<TokenEvent> ev;
  Plan p;
  for (int i = 0; i < 10000 && s.HasWork(); ++i) {
    s.Schedule(&p);
    Outcome o;
    for (const PrefillWork& c : p.chunks) {
      if (std::find(order.begin(), order.end(), c.req) == order.end()) order.push_back(c.req);
      o.tokens.push_back(c.sample ? 5 : -1);
    }
    for (const WorkItem& it : p.items) {
      (void)it;
      if (p.stage == Stage::kCore) o.exit.push_back(0);
      if (p.stage == Stage::kCoda) o.tokens.push_back(5);
    }
    s.Update(p, o, &ev);
    s.CheckInvariants();
  }
  EXPECT_FALSE(s.HasWork());
  return order;
}

constexpr double kNone = std::numeric_limits<double>::infinity();

TEST(WaitOrder, TierThenEarliestDeadlineThenArrival) {
  Scheduler s(Config(WaitOrder::kTierDeadline));
  ASSERT_TRUE(s.AddRequest(Req(2, 1.0)).ok());    // 0 flex, the earliest deadline of all
  ASSERT_TRUE(s.AddRequest(Req(1, 5.0)).ok());    // 1 default
  ASSERT_TRUE(s.AddRequest(Req(1, 2.0)).ok());    // 2 default, earlier deadline
  ASSERT_TRUE(s.AddRequest(Req(0, kNone)).ok());  // 3 priority, no deadline
  ASSERT_TRUE(s.AddRequest(Req(1, kNone)).ok());  // 4 default, no deadline
  ASSERT_TRUE(s.AddRequest(Req(1, kNone)).ok());  // 5 default, no deadline, later arrival
  EXPECT_EQ(s.waiting(), (std::vector<RequestId>{3, 2, 1, 4, 5, 0}));
  EXPECT_EQ(PrefillOrder(s), (std::vector<RequestId>{3, 2, 1, 4, 5, 0}));
}

// Many arrivals with repeated tiers and deadlines (ties decided by arrival): the queue is
// the requests sorted by (tier, deadline, arrival), whatever search Enqueue uses.
TEST(WaitOrder, ManyArrivalsAreKeptSorted) {
  Scheduler s(Config(WaitOrder::kTierDeadline, 100000));
  std::mt19937 rng(3);
  struct Key { int32_t rank; double deadline; RequestId id; };
  std::vector<Key> keys;
  for (int i = 0; i < 400; ++i) {
    const auto rank = static_cast<int32_t>(rng() % 3);
    const double deadline = rng() % 4 == 0 ? kNone : static_cast<double>(rng() % 20);
    Result<RequestId> id = s.AddRequest(Req(rank, deadline));
    ASSERT_TRUE(id.ok());
    keys.push_back({rank, deadline, *id});
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    if (a.rank != b.rank) return a.rank < b.rank;
    if (a.deadline != b.deadline) return a.deadline < b.deadline;
    return a.id < b.id;
  });
  std::vector<RequestId> want;
  for (const Key& k : keys) want.push_back(k.id);
  EXPECT_EQ(s.waiting(), want);
}

TEST(WaitOrder, FifoIgnoresTiersAndDeadlines) {
  Scheduler s(Config(WaitOrder::kFifo));
  ASSERT_TRUE(s.AddRequest(Req(2, 1.0)).ok());
  ASSERT_TRUE(s.AddRequest(Req(1, 5.0)).ok());
  ASSERT_TRUE(s.AddRequest(Req(0, kNone)).ok());
  EXPECT_EQ(PrefillOrder(s), (std::vector<RequestId>{0, 1, 2}));
}

TEST(WaitOrder, OneTierWithoutDeadlinesIsArrivalOrder) {
  Scheduler s(Config(WaitOrder::kTierDeadline));
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(s.AddRequest(Req(1, kNone, 3 + i)).ok());
  EXPECT_EQ(PrefillOrder(s), (std::vector<RequestId>{0, 1, 2, 3, 4, 5}));
}

TEST(WaitOrder, APastDeadlineIsStillServedFirstInItsTier) {
  // The scheduler does not drop requests whose deadline has passed (the engine counts the
  // miss); such a request is simply the earliest deadline of its tier.
  Scheduler s(Config(WaitOrder::kTierDeadline));
  ASSERT_TRUE(s.AddRequest(Req(1, 10.0)).ok());
  ASSERT_TRUE(s.AddRequest(Req(1, -5.0)).ok());
  EXPECT_EQ(PrefillOrder(s), (std::vector<RequestId>{1, 0}));
  EXPECT_EQ(s.request(1).finish, FinishReason::kLength);
  EXPECT_FALSE(s.AddRequest(Req(1, std::numeric_limits<double>::quiet_NaN())).ok());
}

TEST(WaitOrder, APreemptedRequestReturnsToItsPlace) {
  // A pool of 7 blocks; a prompt of 8 holds 2 and grows to 3 with its second token. B, C, D
  // (deadlines 1, 2, 3) are admitted, A (deadline 9, the first to arrive) waits; B's growth
  // takes the last block, so C's preempts the newest holder, D, which goes back ahead of A
  // (by its key; by arrival it would go behind A).
  SchedConfig c = Config(WaitOrder::kTierDeadline, 7);
  c.width = 3;
  c.prefill_budget = 32;  // B, C and D in one prefill
  Scheduler s(c);
  ASSERT_TRUE(s.AddRequest(Req(1, 9.0)).ok());  // A = 0
  ASSERT_TRUE(s.AddRequest(Req(1, 1.0)).ok());  // B = 1
  ASSERT_TRUE(s.AddRequest(Req(1, 2.0)).ok());  // C = 2
  ASSERT_TRUE(s.AddRequest(Req(1, 3.0)).ok());  // D = 3
  std::vector<TokenEvent> ev;
  Plan p;
  bool checked = false;
  for (int i = 0; i < 10000 && s.HasWork(); ++i) {
    s.Schedule(&p);
    Outcome o;
    for (const PrefillWork& ch : p.chunks) o.tokens.push_back(ch.sample ? 5 : -1);
    for (size_t k = 0; k < p.items.size(); ++k) {
      if (p.stage == Stage::kCore) o.exit.push_back(0);
      if (p.stage == Stage::kCoda) o.tokens.push_back(5);
    }
    const bool preempts = !p.preempt.empty();
    if (getenv("SCHED_TRACE")) fprintf(stderr, "%s free=%lld\n", p.ToString().c_str(), (long long)s.free_blocks());
    s.Update(p, o, &ev);
    s.CheckInvariants();
    if (preempts && !checked) {
      EXPECT_EQ(p.preempt, std::vector<RequestId>{3});
      EXPECT_EQ(s.waiting(), (std::vector<RequestId>{3, 0}));
      checked = true;
    }
  }
  EXPECT_TRUE(checked) << "no preemption happened; the test's pool is too large";
  EXPECT_FALSE(s.HasWork());
}

}  // namespace
}  // namespace fathom
