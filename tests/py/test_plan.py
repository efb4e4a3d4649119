"""test_plan.py — `snug plan` against independent references.

1. Weight bytes: for shrunk overrides of the qwen3.6-27b and qwen3.6-35b-a3b presets, the
   plan's weight bytes (--preset ... --weights T) equal the tensor bytes of the `snug gen` file
   of that shape, summed by gguf-py (a second reader), and `snug plan -m` on the file agrees.
2. KV and state items match formulas computed here from the hyper-parameters.
3. qwen3.6-27b, Q4_K_M, budget 23.5 GiB: `--ctx max` per KV format (printed); the plan at the
   maximum fits, one more position does not; f32 KV gives a smaller maximum than f16.
4. Sizes: 23.5GiB, 24G, plain bytes; errors for bad input.
4b. Host items: with --backend cuda the backend's embedding staging (chunk x n_embd f32) and host
   work arena, the MTP block's host buffers (with the card's part, the cpu plan's one item),
   and on both backends the engine's logits rows, token history and step tables, each to the
   byte of its formula, for several slots, drafts and chunks; the host total is their sum.
4c. The vision tower on cuda: its backend instance's embedding staging (host) and step inputs +
   empty slot (device), each to the byte of the formula its open allocates by, in the totals.
5. Tensor parallelism (--tp 2): the ranks' items add up to the one-device items plus
   the copies each rank holds (weights, KV, recurrent state), to the byte; the ranks' work
   arenas are no larger; the 27B Q4_K_M on two 23.5 GiB cards reaches the trained context with
   q8_0 KV; --kv auto and --table answer per rank; a rank count that does not divide the heads
   is refused naming them.
Runs with SNUG_BIN (ctest sets it); prints "N passed, N failed".
"""
import json
import os
import subprocess
import sys
import tempfile

SNUG = os.environ.get("SNUG_BIN") or os.path.join(
    os.environ.get("SNUG_SOURCE_DIR", "."), "build", "snug")
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def plan(*args, ok=True):
    r = subprocess.run([SNUG, "plan", "--json", "--threads", "2", *args],
                       capture_output=True, text=True)
    if ok and r.returncode != 0:
        print(r.stderr)
    return r.returncode, (json.loads(r.stdout) if r.stdout.strip() else None), r.stderr


def gguf_tensor_bytes(path):
    from gguf import GGUFReader
    r = GGUFReader(path)
    return sum(int(t.n_bytes) for t in r.tensors)


SHRINK = {
    # rows stay multiples of 256 so the k-quants apply, as in the full models
    "qwen3.6-27b": ["n_layer=4", "n_vocab=1024", "embedding_length=256",
                    "feed_forward_length=512"],
    "qwen3.6-35b-a3b": ["n_layer=4", "n_vocab=1024", "embedding_length=256", "expert_count=8"],
}


def test_weight_bytes(tmp):
    for preset, sets in SHRINK.items():
        for wt in ["q4_k_m", "q8_0", "q6_k"]:
            setargs = [a for s in sets for a in ("--set", s)]
            out = os.path.join(tmp, f"{preset}-{wt}.gguf")
            r = subprocess.run([SNUG, "gen", "--preset", preset, "--type", wt, "-o", out,
                                *setargs], capture_output=True, text=True)
            check(r.returncode == 0, f"gen {preset} {wt}: {r.stderr[-300:]}")
            if r.returncode:
                continue
            want = gguf_tensor_bytes(out)
            rc, p, _ = plan("--preset", preset, "--weights", wt, *setargs)
            check(rc == 0 and p["weights_bytes"] == want,
                  f"{preset} {wt}: plan weights {p and p['weights_bytes']} vs file {want}")
            rc, pf, _ = plan("-m", out)
            check(rc == 0 and pf["weights_bytes"] == want, f"{preset} {wt}: plan -m vs file")
            # everything but the weights is a function of the shape: identical items
            check(rc == 0 and pf["items"] == p["items"], f"{preset} {wt}: -m and --preset items")
            # the ranks' slices of the file's tensors = the recipe's, and add up
            _, pt, _ = plan("--preset", preset, "--weights", wt, *setargs, "--tp", "2")
            _, ft, _ = plan("-m", out, "--tp", "2")
            check(pt and ft and [r["items"] for r in ft["ranks"]] ==
                  [r["items"] for r in pt["ranks"]] and
                  sum(r["weights_bytes"] - r["replicated_bytes"] for r in ft["ranks"]) == want,
                  f"{preset} {wt} --tp 2: -m and --preset ranks, owned slices = the file")
            print(f"{preset} (shrunk) {wt}: weights {want} bytes: plan == gen file")
            os.unlink(out)


