#!/usr/bin/env python3
"""vision_device.py — images on the GPU (run by run_vision_device.sh, which says how
to carry it): the vision tower and the text model on the device (image rows uploaded into the
step's input, interleaved M-RoPE, decode after the image with 3-D positions).

0. `snug vision --vision-backend cuda` over the fixture's three preprocessed images
   (img*_pixels.f32): the whole tower on the GPU (bf16 tensor-core products, the encoder ops of
   cuda_encoder.cu); median relative error of the features to transformers' (img*_features.f32)
   <= 1e-2 (the acceptance bound), and the CPU tower's <= 1e-4 next to it.
1. `snug logits --backend cuda --mmproj --image img0.png --greedy 16` over the fixture's image
   prompt (prompt_ids.json), in one step, in steps of 7 rows (the image's rows split across
   steps) and in evals of 10 ids (the image passed to each eval it overlaps), the tower on the
   GPU (the default with --backend cuda): median KL to transformers' logits (prompt_logits.f32)
   <= 1e-4, median KL to the CPU backend's <= 1e-4, and the 16 greedy tokens identical to the
   CPU's (and to transformers' prompt_greedy.json); with `--vision-backend cpu` (the tower on
   the CPU, the text model on the GPU) the same bounds.
2. `snug serve --backend cuda --mmproj` and the same on the CPU: a chat with the image as a
   base64 PNG (the openai client when installed, else the same JSON body over urllib) answers
   with the same greedy tokens on both; the same chat without the image answers otherwise.
3. Images with MTP speculative drafts on the GPU, when FIXTURE_DIR holds vision-mtp.gguf (the
   fixture's text model with a made-up MTP block, tests/py/vision_mtp.py; pack_devcarry.sh
   writes it): `snug run --backend cuda --mmproj --image` with --spec-draft 1 and 3 prints
   exactly what --spec-draft 0 prints, for img0 and img1; `snug serve --backend cuda
   --spec-draft 2 --mmproj` answers the image chat with --spec-draft 0's greedy tokens.

usage: vision_device.py SNUG FIXTURE_DIR OUT_DIR. Prints PASS/FAIL per check, a last line
"vision_device: PASS|FAIL", exit status 1 on a failure."""
import base64
import json
import os
import subprocess
import sys
import time
import urllib.request

import numpy as np

SNUG, FX, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
TEXT = os.path.join(FX, "text-f16.gguf")
MMPROJ = os.path.join(FX, "mmproj-f16.gguf")
IMG = os.path.join(FX, "img0.png")
BOUNDS = ["--min-image-pixels", "8192", "--max-image-pixels", "131072"]
N = 16
fails = 0


def check(ok, what):
    global fails
    fails += not ok
    print(("PASS: " if ok else "FAIL: ") + what, flush=True)


def kl_median(ref, got):
    def lsm(x):
        x = x.astype(np.float64)
        m = x.max(axis=1, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))
    lp, lq = lsm(ref), lsm(got)
    return float(np.median((np.exp(lp) * (lp - lq)).sum(axis=1)))


