#!/usr/bin/env python3
"""gpu_table.py — the table of bench/gpu.sh: reads its lines.txt (the card, the ceilings, snug's
run summaries, snug bench-local's pp/tg results, llama-bench's jsonl results) and the work folder's
`snug info` / `snug plan --json` files, and prints, per measurement, snug's best over the
repetitions, llama.cpp's, their ratio, and snug's share of the card's ceiling. snug is measured two
ways: cold, one `snug run` per measurement in a fresh process (the run's summary line: "snug run:
load ... | prompt N tokens, X s, Y tok/s | generation ..."), so the first-call costs (kernels loaded
on first use, CUDA graph capture) land in its numbers; and warm (rows marked "(warm)", lines tagged
`warm`), `snug bench-local` after one warm-up, as llama-bench measures ("pp512: X ± Y t/s",
"tg128 @ d4096: X ± Y t/s"). The ratio of either is to llama-bench's number:

- decode: bytes one token reads (every weight the token's forward multiplies — the trunk's
  matrices and the LM head, not the token-embedding table, of which one row is read, nor the MTP
  block without drafts; of a MoE model's expert tensors (`_exps`) only the used experts' share,
  expert_used_count / expert_count, the shared expert and the router whole — plus the KV cache up
  to the mean depth of the decoded tokens and the recurrent state read and written) times
  tokens/s, over the measured copy bandwidth;
- prompt: matrix FLOPs per token (2 per weight of the trunk's matrices, of the expert tensors the
  used experts' share, plus causal attention at the mean depth) times tokens/s, over the measured
  cuBLAS bf16 rate;
- MTP drafts: the speculative step's cost against a plain decode step (on random weights every
  draft is rejected, so one token per step), and the tokens/s those costs give at per-draft
  acceptance 0.6 / 0.7 / 0.8 (expected tokens per step (1 - a^(k+1)) / (1 - a)).

Usage: python3 bench/gpu_table.py OUT/lines.txt WORKDIR
"""
import glob
import json
import os
import re
import sys

lines_path, work = sys.argv[1], sys.argv[2]
card = copy_bw = bf16 = int8 = None
snug, llama, spec = {}, {}, {}
WARM = re.compile(r"\b(pp|tg)(\d+)(?: @ d(\d+))?: ([0-9.]+) ± ([0-9.]+) t/s")
RUN = re.compile(r"prompt (\d+) tokens, ([0-9.]+) s, ([0-9.]+) tok/s \| generation (\d+) tokens, "
                 r"([0-9.]+) s, ([0-9.]+) tok/s")
SPEC = re.compile(r"verifications, ([0-9.]+) tokens per verification")
for ln in open(lines_path):
    ln = ln.rstrip("\n")
    if ln.startswith("card "):
        card = ln[5:]
    elif ln.startswith("ceil "):
        m = re.search(r"device copy (\d+) GB/s", ln)
        if m:
            copy_bw = float(m.group(1)) * 1e9
        m = re.search(r"bf16 GEMM \S+ ([0-9.]+) TFLOP/s", ln)
        if m:
            bf16 = float(m.group(1)) * 1e12
        m = re.search(r"int8 GEMM \S+ ([0-9.]+) TOPS", ln)
        if m:
            int8 = float(m.group(1)) * 1e12
    elif ln.startswith("snug ") and " kv=" in ln:
        tag = dict(kv.split("=", 1) for kv in ln.split() if re.match(r"^(kv|prompt|depth|draft)=", kv))
        if " warm " in ln:  # snug bench-local: "pp512: X ± Y t/s", "tg128 @ d4096: X ± Y t/s"
            for m in WARM.finditer(ln):
                test, n, depth, tps = m.group(1), int(m.group(2)), int(m.group(3) or 0), float(m.group(4))
                key = (tag["kv"], "prompt", n, True) if test == "pp" else (tag["kv"], "decode", depth, True)
                snug.setdefault(key, []).append((tps, depth))
            continue
        m = RUN.search(ln)
        if not m:
            continue
        ptoks, ptps, gtoks, gtps = int(m.group(1)), float(m.group(3)), int(m.group(4)), float(m.group(6))
        if "draft" in tag:
            ms = SPEC.search(ln)
            spec[int(tag["draft"])] = (gtps, float(ms.group(1)) if ms else 1.0)
        elif "prompt" in tag:
            key = (tag["kv"], "prompt", int(tag["prompt"]), False)
            snug.setdefault(key, []).append((ptps, ptoks))
        else:
            key = (tag["kv"], "decode", int(tag["depth"]), False)
            snug.setdefault(key, []).append((gtps, ptoks))
    elif ln.startswith("llama ") and "{" in ln:
        kv = ln.split()[1][3:]
        d = json.loads(ln[ln.index("{"):])
        if d.get("n_gen", 0) == 0:
            key = (kv, "prompt", int(d["n_prompt"]))
        else:
            key = (kv, "decode", int(d["n_depth"]))
        llama.setdefault(key, []).append(float(d["avg_ts"]))

