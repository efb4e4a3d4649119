/* http_api.c — the HTTP pieces the agent-client APIs added around http.c: CORS (--cors: the
 * allow-origin header on every answer, the OPTIONS preflight), the access log (one line per
 * request on stderr: method, route, status, token counts, time; never a header, so never the API
 * key), the model's names (--alias, --any-model; GET /v1/models and /v1/models/{id}), an error
 * answer in a front end's shape (its formatter's error_body, fmt.h) and Anthropic's error types.
 * Owns: the CORS origin (set once at boot) and each connection thread's pointer to the request
 * it is answering (MHD runs one thread per connection). Read next: http.c, api_messages.c.
 */
#include "server/fmt.h"
#include "server/server_impl.h"

#include "core/core.h"
#include "model/model.h"

#include <stdio.h>
#include <string.h>

/* --cors (one server per process: set once at boot, read after) */
static const char *g_cors;

/* The request being answered on this connection thread, for the access log. */
static _Thread_local struct snug_srv_access *tl_access;

void snug_srv_cors_init(const char *origin) {
    g_cors = origin;
}

void snug_srv_access_begin(struct snug_srv_access *a, const char *method, const char *url) {
    memset(a, 0, sizeof *a);
    a->t0 = snug_time_s();
    /* printable ASCII as is, every other byte as %XX: a log line stays one clean line of text
     * whatever a client sends (the request line is untrusted) */
    const char *in[2] = {method, url};
    char *out[2] = {a->method, a->url};
    size_t cap[2] = {sizeof a->method, sizeof a->url};
    for (int f = 0; f < 2; f++) {
        size_t k = 0;
        for (const unsigned char *p = (const unsigned char *)in[f]; *p && k + 4 < cap[f]; p++) {
            if (*p > 0x20 && *p < 0x7f && *p != '%')
                out[f][k++] = (char)*p;
            else
                k += (size_t)snprintf(out[f] + k, cap[f] - k, "%%%02X", *p);
        }
        out[f][k] = 0;
    }
}

void snug_srv_access_enter(struct snug_srv_access *a) {
    tl_access = a;
}

void snug_srv_access_counted(enum snug_route route, unsigned status) {
    if (!tl_access) return;
    tl_access->route = route;
    tl_access->has_route = true;
    tl_access->counted = status;
}

void snug_srv_access_end(struct snug_srv *s, struct snug_srv_access *a, struct MHD_Connection *c,
                         enum MHD_RequestTerminationCode toe) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
    unsigned status = ci ? ci->http_status : 0;
    /* the client went away before the answer was complete (a dropped stream, a request given
     * up while it waited): 499, nginx's "client closed request" */
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && (status == 200 || status == 0)) status = 499;
    if (status == 499 && a->has_route && a->counted != 499) {
        if (a->counted) atomic_fetch_sub(&s->req_count[a->route][a->counted], 1);
        snug_srv_count(s, a->route, 499);
    }
    if (!s->opts.no_access_log) {
        char tokens[96] = "";
        if (a->has_tokens)
            snprintf(tokens, sizeof tokens, " prompt=%d gen=%d cached=%d", a->n_prompt, a->n_gen,
                     a->n_cached);
        fprintf(stderr, "snug serve: %s %s %u%s %.1fms\n", a->method, a->url, status, tokens,
                (snug_time_s() - a->t0) * 1e3);
    }
    if (tl_access == a) tl_access = NULL;
}

void snug_srv_log_usage(int32_t n_prompt, int32_t n_gen, int32_t n_cached) {
    if (!tl_access) return;
    tl_access->n_prompt = n_prompt;
    tl_access->n_gen = n_gen;
    tl_access->n_cached = n_cached;
    tl_access->has_tokens = true;
}

enum MHD_Result snug_srv_queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r) {
    if (g_cors) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", g_cors);
        if (strcmp(g_cors, "*")) MHD_add_response_header(r, "Vary", "Origin");
    }
    return MHD_queue_response(c, status, r);
}

bool snug_srv_model_matches(const struct snug_srv *s, const char *m) {
    if (!m || !*m || s->opts.any_model) return true;
    if (!strcmp(m, s->model_id)) return true;
    for (int i = 0; i < s->opts.n_aliases; i++)
        if (!strcmp(m, s->opts.aliases[i])) return true;
    size_t n = strlen(s->model_id);
    return n > 5 && !strcmp(s->model_id + n - 5, ".gguf") && strlen(m) == n - 5 &&
           !strncmp(m, s->model_id, n - 5);
}

