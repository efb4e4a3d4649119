/* test_model_ewise.c — the vectorised exp of ops_util.h (snug_ops_expf, and the SiLU / sigmoid
 * built on it) against glibc expf and double precision, and the threaded element-wise ops of
 * ops_basic.c (rmsnorm, l2norm, rope, swiglu, sigmoid_mul, add, gated rmsnorm, conv + SiLU,
 * MoE combine, shared-expert add) on shapes above SNUG_OP_EWISE_PAR_MIN: results for 1, 2 and
 * 3 threads must be bit-identical to the calling-thread run (pool NULL), in-place calls must
 * match out-of-place ones, and everything is checked against a double reference written here.
 * test_model_ops.c covers the same ops on small shapes. Read next: src/backend/cpu/ops_basic.c. */
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_util.h"
#include "core/core.h"
#include "test.h"

#include <float.h>
#include <stdint.h>

static uint64_t rng_state = 0x51ed2701f3a5c9b7ull;
static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static float frand(void) { /* uniform in [-1, 1) */
    return (float)((rng_next() >> 40) * (1.0 / 8388608.0)) - 1.0f;
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
static float *fdup(const float *x, int64_t n) {
    float *p = falloc(n);
    memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}
static bool same(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}
/* Max |got − ref| / max|ref| (NaN counts as failure). */
static double rel_err(const float *got, const double *ref, int64_t n) {
    double mx = 0, ea = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= ea)) ea = e;
    }
    return ea / (mx > 1e-30 ? mx : 1e-30);
}

static struct snug_pool *pools[3]; /* 1, 2, 3 threads */

/* ---- exp ------------------------------------------------------------------------------------ */

