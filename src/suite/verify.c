/* verify.c — `snug verify`: the nine functional checks of docs/suite.md against
 * an OpenAI-compatible server (reachable, engine self-check, basic answer, tool call,
 * streaming, thinking, quality, speculative decoding, streaming tool call with thinking on),
 * after one unscored warm-up request.
 * Invariant: each check derives its status only from the response it received; every
 * precondition (HTTP 200, the field present and of the right type, a terminated stream) is
 * tested before the pass condition, so error bodies, empty streams and missing fields fail.
 * Read next: stress.c.
 */
#include "suite/suite.h"

#include "core/core.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *TOOL_WEATHER =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Current "
    "weather for a city\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
    "\"string\",\"description\":\"City name\"}},\"required\":[\"city\"]}}}]";

/* Case-insensitive substring. */
static bool has_ci(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (const char *p = hay; p && *p; p++) {
        size_t k = 0;
        while (k < n && p[k] && tolower((unsigned char)p[k]) == tolower((unsigned char)needle[k]))
            k++;
        if (k == n) return true;
    }
    return false;
}

/* A check's max_tokens under the run's cap (0 = no cap): --max-tokens shortens the long
 * answers (a slow server, a quick run); every check keeps its pass condition. */
static int capped(int want, int cap) {
    return cap > 0 && cap < want ? cap : want;
}

/* Tool-call markup that must never reach content. */
static bool leaks_markup(const char *s) {
    return s && (strstr(s, "<tool_call>") || strstr(s, "</tool_call>") || strstr(s, "<function="));
}

/* A get_weather call with a JSON-object arguments string naming a non-empty city.
 * calls: an array of {"function": {"name", "arguments"}} (non-streamed) or of
 * {"name", "arguments"} (assembled from a stream). Explains a miss in why. */
static bool weather_call(const json_t *calls, char *why, size_t why_n) {
    size_t i;
    json_t *tc;
    snprintf(why, why_n, "no tool call");
    json_array_foreach(calls, i, tc) {
        const json_t *fn = json_object_get(tc, "function");
        if (!fn) fn = tc;
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        if (!name || strcmp(name, "get_weather")) {
            snprintf(why, why_n, "tool call names '%s', not get_weather", name ? name : "(none)");
            continue;
        }
        if (!args) {
            snprintf(why, why_n, "get_weather call has no arguments string");
            continue;
        }
        json_t *a = json_loads(args, 0, NULL);
        const char *city = json_string_value(json_object_get(a, "city"));
        bool ok = json_is_object(a) && city && *city;
        if (ok)
            snprintf(why, why_n, "get_weather(city=\"%.60s\")", city);
        else if (!json_is_object(a))
            snprintf(why, why_n, "get_weather arguments are not a JSON object: %.80s", args);
        else
            snprintf(why, why_n, "get_weather arguments lack a non-empty \"city\": %.80s", args);
        json_decref(a);
        if (ok) return true;
    }
    return false;
}

/* POST a non-streamed chat body; on a non-chat answer writes the reason into why. */
/* The bound of the quick checks: 120 s, or the user's --timeout when shorter. */
static double short_timeout(const struct snug_suite_client *c) {
    return c->timeout_s > 0 && c->timeout_s < 120 ? c->timeout_s : 120;
}

static bool chat(struct snug_suite_client *c, json_t *body, double timeout,
                 struct snug_suite_http *h, struct snug_suite_msg *m, char *why, size_t why_n,
                 struct snug_err *err, int *rc) {
    *rc = snug_suite_post(c, "/v1/chat/completions", body, timeout, h, err);
    json_decref(body);
    if (*rc) return false;
    if (snug_suite_msg_of(h, m)) return true;
    if (h->status == 200)
        snprintf(why, why_n, "HTTP 200 but no choices[0].message object: %.120s", h->body);
    else
        snug_suite_describe(h->status, h->error, h->body, why, why_n);
    return false;
}

/* 1. GET /v1/models within 5 s lists the model (the first one becomes the model when none was
 * given). */
