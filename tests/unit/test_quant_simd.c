/* test_quant_simd.c — every SIMD kernel level (AVX2, AVX-512) against the scalar reference,
 * and the reference int8-activation kernels against plain double arithmetic.
 *
 * What is checked, and against what:
 *  - activation quantizers (A32, A256): byte-identical blocks at every level, on odd lengths,
 *    zero blocks, outliers and tiny values;
 *  - the reference dot kernels: equal to Σ dequant(w)·dequant(xq) computed in double (so the
 *    integer formulation, scales, mins and offsets are right);
 *  - each level's dot kernels (Q8_0, Q4_K, Q5_K, Q6_K with int8 activations; F32, F16, BF16 on
 *    float activations, odd n) for 1..8 activation rows at odd strides: within 2e-6·Σ|w·x| of
 *    the reference (only the order of float additions differs);
 *  - the IQ4_XS and Q3_K decode dots on A256 activations: the same tolerance test on rows snug
 *    encodes, then random blocks (every scale, level and high bit; activations up to ±127) with
 *    unit scales, where every float step is exact: every level bit-identical to the reference,
 *    i.e. the same integer sums, for 1..8 rows at odd strides, n = 256 / 768 / 1792;
 *  - snug_tgemm (float product on transposed activations): every level bit-identical to the
 *    fmaf-chain reference for 1..8 rows and 1..100 tokens on odd lengths and strides, NaN
 *    padding never reaching an output, nothing written outside the block; the reference
 *    within 1e-5·Σ|w·x| of double;
 *  - the Q4_K / Q6_K int16 and Q4_K / Q5_K / IQ4_XS / Q3_K int8 prompt products (snug_i16_*,
 *    snug_i8_*; Q5_K, IQ4_XS and Q3_K on random blocks): prepared rows and activation tiles of the
 *    dispatched versions byte-identical to the references', snug_i16_gemm bit-identical to
 * snug_i16_gemm_ref for 1..8 rows and odd token counts (zero padding), the reference within half an
 * activation step per super-block (Σ|w|·amax/16382) + 1e-5·Σ|w·x| of double arithmetic on the
 *    dequantized weights and the float activations (outliers included);
 *  - the 14-bit two-plane activations (snug_act_quantize_wide): exact split within half a step
 *    of x, and the two-plane dot at every level within that step of double arithmetic;
 *  - the SNUG_CPU level switch reports what it installed.
 * Read next: src/quant/quant_act.c, src/quant/quant_simd.inc. */
#include "core/core.h"
#include "quant/quant.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint64_t rng_u64(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}
static float rng_gauss(void) {
    double u = (double)((rng_u64() >> 11) + 1) * 0x1p-53, v = (double)(rng_u64() >> 11) * 0x1p-53;
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

/* Random row with some structure: a zero stretch, an outlier, tiny values. */
static void fill_row(float *x, int64_t n, int variant) {
    for (int64_t i = 0; i < n; i++) x[i] = rng_gauss();
    if (variant == 1 && n >= 64)
        for (int64_t i = 0; i < 32; i++) x[i] = 0;
    if (variant == 2) x[rng_u64() % (uint64_t)n] = 300.0f;
    if (variant == 3)
        for (int64_t i = 0; i < n; i++) x[i] *= 1e-30f;
}

/* Dequantize an activation row (A32 / A256 / float) into y. */
static void deq_act(uint32_t wtype, const uint8_t *xq, int64_t n, double *y) {
    uint32_t at = snug_act_type(wtype);
    int64_t g = at == SNUG_DTYPE_Q8_0 ? 32 : at == SNUG_DTYPE_Q8_K ? 256 : 0;
    if (!g) {
        for (int64_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, xq + 4 * i, 4);
            y[i] = f;
        }
        return;
    }
    int64_t nb = n / g;
    for (int64_t b = 0; b < nb; b++) {
        /* A32: groups of 8 blocks, values then scales (quant_act.h); A256: 292-byte blocks */
        size_t qo = g == 32 ? (size_t)(288 * (b / 8) + 32 * (b % 8)) : (size_t)b * 292;
        int64_t m = g == 32 ? (nb - 8 * (b / 8) < 8 ? nb - 8 * (b / 8) : 8) : 0;
        size_t dof = g == 32 ? (size_t)(288 * (b / 8) + 32 * m + 4 * (b % 8)) : qo + 256;
        float d;
        memcpy(&d, xq + dof, 4);
        for (int64_t i = 0; i < g; i++) y[b * g + i] = (double)d * (int8_t)xq[qo + i];
    }
}

static const int levels[3] = {SNUG_CPU_SCALAR, SNUG_CPU_AVX2, SNUG_CPU_AVX512};

