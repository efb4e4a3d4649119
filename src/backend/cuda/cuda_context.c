/* cuda_context.c — the CUDA backend's host side in C: device/stream/cuBLAS setup, device
 * memory helpers and error reporting. Owns struct snug_cuda's resources.
 * Invariant: every CUDA runtime/cuBLAS return code is checked and turned into a snug status
 * with a message naming the call; nothing here runs on the token path except snug_cuda_sync.
 * Read next: cuda_ops.h (the API), cuda_matmul.cu (the kernels start there). */
#include "backend/cuda/cuda_ops.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

/* Turn a runtime error into SNUG_ERR_INTERNAL (NOMEM for allocation failures). */
static int cuda_fail(struct snug_err *err, cudaError_t e, const char *what) {
    int st = e == cudaErrorMemoryAllocation ? SNUG_ERR_NOMEM : SNUG_ERR_INTERNAL;
    return snug_err_set(err, st, "cuda: %s failed: %s (%s)", what, cudaGetErrorString(e),
                        cudaGetErrorName(e));
}

/* Pick the device, read its properties, create the stream and the cuBLAS handle (bound to
 * the stream, default math mode: bf16 products use tensor cores). */
int snug_cuda_init(struct snug_cuda *cu, int device, struct snug_err *err) {
    memset(cu, 0, sizeof *cu);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return cuda_fail(err, e, "cudaGetDeviceCount");
    if (device < 0 || device >= n)
        return snug_err_set(err, SNUG_ERR_INVALID, "cuda: device %d requested, %d present", device,
                            n);
    if ((e = cudaSetDevice(device)) != cudaSuccess) return cuda_fail(err, e, "cudaSetDevice");
    struct cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, device)) != cudaSuccess)
        return cuda_fail(err, e, "cudaGetDeviceProperties");
    cu->device = device;
    cu->sm_count = p.multiProcessorCount;
    cu->cc_major = p.major;
    cu->cc_minor = p.minor;
    cu->smem_optin = p.sharedMemPerBlockOptin;
    snprintf(cu->name, sizeof cu->name, "%s", p.name);
    cudaStream_t s;
    if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess)
        return cuda_fail(err, e, "cudaStreamCreate");
    cu->stream = s;
    cublasHandle_t h;
    cublasStatus_t bs = cublasCreate(&h);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        snug_cuda_free(cu);
        return snug_err_set(err, SNUG_ERR_INTERNAL, "cuda: cublasCreate failed (status %d)",
                            (int)bs);
    }
    cu->cublas = h;
    cublasSetStream(h, s);
    return SNUG_OK;
}

void snug_cuda_free(struct snug_cuda *cu) {
    if (!cu) return;
    if (cu->cublas) cublasDestroy((cublasHandle_t)cu->cublas);
    if (cu->stream) cudaStreamDestroy((cudaStream_t)cu->stream);
    cu->cublas = NULL;
    cu->stream = NULL;
}

int snug_cuda_sync(struct snug_cuda *cu, struct snug_err *err) {
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)cu->stream);
    if (e != cudaSuccess) return cuda_fail(err, e, "cudaStreamSynchronize");
    e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_fail(err, e, "a queued kernel");
    return SNUG_OK;
}

int snug_cuda_malloc(void **p, size_t bytes, struct snug_err *err) {
    *p = NULL;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *p = NULL;
        return snug_err_set(err, SNUG_ERR_NOMEM, "cuda: cudaMalloc of %zu bytes failed: %s", bytes,
                            cudaGetErrorString(e));
    }
    return SNUG_OK;
}

void snug_cuda_dfree(void *p) {
    if (p) cudaFree(p);
}

int snug_cuda_upload(struct snug_cuda *cu, void *dst, const void *src, size_t bytes,
                     struct snug_err *err) {
    cudaError_t e =
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)cu->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize((cudaStream_t)cu->stream);
    return e == cudaSuccess ? SNUG_OK : cuda_fail(err, e, "upload (cudaMemcpy)");
}

int snug_cuda_download(struct snug_cuda *cu, void *dst, const void *src, size_t bytes,
                       struct snug_err *err) {
    cudaError_t e =
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)cu->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize((cudaStream_t)cu->stream);
    return e == cudaSuccess ? SNUG_OK : cuda_fail(err, e, "download (cudaMemcpy)");
}

int snug_cuda_copy(struct snug_cuda *cu, void *dst, const void *src, size_t bytes,
                   struct snug_err *err) {
    cudaError_t e =
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)cu->stream);
    return e == cudaSuccess ? SNUG_OK : cuda_fail(err, e, "device copy (cudaMemcpyAsync)");
}

int snug_cuda_mem_info(size_t *free_b, size_t *total_b, struct snug_err *err) {
    cudaError_t e = cudaMemGetInfo(free_b, total_b);
    return e == cudaSuccess ? SNUG_OK : cuda_fail(err, e, "cudaMemGetInfo");
}
