/* ops_util.h — private helpers of the CPU ops: float32 dot / axpy loops written so the compiler
 * vectorises them (many independent accumulators, fused multiply-add where the target has it),
 * and branch-free IEEE half <-> float conversion for the F16 attention cache.
 * Invariant: everything here is static inline, allocates nothing and has no state.
 * Read next: ops_matmul.c and ops_attention.c (the users). */
#ifndef SNUG_OPS_UTIL_H
#define SNUG_OPS_UTIL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* a*b + c: a fused multiply-add where the CPU has one (so the loop vectorises to vfmadd),
 * a plain multiply-add otherwise (fmaf would be a slow library call without hardware FMA). */
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define SNUG_FMA(a, b, c) fmaf((a), (b), (c))
#else
#define SNUG_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* Hot op functions are compiled three times (x86-64-v4 = AVX-512, v3 = AVX2+FMA, baseline) and
 * the loader picks one for the CPU it runs on (GCC function multi-versioning, ifunc), so a
 * build without -march=native still vectorises them with the widest registers the CPU has.
 * Only where the build targets plain x86-64 and the toolchain supports it; a native build
 * (SNUG_NATIVE=ON) compiles them once. The loops use explicit lane arrays and no FMA
 * contraction (-std=c11), so every version gives the same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__AVX2__) &&       \
    defined(__linux__)
#define SNUG_OPS_CLONES                                                                            \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SNUG_OPS_CLONES
#endif

/* The helpers below are forced inline: a static helper that the compiler keeps out of line is
 * compiled for the baseline target only, so a clone of SNUG_OPS_CLONES calling it would run
 * its loops without AVX (measured: the attention and delta-rule inner loops ran as SSE2
 * code). Inlined, they take the vector width of the clone they are in. */
#if defined(__GNUC__)
#define SNUG_OPS_INLINE static inline __attribute__((always_inline))
#else
#define SNUG_OPS_INLINE static inline
#endif

/* Register blocks for the multi-row kernels: GCC/clang vector extensions, 16 floats (one
 * AVX-512 register, two AVX2 ones in the x86-64-v3 clone), so a block's partial sums stay in
 * registers across the loop over the shared operand (plain float arrays were kept in memory,
 * a load and a store per multiply-add). a*b + c on them rounds twice, exactly like SNUG_FMA
 * without FMA, so only builds where SNUG_FMA is a plain multiply-add use them (a native
 * build with FMA takes the array loops, which then fuse). */
#if defined(__GNUC__) && !defined(__FMA__) && !defined(__ARM_FEATURE_FMA)
#define SNUG_OPS_VEC 1
/* unaligned, may alias float: loads and stores through it are plain vmovups */
typedef float snug_v16 __attribute__((vector_size(64), aligned(4), may_alias));
#define snug_v16_load(p)     (*(const snug_v16 *)(const void *)(p))
#define snug_v16_store(p, v) (*(snug_v16 *)(void *)(p) = (v))
#endif

/* Lanes of independent partial sums in the reductions: enough to fill two 512-bit registers,
 * so the additions are not serialised on one accumulator. */
#define SNUG_OPS_LANES 32

/* Σ a[i]·b[i] over n floats, accumulated in float32 in SNUG_OPS_LANES partial sums. */
SNUG_OPS_INLINE float snug_ops_dot(const float *restrict a, const float *restrict b, int64_t n) {
    float acc[SNUG_OPS_LANES] = {0};
    int64_t i = 0;
    for (; i + SNUG_OPS_LANES <= n; i += SNUG_OPS_LANES) {
        for (int j = 0; j < SNUG_OPS_LANES; j++) acc[j] = SNUG_FMA(a[i + j], b[i + j], acc[j]);
    }
    float tail = 0.0f;
    for (; i < n; i++) tail = SNUG_FMA(a[i], b[i], tail);
    for (int w = SNUG_OPS_LANES / 2; w > 0; w /= 2) {
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    }
    return acc[0] + tail;
}

