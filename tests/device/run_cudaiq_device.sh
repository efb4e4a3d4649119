#!/bin/sh
# run_cudaiq_device.sh — the device run of the 1-3 bit i-quant kernels, one call:
#   1. test_cuda_ops: every CUDA op against the CPU; the lattice i-quants (IQ3_XXS, IQ3_S,
#      IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M) on the decode matvec (T 1/3/5/8) and the prompt path
#      (T 19/37: bf16 + cuBLAS), bit-exact bf16 dequantisation, against the reference decoder;
#   2. run_lowbit_device.sh: llama.cpp's files of every 1-4 bit mix, GPU vs CPU and vs llama.cpp's
#      KL, prompt and decode paths;
#   3. with BENCH=1, bench_cuda_ops: the low-bit types' decode matvec next to Q4_K (lines
#      "matvec <type> f32 n_in=5120 n_out=17408"), for docs/perf/cuda-kernels.md.
# The 27B speed line is a separate call: run_27b_quant_speed.sh (about 5 minutes by itself).
# Carry: D from pack_devcarry.sh (lib.tar.xz with snug, libsnug_cuda.so, test_cuda_ops,
# bench_cuda_ops; fx/trained).
# Usage on the device: [BENCH=1] sh tests/device/run_cudaiq_device.sh D OUTDIR
# (an estimate, not measured: 3-5 minutes; each step has its own timeout: 240 + 330 + 150 s at the most)
# Success: "test_cuda_ops rc=0" with "N passed, 0 failed", and "run_lowbit_device: PASS".
export T=${TMPDIR:-/tmp} # scratch files (the prompt, generated models)
D=${1:-devcarry}
O=${2:-${OUT:-$T/cudaiq}}
mkdir -p "$O"
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib:$LD_LIBRARY_PATH"
echo "[$(date -u +%T)] test_cuda_ops"
timeout 240 "$D/test_cuda_ops" > "$O/test_cuda_ops.txt" 2>&1
echo "test_cuda_ops rc=$?"
grep -E "FAIL|passed" "$O/test_cuda_ops.txt" | tail -n 40
grep -E "iq[123]_" "$O/test_cuda_ops.txt" | grep -v "^  " | head -n 60
echo "[$(date -u +%T)] run_lowbit_device"
timeout 330 sh tests/device/run_lowbit_device.sh "$D" $T/cudaiq-lowbit > "$O/lowbit.txt" 2>&1
echo "run_lowbit_device rc=$?"
grep -E "^==|PASS|FAIL|median|info" "$O/lowbit.txt"
if [ "${BENCH:-0}" = 1 ]; then
  echo "[$(date -u +%T)] bench_cuda_ops"
  timeout 150 "$D/bench_cuda_ops" > "$O/bench_cuda_ops.txt" 2>&1
  echo "bench_cuda_ops rc=$?"
  grep -E "ceiling|matvec [a-z0-9_]+ +f32 +n_in=5120 n_out=17408" "$O/bench_cuda_ops.txt"
fi
echo "[$(date -u +%T)] run_cudaiq_device: done"
