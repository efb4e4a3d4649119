/* test_sample.c — the sampler chain against direct computations written here: softmax of
 * penalised logits, top-k / top-p / min-p sets found by sorting, a chi-square goodness-of-fit
 * of 20k draws, greedy ties, per-seed determinism and no allocation while sampling. */
#include "core/core.h"
#include "sample/sample.h"
#include "test.h"

#include <stdint.h>

/* ---- independent reference ---------------------------------------------------------------- */

static void softmax_ref(const double *z, int n, double *p) {
    double m = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) m = z[i] > m ? z[i] : m;
    for (int i = 0; i < n; i++) s += (p[i] = exp(z[i] - m));
    for (int i = 0; i < n; i++) p[i] /= s;
}

/* Rank of token i: how many tokens come strictly before it in (prob desc, id asc) order. */
static int rank_of(const double *p, int n, int i) {
    int r = 0;
    for (int j = 0; j < n; j++)
        if (p[j] > p[i] || (p[j] == p[i] && j < i)) r++;
    return r;
}

/* Expected distribution for temperature/top-k/top-p/min-p (no penalties), computed by ranks. */
static void chain_ref(const float *logits, int n, float temp, int top_k, float top_p, float min_p,
                      double *out) {
    static double z[4096], p[4096], keep[4096];
    for (int i = 0; i < n; i++) z[i] = logits[i] / temp;
    softmax_ref(z, n, p);
    for (int i = 0; i < n; i++) keep[i] = 1;
    if (top_k > 0 && top_k < n)
        for (int i = 0; i < n; i++)
            if (rank_of(p, n, i) >= top_k) keep[i] = 0;
    double mass = 0;
    for (int i = 0; i < n; i++) mass += keep[i] * p[i];
    if (top_p < 1) { /* token i kept iff the mass ranked strictly before it is < top_p·mass */
        static double kp[4096], mass_at_rank[4096];
        static int rk[4096];
        for (int i = 0; i < n; i++) kp[i] = keep[i] ? p[i] : -1;
        for (int i = 0; i < n; i++) rk[i] = rank_of(kp, n, i); /* kept tokens rank 0..nk-1 */
        for (int i = 0; i < n; i++)
            if (keep[i]) mass_at_rank[rk[i]] = p[i];
        for (int i = 0; i < n; i++) {
            if (!keep[i]) continue;
            double before = 0;
            for (int r = 0; r < rk[i]; r++) before += mass_at_rank[r];
            if (before >= top_p * mass && rk[i] > 0) keep[i] = 0;
        }
    }
    double pmax = 0;
    for (int i = 0; i < n; i++) pmax = p[i] > pmax ? p[i] : pmax;
    if (min_p > 0)
        for (int i = 0; i < n; i++)
            if (p[i] < min_p * pmax) keep[i] = 0;
    double s = 0;
    for (int i = 0; i < n; i++) s += keep[i] * p[i];
    for (int i = 0; i < n; i++) out[i] = keep[i] * p[i] / s;
}

static struct snug_sampler_params plain(void) {
    struct snug_sampler_params q = snug_sampler_params_default();
    q.temperature = 1.0f;
    q.top_k = 0;
    q.top_p = 1.0f;
    q.min_p = 0.0f;
    return q;
}

static void random_logits(float *l, int n, uint64_t seed, float scale) {
    struct snug_rng r;
    snug_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) l[i] = (float)((snug_rng_uniform(&r) * 2 - 1) * scale);
}

/* Compare the sampler's distribution with chain_ref for one parameter set. */
static void check_chain(const char *what, int n, float temp, int k, float tp, float mp,
                        uint64_t seed, float scale) {
    float logits[4096], probs[4096];
    double ref[4096];
    random_logits(logits, n, seed, scale);
    struct snug_sampler_params q = plain();
    q.temperature = temp, q.top_k = k, q.top_p = tp, q.min_p = mp;
    struct snug_sampler *s;
    struct snug_err err = {0};
    CHECK(snug_sampler_init(&s, &q, n, &err) == SNUG_OK);
    snug_sampler_probs(s, logits, NULL, 0, probs);
    chain_ref(logits, n, temp, k, tp, mp, ref);
    int bad = 0, kept = 0, kept_ref = 0;
    for (int i = 0; i < n; i++) {
        bad += fabs(probs[i] - ref[i]) > 1e-5;
        kept += probs[i] > 0;
        kept_ref += ref[i] > 0;
    }
    CHECKF(bad == 0 && kept == kept_ref, "%s: %d mismatches, kept %d vs %d", what, bad, kept,
           kept_ref);
    snug_sampler_free(s);
}

