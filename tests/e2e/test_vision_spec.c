/* test_vision_spec.c — speculative decoding after an image is lossless, on the trained fixture
 * (it has a trained MTP block; the image is a grid of made-up projector rows, which is all the
 * context sees of an image): a prompt with a 3 x 5 image in the middle and text after it
 * (rope_delta = 5 - 15 = -10 during every later step), then greedy decoding.
 *  1. the image rows matter: greedy output without them (the pad ids' own embeddings) differs;
 *  2. speculative greedy (3 drafts; rollback by snapshots and by recomputation; prompt chunks of
 *     64 and of 7, which cut the image so the MTP step at a chunk start takes an image row)
 *     equals plain greedy token for token, accepts drafts, and its steps allocate nothing.
 * Read next: src/model/context.c (mm_fill, step_forward, snug_ctx_truncate),
 * docs/spec-decode.md "Images". */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function" /* the shared header's other helpers */
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation" /* paths are checked by the open */
#endif
#include "test_fixtures_common.h"

#include "model/model.h"
#include "sample/sample.h"
#include "speculative/speculative.h"

#define NP    40 /* prompt tokens */
#define FIRST 12 /* the image's first pad */
#define ROWS  3
#define COLS  5
#define NGEN  64

static struct snug_model *M;
static int32_t V, H;
static float *EMBD; /* [ROWS * COLS][H] */

static struct snug_ctx *mk_ctx(int32_t n_draft, int32_t n_chunk) {
    struct snug_err err = {0};
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = NP + NGEN + 16;
    cp.n_chunk = n_chunk;
    cp.kv_type = SNUG_KV_F32;
    cp.n_draft = n_draft;
    struct snug_ctx *c = NULL;
    int rc = snug_ctx_init(&c, M, &cp, &err);
    CHECKF(rc == SNUG_OK, "ctx init: %s", err.msg);
    return c;
}

/* The prompt with the image (or, image == false, its pads as plain tokens); logits of the last
 * row into lg. */
static int eval_prompt(struct snug_ctx *c, const int32_t *ids, bool image, float *lg,
                       struct snug_err *err) {
    struct snug_image_rows im = {FIRST, ROWS, COLS, EMBD};
    return snug_ctx_eval_images(c, ids, NP, image ? &im : NULL, image ? 1 : 0, lg,
                                SNUG_EVAL_LOGITS_LAST, err);
}

static void greedy_plain(const int32_t *ids, bool image, int32_t n_chunk, int32_t *out) {
    struct snug_err err = {0};
    struct snug_ctx *c = mk_ctx(0, n_chunk);
    float *lg = malloc((size_t)V * 4);
    int rc = eval_prompt(c, ids, image, lg, &err);
    for (int32_t i = 0; i < NGEN && rc == SNUG_OK; i++) {
        out[i] = (int32_t)fx_argmax(lg, V);
        if (i + 1 < NGEN) rc = snug_ctx_eval(c, &out[i], 1, lg, SNUG_EVAL_LOGITS_LAST, &err);
    }
    CHECKF(rc == SNUG_OK, "plain decode: %s", err.msg);
    free(lg);
    snug_ctx_free(c);
}

