/* reply.c — one generation request from body to response: validate, render (chat.h), tokenize,
 * submit to the engine, then either wait and answer with one JSON object, or stream SSE chunks.
 *
 * Owns: struct reply, shared by the HTTP connection thread and the engine thread under
 * reply.mu, freed when both have let go (refs). The engine side (on_token / on_done) applies
 * stop strings, feeds the output parser and appends to the accumulated content / reasoning /
 * tool calls; the HTTP side turns whatever is new into chunks (so slow readers get coalesced
 * deltas and the engine never waits on a socket). A client that goes away is noticed by
 * peeking its socket while waiting; the job is then cancelled and its slot freed at once.
 * Read next: engine.c (where tokens come from), outparse.h (the reasoning / tool-call split).
 */
#define _GNU_SOURCE
#include "server/chat.h"
#include "server/outparse.h"
#include "server/schema.h"
#include "server/server_impl.h"

#include "core/core.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define MAX_TOOL_CALLS 64

struct tool_call {
    struct snug_sbuf name, args;
    char id[40];
    bool head_sent;
    size_t args_sent;
};

struct lp_entry {
    snug_token id;
    struct snug_engine_logprob lp;
};

struct reply {
    struct snug_srv *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    struct snug_engine_job job;
    struct snug_server_req req;
    snug_token *prompt, *script;
    struct snug_outparse *parser; /* chat only */
    char id[64];
    long created;
    int fd;

    /* engine side, under mu */
    struct snug_sbuf hold; /* text held back while it could begin a stop string */
    bool stopped;          /* a stop string matched */
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
    int32_t prog_processed, prog_total, prog_cached, prog_sent; /* return_progress */
    double prog_ms;

    /* HTTP side (stream) */
    size_t content_sent, reasoning_sent, lps_sent;
    bool role_sent, final_sent;
    struct snug_sbuf out; /* SSE bytes not yet read by MHD; reserved at admission */
    size_t out_pos;
    struct snug_sbuf frame; /* 'data: {"id":…,"choices":[{"index":0,' of every chunk */
};

/* ==== lifetime ============================================================================== */

static void reply_unref_locked(struct reply *r) {
    SNUG_ASSERT(r->refs > 0);
    if (--r->refs > 0) {
        pthread_mutex_unlock(&r->mu);
        return;
    }
    pthread_mutex_unlock(&r->mu);
    snug_outparse_free(r->parser);
    snug_server_req_free(&r->req);
    snug_free(r->prompt);
    snug_free(r->script);
    snug_sbuf_free(&r->hold);
    snug_sbuf_free(&r->content);
    snug_sbuf_free(&r->reasoning);
    for (int i = 0; i < r->n_calls; i++) {
        snug_sbuf_free(&r->calls[i].name);
        snug_sbuf_free(&r->calls[i].args);
    }
    snug_free(r->lps);
    snug_sbuf_free(&r->out);
    snug_sbuf_free(&r->frame);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    snug_free(r);
}

static void reply_unref(struct reply *r) {
    pthread_mutex_lock(&r->mu);
    reply_unref_locked(r);
}

/* True when the client closed its end of the connection (a peek reads end-of-file or fails). */
static bool client_gone(int fd) {
    if (fd < 0) return false;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
    return false;
}

static void cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

/* ==== engine side =========================================================================== */

