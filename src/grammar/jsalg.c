/* jsalg.c — the JSON Schema algebra the converter needs before it writes a rule: resolving a
 * $ref, folding $ref siblings and allOf into one schema (a ∧ b keyword by keyword), proving
 * two oneOf branches disjoint, and deciding whether a value validates under a schema (to keep
 * only the enum values the other keywords allow).
 *
 * Keyword meanings are those of the JSON Schema 2020-12 core and validation specifications
 * (json-schema.org), with the draft-04 forms read as that draft defines them (boolean
 * exclusiveMinimum / exclusiveMaximum, array-form `items` with additionalItems).
 * Merging is exact or refused: numeric bounds take the tighter one, length / count bounds
 * likewise, types and enums intersect, `required` unites, properties merge per name (a name
 * one side does not declare meets that side's additionalProperties), items per position,
 * anyOf / oneOf lists multiply out. What a conjunction cannot express (two different
 * patterns or formats, two fractional multipleOf, patternProperties against another side's
 * properties) is a refusal naming the keyword.
 * Invariant: a schema built here (kept in js_alg.keep) accepts exactly the values both sides
 * accept; js_disjoint and js_validate answer "yes" only when certain.
 * Read next: jschema.c (the generator that calls these), recognize.c (pattern membership).
 */
#include "grammar/grammar_impl.h"
#include "grammar/jschema_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FLATTEN_DEPTH  32
#define VALIDATE_DEPTH 48
#define CROSS_MAX      64 /* anyOf / oneOf branches after multiplying lists out */

static const char *const REFUSED[] = {"$dynamicRef",
                                      "$recursiveRef",
                                      "contains",
                                      "dependencies",
                                      "dependentRequired",
                                      "dependentSchemas",
                                      "if",
                                      "maxContains",
                                      "minContains",
                                      "not",
                                      "propertyNames",
                                      "unevaluatedItems",
                                      "unevaluatedProperties"};

static const char *const TRANSLATED[] = {"$ref",
                                         "additionalItems",
                                         "additionalProperties",
                                         "allOf",
                                         "anyOf",
                                         "const",
                                         "enum",
                                         "exclusiveMaximum",
                                         "exclusiveMinimum",
                                         "format",
                                         "items",
                                         "maxItems",
                                         "maxLength",
                                         "maxProperties",
                                         "maximum",
                                         "minItems",
                                         "minLength",
                                         "minProperties",
                                         "minimum",
                                         "multipleOf",
                                         "oneOf",
                                         "pattern",
                                         "patternProperties",
                                         "prefixItems",
                                         "properties",
                                         "required",
                                         "type",
                                         "uniqueItems"};

static bool in_list(const char *const *list, const char *k) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], k)) return true;
    return false;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* REFUSED and TRANSLATED are kept in strcmp order: looked up on every key of every schema. */
bool js_is_refused(const char *k) {
    return bsearch(&k, REFUSED, sizeof REFUSED / sizeof REFUSED[0], sizeof REFUSED[0], cmp_str);
}

bool js_is_translated(const char *k) {
    return bsearch(&k, TRANSLATED, sizeof TRANSLATED / sizeof TRANSLATED[0], sizeof TRANSLATED[0],
                   cmp_str);
}

struct js_pat {
    char *pat;
    struct snug_grammar *g; /* NULL: the pattern is outside the translated subset */
};

void js_alg_free(struct js_alg *a) {
    for (int i = 0; i < a->n_pats; i++) {
        snug_free(a->pats[i].pat);
        snug_grammar_free(a->pats[i].g);
    }
    snug_free(a->pats);
    a->pats = NULL;
    a->n_pats = a->cap_pats = 0;
    json_decref(a->keep);
    a->keep = NULL;
}

static json_t *refuse(struct js_alg *a, const char *kw, const char *why) {
    a->status = snug_err_set(a->err, SNUG_ERR_UNSUPPORTED,
                             "json schema: '%s' at %s is not supported: %s", kw, a->path, why);
    return NULL;
}

static json_t *invalid(struct js_alg *a, const char *kw, const char *why) {
    a->status =
        snug_err_set(a->err, SNUG_ERR_INVALID, "json schema: '%s' at %s: %s", kw, a->path, why);
    return NULL;
}

/* Keep a new schema alive until the conversion ends; returns it (borrowed). */
static json_t *keep(struct js_alg *a, json_t *x) {
    if (!x) return NULL;
    if (!a->keep) a->keep = json_array();
    if (!a->keep || json_array_append_new(a->keep, x)) {
        a->status = snug_err_set(a->err, SNUG_ERR_NOMEM, "json schema: out of memory");
        return NULL;
    }
    return x;
}

json_t *js_keep(struct js_alg *a, json_t *x) {
    return keep(a, x);
}

/* ---- values and types -------------------------------------------------------------------- */

/* -1, 0, 1 for two JSON numbers, exactly (long double holds every int64 and every double). */
int js_num_cmp(json_t *x, json_t *y) {
    if (json_is_integer(x) && json_is_integer(y)) {
        json_int_t a = json_integer_value(x), b = json_integer_value(y);
        return a < b ? -1 : a > b;
    }
    long double a = json_is_integer(x) ? (long double)json_integer_value(x) : json_real_value(x);
    long double b = json_is_integer(y) ? (long double)json_integer_value(y) : json_real_value(y);
    return a < b ? -1 : a > b;
}

bool js_equal(json_t *x, json_t *y) {
    if (json_is_number(x) && json_is_number(y)) return js_num_cmp(x, y) == 0;
    if (json_typeof(x) != json_typeof(y)) return false;
    switch (json_typeof(x)) {
    case JSON_STRING:
        return json_string_length(x) == json_string_length(y) &&
               !memcmp(json_string_value(x), json_string_value(y), json_string_length(x));
    case JSON_ARRAY: {
        if (json_array_size(x) != json_array_size(y)) return false;
        for (size_t i = 0; i < json_array_size(x); i++)
            if (!js_equal(json_array_get(x, i), json_array_get(y, i))) return false;
        return true;
    }
    case JSON_OBJECT: {
        if (json_object_size(x) != json_object_size(y)) return false;
        const char *k;
        json_t *v;
        json_object_foreach(x, k, v) {
            json_t *w = json_object_get(y, k);
            if (!w || !js_equal(v, w)) return false;
        }
        return true;
    }
    default:
        return true; /* true, false, null */
    }
}

static unsigned value_type(json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL:
        return JS_NULL;
    case JSON_TRUE:
    case JSON_FALSE:
        return JS_BOOL;
    case JSON_OBJECT:
        return JS_OBJ;
    case JSON_ARRAY:
        return JS_ARR;
    case JSON_STRING:
        return JS_STR;
    case JSON_INTEGER:
        return JS_INT;
    default: {
        double d = json_real_value(v);
        return d == floor(d) && isfinite(d) ? JS_INT : JS_FRAC;
    }
    }
}

static unsigned type_name_mask(const char *t) {
    if (!strcmp(t, "null")) return JS_NULL;
    if (!strcmp(t, "boolean")) return JS_BOOL;
    if (!strcmp(t, "object")) return JS_OBJ;
    if (!strcmp(t, "array")) return JS_ARR;
    if (!strcmp(t, "string")) return JS_STR;
    if (!strcmp(t, "integer")) return JS_INT;
    if (!strcmp(t, "number")) return JS_INT | JS_FRAC;
    return 0;
}

