// The SSE reader gives the same events however the bytes are split: whole, byte by byte,
// and at every pair of cut points (mid-field, mid-"\r\n", mid-UTF-8).
#include "serve/sse_reader.h"

#include <gtest/gtest.h>

namespace fathom::serve {
namespace {

// "\xc3\xa9" is é: a cut between its two bytes must not change the data.
const std::string kStream =
    ": keep-alive\n"
    "data: {\"text\": \"caf\xc3\xa9\"}\n"
    "\n"
    "event: update\r\n"
    "id: 7\r\n"
    "data:no space\r\n"
    "data:  two spaces, one kept\r\n"
    "\r\n"
    "retry: 100\n"
    "event: no data, not dispatched\n"
    "\n"
    "data\rdata: after a lone CR\r\r"
    ":comment\n"
    "data: [DONE]\n\n"
    "data: never ended";

std::vector<SseMessage> Expected() {
  return {{"", "{\"text\": \"caf\xc3\xa9\"}", ""},
          {"update", "no space\n two spaces, one kept", "7"},
          {"", "\nafter a lone CR", ""},
          {"", "[DONE]", ""}};
}

void ExpectEvents(const std::vector<SseMessage>& got, const std::string& how) {
  const std::vector<SseMessage> want = Expected();
  ASSERT_EQ(got.size(), want.size()) << how;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].event, want[i].event) << how << ", event " << i;
    EXPECT_EQ(got[i].data, want[i].data) << how << ", event " << i;
    EXPECT_EQ(got[i].id, want[i].id) << how << ", event " << i;
  }
}

TEST(SseReader, WholeStream) {
  SseReader r;
  std::vector<SseMessage> got;
  r.Feed(kStream, &got);
  ExpectEvents(got, "whole");
  EXPECT_EQ(r.comments(), 2);
  EXPECT_TRUE(r.pending());  // "data: never ended" has no blank line
}

TEST(SseReader, ByteByByte) {
  SseReader r;
  std::vector<SseMessage> got;
  for (char c : kStream) r.Feed(std::string_view(&c, 1), &got);
  ExpectEvents(got, "byte by byte");
}

TEST(SseReader, EverySplitIntoThreeChunks) {
  const std::string_view s(kStream);
  for (size_t a = 0; a <= s.size(); ++a)
    for (size_t b = a; b <= s.size(); ++b) {
      SseReader r;
      std::vector<SseMessage> got;
      r.Feed(s.substr(0, a), &got);
      r.Feed(s.substr(a, b - a), &got);
      r.Feed(s.substr(b), &got);
      ExpectEvents(got, "cut at " + std::to_string(a) + " and " + std::to_string(b));
      if (::testing::Test::HasFailure()) return;
    }
}

TEST(SseReader, NothingPendingAfterADispatch) {
  SseReader r;
  std::vector<SseMessage> got;
  r.Feed("data: x\n", &got);
  EXPECT_TRUE(r.pending());
  EXPECT_TRUE(got.empty());
  r.Feed("\n", &got);
  EXPECT_FALSE(r.pending());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].data, "x");
}

}  // namespace
}  // namespace fathom::serve
