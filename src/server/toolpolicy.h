/* toolpolicy.h — which tool calls a chat request allows, decided once from its `tools` and
 * `tool_choice`, and what enforces it. Every API reaches it: /v1/messages and /v1/responses are
 * read into the same request first (api_messages.c: tool_choice {"type": "none" | "any" |
 * "tool"}; api_responses.c: "none" | "required" | {"type": "function" | "custom"}), so the
 * three share these rules:
 *   - no tools, or tool_choice "none": no call. The tools are left out of the prompt, the
 *     "<tool_call>" token is banned in the request's constraint (beside any grammar or
 *     response_format it has), and the output parser keeps call-shaped text as content
 *     (snug_outparse_no_calls), so no answer holds a call the request did not allow;
 *   - "required" / a named function: the assistant turn is begun with "<tool_call>\n" (and
 *     "<function=NAME>\n"), and a grammar takes the call from there: a declared name (the named
 *     one), its parameters by its JSON schema (every tool's, strict or not; a schema the
 *     grammar cannot express leaves that tool's parameters free unless the tool is strict,
 *     then it is a 400);
 *   - "auto" with tools: once the model writes "<tool_call>" the same grammar holds the call
 *     (a declared name, parameters by the schema); not combined with a request's own grammar
 *     or JSON response_format (there the names and parameters are left free, and strict tools
 *     are a 400).
 * Owns nothing (pointers borrow the request's JSON). Read next: submit.c (build_constraint,
 * where the grammar and the ban join the request's constraint), outparse.h.
 */
#ifndef SNUG_SERVER_TOOLPOLICY_H
#define SNUG_SERVER_TOOLPOLICY_H

#include "core/core.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>

struct snug_tool_policy {
    const json_t *shown; /* the tools the prompt lists (NULL: none) */
    bool calls;          /* the answer may hold tool calls */
    bool forced;         /* required / named: the answer is a call */
    const char *named;   /* the function a named tool_choice forces, else NULL */
    bool any_strict;     /* some tool has "strict": true */
};

/* The policy of a parsed chat request (completions: no calls). */
struct snug_tool_policy snug_tool_policy_of(const struct snug_server_req *q);

/* The text the assistant turn is begun with when a call is forced ("" otherwise), appended to
 * out: "\n</think>\n\n" first when the prompt ends inside reasoning, then "<tool_call>\n" and,
 * for a named function, "<function=NAME>\n". */
void snug_tool_policy_opening(const struct snug_tool_policy *p, bool in_reasoning,
                              struct snug_sbuf *out);

/* The grammar for the calls (*gbnf snug_malloc'd, or NULL when calls need none) and the bytes
 * after which it starts (*trigger: NULL = at once, i.e. after the forced opening). `other`: the
 * request has its own grammar or JSON response_format. Errors: SNUG_ERR_INVALID with a message
 * naming the conflict (a forced call or strict tools beside `other`), or the schema's error. */
int snug_tool_policy_grammar(const struct snug_tool_policy *p, bool other, bool parallel,
                             char **gbnf, size_t *len, const char **trigger, struct snug_err *err);

/* The tokens no answer may sample under the policy: "<tool_call>" when calls are not allowed
 * (and the vocabulary has it as one token). Writes at most cap ids; returns their count. */
int snug_tool_policy_banned(const struct snug_tool_policy *p, const struct snug_tokenizer *tok,
                            snug_token *ids, int cap);

#endif /* SNUG_SERVER_TOOLPOLICY_H */
