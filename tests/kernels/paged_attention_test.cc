// PagedAttention against its scalar reference: rows of different sequences with shuffled
// block tables, one or two key segments, hole masks, GQA ratios and odd head sizes; and
// prefill-shaped calls, which take the tiled path where the CPU has it. Each with f32, bf16
// and int8 K/V: the kernel against the reference on the same (rounded or quantized) storage
// at the f32 tolerance, and the bf16 / int8 result against the f32 inputs' reference within
// the bound that rounding K and V implies (BoundForStorage). A row's bits do not depend on the
// rows beside it, nor a head's on its pruned neighbours (head_keep), which also decide how
// the kernel pairs heads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/paged_attention.h"

namespace fathom {
namespace {

struct Case {
  int64_t n_heads, n_kv_heads, head_dim;
};

// int8 rows as PagedKvView's kI8 wants them: the values of `heads` heads, then their f32
// scales; each head quantized symmetrically (scale = max |x| / 127, value = round(x / scale)).
// Written here, not by kv/'s BlockPool, so that the kernel is tested against the format.
std::vector<int8_t> QuantizeRows(const std::vector<float>& x, int64_t row, int64_t heads) {
  const int64_t hd = row / heads, row8 = row + 4 * heads;
  const auto n_rows = static_cast<int64_t>(x.size()) / row;
  std::vector<int8_t> out(static_cast<size_t>(n_rows * row8));
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      const float* src = x.data() + r * row + h * hd;
      float amax = 0;
      for (int64_t d = 0; d < hd; ++d) amax = std::max(amax, std::abs(src[d]));
      const float s = amax / 127.f;
      for (int64_t d = 0; d < hd; ++d)
        out[static_cast<size_t>(r * row8 + h * hd + d)] =
            static_cast<int8_t>(s > 0 ? std::lround(src[d] / s) : 0);
      std::memcpy(out.data() + r * row8 + row + 4 * h, &s, sizeof s);
    }
  return out;
}

// The K/V a test attends to: f32 arrays and, for a bf16 or int8 view, their rounding. `heads`
// (KV heads a row holds) only matters to int8, whose rows and blocks are longer (the scales).
struct KvStore {
  std::vector<uint16_t> k16, v16;
  std::vector<int8_t> k8, v8;
  PagedKvView View(const std::vector<float>& k, const std::vector<float>& v, int64_t stride,
                   int64_t row, int32_t block, DType t, int64_t heads = 1) {
    if (t == DType::kF32) return {k.data(), v.data(), stride, row, block, t};
    if (t == DType::kI8) {
      k8 = QuantizeRows(k, row, heads), v8 = QuantizeRows(v, row, heads);
      const int64_t row8 = row + 4 * heads;
      return {k8.data(), v8.data(), stride / row * row8, row8, block, t};
    }
    k16.resize(k.size()), v16.resize(v.size());
    for (size_t i = 0; i < k.size(); ++i) k16[i] = F32ToBF16(k[i]), v16[i] = F32ToBF16(v[i]);
    return {k16.data(), v16.data(), stride, row, block, t};
  }
};

// How far a stored element may be from the f32 one, relative to the largest |x| around:
// bf16 rounds to nearest with 8 significant bits (u = 2^-8 of the element itself); int8 to
// the nearest multiple of its head's max |x| / 127 (half of that: 1/254 of the max).
double StorageUnit(DType t) { return t == DType::kI8 ? 1.0 / 254 : std::ldexp(1.0, -8); }

// |out - exact| for softmax(scale q k^T) v when K and V are stored with each element off by
// at most u * max |k| (u * max |v| for V): every score moves by at most
// D = scale * u * max_{row,head} sum_d |q_d| * max |k|, so each probability by a factor within
// e^{+-2D} and sum_t |p'_t - p_t| <= e^{2D} - 1; V's rounding adds at most u * max|v|. Hence
// |o' - o| <= (e^{2D} - 1) * max|v| * (1 + u) + u * max|v|.
double BoundForStorage(DType t, const std::vector<float>& q, int64_t head_dim, float scale,
                       const std::vector<float>& k, const std::vector<float>& v) {
  const double u = StorageUnit(t);
  double q1 = 0, kmax = 0, vmax = 0;
  for (size_t h = 0; h + static_cast<size_t>(head_dim) <= q.size(); h += static_cast<size_t>(head_dim)) {
    double s = 0;
    for (int64_t d = 0; d < head_dim; ++d) s += std::abs(q[h + static_cast<size_t>(d)]);
    q1 = std::max(q1, s);
  }
  for (float x : k) kmax = std::max(kmax, static_cast<double>(std::abs(x)));
  for (float x : v) vmax = std::max(vmax, static_cast<double>(std::abs(x)));
  const double D = scale * u * q1 * kmax;
  return std::expm1(2 * D) * vmax * (1 + u) + u * vmax;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  return m;
}

void RunCase(const Case& c, uint32_t seed, DType kv_dtype) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int32_t block = 16;
  const int64_t row = c.n_kv_heads * c.head_dim, n_blocks = 200, stride = block * row;
  std::vector<float> k(static_cast<size_t>(n_blocks * stride)), v(k.size());
  for (float& x : k) x = u(rng);
  for (float& x : v) x = u(rng);
  KvStore store;
  const PagedKvView view = store.View(k, v, stride, row, block, kv_dtype, c.n_kv_heads);

