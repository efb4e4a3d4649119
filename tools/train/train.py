#!/usr/bin/env python3
"""train.py — train the demo model: a small qwen35 (Gated DeltaNet + gated attention) with an
MTP block, in PyTorch, computing what snug computes (src/arch/qwen35.c, qwen35_mtp.c, the ops
of src/backend/cpu/ops.h), with tensors named and laid out as GGUF tensors so that
`snug gen --from-weights DIR` writes the model file with snug's own GGUF writer.

Layout facts (docs/qwen35.md, src/backend/cpu/ops.h): a GGUF weight with ne = {n_in, n_out} is
n_out rows of n_in floats, which is torch.nn.Linear's [out, in]; RMSNorm multiplies by the
stored weight (no "+1"); the query projection gives [Hq][2D] per token, the first D of a head
the query and the next D its output gate; partial NeoX RoPE on the first n_rot dims of a head;
query head h reads kv head h // (Hq / Hkv); the DeltaNet mixer splits its conv output as
[Q | K | V], value head j reads key head j % Nk, β = σ(b), g = ssm_a · softplus(α + dt_bias)
with ssm_a < 0, and per token S ← e^g S, δ = β (v − Sᵀk), S ← S + k δᵀ, o = Sᵀ q (q, k
L2-normalised with eps 1e-6, q scaled by 1/sqrt(dk)); gated RMSNorm rmsnorm(o)·w·silu(z) per value
head. MTP step 1 at position p: c = eh_proj·[rmsnorm(E[x_{p+1}]; enorm), rmsnorm(h_p; hnorm)]
with h_p the trunk's post-final-norm hidden state, one gated-attention layer with its own cache
at RoPE position p, then the SwiGLU FFN, h' = rmsnorm(·; shared_head_norm), logits =
output·h' (predicts x_{p+2}). Drafts 2..k chain from h' at position p+1 (src/speculative/), so
step 2 is trained too: its query at position p+1 attends over step 1's keys at positions ≤ p and
its own key, as snug's MTP cache holds them when it drafts.

Usage: train.py --data DIR --out DIR [--steps N | --time-budget S] [--seed 1]
Writes OUT/weights/<tensor name>.f32 (raw little-endian float32), OUT/train_log.txt (the loss
curve), OUT/check_ids.json + OUT/check_logits.f32 + OUT/check_mtp.f32 (the forward of the
trained weights on a fixed sequence, for comparison with `snug logits`).
"""
import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = dict(H=256, n_layer=4, n_ff=512, Hq=4, Hkv=2, D=64, n_rot=16, dk=64, Nk=2, Nv=6, K=4,
           eps=1e-6, rope_base=1e7, full_attn_interval=4)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, n_rot, base):
    """NeoX rotary on the first n_rot dims of each head. x: [B, T, h, D]; pos: [T] (float)."""
    half = n_rot // 2
    inv = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) * 2.0 / n_rot)
    ang = pos[:, None].float() * inv[None, :]  # [T, half]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x1, x2, rest = x[..., :half], x[..., half:n_rot], x[..., n_rot:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], -1)


