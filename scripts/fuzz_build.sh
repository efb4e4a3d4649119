# fuzz_build.sh — sourced by scripts/fuzz.sh and scripts/fuzz_long.sh (not run on its own):
# configures the libFuzzer build (clang, ASan + UBSan, in build-fuzz/), sets `targets` to the
# named targets (the arguments) or to every tests/fuzz/fuzz_*.c, and builds them.
# SNUG_BUILD_JOBS=N: parallel build jobs (default 2).
BUILD=build-fuzz
CC=clang cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSNUG_FUZZ=ON >/dev/null
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
fi
cmake --build "$BUILD" -j"${SNUG_BUILD_JOBS:-2}" --target "${targets[@]}"
