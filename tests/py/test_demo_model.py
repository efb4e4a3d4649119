"""test_demo_model.py — the trained demo model (data/demo/snug-demo-q8_0.gguf,
docs/demo-model.md) behaves, served by snug, as verify's checks demand — by the model, no
--script: basic-answer (Paris), tool-call (a structured get_weather call), streaming, thinking
(reasoning split out) and speculative (MTP mean acceptance length >= 2 from /metrics); then
`snug run` and `snug serve` without -m pick the demo model and say so; and `snug gen
--from-weights` writes the given float32 values (read back from the GGUF) with the shapes
checked; a stream with return_progress gets prompt_progress events; and the port opens
before the model is loaded, /health answering 503 with the load progress until it is. Runnable as a script; prints "N passed, N failed".
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SNUG, SRC, Results  # noqa: E402

MODEL = os.path.join(SRC, "data", "demo", "snug-demo-q8_0.gguf")
REQUIRED = ["basic-answer", "tool-call", "streaming", "thinking", "speculative"]


def serve(args, tmp):
    port_file = os.path.join(tmp, "port")
    if os.path.exists(port_file):
        os.remove(port_file)
    log = open(os.path.join(tmp, "serve.log"), "w+")
    p = subprocess.Popen([SNUG, "serve", "--port", "0", "--port-file", port_file, *args],
                         stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(600):
        if os.path.exists(port_file) and open(port_file).read().strip():
            break
        if p.poll() is not None:
            break
        time.sleep(0.05)
    port = open(port_file).read().strip() if os.path.exists(port_file) else ""
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            break
        except Exception:
            time.sleep(0.05)
    return p, url, log


def stop(p):
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()


def test_verify(res, tmp):
    p, url, log = serve(["-m", MODEL], tmp)
    try:
        v = subprocess.run([SNUG, "verify", "--url", url, "--json"], capture_output=True,
                           text=True, timeout=600)
        out = json.loads(v.stdout)
        checks = {c["name"]: c for c in out["checks"]}
        for name in REQUIRED:
            c = checks.get(name, {})
            res.check(c.get("status") == "pass",
                      f"verify {name} passes on the demo model: {c.get('detail')}")
        spec = checks.get("speculative", {}).get("detail", "")
        res.check("from /metrics" in spec, f"acceptance measured from /metrics: {spec}")
    finally:
        stop(p)


def test_default_model(res, tmp):
    r = subprocess.run([SNUG, "run", "-p", "What is", "-n", "2", "--seed", "1"],
                       capture_output=True, text=True, timeout=120)
    res.check(r.returncode == 0 and "no -m given: using the demo model" in r.stderr
              and "snug-demo-q8_0.gguf" in r.stderr,
              f"snug run without -m uses the demo model and says so (rc {r.returncode})")
    p, url, log = serve([], tmp)
    try:
        h = json.loads(urllib.request.urlopen(url + "/health", timeout=5).read())
        res.check(h.get("model") == "snug-demo-q8_0.gguf",
                  f"snug serve without -m serves the demo model ({h.get('model')})")
        log.seek(0)
        res.check("no -m given: serving the demo model" in log.read(),
                  "the serve boot log names the demo model")
    finally:
        stop(p)


def sse_events(url, body):
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    evs = []
    with urllib.request.urlopen(req, timeout=300) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("data: ") and line[6:] != "[DONE]":
                evs.append(json.loads(line[6:]))
    return evs


def test_progress(res, tmp):
    """return_progress: prompt_progress events after each 512-token prompt chunk (without the
    prefix cache, whose schedule also ends chunks at message boundaries)."""
    p, url, log = serve(["-m", MODEL, "--cache-ram", "0"], tmp)
    try:
        long_q = "Count the words: " + " ".join(f"w{i}" for i in range(900))
        body = {"messages": [{"role": "user", "content": long_q}], "stream": True,
                "max_tokens": 4, "return_progress": True}
        evs = sse_events(url, body)
        prog = [e["prompt_progress"] for e in evs if "prompt_progress" in e]
        total = prog[-1]["total"] if prog else 0
        res.check(len(prog) == (total + 511) // 512 and total > 1024,
                  f"one prompt_progress event per 512-token chunk ({len(prog)} for {total})")
        res.check(all(a["processed"] < b["processed"] for a, b in zip(prog, prog[1:])) and
                  prog and prog[-1]["processed"] == total and
                  all(x["time_ms"] >= 0 and x["cache"] == 0 for x in prog),
                  f"processed grows to the total: {[x['processed'] for x in prog]}")
        first_content = next((i for i, e in enumerate(evs) if e.get("choices") and
                              e["choices"][0].get("delta", {}).get("content")), len(evs))
        last_prog = max(i for i, e in enumerate(evs) if "prompt_progress" in e) if prog else 0
        res.check(last_prog < first_content, "progress comes before the answer")
        body.pop("return_progress")
        evs = sse_events(url, body)
        res.check(evs and not any("prompt_progress" in e for e in evs),
                  "no progress events unless asked")
        bad = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(
            {"messages": [{"role": "user", "content": "hi"}], "return_progress": 1}).encode(),
            headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(bad, timeout=30)
            code = 200
        except urllib.error.HTTPError as e:
            code = e.code
        res.check(code == 400, f"a non-boolean return_progress is a 400 ({code})")
    finally:
        stop(p)


def test_loading(res, tmp):
    """The port opens before the model is loaded: /health is 503 with progress, other routes
    503, then 200 on the same port (SNUG_DEBUG_BOOT_DELAY_MS slows the weight read down)."""
    log = open(os.path.join(tmp, "boot.log"), "w+")
    env = dict(os.environ, SNUG_DEBUG_BOOT_DELAY_MS="2500")
    p = subprocess.Popen([SNUG, "serve", "-m", MODEL, "--port", "0"], env=env,
                         stdout=subprocess.DEVNULL, stderr=log)
    try:
        port = None
        for _ in range(400):
            log.seek(0)
            m = [ln for ln in log.read().splitlines() if " open; /health says" in ln]
            if m:
                port = m[0].split("port ")[1].split()[0]
                break
            time.sleep(0.01)
        res.check(port is not None, f"the boot log names the open port ({port})")
        url = f"http://127.0.0.1:{port}"
        seen, ok_at = [], None
        for _ in range(600):
            try:
                h = json.loads(urllib.request.urlopen(url + "/health", timeout=5).read())
                ok_at = h.get("status")
                break
            except urllib.error.HTTPError as e:
                seen.append((e.code, json.loads(e.read())))
            time.sleep(0.05)
        loading = [b for c, b in seen if c == 503 and b.get("status") == "loading"]
        size = os.path.getsize(MODEL)
        res.check(len(loading) >= 3 and all(b["loading"]["total_bytes"] == size
                                            for b in loading),
                  f"/health answers 503 'loading' with the file size while loading "
                  f"({len(loading)} polls)")
        done = [b["loading"]["done_bytes"] for b in loading]
        res.check(done == sorted(done) and done[0] < size and
                  any(0 < d < size for d in done),
                  f"done_bytes grows ({done[0]} .. {done[-1]} of {size})")
        res.check(ok_at == "ok", "then /health says ok on the same port")
    finally:
        stop(p)


def read_gguf_f32(path):
    """{name: (ne, float32 values)} for the F32 tensors of a GGUF file (a minimal reader)."""
    b = open(path, "rb").read()
    off = 8
    n_t, n_kv = struct.unpack_from("<QQ", b, off)
    off += 16
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip_value(t):
        nonlocal off
        if t == 8:
            n = struct.unpack_from("<Q", b, off)[0]
            off += 8 + n
        elif t == 9:
            et, n = struct.unpack_from("<IQ", b, off)
            off += 12
            for _ in range(n):
                skip_value(et)
        else:
            off += sizes[t]

    align = 32
    for _ in range(n_kv):
        n = struct.unpack_from("<Q", b, off)[0]
        key = b[off + 8:off + 8 + n].decode()
        off += 8 + n
        t = struct.unpack_from("<I", b, off)[0]
        off += 4
        if key == "general.alignment":
            align = struct.unpack_from("<I", b, off)[0]
        skip_value(t)
    infos = []
    for _ in range(n_t):
        n = struct.unpack_from("<Q", b, off)[0]
        name = b[off + 8:off + 8 + n].decode()
        off += 8 + n
        nd = struct.unpack_from("<I", b, off)[0]
        off += 4
        ne = struct.unpack_from(f"<{nd}Q", b, off)
        off += 8 * nd
        t, o = struct.unpack_from("<IQ", b, off)
        off += 12
        infos.append((name, ne, t, o))
    base = (off + align - 1) // align * align
    out = {}
    for name, ne, t, o in infos:
        if t == 0:
            out[name] = (ne, np.frombuffer(b, "<f4", int(np.prod(ne)), base + o))
    return out


def test_from_weights(res, tmp):
    # the tensor list and shapes of the demo preset with the built-in 265-token vocabulary:
    # take them from a random-weight f32 file, write new values, read them back
    ref = os.path.join(tmp, "ref.gguf")
    subprocess.run([SNUG, "gen", "--preset", "demo", "--type", "f32", "-o", ref],
                   capture_output=True, check=True)
    tensors = read_gguf_f32(ref)
    wdir = os.path.join(tmp, "w")
    os.makedirs(wdir)
    rng = np.random.default_rng(7)
    want = {}
    for name, (ne, _) in tensors.items():
        a = rng.standard_normal(int(np.prod(ne))).astype("<f4") * 0.05
        if name.endswith("ssm_a"):
            a = -np.abs(a) - 0.1
        a.tofile(os.path.join(wdir, name + ".f32"))
        want[name] = a
    out = os.path.join(tmp, "fw.gguf")
    r = subprocess.run([SNUG, "gen", "--preset", "demo", "--type", "f32", "--from-weights", wdir,
                        "-o", out], capture_output=True, text=True)
    res.check(r.returncode == 0, f"gen --from-weights writes a model ({r.stderr.strip()[-200:]})")
    got = read_gguf_f32(out) if r.returncode == 0 else {}
    same = len(got) == len(want) and all(np.array_equal(got[n][1], want[n]) for n in want)
    res.check(same, f"every one of {len(want)} tensors holds exactly the given values")
    ids = os.path.join(tmp, "ids.json")
    json.dump([10, 20, 30, 40], open(ids, "w"))
    r = subprocess.run([SNUG, "logits", "-m", out, "--ids", ids, "-o",
                        os.path.join(tmp, "l.f32")], capture_output=True, text=True)
    res.check(r.returncode == 0, "the written model loads and runs (snug logits)")
    # a file of the wrong size is refused with the tensor named
    name = "blk.0.ssm_a"
    np.zeros(3, "<f4").tofile(os.path.join(wdir, name + ".f32"))
    r = subprocess.run([SNUG, "gen", "--preset", "demo", "--type", "f32", "--from-weights", wdir,
                        "-o", os.path.join(tmp, "bad.gguf")], capture_output=True, text=True)
    res.check(r.returncode != 0 and name in r.stderr and "expected" in r.stderr
              and not os.path.exists(os.path.join(tmp, "bad.gguf")),
              f"a wrong-sized tensor file is refused: {r.stderr.strip()[:160]}")
    os.remove(os.path.join(wdir, name + ".f32"))
    r = subprocess.run([SNUG, "gen", "--preset", "demo", "--type", "f32", "--from-weights", wdir,
                        "-o", os.path.join(tmp, "bad.gguf")], capture_output=True, text=True)
    res.check(r.returncode != 0 and name in r.stderr,
              f"a missing tensor file is refused: {r.stderr.strip()[:160]}")


def main():
    res = Results()
    if not os.path.exists(MODEL):
        res.check(False, f"{MODEL} exists (the committed demo model)")
        res.done()
    with tempfile.TemporaryDirectory() as tmp:
        test_verify(res, tmp)
        test_default_model(res, tmp)
        test_progress(res, tmp)
        test_loading(res, tmp)
        test_from_weights(res, tmp)
    res.done()


if __name__ == "__main__":
    main()
