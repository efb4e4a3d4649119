#!/bin/sh
# pack_devcarry.sh — what a device run needs, from a build made HERE (the device machine has
# no -dev packages): D/lib.tar.xz holding snug, libsnug_cuda.so (the CUDA backend snug loads
# at run time from its own directory), bench_cuda_ops, test_cuda_ops,
# test_mtp_device, test_vision_spec and test_prefix_mtp (when built) and lib/ (the shared libraries `ldd` lists, minus libc/loader and the CUDA libraries the
# device has; the device scripts unpack it into D), D/fx/{trained,moe} (fixture files for run_e2e_device.sh / run_mtp_device.sh),
# D/fx/vision (the vision fixture and its references, tests/data/vision, and vision-mtp.gguf made
# from it by tests/py/vision_mtp.py, which needs PyPI `gguf`: run_vision_device.sh).
# D should be under devcarry/ (ignored by git) and named in the `run` tool's carry list.
# Usage: [NOFX=1] [BINS="snug libsnug_cuda.so ..."] sh tests/device/pack_devcarry.sh BUILD_DIR D
#   (BUILD_DIR configured with nvcc present and -DSNUG_NATIVE=OFF; build its targets snug,
#   bench_cuda_ops and test_cuda_ops first)
B=${1:?build dir}
D=${2:?carry dir}
FX=${FX:-$(dirname "$0")/../../../shared/fixtures}
set -e
rm -rf "$D" && mkdir -p "$D/lib" "$D/fx"
ALL="snug libsnug_cuda.so bench_cuda_ops test_cuda_ops test_mtp_device test_vision_spec test_prefix_mtp"
for t in ${BINS:-$ALL}; do
  f=$(find "$B" -maxdepth 3 -type f -name $t -perm -u+x | head -1)
  [ -n "$f" ] && cp "$f" "$D/" && strip --strip-unneeded "$D/$t"
done
ldd "$D/snug" | awk '/=>/ {print $3}' |
  grep -v -E 'libc\.so|ld-linux|libm\.so|libpthread|libdl\.so|librt\.so|libcuda|libcublas|libcudart|libnvidia' |
  while read -r l; do cp -L "$l" "$D/lib/"; done
# the binaries travel inside the archive too (carry is 64 MiB with the tracked tree). They hold
# the same device code several times over: one solid xz stream with a dictionary larger than a
# binary (-9e: 64 MiB) stores the repeats once (about half the size of plain `tar cJf`); BINS
# names a subset to carry
bins=$(cd "$D" && ls ${BINS:-$ALL} 2>/dev/null || true)
tar cf - -C "$D" lib $bins | xz -9e -T2 > "$D/lib.tar.xz" && (cd "$D" && rm -rf lib $bins)
[ "${NOFX:-0}" = 1 ] || for m in trained moe; do
  mkdir -p "$D/fx/$m"
  cp "$FX/$m"/*.gguf "$FX/$m"/*.json "$FX/$m"/*.f32 "$D/fx/$m/" 2>/dev/null || true
done
# the Qwen vocabulary, for `snug gen --vocab-from` (run_prefix_device.sh: a 27B that tokenizes chats)
[ "${NOFX:-0}" = 1 ] || { mkdir -p "$D/fx/tokenizer" &&
  cp "$FX/tokenizer/ggml-vocab-qwen35.gguf" "$D/fx/tokenizer/" 2>/dev/null || true; }
[ "${NOFX:-0}" = 1 ] || { mkdir -p "$D/fx/vision" &&
  cp "$(dirname "$0")"/../data/vision/* "$D/fx/vision/" &&
  python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import vision_mtp; vision_mtp.make(sys.argv[2])' \
    "$(dirname "$0")/../py" "$D/fx/vision/vision-mtp.gguf" ||
  echo "pack_devcarry: no vision-mtp.gguf (PyPI gguf missing?): run_vision_device.sh skips part 3's CLI/server checks"; }
du -sh "$D"
