#!/bin/sh
# run_mmq_device.sh — the prompt products on int8 tensor cores (src/backend/cuda/cuda_mmq.cu) on
# a GPU, in one call:
#   1. `test_cuda_ops mmq`: the kernel against the exact product and the CPU's int8 product on odd
#      shapes and the 27B's full FFN shapes (sampled); the bf16 path when switched off.
#   2. `bench_cuda_ops mmq`: int8 kernel vs bf16 dequantise + cuBLAS at the 27B's shapes (T 512,
#      2048) and three of the 35B-A3B's (T 512), with the copy and cuBLAS ceilings of the run.
#   3. The model: tests/data/llamacpp/trained-q4_k_m.gguf (llama.cpp's Q4_K_M of the trained
#      fixture) through `snug logits --backend cuda` on the prompt path. In this tiny model the
#      kernel runs the DeltaNet qkv products (640 rows, q4_K and q6_K) and the output (2048 rows,
#      q6_K); every other product has <= 512 rows and keeps f32 activations. Gate: median KL to
#      the reference logits within 1.1x of llama.cpp's own on this file (2.015e-2,
#      tests/py/test_quantized.py), as for the CPU. For information: the same with the kernel off
#      (SNUG_CUDA_MMQ=0) and the GPU against the CPU backend on the same file. The kernel runs
#      here for every product it can take (SNUG_CUDA_MMQ=2), whatever its default table says.
# Carry (built here, an sm_90a-only build; pack_devcarry.sh):
#   NOFX=1 sh tests/device/pack_devcarry.sh BUILD devcarry/mmq
#   mkdir -p devcarry/mmq/fx/trained && cp $SNUG_FIXTURES/trained/{ids.json,logits.f32} devcarry/mmq/fx/trained/
# Usage on the device: sh tests/device/run_mmq_device.sh devcarry/mmq $OUT
# Success: every check line says PASS and the last line is "run_mmq_device: PASS".
T=${TMPDIR:-/tmp} # scratch files
D=${1:-devcarry/mmq}
O=${2:-${OUT:-$T/mmq}}
mkdir -p "$O"
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib:$LD_LIBRARY_PATH"
fail=0
echo "== test_cuda_ops mmq"
timeout 200 "$D/test_cuda_ops" mmq > "$O/test_mmq.log" 2>&1 || fail=1
grep -E "^(device|seed)|FAIL|passed" "$O/test_mmq.log"
echo "== bench_cuda_ops mmq"
timeout 200 "$D/bench_cuda_ops" mmq > "$O/bench_mmq.log" 2>&1 || fail=1
cat "$O/bench_mmq.log"
F=$D/fx/trained
M=tests/data/llamacpp/trained-q4_k_m.gguf
if [ -f "$F/ids.json" ] && [ -f "$F/logits.f32" ]; then
  echo "== model: $M, prompt path (chunk 512)"
  SNUG_CUDA_MMQ=2 "$D/snug" logits --backend cuda -m $M --ids "$F/ids.json" -o "$O/q4km_mmq.f32" || fail=1
  SNUG_CUDA_MMQ=0 "$D/snug" logits --backend cuda -m $M --ids "$F/ids.json" -o "$O/q4km_bf16.f32" || fail=1
  "$D/snug" logits -m $M --ids "$F/ids.json" -o "$O/q4km_cpu.f32" || fail=1
  python3 - "$O" "$F/logits.f32" <<'PY' || fail=1
import sys
import numpy as np
o, ref_path = sys.argv[1], sys.argv[2]
def load(p):
    return np.fromfile(p, dtype=np.float32).reshape(-1, 2048).astype(np.float64)
def lsm(x):
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))
def kl(p, q):
    lp, lq = lsm(p), lsm(q)
    return float(np.median((np.exp(lp) * (lp - lq)).sum(axis=1)))
ref, mmq, bf, cpu = (load(p) for p in (ref_path, o + "/q4km_mmq.f32", o + "/q4km_bf16.f32",
                                        o + "/q4km_cpu.f32"))
bound = 1.1 * 2.015e-2
k = kl(ref, mmq)
print(f"GPU int8 kernel: median KL to the reference {k:.4e} (bound {bound:.4e}): "
      f"{'PASS' if k <= bound else 'FAIL'}")
print(f"(info) GPU bf16 path {kl(ref, bf):.4e}, CPU {kl(ref, cpu):.4e} to the reference; "
      f"GPU int8 vs CPU {kl(cpu, mmq):.4e}, GPU bf16 vs CPU {kl(cpu, bf):.4e}, "
      f"GPU int8 vs GPU bf16 {kl(bf, mmq):.4e}")
sys.exit(0 if k <= bound else 1)
PY
else
  echo "== model check skipped: no $F/ids.json and logits.f32 in the carry"; fail=1
fi
echo "run_mmq_device: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
