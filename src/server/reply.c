/* reply.c — the result core: a generation request's reply from its submission to its last
 * byte, whichever API it came in through. The engine thread's callbacks (reply_engine.c) only
 * append text and signal; here, on the HTTP thread that serves the answer, that text goes
 * through the output parser (snug_reply_pull: reasoning, content, tool calls) and the front
 * end's formatter (fmt.h) turns it into stream events or the final body. A stream is read out
 * by MHD as events come (the connection is suspended while there is nothing new, so no thread
 * waits); a non-streaming request parks its connection until every choice ended. A stream whose
 * client went away fails to send and is cancelled, its slot freed; a client that only
 * half-closed its side still gets the answer.
 * Owns: struct reply's lifetime (refs: the connection and one per job) and the live list.
 * Invariant: nothing here names an API: every answer's shape comes from r->fmt.
 * Read next: reply_engine.c (where the text comes from), fmt_openai.c (a formatter), submit.c.
 */
#define _GNU_SOURCE
#include "server/reply.h"

#include "server/outparse.h"
#include "server/server_impl.h"

#include "core/core.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== lifetime ============================================================================== */

static void live_add(struct reply *r) {
    struct snug_srv *s = r->srv;
    pthread_mutex_lock(&s->live_mu);
    r->live_prev = NULL;
    r->live_next = s->live;
    if (s->live) s->live->live_prev = r;
    s->live = r;
    s->n_live++;
    r->live = true;
    pthread_mutex_unlock(&s->live_mu);
}

static void live_remove(struct reply *r) {
    struct snug_srv *s = r->srv;
    pthread_mutex_lock(&s->live_mu);
    if (r->live) {
        if (r->live_prev)
            r->live_prev->live_next = r->live_next;
        else
            s->live = r->live_next;
        if (r->live_next) r->live_next->live_prev = r->live_prev;
        s->n_live--;
        r->live = false;
    }
    pthread_mutex_unlock(&s->live_mu);
}

struct reply *snug_reply_new(struct snug_srv *s, const struct snug_fmt *fmt, enum snug_route route,
                             json_t *ctx) {
    struct reply *r = snug_calloc(1, sizeof *r);
    if (!r) {
        json_decref(ctx);
        return NULL;
    }
    r->poll_fd = -1;
    r->srv = s;
    r->refs = 1;
    r->fmt = fmt;
    r->fmt_ctx = ctx;
    r->as.cur = -1;
    r->route = route;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->grp = r;
    r->n_choices = 1;
    return r;
}

/* What one choice holds of its own (its job's constraint, parser, buffers, stream state). */
static void choice_free(struct reply *r) {
    snug_outparse_free(r->parser);
    snug_srv_constraint_free(r->con);
    snug_server_req_free(&r->req);
    snug_stop_free(&r->stop);
    snug_sbuf_free(&r->text);
    snug_sbuf_free(&r->taken);
    snug_sbuf_free(&r->content);
    snug_sbuf_free(&r->reasoning);
    for (int i = 0; i < r->n_calls; i++) {
        snug_sbuf_free(&r->calls[i].name);
        snug_sbuf_free(&r->calls[i].args);
    }
    snug_free(r->lps);
    if (r->has_think) snug_think_free(&r->think);
    json_decref(r->as.items);
    snug_sbuf_free(&r->out);
    snug_sbuf_free(&r->frame);
}

/* Drop a reference to the group r leads (r->mu held; released here). */
void snug_reply_unref_locked(struct reply *r) {
    if (--r->refs > 0) {
        pthread_mutex_unlock(&r->mu);
        return;
    }
    pthread_mutex_unlock(&r->mu);
    live_remove(r);
    for (int i = 0; i + 1 < r->n_choices; i++) {
        if (!r->choices[i]) continue;
        choice_free(r->choices[i]);
        snug_free(r->choices[i]);
    }
    snug_free(r->choices);
    choice_free(r);
    snug_free(r->prompt);
    snug_free(r->mark_bytes);
    snug_free(r->mark_tokens);
    snug_srv_images_free(&r->images);
    snug_free(r->script);
    json_decref(r->fmt_ctx);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    snug_free(r);
}

void snug_reply_unref(struct reply *r) {
    pthread_mutex_lock(&r->mu);
    snug_reply_unref_locked(r);
}

struct reply *snug_reply_choice(struct reply *g, int i) {
    return i == 0 ? g : g->choices[i - 1];
}

