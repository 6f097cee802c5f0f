#!/usr/bin/env bash
# fathom's main job on a default that needs nothing downloaded: build, then generate text
# from the looped model trained here (models/ouro-brown: an Ouro-style model, 3.7M
# parameters, trained on the Brown corpus by train/; its card says how well it does), each
# token leaving the loop where its exit gate says; in a terminal each token is coloured by
# the loop steps it ran.
# Usage: ./run.sh [extra `fathom generate` flags]
#   FATHOM_DEMO_MODEL=DIR    another checkpoint with a tokenizer.json
#   FATHOM_DEMO_PROMPT=TEXT  another prompt
set -euo pipefail
cd "$(dirname "$0")"
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build --target fathom
model="${FATHOM_DEMO_MODEL:-models/ouro-brown}"
prompt="${FATHOM_DEMO_PROMPT:-The old man said that}"
./build/fathom generate --model "$model" --prompt "$prompt" --max-tokens 48 \
  --exit-threshold 0.5 --temperature 0.8 --top-p 0.9 --seed 1 "$@"
