#!/bin/sh
# run_checks_device.sh — the GPU's correctness checks in one device call, most telling first,
# each part under its own time limit, stopping before the call's limit (BUDGET seconds, default
# 540): 1. `test_cuda_ops attention` (every cache format pair and shape under each decode
# kernel, and the prompt kernel), then `test_cuda_ops delta` (the recurrence and the chunked
# prompt form against the CPU); 2. `test_mtp_device` on the trained fixture and on a generated
# MoE with an MTP block (MTP logits against the reference, speculative greedy == plain greedy on
# the GPU for both); 3. run_e2e_device.sh (the fixtures against the reference logits, every KV
# format against the CPU backend); 4. `test_cuda_ops decode`, `step`, `moe`, `route` while time
# is left. Each part prints "check NAME: PASS|FAIL|SKIPPED (no time left)" and the script ends
# with "device checks: PASS|FAIL" (FAIL when any part that ran failed). SKIP="attention ops_moe"
# leaves those parts out.
# Not in ctest (needs a GPU). Carry: D/lib.tar.xz from tests/device/pack_devcarry.sh (BINS="snug
# libsnug_cuda.so test_cuda_ops test_mtp_device"), D/fx/{trained,moe} with the fixture files.
# Usage on the device, from the repository root: sh tests/device/run_checks_device.sh [D] [OUT]
T=${TMPDIR:-/tmp}
D=${1:-devcarry}
O=${2:-${OUT:-$T/checks}}
BUDGET=${BUDGET:-540}
case $D in /*) ;; *) D=$PWD/$D ;; esac
mkdir -p "$O"
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}"
T0=$(date +%s)
fail=0
left() { echo $((BUDGET - ($(date +%s) - T0))); }
# part NAME LIMIT COMMAND...: runs COMMAND under min(LIMIT, time left) into OUT/NAME.txt
part() {
  name=$1 lim=$2
  shift 2
  case " ${SKIP:-} " in *" $name "*)
    echo "check $name: SKIPPED (SKIP)"
    return
    ;;
  esac
  l=$(left)
  [ "$l" -lt "$lim" ] && lim=$l
  if [ "$lim" -lt 20 ]; then
    echo "check $name: SKIPPED (no time left)"
    return
  fi
  t=$(date +%s)
  timeout "$lim" "$@" > "$O/$name.txt" 2>&1
  rc=$?
  grep -E "FAIL|passed, [0-9]+ failed|identical|KL median" "$O/$name.txt" | grep -v " 0 failed" | head -12
  if [ $rc = 0 ]; then r=PASS; else r="FAIL (rc $rc$([ $rc = 124 ] && echo ", cut by the time limit"))"; fail=1; fi
  echo "check $name: $r ($(($(date +%s) - t)) s)"
}

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
part attention 220 "$D/test_cuda_ops" attention
part ops_delta 120 "$D/test_cuda_ops" delta
timeout 60 "$D/snug" gen --preset demo-moe --type f16 --set nextn_predict_layers=1 \
  -o "$T/moe_mtp.gguf" > "$O/gen.txt" 2>&1 || echo "(the MoE with MTP could not be generated)"
part mtp 200 "$D/test_mtp_device" "$D/fx" "$T/moe_mtp.gguf"
part e2e 150 sh tests/device/run_e2e_device.sh "$D" "$O/e2e"
for k in decode step moe route; do
  part "ops_$k" 200 "$D/test_cuda_ops" "$k"
done
echo "device checks: $([ $fail = 0 ] && echo PASS || echo FAIL) ($(($(date +%s) - T0)) s)"
exit $fail
