/* stress.c — `snug stress`: long-context boundary checks (docs/suite.md, stress):
 * a needle ladder whose depths come from the server's own context limit (up to 0.95 of it,
 * plus one rung beyond it that the server must reject), token counts by the server's
 * /tokenize, every haystack salted; the tool-response prefill at 100K and 130K characters;
 * the IDE-agent one-shot; the multi-turn agent (each part selectable: --only). Memory readings
 * before and after each request and an alive check after each.
 * Invariant: a rung passes only on HTTP 200 with all three needle words in the content; a
 * rejection is reported as "rejected" (beyond the limit) or "fail" (within it), never as a
 * pass; a ladder with no passing rung fails; a probe that cannot fit skips with the numbers.
 * Read next: bench.c.
 */
#include "suite/suite.h"

#include "core/core.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const COLORS[] = {"amber",   "crimson", "violet", "teal",
                                     "scarlet", "indigo",  "olive",  "silver"};
static const char *const ANIMALS[] = {"heron",  "otter",  "falcon", "lynx",
                                      "badger", "walrus", "gecko",  "bison"};

static const char QUESTION[] =
    "\n\nWhat is the hidden phrase in the notes above? Reply with the three words only.";

/* Case-insensitive whole-text search. */
static bool contains_ci(const char *hay, const char *w) {
    size_t n = strlen(w);
    for (const char *p = hay; p && *p; p++) {
        size_t k = 0;
        while (k < n && p[k] && tolower((unsigned char)p[k]) == tolower((unsigned char)w[k])) k++;
        if (k == n) return true;
    }
    return false;
}

/* Attach memory readings and the alive check to a result row; an unresponsive server turns
 * the row into a failure. */
static void after_request(struct snug_suite_client *c, json_t *row, json_t *mem_before) {
    json_object_set_new(row, "memory_before", mem_before ? mem_before : json_null());
    json_t *m = snug_suite_memory(c);
    json_object_set_new(row, "memory_after", m ? m : json_null());
    bool alive = snug_suite_alive(c);
    json_object_set_new(row, "alive_after", json_boolean(alive));
    if (!alive) {
        char d[1024];
        snprintf(d, sizeof d, "server not alive after the request; %s",
                 json_string_value(json_object_get(row, "detail")));
        json_object_set_new(row, "status", json_string("fail"));
        json_object_set_new(row, "detail", json_string(d));
    }
}

