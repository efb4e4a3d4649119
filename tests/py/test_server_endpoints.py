"""test_server_endpoints.py — what agent clients hit beyond one generation, through the official
clients where they expose it:

- `n > 1` (openai): n = 3 at temperature 1 equals the three single requests seeded seed, seed + 1,
  seed + 2 (chat and completions, with MTP drafts on the demo model and without on the trained
  fixture); a stream carries each choice's chunks under its `index`, concatenating to the same
  texts; the prompt is evaluated once (/metrics); n above --slots is a 400 naming --slots;
- `GET /v1/responses/{id}`, `DELETE /v1/responses/{id}`, `GET /v1/responses/{id}/input_items`
  (openai's responses.retrieve / delete / input_items.list, its cursor paging too);
- Anthropic's error shape on every /v1/messages error (anthropic: the body of the SDK's
  exceptions): the gate's 401, an unknown model's 404, 400, 405, 413, 415, a full queue's 503 and
  the 503 while the model loads;
- `--host` with names and IPv6 (::1, ::, localhost), the boot log naming the bound address;
- /metrics counting a dropped stream as 499, as the access log does.

Models: data/demo/snug-demo-q8_0.gguf and ../shared/fixtures/trained/trained-f16.gguf.
Runnable as a script; prints "N passed, N failed".
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
from snugtest import SNUG, SRC, Results, fixtures_dir  # noqa: E402
from test_server import Server, stop_all, wait_idle  # noqa: E402

import anthropic  # noqa: E402
import openai  # noqa: E402

DEMO = os.path.join(SRC, "data", "demo", "snug-demo-q8_0.gguf")
KEY = "endpoints-key"


def oa(port, host="127.0.0.1", key="x"):
    return openai.OpenAI(base_url=f"http://{host}:{port}/v1", api_key=key, max_retries=0,
                         timeout=120)


def metric(srv, line_start):
    txt = srv.raw("GET", "/metrics", key=KEY)[1]
    got = [ln for ln in txt.splitlines() if ln.startswith(line_start)]
    return float(got[0].rsplit(" ", 1)[1]) if got else 0.0


def texts(choices):
    """(index, content, reasoning, finish) of chat choices."""
    return [(c.index, c.message.content, (c.message.model_extra or {}).get("reasoning_content"),
             c.finish_reason) for c in choices]


def test_n(res, srv, model, label):
    cl = oa(srv.port, key=KEY)
    msgs = [{"role": "user", "content": f"Write a haiku about the sea ({label})."}]
    kw = dict(model=model, messages=msgs, temperature=1, max_tokens=48)
    p0 = metric(srv, "snug_prompt_tokens_total ")
    r = cl.chat.completions.create(n=3, seed=11, **kw)
    evaluated = metric(srv, "snug_prompt_tokens_total ") - p0
    singles = [cl.chat.completions.create(seed=11 + i, **kw) for i in range(3)]
    multi = texts(r.choices)
    want = [(i, *t[1:]) for i, t in enumerate(texts([x.choices[0] for x in singles]))]
    res.check(multi == want and len({t[1:3] for t in multi}) > 1,
              f"{label}: chat n=3 seed 11 = singles seeded 11, 12, 13 (3 differing texts; "
              f"first {multi[0][1]!r:.60})")
    n_prompt = r.usage.prompt_tokens - r.usage.prompt_tokens_details.cached_tokens
    res.check(evaluated == n_prompt and
              r.usage.completion_tokens == sum(x.usage.completion_tokens for x in singles),
              f"{label}: the prompt is evaluated once for the 3 choices ({evaluated:.0f} tokens "
              f"evaluated, the prompt's {n_prompt}); usage sums the choices")
    # a stream: each choice's chunks under its index, the same texts, one usage chunk
    acc, fin, roles, usage = {}, {}, set(), None
    for ch in cl.chat.completions.create(n=3, seed=11, stream=True,
                                         stream_options={"include_usage": True}, **kw):
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            acc[c.index] = acc.get(c.index, "") + (c.delta.content or "")
            if c.delta.role:
                roles.add(c.index)
            if c.finish_reason:
                fin[c.index] = c.finish_reason
    res.check([acc.get(i) for i in range(3)] == [t[1] for t in multi] and
              fin == {i: t[3] for i, t in enumerate(multi)} and roles == {0, 1, 2} and
              usage is not None and usage.completion_tokens == r.usage.completion_tokens,
              f"{label}: stream n=3: chunks by index add up to the non-stream choices")
    # completions too
    ck = dict(model=model, prompt="Once upon a time", temperature=1, max_tokens=24)
    rc = cl.completions.create(n=3, seed=5, **ck)
    sc = [cl.completions.create(seed=5 + i, **ck).choices[0].text for i in range(3)]
    res.check([c.text for c in rc.choices] == sc and [c.index for c in rc.choices] == [0, 1, 2],
              f"{label}: completions n=3 = singles ({sc[0]!r:.40})")
    # more choices than slots
    try:
        cl.chat.completions.create(n=4, **kw)
        res.check(False, f"{label}: n=4 with 3 slots is a 400")
    except openai.BadRequestError as e:
        res.check(e.body["param"] == "n" and "--slots" in e.body["message"],
                  f"{label}: n=4 with 3 slots: 400 ({e.body['message']})")


def test_responses_store(res, srv, model):
    cl = oa(srv.port, key=KEY)
    inp = [{"role": "system", "content": "Be brief."},
           {"role": "user", "content": "What is the capital of France?"}]
    r = cl.responses.create(model=model, input=inp, max_output_tokens=64)
    g = cl.responses.retrieve(r.id)
    res.check(g.model_dump() == r.model_dump(), f"responses.retrieve = the created response "
              f"({r.id}, {r.output_text!r:.40})")
    items = cl.responses.input_items.list(r.id, order="asc")
    res.check([(i.type, i.role, i.content[0].text) for i in items.data] ==
              [("message", "system", "Be brief."),
               ("message", "user", "What is the capital of France?")] and
              all(i.id for i in items.data) and not items.has_more,
              f"input_items: the input as message items with ids ({[i.id for i in items.data]})")
    desc = cl.responses.input_items.list(r.id)
    res.check([i.id for i in desc.data] == [i.id for i in reversed(items.data)],
              "input_items: newest first by default (order desc)")
    # cursor paging: one item a page, the SDK's iterator follows `after`
    paged = [i.id for i in cl.responses.input_items.list(r.id, order="asc", limit=1)]
    page1 = cl.responses.input_items.list(r.id, order="asc", limit=1)
    res.check(paged == [i.id for i in items.data] and page1.has_more and
              page1.last_id == items.data[0].id,
              f"input_items: limit 1 pages through both items ({paged})")
    # a streamed response is stored too, and previous_response_id still finds the first
    with cl.responses.stream(model=model, input="And of Italy?", previous_response_id=r.id,
                             max_output_tokens=64) as s:
        done = [ev.response for ev in s
                if ev.type in ("response.completed", "response.incomplete")][-1]
    got = cl.responses.retrieve(done.id)
    res.check([o.id for o in got.output] == [o.id for o in done.output] and
              got.output_text == done.output_text and got.previous_response_id == r.id,
              f"a streamed response is retrievable ({got.output_text!r:.40})")
    deleted = cl.responses.delete(r.id)  # the SDK returns nothing; the body says deleted
    st, body, _ = srv.raw("DELETE", f"/v1/responses/{done.id}", key=KEY)
    try:
        cl.responses.retrieve(r.id)
        gone = False
    except openai.NotFoundError as e:
        gone = e.status_code == 404 and r.id in e.body["message"]
    res.check(deleted is None and gone and st == 200 and body == {
        "id": done.id, "object": "response", "deleted": True},
        "delete: 200 {id, object, deleted: true}, then retrieve is a 404")
    try:
        cl.responses.input_items.list(done.id)
        res.check(False, "input_items of a deleted response: 404")
    except openai.NotFoundError:
        res.check(True, "input_items of a deleted response: 404")
    r3 = cl.responses.create(model=model, input="x", max_output_tokens=4, store=False)
    try:
        cl.responses.retrieve(r3.id)
        res.check(False, "store: false is not kept")
    except openai.NotFoundError:
        res.check(True, "store: false is not kept (404)")
    st, _, hdr = srv.raw("POST", f"/v1/responses/{r3.id}", {}, key=KEY)
    res.check(st == 405 and hdr.getheader("Allow") == "GET, DELETE",
              f"POST /v1/responses/{{id}}: 405, Allow {hdr.getheader('Allow')}")


def anthropic_body(e):
    return e.body if isinstance(e.body, dict) else json.loads(e.response.text)


def is_anthropic(body, etype):
    return (isinstance(body, dict) and body.get("type") == "error" and
            body.get("error", {}).get("type") == etype and body["error"].get("message"))


def test_anthropic_errors(res, E):
    """Every /v1/messages error in Anthropic's shape, as the anthropic SDK receives it."""
    def sdk(key=KEY):
        return anthropic.Anthropic(base_url=f"http://127.0.0.1:{E.port}", api_key=key,
                                   max_retries=0, timeout=60)

    msg = dict(model="snug-demo-q8_0.gguf", max_tokens=8,
               messages=[{"role": "user", "content": "hi"}])
    cases = [("wrong key (the gate)", lambda: sdk("wrong").messages.create(**msg), 401,
              "authentication_error"),
             ("wrong key, count_tokens", lambda: sdk("wrong").messages.count_tokens(
                 model=msg["model"], messages=msg["messages"]), 401, "authentication_error"),
             ("unknown model", lambda: sdk().messages.create(**dict(msg, model="claude-x")), 404,
              "not_found_error"),
             ("bad max_tokens", lambda: sdk().messages.create(**dict(msg, max_tokens=0)), 400,
              "invalid_request_error"),
             ("body over --max-body", lambda: sdk().messages.create(**dict(
                 msg, messages=[{"role": "user", "content": "x" * 70000}])), 413,
              "request_too_large")]
    for what, call, status, etype in cases:
        try:
            call()
            res.check(False, f"messages {what}: {status}")
        except anthropic.APIStatusError as e:
            b = anthropic_body(e)
            res.check(e.status_code == status and is_anthropic(b, etype),
                      f"messages {what}: {e.status_code} {type(e).__name__} {b}")
    # what the SDK does not send: a GET, an unknown path under /v1/messages, a form body
    for what, method, path, headers, status, etype in [
            ("GET /v1/messages", "GET", "/v1/messages", {}, 405, "invalid_request_error"),
            ("POST /v1/messages/batches", "POST", "/v1/messages/batches", {}, 404,
             "not_found_error"),
            ("text/plain body", "POST", "/v1/messages", {"Content-Type": "text/plain"}, 415,
             "invalid_request_error")]:
        h = {"x-api-key": KEY}
        st, b, r = E.raw(method, path, "{}" if method == "POST" else None,
                         headers=dict(h, **headers), key=None)
        res.check(st == status and is_anthropic(b, etype) and
                  (status != 405 or r.getheader("Allow") == "POST"),
                  f"{what}: {st} {b}")
    # a full queue (1 slot, queue 1): 503 overloaded_error with Retry-After
    very_long = " ".join(f"t{i}" for i in range(3000))
    socks = []
    for _ in range(2):
        s = socket.create_connection(("127.0.0.1", E.port))
        body = json.dumps({"prompt": "x", "stream": True, "snug_script": very_long}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                  + KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\n\r\n" + body)
        socks.append(s)
    t0 = time.time()
    while time.time() - t0 < 5:
        h = E.health()["slots"]
        if h["busy"] == 1 and h["queued"] == 1:
            break
        time.sleep(0.02)
    try:
        sdk().messages.create(**msg)
        res.check(False, "messages with a full queue: 503")
    except anthropic.APIStatusError as e:
        b = anthropic_body(e)
        res.check(e.status_code == 503 and is_anthropic(b, "overloaded_error") and
                  e.response.headers.get("retry-after") == "1",
                  f"messages with a full queue: 503 {b}, Retry-After "
                  f"{e.response.headers.get('retry-after')}")
    for s in socks:
        s.close()
    wait_idle(E)


def test_loading_503(res, tmp):
    """While the model loads, /v1/messages answers 503 in Anthropic's shape."""
    log = open(os.path.join(tmp, "loading.log"), "w+")
    env = dict(os.environ, SNUG_DEBUG_BOOT_DELAY_MS="3000")
    p = subprocess.Popen([SNUG, "serve", "-m", DEMO, "--port", "0", "--threads", "1"], env=env,
                         stdout=subprocess.DEVNULL, stderr=log)
    try:
        port = None
        for _ in range(400):
            log.seek(0)
            m = [ln for ln in log.read().splitlines() if " open; /health says" in ln]
            if m:
                port = int(m[0].split("port ")[1].split()[0])
                break
            time.sleep(0.01)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/v1/messages", body="{}", headers={"Content-Type": "application/json"})
        r = c.getresponse()
        b = json.loads(r.read())
        res.check(r.status == 503 and is_anthropic(b, "overloaded_error"),
                  f"/v1/messages while loading: {r.status} {b}")
    finally:
        p.terminate()
        p.wait(timeout=20)


def ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_hosts(res, tmp, servers):
    """--host names and IPv6 addresses: the openai client reaches the server there."""
    def serve(name, host):
        s = Server(DEMO, tmp, name, "--host", host, "--ctx", "512")
        servers.append(s)
        s.log.seek(0)
        boot = [ln for ln in s.log.read().splitlines() if "listening on" in ln]
        return s, boot[0] if boot else ""

    def works(port, host):
        try:
            cl = oa(port, host)
            ids = [m.id for m in cl.models.list().data]
            r = cl.chat.completions.create(model=ids[0], max_tokens=4,
                                           messages=[{"role": "user", "content": "hi"}])
            return r.choices[0].finish_reason in ("stop", "length")
        except openai.APIConnectionError:
            return False

    s, boot = serve("localhost", "localhost")
    res.check(works(s.port, "localhost") and f":{s.port}" in boot,
              f"--host localhost: reached as localhost ({boot.split(': ', 1)[-1]})")
    if not ipv6_loopback():
        print("SKIP: this kernel has no IPv6 loopback (::1): the IPv6 --host checks")
        return
    s, boot = serve("v6", "::1")
    res.check(works(s.port, "[::1]") and f"http://[::1]:{s.port}" in boot and
              not works(s.port, "127.0.0.1"),
              f"--host ::1: reached over IPv6 only ({boot.split(': ', 1)[-1]})")
    s, boot = serve("any", "::")
    res.check(works(s.port, "[::1]") and works(s.port, "127.0.0.1") and
              f"http://[::]:{s.port}" in boot,
              f"--host :: (dual stack): reached over IPv6 and IPv4 ({boot.split(': ', 1)[-1]})")
    p = subprocess.run([SNUG, "serve", "-m", DEMO, "--host", "no-such-host.invalid", "--port",
                        "0"], capture_output=True, text=True, timeout=60)
    res.check(p.returncode != 0 and "--host no-such-host.invalid" in p.stderr,
              f"an unresolvable --host is refused, naming it ({p.stderr.strip()[-90:]})")


def test_metrics_499(res, E):
    """A stream the client drops: the access log's 499 is the /metrics status too."""
    line200 = 'snug_requests_total{route="/v1/chat/completions",status="200"} '
    line499 = 'snug_requests_total{route="/v1/chat/completions",status="499"} '
    ok0, drop0 = metric(E, line200), metric(E, line499)
    very_long = " ".join(f"t{i}" for i in range(3000))
    sock = socket.create_connection(("127.0.0.1", E.port))
    body = json.dumps({"messages": [{"role": "user", "content": "x"}], "stream": True,
                       "snug_script": very_long}).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                 + KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data:") < 3:
        got += sock.recv(4096)
    sock.close()
    t0 = time.time()
    while time.time() - t0 < 10 and metric(E, line499) == drop0:
        time.sleep(0.05)
    E.log.seek(0)
    logged = [ln for ln in E.log.read().splitlines() if "POST /v1/chat/completions 499" in ln]
    res.check(metric(E, line499) == drop0 + 1 and metric(E, line200) == ok0 and logged,
              f"a dropped stream: /metrics status 499 ({metric(E, line499):.0f}), 200 unchanged "
              f"({metric(E, line200):.0f}), access log: {logged[-1] if logged else None}")
    # a stream read to its end stays a 200
    cl = oa(E.port, key=KEY)
    n = sum(1 for _ in cl.chat.completions.create(
        model="snug-demo-q8_0.gguf", messages=[{"role": "user", "content": "x"}], stream=True,
        extra_body={"snug_script": "a b c"}))
    t0 = time.time()
    while time.time() - t0 < 5 and metric(E, line200) == ok0:
        time.sleep(0.05)
    res.check(n > 0 and metric(E, line200) == ok0 + 1 and metric(E, line499) == drop0 + 1,
              "a stream read to its end: status 200")


def main():
    res = Results()
    fx = fixtures_dir(res)
    if fx is None:
        res.done()
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "script.txt")
        with open(script, "w") as f:
            f.write("Scripted answer.")
        servers = []
        try:
            N = Server(DEMO, tmp, "N", "--api-key", KEY, "--slots", "3", "--ctx", "2048")
            servers.append(N)
            T = Server(os.path.join(fx, "trained", "trained-f16.gguf"), tmp, "T", "--api-key",
                       KEY, "--slots", "3", "--ctx", "1024", "--spec-draft", "0")
            servers.append(T)
            E = Server(DEMO, tmp, "E", "--api-key", KEY, "--slots", "1", "--queue", "1",
                       "--max-body", "65536", "--ctx", "8192", "--script", script)
            servers.append(E)
            test_n(res, N, "snug-demo-q8_0.gguf", "demo, MTP drafts")
            test_n(res, T, "trained-f16.gguf", "trained, no drafts")
            test_responses_store(res, N, "snug-demo-q8_0.gguf")
            test_anthropic_errors(res, E)
            test_metrics_499(res, E)
            test_loading_503(res, tmp)
            test_hosts(res, tmp, servers)
        finally:
            stop_all(res, servers)
    res.done()


if __name__ == "__main__":
    main()
