/* test_model_ops.c — every CPU op of src/backend/cpu/ops.h against a naive double-precision
 * reference written here (token-by-token delta recurrence, full-softmax attention, dequantize
 * + plain dot for matmul, the rotary formula), on odd shapes and fresh random data, with
 * thread counts 1, 2 and 3 required to give bit-identical results. Prints max abs/rel errors
 * per op and a matmul GB/s line (information, not an assertion).
 * Read next: src/backend/cpu/ops.h. */
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_util.h"
#include "core/core.h"
#include "quant/quant.h"
#include "test.h"

#include <stdint.h>

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static float frand01(void) {
    return 0.5f * (frand() + 1.0f);
}
static void fill(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = scale * frand();
}
static float *falloc(int64_t n) {
    float *p = snug_calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    SNUG_ASSERT(p);
    return p;
}
static double *dalloc(int64_t n) {
    double *p = snug_calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    SNUG_ASSERT(p);
    return p;
}

/* Error of `got` against `ref` (n values): max absolute error, and max relative error taken
 * against the largest reference magnitude (so near-zero elements do not dominate). */
struct errs {
    double abs, rel;
};
static struct errs compare(const float *got, const double *ref, int64_t n) {
    double mx = 0, ea = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= ea)) ea = e; /* NaN propagates as a failure */
    }
    struct errs r = {ea, ea / (mx > 1e-30 ? mx : 1e-30)};
    return r;
}
static void track(struct errs *acc, struct errs e) {
    if (!(e.abs <= acc->abs)) acc->abs = e.abs;
    if (!(e.rel <= acc->rel)) acc->rel = e.rel;
}

static struct snug_pool *pools[3]; /* 1, 2, 3 threads */

/* ---- rmsnorm, l2norm, swiglu, gated rmsnorm ------------------------------------------------ */

static void test_norms(void) {
    int64_t T = 5, n = 333;
    float *x = falloc(T * n), *w = falloc(n), *y = falloc(T * n), *z = falloc(T * n);
    double *ref = dalloc(T * n);
    fill(x, T * n, 3.0f);
    fill(w, n, 1.5f);
    fill(z, T * n, 4.0f);
    struct errs e = {0, 0};
    for (int wi = 0; wi < 2; wi++) {
        const float *wp = wi ? w : NULL;
        snug_op_rmsnorm(NULL, x, wp, 1e-6f, T, n, y);
        for (int64_t t = 0; t < T; t++) {
            double ss = 0;
            for (int64_t i = 0; i < n; i++) ss += (double)x[t * n + i] * x[t * n + i];
            double s = 1.0 / sqrt(ss / n + 1e-6);
            for (int64_t i = 0; i < n; i++) ref[t * n + i] = x[t * n + i] * s * (wp ? wp[i] : 1.0);
        }
        track(&e, compare(y, ref, T * n));
    }
    /* in place (y aliases x) gives the same numbers */
    float *x2 = falloc(T * n);
    memcpy(x2, x, (size_t)(T * n) * sizeof(float));
    snug_op_rmsnorm(NULL, x2, w, 1e-6f, T, n, x2);
    CHECK(memcmp(x2, y, (size_t)(T * n) * sizeof(float)) == 0);
    printf("rmsnorm        max abs %.3g rel %.3g\n", e.abs, e.rel);
    CHECK(e.rel < 1e-6);

    /* l2norm: rows of 37 */
    memcpy(x2, x, (size_t)(T * n) * sizeof(float));
    int64_t rows = T * n / 37, m = 37;
    snug_op_l2norm(NULL, x2, rows, m, 1e-6f);
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t i = 0; i < m; i++) ss += (double)x[r * m + i] * x[r * m + i];
        for (int64_t i = 0; i < m; i++) ref[r * m + i] = x[r * m + i] / sqrt(ss + 1e-6);
    }
    e = compare(x2, ref, rows * m);
    printf("l2norm         max abs %.3g rel %.3g\n", e.abs, e.rel);
    CHECK(e.rel < 1e-6);

    /* swiglu */
    snug_op_swiglu(NULL, x, z, T * n, y);
    for (int64_t i = 0; i < T * n; i++) ref[i] = x[i] / (1.0 + exp(-(double)x[i])) * z[i];
    e = compare(y, ref, T * n);
    printf("swiglu         max abs %.3g rel %.3g\n", e.abs, e.rel);
    CHECK(e.rel < 1e-6);

    /* gated rmsnorm: T=5 tokens, Nv = 3 heads of dv = 111 (n = 333) */
    int64_t Nv = 3, dv = 111;
    snug_op_gated_rmsnorm(NULL, x, z, w, 1e-6f, T, Nv, dv, y);
    for (int64_t r = 0; r < T * Nv; r++) {
        double ss = 0;
        for (int64_t i = 0; i < dv; i++) ss += (double)x[r * dv + i] * x[r * dv + i];
        double s = 1.0 / sqrt(ss / dv + 1e-6);
        for (int64_t i = 0; i < dv; i++) {
            double zz = z[r * dv + i];
            ref[r * dv + i] = w[i] * x[r * dv + i] * s * zz / (1.0 + exp(-zz));
        }
    }
    e = compare(y, ref, T * n);
    printf("gated_rmsnorm  max abs %.3g rel %.3g\n", e.abs, e.rel);
    CHECK(e.rel < 1e-6);
    snug_free(x), snug_free(w), snug_free(y), snug_free(z), snug_free(ref), snug_free(x2);
}

