#!/usr/bin/env python3
"""check_forward.py — does train.py's PyTorch forward compute what snug computes?

Loads a qwen35 GGUF of the demo shape (f32 or f16 tensors) into train.py's Model, runs the
trunk and MTP step 1 over a token sequence, and compares with reference logits: snug's
(`snug logits -m M.gguf --ids IDS.json -o OUT.f32 [--mtp]`) or any other float32 [T][V] file.
Prints the median / max per-position KL(reference || torch) and the top-1 agreement.

Usage: check_forward.py MODEL.gguf IDS.json REF_LOGITS.f32 [REF_MTP.f32]
"""
import json
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, __import__("os").path.dirname(__file__))
import train  # noqa: E402


def read_gguf(path):
    """(metadata dict, {name: float32 array shaped [ne[n-1]..ne[0]]}) for F32/F16 tensors."""
    buf = open(path, "rb").read()
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, buf, off)
        off += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal off
        n = take("Q")
        s = buf[off:off + n].decode("utf-8", "replace")
        off += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
              12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(scalar[t])

    assert buf[:4] == b"GGUF"
    off = 4
    take("I")
    n_t, n_kv = take("Q"), take("Q")
    meta = {}
    for _ in range(n_kv):
        k = string()
        meta[k] = value(take("I"))
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        infos.append((name, ne, take("I"), take("Q")))
    align = meta.get("general.alignment", 32)
    base = (off + align - 1) // align * align
    tensors = {}
    for name, ne, ty, o in infos:
        n = int(np.prod(ne))
        if ty == 0:
            a = np.frombuffer(buf, np.float32, n, base + o)
        elif ty == 1:
            a = np.frombuffer(buf, np.float16, n, base + o).astype(np.float32)
        else:
            raise SystemExit(f"{name}: tensor type {ty}; use an f32 or f16 file")
        tensors[name] = a.reshape(list(reversed(ne)))
    return meta, tensors


def load_model(path):
    _, t = read_gguf(path)
    model = train.Model(train.CFG, t["token_embd.weight"].shape[0])
    with torch.no_grad():
        for name, arr in model.gguf_tensors().items():
            if name not in t:
                raise SystemExit(f"{path}: tensor {name} is missing")
            if t[name].shape != arr.shape:
                raise SystemExit(f"{name}: shape {t[name].shape}, the model has {arr.shape}")
        _assign(model, t)
    return model


def _assign(model, t):
    def cp(param, name):
        param.copy_(torch.from_numpy(np.array(t[name])))

    cp(model.token_embd.weight, "token_embd.weight")
    cp(model.output_norm, "output_norm.weight")
    cp(model.output.weight, "output.weight")

    def attn(i, a):
        cp(a.attn_q.weight, f"blk.{i}.attn_q.weight")
        cp(a.attn_k.weight, f"blk.{i}.attn_k.weight")
        cp(a.attn_v.weight, f"blk.{i}.attn_v.weight")
        cp(a.attn_output.weight, f"blk.{i}.attn_output.weight")
        cp(a.attn_q_norm, f"blk.{i}.attn_q_norm.weight")
        cp(a.attn_k_norm, f"blk.{i}.attn_k_norm.weight")

    def ffn(i, f):
        cp(f.ffn_gate.weight, f"blk.{i}.ffn_gate.weight")
        cp(f.ffn_up.weight, f"blk.{i}.ffn_up.weight")
        cp(f.ffn_down.weight, f"blk.{i}.ffn_down.weight")

    for i, b in enumerate(model.blocks):
        cp(b.attn_norm, f"blk.{i}.attn_norm.weight")
        cp(b.post_attention_norm, f"blk.{i}.post_attention_norm.weight")
        m = b.mixer
        if isinstance(m, train.DeltaNet):
            cp(m.attn_qkv.weight, f"blk.{i}.attn_qkv.weight")
            cp(m.attn_gate.weight, f"blk.{i}.attn_gate.weight")
            cp(m.ssm_conv1d, f"blk.{i}.ssm_conv1d.weight")
            cp(m.ssm_dt, f"blk.{i}.ssm_dt.bias")
            m.A_log.copy_(torch.log(-torch.from_numpy(np.array(t[f"blk.{i}.ssm_a"]))))
            cp(m.ssm_beta.weight, f"blk.{i}.ssm_beta.weight")
            cp(m.ssm_alpha.weight, f"blk.{i}.ssm_alpha.weight")
            cp(m.ssm_norm, f"blk.{i}.ssm_norm.weight")
            cp(m.ssm_out.weight, f"blk.{i}.ssm_out.weight")
        else:
            attn(i, m)
        ffn(i, b.ffn)
    i = len(model.blocks)
    m = model.mtp
    cp(m.attn_norm, f"blk.{i}.attn_norm.weight")
    cp(m.post_attention_norm, f"blk.{i}.post_attention_norm.weight")
    attn(i, m.attn)
    ffn(i, m.ffn)
    cp(m.eh_proj.weight, f"blk.{i}.nextn.eh_proj.weight")
    cp(m.enorm, f"blk.{i}.nextn.enorm.weight")
    cp(m.hnorm, f"blk.{i}.nextn.hnorm.weight")
    cp(m.shared_head_norm, f"blk.{i}.nextn.shared_head_norm.weight")


def compare(label, ref, got):
    lr = torch.log_softmax(torch.from_numpy(ref).double(), -1)
    lg = torch.log_softmax(torch.from_numpy(got).double(), -1)
    kl = (lr.exp() * (lr - lg)).sum(-1).numpy()
    top = (ref.argmax(-1) == got.argmax(-1)).mean()
    print(f"{label}: {ref.shape[0]} positions, KL(ref||torch) median {np.median(kl):.3g} "
          f"max {kl.max():.3g}, top-1 agreement {top * 100:.1f}%")
    return float(np.median(kl)), float(top)


def main():
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    model = load_model(sys.argv[1]).eval()
    ids = torch.tensor([json.load(open(sys.argv[2]))])
    with torch.no_grad():
        lg, lg1 = model(ids, mtp_steps=1)
    V = lg.shape[-1]
    ref = np.fromfile(sys.argv[3], dtype="<f4").reshape(-1, V)
    ok = compare("trunk", ref, lg[0].numpy())[0] < 1e-4
    if len(sys.argv) > 4:
        refm = np.fromfile(sys.argv[4], dtype="<f4").reshape(-1, V)
        ok &= compare("mtp step 1", refm, lg1[0, :refm.shape[0]].numpy())[0] < 1e-4
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
