/* client.c — the ops suite's HTTP side: buffered GET/POST and a streamed chat completion read
 * as Server-Sent Events (libcurl), plus the helpers every suite shares (request bodies, views
 * into responses, context limit, /tokenize counts, /metrics counters, memory readings, salted
 * haystacks). Invariant: a stream's record holds only what arrived — chunks are counted only
 * when their delta text is non-empty, [DONE] only when the exact line came.
 * Read next: verify.c.
 */
#include "suite/suite.h"

#include "core/core.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RAW_CAP (64u << 10)

unsigned long long snug_suite_random(void) {
    unsigned long long x = 0;
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, &x, sizeof x);
        close(fd);
        if (n == (ssize_t)sizeof x) return x;
    }
    static unsigned long long state;
    state += (unsigned long long)(snug_time_s() * 1e9) ^ ((unsigned long long)getpid() << 32);
    x = state + 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* ==== client ================================================================================= */

int snug_suite_client_init(struct snug_suite_client *c, const char *url, const char *model,
                           const char *api_key, struct snug_err *err) {
    memset(c, 0, sizeof *c);
    if (!url) url = "http://127.0.0.1:8080";
    size_t n = strlen(url);
    if (n == 0 || n >= sizeof c->base)
        return snug_err_set(err, SNUG_ERR_INVALID, "--url '%s' is empty or too long", url);
    if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8))
        return snug_err_set(err, SNUG_ERR_INVALID, "--url '%s' must start with http:// or https://",
                            url);
    memcpy(c->base, url, n + 1);
    while (n > 0 && c->base[n - 1] == '/') c->base[--n] = 0;
    if (n >= 3 && !strcmp(c->base + n - 3, "/v1")) c->base[n -= 3] = 0;
    while (n > 0 && c->base[n - 1] == '/') c->base[--n] = 0;
    if (model && strlen(model) < sizeof c->model) strcpy(c->model, model);
    if (api_key && strlen(api_key) >= sizeof c->api_key)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "--api-key is %zu bytes; the client takes at most %zu", strlen(api_key),
                            sizeof c->api_key - 1);
    if (api_key && strpbrk(api_key, "\r\n"))
        return snug_err_set(err, SNUG_ERR_INVALID, "--api-key must not contain a line break");
    if (api_key) strcpy(c->api_key, api_key);
    c->timeout_s = 600;
    static bool global_done;
    if (!global_done) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
            return snug_err_set(err, SNUG_ERR_INTERNAL, "libcurl failed to initialise");
        global_done = true;
    }
    return SNUG_OK;
}

struct xfer {
    struct snug_sbuf body;
    struct snug_suite_stream *st; /* streaming: SSE state */
    struct snug_sbuf line;
    struct snug_sbuf content, reasoning; /* streaming: assembled deltas */
    double t0;
};

static void sse_line(struct xfer *x, char *line, size_t len);

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *user) {
    struct xfer *x = user;
    size_t n = size * nmemb;
    if (!x->st) {
        snug_sbuf_append(&x->body, ptr, n);
        return x->body.oom ? 0 : n;
    }
    if (x->body.len < RAW_CAP) snug_sbuf_append(&x->body, ptr, n);
    for (size_t i = 0; i < n; i++) {
        if (ptr[i] == '\n') {
            size_t l = x->line.len;
            if (l && x->line.data[l - 1] == '\r') l--;
            sse_line(x, x->line.data ? x->line.data : (char *)"", l);
            x->line.len = 0;
        } else {
            snug_sbuf_append(&x->line, ptr + i, 1);
        }
    }
    return x->line.oom || x->body.oom ? 0 : n;
}

