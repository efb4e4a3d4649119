/* test_speculative_adapt.c — the draft length per step (src/speculative/adapt.h), on given
 * numbers (no clock, no model):
 *  - E(j) = (1 − a^(j+1)) / (1 − a), and its ends (a = 0, a = 1, a out of range);
 *  - the rule: the priors (a = 0.7, c(j) = 1 + 0.1 j) choose N; a low acceptance chooses 0;
 *    the break-even acceptance of one draft; measured costs that grow fast choose a middle j
 *    (the GPU and CPU tables of docs/spec-decode.md); a tie goes to the smaller j; costs that
 *    are not positive finite numbers are skipped; N = 0; the result stays in [0, N] on random
 *    inputs;
 *  - the costs from measurements: none (the prior), one point (the prior's shape), points
 *    interpolated, extrapolated along the last slope (at least flat), below the smallest
 *    measured j by the prior's shape;
 *  - the estimates: a draft past the first rejection is no trial; the warm-up step is no
 *    sample; a sample counts at most 4 × the average; a restart keeps the costs and resets the
 *    acceptance;
 *  - the probes: j = 1 every 16th step while the rule says 0, N − 1 at N, j ∓ 1 in turn between;
 *  - the loop on modelled sequences: drafts accepted with probability p and a step cost
 *    t(j) = t0 (1 + s j): it settles where E(j) / c(j) is largest (p = 0.8 and a cheap draft: N;
 *    an expensive draft: a middle j), and with p = 0.05 at 0 (probing one draft every 16 steps),
 *    then back to drafting when p rises to 0.85.
 */
#include "speculative/adapt.h"
#include "test.h"

#include <math.h>
#include <stdint.h>

static void test_expected(void) {
    CHECK_NEAR(snug_spec_adapt_expected(0.7, 0), 1, 1e-12);
    CHECK_NEAR(snug_spec_adapt_expected(0.7, 3), (1 - pow(0.7, 4)) / (1 - 0.7), 1e-12);
    CHECK_NEAR(snug_spec_adapt_expected(0.5, 2), 1.75, 1e-12);
    CHECK_NEAR(snug_spec_adapt_expected(1.0, 4), 5, 1e-12); /* no division by 1 − a = 0 */
    CHECK_NEAR(snug_spec_adapt_expected(0.0, 4), 1, 1e-12);
    CHECK_NEAR(snug_spec_adapt_expected(-0.3, 4), 1, 1e-12);
    CHECK_NEAR(snug_spec_adapt_expected(1.5, 2), 3, 1e-12);
    CHECK_NEAR(snug_spec_adapt_expected(NAN, 2), 1, 1e-12);
}

static void prior_costs(double *c, int32_t n) {
    for (int32_t j = 0; j <= n; j++) c[j] = 1 + SNUG_SPEC_ADAPT_PRIOR_SLOPE * j;
}

