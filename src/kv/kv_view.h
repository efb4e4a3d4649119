/* kv_view.h — the one type every backend and the cache module share for an attention layer's
 * cache of one sequence: where its K and V rows live (host or device memory) and in which
 * format. Owned by src/kv (which lays the views out over its arena); the backends read and
 * write through them. Invariant: position p of a plain F32/F16 view is at k + p·Hkv·D
 * elements; a SNUG_KV_VIEW_FMT view holds Hkv stored vectors of k_fmt / v_fmt per position
 * (src/kv/kvfmt.h). Read next: src/kv/kv.h (the caches), src/backend/backend.h (the ops).
 */
#ifndef SNUG_KV_VIEW_H
#define SNUG_KV_VIEW_H

#include <stdint.h>

/* The attention cache of one layer for one sequence: K and V rows of Hkv·D elements per
 * position, position p at base + p * row_bytes, in dtype F32 or F16. */
struct snug_kv_view {
    uint32_t type; /* SNUG_DTYPE_F32 or SNUG_DTYPE_F16, or SNUG_KV_VIEW_FMT */
    void *k;       /* [n_ctx][Hkv][D] */
    void *v;       /* [n_ctx][Hkv][D] */
    int64_t n_ctx; /* capacity in positions */
    int32_t k_fmt; /* type SNUG_KV_VIEW_FMT: the K and V formats (enum snug_kv_type, */
    int32_t v_fmt; /* src/kv/kvfmt.h); a position holds Hkv stored vectors of each */
};
/* View type of a cache in the formats of src/kv/kvfmt.h (compressed or a mixed K/V pair):
 * written and read by the backends' kv_store / attention ops (on the CPU
 * snug_op_kvq_store / snug_op_kvq_attention, src/backend/cpu/ops_attention_kvq.c). */
#define SNUG_KV_VIEW_FMT 0x4b56u

#endif /* SNUG_KV_VIEW_H */
