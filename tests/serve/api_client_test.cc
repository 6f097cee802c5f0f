// The completions client: a stream's chunks read at odd byte boundaries (first-token time,
// finish reason, usage, [DONE], errors), whole responses, and PostCompletion /
// ScrapeMetrics against a local stub server whose failures must come back named.
#include "serve/api_client.h"

#include <gtest/gtest.h>

#include <thread>

#include "serve/httplib_include.h"

namespace fathom::serve {
namespace {

const std::string kChunks =
    "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":null}]}\n\n"
    ": keep-alive\n\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"Hel\",\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"lo\",\"finish_reason\":\"length\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\n"
    "data: [DONE]\n\n";

TEST(CompletionStream, ReadsChunksSplitAnywhere) {
  const size_t first_text = kChunks.find("Hel");
  for (size_t cut = 1; cut < kChunks.size(); ++cut) {
    CompletionOutcome out;
    CompletionStream s(&out);
    s.Feed(std::string_view(kChunks).substr(0, cut), 1.0);
    s.Feed(std::string_view(kChunks).substr(cut), 2.0);
    ASSERT_TRUE(out.error.empty()) << cut << ": " << out.error;
    EXPECT_TRUE(s.done()) << cut;
    // The first non-empty text arrived with the first piece only when that piece held the
    // whole event (up to its blank line).
    const size_t event_end = kChunks.find("\n\n", first_text) + 2;
    EXPECT_EQ(out.first_token, cut >= event_end ? 1.0 : 2.0) << cut;
    EXPECT_EQ(out.finish_reason, "length");
    EXPECT_EQ(out.prompt_tokens, 5);
    EXPECT_EQ(out.completion_tokens, 2);
  }
}

TEST(CompletionStream, ErrorsAreNamedAndStopTheStream) {
  CompletionOutcome out;
  CompletionStream s(&out);
  s.Feed("data: {\"error\":{\"message\":\"engine failed\"}}\n\ndata: [DONE]\n\n", 0);
  EXPECT_EQ(out.error, "stream error: {\"message\":\"engine failed\"}");
  EXPECT_FALSE(s.done());  // nothing after the error is applied
  CompletionOutcome bad;
  CompletionStream t(&bad);
  t.Feed("data: {not json\n\n", 0);
  EXPECT_EQ(bad.error, "unparsable SSE data: {not json");
  // After [DONE], nothing more is read.
  CompletionOutcome after;
  CompletionStream u(&after);
  u.Feed("data: [DONE]\n\ndata: {\"choices\":[{\"text\":\"x\",\"finish_reason\":\"stop\"}]}\n\n", 0);
  EXPECT_TRUE(u.done());
  EXPECT_EQ(after.finish_reason, "");
  EXPECT_EQ(after.first_token, -1);
}

TEST(CompletionResponse, WholeBodies) {
  CompletionOutcome ok;
  ReadCompletionResponse(
      R"({"choices":[{"text":"hi","finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":4}})", &ok);
  EXPECT_TRUE(ok.ok);
  EXPECT_EQ(ok.finish_reason, "length");
  EXPECT_EQ(ok.prompt_tokens, 3);
  EXPECT_EQ(ok.completion_tokens, 4);
  for (const char* body : {"", "[]", R"({"choices":[]})", R"({"usage":{},"choices":[]})", R"({"usage":{},"choices":[1]})"}) {
    CompletionOutcome bad;
    ReadCompletionResponse(body, &bad);
    EXPECT_FALSE(bad.ok) << body;
    EXPECT_EQ(bad.error, std::string("malformed response: ") + body);
  }
}

// A stub server on 127.0.0.1: /v1/completions answers with `status` and `body`, streamed
// in pieces of `piece` bytes when `stream`; /metrics answers `metrics`.
class StubServer {
 public:
  StubServer(int status, std::string body, bool stream, std::string metrics = "")
      : status_(status), body_(std::move(body)), metrics_(std::move(metrics)) {
    server_.Post("/v1/completions", [this, stream](const httplib::Request&, httplib::Response& res) {
      res.status = status_;
      if (!stream) return res.set_content(body_, "application/json");
      res.set_chunked_content_provider("text/event-stream", [this](size_t, httplib::DataSink& sink) {
        for (size_t i = 0; i < body_.size(); i += 7) sink.write(body_.data() + i, std::min<size_t>(7, body_.size() - i));
        sink.done();
        return true;
      });
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_, "text/plain; version=0.0.4");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");  // listening already: connections queue until accept
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the loop runs would be lost (and the join below would hang).
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~StubServer() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }

 private:
  int status_;
  std::string body_, metrics_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

CompletionOutcome Post(int port, bool stream) {
  const auto t0 = ClientClock::now();
  return PostCompletion("127.0.0.1", port, R"({"prompt":[1],"max_tokens":2})", stream, t0,
                        t0 + std::chrono::seconds(30));
}

TEST(PostCompletion, StreamedAndWholeAgainstAStub) {
  {
    StubServer stub(200, kChunks, true);
    const CompletionOutcome r = Post(stub.port(), true);
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.completion_tokens, 2);
    EXPECT_GE(r.first_token, r.send);
    EXPECT_GE(r.finish, r.first_token);
  }
  {
    StubServer stub(200, R"({"choices":[{"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":2}})",
                    false);
    const CompletionOutcome r = Post(stub.port(), false);
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.completion_tokens, 2);
  }
}

TEST(PostCompletion, FailuresAreNamed) {
  {
    StubServer stub(200, kChunks.substr(0, kChunks.find("data: [DONE]")), true);
    EXPECT_EQ(Post(stub.port(), true).error, "the stream ended without [DONE]");
  }
  {
    StubServer stub(429, R"({"error":{"message":"too many"}})", false);
    EXPECT_EQ(Post(stub.port(), false).error, R"(HTTP 429: {"error":{"message":"too many"}})");
  }
  {
    StubServer stub(200, "data: {\"error\":{\"message\":\"boom\"}}\n\n", true);
    EXPECT_EQ(Post(stub.port(), true).error, "stream error: {\"message\":\"boom\"}");
  }
  int closed_port = 0;
  { closed_port = StubServer(200, "", false).port(); }
  const CompletionOutcome r = Post(closed_port, false);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error.rfind("transport: ", 0), 0u) << r.error;
}

TEST(ScrapeMetrics, ParsesOrNamesTheProblem) {
  {
    StubServer stub(200, "", false, "# TYPE x counter\nx{a=\"1\"} 4\n");
    auto m = ScrapeMetrics("127.0.0.1", stub.port());
    ASSERT_TRUE(m.ok()) << m.status().message();
    EXPECT_EQ(m->Find("x{a=\"1\"}"), 4.0);
  }
  StubServer stub(200, "", false, "x 1\nx{a=\"1} 4\n");
  auto m = ScrapeMetrics("127.0.0.1", stub.port());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message().rfind("GET /metrics: line 2, column", 0), 0u) << m.status().message();
}

}  // namespace
}  // namespace fathom::serve
