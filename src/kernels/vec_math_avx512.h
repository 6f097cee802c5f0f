// Private to kernels/: AVX-512F helpers, for functions that carry an AVX-512 target attribute
// and run only after a run-time check (the project's baseline is x86-64-v3, vec_math.h).
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

// GCC 12 reports the _mm512_undefined_*() inside its own AVX-512 intrinsics (max, min,
// roundscale, cvtps; the extracts of the reductions) as (maybe-)uninitialized when they are
// inlined under -O3.
#pragma GCC diagnostic push
#if !defined(__clang__)  // a GCC warning; clang has no such group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace fathom::internal {

// exp(x) on 16 lanes: the Cephes polynomial of vec_math.h's Exp, same clamps; inputs
// below -87.3 (and -inf) give exactly 0.
__attribute__((target("avx512f"))) inline __m512 Exp16(__m512 x) {
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_set1_ps(88.0f), x);
  x = _mm512_max_ps(_mm512_set1_ps(-87.3f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow),
                             _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
}

// p[t] = exp(p[t] - max_t p[t]) / sum over n > 0 values, in place: the softmax of a row of
// scores, 16 lanes a step (the tail masked). Every exp is vec_math.h's (the same polynomial
// and clamps); the maximum ignores NaN as ExpShiftedInPlace's does; the sum runs in 16 lanes
// (another order than ExpShiftedInPlace's 8).
__attribute__((target("avx512f"))) inline void Softmax16(float* p, int64_t n) {
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 vm = neg_inf;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) vm = _mm512_max_ps(_mm512_loadu_ps(p + i), vm);
  const auto tail = static_cast<__mmask16>((1u << (n - i)) - 1);  // n - i < 16
  if (i < n) vm = _mm512_max_ps(_mm512_mask_loadu_ps(neg_inf, tail, p + i), vm);
  const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vm));
  __m512 acc = _mm512_setzero_ps();
  for (i = 0; i + 16 <= n; i += 16) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_loadu_ps(p + i), mx));
    _mm512_storeu_ps(p + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (i < n) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, p + i), mx));
    _mm512_mask_storeu_ps(p + i, tail, e);
    acc = _mm512_mask_add_ps(acc, tail, acc, e);
  }
  const __m512 inv = _mm512_set1_ps(1.f / _mm512_reduce_add_ps(acc));
  for (i = 0; i + 16 <= n; i += 16)
    _mm512_storeu_ps(p + i, _mm512_mul_ps(_mm512_loadu_ps(p + i), inv));
  if (i < n)
    _mm512_mask_storeu_ps(p + i, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, p + i), inv));
}

}  // namespace fathom::internal

#pragma GCC diagnostic pop
