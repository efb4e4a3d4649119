/* shard.c — tensor parallelism's arithmetic (see shard.h for the split and its sources).
 * Owns nothing: every answer is computed from the hyper-parameters and the rank.
 * Invariant: snug_shard_tensor's owned slices (not copies) of a tensor over ranks 0..R−1 cover
 * it once; the ranges are the ones snug_shard_rank reports.
 * Read next: src/plan/plan.c (the plan per rank), tests/unit/test_plan_shard.c.
 */
#include "plan/shard.h"

#include "quant/quant.h"

#include <stdio.h>
#include <string.h>

/* Does the model have attention blocks (trunk attention layers or an MTP block)? */
static bool has_attention(const struct snug_hparams *hp) {
    return snug_hp_n_attn_layers(hp) > 0 || hp->n_nextn > 0;
}

/* `what` = n must split into R equal parts. */
static int need_divisible(uint32_t n, int32_t R, const char *what, struct snug_err *err) {
    if (n % (uint32_t)R == 0) return SNUG_OK;
    return snug_err_set(err, SNUG_ERR_INVALID,
                        "tensor parallelism over %d ranks: %s = %u is not a multiple of %d; "
                        "choose a --tp that divides it",
                        (int)R, what, (unsigned)n, (int)R);
}

int snug_shard_check(const struct snug_hparams *hp, int32_t R, struct snug_err *err) {
    if (R < 1 || R > SNUG_TP_MAX_RANKS)
        return snug_err_set(err, SNUG_ERR_INVALID, "tensor parallelism: %d ranks (expected 1..%d)",
                            (int)R, SNUG_TP_MAX_RANKS);
    if (R == 1) return SNUG_OK;
    int rc;
    if (has_attention(hp)) {
        if ((rc = need_divisible(hp->n_head, R, "attention.head_count (query heads)", err)))
            return rc;
        uint32_t kv = hp->n_head_kv;
        if (kv == 0 || hp->n_head % kv)
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "tensor parallelism: attention.head_count_kv = %u does not divide "
                                "the %u query heads",
                                (unsigned)kv, (unsigned)hp->n_head);
        if (kv % (uint32_t)R && (uint32_t)R % kv)
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "tensor parallelism over %d ranks: attention.head_count_kv = %u: "
                                "the KV heads must split evenly (a multiple of %d) or replicate "
                                "evenly (a divisor of %d)",
                                (int)R, (unsigned)kv, (int)R, (int)R);
    }
    if (snug_hp_n_rec_layers(hp)) {
        uint32_t nk = hp->ssm_n_group, nv = hp->ssm_dt_rank;
        if ((rc = need_divisible(nk, R, "ssm.group_count (DeltaNet key heads)", err))) return rc;
        if (nk == 0 || nv % nk || nv / nk > SNUG_SHARD_MAX_VRANGES)
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "tensor parallelism: ssm.time_step_rank = %u DeltaNet value heads "
                                "over ssm.group_count = %u key heads: expected a whole ratio of "
                                "at most %d",
                                (unsigned)nv, (unsigned)nk, SNUG_SHARD_MAX_VRANGES);
    }
    if ((rc = need_divisible(hp->n_ff, R, "feed_forward_length", err))) return rc;
    if ((rc = need_divisible(hp->n_ff_exp, R, "expert_feed_forward_length", err))) return rc;
    if ((rc = need_divisible(hp->n_ff_shexp, R, "expert_shared_feed_forward_length", err)))
        return rc;
    if (hp->n_vocab < (uint32_t)R)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "tensor parallelism over %d ranks: a vocabulary of %u rows", (int)R,
                            (unsigned)hp->n_vocab);
    return SNUG_OK;
}

/* The r-th of R equal parts of n (R divides n). */
static struct snug_shard_range part(uint32_t n, int32_t R, int32_t r) {
    uint32_t c = n / (uint32_t)R;
    return (struct snug_shard_range){.first = c * (uint32_t)r, .count = c};
}

