/* prefix.h — the prefix cache: checkpoints of a sequence's state at token positions, found by
 * the longest common prefix of a new prompt (prefix_index.h), kept in a host-RAM tier and an
 * optional disk tier that survives a restart (prefix_file.h), restored into any slot.
 *
 * A checkpoint at position pos is the recurrent state after token pos - 1 (the DeltaNet and
 * conv states of every linear layer, and the MTP block's state: one opaque blob of
 * state_bytes) plus the attention KV rows needed to rebuild [0, pos) in another slot. The KV
 * rows are stored once per token path, not once per checkpoint: a checkpoint holds the rows
 * [base, pos) since its parent (the latest earlier checkpoint on the same path), so the
 * checkpoints of a 100K-token conversation cost its KV once plus one state each, instead of a
 * quadratic sum. Restoring walks the chain from the root. A checkpoint exists only while its
 * parent does (dropping one drops its descendants).
 *
 * The engine moves the bytes: the cache never sees a slot, only the callbacks of
 * struct snug_prefix_io (host memcpy on the CPU; a pinned staging copy on CUDA), so this
 * module depends on core alone.
 *
 * Owns: one arena sized at init (snug_prefix_bytes): the RAM tier's pages, the index, the
 * entry table, one staging page for the disk tier and (device contexts) one for the engine's
 * device copies. Nothing is allocated after init.
 * Invariants: an entry's parent exists (in RAM or on disk); a RAM entry's pages hold the state
 * then the rows [base, pos); a disk entry's file passed the header check at load and passes
 * the payload check before any byte of it reaches a slot; the current chain is never evicted
 * while it is being stored or restored. Threads: one thread (the engine's) calls everything
 * except snug_prefix_stats, which any thread may call.
 * Read next: prefix.c, prefix_sched.h (where checkpoints go), docs/prefix-cache.md.
 */
#ifndef SNUG_PREFIX_H
#define SNUG_PREFIX_H

#include "prefix/prefix_file.h"
#include "prefix/prefix_index.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct snug_prefix_cfg {
    uint64_t state_bytes;  /* one state snapshot (recurrent + MTP), > 0 */
    uint64_t kv_row_bytes; /* one position of K+V over all attention layers (0 if none) */
    int32_t n_ctx;         /* the longest sequence */
    uint64_t ram_bytes;    /* host tier (--cache-ram); 0 = no cache at all */
    const char *disk_dir;  /* disk tier folder (--cache-dir) or NULL; needs ram_bytes > 0 */
    uint64_t disk_bytes;   /* disk tier budget (--cache-disk); 0 with a dir = 4 × ram_bytes */
    uint8_t model_id[SNUG_PREFIX_ID_BYTES]; /* snug_prefix_model_id of the model file */
    char layout[SNUG_PREFIX_LAYOUT_BYTES];  /* formats and shapes, e.g. "qwen35 k=f16 v=f16 ..." */
    int32_t block_tokens;                   /* index block (default 64) */
    int64_t index_tokens;                   /* tokens the index holds (default 8 × n_ctx) */
    int32_t max_entries;                    /* checkpoints (default 1024) */
    uint64_t page_bytes;                    /* RAM page (default 1 MiB, rounded to whole KV rows) */
    /* the engine's contexts keep their caches in device memory: one more page, `device_staging`,
     * through which the engine moves a device context's KV rows (model/ctx_prefix.h) */
    bool device;
};

/* How the engine's slot state moves in and out. Every callback returns 0 or a status. */
struct snug_prefix_io {
    void *user;
    /* bytes [off, off + n) of the slot's state blob: out of the slot / into the slot */
    int (*state_out)(void *user, uint64_t off, void *dst, size_t n);
    int (*state_in)(void *user, uint64_t off, const void *src, size_t n);
    /* KV rows [row0, row0 + n_rows), kv_row_bytes each, packed: out of / into the slot */
    int (*kv_out)(void *user, int32_t row0, int32_t n_rows, void *dst);
    int (*kv_in)(void *user, int32_t row0, int32_t n_rows, const void *src);
    /* optional (NULL: 0): the sequence's rotary offset (a context's rope_delta, non-zero after
     * images), stored with the checkpoint and set on restore */
    int32_t (*rope_delta_out)(void *user);
    int (*rope_delta_in)(void *user, int32_t rope_delta);
};

