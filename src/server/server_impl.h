/* server_impl.h — what http.c (daemon, routes, metrics), the front ends (fmt_openai.c,
 * api_messages.c, api_responses.c) and the generation core (submit.c, reply.c) share inside the
 * server module.
 * Owns: the declaration of struct snug_srv, the process-wide server state. Invariant: fields
 * other than the atomics are written once at boot and only read afterwards.
 * Read next: http.c, submit.c, reply.c.
 */
#ifndef SNUG_SERVER_IMPL_H
#define SNUG_SERVER_IMPL_H

#include "grammar/grammar.h"
#include "engine/engine.h"
#include "server/gate.h"
#include "server/schema.h"
#include "server/server.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#define SNUG_SRV_N_STATUS 600

struct snug_prefix;
struct snug_vision;
struct snug_vision_encoder;
struct snug_plan;

struct snug_srv {
    struct snug_server_opts opts;
    struct snug_model *model;
    const struct snug_tokenizer *tok;
    struct snug_vocab_trie *trie;           /* the vocabulary's bytes, for grammar masks */
    struct snug_grammar_memo *grammar_memo; /* compiled grammars + warm matchers (memo.h) */
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
    /* the prefix cache, made at boot from the plan when --cache-ram is given (else NULL); the
     * engine looks up, stores and restores through it; /metrics reads its stats */
    struct snug_prefix *prefix;
    /* the vision tower and its encoder (one block for the largest image), when --mmproj */
    struct snug_vision *vision;
    struct snug_vision_encoder *venc;
    struct snug_vision_be *vision_be;       /* --vision-backend cuda: the tower's products there */
    struct snug_responses_store *responses; /* stored responses (previous_response_id) */
    /* generations in flight (struct reply, reply.c), for shutdown */
    pthread_mutex_t live_mu;
    struct reply *live;
    int n_live;
    atomic_bool draining; /* SIGTERM seen: new connections are closed as they arrive */
    atomic_bool stopping; /* grace period over: streams ended now get an error event */
};

/* --mmproj at boot (images.c): load the tower (any backend, with or without --spec-draft),
 * make its encoder for the largest image (threads: the engine pool's) and add its items to the
 * plan, checked against --budget again. */
int snug_srv_vision_boot(struct snug_srv *s, int32_t threads, struct snug_plan *plan,
                         struct snug_err *err);

/* The prefix cache's /metrics lines (metrics_prefix.c); nothing when pc is NULL. */
void snug_srv_metrics_prefix(struct snug_sbuf *b, struct snug_prefix *pc);

struct snug_fmt;             /* fmt.h: an API's answer and error shapes */
struct snug_responses_store; /* api_responses.c */

/* The access-log record of one request (http_api.c), also what /metrics counted for it: a
 * request the client dropped is logged as 499, and its /metrics count moves from 200 to 499
 * when it ends, so both say the same. */
struct snug_srv_access {
    double t0;
    int32_t n_prompt, n_gen, n_cached;
    bool has_tokens;
    char method[16];
    char url[160];
    enum snug_route route; /* set once the gate let the request in (has_route) */
    bool has_route;
    unsigned counted; /* the status snug_srv_count recorded for it (0: none yet) */
};
void snug_srv_access_begin(struct snug_srv_access *a, const char *method, const char *url);
/* The request this connection thread now answers (snug_srv_log_usage writes to it). */
void snug_srv_access_enter(struct snug_srv_access *a);
/* The request is over: its log line (unless --no-access-log). */
void snug_srv_access_end(struct snug_srv *s, struct snug_srv_access *a, struct MHD_Connection *c,
                         enum MHD_RequestTerminationCode toe);
void snug_srv_cors_init(const char *origin);
/* OPTIONS under --cors: 204 with the Access-Control-Allow-* headers. */
enum MHD_Result snug_srv_preflight(struct MHD_Connection *c);
/* GET /v1/models (the file name, then each alias) and GET /v1/models/{id}. */
enum MHD_Result snug_srv_models(struct snug_srv *s, struct MHD_Connection *c);
enum MHD_Result snug_srv_model(struct snug_srv *s, struct MHD_Connection *c, const char *id);

/* Queue a response, adding the CORS headers when --cors is on; returns MHD's result. */
enum MHD_Result snug_srv_queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r);
/* The request being answered on this thread was counted in /metrics with this status
 * (snug_srv_count calls it). */
void snug_srv_access_counted(enum snug_route route, unsigned status);
/* Record the token counts of the request being answered on this thread (access log). */
void snug_srv_log_usage(int32_t n_prompt, int32_t n_gen, int32_t n_cached);
/* Does `name` name the served model (its file name, the name without .gguf, an --alias, or
 * anything under --any-model)? NULL / "" = yes. */
