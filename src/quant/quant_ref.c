/* quant_ref.c — the reference kernels: fp16/bf16 scalar conversion, and dequantize + dot for
 * every computable type: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K here,
 * the low-bit formats (Q2_K, Q3_K, IQ*, TQ*, MXFP4) in quant_lowbit.c.
 *
 * These define the numbers: faster kernels are tested against them. Each block type is read
 * byte-wise from its packed layout (no struct overlay, so no alignment or padding assumptions;
 * all multi-byte fields are little-endian). Layouts are facts taken from ggml's
 * ggml/src/ggml-common.h block structs and ggml-quants.c dequantize_row_* (read, not copied);
 * each decoder below restates its layout in a comment.
 * Invariant: nothing here allocates; n is a multiple of the type's block_elems (asserted).
 * Read next: quant_quantize.c (the encoders), recipe.c (which type a tensor gets). */
#include "core/core.h"
#include "quant.h"
#include "quant_act.h"

#include <math.h>
#include <string.h>

/* ---- scalar conversions ------------------------------------------------------------------- */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE binary16 -> binary32, exact (every half is representable as a float). Written without
 * branches so row loops over it vectorise: shift exponent+mantissa into place and rebias the
 * exponent (+112); exponent 31 (inf/NaN) rebias further to 255; exponent 0 (zero/subnormal)
 * is rebuilt as 2^-14 · (1 + m/1024) − 2^-14 = m · 2^-24 in float arithmetic on normal
 * numbers (so it stays exact even with flush-to-zero / denormals-are-zero modes set). */
static inline float f16_to_f32_inline(uint16_t h) {
    uint32_t o = (uint32_t)(h & 0x7fff) << 13;
    uint32_t e = o & 0x0f800000u;
    uint32_t normal = o + (112u << 23);
    uint32_t special = o + (224u << 23); /* 112 + 112: exponent 31 -> 255 */
    float sub = bits_f32(o + (113u << 23)) - 0x1p-14f;
    uint32_t r = e == 0x0f800000u ? special : normal;
    uint32_t sb = f32_bits(sub);
    r = e == 0 ? sb : r;
    return bits_f32(r | (uint32_t)(h & 0x8000) << 16);
}

float snug_f16_to_f32(uint16_t h) {
    return f16_to_f32_inline(h);
}

/* binary32 -> binary16, round to nearest, ties to even. Overflow goes to inf, values below
 * half the smallest subnormal go to (signed) zero, NaN stays NaN (quiet, payload top bits). */
uint16_t snug_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    u &= 0x7fffffffu;
    if (u >= 0x7f800000u) { /* inf or NaN */
        if (u == 0x7f800000u) return sign | 0x7c00;
        return (uint16_t)(sign | 0x7e00 | ((u >> 13) & 0x3ff));
    }
    if (u >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds to inf */
    if (u < 0x38800000u) {                      /* below 2^-14: half subnormal or zero */
        uint32_t e = u >> 23;
        uint32_t shift = 126 - e; /* value = m_full * 2^(e-150) = (m_full >> shift) * 2^-24 */
        if (shift > 24) return sign;
        uint32_t m = (u & 0x7fffff) | 0x800000u; /* e >= 102 here: a normal float */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r); /* r == 0x400 is correctly the smallest normal */
    }
    uint32_t h = ((u >> 13) - (112u << 10)); /* rebias exponent, keep 10 mantissa bits */
    uint32_t rem = u & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* carry may bump the exponent */
    return (uint16_t)(sign | h);
}

float snug_bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

/* binary32 -> bfloat16 (the top 16 bits), round to nearest even; NaN forced quiet. */
uint16_t snug_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* ---- block decoders ----------------------------------------------------------------------- */
/* Each writes one block's elements to y. `b` points at the packed block. */

static inline float rd_f16(const uint8_t *p) {
    return f16_to_f32_inline((uint16_t)(p[0] | (p[1] << 8)));
}
static inline uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Q4_0, 18 bytes / 32: f16 d | qs[16]. Element j (<16) is the low nibble of qs[j], element
 * j+16 the high nibble; value = (q - 8) * d. */
