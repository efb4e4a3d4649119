#!/usr/bin/env python3
"""make_mmproj_corpus.py — seeds for tests/fuzz/fuzz_vision_mmproj.c: tiny Qwen3.5/3.6 vision
towers ("mmproj" GGUF files, the tensor names, shapes and keys llama.cpp's converter writes for
the qwen3vl_merger projector, as src/vision/vision.c checks them) with f32 or f16 matrices,
one or two blocks, widths 8/16, patch 2, merge 2, and a few near-misses (a missing tensor, a
wrong shape, another projector). Written by hand from the GGUF v3 layout (ggml's docs/gguf.md).
Run: python3 tests/fuzz/make_mmproj_corpus.py (rewrites tests/fuzz/corpus-vision-mmproj/)."""
import os
import random
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus-vision-mmproj")
U32, F32K, BOOL, STR, ARR = 4, 6, 7, 8, 9
F32, F16 = 0, 1


def gstr(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, payload):
    return gstr(key) + struct.pack("<I", typ) + payload


def tower(D=8, H=2, F=16, L=1, O=8, P=2, M=2, side=2, mat=F16, drop=None, bad=None,
          proj="qwen3vl_merger"):
    rng = random.Random(D * 1000 + L * 10 + mat)
    kvs = [kv("general.architecture", STR, gstr("clip")),
           kv("clip.projector_type", STR, gstr(proj)),
           kv("clip.vision.patch_size", U32, struct.pack("<I", P)),
           kv("clip.vision.spatial_merge_size", U32, struct.pack("<I", M)),
           kv("clip.vision.embedding_length", U32, struct.pack("<I", D)),
           kv("clip.vision.attention.head_count", U32, struct.pack("<I", H)),
           kv("clip.vision.feed_forward_length", U32, struct.pack("<I", F)),
           kv("clip.vision.block_count", U32, struct.pack("<I", L)),
           kv("clip.vision.projection_dim", U32, struct.pack("<I", O)),
           kv("clip.vision.attention.layer_norm_epsilon", F32K, struct.pack("<f", 1e-6)),
           kv("clip.vision.image_mean", ARR, struct.pack("<IQ", F32K, 3) + struct.pack("<3f", .5, .5, .5)),
           kv("clip.vision.image_std", ARR, struct.pack("<IQ", F32K, 3) + struct.pack("<3f", .5, .5, .5))]
    M4 = M * M * D
    ts = [("v.patch_embd.weight", [P, P, 3, D], mat), ("v.patch_embd.weight.1", [P, P, 3, D], mat),
          ("v.patch_embd.bias", [D], F32), ("v.position_embd.weight", [D, side * side], F32)]
    for i in range(L):
        b = f"v.blk.{i}."
        ts += [(b + "ln1.weight", [D], F32), (b + "ln1.bias", [D], F32),
               (b + "attn_qkv.weight", [D, 3 * D], mat), (b + "attn_qkv.bias", [3 * D], F32),
               (b + "attn_out.weight", [D, D], mat), (b + "attn_out.bias", [D], F32),
               (b + "ln2.weight", [D], F32), (b + "ln2.bias", [D], F32),
               (b + "ffn_up.weight", [D, F], mat), (b + "ffn_up.bias", [F], F32),
               (b + "ffn_down.weight", [F, D], mat), (b + "ffn_down.bias", [D], F32)]
    ts += [("v.post_ln.weight", [D], F32), ("v.post_ln.bias", [D], F32),
           ("mm.0.weight", [M4, M4], mat), ("mm.0.bias", [M4], F32),
           ("mm.2.weight", [M4, O], mat), ("mm.2.bias", [O], F32)]
    ts = [t for t in ts if t[0] != drop]
    if bad:
        ts = [(n, [s[0] + 1] + s[1:] if n == bad else s, ty) for n, s, ty in ts]
    infos, blob = b"", b""
    for name, shape, ty in ts:
        n = 1
        for x in shape:
            n *= x
        off = len(blob)
        infos += gstr(name) + struct.pack("<I", len(shape)) + b"".join(
            struct.pack("<Q", x) for x in shape) + struct.pack("<IQ", ty, off)
        vals = [rng.uniform(-0.5, 0.5) for _ in range(n)]
        if name.endswith("ln1.weight") or name.endswith("ln2.weight") or "post_ln.weight" in name:
            vals = [1.0] * n
        blob += struct.pack(f"<{n}e" if ty == F16 else f"<{n}f", *vals)
        blob += b"\0" * ((32 - len(blob) % 32) % 32)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * ((32 - len(head) % 32) % 32)
    return head + blob


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    seeds = {
        "tiny-f16": tower(),
        "tiny-f32": tower(mat=F32),
        "two-blocks": tower(D=16, H=4, F=32, L=2, O=16, side=3),
        "missing-tensor": tower(drop="v.blk.0.ffn_up.bias"),
        "wrong-shape": tower(bad="mm.0.weight"),
        "other-projector": tower(proj="mlp"),
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"make_mmproj_corpus: {len(seeds)} seeds in {OUT}")


if __name__ == "__main__":
    main()
