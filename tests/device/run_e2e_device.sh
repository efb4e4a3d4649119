#!/bin/sh
# run_e2e_device.sh — the whole model on the GPU: `snug logits|perplexity --backend cuda` on the
# trained and MoE fixtures, compared with the reference logits (median KL <= 1e-4) and the
# greedy tokens (decode path: --chunk 1, argmax identical for >= 16 steps); then the q8_0, fp8,
# tq4, tq3 and mixed (q8_0/fp8, q8_0/tq4, tq4/q8_0) KV caches against the CPU backend with the same format. Not in ctest (CI
# has no GPU). The device machine lacks the CLI's -dev packages, so `snug` is built here
# (cmake -DSNUG_NATIVE=OFF, nvcc present) and carried with its shared libraries:
#   D=devcarry: D/snug, D/lib/*.so (ldd minus libc/CUDA), D/fx/{trained,moe}/ fixture files.
# Usage on the device: [FIXTURES="trained moe"] sh tests/device/run_e2e_device.sh [devcarry] [outdir]
#   (FIXTURES names which of D/fx/ to check, when the carry limit leaves room for one)
export T=${TMPDIR:-/tmp} # scratch files (the prompt, generated models)
D=${1:-devcarry}
O=${2:-${OUT:-$T/e2e}}
mkdir -p "$O"
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib:$LD_LIBRARY_PATH"
S="$D/snug"
fail=0
mem() { nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader; }
cat_ids() { python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))+json.load(open(sys.argv[2]))))" "$1" "$2"; }
for m in ${FIXTURES:-trained moe}; do
  F=$D/fx/$m
  G=$(ls $F/*.gguf)
  V=2048
  echo "== $m: prompt path (chunk 512) =="
  $S logits --backend cuda -m "$G" --ids $F/ids.json -o $O/$m.f32 || fail=1
  python3 tests/device/compare_logits.py $O/$m.f32 $F/logits.f32 $V || fail=1
  echo "== $m: decode path (chunk 1, prompt + greedy tokens teacher-forced) =="
  cat_ids $F/ids.json $F/greedy.json > $O/${m}_all.json
  N=$(python3 -c "import json; print(len(json.load(open('$F/ids.json'))))")
  $S logits --backend cuda --chunk 1 -m "$G" --ids $O/${m}_all.json -o $O/${m}_dec.f32 || fail=1
  python3 tests/device/compare_logits.py $O/${m}_dec.f32 $F/greedy_logits.f32 $V \
    --greedy $F/greedy.json --offset "$N" || fail=1
  echo "== $m: chunk 64 =="
  $S logits --backend cuda --chunk 64 -m "$G" --ids $F/ids.json -o $O/${m}_64.f32 || fail=1
  python3 tests/device/compare_logits.py $O/${m}_64.f32 $F/logits.f32 $V || fail=1
done
# Compressed KV caches on the GPU (cuda_kvfmt.cuh): the same format on the CPU backend is the
# reference (gate: median KL <= 1e-4); the distance to the fixture's f16-cache logits is printed
# for information (it measures the format, not the kernels: "info" lines never fail).
for m in ${FIXTURES:-trained moe}; do
  F=$D/fx/$m
  G=$(ls $F/*.gguf)
  for kv in q8_0 fp8 "--kv-k q8_0 --kv-v fp8" tq4 tq3 "--kv-k q8_0 --kv-v tq4" "--kv-k tq4 --kv-v q8_0"; do
    case "$kv" in
      --*) kvf="$kv"; tag=$(echo "$kv" | sed 's/--kv-k //; s/ --kv-v /-/') ;;
      *) kvf="--kv $kv"; tag=$kv ;;
    esac
    echo "== $m: KV $tag, prompt path (chunk 512): GPU vs CPU with the same cache format =="
    $S logits --backend cuda $kvf -m "$G" --ids $F/ids.json -o $O/${m}_$tag.f32 || fail=1
    $S logits $kvf -m "$G" --ids $F/ids.json -o $O/${m}_${tag}_cpu.f32 || fail=1
    python3 tests/device/compare_logits.py $O/${m}_$tag.f32 $O/${m}_${tag}_cpu.f32 2048 || fail=1
    echo "   (info) the same against the f16-cache reference logits:"
    python3 tests/device/compare_logits.py $O/${m}_$tag.f32 $F/logits.f32 2048 || true
  done
  for kv in q8_0 tq4; do
    echo "== $m: KV $kv, decode path (chunk 1) GPU vs CPU =="
    $S logits --backend cuda --kv $kv --chunk 1 -m "$G" --ids $O/${m}_all.json -o $O/${m}_${kv}dec.f32 || fail=1
    $S logits --kv $kv --chunk 1 -m "$G" --ids $O/${m}_all.json -o $O/${m}_${kv}dec_cpu.f32 || fail=1
    python3 tests/device/compare_logits.py $O/${m}_${kv}dec.f32 $O/${m}_${kv}dec_cpu.f32 2048 || fail=1
  done
done
case " ${FIXTURES:-trained moe} " in
  *" trained "*) # these two use the trained fixture (ppl_ids.json is carried with it)
    echo "== trained: perplexity (reference 4.2773) =="
    $S perplexity --backend cuda -m $D/fx/trained/trained-f16.gguf --ids $D/fx/trained/ppl_ids.json || fail=1
    echo "== budget: a 1 MiB --vram-budget must be refused =="
    if $S logits --backend cuda --vram-budget 1MiB -m $D/fx/trained/trained-f16.gguf --ids $D/fx/trained/ids.json -o $O/x.f32; then fail=1; fi
    ;;
esac
mem
echo "e2e device: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
