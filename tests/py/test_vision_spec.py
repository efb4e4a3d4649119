"""test_vision_spec.py — images with speculative decoding (MTP drafts) are lossless: greedy output
with drafts on equals greedy output with drafts off, for a prompt with an image and text after it
(so the rotary offset rope_delta is not 0 while drafts are verified and rolled back).

The vision fixture's text model has no MTP block; vision_mtp.py writes a copy with a made-up one
(its weights only change the acceptance rate). Checked:
- `snug run --mmproj --image` with --spec-draft 1, 2 and 3 prints the same text as --spec-draft 0
  and accepts some drafts (so both the accepted and the rolled-back paths ran after the image);
- the same through the server: `snug serve --mmproj --spec-draft 2` answers a chat with a base64
  image (and a second turn restored from the prefix cache past the image, a checkpoint carrying
  rope_delta) exactly as a --spec-draft 0 server does, and /metrics shows verifications;
- both again with `--backend cuda` over the test stand-in libsnug_fakedev.so (SNUG_CUDA_LIB;
  tests/support/fake_device.c: the CPU ops behind the device code paths — the image rows and
  3-D positions uploaded into the trunk's and the MTP block's steps, the MTP state in a device
  context): `snug run` with --spec-draft 0 and 3 prints what the CPU prints, and a
  `--backend cuda --spec-draft 2` server answers the image chat as the CPU server does (the
  real kernels: tests/device/run_vision_device.sh).
Every run and server here drafts a fixed number of tokens per step (`--spec-adapt off`): the
made-up block's drafts are rarely accepted, and the adaptation would stop drafting where this test
needs drafts verified and rolled back after the image.
Fails on code that refuses images with speculative decoding. Prints "N passed, N failed"."""
import base64
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import vision_mtp  # noqa: E402
from snugtest import SNUG, SRC, Results  # noqa: E402
from test_server import KEY, Server, stop_all, wait_idle  # noqa: E402

D = os.path.join(SRC, "tests", "data", "vision")
MMPROJ = os.path.join(D, "mmproj-f16.gguf")
BOUNDS = ["--min-image-pixels", "8192", "--max-image-pixels", "131072"]
PROMPT = "look <|vision_start|><|image_pad|><|vision_end|> what is in the picture?"
N = 40


FAKE = os.path.join(os.path.dirname(SNUG), "libsnug_fakedev.so")


def cli(model, image, k, device=False):
    env = dict(os.environ, SNUG_CUDA_LIB=FAKE) if device else None
    dev = ["--backend", "cuda"] if device else []
    p = subprocess.run([SNUG, "run", "-m", model, "--mmproj", MMPROJ, "--image", image, *BOUNDS,
                        "-p", PROMPT, "-n", str(N), "--temp", "0", "--spec-draft", str(k),
                        "--spec-adapt", "off", "--threads", "2", *dev], capture_output=True, timeout=300, env=env)
    err = p.stderr.decode(errors="replace")
    acc = re.search(r"(\d+) of (\d+) drafts accepted", err)
    return p.returncode, p.stdout, (int(acc[1]), int(acc[2])) if acc else None, err


