"""test_imatrix.py — `snug imatrix` against llama.cpp's llama-imatrix.

Reference: tests/data/imatrix/calib-llamacpp-imatrix.gguf, written by llama-imatrix (llama.cpp
build 11434) over tests/data/imatrix/calib.txt on the trained fixture with 256-token chunks
(tests/data/imatrix/README.md has the command). snug computes the same file over the same
tokens and chunks; the checks:
  * same metadata (general.type, imatrix.chunk_count, imatrix.chunk_size; the dataset is the
    -f argument as given), the same tensor set (llama.cpp's diagnostic W.stats tensors aside),
    the same shapes, and counts equal row for row;
  * per column, in_sum2 within 2e-3 relative and in_sum within 2e-3 of the column's RMS scale
    sqrt(in_sum2 * count). Why that tolerance: both engines run the same tokens through the
    same f16 weights, so the activations differ only by float rounding between engines;
    llama.cpp's CPU matmul rounds every activation row to f16 before multiplying an f16 weight
    (relative 2^-11 = 4.9e-4 per element), snug keeps f32. Summed over thousands of rows these
    errors average out (the measured worst is 1.3e-4); 2e-3 is four f16 rounding units, far
    below the differences a wrong row, chunk or tensor would make (whole percent);
  * the acceptance: the trained fixture quantized with snug's imatrix is within 1.1x
    of the median KL (to the Hugging Face reference logits) of the file quantized with
    llama.cpp's imatrix, for iq4_xs and q3_k_m. Both files are quantized by `snug quantize`:
    it writes the same bytes as llama-quantize given the same imatrix
    (tests/py/test_quant_imatrix.py), so this is the comparison of the two matrices through
    llama.cpp's quantizer;
  * the MoE fixture: one entry per expert tensor with n_expert rows of sums and n_expert counts
    summing to tokens x experts-per-token in every layer, the gate/up/down counts of a layer
    equal (the same routed rows); tests/unit/test_imatrix_collect.c checks each count against
    a second computation of the routing;
  * refusals: a text shorter than one chunk, a chunk under llama.cpp's 16-row minimum.
"""
import os
import shutil
import tempfile

import gguf
import numpy as np

import snugtest
from snugtest import Results, fixtures_dir, kl_stats, load_json, read_f32, run

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.abspath(os.path.join(HERE, "..", "data", "imatrix"))
CALIB = os.path.join(DATA, "calib.txt")
LLAMA_IMATRIX = os.path.join(DATA, "calib-llamacpp-imatrix.gguf")
TOL = 2e-3


def read_imatrix(path):
    r = gguf.GGUFReader(path)
    meta = {k: r.fields[k].contents() for k in r.fields if not k.startswith("GGUF.")}
    tensors = {t.name: (tuple(int(x) for x in t.shape), np.array(t.data, dtype=np.float64).ravel())
               for t in r.tensors}
    return meta, tensors


