/* think.h — bounded thinking: a per-request guard on the model's reasoning block that closes it
 * itself (forces the tokens of "\n</think>\n\n", the separator the Qwen3.5/3.6 template writes
 * after reasoning: docs/chat-format.md) when the block reaches a token budget, or when an n-token
 * span has repeated K times (a reasoning loop). It plugs into the engine as a
 * snug_engine_constraint (force + accept) and counts reasoning tokens for usage.
 * Owns: its n-gram table (snug_malloc'd at init, sized from the request's limits, so the token
 * path allocates nothing). Invariant: once the block is closed (by the model, or by the forced
 * tokens) nothing more is forced; the forced tokens are exactly the template's separator.
 * Read next: engine.h (where force/accept are called), submit.c (who attaches it).
 */
#ifndef SNUG_SERVER_THINK_H
#define SNUG_SERVER_THINK_H

#include "engine/engine.h"
#include "snug.h"

#include <stdbool.h>
#include <stdint.h>

struct snug_tokenizer;

/* Why the reasoning block ended. */
enum snug_think_end {
    SNUG_THINK_OPEN = 0,   /* still open (or there was none) */
    SNUG_THINK_MODEL = 1,  /* the model wrote </think> (or began a tool call) */
    SNUG_THINK_BUDGET = 2, /* closed by the server at the token budget */
    SNUG_THINK_REPEAT = 3, /* closed by the server: a span repeated repeat_k times */
};

struct snug_think_opts {
    int32_t budget;   /* reasoning tokens allowed; < 0 = unbounded; 0 = close at once */
    int32_t repeat_n; /* repetition guard: span length in tokens; 0 = guard off */
    int32_t repeat_k; /* ... closed when one span has occurred this many times (>= 2) */
};

#define SNUG_THINK_MAX_CLOSE 8

struct snug_think {
    struct snug_think_opts o;
    bool in_reasoning, forcing;
    enum snug_think_end end;
    int32_t n_reasoning; /* reasoning tokens generated (forced ones included) */
    snug_token think_end, tool_call;
    snug_token close[SNUG_THINK_MAX_CLOSE];
    int32_t n_close, i_close;
    /* repetition guard: the last repeat_n tokens (ring) and a table of span hash -> count */
    snug_token *ring;
    int32_t ring_pos;
    uint64_t *keys;
    uint32_t *counts;
    uint32_t cap, used; /* cap: power of two */
    struct snug_engine_constraint hook;
};

/* Parse "N,K" (the --reasoning-repeat-guard flag): true on success. */
bool snug_think_parse_guard(const char *s, int32_t *n, int32_t *k);

/* Set up for one request. `in_reasoning`: the prompt left the model inside <think>.
 * `max_tokens`: the most tokens the request can generate (sizes the n-gram table). */
int snug_think_init(struct snug_think *t, const struct snug_tokenizer *tok,
                    const struct snug_think_opts *o, bool in_reasoning, int32_t max_tokens,
                    struct snug_err *err);
void snug_think_free(struct snug_think *t);

/* The engine hook (t->hook): accept always; force only when a budget or the guard is on. */
const struct snug_engine_constraint *snug_think_constraint(struct snug_think *t);

/* "budget", "repetition" or NULL when the server did not close the block. */
const char *snug_think_end_name(const struct snug_think *t);

#endif
