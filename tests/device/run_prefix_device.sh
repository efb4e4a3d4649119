#!/bin/sh
# run_prefix_device.sh — the prefix cache and the slots of `snug serve --backend cuda` on a GPU
# (not in ctest: needs one). Carried like run_serve_device.sh (tests/device/pack_devcarry.sh:
# D/lib.tar.xz with snug, libsnug_cuda.so, test_prefix_mtp and the shared libraries; D/fx/trained;
# D/fx/tokenizer/ggml-vocab-qwen35.gguf); the scripts come from the working tree
# (tests/device/prefix_device.py, bench/server_gpu.py, tests/data/agent_replay/sample.json).
#   a. trained fixture: the 10-turn agent replay on CPU serve (no cache), CUDA serve without the
#      cache, CUDA serve with the default cache and a disk tier, and that server restarted:
#      greedy outputs equal (cache on = cache off on the device; CUDA = CPU), every turn after
#      the first reusing the cache, the restart reusing the disk; and `test_prefix_mtp cuda`
#      (checkpoints of device contexts with MTP: restored caches byte-equal a cold prefill's).
#   b. qwen3.6-27b Q4_K_M of random weights with the real Qwen vocabulary (`snug gen --vocab-from`,
#      on the device's disk), --vram-budget 23.5GiB --ctx 131072 --kv q8_0, one slot: an agent
#      conversation of HIST (default 100000) history tokens; time to first token of turn N
#      against the cold prefill of the same prompt (<= 10%), and after a restart on the disk
#      tier (<= 25%). COLD=1 measures the cold prefill on a server without the cache (one more
#      100K prefill, about 70 s); else it is turn N-1's cold prefill scaled to turn N's length.
#   c. the same model, 4 slots (--ctx 36864 --kv tq4): aggregate decode tokens/s of 4 requests vs
#      1 (>= 3x), inter-token latency p99 of 3 streams while a 32K prompt prefills vs their idle
#      p99 (<= 2x), with the default cache on (bench/server_gpu.py).
# Prints a PASS/FAIL table at the end (OUTDIR/results.txt). About 4-5 minutes of device time
# (a: ~30 s; the 27B file ~30 s; b: ~160 s; c: ~60 s); SKIP27=1 runs part a alone; PARTS
# (default abc) picks parts, e.g. PARTS=c (the 27B file is made for b or c).
# Usage on the device: sh tests/device/run_prefix_device.sh D [OUTDIR]
T=${TMPDIR:-/tmp} # scratch files
D=${1:-devcarry/prefix}
O=${2:-${OUT:-$T/prefix}}
mkdir -p "$O"
: > "$O/results.txt"
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib:$LD_LIBRARY_PATH"
S="$PWD/$D/snug"
T0=$(date +%s)
el() { echo "[t+$(($(date +%s) - T0))s] $*"; }
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
free -g | head -2

PARTS=${PARTS:-abc}
case $PARTS in *a*) ;; *) SKIPA=1 ;; esac
[ "${SKIPA:-0}" = 1 ] || {
  el "a: trained fixture, agent replay: CPU / CUDA without the cache / CUDA with it / restarted"
  timeout 180 python3 tests/device/prefix_device.py trained "$S" "$O" \
    "$PWD/$D/fx/trained/trained-f16.gguf" > "$O/a.txt" 2>&1 || echo "part a: rc=$?"
  grep -E "RESULT|cached per turn|Error|rror:" "$O/a.txt"
}
if [ "${SKIPA:-0}" != 1 ] && [ -x "$D/test_prefix_mtp" ]; then
  el "a: test_prefix_mtp cuda (device checkpoints with MTP: restored = cold, byte for byte)"
  SNUG_FIXTURES="$PWD/$D/fx" timeout 120 "$D/test_prefix_mtp" cuda > "$O/test_prefix_mtp.txt" 2>&1
  rc=$?
  tail -3 "$O/test_prefix_mtp.txt"
  echo "a test_prefix_mtp_cuda rc=$rc rc=0 $([ $rc = 0 ] && echo PASS || echo FAIL)" >> "$O/results.txt"
fi

if [ "${SKIP27:-0}" != 1 ]; then
  M=$T/27b-qwenvocab.gguf
  el "gen qwen3.6-27b q4_k_m with the Qwen vocabulary"
  [ -f $M ] || timeout 240 "$S" gen --preset qwen3.6-27b --type q4_k_m \
    --vocab-from "$D/fx/tokenizer/ggml-vocab-qwen35.gguf" -o $M || echo "gen failed rc=$?"
  ls -la $M
  case $PARTS in *b*)
    el "b: agent conversation, ${HIST:-100000} history tokens"
    CA=""
    [ "${COLD:-0}" = 1 ] && CA=--cold
    timeout ${TB:-420} python3 tests/device/prefix_device.py agent27b "$S" "$O" $M \
      --hist "${HIST:-100000}" $CA > "$O/b.txt" 2>&1 || echo "part b: rc=$?"
    grep -E "RESULT|^  [ABC]|cold prefill|rror" "$O/b.txt"
    ;;
  esac
  case $PARTS in *c*) ;; *) SKIPC=1 ;; esac
fi
if [ "${SKIP27:-0}" != 1 ] && [ "${SKIPC:-0}" != 1 ]; then
  el "c: 4 slots: aggregate decode, inter-token latency under a 32K prefill"
  timeout ${TC:-300} python3 bench/server_gpu.py "$S" $M --slots 4 --ctx 36864 --kv tq4 \
    --vram-budget 23.5GiB --tokens 64 --prefill 32768 > "$O/c.txt" 2>&1 || echo "part c: rc=$?"
  grep -E "throughput|inter-token|refused" "$O/c.txt"
  python3 - "$O" <<'PY'
import re, sys
out = sys.argv[1]
txt = open(f"{out}/c.txt").read()
lines = []
m = re.search(r"ratio ([0-9.]+)x", txt)
r = float(m.group(1)) if m else 0.0
lines.append(f"c aggregate_4/1 {r:.2f}x >=3x {'PASS' if r >= 3 else 'FAIL'}")
m = re.search(r"idle p50 [0-9.]+ ms p99 ([0-9.]+) ms .*during a (\S+)-token prefill p50 "
              r"[0-9.]+ ms p99 ([0-9.]+) ms", txt)
if m:
    idle, n, busy = float(m.group(1)), m.group(2), float(m.group(3))
    q = busy / idle if idle else 99
    lines.append(f"c itl_p99_prefill/idle({n}tok) {q:.2f}({busy:.1f}/{idle:.1f}ms) <=2x "
                 f"{'PASS' if q <= 2 else 'FAIL'}")
else:
    lines.append("c itl_p99_prefill/idle missing <=2x FAIL")
open(f"{out}/results.txt", "a").write("".join(l + "\n" for l in lines))
PY
fi

el "done"
echo "==== PASS/FAIL ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)) ===="
awk '{printf "%-4s %-44s %-44s %-16s %s\n", $1, $2, $3, $4, $5}' "$O/results.txt"
grep -q FAIL "$O/results.txt" && echo "SOME FAILED" || echo "ALL PASS"
