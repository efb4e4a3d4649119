/* tokenizer.c — building a byte-level BPE tokenizer: the GPT-2 byte<->unicode map, the token
 * and merge hash tables, the added-token index, the pre-tokenizer regex, GGUF loading, and the
 * simple lookups (token bytes, ids, decode).
 * Owns: every table in struct snug_tokenizer (tokenizer_impl.h). Invariant: built once, then
 * read-only. Loading is O(n_tokens + n_merges) with hashing (151K tokens + 151K merges: ~0.1 s).
 * Read next: encode.c (how text becomes ids), detok.c (ids back to text).
 */
#include "tokenizer_impl.h"

#include "core/core.h"

#include <stdio.h>
#include <string.h>

/* ---- GPT-2 byte <-> unicode map -------------------------------------------------------------
 * Byte-level BPE vocabularies store every byte as a printable code point (fact from OpenAI's
 * GPT-2 encoder.py `bytes_to_unicode`, also used by HF tokenizers' ByteLevel): bytes '!'..'~',
 * 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other 68 bytes (0x00..0x20, 0x7F..0xA0,
 * 0xAD), in increasing order, become U+0100, U+0101, ... So every mapped code point is < 0x144. */
static bool byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* cp_to_byte[cp] = the byte that code point cp stands for (cp < 0x144), or -1. */
static void build_unmap(int16_t cp_to_byte[0x144]) {
    for (int i = 0; i < 0x144; i++) cp_to_byte[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        if (byte_is_printable(b))
            cp_to_byte[b] = (int16_t)b;
        else
            cp_to_byte[256 + n++] = (int16_t)b;
    }
}

size_t tok_utf8_seq(const uint8_t *s, size_t n, bool *incomplete) {
    *incomplete = false;
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte (Unicode Table 3-7) */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F; /* <= U+10FFFF */
    } else {
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *incomplete = true;
            return 0;
        }
        uint8_t b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
    }
    return need;
}

/* Undo the byte map on a mapped token string. Writes at most `n` bytes to out (each code point
 * is one byte). Returns the byte count, or -1 if the text is not valid mapped text. */
static int64_t unmap_text(const int16_t *cp_to_byte, const char *s, size_t n, char *out) {
    size_t i = 0, o = 0;
    while (i < n) {
        bool inc;
        size_t l = tok_utf8_seq((const uint8_t *)s + i, n - i, &inc);
        if (!l) return -1;
        uint32_t cp;
        const uint8_t *u = (const uint8_t *)s + i;
        if (l == 1)
            cp = u[0];
        else if (l == 2)
            cp = (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
        else
            return -1; /* every mapped code point is below U+0800 */
        if (cp >= 0x144 || cp_to_byte[cp] < 0) return -1;
        out[o++] = (char)cp_to_byte[cp];
        i += l;
    }
    return (int64_t)o;
}

/* ---- hash tables ---------------------------------------------------------------------------- */
int32_t tok_lookup(const struct snug_tokenizer *t, const int32_t *slots, uint64_t mask,
                   const char *s, size_t n) {
    if (!slots) return -1;
    for (uint64_t i = tok_hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        int32_t id = slots[i];
        if (id < 0) return -1;
        if (t->tok_len[id] == n && !memcmp(t->blob + t->tok_off[id], s, n)) return id;
    }
}

/* Insert token `id` (its bytes are already in the blob) unless an equal string is present:
 * the first id wins, as in a vocabulary map built in id order. */
static void table_insert(struct snug_tokenizer *t, int32_t *slots, uint64_t mask, int32_t id) {
    const char *s = t->blob + t->tok_off[id];
    size_t n = t->tok_len[id];
    for (uint64_t i = tok_hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        int32_t o = slots[i];
        if (o < 0) {
            slots[i] = id;
            return;
        }
        if (t->tok_len[o] == n && !memcmp(t->blob + t->tok_off[o], s, n)) return;
    }
}

static uint64_t table_size(uint64_t n) {
    uint64_t sz = 16;
    while (sz < 2 * n + 1) sz <<= 1;
    return sz;
}

static int32_t *table_new(uint64_t size) {
    int32_t *s = snug_malloc(size * sizeof *s);
    if (s) memset(s, 0xFF, size * sizeof *s); /* all -1 */
    return s;
}

/* ---- pre-tokenizer regexes --------------------------------------------------------------------
 * From the tokenizer.json files of Qwen2 and Qwen3.5 (quoted in llama.cpp's llama-vocab.cpp and
 * docs/qwen35.md §5.3); compiled with PCRE2_UTF | PCRE2_UCP so \p{..} and \s are Unicode-aware
 * and (?i:) folds case as HF's engine does. */
static const char RE_QWEN35[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
                               " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int compile_regex(struct snug_tokenizer *t, struct snug_err *err) {
    const char *pat = t->pretok == SNUG_PRETOK_QWEN35 ? RE_QWEN35 : RE_QWEN2;
    int code;
    PCRE2_SIZE off;
    t->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code,
                          &off, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return snug_err_set(err, SNUG_ERR_INTERNAL, "pre-tokenizer regex failed to compile: %s",
                            (const char *)msg);
    }
    t->re_jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
    return SNUG_OK;
}

