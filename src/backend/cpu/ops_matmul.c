/* ops_matmul.c — y = x · Wᵀ for weights of any computable dtype, threaded over output rows.
 * Prompt chunks (T > SNUG_OP_MATMUL_INT8_MAX_T) of every block type: the activations are
 * transposed once per tile (mm_task_xt) and each thread dequantizes MM_ROWS weight rows at a
 * time into its scratch (vectorised, exact) and multiplies them with the tile (snug_tgemm:
 * vectors along the tokens). Q4_K and Q6_K at the AVX-512 level do the same on 14-bit
 * integers (quant.h snug_i16_*: mm_task_x16 quantizes the tile, mm_task_i16 prepares int16
 * rows and runs vpdpwssd), about 1.6x the float path at float-like accuracy; Q4_K, Q5_K,
 * IQ4_XS and Q3_K, whose accuracy policy allows int8 activations, run the int8 form of it
 * instead (snug_i8_*, vpdpbusd: twice the multiply-adds per instruction).
 * Short chunks and decode: weights with int8 activations under the accuracy policy (quant.h
 * snug_act_int8_use: Q4_K, Q5_K, IQ4_XS, Q3_K by default) quantize the activation rows once per
 * call into `work` and dot each weight row with eight rows at a time (snug_act_dot; one Q4_K decode
 * row takes two weight rows per call, snug_act_dot2, with the one-row values); other block types
 * dot each weight row in place with every row (snug_dot_row), except Q6_K
 * (snug_act_wide_use), whose rows (up to MM_VEC_ROWS) go as 14-bit values in two int8 planes
 * through the int8 kernel (mm_task_wide). F32 weights always dot in place, eight float rows at a
 * time; F16/BF16 too up to SNUG_OP_MATMUL_F16_INPLACE_MAX_T rows (longer chunks widen the rows
 * to float for snug_tgemm, about twice as fast on the vision tower's products). Invariant:
 * allocates nothing; results do not depend on the thread count (each output element is one
 * fixed-order kernel call, whatever rows share the call); a thread's scratch starts on its own
 * cache lines. Read next: src/quant/quant.h (row kernels, snug_tgemm), ops_attention.c. */
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_util.h"
#include "core/core.h"
#include "quant/quant.h"

/* Activation rows quantized per pass: the tile (≈ 1.14 bytes per element per row) stays in L2
 * while every weight row of the thread passes over it; weights are read ceil(T / MM_TILE)
 * times per call. */
#define MM_TILE 64
/* Weight rows dequantized at a time per thread for the float fallback. */
#define MM_ROWS SNUG_TGEMM_MR
/* Floats between the starts of scratch rows beyond n_in (rows 4 KiB apart alias in L1). */
#define MM_PAD 16
/* Bytes of weight rows per block of mm_task_dot (L1 with eight activation rows). */
#define MM_WBYTES ((size_t)16 * 1024)
/* Bytes of float activations per tile of the float fallback (kept in L2 with the scratch). */
#define MM_XBYTES ((size_t)1024 * 1024)
/* Up to this many activation rows, block types with float activations dot each weight row
 * with every row in place (mm_task_vecs) instead of dequantizing it first. */
#define MM_VEC_ROWS 8

struct mm_ctx {
    uint32_t type;
    const uint8_t *w;
    size_t row_bytes;
    int64_t n_in, n_out, T;
    const float *x;
    float *y;
    /* quantized path: activation rows t0 .. t0+tt-1 at xq + (t - t0) · xrb */
    uint8_t *xq;
    size_t xrb;
    int64_t t0, tt;
    /* float fallback: per-thread scratch */
    uint8_t *scratch;
    size_t per_thread;
    bool i8; /* prompt tiles on int8 activations (snug_i8_*) instead of int16 */
};

/* Bytes of one quantized activation row, whatever the format (A32 or A256), rounded to 64. */
static size_t act_row_max(int64_t n_in) {
    size_t a = (size_t)(n_in / 32) * 36, b = (size_t)(n_in / 256) * 292;
    return SNUG_ALIGN_UP(SNUG_MAX(a, b), 64);
}
/* Per-thread float scratch stride in bytes, a multiple of 64. */
static size_t mm_stride(int64_t n_in) {
    return SNUG_ALIGN_UP((size_t)(n_in + MM_PAD) * MM_ROWS * sizeof(float), 64);
}

