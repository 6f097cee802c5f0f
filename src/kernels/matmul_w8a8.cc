// W8A8 matmul: the quantizers, the AVX512-VNNI kernel and the exact scalar path (see
// matmul_w8a8.h for the arithmetic both follow step for step).
//
// The AVX2 kernel: one 16-channel block (two ymm halves) for up to 2 rows; per 4 k and row,
// |xq| and sign(xq) * wq through vpmaddubsw (pairs, at most 2 * 127 * 127: no saturation),
// then vpmaddwd against ones for the 4-k sums; no offset correction is needed.
//
// Register blocking of the VNNI kernel: two 16-channel blocks for up to kMaxRows = 4 rows at
// a time. Per row and block one int32 group accumulator and one f32 total (16 zmm), plus the
// two weight vectors, their two 128 * sum(w) correction accumulators, the 0x80 constant and
// the broadcast activations: under the 32 zmm registers. A pass reads each 64-byte weight
// vector once for all its rows; the passes after the first over the same block pair find it
// in L2 (2 x 16 Kp bytes: 64 KiB at K = 2048).
#include "kernels/matmul_w8a8.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/parallel.h"
#include "kernels/matmul_int8.h"

// GCC 12 reports the _mm512_undefined_*() inside its own AVX-512 intrinsics (set1, cvt, max,
// reduce) as maybe-uninitialized when they are inlined under -O3.
#if !defined(__clang__)  // a GCC warning; clang has no such group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define FATHOM_TARGET_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

namespace fathom {
namespace {

constexpr int64_t kMaxRows = 4;         // rows per pass over a block pair
constexpr int64_t kStepsPerGroup = kW8A8Group / 4;  // vpdpbusd steps (4 k each) per group
constexpr int64_t kGroupBytes = kW8A8Group * kW8A8BlockN;  // 512: one group of one block
// The VNNI kernel prefetches each block kPrefetchGroups groups (2 KiB) ahead: the hardware
// prefetchers alone keep too few lines in flight for a loop this dense in instructions (the
// int4 kernel's measurement, matmul_int4.cc); past a block's end it touches the next block.
constexpr int64_t kPrefetchGroups = 4;
// Below this many activation values a group is all zeros: 127 / amax would overflow.
constexpr float kMinAmax = 1e-30f;

int64_t PaddedK(int64_t k) { return (k + kW8A8Group - 1) / kW8A8Group * kW8A8Group; }

// Scalar path: rows r0 .. r0+rows-1 against channel block b (valid channels), exactly as the
// header defines. u: [m][Kp] u8 (xq + 128); sx: [m][G].
void BlockRowsScalar(const int8_t* wb, int64_t kp, const uint8_t* u, const float* sx, int64_t rows,
                     const float* scale, const float* bias, int64_t valid, float* y, int64_t ys) {
  const int64_t groups = kp / kW8A8Group;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < valid; ++c) {
      float acc = 0.f;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t dot = 0;
        for (int64_t k = g * kW8A8Group; k < (g + 1) * kW8A8Group; ++k)
          dot += (static_cast<int32_t>(u[r * kp + k]) - 128) * wb[(k / 4) * 64 + c * 4 + k % 4];
        acc = std::fma(static_cast<float>(dot), sx[r * groups + g], acc);
      }
      y[r * ys + c] = std::fma(acc, scale[c], bias ? bias[c] : 0.f);
    }
  }
}

