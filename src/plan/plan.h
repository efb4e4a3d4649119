/* plan.h — the memory planner: from hyper-parameters, the weight tensor table and the run's
 * limits (context, slots, chunk, KV format, MTP draft length, backend, threads) it computes
 * every buffer a run allocates, as named items (name, bytes, device, estimated?). Contexts and
 * backends take their arena sizes from here (snug_ctx_init calls snug_plan_make); nothing
 * computes its own. Formulas: docs/memory.md.
 * Invariant: plan and allocation share the layout functions (snug_kv_bytes, the arch plan
 * hook's buffer functions, backend.h's host sizes of a device instance, the engine's and the
 * sequence's sizes below), so a planned arena is exactly the arena allocated; every item is
 * monotone non-decreasing in n_ctx (the max-context solver depends on it).
 * Read next: plan.c, src/model/context.c (the user), src/arch/qwen35.c (work arena).
 */
#ifndef SNUG_PLAN_H
#define SNUG_PLAN_H

#include "kv/kv.h"
#include "model/model.h"
#include "quant/quant.h"

#include <stdbool.h>
#include <stdint.h>

/* enum snug_backend (cpu, cuda): src/backend/backend.h */
enum snug_device { SNUG_DEVICE_HOST = 0, SNUG_DEVICE_GPU = 1 };

/* Weight bytes per dtype (and count of tensors), from a GGUF tensor table or a recipe. */
#define SNUG_PLAN_MAX_DTYPES 64
struct snug_plan_weights {
    uint64_t bytes[SNUG_PLAN_MAX_DTYPES];
    uint32_t count[SNUG_PLAN_MAX_DTYPES];
    uint64_t total;
    /* A rank's weights (tensor parallelism, snug_plan_weights_rank_*): the bytes it holds as
     * copies of what another rank owns (whole tensors on ranks 1.., replicated KV heads; in
     * total too), so Σ_r (total − replicated) = one device's total. 0 for one device. */
    uint64_t replicated;
};

/* The run's limits. Zero fields take defaults (snug_plan_limits_default). */
struct snug_plan_limits {
    int64_t n_ctx;     /* positions per slot */
    int32_t n_slots;   /* concurrent sequences (each a context); default 1 */
    int32_t n_chunk;   /* tokens per forward step; default 512, clamped to n_ctx */
    int32_t n_draft;   /* MTP draft length (0 = no speculative decoding) */
    int32_t n_threads; /* thread-pool size (scratch of some ops is per thread); default 1 */
    int32_t kv_type;   /* enum snug_kv_type */
    enum snug_backend backend;
    /* Tensor parallelism (src/plan/shard.h): the plan of rank `rank` of n_ranks devices (0 or 1
     * = one device). Its shape is the rank's (snug_shard_rank_hparams); the weights passed with
     * it must be that rank's (snug_plan_weights_rank_*). */
    int32_t n_ranks;
    int32_t rank;
};

/* Who holds a buffer: the model (one per loaded model however many slots: weights, the one
 * work arena, the op scratch, the backend's runtime) or each sequence slot (its KV cache,
 * recurrent state, snapshots, MTP state, logits row and sampler). */
enum snug_plan_scope { SNUG_PLAN_PER_MODEL = 0, SNUG_PLAN_PER_SLOT = 1 };

struct snug_plan_item {
    char name[48];
    uint64_t bytes; /* the whole run's: per-slot items are n_slots × slot_bytes */
    enum snug_device device;
    bool estimated; /* not a computed allocation (CUDA runtime overheads) */
    enum snug_plan_scope scope;
    uint64_t slot_bytes; /* per-slot items: one slot's bytes (0 for per-model items) */
};

#define SNUG_PLAN_MAX_ITEMS 48
struct snug_plan {
    struct snug_plan_limits lim; /* after defaults and clamping */
    struct snug_plan_item items[SNUG_PLAN_MAX_ITEMS];
    int n_items;
    uint64_t total;        /* all items */
    uint64_t device_total; /* items on the budgeted device: GPU for cuda, host for cpu */
    /* device_total = model_device_bytes + n_slots × slot_device_bytes */
    uint64_t model_device_bytes; /* its per-model items */
    uint64_t slot_device_bytes;  /* one slot's share of its per-slot items */
    /* What the backend instance allocates (src/engine/slots.c): */
    struct snug_kv_shape kv_shape; /* per slot: its KV/state arena (snug_kv_bytes(&kv_shape)) */
    size_t snapshot_bytes;         /* per slot: recurrent-state copies for rollback */
    size_t work_bytes;             /* per model: the work arena (one step of n_chunk tokens) */
    size_t pos_bytes;              /* per model: a step's position table + batch row table */
    size_t cuda_scratch_bytes;     /* per model, --backend cuda: the backend's op scratch */
    size_t cuda_host_work_bytes;   /* per model, --backend cuda: its host work arena */
};

/* Host buffers sized here and by the code that allocates them, so the two cannot drift:
 * - a sequence's token history (src/engine/sequence.c, snug_seq_init): the n_ctx tokens of its
 *   context and the pending one, per slot; */
