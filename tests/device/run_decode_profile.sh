#!/bin/sh
# run_decode_profile.sh — where a decode step's device time goes, in one device call:
#  1. decode speed with each setting of AB (environment assignments, e.g.
#     AB="SNUG_MVQ_ROWS=2 SNUG_MVQ_ROWS=4", or SNUG_CUDA_LIB=another build's libsnug_cuda.so),
#     interleaved over REPS rounds, for each draft count of DRAFTS (default 0), recorded steps on;
#     the text of every setting compared with the first's;
#  2. every kernel of a few decode steps timed alone by Nsight Compute (`ncu`, one metric:
#     gpu__time_duration, the clocks left as found), summed per kernel and divided by the steps
#     (eager steps, SNUG_CUDA_GRAPHS=0: ncu times each kernel in isolation either way, so the sum
#     is the kernels' own time, without the gaps between launches, which the step's wall time
#     adds); the wall time per step from part 1 next to it; PROF_DRAFT=k profiles speculative
#     steps with k drafts instead (steps counted by their output products: k drafts + 1 verify);
#  3. with DETAIL=1, ncu's speed-of-light, occupancy, launch and warp-state sections for the
#     first decode matvecs (kernel names matching DETAIL_K, default k_mvq).
# The model: MODEL, or the 27B preset written here with LAYERS layers (default 16: the same
# matrix shapes, a quarter of the layers, written in a quarter of the time).
# Not in ctest (needs a GPU and ncu). Carry: D/lib.tar.xz (snug, libsnug_cuda.so, lib/).
# NCU_CACHE=none leaves caches as found (small kernels then read what the previous one left in
# L2, as in a real step); SEQ=N lists the first decode step's first N kernels in order.
# Usage on the device: [MODEL=PATH] [LAYERS=16] [KV=q8_0] [STEPS=3] [AB=...] [REPS=2] [DRAFTS="0 3"] [PROFILE=0] [PROF_DRAFT=3] [DETAIL=1]
#   sh tests/device/run_decode_profile.sh D OUTDIR
# Prints the decode lines, a table (kernel, calls per step, µs per step, share) and
# "decode profile: done".
T=${TMPDIR:-/tmp} # scratch files
D=${1:-devcarry}
O=${2:-${OUT:-$T/prof}}
mkdir -p "$O"
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib:${LD_LIBRARY_PATH:-}"
S="$D/snug"
LAYERS=${LAYERS:-16}
M=${MODEL:-$T/27b-l$LAYERS.gguf}
KV=${KV:-q8_0}
STEPS=${STEPS:-3}
REPS=${REPS:-2}
if [ ! -f "$M" ]; then
  echo "[$(date -u +%T)] snug gen qwen3.6-27b q4_k_m n_layer=$LAYERS"
  timeout 300 $S gen --preset qwen3.6-27b --type q4_k_m --set n_layer="$LAYERS" -o "$M" > "$O/gen.log" 2>&1 ||
    { echo "gen failed"; tail -3 "$O/gen.log"; exit 1; }
fi
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)

# 1. decode speed per setting
words=$(python3 -c 'import random; r=random.Random(7); print(" ".join(r.choice(["alpha","beta","gamma","delta","tree","river","stone"]) for _ in range(400)))')
for r in $(seq "$REPS"); do
  for dr in ${DRAFTS:-0}; do
    i=0
    for a in ${AB:-none}; do
      i=$((i + 1))
      [ "$a" = none ] && a="SNUG_NOTHING=0"
      env "$a" timeout 200 "$S" run --backend cuda --ctx 4096 --kv "$KV" -m "$M" -p "$words" \
        -n 128 --temp 0 --spec-draft "$dr" --spec-adapt off > "$O/ab-$dr-$i.out" 2> "$O/ab.err"
      same=$(cmp -s "$O/ab-$dr-1.out" "$O/ab-$dr-$i.out" && echo "text = first setting's" || echo "TEXT DIFFERS")
      echo "decode draft=$dr $a round $r: $(grep 'snug run: load' "$O/ab.err" | tail -1 | sed 's/| seed.*//') ($same) $(grep 'snug run: speculative' "$O/ab.err" | tail -1)"
    done
  done
done

