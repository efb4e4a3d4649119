/* test_model_kvq.c — the compressed KV cache formats (src/kv/kvfmt.c) and attention over them
 * (src/backend/cpu/ops_attention_kvq.c), against references computed here:
 * codebooks re-solved (Lloyd-Max for N(0,1)) and their MSE vs theory; the sign mask regenerated;
 * round-trip bounds per format (exact e4m3 values survive, q8_0 / fp8 / f16 / bf16 error
 * bounds); TurboQuant reconstruction MSE vs theory on Gaussian and adversarial vectors (and the
 * bare Hadamard failing where the random signs hold); the norm-correction shrink slope; and
 * attention over every format and K/V mix vs a naive double-precision attention over the
 * dequantized cache (≤ 1e-5 relative), bitwise independent of chunking and threads.
 * Set KVQ_REPORT=1 to print the measured numbers (docs/kv-formats.md uses them).
 */
#include "backend/cpu/ops.h"
#include "core/core.h"
#include "core/threadpool.h"
#include "kv/kv.h"
#include "kv/kvfmt.h"
#include "quant/quant.h"
#include "test.h"

#define PI 3.14159265358979323846

static bool g_report;

/* ---- deterministic Gaussian numbers ------------------------------------------------------- */
static uint64_t rng_state = 12345;
static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double unif(void) {
    return ((double)(splitmix(&rng_state) >> 11) + 0.5) / 9007199254740992.0;
}
static float gauss(void) {
    return (float)(sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif()));
}

/* ---- 1. codebooks and signs --------------------------------------------------------------- */
static double npdf(double x) {
    return isinf(x) ? 0.0 : exp(-0.5 * x * x) / sqrt(2.0 * PI);
}
static double ncdf(double x) {
    return 0.5 * (1.0 + erf(x / sqrt(2.0)));
}

/* Lloyd-Max for N(0,1) with n levels: centroids c (ascending) and the MSE per coordinate. */
static double lloyd_max(int n, double *c) {
    for (int i = 0; i < n; i++) c[i] = -3.0 + 6.0 * (i + 0.5) / n;
    double t[17];
    for (int it = 0; it < 5000; it++) {
        t[0] = -INFINITY, t[n] = INFINITY;
        for (int i = 1; i < n; i++) t[i] = 0.5 * (c[i - 1] + c[i]);
        for (int i = 0; i < n; i++)
            c[i] = (npdf(t[i]) - npdf(t[i + 1])) / (ncdf(t[i + 1]) - ncdf(t[i]));
    }
    double mse = 0;
    for (int i = 1; i < n; i++) t[i] = 0.5 * (c[i - 1] + c[i]);
    for (int i = 0; i < n; i++) {
        double a = t[i], b = t[i + 1], P = ncdf(b) - ncdf(a);
        double ex = npdf(a) - npdf(b);
        double ex2 = P + (isinf(a) ? 0 : a * npdf(a)) - (isinf(b) ? 0 : b * npdf(b));
        mse += ex2 - 2 * c[i] * ex + c[i] * c[i] * P;
    }
    return mse;
}

static void test_codebooks(void) {
    double c[16];
    double mse3 = lloyd_max(8, c);
    for (int i = 0; i < 8; i++)
        CHECKF(fabs(c[i] - snug_kvfmt_tq3_centroids[i]) <= 1e-4 * fabs(c[i]), "tq3 c[%d] %.7f", i,
               c[i]);
    double mse4 = lloyd_max(16, c);
    for (int i = 0; i < 16; i++)
        CHECKF(fabs(c[i] - snug_kvfmt_tq4_centroids[i]) <= 1e-4 * fabs(c[i]), "tq4 c[%d] %.7f", i,
               c[i]);
    CHECKF(fabs(mse3 - 0.03455) <= 0.005 * 0.03455, "3-bit Lloyd-Max MSE %.6f", mse3);
    CHECKF(fabs(mse4 - 0.00950) <= 0.005 * 0.00950, "4-bit Lloyd-Max MSE %.6f", mse4);
    /* the spec's d = 128 values (docs/turboquant.md §1.2): centroid / sqrt(128) */
    CHECK_NEAR(snug_kvfmt_tq3_centroids[7] / sqrt(128.0), 0.190203, 5e-6);
    CHECK_NEAR(snug_kvfmt_tq4_centroids[8] / sqrt(128.0), 0.011349, 2e-6);
    uint64_t s = SNUG_KVFMT_SIGN_SEED;
    CHECK(splitmix(&s) == snug_kvfmt_signs[0]);
    CHECK(splitmix(&s) == snug_kvfmt_signs[1]);
    if (g_report) printf("codebook MSE per coordinate: 3-bit %.6f, 4-bit %.6f\n", mse3, mse4);
}

