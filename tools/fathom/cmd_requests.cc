#include "cmd_requests.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "engine_flags.h"
#include "flags.h"

namespace fathom::cli {
namespace {

using nlohmann::json;

// The flags of `generate --requests`; the engine's own come from EngineFlags.
struct RequestsArgs {
  std::string model_dir, path;
  LoadFlags load;
  int64_t threads = 0;
  bool json = false, budget_control = false;
  double reclaim_at = -1, reclaim_s = 10;
  EngineFlags engine{kRequestsEngineFlags, "the largest loops of any request"};

  void Declare(FlagSet& f) {
    f.String("--model", &model_dir, "Hugging Face model directory");
    f.String("--requests", &path, "file of JSON requests, one per line");
    f.Double("--reclaim-at", &reclaim_at,
             "seconds into the run of a reclaim notice (checked after each step; default: none)", 0, 1e9);
    f.Double("--reclaim-s", &reclaim_s, "seconds the notice gives before the run stops (default 10)", 1e-6, 1e9);
    f.Bool("--budget-control", &budget_control,
           "recompute the compute budget b every step from deadlines (deadline_ms), the queue, KV and the reclaim notice");
    engine.Declare(f);
    load.Declare(f);
    DeclareThreads(f, &threads);
    f.Bool("--json", &json, "print one JSON object");
    for (const char* r : {"--model", "--requests"}) f.Require(r);
  }
};

Result<std::vector<RequestSpec>> ReadRequests(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status::Error("--requests: cannot read '" + path + "'");
  std::stringstream buf;
  buf << f.rdbuf();
  auto reqs = ParseRequests(buf.str());
  if (!reqs.ok()) return reqs.status().WithContext(path);
  return reqs;
}

// What a reclaim notice did to an offline run (`--reclaim-at`): a machine about to be taken
// away. At the notice the requests not yet started (nothing prefilled, no token) are not
// started (the server's 503), b falls for the rest where --budget-control is on, and
// --reclaim-s later the run stops: what has not finished then is cut (its tokens so far kept).
enum class ReclaimFate { kNone, kNotStarted, kCut };
struct ReclaimRun {
  bool noticed = false;
  double at_s = 0;                 // when the notice was given, seconds into the run
  double seconds = 0;              // the time it gave
  int64_t in_flight = 0;           // started and unfinished at the notice
  std::vector<ReclaimFate> fate;   // per engine request id
};

bool Started(const SchedRequestState& r) { return r.prefilled > 0 || !r.tokens.empty(); }

// Every request the engine still holds: waiting, ready, looping or exited.
std::vector<RequestId> Unfinished(const Engine& e) {
  std::vector<RequestId> out;
  const Scheduler& s = e.scheduler();
  for (const auto* q : {&s.waiting(), &s.ready(), &s.looping(), &s.exited()}) out.insert(out.end(), q->begin(), q->end());
  return out;
}

// RunToCompletion, with the notice of --reclaim-at (reclaim_at < 0: none).
Status RunWithReclaim(Engine& e, double reclaim_at, double reclaim_s, ReclaimRun* rr) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  auto set_fate = [&](RequestId id, ReclaimFate f) {
    if (static_cast<size_t>(id) >= rr->fate.size()) rr->fate.resize(static_cast<size_t>(id) + 1, ReclaimFate::kNone);
    rr->fate[static_cast<size_t>(id)] = f;
  };
  while (e.HasWork()) {
    FATHOM_RETURN_IF_ERROR(e.Step());
    if (reclaim_at < 0) continue;
    const double t = elapsed();
    if (!rr->noticed && t >= reclaim_at) {
      rr->noticed = true, rr->at_s = t, rr->seconds = reclaim_s;
      e.NoticeReclaim(reclaim_s);
      for (RequestId id : Unfinished(e))
        if (!Started(e.request(id))) e.Cancel(id), set_fate(id, ReclaimFate::kNotStarted);
      rr->in_flight = static_cast<int64_t>(Unfinished(e).size());
    }
    if (rr->noticed && t >= rr->at_s + reclaim_s)
      for (RequestId id : Unfinished(e)) e.Cancel(id), set_fate(id, ReclaimFate::kCut);
  }
  return Status::Ok();
}

json ReclaimSummary(const ReclaimRun& rr) {
  int64_t not_started = 0, cut = 0;
  for (ReclaimFate f : rr.fate) not_started += f == ReclaimFate::kNotStarted, cut += f == ReclaimFate::kCut;
  return {{"noticed", rr.noticed}, {"at_s", rr.at_s}, {"seconds", rr.seconds}, {"in_flight", rr.in_flight},
          {"finished_in_time", rr.in_flight - cut}, {"cut", cut}, {"not_started", not_started}};
}

// Each request's output (or why the engine refused it) and the run's summary.
json Report(const Engine& e, const std::vector<RequestSpec>& reqs, const std::vector<RequestId>& ids,
            const std::vector<std::string>& errors, const EngineOptions& opt, const ReclaimRun* rr) {
  const EngineStats& st = e.stats();
  const double tps = st.seconds > 0 ? static_cast<double>(st.output_tokens) / st.seconds : 0;
  const double mean_depth =
      st.decode_tokens ? static_cast<double>(st.depth_sum) / static_cast<double>(st.decode_tokens) : 0;
  json batch = json::object();
  for (Stage s : {Stage::kPrefill, Stage::kPrelude, Stage::kCore, Stage::kCoda}) {
    const StageStats& ss = st.stage[static_cast<int>(s)];
    batch[std::string(StageName(s))] = ss.runs ? static_cast<double>(ss.rows) / static_cast<double>(ss.runs) : 0.0;
  }
  json out_reqs = json::array();
  for (size_t i = 0; i < reqs.size(); ++i) {
    json j = {{"id", reqs[i].name}};
    if (ids[i] < 0) {
      j["output_ids"] = json::array();
      j["exit_depths"] = json::array();
      j["finish_reason"] = "rejected";
      j["error"] = errors[i];
    } else {
      const SchedRequestState& r = e.request(ids[i]);
      j["output_ids"] = r.tokens;
      j["exit_depths"] = r.depths;
      j["finish_reason"] = std::string(FinishReasonName(r.finish));
      const size_t k = static_cast<size_t>(ids[i]);
      if (rr && k < rr->fate.size() && rr->fate[k] != ReclaimFate::kNone)
        j["reclaim"] = rr->fate[k] == ReclaimFate::kCut ? "cut" : "not_started";
    }
    out_reqs.push_back(j);
  }
  json summary = {{"scheduler", std::string(SchedModeName(opt.mode))},
                  {"layout", std::string(KvLayoutName(opt.layout))},
                  {"output_tokens", st.output_tokens},
                  {"seconds", st.seconds},
                  {"output_tokens_per_s", tps},
                  {"mean_exit_depth", mean_depth},
                  {"mean_batch_size", batch},
                  {"steps", st.steps},
                  {"preemptions", st.preemptions},
                  {"scheduler_time_share", st.seconds > 0 ? st.schedule_seconds / st.seconds : 0}};
  if (rr) summary["reclaim"] = ReclaimSummary(*rr);
  return {{"requests", out_reqs}, {"summary", summary}};
}

void PrintText(const json& report, bool looped) {
  for (const json& j : report["requests"]) {
    std::printf("%s: output ids %s\n", j["id"].get<std::string>().c_str(), j["output_ids"].dump().c_str());
    if (looped) std::printf("  exit depths %s\n", j["exit_depths"].dump().c_str());
    std::printf("  finish reason: %s%s\n", j["finish_reason"].get<std::string>().c_str(),
                !j.contains("reclaim")                ? ""
                : j["reclaim"] == "cut"               ? " (cut: the reclaim notice's time ran out)"
                                                      : " (not started: the reclaim notice came first)");
  }
  const json& s = report["summary"];
  const json& batch = s["mean_batch_size"];
  std::printf("summary: %s, layout %s, %lld output tokens in %.3f s (%.1f tok/s), mean exit depth %.2f,\n",
              s["scheduler"].get<std::string>().c_str(), s["layout"].get<std::string>().c_str(),
              static_cast<long long>(s["output_tokens"].get<int64_t>()), s["seconds"].get<double>(),
              s["output_tokens_per_s"].get<double>(), s["mean_exit_depth"].get<double>());
  std::printf("  mean batch size: prefill %.1f tokens, prelude %.1f, core %.1f, coda %.1f;\n",
              batch["prefill"].get<double>(), batch["prelude"].get<double>(), batch["core"].get<double>(),
              batch["coda"].get<double>());
  std::printf("  %lld steps, %lld preemptions, scheduler time share %.2f%%\n",
              static_cast<long long>(s["steps"].get<int64_t>()), static_cast<long long>(s["preemptions"].get<int64_t>()),
              100 * s["scheduler_time_share"].get<double>());
  if (s.contains("reclaim")) {
    const json& r = s["reclaim"];
    if (!r["noticed"].get<bool>()) std::printf("  reclaim: the run ended before the notice\n");
    else
      std::printf("  reclaim notice at %.3f s with %g s left: %lld of %lld in flight finished in time, %lld cut, %lld not started\n",
                  r["at_s"].get<double>(), r["seconds"].get<double>(),
                  static_cast<long long>(r["finished_in_time"].get<int64_t>()),
                  static_cast<long long>(r["in_flight"].get<int64_t>()), static_cast<long long>(r["cut"].get<int64_t>()),
                  static_cast<long long>(r["not_started"].get<int64_t>()));
  }
}

}  // namespace

