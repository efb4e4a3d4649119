/* test_batch_decode.c — snug_ctx_eval_batch (one decode token for each of n contexts in one
 * forward) against n separate snug_ctx_eval calls, on both fixture models (trained dense and
 * random MoE): the contexts sit at different positions (prompts of different lengths), decode
 * greedy continuations for several steps, and every batched logits row must equal the lone
 * decode's row bit for bit (each matmul output is the same kernel call for one row or a few:
 * f16, and Q8_0 / Q6_K / Q4_K_M copies of the trained model made with `snug quantize`).
 * The batched contexts are either separate contexts or the slots of one pool (src/engine/slots.h:
 * one backend instance, work arena and thread pool for all of them, as the server runs them).
 * Also: a step of more rows than ctxs[0]'s n_chunk (split into several forwards), the
 * one-by-one fallback (a context with a layer hook), zero allocations per batched step, and
 * the refusals (a repeated context, a full context) that change nothing.
 * Mixed steps (snug_step): prompt chunks, decode rows and speculative verification rows of
 * several sequences in one forward, each sequence's logits bit-identical to running it alone
 * (mixed_steps below).
 * Read next: src/model/context.c (the step), src/arch/qwen35.c (runs). */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function" /* the shared header's other helpers */
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation" /* paths are checked by the open */
#endif
#include "test_fixtures_common.h"

#include "engine/slots.h"

#define NB    4  /* contexts in the batch */
#define STEPS 10 /* decode steps */

/* Largest |a - b| over n floats (NaN counts as infinite). */
static double max_abs_diff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

static void noop_hook(void *user, int32_t stage, snug_pos pos0, int32_t n, int32_t n_embd,
                      const float *rows) {
    (void)user, (void)stage, (void)pos0, (void)n, (void)n_embd, (void)rows;
}

/* One model: NB batched contexts and NB reference contexts, prompts of different lengths,
 * STEPS greedy decode steps compared row by row. chunk0: ctxs[0]'s n_chunk (small values split
 * the batch into several forwards); hook: set a layer hook on context 1 (the fallback path). */
