/* cuda_matmul.cu — matrix products on the device: the decode matvec (one warp per weight row,
 * weights dequantised in registers, f32 accumulate) for every computable weight type, the
 * dequantise-to-bf16 kernel, the prompt-chunk product (bf16 tiles through cuBLAS), and the
 * token-embedding gather (rows of any such type to f32).
 * Invariant: one pass over the weights per call; no allocation (scratch is `work`).
 * Read next: cuda_common.cuh (the per-type decoders), cuda_basic.cu. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_mmq.h"

#include <cublas_v2.h>

#define MV_WARPS 4 /* warps per block of the matvec kernel */
#define MV_ROWS  4 /* weight rows per block */

/* y[t][row] = Σ_e W[row][e] x[t][e] for t < T (NT = 1, or 8 with a runtime T <= 8).
 * A block of MV_WARPS warps owns MV_ROWS rows; thread i takes the 8-element groups i,
 * i + 128, ... of every one of those rows, so adjacent threads read adjacent bytes of each
 * row and adjacent 32-byte pieces of x (both coalesced), each x piece is loaded once for all
 * MV_ROWS rows (version 1 reloaded x per row: the x stream, 8x the Q4 weight bytes, saturated
 * L1), and each weight group is decoded once for all T inputs. Partial sums meet in shared
 * memory at the end. With NT = 8, blockIdx.y picks the group of 8 tokens (any T in one launch:
 * the products that keep f32 activations over a prompt chunk). ROWS = MV_ROWS, WARPS = MV_WARPS,
 * except for matrices of fewer rows than the card has multiprocessors (the DeltaNet's β / α: 48
 * rows): one row per block of 8 warps, so the row's groups spread over 256 threads (4 rows per 4
 * warps: 12 blocks on 132 SMs, 11.8 µs for 5120 → 48 under ncu, each thread walking 5 groups of 4
 * rows in turn). */
/* The rows of row-block `blk` (the kernels below pick the matrix and the block). */
template <int TYPE, int NT, int ROWS, int WARPS>
__device__ __forceinline__ void
matvec_rows(const uint8_t *__restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
            const float *__restrict__ x, int T, float *__restrict__ y, int64_t blk) {
    if (NT > 1 && blockIdx.y) { /* group blockIdx.y of 8 tokens (prompt rows, f32 x) */
        x += (size_t)blockIdx.y * 8 * (size_t)n_in;
        y += (size_t)blockIdx.y * 8 * (size_t)n_out;
        T -= 8 * (int)blockIdx.y;
    }
    if (NT > 1 && T > NT) T = NT;
    int64_t row0 = blk * ROWS;
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const uint8_t *wr[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) /* rows past the end re-read the last row, unused */
        wr[r] = w + (size_t)(row0 + r < n_out ? row0 + r : n_out - 1) * row_bytes;
    float acc[NT][ROWS];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int r = 0; r < ROWS; r++) acc[t][r] = 0.0f;
    int64_t ng = n_in >> 3;
