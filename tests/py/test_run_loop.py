"""test_run_loop.py — `snug run` through the shared generation loop (src/engine/sequence.c) gives
what it gave before the loop was shared with the server.

tests/data/run/run_expected.json holds the outputs of `snug run` on the trained fixture, recorded
with the binary that had its own loop: four prompts, each greedy, greedy with --spec-draft 3,
seeded sampling at temperature 1 with and without --spec-draft 3, and seeded sampling with a
repeat penalty and --spec-draft 2 (the sampled cases with drafts recorded again since the
acceptance draws with the sampler's own generator), each run with `--spec-adapt off` (a fixed
number of drafts per step, the only kind that binary had). Every case must print the same text,
count the same generated tokens and (speculative cases) the same verifications and accepted /
proposed drafts. With drafts the output is plain decoding's (the speculative invariant on the
CPU): greedy, and seeded sampling with the same seed, with drafts equal the same run without
them — also with the draft count chosen per step (`--spec-adapt on`, the default), whose
statistics line says how many drafts the steps ran. Prints "N passed, N failed"; skips visibly
without fixtures, fails with SNUG_REQUIRE_FIXTURES=1.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SRC, Results, fixtures_dir, run  # noqa: E402


def main():
    res = Results()
    fx = fixtures_dir(res)
    if fx is None:
        res.done()
    model = os.path.join(fx, "trained", "trained-f16.gguf")
    cases = json.load(open(os.path.join(SRC, "tests", "data", "run", "run_expected.json")))["cases"]
    same = {}  # (prompt, the arguments but --spec-draft): the texts printed
    for c in cases:
        # --spec-adapt off: a fixed number of drafts at every step, as the recording had (the
        # adaptation would choose the counts from measured times, and the statistics move)
        p = run("run", "-m", model, "-p", c["prompt"], "-n", 48, "--threads", 2, *c["args"],
                "--spec-adapt", "off")
        what = f"{c['prompt']!r} {' '.join(c['args'])}"
        res.check(p.stdout == c["text"], f"{what}: same text as before ({p.stdout[:40]!r})")
        g = re.search(r"generation (\d+) tokens", p.stderr)
        res.check(g and int(g.group(1)) == c["n_gen"], f"{what}: {c['n_gen']} tokens generated")
        v = re.search(r"(\d+) verifications, [0-9.]+ tokens per verification, (\d+) of (\d+) drafts",
                      p.stderr)
        got = [int(v.group(1)), int(v.group(2)), int(v.group(3))] if v else None
        res.check(got == c["spec"], f"{what}: speculative statistics {got} == {c['spec']}")
        a = list(c["args"])
        if "--spec-draft" in a:
            del a[a.index("--spec-draft"):a.index("--spec-draft") + 2]
        same.setdefault((c["prompt"], tuple(a)), set()).add(p.stdout)
    for (prompt, args), texts in same.items():
        p = run("run", "-m", model, "-p", prompt, "-n", 48, "--threads", 2, *args,
                "--spec-draft", "3")
        texts.add(p.stdout)
        texts.add(run("run", "-m", model, "-p", prompt, "-n", 48, "--threads", 2, *args).stdout)
        res.check(len(texts) == 1, f"{prompt!r} {' '.join(args)}: with drafts (fixed and "
                                   f"adaptive) == without")
        d = re.search(r"draft length \(--spec-adapt on\): ([0-9.]+) drafts per step over (\d+) "
                      r"steps", p.stderr)
        res.check(d and 0 < float(d.group(1)) <= 3 and int(d.group(2)) > 0,
                  f"{prompt!r}: --spec-adapt on reports its drafts per step "
                  f"({d.group(0) if d else p.stderr[-300:]})")
    res.done()


if __name__ == "__main__":
    main()