static void test_rule(void) {
    double c[SNUG_SPEC_MAX_DRAFT + 1];
    prior_costs(c, SNUG_SPEC_MAX_DRAFT);
    /* the priors: the most drafts (E(3)/c(3) = 2.533/1.3 = 1.95 > E(2)/c(2) = 1.83) */
    CHECK(snug_spec_adapt_best(SNUG_SPEC_ADAPT_PRIOR_A, c, 3) == 3);
    CHECK(snug_spec_adapt_best(0.85, c, 4) == 4);
    /* a low acceptance: no drafts (E(1)/c(1) = 1.05/1.1 < 1) */
    CHECK(snug_spec_adapt_best(0.05, c, 3) == 0);
    CHECK(snug_spec_adapt_best(0.0, c, 3) == 0);
    CHECK(snug_spec_adapt_best(0.09, c, 16) == 0);
    /* one draft pays from a > c(1) − 1: with c(1) = 1.3, 0.29 → 0, 0.31 → at least 1 */
    double c13[4] = {1, 1.3, 1.6, 1.9};
    CHECK(snug_spec_adapt_best(0.29, c13, 3) == 0);
    CHECK(snug_spec_adapt_best(0.31, c13, 3) >= 1);
    /* the 27B Q4_K_M on the H200 (docs/spec-decode.md: verify + draft): 1, 1.31, 1.67, 1.95,
     * 2.56 at a = 0.7: E/c = 1, 1.298, 1.311, 1.299, 1.082 → 2 */
    double gpu[5] = {1, 1.31, 1.67, 1.95, 2.56};
    CHECK(snug_spec_adapt_best(0.7, gpu, 4) == 2);
    CHECK(snug_spec_adapt_best(0.9, gpu, 4) == 3); /* 3.439/1.95 = 1.76 > 4.095/2.56 = 1.60 */
    CHECK(snug_spec_adapt_best(0.2, gpu, 4) == 0);
    /* the CPU's ~0.9B model (1.15, 1.39, 2.13) at 0.7: 2 */
    double cpu[4] = {1, 1.15, 1.39, 2.13};
    CHECK(snug_spec_adapt_best(0.7, cpu, 3) == 2);
    /* a = 1: every draft is kept, so the most drafts whose cost grows slower than j + 1 */
    CHECK(snug_spec_adapt_best(1.0, c13, 3) == 3);
    /* a tie goes to the smaller j: E(1) = 1.5 = c(1) at a = 0.5 */
    double tie[2] = {1, 1.5};
    CHECK(snug_spec_adapt_best(0.5, tie, 1) == 0);
    /* costs that are not positive finite numbers rule their j out; none left: 0 */
    double bad[4] = {1, NAN, -1, 1.2};
    CHECK(snug_spec_adapt_best(0.7, bad, 3) == 3);
    double bad0[3] = {0, INFINITY, NAN};
    CHECK(snug_spec_adapt_best(0.9, bad0, 2) == 0);
    /* N = 0, a negative N, one past the largest */
    CHECK(snug_spec_adapt_best(0.9, c, 0) == 0);
    CHECK(snug_spec_adapt_best(0.9, c, -3) == 0);
    CHECK(snug_spec_adapt_best(0.99, c, 1000) <= SNUG_SPEC_MAX_DRAFT);
    /* random inputs: in [0, N], and no other j does better */
    int bad_range = 0, not_best = 0;
    for (int it = 0; it < 20000; it++) {
        int32_t n = (int32_t)(test_rand01() * (SNUG_SPEC_MAX_DRAFT + 1));
        double a = test_rand01() * 1.2 - 0.1, cc[SNUG_SPEC_MAX_DRAFT + 1];
        for (int32_t j = 0; j <= n; j++) cc[j] = 0.5 + 3 * test_rand01();
        int32_t b = snug_spec_adapt_best(a, cc, n);
        bad_range += b < 0 || b > n;
        for (int32_t j = 0; j <= n; j++)
            not_best += snug_spec_adapt_expected(a, j) / cc[j] >
                        snug_spec_adapt_expected(a, b) / cc[b] * (1 + 1e-12);
    }
    CHECK(bad_range == 0);
    CHECK(not_best == 0);
}

static void test_costs(void) {
    double t[SNUG_SPEC_MAX_DRAFT + 1] = {0}, c[SNUG_SPEC_MAX_DRAFT + 1];
    snug_spec_adapt_costs(t, 4, c); /* nothing measured: the prior */
    for (int32_t j = 0; j <= 4; j++) CHECK_NEAR(c[j], 1 + 0.1 * j, 1e-12);
    t[3] = 0.026; /* one point: the prior's shape through it */
    snug_spec_adapt_costs(t, 4, c);
    for (int32_t j = 0; j <= 4; j++) CHECK_NEAR(c[j], 1 + 0.1 * j, 1e-12);
    t[0] = 0.010; /* 0 and 3: on the line between, the slope beyond */
    snug_spec_adapt_costs(t, 4, c);
    CHECK_NEAR(c[0], 1, 1e-12);
    CHECK_NEAR(c[1], 1 + 1.6 / 3, 1e-12);
    CHECK_NEAR(c[2], 1 + 3.2 / 3, 1e-12);
    CHECK_NEAR(c[3], 2.6, 1e-12);
    CHECK_NEAR(c[4], 2.6 + 1.6 / 3, 1e-12);
    /* 1 and 2 measured: below by the prior's shape (T(0) = t(1) / 1.1), above along the slope */
    double u[6] = {0, 0.011, 0.013, NAN, -1, 0};
    snug_spec_adapt_costs(u, 5, c);
    CHECK_NEAR(c[0], 1, 1e-12);
    CHECK_NEAR(c[1], 1.1, 1e-12);
    CHECK_NEAR(c[2], 0.013 / 0.010, 1e-12);
    CHECK_NEAR(c[3], 0.015 / 0.010, 1e-12);
    CHECK_NEAR(c[5], 0.019 / 0.010, 1e-12);
    /* a falling last slope (noise) extends flat */
    double w[4] = {0.010, 0.014, 0.012, 0};
    snug_spec_adapt_costs(w, 3, c);
    CHECK_NEAR(c[3], 1.2, 1e-12);
    /* every cost positive and finite on random measurements */
    int bad = 0;
    for (int it = 0; it < 5000; it++) {
        double r[SNUG_SPEC_MAX_DRAFT + 1];
        int32_t n = (int32_t)(test_rand01() * (SNUG_SPEC_MAX_DRAFT + 1));
        for (int32_t j = 0; j <= n; j++) r[j] = test_rand01() < 0.5 ? 0 : test_rand01() * 0.1;
        snug_spec_adapt_costs(r, n, c);
        for (int32_t j = 0; j <= n; j++) bad += !(c[j] > 0) || !isfinite(c[j]);
        bad += fabs(c[0] - 1) > 1e-12;
    }
    CHECK(bad == 0);
}

