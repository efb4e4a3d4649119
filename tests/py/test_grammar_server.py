"""test_grammar_server.py — structured outputs through `snug serve` on the trained fixture
(a tiny model trained on Python code, so nothing but the grammar makes its output JSON).

- The schema corpus (tests/data/schemas, >= 50 real-world shapes): 5 generations each at
  temperature 1 are valid JSON that validates against the schema (Python `jsonschema`, with its
  format checker), on a server without drafts and on one with --spec-draft 3.
- GBNF grammars (arithmetic, a small C-like language, JSON written in GBNF) constrain output,
  checked by independent recognizers written here; an invalid grammar is a 400 naming line and
  column; an unsupported schema keyword is a 400 naming it; logit_bias is validated and honoured.
- Greedy output under a grammar that allows everything equals unconstrained greedy output.
- A small max_tokens still ends in a valid document (the shortest completion is steered to).
- Speculative decoding under a grammar: greedy with --spec-draft 3 is the text of --spec-draft 0,
  valid, with a mean acceptance length > 1 (the job's timings).
- Clients: the openai client's `.parse()` with a pydantic model, instructor in JSON-schema
  mode, langchain's `with_structured_output` get valid objects (each skipped visibly when its
  package is missing).
Runnable as a script; prints "N passed, N failed".
"""
import glob
import json
import os
import re
import sys
import tempfile
import threading
import time
from typing import List, Optional

sys.path.insert(0, os.path.dirname(__file__))
from snugtest import SRC, Results, fixtures_dir  # noqa: E402
from test_server import Server  # noqa: E402

import jsonschema  # noqa: E402

KEY = "test-key-123"
MSG = [{"role": "user", "content": "Answer in JSON."}]


def chat(srv, body):
    body = dict(body)
    body.setdefault("messages", MSG)
    return srv.raw("POST", "/v1/chat/completions", body)


def content_of(r):
    return r["choices"][0]["message"]["content"] or ""