def metric(srv, name):
    st, body, _ = srv.raw("GET", "/metrics")
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def main():
    r = Results()
    with tempfile.TemporaryDirectory() as tmp:
        model = vision_mtp.make(os.path.join(tmp, "vision-mtp.gguf"))
        accepted = 0
        for img in ("img0.png", "img1.png"):
            path = os.path.join(D, img)
            rc0, want, _, err0 = cli(model, path, 0)
            r.check(rc0 == 0 and len(want) > 0,
                    f"{img}: --spec-draft 0 runs" + ("" if rc0 == 0 else f" ({err0[-300:]})"))
            cpu_acc = {}
            for k in (1, 2, 3):
                rc, got, acc, err = cli(model, path, k)
                cpu_acc[k] = acc
                r.check(rc == 0 and got == want and acc is not None,
                        f"{img}: --spec-draft {k} prints what --spec-draft 0 does "
                        f"(accepted {acc}){'' if rc == 0 else ': ' + err[-400:]}")
                accepted += acc[0] if acc else 0
            for k in (0, 3):  # a device context (the stand-in module): the CPU's text
                rc, got, acc, err = cli(model, path, k, device=True)
                # the stand-in runs the CPU's ops: the same drafts accepted (the MTP block got
                # the same image rows and 3-D positions through the device paths)
                r.check(rc == 0 and got == want and (k == 0 or acc == cpu_acc[k]),
                        f"{img}: --backend cuda (stand-in) --spec-draft {k} prints what the CPU "
                        f"prints, accepting as many drafts (accepted {acc}, CPU "
                        f"{cpu_acc.get(k)}){'' if rc == 0 else ': ' + err[-400:]}")
                accepted += acc[0] if acc else 0
        r.check(accepted > 0, f"some drafts were accepted after the images ({accepted})")

        b64 = base64.b64encode(open(os.path.join(D, "img0.png"), "rb").read()).decode()
        msgs = [{"role": "user", "content": [
            {"type": "text", "text": "what is in the picture?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64}"}},
            {"type": "text", "text": "say it in a few words"}]}]
        turn2 = msgs + [{"role": "assistant", "content": "A picture."},
                        {"role": "user", "content": "and then?"}]
        servers = []
        try:
            P = Server(model, tmp, "P", "--api-key", KEY, "--ctx", 512, "--mmproj", MMPROJ,
                       *BOUNDS, "--spec-draft", 0)
            servers.append(P)
            S = Server(model, tmp, "S", "--api-key", KEY, "--ctx", 512, "--mmproj", MMPROJ,
                       *BOUNDS, "--spec-draft", 2, "--spec-adapt", "off", "--cache-ram", "64MiB",
                       "--slots", 1)
            servers.append(S)
            os.environ["SNUG_CUDA_LIB"] = FAKE  # a device engine (the stand-in module)
            try:
                G = Server(model, tmp, "G", "--api-key", KEY, "--ctx", 512, "--mmproj", MMPROJ,
                           *BOUNDS, "--spec-draft", 2, "--spec-adapt", "off", "--backend", "cuda",
                           "--slots", 1)
            finally:
                del os.environ["SNUG_CUDA_LIB"]
            servers.append(G)
            answers = {}
            for name, srv in (("P", P), ("S", S), ("G", G)):
                cl = srv.client()
                out = []
                for m in (msgs, turn2):
                    c = cl.chat.completions.create(model="vision-mtp.gguf", max_tokens=24, temperature=0,
                                                   messages=m)
                    msg = c.choices[0].message
                    out.append(((msg.model_extra or {}).get("reasoning_content") or "") +
                               (msg.content or ""))
                    wait_idle(srv)
                    if name == "S" and m is turn2:
                        cached = c.usage.prompt_tokens_details.cached_tokens
                        r.check(cached > 20, f"server with drafts: turn 2 restored {cached} "
                                             "tokens past the image from the prefix cache")
                answers[name] = out
            r.check(answers["P"] == answers["S"] and all(answers["P"]),
                    f"server: --spec-draft 2 answers the image chat and its cached second turn "
                    f"as --spec-draft 0 does ({answers['S']} vs {answers['P']})")
            r.check(answers["G"] == answers["P"],
                    f"server --backend cuda (stand-in) --spec-draft 2 answers the image chat as "
                    f"the CPU server does ({answers['G']} vs {answers['P']})")
            for name, srv in (("S", S), ("G", G)):
                ver = metric(srv, "snug_spec_drafts_total")
                r.check(ver is not None and ver > 0,
                        f"server {name} with drafts verified drafts ({ver})")
        finally:
            stop_all(r, servers)
    r.done()


if __name__ == "__main__":
    main()
