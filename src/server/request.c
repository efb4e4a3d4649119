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

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int snug_server_error_set(struct snug_server_error *e, int http_status, const char *type,
                          const char *param, const char *fmt, ...) {
    e->http_status = http_status;
    e->type = type;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
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
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* The field, or NULL when absent or null. */
static json_t *field(const json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_null(v) ? NULL : v;
}

/* Optional number field in [lo, hi]; returns 0 when absent or valid, -1 after bad(). */
static int get_num(const json_t *o, const char *k, double lo, double hi, float *out,
                   struct snug_server_error *e) {
    json_t *v = field(o, k);
    if (!v) return 0;
    if (!json_is_number(v)) return bad(e, k, "'%s' must be a number", k);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return bad(e, k, "'%s' must be in [%g, %g], got %g", k, lo, hi, x);
    *out = (float)x;
    return 0;
}

/* Optional integer field in [lo, hi]. */
static int get_int(const json_t *o, const char *k, long long lo, long long hi, long long *out,
                   bool *present, struct snug_server_error *e) {
    json_t *v = field(o, k);
    if (present) *present = v != NULL;
    if (!v) return 0;
    if (!json_is_integer(v)) return bad(e, k, "'%s' must be an integer", k);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return bad(e, k, "'%s' must be in [%lld, %lld], got %lld", k, lo, hi, x);
    *out = x;
    return 0;
}

static int get_bool(const json_t *o, const char *k, bool *out, struct snug_server_error *e) {
    json_t *v = field(o, k);
    if (!v) return 0;
    if (!json_is_boolean(v)) return bad(e, k, "'%s' must be a boolean", k);
    *out = json_is_true(v);
    return 0;
}

/* Sampling, length, stop and logprob fields shared by both endpoints. */
static int parse_common(struct snug_server_req *r, const json_t *o, struct snug_server_error *e) {
    struct snug_sampler_params *sp = &r->sampler;
    json_t *v;
    if ((v = field(o, "model")) && !json_is_string(v))
        return bad(e, "model", "'model' must be a string");
    r->model = v ? json_string_value(v) : NULL;
    if (get_bool(o, "stream", &r->stream, e)) return -1;
    if ((v = field(o, "stream_options"))) {
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
    if (get_int(o, "n", INT64_MIN, INT64_MAX, &x, &has, e)) return -1;
    if (has && x != 1) return bad(e, "n", "only n = 1 is supported, got %lld", x);
    r->max_tokens = 0;
    if (get_int(o, "max_tokens", 0, INT32_MAX, &x, &has, e)) return -1;
    if (has) r->max_tokens = (int32_t)x;
    if (get_int(o, "max_completion_tokens", 0, INT32_MAX, &x, &has, e)) return -1;
    if (has) r->max_tokens = (int32_t)x;
    if ((v = field(o, "stop"))) {
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
    if ((v = field(o, "snug_script"))) {
        if (!json_is_string(v)) return bad(e, "snug_script", "'snug_script' must be a string");
        r->script = json_string_value(v);
    }
    return 0;
}

/* Chat-only fields: messages, tools, tool_choice, logprobs/top_logprobs. */
static int parse_chat(struct snug_server_req *r, const json_t *o, struct snug_server_error *e) {
    json_t *v = field(o, "messages");
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
    }
    r->messages = v;
    if ((v = field(o, "tools"))) {
        if (!json_is_array(v)) return bad(e, "tools", "'tools' must be an array");
        json_array_foreach(v, i, m) {
            json_t *fn = json_is_object(m) ? json_object_get(m, "function") : NULL;
            if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
                return bad(e, "tools",
                           "'tools[%zu]' must be {\"type\": \"function\", "
                           "\"function\": {\"name\": ..., ...}}",
                           i);
        }
        r->tools = v;
    }
    if ((v = field(o, "tool_choice"))) {
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
    if (get_bool(o, "logprobs", &r->logprobs, e)) return -1;
    long long x = 0;
    bool has = false;
    if (get_int(o, "top_logprobs", 0, 20, &x, &has, e)) return -1;
    if (has) r->top_logprobs = (int32_t)x;
    if ((v = field(o, "chat_template_kwargs")) && !json_is_object(v))
        return bad(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    if (v && field(v, "enable_thinking") && !json_is_boolean(field(v, "enable_thinking")))
        return bad(e, "chat_template_kwargs.enable_thinking",
                   "'chat_template_kwargs.enable_thinking' must be a boolean");
    return 0;
}

/* Completion-only fields: prompt (string, [string] or [ids]), logprobs (an integer here). */
static int parse_completion(struct snug_server_req *r, const json_t *o,
                            struct snug_server_error *e) {
    json_t *v = field(o, "prompt");
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
    long long x = 0;
    bool has = false;
    if (get_int(o, "logprobs", 0, 20, &x, &has, e)) return -1;
    if (has) {
        r->logprobs = true;
        r->top_logprobs = (int32_t)x;
    }
    return 0;
}

int snug_server_req_parse(struct snug_server_req *r, enum snug_server_kind kind, const char *body,
                          size_t len, struct snug_server_error *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    r->kind = kind;
    r->sampler = snug_sampler_params_default();
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return snug_server_error_set(e, 400, "invalid_request_error", NULL,
                                     "the request body is not valid JSON: %s (line %d, column %d)",
                                     je.text, je.line, je.column);
    if (!json_is_object(root)) {
        json_decref(root);
        return snug_server_error_set(e, 400, "invalid_request_error", NULL,
                                     "the request body must be a JSON object");
    }
    r->root = root;
    int rc = parse_common(r, root, e);
    if (!rc) rc = kind == SNUG_REQ_CHAT ? parse_chat(r, root, e) : parse_completion(r, root, e);
    if (rc) {
        json_decref(root);
        memset(r, 0, sizeof *r);
        return -1;
    }
    return SNUG_OK;
}

void snug_server_req_free(struct snug_server_req *r) {
    if (!r) return;
    json_decref(r->root);
    memset(r, 0, sizeof *r);
}