def openapi_nullable(s):
    """The schema as the converter reads it: OpenAPI's `"nullable": true` (which JSON Schema
    validators ignore) admits null, written as a JSON Schema anyOf with {"type": "null"}."""
    if isinstance(s, list):
        return [openapi_nullable(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: openapi_nullable(v) for k, v in s.items() if k != "nullable"}
    return {"anyOf": [out, {"type": "null"}]} if s.get("nullable") is True else out


def test_corpus(res, srv, label, n_samples=5):
    files = sorted(glob.glob(os.path.join(SRC, "tests", "data", "schemas", "*.json")))
    res.check(len(files) >= 50, f"{label}: schema corpus holds {len(files)} schemas (>= 50)")
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    bad, total, tokens, t0 = [], 0, 0, time.time()
    for path in files:
        schema = json.load(open(path))
        jsonschema.Draft202012Validator.check_schema(schema)
        name = os.path.basename(path)[:-5]
        for i in range(n_samples):
            st, r, _ = chat(srv, {"temperature": 1, "seed": 1000 + i, "max_tokens": 200,
                                  "response_format": {"type": "json_schema", "json_schema": {
                                      "name": name, "schema": schema, "strict": True}}})
            total += 1
            if st != 200:
                bad.append(f"{name}#{i}: HTTP {st} {r}")
                continue
            tokens += r["usage"]["completion_tokens"]
            text = content_of(r)
            try:
                jsonschema.validate(json.loads(text), openapi_nullable(schema),
                                    format_checker=checker)
                if r["choices"][0]["finish_reason"] != "stop":
                    bad.append(f"{name}#{i}: finish {r['choices'][0]['finish_reason']}")
            except Exception as e:  # noqa: BLE001
                bad.append(f"{name}#{i}: {str(e)[:200]} in {text[:200]!r}")
    for b in bad[:10]:
        print("   ", b)
    res.check(not bad, f"{label}: {total - len(bad)}/{total} generations valid under their schema "
                       f"({tokens} tokens, {time.time() - t0:.1f} s)")


def arith_ok(s):
    """A recognizer for expr ::= term (("+"|"-") term)*, term ::= factor (("*"|"/") factor)*,
    factor ::= [0-9]+ | "(" expr ")" — independent of the grammar engine."""
    pos = 0

    def factor():
        nonlocal pos
        if pos < len(s) and s[pos] == "(":
            pos += 1
            if not expr() or pos >= len(s) or s[pos] != ")":
                return False
            pos += 1
            return True
        m = re.match(r"[0-9]+", s[pos:])
        if not m:
            return False
        pos += m.end()
        return True

    def chain(sub, ops):
        nonlocal pos
        if not sub():
            return False
        while pos < len(s) and s[pos] in ops:
            pos += 1
            if not sub():
                return False
        return True

    def term():
        return chain(factor, "*/")

    def expr():
        return chain(term, "+-")

    return expr() and pos == len(s)


ARITH = r'''
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")"
'''

CLIKE = r'''
# a small C-like language: assignments, if/while blocks, return
root ::= stmt{1,4}
stmt ::= assign | ifst | whilest | ret
assign ::= ident " = " expr ";\n"
ret ::= "return " expr ";\n"
ifst ::= "if (" cond ") {\n" stmt{0,2} "}\n"
whilest ::= "while (" cond ") {\n" stmt{0,2} "}\n"
cond ::= expr (" < " | " > " | " == " | " != ") expr
expr ::= atom ((" + " | " - " | " * ") atom){0,3}
atom ::= ident | [0-9]{1,4} | "(" expr ")"
ident ::= [a-z] [a-z0-9_]{0,7}
'''

CLIKE_RE = None


def clike_ok(s):
    """Recognizer for the C-like language above (regular enough for nested blocks of depth <=
    what the grammar allows: we parse statements recursively)."""
    ident = r"[a-z][a-z0-9_]{0,7}"
    pos = 0

    def expr():
        nonlocal pos
        if not atom():
            return False
        n = 0
        while n < 3:
            m = re.match(r" [+*-] ", s[pos:])
            if not m:
                break
            pos += m.end()
            if not atom():
                return False
            n += 1
        return True

    def atom():
        nonlocal pos
        if s.startswith("(", pos):
            pos += 1
            if not expr() or not s.startswith(")", pos):
                return False
            pos += 1
            return True
        m = re.match(ident + "|[0-9]{1,4}", s[pos:])
        if not m:
            return False
        pos += m.end()
        return True

    def cond():
        nonlocal pos
        if not expr():
            return False
        m = re.match(r" (<|>|==|!=) ", s[pos:])
        if not m:
            return False
        pos += m.end()
        return expr()

    def stmt():
        nonlocal pos
        for kw in ("if (", "while ("):
            if s.startswith(kw, pos):
                pos += len(kw)
                if not cond() or not s.startswith(") {\n", pos):
                    return False
                pos += 4
                n = 0
                while n < 2 and not s.startswith("}\n", pos):
                    if not stmt():
                        return False
                    n += 1
                if not s.startswith("}\n", pos):
                    return False
                pos += 2
                return True
        if s.startswith("return ", pos):
            pos += 7
        else:
            m = re.match(ident + " = ", s[pos:])
            if not m:
                return False
            pos += m.end()
        if not expr() or not s.startswith(";\n", pos):
            return False
        pos += 2
        return True

    n = 0
    while pos < len(s) and n < 4:
        if not stmt():
            return False
        n += 1
    return n >= 1 and pos == len(s)


JSON_GBNF = r'''
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}"
array  ::= "[" ws ( value ("," ws value)* )? "]"
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
number ::= ("-"? ([0-9] | [1-9] [0-9]{1,15})) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?
ws ::= [ ]?
'''


def test_gbnf(res, srv):
    # (the chat reply's content is stripped of trailing whitespace: the program's last "\n")
    for name, g, ok in (("arithmetic", ARITH, arith_ok),
                        ("C-like", CLIKE, lambda t: clike_ok(t + "\n")),
                        ("JSON", JSON_GBNF, lambda t: isinstance(json.loads(t), dict))):
        good, outs = 0, []
        for i in range(5):
            st, r, _ = chat(srv, {"temperature": 1, "seed": 7 + i, "max_tokens": 400, "grammar": g})
            text = content_of(r) if st == 200 else f"HTTP {st} {r}"
            try:
                # "length" is fine for a grammar that is complete and could go on (arithmetic)
                fine = st == 200 and ok(text)
            except Exception:  # noqa: BLE001
                fine = False
            good += fine
            outs.append(text)
        if good < 5:
            print("    outputs:", [o[:120] for o in outs])
        res.check(good == 5, f"GBNF {name}: {good}/5 sampled outputs are sentences of the grammar "
                             f"(e.g. {outs[0][:60]!r})")
    # completions endpoint takes a grammar too
    st, r, _ = srv.raw("POST", "/v1/completions", {"prompt": "x = ", "max_tokens": 100,
                                                   "temperature": 1, "grammar": ARITH})
    res.check(st == 200 and arith_ok(r["choices"][0]["text"]),
              f"completions with a grammar: {r['choices'][0]['text'][:40]!r}" if st == 200
              else f"completions with a grammar: HTTP {st} {r}")


def test_errors(res, srv):
    st, r, _ = chat(srv, {"grammar": 'root ::= "a" |\n  ("b" "c"\n'})
    res.check(st == 400 and r["error"]["param"] == "grammar" and
              "line 2, column 3" in r["error"]["message"],
              f"invalid grammar -> 400 with line and column: {r['error']['message']!r}")
    st, r, _ = chat(srv, {"grammar": 'root ::= item\n'})
    res.check(st == 400 and "line 1, column 10" in r["error"]["message"] and
              "item" in r["error"]["message"], f"undefined rule -> 400: {r['error']['message']!r}")
    st, r, _ = chat(srv, {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "number",
                                                                      "multipleOf": 0.01}}}}}})
    res.check(st == 400 and "multipleOf" in r["error"]["message"] and
              r["error"]["param"] == "response_format",
              f"unsupported schema keyword -> 400 naming it: {r['error']['message']!r}")
    st, r, _ = chat(srv, {"response_format": {"type": "xml"}})
    res.check(st == 400 and r["error"]["param"] == "response_format", "unknown response_format -> 400")
    st, r, _ = chat(srv, {"logit_bias": {"5000": 1}})
    res.check(st == 400 and "5000" in r["error"]["message"], "logit_bias id out of range -> 400")
    st, r, _ = chat(srv, {"logit_bias": {"5": 101}})
    res.check(st == 400 and r["error"]["param"] == "logit_bias", "logit_bias value > 100 -> 400")
    st, r, _ = chat(srv, {"logit_bias": {"abc": 1}})
    res.check(st == 400 and r["error"]["param"] == "logit_bias", "logit_bias key not an id -> 400")
    st, r, _ = chat(srv, {"grammar": ARITH, "response_format": {"type": "json_object"}})
    res.check(st == 400, "grammar together with a JSON response_format -> 400")


