#define _DEFAULT_SOURCE /* opendir */
/* test_grammar.c — the grammar module: GBNF parse errors (line and column), the language a
 * grammar accepts (literals, classes incl. negation and UTF-8 ranges checked code point by code
 * point against the class definition, repetitions, groups, comments), token masks against a
 * token-by-token check, end tokens only when complete, forced tokens, rollback, no allocation
 * on the token path, JSON Schema → grammar (accepting valid documents, rejecting invalid ones,
 * naming unsupported keywords), and the masks over the real 248K-token Qwen3.5 vocabulary
 * (fixture; skipped visibly without it). */
#include "core/core.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "grammar/memo.h"
#include "test.h"
#include "tokenizer/tokenizer.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a small byte-level tokenizer: all 256 bytes plus a few longer tokens ----------------- */

static char mapped[256][4]; /* GPT-2 byte -> unicode mapping, as UTF-8 */
static const char *EXTRA[] = {"he",    "hel", "hello", "{\"",  "\":", "true", "false",
                              "null",  "12",  "123",   "ab",   "abc", " (",   "1+",
                              "\",\"", "\"}", "name",  "\"na", "Ã©",  "xé",   NULL};
#define N_EXTRA 20
static char extra_mapped[N_EXTRA][64];
static struct snug_gguf_str toks[256 + N_EXTRA + 1];
static int32_t types[256 + N_EXTRA + 1];

static void map_bytes(void) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int cp =
            (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE) ? b : 256 + n++;
        if (cp < 0x80) {
            mapped[b][0] = (char)cp;
            mapped[b][1] = 0;
        } else {
            mapped[b][0] = (char)(0xC0 | (cp >> 6));
            mapped[b][1] = (char)(0x80 | (cp & 63));
            mapped[b][2] = 0;
        }
    }
}

static struct snug_tokenizer *small_tokenizer(void) {
    map_bytes();
    for (int b = 0; b < 256; b++) {
        toks[b] = (struct snug_gguf_str){strlen(mapped[b]), mapped[b]};
        types[b] = SNUG_TOKEN_NORMAL;
    }
    for (int i = 0; i < N_EXTRA; i++) {
        extra_mapped[i][0] = 0;
        for (const unsigned char *p = (const unsigned char *)EXTRA[i]; *p; p++)
            strcat(extra_mapped[i], mapped[*p]);
        toks[256 + i] = (struct snug_gguf_str){strlen(extra_mapped[i]), extra_mapped[i]};
        types[256 + i] = SNUG_TOKEN_NORMAL;
    }
    toks[256 + N_EXTRA] = (struct snug_gguf_str){10, "<|im_end|>"};
    types[256 + N_EXTRA] = SNUG_TOKEN_CONTROL;
    struct snug_tokenizer_desc d = {.n_tokens = 256 + N_EXTRA + 1,
                                    .tokens = toks,
                                    .token_types = types,
                                    .pre = "qwen2",
                                    .bos_id = -1,
                                    .eos_id = 256 + N_EXTRA,
                                    .pad_id = -1,
                                    .name = "small"};
    struct snug_tokenizer *t = NULL;
    struct snug_err err = {0};
    int rc = snug_tokenizer_init(&t, &d, &err);
    CHECKF(rc == SNUG_OK, "%s", err.msg);
    return t;
}

static struct snug_tokenizer *TOK;
static struct snug_vocab_trie *TRIE;
static snug_token EOS;

static snug_token tok_of(const char *s) {
    for (snug_token id = 0; id < snug_tokenizer_n_vocab(TOK); id++) {
        size_t n;
        const char *b = snug_tokenizer_token_bytes(TOK, id, &n);
        if (n == strlen(s) && !memcmp(b, s, n) &&
            snug_tokenizer_token_type(TOK, id) != SNUG_TOKEN_CONTROL)
            return id;
    }
    return -1;
}

static struct snug_grammar *LAST_G; /* the grammar of the last matcher() */

static void drop(struct snug_matcher *m) {
    snug_matcher_free(m);
    snug_grammar_free(LAST_G);
    LAST_G = NULL;
}

static struct snug_matcher *matcher(const char *gbnf) {
    struct snug_grammar *g = NULL;
    struct snug_err err = {0};
    if (snug_grammar_parse(&g, gbnf, strlen(gbnf), NULL, NULL, &err) != SNUG_OK) {
        CHECKF(0, "parse: %s", err.msg);
        return NULL;
    }
    struct snug_matcher *m = NULL;
    if (snug_matcher_init(&m, g, TRIE, &EOS, 1, NULL, &err) != SNUG_OK) {
        CHECKF(0, "matcher: %s", err.msg);
        snug_grammar_free(g);
        return NULL;
    }
    LAST_G = g;
    return m;
}

/* 1 = the whole text is a sentence, 0 = a proper prefix of one, -1 = neither */
static int judge(const char *gbnf, const char *text, size_t n) {
    struct snug_grammar *g = NULL;
    struct snug_err err = {0};
    if (snug_grammar_parse(&g, gbnf, strlen(gbnf), NULL, NULL, &err) != SNUG_OK) {
        CHECKF(0, "parse: %s", err.msg);
        return -2;
    }
    struct snug_matcher *m = NULL;
    int r = -2;
    if (snug_matcher_init(&m, g, TRIE, &EOS, 1, NULL, &err) == SNUG_OK) {
        if (snug_matcher_accept_bytes(m, text, n, &err) != SNUG_OK)
            r = -1;
        else
            r = snug_matcher_is_complete(m) ? 1 : 0;
    }
    snug_matcher_free(m);
    snug_grammar_free(g);
    return r;
}

#define ACCEPTS(g, s) CHECKF(judge(g, s, strlen(s)) == 1, "'%s' should be accepted", s)
#define PREFIX(g, s)  CHECKF(judge(g, s, strlen(s)) == 0, "'%s' should be a proper prefix", s)
#define REJECTS(g, s) CHECKF(judge(g, s, strlen(s)) == -1, "'%s' should be rejected", s)

static void expect_error(const char *gbnf, const char *where, const char *what) {
    struct snug_grammar *g = NULL;
    struct snug_err err = {0};
    int rc = snug_grammar_parse(&g, gbnf, strlen(gbnf), NULL, NULL, &err);
    CHECKF(rc == SNUG_ERR_FORMAT && !g, "'%s' should fail", gbnf);
    CHECKF(strstr(err.msg, where) != NULL, "'%s' not in '%s'", where, err.msg);
    CHECKF(strstr(err.msg, what) != NULL, "'%s' not in '%s'", what, err.msg);
    snug_grammar_free(g);
}

static void test_parse_errors(void) {
    expect_error("root ::= \"a\n", "line 1, column 12", "unterminated");
    expect_error("root ::= x\n", "line 1, column 10", "never defined");
    expect_error("# comment\nroot ::= \"a\" (\"b\"\n", "line 2, column 14", "never closed");
    expect_error("root ::= [b-a]\n", "line 1, column 10", "out of order");
    expect_error("root ::= \"a\" )\n", "line 1, column 14", "without a matching");
    expect_error("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"\n", "line 2, column 1",
                 "left-recursive");
    expect_error("root ::= (\"a\"?)*\n", "line 1", "left-recursive");
    expect_error("root ::= \"\\q\"\n", "line 1, column 11", "unknown escape");
    expect_error("root ::= \"a\"{3,2}\n", "line 1", "n < m");
    expect_error("root ::= \"a\" ::= \"b\"\n", "line 1, column 14", "unexpected character");
    expect_error("start ::= \"a\"\n", "line 1", "no rule named 'root'");
    expect_error("root ::= \"a\"\nroot ::= \"b\"\n", "line 2, column 1", "defined twice");
}

static const char *ARITH = "# arithmetic\n"
                           "root ::= expr\n"
                           "expr ::= term ((\"+\" | \"-\") term)*\n"
                           "term ::= factor ((\"*\" | \"/\") factor)*\n"
                           "factor ::= [0-9]+ | \"(\" expr \")\"\n";

static void test_language(void) {
    ACCEPTS(ARITH, "1+2*(3-4)");
    ACCEPTS(ARITH, "((12))");
    PREFIX(ARITH, "1+");
    PREFIX(ARITH, "(1");
    REJECTS(ARITH, "1++2");
    REJECTS(ARITH, ")");
    const char *rep = "root ::= \"a\"{2,4} \"b\"{1,} \"c\"{2} \"d\"{,1}\n";
    ACCEPTS(rep, "aabcc");
    ACCEPTS(rep, "aaaabbbccd");
    REJECTS(rep, "abcc");
    REJECTS(rep, "aaaaabcc");
    REJECTS(rep, "aabccc");
    REJECTS(rep, "aabccdd");
    const char *multi = "root ::= \"x\"\n"
                        "  | \"y\" # a comment\n"
                        "  | [a-c]+ \"\\n\" \"\\x41\\u00e9\"\n"
                        "other ::= \"unused\"\n";
    ACCEPTS(multi, "x");
    ACCEPTS(multi, "y");
    ACCEPTS(multi, "abc\nA\xc3\xa9");
    REJECTS(multi, "z");
    const char *any = "root ::= . . \"!\"\n";
    ACCEPTS(any, "ab!");
    ACCEPTS(any, "\xe4\xb8\x80\xf0\x9f\x98\x80!");
    REJECTS(any, "\xed\xa0\x80x!"); /* a surrogate is not a character */
    REJECTS(any, "\xc3!");          /* a truncated sequence */
}

