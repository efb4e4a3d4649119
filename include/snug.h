/* snug.h — the public C API of libsnug.
 *
 * A short tour:
 *   struct snug_err err = {0};
 *   struct snug_model *m;
 *   if (snug_model_load(&m, &(struct snug_model_params){.path = "m.gguf"}, &err) != SNUG_OK)
 *       fprintf(stderr, "%s\n", err.msg);
 *
 * Conventions: every fallible function returns an `enum snug_status`
 * (0 = ok, negative = failure) and writes a message a user can act on into a caller-owned
 * `struct snug_err`. The library never prints to stdout and never exits. Whoever `_init`s or
 * `_load`s, `_free`s; `_free(NULL)` is a no-op.
 *
 * Module headers (src/<module>/<module>.h) hold the internal APIs; read ARCHITECTURE.md next.
 */
#ifndef SNUG_H
#define SNUG_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. Values are stable (they appear in logs and exit codes): append only. */
enum snug_status {
    SNUG_OK = 0,
    SNUG_ERR_IO = -1,          /* a file could not be opened, read, mapped or written */
    SNUG_ERR_FORMAT = -2,      /* a file or input is malformed (GGUF, JSON, ids, ...) */
    SNUG_ERR_NOMEM = -3,       /* the system refused an allocation */
    SNUG_ERR_INVALID = -4,     /* a caller passed an invalid argument */
    SNUG_ERR_UNSUPPORTED = -5, /* well-formed but not supported (architecture, tensor type) */
    SNUG_ERR_BUDGET = -6,      /* the memory plan does not fit the budget / context exceeded */
    SNUG_ERR_INTERNAL = -7,    /* a broken invariant that was caught and reported */
};

/* Error detail, owned by the caller. `msg` is always NUL-terminated. */
struct snug_err {
    int status;
    char msg[512];
};

/* Record an error: formats `fmt` into err->msg (if err is non-NULL) and returns `status`,
 * so callers can write `return snug_err_set(err, SNUG_ERR_FORMAT, "...", ...);`. */
