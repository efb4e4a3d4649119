"""snugtest.py — shared helpers for the Python tests: fixture lookup (skip or fail as the C
harness does), running the snug binary, reading float32 logits, KL statistics, and the
"N passed, N failed" closing line."""
import json
import os
import subprocess
import sys

import numpy as np

SRC = os.environ.get("SNUG_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SNUG = os.environ.get("SNUG_BIN", os.path.join(SRC, "build", "snug"))


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, cond, what):
        if cond:
            self.passed += 1
            print(f"ok   {what}")
        else:
            self.failed += 1
            print(f"FAIL {what}")

    def done(self):
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)


def fixtures_dir(res):
    """The fixtures folder, or None after a visible SKIP (a failure with SNUG_REQUIRE_FIXTURES=1)."""
    path = os.environ.get("SNUG_FIXTURES") or os.path.join(SRC, "..", "shared", "fixtures")
    if os.path.isdir(path):
        return os.path.abspath(path)
    if os.environ.get("SNUG_REQUIRE_FIXTURES") == "1":
        res.check(False, f"fixtures folder {path} present (SNUG_REQUIRE_FIXTURES=1)")
    else:
        print(f"SKIP: fixtures folder {path} is missing (set SNUG_FIXTURES)")
    return None


def run(*args, check=True, timeout=600):
    p = subprocess.run([SNUG, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"snug {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p


def read_f32(path, rows, cols):
    return np.fromfile(path, dtype="<f4").reshape(rows, cols)


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def kl_stats(ref, got):
    """Per-position KL(ref || got) over the vocabulary; returns (median, p95, p99, top1 agreement)."""
    lp, lq = log_softmax(ref), log_softmax(got)
    kl = (np.exp(lp) * (lp - lq)).sum(axis=-1)
    top1 = float((ref.argmax(-1) == got.argmax(-1)).mean())
    return float(np.median(kl)), float(np.percentile(kl, 95)), float(np.percentile(kl, 99)), top1


def load_json(path):
    with open(path) as f:
        return json.load(f)
