/* cuda_common.cuh — device helpers shared by the CUDA kernel files: warp reductions, f16/bf16
 * loads, the launch-error check, and the per-type "decode 8 consecutive weights" functions
 * the matvec and dequantise kernels are built on.
 * Block layouts are ggml's (as restated in src/quant/quant_ref.c, the reference decoders these
 * must match bit for bit in the values they produce).
 * Invariant: header-only, device code and tiny host helpers; nothing allocates.
 * Read next: cuda_matmul.cu. */
#ifndef SNUG_CUDA_COMMON_CUH
#define SNUG_CUDA_COMMON_CUH

/* The C headers declare C functions but carry no extern "C" guards of their own. */
extern "C" {
#include "quant/quant.h"
#include "quant/quant_grid_values.h"
#include "quant/quant_grids.h"
#include "snug.h"
}
#include "backend/cuda/cuda_ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define SNUG_CU_STREAM(cu) ((cudaStream_t)(cu)->stream)

/* The int8-activation matvec of cuda_matvec.cu (used by snug_cuda_matmul for T <= 8 when it
 * gets work memory): which types it has, the work it needs, and the call (x NULL: work already
 * holds x rounded by the previous call over the same x, n_in and T). */
extern "C" bool snug_cu_mvq_supported(uint32_t type);
extern "C" size_t snug_cu_mvq_work_bytes(int64_t n_in, int64_t T);
/* Where x rounded to int8 lies in that work memory: qx [T][n_in], then ds [T][n_in / 32] (d,
 * d·Σq) per block of 32 (written by k_quant_x8, or by an op that rounds its own output: the
 * *_q8 forms of cuda_basic.cu). Flat: (n_in, T) and (n_in·T, 1) give the same pointers. */
extern "C" void snug_cu_mvq_x(void *work, int64_t n_in, int64_t T, int8_t **qx, float2 **ds);
extern "C" int snug_cu_mvq(struct snug_cuda *cu, uint32_t type, const void *w, int64_t n_in,
                           int64_t n_out, const float *x, int T, float *y, void *work,
                           struct snug_err *err);
/* The same for two matrices of one type and n_in over one x (w2 NULL: w alone). */
extern "C" int snug_cu_mvq2(struct snug_cuda *cu, uint32_t type, const void *w, int64_t n_out,
                            const void *w2, int64_t n_out2, int64_t n_in, const float *x, int T,
                            float *y, float *y2, void *work, struct snug_err *err);

/* After a launch: turn a launch error into a status with the kernel's name. */
static inline int snug_cu_launched(struct snug_err *err, const char *kernel) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return SNUG_OK;
    return snug_err_set(err, SNUG_ERR_INTERNAL, "cuda: launching %s failed: %s", kernel,
                        cudaGetErrorString(e));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* One block of 32 values (lane l holds value l) rounded to int8 as the int8 matvec reads x:
 * d = max|v| / 127, q = round-half-even(v / d) (0 for an all-zero block); the lane's q goes to
 * *q and lane 0 writes (d, d·Σq) to *ds. Every lane of the warp must call it. */
__device__ __forceinline__ void warp_round_q8(float v, int8_t *q, float2 *ds) {
    float amax = warp_max(fabsf(v));
    float d = amax / 127.0f;
    int qi = amax > 0.0f ? __float2int_rn(v / d) : 0;
    int sum = qi;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    *q = (int8_t)qi;
    if ((threadIdx.x & 31) == 0) *ds = make_float2(d, d * (float)sum);
}

/* Sum over a block of blockDim.x (a multiple of 32, <= 1024) threads; every thread gets it.
 * `sh` is 32 floats of shared memory. */
__device__ __forceinline__ float block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float ld_f16(const uint8_t *p) {
    return __half2float(__ushort_as_half((unsigned short)(p[0] | (p[1] << 8))));
}

