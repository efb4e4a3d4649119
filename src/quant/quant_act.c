/* quant_act.c — int8 activations: the reference (scalar) quantizers and integer dot kernels,
 * and the run-time dispatch that picks the scalar, AVX2 or AVX-512 kernel set once.
 *
 * Activation formats (quant_act.h): A32 (32 int8 + float scale) pairs with Q8_0 weights, A256
 * (256 int8 + float scale + int16 sums per 16, the role of ggml's block_q8_K) with the K-quants
 * and IQ4_XS.
 * The idea — quantize the activation row once per matrix product and take integer dot
 * products with the weight blocks, folding the weight's scales and mins in per block — is
 * llama.cpp's (ggml-cpu/quants.c ggml_vec_dot_*_q8_*; read, not copied); the layouts and code
 * here are snug's. Rounding is round-to-nearest-even of x · (127 / amax), so every level
 * produces the same bytes. Invariant: nothing allocates; the table is written once.
 * Read next: quant_simd.inc (the vector versions of these kernels). */
#include "core/core.h"
#include "quant.h"
#include "quant_act.h"
#include "quant_grids.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

float snug_act_f16(const uint8_t *p) {
    return snug_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* 6-bit scale and min of K-quant sub-block j (layout in quant_ref.c, kscale). */
void snug_act_kscale(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* ---- reference quantizers ----------------------------------------------------------------- */

/* One group of m floats -> int8 with scale amax/127 (zero group: scale 0, all q 0). */
static float quant_group(const float *x, int8_t *q, int m) {
    float amax = 0;
    for (int i = 0; i < m; i++) amax = fmaxf(amax, fabsf(x[i]));
    float id = amax > 0 ? 127.0f / amax : 0.0f;
    for (int i = 0; i < m; i++) q[i] = (int8_t)nearbyintf(x[i] * id);
    return amax / 127.0f;
}

/* Sums of each 16 int8 values of an A256 block (its bsums). */
static void a256_sums(uint8_t *o) {
    const int8_t *q = (const int8_t *)o;
    for (int k = 0; k < 16; k++) {
        int16_t s = 0;
        for (int i = 0; i < 16; i++) s = (int16_t)(s + q[16 * k + i]);
        memcpy(o + 260 + 2 * k, &s, 2);
    }
}

static void quant_a32_ref(const float *x, void *xq, int64_t n) {
    uint8_t *o = xq;
    int64_t nb = n / 32;
    for (int64_t b = 0; b < nb; b++, x += 32) {
        float d = quant_group(x, (int8_t *)(o + snug_a32_q(nb, b)), 32);
        memcpy(o + snug_a32_d(nb, b), &d, 4);
    }
}

static void quant_a256_ref(const float *x, void *xq, int64_t n) {
    uint8_t *o = xq;
    for (int64_t b = 0; b < n / 256; b++, o += SNUG_A256_BYTES, x += 256) {
        float d = quant_group(x, (int8_t *)o, 256);
        memcpy(o + 256, &d, 4);
        a256_sums(o);
    }
}

/* ---- 14-bit activations as two int8 planes (snug_act_quantize_wide) ---------------------- */

/* Largest magnitude of the 14-bit value q = round(x / dx), dx = amax / WIDE_MAX. */
#define WIDE_MAX 8191

/* One group of m floats: q = round(x · WIDE_MAX / amax) (NaN reads as 0), split exactly into
 * q = 128·h + l with h = floor(q / 128) in [-64, 63] and l in [0, 127]; the h plane's scale is
 * 128·dx, the l plane's dx, so h·(128·dx) + l·dx = q·dx. */
static void wide_group(const float *x, int m, int8_t *h, int8_t *l, float *dh, float *dl) {
    float amax = 0;
    for (int i = 0; i < m; i++) amax = fmaxf(amax, fabsf(x[i]));
    float id = amax > 0 ? (float)WIDE_MAX / amax : 0.0f, d = amax / (float)WIDE_MAX;
    for (int i = 0; i < m; i++) {
        float v = x[i] * id;
        if (!(v >= -(float)WIDE_MAX && v <= (float)WIDE_MAX))
            v = v > 0 ? (float)WIDE_MAX : v < 0 ? -(float)WIDE_MAX : 0.0f;
        int q = (int)nearbyintf(v), hh = (q + 8192) / 128 - 64;
        h[i] = (int8_t)hh;
        l[i] = (int8_t)(q - 128 * hh);
    }
    *dh = 128.0f * d;
    *dl = d;
}

static void quant_wide(uint32_t wtype, const float *x, void *xq, size_t xs, int64_t n) {
    uint8_t *oh = xq, *ol = (uint8_t *)xq + xs;
    float dh, dl;
    if (snug_act_type(wtype) == SNUG_DTYPE_Q8_0) {
        int64_t nb = n / 32;
        for (int64_t b = 0; b < nb; b++, x += 32) {
            size_t qo = snug_a32_q(nb, b), dO = snug_a32_d(nb, b);
            wide_group(x, 32, (int8_t *)(oh + qo), (int8_t *)(ol + qo), &dh, &dl);
            memcpy(oh + dO, &dh, 4);
            memcpy(ol + dO, &dl, 4);
        }
        return;
    }
    for (int64_t b = 0; b < n / 256; b++, oh += SNUG_A256_BYTES, ol += SNUG_A256_BYTES, x += 256) {
        wide_group(x, 256, (int8_t *)oh, (int8_t *)ol, &dh, &dl);
        memcpy(oh + 256, &dh, 4);
        memcpy(ol + 256, &dl, 4);
        a256_sums(oh);
        a256_sums(ol);
    }
}

/* ---- reference dot kernels ---------------------------------------------------------------- */

static float rd_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}
static int rd_i16(const uint8_t *p) {
    int16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* Q8_0 · A32: per block (d_w · d_x) · Σ q_w q_x. */
static float dot1_q8_0(const uint8_t *w, const uint8_t *x, int64_t n) {
    float s = 0;
    int64_t nb = n / 32;
    for (int64_t b = 0; b < nb; b++, w += 34) {
        const int8_t *qw = (const int8_t *)(w + 2), *qx = (const int8_t *)(x + snug_a32_q(nb, b));
        int32_t is = 0;
        for (int i = 0; i < 32; i++) is += qw[i] * qx[i];
        s += snug_act_f16(w) * rd_f32(x + snug_a32_d(nb, b)) * (float)is;
    }
    return s;
}

/* Q4_K / Q5_K · A256: per super-block d·d_x·Σ_j sc_j Σ q·x − dmin·d_x·Σ_j m_j Σ x (integer
 * sums exact). `qh` NULL selects Q4_K (layout in quant_ref.c, deq_q4_k / deq_q5_k). */
static float dot1_q45_k(const uint8_t *w, const uint8_t *x, int64_t n, int five) {
    float s = 0;
    size_t bb = five ? 176 : 144;
    for (int64_t b = 0; b < n / 256; b++, w += bb, x += SNUG_A256_BYTES) {
        const uint8_t *sc = w + 4, *qh = w + 16, *qs = w + (five ? 48 : 16);
        const int8_t *qx = (const int8_t *)x;
        int32_t sumi = 0, summ = 0;
        for (int c = 0; c < 4; c++) {
            int s0, m0, s1, m1;
            snug_act_kscale(sc, 2 * c, &s0, &m0);
            snug_act_kscale(sc, 2 * c + 1, &s1, &m1);
            int32_t a0 = 0, a1 = 0;
            for (int l = 0; l < 32; l++) {
                int q0 = qs[32 * c + l] & 0xf, q1 = qs[32 * c + l] >> 4;
                if (five) {
                    q0 |= ((qh[l] >> (2 * c)) & 1) << 4;
                    q1 |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
                }
                a0 += q0 * qx[64 * c + l];
                a1 += q1 * qx[64 * c + 32 + l];
            }
            sumi += s0 * a0 + s1 * a1;
            summ += m0 * (rd_i16(x + 260 + 2 * (4 * c)) + rd_i16(x + 260 + 2 * (4 * c + 1))) +
                    m1 * (rd_i16(x + 260 + 2 * (4 * c + 2)) + rd_i16(x + 260 + 2 * (4 * c + 3)));
        }
        float dx = rd_f32(x + 256);
        s += snug_act_f16(w) * dx * (float)sumi - snug_act_f16(w + 2) * dx * (float)summ;
    }
    return s;
}

/* Q6_K · A256: per super-block d·d_x·Σ_k sc_k (Σ q·x − 32·Σ x) over the 16 sub-blocks. */
static float dot1_q6_k(const uint8_t *w, const uint8_t *x, int64_t n) {
    float s = 0;
    for (int64_t b = 0; b < n / 256; b++, w += 210, x += SNUG_A256_BYTES) {
        const int8_t *qx = (const int8_t *)x;
        int32_t q[256];
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w + 64 * h, *qh = w + 128 + 32 * h;
            for (int l = 0; l < 32; l++) {
                q[128 * h + l] = (ql[l] & 0xf) | ((qh[l] & 3) << 4);
                q[128 * h + l + 32] = (ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4);
                q[128 * h + l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                q[128 * h + l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
            }
        }
        const int8_t *sc = (const int8_t *)(w + 192);
        int32_t sumi = 0;
        for (int k = 0; k < 16; k++) {
            int32_t a = 0;
            for (int i = 0; i < 16; i++) a += q[16 * k + i] * qx[16 * k + i];
            sumi += sc[k] * (a - 32 * rd_i16(x + 260 + 2 * k));
        }
        s += snug_act_f16(w + 208) * rd_f32(x + 256) * (float)sumi;
    }
    return s;
}

/* IQ4_XS · A256: per super-block d·d_x·Σ_j (ls_j − 32)·Σ level·x over the eight 32-element
 * sub-blocks (layout in quant_lowbit.c deq_iq4_xs; |Σ| ≤ 8·32·32·127·127 < 2³¹). */
static float dot1_iq4_xs(const uint8_t *w, const uint8_t *x, int64_t n) {
    float s = 0;
    for (int64_t b = 0; b < n / 256; b++, w += 136, x += SNUG_A256_BYTES) {
        const int8_t *qx = (const int8_t *)x;
        unsigned sh = (unsigned)(w[2] | w[3] << 8);
        int32_t sumi = 0;
        for (int j = 0; j < 8; j++) {
            int ls = ((w[4 + j / 2] >> (4 * (j % 2))) & 0xf) | (int)((sh >> (2 * j)) & 3) << 4;
            const uint8_t *qs = w + 8 + 16 * j;
            int32_t a = 0;
            for (int l = 0; l < 16; l++)
                a += snug_iq4nl_values[qs[l] & 0xf] * qx[32 * j + l] +
                     snug_iq4nl_values[qs[l] >> 4] * qx[32 * j + 16 + l];
            sumi += (ls - 32) * a;
        }
        s += snug_act_f16(w) * rd_f32(x + 256) * (float)sumi;
    }
    return s;
}

/* Q3_K · A256: per super-block d·d_x·Σ_k sc_k·Σ q·x over the sixteen 16-element sub-blocks,
 * q = (2 low bits) − 4 where the hmask bit is clear (layout in quant_lowbit.c deq_q3_k;
 * |Σ| ≤ 256·32·4·127 < 2³¹). */
static float dot1_q3_k(const uint8_t *w, const uint8_t *x, int64_t n) {
    float s = 0;
    for (int64_t b = 0; b < n / 256; b++, w += 110, x += SNUG_A256_BYTES) {
        const int8_t *qx = (const int8_t *)x;
        int32_t sumi = 0;
        for (int h = 0; h < 2; h++)
            for (int g = 0; g < 4; g++)
                for (int k = 0; k < 2; k++) {
                    int j = 8 * h + 2 * g + k, m = 4 * h + g;
                    int lo = j < 8 ? w[96 + j] & 0xf : w[96 + j - 8] >> 4;
                    int sc = (lo | ((w[104 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
                    int32_t a = 0;
                    for (int l = 0; l < 16; l++) {
                        int i = 16 * k + l;
                        int q = ((w[32 + 32 * h + i] >> (2 * g)) & 3) - (((w[i] >> m) & 1) ? 0 : 4);
                        a += q * qx[128 * h + 32 * g + i];
                    }
                    sumi += sc * a;
                }
        s += snug_act_f16(w + 108) * rd_f32(x + 256) * (float)sumi;
    }
    return s;
}

static void dot_q8_0_ref(const void *w, const void *xq, size_t xs, int nc, int64_t n, float *o) {
    for (int c = 0; c < nc; c++) o[c] = dot1_q8_0(w, (const uint8_t *)xq + c * xs, n);
}
static void dot_q4_k_ref(const void *w, const void *xq, size_t xs, int nc, int64_t n, float *o) {
    for (int c = 0; c < nc; c++) o[c] = dot1_q45_k(w, (const uint8_t *)xq + c * xs, n, 0);
}
static void dot_q5_k_ref(const void *w, const void *xq, size_t xs, int nc, int64_t n, float *o) {
    for (int c = 0; c < nc; c++) o[c] = dot1_q45_k(w, (const uint8_t *)xq + c * xs, n, 1);
}
static void dot_q6_k_ref(const void *w, const void *xq, size_t xs, int nc, int64_t n, float *o) {
    for (int c = 0; c < nc; c++) o[c] = dot1_q6_k(w, (const uint8_t *)xq + c * xs, n);
}
static void dot_iq4_xs_ref(const void *w, const void *xq, size_t xs, int nc, int64_t n, float *o) {
    for (int c = 0; c < nc; c++) o[c] = dot1_iq4_xs(w, (const uint8_t *)xq + c * xs, n);
}
static void dot_q3_k_ref(const void *w, const void *xq, size_t xs, int nc, int64_t n, float *o) {
    for (int c = 0; c < nc; c++) o[c] = dot1_q3_k(w, (const uint8_t *)xq + c * xs, n);
}
static void dot_f32_ref(const void *w, const float *x, size_t xs, int nc, int64_t n, float *o) {
    for (int c = 0; c < nc; c++)
        o[c] = snug_dot_row_ref(SNUG_DTYPE_F32, w, (const float *)((const uint8_t *)x + c * xs), n);
}
static void dot_f16_ref(const void *w, const float *x, size_t xs, int nc, int64_t n, float *o) {
    for (int c = 0; c < nc; c++)
        o[c] = snug_dot_row_ref(SNUG_DTYPE_F16, w, (const float *)((const uint8_t *)x + c * xs), n);
}
static void dot_bf16_ref(const void *w, const float *x, size_t xs, int nc, int64_t n, float *o) {
    for (int c = 0; c < nc; c++)
        o[c] =
            snug_dot_row_ref(SNUG_DTYPE_BF16, w, (const float *)((const uint8_t *)x + c * xs), n);
}

/* Float block product, reference: one sequential sum per output element. */
static void fgemm_ref(const float *w, size_t ws, int nr, const float *x, size_t xs, int nt,
                      int64_t n, float *y, size_t ys) {
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) {
            float s = 0;
            for (int64_t k = 0; k < n; k++) s += w[(size_t)r * ws + k] * x[(size_t)t * xs + k];
            y[(size_t)t * ys + r] = s;
        }
}

/* Transposed float block product, reference: one chain of fmaf per output element, k in order
 * (the vector kernels perform exactly these roundings, lane by lane). */
static void tgemm_ref(const float *w, size_t ws, int nr, const float *xt, size_t xts, int nt,
                      int64_t n, float *y, size_t ys) {
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) {
            float s = 0;
            for (int64_t k = 0; k < n; k++)
                s = fmaf(w[(size_t)r * ws + k], xt[(size_t)k * xts + t], s);
            y[(size_t)t * ys + r] = s;
        }
}

void snug_qkernels_ref(struct snug_qkernels *k) {
    *k = (struct snug_qkernels){
        .quant_a32 = quant_a32_ref,
        .quant_a256 = quant_a256_ref,
        .dot_q8_0 = dot_q8_0_ref,
        .dot_q4_k = dot_q4_k_ref,
        .dot_q5_k = dot_q5_k_ref,
        .dot_q6_k = dot_q6_k_ref,
        .dot_iq4_xs = dot_iq4_xs_ref,
        .dot_q3_k = dot_q3_k_ref,
        .dot_f32 = dot_f32_ref,
        .dot_f16 = dot_f16_ref,
        .dot_bf16 = dot_bf16_ref,
        .fgemm = fgemm_ref,
        .tgemm = tgemm_ref,
        .i16gemm = snug_i16_gemm_ref,
    };
}

/* ---- dispatch ----------------------------------------------------------------------------- */

static struct snug_qkernels g_ref, g_cur;
static int g_hw = -1;      /* best level the CPU (and this build) supports */
static atomic_int g_level; /* level in effect */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static int detect_hw(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    struct snug_qkernels tmp;
    /* F16C from cpuid leaf 1, ECX bit 29 (Intel SDM vol. 2A, CPUID): clang 14's
     * __builtin_cpu_supports does not know "f16c". */
    unsigned a = 0, b = 0, c = 0, d = 0;
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    if (avx512 && snug_qkernels_avx512(&tmp)) return SNUG_CPU_AVX512;
    if (avx2 && snug_qkernels_avx2(&tmp)) return SNUG_CPU_AVX2;
#endif
    return SNUG_CPU_SCALAR;
}

static void install(int level) {
    struct snug_qkernels k = g_ref;
    if (level >= SNUG_CPU_AVX512 && snug_qkernels_avx512(&k)) {
        level = SNUG_CPU_AVX512;
    } else if (level >= SNUG_CPU_AVX2 && snug_qkernels_avx2(&k)) {
        level = SNUG_CPU_AVX2;
    } else {
        k = g_ref;
        level = SNUG_CPU_SCALAR;
    }
    g_cur = k;
    atomic_store(&g_level, level);
}

static void init_once(void) {
    snug_qkernels_ref(&g_ref);
    g_hw = detect_hw();
    int level = g_hw;
    const char *env = getenv("SNUG_CPU");
    if (env && *env) {
        if (!strcasecmp(env, "scalar"))
            level = SNUG_CPU_SCALAR;
        else if (!strcasecmp(env, "avx2"))
            level = SNUG_MIN(level, SNUG_CPU_AVX2);
        else if (!strcasecmp(env, "avx512"))
            level = SNUG_MIN(level, SNUG_CPU_AVX512);
    }
    install(level);
}

int snug_cpu_level(void) {
    pthread_once(&g_once, init_once);
    return atomic_load(&g_level);
}

int snug_cpu_set_level(int level) {
    pthread_once(&g_once, init_once);
    install(SNUG_MIN(SNUG_MAX(level, SNUG_CPU_SCALAR), g_hw));
    return atomic_load(&g_level);
}

const char *snug_cpu_level_name(int level) {
    switch (level) {
    case SNUG_CPU_SCALAR:
        return "scalar";
    case SNUG_CPU_AVX2:
        return "avx2";
    case SNUG_CPU_AVX512:
        return "avx512";
    default:
        return "?";
    }
}

static const struct snug_qkernels *kern(void) {
    pthread_once(&g_once, init_once);
    return &g_cur;
}

/* ---- public entry points ------------------------------------------------------------------ */

float (*snug_act_fdot_q8_0(void))(const void *w, const float *x, int64_t n) {
    return kern()->fdot_q8_0;
}
float (*snug_act_fdot_q6_k(void))(const void *w, const float *x, int64_t n) {
    return kern()->fdot_q6_k;
}

snug_deq_fn snug_act_deq_fn(uint32_t type) {
    const struct snug_qkernels *k = kern();
    switch (type) {
    case SNUG_DTYPE_Q8_0:
        return k->deq_q8_0;
    case SNUG_DTYPE_Q4_K:
        return k->deq_q4_k;
    case SNUG_DTYPE_Q5_K:
        return k->deq_q5_k;
    case SNUG_DTYPE_Q6_K:
        return k->deq_q6_k;
    case SNUG_DTYPE_Q2_K:
        return k->deq_q2_k;
    case SNUG_DTYPE_Q3_K:
        return k->deq_q3_k;
    case SNUG_DTYPE_IQ4_NL:
        return k->deq_iq4_nl;
    case SNUG_DTYPE_IQ4_XS:
        return k->deq_iq4_xs;
    default:
        return NULL;
    }
}

/* Which weight types matrix products run on int8 activations. Default: Q4_K and Q5_K — the
 * types where snug's int8 path is at least as accurate as llama.cpp's own forward (which also
 * runs on int8 activations) on the same file. Measured on the trained fixture, median KL to the
 * reference over ids.json (tests/py/test_quantized.py; llama.cpp 0c1e570 on the same
 * llama-quantize'd files, docs/perf/cpu.md "Accuracy policy"): Q5_K_M 6.24e-3 vs llama.cpp
 * 6.47e-3, Q4_K_M 2.02e-2 vs 2.02e-2; but Q8_0 4.01e-4 vs 3.84e-4 and Q6_K 2.30e-3 vs
 * 2.11e-3, so Q8_0 and Q6_K keep float activations (dequantized weight rows, FMA).
 * IQ4_XS and Q3_K (files made by llama-quantize with an imatrix) also go int8, prompts (the
 * snug_i8_* tile) and decode (the A256 dots) alike: the KL stays below llama.cpp's on the same
 * files — IQ4_XS prompt 2.203e-2 / decode 2.167e-2 vs llama.cpp 2.215e-2, Q3_K_M 5.245e-2 /
 * 5.037e-2 vs 5.388e-2 (docs/perf/cpu.md "IQ4_XS and Q3_K decode on int8 activations").
 * Q5_K prompts run on the int8 tile too (its decode already did): Q5_K_M prompt 5.911e-3 vs
 * llama.cpp 6.471e-3 (docs/perf/cpu.md "IQ4_XS prompts: the Q5_K rows").
 * SNUG_ACT8=all turns int8 on for every type with an int8 kernel (faster prompts, slightly
 * less accurate); SNUG_ACT8=none turns it off. */
static int g_act8 = -1; /* 0 none, 1 Q4_K + Q5_K + IQ4_XS + Q3_K, 2 all */
static pthread_once_t g_act8_once = PTHREAD_ONCE_INIT;
static void act8_init(void) {
    const char *e = getenv("SNUG_ACT8");
    g_act8 = 1;
    if (e && !strcasecmp(e, "all")) g_act8 = 2;
    if (e && !strcasecmp(e, "none")) g_act8 = 0;
}

bool snug_act_int8_use(uint32_t wtype) {
    pthread_once(&g_act8_once, act8_init);
    if (snug_act_type(wtype) == SNUG_DTYPE_F32) return false;
    return g_act8 == 2 || (g_act8 == 1 && (wtype == SNUG_DTYPE_Q4_K || wtype == SNUG_DTYPE_Q5_K ||
                                           wtype == SNUG_DTYPE_IQ4_XS || wtype == SNUG_DTYPE_Q3_K));
}

/* Which weight types decode (a few activation rows) on 14-bit activations split into two int8
 * planes (snug_act_quantize_wide): Q6_K by default — the int8 kernel run on both planes beats
 * the fused float dot (quiet machine, weights from DRAM, 6144 x 2048: one thread 1.69 -> 1.21
 * ms, two 0.86 -> 0.62 ms) at float-like accuracy (the planes carry q = round(x / dx)
 * exactly, |q| ≤ 8191, as the int16 prompt path). SNUG_ACT_WIDE=all adds Q8_0, which is
 * slower that way (2048 x 6144, two threads: 0.71 ms on float activations, 1.00 ms on the
 * planes: the one-row float Q8_0 dot streams better), SNUG_ACT_WIDE=none turns it off. */
static int g_wide = -1; /* 0 none, 1 Q6_K, 2 Q6_K + Q8_0 */
static pthread_once_t g_wide_once = PTHREAD_ONCE_INIT;
static void wide_init(void) {
    const char *e = getenv("SNUG_ACT_WIDE");
    g_wide = 1;
    if (e && !strcasecmp(e, "all")) g_wide = 2;
    if (e && !strcasecmp(e, "none")) g_wide = 0;
}

bool snug_act_wide_use(uint32_t wtype) {
    pthread_once(&g_wide_once, wide_init);
    if (snug_act_int8_use(wtype)) return false;
    return (g_wide >= 1 && wtype == SNUG_DTYPE_Q6_K) || (g_wide == 2 && wtype == SNUG_DTYPE_Q8_0);
}

void snug_act_quantize_wide(uint32_t wtype, const float *x, void *xq, size_t xs, int64_t n) {
    SNUG_ASSERT(snug_act_type(wtype) == SNUG_DTYPE_Q8_0   ? n % 32 == 0
                : snug_act_type(wtype) == SNUG_DTYPE_Q8_K ? n % 256 == 0
                                                          : 0);
    quant_wide(wtype, x, xq, xs, n);
}

uint32_t snug_act_type(uint32_t wtype) {
    switch (wtype) {
    case SNUG_DTYPE_Q8_0:
        return SNUG_DTYPE_Q8_0;
    case SNUG_DTYPE_Q4_K:
    case SNUG_DTYPE_Q5_K:
    case SNUG_DTYPE_Q6_K:
    case SNUG_DTYPE_IQ4_XS:
    case SNUG_DTYPE_Q3_K:
        return SNUG_DTYPE_Q8_K;
    default:
        return SNUG_DTYPE_F32;
    }
}

size_t snug_act_row_bytes(uint32_t wtype, int64_t n) {
    switch (snug_act_type(wtype)) {
    case SNUG_DTYPE_Q8_0:
        return (size_t)(n / 32) * SNUG_A32_BYTES;
    case SNUG_DTYPE_Q8_K:
        return (size_t)(n / 256) * SNUG_A256_BYTES;
    default:
        return (size_t)n * sizeof(float);
    }
}

static void act_quantize(const struct snug_qkernels *k, uint32_t wtype, const float *x, void *xq,
                         int64_t n) {
    switch (snug_act_type(wtype)) {
    case SNUG_DTYPE_Q8_0:
        SNUG_ASSERT(n % 32 == 0);
        k->quant_a32(x, xq, n);
        return;
    case SNUG_DTYPE_Q8_K:
        SNUG_ASSERT(n % 256 == 0);
        k->quant_a256(x, xq, n);
        return;
    default:
        if (xq != x) memcpy(xq, x, (size_t)n * sizeof(float));
        return;
    }
}

static void act_dot(const struct snug_qkernels *k, uint32_t wtype, const void *w, const void *xq,
                    size_t xs, int nc, int64_t n, float *out) {
    SNUG_ASSERT(nc >= 1 && nc <= SNUG_ACT_MAX_ROWS);
    switch (wtype) {
    case SNUG_DTYPE_Q8_0:
        k->dot_q8_0(w, xq, xs, nc, n, out);
        return;
    case SNUG_DTYPE_Q4_K:
        k->dot_q4_k(w, xq, xs, nc, n, out);
        return;
    case SNUG_DTYPE_Q5_K:
        k->dot_q5_k(w, xq, xs, nc, n, out);
        return;
    case SNUG_DTYPE_Q6_K:
        k->dot_q6_k(w, xq, xs, nc, n, out);
        return;
    case SNUG_DTYPE_IQ4_XS:
        k->dot_iq4_xs(w, xq, xs, nc, n, out);
        return;
    case SNUG_DTYPE_Q3_K:
        k->dot_q3_k(w, xq, xs, nc, n, out);
        return;
    case SNUG_DTYPE_F32:
        k->dot_f32(w, xq, xs, nc, n, out);
        return;
    case SNUG_DTYPE_F16:
        k->dot_f16(w, xq, xs, nc, n, out);
        return;
    case SNUG_DTYPE_BF16:
        k->dot_bf16(w, xq, xs, nc, n, out);
        return;
    default:
        /* the remaining block types: dequantize-and-dot on float activations */
        for (int c = 0; c < nc; c++)
            out[c] = snug_dot_row(wtype, w, (const float *)((const uint8_t *)xq + c * xs), n);
        return;
    }
}

void snug_act_quantize(uint32_t wtype, const float *x, void *xq, int64_t n) {
    act_quantize(kern(), wtype, x, xq, n);
}
void snug_act_dot(uint32_t wtype, const void *w, const void *xq, size_t xs, int nc, int64_t n,
                  float *out) {
    act_dot(kern(), wtype, w, xq, xs, nc, n, out);
}
void snug_act_dot2(uint32_t wtype, const void *w0, const void *w1, const void *xq, int64_t n,
                   float out[2]) {
    const struct snug_qkernels *k = kern();
    if (wtype == SNUG_DTYPE_Q4_K && k->dot2_q4_k && n % 256 == 0) {
        k->dot2_q4_k(w0, w1, xq, n, out);
        return;
    }
    act_dot(k, wtype, w0, xq, 0, 1, n, out);
    act_dot(k, wtype, w1, xq, 0, 1, n, out + 1);
}
void snug_fgemm(const float *w, size_t ws, int nr, const float *x, size_t xs, int nt, int64_t n,
                float *y, size_t ys) {
    SNUG_ASSERT(nr >= 1 && nr <= SNUG_FGEMM_NR && nt >= 1 && nt <= SNUG_FGEMM_NT);
    kern()->fgemm(w, ws, nr, x, xs, nt, n, y, ys);
}
void snug_fgemm_ref(const float *w, size_t ws, int nr, const float *x, size_t xs, int nt, int64_t n,
                    float *y, size_t ys) {
    pthread_once(&g_once, init_once);
    g_ref.fgemm(w, ws, nr, x, xs, nt, n, y, ys);
}
void snug_tgemm(const float *w, size_t ws, int nr, const float *xt, size_t xts, int nt, int64_t n,
                float *y, size_t ys) {
    SNUG_ASSERT(nr >= 1 && nr <= SNUG_TGEMM_MR && nt >= 1);
    kern()->tgemm(w, ws, nr, xt, xts, nt, n, y, ys);
}
void snug_tgemm_ref(const float *w, size_t ws, int nr, const float *xt, size_t xts, int nt,
                    int64_t n, float *y, size_t ys) {
    pthread_once(&g_once, init_once);
    g_ref.tgemm(w, ws, nr, xt, xts, nt, n, y, ys);
}
bool snug_i16_supports(uint32_t wtype) {
    const struct snug_qkernels *k = kern();
    return atomic_load(&g_level) >= SNUG_CPU_AVX512 && k->i16gemm != NULL &&
           (wtype == SNUG_DTYPE_Q4_K || wtype == SNUG_DTYPE_Q6_K);
}
void snug_i16_prep(uint32_t wtype, const void *src, void *dst, int64_t n) {
    const struct snug_qkernels *k = kern();
    if (wtype == SNUG_DTYPE_Q6_K) {
        if (k->i16prep_q6k)
            k->i16prep_q6k(src, dst, n);
        else
            snug_i16_prep_q6k_ref(src, dst, n);
        return;
    }
    if (k->i16prep_q4k)
        k->i16prep_q4k(src, dst, n);
    else
        snug_i16_prep_q4k_ref(src, dst, n);
}
void snug_i16_quant_x(const float *x, int64_t n, int t, int ttpad, void *xt) {
    const struct snug_qkernels *k = kern();
    if (k->i16quant_x)
        k->i16quant_x(x, n, t, ttpad, xt);
    else
        snug_i16_quant_x_ref(x, n, t, ttpad, xt);
}
void snug_i16_gemm(uint32_t wtype, const void *wp, size_t wps, int nr, const void *xt, int ttpad,
                   int nt, int64_t n, float *y, size_t ys) {
    SNUG_ASSERT(nr >= 1 && nr <= SNUG_TGEMM_MR && nt >= 1 && n % 256 == 0);
    kern()->i16gemm(wtype, wp, wps, nr, xt, ttpad, nt, n, y, ys);
}
bool snug_i8_supports(uint32_t wtype) {
    const struct snug_qkernels *k = kern();
    return atomic_load(&g_level) >= SNUG_CPU_AVX512 && k->i8gemm != NULL &&
           (wtype == SNUG_DTYPE_Q4_K || wtype == SNUG_DTYPE_Q5_K || wtype == SNUG_DTYPE_IQ4_XS ||
            wtype == SNUG_DTYPE_Q3_K);
}
void snug_i8_prep(uint32_t wtype, const void *src, void *dst, int64_t n) {
    const struct snug_qkernels *k = kern();
    if (k->i8prep)
        k->i8prep(wtype, src, dst, n);
    else
        snug_i8_prep_ref(wtype, src, dst, n);
}
void snug_i8_quant_x(const float *x, int64_t n, int t, int ttpad, void *xt) {
    const struct snug_qkernels *k = kern();
    if (k->i8quant_x)
        k->i8quant_x(x, n, t, ttpad, xt);
    else
        snug_i8_quant_x_ref(x, n, t, ttpad, xt);
}
void snug_i8_gemm(uint32_t wtype, const void *wp, size_t wps, int nr, const void *xt, int ttpad,
                  int nt, int64_t n, float *y, size_t ys) {
    SNUG_ASSERT(nr >= 1 && nr <= SNUG_TGEMM_MR && nt >= 1 && n % 256 == 0);
    kern()->i8gemm(wtype, wp, wps, nr, xt, ttpad, nt, n, y, ys);
}
void snug_act_quantize_ref(uint32_t wtype, const float *x, void *xq, int64_t n) {
    pthread_once(&g_once, init_once);
    act_quantize(&g_ref, wtype, x, xq, n);
}
void snug_act_dot_ref(uint32_t wtype, const void *w, const void *xq, size_t xs, int nc, int64_t n,
                      float *out) {
    pthread_once(&g_once, init_once);
    act_dot(&g_ref, wtype, w, xq, xs, nc, n, out);
}