/* ---- rope ---------------------------------------------------------------------------------- */

static void test_rope(void) {
    int64_t T = 7, H = 3, D = 256, n_rot = 64;
    int32_t pos[7] = {0, 1, 2, 17, 1000, 65535, 262143};
    float *x = falloc(T * H * D), *y = falloc(T * H * D);
    double *ref = dalloc(T * H * D);
    fill(x, T * H * D, 2.0f);
    memcpy(y, x, (size_t)(T * H * D) * sizeof(float));
    snug_op_rope_neox(NULL, y, T, H, D, n_rot, pos, 1e7f);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t h = 0; h < H; h++) {
            const float *xh = x + (t * H + h) * D;
            double *rh = ref + (t * H + h) * D;
            for (int64_t i = 0; i < D; i++) rh[i] = xh[i];
            for (int64_t i = 0; i < n_rot / 2; i++) {
                double th = pos[t] * pow(1e7, -2.0 * i / n_rot);
                rh[i] = xh[i] * cos(th) - xh[i + n_rot / 2] * sin(th);
                rh[i + n_rot / 2] = xh[i + n_rot / 2] * cos(th) + xh[i] * sin(th);
            }
        }
    }
    struct errs e = compare(y, ref, T * H * D);
    printf("rope_neox      max abs %.3g rel %.3g\n", e.abs, e.rel);
    CHECK(e.abs < 2e-6);
    int untouched = 1; /* dims >= n_rot pass through bit-exactly */
    for (int64_t r = 0; r < T * H; r++)
        for (int64_t i = n_rot; i < D; i++) untouched &= y[r * D + i] == x[r * D + i];
    CHECK(untouched);
    snug_free(x), snug_free(y), snug_free(ref);
}

/* Interleaved M-RoPE: with t = h = w it is rope_neox bit for bit; with distinct rows, pair i
 * rotates by the position transformers' apply_interleaved_mrope picks (sections [3, 3, 2] of
 * the vision fixture, and the 27B's [11, 11, 10] on 32 pairs). */
static void test_rope_mrope(void) {
    int64_t T = 5, H = 3, D = 40, n_rot = 32;
    const uint32_t sect[2][3] = {{3, 3, 2}, {11, 11, 10}};
    int32_t pos[5] = {0, 6, 6, 11, 70000};
    int32_t pos3[5][3] = {{0, 0, 0}, {6, 6, 7}, {6, 8, 10}, {11, 11, 11}, {70000, 3, 99}};
    int32_t same3[5][3];
    for (int t = 0; t < 5; t++) same3[t][0] = same3[t][1] = same3[t][2] = pos[t];
    float *x = falloc(T * H * D), *a = falloc(T * H * D), *b = falloc(T * H * D);
    double *ref = dalloc(T * H * D);
    fill(x, T * H * D, 2.0f);
    for (int s = 0; s < 2; s++) {
        memcpy(a, x, (size_t)(T * H * D) * sizeof(float));
        memcpy(b, x, (size_t)(T * H * D) * sizeof(float));
        snug_op_rope_neox(NULL, a, T, H, D, n_rot, pos, 1e7f);
        snug_op_rope_mrope(NULL, b, T, H, D, n_rot, &same3[0][0], sect[s], 1e7f);
        CHECK(memcmp(a, b, (size_t)(T * H * D) * sizeof(float)) == 0);
        memcpy(b, x, (size_t)(T * H * D) * sizeof(float));
        snug_op_rope_mrope(NULL, b, T, H, D, n_rot, &pos3[0][0], sect[s], 1e7f);
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) {
                const float *xh = x + (t * H + h) * D;
                double *rh = ref + (t * H + h) * D;
                for (int64_t i = 0; i < D; i++) rh[i] = xh[i];
                for (int64_t i = 0; i < n_rot / 2; i++) {
                    int axis = 0; /* the reference rule, restated */
                    if (i % 3 == 1 && i < 3 * (int64_t)sect[s][1]) axis = 1;
                    if (i % 3 == 2 && i < 3 * (int64_t)sect[s][2]) axis = 2;
                    double th = pos3[t][axis] * pow(1e7, -2.0 * i / n_rot);
                    rh[i] = xh[i] * cos(th) - xh[i + n_rot / 2] * sin(th);
                    rh[i + n_rot / 2] = xh[i + n_rot / 2] * cos(th) + xh[i] * sin(th);
                }
            }
        struct errs e = compare(b, ref, T * H * D);
        printf("rope_mrope     max abs %.3g rel %.3g\n", e.abs, e.rel);
        CHECK(e.abs < 2e-6);
    }
    /* the sections matter: row 2's h and w differ from t, so the rotation differs */
    memcpy(a, x, (size_t)(T * H * D) * sizeof(float));
    int32_t p2 = 6;
    snug_op_rope_neox(NULL, a, 1, H, D, n_rot, &p2, 1e7f);
    memcpy(b, x, (size_t)(T * H * D) * sizeof(float));
    snug_op_rope_mrope(NULL, b, 1, H, D, n_rot, &pos3[2][0], sect[0], 1e7f);
    CHECK(memcmp(a, b, (size_t)(H * D) * sizeof(float)) != 0);
    snug_free(x), snug_free(a), snug_free(b), snug_free(ref);
}

