/* mtp.c — the MTP state of a context (speculative decoding's model side, docs/qwen35.md §3):
 * its own attention cache, the trunk's pending hidden rows, MTP step 1 over them, and chained
 * drafting. Owned by struct snug_ctx (context.c), which calls these hooks from its steps.
 * Invariant: see mtp.h (pending rows end at n_past - 1); nothing here allocates after
 * snug_spec_init. Read next: src/arch/qwen35_mtp.c (the MTP forward), context.c (eval,
 * truncate), src/speculative/speculative.c (acceptance), docs/spec-decode.md.
 */
#include "model/mtp.h"

#include "quant/quant.h"

#include <string.h>

/* The MTP block's cache: one attention layer of the trunk's attention shape, stored in the
 * trunk's K/V formats (kv_type is the context's kvfmt code, src/kv/kvfmt.h: q8_0, tq4, a K/V
 * pair...), so the MTP cache costs what one more trunk attention layer costs and the forward
 * reads it through the same view and ops (src/arch/qwen35_mtp.c). */
static struct snug_kv_shape mtp_kv_shape(const struct snug_hparams *hp, int32_t n_ctx,
                                         enum snug_kv_type kv_type) {
    return (struct snug_kv_shape){
        .n_attn = 1,
        .n_head_kv = (int32_t)hp->n_head_kv,
        .head_dim = (int32_t)hp->head_dim,
        .n_ctx = n_ctx,
        .type = kv_type == SNUG_KV_F32 ? SNUG_DTYPE_F32 : SNUG_DTYPE_F16,
        .fmt = (int32_t)kv_type,
    };
}

/* Lay out (a != NULL) or count the buffers of struct snug_spec; returns the bytes. `dev`
 * selects the group: the rows the MTP forward reads and writes (backend memory: hid, h2, ha,
 * hb, pos_dev, draft_dev) or the host side (ids, positions, the verified rows' logits for the
 * sampler). */
static size_t spec_buffers(const struct snug_hparams *hp, int32_t n_chunk, int32_t n_draft,
                           bool dev, struct snug_arena *a, struct snug_spec *o) {
    size_t C = (size_t)n_chunk, H = hp->n_embd, V = hp->n_vocab, K1 = (size_t)n_draft + 1;
    size_t dsz[] = {C * H * 4, C * H * 4, H * 4, H * 4, 2 * C * 4, 2 * SNUG_SPEC_MAX_DRAFT * 4};
    void **ddst[] = {(void **)&o->hid, (void **)&o->h2,      (void **)&o->ha,
                     (void **)&o->hb,  (void **)&o->pos_dev, (void **)&o->draft_dev};
    size_t P = sizeof(void *);
    size_t hsz[] = {C * 4, C * 4, C * 4, K1 * V * 4, K1 * 4, C * 3 * 4, C * P, C * 3 * 4, C * P};
    void **hdst[] = {(void **)&o->hid_ids,  (void **)&o->tok,   (void **)&o->pos,
                     (void **)&o->logits,   (void **)&o->batch, (void **)&o->hid_rope3,
                     (void **)&o->hid_embd, (void **)&o->rope3, (void **)&o->embd};
    size_t n = dev ? sizeof dsz / sizeof dsz[0] : sizeof hsz / sizeof hsz[0];
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t sz = dev ? dsz[i] : hsz[i];
        total += SNUG_ALIGN_UP(sz, 64);
        if (a) *(dev ? ddst : hdst)[i] = snug_arena_alloc(a, sz, 64);
    }
    return total + 64;
}

size_t snug_spec_dev_bytes(const struct snug_hparams *hp, int32_t n_chunk) {
    struct snug_spec tmp;
    return spec_buffers(hp, n_chunk, 1, true, NULL, &tmp);
}

struct snug_kv_shape snug_spec_kv_shape(const struct snug_hparams *hp, int32_t n_ctx,
                                        enum snug_kv_type kv_type) {
    return mtp_kv_shape(hp, n_ctx, kv_type);
}

size_t snug_spec_bytes(const struct snug_hparams *hp, int32_t n_ctx, int32_t n_chunk,
                       int32_t n_draft, enum snug_kv_type kv_type) {
    struct snug_kv_shape s = mtp_kv_shape(hp, n_ctx, kv_type);
    struct snug_spec tmp;
    return snug_kv_bytes(&s) + spec_buffers(hp, n_chunk, n_draft, false, NULL, &tmp) +
           spec_buffers(hp, n_chunk, n_draft, true, NULL, &tmp);
}

