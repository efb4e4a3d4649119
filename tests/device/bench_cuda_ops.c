/* bench_cuda_ops.c — timings of the CUDA kernels against the two ceilings measured in the
 * same run: device-to-device copy bandwidth (bytes read + written) and the cuBLAS bf16
 * matrix rate. Matvec: 5120×17408 and 17408×5120 in Q4_K and Q8_0 (decode, bytes/time vs
 * copy bandwidth); GEMM: 8192 tokens × 5120 × 17408 (bf16 weights = pure cuBLAS, and Q4_K =
 * the int8 tensor-core kernel, or dequantise tiles + cuBLAS when that is off); attention decode
 * over a 200K cache and whole-prompt attention at 8K/32K/128K (f16, q8_0, fp8, q8_0/tq4 KV;
 * decode grouped and per head); delta. Weights rotate over enough copies to exceed the 60 MB L2.
 * Random data, never zeros. Needs a GPU; not registered with ctest.
 * `bench_cuda_ops mmq`: only the two ceilings and the prompt products of q4_K / q6_K on the int8
 * tensor-core kernel against the bf16 cuBLAS path (bench_mmq).
 * `bench_cuda_ops moe`: the MoE step's device ops at the 35B-A3B's shapes (256 experts, 8 used,
 * 2048 → 512 → 2048): routing (both kernels) and the expert products at decode (one token) and
 * prompt chunks, each timed as a CUDA graph of 16 launches (no launch gaps), plus the f32-x
 * product of the prompt's small-output matrices (one launch against one per 8 tokens).
 * `bench_cuda_ops attdec`: decode attention only (bench_attdec); `bench_cuda_ops delta`: the
 * gated delta rule only (bench_delta).
 * `bench_cuda_ops ceilings`: only the card's ceilings (copy bandwidth; cuBLAS bf16 and int8
 * matrix rates on random operands), the lines bench/gpu.sh reads; `bench_cuda_ops matvec`: the
 * copy ceiling and the decode matvec lines.
 * Record results in docs/perf/cuda-kernels.md. Read next: test_cuda_ops.c (correctness),
 * src/backend/cuda/cuda_ops.h.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_ops.h"
#include "core/core.h"
#include "quant/quant.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct snug_cuda cu;
static struct snug_err err;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

#define OK(call)                                                                                   \
    do {                                                                                           \
        if ((call) != SNUG_OK) {                                                                   \
            fprintf(stderr, "FATAL %s:%d: %s\n", __FILE__, __LINE__, err.msg);                     \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
/* A device buffer of random bytes (for quantised weights) or random floats. */
static void *dev_rand(size_t bytes, int as_float) {
    uint8_t *h = malloc(bytes);
    if (as_float)
        for (size_t i = 0; i + 4 <= bytes; i += 4) {
            float f = frand();
            memcpy(h + i, &f, 4);
        }
    else
        for (size_t i = 0; i < bytes; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            h[i] = (uint8_t)(rng >> 32);
        }
    void *d;
    OK(snug_cuda_malloc(&d, bytes, &err));
    OK(snug_cuda_upload(&cu, d, h, bytes, &err));
    free(h);
    return d;
}
/* Random quantised weights with sane scales: quantise one random row and tile it with a few
 * distinct rows (the decoders do the same work whatever the values). */
static void *dev_weights(uint32_t type, int64_t n_in, int64_t n_out) {
    size_t rb = snug_dtype_row_bytes(type, (uint64_t)n_in);
    enum { DISTINCT = 64 };
    uint8_t *rows = malloc(rb * DISTINCT);
    float *src = malloc((size_t)n_in * 4);
    for (int r = 0; r < DISTINCT; r++) {
        for (int64_t i = 0; i < n_in; i++) src[i] = frand();
        snug_quantize_row(type, src, rows + r * rb, n_in, NULL);
    }
    uint8_t *h = malloc(rb * (size_t)n_out);
    for (int64_t r = 0; r < n_out; r++) memcpy(h + r * rb, rows + (r % DISTINCT) * rb, rb);
    void *d;
    OK(snug_cuda_malloc(&d, rb * n_out, &err));
    OK(snug_cuda_upload(&cu, d, h, rb * n_out, &err));
    free(h), free(rows), free(src);
    return d;
}

static cudaEvent_t e0, e1;
static void tic(void) {
    cudaEventRecord(e0, (cudaStream_t)cu.stream);
}
static double toc_ms(void) {
    float ms;
    cudaEventRecord(e1, (cudaStream_t)cu.stream);
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&ms, e0, e1);
    return ms;
}
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmpd);
    return v[n / 2];
}

/* The matrix ceilings straight through cuBLAS on random operands (never zeros): bf16 × bf16 →
 * f32 at M×N×K = 8192×8192×8192 and int8 × int8 → int32 at the same size, median of 7 after 2
 * warm-up calls. */
