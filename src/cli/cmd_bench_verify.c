/* cmd_bench_verify.c — `snug bench-local --verify`: the cost of speculative decoding's pieces
 * relative to one decode step, on the CPU or the GPU (--backend cuda), for k = 1..4 drafts:
 * one trunk forward over k+1 tokens with per-token state snapshots (the default rollback) and
 * without (the chunked rule of the recompute strategy), the rollback after rejecting the first
 * draft for each, and the k MTP drafting steps. Medians of --reps runs after a -p token prompt
 * of random ids (docs/spec-decode.md has the numbers).
 * Owns nothing beyond one run; the model needs an MTP block (nextn_predict_layers > 0).
 * Read next: src/speculative/speculative.c (draft, verify, rollback), src/model/context.c. */
#include "cli.h"

#include "core/core.h"
#include "speculative/speculative.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* Everything measured for one k. */
struct vrow {
    double snap, rb_snap, chunk, rb_rec, draft;
};

/* Time the pieces for k = 1..4 on ctx (n_draft 4, prompt already evaluated); rc on failure. */
static int measure(struct snug_ctx *ctx, const snug_token *ids, int reps, float *lg, double *dec,
                   struct vrow *row, struct snug_err *err) {
    double *t = calloc((size_t)reps * 2, sizeof(double)), *u = t + reps;
    if (!t) return snug_err_set(err, SNUG_ERR_NOMEM, "bench-local --verify: out of memory");
    int rc = SNUG_OK;
    for (int r = -1; r < reps && !rc; r++) { /* r = -1: warm-up */
        double t0 = snug_time_s();
        rc = snug_ctx_eval(ctx, &ids[r + 1], 1, lg, SNUG_EVAL_LOGITS_LAST, err);
        if (r >= 0) t[r] = snug_time_s() - t0;
    }
    if (!rc) *dec = median(t, reps);
    for (int mode = 0; mode < 2 && !rc; mode++) {
        snug_spec_set_rollback(ctx, mode == 1);
        for (int k = 1; k <= 4 && !rc; k++) {
            for (int r = -1; r < reps && !rc; r++) {
                int32_t n0 = snug_ctx_n_past(ctx);
                double t0 = snug_time_s();
                rc = snug_ctx_eval(ctx, ids + 8, k + 1, lg,
                                   SNUG_EVAL_LOGITS_ALL | SNUG_EVAL_SNAPSHOT, err);
                double t1 = snug_time_s();
                if (!rc) rc = snug_ctx_truncate(ctx, n0 + 1, err);
                if (r >= 0) t[r] = t1 - t0, u[r] = snug_time_s() - t1;
            }
            if (rc) break;
            (mode ? &row[k].chunk : &row[k].snap)[0] = median(t, reps);
            (mode ? &row[k].rb_rec : &row[k].rb_snap)[0] = median(u, reps);
        }
    }
    snug_spec_set_rollback(ctx, false);
    /* drafting k tokens: after a verification and its rollback one pending row is left, as
     * in snug_spec_step; re-create that state before each timed draft */
    for (int k = 1; k <= 4 && !rc; k++) {
        snug_token d[SNUG_SPEC_MAX_DRAFT];
        for (int r = -1; r < reps && !rc; r++) {
            int32_t n0 = snug_ctx_n_past(ctx), nd = 0;
            rc = snug_ctx_eval(ctx, ids + 8, 2, lg, SNUG_EVAL_LOGITS_ALL | SNUG_EVAL_SNAPSHOT, err);
            if (!rc) rc = snug_ctx_truncate(ctx, n0 + 1, err);
            double t0 = snug_time_s();
            if (!rc) rc = snug_ctx_draft(ctx, ids[3], k, d, &nd, err);
            if (r >= 0) t[r] = snug_time_s() - t0;
        }
        if (!rc) row[k].draft = median(t, reps);
    }
    free(t);
    return rc;
}

