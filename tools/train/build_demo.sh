#!/usr/bin/env bash
# build_demo.sh — remake the demo model (data/demo/snug-demo-q8_0.gguf) end to end:
#   1. make_data.py: the training data and vocabulary (CPU, about a minute; needs build/snug
#      for the chat rendering and the `tokenizers` PyPI package);
#   2. train.py: training (PyTorch; a GPU: about 3.5 minutes on one H200, 2174 steps);
#   3. snug gen --from-weights: the GGUF with snug's own writer, Q8_0.
# Usage: tools/train/build_demo.sh [WORK_DIR] [STEPS]
#   STEPS defaults to 2174, the committed model's count (docs/demo-model.md); pass 0 to train
#   for a time budget instead (train.py --time-budget). On a machine without a GPU step 2
#   runs on the CPU, which is far too slow for the full run; train elsewhere and pass the
#   weights folder to step 3 by hand (see docs/demo-model.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=${1:-build/demo-train}
STEPS=${2:-2174}
mkdir -p "$WORK"
python3 tools/train/make_data.py --snug build/snug --out "$WORK/data" --seed 1
python3 tools/train/train.py --data "$WORK/data" --out "$WORK/run" --seed 1 --steps "$STEPS"
./build/snug gen --preset demo --type q8_0 --vocab-from "$WORK/data/tokenizer.json" \
    --from-weights "$WORK/run/weights" --name "snug demo" -o "$WORK/snug-demo-q8_0.gguf"
echo "wrote $WORK/snug-demo-q8_0.gguf (compare: data/demo/snug-demo-q8_0.gguf)"
