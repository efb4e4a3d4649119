"""test_prefix_cache.py — the prefix cache end to end on the trained fixture (CPU, greedy,
--spec-draft 0; test_prefix_cache_spec.py runs the same with --spec-draft 3, the checkpoints then
carrying the MTP block's state):

1. The 10-turn agent replay (tests/data/agent_replay/sample.json: tool calls and results,
   thinking on, the client never sends reasoning back) against a cold server (--cache-ram 0) and
   one with the default flags (the cache is on by default): every turn's greedy output
   (reasoning, content, tool calls) is identical; every
   tool-loop request reuses the previous prompt up to its last message boundary (cached_tokens
   >= previous prompt - the generation prompt's tokens). The new user turn (turn 8) cannot: the
   template re-renders the assistant turns before a new user query without their empty
   <think></think> block, so the prompt diverges right after the first user message — there it
   must reuse at least turn 1's prompt minus the generation prompt.
2. A second conversation with the same system prompt and tools reuses the system turn (default
   flags too).
3. A restart with --cache-dir reuses the disk tier (openai client, non-streamed): same output as
   the cold server, cached_tokens > 0, files loaded.
4. The file of the checkpoint that request restored, its payload corrupted: after a restart the
   restore fails its checksum and falls back to the checkpoint before it (cached_tokens > 0 but
   fewer), with the cold server's output.
5. Corrupted files (payload bytes flipped, one truncated): refused, the request still answers
   with the cold server's output; /metrics counts the refusals.
6. The checkpoint at the end of generation (check_end_checkpoint): a prompt that repeats a
   finished request's prompt and generated tokens reuses both after the slot was taken over.
Runnable as a script; prints "N passed, N failed".
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SNUG, SRC, Results, fixtures_dir  # noqa: E402

import openai  # noqa: E402

REPLAY = os.path.join(SRC, "tests", "data", "agent_replay", "sample.json")


def start(model, tmp, name, extra, spec=0):
    port_file = os.path.join(tmp, name + ".port")
    log = open(os.path.join(tmp, name + ".log"), "w")
    # with drafts, a fixed number per step (--spec-adapt off): the acceptance lengths of the cold
    # and the cached server are compared, and chosen draft counts would move them
    adapt = ["--spec-adapt", "off"] if spec else []
    p = subprocess.Popen([SNUG, "serve", "-m", model, "--port", "0", "--port-file", port_file,
                          "--spec-draft", str(spec), *adapt, *extra], stdout=subprocess.DEVNULL,
                         stderr=log)
    for _ in range(600):
        if os.path.exists(port_file) and open(port_file).read().strip():
            return p, f"http://127.0.0.1:{int(open(port_file).read())}"
        if p.poll() is not None:
            raise RuntimeError("snug serve exited: " + open(log.name).read())
        time.sleep(0.1)
    p.kill()
    raise RuntimeError("snug serve did not start")


def stop(p):
    p.terminate()
    p.wait(timeout=60)


def replay(url, path=REPLAY):
    p = subprocess.run([SNUG, "bench", "--agent-replay", path, "--url", url, "--json"],
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError("replay failed: " + p.stderr[-500:])
    return json.loads(p.stdout)


def requests_of(doc):
    """The message list of every request, as replay.c builds them."""
    hist = [{"role": "system", "content": doc["system"]}]
    out = []
    for t in doc["turns"]:
        hist += t["messages"]
        out.append(list(hist))
        a = t["assistant"]
        m = {"role": "assistant", "content": a.get("content", "")}
        if a.get("tool_calls"):
            m["tool_calls"] = a["tool_calls"]
        hist.append(m)
    return out


def n_tokens(url, text):
    req = urllib.request.Request(url + "/tokenize", data=json.dumps(
        {"content": text, "parse_special": True}).encode(), headers={"Content-Type":
                                                                     "application/json"})
    return len(json.loads(urllib.request.urlopen(req, timeout=60).read())["tokens"])


def metrics(url):
    out = {}
    for line in urllib.request.urlopen(url + "/metrics", timeout=30).read().decode().splitlines():
        if line.startswith(("snug_prefix_cache", "snug_spec_")) and " " in line:
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def ask(url, doc, messages):
    c = openai.OpenAI(base_url=url + "/v1", api_key="none")
    r = c.chat.completions.create(model="trained-f16.gguf", messages=messages, tools=doc["tools"],
                                  max_tokens=doc["max_tokens"], temperature=0,
                                  extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    m = r.choices[0].message
    calls = [{"name": t.function.name, "arguments": t.function.arguments}
             for t in (m.tool_calls or [])]
    reasoning = getattr(m, "reasoning_content", None) or (m.model_extra or {}).get(
        "reasoning_content") or ""
    return {"reasoning": reasoning, "content": m.content or "", "tool_calls": calls}, \
        r.usage.prompt_tokens_details.cached_tokens, r.usage.prompt_tokens


def same_output(stream_out, got):
    calls = [{"name": t["name"], "arguments": t["arguments"]}
             for t in (stream_out.get("tool_calls") or [])]
    return (stream_out["reasoning"].strip() == got["reasoning"].strip() and
            stream_out["content"].strip() == got["content"].strip() and calls == got["tool_calls"])


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=120).read())


def check_end_checkpoint(res, model, tmp, spec):
    """6. The checkpoint at the end of generation: one slot generates 12 tokens after a prompt,
    another prompt takes the slot over, then a prompt of the first prompt's and the generated
    tokens (ids: the pieces logprobs returns, each one token) reuses the generated part too —
    only that checkpoint holds it (the others end at the prompt's end)."""
    p, url = start(model, tmp, "endck", ["--slots", "1"], spec)
    try:
        ids = post(url, "/tokenize", {"content": "def fibonacci(n):\n    "})["tokens"]
        a = post(url, "/v1/completions", {"prompt": ids, "max_tokens": 12, "temperature": 0,
                                           "logprobs": 1})
        pieces = a["choices"][0]["logprobs"]["tokens"]
        gen = []
        for piece in pieces:
            t = post(url, "/tokenize", {"content": piece, "parse_special": True})["tokens"]
            gen += t if len(t) == 1 else [None]
        if None in gen or len(gen) != 12:
            res.check(False, f"end checkpoint: the generated pieces map to single tokens ({pieces})")
            return
        post(url, "/v1/completions", {"prompt": "class Stack:\n", "max_tokens": 4,
                                      "temperature": 0})
        b = post(url, "/v1/completions", {"prompt": ids + gen + ids[:1], "max_tokens": 1,
                                          "temperature": 0})
        cached = b["usage"]["prompt_tokens_details"]["cached_tokens"]
        res.check(cached >= len(ids) + len(gen) - 1,
                  f"end checkpoint: {cached} tokens reused of {len(ids)} prompt + {len(gen)} "
                  f"generated (at least {len(ids) + len(gen) - 1})")
    finally:
        stop(p)


def main(spec=0):
    """spec: the --spec-draft of every server (0: none)."""
    res = Results()
    fx = fixtures_dir(res)
    if not fx:
        res.done()
    model = os.path.join(fx, "trained", "trained-f16.gguf")
    doc = json.load(open(REPLAY))
    reqs = requests_of(doc)
    with tempfile.TemporaryDirectory() as tmp:
        check_end_checkpoint(res, model, tmp, spec)
        cache = os.path.join(tmp, "cache")
        flags = ["--cache-ram", "64MiB", "--cache-dir", cache]

        cold_p, cold = start(model, tmp, "cold", ["--cache-ram", "0"], spec)
        warm_p, warm = start(model, tmp, "warm", [], spec)  # the default flags: cache on
        try:
            gen = n_tokens(cold, "<|im_start|>assistant\n<think>\n")
            a = replay(cold)["turns"]
            b = replay(warm)["turns"]
            res.check(len(a) == len(b) == 10 and all(t["ok"] for t in a + b), "both replays ran")
            for i, (x, y) in enumerate(zip(a, b)):
                res.check(x["output"] == y["output"] and x["prompt_tokens"] == y["prompt_tokens"],
                          f"turn {i + 1}: cached server's greedy output equals the cold one's")
            res.check(all(t["cached_tokens"] == 0 for t in a), "the cold server reuses nothing")
            for i in range(1, 10):
                prev = b[i - 1]["prompt_tokens"]
                got = b[i]["cached_tokens"]
                if i == 7:  # the new user turn: reuse up to the first re-rendered assistant turn
                    want = b[0]["prompt_tokens"] - gen
                    res.check(got >= want, f"turn 8 (new user turn) reuses {got} >= turn 1's "
                                           f"prompt minus the generation prompt ({want})")
                else:
                    res.check(got >= prev - gen, f"turn {i + 1} reuses {got} >= previous prompt "
                                                 f"{prev} - {gen}")
            m = metrics(warm)
            hits = m.get("snug_prefix_cache_hits_total", 0)
            res.check(hits >= 9, f"/metrics: hits {hits}")
            if spec:  # the drafts of a restored slot are accepted as a cold slot's are
                mc = metrics(cold)
                la = mc.get("snug_spec_mean_acceptance_length", 0)
                lb = m.get("snug_spec_mean_acceptance_length", 0)
                res.check(la > 1.5 and lb > 1.5 and abs(la - lb) <= 0.25,
                          f"speculation: {lb:.3f} tokens per verification with the cache, "
                          f"{la:.3f} without")
            # two conversations sharing the system prompt
            other = dict(doc)
            other["turns"] = [{"messages": [{"role": "user", "content":
                                             "Write a README section about the calculator."}],
                               "assistant": {"content": "ok"}}]
            op = os.path.join(tmp, "other.json")
            json.dump(other, open(op, "w"))
            sys_tokens = b[0]["prompt_tokens"] - gen - n_tokens(
                cold, "<|im_start|>user\n" + doc["turns"][0]["messages"][0]["content"] +
                "<|im_end|>\n")
            o_cold = replay(cold, op)["turns"][0]
            o_warm = replay(warm, op)["turns"][0]
            res.check(o_warm["cached_tokens"] >= sys_tokens and
                      o_warm["output"] == o_cold["output"],
                      f"a new conversation reuses the system turn ({o_warm['cached_tokens']} >= "
                      f"{sys_tokens}), same output")
        finally:
            stop(warm_p)
        # the disk tier: the replay on a server with --cache-dir fills it
        disk_p, disk_url = start(model, tmp, "disk", flags, spec)
        try:
            d = replay(disk_url)["turns"]
            res.check([t["output"] for t in d] == [t["output"] for t in a],
                      "disk-tier server: the cold outputs")
            disk = metrics(disk_url).get('snug_prefix_cache_checkpoints{tier="disk"}', 0)
            res.check(disk > 0, f"/metrics: disk checkpoints {disk}")
        finally:
            stop(disk_p)
            stop(cold_p)
        # restart on the disk tier: the last request again, openai client
        warm_p, warm = start(model, tmp, "warm2", flags, spec)
        try:
            out, cached, pt = ask(warm, doc, reqs[9])
            m = metrics(warm)
            res.check(m.get("snug_prefix_cache_files_loaded_total", 0) > 0,
                      f"restart: {m.get('snug_prefix_cache_files_loaded_total')} files loaded")
            res.check(cached >= b[8]["prompt_tokens"] - gen,
                      f"restart: turn 10 reuses {cached} tokens from disk")
            res.check(same_output(a[9]["output"], out), "restart: the cold server's output")
        finally:
            stop(warm_p)
        # the checkpoint that restore used, its payload corrupted: the one before it instead
        used = [f for f in os.listdir(cache) if f.endswith(f"-{cached}.snugpfx")]
        res.check(len(used) == 1, f"the restored checkpoint's file ({used})")
        for f in used:
            path = os.path.join(cache, f)
            with open(path, "r+b") as fh:
                fh.seek(os.path.getsize(path) - 3)
                b3 = fh.read(1)
                fh.seek(os.path.getsize(path) - 3)
                fh.write(bytes([b3[0] ^ 0xA5]))
        warm_p, warm = start(model, tmp, "warm_fb", flags, spec)
        try:
            out, cached2, _ = ask(warm, doc, reqs[9])
            res.check(0 < cached2 < cached, f"a corrupt payload falls back to the checkpoint "
                                            f"before it ({cached2} of {cached} tokens reused)")
            res.check(same_output(a[9]["output"], out), "fallback: the cold server's output")
            m = metrics(warm)
            res.check(m.get("snug_prefix_cache_restore_failures_total", 0) >= 1,
                      "fallback: the failed restore counted")
        finally:
            stop(warm_p)
        # corrupt every file (flip payload bytes), truncate one: refused, still correct
        files = sorted(f for f in os.listdir(cache) if f.endswith(".snugpfx"))
        res.check(len(files) > 2, f"{len(files)} checkpoint files")
        for k, f in enumerate(files):
            path = os.path.join(cache, f)
            size = os.path.getsize(path)
            if k == 0:
                os.truncate(path, size // 2)
                continue
            with open(path, "r+b") as fh:
                fh.seek(size - 7)
                b7 = fh.read(1)
                fh.seek(size - 7)
                fh.write(bytes([b7[0] ^ 0x5A]))
        warm_p, warm = start(model, tmp, "warm3", flags, spec)
        try:
            out, cached, pt = ask(warm, doc, reqs[9])
            res.check(same_output(a[9]["output"], out), "corrupted files: still the cold output")
            out2, _, _ = ask(warm, doc, reqs[4])
            res.check(same_output(a[4]["output"], out2), "corrupted files: turn 5 too")
            m = metrics(warm)
            refused = m.get("snug_prefix_cache_files_refused_total", 0) + m.get(
                "snug_prefix_cache_restore_failures_total", 0)
            res.check(refused > 0, f"corrupted files refused ({refused})")
        finally:
            stop(warm_p)
    res.done()


if __name__ == "__main__":
    main()
