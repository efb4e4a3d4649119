/* test_vision_spec.c — speculative decoding after an image is lossless, on the trained fixture
 * (it has a trained MTP block; the image is a grid of made-up projector rows, which is all the
 * context sees of an image): a prompt with a 3 x 5 image in the middle and text after it
 * (rope_delta = 5 - 15 = -10 during every later step), then greedy decoding.
 *  1. the image rows matter: greedy output without them (the pad ids' own embeddings) differs;
 *  2. speculative greedy (3 drafts; rollback by snapshots and by recomputation; prompt chunks of
 *     64 and of 7, which cut the image so the MTP step at a chunk start takes an image row)
 *     equals plain greedy token for token, accepts drafts, and its steps allocate nothing.
 * `test_vision_spec cuda` runs every context with backend 1 (`--backend cuda`): on a GPU the
 * real CUDA backend (tests/device/run_vision_device.sh runs it; set SNUG_FIXTURES and, unless
 * libsnug_cuda.so is next to the binary, SNUG_CUDA_LIB), in CPU CI the stand-in
 * libsnug_fakedev.so (ctest `test_vision_spec_fakedev`), whose device paths upload the image
 * rows and 3-D positions into the MTP step's input (src/arch/qwen35_mtp.c). Greedy equality
 * cannot see the MTP block's inputs (they only move the acceptance), so a device run also
 * prints the CPU's draft statistics next to its own, and `cuda exact` (the stand-in: the CPU's
 * ops, so the same numbers) requires them equal: a wrong image row or 3-D position in the MTP
 * step on the device paths changes which drafts are accepted.
 * Read next: src/model/context.c (mm_fill, step_forward, snug_ctx_truncate),
 * docs/spec-decode.md "Images". */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function" /* the shared header's other helpers */
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation" /* paths are checked by the open */
#endif
#include "test_spec_common.h"

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
static float *EMBD;     /* [ROWS * COLS][H] */
static int32_t BACKEND; /* 0 = CPU, 1 = CUDA (argv[1] "cuda") */
static bool EXACT;      /* argv[2] "exact": a device run's draft statistics = the CPU's */

static struct snug_ctx *mk_ctx(int32_t n_draft, int32_t n_chunk) {
    struct snug_err err = {0};
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = NP + NGEN + 16;
    cp.n_chunk = n_chunk;
    cp.kv_type = SNUG_KV_F32;
    cp.n_draft = n_draft;
    cp.backend = BACKEND;
    struct snug_ctx *c = NULL;
    int rc = snug_ctx_init(&c, M, &cp, &err);
    CHECKF(rc == SNUG_OK, "ctx init (backend %s): %s", BACKEND ? "cuda" : "cpu", err.msg);
    if (rc != SNUG_OK) exit(TEST_DONE()); /* (nothing to run on) */
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
    uint64_t allocs = 0;
    if (rc == SNUG_OK) rc = fx_spec_greedy(c, s, hist, NP, cap, NGEN, lg, V, &allocs, &err);
    CHECKF(rc == SNUG_OK, "spec decode: %s", err.msg);
    CHECKF(allocs == 0, "speculative steps allocated %llu times", (unsigned long long)allocs);
    memcpy(out, hist + NP, (size_t)NGEN * 4);
    struct snug_spec_stats st;
    snug_ctx_spec_stats(c, &st);
    free(lg);
    free(hist);
    snug_sampler_free(s);
    snug_ctx_free(c);
    return st;
}

/* After the prompt with the image (chunks of n_chunk), 3 drafts from the MTP block: their ids
 * into drafts, the last draft step's logits into lg. The MTP cache then holds the prompt's rows,
 * the image's (its rows as input, its 3-D positions) among them, which every draft attends to. */
static void draft_after_image(const int32_t *ids, int32_t n_chunk, int32_t *drafts, float *lg) {
    struct snug_err err = {0};
    struct snug_ctx *c = mk_ctx(3, n_chunk);
    snug_ctx_spec(c)->keep_draft_logits = true;
    int rc = eval_prompt(c, ids, true, lg, &err);
    int32_t nd = 0;
    if (rc == SNUG_OK) rc = snug_ctx_draft(c, (int32_t)fx_argmax(lg, V), 3, drafts, &nd, &err);
    CHECKF(rc == SNUG_OK && nd == 3, "3 drafts after the image: %s", err.msg);
    memcpy(lg, snug_ctx_spec(c)->logits, (size_t)V * 4);
    snug_ctx_free(c);
}

