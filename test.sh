#!/usr/bin/env bash
# Builds fathom and runs every test (kernels against scalar references, checkpoint I/O,
# models against the PyTorch reference, the CLI).
#   ./test.sh             Release build in build/
#   ./test.sh --sanitize  AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/
set -euo pipefail
cd "$(dirname "$0")"
scripts/install-deps.sh
dir=build
flags=(-DCMAKE_BUILD_TYPE=Release)
ctest_flags=()
if [ "${1:-}" = "--sanitize" ]; then
  dir=build-asan
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DFATHOM_SANITIZE=ON)
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # Tests that run no fathom code (the PyTorch reference's self-test) gain nothing here.
  ctest_flags=(-LE python-only)
fi
# A compiler cache where one is installed (.ci/run installs ccache on the CI host; a fresh
# machine has none, so the fresh-machine check always builds from nothing).
command -v ccache > /dev/null && flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$dir" -G Ninja "${flags[@]}" > /dev/null
cmake --build "$dir"
ctest --test-dir "$dir" --output-on-failure -j2 "${ctest_flags[@]}"
