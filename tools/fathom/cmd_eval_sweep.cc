// fathom eval sweep: perplexity against compute for a list of settings (fixed loop counts and
// exit thresholds, under one or more KV layouts), written as a markdown table, CSV and JSON,
// and plotted by scripts/render-eval-sweep.py (matplotlib, Debian's /usr/bin/python3).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cmd_eval.h"
#include "commands.h"

namespace fathom::cli {
namespace {

struct SweepRow {
  PerplexityOptions opt;
  std::string policy;  // "loops 3", "exit 0.5", "full depth"
  PerplexityResult res;
};

Result<std::vector<double>> ParseDoubleList(const std::string& flag, const std::string& text) {
  std::vector<double> out;
  for (const std::string& item : SplitComma(text)) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (end != item.c_str() + item.size() || !(v >= 0))
      return Status::Error(flag + ": '" + item + "' is not a non-negative number");
    out.push_back(v);
  }
  if (out.empty()) return Status::Error(flag + ": empty list");
  return out;
}

std::string Num(double v, int digits = 6) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

// The settings, per layout: each loop count, then each threshold at the model's loop count;
// neither list: one row at full depth.
Result<std::vector<SweepRow>> Settings(const PerplexityOptions& base, const std::vector<std::string>& layouts,
                                       const std::vector<int64_t>& loops, const std::vector<double>& thresholds,
                                       ExitSpec::Kind kind) {
  if (layouts.empty()) return Status::Error("--layouts: empty list");
  std::vector<SweepRow> rows;
  for (const std::string& name : layouts) {
    SweepRow row;
    row.opt = base;
    auto layout = ParseKvLayout(name);
    if (!layout.ok()) return Status::Error("--layouts: " + layout.status().message());
    row.opt.layout = *layout;
    if (loops.empty() && thresholds.empty()) rows.push_back(row), rows.back().policy = "full depth";
    for (int64_t r : loops) {
      rows.push_back(row);
      rows.back().opt.loops = static_cast<int32_t>(r);
      rows.back().policy = "loops " + std::to_string(r);
    }
    for (double q : thresholds) {
      rows.push_back(row);
      rows.back().opt.exit.kind = kind;
      rows.back().opt.exit.threshold = q;
      rows.back().policy = "exit " + Num(q);
    }
  }
  return rows;
}

constexpr const char* kColumns =
    "layout,policy,loops,exit_threshold,perplexity,mean_nll,mean_depth,layers_per_token,"
    "kv_bytes_per_decode_token,predictions,tokens_per_s,cpu_seconds";

std::string CsvLine(const SweepRow& r) {
  const PerplexityResult& x = r.res;
  const bool exit = r.opt.exit.kind != ExitSpec::Kind::kNone;
  return std::string(KvLayoutName(r.opt.layout)) + "," + r.policy + "," + std::to_string(x.loops) + "," +
         (exit ? Num(r.opt.exit.threshold) : "") + "," + Num(x.perplexity, 8) + "," + Num(x.mean_nll, 8) + "," +
         Num(x.mean_depth) + "," + Num(x.layers_per_token) + "," + std::to_string(x.kv_bytes_per_decode_token) +
         "," + std::to_string(x.predictions) + "," + Num(x.tokens_per_s) + "," + Num(x.cpu_seconds);
}

std::string Markdown(const std::vector<SweepRow>& rows) {
  std::string md =
      "| layout | policy | loops | perplexity | mean depth | layers/token | KV bytes/token | tokens/s |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|\n";
  for (const SweepRow& r : rows)
    md += "| " + std::string(KvLayoutName(r.opt.layout)) + " | " + r.policy + " | " + std::to_string(r.res.loops) +
          " | " + Num(r.res.perplexity) + " | " + Num(r.res.mean_depth, 4) + " | " +
          Num(r.res.layers_per_token, 4) + " | " + std::to_string(r.res.kv_bytes_per_decode_token) + " | " +
          Num(r.res.tokens_per_s, 4) + " |\n";
  return md;
}

Status WriteText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path);
  if (!(f << text)) return Status::Error("--out: cannot write " + path.string());
  return Status::Ok();
}

Status WriteTables(const std::string& dir, const std::vector<SweepRow>& rows, const std::string& model_dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Error("--out: cannot create " + dir + ": " + ec.message());
  std::string csv = std::string(kColumns) + "\n";
  nlohmann::json j = {{"model", model_dir}, {"rows", nlohmann::json::array()}};
  for (const SweepRow& r : rows) {
    csv += CsvLine(r) + "\n";
    nlohmann::json row = EvalResultJson(r.opt, r.res);
    row["policy"] = r.policy;
    j["rows"].push_back(row);
  }
  const std::filesystem::path out(dir);
  FATHOM_RETURN_IF_ERROR(WriteText(out / "sweep.csv", csv));
  FATHOM_RETURN_IF_ERROR(WriteText(out / "sweep.md", Markdown(rows)));
  return WriteText(out / "sweep.json", j.dump(1) + "\n");
}

// scripts/render-eval-sweep.py beside the build directory holding this binary.
std::string DefaultPlotScript() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "scripts/render-eval-sweep.py";
  return (exe.parent_path().parent_path() / "scripts" / "render-eval-sweep.py").string();
}

