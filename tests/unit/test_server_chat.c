/* test_server_chat.c — the chat side of the server: Python-compatible JSON output (schema.c),
 * prompt rendering details and errors (chat.c; the byte-for-byte comparison against jinja2 is
 * tests/py/test_chat_template.py), and the output parser (outparse.c): every form of reasoning
 * and tool call, fed whole, one byte at a time and in random splits, must give the expected
 * reasoning / content / calls, identical for every split, with no tag in content, argument
 * deltas that add up to the final arguments, and deltas that never split a UTF-8 character.
 */
#include "server/chat.h"
#include "server/outparse.h"
#include "server/schema.h"
#include "test.h"

#include "core/core.h"

#include <stdint.h>

/* ==== JSON dumps ============================================================================= */

/* Expected strings are Python 3's json.dumps(x, ensure_ascii=False) for the same values. */
static void test_dumps(void) {
    static const struct {
        double x;
        const char *want;
    } reals[] = {
        {1.0, "1.0"},
        {0.1, "0.1"},
        {1e16, "1e+16"},
        {1e15, "1000000000000000.0"},
        {1e-5, "1e-05"},
        {0.0001, "0.0001"},
        {-0.0, "-0.0"},
        {1.5e300, "1.5e+300"},
        {5e-324, "5e-324"},
        {123456.789, "123456.789"},
        {2.5e-7, "2.5e-07"},
        {1e22, "1e+22"},
        {12345678901234567890.0, "1.2345678901234567e+19"},
        {0.30000000000000004, "0.30000000000000004"},
        {100.0, "100.0"},
        {1e100, "1e+100"},
        {-1.25e-10, "-1.25e-10"},
    };
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        struct snug_sbuf b = {0};
        json_t *v = json_real(reals[i].x);
        snug_json_dumps(&b, v);
        CHECKF(b.data && !strcmp(b.data, reals[i].want), "%g: got %s want %s", reals[i].x, b.data,
               reals[i].want);
        json_decref(v);
        snug_sbuf_free(&b);
    }
    json_error_t jerr;
    json_t *v = json_loads("{\"a\": [1, 2.5, null, true, false, \"x\\\"\\\\\\n\\u0001é🎉\"], "
                           "\"b\": {}}",
                           0, &jerr);
    CHECK(v != NULL);
    struct snug_sbuf b = {0};
    snug_json_dumps(&b, v);
    CHECKF(b.data && !strcmp(b.data, "{\"a\": [1, 2.5, null, true, false, "
                                     "\"x\\\"\\\\\\n\\u0001é🎉\"], \"b\": {}}"),
           "got %s", b.data);
    json_decref(v);
    /* invalid UTF-8 becomes U+FFFD, so the output is always valid JSON */
    snug_sbuf_reset(&b);
    snug_json_dumps_str(&b, "a\xff\xc3(b", 5);
    CHECKF(!strcmp(b.data, "\"a\xEF\xBF\xBD\xEF\xBF\xBD(b\""), "got %s", b.data);
    snug_sbuf_free(&b);

    /* argument typing by schema */
    static const struct {
        const char *schema, *text, *want;
    } typed[] = {
        {"{\"type\":\"string\"}", "42", "\"42\""},
        {"{\"type\":[\"string\",\"null\"]}", "true", "\"true\""},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]}", "7", "\"7\""},
        {"{\"enum\":[\"1\",\"2\"]}", "1", "\"1\""},
        {"{\"enum\":[1,2]}", "1", "1"},
        {"{\"type\":\"integer\"}", " 42 ", "42"},
        {"{\"type\":\"integer\"}", "forty", "\"forty\""},
        {"{\"type\":\"number\"}", "1e2", "100.0"},
        {"{\"type\":\"boolean\"}", "False", "false"},
        {"{\"type\":\"array\"}", "[1, \"a\"]", "[1, \"a\"]"},
        {"{\"type\":\"object\"}", "{\"b\":1,\"a\":2}", "{\"b\": 1, \"a\": 2}"},
        {NULL, "null", "null"},
        {NULL, "text\nmore", "\"text\\nmore\""},
    };
    for (size_t i = 0; i < sizeof typed / sizeof typed[0]; i++) {
        json_t *sch = typed[i].schema ? json_loads(typed[i].schema, 0, &jerr) : NULL;
        snug_sbuf_reset(&b);
        snug_schema_typed_value(&b, sch, typed[i].text, strlen(typed[i].text));
        CHECKF(b.data && !strcmp(b.data, typed[i].want), "typed %zu: got %s want %s", i, b.data,
               typed[i].want);
        json_decref(sch);
    }
    snug_sbuf_free(&b);
}