static uint32_t fbits(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}
static float bitsf(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* The vector form: blocks of SNUG_OPS_BLK through the op clones, as the ops run it. */
SNUG_OPS_CLONES
static void exp_blocks(const float *restrict x, float *restrict y, int64_t n) {
    int64_t i = 0;
    for (; i + SNUG_OPS_BLK <= n; i += SNUG_OPS_BLK)
        for (int j = 0; j < SNUG_OPS_BLK; j++) y[i + j] = snug_ops_expf(x[i + j]);
    for (; i < n; i++) y[i] = snug_ops_expf(x[i]);
}

/* Distance in units in the last place between two finite non-negative floats or equal
 * infinities; NaN must meet NaN. Returns a large value on any mismatch of kind. */
static int64_t ulp_dist(float got, float want) {
    if (want != want) return got != got ? 0 : INT32_MAX;
    if (got != got || got < 0.0f) return INT32_MAX;
    return llabs((long long)fbits(got) - (long long)fbits(want));
}

/* Every 401st bit pattern of the float range (10.7 million values, both signs, subnormals,
 * infinities and NaNs), every float in the overflow and underflow edge ranges [88, 89] and
 * [-104, -86] at a stride of 7, and the special values: the vector path and the scalar path
 * must give the same bits, within 2 ulp of glibc expf (measured max 1). */
static void test_exp(void) {
    enum { CH = 4096 };
    float *x = falloc(CH), *y = falloc(CH);
    int64_t n_total = 0, worst = 0;
    float worst_x = 0;
    int vec_scalar_same = 1;
    int phase = 0;
    uint64_t u = 0;
    uint32_t lo1 = fbits(88.0f), hi1 = fbits(89.0f), lo2 = fbits(-86.0f), hi2 = fbits(-104.0f);
    for (;;) {
        int n = 0;
        while (n < CH && phase < 3) {
            if (phase == 0) {
                x[n++] = bitsf((uint32_t)u);
                u += 401;
                if (u > 0xffffffffull) phase = 1, u = lo1;
            } else if (phase == 1) {
                x[n++] = bitsf((uint32_t)u);
                u += 7;
                if (u > hi1) phase = 2, u = lo2;
            } else {
                x[n++] = bitsf((uint32_t)u);
                u += 7;
                if (u > hi2) phase = 3;
            }
        }
        if (n == 0) break;
        exp_blocks(x, y, n);
        for (int i = 0; i < n; i++) {
            float want = expf(x[i]);
            int64_t d = ulp_dist(y[i], want);
            if (d > worst) worst = d, worst_x = x[i];
            float s = snug_ops_expf(x[i]);
            vec_scalar_same &= fbits(s) == fbits(y[i]) || (s != s && y[i] != y[i]);
        }
        n_total += n;
    }
    printf("expf           %lld values, max %lld ulp (at %a)\n", (long long)n_total,
           (long long)worst, worst_x);
    CHECK(n_total >= 10000000);
    CHECK(worst <= 2);
    CHECK(vec_scalar_same);

    const float sp[] = {0.0f,        -0.0f,    1.0f,      -1.0f,     INFINITY, -INFINITY,
                        NAN,         -NAN,     FLT_MAX,   -FLT_MAX,  FLT_MIN,  -FLT_MIN,
                        1e-45f,      -1e-45f,  88.72283f, 88.72284f, 88.7229f, -87.33654f,
                        -103.97f,    -103.98f, -104.0f,   -1000.0f,  1000.0f,  0.5f * 0.6931472f,
                        -0.3465736f, 1e-7f,    -1e-7f,    20.0f,     -20.0f,   -88.0f};
    int n_sp = (int)(sizeof sp / sizeof sp[0]), ok = 1;
    float ys[32];
    exp_blocks(sp, ys, n_sp);
    for (int i = 0; i < n_sp; i++) {
        int64_t d = ulp_dist(ys[i], expf(sp[i]));
        if (d > 2) {
            printf("  exp(%a) = %a, expf %a\n", sp[i], ys[i], expf(sp[i]));
            ok = 0;
        }
    }
    CHECK(ok);
    CHECK(snug_ops_expf(-INFINITY) == 0.0f && snug_ops_expf(INFINITY) == INFINITY);
    CHECK(isnan(snug_ops_expf(NAN)) && snug_ops_expf(0.0f) == 1.0f);
    CHECK(snug_ops_expf(100.0f) == INFINITY && snug_ops_expf(-110.0f) == 0.0f);

    /* SiLU and sigmoid against double, relative to the value (away from the underflow of
     * e^-x, |x| < 80) */
    double es = 0, eg = 0;
    for (int i = 0; i < 1000000; i++) {
        float v = 80.0f * frand();
        double sd = 1.0 / (1.0 + exp(-(double)v));
        double e1 = fabs(snug_ops_sigmoid(v) - sd) / sd, e2 = fabs(snug_ops_silu(v) - v * sd);
        e2 /= fabs(v * sd) > 1e-30 ? fabs(v * sd) : 1e-30;
        if (e1 > eg) eg = e1;
        if (e2 > es) es = e2;
    }
    printf("silu / sigmoid max rel %.3g / %.3g\n", es, eg);
    CHECK(es < 4e-7 && eg < 4e-7);
    CHECK(snug_ops_silu(-1000.0f) == 0.0f && snug_ops_sigmoid(-INFINITY) == 0.0f);
    CHECK(snug_ops_sigmoid(INFINITY) == 1.0f && isnan(snug_ops_silu(NAN)));
    snug_free(x), snug_free(y);
}

/* ---- threaded element-wise ops ---------------------------------------------------------------
 * Each op runs once on the calling thread (pool NULL) and once per pool; every pooled result
 * must equal the first bit for bit. */

static void test_norms_rope(void) {
    int64_t T = 37, n = 2051; /* 75887 elements: above SNUG_OP_EWISE_PAR_MIN */
    CHECK(T * n >= SNUG_OP_EWISE_PAR_MIN);
    float *x = falloc(T * n), *w = falloc(n), *y0 = falloc(T * n), *y = falloc(T * n);
    double *ref = dalloc(T * n);
    fill(x, T * n, 3.0f);
    fill(w, n, 1.5f);
    snug_op_rmsnorm(NULL, x, w, 1e-6f, T, n, y0);
    for (int64_t t = 0; t < T; t++) {
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[t * n + i] * x[t * n + i];
        double s = 1.0 / sqrt(ss / n + 1e-6);
        for (int64_t i = 0; i < n; i++) ref[t * n + i] = x[t * n + i] * s * w[i];
    }
    double e = rel_err(y0, ref, T * n);
    int ok = 1;
    for (int p = 0; p < 3; p++) {
        snug_op_rmsnorm(pools[p], x, w, 1e-6f, T, n, y);
        ok &= same(y, y0, T * n);
        memcpy(y, x, (size_t)(T * n) * sizeof(float)); /* in place */
        snug_op_rmsnorm(pools[p], y, w, 1e-6f, T, n, y);
        ok &= same(y, y0, T * n);
    }
    printf("rmsnorm  pool  rel %.3g, threads identical %d\n", e, ok);
    CHECK(e < 1e-6 && ok);

    /* l2norm: rows of 128 (the DeltaNet head size) */
    int64_t m = 128, rows = T * n / m;
    memcpy(y0, x, (size_t)(rows * m) * sizeof(float));
    snug_op_l2norm(NULL, y0, rows, m, 1e-6f);
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t i = 0; i < m; i++) ss += (double)x[r * m + i] * x[r * m + i];
        for (int64_t i = 0; i < m; i++) ref[r * m + i] = x[r * m + i] / sqrt(ss + 1e-6);
    }
    e = rel_err(y0, ref, rows * m);
    ok = 1;
    for (int p = 0; p < 3; p++) {
        memcpy(y, x, (size_t)(rows * m) * sizeof(float));
        snug_op_l2norm(pools[p], y, rows, m, 1e-6f);
        ok &= same(y, y0, rows * m);
    }
    printf("l2norm   pool  rel %.3g, threads identical %d\n", e, ok);
    CHECK(e < 1e-6 && ok);

    /* rope: 41 tokens × 7 heads × 256 (n_rot 64) */
    int64_t Tr = 41, H = 7, D = 256, n_rot = 64;
    int32_t pos[41];
    for (int t = 0; t < Tr; t++) pos[t] = t * 997 + 3;
    memcpy(y0, x, (size_t)(Tr * H * D) * sizeof(float));
    snug_op_rope_neox(NULL, y0, Tr, H, D, n_rot, pos, 1e7f);
    for (int64_t t = 0; t < Tr; t++)
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
    e = rel_err(y0, ref, Tr * H * D);
    ok = 1;
    for (int p = 0; p < 3; p++) {
        memcpy(y, x, (size_t)(Tr * H * D) * sizeof(float));
        snug_op_rope_neox(pools[p], y, Tr, H, D, n_rot, pos, 1e7f);
        ok &= same(y, y0, Tr * H * D);
    }
    printf("rope     pool  rel %.3g, threads identical %d\n", e, ok);
    CHECK(e < 2e-6 && ok);
    snug_free(x), snug_free(w), snug_free(y0), snug_free(y), snug_free(ref);
}

