/* test_gen.c — generated models load and run: `snug gen`'s library side writes the demo and
 * demo-moe presets in several types; the model loader (an independent reader of every shape)
 * accepts them; a forward pass gives finite logits; a padded vocabulary keeps its real tokens;
 * invalid configurations are refused with a message. */
#include "core/core.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "test.h"
#include "tokenizer/tokenizer.h"
#include "tools/gen.h"

/* Write a preset, load it, evaluate a few tokens, return the GGUF tensor count (-1 on error). */
static int64_t gen_and_run(const char *preset, const char *type, const char *set) {
    struct snug_err err = {0};
    struct snug_gen_config c;
    CHECK(snug_gen_preset(&c, preset, &err) == SNUG_OK);
    if (set) CHECK(snug_gen_set(&c, set, &err) == SNUG_OK);
    char path[256];
    snprintf(path, sizeof path, "test_gen_%s_%s.gguf", preset, type);
    struct snug_gen_params p = {.out_path = path, .type = type, .seed = 3};
    int rc = snug_gen_write(&c, &p, &err);
    CHECKF(rc == SNUG_OK, "%s %s: %s", preset, type, err.msg);
    if (rc) return -1;

    struct snug_gguf *g;
    CHECK(snug_gguf_open(&g, path, &err) == SNUG_OK);
    int64_t n_t = snug_gguf_n_tensors(g);
    for (int64_t i = 0; i < n_t; i++) {
        const struct snug_gguf_tensor *t = snug_gguf_tensor(g, i);
        uint64_t rows = t->n_elems / t->ne[0];
        CHECKF(t->n_bytes == snug_dtype_row_bytes(t->type, t->ne[0]) * rows, "%s", t->name);
        if (t->n_dims == 1 || strstr(t->name, "ssm_conv1d") || !strcmp(type, "f32"))
            CHECKF(t->type == SNUG_DTYPE_F32, "%s %s should be f32", type, t->name);
        else if (!strcmp(type, "q8_0") && !strstr(t->name, "gate_inp"))
            CHECKF(t->type == SNUG_DTYPE_Q8_0, "%s should be q8_0", t->name);
    }
    snug_gguf_close(g);

    struct snug_model *m = NULL;
    struct snug_model_params mp = {.path = path, .n_threads = 2};
    rc = snug_model_load(&m, &mp, &err);
    CHECKF(rc == SNUG_OK, "load %s: %s", path, err.msg);
    if (rc) return -1;
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = 64;
    struct snug_ctx *ctx = NULL;
    CHECK(snug_ctx_init(&ctx, m, &cp, &err) == SNUG_OK);
    int32_t V = snug_model_n_vocab(m);
    float *logits = snug_malloc((size_t)V * 4 * sizeof(float));
    snug_token ids[4] = {72, 105, 33, 10};
    CHECK(snug_ctx_eval(ctx, ids, 4, logits, SNUG_EVAL_LOGITS_ALL, &err) == SNUG_OK);
    int finite = 1;
    double spread = 0;
    for (int64_t i = 0; i < (int64_t)V * 4; i++) {
        finite &= isfinite(logits[i]);
        spread += fabs(logits[i] - logits[0]);
    }
    CHECKF(finite && spread > 0, "%s %s: logits finite %d, spread %g", preset, type, finite,
           spread);
    snug_free(logits);
    snug_ctx_free(ctx);
    snug_model_free(m);
    remove(path);
    return n_t;
}

int main(void) {
    /* demo: 3 globals + 3 DeltaNet layers × 14 + attention 12 + MTP 16 = 71, like the fixture */
    CHECK(gen_and_run("demo", "f32", NULL) == 71);
    CHECK(gen_and_run("demo", "q8_0", NULL) == 71);
    CHECK(gen_and_run("demo", "q4_k_m", NULL) == 71);
    CHECK(gen_and_run("demo", "q4_0", "embedding_length=512") == 71);
    /* demo-moe: 3 + 3 × 19 + 16 = 76, like the MoE fixture */
    CHECK(gen_and_run("demo-moe", "q4_k_m", NULL) == 76);

    struct snug_err err = {0};
    struct snug_gen_config c;
    /* padding: 1000 tokens, the built-in 265 keep their ids, the rest are UNUSED */
    CHECK(snug_gen_preset(&c, "demo", &err) == SNUG_OK);
    CHECK(snug_gen_set(&c, "n_vocab=1000", &err) == SNUG_OK);
    struct snug_gen_params p = {.out_path = "test_gen_pad.gguf", .type = "q8_0", .seed = 1};
    CHECK(snug_gen_write(&c, &p, &err) == SNUG_OK);
    struct snug_gguf *g = NULL;
    CHECK(snug_gguf_open(&g, "test_gen_pad.gguf", &err) == SNUG_OK);
    if (g) {
        struct snug_tokenizer *tok = NULL;
        CHECK(snug_tokenizer_load(&tok, g, &err) == SNUG_OK);
        if (tok) {
            CHECK(snug_tokenizer_n_vocab(tok) == 1000);
            CHECK(snug_tokenizer_token_id(tok, "<|im_end|>") == 258);
            CHECK(snug_tokenizer_token_type(tok, 999) == SNUG_TOKEN_UNUSED);
            snug_tokenizer_free(tok);
        }
        const struct snug_gguf_tensor *t = snug_gguf_find_tensor(g, "token_embd.weight");
        CHECK(t && t->ne[1] == 1000);
        snug_gguf_close(g);
    }
    remove("test_gen_pad.gguf");

    /* refused configurations name the problem */
    CHECK(snug_gen_preset(&c, "nope", &err) == SNUG_ERR_INVALID && strstr(err.msg, "demo"));
    CHECK(snug_gen_preset(&c, "demo", &err) == SNUG_OK);
    CHECK(snug_gen_set(&c, "attention.head_count=3", &err) == SNUG_OK);
    CHECK(snug_gen_validate(&c, &err) == SNUG_ERR_INVALID && strstr(err.msg, "head_count"));
    CHECK(snug_gen_set(&c, "embedding_length=-5", &err) == SNUG_ERR_INVALID);
    CHECK(snug_gen_set(&c, "nokey=1", &err) == SNUG_ERR_INVALID && strstr(err.msg, "nokey"));
    CHECK(snug_gen_preset(&c, "demo", &err) == SNUG_OK);
    CHECK(snug_gen_set(&c, "n_vocab=100", &err) == SNUG_OK); /* fewer than 265 real tokens */
    p.out_path = "test_gen_small.gguf";
    CHECK(snug_gen_write(&c, &p, &err) == SNUG_ERR_INVALID && strstr(err.msg, "smaller"));
    p.type = "q9_z";
    CHECK(snug_gen_preset(&c, "demo", &err) == SNUG_OK);
    CHECK(snug_gen_write(&c, &p, &err) == SNUG_ERR_INVALID && strstr(err.msg, "q9_z"));
    return TEST_DONE();
}
