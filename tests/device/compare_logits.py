#!/usr/bin/env python3
"""compare_logits.py — compare engine logits with a fixture's reference logits (device e2e run).

usage: compare_logits.py ENGINE.f32 REF.f32 V [--greedy GREEDY.json --offset N]
Prints per-position KL(ref || engine) median/p95/max and top-1 agreement; with --greedy, also
checks that argmax of engine rows offset-1 .. offset+len-2 equals the greedy tokens (the decode
path, teacher forced: identical argmax at every step = identical greedy continuation).
Exit status 1 when median KL > 1e-4 or a greedy token differs in the first 16.
"""
import json
import sys

import numpy as np


def kl_rows(ref, eng):
    def lsm(x):
        x = x.astype(np.float64)
        m = x.max(axis=1, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))
    lp, lq = lsm(ref), lsm(eng)
    return (np.exp(lp) * (lp - lq)).sum(axis=1)


def main():
    eng_path, ref_path, V = sys.argv[1], sys.argv[2], int(sys.argv[3])
    eng = np.fromfile(eng_path, dtype=np.float32).reshape(-1, V)
    ref = np.fromfile(ref_path, dtype=np.float32).reshape(-1, V)
    ok = True
    if "--greedy" in sys.argv:
        greedy = json.load(open(sys.argv[sys.argv.index("--greedy") + 1]))
        off = int(sys.argv[sys.argv.index("--offset") + 1])
        rows = eng[off - 1: off - 1 + len(greedy)]
        am = rows.argmax(axis=1).tolist()
        same = 0
        while same < len(greedy) and am[same] == greedy[same]:
            same += 1
        print(f"greedy: first {same}/{len(greedy)} tokens identical")
        ok &= same >= min(16, len(greedy))
        eng = rows
    n = min(len(eng), len(ref))
    kl = kl_rows(ref[:n], eng[:n])
    top1 = (ref[:n].argmax(1) == eng[:n].argmax(1)).mean() * 100
    print(f"KL median {np.median(kl):.3g} p95 {np.percentile(kl, 95):.3g} max {kl.max():.3g} "
          f"top-1 {top1:.2f}% over {n} rows")
    ok &= float(np.median(kl)) <= 1e-4
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
