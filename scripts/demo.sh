#!/usr/bin/env bash
# demo.sh — the main job on the embedded default: install missing Debian dependencies, build,
# create the tiny random-weight demo model if absent, generate text with it, then serve it and
# run `snug verify` against the server (scripts/demo_verify.sh). The demo model has random
# weights: generation is gibberish and the content checks of verify fail with their reasons;
# the point is to see the whole path work. Point it at a real model with SNUG_MODEL=path.gguf.
# Usage: scripts/demo.sh [PROMPT]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target snug
mkdir -p models
MODEL=${SNUG_MODEL:-models/demo.gguf}
[ -f "$MODEL" ] || ./build/snug gen --preset demo --type q8_0 -o "$MODEL"
./build/snug run -m "$MODEL" -p "${1:-def fibonacci(n):}" -n 64 --seed 1
echo
echo "== serving $MODEL and running snug verify against it"
if scripts/demo_verify.sh build/snug "$MODEL"; then
  echo "verify: every check passed"
else
  echo "verify: $? check(s) failed (expected for the random-weight demo model; see the reasons above)"
fi
