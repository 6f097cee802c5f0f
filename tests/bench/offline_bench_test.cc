// bench::OfflineReport on hand-made runs (every number recomputed here from the runs'
// inputs with DESIGN.md §5's formulas), and bench::RunOfflineRounds on a tiny model.
#include "bench/offline_bench.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "bench/workload.h"
#include "model/test_util.h"

namespace fathom::bench {
namespace {

using nlohmann::json;

// The median as the statistics books define it, written here rather than taken from
// bench/stats.h, so a wrong median there would not hide here.
double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

constexpr int64_t kRequests = 10, kPrompt = 200, kOutput = 110;  // 100 decode tokens
constexpr int32_t kRMax = 4;
constexpr double kDepth = 2;  // the CDB runs' measured mean exit depth

// CB's run of one round with `core_s` seconds of core: 200 prompt rows in 2 s, 100 decode
// tokens through the prelude (0.5 s), 400 core rows and the coda (1.5 s), 0.5 s of
// scheduling. What varies per round is the core time, so that each round's measured
// bound differs.
RunResult CbRun(double core_s, double wall, double cpu) {
  RunResult r;
  EngineStats& st = r.stats;
  const auto set = [&](Stage s, double seconds, int64_t runs, int64_t rows) {
    st.stage[static_cast<int>(s)] = {runs, rows, seconds};
  };
  set(Stage::kPrefill, 2, 1, kPrompt);
  set(Stage::kPrelude, 0.5, 50, kOutput - kRequests);
  set(Stage::kCore, core_s, 200, kRMax * (kOutput - kRequests));
  set(Stage::kCoda, 1.5, 50, kOutput - kRequests);
  st.schedule_seconds = 0.5;
  st.seconds = 2 + 0.5 + core_s + 1.5 + 0.5;
  st.steps = 301;
  st.output_tokens = kOutput;
  r.wall_seconds = wall;
  r.cpu_seconds = cpu;
  r.prefill_share = 2 / st.seconds;
  r.mean_depth = 3.7;  // not r_max: the report must state r_max for CB, not this
  r.minor_faults = 7;
  return r;
}

// A CDB run: the same tokens at mean depth 2, `wall` and `cpu` seconds.
RunResult CdbRun(double wall, double cpu, double core_s) {
  RunResult r = CbRun(core_s, wall, cpu);
  r.stats.stage[static_cast<int>(Stage::kCore)].rows = static_cast<int64_t>(kDepth) * (kOutput - kRequests);
  r.stats.stage[static_cast<int>(Stage::kCore)].runs = 120;
  r.mean_depth = kDepth;
  r.stats.preemptions = 0;
  return r;
}

struct Fixture {
  OfflineBenchOptions opt;
  OfflineReportInfo info;
  OfflineRuns runs;
  // Per round: CB's core seconds, CB's wall and CPU time, the CDB ratio over wall and
  // over CPU, and the no-exit control's ratio. The ratios are not in the rounds' order
  // of the CB times, so the median of the ratios differs from the ratio of the medians.
  std::vector<double> core_s = {16, 20, 12}, cb_wall = {21, 25, 17}, cb_cpu = {20, 22, 16.5};
  std::vector<double> ratio = {1.2, 1.5, 1.8}, ratio_cpu = {1.25, 1.4, 1.9}, control = {0.95, 1.02, 0.9};

