/* cmd_bench_local.c — `snug bench-local`: time prompt processing and generation of a model on
 * this machine (the CPU, or the GPU with --backend cuda) through the public API, in the shape of
 * llama-bench's pp/tg tests, plus on the CPU the numbers for a memory-bandwidth ceiling (weight
 * bytes read per generated token, and the bandwidth of a large multi-threaded memcpy measured in
 * the same run).
 * pp<P>: a fresh sequence evaluates P random tokens in one call (chunks of --chunk tokens);
 * tg<N>: a fresh sequence evaluates N tokens one at a time; with -d D each fresh sequence is
 * first filled with D random tokens (not timed), so the test runs at depth D ("pp512 @ d4096").
 * Each is run once to warm up, then --reps times; mean and standard deviation of tokens/s are
 * printed, one result per line.
 * Read next: bench/cpu.sh, bench/gpu.sh (run this next to llama-bench), docs/perf/cpu.md. */
#define _GNU_SOURCE
#include "cli.h"

#include "core/core.h"
#include "engine/slots.h"
#include "gguf/gguf.h"
#include "kv/kvfmt.h"
#include "plan/plan_auto.h"
#include "quant/quant.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of weights one decoded token reads: every tensor except the token embedding (one row
 * is gathered; counted whole when tied to the output), MTP blocks (not run when decoding), and
 * routed experts scaled by used/total. */
static uint64_t bytes_per_token(const char *path, struct snug_err *err) {
    struct snug_gguf *g;
    if (snug_gguf_open(&g, path, err) != SNUG_OK) return 0;
    struct snug_gguf_str arch = {0};
    char key[128];
    uint32_t n_layer = 0, n_mtp = 0, n_exp = 0, n_used = 0;
    if (snug_gguf_get_str(g, "general.architecture", &arch, err) == SNUG_OK && arch.len < 64) {
        char a[64];
        memcpy(a, arch.data, arch.len);
        a[arch.len] = 0;
        snprintf(key, sizeof key, "%s.block_count", a);
        snug_gguf_get_u32_opt(g, key, &n_layer, err);
        snprintf(key, sizeof key, "%s.nextn_predict_layers", a);
        snug_gguf_get_u32_opt(g, key, &n_mtp, err);
        snprintf(key, sizeof key, "%s.expert_count", a);
        snug_gguf_get_u32_opt(g, key, &n_exp, err);
        snprintf(key, sizeof key, "%s.expert_used_count", a);
        snug_gguf_get_u32_opt(g, key, &n_used, err);
    }
    bool tied = snug_gguf_find_tensor(g, "output.weight") == NULL;
    uint64_t total = 0;
    for (int64_t i = 0; i < snug_gguf_n_tensors(g); i++) {
        const struct snug_gguf_tensor *t = snug_gguf_tensor(g, i);
        unsigned blk;
        if (sscanf(t->name, "blk.%u.", &blk) == 1 && blk + n_mtp >= n_layer && n_mtp) continue;
        if (!strcmp(t->name, "token_embd.weight") && !tied) continue;
        if (strstr(t->name, "_exps") && n_exp > 0) {
            total += t->n_bytes / n_exp * n_used;
            continue;
        }
        total += t->n_bytes;
    }
    snug_gguf_close(g);
    return total;
}

struct copy_arg {
    char *dst;
    const char *src;
    size_t n;
    int reps;
};
static void *copy_main(void *p) {
    struct copy_arg *a = p;
    for (int r = 0; r < a->reps; r++) memcpy(a->dst, a->src, a->n);
    return NULL;
}

/* Bandwidth of a large memcpy over n_threads threads, in bytes/s of read + write traffic
 * (best of 5 runs of 512 MiB each way). Returns 0 when memory is short. */
static double memcpy_bandwidth(int n_threads) {
    size_t n = (size_t)512 << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a), free(b);
        return 0;
    }
    memset(a, 1, n), memset(b, 2, n);
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        pthread_t th[64];
        struct copy_arg arg[64];
        int nt = SNUG_MIN(SNUG_MAX(n_threads, 1), 64);
        double t0 = snug_time_s();
        for (int i = 0; i < nt; i++) {
            size_t lo = n / (size_t)nt * (size_t)i,
                   hi = i == nt - 1 ? n : n / (size_t)nt * (size_t)(i + 1);
            arg[i] = (struct copy_arg){b + lo, a + lo, hi - lo, 1};
            if (i > 0) pthread_create(&th[i], NULL, copy_main, &arg[i]);
        }
        copy_main(&arg[0]);
        for (int i = 1; i < nt; i++) pthread_join(th[i], NULL);
        double dt = snug_time_s() - t0;
        best = SNUG_MAX(best, 2.0 * (double)n / dt);
    }
    free(a), free(b);
    return best;
}

