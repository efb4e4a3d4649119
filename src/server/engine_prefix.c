/* engine_prefix.c — copy callbacks between a CPU context's caches and the prefix cache (see
 * engine_prefix.h). */
#include "server/engine_prefix.h"

#include <string.h>

static size_t conv_bytes(const struct snug_kv *kv) {
    return (size_t)kv->shape.n_rec * (size_t)kv->shape.conv_elems * sizeof(float);
}

/* The state blob's bytes [off, off + n) as (pointer, length) pieces of conv then delta. */
static int state_copy(struct snug_kv *kv, uint64_t off, void *buf, size_t n, bool out) {
    size_t cb = conv_bytes(kv), db = snug_kv_state_bytes(&kv->shape) - cb;
    if (off + n > cb + db) return SNUG_ERR_INVALID;
    uint8_t *b = buf;
    while (n) {
        uint8_t *src = off < cb ? (uint8_t *)kv->conv + off : (uint8_t *)kv->delta + (off - cb);
        size_t m = off < cb ? SNUG_MIN(n, cb - (size_t)off) : n;
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

static int rows_copy(struct snug_kv *kv, int32_t row0, int32_t n_rows, uint8_t *buf, bool out) {
    if (row0 < 0 || n_rows < 0 || row0 + n_rows > kv->shape.n_ctx) return SNUG_ERR_INVALID;
    size_t kb = snug_kv_row_bytes(&kv->shape, 0), vb = snug_kv_row_bytes(&kv->shape, 1);
    for (int32_t r = row0; r < row0 + n_rows; r++)
        for (int32_t l = 0; l < kv->shape.n_attn; l++) {
            uint8_t *k = (uint8_t *)kv->views[l].k + (size_t)r * kb;
            uint8_t *v = (uint8_t *)kv->views[l].v + (size_t)r * vb;
            if (out) {
                memcpy(buf, k, kb);
                memcpy(buf + kb, v, vb);
            } else {
                memcpy(k, buf, kb);
                memcpy(v, buf + kb, vb);
            }
            buf += kb + vb;
        }
    return SNUG_OK;
}

static int kv_out(void *user, int32_t row0, int32_t n_rows, void *dst) {
    return rows_copy(user, row0, n_rows, dst, true);
}
static int kv_in(void *user, int32_t row0, int32_t n_rows, const void *src) {
    return rows_copy(user, row0, n_rows, (uint8_t *)src, false);
}

struct snug_prefix_io snug_engine_prefix_io(struct snug_kv *kv) {
    return (struct snug_prefix_io){kv, state_out, state_in, kv_out, kv_in};
}

bool snug_engine_prefix_fits(const struct snug_prefix *pc, const struct snug_kv *kv) {
    return pc && kv && pc->n_pages > 0 && pc->cfg.state_bytes == snug_kv_state_bytes(&kv->shape) &&
           pc->cfg.kv_row_bytes == snug_kv_bytes_per_token(&kv->shape) &&
           pc->cfg.n_ctx >= kv->shape.n_ctx;
}
