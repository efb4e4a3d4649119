/* prefix_sched.c — checkpoint positions and chunk ends of a prefill (see prefix_sched.h).
 * Boundaries are found by a binary search over msg_starts plus arithmetic on `every`, so each
 * call is O(log messages). */
#include "prefix/prefix_sched.h"

/* The largest message start <= pos (lo) and the smallest > pos (hi, INT32_MAX if none). */
static void msg_around(const struct snug_prefix_sched *s, int32_t pos, int32_t *lo, int32_t *hi) {
    int32_t a = 0, b = s->n_msg_starts; /* first index with start > pos */
    while (a < b) {
        int32_t m = a + (b - a) / 2;
        if (s->msg_starts[m] <= pos)
            a = m + 1;
        else
            b = m;
    }
    *lo = a > 0 ? s->msg_starts[a - 1] : 0;
    *hi = a < s->n_msg_starts ? s->msg_starts[a] : INT32_MAX;
}

int32_t snug_prefix_chunk_end(const struct snug_prefix_sched *s, int32_t pos) {
    int32_t n_chunk = s->n_chunk > 0 ? s->n_chunk : 1;
    int32_t lo, hi;
    msg_around(s, pos, &lo, &hi);
    if (lo < 0) lo = 0;
    if (s->every > 0) {
        int32_t e_lo = pos / s->every * s->every;
        int64_t e_hi = (int64_t)e_lo + s->every;
        if (e_lo > lo) lo = e_lo;
        if (e_hi < hi) hi = (int32_t)e_hi;
    }
    int32_t marks[3] = {s->system_end, s->last_end, s->user_end};
    for (int i = 0; i < 3; i++) {
        if (marks[i] <= 0) continue;
        if (marks[i] <= pos && marks[i] > lo) lo = marks[i];
        if (marks[i] > pos && marks[i] < hi) hi = marks[i];
    }
    if (hi > s->n_prompt) hi = s->n_prompt;
    /* the chunk grid from the last boundary lo */
    int64_t end = (int64_t)lo + ((int64_t)(pos - lo) / n_chunk + 1) * n_chunk;
    if (end > hi) end = hi;
    if (end <= pos) end = pos + 1;
    return (int32_t)end;
}

bool snug_prefix_checkpoint_at(const struct snug_prefix_sched *s, int32_t pos) {
    if (pos <= 0 || pos >= s->n_prompt) return false;
    if (pos == s->system_end || pos == s->last_end || pos == s->user_end) return true;
    return s->every > 0 && pos % s->every == 0;
}

int32_t snug_prefix_checkpoints(const struct snug_prefix_sched *s, int32_t from, int32_t *out,
                                int32_t cap) {
    int32_t n = 0;
    int32_t cand[3] = {s->system_end, s->last_end, s->user_end};
    int32_t next_every = s->every > 0 ? (from / s->every + 1) * s->every : INT32_MAX;
    int32_t pos = from;
    for (;;) {
        /* the smallest candidate > pos */
        int32_t best = next_every;
        for (int i = 0; i < 3; i++)
            if (cand[i] > pos && cand[i] < best) best = cand[i];
        if (best >= s->n_prompt || best == INT32_MAX) break;
        if (n < cap) out[n] = best;
        n++;
        pos = best;
        if (s->every > 0 && best == next_every) {
            if (next_every > INT32_MAX - s->every)
                next_every = INT32_MAX;
            else
                next_every += s->every;
        }
    }
    return n;
}
