#!/bin/sh
# gpu.sh — snug next to llama.cpp on one GPU, in one device call: the same GGUF, the same KV
# cache format, prompt speed at 512 / 4096 tokens and decode speed at depths 0 / 4K / 32K, per
# repetition snug's runs then llama.cpp's (REPS > 1 alternates them, so drift hits both). snug is
# measured cold (one `snug run` per figure, first-call costs included) and warm (`snug bench-local
# --backend cuda`: one warm-up, then the mean of WARM_REPS repetitions, as llama-bench measures:
# the rows marked "(warm)"); snug alone
# with TurboQuant caches and with 1 / 2 / 3 MTP drafts; the card's ceilings measured in the same
# call (copy bandwidth, cuBLAS bf16 and int8 matrix rates: bench_cuda_ops ceilings). The table at
# the end gives every figure, its ratio to llama.cpp, and its share of its ceiling
# (bench/gpu_table.py; docs/perf/cuda.md explains the columns and keeps the results).
#
# Usage, on the device machine from the repository root:
#   sh bench/gpu.sh CARRY OUT [LLAMA_SRC]
#   CARRY      snug's binaries as tests/device/pack_devcarry.sh packs them (lib.tar.xz: built
#              where the tools are, carried), plus a real vocabulary GGUF, CARRY/vocab.gguf
#              (llama.cpp loads only models with a real tokenizer: `snug gen --vocab-from`)
#   OUT        where the logs, lines.txt and table.txt go
#   LLAMA_SRC  a llama.cpp source tree as a .tar.xz (or a folder): configured and built here
#              (llama-bench only, CUDA for this card's architecture, into /tmp) while snug writes
#              the model; omitted or NO_LLAMA=1: snug alone (the ratios column stays empty)
# Environment (defaults; set a list empty to skip it, e.g. DRAFTS="" runs draft=0 alone; an
#   empty single value takes its default):
#   PRESET=qwen3.6-27b TYPE=q4_k_m KVS="q8_0 f16" PROMPTS="512 4096" DEPTHS="0 4096 32768" G=128
#   REPS=2 DRAFTS="1 2 3" SNUG_KVS="tq4 tq3 q8_0/tq4" CUDA_ARCH=90a (the draft runs use the
#   first of KVS: none when KVS is empty) WARM_REPS=2 (bench-local's --reps; 0: no warm rows)
#   MODEL=PATH (an existing GGUF instead of `snug gen`)
# Needs: nvidia-smi, python3; for llama.cpp: cmake, a C++ compiler and nvcc.
# Success: the last line is "gpu.sh: done" after the table; every row has a number.
T=${TMPDIR:-/tmp} # scratch files
set -u
C=${1:?carry folder}
O=${2:?output folder}
LSRC=${3:-}
PRESET=${PRESET:-qwen3.6-27b}
TYPE=${TYPE:-q4_k_m}
KVS=${KVS-"q8_0 f16"}
PROMPTS=${PROMPTS-"512 4096"}
DEPTHS=${DEPTHS-"0 4096 32768"}
G=${G:-128}
REPS=${REPS:-2}
DRAFTS=${DRAFTS-"1 2 3"}
SNUG_KVS=${SNUG_KVS-"tq4 tq3 q8_0/tq4"}
WARM_REPS=${WARM_REPS:-2}
ARCH=${CUDA_ARCH:-90a}
W=$T/gpu-bench
mkdir -p "$O" "$W"
el() { echo "[$(date -u +%T)] $*"; }
[ -d "$C/lib" ] || tar xJf "$C/lib.tar.xz" -C "$C"
export LD_LIBRARY_PATH="$PWD/$C/lib:${LD_LIBRARY_PATH:-}"
S="$C/snug"
LINES="$O/lines.txt"
: > "$LINES"
echo "card $(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)" >> "$LINES"
echo "snug $($S --version 2>&1 | head -1)" >> "$LINES"

