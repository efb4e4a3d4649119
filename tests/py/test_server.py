"""test_server.py — black-box tests of `snug serve` with the official `openai` client and raw HTTP.

Three servers on free ports: A (real sampling, --api-key, --kv f32, 2 slots) checked against
the trained fixture's Hugging Face greedy continuation, the chat renderer and the tokenizer;
B (--script: generation follows a scripted text through the real detokenizer, output parser and
SSE path) for reasoning / tool-call splitting, stop strings, disconnects and 8 concurrent
streams; C (1 slot, queue 1) for 503 + Retry-After and a dropped non-streaming request. Runnable as a script; prints
"N passed, N failed". Model: ../shared/fixtures/trained/trained-f16.gguf (small, and its
Hugging Face greedy continuation is the reference for the real-sampling checks); skipped
visibly without fixtures, failed with SNUG_REQUIRE_FIXTURES=1.
"""
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SNUG, Results, fixtures_dir  # noqa: E402

import openai  # noqa: E402

KEY = "test-key-123"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "zip": {"type": "string"}},
        "required": ["city"]}}}]


class Server:
    """A `snug serve` child process on a free port (--port 0 + --port-file)."""

    def __init__(self, model, tmp, name, *args):
        self.port_file = os.path.join(tmp, name + ".port")
        self.log = open(os.path.join(tmp, name + ".log"), "w+")
        self.proc = subprocess.Popen([SNUG, "serve", "-m", model, "--port", "0", "--port-file",
                                      self.port_file, "--threads", "1", *map(str, args)],
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        t0 = time.time()
        while not os.path.exists(self.port_file) or not open(self.port_file).read().strip():
            if self.proc.poll() is not None or time.time() - t0 > 60:
                self.log.seek(0)
                raise RuntimeError(f"server {name} did not start:\n{self.log.read()}")
            time.sleep(0.05)
        self.port = int(open(self.port_file).read())

    def client(self, key=KEY):
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key=key,
                             max_retries=0, timeout=120)

    def raw(self, method, path, body=None, headers=None, key=KEY):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        h = {"Content-Type": "application/json"}
        if key:
            h["Authorization"] = "Bearer " + key
        h.update(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        try:
            return r.status, json.loads(data), r
        except ValueError:
            return r.status, data.decode("utf-8", "replace"), r

    def health(self):
        return self.raw("GET", "/health", key=None)[1]

    def stop(self):
        self.proc.terminate()
        try:
            rc = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = -9
        return rc



def stop_all(res, servers):
    """SIGTERM every server: each must exit 0; its log is printed when it did not, or when it
    holds an error or a sanitizer report."""
    for s in servers:
        rc = s.stop()
        res.check(rc == 0, f"server exits cleanly on SIGTERM (rc {rc})")
        s.log.seek(0)
        log = s.log.read()
        if rc != 0 or "ERROR" in log or "runtime error" in log:
            print(log[-3000:])

def wait_idle(srv, timeout=5.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        h = srv.health()
        if h["slots"]["busy"] == 0 and h["slots"]["queued"] == 0:
            return True, time.time() - t0
        time.sleep(0.02)
    return False, timeout


def collect_stream(stream):
    """Concatenate a chat stream: (content, reasoning, tool_calls {index: [name, args]}, finish,
    usage, n_chunks)."""
    content, reasoning, calls, finish, usage, n = "", "", {}, None, None, 0
    for ch in stream:
        n += 1
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            d = c.delta
            content += d.content or ""
            extra = d.model_extra or {}
            reasoning += extra.get("reasoning_content") or ""
            for tc in d.tool_calls or []:
                e = calls.setdefault(tc.index, ["", ""])
                if tc.function and tc.function.name:
                    e[0] += tc.function.name
                if tc.function and tc.function.arguments:
                    e[1] += tc.function.arguments
            if c.finish_reason:
                finish = c.finish_reason
    return content, reasoning, calls, finish, usage, n


def render(model, req, tmp):
    path = os.path.join(tmp, "req.json")
    with open(path, "w") as f:
        json.dump(req, f)
    p = subprocess.run([SNUG, "serve", "--render-only", path], capture_output=True, text=True)
    return p.stdout if p.returncode == 0 else None


def test_real(res, A, fx, tmp):
    """Server A: real sampling against references."""
    cl = A.client()
    models = cl.models.list()
    res.check([m.id for m in models.data] == ["trained-f16.gguf"], "models lists the served model")

    # tokenize / detokenize round trip
    text = "def add(a, b):\n    return a + b  # héllo ✓\n"
    st, tk, _ = A.raw("POST", "/tokenize", {"content": text})
    st2, dt, _ = A.raw("POST", "/detokenize", {"tokens": tk["tokens"]})
    res.check(st == 200 and st2 == 200 and dt["content"] == text and len(tk["tokens"]) > 5,
              f"tokenize/detokenize round trip ({len(tk['tokens'])} tokens)")

    # greedy completion from the fixture prompt equals the HF reference continuation
    ids = json.load(open(os.path.join(fx, "trained", "ids.json")))
    greedy = json.load(open(os.path.join(fx, "trained", "greedy.json")))
    greedy = greedy["ids"] if isinstance(greedy, dict) else greedy
    ref = A.raw("POST", "/detokenize", {"tokens": greedy[:16]})[1]["content"]
    r = cl.completions.create(model="trained-f16.gguf", prompt=ids, max_tokens=16, temperature=0)
    res.check(r.choices[0].text == ref, "greedy completion (ids prompt) = HF greedy reference")
    res.check(r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == 16 and
              r.usage.total_tokens == len(ids) + 16 and r.choices[0].finish_reason == "length",
              f"completion usage {r.usage.prompt_tokens}+{r.usage.completion_tokens}, finish length")

    # prefix reuse: prime a slot with the first 200 ids (max_tokens 1 leaves exactly them cached)
    cl.completions.create(model="trained-f16.gguf", prompt=ids[:200], max_tokens=1, temperature=0)
    r2 = cl.completions.create(model="trained-f16.gguf", prompt=ids, max_tokens=16, temperature=0)
    cached = (r2.usage.model_extra or {}).get("prompt_tokens_details", {}) or {}
    cached = cached.get("cached_tokens") if isinstance(cached, dict) else None
    if cached is None and r2.usage.prompt_tokens_details is not None:
        cached = r2.usage.prompt_tokens_details.cached_tokens
    res.check(cached == 200 and r2.choices[0].text == ref,
              f"prefix reuse: {cached} cached tokens, same greedy text")

    # streaming completion = non-streaming
    prompt = "import numpy as np\n\ndef "
    a = cl.completions.create(model="trained-f16", prompt=prompt, max_tokens=20, temperature=0)
    s = cl.completions.create(model="trained-f16", prompt=prompt, max_tokens=20, temperature=0,
                              stream=True, stream_options={"include_usage": True})
    txt, usage = "", None
    for ch in s:
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            txt += c.text
    n_prompt = len(A.raw("POST", "/tokenize", {"content": prompt})[1]["tokens"])
    res.check(txt == a.choices[0].text and usage is not None and usage.completion_tokens == 20 and
              usage.prompt_tokens == n_prompt, "completion stream = non-stream, usage chunk")

    # chat: usage.prompt_tokens = tokens of the rendered template; stream = non-stream
    msgs = [{"role": "system", "content": "You write Python."},
            {"role": "user", "content": "Write a function."}]
    rendered = render(A, {"messages": msgs}, tmp)
    n_chat = len(A.raw("POST", "/tokenize", {"content": rendered})[1]["tokens"]) if rendered else -1
    c1 = cl.chat.completions.create(model="trained-f16.gguf", messages=msgs, max_tokens=16,
                                    temperature=0, seed=1)
    m = c1.choices[0].message
    reasoning = (m.model_extra or {}).get("reasoning_content") or ""
    res.check(c1.usage.prompt_tokens == n_chat and c1.usage.completion_tokens == 16,
              f"chat usage: prompt {c1.usage.prompt_tokens} = rendered {n_chat}, completion 16")
    res.check(c1.choices[0].finish_reason == "length" and (m.model_extra or {}).get("reasoning")
              == ((m.model_extra or {}).get("reasoning_content")), "chat finish length, reasoning mirrored")
    s = cl.chat.completions.create(model="trained-f16.gguf", messages=msgs, max_tokens=16,
                                   temperature=0, stream=True, stream_options={"include_usage": True})
    content, reas, calls, finish, usage, n = collect_stream(s)
    res.check(content == (m.content or "") and reas == reasoning and finish == "length" and
              usage is not None and usage.completion_tokens == 16 and n > 3,
              f"chat stream = non-stream ({n} chunks)")

    # seeded sampling is reproducible
    kw = dict(model="trained-f16.gguf", prompt="class ", max_tokens=12, temperature=1.0, seed=42)
    res.check(cl.completions.create(**kw).choices[0].text == cl.completions.create(**kw).choices[0].text,
              "same seed, same sample")
    # two seeded samples at once (both slots decode in one step and pick on the thread pool;
    # logprobs: plain rows, no speculation) equal each alone; sent together until a try
    # overlaps them (both in flight together)
    kws = [dict(kw, prompt=p, max_tokens=48, seed=sd, top_p=0.95, logprobs=1,
                extra_body={"top_k": 40})
           for p, sd in (("class ", 7), ("def ", 8))]
    alone = [cl.completions.create(**k).choices[0].text for k in kws]
    together, overlapped = [None, None], False
    for _ in range(5):
        spans = [None, None]

        def one(i):
            t0 = time.time()
            together[i] = cl.completions.create(**kws[i]).choices[0].text
            spans[i] = (t0, time.time())
        ths = [threading.Thread(target=one, args=(i,)) for i in range(2)]
        [t.start() for t in ths]
        [t.join() for t in ths]
        overlapped = spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1]
        if overlapped:
            break
    res.check(overlapped and together == alone,
              f"two seeded samples at once = each alone (overlapped {overlapped})")

    # logprobs: greedy token = top-1, logprobs <= 0, one entry per token
    c = cl.chat.completions.create(model="trained-f16.gguf", messages=msgs, max_tokens=6,
                                   temperature=0, logprobs=True, top_logprobs=3)
    lp = c.choices[0].logprobs.content
    ok = len(lp) == 6 and all(len(e.top_logprobs) == 3 and e.logprob <= 0 and
                              abs(e.logprob - e.top_logprobs[0].logprob) < 1e-5 and
                              e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob for e in lp)
    res.check(ok, "logprobs: 6 entries, greedy = top-1, sorted")

    # a named tool_choice makes even this model answer with that call (arguments: a JSON object)
    r = cl.chat.completions.create(
        model="trained-f16.gguf", messages=msgs, tools=TOOLS, max_tokens=8, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    tc = r.choices[0].message.tool_calls or []
    res.check(len(tc) == 1 and tc[0].function.name == "get_weather" and
              isinstance(json.loads(tc[0].function.arguments), dict), "named tool_choice on a real model")

    # errors
    def err(body, status, param=None, path="/v1/chat/completions", key=KEY, what=""):
        st, b, _ = A.raw("POST", path, body, key=key)
        good = st == status and isinstance(b, dict) and "error" in b and b["error"]["message"]
        if param:
            good = good and b["error"].get("param") == param
        res.check(good, f"{what or param}: {status} {b['error']['message'] if good else b}")
        return b

    base = {"model": "trained-f16.gguf", "messages": msgs, "max_tokens": 2}
    err("{not json", 400, what="malformed JSON")
    err(dict(base, temperature="hot"), 400, "temperature")
    err(dict(base, max_tokens=1.5), 400, "max_tokens")
    err(dict(base, stop=[1]), 400, "stop")
    b = err(dict(base, n=3), 400, "n", what="n above the 2 slots")
    res.check("--slots" in b["error"]["message"], "the n error names --slots")
    err(dict(base, n=0), 400, "n")
    err(dict(base, stop=["x" * 600]), 400, "stop", what="stop string too long")
    err(dict(base, messages="hi"), 400, "messages")
    err(dict(base, tool_choice="sometimes"), 400, "tool_choice")
    err(dict(base, model="gpt-4"), 404, "model", what="unknown model")
    b = err(dict(base, messages=[{"role": "user", "content": "x"},
                                 {"role": "system", "content": "late"}]), 400,
            what="system message not first")
    res.check("System message must be at the beginning" in b["error"]["message"],
              "template rejection message passed through")
    b = err({"prompt": "x " * 1200, "max_tokens": 1}, 400, "prompt", path="/v1/completions",
            what="prompt longer than the context")
    res.check("1024" in b["error"]["message"] and "tokens" in b["error"]["message"],
              "context error names both numbers")
    st, _, _ = A.raw("POST", "/v1/completions", b"x" * (9 << 20))
    res.check(st == 413, f"9 MiB body: {st}")
    st, b, _ = A.raw("POST", "/v1/completions", dict(base, prompt="x", whatever={"a": 1}, max_tokens=1))
    res.check(st == 200, "unknown fields ignored")
    try:
        cl.chat.completions.create(model="trained-f16.gguf", messages=msgs, temperature=-1)
        res.check(False, "openai client sees a 400")
    except openai.BadRequestError as e:
        res.check(e.status_code == 400 and "temperature" in str(e), "openai client sees a 400")

    # auth
    st, b, _ = A.raw("GET", "/v1/models", key=None)
    res.check(st == 401 and "error" in b, "no key: 401")
    st, b, _ = A.raw("GET", "/v1/models", key="wrong")
    res.check(st == 401, "wrong key: 401")
    try:
        A.client(key="wrong").models.list()
        res.check(False, "openai client with a wrong key: AuthenticationError")
    except openai.AuthenticationError:
        res.check(True, "openai client with a wrong key: AuthenticationError")
    st, b, _ = A.raw("GET", "/health", key=None)
    res.check(st == 200 and b["self_test"] == "ok" and b["slots"]["total"] == 2,
              "/health open without a key, self-test ok")

    # metrics
    st, txt, _ = A.raw("GET", "/metrics")
    gen = [ln for ln in txt.splitlines() if ln.startswith("snug_generated_tokens_total ")]
    res.check(st == 200 and 'snug_requests_total{route="/v1/chat/completions",status="400"}' in txt
              and gen and float(gen[0].split()[1]) >= 16 and "snug_slots_busy 0" in txt,
              "metrics: requests by status, token counters, slots")


SCRIPT_TOOL = ("The user wants weather. I will call the tool.\n</think>\n\n<tool_call>\n"
               "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
               "</parameter>\n<parameter=zip>\n75001\n</parameter>\n</function>\n</tool_call>")


def test_scripted(res, B):
    cl = B.client()
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    want_args = {"city": "Paris", "days": 3, "zip": "75001"}
    for stream in (False, True):
        kw = dict(model="trained-f16.gguf", messages=msgs, tools=TOOLS, extra_body={"snug_script": SCRIPT_TOOL})
        if stream:
            content, reas, calls, finish, _, _ = collect_stream(
                cl.chat.completions.create(stream=True, **kw))
            calls = [calls[i] for i in sorted(calls)]
        else:
            r = cl.chat.completions.create(**kw)
            m = r.choices[0].message
            content, reas, finish = m.content, (m.model_extra or {}).get("reasoning_content"), r.choices[0].finish_reason
            calls = [[t.function.name, t.function.arguments] for t in m.tool_calls or []]
            res.check(all(t.id and t.type == "function" for t in m.tool_calls or []), "tool call ids")
        tag = "stream" if stream else "non-stream"
        res.check(reas == "The user wants weather. I will call the tool.",
                  f"{tag}: reasoning split ({reas!r})")
        res.check(not content and finish == "tool_calls", f"{tag}: no content, finish tool_calls")
        res.check(len(calls) == 1 and calls[0][0] == "get_weather" and json.loads(calls[0][1]) == want_args,
                  f"{tag}: tool call typed by schema {calls}")

    # drift: a JSON body inside <tool_call>, no closing tag at the end
    drift = 'Thinking.\n</think>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}'
    r = cl.chat.completions.create(model="trained-f16.gguf", messages=msgs, tools=TOOLS,
                                   extra_body={"snug_script": drift})
    tc = r.choices[0].message.tool_calls or []
    res.check(len(tc) == 1 and json.loads(tc[0].function.arguments) == {"city": "Rome"},
              "drift: JSON tool call without closing tag")
    # tool_choice: a named function / "required" begin the call for the model
    r = cl.chat.completions.create(
        model="trained-f16.gguf", messages=msgs, tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        extra_body={"snug_script": "<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>"})
    tc = r.choices[0].message.tool_calls or []
    res.check(len(tc) == 1 and tc[0].function.name == "get_weather" and
              json.loads(tc[0].function.arguments) == {"city": "Oslo"} and
              r.choices[0].finish_reason == "tool_calls", "tool_choice named: forced call")
    content, reas, calls, finish, _, _ = collect_stream(cl.chat.completions.create(
        model="trained-f16.gguf", messages=msgs, tools=TOOLS, tool_choice="required", stream=True,
        extra_body={"snug_script": "<function=get_weather>\n<parameter=city>\nLima\n</parameter>\n"}))
    res.check(len(calls) == 1 and calls[0][0] == "get_weather" and
              json.loads(calls[0][1]) == {"city": "Lima"} and finish == "tool_calls" and not reas,
              "tool_choice required (stream, unclosed call)")
    # thinking off: content only
    r = cl.chat.completions.create(model="trained-f16.gguf", messages=msgs,
                                   extra_body={"snug_script": "Hello there.",
                                               "chat_template_kwargs": {"enable_thinking": False}})
    m = r.choices[0].message
    res.check(m.content == "Hello there." and not (m.model_extra or {}).get("reasoning_content")
              and r.choices[0].finish_reason == "stop", "thinking off: all content")
    # stop strings on completions (no parser): the text ends before the stop string
    r = cl.completions.create(model="trained-f16.gguf", prompt="x", stop=["STOP", "never"],
                              extra_body={"snug_script": "Hello world. STOP here"})
    res.check(r.choices[0].text == "Hello world. " and r.choices[0].finish_reason == "stop",
              f"stop string: {r.choices[0].text!r}")
    # max_tokens cuts the script
    r = cl.completions.create(model="trained-f16.gguf", prompt="x", max_tokens=3,
                              extra_body={"snug_script": "one two three four five six"})
    res.check(r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length",
              "max_tokens on a script: length")

    # 8 concurrent streams all complete
    long_script = " ".join(f"w{i}" for i in range(12))
    out = [None] * 8

    def worker(i):
        try:
            s = cl.completions.create(model="trained-f16.gguf", prompt=f"p{i}", stream=True,
                                      extra_body={"snug_script": long_script})
            out[i] = "".join(c.text for ch in s for c in ch.choices)
        except Exception as e:  # noqa: BLE001
            out[i] = f"error {e}"

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    t0 = time.time()
    [t.start() for t in ts]
    [t.join(timeout=120) for t in ts]
    res.check(all(o == long_script for o in out),
              f"8 concurrent streams complete ({time.time() - t0:.1f} s)")

    # a client that disconnects mid-stream frees its slot at once
    very_long = " ".join(f"t{i}" for i in range(3000))
    st0 = B.raw("GET", "/metrics")[1]
    sock = socket.create_connection(("127.0.0.1", B.port))
    body = json.dumps({"prompt": "x", "stream": True, "snug_script": very_long}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
                 + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
                 + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data:") < 3:
        got += sock.recv(4096)
    busy_before = B.health()["slots"]["busy"]
    sock.close()
    idle, dt = wait_idle(B)
    res.check(busy_before == 1 and idle and dt < 1.0, f"disconnect frees the slot ({dt * 1e3:.0f} ms)")
    st1 = B.raw("GET", "/metrics")[1]

    def val(txt, name):
        return float([ln for ln in txt.splitlines() if ln.startswith(name + " ")][0].split()[1])

    res.check(val(st1, "snug_requests_cancelled_total") == val(st0, "snug_requests_cancelled_total") + 1,
              "disconnect counted as cancelled")


def test_queue(res, C):
    """1 slot, queue 1: a third concurrent request gets 503 with Retry-After."""
    very_long = " ".join(f"t{i}" for i in range(3000))
    socks = []
    for _ in range(2):
        s = socket.create_connection(("127.0.0.1", C.port))
        body = json.dumps({"prompt": "x", "stream": True, "snug_script": very_long}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\n\r\n" + body)
        socks.append(s)
    t0 = time.time()
    # wait for one running and one queued: "queued 1" alone can be the first request before the
    # engine admits it, and then the third request would queue behind it and be served later
    while time.time() - t0 < 5:
        h = C.health()["slots"]
        if h["busy"] == 1 and h["queued"] == 1:
            break
        time.sleep(0.02)
    st, b, r = C.raw("POST", "/v1/completions", {"prompt": "x"}, key=None)
    res.check(st == 503 and r.getheader("Retry-After") == "1" and "error" in b,
              f"full queue: {st}, Retry-After {r.getheader('Retry-After')}")
    for s in socks:
        s.close()
    idle, dt = wait_idle(C)
    res.check(idle, f"queued and running requests cancelled when their clients left ({dt:.2f} s)")


def test_drop_nonstream(res, C):
    """A non-streaming request whose client closes its socket while the engine generates frees
    the slot within a step (the engine polls the parked connection between steps), is counted as
    cancelled, and the next request is admitted and answered at once."""
    very_long = " ".join(f"t{i}" for i in range(3000))

    def cancelled():
        txt = C.raw("GET", "/metrics")[1]
        return float([ln for ln in txt.splitlines()
                      if ln.startswith("snug_requests_cancelled_total ")][0].split()[1])

    c0 = cancelled()
    sock = socket.create_connection(("127.0.0.1", C.port))
    body = json.dumps({"prompt": "x", "snug_script": very_long}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    t0 = time.time()
    while time.time() - t0 < 5 and C.health()["slots"]["busy"] != 1:
        time.sleep(0.01)
    time.sleep(0.4)  # (an end of stream within 0.25 s of the request reads as a half-close)
    busy_before = C.health()["slots"]["busy"]
    sock.close()
    idle, dt = wait_idle(C)
    res.check(busy_before == 1 and idle and dt < 1.0,
              f"a dropped non-streaming request frees its slot ({dt * 1e3:.0f} ms)")
    res.check(cancelled() == c0 + 1, "the dropped non-streaming request counted as cancelled")
    t1 = time.time()
    st, b, _ = C.raw("POST", "/v1/completions", {"prompt": "x", "snug_script": "a b c"}, key=None)
    res.check(st == 200 and b["choices"][0]["text"].strip() == "a b c" and time.time() - t1 < 5,
              f"the next request is admitted and answered ({time.time() - t1:.2f} s)")


def test_timeout(res, D):
    """--timeout 1: a generation that would run for many seconds ends after about 1 s."""
    very_long = " ".join(f"t{i}" for i in range(3000))
    t0 = time.time()
    st, b, _ = D.raw("POST", "/v1/completions", {"prompt": "x", "snug_script": very_long}, key=None)
    dt = time.time() - t0
    res.check(st == 200 and b["choices"][0]["finish_reason"] == "length" and
              0 < b["usage"]["completion_tokens"] < 3000 and 0.9 < dt < 30,
              f"per-request timeout: finish length after {dt:.1f} s, "
              f"{b['usage']['completion_tokens'] if st == 200 else b} tokens")


def soak(res, model, tmp, seconds):
    """`test_server.py --soak [SECONDS]` (not run by ctest): 32 streaming clients with real
    sampling for SECONDS against --slots 4, then 100 clients that drop mid-stream. Every stream
    must complete, no slot may stay busy, and resident memory must stay flat."""
    S = Server(model, tmp, "soak", "--slots", "4", "--ctx", "512", "--queue", "64")
    cl = S.client()
    stop_at = time.time() + seconds
    done, errors, rss = [0], [], []
    lock = threading.Lock()

    def client(i):
        while time.time() < stop_at:
            try:
                s = cl.chat.completions.create(model="trained-f16.gguf", max_tokens=24, stream=True,
                                               messages=[{"role": "user", "content": f"hi {i}"}])
                _, _, _, finish, _, _ = collect_stream(s)
                with lock:
                    done[0] += finish in ("stop", "length")
                    if finish not in ("stop", "length"):
                        errors.append(f"finish {finish}")
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(str(e))

    ts = [threading.Thread(target=client, args=(i,)) for i in range(32)]
    [t.start() for t in ts]
    while any(t.is_alive() for t in ts):
        rss.append(S.health()["memory"]["rss_bytes"])
        time.sleep(1)
    res.check(not errors and done[0] > 32, f"soak: {done[0]} streams completed, {len(errors)} errors "
              f"{errors[:3]}; RSS {rss[len(rss) // 4] / 2**20:.1f} -> {rss[-1] / 2**20:.1f} MiB")
    res.check(rss[-1] <= rss[len(rss) // 4] * 1.1 + (4 << 20), "soak: memory flat")
    for i in range(100):
        sock = socket.create_connection(("127.0.0.1", S.port))
        body = json.dumps({"prompt": f"def f{i}(", "stream": True, "max_tokens": 400}).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while i % 2 and got.count(b"data:") < 2:
            got += sock.recv(4096)
        sock.close()
    idle, dt = wait_idle(S, 30)
    res.check(idle, f"soak: 100 dropped clients leave no busy slot ({dt:.2f} s to idle)")
    res.check(S.stop() == 0, "soak server exits cleanly")


def main():
    res = Results()
    if "--soak" in sys.argv:
        fx = fixtures_dir(res)
        secs = float(sys.argv[sys.argv.index("--soak") + 1]) if len(sys.argv) > sys.argv.index("--soak") + 1 else 60
        with tempfile.TemporaryDirectory() as tmp:
            soak(res, os.path.join(fx, "trained", "trained-f16.gguf"), tmp, secs)
        res.done()
    fx = fixtures_dir(res)
    if fx is None:
        res.done()
    model = os.path.join(fx, "trained", "trained-f16.gguf")
    with tempfile.TemporaryDirectory() as tmp:
        servers = []
        try:
            A = Server(model, tmp, "A", "--api-key", KEY, "--kv", "f32", "--slots", "2", "--ctx", "1024")
            servers.append(A)
            B = Server(model, tmp, "B", "--api-key", KEY, "--slots", "8", "--ctx", "512",
                       "--script", os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
                       if os.path.exists(os.path.join(os.path.dirname(__file__), "..", "..", "README.md"))
                       else __file__)
            servers.append(B)
            # --ctx 4096: the running request's 3000 scripted tokens must outlast the queue check
            # (at --ctx 512 it could finish first on a fast run, and the third request was served)
            C = Server(model, tmp, "C", "--slots", "1", "--queue", "1", "--ctx", "4096",
                       "--script", __file__)
            servers.append(C)
            D = Server(model, tmp, "D", "--timeout", "1", "--ctx", "4096", "--script", __file__)
            servers.append(D)
            test_real(res, A, fx, tmp)
            test_scripted(res, B)
            test_queue(res, C)
            test_drop_nonstream(res, C)
            test_timeout(res, D)
        finally:
            stop_all(res, servers)
    res.done()


if __name__ == "__main__":
    main()