def test_formulas():
    # 27B: 16 attention layers (every 4th of 64), Hkv 4, D 256; 48 DeltaNet layers with
    # conv state (K-1)·conv_dim floats, conv_dim = 2·16·128 + 48·128 = 10240, delta 48·128·128
    n_ctx = 10000
    for kv, eb in (("f16", 2), ("f32", 4)):
        rc, p, _ = plan("--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--ctx", str(n_ctx),
                        "--kv", kv)
        att = 16 * 2 * n_ctx * 4 * 256 * eb
        check(p["items"]["kv cache (attention)"] == att,
              f"27b kv {kv}: {p['items']['kv cache (attention)']} vs {att}")
        state = 48 * (3 * 10240 + 48 * 128 * 128) * 4
        rs = p["items"]["recurrent state"]
        check(state <= rs <= state + 4096, f"27b state {rs} vs {state} (+ tables/alignment)")
    # the work arena is bounded by the chunk, not the context
    _, a, _ = plan("--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--ctx", "4096")
    _, b, _ = plan("--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--ctx", "200000")
    check(a["items"]["work arena (per chunk)"] == b["items"]["work arena (per chunk)"],
          "work arena independent of the context")
    _, c, _ = plan("--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--chunk", "64")
    check(c["items"]["work arena (per chunk)"] < a["items"]["work arena (per chunk)"],
          "work arena shrinks with the chunk")
    # MTP snapshots: draft+1 copies of the recurrent states (without tables)
    _, d, _ = plan("--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--mtp", "3")
    check(d["items"]["state snapshots (mtp)"] == 4 * 48 * (3 * 10240 + 48 * 128 * 128) * 4,
          "mtp snapshots")
    # the MTP block's cache is one more attention layer in the trunk's format: going
    # from f16 to a smaller format saves 1/16 of what the 16 trunk layers save
    mtp = {}
    for kv in ("f16", "q8_0", "tq4"):
        _, q, _ = plan("--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--mtp", "3",
                       "--ctx", "65536", "--kv", kv)
        mtp[kv] = (q["items"]["mtp kv cache + draft buffers"], q["items"]["kv cache (attention)"])
    for kv in ("q8_0", "tq4"):
        saved_mtp, saved_trunk = mtp["f16"][0] - mtp[kv][0], mtp["f16"][1] - mtp[kv][1]
        check(saved_mtp > 0 and 16 * saved_mtp == saved_trunk,
              f"mtp cache in {kv}: saves {saved_mtp} bytes, the 16 trunk layers {saved_trunk}")
    # slots multiply the per-sequence items
    _, e, _ = plan("--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--slots", "3")
    check(e["items"]["kv cache (attention)"] == 3 * a["items"]["kv cache (attention)"], "slots")
    # cuda: estimated overheads, labelled; logits on both sides
    _, g, _ = plan("--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--backend", "cuda")
    check(len(g["estimated"]) == 2 and all("estimated" in n for n in g["estimated"]),
          "cuda estimates labelled")
    check(g["all_bytes"] > g["total_bytes"], "cuda: host items outside the device total")


