"""test_cli_docs.py — the command line is declared once and everything is printed from it.

1. `snug CMD --help` of every command (the list `snug --help` prints) goes to stdout, exits 0,
   starts with the command's usage; `snug help CMD` prints the same.
2. The README's command table (one row per command) and docs/server.md's flag table (one row per
   flag) are what `snug help --markdown` prints now (scripts/gen_cli_docs.py rewrites them).
3. The parser (src/cli/cli_args.c): `--flag=value` is `--flag value`; every error names the
   flag as written and says what was expected (missing value, integer out of range, unknown
   choice, bad size, a value given to a switch, an unknown flag, a stray argument), exit 2.
Runnable as a script; prints "N passed, N failed".
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from snugtest import SNUG, SRC, Results  # noqa: E402
import gen_cli_docs  # noqa: E402


def snug(*args):
    return subprocess.run([SNUG, *args], capture_output=True, text=True, timeout=120)


def commands():
    out = snug("--help").stdout
    return re.findall(r"^  ([a-z][a-z-]*) ", out.split("commands:", 1)[1], re.M)


def main():
    r = Results()
    cmds = commands()
    r.check(len(cmds) >= 15 and "serve" in cmds and "bench-local" in cmds,
            f"snug --help lists the commands: {cmds}")

    # 1. --help on stdout for every command
    bad = []
    for c in cmds:
        p = snug(c, "--help")
        if p.returncode != 0 or p.stderr or not p.stdout.startswith(f"usage: snug {c} "):
            bad.append(f"{c}: rc {p.returncode}, stderr {p.stderr[:60]!r}, "
                       f"stdout {p.stdout[:40]!r}")
        elif snug("help", c).stdout != p.stdout:
            bad.append(f"{c}: snug help {c} differs from snug {c} --help")
    r.check(not bad, f"--help of all {len(cmds)} commands: stdout, exit 0, usage first"
            + "".join("\n  " + b for b in bad))

    # 2. the committed tables are the generated ones
    stale, n_blocks = [], 0
    for path in gen_cli_docs.documents(os.path.abspath(SRC)):
        text = open(path, encoding="utf-8").read()
        n_blocks += len(gen_cli_docs.blocks(text))
        _, changed = gen_cli_docs.refresh(path, SNUG)
        stale += [f"{os.path.relpath(path, SRC)}: {a}" for a in changed]
    r.check(n_blocks >= 2 and not stale,
            f"{n_blocks} generated blocks in README.md and docs/ match `snug help --markdown`"
            + "".join("\n  differs (run scripts/gen_cli_docs.py): " + s for s in stale))
    readme = open(os.path.join(SRC, "README.md"), encoding="utf-8").read()
    rows = {c: len(re.findall(r"^\| `snug " + re.escape(c) + r"[ `]", readme, re.M)) for c in cmds}
    r.check(all(n == 1 for n in rows.values()), f"README: one row per command {rows}")
    server_md = open(os.path.join(SRC, "docs", "server.md"), encoding="utf-8").read()
    flag_rows = re.findall(r"^\| `(-[^`]*)` \|", server_md, re.M)
    spellings = [s.split(" ")[0] for row in flag_rows for s in row.split(", ")]
    help_flags = set(re.findall(r"^  (?:-\w, )?(--[a-z-]+)", snug("serve", "--help").stdout, re.M))
    dup = sorted({s for s in spellings if spellings.count(s) > 1})
    r.check(not dup and help_flags - {"--help"} <= set(spellings) and len(flag_rows) > 40,
            f"docs/server.md: one row per flag ({len(flag_rows)} rows; repeated {dup}; "
            f"missing {sorted(help_flags - {'--help'} - set(spellings))})")
    ctx_row = [row for row in server_md.splitlines() if row.startswith("| `--ctx ")]
    r.check(len(ctx_row) == 1 and "4096" not in ctx_row[0] and "| max |" in ctx_row[0],
            f"docs/server.md: --ctx described once, default max: {ctx_row}")

    # 3. the parser
    base = ["plan", "--preset", "demo", "--weights", "q8_0", "--json"]
    a, b = snug(*base, "--ctx", "1024"), snug(*base, "--ctx=1024")
    r.check(a.returncode == 0 and a.stdout == b.stdout and '"ctx": 1024,' in a.stdout,
            "--ctx=1024 is --ctx 1024")
    cases = [
        (["--ctx"], "--ctx needs a value"),
        (["--slots", "0"], "--slots '0': expected an integer in 1.."),
        (["--slots", "two"], "--slots 'two': expected an integer"),
        (["--ctx=big"], "--ctx 'big': expected an integer in 1..2147483647 or max"),
        (["--backend", "gpu"], "--backend 'gpu': expected cpu or cuda"),
        (["--budget", "12XB"], "--budget '12XB': expected a size"),
        (["--kv", "q9"], "--kv 'q9': expected one of f16"),
        (["--kv-k", "auto"], "--kv-k 'auto': expected one of f16"),
        (["--table=yes"], "--table takes no value"),
        (["--tabel"], "unknown flag '--tabel'"),
        (["stray"], "unexpected argument 'stray'"),
    ]
    for extra, want in cases:
        p = snug(*base, *extra)
        r.check(p.returncode == 2 and f"snug plan: {want}" in p.stderr and not p.stdout,
                f"plan {' '.join(extra)}: exit 2, {want!r} ({p.returncode}, {p.stderr.strip()!r})")
    p = snug("serve", "--render-api", "xml", "--render-only", "-")
    r.check(p.returncode == 2 and "--render-api 'xml': expected chat, messages or responses"
            in p.stderr, f"serve --render-api xml: {p.stderr.strip()!r}")
    p = snug("quantize", "a", "b", "c", "d")
    r.check(p.returncode == 2 and "unexpected argument 'd'" in p.stderr,
            f"quantize takes three arguments: {p.stderr.strip()!r}")
    p = snug("vision", "--grid", "3")
    r.check(p.returncode == 2 and "--grid needs a value: --grid H W" in p.stderr,
            f"vision --grid takes two values: {p.stderr.strip()!r}")
    p = snug("run", "-n", "5")
    r.check(p.returncode == 2 and "-p TEXT (or -f FILE) is required" in p.stderr
            and "snug run --help" in p.stderr, f"run without a prompt: {p.stderr.strip()!r}")
    return r.done()


if __name__ == "__main__":
    sys.exit(main())
