/* regex.c — a regular-expression subset (ECMA-262 syntax, as JSON Schema's `pattern` uses it)
 * → one GBNF expression.
 *
 * Owns: the regex parser and its translation, in three output modes: JSON (the characters of a
 * JSON-encoded string: `"` and `\` written escaped, classes leave out `"`, `\` and the control
 * characters), raw (Qwen's XML tool-call parameters: characters as themselves, classes leave out
 * '<' and NUL) and text (Lark terminals and regex tool formats: only NUL is left out).
 * Invariant: the expression matches a subset of what the regex matches (never more); a construct
 * outside the subset is an error naming it.
 * Read next: jschema.c (its user for `pattern`), lark.c (Lark terminals).
 */
#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"

#include "core/core.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== pattern: a regular-expression subset → GBNF ========================================
 * ECMA-262 syntax as JSON Schema uses it: literals and escapes (\d \w \s and their negations,
 * \n \t \r, \uXXXX, escaped punctuation), classes with ranges and negation, `.`, groups (incl.
 * `(?:`), `|`, quantifiers `* + ? {n} {n,} {n,m}` (a lazy `?` after them is ignored), `^` at the
 * start and `$` at the end (a pattern without them may be preceded / followed by any text, as
 * unanchored search semantics allow). The grammar spells the JSON-encoded string: `"` and `\`
 * are written escaped, \n \t \r as their JSON escapes, and classes leave out `"`, `\` and the
 * control characters (a subset of what the regex allows: still valid). In raw mode (tool-call
 * parameters) classes leave out '<' and NUL instead. Back-references, look-around and \b are
 * rejected (the 400 names `pattern` and the construct). */
struct re {
    const char *p, *end;
    struct snug_sbuf *out;
    bool raw;          /* raw or text mode: characters as themselves, not JSON-escaped */
    bool text;         /* text mode (Lark terminals, regex tool formats): only NUL is left out */
    bool whole;        /* the regex must match the whole text (no implicit text around it) */
    bool in_neg_class; /* inside [^...]: shorthand classes take their wide sets */
    /* the top level's atoms (one alternative only): where each quantifier was written and the
     * lengths involved, so a length limit can be folded into one of them (gr_regex_emit) */
    int n_top_alts;
    struct re_atom_info {
        size_t q_start, q_end;               /* the quantifier's text in the output */
        long width_lo, width_hi, q_lo, q_hi; /* q_hi -1: unbounded */
    } atoms[64];
    int n_atoms;
    bool too_many_atoms;
    char why[120];
};

static int re_fail(struct re *r, const char *why) {
    snprintf(r->why, sizeof r->why, "%s", why);
    return -1;
}

/* Code point ranges of a class under construction. */
struct re_class {
    uint32_t lo[128], hi[128];
    int n;
};

static void rc_add(struct re_class *k, uint32_t lo, uint32_t hi) {
    if (k->n < 128) k->lo[k->n] = lo, k->hi[k->n++] = hi;
}

/* The code points of \d, \w or \s. ECMA-262 (JSON Schema's regex dialect) and Python (what
 * many validators run) agree on them in ASCII and differ beyond it (Python's \d and \w take
 * Unicode digits and letters, both take Unicode spaces). A class that is negated must leave out
 * what either dialect counts, so `wide` adds the rest: every space either counts, and for \d /
 * \w everything from the first non-ASCII digit / letter up. Un-negated, the ASCII sets are in
 * both dialects' sets. */
