/* plan_auto.h — sizing by itself: from a model, a backend, a budget (given, or the machine's
 * memory minus a stated margin), the slots and the MTP draft length, choose the context and
 * the K/V cache formats — the largest context the plan allows (capped at the trained length)
 * and, with `--kv auto`, the least lossy format or K/V pair that reaches the requested context;
 * then, with `--chunk auto`, the largest prompt chunk up to a cap that still fits.
 * Owns nothing; every number comes from snug_plan_make / snug_plan_max_ctx, so the choice is
 * exactly the plan the run then allocates. Also the one-line summary a user can paste back as
 * flags (snug_plan_auto_flags) and the per-format table of `snug plan --table`.
 * Invariant: the chosen plan's device_total fits the budget used; with an automatic context,
 * one more token would not fit, or the context is the trained length.
 * Read next: plan.h, docs/memory.md ("Sizing by itself"), src/cli/cli_autosize.c (the user).
 */
#ifndef SNUG_PLAN_AUTO_H
#define SNUG_PLAN_AUTO_H

#include "plan/plan.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* kv_type value meaning "choose" (--kv auto). */
#define SNUG_PLAN_KV_AUTO (-1)

/* ---- the prompt chunk (--chunk N|auto) ----
 * A prompt is evaluated in chunks of n_chunk tokens; each chunk reads (on cuda: dequantises)
 * every weight once, so fewer, larger chunks make GPU prompts faster, while the work arena, the
 * op scratch and the step tables grow with the chunk. `--chunk auto` takes the largest chunk of
 * SNUG_PLAN_CHUNK_BASE, 2x, 4x ... up to SNUG_PLAN_CHUNK_CAP whose whole plan still fits the
 * budget, after the context is settled (at the base chunk), so it never costs context. */
#define SNUG_PLAN_CHUNK_AUTO (-1) /* n_chunk value meaning "choose" */
#define SNUG_PLAN_CHUNK_BASE 512  /* the default chunk, and the automatic one's smallest */
/* The largest chunk `--chunk auto` takes on cuda, where prompt tokens/s stops rising. Measured on
 * an H100 80GB HBM3, the 27B preset at Q4_K_M with 16 layers, q8_0 KV, a 4,001-token prompt, two
 * rounds of prompt tok/s: chunk 512 8,422 / 8,356; 1024 9,147 / 9,127; 2048 10,251 / 9,781;
 * 4096 10,204 / 10,243. 2048 gains 17-22% over 512; 4096 gains nothing more for twice the work
 * arena (about 2 GiB against 1 GiB on the 27B), memory better left to the context. */
#define SNUG_PLAN_CHUNK_CAP 2048

enum snug_plan_chunk_why {
    SNUG_PLAN_CHUNK_GIVEN = 0,     /* --chunk N (clamped to the context) */
    SNUG_PLAN_CHUNK_FITS = 1,      /* auto: the largest of BASE..CAP whose plan fits the budget */
    SNUG_PLAN_CHUNK_CONTEXT = 2,   /* auto: the whole context (it is shorter than what fits) */
    SNUG_PLAN_CHUNK_NO_BUDGET = 3, /* auto on cuda with no budget known: the cap */
    SNUG_PLAN_CHUNK_CPU = 4,       /* auto on the cpu: the base (its prompt speed does not gain) */
};

/* The chunk of a plan whose context, formats, slots, draft, threads and backend are settled in
 * lim: lim->n_chunk SNUG_PLAN_CHUNK_AUTO chooses (see above; budget 0 = none known), any other
 * value is kept (0 = the base), clamped to the context as snug_plan_make does. The reason in
 * *why. The one search every command uses (run, serve, bench-local and plan). */
int32_t snug_plan_chunk(const struct snug_hparams *hp, const struct snug_plan_weights *w,
                        const struct snug_plan_limits *lim, uint64_t budget,
                        enum snug_plan_chunk_why *why);

/* "1024 (auto: the largest of 512..2048 that fits 23.50 GiB)": the chunk and why, for boot lines
 * and `snug plan`. Always NUL-terminated; returns the length it wanted. */
size_t snug_plan_chunk_str(int32_t n_chunk, enum snug_plan_chunk_why why, uint64_t budget,
                           char *buf, size_t n);

/* Margins when no budget is given (docs/memory.md): on cuda, the free device memory at start
 * minus 512 MiB (the driver and the CUDA libraries allocate beyond the plan's estimates, and
 * other processes come and go); on the cpu, the physical memory minus an eighth of it, at
 * least 1 GiB (the OS, the page cache the mmapped weights live in, other programs). Derived
 * budgets are rounded down to whole MiB so they print exactly. */
#define SNUG_PLAN_CUDA_MARGIN     ((uint64_t)512 << 20)
#define SNUG_PLAN_HOST_MARGIN_MIN ((uint64_t)1 << 30)

/* The candidate KV choices of --kv auto, least lossy first (measured order, docs/kv-formats.md):
 * f16, q8_0, fp8, q8_0/tq4, fp8/tq4, tq4, tq4/tq3, tq3 — as snug_kvfmt_code values. */
extern const int32_t snug_plan_auto_kv_order[];
extern const int snug_plan_auto_kv_n;

enum snug_plan_budget_source {
    SNUG_PLAN_BUDGET_NONE = 0,   /* nothing to size against (explicit ctx and kv, no budget) */
    SNUG_PLAN_BUDGET_GIVEN = 1,  /* --budget / --vram-budget */
    SNUG_PLAN_BUDGET_DEVICE = 2, /* free device memory at start minus the margin */
    SNUG_PLAN_BUDGET_HOST = 3,   /* physical memory minus the margin */
};

