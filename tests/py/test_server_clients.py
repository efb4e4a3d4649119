"""test_server_clients.py — the client setups of docs/clients.md, each by the request shape that
client sends (headers, body fields, streaming flags, model names), with no network at test time:

- Claude Code, Codex and opencode are command-line programs: their documented requests are
  recorded below as fixtures (each cites where its shape is documented) and sent as raw HTTP;
- openai-agents and litellm are Python packages: the real SDKs make the requests.

Each setup runs an agent turn pair on a --script server (a tool call in the client's own tool
format, then the answer after the tool's result: the generation follows the scripted text
through the real detokenizer, output parser and stream) under the model names the client sends
(--alias), and once more on a server that samples from the demo model (--any-model, no script),
where the client's real tool schemas go through the grammar that holds a call to them (any
call it samples is checked against the tool's schema with `jsonschema`).

Model: data/demo/snug-demo-q8_0.gguf. Runnable as a script; prints "N passed, N failed".
"""
import asyncio
import http.client
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SRC, Results  # noqa: E402
from test_server import Server, stop_all  # noqa: E402

import openai  # noqa: E402

DEMO = os.path.join(SRC, "data", "demo", "snug-demo-q8_0.gguf")
KEY = "clients-key"
TURNS = "\n=== snug-script-turn ===\n"

# ---- Claude Code ----------------------------------------------------------------------------
# Shape: code.claude.com/docs/en/llm-gateway-protocol and /llm-gateway ("Gateway requirements",
# "Request headers", "Model selection"): ANTHROPIC_BASE_URL without /v1, POST /v1/messages and
# /v1/messages/count_tokens (through the Anthropic SDK's beta client: "?beta=true"), the
# anthropic-version and anthropic-beta headers, X-Claude-Code-Session-Id, the key as
# `Authorization: Bearer` (ANTHROPIC_AUTH_TOKEN) or `x-api-key` (ANTHROPIC_API_KEY); streamed
# requests with system blocks and cache_control marks, tools with draft-07 input schemas,
# metadata.user_id; the default model names, and GET /v1/models when model discovery is on.
CC_MODEL = "claude-sonnet-4-5-20250929"
CC_SMALL = "claude-haiku-4-5-20251001"
CC_HEADERS = {"anthropic-version": "2023-06-01",
              "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,"
                                "fine-grained-tool-streaming-2025-05-14",
              "X-Claude-Code-Session-Id": "3f1c0a52-5d8e-4a57-9d43-0c6b2f1e7a10",
              "x-app": "cli", "User-Agent": "claude-cli/2.1.0 (external, cli)",
              "Content-Type": "application/json", "Accept": "application/json"}
CC_TOOLS = [
    {"name": "Bash", "description": "Run a shell command.",
     "input_schema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                      "properties": {"command": {"type": "string", "description": "the command"},
                                     "timeout": {"type": "number"},
                                     "description": {"type": "string"},
                                     "run_in_background": {"type": "boolean"}},
                      "required": ["command"], "additionalProperties": False}},
    {"name": "Read", "description": "Read a file.",
     "input_schema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                      "properties": {"file_path": {"type": "string"},
                                     "offset": {"type": "number"},
                                     "limit": {"type": "number"}},
                      "required": ["file_path"], "additionalProperties": False}}]


def cc_body(messages, model=CC_MODEL, **kw):
    b = {"model": model, "max_tokens": 32000, "stream": True, "temperature": 1,
         "system": [{"type": "text", "text": "You are a coding agent in a terminal.",
                     "cache_control": {"type": "ephemeral"}}],
         "messages": messages, "tools": CC_TOOLS,
         "metadata": {"user_id": "user_0123_account__session_3f1c0a52"}}
    b.update(kw)
    return b


