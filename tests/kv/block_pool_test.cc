// BlockPool: sizing (f32, bf16 and int8), alignment, all-or-nothing allocation, double-free
// detection, bf16 rows rounded to nearest even, int8 rows quantized per head with their scales.
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

namespace fathom {
namespace {

TEST(BlockPool, SizesAndBudget) {
  // 16 rows x 128 floats x 4 bytes x (K + V) = 16 KiB, no padding needed.
  constexpr DType f32 = DType::kF32, bf16 = DType::kBF16;
  EXPECT_EQ(BlockPool::BytesPerBlock(16, 128, f32), 16u * 128u * 4u * 2u);
  EXPECT_EQ(BlockPool::BlocksForBudget(1 << 20, 16, 128, f32), 64);
  EXPECT_EQ(BlockPool::BlocksForBudget((1 << 20) - 1, 16, 128, f32), 63);
  EXPECT_EQ(BlockPool::BlocksForBudget(0, 16, 128, f32), 0);
  // 3 rows x 5 floats = 15 floats: each half padded to 16 floats (64 bytes).
  EXPECT_EQ(BlockPool::BytesPerBlock(3, 5, f32), 2u * 64u);
  // bf16: half the bytes, so a budget holds twice the blocks.
  EXPECT_EQ(BlockPool::BytesPerBlock(16, 128, bf16), 16u * 128u * 2u * 2u);
  EXPECT_EQ(BlockPool::BlocksForBudget(1 << 20, 16, 128, bf16), 128);
  // 3 x 5 = 15 bf16 values (30 bytes): each half padded to 32 values (64 bytes), and
  // 3 x 30 = 90 values to 96.
  EXPECT_EQ(BlockPool::BytesPerBlock(3, 5, bf16), 2u * 64u);
  EXPECT_EQ(BlockPool::BytesPerBlock(3, 30, bf16), 2u * 192u);
  EXPECT_EQ(BlockPool(7, 16, 128, bf16).bytes_total(), 7u * 16u * 128u * 2u * 2u);
}

TEST(BlockPool, Bf16RowsRoundToNearestEvenAndCopyExactly) {
  constexpr int32_t kRows = 3, kDim = 40;
  BlockPool pool(4, kRows, kDim, DType::kBF16);
  EXPECT_EQ(pool.dtype(), DType::kBF16);
  EXPECT_EQ(pool.block_stride(), 2 * 128);  // 120 values per half, padded to 128
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pool.v_data()) % 64, 0u);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.f, 3.f);
  std::vector<float> src(kDim), got(kDim), other(kDim);
  for (float& x : src) x = dist(rng);
  // Exact halfway cases: 1 + 2^-8 lies between bf16 1 and 1 + 2^-7 and rounds to the even 1;
  // 1 + 3 * 2^-8 lies between 1 + 2^-7 and 1 + 2^-6 and rounds to the even 1 + 2^-6.
  src[0] = 1.f + 0x1p-8f;
  src[1] = 1.f + 3 * 0x1p-8f;
  src[2] = -(1.f + 0x1p-8f);
  pool.WriteRow(2, 1, false, src.data());
  for (float& x : other) x = dist(rng);
  pool.WriteRow(2, 1, true, other.data());
  pool.ReadRow(2, 1, false, got.data());
  EXPECT_EQ(got[0], 1.f);
  EXPECT_EQ(got[1], 1.f + 0x1p-6f);
  EXPECT_EQ(got[2], -1.f);
  for (int32_t d = 0; d < kDim; ++d) {
    EXPECT_EQ(got[d], BF16ToF32(F32ToBF16(src[d]))) << d;
    // Round to nearest: within half a bf16 ulp, |x| 2^-8 at most.
    EXPECT_LE(std::abs(got[d] - src[d]), std::abs(src[d]) * 0x1p-8f) << d;
  }
  pool.CopyRow(2, 1, 0, 2);
  std::vector<float> k(kDim), v(kDim);
  pool.ReadRow(0, 2, false, k.data());
  pool.ReadRow(0, 2, true, v.data());
  EXPECT_EQ(k, got);
  pool.ReadRow(2, 1, true, got.data());
  EXPECT_EQ(v, got);
  pool.WriteRow(0, 2, true, nullptr);  // zeros
  pool.ReadRow(0, 2, true, v.data());
  EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.f && !std::signbit(x); }));
  // The bytes are bf16: two per value, the top half of the f32 rounded.
  const auto* raw = static_cast<const uint16_t*>(pool.k_data()) + 2 * pool.block_stride() + kDim;
  EXPECT_EQ(raw[1], F32ToBF16(src[1]));
}