/* ---- conv + silu --------------------------------------------------------------------------- */

static void test_conv(void) {
    int64_t C = 45, K = 4, Ts[3] = {5, 2, 1}, Ttot = 8;
    float *x = falloc(Ttot * C), *w = falloc(C * K), *st = falloc((K - 1) * C),
          *y = falloc(Ttot * C);
    double *ref = dalloc(Ttot * C), *hist = dalloc((K - 1 + Ttot) * C);
    fill(x, Ttot * C, 2.0f);
    fill(w, C * K, 1.0f);
    fill(st, (K - 1) * C, 2.0f);
    for (int64_t i = 0; i < (K - 1) * C; i++) hist[i] = st[i];
    for (int64_t i = 0; i < Ttot * C; i++) hist[(K - 1) * C + i] = x[i];
    for (int64_t t = 0; t < Ttot; t++) {
        for (int64_t c = 0; c < C; c++) {
            double a = 0;
            for (int64_t j = 0; j < K; j++) a += (double)w[c * K + j] * hist[(t + j) * C + c];
            ref[t * C + c] = a / (1.0 + exp(-a));
        }
    }
    int64_t t0 = 0;
    for (int i = 0; i < 3; i++) { /* three consecutive calls carry the state */
        snug_op_conv_silu(NULL, x + t0 * C, Ts[i], C, K, w, st, y + t0 * C);
        t0 += Ts[i];
    }
    struct errs e = compare(y, ref, Ttot * C);
    printf("conv_silu      max abs %.3g rel %.3g\n", e.abs, e.rel);
    CHECK(e.rel < 1e-6);
    int st_ok = 1; /* final state = last K-1 inputs */
    for (int64_t i = 0; i < (K - 1) * C; i++) st_ok &= st[i] == x[(Ttot - (K - 1)) * C + i];
    CHECK(st_ok);
    snug_free(x), snug_free(w), snug_free(st), snug_free(y), snug_free(ref), snug_free(hist);
}

/* ---- matmul -------------------------------------------------------------------------------- */

/* Every computable dtype: quantize a random weight, take its dequantized values (reference
 * dequantizer) as the truth, and compare y against a double dot with x, for T = 1, 3, 17 and
 * 600 (prompt chunks longer than SNUG_OP_MATMUL_INT8_MAX_T run on float activations, in
 * transposed tiles of 512 rows at this n_in: 600 takes two). */