/* The "type" keyword as bits (JS_ALL when absent). */
static unsigned type_mask(json_t *s) {
    json_t *t = json_object_get(s, "type");
    if (!t) return JS_ALL;
    if (json_is_string(t)) return type_name_mask(json_string_value(t));
    unsigned m = 0;
    size_t i;
    json_t *x;
    json_array_foreach(t, i, x) if (json_is_string(x)) m |= type_name_mask(json_string_value(x));
    return m;
}

static json_t *type_json(unsigned m) {
    json_t *arr = json_array();
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {{JS_NULL, "null"},
                 {JS_BOOL, "boolean"},
                 {JS_OBJ, "object"},
                 {JS_ARR, "array"},
                 {JS_STR, "string"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (m & names[i].bit) json_array_append_new(arr, json_string(names[i].name));
    if ((m & (JS_INT | JS_FRAC)) == (JS_INT | JS_FRAC))
        json_array_append_new(arr, json_string("number"));
    else if (m & JS_INT)
        json_array_append_new(arr, json_string("integer"));
    return arr;
}

/* The allowed values (enum ∩ const) as a new array, or NULL when neither keyword is there. */
static json_t *value_set(json_t *s) {
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (!en && !cn) return NULL;
    json_t *out = json_array();
    if (en && json_is_array(en)) {
        size_t i;
        json_t *v;
        json_array_foreach(en, i, v) if (!cn || js_equal(v, cn)) json_array_append(out, v);
    } else if (cn) {
        json_array_append(out, cn);
    }
    return out;
}

unsigned js_sem_types(json_t *s) {
    if (json_is_false(s)) return 0;
    if (!json_is_object(s)) return JS_ALL;
    unsigned m = type_mask(s);
    json_t *vals = value_set(s);
    if (vals) {
        unsigned vm = 0;
        size_t i;
        json_t *v;
        json_array_foreach(vals, i, v) vm |= value_type(v);
        m &= vm;
        json_decref(vals);
    }
    return m;
}

/* Families: the types whose keywords a schema without `type` uses. */
static unsigned keyword_family(const char *k) {
    static const char *obj[] = {
        "properties",    "required", "additionalProperties", "patternProperties", "minProperties",
        "maxProperties", NULL};
    static const char *arr[] = {
        "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", NULL};
    static const char *str[] = {"minLength", "maxLength", "pattern", "format", NULL};
    static const char *num[] = {"minimum",          "maximum",    "exclusiveMinimum",
                                "exclusiveMaximum", "multipleOf", NULL};
    if (in_list(obj, k)) return JS_OBJ;
    if (in_list(arr, k)) return JS_ARR;
    if (in_list(str, k)) return JS_STR;
    if (in_list(num, k)) return JS_INT | JS_FRAC;
    return 0;
}

unsigned js_gen_types(json_t *s) {
    if (json_is_false(s)) return 0;
    if (!json_is_object(s)) return JS_ALL;
    unsigned m = js_sem_types(s);
    if (json_object_get(s, "type") || json_object_get(s, "enum") || json_object_get(s, "const"))
        return m;
    if (json_object_get(s, "anyOf") || json_object_get(s, "oneOf")) return m;
    unsigned fam = 0;
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) fam |= keyword_family(k);
    return fam ? fam : JS_ALL;
}

/* ---- $ref --------------------------------------------------------------------------------- */

static bool pointer_step(const char *seg, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = seg[i];
        if (ch == '~' && i + 1 < n && (seg[i + 1] == '0' || seg[i + 1] == '1')) {
            ch = seg[++i] == '0' ? '~' : '/';
        } else if (ch == '%' && i + 2 < n) {
            char hx[3] = {seg[i + 1], seg[i + 2], 0};
            char *end;
            long v = strtol(hx, &end, 16);
            if (*end) return false;
            ch = (char)v;
            i += 2;
        }
        if (o + 1 >= cap) return false;
        out[o++] = ch;
    }
    out[o] = 0;
    return true;
}

static json_t *find_anchor(json_t *s, const char *name, int depth) {
    if (depth > 64) return NULL;
    if (json_is_object(s)) {
        json_t *an = json_object_get(s, "$anchor");
        if (json_is_string(an) && !strcmp(json_string_value(an), name)) return s;
        const char *ids[2] = {"$id", "id"};
        for (int i = 0; i < 2; i++) {
            json_t *id = json_object_get(s, ids[i]);
            if (json_is_string(id) && json_string_value(id)[0] == '#' &&
                !strcmp(json_string_value(id) + 1, name))
                return s;
        }
        const char *k;
        json_t *v;
        json_object_foreach(s, k, v) {
            json_t *r = find_anchor(v, name, depth + 1);
            if (r) return r;
        }
    } else if (json_is_array(s)) {
        size_t i;
        json_t *v;
        json_array_foreach(s, i, v) {
            json_t *r = find_anchor(v, name, depth + 1);
            if (r) return r;
        }
    }
    return NULL;
}

/* The target of ref, or NULL; *outside: the reference leaves the document. */
static json_t *resolve_quiet(struct js_alg *a, const char *ref, bool *outside) {
    *outside = false;
    const char *frag = ref;
    if (ref[0] != '#') {
        const char *id = json_string_value(json_object_get(a->root, "$id"));
        if (!id) id = json_string_value(json_object_get(a->root, "id"));
        size_t L = id ? strcspn(id, "#") : 0;
        if (!id || !L || strncmp(ref, id, L) || (ref[L] && ref[L] != '#')) {
            *outside = true;
            return NULL;
        }
        frag = ref + L;
    }
    if (!*frag || !strcmp(frag, "#")) return a->root;
    if (frag[1] != '/') return find_anchor(a->root, frag + 1, 0);
    json_t *cur = a->root;
    const char *p = frag + 1;
    char seg[256];
    while (*p == '/' && cur) {
        p++;
        size_t n = strcspn(p, "/");
        if (!pointer_step(p, n, seg, sizeof seg)) return NULL;
        if (json_is_object(cur)) {
            cur = json_object_get(cur, seg);
        } else if (json_is_array(cur)) {
            char *end;
            long idx = strtol(seg, &end, 10);
            cur = *seg && !*end && idx >= 0 ? json_array_get(cur, (size_t)idx) : NULL;
        } else {
            cur = NULL;
        }
        p += n;
    }
    return cur;
}

json_t *js_resolve(struct js_alg *a, const char *ref) {
    bool outside;
    json_t *t = resolve_quiet(a, ref, &outside);
    if (t) return t;
    if (outside)
        return refuse(a, "$ref", "only references inside the schema ('#...', or the root's $id)");
    return invalid(a, "$ref", "points at nothing");
}

/* ---- flattening and merging -------------------------------------------------------------- */

/* Nothing but annotations / unknown keywords: accepts every value. */
static bool trivial(json_t *s) {
    if (json_is_true(s)) return true;
    if (!json_is_object(s)) return false;
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) if (js_is_translated(k) || js_is_refused(k)) return false;
    return true;
}

/* x ∧ y without merging now: an allOf of the two, flattened when it is generated. */
static json_t *lazy_all(struct js_alg *a, json_t *x, json_t *y) {
    if (!x) return y;
    if (!y) return x;
    if (json_is_false(x) || json_is_false(y)) return json_false();
    if (trivial(x)) return y;
    if (trivial(y) || x == y) return x;
    return keep(a, json_pack("{s:[O,O]}", "allOf", x, y));
}