/* Every code point 0..0x10FFFF (step 7 plus the edges) against the class definition. */
static void test_utf8_classes(void) {
    const char *g = "root ::= [^a-c\\u00e9\\u4e00-\\u4eff\\U0001F600-\\U0001F64F] \"!\"\n";
    struct snug_grammar *gr = NULL;
    struct snug_err err = {0};
    CHECK(snug_grammar_parse(&gr, g, strlen(g), NULL, NULL, &err) == SNUG_OK);
    struct snug_matcher *m = NULL;
    CHECK(snug_matcher_init(&m, gr, TRIE, &EOS, 1, NULL, &err) == SNUG_OK);
    int bad = 0;
    uint32_t edges[] = {0,       0x60,    0x61,    0x63,    0x64,    0x7F,    0x80,
                        0xE8,    0xE9,    0xEA,    0x7FF,   0x800,   0x4DFF,  0x4E00,
                        0x4EFF,  0x4F00,  0xD7FF,  0xD800,  0xDFFF,  0xE000,  0xFFFF,
                        0x10000, 0x1F5FF, 0x1F600, 0x1F64F, 0x1F650, 0x10FFFF};
    for (uint32_t k = 0; k < 0x110000 / 7 + 27; k++) {
        uint32_t c = k < 27 ? edges[k] : (k - 27) * 7;
        char u[8];
        int n;
        if (c < 0x80) {
            u[0] = (char)c, n = 1;
        } else if (c < 0x800) {
            u[0] = (char)(0xC0 | (c >> 6)), u[1] = (char)(0x80 | (c & 63)), n = 2;
        } else if (c < 0x10000) {
            u[0] = (char)(0xE0 | (c >> 12)), u[1] = (char)(0x80 | ((c >> 6) & 63));
            u[2] = (char)(0x80 | (c & 63)), n = 3;
        } else {
            u[0] = (char)(0xF0 | (c >> 18)), u[1] = (char)(0x80 | ((c >> 12) & 63));
            u[2] = (char)(0x80 | ((c >> 6) & 63)), u[3] = (char)(0x80 | (c & 63)), n = 4;
        }
        u[n++] = '!';
        bool in = !((c >= 'a' && c <= 'c') || c == 0xE9 || (c >= 0x4E00 && c <= 0x4EFF) ||
                    (c >= 0x1F600 && c <= 0x1F64F) || (c >= 0xD800 && c <= 0xDFFF));
        snug_matcher_reset(m);
        bool got = snug_matcher_accept_bytes(m, u, (size_t)n, &err) == SNUG_OK &&
                   snug_matcher_is_complete(m);
        if (got != in && bad++ < 5) fprintf(stderr, "U+%04X: got %d want %d\n", c, got, in);
    }
    CHECKF(bad == 0, "%d code points misclassified", bad);
    snug_matcher_free(m);
    snug_grammar_free(gr);
}

/* The mask equals a token-by-token allows() over the vocabulary, in every state along a text. */
static void check_masks_along(struct snug_matcher *m, const char *const *pieces, int n_pieces) {
    int32_t V = snug_tokenizer_n_vocab(TOK);
    struct snug_err err = {0};
    for (int step = 0; step <= n_pieces; step++) {
        const uint64_t *mk = snug_matcher_mask(m);
        uint64_t copy[64];
        memcpy(copy, mk, (size_t)((V + 63) / 64) * 8);
        int diff = 0;
        for (snug_token id = 0; id < V; id++) {
            bool a = (copy[id >> 6] >> (id & 63)) & 1;
            if (a != snug_matcher_allows(m, id)) diff++;
        }
        CHECKF(diff == 0, "step %d: %d tokens differ between mask and allows", step, diff);
        static float row[300];
        for (int i = 0; i < 300; i++) row[i] = 1.0f;
        snug_matcher_apply(m, row, 300); /* logits beyond the vocabulary are disallowed too */
        int bad = 0;
        for (int i = 0; i < 300; i++)
            bad += (i < V && ((copy[i >> 6] >> (i & 63)) & 1)) != (row[i] == 1.0f);
        CHECKF(bad == 0, "step %d: apply disagrees with the mask on %d logits", step, bad);
        if (step == n_pieces) break;
        snug_token id = tok_of(pieces[step]);
        CHECKF(snug_matcher_accept(m, id, &err) == SNUG_OK, "accept '%s': %s", pieces[step],
               err.msg);
    }
}

static void test_masks(void) {
    struct snug_matcher *m =
        matcher("root ::= \"{\\\"name\\\":\" (\"true\" | \"false\" | [0-9]+) \"}\"\n");
    if (!m) return;
    const char *path[] = {"{\"", "n", "a", "m", "e", "\":", "12", "3", "}"};
    check_masks_along(m, path, 9);
    CHECK(snug_matcher_is_complete(m));
    CHECK(snug_matcher_allows(m, EOS));
    CHECK(snug_matcher_forced(m) == EOS); /* only the end is left */
    /* rollback: back to after "{\"" */
    struct snug_err err = {0};
    CHECK(snug_matcher_rollback(m, 8, &err) == SNUG_OK);
    CHECK(!snug_matcher_allows(m, EOS));
    CHECK(snug_matcher_allows(m, tok_of("name")));
    CHECK(!snug_matcher_allows(m, tok_of("\"na")));
    CHECK(snug_matcher_forced(m) == tok_of("name")); /* the longest token of the forced text */
    CHECK(snug_matcher_rollback(m, 2, &err) == SNUG_ERR_INVALID); /* only one left */
    CHECK(snug_matcher_rollback(m, 1, &err) == SNUG_OK);
    CHECK(snug_matcher_forced(m) == tok_of("{\""));
    CHECK(snug_matcher_accept(m, tok_of("true"), &err) == SNUG_ERR_INVALID);
    CHECK(snug_matcher_accept(m, EOS, &err) == SNUG_ERR_INVALID);
    /* the shortest completion from the start: {"name":D} with one digit D */
    {
        uint8_t buf[64];
        int n = snug_matcher_shortest_completion(m, buf, 64);
        CHECKF(n == 10 && !memcmp(buf, "{\"name\":", 8) && buf[8] >= '0' && buf[8] <= '9' &&
                   buf[9] == '}',
               "shortest completion %d '%.*s'", n, n > 0 ? n : 0, (const char *)buf);
        CHECK(snug_vocab_trie_longest_prefix(TRIE, (const uint8_t *)"hello!", 6) ==
              tok_of("hello"));
    }
    /* no allocation on the token path */
    uint64_t a0 = snug_alloc_count();
    for (int rep = 0; rep < 3; rep++) {
        const char *p2[] = {"{\"", "name", "\":", "1", "2", "}"};
        for (int i = 0; i < 6; i++) {
            snug_matcher_mask(m);
            snug_matcher_forced(m);
            CHECK(snug_matcher_accept(m, tok_of(p2[i]), &err) == SNUG_OK);
        }
        CHECK(snug_matcher_accept(m, EOS, &err) == SNUG_OK);
        CHECK(!snug_matcher_allows(m, EOS));
        CHECK(snug_matcher_rollback(m, 7, &err) == SNUG_OK);
    }
    CHECK(snug_alloc_count() == a0);
    drop(m);

    /* the forced bytes stop at a choice: "h" before "el" | "ey" is not forced as the byte "h"
     * while the tokens "he", "hel", "hello" spell it and go on (the model may write "hel");
     * "q" before "a" | "b" is (no longer token starts with it) */
    m = matcher("root ::= \"h\" (\"el\" | \"ey\")\n");
    if (m) {
        CHECK(snug_matcher_forced(m) == -1);
        CHECK(snug_matcher_allows(m, tok_of("hel")) && snug_matcher_allows(m, tok_of("he")));
        drop(m);
    }
    m = matcher("root ::= \"q\" (\"a\" | \"b\")\n");
    if (m) {
        CHECK(snug_matcher_forced(m) == tok_of("q"));
        drop(m);
    }

    /* an allow-everything grammar allows every non-control token, and the end at once */
    m = matcher("root ::= [\\x00-\\U0010FFFF]*\n");
    if (m) {
        const uint64_t *mk = snug_matcher_mask(m);
        int n = 0;
        for (snug_token id = 0; id < snug_tokenizer_n_vocab(TOK); id++)
            n += (mk[id >> 6] >> (id & 63)) & 1;
        /* single bytes that can begin no UTF-8 character are out: 0x80..0xC1, 0xF5..0xFF */
        int want = snug_tokenizer_n_vocab(TOK) - (0xC2 - 0x80) - (0x100 - 0xF5);
        CHECKF(n == want, "%d allowed, want %d", n, want);
        drop(m);
    }
}

/* ---- JSON Schema ------------------------------------------------------------------------- */