static void test_matmul(void) {
    enum { TMAX = 600 };
    int64_t n_in = 512, n_out = 37, Ts[4] = {1, 3, 17, TMAX};
    float *wf = falloc(n_in * n_out), *wd = falloc(n_in * n_out), *x = falloc(TMAX * n_in);
    float *y[3];
    for (int i = 0; i < 3; i++) y[i] = falloc(TMAX * n_out);
    double *ref = dalloc(TMAX * n_out), *mag = dalloc(TMAX * n_out);
    size_t wb = snug_op_matmul_work_bytes(n_in, 3);
    void *work = snug_malloc(wb);
    uint8_t *wq =
        snug_malloc((size_t)snug_dtype_row_bytes(SNUG_DTYPE_F32, (uint64_t)n_in) * (size_t)n_out);
    int n_types = 0;
    for (uint32_t type = 0; type < SNUG_DTYPE_COUNT; type++) {
        const struct snug_dtype_info *info = snug_dtype_info(type);
        if (!info || !info->computable) continue;
        size_t rb = (size_t)snug_dtype_row_bytes(type, (uint64_t)n_in);
        fill(wf, n_in * n_out, 1.0f);
        fill(x, TMAX * n_in, 1.0f);
        int ok = 1;
        for (int64_t r = 0; r < n_out && ok; r++)
            ok = snug_quantize_row(type, wf + r * n_in, wq + (size_t)r * rb, n_in, NULL);
        if (!ok) {
            printf("matmul %-7s  skipped (quantize not available yet)\n", info->name);
            continue;
        }
        n_types++;
        for (int64_t r = 0; r < n_out; r++)
            snug_dequantize_row_ref(type, wq + (size_t)r * rb, wd + r * n_in, n_in);
        struct errs e[2] = {{0, 0}, {0, 0}}; /* T == 1, T > 1 */
        for (int ti = 0; ti < 4; ti++) {
            int64_t T = Ts[ti];
            double worst = 0;
            for (int64_t t = 0; t < T; t++) {
                for (int64_t r = 0; r < n_out; r++) {
                    double a = 0, m = 0;
                    for (int64_t i = 0; i < n_in; i++) {
                        a += (double)wd[r * n_in + i] * x[t * n_in + i];
                        m += fabs((double)wd[r * n_in + i] * x[t * n_in + i]);
                    }
                    ref[t * n_out + r] = a;
                    mag[t * n_out + r] = m;
                }
            }
            for (int p = 0; p < 3; p++) {
                memset(y[p], 0xff, (size_t)(T * n_out) * sizeof(float));
                snug_op_matmul(pools[p], type, wq, n_in, n_out, x, T, y[p], work);
            }
            CHECKF(memcmp(y[0], y[1], (size_t)(T * n_out) * 4) == 0 &&
                       memcmp(y[0], y[2], (size_t)(T * n_out) * 4) == 0,
                   "matmul %s T=%lld differs across thread counts", info->name, (long long)T);
            for (int64_t i = 0; i < T * n_out; i++) {
                double d = fabs(y[0][i] - ref[i]) / mag[i];
                if (!(d <= worst)) worst = d;
            }
            track(&e[T > 1], compare(y[0], ref, T * n_out));
            /* error relative to Σ|w·x|: float accumulation is ~1e-7; types whose kernels
             * quantize the activations to 8 bits (snug_act_int8_use) allow for that rounding */
            bool int8_act = snug_act_int8_use(type) && T <= SNUG_OP_MATMUL_INT8_MAX_T &&
                            snug_act_type(type) != SNUG_DTYPE_F32;
            /* longer chunks on int8 activations too where the vpdpbusd tile exists (Q4_K;
             * IQ4_XS and Q3_K, which have only the tile) */
            bool int8_tile = snug_act_int8_use(type) && snug_i8_supports(type);
            /* Q4_K / Q6_K prompt chunks run on 14-bit activations at the AVX-512 level */
            /* decode-sized Q6_K products run on 14-bit activations in two int8 planes */
            bool wide_act = !int8_act && T <= 8 && snug_act_wide_use(type);
            double tol = int8_act || int8_tile                                            ? 1e-2
                         : wide_act || type == SNUG_DTYPE_Q4_K || type == SNUG_DTYPE_Q6_K ? 2e-4
                                                                                          : 1e-5;
            CHECKF(worst < tol, "matmul %s T=%lld: err/Σ|wx| = %.3g", info->name, (long long)T,
                   worst);
            /* a prompt row gives the same bits as decoding that token alone (f32 weights, f16 /
             * bf16 up to SNUG_OP_MATMUL_F16_INPLACE_MAX_T rows, the int8 and 14-bit paths;
             * dequantize-then-dot prompts sum in another order) */
            bool same_path = int8_act || wide_act || type == SNUG_DTYPE_F32 ||
                             ((type == SNUG_DTYPE_F16 || type == SNUG_DTYPE_BF16) &&
                              T <= SNUG_OP_MATMUL_F16_INPLACE_MAX_T);
            if (T > 1 && same_path) {
                snug_op_matmul(pools[1], type, wq, n_in, n_out, x + (T - 1) * n_in, 1, y[1], work);
                CHECKF(memcmp(y[1], y[0] + (T - 1) * n_out, (size_t)n_out * 4) == 0,
                       "matmul %s: row %lld of T=%lld differs from T=1", info->name,
                       (long long)(T - 1), (long long)T);
            }
        }
        printf("matmul %-7s  T=1: max abs %.3g rel %.3g   T>1: max abs %.3g rel %.3g\n", info->name,
               e[0].abs, e[0].rel, e[1].abs, e[1].rel);
    }
    CHECK(n_types >= 1);
    for (int i = 0; i < 3; i++) snug_free(y[i]);
    snug_free(wf), snug_free(wd), snug_free(x), snug_free(ref), snug_free(mag), snug_free(work);
    snug_free(wq);
}

/* A rough bandwidth figure for a 4096×4096 weight at T = 1 (information only). */
static void bench_matmul(struct snug_pool *pool) {
    int64_t n = 4096;
    uint32_t types[2] = {SNUG_DTYPE_Q8_0, SNUG_DTYPE_F16};
    float *row = falloc(n), *x = falloc(16 * n), *y = falloc(16 * n);
    void *work = snug_malloc(snug_op_matmul_work_bytes(n, snug_pool_size(pool)));
    fill(x, 16 * n, 1.0f);
    for (int k = 0; k < 2; k++) {
        const struct snug_dtype_info *info = snug_dtype_info(types[k]);
        size_t rb = (size_t)snug_dtype_row_bytes(types[k], (uint64_t)n);
        uint8_t *w = snug_malloc(rb * (size_t)n);
        int ok = 1;
        for (int64_t r = 0; r < n && ok; r++) {
            fill(row, n, 1.0f);
            ok = snug_quantize_row(types[k], row, w + (size_t)r * rb, n, NULL);
        }
        if (ok) {
            for (int64_t T = 1; T <= 16; T += 15) {
                double t0 = snug_time_s();
                snug_op_matmul(pool, types[k], w, n, n, x, T, y, work); /* warm up */
                int reps = (int)SNUG_MIN(20.0, SNUG_MAX(1.0, 0.3 / (snug_time_s() - t0)));
                t0 = snug_time_s();
                for (int i = 0; i < reps; i++)
                    snug_op_matmul(pool, types[k], w, n, n, x, T, y, work);
                double dt = (snug_time_s() - t0) / reps;
                printf("bench matmul %s 4096x4096 T=%lld, %d threads: %.3f ms, %.2f GB/s of "
                       "weights, %.2f GFLOP/s\n",
                       info->name, (long long)T, snug_pool_size(pool), dt * 1e3,
                       (double)(rb * (size_t)n) / dt / 1e9, 2.0 * n * n * T / dt / 1e9);
            }
        }
        snug_free(w);
    }
    snug_free(row), snug_free(x), snug_free(y), snug_free(work);
}

