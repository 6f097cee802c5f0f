#include "serve/stop_matcher.h"

#include <gtest/gtest.h>

namespace fathom::serve {
namespace {

// Feeds pieces and returns everything emitted.
std::string Feed(StopMatcher& m, const std::vector<std::string>& pieces, std::vector<std::string>* emitted = nullptr) {
  std::string out;
  for (const std::string& p : pieces) {
    std::string e = m.Push(p);
    if (emitted) emitted->push_back(e);
    out += e;
  }
  return out + m.Finish();
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  std::vector<std::string> emitted;
  EXPECT_EQ(Feed(m, {"ab", "c"}, &emitted), "abc");
  EXPECT_EQ(emitted, (std::vector<std::string>{"ab", "c"}));
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, CutsBeforeAStopStringSplitAcrossPieces) {
  StopMatcher m({"END"});
  std::vector<std::string> emitted;
  EXPECT_EQ(Feed(m, {"hello E", "N", "D more", "x"}, &emitted), "hello ");
  EXPECT_TRUE(m.stopped());
  // "E" and "N" were held back until they could no longer start a stop string.
  EXPECT_EQ(emitted[0], "hello ");
  EXPECT_EQ(emitted[1], "");
  EXPECT_EQ(emitted[2], "");
  EXPECT_EQ(emitted[3], "");
}

TEST(StopMatcher, ReleasesAHeldTailThatDidNotMatch) {
  StopMatcher m({"END"});
  std::vector<std::string> emitted;
  EXPECT_EQ(Feed(m, {"aE", "Nb", "EN"}, &emitted), "aENbEN");  // the last "EN" is flushed by Finish
  EXPECT_EQ(emitted[0], "a");
  EXPECT_EQ(emitted[1], "ENb");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"xyz", "b"});
  EXPECT_EQ(Feed(m, {"axyzb"}), "a");
  StopMatcher empty({""});  // an empty stop string never matches
  EXPECT_EQ(Feed(empty, {"abc"}), "abc");
}

}  // namespace
}  // namespace fathom::serve
