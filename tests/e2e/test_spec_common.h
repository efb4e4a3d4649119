/* test_spec_common.h — what the speculative-decoding tests on the trained fixture share
 * (test_mtp.c, test_prefix_mtp.c, test_vision_spec.c): opening the fixture's model (it has a
 * trained MTP block) and the greedy loop of snug_spec_step after a prompt.
 * Header-only, static inline (each test is one translation unit). Read next:
 * test_fixtures_common.h, src/speculative/speculative.h. */
#ifndef SNUG_TEST_SPEC_COMMON_H
#define SNUG_TEST_SPEC_COMMON_H

#include "test_fixtures_common.h"

#include "model/model.h"
#include "sample/sample.h"
#include "speculative/speculative.h"

#include <stdio.h>

/* The trained fixture's model under dir; NULL after printing the failure. */
static inline struct snug_model *fx_load_trained(const char *dir) {
    struct snug_err err = {0};
    struct snug_model_params mp = {.path = fx_path(dir, "trained", "trained-f16.gguf")};
    struct snug_model *m = NULL;
    if (snug_model_load(&m, &mp, &err)) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        return NULL;
    }
    return m;
}

/* Greedy speculative decoding after a prompt: hist[0, np) holds it (capacity cap), lg its last
 * row of V logits. Appends lg's argmax, then calls snug_spec_step until n ids follow the
 * prompt (or one fails: its status). *step_allocs (may be NULL): heap allocations the steps
 * made. */
static inline int fx_spec_greedy(struct snug_ctx *c, struct snug_sampler *s, snug_token *hist,
                                 int32_t np, int32_t cap, int32_t n, const float *lg, int64_t V,
                                 uint64_t *step_allocs, struct snug_err *err) {
    int32_t nh = np;
    hist[nh++] = (snug_token)fx_argmax(lg, V);
    uint64_t allocs = snug_alloc_count();
    int rc = SNUG_OK;
    while (rc == SNUG_OK && nh - np < n) {
        int32_t nn = 0;
        rc = snug_spec_step(c, s, hist, nh, cap, &nn, err);
        nh += nn;
    }
    if (step_allocs) *step_allocs = snug_alloc_count() - allocs;
    return rc;
}

#endif /* SNUG_TEST_SPEC_COMMON_H */