/* ---- building -------------------------------------------------------------------------------- */
void snug_tokenizer_free(struct snug_tokenizer *t) {
    if (!t) return;
    if (t->re) pcre2_code_free(t->re);
    snug_free(t->blob);
    snug_free(t->tok_off);
    snug_free(t->tok_len);
    snug_free(t->types);
    snug_free(t->bpe_slots);
    snug_free(t->add_slots);
    snug_free(t->merge_slots);
    snug_free(t->added_ids);
    snug_free(t);
}

/* Copy every token into the blob (NORMAL tokens unmapped to raw bytes) and fill the tables of
 * tokens and added tokens. */
static int build_tokens(struct snug_tokenizer *t, const struct snug_tokenizer_desc *d,
                        const char *name, struct snug_err *err) {
    int16_t cp_to_byte[0x144];
    build_unmap(cp_to_byte);
    uint64_t blob_bytes = 0;
    for (uint64_t i = 0; i < d->n_tokens; i++) {
        if (d->tokens[i].len > UINT32_MAX || (d->tokens[i].len && !d->tokens[i].data))
            return snug_err_set(err, SNUG_ERR_FORMAT, "%s: tokenizer token %llu is malformed", name,
                                (unsigned long long)i);
        if (!snug_add_u64(blob_bytes, d->tokens[i].len, &blob_bytes))
            return snug_err_set(err, SNUG_ERR_FORMAT, "%s: tokenizer tokens too large", name);
    }
    uint64_t n = d->n_tokens;
    t->blob = snug_malloc(blob_bytes ? blob_bytes : 1);
    t->tok_off = snug_malloc(n * sizeof *t->tok_off);
    t->tok_len = snug_malloc(n * sizeof *t->tok_len);
    t->types = snug_malloc(n);
    if (!t->blob || !t->tok_off || !t->tok_len || !t->types)
        return snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory for %llu tokens", name,
                            (unsigned long long)n);
    uint8_t *literal = snug_calloc(n, 1); /* NORMAL tokens that are not valid mapped text */
    if (!literal) return snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory", name);
    uint64_t off = 0, n_added = 0;
    for (uint64_t i = 0; i < n; i++) {
        int32_t ty = d->token_types ? d->token_types[i] : SNUG_TOKEN_NORMAL;
        if (ty < 0 || ty > SNUG_TOKEN_BYTE) {
            snug_free(literal);
            return snug_err_set(
                err, SNUG_ERR_FORMAT,
                "%s: tokenizer.ggml.token_type[%llu] = %d is not a token type (0..6)", name,
                (unsigned long long)i, ty);
        }
        t->types[i] = (uint8_t)ty;
        const char *s = d->tokens[i].data;
        size_t len = (size_t)d->tokens[i].len;
        int64_t m = -1;
        if (ty == SNUG_TOKEN_NORMAL || ty == SNUG_TOKEN_BYTE)
            m = unmap_text(cp_to_byte, s, len, t->blob + off);
        if (m < 0) { /* added tokens, or text outside the byte map: literal bytes */
            literal[i] = 1;
            if (len) memcpy(t->blob + off, s, len);
            m = (int64_t)len;
        }
        t->tok_off[i] = off;
        t->tok_len[i] = (uint32_t)m;
        off += (uint64_t)m;
        if ((size_t)m > t->max_tok_bytes) t->max_tok_bytes = (size_t)m;
        if ((ty == SNUG_TOKEN_CONTROL || ty == SNUG_TOKEN_USER_DEFINED) && m > 0) n_added++;
    }
    /* A NORMAL token that is not byte-level text can never come out of the byte merges (as in
     * HF tokenizers), so it stays out of the BPE table; its bytes still decode literally. */
    uint64_t bsz = table_size(n), asz = table_size(n_added);
    t->bpe_slots = table_new(bsz);
    t->add_slots = table_new(asz);
    t->added_ids = snug_malloc((n_added ? n_added : 1) * sizeof *t->added_ids);
    if (!t->bpe_slots || !t->add_slots || !t->added_ids) {
        snug_free(literal);
        return snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory for token tables", name);
    }
    t->bpe_mask = bsz - 1;
    t->add_mask = asz - 1;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    uint32_t count[257] = {0};
    for (uint64_t i = 0; i < n; i++) {
        int ty = t->types[i];
        if (ty == SNUG_TOKEN_NORMAL || ty == SNUG_TOKEN_BYTE) {
            if (t->tok_len[i] == 0 || literal[i]) continue;
            table_insert(t, t->bpe_slots, t->bpe_mask, (int32_t)i);
            if (t->tok_len[i] == 1) {
                uint8_t b = (uint8_t)t->blob[t->tok_off[i]];
                if (t->byte_id[b] < 0) t->byte_id[b] = (int32_t)i;
            }
        } else if ((ty == SNUG_TOKEN_CONTROL || ty == SNUG_TOKEN_USER_DEFINED) && t->tok_len[i]) {
            table_insert(t, t->add_slots, t->add_mask, (int32_t)i);
            count[(uint8_t)t->blob[t->tok_off[i]]]++;
        }
    }
    snug_free(literal);
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] < 0)
            return snug_err_set(err, SNUG_ERR_FORMAT,
                                "%s: byte-level vocabulary has no token for byte 0x%02X (a gpt2 "
                                "vocabulary needs all 256 byte tokens)",
                                name, b);
    /* Bucket added tokens by first byte; within a bucket longest first (insertion sort: the
     * buckets are small). Only the first id of duplicate strings is kept. */
    t->first[0] = 0;
    for (int b = 0; b < 256; b++) t->first[b + 1] = t->first[b] + count[b];
    uint32_t fill[256];
    for (int b = 0; b < 256; b++) fill[b] = t->first[b];
    for (uint64_t i = 0; i < n; i++) {
        int ty = t->types[i];
        if ((ty != SNUG_TOKEN_CONTROL && ty != SNUG_TOKEN_USER_DEFINED) || !t->tok_len[i]) continue;
        uint8_t b = (uint8_t)t->blob[t->tok_off[i]];
        uint32_t j = fill[b]++;
        while (j > t->first[b] && t->tok_len[t->added_ids[j - 1]] < t->tok_len[i]) {
            t->added_ids[j] = t->added_ids[j - 1];
            j--;
        }
        t->added_ids[j] = (int32_t)i;
    }
    return SNUG_OK;
}

