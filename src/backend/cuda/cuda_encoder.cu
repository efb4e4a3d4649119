/* cuda_encoder.cu — the encoder ops of the vision tower on the device: LayerNorm, bias + GELU,
 * rotary by a table of angles, and full (unmasked) attention over an image's patches.
 * Semantics: src/backend/cpu/ops.h / ops_encoder.c; tests/device/test_cuda_ops.c checks each
 * against the CPU op on odd shapes. Notes (roofline, versions): docs/perf/cuda-encoder.md.
 * Invariant: nothing allocates; LayerNorm reads its whole row (behind a barrier) before an
 * aliased write; attention keeps softmax state per query in registers (online softmax over key
 * tiles, the flash-attention recurrence), so its memory is the inputs and the output only.
 * Read next: src/vision/vision_backend.c (the caller), cuda_basic.cu. */
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"

#include <math.h>

static unsigned enc_blocks(int64_t n, int threads) {
    return (unsigned)((n + threads - 1) / threads);
}

/* One block per row: mean, then the biased variance around it (two passes over a row held in
 * L1/L2), then y = (x − mean) · rsqrt(var + eps) · w + b. */
__global__ void k_layernorm(const float *x, const float *w, const float *b, float eps, int64_t n,
                            float *y) {
    __shared__ float sh[32];
    const float *xr = x + blockIdx.x * n;
    float *yr = y + blockIdx.x * n;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += xr[i];
    float mean = block_sum(s, sh) / (float)n;
    float v = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float d = xr[i] - mean;
        v = fmaf(d, d, v);
    }
    float inv = rsqrtf(block_sum(v, sh) / (float)n + eps);
    __syncthreads(); /* every read of the row is done before an aliased write */
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
}

__global__ void k_bias_act(float *y, const float *b, int64_t T, int64_t n, int act) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * n) return;
    float x = y[i] + b[i % n];
    if (act == 1)
        x = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    else if (act == 2)
        x = 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
    y[i] = x;
}

/* One thread per (row, head, pair). */
__global__ void k_rope_angles(float *x, int64_t stride, int64_t T, int64_t heads, int64_t hd,
                              const float *ang) {
    int64_t half = hd / 2, idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * heads * half) return;
    int64_t i = idx % half, th = idx / half, t = th / heads, h = th % heads;
    float *v = x + t * stride + h * hd;
    float sn, cs;
    sincosf(ang[t * half + i], &sn, &cs);
    float x1 = v[i], x2 = v[i + half];
    v[i] = x1 * cs - x2 * sn;
    v[i + half] = x2 * cs + x1 * sn;
}

/* Full attention, one block per (64 queries, head), 256 threads: the four consecutive lanes of
 * a query each hold a quarter of its (scaled) q and of its output (dims l4, l4 + 4, ...), so
 * a score is four partial dots summed by two shuffles, and every lane then has all of a tile's
 * probabilities for its query: no shared memory for P. K and V tiles of AF_BK rows are staged
 * in shared memory (lanes read consecutive dims: no bank conflicts). */
#define AF_BQ      64
#define AF_BK      32
#define AF_THREADS 256

template <int HD>
__global__ void __launch_bounds__(AF_THREADS)
    k_attention_full(const float *__restrict__ q, const float *__restrict__ k,
                     const float *__restrict__ v, int64_t stride, int T, int heads, float scale,
                     float *__restrict__ out) {
    constexpr int Q4 = HD / 4;
    __shared__ float ks[AF_BK * HD], vs[AF_BK * HD];
    const int h = blockIdx.y, tid = threadIdx.x, l4 = tid & 3;
    const int row = blockIdx.x * AF_BQ + (tid >> 2);
    const bool ok = row < T;
    float qr[Q4], acc[Q4];
#pragma unroll
    for (int i = 0; i < Q4; i++) {
        qr[i] = ok ? q[(int64_t)row * stride + h * HD + l4 + 4 * i] * scale : 0.0f;
        acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int k0 = 0; k0 < T; k0 += AF_BK) {
        __syncthreads();
        for (int e = tid; e < AF_BK * HD; e += AF_THREADS) {
            int r = e / HD, d = e - r * HD, kr = k0 + r;
            int64_t off = (int64_t)kr * stride + h * HD + d;
            ks[e] = kr < T ? k[off] : 0.0f;
            vs[e] = kr < T ? v[off] : 0.0f;
        }
        __syncthreads();
        float s[AF_BK], mt = -INFINITY;
#pragma unroll
        for (int j = 0; j < AF_BK; j++) {
            float p = 0.0f;
#pragma unroll
            for (int i = 0; i < Q4; i++) p = fmaf(qr[i], ks[j * HD + l4 + 4 * i], p);
            p += __shfl_xor_sync(0xffffffffu, p, 1);
            p += __shfl_xor_sync(0xffffffffu, p, 2);
            s[j] = k0 + j < T ? p : -INFINITY;
            mt = fmaxf(mt, s[j]);
        }
        float mn = fmaxf(m, mt), corr = expf(m - mn), ls = 0.0f;
#pragma unroll
        for (int j = 0; j < AF_BK; j++) ls += s[j] = expf(s[j] - mn);
        l = l * corr + ls;
        m = mn;
#pragma unroll
        for (int i = 0; i < Q4; i++) acc[i] *= corr;
#pragma unroll
        for (int j = 0; j < AF_BK; j++)
#pragma unroll
            for (int i = 0; i < Q4; i++) acc[i] = fmaf(s[j], vs[j * HD + l4 + 4 * i], acc[i]);
    }
    if (!ok) return;
    float inv = 1.0f / l;
    float *o = out + (int64_t)row * heads * HD + h * HD;
#pragma unroll
    for (int i = 0; i < Q4; i++) o[l4 + 4 * i] = acc[i] * inv;
}

