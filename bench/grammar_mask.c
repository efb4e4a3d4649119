/* grammar_mask.c — benchmark of grammar token masks on a real vocabulary (not a test: it
 * prints numbers; docs/perf/grammar.md records them with the command line).
 *
 * For every JSON schema of a folder (default tests/data/schemas) it compiles the schema's
 * grammar and runs `--docs` simulated requests, each with a fresh matcher (as the server makes
 * one per request, so caches start cold): at each token the mask is computed (timed) and
 * applied to a logits row (timed separately), then a token is picked — with probability 1/3 the
 * first token of the grammar's shortest completion, else a uniformly random allowed token (a
 * seeded generator), until the grammar is complete or 256 tokens; then the end token. Prints
 * the mean / p50 / p99 / max microseconds per token of thread CPU time (one core), the first-token
 * (cold) cost and the compile cost per request. Usage: bench_grammar_mask VOCAB.gguf [SCHEMA_DIR]
 * [--docs N] [--seed S]
 */
#define _DEFAULT_SOURCE /* opendir */
#include "core/core.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Thread CPU time: what one core spends, without the time the thread waits for a core (the
 * numbers stay meaningful on a shared, loaded machine). */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p) {
    if (!n) return 0;
    size_t k = (size_t)(p * (double)(n - 1) + 0.5);
    return v[k];
}