/* Four dot products of rows w0..w3 with the same x, sharing the loads of x. */
SNUG_OPS_INLINE void snug_ops_dot4(const float *restrict w0, const float *restrict w1,
                                   const float *restrict w2, const float *restrict w3,
                                   const float *restrict x, int64_t n, float out[4]) {
    enum { L = 16 };
    float a0[L] = {0}, a1[L] = {0}, a2[L] = {0}, a3[L] = {0};
    int64_t i = 0;
    for (; i + L <= n; i += L) {
        for (int j = 0; j < L; j++) {
            float xv = x[i + j];
            a0[j] = SNUG_FMA(w0[i + j], xv, a0[j]);
            a1[j] = SNUG_FMA(w1[i + j], xv, a1[j]);
            a2[j] = SNUG_FMA(w2[i + j], xv, a2[j]);
            a3[j] = SNUG_FMA(w3[i + j], xv, a3[j]);
        }
    }
    float t0 = 0, t1 = 0, t2 = 0, t3 = 0;
    for (; i < n; i++) {
        t0 = SNUG_FMA(w0[i], x[i], t0);
        t1 = SNUG_FMA(w1[i], x[i], t1);
        t2 = SNUG_FMA(w2[i], x[i], t2);
        t3 = SNUG_FMA(w3[i], x[i], t3);
    }
    for (int w = L / 2; w > 0; w /= 2) {
        for (int j = 0; j < w; j++) {
            a0[j] += a0[j + w];
            a1[j] += a1[j + w];
            a2[j] += a2[j + w];
            a3[j] += a3[j + w];
        }
    }
    out[0] = a0[0] + t0;
    out[1] = a1[0] + t1;
    out[2] = a2[0] + t2;
    out[3] = a3[0] + t3;
}

/* Dot products of up to four rows a[0..n_rows-1] with the same b (attention: the query heads of
 * a GQA group against one key), sharing the loads of b. Every row is accumulated exactly as
 * snug_ops_dot accumulates it (same lanes, same order, same reduction), so a row's result does
 * not depend on which rows it was computed with. */
SNUG_OPS_INLINE void snug_ops_dot_rows(const float *const *a, int n_rows, const float *restrict b,
                                       int64_t n, float *out) {
    if (n_rows != 4) {
        for (int r = 0; r < n_rows; r++) out[r] = snug_ops_dot(a[r], b, n);
        return;
    }
    const float *restrict a0 = a[0], *restrict a1 = a[1], *restrict a2 = a[2], *restrict a3 = a[3];
    float c0[SNUG_OPS_LANES] = {0}, c1[SNUG_OPS_LANES] = {0}, c2[SNUG_OPS_LANES] = {0},
          c3[SNUG_OPS_LANES] = {0};
    int64_t i = 0;
#ifdef SNUG_OPS_VEC /* lanes 0-15 and 16-31 of each row's sums in registers */
    {
        snug_v16 z = {0}, x0 = z, y0 = z, x1 = z, y1 = z, x2 = z, y2 = z, x3 = z, y3 = z;
        for (; i + SNUG_OPS_LANES <= n; i += SNUG_OPS_LANES) {
            snug_v16 bl = snug_v16_load(b + i), bh = snug_v16_load(b + i + 16);
            x0 = snug_v16_load(a0 + i) * bl + x0, y0 = snug_v16_load(a0 + i + 16) * bh + y0;
            x1 = snug_v16_load(a1 + i) * bl + x1, y1 = snug_v16_load(a1 + i + 16) * bh + y1;
            x2 = snug_v16_load(a2 + i) * bl + x2, y2 = snug_v16_load(a2 + i + 16) * bh + y2;
            x3 = snug_v16_load(a3 + i) * bl + x3, y3 = snug_v16_load(a3 + i + 16) * bh + y3;
        }
        snug_v16_store(c0, x0), snug_v16_store(c0 + 16, y0);
        snug_v16_store(c1, x1), snug_v16_store(c1 + 16, y1);
        snug_v16_store(c2, x2), snug_v16_store(c2 + 16, y2);
        snug_v16_store(c3, x3), snug_v16_store(c3 + 16, y3);
    }
#endif
    for (; i + SNUG_OPS_LANES <= n; i += SNUG_OPS_LANES) {
        for (int j = 0; j < SNUG_OPS_LANES; j++) {
            float bj = b[i + j];
            c0[j] = SNUG_FMA(a0[i + j], bj, c0[j]);
            c1[j] = SNUG_FMA(a1[i + j], bj, c1[j]);
            c2[j] = SNUG_FMA(a2[i + j], bj, c2[j]);
            c3[j] = SNUG_FMA(a3[i + j], bj, c3[j]);
        }
    }
    float t0 = 0.0f, t1 = 0.0f, t2 = 0.0f, t3 = 0.0f;
    for (; i < n; i++) {
        t0 = SNUG_FMA(a0[i], b[i], t0);
        t1 = SNUG_FMA(a1[i], b[i], t1);
        t2 = SNUG_FMA(a2[i], b[i], t2);
        t3 = SNUG_FMA(a3[i], b[i], t3);
    }
    for (int w = SNUG_OPS_LANES / 2; w > 0; w /= 2) {
        for (int j = 0; j < w; j++) {
            c0[j] += c0[j + w];
            c1[j] += c1[j + w];
            c2[j] += c2[j + w];
            c3[j] += c3[j + w];
        }
    }
    out[0] = c0[0] + t0;
    out[1] = c1[0] + t1;
    out[2] = c2[0] + t2;
    out[3] = c3[0] + t3;
}

