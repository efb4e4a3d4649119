/* cuda_tp.c — NCCL communicators and the in-place all-reduce (see cuda_tp.h). Owns each
 * communicator handle. libnccl is opened with dlopen at the first communicator (only tensor
 * parallelism needs it: a one-GPU run never loads it, and libsnug_cuda.so does not link it).
 * Invariant: an all-reduce sums float32 in place on the caller's stream; nothing here
 * allocates after the communicators exist.
 * Read next: cuda_tp.h, cuda_backend.c (the op that calls it).
 */
#include "backend/cuda/cuda_tp.h"

#include "backend/backend.h"
#include "core/core.h"

#if SNUG_NCCL
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>

struct snug_cuda_comm {
    ncclComm_t comm;
    int32_t rank, size;
};

/* The NCCL entry points used here, from libnccl.so.2 (NCCL's stable ABI name). */
static struct {
    pthread_once_t once;
    bool ok;
    char why[256];
    ncclResult_t (*comm_init_all)(ncclComm_t *, int, const int *);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    const char *(*error_string)(ncclResult_t);
} nccl = {.once = PTHREAD_ONCE_INIT};

static void nccl_load(void) {
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(nccl.why, sizeof nccl.why, "%s", e ? e : "dlopen failed");
        return;
    }
    *(void **)&nccl.comm_init_all = dlsym(h, "ncclCommInitAll");
    *(void **)&nccl.comm_destroy = dlsym(h, "ncclCommDestroy");
    *(void **)&nccl.all_reduce = dlsym(h, "ncclAllReduce");
    *(void **)&nccl.group_start = dlsym(h, "ncclGroupStart");
    *(void **)&nccl.group_end = dlsym(h, "ncclGroupEnd");
    *(void **)&nccl.error_string = dlsym(h, "ncclGetErrorString");
    nccl.ok = nccl.comm_init_all && nccl.comm_destroy && nccl.all_reduce && nccl.group_start &&
              nccl.group_end && nccl.error_string;
    if (!nccl.ok) snprintf(nccl.why, sizeof nccl.why, "libnccl.so.2 lacks an entry point");
}
static int nccl_ready(struct snug_err *err) {
    pthread_once(&nccl.once, nccl_load);
    if (nccl.ok) return SNUG_OK;
    return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                        "tensor parallel: cannot load NCCL (%s); install it (the CUDA toolkit "
                        "ships libnccl.so.2) and put it on the loader path",
                        nccl.why);
}

bool snug_cuda_tp_available(void) {
    return nccl_ready(NULL) == SNUG_OK;
}

static int nccl_fail(struct snug_err *err, const char *what, ncclResult_t r) {
    return snug_err_set(err, SNUG_ERR_INTERNAL, "tensor parallel: %s: %s", what,
                        nccl.error_string(r));
}

int snug_cuda_comm_init_all(struct snug_cuda_comm **comms, int32_t n_ranks, const int *devices,
                            struct snug_err *err) {
    if (n_ranks < 1 || n_ranks > SNUG_TP_MAX_RANKS)
        return snug_err_set(err, SNUG_ERR_INVALID, "tensor parallel: %d ranks (1..%d)",
                            (int)n_ranks, SNUG_TP_MAX_RANKS);
    int rc = nccl_ready(err);
    if (rc) return rc;
    ncclComm_t raw[SNUG_TP_MAX_RANKS];
    ncclResult_t r = nccl.comm_init_all(raw, n_ranks, devices);
    if (r != ncclSuccess) return nccl_fail(err, "ncclCommInitAll", r);
    for (int32_t i = 0; i < n_ranks; i++) {
        comms[i] = snug_calloc(1, sizeof *comms[i]);
        if (!comms[i]) {
            for (int32_t j = 0; j < n_ranks; j++) {
                if (j < i) snug_free(comms[j]);
                nccl.comm_destroy(raw[j]);
            }
            return snug_err_set(err, SNUG_ERR_NOMEM, "tensor parallel: out of memory");
        }
        comms[i]->comm = raw[i];
        comms[i]->rank = i;
        comms[i]->size = n_ranks;
    }
    return SNUG_OK;
}

void snug_cuda_comm_free(struct snug_cuda_comm *comm) {
    if (!comm) return;
    nccl.comm_destroy(comm->comm);
    snug_free(comm);
}

int snug_cuda_comm_all_reduce(struct snug_cuda_comm *comm, float *x, int64_t n, void *stream,
                              struct snug_err *err) {
    ncclResult_t r =
        nccl.all_reduce(x, x, (size_t)n, ncclFloat32, ncclSum, comm->comm, (cudaStream_t)stream);
    return r == ncclSuccess ? SNUG_OK : nccl_fail(err, "ncclAllReduce", r);
}

int snug_cuda_comm_group(bool start, struct snug_err *err) {
    int rc = nccl_ready(err);
    if (rc) return rc;
    ncclResult_t r = start ? nccl.group_start() : nccl.group_end();
    return r == ncclSuccess ? SNUG_OK
                            : nccl_fail(err, start ? "ncclGroupStart" : "ncclGroupEnd", r);
}

#else /* built without NCCL */

struct snug_cuda_comm {
    int32_t rank, size;
};

bool snug_cuda_tp_available(void) {
    return false;
}
static int no_nccl(struct snug_err *err) {
    return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                        "tensor parallel: this libsnug_cuda.so was built without NCCL (CMake "
                        "found no nccl.h in the CUDA toolkit)");
}
int snug_cuda_comm_init_all(struct snug_cuda_comm **comms, int32_t n_ranks, const int *devices,
                            struct snug_err *err) {
    (void)comms, (void)n_ranks, (void)devices;
    return no_nccl(err);
}
void snug_cuda_comm_free(struct snug_cuda_comm *comm) {
    snug_free(comm);
}
int snug_cuda_comm_all_reduce(struct snug_cuda_comm *comm, float *x, int64_t n, void *stream,
                              struct snug_err *err) {
    (void)comm, (void)x, (void)n, (void)stream;
    return no_nccl(err);
}
int snug_cuda_comm_group(bool start, struct snug_err *err) {
    (void)start;
    return no_nccl(err);
}
#endif

int32_t snug_cuda_comm_rank(const struct snug_cuda_comm *comm) {
    return comm->rank;
}
int32_t snug_cuda_comm_size(const struct snug_cuda_comm *comm) {
    return comm->size;
}
