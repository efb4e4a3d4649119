/* stopfilter.h — stop strings applied to generated text that arrives in pieces (tokens): text
 * that cannot begin a stop string is released at once, a tail that could is held back until
 * the next piece decides, and everything from the first match on is dropped.
 * Owns: the held-back bytes (a snug_sbuf the caller may reserve so feeding never allocates).
 * Invariant: the released text, concatenated, is the input up to the first piece after which a
 * stop string occurs in the text received so far, cut before the leftmost such occurrence (the
 * whole input when none occurs). Splits matter only when stop strings overlap ("b" completes
 * inside "abc": the one complete first wins, as generation would stop there).
 * Read next: reply_engine.c (the user: engine callbacks), tests/fuzz/fuzz_server_stop.c.
 */
#ifndef SNUG_SERVER_STOPFILTER_H
#define SNUG_SERVER_STOPFILTER_H

#include "server/schema.h"

#include <stdbool.h>
#include <stddef.h>

typedef void (*snug_stop_sink)(void *user, const char *text, size_t len);

struct snug_stop_filter {
    const char *const *stop; /* borrowed, non-empty NUL-terminated strings */
    int n_stop;
    struct snug_sbuf hold;
    bool stopped;
    int matched; /* once stopped: which stop string (index into stop[]) */
};

/* Feed one piece; released text goes to sink. Returns true once a stop string has matched
 * (then and on every later call, which release nothing). */
bool snug_stop_feed(struct snug_stop_filter *f, const char *text, size_t len, snug_stop_sink sink,
                    void *user);
/* End of generation: release what is held back (nothing after a match). */
void snug_stop_flush(struct snug_stop_filter *f, snug_stop_sink sink, void *user);
void snug_stop_free(struct snug_stop_filter *f);

#endif