#pragma unroll 2
    for (int64_t g = threadIdx.x; g < ng; g += WARPS * 32) {
        float wv[ROWS][8];
#pragma unroll
        for (int r = 0; r < ROWS; r++) deq8<TYPE>(wr[r], g << 3, wv[r]);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (NT > 1 && t >= T) break;
            const float4 *xp = (const float4 *)(x + (size_t)t * n_in + (g << 3));
            float4 a = __ldg(xp), b = __ldg(xp + 1);
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                float s = acc[t][r];
                s = fmaf(wv[r][0], a.x, s);
                s = fmaf(wv[r][1], a.y, s);
                s = fmaf(wv[r][2], a.z, s);
                s = fmaf(wv[r][3], a.w, s);
                s = fmaf(wv[r][4], b.x, s);
                s = fmaf(wv[r][5], b.y, s);
                s = fmaf(wv[r][6], b.z, s);
                s = fmaf(wv[r][7], b.w, s);
                acc[t][r] = s;
            }
        }
    }
    __shared__ float part[WARPS][NT][ROWS];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            float s = warp_sum(acc[t][r]);
            if (lane == 0) part[wid][t][r] = s;
        }
    __syncthreads();
    if (threadIdx.x < NT * ROWS) {
        int t = threadIdx.x / ROWS, r = threadIdx.x % ROWS;
        if (t < T && row0 + r < n_out) {
            float s = 0.0f;
#pragma unroll
            for (int k = 0; k < WARPS; k++) s += part[k][t][r];
            y[(size_t)t * n_out + row0 + r] = s;
        }
    }
}
template <int TYPE, int NT, int ROWS, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    k_matvec(const uint8_t *__restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
             const float *__restrict__ x, int T, float *__restrict__ y) {
    matvec_rows<TYPE, NT, ROWS, WARPS>(w, row_bytes, n_in, n_out, x, T, y, blockIdx.x);
}
/* Two matrices of one type and input width over the same x in one launch (the DeltaNet's β and
 * α, the MoE router and the shared expert's gate): blocks below n_out of the first take its
 * rows, one row per block of 8 warps (these matrices have few rows), the rest the second's.
 * Each row's sum is the single-matrix kernel's (mv1s / mv8s): the same bits. */
template <int TYPE, int NT>
__global__ void __launch_bounds__(256)
    k_matvec_pair(const uint8_t *__restrict__ w, const uint8_t *__restrict__ w2, size_t row_bytes,
                  int64_t n_in, int64_t n_out, int64_t n_out2, const float *__restrict__ x, int T,
                  float *__restrict__ y, float *__restrict__ y2) {
    int64_t b = blockIdx.x;
    if (b < n_out)
        matvec_rows<TYPE, NT, 1, 8>(w, row_bytes, n_in, n_out, x, T, y, b);
    else
        matvec_rows<TYPE, NT, 1, 8>(w2, row_bytes, n_in, n_out2, x, T, y2, b - n_out);
}

/* dst[row][e] = bf16(W[row][e]) for rows < n_rows: one thread per 8-element group, one
 * 16-byte store each. */
template <int TYPE>
__global__ void k_dequant_bf16(const uint8_t *__restrict__ w, size_t row_bytes, int64_t n_in,
                               int64_t n_rows, uint16_t *__restrict__ dst) {
    int64_t gpr = n_in >> 3;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= gpr * n_rows) return;
    int64_t row = i / gpr, g = i - row * gpr;
    float v[8];
    deq8<TYPE>(w + (size_t)row * row_bytes, g << 3, v);
    uint4 o;
    __nv_bfloat162 p[4];
#pragma unroll
    for (int k = 0; k < 4; k++) p[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
    memcpy(&o, p, 16);
    *(uint4 *)(dst + row * n_in + (g << 3)) = o;
}

/* x[t][e] = W[ids[t]][e] in f32 (the token embeddings): one thread per 8-element group, the
 * type's decoder (the CPU reference's values bit for bit); an id outside the table gives 0. */
template <int TYPE>
__global__ void k_embed_rows(const uint8_t *__restrict__ w, size_t row_bytes, int64_t n_in,
                             int64_t n_rows, const int32_t *__restrict__ ids, int64_t T,
                             float *__restrict__ x) {
    int64_t gpr = n_in >> 3;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= gpr * T) return;
    int64_t t = i / gpr, g = i - t * gpr;
    int64_t id = ids[t];
    float v[8];
    if (id >= 0 && id < n_rows)
        deq8<TYPE>(w + (size_t)id * row_bytes, g << 3, v);
    else
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = 0.0f;
    float *o = x + t * n_in + (g << 3);
#pragma unroll
    for (int k = 0; k < 8; k++) o[k] = v[k];
}

/* f32 -> bf16, n elements (any n). */
__global__ void k_f32_to_bf16(const float *__restrict__ x, int64_t n, __nv_bfloat16 *y) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16_rn(x[i]);
}

