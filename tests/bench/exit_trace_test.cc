// Recorded exit traces: the formats `fathom generate` writes, the errors, and the slicing
// that hands the depths to the benchmark's requests.
#include "bench/exit_trace.h"

#include <fstream>

#include <gtest/gtest.h>

#include "model/test_util.h"

namespace fathom::bench {
namespace {

using fathom::testing::TempDir;

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(ExitTrace, ReadsBothGenerateFormatsAndDropsThePrefillToken) {
  TempDir dir;
  // One `generate --json` line, a blank line, one `generate --requests F --json` line.
  Write(dir / "t.jsonl",
        "{\"output_ids\": [5, 6, 7], \"exit_depths\": [4, 2, 3], \"finish_reason\": \"length\"}\n"
        "\n"
        "{\"requests\": [{\"id\": \"a\", \"exit_depths\": [4, 3]}, {\"id\": \"b\", \"exit_depths\": [4]}],"
        " \"summary\": {}}\n");
  auto t = LoadExitTrace(dir / "t.jsonl", 2, 4);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->depths, (std::vector<int32_t>{2, 3, 3}));
  EXPECT_EQ(t->records, 3);
  EXPECT_DOUBLE_EQ(t->mean(), 8.0 / 3);
  // Without the lookahead gate (the engine's default) the minimum depth is 1.
  Write(dir / "one.jsonl", "{\"exit_depths\": [4, 1, 2]}\n");
  auto one = LoadExitTrace(dir / "one.jsonl", 1, 4);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->depths, (std::vector<int32_t>{1, 2}));
}

TEST(ExitTrace, ErrorsNameTheFileLineAndField) {
  TempDir dir;
  const auto error = [&](const std::string& text, int32_t min_depth = 2, int32_t r_max = 4) {
    Write(dir / "bad.jsonl", text);
    auto t = LoadExitTrace(dir / "bad.jsonl", min_depth, r_max);
    EXPECT_FALSE(t.ok()) << text;
    return t.ok() ? std::string() : t.status().message();
  };
  EXPECT_NE(error("{\"exit_depths\": [4, 2]}\n{oops\n").find("bad.jsonl line 2: malformed JSON"), std::string::npos);
  EXPECT_NE(error("{\"output_ids\": [1]}\n").find("line 1: no \"exit_depths\""), std::string::npos);
  EXPECT_NE(error("{\"exit_depths\": [4, 2, 5]}\n").find("exit_depths[2] = 5 is outside [2, 4]"), std::string::npos);
  // Depth 1 is what the engine gives without the lookahead gate; replaying under the gate
  // (minimum 2) cannot reproduce it, and the message says how to record a usable trace.
  const std::string below = error("{\"exit_depths\": [4, 1]}\n");
  EXPECT_NE(below.find("exit_depths[1] = 1 is outside [2, 4]"), std::string::npos) << below;
  EXPECT_NE(below.find("record the trace with --lookahead"), std::string::npos) << below;
  EXPECT_NE(error("{\"exit_depths\": [4, 0]}\n", 1).find("exit_depths[1] = 0 is outside [1, 4]"), std::string::npos);
  EXPECT_EQ(error("{\"exit_depths\": [4, 0]}\n", 1).find("lookahead"), std::string::npos);
  EXPECT_NE(error("{\"exit_depths\": [4, \"x\"]}\n").find("exit_depths[1] is not an integer"), std::string::npos);
  EXPECT_NE(error("{\"requests\": [{\"exit_depths\": [4, 2]}, {}]}\n").find("line 1 requests[1]: no"),
            std::string::npos);
  EXPECT_NE(error("{\"exit_depths\": [4]}\n").find("no decode-token exit depths"), std::string::npos);
  EXPECT_NE(error("").find("no decode-token exit depths"), std::string::npos);
  auto missing = LoadExitTrace(dir / "missing.jsonl", 2, 4);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.jsonl: cannot open"), std::string::npos);
}

TEST(ExitTrace, RequestsReplayConsecutiveSlicesWrappingAround) {
  RecordedExitTrace t;
  t.depths = {2, 3, 4, 2, 3};
  // Outputs 3, 1, 4: 2, 1 (at least one) and 3 decode-token depths.
  const auto s = SliceExitTrace(t, {3, 1, 4});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0], (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(s[1], (std::vector<int32_t>{4}));
  EXPECT_EQ(s[2], (std::vector<int32_t>{2, 3, 2}));  // wraps to the start
}

}  // namespace
}  // namespace fathom::bench