static void deq_q4_0(const uint8_t *b, float *y) {
    float d = rd_f16(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((qs[j] & 0xf) - 8) * d;
        y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
    }
}

/* Q4_1, 20 bytes / 32: f16 d | f16 m | qs[16] (nibbles as Q4_0); value = q * d + m. */
static void deq_q4_1(const uint8_t *b, float *y) {
    float d = rd_f16(b), m = rd_f16(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(qs[j] & 0xf) * d + m;
        y[j + 16] = (float)(qs[j] >> 4) * d + m;
    }
}

/* Q5_0, 22 bytes / 32: f16 d | u32 qh | qs[16]. Element i's 5th bit is bit i of qh; low four
 * bits are nibbles as Q4_0; value = (q - 16) * d. */
static void deq_q5_0(const uint8_t *b, float *y) {
    float d = rd_f16(b);
    uint32_t qh = rd_u32(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        int q0 = (qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4);
        int q1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        y[j] = (float)(q0 - 16) * d;
        y[j + 16] = (float)(q1 - 16) * d;
    }
}

/* Q5_1, 24 bytes / 32: f16 d | f16 m | u32 qh | qs[16]; value = q * d + m. */
static void deq_q5_1(const uint8_t *b, float *y) {
    float d = rd_f16(b), m = rd_f16(b + 2);
    uint32_t qh = rd_u32(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        int q0 = (qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4);
        int q1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        y[j] = (float)q0 * d + m;
        y[j + 16] = (float)q1 * d + m;
    }
}

/* Q8_0, 34 bytes / 32: f16 d | int8 qs[32]; value = q * d. */
static void deq_q8_0(const uint8_t *b, float *y) {
    float d = rd_f16(b);
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int j = 0; j < 32; j++) y[j] = (float)qs[j] * d;
}

/* The 6-bit scale and min of sub-block j (0..7) from the 12-byte K-quant scale field: sub-blocks
 * 0-3 keep scale/min in the low 6 bits of bytes j / j+4; sub-blocks 4-7 keep their low 4 bits
 * in the nibbles of byte j+4 and their top 2 bits in the top bits of bytes j-4 / j. */
static inline void kscale(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q4_K, 144 bytes / 256: f16 d | f16 dmin | scales[12] | qs[128]. Eight sub-blocks of 32;
 * sub-block j has scale d*sc_j and min dmin*m_j; value = d*sc*q - dmin*m. The 64 elements
 * 64c..64c+63 take the low (first 32) and high (next 32) nibbles of qs[32c..32c+31]. */
static void deq_q4_k(const uint8_t *b, float *y) {
    float d = rd_f16(b), dmin = rd_f16(b + 2);
    const uint8_t *sc = b + 4, *qs = b + 16;
    for (int c = 0; c < 4; c++, qs += 32, y += 64) {
        int s0, m0, s1, m1;
        kscale(sc, 2 * c, &s0, &m0);
        kscale(sc, 2 * c + 1, &s1, &m1);
        float d0 = d * (float)s0, o0 = dmin * (float)m0, d1 = d * (float)s1, o1 = dmin * (float)m1;
        for (int l = 0; l < 32; l++) {
            y[l] = d0 * (float)(qs[l] & 0xf) - o0;
            y[l + 32] = d1 * (float)(qs[l] >> 4) - o1;
        }
    }
}

/* Q5_K, 176 bytes / 256: f16 d | f16 dmin | scales[12] | qh[32] | qs[128]. As Q4_K, plus a 5th
 * bit: element 64c+l (l<32) takes bit 2c of qh[l], element 64c+32+l takes bit 2c+1. */
static void deq_q5_k(const uint8_t *b, float *y) {
    float d = rd_f16(b), dmin = rd_f16(b + 2);
    const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + 48;
    for (int c = 0; c < 4; c++, qs += 32, y += 64) {
        int s0, m0, s1, m1;
        kscale(sc, 2 * c, &s0, &m0);
        kscale(sc, 2 * c + 1, &s1, &m1);
        float d0 = d * (float)s0, o0 = dmin * (float)m0, d1 = d * (float)s1, o1 = dmin * (float)m1;
        for (int l = 0; l < 32; l++) {
            int q0 = (qs[l] & 0xf) | (((qh[l] >> (2 * c)) & 1) << 4);
            int q1 = (qs[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4);
            y[l] = d0 * (float)q0 - o0;
            y[l + 32] = d1 * (float)q1 - o1;
        }
    }
}

/* Q6_K, 210 bytes / 256: ql[128] | qh[64] | int8 scales[16] | f16 d. Sixteen sub-blocks of 16,
 * value = d * scale * (q - 32), q 6 bits. Each half (128 elements, h = 0/1) uses ql[64h..+64],
 * qh[32h..+32]: for l < 32, elements l, l+32, l+64, l+96 of the half take low nibble of ql[l],
 * low nibble of ql[l+32], high nibble of ql[l], high nibble of ql[l+32], and bit pairs 0-1,
 * 2-3, 4-5, 6-7 of qh[l] as their top two bits. */
static void deq_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = rd_f16(b + 208);
    for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, y += 128) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q0 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32;
            int q1 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q0;
            y[l + 32] = d * (float)sc[is + 2] * (float)q1;
            y[l + 64] = d * (float)sc[is + 4] * (float)q2;
            y[l + 96] = d * (float)sc[is + 6] * (float)q3;
        }
    }
}

