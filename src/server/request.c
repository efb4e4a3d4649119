/* request.c — parse and validate an OpenAI request body into struct snug_server_req.
 *
 * Owns: nothing beyond the parsed JSON tree handed to the request. Invariant: every field read
 * is type-checked first (a wrong type is a 400 naming the field), JSON null counts as absent,
 * unknown fields are ignored (as OpenAI does). Field semantics follow the OpenAI API reference
 * (chat/completions and completions). This is the libFuzzer surface: nothing here may crash.
 * Read next: http.c (what is done with the result).
 */
#include "server/server.h"

#include "core/core.h"
#include "grammar/grammar.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t snug_utf8_trim_tail(char *s, size_t n) {
    /* walk back over at most 3 continuation bytes to the last lead byte; drop the sequence
     * when it is shorter than its lead byte announces */
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--, back++;
    if (i == 0) return n;
    unsigned char c = (unsigned char)s[i - 1];
    size_t want = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (want && back + 1 < want) n = i - 1; /* an incomplete last character: cut before it */
    s[n] = 0;
    return n;
}

/* vsnprintf into a fixed buffer, never ending inside a UTF-8 character (the message may echo
 * request text; a cut character would make the error body invalid JSON to build). */
static void msg_format(char *dst, size_t cap, const char *fmt, va_list ap) {
    int k = vsnprintf(dst, cap, fmt, ap);
    if (k < 0) {
        dst[0] = 0;
        return;
    }
    size_t n = (size_t)k < cap ? (size_t)k : cap - 1;
    snug_utf8_trim_tail(dst, n);
}

