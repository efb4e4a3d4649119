/* slots.h — the model's sequence slots: ONE backend instance (src/backend/backend.h), ONE work
 * arena and ONE thread pool per model, and n slots, each an attention KV cache + recurrent
 * state (+ rollback snapshots and MTP state with speculation), all sized by the memory plan
 * (src/plan: per-model buffers once, per-slot buffers per slot) and allocated at init. Each
 * slot is reached as a struct snug_ctx (a one-sequence handle that borrows the pool and the
 * instance), so everything written for contexts runs on a slot; the slots of one pool share
 * the work arena, so only one thread at a time may evaluate any of them (the server's engine
 * thread). Invariant: after snug_slots_init nothing is allocated until snug_slots_free.
 * Read next: src/model/context.c (the per-sequence handle), src/engine/engine.c (the user).
 */
#ifndef SNUG_ENGINE_SLOTS_H
#define SNUG_ENGINE_SLOTS_H

#include "backend/backend.h"
#include "plan/plan.h"
#include "snug.h"

struct snug_slots;

/* Plan and open the backend instance of n_slots slots for resolved parameters p
 * (snug_ctx_params_resolve): on CUDA the whole plan (weights included) is checked against
 * p->vram_budget first. pool: the CPU backend's thread pool (borrowed). *plan gets the plan. */
int snug_slots_open_backend(struct snug_model *m, const struct snug_ctx_params *p, int32_t n_slots,
                            struct snug_pool *pool, struct snug_be **be, struct snug_plan *plan,
                            struct snug_err *err);

/* n_slots slots of a model with parameters p (as snug_ctx_init's; n_threads sizes the one
 * pool). */
int snug_slots_init(struct snug_slots **out, struct snug_model *m, const struct snug_ctx_params *p,
                    int32_t n_slots, struct snug_err *err);
void snug_slots_free(struct snug_slots *s); /* NULL is a no-op */
int32_t snug_slots_n(const struct snug_slots *s);
/* Slot i's sequence (0 <= i < n), borrowed: valid until snug_slots_free. */
struct snug_ctx *snug_slots_ctx(struct snug_slots *s, int32_t i);
/* The backend instance and the plan it was sized by. */
struct snug_be *snug_slots_backend(struct snug_slots *s);
struct snug_pool *snug_slots_pool(struct snug_slots *s); /* the model's thread pool (or NULL) */
const struct snug_plan *snug_slots_plan(const struct snug_slots *s);

#endif /* SNUG_ENGINE_SLOTS_H */
