/* gbnf.c — GBNF text → compiled byte-level grammar (grammar_impl.h).
 *
 * Owns: the parser and the rule builder. The text form follows llama.cpp's grammars/README.md
 * (rules `name ::= ...`, `|`, `( )`, `* + ? {m} {m,} {m,n}`, "literals" and [classes] with
 * \n \r \t \\ \" \' \[ \] \xHH \uHHHH \UHHHHHHHH escapes, `^` negation, `.` any character, `#`
 * comments). Leniency: a rule's alternatives may continue on following lines; a rule ends where
 * the next `name ::=` begins. Repetitions and groups become generated rules; character classes
 * with non-ASCII members become rules over UTF-8 byte sequences (code point range → byte ranges,
 * split at the encoding-length and continuation-byte boundaries, as UTF-8 (RFC 3629) lays
 * them out). Surrogates (U+D800..U+DFFF) never match.
 * Invariant: every error names the line and column (1-based) of the text where it was found.
 * Read next: match.c.
 */
#include "grammar/grammar_impl.h"

#include "core/core.h"

#include <stdio.h>
#include <string.h>

void snug_grammar_limits_fill(struct snug_grammar_limits *o, const struct snug_grammar_limits *in) {
    struct snug_grammar_limits d = {
        .max_text_bytes = (size_t)1 << 20,
        .max_elems = 262144,
        .max_rules = 32768,
        .max_nodes = 65536,
        .max_set = 1024,
        .max_states = 4096,
        .mask_cache = 32,
        .history = 16,
    };
    if (in) {
        if (in->max_text_bytes) d.max_text_bytes = in->max_text_bytes;
        if (in->max_elems > 0) d.max_elems = in->max_elems;
        if (in->max_rules > 0) d.max_rules = in->max_rules;
        if (in->max_nodes > 0) d.max_nodes = in->max_nodes;
        if (in->max_set > 0) d.max_set = in->max_set;
        if (in->max_states > 0) d.max_states = in->max_states;
        if (in->mask_cache > 0) d.mask_cache = in->mask_cache;
        if (in->history > 0) d.history = in->history;
    }
    *o = d;
}

/* ==== builder =============================================================================== */

struct vec {
    struct gr_elem *e;
    int32_t n, cap;
};

struct brule {
    const char *name; /* into the text; NULL for generated rules */
    size_t name_len;
    struct vec v; /* alternatives separated by GE_ALT */
    bool defined;
    const char *first_ref; /* where it was first used (for "undefined rule") */
    const char *def_at;    /* where it was defined */
};

#define BS_HASH 65536

struct gb {
    const char *text, *end;
    struct snug_grammar_limits lim;
    struct brule *rules;
    int32_t n_rules, cap_rules;
    int64_t n_elems; /* over all rules */
    uint64_t (*bs)[4];
    int32_t n_bs, cap_bs;
    int32_t *bs_hash;   /* [BS_HASH] byteset index + 1, 0 = empty */
    int32_t *name_hash; /* [name_cap] named rule index + 1, 0 = empty (open addressing) */
    uint32_t name_cap;  /* a power of two, at least twice the rule limit */
    struct snug_err *err;
    int status;
};

