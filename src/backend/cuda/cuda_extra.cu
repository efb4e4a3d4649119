/* cuda_extra.cu — the elementwise kernels behind cuda_backend.h: residual add, scale, DeltaNet
 * gates (sigmoid β, g = a·softplus(α + dt)), row gather and the MoE weighted combine.
 * Semantics: the CPU versions in src/backend/backend_cpu.c.
 * Invariant: one thread per output element, memory-bound, deterministic (the combine sums the
 * k experts of a token in selection order, as the CPU does); nothing allocates.
 * Read next: cuda_backend.c. */
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"

#define EW_THREADS 256

static unsigned n_blocks(int64_t n) {
    return (unsigned)((n + EW_THREADS - 1) / EW_THREADS);
}

__global__ void k_add(float *x, const float *y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}
__global__ void k_scale(float *x, int64_t n, float s) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}
/* softplus linear above 20, as PyTorch's default. */
__global__ void k_delta_gates(float *beta, float *g, const float *a, const float *dt, int64_t T,
                              int64_t Nv) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * Nv) return;
    int64_t j = i % Nv;
    beta[i] = 1.0f / (1.0f + expf(-beta[i]));
    float x = g[i] + dt[j];
    g[i] = a[j] * (x > 20.0f ? x : log1pf(expf(x)));
}
__global__ void k_gather_rows(float *dst, const float *src, const int32_t *idx, int64_t n,
                              int64_t H) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * H) return;
    int64_t r = i / H, c = i % H;
    dst[i] = src[(int64_t)idx[r] * H + c];
}
__global__ void k_moe_combine(float *y, const float *d, const int32_t *slot, const float *w,
                              int64_t T, int64_t k, int64_t H) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * H) return;
    int64_t t = i / H, c = i % H;
    float acc = 0.0f;
    for (int64_t j = 0; j < k; j++) acc += w[t * k + j] * d[(int64_t)slot[t * k + j] * H + c];
    y[i] = acc;
}
__global__ void k_add_gated(float *y, const float *d, const float *gl, int64_t T, int64_t H) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * H) return;
    float s = 1.0f / (1.0f + expf(-gl[i / H]));
    y[i] += s * d[i];
}

extern "C" int snug_cuda_add(struct snug_cuda *cu, float *x, const float *y, int64_t n,
                             struct snug_err *err) {
    if (n <= 0) return SNUG_OK;
    k_add<<<n_blocks(n), EW_THREADS, 0, SNUG_CU_STREAM(cu)>>>(x, y, n);
    return snug_cu_launched(err, "add");
}
extern "C" int snug_cuda_scale(struct snug_cuda *cu, float *x, int64_t n, float s,
                               struct snug_err *err) {
    if (n <= 0) return SNUG_OK;
    k_scale<<<n_blocks(n), EW_THREADS, 0, SNUG_CU_STREAM(cu)>>>(x, n, s);
    return snug_cu_launched(err, "scale");
}
extern "C" int snug_cuda_delta_gates(struct snug_cuda *cu, float *beta, float *g, const float *a,
                                     const float *dt, int64_t T, int64_t Nv, struct snug_err *err) {
    if (T * Nv <= 0) return SNUG_OK;
    k_delta_gates<<<n_blocks(T * Nv), EW_THREADS, 0, SNUG_CU_STREAM(cu)>>>(beta, g, a, dt, T, Nv);
    return snug_cu_launched(err, "delta_gates");
}
extern "C" int snug_cuda_gather_rows(struct snug_cuda *cu, float *dst, const float *src,
                                     const int32_t *idx, int64_t n, int64_t H,
                                     struct snug_err *err) {
    if (n * H <= 0) return SNUG_OK;
    k_gather_rows<<<n_blocks(n * H), EW_THREADS, 0, SNUG_CU_STREAM(cu)>>>(dst, src, idx, n, H);
    return snug_cu_launched(err, "gather_rows");
}
extern "C" int snug_cuda_moe_combine(struct snug_cuda *cu, float *y, const float *d,
                                     const int32_t *slot, const float *w, int64_t T, int64_t k,
                                     int64_t H, struct snug_err *err) {
    if (T * H <= 0) return SNUG_OK;
    k_moe_combine<<<n_blocks(T * H), EW_THREADS, 0, SNUG_CU_STREAM(cu)>>>(y, d, slot, w, T, k, H);
    return snug_cu_launched(err, "moe_combine");
}
extern "C" int snug_cuda_add_gated(struct snug_cuda *cu, float *y, const float *d,
                                   const float *glogit, int64_t T, int64_t H,
                                   struct snug_err *err) {
    if (T * H <= 0) return SNUG_OK;
    k_add_gated<<<n_blocks(T * H), EW_THREADS, 0, SNUG_CU_STREAM(cu)>>>(y, d, glogit, T, H);
    return snug_cu_launched(err, "add_gated");
}