def test_slots_share_the_model():
    """Slots: per-model buffers once, per-slot buffers per slot, to the byte."""
    base = ["--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--ctx", "65536", "--kv", "q8_0",
            "--backend", "cuda"]
    for extra in ([], ["--mtp", "3"]):
        _, one, _ = plan(*base, *extra, "--slots", "1")
        _, four, _ = plan(*base, *extra, "--slots", "4")
        tag = " ".join(extra) or "no mtp"
        for name in ("work arena (per chunk)", "cuda op scratch", "logits (device)"):
            check(one["items"][name] == four["items"][name] and name not in four["per_slot"],
                  f"{tag}: {name} is one model's ({four['items'][name]} bytes for 4 slots)")
        slot = sum(one["items"][n] for n in ("kv cache (attention)", "recurrent state",
                                              "state snapshots (mtp)",
                                              "mtp kv cache + draft buffers")
                   if n in one["items"])
        diff = four["total_bytes"] - one["total_bytes"]
        check(diff == 3 * slot, f"{tag}: total(4 slots) - total(1 slot) = {diff} = 3 x per-slot "
                                f"KV + state + snapshots ({slot})")
        check(four["slot_bytes"] == slot and four["model_bytes"] + 4 * slot ==
              four["total_bytes"], f"{tag}: model_bytes + 4 x slot_bytes = total")
        for n in ("kv cache (attention)", "recurrent state"):
            check(n in four["per_slot"] and four["items"][n] == 4 * one["items"][n],
                  f"{tag}: {n} per slot")
        print(f"27B q4_k_m ctx 65536 q8_0 cuda {tag}: 1 slot {one['total_bytes']}, 4 slots "
              f"{four['total_bytes']}, per slot {slot}, work arena "
              f"{four['items']['work arena (per chunk)']}, op scratch "
              f"{four['items']['cuda op scratch']}")


def a64(x):
    return (x + 63) // 64 * 64


# The host items of a plan (everything else is on the budgeted device with --backend cuda).
HOST_ITEMS = ("step tables (runs, positions)", "logits", "sampler", "token history",
              "step logits (all slots)", "step tables (engine)", "mtp draft buffers (host)",
              "cuda staging (embedding rows)", "cuda host work (hooks, moe)")


def test_host_items():
    """The host buffers of the CUDA backend and of the serving engine, each an item with the
    formula of the code that allocates it (backend.h, plan.h), in the host total."""
    V = 248320
    for preset, H, E in (("qwen3.6-27b", 5120, 0), ("qwen3.6-35b-a3b", 2048, 256)):
        for S, N, T, C in ((4, 3, 2048, 65536), (1, 0, 512, 8192), (16, 3, 64, 4096)):
            args = ["--preset", preset, "--weights", "q4_k_m", "--ctx", str(C), "--kv", "q8_0",
                    "--slots", str(S), "--mtp", str(N), "--chunk", str(T)]
            tag = f"{preset} slots {S} mtp {N} chunk {T}"
            rc, g, _ = plan(*args, "--backend", "cuda")
            rc2, c, _ = plan(*args, "--backend", "cpu")
            if rc or rc2:
                check(False, f"{tag}: plans")
                continue
            it = g["items"]
            # the CUDA backend's host memory, once per model
            check(it.get("cuda staging (embedding rows)") == T * H * 4,
                  f"{tag}: embedding staging {it.get('cuda staging (embedding rows)')} = "
                  f"chunk x n_embd x 4 = {T * H * 4}")
            work = a64(T * H * 4) + (3 * a64((E + 1) * 4) if E else 0)
            check(it.get("cuda host work (hooks, moe)") == work,
                  f"{tag}: host work {it.get('cuda host work (hooks, moe)')} = {work}")
            # the engine's: per slot its logits row and token history, once its step's tables
            rows = min(T, S * (N + 2))
            for p in (g, c):
                q = p["items"]
                check(q.get("logits") == S * V * 4 and "logits" in p["per_slot"],
                      f"{tag}: logits rows of {S} slots")
                check(q.get("token history") == S * (C + 1) * 4 and "token history" in
                      p["per_slot"], f"{tag}: token history {q.get('token history')}")
                check(q.get("step logits (all slots)") == rows * V * 4 and
                      "step logits (all slots)" not in p["per_slot"],
                      f"{tag}: step logits {q.get('step logits (all slots)')} = {rows} rows")
                check(q.get("step tables (engine)") == S * 44 + T * 24,
                      f"{tag}: the engine's step tables {q.get('step tables (engine)')}")
            check(not any(n.startswith("cuda") for n in c["items"]),
                  f"{tag}: no cuda item on the cpu")
            # MTP: the cache and row buffers on the card, the rest on the host, together the
            # cpu's one host item; the host part holds the verified rows' logits
            if N:
                both = it["mtp kv cache + draft buffers"] + it["mtp draft buffers (host)"]
                check(both == c["items"]["mtp kv cache + draft buffers"] and
                      it["mtp draft buffers (host)"] >= (N + 1) * V * 4 and
                      "mtp draft buffers (host)" in g["per_slot"],
                      f"{tag}: mtp buffers split between card and host ({both})")
            else:
                check("mtp draft buffers (host)" not in it, f"{tag}: no mtp host buffers")
            # every host item is in the host total, and nothing else is
            host = sum(v for n, v in it.items() if n in HOST_ITEMS)
            check(g["all_bytes"] - g["total_bytes"] == host,
                  f"{tag}: host total {g['all_bytes'] - g['total_bytes']} = the host items {host}")
            # on the cpu the host is the budget: the engine's tables count against it
            check(c["total_bytes"] == c["all_bytes"] == sum(c["items"].values()),
                  f"{tag}: cpu: every item in the budgeted total")
        print(f"{preset}: cuda host items {[n for n in HOST_ITEMS if n in g['items']]}")