/* Attention's P·V for up to four output rows sharing the value rows: y_r[c] += Σ_p e_r[p]·V[p][c]
 * for p < np (V rows of stride ldv). Each element is updated in the order p = 0, 1, ... exactly
 * as np calls of snug_ops_axpy would, so the bits do not depend on the row blocking, but the
 * partial sums of a column block stay in registers across p. */
#define SNUG_OPS_PV_COLS 32
SNUG_OPS_INLINE void snug_ops_pv_rows(float *const *y, const float *const *e, int n_rows,
                                      const float *restrict V, int64_t ldv, int64_t np, int64_t n) {
    int64_t c0 = 0;
    if (n_rows == 4) {
        float *restrict y0 = y[0], *restrict y1 = y[1], *restrict y2 = y[2], *restrict y3 = y[3];
        const float *e0 = e[0], *e1 = e[1], *e2 = e[2], *e3 = e[3];
#ifdef SNUG_OPS_VEC
        for (; c0 + SNUG_OPS_PV_COLS <= n; c0 += SNUG_OPS_PV_COLS) {
            snug_v16 x0 = snug_v16_load(y0 + c0), z0 = snug_v16_load(y0 + c0 + 16);
            snug_v16 x1 = snug_v16_load(y1 + c0), z1 = snug_v16_load(y1 + c0 + 16);
            snug_v16 x2 = snug_v16_load(y2 + c0), z2 = snug_v16_load(y2 + c0 + 16);
            snug_v16 x3 = snug_v16_load(y3 + c0), z3 = snug_v16_load(y3 + c0 + 16);
            for (int64_t p = 0; p < np; p++) {
                const float *vp = V + p * ldv + c0;
                snug_v16 vl = snug_v16_load(vp), vh = snug_v16_load(vp + 16);
                float a0 = e0[p], a1 = e1[p], a2 = e2[p], a3 = e3[p];
                x0 = a0 * vl + x0, z0 = a0 * vh + z0, x1 = a1 * vl + x1, z1 = a1 * vh + z1;
                x2 = a2 * vl + x2, z2 = a2 * vh + z2, x3 = a3 * vl + x3, z3 = a3 * vh + z3;
            }
            snug_v16_store(y0 + c0, x0), snug_v16_store(y0 + c0 + 16, z0);
            snug_v16_store(y1 + c0, x1), snug_v16_store(y1 + c0 + 16, z1);
            snug_v16_store(y2 + c0, x2), snug_v16_store(y2 + c0 + 16, z2);
            snug_v16_store(y3 + c0, x3), snug_v16_store(y3 + c0 + 16, z3);
        }
#endif
        for (; c0 + SNUG_OPS_PV_COLS <= n; c0 += SNUG_OPS_PV_COLS) {
            float p0[SNUG_OPS_PV_COLS], p1[SNUG_OPS_PV_COLS], p2[SNUG_OPS_PV_COLS],
                p3[SNUG_OPS_PV_COLS];
            for (int c = 0; c < SNUG_OPS_PV_COLS; c++) {
                p0[c] = y0[c0 + c], p1[c] = y1[c0 + c], p2[c] = y2[c0 + c], p3[c] = y3[c0 + c];
            }
            for (int64_t p = 0; p < np; p++) {
                const float *restrict vp = V + p * ldv + c0;
                float a0 = e0[p], a1 = e1[p], a2 = e2[p], a3 = e3[p];
                for (int c = 0; c < SNUG_OPS_PV_COLS; c++) {
                    p0[c] = SNUG_FMA(a0, vp[c], p0[c]);
                    p1[c] = SNUG_FMA(a1, vp[c], p1[c]);
                    p2[c] = SNUG_FMA(a2, vp[c], p2[c]);
                    p3[c] = SNUG_FMA(a3, vp[c], p3[c]);
                }
            }
            for (int c = 0; c < SNUG_OPS_PV_COLS; c++) {
                y0[c0 + c] = p0[c], y1[c0 + c] = p1[c], y2[c0 + c] = p2[c], y3[c0 + c] = p3[c];
            }
        }
    } else {
        for (; c0 + SNUG_OPS_PV_COLS <= n; c0 += SNUG_OPS_PV_COLS) {
            for (int r = 0; r < n_rows; r++) {
                float *restrict yr = y[r];
                const float *er = e[r];
                float pr[SNUG_OPS_PV_COLS];
                for (int c = 0; c < SNUG_OPS_PV_COLS; c++) pr[c] = yr[c0 + c];
                for (int64_t p = 0; p < np; p++) {
                    const float *restrict vp = V + p * ldv + c0;
                    float a = er[p];
                    for (int c = 0; c < SNUG_OPS_PV_COLS; c++) pr[c] = SNUG_FMA(a, vp[c], pr[c]);
                }
                for (int c = 0; c < SNUG_OPS_PV_COLS; c++) yr[c0 + c] = pr[c];
            }
        }
    }
    for (int r = 0; r < n_rows; r++) /* the columns past the last full block */
        for (int64_t p = 0; p < np; p++)
            for (int64_t c = c0; c < n; c++) y[r][c] = SNUG_FMA(e[r][p], V[p * ldv + c], y[r][c]);
}

