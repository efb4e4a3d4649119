/* reply_engine.c — the engine thread's side of a reply: the callbacks of a generation job
 * (engine.h). A token's text goes through the stop strings (holding back a possible beginning
 * of one) and is appended, as it is, to the choice's text buffer, with its logprobs; prompt
 * progress and the job's end are recorded; then the HTTP side is woken. Nothing here parses or
 * formats: the output parser and the formatters run on the HTTP thread (reply.c), so the
 * engine waits on a reply's mutex only for an append or a buffer swap.
 * Invariant: every callback takes the group's mutex and touches only the engine-side fields of
 * struct reply (reply.h); the buffers were reserved at admission, so a token allocates nothing.
 * Read next: reply.c (snug_reply_pull, where the text is parsed), engine.h.
 */
#define _GNU_SOURCE
#include "server/reply.h"

#include "server/server_impl.h"

#include "core/core.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* Text that passed the stop-string filter: kept for the HTTP side (g->mu held). */
static void sink_cb(void *user, const char *s, size_t n) {
    struct reply *r = user;
    if (n) snug_sbuf_append(&r->text, s, n);
}

/* Engine callback (requests with return_progress): a prompt chunk is done; the HTTP side
 * turns it into a prompt_progress event. */
static void on_progress(void *user, int32_t processed, int32_t total, int32_t cached, double ms) {
    struct reply *r = user, *g = r->grp;
    pthread_mutex_lock(&g->mu);
    r->prog_processed = processed;
    r->prog_total = total;
    r->prog_cached = cached;
    r->prog_ms = ms;
    pthread_cond_broadcast(&g->cv);
    if (r->req.stream)
        snug_reply_wake_locked(g); /* the suspended stream sends the progress event */
    pthread_mutex_unlock(&g->mu);
}

/* Engine callback: a token's text. Applies stop strings (holding back a possible beginning of
 * one), records logprobs, wakes the HTTP side. Returns true when a stop string matched. */
static bool on_token(void *user, snug_token id, const char *text, size_t len,
                     const struct snug_seq_logprob *lp) {
    struct reply *r = user, *g = r->grp;
    pthread_mutex_lock(&g->mu);
    if (lp && id >= 0) {
        if (r->n_lps == r->cap_lps) {
            size_t cap = r->cap_lps ? r->cap_lps * 2 : 64;
            struct lp_entry *n = snug_malloc(cap * sizeof *n);
            if (n) {
                if (r->n_lps) memcpy(n, r->lps, r->n_lps * sizeof *n);
                snug_free(r->lps);
                r->lps = n;
                r->cap_lps = cap;
            }
        }
        if (r->n_lps < r->cap_lps) r->lps[r->n_lps++] = (struct lp_entry){id, *lp};
    }
    bool stop = snug_stop_feed(&r->stop, text, len, sink_cb, r);
    pthread_cond_broadcast(&g->cv);
    if (r->req.stream)
        snug_reply_wake_locked(g); /* a waiting non-stream request only needs on_done */
    pthread_mutex_unlock(&g->mu);
    return stop;
}

/* Engine callback: the job ended. Releases what was held back (the HTTP side closes the
 * parser once it has pulled the rest). */
static void on_done(void *user, enum snug_engine_finish fin, const struct snug_engine_usage *u,
                    const char *msg) {
    struct reply *r = user, *g = r->grp;
    pthread_mutex_lock(&g->mu);
    snug_stop_flush(&r->stop, sink_cb, r);
    r->finish = fin;
    r->usage = *u;
    if (msg) snprintf(r->errmsg, sizeof r->errmsg, "%s", msg);
    r->done = true;
    g->n_done++;
    pthread_cond_broadcast(&g->cv);
    if (r->req.stream || snug_reply_group_done(g)) snug_reply_wake_locked(g);
    snug_reply_unref_locked(g);
}

/* A client that half-closes its side right after sending the request (shutdown(SHUT_WR)) still
 * gets its answer: an end of stream seen this soon after the request is taken as that. */
#define HALF_CLOSE_WINDOW_S 0.25

/* The engine's check between steps for a non-streaming request (engine.h client_gone): its
 * connection is parked, so MHD would notice a client that left only at the answer. A peek at
 * the socket tells: a reset, or an end of stream later than HALF_CLOSE_WINDOW_S after the
 * request, means the client closed it (a close and a half-close look the same from here: the
 * latter is only told apart by its timing; a half-close is then not watched any more). */
bool snug_reply_client_gone(void *user) {
    struct reply *r = ((struct reply *)user)->grp; /* the group holds the connection */
    pthread_mutex_lock(&r->mu);
    bool gone = false;
    if (r->poll_fd >= 0 && !snug_reply_group_done(r)) {
        char b;
        ssize_t n = recv(r->poll_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 && snug_time_s() - r->poll_t0 < HALF_CLOSE_WINDOW_S)
            r->poll_fd = -1; /* a half-close with the request: it waits for its answer */
        else
            gone = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        if (gone) r->poll_fd = -1;
    }
    pthread_mutex_unlock(&r->mu);
    return gone;
}

void snug_reply_engine_hooks(struct reply *r, bool progress) {
    r->job.on_token = on_token;
    r->job.on_done = on_done;
    r->job.on_progress = progress ? on_progress : NULL;
    r->job.user = r;
}