static void gemm_ceilings(void) {
    enum { N = 8192, GR = 7 };
    double t[GR], flop = 2.0 * N * N * (double)N;
    size_t nn = (size_t)N * N;
    uint16_t *h = malloc(nn * 2);
    for (size_t i = 0; i < nn; i++) h[i] = snug_f32_to_bf16(frand());
    void *a, *b, *c;
    OK(snug_cuda_malloc(&a, nn * 2, &err));
    OK(snug_cuda_malloc(&b, nn * 2, &err));
    OK(snug_cuda_malloc(&c, nn * 4, &err));
    OK(snug_cuda_upload(&cu, a, h, nn * 2, &err));
    OK(snug_cuda_upload(&cu, b, h, nn * 2, &err));
    free(h);
    cublasHandle_t hb = (cublasHandle_t)cu.cublas;
    const float one = 1.0f, zero = 0.0f;
    const int32_t ione = 1, izero = 0;
    for (int kind = 0; kind < 2; kind++) { /* 0: bf16, 1: int8 (the same bytes read as int8) */
        for (int i = 0; i < GR + 2; i++) {
            if (i >= 2) tic();
            cublasStatus_t st =
                kind == 0 ? cublasGemmEx(hb, CUBLAS_OP_T, CUBLAS_OP_N, N, N, N, &one, a,
                                         CUDA_R_16BF, N, b, CUDA_R_16BF, N, &zero, c, CUDA_R_32F, N,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
                          : cublasGemmEx(hb, CUBLAS_OP_T, CUBLAS_OP_N, N, N, N, &ione, a, CUDA_R_8I,
                                         N, b, CUDA_R_8I, N, &izero, c, CUDA_R_32I, N,
                                         CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT);
            if (st != CUBLAS_STATUS_SUCCESS) {
                printf("ceiling: %s GEMM: cublasGemmEx status %d\n", kind ? "int8" : "bf16",
                       (int)st);
                break;
            }
            if (i >= 2) t[i - 2] = toc_ms();
        }
        double ms = median(t, GR);
        printf("ceiling: cuBLAS %s GEMM %dx%dx%d %.1f %s (median of %d)\n", kind ? "int8" : "bf16",
               N, N, N, flop / (ms * 1e-3) / 1e12, kind ? "TOPS" : "TFLOP/s", GR);
    }
    snug_cuda_dfree(a), snug_cuda_dfree(b), snug_cuda_dfree(c);
}

/* The bf16 cuBLAS matrix rate: 8192 × 5120 × 17408 through snug_cuda_matmul with bf16 weights
 * (the x f32 → bf16 pass included), median of 7, TFLOP/s. */
static double gemm_ceiling(void) {
    int64_t T = 8192, n_in = 5120, n_out = 17408;
    float *x = dev_rand((size_t)(T * n_in) * 4, 1), *y;
    OK(snug_cuda_malloc((void **)&y, (size_t)(T * n_out) * 4, &err));
    void *w = dev_rand((size_t)(n_in * n_out) * 2, 0), *work;
    uint16_t *h = malloc((size_t)(n_in * n_out) * 2);
    for (int64_t i = 0; i < n_in * n_out; i++) h[i] = snug_f32_to_bf16(frand());
    OK(snug_cuda_upload(&cu, w, h, (size_t)(n_in * n_out) * 2, &err));
    free(h);
    OK(snug_cuda_malloc(&work, snug_cuda_matmul_work_bytes(n_in, n_out, T), &err));
    for (int i = 0; i < 2; i++)
        OK(snug_cuda_matmul(&cu, SNUG_DTYPE_BF16, w, n_in, n_out, x, T, y, work, &err));
    double t[7];
    for (int i = 0; i < 7; i++) {
        tic();
        OK(snug_cuda_matmul(&cu, SNUG_DTYPE_BF16, w, n_in, n_out, x, T, y, work, &err));
        t[i] = toc_ms();
    }
    double rate = 2.0 * T * n_in * n_out / (median(t, 7) * 1e-3) / 1e12;
    snug_cuda_dfree(x), snug_cuda_dfree(y), snug_cuda_dfree(w), snug_cuda_dfree(work);
    return rate;
}

/* `bench_cuda_ops mmq`: prompt products of q4_K / q6_K weights at the 27B's shapes (and three of
 * the 35B-A3B's) for T = 12, 32, 512 and 2048 tokens, on the int8 tensor-core kernel (cuda_mmq.cu)
 * and on the bf16 path (dequantise 4096-row tiles + cuBLAS, snug_cuda_mmq_tune(0)), each through
 * snug_cuda_matmul as the engine calls it (x quantised / converted inside). Weights rotate over
 * copies totalling >= 160 MB (more than L2), CUDA events, median of 9 passes over the copies;
 * 2·T·n_in·n_out operations over the time (TOPS for int8, TFLOP/s for bf16), and the ratio
 * int8 / bf16 (above 1: the int8 kernel is faster), and which of the two the default table
 * (cuda_mmq.cu MMQ_MAX_T_*) picks. */
static void bench_mmq(double gemm_rate) {
    static const struct {
        const char *what;
        int64_t n_in, n_out;
        int only512;
    } sh[] = {{"27B ffn gate/up", 5120, 17408, 0},   {"27B ffn down", 17408, 5120, 0},
              {"27B attn q+gate", 5120, 12288, 0},   {"27B attn k/v", 5120, 1024, 0},
              {"27B attn/delta out", 6144, 5120, 0}, {"27B delta qkv", 5120, 10240, 0},
              {"27B delta z", 5120, 6144, 0},        {"35B attn q+gate", 2048, 8192, 1},
              {"35B attn/delta out", 4096, 2048, 1}, {"35B delta z", 2048, 4096, 1}};
    uint32_t ty[2] = {SNUG_DTYPE_Q4_K, SNUG_DTYPE_Q6_K};
    /* 12 .. 256: a step of decode rows with a short prompt piece beside them, or of several
     * slots' verifications, or a short prompt (more than SNUG_CUDA_MATVEC_MAX_T rows: a prompt
     * product); 512, 2048: prompt chunks */
    enum { NT = 7 };
    int64_t Ts[NT] = {12, 32, 64, 128, 256, 512, 2048};
    enum { MAXC = 64, REP = 9 };
    printf("%-20s %-5s %-13s %5s | %-22s | %-22s | %s\n", "shape", "type", "n_in->n_out", "T",
           "int8 mmq", "bf16 dequant+cuBLAS", "int8/bf16");
    for (size_t si = 0; si < sizeof sh / sizeof sh[0]; si++)
        for (int ti = 0; ti < 2; ti++) {
            int64_t n_in = sh[si].n_in, n_out = sh[si].n_out;
            double bytes = (double)snug_dtype_row_bytes(ty[ti], (uint64_t)n_in) * n_out;
            int nc = (int)ceil(160e6 / bytes);
            nc = nc < 3 ? 3 : nc > MAXC ? MAXC : nc;
            void *w[MAXC], *work;
            for (int c = 0; c < nc; c++) w[c] = dev_weights(ty[ti], n_in, n_out);
            int64_t Tmax = sh[si].only512 ? 512 : 2048;
            float *x = dev_rand((size_t)(Tmax * n_in) * 4, 1), *y;
            OK(snug_cuda_malloc((void **)&y, (size_t)(Tmax * n_out) * 4, &err));
            OK(snug_cuda_malloc(&work, snug_cuda_matmul_work_bytes(n_in, n_out, Tmax), &err));
            for (int k = 0; k < NT; k++) {
                int64_t T = Ts[k];
                if (T > Tmax) continue;
                double ms[2], t[REP];
                for (int path = 0; path < 2; path++) { /* 0: int8 mmq, 1: bf16 cuBLAS */
                    snug_cuda_mmq_tune(path == 0 ? 2 : 0);
                    for (int c = 0; c < nc; c++)
                        OK(snug_cuda_matmul(&cu, ty[ti], w[c], n_in, n_out, x, T, y, work, &err));
                    for (int i = 0; i < REP; i++) {
                        tic();
                        for (int c = 0; c < nc; c++)
                            OK(snug_cuda_matmul(&cu, ty[ti], w[c], n_in, n_out, x, T, y, work,
                                                &err));
                        t[i] = toc_ms() / nc;
                    }
                    ms[path] = median(t, REP);
                }
                snug_cuda_mmq_tune(-1);
                int dflt = snug_cuda_matmul_mmq(&cu, ty[ti], n_in, n_out, T);
                double op = 2.0 * T * n_in * n_out;
                printf("%-20s %-5s %5lld->%-6lld %5lld | %8.1f us %6.1f TOPS | %8.1f us %6.1f "
                       "TFLOP/s | %.2f (default: %s)\n",
                       sh[si].what, snug_dtype_info(ty[ti])->name, (long long)n_in,
                       (long long)n_out, (long long)T, ms[0] * 1e3, op / (ms[0] * 1e-3) / 1e12,
                       ms[1] * 1e3, op / (ms[1] * 1e-3) / 1e12, ms[1] / ms[0],
                       dflt ? "int8" : "bf16");
            }
            for (int c = 0; c < nc; c++) snug_cuda_dfree(w[c]);
            snug_cuda_dfree(x), snug_cuda_dfree(y), snug_cuda_dfree(work);
        }
    printf("(bf16 cuBLAS ceiling in this run: %.1f TFLOP/s)\n", gemm_rate);
}

/* ---- MoE (bench_cuda_ops moe) --------------------------------------------------------------
 * Each measurement: NG launches captured in one CUDA graph, the graph replayed REPM times after
 * one warm replay; the median per launch. Expert products cycle over NG tile tables routed from
 * different logits, so the chosen experts' weights come from HBM (E · F · H ≈ 150 MB per matrix,
 * more than L2). */
enum { NG = 16, REPM = 9 };
static double graph_us(void (*fn)(int i, void *u), void *u) {
    cudaStream_t st = (cudaStream_t)cu.stream;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    OK(snug_cuda_sync(&cu, &err));
    if (cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) exit(3);
    for (int i = 0; i < NG; i++) fn(i, u);
    if (cudaStreamEndCapture(st, &g) != cudaSuccess) exit(3);
    if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) exit(3);
    double t[REPM];
    cudaGraphLaunch(ge, st);
    for (int r = 0; r < REPM; r++) {
        tic();
        cudaGraphLaunch(ge, st);
        t[r] = toc_ms() * 1e3 / NG;
    }
    cudaGraphExecDestroy(ge), cudaGraphDestroy(g);
    return median(t, REPM);
}
struct moe_b {
    int64_t T, E, k, n_in, n_out;
    uint32_t type;
    void *lg[NG], *sel, *cnt, *selw, *order, *slot, *off, *tiles[NG], *w, *x, *y, *work;
};
static void moe_route_fn(int i, void *u) {
    struct moe_b *b = u;
    OK(snug_cuda_moe_route(&cu, b->lg[i], b->T, b->E, b->k, b->sel, b->cnt, b->selw, b->order,
                           b->slot, b->off, b->tiles[i], &err));
}
static void moe_mm_fn(int i, void *u) {
    struct moe_b *b = u;
    int64_t n = b->T * b->k, nt = snug_moe_tiles_len(b->T, b->E, b->k);
    size_t eb = snug_dtype_row_bytes(b->type, (uint64_t)b->n_in) * (size_t)b->n_out;
    OK(snug_cuda_moe_matmul(&cu, b->type, b->w, eb, b->n_in, b->n_out, b->x, b->tiles[i], n,
                            (nt - 1) / 3, b->T == 1, b->y, b->work, &err));
}
static void bench_moe(void) {
    const int64_t E = 256, k = 8, H = 2048, F = 512;
    static const int64_t Ts[4] = {1, 4, 512, 2048};
    for (int ti = 0; ti < 4; ti++) {
        struct moe_b b = {.T = Ts[ti], .E = E, .k = k};
        int64_t n = b.T * k, nt = snug_moe_tiles_len(b.T, E, k);
        for (int i = 0; i < NG; i++) {
            b.lg[i] = dev_rand((size_t)(b.T * E) * 4, 1);
            OK(snug_cuda_malloc(&b.tiles[i], (size_t)nt * 4, &err));
        }
        OK(snug_cuda_malloc(&b.sel, (size_t)n * 4, &err));
        OK(snug_cuda_malloc(&b.selw, (size_t)n * 4, &err));
        OK(snug_cuda_malloc(&b.order, (size_t)n * 4, &err));
        OK(snug_cuda_malloc(&b.slot, (size_t)n * 4, &err));
        OK(snug_cuda_malloc(&b.cnt, (size_t)E * 4, &err));
        OK(snug_cuda_malloc(&b.off, (size_t)(E + 1) * 4, &err));
        for (int old = 1; old >= 0; old--) {
            snug_cuda_moe_route_tune(old);
            printf("moe route+group T=%-5lld E=%lld k=%lld %-5s: %8.2f us\n", (long long)b.T,
                   (long long)E, (long long)k, old ? "block" : "warp", graph_us(moe_route_fn, &b));
        }
        /* the tile tables stay from the last routing of each logits set */
        static const struct {
            uint32_t type;
            int64_t n_in, n_out;
        } mm[3] = {{SNUG_DTYPE_Q4_K, 2048, 512},
                   {SNUG_DTYPE_Q6_K, 512, 2048},
                   {SNUG_DTYPE_Q4_K, 512, 2048}};
        for (int m = 0; m < 3; m++) {
            b.type = mm[m].type, b.n_in = mm[m].n_in, b.n_out = mm[m].n_out;
            b.w = dev_weights(b.type, b.n_in, b.n_out * E);
            b.x = dev_rand((size_t)(n * b.n_in) * 4, 1);
            OK(snug_cuda_malloc(&b.y, (size_t)(n * b.n_out) * 4, &err));
            OK(snug_cuda_malloc(&b.work, snug_moe_matmul_work_bytes(n, b.n_in), &err));
            double us = graph_us(moe_mm_fn, &b);
            double rb = (double)snug_dtype_row_bytes(b.type, (uint64_t)b.n_in);
            /* bytes of the distinct experts' rows (at most E, at most n), once */
            double ne = (double)(n < E ? n : E), bytes = ne * rb * (double)b.n_out;
            printf("moe_matmul %-5s %lld->%lld T=%-5lld: %8.2f us  %6.0f GB/s of expert rows  "
                   "%6.1f TOPS\n",
                   snug_dtype_info(b.type)->name, (long long)b.n_in, (long long)b.n_out,
                   (long long)b.T, us, bytes / (us * 1e-6) / 1e9,
                   2.0 * (double)n * (double)b.n_in * (double)b.n_out / (us * 1e-6) / 1e12);
            snug_cuda_dfree(b.w), snug_cuda_dfree(b.x), snug_cuda_dfree(b.y);
            snug_cuda_dfree(b.work);
        }
        for (int i = 0; i < NG; i++) snug_cuda_dfree(b.lg[i]), snug_cuda_dfree(b.tiles[i]);
        snug_cuda_dfree(b.sel), snug_cuda_dfree(b.selw), snug_cuda_dfree(b.order);
        snug_cuda_dfree(b.slot), snug_cuda_dfree(b.cnt), snug_cuda_dfree(b.off);
    }
    snug_cuda_moe_route_tune(0);
    /* the prompt's small-output products with f32 x (the shared expert's 512-row gate/up):
     * one launch over every token against one launch per 8 tokens */
    for (int64_t T = 512; T <= 2048; T *= 4) {
        void *w = dev_weights(SNUG_DTYPE_Q4_K, H, F);
        float *x = dev_rand((size_t)(T * H) * 4, 1), *y = dev_rand((size_t)(T * F) * 4, 1);
        double t1[REPM], t8[REPM];
        for (int r = 0; r < REPM + 1; r++) {
            tic();
            OK(snug_cuda_matmul_f32x(&cu, SNUG_DTYPE_Q4_K, w, H, F, x, T, y, &err));
            if (r) t1[r - 1] = toc_ms() * 1e3;
            tic();
            for (int64_t t0 = 0; t0 < T; t0 += 8)
                OK(snug_cuda_matmul(&cu, SNUG_DTYPE_Q4_K, w, H, F, x + t0 * H, 8, y + t0 * F, NULL,
                                    &err));
            if (r) t8[r - 1] = toc_ms() * 1e3;
        }
        printf("f32-x product q4_K 2048->512 T=%lld: one launch %8.1f us, per 8 tokens %8.1f us\n",
               (long long)T, median(t1, REPM), median(t8, REPM));
        snug_cuda_dfree(w), snug_cuda_dfree(x), snug_cuda_dfree(y);
    }
}

