#!/usr/bin/env python3
"""vision_27b_client.py — the client half of tests/device/run_vision_27b_device.sh (the vision
device acceptance run): against a running `snug serve --mmproj`, one chat with a 1-megapixel image
and about 100,000 prompt tokens of text, greedy, 16 tokens.

1. waits for /health to say "ok" (printing the loading progress);
2. writes a SIDE × SIDE RGB PNG (zlib + struct: no imaging library needed) — a gradient with a
   seeded noise channel, so the tower sees structure — sent as a base64 data: URL;
3. sizes random words (seeded) to land the whole prompt (text + the image's (SIDE/32)² pads +
   the template) at TARGET + MARGIN tokens, measured by the server's own tokenizer through
   /v1/messages/count_tokens (the image counted from its header, as the request will be);
4. sends the chat (the `openai` client when installed, else the same JSON over urllib):
   text, the image, a question; max_tokens 16, temperature 0;
5. prints usage.prompt_tokens, the wall time, the answer; writes OUT/chat.json.
Exit status 0 when the chat answered with prompt_tokens >= TARGET, else 1.

usage: vision_27b_client.py URL OUT_DIR [--target 100000] [--margin 300] [--side 1024]
                            [--timeout S] [--health-timeout S] [--pid SERVER_PID]"""
import argparse
import base64
import json
import os
import random
import struct
import sys
import time
import urllib.error
import urllib.request
import zlib


def log(msg):
    print(f"[client {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def post(url, body, timeout):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def alive(pid):
    if not pid:
        return True
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def wait_health(base, timeout, pid):
    t0, last = time.time(), ""
    while time.time() - t0 < timeout and alive(pid):
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                h = json.loads(r.read())
                if h.get("status") == "ok":
                    return h
        except urllib.error.HTTPError as e:  # 503 while loading: the body says how far
            try:
                msg = e.read().decode()[:160]
            except Exception:
                msg = str(e)
            if msg != last:
                log(f"health: {msg}")
                last = msg
        except Exception:
            pass
        time.sleep(1)
    return None


def png(w, h, seed=23):
    """An RGB PNG: red by column, green by row, blue a seeded noise pattern."""
    rnd = random.Random(seed)
    noise = bytes(rnd.randrange(256) for _ in range(4096))
    rows = []
    for y in range(h):
        r = bytearray(1 + 3 * w)
        g = (y * 255) // max(h - 1, 1)
        for x in range(w):
            r[1 + 3 * x] = (x * 255) // max(w - 1, 1)
            r[2 + 3 * x] = g
            r[3 + 3 * x] = noise[(x * 31 + y * 17) & 4095]
        rows.append(bytes(r))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"".join(rows), 6)) + chunk(b"IEND", b""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("out")
    ap.add_argument("--target", type=int, default=100000)
    ap.add_argument("--margin", type=int, default=300)
    ap.add_argument("--side", type=int, default=1024)
    ap.add_argument("--timeout", type=float, default=400)
    ap.add_argument("--health-timeout", type=float, default=240)
    ap.add_argument("--pid", type=int, default=0, help="the server's process: stop waiting if it exits")
    a = ap.parse_args()
    base = a.url.rstrip("/")
    os.makedirs(a.out, exist_ok=True)
    result = {"answered": False}

    def finish(ok):
        result["pass"] = ok
        json.dump(result, open(os.path.join(a.out, "chat.json"), "w"), indent=1)
        sys.exit(0 if ok else 1)

    log(f"waiting for {base}/health")
    h = wait_health(base, a.health_timeout, a.pid)
    if not h:
        log("FAIL: the server did not become ready" + ("" if alive(a.pid) else " (it exited)"))
        finish(False)
    log(f"ready: plan {h.get('plan')}, planned bytes {h.get('memory', {}).get('planned_bytes')}")
    result["health"] = h
    model = h.get("model", "snug")

    img = png(a.side, a.side)
    url = "data:image/png;base64," + base64.b64encode(img).decode()
    log(f"image: {a.side}x{a.side} PNG, {len(img)} bytes ({len(url)} as a data: URL)")
    question = "Describe the image in a few words."
    rnd = random.Random(1)
    vocab = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(2, 8)))
             for _ in range(4000)]
    words = [rnd.choice(vocab) for _ in range(3 * a.target)]

    def count(n_words):
        body = {"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": [
            {"type": "text", "text": " ".join(words[:n_words])},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": url.split(",", 1)[1]}},
            {"type": "text", "text": question}]}]}
        return post(base + "/v1/messages/count_tokens", body, 120)["input_tokens"]

    want = a.target + a.margin
    n = a.target // 3
    try:
        for _ in range(6):  # secant steps on the word count
            c = count(n)
            log(f"count_tokens: {n} words -> {c} tokens (want {want})")
            if abs(c - want) <= a.margin // 3:
                break
            per_word = max(c - (a.side // 32) ** 2 - 32, 1) / n
            n = max(1, min(len(words), n + int((want - c) / per_word)))
    except Exception as e:
        log(f"FAIL: count_tokens: {e}")
        finish(False)
    text = " ".join(words[:n])
    result.update(words=n, counted_tokens=c, image_bytes=len(img), side=a.side)

    messages = [{"role": "user", "content": [
        {"type": "text", "text": text},
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": question}]}]
    log(f"chat: {n} words + the image, max_tokens 16, temperature 0 (timeout {a.timeout:.0f} s)")
    t0 = time.time()
    try:
        try:
            import openai
            client = "openai"
        except ImportError:
            client = "urllib"
        if client == "openai":
            cl = openai.OpenAI(base_url=base + "/v1", api_key="x", timeout=a.timeout,
                               max_retries=0)
            c = cl.chat.completions.create(model=model, messages=messages, max_tokens=16,
                                           temperature=0)
            msg = c.choices[0].message
            answer, finish_reason = msg.content, c.choices[0].finish_reason
            reasoning = (getattr(msg, "model_extra", None) or {}).get("reasoning_content")
            usage = {"prompt_tokens": c.usage.prompt_tokens,
                     "completion_tokens": c.usage.completion_tokens}
        else:
            j = post(base + "/v1/chat/completions", {"model": model, "messages": messages,
                                                     "max_tokens": 16, "temperature": 0},
                     a.timeout)
            answer = j["choices"][0]["message"].get("content")
            reasoning = j["choices"][0]["message"].get("reasoning_content")
            finish_reason = j["choices"][0].get("finish_reason")
            usage = j["usage"]
    except Exception as e:
        result["error"] = str(e)[:2000]
        log(f"FAIL: chat ({client}) after {time.time() - t0:.1f} s: {str(e)[:600]}")
        finish(False)
    wall = time.time() - t0
    result.update(answered=True, client=client, wall_s=round(wall, 2), answer=answer,
                  reasoning=reasoning, finish_reason=finish_reason, usage=usage)
    pt = usage["prompt_tokens"]
    log(f"chat answered ({client}) in {wall:.1f} s: prompt_tokens {pt}, completion_tokens "
        f"{usage['completion_tokens']}, finish_reason {finish_reason}, answer {answer!r}"
        + (f", reasoning {reasoning!r}" if reasoning else ""))
    ok = pt >= a.target
    log(("PASS" if ok else "FAIL") + f": prompt_tokens {pt} >= {a.target}")
    finish(ok)


if __name__ == "__main__":
    main()
