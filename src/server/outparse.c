/* outparse.c — the streaming reasoning / tool-call parser (outparse.h). Input pieces are
 * appended to one buffer; a state machine consumes from its front whatever is already certain
 * and leaves the rest (a possible tag prefix, an unterminated name or parameter value) for the
 * next piece. Every decision depends only on the bytes seen and on whether the input ended, so
 * the events do not depend on the split. Tag set and layout: docs/qwen35.md §5.2;
 * parameter values lose one leading and one trailing newline (the template writes
 * "<parameter=K>\nV\n</parameter>"). Read next: schema.c (argument typing).
 */
#include "server/outparse.h"

#include "core/core.h"
#include "server/schema.h"

#include <stdint.h>
#include <string.h>

enum state {
    ST_REASONING,   /* inside <think>..</think> */
    ST_CONTENT,     /* ordinary answer text */
    ST_TC_OPEN,     /* after <tool_call>: an XML function or a JSON body follows */
    ST_FUNC_NAME,   /* after <function=: the name up to '>' */
    ST_FUNC_BODY,   /* between parameters */
    ST_PARAM_NAME,  /* after <parameter=: the key up to '>' */
    ST_PARAM_VALUE, /* the value up to </parameter> (or the next tag) */
    ST_TC_CLOSE,    /* after </function>: an optional </tool_call> */
    ST_TC_JSON,     /* a non-XML body up to </tool_call> */
};

#define NAME_MAX_BYTES 256 /* longer function / parameter names are cut here */

struct snug_outparse {
    json_t *tools;
    bool no_calls; /* the request allows no tool call: only "</think>" is a tag */
    snug_outparse_emit_fn emit;
    void *user;
    enum state st;
    bool finished;
    bool at_start;       /* nothing but whitespace consumed: "<think>" may still open */
    struct snug_sbuf in; /* pending input; in.data[pos..len) is not consumed yet */
    size_t pos;
    size_t scan;          /* bytes of the pending input known to hold no terminator start */
    bool seg_started;     /* the current reasoning/content run has emitted text */
    bool content_any;     /* some content was emitted (later runs start with "\n") */
    struct snug_sbuf ws;  /* whitespace held at the end of the current run */
    struct snug_sbuf tmp; /* scratch for one text event */
    int n_calls;
    bool call_live; /* a tool call is open (TOOL_START sent, TOOL_END not yet) */
    int n_params;
    struct snug_sbuf name;  /* the open call's function name */
    struct snug_sbuf pname; /* the open parameter's key */
    struct snug_sbuf args;  /* the open call's arguments JSON so far */
    struct snug_sbuf delta;
};

/* ==== small helpers ========================================================================== */