/* The attention benches' cache formats (K, V, name, bytes per head vector at D 256). */
enum { NF = 4 };
static const int kfm[NF] = {SNUG_KV_F16, SNUG_KV_Q8_0, SNUG_KV_FP8, SNUG_KV_Q8_0};
static const int vfm[NF] = {SNUG_KV_F16, SNUG_KV_Q8_0, SNUG_KV_FP8, SNUG_KV_TQ4};
static const char *const fmt_name[NF] = {"f16", "q8_0", "fp8", "q8_0/tq4"};
static const size_t kvecb[NF] = {2 * 256, 8 * 34, 4 + 256, 8 * 34},
                    vvecb[NF] = {2 * 256, 8 * 34, 4 + 256, 2 * 66};

/* A device cache of ctxmax positions in format pair fi, written by the device store in chunks
 * of CH rows of the random rk / rv; *kb / *vb its K and V bytes. */
static struct snug_cuda_kv att_cache(int fi, int64_t Hkv, int64_t D, int64_t ctxmax, int64_t CH,
                                     const float *rk, const float *rv, size_t *kb, size_t *vb) {
    *kb = (size_t)ctxmax * Hkv * kvecb[fi], *vb = (size_t)ctxmax * Hkv * vvecb[fi];
    struct snug_cuda_kv kv = {SNUG_CUDA_KV_FMT, NULL, NULL, ctxmax, kfm[fi], vfm[fi]};
    OK(snug_cuda_malloc(&kv.k, *kb, &err));
    OK(snug_cuda_malloc(&kv.v, *vb, &err));
    for (int64_t p = 0; p < ctxmax; p += CH)
        OK(snug_cuda_kv_store(&cu, &kv, Hkv, D, p, NULL, SNUG_MIN(CH, ctxmax - p), rk, rv, &err));
    return kv;
}

