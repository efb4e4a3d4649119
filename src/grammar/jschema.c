/* jschema.c — JSON Schema → GBNF text (then compiled by gbnf.c like any grammar).
 *
 * Owns: the translation (keyword meanings from the JSON Schema 2020-12 core and validation
 * specifications, json-schema.org). The output is compact JSON with at most one optional space
 * after ',' and ':' (a small model cannot pad forever), numbers of at most 16 integer and 16
 * fraction digits, and object properties in the schema's declared order; optional properties may
 * be left out. Every schema keyword is either translated, listed as an annotation (ignored on
 * purpose), or rejected: SNUG_ERR_UNSUPPORTED naming the keyword and its JSON path, so a client
 * never gets silently unconstrained output.
 * Invariant: each generated rule is written once; $ref targets get their rule name before their
 * body is generated, so recursive schemas terminate.
 * Read next: regex.c (`pattern`), gbnf.c.
 */
#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"

#include "core/core.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The inside of a GBNF string literal spelling the bytes s[0..n): quotes and backslashes
 * escaped, control bytes as \xNN (a raw newline would end the rule). */
static void blit_body(struct snug_sbuf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[3] = {'\\', (char)c, 0};
            snug_sbuf_puts(b, e);
        } else if (c < 0x20 || c == 0x7F) {
            snug_sbuf_printf(b, "\\x%02X", c);
        } else {
            snug_sbuf_append(b, (const char *)&c, 1);
        }
    }
}

/* A GBNF string literal spelling the bytes s[0..n). */
static void blit(struct snug_sbuf *b, const char *s, size_t n) {
    snug_sbuf_puts(b, "\"");
    blit_body(b, s, n);
    snug_sbuf_puts(b, "\"");
}

#define MAX_REFS  256
#define MAX_DEPTH 64

struct ctx {
    json_t *root;
    struct snug_sbuf rules; /* generated rules, one per line */
    int n_rules;
    const char *ref_name[MAX_REFS];
    int ref_rule[MAX_REFS];
    int n_refs;
    struct snug_err *err;
    int status;
    char path[512];
    int depth;
};

static int unsupported(struct ctx *c, const char *keyword, const char *why) {
    c->status =
        snug_err_set(c->err, SNUG_ERR_UNSUPPORTED, "json schema: '%s' at %s is not supported%s%s",
                     keyword, c->path, why ? ": " : "", why ? why : "");
    return -1;
}

static int invalid(struct ctx *c, const char *keyword, const char *why) {
    c->status = snug_err_set(c->err, SNUG_ERR_INVALID, "json schema: '%s' at %s: %s", keyword,
                             c->path, why);
    return -1;
}

/* Start rule r<id> ::= ...; returns the id. */
static int rule_begin(struct ctx *c) {
    int id = c->n_rules++;
    snug_sbuf_printf(&c->rules, "r%d ::= ", id);
    return id;
}

static void rule_end(struct ctx *c) {
    snug_sbuf_puts(&c->rules, "\n");
}

static int gen(struct ctx *c, json_t *s);

/* Push a path segment for error messages; returns the old length. */
static size_t path_push(struct ctx *c, const char *seg) {
    size_t old = strlen(c->path);
    snprintf(c->path + old, sizeof c->path - old, "/%s", seg);
    return old;
}

static void path_pop(struct ctx *c, size_t old) {
    c->path[old] = 0;
}

static int gen_at(struct ctx *c, json_t *s, const char *seg) {
    size_t old = path_push(c, seg);
    int r = gen(c, s);
    path_pop(c, old);
    return r;
}

/* A rule matching exactly the JSON value v (serialised compactly). */
static int gen_literal(struct ctx *c, const json_t *v) {
    char *txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!txt) return invalid(c, "const", "cannot serialise the value");
    int id = rule_begin(c);
    blit(&c->rules, txt, strlen(txt));
    rule_end(c);
    free(txt); /* jansson's allocation */
    return id;
}

static const char *ANNOTATIONS[] = {
    "title",    "description",   "default",          "examples",        "$schema", "$id",
    "$comment", "deprecated",    "readOnly",         "writeOnly",       "$defs",   "definitions",
    "strict",   "discriminator", "contentMediaType", "contentEncoding", "$anchor", NULL};

static bool is_annotation(const char *k) {
    for (int i = 0; ANNOTATIONS[i]; i++)
        if (!strcmp(ANNOTATIONS[i], k)) return true;
    return false;
}

static bool get_count(json_t *s, const char *k, long long *out, bool *has) {
    json_t *v = json_object_get(s, k);
    *has = false;
    if (!v) return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = json_integer_value(v);
    *has = true;
    return true;
}

/* A string: JSON-quoted, or `raw` (the bare text, for Qwen's XML tool-call parameters, where a
 * string value is written unquoted and ends at the next '<'). */
