/* fuzz_grammar_schema.c — libFuzzer target for the JSON Schema compiler: every input is taken
 * as a schema; what compiles must be a grammar the GBNF parser accepts (a failure to parse our
 * own output traps); the input is also tried as a `tools` array (snug_tools_to_gbnf). Seeds:
 * tests/fuzz/corpus-grammar-schema/ (and tests/data/schemas/). Build: CC=clang cmake -B build-fuzz
 * -DSNUG_FUZZ=ON && cmake --build build-fuzz --target fuzz_grammar_schema; run:
 * build-fuzz/fuzz_grammar_schema tests/fuzz/corpus-grammar-schema. Read next:
 * src/grammar/jschema.c. */
#include "core/core.h"
#include "grammar/grammar.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The same input as an OpenAI `tools` array: the tool-call grammar must parse too. */
static void tools(const uint8_t *data, size_t size) {
    char *gbnf = NULL;
    size_t n = 0;
    struct snug_err err = {0};
    for (int named = 0; named < 2; named++) {
        if (snug_tools_to_gbnf((const char *)data, size, named ? "f" : NULL, named ? NULL : "\n",
                               named == 0, &gbnf, &n, &err) != SNUG_OK) {
            if (gbnf) __builtin_trap();
            continue;
        }
        struct snug_grammar *g = NULL;
        int rc = snug_grammar_parse(&g, gbnf, n, NULL, NULL, &err);
        if (rc != SNUG_OK && rc != SNUG_ERR_BUDGET) __builtin_trap();
        snug_grammar_free(g);
        snug_free(gbnf);
        gbnf = NULL;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tools(data, size);
    char *gbnf = NULL;
    size_t n = 0;
    struct snug_err err = {0};
    if (snug_json_schema_to_gbnf((const char *)data, size, &gbnf, &n, &err) != SNUG_OK) {
        if (gbnf) __builtin_trap();
        return 0;
    }
    struct snug_grammar *g = NULL;
    int rc = snug_grammar_parse(&g, gbnf, n, NULL, NULL, &err);
    if (rc != SNUG_OK && rc != SNUG_ERR_BUDGET) __builtin_trap();
    snug_grammar_free(g);
    snug_free(gbnf);
    return 0;
}