json_t *js_all(struct js_alg *a, json_t *x, json_t *y) {
    return lazy_all(a, x, y);
}

static bool has_name(json_t *arr, const char *name);

/* "not n" in keywords the converter writes, or NULL when that is not possible. Exact forms:
 * not {} (nothing), not false (everything), not {type}, not {required} (an object without one
 * of the names), not {anyOf} (none of them), not {allOf} (not all of them). */
static json_t *negate(struct js_alg *a, json_t *n, int depth) {
    if (depth > 4) return NULL;
    if (trivial(n)) return json_false();
    if (json_is_false(n)) return keep(a, json_object());
    if (!json_is_object(n)) return NULL;
    json_t *req = NULL, *ty = NULL, *list = NULL, *props = NULL;
    bool any_list = false;
    const char *k;
    json_t *v;
    json_object_foreach(n, k, v) {
        if (!js_is_translated(k) && !js_is_refused(k)) continue;
        if (!strcmp(k, "required") && json_is_array(v))
            req = v;
        else if (!strcmp(k, "properties") && json_is_object(v))
            props = v;
        else if (!strcmp(k, "type"))
            ty = v;
        else if ((!strcmp(k, "anyOf") || !strcmp(k, "allOf")) && json_is_array(v) && !list)
            list = v, any_list = k[1] == 'n';
        else
            return NULL;
    }
    if ((req != NULL) + (ty != NULL) + (list != NULL) != 1) return NULL;
    if (props && !req) return NULL;
    if (ty) {
        if (props) return NULL;
        unsigned m = JS_ALL & ~type_mask(n);
        if ((m & (JS_INT | JS_FRAC)) == JS_FRAC) return NULL; /* "non-integer numbers" */
        if (!m) return json_false();
        return keep(a, json_pack("{s:o}", "type", type_json(m)));
    }
    if (req) {
        /* properties may only restate required names with schemas that allow anything */
        json_object_foreach(props, k, v) if (!has_name(req, k) || !trivial(v)) return NULL;
        if (!json_array_size(req)) return json_false();
        json_t *alts = json_array();
        size_t i;
        json_array_foreach(req, i, v) {
            if (!json_is_string(v)) {
                json_decref(alts);
                return NULL;
            }
            json_array_append_new(alts,
                                  json_pack("{s:{s:b}}", "properties", json_string_value(v), 0));
        }
        json_t *out = json_array_size(alts) == 1
                          ? json_pack("{s:s,s:O}", "type", "object", "properties",
                                      json_object_get(json_array_get(alts, 0), "properties"))
                          : json_pack("{s:s,s:O}", "type", "object", "anyOf", alts);
        json_decref(alts);
        return keep(a, out);
    }
    /* not anyOf [A...] = allOf [not A...]; not allOf [A...] = anyOf [not A...] */
    json_t *parts = json_array();
    size_t i;
    json_array_foreach(list, i, v) {
        json_t *nv = negate(a, v, depth + 1);
        if (!nv) {
            json_decref(parts);
            return NULL;
        }
        json_array_append(parts, nv);
    }
    return keep(a, json_pack("{s:o}", any_list ? "allOf" : "anyOf", parts));
}

/* draft-04 forms → the 2020-12 ones; `not` and dependencies → allOf pieces this converter
 * writes (a new object when something changes):
 *   dependencies / dependentRequired  a: [b, ...]  → anyOf [a absent, required [a, b, ...]]
 *   dependencies / dependentSchemas   a: S         → anyOf [a absent, allOf [required [a], S]]
 *   not n                                           → the negation of n (negate above)
 * Each is exact; what cannot be rewritten stays and is refused by name. */
static json_t *normalize(struct js_alg *a, json_t *s) {
    json_t *xmin = json_object_get(s, "exclusiveMinimum"),
           *xmax = json_object_get(s, "exclusiveMaximum"), *items = json_object_get(s, "items"),
           *add = json_object_get(s, "additionalItems"), *nt = json_object_get(s, "not");
    static const char *DEPS[3] = {"dependencies", "dependentRequired", "dependentSchemas"};
    bool deps = false;
    for (int i = 0; i < 3; i++) deps |= json_is_object(json_object_get(s, DEPS[i]));
    if (!json_is_boolean(xmin) && !json_is_boolean(xmax) && !json_is_array(items) && !add && !nt &&
        !deps)
        return s;
    json_t *n = keep(a, json_copy(s));
    if (!n) return NULL;
    const char *pair[2][2] = {{"exclusiveMinimum", "minimum"}, {"exclusiveMaximum", "maximum"}};
    for (int i = 0; i < 2; i++) {
        json_t *x = json_object_get(n, pair[i][0]);
        if (!json_is_boolean(x)) continue;
        json_t *bound = json_object_get(n, pair[i][1]);
        if (json_is_true(x) && bound) {
            json_object_set(n, pair[i][0], bound);
            json_object_del(n, pair[i][1]);
        } else {
            json_object_del(n, pair[i][0]);
        }
    }
    if (json_is_array(items)) {
        json_object_set(n, "prefixItems", items);
        if (add)
            json_object_set(n, "items", add);
        else
            json_object_del(n, "items");
    }
    json_object_del(n, "additionalItems");
    json_t *all = json_object_get(n, "allOf");
    json_t *pieces = json_is_array(all) ? json_copy(all) : json_array();
    if (nt) {
        json_t *neg = negate(a, nt, 0);
        if (neg) {
            json_array_append(pieces, neg);
            json_object_del(n, "not");
        }
    }
    for (int d = 0; d < 3; d++) {
        json_t *dep = json_object_get(n, DEPS[d]);
        if (!json_is_object(dep) || json_object_size(dep) > 6) continue;
        bool ok = true;
        const char *k;
        json_t *v;
        json_object_foreach(dep, k, v) ok &= json_is_array(v) ? d != 2 : d != 1;
        if (!ok) continue;
        json_object_foreach(dep, k, v) {
            json_t *absent = json_pack("{s:{s:b}}", "properties", k, 0);
            json_t *present;
            if (json_is_array(v)) {
                json_t *req = json_array();
                json_array_append_new(req, json_string(k));
                json_array_extend(req, v);
                present = json_pack("{s:o}", "required", req);
            } else {
                present = json_pack("{s:[{s:[s]},O]}", "allOf", "required", k, v);
            }
            json_array_append_new(pieces, json_pack("{s:[o,o]}", "anyOf", absent, present));
        }
        json_object_del(n, DEPS[d]);
    }
    if (json_array_size(pieces))
        json_object_set_new(n, "allOf", pieces);
    else
        json_decref(pieces);
    return n;
}

json_t *js_flatten(struct js_alg *a, json_t *s) {
    if (json_is_true(s)) return keep(a, json_object());
    if (json_is_false(s)) return json_false();
    if (!json_is_object(s))
        return invalid(a, "(schema)", "a schema must be an object or a boolean");
    s = normalize(a, s);
    if (!s) return NULL;
    json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
    if (!ref && !all) return s;
    if (ref && !json_is_string(ref)) return invalid(a, "$ref", "must be a string");
    if (all && (!json_is_array(all) || !json_array_size(all)))
        return invalid(a, "allOf", "must be a non-empty array");
    if (a->depth >= FLATTEN_DEPTH)
        return refuse(a, ref ? "$ref" : "allOf",
                      "references and allOf nested deeper than 32 (a cycle through them?)");
    a->depth++;
    json_t *acc = keep(a, json_copy(s));
    if (acc) {
        json_object_del(acc, "$ref");
        json_object_del(acc, "allOf");
    }
    if (acc && ref) {
        json_t *t = js_resolve(a, json_string_value(ref));
        json_t *ft = t ? js_flatten(a, t) : NULL;
        acc = ft ? js_merge(a, acc, ft) : NULL;
    }
    for (size_t i = 0; acc && all && i < json_array_size(all); i++) {
        json_t *f = js_flatten(a, json_array_get(all, i));
        acc = f ? js_merge(a, acc, f) : NULL;
    }
    a->depth--;
    return acc;
}

