/* api_responses.c — the OpenAI Responses API (POST /v1/responses) as a front end over the chat
 * path: `input` (a string, or items: messages, function_call, function_call_output, reasoning),
 * `instructions`, function tools, tool_choice, max_output_tokens and reasoning.effort (→ thinking
 * off / a thinking budget, snug_server_effort_budget) are read into the internal request
 * (struct snug_server_req) directly: the renderer's messages and tools are built, the scalar
 * fields read from the body under their chat names by request.c's checks; then the same
 * rendering and engine job as /v1/chat/completions (submit.c). Its formatter (fmt.h) answers
 * with a response object (output items: reasoning, message,
 * function_call) or the Responses SSE event sequence (response.created, response.in_progress,
 * response.output_item.added / done, response.content_part.added / done,
 * response.reasoning_text.delta / done, response.output_text.delta / done,
 * response.function_call_arguments.delta / done, response.completed or response.incomplete),
 * each event with its sequence_number. Field semantics: OpenAI's API reference (Responses,
 * Streaming events). `previous_response_id` continues a stored conversation: each answered
 * response's messages (input + output, without the instructions, which are not carried over)
 * are kept in an in-memory LRU of --responses-store entries for the server's lifetime.
 * Custom tools (free-form input, optionally under a Lark or regex grammar) become functions of
 * one raw string parameter `input` whose value the grammar constrains (src/grammar/lark.c);
 * their calls come back as custom_tool_call items (streamed as
 * response.custom_tool_call_input.delta / done, the input in one delta when the call ends).
 * Built-in tools are a 400 naming them. text.format json_schema / json_object become the
 * request's response_format (grammar-constrained output).
 * Invariant: the stream's output items and the final response's output are the same items (ids
 * included): the final event carries the items the stream closed.
 * Read next: api_messages.c (the Anthropic front end), reply.h.
 */
#include "server/reply.h"

#include "server/server_impl.h"

#include "core/core.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== the store (previous_response_id, GET / DELETE /v1/responses/{id}) ================= */

struct stored {
    char id[64];
    json_t *messages; /* the chat messages of the conversation so far */
    json_t *response; /* the response object as answered */
    json_t *input;    /* this response's input items, each with an id */
    uint64_t used;
};

struct snug_responses_store {
    pthread_mutex_t mu;
    struct stored *v;
    int32_t cap, n;
    uint64_t clock;
};

int snug_responses_store_init(struct snug_responses_store **out, int32_t cap) {
    struct snug_responses_store *st = snug_calloc(1, sizeof *st);
    if (cap <= 0) cap = 64;
    if (st) st->v = snug_calloc((size_t)cap, sizeof *st->v);
    if (!st || !st->v) {
        snug_free(st);
        *out = NULL;
        return SNUG_ERR_NOMEM;
    }
    st->cap = cap;
    pthread_mutex_init(&st->mu, NULL);
    *out = st;
    return SNUG_OK;
}

static void stored_clear(struct stored *e) {
    json_decref(e->messages);
    json_decref(e->response);
    json_decref(e->input);
    memset(e, 0, sizeof *e);
}

void snug_responses_store_free(struct snug_responses_store *st) {
    if (!st) return;
    for (int32_t i = 0; i < st->n; i++) stored_clear(&st->v[i]);
    pthread_mutex_destroy(&st->mu);
    snug_free(st->v);
    snug_free(st);
}

/* Keep a response (messages, response object, input items: stolen) under id, evicting the
 * least recently used entry when full. */
static void store_put(struct snug_responses_store *st, const char *id, json_t *messages,
                      json_t *response, json_t *input) {
    pthread_mutex_lock(&st->mu);
    struct stored *slot = NULL;
    if (st->n < st->cap) {
        slot = &st->v[st->n++];
    } else {
        slot = &st->v[0];
        for (int32_t i = 1; i < st->n; i++)
            if (st->v[i].used < slot->used) slot = &st->v[i];
        stored_clear(slot);
    }
    snprintf(slot->id, sizeof slot->id, "%s", id);
    slot->messages = messages;
    slot->response = response;
    slot->input = input;
    slot->used = ++st->clock;
    pthread_mutex_unlock(&st->mu);
}

enum stored_part { PART_MESSAGES, PART_RESPONSE, PART_INPUT };

/* A deep copy of one part of the stored response `id`, or NULL (also when not stored). */
static json_t *store_get(struct snug_responses_store *st, const char *id, enum stored_part part) {
    json_t *m = NULL;
    pthread_mutex_lock(&st->mu);
    for (int32_t i = 0; i < st->n; i++)
        if (!strcmp(st->v[i].id, id)) {
            struct stored *e = &st->v[i];
            m = json_deep_copy(part == PART_MESSAGES   ? e->messages
                               : part == PART_RESPONSE ? e->response
                                                       : e->input);
            e->used = ++st->clock;
            break;
        }
    pthread_mutex_unlock(&st->mu);
    return m;
}

/* Forget the stored response `id`; false when there is none. */
static bool store_delete(struct snug_responses_store *st, const char *id) {
    bool found = false;
    pthread_mutex_lock(&st->mu);
    for (int32_t i = 0; i < st->n && !found; i++)
        if (!strcmp(st->v[i].id, id)) {
            stored_clear(&st->v[i]);
            st->v[i] = st->v[--st->n];
            memset(&st->v[st->n], 0, sizeof st->v[st->n]);
            found = true;
        }
    pthread_mutex_unlock(&st->mu);
    return found;
}

/* ==== request conversion ==================================================================== */

static json_t *bad(struct snug_server_error *e, const char *param, const char *fmt, const char *a) {
    snug_server_error_set(e, 400, "invalid_request_error", param, fmt, a ? a : "");
    return NULL;
}

