"""test_agent_replay.py — `snug bench --agent-replay` against `snug serve --script` on the
trained fixture with the prefix cache on (--cache-ram, --cache-dir): the report has one row per
turn of tests/data/agent_replay/sample.json, every turn answered, prompts grow turn by turn,
cached_tokens is an integer within [0, prompt_tokens], the summary adds up; /metrics carries
the prefix cache's lines (per tier) and a malformed replay file is refused before any request.

Reuse and exactness are asserted by test_prefix_cache.py (real greedy generation against a
cold server); here the scripted replay's reuse is only printed.
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

SCRIPT = ("I will look at this step by step.\n</think>\n\n<tool_call>\n<function=run_tests>\n"
          "</function>\n</tool_call>\n")


def start_server(model, tmp, extra):
    port_file = os.path.join(tmp, "port")
    script = os.path.join(tmp, "script.txt")
    with open(script, "w") as f:
        f.write(SCRIPT)
    p = subprocess.Popen([SNUG, "serve", "-m", model, "--port", "0", "--port-file", port_file,
                          "--script", script, *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for _ in range(600):
        if os.path.exists(port_file) and open(port_file).read().strip():
            return p, int(open(port_file).read())
        if p.poll() is not None:
            raise RuntimeError("snug serve exited: " + p.stderr.read())
        time.sleep(0.1)
    p.kill()
    raise RuntimeError("snug serve did not start")


def main():
    res = Results()
    fx = fixtures_dir(res)
    if not fx:
        res.done()
    model = os.path.join(fx, "trained", "trained-f16.gguf")
    replay = os.path.join(SRC, "tests", "data", "agent_replay", "sample.json")
    doc = json.load(open(replay))
    with tempfile.TemporaryDirectory() as tmp:
        cache_dir = os.path.join(tmp, "cache")
        srv, port = start_server(model, tmp, ["--cache-ram", "64MiB", "--cache-dir", cache_dir])
        try:
            url = f"http://127.0.0.1:{port}"
            out = os.path.join(tmp, "replay.json")
            p = subprocess.run([SNUG, "bench", "--agent-replay", replay, "--url", url, "--json",
                                "--out", out], capture_output=True, text=True, timeout=600)
            res.check(p.returncode == 0, f"bench --agent-replay exits 0 ({p.returncode}: "
                                         f"{p.stderr[-300:]})")
            r = json.loads(p.stdout) if p.returncode == 0 else {}
            res.check(r == json.load(open(out)) if r else False, "--out holds the same JSON")
            turns = r.get("turns", [])
            res.check(len(turns) == len(doc["turns"]) == 10, f"10 turns reported ({len(turns)})")
            res.check(all(t["ok"] for t in turns), "every turn answered")
            res.check([t["turn"] for t in turns] == list(range(1, 11)), "turns numbered 1..10")
            pts = [t["prompt_tokens"] for t in turns]
            res.check(all(b > a for a, b in zip(pts, pts[1:])), f"prompts grow: {pts}")
            res.check(all(isinstance(t["cached_tokens"], int) and
                          0 <= t["cached_tokens"] <= t["prompt_tokens"] for t in turns),
                      "cached_tokens within [0, prompt_tokens]")
            res.check(all(t["ttft_s"] > 0 and t["wall_s"] >= t["ttft_s"] for t in turns),
                      "ttft > 0 and wall >= ttft")
            res.check(turns[0]["prev_prompt_tokens"] is None and
                      all(t["prev_prompt_tokens"] == pts[i] for i, t in enumerate(turns[1:])),
                      "prev_prompt_tokens chains the turns")
            # messages: system + the turn's messages + one assistant copy per earlier turn
            want, n = [], 1
            for t in doc["turns"]:
                n += len(t["messages"])
                want.append(n)
                n += 1
            res.check([t["messages"] for t in turns] == want, "history grows as the client's")
            s = r.get("summary", {})
            res.check(s.get("prompt_tokens_after_first") == sum(pts[1:]) and
                      s.get("cached_tokens_after_first") ==
                      sum(t["cached_tokens"] for t in turns[1:]), "summary adds up")
            print(f"note: reuse after the first turn {s.get('reuse_after_first', 0):.1%} "
                  "(asserted in test_prefix_cache.py)")
            m = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
            for line in ['snug_prefix_cache_capacity_bytes{tier="ram"} 67108864',
                         'snug_prefix_cache_capacity_bytes{tier="disk"} 268435456',
                         'snug_prefix_cache_checkpoints{tier="disk"}',
                         'snug_prefix_cache_evictions_total{tier="index"}',
                         "snug_prefix_cache_token_reuse_ratio"]:
                res.check(line in m, f"/metrics has {line}")
            bad = os.path.join(tmp, "bad.json")
            with open(bad, "w") as f:
                json.dump({"turns": [{"messages": []}]}, f)
            p = subprocess.run([SNUG, "bench", "--agent-replay", bad, "--url", url],
                               capture_output=True, text=True, timeout=60)
            res.check(p.returncode != 0 and "turn 0" in p.stderr,
                      f"a malformed replay is refused ({p.stderr.strip()[:120]})")
        finally:
            srv.terminate()
            srv.wait(timeout=30)
    res.done()


if __name__ == "__main__":
    main()
