#!/usr/bin/env bash
# test.sh — the whole test suite, as CI runs it: dependencies, a format check, then the
# Release build and the ASan+UBSan build, each with every ctest test (C unit, e2e, Python).
# Usage: scripts/test.sh            (SNUG_REQUIRE_FIXTURES=1 makes missing fixtures a failure)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --python
# deps.sh --python installs chromium: the chat-page browser test must then run, not skip
export SNUG_REQUIRE_BROWSER=${SNUG_REQUIRE_BROWSER:-1}

echo "== clang-format check"
files=$(git ls-files 'src/*.c' 'src/*.h' 'include/*.h' 'tests/*.c' 'tests/*.h' 2>/dev/null || true)
if [ -n "$files" ]; then clang-format --dry-run --Werror $files; fi

jobs=$(nproc)
echo "== Release build"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
(cd build && ctest --output-on-failure -j "$jobs")
echo "== docs/PICKER.md is current (scripts/picker.py --check)"
python3 scripts/picker.py --snug build/snug --check

echo "== ASan+UBSan build"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DSNUG_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j "$jobs")

echo "== fuzzing, short form (30 s per target; scripts/fuzz.sh SECONDS for longer runs)"
SNUG_FUZZ_SEED="${SNUG_FUZZ_SEED:-20261201}" SNUG_FUZZ_JOBS="$jobs" scripts/fuzz.sh "${SNUG_FUZZ_SECONDS:-30}"