static size_t xt_bytes(int64_t n_in);

size_t snug_op_matmul_work_bytes(int64_t n_in, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    size_t shared = SNUG_MAX(act_row_max(n_in) * MM_TILE, xt_bytes(n_in));
    return shared + mm_stride(n_in) * (size_t)n_threads + 128;
}

/* Threads quantize their share of the tile's activation rows. */
static void mm_task_quant(void *vctx, int ith, int nth) {
    const struct mm_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->tt, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++)
        snug_act_quantize(c->type, c->x + (c->t0 + i) * c->n_in, c->xq + (size_t)i * c->xrb,
                          c->n_in);
}

/* Each thread: its weight rows × the tile's activation rows, eight activation rows per call.
 * The rows go in blocks of about MM_WBYTES of weights: for each group of eight activation rows,
 * every weight row of the block, so both the block and the group are reused from L1 (the
 * group once per weight row, the block once per group) instead of streaming the whole tile
 * from L2 for every weight row. */
static void mm_task_dot(void *vctx, int ith, int nth) {
    const struct mm_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->n_out, ith, nth, &lo, &hi);
    long rb = (long)SNUG_MAX((size_t)1, MM_WBYTES / c->row_bytes);
    if (c->tt == 1 && c->type == SNUG_DTYPE_Q4_K) {
        /* decode: two weight rows per call (the same values as one-row calls) */
        float *y = c->y + c->t0 * c->n_out;
        long r = lo;
        for (; r + 1 < hi; r += 2) {
            float o[2];
            snug_act_dot2(c->type, c->w + (size_t)r * c->row_bytes,
                          c->w + (size_t)(r + 1) * c->row_bytes, c->xq, c->n_in, o);
            y[r] = o[0], y[r + 1] = o[1];
        }
        if (r < hi)
            snug_act_dot(c->type, c->w + (size_t)r * c->row_bytes, c->xq, c->xrb, 1, c->n_in,
                         y + r);
        return;
    }
    for (long r0 = lo; r0 < hi; r0 += rb) {
        long r1 = SNUG_MIN(hi, r0 + rb);
        for (int64_t t = 0; t < c->tt; t += SNUG_ACT_MAX_ROWS) {
            int nc = (int)SNUG_MIN((int64_t)SNUG_ACT_MAX_ROWS, c->tt - t);
            for (long r = r0; r < r1; r++) {
                float o[SNUG_ACT_MAX_ROWS];
                snug_act_dot(c->type, c->w + (size_t)r * c->row_bytes, c->xq + (size_t)t * c->xrb,
                             c->xrb, nc, c->n_in, o);
                for (int k = 0; k < nc; k++) c->y[(c->t0 + t + k) * c->n_out + r] = o[k];
            }
        }
    }
}

/* Decode form with float activations for block types: y[r] = snug_dot_row(W_r, x). */
static void mm_task_vec(void *vctx, int ith, int nth) {
    const struct mm_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->n_out, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++)
        c->y[r] = snug_dot_row(c->type, c->w + (size_t)r * c->row_bytes, c->x, c->n_in);
}

/* Few rows with float activations for block types (a batched decode across sequences,
 * T <= MM_VEC_ROWS): each weight row is dotted with every activation row while it sits in L1,
 * so the weights stream from memory once for all T rows, and every output is the same
 * snug_dot_row call as the one-row form (bit-identical to T separate decodes). */
static void mm_task_vecs(void *vctx, int ith, int nth) {
    const struct mm_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->n_out, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        const uint8_t *wr = c->w + (size_t)r * c->row_bytes;
        for (int64_t t = 0; t < c->T; t++)
            c->y[t * c->n_out + r] = snug_dot_row(c->type, wr, c->x + t * c->n_in, c->n_in);
    }
}

/* Decode-sized products on 14-bit activations (quant.h snug_act_wide_use): activation row t
 * is two int8 planes at xq + 2t·xrb (high) and + (2t + 1)·xrb (low); each weight row is
 * dotted with all 2T planes (eight per call) while it sits in L1 and y = high + low. Each
 * output is the same computation whatever T, so a batch row equals its decode alone. */
