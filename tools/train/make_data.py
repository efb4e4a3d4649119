#!/usr/bin/env python3
"""make_data.py — the demo model's training data and vocabulary (docs/demo-model.md).

Writes into OUT_DIR:
  tokenizer.json      a byte-level BPE (Hugging Face `tokenizers`) trained on the data, with the
                      Qwen3.5 pre-tokenizer regex and the Qwen chat/special tokens, so that
                      `snug gen --vocab-from tokenizer.json` embeds it in the GGUF;
  train.u16, train.mask, eval.u16, eval.mask
                      rows of SEQ token ids (uint16) and a loss mask (uint8: 1 = predict this
                      token), whole examples packed greedily into rows, padded with
                      <|endoftext|> (mask 0);
  samples.txt         a few rendered examples, for reading.

Every chat example is rendered by snug's own chat renderer (`snug serve --render-only`, the
Qwen3.6 template as the server applies it), so the model trains on exactly the bytes it will
see when served. Rendering one process per example would be slow, so each conversation shape is
rendered once with placeholder strings and the real strings are substituted (the template
inserts message strings verbatim after trimming; the placeholders and values carry no edge
whitespace, and a check re-renders a sample directly and compares).

Data: short factual Q&A from a built-in table (capitals), small arithmetic, thinking blocks,
tool calls in Qwen's XML format with tool results and a final answer, counting, haiku, a short
essay, greetings, and plain code from the Python standard library of this machine
(/usr/lib/python3.*). Seeded: the same machine (same stdlib) gives the same files.

Usage: make_data.py --snug build/snug --out DIR [--seed 1] [--examples 24000]
"""
import argparse
import glob
import json
import os
import random
import subprocess

import numpy as np

SEQ = 512
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
         "</tool_response>"]
# The Qwen3.5 pre-tokenizer split (from the public Qwen3.5 tokenizer.json).
QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Portugal", "Lisbon"), ("the United Kingdom", "London"), ("Ireland", "Dublin"),
    ("Belgium", "Brussels"), ("the Netherlands", "Amsterdam"), ("Austria", "Vienna"),
    ("Switzerland", "Bern"), ("Poland", "Warsaw"), ("Sweden", "Stockholm"),
    ("Norway", "Oslo"), ("Denmark", "Copenhagen"), ("Finland", "Helsinki"),
    ("Greece", "Athens"), ("Hungary", "Budapest"), ("the Czech Republic", "Prague"),
    ("Romania", "Bucharest"), ("Russia", "Moscow"), ("Ukraine", "Kyiv"), ("Turkey", "Ankara"),
    ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Nigeria", "Abuja"), ("Morocco", "Rabat"),
    ("South Africa", "Pretoria"), ("Japan", "Tokyo"), ("China", "Beijing"),
    ("South Korea", "Seoul"), ("India", "New Delhi"), ("Thailand", "Bangkok"),
    ("Vietnam", "Hanoi"), ("Indonesia", "Jakarta"), ("the Philippines", "Manila"),
    ("Australia", "Canberra"), ("New Zealand", "Wellington"), ("Canada", "Ottawa"),
    ("the United States", "Washington, D.C."), ("Mexico", "Mexico City"), ("Cuba", "Havana"),
    ("Brazil", "Brasília"), ("Argentina", "Buenos Aires"), ("Chile", "Santiago"),
    ("Peru", "Lima"), ("Colombia", "Bogotá"), ("Iceland", "Reykjavík"), ("Iran", "Tehran"),
    ("Israel", "Jerusalem"), ("Saudi Arabia", "Riyadh"), ("Pakistan", "Islamabad"),
]
CITIES = [
    "San Francisco", "Paris", "London", "Berlin", "Tokyo", "New York", "Madrid", "Rome",
    "Sydney", "Toronto", "Chicago", "Seattle", "Boston", "Lisbon", "Dublin", "Oslo",
    "Vienna", "Prague", "Cairo", "Mumbai", "Seoul", "Bangkok", "Lima", "Nairobi",
    "Mexico City", "Buenos Aires", "Amsterdam", "Stockholm", "Helsinki", "Athens",
    "Zurich", "Munich", "Osaka", "Denver", "Austin", "Miami", "Vancouver", "Montreal",
]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "foggy", "snowy", "clear", "overcast"]
TOPICS = [
    "debugging", "the ocean", "autumn", "coffee", "the moon", "compilers", "rain", "winter",
    "a cat", "mountains", "the city at night", "spring", "memory leaks", "the sea", "trains",
    "a garden", "snow", "friendship", "old code", "the stars",
]
HAIKU_1 = ["Quiet {t} at dawn.", "Soft light on {t}.", "I think of {t}.",
           "Slow hours of {t}.", "A small song of {t}.", "Cold wind over {t}."]
