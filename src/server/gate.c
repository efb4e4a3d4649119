/* gate.c — the checks made before a request's body is read (see gate.h): route, method, key,
 * origin, the content type; whether a body is announced over the limit.
 * Read next: http.c.
 */
#include "server/gate.h"

#include <limits.h>
#include <string.h>
#include <strings.h>

enum snug_route snug_gate_route(const char *url) {
    if (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions"))
        return ROUTE_CHAT;
    if (!strcmp(url, "/v1/completions") || !strcmp(url, "/completions")) return ROUTE_COMPLETION;
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/models")) return ROUTE_MODELS;
    if (!strcmp(url, "/health") || !strcmp(url, "/v1/health")) return ROUTE_HEALTH;
    if (!strcmp(url, "/metrics")) return ROUTE_METRICS;
    if (!strcmp(url, "/tokenize")) return ROUTE_TOKENIZE;
    if (!strcmp(url, "/detokenize")) return ROUTE_DETOKENIZE;
    if (!strcmp(url, "/v1/messages") || !strcmp(url, "/messages")) return ROUTE_MESSAGES;
    if (!strcmp(url, "/v1/messages/count_tokens") || !strcmp(url, "/messages/count_tokens"))
        return ROUTE_COUNT_TOKENS;
    if (!strcmp(url, "/v1/responses") || !strcmp(url, "/responses")) return ROUTE_RESPONSES;
    if (!strncmp(url, "/v1/models/", 11) && url[11]) return ROUTE_MODEL;
    if (!strncmp(url, "/v1/responses/", 14) && url[14]) return ROUTE_RESPONSE;
    return ROUTE_OTHER;
}

/* k equal to want, in time independent of where they differ. */
static bool key_eq(const char *k, const char *want) {
    size_t kl = strlen(k), wl = strlen(want);
    unsigned diff = kl != wl;
    for (size_t i = 0; i < wl; i++) diff |= (unsigned)(want[i] ^ (i < kl ? k[i] : 0));
    return diff == 0;
}

/* "Authorization: Bearer <key>" or Anthropic's "x-api-key: <key>". */
static bool key_ok(const struct snug_gate_request *q, const char *want) {
    if (q->x_api_key && key_eq(q->x_api_key, want)) return true;
    return q->authorization && !strncmp(q->authorization, "Bearer ", 7) &&
           key_eq(q->authorization + 7, want);
}

/* A Content-Type a web page may send cross-origin without a CORS preflight (the Fetch
 * standard's CORS-safelisted request types): a POST carrying one is not a JSON API call. */
static bool simple_content_type(const char *ct) {
    if (!ct) return false;
    while (*ct == ' ' || *ct == '\t') ct++;
    static const char *simple[] = {"text/plain", "application/x-www-form-urlencoded",
                                   "multipart/form-data"};
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
        if (!strncasecmp(ct, simple[i], strlen(simple[i]))) return true;
    return false;
}

/* Origin "http://HOST" or "https://HOST" for the Host the request was sent to: the server's own
 * page (the chat page at /), which CORS never restricts. */
static bool same_origin(const char *origin, const char *host) {
    if (!origin || !host || !*host) return false;
    const char *rest = !strncmp(origin, "http://", 7)    ? origin + 7
                       : !strncmp(origin, "https://", 8) ? origin + 8
                                                         : NULL;
    return rest && !strcmp(rest, host);
}

bool snug_gate_announced_over(const char *cl, size_t limit) {
    if (!cl) return false;
    while (*cl == ' ' || *cl == '\t') cl++;
    unsigned long long n = 0;
    bool any = false, over = false;
    for (; *cl >= '0' && *cl <= '9'; cl++, any = true) {
        unsigned d = (unsigned)(*cl - '0');
        if (n > (ULLONG_MAX - d) / 10)
            over = true;
        else
            n = n * 10 + d;
    }
    while (*cl == ' ' || *cl == '\t') cl++;
    return any && !*cl && (over || n > (unsigned long long)limit);
}

static int refuse(struct snug_server_error *e, int status, const char *type, const char *fmt,
                  const char *arg) {
    snug_server_error_set(e, status, type, NULL, fmt, arg);
    return status;
}

int snug_gate_check(const struct snug_gate_request *q, const struct snug_gate_policy *p,
                    enum snug_route *route, struct snug_server_error *e, const char **allow) {
    enum snug_route r = snug_gate_route(q->url);
    *route = r;
    *allow = NULL;
    bool want_post = r == ROUTE_CHAT || r == ROUTE_COMPLETION || r == ROUTE_TOKENIZE ||
                     r == ROUTE_DETOKENIZE || r == ROUTE_MESSAGES || r == ROUTE_COUNT_TOKENS ||
                     r == ROUTE_RESPONSES;
    bool post = !strcmp(q->method, "POST"), get = !strcmp(q->method, "GET");
    /* a stored response is read or deleted (its input_items only read) */
    bool del_ok = r == ROUTE_RESPONSE && !strstr(q->url + 14, "/");
    bool del = del_ok && !strcmp(q->method, "DELETE");
    if (r == ROUTE_OTHER)
        return refuse(e, 404, "invalid_request_error", "unknown endpoint '%s'", q->url);
    if ((want_post && !post) || (!want_post && !get && !del)) {
        *allow = want_post ? "POST" : del_ok ? "GET, DELETE" : "GET";
        return refuse(e, 405, "invalid_request_error", "this endpoint wants %s", *allow);
    }
    if (r != ROUTE_HEALTH && p->api_key && !key_ok(q, p->api_key))
        return refuse(e, 401, "authentication_error", "%s",
                      "missing or wrong API key: send 'Authorization: Bearer <key>' or "
                      "'x-api-key: <key>'");
    /* a request from a web page of another origin carries Origin; unless CORS allows it,
     * such a page must not make this server work (it could not read the answer anyway) */
    if (post && q->origin && !same_origin(q->origin, q->host) &&
        !(p->origin_ok && p->origin_ok(p->ctx, q->origin)))
        return refuse(e, 403, "invalid_request_error",
                      "requests from the web origin '%s' are not allowed (CORS is off)", q->origin);
    if (post && simple_content_type(q->content_type))
        return refuse(e, 415, "invalid_request_error",
                      "the body must be JSON: send 'Content-Type: application/json' (got '%s')",
                      q->content_type);
    return 0;
}

void snug_gate_body_add(struct snug_sbuf *body, bool *too_big, size_t limit, const char *data,
                        size_t n) {
    if (*too_big) return;
    if (n > limit || body->len > limit - n) {
        *too_big = true;
        snug_sbuf_free(body);
        return;
    }
    snug_sbuf_append(body, data, n);
}
