/* ops_basic.c — the cheap element-wise and per-row ops of ops.h: rmsnorm, l2norm, NeoX partial
 * rotary, SwiGLU, the gated RMSNorm of the DeltaNet output, the causal depthwise conv + SiLU,
 * the sigmoid gate of the attention output and the residual / MoE adds.
 * They are memory-bound and small next to the matmuls: a call with fewer than
 * SNUG_OP_EWISE_PAR_MIN elements (every decode step) runs on the calling thread; a prompt chunk
 * splits its rows (channels for the conv) over the pool. Each element is computed by the same
 * code whatever the split, so results do not depend on the thread count.
 * Invariant: nothing allocates; every op reads its inputs fully before writing an aliased output
 * row (block). Read next: ops_util.h (snug_ops_expf), ops_matmul.c, then ops_delta.c. */
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_util.h"
#include "core/core.h"

/* Run fn over the pool when the op touches at least SNUG_OP_EWISE_PAR_MIN elements, else on
 * the calling thread (no wake-up of the workers for a decode-sized op). */
static void ew_run(struct snug_pool *pool, int64_t elems, snug_task_fn fn, void *ctx) {
    if (pool && elems >= SNUG_OP_EWISE_PAR_MIN)
        snug_pool_run(pool, fn, ctx);
    else
        fn(ctx, 0, 1);
}

/* Thread ith's share of n items handed out in units of `unit` items (the last unit may be
 * short), so flat splits start on cache-line (and vector-block) boundaries. */
static void ew_split(int64_t n, int64_t unit, int ith, int nth, int64_t *lo, int64_t *hi) {
    long ulo, uhi;
    snug_split_range((long)((n + unit - 1) / unit), ith, nth, &ulo, &uhi);
    *lo = SNUG_MIN((int64_t)ulo * unit, n);
    *hi = SNUG_MIN((int64_t)uhi * unit, n);
}

/* Floats per unit of the flat splits: one 64-byte line. */
#define EW_UNIT 16

/* ---- rmsnorm, l2norm ------------------------------------------------------------------------ */

struct norm_ctx {
    const float *x, *w;
    float *y;
    float eps;
    int64_t rows, n;
};

/* RMSNorm of rows [lo, hi): y = x / sqrt(mean(x²) + eps) · w (docs/qwen35.md §2.3; w NULL = 1). */
SNUG_OPS_CLONES
static void rmsnorm_task(void *vctx, int ith, int nth) {
    const struct norm_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->rows, ith, nth, &lo, &hi);
    int64_t n = c->n;
    for (int64_t t = lo; t < hi; t++) {
        const float *xr = c->x + t * n, *w = c->w;
        float *yr = c->y + t * n;
        float ss = snug_ops_dot(xr, xr, n);
        float s = 1.0f / sqrtf(ss / (float)n + c->eps);
        int64_t i = 0;
        if (w) { /* constant-trip blocks so -O2 vectorises (see ops_util.h) */
            for (; i + SNUG_OPS_BLK <= n; i += SNUG_OPS_BLK)
                for (int j = 0; j < SNUG_OPS_BLK; j++) yr[i + j] = xr[i + j] * s * w[i + j];
            for (; i < n; i++) yr[i] = xr[i] * s * w[i];
        } else {
            for (; i + SNUG_OPS_BLK <= n; i += SNUG_OPS_BLK)
                for (int j = 0; j < SNUG_OPS_BLK; j++) yr[i + j] = xr[i + j] * s;
            for (; i < n; i++) yr[i] = xr[i] * s;
        }
    }
}

void snug_op_rmsnorm(struct snug_pool *pool, const float *x, const float *w, float eps, int64_t T,
                     int64_t n, float *y) {
    struct norm_ctx c = {.x = x, .w = w, .y = y, .eps = eps, .rows = T, .n = n};
    ew_run(pool, T * n, rmsnorm_task, &c);
}

/* In-place L2 normalisation of rows [lo, hi): x / sqrt(Σx² + eps) (docs/qwen35.md §2.5 step 6). */
SNUG_OPS_CLONES
static void l2norm_task(void *vctx, int ith, int nth) {
    const struct norm_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        float *xr = c->y + r * c->n;
        float s = 1.0f / sqrtf(snug_ops_dot(xr, xr, c->n) + c->eps);
        snug_ops_scale(xr, s, c->n);
    }
}