// AVX2 path: MR rows against one block; the same arithmetic as the scalar path.
template <int MR>
void BlockRowsAvx2(const int8_t* wb, int64_t kp, const uint8_t* u, const float* sx, const float* scale,
                   const float* bias, int64_t valid, float* y, int64_t ys) {
  const int64_t groups = kp / kW8A8Group;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi16(1);
  __m256 total[MR][2];
  #pragma GCC unroll 2
  for (int m = 0; m < MR; ++m) total[m][0] = total[m][1] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m256i dot[MR][2];
    #pragma GCC unroll 2
    for (int m = 0; m < MR; ++m) dot[m][0] = dot[m][1] = _mm256_setzero_si256();
    const int8_t* wg = wb + g * kGroupBytes;
#pragma GCC unroll 8
    for (int64_t s = 0; s < kStepsPerGroup; ++s) {
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg + s * 64));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg + s * 64 + 32));
      #pragma GCC unroll 2
      for (int m = 0; m < MR; ++m) {
        int32_t four;
        std::memcpy(&four, u + m * kp + g * kW8A8Group + s * 4, sizeof(four));
        const __m256i xq = _mm256_xor_si256(_mm256_set1_epi32(four), flip);  // u - 128 as bytes
        const __m256i ax = _mm256_abs_epi8(xq);
        const __m256i p0 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(w0, xq));
        const __m256i p1 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(w1, xq));
        dot[m][0] = _mm256_add_epi32(dot[m][0], _mm256_madd_epi16(p0, ones));
        dot[m][1] = _mm256_add_epi32(dot[m][1], _mm256_madd_epi16(p1, ones));
      }
    }
    #pragma GCC unroll 2
    for (int m = 0; m < MR; ++m) {
      const __m256 s = _mm256_set1_ps(sx[m * groups + g]);
      total[m][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[m][0]), s, total[m][0]);
      total[m][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[m][1]), s, total[m][1]);
    }
  }
  alignas(32) float b[kW8A8BlockN] = {};
  if (bias) std::memcpy(b, bias, static_cast<size_t>(valid) * sizeof(float));
  const __m256 s0 = _mm256_loadu_ps(scale), s1 = _mm256_loadu_ps(scale + 8);
  const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
  #pragma GCC unroll 2
  for (int m = 0; m < MR; ++m) {
    alignas(32) float out[kW8A8BlockN];
    _mm256_store_ps(out, _mm256_fmadd_ps(total[m][0], s0, b0));
    _mm256_store_ps(out + 8, _mm256_fmadd_ps(total[m][1], s1, b1));
    std::memcpy(y + m * ys, out, static_cast<size_t>(valid) * sizeof(float));
  }
}

// VNNI path: MR rows against NB (1 or 2) consecutive blocks starting at wb (stride 16 Kp).
template <int MR, int NB>
FATHOM_TARGET_VNNI void BlockRowsVnni(const int8_t* wb, int64_t kp, const uint8_t* u, const float* sx,
                                      const float* scale, const float* bias, int64_t valid, float* y,
                                      int64_t ys) {
  const int64_t groups = kp / kW8A8Group;
  const int64_t block_stride = kp * kW8A8BlockN;
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 total[MR][NB];
  #pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
    #pragma GCC unroll 2
    for (int j = 0; j < NB; ++j) total[m][j] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i dot[MR][NB], corr[NB];
    #pragma GCC unroll 2
    for (int j = 0; j < NB; ++j) corr[j] = _mm512_setzero_si512();
    #pragma GCC unroll 4
    for (int m = 0; m < MR; ++m)
      #pragma GCC unroll 2
      for (int j = 0; j < NB; ++j) dot[m][j] = _mm512_setzero_si512();
    const int8_t* wg = wb + g * kGroupBytes;
#pragma GCC unroll 2
    for (int j = 0; j < NB; ++j)
#pragma GCC unroll 8
      for (int64_t line = 0; line < kGroupBytes; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(wg + j * block_stride +
                                                   kPrefetchGroups * kGroupBytes + line),
                     _MM_HINT_T0);
#pragma GCC unroll 8
    for (int64_t s = 0; s < kStepsPerGroup; ++s) {
      __m512i w[NB];
      #pragma GCC unroll 2
      for (int j = 0; j < NB; ++j) {
        w[j] = _mm512_loadu_si512(wg + j * block_stride + s * 64);
        corr[j] = _mm512_dpbusd_epi32(corr[j], offset, w[j]);  // 128 * sum of the 4 k, per lane
      }
      #pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        int32_t four;
        std::memcpy(&four, u + m * kp + g * kW8A8Group + s * 4, sizeof(four));
        const __m512i xb = _mm512_set1_epi32(four);
        #pragma GCC unroll 2
        for (int j = 0; j < NB; ++j) dot[m][j] = _mm512_dpbusd_epi32(dot[m][j], xb, w[j]);
      }
    }
    #pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const __m512 s = _mm512_set1_ps(sx[m * groups + g]);
      #pragma GCC unroll 2
      for (int j = 0; j < NB; ++j)
        total[m][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(dot[m][j], corr[j])), s, total[m][j]);
    }
  }
  #pragma GCC unroll 2
  for (int j = 0; j < NB; ++j) {
    const int64_t col = j * kW8A8BlockN;
    const int64_t cols = std::min<int64_t>(kW8A8BlockN, valid - col);
    if (cols <= 0) break;
    const __mmask16 keep = static_cast<__mmask16>((1u << cols) - 1u);
    const __m512 sc = _mm512_loadu_ps(scale + col);  // scales are padded to the block
    const __m512 b = bias ? _mm512_maskz_loadu_ps(keep, bias + col) : _mm512_setzero_ps();
    #pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) _mm512_mask_storeu_ps(y + m * ys + col, keep, _mm512_fmadd_ps(total[m][j], sc, b));
  }
}

