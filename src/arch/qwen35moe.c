/* qwen35moe.c — the `qwen35moe` architecture: the qwen35 trunk (qwen35.c) with a sparse MoE
 * FFN in every layer (docs/qwen35.md §2.8): softmax router over all experts in float32, top-k,
 * renormalised weights, SwiGLU experts sliced from the 3-D *_exps tensors, plus one
 * sigmoid-gated shared expert. Tokens are grouped per expert so each expert's weights are
 * read once per step. Invariant: the FFN scratch comes from moe_buffers, which the plan uses.
 * Read next: qwen35.c (the trunk).
 */
#include "arch/qwen35.h"

#include "backend/backend.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

/* The MoE scratch of a step of T tokens, all in backend memory (the work arena): router
 * logits, the routing (moe_route: per-slot tables and the tile table), the routed rows grouped
 * by expert (xg/g/u/d hold T·k rows: slot s is one (token, expert) pair). The expert
 * products' work is the trunk's op_work (sized for them: qwen35.c op_work_bytes). Routing
 * never leaves the backend. */
struct moe_bufs {
    float *logits;  /* [T][E] router logits */
    int32_t *sel;   /* [T][k] chosen experts (routing scratch) */
    int32_t *cnt;   /* [E] routing scratch */
    int32_t *order; /* [T·k] token of each slot (slots grouped by expert) */
    int32_t *slot;  /* [T][k] slot of each (token, choice) */
    float *selw;    /* [T][k] renormalised weights */
    int32_t *off;   /* [E+1] first slot of each expert */
    int32_t *tiles; /* [snug_moe_tiles_len] the expert products' tile table */
    float *xg;      /* [T·k][H] gathered inputs */
    float *g, *u;   /* [T·k][F] expert gate / up (F = max(expert, shared) width) */
    float *d;       /* [T·k][H] expert outputs, then the shared expert's */
    float *sgate;   /* [T] shared-expert gate logit */
};

static size_t align64(size_t n) {
    return SNUG_ALIGN_UP(n, 64);
}

/* Lay out (a != NULL: backend arena a) or count (a == NULL) the MoE scratch of a step of T
 * tokens. */
static size_t moe_buffers(const struct snug_hparams *hp, int32_t T, struct snug_arena *a,
                          struct moe_bufs *o) {
    size_t E = hp->n_expert, k = hp->n_expert_used, H = hp->n_embd;
    size_t F = SNUG_MAX(hp->n_ff_exp, hp->n_ff_shexp), t = (size_t)T, tk = t * k;
    size_t tiles = (size_t)snug_moe_tiles_len((int64_t)t, (int64_t)E, (int64_t)k);
    size_t sz[] = {t * E * 4, tk * 4,     E * 4,      tk * 4,     tk * 4,     tk * 4, (E + 1) * 4,
                   tiles * 4, tk * H * 4, tk * F * 4, tk * F * 4, tk * H * 4, t * 4};
    void **dst[] = {(void **)&o->logits, (void **)&o->sel,  (void **)&o->cnt, (void **)&o->order,
                    (void **)&o->slot,   (void **)&o->selw, (void **)&o->off, (void **)&o->tiles,
                    (void **)&o->xg,     (void **)&o->g,    (void **)&o->u,   (void **)&o->d,
                    (void **)&o->sgate};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
        total += align64(sz[i]);
        if (a) *dst[i] = snug_arena_alloc(a, sz[i], 64);
    }
    return total;
}

/* ---- load --------------------------------------------------------------------------------- */
#define BT(field, suffix, f32, nd, a, b_, c)                                                       \
    do {                                                                                           \
        rc = snug_model_blk_tensor(m, &L->field, il, suffix, true, f32, nd, a, b_, c, err);        \
        if (rc) return rc;                                                                         \
    } while (0)

static int moe_load(struct snug_model *m, struct snug_err *err) {
    int rc = snug_qwen35_load_trunk(m, err);
    if (rc) return rc;
    const struct snug_hparams *hp = &m->hp;
    int64_t H = hp->n_embd, E = hp->n_expert, F = hp->n_ff_exp, Fs = hp->n_ff_shexp;
    if (E == 0 || hp->n_expert_used == 0 || hp->n_expert_used > E || F == 0)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "%s.expert_count = %u, expert_used_count = %u, "
                            "expert_feed_forward_length = %u: expected 0 < used <= count and a "
                            "non-zero width",
                            hp->arch, hp->n_expert, hp->n_expert_used, hp->n_ff_exp);
    for (uint32_t i = 0; i < hp->n_layer_all; i++) {
        struct snug_layer *L = &m->layers[i];
        int il = (int)i;
        BT(gate_inp, "ffn_gate_inp.weight", false, 2, H, E, 1);
        BT(gate_exps, "ffn_gate_exps.weight", false, 3, H, F, E);
        BT(up_exps, "ffn_up_exps.weight", false, 3, H, F, E);
        BT(down_exps, "ffn_down_exps.weight", false, 3, F, H, E);
        if (Fs) {
            BT(gate_inp_shexp, "ffn_gate_inp_shexp.weight", false, 2, H, 1, 1);
            BT(gate_shexp, "ffn_gate_shexp.weight", false, 2, H, Fs, 1);
            BT(up_shexp, "ffn_up_shexp.weight", false, 2, H, Fs, 1);
            BT(down_shexp, "ffn_down_shexp.weight", false, 2, Fs, H, 1);
        }
    }
    return SNUG_OK;
}
#undef BT