static json_t *check_reachable(struct snug_suite_client *c, int cap, struct snug_err *err) {
    (void)cap; /* no generation */
    struct snug_suite_http h;
    char why[512];
    if (snug_suite_get(c, "/v1/models", 5, &h, err)) return NULL;
    json_t *r;
    json_t *data = json_object_get(h.json, "data");
    if (h.status != 200) {
        r = snug_ops_check("reachable", "fail", "GET /v1/models: %s",
                           snug_suite_describe(h.status, h.error, h.body, why, sizeof why));
    } else if (!json_is_array(data) || !json_array_size(data)) {
        r = snug_ops_check("reachable", "fail", "GET /v1/models: no \"data\" list of models");
    } else {
        bool listed = false;
        size_t i;
        json_t *m;
        json_array_foreach(data, i, m) {
            const char *id = json_string_value(json_object_get(m, "id"));
            if (id && c->model[0] && !strcmp(id, c->model)) listed = true;
        }
        const char *first = json_string_value(json_object_get(json_array_get(data, 0), "id"));
        if (!c->model[0] && first && strlen(first) < sizeof c->model) {
            strcpy(c->model, first);
            listed = true;
        }
        r = listed ? snug_ops_check("reachable", "pass", "serves %s (%.0f ms)", c->model,
                                    h.wall_s * 1e3)
                   : snug_ops_check("reachable", "fail", "model '%s' is not listed by /v1/models",
                                    c->model[0] ? c->model : "(none with an id)");
    }
    snug_suite_http_free(&h);
    return r;
}

/* 2. GET /health reports the planned budget, the loaded model and no failed self-test. */
static json_t *check_engine(struct snug_suite_client *c, int cap, struct snug_err *err) {
    (void)cap; /* no generation */
    struct snug_suite_http h;
    char why[512];
    if (snug_suite_get(c, "/health", 5, &h, err)) return NULL;
    const char *name = "engine-self-check";
    json_t *r;
    json_t *plan = json_object_get(h.json, "plan");
    const char *self = json_string_value(json_object_get(h.json, "self_test"));
    const char *status = json_string_value(json_object_get(h.json, "status"));
    const char *model = json_string_value(json_object_get(h.json, "model"));
    json_int_t n_ctx = json_integer_value(json_object_get(plan, "n_ctx"));
    if (h.status == 404)
        r = snug_ops_check(name, "skip", "the server has no /health endpoint");
    else if (h.status == 0)
        r = snug_ops_check(name, "fail", "GET /health: %s",
                           snug_suite_describe(0, h.error, NULL, why, sizeof why));
    else if (json_is_object(h.json) && !plan && !self && h.status == 200)
        r = snug_ops_check(name, "skip",
                           "/health carries no plan or self-test (not a snug server): %.100s",
                           h.body);
    else if (h.status != 200)
        r = snug_ops_check(name, "fail", "GET /health: %s%s%s",
                           snug_suite_describe(h.status, h.error, h.body, why, sizeof why),
                           self ? "; self-test: " : "", self ? self : "");
    else if (!self || strcmp(self, "ok"))
        r = snug_ops_check(name, "fail", "self-test %s", self ? self : "not reported");
    else if (!status || strcmp(status, "ok"))
        r = snug_ops_check(name, "fail", "/health status is '%s', not 'ok'",
                           status ? status : "(missing)");
    else if (!model || !*model)
        r = snug_ops_check(name, "fail", "/health names no loaded model");
    else if (n_ctx <= 0)
        r = snug_ops_check(name, "fail", "/health reports no planned context (plan.n_ctx)");
    else
        r = snug_ops_check(name, "pass", "model %s, planned context %lld tokens, self-test ok",
                           model, (long long)n_ctx);
    snug_suite_http_free(&h);
    return r;
}

