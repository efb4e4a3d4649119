/* grammar_impl.h — the compiled grammar shared by gbnf.c (which builds it) and match.c (which
 * runs it). Owns the element layout; invariant: positions 0 and 1 are `REF root, END` (the
 * start), every alternative ends with an END element, every REF names a defined rule, no rule is
 * left-recursive. Read next: gbnf.c, match.c.
 */
#ifndef SNUG_GRAMMAR_IMPL_H
#define SNUG_GRAMMAR_IMPL_H

#include "grammar/grammar.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GR_INF (INT32_MAX / 4)

enum gr_kind {
    GE_END = 0,   /* end of an alternative: return to the caller */
    GE_BYTES = 1, /* one byte from byte set `arg` */
    GE_REF = 2,   /* rule `arg` */
    GE_ALT = 3,   /* parser only: separates alternatives of a rule being built */
};

struct gr_elem {
    int32_t kind;
    int32_t arg;
};

struct snug_grammar {
    struct gr_elem *elems; /* [n_elems] */
    int32_t n_elems;
    int32_t n_rules;
    int32_t *alt_first;      /* [n_rules + 1]: rule r's alternatives are alt_pos[alt_first[r]..] */
    int32_t *alt_pos;        /* element positions where alternatives start */
    uint64_t (*bytesets)[4]; /* [n_bytesets] 256-bit sets */
    int32_t n_bytesets;
    /* shortest completions: the fewest bytes rule r matches (GR_INF when it never ends), the
     * alternative that does it, and the fewest bytes from element p to the end of its
     * alternative */
    int32_t *rule_min, *rule_best_alt, *rest_min;
    struct snug_grammar_limits lim; /* with the defaults filled in */
};

void snug_grammar_limits_fill(struct snug_grammar_limits *out,
                              const struct snug_grammar_limits *in);

/* A regular expression (the JSON Schema `pattern` subset of regex.c) matching a whole text,
 * as one GBNF expression over the characters themselves (only NUL is left out): for Lark
 * regex terminals and regex tool formats. *out is snug_malloc'ed; on error `why` names the
 * construct (SNUG_ERR_INVALID). */
int gr_regex_to_gbnf(const char *pat, size_t n, char **out, char *why, size_t why_n);

/* The same regex as a JSON Schema `pattern` (unanchored search semantics: an alternative
 * without a leading ^ / trailing $ may have any text before / after it), appended to `out`:
 * the characters of the JSON-encoded string, or with `raw` the bare text of a tool-call
 * parameter (no '<', no NUL). Matches are also held to lengths [min_len, max_len] (max_len -1:
 * none; in characters): when every match already fits, or when the pattern is anchored with
 * one repetition whose count varies (its count is then bounded to fit). -1 with `why` naming
 * the construct when it is outside the subset or the lengths cannot be written (regex.c). */
struct snug_sbuf;
int gr_regex_emit(struct snug_sbuf *out, const char *pat, size_t n, bool raw, long min_len,
                  long max_len, char *why, size_t why_n);

static inline bool gr_byteset_has(const uint64_t *s, unsigned b) {
    return (s[b >> 6] >> (b & 63)) & 1;
}

#endif /* SNUG_GRAMMAR_IMPL_H */
