/* qwen35moe.c — the `qwen35moe` architecture: the qwen35 trunk (qwen35.c) with a sparse MoE
 * FFN in every layer (docs/qwen35.md §2.8): softmax router over all experts in float32, top-k,
 * renormalised weights, SwiGLU experts sliced from the 3-D *_exps tensors, plus one
 * sigmoid-gated shared expert. Tokens are grouped per expert so each expert's weights are
 * read once per step. Invariant: the FFN scratch comes from moe_buffers, which the plan uses.
 * Read next: qwen35.c (the trunk).
 */
#include "model/model.h"

#include "quant/quant.h"

#include <math.h>
#include <string.h>

/* The MoE scratch of a step of T tokens. Backend memory (the work arena): router logits, the
 * routed rows grouped by expert (xg/g/u/d hold T·k rows: slot s is one (token, expert) pair)
 * and the uploaded routing tables. Host memory (the host work arena): the routing itself. */
struct moe_bufs {
    float *logits;  /* [T][E] router logits */
    int32_t *order; /* [T·k] token of each slot (slots grouped by expert) */
    int32_t *slot;  /* [T][k] slot of each (token, choice) */
    float *selw;    /* [T][k] renormalised weights */
    float *xg;      /* [T·k][H] gathered inputs */
    float *g, *u;   /* [T·k][F] expert gate / up (F = max(expert, shared) width) */
    float *d;       /* [T·k][H] expert outputs, then the shared expert's */
    float *sgate;   /* [T] shared-expert gate logit */
    /* host */
    int32_t *h_sel;   /* [T][k] chosen experts */
    float *h_selw;    /* [T][k] */
    int32_t *h_order; /* [T·k] */
    int32_t *h_slot;  /* [T][k] */
    int32_t *h_cnt;   /* [E] rows per expert */
    int32_t *h_off;   /* [E] first slot of each expert */
};

static size_t align64(size_t n) {
    return SNUG_ALIGN_UP(n, 64);
}

/* Lay out (a != NULL: backend arena a, host arena h) or count (a == NULL: the sum of both) the
 * MoE scratch of a step of T tokens. */
static size_t moe_buffers(const struct snug_hparams *hp, int32_t T, struct snug_arena *a,
                          struct snug_arena *h, struct moe_bufs *o) {
    size_t E = hp->n_expert, k = hp->n_expert_used, H = hp->n_embd;
    size_t F = SNUG_MAX(hp->n_ff_exp, hp->n_ff_shexp), t = (size_t)T, tk = t * k;
    size_t sz[] = {t * E * 4, tk * 4, tk * 4, tk * 4, tk * H * 4, tk * F * 4, tk * F * 4,
                   tk * H * 4, t * 4,
                   /* host */
                   tk * 4, tk * 4, tk * 4, tk * 4, E * 4, E * 4};
    void **dst[] = {(void **)&o->logits, (void **)&o->order,  (void **)&o->slot,
                    (void **)&o->selw,   (void **)&o->xg,     (void **)&o->g,
                    (void **)&o->u,      (void **)&o->d,      (void **)&o->sgate,
                    (void **)&o->h_sel,  (void **)&o->h_selw, (void **)&o->h_order,
                    (void **)&o->h_slot, (void **)&o->h_cnt,  (void **)&o->h_off};
    const size_t n_dev = 9;
    size_t total = 0;
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
        total += align64(sz[i]);
        if (a) *dst[i] = snug_arena_alloc(i < n_dev ? a : h, sz[i], 64);
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
    snug_qwen35_plan_common(hp, n_chunk, n_threads, kv_type,
                            moe_buffers(hp, n_chunk, NULL, NULL, &o), out);
}

/* ---- forward ------------------------------------------------------------------------------ */
#define OP(name, ...) (be->ops->name(be, __VA_ARGS__))

/* y[rows] = W_e · x for expert e of a 3-D tensor ne = {n_in, n_out, E}. */
static void expert_matmul(struct snug_fwd *f, snug_tensor w, int64_t e, const float *x, int64_t T,
                          float *y) {
    struct snug_be *be = snug_fwd_be(f);
    int64_t n_in = (int64_t)w->ne[0], n_out = (int64_t)w->ne[1];
    uint64_t slice = snug_dtype_row_bytes(w->type, (uint64_t)n_in) * (uint64_t)n_out;
    OP(matmul, w->type, OP(weight, w, slice * (uint64_t)e), n_in, n_out, x, T, y, f->op_work);
}