/* The launchers of one type (a table indexed by dtype keeps the dispatch to one switch). */
struct mm_fns {
    void (*mv1)(const uint8_t *, size_t, int64_t, int64_t, const float *, int, float *);
    void (*mv8)(const uint8_t *, size_t, int64_t, int64_t, const float *, int, float *);
    void (*mv1s)(const uint8_t *, size_t, int64_t, int64_t, const float *, int, float *);
    void (*mv8s)(const uint8_t *, size_t, int64_t, int64_t, const float *, int, float *);
    void (*mv1p)(const uint8_t *, const uint8_t *, size_t, int64_t, int64_t, int64_t, const float *,
                 int, float *, float *);
    void (*mv8p)(const uint8_t *, const uint8_t *, size_t, int64_t, int64_t, int64_t, const float *,
                 int, float *, float *);
    void (*deq)(const uint8_t *, size_t, int64_t, int64_t, uint16_t *);
    void (*emb)(const uint8_t *, size_t, int64_t, int64_t, const int32_t *, int64_t, float *);
    int64_t align; /* n_in must be a multiple of this */
};
#define MM_FNS(T, A)                                                                               \
    do {                                                                                           \
        f->mv1 = k_matvec<T, 1, MV_ROWS, MV_WARPS>;                                                \
        f->mv8 = k_matvec<T, 8, MV_ROWS, MV_WARPS>;                                                \
        f->mv1s = k_matvec<T, 1, 1, 8>;                                                            \
        f->mv8s = k_matvec<T, 8, 1, 8>;                                                            \
        f->mv1p = k_matvec_pair<T, 1>;                                                             \
        f->mv8p = k_matvec_pair<T, 8>;                                                             \
        f->deq = k_dequant_bf16<T>;                                                                \
        f->emb = k_embed_rows<T>;                                                                  \
        f->align = A;                                                                              \
    } while (0)

static bool mm_lookup(uint32_t type, struct mm_fns *f) {
    switch (type) {
    case SNUG_DTYPE_F32:
        MM_FNS(SNUG_DTYPE_F32, 8);
        return true;
    case SNUG_DTYPE_F16:
        MM_FNS(SNUG_DTYPE_F16, 8);
        return true;
    case SNUG_DTYPE_BF16:
        MM_FNS(SNUG_DTYPE_BF16, 8);
        return true;
    case SNUG_DTYPE_Q4_0:
        MM_FNS(SNUG_DTYPE_Q4_0, 32);
        return true;
    case SNUG_DTYPE_Q4_1:
        MM_FNS(SNUG_DTYPE_Q4_1, 32);
        return true;
    case SNUG_DTYPE_Q5_0:
        MM_FNS(SNUG_DTYPE_Q5_0, 32);
        return true;
    case SNUG_DTYPE_Q5_1:
        MM_FNS(SNUG_DTYPE_Q5_1, 32);
        return true;
    case SNUG_DTYPE_Q8_0:
        MM_FNS(SNUG_DTYPE_Q8_0, 32);
        return true;
    case SNUG_DTYPE_Q4_K:
        MM_FNS(SNUG_DTYPE_Q4_K, 256);
        return true;
    case SNUG_DTYPE_Q5_K:
        MM_FNS(SNUG_DTYPE_Q5_K, 256);
        return true;
    case SNUG_DTYPE_Q6_K:
        MM_FNS(SNUG_DTYPE_Q6_K, 256);
        return true;
    case SNUG_DTYPE_Q2_K:
        MM_FNS(SNUG_DTYPE_Q2_K, 256);
        return true;
    case SNUG_DTYPE_Q3_K:
        MM_FNS(SNUG_DTYPE_Q3_K, 256);
        return true;
    case SNUG_DTYPE_IQ4_NL:
        MM_FNS(SNUG_DTYPE_IQ4_NL, 32);
        return true;
    case SNUG_DTYPE_IQ4_XS:
        MM_FNS(SNUG_DTYPE_IQ4_XS, 256);
        return true;
    case SNUG_DTYPE_IQ3_XXS:
        MM_FNS(SNUG_DTYPE_IQ3_XXS, 256);
        return true;
    case SNUG_DTYPE_IQ3_S:
        MM_FNS(SNUG_DTYPE_IQ3_S, 256);
        return true;
    case SNUG_DTYPE_IQ2_XXS:
        MM_FNS(SNUG_DTYPE_IQ2_XXS, 256);
        return true;
    case SNUG_DTYPE_IQ2_XS:
        MM_FNS(SNUG_DTYPE_IQ2_XS, 256);
        return true;
    case SNUG_DTYPE_IQ2_S:
        MM_FNS(SNUG_DTYPE_IQ2_S, 256);
        return true;
    case SNUG_DTYPE_IQ1_S:
        MM_FNS(SNUG_DTYPE_IQ1_S, 256);
        return true;
    case SNUG_DTYPE_IQ1_M:
        MM_FNS(SNUG_DTYPE_IQ1_M, 256);
        return true;
    default:
        return false;
    }
}

