/* cuda_kvfmt.cuh — the KV cache formats of src/kv/kvfmt.h on the device: byte sizes, decoding
 * N consecutive elements of one stored head vector to floats (what the attention kernels read
 * the cache with, in place), and the encoders the store kernel writes with.
 * Formats: f16 f32 bf16 q8_0 fp8 (enum snug_kv_type) are read and written; the rotated tq4/tq3
 * are written here (kvf_tq_store_group) and decoded in their ROTATED basis (norm·centroid/√G,
 * as snug_kvfmt_decode): the attention callers rotate q and un-rotate the output.
 * Invariant: the encoders produce the same bytes as snug_kvfmt_quantize (same float operations
 * in the same order, IEEE division and round-half-away as the C code; tested in
 * tests/device/test_cuda_ops.c); decoding is pure and branch-uniform per call.
 * Read next: cuda_attention.cu (store, decode attention), cuda_fa.cu (prompt attention). */
#ifndef SNUG_CUDA_KVFMT_CUH
#define SNUG_CUDA_KVFMT_CUH

#include "backend/cuda/cuda_common.cuh"

/* Formats the CUDA kernels read and write. */
__host__ __device__ __forceinline__ bool kvf_cuda_ok(int fmt) {
    return fmt == SNUG_KV_F16 || fmt == SNUG_KV_F32 || fmt == SNUG_KV_BF16 || fmt == SNUG_KV_Q8_0 ||
           fmt == SNUG_KV_FP8 || fmt == SNUG_KV_TQ4 || fmt == SNUG_KV_TQ3;
}

/* Whether a format stores the rotated basis (tq4, tq3: readers rotate q and un-rotate P·V). */
__host__ __device__ __forceinline__ bool kvf_rotated(int fmt) {
    return fmt == SNUG_KV_TQ4 || fmt == SNUG_KV_TQ3;
}

/* Formats the store kernel writes at head size D (TurboQuant needs D % 64 == 0). */
__host__ __device__ __forceinline__ bool kvf_cuda_store_ok(int fmt, int64_t D) {
    return kvf_cuda_ok(fmt) && (!kvf_rotated(fmt) || D % 64 == 0);
}

/* TurboQuant group size (kvfmt.c's snug_kvfmt_group) and bytes of one group (fp16 norm + the
 * index planes). */
__host__ __device__ __forceinline__ int kvf_tq_group(int64_t D) {
    return D % 128 == 0 ? 128 : 64;
}
__host__ __device__ __forceinline__ int64_t kvf_tq_group_bytes(int bits, int64_t G) {
    return 2 + G * bits / 8;
}

/* Bytes of one stored head vector of D elements (kvfmt.c's layouts; D % 32 == 0 assumed). */
__host__ __device__ __forceinline__ int64_t kvf_vec_bytes(int fmt, int64_t D) {
    switch (fmt) {
    case SNUG_KV_F32:
        return 4 * D;
    case SNUG_KV_F16:
    case SNUG_KV_BF16:
        return 2 * D;
    case SNUG_KV_Q8_0:
        return D / 32 * 34;
    case SNUG_KV_FP8:
        return 4 + D;
    case SNUG_KV_TQ4:
        return D / kvf_tq_group(D) * kvf_tq_group_bytes(4, kvf_tq_group(D));
    case SNUG_KV_TQ3:
        return D / kvf_tq_group(D) * kvf_tq_group_bytes(3, kvf_tq_group(D));
    default:
        return 0;
    }
}

/* The TurboQuant constants, the same numbers as kvfmt.c (snug_kvfmt_signs: bit j set = sign
 * of element j of a group is -1; Lloyd-Max centroids for N(0, 1), ascending). */
__device__ __constant__ static const uint64_t kvf_tq_signs[2] = {0x411c55ec857955beull,
                                                                 0xa47b4f3300226078ull};
__device__ __constant__ static const float kvf_tq3_cb[8] = {-2.1519457f, -1.3439093f, -0.7560053f,
                                                            -0.2450942f, 0.2450942f,  0.7560053f,
                                                            1.3439093f,  2.1519457f};
