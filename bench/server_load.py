#!/usr/bin/env python3
"""server_load.py — `snug serve` under hostile load, loopback only, bounded in time and count.

Starts its own server (the trained fixture model unless -m is given; --slots 4, an API key)
and runs three phases, printing one line of numbers each (docs/perf/server.md):
  1. idle + streams: IDLE idle keep-alive connections held open while 32 clients stream chat
     completions; /health is polled throughout: p50/p99 latency, stream errors;
  2. keyless bodies: 100 requests without the key, each announcing and sending an 8 MiB body
     (10 at a time): the server's RSS growth (it must answer 401 before reading a body);
  3. mixed traffic for SECONDS: valid chats and completions, malformed JSON, unknown fields,
     bad keys, oversized bodies, /tokenize, /metrics, dropped streams, from 16 threads; RSS
     sampled every second: the spread after warm-up.
Exit status 1 when a target is missed (p99 < 100 ms and 0 stream errors; growth < 16 MiB; the
mixed-traffic RSS flat within 16 MiB).

  bench/server_load.py [-m MODEL.gguf] [--idle 2000] [--seconds 120] [--snug build/snug]
                       [--failures FILE]  (each failed stream written whole to FILE)
"""
import argparse
import http.client
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KEY = "load-key"
FAILURES = None  # --failures FILE: where failed streams are written whole


def rss_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1]) * 1024
    return 0


LOAD_ARGS = ["--slots", "4", "--ctx", "1024", "--queue", "64", "--threads", "1", "--api-key", KEY,
             "--max-conns", "8192", "--max-conns-per-ip", "8192"]


def start_server(snug, model, tmp, args=LOAD_ARGS, name="server", timeout=60):
    """`snug serve -m model args` on a free port (--port-file); (process, port, log file)."""
    pf = os.path.join(tmp, name + ".port")
    log = open(os.path.join(tmp, name + ".log"), "w+")
    p = subprocess.Popen([snug, "serve", "-m", model, "--port", "0", "--port-file", pf, *args],
                         stdout=subprocess.DEVNULL, stderr=log)
    t0 = time.time()
    while not (os.path.exists(pf) and open(pf).read().strip()):
        if p.poll() is not None or time.time() - t0 > timeout:
            log.seek(0)
            sys.exit(f"server did not start:\n{log.read()}")
        time.sleep(0.05)
    return p, int(open(pf).read()), log


