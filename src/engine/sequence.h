/* sequence.h — the generation loop of one sequence, shared by `snug run` and the server's engine:
 * the sampler, the constraint hook (force / mask / accept), speculative steps with the MTP
 * block (draft, then verification rows, then acceptance and rollback), logprobs, the streaming
 * detokenizer and the stopping conditions (end-of-generation tokens, max tokens, a full context,
 * a script's end, the caller's own stop such as a stop string).
 *
 * The loop is cut into phases so that a caller can put the rows of several sequences into one
 * forward (snug_step): after the prompt, snug_seq_first picks the first token from the prompt's
 * last logits; then each step
 *     n = snug_seq_rows(seq, rows, cap, &err);     // the pending token (+ its MTP drafts)
 *     ... snug_step over these rows and other sequences' rows ...
 *     snug_seq_take(seq, logits_of_these_rows, &err);   // pick / accept, emit, stop?
 * until seq->state is no longer SNUG_SEQ_RUNNING. The engine (src/engine/engine.c)
 * batches every slot's rows (so the verifications of N speculative slots are one forward);
 * `snug run` (src/cli/cmd_run.c) steps its one sequence. With spec_adapt the number of drafts
 * of each step is chosen from what the sequence measured (src/speculative/adapt.h): the
 * acceptance of its drafts and the time of its steps (a batching caller gives the shared
 * step's time: snug_seq_step_time).
 *
 * Invariant: toks[0..n_toks) are exactly the tokens evaluated into ctx (n_toks ==
 * snug_ctx_n_past(ctx)); while running, toks[n_toks] is the pending token: emitted, not yet
 * evaluated (the next snug_seq_rows starts with it). Emitting allocates nothing.
 * Read next: sequence.c, src/speculative/speculative.h (drafting and acceptance),
 * docs/spec-decode.md.
 */
#ifndef SNUG_ENGINE_SEQUENCE_H
#define SNUG_ENGINE_SEQUENCE_H

#include "sample/sample.h"
#include "snug.h"
#include "speculative/adapt.h"
#include "speculative/speculative.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>

#define SNUG_SEQ_MAX_TOP_LOGPROBS 20

/* Log-probabilities of one generated token under the model's raw distribution. */
struct snug_seq_logprob {
    float logprob;
    int32_t n_top;
    snug_token top_id[SNUG_SEQ_MAX_TOP_LOGPROBS];
    float top_logprob[SNUG_SEQ_MAX_TOP_LOGPROBS];
};

/* Where a sequence stands. */
enum snug_seq_state {
    SNUG_SEQ_IDLE = 0,    /* no generation begun (or the last one's end was reported) */
    SNUG_SEQ_RUNNING = 1, /* a token is pending: call snug_seq_rows */
    SNUG_SEQ_STOP = 2,    /* an end-of-generation token, the script's end, or on_token said stop */
    SNUG_SEQ_LENGTH = 3,  /* max_tokens, or the context is full */
};

struct snug_seq_params {
    struct snug_sampler_params sampler;
    int32_t max_tokens;                            /* <= 0: until the context is full */
    const snug_token *script;                      /* non-NULL: emit these ids, then stop */
    int32_t n_script;                              /* (a forced token does not advance it) */
    const struct snug_spec_constraint *constraint; /* NULL = none (borrowed) */
    bool logprobs;        /* fill the logprob argument of on_token (speculation is then off) */
    int32_t top_logprobs; /* 0..SNUG_SEQ_MAX_TOP_LOGPROBS */
    bool speculate;       /* MTP drafts when the context has them (snug_ctx_n_draft > 0) */
    bool spec_adapt;      /* the drafts per step chosen from the measured acceptance and step
                             costs (src/speculative/adapt.h), at most the context's spec k;
                             false: the context's spec k at every step */
    /* Each emitted token with the text that became complete (may be empty; id -1: the
     * detokenizer's flush, from snug_seq_flush). lp is NULL unless logprobs. Return true to
     * stop now (SNUG_SEQ_STOP). End-of-generation tokens are counted, not passed here. */
    bool (*on_token)(void *user, snug_token id, const char *text, size_t len,
                     const struct snug_seq_logprob *lp);
    void *user;
};