__device__ __constant__ static const float kvf_tq4_cb[16] = {
    -2.7325896f, -2.0690172f, -1.6180464f, -1.2562312f, -0.9423405f, -0.6567591f,
    -0.3880483f, -0.128395f,  0.128395f,   0.3880483f,  0.6567591f,  0.9423405f,
    1.2562312f,  1.6180464f,  2.0690172f,  2.7325896f};

/* Encode one TurboQuant group of G floats x into dst (norm + planes), by ONE thread, with the
 * operations of kvfmt.c's tq_quantize_group in the same order and no contraction (explicit
 * _rn intrinsics), so the bytes match: ‖x‖ in double, x/‖x‖, signs, in-place Walsh-Hadamard,
 * 1/√G, index = count of codebook midpoints ≤ y·√G, stored norm ‖x‖/‖c‖ as fp16 (clamped). */
__device__ __noinline__ static void kvf_tq_store_group(int bits, const float *__restrict__ x, int G,
                                                       uint8_t *__restrict__ dst) {
    const float *cb = bits == 4 ? kvf_tq4_cb : kvf_tq3_cb;
    const int nc = 1 << bits;
    float y[128];
    uint8_t idx[128];
    double n2 = 0;
    for (int j = 0; j < G; j++) n2 = __dadd_rn(n2, __dmul_rn((double)x[j], (double)x[j]));
    float nrm = (float)sqrt(n2), inv = nrm > 1e-30f ? __fdiv_rn(1.0f, nrm) : 0.0f;
    for (int j = 0; j < G; j++) {
        float s = (kvf_tq_signs[j >> 6] >> (j & 63)) & 1 ? -1.0f : 1.0f;
        y[j] = __fmul_rn(__fmul_rn(x[j], inv), s);
    }
    for (int h = 1; h < G; h *= 2)
        for (int i = 0; i < G; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                float a = y[j], b = y[j + h];
                y[j] = __fadd_rn(a, b);
                y[j + h] = __fsub_rn(a, b);
            }
    float sg = __fsqrt_rn((float)G), ig = __fdiv_rn(1.0f, sg);
    float mid[15];
    for (int i = 0; i + 1 < nc; i++) mid[i] = __fmul_rn(0.5f, __fadd_rn(cb[i], cb[i + 1]));
    double c2 = 0;
    for (int j = 0; j < G; j++) {
        float u = __fmul_rn(__fmul_rn(y[j], ig), sg);
        int k = 0;
        for (int i = 0; i + 1 < nc; i++) k += u >= mid[i];
        idx[j] = (uint8_t)k;
        c2 = __dadd_rn(c2, __dmul_rn((double)cb[k], (double)cb[k]));
    }
    double cn = sqrt(c2 / (double)G);
    float stored = cn > 0 && nrm > 0 ? (float)((double)nrm / cn) : 0.0f;
    if (stored > 65504.0f) stored = 65504.0f;
    /* One aligned 16-bit store (groups start at even offsets). Two byte stores of the half
     * (memcpy, or shifts of __half_as_ushort: the same PTX, cvt.rn.f16.f32 then st.u8) came
     * out of ptxas 13.0 for sm_90a storing the norm's INTEGER part as the low byte (device
     * run 2026-12-01: offset 0 of every group held 0x04..0x13, the high byte right). */
    *(__half *)dst = __float2half_rn(stored);
    uint8_t *p = dst + 2;
    if (bits == 4) {
        for (int j = 0; j < G; j += 2) p[j / 2] = (uint8_t)(idx[j] | (idx[j + 1] << 4));
    } else {
        uint8_t *lo = p, *hi = p + G / 4;
        for (int j = 0; j < G; j += 4)
            lo[j / 4] = (uint8_t)((idx[j] & 3) | ((idx[j + 1] & 3) << 2) | ((idx[j + 2] & 3) << 4) |
                                  ((idx[j + 3] & 3) << 6));
        for (int j = 0; j < G; j += 8) {
            unsigned b = 0;
            for (int i = 0; i < 8; i++) b |= ((idx[j + i] >> 2) & 1u) << i;
            hi[j / 8] = (uint8_t)b;
        }
    }
}