def request(port, method, path, body=None, key=KEY, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def sse_problem(data):
    """Why an SSE body is not a complete, error-free stream (None when it is): every event's
    data is a JSON object without a top-level "error" key, and the last one is [DONE]. Parsed
    event by event: a delta whose text is the token `error` is content, not an error (the old
    substring test took `{"reasoning_content":"error"}` for an error event)."""
    events = [ln[len(b"data: "):] for ln in data.split(b"\n") if ln.startswith(b"data: ")]
    if not events or events[-1].strip() != b"[DONE]":
        return "no data: [DONE] at the end"
    for ev in events[:-1]:
        if ev.strip() == b"[DONE]":
            return "data: [DONE] before the end"
        try:
            obj = json.loads(ev)
        except ValueError:
            return f"an event is not JSON: {ev[:80]!r}"
        if not isinstance(obj, dict):
            return f"an event is not a JSON object: {ev[:80]!r}"
        if "error" in obj:
            return f"an error event: {ev[:160]!r}"
    return None


class StreamError(RuntimeError):
    """A stream that did not end with data: [DONE]; keeps the whole answer for the record."""

    def __init__(self, msg, status, headers, data):
        super().__init__(msg)
        self.status, self.headers, self.data = status, headers, data


def stream_chat(port, i, max_tokens=48):
    body = {"messages": [{"role": "user", "content": f"Tell me about load {i}."}],
            "max_tokens": max_tokens, "stream": True}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", "/v1/chat/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
    r = c.getresponse()
    data = r.read()
    c.close()
    why = f"HTTP {r.status}" if r.status != 200 else sse_problem(data)
    if why:
        raise StreamError(f"stream {i}: {why}; ends {data[-80:]!r}", r.status, r.getheaders(),
                          data)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def phase_idle(port, n_idle, seconds=20):
    idle = []
    for _ in range(n_idle):
        idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
    errors, done = [], [0]
    stop_at = time.time() + seconds
    lock = threading.Lock()

    def client(i):
        while time.time() < stop_at:
            try:
                stream_chat(port, i)
                with lock:
                    done[0] += 1
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(str(e)[:300])
                    if isinstance(e, StreamError) and FAILURES:
                        with open(FAILURES, "ab") as f:  # the whole answer, for the record
                            f.write(f"--- {e}\nstatus {e.status} headers {e.headers}\n"
                                    .encode() + e.data + b"\n")

    ts = [threading.Thread(target=client, args=(i,)) for i in range(32)]
    [t.start() for t in ts]
    lat = []
    while time.time() < stop_at:
        t0 = time.time()
        st, _ = request(port, "GET", "/health", key=None, timeout=10)
        lat.append((time.time() - t0) * 1e3 if st == 200 else 1e9)
        time.sleep(0.02)
    [t.join() for t in ts]
    for s in idle:
        s.close()
    p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
    print(f"idle+streams: {n_idle} idle connections, 32 streaming clients for {seconds} s: "
          f"{done[0]} streams done, {len(errors)} errors {errors[:2]}; /health n={len(lat)} "
          f"p50 {p50:.1f} ms p99 {p99:.1f} ms")
    return p99 < 100 and not errors


def phase_keyless(port, pid):
    body = b"x" * (8 << 20)
    before = rss_of(pid)
    peak = [before]
    stop = [False]

    def sampler():
        while not stop[0]:
            peak[0] = max(peak[0], rss_of(pid))
            time.sleep(0.01)

    th = threading.Thread(target=sampler)
    th.start()
    statuses = []
    lock = threading.Lock()

    def one():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\nContent-Length: "
                      + str(len(body)).encode() + b"\r\n\r\n")
            try:
                s.sendall(body)
            except OSError:
                pass  # the server answered and closed before the body: the point
            got = s.recv(4096)
            s.close()
            with lock:
                statuses.append(int(got.split(b" ")[1]) if got.startswith(b"HTTP/") else 0)
        except Exception:  # noqa: BLE001
            with lock:
                statuses.append(-1)

    for k in range(10):
        ts = [threading.Thread(target=one) for _ in range(10)]
        [t.start() for t in ts]
        [t.join() for t in ts]
    stop[0] = True
    th.join()
    growth = (peak[0] - before) / 2**20
    n401 = statuses.count(401)
    print(f"keyless bodies: 100 x 8 MiB without the key: {n401} answered 401, peak RSS growth "
          f"{growth:.1f} MiB (RSS {before / 2**20:.1f} -> peak {peak[0] / 2**20:.1f} MiB)")
    return growth < 16 and n401 == 100


