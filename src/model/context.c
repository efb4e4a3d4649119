/* context.c — struct snug_ctx: one sequence over a loaded model. Owns the thread pool, the
 * KV/state caches (src/kv) and the work arena, all sized at snug_ctx_init by the memory
 * planner (src/plan/plan.h); snug_ctx_eval splits the input into chunks of at most n_chunk tokens
 * and runs the architecture's forward on each.
 * Invariant: snug_ctx_eval allocates nothing (tests check snug_alloc_count around it).
 * Read next: src/arch/qwen35.c (forward), src/kv/kv.h.
 */
#include "model.h"

#include "plan/plan.h"
#include "quant/quant.h"

#include <string.h>

struct snug_ctx {
    struct snug_model *m;
    struct snug_ctx_params p;
    int n_threads;
    struct snug_pool *pool;
    struct snug_kv kv;
    struct snug_arena work;
    int32_t *pos; /* [n_chunk] */
    int32_t n_past;
    snug_layer_hook hook;
    void *hook_user;
};

struct snug_ctx_params snug_ctx_default_params(void) {
    return (struct snug_ctx_params){.n_ctx = 4096, .n_chunk = 512, .kv_type = SNUG_KV_F16};
}

/* Build the context: resolve defaults, ask the architecture for its plan, allocate the caches
 * and the work arena once. */
int snug_ctx_init(struct snug_ctx **out, struct snug_model *m, const struct snug_ctx_params *params,
                  struct snug_err *err) {
    *out = NULL;
    struct snug_ctx_params p = params ? *params : snug_ctx_default_params();
    if (p.n_ctx < 0 || p.n_chunk < 0 || p.n_threads < 0)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "context: n_ctx %d, n_chunk %d, n_threads %d must not be negative",
                            p.n_ctx, p.n_chunk, p.n_threads);
    if (p.kv_type != SNUG_KV_F16 && p.kv_type != SNUG_KV_F32)
        return snug_err_set(err, SNUG_ERR_INVALID, "context: kv_type %d: expected f16 or f32",
                            p.kv_type);
    if (p.n_ctx == 0) {
        p.n_ctx = 4096;
        if (m->hp.n_ctx_train && (uint64_t)p.n_ctx > m->hp.n_ctx_train)
            p.n_ctx = (int32_t)m->hp.n_ctx_train;
    }
    if (p.n_chunk == 0) p.n_chunk = 512;
    if (p.n_chunk > p.n_ctx) p.n_chunk = p.n_ctx;

    struct snug_ctx *c = snug_calloc(1, sizeof *c);
    if (!c) return snug_err_set(err, SNUG_ERR_NOMEM, "context: out of memory");
    c->m = m;
    c->p = p;
    int rc = snug_pool_init(&c->pool, p.n_threads ? p.n_threads : m->n_threads, err);
    if (rc) goto fail;
    c->n_threads = snug_pool_size(c->pool);

    /* Every arena size comes from the memory planner (src/plan), the same numbers
     * `snug plan` prints; nothing here computes a size of its own. */
    struct snug_plan_limits lim = {
        .n_ctx = p.n_ctx,
        .n_slots = 1,
        .n_chunk = p.n_chunk,
        .n_threads = c->n_threads,
        .kv_type = p.kv_type,
        .backend = SNUG_BACKEND_CPU,
    };
    struct snug_plan plan;
    rc = snug_plan_make(&m->hp, NULL, &lim, &plan, err);
    if (rc) goto fail;
    rc = snug_kv_init(&c->kv, &plan.kv_shape, err);
    if (rc) goto fail;
    rc = snug_arena_init(&c->work, "work", plan.work_bytes, err);
    if (rc) goto fail;
    c->pos = snug_malloc(plan.pos_bytes);
    if (!c->pos) {
        rc = snug_err_set(err, SNUG_ERR_NOMEM, "context: out of memory");
        goto fail;
    }
    *out = c;
    return SNUG_OK;
fail:
    snug_ctx_free(c);
    return rc;
}

void snug_ctx_free(struct snug_ctx *ctx) {
    if (!ctx) return;
    snug_free(ctx->pos);
    snug_arena_free(&ctx->work);
    snug_kv_free(&ctx->kv);
    snug_pool_free(ctx->pool);
    snug_free(ctx);
}

void snug_ctx_reset(struct snug_ctx *ctx) {
    ctx->n_past = 0;
    snug_kv_reset(&ctx->kv);
}

int32_t snug_ctx_n_past(const struct snug_ctx *ctx) {
    return ctx->n_past;
}
int32_t snug_ctx_n_ctx(const struct snug_ctx *ctx) {
    return ctx->p.n_ctx;
}

void snug_ctx_set_layer_hook(struct snug_ctx *ctx, snug_layer_hook hook, void *user) {
    ctx->hook = hook;
    ctx->hook_user = user;
}

/* Validate the whole request first (so a failure changes nothing), then run the chunks. */
int snug_ctx_eval(struct snug_ctx *ctx, const snug_token *ids, int32_t n, float *logits_out,
                  unsigned flags, struct snug_err *err) {
    const struct snug_model *m = ctx->m;
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
    int64_t V = m->hp.n_vocab;
    for (int32_t off = 0; off < n; off += ctx->p.n_chunk) {
        int32_t T = SNUG_MIN(ctx->p.n_chunk, n - off);
        for (int32_t i = 0; i < T; i++) ctx->pos[i] = ctx->n_past + i;
        snug_arena_reset_to(&ctx->work, 0);
        float *lg = NULL;
        if (logits_out) {
            if (all)
                lg = logits_out + (int64_t)off * V;
            else if (off + T == n)
                lg = logits_out;
        }
        struct snug_fwd f = {
            .m = m,
            .pool = ctx->pool,
            .n_threads = ctx->n_threads,
            .work = &ctx->work,
            .kv = &ctx->kv,
            .ids = ids + off,
            .pos = ctx->pos,
            .T = T,
            .pos0 = ctx->n_past,
            .logits = lg,
            .logits_all = all,
            .hook = ctx->hook,
            .hook_user = ctx->hook_user,
        };
        m->arch->forward(&f);
        ctx->n_past += T;
    }
    return SNUG_OK;
}