HAIKU_2 = ["A single line moves and waits.", "The long night hums and goes still.",
           "One small step leads to the next.", "Patient thoughts drift like the rain.",
           "The world grows calm and clear now.", "A faint sound hides in the dark."]
HAIKU_3 = ["Then the morning comes.", "Then all is quiet.", "Then the answer shines.",
           "Then the light returns.", "Then I rest at last.", "Then the day begins."]
DEBUG_2 = ["A small bug hides in the loop.", "The stack trace points to one line.",
           "Print statements light the way.", "The test fails, then fails again."]
DEBUG_3 = ["Then the test turns green.", "Then the build passes.", "Then the fix is found.",
           "Then the bug is gone."]
ESSAY = [
    "Attention lets a transformer decide which earlier tokens matter for the current one.",
    "Each token is turned into three vectors: a query, a key and a value.",
    "The query of one token is compared with the keys of all tokens by a dot product.",
    "These scores are scaled by the square root of the head size and passed through a softmax.",
    "The softmax turns the scores into weights that are positive and sum to one.",
    "The output for the token is the weighted sum of the value vectors.",
    "A causal mask hides future tokens, so a language model only looks backwards.",
    "Several heads run in parallel, and each head can learn a different kind of relation.",
    "Some heads follow syntax, others copy names, and others track position.",
    "Rotary position embeddings rotate queries and keys so that scores depend on distance.",
    "The outputs of the heads are joined and projected back to the model width.",
    "A residual connection adds this result to the input, and a norm keeps values stable.",
    "During generation the keys and values of past tokens are kept in a cache.",
    "The cache grows with the context, which is why long prompts need a lot of memory.",
    "Hybrid models replace most attention layers with linear recurrent layers to save memory.",
    "In short, attention is a learned, content-based lookup over the context.",
]
GREETINGS = [
    ("Say hello.", "Hello! How can I help you today?"),
    ("Hello!", "Hello! How can I help you today?"),
    ("Hi", "Hi! What can I do for you?"),
    ("Who are you?", "I am a tiny demo model trained by the snug project. I can answer simple "
     "questions, count, do small sums and call tools."),
    ("What can you do?", "I can answer simple questions about capitals, add small numbers, "
     "count, write short haiku and call tools such as get_weather."),
    ("Thank you!", "You are welcome!"),
]
NAMES = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]

TOOL_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"}}, "required": ["city"]}}}
TOOL_TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Current local time in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"}}, "required": ["city"]}}}
TOOL_SEARCH = {"type": "function", "function": {
    "name": "search_web", "description": "Search the web and return the top results",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "The search query"}},
        "required": ["query"]}}}
TOOLSETS = [[TOOL_WEATHER], [TOOL_WEATHER, TOOL_TIME], [TOOL_TIME, TOOL_WEATHER],
            [TOOL_WEATHER, TOOL_SEARCH], [TOOL_SEARCH, TOOL_WEATHER, TOOL_TIME]]


def weather_questions(city):
    return [f"What is the weather like in {city} right now?",
            f"What's the weather in {city}?", f"How is the weather in {city} today?",
            f"Is it raining in {city}?", f"Tell me the current weather in {city}."]


class Example:
    """One conversation: messages (role, content, reasoning, tool call), tools, thinking."""

    def __init__(self, msgs, tools=None, thinking=False):
        self.msgs, self.tools, self.thinking = msgs, tools, thinking


def user(text):
    return {"role": "user", "content": text}


def assistant(content, reasoning=None, call=None):
    m = {"role": "assistant", "content": content}
    if reasoning is not None:
        m["reasoning_content"] = reasoning
    if call is not None:
        m["tool_calls"] = [{"type": "function",
                            "function": {"name": call[0], "arguments": call[1]}}]
    return m


def tool_result(text):
    return {"role": "tool", "content": text}


