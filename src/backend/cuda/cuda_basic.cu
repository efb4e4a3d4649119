/* cuda_basic.cu — the cheap per-row device ops: rmsnorm, l2norm, NeoX partial rotary and its
 * interleaved M-RoPE form (multimodal rows), SwiGLU, the sigmoid output gate, the gated RMSNorm
 * of the DeltaNet output and the causal depthwise conv + SiLU with its carried state. The norms,
 * SwiGLU, the output gate and the gated RMSNorm also have *_q8 forms that round their output to
 * int8 for the decode product that follows it (in the same launch, the bits of k_quant_x8).
 * Semantics: src/backend/cpu/ops.h / ops_basic.c.
 * Invariant: memory-bound, one pass over the data; norms use one block per row (all reads
 * complete, behind a barrier, before any aliased write); nothing allocates.
 * Read next: cuda_attention.cu. */
#include "backend/cuda/cuda_common.cuh"

#define ROW_THREADS 256

/* The norms below hold up to NORM_PER elements per thread in registers: every load of a row is
 * issued before the first use (a strided loop that writes as it goes waits one memory latency
 * per pass: 17.9 µs for the 27B's 5120-wide add + norm under ncu, against ~2 µs of traffic).
 * Rows longer than NORM_PER · 1024 take the strided loop. */
#define NORM_PER 8
static unsigned norm_threads(int64_t n) {
    int64_t t = (n + NORM_PER - 1) / NORM_PER;
    t = (t + 31) / 32 * 32;
    return (unsigned)(t < 32 ? 32 : t > 1024 ? 1024 : t);
}

/* y = x · rsqrt(mean(x²) + eps) · w into out, one block per row (out may be x). ADD: x += y
 * first (x written back; out must not overlap x or y), with the partition and order over the
 * sums of the plain norm (each thread re-reads only the elements it wrote), so add + norm has
 * the bits of add then norm. Q8: each output is also rounded to int8 as k_quant_x8 rounds it,
 * into the int8 matvec's x layout (qx, qd), so the product that follows skips its rounding
 * launch; a warp's 32 lanes hold one whole block of 32 (blockDim and n multiples of 32; the
 * register path only, n <= NORM_PER · blockDim: the host checks). */
template <bool ADD, bool Q8>
__global__ void __launch_bounds__(1024)
    k_rmsnorm(float *x, const float *y, const float *w, float eps, int64_t n, float *out,
              int8_t *qx, float2 *qd) {
    __shared__ float sh[32];
    float *xr = x + blockIdx.x * n;
    const float *yr = ADD ? y + blockIdx.x * n : NULL;
    float *or_ = out + blockIdx.x * n;
    float ss = 0.0f;
    if (n <= (int64_t)NORM_PER * blockDim.x) {
        /* the weights too are loaded up front: loaded in the output loop, each waited one
         * memory latency behind the stores before it (which may alias it), 8.6 µs for a
         * 2048-wide add + norm + rounding under ncu */
        float v[NORM_PER], wv[NORM_PER];
#pragma unroll
        for (int k = 0; k < NORM_PER; k++) {
            int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
            v[k] = i < n ? (ADD ? xr[i] + yr[i] : xr[i]) : 0.0f;
            wv[k] = i < n && w ? w[i] : 1.0f;
        }
#pragma unroll
        for (int k = 0; k < NORM_PER; k++) {
            int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
            if (ADD && i < n) xr[i] = v[k];
            ss = fmaf(v[k], v[k], ss);
        }
        ss = block_sum(ss, sh);
        float s = rsqrtf(ss / (float)n + eps);
#pragma unroll
        for (int k = 0; k < NORM_PER; k++) {
            int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
            float o = i < n ? v[k] * s * wv[k] : 0.0f;
            if (i < n) or_[i] = o;
            int64_t warp0 = (int64_t)k * blockDim.x + (threadIdx.x & ~31u); /* warp-uniform */
            if (Q8 && warp0 < n)
                warp_round_q8(o, qx + blockIdx.x * n + i, qd + ((blockIdx.x * n + i) >> 5));
        }
        return;
    }
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = ADD ? xr[i] + yr[i] : xr[i];
        if (ADD) xr[i] = v;
        ss = fmaf(v, v, ss);
    }
    ss = block_sum(ss, sh);
    float s = rsqrtf(ss / (float)n + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) or_[i] = xr[i] * s * (w ? w[i] : 1.0f);
}

