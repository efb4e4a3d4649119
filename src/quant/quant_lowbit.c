/* quant_lowbit.c — the scalar reference decoders of the low-bit formats llama.cpp writes:
 * Q2_K, Q3_K, the i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL,
 * IQ4_XS), the ternary TQ1_0 / TQ2_0 and MXFP4.
 *
 * Layouts are ggml's (ggml/src/ggml-common.h block structs; element order and scale rules from
 * ggml-quants.c dequantize_row_*, read, not copied), described in our words in
 * docs/quant-types.md. Every value is formed with the same float operations in the same order
 * as ggml's reference dequantizer (one product, or a product then a subtraction), so decoded
 * rows equal llama.cpp's and gguf-py's bit for bit (tests/py/test_quant_gguf.py checks it).
 * Invariant: each decoder writes exactly one block (block_elems floats) and reads only its
 * block_bytes; nothing allocates. Read next: quant_ref.c (dispatch and the dot products),
 * quant_grids.h (the lattice tables). */
#include "quant.h"
#include "quant_act.h"
#include "quant_grids.h"

#include <string.h>

static inline float h16(const uint8_t *p) {
    return snug_act_f16(p);
}
static inline uint16_t rd_u16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}
static inline uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
/* Byte j of a packed grid entry. */
static inline int grid8(uint64_t g, int j) {
    return (int)((g >> (8 * j)) & 0xff);
}
static inline float sgn(uint8_t signs, int j) {
    return (signs >> j) & 1 ? -1.f : 1.f;
}

/* Q2_K, 84 bytes / 256: scales[16] | qs[64] | f16 d | f16 dmin. Sixteen sub-blocks of 16;
 * sub-block s has scale d·(scales[s] & 15) and min dmin·(scales[s] >> 4); value = scale·q − min,
 * q 2 bits. Each half (128 elements, h = 0/1) uses qs[32h..32h+31]: its 4 groups of 32
 * (shift 0, 2, 4, 6) take bit pair `shift` of qs[l] for l < 32, sub-blocks 8h + 2g (l < 16) and
 * 8h + 2g + 1. */
static void deq_q2_k(const uint8_t *b, float *y) {
    const uint8_t *sc = b, *qs = b + 16;
    float d = h16(b + 80), dmin = h16(b + 82);
    for (int h = 0; h < 2; h++, qs += 32) {
        for (int g = 0; g < 4; g++) {
            for (int k = 0; k < 2; k++) {
                uint8_t s = *sc++;
                float dl = d * (float)(s & 0xf), ml = dmin * (float)(s >> 4);
                for (int l = 0; l < 16; l++)
                    *y++ = dl * (float)((qs[16 * k + l] >> (2 * g)) & 3) - ml;
            }
        }
    }
}

/* The sixteen 6-bit Q3_K scales (minus 32) from the 12-byte field: scale j < 8 has its low
 * nibble in the low nibble of byte j, j ≥ 8 in the high nibble of byte j − 8; its top two bits
 * are bits 2(j / 4)..2(j / 4) + 1 of byte 8 + j % 4. */
static void q3_scales(const uint8_t *s, int sc[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? s[j] & 0xf : s[j - 8] >> 4;
        int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (lo | hi << 4) - 32;
    }
}

/* Q3_K, 110 bytes / 256: hmask[32] | qs[64] | scales[12] | f16 d. Sixteen sub-blocks of 16,
 * value = d·scale·(q − 4·!hbit), q the 2 low bits. The 2 low bits sit as in Q2_K; the high bit
 * of element 32m + l (m = 0..7, l < 32) is bit m of hmask[l]; a clear bit subtracts 4. */
static void deq_q3_k(const uint8_t *b, float *y) {
    const uint8_t *hm = b, *qs = b + 32;
    float d = h16(b + 108);
    int sc[16];
    q3_scales(b + 96, sc);
    int is = 0, m = 0;
    for (int h = 0; h < 2; h++, qs += 32) {
        for (int g = 0; g < 4; g++, m++) {
            for (int k = 0; k < 2; k++) {
                float dl = d * (float)sc[is++];
                for (int l = 0; l < 16; l++) {
                    int i = 16 * k + l;
                    int q = ((qs[i] >> (2 * g)) & 3) - (((hm[i] >> m) & 1) ? 0 : 4);
                    *y++ = dl * (float)q;
                }
            }
        }
    }
}

/* IQ4_NL, 18 bytes / 32: f16 d | qs[16]; element j (< 16) is the low nibble of qs[j], j + 16 the
 * high nibble; value = d · levels[nibble] (the 16 non-uniform levels, quant_grids.h). */
static void deq_iq4_nl(const uint8_t *b, float *y) {
    float d = h16(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)snug_iq4nl_values[qs[j] & 0xf];
        y[j + 16] = d * (float)snug_iq4nl_values[qs[j] >> 4];
    }
}

