#include "bench/driver.h"

#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

namespace fathom::bench {

namespace {

// Request i: `prompt`, exactly `output` tokens (no EOS stop), greedy, seeded exits or its
// slice of a recorded trace (`trace`, when not null).
RequestSpec ReplayRequest(size_t i, std::vector<int32_t> prompt, int64_t output, const ModelSpec& spec,
                          const ExitTraceOptions& exits, uint64_t request_seed, std::vector<int32_t>* trace) {
  RequestSpec r;
  r.name = "r";
  r.name.append(std::to_string(i));
  r.prompt = std::move(prompt);
  r.max_tokens = static_cast<int32_t>(output);
  r.stop_at_eos = false;
  r.seed = request_seed;
  if (spec.loop.looped && trace != nullptr) {
    r.exit.kind = ExitSpec::Kind::kTrace;
    r.exit.trace = std::move(*trace);
  } else if (spec.loop.looped && exits.mean_depth > 0) {
    r.exit.kind = ExitSpec::Kind::kRandom;
    r.exit.mean = exits.mean_depth;
    r.exit.min_depth = exits.min_depth;
    r.exit.seed = exits.seed * 7919ull + i;
  }
  return r;
}

// One depth list per request from the recorded trace; empty when there is none.
std::vector<std::vector<int32_t>> RecordedSlices(const ExitTraceOptions& exits, const std::vector<int64_t>& outputs) {
  if (exits.recorded.depths.empty()) return {};
  return SliceExitTrace(exits.recorded, outputs);
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

int64_t MinorFaults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_minflt);
}

}  // namespace

std::vector<RequestSpec> MakeRequests(const std::vector<RequestShape>& shapes, const ModelSpec& spec,
                                      const ExitTraceOptions& exits, uint64_t seed) {
  std::vector<int64_t> outputs;
  for (const RequestShape& r : shapes) outputs.push_back(r.output);
  auto traces = RecordedSlices(exits, outputs);
  std::vector<RequestSpec> out;
  out.reserve(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    const uint64_t s = seed * 1000003ull + i;
    out.push_back(ReplayRequest(i, SyntheticPrompt(shapes[i].prompt, spec.vocab, spec.eos_id, s), shapes[i].output,
                                spec, exits, s, traces.empty() ? nullptr : &traces[i]));
  }
  return out;
}

std::vector<RequestSpec> MakeRequests(const std::vector<DatasetRequest>& data, const ModelSpec& spec,
                                      const ExitTraceOptions& exits, uint64_t seed) {
  std::vector<int64_t> outputs;
  for (const DatasetRequest& r : data) outputs.push_back(r.output);
  auto traces = RecordedSlices(exits, outputs);
  std::vector<RequestSpec> out;
  out.reserve(data.size());
  for (size_t i = 0; i < data.size(); ++i)
    out.push_back(ReplayRequest(i, data[i].prompt, data[i].output, spec, exits, seed * 1000003ull + i,
                                traces.empty() ? nullptr : &traces[i]));
  return out;
}

Result<RunResult> RunWorkload(const Model& model, const EngineOptions& opt,
                              const std::vector<RequestSpec>& requests,
                              const std::vector<double>& arrivals, const std::string& label,
                              const ProgressOptions& progress) {
  using Clock = std::chrono::steady_clock;
  if (!arrivals.empty() && arrivals.size() != requests.size())
    return Status::Error("arrivals: " + std::to_string(arrivals.size()) + " times for " +
                         std::to_string(requests.size()) + " requests");
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, opt));
  RunResult res;
  res.label = label;
  res.requests.resize(requests.size());
  int64_t total_tokens = 0;
  for (const RequestSpec& r : requests) total_tokens += r.max_tokens;
  std::vector<size_t> index_of;  // engine RequestId -> request index
  const auto t0 = Clock::now();
  const double cpu0 = ProcessCpuSeconds();
  const int64_t faults0 = MinorFaults();
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  size_t next = 0;
  int64_t done_tokens = 0;
  double last_print = 0;
  while (next < requests.size() || engine->HasWork()) {
    const double t = now();
    while (next < requests.size() && (arrivals.empty() || arrivals[next] <= t)) {
      FATHOM_ASSIGN_OR_RETURN(RequestId id, engine->AddRequest(requests[next]));
      if (static_cast<size_t>(id) >= index_of.size()) index_of.resize(static_cast<size_t>(id) + 1);
      index_of[static_cast<size_t>(id)] = next;
      res.requests[next].arrival = arrivals.empty() ? 0 : arrivals[next];
      ++next;
    }
    if (!engine->HasWork()) {  // idle until the next arrival
      std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, arrivals[next] - t)));
      continue;
    }
    FATHOM_RETURN_IF_ERROR(engine->Step());
    const double te = now();
    for (const TokenEvent& e : engine->events()) {
      RequestTiming& rt = res.requests[index_of[static_cast<size_t>(e.req)]];
      if (e.token >= 0) {
        ++rt.output_tokens, ++done_tokens;
        if (rt.first_token < 0) rt.first_token = te;
      }
      if (e.finish != FinishReason::kNone) rt.finish = te;
    }
    if (progress.enabled && te - last_print >= progress.every_s) {
      last_print = te;
      const double frac = static_cast<double>(done_tokens) / static_cast<double>(std::max<int64_t>(total_tokens, 1));
      const double eta = frac > 0 ? te * (1 - frac) / frac : 0;
      std::fprintf(stderr, "%s %s: %lld/%lld tokens, %.0f s elapsed, ETA %.0f s\n", progress.prefix.c_str(),
                   label.c_str(), static_cast<long long>(done_tokens), static_cast<long long>(total_tokens), te, eta);
    }
  }
  res.wall_seconds = now();
  res.cpu_seconds = ProcessCpuSeconds() - cpu0;
  res.minor_faults = MinorFaults() - faults0;
  res.stats = engine->stats();
  const EngineStats& st = res.stats;
  res.mean_depth = st.decode_tokens ? static_cast<double>(st.depth_sum) / static_cast<double>(st.decode_tokens) : 0;
  res.prefill_share = st.seconds > 0 ? st.stage[static_cast<int>(Stage::kPrefill)].seconds / st.seconds : 0;
  return res;
}

std::vector<double> PoissonArrivals(int64_t n, double rate, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  std::vector<double> out;
  double t = 0;
  for (int64_t i = 0; i < n; ++i) out.push_back(t += gap(rng));
  return out;
}

std::vector<double> PoissonArrivalsWithin(double duration, double rate, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  std::vector<double> out;
  for (double t = gap(rng); t <= duration; t += gap(rng)) out.push_back(t);
  return out;
}

}  // namespace fathom::bench