/* 3. "What is the capital of France?" -> content mentions Paris. */
static json_t *check_basic(struct snug_suite_client *c, int cap, struct snug_err *err) {
    struct snug_suite_http h = {0};
    struct snug_suite_msg m;
    char why[512];
    int rc;
    const char *name = "basic-answer";
    json_t *b = snug_suite_chat_body(c, NULL, "What is the capital of France? One short sentence.",
                                     capped(30, cap), 0.6, 0);
    json_t *r;
    if (!chat(c, b, short_timeout(c), &h, &m, why, sizeof why, err, &rc))
        r = rc ? NULL : snug_ops_check(name, "fail", "%s", why);
    else if (!m.content)
        r = snug_ops_check(name, "fail", "message.content is missing or not a string");
    else if (!has_ci(m.content, "paris"))
        r = snug_ops_check(name, "fail", "content does not mention Paris: \"%.100s\"", m.content);
    else
        r = snug_ops_check(name, "pass", "\"%.80s\"", m.content);
    snug_suite_http_free(&h);
    return r;
}

/* 4. A weather question with one tool -> a structured get_weather call, no markup in content. */
static json_t *check_tool(struct snug_suite_client *c, int cap, struct snug_err *err) {
    struct snug_suite_http h = {0};
    struct snug_suite_msg m;
    char why[512];
    int rc;
    const char *name = "tool-call";
    json_t *b = snug_suite_chat_body(
        c, NULL, "What is the weather like in San Francisco right now?", capped(200, cap), 0.3, 0);
    json_object_set_new(b, "tools", json_loads(TOOL_WEATHER, 0, NULL));
    json_object_set_new(b, "tool_choice", json_string("auto"));
    json_t *r;
    if (!chat(c, b, short_timeout(c), &h, &m, why, sizeof why, err, &rc))
        r = rc ? NULL : snug_ops_check(name, "fail", "%s", why);
    else if (leaks_markup(m.content))
        r = snug_ops_check(name, "fail", "tool-call markup leaked into content: \"%.100s\"",
                           m.content);
    else if (!m.tool_calls)
        r = snug_ops_check(name, "fail", "no message.tool_calls (content: \"%.80s\")",
                           m.content ? m.content : "");
    else if (!weather_call(m.tool_calls, why, sizeof why))
        r = snug_ops_check(name, "fail", "%s", why);
    else
        r = snug_ops_check(name, "pass", "%s", why);
    snug_suite_http_free(&h);
    return r;
}

/* Problems common to every stream: no answer, non-200, an error event, no [DONE]. */
static bool stream_broken(const struct snug_suite_stream *s, char *why, size_t why_n) {
    if (s->status != 200) {
        snug_suite_describe(s->status, s->error, s->raw, why, why_n);
        return true;
    }
    if (s->error_event) {
        char *e = json_dumps(s->error_event, JSON_COMPACT);
        snprintf(why, why_n, "error event in the stream: %.200s", e ? e : "?");
        free(e);
        return true;
    }
    if (s->error[0]) {
        snprintf(why, why_n, "stream broke off: %s", s->error);
        return true;
    }
    if (!s->done) {
        snprintf(why, why_n, "stream not terminated by data: [DONE] (%d events)", s->n_events);
        return true;
    }
    if (s->n_bad_events) {
        snprintf(why, why_n, "%d data lines were not JSON", s->n_bad_events);
        return true;
    }
    return false;
}

/* 5. A streamed haiku: >= 5 non-empty content deltas, >= 20 characters, [DONE]. */
static json_t *check_stream(struct snug_suite_client *c, int cap, struct snug_err *err) {
    struct snug_suite_stream s;
    char why[512];
    const char *name = "streaming";
    json_t *b = snug_suite_chat_body(c, NULL, "Write a three-sentence haiku about debugging.",
                                     capped(120, cap), 0.6, 0);
    json_object_set_new(b, "stream", json_true());
    int rc = snug_suite_stream_chat(c, b, short_timeout(c), &s, err);
    json_decref(b);
    if (rc) return NULL;
    json_t *r;
    if (stream_broken(&s, why, sizeof why))
        r = snug_ops_check(name, "fail", "%s", why);
    else if (s.n_content_chunks < 5)
        r = snug_ops_check(name, "fail", "%d content chunks (want >= 5)", s.n_content_chunks);
    else if (s.content_len < 20)
        r = snug_ops_check(name, "fail", "%zu characters of content (want >= 20)", s.content_len);
    else
        r = snug_ops_check(name, "pass", "%d chunks, %zu chars, first after %.0f ms",
                           s.n_content_chunks, s.content_len, s.t_first * 1e3);
    snug_suite_stream_free(&s);
    return r;
}

