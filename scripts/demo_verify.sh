#!/usr/bin/env bash
# demo_verify.sh — serve a model in the background on a free port, wait for /health, run
# `snug verify` against it, stop the server. The exit status is verify's (number of failed
# checks). Usage: scripts/demo_verify.sh [SNUG_BIN] [MODEL.gguf]
#   SNUG_BIN defaults to build/snug; MODEL defaults to the trained demo model
#   (data/demo/snug-demo-q8_0.gguf, docs/demo-model.md), which passes every check.
#   Extra serve flags: SNUG_SERVE_ARGS="--ctx 2048".
set -u
SNUG=${1:-build/snug}
MODEL=${2:-}
TMP=$(mktemp -d)
trap 'if [ -n "${PID:-}" ]; then kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; fi; rm -rf "$TMP"' EXIT
[ -n "$MODEL" ] || MODEL=$(dirname "$0")/../data/demo/snug-demo-q8_0.gguf
# shellcheck disable=SC2086
"$SNUG" serve -m "$MODEL" --port 0 --port-file "$TMP/port" ${SNUG_SERVE_ARGS:-} 2>"$TMP/serve.log" &
PID=$!
for _ in $(seq 1 600); do
    [ -s "$TMP/port" ] && break
    if ! kill -0 "$PID" 2>/dev/null; then
        echo "demo_verify: snug serve exited:" >&2
        cat "$TMP/serve.log" >&2
        exit 1
    fi
    sleep 0.1
done
URL="http://127.0.0.1:$(cat "$TMP/port")"
for _ in $(seq 1 600); do
    curl -fsS "$URL/health" >/dev/null 2>&1 && break
    sleep 0.1
done
echo "demo_verify: snug serve on $URL ($MODEL)"
"$SNUG" verify --url "$URL"
RC=$?
exit $RC
