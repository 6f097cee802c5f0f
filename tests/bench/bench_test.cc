#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>
#include <omp.h>

#include "bench/driver.h"
#include "bench/model_flops.h"
#include "bench/roofline.h"
#include "bench/speedup.h"
#include "bench/workload.h"
#include "core/bandwidth.h"
#include "core/compute_peak.h"
#include "model/family.h"

namespace fathom::bench {
namespace {

struct Shapes {
  std::vector<int64_t> in, out;
};
Shapes Sample(WorkloadKind k, int64_t n, uint64_t seed) {
  Shapes s;
  for (const RequestShape& r : GenerateWorkload(k, n, seed)) {
    EXPECT_TRUE(PassesFilters(r)) << r.prompt << " " << r.output;
    s.in.push_back(r.prompt);
    s.out.push_back(r.output);
  }
  return s;
}

constexpr int64_t kN = 100000;

TEST(Workload, AlpacaMeans) {
  const Shapes s = Sample(WorkloadKind::kAlpaca, kN, 1);
  EXPECT_NEAR(Mean(s.in), 19.3, 19.3 * 0.02);
  EXPECT_NEAR(Mean(s.out), 58.5, 58.5 * 0.02);
}

TEST(Workload, ShareGptMeans) {
  const Shapes s = Sample(WorkloadKind::kShareGpt, kN, 2);
  EXPECT_NEAR(Mean(s.in), 161.3, 161.3 * 0.03);
  EXPECT_NEAR(Mean(s.out), 338.0, 338.0 * 0.03);
}

TEST(Workload, ArxivQuantiles) {
  const Shapes s = Sample(WorkloadKind::kArxiv, kN, 3);
  EXPECT_NEAR(Quantile(s.in, 0.5), 7059, 7059 * 0.02);
  EXPECT_NEAR(Quantile(s.in, 0.9), 12985, 12985 * 0.02);
  EXPECT_NEAR(Quantile(s.out, 0.5), 208, 208 * 0.02);
  EXPECT_NEAR(Quantile(s.out, 0.9), 371, 371 * 0.02);
}

TEST(Workload, FiltersHoldAndSeedsReproduce) {
  for (WorkloadKind k : {WorkloadKind::kAlpaca, WorkloadKind::kShareGpt, WorkloadKind::kArxiv}) {
    const auto a = GenerateWorkload(k, 20000, 7), b = GenerateWorkload(k, 20000, 7);
    ASSERT_EQ(a.size(), 20000u);
    int64_t min_in = 1 << 30, min_out = 1 << 30, max_total = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].prompt, b[i].prompt);
      EXPECT_EQ(a[i].output, b[i].output);
      min_in = std::min(min_in, a[i].prompt);
      min_out = std::min(min_out, a[i].output);
      max_total = std::max(max_total, a[i].prompt + a[i].output);
    }
    EXPECT_GE(min_in, kMinPrompt);
    EXPECT_GE(min_out, kMinOutput);
    EXPECT_LE(max_total, kMaxTotal);
    // The filters bind at least somewhere for the short-prompt workloads.
    if (k == WorkloadKind::kAlpaca) {
      EXPECT_EQ(min_in, kMinPrompt);
    }
  }
  const auto c = GenerateWorkload(WorkloadKind::kAlpaca, 100, 8), d = GenerateWorkload(WorkloadKind::kAlpaca, 100, 9);
  int same = 0;
  for (size_t i = 0; i < c.size(); ++i) same += c[i].prompt == d[i].prompt && c[i].output == d[i].output;
  EXPECT_LT(same, 30);
}

TEST(Workload, PassesFilters) {
  EXPECT_TRUE(PassesFilters({4, 4}));
  EXPECT_FALSE(PassesFilters({3, 10}));
  EXPECT_FALSE(PassesFilters({10, 3}));
  EXPECT_TRUE(PassesFilters({16000, 384}));
  EXPECT_FALSE(PassesFilters({16000, 385}));
}

