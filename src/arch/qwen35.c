/* qwen35.c — the Qwen3.5/3.6 hybrid trunk (Gated DeltaNet + gated attention, docs/qwen35.md §2) and
 * the dense `qwen35` architecture (SwiGLU FFN). The MoE file (qwen35moe.c) reuses the trunk and
 * supplies its own FFN. Three things per architecture: load (map + shape-check tensors), plan
 * (every buffer the forward needs), forward (straight-line ops over one chunk of tokens).
 * Invariant: plan and forward size their buffers through the same *_buffers functions, so the
 * work arena planned at context init always holds a step of n_chunk tokens.
 * Read next: qwen35moe.c, src/backend/cpu/ops.h (the ops called here), docs/qwen35.md §2.
 */
#include "arch/qwen35.h"

#include "backend/cpu/ops.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

/* ---- scratch layout ----------------------------------------------------------------------- */
/* A bump over the work arena that can also just count (a == NULL): the plan calls the same
 * buffer functions as the forward pass, with a == NULL, to get exact sizes. */
struct bump {
    struct snug_arena *a;
    size_t bytes;
};
static void *bump_alloc(struct bump *b, size_t bytes) {
    b->bytes += SNUG_ALIGN_UP(bytes, 64);
    return b->a ? snug_arena_alloc(b->a, bytes, 64) : NULL;
}
static float *bump_f32(struct bump *b, int64_t n) {
    return bump_alloc(b, (size_t)n * sizeof(float));
}

/* Trunk activations of one step of T tokens. Shapes in ops.h notation ([rows][cols]). */
struct trunk_bufs {
    float *x;   /* [T][H] residual stream */
    float *xn;  /* [T][H] normed input of a mixer / FFN */
    float *y;   /* [T][H] mixer / FFN output */
    float *qg;  /* [T][Hq][2D] query|gate per head */
    float *q;   /* [T][Hq][D] */
    float *k;   /* [T][Hkv][D] */
    float *v;   /* [T][Hkv][D] */
    float *att; /* [T][Hq][D] */
    float *mix; /* [T][conv_dim] in_proj_qkv output */
    float *u;   /* [T][conv_dim] after conv + SiLU */
    float *z;   /* [T][Nv·dv] */
    float *bb;  /* [T][Nv] beta logits, then β */
    float *aa;  /* [T][Nv] alpha, then g */
    float *qd;  /* [T][Nk][dk] */
    float *kd;  /* [T][Nk][dk] */
    float *vd;  /* [T][Nv][dv] */
    float *o;   /* [T][Nv][dv] delta-rule output */
    float *on;  /* [T][Nv][dv] gated-normed output */
    float *lg;  /* [LG_ROWS][V] logits staging (backends whose memory is not the host's) */
    /* [T][3] a multimodal step's rotary positions (t, h, w) in the backend's memory (uploaded
     * from f->rope3 on a device backend; unused on the CPU) */
    int32_t *pos3;
    void *op_work;
};

/* Logits rows computed per slice on a device backend before they are copied to the host. */
#define LG_ROWS   SNUG_FWD_LG_ROWS
#define RUN_BATCH 16 /* runs per conv_silu_runs / delta_decode_runs call */

/* Scratch bytes any ops.h call of the trunk or FFN of a step of T tokens may need (matmul,
 * attention, delta, the MoE expert products over T·k rows). */
static size_t op_work_bytes(const struct snug_hparams *hp, int32_t T, int32_t n_threads) {
    int64_t n_in = hp->n_embd;
    n_in = SNUG_MAX(n_in, (int64_t)hp->n_head * hp->head_dim);
    n_in = SNUG_MAX(n_in, (int64_t)hp->ssm_d_inner);
    n_in = SNUG_MAX(n_in, (int64_t)hp->n_ff);
    n_in = SNUG_MAX(n_in, (int64_t)hp->n_ff_exp);
    n_in = SNUG_MAX(n_in, (int64_t)hp->n_ff_shexp);
    n_in = SNUG_MAX(n_in, 2 * (int64_t)hp->n_embd); /* MTP eh_proj */
    size_t b = snug_op_matmul_work_bytes(n_in, n_threads);
    b = SNUG_MAX(b, snug_op_kvq_attention_work_bytes(hp->head_dim, n_threads));
    b = SNUG_MAX(b, snug_op_gated_delta_work_bytes(hp->ssm_d_state, hp->ssm_d_state, n_threads));
    if (hp->n_expert)
        b = SNUG_MAX(b, snug_moe_matmul_work_bytes((int64_t)T * hp->n_expert_used,
                                                   SNUG_MAX((int64_t)hp->n_embd, n_in)));
    return b;
}