/* The 6-bit scale/min of K-quant sub-block j (0..7) from the 12-byte scale field. */
__device__ __forceinline__ void kscale(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Decode elements e0 .. e0+7 (e0 a multiple of 8) of a row of `TYPE` starting at `row` into
 * y[8]. Every block type keeps 8 aligned consecutive elements inside one sub-block, so one
 * scale (and min) covers all eight. Plain float rows are read with 16-byte loads. */
template <int TYPE> __device__ __forceinline__ void deq8(const uint8_t *row, int64_t e0, float *y);

template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_F32>(const uint8_t *row, int64_t e0, float *y) {
    const float4 *p = (const float4 *)(row + e0 * 4);
    float4 a = __ldg(p), b = __ldg(p + 1);
    y[0] = a.x, y[1] = a.y, y[2] = a.z, y[3] = a.w, y[4] = b.x, y[5] = b.y, y[6] = b.z, y[7] = b.w;
}
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_F16>(const uint8_t *row, int64_t e0, float *y) {
    uint4 u = __ldg((const uint4 *)(row + e0 * 2));
    const __half2 *h = (const __half2 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = __half22float2(h[i]);
        y[2 * i] = f.x, y[2 * i + 1] = f.y;
    }
}
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_BF16>(const uint8_t *row, int64_t e0, float *y) {
    uint4 u = __ldg((const uint4 *)(row + e0 * 2));
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        y[2 * i] = __uint_as_float(w[i] << 16);
        y[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
/* Q4_0: 18 bytes / 32: f16 d | qs[16]; element j<16 low nibble of qs[j], j+16 high nibble. */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_Q4_0>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 5) * 18;
    int j = (int)(e0 & 31);
    float d = ld_f16(b);
    const uint8_t *qs = b + 2 + (j & 15);
    int sh = j >= 16 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; i++) y[i] = (float)(((qs[i] >> sh) & 0xf) - 8) * d;
}
/* Q4_1: 20 bytes / 32: f16 d | f16 m | qs[16]; value q*d + m. */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_Q4_1>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 5) * 20;
    int j = (int)(e0 & 31);
    float d = ld_f16(b), m = ld_f16(b + 2);
    const uint8_t *qs = b + 4 + (j & 15);
    int sh = j >= 16 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; i++) y[i] = (float)((qs[i] >> sh) & 0xf) * d + m;
}
/* Q5_0: 22 bytes / 32: f16 d | u32 qh | qs[16]; 5th bit of element j is bit j of qh. */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_Q5_0>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 5) * 22;
    int j = (int)(e0 & 31);
    float d = ld_f16(b);
    uint32_t qh = b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
    const uint8_t *qs = b + 6 + (j & 15);
    int sh = j >= 16 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int q = ((qs[i] >> sh) & 0xf) | (int)(((qh >> (j + i)) & 1) << 4);
        y[i] = (float)(q - 16) * d;
    }
}
/* Q5_1: 24 bytes / 32: f16 d | f16 m | u32 qh | qs[16]; value q*d + m. */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_Q5_1>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 5) * 24;
    int j = (int)(e0 & 31);
    float d = ld_f16(b), m = ld_f16(b + 2);
    uint32_t qh = b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
    const uint8_t *qs = b + 8 + (j & 15);
    int sh = j >= 16 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int q = ((qs[i] >> sh) & 0xf) | (int)(((qh >> (j + i)) & 1) << 4);
        y[i] = (float)q * d + m;
    }
}
/* Q8_0: 34 bytes / 32: f16 d | int8 qs[32]. */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_Q8_0>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 5) * 34;
    float d = ld_f16(b);
    const int8_t *qs = (const int8_t *)(b + 2 + (e0 & 31));