def phase_mixed(port, pid, seconds):
    stop_at = time.time() + seconds
    counts = {}
    lock = threading.Lock()

    def note(k):
        with lock:
            counts[k] = counts.get(k, 0) + 1

    msgs = [{"role": "user", "content": "hi"}]
    kinds = [
        lambda: request(port, "POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 8}),
        lambda: request(port, "POST", "/v1/completions", {"prompt": "def f(", "max_tokens": 8}),
        lambda: request(port, "POST", "/v1/chat/completions", b"{not json"),
        lambda: request(port, "POST", "/v1/chat/completions", {"messages": msgs, "x": [1] * 999,
                                                               "max_tokens": 2}),
        lambda: request(port, "POST", "/v1/chat/completions", {"messages": msgs}, key="bad"),
        lambda: oversized(port),
        lambda: request(port, "POST", "/tokenize", {"content": "hello " * 2000,
                                                    "with_pieces": True}),
        lambda: request(port, "GET", "/metrics"),
        lambda: request(port, "POST", "/v1/chat/completions",
                        {"messages": msgs, "tools": [{"type": "function",
                                                      "function": {"name": "f",
                                                                   "parameters": "junk"}}]}),
        lambda: request(port, "GET", "/v1/chat/completions"),
    ]

    def oversized(port):
        # 9 MiB announced, over the 8 MiB limit, as curl sends a large body: with "Expect:
        # 100-continue" the body follows a 100; the server drops it as it arrives, then 413
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                  KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: " +
                  str(9 << 20).encode() + b"\r\nExpect: 100-continue\r\n\r\n")
        got = s.recv(4096)
        if got.startswith(b"HTTP/1.1 100"):
            try:
                s.sendall(b"y" * (9 << 20))
                got = s.recv(4096)
            except OSError:
                got = b""
        s.close()
        return (int(got.split(b" ")[1]) if got.startswith(b"HTTP/") else 0), got

    def dropped_stream():
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        b = json.dumps({"prompt": "x", "stream": True, "max_tokens": 200}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                  KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: " +
                  str(len(b)).encode() + b"\r\n\r\n" + b)
        s.recv(4096)
        s.close()
        return 0, b""

    kinds.append(dropped_stream)

    def worker(i):
        k = i
        while time.time() < stop_at:
            k = (k + 7) % len(kinds)
            try:
                st, _ = kinds[k]()
                note(st)
            except Exception as e:  # noqa: BLE001
                note(type(e).__name__)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    [t.start() for t in ts]
    rss = []
    died = None
    while time.time() < stop_at:
        r = rss_of(pid)
        if not r and died is None:
            died = time.time() + seconds - stop_at
            print(f"mixed traffic: the server process is gone after {died:.0f} s")
        rss.append(r)
        time.sleep(1)
    [t.join() for t in ts]
    warm = [x for x in rss[len(rss) // 5:] if x] or [0]
    spread = (max(warm) - min(warm)) / 2**20
    print(f"mixed traffic: {seconds} s, 16 threads, answers {dict(sorted(counts.items(), key=str))};"
          f" RSS after warm-up {min(warm) / 2**20:.1f}..{max(warm) / 2**20:.1f} MiB "
          f"(spread {spread:.1f} MiB), end {rss[-1] / 2**20:.1f} MiB")
    # the trajectory: RSS at every tenth of the run (growth vs settling)
    tenths = [rss[min(len(rss) - 1, k * len(rss) // 10)] / 2**20 for k in range(1, 11)]
    print("mixed traffic: RSS at each tenth (MiB): " + " ".join(f"{x:.1f}" for x in tenths))
    return spread < 16 and died is None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "..", "shared", "fixtures",
                                                          "trained", "trained-f16.gguf"))
    ap.add_argument("--snug", default=os.path.join(ROOT, "build", "snug"))
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--failures", help="append every failed stream's whole answer to this file")
    a = ap.parse_args()
    global FAILURES
    FAILURES = a.failures
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, a.idle + 1024)), hard))
    with tempfile.TemporaryDirectory() as tmp:
        p, port, log = start_server(a.snug, a.model, tmp)
        try:
            ok1 = phase_idle(port, a.idle)
            ok2 = phase_keyless(port, p.pid)
            ok3 = phase_mixed(port, p.pid, a.seconds)
        finally:
            p.terminate()
            rc = p.wait(timeout=60)
        print(f"server exit status {rc}")
        log.seek(0)
        tail = [ln for ln in log.read().splitlines() if ln.startswith("snug serve: signal")]
        print("server log:", tail[-1] if tail else "(no signal line)")
        good = ok1 and ok2 and ok3 and rc == 0
        print("all targets met" if good else "TARGET MISSED")
        sys.exit(0 if good else 1)


if __name__ == "__main__":
    main()
