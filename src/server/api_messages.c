/* api_messages.c — the Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens) as
 * a front end over the generation core: a request body is read into the internal request
 * (struct snug_server_req) directly: its messages become the renderer's (system → a system
 * message; content blocks: text, tool_use → tool_calls, tool_result → tool messages, thinking →
 * reasoning_content), tools with input_schema its function tools, tool_choice its tool choice,
 * and the scalar fields are read from the body under their chat names by request.c's checks
 * (stop_sequences as stop; thinking → the thinking switch + thinking_budget; a final assistant
 * message → continue_final_message, Anthropic's prefill); then the same rendering and engine
 * job as /v1/chat/completions (submit.c). Its formatter (fmt.h) answers from the same reply
 * state in Anthropic's shapes (a message with thinking / text /
 * tool_use blocks, or the SSE event sequence message_start, content_block_start / delta / stop,
 * message_delta, message_stop, ping). Field semantics: Anthropic's API reference (Messages,
 * Streaming Messages, Errors). Image and document blocks get a 400 until vision exists.
 * Invariant: everything the conversion does not understand is a 400 naming the field, never
 * silently dropped (except metadata and fields that only tune Anthropic's own service).
 * Read next: reply.h (the state answered from), api_responses.c (the other front end).
 */
#include "server/reply.h"

#include "server/server_impl.h"

#include "core/core.h"

#include <stdio.h>
#include <string.h>

static json_t *bad(struct snug_server_error *e, const char *param, const char *fmt, const char *a) {
    snug_server_error_set(e, 400, "invalid_request_error", param, fmt, a ? a : "");
    return NULL;
}

/* A block's text, or NULL when it is not a text block. */
static const char *block_text(const json_t *b) {
    const char *t = json_string_value(json_object_get(b, "type"));
    if (!t || strcmp(t, "text")) return NULL;
    return json_string_value(json_object_get(b, "text"));
}

/* The text of a tool_result's content: a string, or text blocks joined by "\n". */
static json_t *tool_result_text(const json_t *content, struct snug_server_error *e) {
    if (!content || json_is_null(content)) return json_string("");
    if (json_is_string(content)) return json_incref((json_t *)content);
    if (!json_is_array(content))
        return bad(e, "messages",
                   "a tool_result's content must be a string or an array of blocks%s", "");
    struct snug_sbuf b = {0};
    size_t i;
    json_t *blk;
    json_array_foreach(content, i, blk) {
        const char *t = block_text(blk);
        const char *type = json_string_value(json_object_get(blk, "type"));
        if (!t) {
            snug_sbuf_free(&b);
            if (type && (!strcmp(type, "image") || !strcmp(type, "document")))
                return bad(e, "messages",
                           "a tool_result holds an %s block: snug takes images in a user "
                           "message's content only",
                           type);
            return bad(e, "messages", "a tool_result's content blocks must be text blocks%s", "");
        }
        if (i) snug_sbuf_putc(&b, '\n');
        snug_sbuf_puts(&b, t);
    }
    json_t *s = json_stringn(b.data ? b.data : "", b.len);
    snug_sbuf_free(&b);
    return s;
}

/* An Anthropic image block as the chat API's image part: a base64 source becomes a data: URL
 * (images.c decodes and checks it); a url source is a 400 (the server fetches nothing). */