# 1. llama.cpp: build in the background while the model is written
LB=""
if [ -n "$LSRC" ] && [ "${NO_LLAMA:-0}" != 1 ]; then
  (
    set -e
    if [ -d "$LSRC" ]; then SRC="$LSRC"; else
      mkdir -p $T/llama-src && tar xJf "$LSRC" -C $T/llama-src
      SRC=$(dirname "$(ls -d $T/llama-src/*/CMakeLists.txt | head -1)")
    fi
    cmake -S "$SRC" -B $T/llama-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF > "$W/llama-cmake.log" 2>&1
    cmake --build $T/llama-build -j "$(nproc)" --target llama-bench > "$W/llama-build.log" 2>&1
  ) &
  BUILD_PID=$!
fi

# 2. the ceilings
el "ceilings"
"$C/bench_cuda_ops" ceilings 2>&1 | tee "$W/ceilings.txt" | grep -E "device:|ceiling" | sed 's/^/ceil /' >> "$LINES"

# 3. the model
M=${MODEL:-$T/$PRESET-$TYPE.gguf}
if [ ! -f "$M" ]; then
  el "snug gen $PRESET $TYPE"
  VOC=""
  [ -f "$C/vocab.gguf" ] && VOC="--vocab-from $C/vocab.gguf"
  $S gen --preset "$PRESET" --type "$TYPE" $VOC -o "$M" > "$W/gen.log" 2>&1 ||
    { echo "gpu.sh: snug gen failed"; tail -5 "$W/gen.log"; exit 1; }
fi
echo "model $M $(stat -c %s "$M")" >> "$LINES"
$S info -m "$M" > "$W/info.txt" 2>&1
for kv in $KVS $SNUG_KVS; do
  ka=$(echo "$kv" | sed 's#/# --kv-v #; s#^#--kv-k #')
  [ "${kv#*/}" = "$kv" ] && ka="--kv $kv"
  $S plan -m "$M" --ctx 65536 $ka --backend cuda --json > "$W/plan-$(echo $kv | tr / _).json" 2>/dev/null
done

# 4. prompts: random words cut to the token counts (the same text for both engines)
python3 - "$S" "$M" "$W" $PROMPTS $DEPTHS 4096 <<'PY' || { echo "gpu.sh: writing the prompts failed"; exit 1; }
import random, subprocess, sys, json
snug, model, w, sizes = sys.argv[1], sys.argv[2], sys.argv[3], sorted({int(a) for a in sys.argv[4:]})
random.seed(7)
vocab = [''.join(random.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(random.randint(2, 8)))
         for _ in range(5000)]
# these words take about 2.9 tokens each: max/2 words give every size its full count
text = ' '.join(random.choice(vocab) for _ in range(int(max(sizes) / 2) + 2000))
ids = json.loads(subprocess.run([snug, 'tokenize', '-m', model, '--text', text],
                                capture_output=True, text=True, check=True).stdout)
if len(ids) < max(sizes):
    sys.exit(f'gpu.sh: the prompt text has {len(ids)} tokens, fewer than {max(sizes)}')
words = text.split(' ')
for n in sizes:
    if n == 0:
        open(f'{w}/prompt-0.txt', 'w').write('hello')
        continue
    lo, hi = 1, len(words)  # the longest word prefix with at most n tokens
    while lo < hi:
        mid = (lo + hi + 1) // 2
        k = len(json.loads(subprocess.run([snug, 'tokenize', '-m', model, '--text', ' '.join(words[:mid])],
                                          capture_output=True, text=True, check=True).stdout))
        lo, hi = (mid, hi) if k <= n else (lo, mid - 1)
    open(f'{w}/prompt-{n}.txt', 'w').write(' '.join(words[:lo]))
PY