static int schema_judge(const char *schema, const char *doc) {
    char *gbnf = NULL;
    size_t n = 0;
    struct snug_err err = {0};
    if (snug_json_schema_to_gbnf(schema, strlen(schema), &gbnf, &n, &err) != SNUG_OK) {
        CHECKF(0, "schema: %s", err.msg);
        return -2;
    }
    int r = judge(gbnf, doc, strlen(doc));
    snug_free(gbnf);
    return r;
}

/* For every prefix of a valid document: the shortest completion from there completes it. */
static void completions_along(const char *schema, const char *doc) {
    char *gbnf = NULL;
    struct snug_err err = {0};
    struct snug_grammar *g = NULL;
    if (snug_json_schema_to_gbnf(schema, strlen(schema), &gbnf, NULL, &err) ||
        snug_grammar_parse(&g, gbnf, strlen(gbnf), NULL, NULL, &err)) {
        CHECKF(0, "%s", err.msg);
        snug_free(gbnf);
        return;
    }
    int bad = 0;
    for (size_t k = 0; k <= strlen(doc); k++) {
        struct snug_matcher *m = NULL;
        if (snug_matcher_init(&m, g, TRIE, &EOS, 1, NULL, &err)) break;
        uint8_t buf[512];
        int n = -1;
        if (snug_matcher_accept_bytes(m, doc, k, &err) == SNUG_OK)
            n = snug_matcher_shortest_completion(m, buf, (int)sizeof buf);
        bool ok = n >= 0 &&
                  snug_matcher_accept_bytes(m, (const char *)buf, (size_t)n, &err) == SNUG_OK &&
                  snug_matcher_is_complete(m);
        if (!ok && bad++ < 3) fprintf(stderr, "prefix %zu of %s: completion %d\n", k, doc, n);
        snug_matcher_free(m);
    }
    CHECKF(bad == 0, "%d prefixes of %s not completed", bad, doc);
    snug_grammar_free(g);
    snug_free(gbnf);
}

#define S_OK(s, d)  CHECKF(schema_judge(s, d) == 1, "%s should accept %s", s, d)
#define S_BAD(s, d) CHECKF(schema_judge(s, d) != 1, "%s should not accept %s", s, d)

static void schema_error(const char *schema, const char *keyword) {
    char *gbnf = NULL;
    struct snug_err err = {0};
    int rc = snug_json_schema_to_gbnf(schema, strlen(schema), &gbnf, NULL, &err);
    CHECKF(rc != SNUG_OK && !gbnf, "%s should fail", schema);
    CHECKF(strstr(err.msg, keyword) != NULL, "'%s' not named in '%s'", keyword, err.msg);
}

static void test_schema(void) {
    const char *obj =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
        "\"age\":{\"type\":\"integer\",\"minimum\":0},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":2}},"
        "\"required\":[\"name\"],\"additionalProperties\":false}";
    S_OK(obj, "{\"name\":\"x\"}");
    S_OK(obj, "{ \"name\": \"x\\\"y\", \"age\": 3, \"tags\": [\"a\", \"b\"] }");
    S_OK(obj, "{\"name\":\"\",\"tags\":[]}");
    S_BAD(obj, "{\"age\":3}");
    S_BAD(obj, "{\"name\":\"x\",\"age\":-1}");
    S_BAD(obj, "{\"name\":\"x\",\"tags\":[\"a\",\"b\",\"a\"]}");
    S_BAD(obj, "{\"name\":\"x\",\"other\":1}");
    S_BAD(obj, "{\"age\":3,\"name\":\"x\"}"); /* declared order */
    const char *defs = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":"
                       "\"number\"},\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":"
                       "\"null\"}]}},\"required\":[\"v\",\"next\"]}},\"$ref\":\"#/$defs/node\"}";
    S_OK(defs, "{\"v\":1.5,\"next\":{\"v\":-2e3,\"next\":null}}");
    S_BAD(defs, "{\"v\":1,\"next\":{\"v\":2}}");
    completions_along(defs, "{\"v\":1.5,\"next\":{\"v\":-2e3,\"next\":{\"v\":0,\"next\":null}}}");
    completions_along(obj, "{ \"name\": \"x\\\"y\u00e9\", \"age\": 3, \"tags\": [\"a\", \"b\"] }");
    S_OK("{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-28\"");
    S_BAD("{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-30\"");
    S_BAD("{\"type\":\"string\",\"format\":\"date\"}", "\"2024-13-01\"");
    S_OK("{\"type\":\"string\",\"format\":\"uuid\"}", "\"123e4567-e89b-12d3-a456-426614174000\"");
    S_OK("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"ab\"");
    S_BAD("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"abcd\"");
    S_OK("{\"type\":\"integer\",\"minimum\":-3,\"maximum\":5}", "-3");
    S_BAD("{\"type\":\"integer\",\"minimum\":-3,\"maximum\":5}", "6");
    S_OK("{\"type\":[\"string\",\"null\"]}", "null");
    S_OK("{\"const\":{\"a\":[1,true]}}", "{\"a\":[1,true]}");
    S_OK("{\"type\":\"object\"}", "{\"k\":[1,{\"z\":null}],\"j\":\"\"}");
    S_OK("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
         "{\"a\":1,\"b\":2}");
    S_BAD("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "{\"a\":\"x\"}");
    S_OK("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],"
         "\"items\":false}",
         "[1,\"a\"]");
    /* pattern: a regular-expression subset, on the JSON-encoded string */
    const char *code = "{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-\\\\d{2,4}$\"}";
    S_OK(code, "\"ABC-123\"");
    S_BAD(code, "\"AB-123\"");
    S_BAD(code, "\"ABC-12345\"");
    S_BAD(code, "\"xABC-123\"");
    const char *alt = "{\"type\":\"string\",\"pattern\":\"^(foo|ba[rz])+(\\\\.[0-9]+)?$\"}";
    S_OK(alt, "\"foobaz.5\"");
    S_OK(alt, "\"bar\"");
    S_BAD(alt, "\"baq\"");
    const char *unanch = "{\"type\":\"string\",\"pattern\":\"ab\"}";
    S_OK(unanch, "\"xxabyy\"");
    S_BAD(unanch, "\"xxa\"");
    const char *quote = "{\"type\":\"string\",\"pattern\":\"^a\\\"[^a]\\\\\\\\$\"}";
    S_OK(quote, "\"a\\\"b\\\\\"");
    S_BAD(quote, "\"a\\\"\\\"\\\\\""); /* the class leaves out a raw '"' */
    schema_error("{\"type\":\"string\",\"pattern\":\"^(?=a)a$\"}", "look-around");
    schema_error("{\"type\":\"string\",\"pattern\":\"^(a)\\\\1$\"}", "back-references");
    /* keywords a grammar cannot hold exactly are refused, naming them */
    schema_error("{\"type\":\"object\",\"minProperties\":2}", "minProperties");
    schema_error("{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems");
    schema_error("{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"uniqueItems\":true}",
                 "uniqueItems");
    schema_error("{\"type\":\"number\",\"multipleOf\":0.01}", "multipleOf");
    schema_error("{\"type\":\"integer\",\"multipleOf\":257}", "multipleOf");
    schema_error("{\"oneOf\":[{\"type\":\"integer\"},{\"minimum\":3}]}", "oneOf");
    schema_error("{\"allOf\":[{\"pattern\":\"a\"},{\"pattern\":\"b\"}]}", "pattern");
    schema_error("{\"type\":\"string\",\"not\":{\"pattern\":\"a\"}}", "'not'");
    schema_error("{\"type\":\"string\",\"enum\":[1,2]}", "enum");
    schema_error("{\"properties\":{\"a\":{\"if\":{}}}}", "'if' at #/properties/a");
    schema_error("{\"$ref\":\"http://example.com/s.json\"}", "$ref");
    schema_error("{\"type\":\"string\",\"format\":\"uri-template\"}", "uri-template");
    /* a schema that refers to itself before any JSON text (found by fuzz_grammar_schema): its
     * grammar would be left-recursive; recursion inside an object still converts */
    schema_error("{\"$defs\":{\"n\":{}},\"$ref\":\"#\"}", "refers to itself");
    schema_error("{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"string\"}]}", "refers to itself");
    schema_error("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},"
                 "\"$ref\":\"#/$defs/a\"}",
                 "refers to itself");
    S_OK("{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"c\":{\"$ref\":\"#/$defs/n\"}}}},"
         "\"$ref\":\"#/$defs/n\"}",
         "{\"c\":{\"c\":{}}}");
}

/* A schema compiled once, for judging many documents. */
struct sj {
    struct snug_grammar *g;
    struct snug_matcher *m;
};

static bool sj_open(struct sj *j, const char *schema) {
    char *gbnf = NULL;
    struct snug_err err = {0};
    *j = (struct sj){0};
    int rc = snug_json_schema_to_gbnf(schema, strlen(schema), &gbnf, NULL, &err);
    if (rc == SNUG_OK) rc = snug_grammar_parse(&j->g, gbnf, strlen(gbnf), NULL, NULL, &err);
    if (rc == SNUG_OK) rc = snug_matcher_init(&j->m, j->g, TRIE, &EOS, 1, NULL, &err);
    snug_free(gbnf);
    CHECKF(rc == SNUG_OK, "%s: %s", schema, err.msg);
    return rc == SNUG_OK;
}

