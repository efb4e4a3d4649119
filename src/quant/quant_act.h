/* quant_act.h — private to src/quant: the int8 activation block layouts and the kernel table
 * that quant_dispatch.c fills from the scalar (quant_act.c), AVX2 (quant_avx2.c) and AVX-512
 * (quant_avx512.c) implementations. The public entry points are in quant.h.
 * Invariant: every table entry of every level computes the same integers; only the order of
 * float additions may differ between levels.
 * Read next: quant_act.c (the reference semantics), quant_simd.inc (the vector versions). */
#ifndef SNUG_QUANT_ACT_H
#define SNUG_QUANT_ACT_H

#include "quant.h"

#include <stddef.h>
#include <stdint.h>

/* A32: blocks of 32 activations as int8 with one float scale each; x ≈ d · q, |q| ≤ 127
 * (36 bytes per block). Blocks are stored in groups of up to 8 (256 elements): the group's
 * int8 values first, then its scales, so kernels load 8 scales with one instruction. Block b
 * of a row: group g = b / 8 with m = min(8, n_blocks - 8g) blocks, j = b % 8; its q at byte
 * 288g + 32j, its scale at 288g + 32m + 4j. */
#define SNUG_A32_BYTES 36
static inline size_t snug_a32_q(int64_t nb, int64_t b) {
    return (size_t)(288 * (b / 8) + 32 * (b % 8));
}
static inline size_t snug_a32_d(int64_t nb, int64_t b) {
    int64_t g = b / 8, m = nb - 8 * g < 8 ? nb - 8 * g : 8;
    return (size_t)(288 * g + 32 * m + 4 * (b % 8));
}
/* A256: 256 activations as int8, one float scale, and the sums of q over each 16 (292 bytes):
 * qs[256] | float d | int16 bsums[16]. */
#define SNUG_A256_BYTES 292

/* Dot of one weight row with nc (1..SNUG_ACT_MAX_ROWS) quantized activation rows (xq + c·xs), n
 * elements. */
typedef void (*snug_actdot_fn)(const void *w, const void *xq, size_t xs, int nc, int64_t n,
                               float *out);
/* Dot of one float-family weight row (F32/F16/BF16) with nc (1..SNUG_ACT_MAX_ROWS) float rows x +
 * c·xs. */
typedef void (*snug_fdot_fn)(const void *w, const float *x, size_t xs, int nc, int64_t n,
                             float *out);
/* Float block product (quant.h snug_fgemm). */
typedef void (*snug_fgemm_fn)(const float *w, size_t ws, int nr, const float *x, size_t xs, int nt,
                              int64_t n, float *y, size_t ys);
/* Transposed float block product (quant.h snug_tgemm). */
typedef void (*snug_tgemm_fn)(const float *w, size_t ws, int nr, const float *xt, size_t xts,
                              int nt, int64_t n, float *y, size_t ys);
/* Q4_K block product on int16 activations (quant.h snug_i16_gemm). */
typedef void (*snug_i16gemm_fn)(uint32_t wtype, const void *wp, size_t wps, int nr, const void *xt,
                                int ttpad, int nt, int64_t n, float *y, size_t ys);
typedef void (*snug_actq_fn)(const float *x, void *xq, int64_t n);
/* Dequantize a row of n elements (bit-identical to snug_dequantize_row_ref). */
typedef void (*snug_deq_fn)(const void *src, float *dst, int64_t n);

struct snug_qkernels {
    snug_actq_fn quant_a32, quant_a256;
    snug_actdot_fn dot_q8_0, dot_q4_k, dot_q5_k, dot_q6_k, dot_iq4_xs, dot_q3_k;
    snug_fdot_fn dot_f32, dot_f16, dot_bf16;
    snug_deq_fn deq_q8_0, deq_q4_k, deq_q5_k, deq_q6_k; /* NULL: use the reference */
    snug_deq_fn deq_q2_k, deq_q3_k, deq_iq4_nl, deq_iq4_xs;
    float (*fdot_q8_0)(const void *w, const float *x, int64_t n); /* NULL: deq + dot */
    float (*fdot_q6_k)(const void *w, const float *x, int64_t n); /* NULL: deq + dot */
    /* two Q4_K rows · one A256 row (snug_act_dot2); NULL: two dot_q4_k calls */
    void (*dot2_q4_k)(const void *w0, const void *w1, const void *xq, int64_t n, float *out);
    snug_fgemm_fn fgemm;
    snug_tgemm_fn tgemm;
    snug_i16gemm_fn i16gemm; /* NULL: not at this level (callers use snug_tgemm) */
    void (*i16prep_q4k)(const void *src, void *dst, int64_t n); /* NULL: the scalar one */
    void (*i16prep_q6k)(const void *src, void *dst, int64_t n); /* NULL: the scalar one */
    void (*i16quant_x)(const float *x, int64_t n, int t, int ttpad, void *xt); /* same */
    /* Q4_K, IQ4_XS, Q3_K on int8 activations (snug_i8_*); NULL: not at this level */
    void (*i8gemm)(uint32_t wtype, const void *wp, size_t wps, int nr, const void *xt, int ttpad,
                   int nt, int64_t n, float *y, size_t ys);
    void (*i8prep)(uint32_t wtype, const void *src, void *dst, int64_t n);
    void (*i8quant_x)(const float *x, int64_t n, int t, int ttpad, void *xt);
};
/* The dispatched fused Q8_0 · float dot, or NULL. */
float (*snug_act_fdot_q8_0(void))(const void *w, const float *x, int64_t n);
float (*snug_act_fdot_q6_k(void))(const void *w, const float *x, int64_t n);
/* The dispatched dequantizer for a type, or NULL when the reference is the only one. */
snug_deq_fn snug_act_deq_fn(uint32_t type);

void snug_qkernels_ref(struct snug_qkernels *k);
/* These return false when the binary was built without that kernel set. */
bool snug_qkernels_avx2(struct snug_qkernels *k);
bool snug_qkernels_avx512(struct snug_qkernels *k);

/* One block's decoder: writes the block's block_elems floats to y (quant_ref.c, quant_lowbit.c). */
typedef void (*snug_block_deq_fn)(const uint8_t *b, float *y);
/* The reference decoder of a low-bit type (Q2_K, Q3_K, IQ*, TQ*, MXFP4), or NULL. */
snug_block_deq_fn snug_lowbit_decoder(uint32_t type);

/* Shared scalar helpers (quant_act.c). */
float snug_act_f16(const uint8_t *p); /* little-endian half at p */
void snug_act_kscale(const uint8_t *s, int j, int *sc, int *mn);

#endif
