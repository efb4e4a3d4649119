/* kv.c — allocation and reset of the attention KV cache and the DeltaNet states (see kv.h).
 * Layout inside the one arena: the view table, then per attention layer K then V
 * ([n_ctx][Hkv·D] each, or [n_ctx][Hkv] stored vectors of the shape's kvfmt formats), then all conv
 * states, then all delta states; each 64-byte aligned. Also the size of a device backend's slot
 * (snug_kv_device_bytes, 256-byte pieces, no table): snug_kv_bytes, the plan's number, is the
 * larger of the two, so host and device allocate exactly the planned bytes. */
#include "kv.h"

#include "kv/kvfmt.h"
#include "quant/quant.h"

#include <string.h>

#define KV_ALIGN 64

static size_t elem_bytes(uint32_t type) {
    return type == SNUG_DTYPE_F16 ? 2 : 4;
}

/* Whether the shape selects kvfmt formats (else the plain F32/F16 `type`); *k, *v the formats. */
static bool shape_fmt(const struct snug_kv_shape *s, int *k, int *v) {
    if (s->fmt == SNUG_KV_F16 || s->fmt == SNUG_KV_F32) return false;
    return snug_kvfmt_split(s->fmt, k, v);
}

/* Bytes of one position of K (which 0) or V (which 1) over all kv heads. */
static size_t row_bytes_of(const struct snug_kv_shape *s, int which) {
    int k, v;
    if (shape_fmt(s, &k, &v))
        return (size_t)s->n_head_kv * snug_kvfmt_vec_bytes(which ? v : k, s->head_dim);
    return (size_t)s->n_head_kv * (size_t)s->head_dim * elem_bytes(s->type);
}

size_t snug_kv_row_bytes(const struct snug_kv_shape *s, int which) {
    return row_bytes_of(s, which);
}

size_t snug_kv_bytes_per_token(const struct snug_kv_shape *s) {
    return (size_t)s->n_attn * (row_bytes_of(s, 0) + row_bytes_of(s, 1));
}

size_t snug_kv_state_bytes(const struct snug_kv_shape *s) {
    return (size_t)s->n_rec * (size_t)(s->conv_elems + s->delta_elems) * sizeof(float);
}

/* snug_kv_init's carve of the arena. */
static size_t host_layout_bytes(const struct snug_kv_shape *s) {
    size_t b = SNUG_ALIGN_UP(sizeof(struct snug_kv_view) * (size_t)(s->n_attn + 1), KV_ALIGN);
    for (int which = 0; which < 2; which++)
        b += (size_t)s->n_attn * SNUG_ALIGN_UP(row_bytes_of(s, which) * (size_t)s->n_ctx, KV_ALIGN);
    b += SNUG_ALIGN_UP((size_t)s->n_rec * (size_t)s->conv_elems * sizeof(float), KV_ALIGN);
    b += SNUG_ALIGN_UP((size_t)s->n_rec * (size_t)s->delta_elems * sizeof(float), KV_ALIGN);
    return b + KV_ALIGN;
}

size_t snug_kv_device_bytes(const struct snug_kv_shape *s) {
    const size_t al = SNUG_KV_DEVICE_ALIGN;
    size_t k = SNUG_ALIGN_UP(row_bytes_of(s, 0) * (size_t)s->n_ctx, al);
    size_t v = SNUG_ALIGN_UP(row_bytes_of(s, 1) * (size_t)s->n_ctx, al);
    size_t conv = SNUG_ALIGN_UP((size_t)s->n_rec * (size_t)s->conv_elems * sizeof(float), al);
    size_t delta = (size_t)s->n_rec * (size_t)s->delta_elems * sizeof(float);
    return (k + v) * (size_t)s->n_attn + conv + delta;
}

/* The larger of the two layouts: the device one aligns each layer's K and V to 256 bytes, which
 * can outgrow the host's 64-byte carve (e.g. q8_0 rows at an odd context, where the view table
 * no longer covers the difference). */
size_t snug_kv_bytes(const struct snug_kv_shape *s) {
    size_t host = host_layout_bytes(s), dev = snug_kv_device_bytes(s);
    return SNUG_MAX(host, dev);
}

