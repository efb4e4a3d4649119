#!/usr/bin/env python3
"""test_quant_gguf.py - cross-check src/quant against independent implementations.

1. Decoding: random-but-valid blocks of every computable type are decoded by snug (through the
   test_quant_io helper built next to the snug binary) and by gguf-py's gguf.quants.dequantize;
   the floats must be identical bit for bit.
2. Encoding: snug's quantizer output is compared byte for byte with gguf-py's quantize (the
   types it implements: F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) and, when a llama.cpp build is
   given ($SNUG_LLAMA_LIB_DIR/libggml-base.so), with ggml_quantize_chunk for every type
   including the K-quants; its RMSE is printed next to the reference's.
3. `snug quantize`: an F32 GGUF written with gguf-py's GGUFWriter is converted to several
   recipes; the output is read back with gguf-py's GGUFReader: metadata copied, file_type set,
   per-tensor types as the recipe says, data equal to quantizing the source with snug's own
   row quantizer, and a q4_k_m output requantized to q8_0 (dequantize -> quantize path).
4. Against llama.cpp itself, when $SNUG_LLAMA_LIB_DIR/libllama.so exists: the trained and MoE fixture
   GGUFs are quantized by `snug quantize` and by llama_model_quantize (through ctypes) for
   several recipes; tensor order, types, bytes and metadata keys must be identical.
   Fixtures missing -> visible SKIP, or FAIL when SNUG_REQUIRE_FIXTURES=1.
Env: SNUG_BIN (the snug binary; the helper is test_quant_io in the same folder);
SNUG_LLAMA_LIB_DIR (the folder of a llama.cpp build's libggml-base.so and libllama.so; without
it parts 2's K-quant check and 4 print SKIP).
Prints "N passed, N failed"; exits non-zero on failure.
"""
import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

passed = failed = 0


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", msg, file=sys.stderr)


SNUG_BIN = os.environ.get("SNUG_BIN")
if not SNUG_BIN:
    here = os.path.dirname(os.path.abspath(__file__))
    SNUG_BIN = os.path.join(here, "..", "..", "build", "snug")
TOOL = os.path.join(os.path.dirname(SNUG_BIN), "test_quant_io")
if not os.path.exists(TOOL):
    print(f"FAIL: helper {TOOL} not built (cmake --build <dir> --target test_quant_io)", file=sys.stderr)
    print("0 passed, 1 failed")
    sys.exit(1)

# name -> (gguf-py type, block elems, block bytes)
TYPES = {
    "f32": (T.F32, 1, 4), "f16": (T.F16, 1, 2), "bf16": (T.BF16, 1, 2),
    "q8_0": (T.Q8_0, 32, 34), "q4_0": (T.Q4_0, 32, 18), "q4_1": (T.Q4_1, 32, 20),
    "q5_0": (T.Q5_0, 32, 22), "q5_1": (T.Q5_1, 32, 24), "q4_K": (T.Q4_K, 256, 144),
    "q5_K": (T.Q5_K, 256, 176), "q6_K": (T.Q6_K, 256, 210),
}
# the low-bit types snug decodes but does not write yet: decode checks only
LOWBIT = {
    "q2_K": (T.Q2_K, 256, 84), "q3_K": (T.Q3_K, 256, 110), "iq4_nl": (T.IQ4_NL, 32, 18),
    "iq4_xs": (T.IQ4_XS, 256, 136), "iq3_xxs": (T.IQ3_XXS, 256, 98), "iq3_s": (T.IQ3_S, 256, 110),
    "iq2_xxs": (T.IQ2_XXS, 256, 66), "iq2_xs": (T.IQ2_XS, 256, 74), "iq2_s": (T.IQ2_S, 256, 82),
    "iq1_s": (T.IQ1_S, 256, 50), "iq1_m": (T.IQ1_M, 256, 56), "tq1_0": (T.TQ1_0, 256, 54),
    "tq2_0": (T.TQ2_0, 256, 66), "mxfp4": (T.MXFP4, 32, 17),
}
# byte offsets of f16 fields per block (kept finite so both decoders see ordinary numbers)
F16_FIELDS = {"q8_0": [0], "q4_0": [0], "q4_1": [0, 2], "q5_0": [0], "q5_1": [0, 2],
              "q4_K": [0, 2], "q5_K": [0, 2], "q6_K": [208], "q2_K": [80, 82], "q3_K": [108],
              "iq4_nl": [0], "iq4_xs": [0], "iq3_xxs": [0], "iq3_s": [0], "iq2_xxs": [0], "iq2_xs": [0],
              "iq2_s": [0], "iq1_s": [0], "tq1_0": [52], "tq2_0": [64], "mxfp4": [], "iq1_m": []}