/* 6. Thinking on: reasoning split out (>= 50 chars) and content (or finish_reason length). */
static json_t *check_thinking(struct snug_suite_client *c, int cap, struct snug_err *err) {
    struct snug_suite_http h = {0};
    struct snug_suite_msg m;
    char why[512];
    int rc;
    const char *name = "thinking";
    json_t *b =
        snug_suite_chat_body(c, NULL, "What is 2+2? One-line answer.", capped(4000, cap), 0.3, 1);
    json_t *r;
    if (!chat(c, b, c->timeout_s, &h, &m, why, sizeof why, err, &rc))
        r = rc ? NULL : snug_ops_check(name, "fail", "%s", why);
    else if (!m.reasoning || strlen(m.reasoning) < 50)
        r = snug_ops_check(name, "fail",
                           "reasoning %s (want >= 50 chars in reasoning_content/reasoning)",
                           m.reasoning ? "shorter than 50 chars" : "missing");
    else if (m.content && (strstr(m.content, "</think>") || strstr(m.content, "<think>")))
        r = snug_ops_check(name, "fail", "think tags leaked into content: \"%.80s\"", m.content);
    else if ((!m.content || !*m.content) &&
             !(m.finish_reason && !strcmp(m.finish_reason, "length")))
        r = snug_ops_check(name, "fail", "empty content (finish_reason %s)",
                           m.finish_reason ? m.finish_reason : "missing");
    else
        r = snug_ops_check(name, "pass", "%zu chars of reasoning, content \"%.60s\"",
                           strlen(m.reasoning), m.content ? m.content : "");
    snug_suite_http_free(&h);
    return r;
}

/* Longest run of one identical non-blank line repeated back to back. */
static int longest_repeat(const char *s) {
    int best = 0, run = 0;
    const char *prev = NULL;
    size_t prev_n = 0;
    while (*s) {
        const char *e = strchr(s, '\n');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        size_t a = 0, z = n;
        while (a < z && isspace((unsigned char)s[a])) a++;
        while (z > a && isspace((unsigned char)s[z - 1])) z--;
        if (z > a) {
            if (prev && prev_n == z - a && !memcmp(prev, s + a, prev_n))
                run++;
            else
                run = 1;
            prev = s + a;
            prev_n = z - a;
            if (run > best) best = run;
        }
        if (!e) break;
        s = e + 1;
    }
    return best;
}

/* Words (whitespace-separated, lowercase, trimmed of punctuation) among the first `limit`:
 * total and distinct counts. */
static void word_stats(const char *s, int limit, int *total, int *distinct) {
    char words[200][32];
    int n = 0, d = 0;
    if (limit > 200) limit = 200;
    while (*s && n < limit) {
        while (*s && isspace((unsigned char)*s)) s++;
        if (!*s) break;
        char w[32];
        int k = 0;
        while (*s && !isspace((unsigned char)*s)) {
            unsigned char ch = (unsigned char)*s++;
            if ((isalnum(ch) || ch >= 0x80) && k < 31) w[k++] = (char)tolower(ch);
        }
        w[k] = 0;
        if (!k) continue;
        bool seen = false;
        for (int i = 0; i < n && !seen; i++) seen = !strcmp(words[i], w);
        if (!seen) d++;
        memcpy(words[n++], w, sizeof w);
    }
    *total = n;
    *distinct = d;
}

