"""test_vision_fixture.py — the vision-language fixture (tests/data/vision, made by
tools/vision/make_fixture.py and llama.cpp's converter; docs/vision.md) as far as snug runs it
today: the image pipeline (src/vision/image.c: PNG/JPEG/WebP decoding, the smart-resize rule,
Pillow's bicubic resampling, the patch layout) gives exactly the pixels of the Hugging Face
processor (the fixture's images, the ten reference sizes, every decoder) and refuses bad input
clearly; the vision tower (`snug vision`, src/vision) over each image's patches gives
transformers' projector rows (median relative error <= 1e-4, one and two threads); the text
GGUF's logits over the prompt's text before the image equal transformers' (multimodal rotary
positions are plain positions there: t = h = w); and the reference files agree with each other
(shapes, image-token counts, the rotary rows of the image tokens). Still missing (issue 23): the
image rows and M-RoPE in the text model, the plan, the server."""
import json
import os
import tempfile

import sys

import numpy as np
from PIL import Image

from snugtest import SRC, Results, kl_stats, run

sys.path.insert(0, os.path.join(SRC, "tools", "vision"))
from qwen_preprocess import MAX_PIXELS, MIN_PIXELS, preprocess  # noqa: E402

D = os.path.join(SRC, "tests", "data", "vision")


