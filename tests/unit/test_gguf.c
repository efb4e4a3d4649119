/* test_gguf.c — the GGUF reader and writer against references: the fixture GGUFs (facts checked
 * with the Python `gguf` package, an independent reader), writer→reader round trips of every
 * metadata type, a 3-part split, the malformed corpus in tests/data/gguf-bad/ (each file must
 * fail with its expected message), and in-memory truncations of a fixture at many offsets.
 * Read next: src/gguf/gguf.h, tests/data/make_bad_gguf.py. */
#define _POSIX_C_SOURCE 200809L
#include "gguf/gguf.h"

#include "core/core.h"
#include "quant/quant.h"
#include "test.h"

#include <stdint.h>
#include <unistd.h>

/* Read a whole file into a snug_malloc'd buffer. */
static uint8_t *slurp(const char *path, uint64_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = snug_malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        snug_free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (uint64_t)n;
    return buf;
}

static bool str_eq(struct snug_gguf_str s, const char *want) {
    return s.len == strlen(want) && !memcmp(s.data, want, s.len);
}

/* ---- fixtures ----------------------------------------------------------------------------- */

/* Expected facts (block_count includes the MTP block) from the Python gguf reader (gguf.GGUFReader)
 * on the fixture files. */
struct fixture_fact {
    const char *file, *arch;
    int64_t n_tensors, n_kv, n_tokens, n_merges;
    uint32_t block_count;
    uint64_t out_offset; /* absolute file offset of output.weight's data (0: no such tensor) */
};

static void test_fixtures(void) {
    const char *dir = test_fixtures_dir();
    if (!dir) return;
    static const struct fixture_fact facts[] = {
        {"trained/trained-f16.gguf", "qwen35", 71, 34, 2048, 1783, 5, 63968},
        {"moe/moe-f16.gguf", "qwen35moe", 76, 35, 2048, 1783, 4, 64672},
        {"tokenizer/ggml-vocab-qwen35.gguf", "qwen2", 0, 20, 151936, 151387, 0, 0},
    };
    for (size_t f = 0; f < sizeof facts / sizeof facts[0]; f++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, facts[f].file);
        struct snug_err err = {0};
        struct snug_gguf *g = NULL;
        int rc = snug_gguf_open(&g, path, &err);
        CHECKF(rc == SNUG_OK, "%s: %s", path, err.msg);
        if (rc != SNUG_OK) continue;
        CHECK(snug_gguf_n_tensors(g) == facts[f].n_tensors);
        CHECK(snug_gguf_n_kv(g) == facts[f].n_kv);
        CHECK(snug_gguf_alignment(g) == 32);
        struct snug_gguf_str s;
        CHECK(snug_gguf_get_str(g, "general.architecture", &s, &err) == SNUG_OK);
        CHECK(str_eq(s, facts[f].arch));
        enum snug_gguf_type et;
        uint64_t n;
        const void *data;
        CHECK(snug_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data, &err) == SNUG_OK);
        CHECK(et == SNUG_GGUF_STRING && (int64_t)n == facts[f].n_tokens);
        CHECK(snug_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, &data, &err) == SNUG_OK);
        CHECK((int64_t)n == facts[f].n_merges);
        CHECK(snug_gguf_arr_str(g, "tokenizer.ggml.tokens", (uint64_t)facts[f].n_tokens, &s) !=
              SNUG_OK);
        if (facts[f].n_tensors) {
            CHECK(snug_gguf_arr_str(g, "tokenizer.ggml.tokens", 1, &s) == SNUG_OK);
            CHECK(str_eq(s, "<|im_start|>"));
            /* output.weight: f16 [256, 2048], data at a known absolute offset. */
            const struct snug_gguf_tensor *t = snug_gguf_find_tensor(g, "output.weight");
            CHECK(t != NULL);
            if (t) {
                CHECK(t->type == SNUG_DTYPE_F16 && t->n_dims == 2 && t->ne[0] == 256 &&
                      t->ne[1] == 2048 && t->n_bytes == 256 * 2048 * 2);
                uint64_t size;
                uint8_t *buf = slurp(path, &size);
                CHECK(buf && memcmp(buf + facts[f].out_offset, t->data, 64) == 0);
                snug_free(buf);
            }
            uint32_t u;
            char key[128];
            snprintf(key, sizeof key, "%s.block_count", facts[f].arch);
            CHECK(snug_gguf_get_u32(g, key, &u, &err) == SNUG_OK && u == facts[f].block_count);
            snprintf(key, sizeof key, "%s.embedding_length", facts[f].arch);
            CHECK(snug_gguf_get_u32(g, key, &u, &err) == SNUG_OK && u == 256);
            /* Wrong type: a string asked as u32 names the key and both types. */
            CHECK(snug_gguf_get_u32(g, "general.architecture", &u, &err) == SNUG_ERR_FORMAT);
            CHECKF(strstr(err.msg, "general.architecture") && strstr(err.msg, "str") &&
                       strstr(err.msg, "u32"),
                   "%s", err.msg);
            CHECK(snug_gguf_get_u32(g, "no.such.key", &u, &err) == SNUG_ERR_FORMAT);
            CHECK(strstr(err.msg, "no.such.key") != NULL);
            u = 77;
            CHECK(snug_gguf_get_u32_opt(g, "no.such.key", &u, &err) == SNUG_OK && u == 77);
            /* Every tensor is findable by its name and lies inside the file. */
            int64_t found = 0;
            for (int64_t i = 0; i < snug_gguf_n_tensors(g); i++)
                found += snug_gguf_find_tensor(g, snug_gguf_tensor(g, i)->name) ==
                         snug_gguf_tensor(g, i);
            CHECK(found == facts[f].n_tensors);
        }
        snug_gguf_close(g);
    }
}

