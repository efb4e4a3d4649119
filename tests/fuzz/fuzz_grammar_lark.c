/* fuzz_grammar_lark.c — libFuzzer target for the Lark → GBNF converter (custom tool formats):
 * every input is taken as a Lark grammar and as a regex tool format; what converts must be a
 * grammar the GBNF parser accepts (a failure to parse our own output traps, as does an output
 * left behind on an error). Seeds: tests/fuzz/corpus-grammar-lark/. Build: CC=clang cmake -B
 * build-fuzz -DSNUG_FUZZ=ON && cmake --build build-fuzz --target fuzz_grammar_lark; run:
 * build-fuzz/fuzz_grammar_lark tests/fuzz/corpus-grammar-lark. Read next: src/grammar/lark.c.
 */
#include "core/core.h"
#include "grammar/grammar.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static void one(const char *syntax, const uint8_t *data, size_t size, const char *prefix) {
    char *gbnf = NULL;
    size_t n = 0;
    struct snug_err err = {0};
    if (snug_tool_format_to_gbnf(syntax, (const char *)data, size, prefix, &gbnf, &n, &err) !=
        SNUG_OK) {
        if (gbnf) __builtin_trap();
        return;
    }
    struct snug_grammar *g = NULL;
    int rc = snug_grammar_parse(&g, gbnf, n, prefix ? "ct0--root" : NULL, NULL, &err);
    if (rc != SNUG_OK && rc != SNUG_ERR_BUDGET) __builtin_trap();
    snug_grammar_free(g);
    snug_free(gbnf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    one("lark", data, size, NULL);
    one("lark", data, size, "ct0-");
    one("regex", data, size, NULL);
    return 0;
}
