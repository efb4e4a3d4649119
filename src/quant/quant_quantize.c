/* quant_quantize.c — the encoders: snug_quantize_row for every quantizable type.
 *
 * The algorithms follow llama.cpp's quantizers (ggml/src/ggml-quants.c: quantize_row_*_ref
 * without an importance matrix, quantize_row_*_impl with one, and their searches
 * make_qkx2/qkx3_quants, make_qx_quants, make_q3_quants, make_qp_quants — read to understand
 * them, re-implemented here in our own words), so a file we write has the same bytes as one
 * llama-quantize writes from the same source and importance matrix:
 *   Q8_0, Q4_0, Q4_1, Q5_0, Q5_1  one scale (and min) per 32 from the block's extreme values,
 *                                 elements rounded exactly as the reference does (with an
 *                                 importance matrix: weighted symmetric / affine searches);
 *   Q2_K, Q4_K, Q5_K              per sub-block, a search over (scale, min) that minimises
 *                                 weighted error; then 4/6-bit sub-block scales and mins
 *                                 relative to two f16 super-scales;
 *   Q3_K, Q6_K                    per 16-element sub-block, a search over symmetric scales;
 *                                 then 6/8-bit sub-block scales;
 *   IQ4_NL, IQ4_XS                per 32-element sub-block, a scale search over the 16
 *                                 non-uniform levels; IQ4_XS stores 6-bit sub-block scales.
 * An importance matrix (llama.cpp's imatrix: mean squared activation per input column) only
 * changes the weights of these searches. The 1-3 bit i-quants are in quant_iq.c.
 * Invariant: no allocation (scratch lives on the stack); NaN input never reaches an
 * undefined float->int conversion (every rounding clamps first).
 * Read next: quant_ref.c and quant_lowbit.c (the matching decoders and the layouts). */
