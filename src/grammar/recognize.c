/* recognize.c — is a whole text a sentence of a compiled grammar? Without a vocabulary or a
 * matcher: the JSON Schema converter asks it about short strings (does a property name fit a
 * `patternProperties` pattern, does an enum value fit a `pattern`), once per question.
 *
 * Owns: gr_accepts. For every (rule, start offset) the set of offsets where the rule can end
 * is computed once (a bitset over the text's n + 1 offsets) by running each alternative's
 * elements over a set of offsets; rules refer to rules at the same or later offsets only
 * through right recursion or consumed bytes (the compiler rejects left recursion), so the
 * recursion ends.
 * Invariant: exact for texts of at most RECOGNIZE_MAX bytes and grammars whose table fits
 * RECOGNIZE_TABLE bytes; beyond that the answer is "cannot tell" (-1).
 * Read next: grammar_impl.h (the compiled form), jsalg.c (the questions).
 */
#include "grammar/grammar_impl.h"
#include "grammar/jschema_impl.h"

#include <stdint.h>
#include <string.h>

#define RECOGNIZE_MAX   256
#define RECOGNIZE_TABLE (8u << 20)

struct rec {
    const struct snug_grammar *g;
    const uint8_t *s;
    size_t n, words;
    uint64_t *ends;    /* [n_rules][n + 1][words]: where rule r from offset i can end */
    uint8_t *state;    /* [n_rules][n + 1]: 0 not computed, 1 in progress, 2 done */
    uint64_t *scratch; /* a stack of bitsets for sequences in progress */
    size_t scratch_top, scratch_cap;
};

static uint64_t *rec_ends(struct rec *r, int32_t rule, size_t i);

static uint64_t *push_set(struct rec *r) {
    if (r->scratch_top + r->words > r->scratch_cap) return NULL;
    uint64_t *p = r->scratch + r->scratch_top;
    r->scratch_top += r->words;
    memset(p, 0, r->words * sizeof *p);
    return p;
}

/* Run the alternative starting at element p from the offsets in `from`; OR the end offsets
 * into `out`. -1 when the scratch stack ran out. */
static int run_alt(struct rec *r, int32_t p, const uint64_t *from, uint64_t *out) {
    size_t mark = r->scratch_top;
    uint64_t *cur = push_set(r), *next = push_set(r);
    if (!cur || !next) return -1;
    memcpy(cur, from, r->words * sizeof *cur);
    for (;; p++) {
        const struct gr_elem *e = &r->g->elems[p];
        if (e->kind == GE_END) break;
        memset(next, 0, r->words * sizeof *next);
        bool any = false;
        for (size_t w = 0; w < r->words; w++) {
            for (uint64_t bits = cur[w]; bits; bits &= bits - 1) {
                size_t i = w * 64 + (size_t)__builtin_ctzll(bits);
                if (e->kind == GE_BYTES) {
                    if (i < r->n && gr_byteset_has(r->g->bytesets[e->arg], r->s[i])) {
                        next[(i + 1) / 64] |= 1ull << ((i + 1) % 64);
                        any = true;
                    }
                } else { /* GE_REF */
                    uint64_t *e2 = rec_ends(r, e->arg, i);
                    if (!e2) return -1;
                    for (size_t k = 0; k < r->words; k++) next[k] |= e2[k], any |= e2[k] != 0;
                }
            }
        }
        uint64_t *t = cur;
        cur = next, next = t;
        if (!any) break;
    }
    for (size_t w = 0; w < r->words; w++) out[w] |= cur[w];
    r->scratch_top = mark;
    return 0;
}

static uint64_t *rec_ends(struct rec *r, int32_t rule, size_t i) {
    size_t slot = (size_t)rule * (r->n + 1) + i;
    uint64_t *out = r->ends + slot * r->words;
    if (r->state[slot] == 2) return out;
    if (r->state[slot] == 1) return out; /* not reachable without left recursion */
    r->state[slot] = 1;
    size_t mark = r->scratch_top;
    uint64_t *from = push_set(r);
    if (!from) return NULL;
    from[i / 64] = 1ull << (i % 64);
    for (int32_t a = r->g->alt_first[rule]; a < r->g->alt_first[rule + 1]; a++)
        if (run_alt(r, r->g->alt_pos[a], from, out)) return NULL;
    r->scratch_top = mark;
    r->state[slot] = 2;
    return out;
}

int gr_accepts(const struct snug_grammar *g, const char *s, size_t n) {
    if (n > RECOGNIZE_MAX) return -1;
    struct rec r = {.g = g, .s = (const uint8_t *)s, .n = n, .words = (n + 1 + 63) / 64};
    size_t cells = (size_t)g->n_rules * (n + 1);
    if (cells * r.words * sizeof(uint64_t) > RECOGNIZE_TABLE) return -1;
    r.ends = snug_calloc(cells * r.words, sizeof *r.ends);
    r.state = snug_calloc(cells, 1);
    /* each nesting level holds up to three sets; the depth is bounded by the rules times the
     * offsets (every level either consumes a byte or enters another rule) */
    r.scratch_cap = r.words * 3 * (cells + 4);
    if (r.scratch_cap * sizeof(uint64_t) > RECOGNIZE_TABLE) r.scratch_cap = RECOGNIZE_TABLE / 8;
    r.scratch = snug_malloc(r.scratch_cap * sizeof *r.scratch);
    int rc = -1;
    if (r.ends && r.state && r.scratch) {
        uint64_t *e = rec_ends(&r, g->elems[0].arg, 0);
        if (e) rc = (int)((e[n / 64] >> (n % 64)) & 1);
    }
    snug_free(r.ends);
    snug_free(r.state);
    snug_free(r.scratch);
    return rc;
}
