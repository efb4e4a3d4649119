/* backend_plan.c — the CUDA backend's op scratch as a pure formula, for the memory planner: the
 * plan (src/plan) must size `--backend cuda` runs on any machine, without loading
 * libsnug_cuda.so or touching a GPU. Mirrors the kernels' own sizing functions
 * (snug_cuda_matmul_work_bytes in cuda/cuda_matmul.cu, snug_cu_mvq_work_bytes in
 * cuda/cuda_matvec.cu, snug_cuda_attention_work_bytes in cuda/cuda_attention.cu with the split
 * counts of att_nsplit and snug_cuda_fa_nsplit) and their constants.
 * Invariant: never smaller than what the kernels ask for; the CUDA backend recomputes the need
 * from its own functions at open and refuses a plan that under-counts (cuda_backend.c), so a
 * drift between the two copies is caught at the first open, never a silent overrun.
 * Read next: backend.h (snug_backend_plan_cuda_scratch), src/plan/plan.c (the caller).
 */
#include "backend/backend.h"

/* cuda_ops.h: decode matvecs up to this many tokens, prompt GEMMs in tiles of this many rows */
#define MATVEC_MAX_T   8
#define GEMM_TILE_ROWS 4096
/* cuda_attention.cu: split decode attention until about this many blocks, at least this many
 * keys per split, at most this many splits (per-head kernel: blocks of one query head; grouped
 * kernel: blocks of one KV head's 2..ATT_GMAX query heads) */
#define ATT_TARGET_BLOCKS   1056
#define ATT_MIN_KEYS        64
#define ATT_MAX_SPLIT       64
#define ATT_G_TARGET_BLOCKS 640
#define ATT_G_MAX_SPLIT     256
#define ATT_GMAX            8
/* cuda_fa.h / cuda_fa.cu: the tensor-core prompt kernel above this T, its rows per block, block
 * target, keys per split and split cap */
#define ATT_FA_MIN_T     8
#define FA_BM            64
#define FA_TARGET_BLOCKS 264
#define FA_MIN_KEYS      1024
#define FA_MAX_SPLIT     16

static size_t align256(size_t x) {
    return (x + 255) & ~(size_t)255;
}

static size_t matmul_bytes(int64_t n_in, int64_t n_out, int64_t T) {
    if (T <= MATVEC_MAX_T) { /* int8 activations + per-32 scales (float2) */
        int64_t t = T < 1 ? 1 : T;
        return align256((size_t)(t * n_in)) + align256((size_t)(t * (n_in / 32)) * 8) + 256;
    }
    int64_t rows = n_out < GEMM_TILE_ROWS ? n_out : GEMM_TILE_ROWS;
    return align256((size_t)(T * n_in) * 2) + align256((size_t)(rows * n_in) * 2) + 256;
}

static int64_t split_count(int64_t want, int64_t nk, int64_t min_keys, int64_t cap) {
    int64_t by_keys = (nk + min_keys - 1) / min_keys;
    if (want > by_keys) want = by_keys;
    if (want > cap) want = cap;
    return want < 1 ? 1 : want;
}

static size_t attention_bytes(int64_t Hq, int64_t D, int64_t T) {
    const int64_t nk = INT64_MAX / 2; /* the most splits any context length asks for */
    int64_t most = 0;
    for (int64_t t = 1; t <= T; t++) {
        int64_t base = Hq * t, ns = 1;
        if (base < ATT_TARGET_BLOCKS)
            ns =
                split_count((ATT_TARGET_BLOCKS + base - 1) / base, nk, ATT_MIN_KEYS, ATT_MAX_SPLIT);
        /* the grouped kernel splits most with the fewest KV heads it serves (Hq / ATT_GMAX) */
        int64_t gbase = SNUG_MAX((int64_t)1, Hq / ATT_GMAX) * t;
        if (gbase < ATT_G_TARGET_BLOCKS)
            ns = SNUG_MAX(ns, split_count((ATT_G_TARGET_BLOCKS + gbase - 1) / gbase, nk,
                                          ATT_MIN_KEYS, ATT_G_MAX_SPLIT));
        if (t > ATT_FA_MIN_T) {
            int64_t est = (t * Hq + FA_BM - 1) / FA_BM;
            int64_t fs =
                split_count((FA_TARGET_BLOCKS + est - 1) / est, nk, FA_MIN_KEYS, FA_MAX_SPLIT);
            ns = SNUG_MAX(ns, fs);
        }
        if (ns > 1) most = SNUG_MAX(most, t * Hq * ns);
    }
    return (size_t)(most * (D + 2) + T * Hq * D) * sizeof(float);
}

size_t snug_backend_plan_cuda_scratch(int64_t max_n_in, int64_t max_n_out, int64_t n_chunk,
                                      int64_t Hq, int64_t D) {
    size_t a = matmul_bytes(max_n_in, max_n_out, n_chunk);
    size_t b = attention_bytes(Hq, D, n_chunk);
    return SNUG_MAX(a, b);
}
