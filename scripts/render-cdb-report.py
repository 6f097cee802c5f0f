#!/usr/bin/python3
"""Renders the CDB benchmark report: REPORT.md plus PNG plots, from the JSON that
`fathom bench offline|step-latency --fit|online --json` printed (see scripts/cdb-report.sh).

usage: /usr/bin/python3 scripts/render-cdb-report.py RESULTS_DIR
RESULTS_DIR holds offline-*.jsonl (one JSON object per scheduler per line),
step-latency.json and online.jsonl; REPORT.md and the PNGs are written there.
"""
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SCHEDULERS = ["cb", "cdb-norefill", "cdb-refill"]


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def offline_section(out_dir, lines):
    runs = {}
    for path in sorted(glob.glob(os.path.join(out_dir, "offline-*.jsonl"))):
        name = os.path.basename(path)[len("offline-"):-len(".jsonl")]
        runs[name] = {r["scheduler"]: r for r in read_jsonl(path)}
    if not runs:
        return
    names = list(runs)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(SCHEDULERS)
    for i, s in enumerate(SCHEDULERS):
        xs = [j + i * width for j in range(len(names))]
        ax1.bar(xs, [runs[n].get(s, {}).get("output_tok_s", 0) for n in names], width, label=s)
        ax2.bar(xs, [runs[n].get(s, {}).get("fraction_of_s_e2e_measured", 0) if s != "cb" else 0
                     for n in names], width, label=s)
    for ax, title in ((ax1, "output tokens/s"), (ax2, "fraction of S_e2e (measured costs)")):
        ax.set_xticks([j + width for j in range(len(names))])
        ax.set_xticklabels(names, rotation=15)
        ax.set_title(title)
        ax.legend()
    ax2.axhline(1.0, color="gray", linewidth=0.8)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "offline.png"), dpi=110)
    lines += ["## Offline throughput", "", "![offline](offline.png)", "",
              "| run | scheduler | output tok/s | ratio to CB | S_dec | S_e2e | fraction of S_e2e | "
              "S_dec measured | S_e2e measured | fraction of S_e2e measured | over CPU time: ratio, fraction measured | "
              "no-exit control vs CB | mean depth |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in names:
        for s in SCHEDULERS:
            r = runs[n].get(s)
            if r:
                lines.append(
                    f"| {n} | {s} | {r['output_tok_s']:.1f} | {ranged(r, 'ratio_to_cb')} | {r['s_dec']:.3f} | "
                    f"{r['s_e2e']:.3f} | {'–' if s == 'cb' else format(r['fraction_of_s_e2e'], '.1%')} | "
                    f"{r['s_dec_measured']:.3f} | {r['s_e2e_measured']:.3f} | "
                    f"{'–' if s == 'cb' else percent_ranged(r, 'fraction_of_s_e2e_measured')} | "
                    f"{cpu_cell(r, s)} | "
                    f"{ranged(r, 'control_ratio_to_cb')} | "
                    f"{r.get('mean_depth', 0):.2f} |")
    repeats = {r.get("repeats", 1) for n in names for r in runs[n].values()}
    if max(repeats) > 1:
        lines += ["", f"Ratios: the median over {max(repeats)} rounds (each round runs every scheduler once, "
                  "ratios taken within the round), with the min-max in brackets."]
    lines += ["", "S_dec / S_e2e count weight FLOPs (F_0, F_r from the model); the measured ones put CB's "
              "measured seconds per decode token outside the core (c_0) and per core row (c_r) in their place, "
              "from the same round (src/bench/speedup.h). The measured fraction is the headline (on a CPU a step "
              "costs memory traffic and KV reads more than FLOPs). The CPU-time columns take the same ratios over "
              "the process's CPU time, which other processes' time slices do not lengthen.", ""]
    for n in names:
        cb = runs[n].get("cb")
        if cb and "cr_measured_s" in cb:
            lines.append(f"- {n}: c_0 {cb['c0_measured_s'] * 1e3:.4f} ms, c_r {cb['cr_measured_s'] * 1e3:.4f} ms "
                         f"(c_0/c_r {cb['c0_measured_s'] / cb['cr_measured_s']:.3f}; "
                         f"F_0/F_r {cb['f0'] / cb['fr']:.3f}), alpha {cb['alpha']:.3f}")
    lines.append("")


def ranged(row, key):
    """A ratio with its min-max over the rounds, when the run had more than one."""
    if key not in row:
        return "-"
    text = f"{row[key]:.3f}"
    lo, hi = row.get(key + "_min"), row.get(key + "_max")
    if row.get("repeats", 1) > 1 and lo is not None and hi is not None:
        text += f" [{lo:.3f}-{hi:.3f}]"
    return text


def cpu_cell(row, scheduler):
    """The ratio to CB and the measured fraction over the process's CPU time."""
    if scheduler == "cb" or "ratio_to_cb_cpu" not in row:
        return "–"
    return f"{ranged(row, 'ratio_to_cb_cpu')}, {percent_ranged(row, 'fraction_of_s_e2e_measured_cpu')}"


def percent_ranged(row, key):
    """A fraction in percent with its min-max over the rounds, when the run had more than one."""
    text = f"{row[key]:.1%}"
    lo, hi = row.get(key + "_min"), row.get(key + "_max")
    if row.get("repeats", 1) > 1 and lo is not None and hi is not None:
        text += f" [{lo:.1%}-{hi:.1%}]"
    return text


def step_latency_section(out_dir, lines):
    path = os.path.join(out_dir, "step-latency.json")
    if not os.path.exists(path):
        return
    with open(path) as f:
        data = json.load(f)
    fit = data.get("fit", {})
    fig, ax = plt.subplots(figsize=(6, 4))
    for c in sorted({r["context"] for r in data["results"]}):
        pts = [r for r in data["results"] if r["context"] == c and not r["skipped"]]
        xs = [r["batch"] for r in pts]
        ax.plot(xs, [r["step_ms"] for r in pts], "o", label=f"context {c}")
        if fit:
            ax.plot(xs, [fit["delta_ms"] + fit["gamma_ms"] * b + fit["alpha_kv_us"] * 1e-3 * b * c for b in xs],
                    "-", linewidth=0.8)
    ax.set_xlabel("batch N_b")
    ax.set_ylabel("core step ms")
    ax.set_title("core-step latency and the least-squares fit")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "step-latency.png"), dpi=110)
    lines += ["## Core-step latency", "", "![step latency](step-latency.png)", ""]
    if fit:
        lines += [f"Fit: t = {fit['delta_ms']:.3f} ms + {fit['gamma_ms']:.4f} ms·N_b + "
                  f"{fit['alpha_kv_us']:.3f} µs·N_c (R² {fit['r2']:.4f}).", "",
                  "| context | B* |", "|---|---|"]
        lines += [f"| {p['context']} | {p['b_star']:.2f} |" for p in fit.get("per_context", [])]
        lines.append("")


