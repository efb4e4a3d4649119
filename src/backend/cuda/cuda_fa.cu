/* cuda_fa.cu — causal GQA attention on tensor cores (flash-attention style; semantics:
 * src/backend/cpu/ops.h snug_op_attention): prompt chunks (k_fa, below) and decode steps of a
 * few tokens (k_fa_dec, at the end of the file, which reads its own comment).
 * A block owns FA_BM query rows of one KV head: row i of the flattened [T][G] (G = Hq/Hkv
 * query heads sharing the KV head) is token i/G, head g·G + i%G, so the G heads of a token
 * share every K/V tile. Per tile of FA_BN keys the block dequantises K and V from the cache
 * format (in place, cuda_kvfmt.cuh) to f16 in shared memory; each of the 4 warps computes
 * S = Q·Kᵀ for its 16 rows with mma.sync m16n8k16 (f16 in, f32 accumulate), masks, runs the
 * online softmax in f32 (base 2: Q is pre-scaled by scale·log2 e), and accumulates O += P·V
 * with P re-packed from the S accumulators (fa_qk, fa_softmax, fa_pv: shared by both kernels,
 * as is the Q load fa_load_q). Long key ranges with few row blocks split over
 * key positions (partials merged by cuda_attention.cu's merge kernel).
 * Two loaders: synchronous (64-key tiles; each thread fetches a batch of raw chunks into
 * registers, then decodes and stores them) and pipelined (32-key tiles; the next tile's raw
 * bytes travel by cp.async during the current tile's math, then decode shared → shared).
 * Shared tiles are [rows][D] f16 with the 16-byte chunks of row r XOR-swizzled by r & 7, so
 * ldmatrix reads are free of bank conflicts without padding.
 * Invariant: no allocation; work bytes depend on T, Hq, D only.
 * Read next: cuda_attention.cu (store, decode, merge), cuda_kvfmt.cuh. */
#include "backend/cuda/cuda_fa.h"
#include "backend/cuda/cuda_kvfmt.cuh"

#include <cuda_fp8.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FA_BM            64 /* query rows per block (16 per warp) */
#define FA_BN            64 /* keys per tile */
#define FA_WARPS         4
#define FA_TARGET_BLOCKS 264  /* about two blocks per SM on an H100/H200 */
#define FA_MIN_KEYS      1024 /* give each split at least this many keys */
#define FA_MAX_SPLIT     16

__host__ __device__ __forceinline__ int64_t imin(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/* Half offset of 16-byte chunk c of row r in a swizzled [rows][D] tile. */
template <int D> __device__ __forceinline__ int sw(int r, int c) {
    return r * D + ((c ^ (r & 7)) << 3);
}

__device__ __forceinline__ void ldsm_x4(uint32_t *r, const __half *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t *r, const __half *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
/* c += a·b, m16n8k16, f16 operands, f32 accumulators. */
__device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_h2(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *(uint32_t *)&h;
}

/* One 16-byte chunk of f16 output (8 elements) in its stored form: up to 16 bytes of payload
 * and the block/vector scale. Fetching a batch of chunks into registers first and decoding
 * after keeps many loads in flight per thread (a load-convert-store loop waits on each). */
struct raw8 {
    uint32_t w[4];
    float s;
};
template <int FMT, int TG = 128>
__device__ __forceinline__ raw8 fetch8(const uint8_t *__restrict__ vec, int c) {
    raw8 r = {{0, 0, 0, 0}, 0.0f};
    if constexpr (FMT == SNUG_KV_TQ4 || FMT == SNUG_KV_TQ3) {
        /* TurboQuant group of TG elements: the norm/√TG as the scale (kvf_dec's), then the index
         * bits of elements j0 .. j0+7 (tq4: 4 bytes of nibbles; tq3: 2 bytes of low pairs in
         * w[0] bits 0-15, the byte of top bits in w[0] bits 16-23). Groups start at even
         * offsets, so 16-bit loads are aligned. */
        constexpr int bits = FMT == SNUG_KV_TQ4 ? 4 : 3;
        const int e0 = c * 8, j0 = e0 % TG;
        const uint8_t *b = vec + (e0 / TG) * (2 + TG * bits / 8);
        r.s = kvf_tq_scale(b, TG);
        const uint8_t *p = b + 2;
        if constexpr (FMT == SNUG_KV_TQ4) {
            const uint16_t *q = (const uint16_t *)(p + j0 / 2);
            r.w[0] = (uint32_t)q[0] | ((uint32_t)q[1] << 16);
        } else {
            r.w[0] =
                (uint32_t) * (const uint16_t *)(p + j0 / 4) | ((uint32_t)p[TG / 4 + j0 / 8] << 16);
        }
        return r;
    }
    if constexpr (FMT == SNUG_KV_F16 || FMT == SNUG_KV_BF16) {
        uint4 u = *(const uint4 *)(vec + c * 16);
        r.w[0] = u.x, r.w[1] = u.y, r.w[2] = u.z, r.w[3] = u.w;
    } else if constexpr (FMT == SNUG_KV_Q8_0) { /* block c/4, bytes 8·(c%4) .. +7 */
        const uint8_t *b = vec + (c >> 2) * 34;
        const uint16_t *q = (const uint16_t *)(b + 2 + (c & 3) * 8);
        r.s = __half2float(*(const __half *)b);
        r.w[0] = (uint32_t)q[0] | ((uint32_t)q[1] << 16);
        r.w[1] = (uint32_t)q[2] | ((uint32_t)q[3] << 16);
    } else if constexpr (FMT == SNUG_KV_FP8) {
        r.s = *(const float *)vec;
        const uint32_t *q = (const uint32_t *)(vec + 4 + c * 8);
        r.w[0] = q[0], r.w[1] = q[1];
    }
    return r;
}
/* The 8 elements of a fetched chunk as f16 (the same values kvf_dec gives, then rounded). */
/* lut: for tq4 / tq3, this lane's codebook entry (kvf_tq_lut): the index lookups go through
 * __shfl_sync, so every lane of the warp must call decode8 together. */
template <int FMT> __device__ __forceinline__ uint4 decode8(const raw8 &r, float lut = 0.0f) {
    if constexpr (FMT == SNUG_KV_F16) return make_uint4(r.w[0], r.w[1], r.w[2], r.w[3]);
    float y[8];
    if constexpr (FMT == SNUG_KV_TQ4) {
#pragma unroll
        for (int i = 0; i < 8; i++)
            y[i] = __fmul_rn(r.s, __shfl_sync(0xffffffffu, lut, (int)((r.w[0] >> (4 * i)) & 15)));
    } else if constexpr (FMT == SNUG_KV_TQ3) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int k = (int)(((r.w[0] >> (2 * i)) & 3) | (((r.w[0] >> (16 + i)) & 1) << 2));
            y[i] = __fmul_rn(r.s, __shfl_sync(0xffffffffu, lut, k));
        }
    } else if constexpr (FMT == SNUG_KV_BF16) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            y[2 * i] = __uint_as_float(r.w[i] << 16);
            y[2 * i + 1] = __uint_as_float(r.w[i] & 0xffff0000u);
        }
    } else if constexpr (FMT == SNUG_KV_Q8_0) {
#pragma unroll
        for (int i = 0; i < 8; i++)
            y[i] = r.s * (float)(int8_t)((r.w[i >> 2] >> (8 * (i & 3))) & 0xff);
    } else {
        /* e4m3 bytes two at a time to f16 where the GPU converts a pair in one instruction
         * (cvt.rn.f16x2.e4m3x2, sm_89 and later; kvf_e4m3 spends ~8 bit operations per byte,
         * and the header's conversion below sm_89 is a slower software path): exact, so y is
         * kvf_e4m3's value times the scale, bit for bit (every code the store writes is an
         * f16; the NaN codes 0x7F / 0xFF, which kvf_e4m3 reads as ±480, are never written:
         * the store saturates at 448) */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(
                (__nv_fp8x2_storage_t)((r.w[i >> 1] >> (16 * (i & 1))) & 0xffffu), __NV_E4M3)));
            y[2 * i] = r.s * f.x, y[2 * i + 1] = r.s * f.y;
        }
