/* toolpolicy.c — a request's tool-call policy and its enforcement (see toolpolicy.h).
 * Read next: submit.c (build_constraint), src/grammar/jschema.c (snug_tools_to_gbnf).
 */
#include "server/toolpolicy.h"

#include "grammar/grammar.h"

#include <stdlib.h>
#include <string.h>

struct snug_tool_policy snug_tool_policy_of(const struct snug_server_req *q) {
    struct snug_tool_policy p = {0};
    if (q->kind != SNUG_REQ_CHAT || q->tool_choice == SNUG_TOOL_NONE) return p;
    p.shown = q->tools;
    p.calls = json_array_size(q->tools) > 0;
    p.forced =
        p.calls && (q->tool_choice == SNUG_TOOL_REQUIRED || q->tool_choice == SNUG_TOOL_NAMED);
    p.named = p.forced && q->tool_choice == SNUG_TOOL_NAMED ? q->tool_name : NULL;
    size_t i;
    const json_t *t;
    json_array_foreach(q->tools, i, t) {
        if (json_is_true(json_object_get(json_object_get(t, "function"), "strict")))
            p.any_strict = true;
    }
    return p;
}

void snug_tool_policy_opening(const struct snug_tool_policy *p, bool in_reasoning,
                              struct snug_sbuf *out) {
    if (!p->forced) return;
    if (in_reasoning) snug_sbuf_puts(out, "\n</think>\n\n");
    snug_sbuf_puts(out, "<tool_call>\n");
    if (p->named) {
        snug_sbuf_puts(out, "<function=");
        snug_sbuf_puts(out, p->named);
        snug_sbuf_puts(out, ">\n");
    }
}

/* snug_tools_to_gbnf over a tools array given as JSON. */
static int tools_gbnf(const json_t *tools, const char *named, const char *lead, bool many,
                      char **out, size_t *len, struct snug_err *err) {
    char *tj = json_dumps(tools, JSON_COMPACT);
    int rc = tj ? snug_tools_to_gbnf(tj, strlen(tj), named, lead, many, out, len, err)
                : snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
    free(tj); /* jansson's allocation */
    return rc;
}

/* The tools with "strict": true on every function whose schema the grammar can express alone
 * (a call's parameters follow the schema); NULL when out of memory. */
static json_t *strict_copy(const json_t *tools) {
    json_t *all = json_deep_copy(tools);
    size_t i;
    json_t *t;
    json_array_foreach(all, i, t) {
        json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn) || json_is_true(json_object_get(fn, "strict"))) continue;
        json_object_set_new(fn, "strict", json_true());
    }
    char *g = NULL;
    struct snug_err e = {0};
    if (!all || tools_gbnf(all, NULL, NULL, false, &g, NULL, &e) == SNUG_OK) {
        snug_free(g);
        return all;
    }
    /* some schema is beyond the grammar: find which, alone, and leave those free */
    json_array_foreach(all, i, t) {
        json_t *fn = json_object_get(t, "function");
        const json_t *orig = json_object_get(json_array_get(tools, i), "function");
        if (!json_is_object(fn) || json_is_true(json_object_get(orig, "strict"))) continue;
        json_t *one = json_pack("[O]", t);
        int rc = one ? tools_gbnf(one, NULL, NULL, false, &g, NULL, &e) : SNUG_ERR_NOMEM;
        json_decref(one);
        snug_free(g);
        g = NULL;
        if (rc != SNUG_OK) json_object_del(fn, "strict");
    }
    return all;
}

int snug_tool_policy_grammar(const struct snug_tool_policy *p, bool other, bool parallel,
                             char **gbnf, size_t *len, const char **trigger, struct snug_err *err) {
    *gbnf = NULL;
    *len = 0;
    *trigger = NULL;
    if (!p->calls) return SNUG_OK;
    if (other && (p->forced || p->any_strict))
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "tool calls (tool_choice required / a named function, or strict "
                            "tools) cannot be combined with 'grammar' or a JSON "
                            "'response_format'");
    if (other) return SNUG_OK; /* auto beside the request's own grammar: names left free */
    json_t *all = strict_copy(p->shown);
    if (!all) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
    int rc;
    if (p->forced) {
        rc = tools_gbnf(all, p->named, NULL, parallel && !p->named, gbnf, len, err);
    } else {
        *trigger = "<tool_call>";
        rc = tools_gbnf(all, NULL, "\n", parallel, gbnf, len, err);
    }
    json_decref(all);
    return rc;
}

int snug_tool_policy_banned(const struct snug_tool_policy *p, const struct snug_tokenizer *tok,
                            snug_token *ids, int cap) {
    if (p->calls || cap < 1) return 0;
    snug_token t = snug_tokenizer_token_id(tok, "<tool_call>");
    if (t < 0) return 0;
    ids[0] = t;
    return 1;
}