/* One needle rung of ~target prompt tokens. over: the rung lies beyond the limit. */
static json_t *needle_rung(struct snug_suite_client *c, long target, long n_ctx, bool over,
                           const char *needle, struct snug_err *err) {
    char name[64], line[160], why[512];
    snprintf(name, sizeof name, "needle@%ld", target);
    snprintf(line, sizeof line, "IMPORTANT MEMORY: the hidden phrase is '%s'.", needle);
    json_t *mem = snug_suite_memory(c);
    long measured = -1;
    char *hay = snug_ops_haystack(c, target, line, &measured);
    struct snug_sbuf u = {0};
    if (hay) {
        snug_sbuf_puts(&u, hay);
        snug_sbuf_puts(&u, QUESTION);
    }
    snug_free(hay);
    if (!hay || u.oom) {
        snug_sbuf_free(&u);
        json_decref(mem);
        snug_err_set(err, SNUG_ERR_NOMEM, "out of memory building a haystack");
        return NULL;
    }
    json_t *b = snug_suite_chat_body(c, NULL, u.data, 30, 0, 0);
    snug_sbuf_free(&u);
    struct snug_suite_http h;
    int rc = snug_suite_post(c, "/v1/chat/completions", b, c->timeout_s, &h, err);
    json_decref(b);
    if (rc) {
        json_decref(mem);
        return NULL;
    }
    struct snug_suite_msg m;
    json_int_t ptok =
        json_integer_value(json_object_get(json_object_get(h.json, "usage"), "prompt_tokens"));
    json_t *r;
    if (h.status == 0 || h.status >= 500) {
        r = snug_ops_check(name, "fail", "%s",
                           snug_suite_describe(h.status, h.error, h.body, why, sizeof why));
    } else if (h.status != 200) {
        snug_suite_describe(h.status, h.error, h.body, why, sizeof why);
        r = over ? snug_ops_check(name, "rejected",
                                  "rejected by the server beyond its limit of "
                                  "%ld tokens: %s",
                                  n_ctx, why)
                 : snug_ops_check(name, "fail",
                                  "rejected by the server within its stated limit "
                                  "of %ld tokens: %s",
                                  n_ctx, why);
    } else if (over) {
        r = snug_ops_check(name, "fail",
                           "the server accepted ~%ld prompt tokens beyond its stated "
                           "limit of %ld: the limit it reports is wrong or it truncates silently",
                           measured > 0 ? measured : target, n_ctx);
    } else if (!snug_suite_msg_of(&h, &m) || !m.content) {
        r = snug_ops_check(name, "fail", "HTTP 200 without message.content");
    } else {
        char words[3][32];
        int nw = sscanf(needle, "%31s %31s %31s", words[0], words[1], words[2]);
        bool all = nw == 3;
        for (int i = 0; i < nw; i++) all = all && contains_ci(m.content, words[i]);
        r = snug_ops_check(name, all ? "pass" : "fail", "%s '%s' in %lld prompt tokens: \"%.60s\"",
                           all ? "found" : "did not recall", needle, (long long)ptok, m.content);
    }
    snug_suite_http_free(&h);
    json_object_set_new(r, "target_tokens", json_integer(target));
    json_object_set_new(r, "measured_tokens", json_integer(measured));
    json_object_set_new(r, "prompt_tokens", ptok > 0 ? json_integer(ptok) : json_null());
    json_object_set_new(r, "fraction",
                        json_real((double)(ptok > 0 ? ptok : target) / (double)n_ctx));
    after_request(c, r, mem);
    return r;
}

/* Cycled text of n characters from paragraphs, salted in front. */
static char *cycled(const char *const *paras, size_t n_paras, size_t n, const char *what) {
    struct snug_sbuf b = {0};
    snug_sbuf_printf(&b, "[%s %016llx]\n", what, snug_suite_random());
    for (size_t i = 0; b.len < n && !b.oom; i++) snug_sbuf_puts(&b, paras[i % n_paras]);
    if (b.oom) {
        snug_sbuf_free(&b);
        return NULL;
    }
    return b.data;
}

static const char *const NEWS[] = {
    "Markets: Shares of chip makers rose for a third day as orders for data-centre hardware "
    "outpaced forecasts, while analysts warned that inventories are building up in Asia. ",
    "Energy: Crude prices slipped after producers signalled higher output next quarter; "
    "refiners expect margins to narrow through the winter. ",
    "Rates: Bond yields edged lower as traders priced in a slower pace of rate rises, and the "
    "dollar weakened against the yen and the euro. ",
    "Retail: Department stores reported flat holiday sales, with online orders up and foot "
    "traffic down; discount chains gained share. ",
    "Property: Commercial property values fell again as office vacancies climbed, pushing two "
    "regional lenders to raise loss provisions. ",
};
static const char *const BUILDLOG[] = {
    "cc -O2 -c src/config.c -o build/config.o\n",
    "src/config.c:142:17: error: 'struct cfg' has no member named 'timeout_ms'\n",
    "  142 |     cfg->timeout_ms = parse_int(value);\n",
    "make: *** [Makefile:31: build/config.o] Error 1\n",
    "cc -O2 -c src/net.c -o build/net.o\n",
};
static const char *const IDE_RULES[] = {
    "You are a coding agent inside an IDE. Read files before you change them, keep changes "
    "small, and explain each edit in one sentence. ",
    "Never invent file contents; when unsure, call a tool to look. Prefer the project's own "
    "helpers over new dependencies. ",
    "Run the tests after every change and report failures verbatim. Keep commits focused on "
    "one concern with a message in the imperative mood. ",
};

