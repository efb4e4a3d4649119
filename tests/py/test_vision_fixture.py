"""test_vision_fixture.py — the vision-language fixture (tests/data/vision, made by
tools/vision/make_fixture.py and llama.cpp's converter; docs/vision.md) as far as snug runs it
today: the image pipeline (src/vision/image.c: PNG/JPEG/WebP decoding, the smart-resize rule,
Pillow's bicubic resampling, the patch layout) gives exactly the pixels of the Hugging Face
processor (the fixture's images, the ten reference sizes, every decoder) and refuses bad input
clearly; the vision tower (`snug vision`, src/vision) over each image's patches gives
transformers' projector rows (median relative error <= 1e-4, one and two threads); the text
GGUF's logits over the prompt's text before the image equal transformers' (multimodal rotary
positions are plain positions there: t = h = w); and the reference files agree with each other
(shapes, image-token counts, the rotary rows of the image tokens). Images through the server:
test_server_vision.py.
Also: the whole image prompt through `snug logits --mmproj --image` (image rows + M-RoPE in the
text model) against transformers' logits and its 16 greedy tokens, `snug run --image`."""
import json
import os
import subprocess
import tempfile

import sys

import numpy as np
from PIL import Image

from snugtest import SNUG, SRC, Results, kl_stats, run

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
    test_image_prompt(r, ids, ref_all(T, V), T, V)
    test_plan(r)
    r.done()


def test_plan(r):
    """`snug plan --mmproj` / `--vision-preset`: the tower's weights equal the mmproj's tensor
    bytes and the f16 layout restated here; the largest image's tokens follow the pixel bound;
    the contexts reported leave room for the tower."""
    text, mmproj = os.path.join(D, "text-f16.gguf"), os.path.join(D, "mmproj-f16.gguf")

    def f16_bytes(D_, F, L, P, M, S, O):  # matrices f16, vectors and positions f32
        M4 = M * M * D_
        return (2 * (2 * P * P * 3 * D_ + L * (3 * D_ * D_ + D_ * D_ + 2 * D_ * F) + M4 * M4 +
                     M4 * O) + 4 * (D_ + S * S * D_ + L * (9 * D_ + F) + 2 * D_ + M4 + O))

    j = json.loads(run("plan", "-m", text, "--mmproj", mmproj, "--max-image-pixels", 131072,
                       "--json").stdout)
    size = os.path.getsize(mmproj)
    want = f16_bytes(64, 128, 2, 16, 2, 8, 128)
    v = j["vision"]
    r.check(v["weights_bytes"] == want and want < size < want + 65536,
            f"plan --mmproj: weights {v['weights_bytes']} = the f16 layout {want} (file {size})")
    r.check(v["image_tokens"] == 128 and v["image_patches"] == 512 and v["work_bytes"] > 0 and
            all(k in j["items"] for k in ("vision weights (mmproj)",
                                          "vision encoder work (largest image)")),
            f"plan --mmproj: 131072 pixels = 128 tokens, 512 patches; items listed")
    # the released tower's preset on the 27B (CPU budget): less context with vision, by the
    # tower's bytes (the KV bytes per token times the context lost covers them)
    base = ["plan", "--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--budget", "40GiB",
            "--table", "--json", "--threads", 1]
    t0 = json.loads(run(*base).stdout)
    t1 = json.loads(run(*base, "--vision-preset", "qwen3.5").stdout)
    vb = t1["vision"]["bytes"]
    ok = vb > 10 ** 9 and t1["vision"]["image_tokens"] == 16384
    smaller = 0
    for a, b in zip(t0["rows"], t1["rows"]):
        ok &= b["max_ctx"] <= a["max_ctx"] and b["total_bytes"] + vb <= 40 * 2 ** 30
        smaller += b["max_ctx"] < a["max_ctx"]
    r.check(ok and smaller > 0, f"plan --table --vision-preset qwen3.5 (27B, 40 GiB cpu): no "
            f"row's context larger, {smaller} smaller, plan + tower ({vb / 2 ** 30:.2f} GiB) "
            f"within the budget")
    p = run("plan", "--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--vision-preset", "nope",
            check=False)
    r.check(p.returncode != 0 and "qwen3.5" in p.stderr, "unknown vision preset: refused")


def ref_all(T, V):
    return np.fromfile(os.path.join(D, "prompt_logits.f32"), "<f4").reshape(T, V)


