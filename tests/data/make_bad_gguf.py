#!/usr/bin/env python3
"""make_bad_gguf.py — writes the malformed-GGUF corpus in tests/data/gguf-bad/.

Each file is a small, hand-assembled GGUF v3 image (layout from ggml's docs/gguf.md) with one
defect; EXPECTED.tsv lists "file<TAB>substring": snug_gguf_open must fail with a message that
contains the substring (tests/unit/test_gguf.c checks it). Also writes the valid base image and
a few variants as fuzz seeds into tests/fuzz/corpus-gguf/. Run: python3 tests/data/make_bad_gguf.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "gguf-bad")
SEEDS = os.path.join(HERE, "..", "fuzz", "corpus-gguf")

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)


def gstr(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, payload):
    return gstr(key) + struct.pack("<I", typ) + payload


def kv_u32(key, v):
    return kv(key, U32, struct.pack("<I", v))


def kv_str(key, v):
    return kv(key, STR, gstr(v))


def arr(elem, items):
    return struct.pack("<IQ", elem, len(items)) + b"".join(items)


def tinfo(name, ne, typ, off):
    return (gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
            + struct.pack("<IQ", typ, off))


def image(kvs, tinfos, data=b"", magic=b"GGUF", version=3, n_tensors=None, n_kv=None, align=32):
    head = magic + struct.pack("<IQQ", version, len(tinfos) if n_tensors is None else n_tensors,
                               len(kvs) if n_kv is None else n_kv)
    head += b"".join(kvs) + b"".join(tinfos)
    head += b"\0" * ((align - len(head) % align) % align)
    return head + data


BASE_KVS = [
    kv_str("general.architecture", "test"),
    kv("test.list", ARR, arr(U32, [struct.pack("<I", i) for i in range(4)])),
    kv("tokenizer.ggml.tokens", ARR, arr(STR, [gstr("a"), gstr("bc"), gstr("")])),
]
F32_T = 0
BASE_TS = [tinfo("a", [8], F32_T, 0), tinfo("b", [8, 2], F32_T, 32)]
BASE_DATA = bytes(range(32)) + bytes(64)


def base(**kw):
    args = dict(kvs=BASE_KVS, tinfos=BASE_TS, data=BASE_DATA)
    args.update(kw)
    return image(args.pop("kvs"), args.pop("tinfos"), args.pop("data"), **args)


def cases():
    c = {}
    good = base()
    c["bad_magic.gguf"] = (b"GGML" + good[4:], "bad magic")
    c["text_file.gguf"] = (b"hello, this is not a model\n", "bad magic")
    c["empty.gguf"] = (b"", "empty")
    c["version2.gguf"] = (base(version=2), "unsupported GGUF version 2")
    c["version4.gguf"] = (base(version=4), "unsupported GGUF version 4")
    c["big_endian.gguf"] = (base(version=0x03000000), "big-endian")
    # Truncations at many points of the valid image.
    for cut in [3, 4, 7, 12, 20, 23, 30, 40, 60, 90, 120, 150, len(good) - 97, len(good) - 60,
                len(good) - 1]:
        c["trunc_%04d.gguf" % cut] = (good[:cut], "truncated")
    c["absurd_n_kv.gguf"] = (base(n_kv=1 << 62), "n_kv = ")
    c["absurd_n_tensors.gguf"] = (base(n_tensors=(1 << 64) - 1), "n_tensors = ")
    c["absurd_key_len.gguf"] = (
        image([struct.pack("<Q", 1 << 62) + b"general"], [], n_kv=1), "string length")
    c["absurd_str_len.gguf"] = (
        image([kv("general.name", STR, struct.pack("<Q", (1 << 64) - 1) + b"x")], []),
        "string length")
    c["absurd_arr_count.gguf"] = (
        image([kv("test.arr", ARR, struct.pack("<IQ", U32, 1 << 61) + bytes(16))], []),
        "array count")
    c["absurd_str_arr_count.gguf"] = (
        image([kv("test.arr", ARR, struct.pack("<IQ", STR, 1 << 40) + bytes(16))], []),
        "array count")
    c["unknown_kv_type.gguf"] = (image([kv("test.x", 13, bytes(8))], []), "unknown value type 13")
    c["unknown_arr_type.gguf"] = (
        image([kv("test.x", ARR, struct.pack("<IQ", 99, 1) + bytes(8))], []),
        "unknown array element type 99")
    nested = struct.pack("<IQ", U8, 0)
    for _ in range(12):
        nested = struct.pack("<IQ", ARR, 1) + nested
    c["nested_too_deep.gguf"] = (image([kv("test.x", ARR, nested)], []), "nested deeper")
    c["nested_truncated.gguf"] = (
        image([kv("test.x", ARR, struct.pack("<IQ", ARR, 2) + struct.pack("<IQ", U32, 1000))], []),
        "truncated")
    c["key_with_nul.gguf"] = (image([kv_str("general.na\0me", "x")], []), "contains a NUL byte")
    c["tensor_with_nul.gguf"] = (base(tinfos=[tinfo("a\0", [8], F32_T, 0)]), "contains a NUL")
    c["dup_key.gguf"] = (base(kvs=BASE_KVS + [kv_str("general.architecture", "again")]),
                         "duplicate key 'general.architecture'")
    c["dup_tensor.gguf"] = (base(tinfos=[tinfo("a", [8], F32_T, 0), tinfo("a", [8], F32_T, 32)]),
                            "duplicate tensor name 'a'")
    c["n_dims_0.gguf"] = (base(tinfos=[tinfo("a", [], F32_T, 0)]), "n_dims = 0")
    c["n_dims_5.gguf"] = (base(tinfos=[tinfo("a", [1, 1, 1, 1, 1], F32_T, 0)]), "n_dims = 5")
    c["ne_zero.gguf"] = (base(tinfos=[tinfo("a", [8, 0], F32_T, 0)]), "ne[1] = 0")
    c["ne_negative.gguf"] = (base(tinfos=[tinfo("a", [(1 << 64) - 8], F32_T, 0)]), "ne[0] = ")
    c["elem_overflow.gguf"] = (base(tinfos=[tinfo("a", [1 << 32, 1 << 32, 2], F32_T, 0)]),
                               "overflows")
    c["bytes_overflow.gguf"] = (base(tinfos=[tinfo("a", [1 << 62], F32_T, 0)]), "overflows")
    c["unknown_type.gguf"] = (base(tinfos=[tinfo("a", [8], 99, 0)]), "unknown tensor type 99")
    c["removed_type_4.gguf"] = (base(tinfos=[tinfo("a", [32], 4, 0)]), "unknown tensor type 4")
    c["bad_block_multiple.gguf"] = (base(tinfos=[tinfo("a", [33], 2, 0)]),
                                    "not a multiple of the q4_0 block size")
    c["misaligned_offset.gguf"] = (base(tinfos=[tinfo("a", [8], F32_T, 0),
                                                tinfo("b", [8, 2], F32_T, 36)]),
                                   "not a multiple of the alignment")
    c["data_out_of_range.gguf"] = (base(tinfos=[tinfo("a", [8], F32_T, 0),
                                                tinfo("b", [8, 2], F32_T, 1 << 40)]),
                                   "outside the data section")
    c["offset_wraps.gguf"] = (base(tinfos=[tinfo("a", [8], F32_T, (1 << 64) - 32)]),
                              "outside the data section")
    c["overlap.gguf"] = (base(tinfos=[tinfo("a", [8], F32_T, 0), tinfo("b", [8, 2], F32_T, 0)]),
                         "overlaps")
    c["overlap_partial.gguf"] = (base(tinfos=[tinfo("a", [16], F32_T, 0),
                                              tinfo("b", [8], F32_T, 32)]), "overlaps")
    for name, payload, typ, want in [
        ("align_zero.gguf", struct.pack("<I", 0), U32, "power of two"),
        ("align_three.gguf", struct.pack("<I", 3), U32, "power of two"),
        ("align_u64.gguf", struct.pack("<Q", 32), U64, "expected u32"),
    ]:
        c[name] = (base(kvs=BASE_KVS + [kv("general.alignment", typ, payload)]), want)
    c["split_count_unnamed.gguf"] = (
        base(kvs=BASE_KVS + [kv("split.count", U16, struct.pack("<H", 3))]), "split.count")
    return c


def main():
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(SEEDS, exist_ok=True)
    rows = ["# file\texpected substring of the error (written by make_bad_gguf.py)"]
    for name, (data, want) in sorted(cases().items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        rows.append("%s\t%s" % (name, want))
    with open(os.path.join(OUT, "EXPECTED.tsv"), "w") as f:
        f.write("\n".join(rows) + "\n")
    seeds = {
        "base.gguf": base(),
        "align64.gguf": image(BASE_KVS + [kv_u32("general.alignment", 64)], BASE_TS,
                              BASE_DATA + bytes(32), align=64),
        "nested.gguf": image([kv("test.x", ARR, struct.pack("<IQ", ARR, 1)
                                 + struct.pack("<IQ", I16, 2) + bytes(4))], []),
        "scalars.gguf": image([kv("k%d" % t, t, bytes([1] * n)) for t, n in
                               [(U8, 1), (I8, 1), (U16, 2), (I16, 2), (U32, 4), (I32, 4), (F32, 4),
                                (BOOL, 1), (U64, 8), (I64, 8), (F64, 8)]], []),
        "q4_0.gguf": image([kv_str("general.architecture", "x")],
                           [tinfo("w", [32, 2], 2, 0)], bytes(64)),
    }
    for name, data in seeds.items():
        with open(os.path.join(SEEDS, name), "wb") as f:
            f.write(data)
    print("wrote %d bad files and %d seeds" % (len(rows) - 1, len(seeds)))


if __name__ == "__main__":
    main()