def logits(backend, out, *more):
    p = subprocess.run([SNUG, "logits", "--backend", backend, "-m", TEXT, "--ids",
                        os.path.join(FX, "prompt_ids.json"), "-o", out, "--greedy", str(N),
                        "--mmproj", MMPROJ, "--image", IMG, *BOUNDS, *more],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        print(p.stderr[-2000:])
        return None, None
    return np.fromfile(out, "<f4"), json.loads(p.stdout.strip().splitlines()[-1])


def part_logits():
    meta = json.load(open(os.path.join(FX, "meta.json")))
    T, V = meta["prompt"]["T"], meta["prompt"]["V"]
    ref = np.fromfile(os.path.join(FX, "prompt_logits.f32"), "<f4").reshape(T, V)
    greedy_ref = json.load(open(os.path.join(FX, "prompt_greedy.json")))
    cpu, cpu_greedy = logits("cpu", os.path.join(OUT, "cpu.f32"))
    check(cpu is not None, "CPU backend: the image prompt's logits")
    if cpu is None:
        return
    cpu = cpu.reshape(T, -1)
    for name, more in (("one step", []), ("chunk 7", ["--chunk", "7"]),
                       ("evals of 10", ["--split", "10"])):
        got, greedy = logits("cuda", os.path.join(OUT, "gpu.f32"), *more)
        check(got is not None, f"CUDA ({name}): `snug logits --backend cuda --mmproj --image` ran")
        if got is None:
            continue
        got = got.reshape(T, -1)
        k_ref = kl_median(ref, got[:, :V])
        k_cpu = kl_median(cpu, got)
        check(k_ref <= 1e-4, f"CUDA ({name}) vs transformers: median KL {k_ref:.3g} (<= 1e-4)")
        check(k_cpu <= 1e-4, f"CUDA ({name}) vs the CPU backend: median KL {k_cpu:.3g} (<= 1e-4)")
        check(greedy == cpu_greedy,
              f"CUDA ({name}): 16 greedy tokens after the image = the CPU's: {greedy} vs "
              f"{cpu_greedy}")
    check(cpu_greedy == greedy_ref, f"CPU greedy = transformers': {cpu_greedy} vs {greedy_ref}")
    # the tower on the CPU, the text model on the GPU
    got, greedy = logits("cuda", os.path.join(OUT, "gpu-vb.f32"), "--vision-backend", "cpu")
    check(got is not None, "--vision-backend cpu: ran")
    if got is not None:
        got = got.reshape(T, -1)
        k_ref, k_cpu = kl_median(ref, got[:, :V]), kl_median(cpu, got)
        check(k_ref <= 1e-4 and k_cpu <= 1e-4 and greedy == cpu_greedy,
              f"--vision-backend cpu (the tower on the CPU): median KL vs transformers "
              f"{k_ref:.3g}, vs the CPU {k_cpu:.3g} (<= 1e-4); greedy = CPU's: "
              f"{greedy == cpu_greedy}")


def part_features():
    meta = json.load(open(os.path.join(FX, "meta.json")))
    for k, im in enumerate(meta["images"]):
        _, gh, gw = im["grid_thw"]
        ref = np.fromfile(os.path.join(FX, f"img{k}_features.f32"), "<f4")
        for vb, tol in (("cuda", 1e-2), ("cpu", 1e-4)):
            out = os.path.join(OUT, f"feat{k}-{vb}.f32")
            p = subprocess.run([SNUG, "vision", "-m", MMPROJ, "--pixels",
                                os.path.join(FX, f"img{k}_pixels.f32"), "--grid", str(gh),
                                str(gw), "-o", out, "--vision-backend", vb],
                               capture_output=True, text=True, timeout=120)
            if p.returncode != 0:
                check(False, f"img{k}: snug vision --vision-backend {vb}: {p.stderr[-500:]}")
                continue
            got = np.fromfile(out, "<f4")
            rel = float(np.median(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-6)))
            check(got.shape == ref.shape and rel <= tol,
                  f"img{k} ({gh}x{gw} patches): the tower on {vb} vs transformers: median "
                  f"relative error {rel:.3g} (<= {tol:g})")


