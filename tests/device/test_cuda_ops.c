/* test_cuda_ops.c — the CUDA backend's ops against the CPU ops (the reference semantics), on
 * odd shapes and fresh random data (the seed is printed; SNUG_SEED=n repeats a run).
 * Needs a GPU: built when nvcc is found, not registered with ctest; run it on the device
 * machine. Each check prints the max abs error, the error relative to max|ref| and PASS/FAIL;
 * the last line is "N passed, N failed". Outputs are poisoned (NaN) before each GPU op, so an
 * unwritten element fails. `test_cuda_ops encoder`: only the vision tower's ops; `test_cuda_ops
 * mmq`: only the int8 tensor-core prompt products (cuda_mmq.cu); `test_cuda_ops step`: only the
 * recorded-step paths (device positions and ids, the fused residual norm and delta rule, the
 * shared x rounding, also by the ops that write a product's x, a captured graph replayed at later
 * positions, the drafts' argmax).
 * Read next: src/backend/cuda/cuda_ops.h, bench_cuda_ops.c. */
#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_ops.h"
#include "core/core.h"
#include "kv/kvfmt.h"
#include "quant/quant.h"
#include "test.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <time.h>

static struct snug_cuda cu;
static struct snug_err err;
static uint64_t rng;

static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static float *rnd(int64_t n, float scale) {
    float *x = snug_malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = frand() * scale;
    return x;
}
#define OK(call)                                                                                   \
    do {                                                                                           \
        int st_ = (call);                                                                          \
        if (st_ != SNUG_OK) {                                                                      \
            fprintf(stderr, "FATAL %s:%d: %s\n", __FILE__, __LINE__, err.msg);                     \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

static void *dup_dev(const void *h, size_t bytes) {
    void *d;
    OK(snug_cuda_malloc(&d, bytes, &err));
    if (h) OK(snug_cuda_upload(&cu, d, h, bytes, &err));
    return d;
}
static void *dev_poison(size_t bytes) {
    void *d;
    OK(snug_cuda_malloc(&d, bytes, &err));
    cudaMemset(d, 0xff, bytes); /* all-ones floats are NaN */
    return d;
}
static float *get(const void *d, int64_t n) {
    float *h = snug_malloc((size_t)n * sizeof(float));
    OK(snug_cuda_sync(&cu, &err));
    OK(snug_cuda_download(&cu, h, d, (size_t)n * sizeof(float), &err));
    return h;
}

/* Compare, print, count: error relative to max|ref| must be <= tol; NaN fails. */
static void cmp(const char *what, const float *got, const float *ref, int64_t n, double tol) {
    double mx = 0, ma = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) bad = 1;
        double d = fabs((double)got[i] - ref[i]);
        if (d > ma) ma = d;
        if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
    }
    double rel = ma / (mx > 0 ? mx : 1);
    int pass = !bad && rel <= tol;
    printf("%-44s n=%-8lld max_abs=%.3e rel=%.3e tol=%.0e %s\n", what, (long long)n, ma, rel, tol,
           pass ? "PASS" : "FAIL");
    CHECKF(pass, "%s", what);
}

/* ---- matrix products ---------------------------------------------------------------------- */
static int g_nowork; /* 1: pass no work memory (the f32-activation matvec); 2: the same through
                        snug_cuda_matmul_f32x, any T */
/* The 1-3 bit i-quants: lattice points indexed in a grid table (quant_grids.h). */
static int is_lattice_type(uint32_t type) {
    return type == SNUG_DTYPE_IQ3_XXS || type == SNUG_DTYPE_IQ3_S || type == SNUG_DTYPE_IQ2_XXS ||
           type == SNUG_DTYPE_IQ2_XS || type == SNUG_DTYPE_IQ2_S || type == SNUG_DTYPE_IQ1_S ||
           type == SNUG_DTYPE_IQ1_M;
}
static void a256_round(uint32_t type, const float *x, int64_t T, int64_t n_in, float *xe,
                       uint8_t *xq);
static void test_matmul(uint32_t type, int64_t n_in, int64_t n_out, int64_t T) {
    const struct snug_dtype_info *ti = snug_dtype_info(type);
    size_t rb = snug_dtype_row_bytes(type, (uint64_t)n_in);
    uint8_t *w = snug_malloc(rb * (size_t)n_out);
    float *src = rnd(n_in, 1.0f);
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++) src[i] = frand();
        int lattice = is_lattice_type(type);
        if (ti->quantizable && !lattice) {
            SNUG_ASSERT(snug_quantize_row(type, src, w + r * rb, n_in, NULL));
            continue;
        }
        /* low-bit types snug does not write without an imatrix, and the lattice i-quants (whose
         * encoder reaches few of the grid points, signs and scales): random blocks with small
         * finite f16 scales, so every index, sign code and scale bit pattern is decoded */
        uint8_t *o = w + r * rb;
        for (size_t i = 0; i < rb; i++) o[i] = (uint8_t)(frand() * 128.0f + 128.0f);
        int f16_at[2] = {-1, -1};
        if (type == SNUG_DTYPE_Q2_K) f16_at[0] = 80, f16_at[1] = 82;
        if (type == SNUG_DTYPE_Q3_K) f16_at[0] = 108;
        if (type == SNUG_DTYPE_IQ4_NL || type == SNUG_DTYPE_IQ4_XS) f16_at[0] = 0;
        if (lattice && type != SNUG_DTYPE_IQ1_M) f16_at[0] = 0;
        for (size_t b = 0; b < rb / ti->block_bytes; b++) {
            uint8_t *blk = o + b * ti->block_bytes;
            for (int k = 0; k < 2; k++)
                if (f16_at[k] >= 0) {
                    uint16_t h = snug_f32_to_f16(0.02f * frand());
                    memcpy(blk + f16_at[k], &h, 2);
                }
            if (type == SNUG_DTYPE_IQ1_M) { /* d in the top nibbles of the 4 u16 words at 48 */
                uint16_t h = snug_f32_to_f16(0.02f * frand());
                for (int k = 0; k < 4; k++)
                    blk[48 + 2 * k + 1] =
                        (uint8_t)((blk[48 + 2 * k + 1] & 0x0f) | ((h >> (4 * k)) & 0xf) << 4);
            }
        }
    }
    float *x = rnd(T * n_in, 1.0f), *ref = snug_malloc((size_t)(T * n_out) * sizeof(float));
    void *cw = snug_malloc(snug_op_matmul_work_bytes(n_in, 1));
    snug_op_matmul(NULL, type, w, n_in, n_out, x, T, ref, cw);
    void *dw = dup_dev(w, rb * n_out), *dx = dup_dev(x, (size_t)(T * n_in) * 4);
    void *dy = dev_poison((size_t)(T * n_out) * 4);
    size_t wb = snug_cuda_matmul_work_bytes(n_in, n_out, T);
    void *dwork = wb && !g_nowork ? dup_dev(NULL, wb) : NULL;
    if (g_nowork == 2) /* the f32-activation form for any T (one launch) */
        OK(snug_cuda_matmul_f32x(&cu, type, dw, n_in, n_out, dx, T, dy, &err));
    else
        OK(snug_cuda_matmul(&cu, type, dw, n_in, n_out, dx, T, dy, dwork, &err));
    float *got = get(dy, T * n_out);
    /* The exact product: the reference decoder's weights, double accumulation. (The CPU op
     * quantises x to int8 for the block types, so it is itself only within ~1e-2.) The int8
     * matvec (cuda_matvec.cu) is compared with the exact product of the same int8-rounded x
     * (d = max|x|/127 per 32, q = round-half-even(x/d)): only the f32 sums may differ. */
    int i8 = T <= SNUG_CUDA_MATVEC_MAX_T && dwork && snug_cuda_matvec_int8(type);
    /* the prompt product on int8 tensor cores (cuda_mmq.cu) rounds x per 256 as the CPU's A256 */
    int mmq =
        T > SNUG_CUDA_MATVEC_MAX_T && dwork && snug_cuda_matmul_mmq(&cu, type, n_in, n_out, T);
    float *xe = snug_malloc((size_t)(T * n_in) * 4);
    memcpy(xe, x, (size_t)(T * n_in) * 4);
    if (mmq) a256_round(type, x, T, n_in, xe, NULL);
    for (int64_t b = 0; i8 && b < T * n_in / 32; b++) {
        float amax = 0, *v = xe + 32 * b;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(v[i]));
        float d = amax / 127.0f;
        for (int i = 0; i < 32; i++) v[i] = amax > 0 ? (float)(int)rintf(v[i] / d) * d : 0.0f;
    }
    float *exact = snug_malloc((size_t)(T * n_out) * 4), *wrow = snug_malloc((size_t)n_in * 4);
    for (int64_t r = 0; r < n_out; r++) {
        snug_dequantize_row(type, w + r * rb, wrow, n_in);
        for (int64_t t = 0; t < T; t++) {
            double acc = 0;
            for (int64_t i = 0; i < n_in; i++) acc += (double)wrow[i] * xe[t * n_in + i];
            exact[t * n_out + r] = (float)acc;
        }
    }
    char name[96];
    snprintf(name, sizeof name, "matmul %s %lldx%lld T=%lld%s", ti->name, (long long)n_out,
             (long long)n_in, (long long)T,
             g_nowork == 2 ? " (f32 x, any T)"
             : mmq         ? " (int8 mmq)"
             : T > SNUG_CUDA_MATVEC_MAX_T
                 ? (type == SNUG_DTYPE_F32 ? " (f32 cuBLAS)" : " (bf16 cuBLAS)")
             : i8 ? " (int8 x)"
                  : "");
    /* f32 weights: f32 GEMM */
    int bf16 = T > SNUG_CUDA_MATVEC_MAX_T && type != SNUG_DTYPE_F32 && !mmq && g_nowork != 2;
    cmp(name, got, exact, T * n_out, bf16 ? 2e-2 : 2e-5);
    snprintf(name, sizeof name, "  vs the CPU op (int8 activations)");
    cmp(name, got, ref, T * n_out, 2e-2);
    snug_free(exact), snug_free(wrow), snug_free(xe);
    if (T == 1) { /* the bf16 dequantisation against the reference decoder */
        uint16_t *db;
        OK(snug_cuda_malloc((void **)&db, (size_t)(n_in * n_out) * 2, &err));
        OK(snug_cuda_dequant_bf16(&cu, type, dw, n_in, n_out, db, &err));
        uint16_t *hb = snug_malloc((size_t)(n_in * n_out) * 2);
        OK(snug_cuda_sync(&cu, &err));
        OK(snug_cuda_download(&cu, hb, db, (size_t)(n_in * n_out) * 2, &err));
        float *gf = snug_malloc((size_t)(n_in * n_out) * 4),
              *rf = snug_malloc((size_t)(n_in * n_out) * 4);
        for (int64_t r = 0; r < n_out; r++)
            snug_dequantize_row(type, w + r * rb, rf + r * n_in, n_in);
        int64_t exact = 0;
        for (int64_t i = 0; i < n_in * n_out; i++) {
            gf[i] = snug_bf16_to_f32(hb[i]);
            exact += hb[i] == snug_f32_to_bf16(rf[i]);
        }
        snprintf(name, sizeof name, "dequant_bf16 %s (%lld/%lld exact)", ti->name, (long long)exact,
                 (long long)(n_in * n_out));
        cmp(name, gf, rf, n_in * n_out, 4e-3);
        CHECKF(exact == n_in * n_out, "dequant_bf16 %s: %lld of %lld rounded as the CPU would",
               ti->name, (long long)exact, (long long)(n_in * n_out));
        snug_cuda_dfree(db);
        snug_free(hb), snug_free(gf), snug_free(rf);
    }
    snug_cuda_dfree(dw), snug_cuda_dfree(dx), snug_cuda_dfree(dy), snug_cuda_dfree(dwork);
    snug_free(w), snug_free(src), snug_free(x), snug_free(ref), snug_free(cw), snug_free(got);
}

/* ---- prompt products on int8 tensor cores (cuda_mmq.cu) ------------------------------------ */
/* x [T][n_in] rounded as the CPU's A256 activations (snug_act_quantize of a K-quant: per 256,
 * d = amax/127, q = round-half-even(x·127/amax)), the kernel's rounding: xe = q·d; the A256
 * rows themselves into xq (T rows of snug_act_row_bytes) when xq is not NULL. */
static void a256_round(uint32_t type, const float *x, int64_t T, int64_t n_in, float *xe,
                       uint8_t *xq) {
    size_t ab = snug_act_row_bytes(type, n_in);
    uint8_t *row = xq ? NULL : snug_malloc(ab);
    for (int64_t t = 0; t < T; t++) {
        uint8_t *a = xq ? xq + (size_t)t * ab : row;
        snug_act_quantize(type, x + t * n_in, a, n_in);
        for (int64_t s = 0; s < n_in / 256; s++) { /* qs[256] | float d | int16 bsums[16] */
            const uint8_t *blk = a + s * 292;
            float d;
            memcpy(&d, blk + 256, 4);
            for (int i = 0; i < 256; i++) xe[t * n_in + 256 * s + i] = (float)(int8_t)blk[i] * d;
        }
    }
    snug_free(row);
}

/* y = x̃·Wᵀ through snug_cuda_matmul on the int8 tensor-core path (asserted), against the exact
 * product of the reference decoder's weights with the A256-rounded x (double sums) and against
 * the CPU's own int8 product on the same A256 rows (snug_act_dot: integer sums, float scales),
 * both within 2e-5 of max|ref| (the MoE int8 checks' bound). nsample = 0: every output, weights
 * from snug_quantize_row; nsample > 0 (the 27B's full shapes): nsample random outputs plus the
 * last row and token, weights tiled from 64 quantized rows with every super-block's f16 d
 * redrawn, so that no two rows are alike. Outputs poisoned with NaN first; every one must be
 * written. */
static void test_mmq(uint32_t type, int64_t n_in, int64_t n_out, int64_t T, int64_t nsample) {
    const struct snug_dtype_info *ti = snug_dtype_info(type);
    size_t rb = snug_dtype_row_bytes(type, (uint64_t)n_in);
    int64_t nsb = n_in / 256;
    uint8_t *w = snug_malloc(rb * (size_t)n_out);
    float *src = snug_malloc((size_t)n_in * 4);
    int64_t nq = nsample ? SNUG_MIN(n_out, 64) : n_out;
    for (int64_t r = 0; r < nq; r++) {
        for (int64_t i = 0; i < n_in; i++) src[i] = frand() * (1.0f + (float)(r % 7));
        SNUG_ASSERT(snug_quantize_row(type, src, w + r * rb, n_in, NULL));
    }
    for (int64_t r = nq; r < n_out; r++) {
        memcpy(w + r * rb, w + (r % nq) * rb, rb);
        for (int64_t b = 0; b < nsb; b++) { /* d: q4_K bytes 0-1, q6_K bytes 208-209 */
            uint8_t *blk = w + r * rb + b * ti->block_bytes;
            uint16_t h = snug_f32_to_f16(0.002f + 0.01f * (frand() + 1.0f));
            memcpy(blk + (type == SNUG_DTYPE_Q6_K ? 208 : 0), &h, 2);
        }
    }
    float *x = rnd(T * n_in, 1.0f);
    for (int64_t i = 0; i < T * n_in; i += 97) x[i] *= 30.0f; /* outliers: per-256 scales */
    void *dw = dup_dev(w, rb * n_out), *dx = dup_dev(x, (size_t)(T * n_in) * 4);
    void *dy = dev_poison((size_t)(T * n_out) * 4);
    void *dwork = dup_dev(NULL, snug_cuda_matmul_work_bytes(n_in, n_out, T));
    int on = snug_cuda_matmul_mmq(&cu, type, n_in, n_out, T);
    CHECKF(on, "mmq %s: snug_cuda_matmul_mmq says no on this device (sm_%d%d)", ti->name,
           cu.cc_major, cu.cc_minor);
    OK(snug_cuda_matmul(&cu, type, dw, n_in, n_out, dx, T, dy, dwork, &err));
    float *got = get(dy, T * n_out);
    size_t ab = snug_act_row_bytes(type, n_in);
    uint8_t *xq = snug_malloc(ab * (size_t)T);
    float *xe = snug_malloc((size_t)(T * n_in) * 4), *wrow = snug_malloc((size_t)n_in * 4);
    a256_round(type, x, T, n_in, xe, xq);
    int64_t n = nsample ? nsample + 2 : T * n_out;
    float *g = snug_malloc((size_t)n * 4), *ex = snug_malloc((size_t)n * 4),
          *cpu = snug_malloc((size_t)n * 4);
    int64_t k = 0, unwritten = 0;
    for (int64_t i = 0; i < T * n_out; i++) unwritten += !isfinite(got[i]);
    for (int64_t r = 0; r < n_out && !nsample; r++) {
        snug_dequantize_row(type, w + r * rb, wrow, n_in);
        for (int64_t t = 0; t < T; t++, k++) {
            double acc = 0;
            for (int64_t i = 0; i < n_in; i++) acc += (double)wrow[i] * xe[t * n_in + i];
            ex[k] = (float)acc, g[k] = got[t * n_out + r];
            snug_act_dot(type, w + r * rb, xq + (size_t)t * ab, 0, 1, n_in, &cpu[k]);
        }
    }
    for (; k < n && nsample; k++) {
        int64_t r = k == 0 ? n_out - 1 : (int64_t)((frand() + 1.0f) * 0.5f * (float)n_out);
        int64_t t = k == 1 ? T - 1 : (int64_t)((frand() + 1.0f) * 0.5f * (float)T);
        r = SNUG_MIN(r, n_out - 1), t = SNUG_MIN(t, T - 1);
        snug_dequantize_row(type, w + r * rb, wrow, n_in);
        double acc = 0;
        for (int64_t i = 0; i < n_in; i++) acc += (double)wrow[i] * xe[t * n_in + i];
        ex[k] = (float)acc, g[k] = got[t * n_out + r];
        snug_act_dot(type, w + r * rb, xq + (size_t)t * ab, 0, 1, n_in, &cpu[k]);
    }
    char name[96];
    snprintf(name, sizeof name, "mmq %s %lldx%lld T=%lld%s", ti->name, (long long)n_out,
             (long long)n_in, (long long)T, nsample ? " (sampled)" : "");
    cmp(name, g, ex, n, 2e-5);
    cmp("  vs the CPU int8 op (same A256 rows)", g, cpu, n, 2e-5);
    CHECKF(unwritten == 0, "%s: %lld outputs unwritten (NaN)", name, (long long)unwritten);
    snug_cuda_dfree(dw), snug_cuda_dfree(dx), snug_cuda_dfree(dy), snug_cuda_dfree(dwork);
    snug_free(w), snug_free(src), snug_free(x), snug_free(got), snug_free(xq), snug_free(xe);
    snug_free(wrow), snug_free(g), snug_free(ex), snug_free(cpu);
}

