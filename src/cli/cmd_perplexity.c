/* cmd_perplexity.c — `snug perplexity -m M.gguf --ids IDS.json [--window 1024] [--threads N]
 * [--chunk N] [--kv TYPE] [--kv-k TYPE] [--kv-v TYPE]`: split the ids into independent windows of
 * `window` tokens (a shorter tail window is dropped, as fixtures/README.md defines for
 * ppl_ids.json), run each from an empty context, and print exp(mean NLL) over every prediction of
 * every window (window − 1 per window). */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

snug_token *cli_read_ids(const char *cmd, const char *path, int32_t *n_out);

static int usage(void) {
    fprintf(
        stderr,
        "usage: snug perplexity -m M.gguf --ids IDS.json [--window 1024] "
        "[--threads N] [--chunk N] [--kv TYPE] "
        "[--backend cpu|cuda] [--vram-budget SIZE] [--cuda-profile] [--kv-k TYPE] [--kv-v TYPE]\n"
        "  TYPE: f16 (default) f32 bf16 q8_0 fp8 tq4 tq3 (KV cache format)\n");
    return 2;
}

/* −log softmax(row)[target], in double. */
static double nll(const float *row, int64_t V, int32_t target) {
    double mx = row[0];
    for (int64_t i = 1; i < V; i++) mx = row[i] > mx ? row[i] : mx;
    double s = 0;
    for (int64_t i = 0; i < V; i++) s += exp((double)row[i] - mx);
    return log(s) + mx - (double)row[target];
}

int cmd_perplexity(int argc, char **argv) {
    const char *model = NULL, *ids_path = NULL;
    struct cli_kv kv = CLI_KV_DEFAULT;
    struct cli_backend bk = {0};
    long threads = 0, chunk = 0, window = 1024;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--ids")) {
            if (!(ids_path = cli_value(argc, argv, &i))) return 2;
        } else if ((r = cli_kv_flag(argc, argv, &i, "perplexity", &kv)) != 0) {
            if (r < 0) return 2;
        } else if ((r = cli_backend_flag(argc, argv, &i, "perplexity", &bk)) != 0) {
            if (r < 0) return 2;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (!cli_int(argc, argv, &i, &threads)) return 2;
        } else if (!strcmp(a, "--chunk")) {
            if (!cli_int(argc, argv, &i, &chunk)) return 2;
        } else if (!strcmp(a, "--window")) {
            if (!cli_int(argc, argv, &i, &window)) return 2;
        } else {
            fprintf(stderr, "snug perplexity: unknown option '%s'\n", a);
            return usage();
        }
    }
    if (!model || !ids_path) return usage();
    if (window < 2 || window > (1 << 24)) {
        fprintf(stderr, "snug perplexity: --window must be in 2..16777216\n");
        return 2;
    }
    int32_t n = 0;
    snug_token *ids = cli_read_ids("perplexity", ids_path, &n);
    if (!ids) return 1;
    int32_t n_win = n / (int32_t)window;
    if (n_win == 0) {
        fprintf(stderr, "snug perplexity: %d ids are fewer than one window of %ld\n", n, window);
        free(ids);
        return 1;
    }

    struct snug_err err = {0};
    struct snug_model *m = NULL;
    struct snug_ctx *ctx = NULL;
    float *logits = NULL;
    int ret = 1;
    struct snug_model_params mp = {.path = model, .n_threads = (int)threads};
    if (snug_model_load(&m, &mp, &err)) goto done;
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = (int32_t)window;
    cp.n_chunk = chunk ? (int32_t)chunk : 512;
    cli_kv_params(&kv, &cp);
    cli_backend_params(&bk, &cp);
    cp.n_threads = (int32_t)threads;
    if (snug_ctx_init(&ctx, m, &cp, &err)) goto done;
    int64_t V = snug_model_n_vocab(m);
    logits = malloc((size_t)window * (size_t)V * sizeof(float));
    if (!logits) {
        snug_err_set(&err, SNUG_ERR_NOMEM, "cannot allocate %ld x %lld logits", window,
                     (long long)V);
        goto done;
    }
    double sum = 0;
    int64_t count = 0;
    for (int32_t w = 0; w < n_win; w++) {
        const snug_token *win = ids + (int64_t)w * window;
        snug_ctx_reset(ctx);
        if (snug_ctx_eval(ctx, win, (int32_t)window, logits, SNUG_EVAL_LOGITS_ALL, &err)) goto done;
        double ws = 0;
        for (int32_t t = 0; t + 1 < window; t++) ws += nll(logits + (int64_t)t * V, V, win[t + 1]);
        sum += ws;
        count += window - 1;
        fprintf(stderr, "window %d/%d: ppl %.4f\n", w + 1, n_win, exp(ws / (double)(window - 1)));
    }
    printf("perplexity %.4f over %lld predictions (%d windows of %ld)\n", exp(sum / (double)count),
           (long long)count, n_win, window);
    ret = 0;
done:
    if (ret) cli_fail("perplexity", &err);
    free(logits);
    snug_ctx_free(ctx);
    snug_model_free(m);
    free(ids);
    return ret;
}
