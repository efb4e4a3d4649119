/* test_mtp.c — speculative decoding with the MTP block on the trained fixture:
 *  1. step-1 MTP logits (API and `snug logits --mtp`) vs mtp_logits.f32 (KL bounds);
 *  2. greedy output with speculation (k = 3, snapshot and recompute rollback) equals plain
 *     greedy decoding, 256 tokens, several prompts from ppl_ids.json;
 *  3. mean tokens per verification with 3 greedy drafts over held-out prompts (reference 3.05);
 *     the MTP block's cache in the trunk's format (f16, q8_0, tq4, q8_0/tq4) keeps
 *     greedy exactness and the acceptance length within noise of f16's;
 *  4. rollback exactness: after a rejected draft, the next logits equal those of a context that
 *     decoded the same tokens one at a time;
 *  5. temperature 1: the first token of a speculative step follows the target distribution
 *     (chi-square goodness of fit at significance 0.001; the plain sampler passes the same).
 * Read next: src/speculative/speculative.h, docs/spec-decode.md. */
#include "test_spec_common.h"

#include "kv/kvfmt.h"
#include "model/model.h"
#include "sample/sample.h"
#include "speculative/speculative.h"

#include <math.h>

#define V_MAX 4096

static struct snug_model *M;
static int32_t V;
static int KV = SNUG_KV_F32; /* mk_ctx's cache format (test_kv_formats changes it) */

static struct snug_ctx *mk_ctx(int32_t n_draft, int32_t n_ctx) {
    struct snug_err err = {0};
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_chunk = 64;
    int kf, vf;
    if (KV >= SNUG_KVFMT_N && snug_kvfmt_split(KV, &kf, &vf)) { /* a K/V pair */
        cp.kv_type_k = kf;
        cp.kv_type_v = vf;
    } else {
        cp.kv_type = KV;
    }
    cp.n_draft = n_draft;
    struct snug_ctx *c = NULL;
    int rc = snug_ctx_init(&c, M, &cp, &err);
    CHECKF(rc == SNUG_OK, "ctx init: %s", err.msg);
    return c;
}

static struct snug_sampler *mk_sampler(float temp, uint64_t seed) {
    struct snug_err err = {0};
    struct snug_sampler_params sp = snug_sampler_params_default();
    sp.temperature = temp;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.seed = seed;
    struct snug_sampler *s = NULL;
    int rc = snug_sampler_init(&s, &sp, V, &err);
    CHECKF(rc == SNUG_OK, "sampler: %s", err.msg);
    return s;
}

/* Plain greedy decoding: n tokens after the prompt into out. */
static void greedy_plain(const int32_t *prompt, int32_t np, int32_t n, int32_t *out) {
    struct snug_err err = {0};
    struct snug_ctx *c = mk_ctx(0, np + n + 8);
    float *lg = malloc((size_t)V * 4);
    int rc = snug_ctx_eval(c, prompt, np, lg, SNUG_EVAL_LOGITS_LAST, &err);
    for (int32_t i = 0; i < n && rc == SNUG_OK; i++) {
        out[i] = (int32_t)fx_argmax(lg, V);
        if (i + 1 < n) rc = snug_ctx_eval(c, &out[i], 1, lg, SNUG_EVAL_LOGITS_LAST, &err);
    }
    CHECKF(rc == SNUG_OK, "plain decode: %s", err.msg);
    free(lg);
    snug_ctx_free(c);
}

