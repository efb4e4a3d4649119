/* suite.h — the operational suite: `snug verify`, `snug stress`, `snug bench` against ANY
 * OpenAI-compatible endpoint (snug, vLLM, llama.cpp server), after docs/suite.md.
 *
 * Owns: an HTTP client (libcurl) with an SSE reader that records what a stream actually
 * delivered (chunks, [DONE], timings, usage), the three suites, and the bench SVG/compare.
 * Invariant: every check computes its status from what it received and nothing else — an
 * HTTP error body, an empty or unterminated stream, a missing field, a rejected request can
 * never produce "pass"; a skip carries a reason and is never a pass. Results are jansson
 * objects the CLI prints; nothing here prints to stdout.
 * Read next: client.c (HTTP/SSE), verify.c, stress.c, bench.c, svg.c; docs/suite.md.
 */
#ifndef SNUG_SUITE_H
#define SNUG_SUITE_H

#include "snug.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* ==== client ================================================================================ */

struct snug_suite_client {
    char base[512];     /* "http://host:port" (no trailing "/", no "/v1") */
    char model[256];    /* served model id; "" until known (snug_suite_discover_model) */
    char api_key[4096]; /* "" = no Authorization header; a longer key is refused at init */
    double timeout_s;   /* per generation request (default 600) */
};

/* url: "http://h:p", "http://h:p/", "http://h:p/v1" all mean the same server; NULL =
 * http://127.0.0.1:8080. model/api_key may be NULL. */
int snug_suite_client_init(struct snug_suite_client *c, const char *url, const char *model,
                           const char *api_key, struct snug_err *err);

/* A buffered HTTP exchange. status 0 = no HTTP answer (error says why: refused, timeout...). */
struct snug_suite_http {
    long status;
    char *body; /* NUL-terminated, len bytes (may be "") */
    size_t len;
    json_t *json; /* the body parsed as JSON, or NULL */
    double wall_s;
    char error[256];
};

/* GET/POST base+path. Returns SNUG_OK whenever the exchange was attempted (inspect status);
 * an error only for out-of-memory / bad arguments. body may be NULL for POST (empty object). */
int snug_suite_get(const struct snug_suite_client *c, const char *path, double timeout_s,
                   struct snug_suite_http *out, struct snug_err *err);
int snug_suite_post(const struct snug_suite_client *c, const char *path, const json_t *body,
                    double timeout_s, struct snug_suite_http *out, struct snug_err *err);
void snug_suite_http_free(struct snug_suite_http *h);

/* What a streamed chat completion delivered, assembled from the SSE events. */
struct snug_suite_stream {
    long status;     /* HTTP status; 0 = no answer (error) */
    char error[256]; /* transport error */
    char *raw;       /* the first 64 KiB of the body (the error body on non-200) */
    size_t raw_len;
    bool done;                                               /* saw "data: [DONE]" */
    int n_events;                                            /* data events that parsed as JSON */
    int n_bad_events;                                        /* data lines that did not parse */
    int n_content_chunks, n_reasoning_chunks, n_tool_chunks; /* deltas with non-empty text */
    char *content; /* concatenated delta.content (NUL-terminated, never NULL after run) */
    size_t content_len;
    char *reasoning; /* concatenated delta.reasoning_content (or .reasoning) */
    size_t reasoning_len;
    json_t *tool_calls;  /* [{"name": str, "arguments": str}] assembled by index */
    json_t *usage;       /* the last non-null "usage" seen, or NULL */
    json_t *timings;     /* the last "timings" (llama.cpp / snug), or NULL */
    json_t *error_event; /* an in-stream {"error": ...} event, or NULL */
    char finish_reason[32];
    double t_first;  /* seconds to the first non-empty content/reasoning/tool delta; -1 */
    double t_finish; /* seconds to the event carrying finish_reason; -1 */
    double wall_s;
};

/* The SSE reader of snug_suite_stream_chat over a body already received, fed in pieces of
 * `chunk` bytes (as libcurl would hand them over): for tests and tests/fuzz/fuzz_suite_sse.c.
 * The result does not depend on `chunk`. */
int snug_suite_sse_parse(const char *body, size_t n, size_t chunk, struct snug_suite_stream *out,
                         struct snug_err *err);