/* The 6-bit IQ4_XS scale of sub-block j (0..7), minus 32: low nibble from scales_l[j / 2]
 * (low nibble for even j), top two bits from bits 2j..2j+1 of scales_h. */
static inline int iq4xs_scale(const uint8_t *b, int j) {
    int lo = (b[4 + j / 2] >> (4 * (j % 2))) & 0xf, hi = (rd_u16(b + 2) >> (2 * j)) & 3;
    return (lo | hi << 4) - 32;
}

/* IQ4_XS, 136 bytes / 256: f16 d | u16 scales_h | scales_l[4] | qs[128]. Eight sub-blocks of
 * 32, each an IQ4_NL block without its own f16: scale d·(6-bit scale − 32), qs[16j..16j+15]. */
static void deq_iq4_xs(const uint8_t *b, float *y) {
    float d = h16(b);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 8; j++, qs += 16, y += 32) {
        float dl = d * (float)iq4xs_scale(b, j);
        for (int l = 0; l < 16; l++) {
            y[l] = dl * (float)snug_iq4nl_values[qs[l] & 0xf];
            y[l + 16] = dl * (float)snug_iq4nl_values[qs[l] >> 4];
        }
    }
}

/* IQ2_XXS, 66 bytes / 256: f16 d | u16 qs[32]. Per 32 elements two u32 words a, b: the 4 bytes
 * of a index four 8-element points of the 256-entry grid; b holds four 7-bit sign codes (bits
 * 7l..7l+6) and, in its top 4 bits, the scale s: value = d·(0.5 + s)·0.25 · grid · sign. */
static void deq_iq2_xxs(const uint8_t *b, float *y) {
    float d = h16(b);
    const uint8_t *q = b + 2;
    for (int ib = 0; ib < 8; ib++, q += 8) {
        uint32_t s = rd_u32(q + 4);
        float db = d * (0.5f + (float)(s >> 28)) * 0.25f;
        for (int l = 0; l < 4; l++, y += 8) {
            uint64_t g = snug_iq2xxs_grid[q[l]];
            uint8_t signs = snug_iq_signs((s >> (7 * l)) & 127);
            for (int j = 0; j < 8; j++) y[j] = db * (float)grid8(g, j) * sgn(signs, j);
        }
    }
}

/* IQ2_XS, 74 bytes / 256: f16 d | u16 qs[32] | scales[8]. Each u16: 9-bit index into the
 * 512-entry grid, 7-bit sign code above it. Per 32 elements one scale byte: the low nibble
 * scales its first 16 elements, the high nibble the next 16 (d·(0.5 + s)·0.25). */
static void deq_iq2_xs(const uint8_t *b, float *y) {
    float d = h16(b);
    const uint8_t *q = b + 2, *sc = b + 66;
    for (int ib = 0; ib < 8; ib++) {
        float db[2] = {d * (0.5f + (float)(sc[ib] & 0xf)) * 0.25f,
                       d * (0.5f + (float)(sc[ib] >> 4)) * 0.25f};
        for (int l = 0; l < 4; l++, y += 8) {
            uint16_t v = rd_u16(q + 2 * (4 * ib + l));
            uint64_t g = snug_iq2xs_grid[v & 511];
            uint8_t signs = snug_iq_signs(v >> 9);
            for (int j = 0; j < 8; j++) y[j] = db[l / 2] * (float)grid8(g, j) * sgn(signs, j);
        }
    }
}

/* IQ2_S, 82 bytes / 256: f16 d | qs[32] | signs[32] | qh[8] | scales[8]. Point k of group ib
 * (32 elements, k < 4) has the 10-bit index qs[4ib + k] | bits 2k..2k+1 of qh[ib] << 8 into
 * the 1024-entry grid and its 8 signs stored in full in signs[4ib + k]; scales as IQ2_XS. */
static void deq_iq2_s(const uint8_t *b, float *y) {
    float d = h16(b);
    const uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66, *sc = b + 74;
    for (int ib = 0; ib < 8; ib++) {
        float db[2] = {d * (0.5f + (float)(sc[ib] & 0xf)) * 0.25f,
                       d * (0.5f + (float)(sc[ib] >> 4)) * 0.25f};
        for (int l = 0; l < 4; l++, y += 8) {
            int idx = qs[4 * ib + l] | ((qh[ib] >> (2 * l)) & 3) << 8;
            uint64_t g = snug_iq2s_grid[idx];
            for (int j = 0; j < 8; j++)
                y[j] = db[l / 2] * (float)grid8(g, j) * sgn(signs[4 * ib + l], j);
        }
    }
}