/* A function tool schema with one required string parameter. */
static json_t *tool(const char *name, const char *param) {
    return json_pack("{s:s,s:{s:s,s:s,s:{s:s,s:{s:{s:s}},s:[s]}}}", "type", "function", "function",
                     "name", name, "description", name, "parameters", "type", "object",
                     "properties", param, "type", "string", "required", param);
}

/* Send a prepared multi-message body (prompt_est: estimated prompt tokens, -1 unknown) and
 * score: HTTP 200 with >= 50 chars of content or (when allow_tool) a tool call; no markup;
 * tool calls forbidden when !allow_tool. Skips with the numbers when the prompt cannot fit. */
static json_t *probe(struct snug_suite_client *c, const char *name, json_t *body, long prompt_est,
                     const char *est_src, long n_ctx, bool allow_tool, struct snug_err *err) {
    char why[512];
    if (prompt_est > 0 && prompt_est + 16 >= n_ctx) {
        json_decref(body);
        return snug_ops_check(name, "skip",
                              "needs ~%ld prompt tokens (%s) but the context holds "
                              "%ld",
                              prompt_est, est_src, n_ctx);
    }
    json_int_t mt = json_integer_value(json_object_get(body, "max_tokens"));
    if (prompt_est > 0 && prompt_est + mt > n_ctx)
        json_object_set_new(body, "max_tokens", json_integer(n_ctx - prompt_est - 8));
    json_t *mem = snug_suite_memory(c);
    struct snug_suite_http h;
    int rc = snug_suite_post(c, "/v1/chat/completions", body, c->timeout_s, &h, err);
    json_decref(body);
    if (rc) {
        json_decref(mem);
        return NULL;
    }
    struct snug_suite_msg m;
    json_t *r;
    if (!snug_suite_msg_of(&h, &m)) {
        snug_suite_describe(h.status, h.error, h.body, why, sizeof why);
        r = snug_ops_check(name, "fail", "%s", why);
    } else {
        size_t n = m.content ? strlen(m.content) : 0;
        size_t ncalls = json_array_size(m.tool_calls);
        bool leak =
            m.content && (strstr(m.content, "<tool_call>") || strstr(m.content, "<function="));
        if (leak)
            r = snug_ops_check(name, "fail", "tool-call markup in content");
        else if (ncalls && !allow_tool)
            r = snug_ops_check(name, "fail", "%zu tool calls despite tool_choice none", ncalls);
        else if (n >= 50 || (allow_tool && ncalls))
            r = snug_ops_check(name, "pass", "%zu chars of content, %zu tool calls, %.1f s", n,
                               ncalls, h.wall_s);
        else
            r = snug_ops_check(name, "fail", "only %zu chars of content and no tool call", n);
        json_int_t pt =
            json_integer_value(json_object_get(json_object_get(h.json, "usage"), "prompt_tokens"));
        json_object_set_new(r, "prompt_tokens", pt > 0 ? json_integer(pt) : json_null());
    }
    snug_suite_http_free(&h);
    after_request(c, r, mem);
    return r;
}

/* Token estimate of some text: the server's count, else characters / 4. */
static long estimate(const struct snug_suite_client *c, const char *text, const char **src) {
    long n = snug_suite_count_tokens(c, text);
    if (n >= 0) {
        *src = "counted by /tokenize";
        return n;
    }
    *src = "estimated at 4 chars/token";
    return (long)(strlen(text) / 4);
}

