#!/usr/bin/env python3
"""server_replay_rss.py — RSS of `snug serve` with the prefix cache over 1,000 agent requests,
against the memory plan.

Replays the recorded agent conversation tests/data/agent_replay/sample.json (10 turns: tool
calls, tool results, thinking on) the way an agent client sends it (the whole history each
time, the recorded assistant turns without their reasoning, as src/suite/replay.c does), as
many sessions as it takes to make REQUESTS requests, CLIENTS sessions at a time. Every session
starts with a different first user message, so the cache keeps taking new entries and must
evict; every fourth session repeats an earlier one, so it also hits. Requests stream (chat
completions, `stream: true`); each must end with `data: [DONE]`.

Two servers are measured, one after the other, on the same model and flags:
  1. the baseline: no prefix cache; after boot and one warm-up request, RSS minus the plan
     total that /health reports (memory.planned_bytes) is the part of the process the plan does
     not cover (code, libraries, tokenizer, HTTP and engine threads, malloc arenas);
  2. each measured server: `--cache-ram SIZE` (and, with --cache-dir, also the disk tier);
     RSS is sampled after every request. Target: the peak RSS <= its plan total (which has the
     RAM tier in it) + the baseline; also printed: RSS at 10% of the requests and at the end
     (growth after warm-up).
Exit status 1 when a target is missed or a request fails.

  bench/server_replay_rss.py [-m MODEL.gguf] [--requests 1000] [--cache-ram 64MiB]
                             [--clients 4] [--snug build/snug] [--no-disk]
"""
import argparse
import copy
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import server_load  # noqa: E402  (its server start)
from server_load import sse_problem  # noqa: E402  (the same stream check as the load bench)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MiB = 2**20


def rss_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1]) * 1024
    return 0


def start_server(snug, model, tmp, name, extra):
    return server_load.start_server(snug, model, tmp, ["--slots", "4", "--ctx", "4096",
                                                       "--threads", "1", "--spec-draft", "0",
                                                       *extra], name=name, timeout=120)


