/* test_model_cpuops.c — the blocked CPU attention kernels (several query tokens and heads per
 * pass over the cache, ops_attention.c with ops_util.h's snug_ops_dot_rows / snug_ops_pv_rows)
 * against a straightforward float32 online-softmax written here (one query row at a time, the
 * order of operations the kernels promise to keep), on odd shapes: the results must be
 * bit-identical to it, identical whether the prompt is given in one call, in odd chunks or
 * token by token, and identical for 1, 2 and 3 threads. test_model_ops.c checks the same
 * kernels against double precision. Read next: src/backend/cpu/ops_attention.c. */
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_util.h"
#include "core/core.h"
#include "quant/quant.h"
#include "test.h"

#include <stdint.h>

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static float *falloc(int64_t n) {
    float *p = snug_calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    SNUG_ASSERT(p);
    return p;
}

static struct snug_pool *pools[3]; /* 1, 2, 3 threads */

/* Reference: one (token, head) row at a time, tiles of 64 positions, score = scale · dot,
 * running max with rescale, e = exp(s − m), output += e · v one position at a time, final
 * division — the single-row arithmetic of the kernels, in the same order. */
static void attn_ref(const struct snug_kv_view *kv, int64_t Hq, int64_t Hkv, int64_t D, int64_t T,
                     const float *q, float scale, float *out) {
    int64_t row = Hkv * D, g = Hq / Hkv;
    float *kr = falloc(D), *vr = falloc(D);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t h = 0; h < Hq; h++) {
            int64_t kh = h / g;
            const float *qh = q + (t * Hq + h) * D;
            float *o = out + (t * Hq + h) * D, m = -INFINITY, l = 0.0f, s[64];
            memset(o, 0, (size_t)D * sizeof(float));
            for (int64_t p0 = 0; p0 <= t; p0 += 64) {
                int64_t np = SNUG_MIN((int64_t)64, t + 1 - p0);
                float mx = m;
                for (int64_t p = 0; p < np; p++) {
                    int64_t idx = (p0 + p) * row + kh * D;
                    if (kv->type == SNUG_DTYPE_F32)
                        memcpy(kr, (const float *)kv->k + idx, (size_t)D * 4);
                    else
                        snug_ops_f16_row(kr, (const uint16_t *)kv->k + idx, D);
                    s[p] = scale * snug_ops_dot(qh, kr, D);
                    if (s[p] > mx) mx = s[p];
                }
                if (mx > m) {
                    float corr = expf(m - mx);
                    l *= corr;
                    snug_ops_scale(o, corr, D);
                    m = mx;
                }
                for (int64_t p = 0; p < np; p++) {
                    int64_t idx = (p0 + p) * row + kh * D;
                    if (kv->type == SNUG_DTYPE_F32)
                        memcpy(vr, (const float *)kv->v + idx, (size_t)D * 4);
                    else
                        snug_ops_f16_row(vr, (const uint16_t *)kv->v + idx, D);
                    float e = expf(s[p] - mx);
                    l += e;
                    snug_ops_axpy(o, e, vr, D);
                }
            }
            snug_ops_scale(o, 1.0f / l, D);
        }
    }
    snug_free(kr), snug_free(vr);
}

/* One shape: the prompt of T tokens given as chunks of `chunk` tokens (0: all at once, 1:
 * token by token, as decode), for each thread count; every result must equal the reference
 * bit for bit. */
static void attn_case(int64_t Hq, int64_t Hkv, int64_t D, uint32_t type, int64_t T) {
    int64_t row = Hkv * D, es = type == SNUG_DTYPE_F32 ? 4 : 2;
    struct snug_kv_view kv = {.type = type,
                              .k = snug_malloc((size_t)(T * row * es)),
                              .v = snug_malloc((size_t)(T * row * es)),
                              .n_ctx = T};
    float *k = falloc(T * row), *v = falloc(T * row), *q = falloc(T * Hq * D);
    float *ref = falloc(T * Hq * D), *out = falloc(T * Hq * D);
    for (int64_t i = 0; i < T * row; i++) k[i] = frand(), v[i] = frand();
    for (int64_t i = 0; i < T * Hq * D; i++) q[i] = 3.0f * frand(); /* peaky softmax */
    void *work = snug_malloc(snug_op_attention_work_bytes(D, 3));
    float scale = 1.0f / sqrtf((float)D);
    snug_op_kv_store(&kv, Hkv, D, 0, T, k, v);
    attn_ref(&kv, Hq, Hkv, D, T, q, scale, ref);
    const int64_t chunks[] = {0, 1, 7, 64};
    size_t nb = (size_t)(T * Hq * D) * sizeof(float);
    for (int ci = 0; ci < 4; ci++) {
        int64_t ch = chunks[ci] ? chunks[ci] : T;
        for (int p = 0; p < 3; p++) {
            memset(out, 0xff, nb);
            for (int64_t t0 = 0; t0 < T; t0 += ch) {
                int64_t n = SNUG_MIN(ch, T - t0);
                snug_op_attention(pools[p], &kv, Hq, Hkv, D, t0, n, q + t0 * Hq * D, scale,
                                  out + t0 * Hq * D, work);
            }
            CHECKF(memcmp(out, ref, nb) == 0,
                   "attention Hq=%lld Hkv=%lld D=%lld %s T=%lld chunk=%lld threads=%d: not "
                   "bit-identical to the one-row reference",
                   (long long)Hq, (long long)Hkv, (long long)D,
                   type == SNUG_DTYPE_F32 ? "f32" : "f16", (long long)T, (long long)ch, p + 1);
        }
    }
    snug_free(kv.k), snug_free(kv.v), snug_free(k), snug_free(v), snug_free(q), snug_free(ref);
    snug_free(out), snug_free(work);
}

