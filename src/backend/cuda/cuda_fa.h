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

/* Decode attention splits the nk = pos0 + T keys into pieces of at least this many. */
#define ATT_MIN_KEYS 64

/* The decode kernels' split of the nk = pos0 + T keys, decided on the device from the step's
 * first position (so a replayed launch adapts to the cache's length): the splits in use, at
 * most the launch's ns_max (att_nsplit_head, _group or the tensor-core
 * decode kernel's count for any length), as those decide them for nk,
 * and the keys per split. Blocks past the splits in use leave at once. */
struct att_split {
    int64_t pos0;
    int ns;
    int64_t chunk;
};
__device__ __forceinline__ att_split att_split_of(int64_t pos0, const int32_t *pos_dev, int64_t T,
                                                  int ns_max) {
    att_split a;
    a.pos0 = pos_dev ? (int64_t)pos_dev[0] : pos0;
    int64_t nk = a.pos0 + T, by_keys = (nk + ATT_MIN_KEYS - 1) / ATT_MIN_KEYS;
    int64_t ns = ns_max < by_keys ? ns_max : by_keys;
    a.ns = ns < 1 ? 1 : (int)ns;
    a.chunk = (nk + a.ns - 1) / a.ns;
    return a;
}

/* Causal GQA attention on tensor cores (same contract as snug_cuda_attention). Returns
 * SNUG_ERR_UNSUPPORTED, queueing nothing, for shapes it does not take (D not 64/128/256, too
 * little shared memory): the caller falls back. */
int snug_cuda_fa(struct snug_cuda *cu, const struct snug_cuda_kv *kv, int kf, int vf, int64_t Hq,
                 int64_t Hkv, int64_t D, int64_t pos0, int64_t T, const float *q, float scale,
                 float *out, void *work, struct snug_err *err);
/* Decode (T <= ATT_FA_MIN_T) on tensor cores: blocks of FD_ROWS query rows (the [T][G] rows
 * of one KV head) over a split of the keys; `ns` launch splits (att_split_of picks those in
 * use from the device's position when pos_dev is given), partials into `part` when ns > 1 (the
 * caller merges). snug_cuda_fa_dec_ok: whether the kernel reads this format pair at head size
 * D on this device (f32 caches and tq vectors not a multiple of 4 bytes are left to the f32
 * kernels). */
#define FD_ROWS 16
bool snug_cuda_fa_dec_ok(const struct snug_cuda *cu, int kf, int vf, int64_t D);
int snug_cuda_fa_dec(struct snug_cuda *cu, const struct snug_cuda_kv *kv, int kf, int vf,
                     int64_t Hq, int64_t Hkv, int64_t D, int64_t pos0, const int32_t *pos_dev,
                     int64_t T, const float *q, float scale, float *out, float *part, int ns,
                     struct snug_err *err);
/* Splits over key positions the tensor-core kernel uses for T queries and nk keys; its
 * maximum over nk sizes the work memory (snug_cuda_attention_work_bytes). */
int snug_cuda_fa_nsplit(int64_t Hq, int64_t T, int64_t nk);
/* out[rows][D] from `ns` partials per row ({max, sum, unnormalised output[D]} each). */
int snug_cuda_att_merge(struct snug_cuda *cu, const float *part, int ns, int64_t rows, int64_t D,
                        float *out, struct snug_err *err);

#endif /* SNUG_CUDA_FA_H */
