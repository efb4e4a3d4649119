/* backend.h — the one small interface every compute backend implements (design.md: "backends
 * are interchangeable behind one small interface"): the ops the architectures call, over
 * activation buffers that live in the backend's own memory (host for the CPU, device for CUDA).
 * The architecture forward (src/arch/qwen35.c, qwen35moe.c) calls only these; it never touches
 * an activation with the host CPU, so a forward runs unchanged on any backend.
 * Invariant: every op of struct snug_backend_ops is implemented by every backend (a missing
 * one is a build error: each backend fills the table with designated initialisers and the
 * CUDA build checks it). Ops never allocate; errors are sticky in `status`/`err` (the first
 * one wins) and the caller checks them after the step (snug_backend_finish).
 * Read next: backend_cpu.c (wraps src/backend/cpu/ops.h), cuda/cuda_backend.c (wraps
 * cuda/cuda_ops.h), src/arch/qwen35.c (the caller).
 */
#ifndef SNUG_BACKEND_H
#define SNUG_BACKEND_H

#include "backend/cpu/ops.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "snug.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct snug_be;

/* Pointers below (x, y, w, state, kv views, idx...) are in the backend's memory unless the
 * parameter is named host_*. Semantics: ops.h, except the additions documented here. */
struct snug_backend_ops {
    const char *name;
    /* The backend's copy of a weight tensor (byte offset `off` into its data). */
    const void *(*weight)(struct snug_be *be, const struct snug_gguf_tensor *t, uint64_t off);
    void (*matmul)(struct snug_be *be, uint32_t type, const void *w, int64_t n_in, int64_t n_out,
                   const float *x, int64_t T, float *y, void *work);
    void (*rmsnorm)(struct snug_be *be, const float *x, const float *w, float eps, int64_t T,
                    int64_t n, float *y);
    void (*l2norm)(struct snug_be *be, float *x, int64_t rows, int64_t n, float eps);
    void (*rope_neox)(struct snug_be *be, float *x, int64_t T, int64_t n_heads, int64_t head_dim,
                      int64_t n_rot, const int32_t *pos, float base);
    void (*swiglu)(struct snug_be *be, const float *gate, const float *up, int64_t n, float *y);
    /* y[i] = x[i] · sigmoid(gate[i]) */
    void (*sigmoid_mul)(struct snug_be *be, const float *x, const float *gate, int64_t n, float *y);
    void (*gated_rmsnorm)(struct snug_be *be, const float *o, const float *z, const float *w,
                          float eps, int64_t T, int64_t Nv, int64_t dv, float *y);
    void (*conv_silu)(struct snug_be *be, const float *x, int64_t T, int64_t C, int64_t K,
                      const float *w, float *conv_state, float *y);
    void (*kv_store)(struct snug_be *be, struct snug_kv_view *kv, int64_t Hkv, int64_t D,
                     int64_t pos0, int64_t T, const float *k, const float *v);
    void (*attention)(struct snug_be *be, const struct snug_kv_view *kv, int64_t Hq, int64_t Hkv,
                      int64_t D, int64_t pos0, int64_t T, const float *q, float scale, float *out,
                      void *work);
    void (*delta_step)(struct snug_be *be, int64_t T, int64_t Nk, int64_t Nv, int64_t dk,
                       int64_t dv, const float *q, const float *k, const float *v, const float *g,
                       const float *beta, float *state, float *out);
    void (*delta_chunked)(struct snug_be *be, int64_t T, int64_t Nk, int64_t Nv, int64_t dk,
                          int64_t dv, const float *q, const float *k, const float *v,
                          const float *g, const float *beta, float *state, float *out, void *work);
    /* x[i] += y[i] */
    void (*add)(struct snug_be *be, float *x, const float *y, int64_t n);
    /* x[i] *= s */
    void (*scale)(struct snug_be *be, float *x, int64_t n, float s);
    /* DeltaNet gates, in place over [T][Nv]: beta = sigmoid(beta);
     * g = a[j] · softplus(g + dt[j]) (softplus linear above 20, as PyTorch). */
    void (*delta_gates)(struct snug_be *be, float *beta, float *g, const float *a, const float *dt,
                        int64_t T, int64_t Nv);
    /* rows × n floats: dst + r·dpitch ← src + r·spitch (pitches in floats). */
    void (*copy2d)(struct snug_be *be, float *dst, int64_t dpitch, const float *src, int64_t spitch,
                   int64_t n, int64_t rows);
    /* x[T][H] = rows ids[t] of the embedding table t (dequantised to f32). host_ids. */
    void (*embed)(struct snug_be *be, const struct snug_gguf_tensor *table,
                  const snug_token *host_ids, int64_t T, int64_t H, float *x);
    /* Copies between host memory and the backend's (synchronous). */
    void (*upload)(struct snug_be *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(struct snug_be *be, void *host_dst, const void *src, size_t bytes);
    /* dst[i][:] = src[idx[i]][:] for i < n (rows of H floats). */
    void (*gather_rows)(struct snug_be *be, float *dst, const float *src, const int32_t *idx,
                        int64_t n, int64_t H);
    /* MoE combine: y[t][:] = Σ_j w[t·k+j] · d[slot[t·k+j]][:] (j in order), t < T. */
    void (*moe_combine)(struct snug_be *be, float *y, const float *d, const int32_t *slot,
                        const float *w, int64_t T, int64_t k, int64_t H);
    /* MoE routing of T tokens over E experts, all in the backend's memory (no host round
     * trip): softmax of the router logits [T][E] in float32 (double sum), the k largest (ties to
     * the lower index), weights renormalised (selw[T·k]); then the T·k (token, choice) pairs
     * grouped by expert, in token order within an expert: order[s] = token of slot s,
     * slot[t·k+j] = the slot of (t, j), off[e] = the first slot of expert e (off[E] = T·k), and
     * the tile table of moe_matmul (snug_moe_tiles_len(T, E, k) ints). Scratch: sel [T·k] and
     * cnt [E]. Semantics: ops.h snug_op_moe_route. */
    void (*moe_route)(struct snug_be *be, const float *logits, int64_t T, int64_t E, int64_t k,
                      int32_t *sel, int32_t *cnt, float *selw, int32_t *order, int32_t *slot,
                      int32_t *off, int32_t *tiles);
    /* Expert products over the T·k rows that moe_route grouped for T tokens, k experts each:
     * y[s][:] = W_e · x[s][:] for every slot s of every expert e (off[e] <= s < off[e+1]); W_e
     * is the n_out × n_in matrix at w + e·expert_bytes (a slice of a 3-D *_exps tensor). off and
     * tiles as moe_route wrote them; work: snug_moe_matmul_work_bytes(T·k, n_in) bytes. */
    void (*moe_matmul)(struct snug_be *be, uint32_t type, const void *w, uint64_t expert_bytes,
                       int64_t n_in, int64_t n_out, int64_t E, int64_t T, int64_t k, const float *x,
                       const int32_t *off, const int32_t *tiles, float *y, void *work);
    /* y[t][:] += sigmoid(glogit[t]) · d[t][:] (the MoE shared expert's gate). */
    void (*add_gated)(struct snug_be *be, float *y, const float *d, const float *glogit, int64_t T,
                      int64_t H);
    /* bytes from src to dst, both in the backend's memory, queued in order with the ops
     * (recurrent-state snapshots and rollback, MTP hidden rows). */
    void (*copy)(struct snug_be *be, void *dst, const void *src, size_t bytes);
};

struct snug_be {
    const struct snug_backend_ops *ops;
    bool host_memory;       /* activations are plain host memory (the CPU backend) */
    struct snug_pool *pool; /* CPU: the thread pool (may be NULL) */
    void *impl;             /* the backend's own state */
    int status;             /* first error of the current step (SNUG_OK if none) */
    struct snug_err err;    /* its message */
};

/* The MoE tile table (moe_route → moe_matmul): tiles[0] = the number of tiles, then (expert,
 * first slot, rows) per tile, each tile at most SNUG_MOE_TILE slots of one expert. Its length
 * bounds the tiles: every expert's last tile may be partial, and there are never more tiles
 * than slots. */
#define SNUG_MOE_TILE 8
static inline int64_t snug_moe_tiles_len(int64_t T, int64_t E, int64_t k) {
    int64_t n = T * k, full = (n + SNUG_MOE_TILE - 1) / SNUG_MOE_TILE + E;
    return 1 + 3 * (n < full ? n : full);
}
/* Work bytes of moe_matmul over n_slots rows of n_in inputs (the rows rounded to int8 in blocks
 * of 32 with their scales, on a device backend; the CPU uses none). */
static inline size_t snug_moe_matmul_work_bytes(int64_t n_slots, int64_t n_in) {
    return (size_t)(n_slots * n_in) + (size_t)(n_slots * (n_in / 32)) * 8 + 1024;
}

/* The CPU backend over ops.h with thread pool `pool` (NULL: one thread). No allocation. */
void snug_backend_cpu_init(struct snug_be *be, struct snug_pool *pool);

/* Record an error (the first one of a step wins). Returns st. */
int snug_backend_fail(struct snug_be *be, int st, const char *fmt, ...);
/* After a step: SNUG_OK, or the first recorded error copied into err (and cleared). */
int snug_backend_finish(struct snug_be *be, struct snug_err *err);

/* ---- the CUDA backend (src/backend/cuda/cuda_backend.c) ------------------------------------
 * One object per context: a CUDA context (device 0, one stream), the weights uploaded once into
 * one device allocation per GGUF file (shared by every CUDA context of the same model,
 * refcounted: N server slots hold one copy), and one device allocation per planned arena (KV +
 * recurrent state, work, op scratch). Without nvcc at build time every function returns
 * SNUG_ERR_UNSUPPORTED ("built without CUDA"); without a GPU, open fails with the runtime's
 * reason. */
struct snug_kv;
struct snug_kv_shape;
struct snug_cuda_limits {
    const struct snug_kv_shape *kv_shape; /* the plan's KV/state shape (F16 or F32 cache) */
    size_t kv_bytes;                      /* snug_kv_bytes(kv_shape): the KV/state arena */
    size_t work_bytes;                    /* the plan's work arena (activations of a step) */
    size_t scratch_bytes;     /* the plan's op scratch (snug_plan.cuda_scratch_bytes); 0: size it
                               * from the file's tensors (tests that open the backend directly) */
    int32_t n_chunk;          /* tokens per step */
    int64_t n_embd;           /* H (embedding staging) */
    int64_t n_head, head_dim; /* attention scratch */
    /* speculative decoding (all 0/NULL without): n_snap recurrent-state snapshot slots
     * (snug_kv_snap_bytes, the plan's "state snapshots (mtp)"), the MTP block's one-layer
     * cache, and spec_bytes of device buffers for src/speculative (snug_spec_dev_bytes). */
    int32_t n_snap;
    const struct snug_kv_shape *mtp_kv_shape;
    size_t spec_bytes;
};
bool snug_backend_cuda_built(void);
/* Device op scratch (matmul bf16 tiles, split attention partials) for a model whose largest
 * matrix has max_n_in inputs and max_n_out outputs. */
size_t snug_backend_cuda_scratch_bytes(int64_t max_n_in, int64_t max_n_out, int64_t n_chunk,
                                       int64_t Hq, int64_t D);
int snug_backend_cuda_open(struct snug_be **out, const struct snug_gguf *g,
                           const struct snug_cuda_limits *lim, struct snug_err *err);
void snug_backend_cuda_close(struct snug_be *be);                   /* NULL is a no-op */
struct snug_kv *snug_backend_cuda_kv(struct snug_be *be);           /* device views */
struct snug_arena *snug_backend_cuda_work(struct snug_be *be);      /* over device memory */
struct snug_arena *snug_backend_cuda_host_work(struct snug_be *be); /* host */
int32_t *snug_backend_cuda_pos(struct snug_be *be);                 /* device [n_chunk] */
/* Speculative decoding (lim->n_snap > 0): the MTP block's cache (device views; its snapshot
 * slots are in snug_backend_cuda_kv's kv->snap) and the spec_bytes device block; NULL without. */
struct snug_kv *snug_backend_cuda_mtp_kv(struct snug_be *be);
void *snug_backend_cuda_spec_mem(struct snug_be *be);
/* Zero every recurrent state (a new sequence). */
void snug_backend_cuda_reset(struct snug_be *be);
/* Wait for the queued step; the first device or recorded error. */
int snug_backend_cuda_sync(struct snug_be *be, struct snug_err *err);
/* Device bytes taken by this backend (all its allocations) and cudaMemGetInfo. */
size_t snug_backend_cuda_bytes(const struct snug_be *be);
int snug_backend_cuda_mem_info(size_t *free_b, size_t *total_b, struct snug_err *err);

#endif /* SNUG_BACKEND_H */