static bool is_ws(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

static const char *rem_p(const struct snug_outparse *p) {
    return p->in.data + p->pos;
}
static size_t rem_n(const struct snug_outparse *p) {
    return p->in.len - p->pos;
}

static void consume(struct snug_outparse *p, size_t n) {
    p->pos += n;
    p->scan = 0;
}

/* 1: the pending input starts with tag; -1: it is a proper prefix of tag (undecided until
 * more input, unless eof); 0: it does not start with tag. */
static int starts_tag(const struct snug_outparse *p, const char *tag, bool eof) {
    size_t m = strlen(tag), n = rem_n(p);
    if (n >= m) return memcmp(rem_p(p), tag, m) ? 0 : 1;
    if (!memcmp(rem_p(p), tag, n)) return eof ? 0 : -1;
    return 0;
}

/* The earliest occurrence (from p->scan on) of any of tags[0..nt) in the pending input:
 * its offset and *which, or SIZE_MAX. When none is found, p->scan advances past the positions
 * that can no longer start one. */
static size_t find_tags(struct snug_outparse *p, const char *const *tags, int nt, int *which) {
    const char *s = rem_p(p);
    size_t n = rem_n(p), maxlen = 0;
    for (size_t i = p->scan; i < n; i++) {
        if (s[i] != '<') continue;
        for (int t = 0; t < nt; t++) {
            size_t m = strlen(tags[t]);
            if (i + m <= n && !memcmp(s + i, tags[t], m)) {
                *which = t;
                return i;
            }
        }
    }
    for (int t = 0; t < nt; t++) maxlen = strlen(tags[t]) > maxlen ? strlen(tags[t]) : maxlen;
    p->scan = n >= maxlen ? n - maxlen + 1 : 0;
    return SIZE_MAX;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of one of the tags. */
static size_t held_prefix(const char *s, size_t n, const char *const *tags, int nt) {
    size_t best = 0;
    for (int t = 0; t < nt; t++) {
        size_t m = strlen(tags[t]);
        for (size_t k = m - 1; k > best; k--) {
            if (k <= n && !memcmp(s + n - k, tags[t], k)) {
                best = k;
                break;
            }
        }
    }
    return best;
}

/* Bytes at the end of s[0..n) that start a UTF-8 sequence the input has not finished yet. */
static size_t utf8_incomplete_tail(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned c = u[n - k];
        if ((c & 0xC0) == 0x80) continue; /* continuation byte: look further back */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

/* ==== events ================================================================================= */

static void emit(struct snug_outparse *p, enum snug_outparse_kind kind, int index, const char *name,
                 const char *text, size_t len) {
    struct snug_outparse_event ev = {kind, index, name, text, len};
    p->emit(p->user, &ev);
}

/* Text of the current reasoning/content run: leading whitespace of a run is dropped, trailing
 * whitespace is held until more text follows (and dropped when the run ends). */
static void emit_text(struct snug_outparse *p, enum snug_outparse_kind kind, const char *s,
                      size_t n) {
    if (!p->seg_started) {
        while (n && is_ws(*s)) s++, n--;
        if (!n) return;
        p->seg_started = true;
        /* runs of content are joined by a newline: the parts around a removed tag could
         * otherwise form a tag (or glue two words) when the client concatenates them */
        if (kind == SNUG_OUTPARSE_CONTENT && p->content_any) snug_sbuf_putc(&p->ws, '\n');
    }
    size_t body = n;
    while (body && is_ws(s[body - 1])) body--;
    if (body) {
        snug_sbuf_reset(&p->tmp);
        snug_sbuf_append(&p->tmp, p->ws.data, p->ws.len);
        snug_sbuf_append(&p->tmp, s, body);
        snug_sbuf_reset(&p->ws);
        if (!p->tmp.oom) emit(p, kind, -1, NULL, p->tmp.data, p->tmp.len);
        if (kind == SNUG_OUTPARSE_CONTENT) p->content_any = true;
    }
    snug_sbuf_append(&p->ws, s + body, n - body);
}

static void end_run(struct snug_outparse *p) {
    p->seg_started = false;
    snug_sbuf_reset(&p->ws);
}

/* Open a tool call named by the pending name buffer (trimmed); an empty name opens nothing
 * (its parameters are parsed and dropped). */
static void call_begin(struct snug_outparse *p) {
    end_run(p);
    if (p->name.oom || !p->name.data) { /* out of memory: no call (check_oom reports it) */
        p->name.oom = true;
        p->call_live = false;
        return;
    }
    size_t a = 0, b = p->name.len;
    while (a < b && is_ws(p->name.data[a])) a++;
    while (b > a && is_ws(p->name.data[b - 1])) b--;
    memmove(p->name.data, p->name.data + a, b - a);
    p->name.len = b - a;
    p->name.data[p->name.len] = 0;
    for (size_t i = 0; i < p->name.len; i++) { /* names are identifiers: keep them printable */
        unsigned char c = (unsigned char)p->name.data[i];
        if (c < 0x20 || c >= 0x7F) p->name.data[i] = '_';
    }
    p->call_live = p->name.len > 0;
    p->n_params = 0;
    snug_sbuf_reset(&p->args);
    if (p->call_live) emit(p, SNUG_OUTPARSE_TOOL_START, p->n_calls, p->name.data, NULL, 0);
}

/* One parameter of the open call: its key from pname, its value text v (one leading and one
 * trailing newline removed), typed by the tool's schema. */
static void call_param(struct snug_outparse *p, const char *v, size_t n) {
    if (!p->call_live) return;
    if (n && v[0] == '\n') v++, n--;
    if (n && v[n - 1] == '\n') n--;
    size_t a = 0, b = p->pname.len;
    while (a < b && is_ws(p->pname.data[a])) a++;
    while (b > a && is_ws(p->pname.data[b - 1])) b--;
    for (size_t i = a; i < b; i++) /* keys: no control characters (JSON parsers refuse NUL) */
        if ((unsigned char)p->pname.data[i] < 0x20) p->pname.data[i] = '_';
    snug_sbuf_reset(&p->delta);
    snug_sbuf_puts(&p->delta, p->n_params ? ", " : "{");
    snug_json_dumps_str(&p->delta, p->pname.data + a, b - a);
    snug_sbuf_append(&p->delta, ": ", 2);
    /* the key as a C string for the schema lookup */
    snug_sbuf_reset(&p->tmp);
    snug_sbuf_append(&p->tmp, p->pname.data + a, b - a);
    const json_t *schema =
        p->tmp.oom ? NULL : snug_schema_find_param(p->tools, p->name.data, p->tmp.data);
    snug_schema_typed_value(&p->delta, schema, v, n);
    p->n_params++;
    snug_sbuf_append(&p->args, p->delta.data, p->delta.len);
    if (!p->delta.oom)
        emit(p, SNUG_OUTPARSE_TOOL_ARGS, p->n_calls, NULL, p->delta.data, p->delta.len);
}

static void call_end(struct snug_outparse *p) {
    if (!p->call_live) return;
    const char *close = p->n_params ? "}" : "{}";
    snug_sbuf_puts(&p->args, close);
    emit(p, SNUG_OUTPARSE_TOOL_ARGS, p->n_calls, NULL, close, strlen(close));
    if (!p->args.oom)
        emit(p, SNUG_OUTPARSE_TOOL_END, p->n_calls, p->name.data, p->args.data, p->args.len);
    p->n_calls++;
    p->call_live = false;
}

/* A non-XML tool-call body: {"name": .., "arguments": {..} or "{..}"} (also "parameters").
 * Anything else is handed back as content (without the tags). */
static void call_json(struct snug_outparse *p, const char *s, size_t n) {
    json_error_t jerr;
    json_t *v = json_loadb(s, n, 0, &jerr), *parsed = NULL;
    const json_t *name = json_object_get(v, "name");
    const json_t *args = json_object_get(v, "arguments");
    if (!args) args = json_object_get(v, "parameters");
    if (json_is_string(args)) {
        parsed = json_loadb(json_string_value(args), json_string_length(args), 0, &jerr);
        args = parsed;
    }
    bool ok = json_is_string(name) && json_string_length(name) > 0 &&
              strlen(json_string_value(name)) == json_string_length(name) &&
              (!args || json_is_object(args));
    if (ok) {
        end_run(p);
        snug_sbuf_reset(&p->name);
        snug_sbuf_puts(&p->name, json_string_value(name));
        call_begin(p);
        snug_sbuf_reset(&p->args);
        if (args)
            snug_json_dumps(&p->args, args);
        else
            snug_sbuf_puts(&p->args, "{}");
        p->n_params = 0;
        if (!p->args.oom) {
            emit(p, SNUG_OUTPARSE_TOOL_ARGS, p->n_calls, NULL, p->args.data, p->args.len);
            emit(p, SNUG_OUTPARSE_TOOL_END, p->n_calls, p->name.data, p->args.data, p->args.len);
        }
        p->n_calls++;
        p->call_live = false;
    } else {
        end_run(p);
        emit_text(p, SNUG_OUTPARSE_CONTENT, s, n);
        end_run(p);
    }
    json_decref(parsed);
    json_decref(v);
}

/* ==== the state machine ====================================================================== */

static const char *const REASONING_TAGS[] = {"</think>", "<tool_call>"};
static const char *const CONTENT_TAGS[] = {"<tool_call>", "<function="};
static const char *const BODY_TAGS[] = {"<parameter=", "</function>", "</tool_call>", "<tool_call>",
                                        "<function="};
/* the tags after which a value's "</parameter>" ends it, and which end a value (drift: its
 * "</parameter>" missing) when they open a line */
static const char *const AFTER_VALUE_TAGS[] = {"<parameter=", "</function>", "</tool_call>"};
static const char *const JSON_TAGS[] = {"</tool_call>", "<tool_call>", "<function="};

/* Reasoning or content text up to the next tag: emits what is certain, returns the index of
 * the tag found (consumed), or -1 (needs more input, or eof reached). */
static int text_state(struct snug_outparse *p, enum snug_outparse_kind kind,
                      const char *const *tags, int nt, bool eof) {
    int which = -1;
    size_t at = find_tags(p, tags, nt, &which);
    if (at != SIZE_MAX) {
        emit_text(p, kind, rem_p(p), at);
        end_run(p);
        consume(p, at + strlen(tags[which]));
        return which;
    }
    size_t n = rem_n(p), keep = 0;
    if (!eof) {
        keep = held_prefix(rem_p(p), n, tags, nt);
        if (!keep) keep = utf8_incomplete_tail(rem_p(p), n);
    }
    emit_text(p, kind, rem_p(p), n - keep);
    consume(p, n - keep);
    if (eof) end_run(p);
    return -1;
}

/* A name up to '>' or a newline into buf: 1 done (consumed), 0 needs more input, -1 the input
 * ended first. */
static int name_state(struct snug_outparse *p, struct snug_sbuf *buf, bool eof) {
    const char *s = rem_p(p);
    size_t n = rem_n(p), i = 0;
    while (i < n && i < NAME_MAX_BYTES && s[i] != '>' && s[i] != '\n') i++;
    if (i == n && !eof) return 0;
    if (i == n) return -1;
    snug_sbuf_reset(buf);
    snug_sbuf_append(buf, s, i);
    consume(p, i < n && (s[i] == '>' || s[i] == '\n') ? i + 1 : i);
    return 1;
}

static void skip_ws(struct snug_outparse *p) {
    size_t i = 0, n = rem_n(p);
    while (i < n && is_ws(rem_p(p)[i])) i++;
    if (i) consume(p, i);
}

/* 1: pending input s[0..n) holds -1 (s is a proper prefix of tag: undecided), 1 (starts with
 * it), 0 (does not). */
static int tag_at(const char *s, size_t n, const char *tag) {
    size_t m = strlen(tag);
    if (n >= m) return memcmp(s, tag, m) ? 0 : 1;
    return memcmp(s, tag, n) ? 0 : -1;
}

/* Where the pending parameter value ends. A value is raw text, so it may itself hold tag-like
 * text (a custom tool's patch, code that parses these tags); the template writes
 * "\nV\n</parameter>\n", so:
 *  - "\n</parameter>" ends it;
 *  - "</parameter>" elsewhere ends it only when what follows (after whitespace) is the next
 *    tag or the end of the output ("V</parameter></function>");
 *  - "<parameter=", "</function>", "</tool_call>" end it (its "</parameter>" missing) only at
 *    the start of a line.
 * 1: found (*at = the value's length, *skip = the closing bytes to consume); 0: undecided, needs
 * more input; -1: none (at eof: the value runs to the end). p->scan keeps the decided part. */
static int value_end(struct snug_outparse *p, bool eof, size_t *at, size_t *skip) {
    const char *s = rem_p(p);
    size_t n = rem_n(p);
    static const char close[] = "</parameter>";
    const size_t cl = sizeof close - 1;
    for (size_t i = p->scan; i < n; i++) {
        if (s[i] != '<') continue;
        int c = tag_at(s + i, n - i, close);
        if (c < 0 && !eof) {
            p->scan = i;
            return 0;
        }
        if (c > 0) {
            if (i > 0 && s[i - 1] == '\n') {
                *at = i, *skip = cl;
                return 1;
            }
            size_t j = i + cl;
            while (j < n && is_ws(s[j])) j++;
            if (j == n) {
                if (!eof) {
                    p->scan = i;
                    return 0;
                }
                *at = i, *skip = cl;
                return 1;
            }
            for (int t = 0; t < 3; t++) {
                int f = tag_at(s + j, n - j, AFTER_VALUE_TAGS[t]);
                if (f > 0 || (f < 0 && eof)) {
                    *at = i, *skip = cl;
                    return 1;
                }
                if (f < 0) {
                    p->scan = i;
                    return 0;
                }
            }
            continue;
        }
        if (i > 0 && s[i - 1] != '\n') continue;
        for (int t = 0; t < 3; t++) {
            int f = tag_at(s + i, n - i, AFTER_VALUE_TAGS[t]);
            if (f > 0) {
                *at = i, *skip = 0;
                return 1;
            }
            if (f < 0 && !eof) {
                p->scan = i;
                return 0;
            }
        }
    }
    p->scan = n;
    return eof ? -1 : 0;
}

/* Run the machine until it needs more input (or, at eof, until the input is used up). */
static void run(struct snug_outparse *p, bool eof) {
    for (;;) {
        size_t before = p->pos;
        enum state st0 = p->st;
        switch (p->st) {
        case ST_REASONING: {
            int t =
                text_state(p, SNUG_OUTPARSE_REASONING, REASONING_TAGS, p->no_calls ? 1 : 2, eof);
            if (t >= 0) p->at_start = false;
            if (t == 0) p->st = ST_CONTENT;
            if (t == 1) p->st = ST_TC_OPEN;
            break;
        }
        case ST_CONTENT: {
            if (p->at_start) { /* a "<think>" opening the output switches to reasoning */
                skip_ws(p);
                int m = starts_tag(p, "<think>", eof);
                if (m < 0 || (!rem_n(p) && !eof)) return;
                p->at_start = false;
                if (m == 1) {
                    consume(p, 7);
                    p->st = ST_REASONING;
                    break;
                }
            }
            int t = text_state(p, SNUG_OUTPARSE_CONTENT, CONTENT_TAGS, p->no_calls ? 0 : 2, eof);
            if (t == 0) p->st = ST_TC_OPEN;
            if (t == 1) {
                snug_sbuf_reset(&p->name);
                p->st = ST_FUNC_NAME;
            }
            break;
        }
        case ST_TC_OPEN: {
            skip_ws(p);
            if (!rem_n(p) && !eof) return;
            int m = starts_tag(p, "<function=", eof);
            if (m < 0) return;
            if (m == 1) {
                consume(p, strlen("<function="));
                p->st = ST_FUNC_NAME;
            } else {
                p->st = ST_TC_JSON;
            }
            break;
        }
        case ST_FUNC_NAME: {
            int r = name_state(p, &p->name, eof);
            if (r == 0) return;
            if (r < 0) { /* cut off inside the name: no call */
                consume(p, rem_n(p));
                p->st = ST_CONTENT;
                break;
            }
            call_begin(p);
            p->st = ST_FUNC_BODY;
            break;
        }
        case ST_FUNC_BODY: {
            skip_ws(p);
            if (!rem_n(p)) {
                if (!eof) return;
                call_end(p);
                p->st = ST_CONTENT;
                break;
            }
            int hit = -1, undecided = 0;
            for (int t = 0; t < 5 && hit < 0; t++) {
                int m = starts_tag(p, BODY_TAGS[t], eof);
                if (m == 1) hit = t;
                if (m < 0) undecided = 1;
            }
            if (hit < 0 && undecided) return;
            if (hit < 0) { /* stray text between parameters: dropped up to the next '<' */
                const char *s = rem_p(p);
                size_t i = 1, n = rem_n(p);
                while (i < n && s[i] != '<') i++;
                consume(p, i);
                break;
            }
            consume(p, strlen(BODY_TAGS[hit]));
            if (hit == 0) {
                p->st = ST_PARAM_NAME;
                break;
            }
            call_end(p);
            p->st = hit == 1   ? ST_TC_CLOSE
                    : hit == 2 ? ST_CONTENT
                    : hit == 3 ? ST_TC_OPEN
                               : ST_FUNC_NAME;
            if (hit == 4) snug_sbuf_reset(&p->name);
            break;
        }
        case ST_PARAM_NAME: {
            int r = name_state(p, &p->pname, eof);
            if (r == 0) return;
            if (r < 0) { /* cut off inside the key: drop the parameter */
                consume(p, rem_n(p));
                call_end(p);
                p->st = ST_CONTENT;
                break;
            }
            p->st = ST_PARAM_VALUE;
            break;
        }
        case ST_PARAM_VALUE: {
            size_t at = 0, skip = 0;
            int r = value_end(p, eof, &at, &skip);
            if (r == 0) return;
            size_t n = r > 0 ? at : rem_n(p);
            call_param(p, rem_p(p), n);
            consume(p, n + skip);
            p->st = ST_FUNC_BODY;
            break;
        }
        case ST_TC_CLOSE: {
            skip_ws(p);
            if (!rem_n(p) && !eof) return;
            int m = starts_tag(p, "</tool_call>", eof);
            if (m < 0) return;
            if (m == 1) consume(p, strlen("</tool_call>"));
            p->st = ST_CONTENT;
            break;
        }
        case ST_TC_JSON: {
            int which = -1;
            size_t at = find_tags(p, JSON_TAGS, 3, &which);
            if (at == SIZE_MAX && !eof) return;
            size_t n = at == SIZE_MAX ? rem_n(p) : at;
            call_json(p, rem_p(p), n);
            consume(p, n + (which == 0  ? strlen(JSON_TAGS[0])
                            : which > 0 ? strlen(JSON_TAGS[which])
                                        : 0));
            p->st = which == 1 ? ST_TC_OPEN : ST_CONTENT;
            if (which == 2) {
                snug_sbuf_reset(&p->name);
                p->st = ST_FUNC_NAME;
            }
            break;
        }
        }
        if (p->pos == before && p->st == st0) return; /* needs more input */
    }
}

/* ==== API ==================================================================================== */

int snug_outparse_init(struct snug_outparse **out, const json_t *tools, bool in_reasoning,
                       snug_outparse_emit_fn emit_fn, void *user, struct snug_err *err) {
    *out = NULL;
    if (!emit_fn) return snug_err_set(err, SNUG_ERR_INVALID, "outparse: emit callback is NULL");
    struct snug_outparse *p = snug_calloc(1, sizeof *p);
    if (!p) return snug_err_set(err, SNUG_ERR_NOMEM, "outparse: out of memory");
    p->tools = json_is_array(tools) ? json_incref((json_t *)tools) : NULL;
    p->emit = emit_fn;
    p->user = user;
    p->st = in_reasoning ? ST_REASONING : ST_CONTENT;
    p->at_start = !in_reasoning;
    *out = p;
    return SNUG_OK;
}

int snug_outparse_reserve(struct snug_outparse *p, size_t bytes) {
    struct snug_sbuf *b[] = {&p->in, &p->ws, &p->tmp, &p->name, &p->pname, &p->args, &p->delta};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        if (!snug_sbuf_reserve(b[i], bytes)) return SNUG_ERR_NOMEM;
    return SNUG_OK;
}

static int check_oom(struct snug_outparse *p, struct snug_err *err) {
    if (p->in.oom || p->ws.oom || p->tmp.oom || p->name.oom || p->pname.oom || p->args.oom ||
        p->delta.oom)
        return snug_err_set(err, SNUG_ERR_NOMEM, "outparse: out of memory");
    return SNUG_OK;
}

int snug_outparse_feed(struct snug_outparse *p, const char *text, size_t len,
                       struct snug_err *err) {
    if (p->finished) return snug_err_set(err, SNUG_ERR_INVALID, "outparse: feed after finish");
    if (p->pos) { /* drop the consumed front */
        memmove(p->in.data, p->in.data + p->pos, p->in.len - p->pos);
        p->in.len -= p->pos;
        p->pos = 0;
    }
    snug_sbuf_append(&p->in, text, len);
    if (check_oom(p, err)) return SNUG_ERR_NOMEM;
    if (!p->in.data) return SNUG_OK;
    run(p, false);
    return check_oom(p, err);
}

int snug_outparse_finish(struct snug_outparse *p, struct snug_err *err) {
    if (p->finished) return snug_err_set(err, SNUG_ERR_INVALID, "outparse: finished twice");
    p->finished = true;
    if (p->in.data) run(p, true);
    if (p->call_live) call_end(p);
    end_run(p);
    emit(p, SNUG_OUTPARSE_END, -1, NULL, NULL, 0);
    return check_oom(p, err);
}

void snug_outparse_no_calls(struct snug_outparse *p) {
    p->no_calls = true;
}

int snug_outparse_n_tool_calls(const struct snug_outparse *p) {
    return p->n_calls;
}

void snug_outparse_free(struct snug_outparse *p) {
    if (!p) return;
    json_decref(p->tools);
    snug_sbuf_free(&p->in);
    snug_sbuf_free(&p->ws);
    snug_sbuf_free(&p->tmp);
    snug_sbuf_free(&p->name);
    snug_sbuf_free(&p->pname);
    snug_sbuf_free(&p->args);
    snug_sbuf_free(&p->delta);
    snug_free(p);
}

/* ==== non-streaming ========================================================================== */

struct collect {
    struct snug_sbuf reasoning, content;
    struct snug_outparse_tool_call *calls;
    int n, cap;
    bool oom;
};

static void collect_emit(void *user, const struct snug_outparse_event *ev) {
    struct collect *c = user;
    if (ev->kind == SNUG_OUTPARSE_REASONING) snug_sbuf_append(&c->reasoning, ev->text, ev->len);
    if (ev->kind == SNUG_OUTPARSE_CONTENT) snug_sbuf_append(&c->content, ev->text, ev->len);
    if (ev->kind != SNUG_OUTPARSE_TOOL_END || c->oom) return;
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 4;
        struct snug_outparse_tool_call *t = snug_calloc((size_t)cap, sizeof *t);
        if (!t) {
            c->oom = true;
            return;
        }
        if (c->n) memcpy(t, c->calls, (size_t)c->n * sizeof *t);
        snug_free(c->calls);
        c->calls = t;
        c->cap = cap;
    }
    struct snug_sbuf name = {0}, args = {0};
    snug_sbuf_puts(&name, ev->name);
    snug_sbuf_append(&args, ev->text, ev->len);
    c->calls[c->n].name = snug_sbuf_take(&name, NULL);
    c->calls[c->n].arguments = snug_sbuf_take(&args, NULL);
    if (!c->calls[c->n].name || !c->calls[c->n].arguments) c->oom = true;
    c->n++;
}

void snug_outparse_result_free(struct snug_outparse_result *r) {
    if (!r) return;
    snug_free(r->reasoning);
    snug_free(r->content);
    for (int i = 0; i < r->n_tool_calls; i++) {
        snug_free(r->tool_calls[i].name);
        snug_free(r->tool_calls[i].arguments);
    }
    snug_free(r->tool_calls);
    *r = (struct snug_outparse_result){0};
}

int snug_outparse_text(const json_t *tools, bool in_reasoning, const char *text, size_t len,
                       struct snug_outparse_result *out, struct snug_err *err) {
    *out = (struct snug_outparse_result){0};
    struct collect c = {0};
    struct snug_outparse *p = NULL;
    int st = snug_outparse_init(&p, tools, in_reasoning, collect_emit, &c, err);
    if (!st) st = snug_outparse_feed(p, text, len, err);
    if (!st) st = snug_outparse_finish(p, err);
    snug_outparse_free(p);
    out->reasoning = snug_sbuf_take(&c.reasoning, &out->reasoning_len);
    out->content = snug_sbuf_take(&c.content, &out->content_len);
    out->tool_calls = c.calls;
    out->n_tool_calls = c.n;
    if (!st && (c.oom || !out->reasoning || !out->content))
        st = snug_err_set(err, SNUG_ERR_NOMEM, "outparse: out of memory");
    if (st) snug_outparse_result_free(out);
    return st;
}