#pragma unroll
    for (int i = 0; i < 8; i++) y[i] = (float)qs[i] * d;
}
/* Q4_K: 144 bytes / 256: f16 d | f16 dmin | scales[12] | qs[128]; elements 64c..64c+31 are
 * the low nibbles of qs[32c..], 64c+32.. the high nibbles; value d*sc*q - dmin*m. */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_Q4_K>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 8) * 144;
    int i = (int)(e0 & 255), c = i >> 6, w = i & 63, l = w & 31, hi = w >> 5;
    int sc, mn;
    kscale(b + 4, 2 * c + hi, &sc, &mn);
    float d = ld_f16(b) * (float)sc, o = ld_f16(b + 2) * (float)mn;
    uint2 u = *(const uint2 *)(b + 16 + 32 * c + l); /* 8-aligned: 144·k + 16 + 32c + 8m */
    uint32_t s = hi ? 4 : 0;
    uint32_t a0 = (u.x >> s) & 0x0f0f0f0fu, a1 = (u.y >> s) & 0x0f0f0f0fu;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        y[k] = d * (float)((a0 >> (8 * k)) & 0xf) - o;
        y[4 + k] = d * (float)((a1 >> (8 * k)) & 0xf) - o;
    }
}
/* Q5_K: 176 bytes / 256: f16 d | f16 dmin | scales[12] | qh[32] | qs[128]; the 5th bit of
 * element 64c+l is bit 2c of qh[l], of 64c+32+l bit 2c+1. */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_Q5_K>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 8) * 176;
    int i = (int)(e0 & 255), c = i >> 6, w = i & 63, l = w & 31, hi = w >> 5;
    int sc, mn;
    kscale(b + 4, 2 * c + hi, &sc, &mn);
    float d = ld_f16(b) * (float)sc, o = ld_f16(b + 2) * (float)mn;
    uint2 u = *(const uint2 *)(b + 48 + 32 * c + l);
    uint2 h = *(const uint2 *)(b + 16 + l);
    uint32_t s = hi ? 4 : 0, hs = 2 * c + hi;
    uint32_t a0 = (u.x >> s) & 0x0f0f0f0fu, a1 = (u.y >> s) & 0x0f0f0f0fu;
    uint32_t h0 = (h.x >> hs) & 0x01010101u, h1 = (h.y >> hs) & 0x01010101u;
    a0 |= h0 << 4;
    a1 |= h1 << 4;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        y[k] = d * (float)((a0 >> (8 * k)) & 0x1f) - o;
        y[4 + k] = d * (float)((a1 >> (8 * k)) & 0x1f) - o;
    }
}
/* Q6_K: 210 bytes / 256: ql[128] | qh[64] | int8 sc[16] | f16 d; value d*sc*(q-32). In half
 * h (128 elements), for l<32 the quarters l, l+32, l+64, l+96 take: low nibble of ql[l], low
 * of ql[l+32], high of ql[l], high of ql[l+32]; top two bits from bit pairs 0,2,4,6 of qh[l];
 * scale sc[8h + l/16 + 2·quarter]. (210-byte blocks: byte loads only.) */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_Q6_K>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 8) * 210;
    int i = (int)(e0 & 255), h = i >> 7, r = i & 127, qq = r >> 5, l = r & 31;
    const uint8_t *ql = b + 64 * h + (qq & 1) * 32 + l, *qh = b + 128 + 32 * h + l;
    float d = ld_f16(b + 208) * (float)(int8_t)b[192 + 8 * h + (l >> 4) + 2 * qq];
    int ls = (qq >> 1) * 4, hsft = 2 * qq;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        int q = ((ql[k] >> ls) & 0xf) | (((qh[k] >> hsft) & 3) << 4);
        y[k] = d * (float)(q - 32);
    }
}

/* Q2_K: 84 bytes / 256: scales[16] | qs[64] | f16 d | f16 dmin. Element i: half h = i / 128,
 * bit pair g = (i mod 128) / 32, l = i mod 32; code = bits 2g..2g+1 of qs[32h + l]; sub-block
 * s = 8h + 2g + l / 16 with scale d·(scales[s] & 15), min dmin·(scales[s] >> 4)
 * (docs/quant-types.md; src/quant/quant_lowbit.c). */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_Q2_K>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 8) * 84;
    int i = (int)(e0 & 255), h = i >> 7, g = (i >> 5) & 3, l = i & 31;
    int sc = b[8 * h + 2 * g + (l >> 4)];
    float d = ld_f16(b + 80) * (float)(sc & 0xf), o = ld_f16(b + 82) * (float)(sc >> 4);
    const uint8_t *q = b + 16 + 32 * h + l;