uint64_t snug_plan_token_history_bytes(int64_t n_ctx);
/* - the serving engine's step (src/engine/engine.c, snug_engine_init): the logits table of a
 *   step, each slot's decode row, its n_draft verification rows and a prompt chunk's last row,
 *   at most the chunk's rows ([rows][V] f32) ... */
int32_t snug_plan_step_logits_rows(int32_t n_slots, int32_t n_draft, int32_t n_chunk);
/* ... and its bookkeeping: per slot the step's and the admission's slot lists, row ranges and
 *   jobs (SNUG_PLAN_ENGINE_SLOT_BYTES: 4 pointers and 3 int32), and the step's rows (one struct
 *   snug_step_row per chunk row). */
#define SNUG_PLAN_ENGINE_SLOT_BYTES (4 * sizeof(void *) + 3 * sizeof(int32_t))
uint64_t snug_plan_step_table_bytes(int32_t n_slots, int32_t n_chunk);

/* The KV format names the engine has, in enum order, NULL-terminated ("f16", "f32"). */
extern const char *const snug_plan_kv_names[];
/* "f16" -> SNUG_KV_F16 ...; -1 if unknown. */
int snug_plan_kv_parse(const char *name);

struct snug_plan_limits snug_plan_limits_default(void);

/* Weight bytes of an opened GGUF (tensor table only: no data is read). */
void snug_plan_weights_from_gguf(const struct snug_gguf *g, struct snug_plan_weights *w);
/* Weight bytes of a model of shape hp quantized with `recipe` (presets.h enumeration). */
int snug_plan_weights_from_recipe(const struct snug_hparams *hp, const char *recipe,
                                  struct snug_plan_weights *w, struct snug_err *err);

/* Rank `rank` of n_ranks's weight bytes (src/plan/shard.h: its slice of every tensor, the
 * replicated ones whole; copies counted in w->replicated); n_ranks 1 = the whole model's. Errors:
 * the split's refusals (a dimension that does not divide, a column split off the blocks). */
int snug_plan_weights_rank_from_gguf(const struct snug_gguf *g, const struct snug_hparams *hp,
                                     int32_t n_ranks, int32_t rank, struct snug_plan_weights *w,
                                     struct snug_err *err);
int snug_plan_weights_rank_from_recipe(const struct snug_hparams *hp, const char *recipe,
                                       int32_t n_ranks, int32_t rank, struct snug_plan_weights *w,
                                       struct snug_err *err);

/* Compute the plan. w may be NULL (no weight items: what a context needs on top of a loaded
 * model). SNUG_ERR_INVALID for bad limits or an architecture without a plan hook. */
int snug_plan_make(const struct snug_hparams *hp, const struct snug_plan_weights *w,
                   const struct snug_plan_limits *lim, struct snug_plan *out, struct snug_err *err);

/* One more per-model item after snug_plan_make (the vision tower's, src/vision/vision_plan.c):
 * counted in total, and in device_total when on the budgeted device. SNUG_ERR_INTERNAL when
 * the item table is full. */
int snug_plan_add_item(struct snug_plan *p, const char *name, uint64_t bytes, enum snug_device dev,
                       struct snug_err *err);

/* The largest n_ctx in [1, ctx_cap] whose plan's device_total fits `budget` bytes (binary
 * search; every item is monotone in n_ctx). 0 when not even one position fits. ctx_cap 0 =
 * the model's trained context (or 2^31-1 if unknown). */
int64_t snug_plan_max_ctx(const struct snug_hparams *hp, const struct snug_plan_weights *w,
                          const struct snug_plan_limits *lim, uint64_t budget, int64_t ctx_cap);

/* The budget table as text into buf (always NUL-terminated; returns the length it wanted):
 * one line per item — name, bytes, MiB, share of the budget (of the total when budget is 0)
 * and a text bar — then the total. Estimated items are marked "~". */
size_t snug_plan_format(const struct snug_plan *p, uint64_t budget, char *buf, size_t n);

/* For run/serve at boot: make the plan and check it against the budget (0 = no budget).
 * SNUG_ERR_BUDGET when it does not fit, the message naming the total, the budget and the
 * largest context that would fit. */
int snug_plan_check(const struct snug_hparams *hp, const struct snug_plan_weights *w,
                    const struct snug_plan_limits *lim, uint64_t budget, struct snug_plan *out,
                    struct snug_err *err);

/* Parse a size: "23.5GiB", "24G", "512MiB", "1e9" or plain bytes; K/M/G/T (and KiB..., KB...
 * — all binary: a memory budget is in powers of two). false on a malformed string. */
bool snug_plan_parse_size(const char *s, uint64_t *out);

/* snprintf into buf (n bytes) at *o, advancing *o by the wanted length even past the end (the
 * formatters' shared writer: snug_plan_format, plan_auto.c). */
/* "23.50 GiB" or "70.5 MiB" (GiB from 1 GiB up): sizes in boot lines and errors. */
const char *snug_plan_human_size(uint64_t b, char *buf, size_t n);
void snug_plan_putf(char *buf, size_t n, size_t *o, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

#endif /* SNUG_PLAN_H */