static void trunk_buffers(const struct snug_hparams *hp, int32_t T, int32_t n_threads,
                          struct bump *b, struct trunk_bufs *o) {
    int64_t H = hp->n_embd, Hq = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim;
    int64_t cd = snug_hp_conv_dim(hp), Nv = hp->ssm_dt_rank, Nk = hp->ssm_n_group;
    int64_t dk = hp->ssm_d_state, di = hp->ssm_d_inner;
    o->x = bump_f32(b, T * H);
    o->xn = bump_f32(b, T * H);
    o->y = bump_f32(b, T * H);
    if (snug_hp_n_attn_layers(hp) || hp->n_nextn) {
        o->qg = bump_f32(b, T * Hq * 2 * D);
        o->q = bump_f32(b, T * Hq * D);
        o->k = bump_f32(b, T * Hkv * D);
        o->v = bump_f32(b, T * Hkv * D);
        o->att = bump_f32(b, T * Hq * D);
    }
    if (snug_hp_n_rec_layers(hp)) {
        o->mix = bump_f32(b, T * cd);
        o->u = bump_f32(b, T * cd);
        o->z = bump_f32(b, T * di);
        o->bb = bump_f32(b, T * Nv);
        o->aa = bump_f32(b, T * Nv);
        o->qd = bump_f32(b, T * Nk * dk);
        o->kd = bump_f32(b, T * Nk * dk);
        o->vd = bump_f32(b, T * di);
        o->o = bump_f32(b, T * di);
        o->on = bump_f32(b, T * di);
    }
    o->lg = bump_f32(b, (int64_t)SNUG_MIN(T, LG_ROWS) * hp->n_vocab);
    o->pos3 = bump_alloc(b, (size_t)T * 3 * sizeof(int32_t));
    o->op_work = bump_alloc(b, op_work_bytes(hp, T, n_threads));
}

size_t snug_qwen35_trunk_work_bytes(const struct snug_hparams *hp, int32_t T, int32_t n_threads) {
    struct bump b = {0};
    struct trunk_bufs o;
    trunk_buffers(hp, T, n_threads, &b, &o);
    return b.bytes;
}

/* ---- load --------------------------------------------------------------------------------- */
#define BT(field, suffix, f32, nd, a, b_, c)                                                       \
    do {                                                                                           \
        rc = snug_model_blk_tensor(m, &L->field, il, suffix, true, f32, nd, a, b_, c, err);        \
        if (rc) return rc;                                                                         \
    } while (0)

/* The gated-attention tensors of block il (trunk attention layer or MTP block). */
static int load_attention(struct snug_model *m, struct snug_layer *L, int il,
                          struct snug_err *err) {
    const struct snug_hparams *hp = &m->hp;
    int64_t H = hp->n_embd, Hq = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim;
    int rc;
    BT(wq, "attn_q.weight", false, 2, H, 2 * Hq * D, 1);
    BT(wk, "attn_k.weight", false, 2, H, Hkv * D, 1);
    BT(wv, "attn_v.weight", false, 2, H, Hkv * D, 1);
    BT(wo, "attn_output.weight", false, 2, Hq * D, H, 1);
    BT(q_norm, "attn_q_norm.weight", true, 1, D, 1, 1);
    BT(k_norm, "attn_k_norm.weight", true, 1, D, 1, 1);
    return SNUG_OK;
}

/* Map the trunk: embeddings, output head, every layer's norms and mixer, and the MTP blocks'
 * attention and nextn.* tensors (kept for speculative decoding). FFN tensors are the
 * architecture's own (see load_dense_ffn and qwen35moe.c). */
int snug_qwen35_load_trunk(struct snug_model *m, struct snug_err *err) {
    struct snug_hparams *hp = &m->hp;
    int64_t H = hp->n_embd, K = hp->conv_kernel, cd = snug_hp_conv_dim(hp);
    int64_t Nv = hp->ssm_dt_rank, dv = hp->ssm_d_state, di = hp->ssm_d_inner;
    int rc;
    const struct snug_gguf_tensor *te = snug_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te) return snug_err_set(err, SNUG_ERR_FORMAT, "tensor 'token_embd.weight' is missing");
    if (te->ne[1] == 0 || te->ne[1] > INT32_MAX)
        return snug_err_set(err, SNUG_ERR_FORMAT, "tensor 'token_embd.weight': vocabulary of %llu",
                            (unsigned long long)te->ne[1]);
    hp->n_vocab = (uint32_t)te->ne[1];
    int64_t V = hp->n_vocab;
    rc = snug_model_tensor(m, &m->tok_embd, "token_embd.weight", true, false, 2, H, V, 1, err);
    if (rc) return rc;
    rc = snug_model_tensor(m, &m->output_norm, "output_norm.weight", true, true, 1, H, 1, 1, err);
    if (rc) return rc;
    rc = snug_model_tensor(m, &m->output, "output.weight", false, false, 2, H, V, 1, err);
    if (rc) return rc;
    if (!m->output) m->output = m->tok_embd; /* tied embeddings */

    m->n_attn_layers = m->n_rec_layers = 0;
    for (uint32_t i = 0; i < hp->n_layer_all; i++) {
        struct snug_layer *L = &m->layers[i];
        int il = (int)i;
        L->recurrent = hp->recurrent[i];
        L->attn_idx = L->rec_idx = -1;
        BT(attn_norm, "attn_norm.weight", true, 1, H, 1, 1);
        BT(post_norm, "post_attention_norm.weight", true, 1, H, 1, 1);
        if (i >= hp->n_layer) { /* MTP block: a full-attention layer plus the nextn tensors */
            rc = load_attention(m, L, il, err);
            if (rc) return rc;
            BT(nextn_eh_proj, "nextn.eh_proj.weight", false, 2, 2 * H, H, 1);
            BT(nextn_enorm, "nextn.enorm.weight", true, 1, H, 1, 1);
            BT(nextn_hnorm, "nextn.hnorm.weight", true, 1, H, 1, 1);
            rc = snug_model_blk_tensor(m, &L->nextn_shared_head_norm, il,
                                       "nextn.shared_head_norm.weight", false, true, 1, H, 1, 1,
                                       err);
            if (rc) return rc;
            if (!L->nextn_shared_head_norm) L->nextn_shared_head_norm = m->output_norm;
        } else if (L->recurrent) {
            L->rec_idx = (int32_t)m->n_rec_layers++;
            BT(ssm_qkv, "attn_qkv.weight", false, 2, H, cd, 1);
            BT(ssm_z, "attn_gate.weight", false, 2, H, di, 1);
            BT(ssm_conv, "ssm_conv1d.weight", true, 2, K, cd, 1);
            BT(ssm_dt, "ssm_dt.bias", true, 1, Nv, 1, 1);
            BT(ssm_a, "ssm_a", true, 1, Nv, 1, 1);
            BT(ssm_beta, "ssm_beta.weight", false, 2, H, Nv, 1);
            BT(ssm_alpha, "ssm_alpha.weight", false, 2, H, Nv, 1);
            BT(ssm_norm, "ssm_norm.weight", true, 1, dv, 1, 1);
            BT(ssm_out, "ssm_out.weight", false, 2, di, H, 1);
        } else {
            L->attn_idx = (int32_t)m->n_attn_layers++;
            rc = load_attention(m, L, il, err);
            if (rc) return rc;
        }
    }
    return SNUG_OK;
}