void snug_op_l2norm(struct snug_pool *pool, float *x, int64_t rows, int64_t n, float eps) {
    struct norm_ctx c = {.y = x, .eps = eps, .rows = rows, .n = n};
    ew_run(pool, rows * n, l2norm_task, &c);
}

/* ---- rope ----------------------------------------------------------------------------------- */

struct rope_ctx {
    float *x;
    int64_t T, n_heads, head_dim, n_rot;
    const int32_t *pos;  /* [T]: one position per token, or NULL ... */
    const int32_t *pos3; /* ... [T][3]: (t, h, w) per token, pair i's from axis[i] */
    uint8_t axis[SNUG_ROPE_MAX_PAIRS];
    float base;
};

/* NeoX ("rotate half") rotary embedding of tokens [lo, hi) on the first n_rot dims of every
 * head (docs/qwen35.md §2.4 step 3): for i < n_rot/2, θ = pos · base^(−2i/n_rot), and the pair
 * (x_i, x_{i+n_rot/2}) is rotated by θ. The angle and its cos/sin are computed in double once
 * per (token, i) and applied to all heads, so long positions keep full float accuracy. */
SNUG_OPS_CLONES
static void rope_task(void *vctx, int ith, int nth) {
    const struct rope_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->T, ith, nth, &lo, &hi);
    int64_t half = c->n_rot / 2, hd = c->head_dim;
    for (int64_t t = lo; t < hi; t++) {
        float *xt = c->x + t * c->n_heads * hd;
        for (int64_t i = 0; i < half; i++) {
            int32_t p = c->pos3 ? c->pos3[t * 3 + c->axis[i]] : c->pos[t];
            double theta = (double)p * pow((double)c->base, -2.0 * (double)i / (double)c->n_rot);
            float cs = (float)cos(theta), sn = (float)sin(theta);
            for (int64_t h = 0; h < c->n_heads; h++) {
                float *xh = xt + h * hd;
                float a = xh[i], b = xh[i + half];
                xh[i] = a * cs - b * sn;
                xh[i + half] = b * cs + a * sn;
            }
        }
    }
}

void snug_op_rope_neox(struct snug_pool *pool, float *x, int64_t T, int64_t n_heads,
                       int64_t head_dim, int64_t n_rot, const int32_t *pos, float base) {
    SNUG_ASSERT(n_rot <= head_dim && n_rot % 2 == 0);
    struct rope_ctx c = {.x = x,
                         .T = T,
                         .n_heads = n_heads,
                         .head_dim = head_dim,
                         .n_rot = n_rot,
                         .pos = pos,
                         .base = base};
    ew_run(pool, T * n_heads * head_dim, rope_task, &c);
}

/* Interleaved M-RoPE (Qwen3-VL / Qwen3.5; transformers' `apply_interleaved_mrope` in
 * models/qwen3_5/modeling_qwen3_5.py): frequency index i takes the height position when
 * i % 3 == 1 and i < 3·sections[1], the width position when i % 3 == 2 and i < 3·sections[2],
 * else the temporal one. The rotation itself is rope_task's, so with t = h = w the result is
 * snug_op_rope_neox's bit for bit. */
void snug_op_rope_mrope(struct snug_pool *pool, float *x, int64_t T, int64_t n_heads,
                        int64_t head_dim, int64_t n_rot, const int32_t *pos3,
                        const uint32_t sections[3], float base) {
    SNUG_ASSERT(n_rot <= head_dim && n_rot % 2 == 0 && n_rot / 2 <= SNUG_ROPE_MAX_PAIRS);
    struct rope_ctx c = {.x = x,
                         .T = T,
                         .n_heads = n_heads,
                         .head_dim = head_dim,
                         .n_rot = n_rot,
                         .pos3 = pos3,
                         .base = base};
    for (int64_t i = 0; i < n_rot / 2; i++) {
        uint8_t a = 0;
        if (i % 3 == 1 && i < 3 * (int64_t)sections[1])
            a = 1;
        else if (i % 3 == 2 && i < 3 * (int64_t)sections[2])
            a = 2;
        c.axis[i] = a;
    }
    ew_run(pool, T * n_heads * head_dim, rope_task, &c);
}

/* ---- flat element-wise: swiglu, sigmoid_mul, add -------------------------------------------- */

enum ew_kind { EW_SWIGLU, EW_SIGMOID_MUL, EW_ADD };

struct flat_ctx {
    enum ew_kind kind;
    const float *a, *b;
    float *y;
    int64_t n;
};

