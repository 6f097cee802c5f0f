// Causal attention with grouped KV heads, in f32 with AVX2/FMA.
//
// Work unit: one query row and `hp` query heads that share one KV head (hp = the whole
// group unless that leaves threads idle). For a unit, keys are walked in blocks of
// kKeyBlock so that a block of K (then of V) is read from memory once and reused from L1 by
// every head of the unit. Softmax is two-pass: all scores, then max / exp / sum, then P·V.
#include "kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/parallel.h"
#include "kernels/vec_math.h"

namespace fathom {
namespace {

constexpr int64_t kKeyBlock = 64;  // keys per block: 64 x head_dim 128 x 4 B = 32 KiB of K
constexpr int64_t kChunk = 32;     // output floats kept in registers while walking keys

// The four dot products q·k0..q·k3 (head_dim hd), one register each, reduced together.
inline __m128 Dot4(const float* q, const float* k0, const float* k1, const float* k2,
                   const float* k3, int64_t hd) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t d = 0;
  for (; d + 8 <= hd; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
    s0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + d), s0);
    s1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + d), s1);
    s2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2 + d), s2);
    s3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3 + d), s3);
  }
  if (d < hd) {
    const __m256i m = internal::TailMask(hd - d);
    const __m256 qv = _mm256_maskload_ps(q + d, m);
    s0 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k0 + d, m), s0);
    s1 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k1 + d, m), s1);
    s2 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k2 + d, m), s2);
    s3 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k3 + d, m), s3);
  }
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(s0, s1), _mm256_hadd_ps(s2, s3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// scores[t] = scale * q·k_t for keys t0..t1-1 (k_t at k + t * stride).
void ScoreBlock(const float* q, const float* k, int64_t stride, int64_t t0, int64_t t1, int64_t hd,
                float scale, float* scores) {
  int64_t t = t0;
  for (; t + 4 <= t1; t += 4) {
    const float* kt = k + t * stride;
    const __m128 s = Dot4(q, kt, kt + stride, kt + 2 * stride, kt + 3 * stride, hd);
    _mm_storeu_ps(scores + t, _mm_mul_ps(s, _mm_set1_ps(scale)));
  }
  for (; t < t1; ++t) scores[t] = internal::Dot(q, k + t * stride, hd) * scale;
}

// out[0..w) += Σ_t p[t] * v_t[c0..c0+w) for keys t0..t1-1, w <= kChunk floats held in NV
// registers (the last one masked when w is not a multiple of 8).
template <int NV>
void PvChunk(const float* p, const float* v, int64_t stride, int64_t t0, int64_t t1, int64_t w,
             float* out) {
  const __m256i tail = internal::TailMask(w - 8 * (NV - 1));
  __m256 acc[NV];
  for (int j = 0; j < NV - 1; ++j) acc[j] = _mm256_loadu_ps(out + 8 * j);
  acc[NV - 1] = _mm256_maskload_ps(out + 8 * (NV - 1), tail);
  for (int64_t t = t0; t < t1; ++t) {
    const __m256 pt = _mm256_set1_ps(p[t]);
    const float* vt = v + t * stride;
    for (int j = 0; j < NV - 1; ++j)
      acc[j] = _mm256_fmadd_ps(pt, _mm256_loadu_ps(vt + 8 * j), acc[j]);
    acc[NV - 1] = _mm256_fmadd_ps(pt, _mm256_maskload_ps(vt + 8 * (NV - 1), tail), acc[NV - 1]);
  }
  for (int j = 0; j < NV - 1; ++j) _mm256_storeu_ps(out + 8 * j, acc[j]);
  _mm256_maskstore_ps(out + 8 * (NV - 1), tail, acc[NV - 1]);
}

// out[0..hd) += Σ_t p[t] v_t over keys t0..t1-1, kChunk output floats at a time.
void PvBlock(const float* p, const float* v, int64_t stride, int64_t t0, int64_t t1, int64_t hd,
             float* out) {
  for (int64_t c = 0; c < hd; c += kChunk) {
    const int64_t w = std::min(kChunk, hd - c);
    switch ((w + 7) / 8) {
      case 1:
        PvChunk<1>(p, v + c, stride, t0, t1, w, out + c);
        break;
      case 2:
        PvChunk<2>(p, v + c, stride, t0, t1, w, out + c);
        break;
      case 3:
        PvChunk<3>(p, v + c, stride, t0, t1, w, out + c);
        break;
      default:
        PvChunk<4>(p, v + c, stride, t0, t1, w, out + c);
        break;
    }
  }
}

// One unit: hp query heads sharing one KV head, n visible keys.
// q, out: [hp, hd]; k, v: key t at k + t * stride; scores: scratch of hp * n floats.
void AttendUnit(const float* q, const float* k, const float* v, int64_t stride, int64_t n,
                int64_t hd, int64_t hp, float scale, float* scores, float* out) {
  std::fill(out, out + hp * hd, 0.f);
  if (n <= 0) return;  // nothing visible: zeros rather than 0/0
  for (int64_t t0 = 0; t0 < n; t0 += kKeyBlock)
    for (int64_t g = 0; g < hp; ++g)
      ScoreBlock(q + g * hd, k, stride, t0, std::min(n, t0 + kKeyBlock), hd, scale, scores + g * n);
  float inv_sum[64];  // hp <= n_heads / n_kv_heads; checked by the caller
  for (int64_t g = 0; g < hp; ++g) inv_sum[g] = 1.f / internal::ExpShiftedInPlace(scores + g * n, n);
  for (int64_t t0 = 0; t0 < n; t0 += kKeyBlock)
    for (int64_t g = 0; g < hp; ++g)
      PvBlock(scores + g * n, v, stride, t0, std::min(n, t0 + kKeyBlock), hd, out + g * hd);
  for (int64_t g = 0; g < hp; ++g)
    for (int64_t d = 0; d < hd; ++d) out[g * hd + d] *= inv_sum[g];
}

// Per-thread score buffer, grown to the largest unit seen (no steady-state allocation).
float* ThreadScores(int64_t n) {
  thread_local std::vector<float> scores;
  if (static_cast<int64_t>(scores.size()) < n) scores.resize(static_cast<size_t>(n));
  return scores.data();
}

}  // namespace