/* ---- writer → reader round trip ----------------------------------------------------------- */

static void test_round_trip(void) {
    const char *path = "test_gguf_rt.gguf";
    struct snug_err err = {0};
    struct snug_gguf_writer *w = NULL;
    CHECK(snug_gguf_writer_open(&w, path, &err) == SNUG_OK);
    if (!w) return;
    uint8_t u8 = 250;
    int8_t i8 = -100;
    uint16_t u16 = 65000;
    int16_t i16 = -30000;
    int64_t i64 = -((int64_t)1 << 40);
    double f64 = 3.25e-300;
    int rc = 0;
    rc |= snug_gguf_writer_add_scalar(w, "t.u8", SNUG_GGUF_UINT8, &u8);
    rc |= snug_gguf_writer_add_scalar(w, "t.i8", SNUG_GGUF_INT8, &i8);
    rc |= snug_gguf_writer_add_scalar(w, "t.u16", SNUG_GGUF_UINT16, &u16);
    rc |= snug_gguf_writer_add_scalar(w, "t.i16", SNUG_GGUF_INT16, &i16);
    rc |= snug_gguf_writer_add_u32(w, "t.u32", 4000000000u);
    rc |= snug_gguf_writer_add_i32(w, "t.i32", -2000000000);
    rc |= snug_gguf_writer_add_f32(w, "t.f32", 1.5f);
    rc |= snug_gguf_writer_add_bool(w, "t.bool", true);
    rc |= snug_gguf_writer_add_str(w, "t.str", "héllo");
    rc |= snug_gguf_writer_add_str(w, "t.empty", "");
    rc |= snug_gguf_writer_add_u64(w, "t.u64", UINT64_MAX - 1);
    rc |= snug_gguf_writer_add_scalar(w, "t.i64", SNUG_GGUF_INT64, &i64);
    rc |= snug_gguf_writer_add_scalar(w, "t.f64", SNUG_GGUF_FLOAT64, &f64);
    rc |= snug_gguf_writer_add_u32(w, "general.alignment", 64);
    /* One array of every numeric type, values i*k - 3 (signed) or i*k. */
    static const enum snug_gguf_type num[] = {SNUG_GGUF_UINT8,   SNUG_GGUF_INT8,   SNUG_GGUF_UINT16,
                                              SNUG_GGUF_INT16,   SNUG_GGUF_UINT32, SNUG_GGUF_INT32,
                                              SNUG_GGUF_FLOAT32, SNUG_GGUF_BOOL,   SNUG_GGUF_UINT64,
                                              SNUG_GGUF_INT64,   SNUG_GGUF_FLOAT64};
    static const int esz[] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 8, 8};
    for (int k = 0; k < 11; k++) {
        uint8_t buf[7 * 8];
        for (int i = 0; i < 7; i++) {
            int64_t v = num[k] == SNUG_GGUF_BOOL ? i % 2 : (int64_t)i * (k + 1) - 3 * (k % 2);
            float f = (float)v;
            double d = (double)v;
            if (num[k] == SNUG_GGUF_FLOAT32)
                memcpy(buf + 4 * i, &f, 4);
            else if (num[k] == SNUG_GGUF_FLOAT64)
                memcpy(buf + 8 * i, &d, 8);
            else
                memcpy(buf + esz[k] * i, &v, (size_t)esz[k]); /* little-endian truncation */
        }
        char key[32];
        snprintf(key, sizeof key, "a.%d", k);
        rc |= snug_gguf_writer_add_arr(w, key, num[k], 7, buf);
    }
    rc |= snug_gguf_writer_add_arr(w, "a.empty", SNUG_GGUF_INT32, 0, NULL);
    struct snug_gguf_str strs[3] = {{3, "abc"}, {0, ""}, {5, "x\0y z"}};
    rc |= snug_gguf_writer_add_arr_str(w, "a.str", 3, strs);
    CHECK(rc == SNUG_OK);
    /* The writer refuses a duplicate key and a bad alignment without poisoning the test. */
    uint64_t ne1[2] = {64, 3}, ne2[1] = {32}, ne3[3] = {256, 1, 2};
    CHECK(snug_gguf_writer_add_tensor(w, "a", SNUG_DTYPE_F32, 2, ne1) == SNUG_OK);
    CHECK(snug_gguf_writer_add_tensor(w, "b.q8", SNUG_DTYPE_Q8_0, 1, ne2) == SNUG_OK);
    CHECK(snug_gguf_writer_add_tensor(w, "c.q4k", SNUG_DTYPE_Q4_K, 3, ne3) == SNUG_OK);
    float a[192];
    for (int i = 0; i < 192; i++) a[i] = (float)i * 0.5f;
    uint8_t b[34], c[288];
    for (int i = 0; i < 34; i++) b[i] = (uint8_t)(i * 7);
    for (int i = 0; i < 288; i++) c[i] = (uint8_t)(i * 13 + 1);
    CHECK(snug_gguf_writer_write(w, a, 100) == SNUG_OK); /* in pieces */
    CHECK(snug_gguf_writer_write(w, (uint8_t *)a + 100, sizeof a - 100) == SNUG_OK);
    CHECK(snug_gguf_writer_write(w, b, sizeof b) == SNUG_OK);
    CHECK(snug_gguf_writer_write(w, c, sizeof c) == SNUG_OK);
    CHECKF(snug_gguf_writer_close(w, &err) == SNUG_OK, "%s", err.msg);

    struct snug_gguf *g = NULL;
    rc = snug_gguf_open(&g, path, &err);
    CHECKF(rc == SNUG_OK, "%s", err.msg);
    if (rc) return;
    CHECK(snug_gguf_n_kv(g) == 14 + 11 + 2);
    CHECK(snug_gguf_alignment(g) == 64);
    uint32_t u;
    int32_t i;
    uint64_t u64;
    float f;
    bool bo;
    struct snug_gguf_str s;
    CHECK(snug_gguf_get_u32(g, "t.u8", &u, &err) == SNUG_OK && u == 250);
    CHECK(snug_gguf_get_i32(g, "t.i8", &i, &err) == SNUG_OK && i == -100);
    CHECK(snug_gguf_get_u32(g, "t.i8", &u, &err) == SNUG_ERR_FORMAT); /* negative → u32 */
    CHECK(strstr(err.msg, "t.i8") && strstr(err.msg, "-100"));
    CHECK(snug_gguf_get_u32(g, "t.u16", &u, &err) == SNUG_OK && u == 65000);
    CHECK(snug_gguf_get_i32(g, "t.i16", &i, &err) == SNUG_OK && i == -30000);
    CHECK(snug_gguf_get_u32(g, "t.u32", &u, &err) == SNUG_OK && u == 4000000000u);
    CHECK(snug_gguf_get_i32(g, "t.u32", &i, &err) == SNUG_ERR_FORMAT); /* out of i32 range */
    CHECK(snug_gguf_get_i32(g, "t.i32", &i, &err) == SNUG_OK && i == -2000000000);
    CHECK(snug_gguf_get_f32(g, "t.f32", &f, &err) == SNUG_OK && f == 1.5f);
    CHECK(snug_gguf_get_bool(g, "t.bool", &bo, &err) == SNUG_OK && bo);
    CHECK(snug_gguf_get_str(g, "t.str", &s, &err) == SNUG_OK && str_eq(s, "héllo"));
    CHECK(snug_gguf_get_str(g, "t.empty", &s, &err) == SNUG_OK && s.len == 0);
    CHECK(snug_gguf_get_u64(g, "t.u64", &u64, &err) == SNUG_OK && u64 == UINT64_MAX - 1);
    CHECK(snug_gguf_get_u32(g, "t.u64", &u, &err) == SNUG_ERR_FORMAT);
    CHECK(snug_gguf_key_type(g, snug_gguf_find_key(g, "t.i64")) == SNUG_GGUF_INT64);
    CHECK(snug_gguf_get_u64(g, "t.i64", &u64, &err) == SNUG_ERR_FORMAT);
    CHECK(snug_gguf_get_f32(g, "t.f64", &f, &err) == SNUG_OK && f == (float)3.25e-300);
    CHECK(snug_gguf_get_bool(g, "t.u8", &bo, &err) == SNUG_ERR_FORMAT);
    CHECK(strstr(err.msg, "u8") && strstr(err.msg, "bool"));
    for (int k = 0; k < 11; k++) {
        char key[32];
        snprintf(key, sizeof key, "a.%d", k);
        enum snug_gguf_type et;
        uint64_t n;
        const void *data;
        CHECK(snug_gguf_get_arr(g, key, &et, &n, &data, &err) == SNUG_OK);
        CHECK(et == num[k] && n == 7);
        int ok = 1;
        for (int j = 0; j < 7; j++) {
            int64_t v = num[k] == SNUG_GGUF_BOOL ? j % 2 : (int64_t)j * (k + 1) - 3 * (k % 2);
            if (num[k] == SNUG_GGUF_UINT8 || num[k] == SNUG_GGUF_UINT16 ||
                num[k] == SNUG_GGUF_UINT32 || num[k] == SNUG_GGUF_UINT64)
                v = v < 0 ? v + 256 : v; /* unsigned arrays hold non-negative values here */
            ok &= snug_gguf_arr_i64(et, data, (uint64_t)j) == v;
            ok &= snug_gguf_arr_f64(et, data, (uint64_t)j) == (double)v;
        }
        CHECKF(ok, "array %s", key);
        CHECK(snug_gguf_get_u32(g, key, &u, &err) == SNUG_ERR_FORMAT && strstr(err.msg, "array"));
    }
    enum snug_gguf_type et;
    uint64_t n;
    const void *data;
    CHECK(snug_gguf_get_arr(g, "a.empty", &et, &n, &data, &err) == SNUG_OK && n == 0);
    CHECK(snug_gguf_get_arr(g, "a.str", &et, &n, &data, &err) == SNUG_OK && n == 3 &&
          et == SNUG_GGUF_STRING);
    CHECK(snug_gguf_arr_str(g, "a.str", 0, &s) == SNUG_OK && str_eq(s, "abc"));
    CHECK(snug_gguf_arr_str(g, "a.str", 1, &s) == SNUG_OK && s.len == 0);
    CHECK(snug_gguf_arr_str(g, "a.str", 2, &s) == SNUG_OK && s.len == 5 &&
          !memcmp(s.data, "x\0y z", 5));
    CHECK(snug_gguf_arr_str(g, "a.str", 3, &s) != SNUG_OK);
    CHECK(snug_gguf_arr_str(g, "a.1", 0, &s) != SNUG_OK);
    CHECK(snug_gguf_n_tensors(g) == 3);
    const struct snug_gguf_tensor *t = snug_gguf_find_tensor(g, "a");
    CHECK(t && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 3 && t->n_bytes == sizeof a &&
          !memcmp(t->data, a, sizeof a) && t->offset == 0);
    t = snug_gguf_find_tensor(g, "b.q8");
    CHECK(t && t->n_bytes == 34 && !memcmp(t->data, b, 34) && t->offset == 768);
    t = snug_gguf_find_tensor(g, "c.q4k");
    CHECK(t && t->n_dims == 3 && t->n_elems == 512 && t->n_bytes == 288 &&
          !memcmp(t->data, c, 288) && t->offset == 832 && t->offset % 64 == 0);
    CHECK(snug_gguf_find_tensor(g, "nope") == NULL);
    snug_gguf_close(g);
    remove(path);

    /* Writer misuse is reported, and a failed writer removes its file. */
    CHECK(snug_gguf_writer_open(&w, path, &err) == SNUG_OK);
    CHECK(snug_gguf_writer_add_u32(w, "general.alignment", 48) == SNUG_ERR_INVALID);
    CHECK(strstr(snug_gguf_writer_error(w), "power of two") != NULL);
    snug_gguf_writer_abort(w);
    CHECK(snug_gguf_writer_open(&w, path, &err) == SNUG_OK);
    CHECK(snug_gguf_writer_add_tensor(w, "x", SNUG_DTYPE_Q4_0, 1, ne1) == SNUG_OK);
    CHECK(snug_gguf_writer_write(w, b, 10) == SNUG_OK);
    CHECK(snug_gguf_writer_close(w, &err) != SNUG_OK && strstr(err.msg, "'x' received 10 of"));
    CHECK(access(path, F_OK) != 0);
    CHECK(snug_gguf_writer_open(&w, path, &err) == SNUG_OK);
    CHECK(snug_gguf_writer_add_tensor(w, "x", SNUG_DTYPE_Q4_0, 1, ne2) == SNUG_OK);
    CHECK(snug_gguf_writer_add_tensor(w, "x", SNUG_DTYPE_F32, 1, ne2) == SNUG_ERR_INVALID);
    CHECK(strstr(snug_gguf_writer_error(w), "duplicate tensor name 'x'") != NULL);
    snug_gguf_writer_abort(w);
    CHECK(snug_gguf_writer_open(&w, path, &err) == SNUG_OK);
    uint64_t ne_bad[1] = {33};
    CHECK(snug_gguf_writer_add_tensor(w, "x", SNUG_DTYPE_Q4_0, 1, ne_bad) == SNUG_ERR_INVALID);
    CHECK(strstr(snug_gguf_writer_error(w), "block size") != NULL);
    snug_gguf_writer_abort(w);
    CHECK(access(path, F_OK) != 0);
}

