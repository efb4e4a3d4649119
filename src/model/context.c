/* context.c — struct snug_ctx: one sequence over a loaded model, and the step. A context is a
 * slot of a backend instance (src/backend/backend.h: the KV/state caches and the work arena, in
 * host or device memory), its own one-slot instance (snug_ctx_init) or a slot of a pool
 * (both opened by src/engine/slots.c), all sized by the memory planner (src/plan/plan.h), which
 * hands a context only its step's row count and row-table bytes (snug_ctx_init_slot); no line here
 * depends on which backend it is. The step (step_forward) is one forward over rows of several
 * sequences grouped into runs (model.h struct snug_fwd_run): snug_step takes any mix of prompt
 * chunks, decode rows and speculative verification rows; snug_ctx_eval is one run per chunk of
 * at most n_chunk tokens, snug_ctx_eval_batch one run of one row per context;
 * snug_ctx_eval_images also feeds images' rows with 3-D rotary positions (mm_fill, rope_delta).
 * With n_draft > 0 a context also owns the MTP state (mtp.h) and the rollback
 * snapshots; see snug_ctx_truncate; after every plain run the MTP step is settled (one pending
 * row), so the state between prompt chunks is a prefix-cache checkpoint (snug_ctx_prefix_state,
 * model.h; the copy callbacks: ctx_prefix.c). Invariant: a step allocates nothing (tests check
 * snug_alloc_count around it). Read next: src/arch/qwen35.c (forward), src/kv/kv.h.
 */
#include "model.h"

#include "kv/kvfmt.h"
#include "model/mtp.h"
#include "quant/quant.h"

#include <stdatomic.h>
#include <string.h>

struct snug_ctx {
    struct snug_model *m;
    struct snug_ctx_params p;
    int n_threads;
    struct snug_pool *pool;
    struct snug_be *be; /* the backend instance: caches, work arena (backend.h) */
    struct snug_kv *kv; /* this sequence's slot of it */
    struct snug_arena *work;
    /* a step's host tables, n_chunk of each in one block (the plan's pos_bytes,
     * SNUG_STEP_ROW_BYTES per row, then a multimodal step's input rows and 3-D positions): the
     * runs, their sequences, the rows' positions and tokens, embd_rows, rope3 */
    struct snug_fwd_run *runs;
    struct snug_ctx **run_ctx;
    int32_t *pos;
    snug_token *ids;
    const float **embd_rows; /* a multimodal step's input rows (model.h) */
    int32_t *rope3;          /* [n_chunk][3] and its rotary positions (t, h, w) */
    int32_t n_past;
    /* The rotary position of the next token minus n_past: 0 for text, negative after an image
     * (its rows·cols rows take max(rows, cols) positions, docs/vision.md step 6). Non-zero:
     * every step of this context runs alone with 3-D positions. */
    int32_t rope_delta;
    /* during snug_ctx_eval_images: its images, the next one not yet behind the rows, and the
     * current chunk's offset into the eval's ids (mm_fill) */
    const struct snug_image_rows *mm_images;
    int32_t mm_n_images, mm_next, mm_off;
    snug_layer_hook hook;
    void *hook_user;
    struct snug_spec *spec; /* NULL unless n_draft > 0 */
    float *mtp_sink;        /* snug_ctx_eval_mtp: where MTP step-1 logits go */
    int64_t mtp_rows;       /* rows written there so far */
    snug_pos snap_pos0;     /* the last SNUG_EVAL_SNAPSHOT eval: first position */
    int32_t snap_n;         /* and its token count (0: no rollback point) */
    bool device;            /* the backend's memory is not the host's (CUDA) */
    int32_t be_chunk;       /* the instance's rows per step (its step-input tables' length) */
    int32_t slot;           /* which slot of the backend instance is this sequence's */
    bool owns;              /* the pool and the instance are this context's (snug_ctx_init);
                               else a slot pool's (src/engine/slots.c) */
    uint64_t n_forwards;    /* trunk forwards this context's steps ran (snug_ctx_n_forwards) */
    const struct snug_mm_observer *mm_obs; /* snug_ctx_set_mm_observer (snug imatrix) */
};

struct snug_ctx_params snug_ctx_default_params(void) {
    return (struct snug_ctx_params){.n_ctx = 4096, .n_chunk = 512, .kv_type = SNUG_KV_F16};
}

/* Attach a context to slot `slot` of an opened backend instance: its caches, the shared work
 * arena, its own host row table and (n_draft > 0) its MTP state — in the backend's memory when
 * the backend holds the MTP cache (CUDA), else allocated on the host by src/speculative. */
static int ctx_attach(struct snug_ctx *c, int32_t nc, size_t pos_bytes, struct snug_err *err) {
    struct snug_be *be = c->be;
    const struct snug_ctx_params *p = &c->p;
    c->device = !be->host_memory;
    c->kv = be->ops->slot_kv(be, c->slot);
    c->work = be->ops->work(be);
    c->be_chunk = nc;
    SNUG_ASSERT(pos_bytes >=
                (size_t)nc * (SNUG_STEP_ROW_BYTES + 3 * sizeof(int32_t) + sizeof(void *)));
    c->runs = snug_malloc(pos_bytes);
    if (!c->runs) return snug_err_set(err, SNUG_ERR_NOMEM, "context: out of memory");
    c->run_ctx = (struct snug_ctx **)(c->runs + nc);
    c->pos = (int32_t *)(c->run_ctx + nc);
    c->ids = c->pos + nc;
    c->embd_rows = (const float **)(c->ids + nc);
    c->rope3 = (int32_t *)(c->embd_rows + nc);
    if (p->n_draft > 0) {
        struct snug_kv *mtp_kv = be->ops->slot_mtp_kv(be, c->slot);
        if (mtp_kv) /* the MTP cache and rows in the backend's memory */
            return snug_spec_init_on(&c->spec, c->m, p->n_ctx, nc, p->n_draft,
                                     (enum snug_kv_type)p->kv_type, be, mtp_kv,
                                     be->ops->slot_spec_mem(be, c->slot), err);
        return snug_spec_init(&c->spec, c->m, p->n_ctx, nc, p->n_draft,
                              (enum snug_kv_type)p->kv_type, err);
    }
    return SNUG_OK;
}