/* Elementwise loops run SNUG_OPS_BLK floats at a time (a constant trip count) and finish with a
 * scalar tail: GCC's -O2 cost model vectorises only loops that need no epilogue. */
#define SNUG_OPS_BLK 16

/* y[i] += a·x[i] over n floats (y and x must not overlap). */
SNUG_OPS_INLINE void snug_ops_axpy(float *restrict y, float a, const float *restrict x, int64_t n) {
    int64_t i = 0;
    for (; i + SNUG_OPS_BLK <= n; i += SNUG_OPS_BLK)
        for (int j = 0; j < SNUG_OPS_BLK; j++) y[i + j] = SNUG_FMA(a, x[i + j], y[i + j]);
    for (; i < n; i++) y[i] = SNUG_FMA(a, x[i], y[i]);
}

/* Column block of the vector-matrix products below: its partial sums stay in registers. */
#define SNUG_OPS_VM_COLS 32

/* y[c] += Σ_i a[i]·M[i·ld + c] for c < cols (a row vector times a rows×cols matrix of leading
 * dimension ld). Columns go SNUG_OPS_VM_COLS at a time so the sums live in registers and M is
 * read once; y must not overlap M. */
SNUG_OPS_INLINE void snug_ops_vm1(const float *restrict a, const float *restrict M, int64_t rows,
                                  int64_t cols, int64_t ld, float *restrict y) {
    int64_t c0 = 0;
#ifdef SNUG_OPS_VEC
    for (; c0 + SNUG_OPS_VM_COLS <= cols; c0 += SNUG_OPS_VM_COLS) {
        snug_v16 x = snug_v16_load(y + c0), z = snug_v16_load(y + c0 + 16);
        for (int64_t i = 0; i < rows; i++) {
            const float *m = M + i * ld + c0;
            x = a[i] * snug_v16_load(m) + x, z = a[i] * snug_v16_load(m + 16) + z;
        }
        snug_v16_store(y + c0, x), snug_v16_store(y + c0 + 16, z);
    }
#endif
    for (; c0 + SNUG_OPS_VM_COLS <= cols; c0 += SNUG_OPS_VM_COLS) {
        float acc[SNUG_OPS_VM_COLS];
        for (int c = 0; c < SNUG_OPS_VM_COLS; c++) acc[c] = y[c0 + c];
        for (int64_t i = 0; i < rows; i++) {
            const float *m = M + i * ld + c0;
            float ai = a[i];
            for (int c = 0; c < SNUG_OPS_VM_COLS; c++) acc[c] = SNUG_FMA(ai, m[c], acc[c]);
        }
        for (int c = 0; c < SNUG_OPS_VM_COLS; c++) y[c0 + c] = acc[c];
    }
    for (int64_t i = 0; i < rows && c0 < cols; i++) {
        for (int64_t c = c0; c < cols; c++) y[c] = SNUG_FMA(a[i], M[i * ld + c], y[c]);
    }
}