/* Speculative greedy decoding with k drafts: n tokens into out; returns the context's stats. */
static struct snug_spec_stats greedy_spec(const int32_t *prompt, int32_t np, int32_t n, int32_t k,
                                          bool recompute, int32_t *out) {
    struct snug_err err = {0};
    struct snug_ctx *c = mk_ctx(k, np + n + 8);
    struct snug_sampler *s = mk_sampler(0.0f, 1);
    snug_spec_set_rollback(c, recompute);
    int32_t cap = np + n + k + 2;
    int32_t *hist = malloc((size_t)cap * 4);
    memcpy(hist, prompt, (size_t)np * 4);
    float *lg = malloc((size_t)V * 4);
    int rc = snug_ctx_eval(c, prompt, np, lg, SNUG_EVAL_LOGITS_LAST, &err);
    uint64_t allocs = 0;
    if (rc == SNUG_OK) rc = fx_spec_greedy(c, s, hist, np, cap, n, lg, V, &allocs, &err);
    CHECKF(rc == SNUG_OK, "spec decode: %s", err.msg);
    CHECKF(allocs == 0, "speculative steps allocated %llu times", (unsigned long long)allocs);
    memcpy(out, hist + np, (size_t)n * 4);
    struct snug_spec_stats st;
    snug_ctx_spec_stats(c, &st);
    free(lg);
    free(hist);
    snug_sampler_free(s);
    snug_ctx_free(c);
    return st;
}

static void test_mtp_logits(const char *dir) {
    int32_t n = 0;
    int32_t *ids = fx_read_ids(fx_path(dir, "trained", "ids.json"), &n);
    size_t nref = 0;
    float *ref = fx_read_f32(fx_path(dir, "trained", "mtp_logits.f32"), &nref);
    if (!ids || !ref) return;
    CHECK(nref == (size_t)(n - 1) * (size_t)V);
    float *got = malloc((size_t)n * (size_t)V * 4);
    const int32_t chunks[] = {64, 300, 7};
    for (int ci = 0; ci < (FX_SANITIZED ? 1 : 3); ci++) {
        struct snug_err err = {0};
        struct snug_ctx_params cp = snug_ctx_default_params();
        cp.n_ctx = n;
        cp.n_chunk = chunks[ci];
        cp.kv_type = ci == 1 ? SNUG_KV_F16 : SNUG_KV_F32;
        cp.n_draft = 1;
        struct snug_ctx *c = NULL;
        int rc = snug_ctx_init(&c, M, &cp, &err);
        if (rc == SNUG_OK) rc = snug_ctx_eval_mtp(c, ids, n, NULL, got, &err);
        CHECKF(rc == SNUG_OK, "eval_mtp: %s", err.msg);
        char what[64];
        snprintf(what, sizeof what, "mtp logits (chunk %d, kv %s)", chunks[ci],
                 ci == 1 ? "f16" : "f32");
        fx_check_kl(what, fx_compare(ref, got, n - 1, V), false);
        snug_ctx_free(c);
    }
    /* the CLI */
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s logits --mtp -m %s --ids %s -o mtp_test_out.f32 --kv f32",
             SNUG_BIN, fx_path(dir, "trained", "trained-f16.gguf"),
             fx_path(dir, "trained", "ids.json"));
    CHECKF(system(cmd) == 0, "%s", cmd);
    size_t ncli = 0;
    float *cli = fx_read_f32("mtp_test_out.f32", &ncli);
    if (cli) {
        CHECK(ncli == nref);
        if (ncli == nref) fx_check_kl("snug logits --mtp", fx_compare(ref, cli, n - 1, V), false);
    }
    remove("mtp_test_out.f32");
    free(cli);
    free(got);
    free(ref);
    free(ids);
}

