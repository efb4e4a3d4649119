/* test_spec_adapt.c — the draft length chosen per step (`--spec-adapt on`,
 * src/speculative/adapt.h) in the generation loop (src/engine/sequence.c) on the trained fixture,
 * whose MTP block is trained (a draft is accepted about three times in four):
 *  - greedy with the adaptation equals plain greedy, token for token, on held-out prompts of
 *    ppl_ids.json; the acceptance estimate stays high (> 0.5), the rule never chooses 0 drafts
 *    and the steps average more than 1.5 drafts; nothing is allocated while stepping;
 *  - greedy with a random draft count at every step (0..3, through snug_ctx_set_spec with the
 *    adaptation off) equals plain greedy too: the invariant holds for any sequence of k;
 *  - sampling at temperature 4 over the whole vocabulary, where a draft is almost never the
 *    token drawn: the estimate falls (< 0.25), and with the step times of a large model (the
 *    test gives each step's forward a time of 20 ms × (1 + 0.3 k), as the engine gives its
 *    shared step's: on this tiny model a draft costs a few per cent of a step, within the
 *    clock's noise under load, so whether one pays at a = 0.05 is a coin toss) the rule
 *    chooses 0 drafts and most steps are plain, one draft every 16 steps (the probe); the
 *    text is plain sampling's with the same seed (the acceptance draws with the sampler's
 *    generator, once per emitted token).
 * The rule's own cases (and a low acceptance choosing 0 on given numbers) are
 * tests/unit/test_speculative_adapt.c. Read next: src/speculative/adapt.h, docs/spec-decode.md.
 */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function" /* the shared header's other helpers */
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation" /* paths are checked by the open */
#endif
#include "test_spec_common.h"

#include "core/core.h"
#include "engine/sequence.h"

#define DRAFT 3
#define NP    32 /* prompt tokens */
#define NMAX  256

static struct snug_model *M;
static int64_t V;

struct out {
    snug_token tok[NMAX + 8];
    int32_t n;
};

static bool record(void *user, snug_token id, const char *text, size_t len,
                   const struct snug_seq_logprob *lp) {
    (void)text, (void)len, (void)lp;
    struct out *o = user;
    if (id >= 0 && o->n < NMAX + 8) o->tok[o->n++] = id;
    return false;
}

/* What one generation did besides its tokens. */
struct run {
    struct snug_spec_adapt ad;      /* the sequence's estimates and counts at the end */
    int64_t steps, rule_zero;       /* steps, steps where the rule chose 0 drafts */
    int64_t late_steps, late_plain; /* in the second half: steps, plain steps */
    uint64_t allocs;                /* heap allocations while stepping */
};

enum mode { PLAIN, ADAPT, RANDOM_K, HOT, HOT_PLAIN };

/* Generate n tokens after ppl[off .. off + NP) on a context of its own with DRAFT drafts at
 * most: PLAIN greedy without drafts, ADAPT greedy with the adaptation, RANDOM_K greedy with a
 * random draft count per step, HOT sampled at temperature 4 with the adaptation, HOT_PLAIN the
 * same without drafts. */
static bool generate(const int32_t *prompt, int32_t n, enum mode md, struct out *o, struct run *r) {
    struct snug_err err = {0};
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = NP + NMAX + DRAFT + 8;
    cp.n_chunk = 64;
    cp.n_threads = 2;
    cp.n_draft = DRAFT;
    struct snug_ctx *ctx = NULL;
    struct snug_seq seq;
    float *logits = malloc(sizeof(float) * (size_t)V * (DRAFT + 1));
    struct snug_step_row rows[DRAFT + 1];
    memset(o, 0, sizeof *o);
    memset(r, 0, sizeof *r);
    bool ok = logits && snug_ctx_init(&ctx, M, &cp, &err) == SNUG_OK &&
              snug_seq_init(&seq, M, ctx, &err) == SNUG_OK;
    struct snug_sampler_params sp = snug_sampler_params_default();
    sp.temperature = md == HOT || md == HOT_PLAIN ? 4.0f : 0.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.seed = 7;
    struct snug_seq_params p = {.sampler = sp,
                                .max_tokens = n,
                                .speculate = md != PLAIN && md != HOT_PLAIN,
                                .spec_adapt = md == ADAPT || md == HOT,
                                .on_token = record,
                                .user = o};
    ok = ok && snug_seq_begin(&seq, &p, &err) == SNUG_OK &&
         snug_ctx_eval(ctx, prompt, NP, logits, SNUG_EVAL_LOGITS_LAST, &err) == SNUG_OK;
    CHECKF(ok, "setup: %s", err.msg);
    if (ok) {
        snug_seq_evaluated(&seq, prompt, NP);
        snug_seq_first(&seq, logits);
    }
    uint64_t rng = 0x2545F4914F6CDD1DULL, allocs = snug_alloc_count();
    while (ok && seq.state == SNUG_SEQ_RUNNING) {
        if (md == RANDOM_K) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            ok = snug_ctx_set_spec(ctx, (int32_t)(rng % (DRAFT + 1)), &err) == SNUG_OK;
        }
        int32_t nr = ok ? snug_seq_rows(&seq, rows, DRAFT + 1, &err) : -1;
        ok = nr > 0 && snug_step(rows, nr, logits, &err) == SNUG_OK;
        if (md == HOT) snug_seq_step_time(&seq, 0.020 * (1 + 0.3 * (nr - 1))); /* (see above) */
        ok = ok && snug_seq_take(&seq, logits, &err) == SNUG_OK;
        CHECKF(ok, "step: %s", err.msg);
        r->steps++;
        r->rule_zero += seq.adapt.best == 0;
        if (o->n > n / 2) {
            r->late_steps++;
            r->late_plain += nr == 1;
        }
    }
    r->allocs = snug_alloc_count() - allocs;
    if (ctx) {
        r->ad = seq.adapt;
        snug_seq_flush(&seq, true);
        snug_seq_free(&seq);
    }
    snug_ctx_free(ctx);
    free(logits);
    return ok;
}

