#!/usr/bin/python3
"""The model of docs/BENCHMARKS_BUDGET.md: Ouro-small's shape with fewer layers.

usage: scripts/budget-bench-model.py FATHOM_BINARY OUT_DIR [LAYERS]

`fathom make-model ouro --preset ouro-small` (8 layers of 512, vocabulary 4096, 4 loop
steps), then the layers from LAYERS on (default 2) are dropped from config.json and the
safetensors file, so that a token's step is cheap enough for the benchmark's deadlines
(20 x output x TPOT) to be of the order of the burst's 30 s, while the core still
dominates: one loop step is 2 layers, F_0 / F_r = 0.33 (the LM head over 4096 tokens
against 2 layers of 512).
"""
import json
import os
import re
import struct
import subprocess
import sys


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    binary, out = sys.argv[1], sys.argv[2]
    layers = int(sys.argv[3]) if len(sys.argv) == 4 else 2
    subprocess.run([binary, "make-model", "ouro", out, "--preset", "ouro-small"], check=True)
    cfg_path = os.path.join(out, "config.json")
    cfg = json.load(open(cfg_path))
    cfg["num_hidden_layers"] = layers
    json.dump(cfg, open(cfg_path, "w"), indent=1)
    st_path = os.path.join(out, "model.safetensors")
    data = open(st_path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    keep, chunks, off = {}, [], 0
    for name, t in header.items():
        if name == "__metadata__":
            keep[name] = t
            continue
        m = re.match(r"model\.layers\.(\d+)\.", name)
        if m and int(m.group(1)) >= layers:
            continue
        b, e = t["data_offsets"]
        chunks.append(body[b:e])
        keep[name] = dict(t, data_offsets=[off, off + (e - b)])
        off += e - b
    h = json.dumps(keep).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(st_path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)


if __name__ == "__main__":
    main()