/* ---- attention ----------------------------------------------------------------------------- */

/* Reads position p, element i of the cache back as float. */
static double kv_get(const struct snug_kv_view *kv, const void *base, int64_t idx) {
    if (kv->type == SNUG_DTYPE_F32) return ((const float *)base)[idx];
    return snug_ops_f16_to_f32(((const uint16_t *)base)[idx]);
}

/* Two consecutive chunks (T1 tokens at 0, then T2 at T1) against full softmax attention in
 * double over the cache contents; thread counts 1, 2, 3 must agree bit for bit. */
static void attn_case(int64_t Hq, int64_t Hkv, int64_t D, uint32_t type, int64_t T1, int64_t T2,
                      struct errs *acc) {
    int64_t n_ctx = T1 + T2 + 3, row = Hkv * D, es = type == SNUG_DTYPE_F32 ? 4 : 2;
    struct snug_kv_view kv = {.type = type,
                              .k = snug_malloc((size_t)(n_ctx * row * es)),
                              .v = snug_malloc((size_t)(n_ctx * row * es)),
                              .n_ctx = n_ctx};
    int64_t Tt = T1 + T2;
    float *k = falloc(Tt * row), *v = falloc(Tt * row), *q = falloc(Tt * Hq * D);
    float *out[3];
    for (int i = 0; i < 3; i++) out[i] = falloc(Tt * Hq * D);
    double *ref = dalloc(Tt * Hq * D), *sc = dalloc(Tt);
    fill(k, Tt * row, 1.0f);
    fill(v, Tt * row, 1.0f);
    fill(q, Tt * Hq * D, 3.0f); /* peaky enough that the softmax max matters */
    void *work = snug_malloc(snug_op_attention_work_bytes(D, 3));
    float scale = 1.0f / sqrtf((float)D);
    snug_op_kv_store(&kv, Hkv, D, 0, T1, k, v);
    for (int p = 0; p < 3; p++)
        snug_op_attention(pools[p], &kv, Hq, Hkv, D, 0, T1, q, scale, out[p], work);
    snug_op_kv_store(&kv, Hkv, D, T1, T2, k + T1 * row, v + T1 * row);
    for (int p = 0; p < 3; p++)
        snug_op_attention(pools[p], &kv, Hq, Hkv, D, T1, T2, q + T1 * Hq * D, scale,
                          out[p] + T1 * Hq * D, work);
    /* the cache holds the rows, rounded to its dtype */
    double cache_err = 0;
    for (int64_t i = 0; i < Tt * row; i++) {
        double dk = fabs(kv_get(&kv, kv.k, i) - k[i]), dv = fabs(kv_get(&kv, kv.v, i) - v[i]);
        cache_err = fmax(cache_err, fmax(dk, dv));
    }
    CHECKF(cache_err <= (type == SNUG_DTYPE_F32 ? 0.0 : 1.0 / 2048), "kv_store err %.3g",
           cache_err);
    int64_t g = Hq / Hkv;
    for (int64_t t = 0; t < Tt; t++) {
        for (int64_t h = 0; h < Hq; h++) {
            int64_t kh = h / g;
            double mx = -INFINITY, sum = 0;
            for (int64_t p = 0; p <= t; p++) {
                double s = 0;
                for (int64_t i = 0; i < D; i++)
                    s += (double)q[(t * Hq + h) * D + i] * kv_get(&kv, kv.k, p * row + kh * D + i);
                sc[p] = s * scale;
                mx = fmax(mx, sc[p]);
            }
            double *o = ref + (t * Hq + h) * D;
            for (int64_t i = 0; i < D; i++) o[i] = 0;
            for (int64_t p = 0; p <= t; p++) {
                double e = exp(sc[p] - mx);
                sum += e;
                for (int64_t i = 0; i < D; i++) o[i] += e * kv_get(&kv, kv.v, p * row + kh * D + i);
            }
            for (int64_t i = 0; i < D; i++) o[i] /= sum;
        }
    }
    struct errs e = compare(out[0], ref, Tt * Hq * D);
    track(acc, e);
    CHECKF(e.abs < 2e-5, "attention Hq=%lld Hkv=%lld D=%lld %s T=%lld+%lld: max abs %.3g",
           (long long)Hq, (long long)Hkv, (long long)D, type == SNUG_DTYPE_F32 ? "f32" : "f16",
           (long long)T1, (long long)T2, e.abs);
    size_t nb = (size_t)(Tt * Hq * D) * sizeof(float);
    CHECKF(memcmp(out[0], out[1], nb) == 0 && memcmp(out[0], out[2], nb) == 0,
           "attention differs across thread counts (Hq=%lld Hkv=%lld)", (long long)Hq,
           (long long)Hkv);
    for (int i = 0; i < 3; i++) snug_free(out[i]);
    snug_free(kv.k), snug_free(kv.v), snug_free(k), snug_free(v), snug_free(q), snug_free(ref);
    snug_free(sc), snug_free(work);
}

