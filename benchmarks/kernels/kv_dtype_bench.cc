// Micro-benchmark of decode attention over f32, bf16 and int8 K/V (issue 15): B decode rows,
// each attending to its own sequence's `context` keys through a shuffled block table (one
// layer of Ouro-1.4B's shape by default: 16 heads = 16 KV heads x 128), the three dtypes
// interleaved call by call so a noisy host slows both alike. Reports the median per call
// of wall and process CPU time (1 thread: CPU time is the work, which other processes'
// time slices do not lengthen) and the KV bytes read per CPU second. Not built by CMake;
// build by hand after `cmake --build build --target kernels_tests`:
//   g++ -O3 -std=c++20 -mavx2 -mfma -mf16c -fopenmp -Isrc benchmarks/kernels/kv_dtype_bench.cc
//       build/libfathom_kernels.a build/libfathom_core.a -ldnnl -o /tmp/kvbench
//   OMP_NUM_THREADS=1 /tmp/kvbench [batch context reps heads kv_heads head_dim]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/paged_attention.h"

using namespace fathom;

namespace {

double CpuNow() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double WallNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const auto arg = [&](int i, int64_t d) { return argc > i ? std::atoll(argv[i]) : d; };
  const int64_t batch = arg(1, 8), context = arg(2, 2048), reps = arg(3, 15);
  const int64_t heads = arg(4, 16), kv_heads = arg(5, 16), hd = arg(6, 128);
  const int32_t block = 16;
  const int64_t row = kv_heads * hd, per_seq = (context + block - 1) / block, n_blocks = per_seq * batch;
  const int64_t stride = block * row;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> k(static_cast<size_t>(n_blocks * stride)), v(k.size());
  for (float& x : k) x = u(rng);
  for (float& x : v) x = u(rng);
  std::vector<uint16_t> k16(k.size()), v16(v.size());
  for (size_t i = 0; i < k.size(); ++i) k16[i] = F32ToBF16(k[i]), v16[i] = F32ToBF16(v[i]);
  // int8 rows: the values, then a scale per KV head (DType::kI8's layout).
  const int64_t row8 = row + 4 * kv_heads, stride8 = block * row8;
  std::vector<int8_t> k8(static_cast<size_t>(n_blocks * stride8)), v8(k8.size());
  for (int64_t r = 0; r < n_blocks * block; ++r) {
    QuantizeI8Row(k.data() + r * row, row, kv_heads, k8.data() + r * row8);
    QuantizeI8Row(v.data() + r * row, row, kv_heads, v8.data() + r * row8);
  }
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<float> q(static_cast<size_t>(batch * heads * hd)), out(q.size());
  for (float& x : q) x = u(rng);
  std::vector<KeySegment> segs(static_cast<size_t>(batch));
  std::vector<PagedAttentionRow> rows(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    segs[static_cast<size_t>(b)] = {ids.data() + b * per_seq, 0, context, nullptr, 0};
    rows[static_cast<size_t>(b)] = {q.data() + b * heads * hd, out.data() + b * heads * hd,
                                    static_cast<int32_t>(b), static_cast<int32_t>(b + 1)};
  }
  const AttentionShape shape{heads, kv_heads, hd, 1.f / std::sqrt(static_cast<float>(hd))};
  constexpr int kTypes = 3;
  const PagedKvView views[kTypes] = {{k.data(), v.data(), stride, row, block, DType::kF32},
                                     {k16.data(), v16.data(), stride, row, block, DType::kBF16},
                                     {k8.data(), v8.data(), stride8, row8, block, DType::kI8}};
  const char* names[kTypes] = {"f32", "bf16", "int8"};
  const double row_bytes[kTypes] = {4.0 * static_cast<double>(row), 2.0 * static_cast<double>(row),
                                    static_cast<double>(row8)};
  std::vector<double> wall[kTypes], cpu[kTypes];
  for (int64_t r = 0; r <= reps; ++r)
    for (int t = 0; t < kTypes; ++t) {
      const double w0 = WallNow(), c0 = CpuNow();
      PagedAttention(shape, views[t], rows.data(), batch, segs.data());
      if (r > 0) wall[t].push_back(WallNow() - w0), cpu[t].push_back(CpuNow() - c0);  // r = 0: warm-up
    }
  std::printf("batch %lld, context %lld, heads %lld/%lld x %lld, %lld reps (medians)\n",
              static_cast<long long>(batch), static_cast<long long>(context), static_cast<long long>(heads),
              static_cast<long long>(kv_heads), static_cast<long long>(hd), static_cast<long long>(reps));
  const double keys = static_cast<double>(batch * context);
  for (int t = 0; t < kTypes; ++t) {
    const double bytes = keys * 2.0 * row_bytes[t];
    std::printf("%-5s wall %8.3f ms  cpu %8.3f ms  %6.2f GB/s of KV (cpu)  %7.2f ns per key\n",
                names[t], 1e3 * Median(wall[t]), 1e3 * Median(cpu[t]), bytes / Median(cpu[t]) / 1e9,
                1e9 * Median(cpu[t]) / keys);
  }
  for (int t = 1; t < kTypes; ++t)
    std::printf("%s / f32: wall %.3f  cpu %.3f\n", names[t], Median(wall[t]) / Median(wall[0]),
                Median(cpu[t]) / Median(cpu[0]));
  return 0;
}
