/* fmt_openai.c — the OpenAI chat-completions and completions front end: its request bodies are
 * parsed as they are (request.c), and its formatter tables (fmt.h) shape the answers: the
 * chat.completion / text_completion object with one choice per `n`, usage and llama.cpp-style
 * timings, or the stream of chunks (role, reasoning_content / content deltas, tool-call heads
 * and argument deltas, logprobs, prompt_progress, the finish chunk, the usage chunk, [DONE]).
 * A text delta, the commonest event, is written straight into the stream buffer around a
 * per-choice frame, without allocating.
 * Invariant: the stream's deltas concatenate to the final answer's fields (the same parsed
 * output, reply.h).
 * Read next: api_messages.c and api_responses.c (the other front ends), reply.c.
 */
#include "server/reply.h"

#include "server/server_impl.h"

#include "core/core.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct reply *choice_at(struct reply *g, int i) {
    return snug_reply_choice(g, i);
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
                        r->req.logprobs ? logprobs_json(r, 0, r->n_lps_in) : json_null());
    const char *closed = r->has_think ? snug_think_end_name(&r->think) : NULL;
    if (closed) json_object_set_new(choice, "reasoning_closed", json_string(closed));
    return choice;
}

/* The whole non-streaming response (every choice of the group). */
static json_t *final_json(struct reply *r) {
    json_t *choices = json_array();
    for (int i = 0; i < r->n_choices; i++)
        json_array_append_new(choices, choice_json(choice_at(r, i)));
    return json_pack("{s:s, s:s, s:I, s:s, s:o, s:o, s:o}", "id", r->id, "object",
                     r->req.kind == SNUG_REQ_CHAT ? "chat.completion" : "text_completion",
                     "created", (json_int_t)r->created, "model", r->srv->model_id, "choices",
                     choices, "usage", usage_json(r), "timings", timings_json(r));
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
static int frame_build(struct reply *r) {
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
    return f->oom ? -1 : 0;
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
    bool lp_new = r->req.logprobs && r->n_lps_in > r->lps_sent;
    if (r->content.len > r->content_sent && !lp_new) { /* the allocation-free form */
        sse_text(r, chat ? "content" : NULL, NULL, &r->content, r->content_sent);
        r->content_sent = r->content.len;
    } else if (r->content.len > r->content_sent || (lp_new && !chat)) { /* with logprobs */
        json_t *d = chat ? json_pack("{s:o}", "content", sbuf_json(&r->content, r->content_sent))
                         : sbuf_json(&r->content, r->content_sent);
        json_t *ch = chunk(r, d, NULL);
        if (lp_new) chunk_set_logprobs(r, ch, r->lps_sent, r->n_lps_in), r->lps_sent = r->n_lps_in;
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
    if (r->ended && !r->choice_final) {
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
            if (lp_new && chat && r->n_lps_in > r->lps_sent)
                chunk_set_logprobs(r, ch, r->lps_sent, r->n_lps_in), r->lps_sent = r->n_lps_in;
            json_object_set_new(ch, "timings", timings_json(r));
            sse_put(r, ch);
        }
        r->choice_final = true;
    } else if (lp_new && chat && r->n_lps_in > r->lps_sent) {
        json_t *ch = chunk(r, NULL, NULL);
        chunk_set_logprobs(r, ch, r->lps_sent, r->n_lps_in);
        r->lps_sent = r->n_lps_in;
        sse_put(r, ch);
    }
}

/* Turn everything new since the last call into SSE events in r->out (r->mu held): each
 * choice's chunks (with its index), then once every choice ended the usage chunk and [DONE]. */
static void stream_collect(struct reply *r) {
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

const struct snug_fmt snug_fmt_chat = {
    .id_prefix = "chatcmpl-",
    .prepare = frame_build,
    .stream = stream_collect,
    .final = final_json,
};

const struct snug_fmt snug_fmt_completion = {
    .id_prefix = "cmpl-",
    .prepare = frame_build,
    .stream = stream_collect,
    .final = final_json,
};

enum MHD_Result snug_srv_generate(struct snug_srv *s, struct MHD_Connection *c,
                                  enum snug_server_kind kind, const char *body, size_t len,
                                  void **pending) {
    const struct snug_fmt *fmt = kind == SNUG_REQ_CHAT ? &snug_fmt_chat : &snug_fmt_completion;
    enum snug_route route = kind == SNUG_REQ_CHAT ? ROUTE_CHAT : ROUTE_COMPLETION;
    struct snug_server_req q;
    struct snug_server_error e;
    if (snug_server_req_parse(&q, kind, body, len, &e) != SNUG_OK)
        return snug_reply_fail(s, c, route, fmt, &e);
    return snug_srv_submit(s, c, fmt, route, &q, NULL, pending);
}