#pragma unroll
    for (int k = 0; k < 8; k++) y[k] = d * (float)((q[k] >> (2 * g)) & 3) - o;
}
/* Q3_K: 110 bytes / 256: hmask[32] | qs[64] | scales[12] | f16 d. Low two bits as Q2_K; the
 * third bit of element 32m + l is bit m of hmask[l], a clear bit subtracting 4; 6-bit scale j
 * (minus 32): low nibble from byte j (j < 8) or the high nibble of byte j − 8, top two bits
 * from bits 2(j/4).. of byte 8 + j mod 4. */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_Q3_K>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 8) * 110;
    int i = (int)(e0 & 255), h = i >> 7, g = (i >> 5) & 3, l = i & 31, m = i >> 5;
    int j = 8 * h + 2 * g + (l >> 4);
    const uint8_t *s = b + 96;
    int lo = j < 8 ? s[j] & 0xf : s[j - 8] >> 4, hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    float d = ld_f16(b + 108) * (float)((lo | hi << 4) - 32);
    const uint8_t *q = b + 32 + 32 * h + l, *hm = b + l;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        int v = ((q[k] >> (2 * g)) & 3) - (((hm[k] >> m) & 1) ? 0 : 4);
        y[k] = d * (float)v;
    }
}
/* The 16 IQ4_NL / IQ4_XS levels (the CPU's values, quant_grids.h). */
static __constant__ int8_t k_iq4nl_levels[16] = SNUG_IQ4NL_VALUES;
/* IQ4_NL: 18 bytes / 32: f16 d | qs[16]; element j < 16 low nibble of qs[j], j + 16 high;
 * value d · level. */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_IQ4_NL>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 5) * 18;
    int j = (int)(e0 & 31);
    float d = ld_f16(b);
    const uint8_t *qs = b + 2 + (j & 15);
    int sh = j >= 16 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; i++) y[i] = d * (float)k_iq4nl_levels[(qs[i] >> sh) & 0xf];
}
/* IQ4_XS: 136 bytes / 256: f16 d | u16 scales_h | scales_l[4] | qs[128]; sub-block j of 32:
 * 6-bit scale (low nibble of scales_l[j/2], nibble j mod 2; top bits 2j.. of scales_h) minus
 * 32; nibbles of qs[16j..] as IQ4_NL. */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_IQ4_XS>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 8) * 136;
    int i = (int)(e0 & 255), j = i >> 5, w = i & 31;
    int ls = ((b[4 + (j >> 1)] >> (4 * (j & 1))) & 0xf) | (((b[2] | b[3] << 8) >> (2 * j)) & 3)
                                                              << 4;
    float d = ld_f16(b) * (float)(ls - 32);
    const uint8_t *qs = b + 8 + 16 * j + (w & 15);
    int sh = w >= 16 ? 4 : 0;
#pragma unroll
    for (int k = 0; k < 8; k++) y[k] = d * (float)k_iq4nl_levels[(qs[k] >> sh) & 0xf];
}

/* ---- the 1-3 bit i-quants ------------------------------------------------------------------
 * Every decoder below forms each value with the same float operations in the same order as the
 * CPU reference (src/quant/quant_lowbit.c: products only, or one sum then a product), so the
 * decoded weights are equal bit for bit. Layouts: docs/quant-types.md. Eight aligned elements
 * are one 8-element lattice point (IQ2, IQ1) or two 4-element points (IQ3) of group
 * ib = (e0 mod 256) / 32, point l = (e0 mod 32) / 8 of that group.
 * The lattice tables are device copies of the CPU ones, built from the same initializer macros
 * (quant/quant_grid_values.h). They sit in global memory read through the read-only cache, not
 * in __constant__ memory: the 32 lanes of a warp index 32 different points, and the constant
 * cache serves different addresses of one instruction one after another (CUDA C++ Programming
 * Guide, "Device Memory Accesses", constant memory), where L1 serves them in one pass. */
static __device__ const uint64_t k_iq2xxs_grid[256] = SNUG_IQ2XXS_GRID_VALUES;
static __device__ const uint64_t k_iq2xs_grid[512] = SNUG_IQ2XS_GRID_VALUES;
static __device__ const uint64_t k_iq2s_grid[1024] = SNUG_IQ2S_GRID_VALUES;
static __device__ const uint32_t k_iq3xxs_grid[256] = SNUG_IQ3XXS_GRID_VALUES;
static __device__ const uint32_t k_iq3s_grid[512] = SNUG_IQ3S_GRID_VALUES;
static __device__ const uint64_t k_iq1s_grid[2048] = SNUG_IQ1S_GRID_VALUES;