/* IQ3_XXS, 98 bytes / 256: f16 d | qs[64] | u32 scales_and_signs[8]. Per 32 elements: 8 bytes of
 * qs index 4-element points of the 256-entry grid; the u32 word holds four 7-bit sign codes
 * (one per 8 elements) and the scale s in its top 4 bits: value = d·(0.5 + s)·0.5 · grid · sign. */
static void deq_iq3_xxs(const uint8_t *b, float *y) {
    float d = h16(b);
    const uint8_t *qs = b + 2, *ss = b + 66;
    for (int ib = 0; ib < 8; ib++, qs += 8) {
        uint32_t s = rd_u32(ss + 4 * ib);
        float db = d * (0.5f + (float)(s >> 28)) * 0.5f;
        for (int l = 0; l < 4; l++, y += 8) {
            uint8_t signs = snug_iq_signs((s >> (7 * l)) & 127);
            uint32_t g1 = snug_iq3xxs_grid[qs[2 * l]], g2 = snug_iq3xxs_grid[qs[2 * l + 1]];
            for (int j = 0; j < 4; j++) {
                y[j] = db * (float)((g1 >> (8 * j)) & 0xff) * sgn(signs, j);
                y[j + 4] = db * (float)((g2 >> (8 * j)) & 0xff) * sgn(signs, j + 4);
            }
        }
    }
}

/* IQ3_S, 110 bytes / 256: f16 d | qs[64] | qh[8] | signs[32] | scales[4]. Per 32 elements
 * (group ib): 8 bytes of qs, each with a 9th index bit (bit k of qh[ib] for qs[8ib + k]) into
 * the 512-entry grid of 4-element points, 4 sign bytes (8 signs each, in full); scale nibble
 * ib % 2 of scales[ib / 2]: value = d·(1 + 2s) · grid · sign. */
static void deq_iq3_s(const uint8_t *b, float *y) {
    float d = h16(b);
    const uint8_t *qs = b + 2, *qh = b + 66, *signs = b + 74, *sc = b + 106;
    for (int ib = 0; ib < 8; ib++, qs += 8, signs += 4) {
        float db = d * (float)(1 + 2 * ((sc[ib / 2] >> (4 * (ib % 2))) & 0xf));
        for (int l = 0; l < 4; l++, y += 8) {
            uint32_t g1 = snug_iq3s_grid[qs[2 * l] | ((qh[ib] >> (2 * l)) & 1) << 8];
            uint32_t g2 = snug_iq3s_grid[qs[2 * l + 1] | ((qh[ib] >> (2 * l + 1)) & 1) << 8];
            for (int j = 0; j < 4; j++) {
                y[j] = db * (float)((g1 >> (8 * j)) & 0xff) * sgn(signs[l], j);
                y[j + 4] = db * (float)((g2 >> (8 * j)) & 0xff) * sgn(signs[l], j + 4);
            }
        }
    }
}

/* IQ1_S / IQ1_M shift every grid value by ±1/8 (ggml-common.h IQ1S_DELTA, IQ1M_DELTA). */
#define IQ1_DELTA 0.125f

/* IQ1_S, 50 bytes / 256: f16 d | qs[32] | u16 qh[8]. Per 32 elements one u16 word w: point k
 * (8 elements) has the 11-bit index qs[4ib + k] | bits 3k..3k+2 of w << 8 into the 2048-entry
 * grid of int8 values −1/0/1; bits 12-14 hold the scale s, bit 15 the sign of the shift:
 * value = d·(2s + 1) · (grid ± 1/8). */
static void deq_iq1_s(const uint8_t *b, float *y) {
    float d = h16(b);
    const uint8_t *qs = b + 2, *qh = b + 34;
    for (int ib = 0; ib < 8; ib++) {
        uint16_t w = rd_u16(qh + 2 * ib);
        float dl = d * (float)(2 * ((w >> 12) & 7) + 1);
        float delta = w & 0x8000 ? -IQ1_DELTA : IQ1_DELTA;
        for (int l = 0; l < 4; l++, y += 8) {
            uint64_t g = snug_iq1s_grid[qs[4 * ib + l] | ((w >> (3 * l)) & 7) << 8];
            for (int j = 0; j < 8; j++) y[j] = dl * ((float)(int8_t)grid8(g, j) + delta);
        }
    }
}

/* IQ1_M, 56 bytes / 256: qs[32] | qh[16] | scales[8] (four u16 words). The block's f16 scale is
 * spread over the top nibbles of the four words (word k's bits 12-15 are bits 4k..4k+3 of the
 * half). Per 32 elements (ib): qh[2ib], qh[2ib + 1] give, per nibble, 3 high index bits and the
 * sign of the shift for the four 8-element points; the two 3-bit scales of its halves are bits
 * 6(ib % 2)..+2 and +3..+5 of word ib / 2: value = d·(2s + 1) · (grid ± 1/8). */