/* ==== rendering ============================================================================== */

static char *render(const char *req_json, bool thinking, struct snug_err *err, int *st) {
    json_error_t jerr;
    json_t *req = json_loads(req_json, 0, &jerr);
    SNUG_ASSERT(req);
    struct snug_chat_opts o = snug_chat_default_opts(thinking);
    char *out = NULL;
    size_t len = 0;
    *st = snug_chat_opts_from_request(&o, req, err);
    if (!*st)
        *st = snug_chat_render(json_object_get(req, "messages"), json_object_get(req, "tools"), &o,
                               &out, &len, err);
    if (out) SNUG_ASSERT(strlen(out) == len);
    json_decref(req);
    return out;
}

static void test_render(void) {
    struct snug_err err = {0};
    int st;
    char *s = render("{\"messages\":[{\"role\":\"user\",\"content\":\" hi \"}]}", true, &err, &st);
    CHECK(st == SNUG_OK && s &&
          !strcmp(s, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"));
    CHECK(s && snug_chat_prompt_in_reasoning(s, strlen(s)));
    snug_free(s);
    s = render("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", false, &err, &st);
    CHECK(st == SNUG_OK && s &&
          !strcmp(s, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>"
                     "assistant\n<think>\n\n</think>\n\n"));
    CHECK(s && !snug_chat_prompt_in_reasoning(s, strlen(s)));
    snug_free(s);
    /* the request's kwargs override the server default */
    s = render("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
               "\"chat_template_kwargs\":{\"enable_thinking\":true},"
               "\"add_generation_prompt\":true}",
               false, &err, &st);
    CHECK(st == SNUG_OK && s && snug_chat_prompt_in_reasoning(s, strlen(s)));
    snug_free(s);
    /* history: a tool call with string arguments, merged tool results */
    s = render("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
               "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":"
               "{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1, \\\"b\\\": \\\"x\\\"}\"}}]},"
               "{\"role\":\"tool\",\"content\":\"r1\"},{\"role\":\"tool\",\"content\":\"r2\"}],"
               "\"add_generation_prompt\":false}",
               true, &err, &st);
    CHECKF(st == SNUG_OK && s &&
               !strcmp(s, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
                          "</think>\n\n<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n"
                          "<parameter=b>\nx\n</parameter>\n</function>\n</tool_call><|im_end|>\n"
                          "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n"
                          "<tool_response>\nr2\n</tool_response><|im_end|>\n"),
           "got %s", s ? s : err.msg);
    snug_free(s);
    /* rejections carry the template's message */
    static const struct {
        const char *req, *msg;
    } bad[] = {
        {"{\"messages\":[]}", "No messages provided."},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\","
         "\"content\":\"b\"}]}",
         "System message must be at the beginning."},
        {"{\"messages\":[{\"role\":\"system\",\"content\":\"a\"}]}",
         "No user query found in messages."},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"bot\"}]}",
         "Unexpected message role."},
        {"{\"messages\":[{\"role\":\"user\",\"content\":{}}]}", "Unexpected content type."},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"x\"}]}]}",
         "Unexpected item type in content."},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (struct snug_err){0};
        s = render(bad[i].req, true, &err, &st);
        CHECKF(st == SNUG_ERR_INVALID && !s && !strcmp(err.msg, bad[i].msg), "case %zu: %s", i,
               err.msg);
    }
    /* a malformed arguments string is a 400 naming the field */
    err = (struct snug_err){0};
    s = render("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\","
               "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{oops\"}}]}]}",
               true, &err, &st);
    CHECKF(st == SNUG_ERR_INVALID && strstr(err.msg, "messages[1].tool_calls[0]"), "%s", err.msg);
    snug_free(s);
}

/* ==== output parser ========================================================================== */

#define MAX_CALLS 8

/* Everything the events said, plus invariant violations found on the way. */
struct got {
    struct snug_sbuf reasoning, content;
    int n_calls;
    char names[MAX_CALLS][64];
    struct snug_sbuf args[MAX_CALLS], args_end[MAX_CALLS];
    int bad; /* invariant violations */
    int last_kind, ended;
};