static void where(const struct gb *b, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    if (!at || at < b->text) return;
    for (const char *p = b->text; p < at && p < b->end; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else if (((unsigned char)*p & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}

static int fail_at(struct gb *b, const char *at, int status, const char *fmt, const char *what) {
    int line, col;
    where(b, at, &line, &col);
    char msg[300];
    snprintf(msg, sizeof msg, fmt, what ? what : "");
    b->status = snug_err_set(b->err, status, "grammar: line %d, column %d: %s", line, col, msg);
    return b->status;
}

static int oom(struct gb *b) {
    b->status = snug_err_set(b->err, SNUG_ERR_NOMEM, "grammar: out of memory");
    return b->status;
}

static int budget(struct gb *b, const char *what) {
    b->status = snug_err_set(b->err, SNUG_ERR_BUDGET,
                             "grammar: too large (%s); simplify the grammar or schema", what);
    return b->status;
}

static int vec_push(struct gb *b, struct vec *v, int32_t kind, int32_t arg) {
    if (b->n_elems + 2 >= b->lim.max_elems) return budget(b, "more elements than the limit");
    if (v->n == v->cap) {
        int32_t cap = v->cap ? v->cap * 2 : 16;
        struct gr_elem *e = snug_malloc((size_t)cap * sizeof *e);
        if (!e) return oom(b);
        if (v->n) memcpy(e, v->e, (size_t)v->n * sizeof *e);
        snug_free(v->e);
        v->e = e;
        v->cap = cap;
    }
    v->e[v->n++] = (struct gr_elem){kind, arg};
    b->n_elems++;
    return 0;
}

/* Append elements [from, from+n) of `src` (copied first: src may be v itself). */
static int vec_append(struct gb *b, struct vec *v, const struct gr_elem *src, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (vec_push(b, v, src[i].kind, src[i].arg)) return b->status;
    return 0;
}

static int32_t new_rule(struct gb *b, const char *name, size_t name_len) {
    if (b->n_rules >= b->lim.max_rules) {
        budget(b, "more rules than the limit");
        return -1;
    }
    if (b->n_rules == b->cap_rules) {
        int32_t cap = b->cap_rules ? b->cap_rules * 2 : 32;
        struct brule *r = snug_calloc((size_t)cap, sizeof *r);
        if (!r) {
            oom(b);
            return -1;
        }
        if (b->n_rules) memcpy(r, b->rules, (size_t)b->n_rules * sizeof *r);
        snug_free(b->rules);
        b->rules = r;
        b->cap_rules = cap;
    }
    struct brule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    r->name = name;
    r->name_len = name_len;
    return b->n_rules++;
}

/* The rule named name[0..len), created at its first mention; a hash table over the names, so
 * a grammar of many rules (a large JSON schema's) compiles in linear time. */
static int32_t rule_by_name(struct gb *b, const char *name, size_t len, const char *at) {
    uint64_t hv = snug_fnv1a(SNUG_FNV_OFFSET, name, len);
    uint32_t h = (uint32_t)(hv ^ (hv >> 32)) & (b->name_cap - 1);
    for (;; h = (h + 1) & (b->name_cap - 1)) {
        int32_t k = b->name_hash[h];
        if (!k) break;
        const struct brule *r = &b->rules[k - 1];
        if (r->name_len == len && !memcmp(r->name, name, len)) return k - 1;
    }
    int32_t r = new_rule(b, name, len);
    if (r >= 0) {
        b->rules[r].first_ref = at;
        b->name_hash[h] = r + 1;
    }
    return r;
}

static uint32_t bs_hashf(const uint64_t *s) {
    uint64_t h = s[0] * 0x9E3779B97F4A7C15ull ^ s[1] * 0xC2B2AE3D27D4EB4Full ^
                 s[2] * 0x165667B19E3779F9ull ^ s[3] * 0x27D4EB2F165667C5ull;
    return (uint32_t)(h ^ (h >> 29)) & (BS_HASH - 1);
}

/* The index of byte set s (added when new). */
static int32_t byteset(struct gb *b, const uint64_t *s) {
    uint32_t h = bs_hashf(s);
    for (;;) {
        int32_t k = b->bs_hash[h];
        if (!k) break;
        if (!memcmp(b->bs[k - 1], s, 32)) return k - 1;
        h = (h + 1) & (BS_HASH - 1);
    }
    if (b->n_bs >= BS_HASH / 2) {
        budget(b, "more distinct byte sets than 32768");
        return -1;
    }
    if (b->n_bs == b->cap_bs) {
        int32_t cap = b->cap_bs ? b->cap_bs * 2 : 64;
        uint64_t(*n)[4] = snug_malloc((size_t)cap * sizeof *n);
        if (!n) {
            oom(b);
            return -1;
        }
        if (b->n_bs) memcpy(n, b->bs, (size_t)b->n_bs * sizeof *n);
        snug_free(b->bs);
        b->bs = n;
        b->cap_bs = cap;
    }
    memcpy(b->bs[b->n_bs], s, 32);
    b->bs_hash[h] = ++b->n_bs;
    return b->n_bs - 1;
}

static int push_byte_range(struct gb *b, struct vec *v, unsigned lo, unsigned hi) {
    uint64_t s[4] = {0};
    for (unsigned c = lo; c <= hi; c++) s[c >> 6] |= 1ull << (c & 63);
    int32_t k = byteset(b, s);
    if (k < 0) return b->status;
    return vec_push(b, v, GE_BYTES, k);
}

/* ==== code point classes ==================================================================== */

struct cprange {
    uint32_t lo, hi;
};

#define MAX_CLASS_RANGES 512

struct cpclass {
    struct cprange r[MAX_CLASS_RANGES];
    int n;
};

static int utf8_encode(uint32_t c, uint8_t *o) {
    if (c < 0x80) {
        o[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (uint8_t)(0xC0 | (c >> 6));
        o[1] = (uint8_t)(0x80 | (c & 63));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (c >> 12));
        o[1] = (uint8_t)(0x80 | ((c >> 6) & 63));
        o[2] = (uint8_t)(0x80 | (c & 63));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (c >> 18));
    o[1] = (uint8_t)(0x80 | ((c >> 12) & 63));
    o[2] = (uint8_t)(0x80 | ((c >> 6) & 63));
    o[3] = (uint8_t)(0x80 | (c & 63));
    return 4;
}

/* Append alternatives (each a run of byte-range elements, GE_ALT-separated) matching exactly
 * the UTF-8 encodings of code points lo..hi (lo >= 0x80, no surrogates inside). */
static int utf8_alts(struct gb *b, struct vec *v, uint32_t lo, uint32_t hi) {
    static const uint32_t len_max[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= len_max[i] && hi > len_max[i]) {
            if (utf8_alts(b, v, lo, len_max[i])) return b->status;
            return utf8_alts(b, v, len_max[i] + 1, hi);
        }
    uint8_t lb[4], hb[4];
    int n = utf8_encode(lo, lb);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                if (utf8_alts(b, v, lo, lo | m)) return b->status;
                return utf8_alts(b, v, (lo | m) + 1, hi);
            }
            if ((hi & m) != m) {
                if (utf8_alts(b, v, lo, (hi & ~m) - 1)) return b->status;
                return utf8_alts(b, v, hi & ~m, hi);
            }
        }
    }
    utf8_encode(hi, hb);
    if (v->n && vec_push(b, v, GE_ALT, 0)) return b->status;
    for (int i = 0; i < n; i++)
        if (push_byte_range(b, v, lb[i], hb[i])) return b->status;
    return 0;
}

