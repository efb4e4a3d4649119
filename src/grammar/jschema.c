/* jschema.c — JSON Schema → GBNF text (then compiled by gbnf.c like any grammar).
 *
 * Owns: the translation (keyword meanings from the JSON Schema 2020-12 core and validation
 * specifications, json-schema.org; draft-04..07 forms read as those drafts define them). The
 * output is compact JSON with at most one optional space after ',' and ':' (a small model
 * cannot pad forever), integers of at most 16 digits, numbers of at most 16 integer and 16
 * fraction digits, and object properties in the schema's declared order; optional properties
 * may be left out.
 * How a schema is read: $ref siblings and allOf are folded into one schema first (jsalg.c: the
 * draft 2019-09 reading, which also holds under older drafts since it only adds constraints);
 * keywords beside anyOf / oneOf are merged into every branch; oneOf is written only when its
 * branches are proven pairwise disjoint (so a document matches exactly one); enum / const
 * values are kept only when they satisfy the keywords beside them; without `type`, the types
 * whose keywords appear are written (`properties` → objects, `minLength` → strings, ...), all
 * of them when none do. Number bounds and multipleOf are exact (jsnum.c). Every validation
 * keyword is translated or refused: SNUG_ERR_UNSUPPORTED naming the keyword and its JSON path,
 * so a client never gets output the schema rejects; keywords no draft defines (annotations,
 * vendor extensions) have no effect on validity and are ignored, as the specification says.
 * Cost before work: the schema text is measured (bytes, values, nesting) in one pass before it
 * is parsed, and the generated rules and grammar text are budgeted while they are written.
 * Invariant: the grammar's language is a subset of the documents valid under the schema (for
 * every keyword it accepts); each generated rule is written once; $ref targets and folded
 * schemas get their rule name before their body is generated, so recursive schemas terminate.
 * Files: this one holds the generator's core (rules, memo, budgets, $ref), literals, strings,
 * numbers, enum / const, types and unions, and the schema entry point; jscontainer.c objects
 * and arrays; jstools.c the tool-call grammars (snug_tools_to_gbnf). They share struct js_gen
 * and the jg_* calls of jschema_impl.h.
 * Read next: jsalg.c (folding, disjointness, validation), jsnum.c (numbers), regex.c
 * (`pattern`), jscontainer.c, jstools.c, gbnf.c.
 */