/* Two products sharing the reads of M: ya += aᵀM and yb += bᵀM (as snug_ops_vm1). */
SNUG_OPS_INLINE void snug_ops_vm2(const float *restrict a, const float *restrict b,
                                  const float *restrict M, int64_t rows, int64_t cols, int64_t ld,
                                  float *restrict ya, float *restrict yb) {
    int64_t c0 = 0;
#ifdef SNUG_OPS_VEC
    for (; c0 + SNUG_OPS_VM_COLS <= cols; c0 += SNUG_OPS_VM_COLS) {
        snug_v16 xa = snug_v16_load(ya + c0), za = snug_v16_load(ya + c0 + 16);
        snug_v16 xb = snug_v16_load(yb + c0), zb = snug_v16_load(yb + c0 + 16);
        for (int64_t i = 0; i < rows; i++) {
            const float *m = M + i * ld + c0;
            snug_v16 ml = snug_v16_load(m), mh = snug_v16_load(m + 16);
            xa = a[i] * ml + xa, za = a[i] * mh + za, xb = b[i] * ml + xb, zb = b[i] * mh + zb;
        }
        snug_v16_store(ya + c0, xa), snug_v16_store(ya + c0 + 16, za);
        snug_v16_store(yb + c0, xb), snug_v16_store(yb + c0 + 16, zb);
    }
#endif
    for (; c0 + SNUG_OPS_VM_COLS <= cols; c0 += SNUG_OPS_VM_COLS) {
        float pa[SNUG_OPS_VM_COLS], pb[SNUG_OPS_VM_COLS];
        for (int c = 0; c < SNUG_OPS_VM_COLS; c++) pa[c] = ya[c0 + c], pb[c] = yb[c0 + c];
        for (int64_t i = 0; i < rows; i++) {
            const float *m = M + i * ld + c0;
            float ai = a[i], bi = b[i];
            for (int c = 0; c < SNUG_OPS_VM_COLS; c++) {
                pa[c] = SNUG_FMA(ai, m[c], pa[c]);
                pb[c] = SNUG_FMA(bi, m[c], pb[c]);
            }
        }
        for (int c = 0; c < SNUG_OPS_VM_COLS; c++) ya[c0 + c] = pa[c], yb[c0 + c] = pb[c];
    }
    for (int64_t i = 0; i < rows && c0 < cols; i++) {
        for (int64_t c = c0; c < cols; c++) {
            ya[c] = SNUG_FMA(a[i], M[i * ld + c], ya[c]);
            yb[c] = SNUG_FMA(b[i], M[i * ld + c], yb[c]);
        }
    }
}

/* Four products sharing the reads of M: Y_r[c] += Σ_i A_r[i]·M[i·ld + c] for r < 4 (rows of
 * A and Y given by pointer; a Y row must not overlap M). The partial sums of a 32-column block
 * of all four rows stay in registers while M's rows stream by once. Each element sums over i
 * in order, as snug_ops_vm1 does. */