static void test_estimates(void) {
    struct snug_spec_adapt s;
    snug_spec_adapt_init(&s, 3);
    CHECK(s.n_max == 3);
    CHECK_NEAR(s.a, SNUG_SPEC_ADAPT_PRIOR_A, 0);
    /* 3 drafts, 1 kept: two trials (a success, the rejection); the third draft is no trial */
    snug_spec_adapt_note_accept(&s, 3, 1);
    double a = 0.7 + 0.0625 * 0.3;
    a = a - 0.0625 * a;
    CHECK_NEAR(s.a, a, 1e-12);
    /* all kept: three successes, no failure */
    snug_spec_adapt_note_accept(&s, 3, 3);
    for (int i = 0; i < 3; i++) a += 0.0625 * (1 - a);
    CHECK_NEAR(s.a, a, 1e-12);
    /* the first draft rejected: one trial */
    snug_spec_adapt_note_accept(&s, 3, 0);
    a -= 0.0625 * a;
    CHECK_NEAR(s.a, a, 1e-12);
    snug_spec_adapt_note_accept(&s, 0, 0); /* no drafts: nothing */
    CHECK_NEAR(s.a, a, 1e-12);
    /* only rejections drive it towards 0, only acceptances towards 1 */
    for (int i = 0; i < 200; i++) snug_spec_adapt_note_accept(&s, 2, 0);
    CHECK(s.a < 1e-4);
    for (int i = 0; i < 200; i++) snug_spec_adapt_note_accept(&s, 2, 2);
    CHECK(s.a > 1 - 1e-4);

    /* times: the warm-up is no sample, the next sets, then the moving average */
    snug_spec_adapt_note_step(&s, 2, 0.5); /* (the warm-up: a recorded graph) */
    CHECK(s.t[2] == 0);
    snug_spec_adapt_note_step(&s, 2, 0.010);
    CHECK_NEAR(s.t[2], 0.010, 0);
    snug_spec_adapt_note_step(&s, 2, 0.018);
    CHECK_NEAR(s.t[2], 0.011, 1e-12);
    snug_spec_adapt_note_step(&s, 2, 1.0); /* a stall counts as 4 × the average */
    CHECK_NEAR(s.t[2], 0.011 + 0.125 * (0.044 - 0.011), 1e-12);
    double t2 = s.t[2];
    snug_spec_adapt_note_step(&s, 2, -1); /* not a measurement (the step carried prompt rows) */
    snug_spec_adapt_note_step(&s, 2, NAN);
    snug_spec_adapt_note_step(&s, 2, 0);
    CHECK_NEAR(s.t[2], t2, 0);
    snug_spec_adapt_note_step(&s, 7, 0.01); /* past N: ignored */
    snug_spec_adapt_note_step(&s, -1, 0.01);
    CHECK(s.n_steps == 7 && s.n_drafts == 14 && s.steps_at[2] == 7);
    /* a restart: the acceptance to its prior, the costs and counts stay */
    snug_spec_adapt_restart(&s, 3);
    CHECK_NEAR(s.a, SNUG_SPEC_ADAPT_PRIOR_A, 0);
    CHECK_NEAR(s.t[2], t2, 0);
    CHECK(s.n_steps == 7);
    snug_spec_adapt_restart(&s, 2); /* another N: from scratch */
    CHECK(s.n_max == 2 && s.t[2] == 0 && s.n_steps == 0);
    snug_spec_adapt_init(&s, 99);
    CHECK(s.n_max == SNUG_SPEC_MAX_DRAFT);
    snug_spec_adapt_init(&s, -2);
    CHECK(s.n_max == 0 && snug_spec_adapt_next(&s) == 0);
}

