/* quant_quantize.c — the encoders: snug_quantize_row for every computable type.
 *
 * The algorithms follow llama.cpp's reference quantizers without an importance matrix
 * (ggml/src/ggml-quants.c: quantize_row_*_ref, make_qkx2_quants, make_qx_quants — read to
 * understand them, re-implemented here in our own words), so a file we write has the same
 * quality as one llama-quantize writes:
 *   Q8_0, Q4_0, Q4_1, Q5_0, Q5_1  one scale (and min) per 32 from the block's extreme values,
 *                                 elements rounded exactly as the reference does;
 *   Q4_K, Q5_K                    per 32-element sub-block, a search over (scale, min) that
 *                                 minimises weighted squared error; then 6-bit sub-block
 *                                 scales/mins relative to two f16 super-scales;
 *   Q6_K                          per 16-element sub-block, a search over symmetric scales
 *                                 weighted by x^2; then 8-bit sub-block scales.
 * Invariant: no allocation (scratch lives on the stack); NaN input never reaches an
 * undefined float->int conversion (every rounding clamps first).
 * Read next: quant_ref.c (the matching decoders and the layouts). */
#include "core/core.h"
#include "quant.h"

#include <math.h>
#include <string.h>

/* ---- small helpers ------------------------------------------------------------------------ */

static inline void wr_f16(uint8_t *p, float f) {
    uint16_t h = snug_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}
static inline float f16_round(float f) {
    return snug_f16_to_f32(snug_f32_to_f16(f));
}

/* Round half to even, then clamp into [lo, hi]. This is what ggml's nearest_int computes for
 * the magnitudes that occur (< 2^22); clamping before converting keeps NaN/inf defined. */
static inline int round_clamp(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo; /* also catches NaN */
    if (v >= (float)hi) return hi;
    return (int)lrintf(v);
}

/* The reference "legacy" quantizers truncate v (>= 0 by construction) toward zero after adding
 * 0.5 / 8.5 / 16.5, i.e. round half up; same here with a clamp to [0, hi]. */
static inline int trunc_clamp(float v, int hi) {
    if (!(v >= 0.f)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* ---- 32-element block types --------------------------------------------------------------- */

/* Q8_0: d = max|x| / 127, q = round-half-away(x / d). */
static void quant_q8_0(const float *x, uint8_t *b) {
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.f, id = d ? 1.f / d : 0.f;
    wr_f16(b, d);
    for (int j = 0; j < 32; j++) {
        float v = roundf(x[j] * id);
        b[2 + j] = (uint8_t)(int8_t)(v >= 127.f ? 127 : v <= -127.f ? -127 : v == v ? (int)v : 0);
    }
}

/* The element with the largest magnitude, keeping its sign (first one on ties). */
static inline float signed_absmax(const float *x, int n) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++)
        if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
    return max;
}

/* Q4_0 / Q5_0: symmetric, d = -max / 2^(bits-1) so the extreme value lands exactly on the
 * level -2^(bits-1) and the asymmetric code range is used on the extreme's side. */
static void quant_q4_0(const float *x, uint8_t *b) {
    float d = signed_absmax(x, 32) / -8.f, id = d ? 1.f / d : 0.f;
    wr_f16(b, d);
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(trunc_clamp(x[j] * id + 8.5f, 15) |
                             trunc_clamp(x[j + 16] * id + 8.5f, 15) << 4);
}

static void quant_q5_0(const float *x, uint8_t *b) {
    float d = signed_absmax(x, 32) / -16.f, id = d ? 1.f / d : 0.f;
    wr_f16(b, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        int q0 = trunc_clamp(x[j] * id + 16.5f, 31), q1 = trunc_clamp(x[j + 16] * id + 16.5f, 31);
        b[6 + j] = (uint8_t)((q0 & 0xf) | (q1 & 0xf) << 4);
        qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++) b[2 + k] = (uint8_t)(qh >> (8 * k));
}

/* Q4_1 / Q5_1: affine, m = min, d = (max - min) / (2^bits - 1). */
static void quant_q4_1(const float *x, uint8_t *b) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < 32; j++) mn = fminf(mn, x[j]), mx = fmaxf(mx, x[j]);
    float d = (mx - mn) / 15.f, id = d ? 1.f / d : 0.f;
    wr_f16(b, d);
    wr_f16(b + 2, mn);
    for (int j = 0; j < 16; j++)
        b[4 + j] = (uint8_t)(trunc_clamp((x[j] - mn) * id + 0.5f, 15) |
                             trunc_clamp((x[j + 16] - mn) * id + 0.5f, 15) << 4);
}

