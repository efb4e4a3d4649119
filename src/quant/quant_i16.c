/* quant_i16.c — Q4_K and Q6_K prompt products on 16-bit (and Q4_K on 8-bit) activations: prepared
 * weight rows, transposed activation tiles, and the scalar reference of the AVX-512 block product
 * in quant_simd.inc (quant.h snug_i16_*). Prepared row: int16 per element (Q4_K q·sc ≤ 15·63, Q6_K
 * (q − 32)·sc ≤ 32·128), then nine floats per super-block (d; Q4_K also dmin·m_j). Tile: per token
 * and super-block dx = amax / 8191 and int16 round(x / dx), in pairs (k, k+1) per token so one
 * dword broadcast of a weight pair meets 16 tokens (vpdpwssd); then the dx and the per-32 sums of
 * the int16 values (for the Q4_K mins). The int8 form for Q4_K (snug_i8_*, vpdpbusd): prepared rows
 * hold the 4-bit values as bytes, the nine floats and the eight scales as int32; the tile holds the
 * A256 values of each token in quads (k .. k+3), then dx = amax / 127 and the per-32 sums.
 * Q5_K uses the same form with 5-bit values (0..31).
 * The signed int8 form (IQ4_XS, Q3_K): prepared rows hold signed bytes (IQ4_XS the level, Q3_K
 * −q·scale), then per super-block d, the correction 128·Σ scale·byte and (IQ4_XS) the eight
 * scales; the tile's bytes are read as x + 128 (unsigned), and the correction taken off in int32.
 * Invariant: integer sums are exact (Q4_K per super-block 256·945·8191 < 2³¹, Q6_K per 64
 * 64·4096·8191 < 2³¹, int8 Q4_K 8·63·32·15·127 < 2³¹, Q5_K 8·63·32·31·127 < 2³¹, IQ4_XS
 * 8·32·32·127·255 < 2³¹, Q3_K 256·128·255 < 2³¹), the float steps fixed per output: all levels give
 * the same bits. Read next: quant_simd.inc (igemm), src/backend/cpu/ops_matmul.c (the caller). */
#include "core/core.h"
#include "quant.h"
#include "quant_act.h"

#include "quant_grids.h"

#include <math.h>
#include <string.h>

/* Largest int16 activation magnitude (14 bits: keeps 256-element sums of q·sc·x in int32). */
#define I16_XMAX 8191

size_t snug_i16_row_bytes(int64_t n) {
    return SNUG_ALIGN_UP((size_t)n * 2 + (size_t)(n / 256) * 9 * sizeof(float), 64);
}

size_t snug_i16_x_bytes(int64_t n, int ttpad) {
    return ((size_t)n * 2 + (size_t)(n / 256) * 4 + (size_t)(n / 32) * 4) * (size_t)ttpad;
}

/* A Q4_K super-block's floats of a prepared row — meta[0] = d, meta[1 + j] = dmin·m_j — and its
 * eight 6-bit scales sc[j] (layout in quant_ref.c; scales as snug_act_kscale). */
static void q4k_block_meta(const uint8_t *w, float meta[9], int sc[8]) {
    float dmin = snug_act_f16(w + 2);
    meta[0] = snug_act_f16(w);
    for (int j = 0; j < 8; j++) {
        int m;
        snug_act_kscale(w + 4, j, &sc[j], &m);
        meta[1 + j] = dmin * (float)m;
    }
}

/* Prepared row from a Q4_K row (layout in quant_ref.c; scales as snug_act_kscale). */
void snug_i16_prep_q4k_ref(const void *src, void *dst, int64_t n) {
    const uint8_t *w = src;
    int16_t *q16 = dst;
    float *meta = (float *)(void *)((uint8_t *)dst + (size_t)n * 2);
    for (int64_t b = 0; b < n / 256; b++, w += 144, q16 += 256, meta += 9) {
        int sc[8];
        q4k_block_meta(w, meta, sc);
        for (int c = 0; c < 4; c++) {
            const uint8_t *qs = w + 16 + 32 * c;
            for (int l = 0; l < 32; l++) {
                q16[64 * c + l] = (int16_t)((qs[l] & 0xf) * sc[2 * c]);
                q16[64 * c + 32 + l] = (int16_t)((qs[l] >> 4) * sc[2 * c + 1]);
            }
        }
    }
}