/* The row kernels alone on odd lengths: 1..4 rows against snug_ops_dot / snug_ops_axpy, and
 * the vector-matrix products against one another and a scalar loop. */
static void test_row_kernels(void) {
    const int64_t lens[] = {1, 5, 31, 32, 33, 63, 100, 256, 257};
    for (int li = 0; li < 9; li++) {
        int64_t n = lens[li], np = 13;
        float *a = falloc(4 * n), *b = falloc(n), *V = falloc(np * (n + 3)), *e = falloc(4 * np);
        float *y = falloc(4 * n), *yr = falloc(4 * n);
        for (int64_t i = 0; i < 4 * n; i++) a[i] = frand(), y[i] = yr[i] = frand();
        for (int64_t i = 0; i < n; i++) b[i] = frand();
        for (int64_t i = 0; i < np * (n + 3); i++) V[i] = frand();
        for (int64_t i = 0; i < 4 * np; i++) e[i] = frand();
        for (int nr = 1; nr <= 4; nr++) {
            const float *rows[4] = {a, a + n, a + 2 * n, a + 3 * n};
            float d[4];
            snug_ops_dot_rows(rows, nr, b, n, d);
            for (int r = 0; r < nr; r++)
                CHECKF(d[r] == snug_ops_dot(rows[r], b, n), "dot_rows n=%lld rows=%d row %d",
                       (long long)n, nr, r);
            float *ys[4] = {y, y + n, y + 2 * n, y + 3 * n};
            const float *es[4] = {e, e + np, e + 2 * np, e + 3 * np};
            snug_ops_pv_rows(ys, es, nr, V, n + 3, np, n);
            for (int r = 0; r < nr; r++) {
                for (int64_t p = 0; p < np; p++)
                    snug_ops_axpy(yr + r * n, es[r][p], V + p * (n + 3), n);
                CHECKF(memcmp(ys[r], yr + r * n, (size_t)n * 4) == 0,
                       "pv_rows n=%lld rows=%d row %d", (long long)n, nr, r);
            }
        }
        /* vm1 / vm2 / vm4 (delta rule): each element summed over the rows in order, as a
         * plain scalar loop does; vm4 and vm2 row for row equal to vm1 */
        float *ym = falloc(4 * n), *ys1 = falloc(4 * n), *ysc = falloc(n);
        for (int64_t i = 0; i < 4 * n; i++) ym[i] = ys1[i] = frand();
        for (int64_t c = 0; c < n; c++) {
            ysc[c] = ym[c];
            for (int64_t p = 0; p < np; p++) ysc[c] = SNUG_FMA(e[p], V[p * (n + 3) + c], ysc[c]);
        }
        const float *ea[4] = {e, e + np, e + 2 * np, e + 3 * np};
        float *ya[4] = {ym, ym + n, ym + 2 * n, ym + 3 * n};
        snug_ops_vm4(ea, V, np, n, n + 3, ya);
        for (int r = 0; r < 4; r++) snug_ops_vm1(ea[r], V, np, n, n + 3, ys1 + r * n);
        CHECKF(memcmp(ym, ys1, (size_t)(4 * n) * 4) == 0, "vm4 != vm1 n=%lld", (long long)n);
        CHECKF(memcmp(ym, ysc, (size_t)n * 4) == 0, "vm4 != scalar order n=%lld", (long long)n);
        snug_ops_vm2(ea[0], ea[1], V, np, n, n + 3, ys1, ys1 + n);
        snug_ops_vm1(ea[0], V, np, n, n + 3, ym);
        snug_ops_vm1(ea[1], V, np, n, n + 3, ym + n);
        CHECKF(memcmp(ym, ys1, (size_t)(2 * n) * 4) == 0, "vm2 != vm1 n=%lld", (long long)n);
        snug_free(ym), snug_free(ys1), snug_free(ysc);
        snug_free(a), snug_free(b), snug_free(V), snug_free(e), snug_free(y), snug_free(yr);
    }
}

int main(void) {
    struct snug_err err;
    for (int i = 0; i < 3; i++) {
        int rc = snug_pool_init(&pools[i], i + 1, &err);
        CHECK(rc == SNUG_OK);
        if (rc != SNUG_OK) return TEST_DONE();
    }
    test_row_kernels();
    attn_case(8, 2, 256, SNUG_DTYPE_F16, 150); /* the bench models' shape, tile edges */
    attn_case(6, 2, 64, SNUG_DTYPE_F32, 77);   /* group 3: a 4-row block and a remainder */
    attn_case(5, 1, 33, SNUG_DTYPE_F16, 70);   /* odd head size, group 5 */
    attn_case(12, 1, 40, SNUG_DTYPE_F32, 19);  /* group larger than a task's */
    attn_case(2, 2, 16, SNUG_DTYPE_F16, 3);    /* fewer tokens than a block */
    printf("cpuops attention: blocked kernels bit-identical to the one-row reference\n");
    for (int i = 0; i < 3; i++) snug_pool_free(pools[i]);
    return TEST_DONE();
}
