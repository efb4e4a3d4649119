/* cuda_attention.cu — the KV-cache store and causal GQA attention over an F32 or F16 cache
 * (semantics: src/backend/cpu/ops.h snug_op_attention), flash-decoding style: each block
 * streams a range of cache positions for one (query token, query head) with an online softmax
 * in registers; long contexts split the positions over several blocks whose partial
 * (max, sum, output) are merged by a second kernel.
 * Invariant: the cache is read in place in its own dtype (no converted copy); scratch depends
 * on T·Hq·D only, never on the context length; nothing allocates.
 * Read next: cuda_delta.cu. */
#include "backend/cuda/cuda_common.cuh"

#include <math.h>

#define ATT_WARPS         4
#define ATT_MAX_SPLIT     64
#define ATT_TARGET_BLOCKS 512 /* split until about this many blocks are in flight */
#define ATT_MIN_KEYS      128 /* ... but give each block at least this many positions */

template <typename KT>
__global__ void k_kv_store(KT *k, KT *v, const float *ks, const float *vs, int64_t row,
                           int64_t pos0, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int64_t o = pos0 * row + i;
    if constexpr (sizeof(KT) == 2) {
        k[o] = __float2half_rn(ks[i]);
        v[o] = __float2half_rn(vs[i]);
    } else {
        k[o] = ks[i];
        v[o] = vs[i];
    }
}

extern "C" int snug_cuda_kv_store(struct snug_cuda *cu, const struct snug_cuda_kv *kv, int64_t Hkv,
                                  int64_t D, int64_t pos0, int64_t T, const float *k,
                                  const float *v, struct snug_err *err) {
    if (pos0 < 0 || pos0 + T > kv->n_ctx)
        return snug_err_set(err, SNUG_ERR_BUDGET,
                            "cuda kv_store: positions %lld..%lld past the "
                            "cache capacity %lld",
                            (long long)pos0, (long long)(pos0 + T), (long long)kv->n_ctx);
    int64_t n = T * Hkv * D;
    if (n <= 0) return SNUG_OK;
    unsigned b = (unsigned)((n + 255) / 256);
    cudaStream_t s = SNUG_CU_STREAM(cu);
    if (kv->type == SNUG_DTYPE_F16)
        k_kv_store<__half>
            <<<b, 256, 0, s>>>((__half *)kv->k, (__half *)kv->v, k, v, Hkv * D, pos0, n);
    else if (kv->type == SNUG_DTYPE_F32)
        k_kv_store<float><<<b, 256, 0, s>>>((float *)kv->k, (float *)kv->v, k, v, Hkv * D, pos0, n);
    else
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "cuda kv_store: cache type %u (F32 or "
                            "F16 expected)",
                            kv->type);
    return snug_cu_launched(err, "kv_store");
}

/* Load DPL consecutive cache elements as floats (16 bytes for f32 DPL = 4, f16 DPL = 8). */
template <int DPL> __device__ __forceinline__ void ld_row(const float *p, float *o) {
#pragma unroll
    for (int i = 0; i < DPL; i++) o[i] = p[i];
}
template <int DPL> __device__ __forceinline__ void ld_row(const __half *p, float *o) {
#pragma unroll
    for (int i = 0; i < DPL; i++) o[i] = __half2float(p[i]);
}

static int att_nsplit(int64_t Hq, int64_t T, int64_t nk) {
    int64_t base = Hq * T;
    if (base >= ATT_TARGET_BLOCKS) return 1;
    int64_t ns = (ATT_TARGET_BLOCKS + base - 1) / base;
    int64_t by_keys = (nk + ATT_MIN_KEYS - 1) / ATT_MIN_KEYS;
    if (ns > by_keys) ns = by_keys;
    if (ns > ATT_MAX_SPLIT) ns = ATT_MAX_SPLIT;
    return ns < 1 ? 1 : (int)ns;
}

/* Block (split s, query head h, token t). Warp w takes positions lo+w, lo+w+4, ...; lane l
 * holds dims l·DPL .. l·DPL+DPL-1 of q and of the running output. The warps' states merge
 * through shared memory; the result goes to out (one split) or to the partials in work. */
template <int DPL, typename KT>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    k_attention(const KT *__restrict__ kc, const KT *__restrict__ vc, int64_t Hq, int64_t Hkv,
                int64_t pos0, const float *__restrict__ q, float scale, float *out, float *part,
                int nsplit, int64_t chunk) {
    constexpr int D = DPL * 32;
    int s = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int64_t kh = h / (Hq / Hkv), ldk = Hkv * D;
    int64_t lo = (int64_t)s * chunk, hi = lo + chunk, last = pos0 + t + 1;
    if (hi > last) hi = last;
    float qv[DPL], o[DPL];
    const float *qp = q + ((int64_t)t * Hq + h) * D + lane * DPL;
#pragma unroll
    for (int i = 0; i < DPL; i++) qv[i] = qp[i] * scale, o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const KT *kb = kc + kh * D + lane * DPL, *vb = vc + kh * D + lane * DPL;
    for (int64_t p = lo + w; p < hi; p += ATT_WARPS) {
        float kv[DPL];
        ld_row<DPL>(kb + p * ldk, kv);
        float sc = 0.0f;
#pragma unroll
        for (int i = 0; i < DPL; i++) sc = fmaf(qv[i], kv[i], sc);
        sc = warp_sum(sc);
        float mn = fmaxf(m, sc), corr = __expf(m - mn), e = __expf(sc - mn);
        ld_row<DPL>(vb + p * ldk, kv);
        l = l * corr + e;
#pragma unroll
        for (int i = 0; i < DPL; i++) o[i] = fmaf(o[i], corr, e * kv[i]);
        m = mn;
    }
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS], so[ATT_WARPS][D];
    if (lane == 0) sm[w] = m, sl[w] = l;