# 2. per-kernel times (PROFILE=0: only part 1)
[ "${PROFILE:-1}" = 0 ] && { echo "decode profile: done"; exit 0; }
[ -n "$NCU" ] || { echo "no ncu"; exit 1; }
SNUG_CUDA_GRAPHS=0 timeout 400 "$NCU" --clock-control none --cache-control "${NCU_CACHE:-all}" --metrics gpu__time_duration.sum --csv \
  "$S" run --backend cuda --ctx 4096 --kv "$KV" -m "$M" -p "hello there" \
  -n "$STEPS" --temp 0 --spec-draft "${PROF_DRAFT:-0}" --spec-adapt off > "$O/ncu.csv" \
  2> "$O/run.err"
echo "ncu rc=$? ($(wc -l < "$O/ncu.csv") lines)"
python3 - "$O/ncu.csv" "${PROF_DRAFT:-0}" "${SEQ:-0}" <<'PY'
import csv, re, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
drafts = int(sys.argv[2])
seq = int(sys.argv[3])
hdr = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
h = rows[hdr]
ki, mi, vi, ui = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value"), h.index("Metric Unit")
gi = h.index("Grid Size") if "Grid Size" in h else None
ks = []
grids = []
for r in rows[hdr + 1:]:
    if len(r) <= vi or r[mi] != "gpu__time_duration.sum":
        continue
    v = float(r[vi].replace(",", ""))
    unit = r[ui]
    # ncu names the unit "nsecond" / "usecond" / "msecond" or, in newer versions, "ns" / "us" / "ms"
    us = v / 1000.0 if unit in ("nsecond", "ns") else v * 1000.0 if unit in ("msecond", "ms") else v
    full = r[ki]
    # the name before its argument list, without a return type; template arguments (a matvec's
    # type, tokens and rows) kept, their spaces dropped
    name = re.sub(r"^void\s+", "", full.split("(")[0].strip()).replace(" ", "")
    ks.append((name, us))
    grids.append(r[gi] if gi is not None else "")
# the decode steps: from the second embedding gather on (the first is the prompt's)
starts = [i for i, (n, _) in enumerate(ks) if n.startswith("k_embed")]
if len(starts) < 3:
    print("too few steps found:", len(starts)); sys.exit(0)
seg = ks[starts[1]:starts[-1]]
steps = len(starts) - 2
if drafts > 0:
    # speculative steps (PROF_DRAFT=k): every step ends each of its k drafts and its
    # verification with the output product, the launch with the largest grid; everything after
    # the prompt's step, divided by those launches / (k + 1)
    def gx(g):
        m = re.match(r"[(]?\s*(\d+)", g)
        return int(m.group(1)) if m else 0
    big = max(gx(g) for g in grids[starts[1]:])
    heads = sum(1 for g in grids[starts[1]:] if gx(g) == big)
    seg = ks[starts[1]:]
    steps = max(1, heads // (drafts + 1))
    print(f"speculative steps with {drafts} drafts: {heads} output products -> {steps} steps")
if seq:
    # SEQ=N: the first decode step's first N kernels in launch order, with their times
    print("first decode step, in order:")
    for n, us in ks[starts[1]:starts[1] + seq]:
        print(f"  {us:8.2f} us  {n}")
tot = collections.defaultdict(float); cnt = collections.Counter()
for n, us in seg:
    tot[n] += us; cnt[n] += 1
all_us = sum(tot.values())
print(f"{steps} decode steps, {len(seg) / steps:.0f} kernels and {all_us / steps:.0f} us of kernel time per step")
print("| kernel | calls per step | us per step | us per call | share |")
print("|---|---:|---:|---:|---:|")
for n in sorted(tot, key=lambda k: -tot[k]):
    print(f"| {n} | {cnt[n] / steps:.0f} | {tot[n] / steps:.1f} | {tot[n] / cnt[n]:.2f} | {100 * tot[n] / all_us:.1f}% |")
PY
grep "snug run: load" "$O/run.err" | tail -1

# 3. the matvec's own counters
if [ "${DETAIL:-0}" = 1 ]; then
  SNUG_CUDA_GRAPHS=0 timeout 300 "$NCU" --clock-control none -k "regex:${DETAIL_K:-k_mvq}" \
    --launch-skip "${DETAIL_SKIP:-400}" -c "${DETAIL_N:-4}" \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis \
    "$S" run --backend cuda --ctx 4096 --kv "$KV" -m "$M" -p "hello there" -n 8 --temp 0 \
    > "$O/ncu-detail.txt" 2> "$O/detail.err"
  echo "ncu detail rc=$?"
  grep -E 'k_mvq|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Stall|Block Size|Grid Size|L2 Hit|Mem Busy|Max Bandwidth|Waves' "$O/ncu-detail.txt" | head -150
fi
echo "decode profile: done"