static json_t *image_part(const json_t *blk, const char *where, struct snug_server_error *e) {
    const json_t *src = json_object_get(blk, "source");
    const char *st = json_string_value(json_object_get(src, "type"));
    if (st && !strcmp(st, "url")) {
        snug_server_error_set(e, 400, "invalid_request_error", "messages",
                              "%s: an image block with a url source: the server never fetches "
                              "URLs; pass the image as {\"type\": \"base64\", \"media_type\": ..., "
                              "\"data\": ...}",
                              where);
        return NULL;
    }
    const char *mt = json_string_value(json_object_get(src, "media_type"));
    const json_t *data = json_object_get(src, "data");
    if (!st || strcmp(st, "base64") || !mt || !json_is_string(data)) {
        snug_server_error_set(e, 400, "invalid_request_error", "messages",
                              "%s: an image block needs a source {\"type\": \"base64\", "
                              "\"media_type\": \"image/png\", \"data\": \"...\"}",
                              where);
        return NULL;
    }
    struct snug_sbuf u = {0};
    snug_sbuf_puts(&u, "data:");
    snug_sbuf_puts(&u, mt);
    snug_sbuf_puts(&u, ";base64,");
    snug_sbuf_append(&u, json_string_value(data), json_string_length(data));
    json_t *part = u.oom ? NULL
                         : json_pack("{s:s, s:{s:s%}}", "type", "image_url", "image_url", "url",
                                     u.data, u.len);
    snug_sbuf_free(&u);
    if (!part) snug_server_error_set(e, 500, "server_error", NULL, "out of memory");
    return part;
}

/* Append one Anthropic message (role user / assistant) as chat messages to `out`. */
static int convert_message(json_t *out, const json_t *m, size_t idx, struct snug_server_error *e) {
    char where[48];
    snprintf(where, sizeof where, "messages[%zu]", idx);
    const char *role = json_string_value(json_object_get(m, "role"));
    const json_t *content = json_object_get(m, "content");
    if (!json_is_object(m) || !role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
        bad(e, "messages", "'%s.role' must be \"user\" or \"assistant\"", where);
        return -1;
    }
    if (json_is_string(content)) {
        json_array_append_new(out, json_pack("{s:s, s:O}", "role", role, "content", content));
        return 0;
    }
    if (!json_is_array(content)) {
        bad(e, "messages", "'%s.content' must be a string or an array of content blocks", where);
        return -1;
    }
    bool user = !strcmp(role, "user");
    struct snug_sbuf text = {0}, reasoning = {0};
    bool has_text = false;
    json_t *calls = json_array();
    json_t *parts = NULL; /* a user message with images: its text and image parts in order */
    size_t i;
    json_t *blk;
    int rc = 0;
    json_array_foreach(content, i, blk) {
        const char *type = json_string_value(json_object_get(blk, "type"));
        if (!json_is_object(blk) || !type) {
            bad(e, "messages", "'%s.content' blocks must be objects with a \"type\"", where);
            rc = -1;
            break;
        }
        if (!strcmp(type, "text")) {
            const char *t = block_text(blk);
            if (!t) {
                bad(e, "messages", "'%s': a text block needs a string \"text\"", where);
                rc = -1;
                break;
            }
            snug_sbuf_puts(&text, t);
            has_text = true;
        } else if (user && !strcmp(type, "image")) {
            /* the message becomes a list of parts: the text so far, then the image */
            json_t *img = image_part(blk, where, e);
            if (!img) {
                rc = -1;
                break;
            }
            if (!parts) parts = json_array();
            if (has_text)
                json_array_append_new(parts, json_pack("{s:s, s:s%}", "type", "text", "text",
                                                       text.data ? text.data : "", text.len));
            snug_sbuf_reset(&text);
            has_text = false;
            json_array_append_new(parts, img);
        } else if (!strcmp(type, "image") || !strcmp(type, "document")) {
            snug_server_error_set(e, 400, "invalid_request_error", "messages",
                                  "%s holds an %s block: snug takes images in user messages only "
                                  "(and no documents)",
                                  where, type);
            rc = -1;
            break;
        } else if (user && !strcmp(type, "tool_result")) {
            if (parts) { /* text and images before the results: their own user turn */
                if (has_text)
                    json_array_append_new(parts, json_pack("{s:s, s:s%}", "type", "text", "text",
                                                           text.data ? text.data : "", text.len));
                json_array_append_new(out,
                                      json_pack("{s:s, s:o}", "role", "user", "content", parts));
                parts = NULL;
                snug_sbuf_reset(&text);
                has_text = false;
            }
            if (has_text) { /* text before the results: its own user turn */
                json_array_append_new(out, json_pack("{s:s, s:s%}", "role", "user", "content",
                                                     text.data ? text.data : "", text.len));
                snug_sbuf_reset(&text);
                has_text = false;
            }
            json_t *t = tool_result_text(json_object_get(blk, "content"), e);
            if (!t) {
                rc = -1;
                break;
            }
            const char *id = json_string_value(json_object_get(blk, "tool_use_id"));
            json_t *tm = json_pack("{s:s, s:o}", "role", "tool", "content", t);
            if (id) json_object_set_new(tm, "tool_call_id", json_string(id));
            json_array_append_new(out, tm);
        } else if (!user && !strcmp(type, "tool_use")) {
            const char *name = json_string_value(json_object_get(blk, "name"));
            const json_t *input = json_object_get(blk, "input");
            if (!name || (input && !json_is_object(input))) {
                bad(e, "messages",
                    "'%s': a tool_use block needs a \"name\" and an object \"input\"", where);
                rc = -1;
                break;
            }
            const char *id = json_string_value(json_object_get(blk, "id"));
            /* "o" steals: a borrowed input gets its own reference, a missing one a new {} */
            json_t *args = input ? json_incref((json_t *)input) : json_object();
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", id ? id : "",
                                                   "type", "function", "function", "name", name,
                                                   "arguments", args));
        } else if (!user && !strcmp(type, "thinking")) {
            const char *t = json_string_value(json_object_get(blk, "thinking"));
            if (t) snug_sbuf_puts(&reasoning, t);
        } else if (!user && !strcmp(type, "redacted_thinking")) {
            /* opaque to this server: nothing to render */
        } else {
            snug_server_error_set(e, 400, "invalid_request_error", "messages",
                                  "%s: content blocks of type '%s' are not supported in a%s "
                                  "message",
                                  where, type, user ? " user" : "n assistant");
            rc = -1;
            break;
        }
    }
    if (rc == 0 && parts) {
        if (has_text)
            json_array_append_new(parts, json_pack("{s:s, s:s%}", "type", "text", "text",
                                                   text.data ? text.data : "", text.len));
        json_array_append_new(out, json_pack("{s:s, s:O}", "role", role, "content", parts));
    } else if (rc == 0 && (has_text || json_array_size(calls) || reasoning.len || !user)) {
        json_t *msg =
            json_pack("{s:s, s:s%}", "role", role, "content", text.data ? text.data : "", text.len);
        if (reasoning.len)
            json_object_set_new(msg, "reasoning_content",
                                json_stringn(reasoning.data, reasoning.len));
        if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
        json_array_append_new(out, msg);
    }
    json_decref(calls);
    json_decref(parts);
    snug_sbuf_free(&text);
    snug_sbuf_free(&reasoning);
    return rc;
}