/* Rewrite a fixture through the writer (copy every key, then every tensor's bytes) and check
 * the result is byte-identical to the original: the fixtures were written by llama.cpp's
 * converter (gguf-py), so this proves the writer follows the same layout rules. */
static void test_rewrite_fixture(void) {
    const char *dir = test_fixtures_dir();
    if (!dir) return;
    char path[4200];
    snprintf(path, sizeof path, "%s/trained/trained-f16.gguf", dir);
    struct snug_err err = {0};
    struct snug_gguf *g = NULL;
    if (snug_gguf_open(&g, path, &err) != SNUG_OK) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    const char *out = "test_gguf_rewrite.gguf";
    struct snug_gguf_writer *w = NULL;
    CHECK(snug_gguf_writer_open(&w, out, &err) == SNUG_OK);
    int rc = 0;
    for (int64_t i = 0; i < snug_gguf_n_kv(g); i++) rc |= snug_gguf_writer_copy_kv(w, g, i);
    for (int64_t i = 0; i < snug_gguf_n_tensors(g); i++) {
        const struct snug_gguf_tensor *t = snug_gguf_tensor(g, i);
        rc |= snug_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne);
    }
    for (int64_t i = 0; i < snug_gguf_n_tensors(g); i++) {
        const struct snug_gguf_tensor *t = snug_gguf_tensor(g, i);
        rc |= snug_gguf_writer_write(w, t->data, t->n_bytes);
    }
    CHECKF(rc == SNUG_OK, "%s", snug_gguf_writer_error(w));
    CHECKF(snug_gguf_writer_close(w, &err) == SNUG_OK, "%s", err.msg);
    uint64_t n1 = 0, n2 = 0;
    uint8_t *a = slurp(path, &n1), *b = slurp(out, &n2);
    CHECKF(a && b && n1 == n2 && !memcmp(a, b, n1), "rewrite differs: %llu vs %llu bytes",
           (unsigned long long)n1, (unsigned long long)n2);
    snug_free(a);
    snug_free(b);
    snug_gguf_close(g);
    remove(out);
}

