#!/usr/bin/env bash
# Runs the CB / CDB benchmark suite on the small Ouro- and Huginn-shaped presets and
# renders REPORT.md with PNG plots (scripts/render-cdb-report.py).
#   scripts/cdb-report.sh [--quick] [OUTDIR]      (default OUTDIR: build/cdb-report)
# --quick: fewer requests and configurations (meant to finish in a few minutes here).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
out="${1:-build/cdb-report}"
mkdir -p "$out" build/models
[ -x build/fathom ] || { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null && cmake --build build --target fathom; }
f=build/fathom
for fam in ouro huginn; do
  [ -f "build/models/$fam-small/config.json" ] || $f make-model "$fam" "build/models/$fam-small" --preset "$fam-small" > /dev/null
done
if [ $quick = 1 ]; then n_alpaca=12; n_sharegpt=4; batches=1,2,4,8; contexts=128,512; rates=4,16; n_online=16; repeat=1
else n_alpaca=64; n_sharegpt=16; batches=1,2,4,8,16,32; contexts=128,512,2048; rates=2,4,8,16,32; n_online=64; repeat=3; fi
{ echo "date: $(date -u +%F)"; lscpu | grep -E "Model name|^CPU\(s\)"; echo "quick: $quick"; echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"; } > "$out/meta.txt"
$f bench offline --model build/models/ouro-small --workload alpaca --requests $n_alpaca --k 1 --repeat $repeat --json > "$out/offline-ouro-alpaca.jsonl"
$f bench offline --model build/models/ouro-small --workload sharegpt --requests $n_sharegpt --k 1 --repeat $repeat --json > "$out/offline-ouro-sharegpt.jsonl"
$f bench offline --model build/models/huginn-small --workload alpaca --requests $n_alpaca --k 2 --repeat $repeat --json > "$out/offline-huginn-alpaca.jsonl"
$f bench step-latency --model build/models/ouro-small --batch $batches --context $contexts --reps 3 --threads 1 --fit --json > "$out/step-latency.json"
$f bench online --model build/models/ouro-small --workload alpaca --rates $rates --requests $n_online --json > "$out/online.jsonl"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/meta.txt"
/usr/bin/python3 scripts/render-cdb-report.py "$out"