static void mm_task_wide(void *vctx, int ith, int nth) {
    const struct mm_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->n_out, ith, nth, &lo, &hi);
    int np = (int)(2 * c->T);
    for (long r = lo; r < hi; r++) {
        const uint8_t *wr = c->w + (size_t)r * c->row_bytes;
        float o[2 * MM_VEC_ROWS];
        for (int g = 0; g < np; g += SNUG_ACT_MAX_ROWS)
            snug_act_dot(c->type, wr, c->xq + (size_t)g * c->xrb, c->xrb,
                         SNUG_MIN(SNUG_ACT_MAX_ROWS, np - g), c->n_in, o + g);
        for (int64_t t = 0; t < c->T; t++) c->y[t * c->n_out + r] = o[2 * t] + o[2 * t + 1];
    }
}

/* Tokens per transposed activation tile of the float fallback: about MM_XBYTES of floats, a
 * multiple of 48 (the 512-bit snug_tgemm block), at least 48. */
static int64_t xt_tokens(int64_t n_in) {
    int64_t tt = (int64_t)(MM_XBYTES / ((size_t)n_in * sizeof(float))) / 48 * 48;
    return SNUG_MAX((int64_t)48, tt);
}
/* Bytes of the transposed tile; max(MM_XBYTES, 192·n_in) bounds it and grows with n_in, so
 * the work size computed for the largest n_in covers every smaller one. */
static size_t xt_bytes(int64_t n_in) {
    return SNUG_ALIGN_UP(SNUG_MAX(MM_XBYTES, (size_t)n_in * 48 * sizeof(float)), 64);
}

/* Threads transpose their share of the tile's elements k: xt[k·xts + t] = x[t0 + t][k], the
 * columns past tt (up to the next multiple of SNUG_TGEMM_PAD) zero. */
static void mm_task_xt(void *vctx, int ith, int nth) {
    const struct mm_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->n_in, ith, nth, &lo, &hi);
    float *xt = (float *)(void *)c->xq;
    size_t xts = c->xrb;
    /* blocks of 16 elements × all tokens: reads 64-byte pieces of each row, writes rows of xt */
    for (long k0 = lo; k0 < hi; k0 += 16) {
        long k1 = SNUG_MIN(hi, k0 + 16);
        for (int64_t t = 0; t < c->tt; t++) {
            const float *xr = c->x + (c->t0 + t) * c->n_in;
            for (long k = k0; k < k1; k++) xt[(size_t)k * xts + (size_t)t] = xr[k];
        }
        for (long k = k0; k < k1; k++)
            for (size_t t = (size_t)c->tt; t < xts; t++) xt[(size_t)k * xts + t] = 0;
    }
}

/* One weight row to float: f16 / bf16 by the vectorised exact widening (these are the hot ones:
 * every f16 mmproj product), the block types by their dequantizer. */