/* POST /v1/chat/completions with body (which must ask for "stream": true) and read the SSE. */
int snug_suite_stream_chat(const struct snug_suite_client *c, const json_t *body, double timeout_s,
                           struct snug_suite_stream *out, struct snug_err *err);
void snug_suite_stream_free(struct snug_suite_stream *s);

/* ---- helpers shared by the suites ---------------------------------------------------------- */

/* A chat request body: one user message (and system when non-NULL), max_tokens, temperature,
 * thinking 0/1 (sent as chat_template_kwargs.enable_thinking) or -1 (not sent), the client's
 * model when known. New reference. */
json_t *snug_suite_chat_body(const struct snug_suite_client *c, const char *system,
                             const char *user, int max_tokens, double temperature, int thinking);

/* Views into a non-streamed chat response (borrowed; NULL when absent or of the wrong type). */
struct snug_suite_msg {
    const char *content, *reasoning, *finish_reason;
    const json_t *tool_calls; /* array */
};
/* Fills *m from a 200 response; returns false (and *m zeroed) when the response is not a chat
 * completion (no choices[0].message object). */
bool snug_suite_msg_of(const struct snug_suite_http *h, struct snug_suite_msg *m);

/* A short human description of a failed exchange: "HTTP 400: <error.message>" or the transport
 * error, into buf. */
const char *snug_suite_describe(long status, const char *error, const char *body, char *buf,
                                size_t n);

/* If c->model is empty, fill it from GET /v1/models (the first id). Failure is not fatal for
 * the callers (requests then omit "model"). */
void snug_suite_discover_model(struct snug_suite_client *c);

/* The server's context limit per request: /health plan.n_ctx (snug), /v1/models
 * data[].meta.n_ctx or max_model_len (llama.cpp, vLLM), /props (llama.cpp). *source names
 * where it came from. Returns SNUG_OK or SNUG_ERR_UNSUPPORTED with a message. */
int snug_suite_context_limit(const struct snug_suite_client *c, long *n_ctx, char *source,
                             size_t source_n, struct snug_err *err);

/* Token count of text by the server's own /tokenize (snug, llama.cpp: {"content"}; vLLM:
 * {"prompt"}). Returns the count, or -1 when the server has no usable tokenizer endpoint. */
long snug_suite_count_tokens(const struct snug_suite_client *c, const char *text);

/* Speculative-decoding counters: accepted draft tokens and drafting steps, summed over the
 * known metric names in GET /metrics. Returns 1 with the values, 0 when /metrics exposes no
 * such counter (why in reason), -1 when there is no /metrics at all. */
int snug_suite_spec_counters(const struct snug_suite_client *c, double *accepted, double *drafts,
                             char *reason, size_t reason_n);

/* Memory readings (a new JSON object, name -> number) from /health and /metrics; NULL when
 * neither has any. */
json_t *snug_suite_memory(const struct snug_suite_client *c);

/* GET /health (or /v1/models when /health is absent) answers 200 within 5 s. */
bool snug_suite_alive(const struct snug_suite_client *c);

/* Random 64-bit values for salts and needles (from /dev/urandom, else time ^ pid). */
unsigned long long snug_suite_random(void);

/* A salted haystack of about n_tokens tokens (measured with /tokenize when the server has it,
 * else estimated at 4 characters per token): a random salt line first (so no prefix cache can
 * reuse it), filler paragraphs, and `middle` (may be NULL) inserted at the midpoint. *measured
 * gets the server's count of the result, or -1. Returns a snug_malloc'd string or NULL. */
char *snug_ops_haystack(const struct snug_suite_client *c, long n_tokens, const char *middle,
                        long *measured);

/* ==== suites ================================================================================ */

/* Progress: called before each step with a label, steps done and steps total. */
typedef void (*snug_ops_progress_fn)(void *user, const char *label, int done, int total);

