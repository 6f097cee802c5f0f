#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench/roofline.h"
#include "bench/speedup.h"
#include "bench_commands.h"
#include "bench_harness.h"
#include "commands.h"
#include "core/bandwidth.h"
#include "core/compute_peak.h"
#include "engine_flags.h"
#include "exec/generate.h"
#include "flags.h"
#include "kv/block_pool.h"

namespace fathom::cli {
namespace {

// The flags of `bench decode`; --layout comes from EngineFlags (the engine's default).
struct DecodeArgs {
  std::string model_dir, batch_text = "1";
  LoadFlags load;
  int64_t prompt = 128, gen = 128, threads = 2, loops = 0, prefill_tokens = 512;
  double budget = 1;
  bool json = false;
  EngineFlags engine{kFlagLayout | kFlagKvDtype};

  void Declare(FlagSet& f) {
    f.String("--model", &model_dir, "Hugging Face model directory");
    f.String("--batch", &batch_text, "comma-separated batch sizes (default 1)");
    f.Int("--prompt", &prompt, "prompt tokens per sequence (default 128)", 1, 1 << 20);
    f.Int("--gen", &gen, "generated tokens per sequence (default 128)", 1, 1 << 20);
    DeclareThreads(f, &threads);
    f.Int("--loops", &loops, "loop steps of a looped model (default: the model's)", 1, 4096);
    f.Int("--prefill-tokens", &prefill_tokens, "tokens per prefill call (default 512)", 1, 1 << 20);
    f.Double("--budget", &budget, "L2A gate checkpoints: the b every token's routers read (default 1)", 0, 1);
    engine.Declare(f);
    load.Declare(f);
    f.Bool("--json", &json, "print one JSON object");
    f.Require("--model");
  }
};

// Every batch size's run, between two measurements of the bandwidth and compute peaks.
struct DecodeRuns {
  std::vector<BatchDecodeResult> results;
  Bandwidth before, after;
  ComputePeak peak_before, peak_after;
  double bandwidth() const { return std::max(before.best(), after.best()); }
  // The read-only loop's rate: a decode step's weights and K/V are only read, and one core
  // reads slower than it copies (0.8-0.9 of copy's counted bytes on Zen 5).
  double read_bandwidth() const { return std::max(before.read_gbs, after.read_gbs); }
  ComputePeak peak() const {
    return {std::max(peak_before.f32_gflops, peak_after.f32_gflops),
            std::max(peak_before.bf16_gflops, peak_after.bf16_gflops),
            std::max(peak_before.int8_gops, peak_after.int8_gops)};
  }
};

// The arithmetic a Linear's Forward runs in (which peak bounds it).
Arithmetic ArithmeticOf(const Linear& l) {
  if (l.weight_format() == WeightFormat::kW8A8 || l.weight_format() == WeightFormat::kInt4)
    return Arithmetic::kInt8Dot;
  if (!l.batch_invariant() && l.compute_dtype() == DType::kBF16) return Arithmetic::kBf16Dot;
  return Arithmetic::kF32Fma;
}

Result<DecodeRuns> MeasureDecode(const Model& m, const DecodeArgs& a, const std::vector<int64_t>& batches, int32_t r,
                                 const EngineOptions& o) {
  // Warm-up: primitive caches, page faults, thread start-up.
  FATHOM_RETURN_IF_ERROR(RunBatchDecode(m, 1, 16, 4, r, o.layout, a.prefill_tokens, o.kv_dtype).status());
  DecodeRuns runs;
  runs.before = MeasureBandwidth();
  runs.peak_before = MeasureComputePeak();
  for (int64_t b : batches) {
    // Warm-up per batch: oneDNN builds a matmul for each new row count on first use (tiles
    // of up to 128 rows), which took 5-12% of a 128-token prompt's first prefill on Zen 5;
    // a one-time cost per Linear and M, so the timed run below measures the steady state.
    FATHOM_RETURN_IF_ERROR(RunBatchDecode(m, static_cast<int32_t>(b), a.prompt, 1, r, o.layout,
                                          a.prefill_tokens, o.kv_dtype, static_cast<float>(a.budget))
                               .status());
    FATHOM_ASSIGN_OR_RETURN(BatchDecodeResult res,
                            RunBatchDecode(m, static_cast<int32_t>(b), a.prompt, a.gen, r, o.layout,
                                           a.prefill_tokens, o.kv_dtype, static_cast<float>(a.budget)));
    runs.results.push_back(res);
  }
  runs.after = MeasureBandwidth();
  runs.peak_after = MeasureComputePeak();
  return runs;
}

void PrintDecode(const Model& m, const DecodeArgs& a, const DecodeRuns& runs, int32_t r, const EngineOptions& o) {
  const double bw = runs.bandwidth();
  const double bytes_per_step = static_cast<double>(m.prelude_weight_bytes() +
                                                    static_cast<size_t>(r) * m.core_step_weight_bytes() +
                                                    m.coda_weight_bytes());
  const ComputePeak peak = runs.peak();
  const Arithmetic layer_arith = ArithmeticOf(m.weights().layers.front().gate_up);
  const Arithmetic head_arith = ArithmeticOf(m.weights().lm_head);
  // Bytes per stored K or V value, int8's per-head scales spread over the values.
  const int64_t kv_dim = m.spec().kv_dim();
  const double kv_value_bytes =
      static_cast<double>(BlockPool::RowElems(kv_dim, o.kv_dtype, m.spec().n_kv_heads)) *
      static_cast<double>(DTypeSize(o.kv_dtype)) / static_cast<double>(kv_dim);
  // Decode token g (0-based) sits at position prompt + g and attends prompt + g + 1 positions.
  const double context = static_cast<double>(a.prompt) + static_cast<double>(a.gen + 1) / 2;
  nlohmann::json rows = nlohmann::json::array();
  for (const BatchDecodeResult& res : runs.results) {
    const double gbs = bytes_per_step / res.decode_step_s / 1e9;
    const bench::DecodeStepWork work =
        bench::CountDecodeStep(m.spec(), r, res.batch, context, bytes_per_step, kv_value_bytes);
    const bench::Roofline roof = bench::DecodeRoofline(work, layer_arith, head_arith, bw, peak);
    rows.push_back({{"batch", res.batch},
                    {"prompt_tokens_per_s", res.prompt_tok_s},
                    {"decode_tokens_per_s", res.decode_tok_s},
                    {"decode_step_ms", res.decode_step_s * 1e3},
                    {"weight_gbs", gbs},
                    {"decode_matmul_fraction", res.decode_matmul_fraction},
                    {"fraction_of_bandwidth", gbs / bw},
                    {"fraction_of_read_bandwidth", gbs / runs.read_bandwidth()},
                    {"kv_bytes_per_step", work.kv_bytes},
                    {"ops_per_step", work.layer_ops + work.head_ops + work.attention_ops},
                    {"roofline_step_ms", roof.seconds() * 1e3},
                    {"roofline_memory_ms", roof.memory_s * 1e3},
                    {"roofline_compute_ms", roof.compute_s * 1e3},
                    {"roofline_bound", roof.compute_bound() ? "compute" : "memory"},
                    {"fraction_of_roofline", roof.seconds() / res.decode_step_s}});
  }
  if (a.json) {
    nlohmann::json j = {
        {"model", a.model_dir},
        {"model_type", m.spec().model_type},
        {"loops", r},
        {"threads", a.threads},
        {"prompt_tokens", a.prompt},
        {"generated_tokens", a.gen},
        {"layout", std::string(KvLayoutName(o.layout))},
        {"kv_dtype", std::string(KvDtypeName(o.kv_dtype))},
        {"weights", a.load.weights},
        {"lm_head_weights", a.load.lm_head_weights},
        {"batch_invariant", a.load.batch_invariant},
        {"weight_bytes_per_step", bytes_per_step},
        {"budget", a.budget},
        {"l2a", m.spec().l2a.enabled},
        {"bandwidth_read_gbs", std::max(runs.before.read_gbs, runs.after.read_gbs)},
        {"bandwidth_copy_gbs", std::max(runs.before.copy_gbs, runs.after.copy_gbs)},
        {"bandwidth_triad_gbs", std::max(runs.before.triad_gbs, runs.after.triad_gbs)},
        {"peak_f32_gflops", peak.f32_gflops},
        {"peak_bf16_gflops", peak.bf16_gflops},
        {"peak_int8_gops", peak.int8_gops},
        {"layer_arithmetic", std::string(ArithmeticName(layer_arith))},
        {"head_arithmetic", std::string(ArithmeticName(head_arith))},
        {"results", rows}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf(
      "model %s (%s), loops %d, %lld threads, prompt %lld, gen %lld, KV %s, "
      "weights %s (LM head %s) %.1f MB per step\n",
      a.model_dir.c_str(), m.spec().model_type.c_str(), r, static_cast<long long>(a.threads),
      static_cast<long long>(a.prompt), static_cast<long long>(a.gen),
      KvDtypeName(o.kv_dtype).data(), a.load.weights.c_str(), a.load.lm_head_weights.c_str(),
      bytes_per_step / 1e6);
  std::printf("memory bandwidth (best of read/copy/triad, before and after): %.1f GB/s; read only %.1f GB/s\n", bw,
              runs.read_bandwidth());
  std::printf("compute peaks (all threads, before and after): f32 FMA %.1f, bf16 dot %.1f GFLOP/s, int8 dot %.1f "
              "GOP/s; layers run %s, the LM head %s\n",
              peak.f32_gflops, peak.bf16_gflops, peak.int8_gops, ArithmeticName(layer_arith).data(),
              ArithmeticName(head_arith).data());
  if (m.spec().l2a.enabled) std::printf("L2A gates at budget %.3f\n", a.budget);
  std::printf("%6s %12s %12s %12s %10s %8s %8s %12s %8s %12s %10s\n", "batch", "prompt tok/s", "decode tok/s",
              "step ms", "weight GB/s", "of bw", "of read", "roofline ms", "bound", "of roofline", "matmul");
  for (const auto& row : rows)
    std::printf("%6d %12.1f %12.2f %12.2f %10.1f %7.1f%% %7.1f%% %12.2f %8s %11.1f%% %9.1f%%\n", row["batch"].get<int>(),
                row["prompt_tokens_per_s"].get<double>(), row["decode_tokens_per_s"].get<double>(),
                row["decode_step_ms"].get<double>(), row["weight_gbs"].get<double>(),
                100 * row["fraction_of_bandwidth"].get<double>(), 100 * row["fraction_of_read_bandwidth"].get<double>(),
                row["roofline_step_ms"].get<double>(),
                row["roofline_bound"].get<std::string>().c_str(), 100 * row["fraction_of_roofline"].get<double>(),
                100 * row["decode_matmul_fraction"].get<double>());
}

int RunBenchDecode(const std::vector<std::string>& args) {
  const std::string cmd = "bench decode";
  DecodeArgs a;
  FlagSet flags(
      "fathom bench decode",
      "fathom bench decode --model DIR [--batch 1,4,16,64] [--prompt 128 --gen 128 --threads 2]\n"
      "                    [--loops R] [--layout NAME] [--weights checkpoint|int8|w8a8|int4]\n"
      "                    [--lm-head-weights FORMAT] [--batch-invariant] [--budget B] [--json]",
      "For each batch size B: B sequences of --prompt tokens are prefilled, then decode\n"
      "--gen tokens each in lockstep (every token at full depth), after one untimed run of\n"
      "the same prefill (oneDNN builds its matmuls per row count on first use). Reports prompt and\n"
      "decode tokens/s, and the decode step's weight bytes per second as a fraction of\n"
      "the memory bandwidth measured in the same run (copy/triad/read loops), and the step\n"
      "time against its roofline: max(bytes / bandwidth, operations / compute peak), where the\n"
      "bytes are the weights and the K/V read, the operations those of the matmuls and attention,\n"
      "and the peaks (f32 FMA, bf16 and int8 dot products) are measured in the same run. An L2A "
      "gate\n"
      "checkpoint runs every token at --budget B and reports the layer matmul flops its gates\n"
      "ran in decode, as a fraction of the same tokens through the ungated model.");
  a.Declare(flags);
  if (Status s = flags.Parse(args); !s.ok()) return Fail(cmd, s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  auto batches = ParseIntList("--batch", a.batch_text);
  if (!batches.ok()) return Fail(cmd, batches.status().message(), 2);
  for (int64_t b : *batches)
    if (b < 1 || b > 4096) return Fail(cmd, "--batch: " + std::to_string(b) + " is outside [1, 4096]", 2);
  auto opt = a.engine.Options();
  if (!opt.ok()) return Fail(cmd, opt.status().message(), 2);
  auto load = a.load.Options();
  if (!load.ok()) return Fail(cmd, load.status().message(), 2);
  ApplyThreads(a.threads);
  auto model = Model::Load(a.model_dir, *load);
  if (!model.ok()) return Fail(cmd, model.status().message(), 1);
  if (flags.Seen("--budget") && !(*model)->spec().l2a.enabled)
    return Fail(cmd, "--budget: " + a.model_dir + " is not an L2A gate checkpoint (docs/L2A_FORMAT.md); nothing reads b here", 2);
  auto r = ResolveLoops((*model)->spec(), static_cast<int32_t>(a.loops));
  if (!r.ok()) return Fail(cmd, "--" + r.status().message(), 2);
  auto runs = MeasureDecode(**model, a, *batches, *r, *opt);
  if (!runs.ok()) return Fail(cmd, runs.status().message(), 1);
  PrintDecode(**model, a, *runs, *r, *opt);
  return 0;
}

// One row per (context, batch): the median core-step time or "skipped" (KV over
// --kv-gb), printed as it is measured unless `json`.
Result<nlohmann::json> MeasureSteps(const Model& m, const std::vector<int64_t>& contexts,
                                    const std::vector<int64_t>& batches, int64_t kv_gb, int64_t reps, DType kv_dtype,
                                    bool json) {
  nlohmann::json rows = nlohmann::json::array();
  if (!json) std::printf("%8s %6s %12s %10s\n", "context", "batch", "step ms", "KV GB");
  for (int64_t c : contexts)
    for (int64_t b : batches) {
      FATHOM_ASSIGN_OR_RETURN(StepLatency res, MeasureCoreStep(m, static_cast<int32_t>(b), c,
                                                               static_cast<size_t>(kv_gb) * 1000000000ull,
                                                               static_cast<int>(reps), kv_dtype));
      rows.push_back({{"context", c}, {"batch", b}, {"skipped", res.skipped},
                      {"step_ms", res.seconds * 1e3}, {"kv_gb", res.kv_gb}});
      if (json) continue;
      if (res.skipped)
        std::printf("%8lld %6lld %12s %10.1f (over --kv-gb)\n", static_cast<long long>(c), static_cast<long long>(b),
                    "skipped", res.kv_gb);
      else
        std::printf("%8lld %6lld %12.2f %10.2f\n", static_cast<long long>(c), static_cast<long long>(b),
                    res.seconds * 1e3, res.kv_gb);
      std::fflush(stdout);
    }
  return rows;
}

// --fit: t = delta + gamma N_b + alpha_kv N_c over the measured rows, B* per context from
// that fit and from a line fitted to that context's points alone; printed unless `json`.
Result<nlohmann::json> FitSteps(const nlohmann::json& rows, const std::vector<int64_t>& contexts, bool json) {
  std::vector<bench::StepPoint> all;
  for (const auto& row : rows)
    if (!row["skipped"].get<bool>()) {
      const auto b = static_cast<double>(row["batch"].get<int64_t>());
      all.push_back({b, b * static_cast<double>(row["context"].get<int64_t>()), row["step_ms"].get<double>() / 1e3});
    }
  auto f = bench::FitStepLatency(all);
  if (!f.ok()) return f.status().WithContext("--fit");
  nlohmann::json fit = {{"delta_ms", f->delta * 1e3}, {"gamma_ms", f->gamma * 1e3}, {"alpha_kv_us", f->alpha_kv * 1e6},
                        {"r2", f->r2}, {"b_star_no_context", f->delta / f->gamma},
                        {"per_context", nlohmann::json::array()}};
  if (!json)
    std::printf("fit: t = %.3f ms + %.4f ms x N_b + %.4f us x N_c   (R^2 %.4f; B* = delta/gamma = %.1f)\n",
                f->delta * 1e3, f->gamma * 1e3, f->alpha_kv * 1e6, f->r2, f->delta / f->gamma);
  for (int64_t c : contexts) {
    std::vector<std::vector<double>> x;
    std::vector<double> y;
    for (const bench::StepPoint& p : all)
      if (p.n_c == p.n_b * static_cast<double>(c)) x.push_back({1.0, p.n_b}), y.push_back(p.seconds);
    nlohmann::json pc = {{"context", c}, {"b_star", f->SaturationBatch(static_cast<double>(c))}};
    auto line = bench::LeastSquares(x, y);
    if (line.ok()) pc["delta_c_ms"] = (*line)[0] * 1e3, pc["gamma_c_ms"] = (*line)[1] * 1e3,
                   pc["b_star_context_fit"] = (*line)[0] / (*line)[1];
    if (!json) {
      std::printf("  context %6lld: B* = %.1f (global fit)", static_cast<long long>(c), pc["b_star"].get<double>());
      if (line.ok())
        std::printf("; own fit t = %.3f ms + %.4f ms x N_b, B* = %.1f", (*line)[0] * 1e3, (*line)[1] * 1e3,
                    (*line)[0] / (*line)[1]);
      std::printf("\n");
    }
    fit["per_context"].push_back(pc);
  }
  return fit;
}

int RunBenchStepLatency(const std::vector<std::string>& args) {
  const std::string cmd = "bench step-latency";
  std::string model_dir, batch_text = "1,2,4,8,16,32,64", ctx_text = "128,512,2048";
  int64_t threads = 2, reps = 5, kv_gb = 8;
  bool json = false, fit = false;
  EngineFlags engine{kFlagKvDtype};
  FlagSet flags(
      "fathom bench step-latency",
      "fathom bench step-latency --model DIR [--batch 1,2,4,...,64] [--context 128,512,2048]\n"
      "                          [--kv-gb 8] [--reps 5] [--threads 2] [--kv-dtype bf16|int8|f32] "
      "[--fit] [--json]",
      "Latency of one core (loop) step over a batch of decode tokens at each context\n"
      "length: the median of --reps runs. Configurations whose KV cache (one loop\n"
      "step's layers, in --kv-dtype) exceeds --kv-gb are skipped and reported as such. --fit: "
      "least\n"
      "squares of t = delta + gamma N_b + alpha_kv N_c over the measured points (N_b the\n"
      "batch, N_c = N_b x context the KV tokens read) and the saturation batch per context,\n"
      "B*(c) = delta / (gamma + alpha_kv c) (B* = delta / gamma at c = 0), plus a separate\n"
      "fit t = delta_c + gamma_c N_b per context with B* = delta_c / gamma_c.");
  flags.String("--model", &model_dir, "Hugging Face model directory of a looped model");
  flags.String("--batch", &batch_text, "comma-separated batch sizes");
  flags.String("--context", &ctx_text, "comma-separated context lengths");
  flags.Int("--kv-gb", &kv_gb, "KV memory budget in GB (default 8)", 1, 1 << 20);
  flags.Int("--reps", &reps, "repetitions per configuration (default 5)", 1, 1000);
  DeclareThreads(flags, &threads);
  engine.Declare(flags);
  flags.Bool("--fit", &fit, "fit the latency model and report the saturation batch B*");
  flags.Bool("--json", &json, "print one JSON object");
  flags.Require("--model");
  if (Status s = flags.Parse(args); !s.ok()) return Fail(cmd, s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  auto batches = ParseIntList("--batch", batch_text);
  if (!batches.ok()) return Fail(cmd, batches.status().message(), 2);
  auto contexts = ParseIntList("--context", ctx_text);
  if (!contexts.ok()) return Fail(cmd, contexts.status().message(), 2);
  auto opt = engine.Options();
  if (!opt.ok()) return Fail(cmd, opt.status().message(), 2);
  ApplyThreads(threads);
  auto model = Model::Load(model_dir);
  if (!model.ok()) return Fail(cmd, model.status().message(), 1);
  auto rows = MeasureSteps(**model, *contexts, *batches, kv_gb, reps, opt->kv_dtype, json);
  if (!rows.ok()) return Fail(cmd, rows.status().message(), 1);
  nlohmann::json fit_json;
  if (fit) {
    auto f = FitSteps(*rows, *contexts, json);
    if (!f.ok()) return Fail(cmd, f.status().message(), 1);
    fit_json = std::move(*f);
  }
  if (json) {
    nlohmann::json j = {{"model", model_dir}, {"threads", threads},
                        {"kv_dtype", std::string(KvDtypeName(opt->kv_dtype))}, {"results", *rows}};
    if (fit) j["fit"] = fit_json;
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace

int RunBench(const std::vector<std::string>& args) {
  constexpr const char* kUsage =
      "usage: fathom bench decode|step-latency|offline|online|k-sweep|serve|kv-capacity|soak|budget [flags]   (fathom bench <name> --help)\n";
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "decode") return RunBenchDecode(rest);
  if (args[0] == "step-latency") return RunBenchStepLatency(rest);
  if (args[0] == "offline") return RunBenchOffline(rest);
  if (args[0] == "online") return RunBenchOnline(rest);
  if (args[0] == "k-sweep") return RunBenchKSweep(rest);
  if (args[0] == "serve") return RunBenchServe(rest);
  if (args[0] == "kv-capacity") return RunBenchKvCapacity(rest);
  if (args[0] == "soak") return RunBenchSoak(rest);
  if (args[0] == "budget") return RunBenchBudget(rest);
  return Fail("bench", "unknown benchmark '" + args[0] + "' (known: decode, step-latency, offline, online, k-sweep, serve, kv-capacity, soak, budget)", 2);
}

}  // namespace fathom::cli
