/* match.c — the grammar matcher: parse stacks as interned nodes, sets of stacks interned into a
 * lazily built DFA over bytes, token masks by a walk of the vocabulary trie, rollback, forced
 * tokens, shortest completions.
 *
 * Owns: struct snug_vocab_trie (every token's bytes in a preorder trie: node i's first child is
 * i + 1, its subtree ends at end[i], so a walk that rejects a byte skips the whole subtree at
 * once and shared prefixes are tested once) and struct snug_matcher.
 * A stack is a node (pos, parent): pos is the element the stack is at, parent the node to return
 * to; interning makes equal stacks one id, so a parser state is a sorted array of node ids (the
 * grammar's tops: byte elements, or the ACCEPT node 0). A reference whose next element is END
 * does not push a return node (a tail call), so repetitions run in constant stack depth.
 * Sets are interned as DFA states with 256 cached transitions each, so after warm-up a byte costs
 * one table read; masks are cached per DFA state (LRU). When the state table nears its limit it
 * is flushed between tokens (the current state and the rollback history are re-interned).
 * Invariant: all tables are allocated by snug_matcher_init; nothing allocates afterwards.
 * Read next: gbnf.c (what the elements mean), jschema.c.
 */
#include "grammar/grammar_impl.h"

#include "core/core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== vocabulary trie ======================================================================= */

struct snug_vocab_trie {
    const struct snug_tokenizer *tok;
    int32_t n_vocab;
    int32_t n_nodes;      /* node 0 is the root */
    uint8_t *byte;        /* [n_nodes] the edge byte into node i */
    uint16_t *depth;      /* [n_nodes] root = 0 */
    int32_t *end;         /* [n_nodes] first node after i's subtree */
    int32_t *tok_first;   /* [n_nodes + 1] tokens spelled exactly by node i */
    snug_token *tok_list; /* tokens in trie order */
    uint8_t *in_trie;     /* [n_vocab] 1 when the token takes part in grammar matching */
    int32_t max_depth;
    /* the bytes on the edges of node i's subtree (incl. its own edge): bits of bytes < 128 in
     * sub_ascii[i][0..1], sub_wide[i] = 1 when some byte is >= 128 */
    uint64_t (*sub_ascii)[2];
    uint8_t *sub_wide;
    /* bit k: every path of node i's subtree (from its own edge) is a well-formed UTF-8 prefix
     * when k continuation bytes are pending before it (leads C2-DF, E1-EC, EE-EF, F1-F3 only:
     * the leads whose continuations are the full 80-BF range) */
    uint8_t *sub_utf8;
    uint64_t *in_mask; /* [(n_vocab + 63) / 64] bits of the tokens in the trie */
};

struct tok_ref {
    const uint8_t *s;
    size_t n;
    snug_token id;
};

static int tok_ref_cmp(const void *a, const void *b) {
    const struct tok_ref *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, n);
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

void snug_vocab_trie_free(struct snug_vocab_trie *t) {
    if (!t) return;
    snug_free(t->byte);
    snug_free(t->depth);
    snug_free(t->end);
    snug_free(t->tok_first);
    snug_free(t->tok_list);
    snug_free(t->in_trie);
    snug_free(t->sub_ascii);
    snug_free(t->sub_wide);
    snug_free(t->sub_utf8);
    snug_free(t->in_mask);
    snug_free(t);
}

int32_t snug_vocab_trie_n_nodes(const struct snug_vocab_trie *t) {
    return t->n_nodes;
}

