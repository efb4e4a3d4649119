/* loader.c — finds a backend's module: the CPU one is built in; the CUDA one lives in the shared
 * object libsnug_cuda.so (built beside `snug` when nvcc is found at configure time) and is
 * opened here, with dlopen, only the first time `--backend cuda` is asked — so a CPU run never
 * maps the CUDA runtime or cuBLAS. The only file outside src/backend/cuda/ that names the CUDA
 * backend's entry point. Search order: a copy linked into the process itself (the device test
 * programs link the CUDA code directly), $SNUG_CUDA_LIB (a debugging override: the path of the
 * library), the directory of the running executable (/proc/self/exe), the build directory.
 * Invariant: a module is returned only when its ABI matches these headers and every entry of
 * its ops table is filled; every failure names `--backend cuda` and what is missing; a CUDA
 * instance whose slot layout would outgrow its planned KV bytes is refused before it opens.
 * Read next: backend.h (the module and ops tables), cuda/cuda_backend.c (the entry point).
 */
#define _DEFAULT_SOURCE /* readlink, PATH_MAX */
#include "backend/backend.h"

#include "kv/kv.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUDA_LIB_NAME "libsnug_cuda.so"
#define CUDA_ENTRY    "snug_cuda_backend_module"

/* The entry point when the CUDA code is linked into the process (weak: absent otherwise). */
extern const struct snug_backend_module *snug_cuda_backend_module(void) __attribute__((weak));

typedef const struct snug_backend_module *(*entry_fn)(void);

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct snug_backend_module *g_cuda; /* loaded once, kept for the process */

/* The module's ABI and the CUDA instance's ops are checked at open (check_ops). */
static int check_module(const struct snug_backend_module *m, const char *where,
                        struct snug_err *err) {
    if (!m || m->abi != SNUG_BACKEND_ABI || !m->open || !m->mem_info)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "--backend cuda: %s was built from other snug headers (backend ABI %u, "
                            "this snug %u); rebuild it with this snug",
                            where, m ? m->abi : 0u, SNUG_BACKEND_ABI);
    return SNUG_OK;
}

/* dlopen one candidate path; SNUG_OK with *out set, or a message naming the path and why. */
static int try_path(const char *path, const struct snug_backend_module **out, bool *exists,
                    struct snug_err *err) {
    *exists = access(path, F_OK) == 0;
    if (!*exists) return SNUG_ERR_UNSUPPORTED;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "--backend cuda: cannot load %s: %s (the CUDA runtime and cuBLAS "
                            "libraries it links, libcudart and libcublas, must be installed and "
                            "on the loader path; or use --backend cpu)",
                            path, why ? why : "unknown error");
    }
    entry_fn fn;
    *(void **)&fn = dlsym(h, CUDA_ENTRY);
    if (!fn) {
        dlclose(h);
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "--backend cuda: %s has no entry point %s; it is not a snug CUDA "
                            "backend",
                            path, CUDA_ENTRY);
    }
    const struct snug_backend_module *m = fn();
    int rc = check_module(m, path, err);
    if (rc) {
        dlclose(h);
        return rc;
    }
    *out = m; /* the handle stays open for the life of the process */
    return SNUG_OK;
}

static int load_cuda(const struct snug_backend_module **out, struct snug_err *err) {
    if (snug_cuda_backend_module) { /* linked in */
        const struct snug_backend_module *m = snug_cuda_backend_module();
        int rc = check_module(m, "the linked CUDA backend", err);
        if (rc == SNUG_OK) *out = m;
        return rc;
    }
    bool exists = false;
    const char *env = getenv("SNUG_CUDA_LIB");
    if (env && *env) {
        int rc = try_path(env, out, &exists, err);
        if (rc == SNUG_OK || exists) return rc;
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "--backend cuda: SNUG_CUDA_LIB=%s: no such file", env);
    }
    char path[PATH_MAX + 32];
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(path, sizeof path, "%s/%s", exe, CUDA_LIB_NAME);
            int rc = try_path(path, out, &exists, err);
            if (rc == SNUG_OK || exists) return rc;
        }
    }
