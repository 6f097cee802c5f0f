#!/usr/bin/python3
"""Perplexity against mean core steps per token from `fathom eval --json` / train/eval.py --json files.

    /usr/bin/python3 train/plot_exits.py --out PNG --title T FILE.json...

Each file is one point; files with an exit_threshold are grouped by layout, the others
(fixed depth) form their own line."""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    series = {}
    for path in a.files:
        with open(path) as f:
            d = json.load(f)
        q = d.get("exit_threshold")
        key = f"exit q ({d.get('layout')})" if q is not None else "fixed depth"
        series.setdefault(key, []).append((d["mean_depth"], d["perplexity"], q))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=key)
        for x, y, q in pts:
            if q is not None:
                ax.annotate(f"{q}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel("mean core steps per token")
    ax.set_ylabel("held-out perplexity")
    ax.set_title(a.title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
