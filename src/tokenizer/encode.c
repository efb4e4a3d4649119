/* encode.c — text to token ids: added-token matching, NFC, the PCRE2 pre-tokenizer, and the
 * byte-pair merge loop.
 * Owns: the per-call scratch (struct enc), freed before snug_tokenizer_encode returns; the
 * tokenizer itself is only read, so concurrent calls are safe.
 * Invariant: every input byte ends up in exactly one emitted token (lossless up to NFC).
 * Read next: detok.c.
 */
#include "tokenizer_impl.h"

#include "core/core.h"

#include <string.h>
#include <utf8proc.h>

/* One merge candidate in the heap: the pair starting at symbol `pos`, valid only while the
 * symbols still hold (left, right). Ordered by rank, then by position (leftmost first), which
 * is the order HF tokenizers' BPE applies merges in. */
struct cand {
    int32_t rank;
    int32_t pos;
    int32_t right_pos;
    int32_t left, right;
    int32_t result;
};

struct enc {
    const struct snug_tokenizer *t;
    snug_token *out;
    size_t cap, n;
    /* scratch, grown on demand */
    int32_t *cps; /* NFC: code points, later re-encoded in place as UTF-8 */
    size_t cps_cap;
    int32_t *sym_id, *sym_prev, *sym_next; /* BPE symbols of one piece */
    size_t sym_cap;
    struct cand *heap;
    size_t heap_cap, heap_n;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
};

static void emit(struct enc *e, snug_token id) {
    if (e->n < e->cap) e->out[e->n] = id;
    e->n++;
}

/* ---- BPE ------------------------------------------------------------------------------------- */
static bool cand_less(const struct cand *a, const struct cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(struct enc *e, struct cand c) {
    SNUG_ASSERT(e->heap_n < e->heap_cap);
    size_t i = e->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &e->heap[p])) break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = c;
}

static struct cand heap_pop(struct enc *e) {
    struct cand top = e->heap[0], last = e->heap[--e->heap_n];
    size_t i = 0, n = e->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const struct cand *mc = &last;
        if (l < n && cand_less(&e->heap[l], mc)) m = l, mc = &e->heap[l];
        if (r < n && cand_less(&e->heap[r], mc)) m = r;
        if (m == i) break;
        e->heap[i] = e->heap[m];
        i = m;
    }
    if (n) e->heap[i] = last;
    return top;
}

/* Queue the merge of symbols (l, r) if the vocabulary has one. */
static void try_pair(struct enc *e, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const struct tok_merge *m = tok_find_merge(e->t, e->sym_id[l], e->sym_id[r]);
    if (!m) return;
    heap_push(e, (struct cand){m->rank, l, r, e->sym_id[l], e->sym_id[r], m->result});
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return SNUG_OK;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *q = snug_malloc(nc * elem);
    if (!q) return SNUG_ERR_NOMEM;
    snug_free(*p);
    *p = q;
    *cap = nc;
    return SNUG_OK;
}

/* BPE-encode one pre-token of n bytes: start from one symbol per byte and apply the best-ranked
 * merge until none applies (a heap of candidates, stale ones skipped on pop). */
static int bpe_piece(struct enc *e, const uint8_t *s, size_t n) {
    const struct snug_tokenizer *t = e->t;
    if (n == 1) {
        emit(e, t->byte_id[s[0]]);
        return SNUG_OK;
    }
    size_t sc = e->sym_cap;
    if (n > sc) {
        size_t c1 = sc, c2 = sc, c3 = sc;
        if (grow((void **)&e->sym_id, &c1, n, sizeof(int32_t)) ||
            grow((void **)&e->sym_prev, &c2, n, sizeof(int32_t)) ||
            grow((void **)&e->sym_next, &c3, n, sizeof(int32_t)))
            return SNUG_ERR_NOMEM;
        e->sym_cap = c1;
    }
    /* each merge removes a symbol and queues at most 2 candidates: n-1 + 2(n-1) in all */
    if (grow((void **)&e->heap, &e->heap_cap, 3 * n, sizeof(struct cand))) return SNUG_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        e->sym_id[i] = t->byte_id[s[i]];
        e->sym_prev[i] = (int32_t)i - 1;
        e->sym_next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    e->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++) try_pair(e, (int32_t)i, (int32_t)i + 1);
    while (e->heap_n) {
        struct cand c = heap_pop(e);
        /* stale if either symbol was merged away or changed since it was queued */
        if (e->sym_id[c.pos] != c.left || e->sym_next[c.pos] != c.right_pos ||
            e->sym_id[c.right_pos] != c.right)
            continue;
        int32_t r = c.right_pos;
        e->sym_id[c.pos] = c.result;
        e->sym_id[r] = -1; /* removed */
        int32_t nx = e->sym_next[r];
        e->sym_next[c.pos] = nx;
        if (nx >= 0) e->sym_prev[nx] = c.pos;
        e->sym_next[r] = -2;
        try_pair(e, e->sym_prev[c.pos], c.pos);
        try_pair(e, c.pos, nx);
    }
    for (int32_t i = 0; i >= 0; i = e->sym_next[i]) emit(e, e->sym_id[i]);
    return SNUG_OK;
}