static unsigned long long gcd_u(unsigned long long x, unsigned long long y) {
    while (y) {
        unsigned long long t = x % y;
        x = y, y = t;
    }
    return x;
}

/* Keep the tighter of two bounds under key k (want_max: the larger one is tighter). */
static void tighter(json_t *m, const char *k, json_t *x, json_t *y, bool want_max) {
    json_t *vx = json_object_get(x, k), *vy = json_object_get(y, k);
    if (!vx && !vy) return;
    json_t *pick = !vx ? vy : !vy ? vx : (js_num_cmp(vx, vy) >= 0) == want_max ? vx : vy;
    if (json_is_number(pick)) json_object_set(m, k, pick);
}

/* The cross product of anyOf / oneOf lists: every choice of one branch per list, as one
 * lazy conjunction. NULL (refused) past CROSS_MAX. */
static json_t *cross(struct js_alg *a, json_t **lists, int n, const char *kw) {
    size_t total = 1;
    for (int i = 0; i < n; i++) {
        if (!json_is_array(lists[i]) || !json_array_size(lists[i]))
            return invalid(a, kw, "must be a non-empty array");
        total *= json_array_size(lists[i]);
        if (total > CROSS_MAX)
            return refuse(a, kw, "lists that multiply out to more than 64 alternatives");
    }
    json_t *out = keep(a, json_array());
    if (!out) return NULL;
    for (size_t c = 0; c < total; c++) {
        json_t *acc = NULL;
        size_t rest = c;
        for (int i = 0; i < n; i++) {
            size_t m = json_array_size(lists[i]);
            acc = lazy_all(a, acc, json_array_get(lists[i], rest % m));
            rest /= m;
        }
        json_array_append(out, acc ? acc : json_true());
    }
    return out;
}

json_t *js_merge(struct js_alg *a, json_t *x, json_t *y) {
    if (!x || !y) return NULL;
    if (json_is_false(x) || json_is_false(y)) return json_false();
    if (trivial(x)) return y;
    if (trivial(y)) return x;
    json_t *m = keep(a, json_object());
    if (!m) return NULL;
    const char *k;
    json_t *v;
    /* keywords not translated here pass through from one side, never from both */
    json_t *sides[2] = {x, y};
    for (int s = 0; s < 2; s++) {
        json_object_foreach(sides[s], k, v) {
            if (!js_is_refused(k)) continue;
            if (s == 1 && json_object_get(x, k))
                return refuse(a, k, "in two schemas that must both hold (allOf, or next to $ref)");
            json_object_set(m, k, v);
        }
    }
    /* type */
    unsigned tx = type_mask(x), ty = type_mask(y);
    if (json_object_get(x, "type") || json_object_get(y, "type")) {
        if (!(tx & ty)) return json_false();
        json_object_set_new(m, "type", type_json(tx & ty));
    }
    /* enum / const */
    json_t *vx = value_set(x), *vy = value_set(y);
    if (vx || vy) {
        json_t *vals = json_array();
        json_t *from = vx ? vx : vy, *other = vx ? vy : NULL;
        size_t i;
        json_array_foreach(from, i, v) {
            bool ok = true;
            if (other) {
                ok = false;
                size_t j;
                json_t *w;
                json_array_foreach(other, j, w) if (js_equal(v, w)) ok = true;
            }
            if (ok) json_array_append(vals, v);
        }
        json_decref(vx);
        json_decref(vy);
        if (!json_array_size(vals)) {
            json_decref(vals);
            return json_false();
        }
        json_object_set_new(m, "enum", vals);
    }
    /* bounds */
    tighter(m, "minimum", x, y, true);
    tighter(m, "exclusiveMinimum", x, y, true);
    tighter(m, "maximum", x, y, false);
    tighter(m, "exclusiveMaximum", x, y, false);
    tighter(m, "minLength", x, y, true);
    tighter(m, "maxLength", x, y, false);
    tighter(m, "minItems", x, y, true);
    tighter(m, "maxItems", x, y, false);
    tighter(m, "minProperties", x, y, true);
    tighter(m, "maxProperties", x, y, false);
    json_t *mx = json_object_get(x, "multipleOf"), *my = json_object_get(y, "multipleOf");
    if (mx && my && !js_equal(mx, my)) {
        if (!json_is_integer(mx) || !json_is_integer(my) || json_integer_value(mx) <= 0 ||
            json_integer_value(my) <= 0)
            return refuse(a, "multipleOf", "two different fractional multipleOf at once");
        unsigned long long p = (unsigned long long)json_integer_value(mx),
                           q = (unsigned long long)json_integer_value(my);
        unsigned long long l = p / gcd_u(p, q);
        if (l > 10000000000000000ull / q)
            return refuse(a, "multipleOf", "two multipleOf whose common multiple is too large");
        json_object_set_new(m, "multipleOf", json_integer((json_int_t)(l * q)));
    } else if (mx || my) {
        json_object_set(m, "multipleOf", mx ? mx : my);
    }
    const char *same[2] = {"pattern", "format"};
    for (int i = 0; i < 2; i++) {
        json_t *px = json_object_get(x, same[i]), *py = json_object_get(y, same[i]);
        if (px && py && !js_equal(px, py))
            return refuse(a, same[i], "two different values in schemas that must both hold");
        if (px || py) json_object_set(m, same[i], px ? px : py);
    }
    if (json_is_true(json_object_get(x, "uniqueItems")) ||
        json_is_true(json_object_get(y, "uniqueItems")))
        json_object_set_new(m, "uniqueItems", json_true());
    /* required: the union */
    json_t *rx = json_object_get(x, "required"), *ry = json_object_get(y, "required");
    if (rx || ry) {
        json_t *req = json_array();
        json_t *lists[2] = {rx, ry};
        for (int s = 0; s < 2; s++) {
            size_t i;
            json_array_foreach(lists[s], i, v) {
                bool dup = false;
                size_t j;
                json_t *w;
                json_array_foreach(req, j, w) if (js_equal(v, w)) dup = true;
                if (!dup) json_array_append(req, v);
            }
        }
        json_object_set_new(m, "required", req);
    }
    /* properties */
    json_t *px = json_object_get(x, "properties"), *py = json_object_get(y, "properties"),
           *ax = json_object_get(x, "additionalProperties"),
           *ay = json_object_get(y, "additionalProperties"),
           *qx = json_object_get(x, "patternProperties"),
           *qy = json_object_get(y, "patternProperties");
    bool ox = px || ax || qx, oy = py || ay || qy;
    if (ox && oy) {
        if (qx || qy)
            return refuse(a, "patternProperties",
                          "together with another schema's properties in schemas that must both "
                          "hold");
        json_t *props = json_object();
        json_object_set_new(m, "properties", props);
        json_t *pl[2] = {px, py};
        for (int s = 0; s < 2; s++) {
            json_object_foreach(pl[s], k, v) {
                if (json_object_get(props, k)) continue;
                json_t *sx = json_object_get(px, k), *sy = json_object_get(py, k);
                if (!sx) sx = ax ? ax : json_true();
                if (!sy) sy = ay ? ay : json_true();
                json_t *both = lazy_all(a, sx, sy);
                if (!both) return NULL;
                json_object_set(props, k, both);
            }
        }
        if (ax || ay) {
            json_t *add = lazy_all(a, ax ? ax : json_true(), ay ? ay : json_true());
            if (!add) return NULL;
            json_object_set(m, "additionalProperties", add);
        }
    } else {
        json_t *src = ox ? x : y;
        const char *ok[3] = {"properties", "additionalProperties", "patternProperties"};
        for (int i = 0; i < 3; i++)
            if (json_object_get(src, ok[i])) json_object_set(m, ok[i], json_object_get(src, ok[i]));
    }
    /* items */
    json_t *fx = json_object_get(x, "prefixItems"), *fy = json_object_get(y, "prefixItems"),
           *ix = json_object_get(x, "items"), *iy = json_object_get(y, "items");
    if (fx || fy) {
        size_t n =
            json_array_size(fx) > json_array_size(fy) ? json_array_size(fx) : json_array_size(fy);
        json_t *pre = json_array();
        json_object_set_new(m, "prefixItems", pre);
        for (size_t i = 0; i < n; i++) {
            json_t *ex = i < json_array_size(fx) ? json_array_get(fx, i) : ix;
            json_t *ey = i < json_array_size(fy) ? json_array_get(fy, i) : iy;
            json_t *e = lazy_all(a, ex ? ex : json_true(), ey ? ey : json_true());
            if (!e) return NULL;
            if (json_is_false(e)) { /* no item can be at position i: at most i items */
                json_t *mi = json_object_get(m, "maxItems");
                if (!mi || json_integer_value(mi) > (json_int_t)i)
                    json_object_set_new(m, "maxItems", json_integer((json_int_t)i));
                break;
            }
            json_array_append(pre, e);
        }
    }
    if (ix || iy) {
        json_t *it = lazy_all(a, ix ? ix : json_true(), iy ? iy : json_true());
        if (!it) return NULL;
        json_object_set(m, "items", it);
    }
    /* anyOf / oneOf */
    json_t *any[2], *one[2];
    int n_any = 0, n_one = 0;
    for (int s = 0; s < 2; s++) {
        json_t *an = json_object_get(sides[s], "anyOf"), *on = json_object_get(sides[s], "oneOf");
        if (an) any[n_any++] = an;
        if (on) one[n_one++] = on;
    }
    json_t *A = n_any > 1 ? cross(a, any, n_any, "anyOf") : n_any ? any[0] : NULL;
    if (n_any > 1 && !A) return NULL;
    json_t *O = n_one > 1 ? cross(a, one, n_one, "oneOf") : n_one ? one[0] : NULL;
    if (n_one > 1 && !O) return NULL;
    if (A && O) {
        json_t *wrap = keep(a, json_pack("{s:O}", "anyOf", A)), *list = json_array();
        json_object_set_new(m, "oneOf", list);
        size_t i;
        json_array_foreach(O, i, v) {
            json_t *e = lazy_all(a, v, wrap);
            if (!e) return NULL;
            json_array_append(list, e);
        }
    } else if (A) {
        json_object_set(m, "anyOf", A);
    } else if (O) {
        json_object_set(m, "oneOf", O);
    }
    return m;
}

