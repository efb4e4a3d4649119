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
 * Masks avoid walking what can be decided in bulk: the trie also holds, once per model, the
 * "plain" string tokens by character count and the frontier subtrees where plain text ends
 * (string states: a bitset copy plus those subtrees), and subtrees whose bytes follow a state's
 * most common successor for their whole height are allowed without visiting them (loops and
 * counted classes). docs/grammar.md "The matcher" has the details.
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
    uint16_t *sub_height; /* [n_nodes] bytes on the longest path from node i's edge down */
    /* bit k: every path of node i's subtree (from its own edge) is a well-formed UTF-8 prefix
     * when k continuation bytes are pending before it (leads C2-DF, E1-EC, EE-EF, F1-F3 only:
     * the leads whose continuations are the full 80-BF range) */
    uint8_t *sub_utf8;
    uint64_t *in_mask; /* [(n_vocab + 63) / 64] bits of the tokens in the trie */
    /* String text, precomputed once per model: a token is "plain" when its bytes are printable
     * ASCII other than '"' and '\\' (TRIE_PLAIN_ASCII) or well-formed UTF-8 (RFC 3629 table 3;
     * it may end inside a character). plain_mask holds the plain tokens. The "frontier" nodes
     * are where a path stops being plain: the first byte that is not, after a plain prefix.
     * Boundary frontiers (the prefix ends between characters) are grouped by their byte:
     * fr_node[fr_first[b] .. fr_first[b + 1]); the few others (the prefix ends inside a
     * character) are frm_node with the pending bytes of that character in frm_pend (count in
     * bits 24-25, bytes in bits 0-23). A state on which every plain byte and character loops
     * allows every plain token, and the rest of its mask lies in the frontier subtrees. */
    uint64_t *plain_le; /* [TRIE_PLAIN_LE + 1][words]: row c = plain tokens of <= c characters */
    int32_t *long_tok, *long_chars, n_long; /* plain tokens of more characters, and their counts */
    int32_t *fr_node, *fr_chars, fr_first[257];
    int32_t *frm_node, *frm_chars, n_frm;
    uint32_t *frm_pend;
    int32_t max_chars; /* the most characters on a plain path */
};

/* Plain tokens up to this many characters are kept as bitsets per count (a partial character
 * counts as one). */
#define TRIE_PLAIN_LE 16

/* The printable ASCII bytes except '"' and '\\': the plain characters of a JSON string. */
static const uint64_t TRIE_PLAIN_ASCII[2] = {0xFFFFFFFB00000000ull, 0x7FFFFFFFEFFFFFFFull};

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
    snug_free(t->sub_height);
    snug_free(t->sub_utf8);
    snug_free(t->in_mask);
    snug_free(t->plain_le);
    snug_free(t->long_tok);
    snug_free(t->long_chars);
    snug_free(t->fr_node);
    snug_free(t->fr_chars);
    snug_free(t->frm_chars);
    snug_free(t->frm_node);
    snug_free(t->frm_pend);
    snug_free(t);
}

int32_t snug_vocab_trie_n_nodes(const struct snug_vocab_trie *t) {
    return t->n_nodes;
}

/* UTF-8 decoding step for plain paths: the bytes still expected in the current character and
 * the range of the next one (RFC 3629 table 3: E0 A0-BF, ED 80-9F, F0 90-BF, F4 80-8F). */
struct plain_at {
    int8_t bad;      /* the path is no longer plain */
    uint8_t left;    /* continuation bytes still expected */
    uint8_t lo, hi;  /* the next continuation byte's range */
    uint8_t n_pend;  /* bytes of the unfinished character so far */
    uint8_t pend[3]; /* those bytes */
    int32_t chars;   /* complete characters so far */
};