/* x /= sqrt(Σx² + eps), one block per row. */
__global__ void k_l2norm(float *x, int64_t n, float eps) {
    __shared__ float sh[32];
    float *xr = x + blockIdx.x * n;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    ss = block_sum(ss, sh);
    float s = rsqrtf(ss + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) xr[i] *= s;
}

/* Rotate pair i of one head (x_i, x_{i+half}) by θ = p · base^(−2i/n_rot), the angle in double
 * as on the CPU (positions up to 262K keep full float accuracy in cos/sin). */
__device__ __forceinline__ void rope_pair(float *xh, int64_t i, int64_t half, int32_t p,
                                          double log2_base) {
    double theta = (double)p * exp2(-2.0 * (double)i / (double)(2 * half) * log2_base);
    double sd, cd;
    sincos(theta, &sd, &cd);
    float c = (float)cd, s = (float)sd;
    float a = xh[i], b = xh[i + half];
    xh[i] = a * c - b * s;
    xh[i + half] = b * c + a * s;
}

/* One thread per (token, head, pair i < n_rot/2): rope_pair at the token's position. */
__global__ void k_rope_neox(float *x, int64_t T, int64_t n_heads, int64_t head_dim, int64_t half,
                            const int32_t *pos, double log2_base) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * n_heads * half) return;
    int64_t i = idx % half, th = idx / half, t = th / n_heads;
    rope_pair(x + th * head_dim, i, half, pos[t], log2_base);
}

/* The same with three positions per token (interleaved M-RoPE, ops.h snug_op_rope_mrope): pair
 * i takes the height position when i % 3 == 1 and i < h_end (3·sections[1]), the width one when
 * i % 3 == 2 and i < w_end (3·sections[2]), else the temporal one. */
__global__ void k_rope_mrope(float *x, int64_t T, int64_t n_heads, int64_t head_dim, int64_t half,
                             const int32_t *pos3, int64_t h_end, int64_t w_end, double log2_base) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * n_heads * half) return;
    int64_t i = idx % half, th = idx / half, t = th / n_heads;
    int axis = (i % 3 == 1 && i < h_end) ? 1 : (i % 3 == 2 && i < w_end) ? 2 : 0;
    rope_pair(x + th * head_dim, i, half, pos3[t * 3 + axis], log2_base);
}

/* The elementwise producers of a product's x below (SwiGLU, the sigmoid output gate, the gated
 * RMSNorm) take Q8 as k_rmsnorm does: each output also rounded to int8 as k_quant_x8 rounds it
 * (warp_round_q8), into the int8 matvec's x layout read flat (element i in qx[i], its block's
 * (d, d·Σq) in qd[i / 32]), so the product that follows skips its rounding launch. A warp's 32
 * lanes hold one whole block of 32: consecutive elements from a multiple of 32 (blockDim a
 * multiple of 32; n, or dv, a multiple of 32, which the host checks). One expression computes the
 * value either way, so the f32 output has the same bits with Q8 as without. */
template <bool Q8>
__global__ void k_swiglu(const float *gate, const float *up, int64_t n, float *y, int8_t *qx,
                         float2 *qd) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return; /* Q8: whole warps leave together */
    float g = gate[i];
    float v = g / (1.0f + expf(-g)) * up[i];
    y[i] = v;
    if (Q8) warp_round_q8(v, qx + i, qd + (i >> 5));
}

