/* server.h — `snug serve`: the OpenAI-compatible HTTP server (libmicrohttpd + jansson).
 *
 * Layers: http.c (routes, auth, SSE, responses, metrics) → request.c (a request body parsed
 * and validated into struct snug_server_req, the fuzzed surface) → chat.h (prompt rendering)
 * → engine.h (the engine thread, slots and queue) → outparse.h (reasoning / tool-call split).
 * Invariant: no request, however malformed, crashes the server or disturbs another client's
 * stream; JSON stays at this edge, the engine sees token ids and sampler parameters.
 * Read next: request.c, then http.c, then engine.h.
 */
#ifndef SNUG_SERVER_H
#define SNUG_SERVER_H

#include "sample/sample.h"
#include "snug.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ==== the server ============================================================================ */

struct snug_server_opts {
    const char *model_path;
    const char *host;        /* default "127.0.0.1" */
    int port;                /* default 8080; 0 = any free port (printed at boot) */
    int32_t n_ctx;           /* context per slot; 0 = 4096 (capped at the training length) */
    int32_t n_slots;         /* default 1 */
    int32_t kv_type;         /* KV format code (snug_kvfmt_code: one format or a K/V pair) */
    int32_t n_threads;       /* per context; 0 = all CPUs */
    const char *api_key;     /* NULL = no auth */
    bool no_think;           /* thinking off unless a request turns it on */
    const char *script_path; /* test seam: generation follows this file's text */
    int32_t queue_cap;       /* requests waiting beyond the slots; 0 = 4 × slots */
    double timeout_s;        /* per request; 0 = 600 */
    size_t max_body_bytes;   /* 0 = 8 MiB */
    const char *port_file;   /* when set, the bound port is written there once ready */
    int32_t n_draft;         /* MTP drafts per step; -1 = 3 when the model has MTP, else 0 */
    uint64_t budget;         /* host bytes the memory plan must fit; 0 = no limit */
    bool no_webui;           /* no chat page at / (webui.c) */
};

/* Load the model, start the engine and the HTTP daemon, print the boot summary to stderr, and
 * serve until SIGINT/SIGTERM. Returns SNUG_OK after a clean shutdown. */
int snug_server_run(const struct snug_server_opts *opts, struct snug_err *err);

/* ==== requests ============================================================================== */

enum snug_server_kind {
    SNUG_REQ_CHAT = 0,       /* POST /v1/chat/completions */
    SNUG_REQ_COMPLETION = 1, /* POST /v1/completions */
};

enum snug_server_tool_choice {
    SNUG_TOOL_AUTO = 0,
    SNUG_TOOL_NONE = 1,
    SNUG_TOOL_REQUIRED = 2,
    SNUG_TOOL_NAMED = 3,
};

#define SNUG_REQ_MAX_STOP       16
#define SNUG_REQ_MAX_STOP_BYTES 512 /* keeps the per-token stop-string check cheap */

/* A validated request. Strings and JSON values are borrowed from `root`, which the struct
 * owns (one reference) until snug_server_req_free. */
struct snug_server_req {
    enum snug_server_kind kind;
    json_t *root;
    const char *model;      /* NULL when absent */
    const json_t *messages; /* chat: the non-empty messages array */
    const json_t *tools;    /* chat: the tools array or NULL */
    const char *prompt;     /* completion: the prompt text (NULL when given as ids) */
    size_t prompt_len;
    const json_t *prompt_ids; /* completion: an array of token ids instead of text */
    bool stream, include_usage;
    bool return_progress; /* stream prompt_progress events while the prompt is evaluated */
    struct snug_sampler_params sampler;
    bool has_seed;
    int32_t max_tokens; /* 0 = until the context is full */
    const char *stop[SNUG_REQ_MAX_STOP];
    int n_stop;
    bool logprobs;
    int32_t top_logprobs;
    enum snug_server_tool_choice tool_choice;
    const char *tool_name; /* SNUG_TOOL_NAMED */
    const char *script;    /* "snug_script": test seam, honoured only under --script */
};

/* The OpenAI-style error of a rejected request. */
struct snug_server_error {
    int http_status;  /* 400, 401, 404, 413, 503, ... */
    const char *type; /* "invalid_request_error", ... (static) */
    char param[64];   /* the offending field, "" when none */
    char msg[448];
};

/* Parse and validate a request body of `len` bytes (not necessarily NUL-terminated). Unknown
 * fields are ignored; a field of the wrong type or out of range is a 400 naming it; n other
 * than 1 is a 400. On success returns SNUG_OK and *r owns the parsed JSON; on failure *r is
 * empty and *e says why. Never crashes on any input (fuzzed by tests/fuzz/fuzz_server_request.c).
 */
int snug_server_req_parse(struct snug_server_req *r, enum snug_server_kind kind, const char *body,
                          size_t len, struct snug_server_error *e);
void snug_server_req_free(struct snug_server_req *r);

/* Fill *e (returns e->http_status as a negative status-like value for convenience: -1). */
int snug_server_error_set(struct snug_server_error *e, int http_status, const char *type,
                          const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

#endif /* SNUG_SERVER_H */