static int gen_string_as(struct ctx *c, json_t *s, bool raw) {
    long long mn = 0, mx = -1;
    bool has_mn, has_mx;
    if (!get_count(s, "minLength", &mn, &has_mn))
        return invalid(c, "minLength", "must be a non-negative integer");
    if (!get_count(s, "maxLength", &mx, &has_mx))
        return invalid(c, "maxLength", "must be a non-negative integer");
    if (!has_mx) mx = -1;
    if (has_mx && mx < mn) return invalid(c, "maxLength", "is below minLength");
    if (mn > 10000 || mx > 10000)
        return unsupported(c, has_mx ? "maxLength" : "minLength", "lengths above 10000");
    json_t *fmt = json_object_get(s, "format");
    json_t *pat = json_object_get(s, "pattern");
    const char *q = raw ? "" : "\"\\\"\" ";
    const char *q2 = raw ? "" : " \"\\\"\"";
    if (pat) {
        if (!json_is_string(pat)) return invalid(c, "pattern", "must be a string");
        if (fmt || has_mn || has_mx)
            return unsupported(c, "pattern", "together with format/minLength/maxLength");
        struct snug_sbuf body = {0};
        char why[120];
        if (gr_regex_emit(&body, json_string_value(pat), json_string_length(pat), raw, why,
                          sizeof why)) {
            snug_free(body.data);
            return unsupported(c, "pattern", why);
        }
        int id = rule_begin(c);
        snug_sbuf_printf(&c->rules, "%s", q);
        snug_sbuf_append(&c->rules, body.data, body.len);
        snug_sbuf_printf(&c->rules, "%s", q2);
        rule_end(c);
        snug_free(body.data);
        return id;
    }
    if (fmt) {
        if (!json_is_string(fmt)) return invalid(c, "format", "must be a string");
        if (has_mn || has_mx) return unsupported(c, "format", "together with minLength/maxLength");
        const char *f = json_string_value(fmt);
        const char *body = NULL;
        if (!strcmp(f, "date"))
            body = "date";
        else if (!strcmp(f, "time"))
            body = "time";
        else if (!strcmp(f, "date-time"))
            body = "date \"T\" time";
        else if (!strcmp(f, "uuid"))
            body = "hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}";
        else if (!strcmp(f, "email"))
            body = "[a-zA-Z0-9._+-]{1,32} \"@\" [a-zA-Z0-9-]{1,32} (\".\" [a-zA-Z0-9-]{1,32}){0,3} "
                   "\".\" [a-zA-Z]{2,8}";
        else if (!strcmp(f, "ipv4"))
            body = "octet \".\" octet \".\" octet \".\" octet";
        else if (!strcmp(f, "uri") || !strcmp(f, "url"))
            body = "[a-z] [a-z0-9+.-]{0,8} \"://\" [a-zA-Z0-9._~:/?#@!$&'()*+,;=%-]{1,64}";
        else
            return unsupported(c, "format", f);
        int id = rule_begin(c);
        snug_sbuf_printf(&c->rules, "%s%s%s", q, body, q2);
        rule_end(c);
        return id;
    }
    const char *ch = raw ? "rawchar" : "char";
    int id = rule_begin(c);
    if (!has_mn && !has_mx)
        snug_sbuf_printf(&c->rules, "%s%s*%s", q, ch, q2);
    else if (mx < 0)
        snug_sbuf_printf(&c->rules, "%s%s{%lld,}%s", q, ch, mn, q2);
    else
        snug_sbuf_printf(&c->rules, "%s%s{%lld,%lld}%s", q, ch, mn, mx, q2);
    rule_end(c);
    return id;
}

static int gen_string(struct ctx *c, json_t *s) {
    return gen_string_as(c, s, false);
}

/* Read a numeric bound; *has false when absent. */
static int get_bound(struct ctx *c, json_t *s, const char *k, double *out, bool *has) {
    json_t *v = json_object_get(s, k);
    *has = false;
    if (!v) return 0;
    if (!json_is_number(v)) return invalid(c, k, "must be a number");
    *out = json_number_value(v);
    *has = true;
    return 0;
}