static void test_flat(void) {
    int64_t n = 100003; /* odd: a tail block and uneven thread shares */
    float *a = falloc(n), *b = falloc(n), *y0 = falloc(n), *y = falloc(n);
    double *ref = dalloc(n);
    fill(a, n, 12.0f);
    fill(b, n, 12.0f);
    for (int kind = 0; kind < 3; kind++) {
        const char *name = kind == 0 ? "swiglu" : kind == 1 ? "sigmoid_mul" : "add";
        for (int64_t i = 0; i < n; i++) {
            double s = 1.0 / (1.0 + exp(-(double)(kind == 0 ? a[i] : b[i])));
            ref[i] = kind == 0 ? a[i] * s * b[i] : kind == 1 ? a[i] * s : (double)a[i] + b[i];
        }
        if (kind == 0) snug_op_swiglu(NULL, a, b, n, y0);
        if (kind == 1) snug_op_sigmoid_mul(NULL, a, b, n, y0);
        if (kind == 2) memcpy(y0, a, (size_t)n * 4), snug_op_add(NULL, y0, b, n);
        double e = rel_err(y0, ref, n);
        int ok = 1;
        for (int p = 0; p < 3; p++) {
            for (int inplace = 0; inplace < 3; inplace++) { /* y separate, y = a, y = b */
                if (kind == 2 && inplace == 2) continue;    /* add: x += y is in place */
                float *out = inplace == 1 ? fdup(a, n) : inplace == 2 ? fdup(b, n) : y;
                const float *ia = inplace == 1 ? out : a, *ib = inplace == 2 ? out : b;
                if (kind == 0) snug_op_swiglu(pools[p], ia, ib, n, out);
                if (kind == 1) snug_op_sigmoid_mul(pools[p], ia, ib, n, out);
                if (kind == 2) {
                    memcpy(out, a, (size_t)n * 4);
                    snug_op_add(pools[p], out, b, n);
                }
                ok &= same(out, y0, n);
                if (out != y) snug_free(out);
            }
        }
        printf("%-12s pool rel %.3g, threads identical %d\n", name, e, ok);
        CHECK(e < 5e-7 && ok);
    }
    snug_free(a), snug_free(b), snug_free(y0), snug_free(y), snug_free(ref);
}