/* Parse every merge "left right" (mapped form), resolve left, right and left+right to ids and
 * store (left, right) -> (rank, result). A merge whose parts are not tokens is a format error,
 * as in HF tokenizers; a repeated pair keeps its first (lowest) rank. */
static int build_merges(struct snug_tokenizer *t, const struct snug_tokenizer_desc *d,
                        const char *name, struct snug_err *err) {
    if (d->n_merges == 0) return SNUG_OK;
    int16_t cp_to_byte[0x144];
    build_unmap(cp_to_byte);
    uint64_t sz = table_size(d->n_merges);
    t->merge_slots = snug_malloc(sz * sizeof *t->merge_slots);
    if (!t->merge_slots) return snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory", name);
    for (uint64_t i = 0; i < sz; i++) t->merge_slots[i].key = UINT64_MAX;
    t->merge_mask = sz - 1;
    size_t cap = 256;
    char *buf = snug_malloc(cap);
    if (!buf) return snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory", name);
    int rc = SNUG_OK;
    for (uint64_t r = 0; r < d->n_merges; r++) {
        const char *s = d->merges[r].data;
        size_t len = (size_t)d->merges[r].len;
        const char *sp = len ? memchr(s, ' ', len) : NULL;
        if (!sp || sp == s || sp == s + len - 1) {
            rc = snug_err_set(err, SNUG_ERR_FORMAT,
                              "%s: tokenizer.ggml.merges[%llu] = '%.*s' is not 'left right'", name,
                              (unsigned long long)r, (int)SNUG_MIN(len, 64), s ? s : "");
            break;
        }
        if (len > cap) {
            snug_free(buf);
            cap = len * 2;
            buf = snug_malloc(cap);
            if (!buf) {
                rc = snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory", name);
                break;
            }
        }
        size_t ll = (size_t)(sp - s), rl = len - ll - 1;
        int64_t a = unmap_text(cp_to_byte, s, ll, buf);
        int64_t b = a < 0 ? -1 : unmap_text(cp_to_byte, sp + 1, rl, buf + a);
        int32_t left = -1, right = -1, res = -1;
        if (a > 0 && b > 0) {
            left = tok_lookup(t, t->bpe_slots, t->bpe_mask, buf, (size_t)a);
            right = tok_lookup(t, t->bpe_slots, t->bpe_mask, buf + a, (size_t)b);
            res = tok_lookup(t, t->bpe_slots, t->bpe_mask, buf, (size_t)(a + b));
        }
        if (left < 0 || right < 0 || res < 0) {
            rc = snug_err_set(err, SNUG_ERR_FORMAT,
                              "%s: tokenizer.ggml.merges[%llu] = '%.*s': %s is not a token", name,
                              (unsigned long long)r, (int)SNUG_MIN(len, 64), s,
                              left < 0    ? "the left part"
                              : right < 0 ? "the right part"
                                          : "the merged string");
            break;
        }
        uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
        for (uint64_t i = tok_hash_u64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
            struct tok_merge *m = &t->merge_slots[i];
            if (m->key == key) break;
            if (m->key == UINT64_MAX) {
                m->key = key;
                m->rank = (int32_t)r;
                m->result = res;
                break;
            }
        }
    }
    snug_free(buf);
    return rc;
}

