// `fathom bench kv-capacity`: how many sequences a KV memory budget holds for this model,
// the decode throughput up to that batch, and one prompt's prefill time (the LCKV
// benchmark; src/bench/kv_capacity.h says what is measured and how).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "bench/kv_capacity.h"
#include "bench_commands.h"
#include "commands.h"
#include "engine_flags.h"
#include "flags.h"

namespace fathom::cli {
namespace {

struct KvCapacityArgs {
  std::string model_dir, batch_text = "1,4,16,64";
  double kv_gib = 4;
  int64_t prompt = 512, output = 1024, reps = 3, prefill = 0, threads = 2;
  bool json = false;
  std::string kv_dtype{KvDtypeName(bench::KvCapacityOptions{}.kv_dtype)};

  void Declare(FlagSet& f) {
    f.String("--model", &model_dir, "Hugging Face model directory (a non-looped model)");
    f.Double("--kv-gib", &kv_gib, "KV memory budget in GiB (default 4)", 1.0 / 1024, 1 << 16);
    f.Int("--prompt", &prompt, "prompt tokens per sequence (default 512)", 1, 1 << 20);
    f.Int("--output", &output, "output tokens per sequence (default 1024)", 1, 1 << 20);
    f.String("--batch", &batch_text, "decode batches to time below the maximum (default 1,4,16,64)");
    f.Int("--reps", &reps, "decode steps timed per batch, median (default 3)", 1, 1000);
    f.Int("--prefill", &prefill, "also time one prompt of this many tokens (default 0: no)", 0, 1 << 20);
    DeclareThreads(f, &threads);
    DeclareKvDtype(f, &kv_dtype);
    f.Bool("--json", &json, "print one JSON object");
    f.Require("--model");
  }
};

nlohmann::json ToJson(const std::string& model_dir, const KvCapacityArgs& a, const bench::KvCapacityResult& r) {
  nlohmann::json j = {{"model", model_dir}, {"kv_gib", a.kv_gib}, {"prompt", a.prompt}, {"output", a.output},
                      {"layers", r.layers}, {"kv_layers", r.kv_layers}, {"bytes_per_token", r.bytes_per_token},
                      {"blocks", r.blocks}, {"blocks_per_sequence", r.blocks_per_sequence},
                      {"max_batch", r.max_batch}, {"prefill_tokens", a.prefill}, {"prefill_s", r.prefill_s},
                      {"prefill_cpu_s", r.prefill_cpu_s}, {"threads", a.threads}, {"kv_dtype", a.kv_dtype},
                      {"decode", nlohmann::json::array()}};
  for (const bench::DecodePoint& p : r.decode)
    j["decode"].push_back({{"batch", p.batch}, {"step_s", p.step_s}, {"tok_s", p.tok_s}, {"step_cpu_s", p.step_cpu_s},
                           {"tok_cpu_s", p.tok_cpu_s}, {"kv_gib", p.kv_gib}});
  return j;
}

void Print(const nlohmann::json& j) {
  std::printf("%s: %d layers, %d with KV, %lld bytes of KV per token\n", j["model"].get<std::string>().c_str(),
              j["layers"].get<int>(), j["kv_layers"].get<int>(), static_cast<long long>(j["bytes_per_token"].get<int64_t>()));
  std::printf("KV budget %.2f GiB = %lld blocks; a sequence of %lld + %lld tokens takes %lld: at most %d sequences\n",
              j["kv_gib"].get<double>(), static_cast<long long>(j["blocks"].get<int64_t>()),
              static_cast<long long>(j["prompt"].get<int64_t>()), static_cast<long long>(j["output"].get<int64_t>()),
              static_cast<long long>(j["blocks_per_sequence"].get<int64_t>()), j["max_batch"].get<int>());
  std::printf("%8s %12s %12s %14s %16s %10s\n", "batch", "step ms", "decode tok/s", "step CPU ms", "tok per CPU s",
              "KV GiB");
  for (const auto& p : j["decode"])
    std::printf("%8d %12.2f %12.2f %14.2f %16.2f %10.2f\n", p["batch"].get<int>(), p["step_s"].get<double>() * 1e3,
                p["tok_s"].get<double>(), p["step_cpu_s"].get<double>() * 1e3, p["tok_cpu_s"].get<double>(),
                p["kv_gib"].get<double>());
  if (j["prefill_tokens"].get<int64_t>() > 0)
    std::printf("prefill of one %lld-token prompt: %.2f s (%.2f s of CPU)\n",
                static_cast<long long>(j["prefill_tokens"].get<int64_t>()), j["prefill_s"].get<double>(),
                j["prefill_cpu_s"].get<double>());
}

}  // namespace

int RunBenchKvCapacity(const std::vector<std::string>& args) {
  const std::string cmd = "bench kv-capacity";
  KvCapacityArgs a;
  FlagSet flags("fathom bench kv-capacity",
                "fathom bench kv-capacity --model DIR [--kv-gib 4] [--prompt 512 --output 1024]\n"
                "                         [--batch 1,4,16,64] [--prefill 512] [--json]",
                "How many sequences of --prompt + --output tokens a KV budget of --kv-gib holds for\n"
                "this model (only layers that produce KV own blocks), the decode throughput at each\n"
                "--batch below that and at the maximum (context prompt + output/2), and with\n"
                "--prefill N the time of one N-token prompt in the engine's 256-token chunks.");
  a.Declare(flags);
  if (Status s = flags.Parse(args); !s.ok()) return Fail(cmd, s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  auto batches = ParseIntList("--batch", a.batch_text);
  if (!batches.ok()) return Fail(cmd, batches.status().message(), 2);
  bench::KvCapacityOptions o;
  for (int64_t b : *batches) {
    if (b < 1 || b > 65536) return Fail(cmd, "--batch: " + std::to_string(b) + " is outside [1, 65536]", 2);
    o.batches.push_back(static_cast<int32_t>(b));
  }
  o.kv_bytes = static_cast<size_t>(a.kv_gib * static_cast<double>(1u << 30));
  o.prompt = a.prompt;
  o.output = a.output;
  o.reps = static_cast<int>(a.reps);
  o.prefill_tokens = a.prefill;
  auto kv_dtype = ParseKvDtypeFlag(a.kv_dtype);
  if (!kv_dtype.ok()) return Fail(cmd, kv_dtype.status().message(), 2);
  o.kv_dtype = *kv_dtype;
  ApplyThreads(a.threads);
  auto model = Model::Load(a.model_dir);
  if (!model.ok()) return Fail(cmd, model.status().message(), 1);
  auto r = bench::MeasureKvCapacity(**model, o);
  if (!r.ok()) return Fail(cmd, r.status().message(), 1);
  const nlohmann::json j = ToJson(a.model_dir, a, *r);
  if (a.json)
    std::printf("%s\n", j.dump().c_str());
  else
    Print(j);
  return 0;
}

}  // namespace fathom::cli
