/* test_plan_rss.c — the memory plan holds at run time: for a
 * fixture-shaped model on the CPU — the demo/trained fixture's layer layout (3 Gated DeltaNet
 * + 1 gated attention layer, built-in vocabulary) written by `snug gen` with shrunk widths
 * (H 64, one 16-dim attention head) so a 32K-token causal prefill stays within the time
 * budget on 2 cores — a context planned for N_CTX positions (the solver's largest context for
 * a budget equal to that plan, so the solver is checked too) is swept with prompts up to the
 * full context at chunk sizes 64, 512 and 4096, each in its own process so peak RSS is per
 * configuration. Checks: peak RSS <= RSS at process start (the C runtime and the linked
 * libraries) + the plan's total + RUNTIME_ALLOWANCE (thread stacks, the tokenizer, the test's
 * own id buffer); snug_alloc_count does not move after snug_ctx_init; and a prompt past the planned
 * context is refused with an error naming both numbers. Under ASan the context is shorter and the
 * RSS bound is not checked (shadow memory and the quarantine are not the engine's); a note says so.
 * Read next: src/plan/plan.h, docs/memory.md. */
#define _POSIX_C_SOURCE 200809L
#include "core/core.h"
#include "model/model.h"
#include "plan/plan.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define N_CTX     (UNDER_ASAN ? 4608 : 32768)
#define N_THREADS 2
/* Fixed allowance, on top of the process's RSS at start (libc and the linked libraries), for
 * what the plan does not own: two pool thread stacks as touched, the GGUF metadata and tokenizer
 * tables of the 265-token vocabulary, this test's id array (N_CTX × 4 bytes) and stdio buffers:
 * measured 3.1 MiB in all. Kept small so a whole-prompt intermediate ([N_CTX][H] floats = 8 MiB)
 * would not hide in it. */
#define RUNTIME_ALLOWANCE (6ull << 20)

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* One configuration, in a fresh process: prints "RESULT peak plan" and exits non-zero on a
 * failed check. */