static void rc_shorthand(struct re_class *k, char e, bool wide, bool *neg_only) {
    *neg_only = false;
    switch (e) {
    case 'd':
        rc_add(k, '0', '9');
        if (wide) rc_add(k, 0x660, 0x10FFFF);
        break;
    case 'w':
        rc_add(k, '0', '9'), rc_add(k, 'a', 'z'), rc_add(k, 'A', 'Z'), rc_add(k, '_', '_');
        if (wide) rc_add(k, 0x80, 0x10FFFF);
        break;
    case 's':
        rc_add(k, ' ', ' '), rc_add(k, '\t', '\r');
        if (wide) {
            static const uint32_t sp[][2] = {{0x1C, 0x1F},     {0x85, 0x85},     {0xA0, 0xA0},
                                             {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                                             {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                                             {0xFEFF, 0xFEFF}};
            for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) rc_add(k, sp[i][0], sp[i][1]);
        }
        break;
    default:
        *neg_only = true;
    }
}

/* Emit class k (negated or not) as a GBNF class, minus the characters the output cannot hold
 * unescaped; -1 when nothing is left. */
static int re_emit_class(struct re *r, const struct re_class *k, bool neg) {
    if (k->n >= 128) return re_fail(r, "a character class of more than 127 ranges");
    uint32_t lo[260], hi[260];
    int n = 0;
    for (int i = 0; i < k->n; i++) { /* insertion sort by lo */
        int j = n++;
        while (j > 0 && lo[j - 1] > k->lo[i]) lo[j] = lo[j - 1], hi[j] = hi[j - 1], j--;
        lo[j] = k->lo[i], hi[j] = k->hi[i] > 0x10FFFF ? 0x10FFFF : k->hi[i];
    }
    int m = 0; /* merge */
    for (int i = 0; i < n; i++) {
        if (m && lo[i] <= hi[m - 1] + 1) {
            if (hi[i] > hi[m - 1]) hi[m - 1] = hi[i];
        } else {
            lo[m] = lo[i], hi[m++] = hi[i];
        }
    }
    n = m;
    if (neg) { /* complement over 0..0x10FFFF */
        uint32_t nlo[260], nhi[260], next = 0;
        int c = 0;
        for (int i = 0; i < n; i++) {
            if (lo[i] > next) nlo[c] = next, nhi[c++] = lo[i] - 1;
            next = hi[i] + 1;
        }
        if (next <= 0x10FFFF) nlo[c] = next, nhi[c++] = 0x10FFFF;
        memcpy(lo, nlo, sizeof lo);
        memcpy(hi, nhi, sizeof hi);
        n = c;
    }
    /* the banned characters, sorted */
    static const uint32_t json_ban[][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}};
    static const uint32_t raw_ban[][2] = {{0, 0}, {'<', '<'}};
    const uint32_t(*ban)[2] = r->raw ? raw_ban : json_ban;
    int n_ban = r->text ? 1 : r->raw ? 2 : 4;
    bool any = false;
    size_t mark = r->out->len;
    snug_sbuf_puts(r->out, "[");
    for (int i = 0; i < n; i++) {
        uint32_t x = lo[i];
        for (int b = 0; b <= n_ban && x <= hi[i]; b++) {
            uint32_t stop = b < n_ban ? ban[b][0] : 0x110000; /* emit [x, min(hi, stop-1)] */
            if (b < n_ban && ban[b][1] < x) continue;
            uint32_t y = stop == 0 ? 0 : stop - 1;
            if (y > hi[i]) y = hi[i];
            if (stop > x && y >= x) {
                snug_sbuf_printf(r->out, "\\U%08X", x);
                if (y > x) snug_sbuf_printf(r->out, "-\\U%08X", y);
                any = true;
            }
            if (b < n_ban && ban[b][1] + 1 > x) x = ban[b][1] + 1;
        }
    }
    snug_sbuf_puts(r->out, "]");
    if (!any) {
        r->out->len = mark;
        return re_fail(r, r->raw
                              ? "a character class with nothing the output can hold"
                              : "a character class with nothing a JSON string can hold unescaped");
    }
    return 0;
}

/* One literal character of the regex as GBNF. */
static void re_emit_char(struct re *r, uint32_t cp) {
    if (!r->raw && (cp == '"' || cp == '\\'))
        snug_sbuf_puts(r->out, cp == '"' ? "\"\\\\\\\"\"" : "\"\\\\\\\\\"");
    else if (!r->raw && cp == '\n')
        snug_sbuf_puts(r->out, "\"\\\\n\"");
    else if (!r->raw && cp == '\t')
        snug_sbuf_puts(r->out, "\"\\\\t\"");
    else if (!r->raw && cp == '\r')
        snug_sbuf_puts(r->out, "\"\\\\r\"");
    else
        snug_sbuf_printf(r->out, "[\\U%08X]", cp);
}

#define RE_INF 1000000000L /* an unbounded length */

static int re_alt(struct re *r, int depth, bool *nullable, long *lo, long *hi);