static int qwen35_load(struct snug_model *m, struct snug_err *err) {
    int rc = snug_qwen35_load_trunk(m, err);
    if (rc) return rc;
    const struct snug_hparams *hp = &m->hp;
    int64_t H = hp->n_embd, F = hp->n_ff;
    if (F == 0)
        return snug_err_set(err, SNUG_ERR_FORMAT, "%s.feed_forward_length is missing or 0",
                            hp->arch);
    for (uint32_t i = 0; i < hp->n_layer_all; i++) {
        struct snug_layer *L = &m->layers[i];
        int il = (int)i;
        BT(ffn_gate, "ffn_gate.weight", false, 2, H, F, 1);
        BT(ffn_up, "ffn_up.weight", false, 2, H, F, 1);
        BT(ffn_down, "ffn_down.weight", false, 2, F, H, 1);
    }
    return SNUG_OK;
}
#undef BT

/* ---- plan --------------------------------------------------------------------------------- */
void snug_qwen35_plan_common(const struct snug_hparams *hp, int32_t n_chunk, int32_t n_threads,
                             enum snug_kv_type kv_type, size_t ffn_work_bytes,
                             struct snug_arch_plan *out) {
    struct snug_kv_shape s = {
        .n_attn = (int32_t)snug_hp_n_attn_layers(hp),
        .n_head_kv = (int32_t)hp->n_head_kv,
        .head_dim = (int32_t)hp->head_dim,
        .n_ctx = 1,
        .type = kv_type == SNUG_KV_F32 ? SNUG_DTYPE_F32 : SNUG_DTYPE_F16,
        .fmt = kv_type, /* a kvfmt code: the K/V formats (src/kv/kvfmt.h) */
        .n_rec = (int32_t)snug_hp_n_rec_layers(hp),
        .conv_elems = (int64_t)(hp->conv_kernel - 1) * snug_hp_conv_dim(hp),
        .delta_elems = (int64_t)hp->ssm_dt_rank * hp->ssm_d_state * hp->ssm_d_state,
    };
    /* a step is either a trunk step or an MTP step (speculative decoding), never both */
    size_t trunk = snug_qwen35_trunk_work_bytes(hp, n_chunk, n_threads);
    size_t mtp = snug_qwen35_mtp_work_bytes(hp, n_chunk, n_threads);
    out->work_bytes = SNUG_MAX(trunk, mtp) + ffn_work_bytes;
    out->kv_bytes_per_token = snug_kv_bytes_per_token(&s);
    out->state_bytes = snug_kv_state_bytes(&s);
}

/* Dense SwiGLU FFN scratch: gate and up, [T][F] each. */
static void dense_ffn_buffers(const struct snug_hparams *hp, int32_t T, struct bump *b,
                              float **gate, float **up) {
    *gate = bump_f32(b, (int64_t)T * hp->n_ff);
    *up = bump_f32(b, (int64_t)T * hp->n_ff);
}

static void qwen35_plan(const struct snug_hparams *hp, int32_t n_chunk, int32_t n_threads,
                        enum snug_kv_type kv_type, struct snug_arch_plan *out) {
    struct bump b = {0};
    float *g, *u;
    dense_ffn_buffers(hp, n_chunk, &b, &g, &u);
    snug_qwen35_plan_common(hp, n_chunk, n_threads, kv_type, b.bytes, out);
}

/* ---- forward pieces ----------------------------------------------------------------------- */
/* Every op goes through the step's backend (backend.h); activations live in its memory. */
#define OP(name, ...) (be->ops->name(be, __VA_ARGS__))

