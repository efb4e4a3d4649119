/* ops_attention.c — the attention cache store and causal GQA attention over it (docs/qwen35.md
 * §2.4). Attention is an online softmax over tiles of ATT_TILE cache positions in float32: per
 * query head a running max m, running sum l and an unnormalised output accumulated in place in
 * `out`, rescaled by e^(m_old − m_new) whenever the max grows. A task is (a block of up to
 * ATT_QB query tokens, kv head, a group of the query heads sharing it), so an F16 tile is
 * converted once for the whole block and group, and each key/value row loaded once feeds four
 * query rows (ops_util.h: snug_ops_att_rows).
 * Invariant: scratch is 2·ATT_TILE·D floats per thread (the converted K and V tiles), whatever
 * the context length; results do not depend on the thread count.
 * Read next: ops_delta.c (the other mixer), src/arch/qwen35.c (the caller). */
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_util.h"
#include "core/core.h"
#include "quant/quant.h"

#define ATT_TILE      SNUG_OPS_ATT_TILE
#define ATT_MAX_GROUP SNUG_OPS_ATT_MAX_ROWS /* query heads handled together by one task */
#define ATT_QB        8 /* query tokens handled together by one task (one pass over the cache) */

/* Store T rows of k and v (each [Hkv][D]) at positions pos0.., converting to the cache dtype. */
SNUG_OPS_CLONES
void snug_op_kv_store(struct snug_kv_view *kv, int64_t Hkv, int64_t D, int64_t pos0, int64_t T,
                      const float *k, const float *v) {
    SNUG_ASSERT(pos0 >= 0 && pos0 + T <= kv->n_ctx);
    int64_t n = Hkv * D, off = pos0 * n;
    if (kv->type == SNUG_DTYPE_F32) {
        memcpy((float *)kv->k + off, k, (size_t)(T * n) * sizeof(float));
        memcpy((float *)kv->v + off, v, (size_t)(T * n) * sizeof(float));
        return;
    }
    SNUG_ASSERT(kv->type == SNUG_DTYPE_F16);
    uint16_t *kd = (uint16_t *)kv->k + off, *vd = (uint16_t *)kv->v + off;
    for (int64_t i = 0; i < T * n; i++) {
        kd[i] = snug_ops_f32_to_f16(k[i]);
        vd[i] = snug_ops_f32_to_f16(v[i]);
    }
}

static size_t att_stride(int64_t D) {
    return SNUG_ALIGN_UP((size_t)(2 * ATT_TILE * D) * sizeof(float), 64);
}

size_t snug_op_attention_work_bytes(int64_t D, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    return att_stride(D) * (size_t)n_threads + 64;
}

struct att_ctx {
    const struct snug_kv_view *kv;
    int64_t Hq, Hkv, D, pos0, T;
    int64_t group, sub, n_sub; /* query heads per kv head; per task; tasks per kv head */
    int64_t qb;                /* query tokens per task (<= ATT_QB) */
    const float *q;
    float scale;
    float *out;
    uint8_t *work;
};

/* Rows [p0, p0+np) of kv head kh of one cache tensor as float rows of stride *ld: a direct
 * pointer for F32, converted into `buf` for F16. */
SNUG_OPS_INLINE const float *att_tile(const struct att_ctx *c, const void *base, int64_t kh,
                                      int64_t p0, int64_t np, float *buf, int64_t *ld) {
    int64_t row = c->Hkv * c->D, D = c->D;
    if (c->kv->type == SNUG_DTYPE_F32) {
        *ld = row;
        return (const float *)base + p0 * row + kh * D;
    }
    const uint16_t *src = (const uint16_t *)base + p0 * row + kh * D;
    for (int64_t p = 0; p < np; p++) {
        snug_ops_f16_row(buf + p * D, src + p * row, D);
    }
    *ld = D;
    return buf;
}

/* One task: query tokens t0 .. t0+nt-1 (a block of up to ATT_QB), kv head kh, query heads
 * h0..h1-1; tasks are dealt round-robin so the long (late-token) and short tasks mix across
 * threads. Each tile of the cache is converted once for the whole block (a prompt reads the
 * cache T/ATT_QB times, not T times); every (token, head) row still sees the same tiles in the
 * same order as a single-token call, so prompt and decode give the same bits. */
