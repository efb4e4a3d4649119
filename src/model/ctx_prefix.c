/* ctx_prefix.c — copy callbacks between a context's caches and the prefix cache (see
 * ctx_prefix.h for the blob and row layouts). Host caches (the CPU) are memcpy'd; a device
 * context's go through its backend's download/upload: the state pieces one copy each, the KV
 * rows of a call one copy per layer and K/V through the caller's staging buffer (a layer's rows
 * are contiguous in the cache, interleaved per row in the store's layout), then one sync that
 * reports the device's error. */
#include "model/ctx_prefix.h"

#include "backend/backend.h"

#include <string.h>

/* host <-> cache bytes: memcpy, or the device backend's download / upload */
static void xfer(struct snug_be *dev, void *host, void *cache, size_t n, bool out) {
    if (!dev) {
        if (out)
            memcpy(host, cache, n);
        else
            memcpy(cache, host, n);
    } else if (out) {
        dev->ops->download(dev, host, cache, n);
    } else {
        dev->ops->upload(dev, cache, host, n);
    }
}

/* After a device context's copies: the backend's first error (SNUG_OK on the host). */
static int xfer_done(struct snug_be *dev) {
    if (!dev) return SNUG_OK;
    struct snug_err err = {0};
    int rc = dev->ops->sync(dev, &err);
    if (rc) snug_log(SNUG_LOG_WARN, "prefix cache: device copy failed: %s\n", err.msg);
    return rc;
}

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
        xfer(st->dev, b, src, m, out);
        b += m;
        off += m;
        n -= m;
    }
    return xfer_done(st->dev);
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

/* A device context's rows [row0, row0 + n_rows) of every layer of kv, shifted by `shift`
 * (the MTP cache: -1), to or from the packed rows at buf (row_bytes apart, this cache's part at
 * byte `at` of each): per layer and K/V the rows that exist (>= 0) move in copies of as many
 * as the staging buffer holds (one row straight into place without one); the row before 0
 * reads as zeros. */
static void layers_copy_dev(const struct snug_ctx_prefix_state *st, struct snug_kv *kv,
                            int32_t row0, int32_t n_rows, int32_t shift, uint8_t *buf,
                            size_t row_bytes, size_t at, bool out) {
    size_t kb = snug_kv_row_bytes(&kv->shape, 0), vb = snug_kv_row_bytes(&kv->shape, 1);
    int32_t skip = row0 + shift < 0 ? -(row0 + shift) : 0; /* leading rows before position 0 */
    for (int32_t l = 0; l < kv->shape.n_attn; l++)
        for (int part = 0; part < 2; part++) {
            size_t pb = part ? vb : kb;
            size_t col = at + (size_t)l * (kb + vb) + (part ? kb : 0);
            uint8_t *base = part ? (uint8_t *)kv->views[l].v : (uint8_t *)kv->views[l].k;
            if (out)
                for (int32_t i = 0; i < skip && i < n_rows; i++)
                    memset(buf + (size_t)i * row_bytes + col, 0, pb);
            int32_t per = st->staging && pb
                              ? (int32_t)SNUG_MIN(st->staging_bytes / pb, (size_t)INT32_MAX)
                              : 1;
            if (per < 1) per = 1;
            for (int32_t i = skip; i < n_rows; i += per) {
                int32_t k = SNUG_MIN(per, n_rows - i);
                uint8_t *dev = base + (size_t)(row0 + shift + i) * pb;
                uint8_t *row = buf + (size_t)i * row_bytes + col;
                if (k == 1) { /* one row: straight between the cache and its place */
                    xfer(st->dev, row, dev, pb, out);
                    continue;
                }
                if (!out)
                    for (int32_t j = 0; j < k; j++)
                        memcpy(st->staging + (size_t)j * pb, row + (size_t)j * row_bytes, pb);
                xfer(st->dev, st->staging, dev, (size_t)k * pb, out);
                if (out)
                    for (int32_t j = 0; j < k; j++)
                        memcpy(row + (size_t)j * row_bytes, st->staging + (size_t)j * pb, pb);
            }
        }
}

static int rows_copy(struct snug_ctx_prefix_state *st, int32_t row0, int32_t n_rows, uint8_t *buf,
                     bool out) {
    struct snug_kv *kv = st->kv;
    if (row0 < 0 || n_rows < 0 || row0 + n_rows > kv->shape.n_ctx ||
        (st->mtp_kv && row0 + n_rows - 1 > st->mtp_kv->shape.n_ctx))
        return SNUG_ERR_INVALID;
    if (out && st->mtp_kv && row0 + n_rows > st->n_past) return SNUG_ERR_INVALID; /* not written */
    if (st->dev) {
        size_t trunk = snug_kv_bytes_per_token(&kv->shape);
        size_t row_bytes = (size_t)snug_ctx_prefix_row_bytes(st);
        layers_copy_dev(st, kv, row0, n_rows, 0, buf, row_bytes, 0, out);
        if (st->mtp_kv)
            layers_copy_dev(st, st->mtp_kv, row0, n_rows, -1, buf, row_bytes, trunk, out);
        return xfer_done(st->dev);
    }
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
