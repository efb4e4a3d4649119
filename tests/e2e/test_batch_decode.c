/* test_batch_decode.c — snug_ctx_eval_batch (one decode token for each of n contexts in one
 * forward) against n separate snug_ctx_eval calls, on both fixture models (trained dense and
 * random MoE): the contexts sit at different positions (prompts of different lengths), decode
 * greedy continuations for several steps, and every batched logits row must equal the lone
 * decode's row bit for bit (each matmul output is the same kernel call for one row or a few:
 * f16, and Q8_0 / Q6_K / Q4_K_M copies of the trained model made with `snug quantize`).
 * The batched contexts are either separate contexts or the slots of one pool (src/engine/slots.h:
 * one backend instance, work arena and thread pool for all of them, as the server runs them).
 * Also: a step of more rows than ctxs[0]'s n_chunk (split into several forwards), the
 * one-by-one fallback (a context with a layer hook), zero allocations per batched step, and
 * the refusals (a repeated context, a full context) that change nothing.
 * Read next: src/model/context.c (snug_ctx_eval_batch), src/arch/qwen35.c (f.kv_rows). */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function" /* the shared header's other helpers */
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation" /* paths are checked by the open */
#endif
#include "test_fixtures_common.h"

#include "engine/slots.h"

#define NB    4  /* contexts in the batch */
#define STEPS 10 /* decode steps */

/* Largest |a - b| over n floats (NaN counts as infinite). */
static double max_abs_diff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

static void noop_hook(void *user, int32_t stage, snug_pos pos0, int32_t n, int32_t n_embd,
                      const float *rows) {
    (void)user, (void)stage, (void)pos0, (void)n, (void)n_embd, (void)rows;
}

/* One model: NB batched contexts and NB reference contexts, prompts of different lengths,
 * STEPS greedy decode steps compared row by row. chunk0: ctxs[0]'s n_chunk (small values split
 * the batch into several forwards); hook: set a layer hook on context 1 (the fallback path). */
static void run_model_in(const char *dir, const char *model, const char *path, int32_t chunk0,
                         bool hook, bool pool) {
    struct snug_err err = {0};
    struct snug_model *m = NULL;
    struct snug_model_params mp = {.path = path, .n_threads = 2};
    if (snug_model_load(&m, &mp, &err) != SNUG_OK) {
        CHECKF(0, "load %s: %s", mp.path, err.msg);
        return;
    }
    int32_t n_ids = 0;
    int32_t *ids =
        fx_read_ids(fx_path(dir, strchr(model, '-') ? "trained" : model, "ids.json"), &n_ids);
    int64_t V = snug_model_n_vocab(m);
    struct snug_ctx *bat[NB] = {0}, *ref[NB] = {0};
    float *blog = malloc(sizeof(float) * (size_t)(NB * V));
    float *rlog = malloc(sizeof(float) * (size_t)(NB * V));
    snug_token next[NB];
    bool ok = ids && blog && rlog && n_ids >= 120;
    struct snug_slots *sp = NULL;
    if (ok && pool) { /* the batched sequences as slots of one backend instance */
        struct snug_ctx_params cp = snug_ctx_default_params();
        cp.n_ctx = 256;
        cp.n_chunk = chunk0;
        cp.n_threads = 2;
        ok = snug_slots_init(&sp, m, &cp, NB, &err) == SNUG_OK;
        for (int i = 0; ok && i < NB; i++) bat[i] = snug_slots_ctx(sp, i);
    }
    for (int i = 0; ok && i < NB; i++) {
        struct snug_ctx_params cp = snug_ctx_default_params();
        cp.n_ctx = 256;
        cp.n_chunk = 64;
        cp.n_threads = 2;
        if (i == 0 || pool) cp.n_chunk = chunk0; /* (both: the prompt's chunking must match) */
        ok = snug_ctx_init(&ref[i], m, &cp, &err) == SNUG_OK;
        if (!pool) ok = ok && snug_ctx_init(&bat[i], m, &cp, &err) == SNUG_OK;
        int32_t len = 7 + 29 * i; /* different positions per sequence */
        ok = ok && snug_ctx_eval(ref[i], ids, len, rlog + i * V, 0, &err) == SNUG_OK;
        ok = ok && snug_ctx_eval(bat[i], ids, len, blog + i * V, 0, &err) == SNUG_OK;
        if (ok) next[i] = (snug_token)fx_argmax(rlog + i * V, V);
    }
    CHECKF(ok, "%s: setup: %s", model, err.msg);
    if (ok && hook) snug_ctx_set_layer_hook(bat[1], noop_hook, NULL);
    double worst = 0;
    int steps_ok = 0;
    uint64_t allocs = 0;
    for (int s = 0; ok && s < STEPS; s++) {
        uint64_t a0 = snug_alloc_count();
        int rc = snug_ctx_eval_batch(bat, next, NB, blog, &err);
        allocs += snug_alloc_count() - a0;
        CHECKF(rc == SNUG_OK, "%s step %d: %s", model, s, err.msg);
        if (rc) break;
        for (int i = 0; i < NB; i++) {
            rc = snug_ctx_eval(ref[i], &next[i], 1, rlog + i * V, 0, &err);
            CHECKF(rc == SNUG_OK, "%s ref step %d: %s", model, s, err.msg);
            CHECK(snug_ctx_n_past(bat[i]) == snug_ctx_n_past(ref[i]));
            double d = max_abs_diff(blog + i * V, rlog + i * V, V);
            worst = d > worst ? d : worst;
            next[i] = (snug_token)fx_argmax(rlog + i * V, V);
        }
        steps_ok++;
    }
    printf("%s (chunk0 %d%s%s): %d steps x %d contexts, max |batched - lone| logit %.3g, %llu "
           "allocations\n",
           model, chunk0, hook ? ", hook fallback" : "", pool ? ", slots of one pool" : "",
           steps_ok, NB, worst, (unsigned long long)allocs);
    CHECK(steps_ok == STEPS);
    CHECKF(worst == 0, "%s: batched logits differ from lone decodes by %.3g", model, worst);
    CHECKF(allocs == 0, "%s: %llu allocations in batched steps", model, (unsigned long long)allocs);

    if (ok) { /* refusals change nothing */
        int32_t np0 = snug_ctx_n_past(bat[0]), np1 = snug_ctx_n_past(bat[1]);
        struct snug_ctx *dup[2] = {bat[0], bat[0]};
        snug_token two[2] = {1, 2};
        CHECK(snug_ctx_eval_batch(dup, two, 2, NULL, &err) == SNUG_ERR_INVALID);
        CHECK(strstr(err.msg, "same") != NULL);
        snug_token bad[2] = {1, (snug_token)V};
        CHECK(snug_ctx_eval_batch(bat, bad, 2, NULL, &err) == SNUG_ERR_INVALID);
        CHECK(snug_ctx_n_past(bat[0]) == np0 && snug_ctx_n_past(bat[1]) == np1);
        CHECK(snug_ctx_eval_batch(bat, two, 0, NULL, &err) == SNUG_OK);
    }
    for (int i = 0; i < NB; i++) {
        if (!pool) snug_ctx_free(bat[i]);
        snug_ctx_free(ref[i]);
    }
    snug_slots_free(sp);
    free(blog);
    free(rlog);
    free(ids);
    snug_model_free(m);
}