int snug_ctx_params_resolve(const struct snug_model *m, struct snug_ctx_params *pp,
                            struct snug_err *err) {
    struct snug_ctx_params p = *pp;
    if (p.n_ctx < 0 || p.n_chunk < 0 || p.n_threads < 0)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "context: n_ctx %d, n_chunk %d, n_threads %d must not be negative",
                            p.n_ctx, p.n_chunk, p.n_threads);
    /* K/V cache formats (src/kv/kvfmt.h): kv_type_k / kv_type_v when either is set, else
     * kv_type for both; from here on p.kv_type is the kvfmt code of the pair. */
    bool kv_pair = p.kv_type_k != SNUG_KV_F16 || p.kv_type_v != SNUG_KV_F16;
    if (!snug_kvfmt_name(p.kv_type) || !snug_kvfmt_name(p.kv_type_k) ||
        !snug_kvfmt_name(p.kv_type_v))
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "context: kv_type %d / K %d / V %d: expected formats 0..%d (f16 f32 "
                            "bf16 q8_0 fp8 tq4 tq3)",
                            p.kv_type, p.kv_type_k, p.kv_type_v, SNUG_KVFMT_N - 1);
    if (kv_pair) {
        p.kv_type = snug_kvfmt_code(p.kv_type_k, p.kv_type_v);
        p.kv_type_k = p.kv_type_v = SNUG_KV_F16; /* resolved: kv_type is the pair */
    }
    if (p.backend != 0 && p.backend != 1)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "context: backend %d: expected 0 (cpu) or 1 (cuda)", p.backend);
    if (p.n_ctx == 0) {
        p.n_ctx = 4096;
        if (m->hp.n_ctx_train && (uint64_t)p.n_ctx > m->hp.n_ctx_train)
            p.n_ctx = (int32_t)m->hp.n_ctx_train;
    }
    if (p.n_chunk == 0) p.n_chunk = 512;
    if (p.n_chunk > p.n_ctx) p.n_chunk = p.n_ctx;
    if (p.n_draft < 0 || p.n_draft > SNUG_SPEC_MAX_DRAFT)
        return snug_err_set(err, SNUG_ERR_INVALID, "context: n_draft %d: expected 0..%d", p.n_draft,
                            SNUG_SPEC_MAX_DRAFT);
    if (p.n_draft > 0 && (m->hp.n_nextn == 0 || !m->arch->mtp_forward))
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "speculative decoding (n_draft %d) needs an MTP block, but this %s "
                            "model has %s.nextn_predict_layers = 0; use n_draft 0",
                            p.n_draft, m->hp.arch, m->hp.arch);
    *pp = p;
    return SNUG_OK;
}

int snug_ctx_init_slot(struct snug_ctx **out, struct snug_model *m,
                       const struct snug_ctx_params *resolved, struct snug_pool *pool,
                       struct snug_be *be, int32_t slot, int32_t n_chunk, size_t pos_bytes,
                       struct snug_err *err) {
    *out = NULL;
    struct snug_ctx *c = snug_calloc(1, sizeof *c);
    if (!c) return snug_err_set(err, SNUG_ERR_NOMEM, "context: out of memory");
    c->m = m;
    c->p = *resolved;
    c->pool = pool;
    c->n_threads = snug_pool_size(pool);
    c->be = be;
    c->slot = slot;
    int rc = ctx_attach(c, n_chunk, pos_bytes, err);
    if (rc) {
        snug_ctx_free(c);
        return rc;
    }
    *out = c;
    return SNUG_OK;
}

void snug_ctx_own_instance(struct snug_ctx *ctx) {
    ctx->owns = true;
}

void snug_ctx_free(struct snug_ctx *ctx) {
    if (!ctx) return;
    snug_spec_free(ctx->spec);
    snug_free(ctx->runs); /* the other step tables live in the same block */
    if (ctx->owns) {
        snug_backend_close(ctx->be);
        snug_pool_free(ctx->pool);
    }
    snug_free(ctx);
}

void snug_ctx_reset(struct snug_ctx *ctx) {
    ctx->n_past = 0;
    ctx->rope_delta = 0;
    ctx->snap_n = 0;
    ctx->be->ops->reset_slot(ctx->be, ctx->slot);
    if (ctx->spec) snug_spec_reset(ctx->spec);
}

int32_t snug_ctx_n_past(const struct snug_ctx *ctx) {
    return ctx->n_past;
}

/* The prefix cache's access (model.h, src/model/ctx_prefix.h): the caches of a context (host
 * memory, or a device backend's: `dev`) and, with speculative decoding, the MTP block's cache
 * and its one pending hidden row (every plain step settles the MTP step: rows [0, n_past - 1)
 * of the MTP cache are written, the row of position n_past - 1 waits for the next token). */
