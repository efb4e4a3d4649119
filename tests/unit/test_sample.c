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