static void class_add(struct cpclass *c, uint32_t lo, uint32_t hi, bool *overflow) {
    if (c->n >= MAX_CLASS_RANGES) {
        *overflow = true;
        return;
    }
    c->r[c->n++] = (struct cprange){lo, hi};
}

/* Sort, merge, optionally negate, and drop surrogates. */
static void class_normalise(struct cpclass *c, bool negate) {
    for (int i = 1; i < c->n; i++) {
        struct cprange x = c->r[i];
        int j = i;
        while (j > 0 && c->r[j - 1].lo > x.lo) {
            c->r[j] = c->r[j - 1];
            j--;
        }
        c->r[j] = x;
    }
    int m = 0;
    for (int i = 0; i < c->n; i++) {
        if (m && c->r[i].lo <= c->r[m - 1].hi + 1) {
            if (c->r[i].hi > c->r[m - 1].hi) c->r[m - 1].hi = c->r[i].hi;
        } else {
            c->r[m++] = c->r[i];
        }
    }
    c->n = m;
    if (negate) {
        struct cpclass t;
        t.n = 0;
        uint32_t next = 0;
        for (int i = 0; i < c->n; i++) {
            if (c->r[i].lo > next) t.r[t.n++] = (struct cprange){next, c->r[i].lo - 1};
            next = c->r[i].hi + 1;
        }
        if (next <= 0x10FFFF) t.r[t.n++] = (struct cprange){next, 0x10FFFF};
        *c = t;
    }
    struct cpclass t;
    t.n = 0;
    for (int i = 0; i < c->n && t.n < MAX_CLASS_RANGES - 1; i++) {
        uint32_t lo = c->r[i].lo, hi = c->r[i].hi > 0x10FFFF ? 0x10FFFF : c->r[i].hi;
        if (lo > hi) continue;
        if (hi < 0xD800 || lo > 0xDFFF) {
            t.r[t.n++] = (struct cprange){lo, hi};
            continue;
        }
        if (lo < 0xD800) t.r[t.n++] = (struct cprange){lo, 0xD7FF};
        if (hi > 0xDFFF) t.r[t.n++] = (struct cprange){0xE000, hi};
    }
    *c = t;
}

/* Emit a normalised class into v: one byte-set element when it is ASCII only, else a reference
 * to a generated rule whose alternatives spell the UTF-8 encodings. */
static int emit_class(struct gb *b, struct vec *v, const struct cpclass *c, const char *at) {
    if (c->n == 0)
        return fail_at(b, at, SNUG_ERR_FORMAT, "a character class that matches nothing%s", "");
    uint64_t ascii[4] = {0};
    bool has_ascii = false, has_wide = false;
    for (int i = 0; i < c->n; i++) {
        for (uint32_t x = c->r[i].lo; x <= c->r[i].hi && x < 0x80; x++) {
            ascii[x >> 6] |= 1ull << (x & 63);
            has_ascii = true;
        }
        if (c->r[i].hi >= 0x80) has_wide = true;
    }
    if (!has_wide) {
        int32_t k = byteset(b, ascii);
        return k < 0 ? b->status : vec_push(b, v, GE_BYTES, k);
    }
    int32_t r = new_rule(b, NULL, 0);
    if (r < 0) return b->status;
    b->rules[r].defined = true;
    struct vec rv = {0};
    int rc = 0;
    if (has_ascii) {
        int32_t k = byteset(b, ascii);
        rc = k < 0 ? b->status : vec_push(b, &rv, GE_BYTES, k);
    }
    for (int i = 0; i < c->n && !rc; i++) {
        uint32_t lo = c->r[i].lo < 0x80 ? 0x80 : c->r[i].lo;
        if (c->r[i].hi >= lo) rc = utf8_alts(b, &rv, lo, c->r[i].hi);
    }
    b->rules[r].v = rv;
    if (rc) return rc;
    return vec_push(b, v, GE_REF, r);
}

