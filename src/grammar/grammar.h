/* grammar.h — grammar-constrained decoding: a GBNF grammar compiled to a byte-level pushdown
 * matcher, token masks over the model's vocabulary, and JSON Schema → GBNF.
 *
 * A short tour:
 *   struct snug_grammar *g;   snug_grammar_parse(&g, text, len, NULL, &err);   // compile once
 *   struct snug_vocab_trie *t; snug_vocab_trie_build(&t, tok, &err);          // once per model
 *   struct snug_matcher *m;   snug_matcher_init(&m, g, t, NULL, &err);         // per request
 *   per token: snug_matcher_apply(m, logits, V) (disallowed -> -INFINITY), sample,
 *              snug_matcher_accept(m, id); speculative decoding: snug_matcher_allows,
 *              snug_matcher_rollback(m, n); snug_matcher_forced(m) (a token to emit unsampled).
 *
 * Design (docs/grammar.md): the text form is GBNF (the grammar format of llama.cpp's
 * grammars/README.md: `name ::= alternatives`, literals, character classes, groups, `* + ? {m,n}`,
 * comments). Character classes over code points are compiled to UTF-8 byte sequences, so the
 * matcher consumes bytes and tokens (byte strings) need no partial-character bookkeeping.
 * A matcher state is a set of parse stacks; stacks are interned (pos, parent) nodes, so a set is a
 * small sorted array of node ids, and sets are interned into a lazily built DFA whose
 * transitions are cached: a token mask is a walk of the vocabulary trie over cached transitions,
 * and masks are cached per DFA state. Everything is allocated by snug_matcher_init (bounded by
 * struct snug_grammar_limits); accept / mask / rollback allocate nothing.
 * Invariant: a grammar is immutable after parse (shareable across threads); a matcher belongs
 * to one thread. Read next: gbnf.c (parser), match.c (matcher), jschema.c (JSON Schema).
 */
#ifndef SNUG_GRAMMAR_H
#define SNUG_GRAMMAR_H

#include "snug.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Size limits; zero members take the defaults (in parentheses). Exceeding one is an error
 * naming it (SNUG_ERR_BUDGET), at compile time or, for the run-time tables, when the state is
 * reached (the matcher then allows only the end of generation). */
struct snug_grammar_limits {
    size_t max_text_bytes; /* grammar text (1 MiB) */
    int32_t max_elems;     /* compiled elements, all rules together (262144) */
    int32_t max_rules;     /* rules incl. generated ones (32768) */
    int32_t max_nodes;     /* interned stack nodes per matcher (65536) */
    int32_t max_set;       /* stacks alive at once (1024) */
    int32_t max_states;    /* cached DFA states per matcher (4096) */
    int32_t mask_cache;    /* cached token masks per matcher (32) */
    int32_t history;       /* tokens that can be rolled back (16) */
};

struct snug_grammar;

/* Compile GBNF text (`len` bytes, need not be NUL-terminated). `root` names the start rule
 * (NULL = "root"). Errors: SNUG_ERR_FORMAT with "line L, column C: ..." for syntax errors,
 * undefined rules and left recursion; SNUG_ERR_BUDGET for a limit. */
int snug_grammar_parse(struct snug_grammar **out, const char *text, size_t len, const char *root,
                       const struct snug_grammar_limits *lim, struct snug_err *err);
void snug_grammar_free(struct snug_grammar *g);
int32_t snug_grammar_n_rules(const struct snug_grammar *g);
int32_t snug_grammar_n_elems(const struct snug_grammar *g);

/* ---- vocabulary trie: every token's bytes, shared prefixes stored once ------------------- */
struct snug_vocab_trie;

/* Build from the tokenizer (immutable afterwards; share it across matchers and threads).
 * NORMAL, USER_DEFINED and BYTE tokens enter by their bytes; CONTROL tokens never match a
 * grammar (end tokens are allowed separately, when the grammar is complete). */
int snug_vocab_trie_build(struct snug_vocab_trie **out, const struct snug_tokenizer *tok,
                          struct snug_err *err);