static void test_quantizers(void) {
    int64_t lens[] = {256, 768, 2304, 4096};
    uint32_t wt[2] = {SNUG_DTYPE_Q8_0, SNUG_DTYPE_Q4_K};
    float *x = snug_malloc(4096 * sizeof(float));
    uint8_t *a = snug_malloc(8192), *b = snug_malloc(8192);
    for (int li = 1; li < 3; li++) {
        if (snug_cpu_set_level(levels[li]) != levels[li]) continue;
        int bad = 0, runs = 0;
        for (int k = 0; k < 2; k++)
            for (size_t ni = 0; ni < sizeof lens / sizeof *lens; ni++)
                for (int v = 0; v < 4; v++) {
                    int64_t n = lens[ni] + (k == 0 ? 32 * v : 0);
                    if (k == 0 && n > 4096) n = 4096 - 32;
                    fill_row(x, n, v);
                    size_t rb = snug_act_row_bytes(wt[k], n);
                    memset(a, 0x55, rb), memset(b, 0xaa, rb);
                    snug_act_quantize(wt[k], x, a, n);
                    snug_act_quantize_ref(wt[k], x, b, n);
                    bad += memcmp(a, b, rb) != 0;
                    runs++;
                }
        CHECKF(bad == 0, "%s quantizers: %d of %d rows differ from the reference",
               snug_cpu_level_name(levels[li]), bad, runs);
        printf("quantize act  %-6s  %d rows byte-identical to scalar\n",
               snug_cpu_level_name(levels[li]), runs - bad);
    }
    snug_cpu_set_level(SNUG_CPU_AVX512);
    snug_free(x), snug_free(a), snug_free(b);
}

static void test_dots_types(const uint32_t *types, size_t ntypes);
static void test_dots(void) {
    uint32_t types[] = {SNUG_DTYPE_Q8_0, SNUG_DTYPE_Q4_K, SNUG_DTYPE_Q5_K, SNUG_DTYPE_Q6_K,
                        SNUG_DTYPE_F32,  SNUG_DTYPE_F16,  SNUG_DTYPE_BF16};
    test_dots_types(types, sizeof types / sizeof *types);
}
static void test_dots_types(const uint32_t *types, size_t ntypes) {
    int64_t nmax = 2560;
    float *wf = snug_malloc((size_t)nmax * 4), *x = snug_malloc((size_t)nmax * 4 * 8);
    float *wd = snug_malloc((size_t)nmax * 4);
    double *xd = snug_malloc((size_t)nmax * 8);
    uint8_t *wq = snug_malloc((size_t)nmax * 4), *xq = snug_malloc((size_t)nmax * 4 * 8 + 8192);
    for (size_t ti = 0; ti < ntypes; ti++) {
        uint32_t type = types[ti];
        const struct snug_dtype_info *info = snug_dtype_info(type);
        bool fl = snug_act_type(type) == SNUG_DTYPE_F32;
        int64_t lens[3] = {info->block_elems, 5 * (int64_t)info->block_elems, 2560};
        if (fl) lens[0] = 37, lens[1] = 301;
        double worst_ref = 0, worst_lvl[3] = {0, 0, 0};
        for (int ni = 0; ni < 3; ni++) {
            int64_t n = lens[ni];
            for (int v = 0; v < 4; v++) {
                fill_row(wf, n, v == 3 ? 0 : v);
                CHECK(snug_quantize_row(type, wf, wq, n, NULL));
                snug_dequantize_row_ref(type, wq, wd, n);
                size_t rb = snug_act_row_bytes(type, n);
                size_t xs = rb + 4 * (size_t)(1 + ni); /* odd stride between rows */
                for (int c = 0; c < 8; c++) {
                    fill_row(x + c * n, n, v);
                    snug_act_quantize_ref(type, x + c * n, xq + c * xs, n);
                }
                for (int nc = 1; nc <= SNUG_ACT_MAX_ROWS; nc++) {
                    float ref[8], got[8];
                    snug_act_dot_ref(type, wq, xq, xs, nc, n, ref);
                    for (int c = 0; c < nc; c++) {
                        deq_act(type, xq + c * xs, n, xd);
                        double s = 0, m = 0;
                        for (int64_t i = 0; i < n; i++) {
                            s += wd[i] * xd[i];
                            m += fabs(wd[i] * xd[i]);
                        }
                        double e = m > 0 ? fabs(ref[c] - s) / m : fabs(ref[c]);
                        if (!(e <= worst_ref)) worst_ref = e;
                        for (int li = 1; li < 3; li++) {
                            if (snug_cpu_set_level(levels[li]) != levels[li]) continue;
                            snug_act_dot(type, wq, xq, xs, nc, n, got);
                            double eg = m > 0 ? fabs(got[c] - ref[c]) / m : fabs(got[c]);
                            if (!(eg <= worst_lvl[li])) worst_lvl[li] = eg;
                        }
                    }
                }
            }
        }
        CHECKF(worst_ref < 2e-6, "%s reference dot vs double: err/Σ|wx| = %.3g", info->name,
               worst_ref);
        for (int li = 1; li < 3; li++)
            CHECKF(worst_lvl[li] < 2e-6, "%s %s dot vs reference: err/Σ|wx| = %.3g", info->name,
                   snug_cpu_level_name(levels[li]), worst_lvl[li]);
        printf("dot %-5s  ref vs double %.2g   avx2 vs ref %.2g   avx512 vs ref %.2g\n", info->name,
               worst_ref, worst_lvl[1], worst_lvl[2]);
    }
    snug_cpu_set_level(SNUG_CPU_AVX512);
    snug_free(wf), snug_free(x), snug_free(wd), snug_free(xd), snug_free(wq), snug_free(xq);
}

/* Float block product: every level within 2e-6 of Σ|w·x| of the scalar reference on odd
 * lengths and strides, and each element bit-identical whatever block it was computed in (the
 * 1 × 1 call). */