SNUG_OPS_INLINE void snug_ops_vm4(const float *const *A, const float *restrict M, int64_t rows,
                                  int64_t cols, int64_t ld, float *const *Y) {
    const float *a0 = A[0], *a1 = A[1], *a2 = A[2], *a3 = A[3];
    float *y0 = Y[0], *y1 = Y[1], *y2 = Y[2], *y3 = Y[3];
    int64_t c0 = 0;
#ifdef SNUG_OPS_VEC
    for (; c0 + SNUG_OPS_VM_COLS <= cols; c0 += SNUG_OPS_VM_COLS) {
        snug_v16 x0 = snug_v16_load(y0 + c0), z0 = snug_v16_load(y0 + c0 + 16);
        snug_v16 x1 = snug_v16_load(y1 + c0), z1 = snug_v16_load(y1 + c0 + 16);
        snug_v16 x2 = snug_v16_load(y2 + c0), z2 = snug_v16_load(y2 + c0 + 16);
        snug_v16 x3 = snug_v16_load(y3 + c0), z3 = snug_v16_load(y3 + c0 + 16);
        for (int64_t i = 0; i < rows; i++) {
            const float *m = M + i * ld + c0;
            snug_v16 ml = snug_v16_load(m), mh = snug_v16_load(m + 16);
            float b0 = a0[i], b1 = a1[i], b2 = a2[i], b3 = a3[i];
            x0 = b0 * ml + x0, z0 = b0 * mh + z0, x1 = b1 * ml + x1, z1 = b1 * mh + z1;
            x2 = b2 * ml + x2, z2 = b2 * mh + z2, x3 = b3 * ml + x3, z3 = b3 * mh + z3;
        }
        snug_v16_store(y0 + c0, x0), snug_v16_store(y0 + c0 + 16, z0);
        snug_v16_store(y1 + c0, x1), snug_v16_store(y1 + c0 + 16, z1);
        snug_v16_store(y2 + c0, x2), snug_v16_store(y2 + c0 + 16, z2);
        snug_v16_store(y3 + c0, x3), snug_v16_store(y3 + c0 + 16, z3);
    }
#endif
    for (; c0 + SNUG_OPS_VM_COLS <= cols; c0 += SNUG_OPS_VM_COLS) {
        float p0[SNUG_OPS_VM_COLS], p1[SNUG_OPS_VM_COLS], p2[SNUG_OPS_VM_COLS],
            p3[SNUG_OPS_VM_COLS];
        for (int c = 0; c < SNUG_OPS_VM_COLS; c++)
            p0[c] = y0[c0 + c], p1[c] = y1[c0 + c], p2[c] = y2[c0 + c], p3[c] = y3[c0 + c];
        for (int64_t i = 0; i < rows; i++) {
            const float *restrict m = M + i * ld + c0;
            float b0 = a0[i], b1 = a1[i], b2 = a2[i], b3 = a3[i];
            for (int c = 0; c < SNUG_OPS_VM_COLS; c++) {
                p0[c] = SNUG_FMA(b0, m[c], p0[c]);
                p1[c] = SNUG_FMA(b1, m[c], p1[c]);
                p2[c] = SNUG_FMA(b2, m[c], p2[c]);
                p3[c] = SNUG_FMA(b3, m[c], p3[c]);
            }
        }
        for (int c = 0; c < SNUG_OPS_VM_COLS; c++)
            y0[c0 + c] = p0[c], y1[c0 + c] = p1[c], y2[c0 + c] = p2[c], y3[c0 + c] = p3[c];
    }
    for (int64_t i = 0; i < rows && c0 < cols; i++) {
        for (int64_t c = c0; c < cols; c++) {
            float m = M[i * ld + c];
            y0[c] = SNUG_FMA(a0[i], m, y0[c]);
            y1[c] = SNUG_FMA(a1[i], m, y1[c]);
            y2[c] = SNUG_FMA(a2[i], m, y2[c]);
            y3[c] = SNUG_FMA(a3[i], m, y3[c]);
        }
    }
}

/* y[i] *= a over n floats. */
SNUG_OPS_INLINE void snug_ops_scale(float *y, float a, int64_t n) {
    int64_t i = 0;
    for (; i + SNUG_OPS_BLK <= n; i += SNUG_OPS_BLK)
        for (int j = 0; j < SNUG_OPS_BLK; j++) y[i + j] *= a;
    for (; i < n; i++) y[i] *= a;
}

/* y[i] = a·y[i] + b·x[i] over n floats (the decay-and-update of a state row). */
SNUG_OPS_INLINE void snug_ops_axpby(float *restrict y, float a, float b, const float *restrict x,
                                    int64_t n) {
    int64_t i = 0;
    for (; i + SNUG_OPS_BLK <= n; i += SNUG_OPS_BLK)
        for (int j = 0; j < SNUG_OPS_BLK; j++) y[i + j] = SNUG_FMA(a, y[i + j], b * x[i + j]);
    for (; i < n; i++) y[i] = SNUG_FMA(a, y[i], b * x[i]);
}