int snug_server_error_set(struct snug_server_error *e, int http_status, const char *type,
                          const char *param, const char *fmt, ...) {
    e->http_status = http_status;
    e->type = type;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snug_utf8_trim_tail(e->param, strlen(e->param));
    va_list ap;
    va_start(ap, fmt);
    msg_format(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static int bad(struct snug_server_error *e, const char *field, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* A 400 invalid_request_error about `field`. */
static int bad(struct snug_server_error *e, const char *field, const char *fmt, ...) {
    e->http_status = 400;
    e->type = "invalid_request_error";
    snprintf(e->param, sizeof e->param, "%s", field);
    snug_utf8_trim_tail(e->param, strlen(e->param));
    va_list ap;
    va_start(ap, fmt);
    msg_format(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* The field, or NULL when absent or null. */
static json_t *field(const json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_null(v) ? NULL : v;
}

/* Where a request's top-level fields come from: the body itself (chat, completions) or a front
 * end's getter that names its own value for each chat field (snug_server_req_from_fields). */
struct src {
    const json_t *obj;
    snug_server_field_fn get;
    void *ctx;
};

/* A top-level field, or NULL when absent or null. */
static json_t *top(const struct src *o, const char *k) {
    json_t *v = o->get ? (json_t *)o->get(o->ctx, k) : json_object_get(o->obj, k);
    return json_is_null(v) ? NULL : v;
}

/* Optional number field in [lo, hi]; returns 0 when absent or valid, -1 after bad(). */
static int get_num(const struct src *o, const char *k, double lo, double hi, float *out,
                   struct snug_server_error *e) {
    json_t *v = top(o, k);
    if (!v) return 0;
    if (!json_is_number(v)) return bad(e, k, "'%s' must be a number", k);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return bad(e, k, "'%s' must be in [%g, %g], got %g", k, lo, hi, x);
    *out = (float)x;
    return 0;
}

/* Optional integer field in [lo, hi]. */
static int get_int(const struct src *o, const char *k, long long lo, long long hi, long long *out,
                   bool *present, struct snug_server_error *e) {
    json_t *v = top(o, k);
    if (present) *present = v != NULL;
    if (!v) return 0;
    if (!json_is_integer(v)) return bad(e, k, "'%s' must be an integer", k);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return bad(e, k, "'%s' must be in [%lld, %lld], got %lld", k, lo, hi, x);
    *out = x;
    return 0;
}

static int get_bool(const struct src *o, const char *k, bool *out, struct snug_server_error *e) {
    json_t *v = top(o, k);
    if (!v) return 0;
    if (!json_is_boolean(v)) return bad(e, k, "'%s' must be a boolean", k);
    *out = json_is_true(v);
    return 0;
}

/* Sampling, length, stop and logprob fields shared by both endpoints. */
static int parse_common(struct snug_server_req *r, const struct src *o,
                        struct snug_server_error *e) {
    struct snug_sampler_params *sp = &r->sampler;
    json_t *v;
    if ((v = top(o, "model")) && !json_is_string(v))
        return bad(e, "model", "'model' must be a string");
    r->model = v ? json_string_value(v) : NULL;
    if (get_bool(o, "stream", &r->stream, e)) return -1;
    if ((v = top(o, "stream_options"))) {
        if (!json_is_object(v))
            return bad(e, "stream_options", "'stream_options' must be an object");
        json_t *iu = field(v, "include_usage");
        if (iu && !json_is_boolean(iu))
            return bad(e, "stream_options.include_usage",
                       "'stream_options.include_usage' must be a boolean");
        r->include_usage = json_is_true(iu);
    }
    if (get_bool(o, "return_progress", &r->return_progress, e)) return -1;
    if (get_num(o, "temperature", 0, 100, &sp->temperature, e)) return -1;
    if (get_num(o, "top_p", 0, 1, &sp->top_p, e)) return -1;
    if (get_num(o, "min_p", 0, 1, &sp->min_p, e)) return -1;
    if (get_num(o, "presence_penalty", -2, 2, &sp->presence_penalty, e)) return -1;
    if (get_num(o, "frequency_penalty", -2, 2, &sp->frequency_penalty, e)) return -1;
    if (get_num(o, "repetition_penalty", 1e-3, 100, &sp->repeat_penalty, e)) return -1;
    if (get_num(o, "repeat_penalty", 1e-3, 100, &sp->repeat_penalty, e)) return -1;
    long long x = 0;
    bool has = false;
    if (get_int(o, "top_k", -1, INT32_MAX, &x, &has, e)) return -1;
    if (has) sp->top_k = (int32_t)x;
    if (get_int(o, "seed", INT64_MIN, INT64_MAX, &x, &r->has_seed, e)) return -1;
    if (r->has_seed) sp->seed = (uint64_t)x;
    r->n = 1;
    if (get_int(o, "n", 1, SNUG_REQ_MAX_N, &x, &has, e)) return -1;
    if (has) r->n = (int32_t)x;
    r->max_tokens = 0;
    if (get_int(o, "max_tokens", 0, INT32_MAX, &x, &has, e)) return -1;
    if (has) r->max_tokens = (int32_t)x;
    if (get_int(o, "max_completion_tokens", 0, INT32_MAX, &x, &has, e)) return -1;
    if (has) r->max_tokens = (int32_t)x;
    if ((v = top(o, "stop"))) {
        if (json_is_string(v)) {
            if (json_string_length(v) > SNUG_REQ_MAX_STOP_BYTES)
                return bad(e, "stop", "'stop' is longer than %d bytes", SNUG_REQ_MAX_STOP_BYTES);
            if (json_string_length(v)) r->stop[r->n_stop++] = json_string_value(v);
        } else if (json_is_array(v)) {
            if (json_array_size(v) > SNUG_REQ_MAX_STOP)
                return bad(e, "stop", "'stop' holds at most %d strings, got %zu", SNUG_REQ_MAX_STOP,
                           json_array_size(v));
            size_t i;
            json_t *s;
            json_array_foreach(v, i, s) {
                if (!json_is_string(s)) return bad(e, "stop", "'stop[%zu]' must be a string", i);
                if (json_string_length(s) > SNUG_REQ_MAX_STOP_BYTES)
                    return bad(e, "stop", "'stop[%zu]' is longer than %d bytes", i,
                               SNUG_REQ_MAX_STOP_BYTES);
                if (json_string_length(s)) r->stop[r->n_stop++] = json_string_value(s);
            }
        } else {
            return bad(e, "stop", "'stop' must be a string or an array of strings");
        }
    }
    if ((v = top(o, "grammar"))) {
        if (!json_is_string(v)) return bad(e, "grammar", "'grammar' must be a string (GBNF)");
        r->grammar = json_string_value(v);
        r->grammar_len = json_string_length(v);
    }
    if ((v = top(o, "response_format"))) {
        json_t *t = json_is_object(v) ? field(v, "type") : NULL;
        if (!json_is_string(t))
            return bad(e, "response_format",
                       "'response_format' must be an object with a string 'type'");
        const char *ts = json_string_value(t);
        if (!strcmp(ts, "text")) {
            r->format = SNUG_FORMAT_TEXT;
        } else if (!strcmp(ts, "json_object")) {
            r->format = SNUG_FORMAT_JSON_OBJECT;
        } else if (!strcmp(ts, "json_schema")) {
            json_t *js = field(v, "json_schema");
            if (!json_is_object(js))
                return bad(e, "response_format",
                           "'response_format.json_schema' must be an object with a 'schema'");
            json_t *st = field(js, "strict");
            if (st && !json_is_boolean(st))
                return bad(e, "response_format",
                           "'response_format.json_schema.strict' must be a boolean");
            json_t *sc = field(js, "schema");
            if (sc && !json_is_object(sc) && !json_is_boolean(sc))
                return bad(e, "response_format",
                           "'response_format.json_schema.schema' must be a JSON Schema object");
            r->format = sc ? SNUG_FORMAT_JSON_SCHEMA : SNUG_FORMAT_JSON_OBJECT;
            r->json_schema = sc;
        } else {
            return bad(e, "response_format",
                       "'response_format.type' must be \"text\", \"json_object\" or "
                       "\"json_schema\", got \"%.64s\"",
                       ts);
        }
        if (r->format != SNUG_FORMAT_TEXT && r->grammar)
            return bad(e, "grammar", "give either 'grammar' or a JSON 'response_format', not both");
    }
    if ((v = top(o, "logit_bias"))) {
        if (!json_is_object(v))
            return bad(e, "logit_bias", "'logit_bias' must be an object {\"token id\": bias}");
        if (json_object_size(v) > SNUG_REQ_MAX_LOGIT_BIAS)
            return bad(e, "logit_bias", "'logit_bias' holds at most %d entries",
                       SNUG_REQ_MAX_LOGIT_BIAS);
        const char *k;
        json_t *b;
        json_object_foreach(v, k, b) {
            char *end = NULL;
            long long id = *k >= '0' && *k <= '9' ? strtoll(k, &end, 10) : -1;
            if (id < 0 || id > INT32_MAX || !end || *end)
                return bad(e, "logit_bias", "'logit_bias' key '%.32s' is not a token id", k);
            if (!json_is_number(b) ||
                !(json_number_value(b) >= -100 && json_number_value(b) <= 100))
                return bad(e, "logit_bias",
                           "'logit_bias[\"%.32s\"]' must be a number in [-100, 100]", k);
        }
        r->logit_bias = v;
    }
    if ((v = top(o, "snug_script"))) {
        if (!json_is_string(v)) return bad(e, "snug_script", "'snug_script' must be a string");
        r->script = json_string_value(v);
    }
    return 0;
}

bool snug_server_tool_name_ok(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.';
        if (!ok) return false;
    }
    return true;
}

/* A video part of a chat message (the chat template's "video" key or type): snug has no video
 * input, so these are refused instead of rendered as markers with no frames behind them. Image
 * parts pass: submit.c checks them against the server's vision tower (images.c), and answers a
 * 400 there when it has none. */
static int refuse_video_parts(const json_t *content, size_t i, struct snug_server_error *e) {
    if (!json_is_array(content)) return SNUG_OK;
    size_t k;
    json_t *p;
    json_array_foreach(content, k, p) {
        if (!json_is_object(p)) continue;
        const char *type = json_string_value(json_object_get(p, "type"));
        if (json_object_get(p, "video") ||
            (type && (!strcmp(type, "video") || !strcmp(type, "video_url"))))
            return bad(e, "messages",
                       "'messages[%zu].content[%zu]' is a video part: snug takes images (as "
                       "data: URLs, with --mmproj), not videos",
                       i, k);
    }
    return SNUG_OK;
}

/* Chat-only fields: messages, tools, tool_choice, logprobs/top_logprobs. */
static int parse_chat(struct snug_server_req *r, const struct src *o, struct snug_server_error *e) {
    json_t *v = top(o, "messages");
    if (!v) return bad(e, "messages", "'messages' is required");
    if (!json_is_array(v)) return bad(e, "messages", "'messages' must be an array");
    if (json_array_size(v) == 0) return bad(e, "messages", "'messages' must not be empty");
    size_t i;
    json_t *m;
    json_array_foreach(v, i, m) {
        if (!json_is_object(m)) return bad(e, "messages", "'messages[%zu]' must be an object", i);
        json_t *role = json_object_get(m, "role");
        if (!json_is_string(role))
            return bad(e, "messages", "'messages[%zu].role' must be a string", i);
        int rc = refuse_video_parts(json_object_get(m, "content"), i, e);
        if (rc) return rc;
    }
    r->messages = v;
    if ((v = top(o, "tools"))) {
        if (!json_is_array(v)) return bad(e, "tools", "'tools' must be an array");
        json_array_foreach(v, i, m) {
            json_t *fn = json_is_object(m) ? json_object_get(m, "function") : NULL;
            if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
                return bad(e, "tools",
                           "'tools[%zu]' must be {\"type\": \"function\", "
                           "\"function\": {\"name\": ..., ...}}",
                           i);
            if (!snug_server_tool_name_ok(json_string_value(json_object_get(fn, "name"))))
                return bad(e, "tools",
                           "'tools[%zu].function.name' must be 1 to 64 characters of a-z, A-Z, "
                           "0-9, '_', '-' or '.'",
                           i);
            json_t *params = field(fn, "parameters");
            if (params && !json_is_object(params))
                return bad(e, "tools",
                           "'tools[%zu].function.parameters' must be a JSON schema "
                           "object",
                           i);
            json_t *props = params ? field(params, "properties") : NULL;
            if (props && !json_is_object(props))
                return bad(e, "tools",
                           "'tools[%zu].function.parameters.properties' must be an object", i);
            if (params && field(params, "required") && !json_is_array(field(params, "required")))
                return bad(e, "tools", "'tools[%zu].function.parameters.required' must be an array",
                           i);
            json_t *desc = field(fn, "description");
            if (desc && !json_is_string(desc))
                return bad(e, "tools", "'tools[%zu].function.description' must be a string", i);
        }
        r->tools = v;
    }
    if ((v = top(o, "tool_choice"))) {
        if (json_is_string(v)) {
            const char *s = json_string_value(v);
            if (!strcmp(s, "auto"))
                r->tool_choice = SNUG_TOOL_AUTO;
            else if (!strcmp(s, "none"))
                r->tool_choice = SNUG_TOOL_NONE;
            else if (!strcmp(s, "required"))
                r->tool_choice = SNUG_TOOL_REQUIRED;
            else
                return bad(e, "tool_choice",
                           "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                           "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        } else if (json_is_object(v)) {
            json_t *fn = json_object_get(v, "function");
            json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
            if (!json_is_string(name))
                return bad(e, "tool_choice", "'tool_choice.function.name' must be a string");
            r->tool_choice = SNUG_TOOL_NAMED;
            r->tool_name = json_string_value(name);
            bool found = false;
            json_array_foreach(r->tools, i, m) {
                const char *tn =
                    json_string_value(json_object_get(json_object_get(m, "function"), "name"));
                if (tn && !strcmp(tn, r->tool_name)) found = true;
            }
            if (!found)
                return bad(e, "tool_choice",
                           "'tool_choice' names the function '%s', which is "
                           "not among the request's tools",
                           r->tool_name);
        } else {
            return bad(e, "tool_choice", "'tool_choice' must be a string or an object");
        }
        if (r->tool_choice == SNUG_TOOL_REQUIRED && !r->tools)
            return bad(e, "tool_choice", "'tool_choice' is \"required\" but no tools are given");
    }
    r->parallel_tool_calls = true;
    if (get_bool(o, "parallel_tool_calls", &r->parallel_tool_calls, e)) return -1;
    if (get_bool(o, "logprobs", &r->logprobs, e)) return -1;
    long long x = 0;
    bool has = false;
    if (get_int(o, "top_logprobs", 0, 20, &x, &has, e)) return -1;
    if (has) r->top_logprobs = (int32_t)x;
    if (get_bool(o, "continue_final_message", &r->continue_final, e)) return -1;
    if (get_int(o, "thinking_budget", -1, INT32_MAX, &x, &has, e)) return -1;
    if (has) r->thinking_budget = (int32_t)x, r->has_budget = true;
    if ((v = top(o, "reasoning_effort"))) {
        int32_t eb = -1;
        if (!json_is_string(v) ||
            !snug_server_effort_budget(json_string_value(v), &eb, &r->effort_no_think))
            return bad(e, "reasoning_effort",
                       "'reasoning_effort' must be \"none\", \"minimal\", \"low\", "
                       "\"medium\", \"high\" or \"xhigh\"");
        r->has_effort = true;
        if (!has) r->thinking_budget = eb, r->has_budget = true;
    }
    if ((v = top(o, "chat_template_kwargs")) && !json_is_object(v))
        return bad(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    if (v && field(v, "enable_thinking") && !json_is_boolean(field(v, "enable_thinking")))
        return bad(e, "chat_template_kwargs.enable_thinking",
                   "'chat_template_kwargs.enable_thinking' must be a boolean");
    return 0;
}

/* Completion-only fields: prompt (string, [string] or [ids]), logprobs (an integer here). */
static int parse_completion(struct snug_server_req *r, const struct src *o,
                            struct snug_server_error *e) {
    json_t *v = top(o, "prompt");
    if (!v) return bad(e, "prompt", "'prompt' is required");
    if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)))
        v = json_array_get(v, 0);
    if (json_is_string(v)) {
        r->prompt = json_string_value(v);
        r->prompt_len = json_string_length(v);
    } else if (json_is_array(v) && json_array_size(v) > 0) {
        size_t i;
        json_t *t;
        json_array_foreach(v, i, t) {
            if (!json_is_integer(t) || json_integer_value(t) < 0 ||
                json_integer_value(t) > INT32_MAX)
                return bad(e, "prompt",
                           "'prompt' must be a string, an array of one string or "
                           "an array of token ids ('prompt[%zu]' is neither)",
                           i);
        }
        r->prompt_ids = v;
    } else {
        return bad(e, "prompt",
                   "'prompt' must be a string, an array of one string or a "
                   "non-empty array of token ids");
    }
    bool echo = false;
    if (get_bool(o, "echo", &echo, e)) return -1;
    if (echo) return bad(e, "echo", "'echo': true is not supported (the prompt is not repeated)");
    if ((v = top(o, "suffix")) && (!json_is_string(v) || json_string_length(v) > 0))
        return bad(e, "suffix",
                   "'suffix' is not supported: the served models have no fill-in-the-middle "
                   "format");
    long long x = 0;
    bool has = false;
    if (get_int(o, "logprobs", 0, 20, &x, &has, e)) return -1;
    if (has) {
        r->logprobs = true;
        r->top_logprobs = (int32_t)x;
    }
    return 0;
}

bool snug_server_effort_budget(const char *effort, int32_t *budget, bool *no_think) {
    static const struct {
        const char *name;
        int32_t budget;
        bool off;
    } E[] = {{"none", 0, true},       {"minimal", 0, true}, {"low", 1024, false},
             {"medium", 4096, false}, {"high", -1, false},  {"xhigh", -1, false}};
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++)
        if (!strcmp(effort, E[i].name)) {
            *budget = E[i].budget;
            *no_think = E[i].off;
            return true;
        }
    return false;
}

/* ---- cost before work ------------------------------------------------------------------ */

static size_t skip_ws(const char *b, size_t n, size_t i) {
    while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r')) i++;
    return i;
}

/* The end of the JSON string starting at b[i] == '"' (one past its closing quote). */
static size_t skip_string(const char *b, size_t n, size_t i) {
    for (i++; i < n && b[i] != '"'; i++)
        if (b[i] == '\\') i++;
    return i < n ? i + 1 : n;
}

/* The end of the JSON value starting at b[i] (not validated: the parser does that). */
static size_t skip_value(const char *b, size_t n, size_t i) {
    if (i >= n) return n;
    if (b[i] == '"') return skip_string(b, n, i);
    if (b[i] != '{' && b[i] != '[') {
        while (i < n && !strchr(",}] \t\n\r", b[i])) i++;
        return i;
    }
    size_t depth = 0;
    for (; i < n; i++) {
        if (b[i] == '"') {
            i = skip_string(b, n, i) - 1;
        } else if (b[i] == '{' || b[i] == '[') {
            depth++;
        } else if (b[i] == '}' || b[i] == ']') {
            if (--depth == 0) return i + 1;
        }
    }
    return n;
}

int snug_server_body_precheck(const char *body, size_t len, struct snug_server_error *e) {
    static const char *GRAMMAR_MEMBERS[] = {"response_format", "tools", "text", "output_format",
                                            NULL};
    size_t i = skip_ws(body, len, 0);
    if (i >= len || body[i] != '{') return 0;
    for (i++;;) {
        i = skip_ws(body, len, i);
        if (i >= len || body[i] != '"') return 0; /* '}' or malformed: the parser's turn */
        size_t k0 = i + 1, k1 = skip_string(body, len, i) - 1;
        i = skip_ws(body, len, k1 + 1);
        if (i >= len || body[i] != ':') return 0;
        i = skip_ws(body, len, i + 1);
        size_t v0 = i, v1 = skip_value(body, len, i);
        for (int m = 0; GRAMMAR_MEMBERS[m]; m++) {
            if (strlen(GRAMMAR_MEMBERS[m]) != k1 - k0 ||
                memcmp(body + k0, GRAMMAR_MEMBERS[m], k1 - k0))
                continue;
            struct snug_err err = {0};
            if (snug_json_schema_precheck(body + v0, v1 - v0, GRAMMAR_MEMBERS[m], &err))
                return snug_server_error_set(e, 400, "invalid_request_error", GRAMMAR_MEMBERS[m],
                                             "%s", err.msg);
        }
        i = skip_ws(body, len, v1);
        if (i >= len || body[i] != ',') return 0;
        i++;
    }
}

int snug_server_req_parse(struct snug_server_req *r, enum snug_server_kind kind, const char *body,
                          size_t len, struct snug_server_error *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    if (snug_server_body_precheck(body, len, e)) return -1;
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return snug_server_error_set(e, 400, "invalid_request_error", NULL,
                                     "the request body is not valid JSON: %s (line %d, column %d)",
                                     je.text, je.line, je.column);
    return snug_server_req_parse_json(r, kind, root, e);
}

/* The request's defaults, before any field is read. */
static void req_init(struct snug_server_req *r, enum snug_server_kind kind,
                     struct snug_server_error *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    r->kind = kind;
    r->sampler = snug_sampler_params_default();
    r->think_switch = -1;
}

/* Read every field from o into r (which owns `keep` from here: released on failure). */
static int req_fill(struct snug_server_req *r, const struct src *o, json_t *keep,
                    struct snug_server_error *e) {
    r->root = keep;
    int rc = parse_common(r, o, e);
    if (!rc) rc = r->kind == SNUG_REQ_CHAT ? parse_chat(r, o, e) : parse_completion(r, o, e);
    if (rc) {
        json_decref(keep);
        memset(r, 0, sizeof *r);
        return -1;
    }
    return SNUG_OK;
}

int snug_server_req_parse_json(struct snug_server_req *r, enum snug_server_kind kind, json_t *root,
                               struct snug_server_error *e) {
    req_init(r, kind, e);
    if (!json_is_object(root)) {
        json_decref(root);
        return snug_server_error_set(e, 400, "invalid_request_error", NULL,
                                     "the request body must be a JSON object");
    }
    r->template_src = root;
    struct src o = {.obj = root};
    return req_fill(r, &o, root, e);
}

bool snug_server_field_alias(const json_t *body, const char *key,
                             const struct snug_field_alias *map, size_t n, const json_t **out) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(key, map[i].chat)) {
            *out = json_object_get(body, map[i].body ? map[i].body : map[i].chat);
            return true;
        }
    return false;
}