def online_section(out_dir, lines):
    path = os.path.join(out_dir, "online.jsonl")
    if not os.path.exists(path):
        return
    rows = read_jsonl(path)
    fig, ax = plt.subplots(figsize=(6, 4))
    for s in SCHEDULERS:
        pts = sorted((r["rate"], r["normalized_latency_s"]) for r in rows if r["scheduler"] == s)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] * 1e3 for p in pts], "o-", label=s)
    ax.set_xlabel("request rate (req/s)")
    ax.set_ylabel("normalized latency (ms / output token)")
    ax.set_title("online serving")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "online.png"), dpi=110)
    lines += ["## Online serving", "", "![online](online.png)", "",
              "| scheduler | rate | requests | normalized latency ms/token | TTFT p50 / p99 s | TPOT p50 / p99 ms |",
              "|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (SCHEDULERS.index(r["scheduler"]), r["rate"])):
        lines.append(f"| {r['scheduler']} | {r['rate']:g} | {r.get('requests', '')} | "
                     f"{r['normalized_latency_s'] * 1e3:.2f} | "
                     f"{r['ttft_p50_s']:.3f} / {r['ttft_p99_s']:.3f} | {r['tpot_p50_s'] * 1e3:.2f} / "
                     f"{r['tpot_p99_s'] * 1e3:.2f} |")
    slo = rows[0].get("slo_s_per_token", 0) * 1e3
    lines += ["", f"Saturation rate (normalized latency above {slo:.2f} ms/token; crossing interpolated "
              "between the tested rates / highest tested rate within):", ""]
    for s in SCHEDULERS:
        r = next((r for r in rows if r["scheduler"] == s), None)
        if r is None:
            continue
        crossing = r.get("saturation_crossing", r["saturation_rate"])
        bound = "" if r.get("saturation_exceeded", True) else " (never exceeded: a lower bound)"
        lines.append(f"- {s}: {crossing:.2f} / {r['saturation_rate']:g} req/s{bound}")
    lines.append("")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    lines = ["# CDB benchmark report", ""]
    meta = os.path.join(out_dir, "meta.txt")
    if os.path.exists(meta):
        with open(meta) as f:
            lines += ["```", f.read().strip(), "```", ""]
    offline_section(out_dir, lines)
    step_latency_section(out_dir, lines)
    online_section(out_dir, lines)
    with open(os.path.join(out_dir, "REPORT.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {os.path.join(out_dir, 'REPORT.md')}")


if __name__ == "__main__":
    main()
