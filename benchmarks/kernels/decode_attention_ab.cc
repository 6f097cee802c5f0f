// A/B of decode attention in one process: the library's PagedAttention ("new") against
// another revision's, compiled into namespace fathom_old ("old": see
// scripts/decode-attention-ab.sh, which builds both and runs the shapes), calls alternating
// (old first in every other pair) so that a noisy host's slow spells fall on both alike.
// B rows, each with its own shuffled block table of L keys (bf16 K/V, or f32 with F32=1),
// CALLS pairs; prints the median time of each and the median [quartiles] of the per-pair
// old/new ratios, and the largest difference of the two outputs relative to the largest
// output (0 where the change keeps the bits).
//   env: HEADS, KV_HEADS, HEAD_DIM (default 32, 4, 64: TinyLlama), BATCH (4), CALLS (41), F32
//   args: L ...
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/paged_attention.h"

using namespace fathom;

// The old revision's PagedAttention, through a wrapper built with -Dfathom=fathom_old (the
// structs have the same layout in both namespaces).
extern "C" void OldPagedAttention(const void* shape, const void* kv, const void* rows, long n,
                                  const void* segments);

namespace {

int64_t Env(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoll(v) : fallback;
}

template <typename F>
double Seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t heads = Env("HEADS", 32), kv_heads = Env("KV_HEADS", 4), hd = Env("HEAD_DIM", 64);
  const int64_t batch = Env("BATCH", 4), calls = Env("CALLS", 41);
  const bool f32 = Env("F32", 0) != 0;
  const int32_t block = 16;
  const AttentionShape shape{heads, kv_heads, hd, 1.f / std::sqrt(static_cast<float>(hd))};
  for (int i = 1; i < argc; ++i) {
    const int64_t n = std::atoll(argv[i]);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    const int64_t row = kv_heads * hd, per_seq = (n + block - 1) / block, stride = block * row;
    const auto elems = static_cast<size_t>(per_seq * batch * stride);
    std::vector<uint16_t> k(elems), v(elems);
    std::vector<float> kf(f32 ? elems : 0), vf(kf.size());
    for (size_t j = 0; j < elems; ++j) {
      k[j] = F32ToBF16(u(rng));
      v[j] = F32ToBF16(u(rng));
      if (f32) kf[j] = BF16ToF32(k[j]), vf[j] = BF16ToF32(v[j]);
    }
    std::vector<int32_t> perm(static_cast<size_t>(per_seq * batch));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const PagedKvView view =
        f32 ? PagedKvView{kf.data(), vf.data(), stride, row, block, DType::kF32}
            : PagedKvView{k.data(), v.data(), stride, row, block, DType::kBF16};
    std::vector<float> q(static_cast<size_t>(batch * heads * hd)), out_new(q.size()),
        out_old(q.size());
    for (float& x : q) x = u(rng);
    std::vector<KeySegment> segs(static_cast<size_t>(batch));
    std::vector<PagedAttentionRow> rows_new(segs.size()), rows_old(segs.size());
    for (size_t b = 0; b < segs.size(); ++b) {
      const auto off = static_cast<int64_t>(b) * heads * hd;
      segs[b] = {perm.data() + static_cast<int64_t>(b) * per_seq, 0, n, nullptr, 0};
      rows_new[b] = {q.data() + off, out_new.data() + off, static_cast<int32_t>(b),
                     static_cast<int32_t>(b + 1)};
      rows_old[b] = {q.data() + off, out_old.data() + off, static_cast<int32_t>(b),
                     static_cast<int32_t>(b + 1)};
    }
    const auto run_new = [&] { PagedAttention(shape, view, rows_new.data(), batch, segs.data()); };
    const auto run_old = [&] {
      OldPagedAttention(&shape, &view, rows_old.data(), batch, segs.data());
    };
    run_new();  // warm-up
    run_old();
    std::vector<double> t_old, t_new, ratio;
    for (int64_t c = 0; c < calls; ++c) {
      double a = 0, b = 0;
      if (c % 2 == 0) {
        a = Seconds(run_old);
        b = Seconds(run_new);
      } else {
        b = Seconds(run_new);
        a = Seconds(run_old);
      }
      t_old.push_back(a), t_new.push_back(b), ratio.push_back(a / b);
    }
    double diff = 0, top = 0;
    for (size_t j = 0; j < q.size(); ++j) {
      diff = std::max(diff, static_cast<double>(std::fabs(out_new[j] - out_old[j])));
      top = std::max(top, static_cast<double>(std::fabs(out_old[j])));
    }
    std::printf(
        "%lld/%lld x %lld b%lld %s L %6lld: old %.4f ms new %.4f ms  old/new per pair: "
        "med %.3f [q1 %.3f q3 %.3f]  max diff %.1e (relative)\n",
        static_cast<long long>(heads), static_cast<long long>(kv_heads), static_cast<long long>(hd),
        static_cast<long long>(batch), f32 ? "f32" : "bf16", static_cast<long long>(n),
        1e3 * Quantile(t_old, 0.5), 1e3 * Quantile(t_new, 0.5), Quantile(ratio, 0.5),
        Quantile(ratio, 0.25), Quantile(ratio, 0.75), diff / top);
  }
  return 0;
}