static bool sj_accepts(struct sj *j, const char *doc) {
    struct snug_err err = {0};
    snug_matcher_reset(j->m);
    return snug_matcher_accept_bytes(j->m, doc, strlen(doc), &err) == SNUG_OK &&
           snug_matcher_is_complete(j->m);
}

static void sj_close(struct sj *j) {
    snug_matcher_free(j->m);
    snug_grammar_free(j->g);
}

static uint64_t test_rng = 0x2545F4914F6CDD1Dull;
static uint64_t test_rand(void) {
    test_rng ^= test_rng << 13, test_rng ^= test_rng >> 7, test_rng ^= test_rng << 17;
    return test_rng;
}

/* Integer ranges and multiples, exactly: every integer of a window around the bounds (and
 * random far ones) is accepted iff it is in the range and a multiple; no leading zeros. */
static void test_schema_integers(void) {
    static const long long bounds[][2] = {{1, 65535},      {0, 9},         {-3, 5}, {-1000, -17},
                                          {7, 7},          {99, 1001},     {-9, 0}, {123, 98765},
                                          {-65536, 65535}, {10, 100000000}};
    static const unsigned mults[] = {0, 2, 3, 7, 10, 12, 25, 100, 256, 3000};
    int bad = 0, checks = 0;
    for (size_t bi = 0; bi < sizeof bounds / sizeof bounds[0]; bi++) {
        for (size_t mi = 0; mi < sizeof mults / sizeof mults[0]; mi++) {
            for (int sides = 0; sides < 3; sides++) { /* both, lower only, upper only */
                long long lo = bounds[bi][0], hi = bounds[bi][1];
                unsigned m = mults[mi];
                char schema[256];
                int n = snprintf(schema, sizeof schema, "{\"type\":\"integer\"");
                if (sides != 2)
                    n += snprintf(schema + n, sizeof schema - n, ",\"minimum\":%lld", lo);
                if (sides != 1)
                    n += snprintf(schema + n, sizeof schema - n, ",\"maximum\":%lld", hi);
                if (m) n += snprintf(schema + n, sizeof schema - n, ",\"multipleOf\":%u", m);
                snprintf(schema + n, sizeof schema - n, "}");
                bool has_lo = sides != 2, has_hi = sides != 1;
                if (m && has_lo && has_hi) { /* a range without a multiple is refused */
                    bool any = false;
                    for (long long v = lo; v <= hi && !any; v++) any = v % (long long)m == 0;
                    if (!any) continue;
                }
                struct sj j;
                if (!sj_open(&j, schema)) continue;
                long long probe[160];
                int np = 0;
                for (long long d = -30; d <= 30; d++) probe[np++] = lo + d, probe[np++] = hi + d;
                for (int k = 0; k < 38; k++)
                    probe[np++] = (long long)(test_rand() % 2000001) - 1000000;
                for (int k = 0; k < np; k++) {
                    long long v = probe[k];
                    bool want = (!has_lo || v >= lo) && (!has_hi || v <= hi) &&
                                (!m || v % (long long)m == 0);
                    char doc[40];
                    snprintf(doc, sizeof doc, "%lld", v);
                    checks++;
                    if (sj_accepts(&j, doc) != want && bad++ < 5)
                        fprintf(stderr, "%s: %s %s\n", schema, doc, want ? "rejected" : "accepted");
                    if (v > 0) { /* a leading zero is never JSON */
                        snprintf(doc, sizeof doc, "0%lld", v);
                        if (sj_accepts(&j, doc) && bad++ < 5)
                            fprintf(stderr, "%s: %s accepted\n", schema, doc);
                    }
                }
                sj_close(&j);
            }
        }
    }
    CHECKF(bad == 0, "%d of %d integer range checks wrong", bad, checks);
    /* the port number of the issue report: accepted, 0 and 65536 not */
    const char *port = "{\"type\":\"integer\",\"minimum\":1,\"maximum\":65535}";
    S_OK(port, "8080");
    S_OK(port, "65535");
    S_BAD(port, "65536");
    S_BAD(port, "0");
    /* draft-04 exclusive bounds (booleans), draft-06 ones (numbers), real bounds on integers */
    S_BAD("{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true}", "0");
    S_OK("{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true}", "1");
    S_BAD("{\"type\":\"integer\",\"exclusiveMaximum\":10}", "10");
    S_OK("{\"type\":\"integer\",\"exclusiveMaximum\":10}", "-10");
    S_OK("{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":3.5}", "2");
    S_BAD("{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":3.5}", "1");
    S_BAD("{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":3.5}", "4");
}

/* Decimal ranges: on a grid of decimals, a text is accepted only if its value (read as a
 * double, as a validator does) is inside the bounds, and every grid text inside is accepted. */
static void test_schema_decimals(void) {
    static const struct {
        const char *lo, *hi;
        bool xlo, xhi;
    } cases[] = {{"0", "1", false, false},       {"0.5", "2.25", false, false},
                 {"-1.25", "0.75", true, true},  {"0", NULL, true, false},
                 {NULL, "-0.5", false, false},   {"-10", "10", true, false},
                 {"0.001", "0.01", false, true}, {"-3.75", "-3.5", false, false},
                 {"1e-3", "12.5", false, false}, {NULL, "100", false, true}};
    int bad = 0, checks = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        char schema[256];
        int n = snprintf(schema, sizeof schema, "{\"type\":\"number\"");
        if (cases[ci].lo)
            n += snprintf(schema + n, sizeof schema - n, ",\"%s\":%s",
                          cases[ci].xlo ? "exclusiveMinimum" : "minimum", cases[ci].lo);
        if (cases[ci].hi)
            n += snprintf(schema + n, sizeof schema - n, ",\"%s\":%s",
                          cases[ci].xhi ? "exclusiveMaximum" : "maximum", cases[ci].hi);
        snprintf(schema + n, sizeof schema - n, "}");
        struct sj j;
        if (!sj_open(&j, schema)) continue;
        double lo = cases[ci].lo ? strtod(cases[ci].lo, NULL) : 0;
        double hi = cases[ci].hi ? strtod(cases[ci].hi, NULL) : 0;
        for (int ip = -12; ip <= 12; ip++) {
            for (int f = -1; f < 1000; f += (f < 100 ? 1 : 7)) {
                char doc[48];
                if (f < 0)
                    snprintf(doc, sizeof doc, "%d", ip);
                else if (f < 10)
                    snprintf(doc, sizeof doc, "%s%d.%d", ip == 0 && f % 2 ? "-" : "", ip, f);
                else if (f < 100)
                    snprintf(doc, sizeof doc, "%d.%02d", ip, f);
                else
                    snprintf(doc, sizeof doc, "%d.%03d", ip, f);
                double v = strtod(doc, NULL);
                bool want = (!cases[ci].lo || (cases[ci].xlo ? v > lo : v >= lo)) &&
                            (!cases[ci].hi || (cases[ci].xhi ? v < hi : v <= hi));
                checks++;
                if (sj_accepts(&j, doc) != want && bad++ < 5)
                    fprintf(stderr, "%s: %s %s\n", schema, doc, want ? "rejected" : "accepted");
            }
        }
        /* texts right at an exclusive bound: equal values never pass, even spelled long */
        if (cases[ci].lo && cases[ci].xlo) {
            char doc[64];
            snprintf(doc, sizeof doc, "%s%s0000000000000", cases[ci].lo,
                     strchr(cases[ci].lo, '.') ? "" : ".");
            if (sj_accepts(&j, doc) && bad++ < 5) fprintf(stderr, "%s: %s accepted\n", schema, doc);
        }
        sj_close(&j);
    }
    CHECKF(bad == 0, "%d of %d decimal range checks wrong", bad, checks);
    /* a number just above an exclusive 0 must read back as more than 0 */
    S_OK("{\"type\":\"number\",\"exclusiveMinimum\":0}", "0.0000000000000001");
    S_BAD("{\"type\":\"number\",\"exclusiveMinimum\":0}", "0.0000000000000000");
    S_BAD("{\"type\":\"number\",\"exclusiveMinimum\":0}", "-0");
    /* a number with an integer multipleOf is written as integers */
    S_OK("{\"type\":\"number\",\"multipleOf\":5,\"maximum\":20}", "-15");
    S_BAD("{\"type\":\"number\",\"multipleOf\":5,\"maximum\":20}", "25");
    S_BAD("{\"type\":\"number\",\"multipleOf\":5}", "5.5");
}