#define SNUG_OPS_ATT_TILE     64 /* cache positions per attention tile */
#define SNUG_OPS_ATT_MAX_ROWS 8  /* query heads per attention row group */

/* Online-softmax update of the rows of one query token (nh heads of one kv head) with cache
 * positions p0 .. p0+np-1 of a tile: scores as nh-row dots against each key (four rows share
 * each key load), per row the running max / rescale / exponentials, then P·V four rows at a
 * time over the value rows. s, m, l, o: the rows' scores, maxima, sums and outputs. Each row
 * is computed the same way whatever rows it is grouped with (used by ops_attention.c and
 * ops_attention_kvq.c; nh <= SNUG_OPS_ATT_MAX_ROWS, np <= SNUG_OPS_ATT_TILE). */
SNUG_OPS_INLINE void snug_ops_att_rows(const float *const *qh, int nh, const float *K, int64_t ldk,
                                       const float *V, int64_t ldv, int64_t np, int64_t D,
                                       float scale, float (*s)[SNUG_OPS_ATT_TILE], float *m,
                                       float *l, float *const *o) {
    for (int h0 = 0; h0 < nh; h0 += 4) {
        int nr = nh - h0 < 4 ? nh - h0 : 4;
        for (int64_t p = 0; p < np; p++) {
            float d[4];
            snug_ops_dot_rows(qh + h0, nr, K + p * ldk, D, d);
            for (int r = 0; r < nr; r++) s[h0 + r][p] = scale * d[r];
        }
    }
    const float *e[SNUG_OPS_ATT_MAX_ROWS];
    for (int h = 0; h < nh; h++) {
        float mx = m[h];
        for (int64_t p = 0; p < np; p++)
            if (s[h][p] > mx) mx = s[h][p];
        if (mx > m[h]) { /* rescale what was accumulated under the old max */
            float corr = expf(m[h] - mx);
            l[h] *= corr;
            snug_ops_scale(o[h], corr, D);
            m[h] = mx;
        }
        for (int64_t p = 0; p < np; p++) {
            float ex = expf(s[h][p] - mx);
            l[h] += ex;
            s[h][p] = ex;
        }
        e[h] = s[h];
    }
    for (int h0 = 0; h0 < nh; h0 += 4)
        snug_ops_pv_rows(o + h0, e + h0, nh - h0 < 4 ? nh - h0 : 4, V, ldv, np, D);
}

/* dst[i] = float(src[i]) for n IEEE halves. */
SNUG_OPS_INLINE float snug_ops_f16_to_f32(uint16_t h);
SNUG_OPS_INLINE void snug_ops_f16_row(float *restrict dst, const uint16_t *restrict src,
                                      int64_t n) {
    int64_t i = 0;
    for (; i + SNUG_OPS_BLK <= n; i += SNUG_OPS_BLK)
        for (int j = 0; j < SNUG_OPS_BLK; j++) dst[i + j] = snug_ops_f16_to_f32(src[i + j]);
    for (; i < n; i++) dst[i] = snug_ops_f16_to_f32(src[i]);
}

/* IEEE binary16 -> binary32, exact, branch-free (vectorisable): the exponent/mantissa bits are
 * moved into float position and multiplied by 2^112 (the bias difference 127 - 15), which also
 * normalises half subnormals exactly; exponent 31 (inf/NaN) is then forced to 255. */
SNUG_OPS_INLINE float snug_ops_f16_to_f32(uint16_t h) {
    uint32_t em = (uint32_t)(h & 0x7fffu) << 13;
    float f;
    memcpy(&f, &em, 4);
    f *= 0x1p112f;
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((h & 0x7c00u) == 0x7c00u) bits |= 0x7f800000u;
    bits |= (uint32_t)(h & 0x8000u) << 16;
    memcpy(&f, &bits, 4);
    return f;
}

/* binary32 -> binary16, round to nearest even; overflow gives ±inf, NaN stays NaN.
 * Half subnormals: adding 0.5f makes float rounding (ulp 2^-24 there) do the work. */
