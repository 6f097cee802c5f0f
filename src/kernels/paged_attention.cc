// Paged attention in f32 with AVX2/FMA, or AVX-512 (16 lanes a register) where the CPU has
// it. Work unit: one row and a range of its KV heads with the query heads that share them (all
// of them where few query heads share a KV head and threads need no more units: RunUnits).
// The unit first resolves its key list (segments, block tables, hole masks) into per-thread
// arrays of K and V row pointers, one block-table lookup per block, then runs a two-pass
// softmax (keys a tile at a time through all the unit's heads): scores for all
// keys, exp and sum, then the weighted sum of V. K/V elements are f32 or bf16 (template T =
// float / uint16_t): bf16 is widened 8 (or 16) values at a time (zero-extend to 32 bits, shift
// left 16: exact), so both read paths do the same f32 arithmetic. int8 K/V (T = int8_t) are
// widened the same way (sign-extend, convert: exact) and their scales, one per key row and KV
// head, applied outside the dot products: each score times its key's K scale before the
// softmax, each probability times its key's V scale before it weighs V (ApplyScales).
//
// Register blocking: scores for two query heads and four keys at a time (8 accumulators,
// each key's lanes summed by one transposed reduction for the four keys instead of one
// horizontal sum per key), and the weighted sum of V for two heads and 32 dimensions at a
// time (each V chunk loaded once for both heads). A head's results do not depend on which
// head it is paired with, nor on the keys beside it in a pass: every score is
// ((((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))) + tail) * scale over its own lanes l, and every output
// element one FMA chain over the keys in order. So a row's bits depend on its q and its keys
// only (not on the batch, the GQA pairing or a pruned neighbour head). The 16-lane leaves
// take up to four heads a pass (head_dim <= 64) and 8 keys for a lone head, and sum every
// score's 16 lanes in one fixed order (LaneSums16), so the same holds there; their softmax
// is 16 lanes too (Softmax16).
//
// Keys go kKeyTile at a time through every head pair of the unit (then values), so a pair
// after the first finds them in L1. bf16 values are widened in registers by each pair:
// widening once per tile into an f32 buffer for all pairs (a path this kernel had, from 4
// heads per KV head) measured no faster once heads were paired (0.8-1.0x,
// BENCHMARKS.md "Decode attention: head pairs").
//
// The scalar tails (head_dim % 8) use std::fma, not a * b + c, so that no instantiation's
// contraction choice can change a result's bits.
//
// Prefill: runs of consecutive rows with the same keys up to their ends (one sequence's
// prompt positions, causal) go to the tiled kernel (paged_attention_tiled.cc, AVX-512F),
// which reads each key once per tile of rows instead of once per row.
#include "kernels/paged_attention.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/parallel.h"
#include "kernels/vec_math.h"
#include "kernels/vec_math_avx512.h"

// GCC 12 reports the _mm256_undefined_pd() inside its own AVX-512 extract intrinsic as
// maybe-uninitialized when it is inlined under -O3 (as in paged_attention_tiled.cc).
#if !defined(__clang__)  // a GCC warning; clang has no such group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// ... and the _mm512_undefined_ps() of its _mm512_shuffle_f32x4 as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"

