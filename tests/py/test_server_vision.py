"""test_server_vision.py — images through `snug serve --mmproj` (docs/vision.md "Through the
server"), on the vision fixture (tests/data/vision: random weights, f16 text GGUF + mmproj).

- A chat with the fixture's image 0 as a base64 PNG data: URL (the openai client) answers with
  the same 16 greedy tokens as `snug logits --mmproj --image img0.png --greedy 16` over the same
  rendered prompt (`snug serve --render-only`, tokenized): the image reached the model the way
  the CLI's verified path feeds it; the same chat without the image answers differently.
- The Anthropic /v1/messages image block (base64 source) and the Responses input_image give the
  same tokens (the anthropic client; the openai client's responses API).
- /v1/messages/count_tokens with an image = the input tokens the same request reports (the
  image's rows·cols pads, not one).
- 400s naming the part and the reason: an http(s) URL (the server fetches nothing), bad base64,
  bytes that are no image, a PNG / JPEG / WebP cut in the middle (at validation, nothing queued;
  count_tokens too), an image over --max-source-pixels (naming the bound and the size),
  an Anthropic url source, a Responses file_id, and every image part on a server without
  --mmproj (saying it was started without a vision tower).
- The prefix cache (--cache-ram): a second turn with the same image restores the prefix past
  the image (snug_images_encoded_total does not move, prefix hits do) and answers as a fresh
  server does; the same text with another image does not reuse it (a new encode, its own
  answer).
- The plan: the boot log lists the vision items; allocations: a second request with the same
  image costs no more counted allocations than the first (the encoder's memory is one block made
  at boot).
Runnable as a script; prints "N passed, N failed"."""
import base64
import io
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SNUG, SRC, Results, run  # noqa: E402
from test_server import KEY, Server, stop_all, wait_idle  # noqa: E402

import anthropic  # noqa: E402
import openai  # noqa: E402
from PIL import Image  # noqa: E402

D = os.path.join(SRC, "tests", "data", "vision")
TEXT = os.path.join(D, "text-f16.gguf")
MMPROJ = os.path.join(D, "mmproj-f16.gguf")
MODEL = "text-f16.gguf"
BOUNDS = ["--min-image-pixels", 8 * 32 * 32, "--max-image-pixels", 128 * 32 * 32]
N = 16
QUESTION = "what is in the picture?"


def png_b64(path):
    return base64.b64encode(open(path, "rb").read()).decode()


def chat_msgs(b64, question=QUESTION):
    return [{"role": "user", "content": [
        {"type": "text", "text": question},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64}",
                                            "detail": "high"}}]}]


def metric(srv, name):
    st, body, _ = srv.raw("GET", "/metrics")
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise RuntimeError(f"no {name} in /metrics")