/* Greedy equality and acceptance length over held-out prompts. */
static void test_greedy(const int32_t *ppl, int32_t nppl) {
    const int32_t NP = 32, NGEN = FX_SANITIZED ? 64 : 256;
    const int32_t offs[] = {0, 1024, 2048, 3072, 512, 1536, 2560, 3584};
    const int n_prompts = FX_SANITIZED ? 2 : 5;
    int32_t *a = malloc((size_t)NGEN * 4), *b = malloc((size_t)NGEN * 4);
    struct snug_spec_stats tot = {0};
    for (int pi = 0; pi < n_prompts; pi++) {
        if (offs[pi] + NP > nppl) continue;
        const int32_t *prompt = ppl + offs[pi];
        greedy_plain(prompt, NP, NGEN, a);
        struct snug_spec_stats st = greedy_spec(prompt, NP, NGEN, 3, false, b);
        int32_t same = 0;
        while (same < NGEN && a[same] == b[same]) same++;
        CHECKF(same == NGEN, "prompt @%d: speculative greedy differs from plain at token %d",
               offs[pi], same);
        printf("prompt @%-5d k=3: %lld verifications, %.3f tokens per verification, "
               "identical %d/%d\n",
               offs[pi], (long long)st.n_steps, (double)st.n_emitted / (double)st.n_steps, same,
               NGEN);
        tot.n_steps += st.n_steps;
        tot.n_emitted += st.n_emitted;
        for (int i = 0; i < 3; i++) {
            tot.proposed_at[i] += st.proposed_at[i];
            tot.accepted_at[i] += st.accepted_at[i];
        }
        if (pi < 1) { /* the recompute rollback gives the same tokens */
            struct snug_spec_stats sr = greedy_spec(prompt, NP, NGEN, 3, true, b);
            same = 0;
            while (same < NGEN && a[same] == b[same]) same++;
            CHECKF(same == NGEN, "prompt @%d, recompute rollback: differs at token %d", offs[pi],
                   same);
            CHECK(sr.n_steps > 0);
        }
        if (pi == 0) { /* other draft lengths */
            for (int32_t k = 1; k <= 4; k += 3) {
                greedy_spec(prompt, NP, NGEN, k, false, b);
                same = 0;
                while (same < NGEN && a[same] == b[same]) same++;
                CHECKF(same == NGEN, "k=%d: differs at token %d", k, same);
            }
        }
    }
    double mean = (double)tot.n_emitted / (double)(tot.n_steps ? tot.n_steps : 1);
    printf("k=3 greedy over %d prompts: mean %.3f tokens per verification (reference 3.05); "
           "acceptance by draft position %.3f %.3f %.3f\n",
           n_prompts, mean, (double)tot.accepted_at[0] / (double)tot.proposed_at[0],
           (double)tot.accepted_at[1] / (double)tot.proposed_at[1],
           (double)tot.accepted_at[2] / (double)tot.proposed_at[2]);
    CHECKF(mean >= 2.5, "mean tokens per verification %.3f: drafting semantics wrong?", mean);
    free(a);
    free(b);
}

/* The MTP block's cache is stored in the trunk's format. For f16, q8_0 and tq4 (and
 * the q8_0/tq4 K/V pair): the MTP cache's view has the trunk's formats, speculative greedy
 * equals plain greedy of the same format, and the acceptance length stays within noise of
 * f16's (the drafts read a quantized cache like every trunk attention layer). */
