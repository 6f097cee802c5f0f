// The prefill path of PagedAttention: a tile of consecutive rows whose key lists differ only
// in where each segment ends (consecutive prompt positions of one sequence, causal) is
// processed against one KV head at once, flash-attention style, so each key block is read
// once per tile instead of once per row.
//
// Layout: the tile's M = rows x (query heads of the KV head) queries are the vector lanes
// (16 per zmm). For a chunk of up to kChunk keys of one segment (holes dropped, so the
// mask left is "key position < the row's end"), S^T[t][q] = q . k_t comes from broadcasting
// K values against the transposed queries Qt[d][q]; the online softmax (running max m[q],
// sum l[q]) is elementwise across lanes; and acc^T[d][q] += V[t][d] * P^T[t][q] broadcasts
// V values against the probabilities. K and V rows are read in place from the pool, as f32
// or as bf16 widened to f32 when broadcast (template T = float / uint16_t), or as int8
// (T = int8_t) converted exactly, with each key's K scale folded into its score's factor and
// its V scale into its probabilities after their sum is taken.
//
// AVX-512F only (target attribute + a run-time check); without it PagedAttention keeps the
// per-row AVX2 path.
#include <immintrin.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "kernels/paged_attention.h"
#include "kernels/vec_math_avx512.h"

// GCC 12 reports the _mm512_undefined_ps() inside its own AVX-512 intrinsics (max, min,
// roundscale, cvtps) as maybe-uninitialized when they are inlined under -O3.
#if !defined(__clang__)  // a GCC warning; clang has no such group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define FATHOM_TARGET_AVX512 __attribute__((target("avx512f")))