/* ==== parser ================================================================================ */

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Skip blanks and comments; newlines too when `newline_ok`. */
static const char *skip_space(const struct gb *b, const char *p, bool newline_ok) {
    while (p < b->end) {
        if (*p == ' ' || *p == '\t' || (newline_ok && (*p == '\n' || *p == '\r'))) {
            p++;
        } else if (*p == '#') {
            while (p < b->end && *p != '\n') p++;
        } else {
            break;
        }
    }
    return p;
}

/* After a newline at the top level of a rule body: true when what follows (past blank lines
 * and comments) is the start of the next rule `name ::=` or the end of the text. */
static bool next_is_rule_start(const struct gb *b, const char *p) {
    p = skip_space(b, p, true);
    if (p >= b->end) return true;
    const char *q = p;
    while (q < b->end && is_name_char(*q)) q++;
    if (q == p) return false;
    q = skip_space(b, q, false);
    return b->end - q >= 3 && !memcmp(q, "::=", 3);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decode one UTF-8 code point at p (invalid bytes are taken as single code points = byte). */
static uint32_t decode_utf8(const struct gb *b, const char **pp) {
    const uint8_t *p = (const uint8_t *)*pp, *e = (const uint8_t *)b->end;
    uint32_t c = p[0];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (n > 1 && p + n <= e) {
        uint32_t v = c & (0x7F >> n);
        bool ok = true;
        for (int i = 1; i < n; i++) {
            if ((p[i] & 0xC0) != 0x80) ok = false;
            v = (v << 6) | (p[i] & 63);
        }
        if (ok) {
            *pp += n;
            return v;
        }
    }
    *pp += 1;
    return c;
}

/* One (possibly escaped) character inside a literal or class; -1 after an error. */
static int64_t parse_char(struct gb *b, const char **pp) {
    const char *p = *pp;
    if (p >= b->end)
        return fail_at(b, p, SNUG_ERR_FORMAT, "unexpected end of the grammar%s", ""), -1;
    if (*p != '\\') {
        uint32_t c = decode_utf8(b, pp);
        return c;
    }
    if (p + 1 >= b->end) return fail_at(b, p, SNUG_ERR_FORMAT, "unfinished escape%s", ""), -1;
    char e = p[1];
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = p + 2 + i < b->end ? hexval(p[2 + i]) : -1;
            if (h < 0)
                return fail_at(b, p, SNUG_ERR_FORMAT, "\\%c needs hexadecimal digits", NULL), -1;
            v = v * 16 + (uint32_t)h;
        }
        if (v > 0x10FFFF) return fail_at(b, p, SNUG_ERR_FORMAT, "escape beyond U+10FFFF%s", ""), -1;
        *pp = p + 2 + digits;
        return v;
    }
    *pp = p + 2;
    switch (e) {
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    case '\\':
    case '"':
    case '\'':
    case '[':
    case ']':
    case '-':
    case '^':
    case '/':
        return e;
    default:
        break;
    }
    char what[2] = {e, 0};
    return fail_at(b, p, SNUG_ERR_FORMAT, "unknown escape \\%s", what), -1;
}

static int parse_alternates(struct gb *b, const char **pp, int32_t rule, bool nested);

