/* detok.c — streaming detokenizer: token ids in, complete UTF-8 characters out.
 * Owns: the output buffer allocated at snug_detok_init (sized for the longest token), so a push
 * never allocates. Invariant: `pending` holds at most 3 bytes, always a valid but incomplete
 * UTF-8 prefix; everything returned is valid UTF-8.
 * Read next: tokenizer.h (the contract).
 */
#include "tokenizer_impl.h"

#include "core/core.h"

#include <string.h>

int snug_detok_init(struct snug_detok *d, const struct snug_tokenizer *tok, unsigned flags,
                    struct snug_err *err) {
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->flags = flags;
    /* worst case: 3 pending bytes + a token, every byte invalid -> 3 bytes (U+FFFD) each */
    d->buf_cap = 3 * (snug_tokenizer_max_token_bytes(tok) + 4);
    d->buf = snug_malloc(d->buf_cap);
    if (!d->buf) return snug_err_set(err, SNUG_ERR_NOMEM, "detokenizer: out of memory");
    return SNUG_OK;
}

void snug_detok_free(struct snug_detok *d) {
    if (!d) return;
    snug_free(d->buf);
    d->buf = NULL;
    d->buf_cap = 0;
}

void snug_detok_reset(struct snug_detok *d) {
    d->n_pending = 0;
}

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

/* Append the bytes (pending + s) to d->buf: complete characters are copied, a maximal invalid
 * subpart becomes one U+FFFD, and a valid but incomplete tail is kept pending. */
static size_t feed(struct snug_detok *d, const uint8_t *s, size_t n) {
    size_t o = 0;
    /* Finish the pending character one byte at a time. pending is a valid incomplete prefix, so
     * one more byte either completes it, keeps it incomplete, or breaks it; when it breaks, the
     * old pending bytes are a maximal invalid subpart (one U+FFFD) and the new byte is scanned
     * again as a fresh start. */
    while (d->n_pending && n) {
        d->pending[d->n_pending++] = *s;
        bool inc;
        size_t l = tok_utf8_seq(d->pending, d->n_pending, &inc);
        if (l) {
            memcpy(d->buf + o, d->pending, l);
            o += l;
            d->n_pending = 0;
            s++, n--;
        } else if (inc) {
            s++, n--;
        } else {
            memcpy(d->buf + o, REPLACEMENT, 3);
            o += 3;
            d->n_pending = 0;
        }
    }
    size_t i = 0;
    while (i < n) {
        bool inc;
        size_t l = tok_utf8_seq(s + i, n - i, &inc);
        if (l) {
            memcpy(d->buf + o, s + i, l);
            o += l;
            i += l;
        } else if (inc) {
            memcpy(d->pending, s + i, n - i);
            d->n_pending = n - i;
            break;
        } else {
            size_t bad = 1; /* longest prefix that is a valid incomplete sequence */
            while (i + bad < n) {
                bool inc2;
                tok_utf8_seq(s + i, bad + 1, &inc2);
                if (!inc2) break;
                bad++;
            }
            memcpy(d->buf + o, REPLACEMENT, 3);
            o += 3;
            i += bad;
        }
    }
    return o;
}

int snug_detok_push(struct snug_detok *d, snug_token id, const char **out, size_t *out_len) {
    *out = d->buf;
    *out_len = 0;
    size_t len;
    const char *s = snug_tokenizer_token_bytes(d->tok, id, &len);
    if (!s) return SNUG_ERR_INVALID;
    if ((d->flags & SNUG_DETOK_SKIP_CONTROL) &&
        snug_tokenizer_token_type(d->tok, id) == SNUG_TOKEN_CONTROL)
        return SNUG_OK;
    *out_len = feed(d, (const uint8_t *)s, len);
    return SNUG_OK;
}

void snug_detok_flush(struct snug_detok *d, const char **out, size_t *out_len) {
    *out = d->buf;
    *out_len = 0;
    if (d->n_pending) {
        memcpy(d->buf, REPLACEMENT, 3);
        *out_len = 3;
    }
    d->n_pending = 0;
}