bool snug_ctx_prefix_state(struct snug_ctx *ctx, struct snug_ctx_prefix_state *out) {
    memset(out, 0, sizeof *out);
    out->dev = ctx->device ? ctx->be : NULL;
    out->kv = ctx->kv;
    out->n_past = ctx->n_past;
    out->rope_delta = &ctx->rope_delta;
    out->exportable = true;
    struct snug_spec *sp = ctx->spec;
    if (sp) {
        out->mtp_kv = sp->kvp;
        out->mtp_row = sp->hid;
        out->n_embd = sp->H;
        out->exportable = ctx->n_past == 0 || (sp->n_hid == 1 && sp->hid_pos0 == ctx->n_past - 1);
    }
    return true;
}

int32_t snug_ctx_prefix_in_place(const struct snug_ctx *ctx) {
    const struct snug_spec *sp = ctx->spec;
    if (!sp) return ctx->n_past;
    /* MTP rows [0, hid_pos0) were written with the true next tokens; rows past them may hold
     * a chained draft's */
    return SNUG_MIN(ctx->n_past, sp->hid_pos0 + 1);
}

int snug_ctx_prefix_set_past(struct snug_ctx *ctx, const snug_token *toks, int32_t n_past,
                             struct snug_err *err) {
    if (n_past < 0 || n_past > ctx->p.n_ctx || (n_past > 0 && !toks))
        return snug_err_set(err, SNUG_ERR_INVALID, "prefix restore: %d positions", n_past);
    ctx->n_past = n_past;
    ctx->snap_n = 0; /* the rollback point is gone; rope_delta: the restore's */
    struct snug_spec *sp = ctx->spec;
    if (sp) { /* the pending MTP row (restored with the state) is position n_past - 1's */
        snug_spec_reset(sp);
        if (n_past > 0) {
            sp->hid_ids[0] = toks[n_past - 1];
            /* its rotary position as text after the restored images (a checkpoint inside an
             * image would have had (s, s + row, s + col): only the MTP's input differs then,
             * i.e. the acceptance rate, never the output) */
            for (int c = 0; c < 3; c++) sp->hid_rope3[c] = n_past - 1 + ctx->rope_delta;
            sp->hid_embd[0] = NULL;
            sp->hid_pos0 = n_past - 1;
            sp->n_hid = 1;
        }
    }
    return SNUG_OK;
}

int32_t snug_ctx_n_ctx(const struct snug_ctx *ctx) {
    return ctx->p.n_ctx;
}

void snug_ctx_set_layer_hook(struct snug_ctx *ctx, snug_layer_hook hook, void *user) {
    ctx->hook = hook;
    ctx->hook_user = user;
}

int snug_ctx_set_mm_observer(struct snug_ctx *ctx, const struct snug_mm_observer *obs,
                             struct snug_err *err) {
    if (obs && !ctx->be->host_memory)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "observing the weight products (snug imatrix) needs the CPU backend "
                            "(--backend cpu), not %s",
                            ctx->be->ops->name);
    ctx->mm_obs = obs;
    return SNUG_OK;
}

/* Copy every recurrent state into snapshot slot t (save) or back from it, in the caches' own
 * memory (queued in order with the ops). */
static void ctx_snap(struct snug_ctx *ctx, int32_t t, bool save) {
    ctx->be->ops->snapshot(ctx->be, ctx->slot, t, save);
}

/* Point a step at the backend: its caches, work arenas and step inputs (T positions from
 * ctx->pos and, ids given, T token ids uploaded when the backend keeps its own copy). */
static void ctx_fwd_be(struct snug_ctx *ctx, struct snug_fwd *f, int32_t T, const snug_token *ids) {
    struct snug_be *be = ctx->be;
    f->be = be;
    f->work = ctx->work;
    f->host_work = be->ops->host_work(be);
    snug_arena_reset_to(f->work, 0);
    if (f->host_work) snug_arena_reset_to(f->host_work, 0);
    int32_t *dpos = be->ops->positions(be);
    f->pos_be = dpos;
    f->ids_be = NULL;
    if (dpos && T > 0) {
        be->ops->upload(be, dpos, ctx->pos, (size_t)T * sizeof(int32_t));
        if (ids) {
            be->ops->upload(be, dpos + ctx->be_chunk, ids, (size_t)T * sizeof(int32_t));
            f->ids_be = dpos + ctx->be_chunk;
        }
    }
}

/* FNV-1a over the bytes of v, into h. */
static uint64_t hash_mix(uint64_t h, const void *v, size_t n) {
    return snug_fnv1a(h, v, n);
}
#define HASH(h, x) ((h) = hash_mix((h), &(x), sizeof(x)))

/* Everything a recordable step's launches depend on besides the data in the backend's memory:
 * the forward, the shapes, every run's cache, rows, logits rows and outputs, and the addresses
 * of the inputs and the work arena (the host logits are read back relative to f->logits). */
static uint64_t step_key(const struct snug_fwd *f, void (*fn)(struct snug_fwd *)) {
    uint64_t h = 14695981039346656037ull;
    HASH(h, fn);
    HASH(h, f->m);
    HASH(h, f->T);
    HASH(h, f->n_runs);
    for (int32_t r = 0; r < f->n_runs; r++) {
        const struct snug_fwd_run *run = &f->runs[r];
        HASH(h, run->kv);
        HASH(h, run->row0);
        HASH(h, run->T);
        HASH(h, run->n_logits);
        HASH(h, run->snapshot);
        HASH(h, run->hidden_out);
    }
    bool logits = f->logits != NULL; /* (read_back goes relative to f->logits) */
    HASH(h, logits);
    HASH(h, f->mtp_hidden_in);
    HASH(h, f->pos_be);
    HASH(h, f->ids_be);
    HASH(h, f->argmax_be);
    HASH(h, f->work->base);
    return h;
}