/* `test_cuda_ops mmq`: the int8 tensor-core prompt product on odd shapes (T not a multiple of
 * the 64-token tile, rows not a multiple of the 128-row tile, n_in = 256·k for k = 1, 5, 8, 9,
 * 20, 68), the 27B's full FFN shapes sampled (the launch splits their K in two at these T),
 * every row's K split in two where it would not be, and the bf16 cuBLAS path when switched off. */
static void test_mmq_all(void) {
    uint32_t ty[2] = {SNUG_DTYPE_Q4_K, SNUG_DTYPE_Q6_K};
    for (int i = 0; i < 2; i++) {
        snug_cuda_mmq_tune(2); /* the kernel for every product it can take, whatever the table */
        test_mmq(ty[i], 5120, 301, 9, 0);
        test_mmq(ty[i], 256, 4141, 9, 0);
        test_mmq(ty[i], 1280, 4141, 37, 0);
        test_mmq(ty[i], 2304, 301, 64, 0);
        test_mmq(ty[i], 5120, 301, 129, 0);
        test_mmq(ty[i], 1280, 301, 512, 0);
        test_mmq(ty[i], 2048, 301, 777, 0);
        test_mmq(ty[i], 256, 4141, 777, 0);
        test_mmq(ty[i], 5120, 17408, 512, 4096); /* the 27B's FFN up, its down */
        test_mmq(ty[i], 17408, 5120, 129, 4096);
        snug_cuda_mmq_tune(3); /* every row's K over two blocks (odd and even super-blocks) */
        test_mmq(ty[i], 2304, 4141, 37, 0);
        test_mmq(ty[i], 5120, 301, 129, 0);
        test_mmq(ty[i], 512, 301, 70, 0);
        snug_cuda_mmq_tune(0); /* switched off: the bf16 cuBLAS path (test_matmul says which) */
        test_matmul(ty[i], 1280, 301, 37);
        snug_cuda_mmq_tune(-1);
        /* the default table: steps of up to 32 rows with many outputs take the kernel, narrow
         * outputs and prompt chunks the bf16 path; a product of each through the dispatch */
        CHECKF(snug_cuda_matmul_mmq(&cu, ty[i], 5120, 17408, 12) &&
                   snug_cuda_matmul_mmq(&cu, ty[i], 5120, 6144, 32) &&
                   !snug_cuda_matmul_mmq(&cu, ty[i], 5120, 1024, 12) &&
                   !snug_cuda_matmul_mmq(&cu, ty[i], 5120, 17408, 33) &&
                   !snug_cuda_matmul_mmq(&cu, ty[i], 5120, 17408, 8),
               "mmq %s: the default table takes 9..32 rows with many outputs only",
               snug_dtype_info(ty[i])->name);
        test_matmul(ty[i], 512, 6200, 12);
        test_matmul(ty[i], 512, 1031, 12);
    }
}

/* ---- elementwise and norms ---------------------------------------------------------------- */
static void test_basic(void) {
    int64_t T = 5, n = 1000;
    float *x = rnd(T * n, 3.0f), *w = rnd(n, 1.0f), *ref = snug_malloc((size_t)(T * n) * 4);
    float *dx = dup_dev(x, T * n * 4), *dw = dup_dev(w, n * 4), *dy = dev_poison(T * n * 4);
    snug_op_rmsnorm(NULL, x, w, 1e-6f, T, n, ref);
    OK(snug_cuda_rmsnorm(&cu, dx, dw, 1e-6f, T, n, dy, &err));
    float *got = get(dy, T * n);
    cmp("rmsnorm 5x1000", got, ref, T * n, 1e-5);
    snug_free(got);
    snug_op_rmsnorm(NULL, x, NULL, 1e-6f, T, n, ref);
    OK(snug_cuda_rmsnorm(&cu, dx, NULL, 1e-6f, T, n, dx, &err)); /* in place, no weight */
    got = get(dx, T * n);
    cmp("rmsnorm 5x1000 in place, w=NULL", got, ref, T * n, 1e-5);
    snug_free(got);

    int64_t rows = 37, hd = 128;
    float *a = rnd(rows * hd, 2.0f);
    float *da = dup_dev(a, rows * hd * 4);
    snug_op_l2norm(NULL, a, rows, hd, 1e-6f);
    OK(snug_cuda_l2norm(&cu, da, rows, hd, 1e-6f, &err));
    got = get(da, rows * hd);
    cmp("l2norm 37x128", got, a, rows * hd, 1e-5);
    snug_free(got), snug_free(a), snug_cuda_dfree(da);

    int64_t Tr = 7, H = 5, D = 64, nrot = 32;
    int32_t pos[7];
    for (int i = 0; i < Tr; i++) pos[i] = (int32_t)((frand() + 1.0f) * 130000.0f);
    pos[0] = 0;
    float *r = rnd(Tr * H * D, 1.0f);
    float *dr = dup_dev(r, Tr * H * D * 4);
    int32_t *dpos = dup_dev(pos, sizeof pos);
    snug_op_rope_neox(NULL, r, Tr, H, D, nrot, pos, 10000000.0f);
    OK(snug_cuda_rope_neox(&cu, dr, Tr, H, D, nrot, dpos, 10000000.0f, &err));
    got = get(dr, Tr * H * D);
    cmp("rope_neox 7x5x64 rot 32, pos to 260K", got, r, Tr * H * D, 1e-5);
    snug_free(got), snug_free(r), snug_cuda_dfree(dr), snug_cuda_dfree(dpos);

    /* interleaved M-RoPE on odd shapes: head_dim 72 with n_rot 40 (the dims past n_rot left
     * alone), 128 / 64 (the fixture's sections 11,11,10), a full rotation over 30; sections that
     * cover part of the pairs (the rest temporal); image rows (t, t + row, t + col) from a start
     * shifted by a negative rope_delta, and text rows after it (t = h = w) */
    static const struct {
        int64_t T, H, D, nrot;
        uint32_t sec[3];
    } mr[] = {{9, 3, 72, 40, {4, 5, 3}},
              {13, 5, 128, 64, {11, 11, 10}},
              {5, 7, 30, 30, {2, 6, 1}},
              {1, 2, 64, 64, {0, 24, 8}}};
    for (size_t c = 0; c < sizeof mr / sizeof mr[0]; c++) {
        int64_t T = mr[c].T, n = T * mr[c].H * mr[c].D;
        int32_t p3[13 * 3];
        int32_t delta = -(int32_t)(frand() * 40000.0f + 40000.0f); /* rope_delta < 0 */
        int32_t s0 = 90000 + delta, cols = 4;
        for (int64_t t = 0; t < T; t++) {
            int32_t *q = p3 + 3 * t;
            if (t < T - 2) { /* an image's rows from s0 */
                q[0] = s0, q[1] = s0 + (int32_t)t / cols, q[2] = s0 + (int32_t)t % cols;
            } else { /* text after it */
                q[0] = q[1] = q[2] = 90000 + (int32_t)t + delta;
            }
        }
        float *x = rnd(n, 1.0f);
        float *dx = dup_dev(x, (size_t)n * 4);
        int32_t *dp3 = dup_dev(p3, (size_t)T * 3 * sizeof(int32_t));
        snug_op_rope_mrope(NULL, x, T, mr[c].H, mr[c].D, mr[c].nrot, p3, mr[c].sec, 10000000.0f);
        OK(snug_cuda_rope_mrope(&cu, dx, T, mr[c].H, mr[c].D, mr[c].nrot, dp3, mr[c].sec,
                                10000000.0f, &err));
        got = get(dx, n);
        char what[64];
        snprintf(what, sizeof what, "rope_mrope %lldx%lldx%lld rot %lld sec %u,%u,%u", (long long)T,
                 (long long)mr[c].H, (long long)mr[c].D, (long long)mr[c].nrot, mr[c].sec[0],
                 mr[c].sec[1], mr[c].sec[2]);
        cmp(what, got, x, n, 1e-5);
        snug_free(got), snug_free(x), snug_cuda_dfree(dx), snug_cuda_dfree(dp3);
    }
    { /* with t = h = w the M-RoPE kernel is the NeoX one (the text path's numbers) */
        int64_t T = 6, H = 3, D = 48, nrot = 48;
        uint32_t sec[3] = {8, 8, 8};
        int32_t p1[6], p3[18];
        for (int t = 0; t < T; t++) p1[t] = p3[3 * t] = p3[3 * t + 1] = p3[3 * t + 2] = 7 * t + 3;
        float *x = rnd(T * H * D, 1.0f);
        float *da = dup_dev(x, (size_t)(T * H * D) * 4), *db = dup_dev(x, (size_t)(T * H * D) * 4);
        int32_t *dp1 = dup_dev(p1, sizeof p1), *dp3 = dup_dev(p3, sizeof p3);
        OK(snug_cuda_rope_neox(&cu, da, T, H, D, nrot, dp1, 10000000.0f, &err));
        OK(snug_cuda_rope_mrope(&cu, db, T, H, D, nrot, dp3, sec, 10000000.0f, &err));
        float *ga = get(da, T * H * D), *gb = get(db, T * H * D);
        cmp("rope_mrope t=h=w vs rope_neox (device)", gb, ga, T * H * D, 1e-7);
        snug_free(ga), snug_free(gb), snug_free(x);
        snug_cuda_dfree(da), snug_cuda_dfree(db), snug_cuda_dfree(dp1), snug_cuda_dfree(dp3);
    }

    int64_t m = 3001;
    float *g = rnd(m, 6.0f), *u = rnd(m, 2.0f), *o = snug_malloc(m * 4);
    float *dg = dup_dev(g, m * 4), *du = dup_dev(u, m * 4), *dout = dev_poison(m * 4);
    snug_op_swiglu(NULL, g, u, m, o);
    OK(snug_cuda_swiglu(&cu, dg, du, m, dout, &err));
    got = get(dout, m);
    cmp("swiglu 3001", got, o, m, 1e-6);
    snug_free(got);
    for (int64_t i = 0; i < m; i++) o[i] = u[i] * snug_sigmoid(g[i]);
    OK(snug_cuda_sigmoid_mul(&cu, du, dg, m, dout, &err));
    got = get(dout, m);
    cmp("sigmoid_mul 3001", got, o, m, 1e-6);
    snug_free(got), snug_free(g), snug_free(u), snug_free(o);
    snug_cuda_dfree(dg), snug_cuda_dfree(du), snug_cuda_dfree(dout);

    int64_t Tg = 3, Nv = 7, dv = 96;
    float *oo = rnd(Tg * Nv * dv, 2.0f), *z = rnd(Tg * Nv * dv, 3.0f), *gw = rnd(dv, 1.0f);
    float *gref = snug_malloc(Tg * Nv * dv * 4);
    float *doo = dup_dev(oo, Tg * Nv * dv * 4), *dz = dup_dev(z, Tg * Nv * dv * 4),
          *dgw = dup_dev(gw, dv * 4), *dgy = dev_poison(Tg * Nv * dv * 4);
    snug_op_gated_rmsnorm(NULL, oo, z, gw, 1e-6f, Tg, Nv, dv, gref);
    OK(snug_cuda_gated_rmsnorm(&cu, doo, dz, dgw, 1e-6f, Tg, Nv, dv, dgy, &err));
    got = get(dgy, Tg * Nv * dv);
    cmp("gated_rmsnorm 3x7x96", got, gref, Tg * Nv * dv, 1e-5);
    snug_free(got), snug_free(oo), snug_free(z), snug_free(gw), snug_free(gref);
    snug_cuda_dfree(doo), snug_cuda_dfree(dz), snug_cuda_dfree(dgw), snug_cuda_dfree(dgy);

    /* conv: a 9-token prompt then a 1-token and a 2-token step, the state carried */
    int64_t C = 300, K = 4, steps[3] = {9, 1, 2};
    float *cwt = rnd(C * K, 1.0f), *cst = rnd((K - 1) * C, 1.0f);
    float *dcw = dup_dev(cwt, C * K * 4), *dcs = dup_dev(cst, (K - 1) * C * 4);
    for (int s = 0; s < 3; s++) {
        int64_t Tc = steps[s];
        float *cx = rnd(Tc * C, 2.0f), *cy = snug_malloc(Tc * C * 4);
        float *dcx = dup_dev(cx, Tc * C * 4), *dcy = dev_poison(Tc * C * 4);
        snug_op_conv_silu(NULL, cx, Tc, C, K, cwt, cst, cy);
        OK(snug_cuda_conv_silu(&cu, dcx, Tc, C, K, dcw, dcs, dcy, &err));
        got = get(dcy, Tc * C);
        char name[64];
        snprintf(name, sizeof name, "conv_silu K=4 C=300 T=%lld (call %d)", (long long)Tc, s);
        cmp(name, got, cy, Tc * C, 1e-5);
        snug_free(got);
        got = get(dcs, (K - 1) * C);
        cmp("  conv state after it", got, cst, (K - 1) * C, 0);
        snug_free(got), snug_free(cx), snug_free(cy), snug_cuda_dfree(dcx), snug_cuda_dfree(dcy);
    }
    snug_free(cwt), snug_free(cst), snug_cuda_dfree(dcw), snug_cuda_dfree(dcs);
    snug_free(x), snug_free(w), snug_free(ref);
    snug_cuda_dfree(dx), snug_cuda_dfree(dw), snug_cuda_dfree(dy);
}

/* ---- attention ---------------------------------------------------------------------------- */
static const char *const KVN[] = {"f16", "f32", "bf16", "q8_0", "fp8", "tq4", "tq3"};

/* On a byte mismatch: the first three differing bytes, with their offset inside the stored
 * head vector and both sides' values (which field of the format is off). */
static void dump_diff(const char *what, const uint8_t *gpu, const void *cpu, size_t n, size_t vb) {
    const uint8_t *c = cpu;
    for (size_t i = 0, shown = 0; i < n && shown < 3; i++)
        if (gpu[i] != c[i]) {
            printf("    %s byte %zu (vector %zu, offset %zu of %zu): gpu %02x cpu %02x\n", what, i,
                   i / vb, i % vb, vb, gpu[i], c[i]);
            shown++;
        }
}

