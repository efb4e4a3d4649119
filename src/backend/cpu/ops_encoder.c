/* ops_encoder.c — the ops of a bidirectional encoder (the vision tower, src/vision/): LayerNorm,
 * the bias + GELU after a product, rotary by a table of angles, and full (unmasked) attention
 * over an image's patches. Semantics: ops.h; the CUDA versions (cuda_encoder.cu) are tested
 * against these. Invariant: nothing allocates (attention's score rows come from `work`); every
 * element is computed by the same code whatever the thread split, so results do not depend on
 * the thread count. Read next: src/vision/vision.c (the caller), ops_basic.c. */
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_util.h"
#include "core/core.h"

#include <math.h>
#include <string.h>

/* Split rows over the pool when there are enough elements (as ops_basic.c does). */
static void enc_run(struct snug_pool *pool, int64_t elems, snug_task_fn fn, void *ctx) {
    if (pool && elems >= SNUG_OP_EWISE_PAR_MIN)
        snug_pool_run(pool, fn, ctx);
    else
        fn(ctx, 0, 1);
}

/* ---- LayerNorm ----------------------------------------------------------------------------- */
struct ln_ctx {
    const float *x, *w, *b;
    float *y;
    float eps;
    int64_t T, n;
};

static void layernorm_task(void *vctx, int ith, int nth) {
    const struct ln_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->T, ith, nth, &lo, &hi);
    int64_t n = c->n;
    for (int64_t t = lo; t < hi; t++) {
        const float *r = c->x + t * n;
        float *y = c->y + t * n;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n; i++) mean += r[i];
        mean /= (double)n;
        for (int64_t i = 0; i < n; i++) var += ((double)r[i] - mean) * ((double)r[i] - mean);
        var /= (double)n;
        float inv = (float)(1.0 / sqrt(var + (double)c->eps)), m = (float)mean;
        for (int64_t i = 0; i < n; i++) y[i] = ((r[i] - m) * inv) * c->w[i] + c->b[i];
    }
}

void snug_op_layernorm(struct snug_pool *pool, const float *x, const float *w, const float *b,
                       float eps, int64_t T, int64_t n, float *y) {
    struct ln_ctx c = {.x = x, .w = w, .b = b, .y = y, .eps = eps, .T = T, .n = n};
    enc_run(pool, T * n, layernorm_task, &c);
}

/* ---- bias + activation --------------------------------------------------------------------- */
struct bias_ctx {
    float *y;
    const float *b;
    int64_t T, n;
    enum snug_act act;
};

static inline float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
static inline float gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}

static void bias_act_task(void *vctx, int ith, int nth) {
    const struct bias_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->T, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        float *y = c->y + t * c->n;
        for (int64_t i = 0; i < c->n; i++) y[i] += c->b[i];
        if (c->act == SNUG_ACT_GELU_TANH)
            for (int64_t i = 0; i < c->n; i++) y[i] = gelu_tanh(y[i]);
        else if (c->act == SNUG_ACT_GELU_ERF)
            for (int64_t i = 0; i < c->n; i++) y[i] = gelu_erf(y[i]);
    }
}

void snug_op_bias_act(struct snug_pool *pool, float *y, const float *b, int64_t T, int64_t n,
                      enum snug_act act) {
    struct bias_ctx c = {.y = y, .b = b, .T = T, .n = n, .act = act};
    enc_run(pool, T * n, bias_act_task, &c);
}

/* ---- rotary by angles ---------------------------------------------------------------------- */
struct rot_ctx {
    float *x;
    const float *ang;
    int64_t stride, T, heads, hd;
};

static void rope_angles_task(void *vctx, int ith, int nth) {
    const struct rot_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->T, ith, nth, &lo, &hi);
    int64_t half = c->hd / 2;
    for (int64_t t = lo; t < hi; t++)
        for (int64_t h = 0; h < c->heads; h++) {
            float *v = c->x + t * c->stride + h * c->hd;
            for (int64_t i = 0; i < half; i++) {
                float a = c->ang[t * half + i], cs = cosf(a), sn = sinf(a);
                float x1 = v[i], x2 = v[i + half];
                v[i] = x1 * cs - x2 * sn;
                v[i + half] = x2 * cs + x1 * sn;
            }
        }
}

