/* test_mtp_device.c — speculative decoding with the MTP block on the CUDA backend, on the
 * trained fixture (the GPU's MTP paths); run by tests/device/run_mtp_device.sh on the device:
 *  1. step-1 MTP logits (snug_ctx_eval_mtp, --backend cuda) vs mtp_logits.f32, through the
 *     prompt path (chunk 512: bf16 GEMMs) and the decode path (chunk 4: f32 matvec); PASS at
 *     the GPU bound (median KL <= 1e-4, the e2e device bound), and says whether the CPU bound
 *     (1e-5) holds too;
 *  2. greedy output with 3 drafts equals plain greedy decoding on the GPU, 256 tokens, five
 *     prompts from ppl_ids.json (and k = 1, 4 and the recompute rollback on the first), no
 *     allocation during the steps; prints the mean tokens per verification and the largest
 *     difference between the verification logits and plain decoding's at the same positions
 *     (the rolled-back states are the plain ones: 0 or float noise of the T>1 kernels);
 *  3. the CPU backend's speculative greedy output agrees with the GPU's plain greedy output
 *     on the first prompt (at least 16 tokens, the e2e device bound; numerics differ);
 *  4. two CUDA contexts of one model share its device weights (the second takes about a
 *     weights' worth less device memory than the first) and compute the same logits, also
 *     after the first one is closed;
 *  5. with a second argument (a qwen35moe file with an MTP block, from `snug gen --preset
 *     demo-moe --set nextn_predict_layers=1`): greedy k = 3 == plain greedy for 64 tokens on
 *     the GPU (the MoE MTP forward and a rollback on almost every step: random weights).
 * Needs a GPU: built when nvcc is found, not registered with ctest. The last lines are
 * "N passed, N failed" and "mtp device: PASS|FAIL".
 * Usage: [SNUG_MTP_DEVICE_CPU=1] test_mtp_device FIXTURES_DIR [MOE_MTP.gguf] (holding
 * trained/{trained-f16.gguf,ids.json,mtp_logits.f32,ppl_ids.json}). Read next:
 * src/speculative/speculative.c, docs/spec-decode.md. */
#include "backend/backend.h"
#include "core/core.h"
#include "sample/sample.h"
#include "snug.h"
#include "speculative/speculative.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_pass, n_fail;
static int gpu = 1; /* SNUG_MTP_DEVICE_CPU=1: every "cuda" context on the CPU (checks the test) */
static struct snug_model *M;
static int32_t V;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s: ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    ok ? n_pass++ : n_fail++;
}

static char *path_of(const char *dir, const char *file) {
    static char buf[4][4096];
    static int i;
    char *p = buf[i++ % 4];
    snprintf(p, sizeof buf[0], "%s/trained/%s", dir, file);
    return p;
}

static void *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, f);
    b[*n] = 0;
    fclose(f);
    return b;
}

/* A JSON array of integers (the fixtures' ids files). */
static int32_t *read_ids(const char *path, int32_t *n) {
    size_t len = 0;
    char *s = slurp(path, &len), *p = s;
    *n = 0;
    if (!s) return NULL;
    int32_t *v = malloc(sizeof(int32_t) * (len / 2 + 1));
    while (*p) {
        if ((*p >= '0' && *p <= '9') || *p == '-') {
            v[(*n)++] = (int32_t)strtol(p, &p, 10);
        } else {
            p++;
        }
    }
    free(s);
    return v;
}

