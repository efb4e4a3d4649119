/* submit.c — the request core: a parsed request (struct snug_server_req, whichever front end
 * read it) becomes engine jobs. Checks the request's limits, model and `n`; renders a chat
 * (agent-client spans normalised, image parts collected, message marks for the prefix cache)
 * or takes a completion's prompt; tokenizes it (request text as plain text); compiles the
 * constraints (tool-call policy, grammar / response_format, logit_bias, bounded thinking);
 * prepares each choice (output parser, buffers, job) and submits them; then hands the reply to
 * the result core (reply.c) in the front end's formatter (fmt.h).
 * Invariant: no API is named here; a rejection is answered in the formatter's error shape
 * before any job is submitted, and a submitted job's buffers are all reserved.
 * Read next: reply.c (the answer), reply_engine.c (the job's callbacks), toolpolicy.h.
 */
#define _GNU_SOURCE
#include "server/reply.h"

#include "server/chat.h"
#include "server/constraint.h"
#include "server/normalize.h"
#include "server/outparse.h"
#include "server/prompt_marks.h"
#include "server/schema.h"
#include "server/server_impl.h"
#include "server/stopfilter.h"
#include "server/toolpolicy.h"

#include "core/core.h"
#include "tokenizer/tokenizer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct reply *choice_at(struct reply *g, int i) {
    return snug_reply_choice(g, i);
}

/* The chat template's switches of a request: the thinking default (the server's flag, or the
 * request's reasoning_effort), the request's template_src, a front end's thinking switch. */
static int chat_opts_of(const struct snug_server_req *q, bool no_think, struct snug_chat_opts *co,
                        struct snug_err *err) {
    *co = snug_chat_default_opts(q->has_effort ? !q->effort_no_think : !no_think);
    int rc = snug_chat_opts_from_request(co, q->template_src, err);
    if (q->think_switch >= 0) co->enable_thinking = q->think_switch > 0;
    if (q->continue_final) co->continue_final = true;
    return rc;
}

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

/* Tokens a request may generate after a prompt of n_prompt tokens (the per-slot context). */
static int32_t n_ctx_left(struct snug_srv *s, int32_t n_prompt) {
    struct snug_engine_stats st;
    snug_engine_get_stats(s->engine, &st);
    return st.n_ctx > n_prompt ? st.n_ctx - n_prompt : 1;
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
        int rc = snug_outparse_init(&r->parser, cc->tools, cc->in_reasoning, snug_reply_on_parse, r,
                                    &err);
        if (rc == SNUG_OK && !cc->calls) snug_outparse_no_calls(r->parser);
        if (rc == SNUG_OK && cc->force_len)
            rc = snug_outparse_feed(r->parser, cc->force, cc->force_len, &err);
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
        if (!snug_sbuf_reserve(&r->text, text) ||
            (q->stream && !snug_sbuf_reserve(&r->taken, text)) ||
            !snug_sbuf_reserve(&r->content, text) ||
            (chat && !snug_sbuf_reserve(&r->reasoning, text)) ||
            !snug_sbuf_reserve(&r->stop.hold, stop_max + tb))
            return snug_server_error_set(e, 503, "server_error", NULL,
                                         "out of memory for the reply buffers (%zu bytes)", text);
    }
    /* streams: the chunk frame, the SSE buffer (a window of a few chunks: the reader drains
     * it as it goes; beyond it grows, amortised) and the output parser's own buffers, all
     * sized now so the per-token path appends without allocating */
    if (q->stream) {
        bool ok = (!r->fmt->prepare || r->fmt->prepare(r) == 0) &&
                  snug_sbuf_reserve(&r->out, 16384 + 64 * tb);
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
    snug_reply_engine_hooks(r, q->stream && q->return_progress && r == g);
    atomic_init(&j->cancel, false);
    return 0;
}
enum MHD_Result snug_srv_submit(struct snug_srv *s, struct MHD_Connection *c,
                                const struct snug_fmt *fmt, enum snug_route route,
                                struct snug_server_req *q_in, json_t *ctx, void **pending) {
    struct snug_server_error e;
    struct snug_err err = {0};
    struct reply *r = snug_reply_new(s, fmt, route, ctx);
    if (!r) {
        snug_server_req_free(q_in);
        snug_server_error_set(&e, 500, "server_error", NULL, "out of memory");
        return snug_reply_fail(s, c, route, fmt, &e);
    }
    r->req = *q_in; /* the request moves into the reply */
    memset(q_in, 0, sizeof *q_in);
    struct snug_sbuf force = {0}; /* a forced call's opening (toolpolicy.h), fed to each parser */
    struct choice_ctx cc = {0};
    struct snug_server_req *q = &r->req;
    enum snug_server_kind kind = q->kind;
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
        struct snug_chat_opts co;
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
        if (chat_opts_of(q, s->opts.no_think, &co, &err) != SNUG_OK ||
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
    snprintf(r->id, sizeof r->id, "%s%lx%06llx", fmt->id_prefix, (unsigned long)r->created,
             (unsigned long long)cc.nid);
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
            ch->fmt = fmt;
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
            for (int i = 0; i < r->n_choices; i++) jobs[i]->client_gone = snug_reply_client_gone;
        }
    }
    r->refs = 1 + r->n_choices; /* this thread + each job until its on_done */
    if (snug_engine_submit_n(s->engine, jobs, r->n_choices, &err) != SNUG_OK) {
        r->refs = 1;
        if (err.status == SNUG_ERR_BUDGET) { /* every API: 503 + Retry-After */
            snug_server_error_set(&e, 503, "server_busy", NULL, "%s; retry shortly", err.msg);
            snug_srv_count(s, route, 503);
            snug_reply_unref(r);
            return snug_srv_send_api_error_hdr(c, fmt, &e, "Retry-After", "1");
        }
        snug_server_error_set(&e, 400, "invalid_request_error", NULL, "%s", err.msg);
        goto reject;
    }

    return snug_reply_answer(s, c, r, pending);

