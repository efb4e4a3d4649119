/* qwen35_mtp.c — the multi-token-prediction (MTP) block of the qwen35 family (docs/qwen35.md §3.2):
 * e = norm(E[x_{p+1}]; enorm), hn = norm(h_p; hnorm), c = eh_proj·[e, hn], one gated-attention
 * decoder layer (own KV cache, the architecture's FFN) at RoPE position p,
 * h' = norm(c; shared_head_norm), logits = output·h'. After an image (f->rope3, f->embd_rows:
 * host memory, uploaded on a device as the trunk's step does) the rotary takes the trunk's 3-D
 * positions of row p and x_{p+1}'s embedding is the image's projector row when it is one (as
 * vLLM's Qwen3.5 MTP: docs/spec-decode.md). Used by both qwen35 and qwen35moe (their
 * mtp_forward entries pass their FFN). Only the first MTP block is used
 * (like vLLM's `spec_step_idx % num_mtp_layers` with one layer and llama.cpp's n_layer_nextn == 1).
 * Every op goes through the step's backend (backend.h), so the block runs on the CPU or the
 * GPU unchanged: f->mtp_hidden_in and the run's hidden_out and kv live in the backend's memory,
 * f->logits on the host (or, for a draft, only the argmax of the last row, f->argmax_be).
 * Invariant: scratch comes from mtp_buffers, which snug_qwen35_mtp_work_bytes (the plan) also runs,
 * so a planned work arena always holds an MTP step of n_chunk positions. Read next: src/model/mtp.c
 * (drafting), src/speculative/speculative.c (verification), qwen35.c (the trunk).
 */
#include "arch/qwen35.h"

#include "backend/cpu/ops.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

/* Scratch of one MTP step of T positions. */
struct mtp_bufs {
    float *cat; /* [T][2H] normed embedding | normed hidden */
    float *x;   /* [T][H] residual stream of the MTP layer */
    float *xn;  /* [T][H] normed input of the mixer / FFN */
    float *y;   /* [T][H] mixer / FFN output (first: the embedding rows) */
    float *qg;  /* [T][Hq][2D] query|gate per head */
    float *q;   /* [T][Hq][D] */
    float *k;   /* [T][Hkv][D] */
    float *v;   /* [T][Hkv][D] */
    float *att; /* [T][Hq][D] */
    float *lg;  /* [min(T, MTP_LG_ROWS)][V] logits staging (backends off the host) */
    /* [T][3] the step's 3-D rotary positions in the backend's memory (uploaded from f->rope3 on
     * a device backend; unused on the CPU, which reads f->rope3 itself) */
    int32_t *pos3;
    void *op_work;
};

/* Logits rows computed per slice on a device backend before they are copied to the host. */
#define MTP_LG_ROWS SNUG_FWD_LG_ROWS

/* Scratch of any backend op of the MTP layer or its FFN over T tokens: the largest matmul input
 * width (eh_proj reads 2H), the attention of any cache format, the MoE expert products. */
static size_t mtp_op_work_bytes(const struct snug_hparams *hp, int32_t T, int32_t n_threads) {
    int64_t n_in = 2 * (int64_t)hp->n_embd;
    n_in = SNUG_MAX(n_in, (int64_t)hp->n_head * hp->head_dim);
    n_in = SNUG_MAX(n_in, (int64_t)hp->n_ff);
    n_in = SNUG_MAX(n_in, (int64_t)hp->n_ff_exp);
    n_in = SNUG_MAX(n_in, (int64_t)hp->n_ff_shexp);
    size_t b = snug_op_matmul_work_bytes(n_in, n_threads);
    b = SNUG_MAX(b, snug_op_attention_work_bytes(hp->head_dim, n_threads));
    if (hp->n_expert)
        b = SNUG_MAX(b, snug_moe_matmul_work_bytes((int64_t)T * hp->n_expert_used, n_in));
    return SNUG_MAX(b, snug_op_kvq_attention_work_bytes(hp->head_dim, n_threads));
}

