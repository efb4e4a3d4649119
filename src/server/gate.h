/* gate.h — what the server decides about a request from its first line and headers, before
 * any of its body is read: the route, the method, the API key, and whether a web page of
 * another origin is driving it; and the bounded accumulation of the body. Pure functions of
 * their inputs (no MHD), so tests/fuzz/fuzz_server_http.c drives them directly.
 * Invariant: a refusal always carries a sendable error (valid UTF-8 message); with an API key
 * set, no route but /health passes without the exact key.
 * Read next: http.c (the caller), request.c (the body, once complete).
 */
#ifndef SNUG_SERVER_GATE_H
#define SNUG_SERVER_GATE_H

#include "server/schema.h"
#include "server/server.h"

#include <stdbool.h>
#include <stddef.h>

/* Routes counted in /metrics (index into snug_srv.req_count). */
enum snug_route {
    ROUTE_CHAT = 0,
    ROUTE_COMPLETION,
    ROUTE_MODELS,
    ROUTE_HEALTH,
    ROUTE_METRICS,
    ROUTE_TOKENIZE,
    ROUTE_DETOKENIZE,
    ROUTE_MESSAGES,     /* POST /v1/messages (Anthropic) */
    ROUTE_COUNT_TOKENS, /* POST /v1/messages/count_tokens */
    ROUTE_RESPONSES,    /* POST /v1/responses (OpenAI Responses) */
    ROUTE_MODEL,        /* GET /v1/models/{id} */
    ROUTE_RESPONSE,     /* GET / DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items */
    ROUTE_OTHER,
    ROUTE_COUNT
};

struct snug_gate_request {
    const char *url, *method;
    const char *authorization, *origin, *content_type; /* header values or NULL */
    const char *x_api_key;                             /* Anthropic's key header, or NULL */
    const char *host; /* the Host header: a page of this very server is same-origin */
};

struct snug_gate_policy {
    const char *api_key; /* NULL = no key required */
    /* may a browser page of this origin drive the server? NULL = none may (CORS off) */
    bool (*origin_ok)(const void *ctx, const char *origin);
    const void *ctx;
};

enum snug_route snug_gate_route(const char *url);

/* 0 when the request may go on (its body is then read); otherwise the HTTP status to answer
 * (401, 403, 404, 405, 415) with *e filled and *allow set for a 405 ("GET", "POST" or
 * "GET, DELETE"). */
int snug_gate_check(const struct snug_gate_request *q, const struct snug_gate_policy *p,
                    enum snug_route *route, struct snug_server_error *e, const char **allow);

/* Whether a Content-Length header value announces more than limit bytes (decimal digits
 * between optional blanks; a malformed value is left to libmicrohttpd, which answers it 400).
 * Such a body is never kept: it is read and dropped as it arrives, then answered 413, so a
 * client that sends it without waiting still gets the answer. */
bool snug_gate_announced_over(const char *content_length, size_t limit);

/* Append n bytes of body; past `limit` the body is dropped and *too_big set (a 413 follows,
 * the rest of the upload is read and discarded). */
void snug_gate_body_add(struct snug_sbuf *body, bool *too_big, size_t limit, const char *data,
                        size_t n);

#endif
