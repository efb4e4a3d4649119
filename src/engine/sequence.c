/* sequence.c — the generation loop of one sequence (see sequence.h for the phases): picking
 * (script, forced, masked and sampled: snug_spec_pick), speculative steps split into drafting
 * (snug_seq_rows) and acceptance (snug_seq_take → snug_spec_accept), the draft count of each
 * speculative step (src/speculative/adapt.h: the steps timed here, a monotonic clock from the
 * start of snug_seq_rows to the end of the pick or acceptance), emission with logprobs and the
 * detokenizer, and the stopping conditions.
 * Invariant: toks[0..n_toks) are the context's tokens, toks[n_toks] the pending one while
 * running; nothing here allocates after snug_seq_begin.
 * Read next: src/engine/engine.c and src/cli/cmd_run.c (the two drivers).
 */
#include "engine/sequence.h"

#include "core/core.h"
#include "plan/plan.h"

#include <math.h>
#include <string.h>

int snug_seq_init(struct snug_seq *s, const struct snug_model *m, struct snug_ctx *ctx,
                  struct snug_err *err) {
    memset(s, 0, sizeof *s);
    const struct snug_tokenizer *tok = snug_model_tokenizer(m);
    if (!tok)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "sequence: the model file carries no tokenizer (tokenizer.ggml.*)");
    s->ctx = ctx;
    s->n_ctx = snug_ctx_n_ctx(ctx);
    s->V = snug_model_n_vocab(m);
    s->n_eog = snug_tokenizer_eog(tok, s->eog);
    snug_spec_adapt_init(&s->adapt, snug_ctx_spec_k(ctx));
    s->toks = snug_malloc((size_t)snug_plan_token_history_bytes(s->n_ctx)); /* the plan's */
    if (!s->toks) return snug_err_set(err, SNUG_ERR_NOMEM, "sequence: out of memory");
    return snug_detok_init(&s->detok, tok, SNUG_DETOK_SKIP_CONTROL, err);
}

void snug_seq_free(struct snug_seq *s) {
    if (!s) return;
    snug_free(s->toks);
    snug_sampler_free(s->smp);
    if (s->detok.tok) snug_detok_free(&s->detok);
    memset(s, 0, sizeof *s);
}

int snug_seq_begin(struct snug_seq *s, const struct snug_seq_params *p, struct snug_err *err) {
    s->p = *p;
    if (s->p.top_logprobs > SNUG_SEQ_MAX_TOP_LOGPROBS)
        s->p.top_logprobs = SNUG_SEQ_MAX_TOP_LOGPROBS;
    if (s->p.top_logprobs < 0) s->p.top_logprobs = 0;
    /* speculation needs the MTP state; logprobs and scripts decode plainly */
    s->p.speculate = p->speculate && snug_ctx_n_draft(s->ctx) > 0 && !p->logprobs && !p->script;
    s->n_gen = 0;
    s->script_pos = 0;
    s->k = 0;
    s->picked = false;
    s->state = SNUG_SEQ_IDLE;
    snug_detok_reset(&s->detok);
    snug_sampler_free(s->smp);
    s->smp = NULL;
    if (s->p.speculate) snug_spec_adapt_restart(&s->adapt, snug_ctx_spec_k(s->ctx));
    return snug_sampler_init(&s->smp, &p->sampler, s->V, err);
}

void snug_seq_set_past(struct snug_seq *s, const snug_token *toks, int32_t n) {
    if (n > 0 && toks != s->toks) memcpy(s->toks, toks, (size_t)n * sizeof(snug_token));
    s->n_toks = n;
}

void snug_seq_evaluated(struct snug_seq *s, const snug_token *ids, int32_t n) {
    memcpy(s->toks + s->n_toks, ids, (size_t)n * sizeof(snug_token));
    s->n_toks += n;
}

