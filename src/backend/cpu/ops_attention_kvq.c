/* ops_attention_kvq.c — store into and attend over a KV cache in the formats of src/kv/kvfmt.h
 * (bf16, q8_0, fp8, tq4, tq3, or any K/V mix incl. f16/f32), read in place.
 * The store quantizes each new K/V head vector as it is written. Attention is the same online
 * softmax as ops_attention.c (blocks of KVQ_QB query tokens share each decoded tile), over
 * tiles of KVQ_TILE positions decoded into per-thread scratch:
 * for rotated K formats the query is rotated once per (token, head) (⟨Rq, Rk⟩ = ⟨q, k⟩), for
 * rotated V the output is accumulated in the rotated basis and inverse-rotated once at the end.
 * Invariant: no full-precision copy of the cache exists at any time; scratch is
 * snug_op_kvq_attention_work_bytes, independent of the context; results do not depend on the
 * thread count or on how the prompt was chunked (each query reads the same stored bytes in the
 * same tile order). Read next: src/kv/kvfmt.c (the formats), ops_attention.c (plain cache).
 */
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_util.h"
#include "core/core.h"
#include "kv/kvfmt.h"
#include "quant/quant.h"

#define KVQ_TILE      SNUG_OPS_ATT_TILE
#define KVQ_MAX_GROUP SNUG_OPS_ATT_MAX_ROWS /* query heads handled together by one task */
#define KVQ_QB        8 /* query tokens handled together by one task (one decode of the cache) */

static bool view_plain(const struct snug_kv_view *kv) {
    return kv->type == SNUG_DTYPE_F32 || kv->type == SNUG_DTYPE_F16;
}

/* Store T rows of k and v ([Hkv][D] each) at positions pos0.., one stored vector per head. */
void snug_op_kvq_store(struct snug_kv_view *kv, int64_t Hkv, int64_t D, int64_t pos0, int64_t T,
                       const float *k, const float *v) {
    if (view_plain(kv)) {
        snug_op_kv_store(kv, Hkv, D, pos0, T, k, v);
        return;
    }
    SNUG_ASSERT(kv->type == SNUG_KV_VIEW_FMT && pos0 >= 0 && pos0 + T <= kv->n_ctx);
    size_t kb = snug_kvfmt_vec_bytes(kv->k_fmt, D), vb = snug_kvfmt_vec_bytes(kv->v_fmt, D);
    SNUG_ASSERT(kb > 0 && vb > 0);
    uint8_t *kd = (uint8_t *)kv->k + (size_t)(pos0 * Hkv) * kb;
    uint8_t *vd = (uint8_t *)kv->v + (size_t)(pos0 * Hkv) * vb;
    for (int64_t i = 0; i < T * Hkv; i++) {
        snug_kvfmt_quantize(kv->k_fmt, k + i * D, D, kd + (size_t)i * kb);
        snug_kvfmt_quantize(kv->v_fmt, v + i * D, D, vd + (size_t)i * vb);
    }
}

/* Per-thread scratch: K and V tiles and the block's prepared queries (KVQ_QB tokens of up to
 * KVQ_MAX_GROUP heads). */
static size_t kvq_stride(int64_t D) {
    return SNUG_ALIGN_UP((size_t)((2 * KVQ_TILE + KVQ_QB * KVQ_MAX_GROUP) * D) * sizeof(float), 64);
}

size_t snug_op_kvq_attention_work_bytes(int64_t D, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    size_t own = kvq_stride(D) * (size_t)n_threads + 64;
    size_t plain = snug_op_attention_work_bytes(D, n_threads);
    return own > plain ? own : plain;
}

struct kvq_ctx {
    const struct snug_kv_view *kv;
    int64_t Hq, Hkv, D, pos0, T;
    int64_t group, sub, n_sub; /* query heads per kv head; per task; tasks per kv head */
    int64_t qb;                /* query tokens per task (<= KVQ_QB) */
    size_t kb, vb;             /* stored bytes of one K / V head vector */
    bool krot, vrot;
    const float *q;
    float scale;
    float *out;
    uint8_t *work;
};

/* Decode rows [p0, p0+np) of kv head kh of one cache tensor into buf ([np][D]). */
SNUG_OPS_INLINE void kvq_tile(const struct kvq_ctx *c, int fmt, const void *base, size_t vb,
                              int64_t kh, int64_t p0, int64_t np, float *buf) {
    const int64_t D = c->D;
    const uint8_t *src = (const uint8_t *)base + ((size_t)(p0 * c->Hkv + kh)) * vb;
    const size_t step = (size_t)c->Hkv * vb;
    if (fmt == SNUG_KV_F16) {
        for (int64_t p = 0; p < np; p++)
            snug_ops_f16_row(buf + p * D, (const uint16_t *)(const void *)(src + p * step), D);
        return;
    }
    for (int64_t p = 0; p < np; p++) snug_kvfmt_decode(fmt, src + p * step, D, buf + p * D);
}

/* One task: query tokens t0 .. t0+nt-1 (a block of up to KVQ_QB), kv head kh, query heads
 * h0..h1-1 (dealt round-robin). Each tile is decoded once for the whole block; every
 * (token, head) row sees the same tiles in the same order as a single-token call
 * (snug_ops_att_rows), so prompt and decode give the same bits. The outputs accumulate in
 * `out` (in the rotated basis for rotated V, inverse-rotated in place at the end). */
