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

/* The store's config for a made plan: one checkpoint's state = every DeltaNet layer's conv +
 * delta state, plus (speculative decoding on an MTP model) one hidden row of the MTP block's
 * pending input; one KV row = every attention layer's K+V of a position, plus (MTP) the MTP
 * block's own layer. Model identity and layout text are left for the caller (the layout gets a
 * default naming the formats and shapes). */
int snug_plan_cache_cfg(const struct snug_hparams *hp, const struct snug_plan *p,
                        const struct snug_plan_cache_flags *f, struct snug_prefix_cfg *out,
                        struct snug_err *err);

/* Add the RAM tier's item to the plan (no item when ram_bytes is 0). *disk_budget gets the disk
 * tier's bytes (0 without a dir). */
int snug_plan_add_cache(const struct snug_hparams *hp, struct snug_plan *p,
                        const struct snug_plan_cache_flags *f, uint64_t *disk_budget,
                        struct snug_err *err);

#endif /* SNUG_PLAN_CACHE_H */