namespace fathom::internal {
namespace {

constexpr int64_t kChunk = 64;  // keys per chunk (S^T rows)

inline float Load1(const float* p) { return *p; }
inline float Load1(const uint16_t* p) { return BF16ToF32(*p); }
inline float Load1(const int8_t* p) { return static_cast<float>(*p); }

struct TileScratch {
  std::vector<float> qt;       // [hd][mp] transposed queries
  std::vector<float> acc;      // [hd][mp] unnormalised outputs
  std::vector<float> s;        // [kChunk][mp] scores, then probabilities
  std::vector<float> m, l;     // [mp] running max and sum
  std::vector<float> alpha;    // [mp] rescale of acc for the current chunk
  std::vector<int32_t> ends;   // [mp] the current segment's end per query
  const void* k[kChunk];  // rows of elements T
  const void* v[kChunk];
  int32_t pos[kChunk];
  float k_scale[kChunk], v_scale[kChunk];  // int8 K/V: the keys' scales for the KV head
};

TileScratch& Scratch() {
  thread_local TileScratch s;
  return s;
}

// S^T[t][q] = Qt[.][q] . k_t for t < nk (rounded up to 4; the pointers past nk repeat the
// last key), NQV vectors of 16 queries starting at Qt + 16 * qv0.
template <typename T, int NQV>
FATHOM_TARGET_AVX512 void ScoresT(const float* qt, int64_t mp, int64_t hd, const void* const* k,
                                  int64_t nk, float* s) {
  for (int64_t t = 0; t < nk; t += 4) {
    const T* k0 = static_cast<const T*>(k[t]);
    const T* k1 = static_cast<const T*>(k[std::min(t + 1, nk - 1)]);
    const T* k2 = static_cast<const T*>(k[std::min(t + 2, nk - 1)]);
    const T* k3 = static_cast<const T*>(k[std::min(t + 3, nk - 1)]);
    __m512 a[4][NQV];
    for (int j = 0; j < 4; ++j)
      for (int v = 0; v < NQV; ++v) a[j][v] = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; ++d) {
      __m512 qv[NQV];
      for (int v = 0; v < NQV; ++v) qv[v] = _mm512_loadu_ps(qt + d * mp + 16 * v);
      const __m512 b0 = _mm512_set1_ps(Load1(k0 + d)), b1 = _mm512_set1_ps(Load1(k1 + d));
      const __m512 b2 = _mm512_set1_ps(Load1(k2 + d)), b3 = _mm512_set1_ps(Load1(k3 + d));
      for (int v = 0; v < NQV; ++v) {
        a[0][v] = _mm512_fmadd_ps(b0, qv[v], a[0][v]);
        a[1][v] = _mm512_fmadd_ps(b1, qv[v], a[1][v]);
        a[2][v] = _mm512_fmadd_ps(b2, qv[v], a[2][v]);
        a[3][v] = _mm512_fmadd_ps(b3, qv[v], a[3][v]);
      }
    }
    for (int j = 0; j < 4 && t + j < nk; ++j)
      for (int v = 0; v < NQV; ++v) _mm512_storeu_ps(s + (t + j) * mp + 16 * v, a[j][v]);
  }
}

// acc^T[d][q] = acc^T[d][q] * alpha[q] + sum_t V_t[d] * P^T[t][q], J values of d at a time.
template <typename T, int J, int NQV>
FATHOM_TARGET_AVX512 void AccumulateBlock(const float* p, int64_t mp, const void* const* v,
                                          int64_t nk, int64_t d, const float* alpha, float* acc) {
  __m512 a[J][NQV], al[NQV];
  for (int w = 0; w < NQV; ++w) al[w] = _mm512_loadu_ps(alpha + 16 * w);
  for (int j = 0; j < J; ++j)
    for (int w = 0; w < NQV; ++w)
      a[j][w] = _mm512_mul_ps(_mm512_loadu_ps(acc + (d + j) * mp + 16 * w), al[w]);
  for (int64_t t = 0; t < nk; ++t) {
    __m512 pv[NQV];
    for (int w = 0; w < NQV; ++w) pv[w] = _mm512_loadu_ps(p + t * mp + 16 * w);
    const T* vt = static_cast<const T*>(v[t]) + d;
    for (int j = 0; j < J; ++j) {
      const __m512 b = _mm512_set1_ps(Load1(vt + j));
      for (int w = 0; w < NQV; ++w) a[j][w] = _mm512_fmadd_ps(b, pv[w], a[j][w]);
    }
  }
  for (int j = 0; j < J; ++j)
    for (int w = 0; w < NQV; ++w) _mm512_storeu_ps(acc + (d + j) * mp + 16 * w, a[j][w]);
}

template <typename T, int NQV>
FATHOM_TARGET_AVX512 void Accumulate(const float* p, int64_t mp, const void* const* v,
                                     int64_t nk, int64_t hd, const float* alpha, float* acc) {
  int64_t d = 0;
  for (; d + 4 <= hd; d += 4) AccumulateBlock<T, 4, NQV>(p, mp, v, nk, d, alpha, acc);
  for (; d < hd; ++d) AccumulateBlock<T, 1, NQV>(p, mp, v, nk, d, alpha, acc);
}

// One chunk of nk keys (positions pos[], all of one segment) for query vectors
// [qv0, qv0 + nqv): scores, online softmax, accumulation.
template <typename T, int NQV>
FATHOM_TARGET_AVX512 void Chunk(TileScratch& sc, int64_t mp, int64_t hd, float scale, int64_t nk,
                                int64_t qv0) {
  const int64_t q0 = 16 * qv0;
  float* s = sc.s.data() + q0;
  ScoresT<T, NQV>(sc.qt.data() + q0, mp, hd, sc.k, nk, s);
  constexpr bool kInt8 = std::is_same_v<T, int8_t>;
  const __m512 vscale = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
  for (int w = 0; w < NQV; ++w) {
    const int64_t o = 16 * w;
    const __m512i end = _mm512_loadu_si512(sc.ends.data() + q0 + o);
    const __m512 m_old = _mm512_loadu_ps(sc.m.data() + q0 + o);
    __m512 mx = m_old;
    for (int64_t t = 0; t < nk; ++t) {
      const __mmask16 vis = _mm512_cmpgt_epi32_mask(end, _mm512_set1_epi32(sc.pos[t]));
      const __m512 f = kInt8 ? _mm512_set1_ps(scale * sc.k_scale[t]) : vscale;
      const __m512 x = _mm512_mask_mul_ps(ninf, vis, _mm512_loadu_ps(s + t * mp + o), f);
      _mm512_storeu_ps(s + t * mp + o, x);
      mx = _mm512_max_ps(mx, x);
    }
    // Lanes that have seen no visible key keep max -inf: shift by 0 so exp gives 0, not NaN.
    const __m512 shift = _mm512_mask_mov_ps(mx, _mm512_cmp_ps_mask(mx, ninf, _CMP_EQ_OQ),
                                            _mm512_setzero_ps());
    __m512 sum = _mm512_setzero_ps();
    for (int64_t t = 0; t < nk; ++t) {
      const __m512 e = Exp16(_mm512_sub_ps(_mm512_loadu_ps(s + t * mp + o), shift));
      _mm512_storeu_ps(s + t * mp + o, kInt8 ? _mm512_mul_ps(e, _mm512_set1_ps(sc.v_scale[t])) : e);
      sum = _mm512_add_ps(sum, e);
    }
    const __m512 alpha = Exp16(_mm512_sub_ps(m_old, shift));
    _mm512_storeu_ps(sc.alpha.data() + q0 + o, alpha);
    _mm512_storeu_ps(sc.m.data() + q0 + o, mx);
    float* l = sc.l.data() + q0 + o;
    _mm512_storeu_ps(l, _mm512_fmadd_ps(_mm512_loadu_ps(l), alpha, sum));
  }
  Accumulate<T, NQV>(s, mp, sc.v, nk, hd, sc.alpha.data() + q0, sc.acc.data() + q0);
}

template <typename T>
FATHOM_TARGET_AVX512 void RunChunk(TileScratch& sc, int64_t mp, int64_t hd, float scale,
                                   int64_t nk, int64_t nqv) {
  // Query vectors whose rows all end at or before the chunk's first key see none of it.
  int64_t lo = 0;
  while (lo < nqv) {
    int32_t mx = INT_MIN;
    for (int64_t q = 16 * lo; q < 16 * lo + 16; ++q) mx = std::max(mx, sc.ends[static_cast<size_t>(q)]);
    if (mx > sc.pos[0]) break;
    ++lo;
  }
  int64_t hi = nqv;
  while (hi > lo) {
    int32_t mx = INT_MIN;
    for (int64_t q = 16 * (hi - 1); q < 16 * hi; ++q) mx = std::max(mx, sc.ends[static_cast<size_t>(q)]);
    if (mx > sc.pos[0]) break;
    --hi;
  }
  switch (hi - lo) {
    case 0: return;
    case 1: Chunk<T, 1>(sc, mp, hd, scale, nk, lo); return;
    case 2: Chunk<T, 2>(sc, mp, hd, scale, nk, lo); return;
    case 3: Chunk<T, 3>(sc, mp, hd, scale, nk, lo); return;
    default: Chunk<T, 4>(sc, mp, hd, scale, nk, lo); return;
  }
}

}  // namespace