extern "C" bool snug_cuda_type_supported(uint32_t type) {
    struct mm_fns f = {};
    return mm_lookup(type, &f);
}

/* Shared argument checks of matmul and dequant: a known type, n_in a multiple of its
 * alignment, a 16-byte-aligned weight pointer. */
static int mm_check(uint32_t type, const void *w, int64_t n_in, int64_t n_out, struct mm_fns *f,
                    struct snug_err *err) {
    const struct snug_dtype_info *ti = snug_dtype_info(type);
    if (!mm_lookup(type, f))
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "cuda matmul: weight type %s (%u) has no "
                            "device kernel",
                            ti ? ti->name : "?", type);
    if (n_in <= 0 || n_out <= 0 || n_in % f->align)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "cuda matmul: %s rows of %lld elements "
                            "(need a positive multiple of %lld), %lld rows",
                            ti->name, (long long)n_in, (long long)f->align, (long long)n_out);
    if ((uintptr_t)w % 16)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "cuda matmul: weight pointer not 16-byte "
                            "aligned");
    return SNUG_OK;
}

extern "C" int snug_cuda_dequant_bf16(struct snug_cuda *cu, uint32_t type, const void *w,
                                      int64_t n_in, int64_t n_rows, uint16_t *dst,
                                      struct snug_err *err) {
    struct mm_fns f = {};
    int st = mm_check(type, w, n_in, n_rows, &f, err);
    if (st) return st;
    int64_t n = (n_in >> 3) * n_rows;
    void (*k)(const uint8_t *, size_t, int64_t, int64_t, uint16_t *) = f.deq;
    k<<<(unsigned)((n + 255) / 256), 256, 0, SNUG_CU_STREAM(cu)>>>(
        (const uint8_t *)w, snug_dtype_row_bytes(type, (uint64_t)n_in), n_in, n_rows, dst);
    return snug_cu_launched(err, "dequant_bf16");
}

extern "C" int snug_cuda_embed(struct snug_cuda *cu, uint32_t type, const void *w, int64_t H,
                               int64_t n_rows, const int32_t *ids, int64_t T, float *x,
                               struct snug_err *err) {
    struct mm_fns f = {};
    int st = mm_check(type, w, H, n_rows, &f, err);
    if (st) return st; /* (the caller falls back to the host's decoders) */
    if (T <= 0) return SNUG_OK;
    int64_t n = (H >> 3) * T;
    f.emb<<<(unsigned)((n + 255) / 256), 256, 0, SNUG_CU_STREAM(cu)>>>(
        (const uint8_t *)w, snug_dtype_row_bytes(type, (uint64_t)H), H, n_rows, ids, T, x);
    return snug_cu_launched(err, "embed");
}