static void test_fgemm(void) {
    int64_t lens[] = {1, 15, 37, 301, 2048};
    int64_t nmax = 2048 + 8;
    float *w = snug_malloc((size_t)nmax * 4 * 4), *x = snug_malloc((size_t)nmax * 4 * 6);
    for (size_t ni = 0; ni < sizeof lens / sizeof *lens; ni++) {
        int64_t n = lens[ni];
        size_t ws = (size_t)n + 3, xs = (size_t)n + 5, ys = 7;
        for (int r = 0; r < 4; r++) fill_row(w + r * ws, n, (int)(r + ni) % 3);
        for (int t = 0; t < 6; t++) fill_row(x + t * xs, n, (int)(t + ni) % 3);
        for (int li = 0; li < 3; li++) {
            if (snug_cpu_set_level(levels[li]) != levels[li]) continue;
            double worst = 0;
            bool same = true;
            for (int nr = 1; nr <= SNUG_FGEMM_NR; nr++)
                for (int nt = 1; nt <= SNUG_FGEMM_NT; nt++) {
                    float ref[6 * 7], got[6 * 7], one;
                    snug_fgemm_ref(w, ws, nr, x, xs, nt, n, ref, ys);
                    snug_fgemm(w, ws, nr, x, xs, nt, n, got, ys);
                    for (int t = 0; t < nt; t++)
                        for (int r = 0; r < nr; r++) {
                            double m = 0;
                            for (int64_t k = 0; k < n; k++)
                                m += fabs((double)w[r * ws + k] * x[t * xs + k]);
                            double e = fabs((double)got[t * ys + r] - ref[t * ys + r]) / m;
                            if (!(e <= worst)) worst = e;
                            snug_fgemm(w + r * ws, ws, 1, x + t * xs, xs, 1, n, &one, 1);
                            if (memcmp(&one, &got[t * ys + r], 4)) same = false;
                        }
                }
            CHECKF(worst < 2e-6, "fgemm n=%lld %s vs reference: err/Σ|wx| = %.3g", (long long)n,
                   snug_cpu_level_name(levels[li]), worst);
            CHECKF(same, "fgemm n=%lld %s: an element differs between block shapes", (long long)n,
                   snug_cpu_level_name(levels[li]));
        }
    }
    printf("fgemm: levels vs reference and block-shape invariance checked\n");
    snug_cpu_set_level(SNUG_CPU_AVX512);
    snug_free(w), snug_free(x);
}

/* Transposed float block product: each level bit-identical to the reference (the same fmaf
 * chain per element), whatever the block shape; NaN in the padding columns of xt never reaches
 * an output; outputs outside nr × nt untouched; the reference close to double. */
static void test_tgemm(void) {
    int64_t lens[] = {1, 15, 37, 301, 2048};
    int nts[] = {1, 5, 16, 17, 24, 47, 48, 49, 100};
    const int ntmax = 100, xts_max = 112 + 16, ys = SNUG_TGEMM_MR + 3;
    int64_t nmax = 2048;
    float *w = snug_malloc((size_t)(nmax + 3) * SNUG_TGEMM_MR * 4);
    float *xt = snug_malloc((size_t)nmax * (size_t)xts_max * 4);
    float *ref = snug_malloc((size_t)ntmax * (size_t)ys * 4);
    float *got = snug_malloc((size_t)ntmax * (size_t)ys * 4);
    for (size_t ni = 0; ni < sizeof lens / sizeof *lens; ni++) {
        int64_t n = lens[ni];
        size_t ws = (size_t)n + 3;
        for (int r = 0; r < SNUG_TGEMM_MR; r++) fill_row(w + r * ws, n, (int)(r + ni) % 3);
        for (size_t ti = 0; ti < sizeof nts / sizeof *nts; ti++) {
            int nt = nts[ti];
            size_t xts = (size_t)(nt + SNUG_TGEMM_PAD - 1) / SNUG_TGEMM_PAD * SNUG_TGEMM_PAD + 16;
            for (int64_t k = 0; k < n; k++) {
                fill_row(xt + (size_t)k * xts, nt, (int)(k % 3));
                for (size_t t = (size_t)nt; t < xts; t++) xt[(size_t)k * xts + t] = NAN;
            }
            double worst = 0;
            for (int nr = 1; nr <= SNUG_TGEMM_MR; nr++) {
                for (int i = 0; i < ntmax * ys; i++) ref[i] = -7.0f;
                snug_tgemm_ref(w, ws, nr, xt, xts, nt, n, ref, (size_t)ys);
                for (int t = 0; t < nt; t++)
                    for (int r = 0; r < nr; r++) {
                        double a = 0, m = 0;
                        for (int64_t k = 0; k < n; k++) {
                            double p = (double)w[r * ws + k] * xt[(size_t)k * xts + t];
                            a += p, m += fabs(p);
                        }
                        double e = fabs(a - ref[t * ys + r]) / (m > 0 ? m : 1);
                        if (!(e <= worst)) worst = e;
                    }
                for (int li = 0; li < 3; li++) {
                    if (snug_cpu_set_level(levels[li]) != levels[li]) continue;
                    for (int i = 0; i < ntmax * ys; i++) got[i] = -7.0f;
                    snug_tgemm(w, ws, nr, xt, xts, nt, n, got, (size_t)ys);
                    CHECKF(memcmp(ref, got, (size_t)ntmax * (size_t)ys * 4) == 0,
                           "tgemm n=%lld nr=%d nt=%d %s: differs from the reference", (long long)n,
                           nr, nt, snug_cpu_level_name(levels[li]));
                }
            }
            CHECKF(worst < 1e-5, "tgemm reference n=%lld nt=%d vs double: err/Σ|wx| = %.3g",
                   (long long)n, nt, worst);
        }
    }
    printf("tgemm: levels bit-identical to the reference; reference vs double checked\n");
    snug_cpu_set_level(SNUG_CPU_AVX512);
    snug_free(w), snug_free(xt), snug_free(ref), snug_free(got);
}

