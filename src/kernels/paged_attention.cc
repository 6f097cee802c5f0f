// Paged attention in f32 with AVX2/FMA. Work unit: one row and one KV head with the query
// heads that share it. The unit first resolves its key list (segments, block tables, hole
// masks) into per-thread arrays of K and V row pointers, then runs a two-pass softmax:
// scores for all keys, exp and sum, then the weighted sum of V. K/V elements are f32 or
// bf16 (template T = float / uint16_t): bf16 is widened 8 values at a time (zero-extend
// to 32 bits, shift left 16: exact), so both read paths do the same f32 arithmetic.
//
// The scalar tails (head_dim % 8) use std::fma, not a * b + c, so that no instantiation's
// contraction choice can change a result's bits.
//
// bf16 K/V shared by kMinSharedGroup or more query heads (GQA): widening is most of the
// work of a bf16 dot product, so the unit widens its keys once, kKeyTile at a time into f32
// (in L1), and every head of the group reads the tile; then the same for V. Each head's scores and sums
// are the same instructions on the same values as the per-head path, so the bits are too.
//
// Prefill: runs of consecutive rows with the same keys up to their ends (one sequence's
// prompt positions, causal) go to the tiled kernel (paged_attention_tiled.cc, AVX-512F),
// which reads each key once per tile of rows instead of once per row.
#include "kernels/paged_attention.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kernels/vec_math.h"

namespace fathom {
namespace {

// Keys widened at a time for all the heads of a group: [kKeyTile, head_dim] f32, 16 KB at
// head_dim 128. A multiple of Scores' 4 keys per pass, so only the last tile has a tail.
constexpr int64_t kKeyTile = 32;
// Query heads per KV head from which tiles pay: measured on an AVX2 host
// (benchmarks/kernels/decode_attention_bench.cc), 1.2-1.7x at 4-8 heads and 2k-8k keys, but
// 0.75-1.16x at 2 heads (one saved widening does not pay for the tile's store and reload).
constexpr int64_t kMinSharedGroup = 4;

struct UnitScratch {
  std::vector<const void*> k, v;  // key rows of the unit's KV head (elements T)
  std::vector<float> p;           // [heads][n_keys] scores, then probabilities
  std::vector<float> tile;        // [kKeyTile][head_dim] widened K or V rows
  std::vector<const void*> rows;  // [kKeyTile] the tile's rows
};

std::atomic<bool> g_shared_key_tiles{true};

inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline float Load1(const float* p) { return *p; }
inline float Load1(const uint16_t* p) { return BF16ToF32(*p); }

template <typename T>
const T* Elems(const void* p) {
  return static_cast<const T*>(p);
}

UnitScratch& Scratch() {
  thread_local UnitScratch s;
  return s;
}

// Resolves the row's keys into K/V row pointers at KV-head offset `off`; returns the count.
template <typename T>
int64_t GatherKeys(const PagedKvView& kv, const PagedAttentionRow& row, const KeySegment* segs,
                   int64_t off, UnitScratch& s) {
  int64_t n = 0;
  for (int32_t i = row.seg_begin; i < row.seg_end; ++i) n += segs[i].end - segs[i].begin;
  if (static_cast<int64_t>(s.k.size()) < n) s.k.resize(static_cast<size_t>(n)), s.v.resize(static_cast<size_t>(n));
  int64_t m = 0;
  for (int32_t i = row.seg_begin; i < row.seg_end; ++i) {
    const KeySegment& g = segs[i];
    for (int64_t p = g.begin; p < g.end; ++p) {
      if (g.key_steps && g.key_steps[p] <= g.min_step) continue;  // a hole: never written
      const int64_t at = g.block_table[p / kv.block_size] * kv.block_stride +
                         (p % kv.block_size) * kv.row_stride + off;
      s.k[static_cast<size_t>(m)] = Elems<T>(kv.k_base) + at;
      s.v[static_cast<size_t>(m)] = Elems<T>(kv.v_base) + at;
      ++m;
    }
  }
  return m;
}

// scores[t] = scale * q . k_t over the gathered keys, four keys per pass so q is loaded once.
// kDotTail: keys past the last pass of four by internal::Dot (the f32 path as it always was)
// rather than by the bf16 path's sequence (which widened bf16 keys must keep, for its bits).
template <typename T, bool kDotTail = std::is_same_v<T, float>>
void Scores(const float* q, const void* const* kp, int64_t n, int64_t hd, float scale, float* p) {
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    const T* k[4] = {Elems<T>(kp[t]), Elems<T>(kp[t + 1]), Elems<T>(kp[t + 2]), Elems<T>(kp[t + 3])};
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) {
      const __m256 qv = _mm256_loadu_ps(q + d);
      s0 = _mm256_fmadd_ps(qv, Load8(k[0] + d), s0);
      s1 = _mm256_fmadd_ps(qv, Load8(k[1] + d), s1);
      s2 = _mm256_fmadd_ps(qv, Load8(k[2] + d), s2);
      s3 = _mm256_fmadd_ps(qv, Load8(k[3] + d), s3);
    }
    float tail[4] = {0, 0, 0, 0};
    for (; d < hd; ++d)
      for (int j = 0; j < 4; ++j) tail[j] = std::fma(q[d], Load1(k[j] + d), tail[j]);
    p[t] = (internal::HSum(s0) + tail[0]) * scale;
    p[t + 1] = (internal::HSum(s1) + tail[1]) * scale;
    p[t + 2] = (internal::HSum(s2) + tail[2]) * scale;
    p[t + 3] = (internal::HSum(s3) + tail[3]) * scale;
  }
  for (; t < n; ++t) {
    const T* k = Elems<T>(kp[t]);
    if constexpr (kDotTail) {
      p[t] = internal::Dot(q, k, hd) * scale;  // f32 as before the bf16 path existed
      continue;
    }
    __m256 acc = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), Load8(k + d), acc);
    float tail = 0;
    for (; d < hd; ++d) tail = std::fma(q[d], Load1(k + d), tail);
    p[t] = (internal::HSum(acc) + tail) * scale;
  }
}

