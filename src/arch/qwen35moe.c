/* qwen35moe.c — the `qwen35moe` architecture: the qwen35 trunk (qwen35.c) with a sparse MoE
 * FFN in every layer (spec §2.8): softmax router over all experts in float32, top-k,
 * renormalised weights, SwiGLU experts sliced from the 3-D *_exps tensors, plus one
 * sigmoid-gated shared expert. Tokens are grouped per expert so each expert's weights are
 * read once per step. Invariant: the FFN scratch comes from moe_buffers, which the plan uses.
 * Read next: qwen35.c (the trunk).
 */
#include "model/model.h"

#include "quant/quant.h"

#include <math.h>
#include <string.h>

struct moe_bufs {
    float *logits; /* [T][E] router logits */
    int32_t *sel;  /* [T][k] chosen experts */
    float *selw;   /* [T][k] their renormalised weights */
    int32_t *rows; /* [T] tokens routed to the current expert */
    float *roww;   /* [T] their weights */
    float *xg;     /* [T][H] gathered inputs */
    float *g, *u;  /* [T][F] expert gate / up (F = max(expert, shared) width) */
    float *d;      /* [T][H] expert / shared output */
    float *sgate;  /* [T] shared-expert gate logit */
};

static size_t align64(size_t n) {
    return SNUG_ALIGN_UP(n, 64);
}

/* Lay out (a != NULL) or count (a == NULL) the MoE scratch of a step of T tokens. */
static size_t moe_buffers(const struct snug_hparams *hp, int32_t T, struct snug_arena *a,
                          struct moe_bufs *o) {
    size_t E = hp->n_expert, k = hp->n_expert_used, H = hp->n_embd;
    size_t F = SNUG_MAX(hp->n_ff_exp, hp->n_ff_shexp), t = (size_t)T;
    size_t sz[] = {t * E * 4, t * k * 4, t * k * 4, t * 4,     t * 4,
                   t * H * 4, t * F * 4, t * F * 4, t * H * 4, t * 4};
    void **dst[] = {(void **)&o->logits, (void **)&o->sel,  (void **)&o->selw, (void **)&o->rows,
                    (void **)&o->roww,   (void **)&o->xg,   (void **)&o->g,    (void **)&o->u,
                    (void **)&o->d,      (void **)&o->sgate};
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
/* y[rows] = W_e · x for expert e of a 3-D tensor ne = {n_in, n_out, E}. */
static void expert_matmul(struct snug_fwd *f, snug_tensor w, int64_t e, const float *x, int64_t T,
                          float *y) {
    int64_t n_in = (int64_t)w->ne[0], n_out = (int64_t)w->ne[1];
    uint64_t slice = snug_dtype_row_bytes(w->type, (uint64_t)n_in) * (uint64_t)n_out;
    snug_op_matmul(f->pool, w->type, (const uint8_t *)w->data + slice * (uint64_t)e, n_in, n_out, x,
                   T, y, f->op_work);
}

/* Router for one token: softmax over all E logits (float32), the k largest (ties to the lower
 * index), weights renormalised to sum 1 (spec §2.8). */
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

static void moe_ffn(struct snug_fwd *f, const struct snug_layer *L, const float *x, float *y) {
    const struct snug_hparams *hp = &f->m->hp;
    int64_t T = f->T, H = hp->n_embd, E = hp->n_expert, k = hp->n_expert_used;
    int64_t F = hp->n_ff_exp, Fs = hp->n_ff_shexp;
    struct moe_bufs B;
    moe_buffers(&f->m->hp, f->T, f->work, &B);

    snug_op_matmul(f->pool, L->gate_inp->type, L->gate_inp->data, H, E, x, T, B.logits, f->op_work);
    for (int64_t t = 0; t < T; t++) route(B.logits + t * E, E, k, B.sel + t * k, B.selw + t * k);
    memset(y, 0, (size_t)(T * H) * sizeof(float));

    for (int64_t e = 0; e < E; e++) {
        int64_t n = 0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < k; j++)
                if (B.sel[t * k + j] == e) {
                    B.rows[n] = (int32_t)t;
                    B.roww[n] = B.selw[t * k + j];
                    memcpy(B.xg + n * H, x + t * H, (size_t)H * sizeof(float));
                    n++;
                }
        if (n == 0) continue;
        expert_matmul(f, L->gate_exps, e, B.xg, n, B.g);
        expert_matmul(f, L->up_exps, e, B.xg, n, B.u);
        snug_op_swiglu(B.g, B.u, n * F, B.g);
        expert_matmul(f, L->down_exps, e, B.g, n, B.d);
        for (int64_t i = 0; i < n; i++) {
            float *yr = y + (int64_t)B.rows[i] * H;
            const float *dr = B.d + i * H;
            for (int64_t c = 0; c < H; c++) yr[c] += B.roww[i] * dr[c];
        }
    }

    if (!L->gate_shexp) return;
    snug_op_matmul(f->pool, L->gate_shexp->type, L->gate_shexp->data, H, Fs, x, T, B.g, f->op_work);
    snug_op_matmul(f->pool, L->up_shexp->type, L->up_shexp->data, H, Fs, x, T, B.u, f->op_work);
    snug_op_swiglu(B.g, B.u, T * Fs, B.g);
    snug_op_matmul(f->pool, L->down_shexp->type, L->down_shexp->data, Fs, H, B.g, T, B.d,
                   f->op_work);
    snug_op_matmul(f->pool, L->gate_inp_shexp->type, L->gate_inp_shexp->data, H, 1, x, T, B.sgate,
                   f->op_work);
    for (int64_t t = 0; t < T; t++) {
        float s = snug_sigmoid(B.sgate[t]);
        for (int64_t c = 0; c < H; c++) y[t * H + c] += s * B.d[t * H + c];
    }
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