/* The store alone, for formats the device writes but does not read yet (tq4, tq3, and pairs
 * with them): two store calls (prefix, chunk) into a kvfmt cache on both sides, then the device
 * bytes must equal snug_op_kvq_store's (kvfmt.c's quantizer) exactly. Outliers and an all-zero
 * head vector (norm 0) included. */
static void test_kv_store_bytes(int kf, int vf, int64_t Hkv, int64_t D, int64_t pos0, int64_t T) {
    int64_t n_ctx = pos0 + T + 2;
    size_t kb = (size_t)(n_ctx * Hkv) * snug_kvfmt_vec_bytes(kf, D);
    size_t vb = (size_t)(n_ctx * Hkv) * snug_kvfmt_vec_bytes(vf, D);
    struct snug_kv_view hv = {.type = SNUG_KV_VIEW_FMT,
                              .k = snug_calloc(1, kb),
                              .v = snug_calloc(1, vb),
                              .n_ctx = n_ctx,
                              .k_fmt = kf,
                              .v_fmt = vf};
    struct snug_cuda_kv dv = {
        SNUG_CUDA_KV_FMT, dup_dev(hv.k, kb), dup_dev(hv.v, vb), n_ctx, kf, vf};
    int64_t row = Hkv * D, parts[2][2] = {{0, pos0}, {pos0, T}};
    for (int p = 0; p < 2; p++) {
        int64_t n = parts[p][1];
        if (!n) continue;
        float *k = rnd(n * row, 2.0f), *v = rnd(n * row, 1.0f);
        for (int64_t i = 0; i < n * row; i += 97) k[i] *= 7.0f;
        for (int64_t i = 0; i < D; i++) v[i] = 0.0f; /* a zero vector: stored norm 0 */
        float *dk = dup_dev(k, n * row * 4), *dvv = dup_dev(v, n * row * 4);
        snug_op_kvq_store(&hv, Hkv, D, parts[p][0], n, k, v);
        OK(snug_cuda_kv_store(&cu, &dv, Hkv, D, parts[p][0], NULL, n, dk, dvv, &err));
        OK(snug_cuda_sync(&cu, &err));
        snug_free(k), snug_free(v), snug_cuda_dfree(dk), snug_cuda_dfree(dvv);
    }
    uint8_t *gk = snug_malloc(kb), *gv = snug_malloc(vb);
    OK(snug_cuda_download(&cu, gk, dv.k, kb, &err));
    OK(snug_cuda_download(&cu, gv, dv.v, vb, &err));
    size_t dk = 0, dvb = 0;
    for (size_t i = 0; i < kb; i++) dk += gk[i] != ((uint8_t *)hv.k)[i];
    for (size_t i = 0; i < vb; i++) dvb += gv[i] != ((uint8_t *)hv.v)[i];
    char name[128];
    snprintf(name, sizeof name, "kv_store %s/%s Hkv=%lld D=%lld pos0=%lld T=%lld", KVN[kf], KVN[vf],
             (long long)Hkv, (long long)D, (long long)pos0, (long long)T);
    printf("%-60s store: %zu of %zu K bytes, %zu of %zu V bytes differ %s\n", name, dk, kb, dvb, vb,
           dk + dvb == 0 ? "PASS" : "FAIL");
    CHECKF(dk + dvb == 0, "%s: device cache bytes differ from the CPU quantizer's", name);
    dump_diff("K", gk, hv.k, kb, snug_kvfmt_vec_bytes(kf, D));
    dump_diff("V", gv, hv.v, vb, snug_kvfmt_vec_bytes(vf, D));
    snug_free(gk), snug_free(gv), snug_free(hv.k), snug_free(hv.v);
    snug_cuda_dfree(dv.k), snug_cuda_dfree(dv.v);
}

/* The cache in K format kf and V format vf (enum snug_kv_type) on both sides: plain F16/F32
 * views for equal f16/f32, kvfmt views otherwise. Stores the prefix in one call and the chunk
 * in another; checks the device cache holds the same bytes as the CPU's (the quantizers
 * agree), then attention against snug_op_kvq_attention. The tensor-core kernels (T > 8, and
 * decode with 2+ query heads per KV head where snug_cuda_attention_form says so) have f16 operands:
 * tolerance 4e-3 of max|ref|; the f32 flash-decoding kernels 2e-5. */
static void test_attention(int kf, int vf, int64_t Hq, int64_t Hkv, int64_t D, int64_t pos0,
                           int64_t T) {
    int64_t n_ctx = pos0 + T + 3;
    bool plain = kf == vf && (kf == SNUG_KV_F16 || kf == SNUG_KV_F32);
    uint32_t type =
        plain ? (kf == SNUG_KV_F16 ? SNUG_DTYPE_F16 : SNUG_DTYPE_F32) : SNUG_KV_VIEW_FMT;
    size_t kb = (size_t)(n_ctx * Hkv) * snug_kvfmt_vec_bytes(kf, D);
    size_t vb = (size_t)(n_ctx * Hkv) * snug_kvfmt_vec_bytes(vf, D);
    struct snug_kv_view hv = {.type = type,
                              .k = snug_calloc(1, kb),
                              .v = snug_calloc(1, vb),
                              .n_ctx = n_ctx,
                              .k_fmt = kf,
                              .v_fmt = vf};
    struct snug_cuda_kv dv = {
        plain ? type : SNUG_CUDA_KV_FMT, dup_dev(hv.k, kb), dup_dev(hv.v, vb), n_ctx, kf, vf};
    int64_t row = Hkv * D, parts[2][2] = {{0, pos0}, {pos0, T}};
    for (int p = 0; p < 2; p++) {
        int64_t n = parts[p][1];
        if (!n) continue;
        float *k = rnd(n * row, 2.0f), *v = rnd(n * row, 1.0f);
        for (int64_t i = 0; i < n * row; i += 97) k[i] *= 7.0f; /* outliers for the scales */
        float *dk = dup_dev(k, n * row * 4), *dvv = dup_dev(v, n * row * 4);
        snug_op_kvq_store(&hv, Hkv, D, parts[p][0], n, k, v);
        /* the chunk through device positions (a replayable launch), the prefix through pos0 */
        int32_t *hp = snug_malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) hp[i] = (int32_t)(parts[p][0] + i);
        int32_t *dp = p ? dup_dev(hp, (size_t)n * 4) : NULL;
        OK(snug_cuda_kv_store(&cu, &dv, Hkv, D, parts[p][0], dp, n, dk, dvv, &err));
        OK(snug_cuda_sync(&cu, &err));
        snug_free(hp), snug_cuda_dfree(dp);
        snug_free(k), snug_free(v), snug_cuda_dfree(dk), snug_cuda_dfree(dvv);
    }
    char name[128];
    snprintf(name, sizeof name, "attention %s/%s Hq=%lld Hkv=%lld D=%lld pos0=%lld T=%lld", KVN[kf],
             KVN[vf], (long long)Hq, (long long)Hkv, (long long)D, (long long)pos0, (long long)T);
    {
        uint8_t *gk = snug_malloc(kb), *gv = snug_malloc(vb);
        OK(snug_cuda_download(&cu, gk, dv.k, kb, &err));
        OK(snug_cuda_download(&cu, gv, dv.v, vb, &err));
        size_t dk = 0, dvb = 0;
        for (size_t i = 0; i < kb; i++) dk += gk[i] != ((uint8_t *)hv.k)[i];
        for (size_t i = 0; i < vb; i++) dvb += gv[i] != ((uint8_t *)hv.v)[i];
        printf("%-60s store: %zu of %zu K bytes, %zu of %zu V bytes differ %s\n", name, dk, kb, dvb,
               vb, dk + dvb == 0 ? "PASS" : "FAIL");
        CHECKF(dk + dvb == 0, "%s: device cache bytes differ from the CPU quantizer's", name);
        dump_diff("K", gk, hv.k, kb, snug_kvfmt_vec_bytes(kf, D));
        dump_diff("V", gv, hv.v, vb, snug_kvfmt_vec_bytes(vf, D));
        snug_free(gk), snug_free(gv);
        /* attention runs on the CPU's bytes, so a store mismatch does not hide a reader bug */
        OK(snug_cuda_upload(&cu, dv.k, hv.k, kb, &err));
        OK(snug_cuda_upload(&cu, dv.v, hv.v, vb, &err));
    }
    float *q = rnd(T * Hq * D, 1.0f), *ref = snug_malloc(T * Hq * D * 4);
    float scale = 1.0f / sqrtf((float)D);
    void *cw = snug_malloc(snug_op_kvq_attention_work_bytes(D, 1) + 64);
    snug_op_kvq_attention(NULL, &hv, Hq, Hkv, D, pos0, T, q, scale, ref, cw);
    float *dq = dup_dev(q, T * Hq * D * 4), *dout = dev_poison(T * Hq * D * 4);
    size_t wb = snug_cuda_attention_work_bytes(Hq, D, T);
    void *dw = wb ? dup_dev(NULL, wb) : NULL;
    OK(snug_cuda_attention(&cu, &dv, Hq, Hkv, D, pos0, NULL, T, dq, scale, dout, dw, &err));
    float *got = get(dout, T * Hq * D);
    /* the tensor-core kernels round q, the cache and the softmax weights to f16 */
    int form = snug_cuda_attention_form(&cu, kf, vf, Hq, Hkv, D, T);
    static const char *const form_name[] = {"head", "grouped", "flat", "mma", "prompt"};
    snprintf(name + strlen(name), sizeof name - strlen(name), " [%s]", form_name[form]);
    cmp(name, got, ref, T * Hq * D, form >= SNUG_CUDA_ATT_MMA ? 4e-3 : 2e-5);
    { /* the same call with the positions in device memory: the same bits */
        int32_t *hp = snug_malloc((size_t)T * 4);
        for (int64_t i = 0; i < T; i++) hp[i] = (int32_t)(pos0 + i);
        int32_t *dp = dup_dev(hp, (size_t)T * 4);
        float *dout2 = dev_poison(T * Hq * D * 4);
        OK(snug_cuda_attention(&cu, &dv, Hq, Hkv, D, pos0, dp, T, dq, scale, dout2, dw, &err));
        float *got2 = get(dout2, T * Hq * D);
        bool same = memcmp(got, got2, (size_t)(T * Hq * D) * 4) == 0;
        printf("%-60s device positions: %s\n", name, same ? "same bits PASS" : "FAIL");
        CHECKF(same, "%s: device positions change the result", name);
        snug_free(hp), snug_free(got2), snug_cuda_dfree(dp), snug_cuda_dfree(dout2);
    }
    snug_free(got), snug_free(q), snug_free(ref), snug_free(cw), snug_free(hv.k), snug_free(hv.v);
    snug_cuda_dfree(dq), snug_cuda_dfree(dout), snug_cuda_dfree(dw), snug_cuda_dfree(dv.k),
        snug_cuda_dfree(dv.v);
}

/* ---- gated delta rule --------------------------------------------------------------------- */
/* chunked: 0 the step form; 1 the prompt form with work for the whole prompt (the WY kernels
 * where the shape allows); 2 with work for two chunks (pieces of 128 tokens); 3 without work
 * (the recurrence). */
static int g_delta_tc; /* the WY form's scan on tensor cores (snug_cuda_delta_tune) */
static void test_delta(int chunked, int64_t T, int64_t Nk, int64_t Nv, int64_t dk, int64_t dv) {
    float *q = rnd(T * Nk * dk, 1.0f), *k = rnd(T * Nk * dk, 1.0f), *v = rnd(T * Nv * dv, 1.0f);
    float *g = rnd(T * Nv, 1.0f), *beta = rnd(T * Nv, 1.0f), *S = rnd(Nv * dk * dv, 0.5f);
    snug_op_l2norm(NULL, q, T * Nk, dk, 1e-6f);
    snug_op_l2norm(NULL, k, T * Nk, dk, 1e-6f);
    for (int64_t i = 0; i < T * Nk * dk; i++) q[i] /= sqrtf((float)dk);
    for (int64_t i = 0; i < T * Nv; i++) {
        /* strong decay on odd heads, weak on even ones (a state carried over many chunks) */
        g[i] = -fabsf(g[i]) * ((i % Nv) % 2 ? 1.5f : 0.05f);
        beta[i] = 0.5f + 0.49f * beta[i];
    }
    float *dq = dup_dev(q, T * Nk * dk * 4), *dk_ = dup_dev(k, T * Nk * dk * 4),
          *dvv = dup_dev(v, T * Nv * dv * 4), *dg = dup_dev(g, T * Nv * 4),
          *db = dup_dev(beta, T * Nv * 4), *dS = dup_dev(S, Nv * dk * dv * 4),
          *dout = dev_poison(T * Nv * dv * 4);
    float *ref = snug_malloc(T * Nv * dv * 4);
    int wy = 0;
    if (chunked) {
        void *w = snug_malloc(snug_op_gated_delta_work_bytes(dk, dv, 1));
        snug_op_gated_delta_chunked(NULL, T, Nk, Nv, dk, dv, q, k, v, g, beta, S, ref, w);
        snug_free(w);
        size_t wb = chunked == 3   ? 0
                    : chunked == 2 ? snug_cuda_delta_chunk_work_bytes(128, Nv, dk, dv)
                                   : snug_cuda_delta_chunk_work_bytes(T, Nv, dk, dv);
        void *dw = wb ? dev_poison(wb) : NULL;
        /* the WY form must serve every shape it is meant for (else this compares the recurrence) */
        wy = snug_cuda_delta_wy(&cu, T, Nv, dk, dv, wb);
        int meant = wb && T >= 32 && dk != 96 && dv + dk <= 256;
        CHECKF(wy == meant, "delta T=%lld dk=%lld dv=%lld work %zu: WY form %s", (long long)T,
               (long long)dk, (long long)dv, wb, wy ? "ran where it should not" : "did not run");
        OK(snug_cuda_gated_delta_chunked(&cu, T, Nk, Nv, dk, dv, dq, dk_, dvv, dg, db, dS, dout, dw,
                                         wb, &err));
        snug_cuda_dfree(dw);
    } else {
        snug_op_gated_delta_step(NULL, T, Nk, Nv, dk, dv, q, k, v, g, beta, S, ref);
        OK(snug_cuda_gated_delta_step(&cu, T, Nk, Nv, dk, dv, dq, dk_, dvv, dg, db, dS, dout,
                                      &err));
    }
    float *got = get(dout, T * Nv * dv);
    char name[96];
    static const char *form[] = {"step", "chunked", "chunked/pieces", "chunked/no work"};
    snprintf(name, sizeof name, "delta %s%s T=%lld Nk=%lld Nv=%lld dk=%lld dv=%lld", form[chunked],
             !wy          ? ""
             : g_delta_tc ? " (WY, tensor cores)"
                          : " (WY)",
             (long long)T, (long long)Nk, (long long)Nv, (long long)dk, (long long)dv);
    cmp(name, got, ref, T * Nv * dv, 1e-4);
    snug_free(got);
    got = get(dS, Nv * dk * dv);
    cmp("  state after it", got, S, Nv * dk * dv, 1e-4);
    snug_free(got), snug_free(q), snug_free(k), snug_free(v), snug_free(g), snug_free(beta),
        snug_free(S), snug_free(ref);
    snug_cuda_dfree(dq), snug_cuda_dfree(dk_), snug_cuda_dfree(dvv), snug_cuda_dfree(dg),
        snug_cuda_dfree(db), snug_cuda_dfree(dS), snug_cuda_dfree(dout);
}

/* The matvec without work memory (f32 activations, the path of small routers). */
/* ---- MoE routing and grouped expert products ----------------------------------------------
 * Routing: the GPU's choices, grouping and tile table equal the CPU op's on the same logits
 * (some rows carry exact ties, which go to the lower expert index on both); weights within
 * 1e-6. Expert products: the tile kernel against the exact product of the int8-rounded rows. */
static int32_t *geti(const void *d, int64_t n) {
    int32_t *h = snug_malloc((size_t)n * sizeof(int32_t));
    OK(snug_cuda_sync(&cu, &err));
    OK(snug_cuda_download(&cu, h, d, (size_t)n * sizeof(int32_t), &err));
    return h;
}
static int
    g_route_only; /* `test_cuda_ops route`: test_moe_all's routing checks, products at T = 1 */