/* y[i] = f(a[i], b[i]) over [lo, hi) for one kind. The block is computed into a local array
 * and then stored, so y may alias a or b and the block still vectorises (a store through a
 * pointer that may alias the inputs would not, at -O2); the tail runs the same expression. */
#define EW_FLAT_LOOP(EXPR)                                                                         \
    do {                                                                                           \
        int64_t i = lo;                                                                            \
        for (; i + SNUG_OPS_BLK <= hi; i += SNUG_OPS_BLK) {                                        \
            float tmp[SNUG_OPS_BLK];                                                               \
            for (int j = 0; j < SNUG_OPS_BLK; j++) {                                               \
                float av = a[i + j], bv = b[i + j];                                                \
                tmp[j] = (EXPR);                                                                   \
            }                                                                                      \
            for (int j = 0; j < SNUG_OPS_BLK; j++) y[i + j] = tmp[j];                              \
        }                                                                                          \
        for (; i < hi; i++) {                                                                      \
            float av = a[i], bv = b[i];                                                            \
            y[i] = (EXPR);                                                                         \
        }                                                                                          \
    } while (0)

SNUG_OPS_CLONES
static void flat_task(void *vctx, int ith, int nth) {
    const struct flat_ctx *c = vctx;
    int64_t lo, hi;
    ew_split(c->n, EW_UNIT, ith, nth, &lo, &hi);
    const float *a = c->a, *b = c->b;
    float *y = c->y;
    switch (c->kind) {
    case EW_SWIGLU:
        EW_FLAT_LOOP(snug_ops_silu(av) * bv);
        break;
    case EW_SIGMOID_MUL:
        EW_FLAT_LOOP(av * snug_ops_sigmoid(bv));
        break;
    case EW_ADD:
        EW_FLAT_LOOP(av + bv);
        break;
    }
}

void snug_op_swiglu(struct snug_pool *pool, const float *gate, const float *up, int64_t n,
                    float *y) {
    struct flat_ctx c = {.kind = EW_SWIGLU, .a = gate, .b = up, .y = y, .n = n};
    ew_run(pool, n, flat_task, &c);
}

void snug_op_sigmoid_mul(struct snug_pool *pool, const float *x, const float *g, int64_t n,
                         float *y) {
    struct flat_ctx c = {.kind = EW_SIGMOID_MUL, .a = x, .b = g, .y = y, .n = n};
    ew_run(pool, n, flat_task, &c);
}

void snug_op_add(struct snug_pool *pool, float *x, const float *y, int64_t n) {
    struct flat_ctx c = {.kind = EW_ADD, .a = x, .b = y, .y = x, .n = n};
    ew_run(pool, n, flat_task, &c);
}

/* ---- gated rmsnorm -------------------------------------------------------------------------- */

struct grms_ctx {
    const float *o, *z, *w;
    float *y;
    float eps;
    int64_t rows, dv;
};

/* Gated RMSNorm of head rows [lo, hi) (docs/qwen35.md §2.3, linear_attn.norm):
 * y = w · (o · s) · silu(z), s = 1 / sqrt(mean(o²) + eps). y may alias o or z (a block of
 * SNUG_OPS_BLK is read before it is written). */
SNUG_OPS_CLONES
static void grms_task(void *vctx, int ith, int nth) {
    const struct grms_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->rows, ith, nth, &lo, &hi);
    int64_t dv = c->dv;
    const float *w = c->w;
    for (int64_t r = lo; r < hi; r++) {
        const float *or_ = c->o + r * dv, *zr = c->z + r * dv;
        float *yr = c->y + r * dv;
        float s = 1.0f / sqrtf(snug_ops_dot(or_, or_, dv) / (float)dv + c->eps);
        int64_t i = 0;
        for (; i + SNUG_OPS_BLK <= dv; i += SNUG_OPS_BLK) {
            float tmp[SNUG_OPS_BLK];
            for (int j = 0; j < SNUG_OPS_BLK; j++)
                tmp[j] = w[i + j] * (or_[i + j] * s) * snug_ops_silu(zr[i + j]);
            for (int j = 0; j < SNUG_OPS_BLK; j++) yr[i + j] = tmp[j];
        }
        for (; i < dv; i++) yr[i] = w[i] * (or_[i] * s) * snug_ops_silu(zr[i]);
    }
}