int snug_shard_rank(const struct snug_hparams *hp, int32_t R, int32_t rank,
                    struct snug_shard_rank *o, struct snug_err *err) {
    int rc = snug_shard_check(hp, R, err);
    if (rc) return rc;
    if (rank < 0 || rank >= R)
        return snug_err_set(err, SNUG_ERR_INVALID, "tensor parallelism: rank %d of %d", (int)rank,
                            (int)R);
    memset(o, 0, sizeof *o);
    o->rank = rank;
    o->n_ranks = R;
    o->q_heads = part(hp->n_head, R, rank);
    uint32_t kv = hp->n_head_kv;
    if (kv && kv < (uint32_t)R) { /* replicate: R/Hkv ranks per KV head (vLLM's rule) */
        o->kv_replicas = (uint32_t)R / kv;
        o->kv_heads =
            (struct snug_shard_range){.first = (uint32_t)rank / o->kv_replicas, .count = 1};
    } else {
        o->kv_replicas = 1;
        o->kv_heads = part(kv, R, rank);
    }
    uint32_t nk = hp->ssm_n_group, nv = hp->ssm_dt_rank;
    o->key_heads = part(nk, R, rank);
    if (nk && nv % nk == 0) {
        o->n_value_ranges = (int32_t)(nv / nk);
        for (int32_t m = 0; m < o->n_value_ranges; m++)
            o->value_heads[m] = (struct snug_shard_range){
                .first = (uint32_t)m * nk + o->key_heads.first, .count = o->key_heads.count};
    }
    o->ff = part(hp->n_ff, R, rank);
    o->ff_exp = part(hp->n_ff_exp, R, rank);
    o->ff_shexp = part(hp->n_ff_shexp, R, rank);
    uint64_t V = hp->n_vocab;
    uint32_t v0 = (uint32_t)(V * (uint64_t)rank / (uint64_t)R);
    uint32_t v1 = (uint32_t)(V * (uint64_t)(rank + 1) / (uint64_t)R);
    o->vocab = (struct snug_shard_range){.first = v0, .count = v1 - v0};
    return SNUG_OK;
}

int snug_shard_rank_hparams(const struct snug_hparams *hp, int32_t R, struct snug_hparams *out,
                            struct snug_err *err) {
    struct snug_shard_rank sr;
    int rc = snug_shard_rank(hp, R, 0, &sr, err);
    if (rc) return rc;
    *out = *hp;
    if (R == 1) return SNUG_OK;
    out->n_head = sr.q_heads.count;
    out->n_head_kv = sr.kv_heads.count;
    out->ssm_n_group = sr.key_heads.count;
    out->ssm_dt_rank = sr.key_heads.count * (uint32_t)sr.n_value_ranges;
    out->ssm_d_inner = out->ssm_dt_rank * hp->ssm_d_state;
    out->n_ff = sr.ff.count;
    out->n_ff_exp = sr.ff_exp.count;
    out->n_ff_shexp = sr.ff_shexp.count;
    return SNUG_OK;
}

/* ---- tensors ------------------------------------------------------------------------------ */
/* A slice's ranges, each scaled by `unit` elements and shifted by `base`. */
static void add_range(struct snug_shard_slice *s, uint64_t base, struct snug_shard_range r,
                      uint64_t unit) {
    SNUG_ASSERT(s->n_ranges < SNUG_SHARD_MAX_RANGES);
    s->r[s->n_ranges++] = (struct snug_shard_range){.first = (uint32_t)(base + r.first * unit),
                                                    .count = (uint32_t)(r.count * unit)};
    s->extent += r.count * unit;
}

/* The DeltaNet channels of a rank: Q heads, K heads, then its value-head ranges, over the
 * [Q (Nk·dk) | K (Nk·dk) | V (Nv·dv)] layout of attn_qkv's rows and ssm_conv1d's channels. */
static void qkv_channels(const struct snug_shard_rank *sr, const struct snug_hparams *hp,
                         struct snug_shard_slice *s) {
    uint64_t dk = hp->ssm_d_state, kd = (uint64_t)hp->ssm_n_group * dk;
    add_range(s, 0, sr->key_heads, dk);
    add_range(s, kd, sr->key_heads, dk);
    for (int32_t m = 0; m < sr->n_value_ranges; m++) add_range(s, 2 * kd, sr->value_heads[m], dk);
}
static void value_heads(const struct snug_shard_rank *sr, struct snug_shard_slice *s,
                        uint64_t unit) {
    for (int32_t m = 0; m < sr->n_value_ranges; m++) add_range(s, 0, sr->value_heads[m], unit);
}

/* The tensor's name without its "blk.N." prefix. */
static const char *base_name(const char *name) {
    if (strncmp(name, "blk.", 4)) return name;
    const char *p = name + 4;
    while (*p >= '0' && *p <= '9') p++;
    return *p == '.' ? p + 1 : name;
}

