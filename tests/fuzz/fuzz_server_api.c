/* fuzz_server_api.c — libFuzzer target for the Anthropic Messages and OpenAI Responses front
 * ends: every input is parsed as JSON and read by both (snug_server_messages_parse,
 * snug_server_responses_parse); a parsed request is then rendered as the server does
 * (snug_server_render_req). A rejection must be a 4xx with a message; a parsed request must hold
 * a messages array. Seeds: tests/fuzz/corpus-server-api/.
 * Build: CC=clang cmake -B build-fuzz -DSNUG_FUZZ=ON && cmake --build build-fuzz --target
 * fuzz_server_api; run: build-fuzz/fuzz_server_api tests/fuzz/corpus-server-api.
 * Read next: src/server/api_messages.c, src/server/api_responses.c. */
#include "core/core.h"
#include "server/server.h"

#include <stddef.h>
#include <stdint.h>

static void check_error(const struct snug_server_error *e) {
    if (e->http_status < 400 || e->http_status >= 500 || !e->msg[0]) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *body = json_loadb((const char *)data, size, 0, NULL);
    if (!body) return 0;
    struct snug_server_opts o = {.thinking_budget = -1};
    for (int api = 0; api < 2; api++) {
        struct snug_server_error e = {0};
        struct snug_server_req q;
        int rc = api == 0 ? snug_server_messages_parse(&q, body, &e)
                          : snug_server_responses_parse(&q, body, &e);
        if (rc) {
            check_error(&e);
            continue;
        }
        if (!json_is_array(q.messages)) __builtin_trap();
        char *prompt = NULL;
        size_t n = 0;
        if (snug_server_render_req(&o, &q, &prompt, &n, &e) == 0) {
            if (!prompt) __builtin_trap();
            snug_free(prompt);
        } else {
            if (prompt || !e.msg[0]) __builtin_trap();
        }
        snug_server_req_free(&q);
    }
    json_decref(body);
    return 0;
}
