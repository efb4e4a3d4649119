/* qwen35_mtp.c — the multi-token-prediction (MTP) block of the qwen35 family (spec §3.2):
 * e = norm(E[x_{p+1}]; enorm), hn = norm(h_p; hnorm), c = eh_proj·[e, hn], one gated-attention
 * decoder layer (own KV cache, the architecture's FFN) at RoPE position p,
 * h' = norm(c; shared_head_norm), logits = output·h'. Used by both qwen35 and qwen35moe
 * (their mtp_forward entries pass their FFN). Only the first MTP block is used (like vLLM's
 * `spec_step_idx % num_mtp_layers` with one layer and llama.cpp's n_layer_nextn == 1).
 * Invariant: scratch comes from mtp_buffers, which snug_qwen35_mtp_work_bytes (the plan) also
 * runs, so a planned work arena always holds an MTP step of n_chunk positions.
 * Read next: src/spec/spec.c (drafting and verification), qwen35.c (the trunk).
 */
#include "model/model.h"

#include "quant/quant.h"

#include <math.h>
#include <string.h>

/* Scratch of one MTP step of T positions. */
struct mtp_bufs {
    float *cat; /* [T][2H] normed embedding | normed hidden */
    float *x;   /* [T][H] residual stream of the MTP layer */
    float *xn;  /* [T][H] normed input of the mixer / FFN */
    float *y;   /* [T][H] mixer / FFN output */
    float *qg;  /* [T][Hq][2D] query|gate per head */
    float *q;   /* [T][Hq][D] */
    float *k;   /* [T][Hkv][D] */
    float *v;   /* [T][Hkv][D] */
    float *att; /* [T][Hq][D] */
    void *op_work;
};

/* Scratch of any ops.h call of the MTP layer or its FFN (the largest matmul input width). */
static size_t mtp_op_work_bytes(const struct snug_hparams *hp, int32_t n_threads) {
    int64_t n_in = 2 * (int64_t)hp->n_embd;
    n_in = SNUG_MAX(n_in, (int64_t)hp->n_head * hp->head_dim);
    n_in = SNUG_MAX(n_in, (int64_t)hp->n_ff);
    n_in = SNUG_MAX(n_in, (int64_t)hp->n_ff_exp);
    n_in = SNUG_MAX(n_in, (int64_t)hp->n_ff_shexp);
    size_t b = snug_op_matmul_work_bytes(n_in, n_threads);
    return SNUG_MAX(b, snug_op_attention_work_bytes(hp->head_dim, n_threads));
}

/* Lay out (a != NULL) or just count (a == NULL) the scratch; returns the bytes. */
static size_t mtp_buffers(const struct snug_hparams *hp, int32_t T, int32_t n_threads,
                          struct snug_arena *a, struct mtp_bufs *o) {
    size_t t = (size_t)T, H = hp->n_embd, Hq = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim;
    size_t sz[] = {t * 2 * H * 4,      t * H * 4,
                   t * H * 4,          t * H * 4,
                   t * Hq * 2 * D * 4, t * Hq * D * 4,
                   t * Hkv * D * 4,    t * Hkv * D * 4,
                   t * Hq * D * 4,     mtp_op_work_bytes(hp, n_threads)};
    void **dst[] = {(void **)&o->cat, (void **)&o->x, (void **)&o->xn, (void **)&o->y,
                    (void **)&o->qg,  (void **)&o->q, (void **)&o->k,  (void **)&o->v,
                    (void **)&o->att, &o->op_work};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
        total += SNUG_ALIGN_UP(sz[i], 64);
        if (a) *dst[i] = snug_arena_alloc(a, sz[i], 64);
    }
    return total;
}

size_t snug_qwen35_mtp_work_bytes(const struct snug_hparams *hp, int32_t T, int32_t n_threads) {
    struct mtp_bufs o;
    return hp->n_nextn ? mtp_buffers(hp, T, n_threads, NULL, &o) : 0;
}

static void matmul(struct snug_fwd *f, snug_tensor w, const float *x, int64_t T, float *y) {
    snug_op_matmul(f->pool, w->type, w->data, (int64_t)w->ne[0], (int64_t)w->ne[1], x, T, y,
                   f->op_work);
}

static const float *f32(snug_tensor t) {
    return (const float *)t->data;
}

/* The MTP layer's gated attention (spec §2.4, same as a trunk attention layer): q|gate per
 * head, q/k RMSNorm, partial NeoX RoPE at the target positions, store into the MTP cache,
 * causal GQA attention over it, sigmoid gate, output projection. B->xn → B->y. */
