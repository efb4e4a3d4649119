"""test_server_mixed.py — mixed engine steps in `snug serve`: while one slot prefills a long
prompt, the other slot keeps streaming.

Servers on the trained fixture with 2 slots: S with --step-prompt 16 (a prefilling slot adds at
most 16 prompt tokens to each step, beside the other slot's decode row), W with --step-prompt 512
(the chunk), U with the default --step-prompt auto, and R with one slot (the reference texts).
Slot A streams a greedy completion; once its first tokens arrived, B sends a prompt of ~1,870
tokens. Counted: A's tokens that arrive after B was sent and before B's first token. On S, B's
prefill takes ~117 steps and A gets a token in each; on W it takes 4 steps.
Also: A's streamed text equals A's text alone (its decode rows mixed with B's prompt chunks give
the same logits bit for bit), and B's greedy text equals B's text alone.
auto (U): /metrics shows the pieces the engine cut beside A's stream (snug_step_mixed_total,
snug_step_mixed_prompt_rows_total): below the 512-token chunk, at least the rule's floor of 32,
where W's fixed pieces are the chunk's; the gauge snug_step_prompt_rows is the rule applied to
the exported measurements (snug_step_decode_seconds, snug_step_prompt_row_seconds); A's and B's
texts equal the one-slot server's (whose prompt pieces are whole chunks: the texts do not depend
on where B's prompt was cut). A decode step of this small model costs less than one prompt row,
so the rule sits at its floor here; the rule's other cases are test_engine_step_budget's.
The count is of engine steps, not of time (only the few steps before B's admission depend on
the machine's speed).
Runnable as a script; prints "N passed, N failed".
"""
import json
import math
import os
import sys
import tempfile
import threading
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import Results, fixtures_dir  # noqa: E402
from test_server import KEY, Server  # noqa: E402

PROMPT_A = "import numpy as np\n\ndef "
LONG_B = "".join(f"def f{i}(x):\n    return x * {i} + {i % 7}\n\n" for i in range(110)) + "def "


def post(srv, body):
    req = urllib.request.Request(f"http://127.0.0.1:{srv.port}/v1/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {KEY}"})
    return urllib.request.urlopen(req, timeout=300)


