"""test_plan_auto.py — sizing by itself through the CLI (src/plan/plan_auto.c, docs/memory.md).

1. `snug plan --table --json`: every row (each KV format and mixed pair, MTP off and on) equals
   `snug plan --ctx max` with the same settings (max_ctx and the plan's total), the row marked
   `auto` is what `snug plan --kv auto` picks, and it is the first of the loss order reaching the
   trained length (or the furthest). 27B on a 24 GiB card (cuda) and 35B-A3B on the cpu.
2. The boot line round-trips: `snug serve` / `snug run` print `plan: FLAGS (why)`; starting
   again with exactly FLAGS prints the same line and the same plan table, and the chosen context
   is `snug plan --ctx max` for those settings (the largest that fits the budget) unless it is
   the trained length. Cases: --kv auto with a budget and 2 slots; a fixed format with an
   automatic context; no sizing flags at all (the physical memory minus the margin).
3. The prompt chunk (`--chunk N|auto`, snug_plan_chunk): `snug plan --backend cuda --chunk
   auto` on the 27B prints the chunk and why — the cap 2048 for a short context in 23.5 GiB, the
   base 512 where the largest context leaves no room, the same automatic context as `--chunk
   512`; an explicit chunk wins; the cpu keeps 512; no budget on cuda takes the cap. Then `snug
   run`, `snug serve` (the boot line's `--chunk` pasted back) and `snug bench-local` take the
   flag on the demo model.
4. With `--backend cuda` (the test stand-in libsnug_fakedev.so, so no GPU is needed), the boot
   plans of `snug run` and `snug serve --slots 2` list the CUDA backend's host items (embedding
   staging, host work) and the engine's (logits table, token history), each equal to `snug
   plan`'s for the same flags and to its formula.
Model for 2 and 3: a fresh demo model (`snug gen --preset demo`), no fixtures needed.
Runnable as a script; prints "N passed, N failed".
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SNUG, Results  # noqa: E402

# --kv auto's loss order (src/plan/plan_auto.c snug_plan_auto_kv_order, docs/kv-formats.md)
AUTO_ORDER = ["f16", "q8_0", "fp8", "q8_0/tq4", "fp8/tq4", "tq4", "tq4/tq3", "tq3"]


def snug(*args):
    return subprocess.run([SNUG, *map(str, args)], capture_output=True, text=True, timeout=600)


def plan_json(*args):
    p = snug("plan", "--json", *args)
    if not p.stdout.strip():
        raise RuntimeError(f"snug plan {' '.join(map(str, args))}: {p.stderr}")
    return json.loads(p.stdout)


def check_table(r, base, budget_args):
    t = plan_json(*base, *budget_args, "--table")
    rows = t["rows"]
    r.check(len(rows) >= 22, f"{base[1]}: {len(rows)} rows (11 KV choices x MTP off/on)")
    bad = []
    for row in rows:
        args = [*base, *budget_args, "--ctx", "max", "--kv-k", row["k"], "--kv-v", row["v"],
                "--mtp", row["mtp"]]
        if row["max_ctx"] == 0:  # `--ctx max` refuses: not even one token fits
            p = snug("plan", "--json", *args)
            if p.returncode == 0 or "not even a 1-token context" not in p.stderr:
                bad.append(f"{row['kv']} mtp {row['mtp']}: table 0, plan {p.stdout[:80]}")
            continue
        p = plan_json(*args)
        if (p["max_ctx"], p["total_bytes"]) != (row["max_ctx"], row["total_bytes"]):
            bad.append(f"{row['kv']} mtp {row['mtp']}: table {row['max_ctx']} / "
                       f"{row['total_bytes']}, plan --ctx max {p['max_ctx']} / "
                       f"{p['total_bytes']}")
    r.check(not bad, f"{base[1]}: every table row equals `snug plan --ctx max`"
            + "".join("\n  " + b for b in bad))
    for mtp in sorted({row["mtp"] for row in rows}):
        sub = {row["kv"]: row for row in rows if row["mtp"] == mtp}
        autos = [kv for kv, row in sub.items() if row["auto"]]
        reach = [kv for kv in AUTO_ORDER if sub[kv]["max_ctx"] == t["n_ctx_train"]]
        want = reach[0] if reach else max(AUTO_ORDER, key=lambda kv: (sub[kv]["max_ctx"],
                                                                      -AUTO_ORDER.index(kv)))
        r.check(autos == [want], f"{base[1]} mtp {mtp}: auto row {autos}, expected {want}")
        a = plan_json(*base, *budget_args, "--kv", "auto", "--mtp", mtp)
        r.check(a["kv"] == want and a["ctx"] == sub[want]["max_ctx"] and "auto" in a,
                f"{base[1]} mtp {mtp}: `plan --kv auto` picks {a['kv']} at {a['ctx']}")
    return t


def flags_of(line):
    """'snug serve: plan: --ctx 1 --kv f16 ... (why)' -> ['--ctx', '1', '--kv', 'f16', ...]"""
    body = line.split("plan: ", 1)[1]
    return body[:body.index(" (")].split()


def serve_boot(model, tmp, name, *args, env=None):
    """Start `snug serve`, wait until it listens, stop it; (plan line, plan table, /health)."""
    port_file = os.path.join(tmp, name + ".port")
    log_path = os.path.join(tmp, name + ".log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([SNUG, "serve", "-m", model, "--port", "0", "--port-file",
                                 port_file, "--threads", "1", *map(str, args)],
                                stdout=subprocess.DEVNULL, stderr=log, env=env)
        t0 = time.time()
        health = None
        try:
            while not (os.path.exists(port_file) and open(port_file).read().strip()):
                if proc.poll() is not None or time.time() - t0 > 120:
                    break
                time.sleep(0.05)
            if os.path.exists(port_file) and open(port_file).read().strip():
                import urllib.request
                port = int(open(port_file).read())
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as f:
                    health = json.loads(f.read())
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    text = open(log_path).read()
    lines = text.splitlines()
    line = next((s for s in lines if s.startswith("snug serve: plan: ")), None)
    i = next((k for k, s in enumerate(lines) if s.startswith("snug serve: memory plan")), None)
    table = None
    if i is not None:  # the header and the table rows, up to the next log line
        end = next((k for k in range(i + 1, len(lines)) if lines[k].startswith("snug ")),
                   len(lines))
        table = "\n".join(lines[i:end])
    return line, table, health, text


def check_serve_round_trip(r, model, tmp, name, *args):
    line, table, health, log = serve_boot(model, tmp, name, *args)
    r.check(line is not None and table is not None and health is not None,
            f"{name}: serve boots and prints the plan line" + ("" if line else "\n" + log[-800:]))
    if not line:
        return None
    flags = flags_of(line)
    slots = [a for k, a in enumerate(args) if k and args[k - 1] == "--slots"]
    line2, table2, health2, _ = serve_boot(model, tmp, name + "-again", *flags,
                                           *(["--slots", slots[0]] if slots else []))
    r.check(line2 is not None and flags_of(line2) == flags,
            f"{name}: pasting `{' '.join(flags)}` back gives the same line")
    r.check(table == table2, f"{name}: and the same plan table")
    if health and health2:
        r.check(health["plan"]["n_ctx"] == health2["plan"]["n_ctx"] ==
                int(flags[flags.index("--ctx") + 1]),
                f"{name}: /health serves the chosen context {health['plan']['n_ctx']}")
    return flags


def check_chunk_plan(r):
    base = ["--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--threads", "1", "--backend",
            "cuda"]
    short = [*base, "--vram-budget", "23.5GiB", "--ctx", "8192", "--kv", "q8_0"]
    p = snug("plan", *short, "--chunk", "auto")
    head = p.stdout.splitlines()[:2]
    r.check(p.returncode == 0 and len(head) == 2 and ", chunk 2048, " in head[0]
            and head[1] == "chunk 2048 (auto: the largest of 512..2048 that fits 23.50 GiB)",
            f"plan --chunk auto, 8192 tokens in 23.5 GiB: the cap, and why ({head})")
    j = plan_json(*short)  # auto is the default on cuda
    r.check(j["chunk"] == 2048 and j["fits"] and j["chunk_why"].startswith("2048 (auto:"),
            f"the default on cuda is auto: chunk {j['chunk']} ({j['chunk_why']})")
    j512 = plan_json(*short, "--chunk", "512")
    r.check(j512["chunk"] == 512 and j["items"]["work arena (per chunk)"] >
            j512["items"]["work arena (per chunk)"], "a larger chunk: a larger work arena")
    # the automatic context is the one of chunk 512; the chunk takes only what it leaves
    for kv in ("q8_0", "tq4"):
        a = plan_json(*base, "--vram-budget", "23.5GiB", "--ctx", "max", "--kv", kv)
        b = plan_json(*base, "--vram-budget", "23.5GiB", "--ctx", "max", "--kv", kv,
                      "--chunk", "512")
        r.check(a["ctx"] == b["ctx"] == b["max_ctx"] and a["fits"] and a["chunk"] >= 512,
                f"--ctx max --kv {kv}: context {a['ctx']} as at chunk 512 ({b['ctx']}), chunk "
                f"{a['chunk']}, {a['total_bytes']} bytes")
        if kv == "q8_0":  # the largest context leaves no room for a larger chunk
            r.check(a["chunk"] == 512 and "largest of 512..2048" in a["chunk_why"],
                    f"q8_0 at its largest context keeps 512: {a['chunk_why']}")
    # --kv auto: the chunk is in the flags and the why
    k = plan_json(*base, "--vram-budget", "23.5GiB", "--kv", "auto")
    r.check(k["ctx"] == 262144 and f"--chunk {k['chunk']} " in k["auto"] and k["chunk"] > 512
            and "; chunk " in k["auto"], f"--kv auto carries the chunk: {k['auto']}")
    # an explicit chunk wins; the cpu keeps 512; no budget on cuda: the cap
    e = plan_json(*short, "--chunk", "1024")
    r.check(e["chunk"] == 1024 and "as requested" in e["chunk_why"], f"--chunk 1024: {e['chunk']}")
    c = plan_json("--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--threads", "1",
                  "--backend", "cpu", "--budget", "64GiB", "--ctx", "8192", "--chunk", "auto")
    r.check(c["chunk"] == 512 and "cpu" in c["chunk_why"], f"cpu: {c['chunk_why']}")
    n = plan_json(*base, "--ctx", "8192", "--kv", "q8_0")
    r.check(n["chunk"] == 2048 and "no budget" in n["chunk_why"], f"no budget: {n['chunk_why']}")
    bad = snug("plan", *short, "--chunk", "lots")
    r.check(bad.returncode == 2 and "auto" in bad.stderr, "--chunk takes N or auto")


def check_chunk_commands(r, model, tmp):
    # run: an explicit chunk is in the paste-back flags and the why
    p = snug("run", "-m", model, "-p", "hello", "-n", "2", "--temp", "0", "--threads", "1",
             "--ctx", "256", "--chunk", "64")
    line = next((s for s in p.stderr.splitlines() if s.startswith("snug run: plan: ")), "")
    r.check(p.returncode == 0 and line and "--chunk 64" in " ".join(flags_of(line)),
            f"run --chunk 64: {line}")
    r.check("chunk 64 (as requested" in line, "run: the why says the chunk")
    q = snug("run", "-m", model, "-p", "hello", "-n", "2", "--temp", "0", "--threads", "1",
             "--ctx", "2048")
    line = next((s for s in q.stderr.splitlines() if s.startswith("snug run: plan: ")), "")
    r.check(q.returncode == 0 and line and "--chunk" not in flags_of(line),
            f"run on the cpu: chunk auto is 512 ({line})")
    r.check("chunk 512 (auto: 512 on the cpu" in line, "run: the cpu's chunk and why")
    # serve: the chunk pasted back gives the same plan; the plan header has it
    flags = check_serve_round_trip(r, model, tmp, "chunk", "--budget", "40MiB", "--kv", "q8_0",
                                   "--chunk", "128")
    if flags:
        r.check(flags[flags.index("--chunk") + 1] == "128", f"serve --chunk 128: {flags}")
        _, table, health, _ = serve_boot(model, tmp, "chunk-table", *flags)
        r.check(table is not None and ", chunk 128, " in table.splitlines()[0],
                f"serve: the memory plan is for chunk 128 ({table and table.splitlines()[0]})")
    # bench-local: pp in chunks of --chunk
    b = snug("bench-local", "-m", model, "-p", "100", "-n", "0", "--reps", "1", "-t", "1",
             "--chunk", "32")
    r.check(b.returncode == 0 and "chunk: 32" in b.stdout
            and "snug bench-local: chunk 32 (as requested" in b.stderr,
            f"bench-local --chunk 32: {b.stdout.strip()[:200]} {b.stderr.strip()[-200:]}")


# A plan table's item row: "  name   per   bytes   MiB   share  bar" ("~" marks an estimate).
ITEM_ROW = re.compile(r"^[ ~] (\S.*?)\s{2,}(?:model|slot x\d+)\s+(\d+)\s")


def table_items(text):
    rows = (ITEM_ROW.match(ln) for ln in (text or "").splitlines())
    return {m.group(1): int(m.group(2)) for m in rows if m}


def check_cuda_boot(r, model, tmp):
    """The boot plans of `snug run` and `snug serve --backend cuda` (through the test stand-in
    libsnug_fakedev.so: no GPU needed) list the CUDA backend's host memory and the engine's
    tables, every item equal to `snug plan`'s for the same flags, to the byte."""
    fake = os.path.join(os.path.dirname(os.path.abspath(SNUG)), "libsnug_fakedev.so")
    if not os.path.exists(fake):
        print("note: libsnug_fakedev.so not built: the cuda boot plans are not checked")
        return
    env = dict(os.environ, SNUG_CUDA_LIB=fake)
    H, T, C, S, N = 256, 128, 1024, 2, 2  # the demo preset's hidden size; the flags below
    flags = ["--backend", "cuda", "--ctx", C, "--kv", "f16", "--chunk", T, "--spec-draft", N]
    want = plan_json("-m", model, "--threads", 1, "--slots", S, *flags)["items"]
    V = want["logits"] // (S * 4)
    for name, b in (("cuda staging (embedding rows)", T * H * 4),
                    ("cuda host work (hooks, moe)", (T * H * 4 + 63) // 64 * 64),
                    ("step logits (all slots)", min(T, S * (N + 2)) * V * 4),
                    ("token history", S * (C + 1) * 4)):
        r.check(want.get(name) == b, f"plan --backend cuda: {name} {want.get(name)} = {b}")
    _, table, health, log = serve_boot(model, tmp, "cuda", "--slots", S, "--cache-ram", 0,
                                       *flags, env=env)
    got = table_items(table)
    r.check(health is not None and got == want,
            "serve --backend cuda: the boot plan is `snug plan`'s, host items included"
            + ("" if got == want else f"\n{sorted(set(got.items()) ^ set(want.items()))}"
               + log[-600:]))
    p = subprocess.run([SNUG, "run", "-m", model, "-p", "hello", "-n", "2", "--temp", "0",
                        "--threads", "1", *map(str, flags)], capture_output=True, text=True,
                       env=env, timeout=600)
    want1 = plan_json("-m", model, "--threads", 1, *flags)["items"]
    got1 = table_items(p.stderr)
    r.check(p.returncode == 0 and got1 == want1 and "cuda staging (embedding rows)" in got1,
            "run --backend cuda: the boot plan is `snug plan`'s, host items included"
            + ("" if got1 == want1 else "\n" + p.stderr[-800:]))


def main():
    r = Results()
    check_chunk_plan(r)
    # 1. the table against --ctx max
    base27 = ["--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--threads", "1"]
    t = check_table(r, base27, ["--vram-budget", "23.5GiB"])
    seed = {row["mtp"]: row["kv"] for row in t["rows"] if row["auto"]
            and row["max_ctx"] == 262144}
    r.check(seed.get(0) == "q8_0/tq4" and 3 in seed,
            f"27B Q4_K_M, 23.5 GiB: --kv auto reaches 262,144 tokens, with q8_0/tq4 without MTP "
            f"({seed})")
    check_table(r, ["--preset", "qwen3.6-35b-a3b", "--weights", "q5_k_m", "--threads", "1"],
                ["--budget", "25GiB", "--backend", "cpu"])

    # 2. boot lines round-trip
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "demo.gguf")
        p = snug("gen", "--preset", "demo", "--type", "q8_0", "-o", model)
        r.check(p.returncode == 0, "snug gen --preset demo")
        if p.returncode:
            return r.done()
        flags = check_serve_round_trip(r, model, tmp, "auto", "--budget", "48MiB", "--kv", "auto",
                                       "--slots", "2")
        if flags:
            kv = flags[flags.index("--kv") + 1] if "--kv" in flags else \
                flags[flags.index("--kv-k") + 1] + "/" + flags[flags.index("--kv-v") + 1]
            r.check(kv != "f16", f"48 MiB, 2 slots: --kv auto leaves f16 ({kv})")
        fixed = check_serve_round_trip(r, model, tmp, "fixed", "--budget", "40MiB", "--kv", "q8_0")
        if fixed:
            ctx = int(fixed[fixed.index("--ctx") + 1])
            p = plan_json("-m", model, "--budget", "40MiB", "--kv", "q8_0", "--threads", "1",
                          "--mtp", fixed[fixed.index("--spec-draft") + 1], "--ctx", "max")
            r.check(p["max_ctx"] == ctx and ctx < p["n_ctx_train"],
                    f"40 MiB q8_0: the served context {ctx} is the plan's maximum {p['max_ctx']}")
        plain = check_serve_round_trip(r, model, tmp, "plain")
        if plain:
            r.check("--budget" in plain and "--kv" in plain,
                    f"no flags: sized by the physical memory ({' '.join(plain)})")
        # snug run: --ctx max --kv auto, pasted back
        p1 = snug("run", "-m", model, "-p", "hello", "-n", "2", "--temp", "0", "--threads", "1",
                  "--ctx", "max", "--kv", "auto", "--budget", "24MiB")
        l1 = next((s for s in p1.stderr.splitlines() if s.startswith("snug run: plan: ")), None)
        r.check(p1.returncode == 0 and l1 is not None, "run --ctx max --kv auto boots"
                + ("" if l1 else "\n" + p1.stderr[-800:]))
        if l1:
            p2 = snug("run", "-m", model, "-p", "hello", "-n", "2", "--temp", "0", "--threads",
                      "1", *flags_of(l1))
            l2 = next((s for s in p2.stderr.splitlines() if s.startswith("snug run: plan: ")),
                      None)
            r.check(p2.returncode == 0 and l2 is not None and flags_of(l2) == flags_of(l1)
                    and p2.stdout == p1.stdout, f"run: `{' '.join(flags_of(l1))}` round-trips")
        check_chunk_commands(r, model, tmp)
        check_cuda_boot(r, model, tmp)
        # an impossible request fails with the largest context that fits
        p3 = snug("run", "-m", model, "-p", "hello", "-n", "2", "--threads", "1", "--ctx",
                  "200000", "--kv", "auto", "--budget", "24MiB")
        r.check(p3.returncode != 0 and "largest" in p3.stderr,
                f"run: a context no format reaches is refused: {p3.stderr.strip()[-200:]}")
    return r.done()


if __name__ == "__main__":
    main()