TEST(Workload, SyntheticPromptAvoidsTokenAndIsInRange) {
  const auto p = SyntheticPrompt(5000, 50, 7, 3);
  ASSERT_EQ(p.size(), 5000u);
  for (int32_t id : p) {
    EXPECT_GE(id, 1);
    EXPECT_LT(id, 50);
    EXPECT_NE(id, 7);
  }
  EXPECT_EQ(p, SyntheticPrompt(5000, 50, 7, 3));
  EXPECT_TRUE(ParseWorkload("arxiv").ok());
  EXPECT_FALSE(ParseWorkload("nope").ok());
}

TEST(Normal, QuantileInvertsCdf) {
  for (double p : {1e-6, 0.01, 0.1, 0.5, 0.9, 0.975, 0.999999})
    EXPECT_NEAR(NormalCdf(NormalQuantile(p)), p, 1e-9 * std::max(1.0, p / 1e-6));
  EXPECT_NEAR(NormalQuantile(0.975), 1.959964, 1e-5);
}

TEST(Speedup, HandComputed) {
  // F_0 = 1, F_r = 10, r_max = 4, d = 2: (1 + 40) / (1 + 20) = 41/21.
  EXPECT_DOUBLE_EQ(DecodeSpeedupBound(1, 10, 4, 2), 41.0 / 21.0);
  EXPECT_DOUBLE_EQ(DecodeSpeedupBound(1, 10, 4, 4), 1.0);
  // alpha = 0.2, S_dec = 2: 1 / (0.2 + 0.4) = 5/3.
  EXPECT_DOUBLE_EQ(EndToEndBound(0.2, 2.0), 1.0 / 0.6);
  EXPECT_DOUBLE_EQ(EndToEndBound(0.0, 3.0), 3.0);
  EXPECT_DOUBLE_EQ(EndToEndBound(1.0, 3.0), 1.0);
  // f1 = 0.1: w = (0.5 - 0.1) / 0.9 = 4/9; S = 1 / (0.2 + 0.8 * 4/9) = 45/25 = 1.8.
  EXPECT_NEAR(EndToEndBoundRefined(0.2, 2.0, 0.1), 1.8, 1e-12);
  EXPECT_DOUBLE_EQ(EndToEndBoundRefined(0.2, 2.0, 0.0), EndToEndBound(0.2, 2.0));
}