/* ---- pre-tokenizer ------------------------------------------------------------------------- */
/* Split valid UTF-8 text with the pre-tokenizer regex and BPE each piece. Text between two
 * matches (none in practice: the regex's alternatives cover every character) is a piece too,
 * as with HF's Split(behavior = Isolated). */
static int pretokenize(struct enc *e, const char *s, size_t n) {
    size_t pos = 0, prev_end = 0;
    while (pos < n) {
        int rc = pcre2_match(e->t->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, e->md, e->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return SNUG_ERR_INTERNAL;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t ms = ov[0], me = ov[1];
        if (ms > prev_end) {
            int r2 = bpe_piece(e, (const uint8_t *)s + prev_end, ms - prev_end);
            if (r2) return r2;
        }
        if (me > ms) {
            int r2 = bpe_piece(e, (const uint8_t *)s + ms, me - ms);
            if (r2) return r2;
            pos = prev_end = me;
        } else { /* empty match: step one character (cannot happen with these regexes) */
            bool inc;
            size_t l = tok_utf8_seq((const uint8_t *)s + me, n - me, &inc);
            pos = me + (l ? l : 1);
            prev_end = me;
        }
    }
    if (prev_end < n) return bpe_piece(e, (const uint8_t *)s + prev_end, n - prev_end);
    return SNUG_OK;
}

/* NFC-normalise valid UTF-8 text (as HF's NFC normalizer), then pre-tokenise it. Pure ASCII is
 * already NFC and skips utf8proc. */
static int encode_valid(struct enc *e, const char *s, size_t n) {
    bool ascii = true;
    for (size_t i = 0; i < n && ascii; i++) ascii = (uint8_t)s[i] < 0x80;
    if (ascii || !e->t->nfc) return pretokenize(e, s, n);
    const utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    utf8proc_ssize_t need =
        utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, NULL, 0, opt);
    if (need < 0) return SNUG_ERR_INTERNAL;
    /* the re-encoded UTF-8 is written over the code point buffer: 4 bytes per code point */
    if (grow((void **)&e->cps, &e->cps_cap, (size_t)need + 1, sizeof(int32_t)))
        return SNUG_ERR_NOMEM;
    utf8proc_ssize_t got = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n,
                                              e->cps, (utf8proc_ssize_t)e->cps_cap, opt);
    if (got < 0 || got > need) return SNUG_ERR_INTERNAL;
    utf8proc_ssize_t bytes = utf8proc_reencode(e->cps, got, opt);
    if (bytes < 0) return SNUG_ERR_INTERNAL;
    return pretokenize(e, (const char *)e->cps, (size_t)bytes);
}

/* Encode text that contains no added token: valid UTF-8 stretches are normalised and
 * pre-tokenised; each byte of an invalid sequence becomes its own single-byte token. */
static int encode_text(struct enc *e, const char *s, size_t n) {
    size_t i = 0, start = 0;
    while (i < n) {
        bool inc;
        size_t l = tok_utf8_seq((const uint8_t *)s + i, n - i, &inc);
        if (l) {
            i += l;
            continue;
        }
        if (i > start) {
            int rc = encode_valid(e, s + start, i - start);
            if (rc) return rc;
        }
        emit(e, e->t->byte_id[(uint8_t)s[i]]);
        start = ++i;
    }
    if (n > start) return encode_valid(e, s + start, n - start);
    return SNUG_OK;
}

/* The longest added token starting at s (CONTROL ones only if parse_special); -1 if none. */
static int32_t match_added(const struct snug_tokenizer *t, const char *s, size_t n,
                           bool parse_special) {
    uint8_t b = (uint8_t)s[0];
    for (uint32_t k = t->first[b]; k < t->first[b + 1]; k++) {
        int32_t id = t->added_ids[k];
        size_t l = t->tok_len[id];
        if (l > n) continue;
        if (!parse_special && t->types[id] == SNUG_TOKEN_CONTROL) continue;
        if (!memcmp(s, t->blob + t->tok_off[id], l)) return id;
    }
    return -1;
}