/* What the chat fields of an Anthropic request stand for: the body's own values (read under
 * their chat names) and what the conversion built (the renderer's messages and tools). */
struct view {
    const json_t *body;
    json_t *messages, *tools, *tool_choice; /* built (owned until handed to the request) */
    const json_t *thinking_budget;          /* the body's budget_tokens when thinking is on */
    int think;                              /* thinking on / off as asked; -1 = the default */
    bool prefill;                           /* a final assistant message: continued */
};

static const struct snug_field_alias body_fields[] = {
    {"model", NULL}, {"stream", NULL},     {"temperature", NULL},
    {"top_p", NULL}, {"top_k", NULL},      {"snug_script", NULL},
    {"seed", NULL},  {"max_tokens", NULL}, {"stop", "stop_sequences"}};

static const json_t *view_get(void *ctx, const char *k) {
    const struct view *v = ctx;
    const json_t *f;
    if (snug_server_field_alias(v->body, k, body_fields, sizeof body_fields / sizeof *body_fields,
                                &f))
        return f;
    if (!strcmp(k, "messages")) return v->messages;
    if (!strcmp(k, "tools")) return v->tools;
    if (!strcmp(k, "tool_choice")) return v->tool_choice;
    if (!strcmp(k, "thinking_budget")) return v->thinking_budget;
    if (!strcmp(k, "continue_final_message")) return v->prefill ? json_true() : NULL;
    return NULL;
}