int snug_vocab_trie_build(struct snug_vocab_trie **out, const struct snug_tokenizer *tok,
                          struct snug_err *err) {
    *out = NULL;
    int32_t V = snug_tokenizer_n_vocab(tok);
    struct snug_vocab_trie *t = snug_calloc(1, sizeof *t);
    struct tok_ref *refs = snug_malloc((size_t)(V ? V : 1) * sizeof *refs);
    if (!t || !refs) goto nomem;
    t->tok = tok;
    t->n_vocab = V;
    t->in_trie = snug_calloc((size_t)(V ? V : 1), 1);
    if (!t->in_trie) goto nomem;
    int32_t n = 0;
    size_t total = 0;
    for (snug_token id = 0; id < V; id++) {
        size_t len = 0;
        const char *s = snug_tokenizer_token_bytes(tok, id, &len);
        if (!s || !len || len > 65535 || snug_tokenizer_token_type(tok, id) == SNUG_TOKEN_CONTROL)
            continue;
        refs[n++] = (struct tok_ref){(const uint8_t *)s, len, id};
        t->in_trie[id] = 1;
        total += len;
    }
    qsort(refs, (size_t)n, sizeof *refs, tok_ref_cmp);
    size_t cap = total + 1;
    t->byte = snug_malloc(cap);
    t->depth = snug_malloc(cap * sizeof *t->depth);
    t->end = snug_malloc(cap * sizeof *t->end);
    t->tok_first = snug_malloc((cap + 1) * sizeof *t->tok_first);
    t->tok_list = snug_malloc((size_t)(n ? n : 1) * sizeof *t->tok_list);
    int32_t *open = snug_malloc((size_t)65537 * sizeof *open); /* open[d] = node at depth d */
    if (!t->byte || !t->depth || !t->end || !t->tok_first || !t->tok_list || !open) {
        snug_free(open);
        goto nomem;
    }
    int32_t nn = 1, n_open = 1; /* the path from the root: open[0..n_open) */
    t->byte[0] = 0;
    t->depth[0] = 0;
    open[0] = 0;
    t->tok_first[0] = 0;
    const uint8_t *prev = NULL;
    size_t prev_n = 0;
    for (int32_t k = 0; k < n; k++) {
        const struct tok_ref *r = &refs[k];
        size_t lcp = 0;
        while (prev && lcp < prev_n && lcp < r->n && prev[lcp] == r->s[lcp]) lcp++;
        /* close the nodes deeper than the common prefix */
        while (n_open > (int32_t)lcp + 1) t->end[open[--n_open]] = nn;
        for (size_t d = lcp; d < r->n; d++) {
            t->byte[nn] = r->s[d];
            t->depth[nn] = (uint16_t)(d + 1);
            t->tok_first[nn] = k; /* tokens at a node are contiguous in sorted order */
            open[n_open++] = nn;
            nn++;
        }
        t->tok_list[k] = r->id;
        prev = r->s;
        prev_n = r->n;
        if ((int32_t)r->n > t->max_depth) t->max_depth = (int32_t)r->n;
    }
    while (n_open > 0) t->end[open[--n_open]] = nn;
    /* which node spells each token: walk the sorted tokens again, following the preorder */
    {
        int32_t node = 0;
        int32_t *path = open; /* path[d] = node at depth d for the current token */
        path[0] = 0;
        int32_t path_n = 1;
        int32_t *count = snug_calloc((size_t)nn + 1, sizeof *count);
        if (!count) {
            snug_free(open);
            goto nomem;
        }
        for (int32_t k = 0; k < n; k++) {
            const struct tok_ref *r = &refs[k];
            /* descend from the deepest shared node: the next nodes in preorder */
            size_t lcp = 0;
            if (k > 0) {
                const struct tok_ref *p = &refs[k - 1];
                while (lcp < p->n && lcp < r->n && p->s[lcp] == r->s[lcp]) lcp++;
            }
            path_n = (int32_t)lcp + 1;
            for (size_t d = lcp; d < r->n; d++) path[path_n++] = ++node;
            count[path[r->n]]++;
        }
        int32_t acc = 0;
        for (int32_t i = 0; i < nn; i++) {
            t->tok_first[i] = acc;
            acc += count[i];
        }
        t->tok_first[nn] = acc;
        snug_free(count);
    }
    snug_free(open);
    snug_free(refs);
    refs = NULL; /* (the failure path below frees it too) */
    t->n_nodes = nn;
    /* subtree byte sets, children before parents (reverse preorder) */
    t->sub_ascii = snug_calloc((size_t)nn, sizeof *t->sub_ascii);
    t->sub_wide = snug_calloc((size_t)nn, 1);
    t->sub_utf8 = snug_calloc((size_t)nn, 1);
    t->in_mask = snug_calloc((size_t)(V + 63) / 64 + 1, sizeof(uint64_t));
    if (!t->sub_ascii || !t->sub_wide || !t->sub_utf8 || !t->in_mask) goto nomem;
    for (snug_token id = 0; id < V; id++)
        if (t->in_trie[id]) t->in_mask[id >> 6] |= 1ull << (id & 63);
    for (int32_t i = nn - 1; i >= 1; i--) {
        unsigned b = t->byte[i];
        if (b >= 128)
            t->sub_wide[i] = 1;
        else
            t->sub_ascii[i][b >> 6] |= 1ull << (b & 63);
        uint8_t kids = 0x0F; /* bit k': all children are fine with k' pending */
        for (int32_t c = i + 1; c < t->end[i]; c = t->end[c]) {
            t->sub_ascii[i][0] |= t->sub_ascii[c][0];
            t->sub_ascii[i][1] |= t->sub_ascii[c][1];
            t->sub_wide[i] |= t->sub_wide[c];
            kids &= t->sub_utf8[c];
        }
        uint8_t ok = 0;
        for (int k = 0; k < 4; k++) {
            int next = -1;
            if (k > 0)
                next = b >= 0x80 && b <= 0xBF ? k - 1 : -1;
            else if (b < 0x80)
                next = 0;
            else if (b >= 0xC2 && b <= 0xDF)
                next = 1;
            else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF)
                next = 2;
            else if (b >= 0xF1 && b <= 0xF3)
                next = 3;
            if (next >= 0 && ((kids >> next) & 1)) ok |= (uint8_t)(1u << k);
        }
        t->sub_utf8[i] = ok;
    }
    *out = t;
    return SNUG_OK;
nomem:
    snug_free(refs);
    snug_vocab_trie_free(t);
    return snug_err_set(err, SNUG_ERR_NOMEM, "grammar: out of memory for the vocabulary trie");
}

/* ==== matcher =============================================================================== */

#define ST_UNKNOWN 0xFFFFu /* transition not computed yet */
#define ST_DEAD    0xFFFEu /* the byte is not allowed */
#define ST_MAX     0xFFF0
#define CUR_ENDED  (-3) /* an end token was accepted */
#define STEP_FULL  (-2) /* the state table is full: flush and retry */

struct snug_matcher {
    const struct snug_grammar *g;
    const struct snug_vocab_trie *t;
    struct snug_grammar_limits lim;
    int32_t V, words;
    snug_token end_ids[4];
    int n_end;
    /* stack nodes */
    int32_t n_nodes;
    int32_t *npos, *npar; /* pos -1 = ACCEPT (node 0) */
    uint32_t *nmark, epoch;
    int32_t *nhash; /* node + 1, open addressing, nhash_mask + 1 entries */
    uint32_t nhash_mask;
    int32_t *work; /* closure work stack [max_nodes] */
    int32_t *scratch, n_scratch;
    /* DFA states */
    int32_t n_states, max_states;
    int32_t *st_off, *st_len;
    int32_t *pool, pool_n, pool_cap;
    uint16_t *trans;         /* [max_states][256] */
    uint64_t (*st_bytes)[4]; /* bytes some stack of the state can take */
    uint8_t *st_accept;
    uint64_t (*st_loop)[2]; /* ASCII bytes b with trans[s][b] == s (valid when st_loop_ok) */
    uint8_t *st_loop_ok;
    int32_t *st_cost; /* shortest completion length from the state, -2 = not computed */
    uint8_t *st_u8;   /* 0 unknown, 1: every well-formed character (of the sub_utf8 leads) leads
                         back to the state through live states, 2: not */
    int32_t *st_hash; /* state + 1 */
    uint32_t st_hash_mask;
    int32_t start, cur;
    /* rollback history: the state before each accepted token (a ring) */
    int32_t *hist, n_hist, hist_head;
    int32_t *rescue; /* flush: the live sets, copied out */
    /* masks */
    uint64_t *mask;
    int32_t *walk; /* [max_depth + 1] state per trie depth */
    int32_t *mc_state;
    uint64_t *mc_bits, *mc_used, clock;
    int32_t mask_for; /* the state `mask` was computed for, -1 = none */
    int64_t n_walks, n_hits;
    bool failed;
    char errmsg[200];
};