def chunk_delta_rule(q, k, v, g, beta, C=64):
    """The gated delta rule over [B, N, T, d] (q, k, v), g, beta: [B, N, T], zero initial
    state, in the chunked WY form (docs/qwen35.md §2.6). Returns o: [B, N, T, dv]."""
    B, N, T, dk = k.shape
    dv = v.shape[-1]
    pad = (C - T % C) % C
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    n = (T + pad) // C
    q, k, v = (t.reshape(B, N, n, C, -1) for t in (q, k, v))
    g, beta = g.reshape(B, N, n, C), beta.reshape(B, N, n, C)
    G = g.cumsum(-1)  # within-chunk cumulative log decay
    tri = torch.ones(C, C, dtype=torch.bool, device=q.device)
    strict = torch.tril(tri, -1)
    incl = torch.tril(tri)
    diff = G[..., :, None] - G[..., None, :]  # G_i - G_j
    dec_strict = torch.exp(diff.masked_fill(~strict, -math.inf))
    dec_incl = torch.exp(diff.masked_fill(~incl, -math.inf))
    kk = k @ k.transpose(-1, -2)  # k_i . k_j
    A = beta[..., :, None] * dec_strict * kk
    I = torch.eye(C, device=q.device).expand_as(A)
    L = I + A
    Wv = torch.linalg.solve_triangular(L, beta[..., None] * v, upper=False, unitriangular=True)
    Wk = torch.linalg.solve_triangular(L, (beta * G.exp())[..., None] * k, upper=False,
                                       unitriangular=True)
    qk = (q @ k.transpose(-1, -2)) * dec_incl  # [.., i, j] = e^{G_i-G_j} k_j . q_i, j <= i
    S = torch.zeros(B, N, dk, dv, device=q.device, dtype=q.dtype)
    outs = []
    for c in range(n):
        delta = Wv[:, :, c] - Wk[:, :, c] @ S  # [B, N, C, dv]
        o = (q[:, :, c] * G[:, :, c, :, None].exp()) @ S + qk[:, :, c] @ delta
        outs.append(o)
        Gc = G[:, :, c, -1]
        kd = k[:, :, c] * (Gc[..., None] - G[:, :, c]).exp()[..., None]
        S = S * Gc.exp()[..., None, None] + kd.transpose(-1, -2) @ delta
    o = torch.stack(outs, 2).reshape(B, N, n * C, dv)
    return o[:, :, :T]


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, Hq, Hkv, D = c["H"], c["Hq"], c["Hkv"], c["D"]
        self.c = c
        self.attn_q = nn.Linear(H, 2 * Hq * D, bias=False)
        self.attn_k = nn.Linear(H, Hkv * D, bias=False)
        self.attn_v = nn.Linear(H, Hkv * D, bias=False)
        self.attn_output = nn.Linear(Hq * D, H, bias=False)
        self.attn_q_norm = nn.Parameter(torch.ones(D))
        self.attn_k_norm = nn.Parameter(torch.ones(D))

    def qkv(self, x, pos):
        c = self.c
        B, T, _ = x.shape
        qg = self.attn_q(x).view(B, T, c["Hq"], 2 * c["D"])
        q, gate = qg[..., :c["D"]], qg[..., c["D"]:]
        k = self.attn_k(x).view(B, T, c["Hkv"], c["D"])
        v = self.attn_v(x).view(B, T, c["Hkv"], c["D"])
        q = rope(rmsnorm(q, self.attn_q_norm, c["eps"]), pos, c["n_rot"], c["rope_base"])
        k = rope(rmsnorm(k, self.attn_k_norm, c["eps"]), pos, c["n_rot"], c["rope_base"])
        rep = c["Hq"] // c["Hkv"]
        k = k.repeat_interleave(rep, 2)  # query head h reads kv head h // rep
        v = v.repeat_interleave(rep, 2)
        return q, k, v, gate

    def finish(self, att, gate):
        B, T = att.shape[:2]
        return self.attn_output((att * torch.sigmoid(gate)).reshape(B, T, -1))

    def forward(self, x, pos):
        q, k, v, gate = self.qkv(x, pos)
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), is_causal=True)
        return self.finish(att.transpose(1, 2), gate)


class DeltaNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, Nk, Nv, dk, K = c["H"], c["Nk"], c["Nv"], c["dk"], c["K"]
        self.c = c
        cd = 2 * Nk * dk + Nv * dk
        self.attn_qkv = nn.Linear(H, cd, bias=False)
        self.attn_gate = nn.Linear(H, Nv * dk, bias=False)
        self.ssm_conv1d = nn.Parameter(torch.randn(cd, K) * 0.1)
        self.ssm_dt = nn.Parameter(torch.zeros(Nv))  # ssm_dt.bias
        self.A_log = nn.Parameter(torch.log(torch.linspace(1.0, 16.0, Nv)))  # ssm_a = -exp
        self.ssm_beta = nn.Linear(H, Nv, bias=False)
        self.ssm_alpha = nn.Linear(H, Nv, bias=False)
        self.ssm_norm = nn.Parameter(torch.ones(dk))
        self.ssm_out = nn.Linear(Nv * dk, H, bias=False)

    def forward(self, x, pos):
        c = self.c
        B, T, _ = x.shape
        Nk, Nv, dk, K = c["Nk"], c["Nv"], c["dk"], c["K"]
        mix = self.attn_qkv(x).transpose(1, 2)  # [B, cd, T]
        u = F.conv1d(F.pad(mix, (K - 1, 0)), self.ssm_conv1d[:, None, :],
                     groups=mix.shape[1])
        u = F.silu(u).transpose(1, 2)  # [B, T, cd]
        q = u[..., :Nk * dk].view(B, T, Nk, dk)
        k = u[..., Nk * dk:2 * Nk * dk].view(B, T, Nk, dk)
        v = u[..., 2 * Nk * dk:].view(B, T, Nv, dk)
        q = q / torch.sqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) / math.sqrt(dk)
        k = k / torch.sqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        idx = torch.arange(Nv, device=x.device) % Nk  # value head j reads key head j % Nk
        q, k = q[:, :, idx], k[:, :, idx]
        beta = torch.sigmoid(self.ssm_beta(x))
        g = -self.A_log.exp() * F.softplus(self.ssm_alpha(x) + self.ssm_dt)
        o = chunk_delta_rule(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                             g.transpose(1, 2), beta.transpose(1, 2)).transpose(1, 2)
        z = self.attn_gate(x).view(B, T, Nv, dk)
        on = rmsnorm(o, self.ssm_norm, c["eps"]) * F.silu(z)
        return self.ssm_out(on.reshape(B, T, -1))


class FFN(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ffn_gate = nn.Linear(c["H"], c["n_ff"], bias=False)
        self.ffn_up = nn.Linear(c["H"], c["n_ff"], bias=False)
        self.ffn_down = nn.Linear(c["n_ff"], c["H"], bias=False)

    def forward(self, x):
        return self.ffn_down(F.silu(self.ffn_gate(x)) * self.ffn_up(x))


class Block(nn.Module):
    def __init__(self, c, recurrent):
        super().__init__()
        self.attn_norm = nn.Parameter(torch.ones(c["H"]))
        self.post_attention_norm = nn.Parameter(torch.ones(c["H"]))
        self.mixer = DeltaNet(c) if recurrent else Attention(c)
        self.ffn = FFN(c)
        self.eps = c["eps"]

    def forward(self, x, pos):
        x = x + self.mixer(rmsnorm(x, self.attn_norm, self.eps), pos)
        return x + self.ffn(rmsnorm(x, self.post_attention_norm, self.eps))


class MTP(nn.Module):
    def __init__(self, c):
        super().__init__()
        H = c["H"]
        self.eps = c["eps"]
        self.attn_norm = nn.Parameter(torch.ones(H))
        self.post_attention_norm = nn.Parameter(torch.ones(H))
        self.attn = Attention(c)
        self.ffn = FFN(c)
        self.eh_proj = nn.Linear(2 * H, H, bias=False)
        self.enorm = nn.Parameter(torch.ones(H))
        self.hnorm = nn.Parameter(torch.ones(H))
        self.shared_head_norm = nn.Parameter(torch.ones(H))

    def inp(self, emb, h):
        return self.eh_proj(torch.cat([rmsnorm(emb, self.enorm, self.eps),
                                       rmsnorm(h, self.hnorm, self.eps)], -1))

    def finish(self, x, a):
        x = x + a
        x = x + self.ffn(rmsnorm(x, self.post_attention_norm, self.eps))
        return rmsnorm(x, self.shared_head_norm, self.eps)

    def step1(self, emb_next, h, pos):
        """Row p: hidden h_p, embedding of x_{p+1}, position p. Returns (h', k, v)."""
        x = self.inp(emb_next, h)
        q, k, v, gate = self.attn.qkv(rmsnorm(x, self.attn_norm, self.eps), pos)
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), is_causal=True).transpose(1, 2)
        return self.finish(x, self.attn.finish(att, gate)), k, v

    def step2(self, emb_next2, h1, pos, k1, v1):
        """Row p: step 1's h'_p, embedding of x_{p+2}, position p+1; attends over step 1's keys
        at positions <= p and its own key (what the MTP cache holds when draft 2 runs)."""
        x = self.inp(emb_next2, h1)
        q, k, v, gate = self.attn.qkv(rmsnorm(x, self.attn_norm, self.eps), pos + 1)
        D = q.shape[-1]
        qh, k1h, v1h = q.transpose(1, 2), k1.transpose(1, 2), v1.transpose(1, 2)
        s_hist = (qh @ k1h.transpose(-1, -2)) / math.sqrt(D)  # [B, h, T, T]: key j <= p
        T = q.shape[1]
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=q.device))
        s_hist = s_hist.masked_fill(~causal, -math.inf)
        s_self = (q * k).sum(-1).transpose(1, 2)[..., None] / math.sqrt(D)  # [B, h, T, 1]
        p = torch.softmax(torch.cat([s_hist, s_self], -1), -1)
        att = p[..., :T] @ v1h + p[..., T:] * v.transpose(1, 2)
        return self.finish(x, self.attn.finish(att.transpose(1, 2), gate))