/* Validate the descriptor, pick the regex, and build every table (tokenizer.h has the contract).
 * Order matters: tokens first (merges resolve their parts through the token table). */
int snug_tokenizer_init(struct snug_tokenizer **out, const struct snug_tokenizer_desc *d,
                        struct snug_err *err) {
    *out = NULL;
    const char *name = d->name ? d->name : "tokenizer";
    if (d->n_tokens == 0 || d->n_tokens > INT32_MAX || !d->tokens)
        return snug_err_set(err, SNUG_ERR_FORMAT, "%s: tokenizer needs 1..2^31-1 tokens, got %llu",
                            name, (unsigned long long)d->n_tokens);
    if (d->n_merges > INT32_MAX || (d->n_merges && !d->merges))
        return snug_err_set(err, SNUG_ERR_FORMAT, "%s: too many merges", name);
    enum snug_pretok pre;
    if (d->pre && !strcmp(d->pre, "qwen35"))
        pre = SNUG_PRETOK_QWEN35;
    else if (d->pre && !strcmp(d->pre, "qwen2"))
        pre = SNUG_PRETOK_QWEN2;
    else
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "%s: tokenizer.ggml.pre = '%s' is not supported (expected 'qwen35' or "
                            "'qwen2')",
                            name, d->pre ? d->pre : "(missing)");
    struct snug_tokenizer *t = snug_calloc(1, sizeof *t);
    if (!t) return snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory", name);
    t->n_vocab = (int32_t)d->n_tokens;
    t->pretok = pre;
    t->nfc = !d->no_nfc;
    int rc = build_tokens(t, d, name, err);
    if (rc == SNUG_OK) rc = build_merges(t, d, name, err);
    if (rc == SNUG_OK) rc = compile_regex(t, err);
    if (rc != SNUG_OK) {
        snug_tokenizer_free(t);
        return rc;
    }
    int32_t ids[3] = {d->bos_id, d->eos_id, d->pad_id};
    for (int k = 0; k < 3; k++)
        if (ids[k] < -1 || ids[k] >= t->n_vocab) ids[k] = -1;
    t->bos = ids[0];
    t->eos = ids[1];
    t->pad = ids[2];
    t->im_end = tok_lookup(t, t->add_slots, t->add_mask, "<|im_end|>", 10);
    *out = t;
    return SNUG_OK;
}

