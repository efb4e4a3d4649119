/* ops_matmul.c — y = x · Wᵀ for weights of any computable dtype, threaded over output rows.
 * T == 1 (decode): one fused dequantize-dot (snug_dot_row) per weight row.
 * T > 1 (prompt chunk): each thread dequantizes a block of MM_ROWS weight rows into its scratch
 * once and dots them with all T activation rows, so the weights are read once per call.
 * Invariant: allocates nothing; a thread's scratch is MM_ROWS·n_in floats of `work`; results
 * do not depend on the thread count (each output element is one thread's fixed-order sum).
 * Read next: src/quant/quant.h (row kernels), ops_attention.c. */
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_util.h"
#include "core/core.h"
#include "quant/quant.h"

/* Weight rows dequantized at a time per thread: their floats stay in L2 while every activation
 * row streams past them (MM_ROWS·n_in·4 bytes: 128 KiB at n_in = 4096). */
#define MM_ROWS 8

struct mm_ctx {
    uint32_t type;
    const uint8_t *w;
    size_t row_bytes;
    int64_t n_in, n_out, T;
    const float *x;
    float *y;
    uint8_t *work; /* aligned base */
    size_t per_thread;
};

/* Per-thread scratch stride in bytes, a multiple of 64. */
static size_t mm_stride(int64_t n_in) {
    return SNUG_ALIGN_UP((size_t)n_in * MM_ROWS * sizeof(float), 64);
}

size_t snug_op_matmul_work_bytes(int64_t n_in, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    return mm_stride(n_in) * (size_t)n_threads + 64;
}

/* Decode form: y[r] = dot(W_r, x) for this thread's rows. */
static void mm_task_vec(void *vctx, int ith, int nth) {
    const struct mm_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->n_out, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        const void *wr = c->w + (size_t)r * c->row_bytes;
        c->y[r] = c->type == SNUG_DTYPE_F32 ? snug_ops_dot(wr, c->x, c->n_in)
                                            : snug_dot_row(c->type, wr, c->x, c->n_in);
    }
}

/* Prompt form: blocks of MM_ROWS rows, dequantized once, dotted with every activation row
 * (four rows at a time so each activation load feeds four products). */
static void mm_task_mat(void *vctx, int ith, int nth) {
    const struct mm_ctx *c = vctx;
    int64_t n_in = c->n_in, n_out = c->n_out;
    float *scratch = (float *)(c->work + c->per_thread * (size_t)ith);
    long n_blocks = (long)((n_out + MM_ROWS - 1) / MM_ROWS), blo, bhi;
    snug_split_range(n_blocks, ith, nth, &blo, &bhi);
    const float *rows[MM_ROWS];
    for (long b = blo; b < bhi; b++) {
        int64_t r0 = (int64_t)b * MM_ROWS;
        int nr = (int)SNUG_MIN((int64_t)MM_ROWS, n_out - r0);
        for (int i = 0; i < nr; i++) {
            const void *wr = c->w + (size_t)(r0 + i) * c->row_bytes;
            if (c->type == SNUG_DTYPE_F32) {
                rows[i] = wr;
            } else {
                snug_dequantize_row(c->type, wr, scratch + (size_t)i * n_in, n_in);
                rows[i] = scratch + (size_t)i * n_in;
            }
        }
        for (int64_t t = 0; t < c->T; t++) {
            const float *xt = c->x + t * n_in;
            float *yt = c->y + t * n_out + r0;
            int i = 0;
            for (; i + 4 <= nr; i += 4) {
                snug_ops_dot4(rows[i], rows[i + 1], rows[i + 2], rows[i + 3], xt, n_in, yt + i);
            }
            for (; i < nr; i++) yt[i] = snug_ops_dot(rows[i], xt, n_in);
        }
    }
}

/* y[T][n_out] = x[T][n_in] · Wᵀ (see ops.h). */
void snug_op_matmul(struct snug_pool *pool, uint32_t type, const void *w, int64_t n_in,
                    int64_t n_out, const float *x, int64_t T, float *y, void *work) {
    size_t row_bytes = (size_t)snug_dtype_row_bytes(type, (uint64_t)n_in);
    SNUG_ASSERT(row_bytes > 0);
    struct mm_ctx c = {
        .type = type,
        .w = w,
        .row_bytes = row_bytes,
        .n_in = n_in,
        .n_out = n_out,
        .T = T,
        .x = x,
        .y = y,
        .per_thread = mm_stride(n_in),
    };
    if (T == 1) {
        snug_pool_run(pool, mm_task_vec, &c);
        return;
    }
    SNUG_ASSERT(work != NULL);
    c.work = (uint8_t *)SNUG_ALIGN_UP((uintptr_t)work, 64);
    snug_pool_run(pool, mm_task_mat, &c);
}