/* Q4_K on int16 activations: preparation and block product against the references, the
 * reference against double on dequantized weights and the original floats. */
/* The int16 (snug_i16_*) and int8 (snug_i8_*: Q4_K, and the signed form for IQ4_XS and Q3_K)
 * prompt products behind one interface, so one test checks all of them. */
static size_t ip_row_bytes(int i8, int64_t n) {
    return i8 ? snug_i8_row_bytes(n) : snug_i16_row_bytes(n);
}
static size_t ip_x_bytes(int i8, int64_t n, int ttpad) {
    return i8 ? snug_i8_x_bytes(n, ttpad) : snug_i16_x_bytes(n, ttpad);
}
static void ip_prep(int i8, int ref, uint32_t type, const void *src, void *dst, int64_t n) {
    if (i8)
        ref ? snug_i8_prep_ref(type, src, dst, n) : snug_i8_prep(type, src, dst, n);
    else if (!ref)
        snug_i16_prep(type, src, dst, n);
    else if (type == SNUG_DTYPE_Q6_K)
        snug_i16_prep_q6k_ref(src, dst, n);
    else
        snug_i16_prep_q4k_ref(src, dst, n);
}
static void ip_quant_x(int i8, int ref, const float *x, int64_t n, int t, int ttpad, void *xt) {
    if (i8)
        ref ? snug_i8_quant_x_ref(x, n, t, ttpad, xt) : snug_i8_quant_x(x, n, t, ttpad, xt);
    else
        ref ? snug_i16_quant_x_ref(x, n, t, ttpad, xt) : snug_i16_quant_x(x, n, t, ttpad, xt);
}
static void ip_gemm(int i8, int ref, uint32_t type, const void *wp, size_t wps, int nr,
                    const void *xt, int ttpad, int nt, int64_t n, float *y, size_t ys) {
    if (i8 && ref) snug_i8_gemm_ref(type, wp, wps, nr, xt, ttpad, nt, n, y, ys);
    if (i8 && !ref) snug_i8_gemm(type, wp, wps, nr, xt, ttpad, nt, n, y, ys);
    if (!i8 && ref) snug_i16_gemm_ref(type, wp, wps, nr, xt, ttpad, nt, n, y, ys);
    if (!i8 && !ref) snug_i16_gemm(type, wp, wps, nr, xt, ttpad, nt, n, y, ys);
}

