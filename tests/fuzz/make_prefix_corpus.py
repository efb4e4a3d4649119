#!/usr/bin/env python3
"""make_prefix_corpus.py — seeds for tests/fuzz/fuzz_prefix.c: valid checkpoint file images in
the layout of docs/prefix-cache.md (model identity 32 x 0x5A, layout "fuzz", 40 state bytes,
8-byte KV rows: the fuzz target's expectation), each written twice: mode byte 0 (in-memory
check) and 1 (through the folder loader). Usage: make_prefix_corpus.py OUT_DIR"""
import os
import struct
import sys


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def image(pos, base, parent_key):
    tokens = struct.pack("<%di" % pos, *range(pos))
    payload = tokens + bytes(range(40)) + bytes((i * 3) & 0xFF for i in range((pos - base) * 8))
    key = 0x1234567890ABCDEF + pos
    h = bytearray(256)
    h[0:8] = b"SNUGPFX\0"
    struct.pack_into("<II", h, 8, 2, 256)  # version 2
    h[16:48] = b"\x5a" * 32
    h[48:52] = b"fuzz"
    struct.pack_into("<QQiiQQQI", h, 112, 40, 8, pos, base, key, parent_key, len(payload),
                     crc32c(payload))
    struct.pack_into("<I", h, 252, crc32c(bytes(h[:252])))
    return bytes(h) + payload


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, img in (("pos5", image(5, 0, 0)), ("pos9_base4", image(9, 4, 77))):
        for mode in (0, 1):
            with open(os.path.join(out, "%s_m%d" % (name, mode)), "wb") as f:
                f.write(bytes([mode]) + img)


if __name__ == "__main__":
    main()
