/* jschema_impl.h — the pieces of the JSON Schema converter shared between its files:
 * jsnum.c (numbers in bounds), jsalg.c (schema algebra: flattening $ref/allOf, merging,
 * disjointness, validating a value), recognize.c (whole-text membership in a compiled grammar)
 * and jschema.c (the generator, which uses them all).
 * Invariant: every function here is exact in the direction the generator relies on — a
 * "yes" (valid, disjoint, matches) is certain; when a question cannot be decided the answer
 * is "unknown" (or "not proven"), never a guess.
 * Read next: jschema.c.
 */
#ifndef SNUG_JSCHEMA_IMPL_H
#define SNUG_JSCHEMA_IMPL_H

#include "core/core.h"
#include "grammar/grammar.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* ---- jsnum.c ---------------------------------------------------------------------------- */
#define INT_MAX_DIGITS 16  /* digits of a generated integer (the `integer` rule's limit) */
#define DEC_MAX_DIGITS 15  /* integer digits of a bounded decimal (below 2^53: exact doubles) */
#define MULT_MAX       256 /* multipleOf, its trailing zeros taken off, at most this */

/* A decimal bound: sign, integer digits without leading zeros ("0" for zero), fraction digits
 * without trailing zeros; a fraction longer than 16 digits is cut to 17 (a generated fraction
 * has at most 16 digits, so equality with it is then impossible, as it should be). */
struct gr_dec {
    bool set, neg;
    char ip[DEC_MAX_DIGITS + 1];
    char fp[18];
};

/* Write rule `name` (and helpers name-N) for the integers in [lo, hi] (|lo|, |hi| below
 * 10^16) that are multiples of `mult` (0 or 1: all). Returns 1, 0 when no integer qualifies
 * (nothing written), -1 when the rule budget ran out, -2 when mult without its trailing zeros
 * is above MULT_MAX. */
int gr_int_emit(struct snug_sbuf *rules, const char *name, long long lo, long long hi,
                unsigned long long mult, int *budget);
/* The same for decimals (an integer part of at most DEC_MAX_DIGITS digits, a fraction of at
 * most 16, no exponent) in [lo, hi] (unset bounds: open); 1 / 0 / -1 as above. */
int gr_dec_emit(struct snug_sbuf *rules, const char *name, const struct gr_dec *lo,
                const struct gr_dec *hi, int *budget);

/* ---- recognize.c ------------------------------------------------------------------------ */
/* Is the whole of s[0..n) a sentence of g? 1 yes, 0 no, -1 too long or too costly to decide. */
int gr_accepts(const struct snug_grammar *g, const char *s, size_t n);

/* ---- jsalg.c ---------------------------------------------------------------------------- */
/* JSON value types as bits ("number" = JS_INT | JS_FRAC, "integer" = JS_INT). */
enum {
    JS_NULL = 1,
    JS_BOOL = 2,
    JS_OBJ = 4,
    JS_ARR = 8,
    JS_STR = 16,
    JS_INT = 32,
    JS_FRAC = 64,
    JS_ALL = 127,
};

enum js_tri { JS_NO = 0, JS_YES = 1, JS_UNKNOWN = -1 };

/* The algebra's context: the document $refs resolve in, the schemas built by merging (kept
 * alive until the conversion ends), compiled patterns, and where a refusal is reported. */
struct js_pat;
struct js_alg {
    json_t *root;
    json_t *keep; /* a JSON array owning every schema built here */
    struct js_pat *pats;
    int n_pats, cap_pats;
    struct snug_err *err;
    int status;
    const char *path; /* the JSON path of the schema being converted, for messages */
    int depth;
    long work; /* steps left for validation and disjointness proofs */
};

void js_alg_free(struct js_alg *a);

/* The schema a $ref names ("#", "#/json/pointer", "#anchor", the root's $id + one of those);
 * NULL with a refusal set when it is not in the document. */
json_t *js_resolve(struct js_alg *a, const char *ref);

/* A schema with its $ref and allOf folded into one object (the draft 2019-09 reading: a $ref's
 * sibling keywords apply too), draft-04 forms rewritten (boolean exclusiveMinimum /
 * exclusiveMaximum, array `items` with additionalItems → prefixItems / items). Returns the
 * schema itself when nothing changes, a new object kept in a->keep, json_false() (a
 * singleton) when the conjunction can hold no value, or NULL with a refusal set (a keyword
 * pair the conjunction cannot express: two different patterns, say). */
json_t *js_flatten(struct js_alg *a, json_t *s);
/* a ∧ b of two flattened schemas, as js_flatten. */
json_t *js_merge(struct js_alg *a, json_t *x, json_t *y);

/* x ∧ y without merging yet: {"allOf": [x, y]} (kept), or x / y when the other constrains
 * nothing (NULL counts as nothing), json_false() when either is false. */
json_t *js_all(struct js_alg *a, json_t *x, json_t *y);
/* Keep x alive until the conversion ends; returns x, NULL (refusal set) when out of memory. */
json_t *js_keep(struct js_alg *a, json_t *x);

/* Can the schema hold no value at all (proven: its conjunction is empty, no type is left, or
 * no enum value satisfies its other keywords)? */
bool js_empty(struct js_alg *a, json_t *s);

/* Types a schema's values can have (an upper bound): from type, enum / const. */
unsigned js_sem_types(json_t *s);
/* The types the generator writes for a flattened schema: type, enum / const, else those whose
 * keywords appear (properties → object, minLength → string, ...), else all. */
unsigned js_gen_types(json_t *s);
/* Can no document the generator writes for x validate under y, nor the other way round?
 * true only when proven (x, y flattened). */
bool js_disjoint(struct js_alg *a, json_t *x, json_t *y);
/* Does value v validate under schema s (any schema, $refs resolved)? */
enum js_tri js_validate(struct js_alg *a, json_t *s, json_t *v);
/* -1, 0, 1 comparing two JSON numbers exactly. */
int js_num_cmp(json_t *x, json_t *y);
/* JSON Schema equality (1 and 1.0 are equal, true and 1 are not; objects unordered). */
bool js_equal(json_t *x, json_t *y);
/* Does the regex `pat` (JSON Schema pattern semantics: search) match the string s? */
enum js_tri js_pattern_test(struct js_alg *a, const char *pat, const char *s, size_t n);

/* Is the string in the language of the pattern's grammar (exact, whatever the characters)?
 * The keys written for a patternProperties pattern are that language. */
enum js_tri js_pattern_in_grammar(struct js_alg *a, const char *pat, const char *s, size_t n);

/* Keyword classes. */
bool js_is_refused(const char *k);    /* validation keywords the converter does not translate */
bool js_is_translated(const char *k); /* keywords the converter translates */

#endif /* SNUG_JSCHEMA_IMPL_H */
