/* test_imatrix_collect.c — the importance-matrix collector (src/imatrix/imatrix_collect.c) on the
 * MoE fixture: per-expert counts equal the routing computed a second way (this test recomputes
 * each layer's router logits from the router's own input rows and takes the top k), every
 * collected sum matches a second accumulation, observing changes no logit and allocates
 * nothing on the token path, llama-imatrix's 16-row rule for 2-D products, and the written
 * GGUF read back through our own reader (snug_imatrix_load) gives sum2 / counts. */
#define _DEFAULT_SOURCE /* mkstemp */
#include "e2e/test_fixtures_common.h"

#include "imatrix/imatrix.h"
#include "model/model.h"

#include <unistd.h>

#define MAXL 8
#define MAXE 64

/* A second observer: forwards to the collector's and recomputes the routing of every
 * ffn_gate_inp product (router logits in double from the F32 router weights, the k largest,
 * ties to the lower index). */
struct spy {
    const struct snug_mm_observer *inner;
    const struct snug_model *m;
    int64_t routed[MAXL][MAXE]; /* (token, choice) pairs per layer and expert */
    int64_t near_ties[MAXL];    /* tokens whose k-th and (k+1)-th logits are within 1e-4 */
    int64_t tokens[MAXL];
    /* a second accumulation of Σ x² of blk.0.attn_qkv.weight (the first dense weight) */
    double qkv_sum2[1024];
    int64_t qkv_rows;
};

static int layer_of(const struct snug_model *m, snug_tensor w) {
    for (uint32_t l = 0; l < m->hp.n_layer; l++)
        if (m->layers[l].gate_inp == w) return (int)l;
    return -1;
}

static void spy_dense(void *user, snug_tensor w, const float *x, int64_t T) {
    struct spy *s = user;
    s->inner->dense(s->inner->user, w, x, T);
    if (w == s->m->layers[0].ssm_qkv && T >= 16) {
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < (int64_t)w->ne[0]; j++)
                s->qkv_sum2[j] += (double)x[t * w->ne[0] + j] * x[t * w->ne[0] + j];
        s->qkv_rows += T;
    }
    int l = layer_of(s->m, w);
    if (l < 0) return;
    int64_t H = (int64_t)w->ne[0], E = (int64_t)w->ne[1], k = s->m->hp.n_expert_used;
    const float *W = w->data; /* F32 [E][H] */
    for (int64_t t = 0; t < T; t++) {
        double lg[MAXE];
        bool used[MAXE] = {0};
        for (int64_t e = 0; e < E; e++) {
            double acc = 0;
            for (int64_t j = 0; j < H; j++) acc += (double)W[e * H + j] * x[t * H + j];
            lg[e] = acc;
        }
        double kth = 0;
        for (int64_t c = 0; c < k; c++) {
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++)
                if (!used[e] && (best < 0 || lg[e] > lg[best])) best = e;
            used[best] = true;
            s->routed[l][best]++;
            kth = lg[best];
        }
        double next = -1e300;
        for (int64_t e = 0; e < E; e++)
            if (!used[e] && lg[e] > next) next = lg[e];
        if (kth - next < 1e-4) s->near_ties[l]++;
        s->tokens[l]++;
    }
}

static void spy_experts(void *user, snug_tensor w, const float *x, const int32_t *off, int64_t E) {
    struct spy *s = user;
    s->inner->experts(s->inner->user, w, x, off, E);
}