static void test_kv_formats(const int32_t *ppl, int32_t nppl) {
    const int32_t NP = 32, NGEN = FX_SANITIZED ? 48 : 128;
    const int32_t offs[] = {0, 1024, 2048, 3072};
    const int n_prompts = FX_SANITIZED ? 1 : 4;
    const int fmts[] = {SNUG_KV_F16, SNUG_KV_Q8_0, SNUG_KV_TQ4,
                        snug_kvfmt_code(SNUG_KV_Q8_0, SNUG_KV_TQ4)};
    int32_t *a = malloc((size_t)NGEN * 4), *b = malloc((size_t)NGEN * 4);
    double mean_f16 = 0;
    for (int fi = 0; fi < 4; fi++) {
        KV = fmts[fi];
        char name[24];
        snug_kvfmt_code_name(KV, name, sizeof name);
        struct snug_ctx *c = mk_ctx(3, 64);
        struct snug_kv *mk = snug_ctx_spec(c)->kvp;
        struct snug_ctx_prefix_state st;
        CHECK(snug_ctx_prefix_state(c, &st));
        CHECKF(mk->views[0].type == st.kv->views[0].type &&
                   mk->views[0].k_fmt == st.kv->views[0].k_fmt &&
                   mk->views[0].v_fmt == st.kv->views[0].v_fmt &&
                   snug_kv_bytes_per_token(&mk->shape) * (size_t)st.kv->shape.n_attn ==
                       snug_kv_bytes_per_token(&st.kv->shape),
               "%s: the MTP cache is not in the trunk's format", name);
        snug_ctx_free(c);
        int64_t steps = 0, emitted = 0;
        for (int pi = 0; pi < n_prompts; pi++) {
            if (offs[pi] + NP > nppl) continue;
            greedy_plain(ppl + offs[pi], NP, NGEN, a);
            struct snug_spec_stats s = greedy_spec(ppl + offs[pi], NP, NGEN, 3, false, b);
            int32_t same = 0;
            while (same < NGEN && a[same] == b[same]) same++;
            CHECKF(same == NGEN, "%s, prompt @%d: speculative greedy differs at token %d", name,
                   offs[pi], same);
            steps += s.n_steps;
            emitted += s.n_emitted;
        }
        double mean = (double)emitted / (double)(steps ? steps : 1);
        if (fi == 0) mean_f16 = mean;
        printf("kv %-9s (MTP cache too): %.3f tokens per verification over %d prompts (f16 "
               "%.3f)\n",
               name, mean, n_prompts, mean_f16);
        CHECKF(fabs(mean - mean_f16) <= 0.2, "%s: acceptance %.3f vs f16 %.3f", name, mean,
               mean_f16);
    }
    KV = SNUG_KV_F32;
    free(a);
    free(b);
}

/* After a partial acceptance the context must be the context that decoded the accepted
 * tokens one at a time: compare the next logits. */
static void test_rollback(const int32_t *ppl) {
    struct snug_err err = {0};
    const int32_t NP = 32, K = 3;
    struct snug_ctx *c = mk_ctx(K, 256), *r = mk_ctx(0, 256);
    struct snug_sampler *s = mk_sampler(0.0f, 1);
    float *lg = malloc((size_t)V * 4), *lr = malloc((size_t)V * 4);
    int32_t hist[256];
    memcpy(hist, ppl, NP * 4);
    int rc = snug_ctx_eval(c, ppl, NP, lg, 0, &err);
    rc |= snug_ctx_eval(r, ppl, NP, lr, 0, &err);
    int32_t nh = NP;
    hist[nh++] = (int32_t)fx_argmax(lg, V);
    int checked = 0;
    double worst = 0;
    for (int step = 0; step < 40 && rc == SNUG_OK && checked < 5; step++) {
        int32_t nn = 0, before = nh;
        rc = snug_spec_step(c, s, hist, nh, 200, &nn, &err);
        if (rc) break;
        /* the reference decodes the tokens the speculative context now holds */
        for (int32_t i = before - 1; i < before + nn - 1 && rc == SNUG_OK; i++)
            rc = snug_ctx_eval(r, &hist[i], 1, lr, 0, &err);
        nh += nn;
        CHECK(snug_ctx_n_past(c) == snug_ctx_n_past(r));
        if (nn == K + 1) continue; /* all accepted: nothing was rolled back */
        /* compare the logits after feeding the pending token to both (c is then advanced:
         * re-sync by truncating needs a snapshot, so compare via a plain eval on each) */
        float *a = malloc((size_t)V * 4);
        rc |= snug_ctx_eval(c, &hist[nh - 1], 1, a, 0, &err);
        rc |= snug_ctx_eval(r, &hist[nh - 1], 1, lr, 0, &err);
        double d = 0;
        for (int32_t i = 0; i < V; i++) d = fmax(d, fabs((double)a[i] - lr[i]));
        worst = fmax(worst, d);
        free(a);
        /* continue from here: the pending token is now evaluated, sample the next */
        hist[nh++] = (int32_t)fx_argmax(lr, V);
        checked++;
    }
    CHECKF(rc == SNUG_OK, "rollback test: %s", err.msg);
    CHECKF(checked >= 3, "only %d partial acceptances seen", checked);
    printf("rollback: %d partial acceptances, max |logit diff| vs token-by-token decode %.3g\n",
           checked, worst);
    CHECKF(worst <= 1e-4, "rolled-back state differs: max |logit diff| %.3g", worst);
    free(lg);
    free(lr);
    snug_sampler_free(s);
    snug_ctx_free(c);
    snug_ctx_free(r);
}

