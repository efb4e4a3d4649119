/* plan_auto.c — sizing by itself (see plan_auto.h): the budget without a flag, the choice of
 * context and K/V formats by bisection over the plan (snug_plan_max_ctx), the prompt chunk
 * (snug_plan_chunk), the boot line, exact size strings. Read next: plan_auto.h, docs/memory.md.
 */
#include "plan/plan_auto.h"

#include "core/core.h"
#include "kv/kvfmt.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define KVC(k, v) (16 * ((v) + 1) + (k)) /* snug_kvfmt_code of a mixed pair, as a constant */

/* Least lossy first, by the KL against the f16 cache measured in docs/kv-formats.md; formats
 * that another one beats on both loss and bytes are left out (f32: f16's loss at twice the
 * bytes; bf16: f16's bytes, more loss; tq4/q8_0 and q8_0/tq3: a smaller pair loses less). */
const int32_t snug_plan_auto_kv_order[] = {
    SNUG_KV_F16,
    SNUG_KV_Q8_0,
    SNUG_KV_FP8,
    KVC(SNUG_KV_Q8_0, SNUG_KV_TQ4),
    KVC(SNUG_KV_FP8, SNUG_KV_TQ4),
    SNUG_KV_TQ4,
    KVC(SNUG_KV_TQ4, SNUG_KV_TQ3),
    SNUG_KV_TQ3,
};
const int snug_plan_auto_kv_n = (int)(sizeof snug_plan_auto_kv_order / sizeof(int32_t));

/* Every single format, then the mixed pairs worth a row (cheap keys or values next to the
 * 8-bit ones). */
const int32_t snug_plan_table_kv[] = {
    SNUG_KV_F16,
    SNUG_KV_F32,
    SNUG_KV_BF16,
    SNUG_KV_Q8_0,
    SNUG_KV_FP8,
    SNUG_KV_TQ4,
    SNUG_KV_TQ3,
    KVC(SNUG_KV_Q8_0, SNUG_KV_TQ4),
    KVC(SNUG_KV_FP8, SNUG_KV_TQ4),
    KVC(SNUG_KV_Q8_0, SNUG_KV_TQ3),
    KVC(SNUG_KV_TQ4, SNUG_KV_TQ3),
};
const int snug_plan_table_kv_n = (int)(sizeof snug_plan_table_kv / sizeof(int32_t));

uint64_t snug_plan_host_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

uint64_t snug_plan_default_budget(enum snug_backend backend, uint64_t device_free,
                                  uint64_t host_memory) {
    const uint64_t mib = (uint64_t)1 << 20;
    uint64_t have = backend == SNUG_BACKEND_CUDA ? device_free : host_memory;
    uint64_t margin = backend == SNUG_BACKEND_CUDA
                          ? SNUG_PLAN_CUDA_MARGIN
                          : SNUG_MAX(host_memory / 8, SNUG_PLAN_HOST_MARGIN_MIN);
    return have > margin ? (have - margin) / mib * mib : 0;
}

const char *snug_plan_size_str(uint64_t bytes, char *buf, size_t n) {
    static const struct {
        const char *unit;
        int shift;
    } units[] = {{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}};
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
        uint64_t one = (uint64_t)1 << units[u].shift;
        if (bytes < one) continue;
        for (int dec = 0; dec <= 3; dec++) { /* the shortest decimal that reads back exactly */
            snprintf(buf, n, "%.*f%s", dec, (double)bytes / (double)one, units[u].unit);
            uint64_t back = 0;
            if (snug_plan_parse_size(buf, &back) && back == bytes) return buf;
        }
    }
    snprintf(buf, n, "%llu", (unsigned long long)bytes);
    return buf;
}