def test_greedy_equal(res, srv):
    base = {"temperature": 0, "max_tokens": 64}
    st, r0, _ = chat(srv, base)
    st1, r1, _ = chat(srv, dict(base, grammar="root ::= [\\x00-\\U0010FFFF]*\n"))
    a, b = content_of(r0), content_of(r1)
    res.check(st == 200 and st1 == 200 and a == b and len(a) > 20,
              f"greedy output under an allow-everything grammar equals unconstrained ({len(a)} chars)")
    # logit_bias honoured: ban the first greedy token, the output changes
    st, tk, _ = srv.raw("POST", "/tokenize", {"content": a})
    first = tk["tokens"][0]
    st2, r2, _ = chat(srv, dict(base, logit_bias={str(first): -100}))
    b2 = content_of(r2)
    st3, tk2, _ = srv.raw("POST", "/tokenize", {"content": b2})
    res.check(st2 == 200 and b2 != a and (not tk2["tokens"] or tk2["tokens"][0] != first),
              f"logit_bias -100 bans the greedy first token ({a[:20]!r} -> {b2[:20]!r})")


def test_spec_constrained(res, A, B):
    """Speculative decoding under a grammar: B drafts 3 tokens per step, every
    draft checked against the grammar at its position. Greedy: the same text as A (no drafts),
    valid, and more than one token per verification (the drafts are not switched off)."""
    cases = []
    for name in ("person", "tool_get_weather", "string_list", "classification"):
        schema = json.load(open(os.path.join(SRC, "tests", "data", "schemas", name + ".json")))
        cases.append((name, {"response_format": {"type": "json_schema", "json_schema": {
            "name": name, "schema": schema, "strict": True}}}, schema))
    cases.append(("gbnf arith", {"grammar": ARITH}, None))
    steps = emitted = 0
    for name, extra, schema in cases:
        body = dict(extra, temperature=0, max_tokens=160)
        sa, ra, _ = chat(A, body)
        sb, rb, _ = chat(B, body)
        a, b = content_of(ra), content_of(rb)
        valid = True
        if schema is not None:
            try:
                jsonschema.validate(json.loads(b), schema)
            except Exception as e:  # noqa: BLE001
                valid = False
                print("   ", name, str(e)[:120])
        t = rb.get("timings", {}) if sb == 200 else {}
        n_steps, n_acc = t.get("spec_steps", 0), t.get("draft_n_accepted", 0)
        steps += n_steps
        emitted += n_steps + n_acc
        res.check(sa == 200 and sb == 200 and a == b and len(b) > 0 and valid,
                  f"greedy under {name} with --spec-draft 3 equals --spec-draft 0 and is valid "
                  f"({len(b)} chars, {n_steps} verifications, {n_acc} drafts accepted)")
    mal = emitted / steps if steps else 0
    res.check(steps > 0 and mal > 1.0,
              f"constrained requests speculate: mean acceptance length {mal:.2f} > 1 over {steps} "
              "verifications")