/* Objects, arrays, combinations: the new keywords, accepted and rejected. */
static void test_schema_keywords(void) {
    /* minProperties / maxProperties over declared properties and extra pairs */
    const char *mm = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{"
                     "\"type\":\"integer\"},\"c\":{\"type\":\"integer\"}},\"minProperties\":1,"
                     "\"maxProperties\":2}";
    S_BAD(mm, "{}");
    S_OK(mm, "{\"b\":1}");
    S_OK(mm, "{\"a\":1,\"c\":2}");
    S_BAD(mm, "{\"a\":1,\"b\":2,\"c\":3}");
    const char *extra = "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"boolean\"},"
                        "\"minProperties\":1,\"maxProperties\":3}";
    S_BAD(extra, "{}");
    S_OK(extra, "{\"x\":true}");
    S_OK(extra, "{\"x\":true,\"y\":false,\"z\":true}");
    S_BAD(extra, "{\"x\":true,\"y\":false,\"z\":true,\"w\":true}");
    /* extra keys never repeat a declared name (its schema would apply instead) */
    const char *addl = "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},"
                       "\"additionalProperties\":{\"type\":\"string\"}}";
    S_OK(addl, "{\"id\":1,\"name\":\"x\"}");
    S_OK(addl, "{\"idx\":\"x\",\"i\":\"y\"}");
    S_BAD(addl, "{\"id\":\"x\"}");
    /* a required property that is not declared takes additionalProperties' schema */
    const char *rq = "{\"type\":\"object\",\"required\":[\"k\"],\"additionalProperties\":{\"type\":"
                     "\"integer\"}}";
    S_OK(rq, "{\"k\":3}");
    S_BAD(rq, "{}");
    S_BAD(rq, "{\"k\":\"x\"}");
    /* patternProperties: keys from the pattern, values under its schema */
    const char *pp = "{\"type\":\"object\",\"patternProperties\":{\"^x-[a-z]+$\":{\"type\":"
                     "\"integer\"}},\"additionalProperties\":false}";
    S_OK(pp, "{\"x-ab\":1,\"x-c\":2}");
    S_BAD(pp, "{\"y-ab\":1}");
    S_BAD(pp, "{\"x-ab\":\"s\"}");
    /* a declared name a pattern matches meets the pattern's schema; that pattern's own keys are
     * not written (they could repeat the declared name) */
    const char *clash = "{\"type\":\"object\",\"properties\":{\"x-a\":{\"type\":\"integer\"}},"
                        "\"patternProperties\":{\"^x-\":{\"minimum\":5}},\"additionalProperties\":"
                        "false}";
    S_OK(clash, "{\"x-a\":7}");
    S_BAD(clash, "{\"x-a\":3}");
    S_BAD(clash, "{\"x-b\":7}");
    /* lengths over a pattern with two varying repetitions: split between them */
    const char *two = "{\"type\":\"string\",\"pattern\":\"^[a-z]+-[0-9]+$\",\"minLength\":5,"
                      "\"maxLength\":8}";
    S_OK(two, "\"abc-123\"");
    S_OK(two, "\"ab-12\"");
    S_BAD(two, "\"a-1\"");
    S_BAD(two, "\"abcdef-123\"");
    schema_error("{\"type\":\"string\",\"pattern\":\"^(ab|c)+$\",\"maxLength\":4}", "pattern");
    /* $ref siblings are merged with the target (draft 2019-09) */
    const char *sib =
        "{\"$defs\":{\"s\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/s\",\"maxLength\":"
        "2}";
    S_OK(sib, "\"ab\"");
    S_BAD(sib, "\"abc\"");
    S_BAD(sib, "1");
    /* allOf of several schemas */
    const char *all =
        "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
        "\"required\":[\"a\"]},{\"properties\":{\"a\":{\"minimum\":5},\"b\":{\"type\":"
        "\"string\"}}}]}";
    S_OK(all, "{\"a\":5}");
    S_OK(all, "{\"a\":7,\"b\":\"q\"}");
    S_BAD(all, "{\"a\":4}");
    S_BAD(all, "{\"b\":\"q\"}");
    /* keywords beside anyOf apply to every branch; oneOf branches told apart by a const */
    const char *one =
        "{\"type\":\"object\",\"required\":[\"kind\"],\"oneOf\":[{\"properties\":{\"kind\":{"
        "\"const\":\"a\"},\"x\":{\"type\":\"integer\"}}},{\"properties\":{\"kind\":{\"const\":"
        "\"b\"},"
        "\"y\":{\"type\":\"string\"}}}]}";
    S_OK(one, "{\"kind\":\"a\",\"x\":1}");
    S_OK(one, "{\"kind\":\"b\",\"y\":\"s\"}");
    S_BAD(one, "{\"kind\":\"a\",\"y\":\"s\"}");
    S_BAD(one, "{\"x\":1}");
    /* enum values are kept only where the keywords beside them allow */
    const char *en = "{\"type\":\"string\",\"maxLength\":3,\"enum\":[\"ab\",\"abcd\",1]}";
    S_OK(en, "\"ab\"");
    S_BAD(en, "\"abcd\"");
    S_BAD(en, "1");
    /* uniqueItems over a finite item set: each value at most once, in the set's order */
    const char *uq = "{\"type\":\"array\",\"items\":{\"enum\":[\"r\",\"g\",\"b\"]},\"uniqueItems\":"
                     "true,\"minItems\":1}";
    S_OK(uq, "[\"r\",\"b\"]");
    S_OK(uq, "[\"g\"]");
    S_BAD(uq, "[\"r\",\"r\"]");
    S_BAD(uq, "[]");
    S_OK("{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"uniqueItems\":true}",
         "[true,false]");
    S_BAD("{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"uniqueItems\":true}",
          "[true,true]");
    S_OK("{\"type\":\"array\",\"uniqueItems\":true,\"maxItems\":1}", "[{\"a\":1}]");
    /* prefixItems with counts; draft-04 array items with additionalItems */
    const char *tup =
        "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":"
        "\"string\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":3}";
    S_OK(tup, "[1]");
    S_OK(tup, "[1,\"a\",true]");
    S_BAD(tup, "[]");
    S_BAD(tup, "[1,\"a\",true,false]");
    S_BAD(tup, "[1,2]");
    const char *d4 = "{\"type\":\"array\",\"items\":[{\"type\":\"integer\"}],\"additionalItems\":"
                     "false}";
    S_OK(d4, "[3]");
    S_BAD(d4, "[3,4]");
    /* without a type, the types whose keywords appear */
    S_OK("{\"minLength\":2}", "\"ab\"");
    S_BAD("{\"minLength\":2}", "12");
    /* strings never take surrogate escapes (one character = one code point) */
    S_BAD("{\"type\":\"string\",\"minLength\":2}", "\"\\ud83d\\ude00\"");
    S_OK("{\"type\":\"string\",\"minLength\":2}", "\"\\u00e9\\u00e8\"");
    /* pattern classes leave out every space either regex dialect knows */
    S_BAD("{\"type\":\"string\",\"pattern\":\"^[^\\\\s]+$\"}", "\"a\u2000b\"");
    S_OK("{\"type\":\"string\",\"pattern\":\"^[^\\\\s]+$\"}", "\"a\u00e9b\"");
    S_BAD("{\"type\":\"string\",\"pattern\":\"^.$\"}", "\"\u2028\"");
    /* not: its exact forms (a type, required names, their anyOf / allOf) */
    const char *nt = "{\"not\":{\"type\":[\"string\",\"object\",\"array\"]}}";
    S_OK(nt, "12.5");
    S_OK(nt, "null");
    S_BAD(nt, "\"s\"");
    const char *nr = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{"
                     "\"type\":\"integer\"}},\"not\":{\"required\":[\"a\",\"b\"]}}";
    S_OK(nr, "{\"a\":1}");
    S_OK(nr, "{\"b\":1}");
    S_BAD(nr, "{\"a\":1,\"b\":2}");
    /* dependencies (draft-04) / dependentRequired: a name present brings the others */
    const char *dep = "{\"type\":\"object\",\"properties\":{\"card\":{\"type\":\"string\"},"
                      "\"cvv\":{\"type\":\"string\"}},\"dependencies\":{\"card\":[\"cvv\"]}}";
    S_OK(dep, "{}");
    S_OK(dep, "{\"cvv\":\"1\"}");
    S_OK(dep, "{\"card\":\"x\",\"cvv\":\"1\"}");
    S_BAD(dep, "{\"card\":\"x\"}");
    const char *dsch = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{"
                       "\"type\":\"integer\"}},\"dependentSchemas\":{\"a\":{\"properties\":{\"b\":{"
                       "\"minimum\":10}}}}}";
    S_OK(dsch, "{\"a\":1,\"b\":10}");
    S_BAD(dsch, "{\"a\":1,\"b\":9}");
    S_OK(dsch, "{\"b\":9}");
    /* oneOf branches that differ in what they require: each writes without the other's */
    const char *sep = "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"},\"y\":{"
                      "\"type\":\"integer\"}},\"oneOf\":[{\"required\":[\"x\"]},{\"required\":["
                      "\"y\"]}]}";
    S_OK(sep, "{\"x\":1}");
    S_OK(sep, "{\"y\":1}");
    S_BAD(sep, "{\"x\":1,\"y\":2}");
    /* a schema without finite documents is refused */
    schema_error(
        "{\"type\":\"object\",\"properties\":{\"n\":{\"$ref\":\"#\"}},\"required\":[\"n\"]}",
        "no finite document");
}

/* A strict tool whose parameter names hold a newline, a quote, a backslash and a control byte:
 * the tool-call grammar still parses and spells each name exactly (a raw newline inside a GBNF
 * literal once ended the rule; found by fuzz_grammar_schema). */
static void test_tool_param_names(void) {
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":true,"
                        "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\\nb\":{\"type\":"
                        "\"string\"},\"q\\\"\\\\\\u0001\":{\"type\":\"integer\"}},"
                        "\"required\":[\"a\\nb\"]}}}]";
    char *gbnf = NULL;
    struct snug_err err = {0};
    int rc = snug_tools_to_gbnf(tools, strlen(tools), NULL, NULL, false, &gbnf, NULL, &err);
    CHECKF(rc == SNUG_OK, "tools: %s", err.msg);
    if (rc) return;
    const char *call = "<function=f>\n<parameter=a\nb>\nhi\n</parameter>\n"
                       "<parameter=q\"\\\x01>\n7\n</parameter>\n</function>\n</tool_call>";
    CHECKF(judge(gbnf, call, strlen(call)) == 1, "the call with odd names is not accepted");
    const char *wrong = "<function=f>\n<parameter=ab>\nhi\n</parameter>\n</function>\n</tool_call>";
    CHECKF(judge(gbnf, wrong, strlen(wrong)) != 1, "a misspelt name is accepted");
    snug_free(gbnf);
}

/* Call fn with every schema of the corpus (tests/data/schemas) compiled to GBNF; a schema
 * that does not compile, or a missing corpus, is a failure. Returns how many schemas. */
static int for_each_corpus_grammar(void (*fn)(const char *name, const char *gbnf, void *user),
                                   void *user) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/tests/data/schemas", SNUG_SOURCE_DIR);
    DIR *d = opendir(dir);
    CHECKF(d != NULL, "cannot open %s", dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t L = strlen(de->d_name);
        if (L < 6 || strcmp(de->d_name + L - 5, ".json")) continue;
        char path[8400];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        CHECKF(f != NULL, "cannot open %s", path);
        if (!f) continue;
        static char text[65536];
        size_t len = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        char *gbnf = NULL;
        struct snug_err err = {0};
        int rc = snug_json_schema_to_gbnf(text, len, &gbnf, NULL, &err);
        CHECKF(rc == SNUG_OK, "%s: %s", de->d_name, err.msg);
        if (rc == SNUG_OK) fn(de->d_name, gbnf, user);
        snug_free(gbnf);
        n++;
    }
    closedir(d);
    return n;
}

