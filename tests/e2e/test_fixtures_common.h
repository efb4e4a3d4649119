/* test_fixtures_common.h — helpers for the fixture tests (test_fixtures_*.c): read the
 * fixtures' .f32 and .json files, and compare logits with the per-position KL divergence
 * KL(reference ‖ snug) and top-1 agreement that docs/testing.md states the tolerances on.
 * Header-only (each test is one translation unit). */
#ifndef SNUG_TEST_FIXTURES_COMMON_H
#define SNUG_TEST_FIXTURES_COMMON_H

#include "test.h"

#include "core/core.h"
#include "snug.h"

#include <jansson.h>
#include <stdint.h>

/* Sanitizer builds run ~10x slower: they cover memory safety on a reduced matrix (each chunk
 * size once, thread counts alternating) and skip the longest runs, which the normal build
 * checks numerically. */
#if defined(__SANITIZE_ADDRESS__)
#define FX_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FX_SANITIZED 1
#endif
#endif
#ifndef FX_SANITIZED
#define FX_SANITIZED 0
#endif

static char *fx_path(const char *dir, const char *model, const char *file) {
    static char buf[8][4096];
    static int slot;
    char *p = buf[slot++ % 8];
    snprintf(p, 4096, "%s/%s/%s", dir, model, file);
    return p;
}

/* Whole little-endian float32 file; *n = element count. NULL (and a FAIL) if unreadable. */
static float *fx_read_f32(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "FAIL: cannot open %s\n", path);
        test_failed++;
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *d = malloc((size_t)sz);
    if (!d || fread(d, 1, (size_t)sz, f) != (size_t)sz) {
        fprintf(stderr, "FAIL: cannot read %s\n", path);
        test_failed++;
        free(d);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *n = (size_t)sz / sizeof(float);
    return d;
}

/* A JSON array of integers (token ids or positions). */
static int32_t *fx_read_ids(const char *path, int32_t *n) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root || !json_is_array(root)) {
        fprintf(stderr, "FAIL: %s: not a JSON array (%s)\n", path, root ? "" : je.text);
        test_failed++;
        if (root) json_decref(root);
        return NULL;
    }
    size_t k = json_array_size(root);
    int32_t *ids = malloc((k ? k : 1) * sizeof *ids);
    for (size_t i = 0; i < k; i++) ids[i] = (int32_t)json_integer_value(json_array_get(root, i));
    json_decref(root);
    *n = (int32_t)k;
    return ids;
}

static int fx_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct fx_kl {
    double median, p95, p99, max, top1; /* top1: fraction of positions with the same argmax */
};

static int64_t fx_argmax(const float *row, int64_t V) {
    int64_t b = 0;
    for (int64_t i = 1; i < V; i++)
        if (row[i] > row[b]) b = i;
    return b;
}

/* log-softmax of a row into out (double). */
static void fx_log_softmax(const float *row, int64_t V, double *out) {
    double mx = row[0], s = 0;
    for (int64_t i = 1; i < V; i++) mx = row[i] > mx ? row[i] : mx;
    for (int64_t i = 0; i < V; i++) s += exp((double)row[i] - mx);
    double ls = log(s) + mx;
    for (int64_t i = 0; i < V; i++) out[i] = (double)row[i] - ls;
}

/* Per-position KL(ref ‖ got) over T rows of V logits, summarised. */
static struct fx_kl fx_compare(const float *ref, const float *got, int64_t T, int64_t V) {
    double *lr = malloc((size_t)V * sizeof(double)), *lg = malloc((size_t)V * sizeof(double));
    double *kl = malloc((size_t)T * sizeof(double));
    int64_t same = 0;
    for (int64_t t = 0; t < T; t++) {
        fx_log_softmax(ref + t * V, V, lr);
        fx_log_softmax(got + t * V, V, lg);
        double k = 0;
        for (int64_t i = 0; i < V; i++) k += exp(lr[i]) * (lr[i] - lg[i]);
        kl[t] = k;
        same += fx_argmax(ref + t * V, V) == fx_argmax(got + t * V, V);
    }
    qsort(kl, (size_t)T, sizeof(double), fx_cmp_double);
    struct fx_kl r = {
        .median = T % 2 ? kl[T / 2] : 0.5 * (kl[T / 2 - 1] + kl[T / 2]),
        .p95 = kl[(int64_t)ceil(0.95 * (double)T) - 1],
        .p99 = kl[(int64_t)ceil(0.99 * (double)T) - 1],
        .max = kl[T - 1],
        .top1 = (double)same / (double)T,
    };
    free(lr);
    free(lg);
    free(kl);
    return r;
}

static void fx_print_kl(const char *what, struct fx_kl k) {
    printf("%-40s KL median %.3g p95 %.3g p99 %.3g max %.3g top-1 %.2f%%\n", what, k.median, k.p95,
           k.p99, k.max, 100.0 * k.top1);
}

/* The README's bounds: median ≤ 1e-5; p99 (dense) or p95 (MoE) ≤ 1e-4; top-1 ≥ 99% / 97%. */
static void fx_check_kl(const char *what, struct fx_kl k, bool moe) {
    fx_print_kl(what, k);
    CHECKF(k.median <= 1e-5, "%s: median KL %.3g > 1e-5", what, k.median);
    if (moe)
        CHECKF(k.p95 <= 1e-4, "%s: p95 KL %.3g > 1e-4", what, k.p95);
    else
        CHECKF(k.p99 <= 1e-4, "%s: p99 KL %.3g > 1e-4", what, k.p99);
    CHECKF(k.top1 >= (moe ? 0.97 : 0.99), "%s: top-1 %.4f", what, k.top1);
}

#endif