/* Upper tail of the chi-square distribution via the Wilson-Hilferty normal approximation. */
static double chi2_sf(double x, int df) {
    double z = (pow(x / df, 1.0 / 3.0) - (1.0 - 2.0 / (9.0 * df))) / sqrt(2.0 / (9.0 * df));
    return 0.5 * erfc(z / sqrt(2.0));
}

/* Chi-square statistic of counts vs the expected distribution p over N draws; tokens with an
 * expected count below 5 are pooled into one bin. Returns the p-value. */
static double chi2_test(const int32_t *counts, const float *p, int32_t n, int32_t N, int *df) {
    double stat = 0, pool_e = 0, pool_o = 0;
    int bins = 0;
    for (int32_t i = 0; i < n; i++) {
        double e = (double)p[i] * N;
        if (e < 5) {
            pool_e += e, pool_o += counts[i];
            continue;
        }
        stat += (counts[i] - e) * (counts[i] - e) / e, bins++;
    }
    if (pool_e > 0) stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e, bins++;
    *df = bins - 1;
    return chi2_sf(stat, *df);
}

/* Temperature 1: the first token emitted by a speculative step vs the target distribution. */
static void test_temperature(const int32_t *ppl, int32_t nppl) {
    struct snug_err err = {0};
    const int32_t NP = 24, K = 3, N = FX_SANITIZED ? 300 : 1000;
    struct snug_ctx *c = mk_ctx(K, 64);
    struct snug_sampler *s = mk_sampler(1.0f, 7), *g = mk_sampler(0.0f, 1);
    float *lg = malloc((size_t)V * 4), *p = malloc((size_t)V * 4);
    /* find a prompt where the first draft is uncertain: 0.15 < p(d1) < 0.85 */
    int32_t off = -1, next = 0;
    snug_token d[K];
    for (int32_t o = 0; o + NP + 1 < nppl && o < 4000; o += 37) {
        snug_ctx_reset(c);
        snug_ctx_eval(c, ppl + o, NP, lg, 0, &err);
        next = (int32_t)fx_argmax(lg, V);
        int32_t nd = 0;
        snug_ctx_draft(c, next, K, d, &nd, &err);
        snug_ctx_eval(c, &next, 1, lg, 0, &err);
        snug_sampler_probs(s, lg, NULL, 0, p);
        if (p[d[0]] > 0.15f && p[d[0]] < 0.85f) {
            off = o;
            break;
        }
    }
    CHECKF(off >= 0, "no prompt with an uncertain first draft");
    if (off < 0) goto out;
    int32_t *cnt_spec = calloc((size_t)V, 4), *cnt_plain = calloc((size_t)V, 4);
    int32_t hist[64];
    int rc = SNUG_OK;
    int accepted = 0;
    for (int32_t trial = 0; trial < N && rc == SNUG_OK; trial++) {
        snug_ctx_reset(c);
        rc = snug_ctx_eval(c, ppl + off, NP, NULL, 0, &err);
        memcpy(hist, ppl + off, NP * 4);
        hist[NP] = next;
        int32_t nn = 0;
        if (rc == SNUG_OK) rc = snug_spec_step(c, s, hist, NP + 1, 64, &nn, &err);
        cnt_spec[hist[NP + 1]]++;
        accepted += hist[NP + 1] == d[0];
        cnt_plain[snug_sampler_sample(s, lg, NULL, 0)]++;
    }
    CHECKF(rc == SNUG_OK, "temperature test: %s", err.msg);
    int df1 = 0, df2 = 0;
    double pv_spec = chi2_test(cnt_spec, p, V, N, &df1);
    double pv_plain = chi2_test(cnt_plain, p, V, N, &df2);
    printf("temperature 1, %d trials, p(draft)=%.3f, draft emitted %d times: chi-square p-value "
           "speculative %.4f (df %d), plain %.4f (df %d); reject at 0.001\n",
           N, p[d[0]], accepted, pv_spec, df1, pv_plain, df2);
    CHECKF(pv_spec > 0.001, "speculative first-token distribution differs (p = %.3g)", pv_spec);
    CHECKF(pv_plain > 0.001, "plain sampling differs (p = %.3g): the test is broken", pv_plain);
    free(cnt_spec);
    free(cnt_plain);
out:
    free(lg);
    free(p);
    snug_sampler_free(s);
    snug_sampler_free(g);
    snug_ctx_free(c);
}

