/* memo.c — compiled grammars and warm matchers kept across requests (see memo.h).
 * Entries live in a small array searched linearly (a few dozen at most), keyed by a hash and
 * then compared byte for byte. Read next: match.c.
 */
#include "grammar/memo.h"

#include "core/core.h"

#include <pthread.h>
#include <string.h>

#define MEMO_MAX_END 8

struct snug_grammar_memo_entry {
    uint64_t hash;
    char *text; /* the grammar text, then the root name, NUL-separated */
    size_t len;
    bool has_root;
    snug_token end_ids[MEMO_MAX_END];
    int n_end;
    struct snug_grammar *g;
    struct snug_matcher **idle; /* [memo->max_idle] */
    int32_t n_idle, n_busy;
    uint64_t last_used;
};

struct snug_grammar_memo {
    pthread_mutex_t mu;
    const struct snug_vocab_trie *trie;
    int32_t max_grammars, max_idle, n_entries, n_idle_all;
    struct snug_grammar_memo_entry **entries; /* [max_grammars] */
    uint64_t tick;
    int64_t hits, compiles;
};

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    return snug_fnv1a(h, p, n);
}

static uint64_t key_hash(const char *text, size_t len, const char *root, const snug_token *end_ids,
                         int n_end) {
    uint64_t h = fnv1a(SNUG_FNV_OFFSET, text, len);
    h = fnv1a(h, "\0", 1);
    if (root) h = fnv1a(h, root, strlen(root));
    return fnv1a(h, end_ids, (size_t)n_end * sizeof *end_ids);
}

static bool key_equal(const struct snug_grammar_memo_entry *e, uint64_t hash, const char *text,
                      size_t len, const char *root, const snug_token *end_ids, int n_end) {
    if (e->hash != hash || e->len != len || e->n_end != n_end || e->has_root != (root != NULL))
        return false;
    if (memcmp(e->text, text, len)) return false;
    if (root && strcmp(e->text + len + 1, root)) return false;
    return !memcmp(e->end_ids, end_ids, (size_t)n_end * sizeof *end_ids);
}

static void entry_free(struct snug_grammar_memo *memo, struct snug_grammar_memo_entry *e) {
    if (!e) return;
    for (int32_t i = 0; i < e->n_idle; i++) snug_matcher_free(e->idle[i]);
    memo->n_idle_all -= e->n_idle;
    snug_free(e->idle);
    snug_grammar_free(e->g);
    snug_free(e->text);
    snug_free(e);
}

int snug_grammar_memo_init(struct snug_grammar_memo **out, const struct snug_vocab_trie *t,
                           int32_t max_grammars, int32_t max_idle, struct snug_err *err) {
    *out = NULL;
    struct snug_grammar_memo *memo = snug_calloc(1, sizeof *memo);
    if (!memo) return snug_err_set(err, SNUG_ERR_NOMEM, "grammar memo: out of memory");
    memo->trie = t;
    memo->max_grammars = max_grammars > 0 ? max_grammars : 16;
    memo->max_idle = max_idle > 0 ? max_idle : 16;
    memo->entries = snug_calloc((size_t)memo->max_grammars, sizeof *memo->entries);
    if (!memo->entries || pthread_mutex_init(&memo->mu, NULL)) {
        snug_free(memo->entries);
        snug_free(memo);
        return snug_err_set(err, SNUG_ERR_NOMEM, "grammar memo: out of memory");
    }
    *out = memo;
    return SNUG_OK;
}

void snug_grammar_memo_free(struct snug_grammar_memo *memo) {
    if (!memo) return;
    for (int32_t i = 0; i < memo->n_entries; i++) entry_free(memo, memo->entries[i]);
    pthread_mutex_destroy(&memo->mu);
    snug_free(memo->entries);
    snug_free(memo);
}

/* A slot for a new entry (memo->mu held): a free one, or the least recently used entry that
 * has no matcher in use (dropped); -1 when every entry is in use. */
static int32_t slot_for_new(struct snug_grammar_memo *memo) {
    if (memo->n_entries < memo->max_grammars) return memo->n_entries++;
    int32_t best = -1;
    for (int32_t i = 0; i < memo->n_entries; i++) {
        const struct snug_grammar_memo_entry *e = memo->entries[i];
        if (e->n_busy == 0 && (best < 0 || e->last_used < memo->entries[best]->last_used)) best = i;
    }
    if (best >= 0) {
        entry_free(memo, memo->entries[best]);
        memo->entries[best] = NULL;
    }
    return best;
}

/* A new entry for the key, its grammar compiled (outside the lock: compiling may take a while
 * on a big schema). */
