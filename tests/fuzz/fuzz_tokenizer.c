/* fuzz_tokenizer.c — libFuzzer target for the tokenizer: arbitrary bytes are encoded with the
 * trained fixture's vocabulary (2,048 tokens, merges, added tokens) with and without special-
 * token parsing, and the results are checked against properties that must always hold:
 *  - encode succeeds, every id is in the vocabulary, no token is empty, and the
 *    count-only call agrees;
 *  - without '<' in the input (so no added token can match), decode(encode(s)) equals s with
 *    each valid UTF-8 stretch NFC-normalised and invalid bytes kept as they are;
 *  - for valid UTF-8 already in NFC, decode(encode(s)) == s in both modes;
 *  - the streaming detokenizer's every chunk is valid UTF-8, and the whole equals the raw
 *    decode whenever that is valid UTF-8.
 * Vocabulary: $SNUG_FUZZ_VOCAB, else ../shared/fixtures/trained/trained-f16.gguf next to the
 * checkout. Build: CC=clang cmake -B build-tok-fuzz -DSNUG_FUZZ=ON && cmake --build
 * build-tok-fuzz --target fuzz_tokenizer; run: ./build-tok-fuzz/fuzz_tokenizer -max_len=4096.
 */
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static struct snug_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char path[4096];
    const char *env = getenv("SNUG_FUZZ_VOCAB");
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
    } else { /* this file is <src>/tests/fuzz/fuzz_tokenizer.c */
        snprintf(path, sizeof path, "%s", __FILE__);
        for (int k = 0; k < 3; k++) {
            char *s = strrchr(path, '/');
            if (s) *s = 0;
        }
        strncat(path, "/../shared/fixtures/trained/trained-f16.gguf",
                sizeof path - strlen(path) - 1);
    }
    struct snug_err err = {0};
    struct snug_gguf *g = NULL;
    if (snug_gguf_open(&g, path, &err) || snug_tokenizer_load(&tok, g, &err)) {
        fprintf(stderr, "fuzz_tokenizer: %s (set SNUG_FUZZ_VOCAB)\n", err.msg);
        abort();
    }
    snug_gguf_close(g);
    return 0;
}

static bool valid_utf8(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t l = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (l <= 0) return false;
        i += (size_t)l;
    }
    return true;
}

/* NFC of n valid UTF-8 bytes appended to out at *o. */
static void append_nfc(const uint8_t *s, size_t n, uint8_t *out, size_t *o) {
    if (!n) return;
    utf8proc_uint8_t *r = NULL;
    utf8proc_ssize_t l =
        utf8proc_map(s, (utf8proc_ssize_t)n, &r, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (l < 0) abort();
    memcpy(out + *o, r, (size_t)l);
    *o += (size_t)l;
    free(r);
}

/* The expected decode: valid stretches NFC-normalised, invalid bytes unchanged. */
static size_t expected(const uint8_t *s, size_t n, uint8_t *out) {
    size_t o = 0, i = 0, start = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t l = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (l > 0) {
            i += (size_t)l;
            continue;
        }
        append_nfc(s + start, i - start, out, &o);
        out[o++] = s[i++];
        start = i;
    }
    append_nfc(s + start, n - start, out, &o);
    return o;
}

static void check_mode(const uint8_t *data, size_t size, bool special, bool is_nfc) {
    struct snug_err err;
    size_t cap = 3 * size + 1, n = 0, n0 = 0; /* NFC expands text at most 3x */
    snug_token *ids = malloc(cap * sizeof *ids);
    if (snug_tokenizer_encode(tok, (const char *)data, size, special, ids, cap, &n, &err)) abort();
    int rc = snug_tokenizer_encode(tok, (const char *)data, size, special, NULL, 0, &n0, &err);
    if (n0 != n || (n && rc != SNUG_ERR_BUDGET)) abort();
    int32_t nv = snug_tokenizer_n_vocab(tok);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= nv) abort();
    /* raw decode (NFC grows UTF-8 at most 3x, UAX #15; generous room here) */
    size_t dcap = 18 * size + 16, dl = 0;
    uint8_t *dec = malloc(dcap);
    if (snug_tokenizer_decode(tok, ids, n, (char *)dec, dcap, &dl, &err)) abort();
    if (n > dl) abort(); /* every token holds at least one byte */
    if (is_nfc && (dl != size || memcmp(dec, data, size))) abort();
    if (!memchr(data, '<', size)) {
        uint8_t *want = malloc(dcap);
        size_t wl = expected(data, size, want);
        if (wl != dl || memcmp(want, dec, dl)) abort();
        free(want);
    }
    /* streaming */
    struct snug_detok d;
    if (snug_detok_init(&d, tok, 0, &err)) abort();
    uint8_t *st = malloc(3 * dl + 16);
    size_t sl = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *c;
        size_t cl;
        if (i < n) {
            if (snug_detok_push(&d, ids[i], &c, &cl)) abort();
        } else {
            snug_detok_flush(&d, &c, &cl);
        }
        if (!valid_utf8((const uint8_t *)c, cl)) abort();
        memcpy(st + sl, c, cl);
        sl += cl;
    }
    if (valid_utf8(dec, dl) && (sl != dl || memcmp(st, dec, dl))) abort();
    snug_detok_free(&d);
    free(st);
    free(dec);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bool is_nfc = false;
    if (valid_utf8(data, size)) {
        utf8proc_uint8_t *r = NULL;
        utf8proc_ssize_t l =
            utf8proc_map(data, (utf8proc_ssize_t)size, &r, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        is_nfc = l == (utf8proc_ssize_t)size && !memcmp(r, data, size);
        free(r);
    }
    check_mode(data, size, false, is_nfc);
    check_mode(data, size, true, is_nfc);
    return 0;
}