#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"
#include "grammar/jschema_impl.h"

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
void jg_blit_body(struct snug_sbuf *b, const char *s, size_t n) {
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
void jg_blit(struct snug_sbuf *b, const char *s, size_t n) {
    snug_sbuf_puts(b, "\"");
    jg_blit_body(b, s, n);
    snug_sbuf_puts(b, "\"");
}

#define MAX_DEPTH 64
/* Cost limits, checked before and while the grammar is written (each is a 400 naming it). */
#define SCHEMA_MAX_BYTES   (1u << 20) /* the schema text (as large as a grammar may be) */
#define SCHEMA_MAX_VALUES  65536      /* JSON values in the schema text */
#define SCHEMA_MAX_NESTING 256        /* JSON nesting of the schema text */
#define GRAMMAR_MAX_BYTES  (1u << 20) /* generated grammar text (the compiler's own limit) */
#define RULES_MAX          30000      /* generated rules (the compiler allows 32768 in all) */
#define ALG_WORK           200000     /* steps of the validity / disjointness questions */
#define STRING_MAX_LEN     10000      /* a longer maxLength is written as this many characters */

int jg_unsupported(struct js_gen *c, const char *keyword, const char *why) {
    c->status =
        snug_err_set(c->err, SNUG_ERR_UNSUPPORTED, "json schema: '%s' at %s is not supported%s%s",
                     keyword, c->path, why ? ": " : "", why ? why : "");
    return -1;
}

int jg_invalid(struct js_gen *c, const char *keyword, const char *why) {
    c->status = snug_err_set(c->err, SNUG_ERR_INVALID, "json schema: '%s' at %s: %s", keyword,
                             c->path, why);
    return -1;
}

int jg_over_budget(struct js_gen *c) {
    if (c->rules.oom) {
        c->status = snug_err_set(c->err, SNUG_ERR_NOMEM, "json schema: out of memory");
        return -1;
    }
    c->status = snug_err_set(c->err, SNUG_ERR_BUDGET,
                             "json schema: the grammar for it would be larger than the limit "
                             "(%u bytes of grammar text, %d rules); stopped at %s",
                             GRAMMAR_MAX_BYTES, RULES_MAX, c->path);
    return -1;
}

static bool over(struct js_gen *c) {
    return c->rules.oom || c->rules.len > GRAMMAR_MAX_BYTES ||
           c->n_rules + c->helper_rules > RULES_MAX;
}

/* The algebra's context, in step with this one (the tools path changes c->root per tool). */
struct js_alg *jg_alg(struct js_gen *c) {
    if (!c->alg_ready) {
        c->alg.work = ALG_WORK;
        c->alg_ready = true;
    }
    c->alg.root = c->root;
    c->alg.err = c->err;
    c->alg.path = c->path;
    c->alg.status = SNUG_OK;
    return &c->alg;
}

/* After an algebra call returned NULL: its refusal becomes ours. */
int jg_alg_failed(struct js_gen *c) {
    c->status = c->alg.status ? c->alg.status : SNUG_ERR_INVALID;
    return -1;
}

void jg_ctx_free(struct js_gen *c) {
    snug_free(c->memo);
    snug_free(c->memo_index);
    c->memo_index = NULL;
    c->memo_cap = 0;
    snug_free(c->memo_keys.data);
    c->memo = NULL;
    c->memo_keys = (struct snug_sbuf){0};
    c->n_refs = c->cap_refs = 0;
    js_alg_free(&c->alg);
}

/* Start rule r<id> ::= ...; returns the id. */
int jg_rule_begin(struct js_gen *c) {
    int id = c->n_rules++;
    snug_sbuf_printf(&c->rules, "r%d ::= ", id);
    return id;
}

void jg_rule_end(struct js_gen *c) {
    snug_sbuf_puts(&c->rules, "\n");
}

/* A rule whose body is the given text. */
int jg_rule_text(struct js_gen *c, const char *body) {
    int id = jg_rule_begin(c);
    snug_sbuf_puts(&c->rules, body);
    jg_rule_end(c);
    return id;
}

/* A rule for the union of the rules ids[0..n). */
int jg_rule_union(struct js_gen *c, const int *ids, size_t n) {
    if (n == 1) return ids[0];
    int id = jg_rule_begin(c);
    for (size_t i = 0; i < n; i++) snug_sbuf_printf(&c->rules, "%sr%d", i ? " | " : "", ids[i]);
    jg_rule_end(c);
    return id;
}

/* Push a path segment for error messages; returns the old length. */
size_t jg_path_push(struct js_gen *c, const char *seg) {
    size_t old = strlen(c->path);
    snprintf(c->path + old, sizeof c->path - old, "/%s", seg);
    return old;
}

void jg_path_pop(struct js_gen *c, size_t old) {
    c->path[old] = 0;
}

int jg_gen_at(struct js_gen *c, json_t *s, const char *seg) {
    size_t old = jg_path_push(c, seg);
    int r = jg_gen(c, s);
    jg_path_pop(c, old);
    return r;
}

/* ---- memo ------------------------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) {
    return snug_fnv1a(SNUG_FNV_OFFSET, s, n);
}

/* The memo's index: an open-addressing table of entry numbers + 1 (0 empty), a power of two in
 * size, at least twice the entries. */
static void memo_index_put(struct js_gen *c, int entry);

/* After the memo was emptied (n_refs set back), the index starts over. */
static void memo_sync(struct js_gen *c) {
    if (c->memo_indexed <= c->n_refs) return;
    memset(c->memo_index, 0, c->memo_cap * sizeof *c->memo_index);
    c->memo_indexed = 0;
    for (int i = 0; i < c->n_refs; i++) memo_index_put(c, i);
}

static int memo_find(struct js_gen *c, const char *key, size_t n) {
    if (!c->memo_cap) return -1;
    memo_sync(c);
    uint64_t h = hash_bytes(key, n);
    for (size_t i = h & (c->memo_cap - 1);; i = (i + 1) & (c->memo_cap - 1)) {
        int k = c->memo_index[i];
        if (!k) return -1;
        struct memo_entry *e = &c->memo[k - 1];
        if (e->hash == h && e->key_len == n && !memcmp(c->memo_keys.data + e->key, key, n))
            return e->rule;
    }
}

static void memo_index_put(struct js_gen *c, int entry) {
    c->memo_indexed++;
    for (size_t i = c->memo[entry].hash & (c->memo_cap - 1);; i = (i + 1) & (c->memo_cap - 1))
        if (!c->memo_index[i]) {
            c->memo_index[i] = entry + 1;
            return;
        }
}

static bool memo_add(struct js_gen *c, const char *key, size_t n, int rule) {
    if (c->memo_cap) memo_sync(c);
    if (c->n_refs == c->cap_refs) {
        int cap = c->cap_refs ? 2 * c->cap_refs : 32;
        struct memo_entry *m = snug_malloc((size_t)cap * sizeof *m);
        int *index = snug_calloc((size_t)cap * 2, sizeof *index);
        if (!m || !index) {
            snug_free(m);
            snug_free(index);
            return false;
        }
        if (c->n_refs) memcpy(m, c->memo, (size_t)c->n_refs * sizeof *m);
        snug_free(c->memo);
        snug_free(c->memo_index);
        c->memo = m, c->cap_refs = cap;
        c->memo_index = index, c->memo_cap = (size_t)cap * 2;
        c->memo_indexed = 0;
        for (int i = 0; i < c->n_refs; i++) memo_index_put(c, i);
    }
    size_t off = c->memo_keys.len;
    snug_sbuf_append(&c->memo_keys, key, n);
    if (c->memo_keys.oom) return false;
    c->memo[c->n_refs] = (struct memo_entry){off, n, hash_bytes(key, n), rule};
    memo_index_put(c, c->n_refs++);
    return true;
}

/* ---- literals ----------------------------------------------------------------------------- */

/* A rule matching exactly the JSON value v (serialised compactly). */
int jg_gen_literal(struct js_gen *c, const json_t *v) {
    char *txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!txt) return jg_invalid(c, "const", "cannot serialise the value");
    int id = jg_rule_begin(c);
    jg_blit(&c->rules, txt, strlen(txt));
    jg_rule_end(c);
    free(txt); /* jansson's allocation */
    return id;
}

/* The code point at *p (UTF-8, valid: jansson checked it); *p moves past it. */
uint32_t jg_utf8_next(const char **p) {
    const unsigned char *s = (const unsigned char *)*p;
    uint32_t c = s[0];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    if (n > 1) {
        c &= 0x7Fu >> n;
        for (int i = 1; i < n && s[i]; i++) c = (c << 6) | (s[i] & 63);
    }
    *p += n;
    return c;
}

/* A rule for the union of literal texts (distinct), written as a trie over their characters
 * (whole UTF-8 sequences: GBNF literals are text) so that values sharing a prefix ("005-001",
 * "005-002", ...) keep one parse alive, not one per value: a long enum would otherwise hold
 * the matcher's stacks at once. */
struct lit_node {
    int child, next; /* first child, next sibling (-1: none) */
    const char *ch;  /* the character's bytes (in one of the texts) */
    int ch_len;
    bool terminal;
    int rule; /* the rule of this node, once written (-1: not yet) */
};

static int lit_rule(struct js_gen *c, struct lit_node *t, int node) {
    if (t[node].rule >= 0) return t[node].rule;
    /* children's rules first (each written whole on its own line) */
    for (int ch = t[node].child; ch >= 0; ch = t[ch].next) {
        int end = ch;
        while (!t[end].terminal && t[end].child >= 0 && t[t[end].child].next < 0)
            end = t[end].child;
        if (t[end].child >= 0) lit_rule(c, t, end);
    }
    int id = jg_rule_begin(c);
    t[node].rule = id;
    bool first = true;
    if (t[node].terminal) snug_sbuf_puts(&c->rules, "\"\""), first = false;
    for (int ch = t[node].child; ch >= 0; ch = t[ch].next) {
        snug_sbuf_puts(&c->rules, first ? "\"" : " | \"");
        first = false;
        int end = ch;
        for (;;) {
            jg_blit_body(&c->rules, t[end].ch, (size_t)t[end].ch_len);
            if (t[end].terminal || t[end].child < 0 || t[t[end].child].next >= 0) break;
            end = t[end].child;
        }
        snug_sbuf_puts(&c->rules, "\"");
        if (t[end].child >= 0) snug_sbuf_printf(&c->rules, " r%d", t[end].rule);
    }
    jg_rule_end(c);
    return id;
}

