/* fmt.h — the formatter table: what an API front end gives the generation core to shape its
 * answers. OpenAI chat and completions (fmt_openai.c), Anthropic Messages (api_messages.c) and
 * OpenAI Responses (api_responses.c) each define one; the core (submit.c sets a request up,
 * reply.c answers it) calls only through the table and never names an API, and http.c picks a
 * route's error shape by its table.
 * Invariant: the entries run on the HTTP thread answering the request, with the group's mutex
 * held (reply.h); they read the reply's parsed output (content, reasoning, tool calls), its
 * request and what the engine reported, and write only the stream bytes and their own stream
 * state.
 * Read next: reply.h (the state a formatter reads), fmt_openai.c (the simplest table).
 */
#ifndef SNUG_SERVER_FMT_H
#define SNUG_SERVER_FMT_H

#include "server/server.h"

#include <jansson.h>

struct reply;

struct snug_fmt {
    const char *id_prefix; /* the answer's id: "chatcmpl-", "cmpl-", "msg_", "resp_" */
    /* once per choice of a stream, before its job is submitted (the stream's fixed parts);
     * 0, or -1 when out of memory. NULL: nothing to prepare */
    int (*prepare)(struct reply *r);
    /* the group's new stream events into g->out; its last event once every choice ended */
    void (*stream)(struct reply *g);
    /* the non-streaming answer (a new object; NULL when out of memory) */
    json_t *(*final)(struct reply *g);
    /* after the non-streaming answer `body` (borrowed) was built; NULL: nothing to do */
    void (*finished)(struct reply *g, const json_t *body);
    /* an error answer's body in the API's shape (NULL: OpenAI's {"error": {...}}), and the
     * fixed body sent when that cannot be built */
    json_t *(*error_body)(const struct snug_server_error *e);
    const char *error_oom_body;
};

/* The tables (each defined by its front end). */
extern const struct snug_fmt snug_fmt_chat, snug_fmt_completion, snug_fmt_messages,
    snug_fmt_responses;

#endif /* SNUG_SERVER_FMT_H */
