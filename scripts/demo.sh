#!/usr/bin/env bash
# demo.sh — the main job on the embedded default: install missing Debian dependencies, build,
# create the tiny random-weight demo model if absent, and generate text with it.
# Usage: scripts/demo.sh [PROMPT]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target snug
mkdir -p models
[ -f models/demo.gguf ] || ./build/snug gen --preset demo --type q8_0 -o models/demo.gguf
./build/snug run -m models/demo.gguf -p "${1:-def fibonacci(n):}" -n 64 --seed 1
