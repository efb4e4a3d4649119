#!/bin/sh
# run_vision_27b_device.sh — the vision device acceptance run (not in ctest: needs a GPU): the
# qwen3.6-27b preset (random Q4_K_M weights) with a random-weight vision tower of the released
# size (`snug gen --mmproj-preset qwen3.5`: 27 blocks, width 1152, projecting to 5120; 0.93 GB
# f16), `--vram-budget 23.5GiB`:
#   1. snug gen: the text model (--vocab-from VOCAB --add-vision-tokens: the vision tokens an
#      image prompt needs) and the mmproj for its width, both on the device's local disk;
#   2. snug plan -m M --mmproj F --vram-budget 23.5GiB --backend cuda --kv auto $VB --json: the
#      context it sizes with the tower ("with vision") and its KV choice;
#   3. snug serve --backend cuda --vram-budget 23.5GiB --mmproj F --ctx <that context> <its KV>
#      --spec-draft 0 $VB, while nvidia-smi samples the GPU's used memory every 0.2 s from before
#      the server starts to after it exits;
#   4. tests/device/vision_27b_client.py: one chat with a 1024 x 1024 PNG (base64 data: URL) and
#      random words sized by the server's tokenizer to ~100,000 prompt tokens, max_tokens 16,
#      temperature 0: prompt_tokens, wall time, the answer.
# PASS when the chat answers with prompt_tokens >= 100,000 and the nvidia-smi peak (minus the
# memory used before the server started) is at most the server's boot plan "total on the gpu" —
# the plan carries the CUDA context and cuBLAS workspace as estimated items, so the measured peak
# is compared with the total as it is, as run_27b_accept.sh and docs/perf/cuda.md do.
# Last line: "run_vision_27b_device: PASS" or "run_vision_27b_device: FAIL".
#
# Carry: tests/device/pack_devcarry.sh BUILD D (snug + libsnug_cuda.so + shared libraries in
# D/lib.tar.xz; NOFX=1 is enough) and the vocabulary GGUF (any byte-level BPE GGUF; the Qwen one).
# Usage on the device:
#   [VB="--vision-backend cuda"] sh tests/device/run_vision_27b_device.sh D OUTDIR VOCAB.gguf
# Environment (defaults for the device run): VB (passed to plan and serve as is; empty = the
# tower on the CPU), BACKEND=cuda, BUDGET=23.5GiB, PRESET=qwen3.6-27b, TYPE=q4_k_m,
# KVARGS="--kv auto", TARGET=100000 (prompt tokens), SIDE=1024 (image side), PORT=18093,
# MMPROJ_SET (extra `--set k=v` for the mmproj, e.g. a small tower for a CPU rehearsal),
# TEXT_SET (extra `--set k=v` for the text model), LIMIT=570 (seconds the whole script may take:
# the chat's timeout is what is left of it), WORK=$T/vision27b (the generated files).
# A CPU rehearsal (no GPU, no nvidia-smi; the memory check is skipped):
#   BACKEND=cpu BUDGET=8GiB PRESET=demo TYPE=q8_0 TARGET=3000 MMPROJ_SET="--set block_count=2
#   --set embedding_length=64 --set feed_forward_length=128 --set attention.head_count=4"
#   sh tests/device/run_vision_27b_device.sh build-dir-with-snug OUT VOCAB.gguf
# and its CUDA paths with the test stand-in module (tests/support/fake_device.c) and any script
# named nvidia-smi on PATH printing a number: the same with BACKEND=cuda
# SNUG_CUDA_LIB=build/libsnug_fakedev.so.
export T=${TMPDIR:-/tmp} # scratch files (the prompt, generated models)
D=${1:-devcarry}
O=${2:-${OUT:-$T/vision27b-out}}
VOCAB=${3:?usage: run_vision_27b_device.sh D OUTDIR VOCAB.gguf}
BACKEND=${BACKEND:-cuda}
BUDGET=${BUDGET:-23.5GiB}
PRESET=${PRESET:-qwen3.6-27b}
TYPE=${TYPE:-q4_k_m}
KVARGS=${KVARGS:---kv auto}
TARGET=${TARGET:-100000}
SIDE=${SIDE:-1024}
PORT=${PORT:-18093}
LIMIT=${LIMIT:-570}
WORK=${WORK:-$T/vision27b}
mkdir -p "$O" "$WORK"
O=$(cd "$O" && pwd)
if [ -f "$D/lib.tar.xz" ]; then
  [ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
  export LD_LIBRARY_PATH="$PWD/$D/lib:$LD_LIBRARY_PATH"
fi
S="$PWD/$D/snug"
[ -x "$S" ] || S="$D/snug"
HERE=$(cd "$(dirname "$0")" && pwd)
T0=$(date +%s)
el() { echo "[t+$(($(date +%s) - T0))s $(date -u +%H:%M:%S)] $*"; }
fail=0
if [ "$BACKEND" = cuda ]; then BFLAG=--vram-budget; else BFLAG=--budget; fi
M="$WORK/text-$PRESET-$TYPE.gguf"
F="$WORK/mmproj-$PRESET.gguf"

el "gen: $PRESET $TYPE with the vocabulary of $VOCAB (+ vision tokens)"
# shellcheck disable=SC2086
timeout 300 "$S" gen --preset "$PRESET" --type "$TYPE" --vocab-from "$VOCAB" --add-vision-tokens \
  $TEXT_SET -o "$M" 2> "$O/gen_text.err" || { el "FAIL: gen text (rc $?)"; tail -3 "$O/gen_text.err"; fail=1; }
ls -l "$M"
el "gen: the vision tower for its width (--mmproj-preset qwen3.5 $MMPROJ_SET)"
# shellcheck disable=SC2086
timeout 120 "$S" gen --mmproj-preset qwen3.5 --text-model "$M" $MMPROJ_SET -o "$F" \
  2> "$O/gen_mmproj.err" || { el "FAIL: gen mmproj (rc $?)"; tail -3 "$O/gen_mmproj.err"; fail=1; }
ls -l "$F"
[ $fail = 0 ] || { echo "run_vision_27b_device: FAIL"; exit 1; }

CTXARG=
case "$KVARGS" in *auto*) ;; *) CTXARG="--ctx max" ;; esac
el "plan: -m M --mmproj F $BFLAG $BUDGET --backend $BACKEND $KVARGS $CTXARG $VB"
# shellcheck disable=SC2086
"$S" plan -m "$M" --mmproj "$F" $BFLAG "$BUDGET" --backend "$BACKEND" $KVARGS $CTXARG $VB \
  > "$O/plan.txt" 2>&1