static void enc_free(struct enc *e) {
    snug_free(e->cps);
    snug_free(e->sym_id);
    snug_free(e->sym_prev);
    snug_free(e->sym_next);
    snug_free(e->heap);
    if (e->md) pcre2_match_data_free(e->md);
    if (e->mctx) pcre2_match_context_free(e->mctx);
    if (e->jit) pcre2_jit_stack_free(e->jit);
}

/* Scan the raw text for added tokens (leftmost, longest first); encode the text between them
 * with encode_text. Ids are counted past `cap` so the caller learns the size it needs. */
/* Does [i, i + l) overlap a plain span? *p is the first span that may (spans are sorted and
 * i only grows, so it advances monotonically). */
static bool in_plain(const struct snug_text_span *plain, size_t n_plain, size_t *p, size_t i,
                     size_t l) {
    while (*p < n_plain && plain[*p].off + plain[*p].len <= i) (*p)++;
    return *p < n_plain && plain[*p].off < i + l;
}

static int encode_impl(const struct snug_tokenizer *t, const char *text, size_t len,
                       bool parse_special, const struct snug_text_span *plain, size_t n_plain,
                       snug_token *out_ids, size_t cap, size_t *n_out, struct snug_err *err) {
    *n_out = 0;
    if (!text && len) return snug_err_set(err, SNUG_ERR_INVALID, "encode: text is NULL");
    if (!out_ids) cap = 0;
    struct enc e = {.t = t, .out = out_ids, .cap = cap};
    e.md = pcre2_match_data_create_from_pattern(t->re, NULL);
    e.mctx = pcre2_match_context_create(NULL);
    if (!e.md || !e.mctx) {
        enc_free(&e);
        return snug_err_set(err, SNUG_ERR_NOMEM, "encode: out of memory");
    }
    if (t->re_jit) { /* a larger JIT stack than the 32 KB default, for very long pieces */
        e.jit = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
        if (e.jit) pcre2_jit_stack_assign(e.mctx, NULL, e.jit);
    }
    int rc = SNUG_OK;
    size_t seg = 0, i = 0, pi = 0;
    bool any_added = t->first[256] > 0;
    while (any_added && i < len) {
        int32_t id = match_added(t, text + i, len - i, parse_special);
        if (id >= 0 && n_plain && t->types[id] == SNUG_TOKEN_CONTROL &&
            in_plain(plain, n_plain, &pi, i, t->tok_len[id]))
            id = match_added(t, text + i, len - i, false); /* plain text: no control tokens */
        if (id < 0) {
            i++;
            continue;
        }
        if (i > seg && (rc = encode_text(&e, text + seg, i - seg))) break;
        emit(&e, id);
        i += t->tok_len[id];
        seg = i;
    }
    if (!rc && len > seg) rc = encode_text(&e, text + seg, len - seg);
    enc_free(&e);
    *n_out = e.n;
    if (rc == SNUG_ERR_NOMEM) return snug_err_set(err, rc, "encode: out of memory");
    if (rc) return snug_err_set(err, rc, "encode: pre-tokenizer failed (PCRE2 error)");
    if (e.n > cap)
        return snug_err_set(err, SNUG_ERR_BUDGET, "encode: %zu tokens do not fit in %zu", e.n, cap);
    return SNUG_OK;
}

int snug_tokenizer_encode(const struct snug_tokenizer *t, const char *text, size_t len,
                          bool parse_special, snug_token *out_ids, size_t cap, size_t *n_out,
                          struct snug_err *err) {
    return encode_impl(t, text, len, parse_special, NULL, 0, out_ids, cap, n_out, err);
}

int snug_tokenizer_encode_spans(const struct snug_tokenizer *t, const char *text, size_t len,
                                const struct snug_text_span *plain, size_t n_plain,
                                snug_token *out_ids, size_t cap, size_t *n_out,
                                struct snug_err *err) {
    for (size_t k = 0; k < n_plain; k++)
        if (plain[k].off > len || plain[k].len > len - plain[k].off ||
            (k && plain[k].off < plain[k - 1].off + plain[k - 1].len)) {
            *n_out = 0;
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "encode: plain span %zu is out of order or outside the text", k);
        }
    return encode_impl(t, text, len, true, plain, n_plain, out_ids, cap, n_out, err);
}