#else
#pragma unroll
        for (int i = 0; i < 8; i++) y[i] = r.s * kvf_e4m3((r.w[i >> 2] >> (8 * (i & 3))) & 0xff);
#endif
    }
    return make_uint4(pack_h2(y[0], y[1]), pack_h2(y[2], y[3]), pack_h2(y[4], y[5]),
                      pack_h2(y[6], y[7]));
}

/* Dequantise keys kb .. kb+FA_BN-1 of KV head `kh` (format FMT, vb bytes per vector) into the
 * swizzled f16 tile, FA_BATCH chunks per thread at a time (all fetched, then all decoded);
 * keys at or past nk become zeros (finite, and masked or weighted 0). */
#define FA_BATCH 8
template <int D, int BN, int FMT>
__device__ __forceinline__ void load_tile_b(__half *tile, const uint8_t *__restrict__ base,
                                            int64_t vb, int64_t Hkv, int64_t kh, int64_t kb,
                                            int64_t nk) {
    constexpr int CH = D / 8, PER = BN * CH / (FA_WARPS * 32);
    static_assert(PER % FA_BATCH == 0 || PER < FA_BATCH, "chunks per thread");
    constexpr int B = PER < FA_BATCH ? PER : D >= 256 ? FA_BATCH / 2 : FA_BATCH;
    constexpr int TG = D % 128 == 0 ? 128 : 64; /* kvf_tq_group(D) */
    const float lut = kvf_tq_lut(FMT);
#pragma unroll
    for (int j0 = 0; j0 < PER; j0 += B) {
        raw8 r[B];
#pragma unroll
        for (int j = 0; j < B; j++) {
            int i = threadIdx.x + (j0 + j) * FA_WARPS * 32, row = i / CH, c = i % CH;
            int64_t key = kb + row;
            r[j] = key < nk ? fetch8<FMT, TG>(base + (key * Hkv + kh) * vb, c)
                            : raw8{{0, 0, 0, 0}, 0.0f};
        }
#pragma unroll
        for (int j = 0; j < B; j++) {
            int i = threadIdx.x + (j0 + j) * FA_WARPS * 32, row = i / CH, c = i % CH;
            *(uint4 *)(tile + sw<D>(row, c)) = decode8<FMT>(r[j], lut);
        }
    }
}

/* The same for any device format (f32 goes element-wise through kvf_dec; tq4 / tq3 batched,
 * decoded in the rotated basis with the codebook shuffled across the warp). */
template <int D, int BN>
__device__ __forceinline__ void load_tile(__half *tile, const uint8_t *__restrict__ base, int fmt,
                                          int64_t vb, int64_t Hkv, int64_t kh, int64_t kb,
                                          int64_t nk) {
    switch (fmt) {
    case SNUG_KV_F16:
        load_tile_b<D, BN, SNUG_KV_F16>(tile, base, vb, Hkv, kh, kb, nk);
        return;
    case SNUG_KV_BF16:
        load_tile_b<D, BN, SNUG_KV_BF16>(tile, base, vb, Hkv, kh, kb, nk);
        return;
    case SNUG_KV_Q8_0:
        load_tile_b<D, BN, SNUG_KV_Q8_0>(tile, base, vb, Hkv, kh, kb, nk);
        return;
    case SNUG_KV_FP8:
        load_tile_b<D, BN, SNUG_KV_FP8>(tile, base, vb, Hkv, kh, kb, nk);
        return;
    case SNUG_KV_TQ4:
        load_tile_b<D, BN, SNUG_KV_TQ4>(tile, base, vb, Hkv, kh, kb, nk);
        return;
    case SNUG_KV_TQ3:
        load_tile_b<D, BN, SNUG_KV_TQ3>(tile, base, vb, Hkv, kh, kb, nk);
        return;
    default:
        break;
    }
    constexpr int CH = D / 8;
    for (int i = threadIdx.x; i < BN * CH; i += FA_WARPS * 32) {
        int r = i / CH, c = i % CH;
        int64_t key = kb + r;
        uint4 u = make_uint4(0, 0, 0, 0);
        if (key < nk) {
            float y[8];
            kvf_dec<8>(fmt, base + (key * Hkv + kh) * vb, c * 8, y, kvf_tq_group(D));
            u.x = pack_h2(y[0], y[1]), u.y = pack_h2(y[2], y[3]);
            u.z = pack_h2(y[4], y[5]), u.w = pack_h2(y[6], y[7]);
        }
        *(uint4 *)(tile + sw<D>(r, c)) = u;
    }
}

