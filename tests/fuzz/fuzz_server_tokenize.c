/* fuzz_server_tokenize.c — libFuzzer target for the /tokenize and /detokenize request parsers
 * (request.c): every input is parsed as both. A success promises what http.c relies on: a
 * content string within the byte limit (its length the JSON string's), booleans resolved, and
 * token ids that are integers in [0, n_vocab); a failure is a 400/413 with a sendable message
 * and nothing left allocated (LeakSanitizer).
 * Seeds: tests/fuzz/corpus-server-tokenize/. Read next: src/server/server.h. */
#include "core/core.h"
#include "server/schema.h"
#include "server/server.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct snug_server_error e;
    struct snug_tokenize_req q;
    size_t max = 64 + size % 512;
    if (snug_server_tokenize_parse(&q, (const char *)data, size, max, &e) == SNUG_OK) {
        if (!q.root || !q.content || q.len > max || strlen(q.content) > q.len) __builtin_trap();
        json_decref(q.root);
    } else {
        if ((e.http_status != 400 && e.http_status != 413) || !e.msg[0]) __builtin_trap();
        json_t *j = snug_json_string_lossy(e.msg, strlen(e.msg));
        if (!j) __builtin_trap();
        json_decref(j);
    }
    json_t *root = NULL;
    const json_t *toks = NULL;
    int32_t V = 1 + (int32_t)(size % 1000);
    if (snug_server_detokenize_parse(&root, &toks, (const char *)data, size, V, &e) == SNUG_OK) {
        size_t i;
        json_t *t;
        json_array_foreach(toks, i, t) {
            if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= V)
                __builtin_trap();
        }
        json_decref(root);
    } else if (root || toks || e.http_status != 400) {
        __builtin_trap();
    }
    return 0;
}