struct snug_prefix_stats {
    uint64_t lookups, hits;                   /* lookups, and those that found a checkpoint */
    uint64_t tokens_reused, tokens_evaluated; /* prompt tokens (snug_prefix_note_prompt) */
    uint64_t stores, restores, restore_failures;
    uint64_t ram_entries, ram_bytes, ram_capacity;
    uint64_t disk_entries, disk_bytes, disk_capacity;
    uint64_t disk_other_bytes;  /* the folder's other cache files (refused, another server's
                                 * in-flight writes), counted against the disk budget */
    uint64_t stale_tmp_removed; /* temporaries of dead writers removed at boot */
    uint64_t ram_evictions, disk_evictions, index_evictions;
    uint64_t disk_writes, disk_write_failures, files_loaded, files_refused;
};

struct snug_prefix_hit {
    int32_t n_common; /* longest common prefix with any cached sequence */
    int32_t pos;      /* the checkpoint to restore: its position (0: none) */
    int32_t entry;    /* its entry (-1: none) */
};

struct pfx_entry; /* prefix.c */

struct snug_prefix {
    struct snug_prefix_cfg cfg;
    char dir[1024];
    struct snug_arena arena;
    struct snug_prefix_index ix;
    struct pfx_entry *entries;
    uint8_t *pages;          /* [n_pages][page_bytes] */
    int32_t *page_next;      /* page chains; free pages chained from free_page */
    uint8_t *staging;        /* one page, for the disk tier */
    uint8_t *device_staging; /* one page for the engine's device copies (cfg.device), or NULL */
    int32_t *chain;          /* [max_entries] scratch of a restore */
    snug_token *tokbuf;      /* [n_ctx] scratch of the folder load */
    int32_t n_pages, free_page, n_free_pages;
    uint64_t disk_other; /* bytes of the folder's cache files that are not entries (st) */
    int32_t rows_per_page;
    uint64_t page_bytes, clock;
    struct snug_prefix_file_expect expect;
    pthread_mutex_t mu; /* guards st */
    struct snug_prefix_stats st;
};

/* Defaults filled in, sizes checked. */
int snug_prefix_cfg_resolve(struct snug_prefix_cfg *cfg, struct snug_err *err);
/* Host bytes of the cache for a (resolved) config: the RAM tier plus bookkeeping. */
uint64_t snug_prefix_bytes(const struct snug_prefix_cfg *cfg);

/* Set up the tiers; with a disk folder, create it if needed and load every valid checkpoint
 * file in it (a corrupt, truncated, foreign or orphaned file is skipped with a log line and
 * left in place, its bytes counted against the disk budget). Temporaries whose writer is gone
 * (`KEY-POS.snugpfx.PID.tmp` of a dead PID, or the older `KEY-POS.snugpfx.tmp`: a kill during a
 * write) are removed; a live writer's are counted. Over the budget, the least recently written
 * checkpoint files go until the folder's cache files fit it. */
int snug_prefix_init(struct snug_prefix *pc, const struct snug_prefix_cfg *cfg,
                     struct snug_err *err);
void snug_prefix_free(struct snug_prefix *pc);

/* The longest common prefix of toks[0..n) and the latest checkpoint at or before
 * min(n_common, n - 1) (one token must stay to evaluate: the logits come from it). */
void snug_prefix_lookup(struct snug_prefix *pc, const snug_token *toks, int32_t n,
                        struct snug_prefix_hit *out);

/* Take a checkpoint of the slot that has evaluated toks[0..pos): copies the state and the KV
 * rows since the parent checkpoint out through io, into RAM (evicting least recently used
 * checkpoints) and, with a disk tier, to a file. *stored tells whether it was kept (false:
 * larger than the tier, or already cached). SNUG_OK unless a callback failed. */
int snug_prefix_store(struct snug_prefix *pc, const snug_token *toks, int32_t pos,
                      const struct snug_prefix_io *io, bool *stored, struct snug_err *err);

/* Restore hit->entry into a slot: the state, and with want_kv the KV rows [0, pos) (a slot
 * that already holds those rows — its own earlier sequence — passes false and truncates). The
 * chain's disk files are verified before the first byte reaches the slot and the tokens they
 * hold are compared with toks[0..pos); on any failure the entry is dropped, nothing was
 * written, and SNUG_ERR_FORMAT comes back: the caller prefills cold. */
int snug_prefix_restore(struct snug_prefix *pc, const snug_token *toks,
                        const struct snug_prefix_hit *hit, bool want_kv,
                        const struct snug_prefix_io *io, struct snug_err *err);

/* The engine reports each prompt: tokens taken from the cache vs evaluated. */
void snug_prefix_note_prompt(struct snug_prefix *pc, int32_t reused, int32_t evaluated);
void snug_prefix_stats(struct snug_prefix *pc, struct snug_prefix_stats *out);

#endif /* SNUG_PREFIX_H */
