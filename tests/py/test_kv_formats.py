"""test_kv_formats.py — the compressed KV cache formats end to end, through `snug logits`.

Test (default): on the trained fixture's 300-token prompt, logits with each KV format against the
f16-cache logits: q8_0 median KL <= 1e-4, and the expected quality order q8_0 < tq4 < tq3; chunking
invariance: with a compressed cache the logits of 1,024 tokens are the same (max KL <= 1e-5)
whether the prompt runs in chunks of 64, 512 or in one piece, because every chunk stores its own
K/V first and then reads only the cache.

Report (`--report docs/kv-formats.md [--bench]`): regenerates docs/kv-formats.md from snug's own
outputs: bytes per token for the 27B (`snug plan`), quality per format and K/V mix on the trained
fixture's ppl_ids.json (perplexity, KL) and the MoE fixture's 1,536-token input, the TurboQuant
reconstruction error (test_model_kvq with KVQ_REPORT=1) and, with --bench, the decode attention
benchmark (KVQ_BENCH=1).
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import Results, fixtures_dir, kl_stats, load_json, log_softmax, read_f32, run  # noqa

V = 2048


def logits(model, ids, kv, tmp, chunk=512):
    """[len(ids)][V] logits from `snug logits` with KV spec kv ("q8_0" or "tq4/tq3" = K/V)."""
    ids_path = os.path.join(tmp, "ids.json")
    with open(ids_path, "w") as f:
        f.write("[" + ",".join(map(str, ids)) + "]")
    out = os.path.join(tmp, "out.f32")
    k, _, v = kv.partition("/")
    flags = ["--kv", k] if not v else ["--kv-k", k, "--kv-v", v]
    run("logits", "-m", model, "--ids", ids_path, "-o", out, "--chunk", chunk, "--ctx", len(ids),
        "--threads", 2, *flags)
    return read_f32(out, len(ids), V)


def kl_rows(ref, got):
    lp, lq = log_softmax(ref), log_softmax(got)
    return (np.exp(lp) * (lp - lq)).sum(axis=-1)


def test(res, fx, tmp):
    model = os.path.join(fx, "trained", "trained-f16.gguf")
    ids = load_json(os.path.join(fx, "trained", "ids.json"))
    ref = logits(model, ids, "f16", tmp)
    med = {}
    for kv in ["q8_0", "fp8", "tq4", "tq3", "tq4/tq3"]:
        m, p95, p99, top1 = kl_stats(ref, logits(model, ids, kv, tmp))
        med[kv] = m
        print(f"     {kv:8s} median KL {m:.3g}  p99 {p99:.3g}  top-1 {top1:.3f}")
    res.check(med["q8_0"] <= 1e-4, f"q8_0 median KL vs f16 cache {med['q8_0']:.3g} <= 1e-4")
    res.check(med["q8_0"] < med["tq4"] < med["tq3"],
              f"quality order q8_0 {med['q8_0']:.3g} < tq4 {med['tq4']:.3g} < tq3 {med['tq3']:.3g}")
    long_ids = load_json(os.path.join(fx, "trained", "ppl_ids.json"))[:1024]
    for kv in ["tq3", "q8_0", "fp8/tq4"]:
        runs = [logits(model, long_ids, kv, tmp, chunk) for chunk in (64, 512, 1024)]
        worst = max(float(kl_rows(runs[0], r).max()) for r in runs[1:])
        worst = max(worst, float(kl_rows(runs[1], runs[2]).max()))
        res.check(worst <= 1e-5, f"{kv}: chunks of 64 / 512 / 1024 agree, max KL {worst:.3g}")


MIXES = ["f32", "bf16", "q8_0", "fp8", "tq4", "tq3", "q8_0/tq4", "fp8/tq4", "tq4/tq3",
         "q8_0/tq3", "tq4/q8_0"]


def quality(ref, got):
    kl = kl_rows(ref, got)
    p = np.exp(log_softmax(ref))
    top2 = np.sort(p, axis=-1)[:, -2:]
    confident = (top2[:, 1] - top2[:, 0]) > 0.5
    flips = int((confident & (ref.argmax(-1) != got.argmax(-1))).sum())
    top1 = float((ref.argmax(-1) == got.argmax(-1)).mean())
    return float(np.median(kl)), float(np.percentile(kl, 99)), top1, flips, int(confident.sum())


def nll_ppl(rows, ids):
    lp = log_softmax(rows[:-1])
    return -lp[np.arange(len(ids) - 1), np.array(ids[1:])]


def report(fx, tmp, path, bench):
    trained = os.path.join(fx, "trained", "trained-f16.gguf")
    moe = os.path.join(fx, "moe", "moe-f16.gguf")
    ppl_ids = load_json(os.path.join(fx, "trained", "ppl_ids.json"))
    windows = [ppl_ids[i:i + 1024] for i in range(0, len(ppl_ids) - 1023, 1024)]
    long_ids = load_json(os.path.join(fx, "moe", "long_ids.json"))

    def trained_run(kv):
        return [logits(trained, w, kv, tmp) for w in windows]

    ref_t = trained_run("f16")
    ref_m = logits(moe, long_ids, "f16", tmp)
    ppl_ref = float(np.exp(np.concatenate([nll_ppl(r, w) for r, w in zip(ref_t, windows)]).mean()))
    lines = []
    out = lines.append

    # bytes per token of the 27B, from snug plan (ctx 4096: the attention item / 4096)
    import json
    bpt = {}
    for kv in ["f16"] + MIXES:
        k, _, v = kv.partition("/")
        flags = ["--kv", k] if not v else ["--kv-k", k, "--kv-v", v]
        p = run("plan", "--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--ctx", 4096,
                "--json", *flags, check=False)
        items = json.loads(p.stdout)["items"]
        bpt[kv] = items["kv cache (attention)"] // 4096

    out("| K/V format | bytes/token (27B) | vs f16 | trained ppl | trained KL median / p99 | "
        "top-1 | tail flips | MoE long KL median / p99 | MoE top-1 | MoE tail flips |")
    out("|---|---|---|---|---|---|---|---|---|---|")
    out(f"| f16 (reference) | {bpt['f16']} | 1.00x | {ppl_ref:.4f} | — | — | — | — | — | — |")
    for kv in MIXES:
        got_t = trained_run(kv)
        ppl = float(np.exp(np.concatenate([nll_ppl(r, w) for r, w in zip(got_t, windows)]).mean()))
        qt = quality(np.concatenate(ref_t), np.concatenate(got_t))
        qm = quality(ref_m, logits(moe, long_ids, kv, tmp))
        out(f"| {kv} | {bpt[kv]} | {bpt['f16'] / bpt[kv]:.2f}x | {ppl:.4f} | "
            f"{qt[0]:.2e} / {qt[1]:.2e} | {qt[2]:.4f} | {qt[3]} of {qt[4]} | "
            f"{qm[0]:.2e} / {qm[1]:.2e} | {qm[2]:.4f} | {qm[3]} of {qm[4]} |")
        print(lines[-1], flush=True)

    tbin = os.path.join(os.path.dirname(os.path.abspath(os.environ.get("SNUG_BIN", "build/snug"))),
                        "test_model_kvq")
    env = dict(os.environ, KVQ_REPORT="1")
    tq = subprocess.run([tbin], capture_output=True, text=True, env=env).stdout
    tq_lines = [ln for ln in tq.splitlines() if ln.startswith(("tq", "codebook"))]
    bench_lines = []
    if bench:
        env = dict(os.environ, KVQ_BENCH="1")
        bench_lines = subprocess.run([tbin], capture_output=True, text=True,
                                     env=env).stdout.splitlines()
    with open(path + ".tables", "w") as f:
        f.write("\n".join(lines) + "\n\n```\n" + "\n".join(tq_lines) + "\n```\n")
        if bench_lines:
            f.write("\n```\n" + "\n".join(bench_lines) + "\n```\n")
    print("\n".join(lines))
    print("\n".join(tq_lines))
    print("\n".join(bench_lines))


def main():
    res = Results()
    fx = fixtures_dir(res)
    if fx is None:
        res.done()
    with tempfile.TemporaryDirectory() as tmp:
        if "--report" in sys.argv:
            path = sys.argv[sys.argv.index("--report") + 1]
            report(fx, tmp, path, "--bench" in sys.argv)
            return
        test(res, fx, tmp)
    res.done()


if __name__ == "__main__":
    main()
