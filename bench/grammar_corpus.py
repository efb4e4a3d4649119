#!/usr/bin/env python3
"""grammar_corpus.py — JSON Schema coverage of snug's converter on a schema corpus, every
generated document checked by a real validator (Python `jsonschema`).

For every *.json file under CORPUS (recursively): the schema is read with Python's json module
and checked against its metaschema (`jsonschema.validators.validator_for`, draft 2020-12 when it
names none); files that are not JSON or not valid schemas are counted apart and left out. The
rest go through build/schema_sample (the server's conversion path: snug_json_schema_to_gbnf,
then the grammar compile), which prints, per schema, "refused" with the error (the keyword is
taken from its message) or "compiled" with --n documents drawn by a seeded random walk over the
grammar. Each document must parse as JSON and validate under the schema (with the validator's
format checker); a schema is **wrong** when one of its documents does not, when a walk reached a
dead end, or when the converter crashed (the process died: the schema it was on is counted and
the run goes on after it). A compiled schema whose walk ran out of the matcher's run-time tables
(struct snug_grammar_limits: a very long or very ambiguous document) is counted as compiled and
shown apart ("limit").

  python3 bench/grammar_corpus.py CORPUS [--n 5] [--seed 1] [--limit N] [--json OUT]
                                   [--sample build/schema_sample] [--show 20] [--grammars DIR]

--grammars DIR checks another converter's output instead of snug's: for each schema CORPUS/P,
DIR/P.gbnf is the grammar it wrote (compiled by snug's GBNF parser and walked the same way) and
DIR/P.err, when there is no grammar, the reason it gave (counted as refused).

Prints the counts (also per top-level folder of CORPUS), the top refusal keywords, and the wrong
schemas with the first failing document. docs/perf/grammar.md records runs.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time

import jsonschema
from jsonschema.validators import validator_for

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def load_corpus(corpus, limit):
    files = []
    for d, _, names in os.walk(corpus):
        for n in names:
            if n.endswith(".json"):
                files.append(os.path.join(d, n))
    files.sort()
    return files[:limit] if limit else files


def keyword_of(message):
    m = re.search(r"json schema: '([^']*)'", message)
    if m:
        return m.group(1)
    m = re.search(r"json schema: ([a-z$][\w ]{0,40})", message)
    return m.group(1).strip() if m else message[:40]


def run_sample(sample, files, n, seed, extra=()):
    """schema_sample's records by file; a crash marks the file it was on and goes on."""
    out, todo = {}, list(files)
    while todo:
        proc = subprocess.run([sample, "--n", str(n), "--seed", str(seed), *extra],
                              input="\n".join(todo) + "\n", capture_output=True, text=True,
                              errors="replace")
        for line in proc.stdout.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut by a crash
            out[rec["file"]] = rec
        todo = [f for f in todo if f not in out]
        if todo:  # the process died on todo[0]
            out[todo[0]] = {"file": todo[0], "status": "crash",
                            "message": f"exit {proc.returncode}: {proc.stderr[-300:]}"}
            todo = todo[1:]
    return out


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError(f"duplicate key among {keys[:8]}")
    return dict(pairs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus")
    ap.add_argument("--n", type=int, default=5, help="documents per compiled schema")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="only the first N files")
    ap.add_argument("--sample", default=os.path.join(ROOT, "build", "schema_sample"))
    ap.add_argument("--json", help="write the per-schema results here")
    ap.add_argument("--show", type=int, default=20, help="wrong schemas to print")
    ap.add_argument("--grammars", help="check another converter's grammars (see above)")
    a = ap.parse_args()

    t0 = time.time()
    files = load_corpus(a.corpus, a.limit)
    schemas, skipped = {}, collections.Counter()
    for f in files:
        try:
            with open(f, encoding="utf-8") as fh:
                s = json.load(fh)
        except (ValueError, UnicodeDecodeError):
            skipped["not JSON"] += 1
            continue
        if not isinstance(s, (dict, bool)):
            skipped["not a schema"] += 1
            continue
        cls = validator_for(s, default=jsonschema.Draft202012Validator)
        try:
            cls.check_schema(s)
        except Exception:  # noqa: BLE001 - any metaschema failure
            skipped["invalid schema"] += 1
            continue
        schemas[f] = (s, cls)
    if a.grammars:
        recs, by_gbnf = {}, {}
        for f in schemas:
            base = os.path.join(a.grammars, os.path.relpath(f, a.corpus))
            if os.path.exists(base + ".gbnf"):
                by_gbnf[base + ".gbnf"] = f
            else:
                why = open(base + ".err").read() if os.path.exists(base + ".err") else "no grammar"
                recs[f] = {"file": f, "status": "refused", "message": why.strip()[:300]}
        for g, rec in run_sample(a.sample, list(by_gbnf), a.n, a.seed, ["--gbnf"]).items():
            rec["file"] = by_gbnf[g]
            recs[by_gbnf[g]] = rec
    else:
        recs = run_sample(a.sample, list(schemas), a.n, a.seed)

    counts = collections.Counter()
    by_folder = collections.defaultdict(collections.Counter)
    refusals = collections.Counter()
    wrong, docs_checked, dup_docs, results = [], 0, 0, {}
    for f, (s, cls) in schemas.items():
        rec = recs[f]
        parts = os.path.relpath(f, a.corpus).split(os.sep)
        folder = parts[0] if len(parts) > 1 else "."
        st = rec["status"]
        res = {"status": st, "ms": rec.get("convert_ms")}
        if st == "refused":
            kw = keyword_of(rec["message"])
            refusals[kw] += 1
            res["keyword"], res["message"] = kw, rec["message"]
        elif st == "compiled":
            v = cls(s, format_checker=cls.FORMAT_CHECKER)
            bad = None
            if rec["stuck"] and not rec.get("limit"):
                bad = f"{rec['stuck']} walks reached a dead end"
            for h in rec["docs"]:
                if bad:
                    break
                raw = bytes.fromhex(h)
                docs_checked += 1
                try:
                    text = raw.decode("utf-8")
                    doc = json.loads(text)
                except ValueError as e:
                    bad = f"not JSON ({e}): {raw[:300]!r}"
                    break
                try:
                    json.loads(text, object_pairs_hook=no_duplicates)
                except ValueError:
                    dup_docs += 1
                try:
                    err = jsonschema.exceptions.best_match(v.iter_errors(doc))
                except Exception as e:  # noqa: BLE001 - the validator itself failed
                    err = None
                    res["validator_error"] = str(e)[:200]
                if err is not None:
                    bad = f"{err.message[:200]} at {list(err.absolute_path)} in {text[:300]!r}"
            if bad:
                st = "wrong"
                res["why"] = bad
                wrong.append((f, bad))
            elif rec.get("limit") and rec["stuck"]:
                st = "limit"  # the grammar is right; the matcher's tables ran out on a walk
                res["why"] = rec["limit"]
        else:  # crash / unreadable
            st = "wrong"
            res["why"] = rec.get("message", st)
            wrong.append((f, res["why"]))
        res["status"] = st
        counts[st] += 1
        by_folder[folder][st] += 1
        results[os.path.relpath(f, a.corpus)] = res

    n = len(schemas)
    print(f"corpus {a.corpus}: {len(files)} files, {n} valid schemas "
          f"(left out: {dict(skipped) or 'none'}), {a.n} documents each, seed {a.seed}")
    pct = (lambda k: f"{100.0 * k / n:.1f} %") if n else (lambda k: "-")
    print(f"compiled {counts['compiled'] + counts['limit']} "
          f"({pct(counts['compiled'] + counts['limit'])}; of these {counts['limit']} hit a matcher "
          f"size limit on a walk), refused {counts['refused']} ({pct(counts['refused'])}), wrong "
          f"{counts['wrong']} ({pct(counts['wrong'])}); {docs_checked} documents validated, "
          f"{dup_docs} with a duplicate key")
    if len(by_folder) > 1:
        for fo in sorted(by_folder):
            c = by_folder[fo]
            print(f"  {fo:24} {sum(c.values()):6}  compiled {c['compiled'] + c['limit']:6}  "
                  f"refused {c['refused']:6}  wrong {c['wrong']:4}")
    print("top refusal keywords:", ", ".join(f"{k} {v}" for k, v in refusals.most_common(15)))
    for f, why in wrong[:a.show]:
        print(f"WRONG {os.path.relpath(f, a.corpus)}: {why}")
    print(f"({time.time() - t0:.0f} s)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"counts": counts, "refusals": refusals, "results": results}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
