// Attention vs AttentionReference: GQA ratios 1/2/4/8, odd head dims, mixed n_visible.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/test_util.h"

namespace fathom {
namespace {

using testing::RandomFloats;
using testing::RelErr;

struct AttnCase {
  int64_t n_heads, n_kv_heads, head_dim, n_q, n_ctx;
  bool prefill;  // rows see ctx - n_q + i + 1 keys (causal chunk); else random per row
};

void CheckAttention(const AttnCase& c, uint64_t seed) {
  SCOPED_TRACE("heads=" + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) +
               " hd=" + std::to_string(c.head_dim) + " n_q=" + std::to_string(c.n_q) +
               " ctx=" + std::to_string(c.n_ctx));
  const AttentionShape s{c.n_heads, c.n_kv_heads, c.head_dim,
                         1.f / std::sqrt(static_cast<float>(c.head_dim))};
  const int64_t stride = c.n_kv_heads * c.head_dim + 3;  // padded rows: stride is honoured
  const auto q = RandomFloats(static_cast<size_t>(c.n_q * c.n_heads * c.head_dim), seed, -2.f, 2.f);
  const auto k = RandomFloats(static_cast<size_t>(c.n_ctx * stride), seed + 1, -2.f, 2.f);
  const auto v = RandomFloats(static_cast<size_t>(c.n_ctx * stride), seed + 2);
  std::vector<int32_t> nv(static_cast<size_t>(c.n_q));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int64_t i = 0; i < c.n_q; ++i)
    nv[i] = static_cast<int32_t>(c.prefill ? c.n_ctx - c.n_q + i + 1 : rng() % (c.n_ctx + 1));
  if (!c.prefill && c.n_q > 2) {
    nv[0] = 0;
    nv[1] = static_cast<int32_t>(c.n_ctx);
  }
  std::vector<float> out(q.size()), ref(q.size());
  Attention(s, q.data(), c.n_q, nv.data(), k.data(), v.data(), stride, out.data());
  AttentionReference(s, q.data(), c.n_q, nv.data(), k.data(), v.data(), stride, ref.data());
  EXPECT_LE(RelErr(out, ref), 1e-5);
  if (!c.prefill && c.n_q > 2) {  // row 0 sees nothing: zeros
    for (int64_t d = 0; d < c.n_heads * c.head_dim; ++d) EXPECT_EQ(out[d], 0.f);
  }
}

TEST(AttentionTest, MatchesReference) {
  const AttnCase cases[] = {
      {4, 4, 64, 7, 7, true},      {8, 4, 128, 5, 300, true},  {8, 2, 24, 9, 50, false},
      {16, 2, 40, 3, 3000, false}, {4, 4, 96, 2, 4000, false}, {8, 1, 128, 1, 2500, false},
      {6, 3, 17, 12, 12, true},    {32, 4, 64, 4, 1024, true}, {2, 1, 1, 5, 9, false},
  };
  uint64_t seed = 40;
  for (const AttnCase& c : cases) CheckAttention(c, seed += 10);
}

TEST(AttentionTest, SingleKeyCopiesValue) {
  const AttentionShape s{2, 1, 3, 0.5f};
  const float q[6] = {1, 2, 3, -1, -2, -3}, k[3] = {0.1f, 0.2f, 0.3f}, v[3] = {4, 5, 6};
  const int32_t nv = 1;
  float out[6];
  Attention(s, q, 1, &nv, k, v, 3, out);
  for (int h = 0; h < 2; ++h)
    for (int d = 0; d < 3; ++d) EXPECT_FLOAT_EQ(out[h * 3 + d], v[d]);
}

}  // namespace
}  // namespace fathom
