/* kv.h — the per-sequence caches of the hybrid models: the attention KV cache of every gated
 * attention layer (F32 or F16 rows, or the compressed formats of kvfmt.h, chosen separately for
 * K and V; exposed as struct snug_kv_view, src/kv/kv_view.h) and the recurrent state of every
 * Gated DeltaNet layer (conv state [K-1][conv_dim] + delta state [Nv][dk][dv], float32).
 * Owns one arena holding all of it, sized exactly by snug_kv_bytes at init.
 * Invariant: nothing is allocated after snug_kv_init; reset only zeroes the recurrent state
 * (KV rows past n_past are never read). Rollback (speculative decoding): snug_kv_snap_init
 * adds n snapshot slots, each a full copy of the recurrent states; a verification run of a step
 * (model.h struct snug_fwd_run.snapshot) saves the state after its row t into slot t (see
 * qwen35.c deltanet), and
 * snug_kv_snap_restore copies a slot back. Attention rows need no snapshot: truncating
 * n_past is enough. Read next: src/arch/qwen35.c (the user).
 */
#ifndef SNUG_KV_H
#define SNUG_KV_H

#include "kv/kv_view.h"
#include "core/core.h"

#include <stdbool.h>

struct snug_kv_shape {
    int32_t n_attn;      /* attention layers */
    int32_t n_head_kv;   /* Hkv */
    int32_t head_dim;    /* D */
    int32_t n_ctx;       /* positions */
    uint32_t type;       /* SNUG_DTYPE_F32 or SNUG_DTYPE_F16 */
    int32_t fmt;         /* K/V formats, snug_kvfmt_code (kvfmt.h); codes 0 and 1 (f16 or f32
                            for both) defer to `type`, any other selects the formats */
    int32_t n_rec;       /* DeltaNet layers */
    int64_t conv_elems;  /* floats of one layer's conv state: (K-1) * conv_dim */
    int64_t delta_elems; /* floats of one layer's delta state: Nv * dk * dv */
};

struct snug_kv {
    struct snug_kv_shape shape;
    struct snug_arena arena;
    struct snug_kv_view *views; /* [n_attn] */
    float *conv;                /* [n_rec][conv_elems] */
    float *delta;               /* [n_rec][delta_elems] */
    /* rollback snapshots (NULL/0 unless snug_kv_snap_init was called) */
    float *snap;        /* [n_snap][snap_stride]: conv states, then delta states */
    int32_t n_snap;     /* slots */
    size_t snap_stride; /* floats per slot (64-byte aligned) */
};

/* Bytes of one position of K (which 0) or V (which 1) in one attention layer. */
size_t snug_kv_row_bytes(const struct snug_kv_shape *s, int which);
/* Bytes of K+V for one token over all attention layers. */
size_t snug_kv_bytes_per_token(const struct snug_kv_shape *s);
/* Bytes of all recurrent states. */
size_t snug_kv_state_bytes(const struct snug_kv_shape *s);
/* Total bytes of one slot's KV + state arena: snug_kv_init's host layout (attention + states +
 * view table + alignment), or the device layout when that needs more (snug_kv_device_bytes), so
 * the one planned number holds either: the host arena and a device backend's slot are both
 * exactly this many bytes. */
size_t snug_kv_bytes(const struct snug_kv_shape *s);
/* A device backend's layout of one slot (src/backend/cuda/cuda_backend.c layout_kv): per
 * attention layer K then V, each SNUG_KV_DEVICE_ALIGN-aligned, then the conv states (aligned),
 * then the delta states; no view table (the views live on the host). Never more than
 * snug_kv_bytes; snug_backend_open refuses a limit that plans less (src/backend/loader.c). */
#define SNUG_KV_DEVICE_ALIGN 256
size_t snug_kv_device_bytes(const struct snug_kv_shape *s);

int snug_kv_init(struct snug_kv *kv, const struct snug_kv_shape *s, struct snug_err *err);
void snug_kv_free(struct snug_kv *kv);
/* Start a new sequence: zero every recurrent state. */
void snug_kv_reset(struct snug_kv *kv);

/* Bytes of n snapshot slots (what snug_kv_snap_init allocates; the plan's snapshot item). */
size_t snug_kv_snap_bytes(const struct snug_kv_shape *s, int32_t n);
/* Allocate n snapshot slots (at context init; idempotent for the same n). */
int snug_kv_snap_init(struct snug_kv *kv, int32_t n, struct snug_err *err);
/* Copy every recurrent state into slot t / back from slot t. */
void snug_kv_snap_save(struct snug_kv *kv, int32_t t);
void snug_kv_snap_restore(struct snug_kv *kv, int32_t t);
static inline float *snug_kv_snap_conv(struct snug_kv *kv, int32_t t, int32_t rec_idx) {
    return kv->snap + (size_t)t * kv->snap_stride + (size_t)rec_idx * (size_t)kv->shape.conv_elems;
}
static inline float *snug_kv_snap_delta(struct snug_kv *kv, int32_t t, int32_t rec_idx) {
    return kv->snap + (size_t)t * kv->snap_stride +
           (size_t)kv->shape.n_rec * (size_t)kv->shape.conv_elems +
           (size_t)rec_idx * (size_t)kv->shape.delta_elems;
}

static inline float *snug_kv_conv_state(struct snug_kv *kv, int32_t rec_idx) {
    return kv->conv + (int64_t)rec_idx * kv->shape.conv_elems;
}
static inline float *snug_kv_delta_state(struct snug_kv *kv, int32_t rec_idx) {
    return kv->delta + (int64_t)rec_idx * kv->shape.delta_elems;
}

#endif /* SNUG_KV_H */
