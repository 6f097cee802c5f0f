// Rotary position embeddings with a precomputed cos/sin table.
#include "kernels/rope.h"

#include <cmath>
#include <numbers>

#include "core/check.h"
#include "core/parallel.h"

namespace fathom {

// Matches PyTorch's f32 computation: inv_freq = 1 / theta^(2i/d) in float math; the llama3
// scaling in the order of transformers' tensor ops (x / t is reciprocal(t) * x there).
std::vector<float> RopeInvFrequencies(int64_t head_dim, float theta, const RopeScaling& scaling) {
  const int64_t half = head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
  if (scaling.kind == RopeScaling::Kind::kLlama3) {
    const auto factor = static_cast<float>(scaling.factor),
               low = static_cast<float>(scaling.low_freq_factor);
    const auto old_len = static_cast<double>(scaling.original_max_positions);
    const auto low_wavelen = static_cast<float>(old_len / scaling.low_freq_factor);
    const auto high_wavelen = static_cast<float>(old_len / scaling.high_freq_factor);
    const auto span = static_cast<float>(scaling.high_freq_factor - scaling.low_freq_factor);
    for (float& f : inv) {
      const float wavelen = (1.0f / f) * static_cast<float>(2 * std::numbers::pi);
      if (wavelen > low_wavelen) {
        f = f / factor;
      } else if (!(wavelen < high_wavelen)) {
        const float smooth = ((1.0f / wavelen) * static_cast<float>(old_len) - low) / span;
        f = (1.0f - smooth) * f / factor + smooth * f;
      }
    }
  }
  return inv;
}

// angle = float(pos) * inv_freq rounded to float; cos/sin of that float angle are taken in
// double and rounded once (PyTorch's f32 cos/sin are within an ulp of that).
RopeTable::RopeTable(int64_t head_dim, float theta, int64_t max_positions,
                     const RopeScaling& scaling)
    : head_dim_(head_dim), max_positions_(max_positions) {
  FATHOM_CHECK_MSG(head_dim > 0 && head_dim % 2 == 0 && max_positions >= 0,
                   "head_dim=" << head_dim << " max_positions=" << max_positions);
  const int64_t half = head_dim / 2;
  const std::vector<float> inv_freq = RopeInvFrequencies(head_dim, theta, scaling);
  cos_.resize(static_cast<size_t>(max_positions * half));
  sin_.resize(cos_.size());
  // Long-context tables hold millions of angles; the double cos/sin take a while.
#pragma omp parallel for schedule(static) if (max_positions * half >= (int64_t{1} << 16))
  for (int64_t p = 0; p < max_positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[i];
      cos_[p * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_[p * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

namespace {

// x: [head_dim]; pairs (i, i + half).
void RotateNeox(const float* c, const float* s, int64_t half, float* x) {
  float* lo = x;
  float* hi = x + half;
  for (int64_t i = 0; i < half; ++i) {  // vectorized by gcc
    const float a = lo[i], b = hi[i];
    lo[i] = a * c[i] - b * s[i];
    hi[i] = b * c[i] + a * s[i];
  }
}

// x: [head_dim]; pairs (2i, 2i + 1).
void RotateInterleaved(const float* c, const float* s, int64_t half, float* x) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * c[i] - b * s[i];
    x[2 * i + 1] = b * c[i] + a * s[i];
  }
}

}  // namespace

// x: [rows, n_heads, head_dim]; row r at position pos[r].
void ApplyRope(const RopeTable& table, RopeStyle style, const int32_t* pos, int64_t rows,
               int64_t n_heads, float* x) {
  const int64_t hd = table.head_dim(), half = hd / 2;
  ParallelFor(rows, rows >= 16 && rows * n_heads * hd >= (int64_t{1} << 16), [&](int64_t r) {
    FATHOM_CHECK_MSG(pos[r] >= 0 && pos[r] < table.max_positions(),
                     "row " << r << " position " << pos[r] << " max " << table.max_positions());
    const float* c = table.cos(pos[r]);
    const float* s = table.sin(pos[r]);
    float* xr = x + r * n_heads * hd;
    for (int64_t h = 0; h < n_heads; ++h) {
      if (style == RopeStyle::kNeox)
        RotateNeox(c, s, half, xr + h * hd);
      else
        RotateInterleaved(c, s, half, xr + h * hd);
    }
  });
}

void ApplyRopeReference(float theta, RopeStyle style, const int32_t* pos, int64_t rows,
                        int64_t n_heads, int64_t head_dim, float* x, const RopeScaling& scaling) {
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* xh = x + (r * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        double inv_freq = std::pow(static_cast<double>(theta),
                                   -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
        if (scaling.kind == RopeScaling::Kind::kLlama3) {
          const double wavelen = 2 * std::numbers::pi / inv_freq;
          const auto old_len = static_cast<double>(scaling.original_max_positions);
          if (wavelen > old_len / scaling.low_freq_factor) {
            inv_freq /= scaling.factor;
          } else if (wavelen >= old_len / scaling.high_freq_factor) {
            const double smooth = (old_len / wavelen - scaling.low_freq_factor) /
                                  (scaling.high_freq_factor - scaling.low_freq_factor);
            inv_freq = (1 - smooth) * inv_freq / scaling.factor + smooth * inv_freq;
          }
        }
        const double angle = static_cast<double>(pos[r]) * inv_freq;
        const double c = std::cos(angle), s = std::sin(angle);
        const int64_t ia = style == RopeStyle::kNeox ? i : 2 * i;
        const int64_t ib = style == RopeStyle::kNeox ? i + half : 2 * i + 1;
        const double a = xh[ia], b = xh[ib];
        xh[ia] = static_cast<float>(a * c - b * s);
        xh[ib] = static_cast<float>(b * c + a * s);
      }
    }
  }
}

}  // namespace fathom