class Server:
    def __init__(self, name, *args, model=TEXT):
        self.port_file = os.path.join(OUT, name + ".port")
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        self.log = open(os.path.join(OUT, name + ".log"), "w+")
        self.model = model
        self.proc = subprocess.Popen([SNUG, "serve", "-m", model, "--port", "0", "--port-file",
                                      self.port_file, "--ctx", "512", "--slots", "1",
                                      "--mmproj", MMPROJ, *BOUNDS, *args],
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        t0 = time.time()
        while not os.path.exists(self.port_file) or not open(self.port_file).read().strip():
            if self.proc.poll() is not None or time.time() - t0 > 60:
                self.log.seek(0)
                raise RuntimeError(f"server {name} did not start:\n{self.log.read()[-3000:]}")
            time.sleep(0.05)
        self.port = int(open(self.port_file).read())
        while True:  # the port opens before the model loads (/health 503 until then)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5):
                    break
            except Exception:
                if self.proc.poll() is not None or time.time() - t0 > 90:
                    self.log.seek(0)
                    raise RuntimeError(f"server {name} not healthy:\n{self.log.read()[-3000:]}")
                time.sleep(0.1)

    def chat(self, messages):
        """(client, tokens, text) of a greedy chat of N tokens with logprobs."""
        body = {"model": os.path.basename(self.model), "max_tokens": N, "temperature": 0, "logprobs": True,
                "messages": messages}
        try:
            import openai
            cl = openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="x",
                               max_retries=0, timeout=120)
            c = cl.chat.completions.create(**body)
            return "openai", [t.token for t in c.choices[0].logprobs.content], \
                c.choices[0].message.content
        except ImportError:
            req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/chat/completions",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                c = json.loads(r.read())
            ch = c["choices"][0]
            return "urllib", [t["token"] for t in ch["logprobs"]["content"]], \
                ch["message"].get("content")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def part_server():
    b64 = base64.b64encode(open(IMG, "rb").read()).decode()
    q = "what is in the picture?"
    with_img = [{"role": "user", "content": [
        {"type": "text", "text": q},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64}"}}]}]
    no_img = [{"role": "user", "content": [{"type": "text", "text": q}]}]
    res = {}
    for backend in ("cpu", "cuda"):
        s = None
        try:
            s = Server("serve-" + backend, "--backend", backend, "--threads", "2")
            res[backend] = (s.chat(with_img), s.chat(no_img))
        except Exception as e:  # a refusal or a crash is a failure, with its log
            print(f"{backend} server: {e}")
        finally:
            if s:
                s.stop()
    check("cpu" in res and "cuda" in res, "both servers answered (--mmproj, --backend cpu/cuda)")
    if "cpu" not in res or "cuda" not in res:
        return
    (via, tc, xc), (_, nc, _) = res["cpu"]
    (_, tg, xg), (_, ng, _) = res["cuda"]
    check(len(tg) >= 1 and tg == tc,
          f"serve --backend cuda --mmproj: a chat with a base64 PNG ({via} client) = the CPU "
          f"server's greedy tokens: {tg} vs {tc}")
    check(ng == nc and ng != tg,
          f"the same chat without the image: CUDA = CPU ({ng == nc}) and differs from the "
          f"image's answer ({ng != tg})")


def part_spec():
    model = os.path.join(FX, "vision-mtp.gguf")
    if not os.path.exists(model):
        print(f"SKIP: images with MTP drafts ({model} not carried: tests/device/pack_devcarry.sh)")
        return
    prompt = "look <|vision_start|><|image_pad|><|vision_end|> what is in the picture?"

    def run(img, k):
        p = subprocess.run([SNUG, "run", "--backend", "cuda", "-m", model, "--mmproj", MMPROJ,
                            "--image", os.path.join(FX, img), *BOUNDS, "-p", prompt, "-n", "40",
                            "--temp", "0", "--spec-draft", str(k), "--spec-adapt", "off"],
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            print(p.stderr[-2000:])
        acc = [ln for ln in p.stderr.splitlines() if "drafts accepted" in ln]
        return p.returncode, p.stdout, acc[-1].split("verification, ")[-1] if acc else ""

    for img in ("img0.png", "img1.png"):
        rc0, want, _ = run(img, 0)
        check(rc0 == 0 and len(want) > 0, f"{img}: snug run --backend cuda --spec-draft 0 ran")
        for k in (1, 3):
            rc, got, acc = run(img, k)
            check(rc == 0 and got == want,
                  f"{img}: --backend cuda --spec-draft {k} prints what --spec-draft 0 prints "
                  f"({acc})")
    b64 = base64.b64encode(open(IMG, "rb").read()).decode()
    msgs = [{"role": "user", "content": [
        {"type": "text", "text": "what is in the picture?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64}"}},
        {"type": "text", "text": "say it in a few words"}]}]
    res = {}
    for k in (0, 2):
        s = None
        try:
            # (--spec-adapt off: the made-up block's drafts are rarely accepted, and the
            # adaptation would stop drafting where this wants drafts verified after the image)
            s = Server(f"serve-spec{k}", "--backend", "cuda", "--spec-draft", str(k),
                       "--spec-adapt", "off", "--threads", "2", model=model)
            res[k] = s.chat(msgs)
        except Exception as e:  # the old refusal at boot, or a crash: a failure, with its log
            print(f"--spec-draft {k} server: {e}")
        finally:
            if s:
                s.stop()
    check(0 in res and 2 in res and len(res[2][1]) >= 1 and res[2][1] == res[0][1],
          f"serve --backend cuda --mmproj --spec-draft 2: the image chat's greedy tokens = "
          f"--spec-draft 0's: {res.get(2, (0, None))[1]} vs {res.get(0, (0, None))[1]}")


def main():
    os.makedirs(OUT, exist_ok=True)
    t0 = time.time()
    part_features()
    print(f"[{time.time() - t0:.0f}s] features done", flush=True)
    part_logits()
    print(f"[{time.time() - t0:.0f}s] logits done", flush=True)
    part_server()
    print(f"[{time.time() - t0:.0f}s] server done", flush=True)
    part_spec()
    print(f"[{time.time() - t0:.0f}s] images with MTP drafts done", flush=True)
    print("vision_device: " + ("PASS" if fails == 0 else f"FAIL ({fails})"))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
