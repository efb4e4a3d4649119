/* cuda_split.h — how the split form of the tensor-core decode product (k_mmv_split in
 * cuda_matvec.cu) deals a product out to a fixed number of warps, as integer functions the
 * kernel and a host test (tests/unit/test_backend_split.c) share.
 * The product is U = tiles · nsb units: a tile is 16 weight rows, a unit one tile's 256-element
 * super-block. Warp g of W takes the units [u0(g), u0(g + 1)) with u0(g) = ⌊g·U / W⌋, so every
 * warp has ⌊U/W⌋ or ⌈U/W⌉ units whatever the shape (a grid of one block per tile runs in
 * ⌈tiles / resident blocks⌉ rounds of equal blocks: 2.06 → 3 rounds for the 27B's FFN up on an
 * H100). A warp's units may start or end inside a tile: such a tile is split, each of its warps
 * writes its partial sums into a slot (2g when the tile is the warp's first, else 2g + 1), and
 * the last of them to finish — counted on counter first_warp(tile) — adds the slots in warp
 * order and stores the tile. So the result does not depend on which warp finishes last.
 * Invariant: 1 <= W <= U (no warp is empty); a split tile has at least two warps, and the
 * counter index first_warp(tile) of two split tiles differs (that warp's last unit lies inside
 * the tile); counters are zero between launches (the adding warp resets its own).
 * Read next: cuda_matvec.cu (k_mmv_split), docs/perf/cuda-kernels.md. */
#ifndef SNUG_CUDA_SPLIT_H
#define SNUG_CUDA_SPLIT_H

#include <stdint.h>

#ifdef __CUDACC__
#define SNUG_SPLIT_FN __host__ __device__ static inline
#else
#define SNUG_SPLIT_FN static inline
#endif

/* The most warps a split product uses (its grid is capped at this): the partial slots and the
 * counters are sized by it. 192 SMs × 16 warps. */
#define SNUG_CUDA_SPLIT_WARPS 3072
/* One partial slot: a warp's C fragment, 4 floats per lane. */
#define SNUG_CUDA_SPLIT_SLOT_FLOATS 128
/* The partial slots (in the op scratch, after the rounded x) and the counters (in the
 * instance's step inputs), in bytes. */
#define SNUG_CUDA_SPLIT_PART_BYTES                                                                 \
    ((uint64_t)2 * SNUG_CUDA_SPLIT_WARPS * SNUG_CUDA_SPLIT_SLOT_FLOATS * 4)
#define SNUG_CUDA_SPLIT_COUNT_BYTES ((uint64_t)SNUG_CUDA_SPLIT_WARPS * 4)

/* The first unit of warp g (g = W: U). */
SNUG_SPLIT_FN int64_t snug_split_u0(int64_t g, int64_t U, int64_t W) {
    return g * U / W;
}
/* The warp whose units hold unit x (0 <= x < U): the largest g with u0(g) <= x. */
SNUG_SPLIT_FN int64_t snug_split_warp_of(int64_t x, int64_t U, int64_t W) {
    return ((x + 1) * W + U - 1) / U - 1;
}
/* The partial slot of warp g's segment of the tile whose first unit is x0. */
SNUG_SPLIT_FN int64_t snug_split_slot(int64_t g, int64_t x0, int64_t U, int64_t W) {
    return snug_split_u0(g, U, W) >= x0 ? 2 * g : 2 * g + 1;
}

#endif /* SNUG_CUDA_SPLIT_H */
