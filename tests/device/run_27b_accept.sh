#!/bin/sh
# run_27b_accept.sh — the acceptance run for qwen3.6-27b (random Q4_K_M weights) on the
# GPU under a 23.5 GiB device budget at the full native context:
#   snug gen --preset qwen3.6-27b --type q4_k_m (on the device's local disk, once per machine);
#   snug plan ... --budget 23.5GiB --ctx 262144 --backend cuda --kv KV (the plan's device total);
#   optionally bench_cuda_ops (the ceilings: copy bandwidth, cuBLAS bf16 rate), CEIL=1;
#   per prompt size N: `snug run --backend cuda --vram-budget 23.5GiB --ctx 262144 --kv KV
#   -f prompt(N tokens) -n G --temp 0` (prompt tok/s = time to first token, decode tok/s at N
#   cached tokens, cudaMemGetInfo after load / prompt / generation), while nvidia-smi samples
#   the device's used memory every 100 ms: the peak is printed next to the plan's total.
# Not in ctest (needs a GPU). `snug` (+ bench_cuda_ops) are built off-device with nvcc present
# and -DSNUG_NATIVE=OFF and carried: D/snug, D/bench_cuda_ops, D/lib.tar.xz (ldd minus libc and
# CUDA). Results go in docs/perf/cuda.md.
# Usage on the device: KV=tq4 (or KVARGS="--kv-k q8_0 --kv-v tq4") G=32 CEIL=1 sh tests/device/run_27b_accept.sh D OUTDIR 4096 8192 ...
export T=${TMPDIR:-/tmp} # scratch files (the prompt, generated models)
D=${1:-devcarry}
O=${2:-${OUT:-$T/27b}}
shift 2 2>/dev/null
SIZES=${*:-4096 8192}
KV=${KV:-tq4}
KVARGS=${KVARGS:---kv $KV} # or e.g. "--kv-k q8_0 --kv-v tq4"
G=${G:-32}
CTX=${CTX:-262144}
BUDGET=${BUDGET:-23.5GiB}
M=$T/27b.gguf
mkdir -p "$O"
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib:$LD_LIBRARY_PATH"
S="$D/snug"
T0=$(date +%s)
el() { echo "[t+$(($(date +%s) - T0))s] $*"; }
el "gen"
[ -f $M ] || timeout 300 $S gen --preset qwen3.6-27b --type q4_k_m -o $M || echo "gen failed rc=$?"
ls -la $M
el "plan $KVARGS --ctx $CTX --budget $BUDGET"
timeout 60 $S plan -m $M --budget $BUDGET --ctx $CTX --backend cuda $KVARGS | tee $O/plan.txt
if [ "${CEIL:-0}" = 1 ]; then
  el "ceilings: bench_cuda_ops"
  timeout 150 $D/bench_cuda_ops 2>&1 | tee $O/bench_cuda_ops.txt | tail -n 40
fi
# a random-word prompt cut to the target token count (tokenized with the model's tokenizer)
python3 -c "
import random; random.seed(1)
w=[''.join(random.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(random.randint(2,8))) for _ in range(4000)]
open('$T/words.txt','w').write(' '.join(random.choice(w) for _ in range(240000)))"
base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
echo "device memory used before any snug process: $base MiB"
for n in $SIZES; do
  python3 - "$S" "$M" "$n" <<'PY'
import os, json, subprocess, sys
s, m, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
words = open(os.path.join(os.environ['T'], 'words.txt')).read().split()
def count(k):
    open(os.path.join(os.environ['T'], 'p.txt'), 'w').write(' '.join(words[:k]))
    out = subprocess.run([s, 'tokenize', '-m', m, '--file', os.path.join(os.environ['T'], 'p.txt')], capture_output=True,
                         text=True).stdout
    return len(json.loads(out))
k = n // 2
c = count(k)
k = int(k * n / c) - 8
c = count(k)
while c > n - 4:
    k -= 16
    c = count(k)
print('prompt file: %d words, %d tokens' % (k, c))
PY
  el "run: prompt ~$n tokens, $KVARGS, ctx $CTX, budget $BUDGET"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > $O/smi_$n.txt &
  SMI=$!
  timeout ${RUN_TIMEOUT:-400} $S run --backend cuda --vram-budget $BUDGET --ctx $CTX $KVARGS \
    -m $M -f $T/p.txt -n $G --temp 0 > $O/run_$n.out 2> $O/run_$n.err
  echo "rc=$?"
  kill $SMI 2>/dev/null
  grep -E "cuda:|snug run:|plan|error|rror" $O/run_$n.err | tail -n 12
  peak=$(sort -n $O/smi_$n.txt | tail -1)
  echo "peak device memory used (nvidia-smi, 100 ms samples): $peak MiB; minus the $base MiB" \
    "used before: $((peak - base)) MiB"
done
el "done"
