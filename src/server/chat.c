/* chat.c — the Qwen3.5/3.6 chat template, rendered natively. Each block below follows one
 * part of the Qwen3.6 chat template (docs/chat-format.md) (read it side by side), with the Jinja
 * semantics it relies on spelled out: `|trim` is Python's str.strip() (Unicode whitespace),
 * `tojson` is json.dumps(x, ensure_ascii=False) (schema.c), `x is false` / `x is true` match only
 * the booleans, `'k' in item` is a key test on objects and a substring test on strings.
 * Owns: nothing beyond one render's buffers. Invariant: the output is byte-identical to the
 * template's, or the call fails with the template's error message.
 * Read next: tests/py/test_chat_template.py (the golden comparison against jinja2).
 */
#include "server/chat.h"

#include "core/core.h"
#include "server/schema.h"

#include <stdint.h>
#include <string.h>

/* The fixed instruction block of the tools system turn (prompt data from the template). */
static const char TOOLS_INSTRUCTIONS[] =
    "\n\nIf you choose to call a function ONLY reply in the following format with NO "
    "suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>"
    "\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second "
    "parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n"
    "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner "
    "<function=...></function> block must be nested within <tool_call></tool_call> XML tags\n- "
    "Required parameters MUST be specified\n- You may provide optional reasoning for your "
    "function call in natural language BEFORE the function call, but NOT after\n- If there is "
    "no function call available, answer the question like normal with your current knowledge "
    "and do not tell the user about function calls\n</IMPORTANT>";

struct snug_chat_opts snug_chat_default_opts(bool thinking_default) {
    return (struct snug_chat_opts){.enable_thinking = thinking_default,
                                   .preserve_thinking = false,
                                   .add_generation_prompt = true};
}

/* Jinja's truth of a JSON value: false, null, 0, "", [] and {} are false. */
static bool jinja_truthy(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_TRUE:
        return true;
    case JSON_INTEGER:
        return json_integer_value(v) != 0;
    case JSON_REAL:
        return json_real_value(v) != 0;
    case JSON_STRING:
        return json_string_length(v) > 0;
    case JSON_ARRAY:
        return json_array_size(v) > 0;
    case JSON_OBJECT:
        return json_object_size(v) > 0;
    default:
        return false;
    }
}

int snug_chat_opts_from_request(struct snug_chat_opts *opts, const json_t *request,
                                struct snug_err *err) {
    const json_t *agp = json_object_get(request, "add_generation_prompt");
    if (agp) {
        if (!json_is_boolean(agp))
            return snug_err_set(err, SNUG_ERR_INVALID, "add_generation_prompt must be a boolean");
        opts->add_generation_prompt = json_is_true(agp);
    }
    const json_t *cf = json_object_get(request, "continue_final_message");
    if (cf && !json_is_null(cf)) {
        if (!json_is_boolean(cf))
            return snug_err_set(err, SNUG_ERR_INVALID, "continue_final_message must be a boolean");
        opts->continue_final = json_is_true(cf);
    }
    const json_t *kw = json_object_get(request, "chat_template_kwargs");
    if (!kw || json_is_null(kw)) return SNUG_OK;
    if (!json_is_object(kw))
        return snug_err_set(err, SNUG_ERR_INVALID, "chat_template_kwargs must be an object");
    const json_t *et = json_object_get(kw, "enable_thinking");
    if (et) opts->enable_thinking = !json_is_false(et); /* template: `enable_thinking is false` */
    const json_t *pt = json_object_get(kw, "preserve_thinking");
    if (pt) opts->preserve_thinking = json_is_true(pt); /* template: `preserve_thinking is true` */
    const json_t *vi = json_object_get(kw, "add_vision_id");
    if (vi) opts->add_vision_id = jinja_truthy(vi); /* template: `if add_vision_id` */
    return SNUG_OK;
}

bool snug_chat_prompt_in_reasoning(const char *prompt, size_t len) {
    static const char tail[] = "<think>\n";
    size_t n = sizeof tail - 1;
    return len >= n && !memcmp(prompt + len - n, tail, n);
}

/* ==== Python string semantics ================================================================ */

/* A view of bytes. */
struct sv {
    const char *p;
    size_t n;
};

/* Python's str.isspace() for one code point: the characters with bidirectional type WS, B or S
 * or category Zs (the list CPython's _PyUnicode_IsWhitespace generates from the UCD). */