static void matmul(struct snug_fwd *f, snug_tensor w, const float *x, int64_t T, float *y) {
    struct snug_be *be = snug_fwd_be(f);
    if (f->mm_obs) f->mm_obs->dense(f->mm_obs->user, w, x, T); /* snug imatrix (model.h) */
    OP(matmul, w->type, OP(weight, w, 0), (int64_t)w->ne[0], (int64_t)w->ne[1], x, T, y,
       f->op_work);
}

void snug_qwen35_matmul_precise(struct snug_fwd *f, snug_tensor w, snug_tensor w2, const float *x,
                                int64_t T, float *y, float *y2) {
    struct snug_be *be = snug_fwd_be(f);
    bool pair = w2 && w2->type == w->type && w2->ne[0] == w->ne[0];
    if (f->mm_obs) { /* snug imatrix (model.h) */
        f->mm_obs->dense(f->mm_obs->user, w, x, T);
        if (pair) f->mm_obs->dense(f->mm_obs->user, w2, x, T);
    }
    OP(matmul_precise, w->type, OP(weight, w, 0), (int64_t)w->ne[1],
       pair ? OP(weight, w2, 0) : NULL, pair ? (int64_t)w2->ne[1] : 0, (int64_t)w->ne[0], x, T, y,
       pair ? y2 : NULL, f->op_work);
    if (w2 && !pair) snug_qwen35_matmul_precise(f, w2, NULL, x, T, y2, NULL);
}

void snug_qwen35_matmul_pair(struct snug_fwd *f, snug_tensor w, snug_tensor w2, const float *x,
                             int64_t T, float *y, float *y2) {
    struct snug_be *be = snug_fwd_be(f);
    if (w2->type != w->type || w2->ne[0] != w->ne[0]) {
        matmul(f, w, x, T, y);
        matmul(f, w2, x, T, y2);
        return;
    }
    if (f->mm_obs) { /* snug imatrix (model.h) */
        f->mm_obs->dense(f->mm_obs->user, w, x, T);
        f->mm_obs->dense(f->mm_obs->user, w2, x, T);
    }
    OP(matmul_pair, w->type, OP(weight, w, 0), (int64_t)w->ne[1], OP(weight, w2, 0),
       (int64_t)w2->ne[1], (int64_t)w->ne[0], x, T, y, y2, f->op_work);
}

/* A float32 vector weight in the backend's memory. */
static const float *f32(struct snug_fwd *f, snug_tensor t) {
    struct snug_be *be = snug_fwd_be(f);
    return (const float *)OP(weight, t, 0);
}

/* Host view of n floats of backend memory: the buffer itself on the CPU, else a copy in the
 * host work arena (freed by the caller's arena mark). */
static const float *host_view(struct snug_fwd *f, const float *src, int64_t n) {
    struct snug_be *be = snug_fwd_be(f);
    if (be->host_memory) return src;
    float *h = snug_arena_alloc(snug_fwd_host_work(f), (size_t)n * sizeof(float), 64);
    OP(download, h, src, (size_t)n * sizeof(float));
    return h;
}

/* The rotary of a step whose rows carry 3-D positions (f->rope3: images in the prompt, or text
 * after them): interleaved M-RoPE over the GGUF's rope.dimension_sections (docs/vision.md step
 * 6), on the positions in the backend's memory (pos3: f->rope3 itself on the CPU, the step's
 * upload into the work arena on a device). */
static void rope_rows_3d(struct snug_fwd *f, const int32_t *pos3, float *x, int64_t n_heads) {
    const struct snug_hparams *hp = &f->m->hp;
    struct snug_be *be = snug_fwd_be(f);
    OP(rope_mrope, x, f->T, n_heads, hp->head_dim, hp->n_rot, pos3, hp->rope_sections,
       hp->rope_base);
}

/* The step's image rows (f->embd_rows, host memory) into x [T][H] in the backend's memory, in
 * place of those positions' embeddings: an image's rows are consecutive in its block, so each
 * run of them is one copy (an upload on a device). The trunk's input here and the MTP block's
 * (qwen35_mtp.c). */
void snug_qwen35_place_rows(struct snug_fwd *f, float *x) {
    struct snug_be *be = snug_fwd_be(f);
    int64_t H = f->m->hp.n_embd, T = f->T;
    for (int64_t t = 0; t < T;) {
        const float *src = f->embd_rows[t];
        if (!src) {
            t++;
            continue;
        }
        int64_t n = 1;
        while (t + n < T && f->embd_rows[t + n] == src + n * H) n++;
        size_t bytes = (size_t)(n * H) * sizeof(float);
        if (be->host_memory)
            memcpy(x + t * H, src, bytes);
        else
            OP(upload, x + t * H, src, bytes);
        t += n;
    }
}

/* x [T][H] = the token embeddings, then the image rows in place (snug_qwen35_place_rows). */
static void embed_rows(struct snug_fwd *f, float *x) {
    struct snug_be *be = snug_fwd_be(f);
    OP(embed, f->m->tok_embd, f->ids, f->ids_be, f->T, f->m->hp.n_embd, x);
    if (f->embd_rows) snug_qwen35_place_rows(f, x);
}