static void corpus_parses(const char *name, const char *gbnf, void *user) {
    (void)user;
    struct snug_grammar *g = NULL;
    struct snug_err err = {0};
    int rc = snug_grammar_parse(&g, gbnf, strlen(gbnf), NULL, NULL, &err);
    CHECKF(rc == SNUG_OK, "%s: %s", name, err.msg);
    snug_grammar_free(g);
}

/* Every schema of the corpus (tests/data/schemas) compiles to a grammar. */
static void test_schema_corpus(void) {
    int n = for_each_corpus_grammar(corpus_parses, NULL);
    CHECKF(n >= 50, "only %d schemas in the corpus", n);
}

/* ---- Lark grammars (custom tools) ---------------------------------------------------------- */

static char LARK_G[65536];

/* Convert a Lark grammar (root rule "root") into LARK_G; the status. */
static int lark(const char *text, struct snug_err *err) {
    char *g = NULL;
    int rc = snug_lark_to_gbnf(text, strlen(text), NULL, &g, NULL, err);
    LARK_G[0] = 0;
    if (rc == SNUG_OK) snprintf(LARK_G, sizeof LARK_G, "%s", g);
    snug_free(g);
    return rc;
}

#define LARK_ERR(text, rc_want, what)                                                              \
    do {                                                                                           \
        struct snug_err e_ = {0};                                                                  \
        int rc_ = lark(text, &e_);                                                                 \
        CHECKF(rc_ == (rc_want), "'%s': status %d, want %d (%s)", text, rc_, rc_want, e_.msg);     \
        CHECKF(strstr(e_.msg, what) != NULL, "'%s' not in '%s'", what, e_.msg);                    \
    } while (0)

/* The apply_patch tool's input format of OpenAI's Codex CLI (its public tool_apply_patch.lark),
 * restated: a patch is "*** Begin Patch", then file operations (add: "+" lines; delete; update:
 * an optional move, then "@@" context headers and " ", "-", "+" lines, an optional
 * "*** End of File"), then "*** End Patch" with an optional final newline. */
static const char *const APPLY_PATCH_LARK =
    "start: begin_patch hunk+ end_patch\n"
    "begin_patch: \"*** Begin Patch\" LF\n"
    "end_patch: \"*** End Patch\" LF?\n"
    "\n"
    "hunk: add_hunk\n"
    "    | delete_hunk\n"
    "    | update_hunk\n"
    "add_hunk: \"*** Add File: \" filename LF add_line+\n"
    "delete_hunk: \"*** Delete File: \" filename LF\n"
    "update_hunk: \"*** Update File: \" filename LF change_move? change?\n"
    "filename: /(.+)/  // any text up to the end of the line\n"
    "add_line: \"+\" /(.*)/ LF -> line\n"
    "change_move: \"*** Move to: \" filename LF\n"
    "change: (change_context | change_line)+ eof_line?\n"
    "change_context: (\"@@\" | \"@@ \" /(.+)/) LF\n"
    "change_line: (\"+\" | \"-\" | \" \") /(.*)/ LF\n"
    "eof_line: \"*** End of File\" LF\n"
    "\n"
    "%import common.LF\n";

static void test_lark(void) {
    struct snug_err err = {0};
    CHECKF(lark(APPLY_PATCH_LARK, &err) == SNUG_OK, "apply_patch: %s", err.msg);
    const char *g = LARK_G;
    ACCEPTS(g, "*** Begin Patch\n*** Add File: a.txt\n+hello\n+\n*** End Patch\n");
    ACCEPTS(g, "*** Begin Patch\n*** Delete File: old.py\n*** End Patch");
    ACCEPTS(g, "*** Begin Patch\n*** Update File: src/app.py\n*** Move to: src/main.py\n"
               "@@ def greet():\n-print(\"Hi\")\n+print(\"Hello <b>\")\n x = 1\n"
               "*** End of File\n*** Delete File: b\n*** End Patch\n");
    ACCEPTS(g, "*** Begin Patch\n*** Update File: f\n*** End Patch\n");
    PREFIX(g, "*** Begin Patch\n*** Add File: a.txt\n+x");
    REJECTS(g, "*** Begin Patch\n*** End Patch\n");                  /* hunk+ */
    REJECTS(g, "*** Begin Patch\n*** Add File: a\n*** End Patch\n"); /* add_line+ */
    REJECTS(g, "*** Begin Patch\n*** Add File: a\nhello\n");         /* no '+' */
    REJECTS(g, "*** Begin Patch\n*** Add File: \n");                 /* (.+) */
    REJECTS(g, "*** Begin Patch\n*** Update File: f\n@@x\n");        /* "@@" or "@@ " */
    REJECTS(g, "*** Begin Patch\n*** Delete File: a\n*** End Patch\n\n");
    /* the other constructs */
    CHECK(lark("start: \"a\"..\"c\" ~ 2 [\"!\"] X\nX: /[0-9]{2}/ | DIGIT+\n"
               "%import common (DIGIT)\n",
               &err) == SNUG_OK);
    ACCEPTS(LARK_G, "ab12");
    ACCEPTS(LARK_G, "cc!7");
    REJECTS(LARK_G, "a12");
    REJECTS(LARK_G, "ad1");
    CHECK(lark("?start: sum\nsum: NUMBER (\"+\" NUMBER)*\n%import common.SIGNED_NUMBER -> "
               "NUMBER\n%import common.WS\n%ignore WS\n",
               &err) == SNUG_OK);
    ACCEPTS(LARK_G, "1 + -2.5e3+  4");
    ACCEPTS(LARK_G, " 7 ");
    REJECTS(LARK_G, "1 2");
    REJECTS(LARK_G, "1 + + 2");
    CHECK(lark("start: ESCAPED_STRING \"\\t\\x41\\u00e9\"\n%import common.ESCAPED_STRING\n",
               &err) == SNUG_OK);
    ACCEPTS(LARK_G, "\"a\\\"b\"\tA\xc3\xa9");
    REJECTS(LARK_G, "\"a\"b\"\tA\xc3\xa9");
    /* errors name the construct, the line and the column */
    LARK_ERR("start: a\n", SNUG_ERR_FORMAT, "line 1, column 8: 'a' is not defined");
    LARK_ERR("x: \"a\"\n", SNUG_ERR_FORMAT, "no 'start' rule");
    LARK_ERR("start: \"a\"i\n", SNUG_ERR_UNSUPPORTED, "case-insensitive");
    LARK_ERR("start: /a/x\n", SNUG_ERR_UNSUPPORTED, "line 1, column 11: regular expression flags");
    LARK_ERR("start: /(?=a)/\n", SNUG_ERR_UNSUPPORTED, "look-around");
    LARK_ERR("start: x{a}\nx{t}: t\n", SNUG_ERR_UNSUPPORTED, "templates");
    LARK_ERR("start: \"a\"\n%declare X\n", SNUG_ERR_UNSUPPORTED, "line 2, column 1: the directive");
    LARK_ERR("start: \"a\"\n%import foo.X\n", SNUG_ERR_UNSUPPORTED, "'common' only");
    LARK_ERR("start: (\"a\"\n", SNUG_ERR_FORMAT, "unclosed '('");
    /* Lark allows left recursion, our matcher does not: refused with the rewrite to use */
    LARK_ERR("start: \"a\" | start \"b\"\n", SNUG_ERR_UNSUPPORTED, "may not be left-recursive");
    LARK_ERR("!start.2:start", SNUG_ERR_UNSUPPORTED, "left-recursive");
    LARK_ERR("start: \"a\"\nstart: \"b\"\n", SNUG_ERR_FORMAT,
             "line 2, column 1: 'start' is defined twice");
    LARK_ERR("start: \"\xf5rt\"\n", SNUG_ERR_FORMAT, "line 1, column 9: malformed UTF-8");
    LARK_ERR("start: /a\xed\xa0\x80/\n", SNUG_ERR_UNSUPPORTED, "malformed UTF-8");
    /* regex tool formats match the whole input */
    char *out = NULL;
    CHECK(snug_tool_format_to_gbnf("regex", "[a-z]+@[a-z]+\\.com", 18, NULL, &out, NULL, &err) ==
          SNUG_OK);
    if (out) {
        ACCEPTS(out, "bob@example.com");
        REJECTS(out, "x bob@example.com");
        REJECTS(out, "bob@example.org");
    }
    snug_free(out);
    out = NULL;
    /* an unbounded repetition of a group that can match nothing is refused by name (the
     * grammar engine rejects it; fuzz_grammar_lark found "5()+|%" converting to one), a
     * bounded one and a repetition of a non-empty group still convert */
    CHECK(snug_tool_format_to_gbnf("regex", "5()+|%", 6, NULL, &out, NULL, &err) != SNUG_OK &&
          !out && strstr(err.msg, "repetition of a group that can match nothing"));
    CHECK(snug_tool_format_to_gbnf("regex", "(a|b?)*c", 8, NULL, &out, NULL, &err) != SNUG_OK &&
          !out);
    CHECK(snug_tool_format_to_gbnf("regex", "(a*b)*(c?){2,3}", 15, NULL, &out, NULL, &err) ==
          SNUG_OK);
    if (out) {
        ACCEPTS(out, "aabbc");
        ACCEPTS(out, "");
        REJECTS(out, "ca");
    }
    snug_free(out);
    out = NULL;
    CHECK(snug_tool_format_to_gbnf("ebnf", "x", 1, NULL, &out, NULL, &err) == SNUG_ERR_UNSUPPORTED);
    CHECK(strstr(err.msg, "'ebnf'") != NULL);
    /* embedded with a prefix: every name carries it */
    CHECK(snug_lark_to_gbnf(APPLY_PATCH_LARK, strlen(APPLY_PATCH_LARK), "ct3-", &out, NULL, &err) ==
          SNUG_OK);
    if (out) {
        CHECK(strstr(out, "ct3--root ::=") != NULL);
        CHECK(strstr(out, "\nroot ::=") == NULL);
    }
    snug_free(out);
}