/* Prepared row from a Q6_K row (layout in quant_ref.c; the element order of dot1_q6_k). */
void snug_i16_prep_q6k_ref(const void *src, void *dst, int64_t n) {
    const uint8_t *w = src;
    int16_t *q16 = dst;
    float *meta = (float *)(void *)((uint8_t *)dst + (size_t)n * 2);
    for (int64_t b = 0; b < n / 256; b++, w += 210, q16 += 256, meta += 9) {
        const int8_t *sc = (const int8_t *)(w + 192);
        meta[0] = snug_act_f16(w + 208);
        for (int j = 1; j < 9; j++) meta[j] = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w + 64 * h, *qh = w + 128 + 32 * h;
            for (int l = 0; l < 32; l++) {
                int q[4] = {(ql[l] & 0xf) | ((qh[l] & 3) << 4),
                            (ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4),
                            (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                            (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)};
                for (int m = 0; m < 4; m++) {
                    int e = 128 * h + 32 * m + l;
                    q16[e] = (int16_t)((q[m] - 32) * sc[e / 16]);
                }
            }
        }
    }
}

/* Token t of a tile (ttpad columns): scales, int16 pairs and per-32 sums. */
void snug_i16_quant_x_ref(const float *x, int64_t n, int t, int ttpad, void *xt) {
    int32_t *pairs = xt;
    float *dx = (float *)(void *)((uint8_t *)xt + (size_t)n * 2 * (size_t)ttpad);
    float *is = dx + (size_t)(n / 256) * (size_t)ttpad;
    for (int64_t b = 0; b < n / 256; b++) {
        const float *xb = x + 256 * b;
        float amax = 0;
        for (int i = 0; i < 256; i++) amax = fmaxf(amax, fabsf(xb[i]));
        float id = amax > 0 ? (float)I16_XMAX / amax : 0.0f;
        dx[(size_t)b * (size_t)ttpad + (size_t)t] = amax / (float)I16_XMAX;
        for (int j = 0; j < 8; j++) {
            int32_t s = 0;
            for (int i = 0; i < 32; i += 2) {
                int lo = (int)nearbyintf(xb[32 * j + i] * id);
                int hi = (int)nearbyintf(xb[32 * j + i + 1] * id);
                s += lo + hi;
                uint32_t pr = (uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16;
                int64_t kp = (256 * b + 32 * j + i) / 2;
                memcpy(&pairs[(size_t)kp * (size_t)ttpad + (size_t)t], &pr, 4);
            }
            is[(size_t)(8 * b + j) * (size_t)ttpad + (size_t)t] = (float)s;
        }
    }
}

/* Columns t0 .. ttpad-1 of a tile zeroed (so the padded lanes compute finite nothing). */
void snug_i16_pad_x(int64_t n, int t0, int ttpad, void *xt) {
    int32_t *pairs = xt;
    float *rest = (float *)(void *)((uint8_t *)xt + (size_t)n * 2 * (size_t)ttpad);
    for (int64_t kp = 0; kp < n / 2; kp++)
        for (int t = t0; t < ttpad; t++) pairs[(size_t)kp * (size_t)ttpad + (size_t)t] = 0;
    for (int64_t i = 0; i < n / 256 + n / 32; i++)
        for (int t = t0; t < ttpad; t++) rest[(size_t)i * (size_t)ttpad + (size_t)t] = 0;
}

/* Reference block product, per output and super-block: Q4_K — the exact integer sum acc,
 * main = (float)acc·d, mins = Σ_j fmaf(dmin·m_j, is_j) (first term a product),
 * facc = fmaf(main − mins, dx, facc); Q6_K — four exact sums of 64 elements, summed as floats
 * in order, facc = fmaf(sum·d, dx, facc). The vector kernel's operations lane by lane. */
void snug_i16_gemm_ref(uint32_t wtype, const void *wp, size_t wps, int nr, const void *xt,
                       int ttpad, int nt, int64_t n, float *y, size_t ys) {
    const int32_t *pairs = xt;
    const float *dx =
        (const float *)(const void *)((const uint8_t *)xt + (size_t)n * 2 * (size_t)ttpad);
    const float *is = dx + (size_t)(n / 256) * (size_t)ttpad;
    const int six = wtype == SNUG_DTYPE_Q6_K;
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) {
            const uint8_t *row = (const uint8_t *)wp + (size_t)r * wps;
            const int16_t *q16 = (const int16_t *)(const void *)row;
            const float *meta = (const float *)(const void *)(row + (size_t)n * 2);
            float facc = 0;
            for (int64_t b = 0; b < n / 256; b++) {
                float part = 0;
                int32_t acc = 0;
                for (int64_t kp = 128 * b; kp < 128 * b + 128; kp++) {
                    uint32_t pr;
                    memcpy(&pr, &pairs[(size_t)kp * (size_t)ttpad + (size_t)t], 4);
                    acc += q16[2 * kp] * (int16_t)(pr & 0xffff) +
                           q16[2 * kp + 1] * (int16_t)(pr >> 16);
                    if (six && kp % 32 == 31) {
                        part = kp % 128 == 31 ? (float)acc : part + (float)acc;
                        acc = 0;
                    }
                }
                const float *m = meta + 9 * b;
                if (six) {
                    facc = fmaf(part * m[0], dx[(size_t)b * (size_t)ttpad + (size_t)t], facc);
                    continue;
                }
                float main = (float)acc * m[0];
                float mins = m[1] * is[(size_t)(8 * b) * (size_t)ttpad + (size_t)t];
                for (int j = 1; j < 8; j++)
                    mins =
                        fmaf(m[1 + j], is[(size_t)(8 * b + j) * (size_t)ttpad + (size_t)t], mins);
                facc = fmaf(main - mins, dx[(size_t)b * (size_t)ttpad + (size_t)t], facc);
            }
            y[(size_t)t * ys + (size_t)r] = facc;
        }
}