  // Three block tables of 60 blocks each (random disjoint blocks); per-position step counts.
  std::vector<int32_t> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<std::vector<int32_t>> tables = {{perm.begin(), perm.begin() + 60},
                                              {perm.begin() + 60, perm.begin() + 120},
                                              {perm.begin() + 120, perm.begin() + 180}};
  std::vector<int16_t> steps(2000);
  for (int16_t& s : steps) s = static_cast<int16_t>(rng() % 4);

  const int64_t n_rows = 9, qd = c.n_heads * c.head_dim;
  std::vector<float> q(static_cast<size_t>(n_rows * qd)), out(q.size()), ref(q.size());
  for (float& x : q) x = u(rng);
  std::vector<KeySegment> segs;
  std::vector<PagedAttentionRow> rows;
  for (int64_t i = 0; i < n_rows; ++i) {
    const auto& table = tables[static_cast<size_t>(i % 3)];
    const int64_t len = 1 + static_cast<int64_t>(rng() % (table.size() * block - 1));
    PagedAttentionRow r;
    r.q = q.data() + i * qd;
    r.out = out.data() + i * qd;
    r.seg_begin = static_cast<int32_t>(segs.size());
    const int64_t split = i % 2 ? len / 3 : len;  // odd rows: two segments (hybrid)
    KeySegment a{table.data(), 0, split, nullptr, 0};
    if (i % 3 == 2) a.key_steps = steps.data(), a.min_step = static_cast<int16_t>(rng() % 3);
    segs.push_back(a);
    if (split < len) segs.push_back({tables[static_cast<size_t>((i + 1) % 3)].data(), split, len, nullptr, 0});
    r.seg_end = static_cast<int32_t>(segs.size());
    rows.push_back(r);
  }
  const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim,
                             1.f / std::sqrt(static_cast<float>(c.head_dim))};
  PagedAttention(shape, view, rows.data(), n_rows, segs.data());
  for (PagedAttentionRow& r : rows) r.out = ref.data() + (r.out - out.data());
  PagedAttentionReference(shape, view, rows.data(), n_rows, segs.data());
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::abs(out[i] - ref[i])));
    max_ref = std::max(max_ref, static_cast<double>(std::abs(ref[i])));
  }
  EXPECT_LE(max_diff, 1e-5 * max_ref) << "heads " << c.n_heads << "/" << c.n_kv_heads << " dim " << c.head_dim
                                      << " " << DTypeName(kv_dtype);
  if (kv_dtype != DType::kF32) {
    // Against the exact attention of the unrounded f32 K/V: within the storage bound, and
    // visibly not f32 (so the bf16 or int8 bytes were what the kernel read).
    std::vector<float> exact(q.size());
    for (PagedAttentionRow& r : rows) r.out = exact.data() + (r.out - ref.data());
    PagedAttentionReference(shape, {k.data(), v.data(), stride, row, block}, rows.data(), n_rows, segs.data());
    const double err = MaxAbsDiff(out, exact);
    EXPECT_LE(err, BoundForStorage(kv_dtype, q, c.head_dim, shape.scale, k, v))
        << c.n_heads << " " << c.head_dim;
    EXPECT_GT(err, 1e-5 * max_ref);
  }
  // Each row alone gives the bits it had in the batch.
  std::vector<float> alone(q.size());
  for (int64_t i = 0; i < n_rows; ++i) {
    PagedAttentionRow r = rows[static_cast<size_t>(i)];
    r.out = alone.data() + i * qd;
    PagedAttention(shape, view, &r, 1, segs.data());
  }
  EXPECT_EQ(std::memcmp(alone.data(), out.data(), out.size() * sizeof(float)), 0)
      << "heads " << c.n_heads << "/" << c.n_kv_heads << " dim " << c.head_dim << " " << DTypeName(kv_dtype);
  // Pruned heads (head_keep 0) are zeros; the kept ones have the bits of the unpruned call,
  // whichever neighbours (the head they pair with, a whole pruned KV group) are gone.
  std::vector<uint8_t> keep(static_cast<size_t>(n_rows * c.n_heads));
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = static_cast<uint8_t>(rng() % 3 != 0);
  for (int64_t h = 0; h < c.n_heads / c.n_kv_heads; ++h) keep[static_cast<size_t>(h)] = 0;  // row 0, KV head 0
  std::vector<float> pruned(q.size(), 7.f);
  for (int64_t i = 0; i < n_rows; ++i) {
    rows[static_cast<size_t>(i)].out = pruned.data() + i * qd;
    rows[static_cast<size_t>(i)].head_keep = keep.data() + i * c.n_heads;
  }
  PagedAttention(shape, view, rows.data(), n_rows, segs.data());
  for (int64_t i = 0; i < n_rows * c.n_heads; ++i) {
    const float* got = pruned.data() + i * c.head_dim;
    if (keep[static_cast<size_t>(i)]) {
      ASSERT_EQ(std::memcmp(got, out.data() + i * c.head_dim, static_cast<size_t>(c.head_dim) * sizeof(float)), 0)
          << "head " << i << " of " << c.n_heads << "/" << c.n_kv_heads << " " << DTypeName(kv_dtype);
    } else {
      ASSERT_TRUE(std::all_of(got, got + c.head_dim, [](float x) { return x == 0.f; })) << "head " << i;
    }
  }
}