/* ---- split files ---------------------------------------------------------------------------- */

/* Write part `no` (0-based) of a 3-part split with tensors t<no>_0 and t<no>_1. */
static int write_part(const char *prefix, int no, int count, int32_t total, int32_t bad_no) {
    char path[256];
    snprintf(path, sizeof path, "%s-%05d-of-%05d.gguf", prefix, no + 1, count);
    struct snug_err err = {0};
    struct snug_gguf_writer *w = NULL;
    if (snug_gguf_writer_open(&w, path, &err)) return 1;
    uint16_t sno = (uint16_t)(bad_no >= 0 ? bad_no : no), scount = (uint16_t)count;
    int rc = 0;
    if (no == 0) rc |= snug_gguf_writer_add_str(w, "general.architecture", "test");
    rc |= snug_gguf_writer_add_scalar(w, "split.no", SNUG_GGUF_UINT16, &sno);
    rc |= snug_gguf_writer_add_scalar(w, "split.count", SNUG_GGUF_UINT16, &scount);
    rc |= snug_gguf_writer_add_i32(w, "split.tensors.count", total);
    uint64_t ne[1] = {8};
    for (int k = 0; k < 2; k++) {
        char name[32];
        snprintf(name, sizeof name, "t%d_%d", no, k);
        rc |= snug_gguf_writer_add_tensor(w, name, SNUG_DTYPE_F32, 1, ne);
    }
    for (int k = 0; k < 2; k++) {
        float v[8];
        for (int j = 0; j < 8; j++) v[j] = (float)(100 * no + 10 * k + j);
        rc |= snug_gguf_writer_write(w, v, sizeof v);
    }
    return rc | snug_gguf_writer_close(w, &err);
}

