#include <omp.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/bandwidth.h"
#include "exec/generate.h"
#include "flags.h"

namespace fathom::cli {
namespace {

int RunBenchDecode(const std::vector<std::string>& args) {
  std::string model_dir;
  int64_t prompt = 128, gen = 128, threads = 2, loops = 0;
  bool json = false;
  FlagSet flags("fathom bench decode",
                "fathom bench decode --model DIR [--prompt 128 --gen 128 --threads 2] [--loops R] [--json]",
                "Measures prompt tokens/s and decode tokens/s of one sequence (batch 1, greedy,\n"
                "every token at full depth), and the decode step's weight bytes per second as a\n"
                "fraction of the memory bandwidth measured in the same run.");
  flags.String("--model", &model_dir, "Hugging Face model directory");
  flags.Int("--prompt", &prompt, "prompt tokens (default 128)", 1, 1 << 20);
  flags.Int("--gen", &gen, "generated tokens (default 128)", 2, 1 << 20);
  flags.Int("--threads", &threads, "worker threads (default 2)", 1, 1024);
  flags.Int("--loops", &loops, "loop steps of a looped model (default: the model's)", 1, 4096);
  flags.Bool("--json", &json, "print one JSON object");
  flags.Require("--model");
  if (Status s = flags.Parse(args); !s.ok()) return Fail("bench decode", s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  omp_set_num_threads(static_cast<int>(threads));
  auto model = Model::Load(model_dir);
  if (!model.ok()) return Fail("bench decode", model.status().message(), 1);
  const Model& m = **model;
  auto r = ResolveLoops(m.spec(), static_cast<int32_t>(loops));
  if (!r.ok()) return Fail("bench decode", "--" + r.status().message(), 2);

  GenerateOptions opt;
  opt.loops = static_cast<int32_t>(loops);
  opt.stop_at_eos = false;
  for (int64_t i = 0; i < prompt; ++i) opt.prompt.push_back(static_cast<int32_t>((i * 7919 + 13) % m.spec().vocab));
  // Warm up: first-use primitive caches, page faults of the embedding, thread start-up.
  GenerateOptions warm = opt;
  warm.prompt.resize(std::min<size_t>(warm.prompt.size(), 16));
  warm.max_tokens = 4;
  if (auto w = Generate(m, warm); !w.ok()) return Fail("bench decode", w.status().message(), 1);

  const Bandwidth bw_before = MeasureBandwidth();
  opt.max_tokens = static_cast<int32_t>(gen);
  auto res = Generate(m, opt);
  if (!res.ok()) return Fail("bench decode", res.status().message(), 1);
  const Bandwidth bw_after = MeasureBandwidth();
  const double bw = std::max(bw_before.best(), bw_after.best());

  const double prompt_tps = static_cast<double>(prompt) / res->prefill_seconds;
  const double decode_tps = static_cast<double>(res->decode_steps) / res->decode_seconds;
  const double bytes_per_token = static_cast<double>(
      m.prelude_weight_bytes() + static_cast<size_t>(*r) * m.core_step_weight_bytes() +
      m.coda_weight_bytes());
  const double weight_gbs = bytes_per_token * decode_tps / 1e9;
  if (json) {
    nlohmann::json j = {{"model", model_dir},
                        {"model_type", m.spec().model_type},
                        {"loops", *r},
                        {"threads", threads},
                        {"prompt_tokens", prompt},
                        {"generated_tokens", gen},
                        {"prompt_tokens_per_s", prompt_tps},
                        {"decode_tokens_per_s", decode_tps},
                        {"weight_bytes_per_token", bytes_per_token},
                        {"weight_gbs", weight_gbs},
                        {"bandwidth_read_gbs", std::max(bw_before.read_gbs, bw_after.read_gbs)},
                        {"bandwidth_copy_gbs", std::max(bw_before.copy_gbs, bw_after.copy_gbs)},
                        {"bandwidth_triad_gbs", std::max(bw_before.triad_gbs, bw_after.triad_gbs)},
                        {"fraction_of_bandwidth", weight_gbs / bw}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model %s (%s), loops %d, %lld threads\n", model_dir.c_str(),
              m.spec().model_type.c_str(), *r, static_cast<long long>(threads));
  std::printf("prompt: %lld tokens at %.1f tok/s\n", static_cast<long long>(prompt), prompt_tps);
  std::printf("decode: %lld tokens at %.2f tok/s\n", static_cast<long long>(res->decode_steps),
              decode_tps);
  std::printf("weights per decode token: %.1f MB -> %.1f GB/s\n", bytes_per_token / 1e6, weight_gbs);
  std::printf("memory bandwidth (best of read/copy/triad, before and after): %.1f GB/s -> %.1f%%\n",
              bw, 100.0 * weight_gbs / bw);
  return 0;
}

}  // namespace

int RunBench(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs("usage: fathom bench decode [flags]   (fathom bench decode --help)\n",
               args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "decode") return RunBenchDecode(rest);
  return Fail("bench", "unknown benchmark '" + args[0] + "' (known: decode)", 2);
}

}  // namespace fathom::cli