bool snug_reply_group_done(const struct reply *g) {
    return g->n_done >= g->n_choices;
}

/* Let MHD run the connection again when it waits for the engine (r->mu held). MHD allows
 * resuming from any thread; suspending happens only in MHD's callbacks, also under r->mu, so
 * a resume never precedes its suspend. */
void snug_reply_wake_locked(struct reply *r) {
    if (r->suspended && r->conn) {
        r->suspended = false;
        MHD_resume_connection(r->conn);
    }
}

static void suspend_locked(struct reply *r, struct MHD_Connection *c) {
    r->conn = c;
    r->suspended = true;
    MHD_suspend_connection(c);
}

/* ==== engine side =========================================================================== */

/* ==== the output parser, on the HTTP side ==================================================== */

/* Output-parser events: append to the accumulated fields (the HTTP thread answering r). */
void snug_reply_on_parse(void *user, const struct snug_outparse_event *ev) {
    struct reply *r = user;
    switch (ev->kind) {
    case SNUG_OUTPARSE_REASONING:
        snug_sbuf_append(&r->reasoning, ev->text, ev->len);
        break;
    case SNUG_OUTPARSE_CONTENT:
        snug_sbuf_append(&r->content, ev->text, ev->len);
        break;
    case SNUG_OUTPARSE_TOOL_START:
        if (r->n_calls < MAX_TOOL_CALLS && ev->index == r->n_calls) {
            struct tool_call *t = &r->calls[r->n_calls++];
            snug_sbuf_puts(&t->name, ev->name ? ev->name : "");
            snprintf(t->id, sizeof t->id, "call_%08llx%04x",
                     (unsigned long long)atomic_fetch_add(&r->srv->id_counter, 1) + 1000,
                     (unsigned)(r->created & 0xffff));
        }
        break;
    case SNUG_OUTPARSE_TOOL_ARGS:
        if (ev->index >= 0 && ev->index < r->n_calls)
            snug_sbuf_append(&r->calls[ev->index].args, ev->text, ev->len);
        break;
    case SNUG_OUTPARSE_TOOL_END:
        if (ev->index >= 0 && ev->index < r->n_calls) {
            struct tool_call *t = &r->calls[ev->index];
            /* the deltas concatenate to this text; trust the complete one when nothing
             * has been streamed yet */
            if (t->args_sent == 0 && ev->text) {
                snug_sbuf_reset(&t->args);
                snug_sbuf_append(&t->args, ev->text, strlen(ev->text));
            }
        }
        break;
    case SNUG_OUTPARSE_END:
        break;
    }
}

/* Text of the job to the parser (chat) or the content (completion). */
static void feed(struct reply *r, const char *s, size_t n) {
    if (!n) return;
    if (r->parser) {
        struct snug_err err = {0};
        if (snug_outparse_feed(r->parser, s, n, &err) != SNUG_OK) r->oom = true;
    } else {
        snug_sbuf_append(&r->content, s, n);
    }
}

void snug_reply_pull(struct reply *g) {
    struct snug_sbuf *src[SNUG_REQ_MAX_N];
    bool last[SNUG_REQ_MAX_N], any = false;
    for (int i = 0; i < g->n_choices; i++) {
        struct reply *r = snug_reply_choice(g, i);
        src[i] = NULL;
        last[i] = false;
        if (r->ended) continue;
        r->n_lps_in = r->n_lps; /* the logprobs of the text taken now */
        if (r->done) {          /* the engine is done with r->text: parsed where it is */
            src[i] = &r->text;
            last[i] = true;
        } else if (r->text.len) { /* the engine goes on in the other (reserved) buffer */
            struct snug_sbuf t = r->taken;
            r->taken = r->text;
            r->text = t;
            src[i] = &r->taken;
        }
        any = any || src[i];
    }
    if (!any) return;
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < g->n_choices; i++) {
        struct reply *r = snug_reply_choice(g, i);
        if (!src[i]) continue;
        if (src[i]->oom) r->oom = true;
        feed(r, src[i]->data, src[i]->len);
        snug_sbuf_reset(src[i]);
        if (!last[i]) continue;
        if (r->parser) {
            struct snug_err err = {0};
            if (snug_outparse_finish(r->parser, &err) != SNUG_OK) r->oom = true;
        }
        r->ended = true;
    }
    pthread_mutex_lock(&g->mu);
}