TEST(Speedup, MeasuredCostBoundByHand) {
  // CB's run: 200 prompt tokens prefilled in 2 s (c_p = 0.01 s); 100 decode tokens through
  // the prelude (0.5 s) and the coda (1.5 s): c_0 = 0.005 + 0.015 = 0.02 s; 400 core rows
  // in 16 s: c_r = 0.04 s; 20.5 s in all, so 0.5 s of scheduling (O / D = 0.5 / 18) and
  // alpha = 2 / 20.5. At r_max 4, d 2: S_dec = (0.02 + 0.16) / (0.02 + 0.08) = 1.8;
  // a perfect CDB takes 2 + 100 x 0.1 x (1 + 0.5 / 18) s, so S_e2e = 20.5 / that, which
  // is DESIGN.md §5's 1 / (alpha + (1 - alpha) / S_dec).
  StageCosts cb;
  cb.prefill_s = 2, cb.prelude_s = 0.5, cb.coda_s = 1.5, cb.core_s = 16, cb.total_s = 20.5;
  cb.prefill_rows = 200, cb.prelude_rows = 100, cb.coda_rows = 100, cb.core_rows = 400;
  auto b = MeasuredCostBound(cb, 200, 100, 4, 2);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_NEAR(b->cp, 0.01, 1e-15);
  EXPECT_NEAR(b->c0, 0.02, 1e-15);
  EXPECT_NEAR(b->cr, 0.04, 1e-15);
  EXPECT_NEAR(b->alpha, 2 / 20.5, 1e-15);
  EXPECT_NEAR(b->s_dec, 1.8, 1e-12);
  const double perfect = 2 + 100 * 0.1 * (1 + 0.5 / 18);
  EXPECT_NEAR(b->s_e2e, 20.5 / perfect, 1e-12);
  EXPECT_NEAR(b->s_e2e, 1 / (2 / 20.5 + (18.5 / 20.5) / 1.8), 1e-12);
  EXPECT_NEAR(b->recompute_share, 0, 1e-12);
  // CB preempted a request and recomputed 60 prompt rows and 50 tokens (each through the
  // prelude, 4 core steps and the coda) at the same per-row costs, with scheduling in
  // proportion: 30.35 s. The perfect CDB is the same, so the bound rises to 30.35 / perfect
  // and CB's useful 20.5 s leave 1 - 20.5 / 30.35 recomputed.
  StageCosts pre = cb;
  pre.prefill_s = 2.6, pre.prefill_rows = 260;
  pre.prelude_s = 0.75, pre.coda_s = 2.25, pre.prelude_rows = pre.coda_rows = 150;
  pre.core_s = 24, pre.core_rows = 600;
  pre.total_s = 2.6 + 0.75 + 24 + 2.25 + 0.75;
  b = MeasuredCostBound(pre, 200, 100, 4, 2);
  ASSERT_TRUE(b.ok());
  EXPECT_NEAR(b->s_dec, 1.8, 1e-12);
  EXPECT_NEAR(b->s_e2e, 30.35 / perfect, 1e-12);
  EXPECT_NEAR(b->recompute_share, 1 - 20.5 / 30.35, 1e-12);
  // Prelude and coda rows are divided separately (here: a replayed token's coda skipped).
  StageCosts odd = cb;
  odd.coda_rows = 50;
  EXPECT_NEAR(MeasuredCostBound(odd, 200, 100, 4, 2)->c0, 0.005 + 0.03, 1e-15);
  // No exits: no speed-up; no prefill and all of the time in the core: r_max / d.
  EXPECT_NEAR(MeasuredCostBound(cb, 200, 100, 4, 4)->s_e2e, 1.0, 1e-12);
  StageCosts core_only = cb;
  core_only.prefill_s = core_only.prelude_s = core_only.coda_s = 0, core_only.total_s = 16;
  EXPECT_NEAR(MeasuredCostBound(core_only, 200, 100, 4, 2)->s_e2e, 2.0, 1e-12);
  // Nothing decoded, or no time: no bound.
  StageCosts none = cb;
  none.coda_rows = 0;
  EXPECT_FALSE(MeasuredCostBound(none, 200, 100, 4, 2).ok());
  none = cb;
  none.core_rows = 0;
  EXPECT_FALSE(MeasuredCostBound(none, 200, 100, 4, 2).ok());
  EXPECT_FALSE(MeasuredCostBound(cb, 200, 0, 4, 2).ok());
  none = cb;
  none.total_s = 0;
  EXPECT_FALSE(MeasuredCostBound(none, 200, 100, 4, 2).ok());
}

TEST(LeastSquares, RecoversExactPlaneAndRejectsSingular) {
  // t = 2 ms + 0.5 ms * N_b + 0.001 ms * N_c, with small deterministic noise.
  std::vector<StepPoint> pts;
  int i = 0;
  for (double b : {1, 2, 4, 8, 16, 32})
    for (double ctx : {128, 512, 2048}) {
      const double noise = ((i++ % 3) - 1) * 1e-6;
      pts.push_back({b, b * ctx, 2e-3 + 0.5e-3 * b + 1e-6 * b * ctx + noise});
    }
  auto f = FitStepLatency(pts);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_NEAR(f->delta, 2e-3, 2e-6);
  EXPECT_NEAR(f->gamma, 0.5e-3, 1e-6);
  EXPECT_NEAR(f->alpha_kv, 1e-6, 1e-8);
  EXPECT_GT(f->r2, 0.9999);
  EXPECT_NEAR(f->SaturationBatch(0), 4.0, 0.02);
  EXPECT_NEAR(f->SaturationBatch(500), 2e-3 / (0.5e-3 + 500e-6), 0.02);
  // All points at one batch size and context: N_b and N_c are not separable.
  EXPECT_FALSE(FitStepLatency({{4, 400, 1}, {4, 400, 1.1}, {4, 400, 0.9}}).ok());
  EXPECT_FALSE(LeastSquares({}, {}).ok());
  auto line = LeastSquares({{1, 0}, {1, 1}, {1, 2}}, {1, 3, 5});
  ASSERT_TRUE(line.ok());
  EXPECT_NEAR((*line)[0], 1, 1e-12);
  EXPECT_NEAR((*line)[1], 2, 1e-12);
}