/* Strict UTF-8 check (no overlongs, no surrogates, nothing above U+10FFFF). */
static bool valid_utf8(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t l = c < 0x80                   ? 1
                   : (c >= 0xC2 && c <= 0xDF) ? 2
                   : (c >= 0xE0 && c <= 0xEF) ? 3
                   : (c >= 0xF0 && c <= 0xF4) ? 4
                                              : 0;
        if (!l || i + l > n) return false;
        uint32_t cp = l == 1 ? c : l == 2 ? (c & 0x1F) : l == 3 ? (c & 0x0F) : (c & 0x07);
        for (size_t k = 1; k < l; k++) {
            if ((u[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (u[i + k] & 0x3F);
        }
        if ((l == 3 && cp < 0x800) || (l == 4 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += l;
    }
    return true;
}

static void got_emit(void *user, const struct snug_outparse_event *ev) {
    struct got *g = user;
    if (g->ended) g->bad++;
    switch (ev->kind) {
    case SNUG_OUTPARSE_REASONING:
        snug_sbuf_append(&g->reasoning, ev->text, ev->len);
        if (!valid_utf8(ev->text, ev->len)) g->bad++;
        if (strstr(g->reasoning.data, "</think>")) g->bad++;
        break;
    case SNUG_OUTPARSE_CONTENT:
        if (!ev->len) g->bad++;
        snug_sbuf_append(&g->content, ev->text, ev->len);
        if (!valid_utf8(ev->text, ev->len)) g->bad++;
        if (strstr(g->content.data, "<tool_call>") || strstr(g->content.data, "<function="))
            g->bad++;
        break;
    case SNUG_OUTPARSE_TOOL_START:
        if (ev->index != g->n_calls || g->n_calls >= MAX_CALLS) {
            g->bad++;
            break;
        }
        snprintf(g->names[g->n_calls++], 64, "%s", ev->name);
        break;
    case SNUG_OUTPARSE_TOOL_ARGS:
        if (ev->index != g->n_calls - 1) {
            g->bad++;
            break;
        }
        snug_sbuf_append(&g->args[ev->index], ev->text, ev->len);
        break;
    case SNUG_OUTPARSE_TOOL_END: {
        if (ev->index != g->n_calls - 1 || strcmp(ev->name, g->names[ev->index])) {
            g->bad++;
            break;
        }
        snug_sbuf_append(&g->args_end[ev->index], ev->text, ev->len);
        json_error_t jerr;
        json_t *v = json_loadb(ev->text, ev->len, 0, &jerr);
        if (!json_is_object(v)) g->bad++;
        json_decref(v);
        break;
    }
    case SNUG_OUTPARSE_END:
        g->ended = 1;
        break;
    }
}

static void got_free(struct got *g) {
    snug_sbuf_free(&g->reasoning);
    snug_sbuf_free(&g->content);
    for (int i = 0; i < MAX_CALLS; i++) {
        snug_sbuf_free(&g->args[i]);
        snug_sbuf_free(&g->args_end[i]);
    }
}

static const char *str0(const struct snug_sbuf *b) {
    return b->data ? b->data : "";
}

/* Parse text split at the given cut points (sorted, within the text). */
static bool g_no_calls; /* parse as for a request that allows no tool call */

static void parse_split(const json_t *tools, bool in_reasoning, const char *text,
                        const size_t *cuts, int n_cuts, struct got *g) {
    memset(g, 0, sizeof *g);
    struct snug_outparse *p = NULL;
    struct snug_err err = {0};
    SNUG_ASSERT(!snug_outparse_init(&p, tools, in_reasoning, got_emit, g, &err));
    if (g_no_calls) snug_outparse_no_calls(p);
    size_t at = 0, n = strlen(text);
    for (int i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : n;
        CHECK(snug_outparse_feed(p, text + at, end - at, &err) == SNUG_OK);
        at = end;
    }
    CHECK(snug_outparse_finish(p, &err) == SNUG_OK);
    CHECK(snug_outparse_feed(p, "x", 1, &err) == SNUG_ERR_INVALID);
    CHECK(g->ended);
    snug_outparse_free(p);
}

struct call_want {
    const char *name, *args;
};

struct pcase {
    const char *what;
    bool in_reasoning;
    const char *text, *reasoning, *content;
    struct call_want calls[3];
};

static const char *TOOLS_JSON =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
    "\"metric\":{\"type\":\"boolean\"},\"opts\":{\"type\":\"object\"},\"zip\":{\"type\":"
    "[\"string\",\"null\"]}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{}}}}]";

static const struct pcase CASES[] = {
    {"thinking then answer",
     true,
     "Let me think.\n</think>\n\nThe answer is 4.",
     "Let me think.",
     "The answer is 4.",
     {{0}}},
    {"thinking off", false, "Hello world", "", "Hello world", {{0}}},
    {"reasoning only (cut off)",
     true,
     "still thinking about it ",
     "still thinking about it",
     "",
     {{0}}},
    {"<think> opening the output",
     false,
     "\n<think>\nreason\n</think>\n\nanswer",
     "reason",
     "answer",
     {{0}}},
    {"typed XML call",
     true,
     "I need the weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
     "Paris\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=metric>\nTrue\n"
     "</parameter>\n</function>\n</tool_call>",
     "I need the weather.",
     "",
     {{"get_weather", "{\"city\": \"Paris\", \"days\": 3, \"metric\": true}"}}},
    {"string params stay strings",
     false,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\n123\n</parameter>\n"
     "<parameter=zip>\n00123\n</parameter>\n</function>\n</tool_call>",
     "",
     "",
     {{"get_weather", "{\"city\": \"123\", \"zip\": \"00123\"}"}}},
    {"untyped params parse as JSON when they can",
     false,
     "<tool_call>\n<function=f>\n<parameter=x>\n{\"a\": [1, 2.50]}\n</parameter>\n"
     "<parameter=y>\nhello\n</parameter>\n<parameter=z>\n-7\n</parameter>\n</function>\n"
     "</tool_call>",
     "",
     "",
     {{"f", "{\"x\": {\"a\": [1, 2.5]}, \"y\": \"hello\", \"z\": -7}"}}},
    {"object param",
     false,
     "<tool_call>\n<function=get_weather>\n<parameter=opts>\n{\"k\": \"v\"}\n</parameter>\n"
     "</function>\n</tool_call>",
     "",
     "",
     {{"get_weather", "{\"opts\": {\"k\": \"v\"}}"}}},
    {"content before a call, content after",
     false,
     "Let me check.\n\n<tool_call>\n<function=f>\n</function>\n</tool_call>\nDone.",
     "",
     "Let me check.\nDone.",
     {{"f", "{}"}}},
    {"two calls",
     false,
     "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>\n"
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n"
     "</tool_call>",
     "",
     "",
     {{"f", "{\"a\": 1}"}, {"get_weather", "{\"city\": \"Rome\"}"}}},
    {"call right after </think>",
     true,
     "think</think><tool_call>\n<function=f>\n</function>\n</tool_call>",
     "think",
     "",
     {{"f", "{}"}}},
    {"missing closing tags at the end",
     false,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo",
     "",
     "",
     {{"get_weather", "{\"city\": \"Oslo\"}"}}},
    {"missing </parameter> before the next one",
     false,
     "<tool_call>\n<function=f>\n<parameter=a>\n1\n<parameter=b>\n2\n</function>",
     "",
     "",
     {{"f", "{\"a\": 1, \"b\": 2}"}}},
    {"JSON body",
     false,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\", \"days\": 2}}"
     "\n</tool_call>",
     "",
     "",
     {{"get_weather", "{\"city\": \"Lima\", \"days\": 2}"}}},
    {"JSON body, arguments as a string, unterminated",
     false,
     "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"q\\\": \\\"x\\\"}\"}",
     "",
     "",
     {{"f", "{\"q\": \"x\"}"}}},
    {"<function= without <tool_call>",
     false,
     "ok <function=f>\n<parameter=a>\n1\n</parameter>\n</function>",
     "",
     "ok",
     {{"f", "{\"a\": 1}"}}},
    {"<tool_call> inside reasoning closes it",
     true,
     "hmm\n<tool_call>\n<function=f>\n</function>\n</tool_call>",
     "hmm",
     "",
     {{"f", "{}"}}},
    {"tag-like text stays content",
     false,
     "a < b and <tool not a tag> c <tool_cal <functio",
     "",
     "a < b and <tool not a tag> c <tool_cal <functio",
     {{0}}},
    {"no newlines",
     false,
     "<tool_call><function=f><parameter=a>1</parameter></function></tool_call>",
     "",
     "",
     {{"f", "{\"a\": 1}"}}},
    {"whitespace variants",
     false,
     "<tool_call>\n\n  <function= f >\n <parameter= a >\n 1 \n</parameter>\n\n</function>  \n"
     "</tool_call>",
     "",
     "",
     {{"f", "{\"a\": 1}"}}},
    {"multi-line string value",
     false,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\n\nline1\n  line2\n\n</parameter>\n"
     "</function>\n</tool_call>",
     "",
     "",
     {{"get_weather", "{\"city\": \"\\nline1\\n  line2\\n\"}"}}},
    {"value containing '<'",
     false,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\na<b</par\n</parameter>\n"
     "</function>\n</tool_call>",
     "",
     "",
     {{"get_weather", "{\"city\": \"a<b</par\"}"}}},
    {"value holding tags mid-line (a patch that edits this parser)",
     false,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\n*** Add File: x</parameter>\n"
     "+a</function> b <parameter=c>\n</parameter>\n</function>\n</tool_call>",
     "",
     "",
     {{"get_weather",
       "{\"city\": \"*** Add File: x</parameter>\\n+a</function> b <parameter=c>\"}"}}},
    {"</parameter> without a newline, then the end",
     false,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo</parameter>  ",
     "",
     "",
     {{"get_weather", "{\"city\": \"Oslo\"}"}}},
    {"unicode", true, "réflexion 🎉</think>\n\nréponse 日", "réflexion 🎉", "réponse 日", {{0}}},
    {"truncated in the function name",
     false,
     "text <tool_call>\n<function=get_wea",
     "",
     "text",
     {{0}}},
    {"garbage body becomes content",
     false,
     "<tool_call>\nnot json\n</tool_call>",
     "",
     "not json",
     {{0}}},
    {"empty tool call", false, "a<tool_call>\n</tool_call>b", "", "a\nb", {{0}}},
    {"whitespace inside content kept", false, "a \n b\n\n\nc   ", "", "a \n b\n\n\nc", {{0}}},
    {"a tag prefix before dropped garbage cannot join into a tag",
     false,
     "x <t<tool_call><tool_call>ool_call> y",
     "",
     "x <t\nool_call> y",
     {{0}}},
    {"literal <think> later is content", false, "x <think> y", "", "x <think> y", {{0}}},
};

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static bool same_got(const struct got *a, const struct got *b) {
    if (strcmp(str0(&a->reasoning), str0(&b->reasoning)) ||
        strcmp(str0(&a->content), str0(&b->content)) || a->n_calls != b->n_calls)
        return false;
    for (int i = 0; i < a->n_calls; i++)
        if (strcmp(a->names[i], b->names[i]) || strcmp(str0(&a->args[i]), str0(&b->args[i])))
            return false;
    return true;
}

static void test_outparse(void) {
    json_error_t jerr;
    json_t *tools = json_loads(TOOLS_JSON, 0, &jerr);
    SNUG_ASSERT(tools);
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        const struct pcase *pc = &CASES[c];
        size_t n = strlen(pc->text);
        struct got whole;
        parse_split(tools, pc->in_reasoning, pc->text, NULL, 0, &whole);
        CHECKF(!strcmp(str0(&whole.reasoning), pc->reasoning), "%s: reasoning [%s]", pc->what,
               str0(&whole.reasoning));
        CHECKF(!strcmp(str0(&whole.content), pc->content), "%s: content [%s]", pc->what,
               str0(&whole.content));
        int want_calls = 0;
        while (want_calls < 3 && pc->calls[want_calls].name) want_calls++;
        CHECKF(whole.n_calls == want_calls, "%s: %d calls", pc->what, whole.n_calls);
        for (int i = 0; i < whole.n_calls && i < want_calls; i++) {
            CHECKF(!strcmp(whole.names[i], pc->calls[i].name), "%s: name %s", pc->what,
                   whole.names[i]);
            CHECKF(!strcmp(str0(&whole.args[i]), pc->calls[i].args), "%s: args %s", pc->what,
                   str0(&whole.args[i]));
            CHECKF(!strcmp(str0(&whole.args[i]), str0(&whole.args_end[i])),
                   "%s: deltas add up to the final arguments", pc->what);
        }
        CHECKF(whole.bad == 0, "%s: %d invariant violations", pc->what, whole.bad);
        /* one byte at a time, and random splits: the same result */
        size_t *cuts = snug_malloc((n + 1) * sizeof *cuts);
        for (size_t i = 0; i + 1 < n; i++) cuts[i] = i + 1;
        struct got g;
        parse_split(tools, pc->in_reasoning, pc->text, cuts, n > 1 ? (int)n - 1 : 0, &g);
        CHECKF(same_got(&whole, &g) && g.bad == 0, "%s: byte-at-a-time differs", pc->what);
        got_free(&g);
        for (int trial = 0; trial < 30; trial++) {
            int k = 0;
            for (size_t i = 1; i < n; i++)
                if (next_rand() % 4 == 0) cuts[k++] = i;
            parse_split(tools, pc->in_reasoning, pc->text, cuts, k, &g);
            CHECKF(same_got(&whole, &g) && g.bad == 0, "%s: split trial %d differs", pc->what,
                   trial);
            got_free(&g);
        }
        snug_free(cuts);
        /* the non-streaming helper agrees */
        struct snug_outparse_result r;
        struct snug_err err = {0};
        CHECK(snug_outparse_text(tools, pc->in_reasoning, pc->text, n, &r, &err) == SNUG_OK);
        CHECKF(!strcmp(r.reasoning, str0(&whole.reasoning)) &&
                   !strcmp(r.content, str0(&whole.content)) && r.n_tool_calls == whole.n_calls,
               "%s: snug_outparse_text differs", pc->what);
        for (int i = 0; i < r.n_tool_calls && i < whole.n_calls; i++)
            CHECK(!strcmp(r.tool_calls[i].name, whole.names[i]) &&
                  !strcmp(r.tool_calls[i].arguments, str0(&whole.args[i])));
        snug_outparse_result_free(&r);
        snug_outparse_result_free(&r); /* idempotent on an emptied result */
        got_free(&whole);
    }
    json_decref(tools);
    snug_outparse_free(NULL);
}

/* A request that allows no tool call (toolpolicy.h): text in the call format stays reasoning or
 * content, whole or split anywhere; "</think>" still ends the reasoning. */
static void test_outparse_no_calls(void) {
    static const struct {
        bool in_reasoning;
        const char *text, *reasoning, *content;
    } C[] = {
        {true,
         "Call it.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
         "</parameter>\n</function>\n</tool_call>",
         "Call it.",
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
         "</function>\n</tool_call>"},
        {true, "I could write <tool_call> here.\n</think>\nNo.", "I could write <tool_call> here.",
         "No."},
        {false, "<function=get_time>\n</function> and <tool_call>{\"name\": \"f\"}</tool_call>", "",
         "<function=get_time>\n</function> and <tool_call>{\"name\": \"f\"}</tool_call>"},
    };
    json_error_t jerr;
    json_t *tools = json_loads(TOOLS_JSON, 0, &jerr);
    g_no_calls = true;
    for (size_t c = 0; c < sizeof C / sizeof C[0]; c++) {
        size_t n = strlen(C[c].text);
        for (int pass = 0; pass < 2; pass++) { /* whole, then a byte at a time */
            size_t *cuts = snug_malloc((n + 1) * sizeof *cuts);
            for (size_t i = 0; i + 1 < n; i++) cuts[i] = i + 1;
            struct got g;
            parse_split(pass ? NULL : tools, C[c].in_reasoning, C[c].text, cuts,
                        pass && n > 1 ? (int)n - 1 : 0, &g);
            CHECKF(g.n_calls == 0 && !strcmp(str0(&g.reasoning), C[c].reasoning) &&
                       !strcmp(str0(&g.content), C[c].content),
                   "no calls, case %zu pass %d: %d calls, reasoning [%s], content [%s]", c, pass,
                   g.n_calls, str0(&g.reasoning), str0(&g.content));
            got_free(&g);
            snug_free(cuts);
        }
    }
    g_no_calls = false;
    json_decref(tools);
}

int main(void) {
    test_dumps();
    test_render();
    test_outparse();
    test_outparse_no_calls();
    return TEST_DONE();
}
