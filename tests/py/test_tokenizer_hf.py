#!/usr/bin/env python3
"""test_tokenizer_hf.py — snug's tokenizer against an independent implementation.

Builds a tokenizer.json for Hugging Face `tokenizers` from the ggml-vocab-qwen35 GGUF's tokens,
merges and token types (read in Python with the `gguf` package's type table, not snug's reader), with the Qwen3.5 split regex,
ByteLevel and NFC, then encodes >= 1 MB of deterministic mixed text (stdlib Python source, prose
in many scripts, emoji with ZWJ and skin tones, combining marks, whitespace runs, tabs/CRLF,
digit runs, special tokens) both with HF and with `snug tokenize --file` in ~64 KB pieces, and
requires identical ids. Env: SNUG_BIN, SNUG_SOURCE_DIR, SNUG_FIXTURES, SNUG_REQUIRE_FIXTURES.
"""
import glob
import json
import os
import random
import subprocess
import sys
import sysconfig
import tempfile

PASSED = 0
FAILED = 0


def check(cond, msg):
    global PASSED, FAILED
    if cond:
        PASSED += 1
    else:
        FAILED += 1
        print("FAIL: " + msg, file=sys.stderr)


def done():
    print(f"{PASSED} passed, {FAILED} failed")
    sys.exit(1 if FAILED else 0)


def fixtures_dir():
    d = os.environ.get("SNUG_FIXTURES")
    if not d:
        src = os.environ.get("SNUG_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
        d = os.path.join(src, "..", "shared", "fixtures")
    if os.path.isdir(d):
        return d
    if os.environ.get("SNUG_REQUIRE_FIXTURES") == "1":
        check(False, f"fixtures folder {d} is missing and SNUG_REQUIRE_FIXTURES=1")
    else:
        print(f"SKIP: fixtures folder {d} is missing (set SNUG_FIXTURES)", file=sys.stderr)
    return None


# The Qwen3.5 pre-tokenizer regex (docs/qwen35.md §5.3; the same string as in the fixture's
# tokenizer.json).
QWEN35_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
             r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def read_tokenizer_kv(path):
    """The tokenizer.ggml.{tokens,token_type,merges} arrays of a GGUF.

    Uses the PyPI `gguf` package's value-type table and a direct little-endian walk of the
    key/value section (the layout documented in gguf's README): gguf.GGUFReader builds a numpy
    view per array element and needs ~10 s of CPU for a 151K-token vocabulary, too slow here.
    """
    import struct
    from gguf import GGUFValueType as T

    scalar = {T.UINT8: "B", T.INT8: "b", T.UINT16: "H", T.INT16: "h", T.UINT32: "I",
              T.INT32: "i", T.FLOAT32: "f", T.BOOL: "?", T.UINT64: "Q", T.INT64: "q",
              T.FLOAT64: "d"}
    with open(path, "rb") as fh:
        buf = fh.read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<IIQQ", buf, 0)
    assert buf[:4] == b"GGUF" and version == 3, f"{path}: not a GGUF v3 file"
    off = 24

    def read_str(off):
        (n,) = struct.unpack_from("<Q", buf, off)
        return buf[off + 8:off + 8 + n].decode("utf-8"), off + 8 + n

    def read_val(t, off):
        t = T(t)
        if t == T.STRING:
            return read_str(off)
        if t == T.ARRAY:
            et, n = struct.unpack_from("<IQ", buf, off)
            off += 12
            if T(et) in scalar:
                fmt = "<%d%s" % (n, scalar[T(et)])
                return list(struct.unpack_from(fmt, buf, off)), off + struct.calcsize(fmt)
            out = []
            for _ in range(n):
                v, off = read_val(et, off)
                out.append(v)
            return out, off
        fmt = "<" + scalar[t]
        return struct.unpack_from(fmt, buf, off)[0], off + struct.calcsize(fmt)

    kv = {}
    for _ in range(n_kv):
        key, off = read_str(off)
        (t,) = struct.unpack_from("<I", buf, off)
        kv[key], off = read_val(t, off + 4)
    return kv


def hf_tokenizer_from_gguf(path):
    """A `tokenizers.Tokenizer` built only from the GGUF's tokenizer.ggml.* arrays."""
    from tokenizers import Tokenizer

    kv = read_tokenizer_kv(path)
    tokens = kv["tokenizer.ggml.tokens"]
    merges = kv["tokenizer.ggml.merges"]
    types = kv["tokenizer.ggml.token_type"]
    check(kv["tokenizer.ggml.pre"] == "qwen35", "ggml-vocab-qwen35.gguf: pre is not qwen35")
    vocab, added = {}, []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty in (3, 4):  # CONTROL -> special, USER_DEFINED -> added, non-special
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": ty == 3})
        else:
            vocab.setdefault(t, i)
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN35_RE}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    return Tokenizer.from_str(json.dumps(spec))


