"""test_suite.py — `snug verify`, `snug stress`, `snug bench` end to end.

Real server: `snug serve --script` on the demo model (`snug gen --preset demo --type q8_0`;
the trained fixture as a fallback): one script makes every verify check pass (exit 0), others
make named checks fail and the exit status must equal the number of failed checks; stress with a
small --ctx takes its depths from the server's limit and reports the over-limit rung as a
rejection; bench writes JSON and an SVG that are parsed back (xml.etree) and cross-checked.
Mock server (http.server): the false-pass bug class of docs/suite.md — error
bodies that look like answers, empty/unterminated streams, missing fields, leaked markup,
speculation counters that do not move, a ladder where every rung is rejected — each must FAIL,
and a well-behaved mock must pass (so the failures are not vacuous).
Runnable as a script; prints "N passed, N failed".
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SNUG, SRC, Results, fixtures_dir  # noqa: E402

ESSAY = ("Attention maps each token to a query, key and value. Scores come from query-key dot "
         "products, scaled, then a softmax makes weights that mix values. Many heads see "
         "different links: syntax, names, order. A causal mask hides future tokens; a cache "
         "keeps old keys so decoding stays fast on long text. Gates help too.")
TOOLCALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
            "</function>\n</tool_call>\n")
# With thinking on the prompt ends inside <think>: the first sentence is reasoning; with
# thinking off it is content (and mentions Paris within 30 tokens).
SCRIPT_PASS = ("Paris is the capital of France, as every atlas says.\n</think>\n\nParis it is. "
               + TOOLCALL + ESSAY + "\n")
SCRIPT_HELLO = "Hello world."
SCRIPT_CASCADE = ("Paris is the capital of France, as every atlas says.\n</think>\n\nParis. "
                  + TOOLCALL + "Attention is all you need.\n" * 8)
NEEDLE = "teal otter 42"
SCRIPT_NEEDLE = "teal otter 42"
SCRIPT_BENCH = ("Quicksort picks a pivot, splits the list into smaller and larger parts, then "
                "sorts each part the same way until every part is trivially sorted.")


def snug(*args, timeout=300):
    return subprocess.run([SNUG, *map(str, args)], capture_output=True, text=True, timeout=timeout)


class Collect:
    """Results of one test run in a worker thread, replayed into the main Results in order."""

    def __init__(self):
        self.rows = []

    def check(self, cond, what):
        self.rows.append((bool(cond), what))


class Server:
    """`snug serve --script FILE` on a free port."""

    def __init__(self, model, tmp, name, script, ctx):
        path = os.path.join(tmp, name + ".script")
        with open(path, "w") as f:
            f.write(script)
        self.port_file = os.path.join(tmp, name + ".port")
        self.log = open(os.path.join(tmp, name + ".log"), "w+")
        self.proc = subprocess.Popen([SNUG, "serve", "-m", model, "--port", "0", "--port-file",
                                      self.port_file, "--threads", "1", "--ctx", str(ctx),
                                      "--script", path], stdout=subprocess.DEVNULL, stderr=self.log)
        t0 = time.time()
        while not os.path.exists(self.port_file) or not open(self.port_file).read().strip():
            if self.proc.poll() is not None or time.time() - t0 > 60:
                self.log.seek(0)
                raise RuntimeError(f"server {name} did not start:\n{self.log.read()}")
            time.sleep(0.05)
        self.url = "http://127.0.0.1:" + open(self.port_file).read().strip()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def verify_json(url, *extra):
    p = snug("verify", "--url", url, "--json", *extra)
    try:
        checks = json.loads(p.stdout)["checks"]
    except (ValueError, KeyError):
        raise RuntimeError(f"verify printed no JSON (rc {p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.returncode, {c["name"]: c for c in checks}


def failed_names(checks):
    return sorted(n for n, c in checks.items() if c["status"] == "fail")


def expect_failures(res, what, rc, checks, want):
    got = failed_names(checks)
    res.check(got == sorted(want), f"{what}: failed checks {got} == {sorted(want)}")
    res.check(rc == len(got), f"{what}: exit status {rc} == number of failed checks {len(got)}")
    bad = [n for n, c in checks.items() if c["status"] == "skip" and not c["detail"]]
    res.check(not bad, f"{what}: every skip carries a reason {bad}")


# ==== mock OpenAI-compatible server ==========================================================

class Mock:
    """A tiny OpenAI-shaped server whose behaviour is set by `mode`."""

    def __init__(self, mode):
        self.mode = mode
        self.accepted = 0
        self.drafts = 0
        self.max_tokens = []  # the max_tokens of every chat request received
        mock = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def send(self, code, obj, ctype="application/json"):
                data = obj if isinstance(obj, bytes) else (
                    obj.encode() if isinstance(obj, str) else json.dumps(obj).encode())
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                mock.get(self)

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                mock.max_tokens.append(body.get("max_tokens"))
                mock.post(self, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def get(self, h):
        m = self.mode
        if h.path == "/v1/models":
            ids = ["other-model"] if m == "empty" else ["mock-model"]
            h.send(200, {"object": "list", "data": [{"id": i, "max_model_len": 2048} for i in ids]})
        elif h.path == "/health" and m == "empty":
            h.send(503, {"status": "error", "model": "mock-model", "plan": {"n_ctx": 2048},
                         "self_test": "failed: NaN in the logits"})
        elif h.path == "/health" and m in ("error", "broken", "reject"):
            h.send(200, {"status": "ok"})
        elif h.path == "/metrics" and m == "good":
            h.send(200, "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
                        f"vllm:spec_decode_num_accepted_tokens_total{{model=\"m\"}} {self.accepted}\n"
                        f"vllm:spec_decode_num_drafts_total{{model=\"m\"}} {self.drafts}\n",
                   "text/plain")
        elif h.path == "/metrics" and m == "broken":
            h.send(200, "vllm:spec_decode_num_accepted_tokens_total 5\n"
                        "vllm:spec_decode_num_drafts_total 7\n", "text/plain")
        else:
            h.send(404, {"error": {"message": "not found"}})

    def answer(self, body):
        """(reasoning, content, tool_calls) a sensible model would give."""
        user = body["messages"][-1]["content"]
        think = (body.get("chat_template_kwargs") or {}).get("enable_thinking", True)
        reasoning = ("The user wants a short factual answer; I recall it and double-check "
                     "before replying.") if think else ""
        if body.get("tools") and body.get("tool_choice") != "none":
            return reasoning, "", [{"name": "get_weather", "arguments": '{"city": "San Francisco"}'}]
        content = "The capital of France is Paris." if "France" in user else ESSAY
        return reasoning, content, []

    def post(self, h, body):
        m = self.mode
        if h.path == "/tokenize":
            return h.send(404, {"error": {"message": "no tokenizer endpoint"}})
        if m == "reject":
            return h.send(400, {"error": {"message": "This model's maximum context length is "
                                                     "2048 tokens", "type": "BadRequestError"}})
        self.accepted += 15
        self.drafts += 10
        if m == "error":  # an error status whose body looks like a perfect answer
            return h.send(500, {"error": {"message": "engine crashed"}, "choices": [{"message": {
                "content": "Paris. " + ESSAY, "reasoning_content": "x" * 80,
                "tool_calls": [{"type": "function", "function": {
                    "name": "get_weather", "arguments": '{"city": "SF"}'}}]}}]})
        reasoning, content, calls = self.answer(body)
        if m == "broken":
            content = "Paris " + TOOLCALL + content  # markup leaks into content
        if not body.get("stream"):
            msg = {"role": "assistant"}
            if m != "empty":
                msg["content"] = content
                if reasoning:
                    msg["reasoning_content"] = reasoning
                if calls:
                    msg["tool_calls"] = [{"id": "c1", "type": "function", "function": c}
                                         for c in calls]
            return h.send(200, {"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
                                "usage": {"prompt_tokens": 10, "completion_tokens": 20}})
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.end_headers()

        def ev(delta, finish=None):
            h.wfile.write(b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta,
                                                               "finish_reason": finish}]}).encode()
                          + b"\n\n")
        if m != "empty":
            ev({"role": "assistant"})
            for i in range(0, len(reasoning), 12):
                ev({"reasoning_content": reasoning[i:i + 12]})
            for w in content.split(" "):
                ev({"content": w + " "})
            for i, c in enumerate(calls):
                ev({"tool_calls": [{"index": i, "id": "c1", "type": "function",
                                    "function": {"name": c["name"], "arguments": ""}}]})
                ev({"tool_calls": [{"index": i, "function": {"arguments": c["arguments"]}}]})
            ev({}, "tool_calls" if calls else "stop")
        if m != "broken":  # broken: the stream just stops, no [DONE]
            h.wfile.write(b"data: [DONE]\n\n")
        h.wfile.flush()


def test_mock(res):
    mk = Mock("good")
    try:
        rc, ch = verify_json(mk.url)
        res.check(rc == 0 and not failed_names(ch), f"mock good: exit 0 (got {rc}, {failed_names(ch)})")
        res.check(ch["speculative"]["status"] == "pass" and "2.50" in ch["speculative"]["detail"],
                  f"mock good: acceptance 2.50 from /metrics ({ch['speculative']['detail']})")
        res.check(ch["engine-self-check"]["status"] == "skip",
                  "mock good: no /health -> engine-self-check skips (not a pass)")
        res.check(max(t for t in mk.max_tokens if t) == 4000,
                  f"mock good: the checks ask their own lengths (up to 4000: {mk.max_tokens})")
        # --max-tokens caps every request and keeps the checks' verdicts
        mk.max_tokens.clear()
        p = snug("verify", "--url", mk.url, "--json", "--max-tokens", "64")
        out = json.loads(p.stdout)
        asked = [t for t in mk.max_tokens if t]
        res.check(p.returncode == 0 and out["max_tokens_cap"] == 64 and asked and
                  max(asked) == 64 and min(asked) == 8,
                  f"mock good, --max-tokens 64: exit {p.returncode}, every request <= 64 ({asked})")
    finally:
        mk.stop()
    # HTTP 500 whose body carries a perfect-looking completion: nothing may pass on it
    mk = Mock("error")
    try:
        rc, ch = verify_json(mk.url)
        expect_failures(res, "mock error bodies", rc, ch,
                        ["basic-answer", "tool-call", "streaming", "thinking", "quality",
                         "speculative", "stream-tool-thinking"])
        res.check(ch["engine-self-check"]["status"] == "skip", "mock: /health without a plan skips")
    finally:
        mk.stop()
    # empty streams ([DONE] only), messages without fields, a failed self-test, model not listed
    mk = Mock("empty")
    try:
        rc, ch = verify_json(mk.url, "--model", "mock-model")
        expect_failures(res, "mock empty/missing", rc, ch,
                        ["reachable", "engine-self-check", "basic-answer", "tool-call", "streaming",
                         "thinking", "quality", "stream-tool-thinking"])
        res.check("NaN" in ch["engine-self-check"]["detail"], "mock: the self-test failure is named")
    finally:
        mk.stop()
    # markup leaks, unterminated streams, speculation counters that do not move
    mk = Mock("broken")
    try:
        rc, ch = verify_json(mk.url)
        expect_failures(res, "mock broken", rc, ch,
                        ["tool-call", "streaming", "quality", "speculative", "stream-tool-thinking"])
        res.check("[DONE]" in ch["streaming"]["detail"], "mock: missing [DONE] is named")
    finally:
        mk.stop()
    # every rung rejected: the ladder fails; the limit comes from max_model_len
    mk = Mock("reject")
    try:
        p = snug("stress", "--url", mk.url, "--json", "--fractions", "0.25,0.5")
        out = json.loads(p.stdout)
        ch = {c["name"]: c for c in out["checks"]}
        res.check(out["context"] == {"n_ctx": 2048, "source": "/v1/models max_model_len"},
                  f"mock stress: limit from max_model_len ({out['context']})")
        res.check(ch["needle-ladder"]["status"] == "fail" and "rejected" in ch["needle-ladder"]["detail"],
                  f"mock stress: an all-rejected ladder fails ({ch['needle-ladder']['detail']})")
        res.check(ch["beyond-limit"]["status"] == "rejected", "mock stress: beyond-limit rejected")
        res.check(p.returncode == sum(c["status"] == "fail" for c in out["checks"]) and
                  p.returncode >= 1, f"mock stress: exit status {p.returncode} = failed checks")
        res.check(not any(c["status"] == "pass" for c in out["checks"]),
                  "mock stress: no check passes when the server rejects everything")
    finally:
        mk.stop()


# ==== the real server ========================================================================

def demo_model(res, tmp):
    path = os.path.join(tmp, "demo.gguf")
    p = snug("gen", "--preset", "demo", "--type", "q8_0", "-o", path)
    if p.returncode == 0:
        return path
    fx = fixtures_dir(res)
    if fx:
        print(f"note: snug gen --preset demo failed ({p.stderr.strip()}); using the trained fixture")
        return os.path.join(fx, "trained", "trained-f16.gguf")
    return None


def test_real_verify(res, model, tmp):
    s = Server(model, tmp, "pass", SCRIPT_PASS, 4096)
    try:
        rc, ch = verify_json(s.url)
        res.check(rc == 0, f"real verify, passing script: exit 0 (got {rc}: "
                           f"{[(n, c['detail']) for n, c in ch.items() if c['status'] == 'fail']})")
        res.check(sum(c["status"] == "pass" for c in ch.values()) == 8 and
                  ch["speculative"]["status"] == "skip",
                  "real verify: 8 pass, speculative skips (snug reports no speculation)")
        res.check(len(ch) == 9, "real verify: nine checks")
    finally:
        s.stop()
    s = Server(model, tmp, "hello", SCRIPT_HELLO, 4096)
    try:
        rc, ch = verify_json(s.url)
        expect_failures(res, "real verify, 'Hello world.'", rc, ch,
                        ["basic-answer", "tool-call", "streaming", "thinking", "quality",
                         "stream-tool-thinking"])
    finally:
        s.stop()
    s = Server(model, tmp, "cascade", SCRIPT_CASCADE, 4096)
    try:
        rc, ch = verify_json(s.url)
        expect_failures(res, "real verify, repeated lines", rc, ch, ["quality"])
        # 8 scripted lines; the first may share a line with the content before the tool call
        # (the parser joins content runs around a tool call with a newline): 7 or 8 repeats.
        res.check(re.search(r"repeats [78] times in a row", ch["quality"]["detail"]) is not None,
                  f"real verify: cascade named ({ch['quality']['detail']})")
    finally:
        s.stop()


def test_real_stress(res, model, tmp):
    s = Server(model, tmp, "stress", SCRIPT_NEEDLE, 1024)
    try:
        p = snug("stress", "--url", s.url, "--json", "--needle", NEEDLE, "--fractions", "0.3,0.95")
        out = json.loads(p.stdout)
        ch = {c["name"]: c for c in out["checks"]}
        res.check(out["context"] == {"n_ctx": 1024, "source": "/health plan.n_ctx"},
                  f"real stress: limit from the server ({out['context']})")
        rungs = [r for r in out["ladder"] if r["name"].startswith("needle@")]
        toks = [r["prompt_tokens"] for r in rungs]
        res.check(len(rungs) == 2 and all(r["status"] == "pass" for r in rungs),
                  f"real stress: both rungs pass ({[r['detail'] for r in rungs]})")
        res.check(0.2 * 1024 < toks[0] < 0.4 * 1024 and 0.85 * 1024 < toks[1] <= 0.96 * 1024,
                  f"real stress: depths follow the limit: prompt tokens {toks} of 1024")
        res.check(all(r["alive_after"] and r["memory_after"] for r in rungs),
                  "real stress: alive check and memory readings after each rung")
        bl = ch["beyond-limit"]
        res.check(bl["status"] == "rejected" and "HTTP 400" in bl["detail"],
                  f"real stress: beyond the limit is a rejection by the server ({bl['detail'][:90]})")
        res.check(all(ch[n]["status"] == "skip" and "context holds 1024" in ch[n]["detail"]
                      for n in ("tool-prefill-100K", "tool-prefill-130K", "ide-agent-oneshot",
                                "multi-turn-agent")),
                  "real stress: probes beyond the context skip with the numbers")
        res.check(p.returncode == 0, f"real stress: exit 0 (got {p.returncode})")
        # --only: the parts asked for and nothing else
        p = snug("stress", "--url", s.url, "--json", "--only", "beyond-limit,tool-prefill-130K")
        out = json.loads(p.stdout)
        res.check([c["name"] for c in out["checks"]] == ["beyond-limit", "tool-prefill-130K"] and
                  [r["name"] for r in out["ladder"]] == ["beyond-limit"] and
                  out["checks"][0]["status"] == "rejected" and p.returncode == 0,
                  f"real stress --only: two parts ({[c['name'] for c in out['checks']]}, "
                  f"rc {p.returncode})")
        p = snug("stress", "--url", s.url, "--only", "ladder,bogus")
        res.check(p.returncode == 2 and "unknown part 'bogus'" in p.stderr,
                  f"real stress --only with an unknown part: exit 2 and the name ({p.stderr[:120]!r})")
        # a needle the model does not return: the ladder fails, exit status counts it
        p = snug("stress", "--url", s.url, "--json", "--fractions", "0.5", "--no-over-limit")
        out = json.loads(p.stdout)
        res.check(out["checks"][0]["status"] == "fail" and p.returncode == 1,
                  f"real stress: unrecalled needle fails ({out['checks'][0]['detail']})")
    finally:
        s.stop()


def test_real_bench(res, model, tmp):
    s = Server(model, tmp, "bench", SCRIPT_BENCH, 1024)
    js, svg = os.path.join(tmp, "bench.json"), os.path.join(tmp, "bench.svg")
    try:
        p = snug("bench", "--url", s.url, "--warmup", "1", "--runs", "2", "--depths", "200,600,5000",
                 "--prefill-warmup", "0", "--prefill-runs", "2", "--out", js, "--svg", svg)
        res.check(p.returncode == 0, f"real bench: exit 0 ({p.stderr[-300:]})")
        b = json.load(open(js))
        names = [q["name"] for q in b["prompts"]]
        res.check(names == ["narrative", "code"], f"real bench: both prompts ({names})")
        for q in b["prompts"]:
            st = q["stats"]
            runs = q["runs"]
            res.check(len(runs) == 2 and all(r["ok"] and r["tokens"] > 0 for r in runs),
                      f"real bench {q['name']}: 2 measured runs with tokens")
            mean = sum(r["decode_tps"] for r in runs) / 2
            res.check(abs(st["decode_tps"]["mean"] - mean) < 1e-6 * mean and
                      st["decode_tps"]["min"] <= mean <= st["decode_tps"]["max"] and
                      all(k in st["wall_tps"] for k in ("mean", "std", "cv", "min", "max")),
                      f"real bench {q['name']}: stats agree with the runs")
            r0 = runs[0]
            res.check(abs(r0["decode_tps"] - r0["tokens"] / (r0["wall_s"] - r0["ttft_s"])) < 1e-6 *
                      r0["decode_tps"], f"real bench {q['name']}: decode = tokens / (wall - TTFT)")
        pre = {d["depth"]: d for d in b["prefill"]}
        res.check("skipped" in pre[5000], "real bench: a depth beyond the context is skipped")
        ok = [d for d in (pre[200], pre[600]) if d["prefill_tps"]["n"] == 2]
        res.check(len(ok) == 2 and all(0.8 * d["depth"] < r["prompt_tokens"] < 1.3 * d["depth"]
                                       for d in ok for r in d["runs"]),
                  "real bench: prefill prompt tokens near each depth")
        res.check(not b["acceptance"]["available"] and b["acceptance"]["reason"],
                  "real bench: acceptance n/a with a reason")
        # the SVG parses and draws the JSON's numbers
        root = ET.parse(svg).getroot()
        ns = "{http://www.w3.org/2000/svg}"
        bars = {(e.get("data-prompt"), e.get("data-metric")): float(e.get("data-value"))
                for e in root.iter(ns + "rect") if e.get("class") == "bar"}
        want = {(q["name"], m): q["stats"][m]["mean"] for q in b["prompts"]
                for m in ("decode_tps", "wall_tps")}
        res.check(bars.keys() == want.keys() and
                  all(abs(bars[k] - want[k]) < 1e-4 * want[k] for k in want),
                  f"real bench: SVG bars match the JSON ({len(bars)} bars)")
        pts = {int(e.get("data-depth")): float(e.get("data-value"))
               for e in root.iter(ns + "circle") if e.get("class") == "point"}
        res.check(sorted(pts) == [200, 600] and
                  all(abs(pts[d] - pre[d]["prefill_tps"]["mean"]) < 1e-4 * pts[d] for d in pts),
                  f"real bench: SVG prefill points match the JSON ({pts})")
        # --compare against itself-ish: ratios exist for both prompts
        p = snug("bench", "--url", s.url, "--warmup", "0", "--runs", "1", "--depths", "none",
                 "--json", "--compare", js)
        cmp = json.loads(p.stdout)["compare"]
        res.check(set(cmp["prompts"]) == {"narrative", "code"} and
                  all(v["decode_tps"] > 0 for v in cmp["prompts"].values()),
                  f"real bench: --compare ratios ({cmp['prompts']})")
    finally:
        s.stop()


def test_unreachable(res):
    """Nothing listens: bench and stress must fail with a message, not report zeros."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # the port is free now and nothing listens on it
    for cmd, extra in (("bench", ["--runs", "1"]), ("stress", [])):
        p = snug(cmd, "--url", f"http://127.0.0.1:{port}", *extra, timeout=60)
        res.check(p.returncode != 0 and "no server answers" in p.stderr,
                  f"{cmd} against a closed port: non-zero exit and a message "
                  f"(rc {p.returncode}, {p.stderr.strip()[:120]!r})")


def main():
    res = Results()
    t0 = time.time()
    test_mock(res)
    test_unreachable(res)
    with tempfile.TemporaryDirectory() as tmp:
        model = demo_model(res, tmp)
        if not model:
            print("SKIP: no model for the real-server tests (snug gen --preset demo failed and "
                  "no fixtures)")
        else:
            # separate servers on free ports: run them two at a time (2-core CI machine)
            jobs = [test_real_verify, test_real_stress, test_real_bench]
            outs = [Collect() for _ in jobs]

            def run(i):
                try:
                    jobs[i](outs[i], model, tmp)
                except Exception as e:  # a crash is a failure, not a silent pass
                    outs[i].check(False, f"{jobs[i].__name__} raised {e!r}")
            with ThreadPoolExecutor(2) as ex:
                list(ex.map(run, range(len(jobs))))
            for o in outs:
                for cond, what in o.rows:
                    res.check(cond, what)
    print(f"({time.time() - t0:.1f} s)")
    res.done()


if __name__ == "__main__":
    main()