def stream(srv, prompt, n, events, tag):
    """Stream a greedy completion; append (tag, text) for every text chunk to events (shared,
    in arrival order); return the text."""
    text = ""
    with post(srv, {"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True}) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line[6:] == "[DONE]":
                continue
            for c in json.loads(line[6:]).get("choices", []):
                t = c.get("text", "")
                if t:
                    events.append((tag, t))
                    text += t
    return text


def alone(srv, prompt, n):
    with post(srv, {"prompt": prompt, "max_tokens": n, "temperature": 0}) as r:
        return json.loads(r.read())["choices"][0]["text"]


def overlap(srv):
    """A streams; after its 4th chunk B is sent. Returns (A's text, B's text, A's chunks between
    B's sending and B's first chunk)."""
    events, out = [], {}

    def run_a():
        out["a"] = stream(srv, PROMPT_A, 160, events, "a")

    ta = threading.Thread(target=run_a)
    ta.start()
    while sum(1 for e in events if e[0] == "a") < 4 and ta.is_alive():
        threading.Event().wait(0.005)
    events.append(("sent", ""))
    out["b"] = stream(srv, LONG_B, 8, events, "b")
    ta.join()
    i0 = next(i for i, e in enumerate(events) if e[0] == "sent")
    i1 = next((i for i, e in enumerate(events) if e[0] == "b"), len(events))
    return out.get("a", ""), out.get("b", ""), sum(1 for e in events[i0:i1] if e[0] == "a")


def step_metrics(srv):
    """The snug_step_* lines of /metrics, as floats."""
    out = {}
    for line in srv.raw("GET", "/metrics")[1].splitlines():
        if line.startswith("snug_step_"):
            k, v = line.split(" ", 1)
            out[k] = float(v)
    return out


def rule(t_dec, c_row, chunk=512, floor_rows=32, start=64):
    """--step-prompt auto's rows for one prefilling slot beside a decoding one (step_budget.h)."""
    r = math.floor(t_dec / c_row) if t_dec > 0 and c_row > 0 else start
    return min(max(r, floor_rows), chunk)


def main():
    res = Results()
    fx = fixtures_dir(res)
    if not fx:
        res.done()
    model = os.path.join(fx, "trained", "trained-f16.gguf")
    with tempfile.TemporaryDirectory() as tmp:
        common = ("--api-key", KEY, "--spec-draft", "0", "--ctx", "2048", "--chunk", "512")
        S = Server(model, tmp, "S", *common, "--slots", "2", "--step-prompt", "16")
        W = Server(model, tmp, "W", *common, "--slots", "2", "--step-prompt", "512")
        U = Server(model, tmp, "U", *common, "--slots", "2")
        R = Server(model, tmp, "R", *common, "--slots", "1")
        try:
            a0, b0 = alone(S, PROMPT_A, 160), alone(S, LONG_B, 8)
            a, b, n_s = overlap(S)
            res.check(len(a0) > 40 and a == a0,
                      f"--step-prompt 16: A's stream beside B's prefill equals A alone ({len(a)} "
                      "chars)")
            res.check(b == b0 and len(b) > 0, "--step-prompt 16: B's text equals B alone")
            _, _, n_w = overlap(W)
            print(f"    A's tokens during B's prefill: {n_s} with --step-prompt 16, {n_w} with "
                  "--step-prompt 512")
            res.check(n_s >= 20 and n_s > n_w + 10,
                      f"a long prompt does not freeze the other stream: {n_s} tokens of A while B "
                      f"prefills in chunks of 16 (vs {n_w} in chunks of 512)")

            # --step-prompt auto (the default with 2 slots) against the one-slot server's texts
            r_a, r_b = alone(R, PROMPT_A, 160), alone(R, LONG_B, 8)
            m0 = step_metrics(U)
            res.check(m0.get("snug_step_prompt_rows") == 64 and
                      m0.get("snug_step_mixed_total") == 0,
                      f"auto before any step: the start of 64 rows, no mixed step ({m0})")
            a, b, n_u = overlap(U)
            m = step_metrics(U)
            res.check(r_a == a0 and a == r_a,
                      "auto: A's stream beside B's prefill equals A on the one-slot server")
            res.check(b == r_b and len(b) > 0,
                      "auto: B's text equals B on the one-slot server (its prompt in whole chunks)")
            steps, rows = m.get("snug_step_mixed_total", 0), m.get("snug_step_mixed_prompt_rows_total", 0)
            mw = step_metrics(W)
            w_mean = mw["snug_step_mixed_prompt_rows_total"] / max(mw["snug_step_mixed_total"], 1)
            print(f"    auto: {n_u} tokens of A during B's prefill; B's pieces beside A's stream: "
                  f"{rows:.0f} rows in {steps:.0f} steps ({rows / max(steps, 1):.1f} a step; "
                  f"--step-prompt 512: {w_mean:.1f}); measured: decode step "
                  f"{m.get('snug_step_decode_seconds', 0) * 1e3:.3f} ms, prompt row "
                  f"{m.get('snug_step_prompt_row_seconds', 0) * 1e3:.3f} ms")
            res.check(steps >= 2 and rows >= steps and rows / steps < 512 and
                      rows / steps < w_mean,
                      f"auto: B's prompt went in pieces below the 512-token chunk beside A's "
                      f"stream ({rows:.0f} rows in {steps:.0f} steps; --step-prompt 512: "
                      f"{w_mean:.1f} a step)")
            res.check(mw.get("snug_step_prompt_rows") == 512,
                      f"--step-prompt 512: the gauge says 512 ({mw.get('snug_step_prompt_rows')})")
            t_dec, c_row = m.get("snug_step_decode_seconds", 0), m.get("snug_step_prompt_row_seconds", 0)
            res.check(t_dec > 0 and c_row > 0 and
                      m.get("snug_step_prompt_rows") == rule(t_dec, c_row) < 512,
                      f"auto: snug_step_prompt_rows ({m.get('snug_step_prompt_rows')}) is the rule "
                      f"on the measured times ({rule(t_dec, c_row) if t_dec > 0 and c_row > 0 else '-'}), "
                      "below the chunk")
        finally:
            for srv in (S, W, U, R):
                srv.stop()
    res.done()


if __name__ == "__main__":
    main()
