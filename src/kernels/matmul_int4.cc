// Int4 group-quantized weights: the quantizer, the AVX512-VNNI kernel and the exact scalar
// path (see matmul_int4.h for the arithmetic both follow step for step).
//
// The AVX2 kernel: one block (two ymm halves) for up to 2 rows; vpmaddubsw takes the
// nibbles unsigned and the activations signed (pairs at most 2 * 15 * 127: no saturation).
//
// Register blocking of the VNNI kernel: two 16-channel blocks for up to kMaxRows = 4 rows.
// Per row and block one int32 group accumulator and one f32 total (16 zmm), plus the
// unpacked low and high nibbles of both blocks (4), their scales (2) and the broadcast
// activations: under the 32 zmm registers. Each 64-byte load feeds two vpdpbusd steps per
// row (its low and its high nibbles).
#include "kernels/matmul_int4.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/dtype.h"
#include "core/parallel.h"

// GCC 12 reports the _mm512_undefined_*() inside its own AVX-512 intrinsics (set1, cvt) as
// maybe-uninitialized when they are inlined under -O3.
#if !defined(__clang__)  // a GCC warning; clang has no such group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define FATHOM_TARGET_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

namespace fathom {
namespace {

constexpr int64_t kMaxRows = 4;                    // rows per pass over a block pair
constexpr int64_t kGroupBytes = kInt4Group * kInt4BlockN / 2;  // 256: one group of one block
// The VNNI kernel prefetches each block kPrefetchGroups groups (2 KiB) ahead. At one row it
// spends ~60 instructions per 512 bytes, so the out-of-order window covers only ~3 KiB of
// loads, about one memory latency's worth at full bandwidth: the hardware prefetchers alone
// left it at 66-68% of a plain read loop on one Zen 5 core, 2 KiB ahead gave 72-74%
// (4-32 groups measured; past a block's end it touches the next block, which it reads next).
constexpr int64_t kPrefetchGroups = 8;
static_assert(kInt4Group == kW8A8Group, "int4 shares W8A8's activation groups");

// Byte offset of (channel c of the block, k) inside a block, and whether it is the high nibble.
inline int64_t NibbleByte(int64_t c, int64_t k, bool* high) {
  const int64_t g = k / kInt4Group, kk = k % kInt4Group, s = kk / 4;
  *high = (s % 2) == 1;
  return g * kGroupBytes + (s / 2) * 64 + c * 4 + kk % 4;
}

// Activations as the kernels read them: xq [m][Kp] signed bytes, sx [m][G], and the
// correction 8 * sum_{k in g} xq [m][G].
struct Activations {
  std::vector<uint8_t> u;
  std::vector<float> sx;
  std::vector<int32_t> corr;
};

void QuantizeActivations(const float* x, int64_t m, int64_t k, int64_t kp, DotPath path, Activations* a) {
  const int64_t groups = kp / kInt4Group;
  a->u.resize(static_cast<size_t>(m * kp));
  a->sx.resize(static_cast<size_t>(m * groups));
  a->corr.resize(static_cast<size_t>(m * groups));
  QuantizeActivationRows(x, m, k, kp, a->u.data(), a->sx.data(), path);
  for (int64_t i = 0; i < m * groups; ++i) {
    uint8_t* b = a->u.data() + i * kInt4Group;
    int32_t sum = 0;
    for (int64_t j = 0; j < kInt4Group; ++j) {
      sum += static_cast<int32_t>(b[j]) - 128;
      b[j] ^= 0x80;  // xq + 128 -> xq as a two's-complement byte
    }
    a->corr[static_cast<size_t>(i)] = 8 * sum;
  }
}

// Scalar path: rows of one block (valid channels), as the header defines.
void BlockRowsScalar(const uint8_t* wb, const uint16_t* sb, int64_t kp, const Activations& a, int64_t r0,
                     int64_t rows, const float* bias, int64_t valid, float* y, int64_t ys) {
  const int64_t groups = kp / kInt4Group;
  for (int64_t r = r0; r < r0 + rows; ++r) {
    const auto* xq = reinterpret_cast<const int8_t*>(a.u.data() + r * kp);
    for (int64_t c = 0; c < valid; ++c) {
      float acc = 0.f;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t dot = 0;
        for (int64_t k = g * kInt4Group; k < (g + 1) * kInt4Group; ++k) {
          bool high = false;
          const uint8_t byte = wb[NibbleByte(c, k, &high)];
          dot += static_cast<int32_t>(high ? byte >> 4 : byte & 0x0F) * xq[k];
        }
        dot -= a.corr[static_cast<size_t>(r * groups + g)];
        const float s = F16ToF32(sb[g * kInt4BlockN + c]) * a.sx[static_cast<size_t>(r * groups + g)];
        acc = std::fma(static_cast<float>(dot), s, acc);
      }
      y[(r - r0) * ys + c] = acc + (bias ? bias[c] : 0.f);
    }
  }
}

// AVX2 path: MR rows against one block; the same arithmetic as the scalar path.
template <int MR>
void BlockRowsAvx2(const uint8_t* wb, const uint16_t* sb, int64_t kp, const uint8_t* xq, const float* sx,
                   const int32_t* corr, const float* bias, int64_t valid, float* y, int64_t ys) {
  const int64_t groups = kp / kInt4Group;
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 total[MR][2];
  #pragma GCC unroll 2
  for (int m = 0; m < MR; ++m) total[m][0] = total[m][1] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m256i dot[MR][2];
    #pragma GCC unroll 2
    for (int m = 0; m < MR; ++m) dot[m][0] = dot[m][1] = _mm256_setzero_si256();
    #pragma GCC unroll 4
    for (int64_t p = 0; p < 4; ++p) {
      __m256i lo[2], hi[2];
      #pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {  // channels 8h .. 8h + 7
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + g * kGroupBytes + p * 64 + h * 32));
        lo[h] = _mm256_and_si256(v, low4);
        hi[h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
      }
      #pragma GCC unroll 2
      for (int m = 0; m < MR; ++m) {
        int32_t even, odd;
        std::memcpy(&even, xq + m * kp + g * kInt4Group + p * 8, sizeof(even));
        std::memcpy(&odd, xq + m * kp + g * kInt4Group + p * 8 + 4, sizeof(odd));
        const __m256i xe = _mm256_set1_epi32(even), xo = _mm256_set1_epi32(odd);
        #pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m256i pe = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[h], xe), ones);
          const __m256i po = _mm256_madd_epi16(_mm256_maddubs_epi16(hi[h], xo), ones);
          dot[m][h] = _mm256_add_epi32(dot[m][h], _mm256_add_epi32(pe, po));
        }
      }
    }
    const __m256 d0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + g * kInt4BlockN)));
    const __m256 d1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + g * kInt4BlockN + 8)));
    #pragma GCC unroll 2
    for (int m = 0; m < MR; ++m) {
      const __m256 s = _mm256_set1_ps(sx[m * groups + g]);
      const __m256i c = _mm256_set1_epi32(corr[m * groups + g]);
      total[m][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(dot[m][0], c)), _mm256_mul_ps(d0, s), total[m][0]);
      total[m][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(dot[m][1], c)), _mm256_mul_ps(d1, s), total[m][1]);
    }
  }
  alignas(32) float b[kInt4BlockN] = {};
  if (bias) std::memcpy(b, bias, static_cast<size_t>(valid) * sizeof(float));
  const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
  #pragma GCC unroll 2
  for (int m = 0; m < MR; ++m) {
    alignas(32) float out[kInt4BlockN];
    _mm256_store_ps(out, _mm256_add_ps(total[m][0], b0));
    _mm256_store_ps(out + 8, _mm256_add_ps(total[m][1], b1));
    std::memcpy(y + m * ys, out, static_cast<size_t>(valid) * sizeof(float));
  }
}

