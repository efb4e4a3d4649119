/* ctx_prefix.c — copy callbacks between a CPU context's caches and the prefix cache (see
 * ctx_prefix.h for the blob and row layouts). */
#include "model/ctx_prefix.h"

#include <string.h>

static size_t conv_bytes(const struct snug_kv *kv) {
    return (size_t)kv->shape.n_rec * (size_t)kv->shape.conv_elems * sizeof(float);
}
static size_t mtp_row_floats_bytes(const struct snug_ctx_prefix_state *st) {
    return st->mtp_kv ? (size_t)st->n_embd * sizeof(float) : 0;
}

uint64_t snug_ctx_prefix_state_bytes(const struct snug_ctx_prefix_state *st) {
    return snug_kv_state_bytes(&st->kv->shape) + mtp_row_floats_bytes(st);
}

uint64_t snug_ctx_prefix_row_bytes(const struct snug_ctx_prefix_state *st) {
    uint64_t b = snug_kv_bytes_per_token(&st->kv->shape);
    if (st->mtp_kv) b += snug_kv_bytes_per_token(&st->mtp_kv->shape);
    return b;
}

/* The state blob's bytes [off, off + n) as (pointer, length) pieces: conv, delta, MTP row. */
static int state_copy(struct snug_ctx_prefix_state *st, uint64_t off, void *buf, size_t n,
                      bool out) {
    struct snug_kv *kv = st->kv;
    size_t cb = conv_bytes(kv), db = snug_kv_state_bytes(&kv->shape) - cb;
    size_t hb = mtp_row_floats_bytes(st);
    if (off + n > cb + db + hb) return SNUG_ERR_INVALID;
    if (out && !st->exportable) return SNUG_ERR_INVALID; /* inside a speculative step */
    uint8_t *b = buf;
    while (n) {
        uint8_t *src;
        size_t m;
        if (off < cb) {
            src = (uint8_t *)kv->conv + off;
            m = SNUG_MIN(n, cb - (size_t)off);
        } else if (off < cb + db) {
            src = (uint8_t *)kv->delta + (off - cb);
            m = SNUG_MIN(n, cb + db - (size_t)off);
        } else {
            src = (uint8_t *)st->mtp_row + (off - cb - db);
            m = n;
        }
        if (out)
            memcpy(b, src, m);
        else
            memcpy(src, b, m);
        b += m;
        off += m;
        n -= m;
    }
    return SNUG_OK;
}

static int state_out(void *user, uint64_t off, void *dst, size_t n) {
    return state_copy(user, off, dst, n, true);
}
static int state_in(void *user, uint64_t off, const void *src, size_t n) {
    return state_copy(user, off, (void *)src, n, false);
}

/* Row r of every layer of kv (K then V each) to or from buf; returns the bytes moved. A NULL
 * row (r < 0: the MTP row before position 0) reads as zeros and is skipped on the way in. */
static size_t layers_copy(struct snug_kv *kv, int32_t r, uint8_t *buf, bool out) {
    size_t kb = snug_kv_row_bytes(&kv->shape, 0), vb = snug_kv_row_bytes(&kv->shape, 1);
    for (int32_t l = 0; l < kv->shape.n_attn; l++) {
        if (r < 0) {
            if (out) memset(buf, 0, kb + vb);
        } else {
            uint8_t *k = (uint8_t *)kv->views[l].k + (size_t)r * kb;
            uint8_t *v = (uint8_t *)kv->views[l].v + (size_t)r * vb;
            if (out) {
                memcpy(buf, k, kb);
                memcpy(buf + kb, v, vb);
            } else {
                memcpy(k, buf, kb);
                memcpy(v, buf + kb, vb);
            }
        }
        buf += kb + vb;
    }
    return (size_t)kv->shape.n_attn * (kb + vb);
}