/* `bench_cuda_ops attdec`: decode attention (T = 1 and a 3-draft verification's T = 4) at the
 * 27B's shape (Hq 24, Hkv 4) and the 35B-A3B's (Hq 16, Hkv 2), D 256, over caches of 4K, 32K
 * and 128K positions in f16, q8_0, q8_0/tq4 and fp8, the grouped kernel, the per-head one,
 * the grouped kernel's FLAT candidate form and the tensor-core decode kernel:
 * µs per call and GB/s of cache read (K + V bytes up to the last position) against the copy
 * rate. Each time is a median of 20 calls with the cache already written. */
static void bench_attdec(double copy_bw) {
    enum { REPS = 20 };
    const int64_t shapes[2][2] = {{24, 4}, {16, 2}}, ctxs[3] = {4096, 32768, 131072};
    const int64_t D = 256, CH = 512, ctxmax = 131072;
    double t[REPS];
    for (int si = 0; si < 2; si++) {
        int64_t Hq = shapes[si][0], Hkv = shapes[si][1];
        float *rk = dev_rand((size_t)CH * Hkv * D * 4, 1),
              *rv = dev_rand((size_t)CH * Hkv * D * 4, 1);
        float *q = dev_rand((size_t)4 * Hq * D * 4, 1), *o = dev_rand((size_t)4 * Hq * D * 4, 1);
        void *work;
        size_t wb = snug_cuda_attention_work_bytes(Hq, D, 4);
        OK(snug_cuda_malloc(&work, wb + 1, &err));
        for (int fi = 0; fi < NF; fi++) {
            size_t kb, vb;
            struct snug_cuda_kv kv = att_cache(fi, Hkv, D, ctxmax, CH, rk, rv, &kb, &vb);
            for (int ci = 0; ci < 3; ci++)
                for (int T = 1; T <= 4; T += 3)
                    for (int gm = 0; gm < 4; gm++) { /* grouped, per head, FLAT, mma */
                        int64_t ctx = ctxs[ci];
                        snug_cuda_attention_tune(gm == 0 ? 1 : gm == 1 ? 0 : gm == 2 ? 2 : 3);
                        for (int i = 0; i < REPS + 2; i++) {
                            if (i >= 2) tic();
                            OK(snug_cuda_attention(&cu, &kv, Hq, Hkv, D, ctx - T, NULL, T, q,
                                                   0.0625f, o, work, &err));
                            if (i >= 2) t[i - 2] = toc_ms();
                        }
                        double ms = median(t, REPS);
                        double bytes = (double)ctx * Hkv * (double)(kvecb[fi] + vvecb[fi]);
                        double bw = bytes / (ms * 1e-3) / 1e9;
                        printf("attdec Hq=%lld Hkv=%lld %-8s %s T=%d ctx=%-6lld %8.1f us %6.0f "
                               "GB/s %5.1f%% of copy\n",
                               (long long)Hq, (long long)Hkv, fmt_name[fi],
                               gm == 0   ? "grouped "
                               : gm == 1 ? "per-head"
                               : gm == 2 ? "flat    "
                                         : "mma     ",
                               T, (long long)ctx, ms * 1e3, bw, 100 * bw / copy_bw);
                    }
            snug_cuda_attention_tune(-1);
            snug_cuda_dfree(kv.k), snug_cuda_dfree(kv.v);
        }
        snug_cuda_dfree(rk), snug_cuda_dfree(rv), snug_cuda_dfree(q), snug_cuda_dfree(o),
            snug_cuda_dfree(work);
    }
}