# The vision tower's host items (with --vision-backend cuda also the instance's staging).
VISION_HOST = ("vision weights (mmproj)", "vision encoder work (largest image)",
               "vision image buffers (largest)", "vision source (decode+resize)",
               "vision cuda staging (host)")


def test_vision_items():
    """The vision tower's backend instance (src/vision/vision_backend.c) opens the CUDA backend
    with n_chunk = min(patches, 4096) rows and n_embd 1: its embedding staging (host) and step
    inputs (device) are n_chunk x 4 and n_chunk x 8 bytes (backend.h's formulas, which
    cuda_backend.c allocates by), its one slot an empty cache shape (snug_kv_bytes: the view
    table of one 40-byte view, 64-aligned, + 64). Each is a plan item, to the byte, and in the
    host / device totals; none with the tower on the CPU."""
    base = ["--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--ctx", "32768", "--backend",
            "cuda", "--vision-preset", "qwen3.5"]
    for px in (16777216, 1048576, 262144, 65536):
        rc, g, _ = plan(*base, "--max-image-pixels", str(px))
        if rc:
            check(False, f"vision plan at {px} pixels")
            continue
        it, vis = g["items"], g["vision"]
        patches = px // (32 * 32) * 4
        rows = min(patches, 4096)
        slot = a64(40) + 64
        tag = f"vision {px} pixels ({patches} patches, {rows} rows a product)"
        check(vis["image_patches"] == patches, f"{tag}: patches {vis['image_patches']}")
        check(it.get("vision cuda staging (host)") == rows * 4 == vis["host_stage_bytes"],
              f"{tag}: staging {it.get('vision cuda staging (host)')} = rows x 1 x 4")
        check(it.get("vision step inputs + slot (gpu)") == rows * 8 + slot ==
              vis["device_inputs_bytes"],
              f"{tag}: step inputs + slot {it.get('vision step inputs + slot (gpu)')} = "
              f"{rows} x 8 + {slot}")
        host = sum(v for n, v in it.items() if n in HOST_ITEMS or n in VISION_HOST)
        check(g["all_bytes"] - g["total_bytes"] == host,
              f"{tag}: host total {g['all_bytes'] - g['total_bytes']} = the host items {host}")
        check(g["total_bytes"] == sum(v for n, v in it.items()
                                      if n not in HOST_ITEMS and n not in VISION_HOST),
              f"{tag}: the gpu total is its items")
    rc, c, _ = plan(*base, "--vision-backend", "cpu")
    check(rc == 0 and not any(n in c["items"] for n in ("vision cuda staging (host)",
                                                          "vision step inputs + slot (gpu)")),
          "vision tower on the cpu: no instance items")


