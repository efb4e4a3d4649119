"""test_server_tools.py — the tool-call policy (src/server/toolpolicy.h) on all three APIs,
through the official clients, with real sampling (temperature 1, seeded):

- no `tools`, or tool_choice "none" (Anthropic {"type": "none"}): no answer holds a call — not
  on chat, /v1/messages or /v1/responses, not beside a JSON response_format — over 20 seeds on
  the demo model (5 more streamed on each API), which calls get_weather readily: the same
  prompt with the tools offered under "auto" gets calls (the control that shows the prompt
  would draw them);
- tool_choice "required" (Anthropic {"type": "any"}) and a named function: every reply is a
  call to a declared tool (the named one) whose arguments `jsonschema` finds valid under the
  tool's schema — on the demo model and on the trained fixture, whose free sampling writes
  anything, so only the grammar makes its calls valid.

Models: data/demo/snug-demo-q8_0.gguf and ../shared/fixtures/trained/trained-f16.gguf.
Runnable as a script; prints "N passed, N failed".
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SRC, Results, fixtures_dir  # noqa: E402
from test_server import Server, stop_all  # noqa: E402

import anthropic  # noqa: E402
import jsonschema  # noqa: E402
import openai  # noqa: E402

DEMO = os.path.join(SRC, "data", "demo", "snug-demo-q8_0.gguf")
ASK = "What is the weather in Paris?"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"},
                                            "days": {"type": "integer"}},
           "required": ["city"]}
TIME = {"type": "object", "properties": {"zone": {"type": "string",
                                                  "enum": ["UTC", "CET", "PST"]}},
        "required": ["zone"]}
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
C_TOOLS = [{"type": "function", "function": {"name": n, "description": f"{n} tool",
                                             "parameters": s}} for n, s in SCHEMAS.items()]
A_TOOLS = [{"name": n, "description": f"{n} tool", "input_schema": s} for n, s in SCHEMAS.items()]
R_TOOLS = [{"type": "function", "name": n, "description": f"{n} tool", "parameters": s}
           for n, s in SCHEMAS.items()]
SEEDS = range(20)


class Clients:
    def __init__(self, srv, model):
        self.model = model
        self.oa = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="x",
                                max_retries=0, timeout=120)
        self.an = anthropic.Anthropic(base_url=f"http://127.0.0.1:{srv.port}", api_key="x",
                                      max_retries=0, timeout=120)

    def chat(self, seed, stream=False, **kw):
        """[(name, arguments dict)] of the reply's calls, and whether it says tool_calls."""
        args = dict(model=self.model, messages=[{"role": "user", "content": ASK}],
                    temperature=1, seed=seed, max_tokens=120, **kw)
        if stream:
            calls, finish = {}, None
            for ch in self.oa.chat.completions.create(stream=True, **args):
                for c in ch.choices:
                    for tc in c.delta.tool_calls or []:
                        e = calls.setdefault(tc.index, ["", ""])
                        e[0] += (tc.function.name or "") if tc.function else ""
                        e[1] += (tc.function.arguments or "") if tc.function else ""
                    finish = c.finish_reason or finish
            return [(n, json.loads(a or "{}")) for n, a in calls.values()], finish == "tool_calls"
        r = self.oa.chat.completions.create(**args)
        m = r.choices[0].message
        return ([(t.function.name, json.loads(t.function.arguments)) for t in m.tool_calls or []],
                r.choices[0].finish_reason == "tool_calls")

    def messages(self, seed, stream=False, **kw):
        # (this SDK takes temperature through extra_body)
        args = dict(model=self.model, max_tokens=120, messages=[{"role": "user", "content": ASK}],
                    extra_body={"seed": seed, "temperature": 1}, **kw)
        if stream:
            with self.an.messages.stream(**args) as s:
                r = s.get_final_message()
        else:
            r = self.an.messages.create(**args)
        return ([(b.name, b.input) for b in r.content if b.type == "tool_use"],
                r.stop_reason == "tool_use")

    def responses(self, seed, stream=False, **kw):
        args = dict(model=self.model, input=ASK, temperature=1, max_output_tokens=120,
                    extra_body={"seed": seed}, **kw)
        if stream:
            with self.oa.responses.stream(**args) as s:  # (an incomplete one ends the stream too)
                r = [ev.response for ev in s
                     if ev.type in ("response.completed", "response.incomplete")][-1]
        else:
            r = self.oa.responses.create(**args)
        return [(o.name, json.loads(o.arguments)) for o in r.output
                if o.type == "function_call"], False


