/* jsnum.c — numbers inside bounds (and integer multiples) as GBNF, built digit by digit.
 *
 * Owns: the number rules of the JSON Schema converter (jschema.c): integers in any range
 * [lo, hi] that are multiples of m, and decimals (an integer part, an optional fraction of at
 * most 16 digits, no exponent) between two decimal bounds. A number is a sign and a magnitude;
 * the magnitudes of one digit count are walked by a small automaton over the digit positions
 * whose state is (position, remainder mod m, "still equal to the lower bound's digits so far",
 * "still equal to the upper bound's digits so far"): a digit may not go below the lower bound's
 * digit while the first flag holds, nor above the upper bound's while the second does. States
 * equal to neither bound depend only on the digits left and the remainder, so they are shared
 * between lengths, and without a multiple they are plain `[0-9]{k}`. A decimal's fraction is
 * the same automaton over at most 16 fraction digits, entered with the flags its integer part
 * ended with. Only live states (ones from which some accepted text can still be reached) get a
 * rule, so the grammar has no dead branches.
 * Invariant: every text the rules match is a canonical JSON number (no leading zeros; "-0"
 * may appear, it equals 0) whose value lies inside the bounds, exactly: bounds are decimal
 * strings compared digit by digit, never through floating point.
 * Read next: jschema.c (gen_number: how JSON bounds become these decimal strings).
 */
#include "grammar/jschema_impl.h"

#include "core/core.h"

#include <stdio.h>
#include <string.h>

#define FRAC_MAX 16 /* fraction digits a generated decimal may have */
#define EXPR_MAX 64 /* an expression naming a state: a rule name, a class run, a literal */

/* One automaton run over the integer parts of one digit count. */
struct dfa {
    struct snug_sbuf *rules;
    const char *prefix; /* rule names: prefix-N */
    int *n_rules;
    int *budget; /* rules left before the run is refused */
    unsigned mod;
    /* free states (k digits left, remainder r): rule number (-1 none yet), liveness (-1 not
     * known yet); shared by every length of one magnitude range */
    int *free_rule;
    signed char *free_live;
    /* what follows the integer part, by the flags it ended with: an expression, or NULL when
     * nothing can (then that ending is dead) */
    const char *after[2][2];
    char after_buf[2][2][EXPR_MAX];
    /* the current length's bounds; tight states are per position and flags (the remainder is
     * implied: a tight prefix equals a bound's prefix) */
    const char *lo, *hi;
    int len;
    int tight_rule[INT_MAX_DIGITS + 1][2][2];
    signed char tight_live[INT_MAX_DIGITS + 1][2][2];
};

static int new_rule(struct dfa *a) {
    --*a->budget;
    return (*a->n_rules)++;
}

/* Write "[c0-c1] child | ..." for the digits c0..c1, runs of digits with the same child
 * merged; ok[c] false leaves digit c out. */
static void put_digit_alts(struct snug_sbuf *b, unsigned c0, unsigned c1, const bool *ok,
                           char child[][EXPR_MAX]) {
    bool first = true;
    for (unsigned c = c0; c <= c1;) {
        if (!ok[c]) {
            c++;
            continue;
        }
        unsigned c2 = c;
        while (c2 + 1 <= c1 && ok[c2 + 1] && !strcmp(child[c2 + 1], child[c])) c2++;
        if (c2 == c)
            snug_sbuf_printf(b, "%s \"%u\" %s", first ? "" : " |", c, child[c]);
        else
            snug_sbuf_printf(b, "%s [%u-%u] %s", first ? "" : " |", c, c2, child[c]);
        first = false;
        c = c2 + 1;
    }
}

/* ---- the integer part ------------------------------------------------------------------- */

static bool free_live(struct dfa *a, int k, unsigned r) {
    signed char *v = &a->free_live[k * a->mod + r];
    if (*v >= 0) return *v;
    bool live;
    if (k == 0) {
        live = r == 0 && a->after[0][0];
    } else {
        live = false;
        for (unsigned c = 0; c < 10 && !live; c++)
            live = free_live(a, k - 1, (10 * r + c) % a->mod);
    }
    *v = live;
    return live;
}

static void free_expr(struct dfa *a, int k, unsigned r, char *e);