static void test_split(void) {
    const char *pre = "test_gguf_split";
    for (int p = 0; p < 3; p++) CHECK(write_part(pre, p, 3, 6, -1) == 0);
    struct snug_err err = {0};
    struct snug_gguf *g = NULL;
    int rc = snug_gguf_open(&g, "test_gguf_split-00001-of-00003.gguf", &err);
    CHECKF(rc == SNUG_OK, "%s", err.msg);
    if (rc == SNUG_OK) {
        CHECK(snug_gguf_n_tensors(g) == 6 && snug_gguf_n_files(g) == 3);
        int ok = 1;
        for (int p = 0; p < 3; p++)
            for (int k = 0; k < 2; k++) {
                char name[32];
                snprintf(name, sizeof name, "t%d_%d", p, k);
                const struct snug_gguf_tensor *t = snug_gguf_find_tensor(g, name);
                ok &= t && t->file_idx == (uint32_t)p &&
                      ((const float *)t->data)[3] == (float)(100 * p + 10 * k + 3);
            }
        CHECK(ok);
        struct snug_gguf_str s;
        CHECK(snug_gguf_get_str(g, "general.architecture", &s, &err) == SNUG_OK);
        snug_gguf_close(g);
    }
    /* Opening a later part names the first one. */
    rc = snug_gguf_open(&g, "test_gguf_split-00002-of-00003.gguf", &err);
    CHECK(rc != SNUG_OK && strstr(err.msg, "open the first part"));
    /* A wrong split.no in part 3 is caught. */
    CHECK(write_part(pre, 2, 3, 6, 7) == 0);
    rc = snug_gguf_open(&g, "test_gguf_split-00001-of-00003.gguf", &err);
    CHECKF(rc != SNUG_OK && strstr(err.msg, "split.no") && strstr(err.msg, "00003"), "%s", err.msg);
    /* A missing part is named. */
    remove("test_gguf_split-00003-of-00003.gguf");
    rc = snug_gguf_open(&g, "test_gguf_split-00001-of-00003.gguf", &err);
    CHECKF(rc != SNUG_OK && strstr(err.msg, "test_gguf_split-00003-of-00003.gguf"), "%s", err.msg);
    /* A wrong split.tensors.count is caught. */
    CHECK(write_part(pre, 0, 3, 5, -1) == 0 && write_part(pre, 2, 3, 5, -1) == 0);
    rc = snug_gguf_open(&g, "test_gguf_split-00001-of-00003.gguf", &err);
    CHECKF(rc != SNUG_OK && strstr(err.msg, "split.tensors.count"), "%s", err.msg);
    for (int p = 0; p < 3; p++) {
        char path[64];
        snprintf(path, sizeof path, "%s-%05d-of-00003.gguf", pre, p + 1);
        remove(path);
    }
}