static void test_i16_type(uint32_t type, int i8) {
    const char *kn = i8 ? "i8" : "i16";
    bool vec = i8 ? snug_i8_supports(type) : snug_i16_supports(type);
    int64_t ns[] = {256, 768, 2048};
    int nts[] = {1, 5, 16, 17, 47, 48, 49, 100};
    const int ttmax = 112, ys = SNUG_TGEMM_MR + 3, nr_all = SNUG_TGEMM_MR;
    int64_t nmax = 2048;
    size_t qrb = (size_t)snug_dtype_row_bytes(type, (uint64_t)nmax);
    size_t prb = ip_row_bytes(i8, nmax);
    uint8_t *wq = snug_malloc(qrb * (size_t)nr_all), *wp = snug_malloc(prb * (size_t)nr_all);
    uint8_t *wp2 = snug_malloc(prb), *xt = snug_malloc(ip_x_bytes(i8, nmax, ttmax));
    uint8_t *xt2 = snug_malloc(ip_x_bytes(i8, nmax, ttmax));
    float *row = snug_malloc((size_t)nmax * 4), *wd = snug_malloc((size_t)nmax * 4 * nr_all);
    float *x = snug_malloc((size_t)nmax * 4 * ttmax);
    float *ref = snug_malloc((size_t)ttmax * (size_t)ys * 4);
    float *got = snug_malloc((size_t)ttmax * (size_t)ys * 4);
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        int64_t n = ns[ni];
        size_t rb = (size_t)snug_dtype_row_bytes(type, (uint64_t)n);
        size_t pb = ip_row_bytes(i8, n);
        int bad_prep = 0;
        /* bytes of a prepared row that the preparation defines */
        size_t pdef = !i8 ? (size_t)n * 2 + (size_t)(n / 256) * 36
                      : type == SNUG_DTYPE_Q4_K || type == SNUG_DTYPE_Q5_K
                          ? (size_t)n + (size_t)(n / 256) * 68
                      : type == SNUG_DTYPE_IQ4_XS ? (size_t)n + (size_t)(n / 256) * 40
                                                  : (size_t)n + (size_t)(n / 256) * 8;
        for (int r = 0; r < nr_all; r++) {
            fill_row(row, n, (int)(r + ni) % 3);
            if (type == SNUG_DTYPE_IQ4_XS || type == SNUG_DTYPE_Q3_K || type == SNUG_DTYPE_Q5_K) {
                /* random blocks (every scale and level, every Q5_K high bit, the extremes
                 * included) with a finite f16 d (and Q5_K dmin) */
                uint8_t *blk = wq + (size_t)r * rb;
                size_t bb = type == SNUG_DTYPE_IQ4_XS ? 136 : type == SNUG_DTYPE_Q5_K ? 176 : 110;
                for (size_t i = 0; i < rb; i++) blk[i] = (uint8_t)(rng_u64() >> 56);
                for (int64_t b = 0; b < n / 256; b++) {
                    uint16_t h = snug_f32_to_f16(((float)((b + r) % 13) - 6.0f) * 0.003f + 1e-4f);
                    memcpy(blk + (size_t)b * bb + (type == SNUG_DTYPE_Q3_K ? 108 : 0), &h, 2);
                    if (type == SNUG_DTYPE_Q5_K) {
                        h = snug_f32_to_f16((float)((b + 2 * r) % 7) * 0.001f);
                        memcpy(blk + (size_t)b * bb + 2, &h, 2);
                    }
                }
            } else {
                snug_quantize_row(type, row, wq + (size_t)r * rb, n, NULL);
            }
            snug_dequantize_row_ref(type, wq + (size_t)r * rb, wd + (size_t)r * n, n);
            ip_prep(i8, 1, type, wq + (size_t)r * rb, wp + (size_t)r * pb, n);
            ip_prep(i8, 0, type, wq + (size_t)r * rb, wp2, n);
            bad_prep += memcmp(wp2, wp + (size_t)r * pb, pdef);
        }
        CHECKF(bad_prep == 0, "%s prep %s n=%lld: differs from the reference", kn,
               snug_dtype_info(type)->name, (long long)n);
        for (size_t ti = 0; ti < sizeof nts / sizeof *nts; ti++) {
            int nt = nts[ti], ttpad = (nt + SNUG_TGEMM_PAD - 1) / SNUG_TGEMM_PAD * SNUG_TGEMM_PAD;
            for (int t = 0; t < nt; t++) {
                fill_row(x + (size_t)t * n, n, (int)(t % 3));
                ip_quant_x(i8, 0, x + (size_t)t * n, n, t, ttpad, xt);
                ip_quant_x(i8, 1, x + (size_t)t * n, n, t, ttpad, xt2);
            }
            if (i8)
                snug_i8_pad_x(n, nt, ttpad, xt), snug_i8_pad_x(n, nt, ttpad, xt2);
            else
                snug_i16_pad_x(n, nt, ttpad, xt), snug_i16_pad_x(n, nt, ttpad, xt2);
            CHECKF(memcmp(xt, xt2, ip_x_bytes(i8, n, ttpad)) == 0,
                   "%s quant_x n=%lld nt=%d: tile differs from the reference", kn, (long long)n,
                   nt);
            double worst = 0;
            for (int nr = 1; nr <= nr_all; nr++) {
                for (int i = 0; i < ttmax * ys; i++) ref[i] = got[i] = -7.0f;
                ip_gemm(i8, 1, type, wp, pb, nr, xt, ttpad, nt, n, ref, (size_t)ys);
                if (vec) {
                    ip_gemm(i8, 0, type, wp, pb, nr, xt, ttpad, nt, n, got, (size_t)ys);
                    CHECKF(memcmp(ref, got, (size_t)ttmax * (size_t)ys * 4) == 0,
                           "%s gemm n=%lld nr=%d nt=%d: differs from the reference", kn,
                           (long long)n, nr, nt);
                }
                /* error bound: half an activation step (amax/8191 per super-block, amax/127
                 * for int8) times
                 * Σ|w| over the super-block, plus 1e-5·Σ|w·x| of float rounding */
                for (int t = 0; t < nt; t++)
                    for (int r = 0; r < nr; r++) {
                        double a = 0, m = 0, bound = 0;
                        for (int64_t b = 0; b < n / 256; b++) {
                            double amax = 0, sw = 0;
                            for (int64_t k = 256 * b; k < 256 * b + 256; k++) {
                                double p = (double)wd[(size_t)r * n + k] * x[(size_t)t * n + k];
                                a += p, m += fabs(p);
                                amax = fmax(amax, fabs(x[(size_t)t * n + k]));
                                sw += fabs(wd[(size_t)r * n + k]);
                            }
                            bound += amax / (i8 ? 127 : 8191) / 2 * sw;
                        }
                        double e = fabs(a - ref[t * ys + r]) / (bound + 1e-5 * m);
                        if (!(e <= worst)) worst = e;
                    }
            }
            CHECKF(worst <= 1.0, "%s reference %s n=%lld nt=%d vs double: err / bound = %.3g", kn,
                   snug_dtype_info(type)->name, (long long)n, nt, worst);
        }
    }
    printf("%s (%s, int%d activations): %s; reference vs double checked\n", kn,
           snug_dtype_info(type)->name, i8 ? 8 : 16,
           vec ? "AVX-512 kernel bit-identical to the reference"
               : "no vector kernel at this level");
    snug_free(wq), snug_free(wp), snug_free(wp2), snug_free(xt), snug_free(row), snug_free(wd);
    snug_free(x), snug_free(ref), snug_free(got), snug_free(xt2);
}

static void test_i16(void) {
    test_i16_type(SNUG_DTYPE_Q4_K, 0);
    test_i16_type(SNUG_DTYPE_Q6_K, 0);
    test_i16_type(SNUG_DTYPE_Q4_K, 1);
    test_i16_type(SNUG_DTYPE_Q5_K, 1);
    test_i16_type(SNUG_DTYPE_IQ4_XS, 1);
    test_i16_type(SNUG_DTYPE_Q3_K, 1);
}