/* Benchmark, not a test (docs/spec-decode.md): with SNUG_BENCH_MODEL=M.gguf, the cost of
 * verifying k+1 tokens (one snapshot eval; or the chunked eval of the recompute strategy)
 * relative to one decode step, k = 1..4, plus each strategy's rollback after rejecting the
 * first draft. Median of `reps` runs each, after a 256-token prompt. */
static int bench(const char *path) {
    struct snug_err err = {0};
    const char *th = getenv("SNUG_BENCH_THREADS");
    struct snug_model_params mp = {.path = path, .n_threads = th ? atoi(th) : 0};
    if (snug_model_load(&M, &mp, &err)) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return 1;
    }
    V = snug_model_n_vocab(M);
    enum { NP = 256, REPS = 9 };
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = 2048;
    cp.n_draft = 4;
    struct snug_ctx *c = NULL;
    if (snug_ctx_init(&c, M, &cp, &err)) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return 1;
    }
    int32_t ids[NP + 8];
    for (int i = 0; i < NP + 8; i++) ids[i] = (int32_t)((i * 7919 + 13) % V);
    float *lg = malloc((size_t)V * 8 * 4);
    snug_ctx_eval(c, ids, NP, NULL, 0, &err);
    double t[REPS], dec, snap[5], rb_snap[5], chunk[5], rb_rec[5];
    for (int r = 0; r < REPS; r++) {
        double t0 = snug_time_s();
        snug_ctx_eval(c, ids, 1, lg, 0, &err);
        t[r] = snug_time_s() - t0;
    }
    qsort(t, REPS, sizeof(double), fx_cmp_double);
    dec = t[REPS / 2];
    for (int mode = 0; mode < 2; mode++) {
        snug_spec_set_rollback(c, mode == 1);
        for (int k = 1; k <= 4; k++) {
            double tv[REPS], tr[REPS];
            for (int r = 0; r < REPS; r++) {
                int32_t n0 = snug_ctx_n_past(c);
                double t0 = snug_time_s();
                snug_ctx_eval(c, ids, k + 1, lg, SNUG_EVAL_LOGITS_ALL | SNUG_EVAL_SNAPSHOT, &err);
                double t1 = snug_time_s();
                snug_ctx_truncate(c, n0 + 1, &err);
                tr[r] = snug_time_s() - t1;
                tv[r] = t1 - t0;
            }
            qsort(tv, REPS, sizeof(double), fx_cmp_double);
            qsort(tr, REPS, sizeof(double), fx_cmp_double);
            (mode ? chunk : snap)[k] = tv[REPS / 2];
            (mode ? rb_rec : rb_snap)[k] = tr[REPS / 2];
        }
    }
    printf("decode step: %.2f ms\n", dec * 1e3);
    printf("| k | verify k+1 (snapshots) | rollback | verify k+1 (chunked, recompute) | "
           "rollback (recompute 1 token) |\n|---|---|---|---|---|\n");
    for (int k = 1; k <= 4; k++)
        printf("| %d | %.2f ms (%.2fx) | %.3f ms | %.2f ms (%.2fx) | %.2f ms (%.2fx) |\n", k,
               snap[k] * 1e3, snap[k] / dec, rb_snap[k] * 1e3, chunk[k] * 1e3, chunk[k] / dec,
               rb_rec[k] * 1e3, rb_rec[k] / dec);
    free(lg);
    snug_ctx_free(c);
    snug_model_free(M);
    return 0;
}

