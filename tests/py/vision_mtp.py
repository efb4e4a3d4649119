"""vision_mtp.py — the vision fixture's text model with an MTP block, for the tests of images
with speculative decoding (test_vision_spec.py).

The vision fixture (tests/data/vision/text-f16.gguf) was converted without an MTP block (its
transformers model has none). Speculation needs one; its weights only change how many drafts
are accepted, never what greedy decoding emits, so a made-up block serves the lossless checks:
`make(out)` writes the fixture's GGUF with block_count + 1, nextn_predict_layers = 1 and an MTP
block (docs/qwen35.md §3.2, llama.cpp's tensor names) whose attention and FFN are copies of the
trunk's last (attention) layer, norms from the trunk, and eh_proj = [s·R | I] (R seeded Gaussian):
the hidden state passes through, the next token's embedding (an image's row, when it is one)
is mixed in with weight s. Seeded and deterministic; written with gguf-py (PyPI `gguf`).
`make(out, embd_scale=0)` gives a block that ignores the embedding input (the ablation)."""
import os
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SRC  # noqa: E402

TEXT = os.path.join(SRC, "tests", "data", "vision", "text-f16.gguf")


def _field_value(f):
    return f.contents()


def make(out, embd_scale=1.0, hidden_scale=0.0, layer_scale=0.3, seed=23):
    r = GGUFReader(TEXT)
    arch = _field_value(r.fields["general.architecture"])
    n_layer = int(_field_value(r.fields[f"{arch}.block_count"]))
    H = int(_field_value(r.fields[f"{arch}.embedding_length"]))
    w = GGUFWriter(out, arch)
    skip = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture"}
    for k, f in r.fields.items():
        if k in skip:
            continue
        v = _field_value(f)
        if k == f"{arch}.block_count":
            v = n_layer + 1
        vt = f.types[0]
        if vt == GGUFValueType.ARRAY:
            w.add_key_value(k, v, vt, sub_type=f.types[1] if len(f.types) > 1 else None)
        else:
            w.add_key_value(k, v, vt)
    w.add_key_value(f"{arch}.nextn_predict_layers", 1, GGUFValueType.UINT32)
    src = {}
    for t in r.tensors:
        a = np.array(t.data).reshape([int(x) for x in reversed(t.shape)])
        src[t.name] = a
        w.add_tensor(t.name, a)
    last = f"blk.{n_layer - 1}."
    mtp = f"blk.{n_layer}."
    for name, a in src.items():
        if name.startswith(last):
            b = a.copy()
            if name.endswith(("attn_output.weight", "ffn_down.weight")):
                b = (layer_scale * b.astype(np.float32)).astype(a.dtype)
            w.add_tensor(mtp + name[len(last):], b)
    rng = np.random.default_rng(seed)
    eh = np.zeros((H, 2 * H), np.float32)  # n_out rows of n_in = [embedding | hidden]
    eh[:, :H] = embd_scale * np.eye(H, dtype=np.float32)
    eh[:, H:] = hidden_scale * np.eye(H, dtype=np.float32)
    eh += 0.02 * rng.standard_normal((H, 2 * H)).astype(np.float32)
    w.add_tensor(mtp + "nextn.eh_proj.weight", eh.astype(np.float16))
    ones = np.ones(H, np.float32)
    w.add_tensor(mtp + "nextn.enorm.weight", ones)
    w.add_tensor(mtp + "nextn.hnorm.weight", ones)
    w.add_tensor(mtp + "nextn.shared_head_norm.weight", src["output_norm.weight"].copy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


if __name__ == "__main__":
    make(sys.argv[1], *[float(x) for x in sys.argv[2:5]])