static void test_moe(uint32_t type, int64_t T, int64_t E, int64_t k, int64_t n_in, int64_t n_out) {
    const struct snug_dtype_info *ti = snug_dtype_info(type);
    int64_t n = T * k, nt = snug_moe_tiles_len(T, E, k);
    float *lg = rnd(T * E, 4.0f);
    for (int64_t t = 0; t < T; t += 2) { /* ties: copy one logit onto another expert */
        int64_t a = (t * 7) % E, b = (t * 13 + 5) % E;
        lg[t * E + b] = lg[t * E + a];
        if (t % 4 == 0) lg[t * E + a] = lg[t * E + b] = 9.0f; /* a tie among the top */
    }
    int32_t *sel = snug_malloc((size_t)n * 4), *cnt = snug_malloc((size_t)E * 4);
    int32_t *order = snug_malloc((size_t)n * 4), *slot = snug_malloc((size_t)n * 4);
    int32_t *off = snug_malloc((size_t)(E + 1) * 4);
    float *selw = snug_malloc((size_t)n * 4);
    snug_op_moe_route(lg, T, E, k, sel, cnt, selw, order, slot, off);
    void *dlg = dup_dev(lg, (size_t)(T * E) * 4);
    void *dsel = dev_poison((size_t)n * 4), *dcnt = dev_poison((size_t)E * 4);
    void *dselw = dev_poison((size_t)n * 4), *dorder = dev_poison((size_t)n * 4);
    void *dslot = dev_poison((size_t)n * 4), *doff = dev_poison((size_t)(E + 1) * 4);
    void *dtiles = dev_poison((size_t)nt * 4);
    OK(snug_cuda_moe_route(&cu, dlg, T, E, k, dsel, dcnt, dselw, dorder, dslot, doff, dtiles,
                           &err));
    int32_t *gsel = geti(dsel, n), *gorder = geti(dorder, n), *gslot = geti(dslot, n);
    int32_t *goff = geti(doff, E + 1), *gtiles = geti(dtiles, nt), *gcnt = geti(dcnt, E);
    float *gselw = get(dselw, n);
    int same = !memcmp(gsel, sel, (size_t)n * 4) && !memcmp(gorder, order, (size_t)n * 4) &&
               !memcmp(gslot, slot, (size_t)n * 4) && !memcmp(goff, off, (size_t)(E + 1) * 4) &&
               !memcmp(gcnt, cnt, (size_t)E * 4);
    /* the tiles: in expert order, each within its expert's slots, covering them all */
    int64_t covered = 0, prev_end = 0;
    int tiles_ok = gtiles[0] >= 1 && 1 + 3 * (int64_t)gtiles[0] <= nt;
    for (int64_t i = 0; tiles_ok && i < gtiles[0]; i++) {
        int32_t e = gtiles[1 + 3 * i], s0 = gtiles[2 + 3 * i], c = gtiles[3 + 3 * i];
        tiles_ok = e >= 0 && e < E && c >= 1 && c <= SNUG_MOE_TILE && s0 == prev_end &&
                   s0 >= off[e] && s0 + c <= off[e + 1];
        prev_end = s0 + c;
        covered += c;
    }
    tiles_ok = tiles_ok && covered == n;
    char name[96];
    snprintf(name, sizeof name, "moe_route T=%lld E=%lld k=%lld: choices, grouping", (long long)T,
             (long long)E, (long long)k);
    printf("%-44s %s\n", name, same && tiles_ok ? "PASS" : "FAIL");
    CHECKF(same, "%s", name);
    CHECKF(tiles_ok, "moe_route T=%lld E=%lld: tile table", (long long)T, (long long)E);
    snprintf(name, sizeof name, "moe_route T=%lld E=%lld k=%lld: weights", (long long)T,
             (long long)E, (long long)k);
    cmp(name, gselw, selw, n, 1e-6);

    /* `test_cuda_ops route`: the products at one token and small weights only */
    if (!g_route_only || (T == 1 && E * n_out * n_in <= ((int64_t)1 << 26))) {
        /* expert products over the grouped rows */
        size_t rb = snug_dtype_row_bytes(type, (uint64_t)n_in), eb = rb * (size_t)n_out;
        uint8_t *w = snug_malloc(eb * (size_t)E);
        float *src = snug_malloc((size_t)n_in * 4);
        for (int64_t r = 0; r < E * n_out; r++) {
            for (int64_t i = 0; i < n_in; i++) src[i] = frand();
            SNUG_ASSERT(snug_quantize_row(type, src, w + r * rb, n_in, NULL));
        }
        float *x = rnd(n * n_in, 1.0f), *xe = snug_malloc((size_t)(n * n_in) * 4);
        memcpy(xe, x, (size_t)(n * n_in) * 4);
        for (int64_t b = 0; b < n * n_in / 32; b++) { /* the int8 rounding the kernel applies */
            float amax = 0, *v = xe + 32 * b;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(v[i]));
            float d = amax / 127.0f;
            for (int i = 0; i < 32; i++) v[i] = amax > 0 ? (float)(int)rintf(v[i] / d) * d : 0.0f;
        }
        float *exact = snug_malloc((size_t)(n * n_out) * 4), *wrow = snug_malloc((size_t)n_in * 4);
        for (int64_t e = 0; e < E; e++)
            for (int64_t r = 0; r < n_out; r++) {
                snug_dequantize_row(type, w + (size_t)e * eb + r * rb, wrow, n_in);
                for (int64_t sl = off[e]; sl < off[e + 1]; sl++) {
                    double acc = 0;
                    for (int64_t i = 0; i < n_in; i++) acc += (double)wrow[i] * xe[sl * n_in + i];
                    exact[sl * n_out + r] = (float)acc;
                }
            }
        void *dw = dup_dev(w, eb * (size_t)E), *dx = dup_dev(x, (size_t)(n * n_in) * 4);
        void *dy = dev_poison((size_t)(n * n_out) * 4);
        void *dwork = dup_dev(NULL, snug_moe_matmul_work_bytes(n, n_in));
        OK(snug_cuda_moe_matmul(&cu, type, dw, eb, n_in, n_out, dx, dtiles, n, (nt - 1) / 3, T == 1,
                                dy, dwork, &err));
        float *got = get(dy, n * n_out);
        snprintf(name, sizeof name, "moe_matmul %s %lldx%lld T=%lld E=%lld k=%lld", ti->name,
                 (long long)n_out, (long long)n_in, (long long)T, (long long)E, (long long)k);
        cmp(name, got, exact, n * n_out, 2e-5);
        if (T == 1) { /* the token's one row read by every slot (single 2: a decode's gate/up) */
            for (int64_t e = 0; e < E; e++)
                for (int64_t r = 0; r < n_out; r++) {
                    snug_dequantize_row(type, w + (size_t)e * eb + r * rb, wrow, n_in);
                    for (int64_t sl = off[e]; sl < off[e + 1]; sl++) {
                        double acc = 0;
                        for (int64_t i = 0; i < n_in; i++) acc += (double)wrow[i] * xe[i];
                        exact[sl * n_out + r] = (float)acc;
                    }
                }
            void *dy1 = dev_poison((size_t)(n * n_out) * 4);
            OK(snug_cuda_moe_matmul(&cu, type, dw, eb, n_in, n_out, dx, dtiles, n, (nt - 1) / 3, 2,
                                    dy1, dwork, &err));
            float *got1 = get(dy1, n * n_out);
            snprintf(name, sizeof name, "moe_matmul %s %lldx%lld E=%lld k=%lld: one x row",
                     ti->name, (long long)n_out, (long long)n_in, (long long)E, (long long)k);
            cmp(name, got1, exact, n * n_out, 2e-5);
            snug_cuda_dfree(dy1), snug_free(got1);
        }
        snug_cuda_dfree(dw), snug_cuda_dfree(dx), snug_cuda_dfree(dy), snug_cuda_dfree(dwork);
        snug_free(w), snug_free(src), snug_free(x), snug_free(xe), snug_free(exact);
        snug_free(wrow), snug_free(got);
    }
    snug_cuda_dfree(dlg), snug_cuda_dfree(dsel), snug_cuda_dfree(dcnt), snug_cuda_dfree(dselw);
    snug_cuda_dfree(dorder), snug_cuda_dfree(dslot), snug_cuda_dfree(doff);
    snug_cuda_dfree(dtiles);
    snug_free(lg), snug_free(sel), snug_free(cnt), snug_free(order), snug_free(slot);
    snug_free(off), snug_free(selw), snug_free(gsel), snug_free(gorder), snug_free(gslot);
    snug_free(goff), snug_free(gtiles), snug_free(gselw), snug_free(gcnt);
}

/* Two matrices over the same x in one launch (snug_cuda_matmul_f32x_pair: β and α, the router
 * and the shared expert's gate): each output bit-equal to snug_cuda_matmul_f32x of its matrix
 * alone (whose values test_matmul_f32x checks against the exact product); rows few enough that
 * the single product also takes one row per block. int8: the int8 decode path's pair
 * (snug_cuda_matvec_int8_pair: an FFN's gate and up) against snug_cuda_matmul's int8 path of
 * each matrix alone, x rounded by the pair and then read again as rounded. */
static void test_matmul_pair_as(uint32_t type, int64_t n_in, int64_t n1, int64_t n2, int64_t T,
                                bool int8) {
    const struct snug_dtype_info *ti = snug_dtype_info(type);
    size_t rb = snug_dtype_row_bytes(type, (uint64_t)n_in);
    int64_t n[2] = {n1, n2};
    void *dw[2], *dy[2], *dref[2];
    float *src = snug_malloc((size_t)n_in * 4);
    float *x = rnd(T * n_in, 1.0f);
    void *dx = dup_dev(x, (size_t)(T * n_in) * 4);
    for (int m = 0; m < 2; m++) {
        uint8_t *w = snug_malloc(rb * (size_t)n[m]);
        for (int64_t r = 0; r < n[m]; r++) {
            for (int64_t i = 0; i < n_in; i++) src[i] = frand();
            SNUG_ASSERT(snug_quantize_row(type, src, w + r * rb, n_in, NULL));
        }
        dw[m] = dup_dev(w, rb * (size_t)n[m]);
        dy[m] = dev_poison((size_t)(T * n[m]) * 4);
        dref[m] = dev_poison((size_t)(T * n[m]) * 4);
        snug_free(w);
    }
    void *work = int8 ? dup_dev(NULL, snug_cuda_matmul_work_bytes(n_in, 1, T)) : NULL;
    for (int m = 0; m < 2; m++)
        if (int8)
            OK(snug_cuda_matmul(&cu, type, dw[m], n_in, n[m], dx, T, dref[m], work, &err));
        else
            OK(snug_cuda_matmul_f32x(&cu, type, dw[m], n_in, n[m], dx, T, dref[m], &err));
    for (int again = 0; again < (int8 ? 2 : 1); again++) {
        if (int8)
            OK(snug_cuda_matvec_int8_pair(&cu, type, dw[0], n1, dw[1], n2, n_in, dx, again, T,
                                          dy[0], dy[1], work, &err));
        else
            OK(snug_cuda_matmul_f32x_pair(&cu, type, dw[0], dw[1], n_in, n1, n2, dx, T, dy[0],
                                          dy[1], &err));
        for (int m = 0; m < 2; m++) {
            float *got = get(dy[m], T * n[m]), *ref = get(dref[m], T * n[m]);
            char name[128];
            snprintf(name, sizeof name, "matmul pair%s %s %lld+%lldx%lld T=%lld: matrix %d",
                     int8 ? again ? " int8 (x rounded)" : " int8" : "", ti->name, (long long)n1,
                     (long long)n2, (long long)n_in, (long long)T, m + 1);
            int same = !memcmp(got, ref, (size_t)(T * n[m]) * 4);
            printf("%-60s %s\n", name, same ? "PASS" : "FAIL");
            CHECKF(same, "%s: not bit-equal to the single product", name);
            snug_free(got), snug_free(ref);
        }
    }
    for (int m = 0; m < 2; m++)
        snug_cuda_dfree(dw[m]), snug_cuda_dfree(dy[m]), snug_cuda_dfree(dref[m]);
    snug_cuda_dfree(dx), snug_cuda_dfree(work);
    snug_free(src), snug_free(x);
}
static void test_matmul_pair(uint32_t type, int64_t n_in, int64_t n1, int64_t n2, int64_t T) {
    test_matmul_pair_as(type, n_in, n1, n2, T, false);
}

static void test_matmul_f32x(uint32_t type, int64_t n_in, int64_t n_out, int64_t T) {
    g_nowork = T > SNUG_CUDA_MATVEC_MAX_T ? 2 : 1;
    test_matmul(type, n_in, n_out, T);
    g_nowork = 0;
}

/* ---- encoder ops (the vision tower) ------------------------------------------------------- */
static void test_encoder_rows(int64_t T, int64_t n) {
    float *x = rnd(T * n, 3.0f), *w = rnd(n, 1.0f), *b = rnd(n, 0.5f);
    float *ref = snug_malloc((size_t)(T * n) * 4);
    float *dx = dup_dev(x, T * n * 4), *dw = dup_dev(w, n * 4), *db = dup_dev(b, n * 4);
    float *dy = dev_poison(T * n * 4);
    char what[96];
    snug_op_layernorm(NULL, x, w, b, 1e-6f, T, n, ref);
    OK(snug_cuda_layernorm(&cu, dx, dw, db, 1e-6f, T, n, dy, &err));
    float *got = get(dy, T * n);
    snprintf(what, sizeof what, "layernorm %lldx%lld", (long long)T, (long long)n);
    cmp(what, got, ref, T * n, 1e-5);
    snug_free(got);
    OK(snug_cuda_layernorm(&cu, dx, dw, db, 1e-6f, T, n, dx, &err)); /* in place */
    got = get(dx, T * n);
    snprintf(what, sizeof what, "layernorm %lldx%lld in place", (long long)T, (long long)n);
    cmp(what, got, ref, T * n, 1e-5);
    snug_free(got);
    for (int act = 0; act < 3; act++) {
        memcpy(ref, x, (size_t)(T * n) * 4);
        snug_op_bias_act(NULL, ref, b, T, n, (enum snug_act)act);
        OK(snug_cuda_upload(&cu, dy, x, (size_t)(T * n) * 4, &err));
        OK(snug_cuda_bias_act(&cu, dy, db, T, n, act, &err));
        got = get(dy, T * n);
        snprintf(what, sizeof what, "bias_act %d %lldx%lld", act, (long long)T, (long long)n);
        cmp(what, got, ref, T * n, 1e-5);
        snug_free(got);
    }
    snug_free(x), snug_free(w), snug_free(b), snug_free(ref);
    snug_cuda_dfree(dx), snug_cuda_dfree(dw), snug_cuda_dfree(db), snug_cuda_dfree(dy);
}

/* rope_angles on q and k of a fused [T][3·H·hd] row, then attention_full over it. */
static void test_encoder_attention(int64_t T, int64_t H, int64_t hd, int timed) {
    int64_t D = H * hd, st = 3 * D;
    float *qkv = rnd(T * st, 1.5f), *ang = rnd(T * (hd / 2), 40.0f);
    float *out = snug_malloc((size_t)(T * D) * 4), *work = snug_malloc((size_t)T * 4);
    float *dq = dup_dev(qkv, T * st * 4), *da = dup_dev(ang, T * (hd / 2) * 4);
    float *dout = dev_poison(T * D * 4);
    char what[96];
    snug_op_rope_angles(NULL, qkv, st, T, H, hd, ang);
    snug_op_rope_angles(NULL, qkv + D, st, T, H, hd, ang);
    OK(snug_cuda_rope_angles(&cu, dq, st, T, H, hd, da, &err));
    OK(snug_cuda_rope_angles(&cu, dq + D, st, T, H, hd, da, &err));
    float *got = get(dq, T * st);
    snprintf(what, sizeof what, "rope_angles %lldx%lldx%lld", (long long)T, (long long)H,
             (long long)hd);
    cmp(what, got, qkv, T * st, 1e-5);
    snug_free(got);
    OK(snug_cuda_upload(&cu, dq, qkv, (size_t)(T * st) * 4, &err)); /* the CPU's rotated rows */
    float scale = 1.0f / sqrtf((float)hd);
    snug_op_attention_full(NULL, qkv, qkv + D, qkv + 2 * D, st, T, H, hd, scale, out, work);
    OK(snug_cuda_attention_full(&cu, dq, dq + D, dq + 2 * D, st, T, H, hd, scale, dout, &err));
    got = get(dout, T * D);
    snprintf(what, sizeof what, "attention_full %lldx%lldx%lld", (long long)T, (long long)H,
             (long long)hd);
    cmp(what, got, out, T * D, 1e-4);
    snug_free(got);
    if (timed) { /* not a check: the kernel's time for docs/perf/cuda-encoder.md */
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0), cudaEventCreate(&e1);
        cudaEventRecord(e0, (cudaStream_t)cu.stream);
        for (int r = 0; r < 5; r++)
            OK(snug_cuda_attention_full(&cu, dq, dq + D, dq + 2 * D, st, T, H, hd, scale, dout,
                                        &err));
        cudaEventRecord(e1, (cudaStream_t)cu.stream);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        ms /= 5;
        printf("time attention_full T=%lld H=%lld hd=%lld: %.3f ms, %.1f TFLOP/s\n", (long long)T,
               (long long)H, (long long)hd, ms, 4.0 * T * T * D / (ms * 1e-3) / 1e12);
        cudaEventDestroy(e0), cudaEventDestroy(e1);
    }
    snug_free(qkv), snug_free(ang), snug_free(out), snug_free(work);
    snug_cuda_dfree(dq), snug_cuda_dfree(da), snug_cuda_dfree(dout);
}

