/* sample.c — the sampler chain of sample.h and the xoshiro256** generator.
 *
 * Every buffer ([n_vocab] logits copy, probabilities, candidate ids, scratch, counts) is
 * allocated in snug_sampler_init; snug_sampler_sample only reads and writes those.
 * Invariant between calls: count[] is all zero (the penalty pass restores it).
 * Probabilities are kept unnormalised as p_i = exp(z_i - z_max), so the most likely token has
 * p = 1 exactly; filters compare against thresholds in that scale.
 * Read next: tests/unit/test_sample.c (each filter checked against a direct computation).
 */
#include "sample/sample.h"

#include "core/core.h"

#include <math.h>
#include <string.h>

struct snug_sampler {
    struct snug_sampler_params par;
    int32_t n_vocab;
    struct snug_rng rng;
    float *z;       /* [n_vocab] penalised, tempered logits */
    float *p;       /* [n_vocab] unnormalised probabilities exp(z - zmax) (top-k: its
                     * candidates' only; read for candidates alone) */
    float *fscr;    /* [n_vocab] scratch for top-k selection (a heap of k, or a copy) */
    int32_t *cand;  /* [n_vocab] candidate ids */
    int32_t *tmp;   /* [n_vocab] merge-sort scratch; top-k's logits near the top */
    int32_t *count; /* [n_vocab] occurrences in the penalty window; all zero between calls */
};

/* ---- generator ---------------------------------------------------------------------------- */
/* splitmix64 and xoshiro256** are public-domain algorithms by Steele/Lea/Flood and
 * Blackman/Vigna (prng.di.unimi.it); the constants below are theirs, the code is ours. */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void snug_rng_seed(struct snug_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl64(uint64_t v, int k) {
    return (v << k) | (v >> (64 - k));
}

uint64_t snug_rng_next(struct snug_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return out;
}

double snug_rng_uniform(struct snug_rng *r) {
    return (double)(snug_rng_next(r) >> 11) * 0x1.0p-53;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

struct snug_sampler_params snug_sampler_params_default(void) {
    return (struct snug_sampler_params){
        .temperature = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .repeat_last_n = 64,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .seed = 0,
    };
}

int snug_sampler_init(struct snug_sampler **out, const struct snug_sampler_params *params,
                      int32_t n_vocab, struct snug_err *err) {
    *out = NULL;
    if (n_vocab <= 0)
        return snug_err_set(err, SNUG_ERR_INVALID, "sampler: n_vocab %d must be > 0", n_vocab);
    const struct snug_sampler_params *q = params;
    if (!(q->repeat_penalty > 0.0f) || !isfinite(q->repeat_penalty))
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "sampler: repeat penalty %g must be a finite number > 0 (1 = off)",
                            (double)q->repeat_penalty);
    if (isnan(q->temperature) || isnan(q->top_p) || isnan(q->min_p) ||
        !isfinite(q->presence_penalty) || !isfinite(q->frequency_penalty))
        return snug_err_set(err, SNUG_ERR_INVALID, "sampler: a sampling parameter is not a number");
    if (q->min_p > 1.0f)
        return snug_err_set(err, SNUG_ERR_INVALID, "sampler: min-p %g must be in [0, 1]",
                            (double)q->min_p);
    struct snug_sampler *s = snug_calloc(1, sizeof *s);
    if (!s) return snug_err_set(err, SNUG_ERR_NOMEM, "sampler: out of memory");
    s->par = *q;
    s->n_vocab = n_vocab;
    size_t n = (size_t)n_vocab;
    s->z = snug_malloc(n * sizeof(float));
    s->p = snug_malloc(n * sizeof(float));
    s->fscr = snug_malloc(n * sizeof(float));
    s->cand = snug_malloc(n * sizeof(int32_t));
    s->tmp = snug_malloc(n * sizeof(int32_t));
    s->count = snug_calloc(n, sizeof(int32_t));
    if (!s->z || !s->p || !s->fscr || !s->cand || !s->tmp || !s->count) {
        snug_sampler_free(s);
        return snug_err_set(err, SNUG_ERR_NOMEM, "sampler: out of memory for a %d-token vocabulary",
                            n_vocab);
    }
    snug_rng_seed(&s->rng, q->seed);
    *out = s;
    return SNUG_OK;
}

void snug_sampler_free(struct snug_sampler *s) {
    if (!s) return;
    snug_free(s->z);
    snug_free(s->p);
    snug_free(s->fscr);
    snug_free(s->cand);
    snug_free(s->tmp);
    snug_free(s->count);
    snug_free(s);
}

void snug_sampler_seed(struct snug_sampler *s, uint64_t seed) {
    snug_rng_seed(&s->rng, seed);
}

/* ---- the chain ---------------------------------------------------------------------------- */

/* Penalties over the last repeat_last_n tokens of recent[], applied to s->z in place.
 * Each distinct token is penalised once, with its occurrence count c:
 *   z = z > 0 ? z / rp : z * rp;   z -= c · frequency + presence. Returns whether any were on. */
static bool apply_penalties(struct snug_sampler *s, const snug_token *recent, int32_t n_recent) {
    const struct snug_sampler_params *q = &s->par;
    if (q->repeat_penalty == 1.0f && q->presence_penalty == 0.0f && q->frequency_penalty == 0.0f)
        return false;
    if (!recent || n_recent <= 0) return false;
    int32_t start = 0;
    if (q->repeat_last_n >= 0 && n_recent > q->repeat_last_n) start = n_recent - q->repeat_last_n;
    for (int32_t i = start; i < n_recent; i++) {
        snug_token t = recent[i];
        if (t >= 0 && t < s->n_vocab) s->count[t]++;
    }
    for (int32_t i = start; i < n_recent; i++) {
        snug_token t = recent[i];
        if (t < 0 || t >= s->n_vocab || s->count[t] == 0) continue;
        float c = (float)s->count[t];
        float z = s->z[t];
        z = z > 0.0f ? z / q->repeat_penalty : z * q->repeat_penalty;
        z -= c * q->frequency_penalty + q->presence_penalty;
        s->z[t] = z;
        s->count[t] = 0;
    }
    return true;
}

/* Index of the largest s->z (ties -> lowest id; NaN never wins). */
static int32_t argmax_z(const struct snug_sampler *s) {
    int32_t best = 0;
    float bv = -INFINITY;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (s->z[i] > bv) {
            bv = s->z[i];
            best = i;
        }
    }
    return best;
}