void snug_fwd_exec(struct snug_fwd *f, void (*fn)(struct snug_fwd *f)) {
    struct snug_be *be = snug_fwd_be(f);
    bool recordable = be->ops->step_begin && f->T <= SNUG_FWD_LG_ROWS && f->pos_be && f->ids_be &&
                      !f->hook && !f->mm_obs && !f->rope3 && !f->embd_rows;
    if (recordable) {
        int mode = be->ops->step_begin(be, step_key(f, fn), f->logits);
        if (mode == SNUG_STEP_REPLAYED) return;
        if (mode == SNUG_STEP_RECORDING) {
            fn(f);
            if (be->ops->step_end(be)) return;
            /* the recording failed and nothing ran: the same forward, eagerly */
            snug_arena_reset_to(f->work, 0);
            if (f->host_work) snug_arena_reset_to(f->host_work, 0);
        }
    }
    fn(f);
}

/* ---- the step -------------------------------------------------------------------------- */
/* The images of a multimodal eval: in order, inside the n ids, not overlapping, with rows;
 * and a context that can run them (M-RoPE within the op's bound; any backend, with or without
 * speculative decoding: on a device the rows and 3-D positions are uploaded into the step's
 * input, qwen35.c embed_rows, and into the MTP step's, qwen35_mtp.c embed_image_rows). */
static int check_images(const struct snug_ctx *ctx, int32_t n, const struct snug_image_rows *im,
                        int32_t n_images, struct snug_err *err) {
    if (n_images < 0 || (n_images > 0 && !im))
        return snug_err_set(err, SNUG_ERR_INVALID, "eval: %d images%s", n_images,
                            n_images > 0 ? " but no image array" : "");
    if (n_images == 0) return SNUG_OK;
    if (ctx->m->hp.n_rot / 2 > SNUG_ROPE_MAX_PAIRS)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "images: rope.dimension_count %u is above the multimodal rotary's "
                            "%d",
                            ctx->m->hp.n_rot, 2 * SNUG_ROPE_MAX_PAIRS);
    int64_t end = -(int64_t)ctx->n_past; /* an image may have begun in an earlier eval */
    for (int32_t k = 0; k < n_images; k++) {
        const struct snug_image_rows *r = &im[k];
        int64_t last = (int64_t)r->first + (int64_t)r->rows * r->cols; /* one past */
        if (!r->embd || r->rows <= 0 || r->cols <= 0 || r->first < end || last <= 0 ||
            r->first >= n || (int64_t)r->rows * r->cols > INT32_MAX)
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "eval: image %d (rows %d..+%d×%d) does not overlap the %d ids, "
                                "overlaps the previous image, or has no rows",
                                k, r->first, r->rows, r->cols, n);
        end = last;
    }
    return SNUG_OK;
}

/* Fill a step's rope3 and embd_rows for rows [off, off + T) of the eval (the context's n_past
 * is the step's first position): text rows at t = h = w = position + rope_delta; an image
 * starting at cache position a gets s = a + rope_delta and its rows (s, s + row, s + col) of the
 * merged grid with its projector rows as input; after its last row the text continues at
 * s + max(rows, cols) (transformers' Qwen3_5Model.get_rope_index), i.e. rope_delta grows by
 * max(rows, cols) − rows·cols. Stateless beyond rope_delta, so an image may span evals.
 * *k: the first image not yet behind these rows. */
static void mm_fill(struct snug_ctx *ctx, const struct snug_image_rows *im, int32_t n_images,
                    int32_t *k, int32_t off, int32_t T) {
    int64_t H = ctx->m->hp.n_embd;
    for (int32_t i = 0; i < T; i++) {
        int32_t g = off + i, *r3 = ctx->rope3 + 3 * i;
        const struct snug_image_rows *r = *k < n_images ? &im[*k] : NULL;
        if (!r || g < r->first) {
            r3[0] = r3[1] = r3[2] = ctx->n_past + i + ctx->rope_delta;
            ctx->embd_rows[i] = NULL;
            continue;
        }
        int32_t j = g - r->first;
        int32_t s = ctx->n_past + i - j + ctx->rope_delta;
        r3[0] = s;
        r3[1] = s + j / r->cols;
        r3[2] = s + j % r->cols;
        ctx->embd_rows[i] = r->embd + (int64_t)j * H;
        if (j == r->rows * r->cols - 1) {
            ctx->rope_delta += SNUG_MAX(r->rows, r->cols) - r->rows * r->cols;
            (*k)++;
        }
    }
}

/* One forward over T rows (ids, host) in n_runs runs: c0->runs[r] gives row0, T, n_logits and
 * (snapshot) whether the run is a speculative verification; c0->run_ctx[r] its sequence. Every
 * run was validated by the caller; the step runs on c0's backend instance (its pool and work
 * arena), which every run's caches belong to (or all are host memory). Around the trunk, per
 * sequence with speculative state: MTP step 1 over its pending rows (their next token is the
 * run's first) before, and the run's hidden rows recorded as pending after. logits: the runs'
 * logits rows packed in row order (may be NULL). */
