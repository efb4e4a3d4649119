/* backend.h — the one small interface every compute backend implements: the ops the
 * architectures call, over activation buffers that live in the backend's own memory (host for
 * the CPU, device for CUDA), and the memory and lifecycle of a backend instance (open/close,
 * the per-slot KV cache + recurrent state + snapshots, the work arena, reset, snapshot/restore,
 * host<->device copies, sync, bytes held). The architecture forward (src/arch/qwen35.c,
 * qwen35moe.c) calls only the ops; contexts call only the lifecycle entries, so no file outside
 * src/backend/cuda/ names a CUDA function. A backend is reached through its module
 * (struct snug_backend_module): the CPU one is built in, the CUDA one is the shared object
 * libsnug_cuda.so that loader.c opens (dlopen) only when `--backend cuda` is asked.
 * Invariant: every entry of struct snug_backend_ops is implemented by every backend (each fills
 * the table with designated initialisers; the loader checks the table). Ops never allocate;
 * errors are sticky in `status`/`err` (the first one wins) and the caller checks them after the
 * step (snug_backend_finish, or the sync entry).
 * Read next: backend_cpu.c (wraps src/backend/cpu/ops.h), loader.c, cuda/cuda_backend.c (wraps
 * cuda/cuda_ops.h), src/arch/qwen35.c (the caller).
 */
#ifndef SNUG_BACKEND_H
#define SNUG_BACKEND_H

#include "kv/kv_view.h"
#include "core/core.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "snug.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most ranks of tensor parallelism (the plan's split, src/plan/shard.h; the CUDA
 * communicators, src/backend/cuda/cuda_tp.c). */
#define SNUG_TP_MAX_RANKS 16
/* The most rotary pairs (n_rot / 2) of the interleaved M-RoPE op (rope_mrope, every backend). */
#define SNUG_ROPE_MAX_PAIRS 256

struct snug_be;

/* One run of a batched step for the multi-run ops (conv_silu_runs, delta_decode_runs). */
struct snug_be_run {
    int64_t row0, T;     /* the run's rows of the step */
    float *state;        /* its conv state or DeltaNet state */
    float *snap;         /* delta_decode_runs: NULL, or its rollback points */
    int64_t snap_stride; /* floats between consecutive rollback points */
};

/* Pointers below (x, y, w, state, kv views, idx...) are in the backend's memory unless the
 * parameter is named host_*. Semantics: ops.h, except the additions documented here. */
