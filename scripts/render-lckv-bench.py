#!/usr/bin/python3
"""Renders scripts/lckv-bench.sh's JSON files: OUT/lckv.md (the max-batch and throughput
table against the targets of issue 13) and OUT/lckv_decode.png (decode tokens per second
against batch, the LCKV paper's Figure 4 analog). Throughput and prefill are per second of
the process's CPU time (one thread: the work, which a shared host's other processes do not
lengthen); wall-clock figures are in the curve table beside them.
    /usr/bin/python3 scripts/render-lckv-bench.py OUT"""
import glob
import json
import os
import sys

out = sys.argv[1]
runs = {}
for path in sorted(glob.glob(os.path.join(out, "*_*_*.json"))):
    name, prompt, output = os.path.basename(path)[:-5].split("_")
    runs[(name, int(prompt), int(output))] = json.load(open(path))

lines = ["| length | model | KV layers | KV bytes/token | max batch | vs dense (target layers/KV layers) "
         "| decode tok per CPU s at max | vs dense at its max | prefill 512, CPU s | vs dense |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for prompt, output in sorted({(p, o) for _, p, o in runs}):
    dense = runs.get(("dense", prompt, output))
    for name in ("dense", "w10", "w2"):
        r = runs.get((name, prompt, output))
        if r is None:
            continue
        top = r["decode"][-1]
        cells = [f"{prompt}+{output}", name, str(r["kv_layers"]), str(r["bytes_per_token"]), str(r["max_batch"])]
        if dense and name != "dense":
            target = r["layers"] / r["kv_layers"] * dense["max_batch"]
            cells.append(f"{r['max_batch'] / dense['max_batch']:.2f}x ({target:.1f}: {100 * (r['max_batch'] / target - 1):+.1f}%)")
            cells.append(f"{top['tok_cpu_s']:.2f}")
            cells.append(f"{top['tok_cpu_s'] / dense['decode'][-1]['tok_cpu_s']:.2f}x")
        else:
            cells += ["-", f"{top['tok_cpu_s']:.2f}", "-"]
        if r["prefill_s"] > 0:
            cells.append(f"{r['prefill_cpu_s']:.1f}")
            cells.append(f"{r['prefill_cpu_s'] / dense['prefill_cpu_s']:.2f}x" if dense and name != "dense" else "-")
        else:
            cells += ["-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
curves = ["", "| length | model | batch: decode tokens per CPU s (CPU ms per step; wall tok/s) |", "|---|---|---|"]
for (name, prompt, output), r in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    pts = ", ".join(f"{p['batch']}: {p['tok_cpu_s']:.2f} ({1e3 * p['step_cpu_s']:.0f}; {p['tok_s']:.2f})"
                    for p in r["decode"])
    curves.append(f"| {prompt}+{output} | {name} | {pts} |")
with open(os.path.join(out, "lckv.md"), "w") as f:
    f.write("\n".join(lines + curves) + "\n")
print("\n".join(lines + curves))

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(0)
lengths = sorted({(p, o) for _, p, o in runs})
fig, axes = plt.subplots(1, len(lengths), figsize=(6 * len(lengths), 4), squeeze=False)
for ax, (prompt, output) in zip(axes[0], lengths):
    for name in ("dense", "w10", "w2"):
        r = runs.get((name, prompt, output))
        if r:
            ax.plot([p["batch"] for p in r["decode"]], [p["tok_cpu_s"] for p in r["decode"]], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch (sequences)")
    ax.set_ylabel("decode tokens per CPU second (1 thread)")
    ax.set_title(f"{prompt}+{output}, KV budget {runs[next(iter(runs))]['kv_gib']} GiB")
    ax.legend()
fig.tight_layout()
fig.savefig(os.path.join(out, "lckv_decode.png"), dpi=100)
