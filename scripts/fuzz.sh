#!/usr/bin/env bash
# fuzz.sh — build every libFuzzer target (tests/fuzz/fuzz_*.c) with clang and run each for a
# given time on its seed corpus (tests/fuzz/corpus-<name>/, e.g. corpus-server-http for
# fuzz_server_http). New inputs go to a scratch corpus under the build folder, so the seeds in
# the repository stay as they are; a crash leaves its input in build-fuzz/crashes/<target>/.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)] [TARGET ...]
#   SNUG_FUZZ_JOBS=N   run N targets at a time (default 1)
#   SNUG_FUZZ_SEED=N   libFuzzer's random seed (default: a new one per run); CI fixes it so a
#                      red CI run can be replayed, long runs leave it unset to explore more
# Exit status: non-zero when a target fails to build or finds a crash, leak or timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-60}"
shift || true
. scripts/fuzz_build.sh # sets BUILD and targets, builds them
fail=0
run_one() {
  local t="$1" seeds="tests/fuzz/corpus-${1#fuzz_}"
  seeds="${seeds//_/-}"
  local work="$BUILD/corpus/$t" crashes="$BUILD/crashes/$t"
  mkdir -p "$work" "$crashes"
  local args=("$work")
  [ -d "$seeds" ] && args+=("$seeds")
  [ -n "${SNUG_FUZZ_SEED:-}" ] && args+=("-seed=$SNUG_FUZZ_SEED")
  local log="$BUILD/$t.log"
  if "$BUILD/$t" "${args[@]}" -max_total_time="$SECS" -timeout=25 -rss_limit_mb=4096 \
      -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1; then
    local execs
    execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
    echo "fuzz: $t ok, ${execs:-?} executions in ${SECS} s, corpus $(ls "$work" | wc -l) inputs"
  else
    echo "fuzz: $t FAILED (see $log; inputs in $crashes/)"
    tail -n 30 "$log"
    return 1
  fi
}
jobs_max="${SNUG_FUZZ_JOBS:-1}"
pids=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs_max" ]; then
    wait "${pids[0]}" || fail=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || fail=1; done
exit $fail