#define FATHOM_TARGET_AVX512ROWS __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace fathom {
namespace {

// Keys (then values) taken through all the unit's head pairs at a time: 32 rows of head_dim,
// 4-16 KB of bf16 or f32, stay in L1 between pairs. A multiple of the score pass's 4 keys, so
// only the last tile has a tail.
constexpr int64_t kKeyTile = 32;
// Keys a tile for units of several KV heads with one pair of query heads each (MHA, or 2 query
// heads per KV head): nothing is reused across pairs, so the tile only sets the order in
// which key rows are read, and short tiles read them nearly whole, row after row (1.4-1.7x
// the rate of tiles of 32 for Ouro-1.4B's shape; with 2 pairs per KV head 8 was slower than
// 32, and so it was for units of 2 KV heads: BENCHMARKS.md "Decode attention: whole key
// rows"). Used from kMinKvHeadsForRowOrder KV heads per unit.
constexpr int64_t kRowOrderTile = 8;
constexpr size_t kMinKvHeadsForRowOrder = 4;

// The query heads of one KV head that a unit computes: heads [first, first + count) of the
// unit's lists, reading K/V at element offset `off` of each key row (kvh * head_dim).
struct KvHeadHeads {
  int64_t off, first, count;
};

struct UnitScratch {
  std::vector<const void*> k, v;  // key rows (elements T; the row's start, KV head 0)
  std::vector<float> p;           // [heads][n_keys] scores, then probabilities
  // The heads the unit computes: query and output rows [head_dim], scores [n_keys] in p.
  std::vector<const float*> head_q;
  std::vector<float*> head_out, head_p;
  std::vector<KvHeadHeads> groups;  // by KV head, in order
};

inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 Load8(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline float Load1(const float* p) { return *p; }
inline float Load1(const uint16_t* p) { return BF16ToF32(*p); }
inline float Load1(const int8_t* p) { return static_cast<float>(*p); }

template <typename T>
const T* Elems(const void* p) {
  return static_cast<const T*>(p);
}

UnitScratch& Scratch() {
  thread_local UnitScratch s;
  return s;
}

// Resolves the row's keys into K/V row pointers (each key row's start); returns the count.
// One block-table lookup (and one division) per block, not per key.
template <typename T>
int64_t GatherKeys(const PagedKvView& kv, const PagedAttentionRow& row, const KeySegment* segs,
                   UnitScratch& s) {
  int64_t n = 0;
  for (int32_t i = row.seg_begin; i < row.seg_end; ++i) n += segs[i].end - segs[i].begin;
  if (static_cast<int64_t>(s.k.size()) < n) s.k.resize(static_cast<size_t>(n)), s.v.resize(static_cast<size_t>(n));
  const T* kb = Elems<T>(kv.k_base);
  const T* vb = Elems<T>(kv.v_base);
  int64_t m = 0;
  for (int32_t i = row.seg_begin; i < row.seg_end; ++i) {
    const KeySegment& g = segs[i];
    for (int64_t p = g.begin; p < g.end;) {
      const int64_t blk = p / kv.block_size;
      const int64_t last = std::min(g.end, (blk + 1) * kv.block_size);
      int64_t at = g.block_table[blk] * kv.block_stride + (p - blk * kv.block_size) * kv.row_stride;
      for (; p < last; ++p, at += kv.row_stride) {
        if (g.key_steps && g.key_steps[p] <= g.min_step) continue;  // a hole: never written
        s.k[static_cast<size_t>(m)] = kb + at;
        s.v[static_cast<size_t>(m)] = vb + at;
        ++m;
      }
    }
  }
  return m;
}

// [sum of a's lanes, b's, c's, d's], each summed ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))
// whatever the other vectors hold.
inline __m128 Sum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_hadd_ps(a, b);      // a01 a23 b01 b23 | a45 a67 b45 b67
  const __m256 cd = _mm256_hadd_ps(c, d);      // c01 c23 d01 d23 | c45 c67 d45 d67
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// p[h][j] = scale * q[h] . k[j][off ..] for NH heads (1 or 2) and 4 keys (the first `valid`
// stored; pass the last key again for the others).
template <typename T, int NH>
inline void ScorePass(const float* const* q, const T* const* k, int64_t off, int64_t hd,
                      float scale, float* const* p, int64_t valid) {
  __m256 acc[NH][4];
  for (int h = 0; h < NH; ++h)
    for (int j = 0; j < 4; ++j) acc[h][j] = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= hd; d += 8) {
    __m256 qv[NH];
    for (int h = 0; h < NH; ++h) qv[h] = _mm256_loadu_ps(q[h] + d);
    for (int j = 0; j < 4; ++j) {
      const __m256 kv = Load8(k[j] + off + d);
      for (int h = 0; h < NH; ++h) acc[h][j] = _mm256_fmadd_ps(qv[h], kv, acc[h][j]);
    }
  }
  alignas(16) float tail[NH][4] = {};
  for (; d < hd; ++d)
    for (int j = 0; j < 4; ++j) {
      const float kd = Load1(k[j] + off + d);
      for (int h = 0; h < NH; ++h) tail[h][j] = std::fma(q[h][d], kd, tail[h][j]);
    }
  const __m128 vscale = _mm_set1_ps(scale);
  for (int h = 0; h < NH; ++h) {
    const __m128 s = _mm_mul_ps(_mm_add_ps(Sum4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]),
                                           _mm_load_ps(tail[h])), vscale);
    if (valid == 4) {
      _mm_storeu_ps(p[h], s);
    } else {
      alignas(16) float buf[4];
      _mm_store_ps(buf, s);
      std::copy_n(buf, valid, p[h]);
    }
  }
}

// Scores of keys kp[0 .. n) for NH heads into p[h][0 .. n).
template <typename T, int NH>
void ScoresFor(const float* const* q, const void* const* kp, int64_t off, int64_t n, int64_t hd,
               float scale, float* const* p) {
  for (int64_t t = 0; t < n; t += 4) {
    const int64_t valid = std::min<int64_t>(4, n - t);
    const T* k[4];
    for (int64_t j = 0; j < 4; ++j) k[j] = Elems<T>(kp[t + std::min(j, valid - 1)]);
    float* pt[NH];
    for (int h = 0; h < NH; ++h) pt[h] = p[h] + t;
    ScorePass<T, NH>(q, k, off, hd, scale, pt, valid);
  }
}

// out[h][c .. c+8*NV) (+)= sum_t w[h][t] * v_t[c .. c+8*NV) for NH heads, accumulated in
// NH * NV registers; added to out's values (the sums of earlier keys) when `resume`, in the
// same order as one pass.
template <typename T, int NH, int NV>
void WeightedSumChunk(const float* const* w, const void* const* v, int64_t off, int64_t n,
                      int64_t c, float* const* out, bool resume) {
  __m256 acc[NH][NV];
  for (int h = 0; h < NH; ++h)
    for (int j = 0; j < NV; ++j)
      acc[h][j] = resume ? _mm256_loadu_ps(out[h] + c + 8 * j) : _mm256_setzero_ps();
  for (int64_t t = 0; t < n; ++t) {
    __m256 wt[NH];
    for (int h = 0; h < NH; ++h) wt[h] = _mm256_set1_ps(w[h][t]);
    const T* vt = Elems<T>(v[t]) + off + c;
    for (int j = 0; j < NV; ++j) {
      const __m256 x = Load8(vt + 8 * j);
      for (int h = 0; h < NH; ++h) acc[h][j] = _mm256_fmadd_ps(wt[h], x, acc[h][j]);
    }
  }
  for (int h = 0; h < NH; ++h)
    for (int j = 0; j < NV; ++j) _mm256_storeu_ps(out[h] + c + 8 * j, acc[h][j]);
}

