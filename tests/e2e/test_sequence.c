/* test_sequence.c — the generation loop (src/engine/sequence.h) on the trained fixture: three
 * speculative sequences (slots of one pool, --spec-draft 3) stepped together, their rows in ONE
 * snug_step per step (verifications of several sequences in one forward), against each sequence
 * run alone on a context of its own, and against plain decoding.
 *  - batched == alone, token for token: greedy, seeded sampling at temperature 1 (the verify
 *    rows' logits are the lone run's bit for bit, so the acceptance draws are the same too),
 *    and under a constraint that bans every token id divisible by 7 (asked at every row);
 *  - greedy with drafts == greedy without (the speculative invariant on the CPU);
 *  - one trunk forward per step (snug_ctx_n_forwards summed over the slots), and steps that hold
 *    the verifications of all three sequences;
 *  - max_tokens ends a sequence in the middle of a verification's emitted tokens, exactly;
 *  - no allocation while stepping.
 * Read next: src/engine/sequence.c, src/engine/engine.c (the same loop over the server's slots). */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function" /* the shared header's other helpers */
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation" /* paths are checked by the open */
#endif
#include "test_fixtures_common.h"

#include "core/core.h"
#include "engine/sequence.h"
#include "engine/slots.h"

#define NS    3  /* sequences */
#define NGEN  40 /* tokens each (one of them stops earlier) */
#define DRAFT 3

/* What one sequence emitted, and what its constraint was told. */
struct out {
    snug_token tok[NGEN + 8];
    int32_t n, n_accepted;
};

static bool record(void *user, snug_token id, const char *text, size_t len,
                   const struct snug_seq_logprob *lp) {
    (void)text, (void)len, (void)lp;
    struct out *o = user;
    if (id >= 0 && o->n < NGEN + 8) o->tok[o->n++] = id;
    return false;
}

/* The constraint: token ids divisible by 7 are banned (masked at every row it is asked). */
static void ban7_mask(void *user, float *logits, int32_t V) {
    (void)user;
    for (int32_t i = 0; i < V; i += 7) logits[i] = -INFINITY;
}
static void ban7_accept(void *user, snug_token id) {
    ((struct out *)user)->n_accepted++;
    (void)id;
}

enum mode { GREEDY, SAMPLED, BANNED };

static struct snug_seq_params params(enum mode md, int i, bool speculate, struct out *o,
                                     struct snug_spec_constraint *con) {
    struct snug_sampler_params sp = snug_sampler_params_default();
    sp.temperature = md == SAMPLED ? 1.0f : 0.0f;
    sp.seed = 42 + (uint64_t)i;
    *con = (struct snug_spec_constraint){.user = o, .mask = ban7_mask, .accept = ban7_accept};
    return (struct snug_seq_params){.sampler = sp,
                                    .max_tokens = i == 1 ? 7 : NGEN,
                                    .constraint = md == BANNED ? con : NULL,
                                    .speculate = speculate,
                                    .on_token = record,
                                    .user = o};
}

/* The prompt of sequence i: a slice of the fixture's ids, a different length each. */
static const int32_t P0[NS] = {0, 20, 41}, PN[NS] = {9, 17, 13};

/* Prefill seq i's prompt on its context and pick its first token. */
static bool start(struct snug_seq *s, const int32_t *ids, int i, float *logits) {
    struct snug_err err = {0};
    snug_ctx_reset(s->ctx);
    snug_seq_set_past(s, NULL, 0);
    if (snug_ctx_eval(s->ctx, ids + P0[i], PN[i], logits, SNUG_EVAL_LOGITS_LAST, &err)) {
        CHECKF(0, "prompt %d: %s", i, err.msg);
        return false;
    }
    snug_seq_evaluated(s, ids + P0[i], PN[i]);
    snug_seq_first(s, logits);
    return true;
}