int snug_spec_init(struct snug_spec **out, const struct snug_model *m, int32_t n_ctx,
                   int32_t n_chunk, int32_t n_draft, enum snug_kv_type kv_type,
                   struct snug_err *err) {
    return snug_spec_init_on(out, m, n_ctx, n_chunk, n_draft, kv_type, NULL, NULL, NULL, err);
}

int snug_spec_init_on(struct snug_spec **out, const struct snug_model *m, int32_t n_ctx,
                      int32_t n_chunk, int32_t n_draft, enum snug_kv_type kv_type,
                      struct snug_be *be, struct snug_kv *dev_kv, void *dev_mem,
                      struct snug_err *err) {
    *out = NULL;
    const struct snug_hparams *hp = &m->hp;
    if (hp->n_nextn == 0 || !m->arch->mtp_forward)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "speculative decoding (n_draft %d) needs an MTP block, but this %s "
                            "model has %s.nextn_predict_layers = 0; use n_draft 0",
                            n_draft, hp->arch, hp->arch);
    if (n_draft < 1 || n_draft > SNUG_SPEC_MAX_DRAFT || n_draft + 1 > n_chunk)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "n_draft %d: expected 1..%d and at most n_chunk - 1 (%d)", n_draft,
                            SNUG_SPEC_MAX_DRAFT, n_chunk - 1);
    struct snug_spec *sp = snug_calloc(1, sizeof *sp);
    if (!sp) return snug_err_set(err, SNUG_ERR_NOMEM, "speculative decoding: out of memory");
    int rc;
    if (be) { /* device: the cache and the row buffers come from the backend */
        if (!dev_kv || !dev_mem) {
            rc = snug_err_set(err, SNUG_ERR_INTERNAL,
                              "speculative decoding: backend %s has no MTP cache or buffers",
                              be->ops->name);
            goto fail;
        }
        sp->be = be;
        sp->kvp = dev_kv;
        struct snug_arena d = {.name = "spec (device)",
                               .base = dev_mem,
                               .cap = spec_buffers(hp, n_chunk, n_draft, true, NULL, sp)};
        spec_buffers(hp, n_chunk, n_draft, true, &d, sp);
    } else {
        struct snug_kv_shape s = mtp_kv_shape(hp, n_ctx, kv_type);
        rc = snug_kv_init(&sp->kv, &s, err);
        if (rc) goto fail;
        sp->kvp = &sp->kv;
    }
    size_t bytes = spec_buffers(hp, n_chunk, n_draft, false, NULL, sp);
    if (!be) bytes += spec_buffers(hp, n_chunk, n_draft, true, NULL, sp);
    rc = snug_arena_init(&sp->arena, "spec", bytes, err);
    if (rc) goto fail;
    spec_buffers(hp, n_chunk, n_draft, false, &sp->arena, sp);
    if (!be) spec_buffers(hp, n_chunk, n_draft, true, &sp->arena, sp);
    sp->n_chunk = n_chunk;
    sp->n_draft = sp->k = n_draft;
    sp->H = hp->n_embd;
    sp->V = hp->n_vocab;
    *out = sp;
    return SNUG_OK;
fail:
    snug_spec_free(sp);
    return rc;
}

void snug_spec_free(struct snug_spec *sp) {
    if (!sp) return;
    snug_kv_free(&sp->kv);
    snug_arena_free(&sp->arena);
    snug_free(sp);
}

void snug_spec_reset(struct snug_spec *sp) {
    sp->n_hid = 0;
    sp->hid_pos0 = 0;
}

/* Bytes between two row buffers of the backend's memory (queued on its stream). */
static void spec_copy(struct snug_spec *sp, void *dst, const void *src, size_t bytes) {
    if (sp->be)
        sp->be->ops->copy(sp->be, dst, src, bytes);
    else if (dst != src)
        memcpy(dst, src, bytes);
}

/* An MTP forward of T positions pos0.. over hidden rows hin with tokens ids (base: the
 * step's model, backend and work arenas; its own positions and ids go to pos_dev on a device,
 * unless `staged`: a chained draft's, already put there by device copies, ids then NULL).
 * rope3 ([T][3], NULL: 1-D) and embd ([T], NULL: token embeddings only) are the rows' 3-D
 * positions and image input rows; the 3-D rotary is used only when some row's (t, h, w) is not
 * (p, p, p), so text before any image takes the unchanged 1-D path (bit-identical anyway).
 * Output: logits (all rows or the last) to the host and/or the last row's argmax to argmax_be
 * (backend memory), or neither (both NULL: only the cache and hout). */