# the model's shapes from `snug info`
meta, tensors = {}, []
info = os.path.join(work, "info.txt")
if os.path.exists(info):
    for ln in open(info):
        m = re.match(r"\s+(\S+)\.(block_count|nextn_predict_layers|attention\.head_count|attention\.key_length"
                     r"|expert_count|expert_used_count)\s+(\d+)", ln)
        if m:
            meta[m.group(2)] = int(m.group(3))
        m = re.match(r"\s+(\S+\.weight|\S+)\s+(\S+)\s+\[([0-9, ]+)\]\s+(\d+)", ln)
        if m and ("." in m.group(1)) and not m.group(1).startswith(("general.", "tokenizer.")):
            shape = [int(v) for v in m.group(3).split(",")]
            tensors.append((m.group(1), int(m.group(4)), shape))
n_blocks = meta.get("block_count", 0)
n_trunk = n_blocks - meta.get("nextn_predict_layers", 0)
has_output = any(t[0] == "output.weight" for t in tensors)


def trunk(name):
    m = re.match(r"blk\.(\d+)\.", name)
    return m is None or int(m.group(1)) < n_trunk


n_expert, n_expert_used = meta.get("expert_count", 0), meta.get("expert_used_count", 0)
moe = n_expert > 0 and 0 < n_expert_used <= n_expert


def used(name):  # the share of a tensor one token multiplies: of the experts', the used ones'
    return n_expert_used / n_expert if moe and "_exps" in name else 1


read_bytes = sum(b * used(n) for n, b, _ in tensors
                 if trunk(n) and not (n == "token_embd.weight" and has_output))
mat_params = sum(s[0] * s[1] * (s[2] if len(s) == 3 else 1) * used(n) for n, _, s in tensors
                 if (len(s) == 2 or (len(s) == 3 and moe and "_exps" in n)) and trunk(n)
                 and n not in ("token_embd.weight", "output.weight")
                 and not n.endswith("ssm_conv1d.weight"))
n_attn = sum(1 for n, _, _ in tensors if n.endswith("attn_q.weight") and trunk(n))
hq, dh = meta.get("attention.head_count", 0), meta.get("attention.key_length", 0)


def plan(kv):
    f = os.path.join(work, f"plan-{kv.replace('/', '_')}.json")
    if not os.path.exists(f):
        return None
    d = json.load(open(f))
    it = d.get("items", {})
    return it.get("kv cache (attention)", 0) / max(d.get("ctx", 1), 1), it.get("recurrent state", 0)


def fmt(v, d=1):
    return "—" if v is None else f"{v:,.{d}f}"


print(f"card: {card}")
print(f"ceilings (same call): copy {fmt(copy_bw and copy_bw / 1e9, 0)} GB/s, cuBLAS bf16 "
      f"{fmt(bf16 and bf16 / 1e12)} TFLOP/s, int8 {fmt(int8 and int8 / 1e12)} TOPS")
print(f"model: {n_trunk} trunk layers ({n_attn} attention), bytes read per decoded token "
      f"{read_bytes / 1e9:.2f} GB + KV + state; {2 * mat_params / 1e9:.1f} GFLOP per prompt token "
      f"in the matrices" + (f" (MoE: {n_expert_used} of {n_expert} experts counted)" if moe else ""))
print()
print("| KV | measurement | snug tok/s | llama.cpp tok/s | snug / llama.cpp | snug share of ceiling |")
print("|---|---|---:|---:|---:|---:|")
for key in sorted(set(snug) | {k + (False,) for k in llama}):
    kv, what, n, warm = key
    s = max((v[0] for v in snug.get(key, [])), default=None)
    l = max(llama.get(key[:3], []), default=None)  # llama-bench measures warm
    share = None
    p = plan(kv)
    if s and what == "decode" and copy_bw and p:
        kvpt, state = p
        depth = n + 64
        share = s * (read_bytes + kvpt * depth + 2 * state) / copy_bw
        label = f"decode at depth {n:,}"
    elif what == "decode":
        label = f"decode at depth {n:,}"
    else:
        label = f"prompt {n:,}"
        if s and bf16:
            fl = 2 * mat_params + 4 * dh * hq * n_attn * (n / 2)
            share = s * fl / bf16
    ratio = s / l if s and l else None
    label += " (warm)" if warm else ""
    print(f"| {kv} | {label} | {fmt(s)} | {fmt(l)} | {fmt(ratio, 2)} | "
          f"{'—' if share is None else f'{100 * share:.1f}%'} |")
if any(k[3] for k in snug):
    print()
    print("(warm): snug bench-local, one warm-up then the mean of its repetitions, as llama-bench "
          "measures; the other snug rows: one cold `snug run` each")
if spec:
    print()
    print("| drafts | tok/s (drafts rejected) | step cost / plain step | tok/s at acceptance 0.6 / 0.7 / 0.8 |")
    print("|---:|---:|---:|---|")
    plain = spec.get(0, (None, 1.0))[0]
    for k in sorted(spec):
        tps, per = spec[k]
        cost = per / tps if tps else None  # seconds per step
        rel = cost * plain if cost and plain else None
        exp = []
        for a in (0.6, 0.7, 0.8):
            e = (1 - a ** (k + 1)) / (1 - a) if k else 1.0
            exp.append(fmt(e / cost if cost else None))
        print(f"| {k} | {fmt(tps)} | {fmt(rel, 2)} | {' / '.join(exp)} |")