// The scalar reference of the activation quantizer, and what the VNNI path reproduces.
void QuantizeGroupScalar(const float* x, int64_t len, uint8_t* u, float* sx) {
  float amax = 0.f;
  for (int64_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(x[i]));
  if (!(amax >= kMinAmax)) {
    std::memset(u, 128, kW8A8Group);
    *sx = 0.f;
    return;
  }
  const float inv = 127.f / amax;
  *sx = amax / 127.f;
  for (int64_t i = 0; i < len; ++i)
    u[i] = static_cast<uint8_t>(std::clamp(std::nearbyint(x[i] * inv), -127.f, 127.f) + 128.f);
  for (int64_t i = len; i < kW8A8Group; ++i) u[i] = 128;
}

FATHOM_TARGET_VNNI void QuantizeRowVnni(const float* x, int64_t k, int64_t kp, uint8_t* u, float* sx) {
  const int64_t full = k / kW8A8Group;
  for (int64_t g = 0; g < full; ++g) {
    const float* xg = x + g * kW8A8Group;
    const __m512 a = _mm512_loadu_ps(xg), b = _mm512_loadu_ps(xg + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
    if (!(amax >= kMinAmax)) {
      std::memset(u + g * kW8A8Group, 128, kW8A8Group);
      sx[g] = 0.f;
      continue;
    }
    const __m512 inv = _mm512_set1_ps(127.f / amax);
    sx[g] = amax / 127.f;
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127), bias = _mm512_set1_epi32(128);
    // cvtps_epi32 rounds to nearest even (the default MXCSR mode), as nearbyint does.
    const __m512i qa = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(a, inv)), lo), hi), bias);
    const __m512i qb = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(b, inv)), lo), hi), bias);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(u + g * kW8A8Group), _mm512_cvtepi32_epi8(qa));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(u + g * kW8A8Group + 16), _mm512_cvtepi32_epi8(qb));
  }
  for (int64_t g = full; g < kp / kW8A8Group; ++g)
    QuantizeGroupScalar(x + g * kW8A8Group, std::min(kW8A8Group, k - g * kW8A8Group), u + g * kW8A8Group, sx + g);
}

}  // namespace

bool CpuHasAvx512Vnni() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}

void QuantizeActivationRow(const float* x, int64_t k, int64_t kp, uint8_t* u, float* sx) {
  for (int64_t g = 0; g * kW8A8Group < kp; ++g) {
    const int64_t len = std::max<int64_t>(0, std::min(kW8A8Group, k - g * kW8A8Group));
    QuantizeGroupScalar(x + g * kW8A8Group, len, u + g * kW8A8Group, sx + g);
  }
}

DotPath ResolveDotPath(DotPath requested) {
  if (requested == DotPath::kScalar) return DotPath::kScalar;
  if (requested == DotPath::kAvx2) return DotPath::kAvx2;
  return CpuHasAvx512Vnni() ? DotPath::kVnni : DotPath::kAvx2;
}

void QuantizeActivationRows(const float* x, int64_t m, int64_t k, int64_t kp, uint8_t* u, float* sx,
                            DotPath path) {
  const bool vnni = ResolveDotPath(path) == DotPath::kVnni;
  const int64_t groups = kp / kW8A8Group;
  for (int64_t r = 0; r < m; ++r) {
    if (vnni)
      QuantizeRowVnni(x + r * k, k, kp, u + r * kp, sx + r * groups);
    else
      QuantizeActivationRow(x + r * k, k, kp, u + r * kp, sx + r * groups);
  }
}

Result<W8A8Weights> W8A8Weights::Quantize(const float* w, int64_t n, int64_t k) {
  // The same per-channel quantization as Int8Weights, repacked for vpdpbusd.
  auto q = Int8Weights::Quantize(w, n, k);
  if (!q.ok()) return Status::Error("w8a8 " + q.status().message());
  W8A8Weights out;
  out.n_ = n;
  out.k_ = k;
  out.kp_ = PaddedK(k);
  const int64_t blocks = (n + kW8A8BlockN - 1) / kW8A8BlockN;
  out.packed_.assign(static_cast<size_t>(blocks * kW8A8BlockN * out.kp_), 0);
  out.scales_.assign(static_cast<size_t>(blocks * kW8A8BlockN), 0.f);
  for (int64_t r = 0; r < n; ++r) {
    out.scales_[static_cast<size_t>(r)] = q->scale(r);
    int8_t* dst = out.packed_.data() + (r / kW8A8BlockN) * out.kp_ * kW8A8BlockN + (r % kW8A8BlockN) * 4;
    for (int64_t c = 0; c < k; ++c) dst[(c / 4) * 64 + c % 4] = q->q(r, c);
  }
  return out;
}

