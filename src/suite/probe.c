/* probe.c — what the suites ask a server besides completions: the served model, the context
 * limit (and where it came from), token counts by the server's own /tokenize, speculative-
 * decoding counters and memory readings from /metrics and /health, an alive check; plus
 * request bodies, response views, result rows and salted haystacks.
 * Invariant: a value the server did not report is reported as absent (-1 / NULL / a reason),
 * never guessed into a pass. Read next: verify.c.
 */
#include "suite/suite.h"

#include "core/core.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== requests and responses ================================================================= */

json_t *snug_suite_chat_body(const struct snug_suite_client *c, const char *system,
                             const char *user, int max_tokens, double temperature, int thinking) {
    json_t *msgs = json_array();
    if (system)
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", system));
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", user));
    json_t *b = json_pack("{s:o,s:i,s:f}", "messages", msgs, "max_tokens", max_tokens,
                          "temperature", temperature);
    if (!b) return NULL;
    if (c->model[0]) json_object_set_new(b, "model", json_string(c->model));
    if (thinking >= 0)
        json_object_set_new(b, "chat_template_kwargs",
                            json_pack("{s:b}", "enable_thinking", thinking));
    return b;
}

bool snug_suite_msg_of(const struct snug_suite_http *h, struct snug_suite_msg *m) {
    memset(m, 0, sizeof *m);
    if (h->status != 200 || !json_is_object(h->json)) return false;
    json_t *ch = json_array_get(json_object_get(h->json, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    if (!json_is_object(msg)) return false;
    m->content = json_string_value(json_object_get(msg, "content"));
    m->reasoning = json_string_value(json_object_get(msg, "reasoning_content"));
    if (!m->reasoning) m->reasoning = json_string_value(json_object_get(msg, "reasoning"));
    m->finish_reason = json_string_value(json_object_get(ch, "finish_reason"));
    json_t *tc = json_object_get(msg, "tool_calls");
    m->tool_calls = json_is_array(tc) ? tc : NULL;
    return true;
}

const char *snug_suite_describe(long status, const char *error, const char *body, char *buf,
                                size_t n) {
    if (status == 0) {
        snprintf(buf, n, "no HTTP answer: %s", error && *error ? error : "connection failed");
        return buf;
    }
    json_t *j = body ? json_loads(body, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (!msg) msg = json_string_value(e);
    if (msg)
        snprintf(buf, n, "HTTP %ld: %s", status, msg);
    else
        snprintf(buf, n, "HTTP %ld: %.160s", status, body ? body : "");
    json_decref(j);
    return buf;
}

json_t *snug_ops_check(const char *name, const char *status, const char *fmt, ...) {
    char detail[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    /* %.Ns truncation (or a server's bytes) may split a UTF-8 sequence: jansson wants valid
     * UTF-8, so replace each byte of a broken sequence with '?' */
    unsigned char *u = (unsigned char *)detail;
    for (size_t i = 0; u[i];) {
        int n = u[i] < 0x80             ? 1
                : (u[i] & 0xE0) == 0xC0 ? 2
                : (u[i] & 0xF0) == 0xE0 ? 3
                : (u[i] & 0xF8) == 0xF0 ? 4
                                        : 0;
        bool ok = n > 0;
        for (int k = 1; ok && k < n; k++) ok = (u[i + k] & 0xC0) == 0x80;
        if (ok && n == 2 && u[i] < 0xC2) ok = false;
        if (!ok) {
            u[i++] = '?';
            continue;
        }
        i += (size_t)n;
    }
    json_t *r = json_pack("{s:s,s:s,s:s}", "name", name, "status", status, "detail", detail);
    return r ? r : json_pack("{s:s,s:s,s:s}", "name", name, "status", status, "detail", "?");
}

int snug_ops_count_failed(const json_t *checks) {
    int n = 0;
    size_t i;
    json_t *c;
    json_array_foreach(checks, i, c) {
        const char *s = json_string_value(json_object_get(c, "status"));
        if (s && !strcmp(s, "fail")) n++;
    }
    return n;
}

/* ==== server facts =========================================================================== */

void snug_suite_discover_model(struct snug_suite_client *c) {
    if (c->model[0]) return;
    struct snug_suite_http h;
    if (snug_suite_get(c, "/v1/models", 5, &h, NULL) != SNUG_OK) return;
    const char *id = json_string_value(
        json_object_get(json_array_get(json_object_get(h.json, "data"), 0), "id"));
    if (h.status == 200 && id && strlen(id) < sizeof c->model) strcpy(c->model, id);
    snug_suite_http_free(&h);
}

/* A positive integer member, or 0. */
static long pos_int(const json_t *v) {
    if (json_is_integer(v) && json_integer_value(v) > 0) return (long)json_integer_value(v);
    return 0;
}

int snug_suite_context_limit(const struct snug_suite_client *c, long *n_ctx, char *source,
                             size_t source_n, struct snug_err *err) {
    struct snug_suite_http h;
    long v = 0;
    if (snug_suite_get(c, "/health", 5, &h, err)) return err ? err->status : SNUG_ERR_NOMEM;
    if ((v = pos_int(json_object_get(json_object_get(h.json, "plan"), "n_ctx"))))
        snprintf(source, source_n, "/health plan.n_ctx");
    snug_suite_http_free(&h);
    if (!v) {
        if (snug_suite_get(c, "/v1/models", 5, &h, err)) return err ? err->status : SNUG_ERR_NOMEM;
        size_t i;
        json_t *m;
        json_array_foreach(json_object_get(h.json, "data"), i, m) {
            const char *id = json_string_value(json_object_get(m, "id"));
            if (c->model[0] && id && strcmp(id, c->model)) continue;
            if ((v = pos_int(json_object_get(json_object_get(m, "meta"), "n_ctx")))) {
                snprintf(source, source_n, "/v1/models meta.n_ctx");
                break;
            }
            if ((v = pos_int(json_object_get(m, "max_model_len")))) {
                snprintf(source, source_n, "/v1/models max_model_len");
                break;
            }
        }
        snug_suite_http_free(&h);
    }
    if (!v) {
        if (snug_suite_get(c, "/props", 5, &h, err)) return err ? err->status : SNUG_ERR_NOMEM;
        v = pos_int(
            json_object_get(json_object_get(h.json, "default_generation_settings"), "n_ctx"));
        if (v) snprintf(source, source_n, "/props default_generation_settings.n_ctx");
        snug_suite_http_free(&h);
    }
    if (!v)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "%s reports no context limit (looked at /health plan.n_ctx, "
                            "/v1/models meta.n_ctx and max_model_len, /props); pass --ctx N",
                            c->base);
    *n_ctx = v;
    return SNUG_OK;
}

long snug_suite_count_tokens(const struct snug_suite_client *c, const char *text) {
    /* snug and llama.cpp: {"content"} -> {"tokens": [...]}; vLLM: {"prompt"} -> {"count"} */
    for (int form = 0; form < 2; form++) {
        json_t *b =
            form == 0 ? json_pack("{s:s}", "content", text) : json_pack("{s:s}", "prompt", text);
        if (!b) return -1;
        if (form == 1 && c->model[0]) json_object_set_new(b, "model", json_string(c->model));
        struct snug_suite_http h;
        int rc = snug_suite_post(c, "/tokenize", b, 120, &h, NULL);
        json_decref(b);
        if (rc) return -1;
        long n = -1;
        if (h.status == 200) {
            json_t *t = json_object_get(h.json, "tokens");
            if (json_is_array(t))
                n = (long)json_array_size(t);
            else if (json_is_integer(json_object_get(h.json, "count")))
                n = (long)json_integer_value(json_object_get(h.json, "count"));
        }
        long st = h.status;
        snug_suite_http_free(&h);
        if (n >= 0) return n;
        if (st == 404 || st == 0) return -1; /* no endpoint: the other form will not help */
    }
    return -1;
}

/* The value of a Prometheus sample line "name{labels} value" summed over label sets. */
static bool prom_sum(const char *text, const char *name, double *out) {
    size_t nl = strlen(name);
    bool found = false;
    double sum = 0;
    for (const char *p = text; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len > nl && !strncmp(p, name, nl) && (p[nl] == ' ' || p[nl] == '{')) {
            const char *v = p + nl;
            if (*v == '{') {
                const char *cb = memchr(v, '}', len - nl);
                v = cb ? cb + 1 : p + len;
            }
            char *end;
            double x = strtod(v, &end);
            if (end != v && isfinite(x)) {
                sum += x;
                found = true;
            }
        }
        p = e ? e + 1 : NULL;
    }
    if (found) *out = sum;
    return found;
}

int snug_suite_spec_counters(const struct snug_suite_client *c, double *accepted, double *drafts,
                             char *reason, size_t reason_n) {
    /* pairs of (accepted draft tokens, drafting steps): vLLM's and the names snug uses */
    static const char *const NAMES[][2] = {
        {"vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total"},
        {"snug_spec_accepted_tokens_total", "snug_spec_drafts_total"},
        {"llamacpp:n_draft_accepted_total", "llamacpp:n_draft_steps_total"},
    };
    struct snug_suite_http h;
    if (snug_suite_get(c, "/metrics", 5, &h, NULL)) return -1;
    int r = 0;
    if (h.status != 200) {
        snprintf(reason, reason_n, "GET /metrics answered HTTP %ld", h.status);
        r = -1;
    } else {
        for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0] && !r; i++)
            if (prom_sum(h.body, NAMES[i][0], accepted) && prom_sum(h.body, NAMES[i][1], drafts))
                r = 1;
        if (!r)
            snprintf(reason, reason_n,
                     "/metrics has no speculative-decoding counters: the server reports no "
                     "speculation");
    }
    snug_suite_http_free(&h);
    return r;
}

