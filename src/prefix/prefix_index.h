/* prefix_index.h — the token index of the prefix cache: every cached token sequence, stored
 * as a prefix tree of fixed-size token blocks, with checkpoints ("points": a token position →
 * an opaque handle of the caller's) attached to the block where their prefix ends.
 *
 * Why a tree of blocks (and not a token-level trie or a flat hash of blocks): agent traffic is
 * a few long sequences that share long prefixes and diverge once per turn. A block of B tokens
 * per node keeps the node count (and the per-node overhead) at n_tokens / B, a hash of
 * (parent, block tokens) finds the matching full child in O(1), and the divergence inside a
 * block is found by comparing the few children that exist — so a lookup costs O(n / B) hash
 * probes plus O(children · B) token compares at the one divergence point, and the longest
 * common prefix is exact to the token (a flat block hash would only be exact to the block).
 *
 * Owns: one arena sized at init from the config (nodes, tokens, points, hash buckets); nothing
 * is allocated after init; lookups and inserts allocate nothing.
 * Invariants: only full nodes (len == B) have children; the full children of a node hold
 * distinct blocks (so the hash finds at most one); a node's subtree was used no later than the
 * node (every operation touches the whole path), so the least recently used leaf is the first
 * to go when the node pool runs out; a point at position p lives in the node covering token
 * p - 1, i.e. start < p <= start + len.
 * Read next: prefix.h (the checkpoint store that owns the handles), prefix_index.c.
 */
#ifndef SNUG_PREFIX_INDEX_H
#define SNUG_PREFIX_INDEX_H

#include "core/core.h"

#include <stdbool.h>
#include <stdint.h>

struct snug_prefix_index_cfg {
    int32_t block;      /* tokens per node (>= 1; default 64) */
    int64_t max_tokens; /* tokens the index holds at most (rounded up to whole blocks) */
    int32_t max_points; /* checkpoints at most */
    /* Called when a point goes away because its node was evicted (not for
     * snug_prefix_index_remove_point). May be NULL. */
    void (*on_point_evicted)(void *user, int32_t point, uint64_t handle);
    void *user;
};

struct snug_prefix_index_node; /* prefix_index.c */
struct snug_prefix_index_point;

struct snug_prefix_index {
    struct snug_prefix_index_cfg cfg;
    struct snug_arena arena;
    struct snug_prefix_index_node *nodes; /* [n_nodes]; node 0 is the root (no tokens) */
    snug_token *tokens;                   /* [n_nodes][block] */
    int32_t *buckets;                     /* [n_buckets] first node of each hash chain, -1 */
    struct snug_prefix_index_point *points;
    int32_t n_nodes, n_buckets, free_node, free_point;
    int32_t n_used_nodes, n_used_points;
    int64_t n_tokens; /* tokens held */
    uint64_t clock;
    uint64_t n_evicted_nodes;
};

/* The result of a lookup. */
struct snug_prefix_match {
    int32_t n_common; /* longest common prefix of the query with any indexed sequence */
    int32_t point;    /* the latest point at or before min(n_common, max_pos); -1: none */
    int32_t pos;      /* its position (0 when none) */
    uint64_t handle;  /* its handle */
};

/* Arena bytes for a config (what snug_prefix_index_init allocates). */
size_t snug_prefix_index_bytes(const struct snug_prefix_index_cfg *cfg);
int snug_prefix_index_init(struct snug_prefix_index *ix, const struct snug_prefix_index_cfg *cfg,
                           struct snug_err *err);
void snug_prefix_index_free(struct snug_prefix_index *ix);

/* Insert toks[0..n) (evicting least recently used leaves when the pool is full; never the
 * path being inserted). Returns how many leading tokens are indexed: n, or fewer when the
 * whole pool is this one path. */
int32_t snug_prefix_index_insert(struct snug_prefix_index *ix, const snug_token *toks, int32_t n);

/* Attach a point at position pos (1 <= pos) of the sequence toks[0..pos), inserting the
 * sequence first. Returns the point id (>= 0), or -1 when no point is free or the prefix
 * could not be indexed whole. One point per (prefix, position): an existing point at exactly
 * pos on this path is returned instead (its handle unchanged). */
int32_t snug_prefix_index_add_point(struct snug_prefix_index *ix, const snug_token *toks,
                                    int32_t pos, uint64_t handle);
void snug_prefix_index_remove_point(struct snug_prefix_index *ix, int32_t point);
uint64_t snug_prefix_index_point_handle(const struct snug_prefix_index *ix, int32_t point);

/* Longest common prefix of toks[0..n) with the index, and the latest point at a position
 * <= min(n_common, max_pos). Touches the matched path (LRU). Allocates nothing. */
void snug_prefix_index_lookup(struct snug_prefix_index *ix, const snug_token *toks, int32_t n,
                              int32_t max_pos, struct snug_prefix_match *out);

#endif /* SNUG_PREFIX_INDEX_H */