void W8A8Weights::Matmul(const float* x, int64_t m, const float* bias, float* y, DotPath path) const {
  if (m <= 0) return;
  path = ResolveDotPath(path);
  const int64_t groups = kp_ / kW8A8Group;
  // The calling thread's quantized activations, kept between calls (no allocation once warm).
  thread_local std::vector<uint8_t> u;
  thread_local std::vector<float> sx;
  u.resize(static_cast<size_t>(m * kp_));
  sx.resize(static_cast<size_t>(m * groups));
  QuantizeActivationRows(x, m, k_, kp_, u.data(), sx.data(), path);
  const uint8_t* ud = u.data();
  const float* sd = sx.data();
  const int64_t blocks = (n_ + kW8A8BlockN - 1) / kW8A8BlockN;
  const int64_t pairs = (blocks + 1) / 2;
  const int64_t block_bytes = kp_ * kW8A8BlockN;
  // Below ~256 KiB of weights the fork/join costs more than the second core saves.
  const bool parallel = pairs > 1 && n_ * kp_ >= (int64_t{1} << 18);
  ParallelFor(pairs, parallel, [&](int64_t p) {
    const int64_t b = 2 * p;
    const int64_t nb = std::min<int64_t>(2, blocks - b);
    const int64_t col = b * kW8A8BlockN;
    const int64_t valid = std::min(nb * kW8A8BlockN, n_ - col);
    const int8_t* wb = packed_.data() + b * block_bytes;
    const float* sc = scales_.data() + col;
    const float* bb = bias ? bias + col : nullptr;
    for (int64_t r = 0; r < m; r += kMaxRows) {
      const int64_t rows = std::min(kMaxRows, m - r);
      const uint8_t* ur = ud + r * kp_;
      const float* sr = sd + r * groups;
      float* yr = y + r * n_ + col;
      if (path != DotPath::kVnni) {
        for (int64_t j = 0; j < nb; ++j) {
          const int64_t c0 = j * kW8A8BlockN, cols = std::min(kW8A8BlockN, valid - c0);
          const int8_t* wj = wb + j * block_bytes;
          const float* bj = bb ? bb + c0 : nullptr;
          if (path == DotPath::kScalar) {
            BlockRowsScalar(wj, kp_, ur, sr, rows, sc + c0, bj, cols, yr + c0, n_);
            continue;
          }
          for (int64_t r2 = 0; r2 < rows; r2 += 2) {  // the AVX2 kernel takes 2 rows at a time
            if (rows - r2 >= 2)
              BlockRowsAvx2<2>(wj, kp_, ur + r2 * kp_, sr + r2 * groups, sc + c0, bj, cols, yr + r2 * n_ + c0, n_);
            else
              BlockRowsAvx2<1>(wj, kp_, ur + r2 * kp_, sr + r2 * groups, sc + c0, bj, cols, yr + r2 * n_ + c0, n_);
          }
        }
        continue;
      }
      if (nb == 2) {
        switch (rows) {
          case 4: BlockRowsVnni<4, 2>(wb, kp_, ur, sr, sc, bb, valid, yr, n_); break;
          case 3: BlockRowsVnni<3, 2>(wb, kp_, ur, sr, sc, bb, valid, yr, n_); break;
          case 2: BlockRowsVnni<2, 2>(wb, kp_, ur, sr, sc, bb, valid, yr, n_); break;
          default: BlockRowsVnni<1, 2>(wb, kp_, ur, sr, sc, bb, valid, yr, n_); break;
        }
      } else {
        switch (rows) {
          case 4: BlockRowsVnni<4, 1>(wb, kp_, ur, sr, sc, bb, valid, yr, n_); break;
          case 3: BlockRowsVnni<3, 1>(wb, kp_, ur, sr, sc, bb, valid, yr, n_); break;
          case 2: BlockRowsVnni<2, 1>(wb, kp_, ur, sr, sc, bb, valid, yr, n_); break;
          default: BlockRowsVnni<1, 1>(wb, kp_, ur, sr, sc, bb, valid, yr, n_); break;
        }
      }
    }
  });
}

}  // namespace fathom