static void view_free(struct view *v) {
    json_decref(v->messages);
    json_decref(v->tools);
    json_decref(v->tool_choice);
}

/* The conversion shared by /v1/messages (max_tokens required) and count_tokens (not): the body
 * checked and its messages, tools and tool choice built into *v; -1 with *e on a bad body. */
static int convert(struct view *v, const json_t *body, bool need_max_tokens,
                   struct snug_server_error *e) {
    *v = (struct view){.body = body, .think = -1};
    if (!json_is_object(body))
        return bad(e, NULL, "the request body must be a JSON object%s", ""), -1;
    const json_t *x = json_object_get(body, "max_tokens");
    if (x) {
        if (!json_is_integer(x) || json_integer_value(x) < 1)
            return bad(e, "max_tokens", "'max_tokens' must be an integer >= 1%s", ""), -1;
    } else if (need_max_tokens) {
        return bad(e, "max_tokens", "'max_tokens' is required%s", ""), -1;
    }
    if ((x = json_object_get(body, "metadata")) && !json_is_null(x) && !json_is_object(x))
        return bad(e, "metadata", "'metadata' must be an object%s", ""), -1;
    json_t *msgs = v->messages = json_array();
    /* system: a string or text blocks */
    if ((x = json_object_get(body, "system")) && !json_is_null(x)) {
        json_t *sys = NULL;
        if (json_is_string(x)) {
            sys = json_incref((json_t *)x);
        } else if (json_is_array(x)) {
            struct snug_sbuf b = {0};
            size_t i;
            json_t *blk;
            json_array_foreach(x, i, blk) {
                const char *t = block_text(blk);
                if (!t) {
                    snug_sbuf_free(&b);
                    return bad(e, "system", "'system' blocks must be text blocks%s", ""), -1;
                }
                if (i) snug_sbuf_putc(&b, '\n');
                snug_sbuf_puts(&b, t);
            }
            sys = json_stringn(b.data ? b.data : "", b.len);
            snug_sbuf_free(&b);
        } else {
            return bad(e, "system", "'system' must be a string or an array of text blocks%s", ""),
                   -1;
        }
        json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "system", "content", sys));
    }
    x = json_object_get(body, "messages");
    if (!json_is_array(x) || json_array_size(x) == 0)
        return bad(e, "messages", "'messages' must be a non-empty array%s", ""), -1;
    size_t i;
    json_t *m;
    json_array_foreach(x, i, m) {
        if (convert_message(msgs, m, i, e)) return -1;
    }
    /* the assistant prefill: a final assistant message is continued */
    const char *last =
        json_string_value(json_object_get(json_array_get(x, json_array_size(x) - 1), "role"));
    v->prefill = last && !strcmp(last, "assistant");
    /* tools: client tools (input_schema) become function tools */
    if ((x = json_object_get(body, "tools")) && !json_is_null(x)) {
        if (!json_is_array(x)) return bad(e, "tools", "'tools' must be an array%s", ""), -1;
        json_t *tools = v->tools = json_array();
        json_t *t;
        json_array_foreach(x, i, t) {
            const char *name = json_string_value(json_object_get(t, "name"));
            const char *type = json_string_value(json_object_get(t, "type"));
            const json_t *schema = json_object_get(t, "input_schema");
            if (type && strcmp(type, "custom"))
                return snug_server_error_set(e, 400, "invalid_request_error", "tools",
                                             "tool '%s' has type '%s': only client tools (a name "
                                             "and an input_schema) are supported",
                                             name ? name : "?", type);
            if (!name || !json_is_object(schema))
                return bad(e, "tools",
                           "each tool needs a \"name\" and an object \"input_schema\"%s", ""),
                       -1;
            /* OpenAI's key order (name, description, parameters): the template prints it */
            json_t *fn = json_pack("{s:s}", "name", name);
            const json_t *d = json_object_get(t, "description");
            if (json_is_string(d)) json_object_set(fn, "description", (json_t *)d);
            json_object_set(fn, "parameters", (json_t *)schema);
            json_array_append_new(tools,
                                  json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
    }
    if ((x = json_object_get(body, "tool_choice")) && !json_is_null(x)) {
        const char *type = json_string_value(json_object_get(x, "type"));
        json_t *tc = NULL;
        if (type && !strcmp(type, "auto"))
            tc = json_string("auto");
        else if (type && !strcmp(type, "any"))
            tc = json_string("required");
        else if (type && !strcmp(type, "none"))
            tc = json_string("none");
        else if (type && !strcmp(type, "tool") && json_is_string(json_object_get(x, "name")))
            tc = json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name",
                           json_object_get(x, "name"));
        if (!tc)
            return bad(e, "tool_choice",
                       "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or "
                       "{\"type\": \"tool\", \"name\": ...}%s",
                       ""),
                   -1;
        v->tool_choice = tc;
    }
    /* thinking: {"type": "enabled", "budget_tokens": N} | {"type": "disabled"}; absent = the
     * server's default */
    if ((x = json_object_get(body, "thinking")) && !json_is_null(x)) {
        const char *type = json_string_value(json_object_get(x, "type"));
        const json_t *bt = json_object_get(x, "budget_tokens");
        bool on = type && (!strcmp(type, "enabled") || !strcmp(type, "adaptive"));
        if (!type || (!on && strcmp(type, "disabled")) ||
            (bt && (!json_is_integer(bt) || json_integer_value(bt) < 0)))
            return bad(e, "thinking",
                       "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N >= 0} or "
                       "{\"type\": \"disabled\"}%s",
                       ""),
                   -1;
        v->think = on;
        if (on && bt) v->thinking_budget = bt;
    }
    return 0;
}

