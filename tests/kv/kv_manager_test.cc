// KvManager: addressing through K()/V() and through block tables + pool arithmetic,
// per-layout allocation (hybrid's phase-split slots), exact byte accounting, and a seeded
// Grow/Release fuzz test checking the pool invariants after every operation.
#include "kv/kv_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <utility>
#include <vector>

namespace fathom {
namespace {

constexpr TokenPhase kP = TokenPhase::kPrompt;
constexpr TokenPhase kD = TokenPhase::kDecode;

KvModelShape Huginn() {
  KvModelShape s;
  s.n_prelude = 2;
  s.n_core = 4;
  s.n_coda = 2;
  s.max_depth = 8;
  return s;
}

KvLayerTable MustBuild(const KvModelShape& shape, KvLayout layout, int32_t shared_after = 1) {
  Result<KvLayerTable> t = KvLayerTable::Build(shape, layout, shared_after);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

// A value that tells (sequence, layer, position, element) apart: a 24-bit hash, so it is
// exact in f32 and rarely shared.
float Tag(int32_t s, int32_t p, int64_t pos, int64_t e) {
  uint64_t h = static_cast<uint64_t>(s) * 0x9E3779B97F4A7C15ull;
  h = (h ^ static_cast<uint64_t>(p)) * 0xBF58476D1CE4E5B9ull;
  h = (h ^ static_cast<uint64_t>(pos)) * 0x94D049BB133111EBull;
  h = (h ^ static_cast<uint64_t>(e)) * 0x9E3779B97F4A7C15ull;
  return static_cast<float>(h >> 40) + 1.f;
}

// Row `pos` of layer p found the way a kernel does: block table + pool base + stride.
const float* KernelK(const KvManager& m, KvManager::SeqId s, int32_t p, int64_t pos) {
  const int32_t block = m.BlockTable(s, p)[pos / m.block_size()];
  EXPECT_GE(block, 0);
  return m.pool().k_base() + block * m.pool().block_stride() +
         (pos % m.block_size()) * m.row_floats();
}
const float* KernelV(const KvManager& m, KvManager::SeqId s, int32_t p, int64_t pos) {
  const int32_t block = m.BlockTable(s, p)[pos / m.block_size()];
  return m.pool().v_base() + block * m.pool().block_stride() +
         (pos % m.block_size()) * m.row_floats();
}

bool Stores(const KvManager& m, KvManager::SeqId s, int32_t p, int64_t pos) {
  return m.table().StoresPhase(p, pos < m.prompt_len(s) ? kP : kD);
}

void WriteRows(KvManager& m, KvManager::SeqId s, int64_t from, int64_t to) {
  for (int32_t p = 0; p < m.table().num_physical_layers(); ++p) {
    for (int64_t pos = from; pos < to; ++pos) {
      if (!Stores(m, s, p, pos)) continue;
      for (int64_t e = 0; e < m.row_floats(); ++e) {
        m.K(s, p, pos)[e] = Tag(s, p, pos, e);
        m.V(s, p, pos)[e] = -Tag(s, p, pos, e);
      }
    }
  }
}

// Every stored row of s reads back its tag, through K()/V() and through the block table.
::testing::AssertionResult RowsIntact(const KvManager& m, KvManager::SeqId s) {
  for (int32_t p = 0; p < m.table().num_physical_layers(); ++p) {
    for (int64_t pos = 0; pos < m.length(s); ++pos) {
      if (!Stores(m, s, p, pos)) continue;
      for (int64_t e = 0; e < m.row_floats(); ++e) {
        const float want = Tag(s, p, pos, e);
        if (m.K(s, p, pos)[e] != want || KernelK(m, s, p, pos)[e] != want ||
            m.V(s, p, pos)[e] != -want || KernelV(m, s, p, pos)[e] != -want) {
          return ::testing::AssertionFailure()
                 << "seq " << s << " layer " << p << " pos " << pos << " elem " << e;
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(KvManager, AddressingRoundTripsEveryLayout) {
  for (KvLayout l : {KvLayout::kDepthIndexed, KvLayout::kShared, KvLayout::kFirstThenShared,
                     KvLayout::kHybrid}) {
    SCOPED_TRACE(KvLayoutName(l));
    KvManager m(MustBuild(Huginn(), l, 3), 2000, 4, 6);
    std::vector<KvManager::SeqId> seqs;
    for (int64_t prompt : {5, 8, 0}) seqs.push_back(m.AddSequence(prompt));
    // Interleave growth (prefill chunks, then decode) so blocks of sequences mix.
    for (int64_t len : {3, 8, 9, 10, 17}) {
      for (KvManager::SeqId s : seqs) {
        const int64_t old = m.length(s);
        ASSERT_TRUE(m.Grow(s, len));
        EXPECT_EQ(m.length(s), len);
        WriteRows(m, s, old, len);
      }
    }
    for (KvManager::SeqId s : seqs) EXPECT_TRUE(RowsIntact(m, s));
    EXPECT_EQ(m.num_table_blocks(seqs[0]), 5);
  }
}

TEST(KvManager, HybridAllocatesNoDepthBlocksForDecode) {
  const KvLayerTable t = MustBuild(Huginn(), KvLayout::kHybrid);
  KvManager m(t, 1000, 16, 8);
  const auto s = m.AddSequence(32);
  ASSERT_TRUE(m.Grow(s, 32));  // prefill: 2 blocks everywhere except the shared slots
  EXPECT_EQ(m.pool().num_used(), (2 + 32 + 2) * 2);
  ASSERT_TRUE(m.Grow(s, 80));  // 48 decode positions: 3 more blocks, not in depth slots
  EXPECT_EQ(m.num_table_blocks(s), 5);
  for (int32_t p = 0; p < t.num_physical_layers(); ++p) {
    const int32_t* bt = m.BlockTable(s, p);
    const bool prompt = t.StoresPhase(p, kP), decode = t.StoresPhase(p, kD);
    for (int b = 0; b < 5; ++b) {
      const bool want = b < 2 ? prompt : decode;
      EXPECT_EQ(bt[b] >= 0, want) << "layer " << p << " block " << b;
    }
  }
  EXPECT_EQ(m.pool().num_used(), (2 + 2) * 5 + 32 * 2 + 4 * 3);
  // Block-aligned lengths: the account is exactly tokens x bytes per token.
  EXPECT_EQ(m.bytes_used(), 32 * m.BytesPerToken(kP) + 48 * m.BytesPerToken(kD));
  EXPECT_EQ(m.bytes_used() + m.bytes_free(), m.bytes_total());
  EXPECT_EQ(m.bytes_total(), 1000u * 16u * 8u * 4u * 2u);
}

TEST(KvManager, HybridPromptStraddlingABlock) {
  const KvLayerTable t = MustBuild(Huginn(), KvLayout::kHybrid);
  KvManager m(t, 1000, 16, 8);
  const auto s = m.AddSequence(20);  // prompt ends inside block 1
  EXPECT_EQ(m.BlocksNeeded(s, 20), (2 + 32 + 2) * 2);
  ASSERT_TRUE(m.Grow(s, 20));
  // The first decode token needs block 1 of each shared slot (its rows 4..15).
  EXPECT_EQ(m.BlocksNeeded(s, 21), 4);
  EXPECT_EQ(m.BlocksFor(20, 21), (2 + 32 + 2) * 2 + 4);
  ASSERT_TRUE(m.Grow(s, 21));
  EXPECT_EQ(m.BlocksNeeded(s, 32), 0);
  EXPECT_EQ(m.BlocksNeeded(s, 33), (2 + 2) + 4);
  const int32_t shared0 = t.WriteLayer(2, 0, kD), depth0 = t.WriteLayer(2, 0, kP);
  EXPECT_EQ(m.BlockTable(s, shared0)[0], -1);
  EXPECT_GE(m.BlockTable(s, shared0)[1], 0);
  EXPECT_GE(m.BlockTable(s, depth0)[1], 0);
  WriteRows(m, s, 0, 21);
  EXPECT_TRUE(RowsIntact(m, s));
}

// BlocksFor sums over the kinds of layer (which phases each stores), not over layers: it
// must equal the blocks a grown sequence's tables actually hold, counted layer by layer,
// for every layout and prompt ends inside, at and past block boundaries.
TEST(KvManager, BlocksForEqualsTheTablesLayerByLayer) {
  for (KvLayout l : {KvLayout::kDepthIndexed, KvLayout::kLastExited, KvLayout::kShared,
                     KvLayout::kFirstThenShared, KvLayout::kHybrid}) {
    const KvLayerTable t = MustBuild(Huginn(), l, /*shared_after=*/3);
    for (int64_t prompt : {1, 15, 16, 17, 40}) {
      KvManager m(t, 4000, 16, 4);
      const auto s = m.AddSequence(prompt);
      for (int64_t len : {prompt, prompt + 1, prompt + 16, prompt + 33}) {
        ASSERT_TRUE(m.Grow(s, len));
        int64_t held = 0;
        for (int32_t p = 0; p < t.num_physical_layers(); ++p)
          for (int64_t b = 0; b < m.num_table_blocks(s); ++b) held += m.BlockTable(s, p)[b] >= 0;
        EXPECT_EQ(m.BlocksFor(prompt, len), held) << KvLayoutName(l) << " prompt " << prompt << " len " << len;
        EXPECT_EQ(m.pool().num_used(), held);
      }
    }
  }
}

TEST(KvManager, BytesPerTokenFollowsTheLayout) {
  const int64_t row = 24;
  const size_t row_bytes = 2 * row * sizeof(float);
  auto bpt = [&](KvLayout l, TokenPhase ph, int32_t S = 1) {
    return KvManager(MustBuild(Huginn(), l, S), 0, 16, row).BytesPerToken(ph);
  };
  EXPECT_EQ(bpt(KvLayout::kDepthIndexed, kD), (2 + 32 + 2) * row_bytes);
  EXPECT_EQ(bpt(KvLayout::kLastExited, kP), (2 + 32 + 2) * row_bytes);
  EXPECT_EQ(bpt(KvLayout::kShared, kD), (2 + 4 + 2) * row_bytes);
  EXPECT_EQ(bpt(KvLayout::kFirstThenShared, kD, 3), (2 + 12 + 2) * row_bytes);
  EXPECT_EQ(bpt(KvLayout::kHybrid, kP), bpt(KvLayout::kDepthIndexed, kP));
  EXPECT_EQ(bpt(KvLayout::kHybrid, kD), bpt(KvLayout::kShared, kD));
  // And the pool's account matches it for a block-aligned sequence.
  for (KvLayout l : {KvLayout::kDepthIndexed, KvLayout::kShared, KvLayout::kHybrid}) {
    KvManager m(MustBuild(Huginn(), l), 500, 16, row);
    const auto s = m.AddSequence(48);
    ASSERT_TRUE(m.Grow(s, 64));
    EXPECT_EQ(m.bytes_used(), 48 * m.BytesPerToken(kP) + 16 * m.BytesPerToken(kD));
  }
}

// A bf16 cache: half the bytes per token and per block, so the same byte budget holds
// twice the blocks and admits twice the sequences; exit copies move the bf16 rows exactly.
TEST(KvManager, Bf16HalvesTheAccountAndCopiesRows) {
  const KvLayerTable t = MustBuild(Huginn(), KvLayout::kLastExited);
  const int64_t row = 24;
  // Room for 4 sequences of one block per physical layer in f32.
  const size_t budget = static_cast<size_t>(4 * t.num_physical_layers()) * BlockPool::BytesPerBlock(16, row, DType::kF32);
  const int64_t f32_blocks = BlockPool::BlocksForBudget(budget, 16, row, DType::kF32);
  const int64_t bf16_blocks = BlockPool::BlocksForBudget(budget, 16, row, DType::kBF16);
  EXPECT_EQ(bf16_blocks, 2 * f32_blocks);
  KvManager f(t, f32_blocks, 16, row), b(t, bf16_blocks, 16, row, DType::kBF16);
  EXPECT_EQ(b.dtype(), DType::kBF16);
  EXPECT_EQ(2 * b.BytesPerToken(kD), f.BytesPerToken(kD));
  EXPECT_EQ(b.bytes_total(), f.bytes_total());
  // Sequences of 16 tokens: one block per physical layer each.
  int admitted_f = 0, admitted_b = 0;
  while (f.Grow(f.AddSequence(16), 16)) ++admitted_f;
  while (b.Grow(b.AddSequence(16), 16)) ++admitted_b;
  EXPECT_EQ(admitted_f, 4);
  EXPECT_EQ(admitted_b, 2 * admitted_f);

  KvManager m(t, 100, 4, 3, DType::kBF16);
  const auto s = m.AddSequence(2);
  ASSERT_TRUE(m.Grow(s, 3));
  const int32_t from = t.WriteLayer(2, 4, kD), to = t.WriteLayer(2, 6, kD);
  const int32_t bs = m.block_size();
  const float k[3] = {1.f + 0x1p-8f, -3.25f, 1e-3f}, v[3] = {7.f, -0.5f, 2.f};
  m.pool().WriteRow(m.BlockTable(s, from)[0], 2, false, k);
  m.pool().WriteRow(m.BlockTable(s, from)[0], 2, true, v);
  m.CopyRow(s, 2, from, to);
  float got_k[3], got_v[3];
  m.pool().ReadRow(m.BlockTable(s, to)[2 / bs], 2 % bs, false, got_k);
  m.pool().ReadRow(m.BlockTable(s, to)[2 / bs], 2 % bs, true, got_v);
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(got_k[d], BF16ToF32(F32ToBF16(k[d]))) << d;
    EXPECT_EQ(got_v[d], v[d]) << d;
  }
  EXPECT_DEATH(m.K(s, from, 2), "float access to a BF16 KV pool");
}

TEST(KvManager, GrowIsAllOrNothing) {
  KvManager m(MustBuild(Huginn(), KvLayout::kShared), 20, 16, 4);  // 8 layers
  const auto a = m.AddSequence(10);
  ASSERT_TRUE(m.Grow(a, 16));  // 8 blocks
  const auto b = m.AddSequence(10);
  EXPECT_EQ(m.BlocksNeeded(b, 17), 16);
  EXPECT_FALSE(m.Grow(b, 17));
  EXPECT_EQ(m.length(b), 0);
  EXPECT_EQ(m.pool().num_free(), 12);
  ASSERT_TRUE(m.Grow(b, 16));
  EXPECT_FALSE(m.Grow(a, 17));
  EXPECT_EQ(m.length(a), 16);
  EXPECT_EQ(m.pool().num_free(), 4);
  EXPECT_TRUE(m.Grow(a, 5));  // shrinking is a no-op
  EXPECT_EQ(m.length(a), 16);
  m.Release(a);
  EXPECT_FALSE(m.contains(a));
  EXPECT_EQ(m.pool().num_free(), 12);
  m.Release(b);
  EXPECT_EQ(m.pool().num_free(), 20);
  EXPECT_EQ(m.num_sequences(), 0);
}

TEST(KvManager, CopyRowAppliesExitCopies) {
  const KvLayerTable t = MustBuild(Huginn(), KvLayout::kLastExited);
  KvManager m(t, 100, 4, 3);
  const auto s = m.AddSequence(2);
  ASSERT_TRUE(m.Grow(s, 3));
  const int64_t pos = 2;  // a decode token that exits after 5 of 8 steps
  for (int32_t r = 0; r < 5; ++r) {
    for (int32_t l = 2; l < 6; ++l) {
      const int32_t p = t.WriteLayer(l, r, kD);
      std::fill_n(m.K(s, p, pos), 3, static_cast<float>(100 * r + l));
      std::fill_n(m.V(s, p, pos), 3, static_cast<float>(-100 * r - l));
    }
  }
  std::vector<std::pair<int32_t, int32_t>> copies;
  t.ExitCopies(5, &copies);
  for (const auto& [from, to] : copies) m.CopyRow(s, pos, from, to);
  for (int32_t r = 5; r < 8; ++r) {
    for (int32_t l = 2; l < 6; ++l) {
      const int32_t p = t.WriteLayer(l, r, kD);
      EXPECT_EQ(m.K(s, p, pos)[2], static_cast<float>(400 + l)) << r << " " << l;
      EXPECT_EQ(m.V(s, p, pos)[0], static_cast<float>(-400 - l)) << r << " " << l;
    }
  }
}

// Checks used + free == total, that no block is held twice, that the blocks held are
// exactly the pool's used blocks and that each sequence holds BlocksFor(...) blocks.
void CheckInvariants(const KvManager& m, const std::vector<KvManager::SeqId>& live) {
  const BlockPool& pool = m.pool();
  ASSERT_EQ(pool.num_used() + pool.num_free(), pool.num_blocks());
  std::vector<uint8_t> held(static_cast<size_t>(pool.num_blocks()), 0);
  int64_t n_held = 0;
  for (KvManager::SeqId s : live) {
    int64_t mine = 0;
    for (int32_t p = 0; p < m.table().num_physical_layers(); ++p) {
      const int32_t* bt = m.BlockTable(s, p);
      for (int64_t b = 0; b < m.num_table_blocks(s); ++b) {
        if (bt[b] < 0) continue;
        ASSERT_LT(bt[b], pool.num_blocks());
        ASSERT_FALSE(held[bt[b]]) << "block " << bt[b] << " held twice";
        ASSERT_TRUE(pool.is_used(bt[b]));
        held[bt[b]] = 1;
        ++mine;
      }
    }
    ASSERT_EQ(mine, m.BlocksFor(m.prompt_len(s), m.length(s)));
    n_held += mine;
  }
  ASSERT_EQ(n_held, pool.num_used());
  ASSERT_EQ(m.bytes_used() + m.bytes_free(), m.bytes_total());
}

void Fuzz(KvLayout layout, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << KvLayoutName(layout) << " seed " << seed);
  const KvLayerTable table = MustBuild(Huginn(), layout, 4);
  // About 40 blocks per layer: a few dozen sequences of tens of tokens exhaust it.
  KvManager m(table, 40 * table.num_physical_layers(), 8, 2);
  std::mt19937 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<KvManager::SeqId> live;
  int64_t failed_grows = 0, grows = 0;
  for (int op = 0; op < 3000; ++op) {
    const int64_t kind = uniform(0, 9);
    if (live.size() < 2 || (kind == 0 && live.size() < 40)) {
      live.push_back(m.AddSequence(uniform(0, 60)));
    } else if (kind == 1 || (kind == 2 && failed_grows > grows / 4)) {
      const size_t i = static_cast<size_t>(uniform(0, static_cast<int64_t>(live.size()) - 1));
      ASSERT_TRUE(RowsIntact(m, live[i]));
      m.Release(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      const KvManager::SeqId s = live[static_cast<size_t>(
          uniform(0, static_cast<int64_t>(live.size()) - 1))];
      const int64_t old = m.length(s);
      // A prefill chunk while in the prompt, else mostly single decode tokens.
      const int64_t step = old < m.prompt_len(s) ? uniform(1, 24) : uniform(1, 3);
      const int64_t need = m.BlocksNeeded(s, old + step);
      const int64_t free_before = m.pool().num_free();
      ++grows;
      if (m.Grow(s, old + step)) {
        ASSERT_EQ(m.pool().num_free(), free_before - need);
        WriteRows(m, s, old, old + step);
      } else {
        ++failed_grows;
        ASSERT_GT(need, free_before);
        ASSERT_EQ(m.pool().num_free(), free_before);
        ASSERT_EQ(m.length(s), old);
      }
    }
    CheckInvariants(m, live);
    if (testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(failed_grows, 0);  // the pool did run dry
  for (KvManager::SeqId s : live) {
    ASSERT_TRUE(RowsIntact(m, s));
    m.Release(s);
  }
  EXPECT_EQ(m.pool().num_free(), m.pool().num_blocks());
  EXPECT_EQ(m.bytes_used(), 0u);
  EXPECT_EQ(m.num_sequences(), 0);
}

TEST(KvManager, AllocateFreeFuzz) {
  for (KvLayout l : {KvLayout::kDepthIndexed, KvLayout::kShared, KvLayout::kFirstThenShared,
                     KvLayout::kHybrid}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      Fuzz(l, seed);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(KvManagerDeathTest, MisuseCheckFails) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const KvLayerTable t = MustBuild(Huginn(), KvLayout::kHybrid);
  KvManager m(t, 100, 16, 4);
  const auto s = m.AddSequence(16);
  ASSERT_TRUE(m.Grow(s, 20));
  EXPECT_DEATH(m.K(s, 0, 20), "pos=20 length=20");
  // A depth core slot stores no decode position; a shared slot no prompt position.
  EXPECT_DEATH(m.K(s, t.WriteLayer(2, 3, kP), 17), "stores no position 17");
  EXPECT_DEATH(m.V(s, t.WriteLayer(2, 3, kD), 3), "stores no position 3");
  m.Release(s);
  EXPECT_DEATH(m.length(s), "unknown or released sequence");
  EXPECT_DEATH(m.Release(s), "unknown or released sequence");
}

}  // namespace
}  // namespace fathom