// VNNI path: MR rows against NB (1 or 2) consecutive blocks (bytes at stride 8 Kp, scales at
// stride G * 16).
template <int MR, int NB>
FATHOM_TARGET_VNNI void BlockRowsVnni(const uint8_t* wb, const uint16_t* sb, int64_t kp, const uint8_t* xq,
                                      const float* sx, const int32_t* corr, const float* bias, int64_t valid,
                                      float* y, int64_t ys) {
  const int64_t groups = kp / kInt4Group;
  const int64_t block_bytes = kp * kInt4BlockN / 2, block_scales = groups * kInt4BlockN;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 total[MR][NB];
  #pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
    #pragma GCC unroll 2
    for (int j = 0; j < NB; ++j) total[m][j] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i dot[MR][NB];
    #pragma GCC unroll 4
    for (int m = 0; m < MR; ++m)
      #pragma GCC unroll 2
      for (int j = 0; j < NB; ++j) dot[m][j] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int j = 0; j < NB; ++j)
#pragma GCC unroll 4
      for (int64_t line = 0; line < kGroupBytes; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(wb + j * block_bytes +
                                                   (g + kPrefetchGroups) * kGroupBytes + line),
                     _MM_HINT_T0);
#pragma GCC unroll 4
    for (int64_t p = 0; p < 4; ++p) {
      __m512i lo[NB], hi[NB];
      #pragma GCC unroll 2
      for (int j = 0; j < NB; ++j) {
        const __m512i v = _mm512_loadu_si512(wb + j * block_bytes + g * kGroupBytes + p * 64);
        lo[j] = _mm512_and_si512(v, low4);
        hi[j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      }
      #pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        int32_t even, odd;
        std::memcpy(&even, xq + m * kp + g * kInt4Group + p * 8, sizeof(even));
        std::memcpy(&odd, xq + m * kp + g * kInt4Group + p * 8 + 4, sizeof(odd));
        const __m512i xe = _mm512_set1_epi32(even), xo = _mm512_set1_epi32(odd);
        #pragma GCC unroll 2
        for (int j = 0; j < NB; ++j) {
          dot[m][j] = _mm512_dpbusd_epi32(dot[m][j], lo[j], xe);
          dot[m][j] = _mm512_dpbusd_epi32(dot[m][j], hi[j], xo);
        }
      }
    }
    __m512 d[NB];
    #pragma GCC unroll 2
    for (int j = 0; j < NB; ++j)
      d[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + j * block_scales + g * kInt4BlockN)));
    #pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const __m512 s = _mm512_set1_ps(sx[m * groups + g]);
      const __m512i c = _mm512_set1_epi32(corr[m * groups + g]);
      #pragma GCC unroll 2
      for (int j = 0; j < NB; ++j)
        total[m][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(dot[m][j], c)), _mm512_mul_ps(d[j], s),
                                      total[m][j]);
    }
  }
  #pragma GCC unroll 2
  for (int j = 0; j < NB; ++j) {
    const int64_t col = j * kInt4BlockN;
    const int64_t cols = std::min<int64_t>(kInt4BlockN, valid - col);
    if (cols <= 0) break;
    const __mmask16 keep = static_cast<__mmask16>((1u << cols) - 1u);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(keep, bias + col) : _mm512_setzero_ps();
    #pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) _mm512_mask_storeu_ps(y + m * ys + col, keep, _mm512_add_ps(total[m][j], b));
  }
}

}  // namespace