void snug_vocab_trie_free(struct snug_vocab_trie *t);
int32_t snug_vocab_trie_n_nodes(const struct snug_vocab_trie *t);

/* ---- matcher ------------------------------------------------------------------------------ */
struct snug_matcher;

/* A matcher at the grammar's start. `end_ids` (n_end of them, -1 entries ignored) are the
 * end-of-generation tokens: allowed only when the grammar is complete. `g` and `t` are
 * borrowed and must outlive the matcher. */
int snug_matcher_init(struct snug_matcher **out, const struct snug_grammar *g,
                      const struct snug_vocab_trie *t, const snug_token *end_ids, int n_end,
                      const struct snug_grammar_limits *lim, struct snug_err *err);
void snug_matcher_free(struct snug_matcher *m);
/* Back to the start state (keeps the caches). */
void snug_matcher_reset(struct snug_matcher *m);

/* True when token `id` may come next (an end token: when the grammar is complete). */
bool snug_matcher_allows(struct snug_matcher *m, snug_token id);
/* True when token `id` is allowed and the grammar is complete after it (end tokens: when
 * complete now). */
bool snug_matcher_completes(struct snug_matcher *m, snug_token id);
/* Advance by token `id`. SNUG_ERR_INVALID when the grammar does not allow it (state unchanged);
 * an end token is accepted when complete and ends the matcher (nothing is allowed after). */
int snug_matcher_accept(struct snug_matcher *m, snug_token id, struct snug_err *err);
/* Advance by raw bytes (not a token; used to skip text fed outside the model, e.g. a forced
 * prefix). Not recorded for rollback. SNUG_ERR_INVALID when the bytes do not fit. */
int snug_matcher_accept_bytes(struct snug_matcher *m, const char *bytes, size_t n,
                              struct snug_err *err);
/* Undo the last n accepted tokens (n <= the history limit and <= the tokens accepted since the
 * start or the last reset). SNUG_ERR_INVALID otherwise (state unchanged). */
int snug_matcher_rollback(struct snug_matcher *m, int32_t n, struct snug_err *err);
/* The allowed-token bitmap for the current state (bit i of word i/64 = token i allowed),
 * n_vocab bits, valid until the next matcher call. Computed by a trie walk or from the cache. */
const uint64_t *snug_matcher_mask(struct snug_matcher *m);
/* Set logits of disallowed tokens to -INFINITY (n_vocab = the logits row length). */
void snug_matcher_apply(struct snug_matcher *m, float *logits, int32_t n_vocab);
/* When the grammar allows exactly one next byte string for a while (a literal, a closing
 * brace, only the end), the longest token spelling a prefix of it (or the first end token
 * when only the end is allowed); -1 when the next step is a real choice. */
snug_token snug_matcher_forced(struct snug_matcher *m);
/* A shortest byte string that completes the grammar from here: the live stack with the fewest
 * bytes left (from per-element minimum lengths computed at compile time), spelled with the
 * cheapest alternative of each rule and the lowest byte of each set. Its length (0 = complete
 * now) and the bytes in out, or -1 when it is longer than `cap`. */
int snug_matcher_shortest_completion(struct snug_matcher *m, uint8_t *out, int cap);
/* How many bytes the shortest completion has after token `id` (0 = complete; for an end token:
 * 0 when complete now), or -1 when the token is not allowed. */
int snug_matcher_completion_after(struct snug_matcher *m, snug_token id);
/* The largest snug_matcher_completion_after over the tokens allowed now (cached per state;
 * -1 when the matcher failed): when it fits the budget, every allowed token does. */
int snug_matcher_max_completion_after(struct snug_matcher *m);
/* The longest vocabulary token spelling a prefix of bytes[0..n) (-1 when none). */
snug_token snug_vocab_trie_longest_prefix(const struct snug_vocab_trie *t, const uint8_t *bytes,
                                          int n);
/* The grammar is complete here (an end token would be accepted). */
bool snug_matcher_is_complete(const struct snug_matcher *m);
/* A run-time limit was hit (the message says which); only end tokens are allowed then. */
const char *snug_matcher_error(const struct snug_matcher *m);
/* Statistics: mask walks done, mask cache hits, DFA states now. */
void snug_matcher_stats(const struct snug_matcher *m, int64_t *walks, int64_t *hits,
                        int32_t *states);