void snug_op_gated_rmsnorm(struct snug_pool *pool, const float *o, const float *z, const float *w,
                           float eps, int64_t T, int64_t Nv, int64_t dv, float *y) {
    struct grms_ctx c = {.o = o, .z = z, .w = w, .y = y, .eps = eps, .rows = T * Nv, .dv = dv};
    ew_run(pool, T * Nv * dv, grms_task, &c);
}

/* ---- conv + silu ---------------------------------------------------------------------------- */

struct conv_ctx {
    const float *x, *w;
    float *st, *y;
    int64_t T, C, K;
};

/* Channels per block of the conv: the block's weights are transposed to [K][CONV_CB] on the
 * stack (kernels up to CONV_KMAX taps) so the tap loop runs over contiguous channels. */
#define CONV_CB   256
#define CONV_KMAX 8

/* Causal depthwise conv1d + SiLU for channels [c0, c1) of every token (docs/qwen35.md §2.5 step 2).
 * Input position p of the window is the new row x[p] for p >= 0 and the carried state row
 * st[K-1+p] for p < 0; each output is Σ_j w[c][j]·in_j[c] accumulated from 0 in tap order j,
 * then SiLU. Afterwards the state columns [c0, c1) become the last K-1 inputs. Only the
 * thread's own channels of x, st and y are touched. */
SNUG_OPS_CLONES
static void conv_task(void *vctx, int ith, int nth) {
    const struct conv_ctx *c = vctx;
    int64_t T = c->T, C = c->C, K = c->K, c0, c1;
    ew_split(C, EW_UNIT, ith, nth, &c0, &c1);
    const float *x = c->x, *w = c->w;
    float *st = c->st, *y = c->y;
    for (int64_t b0 = c0; b0 < c1; b0 += CONV_CB) {
        int64_t nb = SNUG_MIN((int64_t)CONV_CB, c1 - b0);
        float wt[CONV_KMAX][CONV_CB];
        if (K <= CONV_KMAX)
            for (int64_t j = 0; j < K; j++)
                for (int64_t l = 0; l < nb; l++) wt[j][l] = w[(b0 + l) * K + j];
        for (int64_t t = 0; t < T; t++) {
            float *yt = y + t * C + b0;
            float acc[CONV_CB];
            for (int64_t l = 0; l < nb; l++) acc[l] = 0.0f;
            for (int64_t j = 0; j < K; j++) {
                int64_t p = t - (K - 1) + j;
                const float *in = (p >= 0 ? x + p * C : st + (K - 1 + p) * C) + b0;
                if (K <= CONV_KMAX) {
                    const float *wj = wt[j];
                    int64_t l = 0;
                    for (; l + SNUG_OPS_BLK <= nb; l += SNUG_OPS_BLK)
                        for (int q = 0; q < SNUG_OPS_BLK; q++)
                            acc[l + q] = SNUG_FMA(wj[l + q], in[l + q], acc[l + q]);
                    for (; l < nb; l++) acc[l] = SNUG_FMA(wj[l], in[l], acc[l]);
                } else {
                    for (int64_t l = 0; l < nb; l++)
                        acc[l] = SNUG_FMA(w[(b0 + l) * K + j], in[l], acc[l]);
                }
            }
            int64_t l = 0;
            for (; l + SNUG_OPS_BLK <= nb; l += SNUG_OPS_BLK)
                for (int j = 0; j < SNUG_OPS_BLK; j++) yt[l + j] = snug_ops_silu(acc[l + j]);
            for (; l < nb; l++) yt[l] = snug_ops_silu(acc[l]);
        }
    }
    /* New state columns: the last K-1 rows of (old state ++ x), oldest first. */
    int64_t keep = K - 1;
    size_t seg = (size_t)(c1 - c0) * sizeof(float);
    if (seg == 0) return;
    for (int64_t i = 0; i < keep; i++) {
        int64_t p = T - keep + i; /* the input row that becomes state row i */
        const float *src = p >= 0 ? x + p * C : st + (K - 1 + p) * C;
        if (src != st + i * C) memcpy(st + i * C + c0, src + c0, seg); /* src row > i: done */
    }
}

void snug_op_conv_silu(struct snug_pool *pool, const float *x, int64_t T, int64_t C, int64_t K,
                       const float *w, float *conv_state, float *y) {
    SNUG_ASSERT(K >= 1);
    struct conv_ctx c = {.x = x, .w = w, .st = conv_state, .y = y, .T = T, .C = C, .K = K};
    ew_run(pool, T * C, conv_task, &c);
}

/* ---- MoE adds ------------------------------------------------------------------------------- */

