#!/usr/bin/env python3
# bench/server_gpu.py — slots batched on one server: aggregate decode tokens/s of N concurrent
# streams against one stream alone, and the inter-token latency of N-1 streams while another
# request prefills a long prompt, against the same streams idle (not a test; results in
# docs/perf/server.md). Works against any running `snug serve` (CPU or `--backend cuda`).
#
#   python3 bench/server_gpu.py PORT [--slots N] [--max-tokens M] [--prefill P] [--vocab V]
#
# Every request is a streaming /v1/completions with a token-id prompt (ids cycle through
# 100..V-1, so any vocabulary of V tokens works), greedy (temperature 0). A stream's decode rate
# counts tokens after its first one (prompt time excluded); the aggregate rate is the sum of the
# streams' tokens after their first over the time from the earliest first token to the latest
# last token. Inter-token gaps are SSE chunk arrival times (one token per chunk on snug).
import argparse
import http.client
import json
import statistics
import threading
import time


def stream(port, prompt_ids, max_tokens, rec, start_evt=None):
    """POST one streaming completion; append (arrival time) for every text chunk to rec['t']."""
    if start_evt is not None:
        start_evt.wait()
    body = json.dumps({"prompt": prompt_ids, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    rec["t0"] = time.time()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        rec["error"] = f"HTTP {r.status}: {r.read()[:200]!r}"
        return
    rec.setdefault("t", [])
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        if "error" in ev:
            rec["error"] = str(ev["error"])
            break
        if ev.get("choices"):
            rec["t"].append(time.time())
    rec["t1"] = time.time()
    conn.close()


def ids(n, vocab, salt):
    return [100 + (salt * 7919 + i) % (vocab - 100) for i in range(n)]


def run_streams(port, n, max_tokens, vocab, salt=0):
    recs = [{} for _ in range(n)]
    go = threading.Event()
    th = [threading.Thread(target=stream, args=(port, ids(16, vocab, salt + i), max_tokens,
                                                recs[i], go)) for i in range(n)]
    for t in th:
        t.start()
    go.set()
    for t in th:
        t.join()
    return recs


def aggregate(recs):
    errs = [r["error"] for r in recs if "error" in r]
    if errs:
        raise SystemExit(f"stream error: {errs[0]}")
    toks = sum(len(r["t"]) - 1 for r in recs)
    t_first = min(r["t"][0] for r in recs)
    t_last = max(r["t"][-1] for r in recs)
    return toks / (t_last - t_first), toks


def gaps(recs, lo=None, hi=None):
    out = []
    for r in recs:
        t = r.get("t", [])
        for a, b in zip(t, t[1:]):
            if (lo is None or b >= lo) and (hi is None or a <= hi):
                out.append((b - a) * 1000.0)
    return out


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100.0 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prefill", type=int, default=32768, help="prompt tokens of the long request")
    ap.add_argument("--vocab", type=int, default=2048, help="token ids used are 100..V-1")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    n = a.slots

    one = max(aggregate(run_streams(a.port, 1, a.max_tokens, a.vocab, 1000 + k))[0]
              for k in range(a.rounds))
    many = max(aggregate(run_streams(a.port, n, a.max_tokens, a.vocab, 2000 + 10 * k))[0]
               for k in range(a.rounds))
    print(f"decode alone: {one:.1f} tok/s; {n} streams together: {many:.1f} tok/s aggregate "
          f"= {many / one:.2f}x", flush=True)

    idle = run_streams(a.port, n - 1, a.max_tokens, a.vocab, 3000)
    g_idle = gaps(idle)
    print(f"{n - 1} streams idle: inter-token p50 {pct(g_idle, 50):.1f} ms, p99 "
          f"{pct(g_idle, 99):.1f} ms ({len(g_idle)} gaps)", flush=True)

    # n-1 streams long enough to outlast the prefill; the long prompt starts once they stream
    recs = [{} for _ in range(n - 1)]
    th = [threading.Thread(target=stream, args=(a.port, ids(16, a.vocab, 4000 + i),
                                                a.max_tokens * 8, recs[i])) for i in range(n - 1)]
    for t in th:
        t.start()
    while any(len(r.get("t", [])) < 4 for r in recs) and not any("error" in r for r in recs):
        time.sleep(0.01)
    long_rec = {}
    stream(a.port, ids(a.prefill, a.vocab, 5000), 1, long_rec)
    for t in th:
        t.join()
    if "error" in long_rec:
        raise SystemExit(f"long prompt: {long_rec['error']}")
    lo, hi = long_rec["t0"], long_rec["t"][0] if long_rec.get("t") else long_rec["t1"]
    g_pre = gaps(recs, lo, hi)
    print(f"{n - 1} streams while a {a.prefill}-token prompt prefills ({hi - lo:.2f} s to its "
          f"first token): inter-token p50 {pct(g_pre, 50):.1f} ms, p99 {pct(g_pre, 99):.1f} ms "
          f"({len(g_pre)} gaps; max {max(g_pre) if g_pre else float('nan'):.1f} ms)", flush=True)
    if not g_pre:
        print("  no token of the other streams arrived during the prefill: they were frozen")


if __name__ == "__main__":
    main()