static int step_forward(struct snug_ctx *c0, const snug_token *ids, int32_t T, int32_t n_runs,
                        float *logits, struct snug_err *err) {
    const struct snug_model *m = c0->m;
    int64_t V = m->hp.n_vocab;
    struct snug_fwd_run *runs = c0->runs;
    bool mm = false; /* one run with 3-D positions (images, or text after them) */
    for (int32_t r = 0; r < n_runs; r++) {
        struct snug_fwd_run *run = &runs[r];
        struct snug_ctx *c = c0->run_ctx[r];
        run->kv = c->kv;
        run->pos0 = c->n_past;
        run->hidden_out = c->spec ? c->spec->hid : NULL;
        if (!logits) run->n_logits = 0;
        for (int32_t i = 0; i < run->T; i++) c0->pos[run->row0 + i] = c->n_past + i;
        c->snap_n = 0;
        if (n_runs == 1 && (c->mm_n_images > 0 || c->rope_delta != 0)) { /* (runs alone) */
            /* the step's 3-D positions and image rows first: MTP step 1 below reads row 0's */
            mm_fill(c, c->mm_images, c->mm_n_images, &c->mm_next, c->mm_off, T);
            mm = true;
        }
        if (run->snapshot) { /* a verification: a rollback point after each row */
            if (c->spec->recompute) {
                ctx_snap(c, 0, true); /* the state before it; rollback recomputes */
                run->snapshot = false;
            }
            c->snap_pos0 = c->n_past, c->snap_n = run->T;
        }
        if (c->spec) { /* the pending rows learn their next token: MTP step 1 over them */
            struct snug_fwd base = {.m = m, .pool = c->pool, .n_threads = c->n_threads};
            ctx_fwd_be(c, &base, 0, NULL);
            float *sink = c->mtp_sink ? c->mtp_sink + c->mtp_rows * V : NULL;
            c->mtp_rows +=
                snug_spec_flush(c->spec, &base, ids[run->row0], mm ? c->embd_rows[0] : NULL, sink);
        }
    }
    struct snug_fwd f = {
        .m = m,
        .pool = c0->pool,
        .n_threads = c0->n_threads,
        .runs = runs,
        .n_runs = n_runs,
        .ids = ids,
        .pos = c0->pos,
        .T = T,
        .logits = logits,
        .hook = n_runs == 1 ? c0->run_ctx[0]->hook : NULL,
        .hook_user = n_runs == 1 ? c0->run_ctx[0]->hook_user : NULL,
        .mm_obs = n_runs == 1 ? c0->run_ctx[0]->mm_obs : NULL,
    };
    if (mm) {
        f.rope3 = c0->run_ctx[0]->rope3;
        f.embd_rows = c0->run_ctx[0]->embd_rows;
    }
    ctx_fwd_be(c0, &f, T, ids); /* activations, positions and ids in the backend's memory */
    snug_fwd_exec(&f, m->arch->forward);
    c0->n_forwards++;
    int rc = c0->be->ops->sync(c0->be, err);
    if (rc) return rc;
    bool settle = false;
    for (int32_t r = 0; r < n_runs; r++) {
        struct snug_ctx *c = c0->run_ctx[r];
        if (c->spec)
            snug_spec_push(c->spec, ids + runs[r].row0, runs[r].T, c->n_past, mm ? c->rope3 : NULL,
                           mm ? c->embd_rows : NULL);
        c->n_past += runs[r].T;
        if (c->spec && !c->snap_n && c->spec->n_hid > 1) {
            /* settle a plain run: MTP step 1 over the rows whose next token is known, so one
             * row stays pending after every plain step (the prefix cache's checkpoints rely
             * on it: snug_ctx_prefix_state) */
            struct snug_fwd base = {.m = m, .pool = c->pool, .n_threads = c->n_threads};
            ctx_fwd_be(c, &base, 0, NULL);
            float *sink = c->mtp_sink ? c->mtp_sink + c->mtp_rows * V : NULL;
            c->mtp_rows += snug_spec_flush_known(c->spec, &base, sink);
            settle = true;
        }
    }
    return settle ? c0->be->ops->sync(c0->be, err) : SNUG_OK;
}

/* Whether the sequences of a step can share one forward on c0's instance: host memory
 * everywhere, or slots of c0's device instance (src/engine/slots.h). */
static bool step_shares(const struct snug_ctx *c0, const struct snug_ctx *c) {
    return c->device == c0->device && (!c->device || c->be == c0->be);
}

int snug_ctx_eval(struct snug_ctx *ctx, const snug_token *ids, int32_t n, float *logits_out,
                  unsigned flags, struct snug_err *err) {
    return snug_ctx_eval_images(ctx, ids, n, NULL, 0, logits_out, flags, err);
}

/* Validate the whole request first (so a failure changes nothing), then run the chunks, each
 * a one-run step. */