static void mtp_run(struct snug_spec *sp, const struct snug_fwd *base, const snug_token *ids,
                    bool staged, int32_t T, snug_pos pos0, const int32_t *rope3,
                    const float *const *embd, const float *hin, float *hout, float *logits,
                    bool all, int32_t *argmax_be) {
    bool mm = false, any_embd = false;
    for (int32_t i = 0; i < T; i++) {
        sp->pos[i] = pos0 + i;
        if (rope3)
            for (int c = 0; c < 3; c++) mm |= rope3[3 * i + c] != pos0 + i;
        if (embd) any_embd |= embd[i] != NULL;
    }
    snug_arena_reset_to(base->work, 0);
    if (base->host_work) snug_arena_reset_to(base->host_work, 0);
    struct snug_fwd_run run = {.kv = sp->kvp,
                               .T = T,
                               .pos0 = pos0,
                               .n_logits = logits ? (all ? T : 1) : 0,
                               .hidden_out = hout};
    struct snug_fwd f = *base;
    f.runs = &run;
    f.n_runs = 1;
    f.ids = ids;
    f.pos = sp->pos;
    f.pos_be = NULL;
    f.ids_be = NULL;
    if (sp->be) {      /* the step's inputs: positions, then ids (pos_dev is [2][n_chunk]) */
        if (!staged) { /* (an upload waits for the device: staged chains do not) */
            sp->be->ops->upload(sp->be, sp->pos_dev, sp->pos, (size_t)T * sizeof(int32_t));
            sp->be->ops->upload(sp->be, sp->pos_dev + sp->n_chunk, ids,
                                (size_t)T * sizeof(int32_t));
        }
        f.pos_be = sp->pos_dev;
        f.ids_be = sp->pos_dev + sp->n_chunk;
    }
    f.T = T;
    f.logits = logits;
    f.argmax_be = argmax_be;
    f.hook = NULL;
    f.mtp_hidden_in = hin;
    f.rope3 = mm ? rope3 : NULL;
    f.embd_rows = any_embd ? embd : NULL;
    snug_fwd_exec(&f, base->m->arch->mtp_forward);
}

/* MTP step 1 over the pending rows (see snug_spec_flush); logits, all and argmax_be as
 * mtp_run's. */
static int32_t flush_rows(struct snug_spec *sp, const struct snug_fwd *base, snug_token next,
                          const float *next_embd, float *logits, bool all, int32_t *argmax_be) {
    int32_t P = sp->n_hid;
    if (P == 0) return 0;
    for (int32_t i = 0; i + 1 < P; i++) {
        sp->tok[i] = sp->hid_ids[i + 1];
        sp->embd[i] = sp->hid_embd[i + 1];
    }
    sp->tok[P - 1] = next;
    sp->embd[P - 1] = next_embd;
    mtp_run(sp, base, sp->tok, false, P, sp->hid_pos0, sp->hid_rope3, sp->embd, sp->hid, sp->h2,
            logits, all, argmax_be);
    spec_copy(sp, sp->ha, sp->h2 + (int64_t)(P - 1) * sp->H, (size_t)sp->H * sizeof(float));
    sp->n_hid = 0;
    return P;
}

int32_t snug_spec_flush(struct snug_spec *sp, const struct snug_fwd *base, snug_token next,
                        const float *next_embd, float *sink) {
    return flush_rows(sp, base, next, next_embd, sink, true, NULL);
}

int32_t snug_spec_flush_known(struct snug_spec *sp, const struct snug_fwd *base, float *sink) {
    int32_t P = sp->n_hid;
    if (P < 2) return 0;
    mtp_run(sp, base, sp->hid_ids + 1, false, P - 1, sp->hid_pos0, sp->hid_rope3, sp->hid_embd + 1,
            sp->hid, sp->h2, sink, true, NULL);
    spec_copy(sp, sp->hid, sp->hid + (int64_t)(P - 1) * sp->H, (size_t)sp->H * sizeof(float));
    sp->hid_ids[0] = sp->hid_ids[P - 1];
    memmove(sp->hid_rope3, sp->hid_rope3 + 3 * (P - 1), 3 * sizeof(int32_t));
    sp->hid_embd[0] = NULL; /* the row's own input: not read again (the next row's is) */
    sp->hid_pos0 += P - 1;
    sp->n_hid = 1;
    return P - 1;
}

