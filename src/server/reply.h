/* reply.h — struct reply: one generation request from admission to its last byte, and the
 * functions the request core (submit.c), the result core (reply.c, reply_engine.c) and the
 * formatters (fmt.h: fmt_openai.c, api_messages.c, api_responses.c) share over it.
 * Invariant: the engine thread (reply_engine.c) only appends the text that passed the stop
 * filter, logprobs and progress under mu and signals; the HTTP thread answering the request
 * owns everything after that: it moves the text through the output parser (snug_reply_pull)
 * and formats it, reading the engine's fields under mu.
 * Read next: reply.c (the result core), submit.c (the request core), fmt.h.
 */
#ifndef SNUG_SERVER_REPLY_H
#define SNUG_SERVER_REPLY_H

#include "server/constraint.h"
#include "server/fmt.h"
#include "server/images.h"
#include "server/outparse.h"
#include "server/schema.h"
#include "server/server_impl.h"
#include "server/stopfilter.h"
#include "server/think.h"

#include <pthread.h>

#define MAX_TOOL_CALLS 64

/* Stream state of the Anthropic / Responses event sequences: blocks (content blocks, output
 * items) are opened as the model moves from reasoning to text to tool calls. */
struct snug_api_stream {
    bool started, ended;
    int cur;        /* open block: -1 none, 0 reasoning, 1 text, 2 + i tool call i */
    int next_index; /* next content block / output index */
    int cur_index;  /* index of the open block */
    int64_t seq;    /* Responses: sequence_number */
    size_t text_from, reasoning_from; /* bytes already in earlier blocks */
    char item_id[112];                /* Responses: the open item's id */
    json_t *items;                    /* Responses: output items closed so far (owned) */
};

struct tool_call {
    struct snug_sbuf name, args;
    char id[40];
    bool head_sent;
    size_t args_sent;
};

struct lp_entry {
    snug_token id;
    struct snug_seq_logprob lp;
};

struct reply {
    struct snug_srv *srv;
    pthread_mutex_t mu; /* (of the group's first reply: every choice locks grp->mu) */
    pthread_cond_t cv;
    int refs; /* grp's: the connection, and one per choice until its job's on_done */
    /* n > 1 (chat / completions): the request's choices 1..n-1 are replies of their own (each
     * its job, constraint, parser, thinking bound, stop filter, buffers, SSE frame) that share
     * choice 0's mutex, refs, connection and prompt: grp is choice 0 (itself when alone), which
     * owns choices[0..n_choices-1) and answers for all of them */
    struct reply *grp;
    struct reply **choices;
    int n_choices; /* on grp: n (>= 1) */
    int index;     /* this choice's index */
    int n_done;    /* on grp: choices whose job ended (all done: the answer can be built) */
    bool choice_final, stream_failed; /* stream: this choice's last chunk written; an error */
    struct snug_engine_job job;
    struct snug_server_req req;
    const struct snug_fmt *fmt; /* the front end's formatter (fmt.h): the answer's shape */
    enum snug_route route;      /* the route counted in /metrics */
    json_t *fmt_ctx;            /* the front end's context for the answer (owned), or NULL */
    struct snug_think think;
    bool has_think;
    snug_token *prompt, *script;
    size_t *mark_bytes;   /* chat: message starts of the rendered prompt (bytes) */
    int32_t *mark_tokens; /* and in tokens (the job's msg_starts: the prefix cache's chunks) */
    struct snug_srv_images images;   /* chat: the image parts (images.h), the job's images */
    struct snug_outparse *parser;    /* chat only; HTTP side (snug_reply_pull) */
    struct snug_srv_constraint *con; /* grammar / logit_bias (constraint.h), or NULL */
    /* the job's constraint when bounded thinking and a grammar both apply (submit.c chain) */
    const struct snug_engine_constraint *chain_parts[2];
    struct snug_engine_constraint chain;
    char id[64];
    long created;
    struct MHD_Connection *conn; /* under mu; NULL once MHD let go of the connection */
    int poll_fd;    /* under mu: a non-streaming request's socket while it waits (else -1) */
    double poll_t0; /* when it was submitted (snug_time_s) */
    bool suspended; /* under mu: the connection waits for the engine */
    struct reply *live_prev, *live_next; /* srv->live list, under srv->live_mu */
    bool live;

    /* engine side, under mu */
    struct snug_stop_filter stop; /* stop strings (holds back a possible beginning of one) */
    int32_t prog_processed, prog_total, prog_cached, prog_sent; /* return_progress */
    double prog_ms;
    struct snug_sbuf text; /* text that passed the stop filter, not yet pulled */
    struct lp_entry *lps;
    size_t n_lps, cap_lps;
    bool done;
    enum snug_engine_finish finish;
    struct snug_engine_usage usage;
    char errmsg[512];

