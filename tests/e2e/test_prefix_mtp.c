/* test_prefix_mtp.c — prefix-cache checkpoints of contexts with speculative decoding (MTP, k = 3)
 * on the trained fixture, through the engine's own copy callbacks (src/model/ctx_prefix.h) and
 * the real store (src/prefix), for the f32 and q8_0 caches (q8_0: the MTP block's cache is in
 * the trunk's format too):
 *  1. a cold prefill stores checkpoints at 150 and 278 (chunks of 64 ending there, as the
 *     server's schedule cuts them); a fresh context restored at 278 (KV rows and all) and
 *     prefilled to the end holds byte for byte the cold context's caches — trunk KV, DeltaNet
 *     states, MTP KV rows and the pending MTP row — and its greedy speculative decode gives the
 *     same tokens and the same acceptance statistics;
 *  2. a prompt that diverges at 200 restores the checkpoint at 150 (the KV rows come from the
 *     chain's first link) and equals a cold context of that prompt;
 *  3. the same restore in place (the cold context of case 1 after its decode: state only, its
 *     own KV rows truncated) equals it too;
 *  4. after a restart the disk tier (file format 2) restores the same;
 *  5. the plan's checkpoint sizes (snug_plan_cache_cfg) are the context's.
 * `test_prefix_mtp cuda` runs every context with backend 1 (`--backend cuda`): the callbacks'
 * device path (the state through download/upload; the KV rows per layer through the store's
 * staging page in the stores and restores, row by row in the cache comparisons). In CI over the
 * test stand-in libsnug_fakedev.so (SNUG_CUDA_LIB: the CPU ops behind the device paths, so the
 * caches are compared byte for byte with a CPU cold run's schedule); on a GPU with
 * libsnug_cuda.so (tests/device/run_prefix_device.sh), where restored equals cold on the device.
 * Read next: src/model/ctx_prefix.h, docs/prefix-cache.md. */
#define _DEFAULT_SOURCE /* mkdtemp */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function" /* the shared header's other helpers */
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation" /* paths are checked by the open */
#endif
#include "test_spec_common.h"

#include "kv/kvfmt.h"
#include "model/ctx_prefix.h"
#include "plan/plan_cache.h"
#include "prefix/prefix.h"
#include "sample/sample.h"
#include "speculative/speculative.h"

#include <dirent.h>
#include <unistd.h>

#define NP     300 /* prompt tokens */
#define NGEN   96  /* generated tokens */
#define CHUNK  64
#define KDRAFT 3

static struct snug_model *M;
static int32_t V;
static int32_t BACKEND; /* 0 = CPU, 1 = CUDA (argv[1] "cuda") */
static const int32_t CHECKPOINTS[] = {150, 278};

static struct snug_ctx *mk_ctx(int kv_type) {
    struct snug_err err = {0};
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = NP + NGEN + 16;
    cp.n_chunk = CHUNK;
    cp.kv_type = kv_type;
    cp.n_draft = KDRAFT;
    cp.backend = BACKEND;
    struct snug_ctx *c = NULL;
    int rc = snug_ctx_init(&c, M, &cp, &err);
    CHECKF(rc == SNUG_OK, "ctx init (backend %s): %s", BACKEND ? "cuda" : "cpu", err.msg);
    return c;
}

/* The callbacks over c, a device context's rows through the store's staging page (as the
 * server's engine lends it). */
static struct snug_prefix_io io_of(struct snug_ctx *c, const struct snug_prefix *pc,
                                   struct snug_ctx_prefix_state *st) {
    CHECK(snug_ctx_prefix_state(c, st));
    CHECK(!st->dev == !BACKEND);
    if (st->dev) {
        CHECK(pc->device_staging != NULL);
        st->staging = pc->device_staging;
        st->staging_bytes = pc->page_bytes;
    }
    return snug_ctx_prefix_io(st);
}

