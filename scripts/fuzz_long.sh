#!/usr/bin/env bash
# fuzz_long.sh — long fuzzing runs measured in CPU time (the bar: at least 10 CPU-minutes per
# target; docs/perf/fuzz.md). Each target runs alone on its seeds plus the scratch corpus of scripts/fuzz.sh
# (build-fuzz/corpus/<target>); its CPU time (utime + stime from /proc/PID/stat) is polled every
# 5 s and the run is stopped with SIGINT once it reaches the budget, so libFuzzer prints its final
# statistics. On a shared machine the wall time says little: the CPU time is the measure.
#
#   scripts/fuzz_long.sh [CPU_SECONDS_PER_TARGET (default 620)] [TARGET ...]
#   SNUG_FUZZ_NICE=N     run the fuzzer under nice -n N (default 0)
#   TMPDIR=DIR           where fuzz_prefix makes its cache directories (default /tmp; a tmpfs
#                        such as /dev/shm keeps that target CPU-bound instead of I/O-bound)
#   SNUG_FUZZ_TIMEOUT=S  libFuzzer's per-input timeout in wall seconds (default 120: on a busy
#                        shared machine a niced fuzzer's wall time stretches; never pause one
#                        with SIGSTOP, its alarm then reports a timeout)
# One line per target is appended to build-fuzz/long-runs.tsv:
#   target, CPU seconds, executions, corpus inputs, result (ok | FAILED), commit.
# Exit status: non-zero when a target finds a crash, leak or timeout (its input is kept in
# build-fuzz/crashes/<target>/).
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET="${1:-620}"
shift || true
. scripts/fuzz_build.sh # sets BUILD and targets, builds them
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
tick=$(getconf CLK_TCK)
fail=0
for t in "${targets[@]}"; do
  seeds="tests/fuzz/corpus-${t#fuzz_}"
  seeds="${seeds//_/-}"
  work="$BUILD/corpus/$t" crashes="$BUILD/crashes/$t" log="$BUILD/$t.long.log"
  mkdir -p "$work" "$crashes"
  marker="$BUILD/.long-run-start-$t"
  touch "$marker"
  args=("$work")
  [ -d "$seeds" ] && args+=("$seeds")
  nice -n "${SNUG_FUZZ_NICE:-0}" "$BUILD/$t" "${args[@]}" -timeout="${SNUG_FUZZ_TIMEOUT:-120}" -rss_limit_mb=4096 \
    -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1 &
  pid=$!
  cpu=0
  while kill -0 "$pid" 2>/dev/null; do
    # fields 14 and 15 of /proc/PID/stat (after the command name in parentheses)
    if st=$(cat "/proc/$pid/stat" 2>/dev/null); then
      set -- ${st##*) }
      cpu=$(((${12} + ${13}) / tick))
    fi
    if [ "$cpu" -ge "$BUDGET" ]; then
      kill -INT "$pid" 2>/dev/null || true
      break
    fi
    sleep 5
  done
  wait "$pid" || true
  execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  # SIGINT at the budget ends libFuzzer with its stats; a finding ends it early with an error
  # report and a crash-/leak-/timeout-/oom- artifact (slow-unit- files are not findings)
  found=$(find "$crashes" -newer "$marker" \( -name 'crash-*' -o -name 'leak-*' \
    -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  result=ok
  if [ "$cpu" -lt "$BUDGET" ] || [ "$found" -gt 0 ] ||
    grep -q "SUMMARY: .*Sanitizer\|ERROR: libFuzzer" "$log"; then
    result=FAILED
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$cpu" "${execs:-?}" "$(ls "$work" | wc -l)" \
    "$result" "$commit" | tee -a "$BUILD/long-runs.tsv"
  [ "$result" = ok ] || fail=1
done
exit $fail