/* Gated attention (docs/qwen35.md §2.4): q|gate per head, q/k RMSNorm, partial NeoX RoPE over
 * every row of the step, then per run the cache store and causal GQA attention against the
 * run's own cache (any format), sigmoid output gate, output projection. xn [T][H] → y [T][H]. */
static void attention(struct snug_fwd *f, const struct snug_layer *L, struct trunk_bufs *B) {
    const struct snug_hparams *hp = &f->m->hp;
    struct snug_be *be = snug_fwd_be(f);
    int64_t T = f->T, Hq = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim;
    const int32_t *pos = f->pos_be ? f->pos_be : f->pos;
    float scale = 1.0f / sqrtf((float)D);
    /* q|gate and k over the same x: one launch where the two share a type (decode rows) */
    snug_qwen35_matmul_pair(f, L->wq, L->wk, B->xn, T, B->qg, B->k);
    matmul(f, L->wv, B->xn, T, B->v);
    OP(copy2d, B->q, D, B->qg, 2 * D, D, T * Hq); /* the query half of each head */
    OP(rmsnorm, B->q, f32(f, L->q_norm), hp->rms_eps, T * Hq, D, B->q);
    OP(rmsnorm, B->k, f32(f, L->k_norm), hp->rms_eps, T * Hkv, D, B->k);
    if (f->rope3) { /* multimodal rows: 3-D positions */
        const int32_t *pos3 = be->host_memory ? f->rope3 : B->pos3;
        rope_rows_3d(f, pos3, B->q, Hq);
        rope_rows_3d(f, pos3, B->k, Hkv);
    } else {
        OP(rope_neox, B->q, T, Hq, D, hp->n_rot, pos, hp->rope_base);
        OP(rope_neox, B->k, T, Hkv, D, hp->n_rot, pos, hp->rope_base);
    }
    for (int32_t r = 0; r < f->n_runs; r++) {
        const struct snug_fwd_run *run = &f->runs[r];
        struct snug_kv_view *kv = &run->kv->views[L->attn_idx];
        int64_t r0 = run->row0, n = run->T;
        const float *q = B->q + r0 * Hq * D;
        float *att = B->att + r0 * Hq * D;
        const int32_t *pb = f->pos_be ? f->pos_be + r0 : NULL; /* the run's positions */
        OP(kv_store, kv, Hkv, D, run->pos0, pb, n, B->k + r0 * Hkv * D, B->v + r0 * Hkv * D);
        if (run->snapshot && !be->host_memory) {
            /* a speculative verification on a device: the rows one by one, each as the decode
             * step at its position sees the cache (the CUDA kernel splits the positions by the
             * key count, so a row of a batched call sums in another order): the verified
             * logits and states are then plain decoding's bit for bit, as on the CPU */
            for (int64_t t = 0; t < n; t++)
                OP(attention, kv, Hq, Hkv, D, run->pos0 + t, pb ? pb + t : NULL, 1, q + t * Hq * D,
                   scale, att + t * Hq * D, f->op_work);
        } else {
            OP(attention, kv, Hq, Hkv, D, run->pos0, pb, n, q, scale, att, f->op_work);
        }
    }
    OP(copy2d, B->q, D, B->qg + D, 2 * D, D, T * Hq); /* the gate half, into q (now free) */
    OP(sigmoid_mul, B->att, B->q, T * Hq * D, B->att);
    matmul(f, L->wo, B->att, T, B->y);
}

/* The conv and the delta rule of a verification run (speculative decoding): the step
 * recurrence token by token, saving the states after token t into snapshot slot t, so a
 * partial acceptance can roll back to any of the run's positions (kv.h). Same numbers as T
 * single-token decode steps. The slots are in the backend's memory (device snapshots on CUDA:
 * kv.h's layout, copied there). */
static void conv_snapshots(struct snug_fwd *f, const struct snug_layer *L, struct trunk_bufs *B,
                           const struct snug_fwd_run *run, const float *convw) {
    const struct snug_hparams *hp = &f->m->hp;
    struct snug_be *be = snug_fwd_be(f);
    int64_t cd = snug_hp_conv_dim(hp);
    struct snug_kv *kv = run->kv;
    float *conv = snug_kv_conv_state(kv, L->rec_idx);
    SNUG_ASSERT(run->T <= kv->n_snap);
    for (int64_t t = 0; t < run->T; t++) {
        int64_t row = run->row0 + t;
        OP(conv_silu, B->mix + row * cd, 1, cd, hp->conv_kernel, convw, conv, B->u + row * cd);
        OP(copy, snug_kv_snap_conv(kv, (int32_t)t, L->rec_idx), conv,
           (size_t)kv->shape.conv_elems * sizeof(float));
    }
}
static void delta_snapshots(struct snug_fwd *f, const struct snug_layer *L,
                            const struct trunk_bufs *B, const struct snug_fwd_run *run) {
    const struct snug_hparams *hp = &f->m->hp;
    int64_t Nk = hp->ssm_n_group, Nv = hp->ssm_dt_rank, dk = hp->ssm_d_state, dv = dk;
    int64_t kd = Nk * dk, di = hp->ssm_d_inner;
    struct snug_be *be = snug_fwd_be(f);
    struct snug_kv *kv = run->kv;
    float *S = snug_kv_delta_state(kv, L->rec_idx);
    for (int64_t t = 0; t < run->T; t++) {
        int64_t row = run->row0 + t;
        OP(delta_step, 1, Nk, Nv, dk, dv, B->qd + row * kd, B->kd + row * kd, B->vd + row * di,
           B->aa + row * Nv, B->bb + row * Nv, S, B->o + row * di);
        OP(copy, snug_kv_snap_delta(kv, (int32_t)t, L->rec_idx), S,
           (size_t)kv->shape.delta_elems * sizeof(float));
    }
}