static int free_rule(struct dfa *a, int k, unsigned r) {
    int *slot = &a->free_rule[k * a->mod + r];
    if (*slot >= 0) return *slot;
    int id = new_rule(a);
    *slot = id;
    char child[10][EXPR_MAX]; /* children first: rules are written whole, one per line */
    bool ok[10];
    for (unsigned c = 0; c < 10; c++) {
        unsigned r2 = (10 * r + c) % a->mod;
        ok[c] = free_live(a, k - 1, r2);
        if (ok[c]) free_expr(a, k - 1, r2, child[c]);
    }
    snug_sbuf_printf(a->rules, "%s-%d ::=", a->prefix, id);
    put_digit_alts(a->rules, 0, 9, ok, child);
    snug_sbuf_puts(a->rules, "\n");
    return id;
}

/* "k more digits from remainder r, then what follows" (the state must be live). */
static void free_expr(struct dfa *a, int k, unsigned r, char *e) {
    if (k == 0)
        snprintf(e, EXPR_MAX, "%s", a->after[0][0]);
    else if (a->mod == 1)
        snprintf(e, EXPR_MAX, "[0-9]{%d} %s", k, a->after[0][0]);
    else
        snprintf(e, EXPR_MAX, "%s-%d", a->prefix, free_rule(a, k, r));
}

/* The digits allowed at position i with flags (tl, th). */
static void digit_span(const struct dfa *a, int i, int tl, int th, unsigned *c0, unsigned *c1) {
    *c0 = tl ? (unsigned)(a->lo[i] - '0') : (i == 0 && a->len > 1 ? 1u : 0u);
    *c1 = th ? (unsigned)(a->hi[i] - '0') : 9u;
}

static bool tight_live(struct dfa *a, int i, unsigned r, int tl, int th);

/* The state after digit c at position i. */
static void step(const struct dfa *a, int i, unsigned r, int tl, int th, unsigned c, unsigned *r2,
                 int *tl2, int *th2) {
    *r2 = (10 * r + c) % a->mod;
    *tl2 = tl && c == (unsigned)(a->lo[i] - '0');
    *th2 = th && c == (unsigned)(a->hi[i] - '0');
}

static bool state_live(struct dfa *a, int i, unsigned r, int tl, int th) {
    if (!tl && !th) return free_live(a, a->len - i, r);
    return tight_live(a, i, r, tl, th);
}

static bool tight_live(struct dfa *a, int i, unsigned r, int tl, int th) {
    if (i == a->len) return r == 0 && a->after[tl][th];
    signed char *v = &a->tight_live[i][tl][th];
    if (*v >= 0) return *v;
    unsigned c0, c1, r2;
    int tl2, th2;
    digit_span(a, i, tl, th, &c0, &c1);
    bool live = false;
    for (unsigned c = c0; c <= c1 && !live; c++) {
        step(a, i, r, tl, th, c, &r2, &tl2, &th2);
        live = state_live(a, i + 1, r2, tl2, th2);
    }
    *v = live;
    return live;
}

static void state_expr(struct dfa *a, int i, unsigned r, int tl, int th, char *e);

static int tight_rule(struct dfa *a, int i, unsigned r, int tl, int th) {
    int *slot = &a->tight_rule[i][tl][th];
    if (*slot >= 0) return *slot;
    int id = new_rule(a);
    *slot = id;
    unsigned c0, c1, r2;
    int tl2, th2;
    digit_span(a, i, tl, th, &c0, &c1);
    char child[10][EXPR_MAX];
    bool ok[10] = {0};
    for (unsigned c = c0; c <= c1; c++) {
        step(a, i, r, tl, th, c, &r2, &tl2, &th2);
        ok[c] = state_live(a, i + 1, r2, tl2, th2);
        if (ok[c]) state_expr(a, i + 1, r2, tl2, th2, child[c]);
    }
    snug_sbuf_printf(a->rules, "%s-%d ::=", a->prefix, id);
    put_digit_alts(a->rules, c0, c1, ok, child);
    snug_sbuf_puts(a->rules, "\n");
    return id;
}

/* The expression of a live state at position i. */
static void state_expr(struct dfa *a, int i, unsigned r, int tl, int th, char *e) {
    if (!tl && !th)
        free_expr(a, a->len - i, r, e);
    else if (i == a->len)
        snprintf(e, EXPR_MAX, "%s", a->after[tl][th]);
    else
        snprintf(e, EXPR_MAX, "%s-%d", a->prefix, tight_rule(a, i, r, tl, th));
}

/* ---- the fraction ----------------------------------------------------------------------- */

struct frac {
    struct dfa *a;
    const char *p, *q; /* lower / upper fraction digits, used while the flag holds */
    size_t np, nq;
    int rule[FRAC_MAX + 1][2][2];
    signed char live[FRAC_MAX + 1][2][2];
};

