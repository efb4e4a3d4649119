"""test_run_progress.py — `snug run` load and prompt progress: with stderr on a terminal (a
pseudo-terminal from Python's pty) it shows the model load (MiB read, to 100%) and, on an
8K-token prompt, the progress line (tokens done / total, tok/s, ETA) after each 512-token chunk,
each erased at the end; with stderr redirected to a
file it prints no progress and no control characters; and the generated text is the same
either way (the slices are the chunks snug_ctx_eval makes anyway). Uses the demo model.
Runnable as a script; prints "N passed, N failed".
"""
import os
import pty
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SNUG, SRC, Results  # noqa: E402

MODEL = os.path.join(SRC, "data", "demo", "snug-demo-q8_0.gguf")


def prompt_text():
    """About 8K tokens of Python source from this repository's tools (stable across machines)."""
    src = open(os.path.join(SRC, "tools", "train", "train.py")).read()
    return (src * 4)[:19000]


def run_pty(args):
    """Run with stderr on a pseudo-terminal; returns (stdout, terminal bytes)."""
    master, slave = pty.openpty()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 4096)
        except OSError:
            break
        if not b:
            break
        chunks.append(b)
    out = p.stdout.read()
    p.wait()
    os.close(master)
    return out.decode(errors="replace"), b"".join(chunks).decode(errors="replace"), p.returncode


def main():
    res = Results()
    with tempfile.TemporaryDirectory() as tmp:
        pf = os.path.join(tmp, "prompt.txt")
        open(pf, "w").write(prompt_text())
        args = [SNUG, "run", "-m", MODEL, "-f", pf, "-n", "8", "--temp", "0"]
        out_tty, term, rc = run_pty(args)
        res.check(rc == 0, f"snug run on a terminal exits 0 ({rc})")
        lines = re.findall(r"prompt (\d+) / (\d+) tokens \((\d+)%\), [\d.]+ tok/s, ETA [\d.]+ s",
                           term)
        total = int(lines[-1][1]) if lines else 0
        res.check(total >= 8000, f"an 8K-token prompt ({total} tokens)")
        res.check(len(lines) >= total // 512 and lines[0][0] == "512" and
                  lines[-1][0] == lines[-1][1] and lines[-1][2] == "100",
                  f"a progress line after each 512-token chunk ({len(lines)} lines, last "
                  f"{lines[-1] if lines else None})")
        res.check("\r" in term and "\x1b[K" in term, "the line is redrawn in place and erased")
        size_mib = os.path.getsize(MODEL) / 1048576.0
        loads = re.findall(r"loading the model: (\d+) / (\d+) MiB \((\d+)%\)", term)
        res.check(bool(loads) and loads[-1][2] == "100" and loads[-1][0] == loads[-1][1] and
                  int(loads[-1][1]) == round(size_mib),
                  f"the model load shows bytes read ({loads[-1] if loads else None}, "
                  f"file {size_mib:.1f} MiB)")

        log = os.path.join(tmp, "err.log")
        with open(log, "w") as f:
            p = subprocess.run(args, stdout=subprocess.PIPE, stderr=f, text=True)
        err = open(log).read()
        res.check(p.returncode == 0, "snug run with stderr in a file exits 0")
        res.check("tok/s, ETA" not in err and not re.search(r"prompt \d+ / \d+ tokens", err)
                  and "loading the model" not in err, "no progress lines in the file")
        res.check(not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", err),
                  "no control characters in the file")
        res.check(p.stdout == out_tty, f"same text either way ({p.stdout!r} vs {out_tty!r})")
    res.done()


if __name__ == "__main__":
    main()