// The per-row path's widths this CPU can run: 16 lanes (AVX-512) where it has them, and 8.
std::vector<bool> RowWidths() {
  if (internal::PagedAttentionAvx512RowsSupported()) return {true, false};
  std::printf("note: no AVX-512F/BW/VL here: only the 8-lane per-row path is exercised\n");
  return {false};
}

// Head sizes below, at and past the 8- and 16-lane widths, with tails of every kind.
const std::vector<Case> kRowCases = {{4, 4, 64}, {8, 2, 24}, {32, 4, 64}, {16, 16, 128}, {6, 3, 40},
                                     {55, 55, 96}, {4, 1, 7}, {2, 1, 80}, {8, 4, 16}, {3, 3, 33}};

void RunRowCases(DType kv_dtype) {
  for (const bool wide : RowWidths()) {
    SCOPED_TRACE(wide ? "16 lanes" : "8 lanes");
    internal::SetPagedAttentionAvx512RowsForTesting(wide);
    uint32_t seed = 1;
    for (const Case& c : kRowCases) RunCase(c, seed++, kv_dtype);
  }
  internal::SetPagedAttentionAvx512RowsForTesting(true);
}

TEST(PagedAttentionTest, MatchesReference) { RunRowCases(DType::kF32); }

TEST(PagedAttentionTest, Bf16KvMatchesReference) { RunRowCases(DType::kBF16); }

TEST(PagedAttentionTest, Int8KvMatchesReference) { RunRowCases(DType::kI8); }

// The two widths are different kernels: on a CPU that has both, they agree to f32 rounding,
// not bit for bit (so a test of one is not silently a test of the other).
TEST(PagedAttentionTest, SixteenLanesAreADifferentKernelThanEight) {
  if (!internal::PagedAttentionAvx512RowsSupported()) GTEST_SKIP() << "no AVX-512F/BW/VL here";
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int64_t hd = 64, keys = 200, row = 2 * hd;
  std::vector<float> k(static_cast<size_t>(keys * row)), v(k.size()), q(4 * hd), a(q.size()), b(q.size());
  for (float& x : k) x = u(rng);
  for (float& x : v) x = u(rng);
  for (float& x : q) x = u(rng);
  std::vector<int32_t> table(keys / 16 + 1);
  std::iota(table.begin(), table.end(), 0);
  const PagedKvView view{k.data(), v.data(), 16 * row, row, 16};
  const KeySegment seg{table.data(), 0, keys, nullptr, 0};
  PagedAttentionRow r{q.data(), a.data(), 0, 1};
  const AttentionShape shape{4, 2, hd, 0.125f};
  internal::SetPagedAttentionAvx512RowsForTesting(true);
  PagedAttention(shape, view, &r, 1, &seg);
  r.out = b.data();
  internal::SetPagedAttentionAvx512RowsForTesting(false);
  PagedAttention(shape, view, &r, 1, &seg);
  internal::SetPagedAttentionAvx512RowsForTesting(true);
  EXPECT_NE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_LE(MaxAbsDiff(a, b), 1e-5);
}

