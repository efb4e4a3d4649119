/* model.h — the loaded model and its contexts: snug_model_load (model.c: hyper-parameters,
 * the architecture's tensors, the vocabulary), the context (context.c: one sequence, a slot of
 * a backend instance) and the step over rows of several contexts, the MTP state a context owns
 * with speculative decoding (mtp.h), the prefix cache's access to a context. Backend-neutral:
 * the types of the forward (src/arch/arch.h) and the backend interface, never an op set.
 * Invariant: after snug_ctx_init nothing is allocated until snug_ctx_free; a step allocates
 * nothing. Read next: context.c, src/arch/arch.h (the model's types), src/kv/kv.h (caches).
 */
#ifndef SNUG_MODEL_H
#define SNUG_MODEL_H

#include "arch/arch.h"
#include "backend/backend.h"
#include "core/core.h"
#include "core/threadpool.h"
#include "snug.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Observe the input rows of every weight product of this context's steps (NULL: stop). The
 * context's steps then run alone (as with a layer hook). SNUG_ERR_UNSUPPORTED on a backend whose
 * activations are not in host memory (CUDA). obs is borrowed until replaced. */
int snug_ctx_set_mm_observer(struct snug_ctx *ctx, const struct snug_mm_observer *obs,
                             struct snug_err *err);

/* Contexts over a slot pool (src/engine/slots.c). Resolve a context's parameters in place
 * (defaults, the K/V pair code, the chunk clamp) and validate them. */
int snug_ctx_params_resolve(const struct snug_model *m, struct snug_ctx_params *p,
                            struct snug_err *err);
/* A context over slot `slot` of an opened backend instance owned by someone else (borrows pool
 * and be; allocates its row table and, n_draft > 0, its MTP state). p: resolved parameters;
 * n_chunk and pos_bytes: the instance's plan's rows per step and host row-table bytes
 * (src/plan: lim.n_chunk, pos_bytes). snug_ctx_free leaves the pool and instance alone. */
int snug_ctx_init_slot(struct snug_ctx **out, struct snug_model *m, const struct snug_ctx_params *p,
                       struct snug_pool *pool, struct snug_be *be, int32_t slot, int32_t n_chunk,
                       size_t pos_bytes, struct snug_err *err);
/* Hand a context made by snug_ctx_init_slot its pool and backend instance: snug_ctx_free then
 * closes the instance and frees the pool (snug_ctx_init's one-slot contexts, src/engine/slots.c).
 */
void snug_ctx_own_instance(struct snug_ctx *ctx);

/* Run a step's forward fn (the architecture's forward or mtp_forward) over f on its backend: as
 * a recorded step where the backend keeps them (backend.h step_begin: CUDA graphs) and the step
 * can replay — at most SNUG_FWD_LG_ROWS rows, its positions and ids in the backend's memory
 * (pos_be, ids_be), no layer hook, observer or multimodal rows — else as a plain call. */
void snug_fwd_exec(struct snug_fwd *f, void (*fn)(struct snug_fwd *f));

/* The prefix cache's access to a context (context.c; the copy callbacks over it:
 * src/model/ctx_prefix.h). A context's caches — its KV and recurrent state and, with
 * speculative decoding, the MTP block's KV cache and its pending hidden row ([n_embd] floats,
 * position n_past - 1) — in host memory (CPU) or in a device backend's memory (`dev`: the
 * callbacks copy through its upload/download). `exportable`: the state is a checkpoint's (with
 * MTP: exactly the row of n_past - 1 pending, which holds after every plain snug_ctx_eval; not
 * inside a speculative step). `staging`: a host buffer the caller may lend for a device
 * context's KV rows (each layer's rows of a call move in one copy through it; NULL: row by
 * row); snug_ctx_prefix_state leaves it NULL. */
struct snug_kv;
struct snug_be;
struct snug_ctx_prefix_state {
    struct snug_kv *kv;
    struct snug_kv *mtp_kv; /* NULL without speculative decoding */
    float *mtp_row;
    int64_t n_embd;
    int32_t n_past;
    int32_t *rope_delta; /* the context's rotary offset (the checkpoint carries it) */
    bool exportable;
    struct snug_be *dev; /* NULL: the caches are host memory */
    uint8_t *staging;
    size_t staging_bytes;
};
bool snug_ctx_prefix_state(struct snug_ctx *ctx, struct snug_ctx_prefix_state *out);
/* The longest prefix of the context's own sequence a checkpoint can be restored over by its
 * state alone (its KV rows, and the MTP rows before it, are already the context's). */
int32_t snug_ctx_prefix_in_place(const struct snug_ctx *ctx);
/* Trunk forwards run by steps whose first row was this context's (one step of rows of several
 * contexts counts once, on its first), and by recompute rollbacks; MTP forwards not counted.
 * The server's engine sums it over its slots to show how many forwards a step took. */
uint64_t snug_ctx_n_forwards(const struct snug_ctx *ctx);
/* After the state and the KV rows [0, n_past) of toks were written into the caches (a
 * restore), or to truncate the context to n_past tokens of its own sequence before a restore of
 * the state alone: set the sequence length (and the pending MTP row's token and position). The
 * rotary offset is the restore's (the io's rope_delta_in), left as it is here. */
int snug_ctx_prefix_set_past(struct snug_ctx *ctx, const snug_token *toks, int32_t n_past,
                             struct snug_err *err);

#endif /* SNUG_MODEL_H */