SNUG_OPS_CLONES
static void att_task(void *vctx, int ith, int nth) {
    const struct att_ctx *c = vctx;
    int64_t D = c->D, Hq = c->Hq;
    float *kbuf = c->work ? (float *)(c->work + att_stride(D) * (size_t)ith) : NULL;
    float *vbuf = kbuf ? kbuf + ATT_TILE * D : NULL;
    int64_t qb = c->qb, n_blk = (c->T + qb - 1) / qb, n_tasks = n_blk * c->Hkv * c->n_sub;
    float s[ATT_MAX_GROUP][ATT_TILE], m[ATT_QB][ATT_MAX_GROUP], l[ATT_QB][ATT_MAX_GROUP];
    const float *qh[ATT_QB][ATT_MAX_GROUP];
    float *oh[ATT_QB][ATT_MAX_GROUP];
    for (int64_t task = ith; task < n_tasks; task += nth) {
        int64_t blk = task / (c->Hkv * c->n_sub), rem = task % (c->Hkv * c->n_sub);
        int64_t kh = rem / c->n_sub, h0 = kh * c->group + (rem % c->n_sub) * c->sub;
        int64_t h1 = SNUG_MIN(h0 + c->sub, (kh + 1) * c->group), nh = h1 - h0;
        int64_t t0 = blk * qb, nt = SNUG_MIN(qb, c->T - t0);
        for (int64_t i = 0; i < nt; i++) {
            for (int64_t h = 0; h < nh; h++) {
                qh[i][h] = c->q + ((t0 + i) * Hq + h0 + h) * D;
                oh[i][h] = c->out + ((t0 + i) * Hq + h0 + h) * D;
                m[i][h] = -INFINITY;
                l[i][h] = 0.0f;
                memset(oh[i][h], 0, (size_t)D * sizeof(float));
            }
        }
        int64_t n_pos_max = c->pos0 + t0 + nt; /* the last token of the block sees these */
        for (int64_t p0 = 0; p0 < n_pos_max; p0 += ATT_TILE) {
            int64_t np = SNUG_MIN((int64_t)ATT_TILE, n_pos_max - p0), ldk, ldv;
            const float *K = att_tile(c, c->kv->k, kh, p0, np, kbuf, &ldk);
            const float *V = att_tile(c, c->kv->v, kh, p0, np, vbuf, &ldv);
            for (int64_t i = 0; i < nt; i++) {
                int64_t n_pos = c->pos0 + t0 + i + 1;
                if (n_pos <= p0) continue;
                snug_ops_att_rows(qh[i], (int)nh, K, ldk, V, ldv, SNUG_MIN(np, n_pos - p0), D,
                                  c->scale, s, m[i], l[i], oh[i]);
            }
        }
        for (int64_t i = 0; i < nt; i++)
            for (int64_t h = 0; h < nh; h++) snug_ops_scale(oh[i][h], 1.0f / l[i][h], D);
    }
}

/* Causal GQA attention (see ops.h). Query heads per task: the whole GQA group (up to
 * ATT_MAX_GROUP), halved while there are fewer tasks than threads (decode, few kv heads). */
void snug_op_attention(struct snug_pool *pool, const struct snug_kv_view *kv, int64_t Hq,
                       int64_t Hkv, int64_t D, int64_t pos0, int64_t T, const float *q, float scale,
                       float *out, void *work) {
    SNUG_ASSERT(Hkv > 0 && Hq % Hkv == 0 && pos0 + T <= kv->n_ctx);
    SNUG_ASSERT(kv->type == SNUG_DTYPE_F32 || kv->type == SNUG_DTYPE_F16);
    struct att_ctx c = {.kv = kv,
                        .Hq = Hq,
                        .Hkv = Hkv,
                        .D = D,
                        .pos0 = pos0,
                        .T = T,
                        .group = Hq / Hkv,
                        .q = q,
                        .scale = scale,
                        .out = out,
                        .work = work ? (uint8_t *)SNUG_ALIGN_UP((uintptr_t)work, 64) : NULL};
    int nth = pool ? snug_pool_size(pool) : 1;
    c.sub = SNUG_MIN(c.group, (int64_t)ATT_MAX_GROUP);
    for (;;) {
        c.n_sub = (c.group + c.sub - 1) / c.sub;
        if (c.sub == 1 || T * Hkv * c.n_sub >= nth) break;
        c.sub = (c.sub + 1) / 2;
    }
    /* Tokens per task: ATT_QB, fewer while that leaves under 4 tasks per thread (short prompts).
     * The numbers do not depend on it (see att_task). */
    c.qb = ATT_QB;
    while (c.qb > 1 && (T + c.qb - 1) / c.qb * Hkv * c.n_sub < 4 * nth) c.qb /= 2;
    SNUG_ASSERT(work != NULL || kv->type == SNUG_DTYPE_F32);
    snug_pool_run(pool, att_task, &c);
}
