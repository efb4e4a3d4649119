/* cmd_imatrix.c — `snug imatrix -m M.gguf -f TEXT [-o imatrix.gguf] [--chunk 512] [--chunks N]`:
 * compute an importance matrix over a calibration text and
 * write it in llama.cpp's GGUF imatrix form (src/imatrix/imatrix.h), for `snug quantize
 * --imatrix` or llama.cpp's llama-quantize.
 *
 * The procedure is llama-imatrix's (tools/imatrix/imatrix.cpp in llama.cpp, its default
 * options): the text with one trailing newline dropped, tokenized without NFC and without
 * special-token parsing (a BOS first if the vocabulary asks for one), cut into
 * floor(n / chunk) chunks of `chunk` tokens (the tail is dropped), each evaluated as a fresh
 * sequence (its first token replaced by BOS when the vocabulary adds one), while the collector
 * (src/imatrix/imatrix_collect.c) observes every weight product. No logits are computed: the
 * LM head is not part of the matrix. Read next: src/imatrix/imatrix_collect.c. */
#include "cli.h"

#include "core/core.h"
#include "gguf/gguf.h"
#include "imatrix/imatrix.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The text's ids as llama-imatrix tokenizes them (see the file comment). */
static snug_token *tokenize_text(const char *model, const char *text, size_t len, size_t *n_out,
                                 snug_token *bos_out, struct snug_err *err) {
    struct snug_gguf *g = NULL;
    struct snug_tokenizer *tok = NULL;
    snug_token *ids = NULL;
    *bos_out = -1;
    if (snug_gguf_open(&g, model, err) != SNUG_OK) return NULL;
    bool add_bos = false;
    if (snug_gguf_get_bool_opt(g, "tokenizer.ggml.add_bos_token", &add_bos, err) != SNUG_OK ||
        snug_tokenizer_load(&tok, g, err) != SNUG_OK)
        goto done;
    snug_tokenizer_set_nfc(tok, false);
    if (add_bos) {
        *bos_out = snug_tokenizer_bos(tok);
        if (*bos_out < 0) {
            snug_err_set(err, SNUG_ERR_FORMAT, "%s asks for a BOS token but names none", model);
            goto done;
        }
    }
    size_t cap = len + 16, n = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(ids);
        ids = malloc((cap + 1) * sizeof *ids);
        if (!ids) {
            snug_err_set(err, SNUG_ERR_NOMEM, "out of memory for %zu ids", cap);
            goto done;
        }
        int rc = snug_tokenizer_encode(tok, text, len, false, ids + 1, cap, &n, err);
        if (rc == SNUG_OK) break;
        if (rc != SNUG_ERR_BUDGET || attempt == 1) {
            free(ids);
            ids = NULL;
            goto done;
        }
        cap = n;
    }
    if (*bos_out >= 0) {
        ids[0] = *bos_out;
        n++;
    } else {
        memmove(ids, ids + 1, n * sizeof *ids);
    }
    *n_out = n;
done:
    snug_tokenizer_free(tok);
    snug_gguf_close(g);
    return ids;
}

enum { O_MODEL = 1, O_FILE, O_OUT, O_THREADS, O_CHUNK, O_CHUNKS };
static const struct cli_opt OPTS[] = {
    {.id = O_MODEL,
     .names = "-m, --model",
     .kind = CLI_TEXT,
     .meta = "M.gguf",
     .help = "the model"},
    {.id = O_FILE,
     .names = "-f, --file",
     .kind = CLI_TEXT,
     .meta = "TEXT",
     .help = "the calibration text"},
    {.id = O_OUT,
     .names = "-o, --output",
     .kind = CLI_TEXT,
     .meta = "FILE",
     .def = "imatrix.gguf",
     .help = "the importance matrix, in llama.cpp's GGUF imatrix format"},
    {.id = O_CHUNK,
     .names = "-c, --chunk",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 16,
     .hi = 1 << 20,
     .def = "512",
     .help = "tokens per chunk, each a fresh sequence (llama.cpp does not count products of "
             "fewer than 16 rows)"},
    {.id = O_CHUNKS,
     .names = "--chunks",
     .kind = CLI_INT,
     .meta = "N",
     .lo = -1,
     .hi = 1LL << 40,
     .def = "-1, all of the text",
     .help = "at most N chunks (-1 = all)"},
    {.id = O_THREADS,
     .names = "-t, --threads",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 4096,
     .def = "all CPUs",
     .help = "threads"},
    CLI_OPTS_BACKEND,
    {0},
};
const struct cli_command cli_cmd_imatrix = {
    .name = "imatrix",
    .run = cmd_imatrix,
    .usage = "-m M.gguf -f TEXT [-o FILE] [--chunk 512] [--chunks N]",
    .summary = "importance matrix of a calibration text",
    .about = "an importance matrix of a calibration text, llama-imatrix's procedure and GGUF file "
             "(for `snug quantize --imatrix` or llama.cpp's `llama-quantize`; "
             "docs/quantization.md)",
    .opts = OPTS,
};