/* Prefill toks[from, to) in chunks of CHUNK counted from the last boundary, ending at every
 * checkpoint position; with pc, store a checkpoint at each. Logits of the last token to lg. */
static void prefill(struct snug_ctx *c, const snug_token *toks, int32_t from, int32_t to,
                    struct snug_prefix *pc, float *lg) {
    struct snug_err err = {0};
    int32_t pos = from;
    while (pos < to) {
        int32_t end = SNUG_MIN(pos + CHUNK, to);
        for (size_t i = 0; i < sizeof CHECKPOINTS / sizeof CHECKPOINTS[0]; i++)
            if (CHECKPOINTS[i] > pos && CHECKPOINTS[i] < end) end = CHECKPOINTS[i];
        int rc = snug_ctx_eval(c, toks + pos, end - pos, lg, SNUG_EVAL_LOGITS_LAST, &err);
        CHECKF(rc == SNUG_OK, "eval: %s", err.msg);
        pos = end;
        bool at_checkpoint = false;
        for (size_t i = 0; i < sizeof CHECKPOINTS / sizeof CHECKPOINTS[0]; i++)
            at_checkpoint |= CHECKPOINTS[i] == pos;
        if (pc && at_checkpoint) {
            struct snug_ctx_prefix_state st;
            struct snug_prefix_io io = io_of(c, pc, &st);
            CHECK(st.exportable && st.mtp_kv);
            bool stored = false;
            rc = snug_prefix_store(pc, toks, pos, &io, &stored, &err);
            CHECKF(rc == SNUG_OK && stored, "store at %d: %s", pos, err.msg);
        }
    }
}

/* Restore the best checkpoint for toks[0..NP) into c (want_kv: its KV rows too). */
static int32_t restore(struct snug_prefix *pc, struct snug_ctx *c, const snug_token *toks,
                       bool want_kv) {
    struct snug_err err = {0};
    struct snug_prefix_hit hit;
    snug_prefix_lookup(pc, toks, NP, &hit);
    if (hit.entry < 0) return 0;
    if (!want_kv) {
        CHECK(snug_ctx_prefix_in_place(c) >= hit.pos);
        CHECK(snug_ctx_prefix_set_past(c, toks, hit.pos, &err) == SNUG_OK);
    }
    struct snug_ctx_prefix_state st;
    struct snug_prefix_io io = io_of(c, pc, &st);
    int rc = snug_prefix_restore(pc, toks, &hit, want_kv, &io, &err);
    CHECKF(rc == SNUG_OK, "restore at %d: %s", hit.pos, err.msg);
    rc = snug_ctx_prefix_set_past(c, toks, hit.pos, &err);
    CHECKF(rc == SNUG_OK, "set_past: %s", err.msg);
    return hit.pos;
}

/* Greedy speculative decoding of NGEN tokens after a prefill whose last logits are lg. */
static struct snug_spec_stats decode(struct snug_ctx *c, const snug_token *prompt, const float *lg,
                                     snug_token *out) {
    struct snug_err err = {0};
    struct snug_sampler_params sp = snug_sampler_params_default();
    sp.temperature = 0.0f;
    struct snug_sampler *smp = NULL;
    CHECK(snug_sampler_init(&smp, &sp, V, &err) == SNUG_OK);
    snug_ctx_spec_stats_reset(c);
    int32_t cap = NP + NGEN + KDRAFT + 2;
    snug_token *hist = malloc((size_t)cap * sizeof *hist);
    memcpy(hist, prompt, NP * sizeof *hist);
    int rc = fx_spec_greedy(c, smp, hist, NP, cap, NGEN, lg, V, NULL, &err);
    CHECKF(rc == SNUG_OK, "spec step: %s", err.msg);
    memcpy(out, hist + NP, NGEN * sizeof *out);
    struct snug_spec_stats st;
    snug_ctx_spec_stats(c, &st);
    free(hist);
    snug_sampler_free(smp);
    return st;
}