/* A message's content for the chat API: a string, or parts input_text / output_text / text
 * joined into one string; with input_image parts, a list of chat parts in order (text parts,
 * and image_url parts with the image's data: URL, which images.c decodes and checks). */
static json_t *content_text(const json_t *content, struct snug_server_error *e) {
    if (json_is_string(content)) return json_incref((json_t *)content);
    if (!json_is_array(content))
        return bad(e, "input", "a message's content must be a string or an array of parts%s", "");
    struct snug_sbuf b = {0};
    json_t *parts = NULL;
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        const char *t = json_string_value(json_object_get(p, "text"));
        if (type && !strcmp(type, "input_image")) {
            const char *url = json_string_value(json_object_get(p, "image_url"));
            if (!url) {
                snug_sbuf_free(&b);
                json_decref(parts);
                return bad(e, "input",
                           json_object_get(p, "file_id")
                               ? "an input_image with a file_id: this server keeps no files; "
                                 "pass the image as a data: URL in image_url%s"
                               : "an input_image needs image_url (a data: URL)%s",
                           "");
            }
            if (!parts) parts = json_array();
            if (b.len)
                json_array_append_new(
                    parts, json_pack("{s:s, s:s%}", "type", "text", "text", b.data, b.len));
            snug_sbuf_reset(&b);
            json_array_append_new(
                parts, json_pack("{s:s, s:{s:s}}", "type", "image_url", "image_url", "url", url));
            continue;
        }
        if (type && (!strcmp(type, "input_file") || !strcmp(type, "input_audio"))) {
            snug_sbuf_free(&b);
            json_decref(parts);
            return bad(e, "input", "the input holds an '%s' part: snug takes text and images",
                       type);
        }
        if (!type || !t ||
            (strcmp(type, "input_text") && strcmp(type, "output_text") && strcmp(type, "text"))) {
            snug_sbuf_free(&b);
            json_decref(parts);
            return bad(e, "input",
                       "content part type '%s' is not supported (input_text, "
                       "output_text, input_image)",
                       type ? type : "?");
        }
        snug_sbuf_puts(&b, t);
    }
    if (parts) {
        if (b.len)
            json_array_append_new(parts,
                                  json_pack("{s:s, s:s%}", "type", "text", "text", b.data, b.len));
        snug_sbuf_free(&b);
        return parts;
    }
    json_t *s = json_stringn(b.data ? b.data : "", b.len);
    snug_sbuf_free(&b);
    return s;
}

/* The last chat message when it is an assistant turn, for function calls to join. */
static json_t *open_assistant(json_t *msgs) {
    json_t *m = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *role = json_string_value(json_object_get(m, "role"));
    return role && !strcmp(role, "assistant") ? m : NULL;
}

static int convert_item(json_t *msgs, const json_t *it, size_t idx, struct snug_server_error *e) {
    if (!json_is_object(it)) {
        bad(e, "input", "'input' items must be objects%s", "");
        return -1;
    }
    const char *type = json_string_value(json_object_get(it, "type"));
    const char *role = json_string_value(json_object_get(it, "role"));
    if (!type || !strcmp(type, "message")) {
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") &&
                      strcmp(role, "developer"))) {
            bad(e, "input", "a message item needs a role: user, assistant, system or developer%s",
                "");
            return -1;
        }
        json_t *text = content_text(json_object_get(it, "content"), e);
        if (!text) return -1;
        json_t *prev = !strcmp(role, "assistant") ? open_assistant(msgs) : NULL;
        const char *pc = json_string_value(json_object_get(prev, "content"));
        if (prev && pc && !*pc && !json_object_get(prev, "tool_calls")) {
            json_object_set_new(prev, "content", text); /* the message after its reasoning */
        } else {
            json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", role, "content", text));
        }
        return 0;
    }
    if (!strcmp(type, "function_call") || !strcmp(type, "custom_tool_call")) {
        bool custom = !strcmp(type, "custom_tool_call");
        const char *name = json_string_value(json_object_get(it, "name"));
        const json_t *input = json_object_get(it, "input");
        const char *args = json_string_value(json_object_get(it, "arguments"));
        const char *cid = json_string_value(json_object_get(it, "call_id"));
        char *owned = NULL;
        if (custom && json_is_string(input)) { /* the chat form: {"input": "..."} */
            json_t *o = json_pack("{s:O}", "input", input);
            args = owned = o ? json_dumps(o, JSON_COMPACT) : NULL;
            json_decref(o);
        }
        if (!name || !args) {
            bad(e, "input",
                custom ? "a %s item needs \"name\" and \"input\" strings"
                       : "a %s item needs \"name\" and \"arguments\" strings",
                type);
            return -1;
        }
        json_t *m = open_assistant(msgs);
        if (!m) {
            m = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
            json_array_append_new(msgs, m);
        }
        json_t *calls = json_object_get(m, "tool_calls");
        if (!calls) json_object_set_new(m, "tool_calls", calls = json_array());
        json_array_append_new(calls,
                              json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", cid ? cid : "", "type",
                                        "function", "function", "name", name, "arguments", args));
        free(owned); /* jansson's allocation */
        return 0;
    }
    if (!strcmp(type, "function_call_output") || !strcmp(type, "custom_tool_call_output")) {
        const json_t *out = json_object_get(it, "output");
        json_t *text = json_is_string(out) ? json_incref((json_t *)out) : content_text(out, e);
        if (!text) return -1;
        json_t *m = json_pack("{s:s, s:o}", "role", "tool", "content", text);
        const char *cid = json_string_value(json_object_get(it, "call_id"));
        if (cid) json_object_set_new(m, "tool_call_id", json_string(cid));
        json_array_append_new(msgs, m);
        return 0;
    }
    if (!strcmp(type, "reasoning")) {
        /* its reasoning_text (or, lacking that, its summary) opens the assistant turn */
        struct snug_sbuf b = {0};
        const char *keys[2] = {"content", "summary"};
        for (int k = 0; k < 2 && !b.len; k++) {
            size_t i;
            json_t *p;
            json_array_foreach(json_object_get(it, keys[k]), i, p) {
                const char *t = json_string_value(json_object_get(p, "text"));
                if (t) snug_sbuf_puts(&b, t);
            }
        }
        json_array_append_new(msgs,
                              json_pack("{s:s, s:s, s:s%}", "role", "assistant", "content", "",
                                        "reasoning_content", b.data ? b.data : "", b.len));
        snug_sbuf_free(&b);
        return 0;
    }
    snug_server_error_set(e, 400, "invalid_request_error", "input",
                          "input[%zu]: items of type '%s' are not supported (message, "
                          "function_call, function_call_output, custom_tool_call, "
                          "custom_tool_call_output, reasoning)",
                          idx, type);
    return -1;
}