struct snug_backend_ops {
    const char *name;
    /* The backend's copy of a weight tensor (byte offset `off` into its data). */
    const void *(*weight)(struct snug_be *be, const struct snug_gguf_tensor *t, uint64_t off);
    void (*matmul)(struct snug_be *be, uint32_t type, const void *w, int64_t n_in, int64_t n_out,
                   const float *x, int64_t T, float *y, void *work);
    /* The products whose outputs feed discontinuous choices (the MoE router and the shared
     * expert's gate, the DeltaNet's β and α): y = W·x, and y2 = W2·x when w2 is not NULL (a
     * second matrix of the same type and n_in). A device backend keeps x in f32 here (rounding
     * it would flip routing choices on near ties) and may run both in one launch; the CPU's is
     * its matmul, once per matrix (its matmul is the reference). */
    void (*matmul_precise)(struct snug_be *be, uint32_t type, const void *w, int64_t n_out,
                           const void *w2, int64_t n_out2, int64_t n_in, const float *x, int64_t T,
                           float *y, float *y2, void *work);
    /* Two ordinary products of one x: y = W·x and y2 = W2·x (W2 of the same type and n_in as
     * W; the FFN's and the shared expert's gate and up). A device backend may run both in one
     * launch over one rounding of x; the CPU's is its matmul, once per matrix. */
    void (*matmul_pair)(struct snug_be *be, uint32_t type, const void *w, int64_t n_out,
                        const void *w2, int64_t n_out2, int64_t n_in, const float *x, int64_t T,
                        float *y, float *y2, void *work);
    void (*rmsnorm)(struct snug_be *be, const float *x, const float *w, float eps, int64_t T,
                    int64_t n, float *y);
    void (*l2norm)(struct snug_be *be, float *x, int64_t rows, int64_t n, float eps);
    void (*rope_neox)(struct snug_be *be, float *x, int64_t T, int64_t n_heads, int64_t head_dim,
                      int64_t n_rot, const int32_t *pos, float base);
    /* The same rotation with three positions per row (multimodal rows: images, and text after
     * them): pos3 [T][3] = (t, h, w) in the backend's memory, interleaved M-RoPE over sections
     * (the GGUF's rope.dimension_sections). Semantics: ops.h snug_op_rope_mrope. */
    void (*rope_mrope)(struct snug_be *be, float *x, int64_t T, int64_t n_heads, int64_t head_dim,
                       int64_t n_rot, const int32_t *pos3, const uint32_t sections[3], float base);
    void (*swiglu)(struct snug_be *be, const float *gate, const float *up, int64_t n, float *y);
    /* y[i] = x[i] · sigmoid(gate[i]) */
    void (*sigmoid_mul)(struct snug_be *be, const float *x, const float *gate, int64_t n, float *y);
    void (*gated_rmsnorm)(struct snug_be *be, const float *o, const float *z, const float *w,
                          float eps, int64_t T, int64_t Nv, int64_t dv, float *y);
    void (*conv_silu)(struct snug_be *be, const float *x, int64_t T, int64_t C, int64_t K,
                      const float *w, float *conv_state, float *y);
    /* kv_store and attention: pos_be is NULL or the T rows' positions in the backend's memory
     * (pos_be[0] == pos0, consecutive): a device backend then reads the first position there at
     * run time, so a recorded step (step_begin) replays at a later position unchanged. */
    void (*kv_store)(struct snug_be *be, struct snug_kv_view *kv, int64_t Hkv, int64_t D,
                     int64_t pos0, const int32_t *pos_be, int64_t T, const float *k,
                     const float *v);
    void (*attention)(struct snug_be *be, const struct snug_kv_view *kv, int64_t Hq, int64_t Hkv,
                      int64_t D, int64_t pos0, const int32_t *pos_be, int64_t T, const float *q,
                      float scale, float *out, void *work);
    void (*delta_step)(struct snug_be *be, int64_t T, int64_t Nk, int64_t Nv, int64_t dk,
                       int64_t dv, const float *q, const float *k, const float *v, const float *g,
                       const float *beta, float *state, float *out);
    void (*delta_chunked)(struct snug_be *be, int64_t T, int64_t Nk, int64_t Nv, int64_t dk,
                          int64_t dv, const float *q, const float *k, const float *v,
                          const float *g, const float *beta, float *state, float *out, void *work);
    /* x[i] += y[i] */
    void (*add)(struct snug_be *be, float *x, const float *y, int64_t n);
    /* The residual step between blocks, fused: x[T][n] += y, then xn = rmsnorm(x) · w (the same
     * numbers as add followed by rmsnorm). */
    void (*add_rmsnorm)(struct snug_be *be, float *x, const float *y, const float *w, float eps,
                        int64_t T, int64_t n, float *xn);
    /* x[i] *= s */
    void (*scale)(struct snug_be *be, float *x, int64_t n, float s);
    /* DeltaNet gates, in place over [T][Nv]: beta = sigmoid(beta);
     * g = a[j] · softplus(g + dt[j]) (softplus linear above 20, as PyTorch). */
    void (*delta_gates)(struct snug_be *be, float *beta, float *g, const float *a, const float *dt,
                        int64_t T, int64_t Nv);
    /* rows × n floats: dst + r·dpitch ← src + r·spitch (pitches in floats). */
    void (*copy2d)(struct snug_be *be, float *dst, int64_t dpitch, const float *src, int64_t spitch,
                   int64_t n, int64_t rows);
    /* x[T][H] = rows ids[t] of the embedding table t (dequantised to f32). host_ids; ids_be NULL
     * or the same ids in the backend's memory (a device backend then gathers the rows there).
     * A device backend also takes host_ids NULL with ids_be for T <= 8 (ids a device op wrote:
     * an MTP draft's argmax), downloading them where it cannot gather on the device. */
    void (*embed)(struct snug_be *be, const struct snug_gguf_tensor *table,
                  const snug_token *host_ids, const int32_t *ids_be, int64_t T, int64_t H,
                  float *x);
    /* Copies between host memory and the backend's (synchronous). */
    void (*upload)(struct snug_be *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(struct snug_be *be, void *host_dst, const void *src, size_t bytes);
    /* A step's result to the host: bytes from src to host_dst, there when the step's forward
     * has returned (at once, outside a recorded step; a recorded step copies after its work,
     * step_end / step_begin). src must not be written by a later op of the same step. */
    void (*read_back)(struct snug_be *be, void *host_dst, const void *src, size_t bytes);
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
     * tiles as moe_route wrote them; work: snug_moe_matmul_work_bytes(T·k, n_in) bytes.
     * x_token (T == 1 only): x is the one token's row [n_in] itself, which each of its k slots
     * reads (a decode step's gate and up products need no gathered copies). */
    void (*moe_matmul)(struct snug_be *be, uint32_t type, const void *w, uint64_t expert_bytes,
                       int64_t n_in, int64_t n_out, int64_t E, int64_t T, int64_t k, const float *x,
                       bool x_token, const int32_t *off, const int32_t *tiles, float *y,
                       void *work);
    /* y[t][:] += sigmoid(glogit[t]) · d[t][:] (the MoE shared expert's gate). */
    void (*add_gated)(struct snug_be *be, float *y, const float *d, const float *glogit, int64_t T,
                      int64_t H);
    /* bytes from src to dst, both in the backend's memory, queued in order with the ops
     * (recurrent-state snapshots and rollback, MTP hidden rows). */
    void (*copy)(struct snug_be *be, void *dst, const void *src, size_t bytes);
    /* out[r] = the lowest index of the largest of x[r][0..n) for r < rows, all in the backend's
     * memory (an MTP draft's token without reading its logits back). The rule of a scan
     * `if (x[i] > x[best]) best = i` from best = 0: a NaN never wins, except at index 0. */
    void (*argmax)(struct snug_be *be, const float *x, int64_t rows, int64_t n, int32_t *out);
    /* ---- encoder ops (the vision tower, src/vision/vision_backend.c): semantics ops.h
     * snug_op_layernorm, snug_op_bias_act (act: enum snug_act), snug_op_rope_angles (ang
     * [T][head_dim/2] in the backend's memory), snug_op_attention_full (work: the CPU's
     * snug_op_attention_full_work_bytes for one thread; unused by CUDA). */
    void (*layernorm)(struct snug_be *be, const float *x, const float *w, const float *b, float eps,
                      int64_t T, int64_t n, float *y);
    void (*bias_act)(struct snug_be *be, float *y, const float *b, int64_t T, int64_t n, int act);
    void (*rope_angles)(struct snug_be *be, float *x, int64_t stride, int64_t T, int64_t n_heads,
                        int64_t head_dim, const float *ang);
    void (*attention_full)(struct snug_be *be, const float *q, const float *k, const float *v,
                           int64_t stride, int64_t T, int64_t n_heads, int64_t head_dim,
                           float scale, float *out, void *work);

    /* ---- memory and lifecycle of an instance (opened by its module's open) ---------------- */
    /* Free everything the instance holds (waits for queued work first). */
    void (*close)(struct snug_be *be);
    /* Slot s's caches (0 <= s < n_slots): attention views + recurrent states + snapshot slots,
     * in the backend's memory. */
    struct snug_kv *(*slot_kv)(struct snug_be *be, int32_t slot);
    /* Speculative decoding (limits n_snap > 0): slot s's MTP block cache and its spec_bytes
     * block of device buffers; NULL when the backend keeps them on the host (the CPU: the
     * speculative module allocates its own) or without speculation. */
    struct snug_kv *(*slot_mtp_kv)(struct snug_be *be, int32_t slot);
    void *(*slot_spec_mem)(struct snug_be *be, int32_t slot);
    /* The one work arena (activations of a step) and, for a device backend, a host arena for
     * the little host-side work (MoE routing, hook copies); host_work NULL on the CPU. */
    struct snug_arena *(*work)(struct snug_be *be);
    struct snug_arena *(*host_work)(struct snug_be *be);
    /* A step's inputs in the backend's memory: [2][n_chunk] int32, the rows' positions then
     * their token ids (NULL: the step's host arrays are read directly, a host-memory backend). */
    int32_t *(*positions)(struct snug_be *be);
    /* Zero slot s's recurrent states (a new sequence; attention rows need no clearing). */
    void (*reset_slot)(struct snug_be *be, int32_t slot);
    /* Copy every recurrent state of slot s into its snapshot t (save) or back (restore);
     * queued in order with the ops. */
    void (*snapshot)(struct snug_be *be, int32_t slot, int32_t t, bool save);
    /* Wait for the queued work; the first device or recorded error (then cleared). */
    int (*sync)(struct snug_be *be, struct snug_err *err);
    /* Bytes the instance holds in its own memory (device bytes for CUDA, shared weights
     * included; host arenas for the CPU). */
    size_t (*bytes)(const struct snug_be *be);

    /* ---- optional (after `bytes`: the loader's completeness check stops there) ------------ */
    /* Tensor parallelism (src/plan/shard.h): x[0..n) becomes the sum over every rank of its x,
     * added in rank order so every rank gets the same bits; called by every rank's forward at
     * the same points (after each mixer's and each FFN's output projection). NULL on an
     * instance that is not one rank of several: the forward then skips it (one device's path
     * unchanged). The CPU emulation: src/tp/tp_cpu.c; NCCL: docs/tensor-parallel.md. */
    void (*all_reduce)(struct snug_be *be, float *x, int64_t n);
    /* Recorded steps (CUDA graphs): a step whose launches depend only on `key` (shapes and
     * addresses; the caller hashes them) and on data in the backend's memory (positions, ids,
     * states) is recorded once and then replayed as one launch. step_begin(be, key, host_base)
     * answers SNUG_STEP_EAGER (run the forward as usual), SNUG_STEP_RECORDING (run the forward
     * now: it is recorded; then call step_end) or SNUG_STEP_REPLAYED (the step ran, read-backs
     * included: skip the forward). step_end runs what was recorded and returns true, or false
     * when the recording failed (the forward asked for something a replay cannot repeat: a host
     * copy in the middle of the step, say): nothing ran, and the caller runs the forward again
     * eagerly. A recorded step's read_back destinations are kept relative to host_base (the
     * step's logits), so a replay writes into the host_base it is given. NULL on backends
     * without recorded steps (the forward always runs). */
    int (*step_begin)(struct snug_be *be, uint64_t key, void *host_base);
    bool (*step_end)(struct snug_be *be);
    /* Decode rows' DeltaNet recurrence fused with its preparation, over the T rows of one run
     * (token after token): qkv [T][2·Nk·dk + Nv·dv] the conv output [q | k | v]; q and k
     * L2-normed per head (eps), q scaled by qscale; β = sigmoid(b), g = a·softplus(α + dt) from
     * the raw projections b, alpha [T][Nv]; then delta_step's update of state and out [T][Nv·dv].
     * snap (NULL: none): the state after row t also goes to snap + t·snap_stride floats (a
     * verification's rollback points, kv.h). The numbers of copy2d, l2norm, scale, delta_gates
     * and delta_step in sequence, to float rounding. NULL: the forward runs those ops. */
    void (*delta_decode)(struct snug_be *be, int64_t T, int64_t Nk, int64_t Nv, int64_t dk,
                         int64_t dv, const float *qkv, const float *b, const float *alpha,
                         const float *a, const float *dt, float qscale, float eps, float *state,
                         float *out, float *snap, int64_t snap_stride);
    /* conv_silu and delta_decode for the n runs of a batched step at once (the slots' decode
     * rows: one launch on a device instead of one per run): run i owns rows [row0, row0 + T)
     * of the step's x / qkv, b, alpha, y / out and its own state (and, delta_decode_runs,
     * rollback points snap, as delta_decode). The same numbers as one call per run. NULL: the
     * forward calls the per-run op. */
    void (*conv_silu_runs)(struct snug_be *be, int32_t n, const struct snug_be_run *runs,
                           const float *x, int64_t C, int64_t K, const float *w, float *y);
    void (*delta_decode_runs)(struct snug_be *be, int32_t n, const struct snug_be_run *runs,
                              int64_t Nk, int64_t Nv, int64_t dk, int64_t dv, const float *qkv,
                              const float *b, const float *alpha, const float *a, const float *dt,
                              float qscale, float eps, float *out);
};
enum { SNUG_STEP_EAGER = 0, SNUG_STEP_RECORDING = 1, SNUG_STEP_REPLAYED = 2 };

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

/* ---- backend modules and instances ----------------------------------------------------------
 * A module opens instances; an instance holds the buffers the memory plan (src/plan) sizes:
 * n_slots sequence slots (each its own attention KV + recurrent state + n_snap rollback
 * snapshots, and on CUDA its MTP cache and draft buffers), one work arena, one op scratch (CUDA),
 * one position table — and on CUDA the weights, uploaded once per GGUF file and shared,
 * refcounted, by every instance of the same model, and on the host its embedding staging and
 * host work arena (snug_backend_plan_stage_bytes, snug_backend_plan_host_work_bytes). */
enum snug_backend { SNUG_BACKEND_CPU = 0, SNUG_BACKEND_CUDA = 1 };

struct snug_kv;
struct snug_kv_shape;
struct snug_backend_limits {
    const struct snug_kv_shape *kv_shape; /* one slot's KV/state shape (the plan's) */
    size_t kv_bytes;                      /* snug_kv_bytes(kv_shape): one slot's arena */
    int32_t n_slots;                      /* sequence slots (0 means 1) */
    size_t work_bytes;                    /* the plan's work arena (activations of a step) */
    size_t scratch_bytes;     /* CUDA: the plan's op scratch (snug_plan.cuda_scratch_bytes);
                               * 0: size it from the file's tensors (tests that open the
                               * backend directly) */
    size_t host_work_bytes;   /* device backends: the plan's host work arena
                               * (snug_backend_plan_host_work_bytes); 0: none (an instance
                               * whose forward never asks for one: the vision tower's) */
    int32_t n_chunk;          /* tokens per step */
    int64_t n_embd;           /* H (embedding staging) */
    int64_t n_head, head_dim; /* attention scratch */
    /* speculative decoding (all 0/NULL without): n_snap recurrent-state snapshots per slot
     * (snug_kv_snap_bytes, the plan's "state snapshots (mtp)"); CUDA also: each slot's MTP
     * block cache and spec_bytes of device buffers for src/speculative (snug_spec_dev_bytes). */
    int32_t n_snap;
    const struct snug_kv_shape *mtp_kv_shape;
    size_t spec_bytes;
    bool profile; /* CUDA: time every op (each waited for), the table to stderr at close */
};

/* Bumped whenever struct snug_backend_ops, snug_be, snug_backend_limits or the module change:
 * the loader refuses a libsnug_cuda.so built from other headers. */
#define SNUG_BACKEND_ABI 9u

struct snug_backend_module {
    uint32_t abi; /* SNUG_BACKEND_ABI of the headers it was built with */
    const char *name;
    /* Open an instance over the model's file g (weights), sized by lim. pool: the CPU
     * backend's thread pool (borrowed; ignored by CUDA). */
    int (*open)(struct snug_be **out, const struct snug_gguf *g,
                const struct snug_backend_limits *lim, struct snug_pool *pool,
                struct snug_err *err);
    /* Device memory free / total (CUDA: cudaMemGetInfo); SNUG_ERR_UNSUPPORTED on the CPU. */
    int (*mem_info)(size_t *free_b, size_t *total_b, struct snug_err *err);
};

/* The CPU module (built in). */
const struct snug_backend_module *snug_backend_cpu_module(void);

/* The module of a backend (loader.c): the CPU one at once; CUDA the first time it is asked,
 * from libsnug_cuda.so (linked into the process, e.g. the device tests; else dlopen'ed from
 * $SNUG_CUDA_LIB when set (a debug override), then beside the running executable, then the
 * build directory). SNUG_ERR_UNSUPPORTED with a message naming `--backend cuda` and what is
 * missing (the library, or the CUDA runtime it needs). Thread-safe. */
int snug_backend_module_get(enum snug_backend kind, const struct snug_backend_module **out,
                            struct snug_err *err);
/* Open an instance of a backend (module_get + open). */
int snug_backend_open(enum snug_backend kind, struct snug_be **out, const struct snug_gguf *g,
                      const struct snug_backend_limits *lim, struct snug_pool *pool,
                      struct snug_err *err);
/* Close an instance (NULL is a no-op). */
void snug_backend_close(struct snug_be *be);

/* Host memory a device backend instance holds besides its device buffers (the plan's host
 * items for `--backend cuda`; src/backend/cuda/cuda_backend.c allocates exactly these):
 * - the embedding staging: a step's token rows dequantised on the host from the mapped table
 *   before their upload, [n_chunk][n_embd] f32; */
static inline size_t snug_backend_plan_stage_bytes(int64_t n_chunk, int64_t n_embd) {
    return (size_t)(n_chunk * n_embd) * sizeof(float);
}
/* - the host work arena (host_work above), reset at every step: a layer hook's copy of the
 *   step's hidden rows (n_chunk × n_embd f32, src/arch/qwen35.c host_view) and, with n_expert
 *   experts, the expert offsets moe_matmul downloads for the types without a grouped kernel
 *   (n_expert + 1 int32 for each of an FFN's three expert products), in 64-byte aligned pieces. */
static inline size_t snug_backend_plan_host_work_bytes(int64_t n_chunk, int64_t n_embd,
                                                       int64_t n_expert) {
    size_t rows = SNUG_ALIGN_UP((size_t)(n_chunk * n_embd) * sizeof(float), (size_t)64);
    size_t offs = SNUG_ALIGN_UP((size_t)(n_expert + 1) * sizeof(int32_t), (size_t)64);
    return rows + (n_expert > 0 ? 3 * offs : 0);
}

/* A device instance's copy of a step's inputs, positions then token ids, [2][n_chunk] int32
 * (the plan's "step inputs (device)"; cuda_backend.c allocates n_chunk · 8 bytes). */
static inline size_t snug_backend_plan_step_input_bytes(int64_t n_chunk) {
    return (size_t)n_chunk * 2 * sizeof(int32_t);
}

/* The CUDA op scratch (matmul bf16 tiles, split attention partials) for a model whose largest
 * matrix has max_n_in inputs and max_n_out outputs: a pure formula (backend_plan.c) shared by
 * the memory plan and the CUDA backend, so planning needs no GPU. */
size_t snug_backend_plan_cuda_scratch(int64_t max_n_in, int64_t max_n_out, int64_t n_chunk,
                                      int64_t Hq, int64_t D);

#endif /* SNUG_BACKEND_H */
