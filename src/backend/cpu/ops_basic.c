/* ops_basic.c — the cheap per-row ops of ops.h: rmsnorm, l2norm, NeoX partial rotary, SwiGLU,
 * the gated RMSNorm of the DeltaNet output and the causal depthwise conv + SiLU.
 * These are memory-bound and small next to the matmuls, so they run on the calling thread.
 * Invariant: nothing allocates; every op reads its inputs fully before writing an aliased output
 * row. Read next: ops_matmul.c, then ops_delta.c. */
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_util.h"
#include "core/core.h"

/* RMSNorm of each of T rows: y = x / sqrt(mean(x²) + eps) · w (spec §2.3; w NULL = 1). */
SNUG_OPS_CLONES
void snug_op_rmsnorm(const float *x, const float *w, float eps, int64_t T, int64_t n, float *y) {
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * n;
        float *yr = y + t * n;
        float ss = snug_ops_dot(xr, xr, n);
        float s = 1.0f / sqrtf(ss / (float)n + eps);
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

/* In-place L2 normalisation of each row: x / sqrt(Σx² + eps) (spec §2.5 step 6). */
SNUG_OPS_CLONES
void snug_op_l2norm(float *x, int64_t rows, int64_t n, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        float *xr = x + r * n;
        float s = 1.0f / sqrtf(snug_ops_dot(xr, xr, n) + eps);
        snug_ops_scale(xr, s, n);
    }
}

/* NeoX ("rotate half") rotary embedding on the first n_rot dims of every head (spec §2.4
 * step 3): for i < n_rot/2, θ = pos · base^(−2i/n_rot), and the pair (x_i, x_{i+n_rot/2}) is
 * rotated by θ. The angle and its cos/sin are computed in double once per (token, i) and
 * applied to all heads, so long positions keep full float accuracy. */
SNUG_OPS_CLONES
void snug_op_rope_neox(float *x, int64_t T, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                       const int32_t *pos, float base) {
    SNUG_ASSERT(n_rot <= head_dim && n_rot % 2 == 0);
    int64_t half = n_rot / 2;
    for (int64_t t = 0; t < T; t++) {
        float *xt = x + t * n_heads * head_dim;
        for (int64_t i = 0; i < half; i++) {
            double theta = (double)pos[t] * pow((double)base, -2.0 * (double)i / (double)n_rot);
            float c = (float)cos(theta), s = (float)sin(theta);
            for (int64_t h = 0; h < n_heads; h++) {
                float *xh = xt + h * head_dim;
                float a = xh[i], b = xh[i + half];
                xh[i] = a * c - b * s;
                xh[i + half] = b * c + a * s;
            }
        }
    }
}

/* y = silu(gate) ⊙ up, elementwise; y may alias gate or up (each element is read first). */
SNUG_OPS_CLONES
void snug_op_swiglu(const float *gate, const float *up, int64_t n, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = snug_silu(gate[i]) * up[i];
}

/* Gated RMSNorm per value head (spec §2.3, linear_attn.norm): y = w · rmsnorm(o) · silu(z).
 * y may alias o or z. */
SNUG_OPS_CLONES
void snug_op_gated_rmsnorm(const float *o, const float *z, const float *w, float eps, int64_t T,
                           int64_t Nv, int64_t dv, float *y) {
    for (int64_t r = 0; r < T * Nv; r++) {
        const float *or_ = o + r * dv, *zr = z + r * dv;
        float *yr = y + r * dv;
        float s = 1.0f / sqrtf(snug_ops_dot(or_, or_, dv) / (float)dv + eps);
        for (int64_t i = 0; i < dv; i++) yr[i] = w[i] * (or_[i] * s) * snug_silu(zr[i]);
    }
}

/* Causal depthwise conv1d + SiLU (spec §2.5 step 2). Input position p of the window is the
 * new row x[p] for p >= 0 and the carried state row conv_state[K-1+p] for p < 0. The state
 * is updated to the last K-1 inputs at the end. y must not overlap x or conv_state. */
SNUG_OPS_CLONES
void snug_op_conv_silu(const float *x, int64_t T, int64_t C, int64_t K, const float *w,
                       float *conv_state, float *y) {
    SNUG_ASSERT(K >= 1);
    for (int64_t t = 0; t < T; t++) {
        float *yt = y + t * C;
        for (int64_t c = 0; c < C; c++) yt[c] = 0.0f;
        for (int64_t j = 0; j < K; j++) {
            int64_t p = t - (K - 1) + j;
            const float *in = p >= 0 ? x + p * C : conv_state + (K - 1 + p) * C;
            for (int64_t c = 0; c < C; c++) yt[c] = SNUG_FMA(w[c * K + j], in[c], yt[c]);
        }
        for (int64_t c = 0; c < C; c++) yt[c] = snug_silu(yt[c]);
    }
    /* New state: the last K-1 rows of (old state ++ x), oldest first. */
    int64_t keep = K - 1;
    if (keep == 0) return;
    if (T >= keep) {
        memcpy(conv_state, x + (T - keep) * C, (size_t)(keep * C) * sizeof(float));
    } else {
        memmove(conv_state, conv_state + T * C, (size_t)((keep - T) * C) * sizeof(float));
        memcpy(conv_state + (keep - T) * C, x, (size_t)(T * C) * sizeof(float));
    }
}
