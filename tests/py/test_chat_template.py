"""test_chat_template.py — golden test of snug's native chat-template renderer (src/server/chat.c)
against the model's own Jinja template rendered the Hugging Face way with Python jinja2
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, tojson =
json.dumps(x, ensure_ascii=False), raise_exception). Each case is an OpenAI chat request; snug
renders it with `snug serve --render-only REQUEST.json` and the bytes must be identical. Requests
the template rejects must be rejected by snug too (with the same message for raise_exception).
The template comes from ../shared/spec (skipped visibly when absent, as fixtures are)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SNUG, SRC, Results  # noqa: E402

import jinja2  # noqa: E402
import jinja2.ext  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402


def template_path(res):
    path = os.path.join(SRC, "..", "shared", "spec", "qwen36-chat_template.jinja")
    if os.path.isfile(path):
        return path
    if os.environ.get("SNUG_REQUIRE_FIXTURES") == "1":
        res.check(False, f"chat template {path} present (SNUG_REQUIRE_FIXTURES=1)")
    else:
        print(f"SKIP: chat template {path} is missing")
    return None


class TemplateRaise(Exception):
    pass


def make_renderer(path):
    def raise_exception(msg):
        raise TemplateRaise(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    with open(path, encoding="utf-8") as f:
        tpl = env.from_string(f.read())

    def render(req, thinking_default=True):
        """What an OpenAI server does: string tool-call arguments parsed to objects, then the
        template with add_generation_prompt and chat_template_kwargs."""
        msgs = json.loads(json.dumps(req["messages"]))
        for m in msgs if isinstance(msgs, list) else []:
            if isinstance(m, dict) and m.get("role") == "developer":
                m["role"] = "system"  # OpenAI's newer name for it (as llama.cpp and vLLM map it)
            for tc in (m.get("tool_calls") or []) if isinstance(m, dict) else []:
                fn = tc.get("function", tc) if isinstance(tc, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                    fn["arguments"] = json.loads(fn["arguments"])
        kwargs = {}
        if not thinking_default:
            kwargs["enable_thinking"] = False
        kwargs.update(req.get("chat_template_kwargs") or {})
        return tpl.render(messages=msgs, tools=req.get("tools"),
                          add_generation_prompt=req.get("add_generation_prompt", True), **kwargs)

    return render


# ---- the cases ------------------------------------------------------------------------------

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather — «now» for a city, e.g. \"Zürich\"",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "city name"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7.5},
        "units": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web.\nReturns JSON.",
    "parameters": {"type": "object", "properties": {
        "q": {"type": "string"}, "filters": {"type": "object"}, "tags": {"type": "array"},
        "exact": {"type": "boolean"}, "limit": {"type": "number"}}}}}
TOOLS = [WEATHER, SEARCH]


def tc(name, args, flat=False, id_="call_1"):
    fn = {"name": name, "arguments": args}
    return fn if flat else {"id": id_, "type": "function", "function": fn}


def U(c):
    return {"role": "user", "content": c}


def A(c, **kw):
    return {"role": "assistant", "content": c, **kw}


def S(c):
    return {"role": "system", "content": c}


def T(c, id_="call_1"):
    return {"role": "tool", "tool_call_id": id_, "content": c}


CASES = [
    ("single user", {"messages": [U("Hello!")]}),
    ("system + user", {"messages": [S("You are terse."), U("Hi")]}),
    ("thinking off via kwargs", {"messages": [U("Hi")],
                                 "chat_template_kwargs": {"enable_thinking": False}}),
    ("thinking on via kwargs", {"messages": [U("Hi")],
                                "chat_template_kwargs": {"enable_thinking": True}}),
    ("enable_thinking string 'false' is not false", {
        "messages": [U("Hi")], "chat_template_kwargs": {"enable_thinking": "false"}}),
    ("no generation prompt", {"messages": [U("Hi"), A("Hello.")], "add_generation_prompt": False}),
    ("multi-turn", {"messages": [S("sys"), U("a"), A("b"), U("c"), A("d"), U("e")]}),
    ("reasoning_content in history dropped", {"messages": [
        U("q1"), A("answer 1", reasoning_content="thought 1"), U("q2")]}),
    ("reasoning_content after last query kept", {"messages": [
        U("q1"), A("answer 1", reasoning_content="  thought 1\n\n")],
        "add_generation_prompt": False}),
    ("preserve_thinking keeps history reasoning", {"messages": [
        U("q1"), A("answer 1", reasoning_content="thought 1"), U("q2"),
        A("answer 2", reasoning_content="thought 2"), U("q3")],
        "chat_template_kwargs": {"preserve_thinking": True}}),
    ("preserve_thinking false explicit", {"messages": [
        U("q1"), A("answer 1", reasoning_content="thought 1"), U("q2")],
        "chat_template_kwargs": {"preserve_thinking": False}}),
    ("preserve_thinking non-bool is not true", {"messages": [
        U("q1"), A("answer 1", reasoning_content="thought 1"), U("q2")],
        "chat_template_kwargs": {"preserve_thinking": 1}}),
    ("<think> in content, history", {"messages": [
        U("q1"), A("<think>\nI think.\n</think>\n\nThe answer."), U("q2")]}),
    ("<think> in content, kept", {"messages": [
        U("q1"), A("<think>\nI think.\n</think>\n\nThe answer.")], "add_generation_prompt": False}),
    ("</think> without <think>", {"messages": [U("q"), A("just thoughts\n</think>\nreply")],
                                  "add_generation_prompt": False}),
    ("several </think>", {"messages": [U("q"), A("a<think>b</think>c</think>\n\nd")],
                          "chat_template_kwargs": {"preserve_thinking": True}}),
    ("reasoning_content wins over <think> in content", {"messages": [
        U("q"), A("<think>x</think>y", reasoning_content="r")], "add_generation_prompt": False}),
    ("reasoning_content null falls back to content", {"messages": [
        U("q"), A("<think>x</think>y", reasoning_content=None)], "add_generation_prompt": False}),
    ("reasoning_content number falls back to content", {"messages": [
        U("q"), A("<think>x</think>y", reasoning_content=5)], "add_generation_prompt": False}),
    ("tools, no system", {"messages": [U("Weather in Paris?")], "tools": TOOLS}),
    ("tools + system", {"messages": [S("Be brief."), U("Weather?")], "tools": TOOLS}),
    ("tools + empty system", {"messages": [S("   "), U("Weather?")], "tools": [WEATHER]}),
    ("empty tools list", {"messages": [S("sys"), U("x")], "tools": []}),
    ("tool call, string args", {"messages": [
        U("Weather in Paris?"), A("", tool_calls=[tc("get_weather", '{"city": "Paris", "days": 3}')]),
        T('{"temp": 21}')], "tools": TOOLS}),
    ("tool call, object args of every type", {"messages": [
        U("search"), A(None, tool_calls=[tc("search", {
            "q": "snug \"engine\"\nline2", "filters": {"lang": "en", "year": [2024, 2025]},
            "tags": ["a", "b", 3, None, True], "exact": False, "limit": 10, "ratio": 0.5,
            "none": None, "big": 1e20, "tiny": 1e-7, "neg": -0.0, "f": 1.0, "pi": 3.141592653589793,
            "e16": 1e16, "e15": 1e15, "small": 0.0001, "smaller": 0.00001, "int": 123456789012345,
            "emptystr": "", "emptyobj": {}, "emptyarr": []})])], "add_generation_prompt": False,
        "tools": TOOLS}),
    ("tool call with content before", {"messages": [
        U("Weather?"), A("Let me check.", tool_calls=[tc("get_weather", {"city": "Oslo"})]),
        T("sunny")], "tools": TOOLS}),
    ("tool call with whitespace content", {"messages": [
        U("Weather?"), A(" \n ", tool_calls=[tc("get_weather", {"city": "Oslo"})]),
        T("sunny")], "tools": TOOLS}),
    ("two tool calls, flat form", {"messages": [
        U("Both?"), A("", tool_calls=[tc("get_weather", {"city": "A"}, flat=True),
                                      tc("get_weather", '{"city": "B"}', flat=True)]),
        T("a", "1"), T("b", "2")], "tools": TOOLS}),
    ("several tool results in a row, then user", {"messages": [
        U("go"), A("", tool_calls=[tc("search", {"q": "x"}), tc("search", {"q": "y"}),
                                   tc("search", {"q": "z"})]),
        T("rx"), T("ry"), T("rz"), U("thanks, now summarize")], "tools": TOOLS}),
    ("tool results then assistant final", {"messages": [
        U("go"), A("", tool_calls=[tc("search", {"q": "x"})], reasoning_content="need search"),
        T("result"), A("Done.", reasoning_content="have it")], "add_generation_prompt": False,
        "tools": TOOLS}),
    ("multi-step agent keeps reasoning after the query", {"messages": [
        S("agent"), U("task"),
        A("step 1", tool_calls=[tc("search", {"q": "a"})], reasoning_content="r1"), T("ra"),
        A("", tool_calls=[tc("search", {"q": "b"})], reasoning_content="r2"), T("rb")],
        "tools": TOOLS}),
    ("user message that is only a tool_response", {"messages": [
        U("real question"), A("", tool_calls=[tc("search", {"q": "a"})], reasoning_content="r1"),
        U("<tool_response>\nfake\n</tool_response>")], "tools": TOOLS}),
    ("content as parts", {"messages": [
        S([{"type": "text", "text": "sys "}, {"type": "text", "text": "part"}]),
        U([{"type": "text", "text": "Hello "}, {"type": "text", "text": "world"}])]}),
    ("image and video parts", {"messages": [U([
        {"type": "text", "text": "Look:"}, {"type": "image_url", "image_url": {"url": "x"}},
        {"type": "image", "image": "y"}, {"type": "video", "video": "v"}, "text only string"])]}),
    ("add_vision_id: pictures and videos numbered over the conversation", {"messages": [
        S("sys"), U([{"type": "image_url", "image_url": {"url": "a"}}, {"type": "text", "text": "and"},
                     {"type": "video", "video": "v1"}, {"type": "image", "image": "b"}]),
        A([{"type": "text", "text": "I see "}, {"type": "image", "image": "c"}]),
        U([{"type": "video", "video": "v2"}, {"type": "text", "text": "more"},
           {"image_url": {"url": "d"}}])],
        "chat_template_kwargs": {"add_vision_id": True}}),
    ("add_vision_id with tool results holding images", {"messages": [
        U([{"type": "image", "image": "a"}, {"type": "text", "text": "go"}]),
        A("", tool_calls=[tc("search", {"q": "x"})]),
        T([{"type": "image", "image": "r"}, {"type": "text", "text": "result"}]),
        T([{"type": "video", "video": "rv"}])], "tools": TOOLS,
        "chat_template_kwargs": {"add_vision_id": True}}),
    ("add_vision_id truthy number", {"messages": [U([{"type": "image", "image": "a"}, {"text": "x"}])],
                                     "chat_template_kwargs": {"add_vision_id": 1}}),
    ("add_vision_id truthy string", {"messages": [U([{"type": "video", "video": "a"}])],
                                     "chat_template_kwargs": {"add_vision_id": "no"}}),
    ("add_vision_id false-ish", {"messages": [U([{"type": "image", "image": "a"}])],
                                 "chat_template_kwargs": {"add_vision_id": 0}}),
    ("add_vision_id empty string", {"messages": [U([{"type": "image", "image": "a"}])],
                                    "chat_template_kwargs": {"add_vision_id": ""}}),
    ("add_vision_id false", {"messages": [U([{"type": "image", "image": "a"}])],
                             "chat_template_kwargs": {"add_vision_id": False}}),
    ("part with text number and null", {"messages": [U([{"text": 5}, {"text": 2.5},
                                                        {"text": None}, {"text": True}])]}),
    ("tool content as parts", {"messages": [
        U("go"), A("", tool_calls=[tc("search", {"q": "x"})]),
        T([{"type": "text", "text": "part result"}])], "tools": TOOLS}),
    ("unicode", {"messages": [
        S("Réponds en français. 日本語も"), U("emoji 🎉 and combining é and RTL שלום"),
        A("ok", tool_calls=[tc("search", {"q": "café ☕ \u2028 \x7f", "filters": {"ключ": "值"}})]),
        T("résultat 🎉")], "tools": TOOLS}),
    ("unicode whitespace trimmed", {"messages": [
        S("\u3000\xa0 sys \u2003\n"), U("\u2028 hi \x1c\x1f\x85"), A("\t ans \u202f"),
        U("\u205f q \r\n")]}),
    ("control characters in tojson", {"messages": [
        U("go"), A("", tool_calls=[tc("search", {
            "q": "a\x00b\x01c\tv\x1f\u007f\\ \"q\" /",
            "filters": {"s": "a\x00b\x01c\tv\x08\x0c\r\x1f\u007f\\ \"q\" /"}})])],
        "tools": TOOLS, "add_generation_prompt": False}),
    ("empty content", {"messages": [S(""), U(""), A(""), U("x")]}),
    ("null content user", {"messages": [{"role": "user", "content": None}, U("x")]}),
    ("missing content", {"messages": [{"role": "user"}, U("x")]}),
    ("extra fields ignored", {"messages": [
        {"role": "user", "content": "hi", "name": "bob", "extra": {"a": 1}}]}),
    ("crlf and tabs", {"messages": [U("line1\r\nline2\tend"), A("a\r\n\tb"), U("c")]}),
    ("tool message first", {"messages": [T("orphan"), U("question")]}),
    ("system then tool", {"messages": [S("s"), T("orphan"), U("question")]}),
    ("tool call args key order", {"messages": [
        U("x"), A("", tool_calls=[tc("f", '{"z": 1, "a": 2, "m": {"y": 1, "b": 2}}')])],
        "add_generation_prompt": False}),
    ("tool call without arguments", {"messages": [
        U("x"), A("", tool_calls=[{"type": "function", "function": {"name": "noargs"}}])],
        "add_generation_prompt": False}),
    ("empty tool_calls list", {"messages": [U("x"), A("y", tool_calls=[]), U("z")]}),
    ("tool_calls null", {"messages": [U("x"), A("y", tool_calls=None), U("z")]}),
    ("long conversation", {"messages": [S("s")] + sum(
        [[U(f"question {i}"), A(f"answer {i}", reasoning_content=f"thinking {i}")]
         for i in range(12)], []) + [U("last")]}),
    ("thinking off with tools and history", {"messages": [
        U("q"), A("", tool_calls=[tc("search", {"q": "a"})]), T("r")],
        "tools": TOOLS, "chat_template_kwargs": {"enable_thinking": False}}),
    ("tool definition with odd JSON", {"messages": [U("x")], "tools": [
        {"type": "function", "function": {"name": "odd", "description": "tab\there \"q\" \\ é",
                                          "parameters": {"type": "object", "properties": {
                                              "n": {"type": "number", "default": 0.1},
                                              "big": {"type": "integer", "default": -9007199254740993},
                                              "x": {"type": ["string", "null"]}}}}}]}),
    # rejected by the template
    ("error: system not first", {"messages": [U("a"), S("late")]}),
    ("error: no user query", {"messages": [S("s"), A("a")]}),
    ("error: only tool responses", {"messages": [U("<tool_response>\nx\n</tool_response>")]}),
    ("error: only system", {"messages": [S("s")]}),
    ("error: empty messages", {"messages": []}),
    ("error: unknown role", {"messages": [U("a"), {"role": "critic", "content": "x"}]}),
    ("error: content is a mapping", {"messages": [U({"text": "x"})]}),
    ("error: content is a number", {"messages": [U(5)]}),
    ("error: part of unknown type", {"messages": [U([{"type": "audio", "data": "x"}])]}),
    ("error: image in system", {"messages": [S([{"type": "image", "image": "x"}]), U("a")],
                                "tools": TOOLS}),
    ("error: video in system", {"messages": [S([{"type": "video"}]), U("a")]}),
    ("error: tool call without name", {"messages": [
        U("a"), A("", tool_calls=[{"type": "function", "function": {"arguments": {}}}])]}),
    ("error: arguments is a list", {"messages": [
        U("a"), A("", tool_calls=[tc("f", [1, 2])])]}),
]


def random_cases(n, seed=1234):
    """Seeded random conversations built from the pieces above: every role, content form,
    reasoning form and tool-call form, in random orders (some of which the template rejects)."""
    import random
    rnd = random.Random(seed)
    texts = ["hi", "", "  padded  ", "multi\nline\n", "ünïcödé 🎉", "<tool_response>\nx\n</tool_response>",
             "<think>\nr\n</think>\n\nans", "a</think>b", "\u3000wide\u3000", "tab\tand\r\n"]

    def content():
        k = rnd.random()
        if k < 0.7:
            return rnd.choice(texts)
        if k < 0.8:
            return None
        return [{"type": "text", "text": rnd.choice(texts)} for _ in range(rnd.randint(0, 3))]

    def args():
        vals = ["s", "", 1, -2.5, 1e-9, True, None, [1, "x"], {"k": {"n": [True]}}, "ü\n\"q\""]
        d = {f"p{i}": rnd.choice(vals) for i in range(rnd.randint(0, 3))}
        return json.dumps(d, ensure_ascii=rnd.random() < 0.5) if rnd.random() < 0.5 else d

    def message():
        roles = ["user", "user", "assistant", "assistant", "tool"]
        role = rnd.choice(roles + ["system", "developer"] if rnd.random() < 0.1 else roles)
        m = {"role": role, "content": content()}
        if role == "assistant":
            if rnd.random() < 0.4:
                m["reasoning_content"] = rnd.choice(texts)
            if rnd.random() < 0.4:
                m["tool_calls"] = [tc(rnd.choice(["get_weather", "search"]), args(),
                                      flat=rnd.random() < 0.3) for _ in range(rnd.randint(1, 3))]
        return m

    out = []
    for i in range(n):
        msgs = ([S(content())] if rnd.random() < 0.4 else []) + \
            [U(content())] * (rnd.random() < 0.6) + [message() for _ in range(rnd.randint(1, 7))]
        req = {"messages": msgs}
        if rnd.random() < 0.5:
            req["tools"] = rnd.choice([TOOLS, [SEARCH], []])
        if rnd.random() < 0.3:
            req["chat_template_kwargs"] = {"enable_thinking": rnd.choice([True, False]),
                                           "preserve_thinking": rnd.choice([True, False])}
        if rnd.random() < 0.2:
            req["add_generation_prompt"] = False
        out.append((f"random #{i}", req))
    return out


def snug_render(req, thinking_default):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(req, f, ensure_ascii=False)
        path = f.name
    try:
        args = [SNUG, "serve", "--render-only", path]
        if not thinking_default:
            args.append("--no-thinking")
        p = subprocess.run(args, capture_output=True, timeout=60)
    finally:
        os.unlink(path)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def main():
    res = Results()
    path = template_path(res)
    if not path:
        res.done()
    render = make_renderer(path)
    n_render = n_err = 0
    for thinking_default in (True, False):
        for name, req in CASES + (random_cases(200) if thinking_default else []):
            label = f"{name} (thinking default {'on' if thinking_default else 'off'})"
            try:
                ref, ref_err = render(req, thinking_default), None
            except TemplateRaise as e:
                ref, ref_err = None, ("raise", str(e))
            except Exception as e:  # a Jinja/Python type error inside the template
                ref, ref_err = None, ("type", f"{type(e).__name__}: {e}")
            rc, out, err = snug_render(req, thinking_default)
            if ref_err is None:
                n_render += 1
                ok = rc == 0 and out == ref
                res.check(ok, f"render: {label}")
                if not ok:
                    print(f"  rc={rc} stderr={err.strip()}\n  --- jinja2 ---\n{ref!r}\n"
                          f"  --- snug ---\n{out!r}")
            else:
                n_err += 1
                want = f"error: {ref_err[1]}" if ref_err[0] == "raise" else None
                ok = rc == 1 and (want is None or err.strip() == want)
                res.check(ok, f"reject: {label} ({ref_err[1]})")
                if not ok:
                    print(f"  rc={rc} stderr={err.strip()!r} stdout={out[:200]!r}")
    print(f"{n_render} renders compared byte for byte, {n_err} rejections compared")
    res.check(n_render >= 200 and n_err >= 40, "case counts")
    res.done()


if __name__ == "__main__":
    main()
