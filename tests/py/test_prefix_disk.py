"""test_prefix_disk.py — the prefix cache's disk tier after crashes (trained fixture, CPU):

1. A server with --cache-dir D --cache-disk 6MiB and a checkpoint every 128 tokens is killed
   with SIGKILL while it prefills and writes checkpoints, three times. Then the folder gets the
   leftovers a crash can leave and a file that is not this server's: a temporary under the older
   name (KEY-POS.snugpfx.tmp) and one of a writer that is gone (KEY-POS.snugpfx.PID.tmp, a PID
   that exited), 3 MiB each; a live writer's temporary (this test's PID), 1 MiB; and a
   checkpoint file under a name its header does not give (refused at boot, left in place). After
   the next boot the gone writers' temporaries are removed (/metrics counts them), the live
   one is kept, and every cache file of the folder — the refused one and the live temporary
   included — fits --cache-disk (the oldest checkpoints went to make room).
2. That server still answers with the cold server's output and reuses its disk tier.
Runnable as a script; prints "N passed, N failed".
"""
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SNUG, Results, fixtures_dir  # noqa: E402

BUDGET = 6 << 20


def start(model, tmp, name, extra):
    port_file = os.path.join(tmp, name + ".port")
    if os.path.exists(port_file):
        os.remove(port_file)
    log = open(os.path.join(tmp, name + ".log"), "w")
    p = subprocess.Popen([SNUG, "serve", "-m", model, "--port", "0", "--port-file", port_file,
                          "--spec-draft", "0", *extra], stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(600):
        if os.path.exists(port_file) and open(port_file).read().strip():
            return p, f"http://127.0.0.1:{int(open(port_file).read())}"
        if p.poll() is not None:
            raise RuntimeError("snug serve exited: " + open(log.name).read())
        time.sleep(0.1)
    p.kill()
    raise RuntimeError("snug serve did not start")


def complete(url, prompt, n=8):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(
        {"prompt": prompt, "max_tokens": n, "temperature": 0}).encode(),
        headers={"Content-Type": "application/json"})
    b = json.loads(urllib.request.urlopen(req, timeout=300).read())
    return b["choices"][0]["text"], b["usage"].get("prompt_tokens_details", {}).get(
        "cached_tokens", 0)


def metrics(url):
    out = {}
    for line in urllib.request.urlopen(url + "/metrics", timeout=30).read().decode().splitlines():
        if line.startswith("snug_prefix_cache") and " " in line:
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def folder_bytes(d):
    """Bytes of the cache files in d; a live server may rename or remove a file between the
    listing and its size (a temporary becoming a checkpoint): such a file is skipped."""
    total = 0
    for f in os.listdir(d):
        if ".snugpfx" not in f:
            continue
        try:
            total += os.path.getsize(os.path.join(d, f))
        except FileNotFoundError:
            pass
    return total


def main():
    res = Results()
    fx = fixtures_dir(res)
    if not fx:
        res.done()
    model = os.path.join(fx, "trained", "trained-f16.gguf")
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "seven", "paper"]
    prompts = [" ".join(rng.choice(words) for _ in range(700)) for _ in range(4)]
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "cache")
        flags = ["--cache-dir", d, "--cache-disk", "6MiB", "--cache-checkpoint-every", "128"]
        # 1. SIGKILL while it prefills and writes checkpoints
        for k in range(3):
            p, url = start(model, tmp, f"kill{k}", flags)
            t = threading.Thread(target=lambda u=url, q=prompts[k]: _swallow(complete, u, q),
                                 daemon=True)
            t.start()
            # kill it while it writes: once its first checkpoint file is there (a slow or loaded
            # machine takes longer to get there than a fixed delay allows), a little later
            for _ in range(600):
                if os.path.isdir(d) and any(".snugpfx" in f for f in os.listdir(d)):
                    break
                time.sleep(0.05)
            time.sleep(0.05 + 0.15 * rng.random())
            p.send_signal(signal.SIGKILL)
            p.wait()
        n_files = len([f for f in os.listdir(d) if f.endswith(".snugpfx")])
        res.check(n_files > 0, f"{n_files} checkpoint files written before the kills")
        # what a crash leaves, and a file that is not this server's
        gone = subprocess.Popen(["true"])
        gone.wait()
        planted = {
            "0123456789abcdef-256.snugpfx.tmp": 3 << 20,
            f"fedcba9876543210-128.snugpfx.{gone.pid}.tmp": 3 << 20,
            f"00000000000000aa-384.snugpfx.{os.getpid()}.tmp": 1 << 20,
        }
        for name, size in planted.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(b"\0" * size)
        some = sorted(f for f in os.listdir(d) if f.endswith(".snugpfx"))[0]
        with open(os.path.join(d, some), "rb") as f:
            blob = f.read()
        with open(os.path.join(d, "00000000000000bb-1.snugpfx"), "wb") as f:
            f.write(blob)  # its header names another file: refused, left, counted
        # the killed servers' own temporaries (a kill in the middle of a write), gone writers too
        crashed = [f for f in os.listdir(d) if f.endswith(".tmp") and f not in planted]
        before = folder_bytes(d)
        res.check(before > BUDGET, f"the folder holds {before / 2**20:.1f} MiB before the boot "
                                   f"(budget {BUDGET / 2**20:.0f} MiB)")
        p, url = start(model, tmp, "after", flags)
        cold_p, cold = start(model, tmp, "cold", ["--cache-ram", "0"])
        try:
            m = metrics(url)
            left = sorted(f for f in os.listdir(d) if f.endswith(".tmp"))
            res.check(left == [f"00000000000000aa-384.snugpfx.{os.getpid()}.tmp"],
                      f"the gone writers' temporaries removed, the live one kept: {left}")
            want = 2 + len(crashed)
            res.check(m.get("snug_prefix_cache_stale_temporaries_removed_total") == want,
                      f"/metrics: {want} stale temporaries removed (2 planted, {len(crashed)} "
                      f"left by the kills)")
            res.check(os.path.exists(os.path.join(d, "00000000000000bb-1.snugpfx")),
                      "the refused file is left in place")
            other = m.get("snug_prefix_cache_disk_other_bytes", 0)
            res.check(other >= (1 << 20) + len(blob),
                      f"/metrics: {other / 2**20:.2f} MiB of other cache files counted")
            after = folder_bytes(d)
            res.check(after <= BUDGET, f"after the boot the folder's cache files fit "
                                       f"--cache-disk: {after / 2**20:.2f} MiB <= "
                                       f"{BUDGET / 2**20:.0f} MiB")
            # 2. still correct, the disk tier still used
            for q in prompts[:2]:
                a, _ = complete(cold, q)
                b, _ = complete(url, q)
                res.check(a == b, "after the crashes: the cold server's output")
            a, _ = complete(cold, prompts[0] + " stone")
            b, cached = complete(url, prompts[0] + " stone")
            res.check(a == b and cached > 0, f"a continued prompt reuses {cached} tokens")
            after = folder_bytes(d)
            res.check(after <= BUDGET, f"after more writes: {after / 2**20:.2f} MiB <= "
                                       f"{BUDGET / 2**20:.0f} MiB")
        finally:
            for q in (p, cold_p):
                q.terminate()
                q.wait(timeout=60)
            if os.environ.get("SNUG_TEST_LOGS"):
                print(open(os.path.join(tmp, "after.log")).read())
    res.done()


def _swallow(f, *a):
    try:
        f(*a)
    except Exception:
        pass


if __name__ == "__main__":
    main()