/* ---- malformed input ------------------------------------------------------------------------ */

/* Every file listed in tests/data/gguf-bad/EXPECTED.tsv ("file<TAB>substring") must fail to
 * open with a message that contains the substring and the file name. */
static void test_bad_corpus(void) {
    char dir[4200], list[4300];
    snprintf(dir, sizeof dir, "%s/tests/data/gguf-bad", SNUG_SOURCE_DIR);
    snprintf(list, sizeof list, "%s/EXPECTED.tsv", dir);
    FILE *f = fopen(list, "r");
    CHECKF(f != NULL, "cannot read %s", list);
    if (!f) return;
    char line[1024];
    int n_files = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        char *tab = strchr(line, '\t');
        if (!tab || line[0] == '#') continue;
        *tab = 0;
        char path[5400];
        snprintf(path, sizeof path, "%s/%s", dir, line);
        struct snug_err err = {0};
        struct snug_gguf *g = NULL;
        int rc = snug_gguf_open(&g, path, &err);
        CHECKF(rc != SNUG_OK && g == NULL, "%s opened", line);
        CHECKF(strstr(err.msg, tab + 1) && strstr(err.msg, line), "%s: want '%s', got '%s'", line,
               tab + 1, err.msg);
        snug_gguf_close(g);
        n_files++;
    }
    fclose(f);
    CHECKF(n_files >= 30, "only %d corpus files", n_files);
}