template <typename T, int NH>
void WeightedSum(const float* const* w, const void* const* v, int64_t off, int64_t n, int64_t hd,
                 float* const* out, bool resume) {
  int64_t c = 0;
  for (; c + 32 <= hd; c += 32) WeightedSumChunk<T, NH, 4>(w, v, off, n, c, out, resume);
  for (; c + 8 <= hd; c += 8) WeightedSumChunk<T, NH, 1>(w, v, off, n, c, out, resume);
  for (; c < hd; ++c)
    for (int h = 0; h < NH; ++h) {
      float acc = resume ? out[h][c] : 0.f;
      for (int64_t t = 0; t < n; ++t) acc = std::fma(w[h][t], Load1(Elems<T>(v[t]) + off + c), acc);
      out[h][c] = acc;
    }
}

// Runs `f(head index, NH)` over the unit's heads max_nh (4 or 2) at a time, then in a pair
// and alone for the rest.
template <typename F>
void ForHeadGroups(int64_t n_heads, int max_nh, F&& f) {
  int64_t h = 0;
  if (max_nh >= 4)
    for (; h + 4 <= n_heads; h += 4) f(h, std::integral_constant<int, 4>{});
  for (; h + 2 <= n_heads; h += 2) f(h, std::integral_constant<int, 2>{});
  if (h < n_heads) f(h, std::integral_constant<int, 1>{});
}