/* The k-th largest value (1-based) of a[0..n), reordering a. Quickselect with a three-way
 * partition (many equal values, e.g. masked logits, stay linear). */
static float kth_largest(float *a, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n - 1, want = k - 1; /* index in descending order */
    for (;;) {
        if (lo >= hi) return a[lo];
        float x = a[lo], y = a[(lo + hi) / 2], w = a[hi];
        float piv = (x > y) ? ((y > w) ? y : (x > w ? w : x)) : ((x > w) ? x : (y > w ? w : y));
        /* partition into [> piv | == piv | < piv] */
        int32_t lt = lo, i = lo, gt = hi;
        while (i <= gt) {
            if (a[i] > piv) {
                float t = a[lt];
                a[lt] = a[i];
                a[i] = t;
                lt++, i++;
            } else if (a[i] < piv) {
                float t = a[gt];
                a[gt] = a[i];
                a[i] = t;
                gt--;
            } else {
                i++;
            }
        }
        if (want < lt)
            hi = lt - 1;
        else if (want > gt)
            lo = gt + 1;
        else
            return piv;
    }
}

/* The k-th largest value (1-based, k <= n) of a[0..n) without reordering a: a min-heap of the
 * k largest seen so far in heap[0..k) (a value equal to the heap's least changes nothing: the
 * multiset of the k largest is the same), so a pass costs one comparison per element and a
 * sift for the few that enter. */
static float kth_largest_heap(const float *a, int32_t n, int32_t k, float *heap) {
    for (int32_t i = 0; i < k; i++) { /* sift up */
        int32_t c = i;
        float v = a[i];
        while (c > 0 && heap[(c - 1) / 2] > v) {
            heap[c] = heap[(c - 1) / 2];
            c = (c - 1) / 2;
        }
        heap[c] = v;
    }
    for (int32_t i = k; i < n; i++) {
        float v = a[i];
        if (!(v > heap[0])) continue;
        int32_t c = 0; /* replace the least and sift down */
        for (;;) {
            int32_t l = 2 * c + 1, m = c;
            float mv = v;
            if (l < k && heap[l] < mv) m = l, mv = heap[l];
            if (l + 1 < k && heap[l + 1] < mv) m = l + 1, mv = heap[l + 1];
            if (m == c) break;
            heap[c] = heap[m];
            c = m;
        }
        heap[c] = v;
    }
    return heap[0];
}