/* Vector dequantizers: bit-identical to the reference at every level. */
static void test_dequant(void) {
    uint32_t types[] = {SNUG_DTYPE_Q8_0, SNUG_DTYPE_Q4_K, SNUG_DTYPE_Q5_K, SNUG_DTYPE_Q6_K};
    int64_t n = 2816; /* 11 super-blocks */
    float *x = snug_malloc((size_t)n * 4), *a = snug_malloc((size_t)n * 4),
          *b = snug_malloc((size_t)n * 4);
    uint8_t *q = snug_malloc((size_t)n * 4);
    for (int li = 1; li < 3; li++) {
        if (snug_cpu_set_level(levels[li]) != levels[li]) continue;
        int bad = 0;
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
            for (int v = 0; v < 4; v++) {
                fill_row(x, n, v);
                snug_quantize_row(types[ti], x, q, n, NULL);
                snug_dequantize_row(types[ti], q, a, n);
                snug_dequantize_row_ref(types[ti], q, b, n);
                bad += memcmp(a, b, (size_t)n * 4) != 0;
                float dr = snug_dot_row_ref(types[ti], q, x, n),
                      dd = snug_dot_row(types[ti], q, x, n);
                bad += !(fabsf(dr - dd) <= 1e-5f * (fabsf(dr) + 1.0f) * 100.0f);
            }
        CHECKF(bad == 0, "%s dequantize/dot_row: %d mismatches", snug_cpu_level_name(levels[li]),
               bad);
        printf("dequantize    %-6s  bit-identical to scalar (q8_0 q4_K q5_K q6_K)\n",
               snug_cpu_level_name(levels[li]));
    }
    snug_cpu_set_level(SNUG_CPU_AVX512);
    snug_free(x), snug_free(a), snug_free(b), snug_free(q);
}

/* Vector dequantizers of the low-bit types (no snug encoder yet): random blocks with finite f16
 * scales, odd block counts, bit-identical to the reference at every level; dot_row within float
 * rounding of the reference dot. */
static void test_dequant_lowbit(void) {
    struct {
        uint32_t type;
        int f16[2]; /* byte offsets of f16 fields in a block, -1 none */
    } types[] = {{SNUG_DTYPE_Q2_K, {80, 82}},
                 {SNUG_DTYPE_Q3_K, {108, -1}},
                 {SNUG_DTYPE_IQ4_NL, {0, -1}},
                 {SNUG_DTYPE_IQ4_XS, {0, -1}}};
    int64_t ns[] = {256, 2816, 256 * 7 + 32 * 3}; /* the last only for 32-element blocks */
    float *x = snug_malloc(4096 * 4), *a = snug_malloc(4096 * 4), *b = snug_malloc(4096 * 4);
    uint8_t *q = snug_malloc(4096 * 4);
    uint64_t st = 99;
    for (int li = 1; li < 3; li++) {
        if (snug_cpu_set_level(levels[li]) != levels[li]) continue;
        int bad = 0, cases = 0;
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
            const struct snug_dtype_info *t = snug_dtype_info(types[ti].type);
            for (int ni = 0; ni < 3; ni++) {
                int64_t n = ns[ni];
                if (n % t->block_elems) continue;
                int64_t nb = n / t->block_elems;
                for (int64_t i = 0; i < nb * t->block_bytes; i++) {
                    st = st * 6364136223846793005ull + 1442695040888963407ull;
                    q[i] = (uint8_t)(st >> 56);
                }
                for (int64_t i = 0; i < nb; i++)
                    for (int f = 0; f < 2; f++) {
                        if (types[ti].f16[f] < 0) continue;
                        uint16_t h = snug_f32_to_f16(((float)(i % 13) - 6.0f) * 0.01f);
                        memcpy(q + i * t->block_bytes + types[ti].f16[f], &h, 2);
                    }
                fill_row(x, n, ni);
                snug_dequantize_row(types[ti].type, q, a, n);
                snug_dequantize_row_ref(types[ti].type, q, b, n);
                bad += memcmp(a, b, (size_t)n * 4) != 0;
                double want = 0, mag = 0;
                for (int64_t i = 0; i < n; i++)
                    want += (double)b[i] * x[i], mag += fabs(b[i] * x[i]);
                float dd = snug_dot_row(types[ti].type, q, x, n);
                bad += !(fabs(dd - want) <= 1e-5 * mag + 1e-30);
                cases++;
            }
        }
        CHECKF(bad == 0, "%s low-bit dequantize/dot_row: %d mismatches of %d",
               snug_cpu_level_name(levels[li]), bad, cases);
        printf("dequantize    %-6s  bit-identical to scalar (q2_K q3_K iq4_nl iq4_xs, %d cases)\n",
               snug_cpu_level_name(levels[li]), cases);
    }
    snug_cpu_set_level(SNUG_CPU_AVX512);
    snug_free(x), snug_free(a), snug_free(b), snug_free(q);
}

/* snug_act_dot2 (two weight rows, one activation row) gives exactly the one-row values. The
 * real check is Q4_K at the AVX-512 level (its own two-row kernel); the other levels and types
 * take the fallback of two one-row calls today and are here so a future two-row kernel for
 * them is checked too. */