def test_image_prompt(r, ids, ref, T, V):
    """The whole prompt with image 0 through `snug logits --mmproj --image` (the PNG decoded,
    resized, encoded; its rows at the pad run, M-RoPE positions): transformers' logits, and the
    16 greedy tokens after it (each one a decode step, the text positions continuing from the
    image's s + max(rows, cols))."""
    greedy_ref = json.load(open(os.path.join(D, "prompt_greedy.json")))
    text = os.path.join(D, "text-f16.gguf")
    mmproj = os.path.join(D, "mmproj-f16.gguf")
    flags = ["--mmproj", mmproj, "--image", os.path.join(D, "img0.png"),
             "--min-image-pixels", 8 * 32 * 32, "--max-image-pixels", 128 * 32 * 32]
    with tempfile.TemporaryDirectory() as tmp:
        p_ids = os.path.join(tmp, "ids.json")
        out = os.path.join(tmp, "out.f32")
        json.dump(ids, open(p_ids, "w"))
        # one step; steps that split the image's rows; evals that split them (the image passed
        # to each eval it overlaps, as a server feeding a prompt in pieces would)
        for chunk, split in ((512, None), (7, None), (512, 10), (512, 1)):
            more = ["--split", split] if split else []
            p = run("logits", "-m", text, "--ids", p_ids, "-o", out, "--greedy", 16,
                    "--chunk", chunk, *more, *flags)
            got = np.fromfile(out, "<f4").reshape(T, -1)
            med, mx, _, top1 = kl_stats(ref, got[:, :V])
            r.check(got.shape[1] == V and med <= 1e-5,
                    f"image prompt logits vs transformers (chunk {chunk}, split {split}): median "
                    f"KL {med:.3g} (<= 1e-5), max {mx:.3g}, top-1 {top1}")
            greedy = json.loads(p.stdout.strip().splitlines()[-1])
            r.check(greedy == greedy_ref, f"greedy 16 tokens after the image prompt (chunk {chunk}, "
                    f"split {split}): {greedy} vs {greedy_ref}")
        # --backend cuda: the device paths of the forward (image rows uploaded into the step's
        # input, 3-D positions uploaded, logits staged and downloaded) over the CPU ops, through
        # the test stand-in for libsnug_cuda.so (tests/support/fake_device.c; the CUDA kernels
        # are checked on a GPU by tests/device/run_vision_device.sh)
        env = dict(os.environ, SNUG_CUDA_LIB=os.path.join(os.path.dirname(SNUG),
                                                          "libsnug_fakedev.so"))
        def fake_logits(*more):
            """`snug logits --backend cuda` through the stand-in: (process, median KL to
            transformers, greedy tokens)."""
            cmd = [SNUG, "logits", "--backend", "cuda", "-m", text, "--ids", p_ids, "-o", out,
                   "--greedy", 16, *more, *flags]
            p = subprocess.run([str(a) for a in cmd], capture_output=True, text=True, env=env,
                               timeout=300)
            got = np.fromfile(out, "<f4").reshape(T, -1) if p.returncode == 0 else None
            med = kl_stats(ref, got[:, :V])[0] if got is not None else float("inf")
            greedy = json.loads(p.stdout.strip().splitlines()[-1]) if got is not None else None
            return p, med, greedy

        # the text model's device paths with the tower on the CPU (--vision-backend cpu), in
        # one step and in steps of 7 over evals of 10
        for chunk, split in ((512, None), (7, 10)):
            more = ["--split", split] if split else []
            p, med, greedy = fake_logits("--vision-backend", "cpu", "--chunk", chunk, *more)
            r.check(med <= 1e-5 and greedy == greedy_ref and "cuda: device memory" in p.stderr,
                    f"--backend cuda (device paths over the CPU ops; chunk {chunk}, split {split})"
                    f": median KL {med:.3g} (<= 1e-5), greedy {greedy == greedy_ref}"
                    + ("" if p.returncode == 0 else ": " + p.stderr[-500:]))
        # --vision-backend cuda: the whole tower on a backend instance of its own over the
        # mmproj (here the stand-in: the device paths — frames, positions and angles uploaded,
        # every block as backend ops, the rows downloaded — over the CPU ops, so transformers'
        # numbers still hold)
        p, med, greedy = fake_logits("--vision-backend", "cuda")
        r.check(med <= 1e-5 and greedy == greedy_ref and "vision tower on the cuda" in p.stderr,
                f"--vision-backend cuda (the tower through a backend instance): median "
                f"KL {med:.3g} (<= 1e-5), greedy {greedy == greedy_ref}"
                + ("" if p.returncode == 0 else ": " + p.stderr[-500:]))
        p = run("logits", "-m", text, "--ids", p_ids, "-o", out, "--vision-backend", "gpu", *flags,
                check=False)
        r.check(p.returncode != 0 and "expected cpu or cuda" in p.stderr,
                "--vision-backend gpu: refused")
        # the tower's GPU memory in the plan: device items with --backend cuda (the default
        # --vision-backend there), none with --vision-backend cpu
        plans = {}
        for vb in ("cuda", "cpu"):
            p = subprocess.run([str(x) for x in [SNUG, "plan", "-m", text, "--backend", "cuda",
                                                 "--budget", "2GiB", "--mmproj", mmproj,
                                                 "--vision-backend", vb, "--json"]],
                               capture_output=True, text=True, env=env, timeout=60)
            plans[vb] = json.loads(p.stdout) if p.returncode == 0 else {}
        items = plans["cuda"].get("items", {})
        vis = plans["cuda"].get("vision", {})
        r.check(items.get("vision weights (gpu)") == vis.get("device_weights_bytes") and
                items.get("vision activations + scratch (gpu)") == vis.get("device_work_bytes")
                and vis.get("backend") == "cuda" and vis.get("device_work_bytes", 0) > 0 and
                "vision weights (gpu)" not in plans["cpu"].get("items", {"vision weights (gpu)": 0})
                and plans["cpu"]["total_bytes"] < plans["cuda"]["total_bytes"],
                f"snug plan --backend cuda --mmproj: the tower's device items "
                f"({vis.get('device_weights_bytes')} + {vis.get('device_work_bytes')} bytes) in "
                f"the GPU plan; none with --vision-backend cpu")
        # a server sizing its own context refuses a vision plan that leaves no room for one
        # largest image (16,384 tokens at the default bound): the budget leaves ~12K here
        p = subprocess.run([str(x) for x in [SNUG, "serve", "-m", text, "--mmproj", mmproj,
                                             "--backend", "cuda", "--vram-budget", "1180MiB",
                                             "--slots", 1, "--port", 0]],
                           capture_output=True, text=True, env=env, timeout=60)
        r.check(p.returncode != 0 and "too short for one such image" in p.stderr and
                "--max-image-pixels" in p.stderr,
                f"serve: a GPU vision plan without room for one image is refused at boot: "
                f"{p.stderr.strip()[-160:]}")
        # without the image's rows (plain pads, 1-D positions) the logits must differ: the
        # comparison above can fail
        run("logits", "-m", text, "--ids", p_ids, "-o", out)
        got = np.fromfile(out, "<f4").reshape(T, -1)
        med, _, _, _ = kl_stats(ref, got[:, :V])
        r.check(med > 1e-3, f"the same ids without the image: median KL {med:.3g} (> 1e-3)")
        # a single pad is widened to the image's rows; the count of pads must otherwise match
        vs = ids.index(2048)
        short = ids[:vs + 1] + [2050] + ids[ids.index(2049):]
        json.dump(short, open(p_ids, "w"))
        run("logits", "-m", text, "--ids", p_ids, "-o", out, *flags)
        got = np.fromfile(out, "<f4").reshape(T, -1)
        r.check(kl_stats(ref, got[:, :V])[0] <= 1e-5, "a single <|image_pad|> widened to 15 rows")
        json.dump(ids[:vs + 3] + ids[ids.index(2049):], open(p_ids, "w"))
        p = run("logits", "-m", text, "--ids", p_ids, "-o", out, *flags, check=False)
        r.check(p.returncode != 0 and "needs 15" in p.stderr, "2 pads for a 15-row image: refused")
        p = run("logits", "-m", text, "--ids", p_ids, "-o", out, "--image",
                os.path.join(D, "img0.png"), check=False)
        r.check(p.returncode != 0 and "--mmproj" in p.stderr, "--image without --mmproj: refused")
        p = run("run", "-m", text, "-p", "<|vision_start|><|image_pad|><|vision_end|>hi", "-n", 4,
                "--temp", 0, *flags, check=False)
        r.check(p.returncode == 0 and "5 x 3 tokens" in p.stderr, "snug run --image answers")
        # the CUDA text model takes images now (tests/device/run_vision_device.sh checks it on a
        # GPU): here, without one, the run gets as far as opening the backend (the tower on the
        # CPU by --vision-backend cpu; by default it would run on the GPU too)
        p = run("run", "-m", text, "-p", "hi", "-n", 2, "--backend", "cuda", "--vision-backend",
                "cpu", *flags, check=False)
        r.check("5 x 3 tokens" in p.stderr and "CPU only" not in p.stderr and
                (p.returncode == 0 or "--backend cuda" in p.stderr),
                "--backend cuda --vision-backend cpu with --mmproj: the image encoded, no CPU-only "
                "refusal")
        p = run("run", "-m", text, "-p", "hi", "-n", 2, "--backend", "cuda", *flags, check=False)
        r.check(p.returncode == 0 and "vision tower on the cuda backend" in p.stderr or
                p.returncode != 0 and "vision tower" in p.stderr and "--backend cuda" in p.stderr,
                "--backend cuda with --mmproj: the tower goes to the GPU too (or a clear error "
                f"naming it without one): {p.stderr.strip().splitlines()[-1][:200]}")


if __name__ == "__main__":
    main()
