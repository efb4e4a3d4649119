/* server_impl.h — what http.c (daemon, routes, metrics) and reply.c (generation requests:
 * engine callbacks, SSE chunks, final responses) share inside the server module.
 * Owns: the declaration of struct snug_srv, the process-wide server state. Invariant: fields
 * other than the atomics are written once at boot and only read afterwards.
 * Read next: http.c, reply.c.
 */
#ifndef SNUG_SERVER_IMPL_H
#define SNUG_SERVER_IMPL_H

#include "server/engine.h"
#include "server/server.h"

#include <microhttpd.h>
#include <stdatomic.h>

/* Routes counted in /metrics (index into snug_srv.req_count). */
enum snug_route {
    ROUTE_CHAT = 0,
    ROUTE_COMPLETION,
    ROUTE_MODELS,
    ROUTE_HEALTH,
    ROUTE_METRICS,
    ROUTE_TOKENIZE,
    ROUTE_DETOKENIZE,
    ROUTE_OTHER,
    ROUTE_COUNT
};

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
};

/* Queue a JSON response (steals `body`); returns MHD's result. */
enum MHD_Result snug_srv_send_json(struct MHD_Connection *c, unsigned status, json_t *body);
/* Queue an OpenAI-style error response. */
enum MHD_Result snug_srv_send_error(struct MHD_Connection *c, const struct snug_server_error *e);
/* Count a finished request in /metrics. */
void snug_srv_count(struct snug_srv *s, enum snug_route route, unsigned status);

/* Handle POST /v1/chat/completions or /v1/completions with the complete body. */
enum MHD_Result snug_srv_generate(struct snug_srv *s, struct MHD_Connection *c,
                                  enum snug_server_kind kind, const char *body, size_t len);

/* The port before the model (boot.c): start a loading daemon on the server's address, read the
 * weights with progress, name the phase, hand the listening socket over (returns it; the loading
 * daemon is gone), free (stops it if still running). */
struct snug_boot;
int snug_boot_start(struct snug_boot **out, const struct snug_server_opts *opts,
                    const char *model_id, struct snug_err *err);
void snug_boot_read_weights(struct snug_boot *b, const char *path);
void snug_boot_phase(struct snug_boot *b, const char *phase);
int snug_boot_handoff(struct snug_boot *b);
int snug_boot_port(const struct snug_boot *b);
void snug_boot_free(struct snug_boot *b);

/* The chat page (webui.c): whether url is its route, and queue the embedded page. */
bool snug_webui_route(const char *url);
enum MHD_Result snug_webui_send(struct MHD_Connection *c);

/* A JSON string from bytes that may not be valid UTF-8 (invalid bytes become U+FFFD). */
json_t *snug_srv_json_str(const char *s, size_t n);

#endif /* SNUG_SERVER_IMPL_H */
