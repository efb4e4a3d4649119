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

enum { O_MODEL = 1, O_TEXT, O_FILE, O_NO_SPECIAL, O_NO_NFC };
static const struct cli_opt OPTS[] = {
    {.id = O_MODEL,
     .names = "-m, --model",
     .kind = CLI_TEXT,
     .meta = "M.gguf",
     .help = "a model or a vocabulary-only GGUF"},
    {.id = O_TEXT, .names = "-p, --text", .kind = CLI_TEXT, .meta = "S", .help = "the text"},
    {.id = O_FILE,
     .names = "-f, --file",
     .kind = CLI_TEXT,
     .meta = "F",
     .help = "the text is F's contents"},
    {.id = O_NO_SPECIAL,
     .names = "--no-special",
     .kind = CLI_SWITCH,
     .help = "special tokens (<|im_start|>, ...) in the text are plain text"},
    {.id = O_NO_NFC,
     .names = "--no-nfc",
     .kind = CLI_SWITCH,
     .help = "no NFC normalisation first (llama.cpp's behaviour)"},
    {0},
};
const struct cli_command cli_cmd_tokenize = {
    .name = "tokenize",
    .run = cmd_tokenize,
    .usage = "-m M.gguf (--text S | --file F) [--no-special] [--no-nfc]",
    .summary = "token ids of a text as a JSON array",
    .about = "token ids as a JSON array (a vocabulary-only GGUF is enough)",
    .opts = OPTS,
};

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL;
    bool special = true, nfc = true;
    struct cli_args p;
    struct cli_val v;
    int r;
    cli_args_init(&p, &cli_cmd_tokenize, argc, argv);
    while ((r = cli_args_next(&p, &v)) > 0) {
        if (r == O_MODEL) model = v.s;
        if (r == O_TEXT) text = v.s;
        if (r == O_FILE) file = v.s;
        if (r == O_NO_SPECIAL) special = false;
        if (r == O_NO_NFC) nfc = false;
    }
    if (r != CLI_END) return CLI_EXIT(r);
    if (!model || (!text == !file))
        return cli_usage_error(&cli_cmd_tokenize, "give -m M.gguf and one of --text or --file");
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