/* A curl easy handle for base+path with the common options. */
static CURL *easy(const struct snug_suite_client *c, const char *path, double timeout_s,
                  struct curl_slist **hdrs, struct xfer *x) {
    CURL *h = curl_easy_init();
    if (!h) return NULL;
    char url[1024];
    snprintf(url, sizeof url, "%s%s", c->base, path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    *hdrs = curl_slist_append(*hdrs, "Expect:");
    if (c->api_key[0]) {
        char a[sizeof c->api_key + 32];
        snprintf(a, sizeof a, "Authorization: Bearer %s", c->api_key);
        *hdrs = curl_slist_append(*hdrs, a);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdrs);
    return h;
}

/* Run one exchange; fills status / error / wall. */
static void perform(CURL *h, long *status, char *error, size_t error_n, double *wall, double t0) {
    CURLcode rc = curl_easy_perform(h);
    *wall = snug_time_s() - t0;
    *status = 0;
    if (rc != CURLE_OK) {
        snprintf(error, error_n, "%s", curl_easy_strerror(rc));
        /* a partial answer still has a status worth reporting */
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
        if (rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_COULDNT_CONNECT) *status = 0;
        return;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
}

static int exchange(const struct snug_suite_client *c, const char *method, const char *path,
                    const json_t *body, double timeout_s, struct snug_suite_http *out,
                    struct snug_err *err) {
    memset(out, 0, sizeof *out);
    struct xfer x = {0};
    struct curl_slist *hdrs = NULL;
    CURL *h = easy(c, path, timeout_s, &hdrs, &x);
    if (!h) return snug_err_set(err, SNUG_ERR_NOMEM, "libcurl: cannot create a handle");
    char *payload = NULL;
    if (!strcmp(method, "POST")) {
        json_t *empty = body ? NULL : json_object();
        payload = json_dumps(body ? body : empty, JSON_COMPACT);
        json_decref(empty);
        if (!payload) {
            curl_easy_cleanup(h);
            curl_slist_free_all(hdrs);
            return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory serialising a request");
        }
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload);
    }
    perform(h, &out->status, out->error, sizeof out->error, &out->wall_s, x.t0 = snug_time_s());
    curl_easy_cleanup(h);
    curl_slist_free_all(hdrs);
    free(payload);
    if (x.body.oom) {
        snug_sbuf_free(&x.body);
        return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory reading a response");
    }
    out->body = snug_sbuf_take(&x.body, &out->len);
    out->json = json_loadb(out->body, out->len, JSON_ALLOW_NUL, NULL);
    return SNUG_OK;
}

int snug_suite_get(const struct snug_suite_client *c, const char *path, double timeout_s,
                   struct snug_suite_http *out, struct snug_err *err) {
    return exchange(c, "GET", path, NULL, timeout_s, out, err);
}

int snug_suite_post(const struct snug_suite_client *c, const char *path, const json_t *body,
                    double timeout_s, struct snug_suite_http *out, struct snug_err *err) {
    return exchange(c, "POST", path, body, timeout_s, out, err);
}

void snug_suite_http_free(struct snug_suite_http *h) {
    if (!h) return;
    snug_free(h->body);
    json_decref(h->json);
    memset(h, 0, sizeof *h);
}

/* ==== streaming ============================================================================== */

/* Append s to the string member `key` of object o. */
static void json_append(json_t *o, const char *key, const char *s) {
    const char *old = json_string_value(json_object_get(o, key));
    size_t a = old ? strlen(old) : 0, b = strlen(s);
    char *n = malloc(a + b + 1);
    if (!n) return;
    if (a) memcpy(n, old, a);
    memcpy(n + a, s, b + 1);
    json_object_set_new(o, key, json_string(n));
    free(n);
}

/* One SSE line: "data: {...}" or "data: [DONE]"; comments and other fields are ignored. */
static void sse_line(struct xfer *x, char *line, size_t len) {
    struct snug_suite_stream *st = x->st;
    if (len < 5 || memcmp(line, "data:", 5)) return;
    const char *p = line + 5;
    size_t n = len - 5;
    if (n && *p == ' ') p++, n--;
    if (n == 6 && !memcmp(p, "[DONE]", 6)) {
        st->done = true;
        return;
    }
    json_t *ev = json_loadb(p, n, JSON_ALLOW_NUL, NULL);
    if (!json_is_object(ev)) {
        st->n_bad_events++;
        json_decref(ev);
        return;
    }
    st->n_events++;
    double t = snug_time_s() - x->t0;
    json_t *e = json_object_get(ev, "error");
    if (e && !json_is_null(e) && !st->error_event) st->error_event = json_incref(ev);
    json_t *u = json_object_get(ev, "usage");
    if (json_is_object(u)) {
        json_decref(st->usage);
        st->usage = json_incref(u);
    }
    json_t *tm = json_object_get(ev, "timings");
    if (json_is_object(tm)) {
        json_decref(st->timings);
        st->timings = json_incref(tm);
    }
    json_t *ch = json_array_get(json_object_get(ev, "choices"), 0);
    json_t *d = json_object_get(ch, "delta");
    bool got = false;
    if (json_is_object(d)) {
        const char *ct = json_string_value(json_object_get(d, "content"));
        if (ct && *ct) {
            st->n_content_chunks++;
            snug_sbuf_puts(&x->content, ct);
            got = true;
        }
        const char *rs = json_string_value(json_object_get(d, "reasoning_content"));
        if (!rs) rs = json_string_value(json_object_get(d, "reasoning"));
        if (rs && *rs) {
            st->n_reasoning_chunks++;
            snug_sbuf_puts(&x->reasoning, rs);
            got = true;
        }
        json_t *tcs = json_object_get(d, "tool_calls");
        size_t i;
        json_t *tc;
        json_array_foreach(tcs, i, tc) {
            json_int_t idx = json_is_integer(json_object_get(tc, "index"))
                                 ? json_integer_value(json_object_get(tc, "index"))
                                 : (json_int_t)i;
            if (idx < 0 || idx > 64) continue;
            while ((json_int_t)json_array_size(st->tool_calls) <= idx)
                if (json_array_append_new(st->tool_calls,
                                          json_pack("{s:s,s:s}", "name", "", "arguments", "")))
                    break; /* out of memory (or no array): the call is not recorded */
            json_t *slot = json_array_get(st->tool_calls, (size_t)idx);
            if (!slot) continue;
            json_t *fn = json_object_get(tc, "function");
            const char *nm = json_string_value(json_object_get(fn, "name"));
            const char *ar = json_string_value(json_object_get(fn, "arguments"));
            if (nm && *nm) json_append(slot, "name", nm);
            if (ar && *ar) json_append(slot, "arguments", ar);
            if ((nm && *nm) || (ar && *ar)) {
                st->n_tool_chunks++;
                got = true;
            }
        }
    }
    if (got && st->t_first < 0) st->t_first = t;
    const char *fr = json_string_value(json_object_get(ch, "finish_reason"));
    if (fr) {
        snprintf(st->finish_reason, sizeof st->finish_reason, "%s", fr);
        if (st->t_finish < 0) st->t_finish = t;
    }
    json_decref(ev);
}

int snug_suite_stream_chat(const struct snug_suite_client *c, const json_t *body, double timeout_s,
                           struct snug_suite_stream *out, struct snug_err *err) {
    memset(out, 0, sizeof *out);
    out->t_first = out->t_finish = -1;
    out->tool_calls = json_array();
    struct xfer x = {.st = out};
    struct curl_slist *hdrs = NULL;
    CURL *h = easy(c, "/v1/chat/completions", timeout_s, &hdrs, &x);
    char *payload = json_dumps(body, JSON_COMPACT);
    if (!h || !payload || !out->tool_calls) {
        if (h) curl_easy_cleanup(h);
        curl_slist_free_all(hdrs);
        free(payload);
        json_decref(out->tool_calls);
        out->tool_calls = NULL;
        return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory starting a stream");
    }
    if (!json_is_object(body) || !json_is_true(json_object_get(body, "stream"))) {
        curl_easy_cleanup(h);
        curl_slist_free_all(hdrs);
        free(payload);
        json_decref(out->tool_calls);
        out->tool_calls = NULL;
        return snug_err_set(err, SNUG_ERR_INVALID, "a streamed request must set \"stream\": true");
    }
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload);
    perform(h, &out->status, out->error, sizeof out->error, &out->wall_s, x.t0 = snug_time_s());
    curl_easy_cleanup(h);
    curl_slist_free_all(hdrs);
    free(payload);
    if (x.line.len) sse_line(&x, x.line.data, x.line.len); /* a last line without "\n" */
    snug_sbuf_free(&x.line);
    bool oom = x.body.oom || x.content.oom || x.reasoning.oom;
    out->raw = snug_sbuf_take(&x.body, &out->raw_len);
    out->content = snug_sbuf_take(&x.content, &out->content_len);
    out->reasoning = snug_sbuf_take(&x.reasoning, &out->reasoning_len);
    if (oom) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory reading a stream");
    return SNUG_OK;
}