struct moe_ctx {
    float *y;
    const float *d, *w;
    const int32_t *slot;
    int64_t T, k, H;
};

/* y[i] = y[i] + s·d[i] over n floats, a product then a sum (no FMA: the backend's loops did it
 * that way), through a block buffer so it vectorises without restrict. */
SNUG_OPS_INLINE void add_scaled(float *y, float s, const float *d, int64_t n) {
    int64_t i = 0;
    for (; i + SNUG_OPS_BLK <= n; i += SNUG_OPS_BLK) {
        float tmp[SNUG_OPS_BLK];
        for (int l = 0; l < SNUG_OPS_BLK; l++) tmp[l] = y[i + l] + s * d[i + l];
        for (int l = 0; l < SNUG_OPS_BLK; l++) y[i + l] = tmp[l];
    }
    for (; i < n; i++) y[i] = y[i] + s * d[i];
}

/* Tokens [lo, hi): y_t = Σ_j w[t][j] · d[slot[t][j]], terms added in order j. */
SNUG_OPS_CLONES
static void moe_combine_task(void *vctx, int ith, int nth) {
    const struct moe_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->T, ith, nth, &lo, &hi);
    int64_t H = c->H, k = c->k;
    for (int64_t t = lo; t < hi; t++) {
        float *yr = c->y + t * H;
        memset(yr, 0, (size_t)H * sizeof(float));
        for (int64_t j = 0; j < k; j++)
            add_scaled(yr, c->w[t * k + j], c->d + (int64_t)c->slot[t * k + j] * H, H);
    }
}

void snug_op_moe_combine(struct snug_pool *pool, float *y, const float *d, const int32_t *slot,
                         const float *w, int64_t T, int64_t k, int64_t H) {
    struct moe_ctx c = {.y = y, .d = d, .w = w, .slot = slot, .T = T, .k = k, .H = H};
    ew_run(pool, T * k * H, moe_combine_task, &c);
}

/* Tokens [lo, hi): y_t += σ(gl[t]) · d_t. */
SNUG_OPS_CLONES
static void add_gated_task(void *vctx, int ith, int nth) {
    const struct moe_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->T, ith, nth, &lo, &hi);
    int64_t H = c->H;
    for (int64_t t = lo; t < hi; t++) {
        add_scaled(c->y + t * H, snug_ops_sigmoid(c->w[t]), c->d + t * H, H);
    }
}

void snug_op_add_gated(struct snug_pool *pool, float *y, const float *d, const float *gl, int64_t T,
                       int64_t H) {
    struct moe_ctx c = {.y = y, .d = d, .w = gl, .T = T, .H = H};
    ew_run(pool, T * H, add_gated_task, &c);
}

/* One token's router: softmax over E logits, the k largest (ties to the lower index), weights
 * renormalised to sum 1. */
static void route_token(const float *logits, int64_t E, int64_t k, int32_t *sel, float *w) {
    float mx = logits[0];
    for (int64_t e = 1; e < E; e++) mx = SNUG_MAX(mx, logits[e]);
    double sum = 0;
    for (int64_t e = 0; e < E; e++) sum += exp((double)logits[e] - mx);
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            bool taken = false;
            for (int64_t i = 0; i < j; i++) taken |= sel[i] == e;
            if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
        }
        sel[j] = (int32_t)best;
        w[j] = (float)(exp((double)logits[best] - mx) / sum);
    }
    float ws = 0;
    for (int64_t j = 0; j < k; j++) ws += w[j];
    for (int64_t j = 0; j < k; j++) w[j] /= ws;
}

void snug_op_moe_route(const float *logits, int64_t T, int64_t E, int64_t k, int32_t *sel,
                       int32_t *cnt, float *selw, int32_t *order, int32_t *slot, int32_t *off) {
    for (int64_t t = 0; t < T; t++) route_token(logits + t * E, E, k, sel + t * k, selw + t * k);
    memset(cnt, 0, (size_t)E * sizeof(int32_t));
    for (int64_t i = 0; i < T * k; i++) cnt[sel[i]]++;
    int32_t acc = 0;
    for (int64_t e = 0; e < E; e++) {
        off[e] = acc;
        acc += cnt[e];
        cnt[e] = 0; /* reused as fill counters */
    }
    off[E] = acc;
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < k; j++) {
            int32_t e = sel[t * k + j], s = off[e] + cnt[e]++;
            order[s] = (int32_t)t;
            slot[t * k + j] = s;
        }
}