int snug_err_set(struct snug_err *err, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Prefix an existing error message with context ("loading x.gguf: <old message>"). */
int snug_err_prefix(struct snug_err *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* A short name for a status code ("ok", "io", "format", ...). */
const char *snug_status_str(int status);

typedef int32_t snug_token;
typedef int32_t snug_pos;

/* ==== model and context ===================================================================
 * Tutorial: load a model once, make a context (the per-sequence state: attention KV cache,
 * DeltaNet states, scratch memory, all sized and allocated at init), then feed tokens.
 *
 *   struct snug_err err = {0};
 *   struct snug_model *m = NULL;
 *   struct snug_model_params mp = {.path = "model.gguf"};
 *   if (snug_model_load(&m, &mp, &err)) { report(err.msg); }
 *   struct snug_ctx_params cp = snug_ctx_default_params();   // n_ctx 4096, chunk 512, KV f16
 *   struct snug_ctx *ctx = NULL;
 *   if (snug_ctx_init(&ctx, m, &cp, &err)) { report(err.msg); }
 *   float *logits = malloc(sizeof(float) * snug_model_n_vocab(m));
 *   snug_ctx_eval(ctx, prompt, n_prompt, logits, SNUG_EVAL_LOGITS_LAST, &err); // prefill
 *   snug_token next = argmax(logits);
 *   snug_ctx_eval(ctx, &next, 1, logits, SNUG_EVAL_LOGITS_LAST, &err);         // decode
 *   snug_ctx_free(ctx); snug_model_free(m);
 *
 * A context holds one sequence; snug_ctx_reset starts a new one without reallocating.
 * snug_ctx_eval allocates nothing: every buffer comes from arenas sized at snug_ctx_init.
 */
struct snug_model;
struct snug_ctx;
struct snug_tokenizer;

struct snug_model_params {
    const char *path; /* the GGUF file (first part of a split model) */
    int n_threads;    /* default thread count for contexts of this model; 0 = all online CPUs */
};

/* Open, validate and map a model: reads the hyper-parameters, maps every tensor (weights stay
 * in the file mapping) and checks each tensor's shape against the hyper-parameters. Errors
 * name the file and the offending key or tensor (expected vs actual). */
int snug_model_load(struct snug_model **out, const struct snug_model_params *params,
                    struct snug_err *err);
void snug_model_free(struct snug_model *m);

const char *snug_model_arch(const struct snug_model *m); /* "qwen35", "qwen35moe" */
int32_t snug_model_n_vocab(const struct snug_model *m);
int32_t snug_model_n_embd(const struct snug_model *m);
int32_t snug_model_n_layer(const struct snug_model *m); /* trunk layers, without MTP blocks */
int64_t snug_model_n_ctx_train(const struct snug_model *m);
/* The vocabulary embedded in the GGUF, borrowed (lives as long as the model); NULL when the
 * file carries no tokenizer. */
const struct snug_tokenizer *snug_model_tokenizer(const struct snug_model *m);

/* KV cache format of the attention layers. Zero (the default) is F16. The compressed formats
 * (docs/kv-formats.md, src/kv/kvfmt.h): BF16; Q8_0 (ggml blocks of 32); FP8 (e4m3, one float
 * scale per head vector); TQ4 / TQ3 (TurboQuant: rotated, Lloyd-Max 4 / 3 bits, fp16 norm). */
enum snug_kv_type {
    SNUG_KV_F16 = 0,
    SNUG_KV_F32 = 1,
    SNUG_KV_BF16 = 2,
    SNUG_KV_Q8_0 = 3,
    SNUG_KV_FP8 = 4,
    SNUG_KV_TQ4 = 5,
    SNUG_KV_TQ3 = 6,
};

struct snug_ctx_params {
    int32_t n_ctx;        /* maximum sequence length in tokens; 0 = 4096 (capped at train length) */
    int32_t n_chunk;      /* maximum tokens per forward step (prompt chunk); 0 = 512 */
    int32_t kv_type;      /* enum snug_kv_type */
    int32_t n_threads;    /* 0 = the model's n_threads */
    int32_t n_draft;      /* speculative decoding: the most MTP drafts per step (0 = off); > 0
                             needs an MTP block and allocates its cache and rollback snapshots */
    int32_t kv_type_k;    /* K and V formats chosen independently (enum snug_kv_type); when both */
    int32_t kv_type_v;    /* are SNUG_KV_F16 (zero, the default) kv_type applies to both */
    int32_t backend;      /* 0 = CPU, 1 = CUDA (src/backend/backend.h; device 0) */
    uint64_t vram_budget; /* backend CUDA: bytes the whole plan must fit (0 = no check) */
    bool profile;         /* backend CUDA: time every op, print the table at close (slow) */
};
struct snug_ctx_params snug_ctx_default_params(void);

int snug_ctx_init(struct snug_ctx **out, struct snug_model *m, const struct snug_ctx_params *params,
                  struct snug_err *err);
void snug_ctx_free(struct snug_ctx *ctx);
/* Forget the sequence (KV positions and recurrent states); keeps every allocation. */
void snug_ctx_reset(struct snug_ctx *ctx);

/* snug_ctx_eval flags. */
enum {
    SNUG_EVAL_LOGITS_LAST = 0, /* logits_out holds [V]: the last token's logits */
    SNUG_EVAL_LOGITS_ALL = 1,  /* logits_out holds [n][V]: one row per token */
    SNUG_EVAL_SNAPSHOT = 2,    /* keep a rollback point after each token (speculative
                                  verification: n <= n_draft + 1 and n <= n_chunk) */
};

/* Append n tokens to the sequence and run the model over them, in chunks of at most n_chunk
 * tokens (DeltaNet uses the chunked rule for a chunk of more than one token and the step
 * recurrence for one). logits_out may be NULL (state update only). Fails with
 * SNUG_ERR_BUDGET, changing nothing, when n_past + n exceeds n_ctx; with SNUG_ERR_INVALID for
 * an id outside the vocabulary. Allocates nothing. */
int snug_ctx_eval(struct snug_ctx *ctx, const snug_token *ids, int32_t n, float *logits_out,
                  unsigned flags, struct snug_err *err);
/* Batched decode: append ids[i] to ctxs[i] for i < n (n distinct contexts of the same model,
 * one token each) in one forward step whose matrix products run over all n rows, so each
 * weight is read once per step instead of n times; the conv, delta rule and attention of each
 * row run against its own context's caches. logits_out (may be NULL) gets [n][V], row i the
 * logits of ctxs[i]. Each row's logits equal a lone snug_ctx_eval of that token bit for bit
 * on the CPU (tests/e2e/test_batch_decode.c: f16, Q8_0, Q6_K, Q4_K_M). Steps hold at most
 * ctxs[0]'s n_chunk rows (more run as several steps) and use ctxs[0]'s backend instance
 * (thread pool, work arena; on CUDA the contexts must be slots of one instance, as the
 * server's are, to share a forward). Contexts with a layer hook, or on different device
 * instances, are evaluated one by one with snug_ctx_eval instead (same results); it is
 * snug_step with one decode row per context. Validates
 * everything first: a failure (a full context, an id outside the vocabulary, a repeated
 * context) changes nothing. Allocates nothing. */
int snug_ctx_eval_batch(struct snug_ctx *const *ctxs, const snug_token *ids, int32_t n,
                        float *logits_out, struct snug_err *err);
/* An image in a multimodal eval (docs/vision.md): the vision tower's output rows
 * embd [rows·cols][n_embd] (rows × cols: the merged patch grid, row-major) replace the inputs
 * of ids first .. first + rows·cols − 1 (the image's pad tokens). An image may span evals (a
 * prompt fed in pieces): pass it to each, `first` relative to that eval's ids (negative when
 * it began in an earlier one); only the rows inside the eval are read. */
struct snug_image_rows {
    int32_t first, rows, cols;
    const float *embd;
};
/* snug_ctx_eval with images: their rows take 3-D rotary positions (t, h, w) and the text after
 * an image continues at its first position + max(rows, cols), for this eval and every later
 * one until snug_ctx_reset (Qwen3.5's M-RoPE). Images in order, not overlapping, each
 * overlapping the n ids (SNUG_ERR_INVALID otherwise); on either backend (host rows; a device
 * context uploads them), with or without speculative decoding on the CPU (the MTP block takes
 * the image rows and the 3-D positions too; a device context with MTP drafts is refused,
 * SNUG_ERR_UNSUPPORTED). The rows are read during the call only. Allocates nothing. */
int snug_ctx_eval_images(struct snug_ctx *ctx, const snug_token *ids, int32_t n,
                         const struct snug_image_rows *images, int32_t n_images, float *logits_out,
                         unsigned flags, struct snug_err *err);
/* One step over a mixed batch: rows of several contexts of one model (prompt chunks of some,
 * the decode token of others, speculative verification rows of others) in one forward whose
 * matrix products run over every row (each weight read once per step); the conv, the delta
 * rule and the attention run per context, against its own caches, with the calls a step of that
 * context alone would make, so each context's logits equal its lone snug_ctx_eval's bit for bit
 * on the CPU when the weights' matrix kernel gives a row the same bits at both row counts
 * (always for F32/F16/BF16 weights; tests/e2e/test_batch_decode.c). Rows of one context come
 * together and in order, at positions n_past, n_past + 1, ... (so a context takes one run of
 * rows per step); SNUG_ROW_LOGITS on its last rows asks for their logits, packed in row order
 * into logits_out ([rows with SNUG_ROW_LOGITS][V], may be NULL); SNUG_ROW_VERIFY on all of a
 * context's rows makes them a speculative verification (as SNUG_EVAL_SNAPSHOT: rollback
 * points, n_draft >= rows - 1). A step holds at most rows[0].ctx's n_chunk rows and runs on its
 * backend instance (thread pool, work arena; device contexts must be slots of that instance,
 * src/engine/slots.h); contexts of other device instances or with a layer hook run as their
 * own forwards (same results). Validates everything first: a failure changes nothing.
 * Allocates nothing. snug_ctx_eval and snug_ctx_eval_batch are this step with one run of a
 * chunk, or runs of one decode row each. */
enum {
    SNUG_ROW_LOGITS = 1, /* this row's logits are wanted */
    SNUG_ROW_VERIFY = 2, /* a speculative verification row (a rollback point after it) */
};
struct snug_step_row {
    struct snug_ctx *ctx; /* the sequence: a context or a slot of a pool */
    snug_token token;     /* the input token */
    snug_pos pos;         /* its position: the context's next one (checked) */
    unsigned flags;       /* SNUG_ROW_* */
    /* (images go through snug_ctx_eval_images; a context holding images steps alone) */
};
int snug_step(const struct snug_step_row *rows, int32_t n, float *logits_out, struct snug_err *err);
int32_t snug_ctx_n_past(const struct snug_ctx *ctx); /* tokens in the sequence so far */
int32_t snug_ctx_n_ctx(const struct snug_ctx *ctx);

/* Debug hook: called during snug_ctx_eval with the hidden rows [n][n_embd] of positions
 * pos0 .. pos0+n-1 at each stage: stage 0 = token embeddings, stage l (1..n_layer) = output of
 * layer l-1, stage n_layer+1 = after the final norm (those rows feed the LM head). The rows
 * are borrowed for the duration of the call. NULL disables it. */
typedef void (*snug_layer_hook)(void *user, int32_t stage, snug_pos pos0, int32_t n, int32_t n_embd,
                                const float *rows);
void snug_ctx_set_layer_hook(struct snug_ctx *ctx, snug_layer_hook hook, void *user);

/* ==== speculative decoding with the MTP block (docs/spec-decode.md) ========================
 * A context made with n_draft > 0 keeps the trunk's last hidden rows and runs the model's MTP
 * block on them (docs/qwen35.md §3). One step, for a sampled token `next` that is not yet
 * evaluated: snug_ctx_draft(ctx, next, k, d, &nd, &err);               // k drafts by MTP argmax
 *   ids = [next, d_1..d_nd]; snug_ctx_eval(ctx, ids, nd + 1, logits,
 *                          SNUG_EVAL_LOGITS_ALL | SNUG_EVAL_SNAPSHOT, &err);   // verify
 *   accept a prefix of a drafts, then snug_ctx_truncate(ctx, n_past0 + a + 1, &err);
 * (src/speculative/speculative.h snug_spec_step does all of it with a sampler, greedy or Leviathan
 * rejection sampling.) Everything is allocated at snug_ctx_init. */

/* MTP blocks in the file (`nextn_predict_layers`); 0 = no speculative decoding. */
int32_t snug_model_n_nextn(const struct snug_model *m);
/* The n_draft the context was made with (0 = speculation off). */
int32_t snug_ctx_n_draft(const struct snug_ctx *ctx);

/* Evaluate like snug_ctx_eval with SNUG_EVAL_LOGITS_ALL into logits (may be NULL) and also
 * write the step-1 MTP logits of every position whose next token this call supplies into
 * mtp_logits: on a fresh context [n-1][V], row p = MTP(hidden at p, ids[p+1], position p),
 * the layout of the fixtures' mtp_logits.f32. Needs n_draft > 0. */
int snug_ctx_eval_mtp(struct snug_ctx *ctx, const snug_token *ids, int32_t n, float *logits,
                      float *mtp_logits, struct snug_err *err);

/* Draft up to k tokens after `next` (sampled from the last eval's logits, not yet evaluated):
 * MTP step 1 over the positions the last eval(s) processed with their next tokens (filling
 * the MTP cache), draft 1 = argmax at the last position, drafts 2..k chain the MTP's own
 * hidden output at position + 1 (docs/qwen35.md §3.3). k is clamped to n_draft and to the context
 * left for verifying; *n_out gets the count (0 when no room). Allocates nothing. */
int snug_ctx_draft(struct snug_ctx *ctx, snug_token next, int32_t k, snug_token *drafts,
                   int32_t *n_out, struct snug_err *err);

/* Roll the sequence back to n_past tokens: attention caches are truncated and the DeltaNet
 * conv/delta states restored from the snapshot taken after token n_past - 1 by the last
 * SNUG_EVAL_SNAPSHOT eval (or rebuilt, see snug_spec_set_rollback). n_past 0 is a reset.
 * SNUG_ERR_INVALID when no snapshot covers n_past. */
int snug_ctx_truncate(struct snug_ctx *ctx, int32_t n_past, struct snug_err *err);

/* Acceptance statistics, accumulated over the context's life (snug_ctx_reset keeps them).
 * Mean acceptance length = n_emitted / n_steps (tokens per verification, bonus included);
 * acceptance rate at draft position i = accepted_at[i] / proposed_at[i]. */
#define SNUG_SPEC_MAX_DRAFT 16
struct snug_spec_stats {
    int64_t n_steps;    /* verifications */
    int64_t n_drafted;  /* draft tokens proposed */
    int64_t n_accepted; /* draft tokens accepted */
    int64_t n_emitted;  /* tokens produced by verifications (accepted + 1 each) */
    int64_t proposed_at[SNUG_SPEC_MAX_DRAFT];
    int64_t accepted_at[SNUG_SPEC_MAX_DRAFT];
};
void snug_ctx_spec_stats(const struct snug_ctx *ctx, struct snug_spec_stats *out);
void snug_ctx_spec_stats_reset(struct snug_ctx *ctx);
/* Drafts per step used by snug_spec_step: 0 (plain decoding) .. n_draft. Default n_draft. */
int snug_ctx_set_spec(struct snug_ctx *ctx, int32_t draft_k, struct snug_err *err);
int32_t snug_ctx_spec_k(const struct snug_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif /* SNUG_H */
