/* test_plan_kv.c — the KV + recurrent-state slot of the plan against both layouts that allocate
 * it, on the 27B and 35B-A3B preset shapes (no file, no device):
 *   - the host carve (src/kv/kv.c snug_kv_init: view table, per attention layer K then V, conv,
 *     delta, each 64-byte aligned, plus 64) and the CUDA backend's (cuda_backend.c layout_kv:
 *     per layer K then V, each 256-byte aligned, conv 256-aligned, delta; it allocates
 *     max(its need, the planned bytes)), both recomputed here from the shape;
 *   - for contexts 1 .. 262,144 (odd ones too: the solver picks any), every KV format and mixed
 *     K/V pair, 1 and 4 slots, MTP off and 3 drafts: the plan's per-slot KV items are
 *     snug_kv_bytes, which neither layout exceeds, so each allocates exactly the plan's bytes
 *     (the trunk's cache and the MTP block's one-layer cache on the card);
 *   - that some shapes do need more on the device than the host carve (q8_0 and friends at odd
 *     contexts): the case an older plan under-counted;
 *   - snug_backend_open refuses (SNUG_ERR_INTERNAL, not an abort) CUDA limits whose KV bytes are
 *     less than the device layout needs, before any module or memory is touched.
 * Read next: src/kv/kv.c, src/plan/plan.c, src/backend/loader.c. */
#include "backend/backend.h"
#include "kv/kv.h"
#include "kv/kvfmt.h"
#include "model/mtp.h"
#include "model/presets.h"
#include "plan/plan.h"
#include "test.h"

#include <stdint.h>
#include <string.h>

static size_t up(size_t x, size_t a) {
    return (x + a - 1) / a * a;
}

static size_t row(const struct snug_kv_shape *s, int which) {
    int k, v;
    if (s->fmt != SNUG_KV_F16 && s->fmt != SNUG_KV_F32 && snug_kvfmt_split(s->fmt, &k, &v))
        return (size_t)s->n_head_kv * snug_kvfmt_vec_bytes(which ? v : k, s->head_dim);
    return (size_t)s->n_head_kv * (size_t)s->head_dim * (s->type == SNUG_DTYPE_F16 ? 2 : 4);
}

/* snug_kv_init's carve. */
static size_t host_layout(const struct snug_kv_shape *s) {
    size_t b = up(sizeof(struct snug_kv_view) * (size_t)(s->n_attn + 1), 64);
    b += (size_t)s->n_attn *
         (up(row(s, 0) * (size_t)s->n_ctx, 64) + up(row(s, 1) * (size_t)s->n_ctx, 64));
    b += up((size_t)s->n_rec * (size_t)s->conv_elems * 4, 64);
    b += up((size_t)s->n_rec * (size_t)s->delta_elems * 4, 64);
    return b + 64;
}

/* cuda_backend.c layout_kv's need. */
static size_t device_layout(const struct snug_kv_shape *s) {
    size_t krow = up((size_t)s->n_ctx * row(s, 0), 256),
           vrow = up((size_t)s->n_ctx * row(s, 1), 256);
    size_t conv = up((size_t)s->n_rec * (size_t)s->conv_elems * 4, 256);
    size_t delta = (size_t)s->n_rec * (size_t)s->delta_elems * 4;
    return (krow + vrow) * (size_t)s->n_attn + conv + delta;
}

static const struct snug_plan_item *find(const struct snug_plan *p, const char *name) {
    for (int i = 0; i < p->n_items; i++)
        if (!strcmp(p->items[i].name, name)) return &p->items[i];
    return NULL;
}

static int n_device_over_host; /* shapes where the device layout outgrows the host carve */

/* One slot shape: plan = max of the layouts = what each allocates. */
static void check_slot(const struct snug_kv_shape *s, const char *tag) {
    size_t planned = snug_kv_bytes(s), host = host_layout(s), dev = device_layout(s);
    CHECKF(snug_kv_device_bytes(s) == dev, "%s: snug_kv_device_bytes %zu vs layout_kv %zu", tag,
           snug_kv_device_bytes(s), dev);
    CHECKF(planned == (host > dev ? host : dev), "%s: planned %zu, host %zu, device %zu", tag,
           planned, host, dev);
    /* the CUDA slot is max(need, planned) bytes, the host arena snug_kv_bytes: both the plan's */
    CHECKF(dev <= planned && host <= planned, "%s: a layout over the plan (%zu, %zu > %zu)", tag,
           host, dev, planned);
    if (dev > host) n_device_over_host++;
}