static void test_attention(void) {
    struct errs e = {0, 0};
    attn_case(2, 2, 64, SNUG_DTYPE_F32, 37, 50, &e);    /* ratio 1 */
    attn_case(4, 2, 64, SNUG_DTYPE_F16, 100, 1, &e);    /* ratio 2, decode after prompt */
    attn_case(6, 2, 256, SNUG_DTYPE_F32, 130, 170, &e); /* ratio 3, T up to 300 */
    attn_case(3, 1, 256, SNUG_DTYPE_F16, 64, 65, &e);   /* ratio 3, tile edges */
    attn_case(2, 1, 256, SNUG_DTYPE_F16, 1, 1, &e);     /* ratio 2, one token each */
    attn_case(12, 1, 64, SNUG_DTYPE_F32, 10, 5, &e);    /* group larger than a task's */
    printf("attention      max abs %.3g rel %.3g\n", e.abs, e.rel);
}

/* f16 helpers of the attention cache against the quant module's reference conversions. */
static void test_f16(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float a = snug_ops_f16_to_f32((uint16_t)h), b = snug_f16_to_f32((uint16_t)h);
        if (isnan(b) ? !isnan(a) : memcmp(&a, &b, 4) != 0) bad++;
        if (!isnan(b) && snug_ops_f32_to_f16(b) != h) bad++;
    }
    for (int i = 0; i < 200000; i++) {
        float f = frand() * ldexpf(1.0f, (int)(frand() * 40.0f));
        if (snug_ops_f32_to_f16(f) != snug_f32_to_f16(f)) bad++;
    }
    CHECKF(bad == 0, "%d f16 conversion mismatches", bad);
}

/* ---- gated delta rule ---------------------------------------------------------------------- */

/* The recurrence of ops.h in double: per token S ← e^g S; δ = β(v − Sᵀk); S += k δᵀ; o = Sᵀq. */
static void delta_naive(int64_t T, int64_t Nk, int64_t Nv, int64_t dk, int64_t dv, const float *q,
                        const float *k, const float *v, const float *g, const float *beta,
                        double *S, double *out) {
    double *d = dalloc(dv);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t j = 0; j < Nv; j++) {
            const float *qt = q + (t * Nk + j % Nk) * dk, *kt = k + (t * Nk + j % Nk) * dk;
            const float *vt = v + (t * Nv + j) * dv;
            double *Sj = S + j * dk * dv, decay = exp((double)g[t * Nv + j]), b = beta[t * Nv + j];
            for (int64_t i = 0; i < dk * dv; i++) Sj[i] *= decay;
            for (int64_t x = 0; x < dv; x++) {
                double u = 0;
                for (int64_t i = 0; i < dk; i++) u += Sj[i * dv + x] * kt[i];
                d[x] = b * (vt[x] - u);
            }
            for (int64_t i = 0; i < dk; i++)
                for (int64_t x = 0; x < dv; x++) Sj[i * dv + x] += kt[i] * d[x];
            for (int64_t x = 0; x < dv; x++) {
                double o = 0;
                for (int64_t i = 0; i < dk; i++) o += Sj[i * dv + x] * qt[i];
                out[(t * Nv + j) * dv + x] = o;
            }
        }
    }
    snug_free(d);
}

/* Random realistic inputs: L2-normalised q, k (q also ×1/sqrt(dk)), g in [gmin, 0], β in (0,1). */
static void delta_inputs(int64_t T, int64_t Nk, int64_t Nv, int64_t dk, int64_t dv, float gmin,
                         float *q, float *k, float *v, float *g, float *beta) {
    fill(q, T * Nk * dk, 1.0f);
    fill(k, T * Nk * dk, 1.0f);
    fill(v, T * Nv * dv, 1.0f);
    snug_op_l2norm(NULL, q, T * Nk, dk, 1e-6f);
    snug_op_l2norm(NULL, k, T * Nk, dk, 1e-6f);
    for (int64_t i = 0; i < T * Nk * dk; i++) q[i] /= sqrtf((float)dk);
    for (int64_t i = 0; i < T * Nv; i++) {
        g[i] = gmin * frand01();
        beta[i] = 0.001f + 0.998f * frand01();
    }
}

/* Two consecutive calls of T and T2 tokens (mode 0: chunked + chunked, 1: step + step,
 * 2: chunked then step) from a non-zero state, against the naive recurrence over all T+T2. */
