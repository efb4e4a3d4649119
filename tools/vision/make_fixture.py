#!/usr/bin/env python3
"""make_fixture.py — the tiny Qwen3.5 vision-language fixture: a random-weight
`Qwen3_5ForConditionalGeneration` built with Hugging Face transformers (small sizes, the real
patch / merge / rotary layout), its float32 reference outputs, and the files llama.cpp's converter
needs to turn it into a text GGUF + an "mmproj" GGUF exactly as community files are made.

Not part of the build or the tests: run by hand (CPU is enough, ~1 minute), then convert with
llama.cpp's own converter from its source tree (not part of this project; see
docs/vision.md "Fixture"):

    python3 tools/vision/make_fixture.py OUT_DIR --tokenizer DIR_WITH_tokenizer.json
    python3 LLAMA_CPP/convert_hf_to_gguf.py OUT_DIR/hf --outtype f16 --outfile OUT_DIR/text-f16.gguf
    python3 LLAMA_CPP/convert_hf_to_gguf.py OUT_DIR/hf --mmproj --outtype f16 \
        --outfile OUT_DIR/mmproj-f16.gguf

Outputs under OUT_DIR (all float32 little-endian, row-major):
- hf/: config.json, model.safetensors (every weight rounded to f16, so an f16 GGUF is lossless),
  tokenizer.json/tokenizer_config.json (the given BPE plus the three vision tokens),
  preprocessor_config.json;
- img{0,1,2}.png: three images of different aspect ratios (made here, seeded);
- img{i}_pixels.f32 + meta: the processor's flattened patches [n_patches][3·2·16·16] and grid
  (transformers' PIL image processor; preprocess() below restates it and must agree exactly);
- img{i}_features.f32: the vision tower's output after the projector [n_tokens][text hidden];
- resize.json: smart-resize results for 10 image sizes (tiny, huge, extreme aspect ratios);
- prompt_ids.json, prompt_pos.json, prompt_logits.f32: a prompt with image 0 between text,
  the multimodal rotary positions (3 rows: t, h, w) and the logits of one forward [T][V];
- prompt_greedy.json: the 16 tokens greedy decoding appends to that prompt (each step a full
  forward over the prompt and the tokens so far, so the rotary rows come from get_rope_index).
"""
import argparse
import json
import os

import numpy as np
import torch
from PIL import Image
from qwen_preprocess import (MAX_PIXELS, MEAN, MERGE, MIN_PIXELS, PATCH, STD, TPATCH, preprocess,
                             smart_resize)
from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_smart_resize

SEED = 20261201
PROCESSOR = Qwen2VLImageProcessorPil(patch_size=PATCH, temporal_patch_size=TPATCH, merge_size=MERGE,
                                     image_mean=MEAN, image_std=STD,
                                     size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS})


def text_config(vocab):
    """The shape of the trained text fixture (qwen35: 3 Gated DeltaNet + 1 attention layer)."""
    return {
        "model_type": "qwen3_5_text", "vocab_size": vocab, "hidden_size": 128,
        "intermediate_size": 256, "num_hidden_layers": 4, "full_attention_interval": 4,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 32, "linear_num_key_heads": 2,
        "linear_num_value_heads": 6, "linear_value_head_dim": 32,
        "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                            "mrope_interleaved": True, "mrope_section": [3, 3, 2]},
        "partial_rotary_factor": 0.25, "hidden_act": "silu", "attention_bias": False,
        "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 0,
    }


def vision_config(out_hidden):
    return {
        "model_type": "qwen3_5_vision", "depth": 2, "hidden_size": 64, "intermediate_size": 128,
        "num_heads": 4, "in_channels": 3, "patch_size": PATCH, "temporal_patch_size": TPATCH,
        "spatial_merge_size": MERGE, "out_hidden_size": out_hidden, "num_position_embeddings": 64,
        "hidden_act": "gelu_pytorch_tanh", "rope_parameters": {"rope_type": "axial", "rope_theta": 10000.0},
    }