/* An escape after '\' (r->p at the escaped char): into a class, or as an atom. */
static int re_escape(struct re *r, struct re_class *k, bool *is_class, uint32_t *cp, bool *neg) {
    if (r->p >= r->end) return re_fail(r, "a trailing backslash");
    char e = *r->p++;
    *is_class = false;
    *neg = false;
    bool neg_only;
    if (e == 'd' || e == 'w' || e == 's') {
        rc_shorthand(k, e, r->in_neg_class, &neg_only);
        *is_class = true;
        return 0;
    }
    if (e == 'D' || e == 'W' || e == 'S') {
        rc_shorthand(k, (char)(e + 32), true, &neg_only);
        *is_class = *neg = true;
        return 0;
    }
    if (e == 'n') return *cp = '\n', 0;
    if (e == 't') return *cp = '\t', 0;
    if (e == 'r') return *cp = '\r', 0;
    if (e == 'u') {
        uint32_t v = 0;
        for (int i = 0; i < 4; i++) {
            if (r->p >= r->end) return re_fail(r, "\\u needs four hex digits");
            char h = *r->p++;
            int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
            if (d < 0) return re_fail(r, "\\u needs four hex digits");
            v = v * 16 + (uint32_t)d;
        }
        return *cp = v, 0;
    }
    if ((e >= '0' && e <= '9') || e == 'b' || e == 'B' || e == 'k')
        return re_fail(r, "back-references and word boundaries");
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return re_fail(r, "an unknown escape");
    *cp = (unsigned char)e;
    return 0;
}

/* Decode one UTF-8 code point of the pattern; RE_BAD_CP for malformed UTF-8 (a stray or
 * invalid byte, a short or overlong sequence, a surrogate, past U+10FFFF). */
