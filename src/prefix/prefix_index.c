/* prefix_index.c — the prefix tree of token blocks (see prefix_index.h for the design).
 * Layout of the one arena: nodes, tokens ([n_nodes][block]), hash buckets, points. Free nodes
 * and free points are singly linked through `next_sibling` / `next`. The hash table holds the
 * full nodes only, keyed by (parent, block tokens), chained through `hnext`.
 * Eviction scans the node table for the least recently used leaf: O(nodes), and it runs only
 * when the pool is full (one leaf per block inserted), which is rare next to lookups.
 */
#include "prefix/prefix_index.h"

#include <string.h>

struct snug_prefix_index_node {
    int32_t parent, first_child, next_sibling, hnext;
    int32_t start, len; /* token positions [start, start + len) */
    int32_t first_point;
    bool used;
    uint64_t hash; /* of (parent, tokens) when full */
    uint64_t last_used;
};

struct snug_prefix_index_point {
    int32_t node, next, pos;
    bool used;
    uint64_t handle;
};

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static uint64_t block_hash(int32_t parent, const snug_token *t, int32_t n) {
    uint64_t h = mix64((uint64_t)(uint32_t)parent + 0x9e3779b97f4a7c15ULL);
    for (int32_t i = 0; i < n; i++) h = mix64(h ^ ((uint64_t)(uint32_t)t[i] + (uint64_t)i * 31));
    return h;
}

static int32_t n_nodes_of(const struct snug_prefix_index_cfg *c) {
    int64_t n = (c->max_tokens + c->block - 1) / c->block + 1;
    return n > INT32_MAX / 2 ? INT32_MAX / 2 : (int32_t)n;
}

static int32_t n_buckets_of(int32_t n_nodes) {
    int32_t b = 16;
    while (b < 2 * n_nodes && b < (1 << 29)) b <<= 1;
    return b;
}

size_t snug_prefix_index_bytes(const struct snug_prefix_index_cfg *c) {
    size_t nn = (size_t)n_nodes_of(c);
    return SNUG_ALIGN_UP(nn * sizeof(struct snug_prefix_index_node), 64) +
           SNUG_ALIGN_UP(nn * (size_t)c->block * sizeof(snug_token), 64) +
           SNUG_ALIGN_UP((size_t)n_buckets_of((int32_t)nn) * sizeof(int32_t), 64) +
           SNUG_ALIGN_UP((size_t)c->max_points * sizeof(struct snug_prefix_index_point), 64) + 64;
}

int snug_prefix_index_init(struct snug_prefix_index *ix, const struct snug_prefix_index_cfg *cfg,
                           struct snug_err *err) {
    memset(ix, 0, sizeof *ix);
    if (cfg->block < 1 || cfg->block > 65536 || cfg->max_tokens < 1 || cfg->max_points < 1 ||
        cfg->max_points > (1 << 28))
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "prefix index: block %d, max tokens %lld, max points %d (need "
                            "block in [1, 65536], both maxima >= 1)",
                            cfg->block, (long long)cfg->max_tokens, cfg->max_points);
    ix->cfg = *cfg;
    int rc = snug_arena_init(&ix->arena, "prefix index", snug_prefix_index_bytes(cfg), err);
    if (rc) return rc;
    ix->n_nodes = n_nodes_of(cfg);
    ix->n_buckets = n_buckets_of(ix->n_nodes);
    ix->nodes = snug_arena_alloc(&ix->arena, (size_t)ix->n_nodes * sizeof *ix->nodes, 64);
    ix->tokens = snug_arena_alloc(
        &ix->arena, (size_t)ix->n_nodes * (size_t)cfg->block * sizeof(snug_token), 64);
    ix->buckets = snug_arena_alloc(&ix->arena, (size_t)ix->n_buckets * sizeof(int32_t), 64);
    ix->points = snug_arena_alloc(&ix->arena, (size_t)cfg->max_points * sizeof *ix->points, 64);
    for (int32_t i = 0; i < ix->n_buckets; i++) ix->buckets[i] = -1;
    for (int32_t i = 0; i < ix->n_nodes; i++) {
        struct snug_prefix_index_node *nd = &ix->nodes[i];
        memset(nd, 0, sizeof *nd);
        nd->parent = nd->first_child = nd->hnext = nd->first_point = -1;
        nd->next_sibling = i + 1 < ix->n_nodes ? i + 1 : -1;
    }
    ix->nodes[0].used = true;
    ix->nodes[0].next_sibling = -1;
    ix->free_node = ix->n_nodes > 1 ? 1 : -1;
    ix->n_used_nodes = 1;
    for (int32_t i = 0; i < cfg->max_points; i++) {
        memset(&ix->points[i], 0, sizeof ix->points[i]);
        ix->points[i].next = i + 1 < cfg->max_points ? i + 1 : -1;
        ix->points[i].node = -1;
    }
    ix->free_point = 0;
    return SNUG_OK;
}

void snug_prefix_index_free(struct snug_prefix_index *ix) {
    if (!ix) return;
    snug_arena_free(&ix->arena);
    memset(ix, 0, sizeof *ix);
}