static int child(const char *path, int32_t chunk) {
    /* the runtime's own footprint before snug allocates anything: libc and the shared
     * libraries the binary links (the CUDA runtime libraries alone are ~150 MiB resident) */
    const uint64_t rss_start = snug_rss_bytes();
    struct snug_err err = {0};
    struct snug_model *m = NULL;
    if (snug_model_load(&m, &(struct snug_model_params){.path = path, .n_threads = N_THREADS},
                        &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    struct snug_plan_weights w;
    snug_plan_weights_from_gguf(m->gguf, &w);
    struct snug_plan_limits lim = {.n_ctx = N_CTX,
                                   .n_slots = 1,
                                   .n_chunk = chunk,
                                   .n_threads = N_THREADS,
                                   .kv_type = SNUG_KV_F16};
    struct snug_plan plan;
    CHECK(snug_plan_make(&m->hp, &w, &lim, &plan, &err) == SNUG_OK);
    /* the planned maximum context for a budget of exactly this plan is N_CTX itself */
    int64_t max = snug_plan_max_ctx(&m->hp, &w, &lim, plan.device_total, INT32_MAX);
    CHECKF(max == N_CTX, "solver: %lld vs %d", (long long)max, N_CTX);
    const int32_t V = snug_model_n_vocab(m), n = (int32_t)max;
    float *logits = snug_malloc((size_t)V * sizeof(float));
    snug_token *ids = snug_malloc((size_t)(n + 1) * sizeof *ids);
    uint32_t seed = 12345u + (uint32_t)chunk;
    for (int32_t i = 0; i <= n; i++) ids[i] = (snug_token)(lcg(&seed) % (uint32_t)V);
    struct snug_ctx_params cp = {
        .n_ctx = n, .n_chunk = chunk, .kv_type = SNUG_KV_F16, .n_threads = N_THREADS};
    struct snug_ctx *ctx = NULL;
    CHECK(snug_ctx_init(&ctx, m, &cp, &err) == SNUG_OK);
    if (!ctx) return 1;
    const uint64_t a0 = snug_alloc_count();
    const uint64_t rss_init = snug_rss_bytes();

    /* short prompts around the chunk boundary, each from an empty context */
    const int32_t shorts[] = {1, chunk - 1, chunk, chunk + 1, 2 * chunk + 3};
    for (size_t k = 0; k < sizeof shorts / sizeof shorts[0]; k++) {
        if (shorts[k] < 1 || shorts[k] > n) continue;
        snug_ctx_reset(ctx);
        CHECK(snug_ctx_eval(ctx, ids, shorts[k], logits, 0, &err) == SNUG_OK);
    }
    /* the long sweep: a prompt of n - 8 tokens (chunked inside), then 8 decode steps to the
     * full planned context, then one token too many */
    snug_ctx_reset(ctx);
    CHECK(snug_ctx_eval(ctx, ids, n - 8, logits, 0, &err) == SNUG_OK);
    for (int32_t i = n - 8; i < n; i++)
        CHECK(snug_ctx_eval(ctx, ids + i, 1, logits, 0, &err) == SNUG_OK);
    CHECK(snug_ctx_n_past(ctx) == n);
    bool finite = true;
    for (int32_t i = 0; i < V; i++) finite &= logits[i] == logits[i];
    CHECK(finite);
    CHECK(snug_ctx_eval(ctx, ids, 1, logits, 0, &err) == SNUG_ERR_BUDGET);
    char num[32];
    snprintf(num, sizeof num, "%d", n);
    CHECKF(strstr(err.msg, num) != NULL, "error names the context: %s", err.msg);
    /* a fresh prompt longer than the planned context: refused, naming both numbers */
    snug_ctx_reset(ctx);
    CHECK(snug_ctx_eval(ctx, ids, n + 1, logits, 0, &err) == SNUG_ERR_BUDGET);
    char num2[32];
    snprintf(num, sizeof num, "%d tokens", n + 1);
    snprintf(num2, sizeof num2, "of %d", n);
    CHECKF(strstr(err.msg, num) && strstr(err.msg, num2), "error names both numbers: %s", err.msg);
    printf("over-long prompt: %s\n", err.msg);
    const uint64_t a1 = snug_alloc_count();
    CHECKF(a1 == a0, "allocations after load: %llu", (unsigned long long)(a1 - a0));
    printf("  rss at start %.1f MiB, after context init %.1f MiB, peak after the sweep %.1f MiB\n",
           rss_start / 1048576.0, rss_init / 1048576.0, snug_peak_rss_bytes() / 1048576.0);
    printf("RESULT %llu %llu %llu\n", (unsigned long long)snug_peak_rss_bytes(),
           (unsigned long long)plan.device_total, (unsigned long long)rss_start);
    snug_ctx_free(ctx);
    snug_free(ids);
    snug_free(logits);
    snug_model_free(m);
    return test_failed ? 1 : 0;
}

/* Run one configuration in a child process and check its peak RSS against the plan. */
static void run_config(const char *self, const char *path, int32_t chunk) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "'%s' --child '%s' %d", self, path, chunk);
    double t0 = snug_time_s();
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    if (!f) return;
    char line[512];
    unsigned long long peak = 0, plan = 0, base = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "RESULT %llu %llu %llu", &peak, &plan, &base) != 3) fputs(line, stdout);
    }
    int st = pclose(f);
    CHECKF(st == 0, "chunk %d: child exit status %d", chunk, st);
    CHECK(plan > 0);
    printf("chunk %5d ctx %d: peak RSS %.1f MiB = runtime at start %.1f + plan %.1f %+.1f MiB "
           "(allowance %.0f MiB), %.1f s\n",
           chunk, N_CTX, peak / 1048576.0, base / 1048576.0, plan / 1048576.0,
           ((double)peak - (double)plan - (double)base) / 1048576.0, RUNTIME_ALLOWANCE / 1048576.0,
           snug_time_s() - t0);
    if (!UNDER_ASAN)
        CHECKF(peak <= base + plan + RUNTIME_ALLOWANCE,
               "chunk %d: peak %llu > start %llu + plan %llu + allowance", chunk, peak, base, plan);
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--child")) return child(argv[2], (int32_t)atoi(argv[3]));
    const char *path = "test_plan_rss.gguf";
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "'%s' gen --preset demo --type f16 -o %s --set embedding_length=64 "
             "--set attention.head_count=1 --set attention.head_count_kv=1 "
             "--set attention.key_length=16 --set rope.dimension_count=8 --set ssm.state_size=16 "
             "--set ssm.group_count=1 --set ssm.time_step_rank=2 --set feed_forward_length=128 "
             ">/dev/null 2>&1",
             SNUG_BIN, path);
    CHECK(system(cmd) == 0);
    if (UNDER_ASAN)
        printf("note: ASan build: context %d instead of 32768, RSS bound not checked (shadow "
               "memory); allocation counter still checked\n",
               N_CTX);
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(len > 0);
    if (len <= 0) return TEST_DONE();
    self[len] = 0;
    const int32_t chunks[] = {64, 512, 4096};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) run_config(self, path, chunks[k]);
    remove(path);
    return TEST_DONE();
}