static void test_encoder(void) {
    test_encoder_rows(37, 1152);
    test_encoder_rows(5, 1000);
    test_encoder_rows(3, 4304);
    test_encoder_attention(60, 4, 16, 0);   /* the fixture tower's shape */
    test_encoder_attention(257, 16, 72, 0); /* the released tower's heads, a ragged tile */
    test_encoder_attention(1000, 3, 64, 0);
    test_encoder_attention(33, 2, 128, 0);
    test_encoder_attention(2053, 4, 72, 0);
    test_encoder_attention(4096, 16, 72, 1); /* a 1-megapixel image's patches: timed */
    CHECK(!snug_cuda_attention_full_supported(36) && snug_cuda_attention_full_supported(72));
}

/* ---- the recorded-step paths ---------------------------------------------------------------- */
static bool same_bits(const char *what, const void *a, const void *b, size_t bytes) {
    bool same = memcmp(a, b, bytes) == 0;
    printf("%-60s %s\n", what, same ? "same bits PASS" : "FAIL");
    CHECKF(same, "%s: bits differ", what);
    return same;
}

static void test_add_rmsnorm(int64_t T, int64_t n) {
    float *x = rnd(T * n, 3.0f), *y = rnd(T * n, 2.0f), *w = rnd(n, 1.0f);
    float *ref = snug_malloc((size_t)(T * n) * 4), *xr = snug_malloc((size_t)(T * n) * 4);
    memcpy(xr, x, (size_t)(T * n) * 4);
    snug_op_add(NULL, xr, y, T * n);
    snug_op_rmsnorm(NULL, xr, w, 1e-6f, T, n, ref);
    float *dx = dup_dev(x, T * n * 4), *dx2 = dup_dev(x, T * n * 4), *dy = dup_dev(y, T * n * 4);
    float *dw = dup_dev(w, n * 4), *dn = dev_poison(T * n * 4), *dn2 = dev_poison(T * n * 4);
    OK(snug_cuda_add(&cu, dx, dy, T * n, &err)); /* the unfused pair */
    OK(snug_cuda_rmsnorm(&cu, dx, dw, 1e-6f, T, n, dn, &err));
    OK(snug_cuda_add_rmsnorm(&cu, dx2, dy, dw, 1e-6f, T, n, dn2, &err));
    float *a = get(dn, T * n), *b = get(dn2, T * n), *xa = get(dx, T * n), *xb = get(dx2, T * n);
    char name[96];
    snprintf(name, sizeof name, "add_rmsnorm %lldx%lld", (long long)T, (long long)n);
    cmp(name, b, ref, T * n, 1e-5);
    cmp("  its x (the residual sum)", xb, xr, T * n, 1e-6);
    same_bits("  vs add then rmsnorm on the device: xn", a, b, (size_t)(T * n) * 4);
    same_bits("  vs add then rmsnorm on the device: x", xa, xb, (size_t)(T * n) * 4);
    snug_free(x), snug_free(y), snug_free(w), snug_free(ref), snug_free(xr);
    snug_free(a), snug_free(b), snug_free(xa), snug_free(xb);
    snug_cuda_dfree(dx), snug_cuda_dfree(dx2), snug_cuda_dfree(dy), snug_cuda_dfree(dw);
    snug_cuda_dfree(dn), snug_cuda_dfree(dn2);
}

/* The norms that also round their output to int8 (snug_cuda_*_q8) followed by the product that
 * reuses that rounding: the bits of the norm and then the product rounding x itself. */
static void test_norm_q8(int add, uint32_t type, int64_t T, int64_t n, int64_t n_out) {
    size_t rb = snug_dtype_row_bytes(type, (uint64_t)n);
    uint8_t *w = snug_malloc(rb * (size_t)n_out);
    float *src = rnd(n, 1.0f);
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n; i++) src[i] = frand();
        SNUG_ASSERT(snug_quantize_row(type, src, w + r * rb, n, NULL));
    }
    float *x = rnd(T * n, 3.0f), *y = rnd(T * n, 2.0f), *g = rnd(n, 1.0f);
    float *dx = dup_dev(x, T * n * 4), *dx2 = dup_dev(x, T * n * 4), *dy = dup_dev(y, T * n * 4);
    float *dg = dup_dev(g, n * 4), *dn = dev_poison(T * n * 4), *dn2 = dev_poison(T * n * 4);
    void *dw = dup_dev(w, rb * (size_t)n_out);
    size_t wb = snug_cuda_matmul_work_bytes(n, n_out, T);
    void *wk = dup_dev(NULL, wb), *wk2 = dup_dev(NULL, wb);
    float *o1 = dev_poison((size_t)(T * n_out) * 4), *o2 = dev_poison((size_t)(T * n_out) * 4);
    CHECK(snug_cuda_norm_q8_fits(T, n));
    if (add) {
        OK(snug_cuda_add_rmsnorm(&cu, dx, dy, dg, 1e-6f, T, n, dn, &err));
        OK(snug_cuda_add_rmsnorm_q8(&cu, dx2, dy, dg, 1e-6f, T, n, dn2, wk2, &err));
    } else {
        OK(snug_cuda_rmsnorm(&cu, dx, dg, 1e-6f, T, n, dn, &err));
        OK(snug_cuda_rmsnorm_q8(&cu, dx2, dg, 1e-6f, T, n, dn2, wk2, &err));
    }
    OK(snug_cuda_matmul(&cu, type, dw, n, n_out, dn, T, o1, wk, &err));
    OK(snug_cuda_matvec_int8_again(&cu, type, dw, n, n_out, T, o2, wk2, &err));
    float *a = get(dn, T * n), *b = get(dn2, T * n), *ya = get(o1, T * n_out),
          *yb = get(o2, T * n_out);
    char name[96];
    snprintf(name, sizeof name, "%s rounding its output, %s %lldx%lld -> %lld",
             add ? "add_rmsnorm" : "rmsnorm", snug_dtype_info(type)->name, (long long)T,
             (long long)n, (long long)n_out);
    same_bits(name, a, b, (size_t)(T * n) * 4);
    same_bits("  the product after it (no rounding of its own)", ya, yb, (size_t)(T * n_out) * 4);
    snug_free(w), snug_free(src), snug_free(x), snug_free(y), snug_free(g);
    snug_free(a), snug_free(b), snug_free(ya), snug_free(yb);
    snug_cuda_dfree(dx), snug_cuda_dfree(dx2), snug_cuda_dfree(dy), snug_cuda_dfree(dg);
    snug_cuda_dfree(dn), snug_cuda_dfree(dn2), snug_cuda_dfree(dw), snug_cuda_dfree(wk);
    snug_cuda_dfree(wk2), snug_cuda_dfree(o1), snug_cuda_dfree(o2);
}

/* The int8 rounding of n elements that a product's work memory holds (snug_cu_mvq_x's layout:
 * the n int8 values from the first 256-byte boundary, then the n / 32 (d, d·Σq) pairs from the
 * next 256-byte boundary after them), downloaded as n + n / 32 · 8 bytes. */
static uint8_t *get_rounding(const void *work, int64_t n) {
    uintptr_t qx = ((uintptr_t)work + 255) & ~(uintptr_t)255;
    size_t qb = (size_t)n, db = (size_t)(n / 32) * 8, ds = (qb + 255) & ~(size_t)255;
    uint8_t *h = snug_malloc(qb + db);
    OK(snug_cuda_sync(&cu, &err));
    OK(snug_cuda_download(&cu, h, (const void *)qx, qb, &err));
    OK(snug_cuda_download(&cu, h + qb, (const void *)(qx + ds), db, &err));
    return h;
}

/* The producers of a product's x that also round it to int8 (op 0 snug_cuda_swiglu_q8, 1
 * sigmoid_mul_q8, 2 gated_rmsnorm_q8) over T rows of n_in = Nv·dv (swiglu and sigmoid_mul: one
 * flat array of T·n_in, in place as the model calls them; the gated norm T·Nv rows of dv): the
 * output has the bits of the plain op, the rounding (qx and ds) the bits of k_quant_x8's rounding
 * of that output (what the product rounding x itself leaves in its work memory), and the product
 * reusing it (snug_cuda_matvec_int8_again, rows T of n_in over the flat rounding) the bits of the
 * product rounding x itself. */
static void test_producer_q8(int op, uint32_t type, int64_t T, int64_t Nv, int64_t dv,
                             int64_t n_out) {
    static const char *const op_name[3] = {"swiglu", "sigmoid_mul", "gated_rmsnorm"};
    int64_t n_in = Nv * dv, n = T * n_in;
    size_t rb = snug_dtype_row_bytes(type, (uint64_t)n_in);
    uint8_t *w = snug_malloc(rb * (size_t)n_out);
    float *src = snug_malloc((size_t)n_in * 4);
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++) src[i] = frand();
        SNUG_ASSERT(snug_quantize_row(type, src, w + r * rb, n_in, NULL));
    }
    float *a = rnd(n, 3.0f), *b = rnd(n, 2.0f), *g = rnd(dv, 1.0f);
    float *da = dup_dev(a, (size_t)n * 4), *db = dup_dev(b, (size_t)n * 4);
    float *dg = dup_dev(g, (size_t)dv * 4), *dn = dev_poison((size_t)n * 4);
    /* the rounding form's output: in place over a copy of the first input (as swiglu and
     * sigmoid_mul run in the model), a poisoned buffer for the gated norm */
    float *dn2 = op == 2 ? dev_poison((size_t)n * 4) : dup_dev(a, (size_t)n * 4);
    void *dw = dup_dev(w, rb * (size_t)n_out);
    size_t wb = snug_cuda_matmul_work_bytes(n_in, n_out, T);
    CHECK(snug_cuda_matmul_work_bytes(n, 1, 1) == wb); /* the flat layout's size: the same */
    void *wk = dev_poison(wb), *wk2 = dev_poison(wb);
    float *o1 = dev_poison((size_t)(T * n_out) * 4), *o2 = dev_poison((size_t)(T * n_out) * 4);
    if (op == 0) {
        OK(snug_cuda_swiglu(&cu, da, db, n, dn, &err));
        OK(snug_cuda_swiglu_q8(&cu, dn2, db, n, dn2, wk2, &err));
    } else if (op == 1) {
        OK(snug_cuda_sigmoid_mul(&cu, da, db, n, dn, &err));
        OK(snug_cuda_sigmoid_mul_q8(&cu, dn2, db, n, dn2, wk2, &err));
    } else {
        OK(snug_cuda_gated_rmsnorm(&cu, da, db, dg, 1e-6f, T, Nv, dv, dn, &err));
        OK(snug_cuda_gated_rmsnorm_q8(&cu, da, db, dg, 1e-6f, T, Nv, dv, dn2, wk2, &err));
    }
    OK(snug_cuda_matmul(&cu, type, dw, n_in, n_out, dn, T, o1, wk, &err)); /* k_quant_x8 */
    OK(snug_cuda_matvec_int8_again(&cu, type, dw, n_in, n_out, T, o2, wk2, &err));
    float *ya = get(dn, n), *yb = get(dn2, n), *pa = get(o1, T * n_out), *pb = get(o2, T * n_out);
    uint8_t *ra = get_rounding(wk, n), *rq = get_rounding(wk2, n);
    char name[112];
    snprintf(name, sizeof name, "%s rounding its output, %s T=%lld %lldx%lld -> %lld", op_name[op],
             snug_dtype_info(type)->name, (long long)T, (long long)Nv, (long long)dv,
             (long long)n_out);
    same_bits(name, ya, yb, (size_t)n * 4);
    same_bits("  its int8 rounding (qx, ds) vs k_quant_x8's", rq, ra,
              (size_t)n + (size_t)(n / 32) * 8);
    same_bits("  the product after it (no rounding of its own)", pb, pa, (size_t)(T * n_out) * 4);
    snug_free(w), snug_free(src), snug_free(a), snug_free(b), snug_free(g);
    snug_free(ya), snug_free(yb), snug_free(pa), snug_free(pb), snug_free(ra), snug_free(rq);
    snug_cuda_dfree(da), snug_cuda_dfree(db), snug_cuda_dfree(dg), snug_cuda_dfree(dn);
    snug_cuda_dfree(dn2), snug_cuda_dfree(dw), snug_cuda_dfree(wk), snug_cuda_dfree(wk2);
    snug_cuda_dfree(o1), snug_cuda_dfree(o2);
}

/* SwiGLU over the T·k expert slots rounding them for the experts' down product, which then reads
 * the rounding from that memory (snug_cuda_moe_matmul with x NULL, the backend's op scratch): the
 * bits of swiglu and then the product rounding its rows itself. One slot per tile at T = 1 (the
 * decode kernel), else tiles of up to 5 slots of one expert (the several-slot kernels). */
static void test_swiglu_moe_q8(uint32_t type, int64_t T, int64_t k, int64_t E, int64_t F,
                               int64_t H) {
    int64_t n_slots = T * k, n = n_slots * F, tile = T == 1 ? 1 : 5;
    size_t rb = snug_dtype_row_bytes(type, (uint64_t)F), eb = rb * (size_t)H;
    uint8_t *w = snug_malloc(eb * (size_t)E);
    float *src = snug_malloc((size_t)F * 4);
    for (int64_t r = 0; r < E * H; r++) {
        for (int64_t i = 0; i < F; i++) src[i] = frand();
        SNUG_ASSERT(snug_quantize_row(type, src, w + r * rb, F, NULL));
    }
    int64_t nt = (n_slots + tile - 1) / tile; /* tiles[0] = count, then (expert, s0, rows) */
    int32_t *tiles = snug_malloc((size_t)(1 + 3 * nt) * 4);
    tiles[0] = (int32_t)nt;
    for (int64_t t = 0; t < nt; t++) {
        int64_t s0 = t * tile;
        tiles[1 + 3 * t] = (int32_t)((t * 7) % E);
        tiles[2 + 3 * t] = (int32_t)s0;
        tiles[3 + 3 * t] = (int32_t)SNUG_MIN(tile, n_slots - s0);
    }
    float *gt = rnd(n, 3.0f), *up = rnd(n, 2.0f);
    float *dg = dup_dev(gt, (size_t)n * 4), *dg2 = dup_dev(gt, (size_t)n * 4);
    float *du = dup_dev(up, (size_t)n * 4);
    void *dw = dup_dev(w, eb * (size_t)E);
    int32_t *dtiles = dup_dev(tiles, (size_t)(1 + 3 * nt) * 4);
    size_t wb =
        SNUG_MAX(snug_moe_matmul_work_bytes(n_slots, F), snug_cuda_matmul_work_bytes(n, 1, 1));
    void *wk = dev_poison(wb), *wk2 = dev_poison(wb);
    float *o1 = dev_poison((size_t)(n_slots * H) * 4), *o2 = dev_poison((size_t)(n_slots * H) * 4);
    OK(snug_cuda_swiglu(&cu, dg, du, n, dg, &err)); /* in place, as moe_ffn runs it */
    OK(snug_cuda_swiglu_q8(&cu, dg2, du, n, dg2, wk2, &err));
    OK(snug_cuda_moe_matmul(&cu, type, dw, eb, F, H, dg, dtiles, n_slots, nt, T == 1, o1, wk,
                            &err));
    OK(snug_cuda_moe_matmul(&cu, type, dw, eb, F, H, NULL, dtiles, n_slots, nt, T == 1, o2, wk2,
                            &err));
    float *ya = get(dg, n), *yb = get(dg2, n);
    float *pa = get(o1, n_slots * H), *pb = get(o2, n_slots * H);
    uint8_t *ra = get_rounding(wk, n), *rq = get_rounding(wk2, n);
    char name[112];
    snprintf(name, sizeof name, "swiglu rounding expert rows, %s T=%lld k=%lld %lld -> %lld",
             snug_dtype_info(type)->name, (long long)T, (long long)k, (long long)F, (long long)H);
    same_bits(name, ya, yb, (size_t)n * 4);
    same_bits("  its int8 rounding (qx, ds) vs k_quant_x8's", rq, ra,
              (size_t)n + (size_t)(n / 32) * 8);
    same_bits("  the experts' down product after it (x NULL)", pb, pa, (size_t)(n_slots * H) * 4);
    snug_free(w), snug_free(src), snug_free(tiles), snug_free(gt), snug_free(up);
    snug_free(ya), snug_free(yb), snug_free(pa), snug_free(pb), snug_free(ra), snug_free(rq);
    snug_cuda_dfree(dg), snug_cuda_dfree(dg2), snug_cuda_dfree(du), snug_cuda_dfree(dw);
    snug_cuda_dfree(dtiles), snug_cuda_dfree(wk), snug_cuda_dfree(wk2), snug_cuda_dfree(o1);
    snug_cuda_dfree(o2);
}