static snug_token *node_tokens(struct snug_prefix_index *ix, int32_t i) {
    return ix->tokens + (size_t)i * (size_t)ix->cfg.block;
}

static int32_t hash_find(struct snug_prefix_index *ix, int32_t parent, const snug_token *t) {
    uint64_t h = block_hash(parent, t, ix->cfg.block);
    for (int32_t i = ix->buckets[h & (uint64_t)(ix->n_buckets - 1)]; i >= 0; i = ix->nodes[i].hnext)
        if (ix->nodes[i].hash == h && ix->nodes[i].parent == parent &&
            !memcmp(node_tokens(ix, i), t, (size_t)ix->cfg.block * sizeof(snug_token)))
            return i;
    return -1;
}

static void hash_add(struct snug_prefix_index *ix, int32_t i) {
    struct snug_prefix_index_node *nd = &ix->nodes[i];
    nd->hash = block_hash(nd->parent, node_tokens(ix, i), ix->cfg.block);
    int32_t *b = &ix->buckets[nd->hash & (uint64_t)(ix->n_buckets - 1)];
    nd->hnext = *b;
    *b = i;
}

static void hash_remove(struct snug_prefix_index *ix, int32_t i) {
    int32_t *p = &ix->buckets[ix->nodes[i].hash & (uint64_t)(ix->n_buckets - 1)];
    while (*p >= 0 && *p != i) p = &ix->nodes[*p].hnext;
    if (*p == i) *p = ix->nodes[i].hnext;
    ix->nodes[i].hnext = -1;
}

static void point_release(struct snug_prefix_index *ix, int32_t p) {
    struct snug_prefix_index_point *pt = &ix->points[p];
    pt->used = false;
    pt->node = -1;
    pt->next = ix->free_point;
    ix->free_point = p;
    ix->n_used_points--;
}

/* Remove leaf i: unlink from its parent and the hash, drop its points (telling the owner). */
static void evict_leaf(struct snug_prefix_index *ix, int32_t i) {
    struct snug_prefix_index_node *nd = &ix->nodes[i];
    int32_t *p = &ix->nodes[nd->parent].first_child;
    while (*p != i) p = &ix->nodes[*p].next_sibling;
    *p = nd->next_sibling;
    if (nd->len == ix->cfg.block) hash_remove(ix, i);
    /* pop one point at a time: the callback may remove other points of this node */
    for (int32_t q; (q = nd->first_point) >= 0;) {
        uint64_t h = ix->points[q].handle;
        nd->first_point = ix->points[q].next;
        point_release(ix, q);
        if (ix->cfg.on_point_evicted) ix->cfg.on_point_evicted(ix->cfg.user, q, h);
    }
    ix->n_tokens -= nd->len;
    nd->used = false;
    nd->first_point = -1;
    nd->next_sibling = ix->free_node;
    ix->free_node = i;
    ix->n_used_nodes--;
    ix->n_evicted_nodes++;
}

/* A free node, evicting the least recently used leaf older than `now` if none is free. */
static int32_t node_alloc(struct snug_prefix_index *ix, uint64_t now) {
    if (ix->free_node < 0) {
        int32_t victim = -1;
        for (int32_t i = 1; i < ix->n_nodes; i++) {
            const struct snug_prefix_index_node *nd = &ix->nodes[i];
            if (nd->used && nd->first_child < 0 && nd->last_used < now &&
                (victim < 0 || nd->last_used < ix->nodes[victim].last_used))
                victim = i;
        }
        if (victim < 0) return -1;
        evict_leaf(ix, victim);
    }
    int32_t i = ix->free_node;
    ix->free_node = ix->nodes[i].next_sibling;
    ix->n_used_nodes++;
    return i;
}

