/* slots.c — the model's sequence slots over one backend instance (slots.h): the plan for n
 * slots, the instance that allocates it, one thread pool, and one context handle per slot.
 * Invariant: the instance's sizes are the plan's, nothing else computes a size; all allocation
 * happens in snug_slots_init (and snug_ctx_init, a context over a one-slot instance of its own).
 * Read next: slots.h, src/model/context.c, src/plan/plan.c.
 */
#include "engine/slots.h"

#include "model/model.h"
#include "model/mtp.h"

#include <string.h>

struct snug_slots {
    struct snug_model *m;
    struct snug_pool *pool;
    struct snug_be *be;
    struct snug_plan plan;
    int32_t n;
    struct snug_ctx **ctx; /* [n] */
};

int snug_slots_open_backend(struct snug_model *m, const struct snug_ctx_params *p, int32_t n_slots,
                            struct snug_pool *pool, struct snug_be **be, struct snug_plan *plan,
                            struct snug_err *err) {
    *be = NULL;
    enum snug_backend kind = p->backend == 1 ? SNUG_BACKEND_CUDA : SNUG_BACKEND_CPU;
    const struct snug_backend_module *mod;
    int rc = snug_backend_module_get(kind, &mod, err);
    if (rc) return rc;
    /* Every size comes from the memory planner (src/plan), the same numbers `snug plan`
     * prints; nothing here computes a size of its own. */
    struct snug_plan_limits lim = {
        .n_ctx = p->n_ctx,
        .n_slots = n_slots,
        .n_chunk = p->n_chunk,
        .n_draft = p->n_draft,
        .n_threads = snug_pool_size(pool),
        .kv_type = p->kv_type,
        .backend = kind,
    };
    if (kind == SNUG_BACKEND_CUDA) { /* the whole plan, weights included, against the budget */
        struct snug_plan_weights w;
        snug_plan_weights_from_gguf(m->gguf, &w);
        rc = snug_plan_check(&m->hp, &w, &lim, p->vram_budget, plan, err);
    } else {
        rc = snug_plan_make(&m->hp, NULL, &lim, plan, err);
    }
    if (rc) return rc;
    struct snug_backend_limits bl = {
        .kv_shape = &plan->kv_shape,
        .kv_bytes = snug_kv_bytes(&plan->kv_shape),
        .n_slots = n_slots,
        .work_bytes = plan->work_bytes,
        .scratch_bytes = plan->cuda_scratch_bytes,
        .host_work_bytes = plan->cuda_host_work_bytes,
        .n_chunk = plan->lim.n_chunk,
        .n_embd = m->hp.n_embd,
        .n_head = m->hp.n_head,
        .head_dim = m->hp.head_dim,
        .profile = p->profile,
    };
    struct snug_kv_shape mtp_shape;
    if (p->n_draft > 0) { /* speculative decoding: snapshots (+ MTP cache and rows on CUDA) */
        bl.n_snap = p->n_draft + 1;
        SNUG_ASSERT(plan->snapshot_bytes == snug_kv_snap_bytes(&plan->kv_shape, bl.n_snap));
        if (kind == SNUG_BACKEND_CUDA) {
            mtp_shape = snug_spec_kv_shape(&m->hp, p->n_ctx, (enum snug_kv_type)p->kv_type);
            bl.mtp_kv_shape = &mtp_shape;
            bl.spec_bytes = snug_spec_dev_bytes(&m->hp, plan->lim.n_chunk);
        }
    }
    size_t free0 = 0, free1 = 0, total = 0;
    struct snug_err e2 = {0};
    bool dev = kind != SNUG_BACKEND_CPU;
    if (dev) mod->mem_info(&free0, &total, &e2);
    rc = snug_backend_open(kind, be, m->gguf, &bl, pool, err);
    if (rc) return rc;
    if (dev) {
        mod->mem_info(&free1, &total, &e2);
        snug_log(SNUG_LOG_INFO,
                 "%s: device memory free %.1f MiB before load, %.1f MiB after (of %.1f MiB); "
                 "backend holds %.1f MiB (%d slot%s); plan device total %.1f MiB\n",
                 mod->name, free0 / 1048576.0, free1 / 1048576.0, total / 1048576.0,
                 (*be)->ops->bytes(*be) / 1048576.0, n_slots, n_slots == 1 ? "" : "s",
                 plan->device_total / 1048576.0);
    }
    return SNUG_OK;
}

