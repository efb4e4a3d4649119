#!/bin/sh
# run_decode_profile.sh — where a decode step's device time goes: every kernel of a few decode
# steps of a model timed alone by Nsight Compute (`ncu`, one metric: gpu__time_duration, the
# clocks left as found), summed per kernel and divided by the steps; next to it the bytes the
# step must read (bench/gpu_table.py's count) over the copy ceiling. Eager steps
# (SNUG_CUDA_GRAPHS=0: ncu times each kernel in isolation either way, so the sum is the kernels'
# own time, without the gaps between launches, which the step's wall time adds).
# Not in ctest (needs a GPU and ncu). Carry: D/lib.tar.xz (snug, libsnug_cuda.so, lib/).
# Usage on the device: [MODEL=PATH] [KV=q8_0] [STEPS=3] sh tests/device/run_decode_profile.sh D OUTDIR
# Prints a table (kernel, calls per step, µs per step, share) and "decode profile: done".
T=${TMPDIR:-/tmp} # scratch files
D=${1:-devcarry}
O=${2:-${OUT:-$T/prof}}
mkdir -p "$O"
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib:${LD_LIBRARY_PATH:-}"
S="$D/snug"
M=${MODEL:-$T/27b.gguf}
KV=${KV:-q8_0}
STEPS=${STEPS:-3}
[ -f "$M" ] || timeout 200 $S gen --preset qwen3.6-27b --type q4_k_m -o "$M" > /dev/null 2>&1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
[ -n "$NCU" ] || { echo "no ncu"; exit 1; }
SNUG_CUDA_GRAPHS=0 timeout 400 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
  "$S" run --backend cuda --ctx 4096 --kv "$KV" -m "$M" -p "hello there" \
  -n "$STEPS" --temp 0 > "$O/ncu.csv" 2> "$O/run.err"
echo "ncu rc=$? ($(wc -l < "$O/ncu.csv") lines)"
python3 - "$O/ncu.csv" <<'PY'
import csv, re, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
h = rows[hdr]
ki, mi, vi, ui = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value"), h.index("Metric Unit")
ks = []
for r in rows[hdr + 1:]:
    if len(r) <= vi or r[mi] != "gpu__time_duration.sum":
        continue
    v = float(r[vi].replace(",", ""))
    unit = r[ui]
    us = v / 1000.0 if unit == "nsecond" else v * 1000.0 if unit == "msecond" else v
    name = re.split(r"[<(]", r[ki])[0].strip()
    name = name.split(" ")[-1]
    ks.append((name, us))
# the decode steps: from the second embedding gather on (the first is the prompt's)
starts = [i for i, (n, _) in enumerate(ks) if n.startswith("k_embed")]
if len(starts) < 3:
    print("too few steps found:", len(starts)); sys.exit(0)
seg = ks[starts[1]:starts[-1]]
steps = len(starts) - 2
tot = collections.defaultdict(float); cnt = collections.Counter()
for n, us in seg:
    tot[n] += us; cnt[n] += 1
all_us = sum(tot.values())
print(f"{steps} decode steps, {len(seg) / steps:.0f} kernels and {all_us / steps:.0f} us of kernel time per step")
print("| kernel | calls per step | us per step | share |")
print("|---|---:|---:|---:|")
for n in sorted(tot, key=lambda k: -tot[k]):
    print(f"| {n} | {cnt[n] / steps:.0f} | {tot[n] / steps:.1f} | {100 * tot[n] / all_us:.1f}% |")
PY
grep "snug run: load" "$O/run.err" | tail -1
echo "decode profile: done"
