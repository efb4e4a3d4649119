/* engine.h — the engine: one thread that owns the model's contexts (one per slot) and runs
 * steps, and a bounded queue through which any front end's threads hand it jobs (the server's
 * HTTP threads: src/server/http.c).
 *
 * A step: admit queued jobs to free slots (reusing a slot whose cached tokens are a strict
 * prefix of the new prompt), then one snug_step over a prompt chunk of each prefilling slot
 * and the rows of each generating slot (its pending token, plus the MTP drafts to verify on a
 * speculative slot), then each generating slot's generation loop (src/engine/sequence.h: the
 * one `snug run` uses too) picks or accepts its tokens, detokenizes and calls on_token.
 * Invariant: only the engine thread touches contexts, samplers and detokenizers; a job is
 * borrowed by the engine from submit until its on_done call returns, and never after.
 * JSON never enters here: a front end's callbacks (the server's: src/server/http.c) turn tokens
 * into responses; nothing here includes a front end's header.
 * Read next: engine.c, slots.h, sequence.h, then src/server/http.c (a front end).
 */
#ifndef SNUG_ENGINE_ENGINE_H
#define SNUG_ENGINE_ENGINE_H

#include "engine/sequence.h"
#include "sample/sample.h"
#include "snug.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Why a job ended. */
enum snug_engine_finish {
    SNUG_FINISH_STOP = 0,   /* end-of-generation token, stop string, end of script */
    SNUG_FINISH_LENGTH = 1, /* max_tokens or the context is full */
    SNUG_FINISH_CANCEL = 2, /* the client went away (or the server shuts down) */
    SNUG_FINISH_TIMEOUT = 3,
    SNUG_FINISH_ERROR = 4, /* an eval failed; the message is in the job's err */
};

struct snug_prefix;
struct snug_vision_encoder;

/* Per-job counts and timings, filled by the engine before on_done. */
struct snug_engine_usage {
    int32_t n_prompt; /* prompt tokens */
    int32_t n_cached; /* of which were reused from the slot's cache */
    int32_t n_gen;    /* generated tokens (including a final end token) */
    double prompt_ms; /* time in prompt processing */
    double gen_ms;    /* time from the first decode to the end */
    double queue_ms;  /* time waiting in the queue */
    int32_t slot;     /* which slot ran it */
    /* speculative decoding during this request: verification steps, drafts proposed/accepted */
    int64_t spec_steps, spec_drafted, spec_accepted;
};

/* A per-job constraint on the tokens the engine picks (grammars, logit_bias: the server's
 * src/server/constraint.h builds one). All members optional; called on the engine thread only. At
 * each pick: force() may name a token to emit without sampling (-1 = sample); otherwise mask()
 * edits the logits row (disallowed tokens -> -INFINITY) before the sampler runs; accept() is told
 * every committed token (end tokens too), in order. With speculative decoding the same calls
 * happen per verification row (src/speculative/speculative.h snug_spec_accept: row i
 * is masked in the state after the drafts before it, so a rejected draft is cut there);
 * allows() and rollback() are for engines that check drafts ahead of verification — today's
 * engine calls neither. */
struct snug_engine_constraint {
    void *user;
    snug_token (*force)(void *user);                          /* a token to emit, or -1 */
    void (*mask)(void *user, float *logits, int32_t n_vocab); /* disallowed -> -INFINITY */
    void (*accept)(void *user, snug_token id);                /* a token was committed */
    bool (*allows)(void *user, snug_token id);                /* speculative drafts */
    void (*rollback)(void *user, int32_t n);                  /* undo the last n accepts */
};

/* An image of a job's prompt (src/server/images.c): its pad run prompt[first, first + rows·cols),
 * the file bytes the engine encodes (through the server's vision encoder, one image at a time)
 * when the prefill reaches the run, and the bytes' hash (the prefix cache's key of the run). */
#define SNUG_ENGINE_MAX_IMAGES 32
struct snug_engine_image {
    int32_t first, rows, cols;
    const uint8_t *bytes; /* borrowed, like the prompt */
    size_t n_bytes;
    uint64_t hash;
};

/* A generation job. The submitter fills the inputs and callbacks, keeps the job alive until
 * on_done has returned, and may set `cancel` at any time from any thread. */