# shellcheck disable=SC2086
"$S" plan -m "$M" --mmproj "$F" $BFLAG "$BUDGET" --backend "$BACKEND" $KVARGS $CTXARG $VB --json \
  > "$O/plan.json" 2> "$O/plan_json.err"
cat "$O/plan.txt"
# the context and KV the plan chose, as serve flags: "CTX|KV FLAGS|TOTAL BYTES"
SERVE_PLAN=$(python3 - "$O/plan.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
k = j["kv"]
kv = f"--kv-k {k.split('/')[0]} --kv-v {k.split('/')[1]}" if "/" in k else f"--kv {k}"
print(f"{j['ctx']}|{kv}|{j['total_bytes']}")
PY
) || { el "FAIL: no plan"; cat "$O/plan_json.err"; echo "run_vision_27b_device: FAIL"; exit 1; }
CTX=$(echo "$SERVE_PLAN" | cut -d'|' -f1)
KVFLAGS=$(echo "$SERVE_PLAN" | cut -d'|' -f2)
PLAN_TOTAL=$(echo "$SERVE_PLAN" | cut -d'|' -f3)
el "plan with vision: ctx $CTX, $KVFLAGS, $PLAN_TOTAL bytes ($((PLAN_TOTAL / 1048576)) MiB)"

SMI=
if [ "$BACKEND" = cuda ] && command -v nvidia-smi > /dev/null; then
  BASE=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  el "device memory used before the server: $BASE MiB"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$O/smi.txt" &
  SMI=$!
fi
el "serve: --backend $BACKEND $BFLAG $BUDGET --mmproj F --ctx $CTX $KVFLAGS --spec-draft 0 $VB"
# shellcheck disable=SC2086
"$S" serve -m "$M" --mmproj "$F" --backend "$BACKEND" $BFLAG "$BUDGET" --ctx "$CTX" $KVFLAGS \
  --spec-draft 0 --slots 1 --port "$PORT" $VB > "$O/serve.out" 2> "$O/serve.err" &
SERVE=$!
LEFT=$((LIMIT - ($(date +%s) - T0)))
python3 "$HERE/vision_27b_client.py" "http://127.0.0.1:$PORT" "$O" --target "$TARGET" \
  --side "$SIDE" --health-timeout 240 --pid "$SERVE" --timeout $((LEFT > 90 ? LEFT - 60 : 30)) || fail=1
el "client done; stopping the server"
kill "$SERVE" 2> /dev/null
i=0
while kill -0 "$SERVE" 2> /dev/null && [ $i -lt 40 ]; do sleep 0.25; i=$((i + 1)); done
kill -9 "$SERVE" 2> /dev/null
[ -n "$SMI" ] && { sleep 0.5; kill "$SMI" 2> /dev/null; }
grep -E "plan:|vision|total|budget|model |slot\(s\)|memory:|error|rror|POST" "$O/serve.err" | head -n 60

# the server's boot plan: "total on the gpu" (cuda) or "total" (cpu), in bytes
SRV_TOTAL=$(awk '$1 == "total" && $2 == "on" {print $5; exit} $1 == "total" && $2 ~ /^[0-9]+$/ {print $2; exit}' "$O/serve.err")
el "server boot plan total: ${SRV_TOTAL:-?} bytes${SRV_TOTAL:+ ($((SRV_TOTAL / 1048576)) MiB)}; snug plan: $PLAN_TOTAL bytes"
python3 - "$O/chat.json" <<'PY' || true
import json, sys
j = json.load(open(sys.argv[1]))
u = j.get("usage", {})
print(f"chat: answered {j.get('answered')}, prompt_tokens {u.get('prompt_tokens')}, wall "
      f"{j.get('wall_s')} s, answer {j.get('answer')!r}, reasoning {j.get('reasoning')!r}, "
      f"finish {j.get('finish_reason')}")
PY
if [ -n "$SMI" ]; then
  PEAK=$(sort -n "$O/smi.txt" | tail -1)
  USED=$((PEAK - BASE))
  PLAN_MIB=$(( ${SRV_TOTAL:-0} / 1048576 ))
  echo "nvidia-smi peak $PEAK MiB ($USED MiB over the $BASE MiB used before), $(wc -l < "$O/smi.txt") samples; server plan total on the gpu $PLAN_MIB MiB"
  if [ -n "$SRV_TOTAL" ] && [ "$USED" -le "$PLAN_MIB" ]; then
    echo "PASS: peak $USED MiB <= plan $PLAN_MIB MiB"
  else
    echo "FAIL: peak $USED MiB > plan $PLAN_MIB MiB (or no plan total in serve.err)"; fail=1
  fi
else
  echo "(no GPU memory check: BACKEND=$BACKEND or no nvidia-smi)"
fi
el "done"
[ $fail = 0 ] && echo "run_vision_27b_device: PASS" || echo "run_vision_27b_device: FAIL"
exit $fail