int main(void) {
    const char *bm = getenv("SNUG_BENCH_MODEL");
    if (bm && *bm) return bench(bm);
    const char *dir = test_fixtures_dir();
    if (!dir) return TEST_DONE();
    struct snug_err err = {0};
    if (!(M = fx_load_trained(dir))) return 1;
    V = snug_model_n_vocab(M);
    CHECK(snug_model_n_nextn(M) == 1);
    int32_t nppl = 0;
    int32_t *ppl = fx_read_ids(fx_path(dir, "trained", "ppl_ids.json"), &nppl);
    test_mtp_logits(dir);
    if (ppl) {
        test_greedy(ppl, nppl);
        test_kv_formats(ppl, nppl);
        test_rollback(ppl);
        test_temperature(ppl, nppl);
    }
    /* MoE: a random-weight qwen35moe with a generated MTP block (the MoE fixture has none):
     * speculative greedy equals plain greedy; drafts are rarely accepted, so this exercises
     * the MoE MTP forward and the rollback on almost every step */
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s gen --preset demo-moe --type f16 -o mtp_moe_test.gguf --set "
             "nextn_predict_layers=1 > /dev/null 2>&1",
             SNUG_BIN);
    CHECKF(system(cmd) == 0, "%s", cmd);
    struct snug_model *dense = M;
    struct snug_model_params mp = {.path = "mtp_moe_test.gguf"};
    if (snug_model_load(&M, &mp, &err) == SNUG_OK) {
        int32_t V0 = V;
        V = snug_model_n_vocab(M);
        int32_t prompt[16], a[64], b[64];
        for (int i = 0; i < 16; i++) prompt[i] = (i * 37 + 5) % V;
        greedy_plain(prompt, 16, 64, a);
        struct snug_spec_stats st = greedy_spec(prompt, 16, 64, 3, false, b);
        int32_t same = 0;
        while (same < 64 && a[same] == b[same]) same++;
        printf("moe with a generated MTP block: identical %d/64, %.3f tokens per verification\n",
               same, (double)st.n_emitted / (double)(st.n_steps ? st.n_steps : 1));
        CHECKF(same == 64, "moe: speculative greedy differs at token %d", same);
        snug_model_free(M);
        V = V0;
    } else {
        CHECKF(0, "moe MTP model: %s", err.msg);
    }
    M = dense;
    remove("mtp_moe_test.gguf");

    /* a model without an MTP block refuses n_draft > 0 with a clear message */
    struct snug_model *moe = NULL;
    mp.path = fx_path(dir, "moe", "moe-f16.gguf");
    if (snug_model_load(&moe, &mp, &err) == SNUG_OK) {
        struct snug_ctx_params cp = snug_ctx_default_params();
        cp.n_ctx = 64;
        cp.n_draft = 3;
        struct snug_ctx *c = NULL;
        int rc = snug_ctx_init(&c, moe, &cp, &err);
        CHECKF(rc == SNUG_ERR_UNSUPPORTED && strstr(err.msg, "nextn_predict_layers"), "%d %s", rc,
               err.msg);
        snug_ctx_free(c);
        snug_model_free(moe);
    }
    free(ppl);
    snug_model_free(M);
    return TEST_DONE();
}
