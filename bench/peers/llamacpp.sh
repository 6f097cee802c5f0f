#!/usr/bin/env bash
# fathom against llama.cpp on the same random TinyLlama-shaped weights, interleaved, in one run
# (issue 15 part 6). Not part of CI: it builds the peer (minutes) and times both engines.
#
#   bench/peers/llamacpp.sh [--rounds R] [--batches 1,4,16] [--formats bf16,q8_0,q4_0]
#                           [--prompt 128] [--gen 128] [--threads 2] [--out FILE.jsonl]
#                           [--head-checkpoint]
#
# 1. The peer's source: the npm package node-llama-cpp (pinned below) bundles llama.cpp as a git
#    bundle (package/llama/gitRelease.bundle); it is cloned under $WORK, never into fathom.
# 2. The peer's build: CPU, Release, -march=native (GGML_NATIVE), OpenMP, with clang 14 and
#    libomp-14-dev: g++ 12's _tile_loadconfig drops the stores that fill the AMX tile config,
#    so a g++ build dies with SIGILL on the first AMX instruction of its Q8_0/Q4_0 path.
# 3. The model: `fathom make-model llama --preset tinyllama-1.1b --dtype bf16` (random weights),
#    written as GGUF by bench/peers/gguf_from_hf.py with llama.cpp's own gguf-py, then
#    `llama-quantize` to Q8_0 and Q4_0.
# 4. The runs, per round and format: llama-batched-bench, then `fathom bench decode` (fathom's
#    weights for the format: bf16 = the checkpoint, q8_0 = --weights w8a8, q4_0 = --weights
#    int4: like llama.cpp's, both multiply by activations rounded to int8 per 32 values; and
#    for q8_0 and q4_0 --lm-head-weights w8a8, since llama-quantize turns the LM head into
#    Q8_0 and Q6_K: fathom's int8 head reads more bytes than Q6_K, not fewer;
#    --head-checkpoint keeps fathom's head bf16 in every format),
#    each after waiting for a quiet host. Each engine
#    decodes B sequences of --prompt tokens for --gen tokens in lockstep; tokens/s over all
#    sequences. Both time each batch after an untimed run of the same shape (llama.cpp: each
#    batch twice in -npl, the first dropped; fathom bench decode: its warm-up prefill).
#    fathom's run measures the memory bandwidth before and after itself.
# 5. One table: per format and batch, the median over rounds of each engine's tokens/s, the
#    median of the per-round ratios fathom / llama.cpp, and fathom's fraction of the bandwidth.
#
# Environment: WORK (default /tmp/fathom-peers), FATHOM (default build/fathom),
# NODE_LLAMA_CPP (default 3.22.1), QUIET_CPU (idle fraction of a core counted as quiet, 0.15),
# QUIET_WAIT_S (longest wait for a quiet host before a run, 120; the run then goes ahead and
# the row says "noisy").
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
rounds=2 batches=1,4,16 formats=bf16,q8_0,q4_0 prompt=128 gen=128 threads=2 out="" head_checkpoint=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --batches) batches="$2"; shift 2 ;;
    --formats) formats="$2"; shift 2 ;;
    --prompt) prompt="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --head-checkpoint) head_checkpoint=1; shift ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "llamacpp.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
work="${WORK:-/tmp/fathom-peers}"
fathom="${FATHOM:-$root/build/fathom}"
version="${NODE_LLAMA_CPP:-3.22.1}"
quiet_cpu="${QUIET_CPU:-0.15}"
quiet_wait="${QUIET_WAIT_S:-120}"
py=/usr/bin/python3  # Debian's, with python3-numpy (gguf-py needs it)
[ -x "$fathom" ] || { echo "llamacpp.sh: $fathom is not built (cmake --build build --target fathom)" >&2; exit 2; }
for tool in npm git clang++-14 cmake ninja; do
  command -v "$tool" > /dev/null || { echo "llamacpp.sh: '$tool' is not installed (clang-14, libomp-14-dev, cmake, ninja-build, npm, git)" >&2; exit 2; }
done
mkdir -p "$work"
[ -n "$out" ] || out="$work/results-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
: > "$out"

# --- 1. the peer's source -------------------------------------------------------------------
src="$work/llama.cpp"
if [ ! -d "$src/.git" ]; then
  (cd "$work" && npm pack --silent "node-llama-cpp@$version" > /dev/null)
  tar xzf "$work/node-llama-cpp-$version.tgz" -C "$work" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
  git clone -q "$work/package/llama/gitRelease.bundle" "$src"
fi
commit="$(git -C "$src" rev-parse HEAD)"
echo "llama.cpp $commit (node-llama-cpp $version)"

# --- 2. the peer's build ----------------------------------------------------------------------
bin="$src/build/bin"
if [ ! -x "$bin/llama-batched-bench" ] || [ ! -x "$bin/llama-quantize" ]; then
  cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DGGML_NATIVE=ON -DGGML_OPENMP=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF > "$work/cmake.log" 2>&1 || { tail -20 "$work/cmake.log" >&2; exit 1; }
  cmake --build "$src/build" --target llama-batched-bench llama-quantize > "$work/build.log" 2>&1 ||
    { tail -20 "$work/build.log" >&2; exit 1; }
fi