static unsigned fdig(const char *s, size_t n, int pos) {
    return (size_t)pos < n ? (unsigned)(s[pos] - '0') : 0u;
}

/* May the fraction stop after pos digits with these flags? (Stopping pads with zeros: below
 * the lower bound unless its digits are used up; never above the upper bound.) */
static bool frac_stop(const struct frac *f, int pos, int tl) {
    return !tl || (size_t)pos >= f->np;
}

static bool frac_live(struct frac *f, int pos, int tl, int th);

/* Can a digit be written at pos (and the fraction still be completed)? */
static bool frac_more(struct frac *f, int pos, int tl, int th) {
    if (pos >= FRAC_MAX) return false;
    unsigned c0 = tl ? fdig(f->p, f->np, pos) : 0, c1 = th ? fdig(f->q, f->nq, pos) : 9;
    for (unsigned c = c0; c <= c1; c++)
        if (frac_live(f, pos + 1, tl && c == c0, th && c == c1)) return true;
    return false;
}

static bool frac_live(struct frac *f, int pos, int tl, int th) {
    signed char *v = &f->live[pos][tl][th];
    if (*v < 0) *v = frac_stop(f, pos, tl) || frac_more(f, pos, tl, th);
    return *v;
}

/* The digits from pos on, pos already written, for a live state: "" when none can follow,
 * a rule (optional where the fraction may stop here) otherwise. */
static void frac_expr(struct frac *f, int pos, int tl, int th, char *e) {
    if (!frac_more(f, pos, tl, th)) {
        e[0] = 0;
        return;
    }
    if (!tl && !th) {
        snprintf(e, EXPR_MAX, "[0-9]{0,%d}", FRAC_MAX - pos);
        return;
    }
    int *slot = &f->rule[pos][tl][th];
    if (*slot < 0) {
        int id = new_rule(f->a);
        *slot = id;
        unsigned c0 = tl ? fdig(f->p, f->np, pos) : 0, c1 = th ? fdig(f->q, f->nq, pos) : 9;
        char child[10][EXPR_MAX];
        bool ok[10] = {0};
        for (unsigned c = c0; c <= c1; c++) {
            int tl2 = tl && c == c0, th2 = th && c == c1;
            ok[c] = frac_live(f, pos + 1, tl2, th2);
            if (ok[c]) frac_expr(f, pos + 1, tl2, th2, child[c]);
        }
        snug_sbuf_printf(f->a->rules, "%s-%d ::=", f->a->prefix, id);
        put_digit_alts(f->a->rules, c0, c1, ok, child);
        snug_sbuf_puts(f->a->rules, "\n");
    }
    snprintf(e, EXPR_MAX, "%s-%d%s", f->a->prefix, *slot, frac_stop(f, pos, tl) ? "?" : "");
}

/* The fraction after an integer part that ended equal to the lower bound's (tl) / upper
 * bound's (th) integer digits; p, q: their fraction digits. NULL when nothing can follow. */
static const char *frac_after(struct dfa *a, const char *p, const char *q, int tl, int th,
                              char *out) {
    if (!tl && !th) {
        snprintf(out, EXPR_MAX, "(\".\" [0-9]{1,%d})?", FRAC_MAX);
        return out;
    }
    struct frac f = {.a = a, .p = p, .q = q, .np = tl ? strlen(p) : 0, .nq = th ? strlen(q) : 0};
    memset(f.rule, -1, sizeof f.rule);
    memset(f.live, -1, sizeof f.live);
    bool stop0 = frac_stop(&f, 0, tl), more = frac_more(&f, 0, tl, th);
    if (!stop0 && !more) return NULL;
    if (!more) {
        out[0] = 0;
        return out;
    }
    /* "." and at least one digit: the digit rule of position 0, not optional */
    char body[EXPR_MAX];
    frac_expr(&f, 0, tl, th, body);
    size_t n = strlen(body);
    if (n && body[n - 1] == '?') body[n - 1] = 0;
    int id = new_rule(a);
    snug_sbuf_printf(a->rules, "%s-%d ::= \".\" %s\n", a->prefix, id, body);
    snprintf(out, EXPR_MAX, "%s-%d%s", a->prefix, id, stop0 ? "?" : "");
    return out;
}

/* ---- magnitudes -------------------------------------------------------------------------- */

