"""test_gen_mmproj.py — `snug gen --mmproj-preset` (src/tools/gen_mmproj.c): a random-weight
vision tower in the layout of llama.cpp's converter, checked from outside.

* Layout: at the vision fixture's shape (tests/data/vision/mmproj-f16.gguf is a converter
  output) the file read with the `gguf` Python package (not our reader) has the fixture's
  metadata keys in the same order with the same types and values (general.name aside) and the
  same tensors (names in order, types, shapes); the values have the recipe's statistics; the
  same seed gives the same bytes, another seed other bytes.
* Sanity: the tower's rows (`snug vision`) are finite and O(1) for the fixture's three images and
  for flat black / white images, at 2 blocks and at the released depth (27, small widths);
  the text model takes them (`snug logits --mmproj --image`: finite logits that differ from the
  converter tower's, so the rows entered).
* Size: the bytes `snug plan --vision-preset qwen3.5` counts for the released tower equal those
  of generated preset-shaped files — measured at depth 1 and 2 (the tensor bytes are affine in
  the depth) and extrapolated to 27, so CI writes 0.2 GB instead of the 0.9 GB of the real one.
* Refusals: an unknown type, a missing projection width, a position table that is not whole.
* `snug gen --add-vision-tokens`: the vision tokens appended once (control) to a vocabulary that
  lacks them, nothing added to one that has them.
Prints "N passed, N failed"; exits non-zero on failure.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

import gguf
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SNUG, SRC, Results, run  # noqa: E402

D = os.path.join(SRC, "tests", "data", "vision")
TEXT = os.path.join(D, "text-f16.gguf")
FIXTURE_SHAPE = ["--set", "block_count=2", "--set", "embedding_length=64",
                 "--set", "feed_forward_length=128", "--set", "attention.head_count=4",
                 "--set", "image_size=128"]


def gen(out, *extra, seed=1, text=TEXT):
    more = ["--text-model", text] if text else []
    return run("gen", "--mmproj-preset", "qwen3.5", *more, "-o", out, "--seed", seed, *extra)


def png(path, w, h, rgb):
    """A flat w × h RGB PNG, written with zlib (no imaging library)."""
    raw = b"".join(b"\0" + bytes(rgb) * w for _ in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def field_value(f):
    v = f.contents()
    return [float(x) for x in v] if isinstance(v, list) and v and isinstance(v[0], float) else v


def test_layout(r, tmp):
    out = os.path.join(tmp, "fx.gguf")
    gen(out, *FIXTURE_SHAPE)
    ref, got = gguf.GGUFReader(os.path.join(D, "mmproj-f16.gguf")), gguf.GGUFReader(out)
    rk = [k for k in ref.fields if not k.startswith("GGUF.")]
    gk = [k for k in got.fields if not k.startswith("GGUF.")]
    r.check(rk == gk, f"metadata keys and their order equal the converter's ({len(gk)} keys)"
            + ("" if rk == gk else f": {rk} vs {gk}"))
    diff = [k for k in rk if k in got.fields and k != "general.name" and
            (ref.fields[k].types != got.fields[k].types or
             field_value(ref.fields[k]) != field_value(got.fields[k]))]
    r.check(not diff, f"metadata types and values equal the converter's (general.name aside): {diff}")
    rt = [(t.name, int(t.tensor_type), [int(x) for x in t.shape]) for t in ref.tensors]
    gt = [(t.name, int(t.tensor_type), [int(x) for x in t.shape]) for t in got.tensors]
    r.check(rt == gt, f"tensors (names in order, types, shapes) equal the converter's ({len(gt)})"
            + ("" if rt == gt else f": first difference "
               f"{next((a, b) for a, b in zip(rt + [None] * 99, gt + [None] * 99) if a != b)}"))

    # the value recipe, tensor by tensor (gen_mmproj.c): norms ~1, biases/positions ~N(0, 0.02²),
    # matrices N(0, 1/n_in), the residual projections further scaled by 1/sqrt(2·depth)
    depth, bad = 2, []
    for t in got.tensors:
        x = np.asarray(t.data).astype(np.float64).reshape(-1)
        n = t.name
        if not np.isfinite(x).all():
            bad.append(n + " not finite")
            continue
        n_in = int(np.prod([int(s) for s in t.shape[:-1]])) if len(t.shape) > 1 else 1
        if n.endswith("ln1.weight") or n.endswith("ln2.weight") or n == "v.post_ln.weight":
            want_mean, want_std = 1.0, 0.02
        elif n.endswith(".bias") or n == "v.position_embd.weight":
            want_mean, want_std = 0.0, 0.02
        elif n.startswith("v.patch_embd.weight"):
            want_mean, want_std = 0.0, 1 / np.sqrt(2 * 3 * 16 * 16)
        elif n.endswith("attn_out.weight") or n.endswith("ffn_down.weight"):
            want_mean, want_std = 0.0, 1 / np.sqrt(n_in) / np.sqrt(2 * depth)
        else:
            want_mean, want_std = 0.0, 1 / np.sqrt(n_in)
        tol = 4 * want_std / np.sqrt(x.size) + 1e-3
        if abs(x.mean() - want_mean) > tol or abs(x.std() / want_std - 1) > 0.25:
            bad.append(f"{n}: mean {x.mean():.4f} std {x.std():.4f}, want {want_mean} / {want_std:.4f}")
    r.check(not bad, f"values follow the recipe in every tensor: {bad[:4]}")

    same, other = os.path.join(tmp, "fx_same.gguf"), os.path.join(tmp, "fx_other.gguf")
    gen(same, *FIXTURE_SHAPE)
    gen(other, *FIXTURE_SHAPE, seed=2)
    b0, b1, b2 = (open(p, "rb").read() for p in (out, same, other))
    r.check(b0 == b1 and b0 != b2 and len(b0) == len(b2),
            "same seed: byte-identical file; another seed: other values, same layout")
    return out


def rows(path, image, out_dim, *extra):
    o = path + ".rows.f32"
    run("vision", "-m", path, "--image", image, "--threads", 2, "-o", o, *extra)
    return np.fromfile(o, "<f4").reshape(-1, out_dim)


def test_rows(r, tmp, fx):
    black, white = os.path.join(tmp, "black.png"), os.path.join(tmp, "white.png")
    png(black, 96, 64, (0, 0, 0))
    png(white, 64, 160, (255, 255, 255))
    deep = os.path.join(tmp, "deep.gguf")
    gen(deep, *FIXTURE_SHAPE, "--set", "block_count=27", "--set", "image_size=768")
    images = [os.path.join(D, f"img{i}.png") for i in range(3)] + [black, white]
    for path, what in ((fx, "2 blocks"), (deep, "27 blocks, 48x48 positions")):
        for im in images:
            x = rows(path, im, 128, "--min-image-pixels", 8192, "--max-image-pixels", 131072)
            rms = float(np.sqrt((x.astype(np.float64) ** 2).mean()))
            spread = float(x.std(axis=0).mean())
            r.check(np.isfinite(x).all() and 0.1 < rms < 3 and np.abs(x).max() < 30,
                    f"{what}, {os.path.basename(im)}: {x.shape[0]} rows finite and O(1) "
                    f"(rms {rms:.3f}, max |x| {np.abs(x).max():.2f}, spread over rows {spread:.3f})")

    # the text model takes the rows: finite logits, other than with the converter's tower
    ids = json.load(open(os.path.join(D, "prompt_ids.json")))
    p_ids = os.path.join(tmp, "ids.json")
    json.dump(ids, open(p_ids, "w"))
    got = {}
    for name, mm in (("gen", fx), ("fixture", os.path.join(D, "mmproj-f16.gguf"))):
        o = os.path.join(tmp, f"logits_{name}.f32")
        run("logits", "-m", TEXT, "--ids", p_ids, "-o", o, "--mmproj", mm, "--image",
            os.path.join(D, "img0.png"), "--min-image-pixels", 8192, "--max-image-pixels", 131072)
        got[name] = np.fromfile(o, "<f4").reshape(len(ids), -1)
    diff = float(np.abs(got["gen"] - got["fixture"]).max())
    r.check(np.isfinite(got["gen"]).all() and diff > 1e-3,
            f"snug logits --mmproj (generated) --image: finite logits, max difference to the "
            f"converter tower's {diff:.3g} (> 1e-3: the rows entered the text model)")


def test_size(r, tmp):
    """The released tower's bytes: plan --vision-preset vs generated files (depth 1, 2 → 27)."""
    w = []
    for depth in (1, 2):
        out = os.path.join(tmp, f"preset_d{depth}.gguf")
        gen(out, "--set", f"block_count={depth}")
        j = json.loads(run("plan", "-m", TEXT, "--mmproj", out, "--json").stdout)
        w.append(j["vision"]["weights_bytes"])
        tensors = sum(int(t.n_bytes) for t in gguf.GGUFReader(out).tensors)
        size = os.path.getsize(out)
        r.check(tensors == w[-1] and 0 < size - tensors < 65536,
                f"depth {depth}: the file holds the tensor bytes plan --mmproj counts ({tensors}) "
                f"plus a {size - tensors}-byte header")
        os.remove(out)
    j = json.loads(run("plan", "-m", TEXT, "--vision-preset", "qwen3.5", "--json").stdout)
    want, got = j["vision"]["weights_bytes"], w[0] + 26 * (w[1] - w[0])
    r.check(got == want, f"the released tower (27 blocks, width 1152, projection 128): generated "
            f"{got} bytes (depth 1 + 26 blocks) = plan --vision-preset qwen3.5 {want}")