template <bool Q8>
__global__ void k_sigmoid_mul(const float *x, const float *gate, int64_t n, float *y, int8_t *qx,
                              float2 *qd) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return; /* Q8: whole warps leave together */
    float v = x[i] / (1.0f + expf(-gate[i]));
    y[i] = v;
    if (Q8) warp_round_q8(v, qx + i, qd + (i >> 5));
}

/* y = w · rmsnorm(o) · silu(z) per (token, value head) row of dv; one block per row (Q8: the
 * rows [T·Nv][dv] are the product's x [T][Nv·dv], so row r's element i is flat element
 * r·dv + i). */
template <bool Q8>
__global__ void k_gated_rmsnorm(const float *o, const float *z, const float *w, float eps,
                                int64_t dv, float *y, int8_t *qx, float2 *qd) {
    __shared__ float sh[32];
    size_t off = (size_t)blockIdx.x * dv;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < dv; i += blockDim.x) ss = fmaf(o[off + i], o[off + i], ss);
    ss = block_sum(ss, sh);
    float s = rsqrtf(ss / (float)dv + eps);
    for (int64_t i = threadIdx.x; i < dv; i += blockDim.x) { /* Q8: warp-uniform trips */
        float zz = z[off + i];
        float v = w[i] * (o[off + i] * s) * (zz / (1.0f + expf(-zz)));
        y[off + i] = v;
        if (Q8) warp_round_q8(v, qx + off + i, qd + ((off + i) >> 5));
    }
}

#define CONV_KMAX 8
/* One thread per channel: the window (last K-1 inputs) lives in registers, so the carried
 * state is read once and written once whatever T is. */
template <int K>
__device__ __forceinline__ void conv_silu(const float *x, int64_t T, int64_t C, const float *w,
                                          float *state, float *y) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float win[K], wc[K];
#pragma unroll
    for (int j = 0; j < K; j++) wc[j] = w[c * K + j];
#pragma unroll
    for (int j = 0; j < K - 1; j++) win[j] = state[j * C + c];
    for (int64_t t = 0; t < T; t++) {
        win[K - 1] = x[t * C + c];
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < K; j++) acc = fmaf(wc[j], win[j], acc);
        y[t * C + c] = acc / (1.0f + expf(-acc));
#pragma unroll
        for (int j = 0; j < K - 1; j++) win[j] = win[j + 1];
    }
#pragma unroll
    for (int j = 0; j < K - 1; j++) state[j * C + c] = win[j];
}
template <int K>
__global__ void k_conv_silu(const float *x, int64_t T, int64_t C, const float *w, float *state,
                            float *y) {
    conv_silu<K>(x, T, C, w, state, y);
}
/* The runs of a batched step (snug_cuda_conv_silu_runs), by value: blockIdx.y is the run, its
 * rows start at row0 of x and y, its state is its own; each does what k_conv_silu does. */
struct conv_runs {
    int64_t row0[SNUG_CUDA_RUNS_MAX], T[SNUG_CUDA_RUNS_MAX];
    float *state[SNUG_CUDA_RUNS_MAX];
};
template <int K>
__global__ void k_conv_silu_runs(const float *x, int64_t C, const float *w, float *y,
                                 const conv_runs rs) {
    int z = blockIdx.y;
    conv_silu<K>(x + rs.row0[z] * C, rs.T[z], C, w, rs.state[z], y + rs.row0[z] * C);
}

static unsigned nblk(int64_t n, int b) {
    return (unsigned)((n + b - 1) / b);
}

extern "C" int snug_cuda_rmsnorm(struct snug_cuda *cu, const float *x, const float *w, float eps,
                                 int64_t T, int64_t n, float *y, struct snug_err *err) {
    if (T <= 0) return SNUG_OK;
    k_rmsnorm<false, false><<<(unsigned)T, norm_threads(n), 0, SNUG_CU_STREAM(cu)>>>(
        (float *)x, NULL, w, eps, n, y, NULL, NULL);
    return snug_cu_launched(err, "rmsnorm");
}