def test_budget(res, srv):
    """A small max_tokens: the grammar steers to the shortest completion in time, so the reply
    still parses and ends with "stop"."""
    good, total = 0, 0
    for name in ("tool_get_weather", "person", "sentiment", "bool_flags", "geo_point",
                 "string_list", "classification", "optional_only", "json_object", "translations"):
        schema = json.load(open(os.path.join(SRC, "tests", "data", "schemas", name + ".json")))
        for i in range(2):
            st, r, _ = chat(srv, {"temperature": 1, "seed": 300 + i, "max_tokens": 48,
                                  "response_format": {"type": "json_schema", "json_schema": {
                                      "name": name, "schema": schema}}})
            total += 1
            try:
                jsonschema.validate(json.loads(content_of(r)), schema)
                good += r["choices"][0]["finish_reason"] == "stop"
            except Exception as e:  # noqa: BLE001
                print("   ", name, str(e)[:120])
    res.check(good == total, f"max_tokens 48: {good}/{total} replies valid and ended with stop")


def test_json_object(res, srv):
    good = 0
    for i in range(5):
        st, r, _ = chat(srv, {"temperature": 1, "seed": i, "max_tokens": 600,
                              "response_format": {"type": "json_object"}})
        try:
            good += st == 200 and isinstance(json.loads(content_of(r)), dict)
        except ValueError:
            pass
    res.check(good == 5, f"json_object: {good}/5 outputs are JSON objects")


WEATHER = {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "when": {"type": "string", "format": "date"}},
    "required": ["city", "days"], "additionalProperties": False}
SEARCH = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 40},
                                           "n": {"type": "integer", "minimum": 1, "maximum": 5},
                                           "filters": {"type": "array", "items": {"type": "string"},
                                                       "maxItems": 2}},
          "required": ["q", "n"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "strict": True,
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "search", "strict": True,
                                           "parameters": SEARCH}}]


def test_tools(res, srv):
    """Strict tools: arguments generated inside Qwen's XML tool-call format follow the schema."""
    fc = jsonschema.Draft202012Validator.FORMAT_CHECKER
    schemas = {"get_weather": WEATHER, "search": SEARCH}
    for label, choice, want in (("required", "required", None),
                                ("named", {"type": "function", "function": {"name": "get_weather"}},
                                 "get_weather")):
        good, seen = 0, []
        for i in range(5):
            st, r, _ = chat(srv, {"tools": TOOLS, "tool_choice": choice, "temperature": 1,
                                  "seed": 40 + i, "max_tokens": 400, "parallel_tool_calls": False})
            calls = (r["choices"][0]["message"].get("tool_calls") or []) if st == 200 else []
            try:
                ok = len(calls) == 1 and r["choices"][0]["finish_reason"] == "tool_calls"
                for c in calls:
                    name = c["function"]["name"]
                    ok = ok and (want is None or name == want)
                    jsonschema.validate(json.loads(c["function"]["arguments"]), schemas[name],
                                        format_checker=fc)
                    seen.append(name)
                good += ok
            except Exception as e:  # noqa: BLE001
                print("   ", label, str(e)[:200])
        res.check(good == 5, f"strict tools, tool_choice {label}: {good}/5 replies are one call "
                             f"with schema-valid arguments ({sorted(set(seen))})")
    st, r, _ = chat(srv, {"tools": [{"type": "function", "function": {
        "name": "f", "strict": True, "parameters": {"type": "object", "properties": {
            "x": {"type": "string", "pattern": "^(?!a)"}}}}}], "tool_choice": "required"})
    res.check(st == 400 and r["error"]["param"] == "tools" and "pattern" in r["error"]["message"],
              f"strict tool with an unsupported keyword -> 400: {r.get('error', {}).get('message')!r}")