/* ---- the pipelined form: raw cache bytes of the next tile travel by cp.async while the
 * current tile computes; after they land they are decoded shared → shared. ---------------- */
__device__ __forceinline__ void cp_async(void *dst, const void *src, int unit, bool ok) {
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    int n = ok ? unit : 0; /* 0 source bytes: the destination is zero-filled */
    if (unit == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(n));
    else if (unit == 8)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(src), "r"(n));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit_wait_prev() {
    asm volatile("cp.async.commit_group;\n" ::);
}
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_group 0;\n" ::);
}
/* Largest copy unit (16, 8 or 4 bytes) dividing a vector of vb bytes. */
__host__ __device__ __forceinline__ int cp_unit(int64_t vb) {
    return vb % 16 == 0 ? 16 : vb % 8 == 0 ? 8 : 4;
}
__host__ __device__ __forceinline__ int64_t raw_stride(int64_t vb) {
    return (vb + 15) / 16 * 16;
}
/* Queue the stored vectors of keys kb .. kb+BN-1 (KV head kh) into raw[BN][raw_stride(vb)];
 * keys at or past nk are zero-filled. */
template <int BN>
__device__ __forceinline__ void raw_issue(uint8_t *raw, const uint8_t *__restrict__ base,
                                          int64_t vb, int64_t Hkv, int64_t kh, int64_t kb,
                                          int64_t nk) {
    int unit = cp_unit(vb), per = (int)(vb / unit);
    int64_t rs = raw_stride(vb);
    for (int i = threadIdx.x; i < BN * per; i += FA_WARPS * 32) {
        int r = i / per, u = i % per;
        int64_t key = kb + r;
        bool ok = key < nk;
        const uint8_t *src = base + ((ok ? key : 0) * Hkv + kh) * vb + (int64_t)u * unit;
        cp_async(raw + r * rs + u * unit, src, unit, ok);
    }
}
/* Decode raw[BN][raw_stride(vb)] (format FMT) into the swizzled f16 tile. */
template <int D, int BN, int FMT>
__device__ __forceinline__ void raw_decode_f(__half *tile, const uint8_t *raw, int64_t rs) {
    constexpr int CH = D / 8, TG = D % 128 == 0 ? 128 : 64;
    static_assert(BN * CH % (FA_WARPS * 32) == 0, "whole warps decode (tq shuffles)");
    const float lut = kvf_tq_lut(FMT);
    for (int i = threadIdx.x; i < BN * CH; i += FA_WARPS * 32) {
        int r = i / CH, c = i % CH;
        *(uint4 *)(tile + sw<D>(r, c)) = decode8<FMT>(fetch8<FMT, TG>(raw + r * rs, c), lut);
    }
}
template <int D, int BN>
__device__ __forceinline__ void raw_decode(__half *tile, const uint8_t *raw, int fmt, int64_t vb) {
    int64_t rs = raw_stride(vb);
    switch (fmt) {
    case SNUG_KV_F16:
        raw_decode_f<D, BN, SNUG_KV_F16>(tile, raw, rs);
        break;
    case SNUG_KV_BF16:
        raw_decode_f<D, BN, SNUG_KV_BF16>(tile, raw, rs);
        break;
    case SNUG_KV_Q8_0:
        raw_decode_f<D, BN, SNUG_KV_Q8_0>(tile, raw, rs);
        break;
    case SNUG_KV_TQ4:
        raw_decode_f<D, BN, SNUG_KV_TQ4>(tile, raw, rs);
        break;
    case SNUG_KV_TQ3:
        raw_decode_f<D, BN, SNUG_KV_TQ3>(tile, raw, rs);
        break;
    default:
        raw_decode_f<D, BN, SNUG_KV_FP8>(tile, raw, rs);
        break;
    }
}

/* The Q rows r0 .. r0 + ROWS - 1 of KV head kh (row gi = token gi / G, query head kh·G + gi % G),
 * scaled and rounded to f16 into the swizzled sQ by the block's THREADS threads; rows past
 * `rows` are zeros. */
template <int D, int ROWS, int THREADS>
__device__ __forceinline__ void fa_load_q(__half *sQ, const float *__restrict__ q, int64_t r0,
                                          int64_t rows, int G, int64_t kh, int64_t Hq,
                                          float qscale) {
    constexpr int CH = D / 8;
    for (int i = threadIdx.x; i < ROWS * CH; i += THREADS) {
        int r = i / CH, c = i % CH;
        int64_t gi = r0 + r;
        uint4 u = make_uint4(0, 0, 0, 0);
        if (gi < rows) {
            int64_t t = gi / G, h = kh * G + gi % G;
            const float4 *p = (const float4 *)(q + (t * Hq + h) * D + c * 8);
            float4 a = p[0], b = p[1];
            u.x = pack_h2(a.x * qscale, a.y * qscale), u.y = pack_h2(a.z * qscale, a.w * qscale);
            u.z = pack_h2(b.x * qscale, b.y * qscale), u.w = pack_h2(b.z * qscale, b.w * qscale);
        }
        *(uint4 *)(sQ + sw<D>(r, c)) = u;
    }
}

/* S = Q·Kᵀ for one warp: the 16 Q rows from qr0 of sQ against the BN keys of the swizzled sK
 * (sacc in mma16816's accumulator layout, BN/8 n-tiles). */
template <int D, int BN>
__device__ __forceinline__ void fa_qk(float (&sacc)[BN / 8][4], const __half *sQ, int qr0,
                                      const __half *sK, int lane) {
#pragma unroll
    for (int j = 0; j < BN / 8; j++) sacc[j][0] = sacc[j][1] = sacc[j][2] = sacc[j][3] = 0;
    const int mi = lane >> 3;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a[4];
        ldsm_x4(a, sQ + sw<D>(qr0 + (lane & 15), kk * 2 + (lane >> 4)));
#pragma unroll
        for (int np = 0; np < BN / 16; np++) {
            uint32_t b[4];
            ldsm_x4(b, sK + sw<D>(np * 16 + (mi >> 1) * 8 + (lane & 7), kk * 2 + (mi & 1)));
            mma16816(sacc[2 * np], a, b[0], b[1]);
            mma16816(sacc[2 * np + 1], a, b[2], b[3]);
        }
    }
}

