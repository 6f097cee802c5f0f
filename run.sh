#!/usr/bin/env bash
# fathom's main job on a default that needs nothing downloaded: build, write a tiny random
# Ouro checkpoint (real tensor names), and generate from it with early exits.
# Usage: ./run.sh [extra `fathom generate` flags]
set -euo pipefail
cd "$(dirname "$0")"
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build --target fathom
model="${FATHOM_DEMO_MODEL:-build/models/ouro-tiny}"
[ -f "$model/config.json" ] || ./build/fathom make-model ouro "$model" --preset tiny --dtype bf16
./build/fathom generate --model "$model" --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 32 \
  --exit-threshold 0.5 "$@"
