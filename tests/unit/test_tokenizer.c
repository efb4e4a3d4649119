/* test_tokenizer.c — the tokenizer against its references:
 *  (a) fixtures/tokenizer/vectors.json (ids from HF tokenizers) with the trained fixture's GGUF;
 *  (b) ggml-vocab-qwen35.gguf with its .inp/.out strings, run as llama.cpp's test-tokenizer-0
 *      does (no special-token parsing, strings split on "\n__ggml_vocab_test__\n");
 *  (d) decode(encode(s)) == NFC(s) and the streaming detokenizer never emits partial UTF-8;
 *  plus invalid UTF-8 input, buffer-too-small reporting and unsupported pre-tokenizers.
 */
#include "test.h"
#include "tokenizer/tokenizer.h"

#include <stdint.h>
#include <time.h>
#include <utf8proc.h>

/* ---- tiny JSON reader for vectors.json: [{"text": "...", "ids": [..]}, ...] ------------------ */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

static void skip_ws(const char **p) {
    while (**p == ' ' || **p == '\n' || **p == '\r' || **p == '\t') (*p)++;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
               o[2] = (char)(0x80 | (cp & 0x3F)), 3;
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parse a JSON string at *p (pointing at the quote) into a malloc'd buffer. */
static char *parse_str(const char **p, size_t *len) {
    const char *s = *p + 1;
    char *out = malloc(strlen(s) + 1), *o = out;
    while (*s && *s != '"') {
        if (*s != '\\') {
            *o++ = *s++;
            continue;
        }
        s++;
        char c = *s++;
        switch (c) {
        case 'n':
            *o++ = '\n';
            break;
        case 't':
            *o++ = '\t';
            break;
        case 'r':
            *o++ = '\r';
            break;
        case 'b':
            *o++ = '\b';
            break;
        case 'f':
            *o++ = '\f';
            break;
        case 'u': {
            uint32_t cp = (uint32_t)strtoul((char[5]){s[0], s[1], s[2], s[3], 0}, NULL, 16);
            s += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && s[0] == '\\' && s[1] == 'u') {
                uint32_t lo = (uint32_t)strtoul((char[5]){s[2], s[3], s[4], s[5], 0}, NULL, 16);
                s += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            o += put_utf8(o, cp);
            break;
        }
        default:
            *o++ = c;
        }
    }
    *p = s + 1;
    *len = (size_t)(o - out);
    return out;
}

struct vec {
    char *text;
    size_t len;
    int32_t *ids;
    size_t n_ids;
};

static int parse_vectors(const char *json, struct vec *v, int max) {
    const char *p = json;
    int n = 0;
    while ((p = strstr(p, "\"text\"")) && n < max) {
        p = strchr(p + 6, ':') + 1;
        skip_ws(&p);
        v[n].text = parse_str(&p, &v[n].len);
        p = strstr(p, "\"ids\"");
        p = strchr(p, '[') + 1;
        size_t cap = 1024, k = 0;
        v[n].ids = malloc(cap * sizeof(int32_t));
        for (;;) {
            skip_ws(&p);
            if (*p == ']') break;
            if (k == cap) v[n].ids = realloc(v[n].ids, (cap *= 2) * sizeof(int32_t));
            v[n].ids[k++] = (int32_t)strtol(p, (char **)&p, 10);
            skip_ws(&p);
            if (*p == ',') p++;
        }
        v[n].n_ids = k;
        n++;
    }
    return n;
}

/* ---- helpers ----------------------------------------------------------------------------- */
static struct snug_tokenizer *load_tok(const char *path) {
    struct snug_err err = {0};
    struct snug_gguf *g = NULL;
    if (snug_gguf_open(&g, path, &err) != SNUG_OK) {
        fprintf(stderr, "open %s: %s\n", path, err.msg);
        return NULL;
    }
    struct snug_tokenizer *t = NULL;
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    if (snug_tokenizer_load(&t, g, &err) != SNUG_OK) fprintf(stderr, "load: %s\n", err.msg);
    double t1 = (double)clock() / CLOCKS_PER_SEC;
    if (t)
        fprintf(stderr, "loaded %s: %d tokens in %.1f ms\n", path, snug_tokenizer_n_vocab(t),
                (t1 - t0) * 1e3);
    snug_gguf_close(g);
    return t;
}

static int32_t *encode(const struct snug_tokenizer *t, const char *s, size_t len, bool special,
                       size_t *n) {
    struct snug_err err = {0};
    size_t need = 0;
    int rc = snug_tokenizer_encode(t, s, len, special, NULL, 0, &need, &err);
    if (rc != SNUG_OK && rc != SNUG_ERR_BUDGET) {
        fprintf(stderr, "encode: %s\n", err.msg);
        *n = 0;
        return NULL;
    }
    int32_t *ids = malloc((need + 1) * sizeof *ids);
    rc = snug_tokenizer_encode(t, s, len, special, ids, need, n, &err);
    CHECKF(rc == SNUG_OK && *n == need, "second encode: rc %d, %zu vs %zu", rc, *n, need);
    return ids;
}

static bool valid_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t l =
            utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (l <= 0) return false;
        i += (size_t)l;
    }
    return true;
}