/* The NS sequences stepped together: every step is one snug_step of all their rows. */
static void run_batched(struct snug_model *m, struct snug_slots *pool, const int32_t *ids,
                        enum mode md, struct out *outs, int *n_multi) {
    struct snug_err err = {0};
    int64_t V = snug_model_n_vocab(m);
    struct snug_seq seq[NS];
    struct snug_spec_constraint con[NS];
    float *logits = malloc(sizeof(float) * (size_t)V * NS * (DRAFT + 1));
    struct snug_step_row rows[NS * (DRAFT + 1)];
    int32_t row0[NS], nrows[NS];
    bool ok = logits != NULL;
    for (int i = 0; i < NS; i++) {
        memset(&outs[i], 0, sizeof outs[i]);
        ok = ok && snug_seq_init(&seq[i], m, snug_slots_ctx(pool, i), &err) == SNUG_OK;
        struct snug_seq_params p = params(md, i, true, &outs[i], &con[i]);
        ok = ok && snug_seq_begin(&seq[i], &p, &err) == SNUG_OK && start(&seq[i], ids, i, logits);
    }
    CHECKF(ok, "batched setup: %s", err.msg);
    *n_multi = 0;
    uint64_t allocs = snug_alloc_count();
    int steps = 0, bad_forwards = 0;
    while (ok) {
        int32_t n = 0, n_verify = 0;
        for (int i = 0; i < NS; i++) {
            row0[i] = n;
            nrows[i] = snug_seq_rows(&seq[i], rows + n, DRAFT + 1, &err);
            CHECKF(nrows[i] >= 0, "rows: %s", err.msg);
            if (nrows[i] < 0) nrows[i] = 0;
            n += nrows[i];
            n_verify += nrows[i] > 1;
        }
        if (n == 0) break;
        uint64_t fw0 = 0, fw1 = 0;
        for (int i = 0; i < NS; i++) fw0 += snug_ctx_n_forwards(snug_slots_ctx(pool, i));
        if (snug_step(rows, n, logits, &err) != SNUG_OK) {
            CHECKF(0, "step: %s", err.msg);
            break;
        }
        for (int i = 0; i < NS; i++) fw1 += snug_ctx_n_forwards(snug_slots_ctx(pool, i));
        bad_forwards += fw1 - fw0 != 1;
        *n_multi += n_verify == NS;
        steps++;
        for (int i = 0; i < NS; i++)
            if (nrows[i] > 0 && snug_seq_take(&seq[i], logits + (int64_t)row0[i] * V, &err)) {
                CHECKF(0, "take: %s", err.msg);
                ok = false;
            }
    }
    CHECKF(snug_alloc_count() == allocs, "%llu allocations while stepping",
           (unsigned long long)(snug_alloc_count() - allocs));
    CHECKF(bad_forwards == 0, "%d of %d steps ran other than one trunk forward", bad_forwards,
           steps);
    for (int i = 0; i < NS; i++) {
        CHECKF(seq[i].state == SNUG_SEQ_LENGTH || seq[i].state == SNUG_SEQ_STOP,
               "sequence %d ended (state %d)", i, seq[i].state);
        snug_seq_flush(&seq[i], true);
        snug_seq_free(&seq[i]);
    }
    free(logits);
}