def test_max_ctx():
    res = {}
    _, base, _ = plan("--preset", "qwen3.6-27b", "--weights", "q4_k_m")
    for kv in base["kv_types"]:  # every KV format the engine has
        rc, p, _ = plan("--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--budget", "23.5GiB",
                        "--ctx", "max", "--kv", kv)
        check(rc == 0 and p["fits"] and p["total_bytes"] <= 25232932864, f"max {kv} fits")
        res[kv] = p["max_ctx"]
        check(p["max_ctx_per_kv"][kv] == p["max_ctx"], "per-kv table agrees")
        rc, q, _ = plan("--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--budget", "23.5GiB",
                        "--ctx", str(p["max_ctx"] + 1), "--kv", kv, ok=False)
        if p["max_ctx"] == p["n_ctx_train"]:  # capped at the trained context, not the budget
            check(rc == 0 and q["fits"], f"{kv}: capped at the trained context, more fits")
        else:
            check(rc == 1 and not q["fits"], f"{kv}: one more position does not fit")
        print(f"qwen3.6-27b Q4_K_M, 23.5 GiB: largest context with KV {kv}: {p['max_ctx']} "
              f"({p['total_bytes']} bytes planned)")
    check(0 < res["f32"] < res["f16"], "f32 KV fits less context than f16")
    # human table: names the maximum per KV type
    r = subprocess.run([SNUG, "plan", "--preset", "qwen3.6-27b", "--weights", "q4_k_m",
                        "--budget", "23.5GiB", "--ctx", "max"], capture_output=True, text=True)
    check(r.returncode == 0 and f"KV f16: {res['f16']}" in r.stdout and "#" in r.stdout,
          "table output")


def test_sizes_and_errors():
    for s, want in (("23.5GiB", 25232932864), ("24G", 24 << 30), ("1000000", 1000000),
                    ("512MiB", 512 << 20)):
        _, p, _ = plan("--preset", "demo", "--weights", "f16", "--budget", s)
        check(p["budget"] == want, f"size {s}: {p['budget']} vs {want}")
    for args in (["--preset", "nope", "--weights", "q4_k_m"], ["--preset", "demo"],
                 ["--preset", "demo", "--weights", "q9"], ["--preset", "demo", "--weights",
                 "f16", "--budget", "lots"], ["--preset", "demo", "--weights", "f16", "--ctx",
                 "max"], ["-m", "/nonexistent.gguf"]):
        r = subprocess.run([SNUG, "plan", *args], capture_output=True, text=True)
        check(r.returncode != 0 and r.stderr.strip() != "", f"error for {args}")
    # a budget nothing fits in: exit 1 and a message
    r = subprocess.run([SNUG, "plan", "--preset", "qwen3.6-27b", "--weights", "q8_0",
                        "--budget", "8G", "--ctx", "max"], capture_output=True, text=True)
    check(r.returncode == 1 and "not even" in r.stderr, "budget below the weights")