# ---- deterministic mixed text ---------------------------------------------------------------
WORDS = {
    "latin": "café naïve façade résumé Ångström smörgåsbord jalapeño crème brûlée Zürich "
             "São Paulo Łódź Dvořák straße œuvre Æsir fjörður ĳssel".split(),
    "cyrillic": "Привет мир съешь же ещё этих мягких французских булок да выпей чаю "
                "Українська мова Ђорђе".split(),
    "greek": "Καλημέρα κόσμε ξεσκεπάζω την ψυχοφθόρα βδελυγμία ΆΈΉΊΌΎΏ ΐΰ".split(),
    "arabic": "مرحبا بالعالم صِفْ خَلْقَ خَوْدٍ كَمِثْلِ الشَّمْسِ إِذْ بَزَغَتْ ١٢٣٤٥".split(),
    "hindi": "नमस्ते दुनिया ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने "
             "वाले विष्णुवतार भगवान श्रीराम ०१२३".split(),
    "cjk": "日本語のテキスト 我想在apple工作 敏捷的棕色狐狸跳过了懒狗 いろはにほへと ｶﾀｶﾅ "
           "中文標點，。！？".split(),
    "korean": "안녕하세요 다람쥐 헌 쳇바퀴에 타고파 키스의 고유조건은 입술끼리 만나야".split(),
    "thai": "ไทย เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน ๑๒๓".split(),
}
EMOJI = ["🦙", "🔥", "👍", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "😶‍🌫️", "🇫🇷", "❤️", "✅",
         "🧑🏿‍🚀", "👋🏻", "🤷‍♀️", "1️⃣", "🚀"]
COMBINING = [chr(c) for c in range(0x300, 0x370)] + ["\u0951", "\u093c", "\u0e31", "\u0e48",
                                                      "\u20dd", "\u0651", "\u064e"]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\n",
            "<|im_end|>\n<|im_start|>assistant\n"]
# code point ranges assigned long ago (stable across Unicode versions)
RANGES = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF),
          (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE5B), (0x1100, 0x11FF), (0x2000, 0x206F),
          (0x3040, 0x30FF), (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF)]


def prose(rng, n_chars):
    out, size = [], 0
    scripts = list(WORDS)
    while size < n_chars:
        kind = rng.random()
        if kind < 0.55:
            words = WORDS[rng.choice(scripts)]
            piece = " ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
            piece += rng.choice([". ", ", ", "! ", "? ", "\n", "\n\n", " — ", "; ", ": "])
        elif kind < 0.65:
            piece = "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 4))) + rng.choice(
                [" ", "", "\n", "!"])
        elif kind < 0.72:  # letters with combining marks (some compose under NFC)
            piece = "".join(rng.choice("aeiouAEIOUnNcCsSzZyY") +
                            "".join(rng.choice(COMBINING) for _ in range(rng.randint(0, 3)))
                            for _ in range(rng.randint(1, 8))) + " "
        elif kind < 0.79:  # whitespace runs, tabs, CRLF
            piece = "".join(rng.choice([" ", "  ", "\t", "\r\n", "\n", "\r", "\u00a0", "\u3000",
                                        "\u2003", "\v", "\f"]) for _ in range(rng.randint(1, 10)))
        elif kind < 0.86:  # digit runs, numbers
            piece = rng.choice(["", " ", "$", "-", "+"]) + "".join(
                rng.choice("0123456789") for _ in range(rng.randint(1, 25))) + rng.choice(
                [" ", ".", ",", "e-10", "%", "\n", "٣", "०"])
        elif kind < 0.94:  # random code points from stable blocks
            lo, hi = rng.choice(RANGES)
            piece = "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 20)))
        elif kind < 0.97:  # contractions in odd cases
            piece = rng.choice(["I'M ", "we'Re ", "they'LL ", "'s ", "'D ", "don't ", "'ve'", "''"])
        else:
            piece = rng.choice(SPECIALS)
        out.append(piece)
        size += len(piece)
    return "".join(out)


