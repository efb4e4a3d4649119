/* test_plan_shard.c — tensor parallelism's arithmetic (src/plan/shard.c) on the real presets'
 * shapes (qwen3.6-27b, qwen3.6-35b-a3b, the fixtures' demo shapes) and odd ones:
 *   - the heads each rank owns, written out by hand for the 27B over 2 ranks (query, KV,
 *     DeltaNet key heads and the three value-head ranges that GGUF's tiled value order gives);
 *   - every query head of a rank reads a KV head the rank holds (GQA, also when the KV heads
 *     are replicated because Hkv < R), and every local DeltaNet value head reads, under the
 *     rank's own tiling (j' mod Nk/R), the key head the global tiling (j mod Nk) gives;
 *   - every tensor of every recipe is covered exactly once by the slices the ranks own (each
 *     element of the split dimension in one rank's ranges; whole tensors by rank 0), the others
 *     are copies (whole tensors on ranks 1.., replicated KV heads), and the ranks' weight bytes
 *     add up to the one-device bytes plus their copies;
 *   - the ranks' KV cache adds up to the one-device plan's times the KV replicas, and their
 *     recurrent state (conv + delta, without each arena's bookkeeping) to the one-device one,
 *     to the byte;
 *   - the refusals name the dimension: 35B over 3 ranks (query heads), 27B over 3 (KV heads),
 *     the 27B's ffn_down over 8 ranks (2176 columns are not whole 256-element blocks), an FFN
 *     width that does not divide, more ranks than allowed.
 */
#include "model/presets.h"
#include "plan/plan.h"
#include "plan/shard.h"
#include "test.h"

#include <stdint.h>

static struct snug_hparams preset(const char *name) {
    struct snug_hparams hp;
    struct snug_err e = {0};
    CHECK(snug_preset_find(name, &hp, &e) == SNUG_OK);
    return hp;
}

static bool range_eq(struct snug_shard_range r, uint32_t first, uint32_t count) {
    return r.first == first && r.count == count;
}