static bool py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Decode the code point starting at p[0] (n bytes left); *len = its length. Bytes that are not
 * UTF-8 decode as themselves (never whitespace above 0x7F), length 1. */
static uint32_t utf8_fwd(const unsigned char *p, size_t n, size_t *len) {
    unsigned c = p[0];
    size_t l = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (l > n) l = 1;
    uint32_t cp = l == 1 ? c : l == 2 ? (c & 0x1F) : l == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t i = 1; i < l; i++) {
        if ((p[i] & 0xC0) != 0x80) {
            *len = 1;
            return c;
        }
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    *len = l;
    return cp;
}

/* Python's s.strip(): drop Unicode whitespace at both ends. */
static struct sv py_strip(struct sv s) {
    const unsigned char *u = (const unsigned char *)s.p;
    size_t a = 0, b = s.n, l;
    while (a < b && py_isspace(utf8_fwd(u + a, b - a, &l))) a += l;
    while (b > a) {
        size_t st = b - 1; /* find the start of the last code point */
        while (st > a && (u[st] & 0xC0) == 0x80 && b - st < 4) st--;
        uint32_t cp = utf8_fwd(u + st, b - st, &l);
        if (st + l != b) { /* not a whole sequence: look at the last byte alone */
            st = b - 1;
            cp = u[st];
        }
        if (!py_isspace(cp)) break;
        b = st;
    }
    return (struct sv){s.p + a, b - a};
}

/* Offset of the first (or, last=true, the last) occurrence of needle in s, or SIZE_MAX. */
static size_t sv_find(struct sv s, const char *needle, bool last) {
    size_t m = strlen(needle), found = SIZE_MAX;
    if (m > s.n) return SIZE_MAX;
    for (size_t i = 0; i + m <= s.n; i++) {
        if (!memcmp(s.p + i, needle, m)) {
            if (!last) return i;
            found = i;
        }
    }
    return found;
}

static bool sv_starts(struct sv s, const char *w) {
    size_t m = strlen(w);
    return s.n >= m && !memcmp(s.p, w, m);
}

static bool sv_ends(struct sv s, const char *w) {
    size_t m = strlen(w);
    return s.n >= m && !memcmp(s.p + s.n - m, w, m);
}

static struct sv sv_rstrip_nl(struct sv s) {
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}

static struct sv sv_lstrip_nl(struct sv s) {
    while (s.n && s.p[0] == '\n') s.p++, s.n--;
    return s;
}

static bool is_str(const json_t *v, const char *w) {
    return json_is_string(v) && !strcmp(json_string_value(v), w);
}

/* `'key' in item` for a content part: key test on objects, substring test on strings,
 * element test on lists; anything else is a Python TypeError (returns -1). */
static int jinja_in(const json_t *item, const char *key) {
    if (json_is_object(item)) return json_object_get(item, key) != NULL;
    if (json_is_string(item)) {
        struct sv s = {json_string_value(item), json_string_length(item)};
        return sv_find(s, key, false) != SIZE_MAX;
    }
    if (json_is_array(item)) {
        for (size_t i = 0; i < json_array_size(item); i++)
            if (is_str(json_array_get(item, i), key)) return 1;
        return 0;
    }
    return -1;
}

/* ==== the template's blocks ================================================================== */

/* The template's image_count / video_count namespaces and its add_vision_id switch. */
struct vision {
    bool add_id;
    long images, videos;
};

/* ==== plain spans: what the request wrote, as opposed to the template's own markers ==== */

static void span_add(struct snug_chat_spans *sp, size_t off, size_t n) {
    if (!sp || !n || sp->oom) return;
    if (sp->n && sp->v[sp->n - 1].off + sp->v[sp->n - 1].len == off) {
        sp->v[sp->n - 1].len += n; /* adjacent: extend */
        return;
    }
    if (sp->n == sp->cap) {
        size_t cap = sp->cap ? sp->cap * 2 : 32;
        struct snug_text_span *v = snug_malloc(cap * sizeof *v);
        if (!v) {
            sp->oom = true;
            return;
        }
        if (sp->n) memcpy(v, sp->v, sp->n * sizeof *v);
        snug_free(sp->v);
        sp->v = v;
        sp->cap = cap;
    }
    sp->v[sp->n++] = (struct snug_text_span){off, n};
}

/* The vision placeholders render_content writes: template markers inside a message's text. */
static const char *const VISION_MARKERS[] = {"<|vision_start|><|image_pad|><|vision_end|>",
                                             "<|vision_start|><|video_pad|><|vision_end|>"};