def get_json(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", path)
    r = c.getresponse()
    d = r.read()
    c.close()
    return json.loads(d)


def stream_chat(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", "/v1/chat/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    why = f"HTTP {r.status}" if r.status != 200 else sse_problem(data)
    if why:
        raise RuntimeError(f"{why}; ends {data[-120:]!r}")
    cached = 0
    for ln in data.split(b"\n"):
        if ln.startswith(b"data: {") and b'"usage"' in ln:
            u = json.loads(ln[6:]).get("usage") or {}
            cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return cached


def client_copy(assistant):
    m = {"role": "assistant", "content": assistant.get("content") or ""}
    if assistant.get("tool_calls"):
        m["tool_calls"] = copy.deepcopy(assistant["tool_calls"])
    return m


def session_requests(doc, variant):
    """The request bodies of one replayed session; variant changes its first user message."""
    msgs = []
    if doc.get("system"):
        msgs.append({"role": "system", "content": doc["system"]})
    first = True
    for t in doc["turns"]:
        for m in t["messages"]:
            m = copy.deepcopy(m)
            if first and m["role"] == "user":
                m["content"] += f" (session {variant})"
                first = False
            msgs.append(m)
        yield {"messages": copy.deepcopy(msgs), "tools": doc.get("tools", []), "stream": True,
               "stream_options": {"include_usage": True},
               "max_tokens": doc.get("max_tokens", 64), "temperature": 0,
               "chat_template_kwargs": {"enable_thinking": doc.get("thinking", True)}}
        if t.get("assistant"):
            msgs.append(client_copy(t["assistant"]))


def replay(port, pid, doc, n_requests, n_clients):
    """n_requests requests in sessions, n_clients at a time; RSS after every request."""
    lock = threading.Lock()
    state = {"next_session": 0, "done": 0, "cached": 0, "errors": []}
    rss = []

    def worker():
        while True:
            with lock:
                if state["done"] >= n_requests:
                    return
                k = state["next_session"]
                state["next_session"] += 1
            variant = k // 4 if k % 4 == 3 else k  # every fourth session repeats an earlier one
            for body in session_requests(doc, variant):
                with lock:
                    if state["done"] >= n_requests:
                        return
                    state["done"] += 1
                try:
                    cached = stream_chat(port, body)
                except Exception as e:  # noqa: BLE001
                    with lock:
                        state["errors"].append(str(e)[:200])
                    continue
                r = rss_of(pid)
                with lock:
                    state["cached"] += cached
                    rss.append(r)

    ts = [threading.Thread(target=worker) for _ in range(n_clients)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return rss, state


def measure(a, doc, tmp, name, extra):
    p, port, log = start_server(a.snug, a.model, tmp, name, extra)
    try:
        plan = get_json(port, "/health")["memory"]["planned_bytes"]
        t0 = time.time()
        rss, st = replay(port, p.pid, doc, a.requests, a.clients)
        wall = time.time() - t0
        metrics = ""
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("GET", "/metrics")
        metrics = c.getresponse().read().decode()
        c.close()
    finally:
        p.terminate()
        rc = p.wait(timeout=60)
    ev = [ln for ln in metrics.splitlines() if ln.startswith("snug_prefix_cache_evictions_total")]
    return {"plan": plan, "rss": rss, "state": st, "wall": wall, "rc": rc, "evictions": ev}


def baseline(a, doc, tmp):
    """RSS - plan of a server without the prefix cache, after boot and one request."""
    p, port, log = start_server(a.snug, a.model, tmp, "baseline", [])
    try:
        plan = get_json(port, "/health")["memory"]["planned_bytes"]
        stream_chat(port, next(session_requests(doc, "baseline")))
        time.sleep(0.5)
        r = rss_of(p.pid)
    finally:
        p.terminate()
        p.wait(timeout=60)
    return r, plan


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "..", "shared", "fixtures",
                                                          "trained", "trained-f16.gguf"))
    ap.add_argument("--snug", default=os.path.join(ROOT, "build", "snug"))
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--cache-ram", default="64MiB")
    ap.add_argument("--no-disk", action="store_true", help="skip the --cache-dir run")
    ap.add_argument("--replay", default=os.path.join(ROOT, "tests", "data", "agent_replay",
                                                     "sample.json"))
    a = ap.parse_args()
    doc = json.load(open(a.replay))
    good = True
    with tempfile.TemporaryDirectory() as tmp:
        b_rss, b_plan = baseline(a, doc, tmp)
        base = b_rss - b_plan
        print(f"baseline (no prefix cache, after boot + 1 request): RSS {b_rss / MiB:.1f} MiB, "
              f"plan {b_plan / MiB:.1f} MiB, baseline = RSS - plan = {base / MiB:.1f} MiB")
        runs = [("ram", ["--cache-ram", a.cache_ram])]
        if not a.no_disk:
            runs.append(("ram+disk", ["--cache-ram", a.cache_ram, "--cache-dir",
                                      os.path.join(tmp, "cache")]))
        for name, extra in runs:
            m = measure(a, doc, tmp, name.replace("+", "_"), extra)
            rss, st = m["rss"], m["state"]
            if not rss:
                print(f"{name}: no request answered; errors {st['errors'][:2]}")
                good = False
                continue
            peak = max(rss)
            limit = m["plan"] + base
            w = rss[len(rss) // 10]
            ok = peak <= limit and not st["errors"] and m["rc"] == 0
            good = good and ok
            print(f"{name} ({' '.join(extra[:2])}{' + --cache-dir' if len(extra) > 2 else ''}): "
                  f"{len(rss)} requests in {m['wall']:.0f} s, {len(st['errors'])} errors "
                  f"{st['errors'][:2]}, cached tokens {st['cached']}; plan {m['plan'] / MiB:.1f} "
                  f"MiB; RSS at 10% {w / MiB:.1f}, end {rss[-1] / MiB:.1f}, peak {peak / MiB:.1f} "
                  f"MiB; limit plan + baseline {limit / MiB:.1f} MiB: "
                  f"{'ok' if ok else 'MISSED'}; {'; '.join(m['evictions'])}")
    print("all targets met" if good else "TARGET MISSED")
    sys.exit(0 if good else 1)


if __name__ == "__main__":
    main()
