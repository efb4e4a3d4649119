/* replay.c — `snug bench --agent-replay FILE`: a recorded multi-turn agent conversation (tool
 * calls, tool results, thinking on) replayed turn by turn through /v1/chat/completions, the
 * way an agent client sends it: each request is the whole history so far; after it, the
 * recorded assistant message (not the generated one, so every server sees the same history)
 * is appended WITHOUT its reasoning (almost no client sends reasoning back), then the next
 * turn's new messages. Per turn: time to first token, wall time, prompt tokens and
 * usage.prompt_tokens_details.cached_tokens, and what the server answered (reasoning, content,
 * tool calls: two servers' replies can be compared); the summary gives the reuse of each
 * request against the previous request's prompt.
 *
 * File format (JSON; tests/data/agent_replay/sample.json is one):
 *   {"name": str, "system": str (optional), "tools": [OpenAI tool objects] (optional),
 *    "thinking": bool (default true), "max_tokens": int (default 64),
 *    "turns": [{"messages": [OpenAI messages appended before this request],
 *               "assistant": {the recorded reply: "content", "reasoning_content",
 *                             "tool_calls"}}]}
 * Invariant: the file is validated whole before the first request (every turn an object with
 * a non-empty "messages" array of objects with a string "role", "assistant" an object); a
 * turn counts only when it streamed with HTTP 200 and [DONE].
 * Read next: bench.c (the canonical protocol), docs/prefix-cache.md.
 */
#include "suite/suite.h"

#include "core/core.h"

#include <stdio.h>
#include <string.h>

static int bad(struct snug_err *err, const char *what, size_t turn) {
    return snug_err_set(err, SNUG_ERR_FORMAT, "agent replay: turn %zu: %s", turn, what);
}

int snug_ops_replay_validate(const json_t *r, struct snug_err *err) {
    if (!json_is_object(r))
        return snug_err_set(err, SNUG_ERR_FORMAT, "agent replay: not an object");
    const json_t *turns = json_object_get(r, "turns");
    if (!json_is_array(turns) || json_array_size(turns) == 0)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "agent replay: \"turns\" must be a non-empty "
                            "array");
    const json_t *tools = json_object_get(r, "tools");
    if (tools && !json_is_array(tools))
        return snug_err_set(err, SNUG_ERR_FORMAT, "agent replay: \"tools\" must be an array");
    const json_t *sys = json_object_get(r, "system");
    if (sys && !json_is_string(sys))
        return snug_err_set(err, SNUG_ERR_FORMAT, "agent replay: \"system\" must be a string");
    const json_t *mt = json_object_get(r, "max_tokens");
    if (mt && (!json_is_integer(mt) || json_integer_value(mt) < 1))
        return snug_err_set(err, SNUG_ERR_FORMAT, "agent replay: \"max_tokens\" must be >= 1");
    size_t i;
    const json_t *t;
    json_array_foreach(turns, i, t) {
        if (!json_is_object(t)) return bad(err, "not an object", i);
        const json_t *ms = json_object_get(t, "messages");
        if (!json_is_array(ms) || json_array_size(ms) == 0)
            return bad(err, "\"messages\" must be a non-empty array", i);
        size_t k;
        const json_t *m;
        json_array_foreach(ms, k, m) {
            if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")))
                return bad(err, "every message needs a string \"role\"", i);
        }
        const json_t *a = json_object_get(t, "assistant");
        if (a && !json_is_object(a)) return bad(err, "\"assistant\" must be an object", i);
    }
    return SNUG_OK;
}

/* The recorded assistant message as the client sends it back: no reasoning. */
static json_t *client_copy(const json_t *assistant) {
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("assistant"));
    const json_t *c = json_object_get(assistant, "content");
    json_object_set_new(m, "content", c ? json_deep_copy(c) : json_string(""));
    const json_t *tc = json_object_get(assistant, "tool_calls");
    if (json_is_array(tc) && json_array_size(tc))
        json_object_set_new(m, "tool_calls", json_deep_copy(tc));
    return m;
}

