#!/bin/sh
# run_27b_quant_speed.sh — the low-bit speed line on the device: the qwen3.6-27b preset as IQ4_XS
# next to Q4_K_M, prompt and decode tokens/s on the GPU.
#   snug gen --preset $PRESET --type q4_k_m / iq4_xs (random weights, on the device's local
#   disk; gen quantizes 32 rows per tensor and draws the rest from those blocks: q4_k_m took
#   26.9 s on the device (docs/perf/cuda.md), the 14.4 GiB iq4_xs file
#   is written the same way);
#   then, interleaved (A B A B ...) so drift hits both alike, per file and round:
#   `snug run --backend cuda --ctx CTX --kv q8_0 -f prompt -n G --temp 0` (the same random-word
#   prompt for both: same vocabulary) and its summary line (prompt tok/s, generation tok/s).
# Prints a table: per type the file size, the best and median prompt/decode tok/s over the
# rounds, and the IQ4_XS / Q4_K_M ratios. Fits in ~5 minutes (gen ~1 min, 2 x ROUNDS runs of a
# 15 GiB load + PROMPT tokens + G decoded tokens).
# Not in ctest (needs a GPU). Carry: D/lib.tar.xz from pack_devcarry.sh (snug and
# libsnug_cuda.so). Results go in docs/perf/cuda-kernels.md.
# Usage on the device: [PROMPT_WORDS=700 G=128 ROUNDS=2 CTX=8192 KVARGS="--kv q8_0"] sh tests/device/run_27b_quant_speed.sh D OUTDIR
# Success: a table with both rows filled (rc=0 on every run), last line "run_27b_quant_speed: done".
export T=${TMPDIR:-/tmp} # scratch files (the prompt, generated models)
D=${1:-devcarry}
O=${2:-${OUT:-$T/27bq}}
WORDS=${PROMPT_WORDS:-700} # ~5.9 tokens per random word: ~4100 tokens
G=${G:-128}
ROUNDS=${ROUNDS:-2}
CTX=${CTX:-8192}
KVARGS=${KVARGS:---kv q8_0}
PRESET=${PRESET:-qwen3.6-27b} # another preset (demo) only to try the script out
W=$T/27bq-work # logs of every run (OUTDIR keeps only lines.txt and table.txt)
mkdir -p "$O" "$W"
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib:$LD_LIBRARY_PATH"
S="$D/snug"
el() { echo "[$(date -u +%T)] $*"; }
for t in q4_k_m iq4_xs; do
  M=$T/$PRESET-$t.gguf
  el "gen $t"
  [ -f $M ] || timeout 200 $S gen --preset $PRESET --type $t -o $M 2> $W/gen-$t.err ||
    { echo "gen $t failed rc=$?"; tail -n 3 $W/gen-$t.err; }
  ls -la $M
  $S info -m $M 2>&1 | sed -n '/totals by type/,$p' | tee $W/info-$t.txt
done
python3 -c "
import random; random.seed(1)
w=[''.join(random.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(random.randint(2,8))) for _ in range(4000)]
open('$T/27bq-prompt.txt','w').write(' '.join(random.choice(w) for _ in range($WORDS)))"
: > $O/lines.txt
r=0
while [ $r -lt $ROUNDS ]; do
  for t in q4_k_m iq4_xs; do
    el "round $r: $t"
    timeout 200 $S run --backend cuda --ctx $CTX $KVARGS -m $T/$PRESET-$t.gguf \
      -f $T/27bq-prompt.txt -n $G --temp 0 > $W/run-$t-$r.out 2> $W/run-$t-$r.err
    rc=$?
    line=$(grep "snug run: load" $W/run-$t-$r.err | tail -1)
    echo "rc=$rc $line"
    [ $rc = 0 ] || tail -n 5 $W/run-$t-$r.err
    echo "$t $line" >> $O/lines.txt
  done
  r=$((r + 1))
done
python3 - $O/lines.txt $PRESET <<'PY' | tee $O/table.txt
import os, re, statistics, sys
rows = {}
for ln in open(sys.argv[1]):
    t = ln.split()[0]
    m = re.search(r"prompt (\d+) tokens, [0-9.]+ s, ([0-9.]+) tok/s \| generation (\d+) tokens, "
                  r"[0-9.]+ s, ([0-9.]+) tok/s", ln)
    if m:
        rows.setdefault(t, []).append((int(m.group(1)), float(m.group(2)), float(m.group(4))))
print("| type | file GiB | prompt tokens | prompt tok/s (best, median) | decode tok/s (best, median) |")
print("|---|---|---|---|---|")
best = {}
for t in ("q4_k_m", "iq4_xs"):
    r = rows.get(t)
    f = os.path.join(os.environ['T'], f"{sys.argv[2]}-{t}.gguf")
    size = os.path.getsize(f) / 2**30 if os.path.exists(f) else 0
    if not r:
        print(f"| {t} | {size:.2f} | - | no run | no run |")
        continue
    pp, tg = [x[1] for x in r], [x[2] for x in r]
    best[t] = (max(pp), max(tg))
    print(f"| {t} | {size:.2f} | {r[0][0]} | {max(pp):.1f}, {statistics.median(pp):.1f} | "
          f"{max(tg):.2f}, {statistics.median(tg):.2f} |")
if len(best) == 2:
    print(f"iq4_xs / q4_k_m (best of each): prompt {best['iq4_xs'][0] / best['q4_k_m'][0]:.3f}x, "
          f"decode {best['iq4_xs'][1] / best['q4_k_m'][1]:.3f}x")
PY
el "run_27b_quant_speed: done"