// The same two passes on 16 lanes (AVX-512F/BW/VL, where the CPU has them), up to 4 query
// heads of a KV head a pass: a score is the lane sum of its accumulator in LaneSums16's
// order; head_dim % 16 is a masked last step (zeros in the masked lanes of q and k), not a
// scalar tail. The same independence of the neighbours holds; the bits differ from the
// 8-lane path's (another summation order), so a CPU runs one path for every call
// (UseAvx512Rows).
FATHOM_TARGET_AVX512ROWS inline __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
FATHOM_TARGET_AVX512ROWS inline __m512 Load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
FATHOM_TARGET_AVX512ROWS inline __m512 Load16(const int8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
FATHOM_TARGET_AVX512ROWS inline __m512 Load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
FATHOM_TARGET_AVX512ROWS inline __m512 Load16(const int8_t* p, __mmask16 m) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p)));
}
FATHOM_TARGET_AVX512ROWS inline __m512 Load16(const uint16_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
// Pairwise steps of a transposed reduction (LaneSums16): each adds two shuffles of a and b.
FATHOM_TARGET_AVX512ROWS inline __m512 PairQuarters(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
}
FATHOM_TARGET_AVX512ROWS inline __m512 PairHalves(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
}
FATHOM_TARGET_AVX512ROWS inline __m512 PairSingles(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
}
FATHOM_TARGET_AVX512ROWS inline __m512 PairDoubles(__m512 a, __m512 b) {
  const __m512d x = _mm512_castps_pd(a), y = _mm512_castps_pd(b);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                       _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
}
// Four vectors' lane sums in one: quarter q of PairFour(x0..x3) holds x_q's f0..f3 below.
FATHOM_TARGET_AVX512ROWS inline __m512 PairFour(__m512 x0, __m512 x1, __m512 x2, __m512 x3) {
  return PairHalves(PairQuarters(x0, x1), PairQuarters(x2, x3));
}
// The lane sums of 16 vectors in one: lane 4q + l of the result is the sum of x_{4l+q}'s
// lanes e0..e15, always in the order (f0 + f2) + (f1 + f3), f_i = (e_i + e_i+8) + (e_i+4 +
// e_i+12), whatever the other vectors hold: four levels of pairwise shuffles and adds (45
// instructions for 16 sums) instead of a fold, three horizontal adds and an extract per 4.
// Arguments are the four PairFour results of x0..3, x4..7, x8..11, x12..15.
FATHOM_TARGET_AVX512ROWS inline __m512 LaneSums16(__m512 c0, __m512 c1, __m512 c2, __m512 c3) {
  return PairDoubles(PairSingles(c0, c1), PairSingles(c2, c3));
}

// p[h][j] = scale * q[h] . k[j][off ..] for NH heads and NK keys, NH x NK = 4 x 4, 2 x 4 or
// 1 x 8 (the first `valid` keys stored; pass the last key again for the others): one
// accumulator per head and key, 16 dims a step (the last step masked: zeros past head_dim),
// then LaneSums16, the accumulators repeated to fill the 16 (the same order for every score,
// whatever NH and NK). Always inlined: a call per pass, with its pointer arrays through
// memory, cost 5-10%.
template <typename T, int NH, int NK>
FATHOM_TARGET_AVX512ROWS __attribute__((always_inline)) inline void ScorePass16(
    const float* const* q, const T* const* k, int64_t off, int64_t hd, float scale, float* const* p,
    int64_t valid) {
  static_assert((NH == 4 && NK == 4) || (NH == 2 && NK == 4) || (NH == 1 && NK == 8));
  __m512 acc[NH][NK];
  for (int h = 0; h < NH; ++h)
    for (int j = 0; j < NK; ++j) acc[h][j] = _mm512_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= hd; d += 16) {
    __m512 qv[NH];
    for (int h = 0; h < NH; ++h) qv[h] = Load16(q[h] + d);
    for (int j = 0; j < NK; ++j) {
      const __m512 kv = Load16(k[j] + off + d);
      for (int h = 0; h < NH; ++h) acc[h][j] = _mm512_fmadd_ps(qv[h], kv, acc[h][j]);
    }
  }
  if (d < hd) {
    const auto m = static_cast<__mmask16>((1u << (hd - d)) - 1);
    __m512 qv[NH];
    for (int h = 0; h < NH; ++h) qv[h] = Load16(q[h] + d, m);
    for (int j = 0; j < NK; ++j) {
      const __m512 kv = Load16(k[j] + off + d, m);
      for (int h = 0; h < NH; ++h) acc[h][j] = _mm512_fmadd_ps(qv[h], kv, acc[h][j]);
    }
  }
  // c[m], m = h * NK/4 + g: quarter Q holds head h's key 4g + Q. LaneSums16 of c[0..3] (mod
  // M) puts c[m]'s quarter Q in lane 4Q + m; the transposition below, in lane 4m + Q, that is
  // h * NK + (4g + Q): each head's NK scores side by side.
  constexpr int kM = NH * NK / 4;
  __m512 c[kM];
  for (int h = 0; h < NH; ++h)
    for (int g = 0; g < NK / 4; ++g)
      c[h * (NK / 4) + g] =
          PairFour(acc[h][4 * g], acc[h][4 * g + 1], acc[h][4 * g + 2], acc[h][4 * g + 3]);
  const __m512i transpose = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  const __m512 sums = _mm512_mul_ps(
      _mm512_permutexvar_ps(transpose, LaneSums16(c[0], c[1 % kM], c[2 % kM], c[3 % kM])),
      _mm512_set1_ps(scale));
  if (valid == NK) {
    if constexpr (NK == 8) {
      _mm256_storeu_ps(p[0], _mm512_castps512_ps256(sums));
    } else {
      _mm_storeu_ps(p[0], _mm512_castps512_ps128(sums));
      if constexpr (NH >= 2) _mm_storeu_ps(p[1], _mm512_extractf32x4_ps(sums, 1));
      if constexpr (NH >= 4) {
        _mm_storeu_ps(p[2], _mm512_extractf32x4_ps(sums, 2));
        _mm_storeu_ps(p[3], _mm512_extractf32x4_ps(sums, 3));
      }
    }
  } else {
    alignas(64) float buf[16];
    _mm512_store_ps(buf, sums);
    for (int h = 0; h < NH; ++h)
      for (int64_t j = 0; j < valid; ++j) p[h][j] = buf[NK * h + j];
  }
}

// Scores of keys kp[0 .. n) for NH heads into p[h][0 .. n), 4 keys a pass (8 for one head).
template <typename T, int NH>
FATHOM_TARGET_AVX512ROWS void ScoresFor16(const float* const* q, const void* const* kp, int64_t off,
                                          int64_t n, int64_t hd, float scale, float* const* p) {
  constexpr int kKeys = NH == 1 ? 8 : 4;
  for (int64_t t = 0; t < n; t += kKeys) {
    const int64_t valid = std::min<int64_t>(kKeys, n - t);
    const T* k[kKeys];
    for (int64_t j = 0; j < kKeys; ++j) k[j] = Elems<T>(kp[t + std::min(j, valid - 1)]);
    float* pt[NH];
    for (int h = 0; h < NH; ++h) pt[h] = p[h] + t;
    ScorePass16<T, NH, kKeys>(q, k, off, hd, scale, pt, valid);
  }
}