def tool(op, name, n, data):
    r = subprocess.run([TOOL, op, name, str(n)], input=data, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"test_quant_io {op} {name}: {r.stderr.decode()}")
    return r.stdout


def random_blocks(rng, name, nblocks):
    qt, be, bb = {**TYPES, **LOWBIT}[name]
    raw = rng.integers(0, 256, size=(nblocks, bb), dtype=np.uint8)
    if name in ("f16", "bf16", "f32"):
        vals = rng.standard_normal(nblocks * be).astype(np.float32) * 10
        if name == "f16":
            return vals.astype(np.float16).view(np.uint8).reshape(nblocks, bb)
        if name == "bf16":
            return (vals.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(nblocks, bb)
        return vals.view(np.uint8).reshape(nblocks, bb)
    for off in F16_FIELDS[name]:  # random finite halves, including subnormals and negatives
        h = (rng.standard_normal(nblocks) * rng.choice([1e-6, 1e-3, 1, 100], nblocks)).astype(np.float16)
        raw[:, off:off + 2] = h.view(np.uint8).reshape(nblocks, 2)
    if name == "mxfp4":  # E8M0 block exponent: keep 2^(e-127) within float range of the values
        raw[:, 0] = rng.integers(0, 200, size=nblocks, dtype=np.uint8)
    if name == "iq1_m":  # the f16 scale is spread over the top nibbles of four u16 words
        h = (rng.standard_normal(nblocks) * rng.choice([1e-6, 1e-3, 1, 100], nblocks)).astype(np.float16)
        hv = h.view(np.uint16).astype(np.uint16)
        w = raw[:, 48:56].copy().view(np.uint16)
        for k in range(4):
            w[:, k] = (w[:, k] & 0x0FFF) | (((hv >> (4 * k)) & 0xF) << 12)
        raw[:, 48:56] = w.view(np.uint8)
    return raw


def test_decode(rng):
    for name, (qt, be, bb) in {**TYPES, **LOWBIT}.items():
        nb = 64
        blocks = random_blocks(rng, name, nb)
        n = nb * be
        mine = np.frombuffer(tool("deq", name, n, blocks.tobytes()), np.float32)
        ref = dequantize(blocks.reshape(-1), qt).reshape(-1).astype(np.float32)
        same = np.array_equal(mine.view(np.uint32), ref.view(np.uint32)) or np.array_equal(mine, ref)
        check(same, f"{name}: decode differs from gguf-py at {np.flatnonzero(mine != ref)[:5]}")
        # dot == sum(dequant * x) within float tolerance
        x = rng.standard_normal(n).astype(np.float32)
        d = np.frombuffer(tool("dot", name, n, blocks.tobytes() + x.tobytes()), np.float32)[0]
        want = float(np.dot(ref.astype(np.float64), x.astype(np.float64)))
        mag = float(np.abs(ref.astype(np.float64) * x).sum())
        check(abs(d - want) <= 1e-5 * mag + 1e-30, f"{name}: dot {d} vs {want}")


def test_decode_llama_files():
    """Blocks made by llama.cpp's quantizer: every tensor of the llama.cpp-quantized files in
    tests/data/llamacpp/ decodes bit for bit as gguf-py decodes it."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "llamacpp")
    names = {v[0]: k for k, v in {**TYPES, **LOWBIT}.items()}
    seen = set()
    for fn in sorted(os.listdir(here)):
        if not fn.endswith(".gguf"):
            continue
        for t in gguf.GGUFReader(os.path.join(here, fn)).tensors:
            if t.tensor_type == T.F32 or t.tensor_type not in names:
                check(t.tensor_type in names, f"{fn}: {t.name} has type {t.tensor_type.name} snug does not know")
                continue
            raw = np.asarray(t.data).reshape(-1).view(np.uint8)
            n = int(np.prod([int(x) for x in t.shape]))
            mine = np.frombuffer(tool("deq", names[t.tensor_type], n, raw.tobytes()), np.float32)
            ref = dequantize(raw, t.tensor_type).reshape(-1).astype(np.float32)
            check(np.array_equal(mine.view(np.uint32), ref.view(np.uint32)),
                  f"{fn}: {t.name} ({t.tensor_type.name}) decodes differently from gguf-py "
                  f"at {np.flatnonzero(mine != ref)[:5]}")
            seen.add(t.tensor_type.name)
    print(f"  llama.cpp files: decoded tensors of types {sorted(seen)} bit-identical to gguf-py", file=sys.stderr)


def llama_lib(name):
    """$SNUG_LLAMA_LIB_DIR/name, or None when the variable is unset."""
    d = os.environ.get("SNUG_LLAMA_LIB_DIR")
    return os.path.join(d, name) if d else None


def load_ggml():
    path = llama_lib("libggml-base.so")
    if not path or not os.path.exists(path):
        print("SKIP: no llama.cpp libggml-base.so (set SNUG_LLAMA_LIB_DIR); K-quant encoders not byte-checked", file=sys.stderr)
        return None
    lib = ctypes.CDLL(path)
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    return lib


def test_encode(rng, ggml):
    n = 256 * 48
    rows = {
        "gauss": rng.standard_normal(n).astype(np.float32),
        "outliers": (rng.standard_normal(n) * np.where(rng.random(n) < 0.01, 30, 1)).astype(np.float32),
        "small": (rng.standard_normal(n) * 1e-4).astype(np.float32),
        "skewed": (np.abs(rng.standard_normal(n)) + 0.5).astype(np.float32),
    }
    rows["zeros_mixed"] = rows["gauss"].copy()
    rows["zeros_mixed"][: 256 * 4] = 0
    for name, (qt, be, bb) in TYPES.items():
        if name == "f32":
            continue
        for kind, x in rows.items():
            mine = np.frombuffer(tool("quant", name, n, x.tobytes()), np.uint8)
            y = dequantize(mine, qt).reshape(-1)
            rm = float(np.sqrt(np.mean((y - x) ** 2) / np.mean(x ** 2)))
            try:
                ref = np.ascontiguousarray(quantize(x.reshape(-1, be * 8 if be > 1 else 256), qt)).reshape(-1).view(np.uint8)
                check(np.array_equal(mine, ref), f"{name}/{kind}: bytes differ from gguf-py quantize "
                      f"({int((mine != ref).sum())} bytes)")
            except NotImplementedError:
                pass
            if ggml is not None and be > 1:
                ref = np.zeros(n // be * bb, np.uint8)
                ggml.ggml_quantize_chunk(int(qt), x.ctypes.data, ref.ctypes.data, 0, 1, n, None)
                yr = dequantize(ref, qt).reshape(-1)
                rr = float(np.sqrt(np.mean((yr - x) ** 2) / np.mean(x ** 2)))
                check(np.array_equal(mine, ref), f"{name}/{kind}: bytes differ from ggml "
                      f"({int((mine != ref).sum())} bytes), rmse {rm:.6f} vs {rr:.6f}")
                check(rm <= rr * 1.0001 + 1e-12, f"{name}/{kind}: rmse {rm} worse than ggml {rr}")
                if kind == "gauss":
                    print(f"  {name:5s} rel rmse snug {rm:.6f}  ggml {rr:.6f}", file=sys.stderr)


def write_model(path, rng, with_output=True):
    w = gguf.GGUFWriter(path, "qwen35")
    w.add_block_count(4)
    w.add_uint32("qwen35.context_length", 4096)
    w.add_string("general.name", "quant-test")
    w.add_uint32("general.file_type", 0)
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    tensors = {
        "token_embd.weight": rng.standard_normal((40, 512)).astype(np.float32),
        "blk.0.attn_norm.weight": rng.standard_normal(512).astype(np.float32),
        "blk.0.attn_qkv.weight": rng.standard_normal((64, 512)).astype(np.float32),
        "blk.0.ssm_conv1d.weight": rng.standard_normal((64, 4)).astype(np.float32),
        "blk.0.ssm_a": rng.standard_normal(16).astype(np.float32),
        "blk.0.ffn_down.weight": rng.standard_normal((512, 768)).astype(np.float32),
        "blk.1.ffn_down.weight": rng.standard_normal((512, 768)).astype(np.float32),
        "blk.1.attn_v.weight": rng.standard_normal((32, 512)).astype(np.float32),
        "blk.1.ffn_up.weight": rng.standard_normal((96, 512)).astype(np.float32),
        "blk.1.odd.weight": rng.standard_normal((8, 96)).astype(np.float32),  # 96 cols: Q4_K -> Q5_0
    }
    if with_output:
        tensors["output.weight"] = rng.standard_normal((40, 512)).astype(np.float32)
    for k, v in tensors.items():
        w.add_tensor(k, v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def run_quantize(src, dst, recipe):
    r = subprocess.run([SNUG_BIN, "quantize", src, dst, recipe, "--threads", "2"], capture_output=True, text=True)
    check(r.returncode == 0, f"snug quantize {recipe}: rc {r.returncode}: {r.stderr[-500:]}")
    return r


def test_cli(rng):
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "in.gguf")
        tensors = write_model(src, rng)
        expect = {  # q4_k_m: n_attn_v = 2: use_more_bits(0,2) no, (1,2) yes (1 >= 7*2/8); ffn_down n=4:
            # use_more_bits(0,4) true (0 < 4/8=0? no; 0 >= 7*4/8=3? no; (0-0)%3==2? no) -> Q4_K
            "q4_k_m": {"token_embd.weight": T.Q4_K, "output.weight": T.Q6_K, "blk.0.attn_norm.weight": T.F32,
                       "blk.0.attn_qkv.weight": T.Q4_K, "blk.1.attn_v.weight": T.Q6_K,
                       "blk.0.ssm_conv1d.weight": T.F32, "blk.0.ssm_a": T.F32,
                       "blk.0.ffn_down.weight": T.Q4_K, "blk.1.ffn_down.weight": T.Q4_K,
                       "blk.1.ffn_up.weight": T.Q4_K, "blk.1.odd.weight": T.Q5_0},
            "q8_0": {k: (T.F32 if v.ndim < 2 or "norm" in k or "conv1d" in k else T.Q8_0) for k, v in tensors.items()},
            "f16": {k: (T.F32 if v.ndim < 2 or "norm" in k or "conv1d" in k else T.F16) for k, v in tensors.items()},
        }
        ftypes = {"q4_k_m": 15, "q8_0": 7, "f16": 1}
        for recipe, want in expect.items():
            dst = os.path.join(d, f"out-{recipe}.gguf")
            r = run_quantize(src, dst, recipe)
            if r.returncode != 0:
                continue
            check("tensors" in r.stderr and "MiB" in r.stderr, f"{recipe}: no summary on stderr")
            rd = gguf.GGUFReader(dst)
            ft = rd.fields["general.file_type"]
            check(int(ft.parts[ft.data[0]][0]) == ftypes[recipe], f"{recipe}: general.file_type")
            nm = rd.fields["general.name"]
            check(bytes(nm.parts[nm.data[0]]).decode() == "quant-test", f"{recipe}: general.name not copied")
            toks = rd.fields["tokenizer.ggml.tokens"]
            check(len(toks.data) == 3, f"{recipe}: token array not copied")
            got = {t.name: t for t in rd.tensors}
            check(set(got) == set(tensors), f"{recipe}: tensor set differs")
            for name, t in got.items():
                want_t = want.get(name)
                check(t.tensor_type == want_t, f"{recipe}: {name} is {t.tensor_type.name}, want {want_t}")
                x = tensors[name].reshape(-1)
                tname = {v[0]: k for k, v in TYPES.items()}[t.tensor_type]
                # data must equal snug's row quantizer on the source (blocks never straddle rows,
                # so quantizing the whole tensor as one row gives the same bytes)
                ref = tool("quant", tname, x.size, x.tobytes())
                check(bytes(np.asarray(t.data).reshape(-1).view(np.uint8)) == ref, f"{recipe}: {name} data differs")
                y = dequantize(np.asarray(t.data), t.tensor_type).reshape(-1)
                err = float(np.sqrt(np.mean((y - x) ** 2) / np.mean(x ** 2)))
                check(err < 0.1, f"{recipe}: {name} rel rmse {err}")
        # requantize a quantized file: q4_k_m -> q8_0 goes through dequantize
        dst2 = os.path.join(d, "re-q8_0.gguf")
        r = run_quantize(os.path.join(d, "out-q4_k_m.gguf"), dst2, "q8_0")
        if r.returncode == 0:
            a = {t.name: t for t in gguf.GGUFReader(os.path.join(d, "out-q4_k_m.gguf")).tensors}
            b = {t.name: t for t in gguf.GGUFReader(dst2).tensors}
            for name in ("blk.0.ffn_down.weight", "output.weight"):
                ya = dequantize(np.asarray(a[name].data), a[name].tensor_type).reshape(-1)
                yb = dequantize(np.asarray(b[name].data), b[name].tensor_type).reshape(-1)
                ref = quantize(ya.reshape(-1, 256).astype(np.float32), T.Q8_0).reshape(-1)
                check(np.array_equal(np.asarray(b[name].data).reshape(-1).view(np.uint8), ref),
                      f"requantized {name} differs from gguf-py q8_0 of the decoded source")
                check(float(np.abs(ya - yb).max()) < 0.05 * float(np.abs(ya).max()), f"requantized {name} drifted")
        # errors: unknown type, missing file
        r = subprocess.run([SNUG_BIN, "quantize", src, os.path.join(d, "x.gguf"), "q3_k_xl"], capture_output=True, text=True)
        check(r.returncode != 0 and "unknown type" in r.stderr, f"unknown type accepted: {r.stderr}")
        # a 1-3 bit mix without an importance matrix: refused with a message that says why
        r = subprocess.run([SNUG_BIN, "quantize", src, os.path.join(d, "x.gguf"), "iq2_xxs"], capture_output=True, text=True)
        check(r.returncode != 0 and "needs an importance matrix" in r.stderr and "--imatrix" in r.stderr,
              f"iq2_xxs quantize without imatrix not refused clearly: {r.stderr}")
        # iq3_s needs none: its IQ3_S tensors decode (by gguf-py) close to the source
        dst3 = os.path.join(d, "out-iq3_s.gguf")
        if run_quantize(src, dst3, "iq3_s").returncode == 0:
            n_iq3 = 0
            for t in gguf.GGUFReader(dst3).tensors:
                if t.tensor_type != T.IQ3_S:
                    continue
                n_iq3 += 1
                x = tensors[t.name].reshape(-1)
                y = dequantize(np.asarray(t.data), t.tensor_type).reshape(-1)
                err = float(np.sqrt(np.mean((y - x) ** 2) / np.mean(x ** 2)))
                check(err < 0.3, f"iq3_s: {t.name} rel rmse {err} (gguf-py decode)")
            check(n_iq3 > 0, "iq3_s: no IQ3_S tensor written")
        r = subprocess.run([SNUG_BIN, "quantize", os.path.join(d, "nope.gguf"), os.path.join(d, "x.gguf"), "q8_0"],
                           capture_output=True, text=True)
        check(r.returncode != 0 and "nope.gguf" in r.stderr, f"missing input not reported: {r.stderr}")


class QuantParams(ctypes.Structure):
    """llama.cpp include/llama.h `llama_model_quantize_params` (field order and types)."""
    _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int), ("output_tensor_type", ctypes.c_int),
                ("token_embedding_type", ctypes.c_int), ("allow_requantize", ctypes.c_bool),
                ("quantize_output_tensor", ctypes.c_bool), ("only_copy", ctypes.c_bool), ("pure", ctypes.c_bool),
                ("keep_split", ctypes.c_bool), ("dry_run", ctypes.c_bool), ("imatrix", ctypes.c_void_p),
                ("kv_overrides", ctypes.c_void_p), ("tt_overrides", ctypes.c_void_p),
                ("prune_layers", ctypes.c_void_p), ("max_buf_size", ctypes.c_size_t)]


def fixtures_dir():
    d = os.environ.get("SNUG_FIXTURES") or os.path.join(
        os.environ.get("SNUG_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")),
        "..", "shared", "fixtures")
    if os.path.isdir(d):
        return d
    if os.environ.get("SNUG_REQUIRE_FIXTURES") == "1":
        check(False, f"fixtures folder {d} is missing and SNUG_REQUIRE_FIXTURES=1")
    else:
        print(f"SKIP: fixtures folder {d} is missing (set SNUG_FIXTURES)", file=sys.stderr)
    return None


def test_vs_llama():
    fx = fixtures_dir()
    lib_path = llama_lib("libllama.so")
    if fx is None:
        return
    if not lib_path or not os.path.exists(lib_path):
        print("SKIP: no llama.cpp libllama.so (set SNUG_LLAMA_LIB_DIR); no comparison with its quantizer", file=sys.stderr)
        return
    lib = ctypes.CDLL(lib_path)
    lib.llama_model_quantize_default_params.restype = QuantParams
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(QuantParams)]
    lib.llama_model_quantize.restype = ctypes.c_uint32
    cases = [("trained/trained-f16.gguf", "q4_k_m", 15), ("trained/trained-f16.gguf", "q5_k_m", 17),
             ("trained/trained-f16.gguf", "q4_0", 2), ("moe/moe-f16.gguf", "q4_k_m", 15)]
    with tempfile.TemporaryDirectory() as d:
        for src_rel, recipe, ftype in cases:
            src = os.path.join(fx, src_rel)
            if not os.path.exists(src):
                check(False, f"fixture {src} missing")
                continue
            ours, ref = os.path.join(d, "snug.gguf"), os.path.join(d, "ref.gguf")
            if run_quantize(src, ours, recipe).returncode != 0:
                continue
            p = lib.llama_model_quantize_default_params()
            p.ftype, p.nthread = ftype, 2
            # llama.cpp logs to stderr; keep the test output readable
            saved = os.dup(2)
            with open(os.devnull, "w") as dn:
                os.dup2(dn.fileno(), 2)
                try:
                    rc = lib.llama_model_quantize(src.encode(), ref.encode(), ctypes.byref(p))
                finally:
                    os.dup2(saved, 2)
                    os.close(saved)
            check(rc == 0, f"llama_model_quantize {src_rel} {recipe} failed ({rc})")
            if rc != 0:
                continue
            a, b = gguf.GGUFReader(ours), gguf.GGUFReader(ref)
            check([t.name for t in a.tensors] == [t.name for t in b.tensors], f"{src_rel} {recipe}: tensor order")
            check(set(a.fields) == set(b.fields), f"{src_rel} {recipe}: keys {set(a.fields) ^ set(b.fields)}")
            tb = {t.name: t for t in b.tensors}
            ndiff = 0
            for t in a.tensors:
                u = tb.get(t.name)
                same = u is not None and t.tensor_type == u.tensor_type and np.array_equal(
                    np.asarray(t.data).reshape(-1).view(np.uint8), np.asarray(u.data).reshape(-1).view(np.uint8))
                if not same:
                    ndiff += 1
                    print(f"  {recipe} {t.name}: snug {t.tensor_type.name} vs llama.cpp "
                          f"{u.tensor_type.name if u else None}", file=sys.stderr)
            check(ndiff == 0, f"{src_rel} {recipe}: {ndiff} tensors differ from llama.cpp's quantization")
            print(f"  {src_rel} {recipe}: {len(a.tensors)} tensors identical to llama.cpp: {ndiff == 0}",
                  file=sys.stderr)


def main():
    rng = np.random.default_rng(1234)
    test_decode(rng)
    test_decode_llama_files()
    test_encode(rng, load_ggml())
    if os.path.exists(SNUG_BIN):
        test_cli(rng)
        test_vs_llama()
    else:
        check(False, f"snug binary {SNUG_BIN} missing")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
