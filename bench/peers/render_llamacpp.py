"""Prints bench/peers/llamacpp.sh's table from its raw JSONL (one line per engine, format, round and
batch). Ratios are taken per round (the two engines ran back to back) and their median is shown;
tokens/s are medians over rounds. A row whose runs were not all on a quiet host says so.

usage: python3 render_llamacpp.py RESULTS.jsonl MACHINE COMMIT THREADS PROMPT GEN
"""
import json
import statistics
import sys


def main():
    path, machine, commit, threads, prompt, gen = sys.argv[1:7]
    rows = [json.loads(line) for line in open(path) if line.strip()]
    if not rows:
        sys.exit(f"{path}: no results (see the logs beside it)")
    by = {}
    for r in rows:
        by.setdefault((r["format"], r["batch"]), {}).setdefault(r["engine"], {})[r["round"]] = r
    bw = [r["bandwidth_gbs"] for r in rows if "bandwidth_gbs" in r]
    rbw = [r["read_bandwidth_gbs"] for r in rows if "read_bandwidth_gbs" in r]
    print(f"machine: {machine}; threads {threads}; prompt {prompt}, generated {gen} tokens per sequence")
    print(f"llama.cpp {commit}; measured bandwidth (fathom's runs, best of read/copy/triad): "
          + (f"{min(bw):.1f}-{max(bw):.1f} GB/s" if bw else "not measured (no fathom run)")
          + (f"; read only {min(rbw):.1f}-{max(rbw):.1f} GB/s" if rbw else ""))
    print()
    print("| format | batch | llama.cpp decode tok/s | fathom decode tok/s | decode ratio | "
          "llama.cpp prompt tok/s | fathom prompt tok/s | prompt ratio | fathom of bandwidth (of read) | "
          "fathom of roofline | host |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    order = {"bf16": 0, "q8_0": 1, "q4_0": 2}
    for (fmt, batch), eng in sorted(by.items(), key=lambda kv: (order.get(kv[0][0], 9), kv[0][1])):
        llama, fathom = eng.get("llama.cpp", {}), eng.get("fathom", {})

        def med(runs, key):
            return statistics.median(r[key] for r in runs.values()) if runs else None

        def ratio(key):
            both = [fathom[k][key] / llama[k][key] for k in fathom if k in llama and llama[k][key] > 0]
            return statistics.median(both) if both else None

        def fmt_num(x, digits=1):
            return "–" if x is None else f"{x:.{digits}f}"

        fb = med(fathom, "fraction_of_bandwidth")
        # Older result files lack these two.
        fr = med(fathom, "fraction_of_read_bandwidth") if all("fraction_of_read_bandwidth" in r for r in fathom.values()) else None
        fo = med(fathom, "fraction_of_roofline") if all("fraction_of_roofline" in r for r in fathom.values()) else None
        noisy = any(r["host"] != "quiet" for runs in (llama, fathom) for r in runs.values())
        fathom_name = {"bf16": "bf16", "q8_0": "w8a8", "q4_0": "int4"}[fmt]
        print(f"| {fmt} (fathom {fathom_name}) | {batch} | {fmt_num(med(llama, 'decode_tok_s'))} | "
              f"{fmt_num(med(fathom, 'decode_tok_s'))} | {fmt_num(ratio('decode_tok_s'), 2)} | "
              f"{fmt_num(med(llama, 'prompt_tok_s'))} | {fmt_num(med(fathom, 'prompt_tok_s'))} | "
              f"{fmt_num(ratio('prompt_tok_s'), 2)} | {'–' if fb is None else f'{100 * fb:.0f}%'}"
              f"{'' if fr is None else f' ({100 * fr:.0f}%)'} | {'–' if fo is None else f'{100 * fo:.0f}%'} | "
              f"{'noisy' if noisy else 'quiet'} |")


if __name__ == "__main__":
    main()