SNUG_OPS_CLONES
static void kvq_task(void *vctx, int ith, int nth) {
    const struct kvq_ctx *c = vctx;
    const int64_t D = c->D, Hq = c->Hq;
    float *kbuf = (float *)(c->work + kvq_stride(D) * (size_t)ith);
    float *vbuf = kbuf + KVQ_TILE * D, *qr = vbuf + KVQ_TILE * D;
    const int64_t qb = c->qb, n_blk = (c->T + qb - 1) / qb, n_tasks = n_blk * c->Hkv * c->n_sub;
    float s[KVQ_MAX_GROUP][KVQ_TILE], m[KVQ_QB][KVQ_MAX_GROUP], l[KVQ_QB][KVQ_MAX_GROUP];
    const float *qh[KVQ_QB][KVQ_MAX_GROUP];
    float *oh[KVQ_QB][KVQ_MAX_GROUP];
    for (int64_t task = ith; task < n_tasks; task += nth) {
        int64_t blk = task / (c->Hkv * c->n_sub), rem = task % (c->Hkv * c->n_sub);
        int64_t kh = rem / c->n_sub, h0 = kh * c->group + (rem % c->n_sub) * c->sub;
        int64_t h1 = SNUG_MIN(h0 + c->sub, (kh + 1) * c->group), nh = h1 - h0;
        int64_t t0 = blk * qb, nt = SNUG_MIN(qb, c->T - t0);
        for (int64_t i = 0; i < nt; i++) {
            for (int64_t h = 0; h < nh; h++) { /* the query, scaled, in the keys' basis */
                float *q = qr + (i * KVQ_MAX_GROUP + h) * D;
                const float *src = c->q + ((t0 + i) * Hq + h0 + h) * D;
                for (int64_t d = 0; d < D; d++) q[d] = c->scale * src[d];
                if (c->krot) snug_kvfmt_rotate(q, D);
                qh[i][h] = q;
                oh[i][h] = c->out + ((t0 + i) * Hq + h0 + h) * D;
                memset(oh[i][h], 0, (size_t)D * sizeof(float));
                m[i][h] = -INFINITY;
                l[i][h] = 0.0f;
            }
        }
        int64_t n_pos_max = c->pos0 + t0 + nt;
        for (int64_t p0 = 0; p0 < n_pos_max; p0 += KVQ_TILE) {
            int64_t np = SNUG_MIN((int64_t)KVQ_TILE, n_pos_max - p0);
            kvq_tile(c, c->kv->k_fmt, c->kv->k, c->kb, kh, p0, np, kbuf);
            kvq_tile(c, c->kv->v_fmt, c->kv->v, c->vb, kh, p0, np, vbuf);
            for (int64_t i = 0; i < nt; i++) {
                int64_t n_pos = c->pos0 + t0 + i + 1;
                if (n_pos <= p0) continue;
                snug_ops_att_rows(qh[i], (int)nh, kbuf, D, vbuf, D, SNUG_MIN(np, n_pos - p0), D,
                                  1.0f, s, m[i], l[i], oh[i]);
            }
        }
        for (int64_t i = 0; i < nt; i++) {
            for (int64_t h = 0; h < nh; h++) {
                snug_ops_scale(oh[i][h], 1.0f / l[i][h], D);
                if (c->vrot) snug_kvfmt_unrotate(oh[i][h], D);
            }
        }
    }
}

/* Causal GQA attention over any view (see ops.h). Task split as in ops_attention.c: the whole
 * GQA group per task (up to KVQ_MAX_GROUP), halved while there are fewer tasks than threads. */
void snug_op_kvq_attention(struct snug_pool *pool, const struct snug_kv_view *kv, int64_t Hq,
                           int64_t Hkv, int64_t D, int64_t pos0, int64_t T, const float *q,
                           float scale, float *out, void *work) {
    if (view_plain(kv)) {
        snug_op_attention(pool, kv, Hq, Hkv, D, pos0, T, q, scale, out, work);
        return;
    }
    SNUG_ASSERT(kv->type == SNUG_KV_VIEW_FMT && Hkv > 0 && Hq % Hkv == 0 && pos0 + T <= kv->n_ctx &&
                work != NULL);
    struct kvq_ctx c = {.kv = kv,
                        .Hq = Hq,
                        .Hkv = Hkv,
                        .D = D,
                        .pos0 = pos0,
                        .T = T,
                        .group = Hq / Hkv,
                        .kb = snug_kvfmt_vec_bytes(kv->k_fmt, D),
                        .vb = snug_kvfmt_vec_bytes(kv->v_fmt, D),
                        .krot = snug_kvfmt_rotated(kv->k_fmt),
                        .vrot = snug_kvfmt_rotated(kv->v_fmt),
                        .q = q,
                        .scale = scale,
                        .out = out,
                        .work = (uint8_t *)SNUG_ALIGN_UP((uintptr_t)work, 64)};
    SNUG_ASSERT(c.kb > 0 && c.vb > 0);
    int nth = pool ? snug_pool_size(pool) : 1;
    c.sub = SNUG_MIN(c.group, (int64_t)KVQ_MAX_GROUP);
    for (;;) {
        c.n_sub = (c.group + c.sub - 1) / c.sub;
        if (c.sub == 1 || T * Hkv * c.n_sub >= nth) break;
        c.sub = (c.sub + 1) / 2;
    }
    c.qb = KVQ_QB; /* fewer while that leaves under 4 tasks per thread; no effect on the bits */
    while (c.qb > 1 && (T + c.qb - 1) / c.qb * Hkv * c.n_sub < 4 * nth) c.qb /= 2;
    snug_pool_run(pool, kvq_task, &c);
}