static void fail(struct snug_matcher *m, const char *what) {
    if (m->failed) return;
    m->failed = true;
    snprintf(m->errmsg, sizeof m->errmsg,
             "grammar: %s; generation was ended (raise the limit or simplify the grammar)", what);
}

static uint32_t hash2(int32_t a, int32_t b) {
    uint64_t h = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

/* The id of stack node (pos, par), made when new; -1 when the node table is full. */
static int32_t intern_node(struct snug_matcher *m, int32_t pos, int32_t par) {
    uint32_t h = hash2(pos, par) & m->nhash_mask;
    for (;;) {
        int32_t k = m->nhash[h];
        if (!k) break;
        if (m->npos[k - 1] == pos && m->npar[k - 1] == par) return k - 1;
        h = (h + 1) & m->nhash_mask;
    }
    if (m->n_nodes >= m->lim.max_nodes) {
        fail(m, "more parse stack nodes than the limit (max_nodes)");
        return -1;
    }
    int32_t id = m->n_nodes++;
    m->npos[id] = pos;
    m->npar[id] = par;
    m->nmark[id] = 0;
    m->nhash[h] = id + 1;
    return id;
}

/* Expand the nodes on the work stack (n_work of them) into the tops they lead to, appended to
 * scratch (deduplicated by this epoch's marks). Returns false when a table is full. */
static bool closure(struct snug_matcher *m, int32_t n_work) {
    const struct gr_elem *el = m->g->elems;
    while (n_work > 0) {
        int32_t n = m->work[--n_work];
        if (m->nmark[n] == m->epoch) continue;
        m->nmark[n] = m->epoch;
        int32_t pos = m->npos[n], par = m->npar[n];
        if (pos < 0 || el[pos].kind == GE_BYTES) {
            if (m->n_scratch >= m->lim.max_set) {
                fail(m, "more parse stacks alive at once than the limit (max_set); the grammar "
                        "is very ambiguous");
                return false;
            }
            m->scratch[m->n_scratch++] = n;
        } else if (el[pos].kind == GE_END) {
            int32_t next = par < 0 ? 0 : par;
            if (n_work >= m->lim.max_nodes) return fail(m, "closure too large"), false;
            m->work[n_work++] = next;
        } else { /* GE_REF */
            int32_t ret = el[pos + 1].kind == GE_END ? par : intern_node(m, pos + 1, par);
            if (el[pos + 1].kind != GE_END && ret < 0) return false;
            int32_t r = el[pos].arg;
            for (int32_t a = m->g->alt_first[r]; a < m->g->alt_first[r + 1]; a++) {
                int32_t c = intern_node(m, m->g->alt_pos[a], ret);
                if (c < 0) return false;
                if (n_work >= m->lim.max_nodes) return fail(m, "closure too large"), false;
                m->work[n_work++] = c;
            }
        }
    }
    return true;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static void sort_ids(int32_t *v, int32_t n) {
    if (n > 24) {
        qsort(v, (size_t)n, sizeof *v, cmp_i32);
        return;
    }
    for (int32_t i = 1; i < n; i++) {
        int32_t x = v[i], j = i;
        while (j > 0 && v[j - 1] > x) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
}

static uint32_t hash_set(const int32_t *v, int32_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)v[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ (h >> 32));
}

/* The DFA state of the sorted set v[0..n); STEP_FULL when the table or pool is full. */
static int32_t intern_state(struct snug_matcher *m, const int32_t *v, int32_t n) {
    uint32_t h = hash_set(v, n) & m->st_hash_mask;
    for (;;) {
        int32_t k = m->st_hash[h];
        if (!k) break;
        int32_t s = k - 1;
        if (m->st_len[s] == n && !memcmp(m->pool + m->st_off[s], v, (size_t)n * sizeof *v))
            return s;
        h = (h + 1) & m->st_hash_mask;
    }
    if (m->n_states >= m->max_states || m->pool_n + n > m->pool_cap) return STEP_FULL;
    int32_t s = m->n_states++;
    m->st_off[s] = m->pool_n;
    m->st_len[s] = n;
    memcpy(m->pool + m->pool_n, v, (size_t)n * sizeof *v);
    m->pool_n += n;
    memset(m->trans + (size_t)s * 256, 0xFF, 256 * sizeof *m->trans);
    uint64_t *u = m->st_bytes[s];
    u[0] = u[1] = u[2] = u[3] = 0;
    m->st_accept[s] = 0;
    m->st_loop_ok[s] = 0;
    m->st_u8[s] = 0;
    m->st_cost[s] = -2;
    for (int32_t i = 0; i < n; i++) {
        int32_t pos = m->npos[v[i]];
        if (pos < 0) {
            m->st_accept[s] = 1;
            continue;
        }
        const uint64_t *bs = m->g->bytesets[m->g->elems[pos].arg];
        for (int w = 0; w < 4; w++) u[w] |= bs[w];
    }
    m->st_hash[h] = s + 1;
    return s;
}

/* The state after byte b from state s: a state id, ST_DEAD, or STEP_FULL / -1 (failed). */
static int32_t step(struct snug_matcher *m, int32_t s, unsigned b) {
    uint16_t tr = m->trans[(size_t)s * 256 + b];
    if (tr != ST_UNKNOWN) return tr;
    if (!gr_byteset_has(m->st_bytes[s], b)) {
        m->trans[(size_t)s * 256 + b] = ST_DEAD;
        return ST_DEAD;
    }
    if (++m->epoch == 0) {
        memset(m->nmark, 0, (size_t)m->lim.max_nodes * sizeof *m->nmark);
        m->epoch = 1;
    }
    m->n_scratch = 0;
    int32_t n_work = 0;
    const int32_t *set = m->pool + m->st_off[s];
    for (int32_t i = 0; i < m->st_len[s]; i++) {
        int32_t pos = m->npos[set[i]];
        if (pos < 0 || !gr_byteset_has(m->g->bytesets[m->g->elems[pos].arg], b)) continue;
        int32_t c = intern_node(m, pos + 1, m->npar[set[i]]);
        if (c < 0) return -1;
        m->work[n_work++] = c;
    }
    if (!closure(m, n_work)) return -1;
    if (m->n_scratch == 0) {
        m->trans[(size_t)s * 256 + b] = ST_DEAD;
        return ST_DEAD;
    }
    sort_ids(m->scratch, m->n_scratch);
    int32_t ns = intern_state(m, m->scratch, m->n_scratch);
    if (ns >= 0) m->trans[(size_t)s * 256 + b] = (uint16_t)ns;
    return ns;
}

/* Empty the state table and the mask cache, keeping the current state and the history. */
static bool flush_states(struct snug_matcher *m) {
    int32_t live[40];
    int32_t n_live = 0;
    int32_t *ids[40];
    ids[n_live] = &m->cur;
    live[n_live++] = m->cur;
    ids[n_live] = &m->start;
    live[n_live++] = m->start;
    for (int32_t i = 0; i < m->n_hist && n_live < 40; i++) {
        ids[n_live] = &m->hist[i];
        live[n_live++] = m->hist[i];
    }
    int32_t off[40], len[40], used = 0;
    for (int32_t i = 0; i < n_live; i++) {
        off[i] = used;
        len[i] = live[i] >= 0 ? m->st_len[live[i]] : 0;
        if (live[i] >= 0)
            memcpy(m->rescue + used, m->pool + m->st_off[live[i]],
                   (size_t)len[i] * sizeof(int32_t));
        used += len[i];
    }
    m->n_states = 0;
    m->pool_n = 0;
    memset(m->st_hash, 0, (size_t)(m->st_hash_mask + 1) * sizeof *m->st_hash);
    for (int32_t i = 0; i < m->lim.mask_cache; i++) m->mc_state[i] = -1;
    m->mask_for = -1;
    for (int32_t i = 0; i < n_live; i++) {
        if (live[i] < 0) continue;
        int32_t s = intern_state(m, m->rescue + off[i], len[i]);
        if (s < 0) {
            fail(m, "more DFA states than the limit (max_states)");
            return false;
        }
        *ids[i] = s;
    }
    return true;
}

static void matcher_start(struct snug_matcher *m) {
    m->cur = m->start;
    m->n_hist = 0;
    m->hist_head = 0;
}

int snug_matcher_init(struct snug_matcher **out, const struct snug_grammar *g,
                      const struct snug_vocab_trie *t, const snug_token *end_ids, int n_end,
                      const struct snug_grammar_limits *lim, struct snug_err *err) {
    *out = NULL;
    struct snug_matcher *m = snug_calloc(1, sizeof *m);
    if (!m) return snug_err_set(err, SNUG_ERR_NOMEM, "grammar: out of memory");
    if (lim)
        snug_grammar_limits_fill(&m->lim, lim);
    else
        m->lim = g->lim;
    if (m->lim.history > 32) m->lim.history = 32;
    if (m->lim.max_states > ST_MAX) m->lim.max_states = ST_MAX;
    m->g = g;
    m->t = t;
    m->V = t->n_vocab;
    m->words = (m->V + 63) / 64;
    for (int i = 0; i < n_end && m->n_end < 4; i++)
        if (end_ids[i] >= 0 && end_ids[i] < m->V) m->end_ids[m->n_end++] = end_ids[i];
    int32_t N = m->lim.max_nodes, S = m->lim.max_states;
    uint32_t nh = 1;
    while (nh < (uint32_t)N * 2) nh <<= 1;
    uint32_t sh = 1;
    while (sh < (uint32_t)S * 2) sh <<= 1;
    m->nhash_mask = nh - 1;
    m->st_hash_mask = sh - 1;
    m->max_states = S;
    m->pool_cap = S * 16 > m->lim.max_set * 4 ? S * 16 : m->lim.max_set * 4;
    m->npos = snug_malloc((size_t)N * sizeof(int32_t));
    m->npar = snug_malloc((size_t)N * sizeof(int32_t));
    m->nmark = snug_calloc((size_t)N, sizeof(uint32_t));
    m->nhash = snug_calloc(nh, sizeof(int32_t));
    m->work = snug_malloc((size_t)N * sizeof(int32_t));
    m->scratch = snug_malloc((size_t)m->lim.max_set * sizeof(int32_t));
    m->st_off = snug_malloc((size_t)S * sizeof(int32_t));
    m->st_len = snug_malloc((size_t)S * sizeof(int32_t));
    m->pool = snug_malloc((size_t)m->pool_cap * sizeof(int32_t));
    m->trans = snug_malloc((size_t)S * 256 * sizeof(uint16_t));
    m->st_bytes = snug_malloc((size_t)S * sizeof *m->st_bytes);
    m->st_accept = snug_malloc((size_t)S);
    m->st_loop = snug_malloc((size_t)S * sizeof *m->st_loop);
    m->st_loop_ok = snug_malloc((size_t)S);
    m->st_u8 = snug_malloc((size_t)S);
    m->st_cost = snug_malloc((size_t)S * sizeof(int32_t));
    m->st_hash = snug_calloc(sh, sizeof(int32_t));
    m->hist = snug_malloc((size_t)m->lim.history * sizeof(int32_t));
    m->rescue =
        snug_malloc((size_t)(m->lim.history + 2) * (size_t)m->lim.max_set * sizeof(int32_t));
    m->mask = snug_malloc((size_t)m->words * sizeof(uint64_t));
    m->walk = snug_malloc((size_t)(t->max_depth + 2) * sizeof(int32_t));
    m->mc_state = snug_malloc((size_t)m->lim.mask_cache * sizeof(int32_t));
    m->mc_used = snug_calloc((size_t)m->lim.mask_cache, sizeof(uint64_t));
    m->mc_bits = snug_malloc((size_t)m->lim.mask_cache * (size_t)m->words * sizeof(uint64_t));
    if (!m->npos || !m->npar || !m->nmark || !m->nhash || !m->work || !m->scratch || !m->st_off ||
        !m->st_len || !m->pool || !m->trans || !m->st_bytes || !m->st_accept || !m->st_hash ||
        !m->hist || !m->rescue || !m->mask || !m->walk || !m->mc_state || !m->mc_used ||
        !m->mc_bits || !m->st_loop || !m->st_loop_ok || !m->st_u8 || !m->st_cost) {
        snug_matcher_free(m);
        return snug_err_set(err, SNUG_ERR_NOMEM, "grammar: out of memory for the matcher tables");
    }
    for (int32_t i = 0; i < m->lim.mask_cache; i++) m->mc_state[i] = -1;
    m->mask_for = -1;
    /* node 0 = ACCEPT; then the start: position 0 is `REF root` */
    m->n_nodes = 1;
    m->npos[0] = -1;
    m->npar[0] = -1;
    m->nmark[0] = 0;
    m->epoch = 1;
    m->n_scratch = 0;
    int32_t s0 = intern_node(m, 0, -1);
    if (s0 >= 0) {
        m->work[0] = s0;
        if (closure(m, 1)) {
            sort_ids(m->scratch, m->n_scratch);
            m->start = intern_state(m, m->scratch, m->n_scratch);
        }
    }
    if (m->failed || m->start < 0) {
        snug_err_set(err, SNUG_ERR_BUDGET, "%s", m->errmsg[0] ? m->errmsg : "grammar: start state");
        snug_matcher_free(m);
        return SNUG_ERR_BUDGET;
    }
    matcher_start(m);
    *out = m;
    return SNUG_OK;
}

void snug_matcher_free(struct snug_matcher *m) {
    if (!m) return;
    snug_free(m->npos);
    snug_free(m->npar);
    snug_free(m->nmark);
    snug_free(m->nhash);
    snug_free(m->work);
    snug_free(m->scratch);
    snug_free(m->st_off);
    snug_free(m->st_len);
    snug_free(m->pool);
    snug_free(m->trans);
    snug_free(m->st_bytes);
    snug_free(m->st_accept);
    snug_free(m->st_loop);
    snug_free(m->st_loop_ok);
    snug_free(m->st_u8);
    snug_free(m->st_cost);
    snug_free(m->st_hash);
    snug_free(m->hist);
    snug_free(m->rescue);
    snug_free(m->mask);
    snug_free(m->walk);
    snug_free(m->mc_state);
    snug_free(m->mc_used);
    snug_free(m->mc_bits);
    snug_free(m);
}

void snug_matcher_reset(struct snug_matcher *m) {
    matcher_start(m);
}

/* Between tokens: make room in the state table when it is three quarters full. */
static void maybe_flush(struct snug_matcher *m) {
    if (m->n_states > m->max_states - m->max_states / 4 ||
        m->pool_n > m->pool_cap - m->pool_cap / 4)
        flush_states(m);
}

static bool is_end(const struct snug_matcher *m, snug_token id) {
    for (int i = 0; i < m->n_end; i++)
        if (m->end_ids[i] == id) return true;
    return false;
}

/* The state after the bytes, from state s: >= 0, or ST_DEAD, or -1 (failed). Flushes and
 * retries once when the table fills (s is then re-interned through m->cur: callers pass cur). */
static int32_t run_bytes(struct snug_matcher *m, const uint8_t *p, size_t n) {
    for (int attempt = 0; attempt < 2; attempt++) {
        int32_t s = m->cur;
        size_t i = 0;
        for (; i < n; i++) {
            s = step(m, s, p[i]);
            if (s < 0 || s == ST_DEAD) break;
        }
        if (s == STEP_FULL) {
            if (!flush_states(m)) return -1;
            continue;
        }
        return s;
    }
    fail(m, "more DFA states than the limit (max_states)");
    return -1;
}

bool snug_matcher_is_complete(const struct snug_matcher *m) {
    return m->cur >= 0 && m->st_accept[m->cur];
}

bool snug_matcher_allows(struct snug_matcher *m, snug_token id) {
    if (m->cur < 0 || id < 0 || id >= m->V) return false;
    if (is_end(m, id)) return m->failed || m->st_accept[m->cur];
    if (m->failed || !m->t->in_trie[id]) return false;
    maybe_flush(m);
    size_t len = 0;
    const char *s = snug_tokenizer_token_bytes(m->t->tok, id, &len);
    int32_t r = run_bytes(m, (const uint8_t *)s, len);
    return r >= 0 && r != ST_DEAD;
}

bool snug_matcher_completes(struct snug_matcher *m, snug_token id) {
    if (m->cur < 0 || id < 0 || id >= m->V || m->failed) return false;
    if (is_end(m, id)) return m->st_accept[m->cur];
    if (!m->t->in_trie[id]) return false;
    maybe_flush(m);
    size_t len = 0;
    const char *s = snug_tokenizer_token_bytes(m->t->tok, id, &len);
    int32_t r = run_bytes(m, (const uint8_t *)s, len);
    return r >= 0 && r != ST_DEAD && m->st_accept[r];
}

static void push_hist(struct snug_matcher *m) {
    int32_t H = m->lim.history;
    m->hist[m->hist_head] = m->cur;
    m->hist_head = (m->hist_head + 1) % H;
    if (m->n_hist < H) m->n_hist++;
}

int snug_matcher_accept(struct snug_matcher *m, snug_token id, struct snug_err *err) {
    if (m->cur == CUR_ENDED)
        return snug_err_set(err, SNUG_ERR_INVALID, "grammar: token %d after the end", id);
    if (id < 0 || id >= m->V)
        return snug_err_set(err, SNUG_ERR_INVALID, "grammar: token %d is not in the vocabulary",
                            id);
    if (is_end(m, id)) {
        if (!m->failed && !m->st_accept[m->cur])
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "grammar: the end token %d before the grammar is complete", id);
        push_hist(m);
        m->cur = CUR_ENDED;
        return SNUG_OK;
    }
    if (m->failed) return snug_err_set(err, SNUG_ERR_BUDGET, "%s", m->errmsg);
    if (!m->t->in_trie[id])
        return snug_err_set(err, SNUG_ERR_INVALID, "grammar: control token %d is not allowed", id);
    maybe_flush(m);
    size_t len = 0;
    const char *s = snug_tokenizer_token_bytes(m->t->tok, id, &len);
    int32_t r = run_bytes(m, (const uint8_t *)s, len);
    if (r < 0) return snug_err_set(err, SNUG_ERR_BUDGET, "%s", m->errmsg);
    if (r == ST_DEAD)
        return snug_err_set(err, SNUG_ERR_INVALID, "grammar: token %d is not allowed here", id);
    push_hist(m);
    m->cur = r;
    return SNUG_OK;
}

int snug_matcher_accept_bytes(struct snug_matcher *m, const char *bytes, size_t n,
                              struct snug_err *err) {
    if (m->cur < 0) return snug_err_set(err, SNUG_ERR_INVALID, "grammar: bytes after the end");
    if (m->failed) return snug_err_set(err, SNUG_ERR_BUDGET, "%s", m->errmsg);
    maybe_flush(m);
    int32_t r = run_bytes(m, (const uint8_t *)bytes, n);
    if (r < 0) return snug_err_set(err, SNUG_ERR_BUDGET, "%s", m->errmsg);
    if (r == ST_DEAD)
        return snug_err_set(err, SNUG_ERR_INVALID, "grammar: the text does not fit the grammar");
    m->cur = r;
    m->n_hist = 0; /* raw bytes are not undoable: forget the history before them */
    return SNUG_OK;
}

int snug_matcher_rollback(struct snug_matcher *m, int32_t n, struct snug_err *err) {
    if (n < 0 || n > m->n_hist)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "grammar: cannot roll back %d tokens (%d can be undone)", n, m->n_hist);
    int32_t H = m->lim.history;
    for (int32_t i = 0; i < n; i++) {
        m->hist_head = (m->hist_head - 1 + H) % H;
        m->cur = m->hist[m->hist_head];
        m->n_hist--;
    }
    return SNUG_OK;
}