/* Floats as integers in the same order (-0 and +0 both 0), and back. */
static int64_t float_order(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b & 0x80000000u ? -(int64_t)(b & 0x7fffffffu) : (int64_t)b;
}
static float order_float(int64_t o) {
    uint32_t b = o < 0 ? 0x80000000u | (uint32_t)(-o) : (uint32_t)o;
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* Top-k without the softmax over the whole vocabulary: exp is monotone, so the k-th largest
 * probability is that of the k-th largest logit zk, and a probability can equal it only for a
 * logit in the run of floats just below zk that round to the same exp (found by bisection).
 * Candidates are the logits from the lowest of those up; only they get p. Fills cand[0..n)
 * (increasing ids) exactly as the full computation would (the ones above the k-th probability, then
 * ties at it by lowest id) and returns n, or -1 where that shortcut does not hold (the k-th
 * probability underflows to 0, or the run below zk is wider than the logits' scale): the caller
 * then takes the full path. */
static int32_t top_k_direct(struct snug_sampler *s, float zmax, float inv_t, double *base) {
    const int32_t V = s->n_vocab, k = s->par.top_k;
    float zk = k <= 1024
                   ? kth_largest_heap(s->z, V, k, s->fscr)
                   : (memcpy(s->fscr, s->z, (size_t)V * sizeof(float)), kth_largest(s->fscr, V, k));
    float pk = expf((zk - zmax) * inv_t);
    if (!(pk > 0.0f) || zk == -INFINITY) return -1;
    /* zlo, the lowest logit whose probability is still pk: below zk by a growing gap until the
     * probability drops, then a bisection over the floats in between (as ordered integers) */
    float scale = fmaxf(1.0f, fmaxf(fabsf(zk), fabsf(zmax))), gap = 1e-6f * scale, zbelow;
    while (expf(((zbelow = zk - gap) - zmax) * inv_t) == pk)
        if ((gap *= 16.0f) > scale) return -1;
    int64_t lo = float_order(zbelow), hi = float_order(zk); /* p(lo) < pk = p(hi) */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (expf((order_float(mid) - zmax) * inv_t) == pk)
            hi = mid;
        else
            lo = mid;
    }
    float zlo = order_float(hi);
    int32_t n_gt = 0, m = 0, n = 0; /* tmp[0..m): the logits from zlo up, in id order */
    for (int32_t i = 0; i < V; i++)
        if (s->z[i] >= zlo) {
            float e = expf((s->z[i] - zmax) * inv_t);
            s->p[i] = e;
            n_gt += e > pk;
            s->tmp[m++] = i;
        }
    int32_t n_eq = k - n_gt; /* ties at the boundary: lowest ids first */
    *base = 0.0;
    for (int32_t c = 0; c < m; c++) {
        int32_t i = s->tmp[c];
        if (s->p[i] > pk || (s->p[i] == pk && n_eq-- > 0)) {
            s->cand[n++] = i;
            *base += s->p[i];
        }
    }
    return n;
}

/* Stable bottom-up merge sort of cand[0..n) by p[] descending; since candidates are gathered
 * in increasing id order, equal probabilities stay in increasing id order. */
static void sort_cand(struct snug_sampler *s, int32_t n) {
    int32_t *a = s->cand, *b = s->tmp;
    const float *p = s->p;
    for (int32_t w = 1; w < n; w *= 2) {
        for (int32_t lo = 0; lo < n; lo += 2 * w) {
            int32_t mid = SNUG_MIN(lo + w, n), hi = SNUG_MIN(lo + 2 * w, n);
            int32_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) b[o++] = (p[a[i]] >= p[a[j]]) ? a[i++] : a[j++];
            while (i < mid) b[o++] = a[i++];
            while (j < hi) b[o++] = a[j++];
        }
        int32_t *t = a;
        a = b;
        b = t;
    }
    if (a != s->cand) memcpy(s->cand, a, (size_t)n * sizeof(int32_t));
}

/* Run the chain. On return cand[0..n) are the surviving ids with unnormalised probabilities
 * p[id]; *mass is their sum. Greedy (or a degenerate distribution) yields one candidate. */
