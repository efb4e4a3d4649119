#!/bin/sh
# run_graphs_device.sh — recorded decode steps (CUDA graphs) on the GPU: the ops' device-position
# paths and a captured launch replayed at later positions (`test_cuda_ops step`); the trained
# fixture's decode path (every position a one-row step: `snug logits --chunk 1`) with graphs on
# and off — the same bytes, and within the reference KL; a generated MoE and a generated dense
# model likewise (bytes equal with graphs on and off; the MoE's decode steps whose expert types
# have no device kernel fail their recording and run eagerly, which must not change a bit);
# speculative decoding (tests/device/run_mtp_device.sh skip27b: greedy with drafts == plain);
# then the 27B preset's decode speed with graphs on and off, interleaved.
# Not in ctest (needs a GPU). Carry (tests/device/pack_devcarry.sh, or a slimmer one):
# D/lib.tar.xz with snug, libsnug_cuda.so, test_cuda_ops, test_mtp_device and lib/; D/fx/trained/.
# Usage on the device: [SKIP27=1] sh tests/device/run_graphs_device.sh D OUTDIR
# Success: the last line is "graphs device: PASS".
T=${TMPDIR:-/tmp} # scratch files
D=${1:-devcarry}
O=${2:-${OUT:-$T/graphs}}
mkdir -p "$O"
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib:${LD_LIBRARY_PATH:-}"
S="$D/snug"
fail=0
T0=$(date +%s)
el() { echo "[t+$(($(date +%s) - T0))s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

el "== 1. test_cuda_ops step =="
timeout 240 "$D/test_cuda_ops" step > "$O/step.txt" 2>&1
tail -1 "$O/step.txt"
grep -E "FAIL|FATAL" "$O/step.txt" | head -20
tail -1 "$O/step.txt" | grep -q " 0 failed" || fail=1

same() { # what a b
  if cmp -s "$2" "$3"; then echo "$1: same bytes PASS"; else
    echo "$1: FAIL (files differ)"
    fail=1
  fi
}

el "== 2. trained fixture, decode path, graphs on and off =="
F=$D/fx/trained
G=$F/trained-f16.gguf
python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))+json.load(open(sys.argv[2]))))" \
  $F/ids.json $F/greedy.json > $O/all.json
N=$(python3 -c "import json; print(len(json.load(open('$F/ids.json'))))")
for kv in f16 q8_0 q8_0/tq4; do
  tag=$(echo $kv | tr / _)
  ka="--kv $kv"
  case $kv in */*) ka="--kv-k ${kv%/*} --kv-v ${kv#*/}" ;; esac
  timeout 120 $S logits --backend cuda --chunk 1 $ka -m "$G" --ids $O/all.json -o $O/dec-$tag.f32 \
    2> $O/dec-$tag.err || { echo "logits $kv failed"; tail -3 $O/dec-$tag.err; fail=1; }
  grep "cuda graphs" $O/dec-$tag.err
  SNUG_CUDA_GRAPHS=0 timeout 120 $S logits --backend cuda --chunk 1 $ka -m "$G" --ids $O/all.json \
    -o $O/dec0-$tag.f32 2> $O/dec0-$tag.err || fail=1
  same "trained decode $kv: graphs on vs off" $O/dec-$tag.f32 $O/dec0-$tag.f32
  if [ $kv = f16 ]; then
    python3 tests/device/compare_logits.py $O/dec-$tag.f32 $F/greedy_logits.f32 2048 \
      --greedy $F/greedy.json --offset "$N" ||
      fail=1
  fi
done

el "== 3. generated models (demo, demo-moe), decode path, graphs on and off =="
python3 -c "import random; random.seed(3); print([random.randrange(265) for _ in range(300)])" > $O/gen_ids.json
for p in demo demo-moe; do
  for t in q8_0 q4_k_m; do
    timeout 120 $S gen --preset $p --type $t -o $O/$p-$t.gguf --set nextn_predict_layers=1 > /dev/null 2>&1 ||
      { echo "gen $p $t failed"; continue; }
    timeout 120 $S logits --backend cuda --chunk 1 -m $O/$p-$t.gguf --ids $O/gen_ids.json -o $O/g1.f32 2> $O/g1.err ||
      { echo "logits $p $t failed"; tail -3 $O/g1.err; fail=1; }
    grep "cuda graphs" $O/g1.err
    SNUG_CUDA_GRAPHS=0 timeout 120 $S logits --backend cuda --chunk 1 -m $O/$p-$t.gguf --ids $O/gen_ids.json \
      -o $O/g0.f32 2> /dev/null || fail=1
    same "$p $t decode: graphs on vs off" $O/g1.f32 $O/g0.f32
  done
done

el "== 4. speculative decoding (run_mtp_device.sh skip27b) =="
timeout 300 sh tests/device/run_mtp_device.sh "$D" "$O/mtp" skip27b > "$O/mtp.txt" 2>&1
grep -E "PASS|FAIL|mean|cuda graphs" "$O/mtp.txt" | tail -15
grep -q "mtp device: PASS" "$O/mtp.txt" || fail=1

if [ "${SKIP27:-0}" != 1 ]; then
  el "== 5. qwen3.6-27b Q4_K_M decode: graphs on / off, interleaved =="
  M=$T/27b.gguf
  [ -f $M ] || timeout 200 $S gen --preset qwen3.6-27b --type q4_k_m -o $M > /dev/null 2>&1
  python3 -c "
import random; random.seed(1)
w=[''.join(random.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(random.randint(2,8))) for _ in range(4000)]
open('$T/p4k.txt','w').write(' '.join(random.choice(w) for _ in range(700)))"
  for r in 0 1; do
    for g in 1 0; do
      SNUG_CUDA_GRAPHS=$g timeout 200 $S run --backend cuda --ctx 8192 --kv q8_0 -m $M -f $T/p4k.txt \
        -n 128 --temp 0 > $O/r27-$g-$r.out 2> $O/r27-$g-$r.err
      echo "graphs=$g round $r: $(grep 'snug run: load' $O/r27-$g-$r.err | tail -1) $(grep 'cuda graphs' $O/r27-$g-$r.err)"
    done
    SNUG_CUDA_GRAPHS=1 timeout 200 $S run --backend cuda --ctx 8192 --kv q8_0 -m $M -f $T/p4k.txt \
      -n 128 --temp 0 --spec-draft 3 --spec-adapt off > $O/r27-s3-$r.out 2> $O/r27-s3-$r.err
    echo "graphs=1 draft=3 round $r: $(grep 'snug run: load' $O/r27-s3-$r.err | tail -1)"
    grep "speculative" $O/r27-s3-$r.err
  done
  same "27b greedy text: graphs on vs off" $O/r27-1-0.out $O/r27-0-0.out
fi
el "done"
[ $fail = 0 ] && echo "graphs device: PASS" || echo "graphs device: FAIL"