static void test_27b_two_ranks(void) {
    struct snug_hparams hp = preset("qwen3.6-27b");
    struct snug_shard_rank r0, r1;
    struct snug_err e = {0};
    CHECK(snug_shard_rank(&hp, 2, 0, &r0, &e) == SNUG_OK);
    CHECK(snug_shard_rank(&hp, 2, 1, &r1, &e) == SNUG_OK);
    CHECK(range_eq(r0.q_heads, 0, 12) && range_eq(r1.q_heads, 12, 12));
    CHECK(range_eq(r0.kv_heads, 0, 2) && range_eq(r1.kv_heads, 2, 2));
    CHECK(r0.kv_replicas == 1);
    CHECK(range_eq(r0.key_heads, 0, 8) && range_eq(r1.key_heads, 8, 8));
    /* Nv = 48 over Nk = 16: value head j reads key head j mod 16 */
    CHECK(r0.n_value_ranges == 3 && r1.n_value_ranges == 3);
    CHECK(range_eq(r0.value_heads[0], 0, 8) && range_eq(r0.value_heads[1], 16, 8) &&
          range_eq(r0.value_heads[2], 32, 8));
    CHECK(range_eq(r1.value_heads[0], 8, 8) && range_eq(r1.value_heads[1], 24, 8) &&
          range_eq(r1.value_heads[2], 40, 8));
    CHECK(range_eq(r0.ff, 0, 8704) && range_eq(r1.ff, 8704, 8704));
    CHECK(range_eq(r0.vocab, 0, 124160) && range_eq(r1.vocab, 124160, 124160));

    /* the rank's shape */
    struct snug_hparams hr;
    CHECK(snug_shard_rank_hparams(&hp, 2, &hr, &e) == SNUG_OK);
    CHECK(hr.n_head == 12 && hr.n_head_kv == 2 && hr.ssm_n_group == 8 && hr.ssm_dt_rank == 24);
    CHECK(hr.ssm_d_inner == 24 * 128 && hr.n_ff == 8704 && hr.n_embd == 5120);
    CHECK(hr.n_vocab == hp.n_vocab && hr.n_layer == hp.n_layer);

    /* attn_qkv's rows of rank 1: Q heads 8..15, K heads 8..15, V heads 8..15, 24..31, 40..47 */
    uint64_t ne[4] = {5120, 2 * 16 * 128 + 48 * 128, 1, 1};
    struct snug_shard_slice s;
    CHECK(snug_shard_tensor(&r1, &hp, "blk.0.attn_qkv.weight", ne, SNUG_DTYPE_Q8_0, &s, &e) ==
          SNUG_OK);
    CHECK(s.split == SNUG_SHARD_ROWS && !s.reduce && s.n_ranges == 5);
    CHECK(range_eq(s.r[0], 1024, 1024) && range_eq(s.r[1], 2048 + 1024, 1024));
    CHECK(range_eq(s.r[2], 4096 + 1024, 1024) && range_eq(s.r[3], 4096 + 3072, 1024) &&
          range_eq(s.r[4], 4096 + 5120, 1024));
    CHECK(s.extent == 5120 && s.bytes == snug_dtype_row_bytes(SNUG_DTYPE_Q8_0, 5120) * 5120);
    /* ssm_out: input columns of the same value heads, a partial sum */
    uint64_t no[4] = {48 * 128, 5120, 1, 1};
    CHECK(snug_shard_tensor(&r1, &hp, "blk.0.ssm_out.weight", no, SNUG_DTYPE_Q4_K, &s, &e) ==
          SNUG_OK);
    CHECK(s.split == SNUG_SHARD_COLS && s.reduce && s.n_ranges == 3 && s.extent == 3072);
    CHECK(range_eq(s.r[1], 3072, 1024));
    /* the LM head: vocabulary rows, gathered */
    uint64_t nh[4] = {5120, 248320, 1, 1};
    CHECK(snug_shard_tensor(&r1, &hp, "output.weight", nh, SNUG_DTYPE_Q6_K, &s, &e) == SNUG_OK);
    CHECK(s.split == SNUG_SHARD_ROWS && s.gather && range_eq(s.r[0], 124160, 124160));
    /* a norm: whole */
    uint64_t nn[4] = {5120, 1, 1, 1};
    CHECK(snug_shard_tensor(&r1, &hp, "blk.3.attn_norm.weight", nn, SNUG_DTYPE_F32, &s, &e) ==
          SNUG_OK);
    CHECK(s.split == SNUG_SHARD_WHOLE && s.bytes == 5120 * 4);
}

/* GQA and the DeltaNet tiling hold inside every rank. */
static void check_heads(const struct snug_hparams *hp, int32_t R) {
    struct snug_err e = {0};
    struct snug_hparams hr;
    CHECKF(snug_shard_rank_hparams(hp, R, &hr, &e) == SNUG_OK, "%s over %d: %s", hp->arch, R,
           e.msg);
    uint32_t group = hp->n_head / hp->n_head_kv, nk_r = hr.ssm_n_group;
    uint32_t kv_holders[64] = {0};
    for (int32_t r = 0; r < R; r++) {
        struct snug_shard_rank sr;
        CHECK(snug_shard_rank(hp, R, r, &sr, &e) == SNUG_OK);
        CHECK(sr.q_heads.count == hr.n_head && sr.kv_heads.count == hr.n_head_kv);
        for (uint32_t h = sr.q_heads.first; h < sr.q_heads.first + sr.q_heads.count; h++) {
            uint32_t kvh = h / group, local_q = h - sr.q_heads.first;
            CHECKF(kvh >= sr.kv_heads.first && kvh < sr.kv_heads.first + sr.kv_heads.count,
                   "R %d rank %d: query head %u reads KV head %u", R, r, h, kvh);
            /* the rank's own GQA: local query head q reads local KV head q / (Hq_r / Hkv_r) */
            CHECK(kvh - sr.kv_heads.first == local_q / (hr.n_head / hr.n_head_kv));
        }
        for (uint32_t k = 0; k < sr.kv_heads.count; k++) kv_holders[sr.kv_heads.first + k]++;
        uint32_t local = 0;
        for (int32_t m = 0; m < sr.n_value_ranges; m++)
            for (uint32_t j = sr.value_heads[m].first;
                 j < sr.value_heads[m].first + sr.value_heads[m].count; j++, local++)
                CHECKF(j % hp->ssm_n_group == sr.key_heads.first + local % nk_r,
                       "R %d rank %d: value head %u (local %u)", R, r, j, local);
        CHECK(local == hr.ssm_dt_rank);
    }
    for (uint32_t k = 0; k < hp->n_head_kv && k < 64; k++)
        CHECK(kv_holders[k] == (hp->n_head_kv < (uint32_t)R ? (uint32_t)R / hp->n_head_kv : 1));
}

