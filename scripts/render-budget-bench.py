#!/usr/bin/python3
"""Plots of `fathom bench budget --out FILE` for docs/BENCHMARKS_BUDGET.md.

usage: /usr/bin/python3 scripts/render-budget-bench.py REPORT.json OUT_PREFIX [L2A_EVAL.json]

Writes OUT_PREFIX-timeline.png: per policy, b (the controller's, per 1 s bin) and the mean
exit depth of the tokens that ended in each bin over time (for an L2A gate checkpoint: the
fraction of the layers' matmul flops its gates ran), the requests in flight (waiting and
running) under it, the burst shaded; and OUT_PREFIX-summary.png (misses, goodput). With
L2A_EVAL.json (`train/l2a.py --eval`'s curve: held-out perplexity at each b), a panel of
quality over time: each bin's decode tokens' mean b mapped to the held-out perplexity at
that b (interpolated between the curve's b's; a teacher-forced estimate, not the served
text's own). Matplotlib comes with Debian's python (/usr/bin/python3).
"""
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def series(run, key):
    t = run["timeline"]["t"]
    v = run["timeline"][key]
    pts = [(x, y) for x, y in zip(t, v) if y is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def ppl_at(curve, b):
    """Held-out perplexity at b, linear in log-perplexity between the curve's b's."""
    pts = sorted((g["b"], g["mean_nll"]) for g in curve["gated"])
    if b <= pts[0][0]:
        return math.exp(pts[0][1])
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if b <= x1:
            return math.exp(y0 + (y1 - y0) * (b - x0) / (x1 - x0))
    return math.exp(pts[-1][1])


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    rep = json.load(open(sys.argv[1]))
    prefix = sys.argv[2]
    curve = json.load(open(sys.argv[3])) if len(sys.argv) == 4 else None
    gated = any(r.get("gate_compute") for r in rep["runs"])
    load = rep["load"]
    b0, b1 = load["warm_s"], load["warm_s"] + load["burst_s"]
    colors = {"full": "tab:red", "low": "tab:green", "controller": "tab:blue"}
    n = 4 if curve else 3
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.8 * n + 0.1), sharex=True)
    ax_b, ax_d, ax_q = axes[0], axes[1], axes[-1]
    for run in rep["runs"]:
        p = run["policy"]
        c = colors.get(p, None)
        ax_b.plot(*series(run, "b"), color=c, label=p)
        ax_d.plot(*series(run, "gate_compute" if gated else "depth"), color=c, label=p)
        tl = run["timeline"]
        ax_q.plot(tl["t"], [w + r for w, r in zip(tl["waiting"], tl["running"])], color=c, label=p)
        if curve:
            t, tb = series(run, "token_b")
            axes[2].plot(t, [ppl_at(curve, x) for x in tb], color=c, label=p)
    for ax in axes:
        ax.axvspan(b0, b1, color="0.9", zorder=0)
        ax.grid(alpha=0.3)
    ax_b.set_ylabel("budget b (mean per 1 s)")
    ax_b.set_ylim(-0.05, 1.05)
    if curve:
        axes[2].axhline(curve["dense"]["perplexity"], color="0.4", ls=":", lw=1)
        axes[2].set_ylabel("held-out ppl at the\ntokens' b (eval curve)")
    ax_d.set_ylabel("layer matmul flops run\n(fraction of dense)" if gated else "mean exit depth")
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
