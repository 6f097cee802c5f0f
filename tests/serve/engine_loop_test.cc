#include "serve/engine_loop.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "model/test_util.h"

namespace fathom::serve {
namespace {

using namespace std::chrono_literals;

// Polls `pred` for at most 60 s (a bound for a hung server, never an expected duration).
template <typename F>
bool WaitUntil(F pred) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return pred();
}

// Every event of a stream up to its end (bounded).
std::vector<TokenEvent> Drain(RequestStream& s) {
  std::vector<TokenEvent> out;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    s.Wait(&out, 100ms);
    if (!out.empty() && out.back().finish != FinishReason::kNone) break;
    if (s.over() && !s.error().empty()) break;
  }
  return out;
}

std::vector<int32_t> Tokens(const std::vector<TokenEvent>& ev) {
  std::vector<int32_t> t;
  for (const TokenEvent& e : ev)
    if (e.token >= 0) t.push_back(e.token);
  return t;
}

class EngineLoopTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fathom::testing::TempDir();
    fathom::testing::MakeTinyModel("ouro", dir_->path(), DType::kF32, 3);
    // Batch-invariant matmuls: the comparison with runs alone is bit for bit (model.h).
    auto m = Model::Load(dir_->path(), {.batch_invariant = true});
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = m->release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete dir_;
  }
  static EngineOptions Options() {
    EngineOptions o;
    o.width = 4;
    o.kv_bytes = size_t{1} << 20;
    return o;
  }
  static std::unique_ptr<Engine> NewEngine() {
    auto e = Engine::Create(*model_, Options());
    EXPECT_TRUE(e.ok()) << e.status().message();
    return std::move(*e);
  }
  static RequestSpec Spec(int32_t seed, int32_t max_tokens) {
    RequestSpec r;
    for (int32_t i = 0; i < 3 + seed % 5; ++i) r.prompt.push_back((seed * 31 + i * 7) % 250 + 1);
    r.max_tokens = max_tokens;
    r.stop_at_eos = false;
    return r;
  }
  // The request run alone through a fresh engine: the reference for batched results.
  static std::vector<int32_t> Alone(const RequestSpec& spec) {
    auto e = NewEngine();
    auto id = e->AddRequest(spec);
    EXPECT_TRUE(id.ok());
    EXPECT_TRUE(e->RunToCompletion().ok());
    return e->request(*id).tokens;
  }
  static fathom::testing::TempDir* dir_;
  static Model* model_;
};
fathom::testing::TempDir* EngineLoopTest::dir_ = nullptr;
Model* EngineLoopTest::model_ = nullptr;

TEST_F(EngineLoopTest, ConcurrentSubmittersGetTheirOwnOutputs) {
  EngineLoop loop(NewEngine(), {});
  constexpr int kThreads = 8, kPer = 3;
  std::vector<std::vector<int32_t>> got(kThreads * kPer);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < kPer; ++k) {
        const int i = t * kPer + k;
        Submission s = loop.Submit(Spec(i, 4 + i % 5));
        ASSERT_EQ(s.code, SubmitCode::kOk);
        ASSERT_TRUE(s.stream->WaitAdmitted().ok());
        std::vector<TokenEvent> ev = Drain(*s.stream);
        ASSERT_FALSE(ev.empty());
        EXPECT_EQ(ev.back().finish, FinishReason::kLength);
        got[static_cast<size_t>(i)] = Tokens(ev);
      }
    });
  for (auto& th : threads) th.join();
  for (int i = 0; i < kThreads * kPer; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], Alone(Spec(i, 4 + i % 5))) << i;
  EXPECT_TRUE(WaitUntil([&] { return loop.Metrics().finished_length == kThreads * kPer; }));
  MetricsSnapshot m = loop.Metrics();
  EXPECT_EQ(m.running, 0);
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_GT(m.output_tokens, 0);
  EXPECT_GT(m.mean_exit_depth, 0);
  EXPECT_EQ(loop.pending(), 0);
}

TEST_F(EngineLoopTest, InvalidRequestIsRejectedWithTheEnginesMessage) {
  EngineLoop loop(NewEngine(), {});
  RequestSpec r = Spec(1, 4);
  r.prompt.push_back(100000);
  Submission s = loop.Submit(r);
  ASSERT_EQ(s.code, SubmitCode::kOk);
  Status st = s.stream->WaitAdmitted();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("prompt_ids"), std::string::npos) << st.message();
  EXPECT_TRUE(WaitUntil([&] { return loop.pending() == 0; }));
  EXPECT_EQ(loop.Metrics().rejected_invalid, 1);
}

TEST_F(EngineLoopTest, TooManyPendingIsOverloaded) {
  EngineLoopOptions o;
  o.max_pending = 2;
  EngineLoop loop(NewEngine(), o);
  loop.Pause();  // nothing finishes while we fill the queue
  Submission a = loop.Submit(Spec(1, 3)), b = loop.Submit(Spec(2, 3));
  ASSERT_EQ(a.code, SubmitCode::kOk);
  ASSERT_EQ(b.code, SubmitCode::kOk);
  Submission c = loop.Submit(Spec(3, 3));
  EXPECT_EQ(c.code, SubmitCode::kOverloaded);
  EXPECT_NE(c.message.find("max-pending"), std::string::npos);
  loop.Resume();
  EXPECT_EQ(Tokens(Drain(*a.stream)), Alone(Spec(1, 3)));
  EXPECT_EQ(Tokens(Drain(*b.stream)), Alone(Spec(2, 3)));
  EXPECT_TRUE(WaitUntil([&] { return loop.pending() == 0; }));
  EXPECT_EQ(loop.Submit(Spec(3, 3)).code, SubmitCode::kOk);  // room again
  EXPECT_EQ(loop.Metrics().rejected_overloaded, 1);
}

