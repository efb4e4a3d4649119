#!/bin/sh
# run_serve_device.sh — the device acceptance run for `snug serve --backend cuda` (not in
# ctest: needs a GPU). Carried like run_e2e_device.sh (tests/device/pack_devcarry.sh: D/lib.tar.xz
# with snug + libsnug_cuda.so + shared libraries, D/fx/trained), plus bench/server_gpu.py.
#   1. trained fixture, --slots 4: greedy 16 tokens of CPU serve == CUDA serve, plain and
#      streamed, with --spec-draft 0 and 3 (MTP speculation on the GPU);
#   2. qwen3.6-27b Q4_K_M (snug gen on the device's disk), --vram-budget 23.5GiB --slots 4:
#      aggregate tok/s of 4 requests vs 1; inter-token latency p50/p99 of 3 streams while idle
#      and while a 4th request prefills about 32K tokens (with the default --step-prompt 512,
#      then 128: the streams' decode rows share each step with a prompt chunk, snug_step).
# Usage on the device: sh tests/device/run_serve_device.sh D [OUTDIR]   (SKIP27=1: fixture only)
export T=${TMPDIR:-/tmp} # scratch files (the prompt, generated models)
D=${1:-devcarry/engine}
O=${2:-${OUT:-$T/serve}}
mkdir -p "$O"
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib:$LD_LIBRARY_PATH"
S="$PWD/$D/snug"
B=${BENCH:-bench/server_gpu.py}
[ -f "$B" ] || B="$D/server_gpu.py"
T0=$(date +%s)
el() { echo "[t+$(($(date +%s) - T0))s] $*"; }
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
for k in 0 3; do
  el "trained fixture, --slots 4, --spec-draft $k: CPU vs CUDA greedy"
  timeout 120 python3 "$B" "$S" "$D/fx/trained/trained-f16.gguf" --slots 4 --spec-draft $k \
    --compare --tokens 32 --skip-itl 2>&1 | tee "$O/trained_spec$k.txt"
done
[ "${SKIP27:-0}" = 1 ] && exit 0
M=$T/27b.gguf
el "gen 27b"
[ -f $M ] || timeout 200 "$S" gen --preset qwen3.6-27b --type q4_k_m -o $M
el "27b serve --backend cuda --vram-budget 23.5GiB --slots 4"
timeout ${T27:-300} python3 "$B" "$S" $M --slots 4 --ctx 40960 --kv q8_0 --vram-budget 23.5GiB \
  --tokens ${G:-64} --prefill 32768 2>&1 | tee "$O/27b.txt"
el "27b: the same with --step-prompt 128 (the prefill's chunk beside the streams' decode rows)"
timeout ${T27:-300} python3 "$B" "$S" $M --slots 4 --ctx 40960 --kv q8_0 --vram-budget 23.5GiB \
  --tokens ${G:-64} --prefill 32768 --skip-throughput --step-prompt 128 2>&1 |
  tee "$O/27b_step128.txt"
el done
