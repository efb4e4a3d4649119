/* sbuf.c — struct snug_sbuf, the growable byte string every text writer uses (the server's
 * JSON and SSE, the chat renderer, the grammar converters). Owns one snug_malloc'd block per
 * buffer; invariant: data[len] == 0 whenever data is set, and after a failed allocation oom
 * stays set and appends do nothing. Read next: core.h.
 */
#include "core/core.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Make room for n more bytes plus a NUL; sets oom (and returns false) when it cannot. */
static bool sbuf_reserve(struct snug_sbuf *b, size_t n) {
    if (b->oom) return false;
    if (b->len + n + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + n + 1) {
        if (cap > SIZE_MAX / 2) {
            b->oom = true;
            return false;
        }
        cap *= 2;
    }
    char *d = snug_malloc(cap);
    if (!d) {
        b->oom = true;
        return false;
    }
    if (b->len) memcpy(d, b->data, b->len);
    snug_free(b->data);
    b->data = d;
    b->cap = cap;
    return true;
}

void snug_sbuf_append(struct snug_sbuf *b, const char *s, size_t n) {
    if (!sbuf_reserve(b, n)) return;
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void snug_sbuf_puts(struct snug_sbuf *b, const char *s) {
    snug_sbuf_append(b, s, strlen(s));
}

void snug_sbuf_putc(struct snug_sbuf *b, char c) {
    snug_sbuf_append(b, &c, 1);
}

bool snug_sbuf_reserve(struct snug_sbuf *b, size_t n) {
    return sbuf_reserve(b, n);
}

void snug_sbuf_reset(struct snug_sbuf *b) {
    b->len = 0;
    if (b->data) b->data[0] = 0;
}

void snug_sbuf_free(struct snug_sbuf *b) {
    if (!b) return;
    snug_free(b->data);
    *b = (struct snug_sbuf){0};
}

char *snug_sbuf_take(struct snug_sbuf *b, size_t *out_len) {
    if (sbuf_reserve(b, 0)) b->data[b->len] = 0;
    char *d = b->oom ? NULL : b->data;
    if (b->oom) snug_free(b->data);
    if (out_len) *out_len = d ? b->len : 0;
    *b = (struct snug_sbuf){0};
    return d;
}

void snug_sbuf_printf(struct snug_sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n <= 0 || !sbuf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}