/* The head sizes with an instance (HD/4 values per lane). */
#define AF_HEAD_SIZES(X) X(16) X(32) X(48) X(64) X(72) X(80) X(96) X(112) X(128)

extern "C" bool snug_cuda_attention_full_supported(int64_t head_dim) {
#define AF_IS(n) || head_dim == n
    return false AF_HEAD_SIZES(AF_IS);
#undef AF_IS
}

extern "C" int snug_cuda_layernorm(struct snug_cuda *cu, const float *x, const float *w,
                                   const float *b, float eps, int64_t T, int64_t n, float *y,
                                   struct snug_err *err) {
    if (T <= 0) return SNUG_OK;
    k_layernorm<<<(unsigned)T, 256, 0, SNUG_CU_STREAM(cu)>>>(x, w, b, eps, n, y);
    return snug_cu_launched(err, "layernorm");
}

extern "C" int snug_cuda_bias_act(struct snug_cuda *cu, float *y, const float *b, int64_t T,
                                  int64_t n, int act, struct snug_err *err) {
    if (T * n <= 0) return SNUG_OK;
    k_bias_act<<<enc_blocks(T * n, 256), 256, 0, SNUG_CU_STREAM(cu)>>>(y, b, T, n, act);
    return snug_cu_launched(err, "bias_act");
}

extern "C" int snug_cuda_rope_angles(struct snug_cuda *cu, float *x, int64_t stride, int64_t T,
                                     int64_t n_heads, int64_t head_dim, const float *ang,
                                     struct snug_err *err) {
    int64_t n = T * n_heads * (head_dim / 2);
    if (n <= 0) return SNUG_OK;
    k_rope_angles<<<enc_blocks(n, 256), 256, 0, SNUG_CU_STREAM(cu)>>>(x, stride, T, n_heads,
                                                                      head_dim, ang);
    return snug_cu_launched(err, "rope_angles");
}

extern "C" int snug_cuda_attention_full(struct snug_cuda *cu, const float *q, const float *k,
                                        const float *v, int64_t stride, int64_t T, int64_t n_heads,
                                        int64_t head_dim, float scale, float *out,
                                        struct snug_err *err) {
    if (T <= 0) return SNUG_OK;
    if (T > INT32_MAX / 2 || n_heads > 65535)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED, "cuda attention_full: %lld rows, %lld heads",
                            (long long)T, (long long)n_heads);
    dim3 grid(enc_blocks(T, AF_BQ), (unsigned)n_heads);
    cudaStream_t s = SNUG_CU_STREAM(cu);
    switch (head_dim) {
#define AF_CASE(n)                                                                                 \
    case n:                                                                                        \
        k_attention_full<n>                                                                        \
            <<<grid, AF_THREADS, 0, s>>>(q, k, v, stride, (int)T, (int)n_heads, scale, out);       \
        break;
        AF_HEAD_SIZES(AF_CASE)
#undef AF_CASE
    default:
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "cuda attention_full: head size %lld (16, 32, 48, 64, 72, 80, 96, 112 "
                            "or 128 supported)",
                            (long long)head_dim);
    }
    return snug_cu_launched(err, "attention_full");
}