/* The ASCII bytes that lead from state s back to s (a string's plain characters, say);
 * computed on first use. False when the state table filled up meanwhile. */
static bool state_loop(struct snug_matcher *m, int32_t s) {
    if (m->st_loop_ok[s]) return true;
    uint64_t loop[2] = {0, 0};
    for (unsigned b = 0; b < 128; b++) {
        if (!gr_byteset_has(m->st_bytes[s], b)) continue;
        int32_t ns = step(m, s, b);
        if (ns < 0) return false;
        if (ns == s) loop[b >> 6] |= 1ull << (b & 63);
    }
    m->st_loop[s][0] = loop[0];
    m->st_loop[s][1] = loop[1];
    m->st_loop_ok[s] = 1;
    return true;
}

/* All lead bytes in [lo, hi] go from s to one state from which `depth` continuation bytes
 * (each any of 80-BF, each time to one state) lead back to s. -1: the table filled up. */
static int u8_class_loops(struct snug_matcher *m, int32_t s, unsigned lo, unsigned hi, int depth) {
    int32_t t = -1;
    for (unsigned b = lo; b <= hi; b++) {
        int32_t ns = step(m, s, b);
        if (ns < 0) return -1;
        if (ns == ST_DEAD || (t >= 0 && ns != t)) return 0;
        t = ns;
    }
    for (int d = 0; d < depth; d++) {
        int32_t u = -1;
        for (unsigned c = 0x80; c <= 0xBF; c++) {
            int32_t ns = step(m, t, c);
            if (ns < 0) return -1;
            if (ns == ST_DEAD || (u >= 0 && ns != u)) return 0;
            u = ns;
        }
        t = u;
    }
    return t == s;
}