static void deltanet_rule(struct snug_fwd *f, const struct snug_layer *L, struct trunk_bufs *B,
                          float qscale);

/* Gated DeltaNet (docs/qwen35.md §2.5): projections, causal conv + SiLU (conv state), split
 * [Q|K|V], L2-norm q,k, q /= sqrt(dk), β = sigmoid(b), g = ssm_a · softplus(α + dt_bias), the delta
 * rule (chunked for a run of T > 1, step for T = 1; on a backend with delta_decode, a
 * decode-sized step's split, norms and gates inside that one op), gated RMSNorm, output
 * projection. The conv and the delta rule run per run against the run's own states; everything
 * else over all rows. */
static void deltanet(struct snug_fwd *f, const struct snug_layer *L, struct trunk_bufs *B) {
    const struct snug_hparams *hp = &f->m->hp;
    struct snug_be *be = snug_fwd_be(f);
    int64_t T = f->T, Nk = hp->ssm_n_group, Nv = hp->ssm_dt_rank, dk = hp->ssm_d_state;
    int64_t dv = dk, cd = snug_hp_conv_dim(hp), di = hp->ssm_d_inner;
    const float *convw = f32(f, L->ssm_conv);
    /* [q|k|v] and z over the same x: one launch where the two share a type (decode rows) */
    snug_qwen35_matmul_pair(f, L->ssm_qkv, L->ssm_z, B->xn, T, B->mix, B->z);
    snug_qwen35_matmul_precise(f, L->ssm_beta, L->ssm_alpha, B->xn, T, B->bb, B->aa);
    /* the conv of every run without snapshots: in batches through conv_silu_runs where the
     * backend has it and the step has several runs, else one call per run */
    bool conv_batch = be->ops->conv_silu_runs && f->n_runs > 1;
    struct snug_be_run br[RUN_BATCH];
    int32_t nb = 0;
    for (int32_t r = 0; r < f->n_runs; r++) {
        const struct snug_fwd_run *run = &f->runs[r];
        int64_t r0 = run->row0;
        float *conv = snug_kv_conv_state(run->kv, L->rec_idx);
        if (run->snapshot) /* token by token, saving the conv state after each */
            conv_snapshots(f, L, B, run, convw);
        else if (conv_batch)
            br[nb++] = (struct snug_be_run){.row0 = r0, .T = run->T, .state = conv};
        else
            OP(conv_silu, B->mix + r0 * cd, run->T, cd, hp->conv_kernel, convw, conv,
               B->u + r0 * cd);
        if (nb == RUN_BATCH || (nb > 0 && r == f->n_runs - 1)) {
            OP(conv_silu_runs, nb, br, B->mix, cd, hp->conv_kernel, convw, B->u);
            nb = 0;
        }
    }
    float qscale = 1.0f / sqrtf((float)dk);
    if (be->ops->delta_decode && T <= SNUG_FWD_LG_ROWS) {
        /* decode-sized steps: the split, norms, scale and gates inside the recurrence's own
         * launch, which also writes a verification's rollback points; several runs in
         * batches through delta_decode_runs where the backend has it */
        bool batch = be->ops->delta_decode_runs && f->n_runs > 1;
        for (int32_t r = 0; r < f->n_runs; r++) {
            const struct snug_fwd_run *run = &f->runs[r];
            int64_t r0 = run->row0;
            struct snug_kv *kv = run->kv;
            float *snap = run->snapshot ? snug_kv_snap_delta(kv, 0, L->rec_idx) : NULL;
            float *S = snug_kv_delta_state(kv, L->rec_idx);
            SNUG_ASSERT(!run->snapshot || run->T <= kv->n_snap);
            if (!batch) {
                OP(delta_decode, run->T, Nk, Nv, dk, dv, B->u + r0 * cd, B->bb + r0 * Nv,
                   B->aa + r0 * Nv, f32(f, L->ssm_a), f32(f, L->ssm_dt), qscale, 1e-6f, S,
                   B->o + r0 * di, snap, (int64_t)kv->snap_stride);
                continue;
            }
            br[nb++] = (struct snug_be_run){.row0 = r0,
                                            .T = run->T,
                                            .state = S,
                                            .snap = snap,
                                            .snap_stride = (int64_t)kv->snap_stride};
            if (nb == RUN_BATCH || r == f->n_runs - 1) {
                OP(delta_decode_runs, nb, br, Nk, Nv, dk, dv, B->u, B->bb, B->aa, f32(f, L->ssm_a),
                   f32(f, L->ssm_dt), qscale, 1e-6f, B->o);
                nb = 0;
            }
        }
    } else {
        deltanet_rule(f, L, B, qscale);
    }
    OP(gated_rmsnorm, B->o, B->z, f32(f, L->ssm_norm), hp->rms_eps, T, Nv, dv, B->on);
    matmul(f, L->ssm_out, B->on, T, B->y);
}