class Model(nn.Module):
    def __init__(self, c, V):
        super().__init__()
        self.c = c
        self.token_embd = nn.Embedding(V, c["H"])
        self.blocks = nn.ModuleList(
            Block(c, (i + 1) % c["full_attn_interval"] != 0) for i in range(c["n_layer"]))
        self.output_norm = nn.Parameter(torch.ones(c["H"]))
        self.output = nn.Linear(c["H"], V, bias=False)
        self.mtp = MTP(c)
        for n_, p in self.named_parameters():
            if p.dim() == 2 and "conv1d" not in n_:
                nn.init.normal_(p, std=0.02)
        for b in self.blocks:  # scaled residual projections
            out = b.mixer.attn_output if hasattr(b.mixer, "attn_output") else b.mixer.ssm_out
            nn.init.normal_(out.weight, std=0.02 / math.sqrt(2 * c["n_layer"]))
            nn.init.normal_(b.ffn.ffn_down.weight, std=0.02 / math.sqrt(2 * c["n_layer"]))

    def trunk(self, ids):
        T = ids.shape[1]
        pos = torch.arange(T, device=ids.device)
        x = self.token_embd(ids)
        for b in self.blocks:
            x = b(x, pos)
        return rmsnorm(x, self.output_norm, self.c["eps"])

    def forward(self, ids, mtp_steps=2):
        """Logits of the trunk [B, T, V], of MTP step 1 [B, T-1, V] (row p predicts x_{p+2})
        and step 2 [B, T-2, V] (row p predicts x_{p+3})."""
        h = self.trunk(ids)
        out = [self.output(h)]
        T = ids.shape[1]
        pos = torch.arange(T - 1, device=ids.device)
        emb = self.token_embd(ids)
        h1, k1, v1 = self.mtp.step1(emb[:, 1:], h[:, :-1], pos)
        out.append(self.output(h1))
        if mtp_steps >= 2:
            h2 = self.mtp.step2(emb[:, 2:], h1[:, :-1], pos[:-1], k1[:, :-1], v1[:, :-1])
            out.append(self.output(h2))
        return out

    def gguf_tensors(self):
        """(GGUF name, float32 numpy array in GGUF row-major layout) for every tensor."""
        c = self.c
        t = {"token_embd.weight": self.token_embd.weight, "output_norm.weight": self.output_norm,
             "output.weight": self.output.weight}

        def attn(i, a):
            t[f"blk.{i}.attn_q.weight"] = a.attn_q.weight
            t[f"blk.{i}.attn_k.weight"] = a.attn_k.weight
            t[f"blk.{i}.attn_v.weight"] = a.attn_v.weight
            t[f"blk.{i}.attn_output.weight"] = a.attn_output.weight
            t[f"blk.{i}.attn_q_norm.weight"] = a.attn_q_norm
            t[f"blk.{i}.attn_k_norm.weight"] = a.attn_k_norm

        def ffn(i, f):
            t[f"blk.{i}.ffn_gate.weight"] = f.ffn_gate.weight
            t[f"blk.{i}.ffn_up.weight"] = f.ffn_up.weight
            t[f"blk.{i}.ffn_down.weight"] = f.ffn_down.weight

        for i, b in enumerate(self.blocks):
            t[f"blk.{i}.attn_norm.weight"] = b.attn_norm
            t[f"blk.{i}.post_attention_norm.weight"] = b.post_attention_norm
            m = b.mixer
            if isinstance(m, DeltaNet):
                t[f"blk.{i}.attn_qkv.weight"] = m.attn_qkv.weight
                t[f"blk.{i}.attn_gate.weight"] = m.attn_gate.weight
                t[f"blk.{i}.ssm_conv1d.weight"] = m.ssm_conv1d
                t[f"blk.{i}.ssm_dt.bias"] = m.ssm_dt
                t[f"blk.{i}.ssm_a"] = -m.A_log.exp()
                t[f"blk.{i}.ssm_beta.weight"] = m.ssm_beta.weight
                t[f"blk.{i}.ssm_alpha.weight"] = m.ssm_alpha.weight
                t[f"blk.{i}.ssm_norm.weight"] = m.ssm_norm
                t[f"blk.{i}.ssm_out.weight"] = m.ssm_out.weight
            else:
                attn(i, m)
            ffn(i, b.ffn)
        i = c["n_layer"]
        m = self.mtp
        t[f"blk.{i}.attn_norm.weight"] = m.attn_norm
        t[f"blk.{i}.post_attention_norm.weight"] = m.post_attention_norm
        attn(i, m.attn)
        ffn(i, m.ffn)
        t[f"blk.{i}.nextn.eh_proj.weight"] = m.eh_proj.weight
        t[f"blk.{i}.nextn.enorm.weight"] = m.enorm
        t[f"blk.{i}.nextn.hnorm.weight"] = m.hnorm
        t[f"blk.{i}.nextn.shared_head_norm.weight"] = m.shared_head_norm
        return {k: v.detach().float().cpu().contiguous().numpy() for k, v in t.items()}


