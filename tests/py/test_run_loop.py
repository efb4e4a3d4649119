"""test_run_loop.py — `snug run` through the shared generation loop (src/engine/sequence.c) gives
what it gave before the loop was shared with the server.

tests/data/run/run_expected.json holds the outputs of `snug run` on the trained fixture, recorded
with the binary that had its own loop: four prompts, each greedy, greedy with --spec-draft 3,
seeded sampling at temperature 1 with and without --spec-draft 3, and seeded sampling with a
repeat penalty and --spec-draft 2. Every case must print the same text, count the same generated
tokens and (speculative cases) the same verifications and accepted / proposed drafts; greedy
with drafts must equal greedy without them (the speculative invariant on the CPU). Prints
"N passed, N failed"; skips visibly without fixtures, fails with SNUG_REQUIRE_FIXTURES=1.
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
    greedy = {}
    for c in cases:
        p = run("run", "-m", model, "-p", c["prompt"], "-n", 48, "--threads", 2, *c["args"])
        what = f"{c['prompt']!r} {' '.join(c['args'])}"
        res.check(p.stdout == c["text"], f"{what}: same text as before ({p.stdout[:40]!r})")
        g = re.search(r"generation (\d+) tokens", p.stderr)
        res.check(g and int(g.group(1)) == c["n_gen"], f"{what}: {c['n_gen']} tokens generated")
        v = re.search(r"(\d+) verifications, [0-9.]+ tokens per verification, (\d+) of (\d+) drafts",
                      p.stderr)
        got = [int(v.group(1)), int(v.group(2)), int(v.group(3))] if v else None
        res.check(got == c["spec"], f"{what}: speculative statistics {got} == {c['spec']}")
        if c["args"][:2] == ["--temp", "0"]:
            greedy.setdefault(c["prompt"], set()).add(p.stdout)
    for prompt, texts in greedy.items():
        res.check(len(texts) == 1, f"{prompt!r}: greedy with drafts == greedy without")
    res.done()


if __name__ == "__main__":
    main()