int snug_ops_agent_replay(struct snug_suite_client *c, const json_t *replay,
                          snug_ops_progress_fn progress, void *user, json_t **out,
                          struct snug_err *err) {
    *out = NULL;
    int rc = snug_ops_replay_validate(replay, err);
    if (rc) return rc;
    snug_suite_discover_model(c);
    const json_t *turns = json_object_get(replay, "turns");
    const json_t *tools = json_object_get(replay, "tools");
    const json_t *sys = json_object_get(replay, "system");
    const json_t *th = json_object_get(replay, "thinking");
    bool thinking = !json_is_false(th);
    json_int_t max_tokens = json_is_integer(json_object_get(replay, "max_tokens"))
                                ? json_integer_value(json_object_get(replay, "max_tokens"))
                                : 64;
    json_t *history = json_array();
    if (sys)
        json_array_append_new(history, json_pack("{s:s,s:O}", "role", "system", "content", sys));
    json_t *rows = json_array();
    size_t n = json_array_size(turns), i;
    const json_t *t;
    json_int_t prev_prompt = -1, sum_prompt = 0, sum_cached = 0;
    int n_ok = 0;
    double sum_ttft = 0;
    json_array_foreach(turns, i, t) {
        char label[64];
        snprintf(label, sizeof label, "turn %zu", i + 1);
        if (progress) progress(user, label, (int)i, (int)n);
        size_t k;
        const json_t *m;
        json_array_foreach(json_object_get(t, "messages"), k, m)
            json_array_append_new(history, json_deep_copy(m));
        json_t *body =
            json_pack("{s:O,s:b,s:{s:b},s:I,s:f,s:{s:b}}", "messages", history, "stream", 1,
                      "stream_options", "include_usage", 1, "max_tokens", max_tokens, "temperature",
                      0.0, "chat_template_kwargs", "enable_thinking", thinking);
        if (c->model[0]) json_object_set_new(body, "model", json_string(c->model));
        if (json_array_size(tools)) json_object_set(body, "tools", (json_t *)tools);
        struct snug_suite_stream s;
        rc = snug_suite_stream_chat(c, body, c->timeout_s, &s, err);
        json_decref(body);
        if (rc) break;
        bool ok = s.status == 200 && s.done && !s.error_event && !s.error[0];
        json_t *u = s.usage;
        json_int_t pt = json_integer_value(json_object_get(u, "prompt_tokens"));
        json_int_t cached = json_integer_value(
            json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
        double ttft = s.t_first >= 0 ? s.t_first : s.t_finish >= 0 ? s.t_finish : s.wall_s;
        json_t *row =
            json_pack("{s:I,s:b,s:f,s:f,s:I,s:I,s:I}", "turn", (json_int_t)(i + 1), "ok", ok,
                      "ttft_s", ttft, "wall_s", s.wall_s, "prompt_tokens", pt, "cached_tokens",
                      cached, "messages", (json_int_t)json_array_size(history));
        json_object_set_new(row, "prev_prompt_tokens",
                            prev_prompt >= 0 ? json_integer(prev_prompt) : json_null());
        json_object_set_new(row, "reuse_of_prev",
                            prev_prompt > 0 ? json_real((double)cached / (double)prev_prompt)
                                            : json_null());
        json_object_set_new(row, "output",
                            json_pack("{s:s%,s:s%,s:O?}", "reasoning", s.reasoning, s.reasoning_len,
                                      "content", s.content, s.content_len, "tool_calls",
                                      s.tool_calls));
        if (!ok) {
            char why[512];
            snug_suite_describe(s.status, s.error, s.raw, why, sizeof why);
            json_object_set_new(row, "error", json_string(why));
        } else {
            n_ok++;
            sum_ttft += ttft;
            if (i > 0) {
                sum_prompt += pt;
                sum_cached += cached;
            }
        }
        json_array_append_new(rows, row);
        snug_suite_stream_free(&s);
        prev_prompt = pt;
        const json_t *a = json_object_get(t, "assistant");
        if (a) json_array_append_new(history, client_copy(a));
    }
    json_decref(history);
    if (rc) {
        json_decref(rows);
        return rc;
    }
    if (progress) progress(user, "done", (int)n, (int)n);
    *out = json_pack("{s:s,s:{s:s,s:s},s:o,s:{s:I,s:I,s:f,s:I,s:I,s:f}}", "name",
                     json_is_string(json_object_get(replay, "name"))
                         ? json_string_value(json_object_get(replay, "name"))
                         : "",
                     "server", "url", c->base, "model", c->model, "turns", rows, "summary", "turns",
                     (json_int_t)n, "ok", (json_int_t)n_ok, "mean_ttft_s",
                     n_ok ? sum_ttft / n_ok : 0.0, "prompt_tokens_after_first", sum_prompt,
                     "cached_tokens_after_first", sum_cached, "reuse_after_first",
                     sum_prompt ? (double)sum_cached / (double)sum_prompt : 0.0);
    return *out ? SNUG_OK : snug_err_set(err, SNUG_ERR_NOMEM, "agent replay: out of memory");
}