static void test_gated_rmsnorm(void) {
    int64_t T = 23, Nv = 16, dv = 200; /* 73600 elements */
    int64_t n = T * Nv * dv;
    float *o = falloc(n), *z = falloc(n), *w = falloc(dv), *y0 = falloc(n), *y = falloc(n);
    double *ref = dalloc(n);
    fill(o, n, 2.0f);
    fill(z, n, 8.0f);
    fill(w, dv, 1.5f);
    snug_op_gated_rmsnorm(NULL, o, z, w, 1e-6f, T, Nv, dv, y0);
    for (int64_t r = 0; r < T * Nv; r++) {
        double ss = 0;
        for (int64_t i = 0; i < dv; i++) ss += (double)o[r * dv + i] * o[r * dv + i];
        double s = 1.0 / sqrt(ss / dv + 1e-6);
        for (int64_t i = 0; i < dv; i++) {
            double zz = z[r * dv + i];
            ref[r * dv + i] = w[i] * o[r * dv + i] * s * zz / (1.0 + exp(-zz));
        }
    }
    double e = rel_err(y0, ref, n);
    int ok = 1;
    for (int p = 0; p < 3; p++) {
        snug_op_gated_rmsnorm(pools[p], o, z, w, 1e-6f, T, Nv, dv, y);
        ok &= same(y, y0, n);
        float *oo = fdup(o, n), *zz = fdup(z, n); /* y aliasing o, then z */
        snug_op_gated_rmsnorm(pools[p], oo, z, w, 1e-6f, T, Nv, dv, oo);
        snug_op_gated_rmsnorm(pools[p], o, zz, w, 1e-6f, T, Nv, dv, zz);
        ok &= same(oo, y0, n) && same(zz, y0, n);
        snug_free(oo), snug_free(zz);
    }
    printf("gated_rmsnorm pool rel %.3g, threads identical %d\n", e, ok);
    CHECK(e < 1e-6 && ok);
    snug_free(o), snug_free(z), snug_free(w), snug_free(y0), snug_free(y), snug_free(ref);
}

/* Conv + SiLU over a prompt of 300 tokens in calls of 290, 7, 2 and 1 tokens (the state carried
 * between them; the small calls stay on the calling thread), C = 600 channels (two channel
 * blocks and a short one), K = 4; also K = 1 (no state) and K = 11 (the strided weight path). */
static void test_conv(void) {
    int64_t C = 600, Ttot = 300, Ts[4] = {290, 7, 2, 1};
    int64_t Ks[3] = {4, 1, 11};
    for (int ki = 0; ki < 3; ki++) {
        int64_t K = Ks[ki], keep = K - 1;
        float *x = falloc(Ttot * C), *w = falloc(C * K), *st0 = falloc(keep * C),
              *y0 = falloc(Ttot * C), *y = falloc(Ttot * C), *st = falloc(keep * C),
              *stp = falloc(keep * C);
        double *ref = dalloc(Ttot * C), *hist = dalloc((keep + Ttot) * C);
        fill(x, Ttot * C, 2.0f);
        fill(w, C * K, 1.0f);
        fill(st0, keep * C, 2.0f);
        for (int64_t i = 0; i < keep * C; i++) hist[i] = st0[i];
        for (int64_t i = 0; i < Ttot * C; i++) hist[keep * C + i] = x[i];
        for (int64_t t = 0; t < Ttot; t++)
            for (int64_t c = 0; c < C; c++) {
                double acc = 0;
                for (int64_t j = 0; j < K; j++) acc += (double)w[c * K + j] * hist[(t + j) * C + c];
                ref[t * C + c] = acc / (1.0 + exp(-acc));
            }
        memcpy(st, st0, (size_t)(keep * C) * 4);
        int64_t t0 = 0;
        for (int i = 0; i < 4; i++) {
            snug_op_conv_silu(NULL, x + t0 * C, Ts[i], C, K, w, st, y0 + t0 * C);
            t0 += Ts[i];
        }
        double e = rel_err(y0, ref, Ttot * C);
        int st_ok = 1;
        for (int64_t i = 0; i < keep * C; i++) st_ok &= st[i] == x[(Ttot - keep) * C + i];
        int ok = 1;
        for (int p = 0; p < 3; p++) {
            memcpy(stp, st0, (size_t)(keep * C) * 4);
            t0 = 0;
            for (int i = 0; i < 4; i++) {
                snug_op_conv_silu(pools[p], x + t0 * C, Ts[i], C, K, w, stp, y + t0 * C);
                t0 += Ts[i];
            }
            ok &= same(y, y0, Ttot * C) && same(stp, st, keep * C);
        }
        printf("conv_silu K=%-2lld pool rel %.3g, state %d, threads identical %d\n", (long long)K,
               e, st_ok, ok);
        CHECK(e < 1e-6 && st_ok && ok);
        snug_free(x), snug_free(w), snug_free(st0), snug_free(y0), snug_free(y), snug_free(st);
        snug_free(stp), snug_free(ref), snug_free(hist);
    }
}

