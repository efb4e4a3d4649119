/* cmd_perplexity.c — `snug perplexity -m M.gguf --ids IDS.json [--window 1024]`: split the ids
 * into independent windows of `window` tokens (a shorter tail window is dropped, the way the
 * reference fixtures' held-out perplexity is defined: docs/testing.md), run each from an empty
 * context, and print exp(mean NLL) over every prediction of every window (window − 1 per
 * window). Read next: cmd_logits.c (cli_read_ids). */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

snug_token *cli_read_ids(const char *cmd, const char *path, int32_t *n_out);

/* −log softmax(row)[target], in double. */
static double nll(const float *row, int64_t V, int32_t target) {
    double mx = row[0];
    for (int64_t i = 1; i < V; i++) mx = row[i] > mx ? row[i] : mx;
    double s = 0;
    for (int64_t i = 0; i < V; i++) s += exp((double)row[i] - mx);
    return log(s) + mx - (double)row[target];
}

enum { O_MODEL = 1, O_IDS, O_THREADS, O_CHUNK, O_WINDOW };
static const struct cli_opt OPTS[] = {
    {.id = O_MODEL,
     .names = "-m, --model",
     .kind = CLI_TEXT,
     .meta = "M.gguf",
     .help = "the model"},
    {.id = O_IDS,
     .names = "--ids",
     .kind = CLI_TEXT,
     .meta = "IDS.json",
     .help = "a JSON array of token ids"},
    {.id = O_WINDOW,
     .names = "--window",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 2,
     .hi = 1 << 24,
     .def = "1024",
     .help = "tokens per independent window (a shorter tail is dropped)"},
    {.id = O_THREADS,
     .names = "-t, --threads",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 4096,
     .def = "all CPUs",
     .help = "threads"},
    {.id = O_CHUNK,
     .names = "--chunk",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 1 << 30,
     .def = "512",
     .help = "prompt tokens per forward"},
    CLI_OPTS_KV,
    CLI_OPTS_BACKEND,
    {0},
};
const struct cli_command cli_cmd_perplexity = {
    .name = "perplexity",
    .run = cmd_perplexity,
    .usage = "-m M.gguf --ids IDS.json [--window N]",
    .summary = "perplexity of token ids over independent windows",
    .about = "perplexity over independent windows of token ids: exp(mean NLL) of every "
             "prediction of every window, each from an empty context",
    .opts = OPTS,
};

int cmd_perplexity(int argc, char **argv) {
    const char *model = NULL, *ids_path = NULL;
    struct cli_kv kv = CLI_KV_DEFAULT;
    struct cli_backend bk = {0};
    long threads = 0, chunk = 0, window = 1024;
    struct cli_args args;
    struct cli_val v;
    int r;
    cli_args_init(&args, &cli_cmd_perplexity, argc, argv);
    while ((r = cli_args_next(&args, &v)) > 0) {
        if (!cli_kv_opt(&args, r, &v, &kv)) return 2;
        cli_backend_opt(r, &v, &bk);
        switch (r) {
        case O_MODEL:
            model = v.s;
            break;
        case O_IDS:
            ids_path = v.s;
            break;
        case O_THREADS:
            threads = (long)v.i;
            break;
        case O_CHUNK:
            chunk = (long)v.i;
            break;
        case O_WINDOW:
            window = (long)v.i;
            break;
        }
    }
    if (r != CLI_END) return CLI_EXIT(r);
    if (!model || !ids_path)
        return cli_usage_error(&cli_cmd_perplexity, "-m M.gguf and --ids IDS.json are required");
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