/* Coverage of every tensor of a recipe over R ranks: the owned slices cover it once; copies
 * are whole tensors on ranks 1.. and replicated KV heads. */
struct cover {
    const struct snug_hparams *hp;
    int32_t R;
    int bad;
    uint64_t copied[SNUG_TP_MAX_RANKS]; /* per rank: the bytes of its copies */
};
static int cover_tensor(void *user, const struct snug_tensor_desc *t) {
    struct cover *c = user;
    struct snug_err e = {0};
    uint64_t full = snug_dtype_row_bytes(t->type, t->ne[0]) * t->ne[1] * t->ne[2] * t->ne[3];
    uint64_t sum = 0;
    enum snug_shard_split split = SNUG_SHARD_WHOLE;
    static uint8_t seen[1 << 20];
    uint64_t dim = 0;
    bool kv = strstr(t->name, "attn_k.weight") || strstr(t->name, "attn_v.weight");
    for (int32_t r = 0; r < c->R; r++) {
        struct snug_shard_rank sr;
        struct snug_shard_slice s;
        if (snug_shard_rank(c->hp, c->R, r, &sr, &e) ||
            snug_shard_tensor(&sr, c->hp, t->name, t->ne, t->type, &s, &e)) {
            fprintf(stderr, "%s: %s\n", t->name, e.msg);
            c->bad++;
            return 0;
        }
        if (r == 0) {
            split = s.split;
            dim = split == SNUG_SHARD_ROWS ? t->ne[1] : t->ne[0];
            if (split != SNUG_SHARD_WHOLE) memset(seen, 0, (size_t)SNUG_MIN(dim, sizeof seen));
        }
        bool want_copy = split == SNUG_SHARD_WHOLE ? r > 0 : kv && r % sr.kv_replicas != 0;
        if (s.split != split || s.copy != want_copy) c->bad++;
        if (s.copy) {
            c->copied[r] += s.bytes;
            continue;
        }
        sum += s.bytes;
        if (split == SNUG_SHARD_WHOLE) continue;
        for (int32_t i = 0; i < s.n_ranges; i++)
            for (uint64_t x = s.r[i].first; x < (uint64_t)s.r[i].first + s.r[i].count; x++)
                if (x >= dim || x >= sizeof seen || seen[x]++) c->bad++;
    }
    for (uint64_t x = 0; split != SNUG_SHARD_WHOLE && x < dim && x < sizeof seen; x++)
        if (seen[x] != 1) {
            fprintf(stderr, "%s: element %llu held %d times\n", t->name, (unsigned long long)x,
                    seen[x]);
            c->bad++;
            break;
        }
    if (sum != full) {
        fprintf(stderr, "%s: ranks own %llu bytes of %llu\n", t->name, (unsigned long long)sum,
                (unsigned long long)full);
        c->bad++;
    }
    return 0;
}