static int rule_literals(struct js_gen *c, char *const *texts, size_t n) {
    size_t cap = 1;
    for (size_t i = 0; i < n; i++) cap += strlen(texts[i]);
    struct lit_node *t = snug_malloc(cap * sizeof *t);
    if (!t) return jg_over_budget(c);
    int nn = 1;
    t[0] = (struct lit_node){-1, -1, "", 0, false, -1};
    for (size_t i = 0; i < n; i++) {
        int node = 0;
        for (const char *p = texts[i]; *p;) {
            const char *q = p;
            jg_utf8_next(&q);
            int len = (int)(q - p);
            int ch = t[node].child;
            while (ch >= 0 && (t[ch].ch_len != len || memcmp(t[ch].ch, p, (size_t)len)))
                ch = t[ch].next;
            if (ch < 0) {
                ch = nn++;
                t[ch] = (struct lit_node){-1, t[node].child, p, len, false, -1};
                t[node].child = ch;
            }
            node = ch;
            p = q;
        }
        t[node].terminal = true;
    }
    int id = lit_rule(c, t, 0);
    snug_free(t);
    return id;
}

/* Non-annotation keywords other than `except`: does the schema constrain anything else? */
static bool only_annotations_besides(json_t *s, const char *except) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (!strcmp(k, except)) continue;
        if (js_is_translated(k) || js_is_refused(k)) return false;
    }
    return true;
}

bool jg_get_count(json_t *s, const char *k, long long *out, bool *has) {
    json_t *v = json_object_get(s, k);
    *has = false;
    if (!v) return true;
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
        json_real_value(v) >= 0 && json_real_value(v) < 1e15) {
        *out = (long long)json_real_value(v); /* 3.0: an integer written as a real */
        *has = true;
        return true;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = json_integer_value(v);
    *has = true;
    return true;
}

/* ---- strings ------------------------------------------------------------------------------ */

/* The formats written by a grammar (each a subset of what the format's RFC allows, so every
 * output passes a validator that checks it), with the lengths of what the grammar writes.
 * `body`: GBNF over the BASE rules. */
static const struct {
    const char *name, *body;
    long lo, hi;
} FORMATS[] = {
    {"date", "date", 10, 10},
    {"time", "time", 9, 21},
    {"date-time", "date \"T\" time", 20, 32},
    {"uuid", "hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}", 36, 36},
    {"email", "email", 6, 206},
    {"idn-email", "email", 6, 206},
    {"ipv4", "octet \".\" octet \".\" octet \".\" octet", 7, 15},
    {"ip-address", "octet \".\" octet \".\" octet \".\" octet", 7, 15}, /* draft 3 */
    {"ipv6", "hex{1,4} (\":\" hex{1,4}){7}", 15, 39},
    {"hostname", "hostname", 1, 91},
    {"host-name", "hostname", 1, 91}, /* draft 3 */
    {"idn-hostname", "hostname", 1, 91},
    {"uri", "uri", 5, 253},
    {"url", "uri", 5, 253},
    {"uri-reference", "uri", 5, 253},
    {"iri", "uri", 5, 253},
    {"iri-reference", "uri", 5, 253},
    {"duration", "\"P\" ([1-9] [0-9]{0,3} [YMWD] | \"T\" [1-9] [0-9]{0,3} [HMS])", 3, 7},
    {"json-pointer", "(\"/\" ([a-zA-Z0-9._-] | \"~\" [01]){0,16}){0,8}", 0, 264},
    {"byte", "([A-Za-z0-9+/]{4}){0,64} ([A-Za-z0-9+/]{2} \"==\" | [A-Za-z0-9+/]{3} \"=\")?", 0,
     260},
    {NULL, NULL, 0, 0},
};

/* Formats a validator may check that no grammar here writes: refused. Every other format
 * name that is not in FORMATS is one no JSON Schema draft defines (semver, int32, ...):
 * an annotation, which the specification says does not constrain the string. */
static const char *FORMATS_REFUSED[] = {"uri-template", "relative-json-pointer",
                                        "regex",        "color",
                                        "utc-millisec", "phone",
                                        "style",        NULL};

static bool format_is_annotation(const char *f) {
    if (!f) return false;
    for (int i = 0; FORMATS[i].name; i++)
        if (!strcmp(FORMATS[i].name, f)) return false;
    for (int i = 0; FORMATS_REFUSED[i]; i++)
        if (!strcmp(FORMATS_REFUSED[i], f)) return false;
    return true;
}

/* A string: JSON-quoted, or `raw` (the bare text, for Qwen's XML tool-call parameters, where a
 * string value is written unquoted and ends at the next '<'). minLength / maxLength count
 * characters: a character is one code point or one escape (the grammar writes no surrogate
 * escapes, so the two counts agree). */
