"""test_doc_citations.py — every `docs/NAME.md §N` citation in the tree points at a section
that exists, and nothing sends a reader to files the project does not ship.

1. Citations: code comments and docs cite sections as `docs/qwen35.md §2.5`, `§2.2-2.3`,
   `§3.3, §3.4`, `§1.1 / §1.2`, `§4.2 ... and every tensor of §4.3` (the same line), possibly
   with the `§` on the next comment line. Each cited number must be the number of a heading
   (`## 2.` / `### 2.5`) in that file, and the file must exist. Self-check: a synthetic text
   citing a missing section must be reported (so the scanner is not vacuous).
2. No `spec §` / `spec/...md` / `kvquant.md` references remain (the private notes they named
   are not part of the project), and `../shared` appears only as the fixtures' location.
3. The tree reads as a product, not a journal: no numbered work sessions ("session 9",
   "session cuda3"), no people of the process ("the lead", "other helpers' builds"), no issue
   numbers ("issue 17", "#25") in docs/, src/, tests/, bench/, scripts/, tools/ (history is in
   git); and no machine paths (`/work/`, `/root/`, `/home/`, and `/tmp/` as a fixed place:
   tests make temporary folders with tempfile / mkdtemp under $TMPDIR). Self-check: each
   pattern must catch a synthetic line and pass its legitimate neighbours ("bytes that lead
   to", "small helpers", "UAX #15", "a chat session").
4. File references resolve: a path into one of the tree's folders (`src/model/x.c`,
   `tests/unit/test_y.c`, `docs/z.md`) names a file or folder that exists, unless the line says
   it is another project's (llama.cpp, ggml, transformers, ...).
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


# Journal words: (pattern, what it is). Case-insensitive.
JOURNAL = [
    (r"\bsession\s+(?:\d|[a-z]+\d|tq\b|fa\b|mv\b|start\b|note\b)", "a numbered work session"),
    (r"\b(?:this|that|same|earlier|previous|first|second|next)\s+session\b", "a work session"),
    (r"\bsessions'|\bsession's\b", "a work session"),
    (r"\bthe issue(?:'s|\s+asks)\b|\bthis branch\b|\bthe brief\b", "the work's process"),
    (r"\bissues?\s*#?\d+", "an issue number"),
    (r"(?<![\w&/#'\"])(?<!UAX )#\d+\b", "an issue number"),
    (r"\((?:the\s+)?lead,|,\s*lead\)|\blead's\b|\bthe lead\b(?!\s+(?:byte|bytes|to|back)\b)"
     r"|/lead\b", "the lead (a person)"),
    (r"\bhelpers?'(?!\w)|\bhelper's\s+(?:build|builds|ctest|run|branch|session)\b"
     r"|\b(?:six|two|three|several)\s+helpers\b|\(helper\)|,\s*helper\)", "helpers (people)"),
]
MACHINE_PATHS = (r"(?<![\w.$}])/(?:work|root|home)/", r"(?<![\w.$}])/tmp/")
JOURNAL_DIRS = ("docs/", "src/", "tests/", "bench/", "scripts/", "tools/", "README.md",
                "ARCHITECTURE.md")
NOT_PROSE = ("tests/data/", "tests/fuzz/corpus")  # test inputs: text as found


# another project's tracker cited as a source ("anthropics/claude-code issue 68900") is a fact
EXTERNAL_REF = re.compile(r"[\w.-]+/[\w.-]+\s+(?:issue|pull|PR)\s*#?\d+", re.I)


def journal_hits(text):
    """(line number, what) of every journal word or machine path in text."""
    hits = []
    for i, line in enumerate(text.splitlines(), 1):
        line = EXTERNAL_REF.sub("", line)
        for pat, what in JOURNAL:
            if re.search(pat, line, re.I):
                hits.append((i, what))
        for pat in MACHINE_PATHS:
            if re.search(pat, line):
                hits.append((i, "a machine path"))
    return hits


PATH_REF = re.compile(r"(?<![\w./-])((?:src|tests|docs|tools|scripts|bench|include|data)/[\w./-]*\w)")
OTHER_PROJECT = re.compile(r"llama\.cpp|llama-|llama\.h|ggml|transformers|Pillow|vLLM|vllm|sglang|#include|"
                           r"tools/imatrix|tools/mtmd|tools/quantize", re.I)


def missing_refs(rel, text, have, folders):
    """line: path for every reference in text into the tree's folders that names nothing."""
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if OTHER_PROJECT.search(line):
            continue
        for m in PATH_REF.finditer(line):
            nxt = line[m.end():m.end() + 2]
            if (nxt[:1] in ("{", "<", "*", "[", "$", "\\") or line[m.end() - 1] == "_"
                    or (nxt[:1] in ".-_" and nxt[1:2] in ("{", "<", "*", "$"))):
                continue  # a pattern (`src/x/y.{h,c}`, `fuzz_<name>.c`), not one file
            if rel.endswith((".c", ".h")) and line[:m.start()].count('"') % 2:
                continue  # text inside a C string (test data)
            path = m.group(1).rstrip(".")
            parent = path.rsplit("/", 1)[0]
            if path in have or path in folders or parent not in folders:
                continue  # exists, or not a path into a folder of this tree
            out.append(f"{i}: {path}")
    return out