Result<Int4Weights> Int4Weights::Quantize(const float* w, int64_t n, int64_t k) {
  const std::string shape = "[" + std::to_string(n) + ", " + std::to_string(k) + "]";
  if (n <= 0 || k <= 0) return Status::Error("int4 weights: " + shape + " is not a non-empty matrix");
  Int4Weights out;
  out.n_ = n;
  out.k_ = k;
  out.kp_ = (k + kInt4Group - 1) / kInt4Group * kInt4Group;
  const int64_t blocks = (n + kInt4BlockN - 1) / kInt4BlockN, groups = out.kp_ / kInt4Group;
  const int64_t block_bytes = out.kp_ * kInt4BlockN / 2;
  out.packed_.assign(static_cast<size_t>(blocks * block_bytes), 0x88);  // q = 0 in both nibbles
  out.scales_.assign(static_cast<size_t>(blocks * groups * kInt4BlockN), 0);
  for (int64_t r = 0; r < n; ++r) {
    const float* row = w + r * k;
    for (int64_t c = 0; c < k; ++c)
      if (!std::isfinite(row[c]))
        return Status::Error("int4 weights: row " + std::to_string(r) + " of " + shape + " has an inf or NaN");
    uint8_t* wb = out.packed_.data() + (r / kInt4BlockN) * block_bytes;
    uint16_t* sb = out.scales_.data() + (r / kInt4BlockN) * groups * kInt4BlockN + r % kInt4BlockN;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t end = std::min(k, (g + 1) * kInt4Group);
      float wmax = 0.f;
      for (int64_t c = g * kInt4Group; c < end; ++c)
        if (std::fabs(row[c]) > std::fabs(wmax)) wmax = row[c];
      const float dq = wmax / -8.f;
      if (std::fabs(dq) > 65504.f)
        return Status::Error("int4 weights: row " + std::to_string(r) + " group " + std::to_string(g) + " of " +
                             shape + ": scale " + std::to_string(dq) + " does not fit f16");
      const uint16_t d16 = F16FromF32(dq);
      const float d = F16ToF32(d16);
      sb[g * kInt4BlockN] = d16;
      if (d == 0.f) continue;
      for (int64_t c = g * kInt4Group; c < end; ++c) {
        const int q = static_cast<int>(std::clamp(std::nearbyint(row[c] / d), -8.f, 7.f));  // ties to even
        bool high = false;
        uint8_t& byte = wb[NibbleByte(r % kInt4BlockN, c, &high)];
        const auto nib = static_cast<uint8_t>(q + 8);
        byte = high ? static_cast<uint8_t>((byte & 0x0F) | (nib << 4)) : static_cast<uint8_t>((byte & 0xF0) | nib);
      }
    }
  }
  return out;
}

