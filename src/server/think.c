/* think.c — bounded thinking (see think.h): the reasoning budget, the repetition guard and the
 * forced closing separator. Called on the engine thread through the constraint hook.
 * Read next: submit.c (where a request's think guard is made and reported).
 */
#include "server/think.h"

#include "core/core.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the template writes between the reasoning and the answer: "<think>\n" R "\n</think>\n\n". */
static const char CLOSE_TEXT[] = "\n</think>\n\n";

bool snug_think_parse_guard(const char *s, int32_t *n, int32_t *k) {
    char *end;
    long a = strtol(s, &end, 10);
    if (end == s || *end != ',') return false;
    const char *p = end + 1;
    long b = strtol(p, &end, 10);
    if (end == p || *end) return false;
    if (a < 1 || a > 4096 || b < 2 || b > 100000) return false;
    *n = (int32_t)a;
    *k = (int32_t)b;
    return true;
}

static snug_token think_force(void *user);
static void think_accept(void *user, snug_token id);

int snug_think_init(struct snug_think *t, const struct snug_tokenizer *tok,
                    const struct snug_think_opts *o, bool in_reasoning, int32_t max_tokens,
                    struct snug_err *err) {
    memset(t, 0, sizeof *t);
    t->o = *o;
    t->in_reasoning = in_reasoning;
    t->think_end = snug_tokenizer_token_id(tok, "</think>");
    t->tool_call = snug_tokenizer_token_id(tok, "<tool_call>");
    size_t got = 0;
    int rc = snug_tokenizer_encode(tok, CLOSE_TEXT, sizeof CLOSE_TEXT - 1, true, t->close,
                                   SNUG_THINK_MAX_CLOSE, &got, err);
    if (rc) return rc;
    t->n_close = (int32_t)got;
    if (t->o.repeat_n > 0 && in_reasoning) {
        uint64_t want = (uint64_t)(max_tokens > 0 ? max_tokens : 4096) * 2;
        if (t->o.budget >= 0 && (uint64_t)t->o.budget * 2 < want) want = (uint64_t)t->o.budget * 2;
        uint32_t cap = 64;
        while (cap < want && cap < (1u << 20)) cap <<= 1;
        t->cap = cap;
        t->ring = snug_malloc((size_t)t->o.repeat_n * sizeof *t->ring);
        t->keys = snug_calloc(cap, sizeof *t->keys);
        t->counts = snug_calloc(cap, sizeof *t->counts);
        if (!t->ring || !t->keys || !t->counts) {
            snug_think_free(t);
            return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory for the repetition guard");
        }
    }
    t->hook.user = t;
    t->hook.accept = think_accept;
    if (in_reasoning && (t->o.budget >= 0 || t->o.repeat_n > 0)) t->hook.force = think_force;
    return SNUG_OK;
}

void snug_think_free(struct snug_think *t) {
    snug_free(t->ring);
    snug_free(t->keys);
    snug_free(t->counts);
    t->ring = NULL;
    t->keys = NULL;
    t->counts = NULL;
}

const struct snug_engine_constraint *snug_think_constraint(struct snug_think *t) {
    return &t->hook;
}

const char *snug_think_end_name(const struct snug_think *t) {
    return t->end == SNUG_THINK_BUDGET   ? "budget"
           : t->end == SNUG_THINK_REPEAT ? "repetition"
                                         : NULL;
}

static void start_closing(struct snug_think *t, enum snug_think_end why) {
    t->forcing = true;
    t->i_close = 0;
    t->end = why;
}

static snug_token think_force(void *user) {
    struct snug_think *t = user;
    if (t->forcing) return t->i_close < t->n_close ? t->close[t->i_close] : -1;
    if (!t->in_reasoning) return -1;
    if (t->o.budget >= 0 && t->n_reasoning >= t->o.budget) {
        start_closing(t, SNUG_THINK_BUDGET);
        return t->close[0];
    }
    return -1;
}

/* FNV-1a over the span's token ids, never 0 (0 marks an empty table entry). */
static uint64_t span_hash(const struct snug_think *t) {
    uint64_t h = 1469598103934665603ull;
    int32_t n = t->o.repeat_n;
    for (int32_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)t->ring[(t->ring_pos + i) % n];
        for (int b = 0; b < 4; b++) h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
    }
    return h ? h : 1;
}

/* Count the span ending at this token; true when it reached repeat_k. */
static bool guard_push(struct snug_think *t, snug_token id) {
    int32_t n = t->o.repeat_n;
    t->ring[t->ring_pos] = id;
    t->ring_pos = (t->ring_pos + 1) % n;
    if (t->n_reasoning < n) return false; /* the ring is not full yet */
    uint64_t h = span_hash(t);
    uint32_t mask = t->cap - 1;
    for (uint32_t i = (uint32_t)h & mask, probes = 0; probes < t->cap;
         i = (i + 1) & mask, probes++) {
        if (t->keys[i] == h) return ++t->counts[i] >= (uint32_t)t->o.repeat_k;
        if (t->keys[i] == 0) {
            if (t->used >= t->cap - t->cap / 4) return false; /* full: count known spans only */
            t->keys[i] = h;
            t->counts[i] = 1;
            t->used++;
            return t->o.repeat_k <= 1;
        }
    }
    return false;
}

static void think_accept(void *user, snug_token id) {
    struct snug_think *t = user;
    if (t->forcing && t->i_close < t->n_close && id == t->close[t->i_close]) t->i_close++;
    if (!t->in_reasoning) return;
    if (id == t->think_end || id == t->tool_call) {
        t->in_reasoning = false;
        if (t->end == SNUG_THINK_OPEN) t->end = SNUG_THINK_MODEL;
        return;
    }
    t->n_reasoning++;
    if (t->keys && !t->forcing && guard_push(t, id)) start_closing(t, SNUG_THINK_REPEAT);
}