/* 7. A long essay: no markup, no line looping, varied words, at least 50 of them. */
static json_t *check_quality(struct snug_suite_client *c, int cap, struct snug_err *err) {
    struct snug_suite_http h = {0};
    struct snug_suite_msg m;
    char why[512];
    int rc;
    const char *name = "quality";
    json_t *b = snug_suite_chat_body(
        c, NULL, "Write a detailed 1500-word essay on how attention works in transformers.",
        capped(2000, cap), 0.6, 0);
    json_t *r;
    if (!chat(c, b, c->timeout_s, &h, &m, why, sizeof why, err, &rc)) {
        r = rc ? NULL : snug_ops_check(name, "fail", "%s", why);
    } else if (!m.content || !*m.content) {
        r = snug_ops_check(name, "fail", "empty content");
    } else if (leaks_markup(m.content)) {
        r = snug_ops_check(name, "fail", "tool-call markup in an essay: \"%.80s\"",
                           strstr(m.content, "<"));
    } else {
        int rep = longest_repeat(m.content), total, distinct;
        word_stats(m.content, 200, &total, &distinct);
        double ratio = total ? (double)distinct / total : 0;
        if (rep >= 5)
            r = snug_ops_check(name, "fail", "a line repeats %d times in a row (cascade)", rep);
        else if (total < 50)
            r = snug_ops_check(name, "fail", "only %d words for a 1500-word essay", total);
        else if (ratio < 0.30)
            r = snug_ops_check(name, "fail", "%d distinct of the first %d words (%.2f < 0.30)",
                               distinct, total, ratio);
        else
            r = snug_ops_check(name, "pass",
                               "%zu chars, distinct/total words %.2f, longest "
                               "line run %d",
                               strlen(m.content), ratio, rep);
    }
    snug_suite_http_free(&h);
    return r;
}

/* 8. Count to 80 at T 0 and read the acceptance length: from the /metrics counters around the
 * request, else from the response's timings (draft_n_accepted, predicted_n). */
static json_t *check_spec(struct snug_suite_client *c, int cap, struct snug_err *err) {
    const char *name = "speculative";
    char reason[256] = "", why[512];
    double a0 = 0, d0 = 0, a1 = 0, d1 = 0;
    int have = snug_suite_spec_counters(c, &a0, &d0, reason, sizeof reason);
    struct snug_suite_http h = {0};
    struct snug_suite_msg m;
    int rc;
    json_t *b = snug_suite_chat_body(c, NULL, "Count from 1 to 80, one number per line.",
                                     capped(500, cap), 0, 0);
    if (!chat(c, b, c->timeout_s, &h, &m, why, sizeof why, err, &rc)) {
        snug_suite_http_free(&h);
        return rc ? NULL : snug_ops_check(name, "fail", "%s", why);
    }
    json_t *tm = json_object_get(h.json, "timings");
    json_t *acc = json_object_get(tm, "draft_n_accepted");
    json_int_t pred = json_integer_value(json_object_get(tm, "predicted_n"));
    json_t *r = NULL;
    if (have == 1 && snug_suite_spec_counters(c, &a1, &d1, reason, sizeof reason) == 1) {
        double da = a1 - a0, dd = d1 - d0;
        if (dd <= 0)
            r = snug_ops_check(name, "fail",
                               "speculation counters exist but no drafting step ran "
                               "during the request");
        else {
            double len = 1 + da / dd;
            r = snug_ops_check(name, len >= 2.0 ? "pass" : "fail",
                               "mean acceptance length %.2f (%s 2.0) from /metrics", len,
                               len >= 2.0 ? ">=" : "<");
        }
    } else if (json_is_integer(acc) && pred > 0) {
        json_int_t na = json_integer_value(acc);
        double steps = (double)(pred - na);
        double len = steps > 0 ? pred / steps : 0;
        r = snug_ops_check(name, len >= 2.0 ? "pass" : "fail",
                           "mean acceptance length %.2f from timings (%lld of %lld tokens "
                           "accepted drafts)",
                           len, (long long)na, (long long)pred);
    } else {
        r = snug_ops_check(name, "skip", "%s",
                           have == -1 ? "the server exposes no /metrics and no draft timings"
                                      : reason);
    }
    snug_suite_http_free(&h);
    return r;
}

/* 9. Streamed tool call with thinking on: reasoning deltas, then a get_weather call assembled
 * from tool_calls deltas, [DONE], no markup in content. */
