/* cuda_fa.h — internal interface between the attention files of the CUDA backend: the
 * tensor-core prompt attention (cuda_fa.cu) and the split merge it shares with the decode
 * kernel (cuda_attention.cu). Not part of cuda_ops.h: callers use snug_cuda_attention, which
 * picks the kernel by T.
 * Invariant: kf / vf are enum snug_kv_type formats the device reads (cuda_kvfmt.cuh).
 * Read next: cuda_fa.cu. */
#ifndef SNUG_CUDA_FA_H
#define SNUG_CUDA_FA_H

#include "backend/cuda/cuda_common.cuh"

/* snug_cuda_attention runs the tensor-core kernel for T above this (decode and speculative
 * verify steps stay on the flash-decoding kernel). */
#define ATT_FA_MIN_T 8

/* Causal GQA attention on tensor cores (same contract as snug_cuda_attention). Returns
 * SNUG_ERR_UNSUPPORTED, queueing nothing, for shapes it does not take (D not 64/128/256, too
 * little shared memory): the caller falls back. */
int snug_cuda_fa(struct snug_cuda *cu, const struct snug_cuda_kv *kv, int kf, int vf, int64_t Hq,
                 int64_t Hkv, int64_t D, int64_t pos0, int64_t T, const float *q, float scale,
                 float *out, void *work, struct snug_err *err);
/* Splits over key positions the tensor-core kernel uses for T queries and nk keys; its
 * maximum over nk sizes the work memory (snug_cuda_attention_work_bytes). */
int snug_cuda_fa_nsplit(int64_t Hq, int64_t T, int64_t nk);
/* out[rows][D] from `ns` partials per row ({max, sum, unnormalised output[D]} each). */
int snug_cuda_att_merge(struct snug_cuda *cu, const float *part, int ns, int64_t rows, int64_t D,
                        float *out, struct snug_err *err);

#endif /* SNUG_CUDA_FA_H */