#include "core/core.h"
#include "quant.h"
#include "quant_grids.h"
#include "quant_iq.h"

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
                        float rmin, float rdelta, int nstep, bool use_mad) {
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
        best += w[i] * (use_mad ? fabsf(e) : e * e);
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
            err += w[i] * (use_mad ? fabsf(e) : e * e);
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
 * scale is anchored on the largest-magnitude value (which maps to −nmax): the first rounding
 * sets the levels and the least-squares scale Σwxl/Σwl² (0 when Σwl² = 0); then ±0.1·k,
 * k = 1..9, perturb it and a rounding replaces the current one when its (Σwxl)²/Σwl² is larger
 * (= less weighted error). Returns the scale (0 = all zero). */
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
    float scale = 0, best = 0;
    for (int k = 0; k <= 18; k++) {
        int step = k == 0 ? 0 : (k <= 9 ? k - 10 : k - 9); /* 0, then -9..-1, then 1..9 */
        float inv = -((float)nmax + 0.1f * (float)step) / max;
        float slx = 0, sl2 = 0;
        for (int i = 0; i < n; i++) {
            int l = round_clamp(inv * x[i], -nmax, nmax - 1);
            slx += w[i] * x[i] * (float)l;
            sl2 += w[i] * (float)l * (float)l;
        }
        if (k == 0 || (sl2 > 0 && slx * slx > best * sl2)) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(round_clamp(inv * x[i], -nmax, nmax - 1) + nmax);
            scale = sl2 > 0 ? slx / sl2 : 0.f;
            best = scale * slx;
        }
    }
    return scale;
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
 * rms(x) + |x| (ggml's choice: favour large values without ignoring small ones); with an
 * importance matrix quant_kx_im runs instead. The search parameters (rmin, rdelta, nstep) are
 * ggml's:
 * (-1, 0.1, 20) for Q4_K, (-0.5, 0.1, 15) for Q5_K. After quantizing the scales and mins to
 * 6 bits against f16 super-scales, every element is re-rounded with the scale it will really
 * be decoded with. Writes d, dmin, scales and the levels to L[256]. */
static void quant_kx(const float *x, uint8_t *b, uint8_t *L, int nmax) {
    float scales[8], mins[8], w[32], max_scale = 0, max_min = 0;
    float rmin = nmax == 15 ? -1.f : -0.5f;
    int nstep = nmax == 15 ? 20 : 15;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float s2 = 0;
        for (int l = 0; l < 32; l++) s2 += xs[l] * xs[l];
        float av = sqrtf(s2 / 32.f);
        for (int l = 0; l < 32; l++) w[l] = av + fabsf(xs[l]);
        scales[j] = fit_affine(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
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

static void quant_kx_im(const float *x, uint8_t *b, uint8_t *L, int nmax, const float *qw);

static void quant_q4_k(const float *x, uint8_t *b, const float *imatrix) {
    uint8_t L[256];
    if (imatrix)
        quant_kx_im(x, b, L, 15, imatrix);
    else
        quant_kx(x, b, L, 15);
    uint8_t *qs = b + 16;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
}

static void quant_q5_k(const float *x, uint8_t *b, const float *imatrix) {
    uint8_t L[256];
    if (imatrix)
        quant_kx_im(x, b, L, 31, imatrix);
    else
        quant_kx(x, b, L, 31);
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
    float scales[16], max_scale = 0, max_abs = 0;
    for (int j = 0; j < 16; j++) {
        const float *xs = x + 16 * j;
        scales[j] = fit_symmetric(16, 32, xs, L + 16 * j, imatrix ? imatrix + 16 * j : NULL);
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

/* ---- importance-weighted searches and the 2-3 bit K-quants --------------------------------- */

/* Levels 0..nmax for non-negative values x (the sub-block scales or mins of a super-block)
 * under weights w, as ggml's make_qp_quants: start from x·nmax/max, try the inverse scales
 * (nmax ± 0.1·k)/max, k = 1..4, keep the one with the least weighted error, then up to five
 * sweeps that move single levels where that raises (Σwxl)²/Σwl². Returns the scale. */
float snug_quant_fit_positive(int n, int nmax, const float *x, uint8_t *L, const float *w) {
    float max = 0;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (!(max >= 1e-15f)) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)nmax / max;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)round_clamp(iscale * x[i], -(1 << 22), 1 << 22);
    float scale = 1 / iscale, best_mse = 0;
    for (int i = 0; i < n; i++) {
        float diff = x[i] - scale * L[i];
        best_mse += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        float iscale_is = (0.1f * (float)is + (float)nmax) / max, scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = round_clamp(iscale_is * x[i], -(1 << 22), nmax);
            float diff = x[i] - scale_is * (float)l;
            mse += w[i] * diff * diff;
        }
        if (mse < best_mse) best_mse = mse, iscale = iscale_is;
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = round_clamp(iscale * x[i], -(1 << 22), nmax);
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * (float)l;
        suml2 += w[i] * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float slx = sumlx - w[i] * x[i] * (float)L[i];
            float sl2 = suml2 - w[i] * (float)L[i] * (float)L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = round_clamp(x[i] * sl2 / slx, -(1 << 22), nmax);
                if (new_l != L[i]) {
                    slx += w[i] * x[i] * (float)new_l;
                    sl2 += w[i] * (float)new_l * (float)new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l, sumlx = slx, suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0 ? sumlx / suml2 : 0.f;
}

/* Q3_K's reference search (ggml's make_q3_quants with rmse): levels −nmax..nmax−1 from the
 * largest-magnitude anchor, then up to five sweeps moving single levels to raise
 * (Σwxl)²/Σwl² with w = x². L gets level + nmax; returns the scale. */
static float fit_q3(int n, int nmax, const float *x, int8_t *L) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    if (!(amax >= 1e-15f)) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -(float)nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = round_clamp(iscale * x[i], -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                int new_l = round_clamp(x[i] * sl2 / slx, -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l, sumlx = slx, suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0 ? sumlx / suml2 : 0.f;
}

/* sum of squares of one super-block, summed in element order (the order fixes the bits) */
static float sum_sq(const float *x, int n) {
    float s = 0;
    for (int j = 0; j < n; j++) s += x[j] * x[j];
    return s;
}

/* The 2-bit levels of Q2_K / Q3_K: element 128h + 32g + l sits in bits 2g..2g+1 of byte
 * 32h + l. */
static void pack_2bit(uint8_t *qs, const uint8_t *L) {
    for (int j = 0; j < 256; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] =
                (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
}

/* Q2_K, 84 bytes: scales[16] (scale | min << 4) | qs[64] | f16 d | f16 dmin. Sixteen affine
 * 16-element fits (levels 0..3), their scales and mins as 4-bit multiples of d and dmin, then
 * every element re-rounded with its decoded scale and min. Without an importance matrix
 * (ggml's quantize_row_q2_K_ref): weights |x|, absolute-error search (-0.5, 0.1, 15), d = max
 * scale / 15. With one (quantize_row_q2_K_impl): weights qw·sqrt(σ² + x²), σ² = mean x² of
 * the super-block, squared-error search (-0.9, 0.05, 36), and the 4-bit scales and mins fitted
 * by fit_positive under the sub-blocks' weight sums. */
static void quant_q2_k(const float *x, uint8_t *b, const float *qw) {
    uint8_t L[256], ls[16], lm[16];
    float scales[16], mins[16], w[16], sw[16];
    uint8_t *sc = b, *qs = b + 16;
    float sigma2 = sum_sq(x, 256) / 256.f;
    for (int j = 0; j < 16; j++) {
        const float *xs = x + 16 * j;
        sw[j] = 0;
        for (int l = 0; l < 16; l++) {
            w[l] = qw ? qw[16 * j + l] * sqrtf(sigma2 + xs[l] * xs[l]) : fabsf(xs[l]);
            sw[j] += w[l];
        }
        if (qw)
            scales[j] = fit_affine(16, 3, xs, w, L + 16 * j, &mins[j], -0.9f, 0.05f, 36, false);
        else
            scales[j] = fit_affine(16, 3, xs, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
    }
    if (qw) {
        wr_f16(b + 80, snug_quant_fit_positive(16, 15, scales, ls, sw));
        wr_f16(b + 82, snug_quant_fit_positive(16, 15, mins, lm, sw));
        for (int j = 0; j < 16; j++) sc[j] = (uint8_t)(ls[j] | lm[j] << 4);
    } else {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        memset(sc, 0, 16);
        wr_f16(b + 80, 0.f);
        wr_f16(b + 82, 0.f);
        if (max_scale > 0) {
            float iscale = 15.f / max_scale;
            for (int j = 0; j < 16; j++) sc[j] = (uint8_t)round_clamp(iscale * scales[j], 0, 15);
            wr_f16(b + 80, max_scale / 15.f);
        }
        if (max_min > 0) {
            float iscale = 15.f / max_min;
            for (int j = 0; j < 16; j++)
                sc[j] |= (uint8_t)(round_clamp(iscale * mins[j], 0, 15) << 4);
            wr_f16(b + 82, max_min / 15.f);
        }
    }
    float d = snug_f16_to_f32((uint16_t)(b[80] | b[81] << 8));
    float dmin = snug_f16_to_f32((uint16_t)(b[82] | b[83] << 8));
    for (int j = 0; j < 16; j++) {
        float dl = d * (float)(sc[j] & 0xf);
        if (!dl) continue;
        float ml = dmin * (float)(sc[j] >> 4);
        for (int l = 0; l < 16; l++)
            L[16 * j + l] = (uint8_t)round_clamp((x[16 * j + l] + ml) / dl, 0, 3);
    }
    pack_2bit(qs, L);
}

/* Q3_K, 110 bytes: hmask[32] | qs[64] | scales[12] | f16 d. Sixteen symmetric 16-element fits
 * (levels -4..3), their scales as 6-bit multiples of d (offset 32), then every element
 * re-rounded with its decoded scale. Without an importance matrix (quantize_row_q3_K_ref):
 * fit_q3 per sub-block, d from the largest-magnitude scale (which maps to -32). With one
 * (quantize_row_q3_K_impl): weights qw·sqrt(σ² + x²), σ² = 2·mean x², fit_symmetric per
 * sub-block and once more over the sixteen scales (weighted by the sub-blocks' weight sums). */
static void quant_q3_k(const float *x, uint8_t *b, const float *qw) {
    int8_t L[256], ls[16];
    float scales[16], w[16], sw[16];
    uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
    memset(sc, 0, 12);
    if (qw) {
        float sigma2 = 2 * sum_sq(x, 256) / 256.f;
        for (int j = 0; j < 16; j++) {
            const float *xs = x + 16 * j;
            sw[j] = 0;
            for (int l = 0; l < 16; l++) {
                w[l] = qw[16 * j + l] * sqrtf(sigma2 + xs[l] * xs[l]);
                sw[j] += w[l];
            }
            scales[j] = fit_symmetric(16, 4, xs, L + 16 * j, w);
        }
        wr_f16(b + 108, fit_symmetric(16, 32, scales, ls, sw));
    } else {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_q3(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) amax = fabsf(scales[j]), max_scale = scales[j];
        }
        wr_f16(b + 108, 0.f);
        memset(ls, 32, sizeof ls);
        if (max_scale != 0) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++)
                ls[j] = (int8_t)(round_clamp(iscale * scales[j], -32, 31) + 32);
            wr_f16(b + 108, 1 / iscale);
        }
        if (max_scale == 0) memset(ls, 0, sizeof ls); /* ggml leaves the field zero */
    }
    for (int j = 0; j < 16; j++) {
        int l = ls[j];
        if (j < 8)
            sc[j] = (uint8_t)(l & 0xf);
        else
            sc[j - 8] |= (uint8_t)((l & 0xf) << 4);
        sc[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
    }
    float d = snug_f16_to_f32((uint16_t)(b[108] | b[109] << 8));
    for (int j = 0; j < 16; j++) {
        int s = j < 8 ? sc[j] & 0xf : sc[j - 8] >> 4;
        s = (s | ((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
        float dl = d * (float)s;
        if (!dl) continue;
        for (int l = 0; l < 16; l++)
            L[16 * j + l] = (int8_t)(round_clamp(x[16 * j + l] / dl, -4, 3) + 4);
    }
    memset(hmask, 0, 32);
    uint8_t L2[256];
    for (int j = 0; j < 256; j++) {
        int v = L[j];
        if (v > 3) hmask[j % 32] |= (uint8_t)(1u << (j / 32)), v -= 4;
        L2[j] = (uint8_t)v;
    }
    pack_2bit(qs, L2);
}

/* Q4_K / Q5_K with an importance matrix (ggml's quantize_row_q4_K_impl / q5_K_impl): weights
 * qw·sqrt(σ² + x²), σ² = 2·mean x²; the affine search with (-0.9, 0.05, 36) on squared error;
 * the eight 6-bit scales and mins fitted by fit_positive (d, dmin are its scales); then every
 * element re-rounded with its decoded scale and min. */
static void quant_kx_im(const float *x, uint8_t *b, uint8_t *L, int nmax, const float *qw) {
    float scales[8], mins[8], w[32], sw[8];
    float sigma2 = 2 * sum_sq(x, 256) / 256.f;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        sw[j] = 0;
        for (int l = 0; l < 32; l++) {
            w[l] = qw[32 * j + l] * sqrtf(sigma2 + xs[l] * xs[l]);
            sw[j] += w[l];
        }
        scales[j] = fit_affine(32, nmax, xs, w, L + 32 * j, &mins[j], -0.9f, 0.05f, 36, false);
    }
    uint8_t ls[8], lm[8];
    float d_block = snug_quant_fit_positive(8, 63, scales, ls, sw);
    float m_block = snug_quant_fit_positive(8, 63, mins, lm, sw);
    pack_kscales(b + 4, ls, lm);
    wr_f16(b, d_block);
    wr_f16(b + 2, m_block);
    float d = f16_round(d_block), dmin = f16_round(m_block);
    for (int j = 0; j < 8; j++) {
        float ds = d * (float)ls[j];
        if (!ds) continue;
        float dm = dmin * (float)lm[j];
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)round_clamp((x[32 * j + l] + dm) / ds, 0, nmax);
    }
}

/* Q4_0 with an importance matrix (ggml's quantize_row_q4_0_impl): a symmetric fit of the 32
 * elements (levels -8..7) under weights qw·sqrt(σ² + x²), σ² = mean x² over the whole ROW. */
static void quant_q4_0_im(const float *x, uint8_t *b, const float *qw, float sigma2) {
    float w[32];
    int8_t L[32];
    for (int j = 0; j < 32; j++) w[j] = qw[j] * sqrtf(sigma2 + x[j] * x[j]);
    wr_f16(b, fit_symmetric(32, 8, x, L, w));
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

/* Q4_1 / Q5_1 with an importance matrix (ggml's quantize_row_q4_1_impl / q5_1_impl): the
 * affine search with (-0.9, 0.05, 36) on squared error under the same weights as Q4_0; the
 * stored min is the negated offset. */
static void quant_qx_1_im(const float *x, uint8_t *b, const float *qw, float sigma2, int nmax) {
    float w[32], mn;
    uint8_t L[32];
    for (int j = 0; j < 32; j++) w[j] = qw[j] * sqrtf(sigma2 + x[j] * x[j]);
    float d = fit_affine(32, nmax, x, w, L, &mn, -0.9f, 0.05f, 36, false);
    wr_f16(b, d);
    wr_f16(b + 2, -mn);
    uint8_t *qs = b + (nmax == 15 ? 4 : 8);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((L[j] & 0xf) | (L[j + 16] & 0xf) << 4);
        qh |= (uint32_t)(L[j] >> 4) << j | (uint32_t)(L[j + 16] >> 4) << (j + 16);
    }
    if (nmax == 31)
        for (int k = 0; k < 4; k++) b[4 + k] = (uint8_t)(qh >> (8 * k));
}

/* Q5_0 with an importance matrix (ggml's quantize_row_q5_0_impl): as Q4_0, levels -16..15. */
static void quant_q5_0_im(const float *x, uint8_t *b, const float *qw, float sigma2) {
    float w[32];
    int8_t L[32];
    for (int j = 0; j < 32; j++) w[j] = qw[j] * sqrtf(sigma2 + x[j] * x[j]);
    wr_f16(b, fit_symmetric(32, 16, x, L, w));
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        b[6 + j] = (uint8_t)((L[j] & 0xf) | (L[j + 16] & 0xf) << 4);
        qh |= (uint32_t)((L[j] >> 4) & 1) << j | (uint32_t)((L[j + 16] >> 4) & 1) << (j + 16);
    }
    for (int k = 0; k < 4; k++) b[2 + k] = (uint8_t)(qh >> (8 * k));
}

/* ---- IQ4_NL / IQ4_XS ------------------------------------------------------------------------ */

/* Index of the level nearest to v among the 16 sorted IQ4_NL levels (ties to the lower one
 * only when strictly nearer, as ggml's best_index_int8). */
static int iq4_index(float v) {
    const int8_t *val = snug_iq4nl_values;
    if (!(v > val[0])) return 0; /* also NaN */
    if (v >= val[15]) return 15;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        int mid = (ml + mu) / 2;
        if (v < val[mid])
            mu = mid;
        else
            ml = mid;
    }
    return v - val[mu - 1] < val[mu] - v ? mu - 1 : mu;
}

/* ggml's quantize_row_iq4_nl_impl with ntry = 7, for one IQ4_NL block (nsub = 1, 32 elements)
 * or one IQ4_XS super-block (nsub = 8): per 32-element sub-block, weights qw·sqrt(σ² + x²)
 * (σ² = 2·mean x² of the super-block) or x² without qw; the scale anchored on the
 * largest-magnitude element (which maps to level -127), then the inverse scales
 * (k − 127)/max, k = −7..7, each giving a least-squares scale; the one with the largest
 * (Σwqx)²/Σwq² wins. IQ4_XS then stores the sub-block scales as 6-bit multiples (offset 32) of
 * d = −max_scale/32 and re-rounds every element with its decoded scale; IQ4_NL stores the scale
 * as f16 and re-rounds with it. Writes d, the IQ4_XS scale fields and the nibbles. */
static void quant_iq4(const float *x, int nsub, uint8_t *dh, uint8_t *scales_hl, uint8_t *q4,
                      const float *qw) {
    int n = 32 * nsub;
    uint8_t L[256];
    float scales[8], w[32];
    float sigma2 = sum_sq(x, n) * (2.f / (float)n);
    memset(q4, 0, (size_t)n / 2);
    wr_f16(dh, 0.f);
    float max_scale = 0, amax_scale = 0;
    const int8_t v0 = snug_iq4nl_values[0];
    for (int ib = 0; ib < nsub; ib++) {
        const float *xb = x + 32 * ib;
        uint8_t *Lb = L + 32 * ib;
        for (int j = 0; j < 32; j++)
            w[j] = qw ? qw[32 * ib + j] * sqrtf(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++)
            if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), max = xb[j];
        if (!(amax >= 1e-15f)) {
            scales[ib] = 0;
            continue;
        }
        float d = -max / (float)v0, id = 1 / d, sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            int l = iq4_index(id * xb[j]);
            Lb[j] = (uint8_t)l;
            float q = snug_iq4nl_values[l];
            sumqx += w[j] * q * xb[j];
            sumq2 += w[j] * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -7; itry <= 7; itry++) {
            id = (float)(itry + v0) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < 32; j++) {
                float q = snug_iq4nl_values[iq4_index(id * xb[j])];
                sumqx += w[j] * q * xb[j];
                sumq2 += w[j] * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) d = sumqx / sumq2, best = d * sumqx;
        }
        scales[ib] = d;
        if (fabsf(d) > amax_scale) amax_scale = fabsf(d), max_scale = d;
    }
    if (nsub > 1) {
        uint16_t sh = 0;
        uint8_t *sl = scales_hl + 2;
        memset(sl, 0, (size_t)nsub / 2);
        float d = -max_scale / 32;
        wr_f16(dh, d);
        float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < nsub; ib++) {
            int l = round_clamp(id * scales[ib], -32, 31);
            float dl = d * (float)l, idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++) L[32 * ib + j] = (uint8_t)iq4_index(idl * x[32 * ib + j]);
            l += 32;
            sl[ib / 2] |= (uint8_t)((l & 0xf) << (4 * (ib % 2)));
            sh |= (uint16_t)((l >> 4) << (2 * (ib % 8)));
        }
        scales_hl[0] = (uint8_t)sh;
        scales_hl[1] = (uint8_t)(sh >> 8);
    } else {
        wr_f16(dh, scales[0]);
        float id = scales[0] ? 1 / scales[0] : 0;
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)iq4_index(id * x[j]);
    }
    for (int i = 0; i < nsub; i++)
        for (int j = 0; j < 16; j++)
            q4[16 * i + j] = (uint8_t)(L[32 * i + j] | L[32 * i + 16 + j] << 4);
}