/* ---- the prompt chunk ----------------------------------------------------------------------- */
int32_t snug_plan_chunk(const struct snug_hparams *hp, const struct snug_plan_weights *w,
                        const struct snug_plan_limits *lim, uint64_t budget,
                        enum snug_plan_chunk_why *why) {
    const int64_t ctx = lim->n_ctx > 0 ? lim->n_ctx : 1;
    if (lim->n_chunk != SNUG_PLAN_CHUNK_AUTO) {
        *why = SNUG_PLAN_CHUNK_GIVEN;
        int64_t c = lim->n_chunk > 0 ? lim->n_chunk : SNUG_PLAN_CHUNK_BASE;
        return (int32_t)SNUG_MIN(c, ctx);
    }
    int32_t best = (int32_t)SNUG_MIN((int64_t)SNUG_PLAN_CHUNK_BASE, ctx);
    if (lim->backend != SNUG_BACKEND_CUDA) { /* the cpu's prompt speed does not gain */
        *why = SNUG_PLAN_CHUNK_CPU;
        return best;
    }
    *why = budget ? SNUG_PLAN_CHUNK_FITS : SNUG_PLAN_CHUNK_NO_BUDGET;
    struct snug_plan_limits l = *lim;
    struct snug_plan *p = budget ? snug_malloc(sizeof *p) : NULL;
    if (budget && !p) return best; /* (no room to plan in: the base chunk) */
    /* every item grows with the chunk, so the first that does not fit ends the search */
    for (int64_t c = 2 * (int64_t)SNUG_PLAN_CHUNK_BASE; c <= SNUG_PLAN_CHUNK_CAP && best < ctx;
         c *= 2) {
        l.n_chunk = (int32_t)SNUG_MIN(c, ctx);
        struct snug_err e = {0};
        if (budget && (snug_plan_make(hp, w, &l, p, &e) != SNUG_OK || p->device_total > budget))
            break;
        best = l.n_chunk;
    }
    snug_free(p);
    if (best == ctx && ctx < SNUG_PLAN_CHUNK_CAP) *why = SNUG_PLAN_CHUNK_CONTEXT;
    return best;
}

size_t snug_plan_chunk_str(int32_t n_chunk, enum snug_plan_chunk_why why, uint64_t budget,
                           char *buf, size_t n) {
    size_t o = 0;
    if (n) buf[0] = 0;
    char have[32];
    snug_plan_putf(buf, n, &o, "%d (", n_chunk);
    switch (why) {
    case SNUG_PLAN_CHUNK_GIVEN:
        snug_plan_putf(buf, n, &o, "as requested, at most the context");
        break;
    case SNUG_PLAN_CHUNK_FITS:
        snug_plan_putf(buf, n, &o, "auto: the largest of %d..%d that fits %s", SNUG_PLAN_CHUNK_BASE,
                       SNUG_PLAN_CHUNK_CAP, snug_plan_human_size(budget, have, sizeof have));
        break;
    case SNUG_PLAN_CHUNK_CONTEXT:
        snug_plan_putf(buf, n, &o, "auto: the whole context");
        break;
    case SNUG_PLAN_CHUNK_NO_BUDGET:
        snug_plan_putf(buf, n, &o, "auto: the cap %d; no budget to fit", SNUG_PLAN_CHUNK_CAP);
        break;
    case SNUG_PLAN_CHUNK_CPU:
        snug_plan_putf(buf, n, &o, "auto: %d on the cpu, where larger chunks gain nothing",
                       SNUG_PLAN_CHUNK_BASE);
        break;
    }
    snug_plan_putf(buf, n, &o, ")");
    return o;
}