int jg_gen_string_as(struct js_gen *c, json_t *s, bool raw) {
    long long mn = 0, mx = -1;
    bool has_mn, has_mx;
    if (!jg_get_count(s, "minLength", &mn, &has_mn))
        return jg_invalid(c, "minLength", "must be a non-negative integer");
    if (!jg_get_count(s, "maxLength", &mx, &has_mx))
        return jg_invalid(c, "maxLength", "must be a non-negative integer");
    if (!has_mx) mx = -1;
    if (has_mx && mx < mn) return jg_invalid(c, "maxLength", "is below minLength");
    if (mn > STRING_MAX_LEN) return jg_unsupported(c, "minLength", "lengths above 10000");
    if (mx > STRING_MAX_LEN) mx = STRING_MAX_LEN; /* fewer characters: still valid */
    json_t *fmt = json_object_get(s, "format");
    json_t *pat = json_object_get(s, "pattern");
    const char *q = raw ? "" : "\"\\\"\" ";
    const char *q2 = raw ? "" : " \"\\\"\"";
    if (pat) {
        if (!json_is_string(pat)) return jg_invalid(c, "pattern", "must be a string");
        if (fmt && !format_is_annotation(json_string_value(fmt)))
            return jg_unsupported(c, "pattern", "together with format");
        struct snug_sbuf body = {0};
        char why[200];
        if (gr_regex_emit(&body, json_string_value(pat), json_string_length(pat), raw, mn,
                          has_mx ? mx : -1, why, sizeof why)) {
            snug_free(body.data);
            return jg_unsupported(c, "pattern", why);
        }
        int id = jg_rule_begin(c);
        snug_sbuf_printf(&c->rules, "%s", q);
        snug_sbuf_append(&c->rules, body.data, body.len);
        snug_sbuf_printf(&c->rules, "%s", q2);
        jg_rule_end(c);
        snug_free(body.data);
        return id;
    }
    if (fmt && !json_is_string(fmt)) return jg_invalid(c, "format", "must be a string");
    const char *body = NULL, *f = fmt ? json_string_value(fmt) : NULL;
    for (int i = 0; f && FORMATS[i].name && !body; i++) {
        if (strcmp(FORMATS[i].name, f)) continue;
        body = FORMATS[i].body;
        if ((has_mn && FORMATS[i].lo < mn) || (has_mx && FORMATS[i].hi > mx))
            return jg_unsupported(c, "format",
                                  "together with minLength/maxLength that not all of its strings "
                                  "meet");
    }
    for (int i = 0; f && !body && FORMATS_REFUSED[i]; i++)
        if (!strcmp(FORMATS_REFUSED[i], f)) return jg_unsupported(c, "format", f);
    if (body) {
        int id = jg_rule_begin(c);
        snug_sbuf_printf(&c->rules, "%s%s%s", q, body, q2);
        jg_rule_end(c);
        return id;
    }
    const char *ch = raw ? "rawchar" : "char";
    int id = jg_rule_begin(c);
    if (!has_mn && !has_mx)
        snug_sbuf_printf(&c->rules, "%s%s*%s", q, ch, q2);
    else if (mx < 0)
        snug_sbuf_printf(&c->rules, "%s%s{%lld,}%s", q, ch, mn, q2);
    else
        snug_sbuf_printf(&c->rules, "%s%s{%lld,%lld}%s", q, ch, mn, mx, q2);
    jg_rule_end(c);
    return id;
}

static int gen_string(struct js_gen *c, json_t *s) {
    return jg_gen_string_as(c, s, false);
}

/* ---- numbers ------------------------------------------------------------------------------ */

/* A JSON number's exact decimal digits: sign, integer part, fraction without trailing zeros
 * (a fraction longer than 17 digits is cut to 17, see struct gr_dec). false when the integer
 * part has more than `max_digits` digits (*big: the magnitude is at least 10^max_digits). */
static bool exact_decimal(double d, struct gr_dec *out, int max_digits, bool *big) {
    char text[1500];
    *big = false;
    if (d == 0) d = 0; /* -0 → 0 */
    snprintf(text, sizeof text, "%.1074f", d);
    const char *p = text;
    out->neg = *p == '-';
    if (out->neg) p++;
    const char *dot = strchr(p, '.');
    size_t ni = dot ? (size_t)(dot - p) : strlen(p);
    while (ni > 1 && *p == '0') p++, ni--;
    if (ni > (size_t)max_digits) {
        *big = true;
        return false;
    }
    memcpy(out->ip, p, ni);
    out->ip[ni] = 0;
    size_t nf = 0;
    if (dot) {
        const char *f = dot + 1;
        nf = strlen(f);
        while (nf && f[nf - 1] == '0') nf--;
        if (nf > sizeof out->fp - 1) nf = sizeof out->fp - 1;
        memcpy(out->fp, f, nf);
    }
    out->fp[nf] = 0;
    out->set = true;
    if (!strcmp(out->ip, "0") && !nf) out->neg = false;
    return true;
}

/* One side of a decimal range from JSON (inclusive bound x, or exclusive: the next double
 * past it: a decimal text at or past that double reads back as a double past x). A bound
 * beyond the written range (|x| >= 10^15) leaves that side open, or (*empty) nothing. */
static void dec_bound(json_t *x, bool exclusive, bool lower, struct gr_dec *out, bool *empty) {
    *empty = false;
    out->set = false;
    double d = json_is_integer(x) ? (double)json_integer_value(x) : json_real_value(x);
    if (json_is_integer(x) && fabs(d) > 9007199254740992.0) {
        /* beyond 2^53 (past every bounded decimal written): open or empty */
        *empty = lower ? d > 0 : d < 0;
        return;
    }
    if (exclusive) d = nextafter(d, lower ? INFINITY : -INFINITY);
    if (!isfinite(d)) {
        *empty = lower ? d > 0 : d < 0;
        return;
    }
    bool big;
    if (!exact_decimal(d, out, DEC_MAX_DIGITS, &big)) {
        out->set = false;
        *empty = lower ? d > 0 : d < 0; /* a bound past 10^15 on the far side: nothing fits */
    }
}

/* An inclusive integer bound from a JSON number (ceil for a lower bound, floor for an upper
 * one; exclusive ones move one further), clamped to ±(10^digits - 1). */
static long long int_bound(json_t *x, bool exclusive, bool lower, int digits) {
    long long lim = 1;
    for (int i = 0; i < digits; i++) lim *= 10;
    lim -= 1;
    long long v;
    if (json_is_integer(x)) {
        json_int_t i = json_integer_value(x);
        if (i > lim + 1)
            v = lim + 2;
        else if (i < -lim - 1)
            v = -lim - 2;
        else
            v = i;
        if (exclusive) v += lower ? 1 : -1;
    } else {
        double d = json_real_value(x);
        double r =
            lower ? (exclusive ? floor(d) + 1 : ceil(d)) : (exclusive ? ceil(d) - 1 : floor(d));
        if (r > (double)lim + 1)
            v = lim + 2;
        else if (r < (double)(-lim - 1))
            v = -lim - 2;
        else
            v = (long long)r;
    }
    return v;
}

