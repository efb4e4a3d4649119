#!/bin/sh
# run_27b_device.sh — qwen3.6-27b (random Q4_K_M weights) acceptance measurements on the GPU:
# gen the model on the device's local disk, `snug plan --backend cuda` at 23.5 GiB per KV
# format, the two ceilings (bench_cuda_ops: copy bandwidth, cuBLAS bf16 rate), then
# `snug run --backend cuda` at 8K / 32K / 128K prompt tokens (prompt and decode tok/s,
# cudaMemGetInfo lines). Not in ctest (needs a GPU). Results go in docs/perf/cuda.md.
# `snug` and bench_cuda_ops are built here (cmake -DSNUG_NATIVE=OFF, nvcc present) and carried:
#   D/snug, D/bench_cuda_ops, D/lib.tar.xz (ldd minus libc/CUDA), D = devcarry/c3.
# Usage on the device: sh tests/device/run_27b_device.sh [D] [outdir] [sizes...]
D=${1:-devcarry/c3}
O=${2:-${OUT:-/tmp/27b}}
shift 2 2>/dev/null
SIZES=${*:-8192 32768 131072}
M=/tmp/27b.gguf
mkdir -p "$O"
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib:$LD_LIBRARY_PATH"
S="$D/snug"
T0=$(date +%s)
el() { echo "[t+$(($(date +%s) - T0))s] $*"; }
mem() { nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader; }
el "gen"
[ -f $M ] || timeout 300 $S gen --preset qwen3.6-27b --type q4_k_m -o $M || echo "gen failed rc=$?"
ls -la $M
el "plan"
for kv in f16 f32 bf16 q8_0 fp8 tq4 tq3; do
  echo "== plan --kv $kv =="
  timeout 60 $S plan --preset qwen3.6-27b --weights q4_k_m --budget 23.5GiB --ctx max \
    --backend cuda --kv $kv --json
done
el "ceilings: bench_cuda_ops"
timeout 120 $D/bench_cuda_ops 2>&1 | tee $O/bench_cuda_ops.txt
# a random-word prompt: count tokens once per words, then cut to the target count
python3 -c "
import random; random.seed(1)
w=[''.join(random.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(random.randint(2,8))) for _ in range(4000)]
open('/tmp/words.txt','w').write(' '.join(random.choice(w) for _ in range(150000)))"
for n in $SIZES; do
  python3 - "$S" "$M" "$n" <<'PY'
import json, subprocess, sys
s, m, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
words = open('/tmp/words.txt').read().split()
def count(k):
    open('/tmp/p.txt', 'w').write(' '.join(words[:k]))
    out = subprocess.run([s, 'tokenize', '-m', m, '--file', '/tmp/p.txt'], capture_output=True, text=True).stdout
    return len(json.loads(out))
k = n // 2
c = count(k)
k = int(k * n / c) - 8
c = count(k)
while c > n - 4:
    k -= 16; c = count(k)
print('prompt file: %d words, %d tokens' % (k, c))
PY
  el "run prompt ~$n tokens"
  mem
  timeout 240 $S run --backend cuda -m $M -f /tmp/p.txt -n 64 --temp 0 2>&1 | tail -n 25
  mem
done
el "done"