static int32_t same_prefix(const struct out *a, const struct out *b) {
    int32_t i = 0;
    while (i < a->n && i < b->n && a->tok[i] == b->tok[i]) i++;
    return i;
}

int main(void) {
    const char *dir = test_fixtures_dir();
    if (!dir) return TEST_DONE();
    if (!(M = fx_load_trained(dir))) return 1;
    V = snug_model_n_vocab(M);
    int32_t nppl = 0;
    int32_t *ppl = fx_read_ids(fx_path(dir, "trained", "ppl_ids.json"), &nppl);
    CHECKF(ppl && nppl >= 3072 + NP, "ppl_ids.json: %d ids", nppl);
    const int32_t NGEN = FX_SANITIZED ? 64 : 192;
    const int32_t offs[] = {0, 1024, 3072};
    const int n_prompts = FX_SANITIZED ? 1 : 3;
    static struct out plain, got;
    struct run r, r0;
    double drafts = 0, steps = 0;
    for (int pi = 0; ppl && pi < n_prompts; pi++) {
        const int32_t *prompt = ppl + offs[pi];
        generate(prompt, NGEN, PLAIN, &plain, &r0);
        CHECKF(plain.n == NGEN, "prompt @%d: plain greedy gave %d tokens", offs[pi], plain.n);
        generate(prompt, NGEN, ADAPT, &got, &r);
        int32_t same = same_prefix(&plain, &got);
        CHECKF(same == NGEN && got.n == NGEN,
               "prompt @%d: adaptive greedy differs from plain at token %d", offs[pi], same);
        CHECKF(r.ad.a > 0.5, "prompt @%d: acceptance estimate %.3f with the trained head", offs[pi],
               r.ad.a);
        CHECKF(r.rule_zero == 0, "prompt @%d: the rule chose 0 drafts at %lld of %lld steps",
               offs[pi], (long long)r.rule_zero, (long long)r.steps);
        CHECKF(r.allocs == 0, "prompt @%d: %llu allocations while stepping", offs[pi],
               (unsigned long long)r.allocs);
        printf("prompt @%-5d adaptive: %lld steps, %.2f drafts per step (by drafts 0..3: %lld "
               "%lld %lld %lld), acceptance estimate %.3f, identical %d/%d\n",
               offs[pi], (long long)r.ad.n_steps,
               (double)r.ad.n_drafts / (double)(r.ad.n_steps ? r.ad.n_steps : 1),
               (long long)r.ad.steps_at[0], (long long)r.ad.steps_at[1],
               (long long)r.ad.steps_at[2], (long long)r.ad.steps_at[3], r.ad.a, same, NGEN);
        drafts += (double)r.ad.n_drafts;
        steps += (double)r.ad.n_steps;
        if (pi == 0) { /* any sequence of draft counts: still plain greedy */
            generate(prompt, NGEN, RANDOM_K, &got, &r);
            same = same_prefix(&plain, &got);
            CHECKF(same == NGEN && got.n == NGEN,
                   "random draft counts: differs from plain greedy at token %d", same);
            CHECKF(r.ad.steps_at[0] > 0 && r.ad.steps_at[1] > 0 && r.ad.steps_at[3] > 0,
                   "random draft counts: steps with 0, 1, 3 drafts (%lld %lld %lld)",
                   (long long)r.ad.steps_at[0], (long long)r.ad.steps_at[1],
                   (long long)r.ad.steps_at[3]);
        }
    }
    CHECKF(steps > 0 && drafts / steps > 1.5, "%.2f drafts per step with the trained head",
           steps > 0 ? drafts / steps : 0.0);
    /* drafts that are almost never the token drawn: the adaptation stops drafting */
    if (ppl) {
        generate(ppl + 2048, 192, HOT_PLAIN, &plain, &r0);
        generate(ppl + 2048, 192, HOT, &got, &r);
        CHECKF(got.n == 192, "temperature 4: %d tokens", got.n);
        int32_t same = same_prefix(&plain, &got);
        CHECKF(same == 192 && plain.n == 192,
               "temperature 4, seed 7: with drafts differs from plain sampling at token %d", same);
        CHECKF(r.ad.a < 0.25, "temperature 4: acceptance estimate %.3f", r.ad.a);
        CHECKF(r.ad.best == 0, "temperature 4: the rule chooses %d drafts at the end", r.ad.best);
        CHECKF(r.late_plain * 10 >= r.late_steps * 8,
               "temperature 4: %lld of the last %lld steps plain", (long long)r.late_plain,
               (long long)r.late_steps);
        printf("temperature 4: %lld steps, by drafts 0..3: %lld %lld %lld %lld, acceptance "
               "estimate %.3f\n",
               (long long)r.ad.n_steps, (long long)r.ad.steps_at[0], (long long)r.ad.steps_at[1],
               (long long)r.ad.steps_at[2], (long long)r.ad.steps_at[3], r.ad.a);
    }
    free(ppl);
    snug_model_free(M);
    return TEST_DONE();
}