/* ---- 2. names, codes, sizes --------------------------------------------------------------- */
static void test_names_sizes(void) {
    for (int f = 0; f < SNUG_KVFMT_N; f++) {
        CHECK(snug_kvfmt_parse(snug_kvfmt_name(f)) == f);
        for (int g = 0; g < SNUG_KVFMT_N; g++) {
            int k, v;
            CHECK(snug_kvfmt_split(snug_kvfmt_code(f, g), &k, &v) && k == f && v == g);
        }
    }
    CHECK(snug_kvfmt_code(SNUG_KV_F16, SNUG_KV_F16) == SNUG_KV_F16);
    CHECK(snug_kvfmt_code(SNUG_KV_F32, SNUG_KV_F32) == SNUG_KV_F32);
    CHECK(snug_kvfmt_parse("q4_0") == -1);
    /* bytes of one 256-dim head vector (docs/turboquant.md §2.1 table) */
    CHECK(snug_kvfmt_vec_bytes(SNUG_KV_F16, 256) == 512);
    CHECK(snug_kvfmt_vec_bytes(SNUG_KV_BF16, 256) == 512);
    CHECK(snug_kvfmt_vec_bytes(SNUG_KV_Q8_0, 256) == 272);
    CHECK(snug_kvfmt_vec_bytes(SNUG_KV_FP8, 256) == 260);
    CHECK(snug_kvfmt_vec_bytes(SNUG_KV_TQ4, 256) == 132);
    CHECK(snug_kvfmt_vec_bytes(SNUG_KV_TQ3, 256) == 100);
    CHECK(snug_kvfmt_vec_bytes(SNUG_KV_TQ4, 64) == 34);
    CHECK(snug_kvfmt_vec_bytes(SNUG_KV_TQ3, 64) == 26);
    CHECK(snug_kvfmt_vec_bytes(SNUG_KV_Q8_0, 256) == snug_dtype_row_bytes(SNUG_DTYPE_Q8_0, 256));
    CHECK(snug_kvfmt_vec_bytes(SNUG_KV_TQ3, 96) == 0 && !snug_kvfmt_supports(SNUG_KV_Q8_0, 48));
    /* the 27B's attention cache: 16 layers x 4 kv heads x 256, K + V */
    struct snug_kv_shape s = {
        .n_attn = 16, .n_head_kv = 4, .head_dim = 256, .n_ctx = 1, .type = SNUG_DTYPE_F16};
    CHECK(snug_kv_bytes_per_token(&s) == 65536);
    s.fmt = SNUG_KV_TQ3;
    CHECK(snug_kv_bytes_per_token(&s) == 12800);
    s.fmt = snug_kvfmt_code(SNUG_KV_TQ4, SNUG_KV_TQ3);
    CHECK(snug_kv_bytes_per_token(&s) == 16 * 4 * (132 + 100));
    s.fmt = SNUG_KV_Q8_0;
    CHECK(snug_kv_bytes_per_token(&s) == 16 * 4 * 2 * 272);
}

