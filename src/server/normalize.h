/* normalize.h — agent-client prompt normalisation: volatile spans that some clients put into
 * every request (and that change on every request) are removed from the messages before the
 * prompt is rendered and tokenized, so the prefix cache sees the same tokens turn after turn.
 *
 * The list (SNUG_NORM_RULES in normalize.c; docs/prefix-cache.md repeats it):
 *   claude-code-billing: Claude Code (>= 2.1) starts its system prompt with a line
 *     "x-anthropic-billing-header: cc_version=<v>.<3 hex>; cc_entrypoint=<e>; cch=<5 hex>;"
 *     whose cch value changes on every request (public reports: anthropics/claude-code issue
 *     68900; vllm-mlx pull 277 and sglang pull 29169 strip the same line). The whole line is
 *     removed (with its line end) from system messages; it carries nothing for the model.
 * A rule only ever touches system messages, only whole lines that start with its prefix, and
 * only when the server runs with normalisation on (default; --no-prompt-normalize turns it
 * off).
 * Owns: nothing; edits the request's JSON in place.
 * Read next: submit.c (the caller, before snug_chat_render), normalize.c.
 */
#ifndef SNUG_SERVER_NORMALIZE_H
#define SNUG_SERVER_NORMALIZE_H

#include "snug.h"

#include <jansson.h>
#include <stddef.h>

struct snug_norm_rule {
    const char *name;        /* for logs and docs */
    const char *line_prefix; /* a system-message line starting with this is removed */
};

extern const struct snug_norm_rule SNUG_NORM_RULES[];
extern const size_t SNUG_NORM_N_RULES;

/* Apply every rule to the system messages of `messages` (a chat request's array; string or
 * text-part content). Returns the number of lines removed; SNUG_ERR_NOMEM (negative) when a
 * replacement string cannot be made. */
int snug_prompt_normalize(json_t *messages);

/* One text: remove the rule lines from s[0..n) in place; returns the new length. */
size_t snug_norm_text(char *s, size_t n, int *n_removed);

#endif /* SNUG_SERVER_NORMALIZE_H */
