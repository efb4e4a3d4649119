/* test_server_think.c — bounded thinking (src/server/think.h) driven the way the engine drives
 * it (force before each pick, accept after), with the trained fixture's tokenizer: the budget
 * forces exactly the tokens of "\n</think>\n\n" after `budget` reasoning tokens and nothing after;
 * budget 0 closes at once; the model's own </think> ends it (nothing forced); the repetition
 * guard trips on the K-th occurrence of a span and not before; no budget and no guard means no
 * force hook (so speculation stays on); the N,K flag parser. */
#include "test.h"

#include "core/core.h"
#include "server/think.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <string.h>

/* One engine step: the forced token if any, else `next`; accepted. Returns the token emitted. */
static snug_token step(struct snug_think *t, snug_token next) {
    const struct snug_engine_constraint *c = snug_think_constraint(t);
    snug_token f = c->force ? c->force(c->user) : -1;
    snug_token id = f >= 0 ? f : next;
    c->accept(c->user, id);
    return id;
}

int main(void) {
    const char *fx = test_fixtures_dir();
    int32_t n = 0, k = 0;
    CHECK(snug_think_parse_guard("16,4", &n, &k) && n == 16 && k == 4);
    CHECK(!snug_think_parse_guard("16", &n, &k) && !snug_think_parse_guard("0,3", &n, &k) &&
          !snug_think_parse_guard("4,1", &n, &k) && !snug_think_parse_guard("4,3x", &n, &k));
    if (!fx) return TEST_DONE();
    char path[4200];
    snprintf(path, sizeof path, "%s/trained/trained-f16.gguf", fx);
    struct snug_model *m = NULL;
    struct snug_err err = {0};
    struct snug_model_params mp = {.path = path};
    if (snug_model_load(&m, &mp, &err) != SNUG_OK) {
        CHECKF(0, "load %s: %s", path, err.msg);
        return TEST_DONE();
    }
    const struct snug_tokenizer *tok = snug_model_tokenizer(m);
    snug_token close[8];
    size_t n_close = 0;
    CHECK(snug_tokenizer_encode(tok, "\n</think>\n\n", 11, true, close, 8, &n_close, &err) ==
          SNUG_OK);
    snug_token think_end = snug_tokenizer_token_id(tok, "</think>");
    snug_token word = 100, other = 101; /* ordinary tokens */

    /* budget 5: five reasoning tokens, then exactly the closing tokens, then nothing forced */
    struct snug_think t;
    struct snug_think_opts o = {.budget = 5};
    CHECK(snug_think_init(&t, tok, &o, true, 100, &err) == SNUG_OK);
    CHECK(snug_think_constraint(&t)->force != NULL);
    for (int i = 0; i < 5; i++) CHECK(step(&t, word) == word);
    for (size_t i = 0; i < n_close; i++) CHECKF(step(&t, word) == close[i], "close token %zu", i);
    for (int i = 0; i < 10; i++) CHECK(step(&t, other) == other);
    CHECK(t.end == SNUG_THINK_BUDGET && !strcmp(snug_think_end_name(&t), "budget"));
    CHECKF(t.n_reasoning == 6, "%d reasoning tokens (5 + the forced newline)", t.n_reasoning);
    snug_think_free(&t);

    /* budget 0: the first token is the close */
    o = (struct snug_think_opts){.budget = 0};
    CHECK(snug_think_init(&t, tok, &o, true, 100, &err) == SNUG_OK);
    CHECK(step(&t, word) == close[0]);
    snug_think_free(&t);

    /* the model closes first: nothing is forced, not reported as closed by the server */
    o = (struct snug_think_opts){.budget = 5};
    CHECK(snug_think_init(&t, tok, &o, true, 100, &err) == SNUG_OK);
    step(&t, word);
    CHECK(step(&t, think_end) == think_end);
    for (int i = 0; i < 10; i++) CHECK(step(&t, other) == other);
    CHECK(t.end == SNUG_THINK_MODEL && snug_think_end_name(&t) == NULL && t.n_reasoning == 1);
    snug_think_free(&t);

    /* not in reasoning (thinking off): never forces */
    CHECK(snug_think_init(&t, tok, &o, false, 100, &err) == SNUG_OK);
    CHECK(snug_think_constraint(&t)->force == NULL);
    snug_think_free(&t);
    /* no budget, no guard: accept only (speculation stays on) */
    o = (struct snug_think_opts){.budget = -1};
    CHECK(snug_think_init(&t, tok, &o, true, 100, &err) == SNUG_OK);
    CHECK(snug_think_constraint(&t)->force == NULL);
    snug_think_free(&t);

    /* repetition guard 2,3 on the loop a b c a b c a b ...: the span (a, b) occurs a third
     * time at token 8 (a b c a b c a b), so the 9th step is forced */
    o = (struct snug_think_opts){.budget = -1, .repeat_n = 2, .repeat_k = 3};
    CHECK(snug_think_init(&t, tok, &o, true, 100, &err) == SNUG_OK);
    snug_token loop[3] = {200, 201, 202};
    int i = 0;
    for (; i < 8; i++) CHECKF(step(&t, loop[i % 3]) == loop[i % 3], "loop token %d free", i);
    CHECK(step(&t, loop[i % 3]) == close[0] && t.end == SNUG_THINK_REPEAT);
    CHECK(!strcmp(snug_think_end_name(&t), "repetition"));
    snug_think_free(&t);
    /* distinct tokens never trip it */
    CHECK(snug_think_init(&t, tok, &o, true, 100, &err) == SNUG_OK);
    for (int j = 0; j < 60; j++) CHECK(step(&t, 300 + j) == 300 + j);
    CHECK(t.end == SNUG_THINK_OPEN);
    snug_think_free(&t);

    snug_model_free(m);
    return TEST_DONE();
}
