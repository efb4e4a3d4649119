/* threadpool.h — a fixed pool of worker threads created once; every heavy op runs through
 * snug_pool_run. Invariant: no thread is created or destroyed after snug_pool_init, and
 * snug_pool_run allocates nothing. The caller's thread takes part as thread 0.
 * Read next: src/backend/cpu/ops.h (the ops that use it). */
#ifndef SNUG_THREADPOOL_H
#define SNUG_THREADPOOL_H

#include "snug.h"

struct snug_pool;

/* The task: called once on each of the nth threads with ith = 0..nth-1. */
typedef void (*snug_task_fn)(void *ctx, int ith, int nth);

/* Create a pool of n_threads (>= 1; 0 = number of online CPUs). */
int snug_pool_init(struct snug_pool **out, int n_threads, struct snug_err *err);
void snug_pool_free(struct snug_pool *pool);
int snug_pool_size(const struct snug_pool *pool);

/* Run fn(ctx, ith, nth) on every thread of the pool (the caller is ith 0) and return when
 * all have finished. pool may be NULL: then fn(ctx, 0, 1) runs on the caller. */
void snug_pool_run(struct snug_pool *pool, snug_task_fn fn, void *ctx);

/* Split [0, n) into nth near-equal ranges; thread ith gets [*lo, *hi). */
static inline void snug_split_range(long n, int ith, int nth, long *lo, long *hi) {
    long per = n / nth, rem = n % nth;
    *lo = ith * per + (ith < rem ? ith : rem);
    *hi = *lo + per + (ith < rem ? 1 : 0);
}

#endif /* SNUG_THREADPOOL_H */
