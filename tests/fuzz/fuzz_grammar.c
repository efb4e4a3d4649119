/* fuzz_grammar.c — libFuzzer target for the GBNF parser and the matcher: the input up to its
 * first NUL byte is a grammar, the rest is text fed to a matcher of it (byte by byte, with a
 * mask, a forced-token query and a shortest-completion search after each byte, a rollback now
 * and then). A 256-token byte-level vocabulary is built once. Invariants checked: a parse error
 * names a line and column; the mask agrees with allows() on every token; the shortest
 * completion completes the grammar.
 * Seeds: tests/fuzz/corpus-grammar/. Build: CC=clang cmake -B build-fuzz -DSNUG_FUZZ=ON &&
 * cmake --build build-fuzz --target fuzz_grammar; run: build-fuzz/fuzz_grammar
 * tests/fuzz/corpus-grammar. Read next: src/grammar/gbnf.c. */
#include "core/core.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static struct snug_tokenizer *tok;
static struct snug_vocab_trie *trie;

/* all 256 bytes as tokens, in the GPT-2 byte-to-unicode form the tokenizer expects */
static void setup(void) {
    static char mapped[256][4];
    static struct snug_gguf_str toks[256];
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int cp = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE ? b : 256 + n++;
        if (cp < 0x80) {
            mapped[b][0] = (char)cp;
        } else {
            mapped[b][0] = (char)(0xC0 | (cp >> 6));
            mapped[b][1] = (char)(0x80 | (cp & 63));
        }
        toks[b] = (struct snug_gguf_str){strlen(mapped[b]), mapped[b]};
    }
    struct snug_tokenizer_desc d = {.n_tokens = 256,
                                    .tokens = toks,
                                    .pre = "qwen2",
                                    .bos_id = -1,
                                    .eos_id = -1,
                                    .pad_id = -1,
                                    .name = "fuzz"};
    struct snug_err err = {0};
    if (snug_tokenizer_init(&tok, &d, &err) || snug_vocab_trie_build(&trie, tok, &err))
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tok) setup();
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    struct snug_grammar_limits lim = {.max_elems = 20000,
                                      .max_rules = 2000,
                                      .max_nodes = 4096,
                                      .max_set = 256,
                                      .max_states = 256,
                                      .mask_cache = 4,
                                      .history = 8};
    struct snug_grammar *g = NULL;
    struct snug_err err = {0};
    int rc = snug_grammar_parse(&g, (const char *)data, glen, NULL, &lim, &err);
    if (rc == SNUG_ERR_FORMAT && !strstr(err.msg, "line ")) __builtin_trap();
    if (rc != SNUG_OK) return 0;
    struct snug_matcher *m = NULL;
    snug_token end = 255;
    if (snug_matcher_init(&m, g, trie, &end, 1, &lim, &err) == SNUG_OK) {
        const uint8_t *p = nul ? nul + 1 : data + size;
        for (; p < data + size; p++) {
            const uint64_t *mk = snug_matcher_mask(m);
            uint64_t copy[4];
            memcpy(copy, mk, sizeof copy);
            for (snug_token id = 0; id < 256; id++)
                if (((copy[id >> 6] >> (id & 63)) & 1) != snug_matcher_allows(m, id) &&
                    !snug_matcher_error(m))
                    __builtin_trap();
            snug_matcher_forced(m);
            uint8_t buf[64];
            snug_matcher_shortest_completion(m, buf, 64);
            if (*p == 0xFF) {
                snug_matcher_rollback(m, 1, &err);
                continue;
            }
            if (snug_matcher_accept(m, *p, &err) != SNUG_OK) break;
        }
        /* the shortest completion, when found, completes the grammar */
        uint8_t done[256];
        int n = snug_matcher_shortest_completion(m, done, (int)sizeof done);
        if (n >= 0 && !snug_matcher_error(m)) {
            if (snug_matcher_accept_bytes(m, (const char *)done, (size_t)n, &err) != SNUG_OK &&
                !snug_matcher_error(m))
                __builtin_trap();
            if (!snug_matcher_error(m) && !snug_matcher_is_complete(m)) __builtin_trap();
        }
        snug_matcher_free(m);
    }
    snug_grammar_free(g);
    return 0;
}