static void delta_case(int mode, int64_t T, int64_t T2, int64_t Nk, int64_t Nv, int64_t d,
                       float gmin, struct errs *acc) {
    int64_t dk = d, dv = d, Tt = T + T2;
    float *q = falloc(Tt * Nk * dk), *k = falloc(Tt * Nk * dk), *v = falloc(Tt * Nv * dv);
    float *g = falloc(Tt * Nv), *beta = falloc(Tt * Nv), *S0 = falloc(Nv * dk * dv);
    float *S[3], *out[3];
    double *Sref = dalloc(Nv * dk * dv), *oref = dalloc(Tt * Nv * dv);
    delta_inputs(Tt, Nk, Nv, dk, dv, gmin, q, k, v, g, beta);
    fill(S0, Nv * dk * dv, 0.5f);
    for (int64_t i = 0; i < Nv * dk * dv; i++) Sref[i] = S0[i];
    delta_naive(Tt, Nk, Nv, dk, dv, q, k, v, g, beta, Sref, oref);
    void *work = snug_malloc(snug_op_gated_delta_work_bytes(dk, dv, 3));
    for (int p = 0; p < 3; p++) {
        S[p] = falloc(Nv * dk * dv);
        out[p] = falloc(Tt * Nv * dv);
        memcpy(S[p], S0, (size_t)(Nv * dk * dv) * sizeof(float));
        int64_t t0 = 0, lens[2] = {T, T2};
        for (int call = 0; call < 2; call++) {
            int64_t n = lens[call];
            const float *qc = q + t0 * Nk * dk, *kc = k + t0 * Nk * dk, *vc = v + t0 * Nv * dv;
            if (mode == 1 || (mode == 2 && call == 1)) {
                snug_op_gated_delta_step(pools[p], n, Nk, Nv, dk, dv, qc, kc, vc, g + t0 * Nv,
                                         beta + t0 * Nv, S[p], out[p] + t0 * Nv * dv);
            } else {
                snug_op_gated_delta_chunked(pools[p], n, Nk, Nv, dk, dv, qc, kc, vc, g + t0 * Nv,
                                            beta + t0 * Nv, S[p], out[p] + t0 * Nv * dv, work);
            }
            t0 += n;
        }
    }
    struct errs eo = compare(out[0], oref, Tt * Nv * dv), es = compare(S[0], Sref, Nv * dk * dv);
    track(acc, eo);
    track(acc, es);
    CHECKF(eo.abs < 1e-4 && es.abs < 1e-4,
           "delta mode %d T=%lld+%lld Nk=%lld Nv=%lld d=%lld: out err %.3g state err %.3g", mode,
           (long long)T, (long long)T2, (long long)Nk, (long long)Nv, (long long)d, eo.abs, es.abs);
    size_t nb = (size_t)(Tt * Nv * dv) * 4, sb = (size_t)(Nv * dk * dv) * 4;
    CHECKF(memcmp(out[0], out[1], nb) == 0 && memcmp(out[0], out[2], nb) == 0 &&
               memcmp(S[0], S[1], sb) == 0 && memcmp(S[0], S[2], sb) == 0,
           "delta mode %d differs across thread counts", mode);
    for (int p = 0; p < 3; p++) snug_free(S[p]), snug_free(out[p]);
    snug_free(q), snug_free(k), snug_free(v), snug_free(g), snug_free(beta), snug_free(S0);
    snug_free(Sref), snug_free(oref), snug_free(work);
}

/* ---- encoder attention (the vision tower): a double reference, odd T, any thread count --- */
static void test_attention_full(void) {
    int64_t Ts[4] = {1, 5, 37, 130}, H = 3, hd = 20, D = H * hd, st = 3 * D + 4;
    for (int ti = 0; ti < 4; ti++) {
        int64_t T = Ts[ti];
        float *qkv = snug_malloc((size_t)(T * st) * sizeof(float));
        for (int64_t i = 0; i < T * st; i++) qkv[i] = frand() * 2.0f;
        const float *q = qkv, *k = qkv + D, *v = qkv + 2 * D;
        float scale = 1.0f / sqrtf((float)hd), *out[3];
        double *ref = snug_malloc((size_t)(T * D) * sizeof(double));
        double *p = snug_malloc((size_t)T * sizeof(double));
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < T; i++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < T; j++) {
                    double s = 0;
                    for (int64_t d = 0; d < hd; d++)
                        s += (double)q[i * st + h * hd + d] * k[j * st + h * hd + d];
                    p[j] = s * scale;
                    mx = p[j] > mx ? p[j] : mx;
                }
                for (int64_t j = 0; j < T; j++) sum += p[j] = exp(p[j] - mx);
                for (int64_t d = 0; d < hd; d++) {
                    double o = 0;
                    for (int64_t j = 0; j < T; j++) o += p[j] / sum * v[j * st + h * hd + d];
                    ref[i * D + h * hd + d] = o;
                }
            }
        void *work = snug_malloc(snug_op_attention_full_work_bytes(T, 3));
        for (int t = 0; t < 3; t++) {
            out[t] = snug_malloc((size_t)(T * D) * sizeof(float));
            snug_op_attention_full(pools[t], q, k, v, st, T, H, hd, scale, out[t], work);
        }
        struct errs e = compare(out[0], ref, T * D);
        CHECKF(e.rel < 1e-5, "attention_full T=%lld: rel %.3g", (long long)T, e.rel);
        CHECKF(!memcmp(out[0], out[1], (size_t)(T * D) * 4) &&
                   !memcmp(out[0], out[2], (size_t)(T * D) * 4),
               "attention_full T=%lld differs across thread counts", (long long)T);
        printf("attention_full T=%-4lld max abs %.3g rel %.3g\n", (long long)T, e.abs, e.rel);
        for (int t = 0; t < 3; t++) snug_free(out[t]);
        snug_free(work), snug_free(p), snug_free(ref), snug_free(qkv);
    }
}

