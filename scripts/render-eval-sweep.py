#!/usr/bin/python3
"""Plots `fathom eval sweep`: perplexity against mean core steps per token.

usage: /usr/bin/python3 scripts/render-eval-sweep.py SWEEP_DIR
SWEEP_DIR holds sweep.json (written by `fathom eval sweep --out SWEEP_DIR`); the plot is
written there as sweep.png. One line per KV layout and policy kind: fixed loop counts
(squares, each labelled R) and exit thresholds (dots, each labelled q). A dense model (no
loop) is one point at depth 0.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def series(rows):
    """{(layout, kind): [(mean_depth, perplexity, label)]}, kind "loops" or "exit"."""
    out = {}
    for r in rows:
        kind = "exit" if r.get("exit_threshold") is not None else "loops"
        label = f"q={r['exit_threshold']:g}" if kind == "exit" else f"R={r['loops']}"
        out.setdefault((r["layout"], kind), []).append((r["mean_depth"], r["perplexity"], label))
    return out


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    sweep_dir = argv[1]
    path = os.path.join(sweep_dir, "sweep.json")
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"render-eval-sweep: cannot read {path}: {e}")
    rows = data.get("rows") or []
    if not rows:
        sys.exit(f"render-eval-sweep: {path} has no rows")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = {}  # one colour per layout; the line style tells fixed depth from thresholds
    for (layout, kind), pts in sorted(series(rows).items()):
        pts.sort()
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        colour = colours.setdefault(layout, f"C{len(colours)}")
        ax.plot(xs, ys, marker="s" if kind == "loops" else "o", linestyle="--" if kind == "loops" else "-",
                color=colour, label=f"{layout}, {'fixed depth' if kind == 'loops' else 'exit threshold'}")
        for x, y, label in pts:
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel("mean core steps per token")
    ax.set_ylabel("perplexity")
    ax.set_title(f"fathom eval sweep: {os.path.basename(os.path.normpath(data.get('model', '')))}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = os.path.join(sweep_dir, "sweep.png")
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
