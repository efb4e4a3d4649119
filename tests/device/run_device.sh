#!/bin/sh
# run_device.sh — build the CUDA op tests and benchmark with nvcc/gcc directly (no CMake, so
# the device machine needs none of the CLI's libraries) and run them. Used on the device
# machine: `sh tests/device/run_device.sh [outdir]`. ARCH overrides the target (default sm_90a).
set -e
OUTD=${1:-build-ops}
ARCH=${ARCH:-"-gencode=arch=compute_90a,code=sm_90a"}
mkdir -p "$OUTD"
CFLAGS="-O2 -march=native -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter -Iinclude -Isrc -Itests -I/usr/local/cuda/include -DSNUG_SOURCE_DIR=\"$PWD\""
objs=""
for f in src/core/*.c src/quant/*.c src/kv/kvfmt.c src/backend/cpu/*.c src/backend/cuda/*.c; do
  o="$OUTD/$(echo "$f" | tr / _).o"
  gcc $CFLAGS -c "$f" -o "$o" &
  objs="$objs $o"
done
for f in src/backend/cuda/*.cu; do
  o="$OUTD/$(echo "$f" | tr / _).o"
  nvcc -std=c++17 -O3 -lineinfo $ARCH -Iinclude -Isrc -c "$f" -o "$o" &
  objs="$objs $o"
done
wait
for t in test_cuda_ops bench_cuda_ops; do
  gcc $CFLAGS -c tests/device/$t.c -o "$OUTD/$t.o"
  nvcc $ARCH -o "$OUTD/$t" "$OUTD/$t.o" $objs -lcublas -lpthread -lm
done