// out[h][c .. c + 16*NV) (+)= sum_t w[h][t] * v_t[...] as WeightedSumChunk, 16 lanes a
// register; `last` masks the chunk's last vector (the head_dim % 16 tail).
template <typename T, int NH, int NV>
FATHOM_TARGET_AVX512ROWS void WeightedSumChunk16(const float* const* w, const void* const* v,
                                                 int64_t off, int64_t n, int64_t c,
                                                 float* const* out, bool resume, __mmask16 last) {
  __m512 acc[NH][NV];
  const auto mask = [last](int j) { return j == NV - 1 ? last : static_cast<__mmask16>(0xFFFF); };
  for (int h = 0; h < NH; ++h)
    for (int j = 0; j < NV; ++j)
      acc[h][j] = resume ? _mm512_maskz_loadu_ps(mask(j), out[h] + c + 16 * j) : _mm512_setzero_ps();
  for (int64_t t = 0; t < n; ++t) {
    __m512 wt[NH];
    for (int h = 0; h < NH; ++h) wt[h] = _mm512_set1_ps(w[h][t]);
    const T* vt = Elems<T>(v[t]) + off + c;
    for (int j = 0; j < NV; ++j) {
      const __m512 x = j == NV - 1 && last != 0xFFFF ? Load16(vt + 16 * j, last) : Load16(vt + 16 * j);
      for (int h = 0; h < NH; ++h) acc[h][j] = _mm512_fmadd_ps(wt[h], x, acc[h][j]);
    }
  }
  for (int h = 0; h < NH; ++h)
    for (int j = 0; j < NV; ++j) _mm512_mask_storeu_ps(out[h] + c + 16 * j, mask(j), acc[h][j]);
}

template <typename T, int NH>
FATHOM_TARGET_AVX512ROWS void WeightedSum16(const float* const* w, const void* const* v,
                                            int64_t off, int64_t n, int64_t hd, float* const* out,
                                            bool resume) {
  int64_t c = 0;
  for (; c + 64 <= hd; c += 64) WeightedSumChunk16<T, NH, 4>(w, v, off, n, c, out, resume, 0xFFFF);
  for (; c + 16 <= hd; c += 16) WeightedSumChunk16<T, NH, 1>(w, v, off, n, c, out, resume, 0xFFFF);
  if (c < hd)
    WeightedSumChunk16<T, NH, 1>(w, v, off, n, c, out, resume,
                                 static_cast<__mmask16>((1u << (hd - c)) - 1));
}

// The leaves AttendGathered runs: 8 lanes (AVX2, every CPU fathom runs on) or 16.
template <bool kWide>
struct Leaves {
  // Query heads of one KV head a pass takes at a time: 4 x 4 accumulators fit AVX-512's 32
  // registers (K widened once for 4 heads), AVX2's 16 only 2 x 4. Four only for head_dim <=
  // 64: 32/4 x 64 (TinyLlama) measured 1.24-1.35x with 4 against 1.18-1.21x with 2 (both
  // with LaneSums16, against HEAD's pairs), but 32/8 x 128 at 2048 keys 0.96x against 1.10x
  // (BENCHMARKS.md "Decode attention: four heads a pass").
  static int MaxHeads(int64_t head_dim) { return kWide && head_dim <= 64 ? 4 : 2; }

  // p[0 .. n) = softmax(p[0 .. n)), n > 0.
  static void Softmax(float* p, int64_t n) {
    if constexpr (kWide) {
      internal::Softmax16(p, n);
    } else {
      const float inv = 1.f / internal::ExpShiftedInPlace(p, n);
      for (int64_t t = 0; t < n; ++t) p[t] *= inv;
    }
  }
  template <typename T, int NH>
  static void Scores(const float* const* q, const void* const* kp, int64_t off, int64_t n,
                     int64_t hd, float scale, float* const* p) {
    if constexpr (kWide)
      ScoresFor16<T, NH>(q, kp, off, n, hd, scale, p);
    else
      ScoresFor<T, NH>(q, kp, off, n, hd, scale, p);
  }
  template <typename T, int NH>
  static void Sum(const float* const* w, const void* const* v, int64_t off, int64_t n, int64_t hd,
                  float* const* out, bool resume) {
    if constexpr (kWide)
      WeightedSum16<T, NH>(w, v, off, n, hd, out, resume);
    else
      WeightedSum<T, NH>(w, v, off, n, hd, out, resume);
  }
};

std::atomic<bool> g_rows16_enabled{true};

bool UseAvx512Rows() {
  return internal::PagedAttentionAvx512RowsSupported() && g_rows16_enabled.load(std::memory_order_relaxed);
}

// int8 K/V: p[t] *= the scale of key t's row (K or V rows `rows`) for KV head `kvh`; a
// row's scales are f32 at byte `scales_at` of it (n_kv_heads * head_dim), one per KV head.
void ApplyScales(const void* const* rows, int64_t scales_at, int64_t kvh, int64_t n, float* p) {
  for (int64_t t = 0; t < n; ++t) {
    float sc;
    std::memcpy(&sc, static_cast<const char*>(rows[t]) + scales_at + 4 * kvh, sizeof sc);
    p[t] *= sc;
  }
}

