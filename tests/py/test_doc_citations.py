"""test_doc_citations.py — every `docs/NAME.md §N` citation in the tree points at a section
that exists, and nothing sends a reader to files the project does not ship.

1. Citations: code comments and docs cite sections as `docs/qwen35.md §2.5`, `§2.2-2.3`,
   `§3.3, §3.4`, `§1.1 / §1.2`, `§4.2 ... and every tensor of §4.3` (the same line), possibly
   with the `§` on the next comment line. Each cited number must be the number of a heading
   (`## 2.` / `### 2.5`) in that file, and the file must exist. Self-check: a synthetic text
   citing a missing section must be reported (so the scanner is not vacuous).
2. No `spec §` / `spec/...md` / `kvquant.md` references remain (the private notes they named
   are not part of the project), and `../shared` appears only as the fixtures' location.
Runnable as a script; prints "N passed, N failed".
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SRC, Results  # noqa: E402

NUM = r"\d+(?:\.\d+)*"
# `docs/x.md` then (after optional comment continuation) a run of section numbers.
CITE = re.compile(r"docs/([A-Za-z0-9_-]+\.md)((?:[\s*/#]|\(|&)*)§\s*(" + NUM + r")")
MORE = re.compile(r"\s*(?:[-–]|,|/|and|or)\s*§?\s*(" + NUM + r")")
BARE_SAME_LINE = re.compile(r"§\s*(" + NUM + r")")

# `../shared` may appear only as the location of the test fixtures (`../shared/fixtures`: test
# inputs and the benchmarks' vocabulary donor, never a citation of content), plus the chat
# template that test_chat_template.py compares against (a test input, skipped when absent).
SHARED_OK_FILES = {"tests/py/test_chat_template.py", "tests/py/test_doc_citations.py"}


def tracked_files():
    out = subprocess.run(["git", "ls-files"], cwd=SRC, capture_output=True, text=True)
    if out.returncode != 0:  # not a git checkout: walk the tree
        files = []
        for root, dirs, names in os.walk(SRC):
            dirs[:] = [d for d in dirs if not d.startswith(".") and not d.startswith("build")]
            files += [os.path.relpath(os.path.join(root, n), SRC) for n in names]
        return files
    return out.stdout.split()


def text_files():
    for rel in tracked_files():
        if not rel.endswith((".c", ".h", ".cu", ".cuh", ".md", ".py", ".sh", ".txt", ".inc")):
            continue
        try:
            with open(os.path.join(SRC, rel), encoding="utf-8") as f:
                yield rel, f.read()
        except (OSError, UnicodeDecodeError):
            continue


def sections_of(text):
    """Heading numbers of a markdown file: '## 2. Title' -> '2', '### 2.5 Title' -> '2.5'."""
    secs = set()
    for m in re.finditer(r"^#{1,6}\s+(" + NUM + r")\.?\s", text, re.M):
        secs.add(m.group(1))
    return secs


def citations(text):
    """(doc, section) pairs cited in text."""
    out = []
    for m in CITE.finditer(text):
        doc, first = m.group(1), m.group(3)
        out.append((doc, first))
        pos = m.end()
        while True:
            mm = MORE.match(text, pos)
            if not mm:
                break
            out.append((doc, mm.group(1)))
            pos = mm.end()
        # further "§N" on the rest of the same line belong to the same document
        eol = text.find("\n", pos)
        rest = text[pos:eol if eol >= 0 else len(text)]
        if "docs/" not in rest:
            out += [(doc, b.group(1)) for b in BARE_SAME_LINE.finditer(rest)]
    return out


def unresolved(pairs, cache):
    """The (doc, section) pairs whose document or section heading does not exist."""
    bad = []
    for doc, sec in pairs:
        if doc not in cache:
            p = os.path.join(SRC, "docs", doc)
            cache[doc] = sections_of(open(p, encoding="utf-8").read()) if os.path.exists(p) \
                else None
        if cache[doc] is None:
            bad.append(f"docs/{doc} does not exist")
        elif sec not in cache[doc]:
            bad.append(f"docs/{doc} §{sec} is not a section of docs/{doc}")
    return bad


def main():
    r = Results()

    # self-check of the scanner on synthetic text
    synth = ("/* see docs/qwen35.md §2.4 and\n * docs/qwen35.md\n * §2.6; docs/turboquant.md §2.2-2.3 */"
             " docs/qwen35.md §3.3, §3.4 and §9.9")
    got = citations(synth)
    r.check(("qwen35.md", "2.6") in got and ("turboquant.md", "2.3") in got
            and ("qwen35.md", "9.9") in got and ("qwen35.md", "3.4") in got,
            f"scanner finds wrapped, ranged and listed citations: {got}")

    cache = {}
    missing = []
    n = 0
    for rel, text in text_files():
        if rel == "tests/py/test_doc_citations.py":
            continue
        pairs = citations(text)
        n += len(pairs)
        missing += [f"{rel}: {b}" for b in unresolved(pairs, cache)]
    r.check(n >= 50, f"found {n} section citations (the tree has about 85)")
    r.check(not missing, "every cited section exists" + ("".join("\n  " + m for m in missing)))
    # the checker is not vacuous: the synthetic text's §9.9 and a missing document are reported
    bad = unresolved(got + [("no-such-doc.md", "1")], cache)
    r.check(bad == ["docs/qwen35.md §9.9 is not a section of docs/qwen35.md",
                    "docs/no-such-doc.md does not exist"], f"missing sections are reported: {bad}")

    stale = []
    for rel, text in text_files():
        if rel == "tests/py/test_doc_citations.py":
            continue
        for i, line in enumerate(text.splitlines(), 1):
            if re.search(r"\bspec §|spec/qwen35\.md|kvquant\.md|ops-suite\.md", line):
                stale.append(f"{rel}:{i}: {line.strip()[:100]}")
            if ("../shared" in line and "../shared/fixtures" not in line
                    and rel not in SHARED_OK_FILES):
                stale.append(f"{rel}:{i}: ../shared outside a fixture location: "
                             f"{line.strip()[:100]}")
    r.check(not stale, "no citations of files the project does not ship"
            + "".join("\n  " + s for s in stale))
    return r.done()


if __name__ == "__main__":
    sys.exit(main())