static void stats(const double *v, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

/* tg with every slot at once: each repetition resets the slots, fills each to depth n_d
 * (untimed), then times n_g batched steps of one token per slot (snug_ctx_eval_batch). Prints
 * the aggregate rate and, beside it, its ratio to the one-sequence rate tg_one. */
static int tg_parallel(struct snug_slots *slots, const snug_token *fill, long n_d, long n_g,
                       long reps, int32_t V, const char *at, double tg_one, struct snug_err *err) {
    int32_t n = snug_slots_n(slots);
    struct snug_ctx **ctxs = calloc((size_t)n, sizeof *ctxs);
    snug_token *tok = calloc((size_t)n, sizeof *tok);
    float *logits = malloc(sizeof(float) * (size_t)V * (size_t)n);
    double *v = calloc((size_t)reps, sizeof(double));
    int rc =
        ctxs && tok && logits && v ? SNUG_OK : snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; !rc && i < n; i++) ctxs[i] = snug_slots_ctx(slots, i);
    for (long r = -1; r < reps && !rc; r++) { /* r = -1: warm-up */
        for (int32_t i = 0; i < n && !rc; i++) {
            snug_ctx_reset(ctxs[i]);
            if (n_d > 0)
                rc = snug_ctx_eval(ctxs[i], fill, (int32_t)n_d, NULL, SNUG_EVAL_LOGITS_LAST, err);
            tok[i] = (snug_token)((7 + 13 * i) % V); /* a different token in each */
        }
        double t0 = snug_time_s();
        for (long k = 0; k < n_g && !rc; k++) {
            rc = snug_ctx_eval_batch(ctxs, tok, n, logits, err);
            for (int32_t i = 0; i < n; i++) tok[i] = (snug_token)((tok[i] * 31 + 7) % V);
        }
        if (r >= 0 && !rc) v[r] = (double)(n_g * n) / (snug_time_s() - t0);
    }
    double mean, sd;
    stats(v, (int)reps, &mean, &sd);
    if (!rc)
        printf("tg%ld%s x%d: %.2f ± %.2f t/s (all sequences; %.2f each), %.2fx one sequence\n", n_g,
               at, (int)n, mean, sd, mean / n, tg_one > 0 ? mean / tg_one : 0.0);
    free(ctxs), free(tok), free(logits), free(v);
    return rc;
}

enum {
    O_MODEL = 1,
    O_PROMPT,
    O_GEN,
    O_DEPTH,
    O_THREADS,
    O_REPS,
    O_PARALLEL,
    O_VERIFY,
    O_ACCEPT,
    O_LOCAL
};
static const struct cli_opt OPTS[] = {
    {.id = O_MODEL,
     .names = "-m, --model",
     .kind = CLI_TEXT,
     .meta = "M.gguf",
     .help = "the model"},
    {.id = O_PROMPT,
     .names = "-p",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 1 << 30,
     .def = "512",
     .help = "pp<N>: a fresh sequence evaluates N random tokens in one call (0 = skip)"},
    {.id = O_GEN,
     .names = "-n",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 1 << 30,
     .def = "128",
     .help = "tg<N>: a fresh sequence evaluates N tokens one at a time (0 = skip)"},
    {.id = O_DEPTH,
     .names = "-d, --depth",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 1 << 30,
     .def = "0",
     .help = "each fresh sequence of pp and tg is first filled with N random tokens (not "
             "timed), so both run at depth N; the context holds N + max(-p, -n) tokens"},
    {.id = O_THREADS,
     .names = "-t",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 4096,
     .def = "2",
     .help = "threads"},
    {.id = O_REPS,
     .names = "--reps, -r",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 100,
     .def = "5",
     .help = "measured repetitions after one warm-up (mean ± sd)"},
    {.id = O_PARALLEL,
     .names = "--parallel, -np",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 256,
     .def = "1",
     .help = "tg<N> also with N sequences at once (slots of one instance, the server's "
             "`--slots`): every step decodes one token of each in one batched forward; prints "
             "their aggregate tokens/s and its ratio to the one-sequence tg of the same run"},
    CLI_OPTS_CHUNK,
    CLI_OPTS_KV,
    {.id = O_VERIFY,
     .names = "--verify",
     .kind = CLI_SWITCH,
     .help = "instead: speculative decoding's verify (k+1 tokens), rollback and MTP draft times "
             "for k = 1..4 relative to one decode step, after a -p token prompt",
     .group = "Speculative decoding"},
    {.id = O_ACCEPT,
     .names = "--accept",
     .kind = CLI_NUM,
     .meta = "L",
     .help = "--verify: also the k = 3 speed-up at L tokens per verification"},
    CLI_OPTS_BACKEND,
    {.id = O_LOCAL,
     .names = "--local",
     .kind = CLI_SWITCH,
     .help = "accepted and ignored (the measurement is always on this machine)",
     .group = "Compatibility"},
    {0},
};
const struct cli_command cli_cmd_bench_local = {
    .name = "bench-local",
    .run = cmd_bench_local,
    .usage = "-m M.gguf [-p 512] [-n 128] [-d 0] [-t 2] [--reps 5] [-np N] [--chunk N|auto] "
             "[--kv F] [--backend cpu|cuda]\n"
             "-m M.gguf --verify [--accept L] [--backend cpu|cuda]",
    .summary = "prompt and generation speed on this machine",
    .about = "prompt and generation speed on this CPU, or the GPU with --backend cuda, in the "
             "shape of llama-bench's pp/tg tests (tokens/s, mean ± sd over the repetitions after "
             "one warm-up; -d N runs both at depth N, named like llama-bench: `pp512 @ d4096`). "
             "On the CPU also the weight bytes read per generated token and this machine's "
             "memcpy bandwidth, hence the memory ceiling of generation — docs/perf/cpu.md; "
             "`SNUG_CPU` caps the kernel level (docs/debugging.md). The backend, KV format, "
             "context and chunk that ran go to stderr",
    .opts = OPTS,
};

