/* schema.c — Python-compatible JSON serialisation (into the core's snug_sbuf) (the template's
 * `tojson`, i.e. json.dumps(x, ensure_ascii=False) as Hugging Face defines it) and schema typing of
 * tool-call arguments. Facts about Python's output (separators, escapes, float repr) are from
 * the CPython documentation of json.dumps and repr(float) ("shortest repr", scientific when the
 * decimal exponent is < -4 or >= 16). Read next: outparse.c.
 */
#include "server/schema.h"

#include "core/core.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== JSON serialisation ===================================================================== */

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when the bytes there are not one
 * (overlong forms, surrogates and values above U+10FFFF are invalid, as in Python). */
static size_t utf8_seq_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

void snug_json_dumps_str(struct snug_sbuf *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    snug_sbuf_putc(b, '"');
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        if (c >= 0x80) {
            size_t l = utf8_seq_len(u + i, n - i);
            if (l) {
                snug_sbuf_append(b, s + i, l);
                i += l;
            } else {
                snug_sbuf_append(b, "\xEF\xBF\xBD", 3); /* U+FFFD */
                i++;
            }
            continue;
        }
        switch (c) {
        case '"':
            snug_sbuf_append(b, "\\\"", 2);
            break;
        case '\\':
            snug_sbuf_append(b, "\\\\", 2);
            break;
        case '\n':
            snug_sbuf_append(b, "\\n", 2);
            break;
        case '\r':
            snug_sbuf_append(b, "\\r", 2);
            break;
        case '\t':
            snug_sbuf_append(b, "\\t", 2);
            break;
        case '\b':
            snug_sbuf_append(b, "\\b", 2);
            break;
        case '\f':
            snug_sbuf_append(b, "\\f", 2);
            break;
        default:
            if (c < 0x20) {
                char esc[8];
                snprintf(esc, sizeof esc, "\\u%04x", c);
                snug_sbuf_append(b, esc, 6);
            } else {
                snug_sbuf_putc(b, (char)c);
            }
        }
        i++;
    }
    snug_sbuf_putc(b, '"');
}

/* repr(float) of Python: the shortest digit string that reads back to x, written positionally
 * when the decimal exponent e satisfies -4 <= e < 16 (with ".0" if it has no fraction), else
 * as d[.ddd]e±XX. json.dumps writes NaN / Infinity / -Infinity for the non-finite values. */
static void dump_real(struct snug_sbuf *b, double x) {
    if (isnan(x)) return snug_sbuf_puts(b, "NaN");
    if (isinf(x)) return snug_sbuf_puts(b, x < 0 ? "-Infinity" : "Infinity");
    char tmp[64];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    if (prec > 17) snprintf(tmp, sizeof tmp, "%.16e", x);
    /* tmp = [-]d[.ddd]e[+-]XX: collect the digits and the exponent. */
    const char *p = tmp;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    char digits[32];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int e = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--; /* %.*e may pad with zeros */
    char out[64];
    int o = 0;
    if (neg) out[o++] = '-';
    if (e >= -4 && e < 16) {
        if (e < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -e - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        } else {
            for (int i = 0; i <= e; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > e + 1) {
                for (int i = e + 1; i < nd; i++) out[o++] = digits[i];
            } else {
                out[o++] = '0';
            }
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    snug_sbuf_puts(b, out);
}

void snug_json_dumps(struct snug_sbuf *b, const json_t *v) {
    char tmp[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        snug_sbuf_putc(b, '{');
        const char *k;
        size_t klen;
        json_t *x;
        bool first = true;
        void *tmpiter;
        json_object_keylen_foreach_safe((json_t *)v, tmpiter, k, klen, x) {
            if (!first) snug_sbuf_append(b, ", ", 2);
            first = false;
            snug_json_dumps_str(b, k, klen);
            snug_sbuf_append(b, ": ", 2);
            snug_json_dumps(b, x);
        }
        snug_sbuf_putc(b, '}');
        break;
    }
    case JSON_ARRAY: {
        snug_sbuf_putc(b, '[');
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) snug_sbuf_append(b, ", ", 2);
            snug_json_dumps(b, json_array_get(v, i));
        }
        snug_sbuf_putc(b, ']');
        break;
    }
    case JSON_STRING:
        snug_json_dumps_str(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        snprintf(tmp, sizeof tmp, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        snug_sbuf_puts(b, tmp);
        break;
    case JSON_REAL:
        dump_real(b, json_real_value(v));
        break;
    case JSON_TRUE:
        snug_sbuf_puts(b, "true");
        break;
    case JSON_FALSE:
        snug_sbuf_puts(b, "false");
        break;
    case JSON_NULL:
        snug_sbuf_puts(b, "null");
        break;
    }
}

/* ==== schema typing ========================================================================== */

const json_t *snug_schema_find_param(const json_t *tools, const char *name, const char *param) {
    if (!json_is_array(tools) || !name || !param) return NULL;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i);
        const json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn)) fn = t;
        const json_t *n = json_object_get(fn, "name");
        if (!json_is_string(n) || strcmp(json_string_value(n), name)) continue;
        const json_t *props = json_object_get(json_object_get(fn, "parameters"), "properties");
        const json_t *s = json_object_get(props, param);
        if (s) return s;
    }
    return NULL;
}