/* ---- Q4_K on int8 activations (snug_i8_*) ------------------------------------------------- */

size_t snug_i8_row_bytes(int64_t n) {
    return SNUG_ALIGN_UP((size_t)n + (size_t)(n / 256) * 17 * 4, 64);
}

size_t snug_i8_x_bytes(int64_t n, int ttpad) {
    return ((size_t)n + (size_t)(n / 256) * 4 + (size_t)(n / 32) * 4) * (size_t)ttpad;
}

/* Q4_K prepared row: the values 0..15 in element order, then nine floats per super-block (d,
 * dmin·m_j), then eight int32 scales per super-block. */
static void i8_prep_q4k(const void *src, void *dst, int64_t n) {
    const uint8_t *w = src;
    uint8_t *q = dst;
    int64_t nb = n / 256;
    float *meta = (float *)(void *)(q + n);
    int32_t *scs = (int32_t *)(void *)(q + n + (size_t)nb * 36);
    for (int64_t b = 0; b < nb; b++, w += 144, q += 256, meta += 9, scs += 8) {
        int sc[8];
        q4k_block_meta(w, meta, sc);
        for (int c = 0; c < 4; c++) {
            scs[2 * c] = sc[2 * c];
            scs[2 * c + 1] = sc[2 * c + 1];
            const uint8_t *qs = w + 16 + 32 * c;
            for (int l = 0; l < 32; l++) {
                q[64 * c + l] = qs[l] & 0xf;
                q[64 * c + 32 + l] = qs[l] >> 4;
            }
        }
    }
}