void snug_op_rope_angles(struct snug_pool *pool, float *x, int64_t stride, int64_t T,
                         int64_t n_heads, int64_t head_dim, const float *ang) {
    struct rot_ctx c = {
        .x = x, .ang = ang, .stride = stride, .T = T, .heads = n_heads, .hd = head_dim};
    enc_run(pool, T * n_heads * head_dim, rope_angles_task, &c);
}

/* ---- full attention ------------------------------------------------------------------------ */
struct att_ctx {
    const float *q, *k, *v;
    float *out;
    float *scores; /* [nth][T] */
    int64_t stride, T, heads, hd;
    float scale;
};

/* Queries per work item: their dot products share each key's loads (snug_ops_dot_rows, which
 * accumulates every row exactly as snug_ops_dot does) and their outputs each value row's. */
#define ATT_QB 4

SNUG_OPS_CLONES
static void attention_full_task(void *vctx, int ith, int nth) {
    const struct att_ctx *c = vctx;
    int64_t T = c->T, hd = c->hd, st = c->stride, nqb = (T + ATT_QB - 1) / ATT_QB;
    long lo, hi;
    snug_split_range((long)(c->heads * nqb), ith, nth, &lo, &hi);
    float *sc = c->scores + (int64_t)ith * ATT_QB * T; /* [ATT_QB][T] */
    for (int64_t it = lo; it < hi; it++) {
        int64_t h = it / nqb, i0 = (it % nqb) * ATT_QB;
        int nq = (int)SNUG_MIN((int64_t)ATT_QB, T - i0);
        const float *q[ATT_QB];
        for (int r = 0; r < nq; r++) q[r] = c->q + (i0 + r) * st + h * hd;
        for (int64_t j = 0; j < T; j++) {
            float s[ATT_QB];
            snug_ops_dot_rows(q, nq, c->k + j * st + h * hd, hd, s);
            for (int r = 0; r < nq; r++) sc[r * T + j] = s[r] * c->scale;
        }
        double sum[ATT_QB];
        for (int r = 0; r < nq; r++) {
            float *sr = sc + r * T, mx = -INFINITY;
            for (int64_t j = 0; j < T; j++) mx = SNUG_MAX(mx, sr[j]);
            sum[r] = 0;
            for (int64_t j = 0; j < T; j++) sum[r] += sr[j] = expf(sr[j] - mx);
            for (int64_t j = 0; j < T; j++) sr[j] = (float)(sr[j] / sum[r]); /* the weights */
            memset(c->out + (i0 + r) * c->heads * hd + h * hd, 0, (size_t)hd * sizeof(float));
        }
        for (int64_t j = 0; j < T; j++) {
            const float *vv = c->v + j * st + h * hd;
            for (int r = 0; r < nq; r++)
                snug_ops_axpy(c->out + (i0 + r) * c->heads * hd + h * hd, sc[r * T + j], vv, hd);
        }
    }
}

size_t snug_op_attention_full_work_bytes(int64_t T, int n_threads) {
    return (size_t)(n_threads < 1 ? 1 : n_threads) * ATT_QB * (size_t)T * sizeof(float);
}

void snug_op_attention_full(struct snug_pool *pool, const float *q, const float *k, const float *v,
                            int64_t stride, int64_t T, int64_t n_heads, int64_t head_dim,
                            float scale, float *out, void *work) {
    struct att_ctx c = {.q = q,
                        .k = k,
                        .v = v,
                        .out = out,
                        .scores = work,
                        .stride = stride,
                        .T = T,
                        .heads = n_heads,
                        .hd = head_dim,
                        .scale = scale};
    if (pool && T * T * n_heads >= SNUG_OP_EWISE_PAR_MIN)
        snug_pool_run(pool, attention_full_task, &c);
    else
        attention_full_task(&c, 0, 1);
}