/* The request's input as Responses items (ids are added when the response is stored): a
 * string is one user message; a message item's string content becomes one input_text part
 * (output_text for the assistant's); other items are kept as they are. */
static json_t *input_items(const json_t *input) {
    json_t *out = json_array();
    if (json_is_string(input)) {
        json_array_append_new(out, json_pack("{s:s, s:s, s:[{s:s, s:O}], s:s}", "type", "message",
                                             "role", "user", "content", "type", "input_text",
                                             "text", input, "status", "completed"));
        return out;
    }
    size_t i;
    const json_t *it;
    json_array_foreach(input, i, it) {
        json_t *c = json_deep_copy(it);
        const char *type = json_string_value(json_object_get(c, "type"));
        const char *role = json_string_value(json_object_get(c, "role"));
        if (c && (!type || !strcmp(type, "message")) && role) {
            bool asst = !strcmp(role, "assistant");
            const json_t *content = json_object_get(c, "content");
            if (json_is_string(content))
                json_object_set_new(
                    c, "content",
                    asst ? json_pack("[{s:s, s:O, s:[]}]", "type", "output_text", "text", content,
                                     "annotations")
                         : json_pack("[{s:s, s:O}]", "type", "input_text", "text", content));
            json_object_set_new(c, "type", json_string("message"));
            if (!json_object_get(c, "status"))
                json_object_set_new(c, "status", json_string("completed"));
        }
        if (c) json_array_append_new(out, c);
    }
    return out;
}

/* What the chat fields of a Responses request stand for: the body's own values (read under
 * their chat names) and what the conversion built (the renderer's messages and tools, the tool
 * choice and response_format in the chat's form). */
struct view {
    const json_t *body;
    json_t *messages, *tools, *tool_choice, *response_format; /* built (owned) */
    const json_t *effort;                                     /* reasoning.effort */
};

static const struct snug_field_alias body_fields[] = {
    {"model", NULL},           {"stream", NULL},
    {"temperature", NULL},     {"top_p", NULL},
    {"snug_script", NULL},     {"seed", NULL},
    {"thinking_budget", NULL}, {"max_tokens", "max_output_tokens"}};

static const json_t *view_get(void *ctx, const char *k) {
    const struct view *v = ctx;
    const json_t *f;
    if (snug_server_field_alias(v->body, k, body_fields, sizeof body_fields / sizeof *body_fields,
                                &f))
        return f;
    if (!strcmp(k, "messages")) return v->messages;
    if (!strcmp(k, "tools")) return v->tools;
    if (!strcmp(k, "tool_choice")) return v->tool_choice;
    if (!strcmp(k, "reasoning_effort")) return v->effort;
    if (!strcmp(k, "response_format")) return v->response_format;
    return NULL;
}

static void view_free(struct view *v) {
    json_decref(v->messages);
    json_decref(v->tools);
    json_decref(v->tool_choice);
    json_decref(v->response_format);
}

/* The body checked and its messages (a stored conversation first), tools, tool choice and
 * response format built into *v, the answer's context into *extra; -1 with *e on a bad body. */