/* ---- 3. round trips ----------------------------------------------------------------------- */
static void test_round_trips(void) {
    enum { D = 256 };
    float x[D], y[D], z[D];
    uint8_t buf[4 * D + 64];
    for (int rep = 0; rep < 50; rep++) {
        float mag = rep % 3 == 0 ? 1e-3f : rep % 3 == 1 ? 1.0f : 300.0f;
        for (int i = 0; i < D; i++) x[i] = mag * gauss();
        snug_kvfmt_quantize(SNUG_KV_F32, x, D, buf);
        snug_kvfmt_dequantize(SNUG_KV_F32, buf, D, y);
        CHECK(!memcmp(x, y, sizeof x));
        int bad16 = 0, badb = 0, bad8 = 0, badf8 = 0;
        snug_kvfmt_quantize(SNUG_KV_F16, x, D, buf);
        snug_kvfmt_dequantize(SNUG_KV_F16, buf, D, y);
        for (int i = 0; i < D; i++) bad16 += fabsf(y[i] - x[i]) > fabsf(x[i]) * 0x1p-11f + 6e-8f;
        snug_kvfmt_quantize(SNUG_KV_BF16, x, D, buf);
        snug_kvfmt_dequantize(SNUG_KV_BF16, buf, D, y);
        for (int i = 0; i < D; i++) badb += fabsf(y[i] - x[i]) > fabsf(x[i]) * 0x1p-8f;
        snug_kvfmt_quantize(SNUG_KV_Q8_0, x, D, buf);
        snug_kvfmt_dequantize(SNUG_KV_Q8_0, buf, D, y);
        for (int b = 0; b < D; b += 32) { /* |err| ≤ d/2 with d = amax/127 (+ fp16 rounding) */
            float amax = 0;
            for (int i = b; i < b + 32; i++) amax = fmaxf(amax, fabsf(x[i]));
            for (int i = b; i < b + 32; i++)
                bad8 +=
                    fabsf(y[i] - x[i]) > amax / 127 * 0.5f * 1.01f + amax * 0x1p-10f + 127 * 3e-8f;
        }
        snug_kvfmt_quantize(SNUG_KV_FP8, x, D, buf);
        snug_kvfmt_dequantize(SNUG_KV_FP8, buf, D, y);
        float amax = 0;
        for (int i = 0; i < D; i++) amax = fmaxf(amax, fabsf(x[i]));
        for (int i = 0; i < D; i++) /* 3 mantissa bits: half a step is 2^-4 relative */
            badf8 +=
                fabsf(y[i] - x[i]) > fmaxf(fabsf(x[i]) * 0x1p-4f, amax / 448 * 0x1p-10f) * 1.0001f;
        CHECKF(!bad16 && !badb && !bad8 && !badf8, "rep %d: f16 %d bf16 %d q8_0 %d fp8 %d", rep,
               bad16, badb, bad8, badf8);
        /* rotation: orthogonal and invertible */
        memcpy(z, x, sizeof x);
        snug_kvfmt_rotate(z, D);
        double n0 = 0, n1 = 0, e = 0;
        for (int i = 0; i < D; i++) n0 += (double)x[i] * x[i], n1 += (double)z[i] * z[i];
        snug_kvfmt_unrotate(z, D);
        for (int i = 0; i < D; i++) e = fmax(e, fabs(z[i] - x[i]));
        CHECK(fabs(n1 / n0 - 1) < 1e-5 && e <= 1e-5 * mag * 8);
    }
    /* every finite e4m3 value survives exactly (scale 1: the vector's max is 448) */
    float v[D], w[D];
    int n = 0, bad = 0;
    v[n++] = 448.0f;
    for (int E = 0; E < 16; E++)
        for (int m = 0; m < 8 && n < D; m++) {
            if (E == 15 && m == 7) continue;
            float a = E ? ldexpf(1.0f + m / 8.0f, E - 7) : ldexpf(m / 8.0f, -6);
            v[n] = (n % 2) ? -a : a;
            n++;
        }
    while (n < D) v[n++] = 0.0f;
    snug_kvfmt_quantize(SNUG_KV_FP8, v, D, buf);
    snug_kvfmt_dequantize(SNUG_KV_FP8, buf, D, w);
    for (int i = 0; i < D; i++) bad += w[i] != v[i];
    CHECKF(bad == 0, "%d e4m3 values changed", bad);
}

/* ---- 4. TurboQuant reconstruction error vs theory ----------------------------------------- */
/* Mean relative squared error ‖x − x̂‖²/‖x‖² over n vectors made by gen(i, x); also the slope of
 * ⟨q,x̂⟩ on ⟨q,x⟩ for random q and the normalised inner-product error. */
