"""test_quant_imatrix.py — `snug quantize --imatrix` against llama.cpp's own quantizer.

The trained fixture quantized by llama.cpp's llama-quantize with the importance matrix
tests/data/llamacpp/trained-imatrix.gguf (tests/data/llamacpp/README.md has the commands and the
llama.cpp build) is the reference: snug quantizes the same source with the same imatrix and the
same options: the whole file must be byte-identical (metadata included: the imatrix is passed
under the name llama-quantize was given, which the file records), and each tensor is compared
too, so a failure says which types differ. The low-bit mixes put the MTP layer (blk.4, absent from the imatrix)
in Q4_K with --tensor-type, as the reference files were made. The other 1-3 bit mixes (and
iq3_s / iq3_m without the override or without an imatrix) and every mix of the MoE fixture are
compared by sha256 with the files llama-quantize wrote. Also: the refusals (each 1-3 bit mix
without an imatrix, before any file is written; an imatrix lacking the MTP layer; a malformed
--tensor-type) and median KL to the Hugging Face reference no worse than llama.cpp's file
(1.02x slack for float summation order)."""
import hashlib
import os
import shutil
import tempfile

import gguf

import snugtest
from snugtest import Results, fixtures_dir, kl_stats, load_json, read_f32, run

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA_DIR = os.path.abspath(os.path.join(HERE, "..", "data", "llamacpp"))
IMATRIX = os.path.join(LLAMA_DIR, "trained-imatrix.gguf")

# the MTP layer (blk.4) has no imatrix entry: the 1-3 bit mixes store it as Q4_K
MTP_Q4K = ["--tensor-type", "blk\\.4\\.=q4_K"]

# recipe -> extra options llama-quantize was given (tests/data/llamacpp/README.md)
FILES = {
    "iq4_xs": [],
    "q3_k_m": [],
    "q2_k": [],
    "iq3_xxs": MTP_Q4K,
    "iq2_xxs": MTP_Q4K,
    "iq1_s": MTP_Q4K,
}

# The other 1-3 bit mixes of the trained fixture: sha256 of the file llama-quantize (build
# 11434) writes, run as
#   llama-quantize [--imatrix imatrix.gguf] [--tensor-type 'blk\.4\.=q4_K'] \
#       trained-f16.gguf out.gguf <TYPE> 2
# (recipe, imatrix given, extra options) -> sha256
TRAINED_SHA256 = {
    ("iq2_xs", True, "mtp"): "eeaebb76c2cc7df193336d0b808cb910f74bb5316302aed904aa830807fe745a",
    ("iq2_s", True, "mtp"): "3bde5ba6c3fe4117b9d31d4323582cbb176ccefc77245360605e0f4a897584f1",
    ("iq2_m", True, "mtp"): "7d5824a08f6193a616e71eaf4edb75c2e7b260e6a8e0993068fa2fa8b4d56ab3",
    ("iq3_xs", True, "mtp"): "2e1df6c06c4f7795a3bd3825f9d04dd23d457cf30bc1091bb343d40dfbf27c8a",
    ("iq3_s", True, "mtp"): "527157240357cf633e10ea7f0e564b4215bc9853f3fe927428b02a6b488c5964",
    ("iq3_m", True, "mtp"): "f993b1f24863a2296fec8847ac9215452076df6fa76fac98c776974a58c35ef6",
    ("iq1_m", True, "mtp"): "41cdee685351ac065e4550e0907493aa4a1c34544b8d1a91aaa951a4a6fc5f29",
    # IQ3_S needs no imatrix: the MTP layer in IQ3_S without one, and whole files without one
    ("iq3_s", True, ""): "83dd75ff60224cbf8c815bb24392b997ee97a860c7c5f58a75dbc99ab5953082",
    ("iq3_m", True, ""): "833da934750b36c38508697d5368c05ad159351043f01a608c2a8f0e5b4e61a6",
    ("iq3_s", False, ""): "d0e93153b28c9e6b1315117aab7c112b76a9203ce433ea6bddc8dd080f7e9615",
    ("iq3_m", False, ""): "a340fb3bb056ab76d669d84385d60818774058b841999a80fbca6da0f10ea763",
}

# the mixes that store some tensor in a type that needs importance data
NEEDS_IMATRIX = ["iq3_xxs", "iq3_xs", "iq2_m", "iq2_s", "iq2_xs", "iq2_xxs", "iq1_m", "iq1_s"]