typedef snug_block_deq_fn deq_fn;

/* The block decoder for a quantized type, or NULL (plain float types are handled inline). */
static deq_fn block_decoder(uint32_t type) {
    switch (type) {
    case SNUG_DTYPE_Q4_0:
        return deq_q4_0;
    case SNUG_DTYPE_Q4_1:
        return deq_q4_1;
    case SNUG_DTYPE_Q5_0:
        return deq_q5_0;
    case SNUG_DTYPE_Q5_1:
        return deq_q5_1;
    case SNUG_DTYPE_Q8_0:
        return deq_q8_0;
    case SNUG_DTYPE_Q4_K:
        return deq_q4_k;
    case SNUG_DTYPE_Q5_K:
        return deq_q5_k;
    case SNUG_DTYPE_Q6_K:
        return deq_q6_k;
    default:
        return snug_lowbit_decoder(type);
    }
}

/* ---- row kernels -------------------------------------------------------------------------- */

/* Dequantize a row of n elements. A non-computable type is a caller bug (the loader rejects
 * such tensors with a message first), hence the assertion. */
void snug_dequantize_row_ref(uint32_t type, const void *src, float *dst, int64_t n) {
    const struct snug_dtype_info *t = snug_dtype_info(type);
    SNUG_ASSERT(t && t->computable && n >= 0 && n % t->block_elems == 0);
    const uint8_t *s = src;
    switch (type) {
    case SNUG_DTYPE_F32:
        memcpy(dst, src, (size_t)n * 4);
        return;
    case SNUG_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = rd_f16(s + 2 * i);
        return;
    case SNUG_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = snug_bf16_to_f32((uint16_t)(s[2 * i] | s[2 * i + 1] << 8));
        return;
    default:
        break;
    }
    deq_fn f = block_decoder(type);
    SNUG_ASSERT(f);
    int64_t nb = n / t->block_elems;
    for (int64_t i = 0; i < nb; i++) f(s + i * t->block_bytes, dst + i * t->block_elems);
}

/* Σ w·x for a float row, with 8 independent partial sums (vectorisable, and the rounding
 * behaviour does not depend on the compiler re-associating). */
static inline float dot_f32(const float *a, const float *b, int64_t n) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    float s = 0;
    for (; i < n; i++) s += a[i] * b[i];
    for (int k = 0; k < 8; k++) s += acc[k];
    return s;
}

