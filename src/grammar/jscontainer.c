/* jscontainer.c — JSON Schema objects and arrays → GBNF rules, for the generator of
 * jschema.c: properties in declared order (required ones always, optional ones maybe),
 * additionalProperties / patternProperties / propertyNames for the keys a schema leaves open,
 * min/maxProperties as (property, count) states; items / prefixItems / contains with their
 * counts, uniqueItems over a small finite set of values.
 * Invariant: as jschema.c's — every rule's language is a subset of the documents the schema
 * accepts, and a keyword that cannot be written exactly is refused, naming it.
 * Read next: jschema.c (the core these calls come back to), jschema_impl.h (struct js_gen).
 */
#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"
#include "grammar/jschema_impl.h"

#include "core/core.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT_MAX         1000 /* minItems / maxItems */
#define OBJECT_STATES_MAX 4096 /* (property, count) states under min/maxProperties */
#define UNIQUE_VALUES_MAX 32   /* uniqueItems: items drawn from at most this many values */
#define MAX_DEPTH         64
/* ---- objects ------------------------------------------------------------------------------ */

/* One "key": value pair of a declared property. */
static int gen_pair(struct js_gen *c, const char *key, json_t *sub) {
    size_t old = jg_path_push(c, "properties");
    int v = jg_gen_at(c, sub, key);
    jg_path_pop(c, old);
    if (v < 0) return -1;
    json_t *js = json_string(key);
    if (!js) return jg_invalid(c, "properties", "a property name is not valid UTF-8");
    char *txt = json_dumps(js, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(js);
    if (!txt) return jg_invalid(c, "properties", "cannot serialise a property name");
    int id = jg_rule_begin(c);
    jg_blit(&c->rules, txt, strlen(txt));
    snug_sbuf_printf(&c->rules, " ws \":\" ws r%d", v);
    jg_rule_end(c);
    free(txt);
    return id;
}

/* A key other than the declared names: a JSON string without escapes that is none of them
 * (a trie over the names' code points; once a prefix leaves the trie, any characters follow).
 * Names holding '"', '\' or a control character need no exclusion: such a key never spells
 * them. */
struct trie_node {
    uint32_t cp;
    int child, next; /* first child, next sibling (-1: none) */
    bool terminal;
};

static int gen_other_key(struct js_gen *c, const char *const *names, int n_names) {
    int cap = 1;
    for (int i = 0; i < n_names; i++) cap += (int)strlen(names[i]);
    struct trie_node *t = snug_malloc((size_t)cap * sizeof *t);
    if (!t) return jg_over_budget(c);
    int n = 1;
    t[0] = (struct trie_node){0, -1, -1, false};
    for (int i = 0; i < n_names; i++) {
        bool plain = true;
        for (const unsigned char *p = (const unsigned char *)names[i]; *p; p++)
            if (*p < 0x20 || *p == 0x7F || *p == '"' || *p == '\\') plain = false;
        if (!plain) continue;
        int node = 0;
        for (const char *p = names[i]; *p;) {
            uint32_t cp = jg_utf8_next(&p);
            int ch = t[node].child;
            while (ch >= 0 && t[ch].cp != cp) ch = t[ch].next;
            if (ch < 0) {
                ch = n++;
                t[ch] = (struct trie_node){cp, -1, t[node].child, false};
                t[node].child = ch;
            }
            node = ch;
        }
        t[node].terminal = true;
    }
    int base = c->n_rules;
    c->n_rules += n;
    for (int i = 0; i < n; i++) {
        snug_sbuf_printf(&c->rules, "r%d ::= ", base + i);
        bool first = true;
        if (!t[i].terminal) snug_sbuf_puts(&c->rules, "\"\\\"\""), first = false;
        snug_sbuf_printf(&c->rules, "%s[^\"\\\\\\x00-\\x1F\\x7F", first ? "" : " | ");
        for (int ch = t[i].child; ch >= 0; ch = t[ch].next)
            snug_sbuf_printf(&c->rules, "\\U%08X", t[ch].cp);
        snug_sbuf_puts(&c->rules, "] keychar* \"\\\"\"");
        for (int ch = t[i].child; ch >= 0; ch = t[ch].next)
            snug_sbuf_printf(&c->rules, " | [\\U%08X] r%d", t[ch].cp, base + ch);
        snug_sbuf_puts(&c->rules, "\n");
    }
    snug_free(t);
    int id = jg_rule_begin(c);
    snug_sbuf_printf(&c->rules, "\"\\\"\" r%d", base);
    jg_rule_end(c);
    return id;
}

/* A pattern's fixed start: after '^', the literal characters before the first special one
 * (or one a quantifier applies to). */
static size_t literal_head(const char *p, char *out, size_t cap) {
    size_t n = 0;
    if (*p != '^') return 0;
    for (p++; *p && n + 1 < cap; p++) {
        if (strchr("\\.[]()|*+?{}^$", *p)) break;
        if (p[1] && strchr("*+?{", p[1])) break;
        out[n++] = *p;
    }
    out[n] = 0;
    return n;
}

/* Can no string match both patterns? (Their fixed starts differ.) */
static bool patterns_apart(const char *p, const char *q) {
    char a[64], b[64];
    size_t na = literal_head(p, a, sizeof a), nb = literal_head(q, b, sizeof b);
    for (size_t i = 0; i < na && i < nb; i++)
        if (a[i] != b[i]) return true;
    return false;
}

/* The schema a property name not in `properties` meets: its matching patternProperties, else
 * additionalProperties. A pattern whose match cannot be decided counts as matching (its
 * schema applies on top: stricter, never looser); NULL (refused) where that is impossible. */
static json_t *undeclared_schema(struct js_gen *c, json_t *s, const char *name) {
    json_t *pats = json_object_get(s, "patternProperties");
    json_t *add = json_object_get(s, "additionalProperties");
    json_t *acc = NULL;
    bool sure = false, maybe = false;
    const char *pat;
    json_t *sub;
    json_object_foreach(pats, pat, sub) {
        enum js_tri m = js_pattern_test(jg_alg(c), pat, name, strlen(name));
        if (m == JS_NO) continue;
        sure |= m == JS_YES, maybe |= m == JS_UNKNOWN;
        acc = js_all(jg_alg(c), acc, sub);
    }
    if (sure) return acc;
    if (!add) add = json_true();
    if (maybe && json_is_false(add)) {
        jg_unsupported(c, "required",
                       "cannot tell whether a required property's name matches patternProperties");
        return NULL;
    }
    return js_all(jg_alg(c), acc, add);
}

int jg_gen_object(struct js_gen *c, json_t *s) {
    json_t *props = json_object_get(s, "properties");
    json_t *req = json_object_get(s, "required");
    json_t *add = json_object_get(s, "additionalProperties");
    json_t *pats = json_object_get(s, "patternProperties");
    if (props && !json_is_object(props)) return jg_invalid(c, "properties", "must be an object");
    if (req && !json_is_array(req)) return jg_invalid(c, "required", "must be an array");
    if (pats && !json_is_object(pats))
        return jg_invalid(c, "patternProperties", "must be an object");
    if (add && !json_is_boolean(add) && !json_is_object(add))
        return jg_invalid(c, "additionalProperties", "must be a boolean or a schema");
    size_t i;
    json_t *r;
    json_array_foreach(req, i, r) if (!json_is_string(r)) return jg_invalid(c, "required",
                                                                            "must hold strings");
    long long minp = 0, maxp = -1;
    bool has_min, has_max;
    if (!jg_get_count(s, "minProperties", &minp, &has_min))
        return jg_invalid(c, "minProperties", "must be a non-negative integer");
    if (!jg_get_count(s, "maxProperties", &maxp, &has_max))
        return jg_invalid(c, "maxProperties", "must be a non-negative integer");
    if (!has_max) maxp = -1;
    if (has_max && maxp < minp) return jg_invalid(c, "maxProperties", "is below minProperties");
    /* the declared properties in order, then required names not declared */
    size_t cap = json_object_size(props) + json_array_size(req) + 1;
    const char **name = snug_malloc(cap * sizeof *name);
    json_t **sch = snug_malloc(cap * sizeof *sch);
    bool *isreq = snug_calloc(cap, sizeof *isreq);
    int *pair = snug_malloc(cap * sizeof *pair);
    json_t *req_set = NULL;
    int id = -1, n = 0, n_all = 0;
    if (!name || !sch || !isreq || !pair) {
        jg_over_budget(c);
        goto out;
    }
    const char *key;
    json_t *sub;
    json_object_foreach(props, key, sub) name[n_all] = key, sch[n_all++] = sub;
    /* the required names as a set (a hash: schemas with thousands of them stay linear) */
    req_set = json_object();
    if (!req_set) {
        jg_over_budget(c);
        goto out;
    }
    json_array_foreach(req, i, r) {
        const char *rn = json_string_value(r);
        if (json_object_get(req_set, rn)) continue;
        json_object_set(req_set, rn, json_true());
        if (json_object_get(props, rn)) continue;
        json_t *u = undeclared_schema(c, s, rn);
        if (!u) goto out;
        name[n_all] = rn, sch[n_all++] = u;
    }
    for (int k = 0; k < n_all; k++) {
        isreq[k] = json_object_get(req_set, name[k]) != NULL;
        /* a declared name that a pattern matches meets that pattern's schema too */
        const char *pat;
        json_t *psub;
        json_object_foreach(pats, pat, psub) {
            if (!json_object_get(props, name[k])) break; /* undeclared: done above */
            if (js_pattern_test(jg_alg(c), pat, name[k], strlen(name[k])) != JS_NO)
                sch[k] = js_all(jg_alg(c), sch[k], psub);
        }
        if (!sch[k]) {
            jg_alg_failed(c);
            goto out;
        }
        if (!json_is_false(sch[k]) && js_empty(jg_alg(c), sch[k]))
            sch[k] = json_false(); /* a property that can hold no value is never written */
        if (json_is_false(sch[k]) && isreq[k]) {
            size_t old = jg_path_push(c, "required");
            jg_unsupported(c, name[k], "a required property that no value can satisfy");
            jg_path_pop(c, old);
            goto out;
        }
    }
    /* the pairs written (a property whose schema is false is never written) */
    const char **all_names = name;
    for (int k = 0; k < n_all; k++) {
        if (json_is_false(sch[k])) continue;
        int p = gen_pair(c, name[k], sch[k]);
        if (p < 0) goto out;
        pair[n] = p, isreq[n] = isreq[k], n++;
    }
    /* extra pairs: patternProperties, or additionalProperties */
    int extra = -1;
    if (pats && json_object_size(pats)) {
        int *ids = snug_malloc(json_object_size(pats) * sizeof *ids);
        size_t n_ids = 0;
        if (!ids) {
            jg_over_budget(c);
            goto out;
        }
        const char *pat;
        json_t *psub;
        json_object_foreach(pats, pat, psub) {
            size_t old = jg_path_push(c, "patternProperties");
            /* keys written for the pattern could repeat a declared name (whose own schema would
             * then be bypassed): such a pattern's keys are not written (the declared properties
             * still meet its schema) */
            bool clash = false;
            for (int k = 0; k < n_all && !clash; k++)
                clash = js_pattern_in_grammar(jg_alg(c), pat, name[k], strlen(name[k])) != JS_NO;
            if (clash) {
                jg_path_pop(c, old);
                continue;
            }
            struct snug_sbuf kb = {0};
            char why[120];
            if (gr_regex_emit(&kb, pat, strlen(pat), false, 0, -1, why, sizeof why)) {
                snug_free(kb.data);
                jg_unsupported(c, "patternProperties", why);
                jg_path_pop(c, old);
                snug_free(ids);
                goto out;
            }
            /* the value meets every pattern the key may also match */
            json_t *v = psub;
            const char *q;
            json_t *qsub;
            json_object_foreach(pats, q, qsub) if (strcmp(q, pat) && !patterns_apart(pat, q)) v =
                js_all(jg_alg(c), v, qsub);
            int val = v ? jg_gen_at(c, v, pat) : jg_alg_failed(c);
            jg_path_pop(c, old);
            if (val < 0) {
                snug_free(kb.data);
                snug_free(ids);
                goto out;
            }
            int pid = jg_rule_begin(c);
            snug_sbuf_puts(&c->rules, "\"\\\"\" (");
            snug_sbuf_append(&c->rules, kb.data, kb.len);
            snug_sbuf_printf(&c->rules, ") \"\\\"\" ws \":\" ws r%d", val);
            jg_rule_end(c);
            snug_free(kb.data);
            ids[n_ids++] = pid;
        }
        if (n_ids) extra = jg_rule_union(c, ids, n_ids);
        snug_free(ids);
    } else if ((add && json_is_object(add) && !json_is_true(add)) ||
               (!n_all && (!add || json_is_true(add)))) {
        int v = add && json_is_object(add) ? jg_gen_at(c, add, "additionalProperties") : -2;
        if (v == -1) goto out;
        int kid = n_all ? gen_other_key(c, all_names, n_all) : -2;
        if (kid == -1) goto out;
        extra = jg_rule_begin(c);
        if (kid >= 0)
            snug_sbuf_printf(&c->rules, "r%d", kid);
        else
            snug_sbuf_puts(&c->rules, "string");
        if (v >= 0)
            snug_sbuf_printf(&c->rules, " ws \":\" ws r%d", v);
        else
            snug_sbuf_puts(&c->rules, " ws \":\" ws value");
        jg_rule_end(c);
    }
    /* The pairs in order, each optional one skippable, then the extra pairs; with counts,
     * the state is (next property, pairs written so far): rest(i, k) after something was
     * written (each pair starts with ','), first(i) before anything was. Extra keys may repeat
     * one another, so they count once toward minProperties (a duplicate key is one property);
     * every pair counts toward maxProperties. */
    long long K = has_max ? maxp : minp; /* counts past K behave alike (no maximum) */
    if (K > 0 && (long long)(n + 1) * (K + 1) > OBJECT_STATES_MAX) {
        jg_unsupported(c, has_max ? "maxProperties" : "minProperties",
                       "too many properties and counts to write out (more than 4096 states)");
        goto out;
    }
    int W = (int)K + 1;
    int *req_after = snug_calloc((size_t)n + 1, sizeof *req_after);
    int *rest = snug_malloc((size_t)(n + 1) * (size_t)W * sizeof *rest);
    int *first = snug_malloc(((size_t)n + 1) * sizeof *first);
    if (!req_after || !rest || !first) {
        snug_free(req_after), snug_free(rest), snug_free(first);
        jg_over_budget(c);
        goto out;
    }
    for (int k = n - 1; k >= 0; k--) req_after[k] = req_after[k + 1] + isreq[k];
#define LIVE(ii, kk)                                                                               \
    ((!has_max || (kk) + req_after[ii] <= maxp) && (kk) + (n - (ii)) + (extra >= 0 ? 1 : 0) >= minp)
#define SAT(kk) (has_max ? (kk) : ((kk) < minp ? (kk) : minp))
    for (int ii = n; ii >= 0; ii--) {
        for (int k = 0; k < W; k++) {
            rest[ii * W + k] = -1;
            if (!LIVE(ii, k)) continue;
            int rid = jg_rule_begin(c);
            rest[ii * W + k] = rid;
            if (ii == n) { /* the extra pairs */
                long long e0 = k >= minp ? 0 : 1;
                if (extra < 0 || (has_max && k >= maxp)) snug_sbuf_puts(&c->rules, "\"\"");
                if (extra >= 0 && (!has_max || k < maxp)) {
                    if (has_max)
                        snug_sbuf_printf(&c->rules, "(ws \",\" ws r%d){%lld,%lld}", extra, e0,
                                         maxp - k);
                    else
                        snug_sbuf_printf(&c->rules, "(ws \",\" ws r%d){%lld,}", extra, e0);
                }
            } else {
                bool alt = false;
                int k2 = (int)SAT(k + 1);
                if (k2 < W && LIVE(ii + 1, k2)) {
                    snug_sbuf_printf(&c->rules, "ws \",\" ws r%d r%d", pair[ii],
                                     rest[(ii + 1) * W + k2]);
                    alt = true;
                }
                if (!isreq[ii] && LIVE(ii + 1, k))
                    snug_sbuf_printf(&c->rules, "%sr%d", alt ? " | " : "", rest[(ii + 1) * W + k]);
            }
            jg_rule_end(c);
        }
        first[ii] = -1;
        if (!LIVE(ii, 0)) continue;
        int fid = jg_rule_begin(c);
        first[ii] = fid;
        if (ii == n) {
            bool need = minp > 0; /* k = 0 < minp: one extra pair is needed */
            if (extra < 0 || (has_max && maxp == 0)) snug_sbuf_puts(&c->rules, "\"\"");
            if (extra >= 0 && (!has_max || maxp > 0)) {
                if (!need) snug_sbuf_puts(&c->rules, "(");
                snug_sbuf_printf(&c->rules, "r%d ", extra);
                if (has_max)
                    snug_sbuf_printf(&c->rules, "(ws \",\" ws r%d){0,%lld}", extra, maxp - 1);
                else
                    snug_sbuf_printf(&c->rules, "(ws \",\" ws r%d)*", extra);
                if (!need) snug_sbuf_puts(&c->rules, ")?");
            }
        } else {
            bool alt = false;
            int k1 = (int)SAT(1);
            if (k1 < W && LIVE(ii + 1, k1)) {
                snug_sbuf_printf(&c->rules, "r%d r%d", pair[ii], rest[(ii + 1) * W + k1]);
                alt = true;
            }
            if (!isreq[ii] && LIVE(ii + 1, 0))
                snug_sbuf_printf(&c->rules, "%sr%d", alt ? " | " : "", first[ii + 1]);
        }
        jg_rule_end(c);
    }
#undef LIVE
#undef SAT
    if (first[0] < 0) {
        jg_unsupported(c, has_min ? "minProperties" : "maxProperties",
                       "no object with these properties has that many / that few of them");
    } else {
        id = jg_rule_begin(c);
        snug_sbuf_printf(&c->rules, "\"{\" ws r%d ws \"}\"", first[0]);
        jg_rule_end(c);
    }
    snug_free(req_after), snug_free(rest), snug_free(first);
out:
    json_decref(req_set);
    snug_free(name);
    snug_free(sch);
    snug_free(isreq);
    snug_free(pair);
    return id;
}

/* ---- arrays ------------------------------------------------------------------------------- */

/* The values an item schema allows when they are few (enum / const, boolean, null, a small
 * integer range), each checked against the schema's other keywords; NULL when the set is not
 * known to be finite and small (or a value cannot be checked). */
static json_t *finite_values(struct js_gen *c, json_t *items) {
    json_t *f = js_flatten(jg_alg(c), items);
    if (!f || json_is_false(f) || !json_is_object(f)) {
        c->alg.status = SNUG_OK;
        return NULL;
    }
    if (json_object_get(f, "anyOf") || json_object_get(f, "oneOf")) return NULL;
    json_t *cand = json_array();
    json_t *en = json_object_get(f, "enum"), *cn = json_object_get(f, "const");
    unsigned t = js_gen_types(f);
    if (en || cn) {
        if (json_is_array(en)) json_array_extend(cand, en);
        if (cn) json_array_append(cand, cn);
    } else if (!(t & ~(JS_BOOL | JS_NULL | JS_INT))) {
        if (t & JS_NULL) json_array_append_new(cand, json_null());
        if (t & JS_BOOL)
            json_array_append_new(cand, json_true()), json_array_append_new(cand, json_false());
        if (t & JS_INT) {
            json_t *lo = json_object_get(f, "minimum"), *hi = json_object_get(f, "maximum");
            if (!json_is_integer(lo) || !json_is_integer(hi) ||
                json_integer_value(hi) - json_integer_value(lo) >= UNIQUE_VALUES_MAX) {
                json_decref(cand);
                return NULL;
            }
            for (json_int_t v = json_integer_value(lo); v <= json_integer_value(hi); v++)
                json_array_append_new(cand, json_integer(v));
        }
    } else {
        json_decref(cand);
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(cand, i, v) {
        bool dup = false;
        size_t j;
        json_t *w;
        json_array_foreach(out, j, w) dup |= js_equal(v, w);
        if (dup) continue;
        enum js_tri ok = js_validate(jg_alg(c), f, v);
        if (ok == JS_UNKNOWN || json_array_size(out) >= UNIQUE_VALUES_MAX) {
            json_decref(out);
            out = NULL;
            break;
        }
        if (ok == JS_YES) json_array_append(out, v);
    }
    json_decref(cand);
    return out;
}

/* uniqueItems over a finite item set: the items are written in the order of that set, each at
 * most once (distinct by construction), between mn and mx of them. C(j, k): after k items, the
 * next one (if any) comes from index j on; S(j, k): the next item is the one at j or later. */
static int gen_unique(struct js_gen *c, json_t *vals, long long mn, long long mx) {
    int m = (int)json_array_size(vals);
    long long cap = mx < 0 || mx > m ? m : mx;
    if (mn > cap) return jg_unsupported(c, "minItems", "more distinct items than the items allow");
    int *lit = snug_malloc((size_t)m * sizeof *lit);
    int W = (int)cap + 1;
    int *S = snug_malloc((size_t)(m + 1) * (size_t)W * sizeof *S);
    int *C = snug_malloc((size_t)(m + 1) * (size_t)W * sizeof *C);
    int id = -1;
    if (!lit || !S || !C) {
        jg_over_budget(c);
        goto out;
    }
    for (int j = 0; j < m; j++) {
        lit[j] = jg_gen_literal(c, json_array_get(vals, (size_t)j));
        if (lit[j] < 0) goto out;
    }
    /* liveness and rules from the end: C(j, k) live when k >= mn or S(j, k) is; S(j, k) when
     * some t >= j has C(t + 1, k + 1) live */
    for (int j = m; j >= 0; j--) {
        for (int k = W - 1; k >= 0; k--) {
            int s_id = -1;
            if (j < m && k < cap) {
                bool take = C[(j + 1) * W + k + 1] >= 0;
                bool later = S[(j + 1) * W + k] >= 0;
                if (take || later) {
                    s_id = jg_rule_begin(c);
                    if (take)
                        snug_sbuf_printf(&c->rules, "r%d r%d", lit[j], C[(j + 1) * W + k + 1]);
                    if (later)
                        snug_sbuf_printf(&c->rules, "%sr%d", take ? " | " : "", S[(j + 1) * W + k]);
                    jg_rule_end(c);
                }
            }
            S[j * W + k] = s_id;
            int c_id = -1;
            if (k >= mn || s_id >= 0) {
                c_id = jg_rule_begin(c);
                if (k >= mn) snug_sbuf_puts(&c->rules, "\"\"");
                if (s_id >= 0)
                    snug_sbuf_printf(&c->rules, "%sws \",\" ws r%d", k >= mn ? " | " : "", s_id);
                jg_rule_end(c);
            }
            C[j * W + k] = c_id;
        }
    }
    id = jg_rule_begin(c);
    if (S[0] < 0)
        snug_sbuf_puts(&c->rules, "\"[\" ws \"]\"");
    else
        snug_sbuf_printf(&c->rules, "\"[\" ws %sr%d%s ws \"]\"", mn == 0 ? "(" : "", S[0],
                         mn == 0 ? ")?" : "");
    jg_rule_end(c);
out:
    snug_free(lit);
    snug_free(S);
    snug_free(C);
    return id;
}

int jg_gen_array(struct js_gen *c, json_t *s) {
    json_t *items = json_object_get(s, "items");
    json_t *prefix = json_object_get(s, "prefixItems");
    if (prefix && !json_is_array(prefix)) return jg_invalid(c, "prefixItems", "must be an array");
    if (items && !json_is_boolean(items) && !json_is_object(items))
        return jg_invalid(c, "items", "must be a schema");
    long long mn = 0, mx = -1;
    bool has_mn, has_mx;
    if (!jg_get_count(s, "minItems", &mn, &has_mn))
        return jg_invalid(c, "minItems", "must be a non-negative integer");
    if (!jg_get_count(s, "maxItems", &mx, &has_mx))
        return jg_invalid(c, "maxItems", "must be a non-negative integer");
    if (!has_mx) mx = -1;
    if (has_mx && mx < mn) return jg_invalid(c, "maxItems", "is below minItems");
    if (mn > COUNT_MAX || mx > COUNT_MAX)
        return jg_unsupported(c, has_mx ? "maxItems" : "minItems", "counts above 1000");
    long long n_pre = (long long)json_array_size(prefix);
    if (items && !json_is_false(items) && js_empty(jg_alg(c), items))
        items = json_false(); /* items that can hold no value: only the prefix */
    for (long long i = 0; i < n_pre; i++)
        if (js_empty(jg_alg(c), json_array_get(prefix, (size_t)i))) { /* no item can be at i */
            n_pre = i;
            items = json_false();
            break;
        }
    if (json_is_false(items) && (mx < 0 || mx > n_pre)) mx = n_pre;
    if (mx >= 0 && mn > mx)
        return jg_unsupported(c, "minItems", "more items than the items the schema allows");
    json_t *uq = json_object_get(s, "uniqueItems");
    if (uq && !json_is_boolean(uq)) return jg_invalid(c, "uniqueItems", "must be a boolean");
    if (json_is_true(uq) && !(mx >= 0 && mx <= 1)) {
        json_t *vals = prefix || !items ? NULL : finite_values(c, items);
        if (!vals)
            return jg_unsupported(c, "uniqueItems",
                                  "distinct items can be written only when they come from a small "
                                  "finite set (an enum / const, booleans, null, or at most 32 "
                                  "integers) and without prefixItems");
        int id = gen_unique(c, vals, mn, mx);
        json_decref(vals);
        return id;
    }
    if (mx == 0) return jg_rule_text(c, "\"[\" ws \"]\"");
    long long n_el = mx >= 0 && mx < n_pre ? mx : n_pre; /* prefix items that can appear */
    int *el = snug_malloc(((size_t)n_el + 1) * sizeof *el);
    if (!el) return jg_over_budget(c);
    for (long long i = 0; i < n_el; i++) {
        char seg[40];
        snprintf(seg, sizeof seg, "prefixItems/%lld", i);
        el[i] = jg_gen_at(c, json_array_get(prefix, (size_t)i), seg);
        if (el[i] < 0) {
            snug_free(el);
            return -1;
        }
    }
    /* the items after the prefix: their rule, or "value"; none when items is false or the
     * maximum is reached by the prefix */
    char rest_item[24] = "";
    if (!json_is_false(items) && (mx < 0 || mx > n_pre)) {
        if (items && json_is_object(items)) {
            int v = jg_gen_at(c, items, "items");
            if (v < 0) {
                snug_free(el);
                return -1;
            }
            snprintf(rest_item, sizeof rest_item, "r%d", v);
        } else {
            snprintf(rest_item, sizeof rest_item, "value");
        }
    }
    /* tail(i): after i items (i >= 1) */
    int tail_next = -1; /* tail(i + 1) */
    int first_id = -1;
    for (long long i = n_el; i >= 1; i--) {
        int t = jg_rule_begin(c);
        if (i == n_el && rest_item[0]) { /* the items after the prefix, as a repetition */
            long long lo = mn > i ? mn - i : 0;
            if (mx < 0)
                snug_sbuf_printf(&c->rules, "(ws \",\" ws %s){%lld,}", rest_item, lo);
            else
                snug_sbuf_printf(&c->rules, "(ws \",\" ws %s){%lld,%lld}", rest_item, lo, mx - i);
        } else {
            if (i >= mn) snug_sbuf_puts(&c->rules, "\"\"");
            if (i < n_el)
                snug_sbuf_printf(&c->rules, "%sws \",\" ws r%d r%d", i >= mn ? " | " : "", el[i],
                                 tail_next);
        }
        jg_rule_end(c);
        tail_next = t;
    }
    int id = jg_rule_begin(c);
    if (n_el > 0) {
        first_id = el[0];
        snug_sbuf_printf(&c->rules, "\"[\" ws %sr%d r%d%s ws \"]\"", mn == 0 ? "(" : "", first_id,
                         tail_next, mn == 0 ? ")?" : "");
    } else if (rest_item[0]) {
        long long lo = mn > 1 ? mn - 1 : 0;
        snug_sbuf_printf(&c->rules, "\"[\" ws %s%s ", mn == 0 ? "(" : "", rest_item);
        if (mx < 0)
            snug_sbuf_printf(&c->rules, "(ws \",\" ws %s){%lld,}", rest_item, lo);
        else
            snug_sbuf_printf(&c->rules, "(ws \",\" ws %s){%lld,%lld}", rest_item, lo, mx - 1);
        snug_sbuf_printf(&c->rules, "%s ws \"]\"", mn == 0 ? ")?" : "");
    } else {
        snug_sbuf_puts(&c->rules, "\"[\" ws \"]\""); /* mn == 0 here */
    }
    jg_rule_end(c);
    snug_free(el);
    return id;
}
