/* lark.c — a Lark grammar (a subset) or a regular expression → GBNF, for the Responses API's
 * custom tools (`format: {type: "grammar", syntax: "lark" | "regex", definition}`).
 *
 * Lark's grammar syntax (lark-parser documentation, "Grammar Reference"): rules `name: ...` and
 * terminals `NAME: ...` (optionally `?name`, `!name`, `name.2` — the prefixes and priorities do
 * not change the language and are accepted), alternatives `|` (also on continuation lines),
 * `-> alias` (ignored: names the tree node only), string literals "..." with Python escapes,
 * literal ranges "a".."z", regular expressions /.../ (the JSON-Schema `pattern` subset of
 * regex.c, matched as a whole; `.` is any character but a newline, as in Python), groups
 * ( ... ), optional [ ... ], `? * +`, `~ n` and `~ n..m`, `//` comments, `%import common.X`
 * (`-> Y`, or `common (A, B)`) for the common.lark terminals listed in COMMON, and `%ignore`
 * (ignored terminals may appear between the items of every rule, not inside terminals).
 * The grammar is read as a context-free grammar over characters: Lark's lexer decides token
 * boundaries greedily, so a few grammars that rely on that are looser here (every text Lark
 * accepts is accepted). Unsupported (an error naming the construct, line and column):
 * templates, `%declare`, `%override`, `%extend`, `%import` from other modules, literal or regex
 * flags ("..."i, /.../x), look-around and back-references.
 * Invariant: every name of the output is PREFIX + a Lark name (Lark names never hold '-'), the
 * start rule is PREFIX "-root" (or "root" without a prefix), so a grammar can be embedded in a
 * larger GBNF text. Read next: regex.c (the regex subset), docs/grammar.md.
 */
#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"

#include "core/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The terminals of Lark's common.lark that %import may name, restated as regular expressions
 * of the subset (same languages; ESCAPED_STRING: a quoted run of escapes and characters other
 * than the quote, the backslash and a newline). */
static const char *const COMMON[][2] = {
    {"DIGIT", "/[0-9]/"},
    {"HEXDIGIT", "/[a-fA-F0-9]/"},
    {"INT", "/[0-9]+/"},
    {"SIGNED_INT", "/[+-]?[0-9]+/"},
    {"DECIMAL", "/[0-9]+\\.[0-9]*|\\.[0-9]+/"},
    {"FLOAT", "/[0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?/"},
    {"SIGNED_FLOAT",
     "/[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?)/"},
    {"NUMBER", "/[0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+/"},
    {"SIGNED_NUMBER",
     "/[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+)/"},
    {"ESCAPED_STRING", "/\"([^\"\\\\\\n]|\\\\[^\\n])*\"/"},
    {"LCASE_LETTER", "/[a-z]/"},
    {"UCASE_LETTER", "/[A-Z]/"},
    {"LETTER", "/[a-zA-Z]/"},
    {"WORD", "/[a-zA-Z]+/"},
    {"CNAME", "/[a-zA-Z_][a-zA-Z0-9_]*/"},
    {"WS_INLINE", "/[ \\t]+/"},
    {"WS", "/[ \\t\\r\\n\\u000C]+/"},
    {"CR", "/\\r/"},
    {"LF", "/\\n/"},
    {"NEWLINE", "/(\\r?\\n)+/"},
    {"SH_COMMENT", "/#[^\\n]*/"},
    {"CPP_COMMENT", "/\\/\\/[^\\n]*/"},
    {"SQL_COMMENT", "/--[^\\n]*/"},
};

#define LARK_MAX_NAMES 4096
#define LARK_MAX_DEPTH 64