def test_refusals(r, tmp):
    out = os.path.join(tmp, "bad.gguf")
    for extra, text, needle in (
            (["--type", "q4_k"], TEXT, "expected f16, bf16 or f32"),
            ([], None, "projection_dim"),
            (["--set", "image_size=100"], TEXT, "multiple of patch_size"),
            (["--set", "attention.head_count=5"], TEXT, "head size"),
            (["--set", "nonsense=1"], TEXT, "unknown mmproj key"),
            ([], os.path.join(D, "mmproj-f16.gguf"), "--text-model takes the text model")):
        p = subprocess.run(
            [SNUG, "gen", "--mmproj-preset", "qwen3.5", *(["--text-model", text] if text else []),
             "-o", out, *extra], capture_output=True, text=True)
        r.check(p.returncode != 0 and needle in p.stderr and not os.path.exists(out),
                f"refused {extra or ('--text-model ' + os.path.basename(text) if text else 'without a text model')}: '{needle}' in {p.stderr.strip()[-160:]!r}")
    p = subprocess.run([SNUG, "gen", "--mmproj-preset", "nope", "--set", "projection_dim=8", "-o",
                        out], capture_output=True, text=True)
    r.check(p.returncode != 0 and "qwen3.5" in p.stderr, "unknown mmproj preset: refused")


