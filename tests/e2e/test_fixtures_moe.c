/* test_fixtures_moe.c — the `qwen35moe` engine against the MoE fixture (docs/testing.md):
 * logits of the 235-token prompt (chunk 1/7/64/300, threads 1/2, KV f32/f16), the 1,536-token
 * input at long_pos, and 48 greedy decode steps; snug_ctx_eval must not allocate. Bounds are
 * the README's MoE ones (p95 instead of p99, top-1 ≥ 97%): near-tie routings may flip. */
#include "test_fixtures_common.h"

static const char *FX;
static int32_t *IDS, T;
static float *REF;
static const int64_t V = 2048;

static struct snug_ctx *make_ctx(struct snug_model *m, int32_t n_ctx, int32_t chunk, int kv,
                                 int threads) {
    struct snug_err err = {0};
    struct snug_ctx *ctx = NULL;
    struct snug_ctx_params cp = {
        .n_ctx = n_ctx, .n_chunk = chunk, .kv_type = kv, .n_threads = threads};
    int rc = snug_ctx_init(&ctx, m, &cp, &err);
    CHECKF(rc == SNUG_OK, "ctx init: %s", err.msg);
    return ctx;
}

static void test_prompt(struct snug_model *m, int32_t chunk, int threads, int kv) {
    struct snug_ctx *ctx = make_ctx(m, T, chunk, kv, threads);
    if (!ctx) return;
    float *got = malloc((size_t)T * V * sizeof(float));
    struct snug_err err = {0};
    uint64_t a0 = snug_alloc_count();
    int rc = snug_ctx_eval(ctx, IDS, T, got, SNUG_EVAL_LOGITS_ALL, &err);
    CHECKF(rc == SNUG_OK, "eval: %s", err.msg);
    CHECK(snug_alloc_count() == a0);
    char what[96];
    snprintf(what, sizeof what, "moe logits chunk %d threads %d kv %s", chunk, threads,
             kv == SNUG_KV_F32 ? "f32" : "f16");
    fx_check_kl(what, fx_compare(REF, got, T, V), true);
    free(got);
    snug_ctx_free(ctx);
}

static void test_long(struct snug_model *m) {
    int32_t n = 0, np = 0;
    int32_t *ids = fx_read_ids(fx_path(FX, "moe", "long_ids.json"), &n);
    int32_t *pos = fx_read_ids(fx_path(FX, "moe", "long_pos.json"), &np);
    size_t nr = 0;
    float *ref = fx_read_f32(fx_path(FX, "moe", "long_logits.f32"), &nr);
    if (!ids || !pos || !ref) return;
    CHECK(nr == (size_t)np * V);
    struct snug_ctx *ctx = make_ctx(m, n, 512, SNUG_KV_F32, 2);
    float *all = malloc((size_t)n * V * sizeof(float)), *got = malloc(nr * sizeof(float));
    struct snug_err err = {0};
    CHECKF(snug_ctx_eval(ctx, ids, n, all, SNUG_EVAL_LOGITS_ALL, &err) == SNUG_OK, "%s", err.msg);
    for (int32_t i = 0; i < np; i++)
        memcpy(got + (int64_t)i * V, all + (int64_t)pos[i] * V, (size_t)V * sizeof(float));
    fx_check_kl("moe long logits (1536 tokens, long_pos)", fx_compare(ref, got, np, V), true);
    free(all);
    free(got);
    free(ref);
    free(pos);
    free(ids);
    snug_ctx_free(ctx);
}

static void test_greedy(struct snug_model *m) {
    int32_t ng = 0;
    int32_t *greedy = fx_read_ids(fx_path(FX, "moe", "greedy.json"), &ng);
    size_t n = 0;
    float *ref = fx_read_f32(fx_path(FX, "moe", "greedy_logits.f32"), &n);
    if (!greedy || !ref) return;
    CHECK(ng == 48 && n == (size_t)ng * V);
    struct snug_ctx *ctx = make_ctx(m, T + ng, 512, SNUG_KV_F32, 2);
    float *got = malloc((size_t)ng * V * sizeof(float));
    struct snug_err err = {0};
    uint64_t a0 = snug_alloc_count();
    int rc = snug_ctx_eval(ctx, IDS, T, got, SNUG_EVAL_LOGITS_LAST, &err);
    int same = 0;
    for (int32_t i = 0; i < ng && rc == SNUG_OK; i++) {
        snug_token tok = (snug_token)fx_argmax(got + (int64_t)i * V, V);
        same += tok == greedy[i];
        if (i + 1 < ng) rc = snug_ctx_eval(ctx, &tok, 1, got + (int64_t)(i + 1) * V, 0, &err);
    }
    CHECKF(rc == SNUG_OK, "greedy eval: %s", err.msg);
    CHECK(snug_alloc_count() == a0);
    printf("moe greedy: %d/%d tokens identical\n", same, ng);
    CHECKF(same == ng, "moe greedy: %d of %d tokens match", same, ng);
    fx_check_kl("moe greedy", fx_compare(ref, got, ng, V), true);
    free(got);
    free(ref);
    free(greedy);
    snug_ctx_free(ctx);
}

int main(void) {
    FX = test_fixtures_dir();
    if (!FX) return TEST_DONE();
    size_t n = 0;
    IDS = fx_read_ids(fx_path(FX, "moe", "ids.json"), &T);
    REF = fx_read_f32(fx_path(FX, "moe", "logits.f32"), &n);
    if (!IDS || !REF) return TEST_DONE();
    CHECK(T == 235 && n == (size_t)T * V);
    struct snug_err err = {0};
    struct snug_model *m = NULL;
    struct snug_model_params mp = {.path = fx_path(FX, "moe", "moe-f16.gguf")};
    int rc = snug_model_load(&m, &mp, &err);
    CHECKF(rc == SNUG_OK, "load: %s", err.msg);
    if (rc) return TEST_DONE();
    CHECK(!strcmp(snug_model_arch(m), "qwen35moe"));
    CHECK(snug_model_n_vocab(m) == V && snug_model_n_layer(m) == 4);

    static const int32_t chunks[] = {1, 7, 64, 300};
    for (int th = 1; th <= 2; th++)
        for (size_t i = 0; i < 4; i++)
            if (!FX_SANITIZED || (int)(i % 2) + 1 == th) test_prompt(m, chunks[i], th, SNUG_KV_F32);
    test_prompt(m, 64, 2, SNUG_KV_F16);
    if (FX_SANITIZED)
        printf("SKIP 1536-token long logits in a sanitizer build (the normal build checks them)\n");
    else
        test_long(m);
    test_greedy(m);
    snug_model_free(m);
    free(IDS);
    free(REF);
    return TEST_DONE();
}