/* The tighter of an inclusive and an exclusive bound on one side (NULL when neither is
 * given); *excl tells which it is. */
static json_t *pick_bound(json_t *incl, json_t *excl_b, bool lower, bool *excl) {
    *excl = false;
    if (!incl && !excl_b) return NULL;
    if (!incl) return *excl = true, excl_b;
    if (!excl_b) return incl;
    int c = js_num_cmp(excl_b, incl);
    if (lower ? c >= 0 : c <= 0) return *excl = true, excl_b;
    return incl;
}

static int gen_number(struct js_gen *c, json_t *s, bool integer) {
    static const char *keys[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    json_t *b[4];
    bool any_bound = false;
    for (int i = 0; i < 4; i++) {
        b[i] = json_object_get(s, keys[i]);
        if (b[i] && !json_is_number(b[i])) return jg_invalid(c, keys[i], "must be a number");
        any_bound |= b[i] != NULL;
    }
    json_t *mo = json_object_get(s, "multipleOf");
    unsigned long long mult = 0;
    bool real_mult = false;
    if (mo) {
        if (!json_is_number(mo) || json_number_value(mo) <= 0)
            return jg_invalid(c, "multipleOf", "must be a number above 0");
        if (json_is_integer(mo)) {
            mult = (unsigned long long)json_integer_value(mo);
        } else {
            double d = json_real_value(mo);
            if (d != floor(d) || d > 9007199254740992.0)
                return jg_unsupported(
                    c, "multipleOf",
                    "a fractional multipleOf (whether a decimal is a multiple of "
                    "it depends on binary floating point, so it cannot be written "
                    "exactly)");
            mult = (unsigned long long)d;
            real_mult = true;
        }
    }
    if (!any_bound && (!mo || (mult == 1 && integer)))
        return jg_rule_text(c, integer ? "integer" : "number");
    bool xlo, xhi;
    json_t *lo_b = pick_bound(b[0], b[1], true, &xlo), *hi_b = pick_bound(b[2], b[3], false, &xhi);
    const char *kw_lo = xlo ? keys[1] : keys[0], *kw_hi = xhi ? keys[3] : keys[2];
    const char *kw = lo_b ? kw_lo : hi_b ? kw_hi : "multipleOf";
    char name[32];
    int id = c->n_rules++;
    snprintf(name, sizeof name, "r%d", id);
    int budget0 = RULES_MAX - c->n_rules - c->helper_rules, budget = budget0, rc;
    if (integer || mo) {
        /* integers only (a number with a multipleOf is written as integers: exact for any
         * validator); with a number type or a real multipleOf, at most 15 digits (exact as
         * doubles) */
        int digits = real_mult || !integer ? DEC_MAX_DIGITS : INT_MAX_DIGITS;
        long long lim = 1;
        for (int i = 0; i < digits; i++) lim *= 10;
        long long lo = -(lim - 1), hi = lim - 1;
        if (lo_b) {
            long long v = int_bound(lo_b, xlo, true, digits);
            if (v > lo) lo = v;
        }
        if (hi_b) {
            long long v = int_bound(hi_b, xhi, false, digits);
            if (v < hi) hi = v;
        }
        if (lo > hi) return jg_invalid(c, kw, "the range holds no integer that can be written");
        rc = gr_int_emit(&c->rules, name, lo, hi, mult, &budget);
        if (rc == -2)
            return jg_unsupported(c, "multipleOf",
                                  "a multipleOf above 256 once its trailing zeros are taken off");
        if (rc == 0)
            return jg_invalid(c, mo ? "multipleOf" : kw, "no integer in the range qualifies");
    } else {
        struct gr_dec lo = {0}, hi = {0};
        bool empty = false;
        if (lo_b) dec_bound(lo_b, xlo, true, &lo, &empty);
        if (empty) return jg_unsupported(c, kw_lo, "a lower bound of 10^15 or more for a number");
        if (hi_b) dec_bound(hi_b, xhi, false, &hi, &empty);
        if (empty) return jg_unsupported(c, kw_hi, "an upper bound of -10^15 or less for a number");
        rc = gr_dec_emit(&c->rules, name, &lo, &hi, &budget);
        if (rc == 0) return jg_invalid(c, kw, "the range is empty");
    }
    c->helper_rules += budget0 - budget;
    if (rc < 0 || budget < 0) return jg_over_budget(c);
    return id;
}

/* ---- enum / const, types, unions ----------------------------------------------------------- */

/* The values of enum / const that satisfy the schema's other keywords. */
static int gen_enum(struct js_gen *c, json_t *s) {
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    const char *kw = en ? "enum" : "const";
    if (en && (!json_is_array(en) || !json_array_size(en)))
        return jg_invalid(c, "enum", "must be a non-empty array");
    json_t *rest = json_copy(s);
    if (!rest) return jg_over_budget(c);
    json_object_del(rest, "enum");
    json_object_del(rest, "const");
    bool check = !only_annotations_besides(rest, "");
    json_t *cand = json_array(), *keep_vals = json_array(), *seen = json_object();
    if (en) json_array_extend(cand, en);
    if (!en) json_array_append(cand, cn);
    char **texts = snug_calloc(json_array_size(cand) + 1, sizeof *texts);
    size_t n = 0, i;
    json_t *v;
    int id = -1;
    if (!texts) {
        jg_over_budget(c);
        goto out;
    }
    json_array_foreach(cand, i, v) {
        if (en && cn && !js_equal(v, cn)) continue;
        /* a value seen before (same canonical text: a hash lookup, so long enums stay
         * linear; equal values spelled apart, 1 and 1.0, may both be written: both valid) */
        char *canon = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
        bool dup = !canon || json_object_get(seen, canon);
        if (canon && !dup) json_object_set(seen, canon, json_true());
        free(canon); /* jansson's allocation */
        if (dup) continue;
        enum js_tri ok = check ? js_validate(jg_alg(c), rest, v) : JS_YES;
        if (ok == JS_UNKNOWN) {
            char why[160];
            snprintf(why, sizeof why,
                     "cannot tell whether value %zu satisfies the keywords beside it (a format, "
                     "a fractional multipleOf, ...)",
                     i);
            jg_unsupported(c, kw, why);
            goto out;
        }
        if (ok == JS_NO) continue;
        json_array_append(keep_vals, v);
        texts[n] = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!texts[n++]) {
            jg_invalid(c, kw, "cannot serialise a value");
            goto out;
        }
    }
    if (!n)
        jg_unsupported(c, kw, "no value satisfies the keywords beside it");
    else
        id = rule_literals(c, texts, n);
out:
    for (size_t k = 0; texts && k < n; k++) free(texts[k]); /* jansson's allocations */
    snug_free(texts);
    json_decref(cand);
    json_decref(keep_vals);
    json_decref(seen);
    json_decref(rest);
    return id;
}