static int convert(struct view *v, struct snug_responses_store *store, const json_t *body,
                   json_t **extra, struct snug_server_error *e) {
    *v = (struct view){.body = body};
    *extra = NULL;
    if (!json_is_object(body))
        return bad(e, NULL, "the request body must be a JSON object%s", ""), -1;
    json_t *msgs = NULL;
    const json_t *x;
    const char *prev = json_string_value(json_object_get(body, "previous_response_id"));
    if (prev) {
        msgs = store ? store_get(store, prev, PART_MESSAGES) : NULL;
        if (!msgs)
            return snug_server_error_set(e, 404, "invalid_request_error", "previous_response_id",
                                         "Previous response with id '%s' not found (responses "
                                         "are kept in memory: the last --responses-store of "
                                         "this server's run)",
                                         prev);
    } else {
        msgs = json_array();
    }
    x = json_object_get(body, "input");
    if (json_is_string(x)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", x));
    } else if (json_is_array(x)) {
        size_t i;
        json_t *it;
        json_array_foreach(x, i, it) {
            if (convert_item(msgs, it, i, e)) {
                json_decref(msgs);
                return -1;
            }
        }
    } else if (x || !prev) {
        json_decref(msgs);
        return bad(e, "input", "'input' must be a string or an array of items%s", ""), -1;
    }
    /* what a later previous_response_id continues from: the messages without instructions;
     * and the input as items, for GET /v1/responses/{id}/input_items */
    json_t *ex = json_pack("{s:O, s:o}", "messages", msgs, "input_items", input_items(x));
    json_t *all = msgs;
    const json_t *ins = json_object_get(body, "instructions");
    if (json_is_string(ins) && json_string_length(ins)) {
        all = json_deep_copy(msgs);
        json_decref(msgs);
        json_t *first = json_array_get(all, 0);
        const char *r0 = json_string_value(json_object_get(first, "role"));
        const char *c0 = json_string_value(json_object_get(first, "content"));
        if (r0 && c0 && (!strcmp(r0, "system") || !strcmp(r0, "developer"))) {
            struct snug_sbuf b = {0};
            snug_sbuf_puts(&b, json_string_value(ins));
            snug_sbuf_puts(&b, "\n\n");
            snug_sbuf_puts(&b, c0);
            json_object_set_new(first, "content", json_stringn(b.data, b.len));
            snug_sbuf_free(&b);
        } else {
            json_array_insert_new(all, 0,
                                  json_pack("{s:s, s:O}", "role", "system", "content", ins));
        }
    } else if (ins && !json_is_null(ins) && !json_is_string(ins)) {
        json_decref(ex);
        json_decref(msgs);
        return bad(e, "instructions", "'instructions' must be a string%s", ""), -1;
    }
    v->messages = all;
    *extra = ex; /* released by the caller on failure too */
    /* tools: function tools, and custom tools (free-form input, optionally under a grammar)
     * as functions of one raw string parameter `input`; the grammar (Lark or regex) constrains
     * that parameter (snug_tools_to_gbnf reads function.format), and the answer turns their
     * calls back into custom_tool_call items (the names are kept in extra.custom_tools). */
    if ((x = json_object_get(body, "tools")) && json_is_array(x) && json_array_size(x)) {
        json_t *tools = v->tools = json_array(), *custom = json_array();
        json_object_set_new(ex, "custom_tools", custom);
        size_t i;
        json_t *t;
        json_array_foreach(x, i, t) {
            const char *type = json_string_value(json_object_get(t, "type"));
            const char *name = json_string_value(json_object_get(t, "name"));
            bool is_custom = type && !strcmp(type, "custom");
            const char *why = NULL;
            const json_t *fmt = json_object_get(t, "format");
            const char *ft = json_string_value(json_object_get(fmt, "type"));
            if (!type || (strcmp(type, "function") && !is_custom) || !name)
                why = "only function and custom tools (built-in tools need a service this server "
                      "does not have)";
            else if (is_custom && fmt && !json_is_null(fmt) &&
                     (!ft || (strcmp(ft, "text") && strcmp(ft, "grammar"))))
                why = "a custom tool's format must be {\"type\": \"text\"} or {\"type\": "
                      "\"grammar\", \"syntax\": \"lark\" | \"regex\", \"definition\": ...}";
            else if (is_custom && ft && !strcmp(ft, "grammar") &&
                     (!json_is_string(json_object_get(fmt, "syntax")) ||
                      !json_is_string(json_object_get(fmt, "definition"))))
                why = "a grammar format needs \"syntax\" and \"definition\" strings";
            if (why)
                return snug_server_error_set(e, 400, "invalid_request_error", "tools",
                                             "tools[%zu] ('%s', type '%s') is not supported: %s", i,
                                             name ? name : "?", type ? type : "?", why);
            /* the chat tool's key order (name, description, parameters): the template prints it */
            json_t *fn = json_pack("{s:s}", "name", name);
            const json_t *d = json_object_get(t, "description");
            if (json_is_string(d)) json_object_set(fn, "description", (json_t *)d);
            const json_t *p = json_object_get(t, "parameters");
            if (is_custom) {
                json_object_set_new(fn, "parameters",
                                    json_pack("{s:s, s:{s:{s:s}}, s:[s]}", "type", "object",
                                              "properties", "input", "type", "string", "required",
                                              "input"));
                json_object_set_new(fn, "strict", json_true());
                if (ft && !strcmp(ft, "grammar")) json_object_set(fn, "format", (json_t *)fmt);
                json_array_append_new(custom, json_string(name));
            } else if (json_is_object(p)) {
                json_object_set(fn, "parameters", (json_t *)p);
            } else {
                json_object_set_new(fn, "parameters", json_object());
            }
            json_array_append_new(tools,
                                  json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
    }
    if ((x = json_object_get(body, "tool_choice")) && !json_is_null(x)) {
        json_t *tc = NULL;
        const char *type = json_string_value(json_object_get(x, "type"));
        if (json_is_string(x))
            tc = json_incref((json_t *)x);
        else if (type && (!strcmp(type, "function") || !strcmp(type, "custom")) &&
                 json_is_string(json_object_get(x, "name")))
            tc = json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name",
                           json_object_get(x, "name"));
        if (!tc)
            return bad(e, "tool_choice",
                       "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": "
                       "\"function\" | \"custom\", \"name\": ...}%s",
                       ""),
                   -1;
        v->tool_choice = tc;
    }
    if ((x = json_object_get(body, "reasoning")) && json_is_object(x)) {
        const json_t *eff = json_object_get(x, "effort");
        if (eff && !json_is_null(eff)) v->effort = eff;
    }
    /* text.format: the chat request's response_format (json_schema: name, schema, strict,
     * description; json_object), which request.c validates and the grammar engine enforces */
    const json_t *fmt = json_object_get(json_object_get(body, "text"), "format");
    const char *ft = json_string_value(json_object_get(fmt, "type"));
    if (ft && !strcmp(ft, "json_schema")) {
        json_t *js = json_object();
        static const char *keys[] = {"name", "schema", "strict", "description"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            json_t *kv = json_object_get(fmt, keys[i]);
            if (kv) json_object_set(js, keys[i], kv);
        }
        v->response_format = json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js);
    } else if (ft && !strcmp(ft, "json_object")) {
        v->response_format = json_pack("{s:s}", "type", "json_object");
    } else if (fmt && (!ft || strcmp(ft, "text"))) {
        return bad(e, "text.format",
                   "text.format must be {\"type\": \"text\" | \"json_object\" | "
                   "\"json_schema\", ...}%s",
                   ""),
               -1;
    }
    if (fmt) json_object_set(ex, "text_format", (json_t *)fmt);
    const json_t *st = json_object_get(body, "store");
    json_object_set_new(ex, "store", json_boolean(!json_is_false(st)));
    static const char *echo[] = {
        "instructions", "previous_response_id", "tools", "tool_choice",
        "metadata",     "temperature",          "top_p", "max_output_tokens",
        "reasoning"};
    for (size_t i = 0; i < sizeof echo / sizeof echo[0]; i++)
        if ((x = json_object_get(body, echo[i]))) json_object_set(ex, echo[i], (json_t *)x);
    return 0;
}