static void test_dot2(void) {
    uint32_t types[] = {SNUG_DTYPE_Q4_K, SNUG_DTYPE_Q6_K, SNUG_DTYPE_Q8_0};
    int64_t n = 2816; /* 11 super-blocks */
    float *w = snug_malloc((size_t)n * 4), *x = snug_malloc((size_t)n * 4);
    uint8_t *q0 = snug_malloc((size_t)n * 4), *q1 = snug_malloc((size_t)n * 4);
    uint8_t *xq = snug_malloc((size_t)n * 4 + 1024);
    for (int li = 0; li < 3; li++) {
        if (snug_cpu_set_level(levels[li]) != levels[li]) continue;
        int bad = 0;
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
            for (int v = 0; v < 4; v++) {
                fill_row(w, n, v);
                snug_quantize_row(types[ti], w, q0, n, NULL);
                fill_row(w, n, (v + 1) % 4);
                snug_quantize_row(types[ti], w, q1, n, NULL);
                fill_row(x, n, (v + 2) % 4);
                snug_act_quantize(types[ti], x, xq, n);
                float two[2], a, b;
                snug_act_dot2(types[ti], q0, q1, xq, n, two);
                snug_act_dot(types[ti], q0, xq, 0, 1, n, &a);
                snug_act_dot(types[ti], q1, xq, 0, 1, n, &b);
                bad += memcmp(&two[0], &a, 4) != 0 || memcmp(&two[1], &b, 4) != 0;
            }
        CHECKF(bad == 0, "%s act_dot2: %d rows differ from the one-row dot",
               snug_cpu_level_name(levels[li]), bad);
        printf("act_dot2      %-6s  bit-identical to two one-row dots (q4_K q6_K q8_0)\n",
               snug_cpu_level_name(levels[li]));
    }
    snug_cpu_set_level(SNUG_CPU_AVX512);
    snug_free(w), snug_free(x), snug_free(q0), snug_free(q1), snug_free(xq);
}

/* 14-bit activations in two int8 planes (snug_act_quantize_wide, Q8_0's A32 and the K-quants'
 * A256): every block's planes in range and h·(its scale) + l·(its scale) within half a step
 * (amax/16382) of x; the two-plane dot at every level within that half step per element
 * (Σ|w|·amax/16382) + 2e-6·Σ|w·x| of double arithmetic on the dequantized weights and x. */
static void test_wide(void) {
    uint32_t types[2] = {SNUG_DTYPE_Q8_0, SNUG_DTYPE_Q6_K};
    int64_t nmax = 2560;
    float *wf = snug_malloc((size_t)nmax * 4), *x = snug_malloc((size_t)nmax * 4);
    float *wd = snug_malloc((size_t)nmax * 4);
    double *xh = snug_malloc((size_t)nmax * 8), *xl = snug_malloc((size_t)nmax * 8);
    uint8_t *wq = snug_malloc((size_t)nmax * 4), *xq = snug_malloc((size_t)nmax * 4 + 64);
    for (int ti = 0; ti < 2; ti++) {
        uint32_t type = types[ti];
        int64_t g = type == SNUG_DTYPE_Q8_0 ? 32 : 256,
                lens[3] = {g, 3 * g + (g == 32 ? 0 : 256), 2560};
        int bad_rec = 0, bad_dot = 0, runs = 0;
        double worst = 0;
        for (int ni = 0; ni < 3; ni++)
            for (int v = 0; v < 4; v++) {
                int64_t n = lens[ni];
                fill_row(x, n, v);
                fill_row(wf, n, v == 3 ? 0 : v);
                CHECK(snug_quantize_row(type, wf, wq, n, NULL));
                snug_dequantize_row_ref(type, wq, wd, n);
                size_t rb = snug_act_row_bytes(type, n), xs = rb + 12; /* odd plane stride */
                snug_act_quantize_wide(type, x, xq, xs, n);
                deq_act(type, xq, n, xh);
                deq_act(type, xq + xs, n, xl);
                double s = 0, m = 0, step = 0;
                for (int64_t b = 0; b < n / g; b++) {
                    double amax = 0;
                    for (int64_t i = b * g; i < (b + 1) * g; i++)
                        amax = fmax(amax, fabs((double)x[i]));
                    double half = amax / 16382 * (1 + 1e-3);
                    for (int64_t i = b * g; i < (b + 1) * g; i++) {
                        /* the low plane is non-negative, the high plane within [-64, 63] steps */
                        bad_rec += !(fabs(xh[i] + xl[i] - x[i]) <= half) || xl[i] < 0 ||
                                   fabs(xh[i]) > 64 * 128 * (amax / 8191) * (1 + 1e-6);
                        s += (double)wd[i] * x[i];
                        m += fabs((double)wd[i] * x[i]);
                        step += fabs((double)wd[i]) * half;
                    }
                }
                for (int li = 0; li < 3; li++) {
                    if (snug_cpu_set_level(levels[li]) != levels[li]) continue;
                    float o[2];
                    snug_act_dot(type, wq, xq, xs, 2, n, o);
                    double e = fabs((double)o[0] + o[1] - s);
                    bad_dot += !(e <= step + 2e-6 * m);
                    if (m > 0 && !(e / m <= worst)) worst = e / m;
                    runs++;
                }
            }
        snug_cpu_set_level(SNUG_CPU_AVX512);
        CHECKF(bad_rec == 0, "%s wide activations: %d elements off by more than half a step",
               snug_dtype_info(type)->name, bad_rec);
        CHECKF(bad_dot == 0, "%s wide dot: %d of %d dots beyond the bound",
               snug_dtype_info(type)->name, bad_dot, runs);
        printf("wide act %-5s  %d dots (all levels) within half a step; worst err/Σ|wx| %.2g\n",
               snug_dtype_info(type)->name, runs, worst);
    }
    snug_free(wf), snug_free(x), snug_free(wd), snug_free(xh), snug_free(xl), snug_free(wq);
    snug_free(xq);
}