int snug_ctx_eval_images(struct snug_ctx *ctx, const snug_token *ids, int32_t n,
                         const struct snug_image_rows *images, int32_t n_images, float *logits_out,
                         unsigned flags, struct snug_err *err) {
    const struct snug_model *m = ctx->m;
    int rc = check_images(ctx, n, images, n_images, err);
    if (rc) return rc;
    if (n < 0 || (n > 0 && !ids))
        return snug_err_set(err, SNUG_ERR_INVALID, "eval: %d tokens%s", n,
                            n > 0 ? " but no id array" : "");
    if (n == 0) return SNUG_OK;
    if ((int64_t)ctx->n_past + n > ctx->p.n_ctx)
        return snug_err_set(err, SNUG_ERR_BUDGET,
                            "eval: %d tokens do not fit the context: %d of %d positions left "
                            "(%d used); make the context larger (n_ctx) or the input shorter",
                            n, ctx->p.n_ctx - ctx->n_past, ctx->p.n_ctx, ctx->n_past);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= m->hp.n_vocab)
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "eval: token id %d at index %d is outside the vocabulary [0, %u)",
                                ids[i], i, m->hp.n_vocab);
    bool all = flags & SNUG_EVAL_LOGITS_ALL;
    bool snap = flags & SNUG_EVAL_SNAPSHOT;
    if (snap && (!ctx->spec || n > ctx->p.n_draft + 1 || n > ctx->p.n_chunk))
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "eval: a snapshot eval of %d tokens needs a context with n_draft >= "
                            "%d and n_chunk >= %d (this one has %d and %d)",
                            n, n - 1, n, ctx->p.n_draft, ctx->p.n_chunk);
    int64_t V = m->hp.n_vocab;
    ctx->mm_images = images;
    ctx->mm_n_images = n_images;
    ctx->mm_next = 0;
    rc = SNUG_OK;
    for (int32_t off = 0; off < n && rc == SNUG_OK; off += ctx->p.n_chunk) {
        int32_t T = SNUG_MIN(ctx->p.n_chunk, n - off);
        float *lg = NULL;
        int32_t n_logits = 0;
        if (logits_out) {
            if (all)
                lg = logits_out + (int64_t)off * V, n_logits = T;
            else if (off + T == n)
                lg = logits_out, n_logits = 1;
        }
        ctx->runs[0] = (struct snug_fwd_run){.T = T, .n_logits = n_logits, .snapshot = snap};
        ctx->run_ctx[0] = ctx;
        ctx->mm_off = off;
        rc = step_forward(ctx, ids + off, T, 1, lg, err);
    }
    ctx->mm_images = NULL;
    ctx->mm_n_images = 0;
    return rc;
}

/* One token for each of n contexts (snug.h): checks every row first; then steps of up to
 * ctxs[0]'s n_chunk rows, each row a run of one, on ctxs[0]'s instance. Contexts that cannot
 * share it (device contexts of other instances) or that carry a layer hook decode one by one. */
int snug_ctx_eval_batch(struct snug_ctx *const *ctxs, const snug_token *ids, int32_t n,
                        float *logits_out, struct snug_err *err) {
    if (n < 0 || (n > 0 && (!ctxs || !ids)))
        return snug_err_set(err, SNUG_ERR_INVALID, "eval batch: %d rows without %s", n,
                            ctxs ? "ids" : "contexts");
    if (n == 0) return SNUG_OK;
    const struct snug_model *m = ctxs[0]->m;
    bool batched = true, split = false;
    for (int32_t i = 0; i < n; i++) {
        struct snug_ctx *c = ctxs[i];
        if (!c || c->m != m)
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "eval batch: context %d is %s; every context must be of the "
                                "same model",
                                i, c ? "of another model" : "NULL");
        for (int32_t k = 0; k < i; k++)
            if (ctxs[k] == c)
                return snug_err_set(err, SNUG_ERR_INVALID,
                                    "eval batch: contexts %d and %d are the same; a context takes "
                                    "one token per batch",
                                    k, i);
        if (c->n_past + 1 > c->p.n_ctx)
            return snug_err_set(err, SNUG_ERR_BUDGET,
                                "eval batch: context %d is full (%d of %d positions used); make "
                                "the context larger (n_ctx)",
                                i, c->n_past, c->p.n_ctx);
        if (ids[i] < 0 || (uint32_t)ids[i] >= m->hp.n_vocab)
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "eval batch: token id %d of row %d is outside the vocabulary "
                                "[0, %u)",
                                ids[i], i, m->hp.n_vocab);
        if (!step_shares(ctxs[0], c)) split = true;
        /* (images, observers, hooks: run alone) */
        if (c->hook || c->mm_obs || split || c->rope_delta) batched = false;
    }
    int64_t V = m->hp.n_vocab;
    if (!batched) { /* one by one; each call re-checks what was checked above */
        static atomic_bool said_cuda;
        if (split && !atomic_exchange(&said_cuda, true))
            snug_log(SNUG_LOG_INFO, "eval batch: device contexts of different backend instances "
                                    "are decoded one by one (make them slots of one pool)\n");
        for (int32_t i = 0; i < n; i++) {
            int rc = snug_ctx_eval(ctxs[i], ids + i, 1, logits_out ? logits_out + i * V : NULL,
                                   SNUG_EVAL_LOGITS_LAST, err);
            if (rc) return rc;
        }
        return SNUG_OK;
    }
    struct snug_ctx *c0 = ctxs[0];
    for (int32_t off = 0; off < n; off += c0->p.n_chunk) {
        int32_t T = SNUG_MIN(c0->p.n_chunk, n - off);
        for (int32_t t = 0; t < T; t++) {
            c0->runs[t] = (struct snug_fwd_run){.row0 = t, .T = 1, .n_logits = 1};
            c0->run_ctx[t] = ctxs[off + t];
        }
        int rc = step_forward(c0, ids + off, T, T,
                              logits_out ? logits_out + (int64_t)off * V : NULL, err);
        if (rc) return rc;
    }
    return SNUG_OK;
}

/* The mixed step (snug.h): group the rows into runs (one per sequence, its rows together and
 * in order), check everything, then one forward on rows[0]'s instance, or one per run when a
 * sequence cannot share it or carries a layer hook. */