static int gen_number(struct ctx *c, json_t *s, bool integer) {
    double lo = 0, hi = 0, xlo = 0, xhi = 0;
    bool has_lo, has_hi, has_xlo, has_xhi;
    if (get_bound(c, s, "minimum", &lo, &has_lo) || get_bound(c, s, "maximum", &hi, &has_hi) ||
        get_bound(c, s, "exclusiveMinimum", &xlo, &has_xlo) ||
        get_bound(c, s, "exclusiveMaximum", &xhi, &has_xhi))
        return -1;
    if (json_object_get(s, "multipleOf")) return unsupported(c, "multipleOf", NULL);
    /* integer bounds as an inclusive integer range [a, b] */
    bool has_a = has_lo || has_xlo, has_b = has_hi || has_xhi;
    double a = -INFINITY, b = INFINITY;
    if (has_lo) a = integer ? ceil(lo) : lo;
    if (has_xlo) a = fmax(a, integer ? floor(xlo) + 1 : xlo);
    if (has_hi) b = integer ? floor(hi) : hi;
    if (has_xhi) b = fmin(b, integer ? ceil(xhi) - 1 : xhi);
    const char *kw = has_lo    ? "minimum"
                     : has_xlo ? "exclusiveMinimum"
                     : has_hi  ? "maximum"
                               : "exclusiveMaximum";
    if (has_a && has_b && a > b) return invalid(c, kw, "the range is empty");
    int id;
    if (!has_a && !has_b) {
        id = rule_begin(c);
        snug_sbuf_puts(&c->rules, integer ? "integer" : "number");
        rule_end(c);
        return id;
    }
    bool exact_ints = a == floor(a) && b == floor(b) && !has_xlo && !has_xhi;
    if (has_a && has_b && (integer || exact_ints) && b - a <= 512 && fabs(a) < 1e9 &&
        fabs(b) < 1e9) {
        /* enumerate the integers; a number may also take a fraction where it stays inside */
        id = rule_begin(c);
        long long ia = (long long)ceil(a), ib = (long long)floor(b);
        for (long long k = ia; k <= ib; k++) {
            if (k > ia) snug_sbuf_puts(&c->rules, " | ");
            snug_sbuf_printf(&c->rules, "\"%lld\"", k);
            if (!integer && ((k >= 0 && k + 1 <= ib) || (k < 0 && k - 1 >= ia)))
                snug_sbuf_puts(&c->rules, " frac?");
        }
        rule_end(c);
        return id;
    }
    if (has_a && !has_b && a <= 1 && a >= 0 && (integer || a == 0)) {
        id = rule_begin(c);
        if (integer)
            snug_sbuf_puts(&c->rules, a >= 1 ? "[1-9] [0-9]{0,15}" : "(\"0\" | [1-9] [0-9]{0,15})");
        else
            snug_sbuf_puts(&c->rules, "(\"0\" | [1-9] [0-9]{0,15}) frac? exp?");
        rule_end(c);
        return id;
    }
    if (has_b && !has_a && b >= 0 && b <= 512 && (integer || b == floor(b))) {
        id = rule_begin(c);
        snug_sbuf_puts(&c->rules, integer ? "\"-\" [1-9] [0-9]{0,15}"
                                          : "\"-\" (\"0\" | [1-9] [0-9]{0,15}) frac? exp?");
        for (long long k = 0; k <= (long long)b; k++) {
            snug_sbuf_printf(&c->rules, " | \"%lld\"", k);
            if (!integer && k + 1 <= (long long)b) snug_sbuf_puts(&c->rules, " frac?");
        }
        rule_end(c);
        return id;
    }
    return unsupported(c, kw,
                       "only ranges of at most 512 integers, a lower bound of 0 or 1, or an upper "
                       "bound in 0..512");
}

