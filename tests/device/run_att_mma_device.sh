#!/bin/sh
# run_att_mma_device.sh — the tensor-core decode attention (cuda_fa.cu k_fa_dec, the default
# where the cache formats allow; SNUG_ATT_GROUPED=3 forces it) against the f32 kernels it
# replaced, in one device call: 1. `test_cuda_ops attention` (every format pair and shape under
# each kernel form; the first pass runs the default, tolerance 4e-3 of max|ref| for the
# tensor-core forms); 2. `bench_cuda_ops attdec` (µs per call of the grouped / per-head / FLAT /
# tensor-core kernels at the 27B's and the 35B-A3B's shapes, 4K-128K, T = 1 and 4, with the share
# of the copy rate), then `bench_cuda_ops att` (the 27B's shape: decode at 200K per kernel,
# prompt attention at 8K / 32K / 128K per format and tile loader); 3. the fixtures' decode path
# with the kernel forced (`snug logits --chunk 1` against the reference logits and greedy
# tokens; q8_0 and tq4 caches against the CPU backend: median KL <= 1e-4, as
# run_e2e_device.sh gates); 4. whole-model decode at depth 32K, the f32
# grouped kernel (SNUG_ATT_GROUPED=1) against the default (`snug bench-local`), on a generated
# preset (MODEL= an existing GGUF, else PRESET=qwen3.6-35b-a3b q4_k_m written to the device's
# disk; SKIP_MODEL=1 skips part 4).
# Not in ctest (needs a GPU). Self-checking: "att mma device: PASS|FAIL" at the end (parts 1 and
# 3; parts 2 and 4 print numbers for docs/perf/cuda-kernels.md "Decode on tensor cores").
# Carry: D/lib.tar.xz from tests/device/pack_devcarry.sh (BINS="snug libsnug_cuda.so
# bench_cuda_ops test_cuda_ops"), D/fx/trained with the fixture's gguf, ids.json, greedy.json,
# greedy_logits.f32.
# Usage on the device: sh tests/device/run_att_mma_device.sh [D] [outdir]
T=${TMPDIR:-/tmp}
D=${1:-devcarry}
O=${2:-${OUT:-$T/attmma}}
PRESET=${PRESET:-qwen3.6-35b-a3b}
mkdir -p "$O"
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib:$LD_LIBRARY_PATH"
S="$D/snug"
fail=0
T0=$(date +%s)
el() { echo "[t+$(($(date +%s) - T0))s] $*"; }
M=${MODEL:-$T/$PRESET-q4_k_m.gguf}
if [ "${SKIP_MODEL:-0}" != 1 ] && [ ! -f "$M" ]; then # written while the GPU parts run
  ( $S gen --preset "$PRESET" --type q4_k_m -o "$M" > "$O/gen.log" 2>&1; echo "gen rc $?" >> "$O/gen.log" ) &
fi

el "== 1. test_cuda_ops attention =="
timeout 300 "$D/test_cuda_ops" attention > "$O/att_test.txt" 2>&1
rc=$?
echo "rc $rc, $(grep -c PASS "$O/att_test.txt") PASS lines, $(grep -c FAIL "$O/att_test.txt") FAIL lines"
grep FAIL "$O/att_test.txt" | head -20
grep "\[mma\]" "$O/att_test.txt" | grep -v "device positions" | head -6
[ $rc = 0 ] && ! grep -q FAIL "$O/att_test.txt" || fail=1

el "== 2. bench_cuda_ops attdec =="
timeout 150 "$D/bench_cuda_ops" attdec > "$O/attdec.txt" 2>&1
grep -E "^device|ceiling" "$O/attdec.txt"
grep attdec "$O/attdec.txt" | awk '{print $2, $3, $4, $5, $6, $7, $8, $12}'

el "== 2b. bench_cuda_ops att (decode at 200K: grouped / per-head / tensor cores; prompt attention at 8K-128K per format) =="
timeout 200 "$D/bench_cuda_ops" att > "$O/att_bench.txt" 2>&1
grep -E "^attention" "$O/att_bench.txt"

el "== 3. the trained fixture's decode path with the tensor-core kernel =="
F=$D/fx/trained
G=$(ls $F/*.gguf)
python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))+json.load(open(sys.argv[2]))))" \
  $F/ids.json $F/greedy.json > "$O/all.json"
N=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))))" $F/ids.json)
SNUG_ATT_GROUPED=3 $S logits --backend cuda --chunk 1 -m "$G" --ids "$O/all.json" -o "$O/dec.f32" || fail=1
python3 tests/device/compare_logits.py "$O/dec.f32" $F/greedy_logits.f32 2048 --greedy $F/greedy.json \
  --offset "$N" || fail=1
for kv in q8_0 tq4; do
  echo "KV $kv, decode path: GPU (tensor cores) vs CPU"
  SNUG_ATT_GROUPED=3 $S logits --backend cuda --kv $kv --chunk 1 -m "$G" --ids "$O/all.json" \
    -o "$O/g_$kv.f32" || fail=1
  $S logits --kv $kv --chunk 1 -m "$G" --ids "$O/all.json" -o "$O/c_$kv.f32" || fail=1
  python3 tests/device/compare_logits.py "$O/g_$kv.f32" "$O/c_$kv.f32" 2048 || fail=1
done

if [ "${SKIP_MODEL:-0}" != 1 ]; then
  el "== 4. whole-model decode at 32K: f32 grouped kernel vs the default ($M) =="
  wait
  [ -f "$O/gen.log" ] && tail -1 "$O/gen.log"
  for g in 1 "" 1 ""; do
    r=$(SNUG_ATT_GROUPED=$g timeout 120 $S bench-local --backend cuda -m "$M" --kv q8_0 --reps 2 \
      -p 0 -n 64 -d 32768 2>&1 | grep -E "^tg|rror" | head -2)
    echo "SNUG_ATT_GROUPED=${g:-default}: $r"
  done
fi
el "done"
echo "att mma device: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