def stdlib_source(n_bytes):
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    out, size = [], 0
    for f in files:
        if size >= n_bytes:
            break
        try:
            with open(f, encoding="utf-8") as fh:
                s = fh.read()
        except (UnicodeDecodeError, OSError):
            continue
        out.append(s)
        size += len(s.encode())
    return "".join(out)


def pieces(text, target_bytes):
    """Cut text into pieces of about target_bytes UTF-8 bytes (at character boundaries)."""
    out, cur, size = [], [], 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        size += len(line.encode())
        if size >= target_bytes:
            out.append("".join(cur))
            cur, size = [], 0
    if cur:
        out.append("".join(cur))
    return out


def main():
    fx = fixtures_dir()
    if not fx:
        done()
    snug = os.environ.get("SNUG_BIN")
    check(bool(snug) and os.path.exists(snug), f"SNUG_BIN ({snug}) must name the snug binary")
    if FAILED:
        done()
    path = os.path.join(fx, "tokenizer", "ggml-vocab-qwen35.gguf")
    hf = hf_tokenizer_from_gguf(path)

    rng = random.Random(1234)
    texts = pieces(stdlib_source(500_000), 64_000) + pieces(prose(rng, 260_000), 64_000)
    # a few hand-made edge cases as their own pieces
    texts += ["", " ", "\n", "   \n\n\t", "e\u0301\u0302 a\u0300", "\u1100\u1161\u11a8",
              "<|im_start|><|im_start|>x<|im_end|>", "don'T I'LL", "ﬁﬂ Å Ω K",
              "\r\n\r\n  \r\n", "9" * 300, "a" * 5000 + " " + "ab" * 3000]
    total = 0
    mismatches = 0
    with tempfile.TemporaryDirectory() as tmp:
        f = os.path.join(tmp, "piece.txt")
        for k, t in enumerate(texts):
            data = t.encode("utf-8")
            total += len(data)
            with open(f, "wb") as fh:
                fh.write(data)
            r = subprocess.run([snug, "tokenize", "-m", path, "--file", f], capture_output=True)
            if r.returncode != 0:
                check(False, f"piece {k}: snug failed: {r.stderr.decode(errors='replace')}")
                continue
            got = json.loads(r.stdout)
            want = hf.encode(t, add_special_tokens=False).ids
            same = got == want
            if not same:
                mismatches += 1
                i = next((j for j in range(min(len(got), len(want))) if got[j] != want[j]),
                         min(len(got), len(want)))
                ctx_w = hf.decode(want[max(0, i - 3):i + 5])
                print(f"piece {k}: {len(got)} vs {len(want)} ids, first diff at {i}: snug "
                      f"{got[max(0, i - 3):i + 5]} hf {want[max(0, i - 3):i + 5]} "
                      f"near {ctx_w!r}", file=sys.stderr)
            check(same, f"piece {k} ({len(data)} bytes) differs from HF tokenizers")
    check(total >= 1_000_000, f"compared only {total} bytes")
    print(f"compared {total} bytes in {len(texts)} pieces with HF tokenizers: "
          f"{len(texts) - mismatches} identical", file=sys.stderr)
    done()


if __name__ == "__main__":
    main()
