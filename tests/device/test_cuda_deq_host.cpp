/* test_cuda_deq_host.cpp — the CUDA weight decoders (deq8<> of src/backend/cuda/cuda_common.cuh)
 * run on the host, compared bit for bit with the CPU reference decoders (snug_dequantize_row),
 * so the block-layout arithmetic of every device decoder is checked in ctest, without a GPU.
 * How: the header is compiled as plain C++ (no __CUDACC__: the CUDA headers turn __device__ and
 * __constant__ into nothing) with host stand-ins for the few intrinsics the decoders use (__ldg
 * reads, __popc counts, __uint_as_float reinterprets; __half2float is the toolkit's own host
 * version). The float operations are the device code's, so what this cannot see is only a
 * compiler difference (the decoders use no fused multiply-add: products only, or a sum then a
 * product). tests/device/test_cuda_ops.c checks the same decoders on a GPU.
 * Random blocks (every index, sign and scale bit pattern) with finite f16 scales, 64 blocks of
 * 256 elements per type. Prints one line per type; exit status 1 on any difference.
 * Read next: src/backend/cuda/cuda_common.cuh, src/quant/quant_lowbit.c. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>

/* host stand-ins for the intrinsics cuda_common.cuh uses */
template <class T> static inline T __ldg(const T *p) {
    return *p;
}
static inline int __popc(unsigned x) {
    return __builtin_popcount(x);
}
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float __shfl_xor_sync(unsigned, float v, int) { /* unused here (warp sums) */
    return v;
}
static inline int __shfl_xor_sync(unsigned, int v, int) { /* unused here */
    return v;
}
static inline int __float2int_rn(float v) { /* unused here (x rounding) */
    return (int)nearbyintf(v);
}
static inline void __syncthreads() {}
static struct { unsigned x; } threadIdx, blockDim;

#include "backend/cuda/cuda_common.cuh"

static unsigned long long g_rng = 88172645463325252ull;
static unsigned rnd32() {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (unsigned)(g_rng >> 32);
}
static uint16_t small_f16() { /* |v| <= 0.02, never NaN/inf */
    return snug_f32_to_f16(0.02f * (float)((int)(rnd32() % 2001) - 1000) / 1000.0f);
}

/* f16 fields of a block (byte offsets), -1 none; IQ1_M's d is spread over 4 nibbles */
struct layout {
    uint32_t type;
    int f16_at[2];
};

template <int T> static int check(const layout &l) {
    const struct snug_dtype_info *ti = snug_dtype_info(T);
    const int nb = 64, n = nb * (int)ti->block_elems, bb = (int)ti->block_bytes;
    static uint8_t w[64 * 256];
    static float ref[64 * 256];
    for (int i = 0; i < nb * bb; i++) w[i] = (uint8_t)rnd32();
    for (int b = 0; b < nb; b++) {
        uint8_t *blk = w + b * bb;
        for (int k = 0; k < 2; k++)
            if (l.f16_at[k] >= 0) {
                uint16_t h = small_f16();
                memcpy(blk + l.f16_at[k], &h, 2);
            }
        if (T == SNUG_DTYPE_IQ1_M) {
            uint16_t h = small_f16();
            for (int k = 0; k < 4; k++)
                blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 0x0f) | ((h >> (4 * k)) & 0xf) << 4);
        }
    }
    snug_dequantize_row(T, w, ref, n);
    long bad = 0;
    for (int e = 0; e < n; e += 8) {
        float got[8];
        deq8<T>(w, e, got);
        for (int j = 0; j < 8; j++)
            if (memcmp(&got[j], &ref[e + j], 4) || !std::isfinite(got[j])) {
                if (bad < 3)
                    printf("  %s element %d: device decoder %.9g, reference %.9g\n", ti->name,
                           e + j, got[j], ref[e + j]);
                bad++;
            }
    }
    printf("%-8s %6d elements, %ld differ: %s\n", ti->name, n, bad, bad ? "FAIL" : "PASS");
    return bad != 0;
}

int main() {
    int fail = 0;
    fail |= check<SNUG_DTYPE_Q4_0>({SNUG_DTYPE_Q4_0, {0, -1}});
    fail |= check<SNUG_DTYPE_Q4_1>({SNUG_DTYPE_Q4_1, {0, 2}});
    fail |= check<SNUG_DTYPE_Q5_0>({SNUG_DTYPE_Q5_0, {0, -1}});
    fail |= check<SNUG_DTYPE_Q5_1>({SNUG_DTYPE_Q5_1, {0, 2}});
    fail |= check<SNUG_DTYPE_Q8_0>({SNUG_DTYPE_Q8_0, {0, -1}});
    fail |= check<SNUG_DTYPE_Q4_K>({SNUG_DTYPE_Q4_K, {0, 2}});
    fail |= check<SNUG_DTYPE_Q5_K>({SNUG_DTYPE_Q5_K, {0, 2}});
    fail |= check<SNUG_DTYPE_Q6_K>({SNUG_DTYPE_Q6_K, {208, -1}});
    fail |= check<SNUG_DTYPE_Q2_K>({SNUG_DTYPE_Q2_K, {80, 82}});
    fail |= check<SNUG_DTYPE_Q3_K>({SNUG_DTYPE_Q3_K, {108, -1}});
    fail |= check<SNUG_DTYPE_IQ4_NL>({SNUG_DTYPE_IQ4_NL, {0, -1}});
    fail |= check<SNUG_DTYPE_IQ4_XS>({SNUG_DTYPE_IQ4_XS, {0, -1}});
    fail |= check<SNUG_DTYPE_IQ3_XXS>({SNUG_DTYPE_IQ3_XXS, {0, -1}});
    fail |= check<SNUG_DTYPE_IQ3_S>({SNUG_DTYPE_IQ3_S, {0, -1}});
    fail |= check<SNUG_DTYPE_IQ2_XXS>({SNUG_DTYPE_IQ2_XXS, {0, -1}});
    fail |= check<SNUG_DTYPE_IQ2_XS>({SNUG_DTYPE_IQ2_XS, {0, -1}});
    fail |= check<SNUG_DTYPE_IQ2_S>({SNUG_DTYPE_IQ2_S, {0, -1}});
    fail |= check<SNUG_DTYPE_IQ1_S>({SNUG_DTYPE_IQ1_S, {0, -1}});
    fail |= check<SNUG_DTYPE_IQ1_M>({SNUG_DTYPE_IQ1_M, {-1, -1}});
    printf("test_cuda_deq_host: %s\n", fail ? "FAIL" : "PASS");
    return fail;
}
