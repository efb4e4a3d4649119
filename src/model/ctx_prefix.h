/* ctx_prefix.h — a context's side of the prefix cache: the copy callbacks between its caches
 * (snug_ctx_prefix_state, model.h: host memory, or a device backend's, copied through its
 * download/upload) and the checkpoint store (src/prefix/prefix.h), and the check that the
 * store's layout is the context's. The engine (src/engine/engine.c) and the tests call these;
 * the store never sees a context. The bytes are the same on every backend (a file written from
 * a CPU context restores into a device one).
 * State blob: every DeltaNet layer's conv state, then every layer's delta state (float32, the
 * order of struct snug_kv), then — with speculative decoding — the MTP block's pending hidden
 * row (n_embd floats, position pos - 1).
 * KV row r: for each attention layer its K row then its V row (the stored bytes of the layer's
 * format, snug_kv_row_bytes), then — with speculative decoding — the MTP block's K and V rows of
 * position r - 1 (zeros for r = 0): the MTP row of a position is written once the next token is
 * known, so at a checkpoint at pos the MTP rows [0, pos - 1) exist and travel with the trunk's
 * rows [1, pos); a chain of checkpoints then stores each MTP row exactly once.
 * Owns: nothing. Invariant: a checkpoint is taken only from an exportable state (state_out
 * refuses otherwise). Read next: src/prefix/prefix.h, docs/prefix-cache.md.
 */
#ifndef SNUG_MODEL_CTX_PREFIX_H
#define SNUG_MODEL_CTX_PREFIX_H

#include "model/model.h"
#include "prefix/prefix.h"

/* Callbacks over *st (user = st: it must outlive the store/restore call). */
struct snug_prefix_io snug_ctx_prefix_io(struct snug_ctx_prefix_state *st);
/* Bytes of the state blob and of one KV row of this context (the plan's snug_plan_cache_cfg
 * computes the same from the plan). */
uint64_t snug_ctx_prefix_state_bytes(const struct snug_ctx_prefix_state *st);
uint64_t snug_ctx_prefix_row_bytes(const struct snug_ctx_prefix_state *st);
/* The store's state and row sizes are this context's. */
bool snug_ctx_prefix_fits(const struct snug_prefix *pc, const struct snug_ctx_prefix_state *st);
/* Copy src's checkpoint — its state blob and the KV rows [0, n) (the MTP rows before them too)
 * — into dst, another context of the same shapes, and its rotary offset: afterwards
 * snug_ctx_prefix_set_past(dst, toks, n) makes dst continue exactly as src would (the server
 * runs the n choices of one request from one prefill this way). n = src's n_past;
 * SNUG_ERR_INVALID (nothing copied) for other shapes, another n or a state inside a speculative
 * step. */
int snug_ctx_prefix_copy(struct snug_ctx_prefix_state *dst, const struct snug_ctx_prefix_state *src,
                         int32_t n);

#endif