static json_t *check_stream_tool(struct snug_suite_client *c, int cap, struct snug_err *err) {
    struct snug_suite_stream s;
    char why[512];
    const char *name = "stream-tool-thinking";
    json_t *b = snug_suite_chat_body(
        c, NULL, "What is the weather like in San Francisco right now?", capped(1000, cap), 0.3, 1);
    json_object_set_new(b, "tools", json_loads(TOOL_WEATHER, 0, NULL));
    json_object_set_new(b, "stream", json_true());
    int rc = snug_suite_stream_chat(c, b, c->timeout_s, &s, err);
    json_decref(b);
    if (rc) return NULL;
    json_t *r;
    if (stream_broken(&s, why, sizeof why))
        r = snug_ops_check(name, "fail", "%s", why);
    else if (leaks_markup(s.content) || leaks_markup(s.reasoning))
        r = snug_ops_check(name, "fail", "tool-call markup leaked into %s",
                           leaks_markup(s.content) ? "content" : "reasoning");
    else if (!s.n_reasoning_chunks)
        r = snug_ops_check(name, "fail", "no reasoning deltas with thinking on");
    else if (!weather_call(s.tool_calls, why, sizeof why))
        r = snug_ops_check(name, "fail", "%s in the stream", why);
    else
        r = snug_ops_check(name, "pass", "%d reasoning chunks, %d tool-call chunks: %s",
                           s.n_reasoning_chunks, s.n_tool_chunks, why);
    snug_suite_stream_free(&s);
    return r;
}

int snug_ops_verify(struct snug_suite_client *c, const struct snug_ops_verify_opts *o,
                    snug_ops_progress_fn progress, void *user, json_t **out, struct snug_err *err) {
    typedef json_t *(*check_fn)(struct snug_suite_client *, int, struct snug_err *);
    int cap = o ? o->max_tokens : 0;
    static const struct {
        const char *label;
        check_fn fn;
    } CHECKS[] = {
        {"reachable", check_reachable},
        {"engine-self-check", check_engine},
        {"basic-answer", check_basic},
        {"tool-call", check_tool},
        {"streaming", check_stream},
        {"thinking", check_thinking},
        {"quality", check_quality},
        {"speculative", check_spec},
        {"stream-tool-thinking", check_stream_tool},
    };
    const int n = (int)(sizeof CHECKS / sizeof CHECKS[0]);
    *out = NULL;
    json_t *checks = json_array();
    if (!checks) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
    snug_suite_discover_model(c);
    /* unscored warm-up: loads caches and kernels so the first scored check is not penalised */
    if (progress) progress(user, "warm-up", 0, n + 1);
    struct snug_suite_http h;
    json_t *wb = snug_suite_chat_body(c, NULL, "Say hello.", 8, 0.6, 0);
    int wrc = snug_suite_post(c, "/v1/chat/completions", wb, short_timeout(c), &h, err);
    json_decref(wb);
    if (wrc) {
        json_decref(checks);
        return wrc;
    }
    if (h.status == 0) { /* no answer at all (timeout, refused): every check would wait the same */
        int rc = snug_err_set(err, SNUG_ERR_IO,
                              "the server at %s did not answer the warm-up request within %.0f s "
                              "(%s); is it running and responsive?",
                              c->base, short_timeout(c), h.error);
        snug_suite_http_free(&h);
        json_decref(checks);
        return rc;
    }
    snug_suite_http_free(&h);
    for (int i = 0; i < n; i++) {
        if (progress) progress(user, CHECKS[i].label, i + 1, n + 1);
        json_t *r = CHECKS[i].fn(c, cap, err);
        if (!r) {
            json_decref(checks);
            return err && err->status ? err->status
                                      : snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
        }
        json_array_append_new(checks, r);
    }
    if (progress) progress(user, "done", n + 1, n + 1);
    *out = json_pack("{s:{s:s,s:s},s:i,s:o}", "server", "url", c->base, "model", c->model,
                     "max_tokens_cap", cap, "checks", checks);
    return *out ? SNUG_OK : snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
}