def test_clients(res, srv):
    try:
        import openai
        from pydantic import BaseModel
    except ImportError as e:
        print(f"SKIP: openai/pydantic missing ({e})")
        return

    class Weather(BaseModel):
        city: str
        days: int
        unit: Optional[str] = None

    class Order(BaseModel):
        order_id: str
        items: List[Weather]
        paid: bool

    cl = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, max_retries=0,
                       timeout=120)
    parse = getattr(cl.chat.completions, "parse", None) or cl.beta.chat.completions.parse
    ok = 0
    for model_cls in (Weather, Order, Weather):
        comp = parse(model="trained-f16.gguf", messages=MSG, response_format=model_cls,
                     temperature=1, max_tokens=600)
        ok += isinstance(comp.choices[0].message.parsed, model_cls)
    res.check(ok == 3, f"openai .parse() with pydantic models: {ok}/3 parsed objects")
    try:
        import instructor
        ic = instructor.from_openai(cl, mode=instructor.Mode.JSON_SCHEMA)
        got = ic.chat.completions.create(model="trained-f16.gguf", messages=MSG,
                                         response_model=Order, max_retries=0, max_tokens=600)
        res.check(isinstance(got, Order), f"instructor JSON_SCHEMA mode: {got!r}"[:120])
    except ImportError:
        print("SKIP: instructor is not installed")
    try:
        from langchain_openai import ChatOpenAI
        lc = ChatOpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY,
                        model="trained-f16.gguf", max_tokens=600, max_retries=0)
        got = lc.with_structured_output(Weather, method="json_schema").invoke("weather?")
        res.check(isinstance(got, Weather), f"langchain with_structured_output: {got!r}"[:120])
    except ImportError:
        print("SKIP: langchain-openai is not installed")


def test_memo(res, srv):
    """A grammar seen before is served by the warm matcher of an earlier request (the server's
    grammar memo): the same seed gives the same text with the cold and the warm matcher, and
    /metrics counts one compile and one reuse for the pair."""
    def metric(name):
        txt = srv.raw("GET", "/metrics")[1]
        m = re.search(r"^" + name + r" (\S+)$", txt, re.M)
        return float(m.group(1)) if m else None

    schema = {"type": "object", "properties": {"memo_check_%d" % os.getpid(): {"type": "string"},
                                               "n": {"type": "integer"}},
              "required": ["n"]}
    body = {"temperature": 1, "seed": 77, "max_tokens": 120, "response_format": {
        "type": "json_schema", "json_schema": {"name": "m", "schema": schema}}}
    c0, r0 = metric("snug_grammar_compiles_total"), metric("snug_grammar_matchers_reused_total")
    st1, a, _ = chat(srv, body)
    st2, b, _ = chat(srv, body)
    c1, r1 = metric("snug_grammar_compiles_total"), metric("snug_grammar_matchers_reused_total")
    res.check(st1 == 200 and st2 == 200 and content_of(a) == content_of(b) and
              json.loads(content_of(a)).get("n") is not None,
              f"grammar memo: cold and warm matcher give the same text ({content_of(a)[:60]!r})")
    res.check(c0 is not None and c1 == c0 + 1 and r1 == r0 + 1,
              f"grammar memo: one compile and one reuse ({c0}->{c1}, {r0}->{r1})")


def main():
    res = Results()
    fx = fixtures_dir(res)
    if not fx:
        res.done()
    model = os.path.join(fx, "trained", "trained-f16.gguf")
    with tempfile.TemporaryDirectory() as tmp:
        A = Server(model, tmp, "A", "--api-key", KEY, "--no-think", "--spec-draft", "0",
                   "--ctx", "2048")
        B = Server(model, tmp, "B", "--api-key", KEY, "--no-think", "--spec-draft", "3",
                   "--ctx", "2048")
        try:
            test_errors(res, A)
            test_greedy_equal(res, A)
            test_gbnf(res, A)
            test_json_object(res, A)
            test_memo(res, A)
            test_budget(res, B)
            test_spec_constrained(res, A, B)
            test_tools(res, A)
            test_clients(res, B)
            # the two corpus passes run side by side (one server each)
            parts = [Results(), Results()]
            runs = [threading.Thread(target=test_corpus, args=(parts[0], A, "spec-draft 0")),
                    threading.Thread(target=test_corpus, args=(parts[1], B, "spec-draft 3"))]
            for t in runs:
                t.start()
            for t in runs:
                t.join()
            for p in parts:
                res.passed += p.passed
                res.failed += p.failed
        finally:
            A.stop()
            B.stop()
    res.done()


if __name__ == "__main__":
    main()
