/* test_quant_io.c — a pipe helper that exposes snug's row kernels to the Python cross-checks
 * (tests/py/test_quant_gguf.py), plus a small self-test when run without arguments (ctest).
 *
 *   test_quant_io deq   TYPE N   < blocks  > float32[N]   (snug_dequantize_row)
 *   test_quant_io quant TYPE N   < float32 > blocks       (snug_quantize_row, no imatrix)
 *   test_quant_io dot   TYPE N   < blocks ++ float32[N]  > float32[1]
 * TYPE is a ggml type name ("q4_K"); N a multiple of its block size. Raw little-endian bytes.
 * Read next: tests/py/test_quant_gguf.py. */
#include "core/core.h"
#include "quant/quant.h"
#include "test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int read_all(void *p, size_t n) {
    return fread(p, 1, n, stdin) == n;
}

static int run(const char *op, const char *tname, const char *nstr) {
    int type = snug_dtype_from_name(tname);
    long long n = atoll(nstr);
    const struct snug_dtype_info *t = type < 0 ? NULL : snug_dtype_info((uint32_t)type);
    if (!t || !t->computable || n <= 0 || n % t->block_elems) {
        fprintf(stderr, "test_quant_io: bad type '%s' or length %s\n", tname, nstr);
        return 2;
    }
    size_t rb = (size_t)snug_dtype_row_bytes((uint32_t)type, (uint64_t)n);
    uint8_t *q = malloc(rb);
    float *f = malloc(sizeof(float) * (size_t)n);
    int rc = 0;
    if (!strcmp(op, "deq")) {
        rc = !read_all(q, rb);
        if (!rc) snug_dequantize_row((uint32_t)type, q, f, n), fwrite(f, 4, (size_t)n, stdout);
    } else if (!strcmp(op, "quant")) {
        rc = !read_all(f, 4 * (size_t)n);
        if (!rc) rc = !snug_quantize_row((uint32_t)type, f, q, n, NULL), fwrite(q, 1, rb, stdout);
    } else if (!strcmp(op, "dot")) {
        rc = !read_all(q, rb) || !read_all(f, 4 * (size_t)n);
        if (!rc) {
            float d = snug_dot_row((uint32_t)type, q, f, n);
            fwrite(&d, 4, 1, stdout);
        }
    } else {
        rc = 2;
    }
    if (rc) fprintf(stderr, "test_quant_io: %s failed (short input or bad op)\n", op);
    free(q);
    free(f);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 4) return run(argv[1], argv[2], argv[3]);
    /* Self-test: a hand-built Q8_0 block and Q4_0 block decode to the values their layout
     * defines (the same numbers the Python check derives through gguf-py). */
    uint8_t b8[34] = {0x00, 0x3c}; /* d = 1.0 */
    for (int i = 0; i < 32; i++) b8[2 + i] = (uint8_t)(int8_t)(i - 16);
    float y[32];
    snug_dequantize_row(SNUG_DTYPE_Q8_0, b8, y, 32);
    for (int i = 0; i < 32; i++) CHECK(y[i] == (float)(i - 16));
    uint8_t b4[18] = {0x00, 0x40}; /* d = 2.0 */
    for (int i = 0; i < 16; i++) b4[2 + i] = (uint8_t)(i | (15 - i) << 4);
    snug_dequantize_row(SNUG_DTYPE_Q4_0, b4, y, 32);
    for (int i = 0; i < 16; i++)
        CHECK(y[i] == 2.f * (float)(i - 8) && y[16 + i] == 2.f * (float)(7 - i));
    return TEST_DONE();
}