struct lark {
    const char *text, *p, *end;
    const char *prefix; /* of every output name */
    struct snug_sbuf out;
    char ign[16]; /* " PREFIX-ws" when %ignore is used, else "" (inserted between items) */
    bool in_rule; /* emitting a rule (ignored terminals may come between items) */
    /* names defined / referenced (offsets into text for the error position) */
    struct {
        const char *s;
        int n;
    } def[LARK_MAX_NAMES], ref[LARK_MAX_NAMES];
    const char *ref_at[LARK_MAX_NAMES];
    int n_def, n_ref;
    struct snug_sbuf ignore; /* alternatives of the ignored terminals */
    struct snug_err *err;
    int status;
};

static int lfail(struct lark *l, const char *at, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static int lfail(struct lark *l, const char *at, int status, const char *fmt, ...) {
    if (l->status) return -1;
    int line = 1, col = 1;
    for (const char *q = l->text; q < at && q < l->end; q++) {
        if (*q == '\n')
            line++, col = 1;
        else
            col++;
    }
    char msg[240];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    l->status = status;
    snug_err_set(l->err, status, "lark grammar: line %d, column %d: %s", line, col, msg);
    return -1;
}

static bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_name(char c) {
    return is_name_start(c) || (c >= '0' && c <= '9');
}

/* A terminal name: its first letter (after underscores) is upper case. */
static bool is_terminal(const char *s, int n) {
    for (int i = 0; i < n; i++)
        if (s[i] != '_') return s[i] >= 'A' && s[i] <= 'Z';
    return false;
}

/* Skip blanks and comments; newlines too when `nl`, and a newline followed by a continuation
 * line (`|` after blanks) always. */
static void skip(struct lark *l, bool nl) {
    for (;;) {
        while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\r')) l->p++;
        if (l->end - l->p >= 2 && l->p[0] == '/' && l->p[1] == '/') {
            while (l->p < l->end && *l->p != '\n') l->p++;
            continue;
        }
        if (l->p < l->end && *l->p == '\n') {
            const char *q = l->p + 1;
            while (q < l->end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n')) q++;
            if (nl || (q < l->end && *q == '|')) {
                l->p = q;
                continue;
            }
        }
        return;
    }
}

static void emit_name(struct lark *l, const char *s, int n) {
    snug_sbuf_puts(&l->out, " ");
    snug_sbuf_puts(&l->out, l->prefix);
    snug_sbuf_append(&l->out, s, (size_t)n);
}

/* A Python-style string literal at l->p (the opening quote) as a GBNF literal; *cp_out gets
 * its single code point (for ranges) or -1. */
static int literal(struct lark *l, long *cp_out) {
    const char *at = l->p++;
    struct snug_sbuf lit = {0};
    snug_sbuf_puts(&lit, "\"");
    long n_cp = 0, last = -1;
    while (l->p < l->end && *l->p != '"') {
        unsigned char c = (unsigned char)*l->p;
        if (c == '\n') break;
        uint32_t cp = c;
        if (c == '\\') {
            if (l->p + 1 >= l->end) break;
            char e = l->p[1];
            l->p += 2;
            int hex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
            if (hex) {
                cp = 0;
                for (int i = 0; i < hex; i++, l->p++) {
                    char h = l->p < l->end ? *l->p : 0;
                    int d = h >= '0' && h <= '9'   ? h - '0'
                            : h >= 'a' && h <= 'f' ? h - 'a' + 10
                            : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                   : -1;
                    if (d < 0) {
                        snug_free(lit.data);
                        return lfail(l, l->p, SNUG_ERR_FORMAT, "a bad \\%c escape in a literal", e);
                    }
                    cp = cp * 16 + (uint32_t)d;
                }
            } else {
                cp = e == 'n'    ? '\n'
                     : e == 't'  ? '\t'
                     : e == 'r'  ? '\r'
                     : e == 'f'  ? 0x0C
                     : e == '\\' ? '\\'
                     : e == '"'  ? '"'
                     : e == '\'' ? '\''
                                 : 0;
                if (!cp) { /* Python keeps unknown escapes: the backslash and the character */
                    snug_sbuf_puts(&lit, "\\\\");
                    cp = (unsigned char)e;
                    n_cp++;
                }
            }
            if (cp == 0 || cp > 0x10FFFF) {
                snug_free(lit.data);
                return lfail(l, at, SNUG_ERR_FORMAT,
                             "a literal with NUL or a code point past U+10FFFF");
            }
            char tmp[16];
            if (cp == '"' || cp == '\\')
                snprintf(tmp, sizeof tmp, "\\%c", (char)cp);
            else if (cp < 0x20 || cp == 0x7F || cp >= 0x80)
                snprintf(tmp, sizeof tmp, "\\U%08X", cp);
            else
                snprintf(tmp, sizeof tmp, "%c", (char)cp);
            snug_sbuf_puts(&lit, tmp);
        } else {
            /* a raw UTF-8 character: copied as its bytes */
            int k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
            bool bad = k == 0 || l->p + k > l->end;
            cp = c;
            if (!bad && k > 1) {
                static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
                cp = c & (0x7Fu >> k);
                for (int i = 1; i < k && !bad; i++) {
                    bad = ((unsigned char)l->p[i] & 0xC0) != 0x80;
                    cp = (cp << 6) | ((unsigned char)l->p[i] & 63);
                }
                bad = bad || cp < min_of[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF);
            }
            if (bad) {
                snug_free(lit.data);
                return lfail(l, l->p, SNUG_ERR_FORMAT, "malformed UTF-8 in a literal");
            }
            if (c < 0x20 || c == 0x7F) {
                char tmp[16];
                snprintf(tmp, sizeof tmp, "\\x%02X", c);
                snug_sbuf_puts(&lit, tmp);
            } else {
                snug_sbuf_append(&lit, l->p, (size_t)k);
            }
            l->p += k;
        }
        last = cp;
        n_cp++;
    }
    if (l->p >= l->end || *l->p != '"') {
        snug_free(lit.data);
        return lfail(l, at, SNUG_ERR_FORMAT, "an unterminated string literal");
    }
    l->p++;
    if (l->p < l->end && (*l->p == 'i' || *l->p == 'I')) {
        snug_free(lit.data);
        return lfail(l, l->p, SNUG_ERR_UNSUPPORTED,
                     "case-insensitive literals (\"...\"i) are not supported");
    }
    snug_sbuf_puts(&lit, "\"");
    *cp_out = n_cp == 1 ? last : -1;
    if (lit.oom) {
        snug_free(lit.data);
        return lfail(l, at, SNUG_ERR_NOMEM, "out of memory");
    }
    if (n_cp == 0) {
        snug_free(lit.data);
        return lfail(l, at, SNUG_ERR_FORMAT, "an empty literal");
    }
    snug_sbuf_puts(&l->out, " ");
    snug_sbuf_puts(&l->out, lit.data);
    snug_free(lit.data);
    return 0;
}

/* A regular expression /.../flags at l->p. */
static int regex(struct lark *l) {
    const char *at = l->p++, *start = l->p;
    bool in_class = false;
    while (l->p < l->end && *l->p != '\n' && (in_class || *l->p != '/')) {
        if (*l->p == '\\' && l->p + 1 < l->end)
            l->p++;
        else if (*l->p == '[')
            in_class = true;
        else if (*l->p == ']')
            in_class = false;
        l->p++;
    }
    if (l->p >= l->end || *l->p != '/')
        return lfail(l, at, SNUG_ERR_FORMAT, "an unterminated regular expression");
    const char *stop = l->p++;
    if (l->p < l->end && is_name(*l->p))
        return lfail(l, l->p, SNUG_ERR_UNSUPPORTED,
                     "regular expression flags (/.../%c) are not supported", *l->p);
    char *g = NULL, why[160];
    int rc = gr_regex_to_gbnf(start, (size_t)(stop - start), &g, why, sizeof why);
    if (rc == SNUG_ERR_NOMEM) return lfail(l, at, rc, "out of memory");
    if (rc) return lfail(l, at, SNUG_ERR_UNSUPPORTED, "in the regular expression: %s", why);
    snug_sbuf_puts(&l->out, " (");
    snug_sbuf_puts(&l->out, g);
    snug_sbuf_puts(&l->out, ")");
    snug_free(g);
    return 0;
}

static int expansions(struct lark *l, int depth);

/* One item of a sequence: an atom and its repetition. */
static int item(struct lark *l, int depth) {
    const char *at = l->p;
    size_t mark = l->out.len;
    snug_sbuf_puts(&l->out, " (");
    char c = *l->p;
    if (c == '(' || c == '[') {
        l->p++;
        if (c == '[') snug_sbuf_puts(&l->out, " (");
        if (expansions(l, depth + 1)) return -1;
        skip(l, true);
        char want = c == '(' ? ')' : ']';
        if (l->p >= l->end || *l->p != want)
            return lfail(l, at, SNUG_ERR_FORMAT, "an unclosed '%c'", c);
        l->p++;
        if (c == '[') snug_sbuf_puts(&l->out, " )?");
    } else if (c == '"') {
        long lo = -1;
        if (literal(l, &lo)) return -1;
        skip(l, false);
        if (l->end - l->p >= 2 && l->p[0] == '.' && l->p[1] == '.') { /* "a".."z" */
            l->p += 2;
            skip(l, false);
            long hi = -1;
            size_t m2 = l->out.len;
            if (l->p >= l->end || *l->p != '"')
                return lfail(l, l->p, SNUG_ERR_FORMAT, "a range needs a literal after '..'");
            if (literal(l, &hi)) return -1;
            if (lo < 0 || hi < 0 || hi < lo)
                return lfail(l, at, SNUG_ERR_FORMAT,
                             "a range \"a\"..\"z\" needs single characters in order");
            l->out.len = m2;
            /* replace the first literal by the class */
            size_t lit_at = mark + 2;
            l->out.len = lit_at;
            char tmp[48];
            snprintf(tmp, sizeof tmp, " [\\U%08lX-\\U%08lX]", lo, hi);
            snug_sbuf_puts(&l->out, tmp);
        }
    } else if (c == '/') {
        if (regex(l)) return -1;
    } else if (is_name_start(c)) {
        const char *s = l->p;
        while (l->p < l->end && is_name(*l->p)) l->p++;
        int n = (int)(l->p - s);
        if (l->p < l->end && *l->p == '{')
            return lfail(l, l->p, SNUG_ERR_UNSUPPORTED, "templates (name{...}) are not supported");
        if (l->n_ref >= LARK_MAX_NAMES)
            return lfail(l, s, SNUG_ERR_BUDGET, "more than %d name references", LARK_MAX_NAMES);
        l->ref[l->n_ref].s = s;
        l->ref[l->n_ref].n = n;
        l->ref_at[l->n_ref++] = s;
        emit_name(l, s, n);
    } else {
        return lfail(l, at, SNUG_ERR_FORMAT, "unexpected '%c'", c);
    }
    snug_sbuf_puts(&l->out, " )");
    skip(l, false);
    if (l->p < l->end && (*l->p == '?' || *l->p == '*' || *l->p == '+')) {
        char op = *l->p++;
        if (l->ign[0] && l->in_rule && op != '?') { /* X+ → X (ign X)*, X* → (X (ign X)*)? */
            size_t n = l->out.len - mark;
            char *x = snug_malloc(n + 1);
            if (!x) return lfail(l, at, SNUG_ERR_NOMEM, "out of memory");
            memcpy(x, l->out.data + mark, n);
            x[n] = 0;
            l->out.len = mark;
            snug_sbuf_puts(&l->out, op == '*' ? " (" : "");
            snug_sbuf_puts(&l->out, x);
            snug_sbuf_puts(&l->out, " (");
            snug_sbuf_puts(&l->out, l->ign);
            snug_sbuf_puts(&l->out, x);
            snug_sbuf_puts(&l->out, " )*");
            snug_sbuf_puts(&l->out, op == '*' ? " )?" : "");
            snug_free(x);
        } else {
            snug_sbuf_append(&l->out, &op, 1);
        }
    } else if (l->p < l->end && *l->p == '~') {
        l->p++;
        skip(l, false);
        long m = 0, n = -1;
        const char *q = l->p;
        while (l->p < l->end && *l->p >= '0' && *l->p <= '9' && m <= 100000)
            m = m * 10 + (*l->p++ - '0');
        if (q == l->p) return lfail(l, q, SNUG_ERR_FORMAT, "'~' needs a count");
        n = m;
        if (l->end - l->p >= 2 && l->p[0] == '.' && l->p[1] == '.') {
            l->p += 2;
            q = l->p;
            n = 0;
            while (l->p < l->end && *l->p >= '0' && *l->p <= '9' && n <= 100000)
                n = n * 10 + (*l->p++ - '0');
            if (q == l->p) return lfail(l, q, SNUG_ERR_FORMAT, "'~ n..m' needs an upper count");
        }
        if (m > 1000 || n > 1000 || n < m)
            return lfail(l, at, SNUG_ERR_UNSUPPORTED, "a repetition '~ %ld..%ld' outside 0..1000",
                         m, n);
        char tmp[48];
        snprintf(tmp, sizeof tmp, "{%ld,%ld}", m, n);
        snug_sbuf_puts(&l->out, tmp);
    }
    return 0;
}

/* Alternatives: sequences of items separated by '|', each optionally ending in `-> alias`. */
static int expansions(struct lark *l, int depth) {
    if (depth > LARK_MAX_DEPTH)
        return lfail(l, l->p, SNUG_ERR_BUDGET, "groups nested deeper than %d", LARK_MAX_DEPTH);
    for (bool first = true;; first = false) {
        if (!first) snug_sbuf_puts(&l->out, " |");
        skip(l, depth > 0);
        int n_items = 0;
        while (l->p < l->end) {
            char c = *l->p;
            if (c == '|' || c == ')' || c == ']' || c == '\n') break;
            if (c == '-' && l->p + 1 < l->end && l->p[1] == '>') { /* an alias: skip its name */
                l->p += 2;
                skip(l, false);
                while (l->p < l->end && is_name(*l->p)) l->p++;
                skip(l, depth > 0);
                break;
            }
            if (n_items && l->in_rule && l->ign[0]) snug_sbuf_puts(&l->out, l->ign);
            if (item(l, depth)) return -1;
            n_items++;
            skip(l, depth > 0);
        }
        if (!n_items) snug_sbuf_puts(&l->out, " \"\"");
        if (l->p < l->end && *l->p == '|') {
            l->p++;
            continue;
        }
        return 0;
    }
}

static bool defined(const struct lark *l, const char *s, int n) {
    for (int i = 0; i < l->n_def; i++)
        if (l->def[i].n == n && !memcmp(l->def[i].s, s, (size_t)n)) return true;
    return false;
}

static int add_def(struct lark *l, const char *s, int n) {
    if (defined(l, s, n)) return lfail(l, s, SNUG_ERR_FORMAT, "'%.*s' is defined twice", n, s);
    if (l->n_def >= LARK_MAX_NAMES)
        return lfail(l, s, SNUG_ERR_BUDGET, "more than %d definitions", LARK_MAX_NAMES);
    l->def[l->n_def].s = s;
    l->def[l->n_def++].n = n;
    return 0;
}

/* A definition `name: expansions` (l->p at the name), or one from COMMON under name `as`. */
static int definition(struct lark *l) {
    const char *s = l->p;
    while (l->p < l->end && is_name(*l->p)) l->p++;
    int n = (int)(l->p - s);
    if (l->p < l->end && *l->p == '{')
        return lfail(l, l->p, SNUG_ERR_UNSUPPORTED, "templates (name{...}) are not supported");
    if (l->p < l->end && *l->p == '.') { /* a priority: no effect on the language */
        l->p++;
        if (l->p < l->end && *l->p == '-') l->p++;
        while (l->p < l->end && *l->p >= '0' && *l->p <= '9') l->p++;
    }
    skip(l, false);
    if (l->p >= l->end || *l->p != ':')
        return lfail(l, l->p, SNUG_ERR_FORMAT, "expected ':' after '%.*s'", n, s);
    l->p++;
    if (add_def(l, s, n)) return -1;
    l->in_rule = !is_terminal(s, n);
    snug_sbuf_puts(&l->out, l->prefix);
    snug_sbuf_append(&l->out, s, (size_t)n);
    snug_sbuf_puts(&l->out, " ::=");
    if (expansions(l, 0)) return -1;
    snug_sbuf_puts(&l->out, "\n");
    return 0;
}

/* One common.lark terminal `name` defined as `as` (as_n bytes). */
static int import_common(struct lark *l, const char *at, const char *name, int name_n,
                         const char *as, int as_n) {
    for (size_t i = 0; i < sizeof COMMON / sizeof COMMON[0]; i++) {
        if ((int)strlen(COMMON[i][0]) != name_n || memcmp(COMMON[i][0], name, (size_t)name_n))
            continue;
        if (add_def(l, as, as_n)) return -1;
        const char *text = COMMON[i][1]; /* parsed in place of the grammar text */
        l->p = text;
        const char *save_end = l->end, *save_text = l->text, *save_p = at;
        l->end = text + strlen(text);
        l->text = text;
        l->in_rule = false;
        snug_sbuf_puts(&l->out, l->prefix);
        snug_sbuf_append(&l->out, as, (size_t)as_n);
        snug_sbuf_puts(&l->out, " ::=");
        int rc = expansions(l, 0);
        snug_sbuf_puts(&l->out, "\n");
        l->end = save_end;
        l->text = save_text;
        l->p = save_p;
        return rc;
    }
    return lfail(l, at, SNUG_ERR_UNSUPPORTED, "'common.%.*s' is not an importable terminal here",
                 name_n, name);
}

static int directive(struct lark *l) {
    const char *at = l->p++;
    const char *w = l->p;
    while (l->p < l->end && is_name(*l->p)) l->p++;
    size_t wn = (size_t)(l->p - w);
    skip(l, false);
    if (wn == 6 && !memcmp(w, "import", 6)) {
        const char *mod = l->p;
        while (l->p < l->end && (is_name(*l->p) || *l->p == '.')) l->p++;
        const char *dot = memchr(mod, '.', (size_t)(l->p - mod));
        if (l->p - mod < 6 || memcmp(mod, "common", 6) || (dot && dot != mod + 6))
            return lfail(l, mod, SNUG_ERR_UNSUPPORTED, "%%import is supported from 'common' only");
        if (dot) { /* %import common.NAME [-> ALIAS] */
            const char *name = dot + 1;
            int name_n = (int)(l->p - name);
            skip(l, false);
            const char *as = name;
            int as_n = name_n;
            if (l->end - l->p >= 2 && l->p[0] == '-' && l->p[1] == '>') {
                l->p += 2;
                skip(l, false);
                as = l->p;
                while (l->p < l->end && is_name(*l->p)) l->p++;
                as_n = (int)(l->p - as);
            }
            const char *after = l->p;
            if (import_common(l, name, name, name_n, as, as_n)) return -1;
            l->p = after;
            return 0;
        }
        skip(l, false); /* %import common (A, B) */
        if (l->p >= l->end || *l->p != '(')
            return lfail(l, l->p, SNUG_ERR_FORMAT, "expected '.NAME' or '(' after %%import common");
        l->p++;
        for (;;) {
            skip(l, true);
            const char *name = l->p;
            while (l->p < l->end && is_name(*l->p)) l->p++;
            int name_n = (int)(l->p - name);
            if (!name_n) return lfail(l, l->p, SNUG_ERR_FORMAT, "expected a terminal name");
            const char *after = l->p;
            if (import_common(l, name, name, name_n, name, name_n)) return -1;
            l->p = after;
            skip(l, true);
            if (l->p < l->end && *l->p == ',') {
                l->p++;
                continue;
            }
            if (l->p < l->end && *l->p == ')') {
                l->p++;
                return 0;
            }
            return lfail(l, l->p, SNUG_ERR_FORMAT, "expected ',' or ')' in %%import");
        }
    }
    if (wn == 6 && !memcmp(w, "ignore", 6)) { /* %ignore item (a name or a literal / regex) */
        struct snug_sbuf keep = l->out;
        l->out = l->ignore;
        if (l->ignore.len) snug_sbuf_puts(&l->out, " |");
        bool rule = l->in_rule;
        l->in_rule = false;
        int rc = expansions(l, 0);
        l->in_rule = rule;
        l->ignore = l->out;
        l->out = keep;
        return rc;
    }
    return lfail(l, at, SNUG_ERR_UNSUPPORTED, "the directive '%%%.*s' is not supported", (int)wn,
                 w);
}

/* The converted text must be a grammar the engine compiles: one it cannot run (a left-recursive
 * rule — Lark's parsers allow them, our matcher does not —, an unbounded repetition of what can
 * match nothing) is refused here with the reason, instead of converting to text that fails
 * later. A grammar over the size limits stays accepted (the request's own parse reports it). */
static int check_compiles(char **out, size_t *out_len, const char *prefix, const char *what,
                          struct snug_err *err) {
    char root[96];
    snprintf(root, sizeof root, "%s-root", prefix && prefix[0] ? prefix : "");
    struct snug_grammar *g = NULL;
    struct snug_err perr = {0};
    int rc =
        snug_grammar_parse(&g, *out, strlen(*out), prefix && prefix[0] ? root : NULL, NULL, &perr);
    snug_grammar_free(g);
    if (rc == SNUG_OK || rc == SNUG_ERR_BUDGET) return SNUG_OK;
    snug_free(*out);
    *out = NULL;
    if (out_len) *out_len = 0;
    if (rc == SNUG_ERR_NOMEM) return snug_err_set(err, rc, "%s: out of memory", what);
    return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                        "%s: the converted grammar does not compile: %s (rules may not be "
                        "left-recursive: write `sum: term (\"+\" term)*`, not `sum: sum \"+\" "
                        "term | term`)",
                        what, perr.msg);
}

static int lark_convert(const char *text, size_t len, const char *prefix, char **out,
                        size_t *out_len, struct snug_err *err);

int snug_lark_to_gbnf(const char *text, size_t len, const char *prefix, char **out, size_t *out_len,
                      struct snug_err *err) {
    int rc = lark_convert(text, len, prefix, out, out_len, err);
    return rc == SNUG_OK ? check_compiles(out, out_len, prefix, "lark grammar", err) : rc;
}

static int lark_convert(const char *text, size_t len, const char *prefix, char **out,
                        size_t *out_len, struct snug_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    struct lark *l = snug_calloc(1, sizeof *l);
    if (!l) return snug_err_set(err, SNUG_ERR_NOMEM, "lark grammar: out of memory");
    l->text = l->p = text;
    l->end = text + len;
    l->prefix = prefix && prefix[0] ? prefix : "l-";
    l->err = err;
    /* pass 1: is %ignore used? (the separator is inserted while rules are emitted) */
    for (const char *q = text; q + 7 <= l->end; q++)
        if ((q == text || q[-1] == '\n') && !memcmp(q, "%ignore", 7)) {
            snprintf(l->ign, sizeof l->ign, " %s-ws", l->prefix);
            break;
        }
    if (strlen(l->prefix) > 8) l->ign[0] = 0, lfail(l, text, SNUG_ERR_INVALID, "prefix too long");
    while (!l->status) {
        skip(l, true);
        if (l->p >= l->end) break;
        char c = *l->p;
        if (c == '%') {
            directive(l);
        } else if (c == '?' || c == '!' || is_name_start(c)) {
            if (c == '?' || c == '!') l->p++;
            definition(l);
        } else {
            lfail(l, l->p, SNUG_ERR_FORMAT, "expected a rule, a terminal or a directive");
        }
        if (l->status) break;
        skip(l, false);
        if (l->p < l->end && *l->p != '\n')
            lfail(l, l->p, SNUG_ERR_FORMAT, "unexpected '%c' after a definition", *l->p);
    }
    for (int i = 0; !l->status && i < l->n_ref; i++)
        if (!defined(l, l->ref[i].s, l->ref[i].n))
            lfail(l, l->ref_at[i], SNUG_ERR_FORMAT, "'%.*s' is not defined", l->ref[i].n,
                  l->ref[i].s);
    if (!l->status && !defined(l, "start", 5)) lfail(l, l->end, SNUG_ERR_FORMAT, "no 'start' rule");
    if (!l->status) {
        char head[64];
        if (prefix && prefix[0])
            snprintf(head, sizeof head, "%s-root ::=", prefix);
        else
            snprintf(head, sizeof head, "root ::=");
        snug_sbuf_puts(&l->out, head);
        snug_sbuf_puts(&l->out, l->ign[0] ? l->ign : "");
        snug_sbuf_puts(&l->out, " ");
        snug_sbuf_puts(&l->out, l->prefix);
        snug_sbuf_puts(&l->out, "start");
        snug_sbuf_puts(&l->out, l->ign[0] ? l->ign : "");
        snug_sbuf_puts(&l->out, "\n");
        if (l->ign[0]) {
            snug_sbuf_puts(&l->out, l->ign + 1);
            snug_sbuf_puts(&l->out, " ::= (");
            snug_sbuf_puts(&l->out, l->ignore.data ? l->ignore.data : " \"\"");
            snug_sbuf_puts(&l->out, " )*\n");
        }
        if (l->out.oom || l->ignore.oom) lfail(l, text, SNUG_ERR_NOMEM, "out of memory");
    }
    int rc = l->status;
    snug_free(l->ignore.data);
    if (rc) {
        snug_free(l->out.data);
    } else {
        *out = l->out.data;
        if (out_len) *out_len = l->out.len;
    }
    snug_free(l);
    return rc;
}

int snug_tool_format_to_gbnf(const char *syntax, const char *definition, size_t len,
                             const char *prefix, char **out, size_t *out_len,
                             struct snug_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (syntax && !strcmp(syntax, "lark"))
        return snug_lark_to_gbnf(definition, len, prefix, out, out_len, err);
    if (!syntax || strcmp(syntax, "regex"))
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "grammar syntax '%s' is not supported (\"lark\" or \"regex\")",
                            syntax ? syntax : "?");
    char *g = NULL, why[160];
    int rc = gr_regex_to_gbnf(definition, len, &g, why, sizeof why);
    if (rc == SNUG_ERR_NOMEM) return snug_err_set(err, rc, "regex: out of memory");
    if (rc) return snug_err_set(err, SNUG_ERR_UNSUPPORTED, "regex: %s is not supported", why);
    struct snug_sbuf b = {0};
    char head[64];
    if (prefix && prefix[0])
        snprintf(head, sizeof head, "%s-root ::= ", prefix);
    else
        snprintf(head, sizeof head, "root ::= ");
    snug_sbuf_puts(&b, head);
    snug_sbuf_puts(&b, g);
    snug_sbuf_puts(&b, "\n");
    snug_free(g);
    if (b.oom) {
        snug_free(b.data);
        return snug_err_set(err, SNUG_ERR_NOMEM, "regex: out of memory");
    }
    *out = b.data;
    if (out_len) *out_len = b.len;
    return check_compiles(out, out_len, prefix, "regex", err);
}
