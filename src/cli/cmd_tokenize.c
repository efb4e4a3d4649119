/* cmd_tokenize.c — `snug tokenize -m M.gguf (--text S | --file F) [--no-special] [--no-nfc]`:
 * encode text with the model's tokenizer and print the ids as one JSON array on stdout.
 * Special tokens (<|im_start|>, ...) in the text are parsed unless --no-special; --no-nfc skips
 * NFC normalisation (llama.cpp's behaviour). A vocabulary-only GGUF is enough.
 * Read next: src/tokenizer/tokenizer.h.
 */
#include "cli.h"

#include "core/core.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void) {
    fprintf(stderr, "usage: snug tokenize -m M.gguf (--text S | --file F) [--no-special] "
                    "[--no-nfc]\n");
    return 2;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL;
    bool special = true, nfc = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--text") || !strcmp(a, "-p")) {
            if (!(text = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--file") || !strcmp(a, "-f")) {
            if (!(file = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--no-special")) {
            special = false;
        } else if (!strcmp(a, "--no-nfc")) {
            nfc = false;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "snug tokenize: unknown option '%s'\n", a);
            return usage();
        }
    }
    if (!model || (!text == !file)) return usage();

    struct snug_err err = {0};
    struct snug_gguf *g = NULL;
    struct snug_tokenizer *tok = NULL;
    char *buf = NULL;
    snug_token *ids = NULL;
    int ret = 1;
    if (snug_gguf_open(&g, model, &err) != SNUG_OK) goto fail;
    if (snug_tokenizer_load(&tok, g, &err) != SNUG_OK) goto fail;
    snug_tokenizer_set_nfc(tok, nfc);
    size_t len;
    if (file) {
        if (!(buf = cli_read_file(file, "--file", (size_t)1 << 30, &len, &err))) goto fail;
        text = buf;
    } else {
        len = strlen(text);
    }
    /* one id per byte is enough unless NFC expands the text; then retry with the exact count */
    size_t cap = len + 16, n = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(ids);
        ids = malloc(cap * sizeof *ids);
        if (!ids) {
            snug_err_set(&err, SNUG_ERR_NOMEM, "out of memory for %zu ids", cap);
            goto fail;
        }
        int rc = snug_tokenizer_encode(tok, text, len, special, ids, cap, &n, &err);
        if (rc == SNUG_OK) break;
        if (rc != SNUG_ERR_BUDGET || attempt == 1) goto fail;
        cap = n;
    }
    putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    printf("]\n");
    ret = fflush(stdout) == 0 ? 0 : 1;
    goto done;
fail:
    ret = cli_fail("tokenize", &err);
done:
    free(ids);
    snug_free(buf);
    snug_tokenizer_free(tok);
    snug_gguf_close(g);
    return ret;
}