int cmd_imatrix(int argc, char **argv) {
    const char *model = NULL, *text_path = NULL, *out = "imatrix.gguf";
    struct cli_backend bk = {0};
    long threads = 0, chunk = 512, max_chunks = -1;
    struct cli_args args;
    struct cli_val v;
    int r;
    cli_args_init(&args, &cli_cmd_imatrix, argc, argv);
    while ((r = cli_args_next(&args, &v)) > 0) {
        cli_backend_opt(r, &v, &bk);
        switch (r) {
        case O_MODEL:
            model = v.s;
            break;
        case O_FILE:
            text_path = v.s;
            break;
        case O_OUT:
            out = v.s;
            break;
        case O_THREADS:
            threads = (long)v.i;
            break;
        case O_CHUNK:
            chunk = (long)v.i;
            break;
        case O_CHUNKS:
            max_chunks = (long)v.i;
            break;
        }
    }
    if (r != CLI_END) return CLI_EXIT(r);
    if (!model || !text_path)
        return cli_usage_error(&cli_cmd_imatrix, "-m M.gguf and -f TEXT are required");
    if (max_chunks == 0) return cli_usage_error(&cli_cmd_imatrix, "--chunks wants N >= 1, or -1");

    struct snug_err err = {0};
    struct snug_model *m = NULL;
    struct snug_ctx *ctx = NULL;
    struct snug_imatrix_collector *col = NULL;
    char *text = NULL;
    snug_token *ids = NULL;
    int ret = 1;
    size_t len = 0, n = 0;
    snug_token bos = -1;
    if (!(text = cli_read_file(text_path, "-f", (size_t)1 << 31, &len, &err))) goto done;
    if (len > 0 && text[len - 1] == '\n') len--; /* as llama.cpp's -f */
    if (!(ids = tokenize_text(model, text, len, &n, &bos, &err))) goto done;
    int64_t n_chunks = (int64_t)n / chunk;
    if (max_chunks > 0 && n_chunks > max_chunks) n_chunks = max_chunks;
    if (n_chunks == 0) {
        snug_err_set(&err, SNUG_ERR_INVALID,
                     "%s tokenizes to %zu tokens, fewer than one chunk of %ld (give a longer "
                     "text or a smaller --chunk)",
                     text_path, n, chunk);
        goto done;
    }

    struct snug_model_params mp = {.path = model, .n_threads = (int)threads};
    if (snug_model_load(&m, &mp, &err)) goto done;
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = (int32_t)chunk;
    cp.n_chunk = (int32_t)chunk;
    cli_backend_params(&bk, &cp);
    cp.n_threads = (int32_t)threads;
    if (snug_ctx_init(&ctx, m, &cp, &err)) goto done;
    if (snug_imatrix_collector_new(&col, m, &err)) goto done;
    if (snug_ctx_set_mm_observer(ctx, snug_imatrix_collector_observer(col), &err)) goto done;
    fprintf(stderr, "imatrix: %zu tokens, %lld chunks of %ld\n", n, (long long)n_chunks, chunk);
    double t0 = snug_time_s();
    for (int64_t c = 0; c < n_chunks; c++) {
        snug_token *seq = ids + c * chunk;
        snug_token first = seq[0];
        if (bos >= 0) seq[0] = bos;
        snug_ctx_reset(ctx);
        int rc = snug_ctx_eval(ctx, seq, (int32_t)chunk, NULL, SNUG_EVAL_LOGITS_LAST, &err);
        seq[0] = first;
        if (rc) goto done;
        if (c == 0 || c + 1 == n_chunks || (c + 1) % 10 == 0)
            fprintf(stderr, "imatrix: chunk %lld/%lld (%.1f s)\n", (long long)(c + 1),
                    (long long)n_chunks, snug_time_s() - t0);
    }
    if (snug_imatrix_collector_write(col, out, text_path, (uint32_t)chunk, &err)) goto done;
    printf("imatrix: %lld entries over %lld chunks of %ld tokens written to %s\n",
           (long long)snug_imatrix_collector_n_entries(col), (long long)n_chunks, chunk, out);
    ret = 0;
done:
    if (ret) cli_fail("imatrix", &err);
    if (ctx) snug_ctx_set_mm_observer(ctx, NULL, &err);
    snug_imatrix_collector_free(col);
    snug_ctx_free(ctx);
    snug_model_free(m);
    free(ids);
    free(text);
    return ret;
}