static void run_model_in(const char *dir, const char *model, const char *path, int32_t chunk0,
                         bool hook, bool pool) {
    struct snug_err err = {0};
    struct snug_model *m = NULL;
    struct snug_model_params mp = {.path = path, .n_threads = 2};
    if (snug_model_load(&m, &mp, &err) != SNUG_OK) {
        CHECKF(0, "load %s: %s", mp.path, err.msg);
        return;
    }
    int32_t n_ids = 0;
    int32_t *ids =
        fx_read_ids(fx_path(dir, strchr(model, '-') ? "trained" : model, "ids.json"), &n_ids);
    int64_t V = snug_model_n_vocab(m);
    struct snug_ctx *bat[NB] = {0}, *ref[NB] = {0};
    float *blog = malloc(sizeof(float) * (size_t)(NB * V));
    float *rlog = malloc(sizeof(float) * (size_t)(NB * V));
    snug_token next[NB];
    bool ok = ids && blog && rlog && n_ids >= 120;
    struct snug_slots *sp = NULL;
    if (ok && pool) { /* the batched sequences as slots of one backend instance */
        struct snug_ctx_params cp = snug_ctx_default_params();
        cp.n_ctx = 256;
        cp.n_chunk = chunk0;
        cp.n_threads = 2;
        ok = snug_slots_init(&sp, m, &cp, NB, &err) == SNUG_OK;
        for (int i = 0; ok && i < NB; i++) bat[i] = snug_slots_ctx(sp, i);
    }
    for (int i = 0; ok && i < NB; i++) {
        struct snug_ctx_params cp = snug_ctx_default_params();
        cp.n_ctx = 256;
        cp.n_chunk = 64;
        cp.n_threads = 2;
        if (i == 0 || pool) cp.n_chunk = chunk0; /* (both: the prompt's chunking must match) */
        ok = snug_ctx_init(&ref[i], m, &cp, &err) == SNUG_OK;
        if (!pool) ok = ok && snug_ctx_init(&bat[i], m, &cp, &err) == SNUG_OK;
        int32_t len = 7 + 29 * i; /* different positions per sequence */
        ok = ok && snug_ctx_eval(ref[i], ids, len, rlog + i * V, 0, &err) == SNUG_OK;
        ok = ok && snug_ctx_eval(bat[i], ids, len, blog + i * V, 0, &err) == SNUG_OK;
        if (ok) next[i] = (snug_token)fx_argmax(rlog + i * V, V);
    }
    CHECKF(ok, "%s: setup: %s", model, err.msg);
    if (ok && hook) snug_ctx_set_layer_hook(bat[1], noop_hook, NULL);
    double worst = 0;
    int steps_ok = 0;
    uint64_t allocs = 0;
    for (int s = 0; ok && s < STEPS; s++) {
        uint64_t a0 = snug_alloc_count();
        int rc = snug_ctx_eval_batch(bat, next, NB, blog, &err);
        allocs += snug_alloc_count() - a0;
        CHECKF(rc == SNUG_OK, "%s step %d: %s", model, s, err.msg);
        if (rc) break;
        for (int i = 0; i < NB; i++) {
            rc = snug_ctx_eval(ref[i], &next[i], 1, rlog + i * V, 0, &err);
            CHECKF(rc == SNUG_OK, "%s ref step %d: %s", model, s, err.msg);
            CHECK(snug_ctx_n_past(bat[i]) == snug_ctx_n_past(ref[i]));
            double d = max_abs_diff(blog + i * V, rlog + i * V, V);
            worst = d > worst ? d : worst;
            next[i] = (snug_token)fx_argmax(rlog + i * V, V);
        }
        steps_ok++;
    }
    printf("%s (chunk0 %d%s%s): %d steps x %d contexts, max |batched - lone| logit %.3g, %llu "
           "allocations\n",
           model, chunk0, hook ? ", hook fallback" : "", pool ? ", slots of one pool" : "",
           steps_ok, NB, worst, (unsigned long long)allocs);
    CHECK(steps_ok == STEPS);
    CHECKF(worst == 0, "%s: batched logits differ from lone decodes by %.3g", model, worst);
    CHECKF(allocs == 0, "%s: %llu allocations in batched steps", model, (unsigned long long)allocs);

    if (ok) { /* refusals change nothing */
        int32_t np0 = snug_ctx_n_past(bat[0]), np1 = snug_ctx_n_past(bat[1]);
        struct snug_ctx *dup[2] = {bat[0], bat[0]};
        snug_token two[2] = {1, 2};
        CHECK(snug_ctx_eval_batch(dup, two, 2, NULL, &err) == SNUG_ERR_INVALID);
        CHECK(strstr(err.msg, "same") != NULL);
        snug_token bad[2] = {1, (snug_token)V};
        CHECK(snug_ctx_eval_batch(bat, bad, 2, NULL, &err) == SNUG_ERR_INVALID);
        CHECK(snug_ctx_n_past(bat[0]) == np0 && snug_ctx_n_past(bat[1]) == np1);
        CHECK(snug_ctx_eval_batch(bat, two, 0, NULL, &err) == SNUG_OK);
    }
    for (int i = 0; i < NB; i++) {
        if (!pool) snug_ctx_free(bat[i]);
        snug_ctx_free(ref[i]);
    }
    snug_slots_free(sp);
    free(blog);
    free(rlog);
    free(ids);
    snug_model_free(m);
}

static void run_model(const char *dir, const char *model, const char *path, int32_t chunk0,
                      bool hook) {
    run_model_in(dir, model, path, chunk0, hook, false);
}

