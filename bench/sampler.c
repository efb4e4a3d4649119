/* sampler.c — benchmark of one sampling step on the Qwen3.5 vocabulary size (248,320 logits;
 * not a test: it prints numbers; docs/perf/server.md records them with the command line).
 *
 * Times snug_sampler_sample per token (median of 7 rounds of N draws, one core) for three
 * chains over the same logits row: greedy (temperature 0: one pass to the argmax, the floor),
 * temperature only (a softmax over the whole vocabulary: the cost of any chain that needs every
 * probability), and the default chain (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05). Two
 * rows: a flat one (logits in ±0.25, as a model of random weights gives) and a spread one
 * (±10 with a few peaks, closer to a trained model). Prints each chain's time and its ratio to
 * greedy. Usage: bench_sampler [N]
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include "core/core.h"
#include "sample/sample.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { V = 248320, ROUNDS = 7 };

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over ROUNDS of the milliseconds per draw of n draws with params q on logits l. */
static double time_chain(const struct snug_sampler_params *q, const float *l, int n) {
    struct snug_sampler *s;
    struct snug_err err = {0};
    if (snug_sampler_init(&s, q, V, &err) != SNUG_OK) {
        fprintf(stderr, "bench_sampler: %s\n", err.msg);
        exit(1);
    }
    double t[ROUNDS];
    long sink = 0;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now_s();
        for (int i = 0; i < n; i++) sink += snug_sampler_sample(s, l, NULL, 0);
        t[r] = (now_s() - t0) * 1e3 / n;
    }
    snug_sampler_free(s);
    qsort(t, ROUNDS, sizeof *t, cmp_double);
    if (sink == -1) printf("(unreachable)\n"); /* keeps the draws */
    return t[ROUNDS / 2];
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20;
    if (n < 1) n = 1;
    float *l = malloc((size_t)V * sizeof(float));
    if (!l) return 1;
    struct snug_rng r;
    snug_rng_seed(&r, 1);
    for (int row = 0; row < 2; row++) {
        for (int i = 0; i < V; i++) {
            double u = snug_rng_uniform(&r) * 2 - 1;
            l[i] = row == 0 ? (float)(0.25 * u) : (float)(10.0 * u + (i % 9973 == 0 ? 12 : 0));
        }
        struct snug_sampler_params greedy = snug_sampler_params_default(), temp = greedy,
                                   dflt = greedy;
        greedy.temperature = 0.0f;
        temp.top_k = 0, temp.top_p = 1.0f, temp.min_p = 0.0f;
        double g = time_chain(&greedy, l, n), t = time_chain(&temp, l, n),
               d = time_chain(&dflt, l, n);
        printf("%s row, %d logits, ms per token (median of %d x %d draws): greedy %.3f, "
               "temperature only %.3f (%.1fx), default chain %.3f (%.1fx)\n",
               row == 0 ? "flat" : "spread", V, ROUNDS, n, g, t, t / g, d, d / g);
    }
    free(l);
    return 0;
}