int snug_suite_sse_parse(const char *body, size_t n, size_t chunk, struct snug_suite_stream *out,
                         struct snug_err *err) {
    memset(out, 0, sizeof *out);
    out->t_first = out->t_finish = -1;
    out->status = 200;
    out->tool_calls = json_array();
    if (!out->tool_calls) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
    struct xfer x = {.st = out, .t0 = snug_time_s()};
    if (!chunk) chunk = 1;
    for (size_t at = 0; at < n; at += chunk)
        on_write((char *)body + at, 1, n - at < chunk ? n - at : chunk, &x);
    if (x.line.len) sse_line(&x, x.line.data, x.line.len);
    snug_sbuf_free(&x.line);
    bool oom = x.body.oom || x.content.oom || x.reasoning.oom;
    out->raw = snug_sbuf_take(&x.body, &out->raw_len);
    out->content = snug_sbuf_take(&x.content, &out->content_len);
    out->reasoning = snug_sbuf_take(&x.reasoning, &out->reasoning_len);
    if (oom) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory reading a stream");
    return SNUG_OK;
}

void snug_suite_stream_free(struct snug_suite_stream *s) {
    if (!s) return;
    snug_free(s->raw);
    snug_free(s->content);
    snug_free(s->reasoning);
    json_decref(s->tool_calls);
    json_decref(s->usage);
    json_decref(s->timings);
    json_decref(s->error_event);
    memset(s, 0, sizeof *s);
}