/* e4m3 byte to float (OCP FP8 E4M3, bias 7; kvfmt.c's e4m3_to_f32). */
__device__ __forceinline__ float kvf_e4m3(uint32_t c) {
    uint32_t E = (c >> 3) & 15, m = c & 7;
    float sub = (float)m * 0.001953125f;
    float a = __uint_as_float(((E + 120u) << 23) | (m << 20) | ((c & 0x80u) << 24));
    return E ? a : (c & 0x80u ? -sub : sub);
}

/* Float (already divided by the vector's scale) to e4m3, as kvfmt.c's f32_to_e4m3: round to
 * nearest even, saturate at 448 (NaN too), subnormals in steps of 2^-9. */
__device__ __forceinline__ uint8_t kvf_to_e4m3(float f) {
    uint32_t sign = signbit(f) ? 0x80u : 0u;
    float a = fabsf(f);
    if (!(a < 448.0f)) return (uint8_t)(sign | 0x7E);
    if (a < 0.015625f) return (uint8_t)(sign | (uint32_t)rintf(a * 512.0f));
    int e;
    float fr = frexpf(a, &e);
    int m = (int)rintf((fr * 2.0f - 1.0f) * 8.0f), E = e - 1 + 7;
    if (m == 8) m = 0, E++;
    int c = (E << 3) | m;
    return (uint8_t)(sign | (uint32_t)(c > 0x7E ? 0x7E : c));
}

/* TurboQuant reading helpers: the scale of the group whose bytes start at b (stored norm /
 * √G, kvfmt.c's tq_decode_group) and the codebook index of element j of that group (p = b + 2:
 * tq4 nibbles; tq3 two low bits in lo[j/4], the top bit in hi[j/8] at p + G/4). */
__device__ __forceinline__ float kvf_tq_scale(const uint8_t *b, int tqG) {
    return __fdiv_rn(__half2float(*(const __half *)b), __fsqrt_rn((float)tqG));
}
__device__ __forceinline__ int kvf_tq_index(int bits, const uint8_t *p, int j, int tqG) {
    if (bits == 4) return (p[j >> 1] >> (4 * (j & 1))) & 15;
    return ((p[j >> 2] >> (2 * (j & 3))) & 3) | (((p[tqG / 4 + (j >> 3)] >> (j & 7)) & 1) << 2);
}

/* Decode elements e0 .. e0+N-1 (N in 1, 2, 4, 8; e0 a multiple of N) of the stored vector at
 * `v` into y. Alignment: the vector starts at a multiple of its natural unit (f32 4·N, f16/bf16
 * 2·N bytes when D % 8 == 0; q8_0 2; fp8 4), which the cache layout guarantees. */