static void check_cover(const char *name, const char *recipe, int32_t R) {
    struct snug_hparams hp = preset(name);
    struct snug_err e = {0};
    struct cover c = {.hp = &hp, .R = R};
    CHECK(snug_model_tensor_types(&hp, recipe, cover_tensor, &c, &e) == SNUG_OK);
    CHECKF(c.bad == 0, "%s %s over %d ranks: %d coverage faults", name, recipe, R, c.bad);

    /* the ranks' weights: one device's plus the copies */
    struct snug_plan_weights w1, wr;
    CHECK(snug_plan_weights_from_recipe(&hp, recipe, &w1, &e) == SNUG_OK);
    uint64_t sum = 0, repl = 0;
    for (int32_t r = 0; r < R; r++) {
        CHECKF(snug_plan_weights_rank_from_recipe(&hp, recipe, R, r, &wr, &e) == SNUG_OK, "%s",
               e.msg);
        sum += wr.total;
        repl += wr.replicated;
        CHECK(wr.replicated == c.copied[r]);
        if (r == 0) CHECK(wr.replicated == 0);
    }
    CHECKF(sum == w1.total + repl, "%s %s R %d: %llu vs %llu + %llu", name, recipe, R,
           (unsigned long long)sum, (unsigned long long)w1.total, (unsigned long long)repl);

    /* the ranks' KV cache and recurrent state: one device's (KV times its replicas) */
    struct snug_plan_limits lim = snug_plan_limits_default();
    lim.n_ctx = 8192;
    lim.n_slots = 2;
    lim.kv_type = SNUG_KV_Q8_0;
    struct snug_plan p1, pr;
    CHECK(snug_plan_make(&hp, &w1, &lim, &p1, &e) == SNUG_OK);
    uint64_t kv = 0, st = 0, kv1 = 0, st1 = snug_kv_state_bytes(&p1.kv_shape) * lim.n_slots;
    for (int i = 0; i < p1.n_items; i++)
        if (!strcmp(p1.items[i].name, "kv cache (attention)")) kv1 = p1.items[i].bytes;
    struct snug_shard_rank sr;
    CHECK(snug_shard_rank(&hp, R, 0, &sr, &e) == SNUG_OK);
    for (int32_t r = 0; r < R; r++) {
        lim.n_ranks = R;
        lim.rank = r;
        CHECK(snug_plan_weights_rank_from_recipe(&hp, recipe, R, r, &wr, &e) == SNUG_OK);
        CHECKF(snug_plan_make(&hp, &wr, &lim, &pr, &e) == SNUG_OK, "%s", e.msg);
        for (int i = 0; i < pr.n_items; i++)
            if (!strcmp(pr.items[i].name, "kv cache (attention)")) kv += pr.items[i].bytes;
        st += snug_kv_state_bytes(&pr.kv_shape) * lim.n_slots;
        CHECK(pr.work_bytes <= p1.work_bytes);
    }
    CHECKF(kv == kv1 * sr.kv_replicas, "%s R %d: kv %llu vs %llu x %u", name, R,
           (unsigned long long)kv, (unsigned long long)kv1, sr.kv_replicas);
    CHECKF(st == st1, "%s R %d: state %llu vs %llu", name, R, (unsigned long long)st,
           (unsigned long long)st1);
}

static void expect_refusal(struct snug_hparams hp, int32_t R, const char *needle) {
    struct snug_err e = {0};
    struct snug_hparams hr;
    CHECK(snug_shard_rank_hparams(&hp, R, &hr, &e) == SNUG_ERR_INVALID);
    CHECKF(strstr(e.msg, needle) != NULL, "R %d: '%s' lacks '%s'", R, e.msg, needle);
}