    /* HTTP side: the parsed output (snug_reply_pull), read by the formatters */
    struct snug_sbuf taken; /* a stream's text being parsed (swapped with `text`) */
    struct snug_sbuf content, reasoning;
    struct tool_call calls[MAX_TOOL_CALLS];
    int n_calls;
    size_t n_lps_in; /* the logprobs of the text pulled so far (of lps[]) */
    bool ended;      /* the job ended and all of its text went through the parser */
    bool oom;

    /* HTTP side (stream) */
    size_t content_sent, reasoning_sent, lps_sent;
    bool role_sent, final_sent;
    struct snug_api_stream as; /* Anthropic / Responses stream state */
    struct snug_sbuf out;      /* SSE bytes not yet read by MHD; reserved at admission */
    size_t out_pos;
    struct snug_sbuf frame; /* 'data: {"id":…,"choices":[{"index":0,' of every chunk */
};

/* Append one SSE event "data: <json>\n\n" (steals obj); with `event`, an "event: NAME" line
 * first (the Anthropic and Responses streams name their events). */
void snug_reply_sse(struct reply *r, const char *event, json_t *obj);
/* "stop", "length", "tool_calls" (the OpenAI finish reason of the ended job). */
const char *snug_reply_finish(const struct reply *r);
/* Choice i of the group g (0: g itself). */
struct reply *snug_reply_choice(struct reply *g, int i);

/* ---- the result core (reply.c), HTTP side ---- */
/* Move the text each choice's job produced since the last call through its output parser
 * (chat) or into its content (completions); a choice whose job ended and whose text is all in
 * becomes `ended`. Called with g->mu held; the parsing runs with it released. */
void snug_reply_pull(struct reply *g);
/* The output parser's events (outparse.h; user: the choice): appended to its content,
 * reasoning and tool calls. */
void snug_reply_on_parse(void *user, const struct snug_outparse_event *ev);
/* Drop a reference to the group r leads (r->mu held; released here). */
void snug_reply_unref_locked(struct reply *r);
void snug_reply_unref(struct reply *r);
/* Let MHD run the connection again when it waits for the engine (r->mu held). */
void snug_reply_wake_locked(struct reply *r);
/* Every choice's job has ended (g->mu held). */
bool snug_reply_group_done(const struct reply *g);
/* Cancel the group's jobs (g->mu held). */
void snug_reply_cancel_locked(struct reply *g);
/* A new group (one choice, one reference: the connection) answering in fmt's shape; the
 * request is read into r->req by the caller. NULL when out of memory (ctx then released). */
struct reply *snug_reply_new(struct snug_srv *s, const struct snug_fmt *fmt, enum snug_route route,
                             json_t *ctx);
/* Answer through MHD: a stream (the result core reads it out as events arrive) or a parked
 * connection answered once every choice ended. r's jobs are submitted; takes over the
 * connection's reference. */
enum MHD_Result snug_reply_answer(struct snug_srv *s, struct MHD_Connection *c, struct reply *r,
                                  void **pending);
/* An error answer in fmt's shape, counted in /metrics under route. */
enum MHD_Result snug_reply_fail(struct snug_srv *s, struct MHD_Connection *c, enum snug_route route,
                                const struct snug_fmt *fmt, const struct snug_server_error *e);

/* ---- the engine side (reply_engine.c) ---- */
/* Point the job's callbacks at choice r (progress events only when `progress`). */
void snug_reply_engine_hooks(struct reply *r, bool progress);
/* The engine's check between steps for a parked non-streaming request (engine.h). */
bool snug_reply_client_gone(void *user);

/* ---- the request core (submit.c) ---- */
/* Generate for a parsed request (moved into the answer: *q is left empty) answered in fmt's
 * shape; `ctx` (stolen, may be NULL) is the front end's context for its answer. */
enum MHD_Result snug_srv_submit(struct snug_srv *s, struct MHD_Connection *c,
                                const struct snug_fmt *fmt, enum snug_route route,
                                struct snug_server_req *q, json_t *ctx, void **pending);
/* Count the prompt tokens of a parsed chat request (borrowed) as the generation path would
 * render and tokenize it. Returns 0 or fills *e. */
int snug_srv_count_req_tokens(struct snug_srv *s, const struct snug_server_req *q,
                              int32_t *n_tokens, struct snug_server_error *e);

#endif