/* The 4-message news agent turn with a tool reply of n_chars characters. */
static json_t *tool_prefill(struct snug_suite_client *c, size_t n_chars, long n_ctx,
                            struct snug_err *err) {
    char name[48];
    snprintf(name, sizeof name, "tool-prefill-%zuK", n_chars / 1000);
    char *news = cycled(NEWS, sizeof NEWS / sizeof NEWS[0], n_chars, "news feed");
    if (!news) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory"), NULL;
    const char *src;
    long est = estimate(c, news, &src) + 120;
    json_t *msgs =
        json_pack("[{s:s,s:s},{s:s,s:s,s:[{s:s,s:s,s:{s:s,s:s}}]},{s:s,s:s,s:s},{s:s,s:s}]", "role",
                  "user", "content", "What is happening in the markets today?", "role", "assistant",
                  "content", "", "tool_calls", "id", "call_news_1", "type", "function", "function",
                  "name", "fetch_news", "arguments", "{\"topic\": \"markets\"}", "role", "tool",
                  "tool_call_id", "call_news_1", "content", news, "role", "user", "content",
                  "Summarise the top 3 themes in about 100 words.");
    snug_free(news);
    json_t *b = json_pack("{s:o,s:i,s:f,s:[o],s:{s:b}}", "messages", msgs, "max_tokens", 300,
                          "temperature", 0.6, "tools", tool("fetch_news", "topic"),
                          "chat_template_kwargs", "enable_thinking", 0);
    if (c->model[0]) json_object_set_new(b, "model", json_string(c->model));
    return probe(c, name, b, est, src, n_ctx, true, err);
}

/* IDE-agent one-shot: 5K-char system prompt, 10 tools, tool_choice none. */
static json_t *ide_agent(struct snug_suite_client *c, long n_ctx, int max_tokens,
                         struct snug_err *err) {
    static const char *const TOOLS[][2] = {
        {"read_file", "path"},    {"write_file", "path"},    {"list_dir", "path"},
        {"grep", "pattern"},      {"run_tests", "target"},   {"run_command", "cmd"},
        {"git_diff", "path"},     {"git_commit", "message"}, {"open_url", "url"},
        {"ask_user", "question"},
    };
    char *sys = cycled(IDE_RULES, sizeof IDE_RULES / sizeof IDE_RULES[0], 5000, "workspace");
    if (!sys) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory"), NULL;
    json_t *tools = json_array();
    for (size_t i = 0; i < 10; i++) json_array_append_new(tools, tool(TOOLS[i][0], TOOLS[i][1]));
    char *tj = json_dumps(tools, JSON_COMPACT);
    struct snug_sbuf all = {0};
    snug_sbuf_puts(&all, sys);
    if (tj) snug_sbuf_puts(&all, tj);
    free(tj);
    const char *src;
    long est = estimate(c, all.data ? all.data : "", &src) + 80;
    snug_sbuf_free(&all);
    json_t *b = snug_suite_chat_body(
        c, sys, "Add input validation to parse_config() in src/config.c and explain the change.",
        max_tokens ? max_tokens : 2000, 0.6, 0);
    snug_free(sys);
    json_object_set_new(b, "tools", tools);
    json_object_set_new(b, "tool_choice", json_string("none"));
    return probe(c, "ide-agent-oneshot", b, est, src, n_ctx, false, err);
}

/* Multi-turn agent: a tool call, a 3K-char tool reply, an answer, a follow-up. */
static json_t *multi_turn(struct snug_suite_client *c, long n_ctx, int max_tokens,
                          struct snug_err *err) {
    char *log = cycled(BUILDLOG, sizeof BUILDLOG / sizeof BUILDLOG[0], 3000, "build log");
    if (!log) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory"), NULL;
    const char *src;
    long est = estimate(c, log, &src) + 300;
    json_t *msgs = json_pack(
        "[{s:s,s:s},{s:s,s:s},{s:s,s:s,s:[{s:s,s:s,s:{s:s,s:s}}]},{s:s,s:s,s:s},{s:s,s:s},"
        "{s:s,s:s}]",
        "role", "system", "content", "You are a build assistant with shell access.", "role", "user",
        "content", "The build fails. Find out why.", "role", "assistant", "content", "",
        "tool_calls", "id", "call_make_1", "type", "function", "function", "name", "run_command",
        "arguments", "{\"cmd\": \"make\"}", "role", "tool", "tool_call_id", "call_make_1",
        "content", log, "role", "assistant", "content",
        "The compiler stops in src/config.c: struct cfg has no member timeout_ms.", "role", "user",
        "content", "Fix it: which file do you change, and how?");
    snug_free(log);
    json_t *b = json_pack("{s:o,s:i,s:f,s:[o,o],s:{s:b}}", "messages", msgs, "max_tokens",
                          max_tokens ? max_tokens : 500, "temperature", 0.6, "tools",
                          tool("run_command", "cmd"), tool("read_file", "path"),
                          "chat_template_kwargs", "enable_thinking", 0);
    if (c->model[0]) json_object_set_new(b, "model", json_string(c->model));
    return probe(c, "multi-turn-agent", b, est, src, n_ctx, true, err);
}