void snug_spec_push(struct snug_spec *sp, const snug_token *ids, int32_t T, snug_pos pos0,
                    const int32_t *rope3, const float *const *embd) {
    SNUG_ASSERT(T <= sp->n_chunk);
    memcpy(sp->hid_ids, ids, (size_t)T * sizeof *ids);
    for (int32_t i = 0; i < T; i++) {
        for (int c = 0; c < 3; c++) sp->hid_rope3[3 * i + c] = rope3 ? rope3[3 * i + c] : pos0 + i;
        sp->hid_embd[i] = embd ? embd[i] : NULL;
    }
    sp->hid_pos0 = pos0;
    sp->n_hid = T;
}

int snug_spec_draft(struct snug_spec *sp, const struct snug_fwd *base, int32_t n_past,
                    int32_t n_ctx, snug_token next, int32_t k, snug_token *drafts, int32_t *n_out,
                    struct snug_err *err) {
    *n_out = 0;
    if (next < 0 || (int64_t)next >= sp->V)
        return snug_err_set(err, SNUG_ERR_INVALID, "draft: token %d is outside the vocabulary",
                            next);
    if (sp->n_hid == 0 || sp->hid_pos0 + sp->n_hid != n_past)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "draft: no hidden state of position %d: drafting follows an eval "
                            "(and a truncate) of the context",
                            n_past - 1);
    /* verification needs k + 1 positions from n_past */
    k = SNUG_MIN(k, sp->n_draft);
    k = SNUG_MIN(k, n_ctx - n_past - 1);
    if (k <= 0) return SNUG_OK;
    /* the last pending row's rotary position: the chained steps go one further in t, h and w
     * alike (vLLM adds 1 to all three M-RoPE rows per drafting step) */
    int32_t last[3];
    memcpy(last, sp->hid_rope3 + 3 * (sp->n_hid - 1), sizeof last);
    /* Each draft is the argmax of its logits row, taken where the logits are (the backend's
     * argmax op) into the first ids slot of pos_dev, where the next step reads its input id,
     * and copied to draft_dev[j]: on a device the chain runs without a logits read-back or a
     * wait (every chained step the same recorded step; its position copied from the list
     * uploaded before the first step), and the k ids come back in one download at the end. On
     * the CPU all of it is host memory. */
    int32_t *dd = sp->draft_dev, *slot = sp->pos_dev + sp->n_chunk;
    int32_t *dpos = dd + SNUG_SPEC_MAX_DRAFT; /* [k - 1] the chained steps' positions */
    if (sp->be && k > 1) {
        for (int32_t j = 1; j < k; j++) sp->pos[j - 1] = n_past - 1 + j;
        sp->be->ops->upload(sp->be, dpos, sp->pos, (size_t)(k - 1) * sizeof(int32_t));
    }
    float *keep = sp->keep_draft_logits ? sp->logits : NULL; /* (tests: the last draft's) */
    flush_rows(sp, base, next, NULL, k == 1 ? keep : NULL, false, slot);
    spec_copy(sp, dd, slot, sizeof(int32_t));
    /* steps 2..k: the previous draft as input token, the MTP's own h' as hidden input, the
     * position one further (docs/qwen35.md §3.3) */
    for (int32_t j = 1; j < k; j++) {
        for (int c = 0; c < 3; c++) sp->rope3[c] = last[c] + j;
        if (sp->be) spec_copy(sp, sp->pos_dev, dpos + j - 1, sizeof(int32_t));
        mtp_run(sp, base, sp->be ? NULL : dd + j - 1, sp->be != NULL, 1, n_past - 1 + j, sp->rope3,
                NULL, sp->ha, sp->hb, j == k - 1 ? keep : NULL, false, slot);
        spec_copy(sp, dd + j, slot, sizeof(int32_t));
        float *t = sp->ha;
        sp->ha = sp->hb;
        sp->hb = t;
    }
    if (sp->be)
        sp->be->ops->download(sp->be, drafts, dd, (size_t)k * sizeof(int32_t));
    else
        memcpy(drafts, dd, (size_t)k * sizeof(int32_t));
    for (int32_t j = 0; j < k; j++)
        if (drafts[j] < 0 || (int64_t)drafts[j] >= sp->V)
            return snug_err_set(err, SNUG_ERR_INTERNAL,
                                "draft %d: token %d from the backend is outside the vocabulary", j,
                                drafts[j]);
    *n_out = k;
    return SNUG_OK;
}