typedef void (*gen_fn)(int i, float *x, int D);
struct tq_stats {
    double mse, slope, ip;
};
static struct tq_stats tq_measure(int fmt, int D, int n, gen_fn gen) {
    float x[256], y[256], q[256];
    uint8_t buf[512];
    double se = 0, sxy = 0, sxx = 0, ipe = 0;
    for (int i = 0; i < n; i++) {
        gen(i, x, D);
        snug_kvfmt_quantize(fmt, x, D, buf);
        snug_kvfmt_dequantize(fmt, buf, D, y);
        double e = 0, nx = 0, qx = 0, qy = 0, qq = 0;
        for (int j = 0; j < D; j++) {
            q[j] = gauss();
            e += ((double)x[j] - y[j]) * ((double)x[j] - y[j]);
            nx += (double)x[j] * x[j];
            qx += (double)q[j] * x[j];
            qy += (double)q[j] * y[j];
            qq += (double)q[j] * q[j];
        }
        se += nx > 0 ? e / nx : 0;
        sxy += qx * qy;
        sxx += qx * qx;
        ipe += nx > 0 ? (qx - qy) * (qx - qy) * D / (qq * nx) : 0;
    }
    return (struct tq_stats){se / n, sxy / sxx, ipe / n};
}
static void gen_gauss(int i, float *x, int D) {
    for (int j = 0; j < D; j++) x[j] = gauss();
}
static void gen_offset(int i, float *x, int D) { /* constant offset of 2 per channel */
    for (int j = 0; j < D; j++) x[j] = gauss() + 2.0f;
}
static void gen_outliers(int i, float *x, int D) { /* offset + 4 massive channels */
    for (int j = 0; j < D; j++) x[j] = gauss() + 2.0f;
    x[3] += 60.0f, x[17] -= 45.0f, x[40] += 80.0f, x[D - 5] += 50.0f;
}
static void gen_walsh(int i, float *x, int D) { /* noise + an alternating-sign pattern */
    for (int j = 0; j < D; j++) x[j] = 0.3f * gauss() + ((j & 1) ? -3.0f : 3.0f);
}
static void gen_scaled(int i, float *x, int D) { /* Gaussian at 1e3 and 1e-3 */
    for (int j = 0; j < D; j++) x[j] = gauss() * (i % 2 ? 1e3f : 1e-3f);
}
static void gen_constant(int i, float *x, int D) {
    for (int j = 0; j < D; j++) x[j] = 1.0f + 0.01f * (float)i;
}
/* The constant vector pre-multiplied by the signs: what a bare Hadamard (no random signs)
 * would see for a constant vector — the failure the signs are there to prevent. */
static void gen_bare_constant(int i, float *x, int D) {
    gen_constant(i, x, D);
    for (int j = 0; j < D; j++)
        if ((snug_kvfmt_signs[(j % snug_kvfmt_group(D)) >> 6] >> (j & 63)) & 1) x[j] = -x[j];
}

static void test_tq_theory(void) {
    static const struct {
        const char *name;
        gen_fn gen;
    } inputs[] = {{"gaussian", gen_gauss},           {"offset+2", gen_offset},
                  {"offset+outliers", gen_outliers}, {"alternating", gen_walsh},
                  {"scaled 1e3/1e-3", gen_scaled},   {"constant", gen_constant}};
    const int n = 10000;
    for (int D = 128; D >= 64; D -= 64)
        for (int b = 3; b <= 4; b++) {
            int fmt = b == 3 ? SNUG_KV_TQ3 : SNUG_KV_TQ4;
            double theory = b == 3 ? 0.0345 : 0.0095, lo = pow(4, -b),
                   hi = sqrt(3) * PI / 2 * pow(4, -b);
            struct tq_stats g = tq_measure(fmt, D, n, gen_gauss);
            double tol = D == 128 ? 0.05 : 0.08;
            CHECKF(fabs(g.mse / theory - 1) <= tol && g.mse > lo && g.mse < hi,
                   "tq%d D=%d MSE %.5f vs theory %.4f", b, D, g.mse, theory);
            /* norm correction: slope sqrt(1 - D_mse) (docs/turboquant.md §1.3, §3 check 4) */
            CHECKF(fabs(g.slope - sqrt(1 - theory)) <= 0.006, "tq%d D=%d slope %.4f", b, D,
                   g.slope);
            CHECKF(fabs(g.ip / theory - 1) <= 0.1, "tq%d D=%d inner-product error %.5f", b, D,
                   g.ip);
            if (g_report)
                printf("tq%d D=%d gaussian: rel MSE %.5f (theory %.4f, bounds %.4f..%.4f), "
                       "slope %.4f, ip err %.5f\n",
                       b, D, g.mse, theory, lo, hi, g.slope, g.ip);
            for (size_t k = 1; k < sizeof inputs / sizeof inputs[0]; k++) {
                struct tq_stats a = tq_measure(fmt, D, k == 5 ? 200 : 2000, inputs[k].gen);
                /* 1.3x at G = 128 (docs/turboquant.md §3 check 3); a 64-group averages fewer
                 * coordinates, so one fixed vector (constant) scatters more: 1.7x */
                CHECKF(a.mse <= (D == 128 ? 1.3 : 1.7) * g.mse,
                       "tq%d D=%d %s: MSE %.5f vs gaussian %.5f", b, D, inputs[k].name, a.mse,
                       g.mse);
                if (g_report) printf("tq%d D=%d %s: rel MSE %.5f\n", b, D, inputs[k].name, a.mse);
            }
            struct tq_stats bare = tq_measure(fmt, D, 200, gen_bare_constant);
            CHECKF(bare.mse > 3 * g.mse, "tq%d D=%d bare Hadamard constant: MSE %.5f", b, D,
                   bare.mse);
            if (g_report)
                printf("tq%d D=%d constant, bare Hadamard: rel MSE %.5f\n", b, D, bare.mse);
        }
}