/* Compare two non-negative decimals (integer digits without leading zeros, fraction digits). */
static int dec_cmp(const char *ai, const char *af, const char *bi, const char *bf) {
    size_t la = strlen(ai), lb = strlen(bi);
    if (la != lb) return la < lb ? -1 : 1;
    int c = strcmp(ai, bi);
    if (c) return c < 0 ? -1 : 1;
    size_t fa = strlen(af), fb = strlen(bf);
    for (size_t k = 0; k < fa || k < fb; k++) {
        char x = k < fa ? af[k] : '0', y = k < fb ? bf[k] : '0';
        if (x != y) return x < y ? -1 : 1;
    }
    return 0;
}

/* Alternatives for the magnitudes in [P, Q] (P = pi.pf, Q = qi.qf; pi, qi without leading
 * zeros, at most INT_MAX_DIGITS long) appended to `alts` (" | " between alternatives):
 * with `frac` decimals (an optional fraction), else integers that are multiples of `mod`
 * followed by `trail`. Returns the number of alternatives added (0: the range holds none),
 * -1 when the rule budget ran out. */
static int magnitudes(struct snug_sbuf *rules, const char *prefix, int *n_rules, int *budget,
                      struct snug_sbuf *alts, const char *pi, const char *pf, const char *qi,
                      const char *qf, bool frac, unsigned mod, const char *trail) {
    if (dec_cmp(pi, pf, qi, qf) > 0) return 0;
    int added = 0, lp = (int)strlen(pi), lq = (int)strlen(qi);
    size_t n_free = (size_t)(INT_MAX_DIGITS + 1) * mod;
    struct dfa a = {.rules = rules, .prefix = prefix, .n_rules = n_rules, .budget = budget};
    a.mod = mod;
    a.free_rule = snug_malloc(n_free * sizeof *a.free_rule);
    a.free_live = snug_malloc(n_free);
    if (!a.free_rule || !a.free_live) {
        snug_free(a.free_rule);
        snug_free(a.free_live);
        return -1;
    }
    memset(a.free_rule, -1, n_free * sizeof *a.free_rule);
    memset(a.free_live, -1, n_free);
    char lo[INT_MAX_DIGITS + 1], hi[INT_MAX_DIGITS + 1];
    for (int L = lp; L <= lq && *budget >= 0; L++) {
        int tl0 = L == lp, th0 = L == lq;
        if (tl0)
            snprintf(lo, sizeof lo, "%s", pi);
        else
            memset(lo, '0', (size_t)L), lo[0] = '1', lo[L] = 0;
        if (th0)
            snprintf(hi, sizeof hi, "%s", qi);
        else
            memset(hi, '9', (size_t)L), hi[L] = 0;
        a.lo = lo, a.hi = hi, a.len = L;
        memset(a.tight_rule, -1, sizeof a.tight_rule);
        memset(a.tight_live, -1, sizeof a.tight_live);
        for (int tl = 0; tl < 2; tl++)
            for (int th = 0; th < 2; th++) {
                char *buf = a.after_buf[tl][th];
                if (!frac) {
                    snprintf(buf, EXPR_MAX, "%s", trail);
                    a.after[tl][th] = buf;
                } else if ((tl && !tl0) || (th && !th0)) {
                    a.after[tl][th] = NULL; /* flags a length off the bounds never has */
                } else {
                    a.after[tl][th] = frac_after(&a, pf, qf, tl, th, buf);
                }
            }
        if (!state_live(&a, 0, 0, tl0, th0)) continue;
        char e[EXPR_MAX];
        if (tl0 || th0) {
            state_expr(&a, 0, 0, tl0, th0, e);
        } else if (mod == 1) { /* a length strictly between the bounds': no leading zero */
            snprintf(e, EXPR_MAX, "[1-9] [0-9]{%d} %s", L - 1, a.after[0][0]);
        } else {
            char child[10][EXPR_MAX];
            bool ok[10] = {0};
            for (unsigned c = 1; c < 10; c++) {
                ok[c] = free_live(&a, L - 1, c % mod);
                if (ok[c]) free_expr(&a, L - 1, c % mod, child[c]);
            }
            int id = new_rule(&a);
            snug_sbuf_printf(rules, "%s-%d ::=", prefix, id);
            put_digit_alts(rules, 1, 9, ok, child);
            snug_sbuf_puts(rules, "\n");
            snprintf(e, EXPR_MAX, "%s-%d", prefix, id);
        }
        if (alts->len) snug_sbuf_puts(alts, " | ");
        snug_sbuf_puts(alts, e);
        added++;
    }
    snug_free(a.free_rule);
    snug_free(a.free_live);
    return *budget < 0 ? -1 : added;
}

