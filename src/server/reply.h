/* reply.h — struct reply: one generation request from admission to its last byte, shared by
 * reply.c (the OpenAI chat/completions answers and the engine callbacks) and the other API front
 * ends that answer from the same state: api_messages.c (Anthropic Messages) and api_responses.c
 * (OpenAI Responses).
 * Invariant: the engine side writes under mu; the HTTP side reads under mu and owns the stream
 * state; the API builders are called with mu held and only read the engine-side fields.
 * Read next: reply.c, api_messages.c, api_responses.c.
 */
#ifndef SNUG_SERVER_REPLY_H
#define SNUG_SERVER_REPLY_H

#include "server/constraint.h"
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
    enum snug_api api;     /* which API answers */
    enum snug_route route; /* the route counted in /metrics */
    json_t *api_extra;     /* the front end's context for the answer (owned), or NULL */
    struct snug_think think;
    bool has_think;
    snug_token *prompt, *script;
    size_t *mark_bytes;   /* chat: message starts of the rendered prompt (bytes) */
    int32_t *mark_tokens; /* and in tokens (the job's msg_starts: the prefix cache's chunks) */
    struct snug_srv_images images;   /* chat: the image parts (images.h), the job's images */
    struct snug_outparse *parser;    /* chat only */
    struct snug_srv_constraint *con; /* grammar / logit_bias (constraint.h), or NULL */
    /* the job's constraint when bounded thinking and a grammar both apply (reply.c chain) */
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
    struct snug_sbuf content, reasoning;
    struct tool_call calls[MAX_TOOL_CALLS];
    int n_calls;
    struct lp_entry *lps;
    size_t n_lps, cap_lps;
    bool oom;
    bool done;
    enum snug_engine_finish finish;
    struct snug_engine_usage usage;
    char errmsg[512];

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

/* ---- the front ends (each answers from a reply whose job ran; r->mu held) ---- */
json_t *snug_msgs_final(struct reply *r);
void snug_msgs_stream(struct reply *r);
json_t *snug_resp_final(struct reply *r);
void snug_resp_stream(struct reply *r);
/* Called once when a Responses job ended well with its final response object (borrowed):
 * stores the conversation for previous_response_id, the response and its input items for
 * GET /v1/responses/{id} (and /input_items), unless the request said store: false. */
void snug_resp_finished(struct reply *r, const json_t *resp);

#endif