/* ---- 5. attention over the compressed cache ----------------------------------------------- */
/* Naive causal GQA attention in double over the dequantized cache (stored bytes → floats). */
static void naive_attention(const struct snug_kv_view *kv, int64_t Hq, int64_t Hkv, int64_t D,
                            int64_t pos0, int64_t T, const float *q, float scale, float *out) {
    size_t kb = snug_kvfmt_vec_bytes(kv->k_fmt, D), vb = snug_kvfmt_vec_bytes(kv->v_fmt, D);
    int64_t n = pos0 + T;
    float *K = snug_malloc((size_t)(n * Hkv * D) * 4), *V = snug_malloc((size_t)(n * Hkv * D) * 4);
    double *s = snug_malloc((size_t)n * 8), *o = snug_malloc((size_t)D * 8);
    for (int64_t i = 0; i < n * Hkv; i++) {
        snug_kvfmt_dequantize(kv->k_fmt, (const uint8_t *)kv->k + i * kb, D, K + i * D);
        snug_kvfmt_dequantize(kv->v_fmt, (const uint8_t *)kv->v + i * vb, D, V + i * D);
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hq; h++) {
            int64_t kh = h / (Hq / Hkv), np = pos0 + t + 1;
            const float *qh = q + (t * Hq + h) * D;
            double mx = -INFINITY, l = 0;
            for (int64_t p = 0; p < np; p++) {
                double d = 0;
                for (int64_t j = 0; j < D; j++) d += (double)qh[j] * K[(p * Hkv + kh) * D + j];
                s[p] = d * scale;
                mx = fmax(mx, s[p]);
            }
            memset(o, 0, (size_t)D * 8);
            for (int64_t p = 0; p < np; p++) {
                double e = exp(s[p] - mx);
                l += e;
                for (int64_t j = 0; j < D; j++) o[j] += e * V[(p * Hkv + kh) * D + j];
            }
            for (int64_t j = 0; j < D; j++) out[(t * Hq + h) * D + j] = (float)(o[j] / l);
        }
    snug_free(K), snug_free(V), snug_free(s), snug_free(o);
}

