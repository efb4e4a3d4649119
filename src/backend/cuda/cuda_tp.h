/* cuda_tp.h — tensor parallelism's communication on GPUs: NCCL communicators (one per rank,
 * one process, one thread per GPU) and the in-place all-reduce the backend op `all_reduce`
 * (backend.h) maps to. Built with NCCL when CMake finds nccl.h (SNUG_NCCL=1; the CUDA toolkit
 * ships it); libnccl.so.2 is loaded at the first communicator (a one-GPU run never needs it).
 * Without either, every call answers SNUG_ERR_UNSUPPORTED with the reason.
 * Status: compiled, not yet run on two GPUs (docs/tensor-parallel.md §4 lists the commands;
 * tests/device/test_cuda_tp.c is the first of them).
 * Read next: cuda_tp.c, cuda_backend.c (snug_cuda_be_attach_comm), src/tp/tp_cpu.c (the CPU
 * emulation of the same protocol).
 */
#ifndef SNUG_CUDA_TP_H
#define SNUG_CUDA_TP_H

#include "backend/backend.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct snug_cuda_comm;

/* Whether this library was built with NCCL and libnccl.so.2 loads. */
bool snug_cuda_tp_available(void);

/* One communicator per rank over devices[0..n_ranks) (ncclCommInitAll: rank r on devices[r]);
 * comms[r] receives rank r's. Errors name NCCL's message. */
int snug_cuda_comm_init_all(struct snug_cuda_comm **comms, int32_t n_ranks, const int *devices,
                            struct snug_err *err);
void snug_cuda_comm_free(struct snug_cuda_comm *comm);
int32_t snug_cuda_comm_rank(const struct snug_cuda_comm *comm);
int32_t snug_cuda_comm_size(const struct snug_cuda_comm *comm);

/* x[0..n) (device memory of the comm's GPU) = the sum over the ranks of their x, in place, queued
 * on `stream` (a cudaStream_t). One thread driving several ranks brackets the ranks' calls with
 * snug_cuda_comm_group(true) / (false) (ncclGroupStart / ncclGroupEnd). */
int snug_cuda_comm_all_reduce(struct snug_cuda_comm *comm, float *x, int64_t n, void *stream,
                              struct snug_err *err);
int snug_cuda_comm_group(bool start, struct snug_err *err);

/* Make a CUDA backend instance one rank of several: its ops table gains all_reduce over comm
 * (borrowed; outlives the instance). SNUG_ERR_INVALID for an instance of another backend. */
int snug_cuda_be_attach_comm(struct snug_be *be, struct snug_cuda_comm *comm, struct snug_err *err);

#ifdef __cplusplus
}
#endif

#endif /* SNUG_CUDA_TP_H */