bool snug_srv_model_matches(const struct snug_srv *s, const char *name);

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
/* The same in the shape of `fmt`'s API (fmt.h error_body; Anthropic:
 * {"type":"error","error":{"type","message"}}). */
enum MHD_Result snug_srv_send_api_error(struct MHD_Connection *c, const struct snug_fmt *fmt,
                                        const struct snug_server_error *e);
enum MHD_Result snug_srv_send_api_error_hdr(struct MHD_Connection *c, const struct snug_fmt *fmt,
                                            const struct snug_server_error *e, const char *hname,
                                            const char *hval);
/* Anthropic's error type for an HTTP status ("invalid_request_error", "not_found_error", ...). */
const char *snug_srv_anthropic_error_type(int status);
/* Is url one of the Anthropic API's (/v1/messages, /v1/messages/count_tokens, anything under
 * them)? Its errors, from the gate's on, are in Anthropic's shape. */
bool snug_srv_anthropic_route(const char *url);
enum MHD_Result snug_srv_send_error_hdr(struct MHD_Connection *c, const struct snug_server_error *e,
                                        const char *hname, const char *hval);
/* Count a finished request in /metrics. */
void snug_srv_count(struct snug_srv *s, enum snug_route route, unsigned status);
/* May a browser page of this Origin drive the server? (false while CORS is off) */
bool snug_srv_origin_allowed(const struct snug_srv *s, const char *origin);

/* Handle POST /v1/chat/completions or /v1/completions with the complete body (fmt_openai.c). A
 * non-streaming request suspends the connection while the engine works and sets *pending; MHD
 * calls the access handler again once it is resumed, which then calls
 * snug_srv_generate_resume. */
enum MHD_Result snug_srv_generate(struct snug_srv *s, struct MHD_Connection *c,
                                  enum snug_server_kind kind, const char *body, size_t len,
                                  void **pending);

/* The front ends: POST /v1/messages, /v1/messages/count_tokens, /v1/responses (whole body). */
enum MHD_Result snug_msgs_handle(struct snug_srv *s, struct MHD_Connection *c, const char *body,
                                 size_t len, void **pending);
enum MHD_Result snug_msgs_count_tokens(struct snug_srv *s, struct MHD_Connection *c,
                                       const char *body, size_t len);
enum MHD_Result snug_resp_handle(struct snug_srv *s, struct MHD_Connection *c, const char *body,
                                 size_t len, void **pending);
/* GET / DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items (`path` = what follows
 * "/v1/responses/") over the stored responses. */
enum MHD_Result snug_resp_stored(struct snug_srv *s, struct MHD_Connection *c, const char *method,
                                 const char *path);
int snug_responses_store_init(struct snug_responses_store **out, int32_t cap);
void snug_responses_store_free(struct snug_responses_store *st);
enum MHD_Result snug_srv_generate_resume(struct snug_srv *s, struct MHD_Connection *c,
                                         void **pending);
/* The connection closed while a generation was pending: cancel it and let go. */
void snug_srv_generate_abandon(void *pending);
/* Shutdown: end every generation in flight (streams get a final SSE error event, waiting
 * requests a 503). Returns the number of generations still alive (0 = all released). */
int snug_srv_cancel_all(struct snug_srv *s);
int snug_srv_live_count(struct snug_srv *s);

/* The port before the model (boot.c): start a loading daemon on the server's address (--host:
 * a name or an IPv4 / IPv6 address, resolved with getaddrinfo), read the
 * weights with progress, name the phase, hand the listening socket over (returns it; the loading
 * daemon is gone), free (stops it if still running). */
struct snug_boot;
int snug_boot_start(struct snug_boot **out, const struct snug_server_opts *opts,
                    const char *model_id, struct snug_err *err);
void snug_boot_read_weights(struct snug_boot *b, const char *path);
void snug_boot_phase(struct snug_boot *b, const char *phase);
int snug_boot_handoff(struct snug_boot *b);
int snug_boot_port(const struct snug_boot *b);
/* The bound address in numeric form ("127.0.0.1", "[::1]"), for the boot log. */
const char *snug_boot_addr(const struct snug_boot *b);
void snug_boot_free(struct snug_boot *b);

/* The chat page (webui.c): whether url is its route, and queue the embedded page. */
bool snug_webui_route(const char *url);
enum MHD_Result snug_webui_send(struct MHD_Connection *c);

/* A JSON string from bytes that may not be valid UTF-8 (invalid bytes become U+FFFD). */
json_t *snug_srv_json_str(const char *s, size_t n);

#endif /* SNUG_SERVER_IMPL_H */
