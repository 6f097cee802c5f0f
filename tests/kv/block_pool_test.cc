// BlockPool: sizing, alignment, all-or-nothing allocation, double-free detection.
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

namespace fathom {
namespace {

TEST(BlockPool, SizesAndBudget) {
  // 16 rows x 128 floats x 4 bytes x (K + V) = 16 KiB, no padding needed.
  EXPECT_EQ(BlockPool::BytesPerBlock(16, 128), 16u * 128u * 4u * 2u);
  EXPECT_EQ(BlockPool::BlocksForBudget(1 << 20, 16, 128), 64);
  EXPECT_EQ(BlockPool::BlocksForBudget((1 << 20) - 1, 16, 128), 63);
  EXPECT_EQ(BlockPool::BlocksForBudget(0, 16, 128), 0);
  // 3 rows x 5 floats = 15 floats: each half padded to 16 floats (64 bytes).
  EXPECT_EQ(BlockPool::BytesPerBlock(3, 5), 2u * 64u);
}

TEST(BlockPool, AddressesAreAlignedAndDisjoint) {
  BlockPool pool(5, 3, 5);
  EXPECT_EQ(pool.block_stride_floats(), 32);
  EXPECT_EQ(pool.bytes_per_block(), 128u);
  for (int32_t b = 0; b < 5; ++b) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pool.k(b)) % 64, 0u) << b;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pool.v(b)) % 64, 0u) << b;
    EXPECT_EQ(pool.k(b), pool.k_base() + b * pool.block_stride_floats());
    EXPECT_EQ(pool.v(b), pool.v_base() + b * pool.block_stride_floats());
    EXPECT_GE(pool.v(b), pool.k(b) + 3 * 5);  // V starts after K's 3 rows
  }
  // Fill every row of every block through its own pointer; nothing overlaps.
  for (int32_t b = 0; b < 5; ++b) {
    std::fill_n(pool.k(b), 15, static_cast<float>(b));
    std::fill_n(pool.v(b), 15, static_cast<float>(-b));
  }
  for (int32_t b = 0; b < 5; ++b) {
    const float want = static_cast<float>(b);
    EXPECT_TRUE(std::all_of(pool.k(b), pool.k(b) + 15, [&](float x) { return x == want; }));
    EXPECT_TRUE(std::all_of(pool.v(b), pool.v(b) + 15, [&](float x) { return x == -want; }));
  }
}

TEST(BlockPool, AllocationIsAllOrNothing) {
  BlockPool pool(10, 16, 8);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.Allocate(7, &a));
  EXPECT_EQ(a.size(), 7u);
  EXPECT_EQ(pool.num_used(), 7);
  EXPECT_EQ(pool.num_free(), 3);

  std::vector<int32_t> b = {42};  // Allocate appends; a failure leaves *out alone
  EXPECT_FALSE(pool.Allocate(4, &b));
  EXPECT_EQ(b, std::vector<int32_t>{42});
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(pool.num_used(), 7);

  ASSERT_TRUE(pool.Allocate(3, &b));
  EXPECT_EQ(b.size(), 4u);
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_FALSE(pool.Allocate(1, &b));
  EXPECT_TRUE(pool.Allocate(0, &b));

  std::set<int32_t> ids(a.begin(), a.end());
  ids.insert(b.begin() + 1, b.end());
  EXPECT_EQ(ids.size(), 10u);
  EXPECT_EQ(*ids.begin(), 0);
  EXPECT_EQ(*ids.rbegin(), 9);

  pool.Free(a);
  EXPECT_EQ(pool.num_free(), 7);
  for (int32_t id : a) EXPECT_FALSE(pool.is_used(id));
  EXPECT_TRUE(pool.is_used(b[1]));
}

TEST(BlockPool, EmptyPool) {
  BlockPool pool(0, 16, 8);
  std::vector<int32_t> out;
  EXPECT_FALSE(pool.Allocate(1, &out));
  EXPECT_TRUE(pool.Allocate(0, &out));
  EXPECT_EQ(pool.num_blocks(), 0);
}

TEST(BlockPoolDeathTest, DoubleFreeAndForeignIdsCheckFail) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  BlockPool pool(4, 16, 8);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.Allocate(2, &a));
  pool.Free(std::vector<int32_t>{a[0]});
  EXPECT_DEATH(pool.Free(std::vector<int32_t>{a[0]}), "double free of block");
  EXPECT_DEATH(pool.Free(std::vector<int32_t>{a[1], a[1]}), "double free of block");
  EXPECT_DEATH(pool.Free(std::vector<int32_t>{4}), "foreign block id 4");
  EXPECT_DEATH(pool.Free(std::vector<int32_t>{-1}), "foreign block id -1");
}

}  // namespace
}  // namespace fathom