int snug_server_req_from_fields(struct snug_server_req *r, snug_server_field_fn get, void *ctx,
                                json_t *keep, struct snug_server_error *e) {
    req_init(r, SNUG_REQ_CHAT, e);
    struct src o = {.get = get, .ctx = ctx};
    return req_fill(r, &o, keep, e);
}

struct snug_server_limits snug_server_limits_default(void) {
    return (struct snug_server_limits){.max_messages = 1024,
                                       .max_parts = 256,
                                       .max_tools = 128,
                                       .max_prompt_bytes = (size_t)4 << 20};
}

int snug_server_req_check_limits(const struct snug_server_req *r,
                                 const struct snug_server_limits *lim,
                                 struct snug_server_error *e) {
    size_t n = json_array_size(r->messages);
    if (lim->max_messages && n > lim->max_messages)
        return snug_server_error_set(e, 413, "invalid_request_error", "messages",
                                     "'messages' holds %zu messages; this server takes at most %zu "
                                     "(--max-messages)",
                                     n, lim->max_messages);
    size_t bytes = r->prompt ? r->prompt_len : 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *c = json_object_get(json_array_get(r->messages, i), "content");
        if (json_is_string(c)) bytes += json_string_length(c);
        if (!json_is_array(c)) continue;
        if (lim->max_parts && json_array_size(c) > lim->max_parts)
            return snug_server_error_set(e, 413, "invalid_request_error", "messages",
                                         "'messages[%zu].content' holds %zu parts; this server "
                                         "takes at most %zu (--max-parts)",
                                         i, json_array_size(c), lim->max_parts);
        for (size_t k = 0; k < json_array_size(c); k++) {
            const json_t *t = json_object_get(json_array_get(c, k), "text");
            if (json_is_string(t)) bytes += json_string_length(t);
        }
    }
    size_t nt = json_array_size(r->tools);
    if (lim->max_tools && nt > lim->max_tools)
        return snug_server_error_set(e, 413, "invalid_request_error", "tools",
                                     "'tools' holds %zu tools; this server takes at most %zu "
                                     "(--max-tools)",
                                     nt, lim->max_tools);
    if (lim->max_prompt_bytes && bytes > lim->max_prompt_bytes)
        return snug_server_error_set(e, 413, "invalid_request_error",
                                     r->kind == SNUG_REQ_CHAT ? "messages" : "prompt",
                                     "the prompt text has %zu bytes; this server takes at most "
                                     "%zu (--max-prompt-bytes)",
                                     bytes, lim->max_prompt_bytes);
    return SNUG_OK;
}