static int entry_new(struct snug_grammar_memo_entry **out, uint64_t hash, const char *text,
                     size_t len, const char *root, const snug_token *end_ids, int n_end,
                     int32_t max_idle, struct snug_err *err) {
    *out = NULL;
    struct snug_grammar_memo_entry *e = snug_calloc(1, sizeof *e);
    size_t rl = root ? strlen(root) : 0;
    if (e) e->text = snug_malloc(len + rl + 2);
    if (e && e->text) e->idle = snug_calloc((size_t)max_idle, sizeof *e->idle);
    if (!e || !e->text || !e->idle) {
        if (e) snug_free(e->text);
        snug_free(e);
        return snug_err_set(err, SNUG_ERR_NOMEM, "grammar memo: out of memory");
    }
    memcpy(e->text, text, len);
    e->text[len] = 0;
    if (root) memcpy(e->text + len + 1, root, rl + 1);
    e->len = len;
    e->has_root = root != NULL;
    e->hash = hash;
    e->n_end = n_end;
    memcpy(e->end_ids, end_ids, (size_t)n_end * sizeof *end_ids);
    int rc = snug_grammar_parse(&e->g, text, len, root, NULL, err);
    if (rc != SNUG_OK) {
        snug_free(e->idle);
        snug_free(e->text);
        snug_free(e);
        return rc;
    }
    *out = e;
    return SNUG_OK;
}

int snug_grammar_memo_acquire(struct snug_grammar_memo *memo, const char *text, size_t len,
                              const char *root, const snug_token *end_ids, int n_end,
                              struct snug_matcher **m, struct snug_grammar_memo_entry **entry,
                              struct snug_err *err) {
    *m = NULL;
    *entry = NULL;
    if (n_end > MEMO_MAX_END) n_end = MEMO_MAX_END;
    uint64_t hash = key_hash(text, len, root, end_ids, n_end);
    pthread_mutex_lock(&memo->mu);
    struct snug_grammar_memo_entry *e = NULL;
    for (int32_t i = 0; i < memo->n_entries && !e; i++)
        if (memo->entries[i] && key_equal(memo->entries[i], hash, text, len, root, end_ids, n_end))
            e = memo->entries[i];
    if (e) {
        e->n_busy++;
        e->last_used = ++memo->tick;
        if (e->n_idle > 0) {
            *m = e->idle[--e->n_idle];
            memo->n_idle_all--;
            memo->hits++;
            pthread_mutex_unlock(&memo->mu);
            *entry = e;
            return SNUG_OK;
        }
        pthread_mutex_unlock(&memo->mu);
        /* the grammar is compiled: only a new matcher (its caches start cold) */
        int rc = snug_matcher_init(m, e->g, memo->trie, e->end_ids, e->n_end, NULL, err);
        if (rc != SNUG_OK) {
            pthread_mutex_lock(&memo->mu);
            e->n_busy--;
            pthread_mutex_unlock(&memo->mu);
            return rc;
        }
        *entry = e;
        return SNUG_OK;
    }
    pthread_mutex_unlock(&memo->mu);
    int rc = entry_new(&e, hash, text, len, root, end_ids, n_end, memo->max_idle, err);
    if (rc != SNUG_OK) return rc;
    rc = snug_matcher_init(m, e->g, memo->trie, e->end_ids, e->n_end, NULL, err);
    if (rc != SNUG_OK) {
        entry_free(memo, e); /* (no idle matchers: the memo's count is untouched) */
        return rc;
    }
    e->n_busy = 1;
    pthread_mutex_lock(&memo->mu);
    memo->compiles++;
    e->last_used = ++memo->tick;
    /* another request may have compiled the same key meanwhile: both entries may live, the
     * older one ages out */
    int32_t at = slot_for_new(memo);
    if (at >= 0)
        memo->entries[at] = e;
    else
        e->n_busy = -1; /* every entry is in use: this one is not remembered (freed on release) */
    pthread_mutex_unlock(&memo->mu);
    *entry = e;
    return SNUG_OK;
}

void snug_grammar_memo_release(struct snug_grammar_memo *memo,
                               struct snug_grammar_memo_entry *entry, struct snug_matcher *m) {
    if (!entry) {
        snug_matcher_free(m);
        return;
    }
    if (entry->n_busy < 0) { /* not remembered: it was only this request's */
        snug_matcher_free(m);
        entry_free(memo, entry);
        return;
    }
    bool keep = m && !snug_matcher_error(m);
    if (keep) snug_matcher_reset(m);
    pthread_mutex_lock(&memo->mu);
    entry->n_busy--;
    if (keep && entry->n_idle < memo->max_idle && memo->n_idle_all < memo->max_idle) {
        entry->idle[entry->n_idle++] = m;
        memo->n_idle_all++;
        m = NULL;
    }
    pthread_mutex_unlock(&memo->mu);
    snug_matcher_free(m);
}

void snug_grammar_memo_stats(struct snug_grammar_memo *memo, struct snug_grammar_memo_stats *st) {
    pthread_mutex_lock(&memo->mu);
    st->hits = memo->hits;
    st->compiles = memo->compiles;
    st->grammars = 0;
    for (int32_t i = 0; i < memo->n_entries; i++) st->grammars += memo->entries[i] != NULL;
    st->idle = memo->n_idle_all;
    pthread_mutex_unlock(&memo->mu);
}