bool js_empty(struct js_alg *a, json_t *s) {
    int status = a->status;
    struct snug_err saved = *a->err;
    json_t *f = js_flatten(a, s);
    bool empty = false;
    if (!f) { /* a question that cannot be answered: not proven empty */
        *a->err = saved;
        a->status = status;
        return false;
    }
    if (json_is_false(f) || !js_sem_types(f)) return true;
    if (!(js_gen_types(f) & ~(unsigned)JS_OBJ)) { /* objects only: a required name forbidden */
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(f, "required"), i,
                           v) if (json_is_string(v) &&
                                  json_is_false(json_object_get(json_object_get(f, "properties"),
                                                                json_string_value(v)))) return true;
    }
    json_t *vals = value_set(f);
    if (vals) {
        json_t *rest = json_copy(f);
        json_object_del(rest, "enum");
        json_object_del(rest, "const");
        empty = true;
        size_t i;
        json_t *v;
        json_array_foreach(vals, i, v) if (js_validate(a, rest, v) != JS_NO) empty = false;
        json_decref(rest);
        json_decref(vals);
    }
    return empty;
}

/* ---- validation of a value ---------------------------------------------------------------- */

static enum js_tri and3(enum js_tri x, enum js_tri y) {
    if (x == JS_NO || y == JS_NO) return JS_NO;
    return x == JS_UNKNOWN || y == JS_UNKNOWN ? JS_UNKNOWN : JS_YES;
}

static enum js_tri or3(enum js_tri x, enum js_tri y) {
    if (x == JS_YES || y == JS_YES) return JS_YES;
    return x == JS_UNKNOWN || y == JS_UNKNOWN ? JS_UNKNOWN : JS_NO;
}

static enum js_tri not3(enum js_tri x) {
    return x == JS_UNKNOWN ? JS_UNKNOWN : x == JS_YES ? JS_NO : JS_YES;
}

static enum js_tri bool3(bool b) {
    return b ? JS_YES : JS_NO;
}

static size_t code_points(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* Printable ASCII without '"' and '\': where a pattern's grammar decides membership exactly
 * (its classes leave out only '"', '\' and control characters; shorthand classes and '.'
 * agree between ECMA-262 and Python there). */
static bool exact_zone(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch > 0x7E || ch == '"' || ch == '\\') return false;
    }
    return true;
}

/* Is s in the language of pattern's grammar (1 / 0), or -1: unknown (outside the translated
 * subset, not valid UTF-8, too long)? */