# ---- Codex -----------------------------------------------------------------------------------
# Shape: the Codex repository's configuration doc, github.com/openai/codex (model_providers: base_url ending in /v1,
# env_key, wire_api = "responses") and codex-rs (client_common.rs, codex-api's
# ResponsesApiRequest): POST {base_url}/responses with model, instructions, input items
# (developer / user messages of input_text parts; later the previous turn's reasoning and
# function_call items with their function_call_output), tools (function tools with
# strict: false, the freeform apply_patch tool with its Lark grammar), tool_choice "auto",
# parallel_tool_calls false, reasoning {effort, summary}, store false, stream true,
# include ["reasoning.encrypted_content"], prompt_cache_key; headers Authorization Bearer,
# OpenAI-Beta, originator, session_id.
CX_MODEL = "gpt-5-codex"
CX_HEADERS = {"OpenAI-Beta": "responses=experimental", "originator": "codex_cli_rs",
              "session_id": "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
              "conversation_id": "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
              "Accept": "text/event-stream", "Content-Type": "application/json",
              "User-Agent": "codex_cli_rs/0.50.0 (Debian 12; x86_64)"}
CX_PATCH_LARK = r'''
start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?
hunk: add_hunk
add_hunk: "*** Add File: " filename LF add_line+
filename: /(.+)/
add_line: "+" /(.*)/ LF -> line
%import common.LF
'''
CX_TOOLS = [
    {"type": "function", "name": "shell", "description": "Runs a shell command.", "strict": False,
     "parameters": {"type": "object",
                    "properties": {"command": {"type": "array", "items": {"type": "string"}},
                                   "workdir": {"type": "string"},
                                   "timeout_ms": {"type": "number"}},
                    "required": ["command"], "additionalProperties": False}},
    {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch.",
     "format": {"type": "grammar", "syntax": "lark", "definition": CX_PATCH_LARK}}]


def cx_body(input_items, model=CX_MODEL):
    return {"model": model, "instructions": "You are a coding agent.", "input": input_items,
            "tools": CX_TOOLS, "tool_choice": "auto", "parallel_tool_calls": False,
            "reasoning": {"effort": "medium", "summary": "auto"}, "store": False, "stream": True,
            "include": ["reasoning.encrypted_content"], "prompt_cache_key": "0199a1b2-c3d4"}


CX_FIRST = [{"type": "message", "role": "developer",
             "content": [{"type": "input_text", "text": "<permissions>workspace-write</permissions>"}]},
            {"type": "message", "role": "user",
             "content": [{"type": "input_text",
                          "text": "<environment_context><cwd>/work</cwd></environment_context>"}]},
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "List the files here."}]}]

# ---- opencode --------------------------------------------------------------------------------
# Shape: opencode.ai/docs/providers ("Custom provider": npm @ai-sdk/openai-compatible,
# options.baseURL ending in /v1, options.apiKey or {env:...}, models keyed by the id sent) and
# the AI SDK's openai-compatible chat model: POST {baseURL}/chat/completions with model, system
# and user messages, function tools (JSON schemas with $schema, additionalProperties false),
# tool_choice "auto", stream true with stream_options.include_usage, max_tokens; after a call
# the assistant message with tool_calls, then a tool message; Authorization Bearer.
OC_MODEL = "snug"
OC_HEADERS = {"Content-Type": "application/json", "User-Agent": "opencode/1.0.0 ai-sdk/5.0.0"}
OC_TOOLS = [{"type": "function", "function": {
    "name": "bash", "description": "Execute a shell command.",
    "parameters": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                   "properties": {"command": {"type": "string"},
                                  "timeout": {"type": "number"},
                                  "description": {"type": "string"}},
                   "required": ["command", "description"], "additionalProperties": False}}}]


def oc_body(messages):
    return {"model": OC_MODEL, "messages": messages, "tools": OC_TOOLS, "tool_choice": "auto",
            "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 32000,
            "temperature": 0.55, "top_p": 1}


# ---- HTTP and SSE ------------------------------------------------------------------------------