/* Read a Responses body into *r (a chat request) and *ctx (the answer's context); -1 with *e
 * set on a bad one. `store` may be NULL (no previous_response_id lookups). */
static int parse(struct snug_server_req *r, struct snug_responses_store *store, const json_t *body,
                 json_t **ctx, struct snug_server_error *e) {
    struct view v;
    memset(r, 0, sizeof *r);
    if (convert(&v, store, body, ctx, e)) {
        view_free(&v);
        json_decref(*ctx);
        *ctx = NULL;
        return -1;
    }
    /* what the request's values borrow from: the body and what was built */
    json_t *keep = json_array();
    json_t *held[] = {(json_t *)body, v.messages, v.tools, v.tool_choice, v.response_format};
    size_t want = 0;
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++)
        if (held[i]) want++, json_array_append(keep, held[i]);
    view_free(&v); /* keep holds them now; v's pointers stay valid through it */
    if (json_array_size(keep) != want) {
        json_decref(keep);
        snug_server_error_set(e, 500, "server_error", NULL, "out of memory");
    } else if (snug_server_req_from_fields(r, view_get, &v, keep, e) == SNUG_OK) {
        return 0;
    }
    json_decref(*ctx);
    *ctx = NULL;
    return -1;
}

int snug_server_responses_parse(struct snug_server_req *r, const json_t *body,
                                struct snug_server_error *e) {
    json_t *ctx = NULL;
    int rc = parse(r, NULL, body, &ctx, e);
    json_decref(ctx);
    return rc;
}

enum MHD_Result snug_resp_handle(struct snug_srv *s, struct MHD_Connection *c, const char *body,
                                 size_t len, void **pending) {
    struct snug_server_error e = {0};
    struct snug_server_req q;
    json_error_t je;
    bool over = snug_server_body_precheck(body, len, &e) != 0; /* before parsing it */
    json_t *root = over ? NULL : json_loadb(body, len, JSON_REJECT_DUPLICATES, &je), *ctx = NULL;
    if (!root && !over)
        snug_server_error_set(&e, 400, "invalid_request_error", NULL,
                              "the request body is not valid JSON: %s (line %d, column %d)",
                              je.text, je.line, je.column);
    int rc = root ? parse(&q, s->responses, root, &ctx, &e) : -1;
    json_decref(root);
    if (rc) return snug_reply_fail(s, c, ROUTE_RESPONSES, &snug_fmt_responses, &e);
    return snug_srv_submit(s, c, &snug_fmt_responses, ROUTE_RESPONSES, &q, ctx, pending);
}

/* ==== the answer ============================================================================ */

static bool incomplete(const struct reply *r) {
    return r->n_calls == 0 && (r->finish == SNUG_FINISH_LENGTH || r->finish == SNUG_FINISH_TIMEOUT);
}

/* The id of output item `index` of kind `pfx` ("rs", "msg", "fc"), from the response id. */
static void item_id(const struct reply *r, const char *pfx, int index, char *out, size_t n) {
    const char *tail = strchr(r->id, '_');
    snprintf(out, n, "%s_%s_%d", pfx, tail ? tail + 1 : r->id, index);
}

static json_t *reasoning_item(const char *id, json_t *text, const char *status) {
    return json_pack("{s:s, s:s, s:[], s:[{s:s, s:o}], s:s}", "id", id, "type", "reasoning",
                     "summary", "content", "type", "reasoning_text", "text", text, "status",
                     status);
}

static json_t *text_part(json_t *text) {
    return json_pack("{s:s, s:o, s:[], s:[]}", "type", "output_text", "text", text, "annotations",
                     "logprobs");
}

static json_t *message_item(const char *id, json_t *text, const char *status) {
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", id, "type", "message", "status", status,
                     "role", "assistant", "content",
                     text ? json_pack("[o]", text_part(text)) : json_array());
}

/* Is call t one of a custom tool (its name in extra.custom_tools)? */
static bool is_custom_call(const struct reply *r, const struct tool_call *t) {
    size_t i;
    json_t *n;
    json_array_foreach(json_object_get(r->fmt_ctx, "custom_tools"), i, n) {
        if (json_string_length(n) == t->name.len &&
            !memcmp(json_string_value(n), t->name.data ? t->name.data : "", t->name.len))
            return true;
    }
    return false;
}

/* A custom tool call's input: the `input` of its arguments object ("" when absent). */
static json_t *custom_input(const struct tool_call *t) {
    json_t *a = t->args.len ? json_loadb(t->args.data, t->args.len, 0, NULL) : NULL;
    json_t *in = json_object_get(a, "input");
    json_t *out = json_is_string(in) ? json_incref(in) : json_string("");
    json_decref(a);
    return out;
}