#ifdef SNUG_BUILD_DIR
    snprintf(path, sizeof path, "%s/%s", SNUG_BUILD_DIR, CUDA_LIB_NAME);
    int rc = try_path(path, out, &exists, err);
    if (rc == SNUG_OK || exists) return rc;
#endif
#ifdef SNUG_CUDA_BUILT
    return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                        "--backend cuda: %s was not found next to the snug executable%s%s; copy "
                        "it there (or point SNUG_CUDA_LIB at it), or use --backend cpu",
                        CUDA_LIB_NAME,
#ifdef SNUG_BUILD_DIR
                        " nor in the build directory ", SNUG_BUILD_DIR
#else
                        "", ""
#endif
    );
#else
    return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                        "--backend cuda: this snug was built without CUDA (nvcc was not found at "
                        "configure time, so there is no %s); rebuild on a machine with the CUDA "
                        "toolkit, or use --backend cpu",
                        CUDA_LIB_NAME);
#endif
}

int snug_backend_module_get(enum snug_backend kind, const struct snug_backend_module **out,
                            struct snug_err *err) {
    *out = NULL;
    if (kind == SNUG_BACKEND_CPU) {
        *out = snug_backend_cpu_module();
        return SNUG_OK;
    }
    if (kind != SNUG_BACKEND_CUDA)
        return snug_err_set(err, SNUG_ERR_INVALID, "backend %d: expected cpu or cuda", (int)kind);
    pthread_mutex_lock(&g_lock);
    int rc = SNUG_OK;
    if (!g_cuda) rc = load_cuda(&g_cuda, err);
    *out = g_cuda;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Every entry of an instance's table up to `bytes` must be filled (a library built from a
 * partial table); the optional entries after it may be NULL. */
static bool ops_complete(const struct snug_backend_ops *o) {
    const void *const *p = (const void *const *)&o->weight;
    const void *const *end = (const void *const *)(&o->bytes + 1);
    for (; p < end; p++)
        if (!*p) return false;
    return true;
}

/* A device slot is laid out by snug_kv_device_bytes (cuda_backend.c layout_kv) inside the
 * planned bytes: refuse, before any device memory is taken, limits whose KV or MTP cache would
 * need more than the plan gave them. */
static int check_kv_plan(const struct snug_backend_limits *lim, struct snug_err *err) {
    const struct snug_kv_shape *sh[2] = {lim->kv_shape, lim->mtp_kv_shape};
    for (int i = 0; i < 2; i++) {
        if (!sh[i]) continue;
        size_t need = snug_kv_device_bytes(sh[i]);
        size_t planned = i == 0 ? lim->kv_bytes : snug_kv_bytes(sh[i]);
        if (need > planned)
            return snug_err_set(err, SNUG_ERR_INTERNAL,
                                "--backend cuda: the %s of a slot (context %d) needs %zu bytes "
                                "on the device but the memory plan has %zu; the plan "
                                "under-counts this shape (src/kv/kv.c snug_kv_bytes)",
                                i == 0 ? "KV cache + recurrent state" : "MTP block's KV cache",
                                sh[i]->n_ctx, need, planned);
    }
    return SNUG_OK;
}

int snug_backend_open(enum snug_backend kind, struct snug_be **out, const struct snug_gguf *g,
                      const struct snug_backend_limits *lim, struct snug_pool *pool,
                      struct snug_err *err) {
    *out = NULL;
    if (kind == SNUG_BACKEND_CUDA) {
        int krc = check_kv_plan(lim, err);
        if (krc) return krc;
    }
    const struct snug_backend_module *m;
    int rc = snug_backend_module_get(kind, &m, err);
    if (rc) return rc;
    rc = m->open(out, g, lim, pool, err);
    if (rc) {
        if (kind == SNUG_BACKEND_CUDA) snug_err_prefix(err, "--backend cuda");
        return rc;
    }
    if (!ops_complete((*out)->ops)) {
        snug_backend_close(*out);
        *out = NULL;
        return snug_err_set(err, SNUG_ERR_INTERNAL,
                            "backend %s: its ops table has empty entries (built from other "
                            "headers?)",
                            m->name);
    }
    return SNUG_OK;
}

void snug_backend_close(struct snug_be *be) {
    if (be) be->ops->close(be);
}
