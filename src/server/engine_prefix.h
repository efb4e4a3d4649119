/* engine_prefix.h — the engine's side of the prefix cache for a CPU context: the copy
 * callbacks between a slot's caches (kv.h) and the store (src/prefix/prefix.h), and the check
 * that the store's layout is the context's.
 * State blob: every DeltaNet layer's conv state, then every layer's delta state (float32, the
 * order of struct snug_kv). KV row r: for each attention layer, its K row then its V row (the
 * stored bytes of the layer's format, snug_kv_row_bytes).
 * Owns: nothing. Read next: engine.c (the caller), src/prefix/prefix.h.
 */
#ifndef SNUG_SERVER_ENGINE_PREFIX_H
#define SNUG_SERVER_ENGINE_PREFIX_H

#include "kv/kv.h"
#include "prefix/prefix.h"

/* Callbacks over kv (user = kv). */
struct snug_prefix_io snug_engine_prefix_io(struct snug_kv *kv);
/* The store's state and row sizes are this context's. */
bool snug_engine_prefix_fits(const struct snug_prefix *pc, const struct snug_kv *kv);

#endif
