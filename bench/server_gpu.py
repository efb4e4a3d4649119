#!/usr/bin/env python3
# bench/server_gpu.py — `snug serve --backend cuda` with several slots (not a test:
# results with their command lines go in docs/perf/server.md). Starts its own servers.
#
#   python3 bench/server_gpu.py SNUG MODEL.gguf [--slots 4] [--ctx 65536] [--kv q8_0]
#       [--vram-budget 23.5GiB] [--tokens 64] [--prefill 32768] [--compare] [--spec-draft N]
#       [--spec-adapt on|off]
#
# The servers draft a fixed N tokens per step unless --spec-adapt on is given (random weights
# reject every draft, and the adaptation would stop drafting: the run would not measure N).
#
# 1. --compare: the same greedy /v1/completions (temperature 0, 16 tokens, streamed and not) on a
#    CPU server and on the CUDA server; prints whether the first 16 tokens agree per prompt.
# 2. Throughput: aggregate generated tokens/s with 1 request, then with SLOTS concurrent ones
#    (each max_tokens TOKENS, temperature 0.8, distinct seeds); prints the ratio.
# 3. Streaming under a long prefill: SLOTS-1 streamed requests; inter-token latency (time
#    between SSE chunks) p50/p99 while idle, then again while one more request with a prompt of
#    about PREFILL tokens is admitted (the engine runs its prompt chunk by chunk between the
#    others' decode steps). Prints both and the prompt's time to first token. The prompt is
#    capped at 90% of the per-slot context the server reports (/health), so that an automatic
#    context (no --ctx) gets as long a prompt as it can hold.
# --backend cpu runs the same on the CPU (a dry run of a device script); --log FILE keeps the
# server's log (its boot plan) after the run.
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request