// q, out: [n_q, n_heads, head_dim]; k, v: [n_ctx, n_kv_heads, head_dim] at kv_row_stride.
void Attention(const AttentionShape& s, const float* q, int64_t n_q, const int32_t* n_visible,
               const float* k, const float* v, int64_t kv_row_stride, float* out) {
  FATHOM_CHECK_MSG(
      s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0 && s.head_dim > 0 &&
          s.n_heads / s.n_kv_heads <= 64,
      "n_heads=" << s.n_heads << " n_kv_heads=" << s.n_kv_heads << " head_dim=" << s.head_dim);
  const int64_t group = s.n_heads / s.n_kv_heads, hd = s.head_dim;
  int64_t work = 0;  // multiply-adds, to decide whether threads pay off
  for (int64_t i = 0; i < n_q; ++i) work += n_visible[i];
  work *= s.n_heads * hd;
  const bool parallel = work >= (int64_t{1} << 17);
  // Split groups (keeping hp a divisor of the group) until every thread has two units.
  const int64_t threads = parallel ? omp_get_max_threads() : 1;
  int64_t hp = group;
  while (hp % 2 == 0 && n_q * (s.n_heads / hp) < 2 * threads) hp /= 2;
  const int64_t units_per_row = s.n_heads / hp, units = n_q * units_per_row;
  // Rows see different numbers of keys (causal prefill), so hand out units dynamically.
  ParallelFor(
      units, parallel && units > 1,
      [&](int64_t u) {
        const int64_t i = u / units_per_row, h0 = (u % units_per_row) * hp;
        const int64_t kv_off = (h0 / group) * hd, n = n_visible[i];
        const int64_t at = (i * s.n_heads + h0) * hd;
        AttendUnit(q + at, k + kv_off, v + kv_off, kv_row_stride, n, hd, hp, s.scale,
                   ThreadScores(hp * std::max<int64_t>(n, 1)), out + at);
      },
      1);
}

void AttentionReference(const AttentionShape& s, const float* q, int64_t n_q,
                        const int32_t* n_visible, const float* k, const float* v,
                        int64_t kv_row_stride, float* out) {
  const int64_t group = s.n_heads / s.n_kv_heads, hd = s.head_dim;
  std::vector<double> scores, acc(static_cast<size_t>(hd));
  for (int64_t i = 0; i < n_q; ++i) {
    const int64_t n = n_visible[i];
    scores.assign(static_cast<size_t>(n > 0 ? n : 0), 0.0);
    for (int64_t h = 0; h < s.n_heads; ++h) {
      const float* qh = q + (i * s.n_heads + h) * hd;
      const int64_t kv_off = (h / group) * hd;
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t t = 0; t < n; ++t) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d)
          dot += static_cast<double>(qh[d]) * k[t * kv_row_stride + kv_off + d];
        scores[t] = dot * s.scale;
        mx = scores[t] > mx ? scores[t] : mx;
      }
      for (double& a : acc) a = 0;
      for (int64_t t = 0; t < n; ++t) {
        const double e = std::exp(scores[t] - mx);
        sum += e;
        for (int64_t d = 0; d < hd; ++d) acc[d] += e * v[t * kv_row_stride + kv_off + d];
      }
      for (int64_t d = 0; d < hd; ++d)
        out[(i * s.n_heads + h) * hd + d] = n > 0 ? static_cast<float>(acc[d] / sum) : 0.f;
    }
  }
}

}  // namespace fathom