extern "C" bool snug_cuda_norm_q8_fits(int64_t T, int64_t n) {
    return T >= 1 && T <= SNUG_CUDA_MATVEC_MAX_T && n % 32 == 0 && n <= (int64_t)NORM_PER * 1024;
}

extern "C" int snug_cuda_rmsnorm_q8(struct snug_cuda *cu, const float *x, const float *w, float eps,
                                    int64_t T, int64_t n, float *y, void *work,
                                    struct snug_err *err) {
    if (!snug_cuda_norm_q8_fits(T, n))
        return snug_err_set(err, SNUG_ERR_INVALID, "cuda rmsnorm_q8: T %lld, n %lld", (long long)T,
                            (long long)n);
    int8_t *qx;
    float2 *qd;
    snug_cu_mvq_x(work, n, T, &qx, &qd);
    k_rmsnorm<false, true><<<(unsigned)T, norm_threads(n), 0, SNUG_CU_STREAM(cu)>>>(
        (float *)x, NULL, w, eps, n, y, qx, qd);
    return snug_cu_launched(err, "rmsnorm_q8");
}

extern "C" int snug_cuda_add_rmsnorm(struct snug_cuda *cu, float *x, const float *y, const float *w,
                                     float eps, int64_t T, int64_t n, float *xn,
                                     struct snug_err *err) {
    if (T <= 0) return SNUG_OK;
    k_rmsnorm<true, false>
        <<<(unsigned)T, norm_threads(n), 0, SNUG_CU_STREAM(cu)>>>(x, y, w, eps, n, xn, NULL, NULL);
    return snug_cu_launched(err, "add_rmsnorm");
}

extern "C" int snug_cuda_add_rmsnorm_q8(struct snug_cuda *cu, float *x, const float *y,
                                        const float *w, float eps, int64_t T, int64_t n, float *xn,
                                        void *work, struct snug_err *err) {
    if (!snug_cuda_norm_q8_fits(T, n))
        return snug_err_set(err, SNUG_ERR_INVALID, "cuda add_rmsnorm_q8: T %lld, n %lld",
                            (long long)T, (long long)n);
    int8_t *qx;
    float2 *qd;
    snug_cu_mvq_x(work, n, T, &qx, &qd);
    k_rmsnorm<true, true>
        <<<(unsigned)T, norm_threads(n), 0, SNUG_CU_STREAM(cu)>>>(x, y, w, eps, n, xn, qx, qd);
    return snug_cu_launched(err, "add_rmsnorm_q8");
}

extern "C" int snug_cuda_l2norm(struct snug_cuda *cu, float *x, int64_t rows, int64_t n, float eps,
                                struct snug_err *err) {
    if (rows <= 0) return SNUG_OK;
    int th = n <= 128 ? 128 : ROW_THREADS;
    k_l2norm<<<(unsigned)rows, th, 0, SNUG_CU_STREAM(cu)>>>(x, n, eps);
    return snug_cu_launched(err, "l2norm");
}

extern "C" int snug_cuda_rope_neox(struct snug_cuda *cu, float *x, int64_t T, int64_t n_heads,
                                   int64_t head_dim, int64_t n_rot, const int32_t *pos, float base,
                                   struct snug_err *err) {
    if (n_rot > head_dim || n_rot % 2 || n_rot <= 0)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "cuda rope: n_rot %lld must be even and in "
                            "(0, head_dim %lld]",
                            (long long)n_rot, (long long)head_dim);
    int64_t n = T * n_heads * (n_rot / 2);
    if (n <= 0) return SNUG_OK;
    k_rope_neox<<<nblk(n, 256), 256, 0, SNUG_CU_STREAM(cu)>>>(x, T, n_heads, head_dim, n_rot / 2,
                                                              pos, log2((double)base));
    return snug_cu_launched(err, "rope_neox");
}

