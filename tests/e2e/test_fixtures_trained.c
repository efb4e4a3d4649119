/* test_fixtures_trained.c — the dense `qwen35` engine against the trained fixture
 * (docs/testing.md): logits of a 300-token prompt for chunk sizes 1/7/64/300, threads 1/2
 * and KV f32/f16; per-layer hidden states; 48 greedy decode steps; held-out perplexity through
 * `snug perplexity`; `snug logits` through the CLI; the context-budget error; and that
 * snug_ctx_eval allocates nothing. Prints every measured number. */
#define _POSIX_C_SOURCE 200809L
#include "test_fixtures_common.h"

static const char *FX;
static int32_t *IDS, T;
static float *REF;
static int64_t V = 2048, H = 256;

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

/* Whole-prompt logits with one configuration, compared with logits.f32. */
static void test_prompt(struct snug_model *m, int32_t chunk, int threads, int kv) {
    struct snug_ctx *ctx = make_ctx(m, T, chunk, kv, threads);
    if (!ctx) return;
    float *got = malloc((size_t)T * (size_t)V * sizeof(float));
    struct snug_err err = {0};
    uint64_t a0 = snug_alloc_count();
    int rc = snug_ctx_eval(ctx, IDS, T, got, SNUG_EVAL_LOGITS_ALL, &err);
    uint64_t a1 = snug_alloc_count();
    CHECKF(rc == SNUG_OK, "eval: %s", err.msg);
    CHECKF(a1 == a0, "snug_ctx_eval allocated %llu times", (unsigned long long)(a1 - a0));
    CHECK(snug_ctx_n_past(ctx) == T);
    char what[96];
    snprintf(what, sizeof what, "trained logits chunk %d threads %d kv %s", chunk, threads,
             kv == SNUG_KV_F32 ? "f32" : "f16");
    fx_check_kl(what, fx_compare(REF, got, T, V), false);
    free(got);
    snug_ctx_free(ctx);
}

/* Hidden states: hook rows vs hidden.f32 [n_layer+1][T][H] (stage n_layer+1 = final norm). */
static float *HID;
static void hook(void *user, int32_t stage, snug_pos pos0, int32_t n, int32_t n_embd,
                 const float *rows) {
    (void)user;
    memcpy(HID + ((int64_t)stage * T + pos0) * n_embd, rows, (size_t)n * n_embd * sizeof(float));
}

static void test_hidden(struct snug_model *m) {
    size_t n = 0;
    float *ref = fx_read_f32(fx_path(FX, "trained", "hidden.f32"), &n);
    if (!ref) return;
    int L = snug_model_n_layer(m);
    CHECK(n == (size_t)(L + 1) * T * H);
    HID = calloc((size_t)(L + 2) * T * H, sizeof(float));
    struct snug_ctx *ctx = make_ctx(m, T, 64, SNUG_KV_F32, 2);
    snug_ctx_set_layer_hook(ctx, hook, NULL);
    struct snug_err err = {0};
    CHECK(snug_ctx_eval(ctx, IDS, T, NULL, SNUG_EVAL_LOGITS_LAST, &err) == SNUG_OK);
    for (int r = 0; r <= L; r++) {
        int stage = r < L ? r : L + 1; /* the last reference row is after the final norm */
        const float *a = ref + (int64_t)r * T * H, *b = HID + (int64_t)stage * T * H;
        double md = 0, mx = 0;
        for (int64_t i = 0; i < T * H; i++) {
            md = fmax(md, fabs((double)a[i] - b[i]));
            mx = fmax(mx, fabs((double)a[i]));
        }
        printf("hidden row %d (stage %d): max |diff| %.3g, max |ref| %.3g, relative %.3g\n", r,
               stage, md, mx, md / mx);
        CHECKF(md / mx <= 1e-4, "hidden row %d: relative diff %.3g", r, md / mx);
    }
    snug_ctx_free(ctx);
    free(HID);
    free(ref);
}

/* Prompt, then 48 single-token decode steps with argmax: tokens == greedy.json, logits vs
 * greedy_logits.f32. */
static void test_greedy(struct snug_model *m, int kv) {
    int32_t ng = 0;
    int32_t *greedy = fx_read_ids(fx_path(FX, "trained", "greedy.json"), &ng);
    size_t n = 0;
    float *ref = fx_read_f32(fx_path(FX, "trained", "greedy_logits.f32"), &n);
    if (!greedy || !ref) return;
    CHECK(ng == 48 && n == (size_t)ng * V);
    struct snug_ctx *ctx = make_ctx(m, T + ng, 512, kv, 2);
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
    uint64_t a1 = snug_alloc_count();
    CHECKF(rc == SNUG_OK, "greedy eval: %s", err.msg);
    CHECKF(a1 == a0, "prefill + decode allocated %llu times", (unsigned long long)(a1 - a0));
    const char *what = kv == SNUG_KV_F32 ? "trained greedy kv f32" : "trained greedy kv f16";
    printf("%s: %d/%d tokens identical\n", what, same, ng);
    CHECKF(same == ng, "%s: %d of %d greedy tokens match", what, same, ng);
    fx_check_kl(what, fx_compare(ref, got, ng, V), false);
    free(got);
    free(ref);
    free(greedy);
    snug_ctx_free(ctx);
}

