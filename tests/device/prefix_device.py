#!/usr/bin/env python3
"""prefix_device.py — the prefix cache on the GPU (driven by tests/device/run_prefix_device.sh;
Python standard library only, as the device machine has no packages). Each part appends result
lines "PART NAME MEASURED TARGET PASS|FAIL" to OUTDIR/results.txt and keeps the servers' logs.

  prefix_device.py trained SNUG OUTDIR MODEL
    The 10-turn agent replay (tests/data/agent_replay/sample.json, `snug bench --agent-replay`)
    on four servers, one after the other: CPU without the cache, CUDA without the cache
    (--cache-ram 0), CUDA with the default cache and a disk tier, the same CUDA server after a
    restart. Every turn's greedy output: CUDA with the cache = CUDA without it (the cache is
    exact on the device), = CPU (the backends agree on this fixture), the restarted server =
    them, with every turn after the first reusing the cache and the restart reusing the disk.

  prefix_device.py agent27b SNUG OUTDIR MODEL [--hist N] [--ctx N] [--kv F] [--budget SIZE]
                                           [--cold]
    An agent conversation of about N history tokens (default 100000: rounds of a long user
    message and a short assistant answer, then a question) on `snug serve --backend cuda`:
    server A (default cache, --cache-dir): turn N-1 cold (its time t1), then turn N (the
    history, the previous answer, a new user message) — its time to first token (max_tokens 1)
    against the cold prefill of the same prompt must be <= 10%; server C, a restart of A on its
    disk tier: another turn N, <= 25%. The cold prefill: --cold measures it on a server without
    the cache (one more 100K prefill); without --cold it is t1 scaled to the turn's length
    (t1 includes the cache's own stores and disk writes: the ratio is then a little kinder).
"""
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REPLAY = os.path.join(ROOT, "tests", "data", "agent_replay", "sample.json")


def result(out, part, name, measured, target, ok):
    line = f"{part} {name} {measured} {target} {'PASS' if ok else 'FAIL'}"
    print("RESULT " + line, flush=True)
    with open(os.path.join(out, "results.txt"), "a") as f:
        f.write(line + "\n")