static void check_moe(const char *fx) {
    struct snug_err err = {0};
    struct snug_model *m = NULL;
    struct snug_model_params mp = {.path = fx_path(fx, "moe", "moe-f16.gguf"), .n_threads = 2};
    if (snug_model_load(&m, &mp, &err) != SNUG_OK) {
        CHECKF(false, "load: %s", err.msg);
        return;
    }
    int32_t n = 0;
    int32_t *ids = fx_read_ids(fx_path(fx, "moe", "long_ids.json"), &n);
    const int32_t chunk = 256, n_chunks = 4;
    CHECK(ids && n >= chunk * n_chunks);
    int64_t E = m->hp.n_expert, k = m->hp.n_expert_used, V = m->hp.n_vocab;
    CHECK(m->hp.n_layer <= MAXL && E <= MAXE && m->layers[0].ssm_qkv->ne[0] <= 1024);
    struct snug_ctx_params cp = {.n_ctx = chunk, .n_chunk = chunk, .n_threads = 2};
    struct snug_ctx *ctx = NULL;
    struct snug_imatrix_collector *col = NULL;
    CHECKF(snug_ctx_init(&ctx, m, &cp, &err) == SNUG_OK, "ctx: %s", err.msg);
    CHECKF(snug_imatrix_collector_new(&col, m, &err) == SNUG_OK, "collector: %s", err.msg);
    static struct spy spy;
    spy.inner = snug_imatrix_collector_observer(col);
    spy.m = m;
    struct snug_mm_observer obs = {.user = &spy, .dense = spy_dense, .experts = spy_experts};
    float *plain = malloc((size_t)chunk * V * sizeof(float));
    float *seen = malloc((size_t)chunk * V * sizeof(float));

    /* chunk 0 without an observer, for the logits comparison */
    CHECK(snug_ctx_eval(ctx, ids, chunk, plain, SNUG_EVAL_LOGITS_ALL, &err) == SNUG_OK);
    CHECK(snug_ctx_set_mm_observer(ctx, &obs, &err) == SNUG_OK);
    for (int32_t c = 0; c < n_chunks; c++) {
        snug_ctx_reset(ctx);
        uint64_t a0 = snug_alloc_count();
        int rc = snug_ctx_eval(ctx, ids + c * chunk, chunk, seen, SNUG_EVAL_LOGITS_ALL, &err);
        CHECKF(rc == SNUG_OK, "eval: %s", err.msg);
        CHECKF(snug_alloc_count() == a0, "chunk %d: observed eval allocated", c);
        if (c == 0)
            CHECKF(!memcmp(plain, seen, (size_t)chunk * V * sizeof(float)),
                   "observing changed the logits");
    }
    int64_t tokens = (int64_t)chunk * n_chunks;

    /* per-expert counts: the collector's vs the recomputed routing */
    static const char *const exps[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    char name[128];
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        CHECK(spy.tokens[l] == tokens);
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof name, "blk.%u.%s.weight", l, exps[i]);
            int64_t nm = 0, total = 0, diff = 0;
            const int64_t *cnt = snug_imatrix_collector_counts(col, name, &nm);
            CHECKF(cnt && nm == E, "%s: %lld matrices", name, (long long)nm);
            if (!cnt) continue;
            for (int64_t e = 0; e < E; e++) {
                total += cnt[e];
                diff += llabs(cnt[e] - spy.routed[l][e]);
            }
            CHECKF(total == tokens * k, "%s: %lld routed pairs, want %lld", name, (long long)total,
                   (long long)(tokens * k));
            CHECKF(diff <= 2 * spy.near_ties[l],
                   "%s: counts differ from the recomputed routing by %lld (%lld near ties)", name,
                   (long long)diff, (long long)spy.near_ties[l]);
        }
        snprintf(name, sizeof name, "blk.%u.ffn_gate_inp.weight", l);
        int64_t nm = 0;
        const int64_t *cnt = snug_imatrix_collector_counts(col, name, &nm);
        CHECK(cnt && nm == 1 && cnt[0] == tokens);
        snprintf(name, sizeof name, "blk.%u.ffn_down_shexp.weight", l);
        cnt = snug_imatrix_collector_counts(col, name, &nm);
        CHECK(cnt && nm == 1 && cnt[0] == tokens);
    }
    fprintf(stderr, "moe: %lld tokens, near ties per layer %lld %lld %lld %lld\n",
            (long long)tokens, (long long)spy.near_ties[0], (long long)spy.near_ties[1],
            (long long)spy.near_ties[2], (long long)spy.near_ties[3]);

    /* a dense sum against the second accumulation (double): float32 summation of 1024 rows */
    int64_t nv = 0;
    const float *s2 = snug_imatrix_collector_sum2(col, "blk.0.attn_qkv.weight", &nv);
    CHECK(s2 && nv == (int64_t)m->layers[0].ssm_qkv->ne[0] && spy.qkv_rows == tokens);
    double worst = 0;
    for (int64_t j = 0; s2 && j < nv; j++) {
        double r = fabs(s2[j] - spy.qkv_sum2[j]) / spy.qkv_sum2[j];
        worst = r > worst ? r : worst;
    }
    CHECKF(worst < 1e-4, "attn_qkv sum2 vs double: relative %.3g", worst);
    CHECK(snug_imatrix_collector_counts(col, "blk.0.ssm_conv1d.weight", NULL) == NULL);
    CHECK(snug_imatrix_collector_counts(col, "output.weight", NULL) == NULL);

    /* written, then read back through our reader: importance = sum2 / counts per expert */
    char path[512];
    test_tmp_template(path, sizeof path, "snug_imatrix");
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    CHECKF(snug_imatrix_collector_write(col, path, "long_ids", (uint32_t)chunk, &err) == SNUG_OK,
           "write: %s", err.msg);
    struct snug_imatrix *im = NULL;
    CHECKF(snug_imatrix_load(&im, path, &err) == SNUG_OK, "read back: %s", err.msg);
    if (im) {
        CHECK(snug_imatrix_n_entries(im) == snug_imatrix_collector_n_entries(col));
        CHECK(snug_imatrix_chunk_count(im) == (uint32_t)n_chunks);
        CHECK(!strcmp(snug_imatrix_dataset(im), "long_ids"));
        int64_t bad = 0, checked = 0;
        for (uint32_t l = 0; l < m->hp.n_layer; l++)
            for (int i = 0; i < 3; i++) {
                snprintf(name, sizeof name, "blk.%u.%s.weight", l, exps[i]);
                uint64_t nvals = 0;
                int64_t ns = 0, nm = 0;
                const float *imp = snug_imatrix_find(im, name, &nvals);
                const float *sum2 = snug_imatrix_collector_sum2(col, name, &ns);
                const int64_t *cnt = snug_imatrix_collector_counts(col, name, &nm);
                if (!imp || !sum2 || !cnt || (int64_t)nvals != ns) {
                    bad++;
                    continue;
                }
                int64_t n_in = ns / nm;
                for (int64_t e = 0; e < nm; e++)
                    for (int64_t j = 0; j < n_in; j++, checked++) {
                        float want = cnt[e] ? sum2[e * n_in + j] / (float)cnt[e] : 1.f;
                        bad += imp[e * n_in + j] != want;
                    }
            }
        CHECKF(bad == 0 && checked > 0, "%lld of %lld read-back values differ", (long long)bad,
               (long long)checked);
        snug_imatrix_free(im);
    }
    unlink(path);

    /* llama-imatrix's rule: 2-D products of fewer than 16 rows are not collected, expert
     * products always are */
    struct snug_imatrix_collector *small = NULL;
    CHECK(snug_imatrix_collector_new(&small, m, &err) == SNUG_OK);
    CHECK(snug_ctx_set_mm_observer(ctx, snug_imatrix_collector_observer(small), &err) == SNUG_OK);
    snug_ctx_reset(ctx);
    CHECK(snug_ctx_eval(ctx, ids, 10, NULL, SNUG_EVAL_LOGITS_LAST, &err) == SNUG_OK);
    CHECKF(snug_imatrix_collector_n_entries(small) == 3 * (int64_t)m->hp.n_layer,
           "10 rows: %lld entries, want the %u expert tensors only",
           (long long)snug_imatrix_collector_n_entries(small), 3 * m->hp.n_layer);
    CHECK(snug_ctx_set_mm_observer(ctx, NULL, &err) == SNUG_OK);
    snug_imatrix_collector_free(small);

    free(plain);
    free(seen);
    free(ids);
    snug_imatrix_collector_free(col);
    snug_ctx_free(ctx);
    snug_model_free(m);
}

int main(void) {
    (void)fx_check_kl, (void)fx_compare, (void)fx_read_f32; /* (the shared header's) */
    const char *fx = test_fixtures_dir();
    if (fx) check_moe(fx);
    return TEST_DONE();
}