/* The top-k path as a softmax over the whole vocabulary, in the sampler's own float steps
 * (p = expf((z - zmax) / T), the k-th largest p, ties at it by lowest id, top-p over the kept
 * ones by a stable sort, min-p, probabilities p / mass): the sampler computes p only near the
 * top (sample.c, top_k_direct), which must give these bits exactly. */
static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}
static void full_topk_ref(const float *logits, int n, float temp, int k, float tp, float mp,
                          float *out) {
    static float z[4096], p[4096], srt[4096];
    static int cand[4096];
    float zmax = -INFINITY, inv_t = 1.0f / temp;
    for (int i = 0; i < n; i++) {
        z[i] = isnan(logits[i]) ? -INFINITY : logits[i];
        zmax = z[i] > zmax ? z[i] : zmax;
    }
    for (int i = 0; i < n; i++) srt[i] = p[i] = expf((z[i] - zmax) * inv_t);
    qsort(srt, (size_t)n, sizeof(float), cmp_desc);
    float kth = srt[k - 1];
    int n_gt = 0, nc = 0;
    for (int i = 0; i < n; i++) n_gt += p[i] > kth;
    int n_eq = k - n_gt;
    double base = 0;
    for (int i = 0; i < n; i++)
        if (p[i] > kth || (p[i] == kth && n_eq-- > 0)) cand[nc++] = i, base += p[i];
    if (tp < 1.0f) {
        for (int i = 1; i < nc; i++) { /* stable insertion sort, p descending */
            int c = cand[i], j = i;
            for (; j > 0 && p[cand[j - 1]] < p[c]; j--) cand[j] = cand[j - 1];
            cand[j] = c;
        }
        double cum = 0;
        for (int i = 0; i < nc; i++)
            if ((cum += p[cand[i]]) >= (double)tp * base) {
                nc = i + 1;
                break;
            }
    }
    int m = 0;
    for (int i = 0; i < nc; i++)
        if (!(mp > 0.0f) || p[cand[i]] >= mp) cand[m++] = cand[i];
    double mass = 0;
    for (int i = 0; i < m; i++) mass += p[cand[i]];
    memset(out, 0, (size_t)n * sizeof(float));
    for (int i = 0; i < m; i++) out[cand[i]] = (float)(p[cand[i]] / mass);
}

static void check_topk_bits(const char *what, const float *logits, int n, float temp, int k,
                            float tp, float mp) {
    static float got[4096], ref[4096];
    struct snug_sampler_params q = plain();
    q.temperature = temp, q.top_k = k, q.top_p = tp, q.min_p = mp;
    struct snug_sampler *s;
    struct snug_err err = {0};
    CHECK(snug_sampler_init(&s, &q, n, &err) == SNUG_OK);
    snug_sampler_probs(s, logits, NULL, 0, got);
    full_topk_ref(logits, n, temp, k, tp, mp, ref);
    int diff = 0, kept = 0;
    for (int i = 0; i < n; i++) diff += got[i] != ref[i], kept += ref[i] > 0;
    CHECKF(diff == 0, "top-k bits, %s (T %g, k %d, top-p %g, min-p %g): %d of %d differ (%d kept)",
           what, (double)temp, k, (double)tp, (double)mp, diff, n, kept);
    snug_sampler_free(s);
}

/* Logits that make the shortcut's edges happen: ties cut by k, logits near 0 under a large
 * maximum (long runs of floats with one probability), probabilities that underflow, NaN and
 * -inf, k past the heap's bound. */
static void topk_bits_all(void) {
    enum { V = 4000 };
    static float l[V];
    static const float temps[] = {0.8f, 0.05f, 1.0f, 7.0f, 300.0f};
    static const int ks[] = {1, 2, 40, 41, 1000, 1500, V - 1};
    for (int shape = 0; shape < 5; shape++) {
        random_logits(l, V, 1000 + (uint64_t)shape, 1.0f);
        for (int i = 0; i < V; i++) {
            if (shape == 0) l[i] *= 20.0f;                           /* spread */
            if (shape == 1) l[i] = roundf(l[i] * 4.0f) / 4.0f;       /* 9 values: ties */
            if (shape == 2) l[i] = 1e-3f * l[i] + (i == 7 ? 20 : 0); /* near 0, one peak */
            if (shape == 3) l[i] = 0.1f * l[i];                      /* flat */
            if (shape == 4 && i % 97 == 0) l[i] = i % 2 ? NAN : -INFINITY;
            if (shape == 4) l[i] *= 30.0f;
        }
        for (size_t t = 0; t < sizeof temps / sizeof *temps; t++)
            for (size_t j = 0; j < sizeof ks / sizeof *ks; j++) {
                char what[32];
                snprintf(what, sizeof what, "shape %d", shape);
                check_topk_bits(what, l, V, temps[t], ks[j], 1.0f, 0.0f);
                check_topk_bits(what, l, V, temps[t], ks[j], 0.95f, 0.05f);
            }
    }
}