static void test_refusals(void) {
    expect_refusal(preset("qwen3.6-35b-a3b"), 3, "attention.head_count (query heads) = 16");
    expect_refusal(preset("qwen3.6-27b"), 3, "attention.head_count_kv = 4");
    expect_refusal(preset("qwen3.6-27b"), 17, "1..16");
    expect_refusal(preset("qwen3.6-27b"), 0, "1..16");
    struct snug_hparams hp = preset("demo");
    struct snug_err e = {0};
    CHECK(snug_preset_set(&hp, "feed_forward_length=101", &e) == SNUG_OK);
    expect_refusal(hp, 2, "feed_forward_length = 101");
    hp = preset("demo");
    CHECK(snug_preset_set(&hp, "ssm.group_count=3", &e) == SNUG_OK);
    CHECK(snug_preset_set(&hp, "ssm.time_step_rank=6", &e) == SNUG_OK);
    expect_refusal(hp, 2, "ssm.group_count (DeltaNet key heads) = 3");

    /* 27B over 8 ranks: heads split (KV replicated twice), but ffn_down's 2176 input columns
     * per rank are not whole q4_K / q6_K blocks of 256 */
    struct snug_hparams h27 = preset("qwen3.6-27b");
    struct snug_plan_weights w;
    CHECK(snug_plan_weights_rank_from_recipe(&h27, "q4_k_m", 8, 0, &w, &e) == SNUG_ERR_INVALID);
    CHECKF(strstr(e.msg, "ffn_down.weight") && strstr(e.msg, "[0, 2176)") &&
               strstr(e.msg, "blocks of 256"),
           "%s", e.msg);
    /* ... while f16 weights (blocks of 1) split */
    CHECK(snug_plan_weights_rank_from_recipe(&h27, "f16", 8, 7, &w, &e) == SNUG_OK);
    /* the demo's q4_K projections are 128..384 columns wide: 2 ranks would cut their blocks */
    struct snug_hparams hd = preset("demo");
    CHECK(snug_plan_weights_rank_from_recipe(&hd, "q4_k_m", 2, 1, &w, &e) == SNUG_ERR_INVALID);
    CHECKF(strstr(e.msg, "(q4_K): a rank's input columns") != NULL, "%s", e.msg);
    /* a rank outside the ranks */
    struct snug_shard_rank sr;
    CHECK(snug_shard_rank(&h27, 2, 2, &sr, &e) == SNUG_ERR_INVALID);
    struct snug_plan_limits lim = snug_plan_limits_default();
    lim.n_ranks = 2;
    lim.rank = 2;
    struct snug_plan p;
    CHECK(snug_plan_make(&h27, NULL, &lim, &p, &e) == SNUG_ERR_INVALID);
}

/* An uneven vocabulary: the one split that need not divide. */
static void test_odd_vocab(void) {
    struct snug_hparams hp = preset("demo"); /* 265 tokens */
    struct snug_shard_rank r0, r1;
    struct snug_err e = {0};
    CHECK(snug_shard_rank(&hp, 2, 0, &r0, &e) == SNUG_OK);
    CHECK(snug_shard_rank(&hp, 2, 1, &r1, &e) == SNUG_OK);
    CHECK(range_eq(r0.vocab, 0, 132) && range_eq(r1.vocab, 132, 133));
    /* 2 KV heads over 4 ranks: replicated twice; 2 key heads do not split 4 ways */
    expect_refusal(hp, 4, "ssm.group_count");
}

int main(void) {
    test_27b_two_ranks();
    struct snug_hparams h27 = preset("qwen3.6-27b"), h35 = preset("qwen3.6-35b-a3b");
    struct snug_hparams hd = preset("demo"), hm = preset("demo-moe");
    check_heads(&h27, 1);
    check_heads(&h27, 2);
    check_heads(&h27, 4);
    check_heads(&h27, 8); /* KV heads replicated twice */
    check_heads(&h35, 2);
    check_heads(&h35, 4); /* KV heads replicated twice */
    check_heads(&h35, 8); /* ... four times */
    check_heads(&hd, 2);
    check_heads(&hm, 2);
    const char *recipes[] = {"q4_k_m", "q8_0", "f16"};
    for (int i = 0; i < 3; i++) {
        check_cover("qwen3.6-27b", recipes[i], 1);
        check_cover("qwen3.6-27b", recipes[i], 2);
        check_cover("qwen3.6-27b", recipes[i], 4);
        check_cover("qwen3.6-35b-a3b", recipes[i], 2);
        if (i == 0) continue; /* the demo shapes' q4_K rows are too narrow: refused below */
        check_cover("demo", recipes[i], 2);
        check_cover("demo-moe", recipes[i], 2);
    }
    check_cover("qwen3.6-35b-a3b", "q8_0", 8);
    test_refusals();
    test_odd_vocab();
    return TEST_DONE();
}