# The MoE fixture (expert tensors: each expert quantized with its own imatrix slice; expert 1 of
# every tensor has zero counts) with the synthetic imatrix moe-synthetic-imatrix.gguf: sha256 of
# the file llama-quantize (build 11434) writes, run as
#   llama-quantize --imatrix moe-imatrix.gguf moe-f16.gguf out.gguf <TYPE> 2
MOE_SHA256 = {
    "iq4_xs": "08c7386af8b4ab2593dc6531354bee632bc69b13a66e9586e40e34329db97950",
    "q2_k": "a5ebb832dc7d34f51aaf99bb599e7cbc9589b813b641aa4cdd09c70445964af4",
    "q3_k_m": "0a5dccaed8fff7bdfab2a0bbe7c48f0b7049a40b51c0faef3bba64590e5c194f",
    "q4_0": "2912160147e41396ce8c81b8f5d30c51bccc5d19e0777aa080a8bd4a80df6d07",
    "q4_1": "dadf2e67a3c4431d231bd7e688572099c8aea31e6e5acb768f04a6aa0804996c",
    "q4_k_m": "bc7118164d7bc604f53cbfbf2cc264079c7c9a0315def3e5e4e10fd4aa2893b0",
    "q5_0": "be39b86c70b4963d7774b197eac95b66b7cd8b03eb17bd07e6e70de4a9b21d16",
    "q5_1": "b1a0133990defc6acfa3fecf204b34f300240cfb105f9d918e84394f7b1bd6d5",
    "q5_k_m": "1e269712ecfec4d185ae25c8ab7c3ad434b40e7b16b74ecc6b25d3d9681abfe6",
    "q6_k": "2dadbfaddbdb3d54b63c8b065ed3ea6d383ee95f2a836692c42ef2999c6324e8",
    "q8_0": "5b1ebdecf43e863dd91cdb38a82b1000822a00045642e9dde7d133740b6b7560",
    "iq2_xxs": "db6a5aecee74043d98d83dad2013e9bccb6f4379bc40adccb25f184040beaed1",
    "iq2_xs": "947bb0bc43293eaf678988aeabcd73b9478438d6e612047f2487c295976feb7e",
    "iq2_s": "1c9ee6a935b906d6e5c0296f6d40cf2828c1df3c98a56d2bd99621699e1b2705",
    "iq2_m": "9f5d2238c5c8a509c894274e0a60879d6789a26cd99e48906e6897f8dc134f9e",
    "iq3_xxs": "f7134f3fa8a55cf7af7849cef28e88ebcfc8041027b44006f53d7112ec954e84",
    "iq3_xs": "7d3c9acb875b17f93606a6aed5f641e4fbadd6a535f732ed57538065c83bad46",
    "iq3_s": "fea866120ab28ed9cbaeac5bebd6a4b40296cd3f135171ad429574255f041ea2",
    "iq3_m": "64a4d638336cbe1aad48b64dd1b9d29602644a050638d983746d8180b0984bf5",
    "iq1_s": "c4128c542efcb761e64595f8c3ffee76a9da8f66fecb77ec22662200213f31c8",
    "iq1_m": "dcf5c5c08f60c7391217942a0f71292910bbb4dc4b9f69ac439f5ad943ca4e79",
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
        for (t, with_im, extra), want in TRAINED_SHA256.items():
            out = os.path.join(tmp, f"trained-{t}-sha.gguf")
            args = (["--imatrix", "imatrix.gguf"] if with_im else []) + (MTP_Q4K if extra else [])
            run("quantize", src, out, t, *args)
            with open(out, "rb") as f:
                got = hashlib.sha256(f.read()).hexdigest()
            res.check(got == want, f"{t} ({' '.join(args) or 'no imatrix'}): sha256 equals "
                      "llama-quantize's file")
        # the MoE fixture, every writable mix, against llama.cpp's hashes
        shutil.copy(os.path.join(LLAMA_DIR, "moe-synthetic-imatrix.gguf"),
                    os.path.join(tmp, "moe-imatrix.gguf"))
        moe = os.path.join(fx, "moe", "moe-f16.gguf")
        for t, want in MOE_SHA256.items():
            out = os.path.join(tmp, f"moe-{t}.gguf")
            run("quantize", moe, out, t, "--imatrix", "moe-imatrix.gguf")
            with open(out, "rb") as f:
                got = hashlib.sha256(f.read()).hexdigest()
            res.check(got == want, f"moe {t} with imatrix: sha256 equals llama-quantize's file")
        # refusals
        p = run("quantize", src, os.path.join(tmp, "x.gguf"), "q4_k_m", "--tensor-type", "ffn=",
                check=False)
        res.check(p.returncode != 0 and "PATTERN=TYPE" in p.stderr,
                  "a --tensor-type without a type is refused with the syntax")
        p = run("quantize", src, os.path.join(tmp, "x.gguf"), "q4_k_m", "--imatrix",
                src, check=False)
        res.check(p.returncode != 0, "a model file given as imatrix is refused")
        # the 1-3 bit types without importance data: refused before anything is written
        for t in NEEDS_IMATRIX:
            out = os.path.join(tmp, f"noim-{t}.gguf")
            p = run("quantize", src, out, t, check=False)
            res.check(p.returncode != 0 and "needs an importance matrix" in p.stderr
                      and "--imatrix FILE" in p.stderr and not os.path.exists(out),
                      f"{t} without --imatrix: refused, saying why, no file written")
        # with an imatrix that has no entry for the MTP layer: refused, naming the tensor
        p = run("quantize", src, os.path.join(tmp, "x.gguf"), "iq2_xxs", "--imatrix",
                "imatrix.gguf", check=False)
        res.check(p.returncode != 0 and "blk.4." in p.stderr and "no entry" in p.stderr,
                  "iq2_xxs with an imatrix lacking the MTP layer: refused, naming the tensor")
    res.done()


if __name__ == "__main__":
    main()