# --- 3. the model ----------------------------------------------------------------------------
hf="$work/tinyllama-bf16"
[ -f "$hf/model.safetensors" ] || "$fathom" make-model llama "$hf" --preset tinyllama-1.1b --dtype bf16 --seed 1
gguf_of() { echo "$work/tinyllama-$1.gguf"; }
[ -f "$(gguf_of bf16)" ] || "$py" "$root/bench/peers/gguf_from_hf.py" "$hf" "$(gguf_of bf16)" "$src/gguf-py"
IFS=, read -r -a format_list <<< "$formats"
for f in "${format_list[@]}"; do
  case "$f" in
    bf16) ;;
    q8_0|q4_0)
      [ -f "$(gguf_of "$f")" ] || "$bin/llama-quantize" "$(gguf_of bf16)" "$(gguf_of "$f")" "${f^^}" > "$work/quantize-$f.log" 2>&1 ||
        { tail -5 "$work/quantize-$f.log" >&2; exit 1; } ;;
    *) echo "llamacpp.sh: --formats: '$f' is not bf16, q8_0 or q4_0" >&2; exit 2 ;;
  esac
done

# --- 4. the runs -----------------------------------------------------------------------------
# Busy CPU (in cores) of everything on the host over one second, from /proc/stat.
busy_cores() {
  local a b
  a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
  "$py" -c "import sys; a=list(map(int,sys.argv[1].split())); b=list(map(int,sys.argv[2].split()));
d=[y-x for x,y in zip(a,b)]; idle=d[3]+d[4]; tot=sum(d[:8]); import os
print(f'{(tot-idle)/tot*os.cpu_count():.2f}')" "${a[*]:1}" "${b[*]:1}"
}
# Waits until three consecutive seconds are quiet; prints "quiet" or "noisy" (gave up).
wait_quiet() {
  local start=$SECONDS streak=0
  while [ $((SECONDS - start)) -lt "$quiet_wait" ]; do
    if "$py" -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$(busy_cores)" "$quiet_cpu"; then
      streak=$((streak + 1)); [ $streak -ge 3 ] && { echo quiet; return; }
    else
      streak=0
    fi
  done
  echo noisy
}
max_batch="$(tr , '\n' <<< "$batches" | sort -n | tail -1)"
batches_twice="$(tr , '\n' <<< "$batches" | sed 'p' | paste -sd, -)"
ctx=$((max_batch * (prompt + gen)))
machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
for round in $(seq 1 "$rounds"); do
  for f in "${format_list[@]}"; do
    host="$(wait_quiet)"
    echo "round $round $f: llama.cpp ($host host)" >&2
    # Each batch twice, the first untimed (a warm-up of that shape, as fathom's bench does:
    # llama.cpp's first 128-token prompt after its own 16-token warm-up ran ~9% slower).
    "$bin/llama-batched-bench" -m "$(gguf_of "$f")" -c "$ctx" -b 2048 -ub 512 -npp "$prompt" -ntg "$gen" \
      -npl "$batches_twice" -t "$threads" -tb "$threads" --output-format jsonl 2> "$work/llama-$f.log" |
      "$py" -c "import json,sys
seen=set()
for line in sys.stdin:
    if line.startswith('{'):
        r=json.loads(line)
        if r['pl'] not in seen:
            seen.add(r['pl']); continue
        print(json.dumps({'engine':'llama.cpp','format':sys.argv[1],'round':int(sys.argv[2]),'host':sys.argv[3],
            'batch':r['pl'],'prompt_tok_s':r['speed_pp'],'decode_tok_s':r['speed_tg'],'commit':sys.argv[4]}))" \
        "$f" "$round" "$host" "$commit" >> "$out"
    case "$f" in bf16) weights=checkpoint head=checkpoint ;; q8_0) weights=w8a8 head=w8a8 ;; q4_0) weights=int4 head=w8a8 ;; esac
    [ "$head_checkpoint" = 1 ] && head=checkpoint
    host="$(wait_quiet)"
    echo "round $round $f: fathom --weights $weights --lm-head-weights $head ($host host)" >&2
    "$fathom" bench decode --model "$hf" --weights "$weights" --lm-head-weights "$head" --batch "$batches" \
      --prompt "$prompt" --gen "$gen" --threads "$threads" --json |
      "$py" -c "import json,sys
j=json.load(sys.stdin)
for r in j['results']:
    print(json.dumps({'engine':'fathom','format':sys.argv[1],'round':int(sys.argv[2]),'host':sys.argv[3],'batch':r['batch'],
        'prompt_tok_s':r['prompt_tokens_per_s'],'decode_tok_s':r['decode_tokens_per_s'],
        'fraction_of_bandwidth':r['fraction_of_bandwidth'],'fraction_of_read_bandwidth':r['fraction_of_read_bandwidth'],
        'fraction_of_roofline':r['fraction_of_roofline'],'weight_bytes_per_step':j['weight_bytes_per_step'],
        'lm_head_weights':j['lm_head_weights'],
        'read_bandwidth_gbs':j['bandwidth_read_gbs'],
        'bandwidth_gbs':max(j['bandwidth_read_gbs'],j['bandwidth_copy_gbs'],j['bandwidth_triad_gbs']),'kv_dtype':j['kv_dtype']}))" \
        "$f" "$round" "$host" >> "$out"
  done
done

# --- 5. the table ----------------------------------------------------------------------------
"$py" "$root/bench/peers/render_llamacpp.py" "$out" "$machine" "$commit" "$threads" "$prompt" "$gen"
echo "raw results: $out"
