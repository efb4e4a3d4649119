/* tokenizer_impl.h — the inside of struct snug_tokenizer, shared by tokenizer.c (building the
 * tables), encode.c (pre-tokenizer + BPE) and detok.c. Not part of the API: include tokenizer.h
 * instead. Invariant: after snug_tokenizer_init every table below is complete and never changes, so
 * readers need no locks. Hash tables use open addressing with power-of-two sizes, load <= 1/2.
 */
#ifndef SNUG_TOKENIZER_IMPL_H
#define SNUG_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <pcre2.h>

/* One merge rule: pair (left id, right id) -> merged id, with its rank (priority). */
struct tok_merge {
    uint64_t key; /* (uint64)left << 32 | right; UINT64_MAX marks an empty slot */
    int32_t rank;
    int32_t result;
};

struct snug_tokenizer {
    int32_t n_vocab;
    enum snug_pretok pretok;
    bool nfc;          /* normalise input to NFC before pre-tokenising */
    char *blob;        /* raw bytes of every token, back to back */
    uint64_t *tok_off; /* [n_vocab] offset into blob */
    uint32_t *tok_len; /* [n_vocab] */
    uint8_t *types;    /* [n_vocab] enum snug_token_type */
    size_t max_tok_bytes;

    int32_t *bpe_slots; /* NORMAL tokens by raw bytes -> id (-1 = empty) */
    uint64_t bpe_mask;
    int32_t *add_slots; /* CONTROL / USER_DEFINED tokens by literal text -> id */
    uint64_t add_mask;
    struct tok_merge *merge_slots;
    uint64_t merge_mask;
    int32_t byte_id[256]; /* the NORMAL token of each single byte */

    /* Added tokens grouped by first byte (added_ids[first[b] .. first[b+1]) ), each group sorted
     * by length, longest first, so the first hit at a position is the longest match. */
    int32_t *added_ids;
    uint32_t first[257];

    int32_t bos, eos, pad, im_end;
    pcre2_code *re;
    bool re_jit; /* JIT compilation succeeded */
};

/* Hash of a byte string (FNV-1a, 64-bit). */
static inline uint64_t tok_hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static inline uint64_t tok_hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Look up a merge of (left, right); NULL if none. */
static inline const struct tok_merge *tok_find_merge(const struct snug_tokenizer *t, int32_t left,
                                                     int32_t right) {
    if (!t->merge_slots) return NULL;
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint64_t i = tok_hash_u64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const struct tok_merge *m = &t->merge_slots[i];
        if (m->key == key) return m;
        if (m->key == UINT64_MAX) return NULL;
    }
}

/* Look up a byte string in a token hash table (bpe_slots or add_slots); -1 if absent. */
int32_t tok_lookup(const struct snug_tokenizer *t, const int32_t *slots, uint64_t mask,
                   const char *s, size_t n);

/* Length of the valid UTF-8 sequence starting at s[0] (1..4), or 0 if s[0..n) does not start
 * with one. `*incomplete` is set when the bytes are a valid prefix cut short by n. Strict:
 * rejects overlong forms, surrogates and code points above U+10FFFF. */
size_t tok_utf8_seq(const uint8_t *s, size_t n, bool *incomplete);

#endif /* SNUG_TOKENIZER_IMPL_H */
