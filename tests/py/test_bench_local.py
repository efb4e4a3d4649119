"""test_bench_local.py — `snug bench-local`'s pp/tg tests on the CPU and on a device context.

1. CPU, `-d N`: the lines "ppP @ dN: X ± Y t/s" and "tgG @ dN: X ± Y t/s" parse, with positive
   rates; stderr names the backend (cpu), the KV format, the context (N + max(P, G) + 16) and
   the depth; the CPU's memcpy / ceiling lines follow tg. Without -d the names carry no depth.
2. `--backend cuda` through the test stand-in libsnug_fakedev.so (SNUG_CUDA_LIB; no GPU
   needed): the same lines at depth N, stderr "snug bench-local: backend cuda, kv q8_0, ..." and
   the stand-in's own device line (so the run went through the device backend, not the CPU), no
   memcpy / ceiling lines; with SNUG_CUDA_LIB naming a missing file it fails, non-zero, naming
   it (never falling back to the CPU).
3. `-d` or `--parallel` with `--verify` is refused (exit 2).
4. bench/gpu_table.py reads these lines as gpu.sh writes them (tagged `warm`) next to a cold
   `snug run` summary and llama-bench's jsonl: rows "(warm)" with their ratio to llama.cpp.
5. `--parallel 3` on the CPU and through the stand-in: "tgG @ d5 x3: A ± s t/s (all sequences;
   A/3 each), A/tg× one sequence" beside the one-sequence "tgG @ d5" line of the same run.
Model: the demo model (data/demo/snug-demo-q8_0.gguf). Runnable as a script; prints
"N passed, N failed".
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SNUG, SRC, Results  # noqa: E402

MODEL = os.path.join(SRC, "data", "demo", "snug-demo-q8_0.gguf")
FAKE = os.path.join(os.path.dirname(os.path.abspath(SNUG)), "libsnug_fakedev.so")
LINE = re.compile(r"^(pp|tg)(\d+)(?: @ d(\d+))?: ([0-9.]+) ± ([0-9.]+) t/s$", re.M)
P, G, D = 24, 8, 40
PAR = re.compile(r"^tg(\d+) @ d5 x3: ([0-9.]+) ± ([0-9.]+) t/s \(all sequences; ([0-9.]+) each\), "
                 r"([0-9.]+)x one sequence$", re.M)


def bench(*args, env=None):
    return subprocess.run([SNUG, "bench-local", "-m", MODEL, "-t", "1", "--reps", "2",
                           *map(str, args)], capture_output=True, text=True, timeout=300,
                          env=env)


def results(out):
    """{(test, n): (depth, rate)} of the pp/tg lines."""
    return {(m.group(1), int(m.group(2))): (int(m.group(3) or 0), float(m.group(4)))
            for m in LINE.finditer(out)}


def check_lines(r, p, what, depth, backend, kv):
    got = results(p.stdout)
    r.check(p.returncode == 0 and got.get(("pp", P), (None, 0))[0] == depth
            and got.get(("tg", G), (None, 0))[0] == depth
            and all(rate > 0 for _, rate in got.values()),
            f"{what}: pp{P} and tg{G} at depth {depth} parse ({got})"
            + ("" if p.returncode == 0 else f"\n{p.stderr[-600:]}"))
    name = f"pp{P} @ d{depth}:" if depth else f"pp{P}:"
    r.check(re.search(rf"^{re.escape(name)} ", p.stdout, re.M) is not None,
            f"{what}: the test is named '{name}' as llama-bench names it")
    want = (f"snug bench-local: backend {backend}, kv {kv}, context {depth + max(P, G) + 16}, "
            f"chunk ")
    r.check(want in p.stderr and f"depth {depth}\n" in p.stderr,
            f"{what}: stderr says '{want}... depth {depth}'"
            + ("" if want in p.stderr else f"\n{p.stderr[-600:]}"))
    return got


def check_table(r, cpu_out, cuda_out):
    """gpu_table.py on gpu.sh-shaped lines: cold `snug run` summaries, warm bench-local results
    (the lines printed above) and llama-bench jsonl."""
    pick = lambda out, t: next(ln for ln in out.splitlines() if ln.startswith(t))  # noqa: E731
    lines = [
        "card Test Card, 1 MiB",
        f"snug kv=q8_0 prompt={P} snug run: load 0.10 s | prompt {P} tokens, 0.01 s, 1000.0 tok/s"
        f" | generation 16 tokens, 0.10 s, 50.0 tok/s | seed 1 | peak memory 10.0 MiB ",
        f"snug kv=q8_0 depth={D} snug run: load 0.10 s | prompt {D} tokens, 0.01 s, 1000.0 tok/s"
        f" | generation {G} tokens, 0.10 s, 40.0 tok/s | seed 1 | peak memory 10.0 MiB ",
        f"snug kv=q8_0 warm prompt={P} {pick(cpu_out, f'pp{P}:')} ",
        f"snug kv=q8_0 warm depth={D} {pick(cuda_out, f'tg{G} @ d{D}:')} ",
        f"snug kv=q8_0 warm depth={D} rc=1 snug bench-local: a failed run is left out",
        "llama kv=q8_0 " + json.dumps({"n_prompt": P, "n_gen": 0, "n_depth": 0, "avg_ts": 500.0}),
        "llama kv=q8_0 " + json.dumps({"n_prompt": 0, "n_gen": G, "n_depth": D, "avg_ts": 20.0}),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "lines.txt")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        t = subprocess.run([sys.executable, os.path.join(SRC, "bench", "gpu_table.py"), path, tmp],
                           capture_output=True, text=True, timeout=60)
    rows = {c[1]: c for c in (ln.split(" | ") for ln in t.stdout.splitlines()
                              if ln.startswith("| q8_0 "))}
    pp = results(cpu_out)[("pp", P)][1]
    tg = results(cuda_out)[("tg", G)][1]
    want = {f"prompt {P}": ("1,000.0", "500.0", "2.00"),
            f"prompt {P} (warm)": (f"{pp:,.1f}", "500.0", f"{pp / 500:,.2f}"),
            f"decode at depth {D}": ("40.0", "20.0", "2.00"),
            f"decode at depth {D} (warm)": (f"{tg:,.1f}", "20.0", f"{tg / 20:,.2f}")}
    got = {k: tuple(v[2:5]) for k, v in rows.items()}
    r.check(t.returncode == 0 and got == want,
            f"gpu_table.py: cold and warm rows with their ratios to llama.cpp ({got})"
            + ("" if got == want else f"\nwant {want}\n{t.stdout}{t.stderr[-800:]}"))


def main():
    r = Results()
    # 1. CPU
    p = bench("-p", P, "-n", G, "-d", D)
    check_lines(r, p, f"cpu -d {D}", D, "cpu", "f16")
    r.check("memcpy bandwidth:" in p.stdout and "tg ceiling:" in p.stdout,
            "cpu: the memcpy bandwidth and tg ceiling lines follow tg")
    cpu = bench("-p", P, "-n", G, "--kv", "q8_0")
    check_lines(r, cpu, "cpu, no -d", 0, "cpu", "q8_0")
    # 2. the device backend through the stand-in
    r.check(os.path.exists(FAKE), f"the test stand-in {FAKE} is built")
    if os.path.exists(FAKE):
        env = dict(os.environ, SNUG_CUDA_LIB=FAKE)
        cuda = bench("--backend", "cuda", "-p", P, "-n", G, "-d", D, "--kv", "q8_0", env=env)
        check_lines(r, cuda, f"cuda -d {D}", D, "cuda", "q8_0")
        r.check("cuda (test stand-in" in cuda.stderr and "backend: cuda" in cuda.stdout,
                "cuda: the context ran on the device backend (the stand-in's line, 'backend: "
                "cuda' in the header)")
        r.check("memcpy bandwidth" not in cuda.stdout and "tg ceiling" not in cuda.stdout,
                "cuda: no CPU memcpy / ceiling lines")
        check_table(r, cpu.stdout, cuda.stdout)
    missing = "/nonexistent/libsnug_cuda.so"
    m = bench("--backend", "cuda", "-p", P, "-n", G, env=dict(os.environ, SNUG_CUDA_LIB=missing))
    r.check(m.returncode != 0 and missing in m.stderr and not LINE.search(m.stdout),
            f"cuda without the library: fails naming {missing}, nothing measured on the CPU "
            f"(rc {m.returncode}: {m.stderr.strip()[-200:]})")
    # 3. --verify takes no depth, nor --parallel
    v = bench("--verify", "-d", D)
    r.check(v.returncode == 2 and "-d and --kv apply to the pp/tg tests" in v.stderr,
            f"--verify -d is refused ({v.returncode}: {v.stderr.strip()[:120]})")
    v = bench("--verify", "--parallel", 3)
    r.check(v.returncode == 2 and "--parallel applies to tg" in v.stderr,
            f"--verify --parallel is refused ({v.returncode}: {v.stderr.strip()[:120]})")
    # 5. --parallel N: tg with N slots at once beside the one-sequence tg, on the CPU and
    #    through the device stand-in (the batched step's device paths: one conv launch for the
    #    slots' runs)
    runs = [("cpu", None)]
    if os.path.exists(FAKE):
        runs.append(("cuda", dict(os.environ, SNUG_CUDA_LIB=FAKE)))
    for backend, env in runs:
        p = bench("--backend", backend, "-p", 0, "-n", G, "-d", 5, "--parallel", 3, env=env)
        one = results(p.stdout).get(("tg", G))
        par = PAR.search(p.stdout)
        ok = p.returncode == 0 and one and par and par.group(1) == str(G)
        r.check(ok and float(par.group(2)) > 0
                and abs(float(par.group(4)) - float(par.group(2)) / 3) < 0.01 * float(par.group(2))
                + 0.01
                and abs(float(par.group(5)) - float(par.group(2)) / one[1]) < 0.02,
                f"{backend} --parallel 3: 'tg{G} @ d5 x3' with the aggregate, the per-sequence "
                f"rate and the ratio to tg{G} @ d5 ({p.stdout.strip()[-300:]}"
                + ("" if p.returncode == 0 else p.stderr[-400:]) + ")")
    r.done()


if __name__ == "__main__":
    main()