/* Read an Anthropic body into *r (a chat request); -1 with *e set on a bad one. */
static int parse(struct snug_server_req *r, const json_t *body, bool need_max_tokens,
                 struct snug_server_error *e) {
    struct view v;
    memset(r, 0, sizeof *r);
    if (convert(&v, body, need_max_tokens, e)) {
        view_free(&v);
        return -1;
    }
    /* what the request's values borrow from: the body and what was built */
    json_t *keep = json_array();
    json_t *held[] = {(json_t *)body, v.messages, v.tools, v.tool_choice};
    size_t want = 0;
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++)
        if (held[i]) want++, json_array_append(keep, held[i]);
    view_free(&v); /* keep holds them now; v's pointers stay valid through it */
    if (json_array_size(keep) != want) {
        json_decref(keep);
        return snug_server_error_set(e, 500, "server_error", NULL, "out of memory");
    }
    if (snug_server_req_from_fields(r, view_get, &v, keep, e)) return -1;
    r->think_switch = (int8_t)v.think;
    return 0;
}

int snug_server_messages_parse(struct snug_server_req *r, const json_t *body,
                               struct snug_server_error *e) {
    return parse(r, body, true, e);
}

static json_t *load(const char *body, size_t len, struct snug_server_error *e) {
    if (snug_server_body_precheck(body, len, e)) return NULL; /* before parsing it */
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        snug_server_error_set(e, 400, "invalid_request_error", NULL,
                              "the request body is not valid JSON: %s (line %d, column %d)",
                              je.text, je.line, je.column);
    return root;
}

enum MHD_Result snug_msgs_handle(struct snug_srv *s, struct MHD_Connection *c, const char *body,
                                 size_t len, void **pending) {
    struct snug_server_error e = {0};
    struct snug_server_req q;
    json_t *root = load(body, len, &e);
    int rc = root ? parse(&q, root, true, &e) : -1;
    json_decref(root);
    if (rc) return snug_reply_fail(s, c, ROUTE_MESSAGES, &snug_fmt_messages, &e);
    return snug_srv_submit(s, c, &snug_fmt_messages, ROUTE_MESSAGES, &q, NULL, pending);
}