static int pattern_accepts(struct js_alg *a, const char *pat, const char *s, size_t n) {
    struct js_pat *p = NULL;
    for (int i = 0; i < a->n_pats; i++)
        if (!strcmp(a->pats[i].pat, pat)) p = &a->pats[i];
    if (!p) {
        if (a->n_pats == a->cap_pats) {
            int cap = a->cap_pats ? 2 * a->cap_pats : 8;
            struct js_pat *np = snug_malloc((size_t)cap * sizeof *np);
            if (!np) return -1;
            if (a->n_pats) memcpy(np, a->pats, (size_t)a->n_pats * sizeof *np);
            snug_free(a->pats);
            a->pats = np, a->cap_pats = cap;
        }
        size_t len = strlen(pat);
        char *copy = snug_malloc(len + 1);
        if (!copy) return -1;
        memcpy(copy, pat, len + 1);
        p = &a->pats[a->n_pats++];
        p->pat = copy;
        p->g = NULL;
        struct snug_sbuf b = {0};
        char why[120];
        snug_sbuf_puts(&b, "root ::= \"\\\"\" ");
        if (!gr_regex_emit(&b, pat, strlen(pat), false, 0, -1, why, sizeof why)) {
            snug_sbuf_puts(&b, " \"\\\"\"\n");
            struct snug_err err = {0};
            if (!b.oom && snug_grammar_parse(&p->g, b.data, b.len, NULL, NULL, &err) != SNUG_OK)
                p->g = NULL;
        }
        snug_free(b.data);
    }
    if (!p->g) return -1;
    json_t *js = json_stringn(s, n);
    char *text = js ? json_dumps(js, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    json_decref(js);
    if (!text) return -1;
    int r = gr_accepts(p->g, text, strlen(text));
    free(text); /* jansson's allocation */
    return r;
}

enum js_tri js_pattern_test(struct js_alg *a, const char *pat, const char *s, size_t n) {
    int r = pattern_accepts(a, pat, s, n);
    if (r == 1) return JS_YES;
    return r == 0 && exact_zone(s, n) ? JS_NO : JS_UNKNOWN;
}

enum js_tri js_pattern_in_grammar(struct js_alg *a, const char *pat, const char *s, size_t n) {
    int r = pattern_accepts(a, pat, s, n);
    return r < 0 ? JS_UNKNOWN : r ? JS_YES : JS_NO;
}

static enum js_tri validate(struct js_alg *a, json_t *s, json_t *v, int depth);

static enum js_tri check_number(json_t *s, const char *k, json_t *x, json_t *v) {
    if (!json_is_number(v)) return JS_YES;
    if (!strcmp(k, "minimum") || !strcmp(k, "maximum")) {
        if (!json_is_number(x)) return JS_UNKNOWN;
        bool lower = k[1] == 'i';
        json_t *ex = json_object_get(s, lower ? "exclusiveMinimum" : "exclusiveMaximum");
        bool strict = json_is_true(ex); /* draft-04 */
        int c = js_num_cmp(v, x);
        return bool3(lower ? (strict ? c > 0 : c >= 0) : (strict ? c < 0 : c <= 0));
    }
    if (!strcmp(k, "exclusiveMinimum") || !strcmp(k, "exclusiveMaximum")) {
        if (json_is_boolean(x)) return JS_YES; /* draft-04: read with minimum / maximum */
        if (!json_is_number(x)) return JS_UNKNOWN;
        int c = js_num_cmp(v, x);
        return bool3(k[9] == 'M' && k[10] == 'i' ? c > 0 : c < 0);
    }
    /* multipleOf: exact for integers only (a fractional one depends on the validator's
     * floating point) */
    if (json_is_integer(v) && json_is_integer(x) && json_integer_value(x) > 0)
        return bool3(json_integer_value(v) % json_integer_value(x) == 0);
    return JS_UNKNOWN;
}

static enum js_tri check_string(struct js_alg *a, const char *k, json_t *x, json_t *v) {
    if (!json_is_string(v)) return JS_YES;
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (!strcmp(k, "minLength") || !strcmp(k, "maxLength")) {
        if (!json_is_integer(x)) return JS_UNKNOWN;
        size_t c = code_points(s, n);
        json_int_t lim = json_integer_value(x);
        return bool3(k[1] == 'i' ? (json_int_t)c >= lim : (json_int_t)c <= lim);
    }
    if (!strcmp(k, "pattern"))
        return json_is_string(x) ? js_pattern_test(a, json_string_value(x), s, n) : JS_UNKNOWN;
    return JS_UNKNOWN; /* format: whether the validator checks it is not known here */
}

static enum js_tri check_object(struct js_alg *a, json_t *s, const char *k, json_t *x, json_t *v,
                                int depth) {
    if (!json_is_object(v)) return JS_YES;
    const char *key;
    json_t *val;
    enum js_tri r = JS_YES;
    if (!strcmp(k, "required")) {
        size_t i;
        json_t *name;
        json_array_foreach(x, i, name) {
            if (!json_is_string(name)) return JS_UNKNOWN;
            if (!json_object_get(v, json_string_value(name))) return JS_NO;
        }
        return JS_YES;
    }
    if (!strcmp(k, "minProperties") || !strcmp(k, "maxProperties")) {
        if (!json_is_integer(x)) return JS_UNKNOWN;
        json_int_t c = (json_int_t)json_object_size(v), lim = json_integer_value(x);
        return bool3(k[1] == 'i' ? c >= lim : c <= lim);
    }
    if (!strcmp(k, "properties")) {
        json_object_foreach(v, key, val) {
            json_t *sub = json_object_get(x, key);
            if (sub) r = and3(r, validate(a, sub, val, depth + 1));
            if (r == JS_NO) break;
        }
        return r;
    }
    if (!strcmp(k, "patternProperties")) {
        json_object_foreach(v, key, val) {
            const char *pat;
            json_t *sub;
            json_object_foreach(x, pat, sub) {
                enum js_tri m = js_pattern_test(a, pat, key, strlen(key));
                if (m == JS_NO) continue;
                enum js_tri ok = validate(a, sub, val, depth + 1);
                r = and3(r, m == JS_YES ? ok : (ok == JS_YES ? JS_YES : JS_UNKNOWN));
            }
            if (r == JS_NO) break;
        }
        return r;
    }
    if (!strcmp(k, "additionalProperties")) {
        json_t *props = json_object_get(s, "properties"),
               *pats = json_object_get(s, "patternProperties");
        json_object_foreach(v, key, val) {
            if (json_object_get(props, key)) continue;
            enum js_tri matched = JS_NO;
            const char *pat;
            json_t *sub;
            json_object_foreach(pats, pat, sub) matched =
                or3(matched, js_pattern_test(a, pat, key, strlen(key)));
            if (matched == JS_YES) continue;
            enum js_tri ok = validate(a, x, val, depth + 1);
            r = and3(r, matched == JS_NO ? ok : (ok == JS_YES ? JS_YES : JS_UNKNOWN));
            if (r == JS_NO) break;
        }
        return r;
    }
    if (!strcmp(k, "propertyNames")) {
        json_object_foreach(v, key, val) {
            json_t *js = json_string(key);
            r = and3(r, js ? validate(a, x, js, depth + 1) : JS_UNKNOWN);
            json_decref(js);
            if (r == JS_NO) break;
        }
        return r;
    }
    if (!strcmp(k, "dependentRequired") || !strcmp(k, "dependentSchemas") ||
        !strcmp(k, "dependencies")) {
        json_t *dep;
        json_object_foreach(x, key, dep) {
            if (!json_object_get(v, key)) continue;
            if (json_is_array(dep)) {
                size_t i;
                json_t *name;
                json_array_foreach(
                    dep, i, name) if (!json_is_string(name) ||
                                      !json_object_get(
                                          v, json_string_value(name))) return json_is_string(name)
                    ? JS_NO
                    : JS_UNKNOWN;
            } else {
                r = and3(r, validate(a, dep, v, depth + 1));
            }
        }
        return r;
    }
    return JS_UNKNOWN; /* unevaluatedProperties */
}

static enum js_tri check_array(struct js_alg *a, json_t *s, const char *k, json_t *x, json_t *v,
                               int depth) {
    if (!json_is_array(v)) return JS_YES;
    size_t n = json_array_size(v);
    enum js_tri r = JS_YES;
    if (!strcmp(k, "minItems") || !strcmp(k, "maxItems")) {
        if (!json_is_integer(x)) return JS_UNKNOWN;
        json_int_t lim = json_integer_value(x);
        return bool3(k[1] == 'i' ? (json_int_t)n >= lim : (json_int_t)n <= lim);
    }
    if (!strcmp(k, "uniqueItems")) {
        if (!json_is_true(x)) return JS_YES;
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++)
                if (js_equal(json_array_get(v, i), json_array_get(v, j))) return JS_NO;
        return JS_YES;
    }
    if (!strcmp(k, "prefixItems") || (!strcmp(k, "items") && json_is_array(x))) {
        for (size_t i = 0; i < n && i < json_array_size(x) && r != JS_NO; i++)
            r = and3(r, validate(a, json_array_get(x, i), json_array_get(v, i), depth + 1));
        return r;
    }
    if (!strcmp(k, "items") || !strcmp(k, "additionalItems")) {
        size_t from = 0;
        json_t *pre = json_object_get(s, "prefixItems");
        json_t *items = json_object_get(s, "items");
        if (!strcmp(k, "additionalItems")) {
            if (!json_is_array(items)) return JS_YES; /* applies after array-form items only */
            from = json_array_size(items);
        } else if (pre) {
            from = json_array_size(pre);
        }
        for (size_t i = from; i < n && r != JS_NO; i++)
            r = and3(r, validate(a, x, json_array_get(v, i), depth + 1));
        return r;
    }
    if (!strcmp(k, "contains")) {
        json_t *mn = json_object_get(s, "minContains"), *mx = json_object_get(s, "maxContains");
        long lo = json_is_integer(mn) ? (long)json_integer_value(mn) : 1;
        long hi = json_is_integer(mx) ? (long)json_integer_value(mx) : -1;
        long yes = 0, unk = 0;
        for (size_t i = 0; i < n; i++) {
            enum js_tri t = validate(a, x, json_array_get(v, i), depth + 1);
            yes += t == JS_YES, unk += t == JS_UNKNOWN;
        }
        if (yes >= lo && (hi < 0 || yes + unk <= hi)) return JS_YES;
        if (yes + unk < lo || (hi >= 0 && yes > hi)) return JS_NO;
        return JS_UNKNOWN;
    }
    if (!strcmp(k, "minContains") || !strcmp(k, "maxContains")) return JS_YES; /* with contains */
    return JS_UNKNOWN; /* unevaluatedItems */
}

