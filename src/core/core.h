/* core.h — small things every module uses: assertions, counted allocation, arenas, logging,
 * timing. Invariant: every heap allocation of the library goes through snug_malloc/snug_free
 * (so the allocation counter sees it) or comes from an arena; arenas never grow.
 * Read next: threadpool.h, then ARCHITECTURE.md for the module map. */
#ifndef SNUG_CORE_H
#define SNUG_CORE_H

#include "snug.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Always-on assertion for broken invariants (never for bad input: that is a status code). */
#define SNUG_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) snug_assert_fail(#cond, __FILE__, __LINE__);                                  \
    } while (0)
_Noreturn void snug_assert_fail(const char *cond, const char *file, int line);

#define SNUG_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SNUG_MAX(a, b) ((a) > (b) ? (a) : (b))
/* FNV-1a, 64 bits, over n bytes, continuing from h (a new hash starts from SNUG_FNV_OFFSET):
 * the one byte hash of the tree's tables, cache keys and seeds. */
#define SNUG_FNV_OFFSET 14695981039346656037ull
static inline uint64_t snug_fnv1a(uint64_t h, const void *v, size_t n) {
    const uint8_t *p = v;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}
#define SNUG_ALIGN_UP(x, a) ((((x) + (a)-1) / (a)) * (a))

/* ---- counted heap allocation ------------------------------------------------------------- */
/* Thin wrappers over malloc/calloc/free that count calls; the counter proves that the token
 * path allocates nothing (tests read it before and after prompt processing and decoding). */
void *snug_malloc(size_t bytes);
void *snug_calloc(size_t n, size_t size);
void snug_free(void *p);
uint64_t snug_alloc_count(void); /* number of snug_malloc/snug_calloc calls so far */
/* Fault injection for tests: the counted allocation whose 1-based index (snug_alloc_count()
 * after it) equals `index` returns NULL; 0 turns it off. The debug environment variable
 * SNUG_FAIL_ALLOC=N does the same from process start. */
void snug_alloc_fail_at(uint64_t index);

/* ---- overflow-checked size arithmetic ---------------------------------------------------- */
/* Return false on overflow (result untouched). Used by every parser for counts and offsets. */
static inline bool snug_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (a != 0 && b > UINT64_MAX / a) return false;
    *out = a * b;
    return true;
}
static inline bool snug_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (b > UINT64_MAX - a) return false;
    *out = a + b;
    return true;
}

/* ---- arenas ------------------------------------------------------------------------------- */
/* A budgeted bump allocator. One block of `cap` bytes is taken at init (the size comes from
 * the memory plan); snug_arena_alloc never grows it: running out is a planning bug and
 * fails loudly through SNUG_ASSERT with the arena's name and sizes. */
struct snug_arena {
    const char *name; /* borrowed, for messages */
    uint8_t *base;
    size_t cap;  /* bytes */
    size_t used; /* bytes */
    size_t peak; /* high-water mark of `used` */
};
int snug_arena_init(struct snug_arena *a, const char *name, size_t cap_bytes, struct snug_err *err);
void snug_arena_free(struct snug_arena *a);
/* Aligned bump allocation (align: power of two, >= 1). Memory is not zeroed. */
void *snug_arena_alloc(struct snug_arena *a, size_t bytes, size_t align);
static inline size_t snug_arena_mark(const struct snug_arena *a) {
    return a->used;
}
static inline void snug_arena_reset_to(struct snug_arena *a, size_t mark) {
    a->used = mark;
}

/* ---- logging (stderr only; the library never writes to stdout) --------------------------- */
enum snug_log_level {
    SNUG_LOG_ERROR = 0,
    SNUG_LOG_WARN = 1,
    SNUG_LOG_INFO = 2,
    SNUG_LOG_DEBUG = 3
};
void snug_log_set_level(enum snug_log_level level);
void snug_log(enum snug_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- growable byte string (sbuf.c) ----------------------------------------------------------
 * Always NUL-terminated once anything was appended; zero-initialised = empty. After a failed
 * allocation `oom` is set and every later append does nothing, so a writer checks once at the
 * end. */
struct snug_sbuf {
    char *data;
    size_t len, cap;
    bool oom;
};
void snug_sbuf_append(struct snug_sbuf *b, const char *s, size_t n);
void snug_sbuf_puts(struct snug_sbuf *b, const char *s);
void snug_sbuf_putc(struct snug_sbuf *b, char c);
/* printf-style append (any length) */
void snug_sbuf_printf(struct snug_sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void snug_sbuf_reset(struct snug_sbuf *b); /* len = 0, keeps the memory */
/* Make room for n more bytes now (false on out-of-memory), so later appends up to that
 * size do not allocate. */
bool snug_sbuf_reserve(struct snug_sbuf *b, size_t n);
void snug_sbuf_free(struct snug_sbuf *b);
/* Hand the bytes over (NUL-terminated, snug_malloc'd, "" when empty; NULL on oom) and empty b. */
char *snug_sbuf_take(struct snug_sbuf *b, size_t *out_len);

/* ---- reading a file ahead (prefetch.c) ------------------------------------------------------
 * Read `path` once through the page cache, calling progress(user, done, total) before the
 * first read and after each 1 MiB (NULL: none). Files over 80% of physical memory and files
 * that cannot be read are skipped. Returns the bytes read. */
typedef void (*snug_prefetch_fn)(void *user, uint64_t done_bytes, uint64_t total_bytes);
uint64_t snug_file_prefetch(const char *path, snug_prefetch_fn progress, void *user);

/* ---- time and memory readings ------------------------------------------------------------- */
double snug_time_s(void);           /* monotonic seconds */
uint64_t snug_peak_rss_bytes(void); /* peak resident set size of this process (VmHWM) */
uint64_t snug_rss_bytes(void);      /* current resident set size (VmRSS) */

#endif /* SNUG_CORE_H */