/* The token-embedding gather on the device: the reference decoder's values bit for bit. */
static void test_embed(uint32_t type, int64_t V, int64_t H, int64_t T) {
    size_t rb = snug_dtype_row_bytes(type, (uint64_t)H);
    uint8_t *w = snug_malloc(rb * (size_t)V);
    float *src = snug_malloc((size_t)H * 4);
    for (int64_t r = 0; r < V; r++) {
        for (int64_t i = 0; i < H; i++) src[i] = frand() * 2.0f;
        SNUG_ASSERT(snug_quantize_row(type, src, w + r * rb, H, NULL));
    }
    int32_t *ids = snug_malloc((size_t)T * 4);
    for (int64_t t = 0; t < T; t++) ids[t] = (int32_t)((frand() + 1.0f) * 0.5f * (float)V) % V;
    ids[0] = 0, ids[T - 1] = (int32_t)V - 1;
    float *ref = snug_malloc((size_t)(T * H) * 4);
    for (int64_t t = 0; t < T; t++) snug_dequantize_row(type, w + ids[t] * rb, ref + t * H, H);
    void *dw = dup_dev(w, rb * (size_t)V);
    int32_t *dids = dup_dev(ids, (size_t)T * 4);
    float *dx = dev_poison((size_t)(T * H) * 4);
    OK(snug_cuda_embed(&cu, type, dw, H, V, dids, T, dx, &err));
    float *got = get(dx, T * H);
    char name[96];
    snprintf(name, sizeof name, "embed %s V=%lld H=%lld T=%lld", snug_dtype_info(type)->name,
             (long long)V, (long long)H, (long long)T);
    same_bits(name, got, ref, (size_t)(T * H) * 4);
    snug_free(w), snug_free(src), snug_free(ids), snug_free(ref), snug_free(got);
    snug_cuda_dfree(dw), snug_cuda_dfree(dids), snug_cuda_dfree(dx);
}

/* Two products of one x: the second reuses the first's rounding (snug_cuda_matvec_int8_again)
 * and must equal the full call. */
static void test_matvec_again(uint32_t type, int64_t n_in, int64_t n_out, int64_t T) {
    size_t rb = snug_dtype_row_bytes(type, (uint64_t)n_in);
    uint8_t *w1 = snug_malloc(rb * (size_t)n_out), *w2 = snug_malloc(rb * (size_t)n_out);
    float *src = snug_malloc((size_t)n_in * 4);
    for (int64_t r = 0; r < 2 * n_out; r++) {
        for (int64_t i = 0; i < n_in; i++) src[i] = frand();
        SNUG_ASSERT(
            snug_quantize_row(type, src, (r < n_out ? w1 : w2) + (r % n_out) * rb, n_in, NULL));
    }
    float *x = rnd(T * n_in, 1.0f);
    void *dw1 = dup_dev(w1, rb * n_out), *dw2 = dup_dev(w2, rb * n_out);
    void *dx = dup_dev(x, (size_t)(T * n_in) * 4);
    float *dy1 = dev_poison((size_t)(T * n_out) * 4), *dy2 = dev_poison((size_t)(T * n_out) * 4);
    float *dy3 = dev_poison((size_t)(T * n_out) * 4);
    void *work = dup_dev(NULL, snug_cuda_matmul_work_bytes(n_in, n_out, T));
    OK(snug_cuda_matmul(&cu, type, dw2, n_in, n_out, dx, T, dy3, work, &err)); /* reference */
    OK(snug_cuda_matmul(&cu, type, dw1, n_in, n_out, dx, T, dy1, work, &err));
    OK(snug_cuda_matvec_int8_again(&cu, type, dw2, n_in, n_out, T, dy2, work, &err));
    float *a = get(dy2, T * n_out), *b = get(dy3, T * n_out);
    char name[96];
    snprintf(name, sizeof name, "matvec %s %lldx%lld T=%lld, x rounded once for two",
             snug_dtype_info(type)->name, (long long)n_out, (long long)n_in, (long long)T);
    same_bits(name, a, b, (size_t)(T * n_out) * 4);
    snug_free(w1), snug_free(w2), snug_free(src), snug_free(x), snug_free(a), snug_free(b);
    snug_cuda_dfree(dw1), snug_cuda_dfree(dw2), snug_cuda_dfree(dx), snug_cuda_dfree(dy1);
    snug_cuda_dfree(dy2), snug_cuda_dfree(dy3), snug_cuda_dfree(work);
}

/* A decode step's cache store and attention captured once in a CUDA graph at position p1 (the
 * positions in device memory), replayed at later positions after uploading them: each replay
 * must give the bits of the same calls made directly at that position (the launch is sized for
 * any length; the kernels read the position and choose their splits when they run). */
static void test_graph_replay(int kf, int vf, int64_t Hq, int64_t Hkv, int64_t D, int64_t T) {
    int64_t n_ctx = 9000, row = Hkv * D;
    size_t kb = (size_t)(n_ctx * Hkv) * snug_kvfmt_vec_bytes(kf, D);
    size_t vb = (size_t)(n_ctx * Hkv) * snug_kvfmt_vec_bytes(vf, D);
    float *hk = rnd(n_ctx * row, 2.0f), *hvv = rnd(n_ctx * row, 1.0f);
    struct snug_cuda_kv a = {SNUG_CUDA_KV_FMT, dup_dev(NULL, kb), dup_dev(NULL, vb), n_ctx, kf, vf};
    struct snug_cuda_kv b = {SNUG_CUDA_KV_FMT, dup_dev(NULL, kb), dup_dev(NULL, vb), n_ctx, kf, vf};
    float *dk = dup_dev(hk, (size_t)(n_ctx * row) * 4),
          *dvv = dup_dev(hvv, (size_t)(n_ctx * row) * 4);
    /* both caches hold the same rows everywhere */
    for (int64_t p = 0; p < n_ctx; p += 512) {
        int64_t n = SNUG_MIN(512, n_ctx - p);
        OK(snug_cuda_kv_store(&cu, &a, Hkv, D, p, NULL, n, dk + p * row, dvv + p * row, &err));
        OK(snug_cuda_kv_store(&cu, &b, Hkv, D, p, NULL, n, dk + p * row, dvv + p * row, &err));
    }
    float *q = rnd(T * Hq * D, 1.0f), *nk = rnd(T * row, 2.0f), *nv = rnd(T * row, 1.0f);
    float *dq = dup_dev(q, (size_t)(T * Hq * D) * 4), *dnk = dup_dev(nk, (size_t)(T * row) * 4);
    float *dnv = dup_dev(nv, (size_t)(T * row) * 4);
    float *o1 = dev_poison((size_t)(T * Hq * D) * 4), *o2 = dev_poison((size_t)(T * Hq * D) * 4);
    size_t wb = snug_cuda_attention_work_bytes(Hq, D, T);
    void *w1 = dup_dev(NULL, wb), *w2 = dup_dev(NULL, wb);
    int32_t *dpos = dup_dev(NULL, (size_t)T * 4);
    int32_t hp[8];
    float scale = 1.0f / sqrtf((float)D);
    int64_t p1 = 100, later[4] = {130, 700, 5555, n_ctx - T};
    for (int64_t i = 0; i < T; i++) hp[i] = (int32_t)(p1 + i);
    OK(snug_cuda_upload(&cu, dpos, hp, (size_t)T * 4, &err));
    cudaStream_t st = (cudaStream_t)cu.stream;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    OK(snug_cuda_kv_store(&cu, &a, Hkv, D, p1, dpos, T, dnk, dnv, &err));
    OK(snug_cuda_attention(&cu, &a, Hq, Hkv, D, p1, dpos, T, dq, scale, o1, w1, &err));
    CHECK(cudaStreamEndCapture(st, &graph) == cudaSuccess);
    CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    for (int r = 0; r < 4; r++) {
        int64_t p = later[r];
        for (int64_t i = 0; i < T; i++) hp[i] = (int32_t)(p + i);
        OK(snug_cuda_upload(&cu, dpos, hp, (size_t)T * 4, &err));
        CHECK(cudaGraphLaunch(exec, st) == cudaSuccess);
        OK(snug_cuda_kv_store(&cu, &b, Hkv, D, p, NULL, T, dnk, dnv, &err));
        OK(snug_cuda_attention(&cu, &b, Hq, Hkv, D, p, NULL, T, dq, scale, o2, w2, &err));
        float *ga = get(o1, T * Hq * D), *gb = get(o2, T * Hq * D);
        char name[128];
        snprintf(name, sizeof name,
                 "graph replay %s/%s Hq=%lld D=%lld T=%lld at %lld (rec. at %lld)", KVN[kf],
                 KVN[vf], (long long)Hq, (long long)D, (long long)T, (long long)p, (long long)p1);
        same_bits(name, ga, gb, (size_t)(T * Hq * D) * 4);
        snug_free(ga), snug_free(gb);
    }
    uint8_t *ca = snug_malloc(kb), *cb = snug_malloc(kb);
    OK(snug_cuda_download(&cu, ca, a.k, kb, &err));
    OK(snug_cuda_download(&cu, cb, b.k, kb, &err));
    same_bits("  the caches after the replays (K)", ca, cb, kb);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    snug_free(ca), snug_free(cb), snug_free(hk), snug_free(hvv), snug_free(q), snug_free(nk);
    snug_free(nv);
    snug_cuda_dfree(a.k), snug_cuda_dfree(a.v), snug_cuda_dfree(b.k), snug_cuda_dfree(b.v);
    snug_cuda_dfree(dk), snug_cuda_dfree(dvv), snug_cuda_dfree(dq), snug_cuda_dfree(dnk);
    snug_cuda_dfree(dnv), snug_cuda_dfree(o1), snug_cuda_dfree(o2), snug_cuda_dfree(w1);
    snug_cuda_dfree(w2), snug_cuda_dfree(dpos);
}

/* The step form, and the prompt form against the CPU's chunked one: chunk remainders, T below
 * and at one chunk, pieces, dv not a multiple of the scan's 16 columns, every dk the WY kernels
 * take, a dk they do not (96: the recurrence), the 27B's layer (Nk 16, Nv 48, 128). */
static void test_delta_all(void) {
    test_delta(0, 1, 2, 6, 128, 128);
    test_delta(0, 5, 3, 3, 64, 96);
    test_delta(0, 8, 2, 4, 32, 40);
    test_delta(3, 133, 2, 6, 128, 128);
    test_delta(1, 77, 3, 3, 96, 96);
    for (g_delta_tc = 0; g_delta_tc < 2; g_delta_tc++) { /* the f32 scan, then tensor cores */
        snug_cuda_delta_tune(g_delta_tc);
        test_delta(1, 133, 2, 6, 128, 128);
        test_delta(1, 64, 1, 3, 32, 40);
        test_delta(1, 40, 2, 6, 64, 64);
        test_delta(1, 300, 2, 6, 64, 64);
        test_delta(2, 300, 3, 6, 128, 128);
        test_delta(2, 257, 2, 4, 32, 200);
        test_delta(1, 1000, 16, 48, 128, 128);
    }
    g_delta_tc = 0;
    snug_cuda_delta_tune(-1);
}

/* The decode rows' fused recurrence against the CPU's separate ops (split, L2 norms, scale,
 * gates, step) token by token, each token's state against the rollback point it wrote. */
static float softplus_ref(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}
static void test_delta_decode(int64_t T, int64_t Nk, int64_t Nv, int64_t dk, int64_t dv,
                              int snaps) {
    int64_t kd = Nk * dk, di = Nv * dv, cd = 2 * kd + di;
    float *qkv = rnd(T * cd, 1.5f), *b = rnd(T * Nv, 3.0f), *al = rnd(T * Nv, 3.0f);
    float *a = rnd(Nv, 1.0f), *dt = rnd(Nv, 1.0f), *S = rnd(Nv * dk * dv, 0.5f);
    for (int64_t j = 0; j < Nv; j++) a[j] = -fabsf(a[j]) - 0.1f; /* decays below 1 */
    float qscale = 1.0f / sqrtf((float)dk);
    float *ref = snug_malloc((size_t)(T * di) * 4),
          *refsnap = snug_malloc((size_t)(T * Nv * dk * dv) * 4);
    float *q = snug_malloc((size_t)kd * 4), *k = snug_malloc((size_t)kd * 4);
    float *Sdev0 = snug_malloc((size_t)(Nv * dk * dv) * 4);
    memcpy(Sdev0, S, (size_t)(Nv * dk * dv) * 4);
    for (int64_t t = 0; t < T; t++) { /* the CPU: the separate ops, one token at a time */
        memcpy(q, qkv + t * cd, (size_t)kd * 4);
        memcpy(k, qkv + t * cd + kd, (size_t)kd * 4);
        snug_op_l2norm(NULL, q, Nk, dk, 1e-6f);
        snug_op_l2norm(NULL, k, Nk, dk, 1e-6f);
        for (int64_t i = 0; i < kd; i++) q[i] *= qscale;
        float bt[64], gt[64];
        for (int64_t j = 0; j < Nv; j++) {
            bt[j] = 1.0f / (1.0f + expf(-b[t * Nv + j]));
            gt[j] = a[j] * softplus_ref(al[t * Nv + j] + dt[j]);
        }
        snug_op_gated_delta_step(NULL, 1, Nk, Nv, dk, dv, q, k, qkv + t * cd + 2 * kd, gt, bt, S,
                                 ref + t * di);
        memcpy(refsnap + t * Nv * dk * dv, S, (size_t)(Nv * dk * dv) * 4);
    }
    float *dqkv = dup_dev(qkv, (size_t)(T * cd) * 4), *db = dup_dev(b, (size_t)(T * Nv) * 4);
    float *dal = dup_dev(al, (size_t)(T * Nv) * 4), *da = dup_dev(a, (size_t)Nv * 4);
    float *ddt = dup_dev(dt, (size_t)Nv * 4), *dS = dup_dev(Sdev0, (size_t)(Nv * dk * dv) * 4);
    float *dout = dev_poison((size_t)(T * di) * 4);
    int64_t stride = Nv * dk * dv + 64; /* slots apart, as kv.h lays them out */
    float *dsnap = snaps ? dev_poison((size_t)(T * stride) * 4) : NULL;
    OK(snug_cuda_delta_decode(&cu, T, Nk, Nv, dk, dv, dqkv, db, dal, da, ddt, qscale, 1e-6f, dS,
                              dout, dsnap, stride, &err));
    float *got = get(dout, T * di);
    char name[96];
    snprintf(name, sizeof name, "delta_decode T=%lld Nk=%lld Nv=%lld dk=%lld dv=%lld%s",
             (long long)T, (long long)Nk, (long long)Nv, (long long)dk, (long long)dv,
             snaps ? " +snapshots" : "");
    cmp(name, got, ref, T * di, 1e-4);
    snug_free(got);
    got = get(dS, Nv * dk * dv);
    cmp("  state after it", got, S, Nv * dk * dv, 1e-4);
    snug_free(got);
    for (int64_t t = 0; snaps && t < T; t++) {
        got = get(dsnap + t * stride, Nv * dk * dv);
        snprintf(name, sizeof name, "  rollback point after token %lld", (long long)t);
        cmp(name, got, refsnap + t * Nv * dk * dv, Nv * dk * dv, 1e-4);
        snug_free(got);
    }
    snug_free(qkv), snug_free(b), snug_free(al), snug_free(a), snug_free(dt), snug_free(S);
    snug_free(ref), snug_free(refsnap), snug_free(q), snug_free(k), snug_free(Sdev0);
    snug_cuda_dfree(dqkv), snug_cuda_dfree(db), snug_cuda_dfree(dal), snug_cuda_dfree(da);
    snug_cuda_dfree(ddt), snug_cuda_dfree(dS), snug_cuda_dfree(dout), snug_cuda_dfree(dsnap);
}