void snug_seq_logprob(const float *logits, int32_t V, snug_token id, int32_t n_top,
                      struct snug_seq_logprob *lp) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int32_t i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    float lse = mx + (float)log(sum);
    lp->logprob = logits[id] - lse;
    if (n_top > SNUG_SEQ_MAX_TOP_LOGPROBS) n_top = SNUG_SEQ_MAX_TOP_LOGPROBS;
    if (n_top > V) n_top = V;
    lp->n_top = 0;
    for (int32_t i = 0; i < V && n_top > 0; i++) {
        float v = logits[i];
        if (lp->n_top == n_top && v <= lp->top_logprob[n_top - 1]) continue;
        int32_t k = lp->n_top < n_top ? lp->n_top++ : n_top - 1;
        while (k > 0 && lp->top_logprob[k - 1] < v) {
            lp->top_logprob[k] = lp->top_logprob[k - 1];
            lp->top_id[k] = lp->top_id[k - 1];
            k--;
        }
        lp->top_logprob[k] = v;
        lp->top_id[k] = i;
    }
    for (int32_t k = 0; k < lp->n_top; k++) lp->top_logprob[k] -= lse;
}

/* Hand out the token at toks[idx] (emitted; the tokens before it are in the context or emitted
 * before it): count it, stop at an end-of-generation token, detokenize, tell the caller, stop
 * at max_tokens or where the context has no position left for it. raw: the logits it was
 * picked from, for logprobs (NULL when not asked). Returns whether generation goes on. */
static bool emit(struct snug_seq *s, int32_t idx, const float *raw) {
    snug_token id = s->toks[idx];
    struct snug_seq_logprob lp;
    if (s->p.logprobs && raw) snug_seq_logprob(raw, s->V, id, s->p.top_logprobs, &lp);
    s->n_gen++;
    for (int32_t i = 0; i < s->n_eog; i++)
        if (id == s->eog[i]) {
            s->state = SNUG_SEQ_STOP;
            return false;
        }
    const char *txt = "";
    size_t len = 0;
    if (snug_detok_push(&s->detok, id, &txt, &len) != SNUG_OK) len = 0;
    if (s->p.on_token && s->p.on_token(s->p.user, id, txt, len, s->p.logprobs ? &lp : NULL)) {
        s->state = SNUG_SEQ_STOP;
        return false;
    }
    if ((s->p.max_tokens > 0 && s->n_gen >= s->p.max_tokens) || idx + 1 > s->n_ctx) {
        s->state = SNUG_SEQ_LENGTH;
        return false;
    }
    return true;
}

/* Pick the token after the context's tokens from their last logits (row, editable) into
 * toks[n_toks]: the script's next (or a forced token), else the constrained sample. False when
 * the script is over (the sequence stops). */
static bool pick(struct snug_seq *s, float *row) {
    const struct snug_spec_constraint *c = s->p.constraint;
    snug_token id;
    if (s->p.script) {
        snug_token forced = c && c->force ? c->force(c->user) : -1;
        if (forced >= 0) {
            id = forced; /* a forced token does not advance the script */
        } else {
            if (s->script_pos >= s->p.n_script) {
                s->state = SNUG_SEQ_STOP;
                return false;
            }
            id = s->p.script[s->script_pos++];
        }
        if (c && c->accept) c->accept(c->user, id);
    } else {
        id = snug_spec_pick(s->smp, c, row, s->V, s->toks, s->n_toks);
    }
    s->toks[s->n_toks] = id;
    return true;
}

enum snug_seq_state snug_seq_first(struct snug_seq *s, float *logits) {
    s->state = SNUG_SEQ_RUNNING;
    s->k = 0;
    if (pick(s, logits)) emit(s, s->n_toks, logits);
    return s->state;
}