int Int4Weights::q(int64_t row, int64_t col) const {
  bool high = false;
  const int64_t off = (row / kInt4BlockN) * (kp_ * kInt4BlockN / 2) + NibbleByte(row % kInt4BlockN, col, &high);
  const uint8_t byte = packed_[static_cast<size_t>(off)];
  return (high ? byte >> 4 : byte & 0x0F) - 8;
}

float Int4Weights::scale(int64_t row, int64_t group) const {
  const int64_t groups = kp_ / kInt4Group;
  return F16ToF32(scales_[static_cast<size_t>(((row / kInt4BlockN) * groups + group) * kInt4BlockN +
                                              row % kInt4BlockN)]);
}

void Int4Weights::Matmul(const float* x, int64_t m, const float* bias, float* y, DotPath path) const {
  if (m <= 0) return;
  path = ResolveDotPath(path);
  const int64_t groups = kp_ / kInt4Group;
  // The calling thread's quantized activations, kept between calls (no allocation once warm).
  thread_local Activations act;
  QuantizeActivations(x, m, k_, kp_, path, &act);
  const Activations& a = act;
  const int64_t blocks = (n_ + kInt4BlockN - 1) / kInt4BlockN;
  const int64_t pairs = (blocks + 1) / 2;
  const int64_t block_bytes = kp_ * kInt4BlockN / 2, block_scales = groups * kInt4BlockN;
  // Below ~128 KiB of weights the fork/join costs more than the second core saves.
  const bool parallel = pairs > 1 && n_ * kp_ >= (int64_t{1} << 18);
  ParallelFor(pairs, parallel, [&](int64_t p) {
    const int64_t b = 2 * p;
    const int64_t nb = std::min<int64_t>(2, blocks - b);
    const int64_t col = b * kInt4BlockN;
    const int64_t valid = std::min(nb * kInt4BlockN, n_ - col);
    const uint8_t* wb = packed_.data() + b * block_bytes;
    const uint16_t* sb = scales_.data() + b * block_scales;
    const float* bb = bias ? bias + col : nullptr;
    for (int64_t r = 0; r < m; r += kMaxRows) {
      const int64_t rows = std::min(kMaxRows, m - r);
      float* yr = y + r * n_ + col;
      const uint8_t* xr = a.u.data() + r * kp_;
      const float* sr = a.sx.data() + r * groups;
      const int32_t* cr = a.corr.data() + r * groups;
      if (path != DotPath::kVnni) {
        for (int64_t j = 0; j < nb; ++j) {
          const int64_t c0 = j * kInt4BlockN, cols = std::min(kInt4BlockN, valid - c0);
          const uint8_t* wj = wb + j * block_bytes;
          const uint16_t* sj = sb + j * block_scales;
          const float* bj = bb ? bb + c0 : nullptr;
          if (path == DotPath::kScalar) {
            BlockRowsScalar(wj, sj, kp_, a, r, rows, bj, cols, yr + c0, n_);
            continue;
          }
          for (int64_t r2 = 0; r2 < rows; r2 += 2) {  // the AVX2 kernel takes 2 rows at a time
            const int64_t o = r2 * kp_, og = r2 * groups;
            if (rows - r2 >= 2)
              BlockRowsAvx2<2>(wj, sj, kp_, xr + o, sr + og, cr + og, bj, cols, yr + r2 * n_ + c0, n_);
            else
              BlockRowsAvx2<1>(wj, sj, kp_, xr + o, sr + og, cr + og, bj, cols, yr + r2 * n_ + c0, n_);
          }
        }
        continue;
      }
#define FATHOM_INT4_CASE(MR, NB) BlockRowsVnni<MR, NB>(wb, sb, kp_, xr, sr, cr, bb, valid, yr, n_)
      if (nb == 2) {
        switch (rows) {
          case 4: FATHOM_INT4_CASE(4, 2); break;
          case 3: FATHOM_INT4_CASE(3, 2); break;
          case 2: FATHOM_INT4_CASE(2, 2); break;
          default: FATHOM_INT4_CASE(1, 2); break;
        }
      } else {
        switch (rows) {
          case 4: FATHOM_INT4_CASE(4, 1); break;
          case 3: FATHOM_INT4_CASE(3, 1); break;
          case 2: FATHOM_INT4_CASE(2, 1); break;
          default: FATHOM_INT4_CASE(1, 1); break;
        }
      }
#undef FATHOM_INT4_CASE
    }
  });
}

}  // namespace fathom
