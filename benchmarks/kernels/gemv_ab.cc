// A/B of the bf16 GEMV in one process: the library's GemvBf16Packed ("new") against another
// revision's, compiled into namespace fathom_old ("old": see scripts/gemv-ab.sh, which builds
// both and runs the row counts), whole passes over TinyLlama's four matmul shapes x 22 layers
// (1.9 GB of bf16 weights, so every pass reads them from memory) alternating, old first in
// every other pair, so that a noisy host's slow spells fall on both alike. Prints, per M, the
// weight GB/s of each (median pass), the median [quartiles] of the per-pair old/new time
// ratios, and whether the two gave the same bits; beside them, in every pair, the library's
// read loop (core/bandwidth.h SumAll, with its prefetch) over the same matrices, one
// parallel region each as the GEMV's calls: the GB/s a kernel that only read these bytes gets.
//   env: PAIRS (21)   args: M ... (1 <= M <= kGemvMaxTallRows)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "core/bandwidth.h"
#include "kernels/gemv_bf16.h"

using namespace fathom::internal;

// The old revision's GemvBf16Packed, through a wrapper built with -Dfathom=fathom_old.
extern "C" void OldGemvBf16Packed(const uint16_t* w, int64_t kp, int64_t n, const uint16_t* x,
                                  int64_t m, int64_t x_stride, const float* bias, float* y);

namespace {

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  const char* pairs_env = std::getenv("PAIRS");
  const int pairs = pairs_env ? std::atoi(pairs_env) : 21;
  if (argc < 2 || pairs < 1) {
    std::fprintf(stderr, "usage: [PAIRS=N] %s M ...\n", argv[0]);
    return 2;
  }
  const int64_t shapes[][2] = {{2560, 2048}, {2048, 2048}, {11264, 2048}, {2048, 5632}};  // [N, K]
  std::mt19937 rng(1);
  std::vector<std::vector<uint16_t>> ws;
  std::vector<int64_t> ns, ks;
  double bytes = 0;
  for (int l = 0; l < 22; ++l)
    for (const auto& s : shapes) {
      // Finite bf16 values in [-2, 2): sign, exponent 126-127, random mantissa.
      std::vector<uint16_t> w(static_cast<size_t>(s[0] * s[1]));
      for (uint16_t& v : w) v = static_cast<uint16_t>(0x3f00 | (rng() & 0x80ff));
      ws.push_back(std::move(w));
      ns.push_back(s[0]), ks.push_back(s[1]);
      bytes += 2.0 * static_cast<double>(s[0] * s[1]);
    }
  std::vector<uint16_t> x(static_cast<size_t>(kGemvMaxTallRows * 5632));
  for (uint16_t& v : x) v = static_cast<uint16_t>(0x3f00 | (rng() & 0x80ff));
  std::vector<float> y_old(static_cast<size_t>(kGemvMaxTallRows * 11264)), y_new(y_old.size());
  for (int a = 1; a < argc; ++a) {
    const int64_t m = std::atoll(argv[a]);
    if (m < 1 || m > kGemvMaxTallRows) {
      std::fprintf(stderr, "M must be 1..%lld: %s\n", static_cast<long long>(kGemvMaxTallRows),
                   argv[a]);
      return 2;
    }
    // One pass over every matrix; the outputs of the two sides compared matrix by matrix.
    const auto pass = [&](bool old_side) {
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < ws.size(); ++i) {
        float* y = old_side ? y_old.data() : y_new.data();
        if (old_side)
          OldGemvBf16Packed(ws[i].data(), ks[i], ns[i], x.data(), m, ks[i], nullptr, y);
        else
          GemvBf16Packed(ws[i].data(), ks[i], ns[i], x.data(), m, ks[i], nullptr, y);
      }
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    volatile float sink = 0;
    const auto read_pass = [&] {
      const auto t0 = std::chrono::steady_clock::now();
      for (const auto& w : ws)  // bf16 pairs read as floats: finite, normal (see above)
        sink = sink + fathom::SumAll(reinterpret_cast<const float*>(w.data()),
                                     static_cast<long>(w.size() / 2), true);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    pass(true), pass(false), read_pass();  // warm-up (page faults)
    std::vector<double> t_old, t_new, t_read, ratio, of_read;
    for (int p = 0; p < pairs; ++p) {
      double o = 0, n = 0;
      if (p % 2 == 0) {
        o = pass(true);
        n = pass(false);
      } else {
        n = pass(false);
        o = pass(true);
      }
      const double r = read_pass();
      t_old.push_back(o), t_new.push_back(n), t_read.push_back(r), ratio.push_back(o / n),
          of_read.push_back(r / n);
    }
    // The last matrix's outputs of both sides (every matrix ran through both).
    const bool same = std::memcmp(y_old.data(), y_new.data(),
                                  static_cast<size_t>(m * ns.back()) * sizeof(float)) == 0;
    std::printf(
        "M %2lld: old %.1f GB/s new %.1f GB/s  old/new time per pair: med %.3f [q1 %.3f q3 %.3f]  "
        "%s; read loop %.1f GB/s, new of it: med %.3f [q1 %.3f q3 %.3f]\n",
        static_cast<long long>(m), bytes / Quantile(t_old, 0.5) / 1e9,
        bytes / Quantile(t_new, 0.5) / 1e9, Quantile(ratio, 0.5), Quantile(ratio, 0.25),
        Quantile(ratio, 0.75), same ? "same bits" : "DIFFERENT BITS",
        bytes / Quantile(t_read, 0.5) / 1e9, Quantile(of_read, 0.5), Quantile(of_read, 0.25),
        Quantile(of_read, 0.75));
  }
  return 0;
}
