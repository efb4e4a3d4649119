#!/usr/bin/env python3
# bench/server_concurrency.py — aggregate generation tokens/s of a running `snug serve` with N
# concurrent /v1/completions requests (not a test; results in docs/perf/server.md).
#
#   python3 bench/server_concurrency.py PORT N [MAX_TOKENS] [ROUNDS]
#
# Starts N threads, each POSTing {"prompt": "Request i: once upon a time", "max_tokens": M,
# "temperature": 0.8, "seed": i}; prints the sum of completion_tokens over the
# wall time from the first send to the last answer, best of ROUNDS (default 3).
import json
import sys
import threading
import time
import urllib.request


def one(port, i, max_tokens, out):
    body = json.dumps({"prompt": f"Request {i}: once upon a time", "max_tokens": max_tokens,
                       "temperature": 0.8, "seed": i}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out[i] = json.load(r)["usage"]["completion_tokens"]


def run(port, n, max_tokens):
    out = [0] * n
    th = [threading.Thread(target=one, args=(port, i, max_tokens, out)) for i in range(n)]
    t0 = time.time()
    for t in th:
        t.start()
    for t in th:
        t.join()
    dt = time.time() - t0
    return sum(out), dt


def main():
    port, n = int(sys.argv[1]), int(sys.argv[2])
    max_tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    best = 0.0
    for _ in range(rounds):
        toks, dt = run(port, n, max_tokens)
        best = max(best, toks / dt)
        print(f"  {n} requests: {toks} tokens in {dt:.2f} s = {toks / dt:.1f} tok/s", flush=True)
    print(f"best {best:.1f} tok/s aggregate ({n} concurrent, {max_tokens} max tokens)")


if __name__ == "__main__":
    main()