/* The delta rule of a step over the separate ops: [Q|K|V] split per token, the L2 norms, the
 * scale and the gates over every row, then per run the step, chunked or snapshot form. */
static void deltanet_rule(struct snug_fwd *f, const struct snug_layer *L, struct trunk_bufs *B,
                          float qscale) {
    const struct snug_hparams *hp = &f->m->hp;
    struct snug_be *be = snug_fwd_be(f);
    int64_t T = f->T, Nk = hp->ssm_n_group, Nv = hp->ssm_dt_rank, dk = hp->ssm_d_state;
    int64_t dv = dk, cd = snug_hp_conv_dim(hp), kd = Nk * dk, di = hp->ssm_d_inner;
    OP(copy2d, B->qd, kd, B->u, cd, kd, T); /* split [Q|K|V] per token */
    OP(copy2d, B->kd, kd, B->u + kd, cd, kd, T);
    OP(copy2d, B->vd, di, B->u + 2 * kd, cd, di, T);
    /* L2-norm eps 1e-6: HF's l2norm in the torch delta-rule kernels (docs/qwen35.md §2.5 step 6).
     */
    OP(l2norm, B->qd, T * Nk, dk, 1e-6f);
    OP(l2norm, B->kd, T * Nk, dk, 1e-6f);
    OP(scale, B->qd, T * kd, qscale);
    OP(delta_gates, B->bb, B->aa, f32(f, L->ssm_a), f32(f, L->ssm_dt), T, Nv);
    for (int32_t r = 0; r < f->n_runs; r++) {
        const struct snug_fwd_run *run = &f->runs[r];
        int64_t r0 = run->row0, n = run->T;
        float *S = snug_kv_delta_state(run->kv, L->rec_idx);
        if (run->snapshot)
            delta_snapshots(f, L, B, run);
        else if (n == 1)
            OP(delta_step, 1, Nk, Nv, dk, dv, B->qd + r0 * kd, B->kd + r0 * kd, B->vd + r0 * di,
               B->aa + r0 * Nv, B->bb + r0 * Nv, S, B->o + r0 * di);
        else
            OP(delta_chunked, n, Nk, Nv, dk, dv, B->qd + r0 * kd, B->kd + r0 * kd, B->vd + r0 * di,
               B->aa + r0 * Nv, B->bb + r0 * Nv, S, B->o + r0 * di, f->op_work);
    }
}

/* The LM head over rows [r0, r0 + n) of xn into logits (host): directly on the CPU, else in
 * slices of LG_ROWS rows through the staging buffer lg, each copied to the host before the next
 * slice overwrites it (a step with more logits rows than LG_ROWS: long prompts). */
static void lm_head_sliced(struct snug_fwd *f, const float *xn, float *lg, int64_t r0, int64_t n,
                           float *logits) {
    const struct snug_model *m = f->m;
    struct snug_be *be = snug_fwd_be(f);
    int64_t H = m->hp.n_embd, V = m->hp.n_vocab;
    if (be->host_memory) {
        matmul(f, m->output, xn + r0 * H, n, logits);
        return;
    }
    for (int64_t r = 0; r < n; r += LG_ROWS) {
        int64_t k = SNUG_MIN((int64_t)LG_ROWS, n - r);
        matmul(f, m->output, xn + (r0 + r) * H, k, lg);
        OP(download, logits + r * V, lg, (size_t)(k * V) * sizeof(float));
    }
}

/* The logits rows of every run (their last n_logits rows), packed into f->logits: adjacent
 * row ranges of consecutive runs (a batch of decode rows) go through one product. On a device
 * backend, a step with at most LG_ROWS logits rows (every decode and verification step) keeps
 * them all in lg, each segment in its own rows, and reads them back once the step's work is
 * done (read_back: a recorded step replays this too); longer ones go slice by slice. */
void snug_fwd_logits(struct snug_fwd *f, const float *xn, float *lg) {
    const struct snug_model *m = f->m;
    struct snug_be *be = snug_fwd_be(f);
    int64_t V = m->hp.n_vocab, H = m->hp.n_embd, out = 0, seg0 = 0, segn = 0, total = 0;
    for (int32_t r = 0; r < f->n_runs; r++) total += f->runs[r].n_logits;
    bool packed = !be->host_memory && total <= LG_ROWS;
    for (int32_t r = 0; r <= f->n_runs; r++) {
        int64_t a = 0, n = 0;
        if (r < f->n_runs) {
            const struct snug_fwd_run *run = &f->runs[r];
            n = run->n_logits;
            a = run->row0 + run->T - n;
            if (n == 0) continue;
            if (segn > 0 && a == seg0 + segn) {
                segn += n;
                continue;
            }
        }
        if (segn > 0 && packed) {
            matmul(f, m->output, xn + seg0 * H, segn, lg + out * V);
            OP(read_back, f->logits + out * V, lg + out * V, (size_t)(segn * V) * sizeof(float));
        } else if (segn > 0) {
            lm_head_sliced(f, xn, lg, seg0, segn, f->logits + out * V);
        }
        out += segn;
        seg0 = a, segn = n;
    }
}