ModelSpec PresetSpec(const std::string& family, const std::string& preset) {
  const Family* f = FindFamilyByName(family);
  EXPECT_NE(f, nullptr);
  auto cfg = f->preset_config(preset);
  EXPECT_TRUE(cfg.ok());
  auto spec = f->spec_from_config(JsonFields(*cfg, preset));
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return *spec;
}

TEST(Flops, OuroTinyByHand) {
  // ouro tiny: hidden 64, inter 160, 2 layers (all core), 4 heads x 16, 2 kv heads, vocab 256.
  const ModelSpec s = PresetSpec("ouro", "tiny");
  const double layer = 2.0 * (64 * 64 + 64 * 32 + 64 * 32 + 64 * 64 + 3 * 64 * 160);  // q k v o, mlp
  const StageFlops f = CountFlops(s);
  EXPECT_DOUBLE_EQ(f.prelude, 0);
  EXPECT_DOUBLE_EQ(f.core_step, 2 * layer + 2 * 64);  // + exit gate
  EXPECT_DOUBLE_EQ(f.coda, 2.0 * 64 * 256);           // LM head
}

TEST(Flops, HuginnTinyByHand) {
  // huginn tiny: n_embd 64, 4 heads (MHA), inter 128, vocab 256; 2-4-2 with a [64, 128] adapter.
  const ModelSpec s = PresetSpec("huginn", "tiny");
  const double layer = 2.0 * (4 * 64 * 64 + 3 * 64 * 128);
  const StageFlops f = CountFlops(s);
  EXPECT_DOUBLE_EQ(f.prelude, 2 * layer);
  EXPECT_DOUBLE_EQ(f.core_step, 4 * layer + 2.0 * 64 * 128);
  EXPECT_DOUBLE_EQ(f.coda, 2 * layer + 2.0 * 64 * 256);
}

// The llama-3.2-1b preset: Llama 3.2 1B's published 1.24B parameters (embeddings tied:
// 128256 x 2048 = 262.7M, 16 layers of 60.8M), so 2 x 1.2358e9 flops per token, and its
// RoPE scaling (factor 32 from an original 8192 positions).
TEST(Flops, Llama32PresetHasThePublishedParameterCount) {
  const ModelSpec s = PresetSpec("llama", "llama-3.2-1b");
  const StageFlops f = CountFlops(s);
  EXPECT_NEAR((f.prelude + f.coda) / 2, 1.2358e9, 0.0005e9);
  EXPECT_EQ(s.rope_scaling.kind, RopeScaling::Kind::kLlama3);
  EXPECT_EQ(s.rope_scaling.factor, 32.0);
  EXPECT_EQ(s.rope_scaling.original_max_positions, 8192);
  EXPECT_TRUE(s.tie_embeddings);
}

TEST(Flops, RealShapesMatchPublishedRatios) {
  const StageFlops o = CountFlops(PresetSpec("ouro", "ouro-1.4b"));
  EXPECT_NEAR(o.f0() / o.fr(), 0.082, 0.002);
  const StageFlops h = CountFlops(PresetSpec("huginn", "huginn-0125"));
  EXPECT_NEAR(h.f0() / h.fr(), 1.18, 0.01);
}

TEST(Roofline, TinyLlamaDecodeStepByHand) {
  // TinyLlama: hidden 2048, 32 heads x 64, 4 KV heads, MLP 5632, 22 layers, vocab 32000.
  const ModelSpec s = PresetSpec("llama", "tinyllama-1.1b");
  const double params = 2048.0 * 2048 * 2 + 2048.0 * 256 * 2 + 3 * 2048.0 * 5632;  // q o, k v, mlp
  ASSERT_DOUBLE_EQ(params, 44040192);
  const double ctx = 192.5;
  const DecodeStepWork w = CountDecodeStep(s, 1, 4, ctx, 2.2e9, 2);
  EXPECT_DOUBLE_EQ(w.weight_bytes, 2.2e9);
  EXPECT_DOUBLE_EQ(w.layer_ops, 4 * 22 * 2 * params);
  EXPECT_DOUBLE_EQ(w.head_ops, 4 * 2.0 * 2048 * 32000);
  EXPECT_DOUBLE_EQ(w.attention_ops, 4 * 22 * 4.0 * 2048 * ctx);   // QK^T and PV over 32 x 64
  EXPECT_DOUBLE_EQ(w.kv_bytes, 4 * 22 * ctx * 2 * 256 * 2.0);      // K and V, 4 x 64, bf16
}