/* Sequence i alone, on a context of its own (drafts or plain), stepped by itself. */
static void run_alone(struct snug_model *m, const int32_t *ids, enum mode md, int i, bool speculate,
                      struct out *o) {
    struct snug_err err = {0};
    int64_t V = snug_model_n_vocab(m);
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = 256;
    cp.n_chunk = 64;
    cp.n_threads = 2;
    cp.n_draft = speculate ? DRAFT : 0;
    struct snug_ctx *ctx = NULL;
    struct snug_seq seq;
    struct snug_spec_constraint con;
    float *logits = malloc(sizeof(float) * (size_t)V * (DRAFT + 1));
    struct snug_step_row rows[DRAFT + 1];
    memset(o, 0, sizeof *o);
    bool ok = logits && snug_ctx_init(&ctx, m, &cp, &err) == SNUG_OK &&
              snug_seq_init(&seq, m, ctx, &err) == SNUG_OK;
    struct snug_seq_params p = params(md, i, speculate, o, &con);
    ok = ok && snug_seq_begin(&seq, &p, &err) == SNUG_OK && start(&seq, ids, i, logits);
    CHECKF(ok, "alone setup: %s", err.msg);
    while (ok && seq.state == SNUG_SEQ_RUNNING) {
        int32_t n = snug_seq_rows(&seq, rows, DRAFT + 1, &err);
        ok = n > 0 && snug_step(rows, n, logits, &err) == SNUG_OK &&
             snug_seq_take(&seq, logits, &err) == SNUG_OK;
        CHECKF(ok, "alone step: %s", err.msg);
    }
    if (ctx) snug_seq_free(&seq);
    snug_ctx_free(ctx);
    free(logits);
}

static bool same(const struct out *a, const struct out *b) {
    return a->n == b->n && !memcmp(a->tok, b->tok, (size_t)a->n * sizeof(snug_token));
}

int main(void) {
    const char *dir = test_fixtures_dir();
    if (!dir) return TEST_DONE();
    struct snug_err err = {0};
    struct snug_model *m = NULL;
    struct snug_model_params mp = {.path = fx_path(dir, "trained", "trained-f16.gguf"),
                                   .n_threads = 2};
    int32_t n_ids = 0;
    int32_t *ids = fx_read_ids(fx_path(dir, "trained", "ids.json"), &n_ids);
    if (!ids || n_ids < 60 || snug_model_load(&m, &mp, &err) != SNUG_OK) {
        CHECKF(0, "fixture: %d ids, %s", n_ids, err.msg);
        free(ids);
        return TEST_DONE();
    }
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = 256;
    cp.n_chunk = 64;
    cp.n_threads = 2;
    cp.n_draft = DRAFT;
    struct snug_slots *pool = NULL;
    CHECKF(snug_slots_init(&pool, m, &cp, NS, &err) == SNUG_OK, "pool: %s", err.msg);
    const char *names[] = {"greedy", "sampled (temperature 1)", "banned ids % 7"};
    struct out bat[NS], alone, plain;
    for (int md = GREEDY; pool && md <= BANNED; md++) {
        int n_multi = 0;
        run_batched(m, pool, ids, (enum mode)md, bat, &n_multi);
        CHECKF(n_multi > 0, "%s: a step held the verifications of all %d sequences", names[md], NS);
        for (int i = 0; i < NS; i++) {
            int want = i == 1 ? 7 : NGEN;
            CHECKF(bat[i].n == want, "%s: sequence %d emitted %d tokens, max_tokens %d", names[md],
                   i, bat[i].n, want);
            run_alone(m, ids, (enum mode)md, i, true, &alone);
            CHECKF(same(&bat[i], &alone), "%s: sequence %d batched == alone (%d vs %d tokens)",
                   names[md], i, bat[i].n, alone.n);
            if (md != SAMPLED) { /* drafts change no greedy token */
                run_alone(m, ids, (enum mode)md, i, false, &plain);
                CHECKF(same(&bat[i], &plain), "%s: sequence %d with drafts == plain decoding",
                       names[md], i);
            }
            if (md == BANNED) {
                bool clean = true;
                for (int t = 0; t < bat[i].n; t++) clean = clean && bat[i].tok[t] % 7 != 0;
                CHECKF(clean, "banned: sequence %d emitted no id divisible by 7", i);
                /* (a stop inside a verification's tokens: the constraint was told the rest
                 * of them too, at most DRAFT; the job ends there) */
                CHECKF(bat[i].n_accepted >= bat[i].n && bat[i].n_accepted <= bat[i].n + DRAFT,
                       "banned: accept() told %d tokens, %d emitted", bat[i].n_accepted, bat[i].n);
            }
        }
    }
    snug_slots_free(pool);
    snug_model_free(m);
    free(ids);
    return TEST_DONE();
}