/* One "key": value pair of a declared property. */
static int gen_pair(struct ctx *c, const char *key, json_t *sub) {
    size_t old = path_push(c, "properties");
    int v = gen_at(c, sub, key);
    path_pop(c, old);
    if (v < 0) return -1;
    json_t *js = json_string(key);
    if (!js) return invalid(c, "properties", "a property name is not valid UTF-8");
    char *txt = json_dumps(js, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(js);
    if (!txt) return invalid(c, "properties", "cannot serialise a property name");
    int id = rule_begin(c);
    blit(&c->rules, txt, strlen(txt));
    snug_sbuf_printf(&c->rules, " ws \":\" ws r%d", v);
    rule_end(c);
    free(txt);
    return id;
}

static int gen_object(struct ctx *c, json_t *s) {
    json_t *props = json_object_get(s, "properties");
    json_t *req = json_object_get(s, "required");
    json_t *add = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return invalid(c, "properties", "must be an object");
    if (req && !json_is_array(req)) return invalid(c, "required", "must be an array");
    static const char *no[] = {"patternProperties",     "propertyNames",     "minProperties",
                               "maxProperties",         "dependentRequired", "dependentSchemas",
                               "unevaluatedProperties", "dependencies",      NULL};
    for (int i = 0; no[i]; i++)
        if (json_object_get(s, no[i])) return unsupported(c, no[i], NULL);
    size_t n = props ? json_object_size(props) : 0;
    if (req) {
        size_t i;
        json_t *r;
        json_array_foreach(req, i, r) {
            if (!json_is_string(r)) return invalid(c, "required", "must hold strings");
            if (!props || !json_object_get(props, json_string_value(r))) {
                /* a required property that is not declared: any value, but it must be there */
                return unsupported(c, "required",
                                   "a required property without a schema in 'properties'");
            }
        }
    }
    /* extra pairs: additionalProperties true/absent with no properties, or a schema */
    int extra = -1;
    if (add && !json_is_boolean(add) && !json_is_object(add))
        return invalid(c, "additionalProperties", "must be a boolean or a schema");
    if ((add && json_is_object(add)) || (!n && (!add || json_is_true(add)))) {
        int v = add && json_is_object(add) ? gen_at(c, add, "additionalProperties") : -1;
        if (add && json_is_object(add) && v < 0) return -1;
        extra = rule_begin(c);
        if (v >= 0)
            snug_sbuf_printf(&c->rules, "string ws \":\" ws r%d", v);
        else
            snug_sbuf_puts(&c->rules, "string ws \":\" ws value");
        rule_end(c);
    }
    int *pair = snug_malloc((n ? n : 1) * sizeof *pair);
    bool *isreq = snug_calloc(n ? n : 1, sizeof *isreq);
    if (!pair || !isreq) {
        snug_free(pair);
        snug_free(isreq);
        c->status = snug_err_set(c->err, SNUG_ERR_NOMEM, "json schema: out of memory");
        return -1;
    }
    const char *key;
    json_t *sub;
    size_t i = 0;
    int rc = 0;
    json_object_foreach(props, key, sub) {
        pair[i] = gen_pair(c, key, sub);
        if (pair[i] < 0) {
            rc = -1;
            break;
        }
        size_t k;
        json_t *r;
        json_array_foreach(req, k, r) if (!strcmp(json_string_value(r), key)) isreq[i] = true;
        i++;
    }
    int id = -1;
    if (!rc) {
        /* rest_i: the properties from i on, after something was written (each starts with ',');
         * first_i: the same when nothing was written yet. Built from the end. */
        int rest_next, first_next;
        rest_next = rule_begin(c);
        if (extra >= 0) snug_sbuf_printf(&c->rules, "(ws \",\" ws r%d)*", extra);
        rule_end(c);
        first_next = rule_begin(c);
        if (extra >= 0) snug_sbuf_printf(&c->rules, "(r%d r%d)?", extra, rest_next);
        rule_end(c);
        for (size_t k = n; k-- > 0;) {
            int rest = rule_begin(c);
            if (isreq[k])
                snug_sbuf_printf(&c->rules, "ws \",\" ws r%d r%d", pair[k], rest_next);
            else
                snug_sbuf_printf(&c->rules, "(ws \",\" ws r%d)? r%d", pair[k], rest_next);
            rule_end(c);
            int first = rule_begin(c);
            if (isreq[k])
                snug_sbuf_printf(&c->rules, "r%d r%d", pair[k], rest_next);
            else
                snug_sbuf_printf(&c->rules, "r%d r%d | r%d", pair[k], rest_next, first_next);
            rule_end(c);
            rest_next = rest;
            first_next = first;
        }
        id = rule_begin(c);
        snug_sbuf_printf(&c->rules, "\"{\" ws r%d ws \"}\"", first_next);
        rule_end(c);
    }
    snug_free(pair);
    snug_free(isreq);
    return rc ? -1 : id;
}

static int gen_array(struct ctx *c, json_t *s) {
    json_t *items = json_object_get(s, "items");
    json_t *prefix = json_object_get(s, "prefixItems");
    static const char *no[] = {"contains", "minContains", "maxContains", "unevaluatedItems", NULL};
    for (int i = 0; no[i]; i++)
        if (json_object_get(s, no[i])) return unsupported(c, no[i], NULL);
    json_t *uq = json_object_get(s, "uniqueItems");
    if (uq && json_is_true(uq))
        return unsupported(c, "uniqueItems", "a grammar cannot require distinct items");
    long long mn = 0, mx = -1;
    bool has_mn, has_mx;
    if (!get_count(s, "minItems", &mn, &has_mn))
        return invalid(c, "minItems", "must be a non-negative integer");
    if (!get_count(s, "maxItems", &mx, &has_mx))
        return invalid(c, "maxItems", "must be a non-negative integer");
    if (!has_mx) mx = -1;
    if (has_mx && mx < mn) return invalid(c, "maxItems", "is below minItems");
    if (mn > 1000 || mx > 1000)
        return unsupported(c, has_mx ? "maxItems" : "minItems", "counts above 1000");
    if (prefix) {
        if (!json_is_array(prefix)) return invalid(c, "prefixItems", "must be an array");
        if (has_mn || has_mx)
            return unsupported(c, "prefixItems", "together with minItems/maxItems");
        if (items && !json_is_false(items))
            return unsupported(c, "items", "after prefixItems (only items: false)");
        size_t n = json_array_size(prefix);
        int *el = snug_malloc((n ? n : 1) * sizeof *el);
        if (!el) return invalid(c, "prefixItems", "out of memory");
        for (size_t i = 0; i < n; i++) {
            char seg[40];
            snprintf(seg, sizeof seg, "prefixItems/%zu", i);
            el[i] = gen_at(c, json_array_get(prefix, i), seg);
            if (el[i] < 0) {
                snug_free(el);
                return -1;
            }
        }
        int id = rule_begin(c);
        snug_sbuf_puts(&c->rules, "\"[\" ws");
        for (size_t i = 0; i < n; i++)
            snug_sbuf_printf(&c->rules, "%s r%d", i ? " ws \",\" ws" : "", el[i]);
        snug_sbuf_puts(&c->rules, " ws \"]\"");
        rule_end(c);
        snug_free(el);
        return id;
    }
    int v;
    if (items && json_is_object(items))
        v = gen_at(c, items, "items");
    else if (!items || json_is_true(items))
        v = -2; /* any value */
    else
        return invalid(c, "items", "must be a schema");
    if (v == -1) return -1;
    char item[24];
    if (v >= 0)
        snprintf(item, sizeof item, "r%d", v);
    else
        snprintf(item, sizeof item, "value");
    int id = rule_begin(c);
    if (has_mx && mx == 0) {
        snug_sbuf_puts(&c->rules, "\"[\" ws \"]\"");
    } else if (mn == 0) {
        if (mx < 0)
            snug_sbuf_printf(&c->rules, "\"[\" ws (%s (ws \",\" ws %s)*)? ws \"]\"", item, item);
        else
            snug_sbuf_printf(&c->rules, "\"[\" ws (%s (ws \",\" ws %s){0,%lld})? ws \"]\"", item,
                             item, mx - 1);
    } else {
        if (mx < 0)
            snug_sbuf_printf(&c->rules, "\"[\" ws %s (ws \",\" ws %s){%lld,} ws \"]\"", item, item,
                             mn - 1);
        else
            snug_sbuf_printf(&c->rules, "\"[\" ws %s (ws \",\" ws %s){%lld,%lld} ws \"]\"", item,
                             item, mn - 1, mx - 1);
    }
    rule_end(c);
    return id;
}

/* The rule for one type name. */
static int gen_type(struct ctx *c, json_t *s, const char *t) {
    if (!strcmp(t, "object")) return gen_object(c, s);
    if (!strcmp(t, "array")) return gen_array(c, s);
    if (!strcmp(t, "string")) return gen_string(c, s);
    if (!strcmp(t, "integer")) return gen_number(c, s, true);
    if (!strcmp(t, "number")) return gen_number(c, s, false);
    int id = rule_begin(c);
    if (!strcmp(t, "boolean"))
        snug_sbuf_puts(&c->rules, "\"true\" | \"false\"");
    else if (!strcmp(t, "null"))
        snug_sbuf_puts(&c->rules, "\"null\"");
    else {
        rule_end(c);
        return unsupported(c, "type", t);
    }
    rule_end(c);
    return id;
}

static int gen_ref(struct ctx *c, const char *ref) {
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->ref_name[i], ref)) return c->ref_rule[i];
    json_t *target = NULL;
    if (!strcmp(ref, "#")) {
        target = c->root;
    } else if (!strncmp(ref, "#/$defs/", 8)) {
        target = json_object_get(json_object_get(c->root, "$defs"), ref + 8);
    } else if (!strncmp(ref, "#/definitions/", 14)) {
        target = json_object_get(json_object_get(c->root, "definitions"), ref + 14);
    } else {
        return unsupported(c, "$ref",
                           "only '#', '#/$defs/NAME' and '#/definitions/NAME' references");
    }
    if (!target) return invalid(c, "$ref", "points at nothing");
    if (c->n_refs >= MAX_REFS) return unsupported(c, "$ref", "more than 256 distinct references");
    /* name the target's rule now (a one-line forwarder), so recursion refers back to it */
    int id = c->n_rules++;
    c->ref_name[c->n_refs] = ref;
    c->ref_rule[c->n_refs++] = id;
    size_t old = strlen(c->path);
    snprintf(c->path + old, sizeof c->path - old, "(%s)", ref);
    int body = gen(c, target);
    c->path[old] = 0;
    if (body < 0) return -1;
    snug_sbuf_printf(&c->rules, "r%d ::= r%d\n", id, body);
    return id;
}