TEST(Roofline, LoopedModelsCountTheCoreOncePerStep) {
  // Ouro-1.4B: 24 layers, all in the loop; 16 heads x 128 (MHA); 4 steps.
  const ModelSpec s = PresetSpec("ouro", "ouro-1.4b");
  const DecodeStepWork one = CountDecodeStep(s, 1, 1, 100, 0, 4);
  const DecodeStepWork four = CountDecodeStep(s, 4, 1, 100, 0, 4);
  EXPECT_DOUBLE_EQ(four.head_ops, one.head_ops);  // the LM head runs once per token
  EXPECT_DOUBLE_EQ(four.layer_ops, 4 * one.layer_ops);
  EXPECT_DOUBLE_EQ(four.attention_ops, 4 * 24 * 4.0 * 2048 * 100);
  EXPECT_DOUBLE_EQ(four.kv_bytes, 4 * 24 * 100 * 2 * 2048 * 4.0);
}

TEST(Roofline, TheSlowerBoundWinsAndEachPartUsesItsOwnPeak) {
  DecodeStepWork w;
  w.weight_bytes = 0.9e9;
  w.kv_bytes = 0.1e9;       // 1 GB at 10 GB/s: 0.1 s
  w.layer_ops = 100e9;      // at 1000 (bf16) or 500 (f32) GOP/s
  w.head_ops = 10e9;        // at 500 (f32)
  w.attention_ops = 5e9;    // always f32: 500
  const ComputePeak peak{500, 1000, 4000};
  const Roofline r = DecodeRoofline(w, Arithmetic::kBf16Dot, Arithmetic::kF32Fma, 10, peak);
  EXPECT_DOUBLE_EQ(r.memory_s, 0.1);
  EXPECT_DOUBLE_EQ(r.compute_s, 0.1 + 0.02 + 0.01);
  EXPECT_TRUE(r.compute_bound());
  EXPECT_DOUBLE_EQ(r.seconds(), 0.13);
  const Roofline q = DecodeRoofline(w, Arithmetic::kInt8Dot, Arithmetic::kInt8Dot, 10, peak);
  EXPECT_DOUBLE_EQ(q.compute_s, 0.025 + 0.0025 + 0.01);
  EXPECT_FALSE(q.compute_bound());
  EXPECT_DOUBLE_EQ(q.seconds(), 0.1);
}

TEST(ComputePeak, MeasuredPeaksAreBetweenOneGigaOpAndTheCoresTheoreticalRate) {
  // Upper bound: every OpenMP thread on its own core at 6 GHz issuing two vector
  // instructions per cycle (two FMA pipes; Zen 5 and Sapphire Rapids have two). A probe that
  // miscounted its operations or let the compiler drop its loop would land outside.
  const ComputePeak p = MeasureComputePeak(0.02, 2);
  const int threads = omp_get_max_threads();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const double f32_lanes = avx512 ? 16 : 8;
  const double max_f32 = threads * 6.0 * 2 * f32_lanes * 2;
  EXPECT_GT(p.f32_gflops, 1);
  EXPECT_LT(p.f32_gflops, max_f32);
  const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
  if (bf16) {
    EXPECT_GT(p.bf16_gflops, 1);
    EXPECT_LT(p.bf16_gflops, threads * 6.0 * 2 * 32 * 2);
  } else {
    EXPECT_EQ(p.bf16_gflops, 0);
  }
  const bool vnni = avx512 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
  EXPECT_GT(p.int8_gops, 1);
  EXPECT_LT(p.int8_gops, threads * 6.0 * 2 * (vnni ? 64 : 32) * 2);
  EXPECT_EQ(p.of(Arithmetic::kBf16Dot), p.bf16_gflops);
  EXPECT_EQ(p.of(Arithmetic::kInt8Dot), p.int8_gops);
}

TEST(Bandwidth, ReadLoopSumsEveryElementOnce) {
  // The loop MeasureBandwidth times must read the whole array (each thread's share, the
  // vector part and the tail): a sum of ones (exact in f32 below 2^24) counts the elements.
  for (const long n : {1L, 63L, 64L, 65L, (1L << 20) + 37}) {
    const std::vector<float> ones(static_cast<size_t>(n), 1.f);
    for (const bool prefetch : {false, true})
      EXPECT_EQ(SumAll(ones.data(), n, prefetch), static_cast<float>(n))
          << "n " << n << " prefetch " << prefetch;
  }
}

