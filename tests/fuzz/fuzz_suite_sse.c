/* fuzz_suite_sse.c — libFuzzer target for the client suite's SSE reader (what `snug verify` /
 * `stress` / `bench` make of a server's stream): the input is a response body, read once whole
 * and once in pieces of 1 + input[0] % 13 bytes. Nothing may crash, and both reads must agree
 * on every count, the assembled content / reasoning, [DONE], the finish reason and the tool
 * calls (a line split across pieces is the classic SSE bug).
 * Seeds: tests/fuzz/corpus-suite-sse/. Read next: src/suite/client.c. */
#include "core/core.h"
#include "suite/suite.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct snug_suite_stream a, b;
    struct snug_err err = {0};
    size_t piece = size ? 1 + data[0] % 13 : 1;
    int ra = snug_suite_sse_parse((const char *)data, size, size ? size : 1, &a, &err);
    int rb = snug_suite_sse_parse((const char *)data, size, piece, &b, &err);
    if (ra != rb) __builtin_trap();
    if (ra == SNUG_OK) {
        if (a.done != b.done || a.n_events != b.n_events || a.n_bad_events != b.n_bad_events ||
            a.n_content_chunks != b.n_content_chunks || a.n_tool_chunks != b.n_tool_chunks ||
            a.n_reasoning_chunks != b.n_reasoning_chunks)
            __builtin_trap();
        if (a.content_len != b.content_len || memcmp(a.content, b.content, a.content_len) ||
            a.reasoning_len != b.reasoning_len || memcmp(a.reasoning, b.reasoning, a.reasoning_len))
            __builtin_trap();
        if (strcmp(a.finish_reason, b.finish_reason)) __builtin_trap();
        if (!json_equal(a.tool_calls, b.tool_calls)) __builtin_trap();
        if (strlen(a.content) != a.content_len) __builtin_trap();
    }
    snug_suite_stream_free(&a);
    snug_suite_stream_free(&b);
    return 0;
}
