/* plan_cache.c — the prefix cache's layout and plan items (see plan_cache.h). */
#include "plan/plan_cache.h"

#include "kv/kvfmt.h"

#include <stdio.h>
#include <string.h>

int snug_plan_cache_cfg(const struct snug_hparams *hp, const struct snug_plan *p,
                        const struct snug_plan_cache_flags *f, struct snug_prefix_cfg *out,
                        struct snug_err *err) {
    memset(out, 0, sizeof *out);
    const struct snug_kv_shape *s = &p->kv_shape;
    bool mtp = p->lim.n_draft > 0 && hp->n_nextn > 0;
    uint64_t row = snug_kv_bytes_per_token(s);
    uint64_t state = snug_kv_state_bytes(s);
    if (mtp) {
        struct snug_kv_shape one = *s;
        one.n_attn = 1;
        row += snug_kv_bytes_per_token(&one);
        state += (uint64_t)hp->n_embd * sizeof(float);
    }
    out->state_bytes = state ? state : 64; /* a model without linear layers: a token marker */
    out->kv_row_bytes = row;
    out->n_ctx = (int32_t)p->lim.n_ctx;
    out->ram_bytes = f->ram_bytes;
    out->disk_dir = f->disk_dir;
    out->disk_bytes = f->disk_bytes;
    out->device = p->lim.backend == SNUG_BACKEND_CUDA;
    char kvn[24];
    snug_kvfmt_code_name(p->lim.kv_type, kvn, sizeof kvn);
    char lay[256] = {0};
    snprintf(lay, sizeof lay, "%.16s kv=%.12s a%d h%d d%d r%d c%lld s%lld m%d", hp->arch, kvn,
             s->n_attn, s->n_head_kv, s->head_dim, s->n_rec, (long long)s->conv_elems,
             (long long)s->delta_elems, mtp ? 1 : 0);
    memcpy(out->layout, lay, sizeof out->layout - 1); /* the files' layout text (prefix_file.h) */
    return snug_prefix_cfg_resolve(out, err);
}

int snug_plan_add_cache(const struct snug_hparams *hp, struct snug_plan *p,
                        const struct snug_plan_cache_flags *f, uint64_t *disk_budget,
                        struct snug_err *err) {
    *disk_budget = 0;
    if (!f->ram_bytes) {
        if (f->disk_dir)
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "--cache-dir needs a RAM tier too: give --cache-ram SIZE");
        return SNUG_OK;
    }
    struct snug_prefix_cfg c;
    int rc = snug_plan_cache_cfg(hp, p, f, &c, err);
    if (rc) return rc;
    if (p->n_items >= SNUG_PLAN_MAX_ITEMS)
        return snug_err_set(err, SNUG_ERR_INTERNAL, "plan: no room for the cache item");
    struct snug_plan_item *it = &p->items[p->n_items++];
    snprintf(it->name, sizeof it->name, "prefix cache (ram)");
    it->bytes = snug_prefix_bytes(&c);
    it->device = SNUG_DEVICE_HOST;
    it->estimated = false;
    p->total += it->bytes;
    if (p->lim.backend != SNUG_BACKEND_CUDA) p->device_total += it->bytes;
    *disk_budget = c.disk_dir ? c.disk_bytes : 0;
    return SNUG_OK;
}
