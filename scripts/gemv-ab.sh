#!/usr/bin/env bash
# The bf16 GEMV, this tree's against another revision's, in one process with whole passes over
# TinyLlama's weights alternating (benchmarks/kernels/gemv_ab.cc): on a noisy shared host the
# per-pair ratios of one run are far steadier than two binaries run in turns.
#   scripts/gemv-ab.sh [--rev REV] [--threads N] [--out FILE] [M ...]
# REV (default HEAD): the old side, its src/kernels/gemv_bf16.cc built with -Dfathom=fathom_old.
# Needs a Release build of this tree in build/ (libfathom_kernels.a, libfathom_core.a). Row
# counts default to 1 2 4 8 16. Needs a CPU with AVX512-BF16. Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=HEAD threads=2 out= rows=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rev) rev=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,8p' "$0"; exit 0 ;;
    -*) echo "gemv-ab.sh: unknown flag $1" >&2; exit 2 ;;
    *) rows+=("$1"); shift ;;
  esac
done
[ ${#rows[@]} -gt 0 ] || rows=(1 2 4 8 16)
for lib in build/libfathom_kernels.a build/libfathom_core.a; do
  [ -f "$lib" ] || { echo "gemv-ab.sh: $lib missing: build this tree first (./run.sh or cmake --build build)" >&2; exit 1; }
done
work=$(mktemp -d /tmp/fathom-gemv-ab.XXXXXX)
trap 'rm -rf "$work"' EXIT
flags=(-O3 -std=c++20 -mavx2 -mfma -mf16c -mbmi2 -fopenmp)
git archive "$rev" src | tar -x -C "$work"
cat > "$work/wrap.cc" << 'CC'
#include "kernels/gemv_bf16.h"
extern "C" void OldGemvBf16Packed(const uint16_t* w, int64_t kp, int64_t n, const uint16_t* x, int64_t m,
                                  int64_t xs, const float* bias, float* y) {
  fathom::internal::GemvBf16Packed(w, kp, n, x, m, xs, bias, y);
}
CC
objs=()
for f in "$work/wrap.cc" "$work/src/kernels/gemv_bf16.cc" "$work/src/core/parallel.cc"; do
  [ -f "$f" ] || continue
  o="$work/$(basename "$f" .cc).o"
  g++ "${flags[@]}" -I"$work/src" -Dfathom=fathom_old -c "$f" -o "$o"
  objs+=("$o")
done
g++ "${flags[@]}" -Isrc benchmarks/kernels/gemv_ab.cc "${objs[@]}" build/libfathom_kernels.a \
  build/libfathom_core.a -o "$work/ab"
{
  echo "# bf16 GEMV A/B: old = $(git rev-parse --short "$rev"), new = this tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo ' + changes')); $threads thread(s); $(date -u +%FT%TZ); $(lscpu | sed -n 's/^Model name: *//p')"
  OMP_NUM_THREADS=$threads "$work/ab" "${rows[@]}"
} | if [ -n "$out" ]; then tee "$out"; else cat; fi