/* ---- the context and formats --------------------------------------------------------------- */
int snug_plan_auto(const struct snug_hparams *hp, const struct snug_plan_weights *w,
                   const struct snug_plan_auto_req *req, struct snug_plan_auto *out,
                   struct snug_err *err) {
    memset(out, 0, sizeof *out);
    struct snug_plan_limits lim = req->lim;
    const int64_t want = lim.n_ctx; /* 0 = automatic */
    const int32_t chunk_req = lim.n_chunk;
    if (chunk_req == SNUG_PLAN_CHUNK_AUTO) lim.n_chunk = SNUG_PLAN_CHUNK_BASE; /* (see below) */
    out->ctx_auto = want <= 0;
    out->kv_auto = lim.kv_type == SNUG_PLAN_KV_AUTO;
    if (want < 0) return snug_err_set(err, SNUG_ERR_INVALID, "context %lld", (long long)want);

    /* the budget: given, or the machine's (only needed when something is to be chosen) */
    out->budget = req->budget;
    out->source = req->budget ? SNUG_PLAN_BUDGET_GIVEN : SNUG_PLAN_BUDGET_NONE;
    if (!req->budget && (out->ctx_auto || out->kv_auto)) {
        uint64_t host = req->host_memory ? req->host_memory : snug_plan_host_memory();
        out->machine_bytes = lim.backend == SNUG_BACKEND_CUDA ? req->device_free : host;
        out->budget = snug_plan_default_budget(lim.backend, req->device_free, host);
        out->source =
            lim.backend == SNUG_BACKEND_CUDA ? SNUG_PLAN_BUDGET_DEVICE : SNUG_PLAN_BUDGET_HOST;
        if (!out->budget)
            return snug_err_set(
                err, SNUG_ERR_INVALID,
                lim.backend == SNUG_BACKEND_CUDA
                    ? "cannot size the context: the free device memory is unknown or below the "
                      "512 MiB margin; give --vram-budget SIZE (or --ctx N and a --kv format)"
                    : "cannot size the context: the physical memory is unknown; give --budget "
                      "SIZE (or --ctx N and a --kv format)");
    }
    /* what the sized items may take: the budget less the caller's reserve */
    uint64_t room = out->budget;
    if (out->budget && req->reserve) {
        if (req->reserve >= out->budget)
            return snug_err_set(err, SNUG_ERR_BUDGET,
                                "the prefix cache's RAM tier (%.2f GiB) takes the whole budget "
                                "(%.2f GiB): lower --cache-ram",
                                (double)req->reserve / 1073741824.0,
                                (double)out->budget / 1073741824.0);
        room = out->budget - req->reserve;
    }
    char have[32];
    snug_plan_human_size(room, have, sizeof have);

    /* the format: given, or the least lossy one that reaches the target context */
    if (out->kv_auto) {
        const int64_t target = want > 0 ? want : (int64_t)hp->n_ctx_train;
        int best = -1;
        int64_t best_reach = 0;
        for (int i = 0; i < snug_plan_auto_kv_n; i++) {
            struct snug_plan_limits l = lim;
            l.kv_type = snug_plan_auto_kv_order[i];
            int64_t reach = snug_plan_max_ctx(hp, w, &l, room, want > 0 ? want : 0);
            if (target > 0 && reach >= target) {
                best = i, best_reach = reach;
                break;
            }
            if (reach > best_reach) best = i, best_reach = reach; /* the furthest, so far */
        }
        if (best < 0 || best_reach == 0)
            return snug_err_set(err, SNUG_ERR_BUDGET,
                                "no context fits %s with any KV format (the weights and fixed "
                                "buffers alone exceed it)",
                                have);
        lim.kv_type = snug_plan_auto_kv_order[best];
        if (want > 0 && best_reach < want) {
            char kv[24];
            snug_kvfmt_code_name(lim.kv_type, kv, sizeof kv);
            return snug_err_set(err, SNUG_ERR_BUDGET,
                                "a context of %lld tokens does not fit %s with any KV format; the "
                                "largest that fits is %lld (KV %s)",
                                (long long)want, have, (long long)best_reach, kv);
        }
    }
    out->kv_type = lim.kv_type;

    /* the context: given, or the largest that fits (capped at the trained length) */
    if (room) out->ctx_reach = snug_plan_max_ctx(hp, w, &lim, room, 0);
    if (out->ctx_auto) {
        if (out->ctx_reach == 0)
            return snug_err_set(err, SNUG_ERR_BUDGET,
                                "no context fits %s (the weights and fixed buffers alone exceed "
                                "it)",
                                have);
        lim.n_ctx = out->ctx_reach;
    }
    out->n_ctx = lim.n_ctx;
    out->ctx_at_train = hp->n_ctx_train && (uint64_t)out->n_ctx == hp->n_ctx_train;

    /* the chunk: the context and formats above were chosen at the base chunk, exactly as with
     * --chunk 512, so a larger chunk only takes what that plan leaves of the budget; without a
     * budget on cuda it fits the free device memory minus the margin, when known */
    out->chunk_budget = room;
    if (!room && chunk_req == SNUG_PLAN_CHUNK_AUTO && lim.backend == SNUG_BACKEND_CUDA)
        out->chunk_budget = snug_plan_default_budget(lim.backend, req->device_free, 0);
    lim.n_chunk = chunk_req;
    out->n_chunk = snug_plan_chunk(hp, w, &lim, out->chunk_budget, &out->chunk_why);
    lim.n_chunk = out->n_chunk;
    return snug_plan_check(hp, w, &lim, room, &out->plan, err);
}

