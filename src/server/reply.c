/* reply.c — one generation request from body to response: validate, render (chat.h), tokenize,
 * submit to the engine, then either wait and answer with one JSON object, or stream SSE chunks.
 *
 * Owns: struct reply, shared by the HTTP connection thread and the engine thread under
 * reply.mu, freed when both have let go (refs). The engine side (on_token / on_done) applies
 * stop strings, feeds the output parser and appends to the accumulated content / reasoning /
 * tool calls; the HTTP side turns whatever is new into chunks (so slow readers get coalesced
 * deltas and the engine never waits on a socket). While the engine works the connection is
 * suspended (no connection thread waits); on_token (streams) and on_done resume it. A stream
 * whose client went away fails to send and is cancelled, its slot freed; a client that only
 * half-closed its side still gets the answer.
 * Read next: engine.c (where tokens come from), outparse.h (the reasoning / tool-call split).
 */
#define _GNU_SOURCE
#include "server/reply.h"

#include "server/chat.h"
#include "server/normalize.h"
#include "server/constraint.h"
#include "server/outparse.h"
#include "server/prompt_marks.h"
#include "server/schema.h"
#include "server/server_impl.h"
#include "server/stopfilter.h"
#include "server/toolpolicy.h"

#include "core/core.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

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

/* What one choice holds of its own (its job's constraint, parser, buffers, stream state). */
static void choice_free(struct reply *r) {
    snug_outparse_free(r->parser);
    snug_srv_constraint_free(r->con);
    snug_server_req_free(&r->req);
    snug_stop_free(&r->stop);
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
static void reply_unref_locked(struct reply *r) {
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
    json_decref(r->api_extra);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    snug_free(r);
}

static void reply_unref(struct reply *r) {
    pthread_mutex_lock(&r->mu);
    reply_unref_locked(r);
}

/* Choice i of the group (0: grp itself). */
static struct reply *choice_at(struct reply *g, int i) {
    return i == 0 ? g : g->choices[i - 1];
}

/* Every choice's job has ended (g->mu held). */
static bool group_done(const struct reply *g) {
    return g->n_done >= g->n_choices;
}

/* Let MHD run the connection again when it waits for the engine (r->mu held). MHD allows
 * resuming from any thread; suspending happens only in MHD's callbacks, also under r->mu, so
 * a resume never precedes its suspend. */
static void wake_locked(struct reply *r) {
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

static void sink_cb(void *user, const char *s, size_t n) {
    sink_text(user, s, n);
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
    if (r->req.stream) wake_locked(g); /* the suspended stream sends the progress event */
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
    if (r->req.stream) wake_locked(g); /* a waiting non-stream request only needs on_done */
    pthread_mutex_unlock(&g->mu);
    return stop;
}

/* Engine callback: the job ended. Releases what was held back, closes the parser. */
static void on_done(void *user, enum snug_engine_finish fin, const struct snug_engine_usage *u,
                    const char *msg) {
    struct reply *r = user, *g = r->grp;
    pthread_mutex_lock(&g->mu);
    snug_stop_flush(&r->stop, sink_cb, r);
    if (r->parser) {
        struct snug_err err = {0};
        if (snug_outparse_finish(r->parser, &err) != SNUG_OK) r->oom = true;
    }
    r->finish = fin;
    r->usage = *u;
    if (msg) snprintf(r->errmsg, sizeof r->errmsg, "%s", msg);
    r->done = true;
    g->n_done++;
    pthread_cond_broadcast(&g->cv);
    if (r->req.stream || group_done(g)) wake_locked(g);
    reply_unref_locked(g);
}

/* ==== response building (HTTP side, r->mu held) ============================================= */

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

/* The group's usage: the prompt once (choice 0's; the other choices start from a copy of its
 * prefill), the generated tokens of every choice. */
static json_t *usage_json(const struct reply *r) {
    const struct snug_engine_usage *u = &r->usage;
    int32_t n_gen = 0, n_reasoning = 0;
    for (int i = 0; i < r->n_choices; i++) {
        const struct reply *c = choice_at((struct reply *)r, i);
        n_gen += c->usage.n_gen;
        n_reasoning += c->has_think ? c->think.n_reasoning : 0;
    }
    json_t *d = json_pack("{s:i}", "cached_tokens", u->n_cached);
    json_t *o = json_pack("{s:i, s:i, s:i, s:o}", "prompt_tokens", u->n_prompt, "completion_tokens",
                          n_gen, "total_tokens", u->n_prompt + n_gen, "prompt_tokens_details", d);
    if (o && r->has_think)
        json_object_set_new(o, "completion_tokens_details",
                            json_pack("{s:i}", "reasoning_tokens", n_reasoning));
    return o;
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

/* One choice of the non-streaming answer. */
static json_t *choice_json(struct reply *r) {
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
        choice = json_pack("{s:i, s:o, s:s}", "index", r->index, "message", msg, "finish_reason",
                           snug_reply_finish(r));
    } else {
        choice = json_pack("{s:i, s:o, s:s}", "index", r->index, "text", sbuf_json(&r->content, 0),
                           "finish_reason", snug_reply_finish(r));
    }
    json_object_set_new(choice, "logprobs",
                        r->req.logprobs ? logprobs_json(r, 0, r->n_lps) : json_null());
    const char *closed = r->has_think ? snug_think_end_name(&r->think) : NULL;
    if (closed) json_object_set_new(choice, "reasoning_closed", json_string(closed));
    return choice;
}

/* The whole non-streaming response (every choice of the group). */
static json_t *final_json(struct reply *r) {
    if (r->api == SNUG_API_ANTHROPIC) return snug_msgs_final(r);
    if (r->api == SNUG_API_RESPONSES) return snug_resp_final(r);
    json_t *choices = json_array();
    for (int i = 0; i < r->n_choices; i++)
        json_array_append_new(choices, choice_json(choice_at(r, i)));
    return json_pack("{s:s, s:s, s:I, s:s, s:o, s:o, s:o}", "id", r->id, "object",
                     r->req.kind == SNUG_REQ_CHAT ? "chat.completion" : "text_completion",
                     "created", (json_int_t)r->created, "model", r->srv->model_id, "choices",
                     choices, "usage", usage_json(r), "timings", timings_json(r));
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

static void sse_put(struct reply *r, json_t *obj) {
    snug_reply_sse(r, NULL, obj);
}

/* A chunk object with one choice whose delta (chat) or text (completion) is `delta`. */
static json_t *chunk(const struct reply *r, json_t *delta, const char *finish) {
    json_t *choice;
    if (r->req.kind == SNUG_REQ_CHAT)
        choice = json_pack("{s:i, s:o}", "index", r->index, "delta", delta ? delta : json_object());
    else
        choice =
            json_pack("{s:i, s:o}", "index", r->index, "text", delta ? delta : json_string(""));
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

/* The frame: everything of a chunk before the choice's payload (built once per choice). */
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
    snprintf(num, sizeof num, ",\"choices\":[{\"index\":%d,", r->index);
    snug_sbuf_puts(f, num);
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

/* One choice's new events (OpenAI chat / completions) into its r->out; its last chunk (or an
 * error event) once its job ended (choice_final). */
static void collect_choice(struct reply *r) {
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
    if (r->done && !r->choice_final) {
        bool stopping = r->finish == SNUG_FINISH_CANCEL && atomic_load(&r->srv->stopping);
        if (r->finish == SNUG_FINISH_ERROR || stopping) {
            sse_put(r, json_pack("{s:{s:s, s:s, s:i}}", "error", "message",
                                 stopping       ? "the server is shutting down"
                                 : r->errmsg[0] ? r->errmsg
                                                : "generation failed",
                                 "type", "server_error", "code", stopping ? 503 : 500));
            r->stream_failed = true;
        } else {
            json_t *ch = chunk(r, NULL, snug_reply_finish(r));
            const char *closed = r->has_think ? snug_think_end_name(&r->think) : NULL;
            if (closed)
                json_object_set_new(json_array_get(json_object_get(ch, "choices"), 0),
                                    "reasoning_closed", json_string(closed));
            if (lp_new && chat && r->n_lps > r->lps_sent)
                chunk_set_logprobs(r, ch, r->lps_sent, r->n_lps), r->lps_sent = r->n_lps;
            json_object_set_new(ch, "timings", timings_json(r));
            sse_put(r, ch);
        }
        r->choice_final = true;
    } else if (lp_new && chat && r->n_lps > r->lps_sent) {
        json_t *ch = chunk(r, NULL, NULL);
        chunk_set_logprobs(r, ch, r->lps_sent, r->n_lps);
        r->lps_sent = r->n_lps;
        sse_put(r, ch);
    }
}

/* Turn everything new since the last call into SSE events in r->out (r->mu held): each
 * choice's chunks (with its index), then once every choice ended the usage chunk and [DONE]. */
static void stream_collect(struct reply *r) {
    if (r->api == SNUG_API_ANTHROPIC) {
        snug_msgs_stream(r);
        return;
    }
    if (r->api == SNUG_API_RESPONSES) {
        snug_resp_stream(r);
        return;
    }
    bool all = true, failed = false;
    for (int i = 0; i < r->n_choices; i++) {
        struct reply *c = choice_at(r, i);
        collect_choice(c);
        if (c != r) { /* its chunks into the group's stream */
            snug_sbuf_append(&r->out, c->out.data ? c->out.data : "", c->out.len);
            snug_sbuf_reset(&c->out);
            if (c->out.oom || c->oom) r->oom = true;
        }
        all = all && c->choice_final;
        failed = failed || c->stream_failed;
    }
    if (all && !r->final_sent) {
        if (!failed && r->req.include_usage) {
            bool chat = r->req.kind == SNUG_REQ_CHAT;
            sse_put(r, json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", r->id, "object",
                                 chat ? "chat.completion.chunk" : "text_completion", "created",
                                 (json_int_t)r->created, "model", r->srv->model_id, "choices",
                                 "usage", usage_json(r)));
        }
        snug_sbuf_puts(&r->out, "data: [DONE]\n\n");
        r->final_sent = true;
    }
}

/* Cancel the group's jobs because the client is gone (g->mu held). */
static void cancel_locked(struct reply *g) {
    for (int i = 0; i < g->n_choices; i++) {
        struct reply *r = choice_at(g, i);
        if (r && !r->done) {
            atomic_store(&r->job.cancel, true);
            snug_engine_wake(r->srv->engine);
        }
    }
}

/* A client that half-closes its side right after sending the request (shutdown(SHUT_WR)) still
 * gets its answer: an end of stream seen this soon after the request is taken as that. */
#define HALF_CLOSE_WINDOW_S 0.25

/* The engine's check between steps for a non-streaming request (engine.h client_gone): its
 * connection is parked, so MHD would notice a client that left only at the answer. A peek at
 * the socket tells: a reset, or an end of stream later than HALF_CLOSE_WINDOW_S after the
 * request, means the client closed it (a close and a half-close look the same from here: the
 * latter is only told apart by its timing; a half-close is then not watched any more). */
static bool client_gone(void *user) {
    struct reply *r = ((struct reply *)user)->grp; /* the group holds the connection */
    pthread_mutex_lock(&r->mu);
    bool gone = false;
    if (r->poll_fd >= 0 && !group_done(r)) {
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
            for (int i = 0; i < r->n_choices; i++) n_gen += choice_at(r, i)->usage.n_gen;
            snug_srv_log_usage(r->usage.n_prompt, n_gen, r->usage.n_cached);
            pthread_mutex_unlock(&r->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        stream_collect(r);
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
            cancel_locked(r);
            r->final_sent = true;
            pthread_mutex_unlock(&r->mu);
            if (max < sizeof OOM_END - 1) return MHD_CONTENT_READER_END_WITH_ERROR;
            memcpy(buf, OOM_END, sizeof OOM_END - 1);
            return (ssize_t)(sizeof OOM_END - 1);
        }
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
    cancel_locked(r);
    reply_unref_locked(r);
}

/* ==== the request =========================================================================== */

/* Tokenize n bytes of s into a snug_malloc'd array; special tokens are parsed except inside
 * the `plain` spans (NULL: everywhere). With message marks `mk` (a rendered chat prompt,
 * prompt_marks.h) also the token positions of the marks in *pm; the ids are the same. */
static int tokenize_marked_alloc(const struct snug_tokenizer *tok, const char *s, size_t n,
                                 const struct snug_chat_marks *mk,
                                 const struct snug_chat_spans *plain, snug_token **out,
                                 int32_t *n_out, struct snug_prompt_marks *pm,
                                 struct snug_err *err) {
    size_t cap = n + 16, got = 0;
    *out = NULL;
    for (int tries = 0; tries < 2; tries++) {
        snug_token *ids = snug_malloc(cap * sizeof *ids);
        if (!ids) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory tokenizing the prompt");
        int rc = snug_prompt_encode_marked_spans(tok, s, n, mk, plain, ids, cap, &got, pm, err);
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

/* tokenize_marked_alloc without marks. */
static int tokenize_alloc(const struct snug_tokenizer *tok, const char *s, size_t n,
                          const struct snug_chat_spans *plain, snug_token **out, int32_t *n_out,
                          struct snug_err *err) {
    return tokenize_marked_alloc(tok, s, n, NULL, plain, out, n_out, NULL, err);
}

static enum MHD_Result fail(struct snug_srv *s, struct MHD_Connection *c, enum snug_route route,
                            enum snug_api api, const struct snug_server_error *e) {
    snug_srv_count(s, route, (unsigned)e->http_status);
    return snug_srv_send_api_error(c, api, e);
}

/* A lower bound of the tokens of n bytes of text (no token is longer than the vocabulary's
 * longest); when it already fills the context, the text is refused without tokenizing it. */
static bool surely_too_long(struct snug_srv *s, size_t n_bytes, struct snug_server_error *e,
                            const char *param) {
    struct snug_engine_stats st;
    snug_engine_get_stats(s->engine, &st);
    size_t tb = snug_tokenizer_max_token_bytes(s->tok);
    size_t min_tokens = tb ? n_bytes / tb : 0;
    if (min_tokens < (size_t)st.n_ctx) return false;
    snug_server_error_set(e, 400, "invalid_request_error", param,
                          "the prompt has at least %zu tokens (%zu bytes) but the context holds "
                          "%d tokens per slot; shorten the prompt or start the server with a "
                          "larger --ctx",
                          min_tokens, n_bytes, st.n_ctx);
    return true;
}

/* Two constraints in a row (bounded thinking first, then the grammar): the first one's forced
 * token wins, both mask and are told every committed token. */
static snug_token chain_force(void *u) {
    struct reply *r = u;
    for (int i = 0; i < 2; i++) {
        const struct snug_engine_constraint *c = r->chain_parts[i];
        snug_token t = c->force ? c->force(c->user) : -1;
        if (t >= 0) return t;
    }
    return -1;
}
static void chain_mask(void *u, float *logits, int32_t n) {
    struct reply *r = u;
    for (int i = 0; i < 2; i++)
        if (r->chain_parts[i]->mask) r->chain_parts[i]->mask(r->chain_parts[i]->user, logits, n);
}
static void chain_accept(void *u, snug_token id) {
    struct reply *r = u;
    for (int i = 0; i < 2; i++)
        if (r->chain_parts[i]->accept) r->chain_parts[i]->accept(r->chain_parts[i]->user, id);
}
static bool chain_allows(void *u, snug_token id) {
    struct reply *r = u;
    for (int i = 0; i < 2; i++)
        if (r->chain_parts[i]->allows && !r->chain_parts[i]->allows(r->chain_parts[i]->user, id))
            return false;
    return true;
}
static void chain_rollback(void *u, int32_t n) {
    struct reply *r = u;
    for (int i = 0; i < 2; i++)
        if (r->chain_parts[i]->rollback) r->chain_parts[i]->rollback(r->chain_parts[i]->user, n);
}
static const struct snug_engine_constraint *chain_constraint(struct reply *r) {
    r->chain = (struct snug_engine_constraint){.user = r,
                                               .force = chain_force,
                                               .mask = chain_mask,
                                               .accept = chain_accept,
                                               .allows = chain_allows,
                                               .rollback = chain_rollback};
    return &r->chain;
}

/* The request's constraint (grammar, response_format, strict tools, logit_bias) compiled into
 * r->con; r->con stays NULL when there is none. `in_reasoning`: the prompt ends inside the
 * reasoning block, so the grammar starts after "</think>". A 400 (in e) for a bad grammar or
 * schema, naming the line and column or the keyword. */
static int build_constraint(struct snug_srv *s, struct reply *r, bool in_reasoning, int32_t budget,
                            struct snug_server_error *e) {
    const struct snug_server_req *q = &r->req;
    struct snug_err err = {0};
    char *owned = NULL;
    const char *text = NULL, *param = "grammar";
    size_t tlen = 0;
    const char *trigger = NULL;
    /* tool calls (toolpolicy.h): forced (the prompt already ends with "<tool_call>\n", and
     * "<function=NAME>\n" when named) or, under "auto", from the moment the model writes
     * "<tool_call>"; none allowed: that token is banned below */
    struct snug_tool_policy tp = snug_tool_policy_of(q);
    {
        int rc = snug_tool_policy_grammar(&tp, q->grammar || q->format != SNUG_FORMAT_TEXT,
                                          q->parallel_tool_calls, &owned, &tlen, &trigger, &err);
        if (rc != SNUG_OK)
            return snug_server_error_set(e, rc == SNUG_ERR_NOMEM ? 500 : 400,
                                         "invalid_request_error", "tools", "%s", err.msg);
    }
    if (owned) {
        param = "tools";
        text = owned;
        in_reasoning = false; /* a forced call closed it; under "auto" the trigger decides */
    } else if (q->grammar) {
        text = q->grammar;
        tlen = q->grammar_len;
    } else if (q->format != SNUG_FORMAT_TEXT) {
        param = "response_format";
        char *schema = q->format == SNUG_FORMAT_JSON_SCHEMA
                           ? json_dumps(q->json_schema, JSON_COMPACT | JSON_ENCODE_ANY)
                           : NULL;
        const char *st = schema ? schema : "{\"type\":\"object\"}";
        int rc = snug_json_schema_to_gbnf(st, strlen(st), &owned, &tlen, &err);
        free(schema); /* jansson's allocation */
        if (rc != SNUG_OK)
            return snug_server_error_set(e, rc == SNUG_ERR_NOMEM ? 500 : 400,
                                         "invalid_request_error", param, "%s", err.msg);
        text = owned;
    }
    int32_t V = snug_tokenizer_n_vocab(s->tok);
    int32_t n_bias = q->logit_bias ? (int32_t)json_object_size(q->logit_bias) : 0;
    snug_token bias_ids[SNUG_REQ_MAX_LOGIT_BIAS + 4];
    float bias_vals[SNUG_REQ_MAX_LOGIT_BIAS + 4];
    if (n_bias) {
        const char *k;
        json_t *v;
        int32_t i = 0;
        json_object_foreach((json_t *)q->logit_bias, k, v) {
            long long id = strtoll(k, NULL, 10);
            if (id >= V) {
                snug_free(owned);
                return snug_server_error_set(e, 400, "invalid_request_error", "logit_bias",
                                             "'logit_bias' names token %lld, but the vocabulary "
                                             "has %d tokens",
                                             id, V);
            }
            bias_ids[i] = (snug_token)id;
            bias_vals[i++] = (float)json_number_value(v);
        }
    }
    /* the tokens the policy bans (a -100 bias: never sampled, never forced) */
    int n_ban = snug_tool_policy_banned(&tp, s->tok, bias_ids + n_bias, 4);
    for (int k = 0; k < n_ban; k++) bias_vals[n_bias++] = -100.0f;
    if (!text && !n_bias) return 0;
    /* with thinking on, the grammar begins after the reasoning block: "</think>" then up to
     * four blanks, then the grammar's root */
    struct snug_sbuf wrapped = {0};
    const char *root = NULL;
    if (text && in_reasoning) {
        /* the client's grammar alone first, so error positions are its own */
        struct snug_grammar *g = NULL;
        int rc = snug_grammar_parse(&g, text, tlen, NULL, NULL, &err);
        snug_grammar_free(g);
        if (rc != SNUG_OK) {
            snug_free(owned);
            return snug_server_error_set(e, rc == SNUG_ERR_NOMEM ? 500 : 400,
                                         "invalid_request_error", param, "%s", err.msg);
        }
        snug_sbuf_append(&wrapped, text, tlen);
        snug_sbuf_puts(&wrapped, "\nsnug-think-root ::= [ \\t\\n]{0,4} root\n");
        if (wrapped.oom) {
            snug_free(owned);
            return snug_server_error_set(e, 500, "server_error", NULL, "out of memory");
        }
        root = "snug-think-root";
    }
    snug_token end_ids[3] = {snug_tokenizer_im_end(s->tok), snug_tokenizer_eos(s->tok),
                             snug_tokenizer_token_id(s->tok, "<|endoftext|>")};
    struct snug_srv_constraint_desc d = {
        .gbnf = root ? wrapped.data : text,
        .gbnf_len = root ? wrapped.len : tlen,
        .root = root,
        .trigger = root ? "</think>" : trigger,
        .end_before_trigger = trigger != NULL,
        .bias_ids = bias_ids,
        .bias_vals = bias_vals,
        .n_bias = n_bias,
        .end_ids = end_ids,
        .n_end = 3,
        .budget = budget,
        .memo = s->grammar_memo,
    };
    int rc = snug_srv_constraint_init(&r->con, &d, s->trie, s->tok, &err);
    snug_sbuf_free(&wrapped);
    snug_free(owned);
    if (rc != SNUG_OK) {
        if (rc == SNUG_ERR_NOMEM)
            return snug_server_error_set(e, 500, "server_error", NULL, "%s", err.msg);
        return snug_server_error_set(e, 400, "invalid_request_error", param, "%s", err.msg);
    }
    return 0;
}

/* The answer of a finished non-streaming generation (r->mu held; lets go of r). */
static enum MHD_Result finish_locked(struct snug_srv *s, struct MHD_Connection *c,
                                     struct reply *r) {
    enum snug_route route = r->route;
    enum snug_api api = r->api;
    struct snug_server_error e;
    r->conn = NULL;
    r->poll_fd = -1;
    int32_t n_gen = 0;
    for (int i = 0; i < r->n_choices; i++) { /* the first choice that did not end well decides */
        struct reply *ch = choice_at(r, i);
        n_gen += ch->usage.n_gen;
        if (ch->finish == SNUG_FINISH_CANCEL) {
            reply_unref_locked(r);
            snug_server_error_set(&e, 503, "server_error", NULL,
                                  "the request was cancelled: the server is shutting down (or "
                                  "the client went away)");
            return fail(s, c, route, api, &e);
        }
        if (ch->finish == SNUG_FINISH_ERROR || ch->oom) {
            snug_server_error_set(&e, 500, "server_error", NULL, "generation failed: %s",
                                  ch->oom ? "out of memory" : ch->errmsg);
            reply_unref_locked(r);
            return fail(s, c, route, api, &e);
        }
    }
    snug_srv_log_usage(r->usage.n_prompt, n_gen, r->usage.n_cached);
    json_t *out = final_json(r);
    if (api == SNUG_API_RESPONSES && out) snug_resp_finished(r, out);
    reply_unref_locked(r);
    snug_srv_count(s, route, 200);
    return snug_srv_send_json(c, 200, out);
}

enum MHD_Result snug_srv_generate_resume(struct snug_srv *s, struct MHD_Connection *c,
                                         void **pending) {
    struct reply *r = *pending;
    pthread_mutex_lock(&r->mu);
    if (!group_done(r)) { /* woken early (a token): park again until on_done */
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
    cancel_locked(r);
    reply_unref_locked(r);
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
        cancel_locked(r);
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_unlock(&s->live_mu);
    return n;
}

/* Scripted turns (test seam): a --script file cut by lines "=== snug-script-turn ===" holds
 * one script per turn of an agent loop; a chat request follows script number (tool results in
 * its messages), the last one beyond. So a client that loops over tool calls (an agents SDK)
 * gets a tool call first and an answer after the tool's result. */
static void script_turn(const struct snug_server_req *q, const char **text, size_t *len) {
    static const char SEP[] = "\n=== snug-script-turn ===\n";
    size_t turn = 0, i;
    const json_t *m;
    json_array_foreach(q->messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role && !strcmp(role, "tool")) turn++;
    }
    const char *p = *text, *end = *text + *len;
    for (;;) {
        const char *cut = memmem(p, (size_t)(end - p), SEP, sizeof SEP - 1);
        if (!cut || turn == 0) {
            *text = p;
            *len = (size_t)((cut && turn == 0 ? cut : end) - p);
            return;
        }
        p = cut + sizeof SEP - 1;
        turn--;
    }
}

/* What every choice of a request is prepared from (generate). */
struct choice_ctx {
    const json_t *tools; /* the tools the parser types arguments by (toolpolicy.h: shown) */
    bool calls;          /* tool calls allowed */
    bool in_reasoning;   /* the prompt ends inside the reasoning block */
    bool think;          /* bounded thinking watches that reasoning */
    struct snug_think_opts to;
    const char *force; /* a forced call's opening, fed to the parser as if generated */
    size_t force_len;
    int32_t n_prompt, budget; /* the prompt's tokens; the tokens a choice may generate */
    uint64_t nid;             /* the request's number */
};

/* Choice r of the group g (r == g for the first): its thinking bound, output parser,
 * constraint, text buffers, stream frame and engine job (the prompt, its marks and images and
 * the script are g's; a seeded request's choice i samples with seed + i). 0, or -1 with *e. */
static int choice_prepare(struct snug_srv *s, struct reply *g, struct reply *r,
                          const struct choice_ctx *cc, struct snug_server_error *e) {
    const struct snug_server_req *q = &r->req;
    struct snug_err err = {0};
    bool chat = q->kind == SNUG_REQ_CHAT;
    if (chat) {
        if (snug_think_init(&r->think, s->tok, &cc->to, cc->think, q->max_tokens, &err) != SNUG_OK)
            return snug_server_error_set(e, 500, "server_error", NULL, "%s", err.msg);
        r->has_think = true;
        int rc =
            snug_outparse_init(&r->parser, cc->tools, cc->in_reasoning, on_parse_event, r, &err);
        if (rc == SNUG_OK && !cc->calls) snug_outparse_no_calls(r->parser);
        if (rc == SNUG_OK && cc->force_len) {
            pthread_mutex_lock(&g->mu);
            rc = snug_outparse_feed(r->parser, cc->force, cc->force_len, &err);
            pthread_mutex_unlock(&g->mu);
        }
        if (rc != SNUG_OK)
            return snug_server_error_set(e, 500, "server_error", NULL, "%s", err.msg);
    }
    /* structured outputs: the grammar / schema / logit_bias constraint, compiled now */
    if (build_constraint(s, r, cc->in_reasoning, cc->budget, e)) return -1;
    /* the per-request text buffers, sized here from the limits so the per-token callbacks
     * append without allocating: generated tokens <= max_tokens (or the context left) and
     * bytes per token <= the vocabulary's longest token (+3 for a held-back UTF-8 sequence);
     * the stop window holds at most the longest stop string + one token. Capped at 4 MiB
     * per buffer (beyond that the buffers still grow, amortised). */
    size_t tb = snug_tokenizer_max_token_bytes(s->tok) + 3;
    {
        size_t stop_max = 0;
        for (int i = 0; i < q->n_stop; i++)
            if (strlen(q->stop[i]) > stop_max) stop_max = strlen(q->stop[i]);
        size_t text = (size_t)cc->budget * tb;
        if (text > ((size_t)4 << 20)) text = (size_t)4 << 20;
        if (!snug_sbuf_reserve(&r->content, text) ||
            (chat && !snug_sbuf_reserve(&r->reasoning, text)) ||
            !snug_sbuf_reserve(&r->stop.hold, stop_max + tb))
            return snug_server_error_set(e, 503, "server_error", NULL,
                                         "out of memory for the reply buffers (%zu bytes)", text);
    }
    /* streams: the chunk frame, the SSE buffer (a window of a few chunks: the reader drains
     * it as it goes; beyond it grows, amortised) and the output parser's own buffers, all
     * sized now so the per-token path appends without allocating */
    if (q->stream) {
        frame_build(r);
        bool ok = !r->frame.oom && snug_sbuf_reserve(&r->out, 16384 + 64 * tb);
        if (ok && r->parser) ok = snug_outparse_reserve(r->parser, 1024 + 8 * tb) == SNUG_OK;
        if (!ok)
            return snug_server_error_set(e, 503, "server_error", NULL,
                                         "out of memory for the stream buffers");
    }
    struct snug_engine_job *j = &r->job;
    if (r != g) { /* the group's prompt, marks, images and script */
        j->msg_starts = g->job.msg_starts;
        j->n_msg_starts = g->job.n_msg_starts;
        j->system_end = g->job.system_end;
        j->last_end = g->job.last_end;
        j->user_end = g->job.user_end;
        j->images = g->job.images;
        j->n_images = g->job.n_images;
        j->key = g->job.key;
        j->script = g->job.script;
        j->n_script = g->job.n_script;
        j->prefill_from = &g->job;
    }
    j->prompt = g->prompt;
    j->n_prompt = cc->n_prompt;
    j->sampler = q->sampler;
    if (q->has_seed)
        j->sampler.seed = q->sampler.seed + (uint64_t)r->index;
    else
        j->sampler.seed = (uint64_t)snug_time_s() * 1000003u ^ (cc->nid << 20) ^
                          (uint64_t)r->created ^ ((uint64_t)r->index << 40);
    j->max_tokens = q->max_tokens;
    j->logprobs = q->logprobs;
    j->top_logprobs = q->top_logprobs;
    j->deadline_s = snug_time_s() + (s->opts.timeout_s > 0 ? s->opts.timeout_s : 600);
    /* the request's constraints: bounded thinking (think.h) and the grammar / logit_bias
     * (constraint.h), chained when both are there */
    const struct snug_engine_constraint *tc =
        r->has_think ? snug_think_constraint(&r->think) : NULL;
    /* a scripted job (the test seam) is not sampled: the grammar has nothing to constrain */
    const struct snug_engine_constraint *gc =
        r->con && !j->script ? snug_srv_constraint_hook(r->con) : NULL;
    if (tc && gc) {
        r->chain_parts[0] = tc;
        r->chain_parts[1] = gc;
        j->constraint = chain_constraint(r);
    } else {
        j->constraint = tc ? tc : gc;
    }
    j->on_token = on_token;
    j->on_done = on_done;
    j->on_progress = q->stream && q->return_progress && r == g ? on_progress : NULL;
    j->user = r;
    atomic_init(&j->cancel, false);
    return 0;
}

/* The generation path shared by every API: `body` (len bytes) or an already converted `root`
 * (stolen) is parsed as a chat/completion request; `api` picks the answer's shape. */
static enum MHD_Result generate(struct snug_srv *s, struct MHD_Connection *c,
                                enum snug_server_kind kind, enum snug_api api,
                                enum snug_route route, const char *body, size_t len, json_t *root,
                                json_t *extra, void **pending) {
    struct snug_server_error e;
    struct snug_err err = {0};
    struct reply *r = snug_calloc(1, sizeof *r);
    if (!r) {
        json_decref(root);
        json_decref(extra);
        snug_server_error_set(&e, 500, "server_error", NULL, "out of memory");
        return fail(s, c, route, api, &e);
    }
    r->poll_fd = -1;
    r->srv = s;
    r->refs = 1;
    r->api = api;
    r->api_extra = extra;
    r->as.cur = -1;
    r->route = route;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->grp = r;
    r->n_choices = 1;
    enum MHD_Result res;
    struct snug_sbuf force = {0}; /* a forced call's opening (toolpolicy.h), fed to each parser */
    struct choice_ctx cc = {0};
    if ((root ? snug_server_req_parse_json(&r->req, kind, root, &e)
              : snug_server_req_parse(&r->req, kind, body, len, &e)) != SNUG_OK)
        goto reject;
    struct snug_server_req *q = &r->req;
    if (snug_server_req_check_limits(q, &s->opts.limits, &e) != SNUG_OK) goto reject;
    r->stop.stop = q->stop;
    r->stop.n_stop = q->n_stop;
    if (!snug_srv_model_matches(s, q->model)) {
        snug_server_error_set(&e, 404, "invalid_request_error", "model",
                              "the model '%s' does not exist; this server serves '%s'", q->model,
                              s->model_id);
        goto reject;
    }
    if (q->n > 1 && q->n > s->opts.n_slots) {
        snug_server_error_set(&e, 400, "invalid_request_error", "n",
                              "'n' = %d needs %d slots (its choices run side by side); this "
                              "server has %d (--slots)",
                              q->n, q->n, s->opts.n_slots);
        goto reject;
    }

    /* the prompt */
    int32_t n_prompt = 0;
    bool in_reasoning = false;
    if (kind == SNUG_REQ_CHAT) {
        struct snug_chat_opts co =
            snug_chat_default_opts(q->has_effort ? !q->effort_no_think : !s->opts.no_think);
        char *text = NULL;
        size_t tlen = 0;
        struct snug_chat_spans plain = {0};
        struct snug_tool_policy tp = snug_tool_policy_of(q); /* toolpolicy.h */
        const json_t *tools = tp.shown;
        cc.tools = tools;
        cc.calls = tp.calls;
        /* agent clients' per-request spans out before rendering (normalize.h); the request
         * owns its JSON, the messages array is edited in place */
        if (!s->opts.no_prompt_normalize && snug_prompt_normalize((json_t *)q->messages) < 0) {
            snug_server_error_set(&e, 500, "server_error", NULL, "out of memory");
            goto reject;
        }
        /* image parts: checked now (a 400 names the part), encoded by the engine */
        if (snug_srv_images_collect(q->messages, s->venc, &r->images, &e)) goto reject;
        size_t n_marks = json_array_size(q->messages) + 2;
        r->mark_bytes = snug_malloc(n_marks * sizeof *r->mark_bytes);
        r->mark_tokens = snug_malloc(n_marks * sizeof *r->mark_tokens);
        if (!r->mark_bytes || !r->mark_tokens) {
            snug_server_error_set(&e, 500, "server_error", NULL, "out of memory");
            goto reject;
        }
        struct snug_chat_marks mk = {.starts = r->mark_bytes, .cap = n_marks};
        if (snug_chat_opts_from_request(&co, q->root, &err) != SNUG_OK ||
            snug_chat_render_ex(q->messages, tools, &co, &text, &tlen, &mk,
                                s->opts.special_in_content ? NULL : &plain, &err) != SNUG_OK) {
            snug_server_error_set(&e, err.status == SNUG_ERR_NOMEM ? 500 : 400,
                                  "invalid_request_error", "messages", "%s", err.msg);
            goto reject;
        }
        if (tlen > s->opts.limits.max_prompt_bytes) {
            snug_free(text);
            snug_chat_spans_free(&plain);
            snug_server_error_set(&e, 413, "invalid_request_error", "messages",
                                  "the rendered prompt has %zu bytes; this server takes at most "
                                  "%zu (--max-prompt-bytes)",
                                  tlen, s->opts.limits.max_prompt_bytes);
            goto reject;
        }
        if (surely_too_long(s, tlen, &e, "messages")) {
            snug_free(text);
            snug_chat_spans_free(&plain);
            goto reject;
        }
        in_reasoning = snug_chat_prompt_in_reasoning(text, tlen);
        /* bounded thinking: the request's budget, else the server's; the guard is server-wide */
        cc.to = (struct snug_think_opts){.budget = q->has_budget ? q->thinking_budget
                                                                 : s->opts.thinking_budget,
                                         .repeat_n = s->opts.repeat_n,
                                         .repeat_k = s->opts.repeat_k};
        cc.think = in_reasoning && !tp.forced; /* a forced call closes the reasoning */
        /* tool_choice "required" / a named function: the assistant turn is begun for the model
         * (reasoning closed, "<tool_call>" and, when named, "<function=NAME>" written), and the
         * same text is fed to the output parser as if generated, so the response is a tool
         * call whatever the model continues with (the parser closes what it leaves open). */
        struct snug_sbuf full = {0};
        snug_tool_policy_opening(&tp, in_reasoning, &force);
        struct snug_prompt_marks pm = {.starts = r->mark_tokens, .cap = (int32_t)n_marks};
        snug_sbuf_append(&full, text, tlen);
        if (force.len) snug_sbuf_append(&full, force.data, force.len);
        snug_free(text);
        int rc = full.oom || force.oom
                     ? snug_err_set(&err, SNUG_ERR_NOMEM, "out of memory")
                     : tokenize_marked_alloc(s->tok, full.data, full.len, &mk, &plain, &r->prompt,
                                             &n_prompt, &pm, &err);
        snug_sbuf_free(&full);
        snug_chat_spans_free(&plain);
        if (rc == SNUG_OK && r->images.n > 0 &&
            snug_srv_images_place(
                &r->images, s->tok, &r->prompt, &n_prompt, r->mark_tokens, SNUG_MIN(pm.n, pm.cap),
                (int32_t *const[]){&pm.system_end, &pm.last_end, &pm.user_end}, 3, &e))
            goto reject;
        r->job.msg_starts = r->mark_tokens;
        r->job.n_msg_starts = SNUG_MIN(pm.n, pm.cap);
        r->job.system_end = pm.system_end;
        r->job.last_end = pm.last_end;
        r->job.user_end = pm.user_end;
        r->job.images = r->images.img;
        r->job.n_images = r->images.n;
        r->job.key = r->images.key;
        if (rc != SNUG_OK) {
            snug_server_error_set(&e, 500, "server_error", NULL, "%s", err.msg);
            goto reject;
        }
    } else if (q->prompt) {
        if (surely_too_long(s, q->prompt_len, &e, "prompt")) goto reject;
        if (tokenize_alloc(s->tok, q->prompt, q->prompt_len, NULL, &r->prompt, &n_prompt, &err)) {
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

    cc.in_reasoning = in_reasoning;
    cc.force = force.data;
    cc.force_len = force.len;
    cc.n_prompt = n_prompt;
    {
        int32_t left = (int32_t)n_ctx_left(s, n_prompt);
        cc.budget = q->max_tokens > 0 && q->max_tokens < left ? q->max_tokens : left;
    }

    /* the test seam: scripted generation (every choice follows the same script) */
    if (s->script_text) {
        const char *st_text = q->script ? q->script : s->script_text;
        size_t st_len = q->script ? strlen(q->script) : s->script_len;
        if (!q->script) script_turn(q, &st_text, &st_len);
        /* a request that allows no call: the script's calls are left out (a script is not
         * sampled, so the policy's ban of the opening token cannot act on it; a model under the
         * ban writes the text around them) */
        struct snug_tool_policy stp = snug_tool_policy_of(q);
        struct snug_sbuf kept = {0};
        if (!stp.calls && memmem(st_text, st_len, "<tool_call>", 11)) {
            const char *p = st_text, *end = st_text + st_len, *open;
            while ((open = memmem(p, (size_t)(end - p), "<tool_call>", 11)) != NULL) {
                snug_sbuf_append(&kept, p, (size_t)(open - p));
                const char *close = memmem(open, (size_t)(end - open), "</tool_call>", 12);
                p = close ? close + 12 : end;
                if (p < end && *p == '\n') p++;
            }
            snug_sbuf_append(&kept, p, (size_t)(end - p));
            if (kept.oom) {
                snug_server_error_set(&e, 500, "server_error", NULL, "out of memory");
                goto reject;
            }
            st_text = kept.data ? kept.data : "";
            st_len = kept.len;
        }
        int trc = tokenize_alloc(s->tok, st_text, st_len, NULL, &r->script, &r->job.n_script, &err);
        snug_sbuf_free(&kept);
        if (trc) {
            snug_server_error_set(&e, 500, "server_error", NULL, "%s", err.msg);
            goto reject;
        }
        r->job.script = r->script;
    }

    /* the id, then every choice: its own constraint, parser, buffers and job */
    cc.nid = atomic_fetch_add(&s->id_counter, 1);
    r->created = (long)time(NULL);
    snprintf(r->id, sizeof r->id, "%s%lx%06llx",
             api == SNUG_API_ANTHROPIC   ? "msg_"
             : api == SNUG_API_RESPONSES ? "resp_"
             : kind == SNUG_REQ_CHAT     ? "chatcmpl-"
                                         : "cmpl-",
             (unsigned long)r->created, (unsigned long long)cc.nid);
    if (choice_prepare(s, r, r, &cc, &e)) goto reject;
    if (q->n > 1) {
        r->choices = snug_calloc((size_t)q->n - 1, sizeof *r->choices);
        if (!r->choices) {
            snug_server_error_set(&e, 500, "server_error", NULL, "out of memory");
            goto reject;
        }
        r->n_choices = q->n;
        for (int i = 1; i < q->n; i++) {
            struct reply *ch = snug_calloc(1, sizeof *ch);
            if (!ch) {
                snug_server_error_set(&e, 500, "server_error", NULL, "out of memory");
                goto reject;
            }
            r->choices[i - 1] = ch;
            ch->srv = s;
            ch->grp = r;
            ch->index = i;
            ch->api = api;
            ch->route = route;
            ch->as.cur = -1;
            ch->req = r->req; /* the same parsed request (its JSON shared by reference) */
            json_incref(ch->req.root);
            ch->stop.stop = q->stop;
            ch->stop.n_stop = q->n_stop;
            ch->created = r->created;
            memcpy(ch->id, r->id, sizeof ch->id);
            if (choice_prepare(s, r, ch, &cc, &e)) goto reject;
        }
    }
    snug_sbuf_free(&force);

    /* the jobs: choice 0's prefill serves the others (engine.h, prefill_from) */
    struct snug_engine_job *jobs[SNUG_REQ_MAX_N];
    for (int i = 0; i < r->n_choices; i++) jobs[i] = &choice_at(r, i)->job;
    r->poll_fd = -1;
    if (!q->stream) { /* its connection is parked while it runs: the engine polls it */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci) {
            r->poll_fd = ci->connect_fd;
            r->poll_t0 = snug_time_s();
            for (int i = 0; i < r->n_choices; i++) jobs[i]->client_gone = client_gone;
        }
    }
    r->refs = 1 + r->n_choices; /* this thread + each job until its on_done */
    if (snug_engine_submit_n(s->engine, jobs, r->n_choices, &err) != SNUG_OK) {
        r->refs = 1;
        if (err.status == SNUG_ERR_BUDGET) { /* every API: 503 + Retry-After */
            snug_server_error_set(&e, 503, "server_busy", NULL, "%s; retry shortly", err.msg);
            snug_srv_count(s, route, 503);
            reply_unref(r);
            return snug_srv_send_api_error_hdr(c, api, &e, "Retry-After", "1");
        }
        snug_server_error_set(&e, 400, "invalid_request_error", NULL, "%s", err.msg);
        goto reject;
    }

    live_add(r);
    if (q->stream) {
        pthread_mutex_lock(&r->mu);
        r->conn = c;
        pthread_mutex_unlock(&r->mu);
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
                                                                      stream_read, r, stream_free);
        if (!resp) {
            pthread_mutex_lock(&r->mu);
            r->conn = NULL;
            cancel_locked(r);
            reply_unref_locked(r);
            snug_server_error_set(&e, 500, "server_error", NULL,
                                  "out of memory starting the stream");
            return fail(s, c, route, api, &e);
        }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        snug_srv_count(s, route, 200);
        res = snug_srv_queue(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return res;
    }

    /* non-streaming: park the connection until on_done resumes it (the access handler is
     * then called again and answers through snug_srv_generate_resume) */
    pthread_mutex_lock(&r->mu);
    if (group_done(r)) return finish_locked(s, c, r);
    suspend_locked(r, c);
    *pending = r;
    pthread_mutex_unlock(&r->mu);
    return MHD_YES;

reject:
    snug_sbuf_free(&force);
    reply_unref(r);
    return fail(s, c, route, api, &e);
}

enum MHD_Result snug_srv_generate(struct snug_srv *s, struct MHD_Connection *c,
                                  enum snug_server_kind kind, const char *body, size_t len,
                                  void **pending) {
    return generate(s, c, kind, SNUG_API_OPENAI,
                    kind == SNUG_REQ_CHAT ? ROUTE_CHAT : ROUTE_COMPLETION, body, len, NULL, NULL,
                    pending);
}

enum MHD_Result snug_srv_generate_api(struct snug_srv *s, struct MHD_Connection *c,
                                      enum snug_api api, enum snug_route route, json_t *chat,
                                      json_t *extra, void **pending) {
    return generate(s, c, SNUG_REQ_CHAT, api, route, NULL, 0, chat, extra, pending);
}

int snug_server_render_chat(const struct snug_server_opts *o, json_t *chat, char **prompt,
                            size_t *len, struct snug_server_error *e) {
    struct snug_server_req q;
    struct snug_err err = {0};
    *prompt = NULL;
    if (snug_server_req_parse_json(&q, SNUG_REQ_CHAT, chat, e) != SNUG_OK) return -1;
    struct snug_chat_opts co =
        snug_chat_default_opts(q.has_effort ? !q.effort_no_think : !o->no_think);
    const json_t *tools = snug_tool_policy_of(&q).shown;
    int rc = snug_chat_opts_from_request(&co, q.root, &err);
    if (rc == SNUG_OK) rc = snug_chat_render(q.messages, tools, &co, prompt, len, &err);
    snug_server_req_free(&q);
    if (rc != SNUG_OK)
        return snug_server_error_set(e, err.status == SNUG_ERR_NOMEM ? 500 : 400,
                                     "invalid_request_error", "messages", "%s", err.msg);
    return 0;
}

/* The tokens the chat would be generated from: normalised and rendered as generate() does,
 * request text tokenized with special tokens as plain text (unless --special-in-content),
 * so the count equals the response's prompt tokens. */
int snug_srv_count_chat_tokens(struct snug_srv *s, json_t *chat, int32_t *n_tokens,
                               struct snug_server_error *e) {
    struct snug_err err = {0};
    struct snug_server_req q;
    *n_tokens = 0;
    if (snug_server_req_parse_json(&q, SNUG_REQ_CHAT, chat, e) != SNUG_OK) return -1;
    if (!s->opts.no_prompt_normalize && snug_prompt_normalize((json_t *)q.messages) < 0) {
        snug_server_req_free(&q);
        return snug_server_error_set(e, 500, "server_error", NULL, "out of memory");
    }
    struct snug_chat_opts co =
        snug_chat_default_opts(q.has_effort ? !q.effort_no_think : !s->opts.no_think);
    const json_t *tools = snug_tool_policy_of(&q).shown;
    char *text = NULL;
    size_t tlen = 0;
    struct snug_chat_spans plain = {0};
    /* image parts: checked as a request's are (the same 400s), each counted as the rows·cols
     * pads it is widened to (from the header and the resize rule: nothing is encoded) */
    struct snug_srv_images im = {0};
    if (snug_srv_images_collect(q.messages, s->venc, &im, e)) {
        snug_server_req_free(&q);
        return -1;
    }
    int rc = snug_chat_opts_from_request(&co, q.root, &err);
    if (rc == SNUG_OK)
        rc = snug_chat_render_spans(q.messages, tools, &co, &text, &tlen,
                                    s->opts.special_in_content ? NULL : &plain, &err);
    snug_server_req_free(&q);
    if (rc != SNUG_OK) {
        snug_srv_images_free(&im);
        return snug_server_error_set(e, err.status == SNUG_ERR_NOMEM ? 500 : 400,
                                     "invalid_request_error", "messages", "%s", err.msg);
    }
    snug_token *ids = NULL;
    rc = tokenize_alloc(s->tok, text, tlen, s->opts.special_in_content ? NULL : &plain, &ids,
                        n_tokens, &err);
    snug_free(text);
    snug_chat_spans_free(&plain);
    if (rc != SNUG_OK) {
        snug_free(ids);
        snug_srv_images_free(&im);
        return snug_server_error_set(e, 500, "server_error", NULL, "%s", err.msg);
    }
    rc = im.n > 0 ? snug_srv_images_place(&im, s->tok, &ids, n_tokens, NULL, 0, NULL, 0, e)
                  : SNUG_OK;
    snug_free(ids);
    snug_srv_images_free(&im);
    if (rc != SNUG_OK) return -1;
    return 0;
}