SNUG_OPS_CLONES
static void widen_row(uint32_t type, const uint8_t *src, float *dst, int64_t n) {
    if (type == SNUG_DTYPE_F16) {
        snug_ops_f16_row(dst, (const uint16_t *)(const void *)src, n);
    } else if (type == SNUG_DTYPE_BF16) {
        const uint16_t *h = (const uint16_t *)(const void *)src;
        uint32_t *d = (uint32_t *)(void *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = (uint32_t)h[i] << 16;
    } else {
        snug_dequantize_row(type, src, dst, n);
    }
}

/* Float fallback for block types without an int8 kernel (and int8-capable types the accuracy
 * policy keeps on float activations). The activations go in tiles of about MM_XBYTES,
 * transposed once per tile (mm_task_xt); per tile, each thread dequantizes its weight rows
 * MM_ROWS at a time into its scratch and multiplies them with the whole tile (snug_tgemm:
 * vectors along the tokens, 8 rows × 48 tokens in registers, no horizontal sums). Weights are
 * dequantized once per tile: ceil(T / tile) times per call. */
static void mm_task_deq(void *vctx, int ith, int nth) {
    const struct mm_ctx *c = vctx;
    int64_t n_in = c->n_in, n_out = c->n_out;
    float *scratch = (float *)(c->scratch + c->per_thread * (size_t)ith);
    long n_blocks = (long)((n_out + MM_ROWS - 1) / MM_ROWS), blo, bhi;
    snug_split_range(n_blocks, ith, nth, &blo, &bhi);
    for (long b = blo; b < bhi; b++) {
        int64_t r0 = (int64_t)b * MM_ROWS;
        int nr = (int)SNUG_MIN((int64_t)MM_ROWS, n_out - r0);
        for (int i = 0; i < nr; i++)
            widen_row(c->type, c->w + (size_t)(r0 + i) * c->row_bytes,
                      scratch + (size_t)i * (n_in + MM_PAD), n_in);
        snug_tgemm(scratch, (size_t)(n_in + MM_PAD), nr, (const float *)(const void *)c->xq, c->xrb,
                   (int)c->tt, n_in, c->y + c->t0 * n_out + r0, (size_t)n_out);
    }
}

/* Q4_K / Q6_K prompts at the AVX-512 level: threads quantize their share of the tile's tokens into
 * the transposed int16 tile (quant.h snug_i16_quant_x); thread 0 also zeroes the padding. */
static void mm_task_x16(void *vctx, int ith, int nth) {
    const struct mm_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->tt, ith, nth, &lo, &hi);
    if (ith == 0) (c->i8 ? snug_i8_pad_x : snug_i16_pad_x)(c->n_in, (int)c->tt, (int)c->xrb, c->xq);
    for (long t = lo; t < hi; t++)
        (c->i8 ? snug_i8_quant_x : snug_i16_quant_x)(c->x + (c->t0 + t) * c->n_in, c->n_in, (int)t,
                                                     (int)c->xrb, c->xq);
}

/* Each thread: its weight rows MM_ROWS at a time, prepared (int16 q·sc and the super-block
 * floats) into its scratch, times the whole int16 tile (snug_i16_gemm). */