/* ---- the grammar memo: warm matchers across requests ----------------------------------- */

/* Walk `steps` random allowed tokens with matcher m (seeded), hashing every mask on the way
 * into *sig; the tokens taken go to ids (the walk stops when complete or nothing is allowed). */
static int memo_walk(struct snug_matcher *m, int steps, uint64_t seed, snug_token *ids,
                     uint64_t *sig) {
    int32_t V = snug_tokenizer_n_vocab(TOK), words = (V + 63) / 64, n = 0;
    uint64_t h = 1469598103934665603ull;
    struct snug_err err = {0};
    for (int step = 0; step < steps; step++) {
        const uint64_t *mask = snug_matcher_mask(m);
        int32_t na = 0;
        for (int32_t w = 0; w < words; w++) {
            h = (h ^ mask[w]) * 1099511628211ull;
            na += __builtin_popcountll(mask[w]);
        }
        if (!na || snug_matcher_is_complete(m)) break;
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        int32_t k = (int32_t)((seed >> 8) % (uint64_t)na);
        snug_token pick = -1;
        for (snug_token id = 0; id < V && pick < 0; id++)
            if ((mask[id >> 6] >> (id & 63)) & 1 && k-- == 0) pick = id;
        if (pick == EOS) break;
        CHECK(snug_matcher_accept(m, pick, &err) == SNUG_OK);
        ids[n++] = pick;
    }
    *sig = h;
    return n;
}

static void test_memo(void) {
    struct snug_err err = {0};
    struct snug_grammar_memo *memo = NULL;
    CHECK(snug_grammar_memo_init(&memo, TRIE, 2, 2, &err) == SNUG_OK);
    if (!memo) return;
    char *json = NULL;
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},"
                         "\"b\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}}}";
    CHECK(snug_json_schema_to_gbnf(schema, strlen(schema), &json, NULL, &err) == SNUG_OK);
    const char *texts[3] = {json, "root ::= [a-c]+ \"!\"", "root ::= \"x\" | \"y\" [0-9]*"};
    snug_token end = EOS;
    /* a cold walk per grammar with its own fresh matcher: the reference signatures */
    uint64_t ref[3][3];
    snug_token ids[64];
    for (int i = 0; i < 3; i++) {
        struct snug_grammar *g = NULL;
        struct snug_matcher *m = NULL;
        CHECK(snug_grammar_parse(&g, texts[i], strlen(texts[i]), NULL, NULL, &err) == SNUG_OK);
        CHECK(g && snug_matcher_init(&m, g, TRIE, &end, 1, NULL, &err) == SNUG_OK);
        for (uint64_t seed = 0; m && seed < 3; seed++) {
            snug_matcher_reset(m);
            memo_walk(m, 40, 0x9E3779B97F4A7C15ull * (seed + 1), ids, &ref[i][seed]);
        }
        snug_matcher_free(m);
        snug_grammar_free(g);
    }
    /* through the memo: the same masks, whether the matcher is fresh or warm */
    struct snug_grammar_memo_stats st;
    for (int round = 0; round < 2; round++)
        for (uint64_t seed = 0; seed < 3; seed++) {
            struct snug_matcher *m = NULL;
            struct snug_grammar_memo_entry *e = NULL;
            CHECK(snug_grammar_memo_acquire(memo, texts[0], strlen(texts[0]), NULL, &end, 1, &m, &e,
                                            &err) == SNUG_OK);
            uint64_t sig = 0;
            if (m) memo_walk(m, 40, 0x9E3779B97F4A7C15ull * (seed + 1), ids, &sig);
            CHECKF(sig == ref[0][seed], "memo round %d seed %d: masks differ from a fresh matcher",
                   round, (int)seed);
            snug_grammar_memo_release(memo, e, m);
        }
    snug_grammar_memo_stats(memo, &st);
    CHECKF(st.compiles == 1 && st.hits == 5 && st.grammars == 1 && st.idle == 1,
           "compiles %lld hits %lld grammars %d idle %d", (long long)st.compiles,
           (long long)st.hits, st.grammars, st.idle);
    /* two requests at once: the second gets its own matcher (no warm one is shared) */
    struct snug_matcher *m1 = NULL, *m2 = NULL;
    struct snug_grammar_memo_entry *e1 = NULL, *e2 = NULL;
    CHECK(snug_grammar_memo_acquire(memo, texts[0], strlen(texts[0]), NULL, &end, 1, &m1, &e1,
                                    &err) == SNUG_OK);
    CHECK(snug_grammar_memo_acquire(memo, texts[0], strlen(texts[0]), NULL, &end, 1, &m2, &e2,
                                    &err) == SNUG_OK);
    CHECK(m1 && m2 && m1 != m2 && e1 == e2);
    /* the other end token is another key; a third grammar evicts the least recently used idle
     * entry, never one in use (entry 0 is busy) */
    struct snug_matcher *m3 = NULL, *m4 = NULL;
    struct snug_grammar_memo_entry *e3 = NULL, *e4 = NULL;
    CHECK(snug_grammar_memo_acquire(memo, texts[1], strlen(texts[1]), NULL, &end, 1, &m3, &e3,
                                    &err) == SNUG_OK);
    snug_grammar_memo_release(memo, e3, m3);
    CHECK(snug_grammar_memo_acquire(memo, texts[2], strlen(texts[2]), NULL, &end, 1, &m4, &e4,
                                    &err) == SNUG_OK);
    uint64_t sig = 0;
    if (m4) memo_walk(m4, 40, 0x9E3779B97F4A7C15ull, ids, &sig);
    CHECK(sig == ref[2][0]);
    snug_grammar_memo_release(memo, e4, m4);
    snug_grammar_memo_release(memo, e1, m1);
    snug_grammar_memo_release(memo, e2, m2);
    snug_grammar_memo_stats(memo, &st);
    CHECKF(st.grammars == 2 && st.compiles == 3 && st.idle <= 2,
           "grammars %d compiles %lld idle %d", st.grammars, (long long)st.compiles, st.idle);
    /* entry 0 survived (it was in use): a warm hit */
    int64_t hits = st.hits;
    CHECK(snug_grammar_memo_acquire(memo, texts[0], strlen(texts[0]), NULL, &end, 1, &m1, &e1,
                                    &err) == SNUG_OK);
    snug_grammar_memo_release(memo, e1, m1);
    snug_grammar_memo_stats(memo, &st);
    CHECK(st.hits == hits + 1 && st.compiles == 3);
    /* a bad grammar: the parser's error, nothing remembered */
    CHECK(snug_grammar_memo_acquire(memo, "root ::= x", 10, NULL, &end, 1, &m1, &e1, &err) ==
          SNUG_ERR_FORMAT);
    CHECK(m1 == NULL && e1 == NULL && strstr(err.msg, "line 1"));
    snug_grammar_memo_stats(memo, &st);
    CHECK(st.compiles == 3);
    snug_grammar_memo_free(memo);
    snug_free(json);
}

