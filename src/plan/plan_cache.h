/* plan_cache.h — the prefix cache's tiers in the memory plan: from a made plan and
 * the cache flags, the checkpoint layout (state bytes, KV row bytes: what the store and the
 * disk files are sized by) and the plan items "prefix cache (ram)" (host: the RAM tier's pages
 * plus its index and bookkeeping, snug_prefix_bytes) and the disk tier's budget (not memory:
 * reported beside the table, never in the totals).
 * Invariant: the server sizes its cache with snug_plan_cache_cfg, the same function the plan
 * uses, so the planned bytes are the allocated bytes.
 * Read next: src/prefix/prefix.h, plan.h.
 */
#ifndef SNUG_PLAN_CACHE_H
#define SNUG_PLAN_CACHE_H

#include "plan/plan.h"
#include "prefix/prefix.h"

struct snug_plan_cache_flags {
    uint64_t ram_bytes;       /* --cache-ram (0: no cache) */
    const char *disk_dir;     /* --cache-dir or NULL */
    uint64_t disk_bytes;      /* --cache-disk (0 with a dir: 4 x ram) */
    int32_t checkpoint_every; /* --cache-checkpoint-every (default 4096) */
};

#define SNUG_CACHE_CHECKPOINT_EVERY_DEFAULT 4096

/* --cache-ram auto (the server's default): a quarter of the host memory left for it, at most
 * 16 GiB, in whole MiB; below 64 MiB no cache. "Left for it": on the cpu the budget (--budget,
 * or the machine's default: physical memory minus max(1/8, 1 GiB)) less the weights — the
 * tier is then part of the budget and the context is sized in the rest, the plan's other host
 * items with it; on cuda the host memory available at boot (MemAvailable; the tier is host
 * memory, outside the GPU budget) less the plan's host items (snug_plan_host_bytes: staging,
 * host work, logits, step tables, token history, sampler, MTP host buffers, a vision tower's
 * host items), which are allocated beside the tier and would otherwise be counted twice.
 * docs/prefix-cache.md says why. */
#define SNUG_CACHE_RAM_AUTO     UINT64_MAX
#define SNUG_CACHE_RAM_AUTO_CAP ((uint64_t)16 << 30)
#define SNUG_CACHE_RAM_AUTO_MIN ((uint64_t)64 << 20)

/* The host memory available now: /proc/meminfo's MemAvailable, else the physical memory; 0
 * when neither is known. */
uint64_t snug_plan_host_available(void);
/* A made plan's host bytes outside the GPU budget: total − device_total, the figure
 * snug_plan_format prints as "host (not in the gpu budget)" (0 on the cpu, where every item is
 * in the budget). Add the items snug_plan_add_item adds later (a vision tower's host items)
 * when they are not in p yet. */
uint64_t snug_plan_host_bytes(const struct snug_plan *p);
/* Resolve f->ram_bytes when it is SNUG_CACHE_RAM_AUTO (else leave it): cpu_budget is the cpu's
 * budget (0: the machine's default), weights the weights' bytes (cpu); host_items the plan's
 * host bytes on cuda (snug_plan_host_bytes of the plan the server allocates, without the tier;
 * unused on the cpu), subtracted from the host memory available (read here on cuda only).
 * why[0..n): the rule with its numbers, for the boot line (always written). */
void snug_plan_cache_auto(struct snug_plan_cache_flags *f, enum snug_backend backend,
                          uint64_t cpu_budget, uint64_t weights, uint64_t host_items, char *why,
                          size_t n);
/* The same rule with the host memory available given (cuda; unused on the cpu): reads nothing
 * of the machine on cuda, nor on the cpu with a budget given (tests). */
void snug_plan_cache_auto_at(struct snug_plan_cache_flags *f, enum snug_backend backend,
                             uint64_t cpu_budget, uint64_t weights, uint64_t host_items,
                             uint64_t available, char *why, size_t n);

/* The store's config for a made plan: one checkpoint's state = every DeltaNet layer's conv +
 * delta state, plus (speculative decoding on an MTP model) one hidden row of the MTP block's
 * pending input; one KV row = every attention layer's K+V of a position, plus (MTP) the MTP
 * block's own layer. Model identity and layout text are left for the caller (the layout gets a
 * default naming the formats and shapes). */
int snug_plan_cache_cfg(const struct snug_hparams *hp, const struct snug_plan *p,
                        const struct snug_plan_cache_flags *f, struct snug_prefix_cfg *out,
                        struct snug_err *err);

/* The RAM tier's plan item at the largest context these limits may get (lim's n_ctx or the
 * trained length, whichever is larger; its index grows with the context): what the cpu's
 * context sizing reserves for it (snug_plan_auto_req.reserve). 0 without a RAM tier. */
int snug_plan_cache_reserve(const struct snug_hparams *hp, const struct snug_plan_weights *w,
                            const struct snug_plan_limits *lim,
                            const struct snug_plan_cache_flags *f, uint64_t *out,
                            struct snug_err *err);

/* Add the RAM tier's item to the plan (no item when ram_bytes is 0). *disk_budget gets the disk
 * tier's bytes (0 without a dir). */
int snug_plan_add_cache(const struct snug_hparams *hp, struct snug_plan *p,
                        const struct snug_plan_cache_flags *f, uint64_t *disk_budget,
                        struct snug_err *err);

#endif /* SNUG_PLAN_CACHE_H */