extern "C" int snug_cuda_matvec_int8_again(struct snug_cuda *cu, uint32_t type, const void *w,
                                           int64_t n_in, int64_t n_out, int64_t T, float *y,
                                           void *work, struct snug_err *err) {
    struct mm_fns f = {};
    int st = mm_check(type, w, n_in, n_out, &f, err);
    if (st) return st;
    if (T < 1 || T > SNUG_CUDA_MATVEC_MAX_T || !work || !snug_cu_mvq_supported(type))
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "cuda matvec: the rounded-x form needs the int8 path (T %lld)",
                            (long long)T);
    return snug_cu_mvq(cu, type, w, n_in, n_out, NULL, (int)T, y, work, err);
}

extern "C" int snug_cuda_matvec_int8_pair(struct snug_cuda *cu, uint32_t type, const void *w,
                                          int64_t n_out, const void *w2, int64_t n_out2,
                                          int64_t n_in, const float *x, bool rounded, int64_t T,
                                          float *y, float *y2, void *work, struct snug_err *err) {
    struct mm_fns f = {};
    int st = mm_check(type, w, n_in, n_out, &f, err);
    if (!st) st = mm_check(type, w2, n_in, n_out2, &f, err);
    if (st) return st;
    if (T < 1 || T > SNUG_CUDA_MATVEC_MAX_T || !work || !snug_cu_mvq_supported(type))
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "cuda matvec: the pair form needs the int8 path (T %lld)",
                            (long long)T);
    return snug_cu_mvq2(cu, type, w, n_out, w2, n_out2, n_in, rounded ? NULL : x, (int)T, y, y2,
                        work, err);
}

static size_t align256(size_t x) {
    return (x + 255) & ~(size_t)255;
}

extern "C" size_t snug_cuda_matmul_work_bytes(int64_t n_in, int64_t n_out, int64_t T) {
    if (T <= SNUG_CUDA_MATVEC_MAX_T) return snug_cu_mvq_work_bytes(n_in, T < 1 ? 1 : T);
    /* the bf16 path's x and W tile; the int8 tensor-core path needs less (its x as int8 plus
     * 1/64 + 1/16 of that), so this covers both (the max only guards the invariant) */
    int64_t rows = n_out < SNUG_CUDA_GEMM_TILE_ROWS ? n_out : SNUG_CUDA_GEMM_TILE_ROWS;
    size_t bf = align256((size_t)(T * n_in) * 2) + align256((size_t)(rows * n_in) * 2) + 256;
    size_t mq = snug_cu_mmq_work_bytes(n_in, T);
    return bf > mq ? bf : mq;
}

/* The f32-activation matvec over T tokens in one launch (groups of 8 along grid.y, at most
 * 65535 groups per launch). */
static int mv_f32x(struct snug_cuda *cu, const struct mm_fns *f, const void *w, size_t rb,
                   int64_t n_in, int64_t n_out, const float *x, int64_t T, float *y,
                   struct snug_err *err) {
    cudaStream_t s = SNUG_CU_STREAM(cu);
    unsigned blocks = (unsigned)((n_out + MV_ROWS - 1) / MV_ROWS);
    const uint8_t *wb = (const uint8_t *)w;
    bool few = blocks < (unsigned)cu->sm_count; /* few rows: one per block of 8 warps */
    if (T == 1) {
        if (few)
            f->mv1s<<<(unsigned)n_out, 256, 0, s>>>(wb, rb, n_in, n_out, x, 1, y);
        else
            f->mv1<<<blocks, MV_WARPS * 32, 0, s>>>(wb, rb, n_in, n_out, x, 1, y);
        return snug_cu_launched(err, "matvec");
    }
    for (int64_t t0 = 0; t0 < T; t0 += (int64_t)65535 * 8) {
        int64_t n = T - t0 < (int64_t)65535 * 8 ? T - t0 : (int64_t)65535 * 8;
        dim3 g(few ? (unsigned)n_out : blocks, (unsigned)((n + 7) / 8));
        const float *xt = x + t0 * n_in;
        float *yt = y + t0 * n_out;
        if (few)
            f->mv8s<<<g, 256, 0, s>>>(wb, rb, n_in, n_out, xt, (int)n, yt);
        else
            f->mv8<<<g, MV_WARPS * 32, 0, s>>>(wb, rb, n_in, n_out, xt, (int)n, yt);
        int st = snug_cu_launched(err, "matvec");
        if (st) return st;
    }
    return SNUG_OK;
}