reject:
    snug_sbuf_free(&force);
    snug_reply_unref(r);
    return snug_reply_fail(s, c, route, fmt, &e);
}

int snug_server_render_req(const struct snug_server_opts *o, const struct snug_server_req *q,
                           char **prompt, size_t *len, struct snug_server_error *e) {
    struct snug_err err = {0};
    struct snug_chat_opts co;
    *prompt = NULL;
    const json_t *tools = snug_tool_policy_of(q).shown;
    int rc = chat_opts_of(q, o->no_think, &co, &err);
    if (rc == SNUG_OK) rc = snug_chat_render(q->messages, tools, &co, prompt, len, &err);
    if (rc != SNUG_OK)
        return snug_server_error_set(e, err.status == SNUG_ERR_NOMEM ? 500 : 400,
                                     "invalid_request_error", "messages", "%s", err.msg);
    return 0;
}

/* The tokens the chat would be generated from: normalised and rendered as snug_srv_submit
 * does, request text tokenized with special tokens as plain text (unless
 * --special-in-content), so the count equals the response's prompt tokens. */
int snug_srv_count_req_tokens(struct snug_srv *s, const struct snug_server_req *q,
                              int32_t *n_tokens, struct snug_server_error *e) {
    struct snug_err err = {0};
    *n_tokens = 0;
    if (!s->opts.no_prompt_normalize && snug_prompt_normalize((json_t *)q->messages) < 0)
        return snug_server_error_set(e, 500, "server_error", NULL, "out of memory");
    struct snug_chat_opts co;
    const json_t *tools = snug_tool_policy_of(q).shown;
    char *text = NULL;
    size_t tlen = 0;
    struct snug_chat_spans plain = {0};
    /* image parts: checked as a request's are (the same 400s), each counted as the rows·cols
     * pads it is widened to (from the header and the resize rule: nothing is encoded) */
    struct snug_srv_images im = {0};
    if (snug_srv_images_collect(q->messages, s->venc, &im, e)) return -1;
    int rc = chat_opts_of(q, s->opts.no_think, &co, &err);
    if (rc == SNUG_OK)
        rc = snug_chat_render_spans(q->messages, tools, &co, &text, &tlen,
                                    s->opts.special_in_content ? NULL : &plain, &err);
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