/* Allocate the arena and carve it; the caches start empty (states zeroed). */
int snug_kv_init(struct snug_kv *kv, const struct snug_kv_shape *s, struct snug_err *err) {
    memset(kv, 0, sizeof *kv);
    if (s->type != SNUG_DTYPE_F16 && s->type != SNUG_DTYPE_F32)
        return snug_err_set(err, SNUG_ERR_INVALID, "KV cache type %u: expected f32 or f16",
                            s->type);
    int kf = SNUG_KV_F16, vf = SNUG_KV_F16;
    bool fmt = shape_fmt(s, &kf, &vf);
    if (s->fmt != SNUG_KV_F16 && s->fmt != SNUG_KV_F32 &&
        (!fmt || !snug_kvfmt_supports(kf, s->head_dim) || !snug_kvfmt_supports(vf, s->head_dim)))
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "KV cache format code %d (K %s, V %s) cannot store head_dim %d "
                            "vectors (q8_0 needs a multiple of 32, tq4/tq3 of 64)",
                            s->fmt, fmt ? snug_kvfmt_name(kf) : "?",
                            fmt ? snug_kvfmt_name(vf) : "?", s->head_dim);
    kv->shape = *s;
    int rc = snug_arena_init(&kv->arena, "kv", snug_kv_bytes(s), err);
    if (rc) return rc;
    kv->views = snug_arena_alloc(&kv->arena, sizeof(struct snug_kv_view) * (size_t)(s->n_attn + 1),
                                 KV_ALIGN);
    size_t kb = row_bytes_of(s, 0) * (size_t)s->n_ctx, vb = row_bytes_of(s, 1) * (size_t)s->n_ctx;
    for (int32_t i = 0; i < s->n_attn; i++) {
        kv->views[i].type = fmt ? SNUG_KV_VIEW_FMT : s->type;
        kv->views[i].k_fmt = kf;
        kv->views[i].v_fmt = vf;
        kv->views[i].n_ctx = s->n_ctx;
        kv->views[i].k = snug_arena_alloc(&kv->arena, kb, KV_ALIGN);
        kv->views[i].v = snug_arena_alloc(&kv->arena, vb, KV_ALIGN);
    }
    kv->conv = snug_arena_alloc(&kv->arena, (size_t)s->n_rec * (size_t)s->conv_elems * 4, KV_ALIGN);
    kv->delta =
        snug_arena_alloc(&kv->arena, (size_t)s->n_rec * (size_t)s->delta_elems * 4, KV_ALIGN);
    snug_kv_reset(kv);
    return SNUG_OK;
}

void snug_kv_free(struct snug_kv *kv) {
    if (!kv) return;
    snug_free(kv->snap);
    snug_arena_free(&kv->arena);
    memset(kv, 0, sizeof *kv);
}

void snug_kv_reset(struct snug_kv *kv) {
    const struct snug_kv_shape *s = &kv->shape;
    if (s->n_rec == 0) return;
    memset(kv->conv, 0, (size_t)s->n_rec * (size_t)s->conv_elems * sizeof(float));
    memset(kv->delta, 0, (size_t)s->n_rec * (size_t)s->delta_elems * sizeof(float));
}

size_t snug_kv_snap_bytes(const struct snug_kv_shape *s, int32_t n) {
    return (size_t)n * SNUG_ALIGN_UP(snug_kv_state_bytes(s), (size_t)KV_ALIGN);
}

/* One heap block of n slots; slot t starts at a 64-byte multiple from the block. */
int snug_kv_snap_init(struct snug_kv *kv, int32_t n, struct snug_err *err) {
    if (n < 0) return snug_err_set(err, SNUG_ERR_INVALID, "KV snapshots: %d slots", n);
    if (kv->snap && kv->n_snap == n) return SNUG_OK;
    snug_free(kv->snap);
    kv->snap = NULL;
    kv->n_snap = 0;
    size_t bytes = snug_kv_snap_bytes(&kv->shape, n);
    if (bytes == 0) return SNUG_OK;
    kv->snap = snug_calloc(1, bytes);
    if (!kv->snap)
        return snug_err_set(err, SNUG_ERR_NOMEM, "KV snapshots: cannot allocate %zu bytes", bytes);
    kv->n_snap = n;
    kv->snap_stride = SNUG_ALIGN_UP(snug_kv_state_bytes(&kv->shape), (size_t)KV_ALIGN) / 4;
    return SNUG_OK;
}

void snug_kv_snap_save(struct snug_kv *kv, int32_t t) {
    SNUG_ASSERT(t >= 0 && t < kv->n_snap);
    const struct snug_kv_shape *s = &kv->shape;
    if (s->n_rec == 0) return;
    memcpy(snug_kv_snap_conv(kv, t, 0), kv->conv, (size_t)s->n_rec * (size_t)s->conv_elems * 4);
    memcpy(snug_kv_snap_delta(kv, t, 0), kv->delta, (size_t)s->n_rec * (size_t)s->delta_elems * 4);
}

void snug_kv_snap_restore(struct snug_kv *kv, int32_t t) {
    SNUG_ASSERT(t >= 0 && t < kv->n_snap);
    const struct snug_kv_shape *s = &kv->shape;
    if (s->n_rec == 0) return;
    memcpy(kv->conv, snug_kv_snap_conv(kv, t, 0), (size_t)s->n_rec * (size_t)s->conv_elems * 4);
    memcpy(kv->delta, snug_kv_snap_delta(kv, t, 0), (size_t)s->n_rec * (size_t)s->delta_elems * 4);
}