enum MHD_Result snug_msgs_count_tokens(struct snug_srv *s, struct MHD_Connection *c,
                                       const char *body, size_t len) {
    struct snug_server_error e = {0};
    struct snug_server_req q;
    json_t *root = load(body, len, &e);
    int rc = root ? parse(&q, root, false, &e) : -1;
    json_decref(root);
    int32_t n = 0;
    if (!rc) {
        rc = snug_srv_count_req_tokens(s, &q, &n, &e);
        snug_server_req_free(&q);
    }
    if (rc) return snug_reply_fail(s, c, ROUTE_COUNT_TOKENS, &snug_fmt_messages, &e);
    snug_srv_count(s, ROUTE_COUNT_TOKENS, 200);
    return snug_srv_send_json(c, 200, json_pack("{s:i}", "input_tokens", n));
}

/* ==== the answer ============================================================================ */

static const char *stop_reason(const struct reply *r) {
    if (r->n_calls > 0) return "tool_use";
    switch (r->finish) {
    case SNUG_FINISH_LENGTH:
    case SNUG_FINISH_TIMEOUT:
        return "max_tokens";
    default:
        return r->stop.stopped ? "stop_sequence" : "end_turn";
    }
}

static json_t *stop_sequence(const struct reply *r) {
    return r->stop.stopped && r->n_calls == 0 ? json_string(r->req.stop[r->stop.matched])
                                              : json_null();
}

static json_t *usage(const struct reply *r, bool final) {
    const struct snug_engine_usage *u = &r->usage;
    int32_t n_prompt = final ? u->n_prompt : r->job.n_prompt;
    int32_t cached = final ? u->n_cached : 0;
    return json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", n_prompt - cached, "output_tokens",
                     final ? u->n_gen : 0, "cache_read_input_tokens", cached,
                     "cache_creation_input_tokens", 0);
}

/* A tool call's arguments as the tool_use block's input object ({} when not an object). */
static json_t *tool_input(const struct tool_call *t) {
    json_t *in = t->args.len ? json_loadb(t->args.data, t->args.len, 0, NULL) : NULL;
    if (!json_is_object(in)) {
        json_decref(in);
        in = json_object();
    }
    return in;
}

static json_t *message(struct reply *r, json_t *content, bool final) {
    json_t *m = json_pack(
        "{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o}", "id", r->id, "type", "message", "role",
        "assistant", "model", r->req.model ? r->req.model : r->srv->model_id, "content", content,
        "stop_reason", final ? json_string(stop_reason(r)) : json_null(), "stop_sequence",
        final ? stop_sequence(r) : json_null(), "usage", usage(r, final));
    const char *closed = final && r->has_think ? snug_think_end_name(&r->think) : NULL;
    if (closed) json_object_set_new(m, "reasoning_closed", json_string(closed));
    return m;
}

static json_t *msgs_final(struct reply *r) {
    json_t *content = json_array();
    if (r->reasoning.len)
        json_array_append_new(content,
                              json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                                        snug_srv_json_str(r->reasoning.data, r->reasoning.len),
                                        "signature", ""));
    if (r->content.len || (!r->reasoning.len && !r->n_calls))
        json_array_append_new(
            content,
            json_pack("{s:s, s:o}", "type", "text", "text",
                      snug_srv_json_str(r->content.data ? r->content.data : "", r->content.len)));
    for (int i = 0; i < r->n_calls; i++) {
        const struct tool_call *t = &r->calls[i];
        json_array_append_new(content,
                              json_pack("{s:s, s:s, s:o, s:o}", "type", "tool_use", "id", t->id,
                                        "name", snug_srv_json_str(t->name.data, t->name.len),
                                        "input", tool_input(t)));
    }
    return message(r, content, true);
}

/* ---- streaming ---- */

static void event(struct reply *r, const char *type, json_t *obj) {
    json_object_set_new(obj, "type", json_string(type));
    snug_reply_sse(r, type, obj);
}