int snug_shard_tensor(const struct snug_shard_rank *sr, const struct snug_hparams *hp,
                      const char *name, const uint64_t ne[4], uint32_t type,
                      struct snug_shard_slice *s, struct snug_err *err) {
    memset(s, 0, sizeof *s);
    const char *b = base_name(name);
    const uint64_t D = hp->head_dim, dv = hp->ssm_d_state;
    const uint64_t rows_per = ne[2] * ne[3]; /* experts (3-D) */
    if (sr->n_ranks > 1) {
        if (!strcmp(b, "attn_q.weight")) { /* per head: query | gate, 2·D rows */
            s->split = SNUG_SHARD_ROWS;
            add_range(s, 0, sr->q_heads, 2 * D);
        } else if (!strcmp(b, "attn_k.weight") || !strcmp(b, "attn_v.weight")) {
            s->split = SNUG_SHARD_ROWS;
            s->copy = sr->rank % sr->kv_replicas != 0;
            add_range(s, 0, sr->kv_heads, D);
        } else if (!strcmp(b, "attn_output.weight")) {
            s->split = SNUG_SHARD_COLS;
            s->reduce = true;
            add_range(s, 0, sr->q_heads, D);
        } else if (!strcmp(b, "attn_qkv.weight") || !strcmp(b, "ssm_conv1d.weight")) {
            s->split = SNUG_SHARD_ROWS; /* conv1d {K, channels}: rows are channels */
            qkv_channels(sr, hp, s);
        } else if (!strcmp(b, "attn_gate.weight")) {
            s->split = SNUG_SHARD_ROWS;
            value_heads(sr, s, dv);
        } else if (!strcmp(b, "ssm_beta.weight") || !strcmp(b, "ssm_alpha.weight")) {
            s->split = SNUG_SHARD_ROWS;
            value_heads(sr, s, 1);
        } else if (!strcmp(b, "ssm_dt.bias") || !strcmp(b, "ssm_a")) { /* [Nv] vectors */
            s->split = SNUG_SHARD_COLS;
            value_heads(sr, s, 1);
        } else if (!strcmp(b, "ssm_out.weight")) {
            s->split = SNUG_SHARD_COLS;
            s->reduce = true;
            value_heads(sr, s, dv);
        } else if (!strcmp(b, "ffn_gate.weight") || !strcmp(b, "ffn_up.weight")) {
            s->split = SNUG_SHARD_ROWS;
            add_range(s, 0, sr->ff, 1);
        } else if (!strcmp(b, "ffn_down.weight")) {
            s->split = SNUG_SHARD_COLS;
            s->reduce = true;
            add_range(s, 0, sr->ff, 1);
        } else if (!strcmp(b, "ffn_gate_exps.weight") || !strcmp(b, "ffn_up_exps.weight")) {
            s->split = SNUG_SHARD_ROWS;
            add_range(s, 0, sr->ff_exp, 1);
        } else if (!strcmp(b, "ffn_down_exps.weight")) {
            s->split = SNUG_SHARD_COLS;
            s->reduce = true;
            add_range(s, 0, sr->ff_exp, 1);
        } else if (!strcmp(b, "ffn_gate_shexp.weight") || !strcmp(b, "ffn_up_shexp.weight")) {
            s->split = SNUG_SHARD_ROWS;
            add_range(s, 0, sr->ff_shexp, 1);
        } else if (!strcmp(b, "ffn_down_shexp.weight")) {
            s->split = SNUG_SHARD_COLS;
            s->reduce = true;
            add_range(s, 0, sr->ff_shexp, 1);
        } else if (b == name && !strcmp(name, "output.weight")) {
            s->split = SNUG_SHARD_ROWS;
            s->gather = true;
            add_range(s, 0, sr->vocab, 1);
        }
    }
    const struct snug_dtype_info *ti = snug_dtype_info(type);
    if (!ti || !ti->block_elems)
        return snug_err_set(err, SNUG_ERR_INVALID, "tensor '%s': unknown type %u", name,
                            (unsigned)type);
    switch (s->split) {
    case SNUG_SHARD_WHOLE:
        s->copy = sr->rank != 0;
        s->extent = ne[0];
        s->bytes = snug_dtype_row_bytes(type, ne[0]) * ne[1] * rows_per;
        break;
    case SNUG_SHARD_ROWS:
        for (int32_t i = 0; i < s->n_ranges; i++)
            if (s->r[i].first + (uint64_t)s->r[i].count > ne[1])
                return snug_err_set(err, SNUG_ERR_INVALID,
                                    "tensor '%s': rank %d's rows end past its %llu rows", name,
                                    (int)sr->rank, (unsigned long long)ne[1]);
        s->bytes = snug_dtype_row_bytes(type, ne[0]) * s->extent * rows_per;
        break;
    case SNUG_SHARD_COLS:
        for (int32_t i = 0; i < s->n_ranges; i++)
            if (s->r[i].first % ti->block_elems || s->r[i].count % ti->block_elems)
                return snug_err_set(err, SNUG_ERR_INVALID,
                                    "tensor '%s' (%s): a rank's input columns [%u, %u) are not "
                                    "whole blocks of %u; requantize it (or choose another --tp)",
                                    name, ti->name, (unsigned)s->r[i].first,
                                    (unsigned)(s->r[i].first + s->r[i].count),
                                    (unsigned)ti->block_elems);
        for (int32_t i = 0; i < s->n_ranges; i++)
            if (s->r[i].first + (uint64_t)s->r[i].count > ne[0])
                return snug_err_set(err, SNUG_ERR_INVALID,
                                    "tensor '%s': rank %d's columns end past its %llu columns",
                                    name, (int)sr->rank, (unsigned long long)ne[0]);
        s->bytes = snug_dtype_row_bytes(type, s->extent) * ne[1] * rows_per;
        break;
    }
    return SNUG_OK;
}