// out[c .. c+8*NV) = sum_t w[t] * v_t[c .. c+8*NV), accumulated in NV registers; added to
// out's values (the sums of earlier keys) when `resume`, in the same order as one pass.
template <typename T, int NV>
void WeightedSumChunk(const float* w, const void* const* v, int64_t n, int64_t c, float* out,
                      bool resume) {
  __m256 acc[NV];
  for (int j = 0; j < NV; ++j) acc[j] = resume ? _mm256_loadu_ps(out + c + 8 * j) : _mm256_setzero_ps();
  for (int64_t t = 0; t < n; ++t) {
    const __m256 wt = _mm256_set1_ps(w[t]);
    const T* vt = Elems<T>(v[t]) + c;
    for (int j = 0; j < NV; ++j) acc[j] = _mm256_fmadd_ps(wt, Load8(vt + 8 * j), acc[j]);
  }
  for (int j = 0; j < NV; ++j) _mm256_storeu_ps(out + c + 8 * j, acc[j]);
}

template <typename T>
void WeightedSum(const float* w, const void* const* v, int64_t n, int64_t hd, float* out,
                 bool resume = false) {
  int64_t c = 0;
  for (; c + 32 <= hd; c += 32) WeightedSumChunk<T, 4>(w, v, n, c, out, resume);
  for (; c + 8 <= hd; c += 8) WeightedSumChunk<T, 1>(w, v, n, c, out, resume);
  for (; c < hd; ++c) {
    float acc = resume ? out[c] : 0.f;
    for (int64_t t = 0; t < n; ++t) acc = std::fma(w[t], Load1(Elems<T>(v[t]) + c), acc);
    out[c] = acc;
  }
}

// softmax(scale * q k^T) v for `hp` query heads sharing the gathered keys.
template <typename T>
void AttendGathered(const float* q, int64_t hp, int64_t hd, float scale, int64_t n,
                    UnitScratch& s, float* out) {
  if (n == 0) {
    std::fill(out, out + hp * hd, 0.f);
    return;
  }
  if (static_cast<int64_t>(s.p.size()) < n) s.p.resize(static_cast<size_t>(n));
  float* p = s.p.data();
  for (int64_t g = 0; g < hp; ++g) {
    Scores<T>(q + g * hd, s.k.data(), n, hd, scale, p);
    const float inv = 1.f / internal::ExpShiftedInPlace(p, n);
    for (int64_t t = 0; t < n; ++t) p[t] *= inv;
    WeightedSum<T>(p, s.v.data(), n, hd, out + g * hd);
  }
}

// Rows [t0, t0 + nt) of the gathered bf16 list widened into s.tile; s.rows points at them.
void WidenTile(const void* const* src, int64_t t0, int64_t nt, int64_t hd, UnitScratch& s) {
  for (int64_t j = 0; j < nt; ++j) {
    const uint16_t* r = Elems<uint16_t>(src[t0 + j]);
    float* dst = s.tile.data() + j * hd;
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) _mm256_storeu_ps(dst + d, Load8(r + d));
    for (; d < hd; ++d) dst[d] = Load1(r + d);
    s.rows[static_cast<size_t>(j)] = dst;
  }
}

