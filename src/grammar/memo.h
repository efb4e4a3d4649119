/* memo.h — compiled grammars and their warm matchers kept across requests.
 *
 * A server sees the same grammars again and again: an agent sends the same tools every turn
 * (the same tool-call grammar), `json_object` is one grammar for everyone. Compiling the
 * grammar is cheap next to what a fresh matcher then spends building its DFA states and token
 * masks lazily, token by token (docs/grammar.md); a short reply pays for that warm-up on nearly
 * every token. The memo keys a compiled grammar by its text, start rule and end tokens, and
 * keeps the matchers of finished requests (reset to the start state, their DFA and mask caches
 * kept) for the next request with the same key. Masks depend only on the grammar, the state and
 * the vocabulary, so a warm matcher gives exactly what a fresh one would.
 *
 * Bounded: at most `max_grammars` entries (least recently used entries without a matcher in
 * use are dropped first) and at most `max_idle` idle matchers in all. Thread-safe (one mutex):
 * acquire on a request thread, release on whichever thread frees the request.
 * Invariant: a matcher handed out is at the grammar's start state and used by one request
 * only until it is released. Read next: match.c (what a matcher caches), src/server/constraint.c
 * (the user).
 */
#ifndef SNUG_GRAMMAR_MEMO_H
#define SNUG_GRAMMAR_MEMO_H

#include "grammar/grammar.h"

struct snug_grammar_memo;
struct snug_grammar_memo_entry;

/* A memo for matchers over vocabulary trie `t` (borrowed; must outlive the memo). Zero limits
 * take the defaults (16 grammars, 16 idle matchers). */
int snug_grammar_memo_init(struct snug_grammar_memo **out, const struct snug_vocab_trie *t,
                           int32_t max_grammars, int32_t max_idle, struct snug_err *err);
void snug_grammar_memo_free(struct snug_grammar_memo *memo); /* no matcher may be in use */

/* A matcher at the start of the grammar `text` (len bytes; root rule `root`, NULL = "root")
 * with end tokens end_ids[0..n_end): a warm one from the memo, or one compiled now. *entry is
 * the handle to give back with the matcher. Errors as snug_grammar_parse / snug_matcher_init
 * (nothing is remembered then). */
int snug_grammar_memo_acquire(struct snug_grammar_memo *memo, const char *text, size_t len,
                              const char *root, const snug_token *end_ids, int n_end,
                              struct snug_matcher **m, struct snug_grammar_memo_entry **entry,
                              struct snug_err *err);
/* Give a matcher back (NULL m: nothing). A matcher that hit a run-time limit is freed. */
void snug_grammar_memo_release(struct snug_grammar_memo *memo,
                               struct snug_grammar_memo_entry *entry, struct snug_matcher *m);

struct snug_grammar_memo_stats {
    int64_t hits;     /* acquires served by an idle warm matcher */
    int64_t compiles; /* acquires that compiled the grammar */
    int32_t grammars; /* entries now */
    int32_t idle;     /* idle matchers now */
};
void snug_grammar_memo_stats(struct snug_grammar_memo *memo, struct snug_grammar_memo_stats *st);

#endif /* SNUG_GRAMMAR_MEMO_H */