/* Does every well-formed character of the sub_utf8 leads loop on state s? Computed once. */
static bool state_u8(struct snug_matcher *m, int32_t s, bool *full) {
    *full = false;
    if (m->st_u8[s]) return m->st_u8[s] == 1;
    static const unsigned cls[5][3] = {
        {0xC2, 0xDF, 1}, {0xE1, 0xEC, 2}, {0xEE, 0xEF, 2}, {0xF1, 0xF3, 3}, {0, 0, 0}};
    for (int i = 0; cls[i][0]; i++) {
        int r = u8_class_loops(m, s, cls[i][0], cls[i][1], (int)cls[i][2]);
        if (r < 0) {
            *full = true;
            return false;
        }
        if (!r) {
            m->st_u8[s] = 2;
            return false;
        }
    }
    m->st_u8[s] = 1;
    return true;
}

/* The trie walk for state `s` into m->mask; 0 when it must be retried after a flush, -1 when
 * the matcher failed. A subtree whose bytes all loop on the state (ASCII only) is allowed
 * whole without visiting it: inside a JSON string most of the vocabulary is. */
static int walk_mask(struct snug_matcher *m, int32_t s) {
    const struct snug_vocab_trie *t = m->t;
    /* Where most of the vocabulary will be allowed (the state loops on most ASCII bytes, as
     * inside a string) start from "all allowed" and clear what is rejected; else start from
     * nothing and set what is reached. Either way the per-token work is the smaller side. */
    if (!m->st_loop_ok[s] && !state_loop(m, s)) return m->failed ? -1 : 0;
    bool clear_mode =
        __builtin_popcountll(m->st_loop[s][0]) + __builtin_popcountll(m->st_loop[s][1]) >= 64;
    if (clear_mode)
        memcpy(m->mask, t->in_mask, (size_t)m->words * sizeof(uint64_t));
    else
        memset(m->mask, 0, (size_t)m->words * sizeof(uint64_t));
    m->walk[0] = s;
    const uint8_t *byte = t->byte;
    const uint16_t *depth = t->depth;
    const int32_t *tok_first = t->tok_first;
    const snug_token *tok_list = t->tok_list;
    uint64_t *mask = m->mask;
    int32_t i = 1, n = t->n_nodes;
    while (i < n) {
        int32_t ps = m->walk[depth[i] - 1];
        unsigned b = byte[i];
        if (gr_byteset_has(m->st_bytes[ps], b) && (t->sub_utf8[i] & 1)) {
            if (!m->st_loop_ok[ps] && !state_loop(m, ps)) return m->failed ? -1 : 0;
            const uint64_t *lp = m->st_loop[ps], *sb = t->sub_ascii[i];
            bool whole = !(sb[0] & ~lp[0]) && !(sb[1] & ~lp[1]);
            if (whole && t->sub_wide[i]) {
                bool full;
                whole = state_u8(m, ps, &full);
                if (full) return m->failed ? -1 : 0;
            }
            if (whole) { /* the whole subtree is allowed */
                if (!clear_mode)
                    for (int32_t k = tok_first[i]; k < tok_first[t->end[i]]; k++)
                        mask[tok_list[k] >> 6] |= 1ull << (tok_list[k] & 63);
                i = t->end[i];
                continue;
            }
        }
        uint16_t tr = m->trans[(size_t)ps * 256 + b];
        int32_t ns = tr;
        if (tr == ST_UNKNOWN) {
            ns = step(m, ps, b);
            if (ns == STEP_FULL) return 0;
            if (ns < 0) return -1;
        }
        if (ns == ST_DEAD) { /* the whole subtree is rejected */
            if (clear_mode)
                for (int32_t k = tok_first[i]; k < tok_first[t->end[i]]; k++)
                    mask[tok_list[k] >> 6] &= ~(1ull << (tok_list[k] & 63));
            i = t->end[i];
            continue;
        }
        m->walk[depth[i]] = ns;
        if (!clear_mode)
            for (int32_t k = tok_first[i]; k < tok_first[i + 1]; k++)
                mask[tok_list[k] >> 6] |= 1ull << (tok_list[k] & 63);
        i++;
    }
    return 1;
}