/* Output-parser events: append to the accumulated fields (called with r->mu held). */
static void on_parse_event(void *user, const struct snug_outparse_event *ev) {
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

/* Text that passed the stop-string filter: to the parser (chat) or the content (completion). */
static void sink_text(struct reply *r, const char *s, size_t n) {
    if (!n) return;
    if (r->parser) {
        struct snug_err err = {0};
        if (snug_outparse_feed(r->parser, s, n, &err) != SNUG_OK) r->oom = true;
    } else {
        snug_sbuf_append(&r->content, s, n);
    }
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of some stop string. */
static size_t stop_prefix_tail(const struct reply *r, const char *s, size_t n) {
    size_t best = 0;
    for (int i = 0; i < r->req.n_stop; i++) {
        size_t sl = strlen(r->req.stop[i]);
        for (size_t k = sl - 1 < n ? sl - 1 : n; k > best; k--)
            if (!memcmp(s + n - k, r->req.stop[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* Engine callback (requests with return_progress): a prompt chunk is done; the HTTP side
 * turns it into a prompt_progress event. */
static void on_progress(void *user, int32_t processed, int32_t total, int32_t cached, double ms) {
    struct reply *r = user;
    pthread_mutex_lock(&r->mu);
    r->prog_processed = processed;
    r->prog_total = total;
    r->prog_cached = cached;
    r->prog_ms = ms;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Engine callback: a token's text. Applies stop strings (holding back a possible beginning of
 * one), records logprobs, wakes the HTTP side. Returns true when a stop string matched. */
static bool on_token(void *user, snug_token id, const char *text, size_t len,
                     const struct snug_engine_logprob *lp) {
    struct reply *r = user;
    pthread_mutex_lock(&r->mu);
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
    bool stop = false;
    if (r->stopped) {
        stop = true;
    } else if (r->req.n_stop == 0) {
        sink_text(r, text, len);
    } else {
        snug_sbuf_append(&r->hold, text, len);
        const char *h = r->hold.data ? r->hold.data : "";
        size_t hn = r->hold.len, cut = hn;
        for (int i = 0; i < r->req.n_stop; i++) {
            const char *p = memmem(h, hn, r->req.stop[i], strlen(r->req.stop[i]));
            if (p && (size_t)(p - h) < cut) cut = (size_t)(p - h), stop = true;
        }
        if (stop) {
            sink_text(r, h, cut);
            snug_sbuf_reset(&r->hold);
            r->stopped = true;
        } else {
            size_t keep = stop_prefix_tail(r, h, hn);
            sink_text(r, h, hn - keep);
            memmove(r->hold.data, h + hn - keep, keep);
            r->hold.len = keep;
        }
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return stop;
}

/* Engine callback: the job ended. Releases what was held back, closes the parser. */
static void on_done(void *user, enum snug_engine_finish fin, const struct snug_engine_usage *u,
                    const char *msg) {
    struct reply *r = user;
    pthread_mutex_lock(&r->mu);
    if (!r->stopped && r->hold.len) sink_text(r, r->hold.data, r->hold.len);
    snug_sbuf_reset(&r->hold);
    if (r->parser) {
        struct snug_err err = {0};
        if (snug_outparse_finish(r->parser, &err) != SNUG_OK) r->oom = true;
    }
    r->finish = fin;
    r->usage = *u;
    if (msg) snprintf(r->errmsg, sizeof r->errmsg, "%s", msg);
    r->done = true;
    pthread_cond_broadcast(&r->cv);
    reply_unref_locked(r);
}

/* ==== response building (HTTP side, r->mu held) ============================================= */

static const char *finish_str(const struct reply *r) {
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

static json_t *usage_json(const struct reply *r) {
    const struct snug_engine_usage *u = &r->usage;
    json_t *d = json_pack("{s:i}", "cached_tokens", u->n_cached);
    return json_pack("{s:i, s:i, s:i, s:o}", "prompt_tokens", u->n_prompt, "completion_tokens",
                     u->n_gen, "total_tokens", u->n_prompt + u->n_gen, "prompt_tokens_details", d);
}

/* Tokens a request may generate after a prompt of n_prompt tokens (the per-slot context). */
static int32_t n_ctx_left(struct snug_srv *s, int32_t n_prompt) {
    struct snug_engine_stats st;
    snug_engine_get_stats(s->engine, &st);
    return st.n_ctx > n_prompt ? st.n_ctx - n_prompt : 1;
}

static json_t *timings_json(const struct reply *r) {
    const struct snug_engine_usage *u = &r->usage;
    int32_t pn = u->n_prompt - u->n_cached;
    json_t *t = json_pack("{s:i, s:i, s:f, s:f, s:i, s:f, s:f, s:f, s:i}", "prompt_n", pn,
                          "cache_n", u->n_cached, "prompt_ms", u->prompt_ms, "prompt_per_second",
                          u->prompt_ms > 0 ? pn * 1e3 / u->prompt_ms : 0.0, "predicted_n", u->n_gen,
                          "predicted_ms", u->gen_ms, "predicted_per_second",
                          u->gen_ms > 0 ? u->n_gen * 1e3 / u->gen_ms : 0.0, "queue_ms", u->queue_ms,
                          "slot", u->slot);
    if (t && u->spec_steps > 0) {
        /* speculative decoding (llama.cpp's draft_n / draft_n_accepted, plus snug's own) */
        json_object_set_new(t, "draft_n", json_integer(u->spec_drafted));
        json_object_set_new(t, "draft_n_accepted", json_integer(u->spec_accepted));
        json_object_set_new(t, "spec_steps", json_integer(u->spec_steps));
        json_object_set_new(t, "spec_mean_acceptance_length",
                            json_real((double)(u->spec_accepted + u->spec_steps) / u->spec_steps));
    }
    return t;
}

static json_t *token_str(const struct reply *r, snug_token id, json_t **bytes) {
    size_t n = 0;
    const char *b = snug_tokenizer_token_bytes(r->srv->tok, id, &n);
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((uint8_t)b[i]));
    }
    return snug_srv_json_str(b ? b : "", n);
}

/* Logprobs of entries [from, to): the chat form {"content": [...]} or the legacy completion
 * form {"tokens", "token_logprobs", "top_logprobs", "text_offset"}. */
static json_t *logprobs_json(const struct reply *r, size_t from, size_t to) {
    if (r->req.kind == SNUG_REQ_CHAT) {
        json_t *arr = json_array();
        for (size_t i = from; i < to; i++) {
            const struct lp_entry *e = &r->lps[i];
            json_t *bytes, *top = json_array();
            for (int k = 0; k < e->lp.n_top && k < r->req.top_logprobs; k++) {
                json_t *tb;
                json_t *ts = token_str(r, e->lp.top_id[k], &tb);
                json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", ts, "logprob",
                                                     (double)e->lp.top_logprob[k], "bytes", tb));
            }
            json_t *ts = token_str(r, e->id, &bytes);
            json_array_append_new(arr, json_pack("{s:o, s:f, s:o, s:o}", "token", ts, "logprob",
                                                 (double)e->lp.logprob, "bytes", bytes,
                                                 "top_logprobs", top));
        }
        return json_pack("{s:o}", "content", arr);
    }
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t off = 0;
    for (size_t i = from; i < to; i++) {
        const struct lp_entry *e = &r->lps[i];
        size_t n = 0;
        snug_tokenizer_token_bytes(r->srv->tok, e->id, &n);
        json_array_append_new(toks, token_str(r, e->id, NULL));
        json_array_append_new(lps, json_real(e->lp.logprob));
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += n;
        json_t *top = json_object();
        for (int k = 0; k < e->lp.n_top && k < r->req.top_logprobs; k++) {
            size_t tn = 0;
            const char *tb = snug_tokenizer_token_bytes(r->srv->tok, e->lp.top_id[k], &tn);
            json_t *key = snug_srv_json_str(tb ? tb : "", tn);
            json_object_set_new(top, json_string_value(key), json_real(e->lp.top_logprob[k]));
            json_decref(key);
        }
        json_array_append_new(tops, top);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs",
                     tops, "text_offset", offs);
}

static json_t *sbuf_json(const struct snug_sbuf *b, size_t from) {
    return snug_srv_json_str(b->data ? b->data + from : "", b->len - from);
}

/* The whole non-streaming response. */
static json_t *final_json(const struct reply *r) {
    json_t *choice;
    if (r->req.kind == SNUG_REQ_CHAT) {
        json_t *msg = json_pack("{s:s}", "role", "assistant");
        if (r->content.len || r->n_calls == 0)
            json_object_set_new(msg, "content", sbuf_json(&r->content, 0));
        else
            json_object_set_new(msg, "content", json_null());
        if (r->reasoning.len) {
            json_object_set_new(msg, "reasoning_content", sbuf_json(&r->reasoning, 0));
            json_object_set_new(msg, "reasoning", sbuf_json(&r->reasoning, 0));
        }
        if (r->n_calls) {
            json_t *calls = json_array();
            for (int i = 0; i < r->n_calls; i++) {
                const struct tool_call *t = &r->calls[i];
                json_array_append_new(
                    calls, json_pack("{s:s, s:s, s:{s:o, s:o}}", "id", t->id, "type", "function",
                                     "function", "name", sbuf_json(&t->name, 0), "arguments",
                                     t->args.len ? sbuf_json(&t->args, 0) : json_string("{}")));
            }
            json_object_set_new(msg, "tool_calls", calls);
        }
        choice = json_pack("{s:i, s:o, s:s}", "index", 0, "message", msg, "finish_reason",
                           finish_str(r));
    } else {
        choice = json_pack("{s:i, s:o, s:s}", "index", 0, "text", sbuf_json(&r->content, 0),
                           "finish_reason", finish_str(r));
    }
    json_object_set_new(choice, "logprobs",
                        r->req.logprobs ? logprobs_json(r, 0, r->n_lps) : json_null());
    return json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o, s:o}", "id", r->id, "object",
                     r->req.kind == SNUG_REQ_CHAT ? "chat.completion" : "text_completion",
                     "created", (json_int_t)r->created, "model", r->srv->model_id, "choices",
                     choice, "usage", usage_json(r), "timings", timings_json(r));
}

/* Append one SSE event "data: <json>\n\n" (steals obj). */
static void sse_put(struct reply *r, json_t *obj) {
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!s) {
        r->oom = true;
        return;
    }
    snug_sbuf_puts(&r->out, "data: ");
    snug_sbuf_puts(&r->out, s);
    snug_sbuf_puts(&r->out, "\n\n");
    free(s);
}

/* A chunk object with one choice whose delta (chat) or text (completion) is `delta`. */
static json_t *chunk(const struct reply *r, json_t *delta, const char *finish) {
    json_t *choice;
    if (r->req.kind == SNUG_REQ_CHAT)
        choice = json_pack("{s:i, s:o}", "index", 0, "delta", delta ? delta : json_object());
    else
        choice = json_pack("{s:i, s:o}", "index", 0, "text", delta ? delta : json_string(""));
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(choice, "logprobs", json_null());
    return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", r->id, "object",
                     r->req.kind == SNUG_REQ_CHAT ? "chat.completion.chunk" : "text_completion",
                     "created", (json_int_t)r->created, "model", r->srv->model_id, "choices",
                     choice);
}

static void chunk_set_logprobs(const struct reply *r, json_t *ch, size_t from, size_t to) {
    json_t *choice = json_array_get(json_object_get(ch, "choices"), 0);
    json_object_set_new(choice, "logprobs", logprobs_json(r, from, to));
}

/* ---- the per-token chunks without jansson ----
 * A text delta (content, reasoning, tool-call arguments) is the commonest event of a stream:
 * it is written straight into r->out (reserved at admission) around the reply's fixed frame,
 * so a token costs no allocation. Same JSON as the jansson-built chunks (keys in the same
 * order, strings escaped as snug_json_dumps_str does). */

/* The frame: everything of a chunk before the choice's payload (built once per reply). */
static void frame_build(struct reply *r) {
    struct snug_sbuf *f = &r->frame;
    snug_sbuf_puts(f, "data: {\"id\":");
    snug_json_dumps_str(f, r->id, strlen(r->id));
    snug_sbuf_puts(f, r->req.kind == SNUG_REQ_CHAT ? ",\"object\":\"chat.completion.chunk\""
                                                   : ",\"object\":\"text_completion\"");
    char num[32];
    snprintf(num, sizeof num, ",\"created\":%ld,\"model\":", r->created);
    snug_sbuf_puts(f, num);
    snug_json_dumps_str(f, r->srv->model_id, strlen(r->srv->model_id));
    snug_sbuf_puts(f, ",\"choices\":[{\"index\":0,");
}
static const char FRAME_END[] = ",\"finish_reason\":null,\"logprobs\":null}]}\n\n";

/* A chunk whose delta (chat) is {"content": s} or {"reasoning_content": s, "reasoning": s},
 * or whose text (completion) is s; s = b[from..len). */
static void sse_text(struct reply *r, const char *k1, const char *k2, const struct snug_sbuf *b,
                     size_t from) {
    const char *s = b->data ? b->data + from : "";
    size_t n = b->len - from;
    snug_sbuf_append(&r->out, r->frame.data, r->frame.len);
    if (!k1) {
        snug_sbuf_puts(&r->out, "\"text\":");
        snug_json_dumps_str(&r->out, s, n);
    } else {
        snug_sbuf_puts(&r->out, "\"delta\":{\"");
        snug_sbuf_puts(&r->out, k1);
        snug_sbuf_puts(&r->out, "\":");
        snug_json_dumps_str(&r->out, s, n);
        if (k2) {
            snug_sbuf_puts(&r->out, ",\"");
            snug_sbuf_puts(&r->out, k2);
            snug_sbuf_puts(&r->out, "\":");
            snug_json_dumps_str(&r->out, s, n);
        }
        snug_sbuf_putc(&r->out, '}');
    }
    snug_sbuf_append(&r->out, FRAME_END, sizeof FRAME_END - 1);
}

/* A chunk with the next piece of tool call i's arguments. */
static void sse_tool_args(struct reply *r, int i, const struct snug_sbuf *b, size_t from) {
    char num[64];
    snprintf(num, sizeof num, "\"delta\":{\"tool_calls\":[{\"index\":%d,\"function\":{", i);
    snug_sbuf_append(&r->out, r->frame.data, r->frame.len);
    snug_sbuf_puts(&r->out, num);
    snug_sbuf_puts(&r->out, "\"arguments\":");
    snug_json_dumps_str(&r->out, b->data ? b->data + from : "", b->len - from);
    snug_sbuf_puts(&r->out, "}}]}");
    snug_sbuf_append(&r->out, FRAME_END, sizeof FRAME_END - 1);
}

/* Turn everything new since the last call into SSE events in r->out (r->mu held). */
static void stream_collect(struct reply *r) {
    bool chat = r->req.kind == SNUG_REQ_CHAT;
    if (r->prog_processed > r->prog_sent) { /* return_progress: as llama.cpp's prompt_progress */
        json_t *ev = chunk(r, chat ? json_object() : json_string(""), NULL);
        json_object_set_new(ev, "prompt_progress",
                            json_pack("{s:i, s:i, s:i, s:f}", "total", r->prog_total, "cache",
                                      r->prog_cached, "processed", r->prog_processed, "time_ms",
                                      r->prog_ms));
        sse_put(r, ev);
        r->prog_sent = r->prog_processed;
    }
    if (chat && !r->role_sent) {
        sse_put(r, chunk(r, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL));
        r->role_sent = true;
    }
    if (r->reasoning.len > r->reasoning_sent) {
        sse_text(r, "reasoning_content", "reasoning", &r->reasoning, r->reasoning_sent);
        r->reasoning_sent = r->reasoning.len;
    }
    bool lp_new = r->req.logprobs && r->n_lps > r->lps_sent;
    if (r->content.len > r->content_sent && !lp_new) { /* the allocation-free form */
        sse_text(r, chat ? "content" : NULL, NULL, &r->content, r->content_sent);
        r->content_sent = r->content.len;
    } else if (r->content.len > r->content_sent || (lp_new && !chat)) { /* with logprobs */
        json_t *d = chat ? json_pack("{s:o}", "content", sbuf_json(&r->content, r->content_sent))
                         : sbuf_json(&r->content, r->content_sent);
        json_t *ch = chunk(r, d, NULL);
        if (lp_new) chunk_set_logprobs(r, ch, r->lps_sent, r->n_lps), r->lps_sent = r->n_lps;
        sse_put(r, ch);
        r->content_sent = r->content.len;
    }
    for (int i = 0; i < r->n_calls; i++) {
        struct tool_call *t = &r->calls[i];
        if (!t->head_sent) {
            json_t *d = json_pack("{s:[{s:i, s:s, s:s, s:{s:o, s:s}}]}", "tool_calls", "index", i,
                                  "id", t->id, "type", "function", "function", "name",
                                  sbuf_json(&t->name, 0), "arguments", "");
            sse_put(r, chunk(r, d, NULL));
            t->head_sent = true;
        }
        if (t->args.len > t->args_sent) {
            sse_tool_args(r, i, &t->args, t->args_sent);
            t->args_sent = t->args.len;
        }
    }
    if (r->done && !r->final_sent) {
        if (r->finish == SNUG_FINISH_ERROR) {
            sse_put(r, json_pack("{s:{s:s, s:s, s:i}}", "error", "message",
                                 r->errmsg[0] ? r->errmsg : "generation failed", "type",
                                 "server_error", "code", 500));
        } else {
            json_t *ch = chunk(r, NULL, finish_str(r));
            if (lp_new && chat && r->n_lps > r->lps_sent)
                chunk_set_logprobs(r, ch, r->lps_sent, r->n_lps), r->lps_sent = r->n_lps;
            json_object_set_new(ch, "timings", timings_json(r));
            sse_put(r, ch);
            if (r->req.include_usage) {
                sse_put(r, json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", r->id, "object",
                                     chat ? "chat.completion.chunk" : "text_completion", "created",
                                     (json_int_t)r->created, "model", r->srv->model_id, "choices",
                                     "usage", usage_json(r)));
            }
        }
        snug_sbuf_puts(&r->out, "data: [DONE]\n\n");
        r->final_sent = true;
    } else if (lp_new && chat && r->n_lps > r->lps_sent) {
        json_t *ch = chunk(r, NULL, NULL);
        chunk_set_logprobs(r, ch, r->lps_sent, r->n_lps);
        r->lps_sent = r->n_lps;
        sse_put(r, ch);
    }
}