struct snug_seq {
    /* read-only for callers */
    struct snug_ctx *ctx; /* borrowed */
    snug_token *toks;     /* [n_ctx + 1] the evaluated tokens, then the pending one */
    int32_t n_toks;
    int32_t n_gen; /* tokens emitted by this generation (an end token included) */
    enum snug_seq_state state;
    /* private */
    int32_t V, n_ctx;
    struct snug_seq_params p;
    struct snug_sampler *smp;
    struct snug_detok detok;
    snug_token eog[SNUG_TOKENIZER_EOG_MAX];
    int32_t n_eog, script_pos;
    snug_token drafts[SNUG_SPEC_MAX_DRAFT]; /* this step's, when it verifies */
    int32_t k;                              /* their count (0: a plain decode row) */
    /* speculative steps: the draft-length estimates and counts (read-only for callers: the
     * statistics; kept across generations, the acceptance restarts with each), and this step's
     * clock — when snug_seq_rows began and returned, the step's time if the caller gave it */
    struct snug_spec_adapt adapt;
    double t_rows0, t_rows1, t_step;
    bool step_given;
    /* a plain row's pick made ahead of snug_seq_take (snug_seq_pick): its clock and result */
    bool picked, pick_go;
    double t_pick;
};

/* Bind a sequence to a context of model m (both borrowed; the model's tokenizer detokenizes):
 * the token buffer and the detokenizer are allocated here, once. */
int snug_seq_init(struct snug_seq *s, const struct snug_model *m, struct snug_ctx *ctx,
                  struct snug_err *err);
void snug_seq_free(struct snug_seq *s);

/* Start a generation with these parameters (the sampler is made here). The evaluated tokens
 * stay: a caller that reuses a prefix (the server's slot cache) keeps them, or calls
 * snug_seq_set_past first. */
int snug_seq_begin(struct snug_seq *s, const struct snug_seq_params *p, struct snug_err *err);
/* The context now holds toks[0..n) (after a reset, a prefix restore, an error: n = 0). */
void snug_seq_set_past(struct snug_seq *s, const snug_token *toks, int32_t n);
/* n prompt tokens went into the context (any chunking; snug_ctx_eval, snug_step). */
void snug_seq_evaluated(struct snug_seq *s, const snug_token *ids, int32_t n);
/* The first token, from the logits [V] after the prompt's last token (edited by the
 * constraint's mask): picks, emits, checks the stops. Returns the state. */
enum snug_seq_state snug_seq_first(struct snug_seq *s, float *logits);
/* This step's rows for a running sequence: the pending token, and after it up to
 * min(the context's spec k, cap - 1, the room left) MTP drafts as verification rows (the MTP
 * forwards run here, on the context's instance). Every row wants logits; at most cap rows
 * (cap >= 1). Returns the row count (0 when not running), or a negative status on a drafting
 * error (the sequence is then stopped; the context may hold MTP state to reset). */
int32_t snug_seq_rows(struct snug_seq *s, struct snug_step_row *rows, int32_t cap,
                      struct snug_err *err);
/* After the step that evaluated the rows: their logits (row-major, one per row, edited by
 * the constraint's mask). A plain row: pick the next token; verification rows: accept a prefix
 * of the drafts and roll the context back to them (snug_spec_accept). Emits the new tokens in
 * order, stopping at the first stop condition (the constraint has been told all of them by then:
 * a stop inside a verification's tokens ends the generation, so nothing reads it again).
 * Returns SNUG_OK, or the rollback's error. */
int snug_seq_take(struct snug_seq *s, float *logits, struct snug_err *err);
/* The pick of snug_seq_take for a plain row (no drafts), ahead of it and without emitting:
 * touches only this sequence, its sampler and its constraint, so the sequences of one step may
 * pick on separate threads (the engine's pool) while the emissions stay in order. No-op for a
 * verification or a sequence that is not running. */
void snug_seq_pick(struct snug_seq *s, float *logits);
/* The rows were not evaluated after all (the step failed): forget the drafts, keep pending. */
void snug_seq_untake(struct snug_seq *s);
/* Between snug_seq_rows and snug_seq_take of a speculative sequence: the step that evaluated the
 * rows took `seconds` (monotonic clock around the forward), for the draft-length adaptation;
 * negative: the step also did other work (another sequence's prompt rows), so it is no
 * measurement of this sequence's step. Without this call the sequence times the step itself,
 * from the end of snug_seq_rows to the start of snug_seq_take (a caller that steps this one
 * sequence). Its own drafting and acceptance are timed either way. */
void snug_seq_step_time(struct snug_seq *s, double seconds);
/* End the generation: the detokenizer's held bytes go to on_token (id -1) unless `quiet`
 * (a cancelled job), and the state returns to IDLE. The evaluated tokens stay. */
void snug_seq_flush(struct snug_seq *s, bool quiet);

/* Log-softmax of raw logits [V] at id, and the n_top most likely tokens (descending). */
void snug_seq_logprob(const float *logits, int32_t V, snug_token id, int32_t n_top,
                      struct snug_seq_logprob *lp);

#endif /* SNUG_ENGINE_SEQUENCE_H */
