// RequestTable: ids in order, records reclaimed from the front only once every earlier id
// was forgotten (what bounds a long-running server's memory by the requests in flight).
#include <gtest/gtest.h>

#include <string>

#include "sched/request_table.h"

namespace fathom {
namespace {

TEST(RequestTable, IdsInOrderAndReclaimedInIdOrder) {
  RequestTable<std::string> t;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(t.Add("r" + std::to_string(i)), i);
  EXPECT_EQ(t.held(), 5);
  EXPECT_EQ(t[3], "r3");
  t.Forget(1);
  t.Forget(3);
  EXPECT_EQ(t.held(), 5);  // id 0 is still held, so nothing after it is reclaimed
  EXPECT_TRUE(t.Holds(1));
  t.Forget(0);
  EXPECT_EQ(t.first_id(), 2);  // 0 and 1 reclaimed; 2 is not forgotten
  EXPECT_EQ(t.held(), 3);
  EXPECT_FALSE(t.Holds(1));
  EXPECT_EQ(t[2], "r2");
  t.Forget(2);
  EXPECT_EQ(t.first_id(), 4);  // 3 was already forgotten
  EXPECT_EQ(t.Add("r5"), 5);   // ids are never reused
  EXPECT_EQ(t.next_id(), 6);
  EXPECT_EQ(t[5], "r5");
}

}  // namespace
}  // namespace fathom