static json_t *call_item(const struct reply *r, const char *id, const struct tool_call *t,
                         bool args, const char *status) {
    if (is_custom_call(r, t))
        return json_pack("{s:s, s:s, s:s, s:o, s:o, s:s}", "id", id, "type", "custom_tool_call",
                         "call_id", t->id, "name", snug_srv_json_str(t->name.data, t->name.len),
                         "input", args ? custom_input(t) : json_string(""), "status", status);
    return json_pack(
        "{s:s, s:s, s:s, s:o, s:o, s:s}", "id", id, "type", "function_call", "call_id", t->id,
        "name", snug_srv_json_str(t->name.data, t->name.len), "arguments",
        args ? (t->args.len ? snug_srv_json_str(t->args.data, t->args.len) : json_string("{}"))
             : json_string(""),
        "status", status);
}

/* The response object; `output` stolen (NULL: built from the reply's buffers). */
static json_t *response(struct reply *r, const char *status, json_t *output, bool final) {
    if (!output) {
        output = json_array();
        char id[96];
        int k = 0;
        if (r->reasoning.len) {
            item_id(r, "rs", k++, id, sizeof id);
            json_array_append_new(
                output, reasoning_item(id, snug_srv_json_str(r->reasoning.data, r->reasoning.len),
                                       "completed"));
        }
        if (r->content.len || (!r->reasoning.len && !r->n_calls)) {
            item_id(r, "msg", k++, id, sizeof id);
            json_array_append_new(
                output,
                message_item(
                    id, snug_srv_json_str(r->content.data ? r->content.data : "", r->content.len),
                    "completed"));
        }
        for (int i = 0; i < r->n_calls; i++) {
            item_id(r, "fc", k++, id, sizeof id);
            json_array_append_new(output, call_item(r, id, &r->calls[i], true, "completed"));
        }
    }
    const json_t *x = r->fmt_ctx;
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:b, s:s}", "id", r->id, "object",
                          "response", "created_at", (json_int_t)r->created, "status", status,
                          "model", r->req.model ? r->req.model : r->srv->model_id, "output", output,
                          "parallel_tool_calls", true, "truncation", "disabled");
    static const char *echo[] = {"instructions", "previous_response_id", "metadata", "temperature",
                                 "top_p",        "max_output_tokens",    "reasoning"};
    for (size_t i = 0; i < sizeof echo / sizeof echo[0]; i++) {
        json_t *v = json_object_get(x, echo[i]);
        json_object_set(o, echo[i], v ? v : json_null());
    }
    json_t *tools = json_object_get(x, "tools"), *tc = json_object_get(x, "tool_choice");
    json_object_set(o, "tools", tools ? tools : json_array());
    if (!tools) json_decref(json_object_get(o, "tools"));
    json_object_set_new(o, "tool_choice", tc ? json_incref(tc) : json_string("auto"));
    json_object_set_new(o, "store", json_boolean(json_is_true(json_object_get(x, "store"))));
    json_object_set_new(o, "error", json_null());
    json_t *tf = json_object_get(x, "text_format");
    json_object_set_new(o, "text",
                        tf ? json_pack("{s:O}", "format", tf)
                           : json_pack("{s:{s:s}}", "format", "type", "text"));
    json_object_set_new(o, "incomplete_details",
                        final && incomplete(r) ? json_pack("{s:s}", "reason", "max_output_tokens")
                                               : json_null());
    if (final) {
        const struct snug_engine_usage *u = &r->usage;
        json_object_set_new(o, "usage",
                            json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens",
                                      u->n_prompt, "input_tokens_details", "cached_tokens",
                                      u->n_cached, "output_tokens", u->n_gen,
                                      "output_tokens_details", "reasoning_tokens",
                                      r->has_think ? r->think.n_reasoning : 0, "total_tokens",
                                      u->n_prompt + u->n_gen));
        const char *closed = r->has_think ? snug_think_end_name(&r->think) : NULL;
        if (closed) json_object_set_new(o, "reasoning_closed", json_string(closed));
    } else {
        json_object_set_new(o, "usage", json_null());
    }
    return o;
}

static json_t *resp_final(struct reply *r) {
    return response(r, incomplete(r) ? "incomplete" : "completed", NULL, true);
}

/* Once a response ended well (resp, its final response object, borrowed): the conversation for
 * previous_response_id, the response and its input items for GET /v1/responses/{id} (and
 * /input_items) are stored, unless the request said store: false. */
static void resp_finished(struct reply *r, const json_t *resp) {
    if (!json_is_true(json_object_get(r->fmt_ctx, "store")) || !r->srv->responses) return;
    json_t *msgs = json_deep_copy(json_object_get(r->fmt_ctx, "messages"));
    json_t *input = json_deep_copy(json_object_get(r->fmt_ctx, "input_items"));
    json_t *saved = json_deep_copy(resp);
    if (!msgs || !input || !saved) {
        json_decref(msgs);
        json_decref(input);
        json_decref(saved);
        return;
    }
    /* each input item gets an id (its own when the client gave one) */
    size_t i;
    json_t *it;
    json_array_foreach(input, i, it) {
        if (json_is_string(json_object_get(it, "id"))) continue;
        const char *type = json_string_value(json_object_get(it, "type"));
        char id[112];
        const char *tail = strchr(r->id, '_');
        snprintf(id, sizeof id, "%s_%s_in%zu", type && !strcmp(type, "message") ? "msg" : "item",
                 tail ? tail + 1 : r->id, i);
        json_object_set_new(it, "id", json_string(id));
    }
    json_t *m =
        json_pack("{s:s, s:o}", "role", "assistant", "content",
                  snug_srv_json_str(r->content.data ? r->content.data : "", r->content.len));
    if (r->reasoning.len)
        json_object_set_new(m, "reasoning_content",
                            snug_srv_json_str(r->reasoning.data, r->reasoning.len));
    if (r->n_calls) {
        json_t *calls = json_array();
        for (int i = 0; i < r->n_calls; i++) {
            const struct tool_call *t = &r->calls[i];
            json_array_append_new(
                calls,
                json_pack("{s:s, s:s, s:{s:o, s:o}}", "id", t->id, "type", "function", "function",
                          "name", snug_srv_json_str(t->name.data, t->name.len), "arguments",
                          t->args.len ? snug_srv_json_str(t->args.data, t->args.len)
                                      : json_string("{}")));
        }
        json_object_set_new(m, "tool_calls", calls);
    }
    json_array_append_new(msgs, m);
    store_put(r->srv->responses, r->id, msgs, saved, input);
}