def post_sse(port, path, body, headers):
    """POST body, read an SSE stream: (status, [(event name or None, parsed data)], response)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", path, body=json.dumps(body), headers=headers)
    r = c.getresponse()
    raw = r.read().decode()
    c.close()
    if r.status != 200:
        return r.status, raw, r
    events, name = [], None
    for ln in raw.splitlines():
        if ln.startswith("event: "):
            name = ln[7:]
        elif ln.startswith("data: "):
            d = ln[6:]
            events.append((name, d if d == "[DONE]" else json.loads(d)))
            name = None
    return r.status, events, r


def get_json(port, path, headers):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", path, headers=headers)
    r = c.getresponse()
    b = json.loads(r.read())
    c.close()
    return r.status, b


def anthropic_blocks(events):
    """Content blocks rebuilt from a Messages stream, and the stop reason."""
    blocks, stop = [], None
    for name, d in events:
        if name == "content_block_start":
            blocks.append(dict(d["content_block"]))
            blocks[-1]["_json"] = ""
        elif name == "content_block_delta":
            b, dl = blocks[d["index"]], d["delta"]
            if dl["type"] == "text_delta":
                b["text"] = b.get("text", "") + dl["text"]
            elif dl["type"] == "thinking_delta":
                b["thinking"] = b.get("thinking", "") + dl["thinking"]
            elif dl["type"] == "input_json_delta":
                b["_json"] += dl["partial_json"]
        elif name == "message_delta":
            stop = d["delta"].get("stop_reason")
    for b in blocks:
        if b["type"] == "tool_use":
            b["input"] = json.loads(b.pop("_json") or "{}")
        else:
            b.pop("_json")
    return blocks, stop


def test_claude_code(res, S, R):
    auth = [("ANTHROPIC_AUTH_TOKEN", {"Authorization": f"Bearer {KEY}"}),
            ("ANTHROPIC_API_KEY", {"x-api-key": KEY})]
    for env, h in auth:
        st, models = get_json(S.port, "/v1/models", dict(CC_HEADERS, **h))
        ids = [m["id"] for m in models.get("data", [])]
        res.check(st == 200 and CC_MODEL in ids and CC_SMALL in ids,
                  f"Claude Code ({env}): GET /v1/models lists the --alias names it discovers "
                  f"({[i for i in ids if i.startswith('claude')]})")
    h = dict(CC_HEADERS, Authorization=f"Bearer {KEY}")
    user = [{"role": "user", "content": [
        {"type": "text", "text": "What files are here?", "cache_control": {"type": "ephemeral"}}]}]
    c = http.client.HTTPConnection("127.0.0.1", S.port, timeout=60)
    ct = {k: v for k, v in cc_body(user).items() if k not in ("max_tokens", "stream",
                                                               "temperature", "metadata")}
    c.request("POST", "/v1/messages/count_tokens?beta=true", body=json.dumps(ct), headers=h)
    r = c.getresponse()
    n = json.loads(r.read()).get("input_tokens", 0)
    res.check(r.status == 200 and n > 50, f"Claude Code: count_tokens?beta=true ({n} tokens)")
    script1 = ("The user wants the files.\n</think>\n\n<tool_call>\n<function=Bash>\n"
               "<parameter=command>\nls\n</parameter>\n<parameter=description>\nList files\n"
               "</parameter>\n</function>\n</tool_call>")
    st, ev, _ = post_sse(S.port, "/v1/messages?beta=true",
                         dict(cc_body(user), snug_script=script1), h)
    blocks, stop = anthropic_blocks(ev) if st == 200 else ([], None)
    names = [e for e, _ in ev] if st == 200 else ev
    tu = [b for b in blocks if b["type"] == "tool_use"]
    res.check(st == 200 and names[0] == "message_start" and names[-1] == "message_stop" and
              stop == "tool_use" and len(tu) == 1 and tu[0]["name"] == "Bash" and
              tu[0]["input"] == {"command": "ls", "description": "List files"},
              f"Claude Code turn 1 (stream, {CC_MODEL}): a Bash tool_use ({tu})")
    # turn 2: the tool's result goes back (the assistant turn as Claude Code echoes it)
    echo = [{k: v for k, v in b.items() if k != "signature" or v} for b in blocks]
    msgs = user + [{"role": "assistant", "content": echo},
                   {"role": "user", "content": [{"type": "tool_result",
                                                 "tool_use_id": tu[0]["id"] if tu else "x",
                                                 "content": "a.py\nb.py",
                                                 "cache_control": {"type": "ephemeral"}}]}]
    st, ev, _ = post_sse(S.port, "/v1/messages?beta=true",
                         dict(cc_body(msgs), snug_script="Two files.\n</think>\n\na.py and b.py."),
                         h)
    blocks, stop = anthropic_blocks(ev) if st == 200 else ([], None)
    text = [b.get("text") for b in blocks if b["type"] == "text"]
    res.check(st == 200 and stop == "end_turn" and text == ["a.py and b.py."],
              f"Claude Code turn 2: the answer after the tool_result ({text}, {stop})")
    # the small fast model (titles, summaries): not streamed, no tools
    c = http.client.HTTPConnection("127.0.0.1", S.port, timeout=60)
    body = {"model": CC_SMALL, "max_tokens": 512, "messages": user,
            "system": [{"type": "text", "text": "Write a short title."}],
            "snug_script": "A title.\n</think>\n\nFiles here"}
    c.request("POST", "/v1/messages?beta=true", body=json.dumps(body),
              headers=dict(CC_HEADERS, **{"x-api-key": KEY}))
    r = c.getresponse()
    b = json.loads(r.read())
    res.check(r.status == 200 and b.get("model") in (CC_SMALL, "snug-demo-q8_0.gguf") and
              [x.get("text") for x in b["content"] if x["type"] == "text"] == ["Files here"],
              f"Claude Code small fast model ({CC_SMALL}): {b.get('content')}")
    # the same requests sampled by the demo model, every name accepted (--any-model)
    st, ev, _ = post_sse(R.port, "/v1/messages?beta=true", cc_body(user, max_tokens=200), h)
    blocks, stop = anthropic_blocks(ev) if st == 200 else ([], None)
    tu = [b for b in blocks if b["type"] == "tool_use"]
    schemas = {t["name"]: t["input_schema"] for t in CC_TOOLS}
    res.check(st == 200 and stop in ("end_turn", "tool_use", "max_tokens") and
              all(t["name"] in schemas and schema_ok(json.dumps(t["input"]), schemas[t["name"]])
                  for t in tu),
              f"Claude Code on the demo model (sampled): {stop}, blocks "
              f"{[b['type'] for b in blocks]}, calls {[(t['name'], t['input']) for t in tu]}")


def responses_items(events):
    done = [d for _, d in events if isinstance(d, dict) and
            d.get("type") in ("response.completed", "response.incomplete")]
    return done[-1]["response"] if done else None


def test_codex(res, S, R):
    h = dict(CX_HEADERS, Authorization=f"Bearer {KEY}")
    script1 = ("List them.\n</think>\n\n<tool_call>\n<function=shell>\n<parameter=command>\n"
               "[\"ls\", \"-la\"]\n</parameter>\n</function>\n</tool_call>")
    st, ev, _ = post_sse(S.port, "/v1/responses", dict(cx_body(CX_FIRST), snug_script=script1), h)
    resp = responses_items(ev) if st == 200 else None
    calls = [o for o in (resp or {}).get("output", []) if o["type"] == "function_call"]
    seq = [d["sequence_number"] for _, d in ev] if st == 200 else []
    res.check(resp is not None and resp["status"] == "completed" and len(calls) == 1 and
              calls[0]["name"] == "shell" and
              json.loads(calls[0]["arguments"]) == {"command": ["ls", "-la"]} and
              seq == list(range(len(seq))),
              f"Codex turn 1 ({CX_MODEL}, stream, store false): a shell call ({calls})")
    # turn 2: Codex resends the whole history (store false): the output items, then the result
    hist = CX_FIRST + (resp["output"] if resp else []) + [
        {"type": "function_call_output", "call_id": calls[0]["call_id"] if calls else "x",
         "output": json.dumps({"output": "a.py\nb.py\n",
                               "metadata": {"exit_code": 0, "duration_seconds": 0.1}})}]
    st, ev, _ = post_sse(S.port, "/v1/responses",
                         dict(cx_body(hist), snug_script="Done.\n</think>\n\nTwo files."), h)
    resp = responses_items(ev) if st == 200 else None
    text = [p["text"] for o in (resp or {}).get("output", []) if o["type"] == "message"
            for p in o["content"]]
    res.check(resp is not None and text == ["Two files."],
              f"Codex turn 2: the answer after the function_call_output ({text})")
    # an apply_patch call (the freeform tool) comes back as a custom_tool_call
    patch = "*** Begin Patch\n*** Add File: hello.py\n+print('hello')\n*** End Patch\n"
    script = ("Add it.\n</think>\n\n<tool_call>\n<function=apply_patch>\n<parameter=input>\n"
              + patch + "\n</parameter>\n</function>\n</tool_call>")
    st, ev, _ = post_sse(S.port, "/v1/responses", dict(cx_body(CX_FIRST), snug_script=script), h)
    resp = responses_items(ev) if st == 200 else None
    cc = [o for o in (resp or {}).get("output", []) if o["type"] == "custom_tool_call"]
    res.check(len(cc) == 1 and cc[0]["name"] == "apply_patch" and cc[0]["input"] == patch,
              f"Codex apply_patch: a custom_tool_call with the patch ({cc[0]['input'] if cc else None!r})")
    # sampled by the demo model: any call is to one of Codex's tools, a patch parses as Lark
    st, ev, _ = post_sse(R.port, "/v1/responses", dict(cx_body(CX_FIRST), max_output_tokens=200),
                         h)
    resp = responses_items(ev) if st == 200 else None
    items = (resp or {}).get("output", [])
    out = [(o["type"], o.get("name")) for o in items]
    shell = [o for o in items if o["type"] == "function_call"]
    res.check(resp is not None and all(n in (None, "shell", "apply_patch") for _, n in out) and
              all(schema_ok(o["arguments"], CX_TOOLS[0]["parameters"]) for o in shell),
              f"Codex on the demo model (sampled): {resp['status'] if resp else st}, {out}")


def chat_stream(events):
    """Content, tool calls {index: [id, name, args]}, finish, usage of a chat stream."""
    content, calls, finish, usage = "", {}, None, None
    for _, d in events:
        if d == "[DONE]":
            continue
        if d.get("usage"):
            usage = d["usage"]
        for c in d["choices"]:
            dl = c.get("delta", {})
            content += dl.get("content") or ""
            for tc in dl.get("tool_calls") or []:
                e = calls.setdefault(tc["index"], ["", "", ""])
                e[0] = tc.get("id") or e[0]
                e[1] += (tc.get("function") or {}).get("name") or ""
                e[2] += (tc.get("function") or {}).get("arguments") or ""
            finish = c.get("finish_reason") or finish
    return content, calls, finish, usage


def schema_ok(args, schema):
    import jsonschema
    try:
        jsonschema.validate(json.loads(args or "{}"),
                            {k: v for k, v in schema.items() if k != "$schema"})
        return True
    except (jsonschema.ValidationError, ValueError):
        return False


def test_opencode(res, S, R):
    h = dict(OC_HEADERS, Authorization=f"Bearer {KEY}")
    msgs = [{"role": "system", "content": "You are opencode, a coding agent."},
            {"role": "user", "content": "What files are here?"}]
    script1 = ("Check.\n</think>\n\n<tool_call>\n<function=bash>\n<parameter=command>\nls\n"
               "</parameter>\n<parameter=description>\nList files\n</parameter>\n</function>\n"
               "</tool_call>")
    st, ev, _ = post_sse(S.port, "/v1/chat/completions", dict(oc_body(msgs), snug_script=script1),
                         h)
    content, calls, finish, usage = chat_stream(ev) if st == 200 else ("", {}, None, None)
    res.check(st == 200 and finish == "tool_calls" and len(calls) == 1 and
              calls[0][1] == "bash" and
              json.loads(calls[0][2]) == {"command": "ls", "description": "List files"} and
              usage and ev[-1][1] == "[DONE]",
              f"opencode turn 1 (model {OC_MODEL!r}, stream + usage): a bash call ({calls})")
    msgs2 = msgs + [{"role": "assistant", "content": "", "tool_calls": [
        {"id": calls[0][0] if calls else "c", "type": "function",
         "function": {"name": "bash", "arguments": calls[0][2] if calls else "{}"}}]},
        {"role": "tool", "tool_call_id": calls[0][0] if calls else "c", "content": "a.py\nb.py"}]
    st, ev, _ = post_sse(S.port, "/v1/chat/completions",
                         dict(oc_body(msgs2), snug_script="Ok.\n</think>\n\na.py and b.py."), h)
    content, calls2, finish, _ = chat_stream(ev) if st == 200 else ("", {}, None, None)
    res.check(st == 200 and content == "a.py and b.py." and finish == "stop" and not calls2,
              f"opencode turn 2: the answer after the tool message ({content!r})")
    st, ev, _ = post_sse(R.port, "/v1/chat/completions", dict(oc_body(msgs), max_tokens=200), h)
    content, calls, finish, _ = chat_stream(ev) if st == 200 else ("", {}, None, None)
    res.check(st == 200 and finish in ("stop", "tool_calls", "length") and
              all(c[1] == "bash" and schema_ok(c[2], OC_TOOLS[0]["function"]["parameters"])
                  for c in calls.values()),
              f"opencode on the demo model (sampled): {finish}, calls {list(calls.values())}")


def test_agents(res, S):
    import agents
    calls = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        calls.append(city)
        return f"sunny in {city}"

    agents.set_tracing_disabled(True)  # (traces would go to OpenAI's servers)
    for what, make in [("Responses", agents.OpenAIResponsesModel),
                       ("Chat Completions", agents.OpenAIChatCompletionsModel)]:
        # a client per run: its connection pool belongs to that run's event loop
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{S.port}/v1", api_key=KEY,
                                    max_retries=0)
        model = make(model="snug", openai_client=client)
        calls.clear()
        agent = agents.Agent(name="weather", instructions="Answer with the tool.",
                             tools=[get_weather], model=model)
        out = asyncio.run(agents.Runner.run(agent, "Weather in Paris?", max_turns=4))
        res.check(calls == ["Paris"] and out.final_output == "It is sunny in Paris.",
                  f"openai-agents ({what} model 'snug'): tool called with {calls}, final "
                  f"{out.final_output!r}")


def test_litellm(res, S):
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price list download
    try:
        import litellm
    except ImportError:
        res.check(False, "litellm installed (scripts/deps.sh --python)")
        return
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}]
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    for prefix, base in [("openai", f"http://127.0.0.1:{S.port}/v1"),
                         ("anthropic", f"http://127.0.0.1:{S.port}")]:
        kw = dict(model=f"{prefix}/snug", api_base=base, api_key=KEY, tools=tools,
                  max_tokens=300)
        r = litellm.completion(messages=msgs, **kw)
        tc = r.choices[0].message.tool_calls or []
        ok1 = (len(tc) == 1 and tc[0].function.name == "get_weather" and
               json.loads(tc[0].function.arguments) == {"city": "Paris", "days": 3})
        msgs2 = msgs + [{"role": "assistant", "content": None, "tool_calls": [
            {"id": tc[0].id, "type": "function",
             "function": {"name": "get_weather", "arguments": tc[0].function.arguments}}]},
            {"role": "tool", "tool_call_id": tc[0].id, "content": "sunny"}] if tc else msgs
        text = ""
        for ch in litellm.completion(messages=msgs2, stream=True, **kw):
            text += ch.choices[0].delta.content or "" if ch.choices else ""
        res.check(ok1 and text == "It is sunny in Paris.",
                  f"litellm {prefix}/snug: a get_weather call, then the streamed answer "
                  f"({[(t.function.name, t.function.arguments) for t in tc]}, {text!r})")


def main():
    res = Results()
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "turns.txt")
        with open(script, "w") as f:
            f.write("The user wants weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
                    "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
                    "</function>\n</tool_call>" + TURNS +
                    "The tool says sunny.\n</think>\n\nIt is sunny in Paris.")
        servers = []
        try:
            # the setups of docs/clients.md: the names each client sends, as --alias
            S = Server(DEMO, tmp, "S", "--api-key", KEY, "--ctx", "8192", "--script", script,
                       "--alias", "snug", "--alias", CC_MODEL, "--alias", CC_SMALL,
                       "--alias", CX_MODEL)
            servers.append(S)
            R = Server(DEMO, tmp, "R", "--api-key", KEY, "--ctx", "8192", "--any-model")
            servers.append(R)
            test_claude_code(res, S, R)
            test_codex(res, S, R)
            test_opencode(res, S, R)
            test_agents(res, S)
            test_litellm(res, S)
        finally:
            stop_all(res, servers)
    res.done()


if __name__ == "__main__":
    main()
