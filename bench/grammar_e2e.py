"""grammar_e2e.py — end-to-end decode speed of constrained vs unconstrained generation through
`snug serve` (not a test: prints numbers for docs/perf/grammar.md).

Starts one server (--no-think --spec-draft 0 --threads 1) on MODEL and runs, alternating so load
changes hit both alike, N requests of each kind at temperature 1 with a fixed max_tokens:
unconstrained, an allow-everything grammar (mask cost with no effect on the text), json_object,
and each schema of a few from tests/data/schemas. Reports the server's own decode rate
(`timings.predicted_per_second`, generated tokens over generation time) as a median per kind,
and its ratio to unconstrained measured in the same run.
Usage: python3 bench/grammar_e2e.py [MODEL] [--n N] [--max-tokens T] [--snug build/snug]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?",
                    default=os.path.join(SRC, "..", "shared", "fixtures", "trained", "trained-f16.gguf"))
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--snug", default=os.path.join(SRC, "build", "snug"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    pf = os.path.join(tmp, "port")
    log = open(os.path.join(tmp, "log"), "w")
    proc = subprocess.Popen([a.snug, "serve", "-m", a.model, "--port", "0", "--port-file", pf,
                             "--threads", "1", "--no-think", "--spec-draft", "0"],
                            stdout=subprocess.DEVNULL, stderr=log)
    while not os.path.exists(pf) or not open(pf).read().strip():
        time.sleep(0.05)
    port = int(open(pf).read())

    def post(body):
        body = dict(body, messages=[{"role": "user", "content": "JSON please"}], temperature=1,
                    max_tokens=a.max_tokens)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        r = json.loads(urllib.request.urlopen(req, timeout=600).read())
        return r["timings"]["predicted_per_second"], r["usage"]["completion_tokens"]

    kinds = {"unconstrained": {}, "allow-everything grammar": {"grammar": "root ::= [\\x00-\\U0010FFFF]*"},
             "json_object": {"response_format": {"type": "json_object"}}}
    for name in ("tool_get_weather", "order", "pydantic_style", "app_config"):
        schema = json.load(open(os.path.join(SRC, "tests", "data", "schemas", name + ".json")))
        kinds["schema " + name] = {"response_format": {"type": "json_schema", "json_schema": {
            "name": name, "schema": schema}}}
    rates = {k: [] for k in kinds}
    toks = {k: 0 for k in kinds}
    try:
        for i in range(a.n):
            for k, extra in kinds.items():
                rate, n = post(dict(extra, seed=i))
                if n >= 8:
                    rates[k].append(rate)
                toks[k] += n
    finally:
        proc.terminate()
        proc.wait()
    base = statistics.median(rates["unconstrained"])
    print(f"model {os.path.basename(a.model)}, {a.n} requests per kind, max_tokens {a.max_tokens}")
    for k in kinds:
        if not rates[k]:
            print(f"{k:36s} (no request generated 8+ tokens)")
            continue
        med = statistics.median(rates[k])
        print(f"{k:36s} {med:8.1f} tok/s  ({toks[k]:5d} tokens)  ratio {med / base:5.3f}")


if __name__ == "__main__":
    main()
