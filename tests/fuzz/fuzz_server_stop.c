/* fuzz_server_stop.c — libFuzzer target for stop strings over text that arrives in pieces
 * (stopfilter.c, used by reply_engine.c on every generated token): input = a byte n (0..4 stop
 * strings), n NUL-terminated stop strings, then the text; piece lengths come from the text's
 * own bytes. The released text must equal what a second, obvious implementation gives (after
 * each piece, search all text received so far; at the first piece where a stop string occurs,
 * cut before its leftmost occurrence), and the feed must say "stopped" exactly when one occurs.
 * Seeds: tests/fuzz/corpus-server-stop/. Read next: src/server/stopfilter.h. */
#define _GNU_SOURCE
#include "core/core.h"
#include "server/stopfilter.h"

#include <stdint.h>
#include <string.h>

static void sink(void *user, const char *s, size_t n) {
    snug_sbuf_append(user, s, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int n_stop = data[0] % 5;
    size_t off = 1;
    const char *stop[4];
    int k = 0;
    for (int i = 0; i < n_stop; i++) {
        const char *s = (const char *)data + off;
        const char *z = memchr(s, 0, size - off);
        if (!z) return 0;
        off = (size_t)(z - (const char *)data) + 1;
        if (z > s) stop[k++] = s; /* empty stop strings are dropped by the request parser */
    }
    const char *text = (const char *)data + off;
    size_t len = size - off;
    /* the reference: after each piece, look for stop strings in all the text received so far
     * (text[0..end)); at the first piece where one occurs, cut at the leftmost occurrence */
    size_t cut = len, end = 0;
    while (end < len && cut == len) {
        size_t n = 1 + ((unsigned char)text[end] % 7);
        end += n > len - end ? len - end : n;
        for (int i = 0; i < k; i++) {
            const char *p = memmem(text, end, stop[i], strlen(stop[i]));
            if (p && (size_t)(p - text) < cut) cut = (size_t)(p - text);
        }
    }
    bool want_stop = cut < len; /* an occurrence of a non-empty string starts before the end */
    struct snug_stop_filter f = {.stop = stop, .n_stop = k};
    struct snug_sbuf out = {0};
    bool stopped = false;
    for (size_t at = 0; at < len;) {
        size_t n = 1 + ((unsigned char)text[at] % 7);
        if (n > len - at) n = len - at;
        bool st = snug_stop_feed(&f, text + at, n, sink, &out);
        if (stopped && !st) __builtin_trap();
        stopped = st;
        at += n;
    }
    snug_stop_flush(&f, sink, &out);
    if (stopped != want_stop) __builtin_trap();
    if (out.oom || out.len != cut || (cut && memcmp(out.data, text, cut))) __builtin_trap();
    snug_sbuf_free(&out);
    snug_stop_free(&f);
    return 0;
}