const uint64_t *snug_matcher_mask(struct snug_matcher *m) {
    if (m->cur >= 0 && m->cur == m->mask_for && !m->failed) return m->mask;
    if (m->cur < 0 || m->failed) {
        memset(m->mask, 0, (size_t)m->words * sizeof(uint64_t));
        if (m->failed && m->cur >= 0)
            for (int i = 0; i < m->n_end; i++)
                m->mask[m->end_ids[i] >> 6] |= 1ull << (m->end_ids[i] & 63);
        m->mask_for = -1;
        return m->mask;
    }
    maybe_flush(m);
    m->clock++;
    for (int32_t c = 0; c < m->lim.mask_cache; c++) {
        if (m->mc_state[c] == m->cur) {
            m->mc_used[c] = m->clock;
            memcpy(m->mask, m->mc_bits + (size_t)c * m->words, (size_t)m->words * sizeof(uint64_t));
            m->mask_for = m->cur;
            m->n_hits++;
            return m->mask;
        }
    }
    int rc = walk_mask(m, m->cur);
    if (rc == 0 && flush_states(m)) rc = walk_mask(m, m->cur);
    if (rc <= 0) {
        fail(m, "more DFA states than the limit (max_states)");
        return snug_matcher_mask(m);
    }
    m->n_walks++;
    if (m->st_accept[m->cur])
        for (int i = 0; i < m->n_end; i++)
            m->mask[m->end_ids[i] >> 6] |= 1ull << (m->end_ids[i] & 63);
    int32_t victim = 0;
    for (int32_t c = 1; c < m->lim.mask_cache; c++)
        if (m->mc_used[c] < m->mc_used[victim]) victim = c;
    m->mc_state[victim] = m->cur;
    m->mc_used[victim] = m->clock;
    memcpy(m->mc_bits + (size_t)victim * m->words, m->mask, (size_t)m->words * sizeof(uint64_t));
    m->mask_for = m->cur;
    return m->mask;
}