extern "C" int snug_cuda_matmul_f32x_pair(struct snug_cuda *cu, uint32_t type, const void *w,
                                          const void *w2, int64_t n_in, int64_t n_out,
                                          int64_t n_out2, const float *x, int64_t T, float *y,
                                          float *y2, struct snug_err *err) {
    struct mm_fns f = {};
    int st = mm_check(type, w, n_in, n_out, &f, err);
    if (!st) st = mm_check(type, w2, n_in, n_out2, &f, err);
    if (st || T <= 0) return st;
    if (n_out + n_out2 > INT32_MAX)
        return snug_err_set(err, SNUG_ERR_INVALID, "cuda matmul pair: %lld + %lld rows",
                            (long long)n_out, (long long)n_out2);
    cudaStream_t s = SNUG_CU_STREAM(cu);
    size_t rb = snug_dtype_row_bytes(type, (uint64_t)n_in);
    const uint8_t *wb = (const uint8_t *)w, *wb2 = (const uint8_t *)w2;
    unsigned blocks = (unsigned)(n_out + n_out2);
    if (T == 1) {
        f.mv1p<<<blocks, 256, 0, s>>>(wb, wb2, rb, n_in, n_out, n_out2, x, 1, y, y2);
        return snug_cu_launched(err, "matvec_pair");
    }
    for (int64_t t0 = 0; t0 < T; t0 += (int64_t)65535 * 8) {
        int64_t n = T - t0 < (int64_t)65535 * 8 ? T - t0 : (int64_t)65535 * 8;
        dim3 g(blocks, (unsigned)((n + 7) / 8));
        f.mv8p<<<g, 256, 0, s>>>(wb, wb2, rb, n_in, n_out, n_out2, x + t0 * n_in, (int)n,
                                 y + t0 * n_out, y2 + t0 * n_out2);
        st = snug_cu_launched(err, "matvec_pair");
        if (st) return st;
    }
    return SNUG_OK;
}

extern "C" int snug_cuda_matmul_f32x(struct snug_cuda *cu, uint32_t type, const void *w,
                                     int64_t n_in, int64_t n_out, const float *x, int64_t T,
                                     float *y, struct snug_err *err) {
    struct mm_fns f = {};
    int st = mm_check(type, w, n_in, n_out, &f, err);
    if (st || T <= 0) return st;
    return mv_f32x(cu, &f, w, snug_dtype_row_bytes(type, (uint64_t)n_in), n_in, n_out, x, T, y,
                   err);
}

/* Decode (T <= 8): with work memory and a type of cuda_matvec.cu, the int8-activation dp4a
 * matvec; otherwise (work NULL: callers that want f32 activations) the f32 kernel. Prompt chunks
 * of q4_K/q6_K weights with work memory: the int8 tensor-core kernel (cuda_mmq.cu) unless
 * switched off (snug_cuda_mmq_tune, SNUG_CUDA_MMQ=0). Prompt chunks of f32 weights: one f32
 * cuBLAS GEMM (pedantic: no TF32). Other prompt chunks: x
 * to bf16 once, then per tile of rows dequantise W to bf16 and let cuBLAS compute y[:, tile]
 * (column-major view: y_tile (rows × T, ld n_out) = W_tileᵀ-view · x, i.e. GEMM(opA = T, opB = N)).
 */
