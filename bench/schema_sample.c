/* schema_sample.c — JSON schemas through the server's conversion path, and seeded documents
 * drawn from each grammar: the generator of bench/grammar_corpus.py (coverage on a schema
 * corpus) and of tests/py/test_schema_corpus.py (every document checked by a real validator).
 *
 * For each schema file: snug_json_schema_to_gbnf, then snug_grammar_parse (what the server does
 * at admission), then `--n` documents by a random walk over the grammar's matcher with a
 * byte-level vocabulary (one token per byte, plus an end token): at each step, with a seeded
 * generator, a uniformly random allowed byte or (one time in four, and always once `--max-bytes`
 * bytes are written) the first byte of the grammar's shortest completion; when the grammar is
 * complete the walk ends one time in three (always past the limit). One JSON object per line:
 *   {"file": F, "status": "compiled", "convert_ms": T, "gbnf_bytes": N, "docs": [HEX, ...],
 *    "stuck": K}       docs hex-encoded (the bytes as generated); stuck: walks that reached a
 *                      state with no allowed byte and no end (a dead branch: a converter bug);
 *                      then "stuck_at": the first such walk's bytes, hex-encoded
 *   {"file": F, "status": "refused", "code": C, "message": M, "convert_ms": T}
 * With --gbnf each file is GBNF text instead (a grammar another converter wrote): it is only
 * compiled and walked, so bench/grammar_corpus.py can check that converter's output the same way.
 * Usage: schema_sample [--n N] [--seed S] [--max-bytes B] [--gbnf] FILE...   (no FILE: names on
 * stdin)
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "core/core.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng;

static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* GPT-2's byte → printable character mapping (the form token texts take in a tokenizer). */
static char mapped[256][4];
static struct snug_gguf_str toks[257];
static int32_t types[257];

static struct snug_tokenizer *byte_tokenizer(void) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int cp =
            (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE) ? b : 256 + n++;
        if (cp < 0x80) {
            mapped[b][0] = (char)cp;
        } else {
            mapped[b][0] = (char)(0xC0 | (cp >> 6));
            mapped[b][1] = (char)(0x80 | (cp & 63));
        }
        toks[b] = (struct snug_gguf_str){strlen(mapped[b]), mapped[b]};
        types[b] = SNUG_TOKEN_NORMAL;
    }
    toks[256] = (struct snug_gguf_str){10, "<|im_end|>"};
    types[256] = SNUG_TOKEN_CONTROL;
    struct snug_tokenizer_desc d = {.n_tokens = 257,
                                    .tokens = toks,
                                    .token_types = types,
                                    .pre = "qwen2",
                                    .bos_id = -1,
                                    .eos_id = 256,
                                    .pad_id = -1,
                                    .name = "bytes"};
    struct snug_tokenizer *t = NULL;
    struct snug_err err = {0};
    if (snug_tokenizer_init(&t, &d, &err) != SNUG_OK) {
        fprintf(stderr, "schema_sample: %s\n", err.msg);
        exit(2);
    }
    return t;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void put_json_str(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c >= 0x7F)
            printf("\\u%04x", c); /* names and messages: bytes above 0x7E as Latin-1 */
        else
            putchar(c);
    }
    putchar('"');
}

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    struct snug_sbuf b = {0};
    char chunk[65536];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) snug_sbuf_append(&b, chunk, k);
    fclose(f);
    if (b.oom) {
        snug_free(b.data);
        return NULL;
    }
    *n = b.len;
    if (!b.data) b.data = snug_malloc(1), b.data[0] = 0;
    return b.data;
}

static const char *code_name(int rc) {
    switch (rc) {
    case SNUG_ERR_UNSUPPORTED:
        return "unsupported";
    case SNUG_ERR_INVALID:
        return "invalid";
    case SNUG_ERR_BUDGET:
        return "budget";
    case SNUG_ERR_NOMEM:
        return "nomem";
    case SNUG_ERR_FORMAT:
        return "format";
    default:
        return "other";
    }
}

/* One document; 1 when done, 0 when stuck (no byte and no end allowed). */
static int walk(struct snug_matcher *m, struct snug_sbuf *doc, int max_bytes) {
    static uint8_t shortest[1 << 16];
    snug_matcher_reset(m);
    doc->len = 0;
    for (;;) {
        const uint64_t *mask = snug_matcher_mask(m);
        int allowed[256], n = 0;
        for (int b = 0; b < 256; b++)
            if ((mask[b >> 6] >> (b & 63)) & 1) allowed[n++] = b;
        bool complete = snug_matcher_is_complete(m);
        bool past = (int)doc->len >= max_bytes;
        if (complete && (past || !n || next_rand() % 3 == 0)) return 1;
        if (!n) return 0;
        int pick;
        if (past || next_rand() % 4 == 0) {
            int k = snug_matcher_shortest_completion(m, shortest, (int)sizeof shortest);
            if (k == 0) return 1; /* complete: the shortest completion is the end */
            if (k < 0) return 0;  /* longer than the buffer */
            pick = shortest[0];
        } else {
            pick = allowed[next_rand() % (uint64_t)n];
        }
        char ch = (char)pick;
        struct snug_err err = {0};
        if (snug_matcher_accept(m, (snug_token)pick, &err) != SNUG_OK) return 0;
        snug_sbuf_append(doc, &ch, 1);
        if (doc->len > (size_t)max_bytes * 64) return 0; /* the completion never ends */
    }
}

