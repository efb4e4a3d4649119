/* fake_device.c — a test stand-in for libsnug_cuda.so (libsnug_fakedev.so, loaded with
 * SNUG_CUDA_LIB=PATH and `--backend cuda`): the CPU backend's instances, reporting their memory
 * as not the host's, so the engine takes every device path — positions and 3-D positions
 * uploaded, image rows uploaded into the step's input, logits staged and downloaded, the
 * contexts marked device, the prefix cache's checkpoints copied through upload/download — with
 * the CPU ops' numbers. It lets CPU-only CI check those paths against the plain CPU backend
 * (tests/py/test_vision_fixture.py, test_server_vision.py, test_prefix_device.py,
 * test_prefix_mtp cuda); the kernels themselves are checked on a GPU (tests/device/). Invariant:
 * nothing but the host_memory flag and the module's name differ from the CPU module. Test-only:
 * never installed. Read next: src/backend/backend.h (the module), src/backend/loader.c. */
#include "backend/backend.h"

static int fake_open(struct snug_be **out, const struct snug_gguf *g,
                     const struct snug_backend_limits *lim, struct snug_pool *pool,
                     struct snug_err *err) {
    int rc = snug_backend_cpu_module()->open(out, g, lim, pool, err);
    if (rc == SNUG_OK) (*out)->host_memory = false;
    return rc;
}

/* A card of 16 GiB, all free: the plan's device budget when no --vram-budget is given. */
static int fake_mem_info(size_t *free_b, size_t *total_b, struct snug_err *err) {
    (void)err;
    *free_b = *total_b = (size_t)16 << 30;
    return SNUG_OK;
}

static const struct snug_backend_module FAKE = {
    .abi = SNUG_BACKEND_ABI,
    .name = "cuda (test stand-in: the CPU ops behind device paths)",
    .open = fake_open,
    .mem_info = fake_mem_info,
};

const struct snug_backend_module *snug_cuda_backend_module(void);
const struct snug_backend_module *snug_cuda_backend_module(void) {
    return &FAKE;
}
