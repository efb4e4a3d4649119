/* quant_avx2.c — the AVX2 (+FMA, F16C) kernel set: quant_simd.inc compiled for that target
 * (function-level target via #pragma, so the rest of the build stays baseline x86-64).
 * Invariant: only called after cpuid confirmed avx2, fma and f16c (quant_act.c).
 * Read next: quant_simd.inc. */
#include "quant_act.h"

#if defined(__x86_64__) && defined(__GNUC__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif
#define SIMD_VNNI   0
#define SIMD_512    0
#define SIMD_EXPORT snug_qkernels_avx2
#include "quant_simd.inc"
#if defined(__clang__)
#pragma clang attribute pop
#endif
#else
bool snug_qkernels_avx2(struct snug_qkernels *k) {
    (void)k;
    return false;
}
#endif