static struct snug_spec_stats greedy_spec(const int32_t *ids, int32_t n_chunk, bool recompute,
                                          int32_t *out) {
    struct snug_err err = {0};
    struct snug_ctx *c = mk_ctx(3, n_chunk);
    struct snug_sampler_params spp = snug_sampler_params_default();
    spp.temperature = 0.0f;
    struct snug_sampler *s = NULL;
    CHECKF(snug_sampler_init(&s, &spp, V, &err) == SNUG_OK, "sampler: %s", err.msg);
    snug_spec_set_rollback(c, recompute);
    int32_t cap = NP + NGEN + 8;
    int32_t *hist = malloc((size_t)cap * 4);
    memcpy(hist, ids, (size_t)NP * 4);
    float *lg = malloc((size_t)V * 4);
    int rc = eval_prompt(c, ids, true, lg, &err);
    CHECKF(rc == SNUG_OK, "spec prompt with an image: %s", err.msg);
    int32_t nh = NP;
    hist[nh++] = (int32_t)fx_argmax(lg, V);
    uint64_t allocs = snug_alloc_count();
    while (rc == SNUG_OK && nh - NP < NGEN) {
        int32_t nn = 0;
        rc = snug_spec_step(c, s, hist, nh, cap, &nn, &err);
        nh += nn;
    }
    CHECKF(rc == SNUG_OK, "spec decode: %s", err.msg);
    CHECKF(snug_alloc_count() == allocs, "speculative steps allocated %llu times",
           (unsigned long long)(snug_alloc_count() - allocs));
    memcpy(out, hist + NP, (size_t)NGEN * 4);
    struct snug_spec_stats st;
    snug_ctx_spec_stats(c, &st);
    free(lg);
    free(hist);
    snug_sampler_free(s);
    snug_ctx_free(c);
    return st;
}

int main(void) {
    const char *dir = test_fixtures_dir();
    if (!dir) return TEST_DONE();
    struct snug_err err = {0};
    struct snug_model_params mp = {.path = fx_path(dir, "trained", "trained-f16.gguf")};
    if (snug_model_load(&M, &mp, &err)) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        return 1;
    }
    V = snug_model_n_vocab(M);
    H = (int32_t)M->hp.n_embd;
    CHECK(snug_model_n_nextn(M) == 1);
    int32_t n = 0;
    int32_t *ppl = fx_read_ids(fx_path(dir, "trained", "ppl_ids.json"), &n);
    if (!ppl || n < NP) return TEST_DONE();
    /* the image's rows: a seeded pattern at an embedding's scale */
    EMBD = malloc((size_t)ROWS * COLS * H * 4);
    uint64_t x = 23;
    for (int64_t i = 0; i < (int64_t)ROWS * COLS * H; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        EMBD[i] = ((float)(x >> 40) / (float)(1 << 24) - 0.5f) * 0.1f;
    }
    int32_t want[NGEN], text_only[NGEN], got[NGEN];
    greedy_plain(ppl, true, 64, want);
    greedy_plain(ppl, false, 64, text_only);
    CHECKF(memcmp(want, text_only, sizeof want) != 0,
           "the image rows change the greedy output (else the test sees no image)");
    int32_t chunk7[NGEN];
    greedy_plain(ppl, true, 7, chunk7);
    CHECKF(memcmp(want, chunk7, sizeof want) == 0, "plain greedy: chunk 7 = chunk 64");
    const int32_t chunks[] = {64, 7};
    for (int ci = 0; ci < 2; ci++)
        for (int rm = 0; rm < 2; rm++) {
            struct snug_spec_stats st = greedy_spec(ppl, chunks[ci], rm == 1, got);
            int32_t same = 0;
            while (same < NGEN && got[same] == want[same]) same++;
            CHECKF(same == NGEN,
                   "chunk %d, %s rollback: speculative greedy after an image = plain greedy "
                   "(first difference at token %d)",
                   chunks[ci], rm ? "recompute" : "snapshot", same);
            CHECKF(st.n_accepted > 0 && st.n_accepted < st.n_drafted,
                   "chunk %d, %s rollback: drafts both accepted and rejected (%lld of %lld)",
                   chunks[ci], rm ? "recompute" : "snapshot", (long long)st.n_accepted,
                   (long long)st.n_drafted);
            printf("chunk %d, %s rollback: %lld of %lld drafts accepted, %.3f tokens per "
                   "verification\n",
                   chunks[ci], rm ? "recompute" : "snapshot", (long long)st.n_accepted,
                   (long long)st.n_drafted,
                   st.n_steps ? (double)st.n_emitted / (double)st.n_steps : 0.0);
        }
    free(EMBD);
    free(ppl);
    snug_model_free(M);
    return TEST_DONE();
}