/* Wrap elements [s, v->n) as X and apply the repetition suffix at *pp if any. */
static int parse_repeat(struct gb *b, const char **pp, struct vec *v, int32_t s) {
    const char *p = *pp;
    if (p >= b->end) return 0;
    char c = *p;
    long m, n; /* n < 0: unbounded */
    if (c == '*') {
        m = 0, n = -1, p++;
    } else if (c == '+') {
        m = 1, n = -1, p++;
    } else if (c == '?') {
        m = 0, n = 1, p++;
    } else if (c == '{') {
        const char *q = skip_space(b, p + 1, false);
        m = 0;
        bool have_m = false;
        while (q < b->end && *q >= '0' && *q <= '9' && m <= 100000)
            m = m * 10 + (*q++ - '0'), have_m = true;
        q = skip_space(b, q, false);
        n = m;
        if (q < b->end && *q == ',') {
            q = skip_space(b, q + 1, false);
            n = -1;
            if (q < b->end && *q >= '0' && *q <= '9') {
                n = 0;
                while (q < b->end && *q >= '0' && *q <= '9' && n <= 100000)
                    n = n * 10 + (*q++ - '0');
            }
            q = skip_space(b, q, false);
        } else if (!have_m) {
            return fail_at(b, p, SNUG_ERR_FORMAT, "expected a count in {m}, {m,} or {m,n}%s", "");
        }
        if (q >= b->end || *q != '}')
            return fail_at(b, q, SNUG_ERR_FORMAT, "expected '}' to close the repetition%s", "");
        if (m > 100000 || n > 100000)
            return fail_at(b, p, SNUG_ERR_FORMAT, "repetition count above 100000%s", "");
        if (n >= 0 && n < m)
            return fail_at(b, p, SNUG_ERR_FORMAT, "repetition {m,n} with n < m%s", "");
        p = q + 1;
    } else {
        return 0;
    }
    *pp = p;
    int32_t xn = v->n - s;
    if (xn <= 0)
        return fail_at(b, p - 1, SNUG_ERR_FORMAT, "a repetition needs something before it%s", "");
    if ((int64_t)xn * (m + (n > m ? n - m : 1) + 2) > b->lim.max_elems)
        return budget(b, "a repetition expands past the element limit");
    struct gr_elem *x = snug_malloc((size_t)xn * sizeof *x);
    if (!x) return oom(b);
    memcpy(x, v->e + s, (size_t)xn * sizeof *x);
    v->n = s;
    b->n_elems -= xn;
    int rc = 0;
    for (long i = 0; i < m && !rc; i++) rc = vec_append(b, v, x, xn);
    if (!rc && n < 0) { /* X* : R ::= X R | ε */
        int32_t r = new_rule(b, NULL, 0);
        if (r < 0) rc = b->status;
        struct vec rv = {0};
        if (!rc) rc = vec_append(b, &rv, x, xn);
        if (!rc) rc = vec_push(b, &rv, GE_REF, r);
        if (!rc) rc = vec_push(b, &rv, GE_ALT, 0);
        if (r >= 0) {
            b->rules[r].v = rv;
            b->rules[r].defined = true;
        } else {
            snug_free(rv.e);
        }
        if (!rc) rc = vec_push(b, v, GE_REF, r);
    } else if (!rc && n > m) { /* (n - m) nested optionals: R_k ::= X R_{k-1} | ε */
        int32_t prev = -1;
        for (long k = 0; k < n - m && !rc; k++) {
            int32_t r = new_rule(b, NULL, 0);
            if (r < 0) {
                rc = b->status;
                break;
            }
            struct vec rv = {0};
            rc = vec_append(b, &rv, x, xn);
            if (!rc && prev >= 0) rc = vec_push(b, &rv, GE_REF, prev);
            if (!rc) rc = vec_push(b, &rv, GE_ALT, 0);
            b->rules[r].v = rv;
            b->rules[r].defined = true;
            prev = r;
        }
        if (!rc) rc = vec_push(b, v, GE_REF, prev);
    }
    snug_free(x);
    return rc;
}

/* A sequence of items up to '|', ')' or the end of the rule. */
static int parse_sequence(struct gb *b, const char **pp, struct vec *v, bool nested) {
    const char *p = *pp;
    for (;;) {
        p = skip_space(b, p, nested);
        if (!nested && p < b->end && (*p == '\n' || *p == '\r')) {
            if (next_is_rule_start(b, p)) break;
            p = skip_space(b, p, true);
        }
        if (p >= b->end || *p == '|' || *p == ')') break;
        int32_t s = v->n;
        const char *at = p;
        if (*p == '"') {
            p++;
            while (p < b->end && *p != '"') {
                if (*p == '\n')
                    return fail_at(b, p, SNUG_ERR_FORMAT, "unterminated string literal%s", "");
                int64_t c = parse_char(b, &p);
                if (c < 0) return b->status;
                uint8_t u[4]; /* escapes are code points (\xE9 is U+00E9), as in llama.cpp */
                int n = utf8_encode((uint32_t)c, u);
                for (int i = 0; i < n; i++)
                    if (push_byte_range(b, v, u[i], u[i])) return b->status;
            }
            if (p >= b->end)
                return fail_at(b, at, SNUG_ERR_FORMAT, "unterminated string literal%s", "");
            p++;
        } else if (*p == '[') {
            p++;
            bool neg = false;
            if (p < b->end && *p == '^') neg = true, p++;
            struct cpclass *c = snug_malloc(sizeof *c);
            if (!c) return oom(b);
            c->n = 0;
            bool overflow = false;
            while (p < b->end && *p != ']') {
                int64_t lo = parse_char(b, &p);
                if (lo < 0) {
                    snug_free(c);
                    return b->status;
                }
                int64_t hi = lo;
                if (p + 1 < b->end && *p == '-' && p[1] != ']') {
                    p++;
                    hi = parse_char(b, &p);
                    if (hi < 0) {
                        snug_free(c);
                        return b->status;
                    }
                    if (hi < lo) {
                        snug_free(c);
                        return fail_at(b, at, SNUG_ERR_FORMAT, "character range out of order%s",
                                       "");
                    }
                }
                class_add(c, (uint32_t)lo, (uint32_t)hi, &overflow);
            }
            if (p >= b->end) {
                snug_free(c);
                return fail_at(b, at, SNUG_ERR_FORMAT, "unterminated character class%s", "");
            }
            p++;
            if (overflow) {
                snug_free(c);
                return fail_at(b, at, SNUG_ERR_FORMAT,
                               "character class with more than 512 ranges%s", "");
            }
            class_normalise(c, neg);
            int rc = emit_class(b, v, c, at);
            snug_free(c);
            if (rc) return rc;
        } else if (*p == '.') {
            p++;
            struct cpclass *c = snug_malloc(sizeof *c);
            if (!c) return oom(b);
            c->n = 1;
            c->r[0] = (struct cprange){0, 0x10FFFF};
            class_normalise(c, false);
            int rc = emit_class(b, v, c, at);
            snug_free(c);
            if (rc) return rc;
        } else if (*p == '(') {
            p++;
            int32_t r = new_rule(b, NULL, 0);
            if (r < 0) return b->status;
            b->rules[r].defined = true;
            if (parse_alternates(b, &p, r, true)) return b->status;
            p = skip_space(b, p, true);
            if (p >= b->end || *p != ')')
                return fail_at(b, at, SNUG_ERR_FORMAT, "'(' is never closed%s", "");
            p++;
            if (vec_push(b, v, GE_REF, r)) return b->status;
        } else if (is_name_char(*p)) {
            const char *q = p;
            while (q < b->end && is_name_char(*q)) q++;
            const char *after = skip_space(b, q, false);
            if (b->end - after >= 3 && !memcmp(after, "::=", 3))
                return fail_at(b, p, SNUG_ERR_FORMAT,
                               "a new rule starts here but the previous one is unfinished "
                               "(a rule definition must start on its own line)%s",
                               "");
            int32_t r = rule_by_name(b, p, (size_t)(q - p), p);
            if (r < 0) return b->status;
            p = q;
            if (vec_push(b, v, GE_REF, r)) return b->status;
        } else if (*p == '<') {
            return fail_at(b, p, SNUG_ERR_FORMAT, "token references (<...>) are not supported%s",
                           "");
        } else {
            char what[8];
            snprintf(what, sizeof what, "%c", *p);
            return fail_at(b, p, SNUG_ERR_FORMAT, "unexpected character '%s'", what);
        }
        if (parse_repeat(b, &p, v, s)) return b->status;
    }
    *pp = p;
    return 0;
}