/* attention (27B shape: Hq 24, Hkv 4, D 256) in the device KV formats. Decode: one query
 * over 200K cached positions, GB/s of cache read. Prompt: a whole prompt of ctx tokens in
 * chunks of 512 (as the engine runs it, one layer), effective TFLOP/s = 4·D·Hq·ctx(ctx+1)/2
 * over the time, and the 16 layers' total. The cache is written by the device store from
 * random f32 rows. */
static void bench_att(double copy_bw) {
    enum { REP = 20 };
    double t[REP];
    int64_t Hq = 24, Hkv = 4, D = 256, ctxmax = 200000, CH = 512;
    float *rk = dev_rand((size_t)CH * Hkv * D * 4, 1), *rv = dev_rand((size_t)CH * Hkv * D * 4, 1);
    float *q = dev_rand((size_t)CH * Hq * D * 4, 1), *o = dev_rand((size_t)CH * Hq * D * 4, 1);
    void *work;
    size_t wb = snug_cuda_attention_work_bytes(Hq, D, CH);
    if (snug_cuda_attention_work_bytes(Hq, D, 1) > wb)
        wb = snug_cuda_attention_work_bytes(Hq, D, 1);
    OK(snug_cuda_malloc(&work, wb + 1, &err));
    for (int fi = 0; fi < NF; fi++) {
        size_t kb, vb;
        struct snug_cuda_kv kv = att_cache(fi, Hkv, D, ctxmax, CH, rk, rv, &kb, &vb);
        for (int gm = 0; gm < 3; gm++) { /* grouped, per head, tensor cores (the default) */
            snug_cuda_attention_tune(gm == 0 ? 1 : gm == 1 ? 0 : 3);
            for (int i = 0; i < REP; i++) {
                tic();
                OK(snug_cuda_attention(&cu, &kv, Hq, Hkv, D, ctxmax - 1, NULL, 1, q, 0.0625f, o,
                                       work, &err));
                t[i] = toc_ms();
            }
            double ms = median(t, REP), bw = (double)(kb + vb) / (ms * 1e-3) / 1e9;
            printf("attention decode %-8s %s ctx=%lld Hq=24 Hkv=4 D=256: %8.1f us  %6.0f "
                   "GB/s  %5.1f%% of copy\n",
                   fmt_name[fi],
                   gm == 0   ? "grouped "
                   : gm == 1 ? "per-head"
                             : "mma     ",
                   (long long)ctxmax, ms * 1e3, bw, 100 * bw / copy_bw);
        }
        snug_cuda_attention_tune(-1);
        int64_t ctxs[3] = {8192, 32768, 131072};
        for (int pm = 0; pm < 2; pm++) { /* pipelined loader, then the other */
            snug_cuda_fa_tune(pm ? 0 : 1);
            for (int ci = 0; ci < 3; ci++) {
                int64_t ctx = ctxs[ci];
                tic();
                for (int64_t p = 0; p < ctx; p += CH)
                    OK(snug_cuda_attention(&cu, &kv, Hq, Hkv, D, p, NULL, SNUG_MIN(CH, ctx - p), q,
                                           0.0625f, o, work, &err));
                double pms = toc_ms();
                double fl = 4.0 * D * Hq * (double)ctx * (double)(ctx + 1) / 2.0;
                printf("attention prompt %-4s %s ctx=%-6lld chunk 512: %9.2f ms per layer  "
                       "%6.1f TFLOP/s  (16 layers: %.2f s)\n",
                       fmt_name[fi], pm ? "sync " : "async", (long long)ctx, pms,
                       fl / (pms * 1e-3) / 1e12, 16 * pms * 1e-3);
            }
        }
        snug_cuda_fa_tune(-1);
        snug_cuda_dfree(kv.k), snug_cuda_dfree(kv.v);
    }
    snug_cuda_dfree(rk), snug_cuda_dfree(rv), snug_cuda_dfree(q), snug_cuda_dfree(o),
        snug_cuda_dfree(work);
}