template <int N>
__device__ __forceinline__ void kvf_dec(int fmt, const uint8_t *__restrict__ v, int e0, float *y,
                                        int tqG = 128) {
    switch (fmt) {
    case SNUG_KV_TQ4:
    case SNUG_KV_TQ3: { /* tqG: the group size (kvf_tq_group(D)); N elements stay in one group */
        int bits = fmt == SNUG_KV_TQ4 ? 4 : 3, j0 = e0 % tqG;
        const uint8_t *b = v + e0 / tqG * kvf_tq_group_bytes(bits, tqG);
        float s = kvf_tq_scale(b, tqG);
        const float *cb = bits == 4 ? kvf_tq4_cb : kvf_tq3_cb;
#pragma unroll
        for (int i = 0; i < N; i++) y[i] = __fmul_rn(s, cb[kvf_tq_index(bits, b + 2, j0 + i, tqG)]);
        break;
    }
    case SNUG_KV_F32: {
        const float *p = (const float *)v + e0;
        if constexpr (N >= 4) {
#pragma unroll
            for (int i = 0; i < N; i += 4) {
                float4 a = *(const float4 *)(p + i);
                y[i] = a.x, y[i + 1] = a.y, y[i + 2] = a.z, y[i + 3] = a.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < N; i++) y[i] = p[i];
        }
        break;
    }
    case SNUG_KV_F16: {
        const __half *p = (const __half *)v + e0;
        if constexpr (N == 8) {
            uint4 u = *(const uint4 *)p;
            const __half2 *h = (const __half2 *)&u;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float2 f = __half22float2(h[i]);
                y[2 * i] = f.x, y[2 * i + 1] = f.y;
            }
        } else {
#pragma unroll
            for (int i = 0; i < N; i++) y[i] = __half2float(p[i]);
        }
        break;
    }
    case SNUG_KV_BF16: {
        const uint16_t *p = (const uint16_t *)v + e0;
        if constexpr (N == 8) {
            uint4 u = *(const uint4 *)p;
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                y[2 * i] = __uint_as_float(w[i] << 16);
                y[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
            }
        } else {
#pragma unroll
            for (int i = 0; i < N; i++) y[i] = __uint_as_float((uint32_t)p[i] << 16);
        }
        break;
    }
    case SNUG_KV_Q8_0: {
        const uint8_t *b = v + (e0 >> 5) * 34;
        float d = __half2float(*(const __half *)b);
        const uint8_t *q = b + 2 + (e0 & 31);
        if constexpr (N >= 2) {
#pragma unroll
            for (int i = 0; i < N; i += 2) {
                uint16_t u = *(const uint16_t *)(q + i);
                y[i] = d * (float)(int8_t)(u & 0xff);
                y[i + 1] = d * (float)(int8_t)(u >> 8);
            }
        } else {
            y[0] = d * (float)(int8_t)q[0];
        }
        break;
    }
    case SNUG_KV_FP8: {
        float s = *(const float *)v;
        const uint8_t *q = v + 4 + e0;
        if constexpr (N >= 4) {
#pragma unroll
            for (int i = 0; i < N; i += 4) {
                uint32_t u = *(const uint32_t *)(q + i);
#pragma unroll
                for (int j = 0; j < 4; j++) y[i + j] = s * kvf_e4m3((u >> (8 * j)) & 0xff);
            }
        } else {
#pragma unroll
            for (int i = 0; i < N; i++) y[i] = s * kvf_e4m3(q[i]);
        }
        break;
    }
    default:
#pragma unroll
        for (int i = 0; i < N; i++) y[i] = 0.0f;
    }
}

/* This lane's entry of a TurboQuant codebook (lane % 16 of tq4's, lane % 8 of tq3's; 0 for
 * other formats): the table kvf_dec_tq_warp looks indices up in by warp shuffles. */
__device__ __forceinline__ float kvf_tq_lut(int fmt) {
    int lane = threadIdx.x & 31;
    return fmt == SNUG_KV_TQ4   ? kvf_tq4_cb[lane & 15]
           : fmt == SNUG_KV_TQ3 ? kvf_tq3_cb[lane & 7]
                                : 0.0f;
}

/* kvf_dec's tq4 / tq3 branch with the centroids taken from the lanes' lut (kvf_tq_lut) by
 * __shfl_sync instead of constant memory (whose lookups serialise when the lanes' indices
 * differ): the same values. Every lane of the warp must call it together. */
template <int N, int FMT>
__device__ __forceinline__ void kvf_dec_tq_warp(const uint8_t *__restrict__ v, int e0, float *y,
                                                int tqG, float lut) {
    constexpr int bits = FMT == SNUG_KV_TQ4 ? 4 : 3;
    int j0 = e0 % tqG;
    const uint8_t *b = v + e0 / tqG * kvf_tq_group_bytes(bits, tqG);
    float s = kvf_tq_scale(b, tqG);
#pragma unroll
    for (int i = 0; i < N; i++)
        y[i] = __fmul_rn(s, __shfl_sync(0xffffffffu, lut, kvf_tq_index(bits, b + 2, j0 + i, tqG)));
}

#endif /* SNUG_CUDA_KVFMT_CUH */
