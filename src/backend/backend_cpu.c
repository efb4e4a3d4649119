/* backend_cpu.c — the CPU backend behind struct snug_backend_ops: thin wrappers over the ops of
 * src/backend/cpu/ops.h (the prompt-sized element-wise ones, residual add, attention gate, MoE
 * combine, thread over the pool there) plus the small ones the architectures used to do inline
 * (scale, DeltaNet gates, strided copies, MoE gather). Activations
 * are host memory; weights are the GGUF mapping itself. An opened instance (the CPU module's
 * open) owns the slots' caches (src/kv, one arena each) and the one work arena; the ops-only
 * form (snug_backend_cpu_init) owns nothing. Also the sticky-error helpers every backend shares.
 * Invariant: ops never allocate; results identical to calling ops.h directly.
 * Read next: backend.h (the interface), cuda/cuda_backend.c (the other implementation).
 */
#include "backend/backend.h"

#include "backend/cpu/ops.h"
#include "backend/cpu/ops_util.h"
#include "kv/kv.h"

#include "quant/quant.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int snug_backend_fail(struct snug_be *be, int st, const char *fmt, ...) {
    if (be->status != SNUG_OK) return st;
    va_list ap;
    va_start(ap, fmt);
    char msg[sizeof be->err.msg];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    be->status = st;
    snug_err_set(&be->err, st, "%s", msg);
    return st;
}

int snug_backend_finish(struct snug_be *be, struct snug_err *err) {
    int st = be->status;
    if (st == SNUG_OK) return SNUG_OK;
    be->status = SNUG_OK;
    return snug_err_set(err, st, "%s", be->err.msg);
}