/* ---- the real vocabulary ------------------------------------------------------------------- */

/* Along a random walk through one grammar (random allowed tokens, every third pick the
 * shortest completion's first token), the mask equals a brute-force allows() of every token
 * of the vocabulary at each of the first `steps` states. */
static void check_random_walk(const struct snug_tokenizer *tok, const struct snug_vocab_trie *trie,
                              const char *gbnf, const char *name, int steps, uint64_t seed) {
    struct snug_err err = {0};
    struct snug_grammar *g = NULL;
    if (snug_grammar_parse(&g, gbnf, strlen(gbnf), NULL, NULL, &err) != SNUG_OK) {
        CHECKF(0, "%s: %s", name, err.msg);
        return;
    }
    snug_token end = snug_tokenizer_im_end(tok);
    struct snug_matcher *m = NULL;
    CHECK(snug_matcher_init(&m, g, trie, &end, 1, NULL, &err) == SNUG_OK);
    int32_t V = snug_tokenizer_n_vocab(tok);
    uint64_t *copy = snug_malloc((size_t)(V + 63) / 64 * 8);
    snug_token *allowed = snug_malloc((size_t)V * sizeof *allowed);
    for (int step = 0; m && copy && allowed && step < steps; step++) {
        memcpy(copy, snug_matcher_mask(m), (size_t)(V + 63) / 64 * 8);
        int diff = 0, na = 0;
        for (snug_token id = 0; id < V; id++) {
            bool a = (copy[id >> 6] >> (id & 63)) & 1;
            if (a) allowed[na++] = id;
            if (a != snug_matcher_allows(m, id)) diff++;
        }
        CHECKF(diff == 0, "%s step %d: %d tokens differ between mask and allows", name, step, diff);
        int mx = 0;
        for (int k = 0; k < na; k++) {
            int a = snug_matcher_completion_after(m, allowed[k]);
            if (a > mx) mx = a;
        }
        CHECKF(snug_matcher_max_completion_after(m) == mx, "%s step %d: max completion %d, want %d",
               name, step, snug_matcher_max_completion_after(m), mx);
        if (snug_matcher_is_complete(m) || !na) break;
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        snug_token pick = -1;
        uint8_t done[256];
        if (seed % 3 == 0) {
            int n = snug_matcher_shortest_completion(m, done, 256);
            if (n > 0) pick = snug_vocab_trie_longest_prefix(trie, done, n);
        }
        if (pick < 0) pick = allowed[(seed >> 8) % (uint64_t)na];
        CHECK(snug_matcher_accept(m, pick, &err) == SNUG_OK);
    }
    snug_free(allowed);
    snug_free(copy);
    snug_matcher_free(m);
    snug_grammar_free(g);
}

/* Masks on the real vocabulary equal the brute-force check over the schema corpus (free and
 * length-bounded strings, formats, patterns, enums, numbers) and over GBNF strings whose
 * characters do not all behave alike (a class leaving out some non-ASCII characters). */
struct walk_ctx {
    const struct snug_tokenizer *tok;
    const struct snug_vocab_trie *trie;
    uint64_t seed;
};

static void corpus_walk(const char *name, const char *gbnf, void *user) {
    struct walk_ctx *w = user;
    check_random_walk(w->tok, w->trie, gbnf, name, 16, w->seed += 0x9E3779B97F4A7C15ull);
}

static void test_qwen_corpus_masks(const struct snug_tokenizer *tok,
                                   const struct snug_vocab_trie *trie) {
    static const char *const gbnf[] = {
        "root ::= \"\\\"\" [^\"\\\\\\x00-\\x1F\\u00e9\\u4e00-\\u4fff]* \"\\\"\"",
        "root ::= \"<\" [^<]{2,40} \"<\"",
        "root ::= ([a-z]{1,3} [ ]?)+ \".\"",
        "root ::= \"x\" .{0,5} \"y\" | [^\\x00-\\x7F]* \"z\"",
    };
    for (size_t i = 0; i < sizeof gbnf / sizeof gbnf[0]; i++)
        for (uint64_t seed = 1; seed <= 3; seed++)
            check_random_walk(tok, trie, gbnf[i], gbnf[i], 12, seed * 0x9E3779B97F4A7C15ull);
    struct walk_ctx w = {tok, trie, 0x2545F4914F6CDD1Dull};
    for_each_corpus_grammar(corpus_walk, &w);
}

static void test_qwen_vocab(const char *fx) {
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/tokenizer/ggml-vocab-qwen35.gguf", fx);
    struct snug_gguf *gg = NULL;
    struct snug_err err = {0};
    if (snug_gguf_open(&gg, path, &err) != SNUG_OK) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    struct snug_tokenizer *tok = NULL;
    CHECK(snug_tokenizer_load(&tok, gg, &err) == SNUG_OK);
    snug_gguf_close(gg);
    if (!tok) return;
    struct snug_vocab_trie *trie = NULL;
    CHECK(snug_vocab_trie_build(&trie, tok, &err) == SNUG_OK);
    char *gbnf = NULL;
    const char *schema = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
                         "\"days\":{\"type\":\"integer\"}},\"required\":[\"city\",\"days\"]}";
    CHECK(snug_json_schema_to_gbnf(schema, strlen(schema), &gbnf, NULL, &err) == SNUG_OK);
    struct snug_grammar *g = NULL;
    CHECK(snug_grammar_parse(&g, gbnf, strlen(gbnf), NULL, NULL, &err) == SNUG_OK);
    snug_token end = snug_tokenizer_im_end(tok);
    struct snug_matcher *m = NULL;
    CHECK(snug_matcher_init(&m, g, trie, &end, 1, NULL, &err) == SNUG_OK);
    if (m) {
        const char *text = "{\"city\": \"Zürich, 東京\", \"days\": 12}";
        snug_token ids[64];
        size_t n = 0;
        CHECK(snug_tokenizer_encode(tok, text, strlen(text), false, ids, 64, &n, &err) == SNUG_OK);
        int32_t V = snug_tokenizer_n_vocab(tok);
        uint64_t *copy = snug_malloc((size_t)(V + 63) / 64 * 8);
        for (size_t i = 0; i <= n; i++) {
            memcpy(copy, snug_matcher_mask(m), (size_t)(V + 63) / 64 * 8);
            int diff = 0, allowed = 0;
            for (snug_token id = 0; id < V; id++) {
                bool a = (copy[id >> 6] >> (id & 63)) & 1;
                allowed += a;
                if (a != snug_matcher_allows(m, id)) diff++;
            }
            CHECKF(diff == 0, "token %zu: %d differ", i, diff);
            if (i == n) {
                CHECK(allowed == 1 && snug_matcher_allows(m, end));
                break;
            }
            CHECKF((copy[ids[i] >> 6] >> (ids[i] & 63)) & 1, "token %zu (id %d) masked out", i,
                   ids[i]);
            CHECK(snug_matcher_accept(m, ids[i], &err) == SNUG_OK);
        }
        snug_free(copy);
    }
    snug_matcher_free(m);
    snug_grammar_free(g);
    snug_free(gbnf);
    test_qwen_corpus_masks(tok, trie);
    snug_vocab_trie_free(trie);
    snug_tokenizer_free(tok);
}

int main(void) {
    TOK = small_tokenizer();
    if (!TOK) return TEST_DONE();
    EOS = snug_tokenizer_eos(TOK);
    struct snug_err err = {0};
    CHECK(snug_vocab_trie_build(&TRIE, TOK, &err) == SNUG_OK);
    test_parse_errors();
    test_language();
    test_utf8_classes();
    test_masks();
    test_schema();
    test_schema_integers();
    test_schema_decimals();
    test_schema_keywords();
    test_tool_param_names();
    test_schema_corpus();
    test_lark();
    test_memo();
    const char *fx = test_fixtures_dir();
    if (fx) test_qwen_vocab(fx);
    snug_vocab_trie_free(TRIE);
    snug_tokenizer_free(TOK);
    return TEST_DONE();
}