/* ---- GGUF loading ------------------------------------------------------------------------------
 */
/* Read an optional special-token id key; -1 when absent. */
static int get_special_id(const struct snug_gguf *g, const char *key, int32_t *out,
                          struct snug_err *err) {
    uint32_t v = UINT32_MAX;
    int rc = snug_gguf_get_u32_opt(g, key, &v, err);
    if (rc) return rc;
    *out = v > INT32_MAX ? -1 : (int32_t)v;
    return SNUG_OK;
}

/* Gather the tokenizer.ggml.* keys into a descriptor (borrowing the GGUF's strings for the
 * duration of the call) and hand it to snug_tokenizer_init, which copies what it keeps. */
int snug_tokenizer_load(struct snug_tokenizer **out, const struct snug_gguf *g,
                        struct snug_err *err) {
    *out = NULL;
    const char *name = snug_gguf_path(g);
    struct snug_gguf_str model, pre;
    int rc = snug_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (rc) return rc;
    if (model.len != 4 || memcmp(model.data, "gpt2", 4))
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "%s: tokenizer.ggml.model = '%.*s' is not supported (only 'gpt2', "
                            "byte-level BPE)",
                            name, (int)SNUG_MIN(model.len, 64), model.data);
    rc = snug_gguf_get_str(g, "tokenizer.ggml.pre", &pre, err);
    if (rc) return rc;
    char pre_name[64];
    snprintf(pre_name, sizeof pre_name, "%.*s", (int)SNUG_MIN(pre.len, 63), pre.data);

    enum snug_gguf_type et;
    uint64_t n_tok = 0, n_types = 0, n_merges = 0;
    const void *arr;
    rc = snug_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tok, &arr, err);
    if (rc) return rc;
    if (et != SNUG_GGUF_STRING || n_tok == 0 || n_tok > INT32_MAX)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "%s: tokenizer.ggml.tokens must be a non-empty string array", name);
    enum snug_gguf_type tt;
    const void *types_data;
    rc = snug_gguf_get_arr(g, "tokenizer.ggml.token_type", &tt, &n_types, &types_data, err);
    if (rc) return rc;
    if (n_types != n_tok || tt == SNUG_GGUF_STRING || tt == SNUG_GGUF_ARRAY)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "%s: tokenizer.ggml.token_type must be an integer array of %llu "
                            "entries (one per token), got %llu",
                            name, (unsigned long long)n_tok, (unsigned long long)n_types);
    bool has_merges = snug_gguf_find_key(g, "tokenizer.ggml.merges") >= 0;
    if (has_merges) {
        rc = snug_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n_merges, &arr, err);
        if (rc) return rc;
        if (et != SNUG_GGUF_STRING)
            return snug_err_set(err, SNUG_ERR_FORMAT,
                                "%s: tokenizer.ggml.merges must be a string array", name);
    }
    struct snug_tokenizer_desc d = {
        .n_tokens = n_tok, .n_merges = n_merges, .pre = pre_name, .name = name};
    rc = get_special_id(g, "tokenizer.ggml.bos_token_id", &d.bos_id, err);
    if (!rc) rc = get_special_id(g, "tokenizer.ggml.eos_token_id", &d.eos_id, err);
    if (!rc) rc = get_special_id(g, "tokenizer.ggml.padding_token_id", &d.pad_id, err);
    if (rc) return rc;
    struct snug_gguf_str *toks = snug_malloc(n_tok * sizeof *toks);
    int32_t *types = snug_malloc(n_tok * sizeof *types);
    struct snug_gguf_str *merges = snug_malloc((n_merges ? n_merges : 1) * sizeof *merges);
    if (!toks || !types || !merges) {
        rc = snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory reading the vocabulary", name);
        goto done;
    }
    for (uint64_t i = 0; i < n_tok; i++) {
        if (snug_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &toks[i]) != SNUG_OK) {
            rc = snug_err_set(err, SNUG_ERR_FORMAT, "%s: tokenizer.ggml.tokens[%llu] unreadable",
                              name, (unsigned long long)i);
            goto done;
        }
        int64_t v = snug_gguf_arr_i64(tt, types_data, i);
        types[i] = v < 0 || v > 100 ? -1 : (int32_t)v;
    }
    for (uint64_t i = 0; i < n_merges; i++) {
        if (snug_gguf_arr_str(g, "tokenizer.ggml.merges", i, &merges[i]) != SNUG_OK) {
            rc = snug_err_set(err, SNUG_ERR_FORMAT, "%s: tokenizer.ggml.merges[%llu] unreadable",
                              name, (unsigned long long)i);
            goto done;
        }
    }
    d.tokens = toks;
    d.token_types = types;
    d.merges = merges;
    rc = snug_tokenizer_init(out, &d, err);
