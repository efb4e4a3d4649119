/* test_tools_vocab.c — struct snug_vocab: the HF tokenizer.json loader must reproduce exactly
 * what llama.cpp's converter put in the trained fixture's GGUF; GGUF -> vocab -> GGUF writes the
 * same vocabulary back; the built-in byte-level vocabulary round-trips through a GGUF file and
 * tokenizes; a vocab-built tokenizer matches vectors.json.
 */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "tools/vocab.h"

#include <unistd.h>

static bool vocab_equal(const struct snug_vocab *a, const struct snug_vocab *b) {
    bool ok = a->n_tokens == b->n_tokens && a->n_merges == b->n_merges && !strcmp(a->pre, b->pre) &&
              a->bos_id == b->bos_id && a->eos_id == b->eos_id && a->pad_id == b->pad_id;
    if (!ok) {
        fprintf(stderr,
                "header: %llu/%llu tokens %llu/%llu merges pre %s/%s ids %d %d %d / %d %d %d\n",
                (unsigned long long)a->n_tokens, (unsigned long long)b->n_tokens,
                (unsigned long long)a->n_merges, (unsigned long long)b->n_merges, a->pre, b->pre,
                a->bos_id, a->eos_id, a->pad_id, b->bos_id, b->eos_id, b->pad_id);
        return false;
    }
    for (uint64_t i = 0; i < a->n_tokens; i++)
        if (a->tokens[i].len != b->tokens[i].len ||
            memcmp(a->tokens[i].data, b->tokens[i].data, a->tokens[i].len) ||
            a->token_types[i] != b->token_types[i]) {
            fprintf(stderr, "token %llu differs: '%s' (%d) vs '%s' (%d)\n", (unsigned long long)i,
                    a->tokens[i].data, a->token_types[i], b->tokens[i].data, b->token_types[i]);
            return false;
        }
    for (uint64_t i = 0; i < a->n_merges; i++)
        if (a->merges[i].len != b->merges[i].len ||
            memcmp(a->merges[i].data, b->merges[i].data, a->merges[i].len)) {
            fprintf(stderr, "merge %llu differs\n", (unsigned long long)i);
            return false;
        }
    return true;
}

