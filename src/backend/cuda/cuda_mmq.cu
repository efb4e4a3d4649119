/* cuda_mmq.cu — prompt-chunk matrix products (T > SNUG_CUDA_MATVEC_MAX_T tokens) straight from
 * the quantized weights on int8 tensor cores (mma.sync), for q4_K and q6_K: no dequantised copy
 * of W exists anywhere; each weight byte is read from memory once per 64-token tile.
 *
 * Activations: each token row is rounded to int8 per 256 inputs exactly as the CPU's A256
 * format (src/quant/quant_act.c quant_group): d = amax / 127, q = round-half-even(x · (127 /
 * amax)); with each 256-block also its eight 32-input sums S_j = Σ q, kept as two int8 planes
 * (S_j = 128·h_j + l_j, 0 <= l_j < 128) for the q4_K minimum term. One x scale per super-block
 * keeps the weights' integer sub-block scales in integer arithmetic; per super-block of row r
 * and token t (D_j = Σ_{k in sub-block j} q_k · qx_k, exact int32):
 *   q4_K: y += dx · (d · Σ_j sc_j·D_j − dmin · Σ_j m_j·S_j)    (8 sub-blocks of 32)
 *   q6_K: y += dx · d · Σ_i sc_i·D_i                            (16 sub-blocks of 16)
 * D comes from mma.m16n8k32 (q4_K) or two mma.m16n8k16 (q6_K) per 32 inputs, each sc·D is one
 * IMAD into an int32 per output, Σ m·S is two m16n8k16 per super-block (m as A, the [l | h]
 * planes as B), and the float arithmetic runs once per super-block instead of once per 32 inputs.
 *
 * Tiling: a block of 8 warps owns MMQ_BM = 128 weight rows × MMQ_BN = 64 tokens; warp w takes
 * rows 32·(w % 4) .. and tokens 32·(w / 4) .. (2 × 4 mma tiles of 16 × 8). Per super-block the
 * block copies W's raw bytes by cp.async into a raw buffer (16-byte pieces of q4_K's 144-byte
 * blocks; 8-byte pieces of q6_K's 2-byte-aligned 210-byte blocks, from the 8-byte boundary at or
 * before the block), and the x tile [token][256] by cp.async into the other of two buffers,
 * both during the current super-block's math; then it unpacks the raw bytes once to int8
 * [row][256] plus per-row scales in shared memory. The int8 tiles are XOR-swizzled by 16-byte
 * chunk (chunk c of row r at c ^ (r & 7)), so the ldmatrix reads are free of bank conflicts.
 * The grid runs token tiles fastest: the blocks resident at once share a few row tiles, whose
 * bytes then come from L2 for every token tile. A grid that fills the card's waves badly splits
 * each row's super-blocks over two blocks adding into a zeroed y (same result in either order).
 * The block's code is cuda_mmq_block.cuh (shared with a host emulator that tests it); this file
 * holds its device primitives, the kernels, the switch and the launch.
 *
 * Invariant: no allocation (work: snug_cu_mmq_work_bytes); results equal Σ w·x̃ with w the
 * reference decoder's weights and x̃ the int8-rounded x, up to the f32 rounding of one term per
 * super-block (the integer sums are exact).
 * Read next: cuda_matmul.cu (the dispatch), cuda_matvec.cu (the decode and MoE kernels these
 * fragments grew from), docs/perf/cuda-kernels.md ("Prompt products on int8 tensor cores"). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_mmq.h"

#include <stdlib.h>
#include <string.h>

/* ---- the primitives cuda_mmq_block.cuh is written against -------------------------------- */
#define MMQ_FN __device__ __forceinline__
typedef uint32_t mmq_sa; /* shared-state-space address */
MMQ_FN mmq_sa mmq_sa_of(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
MMQ_FN void mmq_sync() {
    __syncthreads();
}
MMQ_FN void mmq_cp16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(mmq_sa_of(dst)), "l"(src));
}
/* n (1..8) bytes from src, the rest of the 8 zero-filled */
MMQ_FN void mmq_cp8(void *dst, const void *src, int n) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(mmq_sa_of(dst)), "l"(src),
                 "r"(n));
}
MMQ_FN void mmq_cp4(void *dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(mmq_sa_of(dst)), "l"(src));
}
MMQ_FN void mmq_cp_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
MMQ_FN void mmq_cp_wait_all() {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
MMQ_FN void mmq_ldsm_x4(uint32_t *r, mmq_sa a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
/* Fragment layouts (PTX ISA, mma.m16n8k32 / m16n8k16 with .s8; cuda_matvec.cu k_mmq_moe uses
 * the same): A a0/a2 row groupID, a1/a3 row groupID + 8, k = 4·(lane % 4) + 0..3 (+ 16 for
 * a2, a3); B b0 k = 4·(lane % 4) + 0..3 (b1: + 16), column groupID; C c0/c1 row groupID,
 * columns 2·(lane % 4) + 0/1, c2/c3 row groupID + 8. m16n8k16 takes a0, a1 and b0 only. */
MMQ_FN void mmq_mma32(int *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
MMQ_FN void mmq_mma16(int *c, uint32_t a0, uint32_t a1, uint32_t b0) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
        "{%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0));
}
MMQ_FN void mmq_atomic_add(float *p, float v) {
    atomicAdd(p, v);
}
MMQ_FN float mmq_shfl_xor_f(float v, int m) {
    return __shfl_xor_sync(0xffffffffu, v, m);
}
MMQ_FN int mmq_shfl_xor_i(int v, int m) {
    return __shfl_xor_sync(0xffffffffu, v, m);
}
MMQ_FN uint32_t mmq_funnel_r(uint32_t lo, uint32_t hi, int s) {
    return __funnelshift_r(lo, hi, (unsigned)s);
}
MMQ_FN uint32_t mmq_byte_perm(uint32_t x, uint32_t y, int s) {
    return __byte_perm(x, y, (unsigned)s);
}
MMQ_FN uint32_t mmq_vsub4(uint32_t a, uint32_t b) {
    return __vsub4(a, b);
}
MMQ_FN int mmq_f2i_rn(float f) {
    return __float2int_rn(f);
}
MMQ_FN float mmq_h2f(uint16_t h) {
    return __half2float(__ushort_as_half(h));
}
MMQ_FN float mmq_as_float(uint32_t u) {
    return __uint_as_float(u);
}
MMQ_FN uint32_t mmq_float_bits(float f) {
    return __float_as_uint(f);
}

#include "backend/cuda/cuda_mmq_block.cuh"

/* ---- kernels ------------------------------------------------------------------------------- */
__global__ void k_quant_a256(const float *__restrict__ x, int64_t nblk, int8_t *__restrict__ qx,
                             float *__restrict__ xd, uint8_t *__restrict__ xm) {
    int64_t b = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (b >= nblk) return; /* whole warps leave together */
    mmq_quant_lane(x, b, threadIdx.x & 31, qx, xd, xm);
}

/* blockIdx.x: the token tile (fastest, so resident blocks share row tiles), blockIdx.y: the row
 * tile, blockIdx.z: the half of K (when split). 128 registers at two blocks per SM (ptxas,
 * sm_90a: 40 bytes spilled, outside the loop over 32 inputs). */
template <int TYPE> __global__ void __launch_bounds__(MMQ_THREADS, 2) k_mmq(const mmq_args p) {
    extern __shared__ __align__(16) uint8_t sm[];
    mmq_block<TYPE>(sm, threadIdx.x, blockIdx.x, blockIdx.y, (int)blockIdx.z, p);
}

/* ---- host side ----------------------------------------------------------------------------- */
/* Where the kernel runs by default (SNUG_CUDA_MMQ=1 follows this table, 2 forces the kernel):
 * products of at most MMQ_MAX_T tokens with at least MMQ_MIN_OUT_* outputs, per type. Measured
 * on an H100 (`bench_cuda_ops mmq`, docs/perf/cuda-kernels.md "Prompt products on int8 tensor
 * cores"): at T = 12 and 32 (a step of several slots' rows, a short prompt) the kernel takes
 * 0.48-0.68x the time of dequantise + cuBLAS for q4_K on the 27B's shapes with 5,120 or more
 * outputs, 0.71-0.92x for q6_K with 6,144 or more (about 1.0x at 5,120); with 1,024 outputs
 * (attention k/v: 8 row tiles) it takes 2x. At T = 512 and 2048 it is behind everywhere (q4_K
 * 1.3-2.4x, q6_K 1.9-4.3x the time). Q4_K's bound of 4,096 lies between the measured widths
 * (1,024 slower, 5,120 faster); no width in between was measured. */
#define MMQ_MAX_T       32
#define MMQ_MIN_OUT_Q4K 4096
#define MMQ_MIN_OUT_Q6K 6144
/* -2: not decided yet (SNUG_CUDA_MMQ read at the first call); 0 off; 1 the table above; 2 every
 * product the kernel can take; 3 the same with every row's super-blocks split over two blocks
 * (tests). */
static int g_mmq = -2;
extern "C" void snug_cuda_mmq_tune(int on) {
    g_mmq = on >= 0 && on <= 3 ? on : -2;
}
static int mmq_mode(void) {
    if (g_mmq == -2) {
        const char *e = getenv("SNUG_CUDA_MMQ");
        g_mmq = e && e[0] >= '0' && e[0] <= '3' && !e[1] ? e[0] - '0' : 1;
    }
    return g_mmq;
}

static size_t mmq_smem_of(uint32_t type) {
    return type == SNUG_DTYPE_Q4_K   ? mmq_smem<SNUG_DTYPE_Q4_K>()
           : type == SNUG_DTYPE_Q6_K ? mmq_smem<SNUG_DTYPE_Q6_K>()
                                     : 0;
}

extern "C" bool snug_cu_mmq_use(const struct snug_cuda *cu, uint32_t type, int64_t n_in,
                                int64_t n_out, int64_t T) {
    size_t smem = mmq_smem_of(type);
    int mode = mmq_mode();
    int64_t min_out = type == SNUG_DTYPE_Q4_K ? MMQ_MIN_OUT_Q4K : MMQ_MIN_OUT_Q6K;
    return smem && T > SNUG_CUDA_MATVEC_MAX_T && n_in > 0 && n_in % 256 == 0 &&
           n_in <= INT32_MAX / 2 && cu->cc_major >= 8 && smem <= cu->smem_optin &&
           (mode >= 2 || (mode == 1 && T <= MMQ_MAX_T && n_out >= min_out));
}
extern "C" bool snug_cuda_matmul_mmq(const struct snug_cuda *cu, uint32_t type, int64_t n_in,
                                     int64_t n_out, int64_t T) {
    return snug_cu_mmq_use(cu, type, n_in, n_out, T);
}

static size_t al256(size_t x) {
    return (x + 255) & ~(size_t)255;
}
extern "C" size_t snug_cu_mmq_work_bytes(int64_t n_in, int64_t T) {
    size_t nblk = (size_t)(T * (n_in / 256));
    return al256((size_t)(T * n_in)) + al256(nblk * 4) + al256(nblk * 16) + 256;
}

/* Fraction of the resident-block slots the grid's waves fill (1: the last wave is full). */
static double mmq_fill(int64_t blocks, int64_t slots) {
    return (double)blocks / (double)(((blocks + slots - 1) / slots) * slots);
}

template <int TYPE>
static int mmq_launch(struct snug_cuda *cu, const uint8_t *w, size_t rb, int n_in, int64_t n_out,
                      const int8_t *qx, const float *xd, const uint8_t *xm, int64_t T, float *y,
                      struct snug_err *err) {
    /* per instantiation and device: resident blocks per SM, once the attribute is set there */
    static int per_sm_of[SNUG_CUDA_MAX_DEVICES];
    bool known = cu->device >= 0 && cu->device < SNUG_CUDA_MAX_DEVICES;
    int per_sm = known ? per_sm_of[cu->device] : 0;
    constexpr size_t smem = mmq_smem<TYPE>();
    cudaStream_t s = SNUG_CU_STREAM(cu);
    if (!per_sm) {
        cudaError_t e = cudaFuncSetAttribute(
            k_mmq<TYPE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e == cudaSuccess)
            e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_mmq<TYPE>, MMQ_THREADS,
                                                              smem);
        if (e != cudaSuccess || per_sm < 1)
            return snug_err_set(err, SNUG_ERR_INTERNAL, "cuda mmq: launch setup: %s",
                                e != cudaSuccess ? cudaGetErrorString(e) : "no resident block");
        if (known) per_sm_of[cu->device] = per_sm;
    }
    /* Few blocks for the card (the last wave mostly empty: 27B down/out projections at T = 512,
     * 320 blocks on 264 slots): split each row's super-blocks in two halves when that fills the
     * waves >= 10% better and each half keeps >= 4 super-blocks */
    int64_t blocks = ((T + MMQ_BN - 1) / MMQ_BN) * ((n_out + MMQ_BM - 1) / MMQ_BM);
    int64_t slots = (int64_t)per_sm * cu->sm_count;
    int nsb = n_in / 256, mode = mmq_mode();
    int ksplit = nsb >= 2 && (mode == 3 || (nsb >= 8 && mmq_fill(2 * blocks, slots) >
                                                            1.1 * mmq_fill(blocks, slots)))
                     ? 2
                     : 1;
    if (ksplit == 2) {
        cudaError_t e = cudaMemsetAsync(y, 0, (size_t)(T * n_out) * sizeof(float), s);
        if (e != cudaSuccess)
            return snug_err_set(err, SNUG_ERR_INTERNAL, "cuda mmq: zeroing y: %s",
                                cudaGetErrorString(e));
    }
    dim3 grid((unsigned)((T + MMQ_BN - 1) / MMQ_BN), (unsigned)((n_out + MMQ_BM - 1) / MMQ_BM),
              (unsigned)ksplit);
    const mmq_args p = {w, rb, n_in, n_out, T, qx, xd, xm, y, ksplit};
    k_mmq<TYPE><<<grid, MMQ_THREADS, smem, s>>>(p);
    return snug_cu_launched(err, "mmq");
}

extern "C" int snug_cu_mmq(struct snug_cuda *cu, uint32_t type, const void *w, int64_t n_in,
                           int64_t n_out, const float *x, int64_t T, float *y, void *work,
                           struct snug_err *err) {
    if ((n_out + MMQ_BM - 1) / MMQ_BM > 65535 || (T + MMQ_BN - 1) / MMQ_BN > INT32_MAX)
        return snug_err_set(err, SNUG_ERR_INVALID, "cuda mmq: %lld rows × %lld tokens too many",
                            (long long)n_out, (long long)T);
    cudaStream_t s = SNUG_CU_STREAM(cu);
    uint8_t *wk = (uint8_t *)(((uintptr_t)work + 255) & ~(uintptr_t)255);
    int64_t nblk = T * (n_in / 256);
    int8_t *qx = (int8_t *)wk;
    float *xd = (float *)(wk + al256((size_t)(T * n_in)));
    uint8_t *xm = (uint8_t *)xd + al256((size_t)nblk * 4);
    k_quant_a256<<<(unsigned)((nblk + 7) / 8), 256, 0, s>>>(x, nblk, qx, xd, xm);
    int st = snug_cu_launched(err, "quant_a256");
    if (st) return st;
    size_t rb = snug_dtype_row_bytes(type, (uint64_t)n_in);
    const uint8_t *wb = (const uint8_t *)w;
    if (type == SNUG_DTYPE_Q4_K)
        return mmq_launch<SNUG_DTYPE_Q4_K>(cu, wb, rb, (int)n_in, n_out, qx, xd, xm, T, y, err);
    return mmq_launch<SNUG_DTYPE_Q6_K>(cu, wb, rb, (int)n_in, n_out, qx, xd, xm, T, y, err);
}
