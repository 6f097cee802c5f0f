// Private to kernels/: AVX2/FMA helpers (the x86-64-v3 baseline) shared by the f32 kernels.
// The compiler does not vectorize float reductions or std::exp without -ffast-math, so the
// hot loops use these instead.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace fathom::internal {

inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lanes 0..rem-1 set (0 <= rem <= 8), for masked loads of a row's tail.
inline __m256i TailMask(int64_t rem) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rem)), lanes);
}

// exp(x) for 8 lanes, Cephes' expf polynomial: within ~2 ulp of the true value on
// [-87.3, 88]; inputs below -87.3 (and -inf) give exactly 0, above 88 are clamped; NaN
// propagates.
inline __m256 Exp(__m256 x) {
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
  // min/max return their second operand when one is NaN: keep x second.
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
  x = _mm256_max_ps(_mm256_set1_ps(-87.3f), x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n*ln2 with ln2 split in two (Cody-Waite) so r keeps its low bits.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  // 2^n built in the exponent field; n is in [-126, 127] after the clamps.
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(underflow, y);
}

// Scalar exp with the same clamps, for loop tails, so a row gives the same values whatever
// its length.
inline float ExpScalar(float x) {
  alignas(32) float buf[8] = {x, 0, 0, 0, 0, 0, 0, 0};
  _mm256_store_ps(buf, Exp(_mm256_load_ps(buf)));
  return buf[0];
}

// Σ a[i] * b[i] in f32, two accumulators, masked tail.
inline float Dot(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  if (i < n) {
    const __m256i m = TailMask(n - i);
    s1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), s1);
  }
  return HSum(_mm256_add_ps(s0, s1));
}

// Σ x[i]^2 in f32.
inline float SumSquares(const float* x, int64_t n) { return Dot(x, x, n); }

// y[i] += alpha * x[i].
inline void Axpy(float alpha, const float* x, float* y, int64_t n) {
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::fma(alpha, x[i], y[i]);
}

// p[t] = exp(p[t] - max_t p[t]) over n values, in place; returns the sum (the softmax
// normaliser). Shared by the attention kernels.
inline float ExpShiftedInPlace(float* p, int64_t n) {
  // The maximum, NaN ignored (as `p[t] > mx ? p[t] : mx` would): max_ps returns its second
  // operand when one is NaN, and the running maximum is never NaN.
  __m256 vm = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(_mm256_loadu_ps(p + i), vm);
  float mx = HMax(vm);
  for (; i < n; ++i) mx = p[i] > mx ? p[i] : mx;
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  int64_t t = 0;
  for (; t + 8 <= n; t += 8) {
    const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(p + t), vmx));
    _mm256_storeu_ps(p + t, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = HSum(acc);
  for (; t < n; ++t) sum += p[t] = ExpScalar(p[t] - mx);
  return sum;
}

}  // namespace fathom::internal
