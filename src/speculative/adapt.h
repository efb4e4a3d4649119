/* adapt.h — the draft length of each speculative step, chosen from what one sequence measures
 * (`--spec-adapt on`, the default of `snug run` and `snug serve`; docs/spec-decode.md).
 *
 * Per sequence two estimates are kept:
 *  - a, the probability that a draft is accepted: a moving average over Bernoulli trials, one
 *    per verified draft position up to and including the first rejection (the drafts after a
 *    rejection were never tested, so they are not trials); prior SNUG_SPEC_ADAPT_PRIOR_A;
 *  - t(j), the time of a step that ran j drafts (drafting, the step's forward, acceptance and
 *    rollback; on a batched engine step that step's time): a moving average per j in 0..N, in
 *    seconds. The first step with a given j is a warm-up and not a sample (on CUDA it records
 *    the step's graph), and a sample counts at most 4 × the current average.
 * The relative cost c(j) = t(j) / t(0) (snug_spec_adapt_costs fills the j never measured: the
 * prior c(j) = 1 + 0.1 j before any measurement, then interpolated between measured j and
 * extrapolated beyond them). A step with j drafts emits E(j) = 1 + a + … + a^j =
 * (1 − a^(j+1)) / (1 − a) tokens on average, so the rule (snug_spec_adapt_best) takes the j in
 * 0..N with the largest E(j) / c(j): tokens per unit of time.
 * Probes: every SNUG_SPEC_ADAPT_PROBE_EVERY-th step runs a neighbour of the rule's choice
 * instead (j = 1 when the rule says 0 — so a sequence that stopped drafting measures its
 * acceptance again and can come back —, N − 1 when it says N, else j − 1 and j + 1 in turn),
 * which keeps the costs next to the choice measured as the context deepens.
 * Owns: nothing but the numbers in struct snug_spec_adapt; pure functions (no clock, no
 * allocation) — the generation loop (src/engine/sequence.c) times the steps and holds the state.
 * Invariant: snug_spec_adapt_best and snug_spec_adapt_next return a value in [0, n_max] for
 * any inputs (n_max clamped to [0, SNUG_SPEC_MAX_DRAFT]).
 * Read next: adapt.c, src/engine/sequence.c (snug_seq_rows / snug_seq_take), docs/spec-decode.md.
 */
#ifndef SNUG_SPECULATIVE_ADAPT_H
#define SNUG_SPECULATIVE_ADAPT_H

#include "snug.h"

#include <stdint.h>

/* The acceptance before any draft was verified (published MTP acceptance for the Qwen3.5/3.6
 * heads: 0.69–0.87). */
#define SNUG_SPEC_ADAPT_PRIOR_A 0.7
/* The relative cost before any measurement: c(j) = 1 + SNUG_SPEC_ADAPT_PRIOR_SLOPE · j. */
#define SNUG_SPEC_ADAPT_PRIOR_SLOPE 0.1
/* Every this many steps one runs a neighbour of the rule's choice (see above). */
#define SNUG_SPEC_ADAPT_PROBE_EVERY 16

struct snug_spec_adapt {
    int32_t n_max;                         /* N: the most drafts a step may run */
    double a;                              /* the acceptance estimate */
    double t[SNUG_SPEC_MAX_DRAFT + 1];     /* seconds of a step with j drafts; 0: none yet */
    int32_t warm[SNUG_SPEC_MAX_DRAFT + 1]; /* 1: the warm-up step with j drafts was seen */
    int32_t since_probe;                   /* steps since the last probe */
    int32_t probe_up;                      /* the next probe in the middle goes up (1) or down */
    int32_t best;                          /* the rule's last choice (probes aside) */
    /* the steps run over the sequence's life (snug_spec_adapt_note_step): their count, their
     * drafts, and the steps per draft count */
    int64_t n_steps, n_drafts;
    int64_t steps_at[SNUG_SPEC_MAX_DRAFT + 1];
};

/* No measurements, the priors, n_max drafts at most. */
void snug_spec_adapt_init(struct snug_spec_adapt *s, int32_t n_max);
/* A new generation on the same sequence: the acceptance back to its prior (it belongs to the
 * text) and the probe counter restarted; the step costs (the machine's) and the counts stay.
 * A different n_max starts over (snug_spec_adapt_init). */
void snug_spec_adapt_restart(struct snug_spec_adapt *s, int32_t n_max);

/* E(j) = 1 + a + … + a^j: the tokens a step with j drafts emits on average when each draft is
 * accepted with probability a (clamped to [0, 1]) until the first rejection. */
double snug_spec_adapt_expected(double a, int32_t j);
/* The relative costs c[0..n_max] from the measured times t[0..n_max] (t[j] <= 0 or not finite:
 * not measured): nothing measured: c(j) = 1 + SNUG_SPEC_ADAPT_PRIOR_SLOPE · j. Otherwise T(j) =
 * t[j] where measured; between two measured j, on the line through them; below the smallest
 * measured m, t[m] · (1 + 0.1 j) / (1 + 0.1 m); above the largest measured, along the slope
 * of its two last measured points (at least 0), or with one measured point the prior's shape
 * again; then c(j) = T(j) / T(0). */
void snug_spec_adapt_costs(const double *t, int32_t n_max, double *c);
/* The rule: the j in [0, n_max] with the largest E(j) / c[j] (a ties goes to the smaller j;
 * a cost that is not a positive finite number rules its j out; none left: 0). */
int32_t snug_spec_adapt_best(double a, const double *c, int32_t n_max);

/* The draft count for the next step: the rule's choice on the current estimates (kept in
 * s->best), or every SNUG_SPEC_ADAPT_PROBE_EVERY-th call its neighbour (see above). */
int32_t snug_spec_adapt_next(struct snug_spec_adapt *s);
/* A verification of k drafts kept `accepted` of them: min(accepted + 1, k) trials, `accepted`
 * of them successes, into the acceptance estimate. */
void snug_spec_adapt_note_accept(struct snug_spec_adapt *s, int32_t k, int32_t accepted);
/* A step with j drafts ran (counted) and took `seconds`: a sample of t(j) — unless it is not a
 * positive finite number (the caller could not time the step alone: not a sample), or it is the
 * first sample of this j (the warm-up). A sample counts at most 4 × the current t(j). */
void snug_spec_adapt_note_step(struct snug_spec_adapt *s, int32_t j, double seconds);
/* The current relative costs into c[0..n_max] (snug_spec_adapt_costs over s->t). */
void snug_spec_adapt_current_costs(const struct snug_spec_adapt *s, double *c);

#endif /* SNUG_SPECULATIVE_ADAPT_H */