static int gen(struct ctx *c, json_t *s) {
    if (++c->depth > MAX_DEPTH) {
        c->depth--;
        return unsupported(c, "(nesting)", "schemas nested deeper than 64 levels");
    }
    int id = -1;
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        id = rule_begin(c);
        snug_sbuf_puts(&c->rules, "value");
        rule_end(c);
        c->depth--;
        return id;
    }
    if (json_is_false(s)) {
        c->depth--;
        return unsupported(c, "false", "a schema that allows nothing");
    }
    if (!json_is_object(s)) {
        c->depth--;
        return invalid(c, "(schema)", "a schema must be an object or a boolean");
    }
    /* every keyword must be known */
    static const char *known[] = {"type",
                                  "enum",
                                  "const",
                                  "$ref",
                                  "anyOf",
                                  "oneOf",
                                  "allOf",
                                  "properties",
                                  "required",
                                  "additionalProperties",
                                  "items",
                                  "prefixItems",
                                  "minItems",
                                  "maxItems",
                                  "uniqueItems",
                                  "minLength",
                                  "maxLength",
                                  "format",
                                  "pattern",
                                  "minimum",
                                  "maximum",
                                  "exclusiveMinimum",
                                  "exclusiveMaximum",
                                  "nullable",
                                  NULL};
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v) {
        bool ok = is_annotation(key);
        for (int i = 0; !ok && known[i]; i++) ok = !strcmp(known[i], key);
        if (!ok) {
            c->depth--;
            return unsupported(c, key, NULL);
        }
    }
    json_t *ref = json_object_get(s, "$ref"), *en = json_object_get(s, "enum"),
           *cn = json_object_get(s, "const"), *any = json_object_get(s, "anyOf"),
           *one = json_object_get(s, "oneOf"), *all = json_object_get(s, "allOf"),
           *ty = json_object_get(s, "type");
    json_t *nullable = json_object_get(s, "nullable");
    int inner = -1;
    if (ref) {
        if (!json_is_string(ref)) {
            c->depth--;
            return invalid(c, "$ref", "must be a string");
        }
        if (json_object_size(s) > 1) {
            /* siblings of $ref other than annotations are not merged */
            json_object_foreach(s, key, v) if (strcmp(key, "$ref") && !is_annotation(key)) {
                c->depth--;
                return unsupported(c, key, "next to $ref");
            }
        }
        inner = gen_ref(c, json_string_value(ref));
    } else if (cn) {
        inner = gen_literal(c, cn);
    } else if (en) {
        if (!json_is_array(en) || !json_array_size(en)) {
            c->depth--;
            return invalid(c, "enum", "must be a non-empty array");
        }
        int *ids = snug_malloc(json_array_size(en) * sizeof *ids);
        if (!ids) {
            c->depth--;
            return invalid(c, "enum", "out of memory");
        }
        size_t i;
        json_array_foreach(en, i, v) {
            ids[i] = gen_literal(c, v);
            if (ids[i] < 0) break;
        }
        if (i == json_array_size(en)) {
            inner = rule_begin(c);
            for (i = 0; i < json_array_size(en); i++)
                snug_sbuf_printf(&c->rules, "%sr%d", i ? " | " : "", ids[i]);
            rule_end(c);
        }
        snug_free(ids);
    } else if (any || one) {
        json_t *arr = any ? any : one;
        const char *kw = any ? "anyOf" : "oneOf";
        if (any && one) {
            c->depth--;
            return unsupported(c, "oneOf", "together with anyOf");
        }
        if (!json_is_array(arr) || !json_array_size(arr)) {
            c->depth--;
            return invalid(c, kw, "must be a non-empty array");
        }
        size_t n = json_array_size(arr);
        int *ids = snug_malloc(n * sizeof *ids);
        if (!ids) {
            c->depth--;
            return invalid(c, kw, "out of memory");
        }
        size_t i;
        bool okk = true;
        for (i = 0; i < n; i++) {
            char seg[40];
            snprintf(seg, sizeof seg, "%s/%zu", kw, i);
            ids[i] = gen_at(c, json_array_get(arr, i), seg);
            if (ids[i] < 0) {
                okk = false;
                break;
            }
        }
        if (okk) {
            inner = rule_begin(c);
            for (i = 0; i < n; i++) snug_sbuf_printf(&c->rules, "%sr%d", i ? " | " : "", ids[i]);
            rule_end(c);
        }
        snug_free(ids);
    } else if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1) {
            c->depth--;
            return unsupported(c, "allOf", "only allOf with exactly one schema");
        }
        inner = gen_at(c, json_array_get(all, 0), "allOf/0");
    } else if (ty) {
        if (json_is_string(ty)) {
            inner = gen_type(c, s, json_string_value(ty));
        } else if (json_is_array(ty) && json_array_size(ty)) {
            size_t n = json_array_size(ty), i;
            int ids[8];
            if (n > 7) {
                c->depth--;
                return invalid(c, "type", "too many types");
            }
            for (i = 0; i < n; i++) {
                json_t *t = json_array_get(ty, i);
                if (!json_is_string(t)) {
                    c->depth--;
                    return invalid(c, "type", "must be a string or an array of strings");
                }
                ids[i] = gen_type(c, s, json_string_value(t));
                if (ids[i] < 0) break;
            }
            if (i == n) {
                inner = rule_begin(c);
                for (i = 0; i < n; i++)
                    snug_sbuf_printf(&c->rules, "%sr%d", i ? " | " : "", ids[i]);
                rule_end(c);
            }
        } else {
            c->depth--;
            return invalid(c, "type", "must be a string or an array of strings");
        }
    } else if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties") ||
               json_object_get(s, "required")) {
        inner = gen_object(c, s);
    } else if (json_object_get(s, "items") || json_object_get(s, "prefixItems")) {
        inner = gen_array(c, s);
    } else {
        inner = rule_begin(c);
        snug_sbuf_puts(&c->rules, "value");
        rule_end(c);
    }
    c->depth--;
    if (inner < 0) return -1;
    if (nullable && json_is_true(nullable)) {
        id = rule_begin(c);
        snug_sbuf_printf(&c->rules, "r%d | \"null\"", inner);
        rule_end(c);
        return id;
    }
    return inner;
}