/* A result row: {"name", "status": "pass"|"fail"|"skip"|"rejected", "detail", ...}. */
json_t *snug_ops_check(const char *name, const char *status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Number of rows in checks with status "fail". */
int snug_ops_count_failed(const json_t *checks);

struct snug_ops_verify_opts {
    int max_tokens; /* caps every check's max_tokens (each keeps its pass condition); 0 = none */
};
/* verify: the 9 functional checks (o NULL = defaults). *out = {"server": {...},
 * "max_tokens_cap", "checks": [...]}. */
int snug_ops_verify(struct snug_suite_client *c, const struct snug_ops_verify_opts *o,
                    snug_ops_progress_fn progress, void *user, json_t **out, struct snug_err *err);

struct snug_ops_stress_opts {
    long n_ctx;              /* 0 = discover */
    const double *fractions; /* needle rung depths as fractions of the limit (<= 0.95) */
    int n_fractions;         /* 0 = the default ladder */
    bool over_limit;         /* also send one rung beyond the limit (default on in the CLI) */
    const char *needle;      /* fixed "<color> <animal> <NN>" (tests); NULL = random */
    int max_tokens;          /* for the long-answer probes; 0 = spec values */
    unsigned parts;          /* SNUG_STRESS_* bits of the parts to run; 0 = all */
};
/* The parts of stress, by the names of their result rows ("ladder" is the needle rungs and
 * their "needle-ladder" row); over_limit = false drops SNUG_STRESS_BEYOND too. */
enum {
    SNUG_STRESS_LADDER = 1u << 0,  /* "ladder" */
    SNUG_STRESS_BEYOND = 1u << 1,  /* "beyond-limit" */
    SNUG_STRESS_TOOL100 = 1u << 2, /* "tool-prefill-100K" */
    SNUG_STRESS_TOOL130 = 1u << 3, /* "tool-prefill-130K" */
    SNUG_STRESS_IDE = 1u << 4,     /* "ide-agent-oneshot" */
    SNUG_STRESS_MULTI = 1u << 5,   /* "multi-turn-agent" */
};
/* Parse "name,name,..." (the names above) into SNUG_STRESS_* bits. Returns 0, or -1 with the
 * unknown name and the valid ones in why. */
int snug_ops_stress_parts(const char *list, unsigned *out, char *why, size_t why_n);
/* stress: needle ladder, tool-response prefill (100K/130K chars), IDE-agent one-shot,
 * multi-turn agent. *out = {"server", "context": {"n_ctx", "source"}, "checks", "ladder"}. */
int snug_ops_stress(struct snug_suite_client *c, const struct snug_ops_stress_opts *o,
                    snug_ops_progress_fn progress, void *user, json_t **out, struct snug_err *err);

struct snug_ops_bench_opts {
    int warmup, runs;                 /* per prompt; defaults 3, 5 */
    int max_tokens;                   /* 0 = the spec's per-prompt values */
    int prefill_warmup, prefill_runs; /* defaults 1, 3 */
    const long *depths;               /* prefill depths in tokens; NULL = 10K, 90K, deeper */
    int n_depths;                     /* -1 with depths NULL: no prefill probe */
    long n_ctx;                       /* 0 = discover */
};
/* bench: the canonical protocol and the prefill probe. *out = {"server", "protocol",
 * "prompts": [{"name", "runs", "stats"}], "acceptance", "prefill": [...]}. */
int snug_ops_bench(struct snug_suite_client *c, const struct snug_ops_bench_opts *o,
                   snug_ops_progress_fn progress, void *user, json_t **out, struct snug_err *err);

/* Ratios of this run against an earlier bench JSON (matched by prompt name and depth): a new
 * object {"prompts": {name: {metric: ratio}}, "prefill": [...]}. */
json_t *snug_ops_bench_compare(const json_t *now, const json_t *before);

/* The bench results as an SVG document (bars per prompt; prefill tokens/s against depth).
 * Returns a snug_malloc'd NUL-terminated string or NULL on out-of-memory. */
char *snug_ops_bench_svg(const json_t *bench);

/* bench --agent-replay (replay.c): a recorded agent conversation replayed turn by turn (the
 * file format is in replay.c's comment). *out = {"name", "server", "turns": [{"turn", "ok",
 * "ttft_s", "wall_s", "prompt_tokens", "cached_tokens", "messages", "prev_prompt_tokens",
 * "reuse_of_prev", "output": {"reasoning", "content", "tool_calls"}}], "summary": {...}}.
 * SNUG_ERR_FORMAT for a malformed file (nothing sent). */
int snug_ops_replay_validate(const json_t *replay, struct snug_err *err);
int snug_ops_agent_replay(struct snug_suite_client *c, const json_t *replay,
                          snug_ops_progress_fn progress, void *user, json_t **out,
                          struct snug_err *err);

#endif /* SNUG_SUITE_H */