/* Write v into a vocabulary-only GGUF at path and read it back. */
static bool write_and_reload(const struct snug_vocab *v, const char *path, struct snug_vocab *back,
                             struct snug_tokenizer **tok) {
    struct snug_err err = {0};
    struct snug_gguf_writer *w = NULL;
    if (snug_gguf_writer_open(&w, path, &err)) return fprintf(stderr, "%s\n", err.msg), false;
    snug_gguf_writer_add_str(w, "general.architecture", "qwen35");
    if (snug_vocab_write_gguf(v, w, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        snug_gguf_writer_abort(w);
        return false;
    }
    if (snug_gguf_writer_close(w, &err)) return fprintf(stderr, "%s\n", err.msg), false;
    struct snug_gguf *g = NULL;
    if (snug_gguf_open(&g, path, &err)) return fprintf(stderr, "%s\n", err.msg), false;
    int rc = snug_vocab_from_gguf(back, g, &err);
    if (!rc && tok) rc = snug_tokenizer_load(tok, g, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    snug_gguf_close(g);
    return rc == SNUG_OK;
}

static void test_builtin(void) {
    struct snug_vocab v, back;
    struct snug_err err = {0};
    CHECK(snug_vocab_builtin(&v, &err) == SNUG_OK);
    CHECK(v.n_tokens == 265 && v.n_merges == 0 && v.eos_id == 258);
    char path[512];
    test_tmp_template(path, sizeof path, "snug_vocab_builtin");
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    struct snug_tokenizer *tok = NULL;
    CHECK(write_and_reload(&v, path, &back, &tok));
    CHECK(vocab_equal(&v, &back));
    if (tok) {
        /* no merges: one token per byte; byte b is id b; specials parsed */
        const char text[] = "hi \xc3\xa9<|im_end|><think>";
        snug_token ids[32];
        size_t n = 0;
        CHECK(snug_tokenizer_encode(tok, text, sizeof text - 1, true, ids, 32, &n, &err) == 0);
        snug_token want[] = {'h', 'i', ' ', 0xC3, 0xA9, 258, 259};
        CHECK(n == 7 && !memcmp(ids, want, sizeof want));
        CHECK(snug_tokenizer_im_end(tok) == 258 && snug_tokenizer_eos(tok) == 258);
        size_t l;
        const char *b = snug_tokenizer_token_bytes(tok, 0x20, &l);
        CHECK(l == 1 && b[0] == ' ');
        snug_tokenizer_free(tok);
    }
    /* a tokenizer straight from the struct */
    CHECK(snug_vocab_tokenizer(&v, &tok, &err) == SNUG_OK);
    CHECK(tok && snug_tokenizer_n_vocab(tok) == 265);
    snug_tokenizer_free(tok);
    snug_vocab_free(&back);
    snug_vocab_free(&v);
    snug_vocab_free(&v); /* no-op on a freed struct */
    unlink(path);
}

static void test_hf_vs_gguf(const char *fx) {
    char p1[4200], p2[4200];
    snprintf(p1, sizeof p1, "%s/tokenizer/tokenizer.json", fx);
    snprintf(p2, sizeof p2, "%s/trained/trained-f16.gguf", fx);
    struct snug_vocab hf, gg, back;
    struct snug_err err = {0};
    int rc = snug_vocab_from_hf_json(&hf, p1, &err);
    CHECKF(rc == SNUG_OK, "%s", err.msg);
    struct snug_gguf *g = NULL;
    CHECK(snug_gguf_open(&g, p2, &err) == SNUG_OK);
    CHECK(g && snug_vocab_from_gguf(&gg, g, &err) == SNUG_OK);
    snug_gguf_close(g);
    if (rc) return;
    CHECK(vocab_equal(&hf, &gg)); /* the converter's output, reproduced from tokenizer.json */

    /* a tokenizer from the HF vocabulary encodes like HF ("Hello world" from vectors.json) */
    struct snug_tokenizer *tok = NULL;
    CHECK(snug_vocab_tokenizer(&hf, &tok, &err) == SNUG_OK);
    if (tok) {
        snug_token ids[16], want[] = {42, 556, 337, 1276, 1388};
        size_t n;
        CHECK(snug_tokenizer_encode(tok, "Hello world", 11, true, ids, 16, &n, &err) == 0);
        CHECK(n == 5 && !memcmp(ids, want, sizeof want));
        snug_tokenizer_free(tok);
    }

    /* GGUF -> vocab -> GGUF: identical vocabulary */
    char path[512];
    test_tmp_template(path, sizeof path, "snug_vocab_rt");
    int fd = mkstemp(path);
    close(fd);
    CHECK(write_and_reload(&gg, path, &back, NULL));
    CHECK(vocab_equal(&gg, &back));
    unlink(path);
    snug_vocab_free(&back);
    snug_vocab_free(&hf);
    snug_vocab_free(&gg);

    /* errors name the problem */
    CHECK(snug_vocab_from_hf_json(&hf, "/nonexistent/tokenizer.json", &err) == SNUG_ERR_FORMAT);
    CHECK(strstr(err.msg, "/nonexistent/tokenizer.json") != NULL);
}

/* The qwen2 pre-tokenizer keeps combining marks out of words; qwen35 joins them. With the
 * full-size vocabulary (NFC off, decomposed input) the two must tokenise Thai differently and
 * both must decode back to the input. */
static void test_qwen2_pretok(const char *fx) {
    char p[4200];
    snprintf(p, sizeof p, "%s/tokenizer/ggml-vocab-qwen35.gguf", fx);
    struct snug_err err = {0};
    struct snug_gguf *g = NULL;
    struct snug_vocab v;
    CHECK(snug_gguf_open(&g, p, &err) == SNUG_OK);
    if (!g) return;
    CHECK(snug_vocab_from_gguf(&v, g, &err) == SNUG_OK);
    snug_gguf_close(g);
    struct snug_tokenizer *t35 = NULL, *t2 = NULL;
    CHECK(snug_vocab_tokenizer(&v, &t35, &err) == SNUG_OK);
    snprintf(v.pre, sizeof v.pre, "qwen2");
    CHECK(snug_vocab_tokenizer(&v, &t2, &err) == SNUG_OK);
    snprintf(v.pre, sizeof v.pre, "gpt4o");
    struct snug_tokenizer *bad = NULL;
    CHECK(snug_vocab_tokenizer(&v, &bad, &err) == SNUG_ERR_UNSUPPORTED && !bad);
    CHECK(strstr(err.msg, "gpt4o") != NULL);
    snug_vocab_free(&v);
    if (!t35 || !t2) return;
    CHECK(snug_tokenizer_pretok(t2) == SNUG_PRETOK_QWEN2);
    const char *text =
        "\xe0\xb9\x84\xe0\xb8\x97\xe0\xb8\xa2\x20\xe0\xb9\x80\xe0\xb8\x9b\xe0\xb9\x87\xe0\xb8\x99"
        "\xe0\xb8\xa1\xe0\xb8\x99\xe0\xb8\xb8\xe0\xb8\xa9\xe0\xb8\xa2\xe0\xb9\x8c"; /* Thai, with
                                                                                       vowel and
                                                                                       tone marks */
    size_t len = strlen(text), n35, n2, d35, d2;
    snug_token a[64], b[64];
    char da[128], db[128];
    CHECK(snug_tokenizer_encode(t35, text, len, false, a, 64, &n35, &err) == SNUG_OK);
    CHECK(snug_tokenizer_encode(t2, text, len, false, b, 64, &n2, &err) == SNUG_OK);
    CHECK(n35 != n2 || memcmp(a, b, n2 * sizeof *a));
    CHECK(snug_tokenizer_decode(t35, a, n35, da, sizeof da, &d35, &err) == SNUG_OK);
    CHECK(snug_tokenizer_decode(t2, b, n2, db, sizeof db, &d2, &err) == SNUG_OK);
    CHECK(d35 == len && d2 == len && !memcmp(da, text, len) && !memcmp(db, text, len));
    snug_tokenizer_free(t35);
    snug_tokenizer_free(t2);
}

int main(void) {
    test_builtin();
    const char *fx = test_fixtures_dir();
    if (fx) {
        test_hf_vs_gguf(fx);
        test_qwen2_pretok(fx);
    }
    return TEST_DONE();
}