class Server:
    def __init__(self, snug, model, tmp, name, args):
        self.port_file = os.path.join(tmp, name + ".port")
        self.log_path = os.path.join(tmp, name + ".log")
        self.log = open(self.log_path, "w")
        cmd = [snug, "serve", "-m", model, "--port", "0", "--port-file", self.port_file, *args]
        print("$", " ".join(cmd), flush=True)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        t0 = time.time()
        while not (os.path.exists(self.port_file) and open(self.port_file).read().strip()):
            if self.proc.poll() is not None or time.time() - t0 > 600:
                raise RuntimeError(f"server {name} did not start:\n" + open(self.log_path).read())
            time.sleep(0.1)
        self.port = int(open(self.port_file).read())
        print(f"  {name}: up in {time.time() - t0:.1f} s", flush=True)

    def n_ctx(self):
        """The per-slot context the server reports in /health (0 when it says none)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=30) as r:
            return int(json.load(r).get("plan", {}).get("n_ctx", 0))

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def post(self, body, timeout=1200):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        return urllib.request.urlopen(req, timeout=timeout)

    def complete(self, body):
        with self.post(body) as r:
            return json.load(r)

    def n_tokens(self, text):
        """Tokens the server's tokenizer makes of text (POST /tokenize)."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/tokenize",
                                     data=json.dumps({"content": text}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return len(json.load(r)["tokens"])

    def stream(self, body, stamps=None):
        """Streamed completion: the text and (when given) the arrival time of each chunk."""
        body = dict(body, stream=True)
        text = ""
        with self.post(body) as r:
            for raw in r:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                obj = json.loads(line[6:])
                for c in obj.get("choices", []):
                    if c.get("text"):
                        text += c["text"]
                        if stamps is not None:
                            stamps.append(time.time())
        return text


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


PROMPTS = ["Once upon a time", "The capital of France is", "def fibonacci(n):",
           "Question: what is 2 + 2? Answer:"]


def compare(cpu, gpu):
    same = 0
    for p in PROMPTS:
        body = {"prompt": p, "max_tokens": 16, "temperature": 0}
        a = cpu.complete(body)["choices"][0]["text"]
        b = gpu.complete(body)["choices"][0]["text"]
        s = gpu.stream(body)
        ok = a == b == s
        same += ok
        print(f"  {'same' if ok else 'DIFFERENT'}: {p!r}: cpu {a!r} gpu {b!r} gpu-stream {s!r}")
    print(f"compare: {same}/{len(PROMPTS)} prompts give the same 16 greedy tokens on CPU and GPU")


def throughput(srv, n, tokens):
    out = [0] * n

    def one(i):
        r = srv.complete({"prompt": f"Request {i}: once upon a time", "max_tokens": tokens,
                          "temperature": 0.8, "seed": i})
        out[i] = r["usage"]["completion_tokens"]

    th = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.time()
    for t in th:
        t.start()
    for t in th:
        t.join()
    dt = time.time() - t0
    return sum(out) / dt, sum(out), dt


def itl_run(srv, n_stream, tokens, long_prompt=None):
    stamps = [[] for _ in range(n_stream)]
    ttft = {}

    def streamer(i):
        srv.stream({"prompt": f"Stream {i}: a long story begins", "max_tokens": tokens,
                    "temperature": 0.8, "seed": 100 + i}, stamps[i])

    def prefill():
        t0 = time.time()
        try:
            r = srv.complete({"prompt": long_prompt, "max_tokens": 1, "temperature": 0})
        except urllib.error.HTTPError as e:
            print(f"long prompt refused: {e.code} {e.read()[:400]!r}", flush=True)
            return
        ttft["s"] = time.time() - t0
        ttft["n"] = r["usage"]["prompt_tokens"]

    th = [threading.Thread(target=streamer, args=(i,)) for i in range(n_stream)]
    for t in th:
        t.start()
    time.sleep(1.0)  # the streams are decoding
    w0 = time.time()
    pt = None
    if long_prompt:
        pt = threading.Thread(target=prefill)
        pt.start()
        pt.join()
    w1 = time.time()
    for t in th:
        t.join()
    gaps = []
    for s in stamps:
        for a, b in zip(s, s[1:]):
            if not long_prompt or (a >= w0 and b <= w1):
                gaps.append(b - a)
    return gaps, ttft


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("snug")
    ap.add_argument("model")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=0)
    ap.add_argument("--kv", default="")
    ap.add_argument("--vram-budget", default="")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prefill", type=int, default=32768)
    ap.add_argument("--spec-draft", type=int, default=0)
    ap.add_argument("--spec-adapt", choices=("on", "off"), default="off",
                    help="serve --spec-adapt (off: a fixed --spec-draft N per step)")
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--backend", default="cuda", help="serve --backend of the measured server")
    ap.add_argument("--log", default="", help="copy the measured server's log here at the end")
    ap.add_argument("--skip-itl", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--step-prompt", type=int, default=0,
                    help="serve --step-prompt: prompt tokens a prefilling slot adds per step")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="one more argument for the measured server (repeatable), e.g. "
                         "--serve-arg=--cache-ram --serve-arg=0")
    a = ap.parse_args()
    common = ["--slots", str(a.slots), "--spec-draft", str(a.spec_draft),
              "--spec-adapt", a.spec_adapt]
    if a.step_prompt:
        common += ["--step-prompt", str(a.step_prompt)]
    if a.ctx:
        common += ["--ctx", str(a.ctx)]
    if a.kv:
        common += ["--kv", a.kv]
    gpu_args = ["--backend", a.backend, *common]
    if a.vram_budget:
        gpu_args += ["--vram-budget", a.vram_budget]
    gpu_args += a.serve_arg
    with tempfile.TemporaryDirectory() as tmp:
        gpu = Server(a.snug, a.model, tmp, "gpu", gpu_args)
        try:
            if a.compare:
                cpu = Server(a.snug, a.model, tmp, "cpu", common)
                try:
                    compare(cpu, gpu)
                finally:
                    cpu.stop()
            throughput(gpu, 1, 8)  # warm-up
            if not a.skip_throughput:
                r1, n1, t1 = throughput(gpu, 1, a.tokens)
                rn, nn, tn = throughput(gpu, a.slots, a.tokens)
                print(f"throughput: 1 request {r1:.1f} tok/s ({n1} tokens, {t1:.2f} s); "
                      f"{a.slots} requests {rn:.1f} tok/s ({nn} tokens, {tn:.2f} s); "
                      f"ratio {rn / r1:.2f}x", flush=True)
            if not a.skip_itl and a.slots >= 2:
                idle, _ = itl_run(gpu, a.slots - 1, a.tokens)
                n_ctx = gpu.n_ctx()
                n_prefill = a.prefill
                if n_ctx and n_prefill > 0.9 * n_ctx:
                    n_prefill = int(0.9 * n_ctx)
                    print(f"long prompt: {n_prefill} tokens (0.9 of the {n_ctx}-token context "
                          f"per slot; {a.prefill} asked)", flush=True)
                random.seed(1)
                words = ["".join(random.choice("abcdefghijklmnopqrstuvwxyz")
                                 for _ in range(random.randint(2, 8))) for _ in range(4000)]
                # random 2-8 letter words: tokens per word from the server's own tokenizer on a
                # sample (about 6 with the byte vocabulary `snug gen` builds in, under 3 with
                # the real one); the usage line gives the real count
                sample = " ".join(random.choice(words) for _ in range(2000))
                per_word = max(gpu.n_tokens(sample) / 2000, 0.5)
                long_prompt = " ".join(random.choice(words)
                                       for _ in range(int(n_prefill / per_word)))
                busy, ttft = itl_run(gpu, a.slots - 1, 4 * a.tokens, long_prompt)
                print(f"inter-token latency, {a.slots - 1} streams: idle p50 "
                      f"{1e3 * pct(idle, 50):.1f} ms p99 {1e3 * pct(idle, 99):.1f} ms "
                      f"({len(idle)} gaps); during a {ttft.get('n')}-token prefill p50 "
                      f"{1e3 * pct(busy, 50):.1f} ms p99 {1e3 * pct(busy, 99):.1f} ms "
                      f"({len(busy)} gaps; prefill took {ttft.get('s', 0):.1f} s)", flush=True)
        finally:
            gpu.stop()
            print("---- gpu server log (tail) ----")
            print("".join(open(os.path.join(tmp, "gpu.log")).readlines()[-30:]))
            if a.log:
                shutil.copyfile(os.path.join(tmp, "gpu.log"), a.log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