static void test_moe_adds(void) {
    int64_t T = 41, k = 8, H = 1030, n_slots = T * k;
    float *d = falloc(n_slots * H), *wt = falloc(T * k), *y0 = falloc(T * H), *y = falloc(T * H);
    float *base = falloc(T * H), *gl = falloc(T);
    int32_t *slot = snug_calloc((size_t)(T * k), sizeof(int32_t));
    double *ref = dalloc(T * H);
    SNUG_ASSERT(slot);
    fill(d, n_slots * H, 1.0f);
    fill(wt, T * k, 1.0f);
    fill(base, T * H, 1.0f);
    fill(gl, T, 6.0f);
    for (int64_t i = 0; i < T * k; i++) slot[i] = (int32_t)(rng_next() % (uint64_t)n_slots);
    snug_op_moe_combine(NULL, y0, d, slot, wt, T, k, H);
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < H; c++) {
            double acc = 0;
            for (int64_t j = 0; j < k; j++)
                acc += (double)wt[t * k + j] * d[slot[t * k + j] * H + c];
            ref[t * H + c] = acc;
        }
    double e = rel_err(y0, ref, T * H);
    int ok = 1;
    for (int p = 0; p < 3; p++) {
        snug_op_moe_combine(pools[p], y, d, slot, wt, T, k, H);
        ok &= same(y, y0, T * H);
    }
    printf("moe_combine pool rel %.3g, threads identical %d\n", e, ok);
    CHECK(e < 1e-6 && ok);

    int64_t T2 = 70; /* 72100 elements: y += σ(gl) · d, rows of d taken from the combine input */
    float *y2 = falloc(T2 * H), *g2 = falloc(T2), *b2 = falloc(T2 * H);
    double *r2 = dalloc(T2 * H);
    fill(b2, T2 * H, 1.0f);
    fill(g2, T2, 6.0f);
    memcpy(y2, b2, (size_t)(T2 * H) * 4);
    snug_op_add_gated(NULL, y2, d, g2, T2, H);
    for (int64_t t = 0; t < T2; t++) {
        double s = 1.0 / (1.0 + exp(-(double)g2[t]));
        for (int64_t c = 0; c < H; c++) r2[t * H + c] = b2[t * H + c] + s * d[t * H + c];
    }
    e = rel_err(y2, r2, T2 * H);
    ok = 1;
    float *y3 = falloc(T2 * H);
    for (int p = 0; p < 3; p++) {
        memcpy(y3, b2, (size_t)(T2 * H) * 4);
        snug_op_add_gated(pools[p], y3, d, g2, T2, H);
        ok &= same(y3, y2, T2 * H);
    }
    printf("add_gated   pool rel %.3g, threads identical %d\n", e, ok);
    CHECK(e < 1e-6 && ok);
    snug_free(d), snug_free(wt), snug_free(y0), snug_free(y), snug_free(base), snug_free(gl);
    snug_free(slot), snug_free(ref), snug_free(y2), snug_free(g2), snug_free(b2), snug_free(r2);
    snug_free(y3);
}

int main(void) {
    struct snug_err err;
    for (int i = 0; i < 3; i++) CHECK(snug_pool_init(&pools[i], i + 1, &err) == SNUG_OK);
    test_exp();
    test_norms_rope();
    test_flat();
    test_gated_rmsnorm();
    test_conv();
    test_moe_adds();
    for (int i = 0; i < 3; i++) snug_pool_free(pools[i]);
    return TEST_DONE();
}