/* Next plain state after byte b, or false when b ends plainness. */
static bool plain_next(const struct plain_at *p, unsigned b, struct plain_at *q) {
    *q = (struct plain_at){0};
    q->chars = p->chars;
    if (p->left) {
        if (b < p->lo || b > p->hi) return false;
        q->left = (uint8_t)(p->left - 1);
        if (!q->left) q->chars++;
        q->lo = 0x80;
        q->hi = 0xBF;
        if (q->left) {
            q->n_pend = (uint8_t)(p->n_pend + 1);
            memcpy(q->pend, p->pend, p->n_pend);
            q->pend[p->n_pend] = (uint8_t)b;
        }
        return true;
    }
    if (b < 128) {
        q->chars++;
        return (TRIE_PLAIN_ASCII[b >> 6] >> (b & 63)) & 1;
    }
    q->lo = 0x80;
    q->hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF)
        q->left = 1;
    else if (b >= 0xE0 && b <= 0xEF)
        q->left = 2;
    else if (b >= 0xF0 && b <= 0xF4)
        q->left = 3;
    else
        return false;
    if (b == 0xE0) q->lo = 0xA0;
    if (b == 0xED) q->hi = 0x9F;
    if (b == 0xF0) q->lo = 0x90;
    if (b == 0xF4) q->hi = 0x8F;
    q->n_pend = 1;
    q->pend[0] = (uint8_t)b;
    return true;
}

/* Fills the plain token sets and the frontier lists (see struct snug_vocab_trie). -1: out of
 * memory. */