static void deq_iq1_m(const uint8_t *b, float *y) {
    const uint8_t *qs = b, *qh = b + 32, *scb = b + 48;
    uint16_t sc[4];
    for (int k = 0; k < 4; k++) sc[k] = rd_u16(scb + 2 * k);
    uint16_t dh = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                             (sc[3] & 0xf000));
    float d = snug_f16_to_f32(dh);
    for (int ib = 0; ib < 8; ib++, qs += 4, qh += 2) {
        float dl[2] = {d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1),
                       d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1)};
        for (int l = 0; l < 4; l++, y += 8) {
            int nib = (qh[l / 2] >> (4 * (l % 2))) & 0xf;
            uint64_t g = snug_iq1s_grid[qs[l] | (nib & 7) << 8];
            float delta = nib & 8 ? -IQ1_DELTA : IQ1_DELTA;
            for (int j = 0; j < 8; j++) y[j] = dl[l / 2] * ((float)(int8_t)grid8(g, j) + delta);
        }
    }
}

/* TQ1_0, 54 bytes / 256: qs[48] | qh[4] | f16 d. Ternary values t ∈ {−1, 0, 1} packed 5 per byte
 * (qs) and 4 per byte (qh) as base-3 fractions: the n-th digit of byte q is
 * ((uint8_t)(q · 3^n) · 3) >> 8. Element order: qs[0..31] digits n = 0..4 give elements
 * 32n + m; qs[32..47] give 160 + 16n + m; qh[0..3] digits 0..3 give 240 + 4n + j.
 * value = (digit − 1)·d. */
static inline float tq1_digit(uint8_t q, int n, float d) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    uint8_t v = (uint8_t)(q * pow3[n]);
    return (float)((((uint16_t)v * 3) >> 8) - 1) * d;
}
static void deq_tq1_0(const uint8_t *b, float *y) {
    float d = h16(b + 52);
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 32; m++) *y++ = tq1_digit(b[m], n, d);
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 16; m++) *y++ = tq1_digit(b[32 + m], n, d);
    for (int n = 0; n < 4; n++)
        for (int j = 0; j < 4; j++) *y++ = tq1_digit(b[48 + j], n, d);
}

/* TQ2_0, 66 bytes / 256: qs[64] | f16 d. Element 128h + 32g + m is bit pair 2g of qs[32h + m];
 * value = (pair − 1)·d. */
static void deq_tq2_0(const uint8_t *b, float *y) {
    float d = h16(b + 64);
    for (int h = 0; h < 2; h++)
        for (int g = 0; g < 4; g++)
            for (int m = 0; m < 32; m++) *y++ = (float)(((b[32 * h + m] >> (2 * g)) & 3) - 1) * d;
}

/* MXFP4, 17 bytes / 32: e (E8M0 exponent byte) | qs[16]. Element j (< 16) is the low nibble of
 * qs[j], j + 16 the high nibble, an FP4 (E2M1) code; value = doubled E2M1 value · 2^(e − 128)
 * (half the block scale 2^(e − 127), as the values are stored doubled). */
static void deq_mxfp4(const uint8_t *b, float *y) {
    uint32_t bits = b[0] < 2 ? 0x00200000u << b[0] : (uint32_t)(b[0] - 1) << 23;
    float d;
    memcpy(&d, &bits, 4);
    const uint8_t *qs = b + 1;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)snug_mxfp4_values[qs[j] & 0xf] * d;
        y[j + 16] = (float)snug_mxfp4_values[qs[j] >> 4] * d;
    }
}

snug_block_deq_fn snug_lowbit_decoder(uint32_t type) {
    switch (type) {
    case SNUG_DTYPE_Q2_K:
        return deq_q2_k;
    case SNUG_DTYPE_Q3_K:
        return deq_q3_k;
    case SNUG_DTYPE_IQ4_NL:
        return deq_iq4_nl;
    case SNUG_DTYPE_IQ4_XS:
        return deq_iq4_xs;
    case SNUG_DTYPE_IQ2_XXS:
        return deq_iq2_xxs;
    case SNUG_DTYPE_IQ2_XS:
        return deq_iq2_xs;
    case SNUG_DTYPE_IQ2_S:
        return deq_iq2_s;
    case SNUG_DTYPE_IQ3_XXS:
        return deq_iq3_xxs;
    case SNUG_DTYPE_IQ3_S:
        return deq_iq3_s;
    case SNUG_DTYPE_IQ1_S:
        return deq_iq1_s;
    case SNUG_DTYPE_IQ1_M:
        return deq_iq1_m;
    case SNUG_DTYPE_TQ1_0:
        return deq_tq1_0;
    case SNUG_DTYPE_TQ2_0:
        return deq_tq2_0;
    case SNUG_DTYPE_MXFP4:
        return deq_mxfp4;
    default:
        return NULL;
    }
}