def main():
    r = Results()
    meta = json.load(open(os.path.join(D, "meta.json")))
    V, T = meta["prompt"]["V"], meta["prompt"]["T"]
    ids = json.load(open(os.path.join(D, "prompt_ids.json")))
    pos = json.load(open(os.path.join(D, "prompt_pos.json")))
    ref = np.fromfile(os.path.join(D, "prompt_logits.f32"), "<f4").reshape(T, V)
    r.check(len(ids) == T and len(pos) == 3 and all(len(p) == T for p in pos), "prompt shapes")

    # the text before <|vision_start|> (inclusive): positions are plain, so snug's text path applies
    vs = meta["ids"]["<|vision_start|>"]
    n = ids.index(vs) + 1
    r.check(all(pos[0][i] == pos[1][i] == pos[2][i] == i for i in range(n)),
            f"rotary positions of the first {n} tokens are plain positions")
    with tempfile.TemporaryDirectory() as tmp:
        pre = os.path.join(tmp, "pre.json")
        out = os.path.join(tmp, "pre.f32")
        json.dump(ids[:n], open(pre, "w"))
        run("logits", "-m", os.path.join(D, "text-f16.gguf"), "--ids", pre, "-o", out)
        got = np.fromfile(out, "<f4").reshape(n, -1)
        med, _, _, top1 = kl_stats(ref[:n], got[:, :V])
        r.check(got.shape[1] == V and med <= 1e-5,
                f"text prefix logits vs transformers: median KL {med:.3g} (<= 1e-5), top-1 {top1}")

    info = run("info", "-m", os.path.join(D, "mmproj-f16.gguf")).stdout
    r.check('"clip"' in info and "v.blk.1.attn_qkv.weight" in info and
            "clip.vision.spatial_merge_size" in info, "mmproj GGUF read (clip, 2 blocks, merge size)")

    with tempfile.TemporaryDirectory() as tmp:
        for im in meta["images"]:
            gt, gh, gw = im["grid_thw"]
            ref = np.fromfile(os.path.join(D, im["file"].replace(".png", "_features.f32")), "<f4")
            for threads in (1, 2):
                out = os.path.join(tmp, f"f{threads}.f32")
                run("vision", "-m", os.path.join(D, "mmproj-f16.gguf"), "--pixels",
                    os.path.join(D, im["file"].replace(".png", "_pixels.f32")), "--grid", gh, gw,
                    "-o", out, "--threads", threads)
                got = np.fromfile(out, "<f4")
                rel = np.abs(got - ref) / np.maximum(np.abs(ref), 1e-6) if got.size == ref.size \
                    else np.array([np.inf])
                r.check(got.size == ref.size and float(np.median(rel)) <= 1e-4,
                        f"{im['file']}: vision tower vs transformers, {threads} thread(s): median "
                        f"relative error {float(np.median(rel)):.3g} (<= 1e-4)")
        # the whole pipeline from the image files: the processor's pixels exactly, same features
        bounds = ("--min-image-pixels", MIN_PIXELS, "--max-image-pixels", MAX_PIXELS)
        for im in meta["images"]:
            px, feat = os.path.join(tmp, "px.f32"), os.path.join(tmp, "feat.f32")
            p = run("vision", "-m", os.path.join(D, "mmproj-f16.gguf"), "--image",
                    os.path.join(D, im["file"]), *bounds, "--dump-pixels", px, "-o", feat)
            ref_px = np.fromfile(os.path.join(D, im["file"].replace(".png", "_pixels.f32")), "<f4")
            got_px = np.fromfile(px, "<f4")
            r.check(got_px.size == ref_px.size and np.array_equal(got_px, ref_px) and
                    f"{im['n_tokens']} tokens" in p.stdout,
                    f"{im['file']}: decoded, resized and cut into patches as transformers does "
                    f"(bit-identical pixels)")
            ref = np.fromfile(os.path.join(D, im["file"].replace(".png", "_features.f32")), "<f4")
            got = np.fromfile(feat, "<f4")
            r.check(got.size == ref.size and
                    float(np.median(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-6))) <= 1e-4,
                    f"{im['file']}: image file to projector rows")
        # the ten reference sizes (smart resize, down- and up-scaling, extreme aspect ratios)
        rng = np.random.default_rng(7)
        rs = json.load(open(os.path.join(D, "resize.json")))
        for case in rs["sizes"]:
            h, w = case["h"], case["w"]
            img = Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8), "RGB")
            f = os.path.join(tmp, "s.png")
            img.save(f)
            px = os.path.join(tmp, "spx.f32")
            p = run("vision", "-m", os.path.join(D, "mmproj-f16.gguf"), "--image", f, "--min-image-pixels",
                    rs["min_pixels"], "--max-image-pixels", rs["max_pixels"], "--dump-pixels", px)
            rh, rw = case["resized"]
            want, _, _ = preprocess(img, rs["min_pixels"], rs["max_pixels"])
            got = np.fromfile(px, "<f4")
            r.check(f"-> {rw} x {rh} pixels" in p.stdout and got.size == want.size and
                    np.array_equal(got, want.ravel()),
                    f"{w} x {h}: resized to {rw} x {rh} with Pillow's exact bytes")
        # every decoder against Pillow's (JPEG and lossy WebP through libjpeg-turbo / libwebp)
        a = (rng.random((123, 217, 3)) * 255).astype(np.uint8)
        for fmt, ext, kw in [("JPEG", "jpg", {"quality": 85}), ("WEBP", "webp", {"quality": 80}),
                             ("WEBP", "webp", {"lossless": True}), ("PNG", "png", {})]:
            f = os.path.join(tmp, "d." + ext)
            Image.fromarray(a).save(f, fmt, **kw)
            want, _, _ = preprocess(Image.open(f).convert("RGB"))
            px = os.path.join(tmp, "dpx.f32")
            run("vision", "-m", os.path.join(D, "mmproj-f16.gguf"), "--image", f, *bounds,
                "--dump-pixels", px)
            got = np.fromfile(px, "<f4")
            r.check(got.size == want.size and np.array_equal(got, want.ravel()),
                    f"{fmt} {kw}: decoded as Pillow decodes it")
        # bad input: a truncated PNG, bytes that are no image, an aspect ratio above 200
        raw = open(os.path.join(D, "img0.png"), "rb").read()
        for name, data, needle in [("trunc.png", raw[:len(raw) // 2], "PNG image"),
                                   ("junk.png", b"GIF89a" + bytes(100), "not PNG, JPEG or WebP")]:
            f = os.path.join(tmp, name)
            open(f, "wb").write(data)
            p = run("vision", "-m", os.path.join(D, "mmproj-f16.gguf"), "--image", f, check=False)
            r.check(p.returncode != 0 and needle in p.stderr, f"{name}: refused ({needle})")
        f = os.path.join(tmp, "thin.png")
        Image.fromarray(np.zeros((2, 500, 3), np.uint8)).save(f)
        p = run("vision", "-m", os.path.join(D, "mmproj-f16.gguf"), "--image", f, check=False)
        r.check(p.returncode != 0 and "aspect ratio" in p.stderr, "aspect ratio 250: refused")
    bad = run("vision", "-m", os.path.join(D, "text-f16.gguf"), "--pixels",
              os.path.join(D, "img0_pixels.f32"), "--grid", 6, 10, "-o", "/dev/null", check=False)
    r.check(bad.returncode != 0 and "clip.projector_type" in bad.stderr,
            "a text GGUF given as the mmproj is refused, naming the missing key")

    for im in meta["images"]:
        gt, gh, gw = im["grid_thw"]
        r.check(im["n_patches"] == gt * gh * gw and im["n_tokens"] * 4 == im["n_patches"] and
                im["resized"] == [gh * 16, gw * 16], f"{im['file']}: grid {gh}x{gw}, tokens")
        px = np.fromfile(os.path.join(D, im["file"].replace(".png", "_pixels.f32")), "<f4")
        ft = np.fromfile(os.path.join(D, im["file"].replace(".png", "_features.f32")), "<f4")
        r.check(px.size == im["n_patches"] * 3 * 2 * 16 * 16 and
                ft.size == im["n_tokens"] * 128 and np.isfinite(ft).all(),
                f"{im['file']}: pixel and feature files")
    # image tokens: t = the image's start position, h/w walk the merged grid
    img = meta["images"][0]
    gh, gw = img["grid_thw"][1] // 2, img["grid_thw"][2] // 2
    hs = [pos[1][n + k] - n for k in range(gh * gw)]
    ws = [pos[2][n + k] - n for k in range(gh * gw)]
    r.check(hs == [k // gw for k in range(gh * gw)] and ws == [k % gw for k in range(gh * gw)],
            "image tokens' rotary rows: h = row, w = column of the merged grid")
    rs = json.load(open(os.path.join(D, "resize.json")))
    r.check(len(rs["sizes"]) == 10 and all(s["resized"][0] % 32 == 0 and s["resized"][1] % 32 == 0
                                           for s in rs["sizes"]), "10 smart-resize references")
    r.done()


if __name__ == "__main__":
    main()
