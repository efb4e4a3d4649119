/* threadpool.c — fixed worker pool (see threadpool.h).
 * Workers wait on a generation counter: snug_pool_run publishes a task, bumps the generation,
 * works as thread 0, then waits until every worker has reported done. Workers spin briefly
 * before sleeping on the condition variable so back-to-back ops (one per layer matmul) do not
 * pay a futex wake-up each time. */
#define _GNU_SOURCE
#include "threadpool.h"

#include "core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

struct snug_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_work;
    pthread_cond_t cv_done;
    atomic_uint gen;    /* bumped once per task */
    atomic_int pending; /* workers still running the current task */
    atomic_bool stop;
    snug_task_fn fn;
    void *ctx;
};

struct worker_arg {
    struct snug_pool *pool;
    int ith;
};

/* Polls (each with a `pause`) of the generation counter before sleeping, about 0.2 ms here: a
 * decode step runs hundreds of small products with single-threaded work between them, and a
 * worker that slept costs a futex wake-up per op. Measured 2026-12-01, 2 threads: 20000 polls
 * without pause gave MoE Q4_K_M tg 50 t/s; 200000 without pause 75 t/s but pp512 fell 19%
 * (the poll loop starves the working thread's core); 4000 with pause 75 t/s and pp512 kept
 * (docs/perf/cpu.md). */
enum { SPIN_ITERS = 4000 };

/* A polite poll: `pause` lets a sibling hyperthread (or the vCPU's host core) run the thread
 * that has the work instead of this loop. */
static inline void spin_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *p) {
    struct worker_arg *wa = p;
    struct snug_pool *pool = wa->pool;
    int ith = wa->ith;
    snug_free(wa);
    unsigned seen = 0; /* the generation at creation: no task can precede the pool */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&pool->gen, memory_order_acquire)) == seen &&
               !atomic_load(&pool->stop) && spins < SPIN_ITERS)
            spins++, spin_pause();
        if (g == seen && !atomic_load(&pool->stop)) {
            pthread_mutex_lock(&pool->mu);
            while ((g = atomic_load(&pool->gen)) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv_work, &pool->mu);
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load(&pool->stop)) break;
        seen = g;
        pool->fn(pool->ctx, ith, pool->n);
        if (atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->cv_done);
            pthread_mutex_unlock(&pool->mu);
        }
    }
    return NULL;
}

int snug_pool_init(struct snug_pool **out, int n_threads, struct snug_err *err) {
    *out = NULL;
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    if (n_threads > 512)
        return snug_err_set(err, SNUG_ERR_INVALID, "thread count %d is above 512", n_threads);
    struct snug_pool *pool = snug_calloc(1, sizeof *pool);
    if (!pool) return snug_err_set(err, SNUG_ERR_NOMEM, "thread pool: out of memory");
    pool->n = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv_work, NULL);
    pthread_cond_init(&pool->cv_done, NULL);
    atomic_init(&pool->gen, 0);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->stop, false);
    pool->threads = snug_calloc((size_t)n_threads, sizeof(pthread_t));
    if (!pool->threads) {
        snug_pool_free(pool);
        return snug_err_set(err, SNUG_ERR_NOMEM, "thread pool: out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = snug_malloc(sizeof *wa);
        if (!wa) {
            pool->n = i;
            snug_pool_free(pool);
            return snug_err_set(err, SNUG_ERR_NOMEM, "thread pool: out of memory");
        }
        wa->pool = pool;
        wa->ith = i;
        if (pthread_create(&pool->threads[i], NULL, worker_main, wa) != 0) {
            snug_free(wa);
            pool->n = i;
            snug_pool_free(pool);
            return snug_err_set(err, SNUG_ERR_IO, "thread pool: cannot start thread %d", i);
        }
    }
    *out = pool;
    return SNUG_OK;
}

void snug_pool_free(struct snug_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, true);
    pthread_cond_broadcast(&pool->cv_work);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n; i++)
        if (pool->threads && pool->threads[i]) pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv_work);
    pthread_cond_destroy(&pool->cv_done);
    snug_free(pool->threads);
    snug_free(pool);
}

int snug_pool_size(const struct snug_pool *pool) {
    return pool ? pool->n : 1;
}

void snug_pool_run(struct snug_pool *pool, snug_task_fn fn, void *ctx) {
    if (!pool || pool->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store(&pool->pending, pool->n - 1);
    pthread_mutex_lock(&pool->mu);
    atomic_fetch_add_explicit(&pool->gen, 1, memory_order_release);
    pthread_cond_broadcast(&pool->cv_work);
    pthread_mutex_unlock(&pool->mu);
    fn(ctx, 0, pool->n);
    int spins = 0;
    while (atomic_load_explicit(&pool->pending, memory_order_acquire) != 0 && spins < SPIN_ITERS)
        spins++, spin_pause();
    if (atomic_load(&pool->pending) != 0) {
        pthread_mutex_lock(&pool->mu);
        while (atomic_load(&pool->pending) != 0) pthread_cond_wait(&pool->cv_done, &pool->mu);
        pthread_mutex_unlock(&pool->mu);
    }
}