/* Append request text to b, recording it as plain (all but the vision placeholders, which
 * stay the template's markers). */
static void put_plain(struct snug_sbuf *b, struct snug_chat_spans *sp, const char *p, size_t n) {
    size_t base = b->len;
    snug_sbuf_append(b, p, n);
    if (!sp || b->oom) return;
    size_t from = 0;
    for (size_t i = 0; i < n;) {
        size_t ml = 0;
        if (p[i] == '<')
            for (size_t k = 0; k < 2 && !ml; k++) {
                size_t l = strlen(VISION_MARKERS[k]);
                if (l <= n - i && !memcmp(p + i, VISION_MARKERS[k], l)) ml = l;
            }
        if (!ml) {
            i++;
            continue;
        }
        span_add(sp, base + from, i - from);
        i += ml;
        from = i;
    }
    span_add(sp, base + from, n - from);
}

/* A JSON value from the request (a tool, an argument), dumped as the template's tojson. */
static void put_plain_json(struct snug_sbuf *b, struct snug_chat_spans *sp, const json_t *v) {
    size_t base = b->len;
    snug_json_dumps(b, v);
    if (!b->oom) span_add(sp, base, b->len - base);
}

void snug_chat_spans_free(struct snug_chat_spans *sp) {
    if (!sp) return;
    snug_free(sp->v);
    memset(sp, 0, sizeof *sp);
}

/* The template's render_content macro: appends the text of `content` (string, list of parts,
 * null/absent) to b. Vision parts render as placeholders; with add_vision_id each is preceded
 * by "Picture N: " / "Video N: ", N the running count over the whole render, which only the
 * turns loop advances (`count`: the template's do_vision_count; other calls print the count
 * as it stands). */
static int render_content(struct snug_sbuf *b, const json_t *content, bool is_system, bool count,
                          struct vision *vis, struct snug_err *err) {
    if (!content || json_is_null(content)) return SNUG_OK;
    if (json_is_string(content)) {
        snug_sbuf_append(b, json_string_value(content), json_string_length(content));
        return SNUG_OK;
    }
    if (!json_is_array(content))
        return snug_err_set(err, SNUG_ERR_INVALID, "Unexpected content type.");
    for (size_t i = 0; i < json_array_size(content); i++) {
        const json_t *it = json_array_get(content, i);
        int has_image = jinja_in(it, "image"), has_image_url = jinja_in(it, "image_url");
        if (has_image < 0)
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "content part %zu must be an object, a string or a list", i);
        const json_t *type = json_object_get(it, "type");
        if (has_image || has_image_url || is_str(type, "image")) {
            if (is_system)
                return snug_err_set(err, SNUG_ERR_INVALID, "System message cannot contain images.");
            if (count) vis->images++;
            if (vis->add_id) {
                char t[48];
                snprintf(t, sizeof t, "Picture %ld: ", vis->images);
                snug_sbuf_puts(b, t);
            }
            snug_sbuf_puts(b, "<|vision_start|><|image_pad|><|vision_end|>");
        } else if (jinja_in(it, "video") || is_str(type, "video")) {
            if (is_system)
                return snug_err_set(err, SNUG_ERR_INVALID, "System message cannot contain videos.");
            if (count) vis->videos++;
            if (vis->add_id) {
                char t[48];
                snprintf(t, sizeof t, "Video %ld: ", vis->videos);
                snug_sbuf_puts(b, t);
            }
            snug_sbuf_puts(b, "<|vision_start|><|video_pad|><|vision_end|>");
        } else if (jinja_in(it, "text")) {
            /* item.text: a string, or Python's str() of a scalar; undefined (a string or list
             * part) renders as nothing. */
            const json_t *t = json_object_get(it, "text");
            if (!t) continue;
            if (json_is_string(t)) {
                snug_sbuf_append(b, json_string_value(t), json_string_length(t));
            } else if (json_is_null(t)) {
                snug_sbuf_puts(b, "None");
            } else if (json_is_boolean(t)) {
                snug_sbuf_puts(b, json_is_true(t) ? "True" : "False");
            } else if (json_is_number(t)) {
                snug_json_dumps(b, t);
            } else {
                return snug_err_set(err, SNUG_ERR_INVALID,
                                    "content part %zu: \"text\" must be a string", i);
            }
        } else {
            return snug_err_set(err, SNUG_ERR_INVALID, "Unexpected item type in content.");
        }
    }
    return SNUG_OK;
}

