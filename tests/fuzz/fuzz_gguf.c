/* fuzz_gguf.c — libFuzzer target for the GGUF reader: every input is opened with
 * snug_gguf_open_memory and, when it validates, every key, array element, string and tensor is
 * walked (touching the first and last byte of each tensor's data), so a validation gap shows up
 * as an ASan/UBSan report. Seeds: tests/fuzz/corpus-gguf/ (tests/data/make_bad_gguf.py).
 * Build: CC=clang cmake -B build-gguf-fuzz -DSNUG_FUZZ=ON && cmake --build build-gguf-fuzz
 * --target fuzz_gguf. Read next: src/gguf/gguf.c. */
#include "gguf/gguf.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static volatile uint64_t sink;

/* Touch every byte range the reader hands out. */
static void walk(const struct snug_gguf *g) {
    struct snug_err err;
    uint64_t acc = snug_gguf_alignment(g) + snug_gguf_file_bytes(g);
    for (int64_t i = 0; i < snug_gguf_n_kv(g); i++) {
        const char *key = snug_gguf_key_name(g, i);
        acc += strlen(key);
        if (snug_gguf_find_key(g, key) != i) __builtin_trap();
        uint32_t u;
        uint64_t u64;
        int32_t i32;
        float f;
        bool b;
        struct snug_gguf_str s;
        if (!snug_gguf_get_u32(g, key, &u, &err)) acc += u;
        if (!snug_gguf_get_u64(g, key, &u64, &err)) acc += u64;
        if (!snug_gguf_get_i32(g, key, &i32, &err)) acc += (uint64_t)i32;
        if (!snug_gguf_get_f32(g, key, &f, &err)) acc += (uint64_t)(f == f);
        if (!snug_gguf_get_bool(g, key, &b, &err)) acc += b;
        if (!snug_gguf_get_str(g, key, &s, &err) && s.len) acc += (uint8_t)s.data[s.len - 1];
        enum snug_gguf_type et;
        uint64_t n;
        const void *data;
        if (snug_gguf_get_arr(g, key, &et, &n, &data, &err)) continue;
        for (uint64_t j = 0; j < n; j++) {
            if (et == SNUG_GGUF_STRING) {
                if (snug_gguf_arr_str(g, key, j, &s)) __builtin_trap();
                if (s.len) acc += (uint8_t)s.data[0] + (uint8_t)s.data[s.len - 1];
            } else {
                acc += (uint64_t)snug_gguf_arr_i64(et, data, j);
                acc += (uint64_t)(snug_gguf_arr_f64(et, data, j) != 0);
            }
        }
    }
    for (int64_t i = 0; i < snug_gguf_n_tensors(g); i++) {
        const struct snug_gguf_tensor *t = snug_gguf_tensor(g, i);
        if (snug_gguf_find_tensor(g, t->name) != t) __builtin_trap();
        const uint8_t *d = t->data;
        acc += d[0] + d[t->n_bytes - 1] + t->n_elems;
    }
    sink = acc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct snug_err err = {0};
    struct snug_gguf *g = NULL;
    if (snug_gguf_open_memory(&g, data, size, "fuzz", &err) == SNUG_OK) {
        walk(g);
        snug_gguf_close(g);
    } else if (g != NULL || err.msg[0] == 0) {
        __builtin_trap(); /* a failure must leave no handle and say why */
    }
    return 0;
}