/* The multi-run forms of a batched step (snug_cuda_conv_silu_runs, snug_cuda_delta_decode_runs)
 * against one call per run: the same bits, for runs of 1..8 rows with and without rollback
 * points, in more runs than one launch takes (SNUG_CUDA_RUNS_MAX). */
#define DS_SNAPS 11 /* rollback points kept per run in test_runs (its longest run) */
static int dev_same_bits(const char *what, const float *d1, const float *d2, int64_t n) {
    float *a = get(d1, n), *b = get(d2, n);
    int same = memcmp(a, b, (size_t)n * sizeof(float)) == 0;
    snug_free(a), snug_free(b);
    if (!same) printf("  %s differs\n", what);
    return same;
}
static void test_runs(int32_t n, const int64_t *Ts, int64_t Nk, int64_t Nv, int64_t dk, int64_t dv,
                      int64_t K) {
    int64_t kd = Nk * dk, di = Nv * dv, cd = 2 * kd + di, ns = Nv * dk * dv, rows = 0;
    struct snug_cuda_run *ra = snug_malloc(sizeof *ra * (size_t)n),
                         *rb = snug_malloc(sizeof *rb * (size_t)n);
    int64_t stride = ns + 64;
    for (int32_t i = 0; i < n; i++) rows += Ts[i];
    float *mix = rnd(rows * cd, 1.5f), *cw = rnd(cd * K, 0.5f), *cst = rnd(n * (K - 1) * cd, 1.0f);
    float *b = rnd(rows * Nv, 3.0f), *al = rnd(rows * Nv, 3.0f), *a = rnd(Nv, 1.0f);
    float *dt = rnd(Nv, 1.0f), *S = rnd(n * ns, 0.5f);
    for (int64_t j = 0; j < Nv; j++) a[j] = -fabsf(a[j]) - 0.1f;
    float *dmix = dup_dev(mix, (size_t)(rows * cd) * 4), *dcw = dup_dev(cw, (size_t)(cd * K) * 4);
    float *db = dup_dev(b, (size_t)(rows * Nv) * 4), *dal = dup_dev(al, (size_t)(rows * Nv) * 4);
    float *da = dup_dev(a, (size_t)Nv * 4), *ddt = dup_dev(dt, (size_t)Nv * 4);
    float *cs1 = dup_dev(cst, (size_t)(n * (K - 1) * cd) * 4),
          *cs2 = dup_dev(cst, (size_t)(n * (K - 1) * cd) * 4);
    float *S1 = dup_dev(S, (size_t)(n * ns) * 4), *S2 = dup_dev(S, (size_t)(n * ns) * 4);
    float *u1 = dev_poison((size_t)(rows * cd) * 4), *u2 = dev_poison((size_t)(rows * cd) * 4);
    float *o1 = dev_poison((size_t)(rows * di) * 4), *o2 = dev_poison((size_t)(rows * di) * 4);
    float *sn1 = dev_poison((size_t)(n * DS_SNAPS * stride) * 4),
          *sn2 = dev_poison((size_t)(n * DS_SNAPS * stride) * 4);
    float qscale = 1.0f / sqrtf((float)dk);
    int64_t r0 = 0;
    for (int32_t i = 0; i < n; i++) { /* odd runs keep rollback points */
        float *snap1 = i % 2 ? sn1 + i * DS_SNAPS * stride : NULL;
        ra[i] = (struct snug_cuda_run){r0, Ts[i], cs2 + i * (K - 1) * cd, NULL, 0};
        rb[i] = (struct snug_cuda_run){r0, Ts[i], S2 + i * ns,
                                       i % 2 ? sn2 + i * DS_SNAPS * stride : NULL, stride};
        OK(snug_cuda_conv_silu(&cu, dmix + r0 * cd, Ts[i], cd, K, dcw, cs1 + i * (K - 1) * cd,
                               u1 + r0 * cd, &err));
        OK(snug_cuda_delta_decode(&cu, Ts[i], Nk, Nv, dk, dv, u1 + r0 * cd, db + r0 * Nv,
                                  dal + r0 * Nv, da, ddt, qscale, 1e-6f, S1 + i * ns, o1 + r0 * di,
                                  snap1, stride, &err));
        r0 += Ts[i];
    }
    OK(snug_cuda_conv_silu_runs(&cu, n, ra, dmix, cd, K, dcw, u2, &err));
    OK(snug_cuda_delta_decode_runs(&cu, n, rb, Nk, Nv, dk, dv, u2, db, dal, da, ddt, qscale, 1e-6f,
                                   o2, &err));
    int same = dev_same_bits("conv output", u1, u2, rows * cd);
    same &= dev_same_bits("conv states", cs1, cs2, n * (K - 1) * cd);
    same &= dev_same_bits("delta output", o1, o2, rows * di);
    same &= dev_same_bits("delta states", S1, S2, n * ns);
    for (int32_t i = 1; i < n; i += 2)
        same &= dev_same_bits("rollback points", sn1 + i * DS_SNAPS * stride,
                              sn2 + i * DS_SNAPS * stride, Ts[i] * stride);
    printf("runs n=%-3d Nk=%lld Nv=%lld dk=%lld dv=%lld K=%lld: %s %s\n", (int)n, (long long)Nk,
           (long long)Nv, (long long)dk, (long long)dv, (long long)K,
           same ? "the bits of one call per run" : "differs from one call per run",
           same ? "PASS" : "FAIL");
    CHECKF(same, "runs n=%d dk=%lld", (int)n, (long long)dk);
    snug_free(ra), snug_free(rb), snug_free(mix), snug_free(cw), snug_free(cst), snug_free(b);
    snug_free(al), snug_free(a), snug_free(dt), snug_free(S);
    float *dv_[] = {dmix, dcw, db, dal, da, ddt, cs1, cs2, S1, S2, u1, u2, o1, o2, sn1, sn2};
    for (size_t i = 0; i < sizeof dv_ / sizeof dv_[0]; i++) snug_cuda_dfree(dv_[i]);
}
static void test_runs_all(void) {
    const int64_t one[4] = {1, 1, 1, 1}, mixed[5] = {1, 4, 1, 3, 8};
    int64_t many[19];
    for (int i = 0; i < 19; i++) many[i] = 1 + (i % 3 == 1 ? 3 : 0); /* 16 + 3 runs */
    test_runs(4, one, 16, 48, 128, 128, 4);   /* 4 slots of the 27B decoding */
    test_runs(5, mixed, 16, 48, 128, 128, 4); /* verifications beside decode rows */
    test_runs(19, many, 2, 6, 64, 64, 4);     /* the fixtures' shape, two launches */
    test_runs(3, mixed, 3, 9, 32, 40, 3);     /* dv not a multiple of 32 */
    const int64_t longer[2] = {2, 11};        /* a run longer than the small kernel's: per run */
    test_runs(2, longer, 2, 6, 64, 64, 4);
}

/* The draft's argmax (snug_cuda_argmax) against the host scan `x[i] > x[best]` from best = 0:
 * rows of n floats with planted ties (the lowest index wins), a NaN planted before the maximum
 * (never taken), a NaN at index 0 (taken: the scan's rule), a row of -inf (0); an odd n puts
 * rows off the 16-byte grid (the scalar loads). */
static void test_argmax(int64_t rows, int64_t n) {
    float *x = rnd(rows * n, 4.0f);
    for (int64_t r = 0; r < rows; r++) {
        float *v = x + r * n;
        int64_t a = (r * 7919) % n, b = (a + n / 3 + 1) % n;
        v[a] = v[b] = 9.0f; /* a tie */
        if (r % 4 == 1) v[(a + 1) % n] = NAN;
        if (r % 4 == 2) v[0] = NAN;
        if (r % 4 == 3 && r == rows - 1)
            for (int64_t i = 0; i < n; i++) v[i] = -INFINITY;
    }
    float *dx = dup_dev(x, rows * n * 4);
    int32_t *dout = dev_poison((size_t)rows * 4), *got = snug_malloc((size_t)rows * 4);
    OK(snug_cuda_argmax(&cu, dx, rows, n, dout, &err));
    OK(snug_cuda_sync(&cu, &err));
    OK(snug_cuda_download(&cu, got, dout, (size_t)rows * 4, &err));
    int bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *v = x + r * n;
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++)
            if (v[i] > v[best]) best = i;
        if (got[r] != best) {
            if (!bad)
                printf("  row %lld: %d, host scan %lld\n", (long long)r, got[r], (long long)best);
            bad++;
        }
    }
    printf("argmax %lldx%-31lld %d of %lld rows differ %s\n", (long long)rows, (long long)n, bad,
           (long long)rows, bad ? "FAIL" : "PASS");
    CHECKF(!bad, "argmax %lld x %lld", (long long)rows, (long long)n);
    snug_free(x), snug_free(got), snug_cuda_dfree(dx), snug_cuda_dfree(dout);
}

/* The dp4a matvec with L lanes per unit (snug_cuda_matvec_lanes) against the CPU, as the
 * default form is checked: Q4_K and Q6_K at 2..8 tokens with 2 and 4 rows per block, the
 * 27B's row lengths, odd row counts; two matrices in one launch (an FFN's gate and up). */
static void test_lanes(void) {
    uint32_t lt[2] = {SNUG_DTYPE_Q4_K, SNUG_DTYPE_Q6_K};
    int64_t Ts[5] = {2, 3, 4, 5, 8};
    for (int L = 2; L <= 4; L += 2) {
        snug_cuda_matvec_lanes(L);
        for (int rows = 2; rows <= 4; rows += 2) {
            snug_cuda_matvec_tune(rows);
            snug_cuda_matvec_mma(0); /* the dp4a kernel everywhere */
            for (int i = 0; i < 2; i++) {
                for (int j = 0; j < 5; j++) test_matmul(lt[i], 5120, 301, Ts[j]);
                test_matmul(lt[i], 17408, 45, 4);
                test_matmul(lt[i], 2304, 7, 3);
                test_matmul_pair_as(lt[i], 5120, 301, 77, 4, true);
            }
        }
        printf("(the forms above: %d lanes per unit)\n", L);
    }
    snug_cuda_matvec_lanes(1);
    snug_cuda_matvec_tune(0);
    snug_cuda_matvec_mma(-1);
}

static void test_step(void) {
    test_argmax(1, 248320); /* the Qwen3.5 vocabulary */
    test_argmax(8, 248320);
    test_argmax(4, 1001);
    test_argmax(3, 5);
    test_delta_decode(1, 16, 48, 128, 128, 0); /* the 27B's layer */
    test_delta_decode(4, 16, 48, 128, 128, 1); /* a verification of 3 drafts */
    test_delta_decode(3, 2, 6, 64, 64, 1);     /* the fixtures' shape */
    test_delta_decode(5, 3, 9, 32, 40, 0);     /* dv not a multiple of the block's columns */
    test_runs_all();
    test_add_rmsnorm(1, 5120);
    test_add_rmsnorm(7, 2048);
    test_add_rmsnorm(3, 1000);
    test_norm_q8(1, SNUG_DTYPE_Q4_K, 1, 5120, 301);
    test_norm_q8(1, SNUG_DTYPE_Q6_K, 4, 5120, 45);
    test_norm_q8(0, SNUG_DTYPE_Q8_0, 3, 2048, 77);
    test_norm_q8(0, SNUG_DTYPE_Q4_K, 8, 8192, 33);
    test_norm_q8(1, SNUG_DTYPE_Q8_0, 2, 96, 7);
    /* the other producers of a product's x: SwiGLU (the 27B's FFN width 17408, the 35B's
     * shared expert's 512), the attention output gate (27B: 24 heads of 256, 35B: 16 of 256),
     * the DeltaNet output norm (27B: 48 heads of 128, 35B: 32), odd and small shapes; then
     * SwiGLU over the experts' slots for their down product (the 35B's decode shape) */
    test_producer_q8(0, SNUG_DTYPE_Q6_K, 1, 1, 17408, 33);
    test_producer_q8(0, SNUG_DTYPE_Q4_K, 3, 1, 512, 45);
    test_producer_q8(0, SNUG_DTYPE_Q8_0, 8, 2, 32, 7);
    test_producer_q8(0, SNUG_DTYPE_IQ4_XS, 8, 1, 5120, 77);
    test_producer_q8(1, SNUG_DTYPE_Q4_K, 1, 24, 256, 45);
    test_producer_q8(1, SNUG_DTYPE_Q6_K, 3, 16, 256, 33);
    test_producer_q8(1, SNUG_DTYPE_Q8_0, 8, 1, 64, 7);
    test_producer_q8(2, SNUG_DTYPE_Q4_K, 1, 48, 128, 45);
    test_producer_q8(2, SNUG_DTYPE_Q6_K, 3, 32, 128, 33);
    test_producer_q8(2, SNUG_DTYPE_Q8_0, 8, 2, 32, 7);
    test_producer_q8(2, SNUG_DTYPE_Q8_0, 3, 5, 96, 13);
    test_swiglu_moe_q8(SNUG_DTYPE_Q4_K, 1, 8, 9, 512, 2048);
    test_swiglu_moe_q8(SNUG_DTYPE_Q6_K, 3, 8, 9, 512, 301);
    test_swiglu_moe_q8(SNUG_DTYPE_Q8_0, 8, 4, 5, 64, 77);
    uint32_t et[] = {SNUG_DTYPE_F32,  SNUG_DTYPE_F16,  SNUG_DTYPE_BF16, SNUG_DTYPE_Q8_0,
                     SNUG_DTYPE_Q4_K, SNUG_DTYPE_Q5_K, SNUG_DTYPE_Q6_K, SNUG_DTYPE_IQ4_XS};
    for (size_t i = 0; i < sizeof et / sizeof et[0]; i++) {
        test_embed(et[i], 301, 512, 1);
        test_embed(et[i], 97, 5120, 8);
    }
    uint32_t i8t[4] = {SNUG_DTYPE_Q4_K, SNUG_DTYPE_Q6_K, SNUG_DTYPE_Q8_0, SNUG_DTYPE_IQ4_XS};
    for (int i = 0; i < 4; i++) {
        test_matvec_again(i8t[i], 5120, 301, 1);
        test_matvec_again(i8t[i], 2304, 45, 5);
    }
    int pairs[][2] = {{SNUG_KV_F16, SNUG_KV_F16},
                      {SNUG_KV_Q8_0, SNUG_KV_Q8_0},
                      {SNUG_KV_Q8_0, SNUG_KV_TQ4},
                      {SNUG_KV_TQ4, SNUG_KV_TQ3}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        test_graph_replay(pairs[i][0], pairs[i][1], 24, 4, 256, 1);
        test_graph_replay(pairs[i][0], pairs[i][1], 24, 4, 256, 4);
        test_graph_replay(pairs[i][0], pairs[i][1], 6, 2, 128, 1);
    }
}

/* MoE: the 35B-A3B's decode shape (256 experts, 8 used, 2048 -> 512 and back), prompt-sized
 * steps with many slots per expert (several tiles each), and steps that leave most experts
 * empty; odd expert counts and k */
