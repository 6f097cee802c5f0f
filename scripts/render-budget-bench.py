#!/usr/bin/python3
"""Plots of `fathom bench budget --out FILE` for docs/BENCHMARKS_BUDGET.md.

usage: /usr/bin/python3 scripts/render-budget-bench.py REPORT.json OUT_PREFIX

Writes OUT_PREFIX-timeline.png: per policy, b (the controller's, per 1 s bin) and the mean
exit depth of the tokens that ended in each bin over time, the requests in flight (waiting
and running) under it, the
burst shaded. Matplotlib comes with Debian's python (/usr/bin/python3).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def series(run, key):
    t = run["timeline"]["t"]
    v = run["timeline"][key]
    pts = [(x, y) for x, y in zip(t, v) if y is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rep = json.load(open(sys.argv[1]))
    prefix = sys.argv[2]
    load = rep["load"]
    b0, b1 = load["warm_s"], load["warm_s"] + load["burst_s"]
    colors = {"full": "tab:red", "low": "tab:green", "controller": "tab:blue"}
    fig, axes = plt.subplots(3, 1, figsize=(9, 8.5), sharex=True)
    ax_b, ax_d, ax_q = axes
    for run in rep["runs"]:
        p = run["policy"]
        c = colors.get(p, None)
        ax_b.plot(*series(run, "b"), color=c, label=p)
        ax_d.plot(*series(run, "depth"), color=c, label=p)
        tl = run["timeline"]
        ax_q.plot(tl["t"], [w + r for w, r in zip(tl["waiting"], tl["running"])], color=c, label=p)
    for ax in axes:
        ax.axvspan(b0, b1, color="0.9", zorder=0)
        ax.grid(alpha=0.3)
    ax_b.set_ylabel("budget b (mean per 1 s)")
    ax_b.set_ylim(-0.05, 1.05)
    ax_d.set_ylabel("mean exit depth")
    ax_q.set_ylabel("requests in flight")
    ax_q.set_xlabel("seconds (burst shaded)")
    ax_b.legend(loc="lower left")
    ax_b.set_title("%s: base %.2f req/s, burst %.2f req/s, deadline %gx output x TPOT %.0f ms"
                   % (rep.get("model", "?"), load["base_rate"], load["burst_rate"], load["deadline_factor"],
                      1e3 * load["tpot_s"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(prefix + "-timeline.png", dpi=110)

    fig, ax = plt.subplots(1, 2, figsize=(9, 3.4))
    names = [r["policy"] for r in rep["runs"]]
    ax[0].bar(names, [100 * r["miss_rate"] for r in rep["runs"]], color=[colors[n] for n in names])
    ax[0].set_ylabel("deadline misses (%)")
    ax[1].bar(names, [r["goodput_per_s"] for r in rep["runs"]], color=[colors[n] for n in names])
    ax[1].set_ylabel("goodput (requests in deadline / s)")
    fig.tight_layout()
    fig.savefig(prefix + "-summary.png", dpi=110)


if __name__ == "__main__":
    main()