// AttendGathered for bf16 K/V and hp >= kMinSharedGroup heads: each tile of keys (then of values) widened
// once for all hp heads. Same results, bit for bit, as AttendGathered<uint16_t>.
void AttendGatheredSharedTiles(const float* q, int64_t hp, int64_t hd, float scale, int64_t n,
                               UnitScratch& s, float* out) {
  if (n == 0) {
    std::fill(out, out + hp * hd, 0.f);
    return;
  }
  if (static_cast<int64_t>(s.p.size()) < hp * n) s.p.resize(static_cast<size_t>(hp * n));
  if (static_cast<int64_t>(s.tile.size()) < kKeyTile * hd) s.tile.resize(static_cast<size_t>(kKeyTile * hd));
  if (s.rows.size() < static_cast<size_t>(kKeyTile)) s.rows.resize(static_cast<size_t>(kKeyTile));
  float* p = s.p.data();  // head g's probabilities at p + g * n
  for (int64_t t0 = 0; t0 < n; t0 += kKeyTile) {
    const int64_t nt = std::min(kKeyTile, n - t0);
    WidenTile(s.k.data(), t0, nt, hd, s);
    for (int64_t g = 0; g < hp; ++g) Scores<float, false>(q + g * hd, s.rows.data(), nt, hd, scale, p + g * n + t0);
  }
  for (int64_t g = 0; g < hp; ++g) {
    float* pg = p + g * n;
    const float inv = 1.f / internal::ExpShiftedInPlace(pg, n);
    for (int64_t t = 0; t < n; ++t) pg[t] *= inv;
  }
  for (int64_t t0 = 0; t0 < n; t0 += kKeyTile) {
    const int64_t nt = std::min(kKeyTile, n - t0);
    WidenTile(s.v.data(), t0, nt, hd, s);
    for (int64_t g = 0; g < hp; ++g) WeightedSum<float>(p + g * n + t0, s.rows.data(), nt, hd, out + g * hd, t0 > 0);
  }
}

// Rows that attend as a tile: at least this many (fewer go row by row).
constexpr int64_t kMinTileRows = 4;

std::atomic<bool> g_tiles_enabled{true};

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

template <typename T>
void AttendRowAs(const AttentionShape& s, const PagedKvView& kv, const PagedAttentionRow& row,
                 const KeySegment* segments, int64_t kvh, int64_t group) {
  const int64_t hd = s.head_dim;
  UnitScratch& sc = Scratch();
  if (row.head_keep) {  // pruned heads: zeros, and no work; the keys only if some head is kept
    const uint8_t* keep = row.head_keep + kvh * group;
    if (std::none_of(keep, keep + group, [](uint8_t k) { return k != 0; })) {
      std::fill_n(row.out + kvh * group * hd, group * hd, 0.f);
      return;
    }
    const int64_t n = GatherKeys<T>(kv, row, segments, kvh * hd, sc);
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = kvh * group + g;
      if (keep[g])
        AttendGathered<T>(row.q + h * hd, 1, hd, s.scale, n, sc, row.out + h * hd);
      else
        std::fill_n(row.out + h * hd, hd, 0.f);
    }
    return;
  }
  const int64_t n = GatherKeys<T>(kv, row, segments, kvh * hd, sc);
  if constexpr (std::is_same_v<T, uint16_t>) {
    if (group >= kMinSharedGroup && g_shared_key_tiles.load(std::memory_order_relaxed)) {
      AttendGatheredSharedTiles(row.q + kvh * group * hd, group, hd, s.scale, n, sc, row.out + kvh * group * hd);
      return;
    }
  }
  AttendGathered<T>(row.q + kvh * group * hd, group, hd, s.scale, n, sc, row.out + kvh * group * hd);
}

void AttendRow(const AttentionShape& s, const PagedKvView& kv, const PagedAttentionRow& row,
               const KeySegment* segments, int64_t kvh, int64_t group) {
  if (kv.dtype == DType::kBF16)
    AttendRowAs<uint16_t>(s, kv, row, segments, kvh, group);
  else
    AttendRowAs<float>(s, kv, row, segments, kvh, group);
}