static const char *BASE =
    "ws ::= \" \"?\n"
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws (string ws \":\" ws value (ws \",\" ws string ws \":\" ws value)*)? ws "
    "\"}\"\n"
    "array ::= \"[\" ws (value (ws \",\" ws value)*)? ws \"]\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char ::= [^\"\\\\\\x00-\\x1F\\x7F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" hex{4})\n"
    "hex ::= [0-9a-fA-F]\n"
    "rawchar ::= [^<\\x00]\n"
    "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "number ::= integer frac? exp?\n"
    "frac ::= \".\" [0-9]{1,16}\n"
    "exp ::= [eE] [-+]? [0-9]{1,3}\n"
    /* calendar dates only (February stops at 28: 29 would need the year's leap rule) */
    "date ::= [1-9] [0-9]{3} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" d31 | (\"0\" [469] | "
    "\"11\") "
    "\"-\" d30 | \"02-\" d28)\n"
    "d28 ::= \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]\n"
    "d30 ::= d28 | \"29\" | \"30\"\n"
    "d31 ::= d30 | \"31\"\n"
    "time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
    "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "octet ::= [0-9] | [1-9] [0-9] | \"1\" [0-9] [0-9] | \"2\" [0-4] [0-9] | \"25\" [0-5]\n";

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
static int gen_param_value(struct ctx *c, json_t *s) {
    if (!json_is_object(s)) return gen(c, s);
    if (!admits_string(s)) return gen(c, s);
    json_t *t = json_object_get(s, "type");
    json_t *en = json_object_get(s, "enum");
    if (json_is_array(en) && json_array_size(en)) { /* raw enum values */
        int id = rule_begin(c);
        size_t i;
        json_t *x;
        json_array_foreach(en, i, x) {
            if (!json_is_string(x)) continue;
            if (i) snug_sbuf_puts(&c->rules, " | ");
            blit(&c->rules, json_string_value(x), json_string_length(x));
        }
        rule_end(c);
        return id;
    }
    if (json_is_string(t)) return gen_string_as(c, s, true);
    int id = rule_begin(c); /* a union admitting any string: any raw text */
    snug_sbuf_puts(&c->rules, "rawchar*");
    rule_end(c);
    return id;
}

/* One function's parameters in Qwen's XML form: "<parameter=K>\nV\n</parameter>\n" for the
 * schema's properties in declared order, optional ones skippable; a non-strict tool (or one
 * without properties) takes any parameters. */
static int gen_tool_params(struct ctx *c, json_t *params, bool strict) {
    json_t *props = json_is_object(params) ? json_object_get(params, "properties") : NULL;
    if (!strict || !json_is_object(props)) {
        int id = rule_begin(c);
        snug_sbuf_puts(
            &c->rules,
            "(\"<parameter=\" [a-zA-Z0-9_.-]{1,64} \">\\n\" rawchar* \"\\n</parameter>\\n\")*");
        rule_end(c);
        return id;
    }
    /* validate the object keywords as gen_object would (additionalProperties is implied false) */
    json_t *req = json_object_get(params, "required");
    size_t n = json_object_size(props);
    int *val = snug_malloc((n ? n : 1) * sizeof *val);
    if (!val) return invalid(c, "parameters", "out of memory");
    const char *key;
    json_t *sub;
    size_t i = 0;
    json_object_foreach(props, key, sub) {
        size_t old = path_push(c, "properties");
        size_t old2 = path_push(c, key);
        val[i] = gen_param_value(c, sub);
        path_pop(c, old2);
        path_pop(c, old);
        if (val[i] < 0) {
            snug_free(val);
            return -1;
        }
        i++;
    }
    int id = rule_begin(c);
    i = 0;
    json_object_foreach(props, key, sub) {
        bool is_req = false;
        size_t k;
        json_t *r;
        json_array_foreach(req, k, r) if (json_is_string(r) && !strcmp(json_string_value(r), key))
            is_req = true;
        snug_sbuf_puts(&c->rules, is_req ? " (" : " (");
        snug_sbuf_puts(&c->rules, "\"<parameter=");
        blit_body(&c->rules, key, strlen(key)); /* the key inside the literal */
        snug_sbuf_printf(&c->rules, ">\\n\" r%d \"\\n</parameter>\\n\")%s", val[i],
                         is_req ? "" : "?");
        i++;
    }
    if (!n) snug_sbuf_puts(&c->rules, "\"\"");
    rule_end(c);
    snug_free(val);
    return id;
}

/* A custom tool's input (function.format: {type: "grammar", syntax, definition}, set by the
 * Responses front end) as its one raw parameter `input`: the format's grammar, its names
 * prefixed with "ct<i>-" so that they stay apart from the other rules. */
static int gen_custom_input(struct ctx *c, json_t *fmt, size_t i) {
    json_t *def = json_object_get(fmt, "definition");
    const char *syntax = json_string_value(json_object_get(fmt, "syntax"));
    if (!json_is_string(def)) return invalid(c, "format", "needs a 'definition' string");
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
    int id = rule_begin(c);
    snug_sbuf_printf(&c->rules, "\"<parameter=input>\\n\" %s-root \"\\n</parameter>\\n\"", prefix);
    rule_end(c);
    return id;
}

/* A schema can refer to itself before any JSON text ({"$ref": "#"} at its root, two $defs that
 * only refer to each other, an anyOf whose branch refers back): its grammar is then
 * left-recursive, which no sampler can walk. The generated text is parsed once here so such a
 * schema is refused with its cause instead of handing the caller a grammar that fails later; a
 * grammar over the parser's size budget is left for the caller to refuse. */
static int check_parses(const char *gbnf, size_t n, struct snug_err *err) {
    struct snug_grammar *g = NULL;
    struct snug_err perr = {0};
    int rc = snug_grammar_parse(&g, gbnf, n, NULL, NULL, &perr);
    snug_grammar_free(g);
    if (rc == SNUG_OK || rc == SNUG_ERR_BUDGET) return SNUG_OK;
    return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                        "json schema: it refers to itself before any JSON text (a $ref cycle "
                        "with nothing in between), which no output can satisfy: %s",
                        perr.msg);
}