/* Truncate a fixture at many lengths, in memory: every prefix that cuts into the header or
 * into a tensor's data must fail cleanly. Header-sized prefixes are copied into an exact-size
 * buffer so ASan catches any read past the end. */
static void test_truncations(void) {
    const char *dir = test_fixtures_dir();
    if (!dir) return;
    char path[4200];
    snprintf(path, sizeof path, "%s/moe/moe-f16.gguf", dir);
    uint64_t size = 0;
    uint8_t *buf = slurp(path, &size);
    CHECK(buf != NULL);
    if (!buf) return;
    struct snug_err err = {0};
    struct snug_gguf *g = NULL;
    CHECK(snug_gguf_open_memory(&g, buf, size, "moe", &err) == SNUG_OK);
    snug_gguf_close(g);
    int fails = 0, tries = 0;
    for (uint64_t n = 0; n + 32 <= size; n += n < 512 ? 1 : n < 70000 ? 61 : 40009) {
        bool copy = n < 70000;
        uint8_t *img = copy ? snug_malloc(n ? n : 1) : buf;
        if (copy && n) memcpy(img, buf, n);
        g = NULL;
        int rc = snug_gguf_open_memory(&g, img, n, "moe", &err);
        tries++;
        if (rc != SNUG_OK && g == NULL && strstr(err.msg, "moe"))
            fails++;
        else
            fprintf(stderr, "truncation at %llu: rc %d, %s\n", (unsigned long long)n, rc, err.msg);
        snug_gguf_close(g);
        if (copy) snug_free(img);
    }
    CHECKF(fails == tries, "%d of %d truncations failed cleanly", fails, tries);
    snug_free(buf);
}

