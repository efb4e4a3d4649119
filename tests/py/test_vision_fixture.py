"""test_vision_fixture.py — the vision-language fixture (tests/data/vision, made by
tools/vision/make_fixture.py and llama.cpp's converter; docs/vision.md) as far as snug runs it
today: the vision tower (`snug vision`, src/vision) over each image's preprocessed patches gives
transformers' projector rows (median relative error <= 1e-4, one and two threads); the text
GGUF's logits over the prompt's text before the image equal transformers' (multimodal rotary
positions are plain positions there: t = h = w); and the reference files agree with each other
(shapes, image-token counts, the rotary rows of the image tokens). Still missing (issue 23): the
image preprocessor, image rows and M-RoPE in the text model."""
import json
import os
import tempfile

import numpy as np

from snugtest import SRC, Results, kl_stats, run

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