/* IQ4_XS and Q3_K on A256 activations (the decode dots): the float tolerance test above on
 * rows snug encodes, then exact integer equality on random blocks (every scale, level and
 * high bit, the extreme activations ±127 included): with the weight d = 1 and the activation
 * scale 1 every float operation of every level is exact (all partial sums are integers below
 * 2²⁴), so the outputs are bit-identical to the reference exactly when the integer sums are. */
static void test_dots_lowbit(void) {
    const uint32_t types[2] = {SNUG_DTYPE_IQ4_XS, SNUG_DTYPE_Q3_K};
    test_dots_types(types, 2);
    int64_t lens[3] = {256, 768, 1792}, nmax = 1792;
    uint8_t *wq = snug_malloc((size_t)nmax), *xq = snug_malloc(8 * ((size_t)nmax / 256 * 292 + 12));
    for (int ti = 0; ti < 2; ti++) {
        uint32_t type = types[ti];
        size_t bb = type == SNUG_DTYPE_IQ4_XS ? 136 : 110,
               doff = type == SNUG_DTYPE_IQ4_XS ? 0 : 108;
        int bad[3] = {0, 0, 0}, runs = 0;
        for (int ni = 0; ni < 3; ni++)
            for (int v = 0; v < 6; v++) {
                int64_t n = lens[ni], nb = n / 256;
                size_t xs = (size_t)nb * 292 + 4 * (size_t)(1 + v % 3); /* odd strides */
                uint16_t one = snug_f32_to_f16(1.0f);
                for (int64_t i = 0; i < nb * (int64_t)bb; i++) wq[i] = (uint8_t)(rng_u64() >> 56);
                for (int64_t b = 0; b < nb; b++) memcpy(wq + b * (int64_t)bb + doff, &one, 2);
                for (int c = 0; c < 8; c++) {
                    uint8_t *xr = xq + (size_t)c * xs;
                    for (int64_t b = 0; b < nb; b++, xr += 292) {
                        int8_t *q = (int8_t *)xr;
                        for (int i = 0; i < 256; i++) {
                            uint64_t r = rng_u64();
                            /* even v: values in −2..2; odd v: ±127 at one place in 64 */
                            q[i] = v % 2 == 0       ? (int8_t)((int)(r >> 60) % 5 - 2)
                                   : (r >> 58) == 0 ? (int8_t)((r >> 57) & 1 ? 127 : -127)
                                                    : 0;
                        }
                        float d = 1.0f;
                        memcpy(xr + 256, &d, 4);
                        for (int k = 0; k < 16; k++) {
                            int16_t sum = 0;
                            for (int i = 0; i < 16; i++) sum = (int16_t)(sum + q[16 * k + i]);
                            memcpy(xr + 260 + 2 * k, &sum, 2);
                        }
                    }
                }
                for (int nc = 1; nc <= SNUG_ACT_MAX_ROWS; nc++) {
                    float ref[8], got[8];
                    snug_act_dot_ref(type, wq, xq, xs, nc, n, ref);
                    for (int li = 1; li < 3; li++) {
                        if (snug_cpu_set_level(levels[li]) != levels[li]) continue;
                        snug_act_dot(type, wq, xq, xs, nc, n, got);
                        bad[li] += memcmp(ref, got, (size_t)nc * 4) != 0;
                    }
                    runs++;
                }
            }
        snug_cpu_set_level(SNUG_CPU_AVX512);
        for (int li = 1; li < 3; li++)
            CHECKF(bad[li] == 0, "%s %s A256 dot: %d of %d calls differ from the integer reference",
                   snug_dtype_info(type)->name, snug_cpu_level_name(levels[li]), bad[li], runs);
        printf(
            "dot %-6s  exact integer sums: avx2 and avx512 bit-identical to scalar (%d calls, 1..8 "
            "rows)\n",
            snug_dtype_info(type)->name, runs);
    }
    snug_free(wq), snug_free(xq);
}

int main(void) {
    int hw = snug_cpu_set_level(SNUG_CPU_AVX512);
    printf("cpu level: %s\n", snug_cpu_level_name(hw));
    CHECK(snug_cpu_set_level(SNUG_CPU_SCALAR) == SNUG_CPU_SCALAR);
    CHECK(snug_cpu_level() == SNUG_CPU_SCALAR);
    snug_cpu_set_level(hw);
#if defined(__x86_64__)
    if (hw == SNUG_CPU_SCALAR) printf("SKIP: no AVX2 on this CPU: only the reference is tested\n");
#endif
    test_quantizers();
    test_dots();
    test_dot2();
    test_dequant();
    test_dequant_lowbit();
    test_fgemm();
    test_tgemm();
    test_i16();
    test_wide();
    test_dots_lowbit();
    return TEST_DONE();
}