def make_tokenizer(src, dst):
    """The fixture BPE plus the vision tokens as special added tokens (ids after the BPE's)."""
    tok = json.load(open(os.path.join(src, "tokenizer.json")))
    n = max(t["id"] for t in tok["added_tokens"])
    n = max(n, max(tok["model"]["vocab"].values())) + 1
    ids = {}
    for name in ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>"]:
        tok["added_tokens"].append({"id": n, "content": name, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
        ids[name] = n
        n += 1
    json.dump(tok, open(os.path.join(dst, "tokenizer.json"), "w"), ensure_ascii=False)
    cfg = json.load(open(os.path.join(src, "tokenizer_config.json")))
    json.dump(cfg, open(os.path.join(dst, "tokenizer_config.json"), "w"))
    return ids, n


def make_image(rng, h, w):
    y, x = np.mgrid[0:h, 0:w]
    r = (np.sin(x / 7.0) * 0.5 + 0.5) * 255
    g = (y / max(h - 1, 1)) * 255
    b = rng.integers(0, 256, size=(h, w))
    return Image.fromarray(np.stack([r, g, b], -1).astype(np.uint8), "RGB")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tokenizer", required=True, help="folder with tokenizer.json / tokenizer_config.json")
    a = ap.parse_args()
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    hf = os.path.join(a.out, "hf")
    os.makedirs(hf, exist_ok=True)
    ids, n_tok = make_tokenizer(a.tokenizer, hf)
    vocab = (n_tok + 15) // 16 * 16
    tc = text_config(vocab)
    cfg = Qwen3_5Config(text_config=tc, vision_config=vision_config(tc["hidden_size"]),
                        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|image_pad|>"],
                        vision_start_token_id=ids["<|vision_start|>"],
                        vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=False)
    cfg.architectures = ["Qwen3_5ForConditionalGeneration"]
    model = Qwen3_5ForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():  # spread the weights, then round to f16 (lossless GGUF)
            p.copy_((torch.randn_like(p) * 0.08).half().float())
        for name, p in model.named_parameters():
            if "norm" not in name or p.dim() != 1 or name.endswith(".bias"):
                continue
            # scales near 1: the trunk's RMSNorm stores an offset (x·(1 + w)), the DeltaNet gated
            # norm and the vision LayerNorms the scale itself
            direct = "linear_attn.norm" in name or "visual" in name
            p.copy_(((1.0 if direct else 0.0) + torch.randn_like(p) * 0.05).half().float())
    model.save_pretrained(hf, safe_serialization=True)
    json.dump({"image_processor_type": "Qwen2VLImageProcessor", "patch_size": PATCH,
               "temporal_patch_size": TPATCH, "merge_size": MERGE, "image_mean": MEAN,
               "image_std": STD, "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS,
               "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
               "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
               "resample": 3}, open(os.path.join(hf, "preprocessor_config.json"), "w"), indent=1)

    sizes = [(4, 4), (2, 300), (300, 2), (31, 33), (224, 224), (480, 640), (1080, 1920),
             (4000, 3000), (20, 3000), (3000, 20)]
    rs = []
    for h, w in sizes:
        ref = list(hf_smart_resize(h, w, factor=PATCH * MERGE, min_pixels=MIN_PIXELS,
                                   max_pixels=MAX_PIXELS))
        assert ref == list(smart_resize(h, w, MIN_PIXELS, MAX_PIXELS)), (h, w, ref)
        rs.append({"h": h, "w": w, "resized": ref})
    json.dump({"factor": PATCH * MERGE, "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS,
               "sizes": rs}, open(os.path.join(a.out, "resize.json"), "w"), indent=1)

    meta = {"images": [], "vocab": vocab, "ids": ids}
    feats = []
    for i, (h, w) in enumerate([(96, 160), (200, 64), (150, 150)]):
        img = make_image(rng, h, w)
        img.save(os.path.join(a.out, f"img{i}.png"))
        px, grid, hw = preprocess(img, MIN_PIXELS, MAX_PIXELS)
        ref = PROCESSOR(images=[img], return_tensors="np")  # transformers' own (PIL) processor
        assert list(ref["image_grid_thw"][0]) == list(grid), (ref["image_grid_thw"], grid)
        assert np.array_equal(ref["pixel_values"], px), "preprocess() differs from transformers"
        px = ref["pixel_values"].astype(np.float32)
        px.tofile(os.path.join(a.out, f"img{i}_pixels.f32"))
        with torch.no_grad():
            out = model.model.visual(torch.from_numpy(px), grid_thw=torch.tensor([grid]))
        f = out.pooler_output.float().numpy()
        f.tofile(os.path.join(a.out, f"img{i}_features.f32"))
        feats.append(f)
        meta["images"].append({"file": f"img{i}.png", "size": [h, w], "resized": list(hw),
                               "grid_thw": list(grid), "n_patches": int(px.shape[0]),
                               "n_tokens": int(f.shape[0])})

    # a prompt with image 0 between text: "<|im_start|>user\n" ... vision ... "what is it?"
    n_img = meta["images"][0]["n_tokens"]
    pre, post = [1, 200, 300, 400, 10], [500, 600, 700, 2, 1, 800]
    prompt = pre + [ids["<|vision_start|>"]] + [ids["<|image_pad|>"]] * n_img + \
        [ids["<|vision_end|>"]] + post
    input_ids = torch.tensor([prompt])
    mm = (input_ids == ids["<|image_pad|>"]).int()
    grid = torch.tensor([meta["images"][0]["grid_thw"]])
    px0 = torch.from_numpy(np.fromfile(os.path.join(a.out, "img0_pixels.f32"), np.float32)
                           .reshape(meta["images"][0]["n_patches"], -1))
    with torch.no_grad():
        pos, _ = model.model.get_rope_index(input_ids, mm, image_grid_thw=grid)
        logits = model(input_ids=input_ids, pixel_values=px0, image_grid_thw=grid,
                       mm_token_type_ids=mm).logits[0].float().numpy()
    json.dump(prompt, open(os.path.join(a.out, "prompt_ids.json"), "w"))
    json.dump(pos[:, 0].tolist(), open(os.path.join(a.out, "prompt_pos.json"), "w"))
    logits.tofile(os.path.join(a.out, "prompt_logits.f32"))
    cur, greedy = list(prompt), []
    with torch.no_grad():
        for _ in range(16):
            x = torch.tensor([cur])
            lg = model(input_ids=x, pixel_values=px0, image_grid_thw=grid,
                       mm_token_type_ids=(x == ids["<|image_pad|>"]).int()).logits[0, -1]
            greedy.append(int(lg.argmax()))
            cur.append(greedy[-1])
    json.dump(greedy, open(os.path.join(a.out, "prompt_greedy.json"), "w"))
    meta["prompt"] = {"T": len(prompt), "V": int(logits.shape[1])}
    json.dump(meta, open(os.path.join(a.out, "meta.json"), "w"), indent=1)
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