/* Lay out (a != NULL) or just count (a == NULL) the scratch; returns the bytes. */
static size_t mtp_buffers(const struct snug_hparams *hp, int32_t T, int32_t n_threads,
                          struct snug_arena *a, struct mtp_bufs *o) {
    size_t t = (size_t)T, H = hp->n_embd, Hq = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim;
    size_t lg_rows = (size_t)SNUG_MIN(T, MTP_LG_ROWS);
    size_t sz[] = {t * 2 * H * 4,
                   t * H * 4,
                   t * H * 4,
                   t * H * 4,
                   t * Hq * 2 * D * 4,
                   t * Hq * D * 4,
                   t * Hkv * D * 4,
                   t * Hkv * D * 4,
                   t * Hq * D * 4,
                   lg_rows * hp->n_vocab * 4,
                   t * 3 * sizeof(int32_t),
                   mtp_op_work_bytes(hp, T, n_threads)};
    void **dst[] = {(void **)&o->cat, (void **)&o->x,  (void **)&o->xn,   (void **)&o->y,
                    (void **)&o->qg,  (void **)&o->q,  (void **)&o->k,    (void **)&o->v,
                    (void **)&o->att, (void **)&o->lg, (void **)&o->pos3, &o->op_work};
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

#define OP(name, ...) (be->ops->name(be, __VA_ARGS__))

static void matmul(struct snug_fwd *f, snug_tensor w, const float *x, int64_t T, float *y) {
    struct snug_be *be = snug_fwd_be(f);
    OP(matmul, w->type, OP(weight, w, 0), (int64_t)w->ne[0], (int64_t)w->ne[1], x, T, y,
       f->op_work);
}

/* A float32 vector weight in the backend's memory. */
static const float *f32(struct snug_fwd *f, snug_tensor t) {
    struct snug_be *be = snug_fwd_be(f);
    return (const float *)OP(weight, t, 0);
}

/* The MTP layer's gated attention (docs/qwen35.md §2.4, same as a trunk attention layer): q|gate
 * per head, q/k RMSNorm, partial NeoX RoPE at the target positions, store into the MTP cache,
 * causal GQA attention over it, sigmoid gate, output projection. B->xn → B->y. */
static void mtp_attention(struct snug_fwd *f, const struct snug_layer *L, struct mtp_bufs *B) {
    const struct snug_hparams *hp = &f->m->hp;
    struct snug_be *be = snug_fwd_be(f);
    int64_t T = f->T, Hq = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim;
    const struct snug_fwd_run *run = &f->runs[0]; /* (an MTP step is one run) */
    struct snug_kv_view *kv = &run->kv->views[0];
    const int32_t *pos = f->pos_be ? f->pos_be : f->pos;
    matmul(f, L->wq, B->xn, T, B->qg);
    matmul(f, L->wk, B->xn, T, B->k);
    matmul(f, L->wv, B->xn, T, B->v);
    OP(copy2d, B->q, D, B->qg, 2 * D, D, T * Hq); /* the query half of each head */
    OP(rmsnorm, B->q, f32(f, L->q_norm), hp->rms_eps, T * Hq, D, B->q);
    OP(rmsnorm, B->k, f32(f, L->k_norm), hp->rms_eps, T * Hkv, D, B->k);
    if (f->rope3) { /* after an image: the trunk's 3-D positions, in the backend's memory */
        const int32_t *pos3 = be->host_memory ? f->rope3 : B->pos3;
        OP(rope_mrope, B->q, T, Hq, D, hp->n_rot, pos3, hp->rope_sections, hp->rope_base);
        OP(rope_mrope, B->k, T, Hkv, D, hp->n_rot, pos3, hp->rope_sections, hp->rope_base);
    } else {
        OP(rope_neox, B->q, T, Hq, D, hp->n_rot, pos, hp->rope_base);
        OP(rope_neox, B->k, T, Hkv, D, hp->n_rot, pos, hp->rope_base);
    }
    OP(kv_store, kv, Hkv, D, run->pos0, f->pos_be, T, B->k, B->v);
    OP(attention, kv, Hq, Hkv, D, run->pos0, f->pos_be, T, B->q, 1.0f / sqrtf((float)D), B->att,
       f->op_work);
    OP(copy2d, B->q, D, B->qg + D, 2 * D, D, T * Hq); /* the gate half, into q (now free) */
    OP(sigmoid_mul, B->att, B->q, T * Hq * D, B->att);
    matmul(f, L->wo, B->att, T, B->y);
}

/* One MTP step over f->T consecutive positions of one run, f->runs[0] (see the file comment). */
void snug_qwen35_mtp_forward_common(struct snug_fwd *f, snug_qwen35_ffn_fn ffn) {
    const struct snug_model *m = f->m;
    const struct snug_hparams *hp = &m->hp;
    const struct snug_layer *L = &m->layers[hp->n_layer];
    struct snug_be *be = snug_fwd_be(f);
    int64_t T = f->T, H = hp->n_embd;
    struct mtp_bufs B;
    mtp_buffers(hp, f->T, f->n_threads, f->work, &B);
    f->op_work = B.op_work;

    /* [e | hn]: the embedding of x_{p+1} first, the hidden state second (docs/qwen35.md §3.2); each
     * normed row by row into xn, then placed into its half of cat */
    OP(embed, m->tok_embd, f->ids, f->ids_be, T, H, B.y);
    if (f->embd_rows) /* x_{p+1} is an image's row: its projector row, as the trunk's input */
        snug_qwen35_place_rows(f, B.y);
    if (f->rope3 && !be->host_memory) /* the 3-D positions beside the 1-D ones (pos_be) */
        OP(upload, B.pos3, f->rope3, (size_t)T * 3 * sizeof(int32_t));
    OP(rmsnorm, B.y, f32(f, L->nextn_enorm), hp->rms_eps, T, H, B.xn);
    OP(copy2d, B.cat, 2 * H, B.xn, H, H, T);
    OP(rmsnorm, f->mtp_hidden_in, f32(f, L->nextn_hnorm), hp->rms_eps, T, H, B.xn);
    OP(copy2d, B.cat + H, 2 * H, B.xn, H, H, T);
    matmul(f, L->nextn_eh_proj, B.cat, T, B.x);

    /* the decoder layer: pre-norm attention + residual, pre-norm FFN + residual (§2.2) */
    OP(rmsnorm, B.x, f32(f, L->attn_norm), hp->rms_eps, T, H, B.xn);
    mtp_attention(f, L, &B);
    OP(add_rmsnorm, B.x, B.y, f32(f, L->post_norm), hp->rms_eps, T, H, B.xn);
    size_t mark = snug_arena_mark(f->work);
    struct snug_arena *hw = snug_fwd_host_work(f);
    size_t hmark = snug_arena_mark(hw);
    ffn(f, L, B.xn, B.y);
    snug_arena_reset_to(f->work, mark);
    snug_arena_reset_to(hw, hmark);

    /* h' feeds both the shared LM head and the next drafting step */
    OP(add_rmsnorm, B.x, B.y, f32(f, L->nextn_shared_head_norm), hp->rms_eps, T, H, B.xn);
    float *hout = f->runs[0].hidden_out;
    if (hout) OP(copy, hout, B.xn, (size_t)(T * H) * sizeof(float));
    if (f->logits) snug_fwd_logits(f, B.xn, B.lg);
    if (f->argmax_be) { /* the draft's token, kept in the backend's memory (a product of its
                           own: with f->logits too, a test's, lg may be the host's rows) */
        matmul(f, m->output, B.xn + (T - 1) * H, 1, B.lg);
        OP(argmax, B.lg, 1, (int64_t)hp->n_vocab, f->argmax_be);
    }
}