def test_vision_tokens(r, tmp):
    """`snug gen --add-vision-tokens`: the five vision tokens appended (control) to a vocabulary
    that lacks them (the built-in one), none duplicated in one that has them (the fixture's)."""
    names = ["<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
             "<|video_pad|>"]

    def tokens(path):
        f = gguf.GGUFReader(path).fields
        toks = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode() for i in
                f["tokenizer.ggml.tokens"].data]
        types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in
                 f["tokenizer.ggml.token_type"].data]
        return toks, types
    for extra, what in (([], "built-in vocabulary"), (["--vocab-from", TEXT], "the fixture's")):
        out = os.path.join(tmp, "vt.gguf")
        plain = os.path.join(tmp, "vt_plain.gguf")
        run("gen", "--preset", "demo", "--type", "q8_0", "-o", out, "--add-vision-tokens", *extra)
        run("gen", "--preset", "demo", "--type", "q8_0", "-o", plain, *extra)
        (toks, types), (ptoks, _) = tokens(out), tokens(plain)
        have = [toks.count(n) == 1 and types[toks.index(n)] == 3 for n in names]
        added = len(toks) - len(ptoks)
        want_added = sum(n not in ptoks for n in names)
        r.check(all(have) and toks[:len(ptoks)] == ptoks and added == want_added,
                f"--add-vision-tokens, {what}: each vision token once, control; {added} appended "
                f"after the {len(ptoks)} tokens (want {want_added})")


def main():
    r = Results()
    with tempfile.TemporaryDirectory() as tmp:
        fx = test_layout(r, tmp)
        test_rows(r, tmp, fx)
        test_size(r, tmp)
        test_refusals(r, tmp)
        test_vision_tokens(r, tmp)
    r.done()


if __name__ == "__main__":
    main()