int32_t snug_seq_rows(struct snug_seq *s, struct snug_step_row *rows, int32_t cap,
                      struct snug_err *err) {
    s->k = 0;
    s->step_given = false;
    if (s->state != SNUG_SEQ_RUNNING || cap < 1) return 0;
    snug_token next = s->toks[s->n_toks];
    s->t_rows0 = snug_time_s();
    if (s->p.speculate && cap > 1) {
        int32_t want = snug_ctx_spec_k(s->ctx), k = 0;
        if (s->p.spec_adapt) {
            int32_t j = snug_spec_adapt_next(&s->adapt); /* (once: it counts the probes) */
            want = SNUG_MIN(j, want);
        }
        int rc = want > 0
                     ? snug_ctx_draft(s->ctx, next, SNUG_MIN(want, cap - 1), s->drafts, &k, err)
                     : SNUG_OK;
        if (rc != SNUG_OK) {
            s->state = SNUG_SEQ_STOP;
            return rc;
        }
        s->k = k;
    }
    s->t_rows1 = snug_time_s();
    unsigned flags = SNUG_ROW_LOGITS | (s->k > 0 ? SNUG_ROW_VERIFY : 0);
    for (int32_t i = 0; i <= s->k; i++)
        rows[i] = (struct snug_step_row){.ctx = s->ctx,
                                         .token = i == 0 ? next : s->drafts[i - 1],
                                         .pos = s->n_toks + i,
                                         .flags = flags};
    return s->k + 1;
}

void snug_seq_pick(struct snug_seq *s, float *logits) {
    if (s->state != SNUG_SEQ_RUNNING || s->k != 0 || s->picked) return;
    s->t_pick = snug_time_s();
    s->n_toks++;
    s->pick_go = pick(s, logits);
    s->picked = true;
}

void snug_seq_untake(struct snug_seq *s) {
    s->k = 0;
    s->step_given = false;
}

void snug_seq_step_time(struct snug_seq *s, double seconds) {
    s->t_step = seconds;
    s->step_given = true;
}

/* A speculative step with k drafts is over (its tokens picked or accepted, not yet emitted):
 * its time — the drafting, the step (the caller's, or from the end of snug_seq_rows to t_take),
 * the pick or acceptance since t_take — and its acceptance go to the estimates. */
static void note_step(struct snug_seq *s, int32_t k, int32_t accepted, double t_take) {
    double step = s->step_given ? s->t_step : t_take - s->t_rows1;
    double spent = step >= 0 ? (s->t_rows1 - s->t_rows0) + step + (snug_time_s() - t_take) : -1;
    snug_spec_adapt_note_step(&s->adapt, k, spent);
    snug_spec_adapt_note_accept(&s->adapt, k, accepted);
    s->step_given = false;
}

int snug_seq_take(struct snug_seq *s, float *logits, struct snug_err *err) {
    if (s->state != SNUG_SEQ_RUNNING) return SNUG_OK;
    double t_take = snug_time_s();
    int32_t k = s->k;
    s->k = 0;
    if (k == 0) { /* a plain decode row: the pending token is in the context now */
        float *row = logits;
        bool go;
        if (s->picked) { /* (snug_seq_pick did it) */
            s->picked = false;
            t_take = s->t_pick;
            go = s->pick_go;
        } else {
            s->n_toks++;
            go = pick(s, row);
        }
        if (s->p.speculate) note_step(s, 0, 0, t_take);
        if (go) emit(s, s->n_toks, row);
        return SNUG_OK;
    }
    /* a verification: hist = the context's tokens before it and the pending one */
    int32_t n0 = s->n_toks, n_new = 0;
    int rc = snug_spec_accept(s->ctx, s->smp, logits, s->drafts, k, s->toks, n0 + 1,
                              s->p.constraint, &n_new, err);
    if (rc != SNUG_OK) {
        s->state = SNUG_SEQ_STOP;
        return rc;
    }
    note_step(s, k, n_new - 1, t_take);
    /* toks[n0] (was pending) and the n_new - 1 accepted drafts are in the context; the last
     * emitted token is pending */
    s->n_toks = n0 + n_new;
    for (int32_t i = 1; i <= n_new; i++)
        if (!emit(s, n0 + i, NULL)) break;
    return SNUG_OK;
}

void snug_seq_flush(struct snug_seq *s, bool quiet) {
    const char *txt;
    size_t len;
    snug_detok_flush(&s->detok, &txt, &len);
    if (len && !quiet && s->p.on_token) s->p.on_token(s->p.user, -1, txt, len, NULL);
    s->state = SNUG_SEQ_IDLE;
    s->k = 0;
}