/* The causal mask (keys past lim0 / lim1 for this thread's rows 0 / 1; the tile starts at key
 * kb) and one step of the online softmax in base 2: the new maxima into m0 / m1, the running
 * sums l0 / l1 rescaled and grown, P as the A fragments of BN/16 k-steps in pa, and the factors
 * c0 / c1 by which the caller rescales its output accumulators. */
template <int BN>
__device__ __forceinline__ void
fa_softmax(float (&sacc)[BN / 8][4], int64_t kb, int64_t lim0, int64_t lim1, int lane, float &m0,
           float &m1, float &l0, float &l1, float &c0, float &c1, uint32_t (&pa)[BN / 16][4]) {
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        int64_t key = kb + j * 8 + 2 * (lane & 3);
        if (key > lim0) sacc[j][0] = -INFINITY;
        if (key + 1 > lim0) sacc[j][1] = -INFINITY;
        if (key > lim1) sacc[j][2] = -INFINITY;
        if (key + 1 > lim1) sacc[j][3] = -INFINITY;
        mx0 = fmaxf(mx0, fmaxf(sacc[j][0], sacc[j][1]));
        mx1 = fmaxf(mx1, fmaxf(sacc[j][2], sacc[j][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    float u0 = mx0 == -INFINITY ? 0.0f : mx0, u1 = mx1 == -INFINITY ? 0.0f : mx1;
    c0 = exp2f(m0 - u0), c1 = exp2f(m1 - u1);
    m0 = mx0, m1 = mx1;
    float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        float p0 = exp2f(sacc[j][0] - u0), p1 = exp2f(sacc[j][1] - u0);
        float p2 = exp2f(sacc[j][2] - u1), p3 = exp2f(sacc[j][3] - u1);
        rs0 += p0 + p1, rs1 += p2 + p3;
        pa[j >> 1][(j & 1) * 2] = pack_h2(p0, p1);
        pa[j >> 1][(j & 1) * 2 + 1] = pack_h2(p2, p3);
    }
    l0 = l0 * c0 + rs0, l1 = l1 * c1 + rs1;
}

/* O += P·V for one warp: P's accumulators are the A fragments of k-steps of 16 keys, the BN
 * keys' values in the swizzled sV. */
template <int D, int BN>
__device__ __forceinline__ void fa_pv(float (&o)[D / 8][4], const uint32_t (&pa)[BN / 16][4],
                                      const __half *sV, int lane) {
    const int mi = lane >> 3;
#pragma unroll
    for (int ks = 0; ks < BN / 16; ks++) {
#pragma unroll
        for (int nd = 0; nd < D / 16; nd++) {
            uint32_t b[4];
            ldsm_x4_t(b, sV + sw<D>(ks * 16 + (mi & 1) * 8 + (lane & 7), nd * 2 + (mi >> 1)));
            mma16816(o[2 * nd], pa[ks], b[0], b[1]);
            mma16816(o[2 * nd + 1], pa[ks], b[2], b[3]);
        }
    }
}

/* Block (row block rb, KV head kh, key split s). See the file comment. */
template <int D, int BN, bool PIPE>
__global__ void __launch_bounds__(FA_WARPS * 32, 2)
    k_fa(const uint8_t *__restrict__ kc, const uint8_t *__restrict__ vc, int kf, int vf, int64_t Hq,
         int64_t Hkv, int64_t pos0, int64_t T, const float *__restrict__ q, float qscale,
         float *out, float *part, int nsplit, int64_t chunk) {
    extern __shared__ __align__(16) unsigned char fa_smem[];
    __half *sQ = (__half *)fa_smem, *sK = sQ + FA_BM * D, *sV = sK + BN * D;
    uint8_t *rawK = (uint8_t *)(sV + BN * D); /* PIPE: raw bytes of the next tile */
    uint8_t *rawV = rawK + BN * raw_stride(kvf_vec_bytes(kf, D));
    const int G = (int)(Hq / Hkv);
    const int64_t kh = blockIdx.y, rows = T * G, r0 = (int64_t)blockIdx.x * FA_BM;
    const int s = blockIdx.z, lane = threadIdx.x & 31, w = threadIdx.x >> 5;

    /* Q rows, scaled and rounded to f16 (rows past the end are zeros). */
    fa_load_q<D, FA_BM, FA_WARPS * 32>(sQ, q, r0, rows, G, kh, Hq, qscale);

    /* This thread's two rows (accumulator rows lane/4 and lane/4 + 8 of the warp's 16) and
     * the last key each may see. Rows past the end behave as the last token (discarded). */
    int64_t gr0 = r0 + w * 16 + (lane >> 2), gr1 = gr0 + 8;
    int64_t lim0 = pos0 + (imin(gr0, rows - 1) / G), lim1 = pos0 + (imin(gr1, rows - 1) / G);
    int64_t nk = pos0 + imin(r0 + FA_BM - 1, rows - 1) / G + 1; /* keys this block needs */
    int64_t lo = (int64_t)s * chunk, hi = imin(lo + chunk, nk);
    const int64_t kvb = kvf_vec_bytes(kf, D), vvb = kvf_vec_bytes(vf, D);

    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

    if (PIPE && lo < hi) {
        raw_issue<BN>(rawK, kc, kvb, Hkv, kh, lo, hi);
        raw_issue<BN>(rawV, vc, vvb, Hkv, kh, lo, hi);
        cp_async_commit_wait_prev();
    }
    for (int64_t kb = lo; kb < hi; kb += BN) {
        __syncthreads(); /* the previous tile's readers are done (and Q is stored) */
        if (PIPE) {
            cp_async_wait_all();
            __syncthreads(); /* every thread's copies of this tile have landed */
            raw_decode<D, BN>(sK, rawK, kf, kvb);
            raw_decode<D, BN>(sV, rawV, vf, vvb);
            __syncthreads();    /* raw buffers free, f16 tiles ready */
            if (kb + BN < hi) { /* the next tile's bytes fly while this one computes */
                raw_issue<BN>(rawK, kc, kvb, Hkv, kh, kb + BN, hi);
                raw_issue<BN>(rawV, vc, vvb, Hkv, kh, kb + BN, hi);
                cp_async_commit_wait_prev();
            }
        } else {
            load_tile<D, BN>(sK, kc, kf, kvb, Hkv, kh, kb, hi);
            load_tile<D, BN>(sV, vc, vf, vvb, Hkv, kh, kb, hi);
            __syncthreads();
        }

        /* S = Q·Kᵀ for the warp's 16 rows × BN keys; mask, then the online softmax (base 2)
         * for rows 0 and 1 of this thread; O += P·V. */
        float sacc[BN / 8][4], c0, c1;
        uint32_t pa[BN / 16][4];
        fa_qk<D, BN>(sacc, sQ, w * 16, sK, lane);
        fa_softmax<BN>(sacc, kb, lim0, lim1, lane, m0, m1, l0, l1, c0, c1, pa);
#pragma unroll
        for (int i = 0; i < D / 8; i++) o[i][0] *= c0, o[i][1] *= c0, o[i][2] *= c1, o[i][3] *= c1;
        fa_pv<D, BN>(o, pa, sV, lane);
    }

    /* Row sums over the quad, then the output or the split's partial. */
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float LN2 = 0.69314718055994531f;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        int64_t gi = half ? gr1 : gr0;
        if (gi >= rows) continue;
        int64_t t = gi / G, h = kh * G + gi % G, row = t * Hq + h;
        float l = half ? l1 : l0, m = half ? m1 : m0;
        int d0 = 2 * (lane & 3);
        if (nsplit == 1) {
            float inv = 1.0f / l;
            float *op = out + row * D + d0;
#pragma unroll
            for (int i = 0; i < D / 8; i++)
                *(float2 *)(op + i * 8) =
                    make_float2(o[i][2 * half] * inv, o[i][2 * half + 1] * inv);
        } else {
            float *pp = part + (row * nsplit + s) * (D + 2);
            if ((lane & 3) == 0) pp[0] = m * LN2, pp[1] = l;
#pragma unroll
            for (int i = 0; i < D / 8; i++) {
                pp[2 + i * 8 + d0] = o[i][2 * half];
                pp[2 + i * 8 + d0 + 1] = o[i][2 * half + 1];
            }
        }
    }
}

int snug_cuda_fa_nsplit(int64_t Hq, int64_t T, int64_t nk) {
    int64_t est = (T * Hq + FA_BM - 1) / FA_BM; /* <= the real row-block count × Hkv */
    int64_t ns = (FA_TARGET_BLOCKS + est - 1) / est;
    int64_t by_keys = (nk + FA_MIN_KEYS - 1) / FA_MIN_KEYS;
    if (ns > by_keys) ns = by_keys;
    if (ns > FA_MAX_SPLIT) ns = FA_MAX_SPLIT;
    return ns < 1 ? 1 : (int)ns;
}

/* Let kernel `fn` take `smem` bytes of dynamic shared memory on the current device (raised once
 * per new maximum; the attribute belongs to a device, so `set` holds one entry per device). */
static int fa_smem_attr(const struct snug_cuda *cu, const void *fn, size_t smem,
                        size_t set[SNUG_CUDA_MAX_DEVICES], struct snug_err *err) {
    bool known = cu->device >= 0 && cu->device < SNUG_CUDA_MAX_DEVICES;
    if (known && smem <= set[cu->device]) return SNUG_OK;
    cudaError_t e =
        cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return snug_err_set(err, SNUG_ERR_INTERNAL, "cuda fa: shared memory attribute: %s",
                            cudaGetErrorString(e));
    if (known) set[cu->device] = smem;
    return SNUG_OK;
}

/* Prompt-attention tile loader: -2 = not decided yet (SNUG_FA_PIPE read at the first call),
 * -1 = by the formats, 0 = plain, 1 = pipelined (snug_cuda_fa_tune). */
static int g_fa_pipe = -2;
extern "C" void snug_cuda_fa_tune(int pipe) {
    g_fa_pipe = pipe == 0 || pipe == 1 ? pipe : -1;
}

/* Which kernel: measured on the H200 (docs/perf/cuda-kernels.md), the pipelined one (cp.async,
 * tiles of 32 keys) wins for q8_0 (88 vs 47 TFLOP/s at 128K) and loses for f16 (103 vs 149)
 * and fp8 (53 vs 62), so it runs when K or V is q8_0. SNUG_FA_PIPE=1 / 0 forces either (tests
 * and the benchmark run both); f32 caches, tq vectors whose size is not a multiple of 4 bytes
 * (D 64, 128) and shapes that do not fit take the synchronous one. */
template <int D>
static int fa_launch(struct snug_cuda *cu, const struct snug_cuda_kv *kv, int kf, int vf,
                     int64_t Hq, int64_t Hkv, int64_t pos0, int64_t T, const float *q, float scale,
                     float *out, void *work, struct snug_err *err) {
    static size_t set_pipe[SNUG_CUDA_MAX_DEVICES], set_plain[SNUG_CUDA_MAX_DEVICES];
    const int64_t kvb = kvf_vec_bytes(kf, D), vvb = kvf_vec_bytes(vf, D);
    size_t smem_pipe = (size_t)(FA_BM + 2 * 32) * D * sizeof(__half) +
                       (size_t)(32 * (raw_stride(kvb) + raw_stride(vvb)));
    size_t smem_plain = (size_t)(FA_BM + 2 * FA_BN) * D * sizeof(__half);
    if (g_fa_pipe == -2) { /* first call: the debugging override, read once */
        const char *pe = getenv("SNUG_FA_PIPE");
        g_fa_pipe = pe && *pe ? strcmp(pe, "0") != 0 : -1;
    }
    bool pipe = g_fa_pipe >= 0 ? g_fa_pipe == 1 : (kf == SNUG_KV_Q8_0 || vf == SNUG_KV_Q8_0);
    /* tq vectors travel in 4-byte units: only when their size is a multiple of 4 (D 256) */
    pipe = pipe && kf != SNUG_KV_F32 && vf != SNUG_KV_F32 && (!kvf_rotated(kf) || kvb % 4 == 0) &&
           (!kvf_rotated(vf) || vvb % 4 == 0) && smem_pipe <= cu->smem_optin;
    size_t smem = pipe ? smem_pipe : smem_plain;
    if (smem > cu->smem_optin)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "cuda fa: %zu bytes of shared memory (device allows %zu)", smem,
                            cu->smem_optin);
    int rc = pipe ? fa_smem_attr(cu, (const void *)k_fa<D, 32, true>, smem, set_pipe, err)
                  : fa_smem_attr(cu, (const void *)k_fa<D, FA_BN, false>, smem, set_plain, err);
    if (rc) return rc;
    int64_t G = Hq / Hkv, nk = pos0 + T;
    int ns = snug_cuda_fa_nsplit(Hq, T, nk);
    if (ns > 1 && !work)
        return snug_err_set(
            err, SNUG_ERR_INVALID,
            "cuda attention: work memory required (snug_cuda_attention_work_bytes)");
    int64_t chunk = (nk + ns - 1) / ns;
    chunk = (chunk + FA_BN - 1) / FA_BN * FA_BN; /* a multiple of both tile sizes */
    dim3 grid((unsigned)((T * G + FA_BM - 1) / FA_BM), (unsigned)Hkv, (unsigned)ns);
    const float LOG2E = 1.4426950408889634f;
    const uint8_t *k = (const uint8_t *)kv->k, *v = (const uint8_t *)kv->v;
    if (pipe)
        k_fa<D, 32, true><<<grid, FA_WARPS * 32, smem, SNUG_CU_STREAM(cu)>>>(
            k, v, kf, vf, Hq, Hkv, pos0, T, q, scale * LOG2E, out, (float *)work, ns, chunk);
    else
        k_fa<D, FA_BN, false><<<grid, FA_WARPS * 32, smem, SNUG_CU_STREAM(cu)>>>(
            k, v, kf, vf, Hq, Hkv, pos0, T, q, scale * LOG2E, out, (float *)work, ns, chunk);
    rc = snug_cu_launched(err, "attention (tensor cores)");
    if (rc || ns == 1) return rc;
    return snug_cuda_att_merge(cu, (const float *)work, ns, T * Hq, D, out, err);
}

