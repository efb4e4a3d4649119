/* cmd_logits.c — `snug logits -m M.gguf --ids IDS.json -o OUT.f32 [--mtp] [--greedy N]`: one
 * forward over a JSON array of token ids, writing the [T][V] float32 logits (little-endian,
 * row-major) — the format of the fixtures' logits.f32.
 * --mmproj/--image: the images' rows replace the ids' runs of <|image_pad|> (cli_images.c).
 * --greedy N: then N greedy tokens, one decode step each, printed as a JSON array on stdout.
 * --split N: the ids in evals of N tokens (an image may span two: each eval gets the images it
 * overlaps, positioned relative to it — how a server feeds a prompt in pieces).
 * --mtp writes the [T-1][V] step-1 MTP logits instead (the fixtures' mtp_logits.f32).
 * --tp N: the forward split over N ranks, emulated on the CPU (src/tp/tp.h; the GPUs' version
 * is docs/tensor-parallel.md §4's work): the same logits and greedy tokens, to compare.
 * Also home of cli_read_ids (shared with cmd_perplexity.c). */
#include "cli.h"

#include "core/core.h"
#include "tp/tp.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Read a JSON array of integer token ids into a malloc'd array (caller frees). Prints the
 * problem and returns NULL on failure. */
snug_token *cli_read_ids(const char *cmd, const char *path, int32_t *n_out) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        fprintf(stderr, "snug %s: %s:%d: %s\n", cmd, path, je.line, je.text);
        return NULL;
    }
    if (!json_is_array(root) || json_array_size(root) == 0 || json_array_size(root) > INT32_MAX) {
        fprintf(stderr, "snug %s: %s: expected a non-empty JSON array of token ids\n", cmd, path);
        json_decref(root);
        return NULL;
    }
    size_t n = json_array_size(root);
    snug_token *ids = malloc(n * sizeof *ids);
    if (!ids) {
        json_decref(root);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(root, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            fprintf(stderr, "snug %s: %s: element %zu is not a token id\n", cmd, path, i);
            free(ids);
            json_decref(root);
            return NULL;
        }
        ids[i] = (snug_token)json_integer_value(v);
    }
    json_decref(root);
    *n_out = (int32_t)n;
    return ids;
}

/* --tp N: the prompt's logits and the greedy tokens through N ranks on the CPU. */
static int logits_tp(struct snug_model *m, long tp_n, const snug_token *ids, int32_t n,
                     int32_t n_ctx, int32_t chunk, int32_t kv_type, long greedy, float *logits,
                     struct snug_err *err) {
    struct snug_tp_cpu *tp = NULL;
    int rc = snug_tp_cpu_open(&tp, m, (int32_t)tp_n, n_ctx, chunk, kv_type, err);
    if (!rc) rc = snug_tp_cpu_eval(tp, ids, n, n, logits, err);
    size_t V = (size_t)snug_model_n_vocab(m);
    const float *row = logits + (size_t)(n - 1) * V;
    float *last = rc ? NULL : malloc(V * sizeof(float));
    if (!rc && !last) rc = snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
    if (!rc && greedy > 0) printf("[");
    for (long g = 0; !rc && g < greedy; g++) {
        snug_token best = 0;
        for (size_t v = 1; v < V; v++)
            if (row[v] > row[best]) best = (snug_token)v;
        printf("%s%d", g ? ", " : "", best);
        if (g + 1 == greedy) {
            printf("]\n");
            break;
        }
        rc = snug_tp_cpu_eval(tp, &best, 1, 1, last, err);
        row = last;
    }
    free(last);
    snug_tp_cpu_free(tp);
    return rc;
}