// Prefill-shaped calls: runs of consecutive prompt positions (causal ends) of several
// sequences, long enough to form several tiles, with lengths that are not multiples of the
// block, tile or key-chunk sizes; one- and two-segment (hybrid) runs, hole masks, a run whose
// first rows see no key, and single decode rows mixed in between. Row by row, every row has
// the bits it gets alone (a call of one row), whatever runs it is called in.
void RunPrefillCase(const Case& c, uint32_t seed, RowGrouping grouping, DType kv_dtype) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int32_t block = 16;
  const int64_t row = c.n_kv_heads * c.head_dim, n_blocks = 240, stride = block * row;
  std::vector<float> k(static_cast<size_t>(n_blocks * stride)), v(k.size());
  for (float& x : k) x = 2.f * u(rng);
  for (float& x : v) x = u(rng);
  KvStore store;
  const PagedKvView view = store.View(k, v, stride, row, block, kv_dtype, c.n_kv_heads);
  std::vector<int32_t> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<std::vector<int32_t>> tables;
  for (int t = 0; t < 4; ++t) tables.emplace_back(perm.begin() + 60 * t, perm.begin() + 60 * (t + 1));
  std::vector<int16_t> steps(1000), dark(1000);  // dark: the first 150 positions never ran
  for (int16_t& x : steps) x = static_cast<int16_t>(rng() % 4);
  for (size_t p = 0; p < dark.size(); ++p) dark[p] = static_cast<int16_t>(p < 150 ? 0 : 1 + rng() % 3);

  const int64_t qd = c.n_heads * c.head_dim;
  std::vector<KeySegment> segs;
  // kind 0: causal one segment; 1: hybrid (fixed prompt segment + causal segment);
  // 2: causal with holes; 3: causal with the dark mask (rows below 151 see nothing);
  // 4: a single decode row of another sequence.
  struct Run { int kind; int64_t start, len; };
  const std::vector<Run> runs = {{0, 37, 150}, {4, 500, 1}, {1, 300, 77},  {2, 0, 131},
                                 {0, 0, 3},    {3, 120, 70}, {4, 900, 1}, {2, 600, 66}};
  std::vector<PagedAttentionRow> rows;
  for (size_t ri = 0; ri < runs.size(); ++ri) {
    const Run& r = runs[ri];
    const auto& table = tables[ri % 4];
    for (int64_t i = 0; i < r.len; ++i) {
      const int64_t pos = r.start + i;
      PagedAttentionRow a;
      a.seg_begin = static_cast<int32_t>(segs.size());
      switch (r.kind) {
        case 1:
          segs.push_back({tables[(ri + 1) % 4].data(), 0, 211, nullptr, 0});
          segs.push_back({table.data(), 211, pos + 1, nullptr, 0});
          break;
        case 2: segs.push_back({table.data(), 0, pos + 1, steps.data(), 1}); break;
        case 3: segs.push_back({table.data(), 0, pos + 1, dark.data(), 0}); break;
        default: segs.push_back({table.data(), 0, pos + 1, nullptr, 0}); break;
      }
      a.seg_end = static_cast<int32_t>(segs.size());
      rows.push_back(a);
    }
  }
  const auto n_rows = static_cast<int64_t>(rows.size());
  std::vector<float> q(static_cast<size_t>(n_rows * qd)), out(q.size(), 7.f), ref(q.size());
  for (float& x : q) x = 2.f * u(rng);
  for (int64_t i = 0; i < n_rows; ++i) rows[static_cast<size_t>(i)].q = q.data() + i * qd;
  for (int64_t i = 0; i < n_rows; ++i) rows[static_cast<size_t>(i)].out = out.data() + i * qd;
  const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim,
                             1.f / std::sqrt(static_cast<float>(c.head_dim))};
  PagedAttention(shape, view, rows.data(), n_rows, segs.data(), grouping);
  const bool tiles = grouping == RowGrouping::kTiles;
  if (!tiles) {
    std::vector<float> alone(qd);
    for (int64_t i = 0; i < n_rows; ++i) {
      PagedAttentionRow r = rows[static_cast<size_t>(i)];
      r.out = alone.data();
      PagedAttention(shape, view, &r, 1, segs.data(), RowGrouping::kTiles);
      ASSERT_EQ(0, std::memcmp(alone.data(), out.data() + i * qd, qd * sizeof(float)))
          << "row " << i << " heads " << c.n_heads << "/" << c.n_kv_heads << " dim " << c.head_dim
          << " " << DTypeName(kv_dtype);
    }
  }
  for (int64_t i = 0; i < n_rows; ++i) rows[static_cast<size_t>(i)].out = ref.data() + i * qd;
  PagedAttentionReference(shape, view, rows.data(), n_rows, segs.data());
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::abs(out[i] - ref[i])));
    max_ref = std::max(max_ref, static_cast<double>(std::abs(ref[i])));
  }
  EXPECT_LE(max_diff, 1e-5 * max_ref) << "heads " << c.n_heads << "/" << c.n_kv_heads << " dim "
                                      << c.head_dim << " tiles " << tiles << " " << DTypeName(kv_dtype);
  if (kv_dtype != DType::kF32) {
    std::vector<float> exact(q.size());
    for (int64_t i = 0; i < n_rows; ++i) rows[static_cast<size_t>(i)].out = exact.data() + i * qd;
    PagedAttentionReference(shape, {k.data(), v.data(), stride, row, block}, rows.data(), n_rows, segs.data());
    EXPECT_LE(MaxAbsDiff(out, exact), BoundForStorage(kv_dtype, q, c.head_dim, shape.scale, k, v))
        << c.head_dim;
  }
  // Kind-3 rows at positions below 150 see no key: exactly zero.
  int64_t first = 0;
  for (size_t ri = 0; ri < runs.size() && runs[ri].kind != 3; ++ri) first += runs[ri].len;
  for (int64_t i = 0; i < 30; ++i)
    for (int64_t d = 0; d < qd; ++d) ASSERT_EQ(out[static_cast<size_t>((first + i) * qd + d)], 0.f);
}