static void run_model(const char *dir, const char *model, const char *path, int32_t chunk0,
                      bool hook) {
    run_model_in(dir, model, path, chunk0, hook, false);
}

/* A context with no room left is refused by name and nothing moves. */
static void full_context(const char *dir) {
    struct snug_err err = {0};
    struct snug_model *m = NULL;
    struct snug_model_params mp = {.path = fx_path(dir, "trained", "trained-f16.gguf"),
                                   .n_threads = 1};
    if (snug_model_load(&m, &mp, &err) != SNUG_OK) {
        CHECKF(0, "load: %s", err.msg);
        return;
    }
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = 4;
    cp.n_chunk = 4;
    struct snug_ctx *a = NULL, *b = NULL;
    CHECK(snug_ctx_init(&a, m, &cp, &err) == SNUG_OK);
    CHECK(snug_ctx_init(&b, m, &cp, &err) == SNUG_OK);
    snug_token t4[4] = {5, 6, 7, 8};
    if (a && b) {
        CHECK(snug_ctx_eval(b, t4, 4, NULL, 0, &err) == SNUG_OK);
        struct snug_ctx *ab[2] = {a, b};
        CHECK(snug_ctx_eval_batch(ab, t4, 2, NULL, &err) == SNUG_ERR_BUDGET);
        CHECK(strstr(err.msg, "context 1 is full") != NULL);
        CHECK(snug_ctx_n_past(a) == 0 && snug_ctx_n_past(b) == 4);
    }
    snug_ctx_free(a);
    snug_ctx_free(b);
    snug_model_free(m);
}

int main(void) {
    const char *dir = test_fixtures_dir();
    if (!dir) return TEST_DONE();
    run_model(dir, "trained", fx_path(dir, "trained", "trained-f16.gguf"), 64, false);
    run_model(dir, "moe", fx_path(dir, "moe", "moe-f16.gguf"), 64, false);
    run_model(dir, "trained", fx_path(dir, "trained", "trained-f16.gguf"), 3, false); /* 3 + 1 */
    run_model(dir, "trained", fx_path(dir, "trained", "trained-f16.gguf"), 64, true);
    run_model_in(dir, "trained", fx_path(dir, "trained", "trained-f16.gguf"), 64, false, true);
    run_model_in(dir, "moe", fx_path(dir, "moe", "moe-f16.gguf"), 64, false, true);
    /* block types: Q8_0 / Q6_K take float activations (the few-row in-place dot), Q4_K int8
     * activations (several rows per weight-block decode); quantized here with `snug quantize` */
    const char *types[] = {"q8_0", "q6_k", "q4_k_m"};
    for (int i = 0; i < 3; i++) {
        char out[256], cmd[1024], label[64];
        snprintf(out, sizeof out, "test_batch_decode-%s.gguf", types[i]);
        snprintf(cmd, sizeof cmd, "%s quantize %s %s %s > /dev/null 2>&1", SNUG_BIN,
                 fx_path(dir, "trained", "trained-f16.gguf"), out, types[i]);
        int rc = system(cmd);
        CHECKF(rc == 0, "%s failed (%d)", cmd, rc);
        snprintf(label, sizeof label, "trained-%s", types[i]);
        if (rc == 0) run_model(dir, label, out, 64, false);
        remove(out);
    }
    full_context(dir);
    return TEST_DONE();
}
