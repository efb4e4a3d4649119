#!/bin/sh
# run_vision_device.sh — images on the GPU (issue 23; not in ctest: needs a GPU): the vision
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
#      the same greedy tokens.
# Carry as run_lowbit_device.sh does: tests/device/pack_devcarry.sh BUILD D puts snug,
# libsnug_cuda.so, test_cuda_ops and the shared libraries in D/lib.tar.xz and the vision
# fixture in D/fx/vision (without it the tracked tests/data/vision is read). About a minute.
# Usage on the device: sh tests/device/run_vision_device.sh [devcarry] [outdir]
# Success: the last line is "run_vision_device: PASS".
D=${1:-devcarry}
O=${2:-${OUT:-/tmp/vision}}
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
el "image prompt and server, CUDA vs CPU vs transformers"
timeout 240 python3 tests/device/vision_device.py "$S" "$F" "$O" || fail=1
el done
[ $fail = 0 ] && echo "run_vision_device: PASS" || echo "run_vision_device: FAIL"
exit $fail
