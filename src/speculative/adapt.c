/* adapt.c — the draft length per step from the measured acceptance and step costs (see
 * adapt.h). Pure: the generation loop (src/engine/sequence.c) holds the state and the clock.
 * Invariant: every draft count returned is in [0, n_max]; nothing here allocates.
 * Read next: src/engine/sequence.c (where the steps are timed and the drafts verified). */
#include "speculative/adapt.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* Weights of a new sample in the moving averages. An acceptance trial comes 1..N times per step;
 * 1/16 follows a change of the text within a few steps and keeps the estimate's noise around
 * ±0.08 at a = 0.7, well inside the flat top of E(j) / c(j). A step time comes once per step of
 * that j; 1/8 as the engine's own step average (src/engine/step_budget.c). */
#define ALPHA_A 0.0625
#define ALPHA_T 0.125
/* A sample counts at most this many times the current average (a stall, a recorded graph). */
#define T_CLAMP 4.0

static int32_t clamp_n(int32_t n) {
    return n < 0 ? 0 : n > SNUG_SPEC_MAX_DRAFT ? SNUG_SPEC_MAX_DRAFT : n;
}

void snug_spec_adapt_init(struct snug_spec_adapt *s, int32_t n_max) {
    memset(s, 0, sizeof *s);
    s->n_max = clamp_n(n_max);
    s->a = SNUG_SPEC_ADAPT_PRIOR_A;
    s->best = s->n_max;
}

void snug_spec_adapt_restart(struct snug_spec_adapt *s, int32_t n_max) {
    if (clamp_n(n_max) != s->n_max) {
        snug_spec_adapt_init(s, n_max);
        return;
    }
    s->a = SNUG_SPEC_ADAPT_PRIOR_A;
    s->since_probe = 0;
    s->probe_up = 0;
}

double snug_spec_adapt_expected(double a, int32_t j) {
    if (!(a > 0)) return 1; /* (NaN too) */
    if (a > 1) a = 1;
    double e = 1, p = 1;
    for (int32_t i = 1; i <= j; i++) e += (p *= a);
    return e;
}

static bool measured(double t) {
    return t > 0 && isfinite(t);
}

/* The prior's shape through a measured point (m, tm), at j. */
static double prior_through(int32_t m, double tm, int32_t j) {
    return tm * (1 + SNUG_SPEC_ADAPT_PRIOR_SLOPE * j) / (1 + SNUG_SPEC_ADAPT_PRIOR_SLOPE * m);
}

void snug_spec_adapt_costs(const double *t, int32_t n_max, double *c) {
    n_max = clamp_n(n_max);
    int32_t m[SNUG_SPEC_MAX_DRAFT + 1], nm = 0; /* the measured j, ascending */
    for (int32_t j = 0; j <= n_max; j++)
        if (measured(t[j])) m[nm++] = j;
    if (nm == 0) {
        for (int32_t j = 0; j <= n_max; j++) c[j] = 1 + SNUG_SPEC_ADAPT_PRIOR_SLOPE * j;
        return;
    }
    double T[SNUG_SPEC_MAX_DRAFT + 1];
    int32_t lo = -1, k = 0; /* lo: the last measured j below; m[k]: the first at or above */
    for (int32_t j = 0; j <= n_max; j++) {
        while (k < nm && m[k] < j) lo = m[k++];
        if (k < nm && m[k] == j) {
            T[j] = t[j];
        } else if (k < nm && lo >= 0) { /* between two measured points */
            int32_t hi = m[k];
            T[j] = t[lo] + (t[hi] - t[lo]) * (double)(j - lo) / (double)(hi - lo);
        } else if (lo < 0) { /* below every measured point */
            T[j] = prior_through(m[0], t[m[0]], j);
        } else if (nm >= 2) { /* above: the last two measured points' slope, at least flat */
            int32_t a = m[nm - 2], b = m[nm - 1];
            double slope = (t[b] - t[a]) / (double)(b - a);
            T[j] = t[b] + (slope > 0 ? slope : 0) * (double)(j - b);
        } else {
            T[j] = prior_through(m[0], t[m[0]], j);
        }
    }
    for (int32_t j = 0; j <= n_max; j++) c[j] = T[j] / T[0];
}

int32_t snug_spec_adapt_best(double a, const double *c, int32_t n_max) {
    n_max = clamp_n(n_max);
    int32_t best = 0;
    double best_v = -1;
    for (int32_t j = 0; j <= n_max; j++) {
        if (!(c[j] > 0) || !isfinite(c[j])) continue;
        double v = snug_spec_adapt_expected(a, j) / c[j];
        if (v > best_v) { /* strictly: a tie keeps the smaller j */
            best_v = v;
            best = j;
        }
    }
    return best;
}

void snug_spec_adapt_current_costs(const struct snug_spec_adapt *s, double *c) {
    snug_spec_adapt_costs(s->t, s->n_max, c);
}

int32_t snug_spec_adapt_next(struct snug_spec_adapt *s) {
    double c[SNUG_SPEC_MAX_DRAFT + 1];
    snug_spec_adapt_costs(s->t, s->n_max, c);
    int32_t j = s->best = snug_spec_adapt_best(s->a, c, s->n_max);
    /* The probe: every PROBE_EVERY-th step runs a neighbour of the choice — at 0 that is one
     * draft every 16 plain steps, so a sequence whose acceptance fell can find it again. */
    if (s->n_max > 0 && ++s->since_probe >= SNUG_SPEC_ADAPT_PROBE_EVERY) {
        s->since_probe = 0;
        if (j == 0) {
            j = 1;
        } else if (j == s->n_max) {
            j = s->n_max - 1;
        } else {
            j += s->probe_up ? 1 : -1;
            s->probe_up = !s->probe_up;
        }
    }
    return j;
}

void snug_spec_adapt_note_accept(struct snug_spec_adapt *s, int32_t k, int32_t accepted) {
    if (k <= 0) return;
    if (accepted < 0) accepted = 0;
    if (accepted > k) accepted = k;
    for (int32_t i = 0; i < accepted; i++) s->a += ALPHA_A * (1 - s->a);
    if (accepted < k) s->a += ALPHA_A * (0 - s->a); /* the first rejection; none after it */
}

void snug_spec_adapt_note_step(struct snug_spec_adapt *s, int32_t j, double seconds) {
    if (j < 0 || j > s->n_max) return;
    s->n_steps++;
    s->n_drafts += j;
    s->steps_at[j]++;
    if (!measured(seconds)) return;
    if (!s->warm[j]) { /* the first timed step with j drafts: a warm-up */
        s->warm[j] = 1;
        return;
    }
    double *t = &s->t[j];
    if (!measured(*t)) {
        *t = seconds;
        return;
    }
    if (seconds > T_CLAMP * *t) seconds = T_CLAMP * *t;
    *t += ALPHA_T * (seconds - *t);
}
