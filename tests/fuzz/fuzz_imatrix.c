/* fuzz_imatrix.c — libFuzzer target for the imatrix reader: every input is loaded with
 * snug_imatrix_load_memory (GGUF or legacy .dat, by the magic) and, when it validates, every
 * entry's values are read back through snug_imatrix_find, so a validation gap shows up as an
 * ASan/UBSan report. Seeds: tests/data/llamacpp/trained-imatrix.gguf and any .dat file.
 * Build: CC=clang cmake -B build-fuzz -DSNUG_FUZZ=ON && cmake --build build-fuzz --target
 * fuzz_imatrix. Read next: src/imatrix/imatrix_file.c. */
#include "imatrix/imatrix.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

static volatile float sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct snug_imatrix *m = NULL;
    struct snug_err err;
    if (snug_imatrix_load_memory(&m, data, size, "fuzz", &err) != 0) return 0;
    /* names are not enumerable; probe a few common ones and check the invariants */
    static const char *const names[] = {"blk.0.ffn_down.weight", "blk.0.attn_qkv.weight",
                                        "output.weight", ""};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        uint64_t n = 0;
        const float *v = snug_imatrix_find(m, names[i], &n);
        for (uint64_t j = 0; v && j < n; j++) {
            if (!isfinite(v[j])) __builtin_trap();
            sink += v[j];
        }
    }
    sink += (float)snug_imatrix_n_entries(m) + (float)snug_imatrix_chunk_count(m) +
            (float)snug_imatrix_dataset(m)[0];
    snug_imatrix_free(m);
    return 0;
}