/* ---- forward ------------------------------------------------------------------------------ */
/* One step over f->T rows: embeddings, every trunk layer (pre-norm mixer + residual,
 * pre-norm FFN + residual, docs/qwen35.md §2.2), final norm, LM head into f->logits. */
void snug_qwen35_forward_common(struct snug_fwd *f, snug_qwen35_ffn_fn ffn) {
    const struct snug_model *m = f->m;
    const struct snug_hparams *hp = &m->hp;
    struct snug_be *be = snug_fwd_be(f);
    int64_t T = f->T, H = hp->n_embd;
    struct bump b = {.a = f->work};
    struct trunk_bufs B;
    trunk_buffers(hp, f->T, f->n_threads, &b, &B);
    f->op_work = B.op_work;
    struct snug_arena *hw = snug_fwd_host_work(f);
    size_t hmark = snug_arena_mark(hw);
    snug_layer_hook hook = f->n_runs == 1 ? f->hook : NULL; /* (one-run steps only) */
    int32_t hpos0 = f->runs[0].pos0;

    embed_rows(f, B.x);
    if (f->rope3 && !be->host_memory) /* the 3-D positions beside the 1-D ones (pos_be) */
        OP(upload, B.pos3, f->rope3, (size_t)T * 3 * sizeof(int32_t));
    if (hook) {
        hook(f->hook_user, 0, hpos0, f->T, (int32_t)H, host_view(f, B.x, T * H));
        snug_arena_reset_to(hw, hmark);
    }

    /* Each residual add is fused with the norm that follows it (add_rmsnorm): the FFN's norm
     * after the mixer, the next layer's input norm after the FFN — after the last layer, the
     * output norm. */
    snug_tensor first_norm = hp->n_layer ? m->layers[0].attn_norm : m->output_norm;
    OP(rmsnorm, B.x, f32(f, first_norm), hp->rms_eps, T, H, B.xn);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const struct snug_layer *L = &m->layers[il];
        if (L->recurrent)
            deltanet(f, L, &B);
        else
            attention(f, L, &B);
        if (be->ops->all_reduce) OP(all_reduce, B.y, T * H); /* one rank of several: partial sums */
        OP(add_rmsnorm, B.x, B.y, f32(f, L->post_norm), hp->rms_eps, T, H, B.xn);
        size_t mark = snug_arena_mark(f->work);
        ffn(f, L, B.xn, B.y);
        snug_arena_reset_to(f->work, mark);
        snug_arena_reset_to(hw, hmark);
        if (be->ops->all_reduce) OP(all_reduce, B.y, T * H);
        snug_tensor next_norm = il + 1 < hp->n_layer ? m->layers[il + 1].attn_norm : m->output_norm;
        OP(add_rmsnorm, B.x, B.y, f32(f, next_norm), hp->rms_eps, T, H, B.xn);
        if (hook) {
            hook(f->hook_user, (int32_t)il + 1, hpos0, f->T, (int32_t)H, host_view(f, B.x, T * H));
            snug_arena_reset_to(hw, hmark);
        }
    }

    if (hook) {
        hook(f->hook_user, (int32_t)hp->n_layer + 1, hpos0, f->T, (int32_t)H,
             host_view(f, B.xn, T * H));
        snug_arena_reset_to(hw, hmark);
    }
    for (int32_t r = 0; r < f->n_runs; r++) {
        const struct snug_fwd_run *run = &f->runs[r];
        if (run->hidden_out)
            OP(copy, run->hidden_out, B.xn + (int64_t)run->row0 * H,
               (size_t)((int64_t)run->T * H) * sizeof(float));
    }
    if (f->logits) snug_fwd_logits(f, B.xn, B.lg);
}

/* Dense SwiGLU FFN (docs/qwen35.md §2.7): y = down(silu(gate·x) ⊙ up·x). */
static void dense_ffn(struct snug_fwd *f, const struct snug_layer *L, const float *x, float *y) {
    struct snug_be *be = snug_fwd_be(f);
    struct bump b = {.a = f->work};
    float *g, *u;
    dense_ffn_buffers(&f->m->hp, f->T, &b, &g, &u);
    snug_qwen35_matmul_pair(f, L->ffn_gate, L->ffn_up, x, f->T, g, u);
    OP(swiglu, g, u, (int64_t)f->T * f->m->hp.n_ff, g);
    matmul(f, L->ffn_down, g, f->T, y);
}

static void qwen35_forward(struct snug_fwd *f) {
    snug_qwen35_forward_common(f, dense_ffn);
}

static void qwen35_mtp_forward(struct snug_fwd *f) {
    snug_qwen35_mtp_forward_common(f, dense_ffn);
}

const struct snug_arch snug_arch_qwen35 = {
    .name = "qwen35",
    .load = qwen35_load,
    .plan = qwen35_plan,
    .forward = qwen35_forward,
    .mtp_forward = qwen35_mtp_forward,
};