int snug_cuda_fa(struct snug_cuda *cu, const struct snug_cuda_kv *kv, int kf, int vf, int64_t Hq,
                 int64_t Hkv, int64_t D, int64_t pos0, int64_t T, const float *q, float scale,
                 float *out, void *work, struct snug_err *err) {
    switch (D) {
    case 64:
        return fa_launch<64>(cu, kv, kf, vf, Hq, Hkv, pos0, T, q, scale, out, work, err);
    case 128:
        return fa_launch<128>(cu, kv, kf, vf, Hq, Hkv, pos0, T, q, scale, out, work, err);
    case 256:
        return fa_launch<256>(cu, kv, kf, vf, Hq, Hkv, pos0, T, q, scale, out, work, err);
    default:
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED, "cuda fa: head dim %lld", (long long)D);
    }
}

/* ---- decode (T <= ATT_FA_MIN_T) on tensor cores ---------------------------------------------
 * Block (split s, KV head kh, row block rb) with FD_WARPS warps over the same FD_ROWS query
 * rows (row i of the flattened [T][G], as in k_fa: one KV head's query heads of up to
 * FD_ROWS / G tokens, rows past T·G zero). The block's key range is cut into tiles of FD_BN
 * keys dealt to the warps in turn (warp w: tiles w, w + FD_WARPS, ...); each warp runs its own
 * pipeline with no block barrier: the raw bytes of its next tile travel by cp.async (two
 * stages per warp) while it decodes the current one into its own f16 tile (K, then V in the
 * same tile) and runs S = Q·Kᵀ, the online softmax (base 2) and O += P·V with mma.sync. At the
 * end the warps' (max, sum, output) meet in shared memory (the raw stages' space) and the
 * block writes the output or its split's partial (cuda_attention.cu's merge, splits decided
 * on the device by att_split_of, so a replayed launch adapts to the cache length). */