static int parse_alternates(struct gb *b, const char **pp, int32_t rule, bool nested) {
    struct vec v = b->rules[rule].v;
    int rc = parse_sequence(b, pp, &v, nested);
    while (!rc) {
        const char *p = skip_space(b, *pp, nested);
        if (p >= b->end || *p != '|') break;
        rc = vec_push(b, &v, GE_ALT, 0);
        if (rc) break;
        *pp = skip_space(b, p + 1, true);
        rc = parse_sequence(b, pp, &v, nested);
    }
    b->rules[rule].v = v;
    return rc;
}

static int parse_grammar(struct gb *b) {
    const char *p = b->text;
    for (;;) {
        p = skip_space(b, p, true);
        if (p >= b->end) break;
        const char *name = p;
        while (p < b->end && is_name_char(*p)) p++;
        if (p == name)
            return fail_at(b, p, SNUG_ERR_FORMAT,
                           "expected a rule name (letters, digits, '-', '_')%s", "");
        size_t nlen = (size_t)(p - name);
        p = skip_space(b, p, false);
        if (b->end - p < 3 || memcmp(p, "::=", 3))
            return fail_at(b, p, SNUG_ERR_FORMAT, "expected '::=' after the rule name%s", "");
        p += 3;
        int32_t r = rule_by_name(b, name, nlen, name);
        if (r < 0) return b->status;
        if (b->rules[r].defined) {
            char nm[64];
            snprintf(nm, sizeof nm, "%.*s", (int)(nlen > 60 ? 60 : nlen), name);
            return fail_at(b, name, SNUG_ERR_FORMAT, "rule '%s' is defined twice", nm);
        }
        b->rules[r].defined = true;
        b->rules[r].def_at = name;
        if (parse_alternates(b, &p, r, false)) return b->status;
        p = skip_space(b, p, false);
        if (p < b->end && *p == ')')
            return fail_at(b, p, SNUG_ERR_FORMAT, "')' without a matching '('%s", "");
        if (p < b->end && *p != '\n' && *p != '\r')
            return fail_at(b, p, SNUG_ERR_FORMAT, "expected the end of the line%s", "");
    }
    return 0;
}

/* ==== checks and flattening ================================================================= */