static int finish(struct ctx *c, const char *root_body, char **out, size_t *out_len,
                  struct snug_err *err) {
    struct snug_sbuf o = {0};
    snug_sbuf_printf(&o, "root ::= %s\n", root_body);
    snug_sbuf_puts(&o, BASE);
    if (c->rules.data) snug_sbuf_append(&o, c->rules.data, c->rules.len);
    snug_free(c->rules.data);
    if (o.oom || c->rules.oom) {
        snug_free(o.data);
        return snug_err_set(err, SNUG_ERR_NOMEM, "json schema: out of memory");
    }
    int rc = check_parses(o.data, o.len, err);
    if (rc) {
        snug_free(o.data);
        return rc;
    }
    *out = o.data;
    if (out_len) *out_len = o.len;
    return SNUG_OK;
}

int snug_tools_to_gbnf(const char *tools_json, size_t len, const char *named, const char *lead,
                       bool many, char **out, size_t *out_len, struct snug_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    json_error_t je;
    json_t *tools = json_loadb(tools_json, len, 0, &je);
    if (!json_is_array(tools)) {
        json_decref(tools);
        return snug_err_set(err, SNUG_ERR_INVALID, "tools: not a JSON array");
    }
    struct ctx c = {.err = err, .path = "#"};
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
        fn[n_fn] = rule_begin(&c);
        size_t nl = strlen(name);
        blit(&c.rules, name, nl);
        snug_sbuf_printf(&c.rules, " \">\\n\" r%d \"</function>\\n</tool_call>\"", p);
        rule_end(&c);
        if (named && !strcmp(named, name)) {
            named_fn = p;
            /* named: the prompt already holds "<function=NAME>\n" */
            int k = rule_begin(&c);
            snug_sbuf_printf(&c.rules, "r%d \"</function>\\n</tool_call>\"", p);
            rule_end(&c);
            named_fn = k;
        }
        n_fn++;
    }
    if (rc == SNUG_OK && (!n_fn || (named && named_fn < 0)))
        rc = snug_err_set(err, SNUG_ERR_INVALID, "tools: %s",
                          named ? "the named function is not among the tools" : "no functions");
    if (rc == SNUG_OK) {
        int any = rule_begin(&c);
        for (int k = 0; k < n_fn; k++) snug_sbuf_printf(&c.rules, "%sr%d", k ? " | " : "", fn[k]);
        rule_end(&c);
        struct snug_sbuf root = {0};
        if (lead && *lead) blit(&root, lead, strlen(lead)), snug_sbuf_puts(&root, " ");
        if (named)
            snug_sbuf_printf(&root, "r%d", named_fn);
        else
            snug_sbuf_printf(&root, "\"<function=\" r%d", any);
        if (many) snug_sbuf_printf(&root, " (\"\\n<tool_call>\\n<function=\" r%d)*", any);
        rc = root.oom ? snug_err_set(err, SNUG_ERR_NOMEM, "tools: out of memory")
                      : finish(&c, root.data, out, out_len, err);
        snug_free(root.data);
        c.rules.data = NULL; /* finish freed it */
    }
    snug_free(c.rules.data);
    snug_free(fn);
    json_decref(tools);
    return rc;
}