int cmd_bench_local(int argc, char **argv) {
    const char *path = NULL;
    long n_p = 512, n_g = 128, n_d = 0, n_t = 2, reps = 5, n_par = 1;
    int verify = 0;
    double accept = 0;
    struct cli_backend bk = {0};
    struct cli_kv kv = CLI_KV_DEFAULT;
    int32_t chunk = SNUG_PLAN_CHUNK_AUTO;
    struct cli_args args;
    struct cli_val val;
    int r;
    cli_args_init(&args, &cli_cmd_bench_local, argc, argv);
    while ((r = cli_args_next(&args, &val)) > 0) {
        if (!cli_kv_opt(&args, r, &val, &kv)) return 2;
        cli_backend_opt(r, &val, &bk);
        cli_chunk_opt(r, &val, &chunk);
        switch (r) {
        case O_MODEL:
            path = val.s;
            break;
        case O_PROMPT:
            n_p = (long)val.i;
            break;
        case O_GEN:
            n_g = (long)val.i;
            break;
        case O_DEPTH:
            n_d = (long)val.i;
            break;
        case O_THREADS:
            n_t = (long)val.i;
            break;
        case O_REPS:
            reps = (long)val.i;
            break;
        case O_PARALLEL:
            n_par = (long)val.i;
            break;
        case O_VERIFY:
            verify = 1;
            break;
        case O_ACCEPT:
            accept = val.f;
            break;
        }
    }
    if (r != CLI_END) return CLI_EXIT(r);
    if (!path) return cli_usage_error(&cli_cmd_bench_local, "-m M.gguf is required");
    if (verify && (n_d > 0 || kv.k != SNUG_KV_F16 || kv.v != SNUG_KV_F16))
        return cli_usage_error(&cli_cmd_bench_local,
                               "-d and --kv apply to the pp/tg tests, not to --verify");
    if (verify && n_par > 1)
        return cli_usage_error(&cli_cmd_bench_local, "--parallel applies to tg, not to --verify");
    if (verify) return cli_bench_verify(path, (int)n_t, (int)reps, n_p, chunk, &bk, accept);
    if (n_d + SNUG_MAX(n_p, n_g) + 16 > (1L << 30))
        return cli_usage_error(&cli_cmd_bench_local,
                               "-d %ld with -p %ld / -n %ld: over 2^30 tokens", n_d, n_p, n_g);
    struct snug_err err = {0};
    struct snug_model *m = NULL;
    struct snug_model_params mp = {.path = path, .n_threads = (int)n_t};
    if (snug_model_load(&m, &mp, &err) != SNUG_OK) return cli_fail("bench-local", &err);
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = (int32_t)(n_d + SNUG_MAX(n_p, n_g)) + 16; /* each test is a fresh sequence */
    cp.n_threads = (int)n_t;
    cli_kv_params(&kv, &cp);
    cli_backend_params(&bk, &cp);
    cp.n_chunk =
        cli_chunk_resolve("bench-local", m, &cp, chunk, cp.backend == 1 ? bk.vram_budget : 0);
    /* with --parallel N the tests run on slot 0 of an instance of N slots, the N-sequence tg
     * on all of them */
    struct snug_ctx *ctx = NULL;
    struct snug_slots *slots = NULL;
    if (n_par > 1 && cp.n_chunk < n_par) cp.n_chunk = (int32_t)n_par; /* one step holds them */
    int irc = n_par > 1 ? snug_slots_init(&slots, m, &cp, (int32_t)n_par, &err)
                        : snug_ctx_init(&ctx, m, &cp, &err);
    if (irc != SNUG_OK) {
        snug_model_free(m);
        return cli_fail("bench-local", &err);
    }
    if (slots) ctx = snug_slots_ctx(slots, 0);
    char kvname[32];
    snug_kvfmt_code_name(cli_kv_code(&kv), kvname, sizeof kvname);
    fprintf(stderr, "snug bench-local: backend %s, kv %s, context %d, chunk %d, depth %ld\n",
            cp.backend == 1 ? "cuda" : "cpu", kvname, snug_ctx_n_ctx(ctx), cp.n_chunk, n_d);
    int32_t V = snug_model_n_vocab(m);
    float *logits = malloc(sizeof(float) * (size_t)V);
    /* the pp tokens, then the -d filler (random ids; the filler is evaluated, never timed) */
    long n_ids = SNUG_MAX(n_p, 1) + n_d;
    snug_token *ids = malloc(sizeof(snug_token) * (size_t)n_ids);
    double *v = calloc((size_t)reps, sizeof(double));
    int rc = logits && ids && v ? SNUG_OK : snug_err_set(&err, SNUG_ERR_NOMEM, "out of memory");
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (long i = 0; !rc && i < n_ids; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (snug_token)((rng >> 33) % (uint64_t)V);
    }
    const snug_token *fill = ids + SNUG_MAX(n_p, 1);
    double tg_one = 0; /* the one-sequence tg rate, for --parallel's ratio */
    char at[48] = "";  /* the test names' depth, as llama-bench writes it */
    if (n_d > 0) snprintf(at, sizeof at, " @ d%ld", n_d);
    if (cp.backend == 1)
        printf("model: %s  backend: cuda  kv: %s  chunk: %d\n", path, kvname, cp.n_chunk);
    else
        printf("model: %s  threads: %ld  kernels: %s  chunk: %d\n", path, n_t,
               snug_cpu_level_name(snug_cpu_level()), cp.n_chunk);
    if (n_p > 0 && !rc) {
        for (long r = -1; r < reps && !rc; r++) { /* r = -1: warm-up */
            snug_ctx_reset(ctx);
            if (n_d > 0)
                rc = snug_ctx_eval(ctx, fill, (int32_t)n_d, NULL, SNUG_EVAL_LOGITS_LAST, &err);
            if (rc) break;
            double t0 = snug_time_s();
            rc = snug_ctx_eval(ctx, ids, (int32_t)n_p, logits, SNUG_EVAL_LOGITS_LAST, &err);
            if (r >= 0) v[r] = (double)n_p / (snug_time_s() - t0);
        }
        double mean, sd;
        stats(v, (int)reps, &mean, &sd);
        if (!rc) printf("pp%ld%s: %.2f ± %.2f t/s\n", n_p, at, mean, sd);
    }
    if (n_g > 0 && !rc) {
        for (long r = -1; r < reps && !rc; r++) {
            snug_ctx_reset(ctx);
            if (n_d > 0)
                rc = snug_ctx_eval(ctx, fill, (int32_t)n_d, NULL, SNUG_EVAL_LOGITS_LAST, &err);
            if (rc) break;
            snug_token tok = ids[0];
            double t0 = snug_time_s();
            for (long i = 0; i < n_g && !rc; i++) {
                rc = snug_ctx_eval(ctx, &tok, 1, logits, SNUG_EVAL_LOGITS_LAST, &err);
                tok = (snug_token)((tok * 31 + 7) % V);
            }
            if (r >= 0) v[r] = (double)n_g / (snug_time_s() - t0);
        }
        double mean, sd;
        stats(v, (int)reps, &mean, &sd);
        if (!rc) printf("tg%ld%s: %.2f ± %.2f t/s\n", n_g, at, mean, sd);
        tg_one = mean;
        if (!rc && cp.backend != 1) { /* the ceiling of this CPU's memory bandwidth */
            uint64_t bpt = bytes_per_token(path, &err);
            double bw = memcpy_bandwidth((int)n_t);
            printf("bytes/token: %llu\n", (unsigned long long)bpt);
            printf("memcpy bandwidth: %.2f GB/s (read+write, %ld threads)\n", bw / 1e9, n_t);
            if (bpt && bw > 0)
                printf("tg ceiling: %.2f t/s; tg is %.1f%% of it\n", bw / (double)bpt,
                       100.0 * mean / (bw / (double)bpt));
        }
    }
    if (slots && n_g > 0 && !rc) rc = tg_parallel(slots, fill, n_d, n_g, reps, V, at, tg_one, &err);
    free(v), free(ids), free(logits);
    if (slots)
        snug_slots_free(slots);
    else
        snug_ctx_free(ctx);
    snug_model_free(m);
    return rc ? cli_fail("bench-local", &err) : 0;
}
