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

#define SNUG_SERVER_MAX_ALIASES 16
/* Request-cost limits, checked after parsing and before any rendering or tokenizing (so one
 * request cannot make a connection thread do unbounded work). 0 = no limit. */
struct snug_server_limits {
    size_t max_messages;     /* chat messages (default 1024) */
    size_t max_parts;        /* content parts of one message (default 256) */
    size_t max_tools;        /* tools (default 128) */
    size_t max_prompt_bytes; /* text of the messages / prompt, and the rendered prompt (4 MiB) */
};

struct snug_server_opts {
    const char *model_path;
    struct snug_model *model; /* NULL, or model_path already opened (the CLI's sizing opened it
                                 with opts.n_threads): snug_server_run takes it over and frees it */
    const char *host;         /* default "127.0.0.1" */
    int port;                 /* default 8080; 0 = any free port (printed at boot) */
    int32_t n_ctx;            /* context per slot; 0 = 4096 (capped at the training length) */
    int32_t n_slots;          /* default 1 */
    int32_t kv_type;          /* KV format code (snug_kvfmt_code: one format or a K/V pair) */
    int32_t n_threads;        /* per context; 0 = all CPUs */
    const char *api_key;      /* NULL = no auth */
    bool no_think;            /* thinking off unless a request turns it on */
    const char *script_path;  /* test seam: generation follows this file's text */
    int32_t queue_cap;        /* requests waiting beyond the slots; 0 = 4 × slots */
    double timeout_s;         /* per request; 0 = 600 */
    size_t max_body_bytes;    /* 0 = 8 MiB */
    const char *port_file;    /* when set, the bound port is written there once ready */
    int32_t n_draft;          /* MTP drafts per step; -1 = 3 when the model has MTP, else 0 */
    bool spec_adapt;          /* --spec-adapt: at most n_draft, chosen per step from the measured
                                 acceptance and step costs; false: n_draft every step */
    int32_t n_chunk;          /* rows per forward step (--chunk, resolved by the CLI's sizing);
                                 0 = 512; at most the context */
    int32_t prompt_budget;    /* prompt tokens a prefilling slot adds to one engine step beside
                                 the others' decode rows (--step-prompt); 0 = auto (a time
                                 budget: src/engine/step_budget.h); never more than the chunk */
    uint64_t budget;          /* host bytes the memory plan must fit; 0 = no limit */
    /* the prefix cache (src/prefix, docs/prefix-cache.md): RAM tier bytes (0 = off), disk tier
     * folder and bytes, checkpoint interval in tokens (0 = 4096) */
    uint64_t cache_ram;
    const char *cache_dir;
    uint64_t cache_disk;
    int32_t cache_every;
    bool no_prompt_normalize; /* keep agent clients' volatile spans (server/normalize.h) */
    /* names the server also answers to (--alias, repeatable), and --any-model */
    const char *aliases[SNUG_SERVER_MAX_ALIASES];
    int n_aliases;
    bool any_model;
    const char *cors_origin;    /* --cors: Access-Control-Allow-Origin value; NULL = off */
    int32_t thinking_budget;    /* --thinking-budget: default reasoning budget; -1 = none */
    int32_t repeat_n, repeat_k; /* --reasoning-repeat-guard N,K; 0 = off */
    int32_t responses_store;    /* --responses-store: stored responses (LRU); 0 = 64 */
    bool no_access_log;         /* --no-access-log */
    /* hardening (docs/server.md "Limits and hardening"); 0 = the default in brackets */
    int32_t http_threads;     /* connection threads (MHD thread pool, epoll) [4] */
    int32_t max_conns;        /* open connections in all [4096] */
    int32_t max_conns_per_ip; /* open connections of one client address [256] */
    int32_t idle_timeout_s;   /* idle keep-alive connections closed after this [30] */
    double shutdown_grace_s;  /* on SIGTERM, in-flight requests may finish for this long [5] */
    bool special_in_content;  /* --special-tokens-in-content: the old, injectable behaviour */
    struct snug_server_limits limits; /* request-cost limits (fields 0 = defaults) */
    int32_t backend;                  /* 0 = CPU, 1 = CUDA (--backend) */
    uint64_t vram_budget; /* --backend cuda: bytes the GPU plan must fit; 0 = no limit */
    bool no_webui;        /* no chat page at / (webui.c) */
    /* the vision tower (docs/vision.md "Through the server"): --mmproj FILE (NULL: none, image
     * parts are a 400), the resize bounds and the decoded source's bound (0 = the defaults) */
    const char *mmproj;
    int64_t min_image_pixels, max_image_pixels, max_source_pixels;
    int32_t vision_backend; /* --vision-backend: 0 cpu, 1 cuda (the whole tower there) */
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

enum snug_server_format {
    SNUG_FORMAT_TEXT = 0,
    SNUG_FORMAT_JSON_OBJECT = 1, /* any JSON object */
    SNUG_FORMAT_JSON_SCHEMA = 2, /* a JSON document valid under json_schema */
};

#define SNUG_REQ_MAX_LOGIT_BIAS 1024
#define SNUG_REQ_MAX_N          16 /* choices of one request (and at most the server's slots) */
#define SNUG_REQ_MAX_STOP       16
#define SNUG_REQ_MAX_STOP_BYTES 512 /* keeps the per-token stop-string check cheap */

/* A validated request, whichever API it came in through (the chat and completions bodies are
 * read as they are; the Anthropic Messages and Responses front ends fill it through
 * snug_server_req_from_fields). Strings and JSON values are borrowed from `root`, which the
 * struct owns (one reference) until snug_server_req_free. */
struct snug_server_req {
    enum snug_server_kind kind;
    json_t *root; /* the body, or what a front end's values borrow from */
    /* the object the chat template's switches are read from (add_generation_prompt,
     * continue_final_message, chat_template_kwargs: chat.h); NULL = none given */
    const json_t *template_src;
    int8_t think_switch;    /* thinking on (1) / off (0) as a front end asked; -1 = not set */
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
    int32_t n;          /* choices (1..SNUG_REQ_MAX_N): choice i samples with seed + i */
    int32_t max_tokens; /* 0 = until the context is full */
    const char *stop[SNUG_REQ_MAX_STOP];
    int n_stop;
    bool logprobs;
    int32_t top_logprobs;
    enum snug_server_tool_choice tool_choice;
    const char *tool_name; /* SNUG_TOOL_NAMED */
    const char *script;    /* "snug_script": test seam, honoured only under --script */
    /* bounded thinking: "thinking_budget" (tokens of reasoning; -1 = unbounded) or
     * "reasoning_effort" mapped to a budget (snug_server_effort_budget); has_budget = given */
    int32_t thinking_budget;
    bool has_budget;
    bool has_effort;      /* "reasoning_effort" given: it decides thinking on / off */
    bool effort_no_think; /* reasoning_effort "none" / "minimal": thinking off */
    bool continue_final;  /* "continue_final_message": the last assistant turn is left open */
    /* structured outputs (docs/grammar.md) */
    const char *grammar; /* "grammar": GBNF text, or NULL */
    size_t grammar_len;
    enum snug_server_format format; /* response_format.type */
    const json_t *json_schema;      /* response_format.json_schema.schema (json_schema only) */
    const json_t *logit_bias;       /* validated: {"id": value in [-100, 100]}, or NULL */
    bool parallel_tool_calls;       /* default true; false = at most one tool call */
};

/* The thinking budget of a reasoning effort ("none" / "minimal" → thinking off (*no_think),
 * "low" 1024, "medium" 4096, "high" / "xhigh" unbounded (-1)); false for an unknown word. */
bool snug_server_effort_budget(const char *effort, int32_t *budget, bool *no_think);

/* The OpenAI-style error of a rejected request. */
struct snug_server_error {
    int http_status;  /* 400, 401, 404, 413, 503, ... */
    const char *type; /* "invalid_request_error", ... (static) */
    char param[64];   /* the offending field, "" when none */
    char msg[448];
};

/* Cost before work: the raw body's top-level members that become grammars (response_format,
 * tools, text, output_format) measured with snug_json_schema_precheck before the body is
 * parsed, so an oversized schema costs one pass over its bytes. A 400 naming the member; 0
 * when within the limits (or not a JSON object: the parser then says why). */
int snug_server_body_precheck(const char *body, size_t len, struct snug_server_error *e);

/* Parse and validate a request body of `len` bytes (not necessarily NUL-terminated). Unknown
 * fields are ignored; a field of the wrong type or out of range is a 400 naming it (n outside
 * 1..SNUG_REQ_MAX_N too). On success returns SNUG_OK and *r owns the parsed JSON; on failure *r is
 * empty and *e says why. Never crashes on any input (fuzzed by tests/fuzz/fuzz_server_request.c).
 */
int snug_server_req_parse(struct snug_server_req *r, enum snug_server_kind kind, const char *body,
                          size_t len, struct snug_server_error *e);
/* The same from a parsed JSON object (stolen: owned by *r on success, released on failure). */
int snug_server_req_parse_json(struct snug_server_req *r, enum snug_server_kind kind, json_t *root,
                               struct snug_server_error *e);
/* A front end's fields under the chat API's names: the value standing for chat field `key`, or
 * NULL when there is none. Values are borrowed from what the front end hands over as `keep`. */
typedef const json_t *(*snug_server_field_fn)(void *ctx, const char *key);
/* A front end's body members that stand for chat fields as they are: chat field `chat` is the
 * body's member `body` (the same name when NULL). */
struct snug_field_alias {
    const char *chat, *body;
};
/* Whether map[0..n) names chat field `key`; then *out is the body's member (NULL: absent). */
bool snug_server_field_alias(const json_t *body, const char *key,
                             const struct snug_field_alias *map, size_t n, const json_t **out);
/* Fill *r (a chat request) from a front end's fields with the chat API's checks, in its order
 * and with its messages. `keep` (stolen) owns what the values borrow from: *r owns it on
 * success, it is released on failure. */
int snug_server_req_from_fields(struct snug_server_req *r, snug_server_field_fn get, void *ctx,
                                json_t *keep, struct snug_server_error *e);
void snug_server_req_free(struct snug_server_req *r);

/* Render a parsed chat request (borrowed) to its prompt text the way the server does (the
 * thinking default of `o`, reasoning_effort, continue_final_message, tools). *prompt is
 * snug_malloc'd on success; on failure returns -1 with *e set. */
int snug_server_render_req(const struct snug_server_opts *o, const struct snug_server_req *q,
                           char **prompt, size_t *len, struct snug_server_error *e);
/* Parse a body of the Anthropic Messages / OpenAI Responses API (no stored responses) into a
 * chat request; -1 with *e set on a bad body (a 4xx naming the field). */
int snug_server_messages_parse(struct snug_server_req *r, const json_t *body,
                               struct snug_server_error *e);
int snug_server_responses_parse(struct snug_server_req *r, const json_t *body,
                                struct snug_server_error *e);
/* POST /tokenize {"content": str, "parse_special": bool = true, "with_pieces": bool}: on
 * success q->root owns the JSON (json_decref it) and content/len borrow from it; 400 for a
 * wrong type, 413 for content over max_bytes (0 = no limit). Fuzzed (fuzz_server_tokenize). */
struct snug_tokenize_req {
    json_t *root;
    const char *content;
    size_t len;
    bool parse_special, with_pieces;
};
int snug_server_tokenize_parse(struct snug_tokenize_req *q, const char *body, size_t len,
                               size_t max_bytes, struct snug_server_error *e);
/* POST /detokenize {"tokens": [ids in [0, n_vocab)]}: *root owns the JSON, *tokens borrows. */
int snug_server_detokenize_parse(json_t **root, const json_t **tokens, const char *body, size_t len,
                                 int32_t n_vocab, struct snug_server_error *e);

struct snug_server_limits snug_server_limits_default(void);
/* 413 naming the limit and its flag when r exceeds one of lim's limits. */
int snug_server_req_check_limits(const struct snug_server_req *r,
                                 const struct snug_server_limits *lim, struct snug_server_error *e);

/* A tool name the server accepts: 1 to 64 characters of a-z A-Z 0-9 _ - . (OpenAI's rule plus
 * '.'); nothing that could close the template's "<function=NAME>" marker. */
bool snug_server_tool_name_ok(const char *name);

/* Cut n bytes of s back to the end of the last complete UTF-8 character (a NUL is written at
 * the new end); returns the new length. For fixed buffers that may have cut a character. */
size_t snug_utf8_trim_tail(char *s, size_t n);

/* Fill *e (returns e->http_status as a negative status-like value for convenience: -1). */
int snug_server_error_set(struct snug_server_error *e, int http_status, const char *type,
                          const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

#endif /* SNUG_SERVER_H */
