"""test_server_alloc.py — the streamed-token path of `snug serve` allocates nothing per token.

A scripted server (--script: generation follows a given text through the real detokenizer,
output parser and SSE writer) answers a short and a long streamed request of each kind (chat
with reasoning + content, chat with a tool call, plain completion); /metrics'
snug_heap_allocations_total (snug_malloc and jansson, counted) is read around each one. The
allocations of the long request minus the short one's, per extra token, must be ~0 (the old
jansson-built chunks cost >10 per chunk; a logprobs request, still built with jansson, is the
control that the counter sees per-token allocations). The streamed text is also reassembled and compared with
the script, with JSON-hostile characters in it (quotes, backslashes, control bytes, non-ASCII),
so the hand-written chunks are checked to be valid JSON with the right values.
Runnable as a script; prints "N passed, N failed". Model: the trained fixture.
"""
import http.client
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import Results, fixtures_dir  # noqa: E402
from test_server import Server, TOOLS, wait_idle  # noqa: E402

WORDS = 'say "hi" \\ back\tslash\x01 café → 🙂 {"k": [1, 2]} </x> line\n'


def allocations(srv):
    st, body, _ = srv.raw("GET", "/metrics", key=None)
    for line in body.splitlines():
        if line.startswith("snug_heap_allocations_total "):
            return float(line.split()[1])
    raise RuntimeError("no snug_heap_allocations_total in /metrics")


def stream(srv, path, body):
    """POST a streamed request; returns (parsed chunks, usage)."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read().decode("utf-8")
    c.close()
    chunks, usage = [], None
    for ev in raw.split("\n\n"):
        if not ev.startswith("data: ") or ev == "data: [DONE]":
            continue
        obj = json.loads(ev[6:])
        if obj.get("usage"):
            usage = obj["usage"]
        chunks.append(obj)
    return chunks, usage


def join(chunks, chat):
    content, reasoning, args = "", "", ""
    for ch in chunks:
        for c in ch.get("choices", []):
            if not chat:
                content += c.get("text") or ""
                continue
            d = c.get("delta") or {}
            content += d.get("content") or ""
            reasoning += d.get("reasoning_content") or ""
            for tc in d.get("tool_calls") or []:
                args += (tc.get("function") or {}).get("arguments") or ""
    return content, reasoning, args


def measure(res, srv, what, make_body, path, chat, expect, control=False):
    """Allocations per extra token between a short and a long script of the same shape.
    control: a request that still allocates per token (logprobs, built with jansson) must show
    it, so the counter is known to see the per-token path."""
    deltas, toks = [], []
    for reps in (2, 12):
        body = make_body(WORDS * reps)
        wait_idle(srv)
        a0 = allocations(srv)
        chunks, usage = stream(srv, path, body)
        wait_idle(srv)
        a1 = allocations(srv)
        got = join(chunks, chat)
        want = expect(WORDS * reps)
        res.check(got == want, f"{what} x{reps}: streamed text equals the script "
                  f"({got!r:.80} vs {want!r:.80})")
        deltas.append(a1 - a0)
        toks.append(usage["completion_tokens"] if usage else 0)
    per_tok = (deltas[1] - deltas[0]) / max(1, toks[1] - toks[0])
    print(f"{what}: {deltas[0]:.0f} allocations for {toks[0]} tokens, {deltas[1]:.0f} for "
          f"{toks[1]}: {per_tok:.3f} per extra token")
    res.check(toks[1] > toks[0] + 50, f"{what}: the long script streams more tokens")
    if control:
        res.check(per_tok > 1, f"{what}: the counter sees per-token allocations ({per_tok:.3f})")
    else:
        res.check(per_tok < 0.05, f"{what}: no allocation per streamed token ({per_tok:.3f})")


def main():
    res = Results()
    fx = fixtures_dir(res)
    if fx is None:
        res.done()
    model = os.path.join(fx, "trained", "trained-f16.gguf")
    with tempfile.TemporaryDirectory() as tmp:
        srv = Server(model, tmp, "alloc", "--slots", "1", "--ctx", "4096", "--script", __file__)
        try:
            opts = {"stream": True, "stream_options": {"include_usage": True}}
            measure(res, srv, "completion",
                    lambda t: {"prompt": "x", "snug_script": t, **opts},
                    "/v1/completions", False, lambda t: (t, "", ""))
            measure(res, srv, "completion with logprobs (control)",
                    lambda t: {"prompt": "x", "snug_script": t, "logprobs": 2, **opts},
                    "/v1/completions", False, lambda t: (t, "", ""), control=True)
            measure(res, srv, "chat reasoning + content",
                    lambda t: {"messages": [{"role": "user", "content": "hi"}],
                               "snug_script": t + "</think>\n\n" + t, **opts},
                    "/v1/chat/completions", True, lambda t: (t.rstrip("\n"), t.rstrip("\n"), ""))
            measure(res, srv, "chat tool call",
                    lambda t: {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS,
                               "chat_template_kwargs": {"enable_thinking": False},
                               "snug_script": "<tool_call>\n<function=get_weather>\n"
                               "<parameter=city>\n" + t + "</parameter>\n</function>\n</tool_call>",
                               **opts},
                    "/v1/chat/completions", True,
                    lambda t: ("", "", json.dumps({"city": t.rstrip("\n")}, ensure_ascii=False)))
        finally:
            rc = srv.stop()
            res.check(rc == 0, f"server exits cleanly (rc {rc})")
    res.done()


if __name__ == "__main__":
    main()