static enum js_tri validate(struct js_alg *a, json_t *s, json_t *v, int depth) {
    if (--a->work < 0 || depth > VALIDATE_DEPTH) return JS_UNKNOWN;
    if (json_is_true(s)) return JS_YES;
    if (json_is_false(s)) return JS_NO;
    if (!json_is_object(s)) return JS_UNKNOWN;
    enum js_tri r = JS_YES;
    const char *k;
    json_t *x;
    json_object_foreach(s, k, x) {
        if (r == JS_NO) break;
        if (!strcmp(k, "$ref")) {
            bool outside;
            json_t *t = json_is_string(x) ? resolve_quiet(a, json_string_value(x), &outside) : NULL;
            r = and3(r, t ? validate(a, t, v, depth + 1) : JS_UNKNOWN);
        } else if (!strcmp(k, "allOf") || !strcmp(k, "anyOf") || !strcmp(k, "oneOf")) {
            if (!json_is_array(x)) {
                r = JS_UNKNOWN;
                continue;
            }
            int yes = 0, unk = 0;
            size_t i;
            json_t *sub;
            enum js_tri all = JS_YES, any = JS_NO;
            json_array_foreach(x, i, sub) {
                enum js_tri t = validate(a, sub, v, depth + 1);
                all = and3(all, t), any = or3(any, t);
                yes += t == JS_YES, unk += t == JS_UNKNOWN;
            }
            if (k[1] == 'l')
                r = and3(r, all);
            else if (k[1] == 'n')
                r = and3(r, any);
            else
                r = and3(r, yes >= 2 ? JS_NO : unk ? JS_UNKNOWN : bool3(yes == 1));
        } else if (!strcmp(k, "not")) {
            r = and3(r, not3(validate(a, x, v, depth + 1)));
        } else if (!strcmp(k, "if")) {
            json_t *th = json_object_get(s, "then"), *el = json_object_get(s, "else");
            enum js_tri c = validate(a, x, v, depth + 1);
            enum js_tri t = th ? validate(a, th, v, depth + 1) : JS_YES;
            enum js_tri e = el ? validate(a, el, v, depth + 1) : JS_YES;
            r = and3(r, c == JS_YES ? t : c == JS_NO ? e : t == e ? t : JS_UNKNOWN);
        } else if (!strcmp(k, "type")) {
            unsigned m = type_mask(s);
            r = and3(r, bool3((m & value_type(v)) != 0));
        } else if (!strcmp(k, "enum")) {
            bool hit = false;
            size_t i;
            json_t *w;
            json_array_foreach(x, i, w) hit |= js_equal(v, w);
            r = and3(r, json_is_array(x) ? bool3(hit) : JS_UNKNOWN);
        } else if (!strcmp(k, "const")) {
            r = and3(r, bool3(js_equal(v, x)));
        } else {
            unsigned fam = keyword_family(k);
            if (fam == (JS_INT | JS_FRAC))
                r = and3(r, check_number(s, k, x, v));
            else if (fam == JS_STR)
                r = and3(r, check_string(a, k, x, v));
            else if (fam == JS_OBJ || !strcmp(k, "propertyNames") ||
                     !strcmp(k, "dependentRequired") || !strcmp(k, "dependentSchemas") ||
                     !strcmp(k, "dependencies") || !strcmp(k, "unevaluatedProperties"))
                r = and3(r, check_object(a, s, k, x, v, depth));
            else if (fam == JS_ARR || !strcmp(k, "contains") || !strcmp(k, "minContains") ||
                     !strcmp(k, "maxContains") || !strcmp(k, "unevaluatedItems"))
                r = and3(r, check_array(a, s, k, x, v, depth));
            /* anything else: annotations, unknown keywords, then / else without if */
        }
    }
    return r;
}

enum js_tri js_validate(struct js_alg *a, json_t *s, json_t *v) {
    return validate(a, s, v, 0);
}

/* ---- disjointness -------------------------------------------------------------------------- */

struct bound {
    bool set, excl;
    long double v;
};

static void read_bounds(json_t *s, struct bound *lo, struct bound *hi) {
    *lo = *hi = (struct bound){0};
    const char *keys[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        json_t *x = json_object_get(s, keys[i]);
        if (!json_is_number(x)) continue;
        long double v =
            json_is_integer(x) ? (long double)json_integer_value(x) : json_real_value(x);
        struct bound *b = i < 2 ? lo : hi;
        bool excl = i % 2 == 1;
        bool tighter =
            !b->set || (i < 2 ? v > b->v || (v == b->v && excl) : v < b->v || (v == b->v && excl));
        if (tighter) *b = (struct bound){true, excl, v};
    }
}

/* Is [lo1, hi1] ∩ [lo2, hi2] empty (integers only when `ints`)? */
static bool ranges_apart(struct bound lo1, struct bound hi1, struct bound lo2, struct bound hi2,
                         bool ints) {
    if (ints) {
        struct bound *all[4] = {&lo1, &hi1, &lo2, &hi2};
        for (int i = 0; i < 4; i++) {
            struct bound *b = all[i];
            if (!b->set) continue;
            bool is_lo = i % 2 == 0;
            if (is_lo)
                b->v = b->excl ? floorl(b->v) + 1 : ceill(b->v);
            else
                b->v = b->excl ? ceill(b->v) - 1 : floorl(b->v);
            b->excl = false;
        }
    }
    if (lo1.set && hi2.set && (lo1.v > hi2.v || (lo1.v == hi2.v && (lo1.excl || hi2.excl))))
        return true;
    if (lo2.set && hi1.set && (lo2.v > hi1.v || (lo2.v == hi1.v && (lo2.excl || hi1.excl))))
        return true;
    if (lo1.set && hi1.set && (lo1.v > hi1.v || (lo1.v == hi1.v && (lo1.excl || hi1.excl))))
        return true;
    return false;
}