/* GET /v1/responses/{id}/input_items: a list page (OpenAI's cursor list: data, first_id,
 * last_id, has_more) of the stored input items, `order` desc (default) or asc, `limit`
 * 1..100 (default 20), `after` an item id. */
static json_t *items_page(json_t *items, struct MHD_Connection *c, struct snug_server_error *e) {
    const char *order = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "order");
    const char *lim = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
    const char *after = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "after");
    bool asc = order && !strcmp(order, "asc");
    if (order && !asc && strcmp(order, "desc")) {
        snug_server_error_set(e, 400, "invalid_request_error", "order",
                              "'order' must be \"asc\" or \"desc\"");
        return NULL;
    }
    char *end = NULL;
    long limit = lim ? strtol(lim, &end, 10) : 20;
    if (lim && (!*lim || *end || limit < 1 || limit > 100)) {
        snug_server_error_set(e, 400, "invalid_request_error", "limit",
                              "'limit' must be an integer in [1, 100]");
        return NULL;
    }
    size_t n = json_array_size(items), start = 0;
    if (after) {
        start = n;
        for (size_t k = 0; k < n; k++) {
            const json_t *it = json_array_get(items, asc ? k : n - 1 - k);
            const char *id = json_string_value(json_object_get(it, "id"));
            if (id && !strcmp(id, after)) start = k + 1;
        }
    }
    json_t *data = json_array();
    for (size_t k = start; k < n && json_array_size(data) < (size_t)limit; k++)
        json_array_append(data, json_array_get(items, asc ? k : n - 1 - k));
    size_t got = json_array_size(data);
    json_t *first = json_object_get(json_array_get(data, 0), "id");
    json_t *last = json_object_get(json_array_get(data, got ? got - 1 : 0), "id");
    return json_pack("{s:s, s:o, s:O, s:O, s:b}", "object", "list", "data", data, "first_id",
                     first ? first : json_null(), "last_id", last ? last : json_null(), "has_more",
                     start + got < n);
}

enum MHD_Result snug_resp_stored(struct snug_srv *s, struct MHD_Connection *c, const char *method,
                                 const char *path) {
    struct snug_server_error e = {0};
    char id[64];
    const char *slash = strchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : strlen(path);
    bool list = slash && !strcmp(slash, "/input_items");
    json_t *out = NULL;
    if (n == 0 || n >= sizeof id || (slash && !list)) {
        snug_server_error_set(&e, 404, "invalid_request_error", NULL, "unknown endpoint '%s'",
                              path);
    } else {
        memcpy(id, path, n);
        id[n] = 0;
        if (!strcmp(method, "DELETE")) {
            if (store_delete(s->responses, id))
                out = json_pack("{s:s, s:s, s:b}", "id", id, "object", "response", "deleted", 1);
        } else {
            out = store_get(s->responses, id, list ? PART_INPUT : PART_RESPONSE);
            if (out && list) {
                json_t *page = items_page(out, c, &e);
                json_decref(out);
                out = page;
                if (!out) goto fail;
            }
        }
        if (!out)
            snug_server_error_set(&e, 404, "invalid_request_error", NULL,
                                  "Response with id '%s' not found (responses are kept in memory: "
                                  "the last --responses-store answered with store true)",
                                  id);
    }
    if (out) {
        snug_srv_count(s, ROUTE_RESPONSE, 200);
        return snug_srv_send_json(c, 200, out);
    }
fail:
    snug_srv_count(s, ROUTE_RESPONSE, (unsigned)e.http_status);
    return snug_srv_send_error(c, &e);
}

/* ---- streaming ---- */

static void event(struct reply *r, const char *type, json_t *obj) {
    json_object_set_new(obj, "type", json_string(type));
    json_object_set_new(obj, "sequence_number", json_integer(r->as.seq++));
    snug_reply_sse(r, type, obj);
}

static json_t *sb_str(const struct snug_sbuf *b, size_t from, size_t to) {
    return snug_srv_json_str(b->data ? b->data + from : "", to - from);
}