static void moe_plan(const struct snug_hparams *hp, int32_t n_chunk, int32_t n_threads,
                     enum snug_kv_type kv_type, struct snug_arch_plan *out) {
    struct moe_bufs o;
    snug_qwen35_plan_common(hp, n_chunk, n_threads, kv_type, moe_buffers(hp, n_chunk, NULL, &o),
                            out);
}

/* ---- forward ------------------------------------------------------------------------------ */
#define OP(name, ...) (be->ops->name(be, __VA_ARGS__))

static void matmul(struct snug_fwd *f, snug_tensor w, const float *x, int64_t T, float *y) {
    struct snug_be *be = snug_fwd_be(f);
    if (f->mm_obs) f->mm_obs->dense(f->mm_obs->user, w, x, T); /* snug imatrix (model.h) */
    OP(matmul, w->type, OP(weight, w, 0), (int64_t)w->ne[0], (int64_t)w->ne[1], x, T, y,
       f->op_work);
}

/* Routing in the backend (moe_route: softmax, top-k, renormalised weights, the (token,
 * expert) pairs grouped by expert into T·k slots), then each expert's gate/up/SwiGLU/down over
 * its contiguous slots (moe_matmul: each expert's weights read once per step), then the combine
 * summing each token's k expert outputs in selection order, and the sigmoid-gated shared
 * expert. No host round trip: the step runs ahead on a device backend. */
static void moe_ffn(struct snug_fwd *f, const struct snug_layer *L, const float *x, float *y) {
    const struct snug_hparams *hp = &f->m->hp;
    struct snug_be *be = snug_fwd_be(f);
    int64_t T = f->T, H = hp->n_embd, E = hp->n_expert, k = hp->n_expert_used;
    int64_t F = hp->n_ff_exp, Fs = hp->n_ff_shexp, n = T * k;
    struct moe_bufs B;
    moe_buffers(&f->m->hp, f->T, f->work, &B);

    /* the router and the shared expert's gate: both decide, both see the same x */
    snug_qwen35_matmul_precise(f, L->gate_inp, L->gate_shexp ? L->gate_inp_shexp : NULL, x, T,
                               B.logits, B.sgate);
    /* one token (a decode step) without imatrix observers: its k slots read x itself */
    bool x_token = T == 1 && !f->mm_obs;
    /* The shared expert's gate and up: in such a step first, while a device backend's op scratch
     * still holds the norm's rounding of x (the router's products and the routing leave it, and
     * the experts' gate and up read it after these), into the gathered rows' memory, which that
     * step does not use ([k][H] holds both: k·H >= 2·Fs); else after the experts. */
    bool shared_first = L->gate_shexp && x_token && k * H >= 2 * Fs;
    float *sg = shared_first ? B.xg : B.g, *su = shared_first ? B.xg + Fs : B.u;
    if (shared_first) snug_qwen35_matmul_pair(f, L->gate_shexp, L->up_shexp, x, T, sg, su);
    OP(moe_route, B.logits, T, E, k, B.sel, B.cnt, B.selw, B.order, B.slot, B.off, B.tiles);
    const float *xg = x_token ? x : B.xg;
    if (!x_token) OP(gather_rows, B.xg, x, B.order, n, H);
    if (f->mm_obs) { /* snug imatrix: the routed rows of each expert (host memory, model.h) */
        f->mm_obs->experts(f->mm_obs->user, L->gate_exps, B.xg, B.off, E);
        f->mm_obs->experts(f->mm_obs->user, L->up_exps, B.xg, B.off, E);
    }
    uint64_t gsz = snug_dtype_row_bytes(L->gate_exps->type, (uint64_t)H) * (uint64_t)F;
    uint64_t usz = snug_dtype_row_bytes(L->up_exps->type, (uint64_t)H) * (uint64_t)F;
    uint64_t dsz = snug_dtype_row_bytes(L->down_exps->type, (uint64_t)F) * (uint64_t)H;
    OP(moe_matmul, L->gate_exps->type, OP(weight, L->gate_exps, 0), gsz, H, F, E, T, k, xg, x_token,
       B.off, B.tiles, B.g, f->op_work);
    OP(moe_matmul, L->up_exps->type, OP(weight, L->up_exps, 0), usz, H, F, E, T, k, xg, x_token,
       B.off, B.tiles, B.u, f->op_work);
    OP(swiglu, B.g, B.u, n * F, B.g);
    if (f->mm_obs) f->mm_obs->experts(f->mm_obs->user, L->down_exps, B.g, B.off, E);
    OP(moe_matmul, L->down_exps->type, OP(weight, L->down_exps, 0), dsz, F, H, E, T, k, B.g, false,
       B.off, B.tiles, B.d, f->op_work);
    OP(moe_combine, y, B.d, B.slot, B.selw, T, k, H);

    if (!L->gate_shexp) return;
    if (!shared_first) snug_qwen35_matmul_pair(f, L->gate_shexp, L->up_shexp, x, T, sg, su);
    OP(swiglu, sg, su, T * Fs, sg);
    matmul(f, L->down_shexp, sg, T, B.d);
    OP(add_gated, y, B.d, B.sgate, T, H);
}

static void moe_forward(struct snug_fwd *f) {
    snug_qwen35_forward_common(f, moe_ffn);
}

/* The MTP block with this architecture's MoE FFN (qwen35_mtp.c). */
static void moe_mtp_forward(struct snug_fwd *f) {
    snug_qwen35_mtp_forward_common(f, moe_ffn);
}

const struct snug_arch snug_arch_qwen35moe = {
    .name = "qwen35moe",
    .load = moe_load,
    .plan = moe_plan,
    .forward = moe_forward,
    .mtp_forward = moe_mtp_forward,
};