int snug_step(const struct snug_step_row *rows, int32_t n, float *logits_out,
              struct snug_err *err) {
    if (n < 0 || (n > 0 && !rows))
        return snug_err_set(err, SNUG_ERR_INVALID, "step: %d rows without a row array", n);
    if (n == 0) return SNUG_OK;
    struct snug_ctx *c0 = rows[0].ctx;
    if (!c0) return snug_err_set(err, SNUG_ERR_INVALID, "step: row 0 has no context");
    const struct snug_model *m = c0->m;
    if (n > c0->p.n_chunk)
        return snug_err_set(err, SNUG_ERR_BUDGET,
                            "step: %d rows, but a step holds at most %d (the n_chunk of row 0's "
                            "context); split the rows into several steps",
                            n, c0->p.n_chunk);
    int32_t n_runs = 0;
    bool alone = false; /* a run that cannot share the forward */
    for (int32_t i = 0; i < n;) {
        struct snug_ctx *c = rows[i].ctx;
        if (!c || c->m != m)
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "step: row %d's context is %s; every row must be of a context "
                                "of the same model",
                                i, c ? "of another model" : "NULL");
        for (int32_t r = 0; r < n_runs; r++)
            if (c0->run_ctx[r] == c)
                return snug_err_set(err, SNUG_ERR_INVALID,
                                    "step: the rows of one context must be together (row %d "
                                    "continues a context after other contexts' rows)",
                                    i);
        bool verify = rows[i].flags & SNUG_ROW_VERIFY;
        int32_t j = i, first_logits = -1;
        for (; j < n && rows[j].ctx == c; j++) {
            const struct snug_step_row *row = &rows[j];
            if (row->pos != c->n_past + (j - i))
                return snug_err_set(err, SNUG_ERR_INVALID,
                                    "step: row %d has position %d, but its context's next "
                                    "position is %d",
                                    j, row->pos, c->n_past + (j - i));
            if (row->token < 0 || (uint32_t)row->token >= m->hp.n_vocab)
                return snug_err_set(err, SNUG_ERR_INVALID,
                                    "step: token id %d of row %d is outside the vocabulary "
                                    "[0, %u)",
                                    row->token, j, m->hp.n_vocab);
            if (((row->flags & SNUG_ROW_VERIFY) != 0) != verify)
                return snug_err_set(err, SNUG_ERR_INVALID,
                                    "step: row %d: the rows of one context are all verification "
                                    "rows or none",
                                    j);
            if (row->flags & SNUG_ROW_LOGITS) {
                if (first_logits < 0) first_logits = j;
            } else if (first_logits >= 0) {
                return snug_err_set(err, SNUG_ERR_INVALID,
                                    "step: row %d wants no logits after row %d of the same "
                                    "context did; the rows with logits end a context's rows",
                                    j, first_logits);
            }
        }
        int32_t T = j - i;
        if ((int64_t)c->n_past + T > c->p.n_ctx)
            return snug_err_set(err, SNUG_ERR_BUDGET,
                                "step: %d rows do not fit the context of row %d: %d of %d "
                                "positions left; make the context larger (n_ctx)",
                                T, i, c->p.n_ctx - c->n_past, c->p.n_ctx);
        if (T > c->p.n_chunk)
            return snug_err_set(err, SNUG_ERR_BUDGET,
                                "step: %d rows of the context of row %d, more than its n_chunk %d",
                                T, i, c->p.n_chunk);
        if (verify && (!c->spec || T > c->p.n_draft + 1))
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "step: %d verification rows (row %d) need a context with n_draft "
                                ">= %d (this one has %d)",
                                T, i, T - 1, c->p.n_draft);
        c0->runs[n_runs] =
            (struct snug_fwd_run){.row0 = i,
                                  .T = T,
                                  .n_logits = first_logits < 0 ? 0 : j - first_logits,
                                  .snapshot = verify};
        c0->run_ctx[n_runs++] = c;
        if (c->hook || c->mm_obs || !step_shares(c0, c) || c->rope_delta) alone = true;
        i = j;
    }
    for (int32_t i = 0; i < n; i++) c0->ids[i] = rows[i].token;
    if (!alone) return step_forward(c0, c0->ids, n, n_runs, logits_out, err);
    /* one forward per run, each on its own sequence's instance (same numbers) */
    int64_t V = m->hp.n_vocab, out = 0;
    for (int32_t r = 0; r < n_runs; r++) {
        struct snug_fwd_run run = c0->runs[r];
        struct snug_ctx *c = c0->run_ctx[r];
        for (int32_t t = 0; t < run.T; t++) c->ids[t] = c0->ids[run.row0 + t];
        run.row0 = 0;
        c->runs[0] = run;
        c->run_ctx[0] = c;
        int rc = step_forward(c, c->ids, run.T, 1, logits_out ? logits_out + out * V : NULL, err);
        if (rc) return rc;
        out += run.n_logits;
    }
    return SNUG_OK;
}

/* ---- speculative decoding (src/speculative)
 * ------------------------------------------------------ */
struct snug_spec *snug_ctx_spec(struct snug_ctx *ctx) {
    return ctx->spec;
}
int32_t snug_ctx_n_draft(const struct snug_ctx *ctx) {
    return ctx->p.n_draft;
}
int32_t snug_model_n_nextn(const struct snug_model *m) {
    return (int32_t)m->hp.n_nextn;
}

/* The fields of a forward step every MTP run shares with the trunk's (the backend and its
 * work arenas; the MTP uploads its own positions). */
