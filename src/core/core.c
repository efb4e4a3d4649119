/* core.c — assertions, counted allocation, arenas, logging, clocks (see core.h). */
#define _GNU_SOURCE
#include "core.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Noreturn void snug_assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "snug: internal invariant broken: %s (%s:%d)\n", cond, file, line);
    abort();
}

static atomic_uint_fast64_t g_alloc_count;

/* Fault injection: the counted allocation with this 1-based index fails (0 = none). Set by
 * snug_alloc_fail_at or, once at the first allocation, by the debug variable SNUG_FAIL_ALLOC=N
 * (docs/server.md "Fault injection"). */
static atomic_uint_fast64_t g_fail_at;
static atomic_int g_fail_env_read;

static bool alloc_should_fail(uint64_t index) {
    if (!atomic_load_explicit(&g_fail_env_read, memory_order_acquire)) {
        const char *v = getenv("SNUG_FAIL_ALLOC");
        int expected = 0;
        if (atomic_compare_exchange_strong(&g_fail_env_read, &expected, 1) && v && *v)
            atomic_store(&g_fail_at, strtoull(v, NULL, 10));
    }
    uint64_t at = atomic_load_explicit(&g_fail_at, memory_order_relaxed);
    return at != 0 && index == at;
}

void snug_alloc_fail_at(uint64_t index) {
    atomic_store(&g_fail_env_read, 1);
    atomic_store(&g_fail_at, index);
}

void *snug_malloc(size_t bytes) {
    uint64_t i = atomic_fetch_add_explicit(&g_alloc_count, 1, memory_order_relaxed) + 1;
    if (alloc_should_fail(i)) return NULL;
    return malloc(bytes ? bytes : 1);
}

void *snug_calloc(size_t n, size_t size) {
    uint64_t i = atomic_fetch_add_explicit(&g_alloc_count, 1, memory_order_relaxed) + 1;
    if (alloc_should_fail(i)) return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}

void snug_free(void *p) {
    free(p);
}

uint64_t snug_alloc_count(void) {
    return atomic_load_explicit(&g_alloc_count, memory_order_relaxed);
}

int snug_arena_init(struct snug_arena *a, const char *name, size_t cap_bytes,
                    struct snug_err *err) {
    memset(a, 0, sizeof *a);
    a->name = name;
    if (cap_bytes == 0) return SNUG_OK;
    /* 64-byte aligned so SIMD loads of any arena buffer can be aligned. */
    size_t cap = SNUG_ALIGN_UP(cap_bytes, 64);
    uint64_t i = atomic_fetch_add_explicit(&g_alloc_count, 1, memory_order_relaxed) + 1;
    a->base = alloc_should_fail(i) ? NULL : aligned_alloc(64, cap);
    if (!a->base)
        return snug_err_set(err, SNUG_ERR_NOMEM, "arena '%s': cannot allocate %zu bytes", name,
                            cap_bytes);
    a->cap = cap_bytes;
    return SNUG_OK;
}

void snug_arena_free(struct snug_arena *a) {
    if (!a) return;
    free(a->base);
    memset(a, 0, sizeof *a);
}

void *snug_arena_alloc(struct snug_arena *a, size_t bytes, size_t align) {
    size_t start = SNUG_ALIGN_UP(a->used, align);
    if (start > a->cap || bytes > a->cap - start) {
        fprintf(stderr,
                "snug: arena '%s' outgrown: %zu bytes requested at offset %zu of %zu planned\n",
                a->name ? a->name : "?", bytes, start, a->cap);
        snug_assert_fail("arena allocation within plan", __FILE__, __LINE__);
    }
    a->used = start + bytes;
    if (a->used > a->peak) a->peak = a->used;
    return a->base + start;
}

static enum snug_log_level g_log_level = SNUG_LOG_WARN;

void snug_log_set_level(enum snug_log_level level) {
    g_log_level = level;
}

void snug_log(enum snug_log_level level, const char *fmt, ...) {
    if (level > g_log_level) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

double snug_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t read_status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t klen = strlen(key);
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) == 0) {
            kb = strtoull(line + klen, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}

uint64_t snug_peak_rss_bytes(void) {
    return read_status_kb("VmHWM:");
}

uint64_t snug_rss_bytes(void) {
    return read_status_kb("VmRSS:");
}
