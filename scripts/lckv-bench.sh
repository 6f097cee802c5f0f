#!/usr/bin/env bash
# The LCKV comparison of docs/BENCHMARKS.md ("Layer-condensed KV"): dense TinyLlama against
# its LCKV w=10 and w=2 variants (random bf16 weights, the real shapes), at a fixed KV
# budget and two prompt+output lengths: the most sequences the budget holds, the decode
# throughput up to that batch (the curve), and one prompt's prefill time.
#   scripts/lckv-bench.sh OUT_DIR [KV_GIB]
# Makes the checkpoints under $FATHOM_LCKV_MODELS (default /tmp/fathom-lckv) if missing
# (max_position_embeddings raised to 4096 for the 2048+2048 case: RoPE is defined there and
# fathom sizes its tables from this field), then runs the models in turn for each length
# (one process per run, JSON in OUT_DIR) and renders OUT_DIR/lckv.md and lckv_decode.png.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/lckv-bench.sh OUT_DIR [KV_GIB]}
kv=${2:-4}
models=${FATHOM_LCKV_MODELS:-/tmp/fathom-lckv}
mkdir -p "$out" "$models"
# A private copy of the binary: a rebuild of build/ during the run must not change it.
cp build/fathom "$out/fathom"
fathom=$out/fathom
for spec in "llama tinyllama-1.1b dense" "lckv tinyllama-lckv-w10 w10" "lckv tinyllama-lckv-w2 w2"; do
  set -- $spec
  if [ ! -f "$models/$3/config.json" ]; then
    "$fathom" make-model "$1" "$models/$3" --preset "$2"
    /usr/bin/python3 - "$models/$3/config.json" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p)); c["max_position_embeddings"] = 4096
json.dump(c, open(p, "w"), indent=1)
PY
  fi
done
{ date -u; lscpu | grep -E 'Model name|^CPU\(s\)'; uptime; } > "$out/machine.txt"
for len in "512 1024" "2048 2048"; do
  set -- $len
  for m in dense w10 w2; do
    echo "== $m prompt $1 output $2 ($(date -u +%T), load $(cut -d' ' -f1 /proc/loadavg))"
    "$fathom" bench kv-capacity --model "$models/$m" --kv-gib "$kv" --prompt "$1" --output "$2" \
      --batch 1,4,16,64 --reps 2 --threads 1 --prefill $([ "$1" = 512 ] && echo 512 || echo 0) --json \
      > "$out/${m}_$1_$2.json"
  done
done
/usr/bin/python3 scripts/render-lckv-bench.py "$out"
