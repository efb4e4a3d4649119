#!/bin/sh
# run_vision_device.sh — images on the GPU (not in ctest: needs a GPU): the vision
# tower (every block: cuda_encoder.cu's ops + bf16 products) and the text model (the image rows,
# the 3-D rotary positions: interleaved M-RoPE kernel). Checks, each printed PASS/FAIL:
#   0. test_cuda_ops (when carried): `test_cuda_ops encoder` (the tower's ops against the CPU
#      ops on odd shapes, and the attention's time at a megapixel's 4096 patches), then the
#      whole binary's rope checks (the M-RoPE kernel against the CPU op);
#   1. tests/device/vision_device.py: the fixture's features with the tower on CUDA vs
#      transformers (median relative error <= 1e-2) and on the CPU (<= 1e-4); the image
#      prompt: `snug logits --backend cuda --mmproj --image` vs transformers (median KL <= 1e-4)
#      and vs the CPU backend (<= 1e-4), 16 greedy tokens identical to the CPU's (one step,
#      steps of 7 rows, evals of 10 ids), and the same with --vision-backend cpu;
#   2. `snug serve --backend cuda --mmproj` vs the CPU server: a chat with a base64 PNG gives
#      the same greedy tokens (tests/device/vision_device.py);
#   3. images with MTP speculative drafts on the GPU: `snug run --backend cuda --spec-draft 1/3`
#      == `--spec-draft 0` text and a `--spec-draft 2` server == `--spec-draft 0` server on
#      D/fx/vision/vision-mtp.gguf (vision_device.py part 3), and `test_vision_spec cuda` on the
#      trained fixture (D/fx/trained: a trained MTP block, so drafts are accepted): a 3 x 5
#      image then 64 greedy tokens with 3 drafts, snapshot and recompute rollback, chunks 64 and
#      7 (an MTP step starting inside the image) == plain greedy, no allocation per step.
# Carry as run_lowbit_device.sh does: tests/device/pack_devcarry.sh BUILD D puts snug,
# libsnug_cuda.so, test_cuda_ops, test_vision_spec and the shared libraries in D/lib.tar.xz, the
# vision fixture (+ vision-mtp.gguf) in D/fx/vision (without it the tracked tests/data/vision is
# read and part 3's CLI/server checks are skipped) and the trained fixture in D/fx/trained.
# About two minutes.
# Usage on the device: sh tests/device/run_vision_device.sh [devcarry] [outdir]
# Success: the last line is "run_vision_device: PASS".
export T=${TMPDIR:-/tmp} # scratch files (the prompt, generated models)
D=${1:-devcarry}
O=${2:-${OUT:-$T/vision}}
mkdir -p "$O"
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib:$LD_LIBRARY_PATH"
S="$PWD/$D/snug"
F="$D/fx/vision"
[ -f "$F/text-f16.gguf" ] || F=tests/data/vision
fail=0
T0=$(date +%s)
el() { echo "[t+$(($(date +%s) - T0))s] $*"; }
if [ -x "$D/test_cuda_ops" ]; then
  el "test_cuda_ops encoder: the tower's ops vs the CPU ops"
  "$D/test_cuda_ops" encoder > "$O/test_cuda_ops_encoder.txt" 2>&1
  rc=$?
  grep -E "layernorm|bias_act|rope_angles|attention_full|passed" "$O/test_cuda_ops_encoder.txt"
  if [ $rc = 0 ] && grep -q "attention_full" "$O/test_cuda_ops_encoder.txt"; then
    echo "PASS: encoder ops vs the CPU ops"
  else
    echo "FAIL: encoder ops vs the CPU ops (rc=$rc, see $O/test_cuda_ops_encoder.txt)"; fail=1
  fi
  el "test_cuda_ops: rope_mrope vs the CPU op"
  timeout 300 "$D/test_cuda_ops" > "$O/test_cuda_ops.txt" 2>&1 || true
  grep -E "rope_(neox|mrope)" "$O/test_cuda_ops.txt"
  if grep -q "rope_mrope" "$O/test_cuda_ops.txt" && ! grep -E "rope_mrope" "$O/test_cuda_ops.txt" | grep -q FAIL; then
    echo "PASS: M-RoPE kernel vs the CPU op"
  else
    echo "FAIL: M-RoPE kernel vs the CPU op (see $O/test_cuda_ops.txt)"; fail=1
  fi
fi
el "image prompt and server, CUDA vs CPU vs transformers; images with MTP drafts"
timeout 360 python3 tests/device/vision_device.py "$S" "$F" "$O" || fail=1
if [ -x "$D/test_vision_spec" ] && [ -f "$D/fx/trained/trained-f16.gguf" ]; then
  el "test_vision_spec cuda: MTP drafts after an image on the GPU == plain greedy"
  SNUG_FIXTURES="$PWD/$D/fx" SNUG_REQUIRE_FIXTURES=1 SNUG_CUDA_LIB="$PWD/$D/libsnug_cuda.so" \
    timeout 300 "$D/test_vision_spec" cuda > "$O/test_vision_spec.txt" 2>&1
  grep -E "backend|plain greedy|MTP drafts|rollback|the CPU|passed|FAIL" "$O/test_vision_spec.txt" | head -30
  if grep -q "^backend cuda" "$O/test_vision_spec.txt" && grep -q " passed, 0 failed" "$O/test_vision_spec.txt"; then
    echo "PASS: test_vision_spec cuda (images + MTP drafts on the GPU == plain greedy)"
  else
    echo "FAIL: test_vision_spec cuda (see $O/test_vision_spec.txt)"; fail=1
  fi
else
  echo "FAIL: test_vision_spec or D/fx/trained not carried (tests/device/pack_devcarry.sh)"; fail=1
fi
el done
[ $fail = 0 ] && echo "run_vision_device: PASS" || echo "run_vision_device: FAIL"
exit $fail