static void test_moe_all(void) {
    uint32_t moet[3] = {SNUG_DTYPE_Q4_K, SNUG_DTYPE_Q6_K, SNUG_DTYPE_Q8_0};
    /* one token (the lanes-per-row products) at the 35B's row shapes with 32 experts; then the
     * same through the block-per-4-rows product kernel */
    for (int tune = 0; tune <= 2; tune += 2) {
        snug_cuda_moe_tune(tune);
        for (int i = 0; i < 3; i++) {
            test_moe(moet[i], 1, 32, 8, 2048, 512);
            test_moe(moet[i], 1, 32, 8, 512, 2048);
            test_moe(moet[i], 1, 32, 8, 256, 77);
        }
    }
    snug_cuda_moe_tune(0);
    test_moe(SNUG_DTYPE_Q4_K, 4, 64, 8, 256, 40); /* a verification's 4 tokens */
    test_moe(SNUG_DTYPE_Q4_K, 32, 3, 1, 256, 40); /* k = 1: experts with several tiles */
    for (int i = 0; i < 3; i++) {
        test_moe(moet[i], 1, 256, 8, 2048, 512);
        test_moe(moet[i], 1, 256, 8, 512, 2048);
        test_moe(moet[i], 133, 16, 4, 512, 45);
        test_moe(moet[i], 3, 61, 5, 256, 301);
        test_moe(moet[i], 67, 9, 3, 768, 33);
    }
    snug_cuda_moe_tune(1); /* the dp4a tile kernel where the tensor-core one is the default */
    for (int i = 0; i < 2; i++) {
        test_moe(moet[i], 133, 16, 4, 512, 45);
        test_moe(moet[i], 67, 9, 3, 768, 33);
    }
    snug_cuda_moe_tune(0);
    for (int i = 0; i < 2; i++) {
        test_moe(moet[i], 512, 256, 8, 2048, 512); /* the 35B's prompt chunk */
        test_moe(moet[i], 40, 7, 2, 256, 130);     /* rows past a 64-row block */
    }
    /* the grouping's segments: 32 of them (2048 tokens), fewer where E·segments fills shared
     * memory (1500 and 4000 experts; routing by the block kernel above 1024 experts), one
     * token, k = E; then the block-per-token routing kernel where the warp one is the default */
    test_moe(SNUG_DTYPE_Q4_K, 2048, 256, 8, 256, 16);
    test_moe(SNUG_DTYPE_Q4_K, 300, 1500, 6, 256, 8);
    test_moe(SNUG_DTYPE_Q4_K, 97, 4000, 3, 256, 4);
    test_moe(SNUG_DTYPE_Q8_0, 1, 5, 5, 64, 7);
    test_moe(SNUG_DTYPE_Q8_0, 33, 1024, 32, 64, 3);
    /* one token: routing and grouping in one block (k_moe_route1), the 35B's decode shape, the
     * largest block, a partial last warp, k = 1 */
    test_moe(SNUG_DTYPE_Q4_K, 1, 256, 8, 2048, 512);
    test_moe(SNUG_DTYPE_Q8_0, 1, 1024, 32, 64, 3);
    test_moe(SNUG_DTYPE_Q6_K, 1, 45, 7, 256, 16);
    test_moe(SNUG_DTYPE_Q4_K, 1, 97, 1, 256, 8);
    snug_cuda_moe_route_tune(1);
    test_moe(SNUG_DTYPE_Q4_K, 1, 256, 8, 2048, 512);
    test_moe(SNUG_DTYPE_Q8_0, 133, 16, 4, 512, 45);
    snug_cuda_moe_route_tune(0);
}

/* Every device format, equal K/V and mixed pairs: decode, verify-sized and prompt shapes (odd
 * T, pos0 and context; the fixtures' D 64 with G 2; the 27B's D 256 with G 6 and the 35B-A3B's
 * with G 8 at depths where the decode kernels split into their most pieces; a split-over-keys
 * prompt; D 32, which the tensor-core kernel leaves to the fallback). */
static void test_attention_all(void) {
    int pairs[][2] = {
        {SNUG_KV_F32, SNUG_KV_F32},   {SNUG_KV_F16, SNUG_KV_F16},  {SNUG_KV_BF16, SNUG_KV_BF16},
        {SNUG_KV_Q8_0, SNUG_KV_Q8_0}, {SNUG_KV_FP8, SNUG_KV_FP8},  {SNUG_KV_Q8_0, SNUG_KV_FP8},
        {SNUG_KV_F16, SNUG_KV_Q8_0},  {SNUG_KV_TQ4, SNUG_KV_TQ4},  {SNUG_KV_TQ3, SNUG_KV_TQ3},
        {SNUG_KV_Q8_0, SNUG_KV_TQ4},  {SNUG_KV_TQ4, SNUG_KV_Q8_0}, {SNUG_KV_FP8, SNUG_KV_TQ3}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        int kf = pairs[i][0], vf = pairs[i][1];
        test_attention(kf, vf, 6, 2, 128, 300, 1);
        test_attention(kf, vf, 24, 4, 256, 5000, 1);
        test_attention(kf, vf, 24, 4, 256, 999, 5);
        test_attention(kf, vf, 16, 2, 256, 40001, 1);
        test_attention(kf, vf, 24, 4, 256, 20003, 4);
        test_attention(kf, vf, 4, 2, 64, 77, 45);
        if (!snug_kvfmt_rotated(kf) && !snug_kvfmt_rotated(vf)) /* tq: D % 64 == 0 */
            test_attention(kf, vf, 8, 8, 32, 0, 19);
        test_attention(kf, vf, 6, 2, 128, 3001, 67);
        test_attention(kf, vf, 4, 2, 64, 0, 301);
        /* the 27B's head size on the tensor-core kernel (tq pairs: the pipelined form too) */
        if ((kf == vf || snug_kvfmt_rotated(kf) || snug_kvfmt_rotated(vf)) && kf != SNUG_KV_F32 &&
            kf != SNUG_KV_BF16)
            test_attention(kf, vf, 24, 4, 256, 1237, 133);
    }
}

int main(int argc, char **argv) {
    const char *seed = getenv("SNUG_SEED");
    rng = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL) * 2654435761u;
    if (!rng) rng = 88172645463325252ull;
    printf("seed %llu\n", (unsigned long long)rng);
    if (snug_cuda_init(&cu, 0, &err) != SNUG_OK) {
        fprintf(stderr, "no usable CUDA device: %s\n", err.msg);
        return 1;
    }
    printf("device: %s (sm_%d%d, %d SMs)\n", cu.name, cu.cc_major, cu.cc_minor, cu.sm_count);
    /* `test_cuda_ops encoder` / `mmq` / `step` / `decode` / `moe` / `route` (moe's routing
     * checks, its products at one token only): only those cases (the whole program takes
     * several minutes) */
    const char *only = argc > 1 ? argv[1] : NULL;
    if (!only || !strcmp(only, "encoder")) test_encoder();
    if (!only || !strcmp(only, "mmq")) test_mmq_all();
    if (only && !strcmp(only, "step")) test_step();
    if (only && !strcmp(only, "attention")) {
        /* the default kernels (tensor cores for decode where the formats allow), then each
         * f32 decode form */
        test_attention_all();
        snug_cuda_attention_tune(1);
        test_attention_all();
        snug_cuda_attention_tune(2); /* the grouped kernel's FLAT candidate form */
        test_attention_all();
        snug_cuda_attention_tune(0); /* per query head */
        test_attention_all();
        snug_cuda_attention_tune(-1);
    }
    if (only && !strcmp(only, "moe")) test_moe_all();
    if (only && !strcmp(only, "delta")) test_delta_all();
    if (only && !strcmp(only, "route")) {
        g_route_only = 1;
        test_moe_all();
    }
    if (only && !strcmp(only, "lanes")) test_lanes();
    if (only && !strcmp(only, "decode")) { /* what a decode step runs: products, norms, delta */
        test_lanes();
        uint32_t dt[] = {SNUG_DTYPE_F16, SNUG_DTYPE_Q4_K, SNUG_DTYPE_Q6_K, SNUG_DTYPE_Q8_0,
                         SNUG_DTYPE_IQ4_XS};
        for (size_t i = 0; i < sizeof dt / sizeof dt[0]; i++) {
            test_matmul(dt[i], 768, 37, 1); /* few rows: the one-row-per-block f32 kernel */
            test_matmul(dt[i], 512, 45, 3);
            test_matmul(dt[i], 5120, 48, 1);
            test_matmul(dt[i], 5120, 301, 4);
            test_matmul_f32x(dt[i], 5120, 48, 1);
            test_matmul_f32x(dt[i], 5120, 1031, 2);
            /* prompt rows with f32 x (routers, gates, the shared expert): groups of 8 tokens
             * along the grid, a partial last group, both row layouts */
            test_matmul_f32x(dt[i], 2048, 512, 37);
            test_matmul_f32x(dt[i], 5120, 48, 133);
            test_matmul_f32x(dt[i], 2048, 1, 9);
            /* two matrices in one launch: β/α (27B: 48 + 48 of 5120), router + shared gate
             * (35B: 256 + 1 of 2048), decode and prompt rows, a partial token group */
            test_matmul_pair(dt[i], 5120, 48, 48, 1);
            test_matmul_pair(dt[i], 2048, 256, 1, 1);
            test_matmul_pair(dt[i], 512, 45, 7, 3);
            test_matmul_pair(dt[i], 2048, 256, 1, 37);
        }
        test_matmul_pair(SNUG_DTYPE_F32, 2048, 256, 1, 1);
        test_matmul_pair(SNUG_DTYPE_F32, 768, 30, 5, 8);
        /* the int8 pair (gate and up): the 27B's FFN (5120 -> 17408 twice), the 35B-A3B's
         * shared expert (2048 -> 512 twice), unequal and odd row counts, a verification's T */
        uint32_t i8[] = {SNUG_DTYPE_Q4_K, SNUG_DTYPE_Q6_K, SNUG_DTYPE_Q8_0, SNUG_DTYPE_IQ4_XS};
        for (size_t i = 0; i < sizeof i8 / sizeof i8[0]; i++) {
            test_matmul_pair_as(i8[i], 5120, 17408, 17408, 1, true);
            test_matmul_pair_as(i8[i], 2048, 512, 512, 1, true);
            test_matmul_pair_as(i8[i], 512, 45, 7, 3, true);
            test_matmul_pair_as(i8[i], 2048, 512, 301, 4, true);
            test_matmul_pair_as(i8[i], 1024, 77, 130, 8, true);
        }
        /* the tensor-core form of the Q4_K / Q6_K products (k_mmv; Q4_K's default for 2..8
         * tokens, the rest when asked): rows not a multiple of 16, 1..36 super-blocks per row
         * (36: the 8-warp form), every token count of a verification */
        uint32_t mmv[] = {SNUG_DTYPE_Q4_K, SNUG_DTYPE_Q6_K};
        for (size_t i = 0; i < 2; i++) {
            printf("tensor-core products (k_mmv), %s:\n", snug_dtype_info(mmv[i])->name);
            snug_cuda_matvec_mma(31);
            test_matmul(mmv[i], 256, 7, 1);
            test_matmul(mmv[i], 2304, 45, 1);
            snug_cuda_matvec_mma(21); /* (every shape: 9216 -> 33 too) */
            for (int64_t T = 2; T <= 8; T++) test_matmul(mmv[i], 768, 37, T);
            test_matmul(mmv[i], 256, 16, 8);
            test_matmul(mmv[i], 9216, 33, 3);
            snug_cuda_matvec_mma(0); /* the dp4a kernel at T > 1 still right */
            test_matmul(mmv[i], 768, 37, 4);
            snug_cuda_matvec_mma(-1);
        }
        test_basic();
        test_step();
        test_delta(0, 1, 2, 6, 128, 128);
        test_delta(0, 5, 3, 3, 64, 96);
        test_delta(0, 8, 2, 4, 32, 40);
        test_delta(1, 133, 2, 6, 128, 128);
    }
    if (only) {
        snug_cuda_free(&cu);
        return TEST_DONE();
    }
    uint32_t types[] = {SNUG_DTYPE_F32,   SNUG_DTYPE_F16,     SNUG_DTYPE_BF16,   SNUG_DTYPE_Q4_0,
                        SNUG_DTYPE_Q4_1,  SNUG_DTYPE_Q5_0,    SNUG_DTYPE_Q5_1,   SNUG_DTYPE_Q8_0,
                        SNUG_DTYPE_Q4_K,  SNUG_DTYPE_Q5_K,    SNUG_DTYPE_Q6_K,   SNUG_DTYPE_Q2_K,
                        SNUG_DTYPE_Q3_K,  SNUG_DTYPE_IQ4_NL,  SNUG_DTYPE_IQ4_XS, SNUG_DTYPE_IQ3_XXS,
                        SNUG_DTYPE_IQ3_S, SNUG_DTYPE_IQ2_XXS, SNUG_DTYPE_IQ2_XS, SNUG_DTYPE_IQ2_S,
                        SNUG_DTYPE_IQ1_S, SNUG_DTYPE_IQ1_M};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        test_matmul(types[i], 768, 37, 1);
        test_matmul(types[i], 512, 45, 3);
        test_matmul(types[i], 256, 7, 8);
    }
    /* the low-bit types through the prompt path (dequantise to bf16 + cuBLAS); IQ4_NL also at
     * a row length that is not a multiple of 256 */
    uint32_t lowbit[] = {SNUG_DTYPE_Q2_K,    SNUG_DTYPE_Q3_K,    SNUG_DTYPE_IQ4_NL,
                         SNUG_DTYPE_IQ4_XS,  SNUG_DTYPE_IQ3_XXS, SNUG_DTYPE_IQ3_S,
                         SNUG_DTYPE_IQ2_XXS, SNUG_DTYPE_IQ2_XS,  SNUG_DTYPE_IQ2_S,
                         SNUG_DTYPE_IQ1_S,   SNUG_DTYPE_IQ1_M};
    for (size_t i = 0; i < sizeof lowbit / sizeof lowbit[0]; i++)
        test_matmul(lowbit[i], 512, 45, 37);
    /* the lattice i-quants at 27B-like row lengths (5120, 17408: odd block counts per thread
     * pass), decode and prompt */
    for (size_t i = 4; i < sizeof lowbit / sizeof lowbit[0]; i++) {
        test_matmul(lowbit[i], 5120, 37, 1);
        test_matmul(lowbit[i], 17408, 13, 5);
        test_matmul(lowbit[i], 2304, 29, 19);
    }
    test_matmul(SNUG_DTYPE_IQ4_NL, 96, 13, 1);
    test_matmul(SNUG_DTYPE_IQ4_NL, 96, 13, 37);
    /* the int8 matvec: 27B-like row lengths (5120: 160 units, 17408: 544), odd row counts,
     * every T class; and the f32 kernel on the same shape (no work memory) */
    uint32_t i8t[4] = {SNUG_DTYPE_Q4_K, SNUG_DTYPE_Q6_K, SNUG_DTYPE_Q8_0, SNUG_DTYPE_IQ4_XS};
    int64_t i8T[5] = {1, 2, 3, 5, 8};
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 5; j++) test_matmul(i8t[i], 5120, 301, i8T[j]);
        test_matmul(i8t[i], 17408, 45, 1);
        test_matmul(i8t[i], 2304, 7, 4);
        test_matmul_f32x(i8t[i], 5120, 37, 1);
        for (int rows = 1; rows <= 2; rows++) { /* the other block shapes (default: 4 rows) */
            snug_cuda_matvec_tune(rows);
            test_matmul(i8t[i], 4352, 301, 1);
            test_matmul(i8t[i], 1280, 45, 3);
            test_matmul(i8t[i], 1280, 45, 8);
        }
        snug_cuda_matvec_tune(0);
    }
    test_matmul(SNUG_DTYPE_Q4_K, 1024, 4096 + 45, 37);
    test_matmul(SNUG_DTYPE_Q8_0, 768, 301, 129);
    test_matmul(SNUG_DTYPE_BF16, 768, 301, 9);
    test_matmul(SNUG_DTYPE_F32, 2048, 256, 133); /* the router's prompt shape: f32 GEMM */
    test_lanes();
    test_basic();
    test_step();
    test_attention_all();
    /* the TurboQuant store at D 192 (G 64, three groups; attention has no D 192 kernel) */
    int tqp[][2] = {{SNUG_KV_TQ4, SNUG_KV_TQ4},
                    {SNUG_KV_TQ3, SNUG_KV_TQ3},
                    {SNUG_KV_Q8_0, SNUG_KV_TQ4},
                    {SNUG_KV_TQ4, SNUG_KV_Q8_0},
                    {SNUG_KV_FP8, SNUG_KV_TQ3}};
    for (size_t i = 0; i < sizeof tqp / sizeof tqp[0]; i++) {
        test_kv_store_bytes(tqp[i][0], tqp[i][1], 3, 192, 0, 33);
        test_kv_store_bytes(tqp[i][0], tqp[i][1], 2, 128, 300, 1);
    }
    test_moe_all();
    test_delta_all();
    snug_cuda_free(&cu);
    return TEST_DONE();
}
