// PagedAttention against its scalar reference: rows of different sequences with shuffled
// block tables, one or two key segments, hole masks, GQA ratios and odd head sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/paged_attention.h"

namespace fathom {
namespace {

struct Case {
  int64_t n_heads, n_kv_heads, head_dim;
};

void RunCase(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int32_t block = 16;
  const int64_t row = c.n_kv_heads * c.head_dim, n_blocks = 200, stride = block * row;
  std::vector<float> k(static_cast<size_t>(n_blocks * stride)), v(k.size());
  for (float& x : k) x = u(rng);
  for (float& x : v) x = u(rng);
  const PagedKvView view{k.data(), v.data(), stride, row, block};

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
  EXPECT_LE(max_diff, 1e-5 * max_ref) << "heads " << c.n_heads << "/" << c.n_kv_heads << " dim " << c.head_dim;
}

TEST(PagedAttentionTest, MatchesReference) {
  const std::vector<Case> cases = {{4, 4, 64}, {8, 2, 24}, {32, 4, 64}, {16, 16, 128},
                                   {6, 3, 40}, {55, 55, 96}, {4, 1, 7}};
  uint32_t seed = 1;
  for (const Case& c : cases) RunCase(c, seed++);
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