int snug_json_schema_to_gbnf(const char *schema_json, size_t len, char **out, size_t *out_len,
                             struct snug_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    json_error_t je;
    json_t *root = json_loadb(schema_json, len, JSON_DECODE_ANY, &je);
    if (!root)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "json schema: not valid JSON: %s (line %d, column %d)", je.text,
                            je.line, je.column);
    struct ctx c = {.root = root, .err = err, .path = "#"};
    int top = gen(&c, root);
    int rc = SNUG_OK;
    struct snug_sbuf o = {0};
    if (top < 0) {
        rc = c.status ? c.status : SNUG_ERR_INVALID;
    } else {
        snug_sbuf_printf(&o, "root ::= r%d\n", top);
        snug_sbuf_puts(&o, BASE);
        if (c.rules.data) snug_sbuf_append(&o, c.rules.data, c.rules.len);
        if (o.oom || c.rules.oom)
            rc = snug_err_set(err, SNUG_ERR_NOMEM, "json schema: out of memory");
        else
            rc = check_parses(o.data, o.len, err);
    }
    snug_free(c.rules.data);
    json_decref(root);
    if (rc) {
        snug_free(o.data);
        return rc;
    }
    *out = o.data;
    if (out_len) *out_len = o.len;
    return SNUG_OK;
}
