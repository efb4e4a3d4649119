/* speculative.h — speculative decoding with the MTP block (docs/qwen35.md §3): one draft →
 * verify → accept → rollback step with a sampler, the acceptance half for callers that run the
 * verification rows in a shared step, and the constraint hook of constrained jobs. The MTP state
 * these work on is the context's (src/model/mtp.h). Driven by the generation loop
 * (src/engine/sequence.c). Invariant: nothing here allocates.
 * Read next: speculative.c, src/model/mtp.h, docs/spec-decode.md.
 */
#ifndef SNUG_SPECULATIVE_H
#define SNUG_SPECULATIVE_H

#include "model/mtp.h"
#include "sample/sample.h"
#include "snug.h"

/* One speculative step. hist[0..n_hist) is the sequence so far; its last token is sampled but
 * not evaluated yet (the context holds n_hist - 1 tokens); cap is hist's capacity. Drafts
 * k = snug_ctx_spec_k tokens (clamped to the context and to cap), verifies them in one trunk
 * forward and accepts by the sampler: each verification row's token is the sampler's pick, as
 * plain decoding's at that position (greedy: the argmax; else a draw with the sampler's own
 * generator), and draft d is kept when it is that token — kept with probability p(d), a
 * rejection emitting a token of p with d removed (Leviathan et al. for a deterministic draft,
 * docs/qwen35.md §3.4), one draw per emitted token — so the output is plain decoding's, token
 * for token, for any seed and any number of drafts. Rolls the context back to the accepted
 * tokens and appends the *n_new (1..k+1) emitted tokens to hist; the last one is again
 * pending. The penalties of the sampler see hist. Allocates nothing. */
int snug_spec_step(struct snug_ctx *ctx, struct snug_sampler *smp, snug_token *hist, int32_t n_hist,
                   int32_t cap, int32_t *n_new, struct snug_err *err);

/* A constraint on the emitted tokens (grammars: src/grammar via the server's engine hook). At
 * every verification row: force() may name the token (a draft equal to it is kept, else it is
 * emitted and the step ends); otherwise mask() edits the row's logits (disallowed -> -INFINITY)
 * before the sampler's distribution is taken, so a draft the constraint rejects has p = 0 and is
 * cut there by the acceptance test; accept() is told every kept draft and the emitted token, in
 * order. The rows are masked with the constraint's state after the drafts before them. */
struct snug_spec_constraint {
    void *user;
    snug_token (*force)(void *user);
    void (*mask)(void *user, float *logits, int32_t n_vocab);
    void (*accept)(void *user, snug_token id);
};

/* snug_spec_step under a constraint (NULL = none, the same as snug_spec_step). */
int snug_spec_step_constrained(struct snug_ctx *ctx, struct snug_sampler *smp, snug_token *hist,
                               int32_t n_hist, int32_t cap, const struct snug_spec_constraint *con,
                               int32_t *n_new, struct snug_err *err);

/* One token by the sampler under a constraint (NULL = none): the forced token if force() names
 * one, else the sample of logits [V] after mask() (which edits them); accept() is told the
 * token. The plain (non-speculative) pick of every generation loop (src/engine/sequence.h). */
snug_token snug_spec_pick(struct snug_sampler *smp, const struct snug_spec_constraint *con,
                          float *logits, int32_t V, const snug_token *hist, int32_t n_hist);

/* The acceptance half of snug_spec_step_constrained, for callers that draft (snug_ctx_draft) and
 * run the verification forward themselves: the server's engine puts every slot's verification
 * rows into one snug_step (SNUG_ROW_VERIFY | SNUG_ROW_LOGITS). ctx has just evaluated
 * [hist[n_hist - 1], drafts[0..k)] as verification rows (k >= 1) whose logits are
 * logits [k + 1][V] (the constraint's mask edits them); accepts a prefix of the drafts as
 * snug_spec_step_constrained does, appends the *n_new emitted tokens to hist (capacity
 * n_hist + k + 1), counts the statistics and rolls ctx back to the accepted tokens. */
int snug_spec_accept(struct snug_ctx *ctx, struct snug_sampler *smp, float *logits,
                     const snug_token *drafts, int32_t k, snug_token *hist, int32_t n_hist,
                     const struct snug_spec_constraint *con, int32_t *n_new, struct snug_err *err);

/* Rollback strategy for measurements: false (default) = per-token snapshots during
 * verification (step recurrence); true = save the state before verification, verify with
 * the chunked rule and recompute the accepted tokens after a partial acceptance. */
void snug_spec_set_rollback(struct snug_ctx *ctx, bool recompute);

#endif /* SNUG_SPECULATIVE_H */