static int32_t prepare(struct snug_sampler *s, const float *logits, const snug_token *recent,
                       int32_t n_recent, double *mass) {
    const struct snug_sampler_params *q = &s->par;
    const int32_t V = s->n_vocab;
    /* NaN to -inf and the argmax in one pass (again after penalties, which move logits) */
    int32_t top = 0;
    float best = -INFINITY;
    for (int32_t i = 0; i < V; i++) {
        float x = isnan(logits[i]) ? -INFINITY : logits[i];
        s->z[i] = x;
        if (x > best) best = x, top = i;
    }
    if (apply_penalties(s, recent, n_recent)) top = argmax_z(s);
    float zmax = s->z[top];
    if (q->temperature <= 0.0f || q->top_k == 1 || zmax == -INFINITY || zmax == INFINITY) {
        s->cand[0] = top;
        s->p[top] = 1.0f;
        *mass = 1.0;
        return 1;
    }

    const float inv_t = 1.0f / q->temperature;
    const bool use_k = q->top_k > 0 && q->top_k < V;
    const bool use_p = q->top_p < 1.0f;
    const bool use_min = q->min_p > 0.0f;
    double base = 0.0; /* mass of the distribution top-p acts on */
    int32_t n = use_k ? top_k_direct(s, zmax, inv_t, &base) : -1;
    if (n < 0) { /* the full path: the softmax over the whole vocabulary */
        double total = 0.0;
        for (int32_t i = 0; i < V; i++) {
            float e = expf((s->z[i] - zmax) * inv_t);
            s->p[i] = e;
            total += e;
        }
        n = 0;
        if (use_k) {
            memcpy(s->fscr, s->p, (size_t)V * sizeof(float));
            float kth = kth_largest(s->fscr, V, q->top_k);
            int32_t n_gt = 0;
            for (int32_t i = 0; i < V; i++) n_gt += s->p[i] > kth;
            int32_t n_eq = q->top_k - n_gt; /* ties at the boundary: lowest ids first */
            base = 0.0;
            for (int32_t i = 0; i < V; i++) {
                if (s->p[i] > kth || (s->p[i] == kth && n_eq-- > 0)) {
                    s->cand[n++] = i;
                    base += s->p[i];
                }
            }
        } else {
            /* Pre-filter: a threshold set is a prefix of the sorted order. Tokens below
             * (1-p)/V of the total together hold < (1-p) of the mass, so the top-p prefix lies
             * inside the kept set; tokens below min_p are dropped by min-p whatever top-p
             * keeps. */
            float thr = 0.0f;
            if (use_p) thr = (float)((1.0 - (double)q->top_p) / (double)V * total);
            if (use_min && q->min_p > thr) thr = q->min_p;
            for (int32_t i = 0; i < V; i++)
                if (s->p[i] > 0.0f && s->p[i] >= thr) s->cand[n++] = i;
            base = total;
        }
    }
    if (use_p) {
        sort_cand(s, n);
        double target = (double)q->top_p * base, cum = 0.0;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            cum += s->p[s->cand[i]];
            if (cum >= target) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (use_min) { /* the most likely token has p = 1, so the threshold is min_p itself */
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++)
            if (s->p[s->cand[i]] >= q->min_p) s->cand[m++] = s->cand[i];
        n = m;
    }
    if (n == 0) { /* cannot happen (the top token always survives); stay safe */
        s->cand[0] = top;
        s->p[top] = 1.0f;
        n = 1;
    }
    double m = 0.0;
    for (int32_t i = 0; i < n; i++) m += s->p[s->cand[i]];
    *mass = m;
    return n;
}

snug_token snug_sampler_sample(struct snug_sampler *s, const float *logits,
                               const snug_token *recent, int32_t n_recent) {
    double mass;
    int32_t n = prepare(s, logits, recent, n_recent, &mass);
    if (n == 1) return s->cand[0];
    double u = snug_rng_uniform(&s->rng) * mass, cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += s->p[s->cand[i]];
        if (u < cum) return s->cand[i];
    }
    return s->cand[n - 1]; /* rounding left u at the very top */
}

void snug_sampler_probs(struct snug_sampler *s, const float *logits, const snug_token *recent,
                        int32_t n_recent, float *probs) {
    double mass;
    int32_t n = prepare(s, logits, recent, n_recent, &mass);
    memset(probs, 0, (size_t)s->n_vocab * sizeof(float));
    for (int32_t i = 0; i < n; i++) probs[s->cand[i]] = (float)(s->p[s->cand[i]] / mass);
}
