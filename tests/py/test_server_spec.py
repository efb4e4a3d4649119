"""test_server_spec.py — `snug serve --spec-draft N` (MTP speculative decoding) against plain decoding.

Two servers on the trained fixture (it has an MTP block): P with --spec-draft 0, S with
--spec-draft 3 and 2 slots. Greedy completions (plain and streamed, several prompts, a reused
prefix) must be byte-identical; /metrics must show verification steps with a mean acceptance
length > 1 and per-position rates in [0, 1]; each response's timings carry draft counts; a
sampled request (temperature 0.8, seeded) completes with the asked length. The memory plan:
printed at boot, reported by /health, --budget too small refuses to start naming the largest
context that fits, a prompt longer than the context is a 400 naming both numbers. Batched
verification: a third server B with --slots 3 --spec-draft 3 gets several greedy requests at once;
each text must equal the same request alone on P, and /metrics must show that the steps holding
the verifications of 3 slots ran ONE trunk forward each (verifications batched into the step's
one snug_step, not a forward per slot). Prints
"N passed, N failed"; skips visibly without fixtures, fails with SNUG_REQUIRE_FIXTURES=1.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SNUG, Results, fixtures_dir  # noqa: E402
from test_server import stop_all, Server  # noqa: E402

PROMPTS = ["1, 2, 3, 4,", "The quick brown fox", "Once upon a time", "1, 2, 3, 4, 5, 6, 7,"]


def post(srv, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{srv.port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read().decode()


def complete(srv, prompt, n, stream=False, **kw):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": stream, **kw}
    raw = post(srv, "/v1/completions", body)
    if not stream:
        return json.loads(raw)
    text = ""
    for line in raw.splitlines():
        if line.startswith("data: ") and line[6:].strip() != "[DONE]":
            ev = json.loads(line[6:])
            for c in ev.get("choices", []):
                text += c.get("text", "")
    return {"choices": [{"text": text}]}


def metrics(srv):
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/metrics", timeout=30) as r:
        body = r.read().decode()
    out = {}
    for line in body.splitlines():
        m = re.match(r'^(snug_(?:spec|engine)_[a-z_]+)(\{position="(\d+)"\})? (\S+)$', line)
        if m:
            key = m.group(1) + (f"[{m.group(3)}]" if m.group(3) else "")
            out[key] = float(m.group(4))
    return out


CONCURRENT = ["1, 2, 3, 4,", "The quick brown fox", "Once upon a time", "def main(",
              "import os", "x = [1, 2,"]


def batched_verify(res, P, model, tmp, servers):
    """--slots 3 --spec-draft 3: concurrent greedy requests equal each alone on P (plain), and the
    steps with the verifications of several slots run one trunk forward each."""
    # (a fixed 3 drafts: the adaptation could give a slot a plain step where this counts
    # the verifications of all three slots in one step)
    B = Server(model, tmp, "B", "--spec-draft", "3", "--spec-adapt", "off", "--slots", "3",
               "--ctx", "512")
    servers.append(B)
    n = 64
    alone = {p: complete(P, p, n)["choices"][0]["text"] for p in CONCURRENT}
    for rnd in range(2):  # two rounds of all the prompts at once (the queue holds the rest)
        out = {}

        def worker(p):
            out[p] = complete(B, p, n)["choices"][0]["text"]
        ts = [threading.Thread(target=worker, args=(p,)) for p in CONCURRENT]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for p in CONCURRENT:
            res.check(out.get(p) == alone[p] and len(alone[p]) > 0,
                      f"round {rnd}: {p!r} x{n} on 3 speculative slots at once == alone, plain")
    m = metrics(B)
    steps, runs = m.get("snug_spec_verify_steps_total", 0), m.get("snug_spec_verify_runs_total", 0)
    fw, mx = m.get("snug_spec_verify_forwards_total", -1), m.get("snug_spec_verify_runs_max", 0)
    res.check(mx == 3, f"a step held the verifications of all 3 slots (most in one step: {mx:.0f})")
    res.check(steps > 0 and fw == steps,
              f"one trunk forward per step holding verifications ({fw:.0f} forwards, {steps:.0f} steps)")
    res.check(runs > 1.5 * steps,
              f"verifications batched: {runs:.0f} verifications in {steps:.0f} steps (forwards "
              f"{fw:.0f}, not one per verification)")
    res.check(m.get("snug_engine_forwards_total", 0) >= fw, "engine forwards counted")
    res.check(m.get("snug_spec_adapt", -1) == 0 and m.get("snug_spec_draft_length_chosen") == 3
              and m.get("snug_spec_steps_total", 0) >= m.get("snug_spec_drafts_total", 1),
              f"--spec-adapt off: 3 drafts every step ({m.get('snug_spec_draft_length_chosen')}, "
              f"{m.get('snug_spec_steps_total')} steps, {m.get('snug_spec_drafts_total')} "
              f"verifications)")


def main():
    res = Results()
    fx = fixtures_dir(res)
    if fx is None:
        res.done()
    model = os.path.join(fx, "trained", "trained-f16.gguf")
    with tempfile.TemporaryDirectory() as tmp:
        servers = []
        try:
            P = Server(model, tmp, "P", "--spec-draft", "0", "--ctx", "512")
            servers.append(P)
            S = Server(model, tmp, "S", "--spec-draft", "3", "--slots", "2", "--ctx", "512")
            servers.append(S)
            h = S.health()
            mem = h.get("memory", {})
            res.check(mem.get("planned_bytes", 0) > 1 << 20 and mem.get("planned_items", 0) >= 5
                      and h["plan"].get("spec_draft") == 3,
                      f"/health reports the plan ({mem.get('planned_bytes')} bytes, "
                      f"{mem.get('planned_items')} items) next to RSS {mem.get('rss_bytes')}")
            log = open(os.path.join(tmp, "S.log")).read()
            res.check("memory plan: 2 slot(s) x ctx 512" in log and "state snapshots (mtp)" in log,
                      "the plan table is printed at boot")
            try:
                post(S, "/v1/completions", {"prompt": "a " * 600, "max_tokens": 2})
                code, msg = 200, ""
            except urllib.error.HTTPError as ex:
                code, msg = ex.code, ex.read().decode()
            res.check(code == 400 and "601" in msg and "512" in msg,
                      f"prompt longer than the planned context: 400 naming both numbers ({code})")
            p = subprocess.run([SNUG, "serve", "-m", model, "--port", "0", "--ctx", "4096", "--slots",
                                "2", "--budget", "20MiB"], capture_output=True, text=True, timeout=60)
            m = re.search(r"largest context that fits is (\d+)", p.stderr)
            res.check(p.returncode != 0 and m and 0 < int(m.group(1)) < 4096,
                      f"--budget 20MiB refuses to start, naming the largest context ({m and m.group(1)})")
            res.check("snug_spec_drafts_total" not in metrics(P), "--spec-draft 0: no spec metrics")
            for i, p in enumerate(PROMPTS):
                n = 24 + 9 * i
                a = complete(P, p, n)
                b = complete(S, p, n)
                ta, tb = a["choices"][0]["text"], b["choices"][0]["text"]
                res.check(ta == tb and len(ta) > 0, f"greedy {p!r} x{n}: speculative == plain")
                res.check(a["usage"]["completion_tokens"] == b["usage"]["completion_tokens"],
                          f"greedy {p!r}: same completion_tokens")
                t = b.get("timings", {})
                res.check(t.get("spec_steps", 0) > 0 and 0 <= t.get("draft_n_accepted", -1) <= t.get("draft_n", -1),
                          f"timings carry draft counts ({t.get('draft_n')}, {t.get('draft_n_accepted')}, "
                          f"{t.get('spec_steps')} steps)")
                sa = complete(P, p, n, stream=True)["choices"][0]["text"]
                sb = complete(S, p, n, stream=True)["choices"][0]["text"]
                res.check(sa == sb == ta, f"streamed greedy {p!r}: speculative == plain")
            # a prompt extending a previous one reuses the slot cache after speculative decoding
            long_p = PROMPTS[0] + complete(P, PROMPTS[0], 24)["choices"][0]["text"]
            a, b = complete(P, long_p, 20), complete(S, long_p, 20)
            res.check(a["choices"][0]["text"] == b["choices"][0]["text"],
                      "greedy after a cached prefix: speculative == plain")
            # a stop string cuts mid-step; the next request must still match
            a = complete(P, PROMPTS[3], 30, stop=["12"])
            b = complete(S, PROMPTS[3], 30, stop=["12"])
            res.check(a["choices"][0]["text"] == b["choices"][0]["text"], "stop string: speculative == plain")
            a, b = complete(P, PROMPTS[1], 30), complete(S, PROMPTS[1], 30)
            res.check(a["choices"][0]["text"] == b["choices"][0]["text"], "greedy after a stop: speculative == plain")
            r = complete(S, "Once upon a time", 40, temperature=0.8, seed=7)
            res.check(r["usage"]["completion_tokens"] >= 1 and r["choices"][0]["finish_reason"] in ("length", "stop"),
                      f"sampled speculative request completes ({r['usage']['completion_tokens']} tokens)")
            m = metrics(S)
            steps, acc = m.get("snug_spec_drafts_total", 0), m.get("snug_spec_accepted_tokens_total", 0)
            mal = m.get("snug_spec_mean_acceptance_length", 0)
            res.check(steps > 0 and mal > 1.0, f"/metrics mean acceptance length {mal:.2f} > 1 over {steps:.0f} steps")
            res.check(abs(mal - (acc + steps) / steps) < 1e-6 if steps else False,
                      "mean acceptance length = (accepted + steps) / steps")
            rates = [m.get(f"snug_spec_acceptance_rate[{k}]", -1) for k in (1, 2, 3)]
            res.check(all(0 <= x <= 1 for x in rates) and rates[0] > 0, f"per-position acceptance rates {rates}")
            res.check(m.get("snug_spec_draft_tokens_total", 0) >= acc, "draft tokens >= accepted tokens")
            # the adaptation (on by default): its gauges, and every step counted, plain ones too
            chosen, est = m.get("snug_spec_draft_length_chosen", -1), m.get("snug_spec_acceptance_estimate", -1)
            res.check(m.get("snug_spec_adapt") == 1 and 0 <= chosen <= 3 and 0 < est <= 1
                      and m.get("snug_spec_steps_total", 0) >= steps
                      and m.get("snug_spec_draft_tokens_total", 0) <= 3 * m.get("snug_spec_steps_total", 0),
                      f"--spec-adapt on: drafts chosen {chosen:.2f}, acceptance estimate {est:.3f}, "
                      f"{m.get('snug_spec_steps_total')} steps ({steps:.0f} verifications)")
            batched_verify(res, P, model, tmp, servers)
        finally:
            stop_all(res, servers)
    res.done()


if __name__ == "__main__":
    main()