/* Anthropic's error types by HTTP status (docs.anthropic.com, "Errors": 400
 * invalid_request_error, 401 authentication_error, 403 permission_error, 404 not_found_error,
 * 413 request_too_large, 429 rate_limit_error, 500 api_error, 529 overloaded_error; other 4xx
 * — 405, 415 — are invalid requests, a 503 is the server being overloaded). */
const char *snug_srv_anthropic_error_type(int status) {
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 503:
    case 529:
        return "overloaded_error";
    default:
        return status >= 400 && status < 500 ? "invalid_request_error" : "api_error";
    }
}

bool snug_srv_anthropic_route(const char *url) {
    return url && (!strncmp(url, "/v1/messages", 12) || !strncmp(url, "/messages", 9));
}

enum MHD_Result snug_srv_send_api_error_hdr(struct MHD_Connection *c, const struct snug_fmt *fmt,
                                            const struct snug_server_error *e, const char *hname,
                                            const char *hval) {
    if (!fmt->error_body) return snug_srv_send_error_hdr(c, e, hname, hval);
    json_t *b = fmt->error_body(e);
    if (!b) { /* out of memory: a fixed body of the same shape */
        const char *body = fmt->error_oom_body;
        struct MHD_Response *r =
            MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, "Content-Type", "application/json");
        enum MHD_Result res = snug_srv_queue(c, 500, r);
        MHD_destroy_response(r);
        return res;
    }
    return snug_srv_send_json_hdr(c, (unsigned)e->http_status, b, hname, hval);
}

enum MHD_Result snug_srv_send_api_error(struct MHD_Connection *c, const struct snug_fmt *fmt,
                                        const struct snug_server_error *e) {
    return snug_srv_send_api_error_hdr(c, fmt, e, NULL, NULL);
}

/* The model object of /v1/models under the name `id`. */
static json_t *model_json(struct snug_srv *s, const char *id) {
    struct snug_engine_stats st;
    snug_engine_get_stats(s->engine, &st);
    return json_pack("{s:s, s:s, s:I, s:s, s:{s:s, s:i, s:i, s:i, s:I}}", "id", id, "object",
                     "model", "created", (json_int_t)s->created, "owned_by", "snug", "meta", "arch",
                     snug_model_arch(s->model), "n_vocab", snug_model_n_vocab(s->model), "n_embd",
                     snug_model_n_embd(s->model), "n_ctx", st.n_ctx, "n_ctx_train",
                     (json_int_t)snug_model_n_ctx_train(s->model));
}

/* GET /v1/models: the served model under its file name, then each --alias. */
enum MHD_Result snug_srv_models(struct snug_srv *s, struct MHD_Connection *c) {
    json_t *data = json_array();
    json_array_append_new(data, model_json(s, s->model_id));
    for (int i = 0; i < s->opts.n_aliases; i++)
        json_array_append_new(data, model_json(s, s->opts.aliases[i]));
    snug_srv_count(s, ROUTE_MODELS, 200);
    return snug_srv_send_json(c, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

/* GET /v1/models/{id}: the model object when id names the served model, else 404. */
enum MHD_Result snug_srv_model(struct snug_srv *s, struct MHD_Connection *c, const char *id) {
    if (!*id || !snug_srv_model_matches(s, id)) {
        struct snug_server_error e;
        snug_server_error_set(&e, 404, "invalid_request_error", "model",
                              "the model '%s' does not exist; this server serves '%s'", id,
                              s->model_id);
        snug_srv_count(s, ROUTE_MODEL, 404);
        return snug_srv_send_error(c, &e);
    }
    snug_srv_count(s, ROUTE_MODEL, 200);
    return snug_srv_send_json(c, 200, model_json(s, id));
}

/* A CORS preflight (OPTIONS with --cors on): 204 with the methods and headers allowed. */
enum MHD_Result snug_srv_preflight(struct MHD_Connection *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
    const char *want =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            want && *want ? want
                                          : "Authorization, Content-Type, x-api-key, "
                                            "anthropic-version, anthropic-beta");
    MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    enum MHD_Result res = snug_srv_queue(c, 204, r);
    MHD_destroy_response(r);
    return res;
}