#define RE_BAD_CP 0x110000u
static uint32_t re_cp(struct re *r) {
    const unsigned char *p = (const unsigned char *)r->p;
    uint32_t c = p[0];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || r->p + n > r->end) {
        r->p++;
        return RE_BAD_CP;
    }
    if (n > 1) {
        c &= 0x7Fu >> n;
        for (int i = 1; i < n; i++) {
            if ((p[i] & 0xC0) != 0x80) {
                r->p += i;
                return RE_BAD_CP;
            }
            c = (c << 6) | (p[i] & 63);
        }
        static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (c < min_of[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = RE_BAD_CP;
    }
    r->p += n;
    return c;
}

/* One atom; *nullable: whether it can match the empty text (only a group can); [*lo, *hi]:
 * the lengths (in characters) of its matches. */
static int re_atom(struct re *r, int depth, bool *nullable, long *lo, long *hi) {
    char ch = *r->p;
    *nullable = false;
    *lo = *hi = 1;
    if (ch == '(') {
        r->p++;
        if (r->p < r->end && *r->p == '?') {
            if (r->end - r->p >= 2 && r->p[1] == ':')
                r->p += 2;
            else
                return re_fail(r, "look-around and named groups");
        }
        snug_sbuf_puts(r->out, "(");
        if (re_alt(r, depth + 1, nullable, lo, hi)) return -1;
        if (r->p >= r->end || *r->p != ')') return re_fail(r, "an unclosed group");
        r->p++;
        snug_sbuf_puts(r->out, ")");
        return 0;
    }
    if (ch == '[') {
        r->p++;
        bool neg = false;
        if (r->p < r->end && *r->p == '^') neg = true, r->p++;
        r->in_neg_class = neg;
        struct re_class *k = snug_calloc(1, sizeof *k);
        if (!k) return re_fail(r, "out of memory");
        bool first = true;
        while (r->p < r->end && (*r->p != ']' || first)) {
            first = false;
            uint32_t lo;
            if (*r->p == '\\') {
                r->p++;
                bool is_class, eneg;
                if (re_escape(r, k, &is_class, &lo, &eneg)) {
                    snug_free(k);
                    return -1;
                }
                if (is_class) {
                    if (eneg) {
                        snug_free(k);
                        return re_fail(r, "\\D \\W \\S inside a class");
                    }
                    continue;
                }
            } else {
                lo = re_cp(r);
                if (lo == RE_BAD_CP) {
                    snug_free(k);
                    return re_fail(r, "malformed UTF-8");
                }
            }
            uint32_t hi = lo;
            if (r->end - r->p >= 2 && *r->p == '-' && r->p[1] != ']') {
                r->p++;
                if (*r->p == '\\') {
                    r->p++;
                    bool is_class, eneg;
                    if (re_escape(r, k, &is_class, &hi, &eneg) || is_class) {
                        snug_free(k);
                        return r->why[0] ? -1 : re_fail(r, "a class shorthand as a range end");
                    }
                } else {
                    hi = re_cp(r);
                    if (hi == RE_BAD_CP) {
                        snug_free(k);
                        return re_fail(r, "malformed UTF-8");
                    }
                }
                if (hi < lo) {
                    snug_free(k);
                    return re_fail(r, "a range out of order");
                }
            }
            rc_add(k, lo, hi);
        }
        if (r->p >= r->end) {
            snug_free(k);
            return re_fail(r, "an unclosed class");
        }
        r->p++;
        r->in_neg_class = false;
        int rc = re_emit_class(r, k, neg);
        snug_free(k);
        return rc;
    }
    if (ch == '.') { /* any character but a line terminator: ECMA-262's four (Python's '.'
                      * leaves out only '\n'); text mode follows Python */
        r->p++;
        struct re_class k = {.n = 0};
        rc_add(&k, '\n', '\n');
        if (!r->text) rc_add(&k, '\r', '\r'), rc_add(&k, 0x2028, 0x2029);
        return re_emit_class(r, &k, true);
    }
    if (ch == '\\') {
        r->p++;
        struct re_class k = {.n = 0};
        bool is_class, neg;
        uint32_t cp = 0;
        if (re_escape(r, &k, &is_class, &cp, &neg)) return -1;
        if (is_class) return re_emit_class(r, &k, neg);
        re_emit_char(r, cp);
        return 0;
    }
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{')
        return re_fail(r, "a quantifier with nothing before it");
    if (ch == '^' || ch == '$')
        return re_fail(r, "anchors other than ^ at the start and $ at the end of an alternative");
    uint32_t cp = re_cp(r);
    if (cp == RE_BAD_CP) return re_fail(r, "malformed UTF-8");
    re_emit_char(r, cp);
    return 0;
}

/* Any text, before or after an alternative without ^ / $ (search semantics): a repetition of
 * one character, recorded as a top-level atom whose count varies. */
static void any_text(struct re *r) {
    snug_sbuf_puts(r->out, r->raw ? " rawchar" : " ([^\"\\\\\\x00-\\x1F\\x7F])");
    size_t q = r->out->len;
    snug_sbuf_puts(r->out, "*");
    if (r->n_atoms < 64)
        r->atoms[r->n_atoms++] = (struct re_atom_info){q, r->out->len, 1, 1, 0, -1};
    else
        r->too_many_atoms = true;
}

/* A sequence of quantified atoms; *nullable: whether all of them can match the empty text;
 * [*lo, *hi]: the lengths of its matches. At the top level (depth 0) a sequence is one
 * alternative of the pattern and may start with '^' and end with '$'; without them any text
 * may come before / after it (search semantics). An unbounded repetition (`*`, `+`, `{m,}`) of
 * an atom that can match the empty text is refused: the grammar engine rejects it (its matcher
 * could loop without consuming), and the language it means is rarely what was meant. */
static int re_seq(struct re *r, int depth, bool *nullable, long *lo, long *hi) {
    bool any = false, head = false, tail = false;
    *nullable = true;
    *lo = *hi = 0;
    if (depth == 0) {
        head = r->whole;
        if (r->p < r->end && *r->p == '^') head = true, r->p++;
        r->n_top_alts++;
        r->n_atoms = 0;
        if (!head) any_text(r);
    }
    while (r->p < r->end && *r->p != '|' && *r->p != ')') {
        if (depth == 0 && *r->p == '$' && (r->p + 1 == r->end || r->p[1] == '|')) {
            tail = true;
            r->p++;
            break;
        }
        snug_sbuf_puts(r->out, " (");
        bool empty_ok;
        long alo, ahi;
        if (re_atom(r, depth, &empty_ok, &alo, &ahi)) return -1;
        snug_sbuf_puts(r->out, ")");
        bool zero = false; /* the quantifier allows no repetition */
        long qlo = 1, qhi = 1;
        size_t q_start = r->out->len;
        if (r->p < r->end) {
            char q = *r->p;
            if ((q == '*' || q == '+') && empty_ok && r->text)
                return re_fail(r, "a repetition of a group that can match nothing");
            if ((q == '*' || q == '+') && empty_ok) {
                /* a pattern's unbounded repetition of something that can match nothing (the
                 * grammar engine cannot run it): written once, optional for '*' — the same
                 * strings when the group is itself a repetition, a subset otherwise (Lark and
                 * tool formats refuse it instead, above) */
                if (q == '*') snug_sbuf_puts(r->out, "?");
                zero = true;
                qlo = 0, qhi = 1;
                r->p++;
            } else if (q == '*' || q == '+' || q == '?') {
                zero = q != '+';
                qlo = q == '+', qhi = q == '?' ? 1 : -1;
                snug_sbuf_append(r->out, &q, 1);
                r->p++;
            } else if (q == '{') {
                const char *e = memchr(r->p, '}', (size_t)(r->end - r->p));
                long m = -1, n = -1;
                char tmp[32];
                size_t L = e ? (size_t)(e - r->p - 1) : 0;
                if (!e || L >= sizeof tmp) return re_fail(r, "an unfinished {m,n}");
                memcpy(tmp, r->p + 1, L);
                tmp[L] = 0;
                char *comma = strchr(tmp, ',');
                m = atol(tmp);
                n = comma ? (comma[1] ? atol(comma + 1) : -1) : m;
                if (m < 0 || m > 1000 || n > 1000 || (n >= 0 && n < m))
                    return re_fail(r, "a {m,n} outside 0..1000 or with n < m");
                if (n < 0 && empty_ok && r->text)
                    return re_fail(r, "a repetition of a group that can match nothing");
                zero = m == 0;
                qlo = m, qhi = n;
                if (n < 0 && empty_ok) /* as for '*' above: once, optional when m is 0 */
                    qlo = 0, qhi = 1, zero = true, snug_sbuf_puts(r->out, m ? "" : "?");
                else if (n < 0)
                    snug_sbuf_printf(r->out, "{%ld,}", m);
                else
                    snug_sbuf_printf(r->out, "{%ld,%ld}", m, n);
                r->p = e + 1;
            }
            if (r->p < r->end && *r->p == '?') r->p++; /* lazy: same language */
        }
        if (depth == 0) {
            if (r->n_atoms < 64)
                r->atoms[r->n_atoms++] =
                    (struct re_atom_info){q_start, r->out->len, alo, ahi, qlo, qhi};
            else
                r->too_many_atoms = true;
        }
        *lo += alo * qlo;
        if (*lo > RE_INF) *lo = RE_INF;
        *hi = qhi < 0 || ahi >= RE_INF || *hi >= RE_INF ? RE_INF : *hi + ahi * qhi;
        if (*hi > RE_INF) *hi = RE_INF;
        if (!empty_ok && !zero) *nullable = false;
        any = true;
    }
    if (!any) snug_sbuf_puts(r->out, " \"\"");
    if (depth == 0) {
        if (!tail && r->whole) tail = true;
        if (!tail) any_text(r);
        if (!head || !tail) *hi = RE_INF, *nullable = false;
    }
    return 0;
}

/* Alternatives; *nullable: whether one of them can match the empty text; [*lo, *hi]: the
 * lengths of the matches. */
static int re_alt(struct re *r, int depth, bool *nullable, long *lo, long *hi) {
    if (depth > 32) return re_fail(r, "groups nested deeper than 32");
    bool e;
    long l2, h2;
    if (re_seq(r, depth, &e, lo, hi)) return -1;
    *nullable = e;
    while (r->p < r->end && *r->p == '|') {
        r->p++;
        snug_sbuf_puts(r->out, " |");
        if (re_seq(r, depth, &e, &l2, &h2)) return -1;
        *nullable = *nullable || e;
        if (l2 < *lo) *lo = l2;
        if (h2 > *hi) *hi = h2;
    }
    return 0;
}

static int re_top(struct re *r, long *lo, long *hi) {
    snug_sbuf_puts(r->out, "(");
    bool nullable;
    if (re_alt(r, 0, &nullable, lo, hi)) return -1;
    if (r->p < r->end) return re_fail(r, *r->p == ')' ? "an unmatched ')'" : "a misplaced anchor");
    snug_sbuf_puts(r->out, ")");
    return 0;
}

int gr_regex_to_gbnf(const char *pat, size_t n, char **out, char *why, size_t why_n) {
    struct snug_sbuf body = {0};
    struct re r = {
        .p = pat, .end = pat + n, .out = &body, .raw = true, .text = true, .whole = true};
    *out = NULL;
    long lo, hi;
    if (re_top(&r, &lo, &hi) || body.oom) {
        snprintf(why, why_n, "%s", r.why[0] ? r.why : "out of memory");
        snug_free(body.data);
        return body.oom && !r.why[0] ? SNUG_ERR_NOMEM : SNUG_ERR_INVALID;
    }
    *out = body.data;
    return SNUG_OK;
}

int gr_regex_emit(struct snug_sbuf *out, const char *pat, size_t n, bool raw, long min_len,
                  long max_len, char *why, size_t why_n) {
    struct re *r = snug_calloc(1, sizeof *r);
    struct snug_sbuf body = {0};
    if (!r) {
        snprintf(why, why_n, "out of memory");
        return -1;
    }
    *r = (struct re){.p = pat, .end = pat + n, .out = &body, .raw = raw};
    long lo, hi;
    int rc = 0;
    if (re_top(r, &lo, &hi) || body.oom) {
        snprintf(why, why_n, "%s", r->why[0] ? r->why : "out of memory");
        rc = -1;
    } else if (lo >= min_len && (max_len < 0 || hi <= max_len)) {
        snug_sbuf_append(out, body.data, body.len); /* the lengths hold for every match */
    } else {
        /* fold the lengths into the repetitions whose counts vary (fixed-width atoms only):
         * the room maxLength leaves above the shortest match is split evenly between them,
         * and so is what minLength adds to their minimum counts. Every count combination then
         * gives a length inside [min_len, max_len]: a subset of the matches when there is more
         * than one such repetition, all of them when there is one. */
        long lo_n[64], hi_n[64]; /* the new counts (hi -1: unbounded) */
        long base = 0;           /* the shortest match */
        int n_var = 0;
        bool ok = r->n_top_alts == 1 && !r->too_many_atoms;
        for (int i = 0; ok && i < r->n_atoms; i++) {
            const struct re_atom_info *a = &r->atoms[i];
            lo_n[i] = a->q_lo, hi_n[i] = a->q_hi;
            if (a->width_lo != a->width_hi || (a->q_lo != a->q_hi && a->width_lo == 0)) ok = false;
            base += a->width_lo * a->q_lo;
            n_var += a->q_lo != a->q_hi;
        }
        if (ok && !n_var) ok = false; /* fixed length, and not in range */
        if (ok && max_len >= 0) {
            long slack = max_len - base;
            if (slack < 0) ok = false;
            for (int i = 0; ok && i < r->n_atoms; i++) {
                const struct re_atom_info *a = &r->atoms[i];
                if (a->q_lo == a->q_hi) continue;
                long extra = slack / n_var / a->width_lo;
                if (a->q_hi < 0 || a->q_lo + extra < a->q_hi) hi_n[i] = a->q_lo + extra;
            }
        }
        long deficit = min_len - base;
        for (int pass = 0; pass < 2; pass++) { /* an even share each, then what is left */
            long share = pass == 0 && n_var ? (deficit + n_var - 1) / n_var : deficit;
            for (int i = 0; ok && deficit > 0 && i < r->n_atoms; i++) {
                const struct re_atom_info *a = &r->atoms[i];
                if (a->q_lo == a->q_hi) continue;
                long room = hi_n[i] < 0 ? deficit : hi_n[i] - lo_n[i];
                long want = share < deficit ? share : deficit;
                long need = (want + a->width_lo - 1) / a->width_lo;
                long take = need < room ? need : room;
                lo_n[i] += take;
                deficit -= take * a->width_lo;
            }
        }
        if (deficit > 0) ok = false;
        if (!ok) {
            snprintf(why, why_n,
                     "together with minLength/maxLength that its matches do not all meet (the "
                     "lengths are written for one alternative whose varying repetitions have "
                     "fixed-width atoms)");
            rc = -1;
        } else {
            size_t at = 0;
            for (int i = 0; i < r->n_atoms; i++) {
                const struct re_atom_info *a = &r->atoms[i];
                if (a->q_lo == a->q_hi) continue;
                snug_sbuf_append(out, body.data + at, a->q_start - at);
                if (hi_n[i] < 0)
                    snug_sbuf_printf(out, "{%ld,}", lo_n[i]);
                else
                    snug_sbuf_printf(out, "{%ld,%ld}", lo_n[i], hi_n[i]);
                at = a->q_end;
            }
            snug_sbuf_append(out, body.data + at, body.len - at);
        }
    }
    snug_free(body.data);
    snug_free(r);
    return rc;
}