json_t *snug_suite_memory(const struct snug_suite_client *c) {
    json_t *o = json_object();
    struct snug_suite_http h;
    if (!o) return NULL;
    if (!snug_suite_get(c, "/health", 5, &h, NULL)) {
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(h.json, "memory"), k, v) {
            if (json_is_number(v)) {
                char key[96];
                snprintf(key, sizeof key, "health.%s", k);
                json_object_set_new(o, key, json_real(json_number_value(v)));
            }
        }
        snug_suite_http_free(&h);
    }
    static const char *const METRICS[] = {
        "snug_resident_memory_bytes",    "snug_kv_tokens_used",       "snug_kv_usage_ratio",
        "process_resident_memory_bytes", "vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc",
        "llamacpp:kv_cache_usage_ratio", "llamacpp:kv_cache_tokens",
    };
    if (!snug_suite_get(c, "/metrics", 5, &h, NULL)) {
        if (h.status == 200)
            for (size_t i = 0; i < sizeof METRICS / sizeof METRICS[0]; i++) {
                double x;
                if (prom_sum(h.body, METRICS[i], &x))
                    json_object_set_new(o, METRICS[i], json_real(x));
            }
        snug_suite_http_free(&h);
    }
    if (!json_object_size(o)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

bool snug_suite_alive(const struct snug_suite_client *c) {
    struct snug_suite_http h;
    if (snug_suite_get(c, "/health", 5, &h, NULL)) return false;
    long st = h.status;
    snug_suite_http_free(&h);
    if (st == 404) {
        if (snug_suite_get(c, "/v1/models", 5, &h, NULL)) return false;
        st = h.status;
        snug_suite_http_free(&h);
    }
    return st == 200;
}

/* ==== haystacks ============================================================================== */

/* Filler: plain prose about unrelated chores, cycled (our own text). */
static const char *const FILLER[] = {
    "The harbour office opens at seven, when the first ferry unloads crates of apples, rope and "
    "paint for the boatyard on the north pier. ",
    "A clerk records each delivery in a ledger with a green cover, then walks the receipts to "
    "the post office before the noon bell. ",
    "In the afternoon the wind turns, gulls settle on the breakwater, and the fishermen mend "
    "nets while they argue about the weather. ",
    "Evening brings the lamplighter, who climbs the same twelve posts in the same order and "
    "counts them aloud so that he never skips one. ",
    "On market days the square fills with carts of cabbages, cheese wheels, wool and copper "
    "pans, and the baker sells out by ten. ",
};
#define N_FILLER (sizeof FILLER / sizeof FILLER[0])

/* Build salt + ~n_chars of filler (+ middle at the midpoint) into b. */
static void build_haystack(struct snug_sbuf *b, size_t n_chars, const char *middle,
                           unsigned long long salt) {
    snug_sbuf_printf(b, "Session %016llx. Notes follow.\n", salt);
    size_t start = b->len, mid_at = n_chars / 2;
    bool placed = middle == NULL;
    for (size_t i = 0; b->len - start < n_chars && !b->oom; i++) {
        if (!placed && b->len - start >= mid_at) {
            snug_sbuf_printf(b, "\n%s\n", middle);
            placed = true;
        }
        const char *f = FILLER[(i + salt) % N_FILLER];
        size_t room = n_chars - (b->len - start), fl = strlen(f);
        snug_sbuf_append(b, f, fl < room ? fl : room);
    }
    if (!placed) snug_sbuf_printf(b, "\n%s\n", middle);
}

char *snug_ops_haystack(const struct snug_suite_client *c, long n_tokens, const char *middle,
                        long *measured) {
    *measured = -1;
    if (n_tokens < 16) n_tokens = 16;
    unsigned long long salt = snug_suite_random();
    /* characters per token: measured on a sample when /tokenize exists */
    double cpt = 4.0;
    struct snug_sbuf b = {0};
    build_haystack(&b, 4000, NULL, salt);
    long t = b.oom ? -1 : snug_suite_count_tokens(c, b.data);
    if (t > 0) cpt = (double)b.len / (double)t;
    snug_sbuf_free(&b);
    size_t chars = (size_t)(n_tokens * cpt);
    for (int attempt = 0; attempt < 3; attempt++) {
        build_haystack(&b, chars, middle, salt);
        if (b.oom) {
            snug_sbuf_free(&b);
            return NULL;
        }
        if (t <= 0) return b.data; /* no /tokenize: the estimate stands */
        long got = snug_suite_count_tokens(c, b.data);
        *measured = got;
        if (got <= 0 || labs(got - n_tokens) <= n_tokens / 50 + 8 || attempt == 2) break;
        chars = (size_t)((double)chars * (double)n_tokens / (double)got);
        snug_sbuf_free(&b);
    }
    char *p = b.data;
    return p;
}