#define FD_WARPS 4
#define FD_BN    16

/* Queue the stored vectors of keys kb .. kb+FD_BN-1 for one warp (keys at or past lim are
 * zero-filled). */
__device__ __forceinline__ void fd_issue(uint8_t *raw, const uint8_t *__restrict__ base, int64_t vb,
                                         int64_t Hkv, int64_t kh, int64_t kb, int64_t lim,
                                         int lane) {
    int unit = cp_unit(vb), per = (int)(vb / unit);
    int64_t rs = raw_stride(vb);
    for (int i = lane; i < FD_BN * per; i += 32) {
        int r = i / per, u = i % per;
        int64_t key = kb + r;
        bool ok = key < lim;
        const uint8_t *src = base + ((ok ? key : 0) * Hkv + kh) * vb + (int64_t)u * unit;
        cp_async(raw + r * rs + u * unit, src, unit, ok);
    }
}
/* One warp decodes raw[FD_BN][rs] (format FMT) into its swizzled f16 tile (every lane takes
 * part in each step: the tq codebook goes through shuffles). */
template <int D, int FMT>
__device__ __forceinline__ void fd_decode_f(__half *tile, const uint8_t *raw, int64_t rs,
                                            int lane) {
    constexpr int CH = D / 8, TG = D % 128 == 0 ? 128 : 64;
    static_assert(FD_BN * CH % 32 == 0, "whole warps decode");
    const float lut = kvf_tq_lut(FMT);
#pragma unroll 4
    for (int i = lane; i < FD_BN * CH; i += 32) {
        int r = i / CH, c = i % CH;
        *(uint4 *)(tile + sw<D>(r, c)) = decode8<FMT>(fetch8<FMT, TG>(raw + r * rs, c), lut);
    }
}
template <int D>
__device__ __forceinline__ void fd_decode(__half *tile, const uint8_t *raw, int fmt, int64_t vb,
                                          int lane) {
    int64_t rs = raw_stride(vb);
    switch (fmt) {
    case SNUG_KV_F16:
        fd_decode_f<D, SNUG_KV_F16>(tile, raw, rs, lane);
        break;
    case SNUG_KV_BF16:
        fd_decode_f<D, SNUG_KV_BF16>(tile, raw, rs, lane);
        break;
    case SNUG_KV_Q8_0:
        fd_decode_f<D, SNUG_KV_Q8_0>(tile, raw, rs, lane);
        break;
    case SNUG_KV_TQ4:
        fd_decode_f<D, SNUG_KV_TQ4>(tile, raw, rs, lane);
        break;
    case SNUG_KV_TQ3:
        fd_decode_f<D, SNUG_KV_TQ3>(tile, raw, rs, lane);
        break;
    default:
        fd_decode_f<D, SNUG_KV_FP8>(tile, raw, rs, lane);
        break;
    }
}