size_t snug_plan_auto_flags(const struct snug_plan_auto *a, char *buf, size_t n) {
    size_t o = 0;
    if (n) buf[0] = 0;
    const struct snug_plan_limits *l = &a->plan.lim;
    int k, v;
    snug_kvfmt_split(a->kv_type, &k, &v);
    snug_plan_putf(buf, n, &o, "--ctx %lld", (long long)a->n_ctx);
    if (k == v)
        snug_plan_putf(buf, n, &o, " --kv %s", snug_kvfmt_name(k));
    else
        snug_plan_putf(buf, n, &o, " --kv-k %s --kv-v %s", snug_kvfmt_name(k), snug_kvfmt_name(v));
    char size[32], have[32], mem[32];
    if (a->budget)
        snug_plan_putf(buf, n, &o, " %s %s",
                       l->backend == SNUG_BACKEND_CUDA ? "--vram-budget" : "--budget",
                       snug_plan_size_str(a->budget, size, sizeof size));
    if (l->n_slots > 1) snug_plan_putf(buf, n, &o, " --slots %d", l->n_slots);
    /* the chunk when it is not the default's (a short context's whole length is) */
    if (a->n_chunk && a->n_chunk != SNUG_MIN((int64_t)SNUG_PLAN_CHUNK_BASE, a->n_ctx))
        snug_plan_putf(buf, n, &o, " --chunk %d", a->n_chunk);
    snug_plan_putf(buf, n, &o, " --spec-draft %d", l->n_draft);
    if (a->has_cache)
        snug_plan_putf(buf, n, &o, " --cache-ram %s",
                       a->cache_ram ? snug_plan_size_str(a->cache_ram, size, sizeof size) : "0");

    /* why */
    snug_plan_human_size(a->budget, have, sizeof have);
    snug_plan_putf(buf, n, &o, " (");
    if (!a->ctx_auto)
        snug_plan_putf(buf, n, &o, "context as requested");
    else if (a->ctx_at_train)
        snug_plan_putf(buf, n, &o, "the trained length %lld fits %s", (long long)a->n_ctx, have);
    else
        snug_plan_putf(buf, n, &o, "largest context that fits %s", have);
    if (!a->kv_auto)
        snug_plan_putf(buf, n, &o, "; KV as requested");
    else if (a->ctx_auto && !a->ctx_at_train)
        snug_plan_putf(buf, n, &o,
                       "; no KV format reaches the trained length, this one reaches furthest");
    else
        snug_plan_putf(buf, n, &o, "; least lossy KV format reaching it");
    if (a->source == SNUG_PLAN_BUDGET_DEVICE)
        snug_plan_putf(buf, n, &o, "; budget = free device memory %s minus 512 MiB",
                       snug_plan_human_size(a->machine_bytes, mem, sizeof mem));
    else if (a->source == SNUG_PLAN_BUDGET_HOST)
        snug_plan_putf(buf, n, &o, "; budget = physical memory %s minus max(1/8, 1 GiB)",
                       snug_plan_human_size(a->machine_bytes, mem, sizeof mem));
    if (a->has_cache && a->cache_ram && l->backend != SNUG_BACKEND_CUDA)
        snug_plan_putf(buf, n, &o, "; %s of it for the prefix cache",
                       snug_plan_human_size(a->cache_ram, mem, sizeof mem));
    if (a->n_chunk) {
        char chunk[96];
        snug_plan_chunk_str(a->n_chunk, a->chunk_why, a->chunk_budget, chunk, sizeof chunk);
        snug_plan_putf(buf, n, &o, "; chunk %s", chunk);
    }
    snug_plan_putf(buf, n, &o, "; plan %s)",
                   snug_plan_human_size(a->plan.device_total, size, sizeof size));
    return o;
}