/* Cancel the job because the client is gone (r->mu held). */
static void cancel_locked(struct reply *r) {
    if (!r->done) {
        atomic_store(&r->job.cancel, true);
        snug_engine_wake(r->srv->engine);
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
            pthread_mutex_unlock(&r->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        stream_collect(r);
        if (r->out.len > r->out_pos) continue;
        if (r->oom || client_gone(r->fd)) {
            cancel_locked(r);
            pthread_mutex_unlock(&r->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        cond_wait_ms(&r->cv, &r->mu, 50);
    }
}

/* MHD is done with the stream response (finished or the connection dropped). */
static void stream_free(void *cls) {
    struct reply *r = cls;
    pthread_mutex_lock(&r->mu);
    cancel_locked(r);
    reply_unref_locked(r);
}

/* ==== the request =========================================================================== */

static int tokenize_alloc(const struct snug_tokenizer *tok, const char *s, size_t n,
                          snug_token **out, int32_t *n_out, struct snug_err *err) {
    size_t cap = n + 16, got = 0;
    *out = NULL;
    for (int tries = 0; tries < 2; tries++) {
        snug_token *ids = snug_malloc(cap * sizeof *ids);
        if (!ids) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory tokenizing the prompt");
        int rc = snug_tokenizer_encode(tok, s, n, true, ids, cap, &got, err);
        if (rc == SNUG_OK) {
            *out = ids;
            *n_out = (int32_t)got;
            return SNUG_OK;
        }
        snug_free(ids);
        if (rc != SNUG_ERR_BUDGET) return rc;
        cap = got;
    }
    return snug_err_set(err, SNUG_ERR_INTERNAL, "tokenizer: inconsistent token count");
}

static enum MHD_Result fail(struct snug_srv *s, struct MHD_Connection *c, enum snug_route route,
                            const struct snug_server_error *e) {
    snug_srv_count(s, route, (unsigned)e->http_status);
    return snug_srv_send_error(c, e);
}

/* Does the request's "model" name the served model? (absent = yes) */
static bool model_matches(const struct snug_srv *s, const char *m) {
    if (!m || !*m) return true;
    if (!strcmp(m, s->model_id)) return true;
    size_t n = strlen(s->model_id);
    return n > 5 && !strcmp(s->model_id + n - 5, ".gguf") && strlen(m) == n - 5 &&
           !strncmp(m, s->model_id, n - 5);
}

enum MHD_Result snug_srv_generate(struct snug_srv *s, struct MHD_Connection *c,
                                  enum snug_server_kind kind, const char *body, size_t len) {
    enum snug_route route = kind == SNUG_REQ_CHAT ? ROUTE_CHAT : ROUTE_COMPLETION;
    struct snug_server_error e;
    struct snug_err err = {0};
    struct reply *r = snug_calloc(1, sizeof *r);
    if (!r) {
        snug_server_error_set(&e, 500, "server_error", NULL, "out of memory");
        return fail(s, c, route, &e);
    }
    r->srv = s;
    r->refs = 1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    enum MHD_Result res;
    if (snug_server_req_parse(&r->req, kind, body, len, &e) != SNUG_OK) goto reject;
    struct snug_server_req *q = &r->req;
    if (!model_matches(s, q->model)) {
        snug_server_error_set(&e, 404, "invalid_request_error", "model",
                              "the model '%s' does not exist; this server serves '%s'", q->model,
                              s->model_id);
        goto reject;
    }

    /* the prompt */
    int32_t n_prompt = 0;
    bool in_reasoning = false;
    if (kind == SNUG_REQ_CHAT) {
        struct snug_chat_opts co = snug_chat_default_opts(!s->opts.no_think);
        char *text = NULL;
        size_t tlen = 0;
        const json_t *tools = q->tool_choice == SNUG_TOOL_NONE ? NULL : q->tools;
        if (snug_chat_opts_from_request(&co, q->root, &err) != SNUG_OK ||
            snug_chat_render(q->messages, tools, &co, &text, &tlen, &err) != SNUG_OK) {
            snug_server_error_set(&e, err.status == SNUG_ERR_NOMEM ? 500 : 400,
                                  "invalid_request_error", "messages", "%s", err.msg);
            goto reject;
        }
        in_reasoning = snug_chat_prompt_in_reasoning(text, tlen);
        /* tool_choice "required" / a named function: the assistant turn is begun for the model
         * (reasoning closed, "<tool_call>" and, when named, "<function=NAME>" written), and the
         * same text is fed to the output parser as if generated, so the response is a tool
         * call whatever the model continues with (the parser closes what it leaves open). */
        struct snug_sbuf full = {0}, force = {0};
        if (tools && (q->tool_choice == SNUG_TOOL_REQUIRED || q->tool_choice == SNUG_TOOL_NAMED)) {
            if (in_reasoning) snug_sbuf_puts(&force, "\n</think>\n\n");
            snug_sbuf_puts(&force, "<tool_call>\n");
            if (q->tool_choice == SNUG_TOOL_NAMED) {
                snug_sbuf_puts(&force, "<function=");
                snug_sbuf_puts(&force, q->tool_name);
                snug_sbuf_puts(&force, ">\n");
            }
        }
        snug_sbuf_append(&full, text, tlen);
        if (force.len) snug_sbuf_append(&full, force.data, force.len);
        snug_free(text);
        int rc = full.oom || force.oom
                     ? snug_err_set(&err, SNUG_ERR_NOMEM, "out of memory")
                     : tokenize_alloc(s->tok, full.data, full.len, &r->prompt, &n_prompt, &err);
        snug_sbuf_free(&full);
        if (rc == SNUG_OK)
            rc = snug_outparse_init(&r->parser, tools, in_reasoning, on_parse_event, r, &err);
        if (rc == SNUG_OK && force.len) {
            pthread_mutex_lock(&r->mu);
            rc = snug_outparse_feed(r->parser, force.data, force.len, &err);
            pthread_mutex_unlock(&r->mu);
        }
        snug_sbuf_free(&force);
        if (rc != SNUG_OK) {
            snug_server_error_set(&e, 500, "server_error", NULL, "%s", err.msg);
            goto reject;
        }
    } else if (q->prompt) {
        if (tokenize_alloc(s->tok, q->prompt, q->prompt_len, &r->prompt, &n_prompt, &err)) {
            snug_server_error_set(&e, 500, "server_error", NULL, "%s", err.msg);
            goto reject;
        }
    } else {
        size_t n = json_array_size(q->prompt_ids);
        r->prompt = snug_malloc((n ? n : 1) * sizeof(snug_token));
        if (!r->prompt) {
            snug_server_error_set(&e, 500, "server_error", NULL, "out of memory");
            goto reject;
        }
        int32_t V = snug_tokenizer_n_vocab(s->tok);
        for (size_t i = 0; i < n; i++) {
            json_int_t id = json_integer_value(json_array_get(q->prompt_ids, i));
            if (id >= V) {
                snug_server_error_set(&e, 400, "invalid_request_error", "prompt",
                                      "'prompt[%zu]' = %lld is not a token id (the vocabulary "
                                      "has %d tokens)",
                                      i, (long long)id, V);
                goto reject;
            }
            r->prompt[i] = (snug_token)id;
        }
        n_prompt = (int32_t)n;
    }
    struct snug_engine_stats st;
    snug_engine_get_stats(s->engine, &st);
    if (n_prompt >= st.n_ctx) {
        snug_server_error_set(&e, 400, "invalid_request_error",
                              kind == SNUG_REQ_CHAT ? "messages" : "prompt",
                              "the prompt has %d tokens but the context holds %d tokens per slot "
                              "(at least one must be left to generate); shorten the prompt or "
                              "start the server with a larger --ctx",
                              n_prompt, st.n_ctx);
        goto reject;
    }

    /* the test seam: scripted generation */
    if (s->script_text) {
        const char *st_text = q->script ? q->script : s->script_text;
        size_t st_len = q->script ? strlen(q->script) : s->script_len;
        if (tokenize_alloc(s->tok, st_text, st_len, &r->script, &r->job.n_script, &err)) {
            snug_server_error_set(&e, 500, "server_error", NULL, "%s", err.msg);
            goto reject;
        }
        r->job.script = r->script;
    }

    /* the per-request text buffers, sized here from the limits so the per-token callbacks
     * append without allocating: generated tokens <= max_tokens (or the context left) and
     * bytes per token <= the vocabulary's longest token (+3 for a held-back UTF-8 sequence);
     * the stop window holds at most the longest stop string + one token. Capped at 4 MiB
     * per buffer (beyond that the buffers still grow, amortised). */
    {
        size_t n_gen = (size_t)(q->max_tokens > 0 && q->max_tokens < n_ctx_left(s, n_prompt)
                                    ? q->max_tokens
                                    : n_ctx_left(s, n_prompt));
        size_t tb = snug_tokenizer_max_token_bytes(s->tok) + 3, stop_max = 0;
        for (int i = 0; i < q->n_stop; i++)
            if (strlen(q->stop[i]) > stop_max) stop_max = strlen(q->stop[i]);
        size_t text = n_gen * tb;
        if (text > ((size_t)4 << 20)) text = (size_t)4 << 20;
        if (!snug_sbuf_reserve(&r->content, text) ||
            (kind == SNUG_REQ_CHAT && !snug_sbuf_reserve(&r->reasoning, text)) ||
            !snug_sbuf_reserve(&r->hold, stop_max + tb)) {
            snug_server_error_set(&e, 503, "server_error", NULL,
                                  "out of memory for the reply buffers (%zu bytes)", text);
            goto reject;
        }
    }

    /* the job */
    uint64_t nid = atomic_fetch_add(&s->id_counter, 1);
    r->created = (long)time(NULL);
    snprintf(r->id, sizeof r->id, "%s-%lx%06llx", kind == SNUG_REQ_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long)r->created, (unsigned long long)nid);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->fd = ci ? ci->connect_fd : -1;
    /* streams: the chunk frame, the SSE buffer (a window of a few chunks: the reader drains
     * it as it goes; beyond it grows, amortised) and the output parser's own buffers, all
     * sized now so the per-token path appends without allocating */
    if (q->stream) {
        size_t tb = snug_tokenizer_max_token_bytes(s->tok) + 3;
        frame_build(r);
        bool ok = !r->frame.oom && snug_sbuf_reserve(&r->out, 16384 + 64 * tb);
        if (ok && r->parser) ok = snug_outparse_reserve(r->parser, 1024 + 8 * tb) == SNUG_OK;
        if (!ok) {
            snug_server_error_set(&e, 503, "server_error", NULL,
                                  "out of memory for the stream buffers");
            goto reject;
        }
    }
    struct snug_engine_job *j = &r->job;
    j->prompt = r->prompt;
    j->n_prompt = n_prompt;
    j->sampler = q->sampler;
    if (!q->has_seed)
        j->sampler.seed = (uint64_t)snug_time_s() * 1000003u ^ (nid << 20) ^ (uint64_t)r->created;
    j->max_tokens = q->max_tokens;
    j->logprobs = q->logprobs;
    j->top_logprobs = q->top_logprobs;
    j->deadline_s = snug_time_s() + (s->opts.timeout_s > 0 ? s->opts.timeout_s : 600);
    j->on_token = on_token;
    j->on_done = on_done;
    j->on_progress = q->stream && q->return_progress ? on_progress : NULL;
    j->user = r;
    atomic_init(&j->cancel, false);
    r->refs = 2; /* this thread + the engine until on_done */
    if (snug_engine_submit(s->engine, j, &err) != SNUG_OK) {
        r->refs = 1;
        if (err.status == SNUG_ERR_BUDGET) {
            snug_server_error_set(&e, 503, "server_busy", NULL, "%s; retry shortly", err.msg);
            snug_srv_count(s, route, 503);
            json_t *b = json_pack("{s:{s:s, s:s, s:n, s:i}}", "error", "message", e.msg, "type",
                                  e.type, "param", "code", 503);
            char *txt = json_dumps(b, JSON_COMPACT);
            json_decref(b);
            struct MHD_Response *resp =
                MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
            MHD_add_response_header(resp, "Content-Type", "application/json");
            MHD_add_response_header(resp, "Retry-After", "1");
            res = MHD_queue_response(c, 503, resp);
            MHD_destroy_response(resp);
            reply_unref(r);
            return res;
        }
        snug_server_error_set(&e, 400, "invalid_request_error", NULL, "%s", err.msg);
        goto reject;
    }

    if (q->stream) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
                                                                      stream_read, r, stream_free);
        if (!resp) {
            pthread_mutex_lock(&r->mu);
            cancel_locked(r);
            reply_unref_locked(r);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        snug_srv_count(s, route, 200);
        res = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return res;
    }

    /* non-streaming: wait for the end, watching the client */
    pthread_mutex_lock(&r->mu);
    while (!r->done) {
        if (client_gone(r->fd)) cancel_locked(r);
        cond_wait_ms(&r->cv, &r->mu, 50);
    }
    if (r->finish == SNUG_FINISH_CANCEL) {
        snug_srv_count(s, route, 499);
        reply_unref_locked(r);
        return MHD_NO;
    }
    if (r->finish == SNUG_FINISH_ERROR || r->oom) {
        snug_server_error_set(&e, 500, "server_error", NULL, "generation failed: %s",
                              r->oom ? "out of memory" : r->errmsg);
        reply_unref_locked(r);
        return fail(s, c, route, &e);
    }
    json_t *out = final_json(r);
    reply_unref_locked(r);
    snug_srv_count(s, route, 200);
    return snug_srv_send_json(c, 200, out);

reject:
    reply_unref(r);
    return fail(s, c, route, &e);
}
