/* jstools.c — the tool-call grammars (snug_tools_to_gbnf): the body of a Qwen <tool_call>
 * block for a request's tools — each function's name, then its parameters in the XML-like
 * <parameter=name> form (string parameters written raw, others as JSON under their schema),
 * or a custom tool's free-form or grammar-defined input.
 * Invariant: a call the grammar admits is one the output parser (src/server/outparse.c) reads
 * back into the same name and arguments, and each argument is valid under its schema.
 * Read next: jschema.c (the schema generator these calls use), src/server/toolpolicy.c.
 */
#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"
#include "grammar/jschema_impl.h"

#include "core/core.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Does the schema take a JSON string as its value (so Qwen's tool-call format writes it raw)?
 * The rule of the output parser (src/server/outparse.h): type "string" or a list holding it,
 * an anyOf/oneOf alternative that does, or an all-string enum without a type. */
static bool admits_string(json_t *s) {
    json_t *t = json_object_get(s, "type");
    if (json_is_string(t)) return !strcmp(json_string_value(t), "string");
    if (json_is_array(t)) {
        size_t i;
        json_t *x;
        json_array_foreach(t, i, x) if (json_is_string(x) &&
                                        !strcmp(json_string_value(x), "string")) return true;
        return false;
    }
    const char *alts[2] = {"anyOf", "oneOf"};
    for (int k = 0; k < 2; k++) {
        json_t *a = json_object_get(s, alts[k]);
        size_t i;
        json_t *x;
        json_array_foreach(a, i, x) if (json_is_object(x) && admits_string(x)) return true;
    }
    json_t *en = json_object_get(s, "enum");
    if (json_is_array(en) && json_array_size(en) && !t) {
        size_t i;
        json_t *x;
        json_array_foreach(en, i, x) if (!json_is_string(x)) return false;
        return true;
    }
    return false;
}

/* The value of one tool parameter: raw text for strings, compact JSON otherwise. */
static int gen_param_value(struct js_gen *c, json_t *s) {
    if (!json_is_object(s)) return jg_gen(c, s);
    if (!admits_string(s)) return jg_gen(c, s);
    json_t *t = json_object_get(s, "type");
    json_t *en = json_object_get(s, "enum");
    if (json_is_array(en) && json_array_size(en)) { /* raw enum values */
        int id = jg_rule_begin(c);
        size_t i;
        json_t *x;
        json_array_foreach(en, i, x) {
            if (!json_is_string(x)) continue;
            if (i) snug_sbuf_puts(&c->rules, " | ");
            jg_blit(&c->rules, json_string_value(x), json_string_length(x));
        }
        jg_rule_end(c);
        return id;
    }
    if (json_is_string(t)) return jg_gen_string_as(c, s, true);
    int id = jg_rule_begin(c); /* a union admitting any string: any raw text */
    snug_sbuf_puts(&c->rules, "rawchar*");
    jg_rule_end(c);
    return id;
}

/* One function's parameters in Qwen's XML form: "<parameter=K>\nV\n</parameter>\n" for the
 * schema's properties in declared order, optional ones skippable; a non-strict tool (or one
 * without properties) takes any parameters. */
static int gen_tool_params(struct js_gen *c, json_t *params, bool strict) {
    json_t *props = json_is_object(params) ? json_object_get(params, "properties") : NULL;
    if (!strict || !json_is_object(props)) {
        int id = jg_rule_begin(c);
        snug_sbuf_puts(
            &c->rules,
            "(\"<parameter=\" [a-zA-Z0-9_.-]{1,64} \">\\n\" rawchar* \"\\n</parameter>\\n\")*");
        jg_rule_end(c);
        return id;
    }
    /* validate the object keywords as gen_object would (additionalProperties is implied false) */
    json_t *req = json_object_get(params, "required");
    size_t n = json_object_size(props);
    int *val = snug_malloc((n ? n : 1) * sizeof *val);
    if (!val) return jg_invalid(c, "parameters", "out of memory");
    const char *key;
    json_t *sub;
    size_t i = 0;
    json_object_foreach(props, key, sub) {
        size_t old = jg_path_push(c, "properties");
        size_t old2 = jg_path_push(c, key);
        val[i] = gen_param_value(c, sub);
        jg_path_pop(c, old2);
        jg_path_pop(c, old);
        if (val[i] < 0) {
            snug_free(val);
            return -1;
        }
        i++;
    }
    int id = jg_rule_begin(c);
    i = 0;
    json_object_foreach(props, key, sub) {
        bool is_req = false;
        size_t k;
        json_t *r;
        json_array_foreach(req, k, r) if (json_is_string(r) && !strcmp(json_string_value(r), key))
            is_req = true;
        snug_sbuf_puts(&c->rules, is_req ? " (" : " (");
        snug_sbuf_puts(&c->rules, "\"<parameter=");
        jg_blit_body(&c->rules, key, strlen(key)); /* the key inside the literal */
        snug_sbuf_printf(&c->rules, ">\\n\" r%d \"\\n</parameter>\\n\")%s", val[i],
                         is_req ? "" : "?");
        i++;
    }
    if (!n) snug_sbuf_puts(&c->rules, "\"\"");
    jg_rule_end(c);
    snug_free(val);
    return id;
}

/* A custom tool's input (function.format: {type: "grammar", syntax, definition}, set by the
 * Responses front end) as its one raw parameter `input`: the format's grammar, its names
 * prefixed with "ct<i>-" so that they stay apart from the other rules. */