static int gen_plain(struct js_gen *c, json_t *s) {
    json_t *ty = json_object_get(s, "type");
    if (ty) {
        bool ok = json_is_string(ty) || (json_is_array(ty) && json_array_size(ty));
        size_t i;
        json_t *t;
        if (json_is_array(ty)) json_array_foreach(ty, i, t) ok &= json_is_string(t);
        if (!ok) return jg_invalid(c, "type", "must be a string or an array of strings");
        const char *names[] = {"null", "boolean", "object", "array", "string", "integer", "number"};
        json_t *list = json_is_string(ty) ? NULL : ty;
        for (size_t k = 0; k < (list ? json_array_size(list) : 1); k++) {
            const char *nm = json_string_value(list ? json_array_get(list, k) : ty);
            bool known = false;
            for (int q = 0; q < 7; q++) known |= !strcmp(names[q], nm);
            if (!known) return jg_unsupported(c, "type", nm);
        }
    }
    if (json_object_get(s, "enum") || json_object_get(s, "const")) return gen_enum(c, s);
    unsigned t = js_gen_types(s);
    if (t == JS_ALL && !ty) return jg_rule_text(c, "value");
    int ids[6];
    size_t n = 0;
    if (t & JS_OBJ) ids[n++] = jg_gen_object(c, s);
    if (n && ids[n - 1] < 0) return -1;
    if (t & JS_ARR) ids[n++] = jg_gen_array(c, s);
    if (n && ids[n - 1] < 0) return -1;
    if (t & JS_STR) ids[n++] = gen_string(c, s);
    if (n && ids[n - 1] < 0) return -1;
    if (t & (JS_INT | JS_FRAC)) ids[n++] = gen_number(c, s, !(t & JS_FRAC));
    if (n && ids[n - 1] < 0) return -1;
    if (t & JS_BOOL) ids[n++] = jg_rule_text(c, "\"true\" | \"false\"");
    if (t & JS_NULL) ids[n++] = jg_rule_text(c, "\"null\"");
    if (!n) return jg_unsupported(c, "type", "no type is left");
    return jg_rule_union(c, ids, n);
}

static int gen_flat(struct js_gen *c, json_t *s);
static int gen_memo(struct js_gen *c, json_t *key_schema, json_t *flat);

/* A copy of flattened schema s (kept) whose property `name` is false: never written. */
static json_t *forbid(struct js_gen *c, json_t *s, const char *name) {
    json_t *n = js_keep(jg_alg(c), json_copy(s));
    if (!n) return NULL;
    json_t *props = json_object_get(n, "properties");
    json_t *np = js_keep(jg_alg(c), props ? json_copy(props) : json_object());
    if (!np) return NULL;
    json_object_set(np, name, json_false());
    json_object_set(n, "properties", np);
    return n;
}

static bool requires(json_t *s, const char *name) {
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(s, "required"), i,
                       v) if (json_is_string(v) && !strcmp(json_string_value(v), name)) return true;
    return false;
}

/* Two oneOf branches not proven disjoint, made so for what is written: a document written
 * for one must fail the other. When each requires a property the other does not, the other
 * branch's documents leave that property out (a narrower set, still valid for its branch). */
static bool separate(struct js_gen *c, json_t **x, json_t **y, bool *cx, bool *cy) {
    json_t *sides[2] = {*x, *y};
    const char *pick[2] = {NULL, NULL}; /* pick[s]: required by side s, not by the other */
    for (int s = 0; s < 2; s++) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(sides[s], "required"), i, v) {
            if (!json_is_string(v) || requires(sides[1 - s], json_string_value(v))) continue;
            pick[s] = json_string_value(v);
            break;
        }
    }
    if (!pick[0] || !pick[1]) return false;
    json_t *nx = forbid(c, *x, pick[1]), *ny = forbid(c, *y, pick[0]);
    if (!nx || !ny) return false;
    *x = nx, *y = ny, *cx = *cy = true;
    return true;
}

/* anyOf / oneOf: the keywords beside them are merged into every branch; a branch that can
 * hold no value is dropped; oneOf's branches must be proven pairwise disjoint. */
