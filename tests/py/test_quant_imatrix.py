"""test_quant_imatrix.py — `snug quantize --imatrix` against llama.cpp's own quantizer.

The trained fixture quantized by llama.cpp's llama-quantize with the importance matrix
tests/data/llamacpp/trained-imatrix.gguf (tests/data/llamacpp/README.md has the commands and the
llama.cpp build) is the reference: snug quantizes the same source with the same imatrix and the
same options: the whole file must be byte-identical (metadata included: the imatrix is passed
under the name llama-quantize was given, which the file records), and each tensor is compared
too, so a failure says which types differ. The low-bit mixes put the MTP layer (blk.4, absent from the imatrix)
in Q4_K with --tensor-type, as the reference files were made. Also: the refusals (1-3 bit
i-quants without an imatrix, a malformed --tensor-type) and median KL to the Hugging Face
reference no worse than llama.cpp's file (1.02x slack for float summation order)."""
import os
import shutil
import tempfile

import gguf

import snugtest
from snugtest import Results, fixtures_dir, kl_stats, load_json, read_f32, run

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA_DIR = os.path.abspath(os.path.join(HERE, "..", "data", "llamacpp"))
IMATRIX = os.path.join(LLAMA_DIR, "trained-imatrix.gguf")

# recipe -> extra options llama-quantize was given (tests/data/llamacpp/README.md)
FILES = {
    "iq4_xs": [],
    "q3_k_m": [],
    "q2_k": [],
}


def tensors(path):
    r = gguf.GGUFReader(path)
    return {t.name: (t.tensor_type.name, bytes(t.data.tobytes())) for t in r.tensors}


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
    snugtest.SNUG = os.path.abspath(snugtest.SNUG)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(IMATRIX, os.path.join(tmp, "imatrix.gguf"))
        os.chdir(tmp)  # the reference files record the imatrix as "imatrix.gguf"
        for t, extra in FILES.items():
            theirs_path = os.path.join(LLAMA_DIR, f"trained-{t}.gguf")
            ours_path = os.path.join(tmp, f"trained-{t}.gguf")
            run("quantize", src, ours_path, t, "--imatrix", "imatrix.gguf", *extra)
            with open(ours_path, "rb") as a, open(theirs_path, "rb") as b:
                res.check(a.read() == b.read(), f"{t}: whole file byte-identical to llama.cpp's")
            ours, theirs = tensors(ours_path), tensors(theirs_path)
            res.check(sorted(ours) == sorted(theirs), f"{t}: same tensor names")
            by_type = {}
            for name, (ty, data) in theirs.items():
                if name not in ours:
                    continue
                oty, odata = ours[name]
                same = oty == ty and odata == data
                n_same, n = by_type.get(ty, (0, 0))
                by_type[ty] = (n_same + same, n + 1)
                if oty != ty:
                    res.check(False, f"{t}: {name} typed {oty}, llama.cpp {ty}")
            for ty, (n_same, n) in sorted(by_type.items()):
                res.check(n_same == n, f"{t}: {n_same} of {n} {ty} tensors byte-identical to "
                          "llama.cpp's")
            kls = {}
            for name, path in (("snug", ours_path), ("llama.cpp", theirs_path)):
                out = os.path.join(tmp, "out.f32")
                run("logits", "-m", path, "--ids", ids, "-o", out)
                kls[name] = kl_stats(ref, read_f32(out, T, V))[0]
            res.check(kls["snug"] <= kls["llama.cpp"] * 1.02,
                      f"{t}: median KL of snug's file {kls['snug']:.4e} <= llama.cpp's file "
                      f"{kls['llama.cpp']:.4e} (both run by snug)")
        # refusals
        p = run("quantize", src, os.path.join(tmp, "x.gguf"), "q4_k_m", "--tensor-type", "ffn=",
                check=False)
        res.check(p.returncode != 0 and "PATTERN=TYPE" in p.stderr,
                  "a --tensor-type without a type is refused with the syntax")
        p = run("quantize", src, os.path.join(tmp, "x.gguf"), "q4_k_m", "--imatrix",
                src, check=False)
        res.check(p.returncode != 0, "a model file given as imatrix is refused")
    res.done()


if __name__ == "__main__":
    main()