struct snug_engine_job {
    /* inputs (read-only once submitted) */
    const snug_token *prompt; /* [n_prompt], borrowed */
    int32_t n_prompt;
    struct snug_sampler_params sampler;
    int32_t max_tokens;       /* <= 0: until the context is full */
    bool logprobs;            /* fill the logprob argument of on_token */
    int32_t top_logprobs;     /* 0..SNUG_SEQ_MAX_TOP_LOGPROBS */
    double deadline_s;        /* snug_time_s() deadline, 0 = none */
    const snug_token *script; /* when non-NULL, generation follows these ids, then stops */
    int32_t n_script;
    /* chat prompts: token positions where messages start (ascending, borrowed), the end of the
     * system turn, of the last message and of the last real user query (0: none) — the prefix
     * cache's chunk boundaries and checkpoint positions (src/prefix/prefix_sched.h) */
    const int32_t *msg_starts;
    int32_t n_msg_starts, system_end, last_end, user_end;
    const struct snug_engine_constraint *constraint; /* NULL = none */
    /* images in the prompt (in order, not overlapping; at most SNUG_ENGINE_MAX_IMAGES; needs
     * opts.vision) and the prompt's key for the prefix cache and slot reuse: the prompt with
     * each image's pads replaced by ids drawn from its hash (images.c; NULL = the prompt) */
    const struct snug_engine_image *images;
    int32_t n_images;
    const snug_token *key;
    /* Another job of the same prompt (and images), submitted before this one in the same
     * snug_engine_submit_n call (NULL = none): when both get slots together, this job waits
     * for that one's prefill and starts from a copy of its slot's state and last logits (one
     * prefill for the n choices of a request: snug_ctx_prefix_copy); otherwise (a device
     * context, no slot free at the same time, that job ended first) it prefills itself. Either
     * way its tokens are those of the same job submitted alone. */
    const struct snug_engine_job *prefill_from;
    /* Called on the engine thread for each generated token with the text that became complete
     * (may be empty; id -1 = the detokenizer's flush at the end). lp is NULL unless logprobs.
     * Return true to stop generation now (finish STOP, e.g. a stop string matched). */
    bool (*on_token)(void *user, snug_token id, const char *text, size_t len,
                     const struct snug_seq_logprob *lp);
    /* Called exactly once, on the engine thread, when the job ends (also for jobs cancelled in
     * the queue). After it returns the engine forgets the job. */
    void (*on_done)(void *user, enum snug_engine_finish finish,
                    const struct snug_engine_usage *usage, const char *errmsg);
    /* Optional (NULL = none): called on the engine thread after each prompt chunk with the
     * prompt tokens in the context (the reused prefix included), the prompt length, the reused
     * prefix and the milliseconds since the job got its slot. */
    void (*on_progress)(void *user, int32_t processed, int32_t total, int32_t cached, double ms);
    /* Optional (NULL = none): called on the engine thread before each step while the job holds
     * a slot; true when its client is gone (a non-streaming request whose connection closed):
     * the job is then cancelled and its slot freed, as for `cancel`. */
    bool (*client_gone)(void *user);
    void *user;
    atomic_bool cancel;
    /* engine-private */
    double t_submit;
    struct snug_engine_job *next;
};

struct snug_engine_opts {
    int32_t n_slots;            /* >= 1 */
    int32_t n_ctx;              /* per slot */
    int32_t kv_type;            /* enum snug_kv_type */
    int32_t n_threads;          /* the model's thread pool; 0 = model default */
    int32_t queue_cap;          /* jobs waiting beyond the slots; >= 1 */
    int32_t n_draft;            /* MTP drafts per speculative step; 0 = plain decoding */
    bool spec_adapt;            /* at most n_draft, chosen per step and slot from the measured
                                   acceptance and step costs (src/speculative/adapt.h) */
    int32_t backend;            /* 0 = CPU, 1 = CUDA (snug_ctx_params.backend) */
    uint64_t vram_budget;       /* backend CUDA: bytes the whole plan must fit (0 = no check) */
    struct snug_prefix *prefix; /* the prefix cache (borrowed) or NULL */
    int32_t cache_every;        /* its checkpoint interval in tokens */
    int32_t n_chunk;            /* rows per step (the plan's chunk); 0 = 512; at most n_ctx */
    int32_t prompt_budget;      /* prompt tokens a prefilling slot adds to one step beside the
                                   other slots' decode rows: N (at most n_chunk), or 0 = auto:
                                   n_chunk while no other slot decodes, else a time budget from
                                   the measured steps (step_budget.h) */
    struct snug_vision_encoder *vision; /* the vision tower's encoder (borrowed) or NULL */
};

