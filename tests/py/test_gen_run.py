"""test_gen_run.py — `snug gen` and `snug run` checked from outside with independent tools.

* gen: the demo model in f32 / q8_0 / q4_k_m is read back with the `gguf` Python package (not
  our reader) and its tensors dequantized with gguf.quants: every block must decode to finite
  values with the intended statistics (matrices ~ N(0, 0.02), norms ~ 1, ssm_a < 0); with the
  fixture tokenizer the tensor names and shapes equal those of the trained fixture (written by
  llama.cpp's converter); the same seed gives byte-identical files.
* run: greedy `snug run` on the trained fixture, prompted with the text of ids.json, prints the
  text of the reference greedy continuation (greedy.json, from Hugging Face transformers).
Prints "N passed, N failed"; exits non-zero on failure. Fixture parts skip visibly unless
SNUG_REQUIRE_FIXTURES=1.
"""
import filecmp
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf
from gguf import quants

SNUG = os.environ.get("SNUG_BIN", "build/snug")
SRC = os.environ.get("SNUG_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
FIX = os.environ.get("SNUG_FIXTURES") or os.path.join(SRC, "..", "shared", "fixtures")
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what, file=sys.stderr)


def gen(out, typ, *extra, seed=1):
    r = subprocess.run([SNUG, "gen", "--preset", "demo", "--type", typ, "-o", out,
                        "--seed", str(seed), *extra], capture_output=True, text=True)
    check(r.returncode == 0, f"gen {typ}: rc {r.returncode} {r.stderr[-400:]}")
    return r.returncode == 0


def tensor_values(t):
    data = np.asarray(t.data)
    if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
        return data.astype(np.float32).reshape(-1)
    return quants.dequantize(data, t.tensor_type).astype(np.float32).reshape(-1)


def check_stats(path, typ):
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    check(arch == "qwen35", f"{typ}: arch {arch}")
    check(r.fields["qwen35.block_count"].contents() == 5, f"{typ}: block_count")
    check(r.fields["qwen35.nextn_predict_layers"].contents() == 1, f"{typ}: nextn")
    names = {t.name for t in r.tensors}
    for n in ("blk.4.nextn.eh_proj.weight", "blk.4.attn_q.weight", "blk.0.ssm_a", "output.weight"):
        check(n in names, f"{typ}: tensor {n} missing")
    for t in r.tensors:
        v = tensor_values(t)
        check(v.size == int(np.prod(t.shape)), f"{typ}: {t.name} size")
        check(bool(np.isfinite(v).all()), f"{typ}: {t.name} has non-finite values")
        if t.name.endswith("ssm_a"):
            check(bool((v < 0).all()), f"{typ}: {t.name} not negative")
        elif t.name.endswith("norm.weight"):
            check(abs(v.mean() - 1) < 0.05, f"{typ}: {t.name} mean {v.mean()}")
        elif t.name.endswith(".weight") and "conv1d" not in t.name and v.size >= 4096:
            # q4 quantization of N(0, 0.02) keeps the spread within ~15%
            check(abs(v.mean()) < 0.003 and 0.017 < v.std() < 0.023,
                  f"{typ}: {t.name} mean {v.mean():.4f} std {v.std():.4f}")
    return r


def main():
    with tempfile.TemporaryDirectory() as d:
        for typ in ("f32", "q8_0", "q4_k_m"):
            p = os.path.join(d, f"demo-{typ}.gguf")
            if gen(p, typ):
                check_stats(p, typ)
        # determinism: same seed -> identical bytes; another seed -> different
        a, b, c = (os.path.join(d, x) for x in ("a.gguf", "b.gguf", "c.gguf"))
        if gen(a, "q4_k_m", seed=7) and gen(b, "q4_k_m", seed=7) and gen(c, "q4_k_m", seed=8):
            check(filecmp.cmp(a, b, shallow=False), "same seed, different bytes")
            check(not filecmp.cmp(a, c, shallow=False), "different seed, same bytes")
        # bad options fail with a message
        r = subprocess.run([SNUG, "gen", "--preset", "demo", "--type", "q4_k_m", "-o",
                            os.path.join(d, "x.gguf"), "--set", "nonsense=3"],
                           capture_output=True, text=True)
        check(r.returncode != 0 and "unknown key" in r.stderr, f"bad --set: {r.stderr}")

        if not os.path.isdir(FIX):
            if os.environ.get("SNUG_REQUIRE_FIXTURES") == "1":
                check(False, f"fixtures folder {FIX} missing and SNUG_REQUIRE_FIXTURES=1")
            else:
                print(f"SKIP: fixtures folder {FIX} is missing", file=sys.stderr)
        else:
            fixture_checks(d)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def fixture_checks(d):
    # gen demo with the fixture vocabulary has exactly the trained fixture's tensors
    tokjson = os.path.join(FIX, "tokenizer", "tokenizer.json")
    p = os.path.join(d, "demo-vocab.gguf")
    if gen(p, "f16", "--vocab-from", tokjson):
        ours = {t.name: list(map(int, t.shape)) for t in gguf.GGUFReader(p).tensors}
        ref_r = gguf.GGUFReader(os.path.join(FIX, "trained", "trained-f16.gguf"))
        ref = {t.name: list(map(int, t.shape)) for t in ref_r.tensors}
        diff = sorted(n for n in set(ours) | set(ref) if ours.get(n) != ref.get(n))
        check(not diff, f"tensor table differs from the trained fixture: {diff[:5]}")
        ours_kv = gguf.GGUFReader(p).fields
        for k, f in ref_r.fields.items():
            if k.startswith("qwen35."):
                check(k in ours_kv and ours_kv[k].contents() == f.contents(),
                      f"key {k}: {ours_kv[k].contents() if k in ours_kv else None} vs "
                      f"{f.contents()}")

    # greedy run reproduces the reference continuation's text
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokjson)
    ids = json.load(open(os.path.join(FIX, "trained", "ids.json")))
    greedy = json.load(open(os.path.join(FIX, "trained", "greedy.json")))
    prompt = tok.decode(ids, skip_special_tokens=False)
    check(tok.encode(prompt, add_special_tokens=False).ids == ids, "prompt round trip")
    want = tok.decode(greedy, skip_special_tokens=True)
    r = subprocess.run([SNUG, "run", "-m", os.path.join(FIX, "trained", "trained-f16.gguf"),
                        "-p", prompt, "-n", str(len(greedy)), "--temp", "0"],
                       capture_output=True)
    out = r.stdout.decode("utf-8")
    check(r.returncode == 0, f"run rc {r.returncode}: {r.stderr[-400:]}")
    check(out == want, f"greedy text differs:\n got {out!r}\nwant {want!r}")
    check(b"tok/s" in r.stderr and b"peak memory" in r.stderr, "run prints timings on stderr")
    # sampling is reproducible per seed
    args = [SNUG, "run", "-m", os.path.join(FIX, "trained", "trained-f16.gguf"), "-p",
            "import os\n", "-n", "24", "--temp", "1.0", "--seed"]
    o1 = subprocess.run(args + ["5"], capture_output=True).stdout
    o2 = subprocess.run(args + ["5"], capture_output=True).stdout
    check(o1 == o2 and len(o1) > 0, "same seed, different text")


if __name__ == "__main__":
    sys.exit(main())