/* True when the schema admits a string: "type" is "string" or a list containing it, an
 * anyOf/oneOf alternative does, or (no type) an enum whose values are all strings. */
static bool schema_is_string(const json_t *schema) {
    const json_t *t = json_object_get(schema, "type");
    if (json_is_string(t)) return !strcmp(json_string_value(t), "string");
    for (size_t i = 0; json_is_array(t) && i < json_array_size(t); i++) {
        const json_t *x = json_array_get(t, i);
        if (json_is_string(x) && !strcmp(json_string_value(x), "string")) return true;
    }
    if (t) return false;
    static const char *const alts[] = {"anyOf", "oneOf"};
    for (int k = 0; k < 2; k++) {
        const json_t *a = json_object_get(schema, alts[k]);
        for (size_t i = 0; json_is_array(a) && i < json_array_size(a); i++)
            if (schema_is_string(json_array_get(a, i))) return true;
    }
    const json_t *e = json_object_get(schema, "enum");
    if (!json_is_array(e) || !json_array_size(e)) return false;
    for (size_t i = 0; i < json_array_size(e); i++)
        if (!json_is_string(json_array_get(e, i))) return false;
    return true;
}

/* ASCII case-insensitive equality of n bytes of a with the lowercase word w. */
static bool ascii_ieq(const char *a, size_t n, const char *w) {
    if (strlen(w) != n) return false;
    for (size_t i = 0; i < n; i++) {
        char c = a[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != w[i]) return false;
    }
    return true;
}

static bool schema_is_type(const json_t *schema, const char *type) {
    const json_t *t = json_object_get(schema, "type");
    return json_is_string(t) && !strcmp(json_string_value(t), type);
}

void snug_schema_typed_value(struct snug_sbuf *b, const json_t *schema, const char *text,
                             size_t n) {
    if (schema_is_string(schema)) return snug_json_dumps_str(b, text, n);
    json_error_t jerr;
    json_t *v = json_loadb(text, n, JSON_DECODE_ANY, &jerr);
    if (v) {
        snug_json_dumps(b, v);
        json_decref(v);
        return;
    }
    if (schema_is_type(schema, "boolean")) {
        size_t s = 0, e = n;
        while (s < e && (text[s] == ' ' || text[s] == '\n' || text[s] == '\t' || text[s] == '\r'))
            s++;
        while (e > s && (text[e - 1] == ' ' || text[e - 1] == '\n' || text[e - 1] == '\t' ||
                         text[e - 1] == '\r'))
            e--;
        if (ascii_ieq(text + s, e - s, "true")) return snug_sbuf_puts(b, "true");
        if (ascii_ieq(text + s, e - s, "false")) return snug_sbuf_puts(b, "false");
    }
    snug_json_dumps_str(b, text, n);
}

json_t *snug_json_string_lossy(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    if (j) return j;
    /* invalid UTF-8: keep valid sequences, replace every other byte by U+FFFD */
    char *o = snug_malloc(n * 3 + 1);
    if (!o) return json_string("");
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = len > 0 && i + len <= n;
        for (size_t t = 1; ok && t < len; t++) ok = ((unsigned char)s[i + t] >> 6) == 2;
        if (ok && len > 1) {
            json_t *probe = json_stringn(s + i, len);
            ok = probe != NULL;
            json_decref(probe);
        }
        if (ok && c != 0) {
            memcpy(o + k, s + i, len);
            k += len;
            i += len;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i++;
        }
    }
    j = json_stringn(o, k);
    snug_free(o);
    return j ? j : json_string("");
}