/* Text or an end the HTTP side has not pulled yet (g->mu held). */
static bool pull_pending(struct reply *g) {
    for (int i = 0; i < g->n_choices; i++) {
        const struct reply *r = snug_reply_choice(g, i);
        if (!r->ended && (r->text.len || r->done)) return true;
    }
    return false;
}

/* ==== answers =============================================================================== */

const char *snug_reply_finish(const struct reply *r) {
    switch (r->finish) {
    case SNUG_FINISH_STOP:
        return r->n_calls > 0 ? "tool_calls" : "stop";
    case SNUG_FINISH_LENGTH:
    case SNUG_FINISH_TIMEOUT:
        return r->n_calls > 0 ? "tool_calls" : "length";
    default:
        return "stop";
    }
}

void snug_reply_sse(struct reply *r, const char *event, json_t *obj) {
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!s) {
        r->oom = true;
        return;
    }
    if (event) {
        snug_sbuf_puts(&r->out, "event: ");
        snug_sbuf_puts(&r->out, event);
        snug_sbuf_putc(&r->out, '\n');
    }
    snug_sbuf_puts(&r->out, "data: ");
    snug_sbuf_puts(&r->out, s);
    snug_sbuf_puts(&r->out, "\n\n");
    free(s);
}

/* Cancel the group's jobs because the client is gone (g->mu held). */
void snug_reply_cancel_locked(struct reply *g) {
    for (int i = 0; i < g->n_choices; i++) {
        struct reply *r = snug_reply_choice(g, i);
        if (r && !r->done) {
            atomic_store(&r->job.cancel, true);
            snug_engine_wake(r->srv->engine);
        }
    }
}

/* MHD content reader for a stream: hands out pending SSE bytes, waiting for new ones. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    struct reply *r = cls;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (r->out.len > r->out_pos) {
            size_t n = r->out.len - r->out_pos;
            if (n > max) n = max;
            memcpy(buf, r->out.data + r->out_pos, n);
            r->out_pos += n;
            if (r->out_pos == r->out.len) {
                snug_sbuf_reset(&r->out);
                r->out_pos = 0;
            }
            pthread_mutex_unlock(&r->mu);
            return (ssize_t)n;
        }
        if (r->final_sent) {
            int32_t n_gen = 0;
            for (int i = 0; i < r->n_choices; i++) n_gen += snug_reply_choice(r, i)->usage.n_gen;
            snug_srv_log_usage(r->usage.n_prompt, n_gen, r->usage.n_cached);
            pthread_mutex_unlock(&r->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        snug_reply_pull(r);
        r->fmt->stream(r);
        if (r->out.oom) { /* events may be cut: drop them, the error event below says why */
            snug_sbuf_free(&r->out);
            r->out_pos = 0;
            r->oom = true;
        }
        if (r->out.len > r->out_pos) continue;
        if (r->oom) { /* end the stream with a fixed error event (no allocation needed) */
            static const char OOM_END[] =
                "data: {\"error\":{\"message\":\"out of memory while streaming\","
                "\"type\":\"server_error\",\"code\":500}}\n\ndata: [DONE]\n\n";
            snug_reply_cancel_locked(r);
            r->final_sent = true;
            pthread_mutex_unlock(&r->mu);
            if (max < sizeof OOM_END - 1) return MHD_CONTENT_READER_END_WITH_ERROR;
            memcpy(buf, OOM_END, sizeof OOM_END - 1);
            return (ssize_t)(sizeof OOM_END - 1);
        }
        if (pull_pending(r)) continue; /* the engine added some while the parser ran */
        /* nothing new: park the connection until the engine's next callback (a client that
         * left is noticed when the next bytes fail to send) */
        suspend_locked(r, r->conn);
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
}

/* MHD is done with the stream response (finished or the connection dropped). */
static void stream_free(void *cls) {
    struct reply *r = cls;
    pthread_mutex_lock(&r->mu);
    r->conn = NULL;
    r->suspended = false;
    snug_reply_cancel_locked(r);
    snug_reply_unref_locked(r);
}

/* ==== the request =========================================================================== */

enum MHD_Result snug_reply_fail(struct snug_srv *s, struct MHD_Connection *c, enum snug_route route,
                                const struct snug_fmt *fmt, const struct snug_server_error *e) {
    snug_srv_count(s, route, (unsigned)e->http_status);
    return snug_srv_send_api_error(c, fmt, e);
}

