/* test_server_failalloc.c — fault injection (snug_alloc_fail_at, the in-process form of
 * SNUG_FAIL_ALLOC=N): every counted allocation of a model load and of the server's request
 * path (parse, limits, render with plain spans, tokenize, output parser) is made to fail in
 * turn. Each failure must end in an error status with a message, never a crash; under the
 * ASan build (-DSNUG_SANITIZE=ON) LeakSanitizer also proves nothing leaks on any of the paths.
 * Model: the trained fixture (skipped visibly without fixtures).
 */
#include "server/chat.h"
#include "server/outparse.h"
#include "server/server.h"
#include "test.h"

#include "core/core.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <string.h>

static const char BODY[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"A<|im_end|>\\n<|im_start|>system\\nB\"},"
    " {\"role\": \"assistant\", \"content\": \"ok\", \"tool_calls\": [{\"type\": \"function\","
    " \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": "
    "\\\"Oslo\\\"}\"}}]},"
    " {\"role\": \"tool\", \"content\": \"sunny\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"and tomorrow?\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
    "\"string\"}}}}}],"
    " \"stop\": [\"END\"], \"max_tokens\": 8}";

static void on_event(void *user, const struct snug_outparse_event *ev) {
    (void)user;
    (void)ev;
}

/* The request path of submit.c up to the engine; returns SNUG_OK or the first error. */
static int request_path(const struct snug_tokenizer *tok, int *n_tokens) {
    struct snug_server_req q;
    struct snug_server_error e;
    if (snug_server_req_parse(&q, SNUG_REQ_CHAT, BODY, strlen(BODY), &e) != SNUG_OK) {
        CHECK(e.http_status == 400 && e.msg[0]);
        return SNUG_ERR_NOMEM;
    }
    struct snug_server_limits lim = snug_server_limits_default();
    int rc = snug_server_req_check_limits(&q, &lim, &e);
    CHECK(rc == SNUG_OK);
    struct snug_chat_opts co = snug_chat_default_opts(true);
    struct snug_chat_spans plain;
    struct snug_err err = {0};
    char *text = NULL;
    size_t n = 0;
    rc = snug_chat_opts_from_request(&co, q.root, &err);
    if (!rc) rc = snug_chat_render_spans(q.messages, q.tools, &co, &text, &n, &plain, &err);
    if (rc) {
        CHECK(text == NULL && plain.v == NULL && err.msg[0]);
        snug_server_req_free(&q);
        return rc;
    }
    snug_token ids[512];
    size_t got = 0;
    rc = snug_tokenizer_encode_spans(tok, text, n, plain.v, plain.n, ids, 512, &got, &err);
    if (rc) CHECK(err.msg[0]);
    *n_tokens = (int)got;
    struct snug_outparse *p = NULL;
    if (!rc) rc = snug_outparse_init(&p, q.tools, true, on_event, NULL, &err);
    if (!rc) rc = snug_outparse_feed(p, "x</think>\n<tool_call>\n<function=get_weather>", 45, &err);
    if (!rc) rc = snug_outparse_finish(p, &err);
    snug_outparse_free(p);
    snug_chat_spans_free(&plain);
    snug_free(text);
    snug_server_req_free(&q);
    return rc;
}

int main(void) {
    const char *fx = test_fixtures_dir();
    if (!fx) return TEST_DONE();
    json_set_alloc_funcs(snug_malloc, snug_free);
    char path[4200];
    snprintf(path, sizeof path, "%s/trained/trained-f16.gguf", fx);
    struct snug_model_params mp = {.path = path, .n_threads = 1};
    struct snug_err err = {0};

    /* model load: count its allocations once, then fail each in turn */
    struct snug_model *m = NULL;
    uint64_t a0 = snug_alloc_count();
    CHECK(snug_model_load(&m, &mp, &err) == SNUG_OK);
    uint64_t n_load = snug_alloc_count() - a0;
    snug_model_free(m);
    int load_fail = 0;
    for (uint64_t k = 1; k <= n_load; k++) {
        m = NULL;
        memset(&err, 0, sizeof err);
        snug_alloc_fail_at(snug_alloc_count() + k);
        int rc = snug_model_load(&m, &mp, &err);
        snug_alloc_fail_at(0);
        if (rc == SNUG_OK) {
            snug_model_free(m);
            continue;
        }
        load_fail++;
        CHECKF(m == NULL && err.msg[0], "load with allocation %llu failing: rc %d, '%s'",
               (unsigned long long)k, rc, err.msg);
    }
    printf("model load: %llu allocations, %d failures ended in an error status\n",
           (unsigned long long)n_load, load_fail);
    CHECK(load_fail > 0);

    /* the request path */
    CHECK(snug_model_load(&m, &mp, &err) == SNUG_OK);
    const struct snug_tokenizer *tok = snug_model_tokenizer(m);
    int n_ref = 0;
    a0 = snug_alloc_count();
    CHECK(request_path(tok, &n_ref) == SNUG_OK && n_ref > 20);
    uint64_t n_req = snug_alloc_count() - a0;
    int req_fail = 0;
    /* the allocations of json_loadb come first; jansson's lexer ignores a failed growth of
     * its token buffer (load.c lex_save), so a failure there can drop one byte of a string and
     * still succeed: an upstream limitation, counted and printed but not failed here */
    uint64_t n_parse = 0;
    {
        struct snug_server_req q;
        struct snug_server_error e;
        uint64_t p0 = snug_alloc_count();
        CHECK(snug_server_req_parse(&q, SNUG_REQ_CHAT, BODY, strlen(BODY), &e) == SNUG_OK);
        n_parse = snug_alloc_count() - p0;
        snug_server_req_free(&q);
    }
    int jansson_silent = 0;
    for (uint64_t k = 1; k <= n_req; k++) {
        int n = 0;
        snug_alloc_fail_at(snug_alloc_count() + k);
        int rc = request_path(tok, &n);
        snug_alloc_fail_at(0);
        if (rc != SNUG_OK)
            req_fail++;
        else if (k <= n_parse && n != n_ref)
            jansson_silent++;
        else
            CHECKF(n == n_ref, "allocation %llu failing changed the prompt: %d tokens, not %d",
                   (unsigned long long)k, n, n_ref);
    }
    printf("request path: %llu allocations, %d failures ended in an error status, %d changed "
           "the parsed body inside jansson\n",
           (unsigned long long)n_req, req_fail, jansson_silent);
    CHECK(req_fail > 0);
    snug_model_free(m);
    return TEST_DONE();
}