/* Q5_K prepared row: the Q4_K form with the values 0..31 (the fifth bit from qh), so the same
 * product runs on it (|acc| ≤ 8·63·32·31·127 < 2³¹). Q5_K, 176 bytes per 256 (ggml-common.h
 * block_q5_K): f16 d | f16 dmin | scales[12] (as Q4_K) | qh[32] | qs[128]; element 64c + l of
 * chunk c (l < 32): low nibble of qs[32c + l] | bit 2c of qh[l] << 4, element 64c + 32 + l: high
 * nibble | bit 2c + 1 << 4 (quant_ref.c deq_q5_k). */
static void i8_prep_q5k(const void *src, void *dst, int64_t n) {
    const uint8_t *w = src;
    uint8_t *q = dst;
    int64_t nb = n / 256;
    float *meta = (float *)(void *)(q + n);
    int32_t *scs = (int32_t *)(void *)(q + n + (size_t)nb * 36);
    for (int64_t b = 0; b < nb; b++, w += 176, q += 256, meta += 9, scs += 8) {
        int sc[8];
        q4k_block_meta(w, meta, sc);
        const uint8_t *qh = w + 16;
        for (int c = 0; c < 4; c++) {
            scs[2 * c] = sc[2 * c];
            scs[2 * c + 1] = sc[2 * c + 1];
            const uint8_t *qs = w + 48 + 32 * c;
            for (int l = 0; l < 32; l++) {
                q[64 * c + l] = (uint8_t)((qs[l] & 0xf) | ((qh[l] >> (2 * c)) & 1) << 4);
                q[64 * c + 32 + l] = (uint8_t)((qs[l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4);
            }
        }
    }
}

/* IQ4_XS prepared row (signed form): the levels as int8 in element order, then per super-block
 * d (float), the correction 128·Σ_j sc_j·Σ_{k in j} level_k (int32), the eight scales − 32
 * (int32). IQ4_XS, 136 bytes per 256 (ggml-common.h block_iq4_xs): f16 d | u16 scales_h | u8
 * scales_l[4] | qs[128]; sub-block j: scale ((scales_l[j/2] >> 4(j%2)) & 15) | ((scales_h >>
 * 2j) & 3) << 4, minus 32; element l < 16 of it the low nibble of qs[16j + l], l + 16 the high. */
static void i8_prep_iq4xs(const void *src, void *dst, int64_t n) {
    const uint8_t *w = src;
    int8_t *q = dst;
    int64_t nb = n / 256;
    float *dd = (float *)(void *)((uint8_t *)dst + n);
    int32_t *corr = (int32_t *)(void *)(dd + nb), *scs = corr + nb;
    for (int64_t b = 0; b < nb; b++, w += 136, q += 256) {
        dd[b] = snug_act_f16(w);
        unsigned sh = (unsigned)(w[2] | w[3] << 8);
        int32_t c = 0;
        for (int j = 0; j < 8; j++) {
            int ls = ((w[4 + j / 2] >> (4 * (j % 2))) & 0xf) | (int)((sh >> (2 * j)) & 3) << 4;
            scs[8 * b + j] = ls - 32;
            int32_t s = 0;
            for (int l = 0; l < 16; l++) {
                q[32 * j + l] = snug_iq4nl_values[w[8 + 16 * j + l] & 0xf];
                q[32 * j + l + 16] = snug_iq4nl_values[w[8 + 16 * j + l] >> 4];
                s += q[32 * j + l] + q[32 * j + l + 16];
            }
            c += (ls - 32) * s;
        }
        corr[b] = 128 * c;
    }
}

/* Q3_K prepared row (signed form): −q·scale as int8 in element order (q in −4..3, scale in
 * −32..31, so −q·scale in −128..124), then per super-block −d (float) and the correction
 * 128·Σ bytes (int32). Q3_K, 110 bytes per 256 (ggml-common.h block_q3_K): hmask[32] | qs[64] |
 * scales[12] | f16 d; element 128h + 32g + l: q = ((qs[32h + l] >> 2g) & 3) − 4 where bit
 * 4h + g of hmask[l] is clear; sixteen 6-bit scales (low 4 bits from scales[0..7] low then high
 * nibbles, high 2 bits from scales[8 + j%4] >> 2(j/4)), minus 32, one per 16 elements. */
static void i8_prep_q3k(const void *src, void *dst, int64_t n) {
    const uint8_t *w = src;
    int8_t *q = dst;
    int64_t nb = n / 256;
    float *dd = (float *)(void *)((uint8_t *)dst + n);
    int32_t *corr = (int32_t *)(void *)(dd + nb);
    for (int64_t b = 0; b < nb; b++, w += 110, q += 256) {
        dd[b] = -snug_act_f16(w + 108);
        int sc[16];
        for (int j = 0; j < 16; j++) {
            int lo = j < 8 ? w[96 + j] & 0xf : w[96 + j - 8] >> 4;
            int hi = (w[104 + j % 4] >> (2 * (j / 4))) & 3;
            sc[j] = (lo | hi << 4) - 32;
        }
        int32_t c = 0;
        for (int h = 0; h < 2; h++)
            for (int g = 0; g < 4; g++)
                for (int l = 0; l < 32; l++) {
                    int e = 128 * h + 32 * g + l;
                    int v = ((w[32 + 32 * h + l] >> (2 * g)) & 3) -
                            (((w[l] >> (4 * h + g)) & 1) ? 0 : 4);
                    q[e] = (int8_t)(-v * sc[e / 16]);
                    c += q[e];
                }
        corr[b] = 128 * c;
    }
}

void snug_i8_prep_ref(uint32_t wtype, const void *src, void *dst, int64_t n) {
    if (wtype == SNUG_DTYPE_IQ4_XS)
        i8_prep_iq4xs(src, dst, n);
    else if (wtype == SNUG_DTYPE_Q3_K)
        i8_prep_q3k(src, dst, n);
    else if (wtype == SNUG_DTYPE_Q5_K)
        i8_prep_q5k(src, dst, n);
    else
        i8_prep_q4k(src, dst, n);
}

/* Token t of an int8 tile: the A256 values of each super-block as quads, dx, per-32 sums. */
void snug_i8_quant_x_ref(const float *x, int64_t n, int t, int ttpad, void *xt) {
    int32_t *quads = xt;
    float *dx = (float *)(void *)((uint8_t *)xt + (size_t)n * (size_t)ttpad);
    float *is = dx + (size_t)(n / 256) * (size_t)ttpad;
    for (int64_t b = 0; b < n / 256; b++) {
        const float *xb = x + 256 * b;
        float amax = 0;
        for (int i = 0; i < 256; i++) amax = fmaxf(amax, fabsf(xb[i]));
        float id = amax > 0 ? 127.0f / amax : 0.0f;
        dx[(size_t)b * (size_t)ttpad + (size_t)t] = amax / 127.0f;
        for (int j = 0; j < 8; j++) {
            int32_t s = 0;
            for (int i = 0; i < 32; i += 4) {
                int8_t qq[4];
                for (int m = 0; m < 4; m++) {
                    qq[m] = (int8_t)nearbyintf(xb[32 * j + i + m] * id);
                    s += qq[m];
                }
                int64_t kq = (256 * b + 32 * j + i) / 4;
                memcpy(&quads[(size_t)kq * (size_t)ttpad + (size_t)t], qq, 4);
            }
            is[(size_t)(8 * b + j) * (size_t)ttpad + (size_t)t] = (float)s;
        }
    }
}

void snug_i8_pad_x(int64_t n, int t0, int ttpad, void *xt) {
    int32_t *quads = xt;
    float *rest = (float *)(void *)((uint8_t *)xt + (size_t)n * (size_t)ttpad);
    for (int64_t kq = 0; kq < n / 4; kq++)
        for (int t = t0; t < ttpad; t++) quads[(size_t)kq * (size_t)ttpad + (size_t)t] = 0;
    for (int64_t i = 0; i < n / 256 + n / 32; i++)
        for (int t = t0; t < ttpad; t++) rest[(size_t)i * (size_t)ttpad + (size_t)t] = 0;
}

/* Reference product, per output and super-block. Q4_K: acc = Σ_j sc_j · Σ_{k in j} q_k·x_k
 * (exact: |acc| ≤ 8·63·32·15·127 < 2³¹), then the float steps of snug_i16_gemm_ref's Q4_K
 * branch. Signed form (IQ4_XS, Q3_K): acc = Σ_j sc_j · Σ_{k in j} w_k·(x_k + 128) (Q3_K: one
 * group of 256, no scale), main = (float)(acc − corr)·d, facc = fmaf(main, dx, facc). */
void snug_i8_gemm_ref(uint32_t wtype, const void *wp, size_t wps, int nr, const void *xt, int ttpad,
                      int nt, int64_t n, float *y, size_t ys) {
    const int32_t *quads = xt;
    const float *dx =
        (const float *)(const void *)((const uint8_t *)xt + (size_t)n * (size_t)ttpad);
    const float *is = dx + (size_t)(n / 256) * (size_t)ttpad;
    int64_t nb = n / 256;
    const int sgn = wtype == SNUG_DTYPE_IQ4_XS || wtype == SNUG_DTYPE_Q3_K;
    const int ng = wtype == SNUG_DTYPE_Q3_K ? 1 : 8; /* groups per super-block */
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) {
            const uint8_t *q = (const uint8_t *)wp + (size_t)r * wps;
            const float *meta = (const float *)(const void *)(q + n);
            const int32_t *scs = (const int32_t *)(const void *)(q + n + (size_t)nb * 36);
            const int32_t *corr = (const int32_t *)(const void *)(meta + nb);
            if (sgn) scs = corr + nb;
            float facc = 0;
            for (int64_t b = 0; b < nb; b++) {
                int32_t acc = 0;
                for (int j = 0; j < ng; j++) {
                    int32_t sub = 0;
                    int64_t k0 = (256 * b + (256 / ng) * j) / 4, k1 = k0 + 64 / ng;
                    for (int64_t kq = k0; kq < k1; kq++) {
                        int8_t xx[4];
                        memcpy(xx, &quads[(size_t)kq * (size_t)ttpad + (size_t)t], 4);
                        for (int m = 0; m < 4; m++)
                            sub +=
                                sgn ? (int8_t)q[4 * kq + m] * (xx[m] + 128) : q[4 * kq + m] * xx[m];
                    }
                    acc += ng == 1 ? sub : sub * scs[8 * b + j];
                }
                if (sgn) {
                    float main = (float)(acc - corr[b]) * meta[b];
                    facc = fmaf(main, dx[(size_t)b * (size_t)ttpad + (size_t)t], facc);
                    continue;
                }
                const float *m = meta + 9 * b;
                float main = (float)acc * m[0];
                float mins = m[1] * is[(size_t)(8 * b) * (size_t)ttpad + (size_t)t];
                for (int j = 1; j < 8; j++)
                    mins =
                        fmaf(m[1 + j], is[(size_t)(8 * b + j) * (size_t)ttpad + (size_t)t], mins);
                facc = fmaf(main - mins, dx[(size_t)b * (size_t)ttpad + (size_t)t], facc);
            }
            y[(size_t)t * ys + (size_t)r] = facc;
        }
}