// int8: [row_floats int8][heads f32 scales] per row; each head's values rounded to the
// nearest multiple of its max |x| / 127 (checked here by hand, element by element).
TEST(BlockPool, Int8RowsQuantizePerHeadWithTheirScales) {
  constexpr int32_t kRows = 3;
  constexpr int64_t kHeads = 2, kHd = 24, kDim = kHeads * kHd;
  // Sizes: 3 rows x (48 + 8) bytes = 168 per half, padded to 192.
  EXPECT_EQ(BlockPool::RowElems(kDim, DType::kI8, kHeads), kDim + 4 * kHeads);
  EXPECT_EQ(BlockPool::BytesPerBlock(kRows, kDim, DType::kI8, kHeads), 2u * 192u);
  EXPECT_EQ(BlockPool::BytesPerBlock(16, 128, DType::kI8, 2), 2u * 16u * (128u + 8u));
  EXPECT_EQ(BlockPool::BlocksForBudget(1 << 20, 16, 128, DType::kI8, 2),
            (1 << 20) / (2 * 16 * 136));
  BlockPool pool(4, kRows, kDim, DType::kI8, kHeads);
  EXPECT_EQ(pool.row_stride(), kDim + 4 * kHeads);
  EXPECT_EQ(pool.block_stride(), 2 * 192);
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.f, 3.f);
  std::vector<float> src(kDim), got(kDim);
  for (float& x : src) x = dist(rng);
  src[5] = 40.f;     // head 0's max: its step 40/127
  src[kHd] = -0.5f;  // head 1 stays small: its own, finer step
  for (int64_t d = kHd + 1; d < kDim; ++d) src[static_cast<size_t>(d)] *= 0.1f;
  pool.WriteRow(1, 2, false, src.data());
  pool.ReadRow(1, 2, false, got.data());
  const auto* raw =
      static_cast<const int8_t*>(pool.k_data()) + pool.block_stride() + 2 * pool.row_stride();
  for (int64_t h = 0; h < kHeads; ++h) {
    float amax = 0;
    for (int64_t d = 0; d < kHd; ++d)
      amax = std::max(amax, std::abs(src[static_cast<size_t>(h * kHd + d)]));
    float scale;
    std::memcpy(&scale, raw + kDim + 4 * h, sizeof scale);
    EXPECT_EQ(scale, amax / 127.f) << h;
    for (int64_t d = 0; d < kHd; ++d) {
      const auto i = static_cast<size_t>(h * kHd + d);
      EXPECT_EQ(raw[i], static_cast<int8_t>(std::nearbyint(src[i] / scale))) << i;
      EXPECT_EQ(got[i], static_cast<float>(raw[i]) * scale) << i;
      EXPECT_LE(std::abs(got[i] - src[i]), amax / 254.f * 1.0001f) << i;
    }
  }
  EXPECT_EQ(raw[5], 127);
  // Copies are bit for bit (values and scales); zeros read back as +0.
  std::vector<float> other(kDim), k(kDim), v(kDim);
  for (float& x : other) x = dist(rng);
  pool.WriteRow(1, 2, true, other.data());
  pool.CopyRow(1, 2, 3, 0);
  pool.ReadRow(3, 0, false, k.data());
  pool.ReadRow(3, 0, true, v.data());
  EXPECT_EQ(k, got);
  pool.ReadRow(1, 2, true, got.data());
  EXPECT_EQ(v, got);
  pool.WriteRow(3, 0, true, nullptr);
  pool.ReadRow(3, 0, true, v.data());
  EXPECT_TRUE(
      std::all_of(v.begin(), v.end(), [](float x) { return x == 0.f && !std::signbit(x); }));
  // A row of zeros quantizes to zeros (scale 0, no division by it); a NaN reads back as NaN
  // in its head only.
  std::vector<float> zeros(kDim, 0.f);
  pool.WriteRow(0, 0, false, zeros.data());
  pool.ReadRow(0, 0, false, k.data());
  EXPECT_TRUE(std::all_of(k.begin(), k.end(), [](float x) { return x == 0.f; }));
  src[3] = std::nanf("");
  pool.WriteRow(0, 1, false, src.data());
  pool.ReadRow(0, 1, false, k.data());
  EXPECT_TRUE(std::all_of(k.begin(), k.begin() + kHd, [](float x) { return std::isnan(x); }));
  EXPECT_TRUE(std::none_of(k.begin() + kHd, k.end(), [](float x) { return std::isnan(x); }));
}

TEST(BlockPoolDeathTest, Int8RowsMustSplitIntoWholeHeads) {
  EXPECT_DEATH(BlockPool(2, 16, 10, DType::kI8, 3), "not a multiple of heads");
}

TEST(BlockPoolDeathTest, FloatAccessToABf16PoolFails) {
  BlockPool pool(2, 16, 8, DType::kBF16);
  EXPECT_DEATH(pool.k_base(), "float access to a BF16 KV pool");
  EXPECT_DEATH(BlockPool(1, 16, 8, DType::kF16), "KV dtype F16");
}

TEST(BlockPool, AddressesAreAlignedAndDisjoint) {
  BlockPool pool(5, 3, 5);
  EXPECT_EQ(pool.block_stride(), 32);
  EXPECT_EQ(pool.bytes_per_block(), 128u);
  for (int32_t b = 0; b < 5; ++b) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pool.k(b)) % 64, 0u) << b;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pool.v(b)) % 64, 0u) << b;
    EXPECT_EQ(pool.k(b), pool.k_base() + b * pool.block_stride());
    EXPECT_EQ(pool.v(b), pool.v_base() + b * pool.block_stride());
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