__device__ __forceinline__ uint32_t ld_u16(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}
__device__ __forceinline__ uint32_t ld_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
/* The IQ2/IQ3 sign code: 7 stored sign bits, the 8th makes the count of minus signs even. */
__device__ __forceinline__ uint32_t iq_signs(uint32_t s7) {
    return s7 | (uint32_t)(__popc(s7) & 1) << 7;
}
__device__ __forceinline__ float iq_sgn(uint32_t signs, int j) {
    return (signs >> j) & 1 ? -1.f : 1.f;
}
/* y[j] = db · byte j of g · sign j, for the 8 bytes of an 8-element point. */
__device__ __forceinline__ void iq_point8(uint64_t g, uint32_t signs, float db, float *y) {
#pragma unroll
    for (int j = 0; j < 8; j++) y[j] = db * (float)((g >> (8 * j)) & 0xff) * iq_sgn(signs, j);
}
/* The same for two 4-element points (IQ3). */
__device__ __forceinline__ void iq_point4x2(uint32_t g1, uint32_t g2, uint32_t signs, float db,
                                            float *y) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        y[j] = db * (float)((g1 >> (8 * j)) & 0xff) * iq_sgn(signs, j);
        y[j + 4] = db * (float)((g2 >> (8 * j)) & 0xff) * iq_sgn(signs, j + 4);
    }
}
/* IQ2_XXS: 66 bytes / 256: f16 d | per group 8 bytes: 4 grid indices, u32 of four 7-bit sign
 * codes and the scale s in bits 28..31; value d·(0.5 + s)·0.25 · grid · sign. */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_IQ2_XXS>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 8) * 66;
    int i = (int)(e0 & 255), ib = i >> 5, l = (i >> 3) & 3;
    const uint8_t *q = b + 2 + 8 * ib;
    uint32_t s = ld_u32(q + 4);
    float db = ld_f16(b) * (0.5f + (float)(s >> 28)) * 0.25f;
    iq_point8(__ldg(&k_iq2xxs_grid[q[l]]), iq_signs((s >> (7 * l)) & 127), db, y);
}
/* IQ2_XS: 74 bytes / 256: f16 d | u16 qs[32] (9-bit index, 7-bit sign code) | scales[8] (the
 * low nibble for the group's first 16 elements, the high for the next 16). */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_IQ2_XS>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 8) * 74;
    int i = (int)(e0 & 255), ib = i >> 5, l = (i >> 3) & 3;
    uint32_t v = ld_u16(b + 2 + 2 * (4 * ib + l));
    float db = ld_f16(b) * (0.5f + (float)((b[66 + ib] >> (4 * (l >> 1))) & 0xf)) * 0.25f;
    iq_point8(__ldg(&k_iq2xs_grid[v & 511]), iq_signs(v >> 9), db, y);
}
/* IQ2_S: 82 bytes / 256: f16 d | qs[32] | signs[32] | qh[8] | scales[8]; 10-bit index
 * qs[4ib + l] | bits 2l.. of qh[ib] << 8, 8 signs in full in signs[4ib + l]. */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_IQ2_S>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 8) * 82;
    int i = (int)(e0 & 255), ib = i >> 5, l = (i >> 3) & 3;
    int idx = b[2 + 4 * ib + l] | ((b[66 + ib] >> (2 * l)) & 3) << 8;
    float db = ld_f16(b) * (0.5f + (float)((b[74 + ib] >> (4 * (l >> 1))) & 0xf)) * 0.25f;
    iq_point8(__ldg(&k_iq2s_grid[idx]), b[34 + 4 * ib + l], db, y);
}
/* IQ3_XXS: 98 bytes / 256: f16 d | qs[64] (8 per group: 4-element points) | u32 per group:
 * four 7-bit sign codes, scale s in bits 28..31; value d·(0.5 + s)·0.5 · grid · sign. */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_IQ3_XXS>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 8) * 98;
    int i = (int)(e0 & 255), ib = i >> 5, l = (i >> 3) & 3;
    uint32_t s = ld_u32(b + 66 + 4 * ib);
    float db = ld_f16(b) * (0.5f + (float)(s >> 28)) * 0.5f;
    const uint8_t *qs = b + 2 + 8 * ib + 2 * l;
    iq_point4x2(__ldg(&k_iq3xxs_grid[qs[0]]), __ldg(&k_iq3xxs_grid[qs[1]]),
                iq_signs((s >> (7 * l)) & 127), db, y);
}
/* IQ3_S: 110 bytes / 256: f16 d | qs[64] | qh[8] (9th index bits) | signs[32] | scales[4];
 * value d·(1 + 2s) · grid · sign. */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_IQ3_S>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 8) * 110;
    int i = (int)(e0 & 255), ib = i >> 5, l = (i >> 3) & 3;
    float db = ld_f16(b) * (float)(1 + 2 * ((b[106 + (ib >> 1)] >> (4 * (ib & 1))) & 0xf));
    const uint8_t *qs = b + 2 + 8 * ib + 2 * l;
    int qh = b[66 + ib];
    iq_point4x2(__ldg(&k_iq3s_grid[qs[0] | ((qh >> (2 * l)) & 1) << 8]),
                __ldg(&k_iq3s_grid[qs[1] | ((qh >> (2 * l + 1)) & 1) << 8]), b[74 + 4 * ib + l], db,
                y);
}
/* y[j] = dl · (int8 byte j of g + delta): IQ1_S / IQ1_M points shifted by ±1/8
 * (ggml-common.h IQ1S_DELTA, IQ1M_DELTA). */
