/* test_imatrix.c — the imatrix reader against hand-made files whose importance values are known
 * (tests/fuzz/corpus-imatrix: a GGUF one with two experts, one of them never counted, and a
 * legacy .dat one), llama.cpp's real file (tests/data/llamacpp/trained-imatrix.gguf: every entry
 * is in_sum2 / counts, checked here against the raw tensors through the GGUF reader), and
 * malformed inputs refused with a message. Read next: src/imatrix/imatrix_file.c. */
#include "gguf/gguf.h"
#include "imatrix/imatrix.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void expect(const struct snug_imatrix *m, const char *name, const float *want, uint64_t n) {
    uint64_t got_n = 0;
    const float *v = snug_imatrix_find(m, name, &got_n);
    CHECKF(v && got_n == n, "%s: %llu values", name, (unsigned long long)got_n);
    for (uint64_t i = 0; v && i < n && i < got_n; i++)
        CHECKF(v[i] == want[i], "%s[%llu] = %g, want %g", name, (unsigned long long)i, v[i],
               want[i]);
}

int main(void) {
    struct snug_err err = {0};
    struct snug_imatrix *m = NULL;
    char path[1024];

    snprintf(path, sizeof path, "%s/tests/fuzz/corpus-imatrix/small.gguf", SNUG_SOURCE_DIR);
    CHECKF(snug_imatrix_load(&m, path, &err) == SNUG_OK, "%s", err.msg);
    if (m) {
        /* expert 0: sums / 4; expert 1 was never counted: 1 */
        const float down[8] = {0.25f, 0.5f, 0.75f, 1.f, 1.f, 1.f, 1.f, 1.f}, out[2] = {1.f, 2.f};
        expect(m, "blk.0.ffn_down.weight", down, 8);
        expect(m, "output.weight", out, 2);
        CHECK(snug_imatrix_find(m, "blk.1.ffn_down.weight", NULL) == NULL);
        CHECK(snug_imatrix_n_entries(m) == 2 && snug_imatrix_chunk_count(m) == 2);
        CHECK(!strcmp(snug_imatrix_dataset(m), "text"));
        snug_imatrix_free(m);
    }

    snprintf(path, sizeof path, "%s/tests/fuzz/corpus-imatrix/legacy.dat", SNUG_SOURCE_DIR);
    CHECKF(snug_imatrix_load(&m, path, &err) == SNUG_OK, "%s", err.msg);
    if (m) {
        const float down[4] = {1.5f / 3, 2.f / 3, 0.f, 2.f},
                    out[2] = {1.f, 2.f}; /* ncall 0: as is */
        expect(m, "blk.0.ffn_down.weight", down, 4);
        expect(m, "output.weight", out, 2);
        CHECK(snug_imatrix_chunk_count(m) == 7 && !strcmp(snug_imatrix_dataset(m), "text"));
        snug_imatrix_free(m);
    }

    /* llama.cpp's file: every entry equals in_sum2 / round(counts) */
    snprintf(path, sizeof path, "%s/tests/data/llamacpp/trained-imatrix.gguf", SNUG_SOURCE_DIR);
    struct snug_gguf *g = NULL;
    CHECKF(snug_imatrix_load(&m, path, &err) == SNUG_OK, "%s", err.msg);
    CHECK(snug_gguf_open(&g, path, &err) == SNUG_OK);
    if (m && g) {
        int checked = 0, bad = 0;
        for (int64_t i = 0; i < snug_gguf_n_tensors(g); i++) {
            const struct snug_gguf_tensor *t = snug_gguf_tensor(g, i);
            size_t len = strlen(t->name);
            if (len < 8 || strcmp(t->name + len - 8, ".in_sum2")) continue;
            char name[256], cname[300];
            snprintf(name, sizeof name, "%.*s", (int)(len - 8), t->name);
            snprintf(cname, sizeof cname, "%s.counts", name);
            const struct snug_gguf_tensor *c = snug_gguf_find_tensor(g, cname);
            uint64_t n = 0;
            const float *v = snug_imatrix_find(m, name, &n);
            CHECKF(c && v && n == t->n_elems, "%s", name);
            if (!c || !v || n != t->n_elems) continue;
            float cnt;
            memcpy(&cnt, c->data, 4);
            for (uint64_t k = 0; k < n; k++) {
                float s;
                memcpy(&s, (const uint8_t *)t->data + 4 * k, 4);
                bad += v[k] != s / roundf(cnt);
            }
            checked++;
        }
        CHECKF(checked == 31 && bad == 0, "%d entries checked, %d values differ", checked, bad);
        CHECK(snug_imatrix_n_entries(m) == 31 && snug_imatrix_chunk_count(m) == 174);
        printf("imatrix: %d entries of llama.cpp's file read as in_sum2 / counts\n", checked);
    }
    snug_gguf_close(g);
    snug_imatrix_free(m);

    /* malformed: empty, truncated legacy, a model file (no imatrix tensors) */
    CHECK(snug_imatrix_load_memory(&m, "", 0, "empty", &err) != SNUG_OK && !m);
    const uint8_t trunc[] = {1, 0, 0, 0, 5, 0, 0, 0, 'a', 'b'};
    CHECK(snug_imatrix_load_memory(&m, trunc, sizeof trunc, "trunc", &err) != SNUG_OK && !m);
    CHECK(strstr(err.msg, "trunc") != NULL);
    snprintf(path, sizeof path, "%s/tests/data/llamacpp/trained-q2_k.gguf", SNUG_SOURCE_DIR);
    CHECK(snug_imatrix_load(&m, path, &err) != SNUG_OK && !m);
    CHECKF(strstr(err.msg, "no importance data") != NULL, "%s", err.msg);
    CHECK(snug_imatrix_load(&m, "/nonexistent/imatrix.gguf", &err) == SNUG_ERR_IO);
    return TEST_DONE();
}