struct snug_plan_auto_req {
    /* slots, chunk, draft, threads, backend as for snug_plan_make; n_ctx: the requested context
     * (0 = automatic: the largest that fits, up to the trained length); kv_type: a format code
     * (snug_kvfmt_code) or SNUG_PLAN_KV_AUTO. */
    struct snug_plan_limits lim; /* n_chunk may be SNUG_PLAN_CHUNK_AUTO */
    uint64_t budget;             /* 0 = none given */
    uint64_t device_free; /* cuda without a budget: free device memory at start (the backend's) */
    uint64_t host_memory; /* cpu without a budget: physical memory; 0 = this machine's */
    /* host bytes the plan holds beside the sized items (the prefix cache's RAM tier on the
     * cpu): taken off the budget before the context and formats are chosen; the budget
     * reported (and printed as a flag) stays whole */
    uint64_t reserve;
};

struct snug_plan_auto {
    int64_t n_ctx;
    int32_t kv_type; /* snug_kvfmt_code */
    uint64_t budget; /* what the choice was sized against; 0 with SNUG_PLAN_BUDGET_NONE */
    enum snug_plan_budget_source source;
    uint64_t machine_bytes; /* SNUG_PLAN_BUDGET_DEVICE / _HOST: the memory the budget came from */
    bool ctx_auto;          /* the context was chosen (no request) */
    bool kv_auto;           /* the format was chosen */
    bool ctx_at_train;      /* the context is the trained length (more would fit) */
    int64_t ctx_reach;      /* the chosen format's largest context in the budget (uncapped by the
                               request; capped at the trained length); 0 without a budget */
    bool has_cache;         /* the caller's prefix cache RAM tier, printed as --cache-ram (serve) */
    uint64_t cache_ram;
    int32_t n_chunk; /* the chunk (snug_plan_chunk), as in plan.lim */
    enum snug_plan_chunk_why chunk_why;
    uint64_t chunk_budget; /* what an automatic chunk was fitted to: the budget, or on cuda
                              without one the free device memory minus the margin (0: none) */
    struct snug_plan plan;
};

/* Physical memory of this machine in bytes (sysconf); 0 when unknown. */
uint64_t snug_plan_host_memory(void);

/* The budget used without --budget: device_free − SNUG_PLAN_CUDA_MARGIN on cuda, host memory −
 * max(1/8, SNUG_PLAN_HOST_MARGIN_MIN) on the cpu, rounded down to MiB; 0 when unknown or not
 * above the margin. */
uint64_t snug_plan_default_budget(enum snug_backend backend, uint64_t device_free,
                                  uint64_t host_memory);

/* Choose the context and formats (see the file comment), then the chunk (snug_plan_chunk:
 * the context is chosen at the base chunk, so an automatic chunk never shortens it; without a
 * budget on cuda an automatic chunk fits the free device memory minus the margin when known,
 * though nothing is refused over it). SNUG_ERR_BUDGET, naming the largest
 * context that would fit, when the request cannot be met; SNUG_ERR_INVALID for bad limits, or
 * for an automatic choice on cuda with neither a budget nor a free-memory figure. */
int snug_plan_auto(const struct snug_hparams *hp, const struct snug_plan_weights *w,
                   const struct snug_plan_auto_req *req, struct snug_plan_auto *out,
                   struct snug_err *err);

/* The boot line, flags a user can paste back to get the same plan, then the reason in
 * parentheses, e.g. "--ctx 262144 --kv-k q8_0 --kv-v tq4 --vram-budget 23.5GiB --spec-draft 3
 * (largest context that fits 23.5 GiB, the trained length; least lossy KV format reaching
 * it)". The budget flag is --vram-budget on cuda, --budget on the cpu; slots are printed when
 * more than one. Always NUL-terminated; returns the length it wanted. */
size_t snug_plan_auto_flags(const struct snug_plan_auto *a, char *buf, size_t n);

/* `snug plan --table`: for every KV choice of snug_plan_table_kv and MTP off / on, the largest
 * context in the budget (capped at the trained length) and the plan's total there. */
extern const int32_t snug_plan_table_kv[];
extern const int snug_plan_table_kv_n;
struct snug_plan_table_row {
    int32_t kv_type;       /* snug_kvfmt_code */
    int32_t n_draft;       /* 0 = MTP off */
    int64_t max_ctx;       /* 0 = not even one token fits */
    uint64_t device_total; /* the plan at max_ctx (0 when nothing fits) */
    bool is_auto;          /* the choice --kv auto makes for this MTP setting, context automatic */
};
#define SNUG_PLAN_TABLE_MAX_ROWS 32
/* Rows in snug_plan_table_kv order, MTP off first, then on with n_draft_on drafts (only when
 * n_draft_on > 0). lim gives slots, chunk (auto: the contexts at the base chunk, the totals at
 * the chunk chosen there), threads, backend; budget must be non-zero. */
int snug_plan_table(const struct snug_hparams *hp, const struct snug_plan_weights *w,
                    const struct snug_plan_limits *lim, uint64_t budget, int32_t n_draft_on,
                    struct snug_plan_table_row *rows, int *n_rows, struct snug_err *err);

/* A size that snug_plan_parse_size reads back as exactly `bytes`: "23.5GiB", "512MiB", or the
 * byte count. */
const char *snug_plan_size_str(uint64_t bytes, char *buf, size_t n);

#endif /* SNUG_PLAN_AUTO_H */