def compare_trained(res, ours_path):
    mo, to = read_imatrix(ours_path)
    ml, tl = read_imatrix(LLAMA_IMATRIX)
    for key in ("general.type", "imatrix.chunk_count", "imatrix.chunk_size"):
        res.check(mo.get(key) == ml.get(key), f"{key}: {mo.get(key)} (llama.cpp {ml.get(key)})")
    res.check(mo.get("imatrix.datasets") == ["calib.txt"], "imatrix.datasets names the -f file")
    theirs = {k: v for k, v in tl.items() if not k.endswith(".stats")}
    res.check(sorted(to) == sorted(theirs),
              f"same tensors ({len(to)}): differ in {sorted(set(to) ^ set(theirs))}")
    shapes = all(to[k][0] == theirs[k][0] for k in to if k in theirs)
    res.check(shapes, "same shapes")
    worst2 = worst1 = 0.0
    counts_equal = True
    for name in sorted(k[: -len(".in_sum2")] for k in to if k.endswith(".in_sum2")):
        if name + ".in_sum2" not in theirs:
            continue
        s2, ls2 = to[name + ".in_sum2"][1], theirs[name + ".in_sum2"][1]
        c, lc = to[name + ".counts"][1], theirs[name + ".counts"][1]
        s1, ls1 = to[name + ".in_sum"][1], theirs[name + ".in_sum"][1]
        counts_equal &= bool(np.array_equal(c, lc))
        worst2 = max(worst2, float((np.abs(s2 - ls2) / ls2).max()))
        scale = np.sqrt(ls2 * np.repeat(lc, len(ls2) // len(lc)))
        worst1 = max(worst1, float((np.abs(s1 - ls1) / scale).max()))
    res.check(counts_equal, "counts equal llama.cpp's, tensor by tensor")
    res.check(worst2 <= TOL, f"in_sum2 within {TOL} relative of llama.cpp's (worst {worst2:.2e})")
    res.check(worst1 <= TOL, f"in_sum within {TOL} of the RMS scale (worst {worst1:.2e})")


def check_kl(res, tmp, fx, ours_path):
    tr = os.path.join(fx, "trained")
    src = os.path.join(tr, "trained-f16.gguf")
    ids = os.path.join(tr, "ids.json")
    T, V = len(load_json(ids)), 2048
    ref = read_f32(os.path.join(tr, "logits.f32"), T, V)
    for t in ("iq4_xs", "q3_k_m"):
        kl = {}
        for who, im in (("snug", ours_path), ("llama.cpp", LLAMA_IMATRIX)):
            q = os.path.join(tmp, f"{who}-{t}.gguf")
            out = os.path.join(tmp, "out.f32")
            run("quantize", src, q, t, "--imatrix", im)
            run("logits", "-m", q, "--ids", ids, "-o", out)
            kl[who] = kl_stats(ref, read_f32(out, T, V))[0]
        res.check(kl["snug"] <= 1.1 * kl["llama.cpp"],
                  f"{t}: median KL with snug's imatrix {kl['snug']:.4e} <= 1.1 x with "
                  f"llama.cpp's {kl['llama.cpp']:.4e}")


def check_moe(res, tmp, fx):
    moe = os.path.join(fx, "moe", "moe-f16.gguf")
    out = os.path.join(tmp, "moe-imatrix.gguf")
    run("imatrix", "-m", moe, "-f", CALIB, "-o", out, "--chunk", "256", "--chunks", "4")
    meta, t = read_imatrix(out)
    r = gguf.GGUFReader(moe)
    E = int(r.fields["qwen35moe.expert_count"].contents())
    k = int(r.fields["qwen35moe.expert_used_count"].contents())
    n_layer = int(r.fields["qwen35moe.block_count"].contents())
    tokens = 4 * 256
    res.check(meta.get("imatrix.chunk_count") == 4, "moe: 4 chunks")
    ok_shape = ok_sum = ok_same = True
    for layer in range(n_layer):
        per = {}
        for w in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
            name = f"blk.{layer}.{w}.weight"
            if name + ".counts" not in t:
                ok_shape = False
                continue
            shape, counts = t[name + ".counts"]
            s2shape = t[name + ".in_sum2"][0]
            ok_shape &= shape == (1, E) and len(s2shape) == 2 and s2shape[1] == E
            ok_sum &= int(counts.sum()) == tokens * k
            per[w] = counts
        ok_same &= len(per) == 3 and all(np.array_equal(per["ffn_gate_exps"], c)
                                         for c in per.values())
        dense = t.get(f"blk.{layer}.ffn_gate_inp.weight.counts")
        ok_sum &= dense is not None and dense[1].tolist() == [tokens]
    res.check(ok_shape, f"moe: per-expert entries ({E} rows of sums, {E} counts) in every layer")
    res.check(ok_sum, f"moe: expert counts sum to tokens x {k} in every layer, router count "
              "= tokens")
    res.check(ok_same, "moe: gate/up/down counts of a layer are the same routing")


def main():
    res = Results()
    fx = fixtures_dir(res)
    if fx is None:
        res.done()
    snugtest.SNUG = os.path.abspath(snugtest.SNUG)
    src = os.path.join(fx, "trained", "trained-f16.gguf")
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(CALIB, os.path.join(tmp, "calib.txt"))
        os.chdir(tmp)  # the reference names its dataset "calib.txt"
        ours = os.path.join(tmp, "ours.gguf")
        p = run("imatrix", "-m", src, "-f", "calib.txt", "-o", ours, "--chunk", "256")
        res.check("36 chunks" in p.stdout, "36 chunks of 256 tokens (as llama-imatrix)")
        compare_trained(res, ours)
        check_kl(res, tmp, fx, ours)
        check_moe(res, tmp, fx)
        with open("short.txt", "w") as f:
            f.write("def f():\n    return 1\n")
        p = run("imatrix", "-m", src, "-f", "short.txt", "-o", "x.gguf", check=False)
        res.check(p.returncode != 0 and "fewer than one chunk" in p.stderr,
                  "a text shorter than a chunk is refused with the reason")
        p = run("imatrix", "-m", src, "-f", "calib.txt", "--chunk", "8", check=False)
        res.check(p.returncode == 2 and "16" in p.stderr, "--chunk 8 is refused")
        res.check(not os.path.exists("x.gguf") and not os.path.exists("imatrix.gguf"),
                  "nothing written on a refusal")
    res.done()


if __name__ == "__main__":
    main()