// softmax(scale * q k^T) v over the n gathered keys for the unit's heads (s.head_q,
// s.head_out, by KV head in s.groups), with the leaves L (Leaves<kWide>). Keys go a tile at
// a time through every KV head of the unit, so a tile's key rows are read whole (a unit of
// all of a row's KV heads streams each block of the cache front to back, which the
// hardware prefetchers follow; one KV head's slice of each row, 128-256 bytes every
// row_stride, they did not). scales_at: int8 K/V only (T = int8_t), where a key row's
// scales start (ApplyScales).
template <typename T, typename L>
void AttendGathered(int64_t hd, float scale, int64_t n, int64_t scales_at, UnitScratch& s) {
  const auto nh = static_cast<int64_t>(s.head_q.size());
  if (n == 0) {
    for (float* o : s.head_out) std::fill_n(o, hd, 0.f);
    return;
  }
  if (static_cast<int64_t>(s.p.size()) < nh * n) s.p.resize(static_cast<size_t>(nh * n));
  s.head_p.resize(static_cast<size_t>(nh));
  for (int64_t h = 0; h < nh; ++h) s.head_p[static_cast<size_t>(h)] = s.p.data() + h * n;
  const float* const* q = s.head_q.data();
  float* const* out = s.head_out.data();
  const int max_nh = L::MaxHeads(hd);
  float* const* pr = s.head_p.data();
  // Keys a tile at a time (the same bits as one pass: a tile's sums resume from the last
  // tile's, exactly). One pair of one KV head: nothing to keep in L1 for another pair, so all
  // keys in one pass; several KV heads of one pair each: short tiles, so that key rows are
  // read nearly whole; else tiles that stay in L1 across the pairs of a KV head.
  const auto one_pair = [](const KvHeadHeads& g) { return g.count <= 2; };
  const bool row_order = s.groups.size() >= kMinKvHeadsForRowOrder &&
                         std::all_of(s.groups.begin(), s.groups.end(), one_pair);
  const int64_t tile = s.groups.size() == 1 && nh <= 2 ? n : row_order ? kRowOrderTile : kKeyTile;
  for (int64_t t0 = 0; t0 < n; t0 += tile) {
    const int64_t nt = std::min(tile, n - t0);
    for (const KvHeadHeads& g : s.groups)
      ForHeadGroups(g.count, max_nh, [&](int64_t i0, auto pair) {
        constexpr int NH = decltype(pair)::value;
        const int64_t h = g.first + i0;
        float* p[NH];
        for (int i = 0; i < NH; ++i) p[i] = pr[h + i] + t0;
        L::template Scores<T, NH>(q + h, s.k.data() + t0, g.off, nt, hd, scale, p);
      });
  }
  const auto scale_heads = [&](const std::vector<const void*>& rows) {
    for (const KvHeadHeads& g : s.groups)
      for (int64_t h = g.first; h < g.first + g.count; ++h)
        ApplyScales(rows.data(), scales_at, g.off / hd, n, pr[h]);
  };
  if constexpr (std::is_same_v<T, int8_t>) scale_heads(s.k);
  for (int64_t h = 0; h < nh; ++h) L::Softmax(pr[h], n);
  if constexpr (std::is_same_v<T, int8_t>) scale_heads(s.v);
  for (int64_t t0 = 0; t0 < n; t0 += tile) {
    const int64_t nt = std::min(tile, n - t0);
    for (const KvHeadHeads& g : s.groups)
      ForHeadGroups(g.count, max_nh, [&](int64_t i0, auto pair) {
        constexpr int NH = decltype(pair)::value;
        const int64_t h = g.first + i0;
        const float* w[NH];
        for (int i = 0; i < NH; ++i) w[i] = pr[h + i] + t0;
        L::template Sum<T, NH>(w, s.v.data() + t0, g.off, nt, hd, out + h, t0 > 0);
      });
  }
}

// Rows that attend as a tile: at least this many (fewer go row by row).
constexpr int64_t kMinTileRows = 4;

std::vector<std::pair<int64_t, int64_t>>& Runs() {
  thread_local std::vector<std::pair<int64_t, int64_t>> runs;
  return runs;
}

int64_t CountKeys(const PagedAttentionRow* rows, int64_t n_rows, const KeySegment* segments) {
  int64_t keys = 0;
  for (int64_t i = 0; i < n_rows; ++i)
    for (int32_t j = rows[i].seg_begin; j < rows[i].seg_end; ++j)
      keys += segments[j].end - segments[j].begin;
  return keys;
}

// A row the tile kernel can take: positions fit its int32 lanes.
bool Tileable(const PagedAttentionRow& r, const KeySegment* segs) {
  if (r.head_keep) return false;
  for (int32_t j = r.seg_begin; j < r.seg_end; ++j)
    if (segs[j].begin < 0 || segs[j].end > std::numeric_limits<int32_t>::max()) return false;
  return true;
}

// Whether b's key list is a's up to where each segment ends.
bool SameKeys(const PagedAttentionRow& a, const PagedAttentionRow& b, const KeySegment* segs) {
  if (b.head_keep) return false;
  if (b.seg_end - b.seg_begin != a.seg_end - a.seg_begin) return false;
  for (int32_t j = 0; j < a.seg_end - a.seg_begin; ++j) {
    const KeySegment& x = segs[a.seg_begin + j];
    const KeySegment& y = segs[b.seg_begin + j];
    if (x.block_table != y.block_table || x.begin != y.begin || x.key_steps != y.key_steps ||
        (x.key_steps && x.min_step != y.min_step) || y.end > std::numeric_limits<int32_t>::max())
      return false;
  }
  return true;
}

