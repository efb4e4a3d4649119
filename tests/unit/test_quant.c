/* test_quant.c — fp16/bf16 conversion, and quantize -> dequantize / dot for every computable
 * type of src/quant (quant.h).
 *
 * What is checked, and against what:
 *  - f16: all 65536 halves round-trip f16->f32->f16 (NaNs stay NaN); f32->f16 rounding agrees
 *    with an independent rounding done in double arithmetic (and with the compiler's _Float16
 *    when it has one) on special values, halfway cases and random floats.
 *  - bf16: round-to-nearest-even on constructed halfway cases, NaN/inf kept.
 *  - per type: relative RMSE of quantize->dequantize on Gaussian rows under a bound derived
 *    from the level spacing (see rmse_bound), adversarial rows (zeros, constants, outliers,
 *    tiny values) decode to finite values with bounded error, and dot == Σ dequant·x.
 * Read next: src/quant/quant_ref.c, tests/py/test_quant_gguf.py (byte-exact cross-check). */
#include "core/core.h"
#include "quant/quant.h"
#include "test.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- deterministic random numbers (xorshift64* + Box-Muller) ------------------------------ */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_u64(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}
static double rng_unif(void) {
    return (double)(rng_u64() >> 11) * 0x1p-53;
}
static float rng_gauss(void) {
    double u = rng_unif() + 1e-300, v = rng_unif();
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Independent f32 -> f16 reference: find the nearest representable half by arithmetic in
 * double over the decoded value grid (ties to the even mantissa). Slow but obviously right. */
static uint16_t f16_ref(float f) {
    if (isnan(f)) return 0x7e00;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a >= 65520.0) return sign | 0x7c00;
    /* spacing of halves near a: exponent e (>= -14), ulp 2^(e-10) */
    int e = a < 0x1p-14 ? -14 : (int)floor(log2(a));
    if (e > -14 && ldexp(1.0, e) > a) e--; /* guard log2 rounding */
    if (e > -14 && ldexp(1.0, e + 1) <= a) e++;
    double ulp = ldexp(1.0, e - 10);
    double q = floor(a / ulp), r = a - q * ulp;
    if (r > ulp / 2 || (r == ulp / 2 && fmod(q, 2.0) == 1.0)) q += 1;
    double v = q * ulp;
    /* encode v (exact on the grid) */
    if (v < 0x1p-14) return sign | (uint16_t)(v / 0x1p-24);
    int ve = (int)floor(log2(v));
    uint16_t m = (uint16_t)((v / ldexp(1.0, ve) - 1.0) * 1024.0);
    return sign | (uint16_t)((ve + 15) << 10) | m;
}