/* Close the open item: its done events, and keep it for response.completed. */
static void item_close(struct reply *r) {
    int k = r->as.cur, oi = r->as.cur_index;
    if (k < 0) return;
    const char *id = r->as.item_id;
    json_t *item;
    if (k == 0) {
        json_t *t = sb_str(&r->reasoning, r->as.reasoning_from, r->reasoning_sent);
        event(r, "response.reasoning_text.done",
              json_pack("{s:s, s:i, s:i, s:O}", "item_id", id, "output_index", oi, "content_index",
                        0, "text", t));
        event(r, "response.content_part.done",
              json_pack("{s:s, s:i, s:i, s:{s:s, s:O}}", "item_id", id, "output_index", oi,
                        "content_index", 0, "part", "type", "reasoning_text", "text", t));
        item = reasoning_item(id, t, "completed");
        r->as.reasoning_from = r->reasoning_sent;
    } else if (k == 1) {
        json_t *t = sb_str(&r->content, r->as.text_from, r->content_sent);
        event(r, "response.output_text.done",
              json_pack("{s:s, s:i, s:i, s:O, s:[]}", "item_id", id, "output_index", oi,
                        "content_index", 0, "text", t, "logprobs"));
        event(r, "response.content_part.done",
              json_pack("{s:s, s:i, s:i, s:o}", "item_id", id, "output_index", oi, "content_index",
                        0, "part", text_part(json_incref(t))));
        item = message_item(id, t, "completed");
        r->as.text_from = r->content_sent;
    } else {
        const struct tool_call *t = &r->calls[k - 2];
        if (is_custom_call(r, t)) { /* the input in one delta: it is known once the call ends */
            json_t *in = custom_input(t);
            if (json_string_length(in))
                event(r, "response.custom_tool_call_input.delta",
                      json_pack("{s:s, s:i, s:O}", "item_id", id, "output_index", oi, "delta", in));
            event(r, "response.custom_tool_call_input.done",
                  json_pack("{s:s, s:i, s:o}", "item_id", id, "output_index", oi, "input", in));
        } else {
            event(r, "response.function_call_arguments.done",
                  json_pack("{s:s, s:i, s:o, s:o}", "item_id", id, "output_index", oi, "arguments",
                            t->args.len ? sb_str(&t->args, 0, t->args.len) : json_string("{}"),
                            "name", snug_srv_json_str(t->name.data, t->name.len)));
        }
        item = call_item(r, id, t, true, "completed");
    }
    event(r, "response.output_item.done",
          json_pack("{s:i, s:O}", "output_index", oi, "item", item));
    json_array_append_new(r->as.items, item);
    r->as.cur = -1;
}

static void item_open(struct reply *r, int kind) {
    if (r->as.cur == kind) return;
    item_close(r);
    r->as.cur = kind;
    r->as.cur_index = r->as.next_index++;
    int oi = r->as.cur_index;
    char *id = r->as.item_id;
    json_t *item;
    if (kind == 0) {
        item_id(r, "rs", oi, id, sizeof r->as.item_id);
        item = reasoning_item(id, json_string(""), "in_progress");
        json_object_set_new(item, "content", json_array());
    } else if (kind == 1) {
        item_id(r, "msg", oi, id, sizeof r->as.item_id);
        item = message_item(id, NULL, "in_progress");
    } else {
        item_id(r, "fc", oi, id, sizeof r->as.item_id);
        item = call_item(r, id, &r->calls[kind - 2], false, "in_progress");
    }
    event(r, "response.output_item.added",
          json_pack("{s:i, s:o}", "output_index", oi, "item", item));
    if (kind == 0)
        event(r, "response.content_part.added",
              json_pack("{s:s, s:i, s:i, s:{s:s, s:s}}", "item_id", id, "output_index", oi,
                        "content_index", 0, "part", "type", "reasoning_text", "text", ""));
    else if (kind == 1)
        event(r, "response.content_part.added",
              json_pack("{s:s, s:i, s:i, s:o}", "item_id", id, "output_index", oi, "content_index",
                        0, "part", text_part(json_string(""))));
}

static void resp_stream(struct reply *r) {
    if (!r->as.started) {
        r->as.items = json_array();
        event(r, "response.created",
              json_pack("{s:o}", "response", response(r, "in_progress", json_array(), false)));
        event(r, "response.in_progress",
              json_pack("{s:o}", "response", response(r, "in_progress", json_array(), false)));
        r->as.started = true;
    }
    if (r->reasoning.len > r->reasoning_sent) {
        item_open(r, 0);
        event(r, "response.reasoning_text.delta",
              json_pack("{s:s, s:i, s:i, s:o}", "item_id", r->as.item_id, "output_index",
                        r->as.cur_index, "content_index", 0, "delta",
                        sb_str(&r->reasoning, r->reasoning_sent, r->reasoning.len)));
        r->reasoning_sent = r->reasoning.len;
    }
    if (r->content.len > r->content_sent) {
        item_open(r, 1);
        event(r, "response.output_text.delta",
              json_pack("{s:s, s:i, s:i, s:o, s:[]}", "item_id", r->as.item_id, "output_index",
                        r->as.cur_index, "content_index", 0, "delta",
                        sb_str(&r->content, r->content_sent, r->content.len), "logprobs"));
        r->content_sent = r->content.len;
    }
    for (int i = 0; i < r->n_calls; i++) {
        struct tool_call *t = &r->calls[i];
        if (!t->head_sent) {
            item_open(r, 2 + i);
            t->head_sent = true;
        }
        if (t->args.len > t->args_sent && r->as.cur == 2 + i && !is_custom_call(r, t)) {
            event(r, "response.function_call_arguments.delta",
                  json_pack("{s:s, s:i, s:o}", "item_id", r->as.item_id, "output_index",
                            r->as.cur_index, "delta", sb_str(&t->args, t->args_sent, t->args.len)));
            t->args_sent = t->args.len;
        }
    }
    if (r->ended && !r->final_sent) {
        if (r->finish == SNUG_FINISH_ERROR || r->oom) {
            json_t *resp = response(r, "failed", json_incref(r->as.items), false);
            json_object_set_new(resp, "error",
                                json_pack("{s:s, s:s}", "code", "server_error", "message",
                                          r->oom         ? "out of memory"
                                          : r->errmsg[0] ? r->errmsg
                                                         : "generation failed"));
            event(r, "response.failed", json_pack("{s:o}", "response", resp));
        } else {
            if (!r->reasoning.len && !r->content.len && !r->n_calls) item_open(r, 1);
            item_close(r);
            bool inc = incomplete(r);
            json_t *resp =
                response(r, inc ? "incomplete" : "completed", json_incref(r->as.items), true);
            resp_finished(r, resp);
            event(r, inc ? "response.incomplete" : "response.completed",
                  json_pack("{s:o}", "response", resp));
        }
        r->final_sent = true;
    }
}

const struct snug_fmt snug_fmt_responses = {
    .id_prefix = "resp_",
    .stream = resp_stream,
    .final = resp_final,
    .finished = resp_finished,
};
