/* text.c — the growable text buffer the grammar converters write GBNF into (jschema.c: JSON
 * Schema → GBNF; lark.c: Lark / regex → GBNF). Owns one snug_malloc'd block per buffer,
 * always NUL-terminated; invariant: after a failed allocation `oom` is set and every later
 * write is a no-op, so a converter checks once at the end. Read next: grammar_impl.h.
 */
#include "grammar/grammar_impl.h"

#include "core/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void gr_text_put(struct gr_text *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        char *d = snug_malloc(cap);
        if (!d) {
            b->oom = true;
            return;
        }
        if (b->n) memcpy(d, b->d, b->n);
        snug_free(b->d);
        b->d = d;
        b->cap = cap;
    }
    memcpy(b->d + b->n, s, n);
    b->n += n;
    b->d[b->n] = 0;
}

void gr_text_puts(struct gr_text *b, const char *s) {
    gr_text_put(b, s, strlen(s));
}

void gr_text_printf(struct gr_text *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) gr_text_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}