/* The gated delta rule: a decode step and an 8192-token prompt at the 27B's shape (Nk 16, Nv 48,
 * dk = dv = 128), the prompt both by the recurrence and by the chunked WY form. */
static void bench_delta(void) {
    enum { REP = 20 };
    double t[REP];
    int64_t Nk = 16, Nv = 48, dk = 128, dv = 128, Tp = 8192;
    float *q = dev_rand((size_t)(Tp * Nk * dk) * 4, 1),
          *k = dev_rand((size_t)(Tp * Nk * dk) * 4, 1);
    float *v = dev_rand((size_t)(Tp * Nv * dv) * 4, 1),
          *S = dev_rand((size_t)(Nv * dk * dv) * 4, 1);
    /* decays in (-0.3, 0] and β in [0, 1) as a trained model's gates give (the time does not
     * depend on the values; the WY form's products stay finite) */
    float *hg = malloc((size_t)(Tp * Nv) * 8), *g, *b;
    for (int64_t i = 0; i < Tp * Nv; i++)
        hg[i] = -0.15f * (frand() + 1.0f), hg[Tp * Nv + i] = 0.5f * (frand() + 1.0f);
    OK(snug_cuda_malloc((void **)&g, (size_t)(Tp * Nv) * 4, &err));
    OK(snug_cuda_malloc((void **)&b, (size_t)(Tp * Nv) * 4, &err));
    OK(snug_cuda_upload(&cu, g, hg, (size_t)(Tp * Nv) * 4, &err));
    OK(snug_cuda_upload(&cu, b, hg + Tp * Nv, (size_t)(Tp * Nv) * 4, &err));
    free(hg);
    float *o = dev_rand((size_t)(Tp * Nv * dv) * 4, 1);
    for (int i = 0; i < REP; i++) {
        tic();
        OK(snug_cuda_gated_delta_step(&cu, 1, Nk, Nv, dk, dv, q, k, v, g, b, S, o, &err));
        t[i] = toc_ms();
    }
    double ms = median(t, REP), bytes = 2.0 * Nv * dk * dv * 4;
    printf("delta step T=1 (27B shape): %8.1f us  state r+w %.0f GB/s\n", ms * 1e3,
           bytes / (ms * 1e-3) / 1e9);
    /* the recurrence (no work) against the chunked WY form (work for the whole prompt) */
    size_t wb = snug_cuda_delta_chunk_work_bytes(Tp, Nv, dk, dv);
    void *wk = dev_rand(wb, 0);
    for (int form = 0; form < 3; form++) { /* the recurrence, WY (f32 scan), WY (tensor cores) */
        snug_cuda_delta_tune(form == 2);
        for (int i = 0; i < 3; i++) {
            tic();
            OK(snug_cuda_gated_delta_chunked(&cu, Tp, Nk, Nv, dk, dv, q, k, v, g, b, S, o,
                                             form ? wk : NULL, form ? wb : 0, &err));
            t[i] = toc_ms();
        }
        snug_cuda_delta_tune(-1);
        ms = median(t, 3);
        printf("delta prompt T=%lld (27B shape), %s: %8.2f ms  (%.0f tokens/s per layer)\n",
               (long long)Tp,
               !form                                          ? "recurrence"
               : !snug_cuda_delta_wy(&cu, Tp, Nv, dk, dv, wb) ? "WY form refused, recurrence"
               : form == 2                                    ? "chunked WY, tensor-core scan"
                                                              : "chunked WY, f32 scan",
               ms, Tp / (ms * 1e-3));
    }
    snug_cuda_dfree(wk);
    snug_cuda_dfree(q), snug_cuda_dfree(k), snug_cuda_dfree(v), snug_cuda_dfree(g),
        snug_cuda_dfree(b), snug_cuda_dfree(S), snug_cuda_dfree(o);
    OK(snug_cuda_sync(&cu, &err));
}