int snug_slots_init(struct snug_slots **out, struct snug_model *m, const struct snug_ctx_params *p,
                    int32_t n_slots, struct snug_err *err) {
    *out = NULL;
    if (n_slots < 1)
        return snug_err_set(err, SNUG_ERR_INVALID, "slots: %d slots: expected at least 1", n_slots);
    struct snug_ctx_params rp = p ? *p : snug_ctx_default_params();
    int rc = snug_ctx_params_resolve(m, &rp, err);
    if (rc) return rc;
    struct snug_slots *s = snug_calloc(1, sizeof *s);
    if (!s) return snug_err_set(err, SNUG_ERR_NOMEM, "slots: out of memory");
    s->m = m;
    s->ctx = snug_calloc((size_t)n_slots, sizeof *s->ctx);
    if (!s->ctx) {
        rc = snug_err_set(err, SNUG_ERR_NOMEM, "slots: out of memory");
        goto fail;
    }
    s->n = n_slots;
    if ((rc = snug_pool_init(&s->pool, rp.n_threads ? rp.n_threads : m->n_threads, err))) goto fail;
    if ((rc = snug_slots_open_backend(m, &rp, n_slots, s->pool, &s->be, &s->plan, err))) goto fail;
    for (int32_t i = 0; i < n_slots; i++)
        if ((rc = snug_ctx_init_slot(&s->ctx[i], m, &rp, s->pool, s->be, i, s->plan.lim.n_chunk,
                                     s->plan.pos_bytes, err)))
            goto fail;
    *out = s;
    return SNUG_OK;
fail:
    snug_slots_free(s);
    return rc;
}

/* snug_ctx_init (snug.h): a context over a one-slot backend instance and a thread pool of its
 * own — a pool of one slot, made here because the instance is sized by the plan (src/plan);
 * snug_ctx_free closes both (snug_ctx_own_instance). */
int snug_ctx_init(struct snug_ctx **out, struct snug_model *m, const struct snug_ctx_params *params,
                  struct snug_err *err) {
    *out = NULL;
    struct snug_ctx_params p = params ? *params : snug_ctx_default_params();
    int rc = snug_ctx_params_resolve(m, &p, err);
    if (rc) return rc;
    struct snug_plan *plan = snug_malloc(sizeof *plan);
    if (!plan) return snug_err_set(err, SNUG_ERR_NOMEM, "context: out of memory");
    struct snug_pool *pool = NULL;
    struct snug_be *be = NULL;
    struct snug_ctx *c = NULL;
    rc = snug_pool_init(&pool, p.n_threads ? p.n_threads : m->n_threads, err);
    if (!rc) rc = snug_slots_open_backend(m, &p, 1, pool, &be, plan, err);
    if (!rc)
        rc = snug_ctx_init_slot(&c, m, &p, pool, be, 0, plan->lim.n_chunk, plan->pos_bytes, err);
    snug_free(plan);
    if (rc) {
        snug_backend_close(be);
        snug_pool_free(pool);
        return rc;
    }
    snug_ctx_own_instance(c);
    *out = c;
    return SNUG_OK;
}

void snug_slots_free(struct snug_slots *s) {
    if (!s) return;
    for (int32_t i = 0; s->ctx && i < s->n; i++) snug_ctx_free(s->ctx[i]);
    snug_free(s->ctx);
    snug_backend_close(s->be);
    snug_pool_free(s->pool);
    snug_free(s);
}

int32_t snug_slots_n(const struct snug_slots *s) {
    return s->n;
}
struct snug_ctx *snug_slots_ctx(struct snug_slots *s, int32_t i) {
    SNUG_ASSERT(i >= 0 && i < s->n);
    return s->ctx[i];
}
struct snug_be *snug_slots_backend(struct snug_slots *s) {
    return s->be;
}
struct snug_pool *snug_slots_pool(struct snug_slots *s) {
    return s->pool;
}
const struct snug_plan *snug_slots_plan(const struct snug_slots *s) {
    return &s->plan;
}