/* Live numbers for /health and /metrics (cumulative counters since start). */
struct snug_engine_stats {
    int32_t n_slots, slots_busy, queue_len, queue_cap, n_ctx;
    int64_t tokens_in_slots; /* sum of cached tokens over slots (KV / state use) */
    uint64_t prompt_tokens;  /* prompt tokens evaluated (excluding reused prefix) */
    uint64_t cached_tokens;  /* prompt tokens reused from slot caches */
    uint64_t gen_tokens;
    double prompt_s, gen_s; /* engine time spent in prompt processing / decoding */
    uint64_t jobs_done, jobs_cancelled;
    uint64_t steps;
    /* trunk forwards the steps ran (snug_ctx_n_forwards; MTP drafting not counted), and of the
     * steps holding speculative verifications: their count, the verifications in them (one per
     * slot and step), their forwards (one each when the verifications are batched), the most
     * verifications one step held */
    uint64_t forwards;
    uint64_t verify_steps, verify_runs, verify_forwards;
    int32_t verify_runs_max;
    int32_t n_draft;         /* speculative drafts per step, 0 = off */
    uint64_t images_encoded; /* images run through the vision tower */
    /* the prompt rows per step (--step-prompt): auto or fixed; the rows a prefilling slot gets
     * beside decoding slots now (auto: from the measurements so far); the measurements
     * (step_budget.h, seconds; 0: none yet); the steps that carried prompt rows beside decode
     * rows, and their prompt rows */
    bool step_prompt_auto;
    int32_t step_prompt_rows;
    double step_decode_s, step_prompt_row_s;
    uint64_t mixed_steps, mixed_prompt_rows;
    struct snug_spec_stats spec; /* summed over the slots' contexts */
    /* the draft count per step (--spec-adapt, src/speculative/adapt.h): adaptive or fixed; the
     * steps of the slots' speculative generations (plain steps included);
     * over the slots generating now, the mean draft count the rule chose last (adapt off: the
     * fixed one) and the mean acceptance estimate (the last values while none generates) */
    bool spec_adapt;
    uint64_t spec_gen_steps;
    double spec_draft_now, spec_accept_now;
};

struct snug_engine;

/* Make the slots (one backend instance for the model, a sequence per slot, all allocated now)
 * and start the engine thread. */
int snug_engine_init(struct snug_engine **out, struct snug_model *m,
                     const struct snug_engine_opts *opts, struct snug_err *err);
/* Stop the thread (jobs still queued or running end with CANCEL) and free everything. */
void snug_engine_free(struct snug_engine *e);

/* Queue a job. SNUG_ERR_BUDGET when the queue is full (the caller answers 503),
 * SNUG_ERR_INVALID when the prompt does not fit the context. */
int snug_engine_submit(struct snug_engine *e, struct snug_engine_job *job, struct snug_err *err);
/* Queue n jobs at once, in order (all or none: SNUG_ERR_BUDGET when the queue cannot take
 * them all). */
int snug_engine_submit_n(struct snug_engine *e, struct snug_engine_job *const *jobs, int32_t n,
                         struct snug_err *err);
/* Wake the engine (after setting a job's cancel flag, so the slot is freed at once). */
void snug_engine_wake(struct snug_engine *e);
void snug_engine_get_stats(struct snug_engine *e, struct snug_engine_stats *out);

/* The boot self-test result ("ok" or what failed): init runs a short prompt through slot 0
 * twice and checks the logits are finite and identical (a reset really resets). Borrowed. */
const char *snug_engine_self_test(const struct snug_engine *e);

#endif /* SNUG_ENGINE_ENGINE_H */