  Fixture() {
    opt.engine.width = 6;
    opt.engine.min_coda = 3;
    opt.engine.layout = KvLayout::kHybrid;
    opt.modes = {SchedMode::kCb, SchedMode::kCdbRefill};
    info = {"/m", "ouro", "alpaca", "seeded random depths", kRequests, kPrompt, kOutput, kRMax, 2.2, {}};
    info.flops.prelude = 1, info.flops.coda = 3, info.flops.core_step = 2;  // F_0 = 4, F_r = 2
    for (size_t r = 0; r < 3; ++r) {
      // A scheduler's tok/s is output tokens / wall, so its ratio to CB is CB's wall over its own.
      runs.main.push_back({CbRun(core_s[r], cb_wall[r], cb_cpu[r]),
                           CdbRun(cb_wall[r] / ratio[r], cb_cpu[r] / ratio_cpu[r], core_s[r] / 2)});
      RunResult cb_c = CbRun(core_s[r], 2 * cb_wall[r], 2 * cb_cpu[r]);
      RunResult cdb_c = CbRun(core_s[r], 2 * cb_wall[r] / control[r], 2 * cb_cpu[r]);
      runs.control.push_back({cb_c, cdb_c});
    }
  }
  // DESIGN.md §5 with CB's measured costs of round r (no preemption, so the closed form).
  double MeasuredSe2e(size_t r) const {
    const double total = 2 + 0.5 + core_s[r] + 1.5 + 0.5, alpha = 2 / total;
    const double c0 = 0.5 / 100 + 1.5 / 100, cr = core_s[r] / 400;
    const double s_dec = (c0 + kRMax * cr) / (c0 + kDepth * cr);
    return 1 / (alpha + (1 - alpha) / s_dec);
  }
};

double Get(const json& j, const char* key) { return j.at(key).get<double>(); }

TEST(OfflineReport, RatiosBoundsAndMediansFollowFromTheRuns) {
  const Fixture f;
  auto rows = OfflineReport(f.runs, f.opt, f.info);
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 2u);
  const json& cb = (*rows)[0];
  const json& cdb = (*rows)[1];
  EXPECT_EQ(cb["scheduler"], "cb");
  EXPECT_EQ(cdb["scheduler"], "cdb-refill");
  for (const json& j : *rows) {
    EXPECT_EQ(j["width"], 6);
    EXPECT_EQ(j["k"], 3);
    EXPECT_EQ(j["layout"], "hybrid");
    EXPECT_EQ(j["repeats"], 3);
    EXPECT_EQ(j["requests"], kRequests);
    EXPECT_EQ(j["prompt_tokens"], kPrompt);
    EXPECT_EQ(j["output_tokens"], kOutput);
    EXPECT_EQ(j["model"], "/m");
    EXPECT_EQ(j["exits"], "seeded random depths");
    EXPECT_EQ(j["rounds"].size(), 3u);
  }
  EXPECT_DOUBLE_EQ(Get(cb, "mean_depth"), kRMax);  // CB runs every token to r_max
  EXPECT_DOUBLE_EQ(Get(cdb, "mean_depth"), kDepth);
  EXPECT_DOUBLE_EQ(Get(cb, "ratio_to_cb"), 1);
  // Ratios within each round, then their median (1.5), not the ratio of the medians.
  EXPECT_NEAR(Get(cdb, "ratio_to_cb"), MedianOf(f.ratio), 1e-12);
  EXPECT_NEAR(Get(cdb, "ratio_to_cb_min"), 1.2, 1e-12);
  EXPECT_NEAR(Get(cdb, "ratio_to_cb_max"), 1.8, 1e-12);
  EXPECT_NEAR(Get(cdb, "ratio_to_cb_cpu"), MedianOf(f.ratio_cpu), 1e-12);
  EXPECT_NEAR(Get(cdb, "ratio_to_cb_cpu_min"), 1.25, 1e-12);
  EXPECT_NEAR(Get(cdb, "ratio_to_cb_cpu_max"), 1.9, 1e-12);
  std::vector<double> cb_tok_s, cdb_tok_s, alphas;
  for (size_t r = 0; r < 3; ++r) {
    cb_tok_s.push_back(kOutput / f.cb_wall[r]);
    cdb_tok_s.push_back(kOutput / (f.cb_wall[r] / f.ratio[r]));
    alphas.push_back(2 / (4.5 + f.core_s[r]));
  }
  EXPECT_NEAR(Get(cb, "output_tok_s"), MedianOf(cb_tok_s), 1e-9);
  EXPECT_NEAR(Get(cdb, "output_tok_s"), MedianOf(cdb_tok_s), 1e-9);
  EXPECT_GT(std::abs(Get(cdb, "output_tok_s") / Get(cb, "output_tok_s") - Get(cdb, "ratio_to_cb")), 0.1);
  // The FLOP bounds: alpha the median of CB's prefill shares, d the CDB runs' depth (not
  // the 2.2 target), S_dec = (F_0 + r_max F_r) / (F_0 + d F_r) = 12 / 8.
  const double alpha = MedianOf(alphas), s_dec = 1.5, s_e2e = 1 / (alpha + (1 - alpha) / s_dec);
  const double f1 = static_cast<double>(kRequests) / kOutput, w = (1 / s_dec - f1) / (1 - f1);
  for (const json& j : *rows) {
    EXPECT_NEAR(Get(j, "alpha"), alpha, 1e-12);
    EXPECT_DOUBLE_EQ(Get(j, "f0"), 4);
    EXPECT_DOUBLE_EQ(Get(j, "fr"), 2);
    EXPECT_NEAR(Get(j, "s_dec"), s_dec, 1e-12);
    EXPECT_NEAR(Get(j, "s_e2e"), s_e2e, 1e-12);
    EXPECT_NEAR(Get(j, "s_e2e_refined"), 1 / (alpha + (1 - alpha) * w), 1e-12);
  }
  EXPECT_NEAR(Get(cdb, "fraction_of_s_e2e"), 1.5 / s_e2e, 1e-12);
  // The measured bound of each round from that round's CB run, and each round's fraction
  // from that round's ratio; the reported fraction is the median of those.
  std::vector<double> bounds, fractions, fractions_cpu;
  for (size_t r = 0; r < 3; ++r) {
    bounds.push_back(f.MeasuredSe2e(r));
    fractions.push_back(f.ratio[r] / f.MeasuredSe2e(r));
    fractions_cpu.push_back(f.ratio_cpu[r] / f.MeasuredSe2e(r));
    const json& pr = cdb["rounds"][r];
    EXPECT_NEAR(Get(pr, "ratio_to_cb"), f.ratio[r], 1e-12);
    EXPECT_NEAR(Get(pr, "ratio_to_cb_cpu"), f.ratio_cpu[r], 1e-12);
    EXPECT_NEAR(Get(pr, "s_e2e_measured"), bounds.back(), 1e-12);
    EXPECT_NEAR(Get(pr, "cr_measured_s"), f.core_s[r] / 400, 1e-15);
    EXPECT_NEAR(Get(pr, "fraction_of_s_e2e_measured"), fractions.back(), 1e-12);
    EXPECT_NEAR(Get(pr, "alpha"), alphas[r], 1e-12);
    EXPECT_NEAR(Get(pr, "control_ratio_to_cb"), f.control[r], 1e-12);
    EXPECT_DOUBLE_EQ(Get(pr, "seconds"), f.cb_wall[r] / f.ratio[r]);
    EXPECT_EQ(pr["minor_faults"], 7);
  }
  EXPECT_NEAR(Get(cdb, "s_e2e_measured"), MedianOf(bounds), 1e-12);
  EXPECT_NEAR(Get(cdb, "cr_measured_s"), MedianOf({0.04, 0.05, 0.03}), 1e-15);
  EXPECT_NEAR(Get(cdb, "c0_measured_s"), 0.02, 1e-15);
  EXPECT_NEAR(Get(cdb, "cb_recompute_share"), 0, 1e-12);
  EXPECT_NEAR(Get(cdb, "fraction_of_s_e2e_measured"), MedianOf(fractions), 1e-12);
  EXPECT_NEAR(Get(cdb, "fraction_of_s_e2e_measured_min"), *std::min_element(fractions.begin(), fractions.end()), 1e-12);
  EXPECT_NEAR(Get(cdb, "fraction_of_s_e2e_measured_max"), *std::max_element(fractions.begin(), fractions.end()), 1e-12);
  EXPECT_NEAR(Get(cdb, "fraction_of_s_e2e_measured_cpu"), MedianOf(fractions_cpu), 1e-12);
  // The no-exit control.
  EXPECT_NEAR(Get(cdb, "control_ratio_to_cb"), 0.95, 1e-12);
  EXPECT_NEAR(Get(cdb, "control_ratio_to_cb_min"), 0.9, 1e-12);
  EXPECT_NEAR(Get(cdb, "control_ratio_to_cb_max"), 1.02, 1e-12);
  EXPECT_NEAR(Get(cb, "control_output_tok_s"), MedianOf({kOutput / 42.0, kOutput / 50.0, kOutput / 34.0}), 1e-12);
  // The breakdown: seconds the mean over the rounds, runs and rows of round 0.
  const json& core = cb["breakdown"]["core"];
  EXPECT_NEAR(Get(core, "seconds"), (16 + 20 + 12) / 3.0, 1e-12);
  EXPECT_EQ(core["rows"], kRMax * (kOutput - kRequests));
  EXPECT_EQ(cdb["breakdown"]["core"]["rows"], kDepth * (kOutput - kRequests));
  EXPECT_NEAR(Get(cdb["breakdown"]["core"], "seconds"), (8 + 10 + 6) / 3.0, 1e-12);
  EXPECT_NEAR(Get(cb["breakdown"], "schedule_seconds"), 0.5, 1e-12);
  EXPECT_EQ(cb["breakdown"]["steps"], 301);
  EXPECT_TRUE(cb.contains("control_breakdown"));
}

TEST(OfflineReport, WithoutControlRunsAndOnBadInput) {
  Fixture f;
  f.runs.control.clear();
  auto rows = OfflineReport(f.runs, f.opt, f.info);
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  for (const json& j : *rows) {
    EXPECT_FALSE(j.contains("control_ratio_to_cb"));
    EXPECT_FALSE(j.contains("control_breakdown"));
    EXPECT_FALSE(j["rounds"][0].contains("control_ratio_to_cb"));
  }
  // Without a CDB run d is the target depth.
  Fixture cb_only;
  cb_only.opt.modes = {SchedMode::kCb};
  for (auto* rounds : {&cb_only.runs.main, &cb_only.runs.control})
    for (auto& round : *rounds) round.resize(1);
  rows = OfflineReport(cb_only.runs, cb_only.opt, cb_only.info);
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  EXPECT_NEAR(Get((*rows)[0], "s_dec"), (4 + 4 * 2) / (4 + 2.2 * 2), 1e-12);

  Fixture bad;
  bad.opt.modes = {SchedMode::kCdbRefill, SchedMode::kCb};  // CB must come first
  EXPECT_FALSE(OfflineReport(bad.runs, bad.opt, bad.info).ok());
  bad = Fixture();
  bad.runs.main[1].pop_back();  // a round without the CDB run
  EXPECT_FALSE(OfflineReport(bad.runs, bad.opt, bad.info).ok());
  bad = Fixture();
  bad.runs.control.pop_back();
  EXPECT_FALSE(OfflineReport(bad.runs, bad.opt, bad.info).ok());
  bad = Fixture();
  bad.runs.main.clear();
  bad.runs.control.clear();
  EXPECT_FALSE(OfflineReport(bad.runs, bad.opt, bad.info).ok());
  bad = Fixture();
  bad.runs.main[2][0].stats.stage[static_cast<int>(Stage::kCoda)].rows = 0;  // a CB run with no decode
  EXPECT_FALSE(OfflineReport(bad.runs, bad.opt, bad.info).ok());
}

TEST(RunOfflineRounds, EveryRoundRunsEverySchedulerOnItsRequests) {
  testing::TempDir dir;
  testing::MakeTinyModel("ouro", dir / "ouro", DType::kF32);
  auto model = Model::Load(dir / "ouro");
  ASSERT_TRUE(model.ok()) << model.status().message();
  const ModelSpec& spec = (*model)->spec();
  const auto shapes = GenerateWorkload(WorkloadKind::kAlpaca, 4, 0);
  std::vector<RequestSpec> reqs = MakeRequests(shapes, spec, {2, 1, 0, {}}, 0);
  std::vector<RequestSpec> control = MakeRequests(shapes, spec, ExitTraceOptions{}, 0);
  int64_t decode = 0;
  for (auto* rs : {&reqs, &control})
    for (RequestSpec& r : *rs) r.max_tokens = std::min(r.max_tokens, 6);
  for (const RequestSpec& r : reqs) decode += r.max_tokens - 1;  // prefill emits each first token
  OfflineBenchOptions opt;
  opt.engine.max_depth = spec.loop.default_loops;
  opt.modes = {SchedMode::kCb, SchedMode::kCdbNoRefill, SchedMode::kCdbRefill};
  opt.repeat = 2;
  opt.progress = false;
  auto runs = RunOfflineRounds(**model, opt, reqs, control);
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  ASSERT_EQ(runs->main.size(), 2u);
  ASSERT_EQ(runs->control.size(), 2u);
  const int64_t r_max = opt.engine.max_depth;
  for (size_t round = 0; round < 2; ++round)
    for (size_t i = 0; i < opt.modes.size(); ++i) {
      const std::string name(SchedModeName(opt.modes[i]));
      const RunResult& m = runs->main[round][i];
      const RunResult& c = runs->control[round][i];
      // Stored by scheduler, whatever order the round ran them in.
      EXPECT_EQ(m.label, name);
      EXPECT_EQ(c.label, name + " (no exits)");
      const int64_t core_rows = m.stats.stage[static_cast<int>(Stage::kCore)].rows;
      const int64_t control_rows = c.stats.stage[static_cast<int>(Stage::kCore)].rows;
      EXPECT_EQ(control_rows, r_max * decode) << name;  // no exits: every token to r_max
      if (opt.modes[i] == SchedMode::kCb) EXPECT_EQ(core_rows, r_max * decode);
      else EXPECT_LT(core_rows, r_max * decode) << name;  // its tokens exit early
      // The same seeded depths in every round.
      EXPECT_EQ(core_rows, runs->main[0][i].stats.stage[static_cast<int>(Stage::kCore)].rows);
    }
  opt.control = false;
  opt.repeat = 1;
  runs = RunOfflineRounds(**model, opt, reqs, control);
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->main.size(), 1u);
  EXPECT_TRUE(runs->control.empty());
  opt.modes = {SchedMode::kCdbRefill};
  EXPECT_FALSE(RunOfflineRounds(**model, opt, reqs, control).ok());
}

}  // namespace
}  // namespace fathom::bench