static int32_t lcp(const snug_token *a, const snug_token *b, int32_t n) {
    int32_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Insert toks[0..n); *last = the node holding token n - 1 (root when n == 0). */
static int32_t insert_path(struct snug_prefix_index *ix, const snug_token *toks, int32_t n,
                           int32_t *last) {
    const int32_t B = ix->cfg.block;
    uint64_t now = ++ix->clock;
    int32_t node = 0, p = 0;
    ix->nodes[0].last_used = now;
    *last = 0;
    while (p < n) {
        int32_t rem = n - p, next = -1;
        if (rem >= B) next = hash_find(ix, node, toks + p);
        if (next >= 0) {
            ix->nodes[next].last_used = now;
            node = *last = next;
            p += B;
            continue;
        }
        /* a child that already holds toks[p..n) whole, or a partial child to extend */
        int32_t extend = -1;
        for (int32_t c = ix->nodes[node].first_child; c >= 0; c = ix->nodes[c].next_sibling) {
            struct snug_prefix_index_node *cn = &ix->nodes[c];
            int32_t m = SNUG_MIN(rem, cn->len);
            if (lcp(node_tokens(ix, c), toks + p, m) != m) continue;
            if (rem <= cn->len) {
                cn->last_used = now;
                *last = c;
                return n;
            }
            if (cn->len < B) extend = c;
        }
        int32_t add = SNUG_MIN(rem, B);
        if (extend >= 0) {
            struct snug_prefix_index_node *cn = &ix->nodes[extend];
            memcpy(node_tokens(ix, extend) + cn->len, toks + p + cn->len,
                   (size_t)(add - cn->len) * sizeof(snug_token));
            ix->n_tokens += add - cn->len;
            cn->len = add;
            cn->last_used = now;
            if (add == B) hash_add(ix, extend);
            node = *last = extend;
            p += add;
            continue;
        }
        if (node != 0 && ix->nodes[node].len < B) return p; /* cannot happen: partial is a leaf */
        int32_t c = node_alloc(ix, now);
        if (c < 0) return p;
        struct snug_prefix_index_node *cn = &ix->nodes[c];
        cn->used = true;
        cn->parent = node;
        cn->first_child = -1;
        cn->first_point = -1;
        cn->hnext = -1;
        cn->start = p;
        cn->len = add;
        cn->last_used = now;
        memcpy(node_tokens(ix, c), toks + p, (size_t)add * sizeof(snug_token));
        cn->next_sibling = ix->nodes[node].first_child;
        ix->nodes[node].first_child = c;
        if (add == B) hash_add(ix, c);
        ix->n_tokens += add;
        node = *last = c;
        p += add;
    }
    return n;
}

int32_t snug_prefix_index_insert(struct snug_prefix_index *ix, const snug_token *toks, int32_t n) {
    int32_t last;
    return insert_path(ix, toks, n < 0 ? 0 : n, &last);
}

int32_t snug_prefix_index_add_point(struct snug_prefix_index *ix, const snug_token *toks,
                                    int32_t pos, uint64_t handle) {
    if (pos < 1) return -1;
    int32_t node;
    if (insert_path(ix, toks, pos, &node) != pos || node == 0) return -1;
    for (int32_t q = ix->nodes[node].first_point; q >= 0; q = ix->points[q].next)
        if (ix->points[q].pos == pos) return q;
    if (ix->free_point < 0) return -1;
    int32_t q = ix->free_point;
    struct snug_prefix_index_point *pt = &ix->points[q];
    ix->free_point = pt->next;
    pt->used = true;
    pt->node = node;
    pt->pos = pos;
    pt->handle = handle;
    pt->next = ix->nodes[node].first_point;
    ix->nodes[node].first_point = q;
    ix->n_used_points++;
    return q;
}

void snug_prefix_index_remove_point(struct snug_prefix_index *ix, int32_t q) {
    if (q < 0 || q >= ix->cfg.max_points || !ix->points[q].used) return;
    int32_t *p = &ix->nodes[ix->points[q].node].first_point;
    while (*p != q) p = &ix->points[*p].next;
    *p = ix->points[q].next;
    point_release(ix, q);
}

uint64_t snug_prefix_index_point_handle(const struct snug_prefix_index *ix, int32_t q) {
    return q >= 0 && q < ix->cfg.max_points && ix->points[q].used ? ix->points[q].handle : 0;
}

/* Consider node i's points with pos <= lim for the best match. */
static void best_point(struct snug_prefix_index *ix, int32_t i, int32_t lim,
                       struct snug_prefix_match *out) {
    for (int32_t q = ix->nodes[i].first_point; q >= 0; q = ix->points[q].next) {
        const struct snug_prefix_index_point *pt = &ix->points[q];
        if (pt->pos <= lim && pt->pos > out->pos) {
            out->pos = pt->pos;
            out->point = q;
            out->handle = pt->handle;
        }
    }
}

void snug_prefix_index_lookup(struct snug_prefix_index *ix, const snug_token *toks, int32_t n,
                              int32_t max_pos, struct snug_prefix_match *out) {
    const int32_t B = ix->cfg.block;
    out->n_common = 0;
    out->point = -1;
    out->pos = 0;
    out->handle = 0;
    uint64_t now = ++ix->clock;
    int32_t node = 0, p = 0;
    ix->nodes[0].last_used = now;
    while (p < n) {
        int32_t rem = n - p;
        int32_t next = rem >= B ? hash_find(ix, node, toks + p) : -1;
        /* Siblings of the full match can share a shorter prefix with the query: their
         * points count too (only those with points need the compare). Without a full match
         * the divergence is inside this block: the best partial match over the children. */
        int32_t best = p;
        for (int32_t c = ix->nodes[node].first_child; c >= 0; c = ix->nodes[c].next_sibling) {
            if (c == next || (next >= 0 && ix->nodes[c].first_point < 0)) continue;
            int32_t m = lcp(node_tokens(ix, c), toks + p, SNUG_MIN(rem, ix->nodes[c].len));
            if (m == 0) continue;
            if (next < 0) ix->nodes[c].last_used = now;
            best_point(ix, c, SNUG_MIN(p + m, max_pos), out);
            if (p + m > best) best = p + m;
        }
        if (next < 0) {
            p = best;
            break;
        }
        ix->nodes[next].last_used = now;
        best_point(ix, next, SNUG_MIN(p + B, max_pos), out);
        node = next;
        p += B;
    }
    out->n_common = p;
}