static int64_t argmax(const float *x, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* KL(ref ‖ got) per row: median, p99, max and top-1 agreement. */
static void kl_stats(const float *ref, const float *got, int64_t T, double *med, double *p99,
                     double *mx, double *top1) {
    double *kl = malloc(sizeof(double) * (size_t)T);
    int64_t same = 0;
    for (int64_t t = 0; t < T; t++) {
        const float *r = ref + t * V, *g = got + t * V;
        double mr = r[argmax(r, V)], mg = g[argmax(g, V)], sr = 0, sg = 0;
        for (int64_t i = 0; i < V; i++) sr += exp(r[i] - mr), sg += exp(g[i] - mg);
        double lsr = log(sr) + mr, lsg = log(sg) + mg, k = 0;
        for (int64_t i = 0; i < V; i++) {
            double lr = r[i] - lsr, lg = g[i] - lsg;
            k += exp(lr) * (lr - lg);
        }
        kl[t] = k;
        same += argmax(r, V) == argmax(g, V);
    }
    qsort(kl, (size_t)T, sizeof(double), cmpd);
    *med = kl[T / 2];
    *p99 = kl[(int64_t)ceil(0.99 * (double)T) - 1];
    *mx = kl[T - 1];
    *top1 = (double)same / (double)T;
    free(kl);
}

static struct snug_ctx *mk_ctx(int backend, int32_t n_draft, int32_t n_ctx, int32_t n_chunk) {
    struct snug_err err = {0};
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_chunk = n_chunk;
    cp.kv_type = SNUG_KV_F32;
    cp.n_draft = n_draft;
    cp.backend = backend && gpu;
    struct snug_ctx *c = NULL;
    if (snug_ctx_init(&c, M, &cp, &err) != SNUG_OK) {
        printf("FATAL: context (backend %d, n_draft %d): %s\n", backend, n_draft, err.msg);
        exit(2);
    }
    return c;
}

static void test_mtp_logits(const char *dir) {
    int32_t n = 0;
    int32_t *ids = read_ids(path_of(dir, "ids.json"), &n);
    size_t nb = 0;
    float *ref = slurp(path_of(dir, "mtp_logits.f32"), &nb);
    if (!ids || !ref || nb != (size_t)(n - 1) * (size_t)V * 4) {
        check(0, "fixture files ids.json / mtp_logits.f32 (%zu bytes for %d ids)", nb, n);
        return;
    }
    float *got = malloc((size_t)n * (size_t)V * 4);
    const int32_t chunks[] = {512, 4};
    for (int ci = 0; ci < 2; ci++) {
        struct snug_err err = {0};
        struct snug_ctx *c = mk_ctx(1, 1, n, chunks[ci]);
        int rc = snug_ctx_eval_mtp(c, ids, n, NULL, got, &err);
        check(rc == SNUG_OK, "eval_mtp on cuda, chunk %d%s%s", chunks[ci], rc ? ": " : "",
              rc ? err.msg : "");
        if (rc == SNUG_OK) {
            double med, p99, mx, top1;
            kl_stats(ref, got, n - 1, &med, &p99, &mx, &top1);
            printf("mtp logits cuda chunk %-4d KL median %.3g p99 %.3g max %.3g top-1 %.2f%% "
                   "(CPU bound 1e-5 %s)\n",
                   chunks[ci], med, p99, mx, 100 * top1, med <= 1e-5 ? "met" : "NOT met");
            check(med <= 1e-4 && p99 <= 1e-3 && top1 >= 0.99,
                  "mtp logits chunk %d: median KL %.3g <= 1e-4 (GPU bound), p99 %.3g <= 1e-3, "
                  "top-1 %.4f >= 0.99",
                  chunks[ci], med, p99, top1);
        }
        snug_ctx_free(c);
    }
    free(got);
    free(ref);
    free(ids);
}

/* Greedy decoding of n tokens after the prompt: plain (k = 0, n_draft 0) or speculative with
 * k drafts; tokens into out, and for every emitted token the logits row it was chosen from
 * into lg_out ([n][V]). Returns the stats (speculative). */
static struct snug_spec_stats greedy(int backend, const int32_t *prompt, int32_t np, int32_t n,
                                     int32_t k, bool recompute, int32_t *out, float *lg_out) {
    struct snug_err err = {0};
    struct snug_ctx *c = mk_ctx(backend, k, np + n + 8, 64);
    struct snug_sampler_params spp = snug_sampler_params_default();
    spp.temperature = 0;
    struct snug_sampler *s = NULL;
    snug_sampler_init(&s, &spp, V, &err);
    snug_spec_set_rollback(c, recompute);
    int32_t cap = np + n + k + 2;
    int32_t *hist = malloc((size_t)cap * 4);
    memcpy(hist, prompt, (size_t)np * 4);
    float *lg = malloc((size_t)V * 4);
    int rc = snug_ctx_eval(c, prompt, np, lg, SNUG_EVAL_LOGITS_LAST, &err);
    int32_t nh = np;
    memcpy(lg_out, lg, (size_t)V * 4);
    hist[nh++] = (int32_t)argmax(lg, V);
    uint64_t allocs = snug_alloc_count();
    while (rc == SNUG_OK && nh - np < n) {
        if (k == 0) {
            rc = snug_ctx_eval(c, &hist[nh - 1], 1, lg, SNUG_EVAL_LOGITS_LAST, &err);
            if (rc) break;
            if (nh - np < n) memcpy(lg_out + (size_t)(nh - np) * V, lg, (size_t)V * 4);
            hist[nh++] = (int32_t)argmax(lg, V);
            continue;
        }
        int32_t nn = 0, n0 = nh;
        rc = snug_spec_step(c, s, hist, nh, cap, &nn, &err);
        /* rows 0..nn-1 of the verification chose hist[n0 .. n0+nn-1] */
        const float *rows = snug_ctx_spec(c)->logits;
        for (int32_t i = 0; i < nn && n0 + i - np < n; i++)
            memcpy(lg_out + (size_t)(n0 + i - np) * V, rows + (size_t)i * V, (size_t)V * 4);
        nh += nn;
    }
    if (rc) printf("FATAL: greedy (backend %d, k %d): %s\n", backend, k, err.msg);
    check(rc == SNUG_OK && snug_alloc_count() == allocs,
          "greedy backend %s k=%d%s: ran, %llu allocations during the steps",
          backend ? "cuda" : "cpu", k, recompute ? " (recompute)" : "",
          (unsigned long long)(snug_alloc_count() - allocs));
    memcpy(out, hist + np, (size_t)n * 4);
    struct snug_spec_stats st;
    snug_ctx_spec_stats(c, &st);
    free(lg);
    free(hist);
    snug_sampler_free(s);
    snug_ctx_free(c);
    return st;
}

/* Compare a speculative run with the plain one: identical prefix length, and the largest
 * logit difference over that prefix; at a divergence, the plain run's top-2 margin there. */
static int32_t compare(const char *what, const int32_t *a, const int32_t *b, const float *la,
                       const float *lb, int32_t n, double *maxd) {
    int32_t same = 0;
    while (same < n && a[same] == b[same]) same++;
    *maxd = 0;
    for (int32_t t = 0; t < SNUG_MIN(same + 1, n); t++)
        for (int64_t i = 0; i < V; i++)
            *maxd = fmax(*maxd, fabs((double)la[t * V + i] - (double)lb[t * V + i]));
    if (same < n) {
        const float *r = la + (size_t)same * V;
        printf("  %s: diverges at token %d: plain %d (logit %.6f) vs spec %d (plain logit %.6f)\n",
               what, same, a[same], r[a[same]], b[same], r[b[same]]);
    }
    return same;
}

static void test_greedy(const int32_t *ppl, int32_t nppl) {
    const int32_t NP = 32, NGEN = 256;
    const int32_t offs[] = {0, 1024, 2048, 3072, 512};
    int32_t *a = malloc((size_t)NGEN * 4), *b = malloc((size_t)NGEN * 4);
    float *la = malloc((size_t)NGEN * V * 4), *lb = malloc((size_t)NGEN * V * 4);
    long long steps = 0, emitted = 0, prop[3] = {0}, acc[3] = {0};
    double worst = 0;
    for (int pi = 0; pi < 5; pi++) {
        if (offs[pi] + NP > nppl) continue;
        const int32_t *prompt = ppl + offs[pi];
        greedy(1, prompt, NP, NGEN, 0, false, a, la);
        struct snug_spec_stats st = greedy(1, prompt, NP, NGEN, 3, false, b, lb);
        double maxd = 0;
        char what[64];
        snprintf(what, sizeof what, "prompt @%d k=3", offs[pi]);
        int32_t same = compare(what, a, b, la, lb, NGEN, &maxd);
        worst = fmax(worst, maxd);
        printf("prompt @%-5d k=3: %lld verifications, %.3f tokens per verification, identical "
               "%d/%d, max |logit diff| vs plain %.3g\n",
               offs[pi], (long long)st.n_steps, (double)st.n_emitted / (double)st.n_steps, same,
               NGEN, maxd);
        check(same == NGEN, "prompt @%d: speculative greedy (k=3) == plain greedy on cuda, %d/%d",
              offs[pi], same, NGEN);
        steps += st.n_steps, emitted += st.n_emitted;
        for (int i = 0; i < 3; i++) prop[i] += st.proposed_at[i], acc[i] += st.accepted_at[i];
        if (pi == 0) { /* other draft lengths and the recompute rollback */
            const int32_t ks[] = {1, 4, 3};
            for (int j = 0; j < 3; j++) {
                greedy(1, prompt, NP, NGEN, ks[j], j == 2, b, lb);
                snprintf(what, sizeof what, "k=%d%s", ks[j], j == 2 ? " recompute" : "");
                same = compare(what, a, b, la, lb, NGEN, &maxd);
                /* the recompute strategy verifies with the chunked rule and recomputes the
                 * accepted tokens as a chunk: float noise vs plain decoding by design, so it
                 * must agree, not be bit-identical (the snapshot default must be) */
                check(j == 2 ? same >= 64 : same == NGEN,
                      "prompt @0 %s: == plain greedy, %d/%d (max |logit diff| %.3g)%s", what, same,
                      NGEN, maxd, j == 2 ? " [recompute: >= 64 required]" : "");
            }
            /* the CPU backend drafts the same and decodes the same tokens */
            greedy(0, prompt, NP, NGEN, 3, false, b, lb);
            same = compare("cpu vs cuda", a, b, la, lb, NGEN, &maxd);
            printf("prompt @0: cpu spec vs cuda plain greedy: identical %d/%d, max |logit diff| "
                   "%.3g\n",
                   same, NGEN, maxd);
            check(same >= 16, "cpu and cuda greedy agree on >= 16 tokens (%d)", same);
        }
    }
    double mean = steps ? (double)emitted / (double)steps : 0;
    printf("cuda k=3 greedy over 5 prompts: mean %.3f tokens per verification (CPU 3.229, "
           "reference 3.05); acceptance by draft position %.3f %.3f %.3f; max |logit diff| "
           "vs plain %.3g\n",
           mean, prop[0] ? (double)acc[0] / prop[0] : 0, prop[1] ? (double)acc[1] / prop[1] : 0,
           prop[2] ? (double)acc[2] / prop[2] : 0, worst);
    check(mean >= 2.7, "mean acceptance length %.3f >= 2.7", mean);
    free(a), free(b), free(la), free(lb);
}

/* Item 4 of the file comment (cudaMemGetInfo around two context opens). */
static void test_shared_weights(const char *dir) {
    int32_t n = 0;
    int32_t *ids = read_ids(path_of(dir, "ids.json"), &n);
    size_t wb = 0;
    free(slurp(path_of(dir, "trained-f16.gguf"), &wb));
    if (!ids || n < 2 || !gpu) {
        free(ids);
        return;
    }
    struct snug_err err = {0};
    size_t f0 = 0, f1 = 0, f2 = 0, tot = 0;
    const struct snug_backend_module *cuda = NULL;
    if (snug_backend_module_get(SNUG_BACKEND_CUDA, &cuda, &err)) {
        free(ids);
        return;
    }
    cuda->mem_info(&f0, &tot, &err);
    struct snug_ctx *a = mk_ctx(1, 0, n, 64);
    cuda->mem_info(&f1, &tot, &err);
    struct snug_ctx *b = mk_ctx(1, 0, n, 64);
    cuda->mem_info(&f2, &tot, &err);
    float *la = malloc((size_t)V * 4), *lb = malloc((size_t)V * 4), *lc = malloc((size_t)V * 4);
    int rc = snug_ctx_eval(a, ids, n, la, SNUG_EVAL_LOGITS_LAST, &err);
    if (!rc) rc = snug_ctx_eval(b, ids, n, lb, SNUG_EVAL_LOGITS_LAST, &err);
    snug_ctx_free(a);
    snug_ctx_reset(b);
    if (!rc) rc = snug_ctx_eval(b, ids, n, lc, SNUG_EVAL_LOGITS_LAST, &err);
    snug_ctx_free(b);
    double d1 = ((double)f0 - (double)f1) / 1048576.0, d2 = ((double)f1 - (double)f2) / 1048576.0;
    printf("shared weights: first context took %.1f MiB of device memory, second %.1f MiB "
           "(weights file %.1f MiB)\n",
           d1, d2, (double)wb / 1048576.0);
    check(rc == SNUG_OK && !memcmp(la, lb, (size_t)V * 4) && !memcmp(la, lc, (size_t)V * 4),
          "two contexts on shared weights: same logits, also after the first closes%s%s",
          rc ? ": " : "", rc ? err.msg : "");
    check(d1 - d2 >= 0.5 * (double)wb / 1048576.0,
          "the second context does not upload the weights again (%.1f vs %.1f MiB)", d2, d1);
    free(la), free(lb), free(lc), free(ids);
}

/* Item 5 of the file comment. */
static void test_moe(const char *path) {
    struct snug_err err = {0};
    struct snug_model *dense = M;
    int32_t V0 = V;
    struct snug_model_params mp = {.path = path};
    if (snug_model_load(&M, &mp, &err)) {
        check(0, "moe MTP model %s: %s", path, err.msg);
        M = dense;
        return;
    }
    V = snug_model_n_vocab(M);
    enum { NP = 16, NG = 64 };
    int32_t prompt[NP], a[NG], b[NG];
    for (int i = 0; i < NP; i++) prompt[i] = (i * 37 + 5) % V;
    float *la = malloc((size_t)NG * V * 4), *lb = malloc((size_t)NG * V * 4);
    greedy(1, prompt, NP, NG, 0, false, a, la);
    struct snug_spec_stats st = greedy(1, prompt, NP, NG, 3, false, b, lb);
    double maxd = 0;
    int32_t same = compare("moe k=3", a, b, la, lb, NG, &maxd);
    printf("moe with a generated MTP block on cuda: identical %d/%d, %.3f tokens per "
           "verification, max |logit diff| vs plain %.3g\n",
           same, (int)NG, (double)st.n_emitted / (double)(st.n_steps ? st.n_steps : 1), maxd);
    check(same == NG, "moe: speculative greedy == plain greedy on cuda, %d/%d", same, (int)NG);
    free(la), free(lb);
    snug_model_free(M);
    M = dense;
    V = V0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_mtp_device FIXTURES_DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    gpu = !getenv("SNUG_MTP_DEVICE_CPU");
    if (!gpu) printf("SNUG_MTP_DEVICE_CPU set: every context below runs on the CPU\n");
    struct snug_err err = {0};
    struct snug_model_params mp = {.path = path_of(dir, "trained-f16.gguf")};
    if (snug_model_load(&M, &mp, &err)) {
        printf("FATAL: %s\n", err.msg);
        return 2;
    }
    V = snug_model_n_vocab(M);
    test_mtp_logits(dir);
    test_shared_weights(dir);
    int32_t nppl = 0;
    int32_t *ppl = read_ids(path_of(dir, "ppl_ids.json"), &nppl);
    if (ppl && nppl > 64)
        test_greedy(ppl, nppl);
    else
        check(0, "ppl_ids.json readable");
    free(ppl);
    if (argc > 2) test_moe(argv[2]);
    snug_model_free(M);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    printf("mtp device: %s\n", n_fail ? "FAIL" : "PASS");
    return n_fail ? 1 : 0;
}