// The row against KV heads [kvh_begin, kvh_end) and their query heads.
template <typename T>
void AttendRowAs(const AttentionShape& s, const PagedKvView& kv, const PagedAttentionRow& row,
                 const KeySegment* segments, int64_t kvh_begin, int64_t kvh_end, int64_t group) {
  const int64_t hd = s.head_dim;
  UnitScratch& sc = Scratch();
  // The heads; pruned ones (L2A head_keep) get zeros and no work.
  sc.head_q.clear();
  sc.head_out.clear();
  sc.groups.clear();
  for (int64_t kvh = kvh_begin; kvh < kvh_end; ++kvh) {
    const auto first = static_cast<int64_t>(sc.head_q.size());
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = kvh * group + g;
      if (row.head_keep && !row.head_keep[h]) {
        std::fill_n(row.out + h * hd, hd, 0.f);
        continue;
      }
      sc.head_q.push_back(row.q + h * hd);
      sc.head_out.push_back(row.out + h * hd);
    }
    const auto count = static_cast<int64_t>(sc.head_q.size()) - first;
    if (count > 0) sc.groups.push_back({kvh * hd, first, count});
  }
  if (sc.head_q.empty()) return;  // every head pruned: the keys are not even gathered
  const int64_t n = GatherKeys<T>(kv, row, segments, sc);
  const int64_t scales_at = s.n_kv_heads * hd;  // int8 rows: values, then scales
  if (UseAvx512Rows())
    AttendGathered<T, Leaves<true>>(hd, s.scale, n, scales_at, sc);
  else
    AttendGathered<T, Leaves<false>>(hd, s.scale, n, scales_at, sc);
}

void AttendRow(const AttentionShape& s, const PagedKvView& kv, const PagedAttentionRow& row,
               const KeySegment* segments, int64_t kvh_begin, int64_t kvh_end, int64_t group) {
  if (kv.dtype == DType::kBF16)
    AttendRowAs<uint16_t>(s, kv, row, segments, kvh_begin, kvh_end, group);
  else if (kv.dtype == DType::kI8)
    AttendRowAs<int8_t>(s, kv, row, segments, kvh_begin, kvh_end, group);
  else
    AttendRowAs<float>(s, kv, row, segments, kvh_begin, kvh_end, group);
}

// A unit of work: rows [first, first + count) (one row, or a tile of rows with the same keys)
// against KV heads [kvh_begin, kvh_end).
struct Unit {
  int64_t first, count, kvh_begin, kvh_end;
};

std::vector<Unit>& Units() {
  thread_local std::vector<Unit> units;
  return units;
}

// Query heads per KV head up to which a single row's unit takes several KV heads. With few
// heads per KV head the per-row kernel waits on memory: one KV head's slice of each key row
// (128-256 bytes every row_stride) is a pattern the hardware prefetchers hardly follow, and
// whole rows stream 1.2-1.6x faster (BENCHMARKS.md "Decode attention: whole key rows"). With
// 8 it is bound by its arithmetic, and the larger working set of whole rows cost 5-10%.
constexpr int64_t kMaxGroupForWholeRows = 4;

// Runs the runs (first row, row count): a tile (count > 1) per KV head; a single row with as
// many of its KV heads per unit as leave each thread about four units, all of them on one
// thread (so that its key rows are read whole), or one KV head per unit where the heads per
// KV head exceed kMaxGroupForWholeRows. A row's bits do not depend on the split.
void RunUnits(const AttentionShape& s, const PagedKvView& kv, const PagedAttentionRow* rows,
              int64_t n_rows, const KeySegment* segments,
              const std::vector<std::pair<int64_t, int64_t>>& runs) {
  const int64_t group = s.n_heads / s.n_kv_heads;
  const bool parallel =
      CountKeys(rows, n_rows, segments) * s.n_heads * s.head_dim >= (int64_t{1} << 16) &&
      (runs.size() > 1 || s.n_kv_heads > 1);
  const auto threads = static_cast<int64_t>(parallel ? omp_get_max_threads() : 1);
  const auto n_runs = static_cast<int64_t>(runs.size());
  // Units a single row is split into.
  int64_t splits = 1;
  if (group > kMaxGroupForWholeRows)
    splits = s.n_kv_heads;
  else if (threads > 1)
    splits = std::clamp<int64_t>((4 * threads + n_runs - 1) / n_runs, 1, s.n_kv_heads);
  const int64_t row_span = (s.n_kv_heads + splits - 1) / splits;
  std::vector<Unit>& units = Units();
  units.clear();
  for (const auto& [first, count] : runs) {
    const int64_t span = count > 1 ? 1 : row_span;  // a tile of rows runs one KV head at a time
    for (int64_t h = 0; h < s.n_kv_heads; h += span)
      units.push_back({first, count, h, std::min(s.n_kv_heads, h + span)});
  }
  const auto n_units = static_cast<int64_t>(units.size());
  ParallelFor(
      n_units, parallel && n_units > 1,
      [&](int64_t u) {
        const Unit& w = units[static_cast<size_t>(u)];
        if (w.count == 1)
          AttendRow(s, kv, rows[w.first], segments, w.kvh_begin, w.kvh_end, group);
        else
          internal::PagedAttentionTile(s, kv, rows + w.first, w.count, segments, w.kvh_begin);
      },
      1);
}