TEST_F(EngineLoopTest, CancelFreesTheKv) {
  EngineLoopOptions o;
  o.pause_at_output_tokens = 3;  // the request is certainly running when we cancel it
  EngineLoop loop(NewEngine(), o);
  Submission s = loop.Submit(Spec(4, 200));
  ASSERT_EQ(s.code, SubmitCode::kOk);
  std::vector<TokenEvent> ev;
  ASSERT_TRUE(WaitUntil([&] {
    s.stream->Wait(&ev, 10ms);
    return ev.size() >= 3;
  }));
  EXPECT_TRUE(WaitUntil([&] { return loop.Metrics().kv_blocks_used > 0; }));
  loop.Cancel(s.stream);
  std::vector<TokenEvent> rest = Drain(*s.stream);
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back().finish, FinishReason::kCancelled);
  EXPECT_TRUE(WaitUntil([&] {
    MetricsSnapshot m = loop.Metrics();
    return m.cancelled == 1 && m.kv_blocks_used == 0 && m.running == 0;
  }));
  EXPECT_EQ(loop.pending(), 0);
  loop.Cancel(s.stream);  // a second cancel is a no-op
  loop.Resume();
}

// The handler finds a stop string in text the engine already ran past to max_tokens (it
// finished by length before the cancel arrived): the client gets "stop", and so must the
// metrics (CI once saw stop 1, length 1 for two stopped requests). A stop string found
// while the request still runs, and a plain cancel after a finish, stay as they were.
TEST_F(EngineLoopTest, StopStringFoundAfterTheLengthFinishCountsAsStop) {
  EngineLoop loop(NewEngine(), {});
  Submission s = loop.Submit(Spec(6, 4));
  ASSERT_EQ(s.code, SubmitCode::kOk);
  std::vector<TokenEvent> ev = Drain(*s.stream);
  ASSERT_FALSE(ev.empty());
  ASSERT_EQ(ev.back().finish, FinishReason::kLength);
  ASSERT_TRUE(WaitUntil([&] { return loop.Metrics().finished_length == 1; }));
  loop.Cancel(s.stream, /*stop_string=*/true);
  EXPECT_TRUE(WaitUntil([&] {
    MetricsSnapshot m = loop.Metrics();
    return m.finished_stop == 1 && m.finished_length == 0;
  }));
  loop.Cancel(s.stream);  // a plain cancel of a finished request changes nothing
  Submission t = loop.Submit(Spec(7, 3));
  ASSERT_EQ(t.code, SubmitCode::kOk);
  Drain(*t.stream);
  EXPECT_TRUE(WaitUntil([&] { return loop.Metrics().finished_length == 1; }));
  MetricsSnapshot m = loop.Metrics();
  EXPECT_EQ(m.finished_stop, 1);
  EXPECT_EQ(m.cancelled, 0);
}

TEST_F(EngineLoopTest, DrainFinishesInFlightAndRefusesNew) {
  EngineLoop loop(NewEngine(), {});
  loop.Pause();
  Submission a = loop.Submit(Spec(5, 6));
  ASSERT_EQ(a.code, SubmitCode::kOk);
  loop.BeginDrain();
  EXPECT_EQ(loop.Submit(Spec(6, 6)).code, SubmitCode::kDraining);
  loop.Resume();
  std::vector<TokenEvent> ev = Drain(*a.stream);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back().finish, FinishReason::kLength);
  EXPECT_EQ(Tokens(ev), Alone(Spec(5, 6)));
  loop.WaitIdle();
  loop.Stop();
  EXPECT_EQ(loop.Metrics().rejected_draining, 1);
}

// The SSE writer takes the events queued so far, writes them, then asks whether the
// stream is over. A finish pushed in between must not read as over before the handler has
// taken it: the 1-hour soak found streams that ended without their last tokens and with
// finish_reason "stop" (4 of 1,080 compared with the request run alone).
TEST(RequestStream, IsNotOverWhileEventsBeforeTheFinishAreUnread) {
  RequestStream s(3);
  s.Admit();
  TokenEvent tok;
  tok.token = 7;
  s.Push(tok);
  std::vector<TokenEvent> got;
  ASSERT_TRUE(s.Wait(&got, 0ms));
  ASSERT_EQ(got.size(), 1u);
  TokenEvent last;
  last.token = 8;
  last.finish = FinishReason::kLength;
  s.Push(last);  // the engine finishes between the writer's Wait and its check
  EXPECT_FALSE(s.over());
  EXPECT_EQ(s.finish(), FinishReason::kLength);
  got.clear();
  ASSERT_TRUE(s.Wait(&got, 0ms));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].token, 8);
  EXPECT_TRUE(s.over());
  // A failure with nothing queued is over at once.
  RequestStream f(1);
  f.Admit();
  f.Fail("boom");
  EXPECT_TRUE(f.over());
}

TEST_F(EngineLoopTest, StopFailsWhatIsStillRunning) {
  EngineLoop loop(NewEngine(), {});
  loop.Pause();
  Submission a = loop.Submit(Spec(7, 50));
  ASSERT_TRUE(a.stream->WaitAdmitted().ok());
  loop.Stop();
  EXPECT_TRUE(a.stream->over());
  EXPECT_FALSE(a.stream->error().empty());
  EXPECT_EQ(loop.pending(), 0);
}

}  // namespace
}  // namespace fathom::serve