# one snug run: KV args, prompt size, decoded tokens, extra flags; its summary line into LINES
snug_run() { # tag kvargs size n [flags]
  tag=$1 ka=$2 n0=$3 n=$4
  shift 4
  ctx=$((n0 + n + 64))
  [ $ctx -lt 4096 ] && ctx=4096
  timeout 300 $S run --backend cuda -m "$M" --ctx $ctx $ka -f "$W/prompt-$n0.txt" -n "$n" --temp 0 \
    "$@" > "$W/run.out" 2> "$W/run.err"
  rc=$?
  line="$(grep "snug run: load" "$W/run.err" | tail -1) $(grep "snug run: speculative" "$W/run.err" | tail -1)"
  [ $rc = 0 ] || { line="rc=$rc $(tail -1 "$W/run.err")"; }
  echo "snug $tag $line" >> "$LINES"
  echo "  snug $tag: $line"
}
# one snug bench-local (warm, llama-bench's shape): its pp/tg result lines into LINES
snug_warm() { # tag kvargs bench-local flags...
  tag=$1 ka=$2
  shift 2
  timeout 300 $S bench-local --backend cuda -m "$M" $ka --reps "$WARM_REPS" "$@" \
    > "$W/bl.out" 2> "$W/bl.err"
  rc=$?
  line=$(grep -E "^(pp|tg)[0-9]+" "$W/bl.out" | tr '\n' ' ')
  [ $rc = 0 ] && [ -n "$line" ] || line="rc=$rc $(tail -1 "$W/bl.err")"
  echo "snug $tag $line" >> "$LINES"
  echo "  snug $tag: $line"
}
kvargs() { case "$1" in */*) echo "--kv-k ${1%/*} --kv-v ${1#*/}" ;; *) echo "--kv $1" ;; esac; }

llama_run() { # tag args...
  tag=$1
  shift
  timeout 400 "$LB" -m "$M" -fa 1 -ngl 99 -o jsonl "$@" > "$W/lb.out" 2> "$W/lb.err"
  rc=$?
  [ $rc = 0 ] || { echo "llama $tag rc=$rc $(tail -2 "$W/lb.err" | tr '\n' ' ')" >> "$LINES"; return; }
  sed "s/^/llama $tag /" "$W/lb.out" >> "$LINES"
  echo "  llama $tag: $(wc -l < "$W/lb.out") results"
}

# 5. snug alone first (while llama-bench builds): compressed caches (decode at 4K), MTP drafts
# (every draft is rejected on random weights: the step's cost per emitted token is the
# speculative step's own); then, per repetition, snug's side and llama.cpp's for each KV format
for kv in $SNUG_KVS; do snug_run "kv=$kv depth=4096" "$(kvargs "$kv")" 4096 "$G"; done
first_kv=$(echo $KVS | cut -d' ' -f1)
[ -n "$first_kv" ] && for k in 0 $DRAFTS; do
  snug_run "kv=$first_kv depth=4096 draft=$k" "$(kvargs "$first_kv")" 4096 "$G" --spec-draft "$k" \
    --spec-adapt off
done
r=0
while [ $r -lt "$REPS" ]; do
  for kv in $KVS; do
    ka=$(kvargs "$kv")
    el "rep $r kv $kv: snug"
    for p in $PROMPTS; do snug_run "kv=$kv prompt=$p" "$ka" "$p" 16; done
    for d in $DEPTHS; do snug_run "kv=$kv depth=$d" "$ka" "$d" "$G"; done
    if [ "$WARM_REPS" -gt 0 ]; then
      for p in $PROMPTS; do snug_warm "kv=$kv warm prompt=$p" "$ka" -p "$p" -n 0; done
      for d in $DEPTHS; do snug_warm "kv=$kv warm depth=$d" "$ka" -p 0 -n "$G" -d "$d"; done
    fi
  done
  if [ -n "${BUILD_PID:-}" ]; then
    el "waiting for llama-bench's build"
    wait $BUILD_PID && LB=$T/llama-build/bin/llama-bench
    [ -x "$LB" ] || { echo "gpu.sh: llama-bench did not build"; tail -20 "$W/llama-build.log"; LB=""; }
    BUILD_PID=""
  fi
  for kv in $KVS; do
    if [ -n "$LB" ]; then
      el "rep $r kv $kv: llama.cpp"
      pl=$(echo $PROMPTS | tr ' ' ',')
      dl=$(echo $DEPTHS | tr ' ' ',')
      [ -n "$pl" ] && llama_run "kv=$kv" -ctk "$kv" -ctv "$kv" -p "$pl" -n 0 -r 1
      [ -n "$dl" ] && llama_run "kv=$kv" -ctk "$kv" -ctv "$kv" -p 0 -n "$G" -d "$dl" -r 1
    fi
  done
  r=$((r + 1))
done

python3 "$(dirname "$0")/gpu_table.py" "$LINES" "$W" | tee "$O/table.txt"
cp "$W"/*.json "$W/ceilings.txt" "$O/" 2>/dev/null
echo "gpu.sh: done"