extern "C" int snug_cuda_rope_mrope(struct snug_cuda *cu, float *x, int64_t T, int64_t n_heads,
                                    int64_t head_dim, int64_t n_rot, const int32_t *pos3,
                                    const uint32_t sections[3], float base, struct snug_err *err) {
    if (n_rot > head_dim || n_rot % 2 || n_rot <= 0)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "cuda m-rope: n_rot %lld must be even and in (0, head_dim %lld]",
                            (long long)n_rot, (long long)head_dim);
    int64_t n = T * n_heads * (n_rot / 2);
    if (n <= 0) return SNUG_OK;
    k_rope_mrope<<<nblk(n, 256), 256, 0, SNUG_CU_STREAM(cu)>>>(
        x, T, n_heads, head_dim, n_rot / 2, pos3, 3 * (int64_t)sections[1],
        3 * (int64_t)sections[2], log2((double)base));
    return snug_cu_launched(err, "rope_mrope");
}

extern "C" int snug_cuda_swiglu(struct snug_cuda *cu, const float *gate, const float *up, int64_t n,
                                float *y, struct snug_err *err) {
    if (n <= 0) return SNUG_OK;
    k_swiglu<false><<<nblk(n, 256), 256, 0, SNUG_CU_STREAM(cu)>>>(gate, up, n, y, NULL, NULL);
    return snug_cu_launched(err, "swiglu");
}

extern "C" int snug_cuda_swiglu_q8(struct snug_cuda *cu, const float *gate, const float *up,
                                   int64_t n, float *y, void *work, struct snug_err *err) {
    if (n <= 0 || n % 32)
        return snug_err_set(err, SNUG_ERR_INVALID, "cuda swiglu_q8: n %lld", (long long)n);
    int8_t *qx;
    float2 *qd;
    snug_cu_mvq_x(work, n, 1, &qx, &qd);
    k_swiglu<true><<<nblk(n, 256), 256, 0, SNUG_CU_STREAM(cu)>>>(gate, up, n, y, qx, qd);
    return snug_cu_launched(err, "swiglu_q8");
}

extern "C" int snug_cuda_sigmoid_mul(struct snug_cuda *cu, const float *x, const float *gate,
                                     int64_t n, float *y, struct snug_err *err) {
    if (n <= 0) return SNUG_OK;
    k_sigmoid_mul<false><<<nblk(n, 256), 256, 0, SNUG_CU_STREAM(cu)>>>(x, gate, n, y, NULL, NULL);
    return snug_cu_launched(err, "sigmoid_mul");
}

extern "C" int snug_cuda_sigmoid_mul_q8(struct snug_cuda *cu, const float *x, const float *gate,
                                        int64_t n, float *y, void *work, struct snug_err *err) {
    if (n <= 0 || n % 32)
        return snug_err_set(err, SNUG_ERR_INVALID, "cuda sigmoid_mul_q8: n %lld", (long long)n);
    int8_t *qx;
    float2 *qd;
    snug_cu_mvq_x(work, n, 1, &qx, &qd);
    k_sigmoid_mul<true><<<nblk(n, 256), 256, 0, SNUG_CU_STREAM(cu)>>>(x, gate, n, y, qx, qd);
    return snug_cu_launched(err, "sigmoid_mul_q8");
}

extern "C" int snug_cuda_gated_rmsnorm(struct snug_cuda *cu, const float *o, const float *z,
                                       const float *w, float eps, int64_t T, int64_t Nv, int64_t dv,
                                       float *y, struct snug_err *err) {
    if (T * Nv <= 0) return SNUG_OK;
    k_gated_rmsnorm<false>
        <<<(unsigned)(T * Nv), 128, 0, SNUG_CU_STREAM(cu)>>>(o, z, w, eps, dv, y, NULL, NULL);
    return snug_cu_launched(err, "gated_rmsnorm");
}