/* A context with no room left is refused by name and nothing moves. */
static void full_context(const char *dir) {
    struct snug_err err = {0};
    struct snug_model *m = NULL;
    struct snug_model_params mp = {.path = fx_path(dir, "trained", "trained-f16.gguf"),
                                   .n_threads = 1};
    if (snug_model_load(&m, &mp, &err) != SNUG_OK) {
        CHECKF(0, "load: %s", err.msg);
        return;
    }
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = 4;
    cp.n_chunk = 4;
    struct snug_ctx *a = NULL, *b = NULL;
    CHECK(snug_ctx_init(&a, m, &cp, &err) == SNUG_OK);
    CHECK(snug_ctx_init(&b, m, &cp, &err) == SNUG_OK);
    snug_token t4[4] = {5, 6, 7, 8};
    if (a && b) {
        CHECK(snug_ctx_eval(b, t4, 4, NULL, 0, &err) == SNUG_OK);
        struct snug_ctx *ab[2] = {a, b};
        CHECK(snug_ctx_eval_batch(ab, t4, 2, NULL, &err) == SNUG_ERR_BUDGET);
        CHECK(strstr(err.msg, "context 1 is full") != NULL);
        CHECK(snug_ctx_n_past(a) == 0 && snug_ctx_n_past(b) == 4);
    }
    snug_ctx_free(a);
    snug_ctx_free(b);
    snug_model_free(m);
}

/* ---- mixed steps (snug_step) ---------------------------------------------------------------
 * NM sequences as slots of one pool (or separate contexts), driven by snug_step with mixes of 2
 * to NM of them per step, in rotating order: prompt chunks of odd lengths (logits of the last
 * row), greedy decode rows, and (models with an MTP block) verification rows of k = 3 MTP
 * drafts, accepted greedily and rolled back. Each sequence has a twin context run alone with
 * snug_ctx_eval (the same chunks, the same flags): every logits row of the mixed step must
 * equal the twin's bit for bit, the drafts too. Then the negative control: one step whose
 * first row carries another token must change that sequence's logits and no other's. */
#define NM        4  /* sequences */
#define MIX_STEPS 24 /* steps */
#define MIX_K     3  /* drafts per verification */

struct mix_seq {
    struct snug_ctx *bat, *ref;
    const int32_t *prompt;
    int32_t n_prompt, fed; /* prompt tokens, those evaluated so far */
    int32_t actions;       /* generation actions so far (decode or verify) */
    snug_token next;       /* the pending token (after the prompt) */
    /* this step's rows */
    int32_t kind; /* 0 prompt chunk, 1 decode, 2 verify */
    int32_t n, n_logits, row0, lrow0;
    snug_token toks[MIX_K + 1];
};

static int32_t mix_ndiff(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, (size_t)n * sizeof(float)) != 0;
}

