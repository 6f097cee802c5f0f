#!/usr/bin/env bash
# Decode attention, this tree's kernel against another revision's, in one process with calls
# alternating (benchmarks/kernels/decode_attention_ab.cc): on a noisy shared host the
# per-pair ratios of one run are far steadier than two binaries run in turns.
#   scripts/decode-attention-ab.sh [--rev REV] [--threads N] [--batch B] [--out FILE] [L ...]
# REV (default HEAD): the old side, its paged_attention*.cc, softmax.cc and dtype.cc built
# with -Dfathom=fathom_old. Needs a Release build of this tree in build/ (libfathom_kernels.a,
# libfathom_core.a). Shapes: TinyLlama 32/4 x 64, Llama-3-8B 32/8 x 128, Qwen3 16/8 x 128,
# MHA 16/16 x 64 and x 128 (Ouro, Huginn); lengths default 256 2048. Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=HEAD threads=1 batch=4 out= lengths=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rev) rev=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,9p' "$0"; exit 0 ;;
    -*) echo "decode-attention-ab.sh: unknown flag $1" >&2; exit 2 ;;
    *) lengths+=("$1"); shift ;;
  esac
done
[ ${#lengths[@]} -gt 0 ] || lengths=(256 2048)
for lib in build/libfathom_kernels.a build/libfathom_core.a; do
  [ -f "$lib" ] || { echo "decode-attention-ab.sh: $lib missing: build this tree first (./run.sh or cmake --build build)" >&2; exit 1; }
done
work=$(mktemp -d /tmp/fathom-da-ab.XXXXXX)
trap 'rm -rf "$work"' EXIT
flags=(-O3 -std=c++20 -mavx2 -mfma -mf16c -mbmi2 -fopenmp)
# The old revision's tree of headers and the sources the kernel needs.
git archive "$rev" src | tar -x -C "$work"
cat > "$work/wrap.cc" << 'CC'
#include "kernels/paged_attention.h"
extern "C" void OldPagedAttention(const void* s, const void* kv, const void* rows, long n, const void* segs) {
  fathom::PagedAttention(*static_cast<const fathom::AttentionShape*>(s), *static_cast<const fathom::PagedKvView*>(kv),
                         static_cast<const fathom::PagedAttentionRow*>(rows), n, static_cast<const fathom::KeySegment*>(segs));
}
CC
objs=()
for f in "$work/wrap.cc" "$work"/src/kernels/paged_attention*.cc "$work/src/kernels/softmax.cc" "$work/src/core/dtype.cc" "$work/src/core/parallel.cc"; do
  [ -f "$f" ] || continue
  o="$work/$(basename "$f" .cc).o"
  g++ "${flags[@]}" -I"$work/src" -Dfathom=fathom_old -c "$f" -o "$o"
  objs+=("$o")
done
g++ "${flags[@]}" -Isrc benchmarks/kernels/decode_attention_ab.cc "${objs[@]}" build/libfathom_kernels.a \
  build/libfathom_core.a -o "$work/ab"
{
  echo "# decode attention A/B: old = $(git rev-parse --short "$rev"), new = this tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo ' + changes')); $threads thread(s), batch $batch; $(date -u +%FT%TZ); $(lscpu | sed -n 's/^Model name: *//p')"
  for shape in "32 4 64" "32 8 128" "16 8 128" "16 16 64" "16 16 128"; do
    read -r h kv d <<< "$shape"
    HEADS=$h KV_HEADS=$kv HEAD_DIM=$d BATCH=$batch OMP_NUM_THREADS=$threads "$work/ab" "${lengths[@]}"
  done
} | if [ -n "$out" ]; then tee "$out"; else cat; fi