static void test_delta(void) {
    int64_t Ts[7] = {1, 5, 63, 64, 65, 130, 200};
    int64_t heads[3][2] = {{2, 6}, {2, 2}, {1, 4}}, ds[2] = {16, 64};
    struct errs ec = {0, 0}, es = {0, 0}, em = {0, 0};
    for (int ti = 0; ti < 7; ti++)
        for (int hi = 0; hi < 3; hi++)
            for (int di = 0; di < 2; di++)
                delta_case(0, Ts[ti], Ts[(ti + 3) % 7], heads[hi][0], heads[hi][1], ds[di], -3.0f,
                           &ec);
    /* slow decay: the in-chunk products stay large, the harder case for the WY form */
    delta_case(0, 200, 70, 2, 6, 64, -0.05f, &ec);
    delta_case(0, 128, 1, 1, 4, 128, -0.01f, &ec);
    printf("delta chunked  max abs %.3g rel %.3g\n", ec.abs, ec.rel);
    delta_case(1, 1, 1, 2, 6, 64, -3.0f, &es);
    delta_case(1, 7, 3, 1, 4, 16, -3.0f, &es);
    delta_case(1, 40, 9, 2, 2, 128, -0.05f, &es);
    printf("delta step     max abs %.3g rel %.3g\n", es.abs, es.rel);
    delta_case(2, 100, 5, 2, 6, 64, -1.0f, &em);
    delta_case(2, 64, 1, 1, 4, 16, -3.0f, &em);
    printf("delta mixed    max abs %.3g rel %.3g\n", em.abs, em.rel);
}

/* Prompt-shaped DeltaNet timing (27B-like heads: Nk 16, Nv 48, dk = dv = 128, T = 256):
 * the chunked form against the step recurrence over the same tokens (information only). */
static void bench_delta(struct snug_pool *pool) {
    int64_t T = 256, Nk = 16, Nv = 48, d = 128;
    float *q = falloc(T * Nk * d), *k = falloc(T * Nk * d), *v = falloc(T * Nv * d);
    float *g = falloc(T * Nv), *beta = falloc(T * Nv), *S = falloc(Nv * d * d);
    float *out = falloc(T * Nv * d);
    void *work = snug_malloc(snug_op_gated_delta_work_bytes(d, d, snug_pool_size(pool)));
    delta_inputs(T, Nk, Nv, d, d, -1.0f, q, k, v, g, beta);
    double t0 = snug_time_s();
    snug_op_gated_delta_chunked(pool, T, Nk, Nv, d, d, q, k, v, g, beta, S, out, work);
    double t1 = snug_time_s();
    snug_op_gated_delta_step(pool, T, Nk, Nv, d, d, q, k, v, g, beta, S, out);
    double t2 = snug_time_s();
    printf("bench delta Nv=48 d=128 T=256, %d threads: chunked %.1f ms, step %.1f ms\n",
           snug_pool_size(pool), (t1 - t0) * 1e3, (t2 - t1) * 1e3);
    snug_free(q), snug_free(k), snug_free(v), snug_free(g), snug_free(beta), snug_free(S);
    snug_free(out), snug_free(work);
}

/* Timings are meaningless (and slow) under the sanitizers: skip them there. */
#if defined(__SANITIZE_ADDRESS__)
#define SNUG_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SNUG_TEST_SANITIZED 1
#endif
#endif

int main(void) {
    struct snug_err err;
    for (int i = 0; i < 3; i++) {
        int rc = snug_pool_init(&pools[i], i + 1, &err);
        CHECK(rc == SNUG_OK);
        if (rc != SNUG_OK) return TEST_DONE();
    }
    test_f16();
    test_norms();
    test_rope();
    test_rope_mrope();
    test_conv();
    test_matmul();
    test_attention();
    test_attention_full();
    test_delta();
#ifdef SNUG_TEST_SANITIZED
    printf("bench skipped (sanitizer build)\n");
    (void)bench_matmul;
    (void)bench_delta;
#else
    struct snug_pool *big = NULL;
    if (snug_pool_init(&big, 0, &err) == SNUG_OK) {
        bench_matmul(big);
        bench_delta(big);
        snug_pool_free(big);
    }
#endif
    for (int i = 0; i < 3; i++) snug_pool_free(pools[i]);
    return TEST_DONE();
}