def dangling_refs(files):
    """rel:line: path for every reference of the tree that names nothing."""
    have = set(files)
    folders = {f.rsplit("/", k)[0] for f in files for k in range(1, f.count("/") + 1)}
    out = []
    for rel, text in text_files():
        if rel != "tests/py/test_doc_citations.py" and not rel.startswith(NOT_PROSE):
            out += [f"{rel}:{m}" for m in missing_refs(rel, text, have, folders)]
    return out, have, folders


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

    # 3. no journal words, no machine paths; the patterns catch what they should and only that
    bad_lines = ["(lead, session 9)", "Session 4 (2026-12-01): tq", "session cuda3 at 8K",
                 "the lead re-measures", "other helpers' builds", "issue 17's acceptance",
                 "issue #25", "and #20's small things", "this session had no GPU",
                 "LLAMA=/work/ref/build", "cp x /tmp/27b.gguf", "open('/home/u/x')",
                 "devcarry/lead", "the session's end", "the issue's acceptance",
                 "the new one (this branch)"]
    good_lines = ["bytes that lead to one state", "all lead bytes in [lo, hi]", "small helpers",
                  "the helpers below", "the shared header's other helpers", "if (lead && *lead)", "UAX #15", "a recorded coding-agent session",
                  "4 sessions at a time", "mkdtemp under ${TMPDIR:-/tmp}", "src/core/x.h",
                  "A/B in one session", "sessionStorage",
                  "reported in anthropics/claude-code issue 68900; vllm-mlx pull 277"]
    missed = [b for b in bad_lines if not journal_hits(b)]
    wrong = [g for g in good_lines if journal_hits(g)]
    r.check(not missed and not wrong,
            f"journal patterns: every bad line caught (missed {missed}), no good one (hit {wrong})")
    journal = []
    for rel, text in text_files():
        if (rel == "tests/py/test_doc_citations.py" or not rel.startswith(JOURNAL_DIRS)
                or rel.startswith(NOT_PROSE)):
            continue
        lines = text.splitlines()
        journal += [f"{rel}:{i}: {what}: {lines[i - 1].strip()[:90]}"
                    for i, what in journal_hits(text)]
    r.check(not journal, f"no journal words or machine paths in {', '.join(JOURNAL_DIRS)}"
            + "".join("\n  " + j for j in journal))

    # 4. file references resolve
    dangling, have, folders = dangling_refs(tracked_files())
    synth = missing_refs("x.md", "see src/model/tensors.c, src/model/model.c, src/x/y.{h,c},\n"
                         "tests/fuzz/fuzz_<name>.c and llama.cpp's src/llama-vocab.cpp", have,
                         folders)
    r.check(synth == ["1: src/model/tensors.c"], f"the reference check finds a missing file: {synth}")
    r.check(not dangling, "every reference to a file of the tree names one that exists"
            + "".join("\n  " + d for d in dangling))
    return r.done()


if __name__ == "__main__":
    sys.exit(main())