/* render_content(...)|trim into the scratch buffer s; *out views it (valid until s changes). */
static int content_trimmed(struct snug_sbuf *s, const json_t *content, bool is_system, bool count,
                           struct vision *vis, struct sv *out, struct snug_err *err) {
    snug_sbuf_reset(s);
    int rc = render_content(s, content, is_system, count, vis, err);
    if (rc) return rc;
    if (s->oom) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory rendering the prompt");
    *out = py_strip((struct sv){s->data ? s->data : "", s->len});
    return SNUG_OK;
}

static const json_t *role_of(const json_t *m) {
    return json_object_get(m, "role");
}

/* "system", or OpenAI's "developer" (the same instructions under a newer name, rendered as the
 * template's system turn). */
static bool is_system(const json_t *role) {
    return is_str(role, "system") || is_str(role, "developer");
}

/* The tool-call loop of an assistant turn: each call re-rendered in the XML format the model
 * writes. `content` is the turn's (split) content, for the "\n\n" before the first call. */
static int render_tool_calls(struct snug_sbuf *b, struct snug_chat_spans *sp, const json_t *calls,
                             struct sv content, size_t msg_i, struct snug_err *err) {
    /* `message.tool_calls and ... is iterable and ... is not mapping`: a non-empty list (a
     * non-empty string iterates characters and fails on `.name`; objects and scalars skip). */
    if (json_is_string(calls) && json_string_length(calls))
        return snug_err_set(err, SNUG_ERR_INVALID, "messages[%zu].tool_calls must be a list",
                            msg_i);
    if (!json_is_array(calls)) return SNUG_OK;
    for (size_t j = 0; j < json_array_size(calls); j++) {
        const json_t *tc = json_array_get(calls, j);
        const json_t *fn = json_object_get(tc, "function");
        if (fn) tc = fn; /* `tool_call.function is defined` */
        const json_t *name = json_object_get(tc, "name");
        if (!json_is_string(name))
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "messages[%zu].tool_calls[%zu]: function.name must be a string",
                                msg_i, j);
        if (j == 0)
            snug_sbuf_puts(b, py_strip(content).n ? "\n\n<tool_call>\n<function="
                                                  : "<tool_call>\n<function=");
        else
            snug_sbuf_puts(b, "\n<tool_call>\n<function=");
        put_plain(b, sp, json_string_value(name), json_string_length(name));
        snug_sbuf_puts(b, ">\n");
        const json_t *args = json_object_get(tc, "arguments");
        json_t *parsed = NULL;
        if (json_is_string(args)) { /* the OpenAI wire form: a JSON string holding the object */
            json_error_t jerr;
            parsed = json_loadb(json_string_value(args), json_string_length(args), 0, &jerr);
            if (!parsed)
                return snug_err_set(err, SNUG_ERR_INVALID,
                                    "messages[%zu].tool_calls[%zu]: function.arguments is not a "
                                    "JSON object: %s",
                                    msg_i, j, jerr.text);
            args = parsed;
        }
        if (args && !json_is_object(args)) {
            json_decref(parsed);
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "messages[%zu].tool_calls[%zu]: function.arguments must be an "
                                "object (or a string holding one)",
                                msg_i, j);
        }
        const char *k;
        size_t klen;
        json_t *v;
        void *tmp;
        json_object_keylen_foreach_safe((json_t *)args, tmp, k, klen, v) {
            snug_sbuf_puts(b, "<parameter=");
            put_plain(b, sp, k, klen);
            snug_sbuf_puts(b, ">\n");
            if (json_is_string(v))
                put_plain(b, sp, json_string_value(v), json_string_length(v));
            else
                put_plain_json(b, sp, v);
            snug_sbuf_puts(b, "\n</parameter>\n");
        }
        json_decref(parsed);
        snug_sbuf_puts(b, "</function>\n</tool_call>");
    }
    return SNUG_OK;
}

/* One assistant turn: reasoning from reasoning_content or split out of the content at
 * "</think>", kept when preserve_thinking or after the last user query; then the tool calls. */