static const void *cpu_weight(struct snug_be *be, const struct snug_gguf_tensor *t, uint64_t off) {
    return (const uint8_t *)t->data + off;
}
static void cpu_matmul(struct snug_be *be, uint32_t type, const void *w, int64_t n_in,
                       int64_t n_out, const float *x, int64_t T, float *y, void *work) {
    snug_op_matmul(be->pool, type, w, n_in, n_out, x, T, y, work);
}
static void cpu_rmsnorm(struct snug_be *be, const float *x, const float *w, float eps, int64_t T,
                        int64_t n, float *y) {
    snug_op_rmsnorm(be->pool, x, w, eps, T, n, y);
}
static void cpu_l2norm(struct snug_be *be, float *x, int64_t rows, int64_t n, float eps) {
    snug_op_l2norm(be->pool, x, rows, n, eps);
}
static void cpu_rope(struct snug_be *be, float *x, int64_t T, int64_t nh, int64_t hd, int64_t n_rot,
                     const int32_t *pos, float base) {
    snug_op_rope_neox(be->pool, x, T, nh, hd, n_rot, pos, base);
}
static void cpu_rope_mrope(struct snug_be *be, float *x, int64_t T, int64_t nh, int64_t hd,
                           int64_t n_rot, const int32_t *pos3, const uint32_t sections[3],
                           float base) {
    snug_op_rope_mrope(be->pool, x, T, nh, hd, n_rot, pos3, sections, base);
}
static void cpu_swiglu(struct snug_be *be, const float *g, const float *u, int64_t n, float *y) {
    snug_op_swiglu(be->pool, g, u, n, y);
}
static void cpu_sigmoid_mul(struct snug_be *be, const float *x, const float *g, int64_t n,
                            float *y) {
    snug_op_sigmoid_mul(be->pool, x, g, n, y);
}
static void cpu_gated_rmsnorm(struct snug_be *be, const float *o, const float *z, const float *w,
                              float eps, int64_t T, int64_t Nv, int64_t dv, float *y) {
    snug_op_gated_rmsnorm(be->pool, o, z, w, eps, T, Nv, dv, y);
}
static void cpu_conv_silu(struct snug_be *be, const float *x, int64_t T, int64_t C, int64_t K,
                          const float *w, float *st, float *y) {
    snug_op_conv_silu(be->pool, x, T, C, K, w, st, y);
}
static void cpu_conv_silu_runs(struct snug_be *be, int32_t n, const struct snug_be_run *runs,
                               const float *x, int64_t C, int64_t K, const float *w, float *y) {
    for (int32_t i = 0; i < n; i++)
        snug_op_conv_silu(be->pool, x + runs[i].row0 * C, runs[i].T, C, K, w, runs[i].state,
                          y + runs[i].row0 * C);
}
static void cpu_kv_store(struct snug_be *be, struct snug_kv_view *kv, int64_t Hkv, int64_t D,
                         int64_t pos0, const int32_t *pos_be, int64_t T, const float *k,
                         const float *v) {
    (void)pos_be;                                 /* the host's pos0 is the position */
    snug_op_kvq_store(kv, Hkv, D, pos0, T, k, v); /* any cache format */
}
static void cpu_attention(struct snug_be *be, const struct snug_kv_view *kv, int64_t Hq,
                          int64_t Hkv, int64_t D, int64_t pos0, const int32_t *pos_be, int64_t T,
                          const float *q, float scale, float *out, void *work) {
    (void)pos_be;
    snug_op_kvq_attention(be->pool, kv, Hq, Hkv, D, pos0, T, q, scale, out, work);
}
static void cpu_delta_step(struct snug_be *be, int64_t T, int64_t Nk, int64_t Nv, int64_t dk,
                           int64_t dv, const float *q, const float *k, const float *v,
                           const float *g, const float *beta, float *state, float *out) {
    snug_op_gated_delta_step(be->pool, T, Nk, Nv, dk, dv, q, k, v, g, beta, state, out);
}
static void cpu_delta_chunked(struct snug_be *be, int64_t T, int64_t Nk, int64_t Nv, int64_t dk,
                              int64_t dv, const float *q, const float *k, const float *v,
                              const float *g, const float *beta, float *state, float *out,
                              void *work) {
    snug_op_gated_delta_chunked(be->pool, T, Nk, Nv, dk, dv, q, k, v, g, beta, state, out, work);
}
static void cpu_add(struct snug_be *be, float *x, const float *y, int64_t n) {
    snug_op_add(be->pool, x, y, n);
}
static void cpu_add_rmsnorm(struct snug_be *be, float *x, const float *y, const float *w, float eps,
                            int64_t T, int64_t n, float *xn) {
    snug_op_add(be->pool, x, y, T * n);
    snug_op_rmsnorm(be->pool, x, w, eps, T, n, xn);
}
static void cpu_layernorm(struct snug_be *be, const float *x, const float *w, const float *b,
                          float eps, int64_t T, int64_t n, float *y) {
    snug_op_layernorm(be->pool, x, w, b, eps, T, n, y);
}
static void cpu_bias_act(struct snug_be *be, float *y, const float *b, int64_t T, int64_t n,
                         int act) {
    snug_op_bias_act(be->pool, y, b, T, n, (enum snug_act)act);
}
static void cpu_rope_angles(struct snug_be *be, float *x, int64_t stride, int64_t T,
                            int64_t n_heads, int64_t head_dim, const float *ang) {
    snug_op_rope_angles(be->pool, x, stride, T, n_heads, head_dim, ang);
}
static void cpu_attention_full(struct snug_be *be, const float *q, const float *k, const float *v,
                               int64_t stride, int64_t T, int64_t n_heads, int64_t head_dim,
                               float scale, float *out, void *work) {
    /* work holds the op's one-thread scores: no pool here */
    snug_op_attention_full(NULL, q, k, v, stride, T, n_heads, head_dim, scale, out, work);
    (void)be;
}
static void cpu_scale(struct snug_be *be, float *x, int64_t n, float s) {
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}
/* softplus with PyTorch's default linear regime above 20 (torch.nn.functional.softplus). */
static float softplus(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}
static void cpu_delta_gates(struct snug_be *be, float *beta, float *g, const float *a,
                            const float *dt, int64_t T, int64_t Nv) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < Nv; j++) {
            beta[t * Nv + j] = snug_ops_sigmoid(beta[t * Nv + j]);
            g[t * Nv + j] = a[j] * softplus(g[t * Nv + j] + dt[j]);
        }
}
static void cpu_copy2d(struct snug_be *be, float *dst, int64_t dp, const float *src, int64_t sp,
                       int64_t n, int64_t rows) {
    for (int64_t r = 0; r < rows; r++) memcpy(dst + r * dp, src + r * sp, (size_t)n * 4);
}
static void cpu_embed(struct snug_be *be, const struct snug_gguf_tensor *t, const snug_token *ids,
                      const int32_t *ids_be, int64_t T, int64_t H, float *x) {
    if (!ids) ids = ids_be; /* (this backend's memory is the host's) */
    uint64_t erow = snug_dtype_row_bytes(t->type, (uint64_t)H);
    for (int64_t i = 0; i < T; i++)
        snug_dequantize_row(t->type, (const uint8_t *)t->data + (uint64_t)ids[i] * erow, x + i * H,
                            H);
}
static void cpu_copy(struct snug_be *be, void *dst, const void *src, size_t bytes) {
    if (dst != src && bytes) memcpy(dst, src, bytes);
}
static void cpu_argmax(struct snug_be *be, const float *x, int64_t rows, int64_t n, int32_t *out) {
    (void)be;
    for (int64_t r = 0; r < rows; r++) {
        const float *v = x + r * n;
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++)
            if (v[i] > v[best]) best = i;
        out[r] = (int32_t)best;
    }
}
static void cpu_gather_rows(struct snug_be *be, float *dst, const float *src, const int32_t *idx,
                            int64_t n, int64_t H) {
    for (int64_t i = 0; i < n; i++) memcpy(dst + i * H, src + (int64_t)idx[i] * H, (size_t)H * 4);
}
static void cpu_moe_combine(struct snug_be *be, float *y, const float *d, const int32_t *slot,
                            const float *w, int64_t T, int64_t k, int64_t H) {
    snug_op_moe_combine(be->pool, y, d, slot, w, T, k, H);
}
static void cpu_moe_route(struct snug_be *be, const float *logits, int64_t T, int64_t E, int64_t k,
                          int32_t *sel, int32_t *cnt, float *selw, int32_t *order, int32_t *slot,
                          int32_t *off, int32_t *tiles) {
    (void)be;
    (void)tiles; /* the CPU products walk off[] directly */
    snug_op_moe_route(logits, T, E, k, sel, cnt, selw, order, slot, off);
}
/* One matmul per expert over its contiguous rows: each expert's weights are read once. */
static void cpu_moe_matmul(struct snug_be *be, uint32_t type, const void *w, uint64_t expert_bytes,
                           int64_t n_in, int64_t n_out, int64_t E, int64_t T, int64_t k,
                           const float *x, bool x_token, const int32_t *off, const int32_t *tiles,
                           float *y, void *work) {
    (void)tiles;
    (void)T;
    (void)k;
    for (int64_t e = 0; e < E; e++) {
        int64_t s0 = off[e], n = off[e + 1] - off[e];
        if (n == 0) continue;
        /* x_token: one token, so one slot per expert, reading the token's row */
        cpu_matmul(be, type, (const uint8_t *)w + (uint64_t)e * expert_bytes, n_in, n_out,
                   x_token ? x : x + s0 * n_in, n, y + s0 * n_out, work);
    }
}
/* matmul_precise and matmul_pair: the CPU's matmul is the reference, once per matrix. */
static void cpu_matmul_two(struct snug_be *be, uint32_t type, const void *w, int64_t n_out,
                           const void *w2, int64_t n_out2, int64_t n_in, const float *x, int64_t T,
                           float *y, float *y2, void *work) {
    cpu_matmul(be, type, w, n_in, n_out, x, T, y, work);
    if (w2) cpu_matmul(be, type, w2, n_in, n_out2, x, T, y2, work);
}
static void cpu_add_gated(struct snug_be *be, float *y, const float *d, const float *gl, int64_t T,
                          int64_t H) {
    snug_op_add_gated(be->pool, y, d, gl, T, H);
}