int snug_server_tokenize_parse(struct snug_tokenize_req *q, const char *body, size_t len,
                               size_t max_bytes, struct snug_server_error *e) {
    memset(q, 0, sizeof *q);
    memset(e, 0, sizeof *e);
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        return snug_server_error_set(e, 400, "invalid_request_error", NULL,
                                     "the request body is not a JSON object%s%s", root ? "" : ": ",
                                     root ? "" : je.text);
    }
    json_t *content = json_object_get(root, "content");
    json_t *ps = field(root, "parse_special"), *wp = field(root, "with_pieces");
    int rc = 0;
    if (!json_is_string(content))
        rc = bad(e, "content", "'content' must be a string");
    else if (ps && !json_is_boolean(ps))
        rc = bad(e, "parse_special", "'parse_special' must be a boolean");
    else if (wp && !json_is_boolean(wp))
        rc = bad(e, "with_pieces", "'with_pieces' must be a boolean");
    else if (max_bytes && json_string_length(content) > max_bytes)
        rc = snug_server_error_set(e, 413, "invalid_request_error", "content",
                                   "'content' has %zu bytes; this server tokenizes at most %zu "
                                   "(--max-prompt-bytes)",
                                   json_string_length(content), max_bytes);
    if (rc) {
        json_decref(root);
        return rc;
    }
    q->root = root;
    q->content = json_string_value(content);
    q->len = json_string_length(content);
    q->parse_special = !json_is_false(ps);
    q->with_pieces = json_is_true(wp);
    return SNUG_OK;
}

int snug_server_detokenize_parse(json_t **root, const json_t **tokens, const char *body, size_t len,
                                 int32_t n_vocab, struct snug_server_error *e) {
    memset(e, 0, sizeof *e);
    *tokens = NULL;
    *root = json_loadb(body, len, 0, NULL);
    json_t *toks = json_object_get(*root, "tokens");
    int rc = 0;
    if (!json_is_array(toks)) {
        rc = bad(e, "tokens", "the body must be a JSON object with 'tokens': an array of ids");
    } else {
        size_t i;
        json_t *t;
        json_array_foreach(toks, i, t) {
            if (!json_is_integer(t) || json_integer_value(t) < 0 ||
                json_integer_value(t) >= n_vocab) {
                rc = bad(e, "tokens", "'tokens[%zu]' must be a token id in [0, %d)", i, n_vocab);
                break;
            }
        }
    }
    if (rc) {
        json_decref(*root);
        *root = NULL;
        return rc;
    }
    *tokens = toks;
    return SNUG_OK;
}

void snug_server_req_free(struct snug_server_req *r) {
    if (!r) return;
    json_decref(r->root);
    memset(r, 0, sizeof *r);
}