int main(int argc, char **argv) {
    BACKEND = argc > 1 && !strcmp(argv[1], "cuda");
    EXACT = argc > 2 && !strcmp(argv[2], "exact");
    if ((argc > 1 && !BACKEND && strcmp(argv[1], "cpu")) || (argc > 2 && !EXACT) || argc > 3) {
        fprintf(stderr, "usage: test_vision_spec [cpu|cuda [exact]]\n");
        return 2;
    }
    printf("backend %s\n", BACKEND ? "cuda" : "cpu");
    const char *dir = test_fixtures_dir();
    if (!dir) return TEST_DONE();
    if (!(M = fx_load_trained(dir))) return 1;
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
    if (!BACKEND || EXACT)
        CHECKF(memcmp(want, chunk7, sizeof want) == 0, "plain greedy: chunk 7 = chunk 64");
    else /* a GPU's prompt GEMMs may round otherwise per chunk: each chunk size its own ref */
        printf("plain greedy: chunk 7 %s chunk 64\n",
               memcmp(want, chunk7, sizeof want) ? "differs from" : "=");
    const int32_t chunks[] = {64, 7};
    if (BACKEND) /* the MTP block's image rows and 3-D positions on the device: its logits */
        for (int ci = 0; ci < 2; ci++) {
            float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
            int32_t da[3], db[3];
            draft_after_image(ppl, chunks[ci], da, a);
            BACKEND = 0;
            draft_after_image(ppl, chunks[ci], db, b);
            BACKEND = 1;
            double diff = 0;
            for (int32_t i = 0; i < V; i++) diff = fmax(diff, fabs((double)a[i] - b[i]));
            double kl = fx_compare(b, a, 1, V).max;
            printf("chunk %d: MTP drafts after the image %d %d %d (CPU %d %d %d), last draft "
                   "logits vs the CPU's: max |diff| %.3g, KL %.3g\n",
                   chunks[ci], da[0], da[1], da[2], db[0], db[1], db[2], diff, kl);
            if (EXACT)
                CHECKF(diff == 0 && !memcmp(da, db, sizeof da),
                       "chunk %d: the device paths' MTP drafts and logits after the image = "
                       "the CPU's (max diff %.3g)",
                       chunks[ci], diff);
            else /* a GPU rounds otherwise: one row, 10x run_mtp_device.sh's median bound (the
                  * stand-in without the image rows' upload gives KL 0.2) */
                CHECKF(kl <= 1e-3,
                       "chunk %d: the device's last MTP draft logits after the image: KL %.3g "
                       "to the CPU's (<= 1e-3)",
                       chunks[ci], kl);
            free(a);
            free(b);
        }
    for (int ci = 0; ci < 2; ci++)
        for (int rm = 0; rm < 2; rm++) {
            struct snug_spec_stats st = greedy_spec(ppl, chunks[ci], rm == 1, got);
            int32_t same = 0;
            const int32_t *ref = chunks[ci] == 7 ? chunk7 : want;
            while (same < NGEN && got[same] == ref[same]) same++;
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
            if (BACKEND) { /* the same on the CPU: the MTP block saw the same inputs? */
                BACKEND = 0;
                struct snug_spec_stats ref = greedy_spec(ppl, chunks[ci], rm == 1, got);
                BACKEND = 1;
                bool same_stats = ref.n_steps == st.n_steps && ref.n_drafted == st.n_drafted &&
                                  ref.n_accepted == st.n_accepted &&
                                  !memcmp(ref.accepted_at, st.accepted_at, sizeof ref.accepted_at);
                printf("  the CPU: %lld of %lld drafts accepted (%s)\n", (long long)ref.n_accepted,
                       (long long)ref.n_drafted,
                       same_stats ? "the same statistics" : "different statistics");
                if (EXACT)
                    CHECKF(same_stats,
                           "chunk %d, %s rollback: the device paths' draft statistics = the "
                           "CPU's (%lld of %lld vs %lld of %lld accepted)",
                           chunks[ci], rm ? "recompute" : "snapshot", (long long)st.n_accepted,
                           (long long)st.n_drafted, (long long)ref.n_accepted,
                           (long long)ref.n_drafted);
            }
        }
    free(EMBD);
    free(ppl);
    snug_model_free(M);
    return TEST_DONE();
}
