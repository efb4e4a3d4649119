/* quant_avx512.c — the AVX-512 kernel set: quant_simd.inc compiled with AVX-512 F/BW/VL/VNNI,
 * so the integer dots use vpdpbusd / vpdpwssd; the K-quant kernels use 512-bit registers
 * (SIMD_512), the others the 256-bit code with VNNI.
 * Invariant: only called after cpuid confirmed those features (quant_act.c).
 * Read next: quant_simd.inc. */
#include "quant_act.h"

#if defined(__x86_64__) && defined(__GNUC__)
#if defined(__clang__)
#pragma clang attribute push(                                                                      \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512dq"))),        \
    apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512dq")
#endif
#define SIMD_VNNI   1
#define SIMD_512    1
#define SIMD_EXPORT snug_qkernels_avx512
#include "quant_simd.inc"
#if defined(__clang__)
#pragma clang attribute pop
#endif
#else
bool snug_qkernels_avx512(struct snug_qkernels *k) {
    (void)k;
    return false;
}
#endif
