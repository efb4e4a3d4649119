/* test_tp_cpu.c — tensor parallelism's forward emulated on the CPU (src/tp/tp_cpu.c) against
 * the one-device engine, on the trained (dense) and MoE fixtures:
 *   - one rank through the emulation = snug_ctx_eval bit for bit (the harness adds nothing);
 *   - two ranks (heads, DeltaNet value heads, FFN / expert columns and the LM head split, two
 *     all-reduces per layer): logits of the whole prompt with median KL ≤ 1e-5 against the
 *     one-device run (here on the CPU), and within the fixtures' bounds
 *     against the Hugging Face reference; 32 greedy decode steps pick the same tokens;
 *   - an eval step allocates nothing; 3 ranks are refused, naming the query heads;
 *   - the CLI: `snug logits --tp 2 --greedy 32` prints the engine's greedy tokens.
 * Prints every measured number.
 */
#define _POSIX_C_SOURCE 200809L
#include "test_fixtures_common.h"

#include "model/model.h"
#include "tp/tp.h"

enum { GREEDY = 32, CHUNK = 64 };

/* Greedy decode of GREEDY tokens after the prompt's last logits row, through ctx or tp. */
static void greedy(struct snug_ctx *ctx, struct snug_tp_cpu *tp, const float *last, int64_t V,
                   int32_t *out) {
    float *row = malloc((size_t)V * sizeof(float));
    memcpy(row, last, (size_t)V * sizeof(float));
    struct snug_err err = {0};
    for (int i = 0; i < GREEDY; i++) {
        snug_token t = (snug_token)fx_argmax(row, V);
        out[i] = t;
        int rc = ctx ? snug_ctx_eval(ctx, &t, 1, row, SNUG_EVAL_LOGITS_LAST, &err)
                     : snug_tp_cpu_eval(tp, &t, 1, 1, row, &err);
        CHECKF(rc == SNUG_OK, "decode step %d: %s", i, err.msg);
    }
    free(row);
}

