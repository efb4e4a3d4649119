#!/usr/bin/env bash
# bench/cpu.sh — CPU speed of snug next to llama.cpp on the same GGUF files.
#
# Makes (once, cached in $MODELS) a ~0.9B-parameter qwen35 model and a ~0.9B qwen35moe model
# with `snug gen`, each in every type of $TYPES (default Q8_0 and Q4_K_M, which `snug gen`
# writes; IQ4_XS, Q3_K_M and the other llama.cpp types are made by $LLAMA_QUANTIZE from an F16
# file of the same model, without an importance matrix), then for every file runs, interleaved
# round by round:
#   snug bench-local -m F -p 512 -n 128 -t $THREADS --reps $REPS
#   $LLAMA_BENCH     -m F -p 512 -n 128 -t $THREADS -r $REPS      (when LLAMA_BENCH is set)
# and prints pp512 / tg128 tokens/s of both, the ratios snug/llama.cpp, and snug's generation
# speed as a fraction of the memory-bandwidth ceiling (weight bytes per token / bandwidth of a
# large memcpy, both measured by snug bench-local in the same run).
#
# Environment: SNUG (default build/snug), LLAMA_BENCH (path to llama-bench, optional), MODELS
# (default $TMPDIR/snug-bench-models), THREADS (2), REPS (3), ROUNDS (2), ONLY (substring filter
# on the model names, e.g. ONLY=dense-q8_0), P (512), N (128), TYPES (list of file types, default
# "q8_0 q4_k_m"; e.g. TYPES="iq4_xs q3_k_m"), LLAMA_QUANTIZE (path to llama.cpp's llama-quantize,
# needed for a type `snug gen` does not write), LLAMA_ARGS (extra llama-bench arguments, e.g.
# "--repack 0": llama.cpp build 11434's AMX repacking crashes on these files).
# Results and the commands are recorded in docs/perf/cpu.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SNUG=${SNUG:-$ROOT/build/snug}
MODELS=${MODELS:-${TMPDIR:-/tmp}/snug-bench-models}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
ROUNDS=${ROUNDS:-2}
P=${P:-512}
N=${N:-128}
ONLY=${ONLY:-}
LLAMA_BENCH=${LLAMA_BENCH:-}
LLAMA_QUANTIZE=${LLAMA_QUANTIZE:-}
LLAMA_ARGS=${LLAMA_ARGS:-}
TYPES=${TYPES:-q8_0 q4_k_m}
mkdir -p "$MODELS"

# The vocabulary (needed by llama.cpp's loader) comes from the trained fixture: 2048 tokens, so
# the parameters are nearly all in the layers. Dense: 16 layers 2048 wide, FFN 6144 (0.93B);
# MoE: 4 layers (n_layer must be a multiple of full_attention_interval for llama.cpp),
# 64 experts of 512 (8 used) + shared expert (0.9B, 0.2B active).
VOCAB=${VOCAB:-$ROOT/../shared/fixtures/trained/trained-f16.gguf}
DENSE_SET=(--vocab-from "$VOCAB" --set n_vocab=2048 --set embedding_length=2048 --set n_layer=16
  --set nextn_predict_layers=0 --set feed_forward_length=6144 --set attention.head_count=8
  --set attention.head_count_kv=2 --set ssm.group_count=16 --set ssm.time_step_rank=16)
MOE_SET=(--vocab-from "$VOCAB" --set n_vocab=2048 --set n_layer=4 --set nextn_predict_layers=0
  --set expert_count=64 --set expert_used_count=8)

