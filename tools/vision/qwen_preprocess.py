"""qwen_preprocess.py — the Qwen2-VL / Qwen3.5 image preprocessing restated in numpy + Pillow
(the size rule and the patch layout of transformers' Qwen2VLImageProcessorPil), used by
make_fixture.py (which checks it equals transformers' processor exactly) and by
tests/py/test_vision_fixture.py (which checks snug's C preprocessing equals it)."""
import math

import numpy as np
from PIL import Image

PATCH, TPATCH, MERGE = 16, 2, 2
MIN_PIXELS, MAX_PIXELS = 8 * 32 * 32, 128 * 32 * 32  # the fixture's bounds (small images)
MEAN = STD = [0.5, 0.5, 0.5]


def smart_resize(h, w, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, factor=PATCH * MERGE):
    """As Qwen2-VL's image processor (transformers qwen2_vl/image_processing_qwen2_vl.py)."""
    hb, wb = round(h / factor) * factor, round(w / factor) * factor
    if hb * wb > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        hb = max(factor, math.floor(h / beta / factor) * factor)
        wb = max(factor, math.floor(w / beta / factor) * factor)
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    return hb, wb


def preprocess(img, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS):
    """Resize (PIL bicubic), rescale, normalise, and flatten into Qwen2-VL's patch order:
    [grid_t·grid_h·grid_w patches][C·TPATCH·PATCH·PATCH], merge-window major."""
    w0, h0 = img.size
    h, w = smart_resize(h0, w0, min_pixels, max_pixels)
    a = np.asarray(img.resize((w, h), Image.BICUBIC), dtype=np.float32) / 255.0
    a = (a - np.array(MEAN, np.float32)) / np.array(STD, np.float32)
    a = a.transpose(2, 0, 1)[None].repeat(TPATCH, 0)  # [T=2][C][H][W] (one image = 2 frames)
    gt, gh, gw = 1, h // PATCH, w // PATCH
    p = a.reshape(gt, TPATCH, 3, gh // MERGE, MERGE, PATCH, gw // MERGE, MERGE, PATCH)
    p = p.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return p.reshape(gt * gh * gw, 3 * TPATCH * PATCH * PATCH).astype(np.float32), (gt, gh, gw), (h, w)