static int render_assistant(struct snug_sbuf *b, struct snug_chat_spans *sp, const json_t *m,
                            struct sv content, bool keep, bool open, size_t msg_i,
                            struct snug_err *err) {
    struct sv reasoning = {"", 0};
    const json_t *rc = json_object_get(m, "reasoning_content");
    if (json_is_string(rc)) {
        reasoning = (struct sv){json_string_value(rc), json_string_length(rc)};
    } else if (sv_find(content, "</think>", false) != SIZE_MAX) {
        /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
        size_t first = sv_find(content, "</think>", false);
        struct sv r = sv_rstrip_nl((struct sv){content.p, first});
        size_t open = sv_find(r, "<think>", true);
        if (open != SIZE_MAX) r = (struct sv){r.p + open + 7, r.n - open - 7};
        reasoning = sv_lstrip_nl(r);
        /* content.split('</think>')[-1].lstrip('\n') */
        size_t last = sv_find(content, "</think>", true);
        content = sv_lstrip_nl((struct sv){content.p + last + 8, content.n - last - 8});
    }
    reasoning = py_strip(reasoning);
    snug_sbuf_puts(b, "<|im_start|>assistant\n");
    if (keep) {
        snug_sbuf_puts(b, "<think>\n");
        put_plain(b, sp, reasoning.p, reasoning.n);
        snug_sbuf_puts(b, "\n</think>\n\n");
    }
    put_plain(b, sp, content.p, content.n);
    int st = render_tool_calls(b, sp, json_object_get(m, "tool_calls"), content, msg_i, err);
    if (st) return st;
    if (!open) snug_sbuf_puts(b, "<|im_end|>\n");
    return SNUG_OK;
}

/* The whole template, top to bottom: the system/tools turn, the scan for the last real user
 * query, the turns, the generation prompt (see chat.h for the contract). */
/* Record a message start at byte `at` (the prefix cache's chunk boundaries). */
static void mark(struct snug_chat_marks *mk, size_t at) {
    if (!mk || at == 0) return;
    if (mk->n < mk->cap) mk->starts[mk->n] = at;
    mk->n++;
}

int snug_chat_render(const json_t *messages, const json_t *tools, const struct snug_chat_opts *opts,
                     char **out_prompt, size_t *out_len, struct snug_err *err) {
    return snug_chat_render_ex(messages, tools, opts, out_prompt, out_len, NULL, NULL, err);
}

int snug_chat_render_marks(const json_t *messages, const json_t *tools,
                           const struct snug_chat_opts *opts, char **out_prompt, size_t *out_len,
                           struct snug_chat_marks *mk, struct snug_err *err) {
    return snug_chat_render_ex(messages, tools, opts, out_prompt, out_len, mk, NULL, err);
}

int snug_chat_render_spans(const json_t *messages, const json_t *tools,
                           const struct snug_chat_opts *opts, char **out_prompt, size_t *out_len,
                           struct snug_chat_spans *sp, struct snug_err *err) {
    return snug_chat_render_ex(messages, tools, opts, out_prompt, out_len, NULL, sp, err);
}