def gen_examples(rng, n):
    """n chat examples, drawn from the task mix below (weights in parts)."""
    out = []
    mix = [("capital", 16), ("arith", 16), ("tool", 20), ("tool_final", 6), ("haiku", 8),
           ("count", 14), ("greet", 4), ("essay", 3), ("capital_tools", 3)]
    names = [m[0] for m in mix]
    weights = [m[1] for m in mix]
    for _ in range(n):
        kind = rng.choices(names, weights)[0]
        think = rng.random() < 0.4
        if kind in ("capital", "capital_tools"):
            country, city = rng.choice(CAPITALS)
            q = rng.choice([f"What is the capital of {country}?",
                            f"What is the capital of {country}? One short sentence.",
                            f"What's the capital city of {country}?",
                            f"Name the capital of {country}."])
            a = rng.choice([f"The capital of {country} is {city}.",
                            f"{city} is the capital of {country}."])
            r = (f"The user asks for the capital of {country}. The capital of {country} is "
                 f"{city}. One short sentence is enough.")
            tools = rng.choice(TOOLSETS) if kind == "capital_tools" else None
            out.append(Example([user(q), assistant(a, r if think else None)], tools, think))
        elif kind == "arith":
            op = rng.choice(["+", "+", "-", "*"])
            hi = 12 if op == "+" else 9
            a_, b_ = rng.randint(0, hi), rng.randint(0, hi)
            if op == "-" and b_ > a_:
                a_, b_ = b_, a_
            v = a_ + b_ if op == "+" else a_ - b_ if op == "-" else a_ * b_
            word = {"+": "plus", "-": "minus", "*": "times"}[op]
            q = rng.choice([f"What is {a_}{op}{b_}? One-line answer.", f"What is {a_}{op}{b_}?",
                            f"What is {a_} {op} {b_}?", f"Compute {a_}{op}{b_}."])
            r = (f"The user asks what {a_}{op}{b_} is. {a_} {word} {b_} is {v}. The answer fits "
                 f"on one line.")
            a = rng.choice([f"{a_} {op} {b_} = {v}.", f"The answer is {v}."])
            out.append(Example([user(q), assistant(a, r if think else None)], None, think))
        elif kind in ("tool", "tool_final"):
            city = rng.choice(CITIES)
            tools = rng.choice(TOOLSETS)
            names_ = [t["function"]["name"] for t in tools]
            if "get_time" in names_ and rng.random() < 0.25:
                q = rng.choice([f"What time is it in {city}?",
                                f"What is the local time in {city} right now?"])
                call = ("get_time", {"city": city})
                r = (f"The user wants the current time in {city}. The get_time tool gives "
                     f"the local time for a city, so I will call it with city {city}.")
                h, mnt = rng.randint(0, 23), rng.randint(0, 59)
                res = json.dumps({"city": city, "time": f"{h:02d}:{mnt:02d}"})
                fin = f"It is {h:02d}:{mnt:02d} in {city} right now."
            else:
                q = rng.choice(weather_questions(city))
                call = ("get_weather", {"city": city})
                r = (f"The user wants the current weather in {city}. The get_weather tool "
                     f"returns the weather for a city, so I will call it with city {city}.")
                cond, temp = rng.choice(CONDITIONS), rng.randint(-5, 35)
                res = json.dumps({"city": city, "temperature_c": temp, "condition": cond})
                fin = rng.choice([f"It is {cond} in {city} right now, at {temp} °C.",
                                  f"The weather in {city} is {cond} with {temp} °C."])
            msgs = [user(q), assistant("", r if think else None, call)]
            if kind == "tool_final":
                r2 = (f"The tool says it is {cond if call[0] == 'get_weather' else 'known'}. "
                      f"I will tell the user in one sentence.")
                msgs += [tool_result(res), assistant(fin, r2 if think else None)]
            out.append(Example(msgs, tools, think))
        elif kind == "haiku":
            t = rng.choice(TOPICS)
            q = rng.choice([f"Write a three-sentence haiku about {t}.",
                            f"Write a haiku about {t}."])
            l2, l3 = (DEBUG_2, DEBUG_3) if t == "debugging" else (HAIKU_2, HAIKU_3)
            a = "\n".join([rng.choice(HAIKU_1).format(t=t), rng.choice(l2), rng.choice(l3)])
            r = f"A haiku has three short lines. I will write about {t} with a calm image."
            out.append(Example([user(q), assistant(a, r if think else None)], None, think))
        elif kind == "count":
            n_ = rng.randint(3, 100)
            s = rng.choice([1, 1, 1, 1, 2, 5, 10])
            s = min(s, n_)
            q = rng.choice([f"Count from {s} to {n_}, one number per line.",
                            f"Count from {s} to {n_}.", f"List the numbers {s} to {n_}."])
            a = "\n".join(str(i) for i in range(s, n_ + 1))
            r = (f"The user wants the numbers from {s} to {n_}, each on its own line. I will "
                 f"list them in order.")
            out.append(Example([user(q), assistant(a, r if think else None)], None, think))
        elif kind == "greet":
            q, a = rng.choice(GREETINGS)
            r = "The user greets me or asks about me. A short friendly answer is right."
            out.append(Example([user(q), assistant(a, r if think else None)], None, think))
        elif kind == "essay":
            q = rng.choice([
                "Write a detailed 1500-word essay on how attention works in transformers.",
                "Explain how attention works in transformers.",
                "Write an essay about attention in transformers."])
            paras, sents = [], ESSAY[:]
            body = sents[1:-1]
            rng.shuffle(body)
            sents = [sents[0]] + body + [sents[-1]]
            for i in range(0, len(sents), 4):
                paras.append(" ".join(sents[i:i + 4]))
            a = "\n\n".join(paras)
            r = "The user wants an explanation of attention. I will explain queries, keys, " \
                "values, the softmax and the cache."
            out.append(Example([user(q), assistant(a, r if think else None)], None, think))
    return out


