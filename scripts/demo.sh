#!/usr/bin/env bash
# demo.sh — the main job on the demo model: install missing Debian dependencies, build, generate
# text with the project's trained demo model (data/demo/snug-demo-q8_0.gguf, docs/demo-model.md:
# 5.8M parameters, speaks the Qwen3.6 chat protocol, has an MTP head), then serve it and run
# `snug verify` against the server (scripts/demo_verify.sh). The demo model is a toy: it knows
# capitals, small sums, counting and tool calls. Point it at a real model with
# SNUG_MODEL=path.gguf. Usage: scripts/demo.sh [PROMPT]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target snug
MODEL=${SNUG_MODEL:-data/demo/snug-demo-q8_0.gguf}
if [ ! -f "$MODEL" ]; then
    echo "demo.sh: $MODEL is missing (restore it from git, or set SNUG_MODEL)" >&2
    exit 1
fi
echo "== snug run: a chat question, rendered as the server would (greedy)"
Q=${1:-What is the capital of France?}
./build/snug run -m "$MODEL" --temp 0 -n 40 \
    -p $'<|im_start|>user\n'"$Q"$'<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n'
echo
echo "== snug run: the same protocol with thinking on (the reply starts inside <think>)"
./build/snug run -m "$MODEL" --temp 0 -n 60 \
    -p $'<|im_start|>user\nWhat is 7*8?<|im_end|>\n<|im_start|>assistant\n<think>\n'
echo
echo "== snug run: plain code completion (a 5.8M-parameter model: do not expect much)"
./build/snug run -m "$MODEL" -p "def fibonacci(n):" -n 48 --seed 1
echo
echo "== serving $MODEL and running snug verify against it (chat page: snug serve, then open /)"
if scripts/demo_verify.sh build/snug "$MODEL"; then
  echo "verify: every check passed"
else
  echo "verify: $? check(s) failed (see the reasons above)"
fi