/* Both contexts hold the same sequence: every byte of the state blob and of the KV rows (trunk
 * and MTP) of [0, n_past), read through the checkpoint callbacks; the first difference is
 * printed. */
static bool same_caches(struct snug_ctx *a, struct snug_ctx *b) {
    struct snug_ctx_prefix_state sa, sb;
    if (!snug_ctx_prefix_state(a, &sa) || !snug_ctx_prefix_state(b, &sb)) return false;
    if (sa.n_past != sb.n_past || !sa.exportable || !sb.exportable) {
        fprintf(stderr, "positions %d / %d, checkpoint states %d / %d\n", sa.n_past, sb.n_past,
                sa.exportable, sb.exportable);
        return false;
    }
    uint64_t sbytes = snug_ctx_prefix_state_bytes(&sa), rbytes = snug_ctx_prefix_row_bytes(&sa);
    uint64_t n = sbytes + rbytes * (uint64_t)sa.n_past;
    uint8_t *x = malloc(n), *y = malloc(n);
    struct snug_prefix_io ia = snug_ctx_prefix_io(&sa), ib = snug_ctx_prefix_io(&sb);
    bool ok = ia.state_out(ia.user, 0, x, sbytes) == 0 &&
              ib.state_out(ib.user, 0, y, sbytes) == 0 &&
              ia.kv_out(ia.user, 0, sa.n_past, x + sbytes) == 0 &&
              ib.kv_out(ib.user, 0, sb.n_past, y + sbytes) == 0;
    for (uint64_t i = 0; ok && i < n; i++)
        if (x[i] != y[i]) {
            if (i < sbytes)
                fprintf(stderr, "first difference: state byte %llu\n", (unsigned long long)i);
            else
                fprintf(stderr, "first difference: row %llu, byte %llu of %llu\n",
                        (unsigned long long)((i - sbytes) / rbytes),
                        (unsigned long long)((i - sbytes) % rbytes), (unsigned long long)rbytes);
            ok = false;
        }
    free(x);
    free(y);
    return ok;
}