SNUG_OPS_INLINE uint16_t snug_ops_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u);
    if (ax >= 0x477ff000u) return sign | 0x7c00u; /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) {                       /* below 2^-14: half subnormal or zero */
        float a;
        memcpy(&a, &ax, 4);
        a += 0.5f;
        uint32_t b;
        memcpy(&b, &a, 4);
        return sign | (uint16_t)(b - 0x3f000000u);
    }
    uint32_t odd = (ax >> 13) & 1u;
    ax += 0xc8000fffu + odd; /* rebias exponent by -112 and round half to even */
    return sign | (uint16_t)(ax >> 13);
}

/* ---- exp, SiLU and sigmoid for element-wise loops ------------------------------------------
 * expf(x) without a library call, branch-free, so a loop over SNUG_OPS_BLK elements that
 * calls it vectorises. Method (the textbook one): k = round(x / ln2) by the 1.5·2^23 rounding
 * trick (no float -> int conversion, so NaN is no undefined behaviour), r = x − k·ln2 with ln2
 * split in two (the high part has 16 significant bits, so k·ln2_hi is exact for |k| < 2^8),
 * e^r on |r| <= ln2/2 by a degree-6 polynomial 1 + r + r²·(c2 + … + c6·r⁴) whose coefficients
 * were fitted here (iteratively reweighted least squares on the relative error; fit error
 * 3e-9 ≈ 0.03 ulp), then the result scaled by 2^k as two factors 2^(k>>1)·2^(k−(k>>1)) built
 * from exponent bits, so subnormal results round once and k = 128 overflows to inf.
 * x is clamped to [-104, 89] first (expf is 0 below −103.98 and inf above 88.73); a NaN is
 * kept as it is and goes through the polynomial, so exp(NaN) is NaN.
 * Max error 1 ulp against glibc expf over all floats (tests/unit/test_model_ewise.c). */
SNUG_OPS_INLINE float snug_ops_expf(float x) {
    const float log2e = 0x1.715476p+0f, ln2_hi = 0x1.62e4p-1f, ln2_lo = 0x1.7f7d1cp-20f;
    const float shift = 0x1.8p23f;    /* adding it rounds to an integer kept in the low bits */
    float xc = x < 89.0f ? x : 89.0f; /* min/max forms that map to vminps/vmaxps; written */
    xc = xc > -104.0f ? xc : -104.0f; /* as an if, GCC branches and does not vectorise */
    x = x != x ? x : xc;              /* NaN stays NaN */
    float t = x * log2e + shift;
    float kf = t - shift;
    float r = SNUG_FMA(-kf, ln2_hi, x);
    r = SNUG_FMA(-kf, ln2_lo, r);
    float q = 0x1.6a242ap-10f;
    q = SNUG_FMA(q, r, 0x1.1239d0p-7f);
    q = SNUG_FMA(q, r, 0x1.5558f2p-5f);
    q = SNUG_FMA(q, r, 0x1.555492p-3f);
    q = SNUG_FMA(q, r, 0x1.fffffcp-2f);
    float p = 1.0f + SNUG_FMA(q, r * r, r);
    union { /* bit casts (a union, not memcpy: GCC vectorises it) */
        float f;
        uint32_t u;
    } tb = {t}, s1, s2;
    int32_t k = (int32_t)(tb.u - 0x4b400000u); /* t − shift in bits: k in [-150, 129] */
    int32_t k1 = k >> 1, k2 = k - k1;          /* (any value for NaN, no overflow) */
    s1.u = (uint32_t)(k1 + 127) << 23;
    s2.u = (uint32_t)(k2 + 127) << 23;
    return p * s1.f * s2.f;
}

/* silu(x) = x·σ(x) = x / (1 + e^−x), with snug_ops_expf. */
SNUG_OPS_INLINE float snug_ops_silu(float x) {
    return x / (1.0f + snug_ops_expf(-x));
}

/* σ(x) = 1 / (1 + e^−x), with snug_ops_expf. */
SNUG_OPS_INLINE float snug_ops_sigmoid(float x) {
    return 1.0f / (1.0f + snug_ops_expf(-x));
}

#endif /* SNUG_OPS_UTIL_H */