SNUG_GEN_TYPES=" f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k q4_k_m q5_k_m "
gen() { # name preset type set...
  local name=$1 preset=$2 type=$3
  shift 3
  local f="$MODELS/$name.gguf"
  [[ -s $f ]] && return
  if [[ $SNUG_GEN_TYPES == *" $type "* ]]; then
    echo "# making $f" >&2
    "$SNUG" gen --preset "$preset" --type "$type" -o "$f.tmp" "$@" >&2
  else
    [[ -n $LLAMA_QUANTIZE ]] || { echo "type $type needs LLAMA_QUANTIZE=path/to/llama-quantize" >&2; exit 1; }
    local base=${name%-"$type"}-f16
    gen "$base" "$preset" f16 "$@"
    echo "# making $f (llama-quantize)" >&2
    "$LLAMA_QUANTIZE" "$MODELS/$base.gguf" "$f.tmp" "${type^^}" 2 >/dev/null
  fi
  mv "$f.tmp" "$f"
}
NAMES=()
for t in $TYPES; do
  for kind in dense moe; do
    name=$kind-$t
    [[ -n $ONLY && $name != *$ONLY* ]] && continue
    if [[ $kind == dense ]]; then gen "$name" qwen3.6-27b "$t" "${DENSE_SET[@]}"
    else gen "$name" qwen3.6-35b-a3b "$t" "${MOE_SET[@]}"; fi
    NAMES+=("$name")
  done
done

if [[ -n $LLAMA_BENCH ]]; then
  "$LLAMA_BENCH" --help >/dev/null 2>&1 || { echo "LLAMA_BENCH=$LLAMA_BENCH does not run" >&2; exit 1; }
fi
echo "# $(date -u +%FT%TZ)  $(lscpu | sed -n 's/^Model name: *//p')  threads=$THREADS reps=$REPS rounds=$ROUNDS"
echo "# snug: $SNUG ($("$SNUG" --version 2>&1 | head -1))  kernels: ${SNUG_CPU:-best}"
[[ -n $LLAMA_BENCH ]] && echo "# llama-bench: $LLAMA_BENCH $LLAMA_ARGS"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for name in "${NAMES[@]}"; do
  f="$MODELS/$name.gguf"
  for r in $(seq 1 "$ROUNDS"); do
    "$SNUG" bench-local -m "$f" -p "$P" -n "$N" -t "$THREADS" --reps "$REPS" >"$TMP/$name.snug.$r"
    if [[ -n $LLAMA_BENCH ]]; then
      # shellcheck disable=SC2086
      "$LLAMA_BENCH" -m "$f" -p "$P" -n "$N" -t "$THREADS" -r "$REPS" $LLAMA_ARGS -o csv \
        >"$TMP/$name.llama.$r" 2>/dev/null || echo "llama-bench failed on $f" >&2
    fi
  done
done

python3 - "$TMP" "$P" "$N" "${NAMES[@]}" <<'PY'
import csv, glob, re, sys
tmp, P, N, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
def mean(v): return sum(v) / len(v) if v else float("nan")
print(f"{'model':<14} {'snug pp'+str(P):>11} {'llama pp':>10} {'ratio':>6} {'snug tg'+str(N):>11} "
      f"{'llama tg':>10} {'ratio':>6} {'tg/ceiling':>10}")
for name in names:
    spp, stg, frac, lpp, ltg = [], [], [], [], []
    for fn in sorted(glob.glob(f"{tmp}/{name}.snug.*")):
        t = open(fn).read()
        m = re.search(r"^pp\d+: ([\d.]+)", t, re.M); spp += [float(m.group(1))] if m else []
        m = re.search(r"^tg\d+: ([\d.]+)", t, re.M); stg += [float(m.group(1))] if m else []
        m = re.search(r"tg is ([\d.]+)% of it", t); frac += [float(m.group(1))] if m else []
    for fn in sorted(glob.glob(f"{tmp}/{name}.llama.*")):
        for row in csv.DictReader(open(fn)):
            if int(row["n_prompt"]) == P and int(row["n_gen"]) == 0: lpp.append(float(row["avg_ts"]))
            if int(row["n_gen"]) == N and int(row["n_prompt"]) == 0: ltg.append(float(row["avg_ts"]))
    r = lambda a, b: f"{mean(a) / mean(b):6.2f}" if a and b else f"{'-':>6}"
    f = lambda v: f"{mean(v):10.2f}" if v else f"{'-':>10}"
    print(f"{name:<14} {f(spp):>11} {f(lpp)} {r(spp, lpp)} {f(stg):>11} {f(ltg)} {r(stg, ltg)} "
          f"{mean(frac):9.1f}%")
PY