/* Left recursion: a rule reachable from itself through prefixes that can match nothing. */
static int check_left_recursion(struct gb *b) {
    int32_t n = b->n_rules;
    bool *nullable = snug_calloc((size_t)n, 1);
    int8_t *color = snug_calloc((size_t)n, 1);
    int32_t *stack = snug_malloc((size_t)(2 * n + 2) * sizeof *stack);
    if (!nullable || !color || !stack) {
        snug_free(nullable);
        snug_free(color);
        snug_free(stack);
        return oom(b);
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < n; r++) {
            if (nullable[r]) continue;
            const struct vec *v = &b->rules[r].v;
            bool alt_null = true;
            for (int32_t i = 0; i <= v->n; i++) {
                if (i == v->n || v->e[i].kind == GE_ALT) {
                    if (alt_null) {
                        nullable[r] = changed = true;
                        break;
                    }
                    alt_null = true;
                } else if (v->e[i].kind == GE_BYTES ||
                           (v->e[i].kind == GE_REF && !nullable[v->e[i].arg])) {
                    alt_null = false;
                }
            }
        }
    }
    int rc = 0;
    /* iterative DFS over "r can begin with rule s" edges; stack holds (rule, element index) */
    for (int32_t r0 = 0; r0 < n && !rc; r0++) {
        if (color[r0]) continue;
        int32_t sp = 0;
        stack[sp++] = r0;
        stack[sp++] = 0;
        color[r0] = 1;
        while (sp && !rc) {
            int32_t r = stack[sp - 2], i = stack[sp - 1];
            const struct vec *v = &b->rules[r].v;
            int32_t next = -1;
            while (i < v->n) {
                /* is element i at the start of its alternative, after only nullable items? */
                bool at_start = true;
                for (int32_t k = i - 1; k >= 0 && v->e[k].kind != GE_ALT; k--)
                    if (v->e[k].kind == GE_BYTES ||
                        (v->e[k].kind == GE_REF && !nullable[v->e[k].arg])) {
                        at_start = false;
                        break;
                    }
                int32_t kind = v->e[i].kind, arg = v->e[i].arg;
                i++;
                if (kind == GE_REF && at_start) {
                    next = arg;
                    break;
                }
            }
            stack[sp - 1] = i;
            if (next < 0) {
                color[r] = 2;
                sp -= 2;
                continue;
            }
            if (color[next] == 1) {
                /* name the first named rule on the cycle */
                const struct brule *br = &b->rules[next];
                for (int32_t k = sp - 2; k >= 0 && !br->name; k -= 2) br = &b->rules[stack[k]];
                char nm[64];
                snprintf(nm, sizeof nm, "%.*s",
                         br->name ? (int)(br->name_len > 60 ? 60 : br->name_len) : 1,
                         br->name ? br->name : "?");
                rc = fail_at(b, br->def_at, SNUG_ERR_FORMAT,
                             "rule '%s' is left-recursive (directly, or through a repetition of "
                             "something that can be empty); rewrite it with repetition",
                             nm);
            } else if (color[next] == 0) {
                color[next] = 1;
                stack[sp++] = next;
                stack[sp++] = 0;
            }
        }
    }
    snug_free(nullable);
    snug_free(color);
    snug_free(stack);
    return rc;
}

static void gb_free(struct gb *b) {
    for (int32_t i = 0; i < b->n_rules; i++) snug_free(b->rules[i].v.e);
    snug_free(b->rules);
    snug_free(b->bs);
    snug_free(b->bs_hash);
    snug_free(b->name_hash);
}

/* rule_min / rule_best_alt / rest_min by relaxation (lengths only shrink; a grammar without
 * left recursion settles within a few rounds; capped, leaving GR_INF where unsettled). */
static void compute_min_lengths(struct snug_grammar *g) {
    for (int32_t r = 0; r < g->n_rules; r++) g->rule_min[r] = GR_INF, g->rule_best_alt[r] = -1;
    for (int round = 0; round < 256; round++) {
        bool changed = false;
        for (int32_t r = 0; r < g->n_rules; r++) {
            for (int32_t a = g->alt_first[r]; a < g->alt_first[r + 1]; a++) {
                int64_t sum = 0;
                for (int32_t p = g->alt_pos[a]; g->elems[p].kind != GE_END && sum < GR_INF; p++)
                    sum += g->elems[p].kind == GE_BYTES ? 1 : g->rule_min[g->elems[p].arg];
                if (sum < g->rule_min[r]) {
                    g->rule_min[r] = (int32_t)sum;
                    g->rule_best_alt[r] = a;
                    changed = true;
                }
            }
        }
        if (!changed) break;
    }
    for (int32_t p = g->n_elems - 1; p >= 0; p--) {
        const struct gr_elem *e = &g->elems[p];
        if (e->kind == GE_END) {
            g->rest_min[p] = 0;
        } else {
            int64_t v =
                (int64_t)g->rest_min[p + 1] + (e->kind == GE_BYTES ? 1 : g->rule_min[e->arg]);
            g->rest_min[p] = v > GR_INF ? GR_INF : (int32_t)v;
        }
    }
}

void snug_grammar_free(struct snug_grammar *g) {
    if (!g) return;
    snug_free(g->rule_min);
    snug_free(g->rule_best_alt);
    snug_free(g->rest_min);
    snug_free(g->elems);
    snug_free(g->alt_first);
    snug_free(g->alt_pos);
    snug_free(g->bytesets);
    snug_free(g);
}

int32_t snug_grammar_n_rules(const struct snug_grammar *g) {
    return g->n_rules;
}

int32_t snug_grammar_n_elems(const struct snug_grammar *g) {
    return g->n_elems;
}

