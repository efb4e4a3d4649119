/* plan_cache.c — the prefix cache's layout and plan items (see plan_cache.h). */
#include "plan/plan_cache.h"

#include "kv/kvfmt.h"
#include "plan/plan_auto.h"

#include <stdio.h>
#include <string.h>

uint64_t snug_plan_host_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib ? (uint64_t)kib * 1024 : snug_plan_host_memory();
}

uint64_t snug_plan_host_bytes(const struct snug_plan *p) {
    return p->total > p->device_total ? p->total - p->device_total : 0;
}

void snug_plan_cache_auto_at(struct snug_plan_cache_flags *f, enum snug_backend backend,
                             uint64_t cpu_budget, uint64_t weights, uint64_t host_items,
                             uint64_t available, char *why, size_t n) {
    const uint64_t mib = (uint64_t)1 << 20;
    if (f->ram_bytes != SNUG_CACHE_RAM_AUTO) {
        snprintf(why, n, "--cache-ram %s", f->ram_bytes ? "as given" : "0: off");
        return;
    }
    char left[160];
    uint64_t room;
    if (backend == SNUG_BACKEND_CUDA) {
        /* the plan's host items are allocated beside the tier: what is left after them */
        room = available > host_items ? available - host_items : 0;
        char a[24], h[24], r[24];
        snprintf(left, sizeof left,
                 "the host memory available less the plan's host items (%s - %s = %s)",
                 snug_plan_human_size(available, a, sizeof a),
                 snug_plan_human_size(host_items, h, sizeof h),
                 snug_plan_human_size(room, r, sizeof r));
    } else {
        uint64_t b = cpu_budget
                         ? cpu_budget
                         : snug_plan_default_budget(SNUG_BACKEND_CPU, 0, snug_plan_host_memory());
        room = b > weights ? b - weights : 0;
        snprintf(left, sizeof left, "the %.1f GiB %s leaves beside the weights",
                 (double)room / 1073741824.0, cpu_budget ? "--budget" : "the default budget");
    }
    uint64_t ram = SNUG_MIN(room / 4, SNUG_CACHE_RAM_AUTO_CAP) / mib * mib;
    if (ram < SNUG_CACHE_RAM_AUTO_MIN) ram = 0;
    f->ram_bytes = ram;
    if (ram)
        snprintf(why, n, "auto: a quarter of %s, at most %.0f GiB; --cache-ram 0 turns it off",
                 left, (double)SNUG_CACHE_RAM_AUTO_CAP / 1073741824.0);
    else
        snprintf(why, n, "auto: off, a quarter of %s is under %.0f MiB", left,
                 (double)SNUG_CACHE_RAM_AUTO_MIN / 1048576.0);
}

void snug_plan_cache_auto(struct snug_plan_cache_flags *f, enum snug_backend backend,
                          uint64_t cpu_budget, uint64_t weights, uint64_t host_items, char *why,
                          size_t n) {
    uint64_t available = f->ram_bytes == SNUG_CACHE_RAM_AUTO && backend == SNUG_BACKEND_CUDA
                             ? snug_plan_host_available()
                             : 0;
    snug_plan_cache_auto_at(f, backend, cpu_budget, weights, host_items, available, why, n);
}

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
    /* a device context's rows move in one copy per layer and page: pages of at least 256 rows
     * (27B: about 9 MiB), so a 100K-token restore is hundreds of copies per layer, not
     * thousands */
    if (out->device && row * 256 > ((uint64_t)1 << 20)) out->page_bytes = row * 256;
    char kvn[24];
    snug_kvfmt_code_name(p->lim.kv_type, kvn, sizeof kvn);
    char lay[256] = {0};
    snprintf(lay, sizeof lay, "%.16s kv=%.12s a%d h%d d%d r%d c%lld s%lld m%d", hp->arch, kvn,
             s->n_attn, s->n_head_kv, s->head_dim, s->n_rec, (long long)s->conv_elems,
             (long long)s->delta_elems, mtp ? 1 : 0);
    memcpy(out->layout, lay, sizeof out->layout - 1); /* the files' layout text (prefix_file.h) */
    return snug_prefix_cfg_resolve(out, err);
}

int snug_plan_cache_reserve(const struct snug_hparams *hp, const struct snug_plan_weights *w,
                            const struct snug_plan_limits *lim,
                            const struct snug_plan_cache_flags *f, uint64_t *out,
                            struct snug_err *err) {
    *out = 0;
    if (!f->ram_bytes) return SNUG_OK;
    struct snug_plan_limits l = *lim;
    l.n_ctx = SNUG_MAX(SNUG_MAX(l.n_ctx, (int64_t)hp->n_ctx_train), 1);
    if (l.n_chunk == SNUG_PLAN_CHUNK_AUTO) l.n_chunk = SNUG_PLAN_CHUNK_BASE; /* (not chosen yet) */
    /* --kv auto: the largest over the candidates (the row size rounds the pages) */
    bool any = l.kv_type == SNUG_PLAN_KV_AUTO;
    struct snug_plan *p = snug_malloc(sizeof *p);
    if (!p) return snug_err_set(err, SNUG_ERR_NOMEM, "plan: out of memory");
    int rc = SNUG_OK;
    for (int i = 0; rc == SNUG_OK && i < (any ? snug_plan_auto_kv_n : 1); i++) {
        if (any) l.kv_type = snug_plan_auto_kv_order[i];
        struct snug_prefix_cfg c;
        rc = snug_plan_make(hp, w, &l, p, err);
        if (rc == SNUG_OK) rc = snug_plan_cache_cfg(hp, p, f, &c, err);
        if (rc == SNUG_OK) *out = SNUG_MAX(*out, snug_prefix_bytes(&c));
    }
    snug_free(p);
    return rc;
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