int cli_bench_verify(const char *path, int n_threads, int reps, long n_prompt, int32_t chunk,
                     const struct cli_backend *bk, double accept) {
    struct snug_err err = {0};
    struct snug_model *m = NULL;
    struct snug_model_params mp = {.path = path, .n_threads = n_threads};
    if (snug_model_load(&m, &mp, &err) != SNUG_OK) return cli_fail("bench-local", &err);
    if (snug_model_n_nextn(m) < 1) {
        snug_err_set(&err, SNUG_ERR_UNSUPPORTED,
                     "bench-local --verify: %s has no MTP block (nextn_predict_layers = 0); "
                     "speculative decoding drafts with it",
                     path);
        snug_model_free(m);
        return cli_fail("bench-local", &err);
    }
    n_prompt = SNUG_MAX(n_prompt, 16);
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = (int32_t)n_prompt + 32 * (reps + 1) + 64;
    cp.n_threads = n_threads;
    cp.n_draft = 4;
    cli_backend_params(bk, &cp);
    cp.n_chunk = cli_chunk_resolve("bench-local", m, &cp, chunk, bk->vram_budget);
    struct snug_ctx *ctx = NULL;
    if (snug_ctx_init(&ctx, m, &cp, &err) != SNUG_OK) {
        snug_model_free(m);
        return cli_fail("bench-local", &err);
    }
    int32_t V = snug_model_n_vocab(m);
    float *lg = malloc(sizeof(float) * (size_t)V * 8);
    snug_token *ids = malloc(sizeof(snug_token) * (size_t)n_prompt);
    int rc = lg && ids ? SNUG_OK : snug_err_set(&err, SNUG_ERR_NOMEM, "out of memory");
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (long i = 0; ids && i < n_prompt; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (snug_token)((rng >> 33) % (uint64_t)V);
    }
    if (!rc) rc = snug_ctx_eval(ctx, ids, (int32_t)n_prompt, lg, SNUG_EVAL_LOGITS_LAST, &err);
    double dec = 0;
    struct vrow row[5] = {0};
    if (!rc) rc = measure(ctx, ids, reps, lg, &dec, row, &err);
    if (!rc) {
        printf("model: %s  backend: %s  threads: %d  prompt: %ld  reps: %d (medians)\n", path,
               bk->backend == 1 ? "cuda" : "cpu", n_threads, n_prompt, reps);
        printf("decode step: %.3f ms\n", dec * 1e3);
        printf("| k | verify k+1 (snapshots) | rollback | verify k+1 (chunked) | rollback "
               "(recompute 1 token) | draft k (MTP) |\n|---|---|---|---|---|---|\n");
        for (int k = 1; k <= 4; k++)
            printf("| %d | %.3f ms (%.2fx) | %.3f ms | %.3f ms (%.2fx) | %.3f ms (%.2fx) | %.3f "
                   "ms (%.2fx) |\n",
                   k, row[k].snap * 1e3, row[k].snap / dec, row[k].rb_snap * 1e3,
                   row[k].chunk * 1e3, row[k].chunk / dec, row[k].rb_rec * 1e3, row[k].rb_rec / dec,
                   row[k].draft * 1e3, row[k].draft / dec);
        for (int k = 1; k <= 4; k++) /* machine-readable, one line per k */
            printf("verify k=%d ratio_snap %.4f ratio_chunk %.4f ratio_draft %.4f\n", k,
                   row[k].snap / dec, row[k].chunk / dec, row[k].draft / dec);
        if (accept > 0) { /* tokens per verification L: a step costs draft + verify + rollback */
            double step = row[3].draft + row[3].snap + row[3].rb_snap;
            printf("k=3 at %.2f tokens per verification: %.2fx the plain decode rate\n", accept,
                   accept * dec / step);
        }
    }
    free(lg), free(ids);
    snug_ctx_free(ctx);
    snug_model_free(m);
    return rc ? cli_fail("bench-local", &err) : 0;
}