def test_tensor_parallel():
    base = ["--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--backend", "cuda",
            "--ctx", "65536", "--kv", "q8_0", "--slots", "2"]
    _, one, _ = plan(*base)
    rc, tp, _ = plan(*base, "--tp", "2")
    check(rc == 0 and tp["tp"] == 2 and len(tp["ranks"]) == 2, "--tp 2: two ranks")
    if rc:
        return
    ranks = tp["ranks"]
    w = sum(r["weights_bytes"] for r in ranks)
    copies = sum(r["replicated_bytes"] for r in ranks)
    check(w == one["weights_bytes"] + copies and ranks[0]["replicated_bytes"] == 0,
          f"weights: ranks {w} = one device {one['weights_bytes']} + copies {copies}")
    check(tp["one_device_weights_bytes"] == one["weights_bytes"], "one-device weights reported")
    wk = [n for n in one["items"] if n.startswith("weights ")]
    check(all(sum(r["items"][n] for r in ranks) >= one["items"][n] for n in wk),
          "every weight type: the ranks hold at least the one-device bytes")
    # KV: 4 KV heads over 2 ranks, none replicated
    kv = sum(r["items"]["kv cache (attention)"] for r in ranks)
    check(kv == one["items"]["kv cache (attention)"],
          f"kv: ranks {kv} = one device {one['items']['kv cache (attention)']}")
    # recurrent state: 48 DeltaNet layers, conv (K-1)·conv_dim + Nv·dk·dv floats, per slot; the
    # rank's conv_dim 5120 and Nv 24; each arena keeps the same bookkeeping on top
    slots = 2
    st_one = slots * 48 * (3 * 10240 + 48 * 128 * 128) * 4
    st_rank = slots * 48 * (3 * 5120 + 24 * 128 * 128) * 4
    book = one["items"]["recurrent state"] - st_one
    check(2 * st_rank == st_one and all(r["items"]["recurrent state"] == st_rank + book
                                        for r in ranks),
          f"state: 2 x {st_rank} = {st_one}, each with the same {book} bytes of tables")
    for n in ("work arena (per chunk)", "cuda op scratch"):
        check(all(r["items"][n] <= one["items"][n] for r in ranks), f"{n}: no larger per rank")
    check("nccl buffers (estimated)" in tp["estimated"], "nccl buffers labelled an estimate")
    check(tp["total_bytes"] == max(r["total_bytes"] for r in ranks),
          "the plan reported is the fullest rank's")
    print(f"27B q4_k_m ctx 65536 q8_0, 2 slots: one device {one['total_bytes']} bytes, "
          f"--tp 2 ranks {[r['total_bytes'] for r in ranks]} (copies {copies})")
    # two 24 GiB cards: the trained context with q8_0 KV; one card does not reach it
    rc, two, _ = plan("--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--vram-budget",
                      "23.5GiB", "--ctx", "max", "--kv", "q8_0", "--tp", "2")
    _, single, _ = plan("--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--vram-budget",
                        "23.5GiB", "--ctx", "max", "--kv", "q8_0")
    check(rc == 0 and two["max_ctx"] == 262144 and single["max_ctx"] < 262144,
          f"27B on 2 x 23.5 GiB, q8_0: {two and two['max_ctx']} (one card {single['max_ctx']})")
    print(f"27B q4_k_m q8_0 KV, 23.5 GiB per card: one card {single['max_ctx']}, "
          f"two cards (--tp 2) {two and two['max_ctx']}")
    # f16 KV: the largest context of the pair, and it fits each rank
    rc, f16, _ = plan("--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--vram-budget",
                      "23.5GiB", "--ctx", "max", "--kv", "f16", "--tp", "2")
    check(rc == 0 and all(r["total_bytes"] <= 25232932864 for r in f16["ranks"]),
          "--ctx max: every rank fits")
    rc, q, _ = plan("--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--vram-budget",
                    "23.5GiB", "--ctx", str(f16["max_ctx"] + 1), "--kv", "f16", "--tp", "2",
                    ok=False)
    check(f16["max_ctx"] == 262144 or (rc == 1 and not q["fits"]),
          f"--tp 2 f16: {f16['max_ctx']} is the largest")
    rc, a, _ = plan("--preset", "qwen3.6-27b", "--weights", "q4_k_m", "--vram-budget",
                    "23.5GiB", "--kv", "auto", "--tp", "2")
    check(rc == 0 and a.get("auto"), "--kv auto with --tp 2")
    r = subprocess.run([SNUG, "plan", "--preset", "qwen3.6-27b", "--weights", "q4_k_m",
                        "--vram-budget", "23.5GiB", "--table", "--tp", "2"],
                       capture_output=True, text=True)
    check(r.returncode == 0 and "tensor parallel over 2 devices" in r.stdout, "--table --tp 2")
    r = subprocess.run([SNUG, "plan", "--preset", "qwen3.6-27b", "--weights", "q4_k_m",
                        "--tp", "2"], capture_output=True, text=True)
    check(r.returncode == 0 and "rank 1 of 2:" in r.stdout, "a table per rank")
    # refusals: 3 ranks (4 KV heads), a q4_K column split off its blocks (8 ranks)
    for n, needle in (("3", "attention.head_count_kv = 4"), ("8", "blocks of 256")):
        r = subprocess.run([SNUG, "plan", "--preset", "qwen3.6-27b", "--weights", "q4_k_m",
                            "--tp", n], capture_output=True, text=True)
        check(r.returncode != 0 and needle in r.stderr, f"--tp {n} refused: {r.stderr.strip()}")


def main():
    if not os.path.exists(SNUG):
        print(f"FAIL: snug binary {SNUG} not found")
        print("0 passed, 1 failed")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        test_weight_bytes(tmp)
    test_formulas()
    test_slots_share_the_model()
    test_host_items()
    test_vision_items()
    test_max_ctx()
    test_sizes_and_errors()
    test_tensor_parallel()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