/* Shared memory of a decode block: Q, the warps' f16 tiles, then the larger of the warps' raw
 * stages and the final merge's outputs. */
__host__ __device__ __forceinline__ size_t fd_raw_bytes(int64_t kvb, int64_t vvb) {
    return (size_t)FD_BN * (size_t)(raw_stride(kvb) + raw_stride(vvb)); /* one stage */
}
static size_t fd_smem(int64_t D, int64_t kvb, int64_t vvb) {
    size_t stages = (size_t)FD_WARPS * 2 * fd_raw_bytes(kvb, vvb);
    size_t merge = (size_t)FD_WARPS * FD_ROWS * D * sizeof(float);
    return (size_t)(FD_ROWS + FD_WARPS * FD_BN) * D * sizeof(__half) +
           (stages > merge ? stages : merge);
}

template <int D>
__global__ void __launch_bounds__(FD_WARPS * 32, 2)
    k_fa_dec(const uint8_t *__restrict__ kc, const uint8_t *__restrict__ vc, int kf, int vf,
             int64_t Hq, int64_t Hkv, int64_t pos0_host, const int32_t *pos_dev, int64_t T,
             const float *__restrict__ q, float qscale, float *out, float *part, int nsplit) {
    const att_split sp = att_split_of(pos0_host, pos_dev, T, nsplit);
    if ((int)blockIdx.x >= sp.ns) return; /* (the whole block: before any barrier) */
    extern __shared__ __align__(16) unsigned char fa_smem[];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, s = blockIdx.x;
    const int64_t kvb = kvf_vec_bytes(kf, D), vvb = kvf_vec_bytes(vf, D);
    __half *sQ = (__half *)fa_smem, *tile = sQ + FD_ROWS * D + w * FD_BN * D;
    uint8_t *rawbase = (uint8_t *)(sQ + (FD_ROWS + FD_WARPS * FD_BN) * D);
    const size_t stage_bytes = fd_raw_bytes(kvb, vvb);
    uint8_t *const raw0 = rawbase + (size_t)w * 2 * stage_bytes; /* this warp's two stages */
    const int64_t voff = FD_BN * raw_stride(kvb);                /* V after K in a stage */
    const int G = (int)(Hq / Hkv);
    const int64_t pos0 = sp.pos0, kh = blockIdx.y, rows = T * G, r0 = (int64_t)blockIdx.z * FD_ROWS;

    fa_load_q<D, FD_ROWS, FD_WARPS * 32>(sQ, q, r0, rows, G, kh, Hq, qscale);
    __syncthreads();

    /* The keys of this split this block needs, and the last key each of this thread's two
     * accumulator rows (lane/4 and lane/4 + 8) may see. */
    const int64_t nk = pos0 + imin(r0 + FD_ROWS - 1, rows - 1) / G + 1;
    const int64_t lo = (int64_t)s * sp.chunk, hi = imin(lo + sp.chunk, nk);
    const int64_t gr0 = r0 + (lane >> 2), gr1 = gr0 + 8;
    const int64_t lim0 = imin(pos0 + imin(gr0, rows - 1) / G, hi - 1),
                  lim1 = imin(pos0 + imin(gr1, rows - 1) / G, hi - 1);

    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

    int64_t kb = lo + (int64_t)w * FD_BN;
    if (kb < hi) {
        fd_issue(raw0, kc, kvb, Hkv, kh, kb, hi, lane);
        fd_issue(raw0 + voff, vc, vvb, Hkv, kh, kb, hi, lane);
        cp_async_commit_wait_prev();
    }
    for (int st = 0; kb < hi; kb += FD_WARPS * FD_BN, st ^= 1) {
        const int64_t nb = kb + FD_WARPS * FD_BN;
        if (nb < hi) { /* the next tile's bytes fly during this one */
            uint8_t *nxt = raw0 + (st ^ 1) * stage_bytes;
            fd_issue(nxt, kc, kvb, Hkv, kh, nb, hi, lane);
            fd_issue(nxt + voff, vc, vvb, Hkv, kh, nb, hi, lane);
            cp_async_commit_wait_prev();
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            cp_async_wait_all();
        }
        __syncwarp(); /* every lane's copies of this tile have landed */
        const uint8_t *cur = raw0 + st * stage_bytes;
        fd_decode<D>(tile, cur, kf, kvb, lane);
        __syncwarp();

        /* S = Q·Kᵀ: 16 rows × FD_BN keys */
        float sacc[FD_BN / 8][4], c0, c1;
        uint32_t pa[FD_BN / 16][4];
        fa_qk<D, FD_BN>(sacc, sQ, 0, tile, lane);
        __syncwarp(); /* the K tile is read: V goes into the same place */
        fd_decode<D>(tile, cur + voff, vf, vvb, lane);

        fa_softmax<FD_BN>(sacc, kb, lim0, lim1, lane, m0, m1, l0, l1, c0, c1, pa);
        /* the maxima settle after the first tiles: rescale only when one moved */
        if (__any_sync(0xffffffffu, c0 != 1.0f || c1 != 1.0f)) {
#pragma unroll
            for (int i = 0; i < D / 8; i++)
                o[i][0] *= c0, o[i][1] *= c0, o[i][2] *= c1, o[i][3] *= c1;
        }
        __syncwarp(); /* the V tile is written */
        fa_pv<D, FD_BN>(o, pa, tile, lane);
        __syncwarp(); /* the tile and this stage are free for the next tile */
    }

    /* The warps meet: row maxima and sums, each warp's output weighed by e^(m_w - M) into
     * shared memory (the raw stages are idle: every warp waited for all its copies), then the
     * sum over the warps. */
    __shared__ float smx[FD_WARPS][FD_ROWS], ssum[FD_WARPS][FD_ROWS], sM[FD_ROWS], sL[FD_ROWS];
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    if ((lane & 3) == 0) {
        smx[w][lane >> 2] = m0, smx[w][(lane >> 2) + 8] = m1;
        ssum[w][lane >> 2] = l0, ssum[w][(lane >> 2) + 8] = l1;
    }
    __syncthreads();
    float *so = (float *)rawbase; /* [FD_WARPS][FD_ROWS][D] */
    {
        float M0 = -INFINITY, M1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < FD_WARPS; j++)
            M0 = fmaxf(M0, smx[j][lane >> 2]), M1 = fmaxf(M1, smx[j][(lane >> 2) + 8]);
        float f0 = m0 == -INFINITY ? 0.0f : exp2f(m0 - M0);
        float f1 = m1 == -INFINITY ? 0.0f : exp2f(m1 - M1);
        float *p0 = so + ((size_t)w * FD_ROWS + (lane >> 2)) * D + 2 * (lane & 3);
        float *p1 = p0 + 8 * D;
#pragma unroll
        for (int i = 0; i < D / 8; i++) {
            *(float2 *)(p0 + i * 8) = make_float2(o[i][0] * f0, o[i][1] * f0);
            *(float2 *)(p1 + i * 8) = make_float2(o[i][2] * f1, o[i][3] * f1);
        }
        if (threadIdx.x < FD_ROWS) {
            int r = threadIdx.x;
            float M = -INFINITY, L = 0.0f;
#pragma unroll
            for (int j = 0; j < FD_WARPS; j++) M = fmaxf(M, smx[j][r]);
#pragma unroll
            for (int j = 0; j < FD_WARPS; j++)
                L += smx[j][r] == -INFINITY ? 0.0f : ssum[j][r] * exp2f(smx[j][r] - M);
            sM[r] = M, sL[r] = L;
        }
    }
    __syncthreads();
    const float LN2 = 0.69314718055994531f;
    for (int e = threadIdx.x; e < FD_ROWS * D; e += FD_WARPS * 32) {
        int r = e / D, d = e % D;
        int64_t gi = r0 + r;
        if (gi >= rows) break; /* rows are in order: the rest are past the end too */
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < FD_WARPS; j++) acc += so[((size_t)j * FD_ROWS + r) * D + d];
        int64_t t = gi / G, h = kh * G + gi % G, row = t * Hq + h;
        if (nsplit == 1) {
            out[row * D + d] = acc / sL[r];
        } else {
            float *pp = part + (row * nsplit + s) * (D + 2);
            pp[2 + d] = acc;
            if (d == 0) pp[0] = sM[r] == -INFINITY ? -INFINITY : sM[r] * LN2, pp[1] = sL[r];
        }
    }
}