static int rows_copy(struct snug_ctx_prefix_state *st, int32_t row0, int32_t n_rows, uint8_t *buf,
                     bool out) {
    struct snug_kv *kv = st->kv;
    if (row0 < 0 || n_rows < 0 || row0 + n_rows > kv->shape.n_ctx ||
        (st->mtp_kv && row0 + n_rows - 1 > st->mtp_kv->shape.n_ctx))
        return SNUG_ERR_INVALID;
    if (out && st->mtp_kv && row0 + n_rows > st->n_past) return SNUG_ERR_INVALID; /* not written */
    for (int32_t r = row0; r < row0 + n_rows; r++) {
        buf += layers_copy(kv, r, buf, out);
        if (st->mtp_kv) buf += layers_copy(st->mtp_kv, r - 1, buf, out);
    }
    return SNUG_OK;
}

static int kv_out(void *user, int32_t row0, int32_t n_rows, void *dst) {
    return rows_copy(user, row0, n_rows, dst, true);
}
static int kv_in(void *user, int32_t row0, int32_t n_rows, const void *src) {
    return rows_copy(user, row0, n_rows, (uint8_t *)src, false);
}

static int32_t rope_out(void *user) {
    const struct snug_ctx_prefix_state *st = user;
    return st->rope_delta ? *st->rope_delta : 0;
}
static int rope_in(void *user, int32_t rope_delta) {
    struct snug_ctx_prefix_state *st = user;
    if (!st->rope_delta) return rope_delta ? SNUG_ERR_UNSUPPORTED : SNUG_OK;
    *st->rope_delta = rope_delta;
    return SNUG_OK;
}

struct snug_prefix_io snug_ctx_prefix_io(struct snug_ctx_prefix_state *st) {
    return (struct snug_prefix_io){st, state_out, state_in, kv_out, kv_in, rope_out, rope_in};
}

bool snug_ctx_prefix_fits(const struct snug_prefix *pc, const struct snug_ctx_prefix_state *st) {
    if (!pc || !st || !st->kv || pc->n_pages == 0) return false;
    return pc->cfg.state_bytes == snug_ctx_prefix_state_bytes(st) &&
           pc->cfg.kv_row_bytes == snug_ctx_prefix_row_bytes(st) &&
           pc->cfg.n_ctx >= st->kv->shape.n_ctx;
}

/* The KV rows [0, n) of every attention layer of src into dst (same shape). */
static void rows_move(struct snug_kv *dst, const struct snug_kv *src, int32_t n) {
    size_t kb = snug_kv_row_bytes(&src->shape, 0), vb = snug_kv_row_bytes(&src->shape, 1);
    for (int32_t l = 0; l < src->shape.n_attn; l++) {
        memcpy(dst->views[l].k, src->views[l].k, (size_t)n * kb);
        memcpy(dst->views[l].v, src->views[l].v, (size_t)n * vb);
    }
}

int snug_ctx_prefix_copy(struct snug_ctx_prefix_state *dst, const struct snug_ctx_prefix_state *src,
                         int32_t n) {
    if (!dst->kv || !src->kv || !src->exportable || n != src->n_past || n < 0 ||
        n > dst->kv->shape.n_ctx || !dst->mtp_kv != !src->mtp_kv ||
        snug_ctx_prefix_state_bytes(dst) != snug_ctx_prefix_state_bytes(src) ||
        snug_ctx_prefix_row_bytes(dst) != snug_ctx_prefix_row_bytes(src) ||
        (src->rope_delta && *src->rope_delta && !dst->rope_delta))
        return SNUG_ERR_INVALID;
    size_t cb = conv_bytes(src->kv), db = snug_kv_state_bytes(&src->kv->shape) - cb;
    memcpy(dst->kv->conv, src->kv->conv, cb);
    memcpy(dst->kv->delta, src->kv->delta, db);
    rows_move(dst->kv, src->kv, n);
    if (src->mtp_kv) { /* the MTP row of position r - 1 travels with row r: rows [0, n - 1) */
        memcpy(dst->mtp_row, src->mtp_row, mtp_row_floats_bytes(src));
        if (n > 1) rows_move(dst->mtp_kv, src->mtp_kv, n - 1);
    }
    if (dst->rope_delta) *dst->rope_delta = src->rope_delta ? *src->rope_delta : 0;
    return SNUG_OK;
}