done:
    snug_free(toks);
    snug_free(types);
    snug_free(merges);
    return rc;
}

void snug_tokenizer_set_nfc(struct snug_tokenizer *t, bool on) {
    t->nfc = on;
}

/* ---- lookups ------------------------------------------------------------------------------------
 */
int32_t snug_tokenizer_n_vocab(const struct snug_tokenizer *t) {
    return t->n_vocab;
}
enum snug_pretok snug_tokenizer_pretok(const struct snug_tokenizer *t) {
    return t->pretok;
}
snug_token snug_tokenizer_eos(const struct snug_tokenizer *t) {
    return t->eos;
}
snug_token snug_tokenizer_bos(const struct snug_tokenizer *t) {
    return t->bos;
}
snug_token snug_tokenizer_im_end(const struct snug_tokenizer *t) {
    return t->im_end;
}
int32_t snug_tokenizer_eog(const struct snug_tokenizer *t, snug_token *out) {
    snug_token c[SNUG_TOKENIZER_EOG_MAX] = {t->eos, t->im_end,
                                            snug_tokenizer_token_id(t, "<|endoftext|>")};
    int32_t n = 0;
    for (int32_t i = 0; i < SNUG_TOKENIZER_EOG_MAX; i++) {
        bool seen = c[i] < 0 || c[i] >= t->n_vocab;
        for (int32_t k = 0; k < n; k++) seen = seen || out[k] == c[i];
        if (!seen) out[n++] = c[i];
    }
    return n;
}
size_t snug_tokenizer_max_token_bytes(const struct snug_tokenizer *t) {
    return t->max_tok_bytes;
}

enum snug_token_type snug_tokenizer_token_type(const struct snug_tokenizer *t, snug_token id) {
    if (id < 0 || id >= t->n_vocab) return SNUG_TOKEN_UNDEFINED;
    return (enum snug_token_type)t->types[id];
}

snug_token snug_tokenizer_token_id(const struct snug_tokenizer *t, const char *text) {
    size_t n = strlen(text);
    int32_t id = tok_lookup(t, t->add_slots, t->add_mask, text, n);
    if (id < 0) id = tok_lookup(t, t->bpe_slots, t->bpe_mask, text, n);
    return id;
}

const char *snug_tokenizer_token_bytes(const struct snug_tokenizer *t, snug_token id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = t->tok_len[id];
    return t->blob + t->tok_off[id];
}

int snug_tokenizer_decode(const struct snug_tokenizer *t, const snug_token *ids, size_t n,
                          char *out, size_t cap, size_t *n_out, struct snug_err *err) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            *n_out = o;
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "token id %d at position %zu is outside "
                                "the vocabulary (0..%d)",
                                ids[i], i, t->n_vocab - 1);
        }
        size_t l = t->tok_len[ids[i]];
        if (o + l <= cap) memcpy(out + o, t->blob + t->tok_off[ids[i]], l);
        o += l;
    }
    *n_out = o;
    if (o > cap)
        return snug_err_set(err, SNUG_ERR_BUDGET, "decoded text needs %zu bytes, buffer has %zu", o,
                            cap);
    return SNUG_OK;
}