static void test_shapes(void) {
    const char *presets[] = {"qwen3.6-27b", "qwen3.6-35b-a3b"};
    const int32_t ctxs[] = {1, 3, 255, 4095, 4097, 65535, 65536, 100003, 176261, 262144};
    /* every format, and the mixed pairs the table lists */
    int32_t kvs[SNUG_KVFMT_N + 4];
    int nk = 0;
    for (int f = 0; f < SNUG_KVFMT_N; f++) kvs[nk++] = f;
    kvs[nk++] = snug_kvfmt_code(snug_kvfmt_parse("q8_0"), snug_kvfmt_parse("tq4"));
    kvs[nk++] = snug_kvfmt_code(snug_kvfmt_parse("fp8"), snug_kvfmt_parse("tq4"));
    kvs[nk++] = snug_kvfmt_code(snug_kvfmt_parse("q8_0"), snug_kvfmt_parse("tq3"));
    kvs[nk++] = snug_kvfmt_code(snug_kvfmt_parse("tq4"), snug_kvfmt_parse("tq3"));
    int n_plans = 0;
    for (size_t pi = 0; pi < sizeof presets / sizeof presets[0]; pi++) {
        struct snug_hparams hp;
        struct snug_err e = {0};
        CHECK(snug_preset_find(presets[pi], &hp, &e) == SNUG_OK);
        for (size_t ci = 0; ci < sizeof ctxs / sizeof ctxs[0]; ci++)
            for (int ki = 0; ki < nk; ki++)
                for (int slots = 1; slots <= 4; slots += 3)
                    for (int draft = 0; draft <= 3; draft += 3) {
                        struct snug_plan_limits l = snug_plan_limits_default();
                        l.backend = SNUG_BACKEND_CUDA;
                        l.n_ctx = ctxs[ci];
                        l.kv_type = kvs[ki];
                        l.n_slots = slots;
                        l.n_draft = draft;
                        l.n_threads = 1;
                        l.n_chunk = 512;
                        char tag[160], nb[32];
                        snprintf(tag, sizeof tag, "%s ctx %d kv %s slots %d mtp %d", presets[pi],
                                 ctxs[ci], snug_kvfmt_code_name(kvs[ki], nb, sizeof nb), slots,
                                 draft);
                        static struct snug_plan p;
                        if (snug_plan_make(&hp, NULL, &l, &p, &e) != SNUG_OK) {
                            CHECKF(0, "%s: plan: %s", tag, e.msg);
                            continue;
                        }
                        n_plans++;
                        check_slot(&p.kv_shape, tag);
                        const struct snug_plan_item *kv = find(&p, "kv cache (attention)");
                        const struct snug_plan_item *st = find(&p, "recurrent state");
                        CHECKF(kv && st &&
                                   kv->bytes + st->bytes ==
                                       (uint64_t)slots * snug_kv_bytes(&p.kv_shape),
                               "%s: the slot items are %d x snug_kv_bytes", tag, slots);
                        if (draft && hp.n_nextn > 0) {
                            struct snug_kv_shape ms = snug_spec_kv_shape(
                                &hp, (int32_t)l.n_ctx, (enum snug_kv_type)l.kv_type);
                            char mtag[200];
                            snprintf(mtag, sizeof mtag, "%s (mtp cache)", tag);
                            check_slot(&ms, mtag);
                            const struct snug_plan_item *m =
                                find(&p, "mtp kv cache + draft buffers");
                            CHECKF(m && m->bytes == (uint64_t)slots *
                                                        (snug_kv_bytes(&ms) +
                                                         snug_spec_dev_bytes(&hp, p.lim.n_chunk)),
                                   "%s: the mtp item on the card", tag);
                        }
                    }
    }
    printf("%d plans checked; %d slot shapes need more on the device than the host carve\n",
           n_plans, n_device_over_host);
    CHECKF(n_plans == 2 * 10 * 11 * 2 * 2, "%d plans", n_plans);
    CHECKF(n_device_over_host > 0, "no shape where the device layout outgrows the host's: the "
                                   "test no longer covers the case it was written for");
}

/* Limits that plan less than the device layout: refused with an error, nothing opened. */
static void test_refusal(void) {
    struct snug_kv_shape s = {.n_attn = 1,
                              .n_head_kv = 2,
                              .head_dim = 256,
                              .n_ctx = 3,
                              .type = SNUG_DTYPE_F16,
                              .fmt = (int32_t)snug_kvfmt_parse("q8_0")};
    struct snug_backend_limits lim = {.kv_shape = &s,
                                      .kv_bytes = snug_kv_device_bytes(&s) - 1,
                                      .n_slots = 1,
                                      .n_chunk = 1,
                                      .n_embd = 1};
    struct snug_be *be = (struct snug_be *)&lim; /* must come back NULL */
    struct snug_err e = {0};
    int rc = snug_backend_open(SNUG_BACKEND_CUDA, &be, NULL, &lim, NULL, &e);
    CHECKF(rc == SNUG_ERR_INTERNAL && be == NULL && strstr(e.msg, "memory plan has"), "rc %d: %s",
           rc, e.msg);
    /* the MTP cache is checked too (planned as snug_kv_bytes of its shape: always enough) */
    lim.kv_bytes = snug_kv_bytes(&s);
    lim.mtp_kv_shape = &s;
    CHECK(snug_kv_device_bytes(&s) <= snug_kv_bytes(&s));
}

int main(void) {
    test_shapes();
    test_refusal();
    return TEST_DONE();
}