enum { O_MODEL = 1, O_IDS, O_OUT, O_THREADS, O_CHUNK, O_MTP, O_SPLIT, O_GREEDY, O_TP, O_CTX };
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
     .help = "a JSON array of token ids: the prompt"},
    {.id = O_OUT,
     .names = "-o",
     .kind = CLI_TEXT,
     .meta = "OUT.f32",
     .help = "the [T][V] float32 logits (little-endian, row-major)"},
    {.id = O_MTP,
     .names = "--mtp",
     .kind = CLI_SWITCH,
     .help = "write the [T-1][V] step-1 logits of the MTP block instead (row p predicts id p+2)"},
    {.id = O_GREEDY,
     .names = "--greedy",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 1 << 20,
     .def = "0",
     .help = "then N greedy tokens, one decode step each, printed as a JSON array on stdout"},
    {.id = O_SPLIT,
     .names = "--split",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = INT32_MAX,
     .def = "all ids in one eval",
     .help = "the ids in evals of N tokens (how a server feeds a prompt in pieces)"},
    {.id = O_TP,
     .names = "--tp, --tensor-parallel",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 16,
     .help = "the forward split over N ranks, emulated on the CPU (docs/tensor-parallel.md)"},
    {.id = O_CTX,
     .names = "--ctx",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 1 << 30,
     .def = "the ids + --greedy",
     .help = "the context's size in tokens"},
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
    CLI_OPTS_IMAGES,
    {0},
};
const struct cli_command cli_cmd_logits = {
    .name = "logits",
    .run = cmd_logits,
    .usage = "-m M.gguf --ids IDS.json -o OUT.f32 [--mtp] [--greedy N]",
    .summary = "the float32 logits of one forward pass",
    .about = "`[T][V]` float32 logits of one forward pass over token ids (or the MTP block's "
             "step-1 logits), the format of the reference fixtures' files; with `--image` the "
             "images' rows replace the ids' `<|image_pad|>` runs",
    .opts = OPTS,
};

