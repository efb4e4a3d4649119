"""test_prefix_device.py — the prefix cache on a device context, end to end through the server:
`snug serve --backend cuda` over the test stand-in libsnug_fakedev.so (SNUG_CUDA_LIB; the CPU
ops behind the engine's device paths, so the checkpoints move through the backend's
download/upload and the staging page as on a GPU) with the default flags (the cache on, MTP
drafts on: the checkpoints carry the MTP block's state), against a CPU server without the
cache:

1. the 10-turn agent replay (tests/data/agent_replay/sample.json): every turn's greedy output
   equals the CPU server's, and every turn after the first reuses the cache (the tool-loop turns
   up to the previous prompt's last message, the new user turn up to the first user message);
2. with --cache-dir: after a restart the last turn restores from the disk tier, with the CPU
   server's output.
With SNUG_CUDA_LIB already set (tests/device/run_prefix_device.sh: the real libsnug_cuda.so on
a GPU) that library is used instead, and the outputs are compared the same way.
Runnable as a script; prints "N passed, N failed".
"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SNUG, SRC, Results, fixtures_dir  # noqa: E402

REPLAY = os.path.join(SRC, "tests", "data", "agent_replay", "sample.json")
FAKE = os.path.join(os.path.dirname(SNUG), "libsnug_fakedev.so")


def start(model, tmp, name, extra, env=None):
    port_file = os.path.join(tmp, name + ".port")
    log = open(os.path.join(tmp, name + ".log"), "w")
    p = subprocess.Popen([SNUG, "serve", "-m", model, "--port", "0", "--port-file", port_file,
                          *extra], stdout=subprocess.DEVNULL, stderr=log, env=env)
    for _ in range(1200):
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
    return json.loads(p.stdout)["turns"]


def main():
    res = Results()
    fx = fixtures_dir(res)
    if not fx:
        res.done()
    env = dict(os.environ)
    if not env.get("SNUG_CUDA_LIB"):
        if not os.path.exists(FAKE):
            res.check(False, f"{FAKE} is built (CMake target snug_fakedev)")
            res.done()
        env["SNUG_CUDA_LIB"] = FAKE
    print(f"device library: {env['SNUG_CUDA_LIB']}")
    model = os.path.join(fx, "trained", "trained-f16.gguf")
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        cpu_p, cpu = start(model, tmp, "cpu", ["--cache-ram", "0"])
        dev_p, dev = start(model, tmp, "dev", ["--backend", "cuda", "--cache-dir", cache], env)
        try:
            log = open(os.path.join(tmp, "dev.log")).read()
            res.check("prefix cache: " in log and "prefix cache (ram)" in log and
                      "not used by this engine" not in log,
                      "the device server boots with the prefix cache on (boot line, plan item)")
            a = replay(cpu)
            b = replay(dev)
            res.check(len(a) == len(b) == 10 and all(t["ok"] for t in a + b), "both replays ran")
            for i, (x, y) in enumerate(zip(a, b)):
                res.check(x["output"] == y["output"] and x["prompt_tokens"] == y["prompt_tokens"],
                          f"turn {i + 1}: the device server's greedy output equals the CPU one's "
                          f"({y['cached_tokens']} of {y['prompt_tokens']} prompt tokens cached)")
            reuse = [t["cached_tokens"] for t in b]
            res.check(reuse[0] == 0 and all(reuse[i] >= a[i - 1]["prompt_tokens"] - 8
                                            for i in range(1, 10) if i != 7) and
                      reuse[7] >= a[0]["prompt_tokens"] - 8,
                      f"every turn after the first reuses the device checkpoints: {reuse}")
        finally:
            stop(dev_p)
        dev_p, dev = start(model, tmp, "dev2", ["--backend", "cuda", "--cache-dir", cache], env)
        try:
            c = replay(dev)  # the same conversation again: every turn's prompt from disk
            res.check(c[0]["cached_tokens"] > 0 and c[0]["output"] == a[0]["output"] and
                      all(x["output"] == y["output"] for x, y in zip(a, c)),
                      f"after a restart the device server restores from disk "
                      f"({c[0]['cached_tokens']} tokens of turn 1, {c[9]['cached_tokens']} of "
                      f"turn 10), the CPU outputs")
        finally:
            stop(dev_p)
            stop(cpu_p)
    res.done()


if __name__ == "__main__":
    main()