static void quant_q5_1(const float *x, uint8_t *b) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < 32; j++) mn = fminf(mn, x[j]), mx = fmaxf(mx, x[j]);
    float d = (mx - mn) / 31.f, id = d ? 1.f / d : 0.f;
    wr_f16(b, d);
    wr_f16(b + 2, mn);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        int q0 = trunc_clamp((x[j] - mn) * id + 0.5f, 31);
        int q1 = trunc_clamp((x[j + 16] - mn) * id + 0.5f, 31);
        b[8 + j] = (uint8_t)((q0 & 0xf) | (q1 & 0xf) << 4);
        qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++) b[4 + k] = (uint8_t)(qh >> (8 * k));
}

/* ---- K-quant searches --------------------------------------------------------------------- */

/* Affine fit x ≈ scale·L − mn (L in 0..nmax, mn >= 0) of n values under weights w, as in ggml's
 * make_qkx2_quants. Start from the min/max mapping; then try nstep+1 trial inverse scales
 * (nmax + rmin + k·rdelta) / (max − off): round (x − off) with each, solve the weighted
 * least-squares (scale, offset) for those integer levels in closed form (offset forced to
 * <= 0, i.e. min >= 0, so zero stays representable), and keep the candidate with the least
 * weighted squared error. As in ggml, `off` is the best offset found so far (it starts at
 * min(x, 0)), so later trials round around an improved origin; matching this makes our
 * output byte-identical to llama-quantize's. Writes levels to L, the min to *mn_out;
 * returns the scale. */
static float fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *L, float *mn_out,
                        float rmin, float rdelta, int nstep) {
    float lo = x[0], hi = x[0], sw = 0, swx = 0;
    for (int i = 0; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
        sw += w[i];
        swx += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (!(hi > lo)) { /* constant (non-positive) sub-block, or NaN: all levels 0 */
        memset(L, 0, (size_t)n);
        *mn_out = (lo == lo) ? -lo : 0.f;
        return 0.f;
    }
    float inv = (float)nmax / (hi - lo), scale = 1.f / inv, off = lo, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)round_clamp(inv * (x[i] - lo), 0, nmax);
        float e = scale * L[i] + lo - x[i];
        best += w[i] * (e * e);
    }
    uint8_t Lt[32];
    SNUG_ASSERT(n <= 32);
    for (int k = 0; k <= nstep; k++) {
        float it = (rmin + rdelta * (float)k + (float)nmax) / (hi - off);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            int l = round_clamp(it * (x[i] - off), 0, nmax);
            Lt[i] = (uint8_t)l;
            sl += w[i] * (float)l;
            sl2 += w[i] * (float)l * (float)l;
            sxl += w[i] * (float)l * x[i];
        }
        float det = sw * sl2 - sl * sl;
        if (!(det > 0)) continue;
        float s = (sw * sxl - swx * sl) / det, o = (sl2 * swx - sl * sxl) / det;
        if (o > 0) { /* offset must not be positive: refit the scale alone */
            o = 0;
            s = sxl / sl2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float e = s * Lt[i] + o - x[i];
            err += w[i] * (e * e);
        }
        if (err < best) {
            memcpy(L, Lt, (size_t)n);
            best = err;
            scale = s;
            off = o;
        }
    }
    *mn_out = -off;
    return scale;
}

/* Symmetric fit x ≈ scale·(L − nmax), L in 0..2·nmax−1, of n values under weights
 * w_i = qw_i (or x_i² without qw), as in ggml's make_qx_quants with rmse_type 1. The inverse
 * scale is anchored on the largest-magnitude value (which maps to −nmax) and perturbed by
 * ±0.1·k, k = 1..9; for each rounding the optimal scale Σwxl/Σwl² is taken and the one with
 * the largest (Σwxl)²/Σwl² (= least weighted error) wins. Returns the scale (0 = all zero). */