void snug_matcher_apply(struct snug_matcher *m, float *logits, int32_t n_vocab) {
    const uint64_t *mk = snug_matcher_mask(m);
    int32_t n = n_vocab < m->V ? n_vocab : m->V;
    int32_t full = n / 64;
    for (int32_t w = 0; w < full; w++) {
        uint64_t bits = mk[w];
        float *row = logits + (int64_t)w * 64;
        if (bits == ~0ull) continue;
        if (bits == 0) {
            for (int k = 0; k < 64; k++) row[k] = -INFINITY;
            continue;
        }
        for (uint64_t z = ~bits; z; z &= z - 1) row[__builtin_ctzll(z)] = -INFINITY;
    }
    for (int32_t i = full * 64; i < n; i++)
        if (!((mk[i >> 6] >> (i & 63)) & 1)) logits[i] = -INFINITY;
    for (int32_t i = n; i < n_vocab; i++) logits[i] = -INFINITY;
}

snug_token snug_matcher_forced(struct snug_matcher *m) {
    if (m->cur < 0) return -1;
    if (m->failed) return m->n_end ? m->end_ids[0] : -1;
    maybe_flush(m);
    uint8_t forced[256];
    int n = 0;
    int32_t s = m->cur;
    while (n < (int)sizeof forced) {
        const uint64_t *u = m->st_bytes[s];
        int cnt = __builtin_popcountll(u[0]) + __builtin_popcountll(u[1]) +
                  __builtin_popcountll(u[2]) + __builtin_popcountll(u[3]);
        if (cnt != 1 || m->st_accept[s]) break;
        int w = u[0] ? 0 : u[1] ? 1 : u[2] ? 2 : 3;
        unsigned b = (unsigned)(w * 64 + __builtin_ctzll(u[w]));
        int32_t ns = step(m, s, b);
        if (ns < 0 || ns == ST_DEAD) break; /* a full table: just stop looking */
        forced[n++] = (uint8_t)b;
        s = ns;
    }
    if (n == 0) {
        const uint64_t *u = m->st_bytes[m->cur];
        bool none = !(u[0] | u[1] | u[2] | u[3]);
        return none && m->st_accept[m->cur] && m->n_end ? m->end_ids[0] : -1;
    }
    return snug_vocab_trie_longest_prefix(m->t, forced, n);
}