/* Q8_0 dot without a float temporary: per block Σ q·x, then one multiply by d. */
static float dot_q8_0(const uint8_t *w, const float *x, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++, w += 34, x += 32) {
        const int8_t *qs = (const int8_t *)(w + 2);
        float acc = 0;
        for (int j = 0; j < 32; j++) acc += (float)qs[j] * x[j];
        s += acc * rd_f16(w);
    }
    return s;
}

/* Dot of a quantized row with a float vector. Quantized types decode one block at a time into
 * a stack buffer and take a float dot of it (both loops vectorise); F16/BF16 decode in chunks. */
float snug_dot_row_ref(uint32_t type, const void *w, const float *x, int64_t n) {
    const struct snug_dtype_info *t = snug_dtype_info(type);
    SNUG_ASSERT(t && t->computable && n >= 0 && n % t->block_elems == 0);
    const uint8_t *s = w;
    float buf[256];
    float sum = 0;
    switch (type) {
    case SNUG_DTYPE_F32: {
        const float *wf = w; /* callers pass 4-byte aligned f32 rows */
        return dot_f32(wf, x, n);
    }
    case SNUG_DTYPE_F16:
    case SNUG_DTYPE_BF16:
        for (int64_t i = 0; i < n; i += 256) {
            int64_t m = SNUG_MIN(256, n - i);
            snug_dequantize_row_ref(type, s + 2 * i, buf, m);
            sum += dot_f32(buf, x + i, m);
        }
        return sum;
    case SNUG_DTYPE_Q8_0:
        return dot_q8_0(s, x, n);
    default:
        break;
    }
    deq_fn f = block_decoder(type);
    SNUG_ASSERT(f);
    int64_t be = t->block_elems, nb = n / be;
    for (int64_t i = 0; i < nb; i++) {
        f(s + i * t->block_bytes, buf);
        sum += dot_f32(buf, x + i * be, be);
    }
    return sum;
}

/* The dispatching entry points: the run-time selected vector dequantizer where there is one
 * (quant_act.c; bit-identical to the reference), else the reference. */
void snug_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n) {
    snug_deq_fn f = snug_act_deq_fn(type);
    if (f) {
        const struct snug_dtype_info *t = snug_dtype_info(type);
        SNUG_ASSERT(t && n >= 0 && n % t->block_elems == 0);
        f(src, dst, n);
        return;
    }
    snug_dequantize_row_ref(type, src, dst, n);
}

/* Dot with float activations: F32/F16/BF16 go straight to the dispatched FMA kernel; types with
 * a vector dequantizer decode 256 elements at a time onto the stack and dot them with it. */
float snug_dot_row(uint32_t type, const void *w, const float *x, int64_t n) {
    float out;
    if (type == SNUG_DTYPE_F32 || type == SNUG_DTYPE_F16 || type == SNUG_DTYPE_BF16) {
        snug_act_dot(type, w, x, 0, 1, n, &out);
        return out;
    }
    if (type == SNUG_DTYPE_Q8_0 && snug_act_fdot_q8_0()) return snug_act_fdot_q8_0()(w, x, n);
    if (type == SNUG_DTYPE_Q6_K && n % 256 == 0 && snug_act_fdot_q6_k())
        return snug_act_fdot_q6_k()(w, x, n);
    snug_deq_fn f = snug_act_deq_fn(type);
    const struct snug_dtype_info *t = snug_dtype_info(type);
    if (!f || n % 256 != 0 || 256 % t->block_elems != 0) return snug_dot_row_ref(type, w, x, n);
    float buf[256];
    float sum = 0;
    size_t chunk_bytes = (size_t)(256 / t->block_elems) * t->block_bytes;
    for (int64_t i = 0; i < n; i += 256) {
        f((const uint8_t *)w + (size_t)(i / 256) * chunk_bytes, buf, 256);
        snug_act_dot(SNUG_DTYPE_F32, buf, x + i, 0, 1, 256, &out);
        sum += out;
    }
    return sum;
}
