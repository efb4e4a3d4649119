/* test_server_marks.c — the prefix cache's server pieces: agent-client normalisation
 * (normalize.c: the Claude Code billing line removed from system messages, string or text
 * parts, nothing else touched; two requests differing only in cch render the same prompt;
 * with it off they differ) and the message marks (chat.c + prompt_marks.c: on the real
 * Qwen3.5 vocabulary, segment-wise ids equal whole-prompt ids, every mark is the position of
 * an <|im_start|> token, system_end / last_end land on the system turn's end and the
 * generation prompt). */
#include "gguf/gguf.h"
#include "server/chat.h"
#include "server/normalize.h"
#include "server/prompt_marks.h"
#include "test.h"

#include "core/core.h"

static const char *BILL = "x-anthropic-billing-header: cc_version=2.1.117.48f; "
                          "cc_entrypoint=cli; cch=%s;\n";

static json_t *agent_messages(const char *cch, bool parts) {
    char sys[512];
    snprintf(sys, sizeof sys, BILL, cch);
    strcat(sys, "You are an agent. Use tools.");
    json_t *content = parts ? json_pack("[{s:s,s:s},{s:s,s:s}]", "type", "text", "text", sys,
                                        "type", "text", "text", "Second block.")
                            : json_string(sys);
    return json_pack(
        "[{s:s,s:o},{s:s,s:s},{s:s,s:s,s:s,s:[{s:s,s:s,s:{s:s,s:s}}]},{s:s,s:s,s:s},{s:s,s:s}]",
        "role", "system", "content", content, "role", "user", "content",
        "List files. x-anthropic-billing-header: stays here", "role", "assistant", "content", "",
        "reasoning_content", "I should list.", "tool_calls", "id", "c1", "type", "function",
        "function", "name", "ls", "arguments", "{\"path\": \".\"}", "role", "tool", "tool_call_id",
        "c1", "content", "a.txt\nb.txt", "role", "user", "content", "Now read a.txt");
}

static char *render(json_t *msgs, struct snug_chat_marks *mk, size_t *len) {
    struct snug_chat_opts co = snug_chat_default_opts(true);
    char *text = NULL;
    struct snug_err err = {0};
    json_t *tools = json_pack("[{s:s,s:{s:s,s:{s:s}}}]", "type", "function", "function", "name",
                              "ls", "parameters", "type", "object");
    int rc = snug_chat_render_marks(msgs, tools, &co, &text, len, mk, &err);
    json_decref(tools);
    if (rc) fprintf(stderr, "render: %s\n", err.msg);
    return text;
}

static void test_normalize(void) {
    char t1[] = "x-anthropic-billing-header: a; cch=1;\nkeep\n  x-anthropic-billing-header: no\n"
                "x-anthropic-billing-header: last";
    int removed = 0;
    size_t n = snug_norm_text(t1, strlen(t1), &removed);
    CHECK(removed == 2);
    CHECK(n == strlen("keep\n  x-anthropic-billing-header: no\n") &&
          !memcmp(t1, "keep\n  x-anthropic-billing-header: no\n", n));
    for (int parts = 0; parts < 2; parts++) {
        json_t *a = agent_messages("36ee5", parts), *b = agent_messages("0aaa9", parts);
        size_t la, lb;
        char *ra = render(a, NULL, &la), *rb = render(b, NULL, &lb);
        CHECK(ra && rb && (la != lb || memcmp(ra, rb, la))); /* off: they differ */
        snug_free(ra);
        snug_free(rb);
        CHECK(snug_prompt_normalize(a) == 1 && snug_prompt_normalize(b) == 1);
        ra = render(a, NULL, &la);
        rb = render(b, NULL, &lb);
        CHECK(ra && rb && la == lb && !memcmp(ra, rb, la));
        CHECK(ra && !strstr(ra, "cch="));
        CHECK(ra && strstr(ra, "You are an agent. Use tools.") != NULL);
        /* the user's text is never touched */
        CHECK(ra && strstr(ra, "List files. x-anthropic-billing-header: stays here") != NULL);
        CHECK(snug_prompt_normalize(a) == 0); /* idempotent */
        snug_free(ra);
        snug_free(rb);
        json_decref(a);
        json_decref(b);
    }
    CHECK(snug_prompt_normalize(NULL) == 0);
}

static void test_marks(void) {
    const char *fx = test_fixtures_dir();
    if (!fx) return;
    char path[4200];
    snprintf(path, sizeof path, "%.4096s/tokenizer/ggml-vocab-qwen35.gguf", fx);
    struct snug_err err = {0};
    struct snug_gguf *g = NULL;
    struct snug_tokenizer *tok = NULL;
    CHECK(snug_gguf_open(&g, path, &err) == SNUG_OK);
    if (!g) return;
    CHECK(snug_tokenizer_load(&tok, g, &err) == SNUG_OK);
    if (!tok) {
        snug_gguf_close(g);
        return;
    }
    json_t *msgs = agent_messages("36ee5", false);
    snug_prompt_normalize(msgs);
    size_t starts[16];
    struct snug_chat_marks mk = {.starts = starts, .cap = 16};
    size_t len;
    char *text = render(msgs, &mk, &len);
    CHECK(text != NULL);
    CHECK(mk.n == 5); /* user, assistant, tool (one user turn), user, the generation prompt */
    static snug_token whole[4096], seg[4096];
    size_t nw = 0, ns = 0;
    CHECK(snug_tokenizer_encode(tok, text, len, true, whole, 4096, &nw, &err) == SNUG_OK);
    int32_t tstarts[16];
    struct snug_prompt_marks pm = {.starts = tstarts, .cap = 16};
    CHECK(snug_prompt_encode_marked(tok, text, len, &mk, seg, 4096, &ns, &pm, &err) == SNUG_OK);
    CHECK(ns == nw && !memcmp(whole, seg, nw * sizeof *seg));
    snug_token im_start = snug_tokenizer_token_id(tok, "<|im_start|>");
    CHECK(pm.n == (int32_t)mk.n);
    for (int32_t k = 0; k < pm.n && k < 16; k++) CHECK(seg[tstarts[k]] == im_start);
    CHECK(pm.system_end == tstarts[0]);
    CHECK(pm.last_end == tstarts[pm.n - 1] && pm.last_end > 0);
    CHECK(!strncmp(text + mk.last_end, "<|im_start|>assistant\n<think>\n", 30));
    /* too small a buffer: the count needed */
    CHECK(snug_prompt_encode_marked(tok, text, len, &mk, seg, 10, &ns, &pm, &err) ==
          SNUG_ERR_BUDGET);
    CHECK(ns == nw);
    snug_free(text);
    json_decref(msgs);
    snug_tokenizer_free(tok);
    snug_gguf_close(g);
}

int main(void) {
    test_normalize();
    test_marks();
    return TEST_DONE();
}