/* Stream ids through the detokenizer; every chunk must be valid UTF-8 on its own. Returns the
 * concatenation (malloc'd). */
static char *stream_decode(const struct snug_tokenizer *t, const int32_t *ids, size_t n,
                           size_t *len, int *bad_chunks) {
    struct snug_detok d;
    struct snug_err err = {0};
    snug_detok_init(&d, t, 0, &err);
    size_t cap = 64, o = 0;
    char *out = malloc(cap);
    *bad_chunks = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *c;
        size_t cl;
        if (i < n)
            snug_detok_push(&d, ids[i], &c, &cl);
        else
            snug_detok_flush(&d, &c, &cl);
        if (!valid_utf8(c, cl)) (*bad_chunks)++;
        while (o + cl > cap) out = realloc(out, cap *= 2);
        memcpy(out + o, c, cl);
        o += cl;
    }
    snug_detok_free(&d);
    *len = o;
    return out;
}

/* ---- (a) + (d): HF vectors --------------------------------------------------------------------
 */
static void test_vectors(const char *fx) {
    char path[4096];
    snprintf(path, sizeof path, "%s/trained/trained-f16.gguf", fx);
    struct snug_tokenizer *t = load_tok(path);
    CHECK(t != NULL);
    if (!t) return;
    CHECK(snug_tokenizer_n_vocab(t) == 2048);
    CHECK(snug_tokenizer_token_id(t, "<|im_end|>") == 2);
    CHECK(snug_tokenizer_im_end(t) == 2);
    CHECK(snug_tokenizer_eos(t) == 2);
    { /* the end-of-generation set: EOS (= <|im_end|> here) and <|endoftext|>, once each */
        snug_token eog[SNUG_TOKENIZER_EOG_MAX];
        int32_t n_eog = snug_tokenizer_eog(t, eog);
        CHECK(n_eog == 2 && eog[0] == 2 && eog[1] == 0);
    }
    CHECK(snug_tokenizer_token_id(t, "<think>") == 2042);
    CHECK(snug_tokenizer_token_id(t, "no such token here") == -1);
    snprintf(path, sizeof path, "%s/tokenizer/vectors.json", fx);
    size_t jlen;
    char *json = read_file(path, &jlen);
    CHECK(json != NULL);
    if (!json) return;
    static struct vec v[256];
    int nv = parse_vectors(json, v, 256);
    CHECKF(nv == 37, "%d vectors", nv);
    int ok = 0, rt_ok = 0, stream_ok = 0;
    for (int i = 0; i < nv; i++) {
        size_t n;
        int32_t *ids = encode(t, v[i].text, v[i].len, true, &n);
        bool same = ids && n == v[i].n_ids && !memcmp(ids, v[i].ids, n * sizeof *ids);
        if (!same) {
            size_t k = 0;
            while (ids && k < n && k < v[i].n_ids && ids[k] == v[i].ids[k]) k++;
            fprintf(stderr, "vector %d (%.40s...): %zu ids vs %zu expected, first diff at %zu\n", i,
                    v[i].text, n, v[i].n_ids, k);
        }
        ok += same;
        /* decode(encode(s)) == NFC(s) */
        utf8proc_uint8_t *nfc = NULL;
        utf8proc_ssize_t nl =
            utf8proc_map((const utf8proc_uint8_t *)v[i].text, (utf8proc_ssize_t)v[i].len, &nfc,
                         UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        size_t nfc_len = nl < 0 ? 0 : (size_t)nl;
        size_t cap = v[i].len * 4 + 16, dl = 0;
        char *dec = malloc(cap);
        struct snug_err err = {0};
        int rc = snug_tokenizer_decode(t, ids, n, dec, cap, &dl, &err);
        bool rt = rc == SNUG_OK && dl == nfc_len && !memcmp(dec, nfc, dl);
        if (!rt) fprintf(stderr, "vector %d: round trip differs\n", i);
        rt_ok += rt;
        int bad;
        size_t sl;
        char *st = stream_decode(t, ids, n, &sl, &bad);
        bool sok = bad == 0 && sl == nfc_len && !memcmp(st, nfc, sl);
        if (!sok) fprintf(stderr, "vector %d: streaming decode differs (%d bad chunks)\n", i, bad);
        stream_ok += sok;
        free(st);
        free(dec);
        free(nfc);
        free(ids);
    }
    CHECKF(ok == nv, "%d/%d vectors identical", ok, nv);
    CHECKF(rt_ok == nv, "%d/%d round trips", rt_ok, nv);
    CHECKF(stream_ok == nv, "%d/%d streaming round trips", stream_ok, nv);
    fprintf(stderr, "vectors.json: %d/%d identical, %d round trips, %d streamed\n", ok, nv, rt_ok,
            stream_ok);

    /* streaming: a character split across single-byte tokens comes out only when complete */
    struct snug_detok d;
    struct snug_err err = {0};
    CHECK(snug_detok_init(&d, t, 0, &err) == SNUG_OK);
    const uint8_t euro[3] = {0xE2, 0x82, 0xAC};
    const char *c;
    size_t cl;
    for (int k = 0; k < 3; k++) {
        size_t n;
        int32_t *one = encode(t, (const char *)euro + k, 1, false, &n);
        CHECK(n == 1);
        snug_detok_push(&d, one[0], &c, &cl);
        CHECKF(cl == (k == 2 ? 3u : 0u), "byte %d: %zu bytes out", k, cl);
        free(one);
    }
    CHECK(cl == 3 && !memcmp(c, euro, 3));
    CHECK(snug_detok_push(&d, 2, &c, &cl) == SNUG_OK && cl == 10 && !memcmp(c, "<|im_end|>", 10));
    snug_detok_free(&d);
    CHECK(snug_detok_init(&d, t, SNUG_DETOK_SKIP_CONTROL, &err) == SNUG_OK);
    CHECK(snug_detok_push(&d, 2, &c, &cl) == SNUG_OK && cl == 0);
    CHECK(snug_detok_push(&d, 2042, &c, &cl) == SNUG_OK && cl == 7 && !memcmp(c, "<think>", 7));
    CHECK(snug_detok_push(&d, -1, &c, &cl) == SNUG_ERR_INVALID && cl == 0);
    CHECK(snug_detok_push(&d, 2048, &c, &cl) == SNUG_ERR_INVALID && cl == 0);
    snug_detok_free(&d);

    /* buffer too small: BUDGET and the needed count */
    size_t need = 0;
    int32_t small[2];
    int rc = snug_tokenizer_encode(t, "hello world again", 17, false, small, 2, &need, &err);
    CHECK(rc == SNUG_ERR_BUDGET && need > 2);

    /* parse_special off: CONTROL tokens are text, USER_DEFINED ones still match */
    size_t n1, n2;
    int32_t *a = encode(t, "<|im_end|><think>", 17, false, &n1);
    CHECK(n1 > 2 && a[n1 - 1] == 2042);
    for (size_t k = 0; k < n1; k++) CHECK(a[k] != 2);
    int32_t *b = encode(t, "<|im_end|><think>", 17, true, &n2);
    CHECK(n2 == 2 && b[0] == 2 && b[1] == 2042);
    free(a);
    free(b);

    /* invalid UTF-8: never an error, bytes pass through, the detokenizer repairs */
    const char bad[] = "ab\xff cd\xc3 \xe2\x82 x\xf0\x9f\x98\x80";
    size_t nb;
    int32_t *ib = encode(t, bad, sizeof bad - 1, false, &nb);
    char dec[64];
    size_t dl;
    CHECK(snug_tokenizer_decode(t, ib, nb, dec, sizeof dec, &dl, &err) == SNUG_OK);
    CHECK(dl == sizeof bad - 1 && !memcmp(dec, bad, dl));
    int badc;
    size_t sl;
    char *st = stream_decode(t, ib, nb, &sl, &badc);
    const char want[] = "ab\xef\xbf\xbd cd\xef\xbf\xbd \xef\xbf\xbd x\xf0\x9f\x98\x80";
    CHECKF(badc == 0 && sl == sizeof want - 1 && !memcmp(st, want, sl), "repaired: %.*s", (int)sl,
           st);
    free(st);
    free(ib);
    /* a truncated character at the very end becomes U+FFFD at flush */
    int32_t *it = encode(t, "\xe2\x82", 2, false, &nb);
    st = stream_decode(t, it, nb, &sl, &badc);
    CHECK(sl == 3 && !memcmp(st, "\xef\xbf\xbd", 3));
    free(st);
    free(it);

    for (int i = 0; i < nv; i++) free(v[i].text), free(v[i].ids);
    free(json);
    snug_tokenizer_free(t);
}

/* ---- (b) llama.cpp's vocabulary test strings --------------------------------------------------
 */
static void test_ggml_vocab(const char *fx) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/ggml-vocab-qwen35.gguf", fx);
    struct snug_tokenizer *t = load_tok(path);
    CHECK(t != NULL);
    if (!t) return;
    CHECK(snug_tokenizer_n_vocab(t) == 151936);
    CHECK(snug_tokenizer_im_end(t) == 151645);
    { /* EOS is <|endoftext|> in this file: the set holds it once, then <|im_end|> */
        snug_token eog[SNUG_TOKENIZER_EOG_MAX];
        int32_t n_eog = snug_tokenizer_eog(t, eog);
        CHECK(n_eog == 2 && eog[0] == 151643 && eog[1] == 151645);
    }
    CHECK(snug_tokenizer_pretok(t) == SNUG_PRETOK_QWEN35);
    /* llama.cpp never applies NFC, and its .out files expect decomposed input to stay so */
    snug_tokenizer_set_nfc(t, false);
    char pin[4200], pout[4200];
    snprintf(pin, sizeof pin, "%s.inp", path);
    snprintf(pout, sizeof pout, "%s.out", path);
    size_t ilen, olen;
    char *inp = read_file(pin, &ilen), *out = read_file(pout, &olen);
    CHECK(inp && out);
    if (!inp || !out) return;
    const char *sep = "\n__ggml_vocab_test__\n";
    size_t sl = strlen(sep);
    const char *p = inp, *end = inp + ilen, *o = out;
    int n_tests = 0, n_ok = 0;
    while (p < end) {
        const char *nx = strstr(p, sep);
        size_t len = nx ? (size_t)(nx - p) : (size_t)(end - p);
        const char *ol = strchr(o, '\n');
        if (!ol) ol = o + strlen(o);
        int32_t want[1024];
        size_t nw = 0;
        const char *q = o;
        while (q < ol) {
            char *e2;
            long x = strtol(q, &e2, 10);
            if (e2 == q) break;
            want[nw++] = (int32_t)x;
            q = e2;
        }
        size_t n;
        int32_t *ids = encode(t, p, len, false, &n);
        bool same = n == nw && !memcmp(ids, want, n * sizeof *ids);
        if (!same) fprintf(stderr, "ggml vocab test %d ('%.*s'): differs\n", n_tests, (int)len, p);
        n_ok += same;
        n_tests++;
        free(ids);
        o = *ol ? ol + 1 : ol;
        if (!nx) break;
        p = nx + sl;
    }
    CHECKF(n_tests > 30 && n_ok == n_tests, "%d/%d", n_ok, n_tests);
    fprintf(stderr, "ggml-vocab-qwen35: %d/%d strings identical\n", n_ok, n_tests);
    free(inp);
    free(out);
    snug_tokenizer_free(t);
}