// The plot is a convenience: a failure is reported with the command to rerun, not an error.
void Plot(const std::string& script, const std::string& dir) {
  const std::string cmd = "/usr/bin/python3 '" + script + "' '" + dir + "'";
  if (!std::filesystem::exists(script) || std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "fathom eval sweep: no plot written; run: %s\n", cmd.c_str());
    return;
  }
  std::printf("plot: %s/sweep.png\n", dir.c_str());
}

// One untimed evaluation of the first setting on at most two windows, so that the first row's
// tokens/s does not include oneDNN's first-call kernel generation.
void WarmUp(const Model& model, const std::vector<int32_t>& ids, const PerplexityOptions& opt) {
  const int64_t context = opt.context > 0 ? opt.context : DefaultContext(model);
  const auto n = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(ids.size()), 2 * context));
  (void)EvaluatePerplexity(model, std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n)), opt);
}

constexpr const char* kSweepHelp =
    "Runs `fathom eval` for each setting on one text (the model loaded and the text encoded\n"
    "once): every --loops R, then every --exit-threshold Q at the model's loop count, under each\n"
    "of --layouts. Writes OUT/sweep.md, OUT/sweep.csv, OUT/sweep.json and the plot\n"
    "OUT/sweep.png of perplexity against mean core steps per token.";

}  // namespace

int RunEvalSweep(const std::vector<std::string>& args) {
  EvalCommon common;
  std::string out, thresholds_text, loops_text, layouts_text, criterion = "auto", script = DefaultPlotScript();
  bool no_plot = false;
  FlagSet flags("fathom eval sweep",
                "fathom eval sweep --model DIR (--text-file F | --ids-file F) --out DIR\n"
                "                  [--exit-thresholds 0.1,0.3,...] [--loops 1,2,3,4] [--layouts A,B]",
                kSweepHelp);
  common.Declare(flags);
  flags.String("--out", &out, "directory for sweep.{md,csv,json,png}");
  flags.String("--exit-thresholds", &thresholds_text, "comma-separated exit thresholds");
  flags.String("--loops", &loops_text, "comma-separated loop counts (every token at that depth)");
  flags.String("--layouts", &layouts_text, "comma-separated KV layouts (default: --layout's)");
  flags.String("--exit-criterion", &criterion, "auto (default), hazard, latent-diff or kl");
  flags.String("--plot-script", &script, "the plotting script (default " + script + ")");
  flags.Bool("--no-plot", &no_plot, "write the tables only");
  flags.Require("--out");
  if (Status s = flags.Parse(args); !s.ok()) return Fail("eval sweep", s.message(), 2);
  if (flags.help_requested()) return std::fputs(flags.Help().c_str(), stdout), 0;
  if (Status s = common.CheckInput(flags); !s.ok()) return Fail("eval sweep", s.message(), 2);
  if (flags.Seen("--layouts") && flags.Seen("--layout")) return Fail("eval sweep", "--layout and --layouts are exclusive", 2);
  auto base = common.Options();
  if (!base.ok()) return Fail("eval sweep", base.status().message(), 2);
  const std::vector<std::string> layouts =
      flags.Seen("--layouts") ? SplitComma(layouts_text) : std::vector<std::string>{std::string(KvLayoutName(base->layout))};
  std::vector<int64_t> loops;
  std::vector<double> thresholds;
  if (flags.Seen("--loops")) {
    auto l = ParseIntList("--loops", loops_text);
    if (!l.ok()) return Fail("eval sweep", l.status().message(), 2);
    loops = *l;
  }
  if (flags.Seen("--exit-thresholds")) {
    auto t = ParseDoubleList("--exit-thresholds", thresholds_text);
    if (!t.ok()) return Fail("eval sweep", t.status().message(), 2);
    thresholds = *t;
  }
  ExitSpec::Kind kind = criterion == "hazard"       ? ExitSpec::Kind::kHazard
                        : criterion == "latent-diff" ? ExitSpec::Kind::kLatentDiff
                        : criterion == "kl"          ? ExitSpec::Kind::kKl
                                                     : ExitSpec::Kind::kThreshold;
  if (criterion != "auto" && kind == ExitSpec::Kind::kThreshold)
    return Fail("eval sweep", "--exit-criterion: expected auto, hazard, latent-diff or kl, found '" + criterion + "'", 2);
  auto rows = Settings(*base, layouts, loops, thresholds, kind);
  if (!rows.ok()) return Fail("eval sweep", rows.status().message(), 2);
  ApplyThreads(common.threads);

  auto ids = common.Ids();
  if (!ids.ok()) return Fail("eval sweep", ids.status().message(), 1);
  auto model = common.LoadModel();
  if (!model.ok()) return Fail("eval sweep", model.status().message(), 1);
  WarmUp(**model, *ids, rows->front().opt);
  for (SweepRow& row : *rows) {
    auto res = EvaluatePerplexity(**model, *ids, row.opt);
    if (!res.ok()) return Fail("eval sweep", row.policy + ": " + res.status().message(), 1);
    row.res = *res;
    std::fprintf(stderr, "%s %s: perplexity %.6g, mean depth %.3f\n", std::string(KvLayoutName(row.opt.layout)).c_str(),
                 row.policy.c_str(), res->perplexity, res->mean_depth);
  }
  if (Status s = WriteTables(out, *rows, common.model_dir); !s.ok()) return Fail("eval sweep", s.message(), 1);
  std::fputs(Markdown(*rows).c_str(), stdout);
  if (!no_plot) Plot(script, out);
  return 0;
}

}  // namespace fathom::cli