int main(void) {
    struct snug_err err = {0};

    /* splitmix64's published first output for seed 0 is 0xE220A8397B1DCDAF. */
    struct snug_rng r1, r2;
    snug_rng_seed(&r1, 0);
    CHECK(r1.s[0] == 0xE220A8397B1DCDAFull);
    snug_rng_seed(&r1, 7);
    snug_rng_seed(&r2, 7);
    int same = 1;
    for (int i = 0; i < 1000; i++) same &= snug_rng_next(&r1) == snug_rng_next(&r2);
    CHECK(same);
    double mean = 0;
    for (int i = 0; i < 100000; i++) {
        double u = snug_rng_uniform(&r1);
        if (u < 0 || u >= 1) same = 0;
        mean += u / 100000;
    }
    CHECK(same);
    CHECK_NEAR(mean, 0.5, 0.005);

    /* greedy: argmax, ties -> lowest id, temperature 0 and negative */
    {
        float l[8] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 2.0f, NAN, 0.0f};
        struct snug_sampler_params q = plain();
        q.temperature = 0.0f;
        struct snug_sampler *s;
        CHECK(snug_sampler_init(&s, &q, 8, &err) == SNUG_OK);
        CHECK(snug_sampler_sample(s, l, NULL, 0) == 1);
        snug_sampler_free(s);
        q.temperature = -1.0f;
        CHECK(snug_sampler_init(&s, &q, 8, &err) == SNUG_OK);
        CHECK(snug_sampler_sample(s, l, NULL, 0) == 1);
        /* repeat penalty on token 1 (and 3, 5) makes 4 (1.9) the winner */
        q.repeat_penalty = 1.1f;
        snug_sampler_free(s);
        CHECK(snug_sampler_init(&s, &q, 8, &err) == SNUG_OK);
        snug_token rec[3] = {1, 3, 5};
        CHECK(snug_sampler_sample(s, l, rec, 3) == 4);
        snug_sampler_free(s);
    }

    /* penalties: softmax of hand-penalised logits */
    {
        enum { V = 10 };
        float l[V] = {1.0f, -0.5f, 2.0f, 0.0f, -2.0f, 0.7f, 1.5f, -1.0f, 0.3f, 0.9f};
        snug_token rec[9] = {9, 9, 2, 1, 1, 1, 4, 2, 12345}; /* window 8 drops the first 9 */
        struct snug_sampler_params q = plain();
        q.repeat_penalty = 1.3f;
        q.repeat_last_n = 8;
        q.presence_penalty = 0.25f;
        q.frequency_penalty = 0.1f;
        double z[V], ref[V];
        int cnt[V] = {0};
        for (int i = 1; i < 9; i++)
            if (rec[i] >= 0 && rec[i] < V) cnt[rec[i]]++;
        for (int i = 0; i < V; i++) {
            z[i] = l[i];
            if (cnt[i]) {
                z[i] = z[i] > 0 ? z[i] / 1.3 : z[i] * 1.3;
                z[i] -= cnt[i] * 0.1 + 0.25;
            }
        }
        softmax_ref(z, V, ref);
        struct snug_sampler *s;
        float probs[V];
        CHECK(snug_sampler_init(&s, &q, V, &err) == SNUG_OK);
        snug_sampler_probs(s, l, rec, 9, probs);
        for (int i = 0; i < V; i++) CHECK_NEAR(probs[i], ref[i], 1e-6);
        snug_sampler_probs(s, l, rec, 9, probs); /* counts restored: same answer twice */
        for (int i = 0; i < V; i++) CHECK_NEAR(probs[i], ref[i], 1e-6);
        snug_sampler_free(s);
    }

    /* each filter and their combination against the rank-based reference */
    check_chain("temperature", 40, 0.7f, 0, 1.0f, 0.0f, 1, 4.0f);
    check_chain("top-k", 40, 0.7f, 7, 1.0f, 0.0f, 2, 4.0f);
    check_chain("top-p", 40, 1.0f, 0, 0.8f, 0.0f, 3, 4.0f);
    check_chain("top-p big vocab", 3000, 1.3f, 0, 0.9f, 0.0f, 4, 8.0f);
    check_chain("top-p tiny", 40, 1.0f, 0, 0.0f, 0.0f, 5, 4.0f);
    check_chain("min-p", 40, 0.9f, 0, 1.0f, 0.1f, 6, 4.0f);
    check_chain("min-p big vocab", 3000, 1.0f, 0, 1.0f, 0.02f, 7, 8.0f);
    check_chain("chain", 200, 0.8f, 50, 0.9f, 0.05f, 8, 6.0f);
    check_chain("top-p+min-p", 3000, 0.8f, 0, 0.95f, 0.01f, 9, 8.0f);

    topk_bits_all();

    /* top-k ties at the boundary keep the lowest ids */
    {
        float l[6] = {1.0f, 3.0f, 1.0f, 1.0f, 3.0f, 0.0f}, probs[6];
        struct snug_sampler_params q = plain();
        q.top_k = 3;
        struct snug_sampler *s;
        CHECK(snug_sampler_init(&s, &q, 6, &err) == SNUG_OK);
        snug_sampler_probs(s, l, NULL, 0, probs);
        CHECK(probs[0] > 0 && probs[1] > 0 && probs[4] > 0 && probs[2] == 0 && probs[3] == 0);
        snug_sampler_free(s);
    }

    /* chi-square: 20k draws after temperature 0.5 and top-k 4 over a known 6-token vocabulary.
     * Expected p ∝ exp(2·l) over the 4 best; 3 degrees of freedom, bound 16.27 (p = 0.001). */
    {
        float l[6] = {0.0f, 0.5f, -1.0f, 0.2f, 0.9f, -0.3f};
        double e[6] = {0}, sum = 0;
        int top[4] = {4, 1, 3, 0};
        for (int i = 0; i < 4; i++) sum += (e[top[i]] = exp(2.0 * l[top[i]]));
        for (int i = 0; i < 6; i++) e[i] /= sum;
        struct snug_sampler_params q = plain();
        q.temperature = 0.5f;
        q.top_k = 4;
        q.seed = 12345;
        struct snug_sampler *s;
        CHECK(snug_sampler_init(&s, &q, 6, &err) == SNUG_OK);
        int hist[6] = {0};
        const int N = 20000;
        uint64_t a0 = snug_alloc_count();
        for (int i = 0; i < N; i++) hist[snug_sampler_sample(s, l, NULL, 0)]++;
        CHECK(snug_alloc_count() == a0); /* sampling allocates nothing */
        double chi = 0;
        for (int i = 0; i < 6; i++)
            if (e[i] > 0) chi += (hist[i] - N * e[i]) * (hist[i] - N * e[i]) / (N * e[i]);
        CHECKF(chi < 16.27, "chi-square %.2f", chi);
        CHECK(hist[2] == 0 && hist[5] == 0);
        snug_sampler_free(s);
    }

    /* determinism per seed on a large vocabulary with the default chain and penalties */
    {
        enum { V = 4000, N = 200 };
        static float l[V];
        random_logits(l, V, 99, 6.0f);
        struct snug_sampler_params q = snug_sampler_params_default();
        q.repeat_penalty = 1.1f;
        q.top_k = 0;
        snug_token a[N], b[N], c[N];
        for (int run = 0; run < 3; run++) {
            q.seed = run == 2 ? 43 : 42;
            struct snug_sampler *s;
            CHECK(snug_sampler_init(&s, &q, V, &err) == SNUG_OK);
            snug_token *o = run == 0 ? a : run == 1 ? b : c;
            for (int i = 0; i < N; i++) o[i] = snug_sampler_sample(s, l, o, i);
            snug_sampler_free(s);
        }
        CHECK(memcmp(a, b, sizeof a) == 0);
        CHECK(memcmp(a, c, sizeof a) != 0);
    }

    /* invalid parameters are reported, not asserted */
    {
        struct snug_sampler_params q = plain();
        struct snug_sampler *s = (void *)1;
        q.repeat_penalty = 0.0f;
        CHECK(snug_sampler_init(&s, &q, 10, &err) == SNUG_ERR_INVALID && s == NULL);
        CHECK(strstr(err.msg, "repeat penalty") != NULL);
        q = plain();
        CHECK(snug_sampler_init(&s, &q, 0, &err) == SNUG_ERR_INVALID);
        snug_sampler_free(NULL);
    }
    return TEST_DONE();
}