__device__ __forceinline__ void iq1_point8(uint64_t g, float dl, bool neg, float *y) {
    float delta = neg ? -0.125f : 0.125f;
#pragma unroll
    for (int j = 0; j < 8; j++) y[j] = dl * ((float)(int8_t)((g >> (8 * j)) & 0xff) + delta);
}
/* IQ1_S: 50 bytes / 256: f16 d | qs[32] | u16 qh[8]; word w of group ib: 3 high index bits per
 * point, scale s in bits 12..14, shift sign in bit 15; value d·(2s + 1)·(grid ± 1/8). */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_IQ1_S>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 8) * 50;
    int i = (int)(e0 & 255), ib = i >> 5, l = (i >> 3) & 3;
    uint32_t w = ld_u16(b + 34 + 2 * ib);
    float dl = ld_f16(b) * (float)(2 * ((w >> 12) & 7) + 1);
    iq1_point8(__ldg(&k_iq1s_grid[b[2 + 4 * ib + l] | ((w >> (3 * l)) & 7) << 8]), dl,
               (w & 0x8000) != 0, y);
}
/* IQ1_M: 56 bytes / 256: qs[32] | qh[16] | four u16 scale words, whose top nibbles hold the
 * block's f16 d; nibble l of qh[2ib..]: 3 high index bits and the shift sign; 3-bit scale of
 * the group's half l/2: bits 6(ib mod 2) + 3(l/2).. of word ib/2. */
template <>
__device__ __forceinline__ void deq8<SNUG_DTYPE_IQ1_M>(const uint8_t *row, int64_t e0, float *y) {
    const uint8_t *b = row + (e0 >> 8) * 56;
    int i = (int)(e0 & 255), ib = i >> 5, l = (i >> 3) & 3;
    uint32_t s0 = ld_u16(b + 48), s1 = ld_u16(b + 50), s2 = ld_u16(b + 52), s3 = ld_u16(b + 54);
    uint32_t dh = (s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000);
    float d = __half2float(__ushort_as_half((unsigned short)dh));
    uint32_t sw = ld_u16(b + 48 + 2 * (ib >> 1));
    float dl = d * (float)(2 * ((sw >> (6 * (ib & 1) + 3 * (l >> 1))) & 7) + 1);
    int nib = (b[32 + 2 * ib + (l >> 1)] >> (4 * (l & 1))) & 0xf;
    iq1_point8(__ldg(&k_iq1s_grid[b[4 * ib + l] | (nib & 7) << 8]), dl, (nib & 8) != 0, y);
}

#endif /* SNUG_CUDA_COMMON_CUH */