extern "C" int snug_cuda_matmul(struct snug_cuda *cu, uint32_t type, const void *w, int64_t n_in,
                                int64_t n_out, const float *x, int64_t T, float *y, void *work,
                                struct snug_err *err) {
    struct mm_fns f = {};
    int st = mm_check(type, w, n_in, n_out, &f, err);
    if (st) return st;
    if (T <= 0) return SNUG_OK;
    size_t rb = snug_dtype_row_bytes(type, (uint64_t)n_in);
    cudaStream_t s = SNUG_CU_STREAM(cu);
    if (T <= SNUG_CUDA_MATVEC_MAX_T && work && snug_cu_mvq_supported(type))
        return snug_cu_mvq(cu, type, w, n_in, n_out, x, (int)T, y, work, err);
    if (T <= SNUG_CUDA_MATVEC_MAX_T) return mv_f32x(cu, &f, w, rb, n_in, n_out, x, T, y, err);
    if (work && snug_cu_mmq_use(cu, type, n_in, n_out, T))
        return snug_cu_mmq(cu, type, w, n_in, n_out, x, T, y, work, err);
    if (n_in > INT32_MAX || n_out > INT32_MAX || T > INT32_MAX)
        return snug_err_set(err, SNUG_ERR_INVALID, "cuda matmul: dimensions exceed int32");
    if (type == SNUG_DTYPE_F32) { /* f32 weights: one f32 GEMM (no TF32), no rounding of x */
        const float one = 1.0f, zero = 0.0f;
        cublasStatus_t bs = cublasGemmEx(
            (cublasHandle_t)cu->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, (int)T, (int)n_in,
            &one, w, CUDA_R_32F, (int)n_in, x, CUDA_R_32F, (int)n_in, &zero, y, CUDA_R_32F,
            (int)n_out, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT);
        if (bs != CUBLAS_STATUS_SUCCESS)
            return snug_err_set(err, SNUG_ERR_INTERNAL,
                                "cuda matmul: f32 cublasGemmEx failed (status %d) for "
                                "%lld×%lld×%lld",
                                (int)bs, (long long)n_out, (long long)T, (long long)n_in);
        return SNUG_OK;
    }
    if (!work)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "cuda matmul: T = %lld needs work memory "
                            "(snug_cuda_matmul_work_bytes)",
                            (long long)T);
    if (n_in > INT32_MAX || n_out > INT32_MAX || T > INT32_MAX)
        return snug_err_set(err, SNUG_ERR_INVALID, "cuda matmul: dimensions exceed int32");
    uint8_t *wk = (uint8_t *)(((uintptr_t)work + 255) & ~(uintptr_t)255);
    __nv_bfloat16 *xb = (__nv_bfloat16 *)wk;
    uint16_t *wt = (uint16_t *)(wk + align256((size_t)(T * n_in) * 2));
    int64_t nx = T * n_in;
    k_f32_to_bf16<<<(unsigned)((nx + 255) / 256), 256, 0, s>>>(x, nx, xb);
    if ((st = snug_cu_launched(err, "f32_to_bf16"))) return st;
    const float one = 1.0f, zero = 0.0f;
    for (int64_t r0 = 0; r0 < n_out; r0 += SNUG_CUDA_GEMM_TILE_ROWS) {
        int64_t rows =
            n_out - r0 < SNUG_CUDA_GEMM_TILE_ROWS ? n_out - r0 : SNUG_CUDA_GEMM_TILE_ROWS;
        const void *a = (const uint8_t *)w + (size_t)r0 * rb;
        if (type != SNUG_DTYPE_BF16) {
            int64_t n = (n_in >> 3) * rows;
            f.deq<<<(unsigned)((n + 255) / 256), 256, 0, s>>>((const uint8_t *)a, rb, n_in, rows,
                                                              wt);
            if ((st = snug_cu_launched(err, "dequant_bf16"))) return st;
            a = wt;
        }
        cublasStatus_t bs = cublasGemmEx(
            (cublasHandle_t)cu->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)T, (int)n_in,
            &one, a, CUDA_R_16BF, (int)n_in, xb, CUDA_R_16BF, (int)n_in, &zero, y + r0, CUDA_R_32F,
            (int)n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (bs != CUBLAS_STATUS_SUCCESS)
            return snug_err_set(err, SNUG_ERR_INTERNAL,
                                "cuda matmul: cublasGemmEx failed "
                                "(status %d) for %lld×%lld×%lld",
                                (int)bs, (long long)rows, (long long)T, (long long)n_in);
    }
    return SNUG_OK;
}