int snug_plan_table(const struct snug_hparams *hp, const struct snug_plan_weights *w,
                    const struct snug_plan_limits *lim, uint64_t budget, int32_t n_draft_on,
                    struct snug_plan_table_row *rows, int *n_rows, struct snug_err *err) {
    *n_rows = 0;
    if (!budget) return snug_err_set(err, SNUG_ERR_INVALID, "the table needs a budget");
    for (int mtp = 0; mtp < (n_draft_on > 0 ? 2 : 1); mtp++) {
        struct snug_plan_auto_req req = {.lim = *lim, .budget = budget};
        req.lim.n_ctx = 0;
        req.lim.kv_type = SNUG_PLAN_KV_AUTO;
        req.lim.n_draft = mtp ? n_draft_on : 0;
        /* the contexts are the base chunk's (what --chunk auto keeps: it never costs context);
         * the totals the chosen chunk's, as `snug plan --ctx max` plans them */
        const bool chunk_auto = lim->n_chunk == SNUG_PLAN_CHUNK_AUTO;
        if (chunk_auto) req.lim.n_chunk = SNUG_PLAN_CHUNK_BASE;
        struct snug_plan_auto *a = snug_malloc(sizeof *a);
        if (!a) return snug_err_set(err, SNUG_ERR_NOMEM, "plan table: out of memory");
        struct snug_err e2 = {0};
        int32_t pick = snug_plan_auto(hp, w, &req, a, &e2) == SNUG_OK ? a->kv_type : -2;
        for (int i = 0; i < snug_plan_table_kv_n && *n_rows < SNUG_PLAN_TABLE_MAX_ROWS; i++) {
            struct snug_plan_table_row *r = &rows[(*n_rows)++];
            struct snug_plan_limits l = req.lim;
            l.kv_type = snug_plan_table_kv[i];
            *r = (struct snug_plan_table_row){.kv_type = l.kv_type,
                                              .n_draft = l.n_draft,
                                              .max_ctx = snug_plan_max_ctx(hp, w, &l, budget, 0),
                                              .is_auto = l.kv_type == pick};
            if (r->max_ctx > 0) {
                l.n_ctx = r->max_ctx;
                enum snug_plan_chunk_why why;
                if (chunk_auto) {
                    l.n_chunk = SNUG_PLAN_CHUNK_AUTO;
                    l.n_chunk = snug_plan_chunk(hp, w, &l, budget, &why);
                }
                int rc = snug_plan_make(hp, w, &l, &a->plan, err);
                if (rc) {
                    snug_free(a);
                    return rc;
                }
                r->device_total = a->plan.device_total;
            }
        }
        snug_free(a);
    }
    return SNUG_OK;
}