static int gen_union(struct js_gen *c, json_t *s) {
    json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    const char *kw = one ? "oneOf" : "anyOf";
    json_t *list = one ? one : any;
    if ((any && (!json_is_array(any) || !json_array_size(any))) ||
        (one && (!json_is_array(one) || !json_array_size(one))))
        return jg_invalid(c, any && !json_is_array(any) ? "anyOf" : kw,
                          "must be a non-empty array");
    struct js_alg *a = jg_alg(c);
    json_t *sib = json_copy(s);
    if (!sib) return jg_over_budget(c);
    json_object_del(sib, "anyOf");
    json_object_del(sib, "oneOf");
    if (!js_keep(a, sib)) return jg_alg_failed(c);
    if (any && one) { /* oneOf branches, each with the anyOf beside it */
        sib = js_merge(a, sib, js_keep(a, json_pack("{s:O}", "anyOf", any)));
        if (!sib) return jg_alg_failed(c);
    }
    bool plain = only_annotations_besides(sib, "");
    size_t n = json_array_size(list);
    json_t **m = snug_malloc(n * sizeof *m);
    int *ids = snug_malloc(n * sizeof *ids);
    size_t *at = snug_malloc(n * sizeof *at);
    int id = -1;
    size_t k = 0;
    if (!m || !ids || !at) {
        jg_over_budget(c);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        char seg[40];
        snprintf(seg, sizeof seg, "%s/%zu", kw, i);
        size_t old = jg_path_push(c, seg);
        json_t *fb = js_flatten(jg_alg(c), json_array_get(list, i));
        json_t *mi = fb && !plain ? js_merge(jg_alg(c), sib, fb) : fb;
        jg_path_pop(c, old);
        if (!mi) {
            jg_alg_failed(c);
            goto out;
        }
        if (json_is_false(mi) || js_empty(jg_alg(c), mi)) continue; /* a branch with no value */
        m[k] = mi, at[k++] = i;
    }
    if (!k) {
        jg_unsupported(c, kw, "no branch can hold a value together with the keywords beside it");
        goto out;
    }
    bool *changed = snug_calloc(k, sizeof *changed);
    if (!changed) {
        jg_over_budget(c);
        goto out;
    }
    if (one)
        for (size_t i = 0; i < k; i++)
            for (size_t j = i + 1; j < k; j++)
                if (!js_disjoint(jg_alg(c), m[i], m[j]) &&
                    !(separate(c, &m[i], &m[j], &changed[i], &changed[j]) &&
                      js_disjoint(jg_alg(c), m[i], m[j]))) {
                    snug_free(changed);
                    char why[200];
                    snprintf(why, sizeof why,
                             "branches %zu and %zu may both match one document (oneOf needs "
                             "exactly one; no keyword was found that tells them apart)",
                             at[i], at[j]);
                    jg_unsupported(c, "oneOf", why);
                    goto out;
                }
    for (size_t i = 0; i < k; i++) {
        char seg[40];
        snprintf(seg, sizeof seg, "%s/%zu", kw, at[i]);
        size_t old = jg_path_push(c, seg);
        if (++c->depth > MAX_DEPTH) {
            c->depth--;
            jg_path_pop(c, old);
            jg_unsupported(c, "(nesting)", "schemas nested deeper than 64 levels");
            snug_free(changed);
            goto out;
        }
        /* a branch is written as itself when nothing was merged into it (its $refs then name
         * their rules), else as the merged schema */
        ids[i] =
            plain && !changed[i] ? jg_gen(c, json_array_get(list, at[i])) : gen_memo(c, m[i], m[i]);
        c->depth--;
        jg_path_pop(c, old);
        if (ids[i] < 0) {
            snug_free(changed);
            goto out;
        }
    }
    id = jg_rule_union(c, ids, k);
    snug_free(changed);
out:
    snug_free(m);
    snug_free(ids);
    snug_free(at);
    return id;
}

/* A flattened schema (no $ref / allOf at its top). */
static int gen_flat(struct js_gen *c, json_t *s) {
    if (over(c)) return jg_over_budget(c);
    if (json_is_false(s)) return jg_unsupported(c, "false", "a schema that allows nothing");
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) if (js_is_refused(k)) return jg_unsupported(c, k, NULL);
    if (json_object_get(s, "anyOf") || json_object_get(s, "oneOf")) return gen_union(c, s);
    return gen_plain(c, s);
}

/* ---- references and folding ---------------------------------------------------------------- */

static int gen_ref(struct js_gen *c, const char *ref) {
    struct snug_sbuf key = {0};
    snug_sbuf_printf(&key, "$ref:%s", ref);
    if (key.oom) return jg_over_budget(c);
    int id = memo_find(c, key.data, key.len);
    if (id >= 0) {
        snug_free(key.data);
        return id;
    }
    json_t *target = js_resolve(jg_alg(c), ref);
    if (!target) {
        snug_free(key.data);
        return jg_alg_failed(c);
    }
    /* name the target's rule now (a one-line forwarder), so recursion refers back to it */
    id = c->n_rules++;
    bool ok = memo_add(c, key.data, key.len, id);
    snug_free(key.data);
    if (!ok) return jg_over_budget(c);
    size_t old = strlen(c->path);
    snprintf(c->path + old, sizeof c->path - old, "(%s)", ref);
    int body = jg_gen(c, target);
    c->path[old] = 0;
    if (body < 0) return -1;
    snug_sbuf_printf(&c->rules, "r%d ::= r%d\n", id, body);
    return id;
}

/* A rule for schema `flat` remembered by the text of `key_schema` (its rule named first), so
 * that a recursive schema, folded or merged again on the way down, meets its own rule.
 * `flat` NULL: key_schema folded into one (its $ref siblings and allOf, jsalg.c). */
static int gen_memo(struct js_gen *c, json_t *key_schema, json_t *flat) {
    char *key = json_dumps(key_schema, JSON_COMPACT | JSON_SORT_KEYS);
    if (!key) return jg_over_budget(c);
    size_t klen = strlen(key);
    int id = memo_find(c, key, klen);
    if (id >= 0) {
        free(key); /* jansson's allocation */
        return id;
    }
    id = c->n_rules++;
    bool ok = memo_add(c, key, klen, id);
    free(key);
    if (!ok) return jg_over_budget(c);
    json_t *f = flat ? flat : js_flatten(jg_alg(c), key_schema);
    if (!f) return jg_alg_failed(c);
    if (json_is_false(f))
        return jg_unsupported(c, json_object_get(key_schema, "$ref") ? "$ref" : "allOf",
                              "the schemas it joins allow no value together");
    int body = gen_flat(c, f);
    if (body < 0) return -1;
    snug_sbuf_printf(&c->rules, "r%d ::= r%d\n", id, body);
    return id;
}

int jg_gen(struct js_gen *c, json_t *s) {
    if (++c->depth > MAX_DEPTH) {
        c->depth--;
        return jg_unsupported(c, "(nesting)", "schemas nested deeper than 64 levels");
    }
    int id;
    if (over(c)) {
        id = jg_over_budget(c);
    } else if (json_is_true(s)) {
        id = jg_rule_text(c, "value");
    } else if (json_is_false(s)) {
        id = jg_unsupported(c, "false", "a schema that allows nothing");
    } else if (!json_is_object(s)) {
        id = jg_invalid(c, "(schema)", "a schema must be an object or a boolean");
    } else {
        json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
        if (ref && !json_is_string(ref)) {
            id = jg_invalid(c, "$ref", "must be a string");
        } else if (ref && only_annotations_besides(s, "$ref")) {
            id = gen_ref(c, json_string_value(ref));
        } else if (ref || all) {
            id = gen_memo(c, s, NULL);
        } else {
            json_t *f = js_flatten(jg_alg(c), s);
            id = f ? gen_flat(c, f) : jg_alg_failed(c);
        }
    }
    c->depth--;
    return id;
}