static float fit_symmetric(int n, int nmax, const float *x, int8_t *L, const float *qw) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    if (!(amax >= 1e-15f)) { /* all (near) zero, or NaN */
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float w[32];
    SNUG_ASSERT(n <= 32);
    for (int i = 0; i < n; i++) w[i] = qw ? qw[i] : x[i] * x[i];
    float best_scale = 0, best = -1;
    for (int k = 0; k <= 18; k++) {
        int step = k == 0 ? 0 : (k <= 9 ? k - 10 : k - 9); /* 0, then -9..-1, then 1..9 */
        float inv = -((float)nmax + 0.1f * (float)step) / max;
        float slx = 0, sl2 = 0;
        for (int i = 0; i < n; i++) {
            int l = round_clamp(inv * x[i], -nmax, nmax - 1);
            slx += w[i] * x[i] * (float)l;
            sl2 += w[i] * (float)l * (float)l;
        }
        if (!(sl2 > 0)) continue;
        if (best < 0 || slx * slx > best * sl2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(round_clamp(inv * x[i], -nmax, nmax - 1) + nmax);
            best_scale = slx / sl2;
            best = best_scale * slx;
        }
    }
    if (best < 0) memset(L, 0, (size_t)n);
    return best_scale;
}

/* Pack the eight 6-bit (scale, min) pairs into the 12-byte K-quant field (see kscale in
 * quant_ref.c for the layout). */
static void pack_kscales(uint8_t *s, const uint8_t *ls, const uint8_t *lm) {
    memset(s, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] |= ls[j];
            s[j + 4] |= lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xf) | (lm[j] & 0xf) << 4);
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* Q4_K (nmax 15) and Q5_K (nmax 31), one 256-element super-block. Sub-block weights are
 * rms(x) + |x| (ggml's choice: favour large values without ignoring small ones), times the
 * importance matrix when given. The search parameters (rmin, rdelta, nstep) are ggml's:
 * (-1, 0.1, 20) for Q4_K, (-0.5, 0.1, 15) for Q5_K. After quantizing the scales and mins to
 * 6 bits against f16 super-scales, every element is re-rounded with the scale it will really
 * be decoded with. Writes d, dmin, scales and the levels to L[256]. */
static void quant_kx(const float *x, uint8_t *b, uint8_t *L, int nmax, const float *imatrix) {
    float scales[8], mins[8], w[32], max_scale = 0, max_min = 0;
    float rmin = nmax == 15 ? -1.f : -0.5f;
    int nstep = nmax == 15 ? 20 : 15;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float s2 = 0;
        for (int l = 0; l < 32; l++) s2 += xs[l] * xs[l];
        float av = sqrtf(s2 / 32.f);
        for (int l = 0; l < 32; l++)
            w[l] = (av + fabsf(xs[l])) * (imatrix ? imatrix[32 * j + l] : 1.f);
        scales[j] = fit_affine(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_s = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_m = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = (uint8_t)round_clamp(inv_s * scales[j], 0, 63);
        lm[j] = (uint8_t)round_clamp(inv_m * mins[j], 0, 63);
    }
    wr_f16(b, max_scale / 63.f);
    wr_f16(b + 2, max_min / 63.f);
    pack_kscales(b + 4, ls, lm);
    float d = f16_round(max_scale / 63.f), dmin = f16_round(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        float ds = d * (float)ls[j];
        if (!ds) continue; /* keep the search's levels (they decode to -min anyway) */
        float dm = dmin * (float)lm[j];
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)round_clamp((x[32 * j + l] + dm) / ds, 0, nmax);
    }
}

static void quant_q4_k(const float *x, uint8_t *b, const float *imatrix) {
    uint8_t L[256];
    quant_kx(x, b, L, 15, imatrix);
    uint8_t *qs = b + 16;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
}

static void quant_q5_k(const float *x, uint8_t *b, const float *imatrix) {
    uint8_t L[256];
    quant_kx(x, b, L, 31, imatrix);
    uint8_t *qh = b + 16, *qs = b + 48;
    memset(qh, 0, 32);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            int a = L[64 * c + l], z = L[64 * c + 32 + l];
            qs[32 * c + l] = (uint8_t)((a & 0xf) | (z & 0xf) << 4);
            qh[l] |= (uint8_t)(((a >> 4) << (2 * c)) | ((z >> 4) << (2 * c + 1)));
        }
}