int snug_chat_render_ex(const json_t *messages, const json_t *tools,
                        const struct snug_chat_opts *opts, char **out_prompt, size_t *out_len,
                        struct snug_chat_marks *mk, struct snug_chat_spans *sp,
                        struct snug_err *err) {
    if (mk) mk->n = mk->system_end = mk->last_end = mk->user_end = 0;
    *out_prompt = NULL;
    if (sp) memset(sp, 0, sizeof *sp);
    if (out_len) *out_len = 0;
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return snug_err_set(err, SNUG_ERR_INVALID, "No messages provided.");
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return snug_err_set(err, SNUG_ERR_INVALID, "tools must be a list");
    size_t n = json_array_size(messages);
    struct snug_sbuf b = {0}, s = {0};
    struct sv c;
    int st = SNUG_OK;
    const json_t *m0 = json_array_get(messages, 0);
    struct vision vis = {.add_id = opts->add_vision_id};

    /* ---- system turn (with the tools block when tools are given) ---- */
    if (json_array_size(tools) > 0) {
        snug_sbuf_puts(&b, "<|im_start|>system\n# Tools\n\nYou have access to the following "
                           "functions:\n\n<tools>");
        for (size_t i = 0; i < json_array_size(tools); i++) {
            snug_sbuf_putc(&b, '\n');
            put_plain_json(&b, sp, json_array_get(tools, i));
        }
        snug_sbuf_puts(&b, "\n</tools>");
        snug_sbuf_puts(&b, TOOLS_INSTRUCTIONS);
        if (is_system(role_of(m0))) {
            if ((st = content_trimmed(&s, json_object_get(m0, "content"), true, false, &vis, &c,
                                      err)))
                goto fail;
            if (c.n) {
                snug_sbuf_puts(&b, "\n\n");
                put_plain(&b, sp, c.p, c.n);
            }
        }
        snug_sbuf_puts(&b, "<|im_end|>\n");
    } else if (is_system(role_of(m0))) {
        if ((st = content_trimmed(&s, json_object_get(m0, "content"), true, false, &vis, &c, err)))
            goto fail;
        snug_sbuf_puts(&b, "<|im_start|>system\n");
        put_plain(&b, sp, c.p, c.n);
        snug_sbuf_puts(&b, "<|im_end|>\n");
    }
    if (mk) mk->system_end = b.len;

    /* ---- the last real user query: scanning back, the first user message that is not just a
     * <tool_response> block ---- */
    bool multi_step_tool = true;
    size_t last_query = n - 1;
    for (size_t k = n; k-- > 0 && multi_step_tool;) {
        const json_t *m = json_array_get(messages, k);
        if (!is_str(role_of(m), "user")) continue;
        if ((st = content_trimmed(&s, json_object_get(m, "content"), false, false, &vis, &c, err)))
            goto fail;
        if (!(sv_starts(c, "<tool_response>") && sv_ends(c, "</tool_response>"))) {
            multi_step_tool = false;
            last_query = k;
        }
    }
    if (multi_step_tool) {
        st = snug_err_set(err, SNUG_ERR_INVALID, "No user query found in messages.");
        goto fail;
    }

    /* ---- the turns ---- */
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(messages, i);
        const json_t *role = role_of(m);
        if ((st = content_trimmed(&s, json_object_get(m, "content"), false, true, &vis, &c, err)))
            goto fail;
        if (is_system(role)) {
            if (i != 0) {
                st =
                    snug_err_set(err, SNUG_ERR_INVALID, "System message must be at the beginning.");
                goto fail;
            }
        } else if (is_str(role, "user")) {
            mark(mk, b.len);
            snug_sbuf_puts(&b, "<|im_start|>user\n");
            put_plain(&b, sp, c.p, c.n);
            snug_sbuf_puts(&b, "<|im_end|>\n");
            if (mk && i == last_query) mk->user_end = b.len;
        } else if (is_str(role, "assistant")) {
            bool keep = opts->preserve_thinking || i > last_query;
            bool open = opts->continue_final && i == n - 1;
            mark(mk, b.len);
            if ((st = render_assistant(&b, sp, m, c, keep, open, i, err))) goto fail;
        } else if (is_str(role, "tool")) {
            /* consecutive tool results share one user turn */
            if (i > 0 && !is_str(role_of(json_array_get(messages, i - 1)), "tool")) {
                mark(mk, b.len);
                snug_sbuf_puts(&b, "<|im_start|>user");
            }
            snug_sbuf_puts(&b, "\n<tool_response>\n");
            put_plain(&b, sp, c.p, c.n);
            snug_sbuf_puts(&b, "\n</tool_response>");
            if (i == n - 1 || !is_str(role_of(json_array_get(messages, i + 1)), "tool"))
                snug_sbuf_puts(&b, "<|im_end|>\n");
        } else {
            st = snug_err_set(err, SNUG_ERR_INVALID, "Unexpected message role.");
            goto fail;
        }
    }

    if (opts->continue_final && !is_str(role_of(json_array_get(messages, n - 1)), "assistant")) {
        st = snug_err_set(err, SNUG_ERR_INVALID,
                          "continue_final_message needs a final assistant message to continue");
        goto fail;
    }
    /* ---- generation prompt (none when the final assistant turn is continued) ---- */
    if (opts->add_generation_prompt && !opts->continue_final) {
        mark(mk, b.len);
        if (mk) mk->last_end = b.len;
        snug_sbuf_puts(&b, "<|im_start|>assistant\n");
        snug_sbuf_puts(&b, opts->enable_thinking ? "<think>\n" : "<think>\n\n</think>\n\n");
    }
    snug_sbuf_free(&s);
    if (sp && sp->oom) {
        st = snug_err_set(err, SNUG_ERR_NOMEM, "out of memory rendering the prompt");
        goto fail;
    }
    *out_prompt = snug_sbuf_take(&b, out_len);
    if (!*out_prompt) {
        snug_chat_spans_free(sp);
        return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory rendering the prompt");
    }
    return SNUG_OK;
fail:
    snug_sbuf_free(&s);
    snug_sbuf_free(&b);
    snug_chat_spans_free(sp);
    return st;
}