static const char *const PART_NAMES[] = {"ladder",
                                         "beyond-limit",
                                         "tool-prefill-100K",
                                         "tool-prefill-130K",
                                         "ide-agent-oneshot",
                                         "multi-turn-agent"};

int snug_ops_stress_parts(const char *list, unsigned *out, char *why, size_t why_n) {
    const size_t n_names = sizeof PART_NAMES / sizeof PART_NAMES[0];
    *out = 0;
    for (const char *s = list; *s;) {
        size_t n = strcspn(s, ",");
        size_t k = 0;
        while (k < n_names && !(strlen(PART_NAMES[k]) == n && !strncmp(PART_NAMES[k], s, n))) k++;
        if (k == n_names) {
            int o =
                snprintf(why, why_n, "unknown part '%.*s': expected", (int)(n > 64 ? 64 : n), s);
            for (size_t i = 0; i < n_names && o >= 0 && (size_t)o < why_n; i++)
                o += snprintf(why + o, why_n - (size_t)o, "%s %s",
                              i == 0             ? ""
                              : i + 1 == n_names ? " or"
                                                 : ",",
                              PART_NAMES[i]);
            return -1;
        }
        *out |= 1u << k;
        s += n;
        if (*s) s++;
    }
    if (!*out) return snprintf(why, why_n, "no part named"), -1;
    return 0;
}

