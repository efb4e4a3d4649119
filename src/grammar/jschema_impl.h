/* jschema_impl.h — the pieces of the JSON Schema converter shared between its files:
 * jsnum.c (numbers in bounds), jsalg.c (schema algebra: flattening $ref/allOf, merging,
 * disjointness, validating a value), recognize.c (whole-text membership in a compiled grammar)
 * and the generator (jschema.c, jscontainer.c, jstools.c: struct js_gen and its jg_* calls,
 * below), which uses them all.
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

/* ---- the generator: jschema.c (core, scalars, unions), jscontainer.c (objects, arrays),
 * jstools.c (tool-call grammars) -------------------------------------------------------- */
struct memo_entry {
    size_t key, key_len; /* into ctx.memo_keys */
    uint64_t hash;
    int rule;
};

struct js_gen {
    json_t *root;
    struct snug_sbuf rules; /* generated rules, one per line */
    int n_rules;
    int helper_rules; /* rules named rN-M (numbers) */
    /* rules already written for a $ref ("$ref:" + the reference) or a folded schema (its
     * canonical text): a second visit (recursion) refers to the same rule */
    struct memo_entry *memo;
    int n_refs, cap_refs; /* the tools path empties the memo per tool: n_refs = 0 */
    int *memo_index;
    size_t memo_cap;
    int memo_indexed; /* entries the index holds (more than n_refs: the memo was emptied) */
    struct snug_sbuf memo_keys;
    struct js_alg alg;
    bool alg_ready;
    struct snug_err *err;
    int status;
    char path[512];
    int depth;
};

/* Errors: a refusal naming the keyword and the JSON path (SNUG_ERR_UNSUPPORTED / _INVALID) or
 * the cost budget's; each returns -1 for the generator to pass up. */
int jg_unsupported(struct js_gen *c, const char *keyword, const char *why);
int jg_invalid(struct js_gen *c, const char *keyword, const char *why);
int jg_over_budget(struct js_gen *c);
/* The schema algebra over c's document (made on first use); jg_alg_failed passes its refusal up. */
struct js_alg *jg_alg(struct js_gen *c);
int jg_alg_failed(struct js_gen *c);
void jg_ctx_free(struct js_gen *c);
/* A GBNF string literal spelling s[0..n) (jg_blit), or its inside without the quotes. */
void jg_blit(struct snug_sbuf *b, const char *s, size_t n);
void jg_blit_body(struct snug_sbuf *b, const char *s, size_t n);
/* Rules: jg_rule_begin starts "rN ::= " and returns N (-1 over budget), jg_rule_end ends the
 * line; jg_rule_text writes a whole rule of that body, jg_rule_union one of alternatives. */
int jg_rule_begin(struct js_gen *c);
void jg_rule_end(struct js_gen *c);
int jg_rule_text(struct js_gen *c, const char *body);
int jg_rule_union(struct js_gen *c, const int *ids, size_t n);
/* The JSON path of messages: push a segment (returns the old length to pop back to). */
size_t jg_path_push(struct js_gen *c, const char *seg);
void jg_path_pop(struct js_gen *c, size_t old);
/* The rule of a schema (its id, or -1 with c->status set), at a path segment, of a literal
 * value, of a string schema (raw: without the quotes, as a tool call's string parameter). */
int jg_gen(struct js_gen *c, json_t *s);
int jg_gen_at(struct js_gen *c, json_t *s, const char *seg);
int jg_gen_literal(struct js_gen *c, const json_t *v);
int jg_gen_string_as(struct js_gen *c, json_t *s, bool raw);
int jg_gen_object(struct js_gen *c, json_t *s);
int jg_gen_array(struct js_gen *c, json_t *s);
/* The code point of the UTF-8 sequence at *p (input already valid), *p moved past it. */
uint32_t jg_utf8_next(const char **p);
/* A count keyword (minItems, ...): false when present but not a non-negative integer. */
bool jg_get_count(json_t *s, const char *k, long long *out, bool *has);
/* The whole grammar: "root ::= root_body", the shared base rules, the generated ones (freed
 * here), parsed once to refuse left-recursive or endless schemas; *out on success. */
int jg_finish(struct js_gen *c, const char *root_body, char **out, size_t *out_len,
              struct snug_err *err);

#endif /* SNUG_JSCHEMA_IMPL_H */