extern "C" int snug_cuda_gated_rmsnorm_q8(struct snug_cuda *cu, const float *o, const float *z,
                                          const float *w, float eps, int64_t T, int64_t Nv,
                                          int64_t dv, float *y, void *work, struct snug_err *err) {
    if (T < 1 || Nv < 1 || dv <= 0 || dv % 32)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "cuda gated_rmsnorm_q8: T %lld, Nv %lld, dv %lld", (long long)T,
                            (long long)Nv, (long long)dv);
    int8_t *qx;
    float2 *qd;
    snug_cu_mvq_x(work, Nv * dv, T, &qx, &qd);
    k_gated_rmsnorm<true>
        <<<(unsigned)(T * Nv), 128, 0, SNUG_CU_STREAM(cu)>>>(o, z, w, eps, dv, y, qx, qd);
    return snug_cu_launched(err, "gated_rmsnorm_q8");
}

extern "C" int snug_cuda_conv_silu(struct snug_cuda *cu, const float *x, int64_t T, int64_t C,
                                   int64_t K, const float *w, float *conv_state, float *y,
                                   struct snug_err *err) {
    if (T <= 0) return SNUG_OK;
    cudaStream_t s = SNUG_CU_STREAM(cu);
    unsigned b = nblk(C, 128);
    switch (K) {
    case 2:
        k_conv_silu<2><<<b, 128, 0, s>>>(x, T, C, w, conv_state, y);
        break;
    case 3:
        k_conv_silu<3><<<b, 128, 0, s>>>(x, T, C, w, conv_state, y);
        break;
    case 4:
        k_conv_silu<4><<<b, 128, 0, s>>>(x, T, C, w, conv_state, y);
        break;
    case 5:
        k_conv_silu<5><<<b, 128, 0, s>>>(x, T, C, w, conv_state, y);
        break;
    case 6:
        k_conv_silu<6><<<b, 128, 0, s>>>(x, T, C, w, conv_state, y);
        break;
    case 7:
        k_conv_silu<7><<<b, 128, 0, s>>>(x, T, C, w, conv_state, y);
        break;
    case 8:
        k_conv_silu<8><<<b, 128, 0, s>>>(x, T, C, w, conv_state, y);
        break;
    default:
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "cuda conv: kernel size %lld (2..%d "
                            "supported)",
                            (long long)K, CONV_KMAX);
    }
    return snug_cu_launched(err, "conv_silu");
}

extern "C" int snug_cuda_conv_silu_runs(struct snug_cuda *cu, int32_t n,
                                        const struct snug_cuda_run *runs, const float *x, int64_t C,
                                        int64_t K, const float *w, float *y, struct snug_err *err) {
    if (K < 2 || K > CONV_KMAX)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "cuda conv: kernel size %lld (2..%d supported)", (long long)K,
                            CONV_KMAX);
    cudaStream_t s = SNUG_CU_STREAM(cu);
    for (int32_t i0 = 0; i0 < n; i0 += SNUG_CUDA_RUNS_MAX) {
        int m = n - i0 < SNUG_CUDA_RUNS_MAX ? n - i0 : SNUG_CUDA_RUNS_MAX;
        conv_runs rs = {};
        for (int i = 0; i < m; i++)
            rs.row0[i] = runs[i0 + i].row0, rs.T[i] = runs[i0 + i].T,
            rs.state[i] = runs[i0 + i].state;
        dim3 g(nblk(C, 128), (unsigned)m);
#define CONV_GO(KK)                                                                                \
    case KK:                                                                                       \
        k_conv_silu_runs<KK><<<g, 128, 0, s>>>(x, C, w, y, rs);                                    \
        break
        switch (K) {
            CONV_GO(2);
            CONV_GO(3);
            CONV_GO(4);
            CONV_GO(5);
            CONV_GO(6);
            CONV_GO(7);
            CONV_GO(8);
        }
#undef CONV_GO
        int st = snug_cu_launched(err, "conv_silu_runs");
        if (st) return st;
    }
    return SNUG_OK;
}