/* ---- JSON Schema → GBNF ------------------------------------------------------------------ */
/* Cost before work: one pass over JSON text that is to become a grammar (a schema, a tools
 * array), before anything is parsed or allocated: at most 1 MiB, 65536 values (objects, arrays
 * and their members) and 256 levels of nesting. SNUG_ERR_BUDGET naming `what` and the limit.
 * snug_json_schema_to_gbnf and snug_tools_to_gbnf run it first; the server runs it on the raw
 * request body's members that become grammars, before the body is parsed. */
int snug_json_schema_precheck(const char *text, size_t len, const char *what, struct snug_err *err);

/* Write a GBNF grammar (root rule "root") for JSON documents valid under `schema_json`
 * (`len` bytes of JSON text). The grammar never accepts a document the schema rejects: every
 * validation keyword is translated exactly (type, enum, const, $ref incl. siblings, allOf,
 * anyOf, oneOf when its branches are proven disjoint, not and dependencies in their exact
 * forms, properties / required / additionalProperties / patternProperties /
 * min-maxProperties, items / prefixItems / min-maxItems / uniqueItems over finite item sets,
 * min-maxLength / pattern / format, any integer range, decimal bounds, integer multipleOf;
 * docs/grammar.md lists the details) or refused: SNUG_ERR_UNSUPPORTED naming the keyword and
 * its JSON path. Keywords no draft defines are ignored, as the specification says. The text is
 * size-checked first (snug_json_schema_precheck) and the grammar budgeted while written
 * (SNUG_ERR_BUDGET). *out is a NUL-terminated snug_malloc'd string (free with snug_free). */
int snug_json_schema_to_gbnf(const char *schema_json, size_t len, char **out, size_t *out_len,
                             struct snug_err *err);

/* A grammar for Qwen's XML tool calls over the OpenAI `tools` array (JSON text):
 *   <function=NAME>\n<parameter=K>\nV\n</parameter>\n...</function>\n</tool_call>
 * starting right after "<tool_call>\n" (after "<function=NAME>\n" when `named`), preceded by
 * the literal `lead` (NULL = none). Strict tools (function.strict true) get their parameters
 * from the schema — declared order, optional ones skippable, strings raw (unquoted, no '<'),
 * other values compact JSON; other tools take any parameters. `many`: more calls may follow
 * ("\n<tool_call>\n<function=..."). Errors as for snug_json_schema_to_gbnf, with the JSON path
 * under #/tools/N/function/parameters. */
int snug_tools_to_gbnf(const char *tools_json, size_t len, const char *named, const char *lead,
                       bool many, char **out, size_t *out_len, struct snug_err *err);

/* A Lark grammar (the subset of docs/grammar.md: rules, terminals, literals, ranges, /regex/,
 * groups, [optional], ? * +, ~ n..m, %import common.X, %ignore) → GBNF. Every name becomes
 * `prefix` + the Lark name ("l-" when prefix is NULL or empty); the start rule is
 * "PREFIX-root" (plain "root" without a prefix), so the text can be appended to another
 * grammar. Errors name the line, column and construct: SNUG_ERR_FORMAT (syntax, undefined or
 * twice-defined names, no `start`), SNUG_ERR_UNSUPPORTED (a construct outside the subset). */
int snug_lark_to_gbnf(const char *text, size_t len, const char *prefix, char **out, size_t *out_len,
                      struct snug_err *err);

/* A custom tool's input format (OpenAI's CustomToolInputFormat grammar: `syntax` "lark" or
 * "regex", `definition`) → GBNF whose start rule is named as by snug_lark_to_gbnf. A regex
 * must match the whole input. */
int snug_tool_format_to_gbnf(const char *syntax, const char *definition, size_t len,
                             const char *prefix, char **out, size_t *out_len, struct snug_err *err);

#endif /* SNUG_GRAMMAR_H */