/* Cost before work: one pass over the text before it is parsed. Its size, its containers and
 * members ('{', '[' and ',' outside strings: a bound on the values it holds) and its nesting,
 * each against a limit; a 400 names the limit (SNUG_ERR_BUDGET). A schema past these would
 * compile to a grammar past the compiler's own limits anyway: this refuses it before any
 * allocation. */
int snug_json_schema_precheck(const char *text, size_t len, const char *what,
                              struct snug_err *err) {
    if (len > SCHEMA_MAX_BYTES)
        return snug_err_set(err, SNUG_ERR_BUDGET, "%s: %zu bytes, more than the limit of %u", what,
                            len, SCHEMA_MAX_BYTES);
    size_t items = 0;
    int depth = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        if (ch == '"') {
            for (i++; i < len && text[i] != '"'; i++)
                if (text[i] == '\\') i++;
        } else if (ch == '{' || ch == '[') {
            items++;
            if (++depth > SCHEMA_MAX_NESTING)
                return snug_err_set(err, SNUG_ERR_BUDGET,
                                    "%s: nested more than %d levels deep (at byte %zu)", what,
                                    SCHEMA_MAX_NESTING, i);
        } else if (ch == '}' || ch == ']') {
            depth--;
        } else if (ch == ',') {
            items++;
        }
        if (items > SCHEMA_MAX_VALUES)
            return snug_err_set(err, SNUG_ERR_BUDGET,
                                "%s: more than %d values (objects, arrays and their members; "
                                "stopped at byte %zu)",
                                what, SCHEMA_MAX_VALUES, i);
    }
    return SNUG_OK;
}

static const char *BASE =
    "ws ::= \" \"?\n"
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws (string ws \":\" ws value (ws \",\" ws string ws \":\" ws value)*)? ws "
    "\"}\"\n"
    "array ::= \"[\" ws (value (ws \",\" ws value)*)? ws \"]\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    /* one character: unescaped, or an escape other than a surrogate's \\uD800-\\uDFFF (so
     * a character is one code point: minLength / maxLength count alike either way) */
    "char ::= [^\"\\\\\\x00-\\x1F\\x7F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" nonsurrogate)\n"
    "nonsurrogate ::= [0-9a-cA-Ce-fE-F] hex{3} | [dD] [0-7] hex{2}\n"
    "keychar ::= [^\"\\\\\\x00-\\x1F\\x7F]\n"
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
    "octet ::= [0-9] | [1-9] [0-9] | \"1\" [0-9] [0-9] | \"2\" [0-4] [0-9] | \"25\" [0-5]\n"
    "email ::= [a-zA-Z0-9._+-]{1,32} \"@\" [a-zA-Z0-9-]{1,32} (\".\" [a-zA-Z0-9-]{1,32}){0,3} "
    "\".\" [a-zA-Z]{2,8}\n"
    /* RFC 1123 host names (the last label starts with a letter, as RFC 3696 asks of a TLD) */
    "hostname ::= (label \".\"){0,3} [a-zA-Z] ([a-zA-Z0-9-]{0,20} [a-zA-Z0-9])?\n"
    "label ::= [a-zA-Z0-9] ([a-zA-Z0-9-]{0,20} [a-zA-Z0-9])?\n"
    /* RFC 3986: scheme "://" host path query fragment, without percent-escapes */
    "uri ::= [a-z] [a-z0-9+.-]{0,8} \"://\" label (\".\" label){0,3} (\"/\" uripchar{0,20}){0,4} "
    "(\"?\" uriqchar{0,32})? (\"#\" uriqchar{0,32})?\n"
    "uripchar ::= [a-zA-Z0-9._~!$&'()*+,;=:@-]\n"
    "uriqchar ::= uripchar | [/?]\n";
static int check_parses(const char *gbnf, size_t n, struct snug_err *err) {
    struct snug_grammar *g = NULL;
    struct snug_err perr = {0};
    int rc = snug_grammar_parse(&g, gbnf, n, NULL, NULL, &perr);
    bool endless = rc == SNUG_OK && g->rule_min[g->elems[0].arg] >= GR_INF;
    snug_grammar_free(g);
    if (endless)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "json schema: no finite document satisfies it (a required property "
                            "leads back to the object that holds it, on every path)");
    if (rc == SNUG_OK || rc == SNUG_ERR_BUDGET) return SNUG_OK;
    return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                        "json schema: it refers to itself before any JSON text (a $ref cycle "
                        "with nothing in between), which no output can satisfy: %s",
                        perr.msg);
}

int jg_finish(struct js_gen *c, const char *root_body, char **out, size_t *out_len,
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

int snug_json_schema_to_gbnf(const char *schema_json, size_t len, char **out, size_t *out_len,
                             struct snug_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    int rc = snug_json_schema_precheck(schema_json, len, "json schema", err);
    if (rc) return rc;
    json_error_t je;
    json_t *root = json_loadb(schema_json, len, JSON_DECODE_ANY, &je);
    if (!root)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "json schema: not valid JSON: %s (line %d, column %d)", je.text,
                            je.line, je.column);
    struct js_gen c = {.root = root, .err = err, .path = "#"};
    int top = jg_gen(&c, root);
    if (top >= 0 && over(&c)) top = jg_over_budget(&c);
    if (top < 0) {
        rc = c.status ? c.status : SNUG_ERR_INVALID;
        snug_free(c.rules.data);
    } else {
        char root_body[24];
        snprintf(root_body, sizeof root_body, "r%d", top);
        rc = jg_finish(&c, root_body, out, out_len, err);
    }
    jg_ctx_free(&c);
    json_decref(root);
    return rc;
}