static void matmul(struct snug_fwd *f, snug_tensor w, const float *x, int64_t T, float *y) {
    expert_matmul(f, w, 0, x, T, y);
}

/* Router for one token: softmax over all E logits (float32), the k largest (ties to the lower
 * index), weights renormalised to sum 1 (docs/qwen35.md §2.8). */
static void route(const float *logits, int64_t E, int64_t k, int32_t *sel, float *w) {
    float mx = logits[0];
    for (int64_t e = 1; e < E; e++) mx = SNUG_MAX(mx, logits[e]);
    double sum = 0;
    for (int64_t e = 0; e < E; e++) sum += exp((double)logits[e] - mx);
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            bool taken = false;
            for (int64_t i = 0; i < j; i++) taken |= sel[i] == e;
            if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
        }
        sel[j] = (int32_t)best;
        w[j] = (float)(exp((double)logits[best] - mx) / sum);
    }
    float ws = 0;
    for (int64_t j = 0; j < k; j++) ws += w[j];
    for (int64_t j = 0; j < k; j++) w[j] /= ws;
}

/* Routing runs on the host over the T·E router logits (copied back on a device backend); the
 * (token, expert) pairs are grouped by expert into T·k slots, so each expert's weights are
 * read once per step over its contiguous rows; the combine then sums each token's k expert
 * outputs in selection order. */
static void moe_ffn(struct snug_fwd *f, const struct snug_layer *L, const float *x, float *y) {
    const struct snug_hparams *hp = &f->m->hp;
    struct snug_be *be = snug_fwd_be(f);
    int64_t T = f->T, H = hp->n_embd, E = hp->n_expert, k = hp->n_expert_used;
    int64_t F = hp->n_ff_exp, Fs = hp->n_ff_shexp;
    struct moe_bufs B;
    moe_buffers(&f->m->hp, f->T, f->work, snug_fwd_host_work(f), &B);

    matmul(f, L->gate_inp, x, T, B.logits);
    const float *lg = B.logits;
    if (!be->host_memory) {
        float *h = snug_arena_alloc(snug_fwd_host_work(f), (size_t)(T * E) * sizeof(float), 64);
        OP(download, h, B.logits, (size_t)(T * E) * sizeof(float));
        lg = h;
    }
    for (int64_t t = 0; t < T; t++) route(lg + t * E, E, k, B.h_sel + t * k, B.h_selw + t * k);
    memset(B.h_cnt, 0, (size_t)E * sizeof(int32_t));
    for (int64_t i = 0; i < T * k; i++) B.h_cnt[B.h_sel[i]]++;
    for (int64_t e = 0, off = 0; e < E; e++) {
        B.h_off[e] = (int32_t)off;
        off += B.h_cnt[e];
    }
    for (int64_t e = 0; e < E; e++) B.h_cnt[e] = 0; /* reused as fill counters */
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < k; j++) {
            int32_t e = B.h_sel[t * k + j];
            int32_t s = B.h_off[e] + B.h_cnt[e]++;
            B.h_order[s] = (int32_t)t;
            B.h_slot[t * k + j] = s;
        }
    OP(upload, B.order, B.h_order, (size_t)(T * k) * sizeof(int32_t));
    OP(upload, B.slot, B.h_slot, (size_t)(T * k) * sizeof(int32_t));
    OP(upload, B.selw, B.h_selw, (size_t)(T * k) * sizeof(float));
    OP(gather_rows, B.xg, x, B.order, T * k, H);

    for (int64_t e = 0; e < E; e++) {
        int64_t n = B.h_cnt[e], s0 = B.h_off[e];
        if (n == 0) continue;
        expert_matmul(f, L->gate_exps, e, B.xg + s0 * H, n, B.g + s0 * F);
        expert_matmul(f, L->up_exps, e, B.xg + s0 * H, n, B.u + s0 * F);
        OP(swiglu, B.g + s0 * F, B.u + s0 * F, n * F, B.g + s0 * F);
        expert_matmul(f, L->down_exps, e, B.g + s0 * F, n, B.d + s0 * H);
    }
    OP(moe_combine, y, B.d, B.slot, B.selw, T, k, H);

    if (!L->gate_shexp) return;
    matmul(f, L->gate_shexp, x, T, B.g);
    matmul(f, L->up_shexp, x, T, B.u);
    OP(swiglu, B.g, B.u, T * Fs, B.g);
    matmul(f, L->down_shexp, B.g, T, B.d);
    matmul(f, L->gate_inp_shexp, x, T, B.sgate);
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
