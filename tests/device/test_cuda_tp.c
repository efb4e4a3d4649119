/* test_cuda_tp.c — tensor parallelism's communication on GPUs (src/backend/cuda/cuda_tp.c):
 *   - one rank: a communicator over device 0; the all-reduce of one rank leaves the buffer as it
 *     was (the single-GPU check, runnable before two GPUs are at hand);
 *   - every visible device as a rank (2 on nvidia-h200-x2): rank r's buffer holds
 *     (r + 1)·(i mod 97); after the all-reduce every rank holds Σ_r (r + 1)·(i mod 97),
 *     exactly (small integers in float32);
 *   - a communicator is refused to anything but a CUDA backend instance.
 * Needs a GPU and NCCL: built when nvcc is found, not registered with ctest; run it on the
 * device machine (docs/tensor-parallel.md §4). The last line is "N passed, N failed".
 * Read next: src/backend/cuda/cuda_tp.h.
 */
#include "backend/backend.h"
#include "backend/cuda/cuda_tp.h"
#include "core/core.h"
#include "plan/shard.h"
#include "test.h"

#include <cuda_runtime.h>
#include <stdint.h>

enum { N = 100003 }; /* an odd count */

/* All-reduce one buffer per rank (one thread drives every rank: an NCCL group) and check. */
static void run_ranks(int32_t n_ranks) {
    struct snug_err err = {0};
    int devices[SNUG_TP_MAX_RANKS];
    for (int32_t r = 0; r < n_ranks; r++) devices[r] = r;
    struct snug_cuda_comm *comms[SNUG_TP_MAX_RANKS] = {0};
    int rc = snug_cuda_comm_init_all(comms, n_ranks, devices, &err);
    CHECKF(rc == SNUG_OK, "%d ranks: %s", n_ranks, err.msg);
    if (rc) return;
    float *host = malloc(sizeof(float) * N);
    float *dev[SNUG_TP_MAX_RANKS];
    cudaStream_t st[SNUG_TP_MAX_RANKS];
    for (int32_t r = 0; r < n_ranks; r++) {
        CHECK(snug_cuda_comm_rank(comms[r]) == r && snug_cuda_comm_size(comms[r]) == n_ranks);
        cudaSetDevice(devices[r]);
        cudaStreamCreate(&st[r]);
        cudaMalloc((void **)&dev[r], sizeof(float) * N);
        for (int i = 0; i < N; i++) host[i] = (float)((r + 1) * (i % 97));
        cudaMemcpy(dev[r], host, sizeof(float) * N, cudaMemcpyHostToDevice);
    }
    CHECK(snug_cuda_comm_group(true, &err) == SNUG_OK);
    for (int32_t r = 0; r < n_ranks; r++) {
        cudaSetDevice(devices[r]);
        CHECKF(snug_cuda_comm_all_reduce(comms[r], dev[r], N, st[r], &err) == SNUG_OK, "%s",
               err.msg);
    }
    CHECK(snug_cuda_comm_group(false, &err) == SNUG_OK);
    float sum = 0;
    for (int32_t r = 0; r < n_ranks; r++) sum += (float)(r + 1);
    for (int32_t r = 0; r < n_ranks; r++) {
        cudaSetDevice(devices[r]);
        cudaStreamSynchronize(st[r]);
        cudaMemcpy(host, dev[r], sizeof(float) * N, cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += host[i] != sum * (float)(i % 97);
        printf("%d rank%s: rank %d after the all-reduce: %d of %d values wrong\n", n_ranks,
               n_ranks == 1 ? "" : "s", r, bad, N);
        CHECK(bad == 0);
        cudaFree(dev[r]);
        cudaStreamDestroy(st[r]);
        snug_cuda_comm_free(comms[r]);
    }
    free(host);
}

int main(void) {
    if (!snug_cuda_tp_available()) {
        printf("libsnug_cuda was built without NCCL\n");
        test_failed++;
        return TEST_DONE();
    }
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) {
        printf("no CUDA device\n");
        test_failed++;
        return TEST_DONE();
    }
    run_ranks(1);
    if (n_dev >= 2)
        run_ranks(n_dev < SNUG_TP_MAX_RANKS ? n_dev : SNUG_TP_MAX_RANKS);
    else
        printf("one device: the multi-rank all-reduce waits for nvidia-h200-x2\n");
    /* a CPU instance takes no communicator */
    struct snug_be cpu;
    snug_backend_cpu_init(&cpu, NULL);
    struct snug_err err = {0};
    CHECK(snug_cuda_be_attach_comm(&cpu, NULL, &err) == SNUG_ERR_INVALID);
    return TEST_DONE();
}