/* ---- an opened CPU instance: the slots' caches and the work arena ------------------------- */
struct cpu_be {
    struct snug_be be; /* first: the interface */
    int32_t n_slots;
    struct snug_kv *slots; /* [n_slots] */
    struct snug_arena work;
    size_t bytes;
};
static struct cpu_be *CPU(struct snug_be *be) {
    return (struct cpu_be *)be;
}
static void cpu_close(struct snug_be *be) {
    if (!be) return;
    struct cpu_be *c = CPU(be);
    if (c->slots)
        for (int32_t i = 0; i < c->n_slots; i++) snug_kv_free(&c->slots[i]);
    snug_free(c->slots);
    snug_arena_free(&c->work);
    snug_free(c);
}
static struct snug_kv *cpu_slot_kv(struct snug_be *be, int32_t slot) {
    SNUG_ASSERT(slot >= 0 && slot < CPU(be)->n_slots);
    return &CPU(be)->slots[slot];
}
static struct snug_kv *cpu_slot_none(struct snug_be *be, int32_t slot) {
    return NULL;
}
static void *cpu_slot_spec_mem(struct snug_be *be, int32_t slot) {
    return NULL;
}
static struct snug_arena *cpu_work(struct snug_be *be) {
    return &CPU(be)->work;
}
static struct snug_arena *cpu_host_work(struct snug_be *be) {
    return NULL;
}
static int32_t *cpu_positions(struct snug_be *be) {
    return NULL;
}
static void cpu_reset_slot(struct snug_be *be, int32_t slot) {
    snug_kv_reset(cpu_slot_kv(be, slot));
}
static void cpu_snapshot(struct snug_be *be, int32_t slot, int32_t t, bool save) {
    if (save)
        snug_kv_snap_save(cpu_slot_kv(be, slot), t);
    else
        snug_kv_snap_restore(cpu_slot_kv(be, slot), t);
}
static int cpu_sync(struct snug_be *be, struct snug_err *err) {
    return snug_backend_finish(be, err);
}
static size_t cpu_bytes(const struct snug_be *be) {
    return ((const struct cpu_be *)be)->bytes;
}

