#!/bin/sh
# run_moe_device.sh — the MoE device run: test_cuda_ops (every op incl. the MoE routing and
# grouped expert products against the CPU op), run_e2e_device.sh (both fixtures on the GPU),
# then the 35B-A3B preset (random Q4_K_M weights, made on the device) with a 4K prompt + 64
# tokens on two builds (D/old = before, D/new = after; q8_0 KV, no speculation), a 32K prompt
# on the new one, and a SNUG_CUDA_PROFILE=1 run (per-op device time). Binaries are built here
# with nvcc and -DSNUG_NATIVE=OFF and packed by pack_devcarry.sh into D/new and D/old
# (NOFX=1 for old). Usage on the device: sh tests/device/run_moe_device.sh [D]
export T=${TMPDIR:-/tmp} # scratch files (the prompt, generated models)
D=${1:-devcarry/moe}
O=${OUT:-$T/o}
T0=$(date +%s)
el() { echo "[t+$(($(date +%s) - T0))s] $*"; }
for v in new old; do mkdir -p $D/$v; tar xJf $D/$v/lib.tar.xz -C $D/$v; done
export LD_LIBRARY_PATH="$PWD/$D/new/lib:$LD_LIBRARY_PATH"
el "test_cuda_ops"
$D/new/test_cuda_ops > $O/test_cuda_ops.txt 2>&1; echo "rc=$?"
grep -E "moe|FAIL" $O/test_cuda_ops.txt | head -60; tail -1 $O/test_cuda_ops.txt
el "e2e"
mkdir -p $D/e2e; cp -r $D/new/snug $D/new/lib $D/e2e/ 2>/dev/null; ln -sfn $PWD/$D/new/fx $D/e2e/fx
timeout 200 sh tests/device/run_e2e_device.sh $D/e2e $O/e2e > $O/e2e.txt 2>&1; echo "e2e rc=$?"
grep -E "^==|KL|greedy|FAIL|PASS" $O/e2e.txt | head -50
el "gen 35b"
M=$T/35b.gguf
timeout 300 $D/new/snug gen --preset qwen3.6-35b-a3b --type q4_k_m -o $M 2>&1 | tail -2; ls -la $M
python3 -c "
import random; random.seed(1)
w=[''.join(random.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(random.randint(2,8))) for _ in range(4000)]
open('$T/words.txt','w').write(' '.join(random.choice(w) for _ in range(60000)))"
mk() { python3 - "$D/new/snug" "$M" "$1" "$2" <<'PY'
import os, json, subprocess, sys
s, m, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
words = open(os.path.join(os.environ['T'], 'words.txt')).read().split()
def count(k):
    open(out, 'w').write(' '.join(words[:k]))
    return len(json.loads(subprocess.run([s, 'tokenize', '-m', m, '--file', out], capture_output=True, text=True).stdout))
k = n // 2; c = count(k); k = int(k * n / c) - 4; c = count(k)
print(f"prompt {out}: {c} tokens")
PY
}
mk 4096 $T/p4k.txt; mk 32768 $T/p32k.txt
for v in old new; do
  export LD_LIBRARY_PATH="$PWD/$D/$v/lib"
  el "$v: 4K prompt + 64 tokens, q8_0 KV"
  timeout 120 $D/$v/snug run --backend cuda -m $M --ctx 8192 --kv q8_0 --spec-draft 0 -f $T/p4k.txt -n 64 --temp 0 2>&1 >/dev/null | grep -E "tok/s|error|rror" | head -5
done
export LD_LIBRARY_PATH="$PWD/$D/new/lib"
el "new: 32K prompt + 32 tokens"
timeout 120 $D/new/snug run --backend cuda -m $M --ctx 40000 --kv q8_0 --spec-draft 0 -f $T/p32k.txt -n 32 --temp 0 2>&1 >/dev/null | grep -E "tok/s|error|rror" | head -5
el "new: profile, 4K prompt + 16 tokens"
SNUG_CUDA_PROFILE=1 timeout 120 $D/new/snug run --backend cuda -m $M --ctx 8192 --kv q8_0 --spec-draft 0 -f $T/p4k.txt -n 16 --temp 0 2>&1 >/dev/null | tail -40
el "done"
