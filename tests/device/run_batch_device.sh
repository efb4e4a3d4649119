#!/bin/sh
# run_batch_device.sh — batched decode steps on a GPU (not in ctest: needs one): the multi-run
# conv / DeltaNet launches (SNUG_CUDA_RUNS=1), the dp4a matvec with lanes per unit
# (SNUG_MVQ_LANES), slots decoding together (`snug bench-local --parallel`), where a 4-row step's
# time goes, and the int8 prompt kernel's small-step table. Carried by tests/device/pack_devcarry.sh
# (BINS="snug libsnug_cuda.so test_cuda_ops bench_cuda_ops" NOFX=1). Two parts, each under the
# run tool's ten minutes:
#   a. test_cuda_ops step (the multi-run forms against one call per run, bit for bit) and lanes
#      (every lanes form against the CPU); bench_cuda_ops matvec (the lanes forms beside the
#      others); the 27B preset Q4_K_M (64 layers, random weights, written here); bench-local
#      --parallel 4 and 8 with SNUG_CUDA_RUNS=0 / 1, --parallel 2, --parallel 4 with the lanes
#      forms; with OLD=path, that snug binary's --parallel 4 beside this one's (an A/B of two
#      builds over the same libsnug_cuda.so); the verification's cost (bench-local --verify)
#      with the default products and with the lanes form.
#   b. test_cuda_ops mmq; --cuda-profile of one sequence and of 4 (the 4-sequence run holds the
#      one-sequence tg too: subtract); an 8K prompt's rate and profile (q8_0 cache);
#      bench_cuda_ops mmq (T = 12 .. 2048 against bf16 + cuBLAS); ncu of the T = 4 products
#      (dp4a 4 rows, its lanes form, k_mmv) beside the T = 1 product, q4_K 5120 -> 17408.
# Everything goes to OUTDIR/batch-PART.txt (one file: the run tool returns at most 8).
# Usage on the device: [PART=a|b] [OLD=path/to/snug] sh tests/device/run_batch_device.sh D [OUTDIR]
T=${TMPDIR:-/tmp}
D=${1:-devcarry/batch}
O=${2:-${OUT:-$T/batch}}
PART=${PART:-a}
mkdir -p "$O"
exec > "$O/batch-$PART.txt" 2>&1
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D:$PWD/$D/lib:${LD_LIBRARY_PATH:-}"
S=$D/snug
M=$T/27b-batch.gguf
t0=$(date +%s)
el() { echo "[+$(($(date +%s) - t0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
model() {
  [ -f "$M" ] && return 0
  el "the 27B preset Q4_K_M (64 layers)"
  timeout 240 $S gen --preset qwen3.6-27b --type q4_k_m -o "$M" > "$T/gen.log" 2>&1 ||
    { echo "gen failed"; tail -5 "$T/gen.log"; exit 1; }
}
BL="bench-local --backend cuda -p 0 -n 64 -d 256 --reps 2 --kv tq4"
if [ "$PART" = a ]; then
  el "a1. test_cuda_ops step, lanes"
  timeout 120 $D/test_cuda_ops step > "$T/step.txt" 2>&1
  echo "rc $?"
  grep -E "^runs|FAIL|passed|failed" "$T/step.txt" | head -40
  timeout 150 $D/test_cuda_ops lanes > "$T/lanes.txt" 2>&1
  echo "rc $?"
  grep -E "FAIL|passed|failed" "$T/lanes.txt" | head -20
  el "a2. bench_cuda_ops matvec"
  timeout 120 $D/bench_cuda_ops matvec 2>&1 | grep -E "ceiling|matvec (q4_K|q6_K)" | head -100
  model
  el "a3. bench-local --parallel"
  for np in 4 8; do
    for r in 0 1; do
      SNUG_CUDA_RUNS=$r timeout 150 $S $BL -m "$M" -np $np 2>&1 | grep -E "^tg|rror"
      el "   --parallel $np, SNUG_CUDA_RUNS=$r"
    done
  done
  SNUG_CUDA_RUNS=1 timeout 120 $S $BL -m "$M" -np 2 2>&1 | grep -E "^tg|rror"
  for e in "SNUG_MVQ_MMA=0 SNUG_MVQ_LANES=4" "SNUG_MVQ_MMA=1 SNUG_MVQ_LANES=4" "SNUG_MVQ_MMA=0"; do
    env SNUG_CUDA_RUNS=1 $e timeout 150 $S $BL -m "$M" -np 4 2>&1 | grep -E "^tg|rror"
    el "   --parallel 4, $e"
  done
  if [ -n "${OLD:-}" ]; then
    for rep in 1 2; do
      SNUG_CUDA_LIB=$PWD/$D/libsnug_cuda.so timeout 150 "$OLD" $BL -m "$M" -np 4 2>&1 |
        grep -E "^tg|rror"
      el "   --parallel 4, $OLD"
      timeout 150 $S $BL -m "$M" -np 4 2>&1 | grep -E "^tg|rror"
      el "   --parallel 4, $S"
    done
  fi
  el "a4. the verification's cost against one decode step"
  for e in "SNUG_NOTHING=0" "SNUG_MVQ_MMA=0 SNUG_MVQ_LANES=4"; do
    echo "== $e"
    env $e timeout 150 $S bench-local --verify --backend cuda -m "$M" -p 256 --reps 3 2>&1 |
      grep -vE "^\s*$" | tail -12
  done
else
  el "b1. test_cuda_ops mmq"
  timeout 150 $D/test_cuda_ops mmq > "$T/mmq.txt" 2>&1
  echo "rc $?"
  grep -E "FAIL|passed|failed|table|dispatch" "$T/mmq.txt" | head -30
  model
  el "b2. profiles: one sequence, then 4 (SNUG_CUDA_RUNS=1)"
  PB="$S $BL -m $M -n 16 --reps 1 --cuda-profile"
  for np in 1 4; do
    SNUG_CUDA_RUNS=1 timeout 150 $PB -np $np > "$T/p.out" 2> "$T/p.err"
    grep -E "^tg" "$T/p.out"
    grep 'cuda profile' "$T/p.err" | head -75
  done
  el "b3. an 8K prompt (q8_0 cache): rate, then profile"
  timeout 120 $S bench-local --backend cuda -m "$M" -p 8192 -n 0 --reps 2 --kv q8_0 2>&1 |
    grep -E "^pp|chunk"
  timeout 120 $S bench-local --backend cuda -m "$M" -p 8192 -n 0 --reps 1 --kv q8_0 \
    --cuda-profile > "$T/pp.out" 2> "$T/pp.err"
  grep -E "^pp" "$T/pp.out"
  grep 'cuda profile' "$T/pp.err" | head -60
  el "b4. bench_cuda_ops mmq"
  timeout 200 $D/bench_cuda_ops mmq 2>&1 | tail -60
  el "b5. ncu of the T = 4 products, q4_K 5120 -> 17408 (first launch of each shape's form)"
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
  # the kernels' order in bench_cuda_ops matvec: shape 0's forms first, 168 launches each
  # (8 warm-up + 20 x 8); k_mmv's T = 4 form comes after its T = 1 and T = 2 forms
  for spec in 'k_mvq<12, 1, 4, 1>:10' 'k_mvq<12, 4, 4, 1>:10' 'k_mvq<12, 4, 4, 4>:10' \
    'k_mmv<12, 4>:346'; do
    [ -n "$NCU" ] || break
    k=${spec%:*}
    skip=${spec##*:}
    echo "== ncu $k (skip $skip)"
    timeout 100 "$NCU" --kernel-name-base demangled --kernel-name "regex:$k" --launch-skip "$skip" \
      --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats \
      --section SchedulerStats --section LaunchStats --section MemoryWorkloadAnalysis \
      $D/bench_cuda_ops matvec > "$T/ncu.txt" 2>&1
    grep -E "k_mvq|k_mmv|Duration|DRAM Throughput|Registers Per|Achieved Occ|Theoretical Occ|Stall|Warp Cycles Per|Issued Warp|No Eligible|Eligible Warps|Active Warps Per|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Waves Per|Block Limit" "$T/ncu.txt" | head -45
  done
fi
el "batch part $PART: done"
