/* fuzz_server_outparse.c — libFuzzer target for the streaming output parser (outparse.c).
 * Input: byte 0 = flags (bit 0: start inside reasoning, bit 1: pass a tools schema, bit 2: a
 * request that allows no tool call, snug_outparse_no_calls), byte 1 =
 * seed of the split points, the rest = generated text, where bytes 0xF8..0xFF expand to the
 * tags (so the fuzzer reaches deep states quickly). The text is parsed whole, one byte at a
 * time, and in seeded random pieces; the invariants: identical results, no "<tool_call>" or
 * "<function=" in the content (with calls allowed; without, no call at all), no "</think>" in
 * reasoning, every arguments string a JSON
 * object equal to the concatenation of its deltas, nothing after END, no crash or leak.
 */
#include "core/core.h"
#include "server/outparse.h"
#include "server/schema.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const TAGS[8] = {"<tool_call>", "</tool_call>", "<function=", "</function>",
                                    "<parameter=", "</parameter>", "</think>",   "<think>"};

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"s\":{\"type\":\"string\"},\"n\":{\"type\":\"number\"},\"b\":{\"type\":"
    "\"boolean\"},\"o\":{\"type\":\"object\"}}}}}]";

static bool g_no_calls; /* this input's parser allows no tool call */

struct acc {
    struct snug_sbuf reasoning, content, calls; /* calls: "name\0args\0" records */
    struct snug_sbuf args;                      /* deltas of the open call */
    int n_start, n_end;
    bool ended;
};

/* Whether needle occurs in s[0..n). */
static bool has(const char *s, size_t n, const char *needle) {
    size_t m = strlen(needle);
    for (size_t i = 0; s && i + m <= n; i++)
        if (!memcmp(s + i, needle, m)) return true;
    return false;
}

static void fail(const char *why) {
    fprintf(stderr, "fuzz_server_outparse: invariant broken: %s\n", why);
    __builtin_trap();
}

static void on_event(void *user, const struct snug_outparse_event *ev) {
    struct acc *a = user;
    if (a->ended) fail("event after END");
    switch (ev->kind) {
    case SNUG_OUTPARSE_REASONING:
        snug_sbuf_append(&a->reasoning, ev->text, ev->len);
        if (has(a->reasoning.data, a->reasoning.len, "</think>")) fail("</think> in reasoning");
        break;
    case SNUG_OUTPARSE_CONTENT:
        snug_sbuf_append(&a->content, ev->text, ev->len);
        if (!g_no_calls && (has(a->content.data, a->content.len, "<tool_call>") ||
                            has(a->content.data, a->content.len, "<function=")))
            fail("tag in content");
        break;
    case SNUG_OUTPARSE_TOOL_START:
        if (g_no_calls) fail("a call where none is allowed");
        if (ev->index != a->n_start || a->n_start != a->n_end) fail("bad start index");
        a->n_start++;
        snug_sbuf_reset(&a->args);
        break;
    case SNUG_OUTPARSE_TOOL_ARGS:
        if (ev->index != a->n_start - 1 || a->n_start == a->n_end) fail("args outside a call");
        snug_sbuf_append(&a->args, ev->text, ev->len);
        break;
    case SNUG_OUTPARSE_TOOL_END: {
        if (ev->index != a->n_end || a->n_start != a->n_end + 1) fail("bad end index");
        a->n_end++;
        for (const unsigned char *c = (const unsigned char *)ev->name; *c; c++)
            if (*c < 0x20 || *c >= 0x80) fail("name not printable ASCII");
        if (a->args.len != ev->len || memcmp(a->args.data, ev->text, ev->len))
            fail("deltas do not add up");
        json_error_t jerr;
        json_t *v = json_loadb(ev->text, ev->len, JSON_ALLOW_NUL, &jerr);
        if (!json_is_object(v)) fail("arguments not a JSON object");
        json_decref(v);
        snug_sbuf_puts(&a->calls, ev->name);
        snug_sbuf_putc(&a->calls, 0);
        snug_sbuf_append(&a->calls, ev->text, ev->len);
        snug_sbuf_putc(&a->calls, 0);
        break;
    }
    case SNUG_OUTPARSE_END:
        if (a->n_start != a->n_end) fail("call left open");
        a->ended = true;
        break;
    }
}

static void acc_free(struct acc *a) {
    snug_sbuf_free(&a->reasoning);
    snug_sbuf_free(&a->content);
    snug_sbuf_free(&a->calls);
    snug_sbuf_free(&a->args);
}

static bool same(const struct snug_sbuf *x, const struct snug_sbuf *y) {
    return x->len == y->len && (!x->len || !memcmp(x->data, y->data, x->len));
}

/* Parse text in pieces: mode 0 whole, 1 byte by byte, 2 seeded random. */
static void parse(const json_t *tools, bool in_reasoning, const char *text, size_t n, int mode,
                  uint32_t seed, struct acc *a) {
    memset(a, 0, sizeof *a);
    struct snug_outparse *p = NULL;
    struct snug_err err = {0};
    if (snug_outparse_init(&p, tools, in_reasoning, on_event, a, &err)) fail("init");
    if (g_no_calls) snug_outparse_no_calls(p);
    size_t at = 0;
    while (at < n) {
        size_t k = n - at;
        if (mode == 1) k = 1;
        if (mode == 2) {
            seed = seed * 1103515245u + 12345u;
            k = 1 + (seed >> 16) % 9;
            if (k > n - at) k = n - at;
        }
        if (snug_outparse_feed(p, text + at, k, &err)) fail("feed");
        at += k;
    }
    if (snug_outparse_finish(p, &err)) fail("finish");
    if (!a->ended) fail("no END");
    snug_outparse_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    bool in_reasoning = data[0] & 1;
    g_no_calls = data[0] & 4;
    json_t *tools = NULL;
    if (data[0] & 2) {
        json_error_t jerr;
        tools = json_loads(TOOLS, 0, &jerr);
    }
    struct snug_sbuf text = {0};
    for (size_t i = 2; i < size; i++) {
        if (data[i] >= 0xF8)
            snug_sbuf_puts(&text, TAGS[data[i] - 0xF8]);
        else
            snug_sbuf_putc(&text, (char)data[i]);
    }
    struct acc ref, got;
    parse(tools, in_reasoning, text.data, text.len, 0, 0, &ref);
    for (int mode = 1; mode <= 2; mode++) {
        parse(tools, in_reasoning, text.data, text.len, mode, data[1], &got);
        if (!same(&ref.reasoning, &got.reasoning) || !same(&ref.content, &got.content) ||
            !same(&ref.calls, &got.calls))
            fail("split changes the result");
        acc_free(&got);
    }
    acc_free(&ref);
    snug_sbuf_free(&text);
    json_decref(tools);
    return 0;
}