bool snug_cuda_fa_dec_ok(const struct snug_cuda *cu, int kf, int vf, int64_t D) {
    if (D != 64 && D != 128 && D != 256) return false;
    if (kf == SNUG_KV_F32 || vf == SNUG_KV_F32) return false;
    int64_t kvb = kvf_vec_bytes(kf, D), vvb = kvf_vec_bytes(vf, D);
    /* tq vectors travel in 4-byte units: only when their size is a multiple of 4 (D 256) */
    if ((kvf_rotated(kf) && kvb % 4) || (kvf_rotated(vf) && vvb % 4)) return false;
    return fd_smem(D, kvb, vvb) + 1024 <= cu->smem_optin; /* (+ the static merge arrays) */
}

template <int D>
static int fa_dec_launch(struct snug_cuda *cu, const struct snug_cuda_kv *kv, int kf, int vf,
                         int64_t Hq, int64_t Hkv, int64_t pos0, const int32_t *pos_dev, int64_t T,
                         const float *q, float scale, float *out, float *part, int ns,
                         struct snug_err *err) {
    static size_t set[SNUG_CUDA_MAX_DEVICES]; /* per instantiation and device */
    size_t smem = fd_smem(D, kvf_vec_bytes(kf, D), kvf_vec_bytes(vf, D));
    int rc = fa_smem_attr(cu, (const void *)k_fa_dec<D>, smem, set, err);
    if (rc) return rc;
    int64_t G = Hq / Hkv;
    dim3 grid((unsigned)ns, (unsigned)Hkv, (unsigned)((T * G + FD_ROWS - 1) / FD_ROWS));
    const float LOG2E = 1.4426950408889634f;
    k_fa_dec<D><<<grid, FD_WARPS * 32, smem, SNUG_CU_STREAM(cu)>>>(
        (const uint8_t *)kv->k, (const uint8_t *)kv->v, kf, vf, Hq, Hkv, pos0, pos_dev, T, q,
        scale * LOG2E, out, part, ns);
    return snug_cu_launched(err, "attention (tensor-core decode)");
}

int snug_cuda_fa_dec(struct snug_cuda *cu, const struct snug_cuda_kv *kv, int kf, int vf,
                     int64_t Hq, int64_t Hkv, int64_t D, int64_t pos0, const int32_t *pos_dev,
                     int64_t T, const float *q, float scale, float *out, float *part, int ns,
                     struct snug_err *err) {
    if (!snug_cuda_fa_dec_ok(cu, kf, vf, D))
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "cuda fa decode: cache formats K %d / V %d at head size %lld", kf, vf,
                            (long long)D);
    switch (D) {
    case 64:
        return fa_dec_launch<64>(cu, kv, kf, vf, Hq, Hkv, pos0, pos_dev, T, q, scale, out, part, ns,
                                 err);
    case 128:
        return fa_dec_launch<128>(cu, kv, kf, vf, Hq, Hkv, pos0, pos_dev, T, q, scale, out, part,
                                  ns, err);
    case 256:
        return fa_dec_launch<256>(cu, kv, kf, vf, Hq, Hkv, pos0, pos_dev, T, q, scale, out, part,
                                  ns, err);
    default:
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED, "cuda fa decode: head dim %lld",
                            (long long)D);
    }
}