TEST(PagedAttentionTest, PrefillRunsMatchReference) {
  const std::vector<Case> cases = {{8, 8, 64}, {8, 2, 24}, {32, 4, 64}, {16, 16, 128},
                                   {6, 3, 40}, {4, 1, 7},  {12, 12, 96}, {64, 1, 32}};
  uint32_t seed = 100;
  for (const Case& c : cases) {
    RunPrefillCase(c, seed, RowGrouping::kTiles, DType::kF32);
    RunPrefillCase(c, seed++, RowGrouping::kRowByRow, DType::kF32);
  }
}

// The tiled path (AVX-512F) reads bf16 and int8 K/V too (int8: the scales applied per key
// there as well); where the CPU lacks AVX-512F both calls take the per-row path.
void RunStoredPrefillCases(DType kv_dtype, uint32_t seed) {
  if (!internal::PagedAttentionTilesSupported())
    std::printf(
        "note: no AVX-512F here: the %s tiled path is not exercised, only the per-row one\n",
        DTypeName(kv_dtype).data());
  const std::vector<Case> cases = {{8, 8, 64}, {8, 2, 24}, {32, 4, 64},  {16, 16, 128},
                                   {6, 3, 40}, {4, 1, 7},  {12, 12, 96}, {64, 1, 32}};
  for (const Case& c : cases) {
    RunPrefillCase(c, seed, RowGrouping::kTiles, kv_dtype);
    RunPrefillCase(c, seed++, RowGrouping::kRowByRow, kv_dtype);
  }
}

TEST(PagedAttentionTest, Bf16KvPrefillRunsMatchReference) {
  RunStoredPrefillCases(DType::kBF16, 100);
}

TEST(PagedAttentionTest, Int8KvPrefillRunsMatchReference) {
  RunStoredPrefillCases(DType::kI8, 200);
}

TEST(PagedAttentionTest, RowWithNoVisibleKeyIsZero) {
  const int64_t row = 8;
  std::vector<float> k(16 * row, 1.f), v(16 * row, 1.f), q(8, 1.f), out(8, 5.f);
  std::vector<int32_t> table = {0};
  std::vector<int16_t> steps(16, 0);
  const PagedKvView view{k.data(), v.data(), 16 * row, row, 16};
  KeySegment seg{table.data(), 0, 10, steps.data(), 0};  // every key masked
  PagedAttentionRow r{q.data(), out.data(), 0, 1};
  PagedAttention({1, 1, 8, 0.5f}, view, &r, 1, &seg);
  for (float x : out) EXPECT_EQ(x, 0.f);
}

}  // namespace
}  // namespace fathom
