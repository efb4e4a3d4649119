/* server_impl.h — what http.c (daemon, routes, metrics) and reply.c (generation requests:
 * engine callbacks, SSE chunks, final responses) share inside the server module.
 * Owns: the declaration of struct snug_srv, the process-wide server state. Invariant: fields
 * other than the atomics are written once at boot and only read afterwards.
 * Read next: http.c, reply.c.
 */
#ifndef SNUG_SERVER_IMPL_H
#define SNUG_SERVER_IMPL_H

#include "server/engine.h"
#include "server/gate.h"
#include "server/server.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#define SNUG_SRV_N_STATUS 600

struct snug_srv {
    struct snug_server_opts opts;
    struct snug_model *model;
    const struct snug_tokenizer *tok;
    struct snug_engine *engine;
    struct MHD_Daemon *daemon;
    char model_id[256];
    long created;
    double t_start;
    char *script_text; /* --script file contents (NUL-terminated), or NULL */
    size_t script_len;
    atomic_uint_least64_t req_count[ROUTE_COUNT][SNUG_SRV_N_STATUS];
    atomic_uint_least64_t id_counter;
    /* the memory plan made at boot (src/plan) for model, ctx, slots, chunk, KV and drafts */
    uint64_t plan_total;
    int plan_items;
    /* generations in flight (struct reply, reply.c), for shutdown */
    pthread_mutex_t live_mu;
    struct reply *live;
    int n_live;
    atomic_bool stopping; /* SIGTERM seen: streams ended now get an error event */
};

/* /tokenize with_pieces answers at most this many tokens (each piece is a JSON object). */
#define SNUG_SRV_MAX_PIECES 65536

/* Queue a JSON response (steals `body`); returns MHD's result. When the body cannot be
 * serialised a fixed 500 error is sent instead, so every request gets an answer. */
enum MHD_Result snug_srv_send_json(struct MHD_Connection *c, unsigned status, json_t *body);
/* The same with one extra header (hname = NULL for none). */
enum MHD_Result snug_srv_send_json_hdr(struct MHD_Connection *c, unsigned status, json_t *body,
                                       const char *hname, const char *hval);
/* Queue an OpenAI-style error response (always sendable: invalid UTF-8 becomes U+FFFD). */
enum MHD_Result snug_srv_send_error(struct MHD_Connection *c, const struct snug_server_error *e);
enum MHD_Result snug_srv_send_error_hdr(struct MHD_Connection *c, const struct snug_server_error *e,
                                        const char *hname, const char *hval);
/* Count a finished request in /metrics. */
void snug_srv_count(struct snug_srv *s, enum snug_route route, unsigned status);
/* May a browser page of this Origin drive the server? (false while CORS is off) */
bool snug_srv_origin_allowed(const struct snug_srv *s, const char *origin);

/* Handle POST /v1/chat/completions or /v1/completions with the complete body. A non-streaming
 * request suspends the connection while the engine works and sets *pending; MHD calls the
 * access handler again once it is resumed, which then calls snug_srv_generate_resume. */
enum MHD_Result snug_srv_generate(struct snug_srv *s, struct MHD_Connection *c,
                                  enum snug_server_kind kind, const char *body, size_t len,
                                  void **pending);
enum MHD_Result snug_srv_generate_resume(struct snug_srv *s, struct MHD_Connection *c,
                                         void **pending);
/* The connection closed while a generation was pending: cancel it and let go. */
void snug_srv_generate_abandon(void *pending);
/* Shutdown: end every generation in flight (streams get a final SSE error event, waiting
 * requests a 503). Returns the number of generations still alive (0 = all released). */
int snug_srv_cancel_all(struct snug_srv *s);
int snug_srv_live_count(struct snug_srv *s);

/* A JSON string from bytes that may not be valid UTF-8 (invalid bytes become U+FFFD). */
json_t *snug_srv_json_str(const char *s, size_t n);

#endif /* SNUG_SERVER_IMPL_H */