TEST(Bandwidth, ReadLoopIsNotLatencyBound) {
  // 64 MiB arrays, larger than this project's hosts' caches per core. The read loop must
  // stream: a loop bound by its adds' latency (a scalar sum) measured 0.18 of copy's rate on
  // Zen 5 with two threads, 0.2-0.32 with one; the vector loop 0.82-1.03. One thread, and up
  // to five rounds passing on the first where reading keeps up: CI runs this beside a
  // sanitizer build on two cores, where a round of two threads lost a core for the whole read
  // (read 6.0, copy 72.7 GB/s); a latency-bound loop fails every round.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  Bandwidth bw;
  for (int round = 0; round < 5; ++round) {
    bw = MeasureBandwidth(size_t{64} << 20, 3);
    if (bw.read_gbs > 0.6 * bw.copy_gbs) break;
  }
  omp_set_num_threads(threads);
  EXPECT_GT(bw.copy_gbs, 0.5);
  EXPECT_GT(bw.read_gbs, 0.6 * bw.copy_gbs) << "read " << bw.read_gbs << " copy " << bw.copy_gbs;
  EXPECT_LT(bw.best(), 2000);
  EXPECT_EQ(bw.best(), std::max({bw.read_gbs, bw.copy_gbs, bw.triad_gbs}));
}

TEST(Driver, PoissonArrivalsAndRequests) {
  const auto a = PoissonArrivals(20000, 4.0, 5);
  ASSERT_EQ(a.size(), 20000u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_NEAR(a.back() / 20000.0, 0.25, 0.01);  // mean gap 1/rate
  EXPECT_EQ(a, PoissonArrivals(20000, 4.0, 5));
  // A duration keeps the same sequence up to that time: ~rate x duration arrivals.
  const auto w = PoissonArrivalsWithin(1000.0, 4.0, 5);
  EXPECT_NEAR(static_cast<double>(w.size()), 4000, 4 * std::sqrt(4000.0));
  ASSERT_LT(w.size(), a.size());
  EXPECT_TRUE(std::equal(w.begin(), w.end(), a.begin()));
  EXPECT_LE(w.back(), 1000.0);
  EXPECT_GT(a[w.size()], 1000.0);

  const ModelSpec spec = PresetSpec("ouro", "tiny");
  const auto shapes = GenerateWorkload(WorkloadKind::kAlpaca, 5, 1);
  const auto reqs = MakeRequests(shapes, spec, {3.0, 2, 9, {}}, 1);
  ASSERT_EQ(reqs.size(), 5u);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(static_cast<int64_t>(reqs[i].prompt.size()), shapes[i].prompt);
    EXPECT_EQ(reqs[i].max_tokens, shapes[i].output);
    EXPECT_FALSE(reqs[i].stop_at_eos);
    EXPECT_EQ(reqs[i].exit.kind, ExitSpec::Kind::kRandom);
    EXPECT_DOUBLE_EQ(reqs[i].exit.mean, 3.0);
    EXPECT_EQ(reqs[i].exit.min_depth, 2);
  }
  EXPECT_NE(reqs[0].exit.seed, reqs[1].exit.seed);
  EXPECT_EQ(MakeRequests(shapes, spec, ExitTraceOptions{}, 1)[0].exit.kind, ExitSpec::Kind::kNone);
}

TEST(ExitTrace, MakeRequestsUsesTheTraceInsteadOfRandomDepths) {
  const ModelSpec spec = PresetSpec("ouro", "tiny");
  ExitTraceOptions exits{3.0, 2, 9, {}};
  exits.recorded.depths = {2, 4, 3};
  const auto reqs = MakeRequests(std::vector<RequestShape>{{5, 3}, {6, 2}}, spec, exits, 1);
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].exit.kind, ExitSpec::Kind::kTrace);
  EXPECT_EQ(reqs[0].exit.trace, (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(reqs[1].exit.trace, (std::vector<int32_t>{3}));
}

}  // namespace
}  // namespace fathom::bench