/* ---- entry point -------------------------------------------------------------------------- */

/* Quantize one row. F32/F16/BF16 convert element-wise; block types run their encoder per
 * block. imatrix (per element of the row, may be NULL) selects llama.cpp's importance-weighted
 * encoders where ggml has one (Q4_0, Q4_1, Q5_0, Q5_1, Q2_K .. Q6_K, IQ4_NL, IQ4_XS, and the
 * 1-3 bit i-quants of quant_iq.c); Q8_0 and the float types ignore it. */
bool snug_quantize_row(uint32_t type, const float *src, void *dst, int64_t n,
                       const float *imatrix) {
    const struct snug_dtype_info *t = snug_dtype_info(type);
    if (!t || !t->quantizable || n < 0 || n % t->block_elems) return false;
    uint8_t *o = dst;
    int64_t be = t->block_elems, nb = n / be;
    float row_sigma2 = 0; /* the 32-block types' weights use the mean square of the whole row */
    if (imatrix && n > 0 &&
        (type == SNUG_DTYPE_Q4_0 || type == SNUG_DTYPE_Q4_1 || type == SNUG_DTYPE_Q5_0 ||
         type == SNUG_DTYPE_Q5_1)) {
        for (int64_t j = 0; j < n; j++) row_sigma2 += src[j] * src[j];
        row_sigma2 /= (float)n;
    }
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
            if (im)
                quant_q4_0_im(x, b, im, row_sigma2);
            else
                quant_q4_0(x, b);
            break;
        case SNUG_DTYPE_Q4_1:
            if (im)
                quant_qx_1_im(x, b, im, row_sigma2, 15);
            else
                quant_q4_1(x, b);
            break;
        case SNUG_DTYPE_Q5_0:
            if (im)
                quant_q5_0_im(x, b, im, row_sigma2);
            else
                quant_q5_0(x, b);
            break;
        case SNUG_DTYPE_Q5_1:
            if (im)
                quant_qx_1_im(x, b, im, row_sigma2, 31);
            else
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
        case SNUG_DTYPE_Q2_K:
            quant_q2_k(x, b, im);
            break;
        case SNUG_DTYPE_Q3_K:
            quant_q3_k(x, b, im);
            break;
        case SNUG_DTYPE_IQ4_NL:
            quant_iq4(x, 1, b, NULL, b + 2, im);
            break;
        case SNUG_DTYPE_IQ4_XS:
            quant_iq4(x, 8, b, b + 2, b + 8, im);
            break;
        case SNUG_DTYPE_IQ2_XXS:
        case SNUG_DTYPE_IQ2_XS:
        case SNUG_DTYPE_IQ2_S:
        case SNUG_DTYPE_IQ3_XXS:
        case SNUG_DTYPE_IQ3_S:
        case SNUG_DTYPE_IQ1_S:
        case SNUG_DTYPE_IQ1_M:
            if (!snug_quant_iq_block(type, x, im, b)) return false;
            break;
        default:
            return false;
        }
    }
    return true;
}