static void test_attention(struct snug_pool *pool) {
    static const int pairs[][2] = {{SNUG_KV_BF16, SNUG_KV_BF16}, {SNUG_KV_Q8_0, SNUG_KV_Q8_0},
                                   {SNUG_KV_FP8, SNUG_KV_FP8},   {SNUG_KV_TQ4, SNUG_KV_TQ4},
                                   {SNUG_KV_TQ3, SNUG_KV_TQ3},   {SNUG_KV_TQ4, SNUG_KV_TQ3},
                                   {SNUG_KV_F16, SNUG_KV_TQ3},   {SNUG_KV_TQ3, SNUG_KV_F32},
                                   {SNUG_KV_FP8, SNUG_KV_Q8_0},  {SNUG_KV_F32, SNUG_KV_F16}};
    static const int64_t shapes[][3] = {{4, 2, 64}, {8, 1, 128}, {6, 2, 256}}; /* Hq Hkv D */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t Hq = shapes[si][0], Hkv = shapes[si][1], D = shapes[si][2];
        const int64_t n = 150, T = 20, pos0 = n - T;
        float *k = snug_malloc((size_t)(n * Hkv * D) * 4),
              *v = snug_malloc((size_t)(n * Hkv * D) * 4);
        float *q = snug_malloc((size_t)(T * Hq * D) * 4);
        float *o1 = snug_malloc((size_t)(T * Hq * D) * 4),
              *o2 = snug_malloc((size_t)(T * Hq * D) * 4);
        float *o3 = snug_malloc((size_t)(T * Hq * D) * 4);
        for (int64_t i = 0; i < n * Hkv * D; i++) k[i] = gauss() + (i % D == 5 ? 8.0f : 0.0f);
        for (int64_t i = 0; i < n * Hkv * D; i++) v[i] = gauss();
        for (int64_t i = 0; i < T * Hq * D; i++) q[i] = 1.5f * gauss();
        size_t wb = snug_op_kvq_attention_work_bytes(D, snug_pool_size(pool));
        void *work = snug_malloc(wb);
        CHECK(wb >= snug_op_attention_work_bytes(D, snug_pool_size(pool)));
        for (size_t pi = 0; pi < sizeof pairs / sizeof pairs[0]; pi++) {
            int kf = pairs[pi][0], vf = pairs[pi][1];
            size_t kb = snug_kvfmt_vec_bytes(kf, D), vb = snug_kvfmt_vec_bytes(vf, D);
            struct snug_kv_view kv = {.type = SNUG_KV_VIEW_FMT,
                                      .k = snug_malloc(kb * (size_t)(n * Hkv)),
                                      .v = snug_malloc(vb * (size_t)(n * Hkv)),
                                      .n_ctx = n,
                                      .k_fmt = kf,
                                      .v_fmt = vf};
            /* prompt in chunks of 7 (store, then attend over the cache), then the last T */
            for (int64_t p = 0; p < pos0; p += 7) {
                int64_t c = SNUG_MIN((int64_t)7, pos0 - p);
                snug_op_kvq_store(&kv, Hkv, D, p, c, k + p * Hkv * D, v + p * Hkv * D);
            }
            snug_op_kvq_store(&kv, Hkv, D, pos0, T, k + pos0 * Hkv * D, v + pos0 * Hkv * D);
            float scale = 1.0f / sqrtf((float)D);
            snug_op_kvq_attention(pool, &kv, Hq, Hkv, D, pos0, T, q, scale, o1, work);
            naive_attention(&kv, Hq, Hkv, D, pos0, T, q, scale, o2);
            double num = 0, den = 0;
            for (int64_t i = 0; i < T * Hq * D; i++)
                num += ((double)o1[i] - o2[i]) * ((double)o1[i] - o2[i]),
                    den += (double)o2[i] * o2[i];
            CHECKF(sqrt(num / den) <= 1e-5, "attention K %s V %s D=%lld: rel err %.3g",
                   snug_kvfmt_name(kf), snug_kvfmt_name(vf), (long long)D, sqrt(num / den));
            /* one token at a time, single thread: the same bits (chunking invariance) */
            for (int64_t t = 0; t < T; t++)
                snug_op_kvq_attention(NULL, &kv, Hq, Hkv, D, pos0 + t, 1, q + t * Hq * D, scale,
                                      o3 + t * Hq * D, work);
            CHECKF(!memcmp(o1, o3, (size_t)(T * Hq * D) * 4), "K %s V %s: chunked != decode",
                   snug_kvfmt_name(kf), snug_kvfmt_name(vf));
            snug_free(kv.k), snug_free(kv.v);
        }
        snug_free(work), snug_free(k), snug_free(v), snug_free(q), snug_free(o1), snug_free(o2),
            snug_free(o3);
    }
}

/* The plain path stays reachable through the dispatcher: an F16 view gives the same result
 * through snug_op_kvq_* as through snug_op_*. */
