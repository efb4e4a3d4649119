/* fuzz_suite_replay.c — libFuzzer target for the agent-replay file check (src/suite/replay.c,
 * snug_ops_replay_validate): any bytes that parse as JSON are validated; an accepted document
 * must have what the replay dereferences (a non-empty turns array of objects, each with a
 * non-empty messages array of objects with a string role). No crash, no leak.
 * Build: CC=clang cmake -B build-fuzz -DSNUG_FUZZ=ON && cmake --build build-fuzz --target
 * fuzz_suite_replay. Read next: src/suite/replay.c. */
#include "suite/suite.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *doc = json_loadb((const char *)data, size, 0, NULL);
    if (!doc) return 0;
    struct snug_err err;
    if (snug_ops_replay_validate(doc, &err) == SNUG_OK) {
        const json_t *turns = json_object_get(doc, "turns");
        if (!json_array_size(turns)) __builtin_trap();
        size_t i;
        const json_t *t;
        json_array_foreach(turns, i, t) {
            const json_t *ms = json_object_get(t, "messages");
            if (!json_array_size(ms)) __builtin_trap();
            size_t k;
            const json_t *m;
            json_array_foreach(ms, k, m) {
                if (!json_is_string(json_object_get(m, "role"))) __builtin_trap();
            }
        }
    }
    json_decref(doc);
    return 0;
}