#pragma unroll
    for (int i = 0; i < DPL; i++) so[w][lane * DPL + i] = o[i];
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int j = 0; j < ATT_WARPS; j++) M = fmaxf(M, sm[j]);
    float L = 0.0f, f[ATT_WARPS];
#pragma unroll
    for (int j = 0; j < ATT_WARPS; j++) {
        f[j] = sm[j] == -INFINITY ? 0.0f : __expf(sm[j] - M);
        L += sl[j] * f[j];
    }
    int64_t row = (int64_t)t * Hq + h;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < ATT_WARPS; j++) acc += so[j][d] * f[j];
        if (nsplit == 1)
            out[row * D + d] = acc / L;
        else
            part[(row * nsplit + s) * (D + 2) + 2 + d] = acc;
    }
    if (nsplit > 1 && threadIdx.x == 0) {
        part[(row * nsplit + s) * (D + 2)] = M;
        part[(row * nsplit + s) * (D + 2) + 1] = L;
    }
}

/* Merge the splits of one (token, head): out = Σ_s e^{M_s−M} O_s / Σ_s e^{M_s−M} L_s. */
__global__ void k_att_merge(const float *part, int nsplit, int D, float *out) {
    int64_t row = blockIdx.x;
    const float *p = part + row * nsplit * (D + 2);
    float M = -INFINITY;
    for (int s = 0; s < nsplit; s++) M = fmaxf(M, p[s * (D + 2)]);
    float L = 0.0f;
    for (int s = 0; s < nsplit; s++) {
        float ms = p[s * (D + 2)];
        if (ms != -INFINITY) L += p[s * (D + 2) + 1] * __expf(ms - M);
    }
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < nsplit; s++) {
            float ms = p[s * (D + 2)];
            if (ms != -INFINITY) acc += p[s * (D + 2) + 2 + d] * __expf(ms - M);
        }
        out[row * D + d] = acc / L;
    }
}

extern "C" size_t snug_cuda_attention_work_bytes(int64_t Hq, int64_t D, int64_t T) {
    int ns = att_nsplit(Hq, T, INT64_MAX / 2);
    if (ns <= 1) return 0;
    return (size_t)(T * Hq * ns * (D + 2)) * sizeof(float);
}

template <int DPL>
static void att_launch(cudaStream_t st, const struct snug_cuda_kv *kv, dim3 grid, int64_t Hq,
                       int64_t Hkv, int64_t pos0, const float *q, float scale, float *out,
                       float *part, int ns, int64_t chunk) {
    if (kv->type == SNUG_DTYPE_F16)
        k_attention<DPL, __half>
            <<<grid, ATT_WARPS * 32, 0, st>>>((const __half *)kv->k, (const __half *)kv->v, Hq, Hkv,
                                              pos0, q, scale, out, part, ns, chunk);
    else
        k_attention<DPL, float>
            <<<grid, ATT_WARPS * 32, 0, st>>>((const float *)kv->k, (const float *)kv->v, Hq, Hkv,
                                              pos0, q, scale, out, part, ns, chunk);
}

extern "C" int snug_cuda_attention(struct snug_cuda *cu, const struct snug_cuda_kv *kv, int64_t Hq,
                                   int64_t Hkv, int64_t D, int64_t pos0, int64_t T, const float *q,
                                   float scale, float *out, void *work, struct snug_err *err) {
    if (kv->type != SNUG_DTYPE_F16 && kv->type != SNUG_DTYPE_F32)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "cuda attention: cache type %u (F32 or "
                            "F16 expected)",
                            kv->type);
    if (Hkv <= 0 || Hq % Hkv)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "cuda attention: %lld query heads not a "
                            "multiple of %lld kv heads",
                            (long long)Hq, (long long)Hkv);
    if (pos0 + T > kv->n_ctx)
        return snug_err_set(err, SNUG_ERR_BUDGET,
                            "cuda attention: positions up to %lld past "
                            "the cache capacity %lld",
                            (long long)(pos0 + T), (long long)kv->n_ctx);
    if (T <= 0) return SNUG_OK;
    int64_t nk = pos0 + T;
    int ns = att_nsplit(Hq, T, nk);
    if (ns > 1 && !work)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "cuda attention: work memory required "
                            "(snug_cuda_attention_work_bytes)");
    int64_t chunk = (nk + ns - 1) / ns;
    dim3 grid((unsigned)ns, (unsigned)Hq, (unsigned)T);
    cudaStream_t st = SNUG_CU_STREAM(cu);
    float *part = (float *)work;
    switch (D) {
    case 32:
        att_launch<1>(st, kv, grid, Hq, Hkv, pos0, q, scale, out, part, ns, chunk);
        break;
    case 64:
        att_launch<2>(st, kv, grid, Hq, Hkv, pos0, q, scale, out, part, ns, chunk);
        break;
    case 128:
        att_launch<4>(st, kv, grid, Hq, Hkv, pos0, q, scale, out, part, ns, chunk);
        break;
    case 256:
        att_launch<8>(st, kv, grid, Hq, Hkv, pos0, q, scale, out, part, ns, chunk);
        break;
    default:
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "cuda attention: head dim %lld (32, 64, "
                            "128 or 256 supported)",
                            (long long)D);
    }
    int rc = snug_cu_launched(err, "attention");
    if (rc || ns == 1) return rc;
    k_att_merge<<<(unsigned)(T * Hq), 128, 0, st>>>(part, ns, (int)D, out);
    return snug_cu_launched(err, "attention merge");
}