/* A prompt longer than the room left is SNUG_ERR_BUDGET naming both numbers, and changes
 * nothing. */
static void test_budget(struct snug_model *m) {
    struct snug_ctx *ctx = make_ctx(m, 16, 8, SNUG_KV_F16, 1);
    struct snug_err err = {0};
    CHECK(snug_ctx_eval(ctx, IDS, 10, NULL, 0, &err) == SNUG_OK);
    int rc = snug_ctx_eval(ctx, IDS, 7, NULL, 0, &err);
    printf("budget error: %s\n", err.msg);
    CHECK(rc == SNUG_ERR_BUDGET);
    CHECK(strstr(err.msg, "7 tokens") && strstr(err.msg, "6 of 16"));
    CHECK(snug_ctx_n_past(ctx) == 10);
    snug_token bad = (snug_token)V;
    CHECK(snug_ctx_eval(ctx, &bad, 1, NULL, 0, &err) == SNUG_ERR_INVALID);
    snug_ctx_reset(ctx);
    CHECK(snug_ctx_n_past(ctx) == 0);
    snug_ctx_free(ctx);
}

/* The CLI: `snug logits` output equals the reference; `snug perplexity` = 4.2773 ± 0.0005. */
static void test_cli(void) {
    char cmd[8192];
    const char *model = fx_path(FX, "trained", "trained-f16.gguf");
    snprintf(cmd, sizeof cmd, "%s logits -m %s --ids %s -o test_fixtures_trained.f32 --chunk 100",
             SNUG_BIN, model, fx_path(FX, "trained", "ids.json"));
    CHECK(system(cmd) == 0);
    size_t n = 0;
    float *got = fx_read_f32("test_fixtures_trained.f32", &n);
    if (got) {
        CHECK(n == (size_t)T * V);
        if (n == (size_t)T * V) fx_check_kl("snug logits (CLI)", fx_compare(REF, got, T, V), false);
        free(got);
    }
    remove("test_fixtures_trained.f32");
    if (FX_SANITIZED) {
        printf(
            "SKIP perplexity of 4096 tokens in a sanitizer build (the normal build checks it)\n");
        return;
    }
    snprintf(cmd, sizeof cmd, "%s perplexity -m %s --ids %s --threads 2", SNUG_BIN, model,
             fx_path(FX, "trained", "ppl_ids.json"));
    FILE *p = popen(cmd, "r");
    double ppl = 0;
    char line[512];
    while (p && fgets(line, sizeof line, p))
        if (sscanf(line, "perplexity %lf", &ppl) == 1) printf("snug perplexity: %.4f\n", ppl);
    CHECK(p && pclose(p) == 0);
    CHECK_NEAR(ppl, 4.2773, 0.0005);
}

int main(void) {
    FX = test_fixtures_dir();
    if (!FX) return TEST_DONE();
    size_t n = 0;
    IDS = fx_read_ids(fx_path(FX, "trained", "ids.json"), &T);
    REF = fx_read_f32(fx_path(FX, "trained", "logits.f32"), &n);
    if (!IDS || !REF) return TEST_DONE();
    CHECK(T == 300 && n == (size_t)T * V);

    struct snug_err err = {0};
    struct snug_model *m = NULL;
    struct snug_model_params mp = {.path = fx_path(FX, "trained", "trained-f16.gguf")};
    int rc = snug_model_load(&m, &mp, &err);
    CHECKF(rc == SNUG_OK, "load: %s", err.msg);
    if (rc) return TEST_DONE();
    CHECK(!strcmp(snug_model_arch(m), "qwen35"));
    CHECK(snug_model_n_vocab(m) == V && snug_model_n_embd(m) == H && snug_model_n_layer(m) == 4);

    static const int32_t chunks[] = {1, 7, 64, 300};
    for (int th = 1; th <= 2; th++)
        for (size_t i = 0; i < 4; i++)
            if (!FX_SANITIZED || (int)(i % 2) + 1 == th) test_prompt(m, chunks[i], th, SNUG_KV_F32);
    test_prompt(m, 64, 2, SNUG_KV_F16);
    if (!FX_SANITIZED) test_prompt(m, 1, 2, SNUG_KV_F16);
    test_hidden(m);
    test_greedy(m, SNUG_KV_F32);
    if (!FX_SANITIZED) test_greedy(m, SNUG_KV_F16);
    test_budget(m);
    test_cli();

    snug_model_free(m);
    free(IDS);
    free(REF);
    return TEST_DONE();
}