static void test_probes(void) {
    struct snug_spec_adapt s;
    /* the rule at 0: every 16th step runs one draft */
    snug_spec_adapt_init(&s, 3);
    s.a = 0.02;
    int ones = 0, others = 0;
    for (int i = 1; i <= 64; i++) {
        int32_t j = snug_spec_adapt_next(&s);
        CHECK(s.best == 0);
        if (i % SNUG_SPEC_ADAPT_PROBE_EVERY == 0)
            ones += j == 1;
        else
            others += j != 0;
    }
    CHECK(ones == 4 && others == 0);
    /* the rule at N: N − 1 every 16th step */
    snug_spec_adapt_init(&s, 3);
    s.a = 0.9;
    for (int i = 1; i <= 32; i++) {
        int32_t j = snug_spec_adapt_next(&s);
        CHECK(j == (i % SNUG_SPEC_ADAPT_PROBE_EVERY == 0 ? 2 : 3));
    }
    /* the rule in the middle (costs measured so that 2 of 4 is best): 1 and 3 in turn */
    snug_spec_adapt_init(&s, 4);
    s.a = 0.7;
    double gpu[5] = {0.010, 0.0131, 0.0167, 0.0195, 0.0256};
    for (int32_t j = 0; j <= 4; j++) {
        s.t[j] = gpu[j];
        s.warm[j] = 1;
    }
    int32_t seen[3], n = 0;
    for (int i = 1; i <= 48; i++) {
        int32_t j = snug_spec_adapt_next(&s);
        CHECK(s.best == 2);
        if (i % SNUG_SPEC_ADAPT_PROBE_EVERY == 0)
            seen[n++] = j;
        else
            CHECK(j == 2);
    }
    CHECK(n == 3 && seen[0] == 1 && seen[1] == 3 && seen[2] == 1);
}

/* The loop on a modelled sequence: each draft accepted with probability p until the first
 * rejection, a step with j drafts costs t0 (1 + slope j) (± 5% noise). Runs `steps` steps
 * and returns the rule's choice at the end; *mean the mean drafts over the last 64 steps. */
static int32_t simulate(struct snug_spec_adapt *s, double p, double slope, int steps,
                        double *mean) {
    int64_t d = 0;
    for (int i = 0; i < steps; i++) {
        int32_t j = snug_spec_adapt_next(s);
        int32_t acc = 0;
        while (acc < j && test_rand01() < p) acc++;
        snug_spec_adapt_note_step(s, j, 0.02 * (1 + slope * j) * (0.95 + 0.1 * test_rand01()));
        snug_spec_adapt_note_accept(s, j, acc);
        if (i >= steps - 64) d += j;
    }
    *mean = (double)d / 64;
    return s->best;
}

static int32_t true_best(double p, double slope, int32_t n) {
    double c[SNUG_SPEC_MAX_DRAFT + 1];
    for (int32_t j = 0; j <= n; j++) c[j] = 1 + slope * j;
    return snug_spec_adapt_best(p, c, n);
}

static void test_loop(void) {
    struct snug_spec_adapt s;
    double mean;
    /* a good head and cheap drafts: all of them */
    snug_spec_adapt_init(&s, 3);
    CHECK(simulate(&s, 0.8, 0.1, 400, &mean) == 3);
    CHECK(mean > 2.8);
    /* expensive drafts (each 0.45 of a plain step): the middle, as the true costs say */
    snug_spec_adapt_init(&s, 4);
    int32_t want = true_best(0.75, 0.45, 4), got = simulate(&s, 0.75, 0.45, 600, &mean);
    CHECKF(want == 1 || want == 2, "the modelled optimum %d", want);
    CHECKF(abs(got - want) <= 1 && got > 0 && got < 4, "settled at %d, the optimum %d", got, want);
    /* drafts that are always rejected: 0, one draft every 16 steps */
    snug_spec_adapt_init(&s, 3);
    CHECK(simulate(&s, 0.05, 0.15, 400, &mean) == 0);
    CHECK_NEAR(mean, 4.0 / 64, 1e-12);
    CHECK(s.a < 0.2);
    /* the text gets easy again: the probes find it and drafting comes back */
    CHECK(simulate(&s, 0.85, 0.15, 800, &mean) >= 2);
    CHECK(mean > 1.5);
}

int main(void) {
    test_expected();
    test_rule();
    test_costs();
    test_estimates();
    test_probes();
    test_loop();
    return TEST_DONE();
}