# ---- rendering with snug's renderer (placeholders, see the module comment) -----------------

def placeholder(i):
    return f"QQPH{i}QQ"


def render_direct(snug, req, thinking):
    args = [snug, "serve", "--render-only", "-"]
    if not thinking:
        args.append("--no-thinking")
    p = subprocess.run(args, input=json.dumps(req).encode(), capture_output=True, check=True)
    return p.stdout.decode()


def request_of(ex, values):
    """The chat request of ex with message strings replaced by values (a list, in order)."""
    msgs, k = [], 0
    for m in ex.msgs:
        mm = {"role": m["role"], "content": values[k]}
        k += 1
        if "reasoning_content" in m:
            mm["reasoning_content"] = values[k]
            k += 1
        if "tool_calls" in m:
            fn = m["tool_calls"][0]["function"]
            args = {a: values[k + i] for i, a in enumerate(fn["arguments"])}
            k += len(fn["arguments"])
            mm["tool_calls"] = [{"type": "function",
                                 "function": {"name": fn["name"], "arguments": args}}]
        msgs.append(mm)
    req = {"messages": msgs, "add_generation_prompt": False,
           "chat_template_kwargs": {"enable_thinking": ex.thinking}}
    if ex.tools:
        req["tools"] = ex.tools
    return req


def strings_of(ex):
    vals = []
    for m in ex.msgs:
        vals.append(m["content"])
        if "reasoning_content" in m:
            vals.append(m["reasoning_content"])
        if "tool_calls" in m:
            vals += [str(v) for v in m["tool_calls"][0]["function"]["arguments"].values()]
    return vals


def shape_key(ex):
    parts = [json.dumps(ex.tools, sort_keys=True) if ex.tools else "", str(ex.thinking)]
    for m in ex.msgs:
        parts.append(m["role"] + ("R" if "reasoning_content" in m else "") +
                     (m["tool_calls"][0]["function"]["name"] + ",".join(
                         m["tool_calls"][0]["function"]["arguments"]) if "tool_calls" in m
                      else "") + ("E" if m["content"] == "" else ""))
    return "|".join(parts)


def render_all(snug, examples, rng):
    cache = {}
    texts = []
    for ex in examples:
        key = shape_key(ex)
        vals = strings_of(ex)
        if key not in cache:
            ph = [v if v == "" else placeholder(i) for i, v in enumerate(vals)]
            cache[key] = render_direct(snug, request_of(ex, ph), ex.thinking)
        t = cache[key]
        for i, v in enumerate(vals):
            if v != "":
                t = t.replace(placeholder(i), v)
        texts.append(t)
    # check: a sample rendered directly gives the same bytes
    for i in rng.sample(range(len(examples)), 40):
        direct = render_direct(snug, request_of(examples[i], strings_of(examples[i])),
                               examples[i].thinking)
        if direct != texts[i]:
            raise SystemExit(f"placeholder rendering differs from direct rendering:\n"
                             f"{direct!r}\n{texts[i]!r}")
    return texts, len(cache)