int cmd_logits(int argc, char **argv) {
    const char *model = NULL, *ids_path = NULL, *out_path = NULL;
    struct cli_kv kv = CLI_KV_DEFAULT;
    struct cli_backend bk = {0};
    long threads = 0, chunk = 0, n_ctx = 0, greedy = 0, split = 0, tp_n = 0;
    int mtp = 0;
    struct cli_images ci = CLI_IMAGES_DEFAULT;
    struct cli_args args;
    struct cli_val v;
    int r;
    cli_args_init(&args, &cli_cmd_logits, argc, argv);
    while ((r = cli_args_next(&args, &v)) > 0) {
        if (!cli_kv_opt(&args, r, &v, &kv) || !cli_images_opt(&args, r, &v, &ci)) return 2;
        cli_backend_opt(r, &v, &bk);
        switch (r) {
        case O_MODEL:
            model = v.s;
            break;
        case O_IDS:
            ids_path = v.s;
            break;
        case O_OUT:
            out_path = v.s;
            break;
        case O_THREADS:
            threads = (long)v.i;
            break;
        case O_CHUNK:
            chunk = (long)v.i;
            break;
        case O_MTP:
            mtp = 1;
            break;
        case O_SPLIT:
            split = (long)v.i;
            break;
        case O_GREEDY:
            greedy = (long)v.i;
            break;
        case O_TP:
            tp_n = (long)v.i;
            break;
        case O_CTX:
            n_ctx = (long)v.i;
            break;
        }
    }
    if (r != CLI_END) return CLI_EXIT(r);
    if (!model || !ids_path || !out_path)
        return cli_usage_error(&cli_cmd_logits, "-m M.gguf, --ids IDS.json and -o OUT.f32 are "
                                                "required");
    int32_t n = 0;
    snug_token *ids = cli_read_ids("logits", ids_path, &n);
    if (!ids) return 1;

    struct snug_err err = {0};
    struct snug_model *m = NULL;
    struct snug_ctx *ctx = NULL;
    float *logits = NULL;
    int ret = 1;
    struct snug_model_params mp = {.path = model, .n_threads = (int)threads};
    if (snug_model_load(&m, &mp, &err)) goto done;
    if (ci.n) {
        if (mtp) {
            snug_err_set(&err, SNUG_ERR_UNSUPPORTED, "--mtp with --image is not supported");
            goto done;
        }
        if (cli_images_encode(&ci, m, bk.backend, (int)threads, &err)) goto done;
        snug_token *placed = cli_images_place(&ci, m, ids, n, 0, &n, &err);
        if (!placed) goto done;
        free(ids);
        ids = placed;
    }
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = n_ctx ? (int32_t)n_ctx : n + (int32_t)greedy;
    cp.n_chunk = chunk ? (int32_t)chunk : 512;
    cli_kv_params(&kv, &cp);
    cli_backend_params(&bk, &cp);
    cp.n_threads = (int32_t)threads;
    cp.n_draft = mtp; /* the MTP state (cache, hidden rows) comes with speculative decoding */
    if (mtp && n < 2) {
        snug_err_set(&err, SNUG_ERR_INVALID, "--mtp needs at least 2 token ids, got %d", n);
        goto done;
    }
    if (tp_n && (mtp || ci.n || split || bk.backend != SNUG_BACKEND_CPU)) {
        snug_err_set(&err, SNUG_ERR_UNSUPPORTED,
                     "--tp runs the CPU emulation of tensor parallelism: not with --mtp, "
                     "--image, --split or --backend cuda yet (docs/tensor-parallel.md)");
        goto done;
    }
    if (!tp_n && snug_ctx_init(&ctx, m, &cp, &err)) goto done;
    size_t V = (size_t)snug_model_n_vocab(m);
    logits = malloc((size_t)n * V * sizeof(float));
    if (!logits) {
        snug_err_set(&err, SNUG_ERR_NOMEM, "cannot allocate %d x %zu logits", n, V);
        goto done;
    }
    if (tp_n) { /* the prompt's logits, and the greedy tokens printed */
        if (logits_tp(m, tp_n, ids, n, cp.n_ctx, cp.n_chunk, cli_kv_code(&kv), greedy, logits,
                      &err))
            goto done;
    } else if (mtp) { /* trunk logits are not kept; the MTP rows land in the same buffer */
        if (snug_ctx_eval_mtp(ctx, ids, n, NULL, logits, &err)) goto done;
        n -= 1;
    } else {
        int32_t step = split ? (int32_t)split : n;
        for (int32_t off = 0; off < n; off += step) {
            int32_t len = SNUG_MIN(step, n - off), k_n = 0;
            struct snug_image_rows part[CLI_MAX_IMAGES];
            for (int k = 0; k < ci.n; k++) { /* the images this eval overlaps, relative to it */
                struct snug_image_rows r = ci.rows[k];
                r.first -= off;
                if (r.first < len && r.first + r.rows * r.cols > 0) part[k_n++] = r;
            }
            if (snug_ctx_eval_images(ctx, ids + off, len, part, k_n, logits + (size_t)off * V,
                                     SNUG_EVAL_LOGITS_ALL, &err))
                goto done;
        }
    }
    cli_backend_report(&bk, "after the prompt");
    FILE *f = fopen(out_path, "wb");
    if (!f || fwrite(logits, sizeof(float), (size_t)n * V, f) != (size_t)n * V) {
        if (f) fclose(f);
        snug_err_set(&err, SNUG_ERR_IO, "cannot write %s", out_path);
        goto done;
    }
    if (fclose(f)) {
        snug_err_set(&err, SNUG_ERR_IO, "cannot write %s", out_path);
        goto done;
    }
    fprintf(stderr, "snug logits: wrote [%d][%zu] float32 to %s\n", n, V, out_path);
    if (greedy > 0 &&
        !tp_n) { /* argmax, one decode step per token (the row after the prompt's last) */
        const float *row = logits + (size_t)(n - 1) * V;
        printf("[");
        for (long g = 0; g < greedy; g++) {
            snug_token best = 0;
            for (size_t v = 1; v < V; v++)
                if (row[v] > row[best]) best = (snug_token)v;
            printf("%s%d", g ? ", " : "", best);
            if (g + 1 == greedy) break;
            if (snug_ctx_eval(ctx, &best, 1, logits, SNUG_EVAL_LOGITS_LAST, &err)) goto done;
            row = logits;
        }
        printf("]\n");
    }
    ret = 0;
done:
    if (ret) cli_fail("logits", &err);
    free(logits);
    snug_ctx_free(ctx);
    snug_model_free(m);
    cli_images_free(&ci);
    free(ids);
    return ret;
}