/* The answer of a finished non-streaming generation (r->mu held; lets go of r). */
static enum MHD_Result finish_locked(struct snug_srv *s, struct MHD_Connection *c,
                                     struct reply *r) {
    enum snug_route route = r->route;
    const struct snug_fmt *fmt = r->fmt;
    struct snug_server_error e;
    r->conn = NULL;
    r->poll_fd = -1;
    snug_reply_pull(r); /* every job ended: all of their text through the parsers */
    int32_t n_gen = 0;
    for (int i = 0; i < r->n_choices; i++) { /* the first choice that did not end well decides */
        struct reply *ch = snug_reply_choice(r, i);
        n_gen += ch->usage.n_gen;
        if (ch->finish == SNUG_FINISH_CANCEL) {
            snug_reply_unref_locked(r);
            snug_server_error_set(&e, 503, "server_error", NULL,
                                  "the request was cancelled: the server is shutting down (or "
                                  "the client went away)");
            return snug_reply_fail(s, c, route, fmt, &e);
        }
        if (ch->finish == SNUG_FINISH_ERROR || ch->oom) {
            snug_server_error_set(&e, 500, "server_error", NULL, "generation failed: %s",
                                  ch->oom ? "out of memory" : ch->errmsg);
            snug_reply_unref_locked(r);
            return snug_reply_fail(s, c, route, fmt, &e);
        }
    }
    snug_srv_log_usage(r->usage.n_prompt, n_gen, r->usage.n_cached);
    json_t *out = fmt->final(r);
    if (out && fmt->finished) fmt->finished(r, out);
    snug_reply_unref_locked(r);
    snug_srv_count(s, route, 200);
    return snug_srv_send_json(c, 200, out);
}

enum MHD_Result snug_srv_generate_resume(struct snug_srv *s, struct MHD_Connection *c,
                                         void **pending) {
    struct reply *r = *pending;
    pthread_mutex_lock(&r->mu);
    if (!snug_reply_group_done(r)) { /* woken early (a token): park again until on_done */
        suspend_locked(r, c);
        pthread_mutex_unlock(&r->mu);
        return MHD_YES;
    }
    *pending = NULL;
    return finish_locked(s, c, r);
}

void snug_srv_generate_abandon(void *pending) {
    struct reply *r = pending;
    pthread_mutex_lock(&r->mu);
    r->conn = NULL;
    r->poll_fd = -1;
    r->suspended = false;
    snug_reply_cancel_locked(r);
    snug_reply_unref_locked(r);
}

int snug_srv_live_count(struct snug_srv *s) {
    pthread_mutex_lock(&s->live_mu);
    int n = s->n_live;
    pthread_mutex_unlock(&s->live_mu);
    return n;
}

int snug_srv_cancel_all(struct snug_srv *s) {
    pthread_mutex_lock(&s->live_mu);
    int n = 0;
    for (struct reply *r = s->live; r; r = r->live_next, n++) {
        pthread_mutex_lock(&r->mu);
        snug_reply_cancel_locked(r);
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_unlock(&s->live_mu);
    return n;
}

enum MHD_Result snug_reply_answer(struct snug_srv *s, struct MHD_Connection *c, struct reply *r,
                                  void **pending) {
    struct snug_server_error e;
    live_add(r);
    if (r->req.stream) {
        pthread_mutex_lock(&r->mu);
        r->conn = c;
        pthread_mutex_unlock(&r->mu);
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
                                                                      stream_read, r, stream_free);
        if (!resp) {
            enum snug_route route = r->route;
            const struct snug_fmt *fmt = r->fmt;
            pthread_mutex_lock(&r->mu);
            r->conn = NULL;
            snug_reply_cancel_locked(r);
            snug_reply_unref_locked(r);
            snug_server_error_set(&e, 500, "server_error", NULL,
                                  "out of memory starting the stream");
            return snug_reply_fail(s, c, route, fmt, &e);
        }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        snug_srv_count(s, r->route, 200);
        enum MHD_Result res = snug_srv_queue(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return res;
    }
    /* non-streaming: park the connection until on_done resumes it (the access handler is
     * then called again and answers through snug_srv_generate_resume) */
    pthread_mutex_lock(&r->mu);
    if (snug_reply_group_done(r)) return finish_locked(s, c, r);
    suspend_locked(r, c);
    *pending = r;
    pthread_mutex_unlock(&r->mu);
    return MHD_YES;
}