bool PagedAttentionTilesSupported() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

namespace {

template <typename T>
FATHOM_TARGET_AVX512 void TileAs(const AttentionShape& s, const PagedKvView& kv,
                                 const PagedAttentionRow* rows, int64_t n_rows,
                                 const KeySegment* segments, int64_t kvh) {
  const int64_t group = s.n_heads / s.n_kv_heads, hd = s.head_dim;
  const int64_t m = n_rows * group, nqv = (m + 15) / 16, mp = 16 * nqv;
  TileScratch& sc = Scratch();
  const auto grow = [](std::vector<float>& b, int64_t n) {
    if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  };
  grow(sc.qt, hd * mp), grow(sc.acc, hd * mp), grow(sc.s, kChunk * mp);
  grow(sc.m, mp), grow(sc.l, mp), grow(sc.alpha, mp);
  if (static_cast<int64_t>(sc.ends.size()) < mp) sc.ends.resize(static_cast<size_t>(mp));
  // Query q = r * group + g is head kvh * group + g of row r; lanes past m are zero.
  for (int64_t d = 0; d < hd; ++d) {
    float* qt = sc.qt.data() + d * mp;
    for (int64_t r = 0; r < n_rows; ++r)
      for (int64_t g = 0; g < group; ++g) qt[r * group + g] = rows[r].q[(kvh * group + g) * hd + d];
    std::fill(qt + m, qt + mp, 0.f);
  }
  std::fill_n(sc.acc.data(), hd * mp, 0.f);
  std::fill_n(sc.m.data(), mp, -INFINITY);
  std::fill_n(sc.l.data(), mp, 0.f);
  const int64_t off = kvh * hd;
  const int64_t scales_at = s.n_kv_heads * hd + 4 * kvh;  // int8: bytes from a row's start
  const int32_t n_segs = rows[0].seg_end - rows[0].seg_begin;
  for (int32_t j = 0; j < n_segs; ++j) {
    const KeySegment& g0 = segments[rows[0].seg_begin + j];
    int64_t last = g0.begin;  // the tile's keys of this segment: [begin, max end)
    for (int64_t r = 0; r < n_rows; ++r) {
      const int64_t e = segments[rows[r].seg_begin + j].end;
      last = std::max(last, e);
      for (int64_t g = 0; g < group; ++g) sc.ends[static_cast<size_t>(r * group + g)] = static_cast<int32_t>(e);
    }
    std::fill(sc.ends.begin() + m, sc.ends.begin() + mp, INT_MIN);
    int64_t nk = 0;
    for (int64_t p = g0.begin; p < last; ++p) {
      if (g0.key_steps && g0.key_steps[p] <= g0.min_step) continue;  // a hole
      const int64_t row =
          g0.block_table[p / kv.block_size] * kv.block_stride + (p % kv.block_size) * kv.row_stride;
      sc.k[nk] = static_cast<const T*>(kv.k_base) + row + off;
      sc.v[nk] = static_cast<const T*>(kv.v_base) + row + off;
      if constexpr (std::is_same_v<T, int8_t>) {
        std::memcpy(&sc.k_scale[nk], static_cast<const char*>(kv.k_base) + row + scales_at, 4);
        std::memcpy(&sc.v_scale[nk], static_cast<const char*>(kv.v_base) + row + scales_at, 4);
      }
      sc.pos[nk] = static_cast<int32_t>(p);
      if (++nk == kChunk) RunChunk<T>(sc, mp, hd, s.scale, nk, nqv), nk = 0;
    }
    if (nk > 0) RunChunk<T>(sc, mp, hd, s.scale, nk, nqv);
  }
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t g = 0; g < group; ++g) {
      const int64_t q = r * group + g;
      const float l = sc.l[static_cast<size_t>(q)];
      const float inv = l > 0 ? 1.f / l : 0.f;
      float* out = rows[r].out + (kvh * group + g) * hd;
      for (int64_t d = 0; d < hd; ++d) out[d] = sc.acc[static_cast<size_t>(d * mp + q)] * inv;
    }
}

}  // namespace

FATHOM_TARGET_AVX512 void PagedAttentionTile(const AttentionShape& s, const PagedKvView& kv,
                                             const PagedAttentionRow* rows, int64_t n_rows,
                                             const KeySegment* segments, int64_t kvh) {
  if (kv.dtype == DType::kBF16)
    TileAs<uint16_t>(s, kv, rows, n_rows, segments, kvh);
  else if (kv.dtype == DType::kI8)
    TileAs<int8_t>(s, kv, rows, n_rows, segments, kvh);
  else
    TileAs<float>(s, kv, rows, n_rows, segments, kvh);
}

}  // namespace fathom::internal
