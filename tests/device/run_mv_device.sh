#!/bin/sh
# run_mv_device.sh — one device call for the decode matvec work: the op tests
# (test_cuda_ops: every kernel vs the CPU, the int8 matvec vs the exact product of the rounded
# x), the ceilings and matvec rates (bench_cuda_ops), the fixtures' KL gate
# (run_e2e_device.sh), a quantised fixture decoded on the GPU vs the CPU backend's logits made
# off-device (D/q/: trained-q4_k_m.gguf, all.json, cpu.f32), then qwen3.6-27b Q4_K_M (random
# weights, generated on the device) at a ~4K-token prompt: decode tok/s, then the same with
# SNUG_CUDA_PROFILE=1 (per-op device times on stderr). Not in ctest (needs a GPU).
# D holds snug, test_cuda_ops, bench_cuda_ops, lib.tar.xz, fx/ (tests/device/pack_devcarry.sh).
# Usage on the device: sh tests/device/run_mv_device.sh [D] [outdir] [prompt tokens]
export T=${TMPDIR:-/tmp} # scratch files (the prompt, generated models)
D=${1:-devcarry/mv}
O=${2:-${OUT:-$T/mv}}
N=${3:-4096}
mkdir -p "$O"
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib:$LD_LIBRARY_PATH"
S="$D/snug"
M=$T/27b.gguf
T0=$(date +%s)
el() { echo "[t+$(($(date +%s) - T0))s] $*"; }
el "test_cuda_ops"
timeout 120 "$D/test_cuda_ops" >"$O/test_cuda_ops.txt" 2>&1
echo "rc=$?"
grep -E "FAIL|int8|passed" "$O/test_cuda_ops.txt" | head -60
el "gen 27b (background)"
(timeout 120 $S gen --preset qwen3.6-27b --type q4_k_m -o $M >"$O/gen.txt" 2>&1) &
GEN=$!
el "bench_cuda_ops"
timeout 120 "$D/bench_cuda_ops" 2>&1 | tee "$O/bench_cuda_ops.txt" | grep -v "^attention"
el "e2e fixtures"
timeout 120 sh tests/device/run_e2e_device.sh "$D" "$O/e2e" >"$O/e2e.txt" 2>&1
grep -E "^==|KL|greedy|PASS|FAIL|perplexity|ppl" "$O/e2e.txt" | head -40
if [ -f "$D/q/trained-q4_k_m.gguf" ]; then
  el "q4_k_m fixture, decode path: cuda vs cpu"
  $S logits --backend cuda --chunk 1 -m "$D/q/trained-q4_k_m.gguf" --ids "$D/q/all.json" \
    -o "$O/q_cuda.f32" 2>&1 | tail -2
  python3 tests/device/compare_logits.py "$O/q_cuda.f32" "$D/q/cpu.f32" 2048
  echo "-- f32 activations (SNUG_CUDA_MATVEC_F32=1) vs cpu, and int8 vs f32 on the GPU"
  SNUG_CUDA_MATVEC_F32=1 $S logits --backend cuda --chunk 1 -m "$D/q/trained-q4_k_m.gguf" \
    --ids "$D/q/all.json" -o "$O/q_cuda_f32.f32" 2>&1 | tail -1
  python3 tests/device/compare_logits.py "$O/q_cuda_f32.f32" "$D/q/cpu.f32" 2048
  python3 tests/device/compare_logits.py "$O/q_cuda.f32" "$O/q_cuda_f32.f32" 2048
fi
wait $GEN
cat "$O/gen.txt" | tail -2
ls -la $M
python3 -c "
import random; random.seed(1)
w=[''.join(random.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(random.randint(2,8))) for _ in range(4000)]
open('$T/p.txt','w').write(' '.join(random.choice(w) for _ in range($N * 10 // 59)))"
echo "prompt tokens: $($S tokenize -m $M --file $T/p.txt | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')"
el "27b decode"
timeout 90 $S run --backend cuda -m $M -f $T/p.txt -n 64 --temp 0 2>&1 | grep -E "snug run|memory"
for v in SNUG_MVQ_ROWS=1 SNUG_MVQ_ROWS=4 SNUG_CUDA_MATVEC_F32=1; do
  el "27b decode with $v"
  env $v timeout 60 $S run --backend cuda -m $M -f $T/p.txt -n 64 --temp 0 2>&1 | grep "snug run"
done
el "27b decode, SNUG_CUDA_PROFILE=1 (short prompt: the steps are decode steps)"
head -c 200 $T/p.txt >$T/p0.txt
SNUG_CUDA_PROFILE=1 timeout 90 $S run --backend cuda -m $M -f $T/p0.txt -n 48 --temp 0 \
  2>&1 | grep -E "profile|tok/s" | head -60
el "done"