void CheckView(const AttentionShape& s, const PagedKvView& kv) {
  FATHOM_CHECK_MSG(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0,
                   "n_heads=" << s.n_heads << " n_kv_heads=" << s.n_kv_heads);
  FATHOM_CHECK_MSG(kv.dtype == DType::kF32 || kv.dtype == DType::kBF16 || kv.dtype == DType::kI8,
                   "KV dtype " << DTypeName(kv.dtype));
}

}  // namespace

namespace internal {

void PagedAttentionRowwise(const AttentionShape& s, const PagedKvView& kv,
                           const PagedAttentionRow* rows, int64_t n_rows,
                           const KeySegment* segments) {
  CheckView(s, kv);
  std::vector<std::pair<int64_t, int64_t>>& runs = Runs();  // (row, 1)
  runs.clear();
  for (int64_t i = 0; i < n_rows; ++i) runs.emplace_back(i, 1);
  RunUnits(s, kv, rows, n_rows, segments, runs);
}

bool PagedAttentionAvx512RowsSupported() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
}

void SetPagedAttentionAvx512RowsForTesting(bool enabled) { g_rows16_enabled.store(enabled); }

}  // namespace internal

void PagedAttention(const AttentionShape& s, const PagedKvView& kv, const PagedAttentionRow* rows,
                    int64_t n_rows, const KeySegment* segments, RowGrouping grouping) {
  CheckView(s, kv);
  const int64_t group = s.n_heads / s.n_kv_heads;
  const int64_t max_tile = internal::kMaxTileQueries / group;
  if (grouping == RowGrouping::kRowByRow || max_tile < kMinTileRows ||
      !internal::PagedAttentionTilesSupported()) {
    internal::PagedAttentionRowwise(s, kv, rows, n_rows, segments);
    return;
  }
  // Runs of compatible consecutive rows become tiles (at most max_tile rows); runs shorter
  // than kMinTileRows stay single rows.
  std::vector<std::pair<int64_t, int64_t>>& runs = Runs();  // (first row, row count)
  runs.clear();
  for (int64_t i = 0; i < n_rows;) {
    int64_t j = i + 1;
    if (Tileable(rows[i], segments))
      while (j < n_rows && j - i < max_tile && SameKeys(rows[i], rows[j], segments)) ++j;
    if (j - i < kMinTileRows)
      for (int64_t r = i; r < j; ++r) runs.emplace_back(r, 1);
    else
      runs.emplace_back(i, j - i);
    i = j;
  }
  RunUnits(s, kv, rows, n_rows, segments, runs);
}

void PagedAttentionReference(const AttentionShape& s, const PagedKvView& kv,
                             const PagedAttentionRow* rows, int64_t n_rows,
                             const KeySegment* segments) {
  CheckView(s, kv);
  const int64_t group = s.n_heads / s.n_kv_heads, hd = s.head_dim;
  // Element `at` of a K or V base as double (bf16 widened exactly); int8: times the scale of
  // KV head kvh of the row starting at element `row` (values, then n_kv_heads f32 scales).
  const auto value = [&](const void* base, int64_t row, int64_t kvh, int64_t at) -> double {
    switch (kv.dtype) {
      case DType::kBF16:
        return BF16ToF32(static_cast<const uint16_t*>(base)[at]);
      case DType::kI8: {
        const auto* b = static_cast<const char*>(base);
        float sc;
        std::memcpy(&sc, b + row + s.n_kv_heads * hd + 4 * kvh, sizeof sc);
        return static_cast<double>(static_cast<const int8_t*>(base)[at]) * sc;
      }
      default:
        return static_cast<const float*>(base)[at];
    }
  };
  for (int64_t i = 0; i < n_rows; ++i) {
    const PagedAttentionRow& r = rows[i];
    for (int64_t h = 0; h < s.n_heads; ++h) {
      if (r.head_keep && !r.head_keep[h]) {
        std::fill_n(r.out + h * hd, hd, 0.f);
        continue;
      }
      const int64_t kvh = h / group, off = kvh * hd;
      std::vector<int64_t> keys;  // element offsets of the visible keys' rows
      for (int32_t j = r.seg_begin; j < r.seg_end; ++j) {
        const KeySegment& g = segments[j];
        for (int64_t p = g.begin; p < g.end; ++p) {
          if (g.key_steps && g.key_steps[p] <= g.min_step) continue;
          keys.push_back(g.block_table[p / kv.block_size] * kv.block_stride +
                         (p % kv.block_size) * kv.row_stride);
        }
      }
      std::vector<double> sc(keys.size());
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (size_t t = 0; t < keys.size(); ++t) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d)
          dot += static_cast<double>(r.q[h * hd + d]) *
                 value(kv.k_base, keys[t], kvh, keys[t] + off + d);
        sc[t] = dot * s.scale;
        mx = std::max(mx, sc[t]);
      }
      for (double& x : sc) sum += x = std::exp(x - mx);
      for (int64_t d = 0; d < hd; ++d) {
        double acc = 0;
        for (size_t t = 0; t < keys.size(); ++t)
          acc += sc[t] * value(kv.v_base, keys[t], kvh, keys[t] + off + d);
        r.out[h * hd + d] = keys.empty() ? 0.f : static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace fathom