static void test_plain_dispatch(struct snug_pool *pool) {
    enum { Hq = 4, Hkv = 2, D = 64, n = 40 };
    static uint16_t kc[n * Hkv * D], vc[n * Hkv * D];
    static float k[n * Hkv * D], v[n * Hkv * D], q[Hq * D], o1[Hq * D], o2[Hq * D];
    for (int i = 0; i < n * Hkv * D; i++) k[i] = gauss(), v[i] = gauss();
    for (int i = 0; i < Hq * D; i++) q[i] = gauss();
    struct snug_kv_view kv = {.type = SNUG_DTYPE_F16, .k = kc, .v = vc, .n_ctx = n};
    snug_op_kvq_store(&kv, Hkv, D, 0, n, k, v);
    void *work = snug_malloc(snug_op_kvq_attention_work_bytes(D, snug_pool_size(pool)));
    snug_op_kvq_attention(pool, &kv, Hq, Hkv, D, n - 1, 1, q, 0.125f, o1, work);
    snug_op_attention(pool, &kv, Hq, Hkv, D, n - 1, 1, q, 0.125f, o2, work);
    CHECK(!memcmp(o1, o2, sizeof o1));
    snug_free(work);
}

/* KVQ_BENCH=1: decode attention (one query token, the 27B's shape: 24 query / 4 kv heads of
 * 256) over 4K and 32K cached tokens per format, on this CPU with 2 threads; f16 through the
 * plain kernel (ops_attention.c) in the same run. Prints ms per call and cache GB/s. */
static void bench(struct snug_pool *pool) {
    enum { Hq = 24, Hkv = 4, D = 256 };
    static const int fmts[] = {-1,          SNUG_KV_F16, SNUG_KV_BF16, SNUG_KV_Q8_0,
                               SNUG_KV_FP8, SNUG_KV_TQ4, SNUG_KV_TQ3};
    static const int64_t ctxs[] = {4096, 32768};
    float *x = snug_malloc((size_t)(Hkv * D) * 4), q[Hq * D], o[Hq * D];
    void *work = snug_malloc(snug_op_kvq_attention_work_bytes(D, snug_pool_size(pool)));
    for (int i = 0; i < Hq * D; i++) q[i] = gauss();
    for (size_t ci = 0; ci < 2; ci++)
        for (size_t fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
            int64_t n = ctxs[ci];
            int f = fmts[fi] < 0 ? SNUG_KV_F16 : fmts[fi];
            size_t vb = snug_kvfmt_vec_bytes(f, D) * Hkv;
            struct snug_kv_view kv = {.type = fmts[fi] < 0 ? SNUG_DTYPE_F16 : SNUG_KV_VIEW_FMT,
                                      .k = snug_malloc(vb * (size_t)n),
                                      .v = snug_malloc(vb * (size_t)n),
                                      .n_ctx = n,
                                      .k_fmt = f,
                                      .v_fmt = f};
            for (int64_t p = 0; p < n; p++) {
                for (int i = 0; i < Hkv * D; i++) x[i] = gauss();
                snug_op_kvq_store(&kv, Hkv, D, p, 1, x, x);
            }
            int reps = n > 10000 ? 3 : 10;
            snug_op_kvq_attention(pool, &kv, Hq, Hkv, D, n - 1, 1, q, 0.0625f, o, work);
            double t0 = snug_time_s();
            for (int r = 0; r < reps; r++)
                snug_op_kvq_attention(pool, &kv, Hq, Hkv, D, n - 1, 1, q, 0.0625f, o, work);
            double ms = (snug_time_s() - t0) / reps * 1e3;
            printf("bench ctx %6lld %-12s %8.3f ms/layer  %7.1f calls/s  cache %6.2f GB/s\n",
                   (long long)n, fmts[fi] < 0 ? "f16 (plain)" : snug_kvfmt_name(f), ms, 1e3 / ms,
                   2.0 * (double)vb * (double)n / (ms * 1e6));
            snug_free(kv.k), snug_free(kv.v);
        }
    snug_free(x), snug_free(work);
}

int main(void) {
    const char *r = getenv("KVQ_REPORT");
    g_report = r && *r == '1';
    struct snug_pool *pool = NULL;
    struct snug_err err;
    if (snug_pool_init(&pool, 2, &err)) return 1;
    const char *b = getenv("KVQ_BENCH");
    if (b && *b == '1') {
        bench(pool);
        snug_pool_free(pool);
        return 0;
    }
    test_codebooks();
    test_names_sizes();
    test_round_trips();
    test_tq_theory();
    test_attention(pool);
    test_plain_dispatch(pool);
    snug_pool_free(pool);
    return TEST_DONE();
}