static void mixed_steps(const char *dir, const char *model, bool pool) {
    struct snug_err err = {0};
    struct snug_model *m = NULL;
    char path[64];
    snprintf(path, sizeof path, "%s-f16.gguf", model);
    struct snug_model_params mp = {.path = fx_path(dir, model, path), .n_threads = 2};
    if (snug_model_load(&m, &mp, &err) != SNUG_OK) {
        CHECKF(0, "load %s: %s", mp.path, err.msg);
        return;
    }
    bool spec = snug_model_n_nextn(m) > 0;
    int32_t n_ids = 0;
    int32_t *ids = fx_read_ids(fx_path(dir, model, "ids.json"), &n_ids);
    int64_t V = snug_model_n_vocab(m);
    float *blog = malloc(sizeof(float) * (size_t)(64 * V));
    float *rlog = malloc(sizeof(float) * (size_t)((MIX_K + 1) * V));
    struct snug_step_row *rows = malloc(sizeof *rows * 64);
    struct mix_seq seq[NM];
    memset(seq, 0, sizeof seq);
    bool ok = ids && blog && rlog && rows && n_ids >= 60;
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = 256;
    cp.n_chunk = 64;
    cp.n_threads = 2;
    cp.n_draft = spec ? MIX_K : 0;
    struct snug_slots *sp = NULL;
    if (ok && pool) ok = snug_slots_init(&sp, m, &cp, NM, &err) == SNUG_OK;
    for (int i = 0; ok && i < NM; i++) {
        struct mix_seq *q = &seq[i];
        if (pool)
            q->bat = snug_slots_ctx(sp, i);
        else
            ok = snug_ctx_init(&q->bat, m, &cp, &err) == SNUG_OK;
        ok = ok && snug_ctx_init(&q->ref, m, &cp, &err) == SNUG_OK;
        q->prompt = ids + 3 * i; /* different prompts of different lengths */
        q->n_prompt = 13 + 11 * i;
    }
    CHECKF(ok, "%s mixed: setup: %s", model, err.msg);
    int32_t compared = 0, diffs = 0, verifies = 0, prompts = 0, decodes = 0, draft_diffs = 0;
    int32_t max_mix = 0;
    uint64_t allocs = 0;
    for (int s = 0; ok && s < MIX_STEPS; s++) {
        /* who takes part: 2..NM sequences, starting at a rotating one */
        int32_t n_in = 2 + s % (NM - 1), first = s % NM, n_rows = 0, n_lrows = 0;
        int32_t order[NM];
        for (int32_t j = 0; j < n_in; j++) order[j] = (first + j * (s % 2 ? NM - 1 : 1)) % NM;
        for (int32_t j = 0; j < n_in; j++) {
            struct mix_seq *q = &seq[order[j]];
            q->row0 = n_rows, q->lrow0 = n_lrows;
            if (q->fed < q->n_prompt) { /* a prompt chunk of odd length */
                q->kind = 0;
                q->n = SNUG_MIN(3 + 2 * ((s + order[j]) % 5), q->n_prompt - q->fed);
                for (int32_t t = 0; t < q->n; t++) {
                    rows[n_rows + t] =
                        (struct snug_step_row){.ctx = q->bat,
                                               .token = q->prompt[q->fed + t],
                                               .pos = snug_ctx_n_past(q->bat) + t,
                                               .flags = t == q->n - 1 ? SNUG_ROW_LOGITS : 0};
                }
                q->n_logits = 1;
            } else if (spec && q->actions % 3 == 2) { /* a verification of MIX_K drafts */
                q->kind = 2;
                snug_token db[MIX_K], dr[MIX_K];
                int32_t nb = 0, nr = 0;
                uint64_t a0 = snug_alloc_count();
                ok = snug_ctx_draft(q->bat, q->next, MIX_K, db, &nb, &err) == SNUG_OK;
                allocs += snug_alloc_count() - a0;
                ok = ok && snug_ctx_draft(q->ref, q->next, MIX_K, dr, &nr, &err) == SNUG_OK;
                CHECKF(ok, "%s mixed step %d draft: %s", model, s, err.msg);
                if (!ok) break;
                draft_diffs += nb != nr || memcmp(db, dr, sizeof(snug_token) * (size_t)nb) != 0;
                q->toks[0] = q->next;
                memcpy(q->toks + 1, dr, sizeof(snug_token) * (size_t)nr);
                q->n = q->n_logits = nr + 1;
                for (int32_t t = 0; t < q->n; t++)
                    rows[n_rows + t] =
                        (struct snug_step_row){.ctx = q->bat,
                                               .token = q->toks[t],
                                               .pos = snug_ctx_n_past(q->bat) + t,
                                               .flags = SNUG_ROW_LOGITS | SNUG_ROW_VERIFY};
            } else { /* one decode row */
                q->kind = 1;
                q->toks[0] = q->next;
                q->n = q->n_logits = 1;
                rows[n_rows] = (struct snug_step_row){.ctx = q->bat,
                                                      .token = q->next,
                                                      .pos = snug_ctx_n_past(q->bat),
                                                      .flags = SNUG_ROW_LOGITS};
            }
            n_rows += q->n, n_lrows += q->n_logits;
        }
        if (!ok) break;
        max_mix = SNUG_MAX(max_mix, n_in);
        uint64_t a0 = snug_alloc_count();
        int rc = snug_step(rows, n_rows, blog, &err);
        allocs += snug_alloc_count() - a0;
        CHECKF(rc == SNUG_OK, "%s mixed step %d (%d rows): %s", model, s, n_rows, err.msg);
        if (rc) break;
        for (int32_t j = 0; ok && j < n_in; j++) { /* the twins, alone */
            struct mix_seq *q = &seq[order[j]];
            int32_t np0 = snug_ctx_n_past(q->ref);
            if (q->kind == 0)
                rc = snug_ctx_eval(q->ref, q->prompt + q->fed, q->n, rlog, SNUG_EVAL_LOGITS_LAST,
                                   &err);
            else if (q->kind == 1)
                rc = snug_ctx_eval(q->ref, q->toks, 1, rlog, SNUG_EVAL_LOGITS_LAST, &err);
            else
                rc = snug_ctx_eval(q->ref, q->toks, q->n, rlog,
                                   SNUG_EVAL_LOGITS_ALL | SNUG_EVAL_SNAPSHOT, &err);
            CHECKF(rc == SNUG_OK, "%s mixed step %d twin: %s", model, s, err.msg);
            if (rc) {
                ok = false;
                break;
            }
            CHECK(snug_ctx_n_past(q->bat) == snug_ctx_n_past(q->ref));
            for (int32_t r = 0; r < q->n_logits; r++) {
                diffs += mix_ndiff(blog + (int64_t)(q->lrow0 + r) * V, rlog + (int64_t)r * V, V);
                compared++;
            }
            if (q->kind == 0) {
                q->fed += q->n;
                prompts++;
                if (q->fed == q->n_prompt) q->next = (snug_token)fx_argmax(rlog, V);
                continue;
            }
            q->actions++;
            if (q->kind == 1) {
                decodes++;
                q->next = (snug_token)fx_argmax(rlog, V);
                continue;
            }
            verifies++; /* greedy acceptance, both rolled back to the same point */
            int32_t acc = 0;
            while (acc + 1 < q->n && fx_argmax(rlog + (int64_t)acc * V, V) == q->toks[acc + 1])
                acc++;
            q->next = (snug_token)fx_argmax(rlog + (int64_t)acc * V, V);
            rc = snug_ctx_truncate(q->ref, np0 + acc + 1, &err);
            rc = rc ? rc : snug_ctx_truncate(q->bat, np0 + acc + 1, &err);
            CHECKF(rc == SNUG_OK, "%s mixed step %d truncate: %s", model, s, err.msg);
            if (rc) ok = false;
        }
    }
    printf("%s mixed steps (%s): %d logits rows compared (%d prompt chunks, %d decode rows, %d "
           "verifications of %d drafts; up to %d sequences per step), %d differ, %d draft "
           "mismatches, %llu allocations\n",
           model, pool ? "slots of one pool" : "separate contexts", compared, prompts, decodes,
           verifies, MIX_K, max_mix, diffs, draft_diffs, (unsigned long long)allocs);
    CHECK(ok);
    CHECKF(diffs == 0, "%s: %d mixed-step logits rows differ from the lone runs", model, diffs);
    CHECK(draft_diffs == 0);
    CHECK(prompts > NM && decodes > NM && (!spec || verifies >= NM) && max_mix == NM);
    CHECKF(allocs == 0, "%s mixed: %llu allocations", model, (unsigned long long)allocs);

    if (ok) { /* refusals change nothing */
        struct mix_seq *a = &seq[0], *b = &seq[1];
        int32_t na = snug_ctx_n_past(a->bat), nb = snug_ctx_n_past(b->bat);
        struct snug_step_row r3[3] = {{.ctx = a->bat, .token = 1, .pos = na},
                                      {.ctx = b->bat, .token = 1, .pos = nb},
                                      {.ctx = a->bat, .token = 1, .pos = na + 1}};
        CHECK(snug_step(r3, 3, blog, &err) == SNUG_ERR_INVALID);
        CHECK(strstr(err.msg, "together") != NULL);
        r3[2] = (struct snug_step_row){.ctx = b->bat, .token = 1, .pos = nb + 2};
        CHECK(snug_step(r3, 3, blog, &err) == SNUG_ERR_INVALID);
        CHECK(strstr(err.msg, "position") != NULL);
        r3[2] = (struct snug_step_row){.ctx = b->bat, .token = 1, .pos = nb + 1};
        r3[1].flags = SNUG_ROW_LOGITS;
        CHECK(snug_step(r3, 3, blog, &err) == SNUG_ERR_INVALID);
        CHECK(strstr(err.msg, "logits") != NULL);
        r3[1].flags = 0;
        r3[2].token = (snug_token)V;
        CHECK(snug_step(r3, 3, blog, &err) == SNUG_ERR_INVALID);
        CHECK(snug_ctx_n_past(a->bat) == na && snug_ctx_n_past(b->bat) == nb);
    }
    if (ok) { /* the negative control: another token in the first row */
        int32_t n_rows = 0;
        for (int i = 0; i < NM; i++) {
            struct mix_seq *q = &seq[i];
            rows[n_rows++] =
                (struct snug_step_row){.ctx = q->bat,
                                       .token = i == 0 ? (q->next + 1) % (snug_token)V : q->next,
                                       .pos = snug_ctx_n_past(q->bat),
                                       .flags = SNUG_ROW_LOGITS};
        }
        CHECK(snug_step(rows, n_rows, blog, &err) == SNUG_OK);
        int32_t d[NM];
        for (int i = 0; i < NM; i++) {
            CHECK(snug_ctx_eval(seq[i].ref, &seq[i].next, 1, rlog, 0, &err) == SNUG_OK);
            d[i] = mix_ndiff(blog + (int64_t)i * V, rlog, V);
        }
        printf("%s mixed steps: negative control (another token in row 0): rows differing %d %d "
               "%d %d\n",
               model, d[0], d[1], d[2], d[3]);
        CHECKF(d[0] == 1, "%s: the perturbed row did not change its logits", model);
        CHECKF(d[1] + d[2] + d[3] == 0, "%s: a perturbed row changed another sequence's logits",
               model);
    }
    for (int i = 0; i < NM; i++) {
        if (!pool) snug_ctx_free(seq[i].bat);
        snug_ctx_free(seq[i].ref);
    }
    snug_slots_free(sp);
    free(rows);
    free(blog);
    free(rlog);
    free(ids);
    snug_model_free(m);
}

