/* speculative.c — speculative decoding's acceptance: the draft → verify → accept → rollback
 * step with greedy or rejection-sampling acceptance (docs/qwen35.md §3.3, §3.4), over a
 * context's public calls (snug_ctx_draft, snug_ctx_eval, snug_ctx_truncate) and its MTP state
 * (src/model/mtp.h). Driven by the generation loop (src/engine/sequence.c).
 * Invariant: nothing here allocates. Read next: src/model/mtp.c (drafting), docs/spec-decode.md.
 */
#include "speculative/speculative.h"

#include <string.h>

snug_token snug_spec_pick(struct snug_sampler *smp, const struct snug_spec_constraint *con,
                          float *logits, int32_t V, const snug_token *hist, int32_t n_hist) {
    snug_token f = con && con->force ? con->force(con->user) : -1;
    if (f < 0 || f >= V) {
        if (con && con->mask) con->mask(con->user, logits, V);
        f = snug_sampler_sample(smp, logits, hist, n_hist);
    }
    if (con && con->accept) con->accept(con->user, f);
    return f;
}

int snug_spec_step(struct snug_ctx *ctx, struct snug_sampler *smp, snug_token *hist, int32_t n_hist,
                   int32_t cap, int32_t *n_new, struct snug_err *err) {
    return snug_spec_step_constrained(ctx, smp, hist, n_hist, cap, NULL, n_new, err);
}

int snug_spec_step_constrained(struct snug_ctx *ctx, struct snug_sampler *smp, snug_token *hist,
                               int32_t n_hist, int32_t cap, const struct snug_spec_constraint *con,
                               int32_t *n_new, struct snug_err *err) {
    *n_new = 0;
    struct snug_spec *sp = snug_ctx_spec(ctx);
    if (n_hist < 1 || cap < n_hist + 1)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "spec step: history of %d tokens with capacity %d (needs the pending "
                            "token and room for one more)",
                            n_hist, cap);
    if (!sp) return snug_err_set(err, SNUG_ERR_INVALID, "spec step: context has n_draft 0");
    const snug_token next = hist[n_hist - 1];
    int32_t k = 0;
    snug_token drafts[SNUG_SPEC_MAX_DRAFT];
    if (snug_ctx_spec_k(ctx) > 0) {
        int rc = snug_ctx_draft(ctx, next, SNUG_MIN(snug_ctx_spec_k(ctx), cap - n_hist - 1), drafts,
                                &k, err);
        if (rc) return rc;
    }
    if (k == 0) { /* plain decoding step */
        int rc = snug_ctx_eval(ctx, &next, 1, sp->logits, SNUG_EVAL_LOGITS_LAST, err);
        if (rc) return rc;
        hist[n_hist] = snug_spec_pick(smp, con, sp->logits, (int32_t)sp->V, hist, n_hist);
        *n_new = 1;
        return SNUG_OK;
    }
    sp->batch[0] = next;
    memcpy(sp->batch + 1, drafts, (size_t)k * sizeof *drafts);
    int rc = snug_ctx_eval(ctx, sp->batch, k + 1, sp->logits,
                           SNUG_EVAL_LOGITS_ALL | SNUG_EVAL_SNAPSHOT, err);
    if (rc) return rc;
    return snug_spec_accept(ctx, smp, sp->logits, drafts, k, hist, n_hist, con, n_new, err);
}

int snug_spec_accept(struct snug_ctx *ctx, struct snug_sampler *smp, float *logits,
                     const snug_token *drafts, int32_t k, snug_token *hist, int32_t n_hist,
                     const struct snug_spec_constraint *con, int32_t *n_new, struct snug_err *err) {
    *n_new = 0;
    struct snug_spec *sp = snug_ctx_spec(ctx);
    if (!sp) return snug_err_set(err, SNUG_ERR_INVALID, "spec accept: context has n_draft 0");
    const int32_t n_past = snug_ctx_n_past(ctx) - (k + 1); /* before the verification */
    if (k < 1 || k > sp->n_draft || n_past < 0 || n_hist < 1)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "spec accept: %d drafts (the context allows 1..%d) after %d "
                            "evaluated tokens",
                            k, sp->n_draft, snug_ctx_n_past(ctx));
    /* acceptance, row i verifies draft i (row k gives the bonus token): the row's token is the
     * one plain decoding picks there — forced, or sampled from the (masked) row with the
     * sampler's own generator, which the constraint is told — and draft i is kept when it is
     * that token. So P(keep) = p(d_i), a rejection emits a token of p without d_i, and the
     * generator draws once per emitted token in order, as plain decoding does: the output is
     * plain decoding's for any seed and any number of drafts. */
    int32_t acc = 0;
    snug_token emit = -1;
    for (int32_t i = 0; i <= k; i++) {
        float *row = logits + (int64_t)i * sp->V;
        snug_token x = snug_spec_pick(smp, con, row, (int32_t)sp->V, hist, n_hist + i);
        if (i < k && x == drafts[i]) {
            hist[n_hist + i] = x;
            acc++;
            continue;
        }
        emit = x;
        break;
    }
    hist[n_hist + acc] = emit;
    *n_new = acc + 1;
    struct snug_spec_stats *st = &sp->stats;
    st->n_steps++;
    st->n_drafted += k;
    st->n_accepted += acc;
    st->n_emitted += acc + 1;
    for (int32_t i = 0; i < k; i++) st->proposed_at[i]++;
    for (int32_t i = 0; i < acc; i++) st->accepted_at[i]++;
    return snug_ctx_truncate(ctx, n_past + acc + 1, err);
}

void snug_spec_set_rollback(struct snug_ctx *ctx, bool recompute) {
    struct snug_spec *sp = snug_ctx_spec(ctx);
    if (sp) sp->recompute = recompute;
}