static int plain_frontier(struct snug_vocab_trie *t) {
    int32_t nn = t->n_nodes, words = (t->n_vocab + 63) / 64 + 1;
    struct plain_at *at = snug_calloc((size_t)t->max_depth + 2, sizeof *at);
    t->plain_le = snug_calloc((size_t)(TRIE_PLAIN_LE + 1) * (size_t)words, sizeof(uint64_t));
    if (!at || !t->plain_le) {
        snug_free(at);
        return -1;
    }
    int32_t n_fr = 0, n_frm = 0, n_long = 0, count[257] = {0};
    for (int pass = 0; pass < 2; pass++) { /* pass 0 counts, pass 1 fills */
        if (pass == 1) {
            t->fr_first[0] = 0;
            for (int b = 0; b < 256; b++) t->fr_first[b + 1] = t->fr_first[b] + count[b];
            memcpy(count, t->fr_first, sizeof count);
            t->fr_node = snug_malloc((size_t)(n_fr ? n_fr : 1) * sizeof(int32_t));
            t->fr_chars = snug_malloc((size_t)(n_fr ? n_fr : 1) * sizeof(int32_t));
            t->frm_node = snug_malloc((size_t)(n_frm ? n_frm : 1) * sizeof(int32_t));
            t->frm_chars = snug_malloc((size_t)(n_frm ? n_frm : 1) * sizeof(int32_t));
            t->frm_pend = snug_malloc((size_t)(n_frm ? n_frm : 1) * sizeof(uint32_t));
            t->long_tok = snug_malloc((size_t)(n_long ? n_long : 1) * sizeof(int32_t));
            t->long_chars = snug_malloc((size_t)(n_long ? n_long : 1) * sizeof(int32_t));
            if (!t->fr_node || !t->fr_chars || !t->frm_node || !t->frm_chars || !t->frm_pend ||
                !t->long_tok || !t->long_chars)
                break;
            n_frm = n_long = 0;
        }
        for (int32_t i = 1; i < nn; i++) {
            const struct plain_at *p = &at[t->depth[i] - 1];
            struct plain_at *q = &at[t->depth[i]];
            if (p->bad) {
                q->bad = 1;
                continue;
            }
            if (plain_next(p, t->byte[i], q)) {
                int32_t c = q->chars + (q->left ? 1 : 0);
                if (c > t->max_chars) t->max_chars = c;
                for (int32_t k = t->tok_first[i]; k < t->tok_first[i + 1]; k++) {
                    snug_token id = t->tok_list[k];
                    if (c > TRIE_PLAIN_LE) {
                        if (pass == 1) {
                            t->long_tok[n_long] = id;
                            t->long_chars[n_long] = c;
                        }
                        n_long++;
                    } else if (pass == 1) {
                        for (int r = c; r <= TRIE_PLAIN_LE; r++)
                            t->plain_le[(size_t)r * (size_t)words + (size_t)(id >> 6)] |=
                                1ull << (id & 63);
                    }
                }
                continue;
            }
            q->bad = 1;
            if (p->left == 0) {
                if (pass == 0) {
                    count[t->byte[i]]++;
                    n_fr++;
                } else {
                    t->fr_chars[count[t->byte[i]]] = p->chars;
                    t->fr_node[count[t->byte[i]]++] = i;
                }
            } else {
                if (pass == 1) {
                    uint32_t v = (uint32_t)p->n_pend << 24;
                    for (int k = 0; k < p->n_pend; k++) v |= (uint32_t)p->pend[k] << (8 * k);
                    t->frm_node[n_frm] = i;
                    t->frm_chars[n_frm] = p->chars;
                    t->frm_pend[n_frm] = v;
                }
                n_frm++;
            }
        }
    }
    t->n_frm = n_frm;
    t->n_long = n_long;
    snug_free(at);
    return t->fr_node && t->frm_node && t->frm_pend && t->long_tok ? 0 : -1;
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
    refs = NULL; /* (nomem frees it) */
    t->n_nodes = nn;
    /* subtree byte sets, children before parents (reverse preorder) */
    t->sub_ascii = snug_calloc((size_t)nn, sizeof *t->sub_ascii);
    t->sub_wide = snug_calloc((size_t)nn, 1);
    t->sub_utf8 = snug_calloc((size_t)nn, 1);
    t->sub_height = snug_calloc((size_t)nn, sizeof *t->sub_height);
    t->in_mask = snug_calloc((size_t)(V + 63) / 64 + 1, sizeof(uint64_t));
    if (!t->sub_ascii || !t->sub_wide || !t->sub_utf8 || !t->sub_height || !t->in_mask) goto nomem;
    for (snug_token id = 0; id < V; id++)
        if (t->in_trie[id]) t->in_mask[id >> 6] |= 1ull << (id & 63);
    for (int32_t i = nn - 1; i >= 1; i--) {
        unsigned b = t->byte[i];
        if (b >= 128)
            t->sub_wide[i] = 1;
        else
            t->sub_ascii[i][b >> 6] |= 1ull << (b & 63);
        uint8_t kids = 0x0F; /* bit k': all children are fine with k' pending */
        uint16_t h = 0;
        for (int32_t c = i + 1; c < t->end[i]; c = t->end[c]) {
            if (t->sub_height[c] > h) h = t->sub_height[c];
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
        t->sub_height[i] = (uint16_t)(h < 65535 ? h + 1 : h);
    }
    if (plain_frontier(t)) goto nomem;
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
#define PN_MIXED   (-3) /* plain characters lead to different states */
#define PN_UNKNOWN (-4)

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
    int32_t *st_cost;  /* shortest completion length from the state, -2 = not computed */
    int32_t *st_pnext; /* the state every plain byte and character (see the trie) leads to from
                          the state: a state, ST_DEAD (none is allowed), PN_MIXED, PN_UNKNOWN */
    int32_t *chain;    /* [max_chars + 1] walk_mask: the state after c plain characters */
    /* the ASCII bytes that lead from the state to its most common successor (st_adv) and that
       successor (st_nxt; PN_UNKNOWN until computed, ST_DEAD when no ASCII byte is taken) */
    uint64_t (*st_adv)[2];
    int32_t *st_nxt;
    int32_t *st_maxafter; /* the longest completion after one allowed token, -2 = unknown */
    uint8_t *st_u8;       /* 0 unknown, 1: every well-formed character (of the sub_utf8 leads) leads
                             back to the state through live states, 2: not */
    int32_t *st_hash;     /* state + 1 */
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
    m->st_pnext[s] = PN_UNKNOWN;
    m->st_nxt[s] = PN_UNKNOWN;
    m->st_maxafter[s] = -2;
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
    m->st_pnext = snug_malloc((size_t)S * sizeof(int32_t));
    m->chain = snug_malloc((size_t)(t->max_chars + 2) * sizeof(int32_t));
    m->st_adv = snug_malloc((size_t)S * sizeof *m->st_adv);
    m->st_nxt = snug_malloc((size_t)S * sizeof(int32_t));
    m->st_maxafter = snug_malloc((size_t)S * sizeof(int32_t));
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
        !m->mc_bits || !m->st_loop || !m->st_loop_ok || !m->st_u8 || !m->st_pnext || !m->chain ||
        !m->st_adv || !m->st_nxt || !m->st_maxafter || !m->st_cost) {
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
    snug_free(m->st_pnext);
    snug_free(m->chain);
    snug_free(m->st_adv);
    snug_free(m->st_nxt);
    snug_free(m->st_maxafter);
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
 * (the first any of [c_lo, c_hi], the others any of 80-BF, each time to one state) lead back
 * to s. -1: the table filled up. */
static int u8_class_loops(struct snug_matcher *m, int32_t s, unsigned lo, unsigned hi, int depth,
                          unsigned c_lo, unsigned c_hi) {
    int32_t t = -1;
    for (unsigned b = lo; b <= hi; b++) {
        int32_t ns = step(m, s, b);
        if (ns < 0) return -1;
        if (ns == ST_DEAD || (t >= 0 && ns != t)) return 0;
        t = ns;
    }
    for (int d = 0; d < depth; d++) {
        int32_t u = -1;
        for (unsigned c = d ? 0x80 : c_lo; c <= (d ? 0xBF : c_hi); c++) {
            int32_t ns = step(m, t, c);
            if (ns < 0) return -1;
            if (ns == ST_DEAD || (u >= 0 && ns != u)) return 0;
            u = ns;
        }
        t = u;
    }
    return t == s;
}

/* The one state every byte of the set r leads to from s, PN_MIXED when they differ, ST_DEAD
 * when none is allowed; STEP_FULL / -1 when the table filled up or the matcher failed. When
 * every stack top of s takes all of r or none of it, one step answers for the whole set. */
static int32_t step_set(struct snug_matcher *m, int32_t s, const uint64_t r[4]) {
    bool uniform = true;
    const int32_t *set = m->pool + m->st_off[s];
    for (int32_t i = 0; i < m->st_len[s] && uniform; i++) {
        int32_t pos = m->npos[set[i]];
        if (pos < 0) continue;
        const uint64_t *bs = m->g->bytesets[m->g->elems[pos].arg];
        uint64_t in = 0, out = 0;
        for (int w = 0; w < 4; w++) {
            in |= bs[w] & r[w];
            out |= ~bs[w] & r[w];
        }
        uniform = !in || !out;
    }
    int32_t to = PN_UNKNOWN;
    for (unsigned b = 0; b < 256; b++) {
        if (!gr_byteset_has(r, b)) continue;
        int32_t ns = step(m, s, b);
        if (ns < 0) return ns;
        if (uniform) return ns;
        if (to != PN_UNKNOWN && ns != to) return PN_MIXED;
        to = ns;
    }
    return to;
}

static void set_range(uint64_t r[4], unsigned lo, unsigned hi) {
    r[0] = r[1] = r[2] = r[3] = 0;
    for (unsigned b = lo; b <= hi; b++) r[b >> 6] |= 1ull << (b & 63);
}

/* The one state every plain byte and character (see the trie) leads to from s: a state,
 * ST_DEAD when none is allowed, PN_MIXED when they differ (or a character's lead is allowed
 * but not its end); STEP_FULL / -1 when the table filled up or the matcher failed. Cached. */
static int32_t plain_succ(struct snug_matcher *m, int32_t s) {
    if (m->st_pnext[s] != PN_UNKNOWN) return m->st_pnext[s];
    uint64_t r[4] = {TRIE_PLAIN_ASCII[0], TRIE_PLAIN_ASCII[1], 0, 0};
    int32_t to = step_set(m, s, r);
    if (to < 0 && to != PN_MIXED) return to;
    if (to == PN_MIXED) return m->st_pnext[s] = PN_MIXED;
    /* every well-formed UTF-8 lead byte range, with its first continuation byte's range */
    static const unsigned cls[][5] = {{0xC2, 0xDF, 1, 0x80, 0xBF}, {0xE0, 0xE0, 2, 0xA0, 0xBF},
                                      {0xE1, 0xEC, 2, 0x80, 0xBF}, {0xED, 0xED, 2, 0x80, 0x9F},
                                      {0xEE, 0xEF, 2, 0x80, 0xBF}, {0xF0, 0xF0, 3, 0x90, 0xBF},
                                      {0xF1, 0xF3, 3, 0x80, 0xBF}, {0xF4, 0xF4, 3, 0x80, 0x8F}};
    for (size_t i = 0; i < sizeof cls / sizeof cls[0]; i++) {
        set_range(r, cls[i][0], cls[i][1]);
        int32_t cur = step_set(m, s, r);
        if (cur < 0 && cur != PN_MIXED) return cur;
        if (cur == PN_MIXED) return m->st_pnext[s] = PN_MIXED;
        if (cur == ST_DEAD) {
            if (to != ST_DEAD) return m->st_pnext[s] = PN_MIXED;
            continue;
        }
        for (unsigned d = 0; d < cls[i][2]; d++) {
            set_range(r, d ? 0x80 : cls[i][3], d ? 0xBF : cls[i][4]);
            int32_t u = step_set(m, cur, r);
            if (u < 0 && u != PN_MIXED) return u;
            if (u == PN_MIXED || u == ST_DEAD) return m->st_pnext[s] = PN_MIXED;
            cur = u;
        }
        if (cur != to) return m->st_pnext[s] = PN_MIXED;
    }
    return m->st_pnext[s] = to;
}

/* Does every well-formed character of the sub_utf8 leads loop on state s? Computed once. */
static bool state_u8(struct snug_matcher *m, int32_t s, bool *full) {
    *full = false;
    if (m->st_u8[s]) return m->st_u8[s] == 1;
    static const unsigned cls[5][3] = {
        {0xC2, 0xDF, 1}, {0xE1, 0xEC, 2}, {0xEE, 0xEF, 2}, {0xF1, 0xF3, 3}, {0, 0, 0}};
    for (int i = 0; cls[i][0]; i++) {
        int r = u8_class_loops(m, s, cls[i][0], cls[i][1], (int)cls[i][2], 0x80, 0xBF);
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

/* Fill st_adv / st_nxt of state s: ASCII bytes are grouped by the stack tops that take them
 * (bytes of one group lead to one state), one step per group. 1 done, 0 when the table
 * filled up, -1 when the matcher failed. */
static int dominant_successor(struct snug_matcher *m, int32_t s) {
    if (m->st_nxt[s] != PN_UNKNOWN) return 1;
    const int32_t *set = m->pool + m->st_off[s];
    int32_t n = m->st_len[s];
    uint64_t sig[128];
    int32_t to_of[128];
    for (unsigned b = 0; b < 128; b++) {
        sig[b] = 0;
        to_of[b] = ST_DEAD;
    }
    bool by_sig = n <= 64;
    for (int32_t i = 0; by_sig && i < n; i++) {
        int32_t pos = m->npos[set[i]];
        if (pos < 0) continue;
        const uint64_t *bs = m->g->bytesets[m->g->elems[pos].arg];
        for (unsigned b = 0; b < 128; b++)
            if (gr_byteset_has(bs, b)) sig[b] |= 1ull << i;
    }
    for (unsigned b = 0; b < 128; b++) {
        if (!gr_byteset_has(m->st_bytes[s], b)) continue;
        int32_t ns = -5;
        if (by_sig)
            for (unsigned c = 0; c < b; c++)
                if (sig[c] == sig[b] && gr_byteset_has(m->st_bytes[s], c)) {
                    ns = to_of[c];
                    break;
                }
        if (ns == -5) ns = step(m, s, b);
        if (ns == STEP_FULL) return 0;
        if (ns < 0) return -1;
        to_of[b] = ns;
    }
    int32_t best = ST_DEAD, best_n = 0;
    for (unsigned b = 0; b < 128; b++) {
        if (to_of[b] == ST_DEAD || to_of[b] == best) continue;
        int cnt = 0;
        for (unsigned c = b; c < 128; c++) cnt += to_of[c] == to_of[b];
        if (cnt > best_n) best = to_of[b], best_n = cnt;
    }
    m->st_adv[s][0] = m->st_adv[s][1] = 0;
    for (unsigned b = 0; b < 128 && best != ST_DEAD; b++)
        if (to_of[b] == best) m->st_adv[s][b >> 6] |= 1ull << (b & 63);
    m->st_nxt[s] = best;
    return 1;
}

/* Does every path of `h` ASCII bytes of set sb from state s stay alive, each byte leading to
 * the state's most common successor (a counted class like [a-z]{1,32} or a loop)? 1 yes,
 * 0 no, -2 when the table filled up, -1 when the matcher failed. */
static int chain_covers(struct snug_matcher *m, int32_t s, const uint64_t *sb, int h) {
    for (int j = 0; j < h; j++) {
        int rc = dominant_successor(m, s);
        if (rc <= 0) return rc == 0 ? -2 : -1;
        if ((sb[0] & ~m->st_adv[s][0]) || (sb[1] & ~m->st_adv[s][1])) return 0;
        s = m->st_nxt[s];
    }
    return 1;
}

/* Subtrees higher than this are not tested whole along a chain (they are walked). */
#define CHAIN_MAX_HEIGHT 24

/* The trie walk over the nodes [from, to) (one subtree, or the whole trie from 1), with
 * m->walk[depth[from] - 1] holding the state before it, into m->mask: in clear mode the mask
 * starts all-allowed and rejected subtrees are cleared, else reached tokens are set. 1 done,
 * 0 when it must be retried after a flush, -1 when the matcher failed. A subtree whose bytes
 * all loop on the state is allowed whole without visiting it. */
static int walk_range(struct snug_matcher *m, int32_t from, int32_t to, bool clear_mode) {
    const struct snug_vocab_trie *t = m->t;
    const uint8_t *byte = t->byte;
    const uint16_t *depth = t->depth;
    const int32_t *tok_first = t->tok_first;
    const snug_token *tok_list = t->tok_list;
    uint64_t *mask = m->mask;
    int32_t i = from, n = to;
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
            if (!whole && !t->sub_wide[i] && t->sub_height[i] <= CHAIN_MAX_HEIGHT) {
                int rc = chain_covers(m, ps, sb, t->sub_height[i]);
                if (rc < 0) return rc == -1 ? -1 : 0;
                whole = rc == 1;
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

/* The trie walk for state `s` into m->mask; 1 done, 0 when it must be retried after a flush,
 * -1 when the matcher failed. */
static int walk_mask(struct snug_matcher *m, int32_t s) {
    const struct snug_vocab_trie *t = m->t;
    if (!m->st_loop_ok[s] && !state_loop(m, s)) return m->failed ? -1 : 0;
    /* Inside a string every plain character leads to one next state (itself for a free
     * string, the next count for a length-bounded one): the chain of those states decides
     * every plain token by its character count, and only the frontier subtrees (tokens with a
     * quote, a backslash, a control byte, malformed UTF-8) are walked, from the chain state
     * after their plain prefix; a group of them whose first non-plain byte no chain state
     * takes is skipped whole. */
    int32_t last = 0, max_ok = -1; /* chain[0..last] known; plain tokens of <= max_ok allowed */
    m->chain[0] = s;
    for (;;) {
        if (last >= t->max_chars) {
            max_ok = INT32_MAX;
            break;
        }
        int32_t ns = plain_succ(m, m->chain[last]);
        if (ns == STEP_FULL) return 0;
        if (ns == -1) return -1;
        if (ns == PN_MIXED) break;
        if (ns == ST_DEAD) {
            max_ok = last;
            break;
        }
        if (ns == m->chain[last]) { /* loops: every count is fine */
            max_ok = INT32_MAX;
            break;
        }
        m->chain[++last] = ns;
    }
    if (max_ok >= 0) {
        int32_t le = max_ok < TRIE_PLAIN_LE ? max_ok : TRIE_PLAIN_LE;
        int32_t wt = (t->n_vocab + 63) / 64 + 1;
        memcpy(m->mask, t->plain_le + (size_t)le * (size_t)wt, (size_t)m->words * sizeof(uint64_t));
        if (max_ok > TRIE_PLAIN_LE)
            for (int32_t k = 0; k < t->n_long; k++)
                if (t->long_chars[k] <= max_ok)
                    m->mask[t->long_tok[k] >> 6] |= 1ull << (t->long_tok[k] & 63);
        uint64_t any[4] = {0, 0, 0, 0}; /* first bytes some chain state takes */
        for (int32_t c = 0; c <= last; c++)
            for (int w = 0; w < 4; w++) any[w] |= m->st_bytes[m->chain[c]][w];
        for (int b = 0; b < 256; b++) {
            if (t->fr_first[b] == t->fr_first[b + 1] || !gr_byteset_has(any, (unsigned)b)) continue;
            for (int32_t k = t->fr_first[b]; k < t->fr_first[b + 1]; k++) {
                int32_t c = t->fr_chars[k];
                if (c > max_ok) continue;
                int32_t ps = m->chain[c < last ? c : last];
                if (!gr_byteset_has(m->st_bytes[ps], (unsigned)b)) continue;
                int32_t f = t->fr_node[k];
                m->walk[t->depth[f] - 1] = ps;
                int rc = walk_range(m, f, t->end[f], false);
                if (rc <= 0) return rc;
            }
        }
        for (int32_t k = 0; k < t->n_frm; k++) {
            int32_t c = t->frm_chars[k];
            if (c > max_ok) continue;
            int32_t f = t->frm_node[k], ps = m->chain[c < last ? c : last];
            uint32_t pend = t->frm_pend[k];
            for (unsigned j = 0; j < (pend >> 24) && ps >= 0 && ps != ST_DEAD; j++)
                ps = step(m, ps, (pend >> (8 * j)) & 0xFF);
            if (ps == STEP_FULL) return 0;
            if (ps < 0) return -1;
            if (ps == ST_DEAD) continue;
            m->walk[t->depth[f] - 1] = ps;
            int rc = walk_range(m, f, t->end[f], false);
            if (rc <= 0) return rc;
        }
        return 1;
    }
    /* Where most of the vocabulary will be allowed (the state loops on most ASCII bytes) start
     * from "all allowed" and clear what is rejected; else start from nothing and set what is
     * reached. Either way the per-token work is the smaller side. */
    bool clear_mode =
        __builtin_popcountll(m->st_loop[s][0]) + __builtin_popcountll(m->st_loop[s][1]) >= 64;
    if (clear_mode)
        memcpy(m->mask, t->in_mask, (size_t)m->words * sizeof(uint64_t));
    else
        memset(m->mask, 0, (size_t)m->words * sizeof(uint64_t));
    m->walk[0] = s;
    return walk_range(m, 1, t->n_nodes, clear_mode);
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

/* Some token spells bytes[0..n) and at least one byte more. */
static bool trie_goes_on(const struct snug_vocab_trie *t, const uint8_t *bytes, int n) {
    int32_t node = 0;
    for (int d = 0; d < n; d++) {
        int32_t c = node + 1, child = -1;
        for (; c < t->end[node]; c = t->end[c])
            if (t->byte[c] == bytes[d]) {
                child = c;
                break;
            }
        if (child < 0) return false;
        node = child;
    }
    return node + 1 < t->end[node];
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
    /* the forced bytes stop at a choice (or where the grammar may end): a token spelling all
     * of them and going on may be allowed too, and forcing a shorter one would pick a
     * tokenization the model does not write ("<" where it writes "<parameter" before a
     * choice of "<parameter=" or "</function>"); then the mask and the sampler decide */
    if (n < (int)sizeof forced && trie_goes_on(m->t, forced, n)) return -1;
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

int snug_matcher_max_completion_after(struct snug_matcher *m) {
    if (m->cur < 0 || m->failed) return -1;
    if (m->st_maxafter[m->cur] != -2) return m->st_maxafter[m->cur];
    const uint64_t *mk = snug_matcher_mask(m); /* run_bytes below may flush: the bits stay */
    int32_t mx = 0;
    for (int32_t w = 0; w < m->words && !m->failed; w++)
        for (uint64_t bits = mk[w]; bits; bits &= bits - 1) {
            int a = snug_matcher_completion_after(m, w * 64 + __builtin_ctzll(bits));
            if (a > mx) mx = a;
        }
    if (m->failed || m->cur < 0) return -1;
    m->st_maxafter[m->cur] = mx;
    return mx;
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