int main(void) {
    const char *dir = test_fixtures_dir();
    if (!dir) return TEST_DONE();
    run_model(dir, "trained", fx_path(dir, "trained", "trained-f16.gguf"), 64, false);
    run_model(dir, "moe", fx_path(dir, "moe", "moe-f16.gguf"), 64, false);
    run_model(dir, "trained", fx_path(dir, "trained", "trained-f16.gguf"), 3, false); /* 3 + 1 */
    run_model(dir, "trained", fx_path(dir, "trained", "trained-f16.gguf"), 64, true);
    run_model_in(dir, "trained", fx_path(dir, "trained", "trained-f16.gguf"), 64, false, true);
    run_model_in(dir, "moe", fx_path(dir, "moe", "moe-f16.gguf"), 64, false, true);
    /* block types: Q8_0 / Q6_K take float activations (the few-row in-place dot), Q4_K int8
     * activations (several rows per weight-block decode); quantized here with `snug quantize` */
    const char *types[] = {"q8_0", "q6_k", "q4_k_m"};
    for (int i = 0; i < 3; i++) {
        char out[256], cmd[1024], label[64];
        snprintf(out, sizeof out, "test_batch_decode-%s.gguf", types[i]);
        snprintf(cmd, sizeof cmd, "%s quantize %s %s %s > /dev/null 2>&1", SNUG_BIN,
                 fx_path(dir, "trained", "trained-f16.gguf"), out, types[i]);
        int rc = system(cmd);
        CHECKF(rc == 0, "%s failed (%d)", cmd, rc);
        snprintf(label, sizeof label, "trained-%s", types[i]);
        if (rc == 0) run_model(dir, label, out, 64, false);
        remove(out);
    }
    full_context(dir);
    mixed_steps(dir, "trained", true);
    mixed_steps(dir, "trained", false);
    mixed_steps(dir, "moe", true);
    return TEST_DONE();
}