def masked_ce(logits, targets, mask):
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                         reduction="none")
    m = mask.reshape(-1).float()
    return (ce * m).sum() / m.sum().clamp(min=1)


def losses(model, ids, mask):
    lg, lg1, lg2 = model(ids)
    l0 = masked_ce(lg[:, :-1], ids[:, 1:], mask[:, 1:])
    l1 = masked_ce(lg1[:, :-1], ids[:, 2:], mask[:, 2:])
    l2 = masked_ce(lg2[:, :-1], ids[:, 3:], mask[:, 3:])
    return l0, l1, l2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0, help="0: as many as --time-budget allows")
    ap.add_argument("--time-budget", type=float, default=300.0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True  # TF32 products in training; snug runs f32
    torch.backends.cudnn.allow_tf32 = True
    dev = torch.device(args.device)
    with open(os.path.join(args.data, "tokenizer.json")) as f:
        tokj = json.load(f)
    V = max(max(tokj["model"]["vocab"].values()), max(a["id"] for a in tokj["added_tokens"])) + 1
    SEQ = 512
    X = np.fromfile(os.path.join(args.data, "train.u16"), dtype=np.uint16).reshape(-1, SEQ)
    M = np.fromfile(os.path.join(args.data, "train.mask"), dtype=np.uint8).reshape(-1, SEQ)
    Xe = np.fromfile(os.path.join(args.data, "eval.u16"), dtype=np.uint16).reshape(-1, SEQ)
    Me = np.fromfile(os.path.join(args.data, "eval.mask"), dtype=np.uint8).reshape(-1, SEQ)
    X, M = torch.from_numpy(X.astype(np.int64)).to(dev), torch.from_numpy(M).to(dev)
    Xe, Me = torch.from_numpy(Xe.astype(np.int64)).to(dev), torch.from_numpy(Me).to(dev)
    model = Model(CFG, V).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for n_, p in model.named_parameters() if p.dim() == 2 and "conv1d" not in n_]
    other = [p for n_, p in model.named_parameters() if not (p.dim() == 2 and
                                                             "conv1d" not in n_)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": other, "weight_decay": 0.0}], lr=args.lr,
                            betas=(0.9, 0.95))
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "train_log.txt"), "w")

    def say(s):
        print(s, flush=True)
        log.write(s + "\n")
        log.flush()

    say(f"params {n_params} vocab {V} train rows {X.shape[0]} eval rows {Xe.shape[0]} "
        f"device {dev} seed {args.seed} batch {args.batch} lr {args.lr}")
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    warm, steps, t0 = 100, args.steps, time.time()

    def evaluate():
        model.eval()
        tot = [0.0, 0.0, 0.0]
        n = 0
        with torch.no_grad():
            for i in range(0, Xe.shape[0], args.batch):
                ls = losses(model, Xe[i:i + args.batch], Me[i:i + args.batch])
                for j in range(3):
                    tot[j] += ls[j].item()
                n += 1
        model.train()
        return [t / n for t in tot]

    step = 0
    while True:
        if steps and step >= steps:
            break
        if not args.steps and time.time() - t0 > 1.2 * args.time_budget:
            say(f"stopping at step {step}: over the time budget")
            steps = step
            break
        if not steps and step == 50:  # time the first 50 steps, then fix the total
            per = (time.time() - t0) / 50
            steps = max(200, int(args.time_budget / per))
            say(f"{per * 1e3:.1f} ms/step: training {steps} steps "
                f"(reproduce with --steps {steps})")
        total = steps if steps else 10 ** 9
        lr = args.lr * min(1.0, (step + 1) / warm) * (
            0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / max(1, total)))))
        for grp in opt.param_groups:
            grp["lr"] = lr
        idx = torch.randint(0, X.shape[0], (args.batch,), generator=gen).to(dev)
        l0, l1, l2 = losses(model, X[idx], M[idx])
        loss = l0 + 0.5 * l1 + 0.25 * l2
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            say(f"step {step} lr {lr:.2e} loss {l0.item():.4f} mtp1 {l1.item():.4f} "
                f"mtp2 {l2.item():.4f} t {time.time() - t0:.0f}s")
        if step % 1000 == 999:
            e = evaluate()
            say(f"eval step {step + 1}: loss {e[0]:.4f} mtp1 {e[1]:.4f} mtp2 {e[2]:.4f}")
        step += 1
    e = evaluate()
    say(f"final eval after {steps} steps: loss {e[0]:.4f} mtp1 {e[1]:.4f} mtp2 {e[2]:.4f} "
        f"({time.time() - t0:.0f}s)")
    wdir = os.path.join(args.out, "weights")
    os.makedirs(wdir, exist_ok=True)
    for name, arr in model.gguf_tensors().items():
        arr.astype("<f4").tofile(os.path.join(wdir, name + ".f32"))
    # the forward on a fixed sequence (the first eval row's first 200 tokens), for snug logits
    model.eval()
    ids = Xe[:1, :200]
    with torch.no_grad():
        lg, lg1 = model(ids, mtp_steps=1)
    with open(os.path.join(args.out, "check_ids.json"), "w") as f:
        json.dump(ids[0].tolist(), f)
    lg[0].float().cpu().numpy().astype("<f4").tofile(os.path.join(args.out, "check_logits.f32"))
    lg1[0].float().cpu().numpy().astype("<f4").tofile(os.path.join(args.out, "check_mtp.f32"))


if __name__ == "__main__":
    main()
