/* test_core.c — arena, counted allocation, error messages, thread pool. */
#include "core/core.h"
#include "core/threadpool.h"
#include "test.h"

#include <stdatomic.h>

struct sum_ctx {
    const int *v;
    long n;
    atomic_long total;
};

static void sum_task(void *p, int ith, int nth) {
    struct sum_ctx *c = p;
    long lo, hi, s = 0;
    snug_split_range(c->n, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++) s += c->v[i];
    atomic_fetch_add(&c->total, s);
}

/* The growable string: appends and printf of any length (the suite's reports print long
 * lines through it). */
static void test_sbuf(void) {
    struct snug_sbuf b = {0};
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    snug_sbuf_puts(&b, "a");
    snug_sbuf_printf(&b, "<%s|%d>", big, 42);
    CHECK(!b.oom && b.len == 1 + 1 + 2999 + 4 && b.data[b.len] == 0);
    CHECK(b.data[0] == 'a' && b.data[1] == '<' && !strcmp(b.data + b.len - 4, "|42>"));
    size_t n = 0;
    char *t = snug_sbuf_take(&b, &n);
    CHECK(t && n == 3005 && b.data == NULL);
    snug_free(t);
}

int main(void) {
    test_sbuf();
    struct snug_err err = {0};
    struct snug_arena a;
    CHECK(snug_arena_init(&a, "test", 1000, &err) == SNUG_OK);
    void *p = snug_arena_alloc(&a, 10, 1);
    void *q = snug_arena_alloc(&a, 100, 64);
    CHECK(p == a.base);
    CHECK(((uintptr_t)q & 63) == 0);
    CHECK(a.used == 164 && a.peak == 164);
    snug_arena_reset_to(&a, 0);
    CHECK(a.used == 0 && a.peak == 164);
    snug_arena_free(&a);

    CHECK(snug_err_set(&err, SNUG_ERR_FORMAT, "key %s", "x") == SNUG_ERR_FORMAT);
    snug_err_prefix(&err, "file %s", "m.gguf");
    CHECK(!strcmp(err.msg, "file m.gguf: key x"));

    uint64_t c0 = snug_alloc_count();
    void *m = snug_malloc(5);
    CHECK(snug_alloc_count() == c0 + 1);
    snug_free(m);

    uint64_t r;
    CHECK(!snug_mul_u64(UINT64_MAX / 2, 3, &r));
    CHECK(snug_mul_u64(1u << 20, 1u << 20, &r) && r == (1ull << 40));
    CHECK(!snug_add_u64(UINT64_MAX, 1, &r));

    for (int nt = 1; nt <= 4; nt++) {
        struct snug_pool *pool;
        CHECK(snug_pool_init(&pool, nt, &err) == SNUG_OK);
        CHECK(snug_pool_size(pool) == nt);
        static int v[10007];
        long expect = 0;
        for (int i = 0; i < 10007; i++) expect += (v[i] = i % 13);
        uint64_t before = snug_alloc_count();
        for (int rep = 0; rep < 200; rep++) {
            struct sum_ctx c = {v, 10007, 0};
            snug_pool_run(pool, sum_task, &c);
            if (atomic_load(&c.total) != expect) {
                CHECKF(0, "threads %d rep %d: sum %ld != %ld", nt, rep, atomic_load(&c.total),
                       expect);
                break;
            }
        }
        CHECK(snug_alloc_count() == before); /* running tasks allocates nothing */
        snug_pool_free(pool);
    }
    return TEST_DONE();
}