static void test_fixture(const char *fx, const char *name, const char *file, bool moe) {
    struct snug_err err = {0};
    struct snug_model *m = NULL;
    struct snug_model_params mp = {.path = fx_path(fx, name, file), .n_threads = 1};
    if (snug_model_load(&m, &mp, &err)) {
        CHECKF(false, "%s: %s", name, err.msg);
        return;
    }
    int32_t T = 0;
    int32_t *ids = fx_read_ids(fx_path(fx, name, "ids.json"), &T);
    CHECK(ids && T > 0);
    int64_t V = snug_model_n_vocab(m);
    int32_t n_ctx = T + GREEDY + 8;
    size_t bytes = (size_t)T * (size_t)V * sizeof(float);
    float *ref = malloc(bytes), *one = malloc(bytes), *two = malloc(bytes);

    /* the one-device engine */
    struct snug_ctx *ctx = NULL;
    struct snug_ctx_params cp = {.n_ctx = n_ctx, .n_chunk = CHUNK, .n_threads = 1};
    CHECKF(snug_ctx_init(&ctx, m, &cp, &err) == SNUG_OK, "ctx: %s", err.msg);
    CHECKF(snug_ctx_eval(ctx, ids, T, ref, SNUG_EVAL_LOGITS_ALL, &err) == SNUG_OK, "%s", err.msg);

    /* one rank through the emulation: the same numbers */
    struct snug_tp_cpu *tp1 = NULL, *tp2 = NULL;
    CHECKF(snug_tp_cpu_open(&tp1, m, 1, n_ctx, CHUNK, SNUG_KV_F16, &err) == SNUG_OK, "%s", err.msg);
    CHECKF(snug_tp_cpu_eval(tp1, ids, T, T, one, &err) == SNUG_OK, "%s", err.msg);
    CHECKF(!memcmp(one, ref, bytes), "%s: one rank differs from the engine", name);

    /* two ranks */
    CHECKF(snug_tp_cpu_open(&tp2, m, 2, n_ctx, CHUNK, SNUG_KV_F16, &err) == SNUG_OK, "%s", err.msg);
    uint64_t a0 = snug_alloc_count();
    CHECKF(snug_tp_cpu_eval(tp2, ids, T, T, two, &err) == SNUG_OK, "%s", err.msg);
    CHECKF(snug_alloc_count() == a0, "%s: the tp eval allocated %llu times", name,
           (unsigned long long)(snug_alloc_count() - a0));
    char what[96];
    snprintf(what, sizeof what, "%s --tp 2 vs --tp 1 (cpu)", name);
    struct fx_kl k = fx_compare(ref, two, T, V);
    fx_print_kl(what, k);
    CHECKF(k.median <= 1e-5, "%s: median KL %.3g > 1e-5", what, k.median);
    CHECKF(k.top1 >= 0.99, "%s: top-1 %.4f", what, k.top1);
    size_t n_hf = 0;
    float *hf = fx_read_f32(fx_path(fx, name, "logits.f32"), &n_hf);
    if (hf && n_hf == (size_t)T * (size_t)V) {
        snprintf(what, sizeof what, "%s --tp 2 vs HF", name);
        fx_check_kl(what, fx_compare(hf, two, T, V), moe);
    }
    free(hf);

    /* greedy decode: the same 32 tokens */
    int32_t g1[GREEDY], g2[GREEDY];
    greedy(ctx, NULL, ref + (int64_t)(T - 1) * V, V, g1);
    greedy(NULL, tp2, two + (int64_t)(T - 1) * V, V, g2);
    int same = 0;
    while (same < GREEDY && g1[same] == g2[same]) same++;
    printf("%-40s greedy: %d of %d tokens identical\n", name, same, GREEDY);
    CHECKF(same == GREEDY, "%s: greedy differs at step %d (%d vs %d)", name, same,
           same < GREEDY ? g1[same] : -1, same < GREEDY ? g2[same] : -1);

    /* refusal: 3 ranks do not divide the 4 query heads */
    struct snug_tp_cpu *tp3 = NULL;
    CHECK(snug_tp_cpu_open(&tp3, m, 3, n_ctx, CHUNK, SNUG_KV_F16, &err) == SNUG_ERR_INVALID);
    CHECKF(strstr(err.msg, "attention.head_count") != NULL, "%s", err.msg);
    CHECK(tp3 == NULL);

    snug_tp_cpu_free(tp1);
    snug_tp_cpu_free(tp2);
    snug_ctx_free(ctx);
    free(ref);
    free(one);
    free(two);
    free(ids);
    snug_model_free(m);
}

/* The greedy tokens `snug logits` prints, with extra flags. */
static char *cli_greedy(const char *fx, const char *extra) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s logits -m %s --ids %s -o test_tp_cpu.f32 --greedy %d %s",
             SNUG_BIN, fx_path(fx, "trained", "trained-f16.gguf"),
             fx_path(fx, "trained", "ids.json"), GREEDY, extra);
    FILE *p = popen(cmd, "r");
    static char out[2][4096];
    static int slot;
    char *o = out[slot++ % 2];
    o[0] = 0;
    if (!p) return o;
    size_t n = fread(o, 1, 4095, p);
    o[n] = 0;
    CHECKF(pclose(p) == 0, "%s failed", cmd);
    remove("test_tp_cpu.f32");
    return o;
}

int main(void) {
    const char *fx = test_fixtures_dir();
    if (!fx) return TEST_DONE();
    test_fixture(fx, "trained", "trained-f16.gguf", false);
    test_fixture(fx, "moe", "moe-f16.gguf", true);
    char *one = cli_greedy(fx, ""), *two = cli_greedy(fx, "--tp 2");
    printf("snug logits --greedy %d: %s", GREEDY, one);
    CHECKF(one[0] == '[' && !strcmp(one, two), "snug logits --tp 2 prints %s", two);
    return TEST_DONE();
}
