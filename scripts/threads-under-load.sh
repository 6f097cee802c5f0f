#!/usr/bin/env bash
# Threads under a competing load (issue 15, part 5): `fathom bench offline` (CB and
# cdb-refill) on 1 thread, on N threads (the default), on N threads with the engine's
# ThreadGovernor (--adaptive-threads), and on N threads with oneDNN's prefill matmuls on
# its own OpenMP team (FATHOM_MATMUL=team) instead of the pool, with 0, 1, ... busy-looping
# processes beside it.
# Interleaved: within each round the four configurations run back to back in a rotated
# order, and ratios are taken within a round (the host's speed moves between rounds).
#
#   scripts/threads-under-load.sh                       # ouro-small, N = 2, loads 0 1 2
#   MODEL=DIR N=2 LOADS="0 1" ROUNDS=3 REQUESTS=16 scripts/threads-under-load.sh
#   BASELINE=/tmp/fathom-old scripts/threads-under-load.sh   # + that binary's governor
#
# Prints one table per load: tokens/s of each configuration (median over rounds), its
# ratio to 1 thread (median of the rounds' ratios, with min and max), the share of the
# governor's steps on fewer than N threads, and the share of its steps on more than one
# thread whose threads waited for cores over 5% of their time ("contended"). Raw JSON lines
# go to $OUT (default /tmp/fathom-threads.jsonl). Not in CI: it is a measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
FATHOM=${FATHOM:-build/fathom}
BASELINE=${BASELINE:-}  # another fathom binary whose --adaptive-threads runs as one more configuration
MODEL=${MODEL:-/tmp/fm/ouro-small}
N=${N:-2}
LOADS=${LOADS:-"0 1 2"}
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-16}
OUT=${OUT:-/tmp/fathom-threads.jsonl}

[[ -x $FATHOM ]] || { echo "threads-under-load: $FATHOM not built (cmake --build build)" >&2; exit 1; }
if [[ ! -f $MODEL/config.json ]]; then
  "$FATHOM" make-model ouro "$MODEL" --preset ouro-small >/dev/null
fi

spinners=()
stop_load() {
  for p in "${spinners[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${spinners[@]}"; do wait "$p" 2>/dev/null || true; done
  spinners=()
}
trap stop_load EXIT
start_load() {  # $1 busy processes, each bounded to 30 minutes
  for ((i = 0; i < $1; i++)); do
    timeout 1800 bash -c 'while :; do :; done' &
    spinners+=($!)
  done
}

# name|environment|flags
configs=("1|X=1|--threads 1" "$N-fixed|X=1|--threads $N" "$N-adaptive|X=1|--threads $N --adaptive-threads"
         "$N-matmul-team|FATHOM_MATMUL=team|--threads $N")
[[ -z $BASELINE ]] || configs+=("$N-adaptive-baseline|FATHOM_BIN=$BASELINE|--threads $N --adaptive-threads")
: >"$OUT"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%FT%TZ)"
for load in $LOADS; do
  start_load "$load"
  sleep 2
  for ((r = 0; r < ROUNDS; r++)); do
    for ((c = 0; c < ${#configs[@]}; c++)); do
      entry=${configs[$(((c + r) % ${#configs[@]}))]}
      IFS='|' read -r name envs flags <<<"$entry"
      bin=$FATHOM
      [[ $envs != FATHOM_BIN=* ]] || bin=${envs#FATHOM_BIN=}
      # shellcheck disable=SC2086
      env $envs "$bin" bench offline --model "$MODEL" --requests "$REQUESTS" --schedulers cdb-refill \
        --no-control --json $flags 2>/dev/null |
        python3 -c "import json,sys
for line in sys.stdin:
    d = json.loads(line)
    print(json.dumps({'load': $load, 'round': $r, 'config': '$name', 'scheduler': d['scheduler'],
                      'tok_s': d['output_tok_s'], 'steps': d['breakdown']['steps'],
                      'fewer': d['breakdown']['fewer_thread_steps'],
                      'contended': d['breakdown'].get('contended_thread_steps', 0)}))" >>"$OUT"
    done
  done
  stop_load
done

python3 - "$OUT" "$N" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
n = sys.argv[2]
for load in sorted({r["load"] for r in rows}):
    print(f"\nload: {load} busy process(es)")
    print(f"{'config':>20} {'scheduler':>11} {'tok/s':>8} {'vs 1 thread':>12} {'(min-max)':>13} "
          f"{'fewer-thread steps':>19} {'contended':>10}")
    for sched in ("cb", "cdb-refill"):
        sel = [r for r in rows if r["load"] == load and r["scheduler"] == sched]
        one = {r["round"]: r["tok_s"] for r in sel if r["config"] == "1"}
        for cfg in ("1", f"{n}-fixed", f"{n}-adaptive", f"{n}-matmul-team", f"{n}-adaptive-baseline"):
            rs = [r for r in sel if r["config"] == cfg]
            if not rs:
                continue
            ratios = [r["tok_s"] / one[r["round"]] for r in rs if r["round"] in one]
            steps = max(1, sum(r["steps"] for r in rs))
            fewer = sum(r["fewer"] for r in rs) / steps
            contended = sum(r.get("contended", 0) for r in rs) / steps
            print(f"{cfg:>20} {sched:>11} {statistics.median(r['tok_s'] for r in rs):8.1f} "
                  f"{statistics.median(ratios):12.2f} {f'({min(ratios):.2f}-{max(ratios):.2f})':>13} "
                  f"{fewer:18.1%} {contended:10.1%}")
EOF