static const struct snug_backend_ops CPU_OPS = {
    .name = "cpu",
    .weight = cpu_weight,
    .matmul = cpu_matmul,
    .matmul_precise = cpu_matmul_two,
    .matmul_pair = cpu_matmul_two,
    .rmsnorm = cpu_rmsnorm,
    .l2norm = cpu_l2norm,
    .rope_neox = cpu_rope,
    .rope_mrope = cpu_rope_mrope,
    .swiglu = cpu_swiglu,
    .sigmoid_mul = cpu_sigmoid_mul,
    .gated_rmsnorm = cpu_gated_rmsnorm,
    .conv_silu = cpu_conv_silu,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .delta_step = cpu_delta_step,
    .delta_chunked = cpu_delta_chunked,
    .add = cpu_add,
    .add_rmsnorm = cpu_add_rmsnorm,
    .scale = cpu_scale,
    .delta_gates = cpu_delta_gates,
    .copy2d = cpu_copy2d,
    .embed = cpu_embed,
    .upload = cpu_copy,
    .download = cpu_copy,
    .read_back = cpu_copy,
    .gather_rows = cpu_gather_rows,
    .moe_combine = cpu_moe_combine,
    .moe_route = cpu_moe_route,
    .moe_matmul = cpu_moe_matmul,
    .add_gated = cpu_add_gated,
    .copy = cpu_copy,
    .argmax = cpu_argmax,
    .layernorm = cpu_layernorm,
    .bias_act = cpu_bias_act,
    .rope_angles = cpu_rope_angles,
    .attention_full = cpu_attention_full,
    .close = cpu_close,
    .slot_kv = cpu_slot_kv,
    .slot_mtp_kv = cpu_slot_none,
    .slot_spec_mem = cpu_slot_spec_mem,
    .work = cpu_work,
    .host_work = cpu_host_work,
    .positions = cpu_positions,
    .reset_slot = cpu_reset_slot,
    .snapshot = cpu_snapshot,
    .sync = cpu_sync,
    .bytes = cpu_bytes,
    .conv_silu_runs = cpu_conv_silu_runs,
};

void snug_backend_cpu_init(struct snug_be *be, struct snug_pool *pool) {
    memset(be, 0, sizeof *be);
    be->ops = &CPU_OPS;
    be->host_memory = true;
    be->pool = pool;
}

/* The ops-only form (a forward over the pool without an instance: snug_fwd_be). The lifecycle
 * entries of an ops-only backend must not be called (they would read a missing instance). */
static int cpu_open(struct snug_be **out, const struct snug_gguf *g,
                    const struct snug_backend_limits *lim, struct snug_pool *pool,
                    struct snug_err *err) {
    *out = NULL;
    int32_t n = lim->n_slots > 0 ? lim->n_slots : 1;
    struct cpu_be *c = snug_calloc(1, sizeof *c);
    if (!c) return snug_err_set(err, SNUG_ERR_NOMEM, "backend cpu: out of memory");
    snug_backend_cpu_init(&c->be, pool);
    c->be.impl = c;
    int rc = SNUG_OK;
    c->slots = snug_calloc((size_t)n, sizeof *c->slots);
    if (!c->slots) {
        rc = snug_err_set(err, SNUG_ERR_NOMEM, "backend cpu: out of memory");
        goto fail;
    }
    c->n_slots = n;
    for (int32_t i = 0; i < n; i++) {
        if ((rc = snug_kv_init(&c->slots[i], lim->kv_shape, err))) goto fail;
        c->bytes += snug_kv_bytes(lim->kv_shape);
        if (lim->n_snap > 0) {
            if ((rc = snug_kv_snap_init(&c->slots[i], lim->n_snap, err))) goto fail;
            c->bytes += snug_kv_snap_bytes(lim->kv_shape, lim->n_snap);
        }
    }
    if ((rc = snug_arena_init(&c->work, "work", lim->work_bytes, err))) goto fail;
    c->bytes += lim->work_bytes;
    *out = &c->be;
    return SNUG_OK;
fail:
    cpu_close(&c->be);
    return rc;
}

static int cpu_mem_info(size_t *free_b, size_t *total_b, struct snug_err *err) {
    *free_b = *total_b = 0;
    return snug_err_set(err, SNUG_ERR_UNSUPPORTED, "backend cpu: no device memory");
}

static const struct snug_backend_module CPU_MODULE = {
    .abi = SNUG_BACKEND_ABI,
    .name = "cpu",
    .open = cpu_open,
    .mem_info = cpu_mem_info,
};

const struct snug_backend_module *snug_backend_cpu_module(void) {
    return &CPU_MODULE;
}