def assistant_mask(text, offsets):
    """1 for tokens inside an assistant turn's reply (after '<|im_start|>assistant\\n', up to
    and including its '<|im_end|>'), else 0."""
    spans, start = [], 0
    head = "<|im_start|>assistant\n"
    while True:
        i = text.find(head, start)
        if i < 0:
            break
        j = text.find("<|im_end|>", i)
        j = len(text) if j < 0 else j + len("<|im_end|>")
        spans.append((i + len(head), j))
        start = j
    mask = []
    for (a, b) in offsets:
        mask.append(1 if any(s <= a and b <= e for s, e in spans) else 0)
    return mask


def code_texts(rng, n_chars):
    files = sorted(f for f in glob.glob("/usr/lib/python3*/**/*.py", recursive=True)
                   if "/test" not in f and "/site-packages/" not in f
                   and "/dist-packages/" not in f)
    rng.shuffle(files)
    out, total = [], 0
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            src = fh.read()
        # windows of whole lines, about 1500 characters each
        lines, cur = src.split("\n"), []
        for ln in lines:
            cur.append(ln)
            if sum(len(x) + 1 for x in cur) > 1500:
                out.append("\n".join(cur) + "\n")
                total += len(out[-1])
                cur = []
        if total >= n_chars:
            break
    return out


def train_tokenizer(texts, vocab_size):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, \
        trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(ADDED), special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens(ADDED)
    return tok


def pack(rows_ids, rows_mask, rng, eot):
    """Greedy first-fit packing of whole examples into rows of SEQ tokens."""
    order = list(range(len(rows_ids)))
    rng.shuffle(order)
    bins = []  # [ids, mask]
    for i in order:
        ids, m = rows_ids[i], rows_mask[i]
        if len(ids) > SEQ:
            ids, m = ids[:SEQ], m[:SEQ]
        for b in bins[-8:]:
            if len(b[0]) + len(ids) <= SEQ:
                b[0].extend(ids)
                b[1].extend(m)
                break
        else:
            bins.append([list(ids), list(m)])
    X = np.full((len(bins), SEQ), eot, dtype=np.uint16)
    M = np.zeros((len(bins), SEQ), dtype=np.uint8)
    for r, (ids, m) in enumerate(bins):
        X[r, :len(ids)] = ids
        M[r, :len(m)] = m
    return X, M


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--snug", default="build/snug")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--examples", type=int, default=24000)
    ap.add_argument("--code-chars", type=int, default=12_000_000)
    ap.add_argument("--vocab", type=int, default=4096)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    examples = gen_examples(rng, args.examples)
    texts, n_shapes = render_all(args.snug, examples, rng)
    code = code_texts(rng, args.code_chars)
    tok = train_tokenizer(texts[:4000] + code, args.vocab)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, f)
    eot = tok.token_to_id("<|endoftext|>")
    ids_all, mask_all = [], []
    for t in texts:
        enc = tok.encode(t, add_special_tokens=False)
        ids_all.append(enc.ids)
        mask_all.append(assistant_mask(t, enc.offsets))
    for t in code:
        enc = tok.encode(t, add_special_tokens=False)
        ids_all.append(enc.ids + [eot])
        mask_all.append([1] * (len(enc.ids) + 1))
    n_eval = len(ids_all) // 50
    idx = list(range(len(ids_all)))
    rng.shuffle(idx)
    ev, tr = idx[:n_eval], idx[n_eval:]
    for name, sel in (("train", tr), ("eval", ev)):
        X, M = pack([ids_all[i] for i in sel], [mask_all[i] for i in sel], rng, eot)
        X.tofile(os.path.join(args.out, f"{name}.u16"))
        M.tofile(os.path.join(args.out, f"{name}.mask"))
        print(f"{name}: {X.shape[0]} rows of {SEQ}, {int(M.sum())} predicted tokens")
    with open(os.path.join(args.out, "samples.txt"), "w") as f:
        for t in texts[:12]:
            f.write(t + "\n=====\n")
    n_chat = sum(len(ids_all[i]) for i in range(len(texts)))
    n_code = sum(len(x) for x in ids_all[len(texts):])
    print(f"{len(texts)} chat examples ({n_shapes} template shapes, {n_chat} tokens), "
          f"{len(code)} code windows ({n_code} tokens), vocabulary {tok.get_vocab_size()}")


if __name__ == "__main__":
    main()
