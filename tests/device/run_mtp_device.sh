#!/bin/sh
# run_mtp_device.sh — speculative decoding with the MTP block on the GPU: on the trained
# fixture with --backend cuda, test_mtp_device (MTP logits vs mtp_logits.f32, greedy output with
# 3 drafts == plain greedy for 256 tokens on 5 ppl_ids.json prompts, k = 1/4/recompute, mean
# acceptance length, two contexts sharing the device weights, a generated MoE with MTP), `snug logits --mtp --backend cuda` vs mtp_logits.f32 (compare_logits.py),
# `snug run --spec-draft 3` == `--spec-draft 0` text; then the verify-cost benchmark
# (`snug bench-local --verify --backend cuda`: verify k+1 tokens / rollback / draft k vs one
# decode step, k = 1..4) on the fixture and on the qwen3.6-27b preset (random q4_k_m weights,
# generated on the device's disk), with the plan's device total next to what the backend took.
# Not in ctest (needs a GPU). Self-checking: prints PASS/FAIL per part and "mtp device: PASS|FAIL".
# Built here (cmake -DSNUG_NATIVE=OFF, nvcc present; targets snug test_mtp_device) and carried
# by tests/device/pack_devcarry.sh: D/lib.tar.xz (snug, test_mtp_device, lib/), D/fx/trained/.
# Usage on the device: sh tests/device/run_mtp_device.sh [D] [outdir] [skip27b]
export T=${TMPDIR:-/tmp} # scratch files (the prompt, generated models)
D=${1:-devcarry}
O=${2:-${OUT:-$T/mtp}}
SKIP27=${3:-}
M27=$T/27b.gguf
mkdir -p "$O"
[ -d "$D/lib" ] || tar xJf "$D/lib.tar.xz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib:$LD_LIBRARY_PATH"
S="$D/snug"
F=$D/fx/trained
G=$F/trained-f16.gguf
fail=0
T0=$(date +%s)
el() { echo "[t+$(($(date +%s) - T0))s] $*"; }
mem() { nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader; }

el "== 1. test_mtp_device (MTP logits, greedy spec == plain, acceptance, shared weights, MoE) =="
timeout 120 $S gen --preset demo-moe --type f16 -o $O/moe_mtp.gguf --set nextn_predict_layers=1 > /dev/null 2>&1 || echo "moe gen failed"
timeout 300 "$D/test_mtp_device" "$D/fx" $O/moe_mtp.gguf 2>&1 | tee "$O/test_mtp_device.txt"
grep -q "^mtp device: PASS" "$O/test_mtp_device.txt" || fail=1
ACC=$(sed -n 's/^cuda k=3 greedy over 5 prompts: mean \([0-9.]*\).*/\1/p' "$O/test_mtp_device.txt")

el "== 2. snug logits --mtp --backend cuda vs mtp_logits.f32 =="
V=2048
timeout 120 $S logits --mtp --backend cuda --kv f32 -m "$G" --ids $F/ids.json -o $O/mtp.f32 || fail=1
python3 tests/device/compare_logits.py $O/mtp.f32 $F/mtp_logits.f32 $V || fail=1

# (--spec-adapt on, the default: the draft count of each step chosen from the measured acceptance
# and step times; the text must not change whatever the counts)
el "== 3. snug run --backend cuda: --spec-draft 3 output == --spec-draft 0 output =="
P='def fibonacci(n):
    """Return the n-th Fibonacci number."""
'
timeout 120 $S run --backend cuda -m "$G" -p "$P" -n 200 --temp 0 --spec-draft 0 > $O/run0.txt 2> $O/run0.err
r0=$?
timeout 120 $S run --backend cuda -m "$G" -p "$P" -n 200 --temp 0 --spec-draft 3 > $O/run3.txt 2> $O/run3.err
r3=$?
tail -n 4 $O/run3.err
if [ $r0 = 0 ] && [ $r3 = 0 ] && cmp -s $O/run0.txt $O/run3.txt && [ -s $O/run0.txt ]; then
  echo "PASS: run --spec-draft 3 text == --spec-draft 0 text ($(wc -c < $O/run0.txt) bytes)"
else
  echo "FAIL: run --spec-draft 3 vs 0 (rc $r0 / $r3)"; diff $O/run0.txt $O/run3.txt | head -5
  fail=1
fi

el "== 4. verify cost on the fixture (cuda) =="
timeout 180 $S bench-local --verify --backend cuda -m "$G" -p 256 --reps 9 ${ACC:+--accept $ACC} \
  2>&1 | tee $O/verify_fixture.txt
grep -q "^verify k=4" $O/verify_fixture.txt && echo "PASS: fixture verify-cost table" || { echo "FAIL: fixture verify-cost"; fail=1; }

if [ -z "$SKIP27" ]; then
  el "== 5. verify cost on qwen3.6-27b q4_k_m (cuda) =="
  [ -f $M27 ] || timeout 300 $S gen --preset qwen3.6-27b --type q4_k_m -o $M27 || echo "gen failed rc=$?"
  ls -la $M27
  timeout 60 $S plan --preset qwen3.6-27b --weights q4_k_m --backend cuda --mtp 4 --ctx 2048 | grep -E "snapshots|mtp|total"
  mem
  timeout 400 $S bench-local --verify --backend cuda -m $M27 -p 512 --reps 7 --accept 3.2 \
    2>&1 | tee $O/verify_27b.txt
  mem
  grep -q "^verify k=4" $O/verify_27b.txt && echo "PASS: 27b verify-cost table" || { echo "FAIL: 27b verify-cost"; fail=1; }
fi
el "done"
echo "mtp device: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