static void block_stop(struct reply *r) {
    if (r->as.cur < 0) return;
    event(r, "content_block_stop", json_pack("{s:i}", "index", r->as.cur_index));
    r->as.cur = -1;
}

/* Make block `kind` (0 thinking, 1 text, 2 + i tool call i) the open one. */
static void block_open(struct reply *r, int kind) {
    if (r->as.cur == kind) return;
    block_stop(r);
    json_t *cb;
    if (kind == 0) {
        cb = json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "");
    } else if (kind == 1) {
        cb = json_pack("{s:s, s:s}", "type", "text", "text", "");
    } else {
        const struct tool_call *t = &r->calls[kind - 2];
        cb = json_pack("{s:s, s:s, s:o, s:{}}", "type", "tool_use", "id", t->id, "name",
                       snug_srv_json_str(t->name.data, t->name.len), "input");
    }
    r->as.cur = kind;
    r->as.cur_index = r->as.next_index++;
    event(r, "content_block_start",
          json_pack("{s:i, s:o}", "index", r->as.cur_index, "content_block", cb));
}

static void delta(struct reply *r, const char *type, const char *key, const struct snug_sbuf *b,
                  size_t from) {
    event(r, "content_block_delta",
          json_pack("{s:i, s:{s:s, s:o}}", "index", r->as.cur_index, "delta", "type", type, key,
                    snug_srv_json_str(b->data ? b->data + from : "", b->len - from)));
}

static void msgs_stream(struct reply *r) {
    if (!r->as.started) {
        event(r, "message_start", json_pack("{s:o}", "message", message(r, json_array(), false)));
        event(r, "ping", json_object());
        r->as.started = true;
    }
    if (r->reasoning.len > r->reasoning_sent) {
        block_open(r, 0);
        delta(r, "thinking_delta", "thinking", &r->reasoning, r->reasoning_sent);
        r->reasoning_sent = r->reasoning.len;
    }
    if (r->content.len > r->content_sent) {
        block_open(r, 1);
        delta(r, "text_delta", "text", &r->content, r->content_sent);
        r->content_sent = r->content.len;
    }
    for (int i = 0; i < r->n_calls; i++) {
        struct tool_call *t = &r->calls[i];
        if (!t->head_sent) {
            block_open(r, 2 + i);
            t->head_sent = true;
        }
        if (t->args.len > t->args_sent && r->as.cur == 2 + i) {
            delta(r, "input_json_delta", "partial_json", &t->args, t->args_sent);
            t->args_sent = t->args.len;
        }
    }
    if (r->ended && !r->final_sent) {
        block_stop(r);
        if (r->finish == SNUG_FINISH_ERROR || r->oom) {
            event(r, "error",
                  json_pack("{s:{s:s, s:s}}", "error", "type", "api_error", "message",
                            r->oom         ? "out of memory"
                            : r->errmsg[0] ? r->errmsg
                                           : "generation failed"));
        } else {
            json_t *md = json_pack("{s:{s:s, s:o}, s:o}", "delta", "stop_reason", stop_reason(r),
                                   "stop_sequence", stop_sequence(r), "usage", usage(r, true));
            const char *closed = r->has_think ? snug_think_end_name(&r->think) : NULL;
            if (closed) json_object_set_new(md, "reasoning_closed", json_string(closed));
            event(r, "message_delta", md);
            event(r, "message_stop", json_object());
        }
        r->final_sent = true;
    }
}

/* An error answer's body: {"type": "error", "error": {"type", "message"}}. */
static json_t *error_body(const struct snug_server_error *e) {
    return json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type",
                     snug_srv_anthropic_error_type(e->http_status), "message",
                     snug_srv_json_str(e->msg, strlen(e->msg)));
}

const struct snug_fmt snug_fmt_messages = {
    .id_prefix = "msg_",
    .stream = msgs_stream,
    .final = msgs_final,
    .error_body = error_body,
    .error_oom_body = "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the "
                      "server could not build its answer (out of memory)\"}}",
};