static bool counts_apart(json_t *x, json_t *y, const char *kmin, const char *kmax) {
    json_t *a0 = json_object_get(x, kmin), *a1 = json_object_get(x, kmax),
           *b0 = json_object_get(y, kmin), *b1 = json_object_get(y, kmax);
    if (json_is_integer(a0) && json_is_integer(b1) &&
        json_integer_value(a0) > json_integer_value(b1))
        return true;
    if (json_is_integer(b0) && json_is_integer(a1) &&
        json_integer_value(b0) > json_integer_value(a1))
        return true;
    return false;
}

static bool has_name(json_t *arr, const char *name) {
    size_t i;
    json_t *v;
    json_array_foreach(arr, i,
                       v) if (json_is_string(v) && !strcmp(json_string_value(v), name)) return true;
    return false;
}

/* Does s forbid property `name` (declared false, or not declared under additionalProperties
 * false without patternProperties)? */
static bool forbids(json_t *s, const char *name) {
    json_t *props = json_object_get(s, "properties");
    json_t *p = json_object_get(props, name);
    if (p) return json_is_false(p);
    return json_is_false(json_object_get(s, "additionalProperties")) &&
           !json_object_get(s, "patternProperties");
}

static bool disjoint(struct js_alg *a, json_t *x, json_t *y, int depth);

static bool sub_disjoint(struct js_alg *a, json_t *x, json_t *y, int depth) {
    json_t *fx = js_flatten(a, x), *fy = fx ? js_flatten(a, y) : NULL;
    if (!fx || !fy) {
        a->status = SNUG_OK; /* a question that cannot be answered is "not proven" */
        return false;
    }
    if (json_is_false(fx) || json_is_false(fy)) return true;
    return disjoint(a, fx, fy, depth + 1);
}

static bool type_apart(struct js_alg *a, json_t *x, json_t *y, unsigned t, int depth) {
    if (t & (JS_INT | JS_FRAC)) {
        struct bound l1, h1, l2, h2;
        read_bounds(x, &l1, &h1);
        read_bounds(y, &l2, &h2);
        return ranges_apart(l1, h1, l2, h2, t == JS_INT);
    }
    if (t == JS_STR) return counts_apart(x, y, "minLength", "maxLength");
    if (t == JS_ARR) {
        if (counts_apart(x, y, "minItems", "maxItems")) return true;
        json_t *m1 = json_object_get(x, "minItems"), *m2 = json_object_get(y, "minItems");
        long n =
            json_is_integer(m1) && json_is_integer(m2)
                ? (long)(json_integer_value(m1) < json_integer_value(m2) ? json_integer_value(m1)
                                                                         : json_integer_value(m2))
                : 0;
        json_t *p1 = json_object_get(x, "prefixItems"), *p2 = json_object_get(y, "prefixItems");
        json_t *i1 = json_object_get(x, "items"), *i2 = json_object_get(y, "items");
        for (long i = 0; i < n && i < 8; i++) {
            json_t *e1 = (size_t)i < json_array_size(p1) ? json_array_get(p1, (size_t)i) : i1;
            json_t *e2 = (size_t)i < json_array_size(p2) ? json_array_get(p2, (size_t)i) : i2;
            if (e1 && e2 && sub_disjoint(a, e1, e2, depth)) return true;
        }
        return false;
    }
    if (t == JS_OBJ) {
        if (counts_apart(x, y, "minProperties", "maxProperties")) return true;
        json_t *rx = json_object_get(x, "required"), *ry = json_object_get(y, "required");
        size_t i;
        json_t *nm;
        json_array_foreach(rx, i, nm) {
            if (!json_is_string(nm)) continue;
            const char *name = json_string_value(nm);
            if (forbids(y, name)) return true;
            if (!has_name(ry, name)) continue;
            json_t *sx = json_object_get(json_object_get(x, "properties"), name);
            json_t *sy = json_object_get(json_object_get(y, "properties"), name);
            if (sx && sy && !json_object_get(x, "patternProperties") &&
                !json_object_get(y, "patternProperties") && sub_disjoint(a, sx, sy, depth))
                return true;
        }
        json_array_foreach(ry, i, nm) if (json_is_string(nm) &&
                                          forbids(x, json_string_value(nm))) return true;
        return false;
    }
    return false; /* null, boolean: only their enums tell them apart */
}

/* No document generated for x validates under y. */
static bool half(struct js_alg *a, json_t *x, json_t *y, int depth) {
    json_t *vx = value_set(x), *vy = value_set(y);
    bool done = false, ok = false;
    if (vx) { /* x writes only these values */
        ok = true;
        size_t i;
        json_t *v;
        json_array_foreach(vx, i, v) if (js_validate(a, y, v) != JS_NO) ok = false;
        done = true;
    } else if (vy) { /* y takes only these: none of them may be valid under x */
        ok = true;
        size_t i;
        json_t *v;
        json_array_foreach(vy, i, v) if (js_validate(a, x, v) != JS_NO) ok = false;
        done = ok;
    }
    json_decref(vx);
    json_decref(vy);
    if (done) return ok;
    unsigned T = js_gen_types(x) & js_sem_types(y);
    for (unsigned bit = 1; bit <= JS_FRAC; bit <<= 1) {
        if (!(T & bit)) continue;
        unsigned t = bit;
        if (bit == JS_FRAC) t = JS_INT | JS_FRAC;
        if (!type_apart(a, x, y, t, depth)) return false;
    }
    return true;
}

/* The branches of a flattened schema's anyOf / oneOf, each merged with its siblings, applied
 * to f; false when one is not proven. */
static bool each_branch(struct js_alg *a, json_t *s, json_t *other, bool s_first, int depth) {
    json_t *list = json_object_get(s, "anyOf");
    if (!list) list = json_object_get(s, "oneOf");
    json_t *sib = keep(a, json_copy(s));
    if (!sib) return false;
    json_object_del(sib, "anyOf");
    json_object_del(sib, "oneOf");
    size_t i;
    json_t *b;
    json_array_foreach(list, i, b) {
        json_t *fb = js_flatten(a, b);
        json_t *m = fb ? js_merge(a, sib, fb) : NULL;
        if (!m) {
            a->status = SNUG_OK;
            return false;
        }
        if (json_is_false(m)) continue;
        if (!(s_first ? disjoint(a, m, other, depth + 1) : disjoint(a, other, m, depth + 1)))
            return false;
    }
    return true;
}

static bool disjoint(struct js_alg *a, json_t *x, json_t *y, int depth) {
    if (depth > 6 || --a->work < 0) return false;
    if (json_is_false(x) || json_is_false(y)) return true;
    if (!json_is_object(x) || !json_is_object(y)) return false;
    if (json_object_get(x, "anyOf") || json_object_get(x, "oneOf"))
        return each_branch(a, x, y, true, depth);
    if (json_object_get(y, "anyOf") || json_object_get(y, "oneOf"))
        return each_branch(a, y, x, false, depth);
    return half(a, x, y, depth) && half(a, y, x, depth);
}

bool js_disjoint(struct js_alg *a, json_t *x, json_t *y) {
    struct snug_err saved = *a->err;
    int status = a->status;
    bool r = disjoint(a, x, y, 0);
    *a->err = saved; /* failed sub-questions leave no error behind */
    a->status = status;
    return r;
}