static void mtp_attention(struct snug_fwd *f, const struct snug_layer *L, struct mtp_bufs *B) {
    const struct snug_hparams *hp = &f->m->hp;
    int64_t T = f->T, Hq = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim;
    struct snug_kv_view *kv = &f->kv->views[0];
    matmul(f, L->wq, B->xn, T, B->qg);
    matmul(f, L->wk, B->xn, T, B->k);
    matmul(f, L->wv, B->xn, T, B->v);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hq; h++)
            memcpy(B->q + (t * Hq + h) * D, B->qg + (t * Hq + h) * 2 * D, (size_t)D * 4);
    snug_op_rmsnorm(B->q, f32(L->q_norm), hp->rms_eps, T * Hq, D, B->q);
    snug_op_rmsnorm(B->k, f32(L->k_norm), hp->rms_eps, T * Hkv, D, B->k);
    snug_op_rope_neox(B->q, T, Hq, D, hp->n_rot, f->pos, hp->rope_base);
    snug_op_rope_neox(B->k, T, Hkv, D, hp->n_rot, f->pos, hp->rope_base);
    snug_op_kv_store(kv, Hkv, D, f->pos0, T, B->k, B->v);
    snug_op_attention(f->pool, kv, Hq, Hkv, D, f->pos0, T, B->q, 1.0f / sqrtf((float)D), B->att,
                      f->op_work);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hq; h++) {
            float *a = B->att + (t * Hq + h) * D;
            const float *g = B->qg + (t * Hq + h) * 2 * D + D;
            for (int64_t d = 0; d < D; d++) a[d] *= snug_sigmoid(g[d]);
        }
    matmul(f, L->wo, B->att, T, B->y);
}

/* One MTP step over f->T consecutive positions f->pos0.. (see the file comment). */
void snug_qwen35_mtp_forward_common(struct snug_fwd *f, snug_qwen35_ffn_fn ffn) {
    const struct snug_model *m = f->m;
    const struct snug_hparams *hp = &m->hp;
    const struct snug_layer *L = &m->layers[hp->n_layer];
    int64_t T = f->T, H = hp->n_embd;
    struct mtp_bufs B;
    mtp_buffers(hp, f->T, f->n_threads, f->work, &B);
    f->op_work = B.op_work;

    /* [e | hn]: the embedding of x_{p+1} first, the hidden state second (spec §3.2) */
    uint64_t erow = snug_dtype_row_bytes(m->tok_embd->type, (uint64_t)H);
    for (int64_t t = 0; t < T; t++) {
        float *row = B.cat + t * 2 * H;
        snug_dequantize_row(m->tok_embd->type,
                            (const uint8_t *)m->tok_embd->data + (uint64_t)f->ids[t] * erow, row,
                            H);
        snug_op_rmsnorm(row, f32(L->nextn_enorm), hp->rms_eps, 1, H, row);
        snug_op_rmsnorm(f->mtp_hidden_in + t * H, f32(L->nextn_hnorm), hp->rms_eps, 1, H, row + H);
    }
    matmul(f, L->nextn_eh_proj, B.cat, T, B.x);

    /* the decoder layer: pre-norm attention + residual, pre-norm FFN + residual (§2.2) */
    snug_op_rmsnorm(B.x, f32(L->attn_norm), hp->rms_eps, T, H, B.xn);
    mtp_attention(f, L, &B);
    for (int64_t i = 0; i < T * H; i++) B.x[i] += B.y[i];
    snug_op_rmsnorm(B.x, f32(L->post_norm), hp->rms_eps, T, H, B.xn);
    size_t mark = snug_arena_mark(f->work);
    ffn(f, L, B.xn, B.y);
    snug_arena_reset_to(f->work, mark);
    for (int64_t i = 0; i < T * H; i++) B.x[i] += B.y[i];

    /* h' feeds both the shared LM head and the next drafting step */
    snug_op_rmsnorm(B.x, f32(L->nextn_shared_head_norm), hp->rms_eps, T, H, B.xn);
    if (f->hidden_out) memcpy(f->hidden_out, B.xn, (size_t)(T * H) * sizeof(float));
    if (!f->logits) return;
    if (f->logits_all)
        matmul(f, m->output, B.xn, T, f->logits);
    else
        matmul(f, m->output, B.xn + (T - 1) * H, 1, f->logits);
}