int main(int argc, char **argv) { /* argv[1]: ceilings, matvec, mmq, attdec, att, delta or moe (only
                                   * that part) */
    OK(snug_cuda_init(&cu, 0, &err));
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    printf("device: %s (sm_%d%d, %d SMs)\n", cu.name, cu.cc_major, cu.cc_minor, cu.sm_count);
    enum { REP = 20 };
    double t[REP];
    bool ceilings_only = argc > 1 && !strcmp(argv[1], "ceilings");
    bool matvec_only = argc > 1 && !strcmp(argv[1], "matvec");
    const int only_mmq = argc > 1 && !strcmp(argv[1], "mmq");

    /* ceiling 1: device copy, 2 GiB, bytes read + written */
    size_t cb = (size_t)2 << 30;
    void *ca = dev_rand(cb, 0), *cbuf;
    OK(snug_cuda_malloc(&cbuf, cb, &err));
    for (int i = 0; i < 3; i++) OK(snug_cuda_copy(&cu, cbuf, ca, cb, &err));
    for (int i = 0; i < REP; i++) {
        tic();
        OK(snug_cuda_copy(&cu, cbuf, ca, cb, &err));
        t[i] = toc_ms();
    }
    double copy_bw = 2.0 * cb / (median(t, REP) * 1e-3) / 1e9;
    printf("ceiling: device copy %.0f GB/s (2 GiB, read+write, median of %d)\n", copy_bw, REP);
    snug_cuda_dfree(ca), snug_cuda_dfree(cbuf);
    if (argc > 1 && !strcmp(argv[1], "attdec")) {
        bench_attdec(copy_bw);
        snug_cuda_free(&cu);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "att")) {
        bench_att(copy_bw);
        snug_cuda_free(&cu);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "delta")) {
        bench_delta();
        snug_cuda_free(&cu);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "moe")) {
        bench_moe();
        snug_cuda_free(&cu);
        return 0;
    }
    if (ceilings_only) {
        gemm_ceilings();
        snug_cuda_free(&cu);
        return 0;
    }
    if (only_mmq) {
        double g = gemm_ceiling();
        printf("ceiling: cuBLAS bf16 GEMM 8192x5120x17408 %.1f TFLOP/s (x f32->bf16 included)\n",
               g);
        bench_mmq(g);
        OK(snug_cuda_sync(&cu, &err));
        snug_cuda_free(&cu);
        return 0;
    }

    /* matvec (decode): rotate over NCOPY weight copies so each call streams from HBM. "int8"
     * is the default path (work memory given: x rounded to int8, dp4a), "f32" the kernel with
     * f32 activations (work NULL). Shapes: the 27B's FFN up/down, attention q/o, DeltaNet z. */
    enum { NCOPY = 8 };
    uint32_t mt[3] = {SNUG_DTYPE_Q4_K, SNUG_DTYPE_Q6_K, SNUG_DTYPE_Q8_0};
    int64_t shapes[4][2] = {{5120, 17408}, {17408, 5120}, {5120, 12288}, {6144, 5120}};
    for (int ti = 0; ti < 3; ti++)
        for (int si = 0; si < 4; si++) {
            int64_t n_in = shapes[si][0], n_out = shapes[si][1];
            void *w[NCOPY], *work;
            for (int c = 0; c < NCOPY; c++) w[c] = dev_weights(mt[ti], n_in, n_out);
            float *x = dev_rand((size_t)n_in * 4 * 8, 1), *y = dev_rand((size_t)n_out * 4 * 8, 1);
            OK(snug_cuda_malloc(&work, snug_cuda_matmul_work_bytes(n_in, n_out, 8), &err));
            double bytes = (double)snug_dtype_row_bytes(mt[ti], (uint64_t)n_in) * n_out;
            for (int v = 0; v < 17; v++) { /* dp4a: int8 T=1 rows 2, T=8, f32 T=1, rows 1,
                                              rows 4; T=4 (a verification of 3 drafts) rows 1,
                                              2, 4; tensor cores (k_mmv, q4_K/q6_K, every
                                              shape): T=1, 2, 4, 8; dp4a with L lanes per unit
                                              (q4_K/q6_K): T=4 r4 L4, r4 L2, r2 L4, T=8 r2 L4,
                                              T=2 r4 L2 */
                static const int mma_t[4] = {1, 2, 4, 8};
                static const int ln_t[5] = {4, 4, 4, 8, 2}, ln_r[5] = {4, 4, 2, 2, 4},
                                 ln_l[5] = {4, 2, 4, 4, 2};
                int mma = v >= 8 && v < 12, ln = v >= 12 ? v - 12 : -1;
                if ((mma || ln >= 0) && mt[ti] == SNUG_DTYPE_Q8_0) continue;
                int T = ln >= 0 ? ln_t[ln] : mma ? mma_t[v - 8] : v == 1 ? 8 : v >= 5 ? 4 : 1;
                void *wk = v == 2 ? NULL : work;
                if (v == 2 && si >= 2) continue; /* f32 path: the two FFN shapes only */
                int rows = ln >= 0 ? ln_r[ln] : v == 3 || v == 5 ? 1 : v == 4 || v == 7 ? 4 : 2;
                snug_cuda_matvec_tune(rows);
                snug_cuda_matvec_mma(mma ? 31 : 0);
                snug_cuda_matvec_lanes(ln >= 0 ? ln_l[ln] : 1);
                for (int i = 0; i < NCOPY; i++)
                    OK(snug_cuda_matmul(&cu, mt[ti], w[i], n_in, n_out, x, T, y, wk, &err));
                for (int i = 0; i < REP; i++) {
                    tic();
                    for (int c = 0; c < NCOPY; c++)
                        OK(snug_cuda_matmul(&cu, mt[ti], w[c], n_in, n_out, x, T, y, wk, &err));
                    t[i] = toc_ms() / NCOPY;
                }
                double ms = median(t, REP), bw = bytes / (ms * 1e-3) / 1e9;
                char form[8];
                snprintf(form, sizeof form, "%s",
                         mma         ? "mma"
                         : rows == 1 ? "r1"
                         : rows == 2 ? "r2"
                                     : "r4");
                if (ln >= 0) snprintf(form + 2, sizeof form - 2, "l%d", ln_l[ln]);
                printf("matvec %-5s %-4s %-4s n_in=%-6lld n_out=%-6lld T=%d: %8.1f us  %6.0f GB/s  "
                       "%5.1f%% of copy (floor %.1f us)\n",
                       snug_dtype_info(mt[ti])->name, wk ? "int8" : "f32", form, (long long)n_in,
                       (long long)n_out, T, ms * 1e3, bw, 100 * bw / copy_bw,
                       bytes / copy_bw / 1e3);
            }
            snug_cuda_matvec_tune(0);
            snug_cuda_matvec_mma(-1);
            snug_cuda_matvec_lanes(1);
            for (int c = 0; c < NCOPY; c++) snug_cuda_dfree(w[c]);
            snug_cuda_dfree(x), snug_cuda_dfree(y), snug_cuda_dfree(work);
        }
    if (matvec_only) {
        snug_cuda_free(&cu);
        return 0;
    }

    /* the low-bit types' decode matvec (f32 activations: they have no int8 kernel) on the 27B's
     * FFN up shape, next to Q4_K's f32 kernel: random bytes (the decoders do the same work
     * whatever the values; scales may be any f16, the result is not read) */
    uint32_t lt[] = {SNUG_DTYPE_Q4_K,    SNUG_DTYPE_Q2_K,  SNUG_DTYPE_Q3_K,    SNUG_DTYPE_IQ4_XS,
                     SNUG_DTYPE_IQ3_XXS, SNUG_DTYPE_IQ3_S, SNUG_DTYPE_IQ2_XXS, SNUG_DTYPE_IQ2_XS,
                     SNUG_DTYPE_IQ2_S,   SNUG_DTYPE_IQ1_S, SNUG_DTYPE_IQ1_M};
    for (size_t ti = 0; ti < sizeof lt / sizeof lt[0]; ti++) {
        int64_t n_in = 5120, n_out = 17408;
        double bytes = (double)snug_dtype_row_bytes(lt[ti], (uint64_t)n_in) * n_out;
        void *w[NCOPY];
        for (int c = 0; c < NCOPY; c++) w[c] = dev_rand((size_t)bytes, 0);
        float *x = dev_rand((size_t)n_in * 4, 1), *y = dev_rand((size_t)n_out * 4, 1);
        for (int c = 0; c < NCOPY; c++)
            OK(snug_cuda_matmul(&cu, lt[ti], w[c], n_in, n_out, x, 1, y, NULL, &err));
        for (int i = 0; i < REP; i++) {
            tic();
            for (int c = 0; c < NCOPY; c++)
                OK(snug_cuda_matmul(&cu, lt[ti], w[c], n_in, n_out, x, 1, y, NULL, &err));
            t[i] = toc_ms() / NCOPY;
        }
        double ms = median(t, REP), bw = bytes / (ms * 1e-3) / 1e9;
        printf("matvec %-7s f32  n_in=%-6lld n_out=%-6lld T=1: %8.1f us  %6.0f GB/s  %5.1f%% of "
               "copy (floor %.1f us)\n",
               snug_dtype_info(lt[ti])->name, (long long)n_in, (long long)n_out, ms * 1e3, bw,
               100 * bw / copy_bw, bytes / copy_bw / 1e3);
        for (int c = 0; c < NCOPY; c++) snug_cuda_dfree(w[c]);
        snug_cuda_dfree(x), snug_cuda_dfree(y);
    }

    /* ceiling 2 and the prompt product: 8192 × 5120 × 17408 */
    int64_t T = 8192, n_in = 5120, n_out = 17408;
    double flop = 2.0 * T * n_in * n_out;
    float *x = dev_rand((size_t)(T * n_in) * 4, 1), *y;
    OK(snug_cuda_malloc((void **)&y, (size_t)(T * n_out) * 4, &err));
    uint32_t gt[2] = {SNUG_DTYPE_BF16, SNUG_DTYPE_Q4_K};
    double gemm_rate = 0;
    for (int g = 0; g < 2; g++) {
        void *w =
            g == 0 ? dev_rand((size_t)(n_in * n_out) * 2, 0) : dev_weights(gt[g], n_in, n_out);
        if (g == 0) { /* random bytes as bf16: clear exponents that would make inf/NaN */
            uint16_t *h = malloc((size_t)(n_in * n_out) * 2);
            for (int64_t i = 0; i < n_in * n_out; i++) h[i] = snug_f32_to_bf16(frand());
            OK(snug_cuda_upload(&cu, w, h, (size_t)(n_in * n_out) * 2, &err));
            free(h);
        }
        size_t wb = snug_cuda_matmul_work_bytes(n_in, n_out, T);
        void *work;
        OK(snug_cuda_malloc(&work, wb, &err));
        for (int i = 0; i < 2; i++)
            OK(snug_cuda_matmul(&cu, gt[g], w, n_in, n_out, x, T, y, work, &err));
        enum { GREP = 7 };
        for (int i = 0; i < GREP; i++) {
            tic();
            OK(snug_cuda_matmul(&cu, gt[g], w, n_in, n_out, x, T, y, work, &err));
            t[i] = toc_ms();
        }
        double ms = median(t, GREP), rate = flop / (ms * 1e-3) / 1e12;
        if (g == 0) gemm_rate = rate;
        printf("matmul %-5s T=%lld n_in=%lld n_out=%lld: %8.2f ms  %6.1f TFLOP/s  %5.1f%% of the "
               "bf16 cuBLAS rate (x f32->bf16 conversion included)%s\n",
               snug_dtype_info(gt[g])->name, (long long)T, (long long)n_in, (long long)n_out, ms,
               rate, 100 * rate / gemm_rate,
               snug_cuda_matmul_mmq(&cu, gt[g], n_in, n_out, T) ? " [int8 mmq]" : "");
        snug_cuda_dfree(w), snug_cuda_dfree(work);
    }
    snug_cuda_dfree(x), snug_cuda_dfree(y);

    bench_att(copy_bw);

    bench_delta();
    OK(snug_cuda_sync(&cu, &err));
    snug_cuda_free(&cu);
    return 0;
}
