/* stopfilter.c — stop strings over text that arrives in pieces (see stopfilter.h).
 * Read next: reply_engine.c.
 */
#define _GNU_SOURCE
#include "server/stopfilter.h"

#include <string.h>

/* Length of the longest suffix of s[0..n) that is a proper prefix of some stop string. */
static size_t stop_prefix_tail(const struct snug_stop_filter *f, const char *s, size_t n) {
    size_t best = 0;
    for (int i = 0; i < f->n_stop; i++) {
        size_t sl = strlen(f->stop[i]);
        for (size_t k = sl - 1 < n ? sl - 1 : n; k > best; k--)
            if (!memcmp(s + n - k, f->stop[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

bool snug_stop_feed(struct snug_stop_filter *f, const char *text, size_t len, snug_stop_sink sink,
                    void *user) {
    if (f->stopped) return true;
    if (f->n_stop == 0) {
        if (len) sink(user, text, len);
        return false;
    }
    snug_sbuf_append(&f->hold, text, len);
    const char *h = f->hold.data ? f->hold.data : "";
    size_t hn = f->hold.len, cut = hn;
    bool stop = false;
    for (int i = 0; i < f->n_stop; i++) {
        const char *p = memmem(h, hn, f->stop[i], strlen(f->stop[i]));
        if (p && (size_t)(p - h) < cut) cut = (size_t)(p - h), stop = true, f->matched = i;
    }
    if (stop) {
        if (cut) sink(user, h, cut);
        snug_sbuf_reset(&f->hold);
        f->stopped = true;
        return true;
    }
    size_t keep = stop_prefix_tail(f, h, hn);
    if (hn - keep) sink(user, h, hn - keep);
    if (f->hold.data) memmove(f->hold.data, h + hn - keep, keep);
    f->hold.len = keep;
    return false;
}

void snug_stop_flush(struct snug_stop_filter *f, snug_stop_sink sink, void *user) {
    if (!f->stopped && f->hold.len) sink(user, f->hold.data, f->hold.len);
    snug_sbuf_reset(&f->hold);
}

void snug_stop_free(struct snug_stop_filter *f) {
    snug_sbuf_free(&f->hold);
}
