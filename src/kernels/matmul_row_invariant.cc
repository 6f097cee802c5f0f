#include "kernels/matmul_row_invariant.h"

#include <immintrin.h>

#include <algorithm>

#include "core/parallel.h"
#include "kernels/vec_math.h"

namespace fathom::internal {
namespace {

// Tile of R rows x C output columns: R*C accumulators, each one (row, column) sum over t in
// 8 lanes. With R <= 4 and C <= 3: 12 accumulators + 3 weight vectors + 1 x vector fit the
// 16 ymm registers.
template <int R, int C>
void Tile(const float* x, int64_t k, const float* w, const float* bias, float* y, int64_t n) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t t = 0;
  for (; t + 8 <= k; t += 8) {
    __m256 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = _mm256_loadu_ps(w + c * k + t);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * k + t);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  if (t < k) {
    const __m256i mask = TailMask(k - t);
    __m256 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = _mm256_maskload_ps(w + c * k + t, mask);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_maskload_ps(x + r * k + t, mask);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[r * n + c] = HSum(acc[r][c]) + (bias ? bias[c] : 0.f);
}

using TileFn = void (*)(const float*, int64_t, const float*, const float*, float*, int64_t);

template <int R>
constexpr TileFn kTileByCols[4] = {nullptr, Tile<R, 1>, Tile<R, 2>, Tile<R, 3>};
constexpr const TileFn* kTiles[5] = {nullptr, kTileByCols<1>, kTileByCols<2>, kTileByCols<3>,
                                     kTileByCols<4>};

constexpr int64_t kRows = 4, kCols = 3;

}  // namespace

void MatmulF32RowInvariant(const float* x, int64_t m, int64_t k, const float* w, int64_t n,
                           const float* bias, float* y) {
  // Column blocks whose weights (cols * k floats) stay in a 256 KiB share of L2 while every
  // row block of x passes over them: the weights are read from memory once per call.
  const int64_t fit = (int64_t{256} << 10) / (4 * std::max<int64_t>(k, 1));
  const int64_t block = std::max<int64_t>(kCols, fit / kCols * kCols);
  const int64_t n_blocks = (n + block - 1) / block;
  ParallelFor(n_blocks, n_blocks > 1 && m * n * k >= (int64_t{1} << 20), [&](int64_t b) {
    const int64_t j0 = b * block, j1 = std::min(n, j0 + block);
    for (int64_t i = 0; i < m; i += kRows) {
      const auto rows = static_cast<int>(std::min(kRows, m - i));
      for (int64_t j = j0; j < j1; j += kCols) {
        const auto cols = static_cast<int>(std::min(kCols, j1 - j));
        kTiles[rows][cols](x + i * k, k, w + j * k, bias ? bias + j : nullptr, y + i * n + j, n);
      }
    }
  });
}

}  // namespace fathom::internal