int snug_grammar_parse(struct snug_grammar **out, const char *text, size_t len, const char *root,
                       const struct snug_grammar_limits *lim, struct snug_err *err) {
    *out = NULL;
    struct gb b = {0};
    snug_grammar_limits_fill(&b.lim, lim);
    b.err = err;
    b.text = text ? text : "";
    b.end = b.text + (text ? len : 0);
    if (len > b.lim.max_text_bytes)
        return snug_err_set(err, SNUG_ERR_BUDGET, "grammar: %zu bytes, more than the limit of %zu",
                            len, b.lim.max_text_bytes);
    if (!root) root = "root";
    b.bs_hash = snug_calloc(BS_HASH, sizeof *b.bs_hash);
    b.name_cap = 64;
    while (b.name_cap < 2u * (uint32_t)b.lim.max_rules + 2) b.name_cap *= 2;
    b.name_hash = snug_calloc(b.name_cap, sizeof *b.name_hash);
    if (!b.bs_hash || !b.name_hash) {
        snug_free(b.bs_hash);
        snug_free(b.name_hash);
        return snug_err_set(err, SNUG_ERR_NOMEM, "grammar: out of memory");
    }
    int rc = parse_grammar(&b);
    int32_t root_id = -1;
    if (!rc) {
        for (int32_t i = 0; i < b.n_rules; i++)
            if (b.rules[i].name && b.rules[i].name_len == strlen(root) &&
                !memcmp(b.rules[i].name, root, b.rules[i].name_len) && b.rules[i].defined)
                root_id = i;
        if (root_id < 0)
            rc = snug_err_set(err, SNUG_ERR_FORMAT, "grammar: line 1, column 1: no rule named '%s'",
                              root);
    }
    for (int32_t i = 0; !rc && i < b.n_rules; i++) {
        if (!b.rules[i].defined) {
            char nm[64];
            snprintf(nm, sizeof nm, "%.*s",
                     (int)(b.rules[i].name_len > 60 ? 60 : b.rules[i].name_len), b.rules[i].name);
            rc = fail_at(&b, b.rules[i].first_ref, SNUG_ERR_FORMAT,
                         "rule '%s' is used but never defined", nm);
        }
    }
    if (!rc) rc = check_left_recursion(&b);
    struct snug_grammar *g = NULL;
    if (!rc) {
        int64_t n_alts = 0, n_elems = 2;
        for (int32_t i = 0; i < b.n_rules; i++) {
            n_alts++;
            n_elems += b.rules[i].v.n + 1;
            for (int32_t k = 0; k < b.rules[i].v.n; k++) n_alts += b.rules[i].v.e[k].kind == GE_ALT;
        }
        g = snug_calloc(1, sizeof *g);
        if (g) {
            g->elems = snug_malloc((size_t)n_elems * sizeof *g->elems);
            g->alt_first = snug_malloc((size_t)(b.n_rules + 1) * sizeof *g->alt_first);
            g->alt_pos = snug_malloc((size_t)n_alts * sizeof *g->alt_pos);
            g->bytesets = snug_malloc((size_t)(b.n_bs ? b.n_bs : 1) * sizeof *g->bytesets);
        }
        if (!g || !g->elems || !g->alt_first || !g->alt_pos || !g->bytesets) {
            rc = snug_err_set(err, SNUG_ERR_NOMEM, "grammar: out of memory");
        } else {
            g->lim = b.lim;
            g->n_rules = b.n_rules;
            g->n_bytesets = b.n_bs;
            if (b.n_bs) memcpy(g->bytesets, b.bs, (size_t)b.n_bs * sizeof *g->bytesets);
            int32_t pe = 0, pa = 0;
            g->elems[pe++] = (struct gr_elem){GE_REF, root_id};
            g->elems[pe++] = (struct gr_elem){GE_END, 0};
            for (int32_t i = 0; i < b.n_rules; i++) {
                g->alt_first[i] = pa;
                g->alt_pos[pa++] = pe;
                const struct vec *v = &b.rules[i].v;
                for (int32_t k = 0; k < v->n; k++) {
                    if (v->e[k].kind == GE_ALT) {
                        g->elems[pe++] = (struct gr_elem){GE_END, 0};
                        g->alt_pos[pa++] = pe;
                    } else {
                        g->elems[pe++] = v->e[k];
                    }
                }
                g->elems[pe++] = (struct gr_elem){GE_END, 0};
            }
            g->alt_first[b.n_rules] = pa;
            g->n_elems = pe;
            g->rule_min = snug_malloc((size_t)b.n_rules * sizeof(int32_t));
            g->rule_best_alt = snug_malloc((size_t)b.n_rules * sizeof(int32_t));
            g->rest_min = snug_malloc((size_t)pe * sizeof(int32_t));
            if (!g->rule_min || !g->rule_best_alt || !g->rest_min)
                rc = snug_err_set(err, SNUG_ERR_NOMEM, "grammar: out of memory");
            else
                compute_min_lengths(g);
        }
    }
    gb_free(&b);
    if (rc) {
        snug_grammar_free(g);
        return rc;
    }
    *out = g;
    return SNUG_OK;
}