def cli_greedy(tmp, messages, image):
    """The CLI's tokens for the server's rendered prompt: `serve --render-only`, tokenize,
    `logits --mmproj --image --greedy N` (the path test_vision_fixture.py checks against
    transformers)."""
    req = os.path.join(tmp, "req.json")
    json.dump({"messages": messages, "max_tokens": N}, open(req, "w"))
    p = subprocess.run([SNUG, "serve", "-m", TEXT, "--render-only", req], capture_output=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    text = p.stdout.decode()
    ids = json.loads(run("tokenize", "-m", TEXT, "--text", text).stdout)
    p_ids = os.path.join(tmp, "ids.json")
    json.dump(ids, open(p_ids, "w"))
    out = os.path.join(tmp, "out.f32")
    lp = run("logits", "-m", TEXT, "--ids", p_ids, "-o", out, "--greedy", N, "--mmproj", MMPROJ,
             "--image", image, *BOUNDS)
    return json.loads(lp.stdout.strip().splitlines()[-1]), text


def main():
    r = Results()
    img0 = os.path.join(D, "img0.png")
    b64 = png_b64(img0)
    with tempfile.TemporaryDirectory() as tmp:
        want, text = cli_greedy(tmp, chat_msgs("IMAGE"), img0)
        r.check(text.count("<|image_pad|>") == 1 and len(want) == N,
                f"CLI reference: rendered prompt with one image place, {len(want)} greedy tokens")
        servers = []
        try:
            S = Server(TEXT, tmp, "V", "--api-key", KEY, "--ctx", 512, "--mmproj", MMPROJ,
                       *BOUNDS, "--cache-ram", "64MiB", "--slots", 1)
            servers.append(S)
            S.log.seek(0)
            boot = S.log.read()
            r.check("vision encoder work (largest image)" in boot and
                    "vision source (decode+resize)" in boot and "vision tower" in boot,
                    "boot log: the plan lists the vision items" + ("" if "vision tower" in boot
                                                                   else boot[-3000:]))
            cl = S.client()

            def chat_text(c):
                m = c.choices[0].message
                return ((m.model_extra or {}).get("reasoning_content") or "") + (m.content or "")

            c = cl.chat.completions.create(model=MODEL, max_tokens=N, temperature=0,
                                           messages=chat_msgs(b64), logprobs=True)
            got = chat_text(c)
            toks = [t.token for t in c.choices[0].logprobs.content]
            # the CLI's greedy ids, one token's text each, through the server's detokenizer
            want_toks = [S.raw("POST", "/detokenize", {"tokens": [i]})[1]["content"] for i in want]
            n = len(toks)
            r.check(c.usage.prompt_tokens > 15 and n >= 1,
                    f"chat with a base64 PNG answers ({c.usage.prompt_tokens} prompt tokens, "
                    f"{n} generated)")
            r.check(n >= 1 and toks == want_toks[:n] and (n == N or c.choices[0].finish_reason ==
                                                           "stop"),
                    f"chat with the image = `snug logits --mmproj --image --greedy {N}` token by "
                    f"token: {toks} vs {want_toks}")
            c2 = cl.chat.completions.create(model=MODEL, max_tokens=N, temperature=0, messages=[
                {"role": "user", "content": [{"type": "text", "text": QUESTION}]}])
            r.check(chat_text(c2) != got,
                    f"the same chat without the image answers otherwise ({chat_text(c2)!r})")
            enc1 = metric(S, "snug_images_encoded_total")
            r.check(enc1 == 1, f"one image encoded ({enc1})")

            # Anthropic and Responses forms: the same tokens
            ac = anthropic.Anthropic(base_url=f"http://127.0.0.1:{S.port}", api_key=KEY,
                                     max_retries=0)
            m = ac.messages.create(model=MODEL, max_tokens=N, extra_body={"temperature": 0}, messages=[
                {"role": "user", "content": [
                    {"type": "text", "text": QUESTION},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": b64}}]}])
            mt = "".join((getattr(b, "thinking", None) or "") + (getattr(b, "text", None) or "")
                         for b in m.content)
            r.check(mt == got, f"/v1/messages image block: same answer ({mt!r} vs {got!r})")
            rs = cl.responses.create(model=MODEL, max_output_tokens=N, temperature=0, input=[
                {"role": "user", "content": [
                    {"type": "input_text", "text": QUESTION},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{b64}"}]}])
            rt = ""
            for it in rs.output:
                if it.type == "reasoning":
                    rt += "".join(x.text for x in (it.content or []))
                elif it.type == "message":
                    rt += "".join(getattr(x, "text", "") for x in it.content)
            r.check(rt == got, f"Responses input_image: same answer ({rt!r})")

            # /v1/messages/count_tokens counts the image's rows·cols pads, as the request's usage
            # does (the fixture's images: 6x10 -> 15 pads for image 0, 12x4 -> 12 for image 1)
            for img_name in ("img0.png", "img1.png"):
                ib64 = png_b64(os.path.join(D, img_name))
                amsgs = [{"role": "user", "content": [
                    {"type": "text", "text": "count " + img_name},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": ib64}}]}]
                st, body, _ = S.raw("POST", "/v1/messages/count_tokens",
                                    {"model": MODEL, "messages": amsgs})
                am = ac.messages.create(model=MODEL, max_tokens=1, extra_body={"temperature": 0},
                                        messages=amsgs)
                used = am.usage.input_tokens + (am.usage.cache_read_input_tokens or 0)
                r.check(st == 200 and body.get("input_tokens") == used,
                        f"count_tokens with {img_name} = the request's usage "
                        f"({body.get('input_tokens') if st == 200 else body} vs {used})")
                wait_idle(S)

            # the prefix cache: a second turn with the same image does not encode it again
            wait_idle(S)
            enc_a = metric(S, "snug_images_encoded_total")
            hits_a = metric(S, "snug_prefix_cache_hits_total")
            turn2 = chat_msgs(b64) + [{"role": "assistant", "content": "It is a picture."},
                                      {"role": "user", "content": "and then?"}]
            t2 = cl.chat.completions.create(model=MODEL, max_tokens=N, temperature=0,
                                            messages=turn2)
            wait_idle(S)
            enc_b = metric(S, "snug_images_encoded_total")
            hits_b = metric(S, "snug_prefix_cache_hits_total")
            r.check(enc_b == enc_a and t2.usage.prompt_tokens_details.cached_tokens > 20,
                    f"second turn with the same image: no encode ({enc_a} -> {enc_b}), "
                    f"{t2.usage.prompt_tokens_details.cached_tokens} cached tokens, hits "
                    f"{hits_a} -> {hits_b}")
            # the same text with another image: no reuse past the image
            img1 = png_b64(os.path.join(D, "img2.png"))
            other = chat_msgs(img1) + turn2[1:]
            t3 = cl.chat.completions.create(model=MODEL, max_tokens=N, temperature=0,
                                            messages=other)
            wait_idle(S)
            enc_c = metric(S, "snug_images_encoded_total")
            r.check(enc_c == enc_b + 1 and chat_text(t3) != chat_text(t2),
                    f"same text, another image: encoded ({enc_b} -> {enc_c}), its own answer")

            # a fresh server answers turn 2 as the restored one did
            S2 = Server(TEXT, tmp, "V2", "--api-key", KEY, "--ctx", 512, "--mmproj", MMPROJ,
                        *BOUNDS)
            servers.append(S2)
            f2 = S2.client().chat.completions.create(model=MODEL, max_tokens=N, temperature=0,
                                                     messages=turn2)
            r.check(chat_text(f2) == chat_text(t2),
                    f"restored prefix with the image = a fresh run ({chat_text(f2)!r} vs "
                    f"{chat_text(t2)!r})")

            # --backend cuda --mmproj, its device paths (image rows and 3-D positions uploaded,
            # logits downloaded; the whole tower on the GPU too: --vision-backend follows
            # --backend) taken over the CPU ops by the test stand-in libsnug_fakedev.so (tests/support/fake_device.c; the kernels themselves:
            # tests/device/run_vision_device.sh): the CPU server's answers
            fake = os.path.join(os.path.dirname(SNUG), "libsnug_fakedev.so")
            os.environ["SNUG_CUDA_LIB"] = fake
            try:
                S5 = Server(TEXT, tmp, "V5", "--api-key", KEY, "--ctx", 512, "--mmproj", MMPROJ,
                            *BOUNDS, "--backend", "cuda", "--cache-ram", "64MiB", "--slots", 1)
            finally:
                del os.environ["SNUG_CUDA_LIB"]
            servers.append(S5)
            c5 = S5.client()
            g5 = c5.chat.completions.create(model=MODEL, max_tokens=N, temperature=0,
                                            messages=chat_msgs(b64), logprobs=True)
            t5 = [t.token for t in g5.choices[0].logprobs.content]
            S5.log.seek(0)
            r.check(t5 == toks and "vision tower on the cuda backend" in S5.log.read(),
                    f"serve --backend cuda --mmproj (device paths over the CPU ops): the CPU "
                    f"server's tokens ({t5} vs {toks})")
            wait_idle(S5)
            u5 = c5.chat.completions.create(model=MODEL, max_tokens=N, temperature=0,
                                            messages=turn2)
            r.check(chat_text(u5) == chat_text(t2),
                    f"--backend cuda: turn 2 after the image (no prefix cache on a device engine "
                    f"yet: prefilled) = the CPU's answer ({chat_text(u5)!r})")

            # allocations: the same image request twice on the cached server — the first encodes
            # the image, the second restores the prefix past it and does not — costs the same
            # counted allocations: encoding allocates nothing (the encoder's buffers are one
            # block made at boot; the engine thread encodes into it)
            cost = []
            msgs = chat_msgs(png_b64(os.path.join(D, "img1.png")), "describe")
            for _ in range(2):
                wait_idle(S)
                e0, a0 = metric(S, "snug_images_encoded_total"), metric(S, "snug_heap_allocations_total")
                cl.chat.completions.create(model=MODEL, max_tokens=4, temperature=0, messages=msgs)
                wait_idle(S)
                cost.append((metric(S, "snug_heap_allocations_total") - a0,
                             metric(S, "snug_images_encoded_total") - e0))
            r.check([c[1] for c in cost] == [1, 0] and cost[0][0] == cost[1][0],
                    f"an image request with an encode and one without cost the same counted "
                    f"allocations: (allocations, encodes) {cost}")

            # 400s
            def bad(messages, want, what):
                try:
                    cl.chat.completions.create(model=MODEL, max_tokens=2, messages=messages)
                    r.check(False, f"{what}: 400")
                except openai.BadRequestError as e:
                    r.check(all(w in str(e) for w in want), f"{what}: 400 saying {want} ({e})")
            bad(chat_msgs("x")[:0] + [{"role": "user", "content": [
                {"type": "text", "text": "hi"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}],
                ["never fetches", "content[1]"], "http URL")
            bad(chat_msgs("iVBOR$$$"), ["base64", "content[1]", "offset 5"], "bad base64")
            bad(chat_msgs(base64.b64encode(b"GIF89a not an image at all").decode()),
                ["not PNG, JPEG or WebP", "content[1]"], "undecodable bytes")
            # a file cut in the middle (a valid header, then the data ends): a 400 at validation
            # naming the part, nothing queued (no encode) — PNG (in its IDAT), JPEG, WebP
            src_img = Image.open(img0).convert("RGB")
            for fmt, media in (("PNG", "png"), ("JPEG", "jpeg"), ("WEBP", "webp")):
                buf = io.BytesIO()
                src_img.save(buf, fmt, **({"quality": 90} if fmt != "PNG" else {}))
                whole = buf.getvalue()
                cut = whole[:len(whole) // 2]
                wait_idle(S)
                enc_t0 = metric(S, "snug_images_encoded_total")
                msgs_cut = [{"role": "user", "content": [
                    {"type": "text", "text": QUESTION},
                    {"type": "image_url", "image_url": {
                        "url": f"data:image/{media};base64,{base64.b64encode(cut).decode()}"}}]}]
                bad(msgs_cut, ["content[1]", "truncated"], f"{fmt} cut in the middle")
                st, body, _ = S.raw("POST", "/v1/messages/count_tokens", {
                    "model": MODEL, "messages": [{"role": "user", "content": [
                        {"type": "image", "source": {"type": "base64",
                                                     "media_type": f"image/{media}",
                                                     "data": base64.b64encode(cut).decode()}}]}]})
                r.check(st == 400 and "truncated" in json.dumps(body),
                        f"{fmt} cut in the middle: count_tokens 400 too ({st})")
                wait_idle(S)
                enc_t1 = metric(S, "snug_images_encoded_total")
                r.check(enc_t1 == enc_t0, f"{fmt} cut in the middle: nothing queued, no encode "
                                          f"({enc_t0} -> {enc_t1})")
                # the whole file still answers (the check does not refuse good files)
                ok_msgs = [{"role": "user", "content": [
                    {"type": "text", "text": QUESTION},
                    {"type": "image_url", "image_url": {
                        "url": f"data:image/{media};base64,{base64.b64encode(whole).decode()}"}}]}]
                c_ok = cl.chat.completions.create(model=MODEL, max_tokens=2, temperature=0,
                                                  messages=ok_msgs)
                r.check(c_ok.usage.prompt_tokens > 15, f"{fmt} whole: answers")
            big = io.BytesIO()
            Image.new("RGB", (3000, 2000), (10, 200, 30)).save(big, "PNG")
            S3 = Server(TEXT, tmp, "V3", "--api-key", KEY, "--ctx", 256, "--mmproj", MMPROJ,
                        *BOUNDS, "--max-source-pixels", 1000000)
            servers.append(S3)
            try:
                S3.client().chat.completions.create(model=MODEL, max_tokens=2, messages=chat_msgs(
                    base64.b64encode(big.getvalue()).decode()))
                r.check(False, "over --max-source-pixels: 400")
            except openai.BadRequestError as e:
                r.check("--max-source-pixels 1000000" in str(e) and "3000 x 2000" in str(e),
                        f"over --max-source-pixels: 400 naming the bound and the size ({e})")
            st, body, _ = S.raw("POST", "/v1/messages", {
                "model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": [
                    {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}]}]})
            r.check(st == 400 and "never fetches" in json.dumps(body),
                    f"/v1/messages url source: 400 ({st})")
            try:
                cl.responses.create(model=MODEL, input=[{"role": "user", "content": [
                    {"type": "input_image", "file_id": "file-123"}]}])
                r.check(False, "Responses file_id: 400")
            except openai.BadRequestError as e:
                r.check("file_id" in str(e), f"Responses file_id: 400 ({e})")

            # no --mmproj: every form is a 400 saying so
            S4 = Server(TEXT, tmp, "V4", "--api-key", KEY, "--ctx", 256)
            servers.append(S4)
            c4 = S4.client()
            try:
                c4.chat.completions.create(model=MODEL, max_tokens=2, messages=chat_msgs(b64))
                r.check(False, "no --mmproj: 400")
            except openai.BadRequestError as e:
                r.check("without a vision tower" in str(e) and "--mmproj" in str(e),
                        f"no --mmproj: chat image 400 ({e})")
            try:
                c4.responses.create(model=MODEL, input=[{"role": "user", "content": [
                    {"type": "input_image", "image_url": f"data:image/png;base64,{b64}"}]}])
                r.check(False, "no --mmproj: responses 400")
            except openai.BadRequestError as e:
                r.check("without a vision tower" in str(e), f"no --mmproj: responses 400 ({e})")
            st, body, _ = S4.raw("POST", "/v1/messages", {
                "model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": b64}}]}]})
            r.check(st == 400 and "without a vision tower" in json.dumps(body),
                    f"no --mmproj: /v1/messages image 400 ({st})")
        finally:
            stop_all(r, servers)
    r.done()


if __name__ == "__main__":
    main()