snug_token snug_vocab_trie_longest_prefix(const struct snug_vocab_trie *t, const uint8_t *bytes,
                                          int n) {
    snug_token best = -1;
    int32_t node = 0;
    for (int d = 0; d < n; d++) {
        int32_t c = node + 1, child = -1;
        while (c < t->end[node]) {
            if (t->byte[c] == bytes[d]) {
                child = c;
                break;
            }
            c = t->end[c];
        }
        if (child < 0) break;
        node = child;
        if (t->tok_first[node] < t->tok_first[node + 1]) best = t->tok_list[t->tok_first[node]];
    }
    return best;
}

/* Append the shortest text from element p to the end of its alternative (the lowest byte of
 * each byte set, the cheapest alternative of each rule). False when it does not fit. */
static bool emit_min(const struct snug_grammar *g, int32_t p, uint8_t *out, int *len, int cap,
                     int depth) {
    if (depth > 512) return false;
    for (; g->elems[p].kind != GE_END; p++) {
        const struct gr_elem *e = &g->elems[p];
        if (e->kind == GE_BYTES) {
            if (*len >= cap) return false;
            const uint64_t *bs = g->bytesets[e->arg];
            int w = bs[0] ? 0 : bs[1] ? 1 : bs[2] ? 2 : 3;
            out[(*len)++] = (uint8_t)(w * 64 + __builtin_ctzll(bs[w]));
        } else {
            int32_t a = g->rule_best_alt[e->arg];
            if (a < 0 || !emit_min(g, g->alt_pos[a], out, len, cap, depth + 1)) return false;
        }
    }
    return true;
}

/* The fewest bytes that complete the grammar from DFA state s, and the stack that does it: the
 * live stack whose remaining elements (its top's alternative, then each return position's) are
 * shortest, measured with the grammar's per-element minimum lengths. */
static int64_t state_completion(const struct snug_matcher *m, int32_t s, int32_t *node) {
    const struct snug_grammar *g = m->g;
    const int32_t *set = m->pool + m->st_off[s];
    int64_t best = GR_INF;
    *node = -1;
    for (int32_t i = 0; i < m->st_len[s]; i++) {
        int64_t cost = 0;
        for (int32_t n = set[i]; n >= 0 && cost < GR_INF; n = m->npar[n])
            cost += m->npos[n] < 0 ? 0 : g->rest_min[m->npos[n]];
        if (cost < best) best = cost, *node = set[i];
    }
    return best;
}

int snug_matcher_completion_after(struct snug_matcher *m, snug_token id) {
    if (m->cur < 0 || m->failed || id < 0 || id >= m->V) return -1;
    if (is_end(m, id)) return m->st_accept[m->cur] ? 0 : -1;
    if (!m->t->in_trie[id]) return -1;
    size_t len = 0;
    const char *b = snug_tokenizer_token_bytes(m->t->tok, id, &len);
    int32_t r = run_bytes(m, (const uint8_t *)b, len);
    if (r < 0 || r == ST_DEAD) return -1;
    if (m->st_accept[r]) return 0;
    if (m->st_cost[r] == -2) {
        int32_t node;
        int64_t c = state_completion(m, r, &node);
        m->st_cost[r] = c >= GR_INF ? -1 : (int32_t)c;
    }
    return m->st_cost[r];
}

int snug_matcher_shortest_completion(struct snug_matcher *m, uint8_t *out, int cap) {
    if (m->cur < 0 || m->failed) return -1;
    if (m->st_accept[m->cur]) return 0;
    const struct snug_grammar *g = m->g;
    int32_t best_node;
    int64_t best = state_completion(m, m->cur, &best_node);
    if (best_node < 0 || best > cap) return -1;
    int len = 0;
    for (int32_t n = best_node; n >= 0; n = m->npar[n])
        if (m->npos[n] >= 0 && !emit_min(g, m->npos[n], out, &len, cap, 0)) return -1;
    return len;
}

const char *snug_matcher_error(const struct snug_matcher *m) {
    return m->failed ? m->errmsg : NULL;
}

void snug_matcher_stats(const struct snug_matcher *m, int64_t *walks, int64_t *hits,
                        int32_t *states) {
    if (walks) *walks = m->n_walks;
    if (hits) *hits = m->n_hits;
    if (states) *states = m->n_states;
}