int snug_ops_stress(struct snug_suite_client *c, const struct snug_ops_stress_opts *o,
                    snug_ops_progress_fn progress, void *user, json_t **out, struct snug_err *err) {
    static const double DEFAULT_FR[] = {0.10, 0.25, 0.50, 0.75, 0.90, 0.95};
    *out = NULL;
    if (!snug_suite_alive(c))
        return snug_err_set(err, SNUG_ERR_IO,
                            "no server answers at %s (GET /health and /v1/models failed): start "
                            "`snug serve` or check --url",
                            c->base);
    snug_suite_discover_model(c);
    long n_ctx = o->n_ctx;
    char source[96] = "--ctx";
    if (!n_ctx && snug_suite_context_limit(c, &n_ctx, source, sizeof source, err))
        return err->status;
    const double *fr = o->n_fractions ? o->fractions : DEFAULT_FR;
    int nf = o->n_fractions ? o->n_fractions : (int)(sizeof DEFAULT_FR / sizeof DEFAULT_FR[0]);
    char needle[96];
    if (o->needle)
        snprintf(needle, sizeof needle, "%s", o->needle);
    else {
        unsigned long long r = snug_suite_random();
        snprintf(needle, sizeof needle, "%s %s %02d", COLORS[r % 8], ANIMALS[(r >> 8) % 8],
                 (int)(10 + (r >> 16) % 90));
    }
    unsigned parts = o->parts ? o->parts : ~0u;
    if (!o->over_limit) parts &= ~(unsigned)SNUG_STRESS_BEYOND;
    if (!(parts & SNUG_STRESS_LADDER)) nf = 0;
    int total = nf + !!(parts & SNUG_STRESS_BEYOND), step = 0;
    for (int k = 0; k < 4; k++) total += !!(parts & (SNUG_STRESS_TOOL100 << k));
    json_t *ladder = json_array(), *checks = json_array();
    int passed = 0, failed = 0, rejected = 0;
    long prev = -1;
    /* room for the question, the chat template (~32) and the 30-token answer */
    long q = snug_suite_count_tokens(c, QUESTION);
    long overhead = (q > 0 ? q : (long)sizeof QUESTION / 4) + 32 + 30;
    for (int i = 0; i < nf; i++) {
        double f = fr[i] > 0.95 ? 0.95 : fr[i];
        long target = (long)(f * (double)n_ctx) - overhead;
        if (target < 32 || target == prev) continue;
        prev = target;
        char label[64];
        snprintf(label, sizeof label, "needle %ld/%ld", target, n_ctx);
        if (progress) progress(user, label, step++, total);
        json_t *r = needle_rung(c, target, n_ctx, false, needle, err);
        if (!r) goto fail;
        const char *st = json_string_value(json_object_get(r, "status"));
        passed += !strcmp(st, "pass");
        failed += !strcmp(st, "fail");
        rejected += strstr(json_string_value(json_object_get(r, "detail")), "rejected") != NULL;
        json_array_append_new(ladder, r);
    }
    size_t n_rungs = json_array_size(ladder);
    if (!(parts & SNUG_STRESS_LADDER))
        ; /* not asked for: no needle-ladder row */
    else if (!n_rungs)
        json_array_append_new(checks, snug_ops_check("needle-ladder", "fail",
                                                     "no rung fits a "
                                                     "context of %ld tokens",
                                                     n_ctx));
    else if (!passed)
        json_array_append_new(checks, snug_ops_check("needle-ladder", "fail",
                                                     "no rung passed "
                                                     "(%zu rungs, %d rejected by the server)",
                                                     n_rungs, rejected));
    else
        json_array_append_new(
            checks, snug_ops_check("needle-ladder", failed ? "fail" : "pass",
                                   "%d of %zu rungs passed (%d rejected), deepest %lld tokens of "
                                   "%ld (limit from %s)",
                                   passed, n_rungs, rejected,
                                   json_integer_value(json_object_get(
                                       json_array_get(ladder, n_rungs - 1), "target_tokens")),
                                   n_ctx, source));
    if (parts & SNUG_STRESS_BEYOND) {
        if (progress) progress(user, "beyond the limit", step++, total);
        json_t *r = needle_rung(c, n_ctx + n_ctx / 20 + 64, n_ctx, true, needle, err);
        if (!r) goto fail;
        json_array_append_new(ladder, json_incref(r));
        json_object_set_new(r, "name", json_string("beyond-limit"));
        json_array_append_new(checks, r);
    }
    for (int k = 0; k < 4; k++) {
        static const char *const LABELS[] = {"tool prefill 100K", "tool prefill 130K", "IDE agent",
                                             "multi-turn agent"};
        if (!(parts & (SNUG_STRESS_TOOL100 << k))) continue;
        if (progress) progress(user, LABELS[k], step++, total);
        json_t *r = k == 0   ? tool_prefill(c, 100000, n_ctx, err)
                    : k == 1 ? tool_prefill(c, 130000, n_ctx, err)
                    : k == 2 ? ide_agent(c, n_ctx, o->max_tokens, err)
                             : multi_turn(c, n_ctx, o->max_tokens, err);
        if (!r) goto fail;
        json_array_append_new(checks, r);
    }
    if (progress) progress(user, "done", total, total);
    *out = json_pack("{s:{s:s,s:s},s:{s:I,s:s},s:s,s:o,s:o}", "server", "url", c->base, "model",
                     c->model, "context", "n_ctx", (json_int_t)n_ctx, "source", source, "needle",
                     needle, "checks", checks, "ladder", ladder);
    return *out ? SNUG_OK : snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
fail:
    json_decref(ladder);
    json_decref(checks);
    return err && err->status ? err->status : snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
}