/* A valid array of arrays (tests/fuzz/corpus-gguf/nested.gguf, from make_bad_gguf.py) opens,
 * and the getters refuse it with a clear message. */
static void test_nested(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus-gguf/nested.gguf", SNUG_SOURCE_DIR);
    uint64_t size = 0;
    uint8_t *buf = slurp(path, &size);
    CHECKF(buf != NULL, "cannot read %s", path);
    if (!buf) return;
    struct snug_err err = {0};
    struct snug_gguf *g = NULL;
    CHECKF(snug_gguf_open_memory(&g, buf, size, "nested", &err) == SNUG_OK, "%s", err.msg);
    if (g) {
        enum snug_gguf_type et;
        uint64_t n;
        const void *data;
        CHECK(snug_gguf_get_arr(g, "test.x", &et, &n, &data, &err) == SNUG_ERR_UNSUPPORTED);
        CHECK(strstr(err.msg, "test.x") && strstr(err.msg, "nested"));
        CHECK(snug_gguf_key_arr_info(g, 0, &et, &n) == SNUG_OK && et == SNUG_GGUF_ARRAY && n == 1);
        snug_gguf_close(g);
    }
    snug_free(buf);
}

/* `snug info` on a fixture prints the architecture and the tensor total (skipped when the
 * binary has not been built: unit tests do not depend on it). */
static void test_info_cli(void) {
    const char *dir = test_fixtures_dir();
    if (!dir) return;
    if (access(SNUG_BIN, X_OK) != 0) {
        fprintf(stderr, "SKIP: %s not built, snug info not checked\n", SNUG_BIN);
        return;
    }
    char cmd[8600], out[1 << 16];
    snprintf(cmd, sizeof cmd, "'%s' info -m '%s/moe/moe-f16.gguf'", SNUG_BIN, dir);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    if (!p) return;
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    CHECK(pclose(p) == 0);
    CHECK(strstr(out, "architecture:  qwen35moe") != NULL);
    CHECK(strstr(out, "tokenizer.ggml.tokens") && strstr(out, "str[2048]"));
    CHECK(strstr(out, "i32[4] [3, 3, 2, 0]") != NULL);
    CHECK(strstr(out, "blk.0.ffn_down_exps.weight") && strstr(out, "[64, 256, 16]"));
    CHECK(strstr(out, "total        76 tensors         10996064 bytes") != NULL);
}

int main(void) {
    test_fixtures();
    test_round_trip();
    test_rewrite_fixture();
    test_split();
    test_bad_corpus();
    test_truncations();
    test_nested();
    test_info_cli();
    return TEST_DONE();
}