static void mm_task_i16(void *vctx, int ith, int nth) {
    const struct mm_ctx *c = vctx;
    int64_t n_in = c->n_in, n_out = c->n_out;
    uint8_t *scratch = c->scratch + c->per_thread * (size_t)ith;
    size_t prb = c->i8 ? snug_i8_row_bytes(n_in) : snug_i16_row_bytes(n_in);
    long n_blocks = (long)((n_out + MM_ROWS - 1) / MM_ROWS), blo, bhi;
    snug_split_range(n_blocks, ith, nth, &blo, &bhi);
    for (long b = blo; b < bhi; b++) {
        int64_t r0 = (int64_t)b * MM_ROWS;
        int nr = (int)SNUG_MIN((int64_t)MM_ROWS, n_out - r0);
        for (int i = 0; i < nr; i++) {
            const uint8_t *wr = c->w + (size_t)(r0 + i) * c->row_bytes;
            if (c->i8)
                snug_i8_prep(c->type, wr, scratch + (size_t)i * prb, n_in);
            else
                snug_i16_prep(c->type, wr, scratch + (size_t)i * prb, n_in);
        }
        if (c->i8)
            snug_i8_gemm(c->type, scratch, prb, nr, c->xq, (int)c->xrb, (int)c->tt, n_in,
                         c->y + c->t0 * n_out + r0, (size_t)n_out);
        else
            snug_i16_gemm(c->type, scratch, prb, nr, c->xq, (int)c->xrb, (int)c->tt, n_in,
                          c->y + c->t0 * n_out + r0, (size_t)n_out);
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
    bool int8 = snug_act_int8_use(type) && T <= SNUG_OP_MATMUL_INT8_MAX_T;
    uint32_t at = int8 ? snug_act_type(type) : SNUG_DTYPE_F32;
    bool float_w = type == SNUG_DTYPE_F32 || type == SNUG_DTYPE_F16 || type == SNUG_DTYPE_BF16;
    if (!int8 && T <= MM_VEC_ROWS && work != NULL && snug_act_wide_use(type)) {
        /* T ≤ 8 rows: 2T planes fit the quantized-tile space (MM_TILE rows) */
        c.xq = (uint8_t *)SNUG_ALIGN_UP((uintptr_t)work, 64);
        c.xrb = snug_act_row_bytes(type, n_in);
        for (int64_t t = 0; t < T; t++)
            snug_act_quantize_wide(type, x + t * n_in, c.xq + (size_t)(2 * t) * c.xrb, c.xrb, n_in);
        snug_pool_run(pool, mm_task_wide, &c);
        return;
    }
    if (at == SNUG_DTYPE_F32 && !float_w && (T == 1 || work == NULL)) {
        for (int64_t t = 0; t < T; t++) {
            c.x = x + t * n_in;
            c.y = y + t * n_out;
            snug_pool_run(pool, mm_task_vec, &c);
        }
        return;
    }
    if (at == SNUG_DTYPE_F32 && !float_w && T <= MM_VEC_ROWS) {
        snug_pool_run(pool, mm_task_vecs, &c);
        return;
    }
    /* f16 / bf16 weights in long prompts: widened to float rows (exact) for the register-blocked
     * tile product below, as the block types are; shorter ones dot in place */
    if (float_w && type != SNUG_DTYPE_F32 && T > SNUG_OP_MATMUL_F16_INPLACE_MAX_T && work != NULL)
        float_w = false;
    if (at == SNUG_DTYPE_F32 && float_w) {
        /* float activations used in place, MM_TILE rows per pass */
        c.xrb = (size_t)n_in * sizeof(float);
        for (c.t0 = 0; c.t0 < T; c.t0 += MM_TILE) {
            c.tt = SNUG_MIN((int64_t)MM_TILE, T - c.t0);
            c.xq = (uint8_t *)(uintptr_t)(x + c.t0 * n_in);
            snug_pool_run(pool, mm_task_dot, &c);
            c.xq = NULL;
        }
        return;
    }
    SNUG_ASSERT(work != NULL); /* (only T == 1 with float activations may run without) */
    uint8_t *base = (uint8_t *)SNUG_ALIGN_UP((uintptr_t)work, 64);
    if (at == SNUG_DTYPE_F32) {
        c.scratch = base + SNUG_MAX(act_row_max(n_in) * MM_TILE, xt_bytes(n_in));
        c.xq = base;
        int64_t tile = xt_tokens(n_in);
        /* Q4_K, Q5_K, IQ4_XS, Q3_K under the int8 policy: the int8 tile (vpdpbusd, twice the
         * multiply-adds per instruction of the int16 one) */
        c.i8 = n_in % 256 == 0 && snug_i8_supports(type) && snug_act_int8_use(type);
        if (c.i8 || (n_in % 256 == 0 && snug_i16_supports(type))) {
            /* the int16 tile (≈ 2.14 bytes per element; int8 ≈ 1.14) takes as many tokens
             * (multiples of 48) as fit where the float tile goes, the prepared rows (≈ 2
             * bytes per element; int8 ≈ 1.27) fit where the float rows go */
            tile = (int64_t)(xt_bytes(n_in) /
                             (c.i8 ? snug_i8_x_bytes(n_in, 48) : snug_i16_x_bytes(n_in, 48))) *
                   48;
            for (c.t0 = 0; c.t0 < T; c.t0 += tile) {
                c.tt = SNUG_MIN(tile, T - c.t0);
                c.xrb = SNUG_ALIGN_UP((size_t)c.tt, SNUG_TGEMM_PAD);
                snug_pool_run(pool, mm_task_x16, &c);
                snug_pool_run(pool, mm_task_i16, &c);
            }
            return;
        }
        for (c.t0 = 0; c.t0 < T; c.t0 += tile) {
            c.tt = SNUG_MIN(tile, T - c.t0);
            c.xrb = SNUG_ALIGN_UP((size_t)c.tt, SNUG_TGEMM_PAD);
            snug_pool_run(pool, mm_task_xt, &c);
            snug_pool_run(pool, mm_task_deq, &c);
        }
        return;
    }
    c.xq = base;
    c.xrb = snug_act_row_bytes(type, n_in);
    for (c.t0 = 0; c.t0 < T; c.t0 += MM_TILE) {
        c.tt = SNUG_MIN((int64_t)MM_TILE, T - c.t0);
        if (c.tt == 1)
            mm_task_quant(&c, 0, 1); /* one row: not worth waking the pool */
        else
            snug_pool_run(pool, mm_task_quant, &c);
        snug_pool_run(pool, mm_task_dot, &c);
    }
}