void CheckView(const AttentionShape& s, const PagedKvView& kv) {
  FATHOM_CHECK_MSG(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0,
                   "n_heads=" << s.n_heads << " n_kv_heads=" << s.n_kv_heads);
  FATHOM_CHECK_MSG(kv.dtype == DType::kF32 || kv.dtype == DType::kBF16,
                   "KV dtype " << DTypeName(kv.dtype));
}

}  // namespace

namespace internal {

void PagedAttentionRowwise(const AttentionShape& s, const PagedKvView& kv,
                           const PagedAttentionRow* rows, int64_t n_rows,
                           const KeySegment* segments) {
  CheckView(s, kv);
  const int64_t group = s.n_heads / s.n_kv_heads, hd = s.head_dim;
  const int64_t units = n_rows * s.n_kv_heads;
  const bool parallel = CountKeys(rows, n_rows, segments) * s.n_heads * hd >= (int64_t{1} << 16) &&
                        units > 1;
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int64_t u = 0; u < units; ++u) {
    const int64_t i = u / s.n_kv_heads, kvh = u % s.n_kv_heads;
    AttendRow(s, kv, rows[i], segments, kvh, group);
  }
}

void SetPagedAttentionTilesForTesting(bool enabled) { g_tiles_enabled.store(enabled); }

void SetSharedKeyTilesForTesting(bool enabled) { g_shared_key_tiles.store(enabled); }

}  // namespace internal

void PagedAttention(const AttentionShape& s, const PagedKvView& kv, const PagedAttentionRow* rows,
                    int64_t n_rows, const KeySegment* segments) {
  CheckView(s, kv);
  const int64_t group = s.n_heads / s.n_kv_heads, hd = s.head_dim;
  const int64_t max_tile = internal::kMaxTileQueries / group;
  if (max_tile < kMinTileRows || !g_tiles_enabled.load(std::memory_order_relaxed) ||
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
  const auto n_runs = static_cast<int64_t>(runs.size());
  const int64_t units = n_runs * s.n_kv_heads;
  const bool parallel = CountKeys(rows, n_rows, segments) * s.n_heads * hd >= (int64_t{1} << 16) &&
                        units > 1;
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int64_t u = 0; u < units; ++u) {
    const auto [first, count] = runs[static_cast<size_t>(u / s.n_kv_heads)];
    const int64_t kvh = u % s.n_kv_heads;
    if (count == 1)
      AttendRow(s, kv, rows[first], segments, kvh, group);
    else
      internal::PagedAttentionTile(s, kv, rows + first, count, segments, kvh);
  }
}

void PagedAttentionReference(const AttentionShape& s, const PagedKvView& kv,
                             const PagedAttentionRow* rows, int64_t n_rows,
                             const KeySegment* segments) {
  CheckView(s, kv);
  const int64_t group = s.n_heads / s.n_kv_heads, hd = s.head_dim;
  const bool bf16 = kv.dtype == DType::kBF16;
  // Element `at` of a K or V base as double (bf16 widened exactly).
  const auto value = [bf16](const void* base, int64_t at) -> double {
    return bf16 ? BF16ToF32(static_cast<const uint16_t*>(base)[at]) : static_cast<const float*>(base)[at];
  };
  for (int64_t i = 0; i < n_rows; ++i) {
    const PagedAttentionRow& r = rows[i];
    for (int64_t h = 0; h < s.n_heads; ++h) {
      if (r.head_keep && !r.head_keep[h]) {
        std::fill_n(r.out + h * hd, hd, 0.f);
        continue;
      }
      const int64_t off = (h / group) * hd;
      std::vector<int64_t> keys;  // element offsets of the visible keys' rows
      for (int32_t j = r.seg_begin; j < r.seg_end; ++j) {
        const KeySegment& g = segments[j];
        for (int64_t p = g.begin; p < g.end; ++p) {
          if (g.key_steps && g.key_steps[p] <= g.min_step) continue;
          keys.push_back(g.block_table[p / kv.block_size] * kv.block_stride +
                         (p % kv.block_size) * kv.row_stride + off);
        }
      }
      std::vector<double> sc(keys.size());
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (size_t t = 0; t < keys.size(); ++t) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d)
          dot += static_cast<double>(r.q[h * hd + d]) * value(kv.k_base, keys[t] + d);
        sc[t] = dot * s.scale;
        mx = std::max(mx, sc[t]);
      }
      for (double& x : sc) sum += x = std::exp(x - mx);
      for (int64_t d = 0; d < hd; ++d) {
        double acc = 0;
        for (size_t t = 0; t < keys.size(); ++t) acc += sc[t] * value(kv.v_base, keys[t] + d);
        r.out[h * hd + d] = keys.empty() ? 0.f : static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace fathom