/* ---- entry points ------------------------------------------------------------------------ */

static void abs_digits(long long v, char *out, size_t n) {
    snprintf(out, n, "%lld", v < 0 ? -v : v);
}

/* Both signs: the non-negative part from `pos` and "-" with the negative part's magnitudes. */
static int emit_rule(struct snug_sbuf *rules, const char *name, struct snug_sbuf *alts,
                     struct snug_sbuf *neg, int total) {
    if (neg->len) {
        if (alts->len) snug_sbuf_puts(alts, " | ");
        snug_sbuf_printf(alts, "\"-\" (%s)", neg->data);
    }
    if (total > 0) snug_sbuf_printf(rules, "%s ::= %s\n", name, alts->data);
    int rc = alts->oom || neg->oom || rules->oom ? -1 : total > 0;
    snug_free(alts->data);
    snug_free(neg->data);
    return rc;
}

int gr_int_emit(struct snug_sbuf *rules, const char *name, long long lo, long long hi,
                unsigned long long mult, int *budget) {
    /* mult = c * 10^k: a multiple is "0", or a nonzero multiple of c followed by k zeros */
    int k = 0;
    if (!mult) mult = 1;
    while (mult % 10 == 0) mult /= 10, k++;
    if (mult > MULT_MAX) return -2;
    long long p10 = 1;
    for (int i = 0; i < k; i++) p10 *= 10;
    long long ylo = lo >= 0 ? (lo + p10 - 1) / p10 : -((-lo) / p10); /* ceil(lo / 10^k) */
    long long yhi = hi >= 0 ? hi / p10 : -((-hi + p10 - 1) / p10);   /* floor(hi / 10^k) */
    char trail[INT_MAX_DIGITS + 3] = "";
    if (k) {
        trail[0] = '"';
        memset(trail + 1, '0', (size_t)k);
        trail[k + 1] = '"';
        trail[k + 2] = 0;
    }
    struct snug_sbuf alts = {0}, neg = {0};
    int n_rules = 0, total = 0;
    if (ylo <= 0 && yhi >= 0) total++, snug_sbuf_puts(&alts, "\"0\"");
    char a[32], b[32];
    if (yhi >= 1) {
        abs_digits(ylo > 1 ? ylo : 1, a, sizeof a);
        abs_digits(yhi, b, sizeof b);
        int r = magnitudes(rules, name, &n_rules, budget, &alts, a, "", b, "", false,
                           (unsigned)mult, trail);
        total = r < 0 ? -1 : total + r;
    }
    if (ylo <= -1 && total >= 0) {
        abs_digits(yhi < -1 ? yhi : -1, a, sizeof a);
        abs_digits(ylo, b, sizeof b);
        int r = magnitudes(rules, name, &n_rules, budget, &neg, a, "", b, "", false, (unsigned)mult,
                           trail);
        total = r < 0 ? -1 : total + r;
    }
    return emit_rule(rules, name, &alts, &neg, total);
}

int gr_dec_emit(struct snug_sbuf *rules, const char *name, const struct gr_dec *lo,
                const struct gr_dec *hi, int *budget) {
    static const char MAX_I[] = "999999999999999", MAX_F[] = "9999999999999999";
    struct snug_sbuf alts = {0}, neg = {0};
    int n_rules = 0, total = 0;
    if (!hi->set || !hi->neg) { /* values >= 0: [max(lo, 0), hi] */
        const char *pi = "0", *pf = "";
        if (lo->set && !lo->neg) pi = lo->ip, pf = lo->fp;
        const char *qi = hi->set ? hi->ip : MAX_I, *qf = hi->set ? hi->fp : MAX_F;
        int r = magnitudes(rules, name, &n_rules, budget, &alts, pi, pf, qi, qf, true, 1, "");
        total = r < 0 ? -1 : total + r;
    }
    if ((!lo->set || lo->neg) && total >= 0) { /* values < 0: magnitudes [max(-hi, 0), -lo] */
        const char *pi = "0", *pf = "";
        if (hi->set && hi->neg) pi = hi->ip, pf = hi->fp;
        const char *qi = lo->set ? lo->ip : MAX_I, *qf = lo->set ? lo->fp : MAX_F;
        int r = magnitudes(rules, name, &n_rules, budget, &neg, pi, pf, qi, qf, true, 1, "");
        total = r < 0 ? -1 : total + r;
    }
    return emit_rule(rules, name, &alts, &neg, total);
}