def valid(calls, named=None):
    """Every call names a declared tool (the named one) with schema-valid arguments."""
    if not calls:
        return False
    for name, a in calls:
        if name not in SCHEMAS or (named and name != named):
            return False
        try:
            jsonschema.validate(a, SCHEMAS[name])
        except jsonschema.ValidationError:
            return False
    return True


def test_none(res, cl, label):
    """No call without tools or under tool_choice none, on every API (20 seeds each)."""
    cases = [
        ("chat, no tools", lambda s: cl.chat(s)),
        ("chat, tool_choice none", lambda s: cl.chat(s, tools=C_TOOLS, tool_choice="none")),
        ("chat, no tools, response_format json_object",
         lambda s: cl.chat(s, response_format={"type": "json_object"})),
        ("chat stream, no tools", lambda s: cl.chat(s, stream=True)),
        ("messages, no tools", lambda s: cl.messages(s)),
        ("messages, tool_choice {type: none}",
         lambda s: cl.messages(s, tools=A_TOOLS, tool_choice={"type": "none"})),
        ("messages stream, no tools", lambda s: cl.messages(s, stream=True)),
        ("responses, no tools", lambda s: cl.responses(s)),
        ("responses, tool_choice none",
         lambda s: cl.responses(s, tools=R_TOOLS, tool_choice="none")),
        ("responses stream, no tools", lambda s: cl.responses(s, stream=True)),
    ]
    for what, call in cases:
        seeds = SEEDS if "stream" not in what else range(5)  # (the stream shares the parser)
        bad = [s for s in seeds if any(call(s))]
        res.check(not bad, f"{label}: {what}: no tool call over {len(seeds)} seeds "
                           f"(seeds with one: {bad})")


def test_forced(res, cl, label, seeds):
    """required / any and a named function: always a valid call, on every API."""
    cases = [
        ("chat required", None, lambda s: cl.chat(s, tools=C_TOOLS, tool_choice="required")),
        ("chat named get_time", "get_time", lambda s: cl.chat(
            s, tools=C_TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}})),
        ("chat stream required", None,
         lambda s: cl.chat(s, stream=True, tools=C_TOOLS, tool_choice="required")),
        ("messages any", None, lambda s: cl.messages(s, tools=A_TOOLS,
                                                     tool_choice={"type": "any"})),
        ("messages named get_weather", "get_weather", lambda s: cl.messages(
            s, tools=A_TOOLS, tool_choice={"type": "tool", "name": "get_weather"})),
        ("responses required", None,
         lambda s: cl.responses(s, tools=R_TOOLS, tool_choice="required")),
        ("responses named get_time", "get_time", lambda s: cl.responses(
            s, tools=R_TOOLS, tool_choice={"type": "function", "name": "get_time"})),
    ]
    for what, named, call in cases:
        got = [call(s)[0] for s in seeds]
        ok = [valid(c, named) for c in got]
        res.check(all(ok), f"{label}: {what}: {sum(ok)}/{len(seeds)} replies are valid calls "
                           f"(first: {got[0]!r})")


def main():
    res = Results()
    fx = fixtures_dir(res)
    if fx is None:
        res.done()
    with tempfile.TemporaryDirectory() as tmp:
        servers = []
        try:
            D = Server(DEMO, tmp, "demo", "--ctx", "2048")
            servers.append(D)
            T = Server(os.path.join(fx, "trained", "trained-f16.gguf"), tmp, "trained",
                       "--ctx", "1024")
            servers.append(T)
            demo = Clients(D, "snug-demo-q8_0.gguf")
            # the control: offered the tool under "auto", the demo model calls it
            auto = [demo.chat(s, tools=C_TOOLS)[0] for s in SEEDS]
            n_auto = sum(1 for calls in auto if calls)
            res.check(n_auto >= len(SEEDS) // 2 and all(valid(c) for c in auto if c),
                      f"demo: the prompt draws calls when the tools are offered ({n_auto}/"
                      f"{len(SEEDS)} seeds under auto, each to a declared tool)")
            test_none(res, demo, "demo")
            test_forced(res, demo, "demo", range(8))
            trained = Clients(T, "trained-f16.gguf")
            test_forced(res, trained, "trained", range(5))
        finally:
            stop_all(res, servers)
    res.done()


if __name__ == "__main__":
    main()