int RunGenerateRequests(const std::vector<std::string>& args) {
  RequestsArgs a;
  FlagSet flags(
      "fathom generate",
      "fathom generate --model DIR --requests FILE [--scheduler cb|cdb-norefill|cdb-refill]\n"
      "                [--layout NAME] [--k K] [--width W] [--kv-memory BYTES] [--lookahead]\n"
      "                [--budget-control] [--reclaim-at S [--reclaim-s T]] [--json]",
      "Runs every request of FILE (one JSON object per line, e.g. {\"id\": \"r1\", \"prompt_ids\":\n"
      "[1, 2, 3], \"max_tokens\": 16, \"temperature\": 0, \"loops\": 4} or \"exit_threshold\": 0.5)\n"
      "through the batched engine and prints each request's output and exit depths, then a\n"
      "summary: output tokens/s, mean exit depth, mean batch size per stage, preemptions and\n"
      "the scheduler's share of the time. --reclaim-at S: S seconds into the run (after the step\n"
      "that passes S) a reclaim notice with --reclaim-s left: requests not started yet are not\n"
      "started, b falls for the rest (with --budget-control; looped models need exit_threshold),\n"
      "and what has not finished --reclaim-s later is cut; each such request is marked\n"
      "(\"reclaim\": \"not_started\" or \"cut\") and the summary counts them.");
  a.Declare(flags);
  if (Status s = flags.Parse(args); !s.ok()) return Fail("generate", s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  auto opt = a.engine.Options();
  if (!opt.ok()) return Fail("generate", opt.status().message(), 2);
  opt->budget_control = a.budget_control;
  auto reqs = ReadRequests(a.path);
  if (!reqs.ok()) return Fail("generate", reqs.status().message(), 2);
  auto load = a.load.Options();
  if (!load.ok()) return Fail("generate", load.status().message(), 2);
  ApplyThreads(a.threads);
  auto model = Model::Load(a.model_dir, *load);
  if (!model.ok()) return Fail("generate", model.status().message(), 1);
  const ModelSpec& spec = (*model)->spec();
  if (!spec.loop.looped) opt->max_depth = 0;
  else if (opt->max_depth == 0)
    for (const RequestSpec& r : *reqs) opt->max_depth = std::max(opt->max_depth, r.loops > 0 ? r.loops : spec.loop.default_loops);
  auto engine = Engine::Create(**model, *opt);
  if (!engine.ok()) return Fail("generate", engine.status().message(), 1);
  std::vector<RequestId> ids;
  std::vector<std::string> errors(reqs->size());
  for (size_t i = 0; i < reqs->size(); ++i) {
    auto id = (*engine)->AddRequest((*reqs)[i]);
    ids.push_back(id.ok() ? *id : -1);
    if (id.ok()) continue;
    errors[i] = id.status().message();
    std::fprintf(stderr, "fathom generate: request '%s': %s\n", (*reqs)[i].name.c_str(), errors[i].c_str());
  }
  ReclaimRun rr;
  if (Status s = RunWithReclaim(**engine, a.reclaim_at, a.reclaim_s, &rr); !s.ok())
    return Fail("generate", s.message(), 1);
  const json report = Report(**engine, *reqs, ids, errors, *opt, a.reclaim_at >= 0 ? &rr : nullptr);
  if (a.json) std::printf("%s\n", report.dump().c_str());
  else PrintText(report, spec.loop.looped);
  for (const std::string& err : errors)
    if (!err.empty()) return 1;
  return 0;
}

}  // namespace fathom::cli