static struct snug_fwd base_fwd(struct snug_ctx *ctx) {
    struct snug_fwd f = {.m = ctx->m, .pool = ctx->pool, .n_threads = ctx->n_threads};
    ctx_fwd_be(ctx, &f, 0, NULL);
    return f;
}

int snug_ctx_eval_mtp(struct snug_ctx *ctx, const snug_token *ids, int32_t n, float *logits,
                      float *mtp_logits, struct snug_err *err) {
    if (!ctx->spec)
        return snug_err_set(err, SNUG_ERR_INVALID, "MTP logits need a context with n_draft > 0");
    ctx->mtp_sink = mtp_logits;
    ctx->mtp_rows = 0;
    int rc = snug_ctx_eval(ctx, ids, n, logits, SNUG_EVAL_LOGITS_ALL, err);
    if (rc == SNUG_OK) { /* the rows whose next token is in ids, all but the last position */
        struct snug_fwd base = base_fwd(ctx);
        snug_spec_flush_known(ctx->spec, &base,
                              mtp_logits ? mtp_logits + ctx->mtp_rows * (int64_t)ctx->m->hp.n_vocab
                                         : NULL);
        if (rc == SNUG_OK) rc = ctx->be->ops->sync(ctx->be, err);
    }
    ctx->mtp_sink = NULL;
    return rc;
}

int snug_ctx_draft(struct snug_ctx *ctx, snug_token next, int32_t k, snug_token *drafts,
                   int32_t *n_out, struct snug_err *err) {
    *n_out = 0;
    if (!ctx->spec) return snug_err_set(err, SNUG_ERR_INVALID, "draft: context has n_draft 0");
    struct snug_fwd base = base_fwd(ctx);
    int rc =
        snug_spec_draft(ctx->spec, &base, ctx->n_past, ctx->p.n_ctx, next, k, drafts, n_out, err);
    if (rc == SNUG_OK) rc = ctx->be->ops->sync(ctx->be, err);
    return rc;
}

/* Back to n_past tokens: the attention rows past it are dead, the recurrent states come from
 * the snapshot after token n_past - 1 (or are rebuilt from the state before the verification
 * by running the kept tokens again, in recompute mode), the MTP's pending rows are cut. */
int snug_ctx_truncate(struct snug_ctx *ctx, int32_t n_past, struct snug_err *err) {
    if (n_past == ctx->n_past) return SNUG_OK;
    if (n_past == 0) {
        snug_ctx_reset(ctx);
        return SNUG_OK;
    }
    if (ctx->snap_n == 0 || n_past <= ctx->snap_pos0 || n_past > ctx->snap_pos0 + ctx->snap_n)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "truncate to %d tokens: the recurrent state can only go back to a "
                            "token of the last snapshot eval (positions %d..%d)",
                            n_past, ctx->snap_pos0, ctx->snap_pos0 + ctx->snap_n - 1);
    int32_t keep = n_past - ctx->snap_pos0; /* tokens of the snapshot eval that stay */
    struct snug_spec *sp = ctx->spec;
    if (sp->recompute) {
        ctx_snap(ctx, 0, false);
        for (int32_t i = 0; i < keep; i++) ctx->pos[i] = ctx->snap_pos0 + i;
        struct snug_fwd_run run = {.kv = ctx->kv, .T = keep, .pos0 = ctx->snap_pos0};
        struct snug_fwd f = base_fwd(ctx);
        f.runs = &run;
        f.n_runs = 1;
        f.ids = sp->hid_ids;
        f.pos = ctx->pos;
        f.T = keep;
        if (ctx->rope_delta) { /* text after an image: its 3-D positions (t = h = w) */
            for (int32_t i = 0; i < 3 * keep; i++)
                ctx->rope3[i] = ctx->snap_pos0 + i / 3 + ctx->rope_delta;
            f.rope3 = ctx->rope3;
        }
        ctx_fwd_be(ctx, &f, keep, sp->hid_ids);
        snug_fwd_exec(&f, ctx->m->arch->forward);
        ctx->n_forwards++;
    } else {
        ctx_snap(ctx, keep - 1, false);
    }
    int rc = ctx->be->ops->sync(ctx->be, err);
    if (rc) return rc;
    ctx->n_past = n_past;
    if (sp->hid_pos0 == ctx->snap_pos0) sp->n_hid = SNUG_MIN(sp->n_hid, keep);
    return SNUG_OK;
}

void snug_ctx_spec_stats(const struct snug_ctx *ctx, struct snug_spec_stats *out) {
    if (ctx->spec)
        *out = ctx->spec->stats;
    else
        memset(out, 0, sizeof *out);
}
void snug_ctx_spec_stats_reset(struct snug_ctx *ctx) {
    if (ctx->spec) memset(&ctx->spec->stats, 0, sizeof ctx->spec->stats);
}

int snug_ctx_set_spec(struct snug_ctx *ctx, int32_t draft_k, struct snug_err *err) {
    if (draft_k < 0 || draft_k > ctx->p.n_draft)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "speculative drafts %d: expected 0..%d (the context's n_draft)",
                            draft_k, ctx->p.n_draft);
    if (ctx->spec) ctx->spec->k = draft_k;
    return SNUG_OK;
}
uint64_t snug_ctx_n_forwards(const struct snug_ctx *ctx) {
    return ctx->n_forwards;
}
int32_t snug_ctx_spec_k(const struct snug_ctx *ctx) {
    return ctx->spec ? ctx->spec->k : 0;
}
