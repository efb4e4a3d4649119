"""test_server_mixed.py — mixed engine steps in `snug serve`: while one slot prefills a long
prompt, the other slot keeps streaming.

Two servers on the trained fixture with 2 slots: S with --step-prompt 16 (a prefilling slot adds
at most 16 prompt tokens to each step, beside the other slot's decode row) and W with the default
(512, the chunk). Slot A streams a greedy completion; once its first tokens arrived, B sends a
prompt of ~1,870 tokens. Counted: A's tokens that arrive after B was sent and before B's first
token. On S, B's prefill takes ~117 steps and A gets a token in each; on W it takes 4 steps.
Also: A's streamed text equals A's text alone (its decode rows mixed with B's prompt chunks give
the same logits bit for bit), and B's greedy text equals B's text alone.
The count is of engine steps, not of time (only the few steps before B's admission depend on
the machine's speed).
Runnable as a script; prints "N passed, N failed".
"""
import json
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


def main():
    res = Results()
    fx = fixtures_dir(res)
    if not fx:
        res.done()
    model = os.path.join(fx, "trained", "trained-f16.gguf")
    with tempfile.TemporaryDirectory() as tmp:
        S = Server(model, tmp, "S", "--api-key", KEY, "--slots", "2", "--step-prompt", "16",
                   "--spec-draft", "0", "--ctx", "2048")
        W = Server(model, tmp, "W", "--api-key", KEY, "--slots", "2", "--spec-draft", "0",
                   "--ctx", "2048")
        try:
            a0, b0 = alone(S, PROMPT_A, 160), alone(S, LONG_B, 8)
            a, b, n_s = overlap(S)
            res.check(len(a0) > 40 and a == a0,
                      f"--step-prompt 16: A's stream beside B's prefill equals A alone ({len(a)} "
                      "chars)")
            res.check(b == b0 and len(b) > 0, "--step-prompt 16: B's text equals B alone")
            _, _, n_w = overlap(W)
            print(f"    A's tokens during B's prefill: {n_s} with --step-prompt 16, {n_w} with "
                  "the default 512")
            res.check(n_s >= 20 and n_s > n_w + 10,
                      f"a long prompt does not freeze the other stream: {n_s} tokens of A while B "
                      f"prefills in chunks of 16 (vs {n_w} in chunks of 512)")
        finally:
            S.stop()
            W.stop()
    res.done()


if __name__ == "__main__":
    main()
