#!/usr/bin/env bash
# Decode speed of an L2A gate checkpoint at several budgets against its ungated base
# (issue 18: "decode at b = 0.5 >= 1.3x faster than b = 1 at batch 16"). Rounds are
# interleaved (base, b = 1, 0.7, 0.5, then again) because wall-clock ratios on a shared
# host move by +-20% between runs; each row also reports the fraction of layer matmul
# flops the gates ran (the plan's own count), so a speed-up can be read against it.
#
#   scripts/l2a-decode-bench.sh GATED_DIR BASE_DIR [ROUNDS] [THREADS] > out.jsonl
# PROMPT and GEN (environment; default 64 and 64) set the tokens per sequence: a small model
# decodes 64 tokens at batch 16 in a quarter of a second, so longer runs are steadier.
set -euo pipefail
gated=${1:?usage: l2a-decode-bench.sh GATED_DIR BASE_DIR [ROUNDS] [THREADS]}
base=${2:?usage: l2a-decode-bench.sh GATED_DIR BASE_DIR [ROUNDS] [THREADS]}
rounds=${3:-3}
threads=${4:-1}
fathom=${FATHOM:-$(dirname "$0")/../build/fathom}
common=(--batch 1,16 --prompt "${PROMPT:-64}" --gen "${GEN:-64}" --threads "$threads" --json)
for ((r = 1; r <= rounds; ++r)); do
  echo "{\"round\": $r, \"what\": \"base\", \"run\": $("$fathom" bench decode --model "$base" "${common[@]}")}"
  for b in 1 0.7 0.5; do
    echo "{\"round\": $r, \"what\": \"gated\", \"budget\": $b, \"run\": $("$fathom" bench decode --model "$gated" --budget "$b" "${common[@]}")}"
  done
done