/* Q6_K: sixteen symmetric 16-element fits (levels -32..31), then the sub-block scales are
 * expressed as int8 multiples of d = max_scale / -128 (the largest-magnitude scale maps to
 * -128), and every element is re-rounded with its decoded scale. */
static void quant_q6_k(const float *x, uint8_t *b, const float *imatrix) {
    int8_t L[256];
    float scales[16], max_scale = 0, max_abs = 0, qw[16];
    for (int j = 0; j < 16; j++) {
        const float *xs = x + 16 * j;
        if (imatrix)
            for (int l = 0; l < 16; l++) qw[l] = imatrix[16 * j + l] * xs[l] * xs[l];
        scales[j] = fit_symmetric(16, 32, xs, L + 16 * j, imatrix ? qw : NULL);
        if (fabsf(scales[j]) > max_abs) max_abs = fabsf(scales[j]), max_scale = scales[j];
    }
    memset(b, 0, 210);
    if (!(max_abs >= 1e-15f)) return; /* all-zero block (d = 0) */
    float inv = -128.f / max_scale;
    wr_f16(b + 208, 1.f / inv);
    float d = f16_round(1.f / inv);
    int8_t *sc = (int8_t *)(b + 192);
    for (int j = 0; j < 16; j++) sc[j] = (int8_t)round_clamp(inv * scales[j], -128, 127);
    for (int j = 0; j < 16; j++) {
        float ds = d * (float)sc[j];
        if (!ds) continue;
        for (int l = 0; l < 16; l++)
            L[16 * j + l] = (int8_t)(round_clamp(x[16 * j + l] / ds, -32, 31) + 32);
    }
    uint8_t *ql = b, *qh = b + 128;
    for (int h = 0; h < 2; h++, ql += 64, qh += 32) {
        const int8_t *Lh = L + 128 * h;
        for (int l = 0; l < 32; l++) {
            int q0 = Lh[l], q1 = Lh[l + 32], q2 = Lh[l + 64], q3 = Lh[l + 96];
            ql[l] = (uint8_t)((q0 & 0xf) | (q2 & 0xf) << 4);
            ql[l + 32] = (uint8_t)((q1 & 0xf) | (q3 & 0xf) << 4);
            qh[l] = (uint8_t)((q0 >> 4) | (q1 >> 4) << 2 | (q2 >> 4) << 4 | (q3 >> 4) << 6);
        }
    }
}

/* ---- entry point -------------------------------------------------------------------------- */

/* Quantize one row. F32/F16/BF16 convert element-wise; block types run their encoder per
 * block. imatrix (per element of the row, may be NULL) only affects the K-quant searches. */
bool snug_quantize_row(uint32_t type, const float *src, void *dst, int64_t n,
                       const float *imatrix) {
    const struct snug_dtype_info *t = snug_dtype_info(type);
    if (!t || !t->quantizable || n < 0 || n % t->block_elems) return false;
    uint8_t *o = dst;
    int64_t be = t->block_elems, nb = n / be;
    for (int64_t i = 0; i < nb; i++) {
        const float *x = src + i * be;
        uint8_t *b = o + i * t->block_bytes;
        const float *im = imatrix ? imatrix + i * be : NULL;
        switch (type) {
        case SNUG_DTYPE_F32:
            memcpy(b, x, 4);
            break;
        case SNUG_DTYPE_F16:
            wr_f16(b, *x);
            break;
        case SNUG_DTYPE_BF16: {
            uint16_t h = snug_f32_to_bf16(*x);
            b[0] = (uint8_t)h;
            b[1] = (uint8_t)(h >> 8);
            break;
        }
        case SNUG_DTYPE_Q8_0:
            quant_q8_0(x, b);
            break;
        case SNUG_DTYPE_Q4_0:
            quant_q4_0(x, b);
            break;
        case SNUG_DTYPE_Q4_1:
            quant_q4_1(x, b);
            break;
        case SNUG_DTYPE_Q5_0:
            quant_q5_0(x, b);
            break;
        case SNUG_DTYPE_Q5_1:
            quant_q5_1(x, b);
            break;
        case SNUG_DTYPE_Q4_K:
            quant_q4_k(x, b, im);
            break;
        case SNUG_DTYPE_Q5_K:
            quant_q5_k(x, b, im);
            break;
        case SNUG_DTYPE_Q6_K:
            quant_q6_k(x, b, im);
            break;
        default:
            return false;
        }
    }
    return true;
}