static int gen_custom_input(struct js_gen *c, json_t *fmt, size_t i) {
    json_t *def = json_object_get(fmt, "definition");
    const char *syntax = json_string_value(json_object_get(fmt, "syntax"));
    if (!json_is_string(def)) return jg_invalid(c, "format", "needs a 'definition' string");
    char prefix[32];
    snprintf(prefix, sizeof prefix, "ct%zu-", i);
    char *g = NULL;
    int rc = snug_tool_format_to_gbnf(syntax, json_string_value(def), json_string_length(def),
                                      prefix, &g, NULL, c->err);
    if (rc != SNUG_OK) {
        c->status = rc;
        return -1;
    }
    snug_sbuf_puts(&c->rules, g);
    snug_free(g);
    int id = jg_rule_begin(c);
    snug_sbuf_printf(&c->rules, "\"<parameter=input>\\n\" %s-root \"\\n</parameter>\\n\"", prefix);
    jg_rule_end(c);
    return id;
}

/* A schema can refer to itself before any JSON text ({"$ref": "#"} at its root, two $defs that
 * only refer to each other, an anyOf whose branch refers back): its grammar is then
 * left-recursive, which no sampler can walk. The generated text is parsed once here so such a
 * schema is refused with its cause instead of handing the caller a grammar that fails later; so
 * is one whose every document would be infinite (its root's shortest sentence is unbounded). A
 * grammar over the parser's size budget is left for the caller to refuse. */

int snug_tools_to_gbnf(const char *tools_json, size_t len, const char *named, const char *lead,
                       bool many, char **out, size_t *out_len, struct snug_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    int pre = snug_json_schema_precheck(tools_json, len, "tools", err);
    if (pre) return pre;
    json_error_t je;
    json_t *tools = json_loadb(tools_json, len, 0, &je);
    if (!json_is_array(tools)) {
        json_decref(tools);
        return snug_err_set(err, SNUG_ERR_INVALID, "tools: not a JSON array");
    }
    struct js_gen c = {.err = err, .path = "#"};
    size_t n = json_array_size(tools), i;
    int *fn = snug_malloc((n ? n : 1) * sizeof *fn);
    int rc = fn ? SNUG_OK : snug_err_set(err, SNUG_ERR_NOMEM, "tools: out of memory");
    int named_fn = -1, n_fn = 0;
    for (i = 0; i < n && rc == SNUG_OK; i++) {
        json_t *f = json_object_get(json_array_get(tools, i), "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name) continue;
        json_t *params = json_object_get(f, "parameters");
        bool strict = json_is_true(json_object_get(f, "strict"));
        c.root = params; /* $ref inside a tool's parameters resolve against them */
        c.n_refs = 0;
        snprintf(c.path, sizeof c.path, "#/tools/%zu/function/parameters", i);
        json_t *fmt = json_object_get(f, "format");
        const char *ft = json_string_value(json_object_get(fmt, "type"));
        int p = ft && !strcmp(ft, "grammar") ? gen_custom_input(&c, fmt, i)
                                             : gen_tool_params(&c, params, strict);
        if (p < 0) {
            rc = c.status ? c.status : SNUG_ERR_INVALID;
            break;
        }
        /* fn_i ::= NAME ">\n" params "</function>\n</tool_call>" */
        fn[n_fn] = jg_rule_begin(&c);
        size_t nl = strlen(name);
        jg_blit(&c.rules, name, nl);
        snug_sbuf_printf(&c.rules, " \">\\n\" r%d \"</function>\\n</tool_call>\"", p);
        jg_rule_end(&c);
        if (named && !strcmp(named, name)) {
            named_fn = p;
            /* named: the prompt already holds "<function=NAME>\n" */
            int k = jg_rule_begin(&c);
            snug_sbuf_printf(&c.rules, "r%d \"</function>\\n</tool_call>\"", p);
            jg_rule_end(&c);
            named_fn = k;
        }
        n_fn++;
    }
    if (rc == SNUG_OK && (!n_fn || (named && named_fn < 0)))
        rc = snug_err_set(err, SNUG_ERR_INVALID, "tools: %s",
                          named ? "the named function is not among the tools" : "no functions");
    if (rc == SNUG_OK) {
        int any = jg_rule_begin(&c);
        for (int k = 0; k < n_fn; k++) snug_sbuf_printf(&c.rules, "%sr%d", k ? " | " : "", fn[k]);
        jg_rule_end(&c);
        struct snug_sbuf root = {0};
        if (lead && *lead) jg_blit(&root, lead, strlen(lead)), snug_sbuf_puts(&root, " ");
        if (named)
            snug_sbuf_printf(&root, "r%d", named_fn);
        else
            snug_sbuf_printf(&root, "\"<function=\" r%d", any);
        if (many) snug_sbuf_printf(&root, " (\"\\n<tool_call>\\n<function=\" r%d)*", any);
        rc = root.oom ? snug_err_set(err, SNUG_ERR_NOMEM, "tools: out of memory")
                      : jg_finish(&c, root.data, out, out_len, err);
        snug_free(root.data);
        c.rules.data = NULL; /* finish freed it */
    }
    snug_free(c.rules.data);
    snug_free(fn);
    jg_ctx_free(&c);
    json_decref(tools);
    return rc;
}