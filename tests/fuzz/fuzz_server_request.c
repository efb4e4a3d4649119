/* fuzz_server_request.c — libFuzzer target for the server's request-body handler: every input
 * is parsed and validated as a chat request and as a completion request
 * (snug_server_req_parse); an accepted chat request is then rendered (snug_chat_render) and
 * its output parser created, as the server does. Checks the invariants a success promises
 * (ranges, stop strings, n = 1), so a validation gap shows up as a trap or an ASan report.
 * Seeds: tests/fuzz/corpus-server-request/.
 * Build: CC=clang cmake -B build-fuzz -DSNUG_FUZZ=ON && cmake --build build-fuzz --target
 * fuzz_server_request; run: build-fuzz/fuzz_server_request tests/fuzz/corpus-server-request.
 * Read next: src/server/request.c. */
#include "core/core.h"
#include "server/chat.h"
#include "server/outparse.h"
#include "server/server.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static void check_req(const struct snug_server_req *r) {
    if (!r->root) __builtin_trap();
    if (r->n_stop < 0 || r->n_stop > SNUG_REQ_MAX_STOP) __builtin_trap();
    for (int i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0] || strlen(r->stop[i]) > SNUG_REQ_MAX_STOP_BYTES)
            __builtin_trap();
    if (r->top_logprobs < 0 || r->top_logprobs > 20) __builtin_trap();
    if (r->grammar && (strlen(r->grammar) > r->grammar_len)) __builtin_trap();
    if (r->grammar && r->format != SNUG_FORMAT_TEXT) __builtin_trap(); /* one or the other */
    if (r->format == SNUG_FORMAT_JSON_SCHEMA && !r->json_schema) __builtin_trap();
    if (r->logit_bias && json_object_size(r->logit_bias) > SNUG_REQ_MAX_LOGIT_BIAS)
        __builtin_trap();
    if (r->max_tokens < 0) __builtin_trap();
    if (!(r->sampler.temperature >= 0) || !(r->sampler.top_p >= 0 && r->sampler.top_p <= 1))
        __builtin_trap();
    if (!(r->sampler.repeat_penalty > 0)) __builtin_trap();
    if (r->kind == SNUG_REQ_CHAT) {
        if (!json_is_array(r->messages) || json_array_size(r->messages) == 0) __builtin_trap();
        if (r->tools && !json_is_array(r->tools)) __builtin_trap();
        if (r->tool_choice == SNUG_TOOL_NAMED && !r->tool_name) __builtin_trap();
    } else {
        if (!r->prompt == !r->prompt_ids) __builtin_trap();
        if (r->prompt && strlen(r->prompt) > r->prompt_len) __builtin_trap();
    }
}

static void noop_emit(void *user, const struct snug_outparse_event *ev) {
    (void)user;
    (void)ev;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct snug_server_req r;
    struct snug_server_error e;
    for (int kind = 0; kind < 2; kind++) {
        if (snug_server_req_parse(&r, (enum snug_server_kind)kind, (const char *)data, size, &e) !=
            SNUG_OK) {
            if (e.http_status != 400 || !e.msg[0] || r.root) __builtin_trap();
            continue;
        }
        check_req(&r);
        if (kind == SNUG_REQ_CHAT) {
            struct snug_chat_opts co = snug_chat_default_opts(true);
            struct snug_err err = {0};
            char *prompt = NULL;
            size_t n = 0;
            struct snug_chat_spans plain;
            if (snug_chat_opts_from_request(&co, r.root, &err) == SNUG_OK &&
                snug_chat_render_spans(r.messages, r.tools, &co, &prompt, &n, &plain, &err) ==
                    SNUG_OK) {
                /* the plain spans: sorted, disjoint, inside the prompt, and the same text as
                 * the plain render */
                for (size_t k = 0; k < plain.n; k++) {
                    if (plain.v[k].off > n || plain.v[k].len > n - plain.v[k].off ||
                        !plain.v[k].len)
                        __builtin_trap();
                    if (k && plain.v[k].off <= plain.v[k - 1].off + plain.v[k - 1].len)
                        __builtin_trap();
                }
                char *again = NULL;
                size_t n2 = 0;
                if (snug_chat_render(r.messages, r.tools, &co, &again, &n2, &err) == SNUG_OK &&
                    (n2 != n || memcmp(again, prompt, n)))
                    __builtin_trap();
                snug_free(again);
                snug_chat_spans_free(&plain);
                /* every tool name the request passed is one the template marker cannot close */
                for (size_t k = 0; k < json_array_size(r.tools); k++) {
                    const char *tn = json_string_value(json_object_get(
                        json_object_get(json_array_get(r.tools, k), "function"), "name"));
                    if (!snug_server_tool_name_ok(tn)) __builtin_trap();
                }
                struct snug_outparse *p = NULL;
                if (snug_outparse_init(&p, r.tools, snug_chat_prompt_in_reasoning(prompt, n),
                                       noop_emit, NULL, &err) == SNUG_OK) {
                    snug_outparse_feed(p, prompt, n, &err);
                    snug_outparse_finish(p, &err);
                }
                snug_outparse_free(p);
                snug_free(prompt);
            }
        }
        snug_server_req_free(&r);
    }
    return 0;
}