class Server:
    def __init__(self, snug, model, out, name, args, timeout=600):
        self.name = name
        self.log_path = os.path.join(out, f"serve_{name}.log")
        port_file = os.path.join(out, f"{name}.port")
        if os.path.exists(port_file):
            os.remove(port_file)
        cmd = [snug, "serve", "-m", model, "--port", "0", "--port-file", port_file, *args]
        print("$ " + " ".join(cmd), flush=True)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                     stderr=open(self.log_path, "w"))
        t0 = time.time()
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if self.proc.poll() is not None or time.time() - t0 > timeout:
                self.proc.kill()
                raise RuntimeError(f"server {name} did not start:\n" + self.log_tail())
            time.sleep(0.2)
        self.url = f"http://127.0.0.1:{int(open(port_file).read())}"
        print(f"  {name}: up in {time.time() - t0:.1f} s", flush=True)

    def log_tail(self, n=25):
        return "".join(open(self.log_path).readlines()[-n:])

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def chat(self, messages, max_tokens=1):
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0}
        req = urllib.request.Request(self.url + "/v1/chat/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        t0 = time.time()
        with urllib.request.urlopen(req, timeout=1800) as r:
            b = json.load(r)
        u = b["usage"]
        return time.time() - t0, u["prompt_tokens"], u.get("prompt_tokens_details", {}).get(
            "cached_tokens", 0)


def replay(snug, url):
    p = subprocess.run([snug, "bench", "--agent-replay", REPLAY, "--url", url, "--json"],
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError("replay failed: " + p.stderr[-800:])
    return json.loads(p.stdout)["turns"]


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x["output"] != y["output"]:
            return f"turn {i + 1}"
    return "none"


def part_trained(snug, out, model):
    pfx = tempfile.mkdtemp(prefix="pfx_trained_")
    runs = {}
    for name, args in [("cpu", ["--cache-ram", "0"]),
                       ("cuda_nocache", ["--backend", "cuda", "--cache-ram", "0"]),
                       ("cuda_cache", ["--backend", "cuda", "--cache-dir", pfx]),
                       ("cuda_restart", ["--backend", "cuda", "--cache-dir", pfx])]:
        s = Server(snug, model, out, name, args)
        try:
            runs[name] = replay(snug, s.url)
        finally:
            s.stop()
        print(f"  {name}: cached per turn {[t['cached_tokens'] for t in runs[name]]}",
              flush=True)
    json.dump(runs, open(os.path.join(out, "trained_replays.json"), "w"), indent=1)
    c, n, cpu = runs["cuda_cache"], runs["cuda_nocache"], runs["cpu"]
    r = runs["cuda_restart"]
    same = sum(x["output"] == y["output"] for x, y in zip(c, n))
    result(out, "a", "cuda_cache_eq_cuda_nocache", f"{same}/10", "10/10", same == 10)
    for name, run in [("cuda_nocache_eq_cpu", n), ("cuda_cache_eq_cpu", c)]:
        s = sum(x["output"] == y["output"] for x, y in zip(run, cpu))
        result(out, "a", name, f"{s}/10(first_diff:{first_diff(run, cpu)})", "10/10", s == 10)
    reuse = [t["cached_tokens"] for t in c]
    ok = reuse[0] == 0 and all(reuse[i] >= n[i - 1]["prompt_tokens"] - 8 for i in range(1, 10)
                               if i != 7) and reuse[7] >= n[0]["prompt_tokens"] - 8
    result(out, "a", "cuda_cache_reuse", "/".join(map(str, reuse)), "prev_prompt-8", ok)
    s = sum(x["output"] == y["output"] for x, y in zip(r, n))
    result(out, "a", "restart_disk_eq_nocache", f"{s}/10(turn1_cached:{r[0]['cached_tokens']})",
           "10/10,cached>0", s == 10 and r[0]["cached_tokens"] > 0)


def words(rng, n):
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
             for _ in range(5000)]
    return " ".join(rng.choice(vocab) for _ in range(n))


def count_tokens(snug, model, text):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
    p = subprocess.run([snug, "tokenize", "-m", model, "--file", f.name], capture_output=True,
                       text=True, timeout=300)
    os.remove(f.name)
    return len(json.loads(p.stdout))


def part_agent27b(snug, out, model, hist, ctx, kv, budget, cold):
    rng = random.Random(33)
    sample = words(rng, 20000)
    per_word = count_tokens(snug, model, sample) / 20000
    round_words = int(3000 / per_word)
    msgs = [{"role": "system", "content": "You are a coding agent. Keep answers short."}]
    n_rounds = max(1, int(hist / (3000 + 40)))
    for i in range(n_rounds):
        msgs.append({"role": "user", "content": f"Log part {i}:\n" + words(rng, round_words)})
        msgs.append({"role": "assistant", "content": f"Noted part {i}."})
    turn_prev = msgs + [{"role": "user", "content": "Which part mentions the most errors?"}]
    answer = {"role": "assistant", "content": "Part 7 mentions the most errors."}
    turn_a = turn_prev + [answer, {"role": "user", "content": "Fix them in part 7, please. "
                                   + words(rng, 300)}]
    turn_b = turn_prev + [answer, {"role": "user", "content": "Now check part 9 instead. "
                                   + words(rng, 300)}]
    pfx = os.path.join(tempfile.gettempdir(), "pfx27")
    subprocess.run(["rm", "-rf", pfx])
    common = ["--backend", "cuda", "--vram-budget", budget, "--ctx", str(ctx), "--kv", kv]
    disk = ["--cache-dir", pfx, "--cache-disk", "24GiB"]
    a = Server(snug, model, out, "agent_A", common + disk)
    try:
        t1, n1, c1 = a.chat(turn_prev)
        print(f"  A: turn N-1 cold: {n1} prompt tokens in {t1:.2f} s (cached {c1})", flush=True)
        tw, nw, cw = a.chat(turn_a)
        print(f"  A: turn N: {nw} prompt tokens, {cw} cached, first token after {tw:.3f} s",
              flush=True)
    finally:
        a.stop()
    print(a.log_tail(12), flush=True)
    c = Server(snug, model, out, "agent_C_restart", common + disk)
    try:
        td, nd, cd = c.chat(turn_b)
        print(f"  C (restart, disk tier): turn N: {nd} prompt tokens, {cd} cached, first token "
              f"after {td:.3f} s", flush=True)
    finally:
        c.stop()
    print(c.log_tail(12), flush=True)
    if cold:
        b = Server(snug, model, out, "agent_B_nocache", common + ["--cache-ram", "0"])
        try:
            tc, nc, _ = b.chat(turn_b)
        finally:
            b.stop()
        how = "measured"
    else:
        tc, nc, how = t1 * nd / n1, nd, "est_from_t1"
    print(f"  cold prefill of turn N ({how}): {nc} tokens in {tc:.2f} s", flush=True)
    result(out, "b", f"ttft_warm/cold({nw}tok,{cw}cached)", f"{tw / tc:.4f}({tw:.2f}s/{tc:.1f}s,{how})",
           "<=0.10", tw / tc <= 0.10 and cw > 0)
    result(out, "b", f"ttft_disk/cold({nd}tok,{cd}cached)", f"{td / tc:.4f}({td:.2f}s/{tc:.1f}s,{how})",
           "<=0.25", td / tc <= 0.25 and cd > 0)
    subprocess.run(["du", "-sh", pfx])
    subprocess.run(["rm", "-rf", pfx])


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    part, snug, out, model = sys.argv[1:5]
    os.makedirs(out, exist_ok=True)
    rest = sys.argv[5:]

    def opt(name, default):
        return rest[rest.index(name) + 1] if name in rest else default

    if part == "trained":
        part_trained(snug, out, model)
    elif part == "agent27b":
        part_agent27b(snug, out, model, int(opt("--hist", 100000)), int(opt("--ctx", 131072)),
                      opt("--kv", "q8_0"), opt("--budget", "23.5GiB"), "--cold" in rest)
    else:
        sys.exit(f"unknown part {part}")


if __name__ == "__main__":
    main()
