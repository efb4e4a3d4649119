/* cuda_mmq.h — the prompt-chunk product on int8 tensor cores (cuda_mmq.cu) as the matmul
 * dispatch (cuda_matmul.cu snug_cuda_matmul) calls it. Private to src/backend/cuda; the public
 * switches (snug_cuda_matmul_mmq, snug_cuda_mmq_tune) are in cuda_ops.h.
 * Invariant: snug_cu_mmq_work_bytes(n_in, T) <= snug_cuda_matmul_work_bytes(n_in, n_out, T) for
 * every T > SNUG_CUDA_MATVEC_MAX_T, so the plan's scratch formula (src/backend/backend_plan.c)
 * covers both prompt paths.
 * Read next: cuda_mmq.cu. */
#ifndef SNUG_CUDA_MMQ_H
#define SNUG_CUDA_MMQ_H

#include "backend/cuda/cuda_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether snug_cuda_matmul sends this product to snug_cu_mmq: a weight type the kernel has,
 * T > SNUG_CUDA_MATVEC_MAX_T, n_in a multiple of 256, the device's shared memory, and the
 * switch (snug_cuda_mmq_tune / SNUG_CUDA_MMQ) with its table of T and outputs per type. */
bool snug_cu_mmq_use(const struct snug_cuda *cu, uint32_t type, int64_t n_in, int64_t n_out,
                     int64_t T);
/* Work bytes: the int8 rows, their per-256 scales and the Q4_K min planes. */
size_t snug_cu_mmq_work_bytes(int64_t n_in, int64_t T);
/* y[T][n_out] = x̃ · Wᵀ with x̃ = x rounded to int8 per 256 (snug_cuda_matmul_mmq in cuda_ops.h).
 * The caller has checked the arguments (mm_check) and snug_cu_mmq_use. */
int snug_cu_mmq(struct snug_cuda *cu, uint32_t type, const void *w, int64_t n_in, int64_t n_out,
                const float *x, int64_t T, float *y, void *work, struct snug_err *err);

#ifdef __cplusplus
}
#endif

#endif /* SNUG_CUDA_MMQ_H */