int main(int argc, char **argv) {
    const char *vocab = NULL, *dir = SNUG_SOURCE_DIR "/tests/data/schemas";
    int docs = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--docs") && i + 1 < argc)
            docs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            rng = strtoull(argv[++i], NULL, 10) | 1;
        else if (!vocab)
            vocab = argv[i];
        else
            dir = argv[i];
    }
    if (!vocab) {
        fprintf(stderr, "usage: %s VOCAB.gguf [SCHEMA_DIR] [--docs N] [--seed S]\n", argv[0]);
        return 2;
    }
    struct snug_err err = {0};
    struct snug_gguf *g = NULL;
    struct snug_tokenizer *tok = NULL;
    if (snug_gguf_open(&g, vocab, &err) || snug_tokenizer_load(&tok, g, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    snug_gguf_close(g);
    double t0 = snug_time_s();
    struct snug_vocab_trie *trie = NULL;
    if (snug_vocab_trie_build(&trie, tok, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int32_t V = snug_tokenizer_n_vocab(tok);
    printf("vocabulary: %d tokens, trie %d nodes, built in %.1f ms\n", V,
           snug_vocab_trie_n_nodes(trie), (snug_time_s() - t0) * 1e3);
    snug_token end = snug_tokenizer_im_end(tok);
    if (end < 0) end = snug_tokenizer_eos(tok);
    size_t cap = 1 << 20, n_t = 0, n_first = 0, n_compile = 0;
    double *mask_us = malloc(cap * sizeof *mask_us), *apply_us = malloc(cap * sizeof *apply_us);
    double *first_us = malloc(65536 * sizeof *first_us),
           *compile_us = malloc(65536 * sizeof *compile_us);
    float *logits = malloc((size_t)V * sizeof *logits);
    snug_token *allowed = malloc((size_t)V * sizeof *allowed);
    DIR *d = opendir(dir);
    if (!d || !mask_us || !apply_us || !first_us || !compile_us || !logits || !allowed) {
        fprintf(stderr, "cannot open %s\n", dir);
        return 1;
    }
    struct dirent *de;
    int n_schemas = 0, n_docs = 0, n_incomplete = 0;
    int64_t walks = 0, hits = 0;
    while ((de = readdir(d))) {
        size_t L = strlen(de->d_name);
        if (L < 6 || strcmp(de->d_name + L - 5, ".json")) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        static char text[1 << 16];
        size_t len = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        n_schemas++;
        for (int k = 0; k < docs; k++) {
            double c0 = cpu_now();
            char *gbnf = NULL;
            struct snug_grammar *gr = NULL;
            struct snug_matcher *m = NULL;
            if (snug_json_schema_to_gbnf(text, len, &gbnf, NULL, &err) ||
                snug_grammar_parse(&gr, gbnf, strlen(gbnf), NULL, NULL, &err) ||
                snug_matcher_init(&m, gr, trie, &end, 1, NULL, &err)) {
                fprintf(stderr, "%s: %s\n", de->d_name, err.msg);
                return 1;
            }
            compile_us[n_compile++] = (cpu_now() - c0) * 1e6;
            n_docs++;
            for (int step = 0; step < 300; step++) {
                double a = cpu_now();
                const uint64_t *mk = snug_matcher_mask(m);
                double b = cpu_now();
                for (int32_t i = 0; i < V; i++) logits[i] = 0.0f;
                double b2 = cpu_now();
                snug_matcher_apply(m, logits, V);
                double c = cpu_now();
                if (n_t < cap) {
                    mask_us[n_t] = (b - a) * 1e6;
                    apply_us[n_t++] = (c - b2) * 1e6;
                }
                if (step == 0) first_us[n_first++] = (b - a) * 1e6;
                if (snug_matcher_is_complete(m) || step >= 256) {
                    if (!snug_matcher_is_complete(m)) n_incomplete++;
                    break;
                }
                snug_token pick = -1;
                uint8_t done[256];
                if (next_rand() % 3 == 0) {
                    int n = snug_matcher_shortest_completion(m, done, 256);
                    if (n > 0) pick = snug_vocab_trie_longest_prefix(trie, done, n);
                }
                if (pick < 0) {
                    int32_t na = 0;
                    for (int32_t w = 0; w < (V + 63) / 64; w++)
                        for (uint64_t bits = mk[w]; bits; bits &= bits - 1)
                            allowed[na++] = w * 64 + __builtin_ctzll(bits);
                    if (!na) break;
                    pick = allowed[next_rand() % (uint64_t)na];
                }
                if (snug_matcher_accept(m, pick, &err)) {
                    fprintf(stderr, "%s: accept: %s\n", de->d_name, err.msg);
                    return 1;
                }
            }
            int64_t w, h;
            snug_matcher_stats(m, &w, &h, NULL);
            walks += w;
            hits += h;
            snug_matcher_free(m);
            snug_grammar_free(gr);
            snug_free(gbnf);
        }
    }
    closedir(d);
    double sum = 0, sum_a = 0;
    for (size_t i = 0; i < n_t; i++) sum += mask_us[i], sum_a += apply_us[i];
    qsort(mask_us, n_t, sizeof *mask_us, cmp_d);
    qsort(apply_us, n_t, sizeof *apply_us, cmp_d);
    qsort(first_us, n_first, sizeof *first_us, cmp_d);
    qsort(compile_us, n_compile, sizeof *compile_us, cmp_d);
    printf("schemas %d, requests %d (%d cut at 256 tokens), tokens %zu, mask walks %lld, "
           "cache hits %lld\n",
           n_schemas, n_docs, n_incomplete, n_t, (long long)walks, (long long)hits);
    printf("mask   per token: mean %8.1f us  p50 %8.1f  p99 %8.1f  max %8.1f\n", sum / (double)n_t,
           pct(mask_us, n_t, 0.5), pct(mask_us, n_t, 0.99), mask_us[n_t - 1]);
    printf("apply  per token: mean %8.1f us  p50 %8.1f  p99 %8.1f  max %8.1f\n",
           sum_a / (double)n_t, pct(apply_us, n_t, 0.5), pct(apply_us, n_t, 0.99),
           apply_us[n_t - 1]);
    printf("first token (cold): mean-ish p50 %8.1f us  p99 %8.1f\n", pct(first_us, n_first, 0.5),
           pct(first_us, n_first, 0.99));
    printf("compile + matcher init per request: p50 %8.1f us  p99 %8.1f\n",
           pct(compile_us, n_compile, 0.5), pct(compile_us, n_compile, 0.99));
    snug_vocab_trie_free(trie);
    snug_tokenizer_free(tok);
    return 0;
}