int main(int argc, char **argv) {
    int n_docs = 5, max_bytes = 2048;
    bool gbnf_in = false;
    uint64_t seed = 1;
    int first_file = argc;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc)
            n_docs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--max-bytes") && i + 1 < argc)
            max_bytes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gbnf"))
            gbnf_in = true;
        else {
            first_file = i;
            break;
        }
    }
    struct snug_tokenizer *tok = byte_tokenizer();
    struct snug_vocab_trie *trie = NULL;
    struct snug_err err = {0};
    if (snug_vocab_trie_build(&trie, tok, &err) != SNUG_OK) {
        fprintf(stderr, "schema_sample: %s\n", err.msg);
        return 2;
    }
    snug_token end = 256;
    char line[4096];
    int argi = first_file;
    for (;;) {
        const char *path;
        if (first_file < argc) {
            if (argi >= argc) break;
            path = argv[argi++];
        } else {
            if (!fgets(line, sizeof line, stdin)) break;
            line[strcspn(line, "\r\n")] = 0;
            if (!line[0]) continue;
            path = line;
        }
        size_t len = 0;
        char *text = read_file(path, &len);
        printf("{\"file\": ");
        put_json_str(path, strlen(path));
        if (!text) {
            printf(", \"status\": \"unreadable\"}\n");
            fflush(stdout);
            continue;
        }
        char *gbnf = NULL;
        size_t glen = 0;
        err = (struct snug_err){0};
        double t0 = now_ms();
        int rc = SNUG_OK;
        if (gbnf_in)
            gbnf = text, glen = len, text = NULL;
        else
            rc = snug_json_schema_to_gbnf(text, len, &gbnf, &glen, &err);
        struct snug_grammar *g = NULL;
        if (rc == SNUG_OK) rc = snug_grammar_parse(&g, gbnf, glen, NULL, NULL, &err);
        double ms = now_ms() - t0;
        snug_free(text);
        if (rc != SNUG_OK) {
            printf(
                ", \"status\": \"refused\", \"code\": \"%s\", \"convert_ms\": %.3f, \"message\": ",
                code_name(rc), ms);
            put_json_str(err.msg, strlen(err.msg));
            printf("}\n");
            fflush(stdout);
            snug_free(gbnf);
            continue;
        }
        struct snug_matcher *m = NULL;
        if (snug_matcher_init(&m, g, trie, &end, 1, NULL, &err) != SNUG_OK) {
            printf(", \"status\": \"refused\", \"code\": \"matcher\", \"convert_ms\": %.3f, "
                   "\"message\": ",
                   ms);
            put_json_str(err.msg, strlen(err.msg));
            printf("}\n");
        } else {
            rng = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
            for (size_t i = 0; path[i]; i++) rng = (rng ^ (uint8_t)path[i]) * 0x100000001B3ull;
            if (!rng) rng = 1;
            printf(", \"status\": \"compiled\", \"convert_ms\": %.3f, \"gbnf_bytes\": %zu, "
                   "\"docs\": [",
                   ms, glen);
            int stuck = 0, n_out = 0;
            struct snug_sbuf stuck_at = {0};
            struct snug_sbuf doc = {0};
            for (int i = 0; i < n_docs; i++) {
                if (!walk(m, &doc, max_bytes)) {
                    if (!stuck++) snug_sbuf_append(&stuck_at, doc.data ? doc.data : "", doc.len);
                    continue;
                }
                printf("%s\"", n_out++ ? ", " : "");
                for (size_t k = 0; k < doc.len; k++) printf("%02x", (unsigned char)doc.data[k]);
                printf("\"");
            }
            snug_free(doc.data);
            const char *limit = snug_matcher_error(m);
            printf("], \"stuck\": %d", stuck);
            if (stuck) {
                printf(", \"stuck_at\": \"");
                for (size_t k = 0; k < stuck_at.len; k++)
                    printf("%02x", (unsigned char)stuck_at.data[k]);
                printf("\"");
            }
            snug_free(stuck_at.data);
            if (limit) {
                printf(", \"limit\": ");
                put_json_str(limit, strlen(limit));
            }
            printf("}\n");
            snug_matcher_free(m);
        }
        fflush(stdout);
        snug_grammar_free(g);
        snug_free(gbnf);
    }
    snug_vocab_trie_free(trie);
    snug_tokenizer_free(tok);
    return 0;
}