static bool same_stats(const struct snug_spec_stats *a, const struct snug_spec_stats *b) {
    if (a->n_steps != b->n_steps || a->n_accepted != b->n_accepted ||
        a->n_emitted != b->n_emitted || a->n_drafted != b->n_drafted)
        return false;
    for (int i = 0; i < KDRAFT; i++)
        if (a->accepted_at[i] != b->accepted_at[i] || a->proposed_at[i] != b->proposed_at[i])
            return false;
    return true;
}

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strstr(de->d_name, ".snugpfx")) n++;
    if (d) closedir(d);
    return n;
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *de;
    char path[1200];
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        remove(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

static void run(const snug_token *prompt, int kv_type) {
    char kvn[24];
    snug_kvfmt_code_name(kv_type, kvn, sizeof kvn);
    struct snug_err err = {0};
    /* the store sized by the plan, as the server sizes it (src/server/http.c) */
    struct snug_plan_limits lim = snug_plan_limits_default();
    lim.n_ctx = NP + NGEN + 16;
    lim.n_chunk = CHUNK;
    lim.n_draft = KDRAFT;
    lim.kv_type = kv_type;
    lim.backend = BACKEND ? SNUG_BACKEND_CUDA : SNUG_BACKEND_CPU;
    struct snug_plan *plan = malloc(sizeof *plan);
    CHECK(snug_plan_make(&M->hp, NULL, &lim, plan, &err) == SNUG_OK);
    char dir[512];
    test_tmp_template(dir, sizeof dir, "snug_prefix_mtp");
    CHECK(mkdtemp(dir) != NULL);
    struct snug_plan_cache_flags fl = {.ram_bytes = 64u << 20, .disk_dir = dir};
    struct snug_prefix_cfg cfg;
    CHECKF(snug_plan_cache_cfg(&M->hp, plan, &fl, &cfg, &err) == SNUG_OK, "%s", err.msg);
    CHECKF(strstr(cfg.layout, " m1") != NULL, "layout %s", cfg.layout);
    struct snug_prefix pc;
    CHECKF(snug_prefix_init(&pc, &cfg, &err) == SNUG_OK, "%s", err.msg);

    float *lg = malloc((size_t)V * 4), *lg2 = malloc((size_t)V * 4);
    snug_token a[NGEN], b[NGEN];

    /* 5: the plan's sizes are the context's; the MTP cache is in the trunk's formats */
    struct snug_ctx *cold = mk_ctx(kv_type);
    struct snug_ctx_prefix_state st;
    CHECK(snug_ctx_prefix_state(cold, &st) && st.mtp_kv);
    CHECKF(cfg.state_bytes == snug_ctx_prefix_state_bytes(&st) &&
               cfg.kv_row_bytes == snug_ctx_prefix_row_bytes(&st) && snug_ctx_prefix_fits(&pc, &st),
           "%s: plan state %llu row %llu, context state %llu row %llu", kvn,
           (unsigned long long)cfg.state_bytes, (unsigned long long)cfg.kv_row_bytes,
           (unsigned long long)snug_ctx_prefix_state_bytes(&st),
           (unsigned long long)snug_ctx_prefix_row_bytes(&st));
    CHECK(st.mtp_kv->views[0].type == st.kv->views[0].type &&
          st.mtp_kv->views[0].k_fmt == st.kv->views[0].k_fmt &&
          st.mtp_kv->views[0].v_fmt == st.kv->views[0].v_fmt);

    /* 1: cold prefill storing checkpoints; restored at 278 */
    prefill(cold, prompt, 0, NP, &pc, lg);
    struct snug_ctx *warm = mk_ctx(kv_type);
    int32_t at = restore(&pc, warm, prompt, true);
    CHECKF(at == 278, "restored at %d", at);
    prefill(warm, prompt, at, NP, NULL, lg2);
    CHECKF(same_caches(cold, warm), "%s: restored at 278 + prefill: caches differ from cold", kvn);
    CHECK(!memcmp(lg, lg2, (size_t)V * 4));
    struct snug_spec_stats sa = decode(cold, prompt, lg, a);
    struct snug_spec_stats sb = decode(warm, prompt, lg2, b);
    CHECKF(!memcmp(a, b, sizeof a), "%s: restored greedy output differs", kvn);
    CHECKF(same_stats(&sa, &sb), "%s: acceptance differs: %lld/%lld vs %lld/%lld", kvn,
           (long long)sa.n_accepted, (long long)sa.n_drafted, (long long)sb.n_accepted,
           (long long)sb.n_drafted);
    printf("%s: restored at 278: caches and %d tokens identical, %.3f tokens per verification "
           "(%lld steps) in both\n",
           kvn, NGEN, (double)sa.n_emitted / (double)(sa.n_steps ? sa.n_steps : 1),
           (long long)sa.n_steps);
    CHECKF((double)sa.n_emitted / (double)sa.n_steps >= 1.5, "%s: acceptance collapsed", kvn);
    /* inside a speculative step's aftermath the state is no checkpoint: refused, not stored */
    CHECK(snug_ctx_prefix_state(cold, &st));
    if (!st.exportable) {
        struct snug_prefix_io io = snug_ctx_prefix_io(&st);
        bool stored = true;
        CHECK(snug_prefix_store(&pc, prompt, st.n_past, &io, &stored, &err) != SNUG_OK);
    }

    /* 2: a prompt diverging at 200 restores 150 (KV rows from the chain's first link) */
    snug_token *p2 = malloc(NP * sizeof *p2);
    memcpy(p2, prompt, NP * sizeof *p2);
    p2[200] = (p2[200] + 1) % V;
    struct snug_ctx *cold2 = mk_ctx(kv_type), *warm2 = mk_ctx(kv_type);
    prefill(cold2, p2, 0, NP, NULL, lg);
    at = restore(&pc, warm2, p2, true);
    CHECKF(at == 150, "restored at %d", at);
    prefill(warm2, p2, at, NP, NULL, lg2);
    CHECKF(same_caches(cold2, warm2), "%s: restored at 150: caches differ", kvn);

    /* 3: in place: the first cold context (decoded past 278) back to 150, state only */
    float *lg3 = malloc((size_t)V * 4);
    at = restore(&pc, cold, p2, false);
    CHECKF(at == 150, "in place: restored at %d", at);
    prefill(cold, p2, at, NP, NULL, lg3);
    CHECKF(same_caches(cold2, cold), "%s: restored in place: caches differ", kvn);
    snug_token c3[NGEN];
    sa = decode(cold2, p2, lg, a);
    sb = decode(warm2, p2, lg2, b);
    struct snug_spec_stats sc = decode(cold, p2, lg3, c3);
    CHECKF(!memcmp(a, b, sizeof a) && same_stats(&sa, &sb), "%s: restored at 150: decode differs",
           kvn);
    CHECKF(!memcmp(a, c3, sizeof a) && same_stats(&sa, &sc), "%s: in place: decode differs", kvn);
    free(lg3);
    snug_prefix_free(&pc);

    /* 4: restart on the disk tier */
    CHECK(count_files(dir) == 2);
    CHECKF(snug_prefix_init(&pc, &cfg, &err) == SNUG_OK, "%s", err.msg);
    struct snug_prefix_stats ps;
    snug_prefix_stats(&pc, &ps);
    CHECKF(ps.files_loaded == 2, "%llu files loaded", (unsigned long long)ps.files_loaded);
    struct snug_ctx *disk = mk_ctx(kv_type);
    at = restore(&pc, disk, prompt, true);
    CHECKF(at == 278, "disk: restored at %d", at);
    prefill(disk, prompt, at, NP, NULL, lg2);
    struct snug_ctx *cold3 = mk_ctx(kv_type);
    prefill(cold3, prompt, 0, NP, NULL, lg);
    CHECKF(same_caches(cold3, disk), "%s: restored from disk: caches differ", kvn);
    sa = decode(cold3, prompt, lg, a);
    sb = decode(disk, prompt, lg2, b);
    CHECKF(!memcmp(a, b, sizeof a) && same_stats(&sa, &sb), "%s: from disk: decode differs", kvn);
    snug_prefix_free(&pc);

    snug_ctx_free(cold);
    snug_ctx_free(warm);
    snug_ctx_free(cold2);
    snug_ctx_free(warm2);
    snug_ctx_free(disk);
    snug_ctx_free(cold3);
    free(p2);
    free(lg);
    free(lg2);
    free(plan);
    remove_dir(dir);
}

int main(int argc, char **argv) {
    BACKEND = argc > 1 && !strcmp(argv[1], "cuda");
    if ((argc > 1 && !BACKEND && strcmp(argv[1], "cpu")) || argc > 2) {
        fprintf(stderr, "usage: test_prefix_mtp [cpu|cuda]\n");
        return 2;
    }
    printf("backend %s\n", BACKEND ? "cuda" : "cpu");
    const char *dir = test_fixtures_dir();
    if (!dir) return TEST_DONE();
    if (!(M = fx_load_trained(dir))) return 1;
    V = snug_model_n_vocab(M);
    CHECK(snug_model_n_nextn(M) == 1);
    int32_t nppl = 0;
    int32_t *ppl = fx_read_ids(fx_path(dir, "trained", "ppl_ids.json"), &nppl);
    if (ppl && nppl >= 1024 + NP) {
        run(ppl + 1024, SNUG_KV_F32);
        if (!FX_SANITIZED) run(ppl + 1024, SNUG_KV_Q8_0);
    } else {
        CHECKF(0, "ppl_ids.json: %d tokens", nppl);
    }
    free(ppl);
    snug_model_free(M);
    return TEST_DONE();
}