/* ---- descriptors: errors ------------------------------------------------------------------ */
static void test_desc_errors(void) {
    struct snug_gguf_str toks[256];
    char bytes[256][4];
    for (int b = 0; b < 256; b++) { /* single-byte tokens in mapped form, via the printable set */
        bytes[b][0] = (char)b;
        toks[b] = (struct snug_gguf_str){1, bytes[b]};
    }
    struct snug_tokenizer_desc d = {.n_tokens = 256,
                                    .tokens = toks,
                                    .pre = "llama3",
                                    .bos_id = -1,
                                    .eos_id = -1,
                                    .pad_id = -1,
                                    .name = "desc"};
    struct snug_tokenizer *t = NULL;
    struct snug_err err = {0};
    CHECK(snug_tokenizer_init(&t, &d, &err) == SNUG_ERR_UNSUPPORTED && t == NULL);
    CHECK(strstr(err.msg, "llama3") != NULL);
    d.pre = "qwen2";
    /* raw control bytes are not mapped text, and byte 0x20 (space) is missing as a mapped token */
    CHECK(snug_tokenizer_init(&t, &d, &err) == SNUG_ERR_FORMAT && t == NULL);
    CHECK(strstr(err.msg, "byte") != NULL);
}

int main(void) {
    test_desc_errors();
    const char *fx = test_fixtures_dir();
    if (fx) {
        test_vectors(fx);
        test_ggml_vocab(fx);
    }
    return TEST_DONE();
}