static void test_f16(void) {
    int bad_rt = 0, bad_nan = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = snug_f16_to_f32((uint16_t)h);
        bool is_nan = ((h >> 10) & 0x1f) == 31 && (h & 0x3ff);
        if (is_nan) {
            bad_nan += !isnan(f) || !isnan(snug_f16_to_f32(snug_f32_to_f16(f)));
        } else {
            bad_rt += snug_f32_to_f16(f) != h;
        }
    }
    CHECKF(bad_rt == 0, "%d halves do not round-trip", bad_rt);
    CHECKF(bad_nan == 0, "%d NaN halves lost", bad_nan);
    /* known values */
    CHECK(snug_f16_to_f32(0x3c00) == 1.0f);
    CHECK(snug_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(snug_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(snug_f16_to_f32(0xfc00) == -INFINITY);
    CHECK(snug_f32_to_f16(65519.996f) == 0x7bff);
    CHECK(snug_f32_to_f16(65520.0f) == 0x7c00);
    CHECK(snug_f32_to_f16(0x1p-25f) == 0x0000);        /* tie to even -> 0 */
    CHECK(snug_f32_to_f16(0x1.000002p-25f) == 0x0001); /* just above the tie */
    CHECK(snug_f32_to_f16(0x3p-25f) == 0x0002);        /* 1.5 ulp ties to even 2 */
    CHECK(snug_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00); /* tie, even stays */
    CHECK(snug_f32_to_f16(1.0f + 0x3p-11f) == 0x3c02); /* tie, odd rounds up */
    CHECK(snug_f32_to_f16(-0.0f) == 0x8000);
    CHECK(snug_f32_to_f16(1e-30f) == 0 && snug_f32_to_f16(-1e-30f) == 0x8000);
    CHECK(snug_f32_to_f16(INFINITY) == 0x7c00);
    CHECK(((snug_f32_to_f16(NAN) >> 10) & 0x1f) == 31 && (snug_f32_to_f16(NAN) & 0x3ff));
    /* random floats of every magnitude and all midpoints between neighbouring halves */
    int bad = 0, bad_cc = 0;
    for (int i = 0; i < 200000; i++) {
        float f = bitsf((uint32_t)rng_u64());
        if (isnan(f)) continue;
        uint16_t a = snug_f32_to_f16(f);
        bad += a != f16_ref(f);
#ifdef __FLT16_MAX__
        _Float16 c = (_Float16)f;
        uint16_t cb;
        memcpy(&cb, &c, 2);
        bad_cc += a != cb;
#endif
    }
    for (uint32_t h = 0; h < 0x7bff; h++) {
        double mid =
            ((double)snug_f16_to_f32((uint16_t)h) + snug_f16_to_f32((uint16_t)(h + 1))) / 2;
        float f = (float)mid; /* exact: halves have 11 bits */
        uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        bad += snug_f32_to_f16(f) != want;
        bad += snug_f32_to_f16(nextafterf(f, INFINITY)) != h + 1;
        bad += snug_f32_to_f16(nextafterf(f, 0)) != h;
    }
    CHECKF(bad == 0, "%d f32->f16 mismatches vs double reference", bad);
    CHECKF(bad_cc == 0, "%d f32->f16 mismatches vs _Float16", bad_cc);
}

static void test_bf16(void) {
    CHECK(snug_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(snug_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(snug_f32_to_bf16(bitsf(0x3f808000)) == 0x3f80); /* tie, even */
    CHECK(snug_f32_to_bf16(bitsf(0x3f818000)) == 0x3f82); /* tie, odd -> up */
    CHECK(snug_f32_to_bf16(bitsf(0x3f808001)) == 0x3f81);
    CHECK(snug_f32_to_bf16(INFINITY) == 0x7f80);
    CHECK(snug_f32_to_bf16(bitsf(0x7f7fffff)) == 0x7f80);                /* FLT_MAX rounds to inf */
    CHECK(isnan(snug_bf16_to_f32(snug_f32_to_bf16(bitsf(0x7f800001))))); /* payload in low bits */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) continue;
        bad += snug_f32_to_bf16(snug_bf16_to_f32((uint16_t)h)) != h;
    }
    CHECKF(bad == 0, "%d bf16 values do not round-trip", bad);
}

/* ---- per-type round trips ----------------------------------------------------------------- */

static const uint32_t TYPES[] = {
    SNUG_DTYPE_F32,  SNUG_DTYPE_F16,  SNUG_DTYPE_BF16, SNUG_DTYPE_Q8_0,   SNUG_DTYPE_Q4_0,
    SNUG_DTYPE_Q4_1, SNUG_DTYPE_Q5_0, SNUG_DTYPE_Q5_1, SNUG_DTYPE_Q4_K,   SNUG_DTYPE_Q5_K,
    SNUG_DTYPE_Q6_K, SNUG_DTYPE_Q2_K, SNUG_DTYPE_Q3_K, SNUG_DTYPE_IQ4_NL, SNUG_DTYPE_IQ4_XS};

/* Bound on relative RMSE (rmse / rms(x)) for unit Gaussian rows. A uniform quantizer with
 * step Δ has error rms Δ/√12. The largest |x| of a 32-element Gaussian block is ≈ 2.25σ on
 * average (≈ 1.8σ for 16 elements), max - min ≈ 4σ. So: Q8_0 Δ = 2.25/127 → 0.0051;
 * Q4_0 Δ = 2.25/8 → 0.081; Q5_0 Δ = 2.25/16 → 0.041; Q4_1 Δ = 4/15 → 0.077; Q5_1 Δ = 4/31
 * → 0.037; Q6_K (16-element sub-blocks, symmetric) Δ = 1.8/32 → 0.016; Q4_K/Q5_K are affine
 * like Q4_1/Q5_1 and their scale search buys a few percent (0.073 / 0.037 measured; llama.cpp's
 * quantizer gives the same bytes, see test_quant_gguf.py). Bounds are the estimate plus ~20%:
 * a decoder or packing bug (values scrambled → rel. error ~1) cannot pass. F16/BF16: half an
 * ulp relative, 2^-11 / 2^-8, times ~0.6 for the rms over a binade. */
static double rmse_bound(uint32_t type) {
    switch (type) {
    case SNUG_DTYPE_F32:
        return 0;
    case SNUG_DTYPE_F16:
        return 3e-4;
    case SNUG_DTYPE_BF16:
        return 2.5e-3;
    case SNUG_DTYPE_Q8_0:
        return 0.0062;
    case SNUG_DTYPE_Q6_K:
        return 0.020;
    case SNUG_DTYPE_Q5_1:
        return 0.045;
    case SNUG_DTYPE_Q5_0:
        return 0.050;
    case SNUG_DTYPE_Q5_K:
        return 0.045;
    case SNUG_DTYPE_Q4_1:
        return 0.092;
    case SNUG_DTYPE_Q4_0:
        return 0.098;
    case SNUG_DTYPE_Q4_K:
        return 0.085;
    case SNUG_DTYPE_Q3_K: /* 8 levels per 16, symmetric: Δ = 1.8/4 → 0.13; 0.151 measured
                           * (6-bit scales, levels clipped at +3) */
        return 0.18;
    case SNUG_DTYPE_Q2_K: /* 4 levels per 16, affine: Δ = 3.5/3 → 0.34; 0.293 measured */
        return 0.35;
    case SNUG_DTYPE_IQ4_NL: /* 16 non-uniform levels per 32, denser near 0 than Q4_0's uniform
                             * ones: 0.076 measured (Q4_0 0.085) */
    case SNUG_DTYPE_IQ4_XS:
        return 0.092;
    default:
        return 0;
    }
}

/* quantize -> dequantize x[n]; returns relative RMSE (0 when x is all zero and so is y). */
static double roundtrip(uint32_t type, const float *x, float *y, void *q, int64_t n) {
    CHECK(snug_quantize_row(type, x, q, n, NULL));
    snug_dequantize_row(type, q, y, n);
    double se = 0, sx = 0;
    for (int64_t i = 0; i < n; i++) {
        se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        sx += (double)x[i] * x[i];
    }
    return sx > 0 ? sqrt(se / sx) : sqrt(se);
}

#define NMAX 4096
static float X[NMAX], Y[NMAX], V[NMAX];
static double measured[SNUG_DTYPE_COUNT]; /* rel. RMSE on the 4096-element Gaussian row */
static uint8_t Q[NMAX * 4];

static void test_type(uint32_t type) {
    const struct snug_dtype_info *t = snug_dtype_info(type);
    int64_t be = t->block_elems == 1 ? 32 : t->block_elems;
    const char *nm = t->name;

    /* Gaussian rows: one block and many blocks */
    int64_t sizes[] = {be, NMAX};
    for (int s = 0; s < 2; s++) {
        int64_t n = sizes[s];
        for (int64_t i = 0; i < n; i++) X[i] = rng_gauss();
        double r = roundtrip(type, X, Y, Q, n);
        CHECKF(r <= rmse_bound(type), "%s gaussian n=%lld: rel rmse %.5f > %.5f", nm, (long long)n,
               r, rmse_bound(type));
        if (s == 1) {
            fprintf(stderr, "  %-5s rel rmse on N(0,1): %.5f (bound %.4f)\n", nm, r,
                    rmse_bound(type));
            measured[type] = r;
        }
        /* scaling by a power of two commutes with every step (all float operations are exact
         * under it while the f16 scales stay normal): the decoded row scales exactly */
        memcpy(V, Y, sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) X[i] *= 4.f;
        roundtrip(type, X, Y, Q, n);
        int nexact = 0;
        for (int64_t i = 0; i < n; i++) nexact += Y[i] == 4.f * V[i];
        CHECKF(nexact == n, "%s: x*4 decodes to 4*decode(x) for only %d of %lld", nm, nexact,
               (long long)n);
        /* dot == Σ dequant · v */
        for (int64_t i = 0; i < n; i++) V[i] = rng_gauss();
        double want = 0, mag = 0;
        for (int64_t i = 0; i < n; i++)
            want += (double)Y[i] * V[i], mag += fabs((double)Y[i] * V[i]);
        float got = snug_dot_row(type, Q, V, n);
        float got_ref = snug_dot_row_ref(type, Q, V, n);
        CHECKF(fabs(got - want) <= 1e-5 * mag + 1e-30, "%s dot %.8g vs %.8g", nm, got, want);
        /* the dispatched (vector) dot sums in another order than the reference */
        CHECKF(fabs(got - got_ref) <= 1e-6 * mag + 1e-30, "%s dot %.8g vs reference %.8g", nm, got,
               got_ref);
    }

    int64_t n = 2 * be;
    /* all zeros -> exact zeros */
    memset(X, 0, sizeof(float) * (size_t)n);
    double r = roundtrip(type, X, Y, Q, n);
    CHECKF(r == 0, "%s zeros -> %g", nm, r);
    /* constant rows: positive and negative */
    for (int sgn = -1; sgn <= 1; sgn += 2) {
        for (int64_t i = 0; i < n; i++) X[i] = 0.37f * (float)sgn;
        r = roundtrip(type, X, Y, Q, n);
        CHECKF(r <= 2 * rmse_bound(type) + 2e-3, "%s constant %d: rel err %g", nm, sgn, r);
    }
    /* one huge outlier per block: error relative to the row stays bounded, all finite */
    for (int64_t i = 0; i < n; i++) X[i] = rng_gauss() * 0.01f;
    for (int64_t i = 0; i < n; i += be) X[i + 5] = 1000.f;
    r = roundtrip(type, X, Y, Q, n);
    bool finite = true;
    for (int64_t i = 0; i < n; i++) finite &= isfinite(Y[i]);
    CHECKF(finite && r <= rmse_bound(type) + 1e-3, "%s outliers: %g", nm, r);
    for (int64_t i = 0; i < n; i += be)
        CHECKF(fabsf(Y[i + 5] - 1000.f) <= 1000.f * 0.01f + 0.5f, "%s outlier decoded as %g", nm,
               Y[i + 5]);
    /* tiny values (scales in the f16 subnormal range): decode finite, absolute error within a
     * few f16 subnormal steps (2^-24 ≈ 6e-8) times the level count, no blow-up */
    for (int64_t i = 0; i < n; i++) X[i] = rng_gauss() * 1e-7f;
    roundtrip(type, X, Y, Q, n);
    double emax = 0;
    finite = true;
    for (int64_t i = 0; i < n; i++) finite &= isfinite(Y[i]), emax = fmax(emax, fabs(Y[i] - X[i]));
    CHECKF(finite && emax <= 2e-6, "%s tiny values: max abs err %g", nm, emax);
    /* NaN / inf input must not crash (UBSan watches the conversions) */
    for (int64_t i = 0; i < n; i++) X[i] = rng_gauss();
    X[3] = NAN;
    X[be + 7] = INFINITY;
    CHECK(snug_quantize_row(type, X, Q, n, NULL));
    /* wrong length is refused */
    if (t->block_elems > 1) CHECK(!snug_quantize_row(type, X, Q, be + 1, NULL));
}

/* The importance-weighted encoders: with importance concentrated on a few columns, the error
 * weighted by that importance must drop against the unweighted encoder's on the same rows
 * (that is what the weighting is for), and a uniform importance stays within the Gaussian
 * bound. */
static float IMP[NMAX];
/* rel. RMSE bounds of the i-quants on N(0,1) rows, uniform importance: measured (0.138,
 * 0.178, 0.250, 0.298, 0.342, 0.452, 0.486) + ~20% */
#define IQ_B_IQ3_S   0.165
#define IQ_B_IQ3_XXS 0.215
#define IQ_B_IQ2_S   0.30
#define IQ_B_IQ2_XS  0.36
#define IQ_B_IQ2_XXS 0.41
#define IQ_B_IQ1_M   0.55
#define IQ_B_IQ1_S   0.59
static void test_imatrix(uint32_t type) {
    const char *nm = snug_dtype_info(type)->name;
    int64_t n = NMAX;
    for (int64_t i = 0; i < n; i++) X[i] = rng_gauss(), IMP[i] = (i % 7 == 3) ? 50.f : 0.1f;
    double e_plain = 0, e_im = 0;
    CHECK(snug_quantize_row(type, X, Q, n, NULL));
    snug_dequantize_row(type, Q, Y, n);
    for (int64_t i = 0; i < n; i++) e_plain += IMP[i] * ((double)X[i] - Y[i]) * (X[i] - Y[i]);
    CHECK(snug_quantize_row(type, X, Q, n, IMP));
    snug_dequantize_row(type, Q, Y, n);
    for (int64_t i = 0; i < n; i++) e_im += IMP[i] * ((double)X[i] - Y[i]) * (X[i] - Y[i]);
    CHECKF(e_im < 0.9 * e_plain, "%s: importance-weighted error %.4g not below plain %.4g", nm,
           e_im, e_plain);
    fprintf(stderr, "  %-7s weighted error with / without imatrix: %.3f\n", nm, e_im / e_plain);
    for (int64_t i = 0; i < n; i++) IMP[i] = 1.f;
    CHECK(snug_quantize_row(type, X, Q, n, IMP));
    snug_dequantize_row(type, Q, Y, n);
    double se = 0, sx = 0;
    for (int64_t i = 0; i < n; i++) se += ((double)X[i] - Y[i]) * (X[i] - Y[i]), sx += X[i] * X[i];
    CHECKF(sqrt(se / sx) <= rmse_bound(type), "%s uniform imatrix: rel rmse %.4f", nm,
           sqrt(se / sx));
}

/* The 1-3 bit i-quants (their bytes are checked against llama.cpp's quantizer in
 * tests/py/test_quant_imatrix.py; here: behaviour on odd inputs). Rel. RMSE on Gaussian rows
 * under uniform importance within a bound (measured + ~20%: a packing or search bug lands near
 * 1); importance concentrated on every 7th column lowers the error weighted by it against the
 * uniform encode; an all-zero row decodes to exact zeros; scaling the input by 2^k (huge and
 * smaller magnitudes, the f16 scales kept normal) scales the decode exactly; tiny values decode
 * finite and small; NaN/inf do not crash. */
static double iq_bound(uint32_t type) {
    switch (type) {
    case SNUG_DTYPE_IQ3_S:
        return IQ_B_IQ3_S;
    case SNUG_DTYPE_IQ3_XXS:
        return IQ_B_IQ3_XXS;
    case SNUG_DTYPE_IQ2_S:
        return IQ_B_IQ2_S;
    case SNUG_DTYPE_IQ2_XS:
        return IQ_B_IQ2_XS;
    case SNUG_DTYPE_IQ2_XXS:
        return IQ_B_IQ2_XXS;
    case SNUG_DTYPE_IQ1_M:
        return IQ_B_IQ1_M;
    default:
        return IQ_B_IQ1_S;
    }
}

static double iq_roundtrip(uint32_t type, const float *imp, int64_t n) {
    CHECK(snug_quantize_row(type, X, Q, n, imp));
    snug_dequantize_row(type, Q, Y, n);
    double se = 0, sx = 0;
    for (int64_t i = 0; i < n; i++) se += ((double)X[i] - Y[i]) * (X[i] - Y[i]), sx += X[i] * X[i];
    return sx > 0 ? sqrt(se / sx) : sqrt(se);
}

static void test_iquant(uint32_t type) {
    const char *nm = snug_dtype_info(type)->name;
    const int64_t n = NMAX;
    for (int64_t i = 0; i < n; i++) X[i] = rng_gauss(), IMP[i] = 1.f;
    double r = iq_roundtrip(type, IMP, n);
    fprintf(stderr, "  %-7s rel rmse on N(0,1), uniform importance: %.4f (bound %.3f)\n", nm, r,
            iq_bound(type));
    CHECKF(r <= iq_bound(type), "%s gaussian: rel rmse %.4f > %.3f", nm, r, iq_bound(type));
    measured[type] = r;
    /* the importance weighting works: error weighted by a concentrated importance drops */
    double e_uni = 0, e_im = 0;
    for (int64_t i = 0; i < n; i++) {
        float w = (i % 7 == 3) ? 50.f : 0.1f;
        e_uni += w * ((double)X[i] - Y[i]) * (X[i] - Y[i]);
        IMP[i] = w;
    }
    iq_roundtrip(type, IMP, n);
    for (int64_t i = 0; i < n; i++) e_im += IMP[i] * ((double)X[i] - Y[i]) * (X[i] - Y[i]);
    fprintf(stderr, "  %-7s weighted error with / without concentrated importance: %.3f\n", nm,
            e_im / e_uni);
    CHECKF(e_im < 0.9 * e_uni, "%s: importance-weighted error %.4g not below uniform %.4g", nm,
           e_im, e_uni);
    /* no importance at all: still a sane encode (uniform importance or the type's default) */
    r = iq_roundtrip(type, NULL, n);
    CHECKF(r <= 1.3 * iq_bound(type), "%s without importance: rel rmse %.4f", nm, r);
    /* power-of-two scaling: 2^12 (huge) and 2^-4 (small, the f16 scales still normal) */
    for (int64_t i = 0; i < n; i++) IMP[i] = 1.f;
    iq_roundtrip(type, IMP, n);
    memcpy(V, Y, sizeof(float) * (size_t)n);
    static const float SC[2] = {4096.f, 1.f / 16.f};
    for (int s = 0; s < 2; s++) {
        for (int64_t i = 0; i < n; i++) X[i] *= SC[s];
        iq_roundtrip(type, IMP, n);
        int nexact = 0;
        for (int64_t i = 0; i < n; i++) nexact += Y[i] == SC[s] * V[i];
        CHECKF(nexact == n, "%s: x*%g decodes to %g*decode(x) for only %d of %lld", nm, SC[s],
               SC[s], nexact, (long long)n);
        for (int64_t i = 0; i < n; i++) X[i] /= SC[s];
    }
    /* all zeros, and zero sub-blocks between others (IQ3_S shifts its bytes past them) */
    memset(X, 0, sizeof(float) * 512);
    CHECKF(iq_roundtrip(type, IMP, 512) == 0, "%s zeros", nm);
    for (int64_t i = 0; i < 512; i++) X[i] = (i / 32) % 3 == 1 ? 0.f : rng_gauss();
    r = iq_roundtrip(type, IMP, 512);
    bool zeros_kept = true;
    for (int64_t i = 0; i < 512; i++)
        if ((i / 32) % 3 == 1) zeros_kept &= fabsf(Y[i]) <= 0.5f * iq_bound(type) * 3.f;
    /* IQ3_S is exempt: ggml's encoder does not advance its grid and sign cursors past an
     * all-zero sub-block, so the bytes of the following ones land one slot early and decode
     * wrongly; snug writes the same bytes (docs/quantization.md) */
    if (type != SNUG_DTYPE_IQ3_S)
        CHECKF(r <= 1.3 * iq_bound(type) && zeros_kept, "%s zero sub-blocks: rel rmse %.4f", nm, r);
    /* tiny values (f16 scales subnormal or zero): finite, no blow-up */
    for (int64_t i = 0; i < 512; i++) X[i] = rng_gauss() * 1e-7f;
    iq_roundtrip(type, IMP, 512);
    double emax = 0;
    bool finite = true;
    for (int64_t i = 0; i < 512; i++)
        finite &= isfinite(Y[i]), emax = fmax(emax, fabs(Y[i] - X[i]));
    CHECKF(finite && emax <= 2e-6, "%s tiny values: max abs err %g", nm, emax);
    /* NaN / inf must not crash (UBSan watches the conversions) */
    for (int64_t i = 0; i < 512; i++) X[i] = rng_gauss();
    X[3] = NAN;
    X[300] = INFINITY;
    CHECK(snug_quantize_row(type, X, Q, 512, IMP));
    CHECK(!snug_quantize_row(type, X, Q, 257, IMP));
}

int main(void) {
    test_f16();
    test_bf16();
    CHECK(snug_dtype_row_bytes(SNUG_DTYPE_Q4_K, 512) == 288);
    CHECK(snug_dtype_from_name("Q6_k") == SNUG_DTYPE_Q6_K);
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++) test_type(TYPES[i]);
    static const uint32_t IQ_TYPES[] = {SNUG_DTYPE_IQ3_S,  SNUG_DTYPE_IQ3_XXS, SNUG_DTYPE_IQ2_S,
                                        SNUG_DTYPE_IQ2_XS, SNUG_DTYPE_IQ2_XXS, SNUG_DTYPE_IQ1_M,
                                        SNUG_DTYPE_IQ1_S};
    for (size_t i = 0; i < sizeof IQ_TYPES / sizeof IQ_TYPES[0]; i++) test_iquant(IQ_TYPES[i]);
    /* fewer bits, more error: the bounds alone would let neighbours swap */
    CHECK(measured[SNUG_DTYPE_IQ3_S] < measured[SNUG_DTYPE_IQ2_S]);
    CHECK(measured[SNUG_DTYPE_IQ3_XXS] < measured[SNUG_DTYPE_IQ2_XXS]);
    CHECK(measured[SNUG_DTYPE_IQ2_S] < measured[SNUG_DTYPE_IQ2_XXS]);
    CHECK(measured[SNUG_DTYPE_IQ2_XXS] < measured[SNUG_DTYPE_IQ1_S]);
    static const uint32_t IM_TYPES[] = {SNUG_DTYPE_Q4_0,   SNUG_DTYPE_Q4_1,  SNUG_DTYPE_Q5_0,
                                        SNUG_DTYPE_Q5_1,   SNUG_DTYPE_Q2_K,  SNUG_DTYPE_Q3_K,
                                        SNUG_DTYPE_Q4_K,   SNUG_DTYPE_Q5_K,  SNUG_DTYPE_Q6_K,
                                        SNUG_DTYPE_IQ4_NL, SNUG_DTYPE_IQ4_XS};
    for (size_t i = 0; i < sizeof IM_TYPES / sizeof IM_TYPES[0]; i++) test_imatrix(IM_TYPES[i]);
    CHECK(measured[SNUG_DTYPE_Q3_K] < measured[SNUG_DTYPE_Q2_K]);
    CHECK(measured[SNUG_DTYPE_IQ4_XS] < measured[SNUG_DTYPE_Q3_K]);
    /* the K-quant searches must beat the legacy formats of the same bit width */
    CHECK(measured[SNUG_DTYPE_Q4_K] < measured[SNUG_DTYPE_Q4_1]);
    CHECK(measured[SNUG_DTYPE_Q5_K] < measured[SNUG_DTYPE_Q5_1]);
    CHECK(measured[SNUG_DTYPE_Q6_K] < measured[SNUG_DTYPE_Q5_K]);
    CHECK(measured[SNUG_DTYPE_Q8_0] < measured[SNUG_DTYPE_Q6_K]);
    return TEST_DONE();
}
