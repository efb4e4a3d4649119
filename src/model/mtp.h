/* mtp.h — the MTP state of a context (docs/qwen35.md §3): the MTP block's own attention cache,
 * the trunk's pending hidden rows, draft/verify scratch and the acceptance statistics, and the
 * hooks the context's steps call (flush, push, drafting). Owned by struct snug_ctx
 * (context.c); everything is allocated at init (snug_spec_bytes is the plan's number).
 * Invariant: the pending rows hid[0..n_hid) are the trunk's post-norm hidden states at
 * positions hid_pos0.. and end at the context's n_past - 1; their tokens are hid_ids, and the
 * token after the last is not known yet. Read next: mtp.c, src/speculative/speculative.h
 * (acceptance), docs/spec-decode.md.
 */
#ifndef SNUG_MODEL_MTP_H
#define SNUG_MODEL_MTP_H

#include "kv/kv.h"
#include "model/model.h"
#include "snug.h"

struct snug_spec {
    struct snug_kv kv;   /* the MTP block's attention cache (one layer, no recurrent state) */
    struct snug_kv *kvp; /* the cache in use: &kv, or the device backend's (snug_spec_init_on) */
    struct snug_be *be;  /* NULL: host memory; else the device backend holding the rows below */
    struct snug_arena arena;
    int32_t n_chunk, n_draft, k; /* k: drafts per snug_spec_step */
    int64_t H, V;
    /* hid, h2, ha, hb, pos_dev, draft_dev are in the backend's memory; the rest on the host */
    float *hid;          /* [n_chunk][H] pending trunk hidden rows */
    snug_token *hid_ids; /* [n_chunk] their tokens */
    /* [n_chunk][3] their rotary positions (t, h, w: the trunk's, so t = h = w = position for
     * text before any image) and [n_chunk] their input rows (an image's projector row, host
     * memory, or NULL for a token's embedding; valid only during the step that pushed them) */
    int32_t *hid_rope3;
    const float **hid_embd;
    int32_t *rope3;     /* [n_chunk][3] an MTP run's rotary positions */
    const float **embd; /* [n_chunk] an MTP run's input rows (NULL: the token's) */
    snug_token *tok;    /* [n_chunk] MTP input tokens (shifted) */
    int32_t *pos;       /* [n_chunk] MTP positions */
    float *h2;          /* [n_chunk][H] MTP output rows h' */
    float *ha, *hb;     /* [H] chained drafting rows */
    int32_t *pos_dev;   /* [2][n_chunk] MTP positions, then ids, in the backend's memory */
    /* [2][SNUG_SPEC_MAX_DRAFT] a drafting's tokens, then its chained steps' positions, in the
     * backend's memory */
    int32_t *draft_dev;
    float *logits;     /* [n_draft + 1][V] verification (and drafting) logits */
    snug_token *batch; /* [n_draft + 1] verification ids */
    snug_pos hid_pos0;
    int32_t n_hid;
    bool recompute; /* rollback by recomputation instead of per-token snapshots */
    /* tests: a drafting also reads its last draft's logits row back into logits (drafts are
     * otherwise chosen where the logits are, without reading them back) */
    bool keep_draft_logits;
    struct snug_spec_stats stats;
};

/* Bytes snug_spec_init allocates for a context (the memory plan's "mtp" items), besides the
 * recurrent-state snapshots (snug_kv_snap_bytes, n_draft + 1 slots). */
size_t snug_spec_bytes(const struct snug_hparams *hp, int32_t n_ctx, int32_t n_chunk,
                       int32_t n_draft, enum snug_kv_type kv_type);
int snug_spec_init(struct snug_spec **out, const struct snug_model *m, int32_t n_ctx,
                   int32_t n_chunk, int32_t n_draft, enum snug_kv_type kv_type,
                   struct snug_err *err);
/* The same with the MTP cache and the row buffers in a device backend's memory: dev_kv the
 * cache laid out for snug_spec_kv_shape, dev_mem snug_spec_dev_bytes of device memory (both
 * owned by the backend); be NULL is snug_spec_init. */
int snug_spec_init_on(struct snug_spec **out, const struct snug_model *m, int32_t n_ctx,
                      int32_t n_chunk, int32_t n_draft, enum snug_kv_type kv_type,
                      struct snug_be *be, struct snug_kv *dev_kv, void *dev_mem,
                      struct snug_err *err);
/* The MTP cache's shape and the bytes of the device row buffers (for a device backend). */
struct snug_kv_shape snug_spec_kv_shape(const struct snug_hparams *hp, int32_t n_ctx,
                                        enum snug_kv_type kv_type);
size_t snug_spec_dev_bytes(const struct snug_hparams *hp, int32_t n_chunk);
void snug_spec_free(struct snug_spec *sp);
void snug_spec_reset(struct snug_spec *sp); /* forget pending rows (keeps the statistics) */

/* Context hooks (snug_ctx_eval). `base` carries model, pool, threads and the work arena.
 * flush: run MTP step 1 over the pending rows, `next` being the token after the last and
 * next_embd its input row when it is an image's (else NULL); logits of all rows go to sink
 * ([n_hid][V]) when non-NULL (else none are computed: a drafting flushes with its own
 * output); the last h' row to sp->ha.
 * Returns the rows processed. push: record a trunk step's rows, with their 3-D rotary
 * positions rope3 ([T][3], NULL: t = h = w = pos0 + i) and input rows embd ([T], NULL: all
 * token embeddings) when the step carried images or text after them (vLLM's Qwen3.5 MTP takes
 * the target's input embeddings and positions: docs/spec-decode.md). */
int32_t snug_spec_flush(struct snug_spec *sp, const struct snug_fwd *base, snug_token next,
                        const float *next_embd, float *sink);
void snug_spec_push(struct snug_spec *sp, const snug_token *ids, int32_t T, snug_pos pos0,
                    const int32_t *rope3, const float *const *embd);
/* MTP step 1 over the pending rows whose next token is already known (all but the last),
 * logits [n_hid - 1][V] to sink (may be NULL); the last row stays pending. */
int32_t snug_spec_flush_known(struct snug_spec *sp, const struct snug_fwd *base, float *sink);

/* The drafting of snug_ctx_draft (see snug.h); n_past = the context's. */
int snug_spec_draft(struct snug_spec *sp, const struct snug_fwd *base, int32_t n_past,
                    int32_t n_ctx, snug_token next, int32_t k, snug_token *drafts, int32_t *n_out,
                    struct snug_err *err);

/* The context's MTP state, NULL when it was made with n_draft = 0 (context.c). */
struct snug_spec *snug_ctx_spec(struct snug_ctx *ctx);

#endif /* SNUG_MODEL_MTP_H */
