/* engine.c — the engine thread, its slots and the job queue (see engine.h for the contract).
 *
 * Owns: the model's slot pool (src/engine/slots.h: one backend instance, work arena and thread
 * pool; one sequence per slot), and per slot its generation loop (src/engine/sequence.h: the
 * sampler, detokenizer, constraint, speculative step and token cache) and a logits row; the
 * queue.
 * Invariant: slot->seq.toks[0..seq.n_toks) are exactly the tokens evaluated into slot->ctx, so
 * a new prompt that strictly extends them can continue from the slot's state (the DeltaNet
 * state cannot be rolled back, so only exact extensions qualify).
 * One step for all slots (engine_step): every generating slot gives its rows (the pending token,
 * and after it the MTP drafts to verify: snug_seq_rows), then ONE snug_step evaluates all of
 * them and a prompt chunk of each prefilling slot (at most the per-step prompt budget) — the
 * verifications of every speculative slot included — in one forward (weights read once per step
 * for all slots), so a long prompt does not freeze the other slots' streams; then the plain
 * rows' picks run on the thread pool (snug_seq_pick: each slot's own sampler over 248K logits,
 * idle threads on a device backend) and each slot takes its logits rows in turn
 * (snug_seq_take: pick or accept, roll back, emit, stop). The prompt
 * budget is --step-prompt N, or under auto (the default) a time budget while other slots decode:
 * every batched step is timed and the rows follow step_budget.h's rule (prefill_len).
 * Prefix cache (src/prefix, docs/prefix-cache.md; CPU contexts, with or without speculation):
 * pick_slot also looks the prompt up among the cached checkpoints and restores the best one
 * (slot_start); prefill chunks end where the schedule says and checkpoints are stored there.
 * Images (docs/vision.md "Through the server"): a prompt chunk that overlaps an image runs in a
 * step of its own (slot_prefill_image): the engine thread encodes the image through the
 * server's vision encoder when the prefill reaches it (the encoder's one buffer holds one image's
 * rows; images_encoded counts), then feeds the chunks up to the image's end through
 * snug_ctx_eval_images, each with at most one image. The prefix cache and slot reuse compare the
 * job's key (the prompt with each image's pads drawn from its bytes' hash) so a cached image is
 * not encoded again and a different image with the same text does not match.
 * One prefill for several choices (a request's n > 1): a job whose prefill_from names a job
 * admitted with it waits (SLOT_WAIT) until that job's prompt is in, then its slot gets a copy of
 * that slot's state, KV rows and last logits (snug_ctx_prefix_copy; CPU contexts) and starts
 * generating from them; if the copy is not possible it prefills itself.
 * Read next: src/server/http.c (a front end: the callbacks that turn tokens into responses).
 */
#include "engine/engine.h"

#include "model/ctx_prefix.h"
#include "model/model.h"
#include "plan/plan.h"
#include "prefix/prefix.h"
#include "prefix/prefix_sched.h"

#include "core/core.h"
#include "core/threadpool.h"
#include "engine/sequence.h"
#include "engine/slots.h"
#include "engine/step_budget.h"
#include "kv/kvfmt.h"
#include "speculative/speculative.h"
#include "tokenizer/tokenizer.h"
#include "vision/vision.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

enum slot_state { SLOT_FREE = 0, SLOT_PREFILL, SLOT_GEN, SLOT_WAIT /* for wait_on's prefill */ };

struct slot {
    int32_t index;
    struct snug_ctx *ctx;
    struct snug_seq seq; /* the generation loop; seq.toks[0..seq.n_toks): ctx's tokens */
    float *logits;       /* [V] logits after the last prompt token */
    struct snug_spec_constraint con; /* the job's constraint, as the loop takes it */
    enum slot_state state;
    struct snug_engine_job *job;
    int32_t n_prefilled; /* prompt tokens in the context so far */
    double t_admit, t_prompt_done;
    struct snug_engine_usage usage;
    uint64_t last_used;
    struct snug_spec_stats spec0; /* the context's statistics when the job started */
    /* prefix cache: the checkpoint pick_slot chose (entry -1: none), whether the slot needs
     * its KV rows too (not when its own tokens already hold that prefix), the prefill's
     * chunk/checkpoint schedule */
    struct snug_prefix_hit hit;
    bool hit_kv;
    struct snug_prefix_sched sched;
    /* the images of the sequence in toks (the last job's): their pad runs and hashes */
    int32_t n_img;
    struct slot_image {
        int32_t first, count;
        uint64_t hash;
    } img[SNUG_ENGINE_MAX_IMAGES];
    uint64_t serial;      /* the job's number (the encoder's rows name it) */
    struct slot *wait_on; /* SLOT_WAIT: the slot whose prefill this one copies */
    /* its end-of-generation checkpoint, taken once the step's other answers are out
     * (flush_stores): the job's image and prompt counts */
    bool store_pending;
    int32_t store_images, store_prompt;
};

struct snug_engine {
    struct snug_model *m;
    const struct snug_tokenizer *tok;
    int32_t V, n_ctx, n_chunk, n_draft;
    bool spec_adapt; /* --spec-adapt: each slot's drafts per step from its measurements */
    struct slot *slots;
    int32_t n_slots;
    /* the engine thread's admission lists (n_slots each, allocated at init) */
    struct slot **started;
    struct snug_engine_job **started_job;
    bool can_copy;           /* slots can take a copy of another's state (CPU contexts) */
    struct snug_slots *pool; /* the slots' sequences over one backend instance */
    /* the step's tables (engine_step; all allocated at init): the slots with decode or
     * verification rows (n_slots) and where their rows start and how many, the logits it
     * writes, its rows, the slots with a prompt chunk in it */
    struct slot **b_slot;
    int32_t *b_row0, *b_nrows;
    float *b_logits; /* [b_logits_rows][V]: decode/verification rows, then prompt chunks' last */
    int32_t b_logits_rows;
    struct snug_step_row *b_rows; /* [n_chunk] the step's rows (snug_step) */
    struct slot **p_slot;         /* [n_slots] the slots with a prompt chunk in the step */
    int32_t *p_len;               /* [n_slots] and its length */
    int32_t prompt_budget;        /* prompt rows per slot and step (<= n_chunk); under auto the
                                     chunk: the schedule's grid, the pieces cut inside it */
    bool step_auto;               /* --step-prompt auto: pieces from the measured step costs */
    struct snug_step_cost cost;   /* those measurements (engine thread; step_budget.h) */

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct snug_engine_job *q_head, *q_tail;
    int32_t q_len, q_cap;
    bool stop;
    struct snug_engine_stats stats; /* guarded by mu */
    struct snug_prefix *pc;         /* the prefix cache (engine thread), NULL when off */
    uint8_t *pfx_staging; /* device contexts: the store's page for the KV row copies (or NULL) */
    size_t pfx_staging_bytes;
    int32_t cache_every;
    uint64_t use_clock;
    /* the vision encoder (NULL: no tower) and which job's image its rows hold */
    struct snug_vision_encoder *venc;
    struct snug_vision_rows venc_rows;
    uint64_t venc_serial, job_serial;
    int32_t venc_image;
    char self_test[600];
};

/* ==== helpers =============================================================================== */

/* The trunk forwards the slots' steps have run (snug_ctx_n_forwards, summed). */
static uint64_t slots_forwards(const struct snug_engine *e) {
    uint64_t n = 0;
    for (int32_t i = 0; i < e->n_slots; i++) n += snug_ctx_n_forwards(e->slots[i].ctx);
    return n;
}

/* The copy callbacks over a slot's caches (st: filled here, must outlive the calls); a device
 * context's KV rows move through the engine's staging page. */
static struct snug_prefix_io slot_io(struct snug_engine *e, struct slot *s,
                                     struct snug_ctx_prefix_state *st) {
    snug_ctx_prefix_state(s->ctx, st);
    if (st->dev) {
        st->staging = e->pfx_staging;
        st->staging_bytes = e->pfx_staging_bytes;
    }
    return snug_ctx_prefix_io(st);
}

/* The checkpoint at the end of generation (after the job was answered): the slot's whole
 * sequence, prompt and generated tokens, so a later request that continues it verbatim — in
 * another slot, after this one was reused, or after a restart — starts there. Not taken inside
 * a speculative step's aftermath (not a checkpoint state) nor after images (the key of the
 * generated part would be the prompt's), nor when no generated token was evaluated (the end of
 * the prompt: its generation prompt is re-rendered next time). A restore from here continues
 * from the state the decode computed token by token, as the slot's own reuse does; a cold
 * prefill of the same tokens computes it in chunks (the same numbers up to rounding). */
static void slot_store_end(struct snug_engine *e, struct slot *s, int32_t n_images,
                           int32_t n_prompt) {
    if (!e->pc || n_images > 0 || s->seq.n_toks <= n_prompt || s->seq.n_toks >= e->n_ctx) return;
    struct snug_ctx_prefix_state st;
    struct snug_prefix_io io = slot_io(e, s, &st);
    if (!st.exportable || st.n_past != s->seq.n_toks) return;
    struct snug_err err = {0};
    bool stored;
    if (snug_prefix_store(e->pc, s->seq.toks, s->seq.n_toks, &io, &stored, &err) != SNUG_OK)
        snug_log(SNUG_LOG_WARN, "prefix cache: checkpoint at the end of generation (%d): %s\n",
                 s->seq.n_toks, err.msg);
}

/* Slot w stops waiting for another's prefill and prefills its own prompt from the start. */
static void wait_give_up(struct slot *w) {
    w->wait_on = NULL;
    w->state = SLOT_PREFILL;
    w->n_prefilled = 0;
    snug_ctx_reset(w->ctx);
    snug_seq_set_past(&w->seq, NULL, 0);
}

/* End the slot's job: flush the detokenizer, report usage, free the slot (its cache stays).
 * Slots waiting for its prefill prefill themselves. */
static void slot_finish(struct snug_engine *e, struct slot *s, enum snug_engine_finish fin,
                        const char *msg) {
    struct snug_engine_job *j = s->job;
    for (int32_t i = 0; i < e->n_slots; i++)
        if (e->slots[i].wait_on == s) wait_give_up(&e->slots[i]);
    s->wait_on = NULL;
    snug_seq_flush(&s->seq, fin == SNUG_FINISH_CANCEL); /* the detokenizer's held bytes */
    double now = snug_time_s();
    s->usage.n_gen = s->seq.n_gen;
    if (e->n_draft > 0) {
        struct snug_spec_stats st;
        snug_ctx_spec_stats(s->ctx, &st);
        s->usage.spec_steps = st.n_steps - s->spec0.n_steps;
        s->usage.spec_drafted = st.n_drafted - s->spec0.n_drafted;
        s->usage.spec_accepted = st.n_accepted - s->spec0.n_accepted;
    }
    if (s->state != SLOT_GEN) { /* prefilling, or waiting for another's prefill */
        s->usage.prompt_ms = (now - s->t_admit) * 1e3;
    } else {
        s->usage.gen_ms = (now - s->t_prompt_done) * 1e3;
    }
    pthread_mutex_lock(&e->mu);
    e->stats.slots_busy--;
    e->stats.jobs_done++;
    if (fin == SNUG_FINISH_CANCEL) e->stats.jobs_cancelled++;
    if (s->state == SLOT_GEN) e->stats.gen_s += now - s->t_prompt_done;
    pthread_mutex_unlock(&e->mu);
    s->state = SLOT_FREE;
    s->job = NULL;
    s->last_used = ++e->use_clock;
    int32_t n_images = j->n_images, n_prompt = j->n_prompt; /* (the caller's after on_done) */
    j->on_done(j->user, fin, &s->usage, msg);
    if (fin == SNUG_FINISH_STOP || fin == SNUG_FINISH_LENGTH) {
        s->store_pending = true;
        s->store_images = n_images, s->store_prompt = n_prompt;
    }
}

/* The end-of-generation checkpoints of the slots that finished (slot_finish), after every job
 * that finished with them was answered: a large model's checkpoint copies its recurrent states
 * (~151 MB for the 27B, ~0.15 s from a GPU), and taking them in turn inside the finishing loop
 * held each later answer back by the ones before. Runs at the end of every engine step, so
 * before the next admission can reuse a slot. */
static void flush_stores(struct snug_engine *e) {
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (!s->store_pending) continue;
        s->store_pending = false;
        if (s->state == SLOT_FREE) slot_store_end(e, s, s->store_images, s->store_prompt);
    }
}

/* The images a slot's sequence and a job's prompt hold before position n are the same (place,
 * length and bytes' hash): with equal ids, the same rows went into the caches. */
static bool images_match(const struct slot *s, const struct snug_engine_job *j, int32_t n) {
    for (int32_t a = 0;; a++) {
        bool in_s = a < s->n_img && s->img[a].first < n;
        bool in_j = a < j->n_images && j->images[a].first < n;
        if (!in_s || !in_j) return in_s == in_j;
        const struct snug_engine_image *ji = &j->images[a];
        if (s->img[a].first != ji->first || s->img[a].count != ji->rows * ji->cols ||
            s->img[a].hash != ji->hash)
            return false;
    }
}

/* Pick the free slot for a prompt: the one whose cache is the longest strict prefix of it,
 * else the least recently used. Returns the slot and the reusable prefix length. */
static struct slot *pick_slot(struct snug_engine *e, const struct snug_engine_job *j,
                              int32_t *n_reuse) {
    struct slot *best = NULL, *lru = NULL;
    int32_t best_n = 0;
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (s->state != SLOT_FREE) continue;
        if (!lru || s->last_used < lru->last_used) lru = s;
        if (s->seq.n_toks > best_n && s->seq.n_toks < j->n_prompt &&
            !memcmp(s->seq.toks, j->prompt, (size_t)s->seq.n_toks * sizeof(snug_token)) &&
            images_match(s, j, s->seq.n_toks)) {
            best = s;
            best_n = s->seq.n_toks;
        }
    }
    *n_reuse = best ? best_n : 0;
    struct slot *pick = best ? best : lru;
    if (pick) pick->hit.entry = -1;
    if (e->pc && pick) {
        /* a checkpoint past the strict extension: restore it, into the free slot that already
         * holds its tokens (state only) or else the least recently used one (state + KV) */
        struct snug_prefix_hit h;
        snug_prefix_lookup(e->pc, j->key ? j->key : j->prompt, j->n_prompt, &h);
        if (h.entry >= 0 && h.pos > best_n) {
            struct slot *own = NULL;
            for (int32_t i = 0; i < e->n_slots && !own; i++) {
                struct slot *s = &e->slots[i];
                if (s->state == SLOT_FREE && s->seq.n_toks >= h.pos &&
                    snug_ctx_prefix_in_place(s->ctx) >= h.pos &&
                    !memcmp(s->seq.toks, j->prompt, (size_t)h.pos * sizeof(snug_token)) &&
                    images_match(s, j, h.pos))
                    own = s;
            }
            pick = own ? own : lru;
            pick->hit = h;
            pick->hit_kv = !own;
            *n_reuse = 0;
        }
    }
    return pick;
}

/* Restore the checkpoint pick_slot chose (s->hit) into the slot; returns the positions restored
 * (0: none, the caller prefills cold). A checkpoint whose file fails its check (payload
 * checksum, tokens, header) is dropped by the store before any byte reaches the slot: then the
 * prompt is looked up again and the next valid — shorter — checkpoint is tried, down to none.
 * In place (the slot's own tokens, !hit_kv) every shorter checkpoint is in place too. */
static int32_t slot_restore(struct snug_engine *e, struct slot *s,
                            const struct snug_engine_job *j) {
    const snug_token *key = j->key ? j->key : j->prompt;
    struct snug_prefix_hit h = s->hit;
    for (int attempt = 0; h.entry >= 0 && h.pos > 0 && attempt < 64; attempt++) {
        struct snug_ctx_prefix_state st;
        struct snug_prefix_io io = slot_io(e, s, &st);
        struct snug_err rerr = {0};
        if (!s->hit_kv) snug_ctx_prefix_set_past(s->ctx, j->prompt, h.pos, &rerr); /* cut */
        int rc = snug_prefix_restore(e->pc, key, &h, s->hit_kv, &io, &rerr);
        if (rc == SNUG_OK && snug_ctx_prefix_set_past(s->ctx, j->prompt, h.pos, &rerr) == SNUG_OK)
            return h.pos;
        if (rc != SNUG_ERR_FORMAT) { /* a copy failed: the slot's state is unknown */
            snug_log(SNUG_LOG_WARN, "prefix cache: restore at %d failed (%s): prefilling cold\n",
                     h.pos, rerr.msg);
            return 0;
        }
        int32_t was = h.pos;
        snug_prefix_lookup(e->pc, key, j->n_prompt, &h);
        snug_log(SNUG_LOG_WARN, "prefix cache: restore at %d failed (%s): %s\n", was, rerr.msg,
                 h.entry >= 0 && h.pos > 0 ? "trying the checkpoint before it" : "prefilling cold");
    }
    return 0;
}

/* Start a job on a slot: reset or reuse its state, begin its generation loop. */
static void slot_start(struct snug_engine *e, struct slot *s, struct snug_engine_job *j,
                       int32_t n_reuse) {
    s->job = j;
    s->t_admit = snug_time_s();
    memset(&s->usage, 0, sizeof s->usage);
    s->usage.slot = s->index;
    s->usage.n_prompt = j->n_prompt;
    s->usage.n_cached = n_reuse;
    if (e->n_draft > 0) snug_ctx_spec_stats(s->ctx, &s->spec0);
    s->usage.queue_ms = (s->t_admit - j->t_submit) * 1e3;
    s->sched = (struct snug_prefix_sched){.n_prompt = j->n_prompt,
                                          .n_chunk = e->prompt_budget,
                                          .every = e->pc ? e->cache_every : 0,
                                          .msg_starts = j->msg_starts,
                                          .n_msg_starts = e->pc ? j->n_msg_starts : 0,
                                          .system_end = e->pc ? j->system_end : 0,
                                          .last_end = e->pc ? j->last_end : 0,
                                          .user_end = e->pc ? j->user_end : 0};
    if (e->pc && s->hit.entry >= 0) {
        n_reuse = slot_restore(e, s, j);
        if (n_reuse > 0) {
            snug_seq_set_past(&s->seq, j->prompt, n_reuse);
            s->usage.n_cached = n_reuse;
            pthread_mutex_lock(&e->mu);
            e->stats.cached_tokens += (uint64_t)n_reuse;
            pthread_mutex_unlock(&e->mu);
        }
        s->hit.entry = -1;
    }
    /* a choice of a request whose first choice is prefilling now: wait for its prompt (the
     * context is overwritten by the copy), unless that one is gone already */
    struct slot *src = s->wait_on;
    if (src && (src->state != SLOT_PREFILL || src->job != j->prefill_from)) s->wait_on = NULL;
    if (n_reuse == 0) {
        snug_ctx_reset(s->ctx);
        snug_seq_set_past(&s->seq, NULL, 0);
    }
    s->n_prefilled = n_reuse;
    s->serial = ++e->job_serial;
    s->n_img = SNUG_MIN(j->n_images, SNUG_ENGINE_MAX_IMAGES);
    for (int32_t k = 0; k < s->n_img; k++)
        s->img[k] = (struct slot_image){j->images[k].first, j->images[k].rows * j->images[k].cols,
                                        j->images[k].hash};
    s->state = s->wait_on ? SLOT_WAIT : SLOT_PREFILL;
    const struct snug_engine_constraint *c = j->constraint;
    if (c) s->con = (struct snug_spec_constraint){c->user, c->force, c->mask, c->accept};
    struct snug_seq_params sp = {
        .sampler = j->sampler,
        .max_tokens = j->max_tokens,
        .script = j->script,
        .n_script = j->n_script,
        .constraint = c ? &s->con : NULL,
        .logprobs = j->logprobs,
        .top_logprobs = j->top_logprobs,
        .speculate = e->n_draft > 0,
        .spec_adapt = e->spec_adapt,
        .on_token = j->on_token,
        .user = j->user,
    };
    struct snug_err err = {0};
    if (snug_seq_begin(&s->seq, &sp, &err) != SNUG_OK) {
        slot_finish(e, s, SNUG_FINISH_ERROR, err.msg);
        return;
    }
}

/* ==== the step ============================================================================== */

/* A slot's eval failed: its context is in an unknown state, so start it over and end the job. */
static void slot_eval_failed(struct snug_engine *e, struct slot *s, const char *msg) {
    snug_ctx_reset(s->ctx);
    snug_seq_set_past(&s->seq, NULL, 0);
    slot_finish(e, s, SNUG_FINISH_ERROR, msg[0] ? msg : "the step failed");
}

/* The slot's loop emitted tokens (n_gen0: its count before): count them, end the job when the
 * loop stopped (an end token, a stop string, the script's end, max_tokens, a full context). */
static void slot_emitted(struct snug_engine *e, struct slot *s, enum snug_seq_state st,
                         int32_t n_gen0) {
    pthread_mutex_lock(&e->mu);
    e->stats.gen_tokens += (uint64_t)(s->seq.n_gen - n_gen0);
    pthread_mutex_unlock(&e->mu);
    if (st == SNUG_SEQ_STOP)
        slot_finish(e, s, SNUG_FINISH_STOP, NULL);
    else if (st == SNUG_SEQ_LENGTH)
        slot_finish(e, s, SNUG_FINISH_LENGTH, NULL);
}

/* The length of a prefilling slot's next prompt chunk: up to where the prefix cache's schedule
 * ends it (message starts, the interval: a run restored at a checkpoint cuts the chunks a cold
 * run cuts, prefix_sched.h), at most `budget` rows (e->prompt_budget, or under auto the rows
 * engine_step asked of step_budget.h for this step).
 * How the adaptive size meets the checkpoints: the schedule's grid is the chunk under auto, and
 * every checkpoint position (the system prompt's end, the last message's, the last user
 * query's, each multiple of cache_every) is a boundary of it, so snug_prefix_chunk_end never
 * goes past the next one; a piece only ever ends earlier than the schedule's chunk, never
 * later, so every checkpoint position is still the end of a piece and prefill_done stores it
 * there. A chunk cut short is finished by the next pieces, which end at the same grid line.
 * What auto gives up: while other slots decode, where a chunk is cut inside the grid depends on
 * the measured times, so such a prefill matches a cold run of the same prompt to rounding
 * (DeltaNet's chunked form), not bit for bit; with nobody decoding (or a fixed --step-prompt)
 * the pieces are the grid's and a restored run cuts exactly what a cold one cuts. */
static int32_t prefill_len(const struct slot *s, int32_t budget) {
    int32_t n = snug_prefix_chunk_end(&s->sched, s->n_prefilled) - s->n_prefilled;
    return n > budget ? budget : n;
}

/* The slots waiting for s's prefill (just complete) get a copy of its state, KV rows and last
 * logits and pick their first tokens; one whose copy fails prefills itself. */
static void feed_waiters(struct snug_engine *e, struct slot *s, double t1) {
    const struct snug_engine_job *j = s->job;
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct slot *w = &e->slots[i];
        if (w->wait_on != s || w->state != SLOT_WAIT) continue;
        struct snug_ctx_prefix_state from, to;
        struct snug_err err = {0};
        bool ok = snug_ctx_prefix_state(s->ctx, &from) && snug_ctx_prefix_state(w->ctx, &to) &&
                  w->job->n_prompt == j->n_prompt &&
                  snug_ctx_prefix_copy(&to, &from, j->n_prompt) == SNUG_OK &&
                  snug_ctx_prefix_set_past(w->ctx, w->job->prompt, j->n_prompt, &err) == SNUG_OK;
        if (!ok) {
            wait_give_up(w);
            continue;
        }
        w->wait_on = NULL;
        snug_seq_set_past(&w->seq, w->job->prompt, j->n_prompt);
        memcpy(w->logits, s->logits, (size_t)e->V * sizeof(float));
        w->n_prefilled = j->n_prompt;
        w->usage.n_cached = j->n_prompt;
        w->state = SLOT_GEN;
        w->t_prompt_done = t1;
        w->usage.prompt_ms = (t1 - w->t_admit) * 1e3;
        pthread_mutex_lock(&e->mu);
        e->stats.cached_tokens += (uint64_t)j->n_prompt;
        pthread_mutex_unlock(&e->mu);
        int32_t n_gen0 = w->seq.n_gen;
        slot_emitted(e, w, snug_seq_first(&w->seq, w->logits), n_gen0);
    }
}

/* A prompt chunk of n tokens went into the slot's context (in the step t0..t1): its tokens,
 * the statistics, the prefix cache's checkpoint, progress, the switch to generating. */
static void prefill_done(struct snug_engine *e, struct slot *s, int32_t n, double t0, double t1) {
    struct snug_engine_job *j = s->job;
    struct snug_err err = {0};
    snug_seq_evaluated(&s->seq, j->prompt + s->n_prefilled, n);
    s->n_prefilled += n;
    pthread_mutex_lock(&e->mu);
    e->stats.prompt_tokens += (uint64_t)n;
    e->stats.prompt_s += t1 - t0;
    pthread_mutex_unlock(&e->mu);
    if (e->pc && snug_prefix_checkpoint_at(&s->sched, s->n_prefilled)) {
        struct snug_ctx_prefix_state st;
        struct snug_prefix_io io = slot_io(e, s, &st);
        bool stored;
        if (snug_prefix_store(e->pc, j->key ? j->key : j->prompt, s->n_prefilled, &io, &stored,
                              &err) != SNUG_OK)
            snug_log(SNUG_LOG_WARN, "prefix cache: checkpoint at %d: %s\n", s->n_prefilled,
                     err.msg);
    }
    if (e->pc && s->n_prefilled == j->n_prompt)
        snug_prefix_note_prompt(e->pc, s->usage.n_cached, j->n_prompt - s->usage.n_cached);
    if (j->on_progress)
        j->on_progress(j->user, s->n_prefilled, j->n_prompt, s->usage.n_cached,
                       (t1 - s->t_admit) * 1e3);
    if (s->n_prefilled == j->n_prompt) {
        s->state = SLOT_GEN;
        s->t_prompt_done = t1;
        s->usage.prompt_ms = (t1 - s->t_admit) * 1e3;
        feed_waiters(e, s, t1);        /* (before its first pick edits the logits) */
        int32_t n_gen0 = s->seq.n_gen; /* the first token, from the prompt's last logits */
        slot_emitted(e, s, snug_seq_first(&s->seq, s->logits), n_gen0);
    }
}

/* The slot's next n prompt tokens, in a step of their own (with the image rows img, or NULL).
 * False when the eval failed (the job is ended). */
static bool prefill_piece(struct snug_engine *e, struct slot *s, int32_t n,
                          const struct snug_image_rows *img) {
    struct snug_err err = {0};
    const snug_token *ids = s->job->prompt + s->n_prefilled;
    double t0 = snug_time_s();
    int rc =
        img ? snug_ctx_eval_images(s->ctx, ids, n, img, 1, s->logits, SNUG_EVAL_LOGITS_LAST, &err)
            : snug_ctx_eval(s->ctx, ids, n, s->logits, SNUG_EVAL_LOGITS_LAST, &err);
    double t1 = snug_time_s();
    if (rc != SNUG_OK) {
        slot_eval_failed(e, s, err.msg);
        return false;
    }
    prefill_done(e, s, n, t0, t1);
    return true;
}

/* The first image of the slot's job that ends after position a (its index), or -1. */
static int32_t next_image(const struct slot *s, int32_t a) {
    const struct snug_engine_job *j = s->job;
    for (int32_t k = 0; k < j->n_images; k++)
        if (j->images[k].first + j->images[k].rows * j->images[k].cols > a) return k;
    return -1;
}

/* Whether the slot's next prompt chunk of n tokens overlaps an image. */
static bool chunk_has_image(const struct slot *s, int32_t n) {
    int32_t k = next_image(s, s->n_prefilled);
    return k >= 0 && s->job->images[k].first < s->n_prefilled + n;
}

/* Make the encoder hold image k of the slot's job (encode it unless it already does). */
static int hold_image(struct snug_engine *e, struct slot *s, int32_t k, struct snug_err *err) {
    if (e->venc_serial == s->serial && e->venc_image == k) return SNUG_OK;
    const struct snug_engine_image *im = &s->job->images[k];
    e->venc_serial = 0;
    if (!e->venc)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED, "the server has no vision tower (--mmproj)");
    int rc = snug_vision_encoder_run(e->venc, snug_slots_pool(e->pool), im->bytes, im->n_bytes,
                                     &e->venc_rows, err);
    if (rc) return rc;
    if (e->venc_rows.rows != im->rows || e->venc_rows.cols != im->cols)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "image %d encoded to %d x %d tokens, but its place holds %d x %d", k,
                            e->venc_rows.cols, e->venc_rows.rows, im->cols, im->rows);
    e->venc_serial = s->serial, e->venc_image = k;
    pthread_mutex_lock(&e->mu);
    e->stats.images_encoded++;
    pthread_mutex_unlock(&e->mu);
    return SNUG_OK;
}

/* Prompt chunks of a slot whose next chunk overlaps an image, in steps of their own: the image
 * is encoded (hold_image), then chunks (the schedule's, cut before a second image) are fed with
 * it through snug_ctx_eval_images until the prefill is past it — so the encoder's rows serve one
 * image from its first chunk to its last, whatever other slots do meanwhile. */
static void slot_prefill_image(struct snug_engine *e, struct slot *s) {
    struct snug_err err = {0};
    int32_t k = next_image(s, s->n_prefilled);
    const struct snug_engine_image *im = &s->job->images[k];
    int32_t end = im->first + im->rows * im->cols;
    if (hold_image(e, s, k, &err) != SNUG_OK) {
        slot_eval_failed(e, s, err.msg);
        return;
    }
    while (s->state == SLOT_PREFILL && s->n_prefilled < end) {
        int32_t a = s->n_prefilled, n = prefill_len(s, e->prompt_budget);
        if (k + 1 < s->job->n_images && s->job->images[k + 1].first < a + n)
            n = s->job->images[k + 1].first - a;
        struct snug_image_rows r = {im->first - a, im->rows, im->cols, e->venc_rows.embd};
        if (!prefill_piece(e, s, n, &r)) return;
    }
}

/* The per-step prompt rows in e->stats: what a prefilling slot gets beside decoding slots now
 * (one prefilling; under auto from the measurements so far) and the measurements (e->mu held). */
static void step_stats_locked(struct snug_engine *e) {
    e->stats.step_prompt_rows = e->step_auto
                                    ? snug_step_prompt_rows(e->cost.t_dec, e->cost.c_row, true, 1,
                                                            e->n_chunk, SNUG_STEP_PROMPT_FLOOR)
                                    : e->prompt_budget;
    e->stats.step_decode_s = e->cost.t_dec;
    e->stats.step_prompt_row_s = e->cost.c_row;
}

/* The plain rows' picks of a step, thread ith of nth taking decode runs ith, ith + nth, ...
 * (each sequence's own sampler and constraint; verifications roll their context back on the
 * shared backend instance and wait for snug_seq_take, in turn). */
struct pick_task {
    struct snug_engine *e;
    int32_t n_dec;
};
static void pick_rows(void *arg, int ith, int nth) {
    const struct pick_task *pt = arg;
    struct snug_engine *e = pt->e;
    for (int32_t r = ith; r < pt->n_dec; r += nth) /* (a verification's pick is a no-op) */
        snug_seq_pick(&e->b_slot[r]->seq, e->b_logits + (int64_t)e->b_row0[r] * e->V);
}

/* One step of the engine: the rows of every generating slot (its pending token, and for a
 * speculative slot the MTP drafts after it as verification rows: snug_seq_rows) and a prompt
 * chunk of every prefilling slot (prefill_len: at most the per-step prompt budget — under auto
 * step_budget.h's rows for this step: a time budget while another slot decodes in it), as rows
 * of ONE snug_step: the matrix products run over all of them at once, so a long prompt being
 * admitted advances by a bounded chunk per step while the other slots keep streaming, and the
 * verifications of all speculative slots share one forward. The step is timed and noted in
 * e->cost (the next steps' budget). Then each generating slot takes its logits rows
 * (snug_seq_take: the next token, or the accepted drafts and the rollback) and emits. A chunk
 * that would not fit the step beside the other rows (n_chunk) runs in a step of its own. A
 * refused step (it changes nothing) is run again slot by slot so only the slot at fault ends
 * with an error. */
static void engine_step_rows(struct snug_engine *e) {
    struct snug_step_row *rows = e->b_rows;
    int32_t n = 0, n_dec = 0, n_pre = 0, n_verify = 0;
    struct snug_err err = {0};
    uint64_t fw0 = slots_forwards(e);
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (s->state != SLOT_GEN) continue;
        int32_t cap = SNUG_MIN(e->n_chunk, e->b_logits_rows) - n; /* every such row has logits */
        int32_t r = snug_seq_rows(&s->seq, rows + n, cap, &err);  /* (drafting: MTP forwards) */
        if (r < 0) {
            slot_eval_failed(e, s, err.msg);
            continue;
        }
        if (r == 0) continue; /* no room left in this step: the next one */
        e->b_slot[n_dec] = s;
        e->b_row0[n_dec] = n;
        e->b_nrows[n_dec++] = r;
        n += r;
        n_verify += r > 1;
    }
    int32_t n_dec_rows = n;
    int32_t budget = e->prompt_budget; /* each prefilling slot's prompt rows in this step */
    if (e->step_auto) {
        int32_t n_prefill = 0;
        for (int32_t i = 0; i < e->n_slots; i++) n_prefill += e->slots[i].state == SLOT_PREFILL;
        /* at most the room beside the decode rows: a piece that does not fit runs in a step of
         * its own, and the streams would wait for two steps */
        int32_t room = e->n_chunk - n_dec_rows;
        budget = snug_step_prompt_rows(e->cost.t_dec, e->cost.c_row, n_dec > 0, n_prefill,
                                       room >= SNUG_STEP_PROMPT_FLOOR ? room : e->n_chunk,
                                       SNUG_STEP_PROMPT_FLOOR);
    }
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (s->state != SLOT_PREFILL) continue;
        int32_t len = prefill_len(s, budget);
        if (len > 0 && s->job->n_images > 0 && chunk_has_image(s, len)) {
            slot_prefill_image(e, s); /* (alone: the image's chunks) */
            continue;
        }
        if (len <= 0 || n + len > e->n_chunk || n_dec_rows + n_pre >= e->b_logits_rows) {
            prefill_piece(e, s, len, NULL); /* (alone, as before: the same piece) */
            continue;
        }
        const snug_token *p = s->job->prompt + s->n_prefilled;
        int32_t pos = snug_ctx_n_past(s->ctx);
        for (int32_t t = 0; t < len; t++)
            rows[n + t] = (struct snug_step_row){.ctx = s->ctx,
                                                 .token = p[t],
                                                 .pos = pos + t,
                                                 .flags = t == len - 1 ? SNUG_ROW_LOGITS : 0};
        n += len;
        e->p_slot[n_pre] = s;
        e->p_len[n_pre++] = len;
    }
    if (n == 0) return;
    double t0 = snug_time_s();
    int rc = snug_step(rows, n, e->b_logits, &err);
    double t1 = snug_time_s();
    if (rc == SNUG_OK) snug_step_cost_note(&e->cost, t1 - t0, n_dec_rows, n - n_dec_rows);
    if (rc == SNUG_OK && n_dec - n_verify > 1) { /* the picks on the pool, the emissions below */
        struct pick_task pt = {e, n_dec};
        snug_pool_run(snug_slots_pool(e->pool), pick_rows, &pt);
    }
    for (int32_t r = 0; r < n_dec; r++) {
        struct slot *s = e->b_slot[r];
        float *lg = e->b_logits + (int64_t)e->b_row0[r] * e->V;
        if (rc != SNUG_OK && snug_step(rows + e->b_row0[r], e->b_nrows[r], lg, &err) != SNUG_OK) {
            snug_seq_untake(&s->seq);
            slot_eval_failed(e, s, err.msg);
            continue;
        }
        int32_t n_gen0 = s->seq.n_gen;
        /* the step's time for the draft-length adaptation: not a step that carried prompt rows */
        snug_seq_step_time(&s->seq, rc == SNUG_OK && n_pre == 0 ? t1 - t0 : -1);
        if (snug_seq_take(&s->seq, lg, &err) != SNUG_OK) {
            slot_eval_failed(e, s, err.msg);
            continue;
        }
        slot_emitted(e, s, s->seq.state, n_gen0);
    }
    for (int32_t k = 0; k < n_pre; k++) {
        struct slot *s = e->p_slot[k];
        if (rc != SNUG_OK) {
            prefill_piece(e, s, e->p_len[k], NULL); /* (alone: the same piece) */
            continue;
        }
        memcpy(s->logits, e->b_logits + (int64_t)(n_dec_rows + k) * e->V,
               (size_t)e->V * sizeof(float));
        prefill_done(e, s, e->p_len[k], t0, t1);
    }
    uint64_t fw = slots_forwards(e) - fw0;
    pthread_mutex_lock(&e->mu);
    e->stats.forwards += fw;
    step_stats_locked(e);
    if (rc == SNUG_OK && n_pre > 0 && n_dec > 0) {
        e->stats.mixed_steps++;
        e->stats.mixed_prompt_rows += (uint64_t)(n - n_dec_rows);
    }
    if (n_verify > 0) {
        e->stats.verify_steps++;
        e->stats.verify_runs += (uint64_t)n_verify;
        e->stats.verify_forwards += fw;
        if (n_verify > e->stats.verify_runs_max) e->stats.verify_runs_max = n_verify;
    }
    pthread_mutex_unlock(&e->mu);
}

/* The step (engine_step_rows), then the checkpoints of the jobs it ended (flush_stores). */
static void engine_step(struct snug_engine *e) {
    engine_step_rows(e);
    flush_stores(e);
}

/* Sum the slots' acceptance statistics into e->stats.spec, and their draft counts (engine
 * thread, e->mu held). */
static void sum_spec_stats_locked(struct snug_engine *e) {
    struct snug_spec_stats *t = &e->stats.spec;
    memset(t, 0, sizeof *t);
    e->stats.spec_gen_steps = 0;
    double best = 0, a = 0;
    int32_t n_gen = 0;
    for (int32_t i = 0; i < e->n_slots; i++) {
        const struct snug_spec_adapt *ad = &e->slots[i].seq.adapt;
        e->stats.spec_gen_steps += (uint64_t)ad->n_steps;
        if (e->slots[i].state == SLOT_GEN) {
            best += e->spec_adapt ? ad->best : e->n_draft;
            a += ad->a;
            n_gen++;
        }
    }
    if (n_gen > 0) { /* (else the last values stay) */
        e->stats.spec_draft_now = best / n_gen;
        e->stats.spec_accept_now = a / n_gen;
    }
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct snug_spec_stats st;
        snug_ctx_spec_stats(e->slots[i].ctx, &st);
        t->n_steps += st.n_steps;
        t->n_drafted += st.n_drafted;
        t->n_accepted += st.n_accepted;
        t->n_emitted += st.n_emitted;
        for (int k = 0; k < SNUG_SPEC_MAX_DRAFT; k++) {
            t->proposed_at[k] += st.proposed_at[k];
            t->accepted_at[k] += st.accepted_at[k];
        }
    }
}

/* The slot where job p is prefilling (admitted in this round: started[0..n), or earlier), or
 * NULL. */
static struct slot *prefilling_slot(struct snug_engine *e, const struct snug_engine_job *p,
                                    struct slot **started, struct snug_engine_job **started_job,
                                    int32_t n) {
    for (int32_t k = 0; k < n; k++)
        if (started_job[k] == p) return started[k];
    for (int32_t i = 0; i < e->n_slots; i++)
        if (e->slots[i].job == p && e->slots[i].state == SLOT_PREFILL) return &e->slots[i];
    return NULL;
}

/* The least recently used free slot (one exists). */
static struct slot *lru_slot(struct snug_engine *e) {
    struct slot *lru = NULL;
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (s->state == SLOT_FREE && (!lru || s->last_used < lru->last_used)) lru = s;
    }
    lru->hit.entry = -1;
    return lru;
}

/* Move queued jobs into free slots; jobs cancelled while queued (or all of them once the engine
 * is stopping) are collected in *dead and
 * reported by the caller after the lock is released. Called with e->mu held. */
static void admit_locked(struct snug_engine *e, struct snug_engine_job **dead,
                         struct slot **started, struct snug_engine_job **started_job,
                         int32_t *n_started) {
    *n_started = 0;
    while (e->q_head) {
        struct snug_engine_job *j = e->q_head;
        if (e->stop || atomic_load(&j->cancel)) {
            e->q_head = j->next;
            if (!e->q_head) e->q_tail = NULL;
            e->q_len--;
            j->next = *dead;
            *dead = j;
            continue;
        }
        if (e->stats.slots_busy >= e->n_slots) break;
        int32_t n_reuse = 0;
        struct slot *src =
            j->prefill_from && e->can_copy
                ? prefilling_slot(e, j->prefill_from, started, started_job, *n_started)
                : NULL;
        struct slot *s = src ? lru_slot(e) : pick_slot(e, j, &n_reuse);
        s->wait_on = src;
        e->q_head = j->next;
        if (!e->q_head) e->q_tail = NULL;
        e->q_len--;
        e->stats.slots_busy++;
        e->stats.cached_tokens += (uint64_t)n_reuse;
        s->state = SLOT_PREFILL; /* reserve it now; slot_start runs unlocked */
        started[*n_started] = s;
        started_job[*n_started] = j;
        s->n_prefilled = n_reuse;
        (*n_started)++;
    }
}

static void *engine_main(void *arg) {
    struct snug_engine *e = arg;
    struct slot **started = e->started;
    struct snug_engine_job **started_job = e->started_job;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        struct snug_engine_job *dead = NULL;
        int32_t n_started = 0;
        admit_locked(e, &dead, started, started_job, &n_started);
        bool busy = e->stats.slots_busy > 0;
        if (e->stop && !busy && !e->q_head) break;
        if (!busy && !dead && !e->stop) {
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        bool stopping = e->stop;
        e->stats.steps++;
        pthread_mutex_unlock(&e->mu);

        for (struct snug_engine_job *j = dead, *nx; j; j = nx) {
            nx = j->next;
            struct snug_engine_usage u = {.n_prompt = j->n_prompt, .slot = -1};
            pthread_mutex_lock(&e->mu);
            e->stats.jobs_done++;
            e->stats.jobs_cancelled++;
            pthread_mutex_unlock(&e->mu);
            j->on_done(j->user, SNUG_FINISH_CANCEL, &u, NULL);
        }
        for (int32_t i = 0; i < n_started; i++) {
            slot_start(e, started[i], started_job[i], started[i]->n_prefilled);
        }
        double now = snug_time_s();
        for (int32_t i = 0; i < e->n_slots; i++) {
            struct slot *s = &e->slots[i];
            if (s->state == SLOT_FREE) continue;
            if (stopping || atomic_load(&s->job->cancel) ||
                (s->job->client_gone && s->job->client_gone(s->job->user)))
                slot_finish(e, s, SNUG_FINISH_CANCEL, NULL);
            else if (s->job->deadline_s > 0 && now > s->job->deadline_s)
                slot_finish(e, s, SNUG_FINISH_TIMEOUT, NULL);
        }
        engine_step(e);

        pthread_mutex_lock(&e->mu);
        int64_t in_slots = 0;
        for (int32_t i = 0; i < e->n_slots; i++) in_slots += e->slots[i].seq.n_toks;
        e->stats.tokens_in_slots = in_slots;
        if (e->n_draft > 0) sum_spec_stats_locked(e);
    }
    pthread_mutex_unlock(&e->mu);

    return NULL;
}

/* ==== lifecycle ============================================================================= */

/* Run a few tokens through slot 0 twice (with a reset between) and check the logits. */
static void run_self_test(struct snug_engine *e) {
    struct slot *s = &e->slots[0];
    snug_token ids[8];
    for (int i = 0; i < 8; i++) ids[i] = (snug_token)((i * 7 + 3) % e->V);
    struct snug_err err = {0};
    float *first = snug_malloc((size_t)e->V * sizeof(float));
    if (!first) {
        snprintf(e->self_test, sizeof e->self_test, "failed: out of memory");
        return;
    }
    snug_ctx_reset(s->ctx);
    int rc = snug_ctx_eval(s->ctx, ids, 8, first, SNUG_EVAL_LOGITS_LAST, &err);
    snug_ctx_reset(s->ctx);
    if (rc == SNUG_OK) rc = snug_ctx_eval(s->ctx, ids, 8, s->logits, SNUG_EVAL_LOGITS_LAST, &err);
    snug_ctx_reset(s->ctx);
    if (rc != SNUG_OK) {
        snprintf(e->self_test, sizeof e->self_test, "failed: %s", err.msg);
    } else {
        int32_t bad = 0, diff = 0;
        for (int32_t i = 0; i < e->V; i++) {
            if (!isfinite(first[i])) bad++;
            if (first[i] != s->logits[i]) diff++;
        }
        if (bad)
            snprintf(e->self_test, sizeof e->self_test, "failed: %d non-finite logits", bad);
        else if (diff)
            snprintf(e->self_test, sizeof e->self_test,
                     "failed: %d logits differ after a context reset", diff);
        else
            snprintf(e->self_test, sizeof e->self_test, "ok");
    }
    snug_free(first);
}

int snug_engine_init(struct snug_engine **out, struct snug_model *m,
                     const struct snug_engine_opts *o, struct snug_err *err) {
    *out = NULL;
    if (o->n_slots < 1 || o->n_slots > 256 || o->queue_cap < 1)
        return snug_err_set(
            err, SNUG_ERR_INVALID,
            "engine: slots must be in 1..256 (got %d), queue capacity >= 1 (got %d)", o->n_slots,
            o->queue_cap);
    const struct snug_tokenizer *tok = snug_model_tokenizer(m);
    if (!tok)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "engine: the model file carries no tokenizer (tokenizer.ggml.*)");
    struct snug_engine *e = snug_calloc(1, sizeof *e);
    if (!e) return snug_err_set(err, SNUG_ERR_NOMEM, "engine: out of memory");
    e->m = m;
    e->tok = tok;
    e->V = snug_model_n_vocab(m);
    e->n_slots = o->n_slots;
    e->q_cap = o->queue_cap;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    int rc = SNUG_OK;
    e->slots = snug_calloc((size_t)o->n_slots, sizeof *e->slots);
    if (!e->slots) {
        rc = snug_err_set(err, SNUG_ERR_NOMEM, "engine: out of memory");
        goto fail;
    }
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_ctx = o->n_ctx;
    int kv_k, kv_v; /* o->kv_type is a kvfmt code: one format or a K/V pair */
    snug_kvfmt_split(o->kv_type, &kv_k, &kv_v);
    cp.kv_type = kv_k == kv_v ? kv_k : SNUG_KV_F16;
    cp.kv_type_k = kv_k;
    cp.kv_type_v = kv_v;
    cp.n_threads = o->n_threads;
    cp.n_draft = o->n_draft > SNUG_SPEC_MAX_DRAFT ? SNUG_SPEC_MAX_DRAFT : o->n_draft;
    if (o->n_chunk > 0) cp.n_chunk = o->n_chunk; /* (else the default, 512) */
    cp.backend = o->backend;
    cp.vram_budget = o->vram_budget;
    e->n_draft = cp.n_draft;
    e->spec_adapt = o->spec_adapt;
    /* one backend instance, work arena and thread pool for the model; a slot per sequence */
    rc = snug_slots_init(&e->pool, m, &cp, o->n_slots, err);
    if (rc != SNUG_OK) goto fail;
    for (int32_t i = 0; i < o->n_slots; i++) {
        struct slot *s = &e->slots[i];
        s->index = i;
        s->ctx = snug_slots_ctx(e->pool, i);
        e->n_ctx = snug_ctx_n_ctx(s->ctx);
        s->logits = snug_malloc((size_t)e->V * sizeof(float));
        if (!s->logits) {
            rc = snug_err_set(err, SNUG_ERR_NOMEM, "engine: out of memory for slot %d", i);
            goto fail;
        }
        rc = snug_seq_init(&s->seq, m, s->ctx, err); /* its token cache, detokenizer */
        if (rc != SNUG_OK) goto fail;
    }
    e->n_chunk = cp.n_chunk ? cp.n_chunk : 512;
    if (e->n_chunk > e->n_ctx) e->n_chunk = e->n_ctx;
    e->venc = o->vision;
    /* the prompt rows a prefilling slot adds to a step: --step-prompt N (at most the chunk),
     * else auto: the whole chunk while nobody else decodes, a time budget while others do
     * (step_budget.h; engine_step) — the chunk is then the schedule's grid */
    e->step_auto = o->prompt_budget <= 0;
    e->prompt_budget = e->step_auto ? e->n_chunk : SNUG_MIN(o->prompt_budget, e->n_chunk);
    e->b_slot = snug_calloc((size_t)e->n_slots, sizeof *e->b_slot);
    e->b_row0 = snug_calloc((size_t)e->n_slots, sizeof *e->b_row0);
    e->b_nrows = snug_calloc((size_t)e->n_slots, sizeof *e->b_nrows);
    /* logits rows: each slot's decode row and drafts, a prompt chunk's last row (<= n_chunk);
     * these tables are the plan's "step logits (all slots)" and "step tables (engine)" */
    _Static_assert(sizeof *e->b_slot + sizeof *e->b_row0 + sizeof *e->b_nrows + sizeof *e->p_slot +
                           sizeof *e->p_len + sizeof *e->started + sizeof *e->started_job ==
                       SNUG_PLAN_ENGINE_SLOT_BYTES,
                   "the engine's per-slot step tables and the plan's count of them");
    e->b_logits_rows = snug_plan_step_logits_rows(e->n_slots, e->n_draft, e->n_chunk);
    e->b_logits = snug_malloc((size_t)e->b_logits_rows * (size_t)e->V * sizeof(float));
    e->b_rows = snug_calloc((size_t)e->n_chunk, sizeof *e->b_rows);
    e->p_slot = snug_calloc((size_t)e->n_slots, sizeof *e->p_slot);
    e->p_len = snug_calloc((size_t)e->n_slots, sizeof *e->p_len);
    e->started = snug_calloc((size_t)e->n_slots, sizeof *e->started);
    e->started_job = snug_calloc((size_t)e->n_slots, sizeof *e->started_job);
    if (!e->b_slot || !e->b_row0 || !e->b_nrows || !e->b_logits || !e->b_rows || !e->p_slot ||
        !e->p_len || !e->started || !e->started_job) {
        rc = snug_err_set(err, SNUG_ERR_NOMEM, "engine: out of memory for the step tables");
        goto fail;
    }
    { /* a slot's state copied straight into another (n > 1): host-memory contexts */
        struct snug_ctx_prefix_state st;
        e->can_copy = snug_ctx_prefix_state(e->slots[0].ctx, &st) && !st.dev;
    }
    /* the prefix cache: host or device contexts (with their MTP state, if any), the store's
     * layout theirs; a device context's rows move through one staging page */
    if (o->prefix) {
        struct snug_ctx_prefix_state st;
        if (snug_ctx_prefix_state(e->slots[0].ctx, &st) && snug_ctx_prefix_fits(o->prefix, &st)) {
            e->pc = o->prefix;
            e->cache_every = o->cache_every > 0 ? o->cache_every : 4096;
            if (st.dev && o->prefix->device_staging) {
                e->pfx_staging = o->prefix->device_staging;
                e->pfx_staging_bytes = (size_t)o->prefix->page_bytes;
            }
        } else {
            snug_log(SNUG_LOG_WARN, "prefix cache: not used by this engine (its checkpoint "
                                    "layout differs from the contexts')\n");
        }
    }
    e->stats.n_slots = e->n_slots;
    e->stats.queue_cap = e->q_cap;
    e->stats.n_ctx = e->n_ctx;
    e->stats.n_draft = e->n_draft;
    e->stats.spec_adapt = e->spec_adapt;
    e->stats.spec_draft_now = e->n_draft;
    e->stats.spec_accept_now = SNUG_SPEC_ADAPT_PRIOR_A;
    e->stats.step_prompt_auto = e->step_auto;
    step_stats_locked(e); /* (no thread yet) */
    run_self_test(e);
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        rc = snug_err_set(err, SNUG_ERR_INTERNAL, "engine: cannot start the engine thread");
        goto fail;
    }
    e->thread_started = true;
    *out = e;
    return SNUG_OK;
fail:
    snug_engine_free(e);
    return rc;
}

void snug_engine_free(struct snug_engine *e) {
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    if (e->slots) {
        for (int32_t i = 0; i < e->n_slots; i++) {
            struct slot *s = &e->slots[i];
            snug_free(s->logits);
            snug_seq_free(&s->seq);
        }
        snug_free(e->slots);
    }
    snug_free(e->started);
    snug_free(e->started_job);
    snug_slots_free(e->pool); /* the slots' sequences, the backend instance, the thread pool */
    snug_free(e->b_slot);
    snug_free(e->b_row0);
    snug_free(e->b_nrows);
    snug_free(e->b_logits);
    snug_free(e->b_rows);
    snug_free(e->p_slot);
    snug_free(e->p_len);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    snug_free(e);
}

int snug_engine_submit(struct snug_engine *e, struct snug_engine_job *j, struct snug_err *err) {
    return snug_engine_submit_n(e, &j, 1, err);
}

int snug_engine_submit_n(struct snug_engine *e, struct snug_engine_job *const *jobs, int32_t n,
                         struct snug_err *err) {
    for (int32_t k = 0; k < n; k++) {
        const struct snug_engine_job *j = jobs[k];
        if (j->n_images < 0 || j->n_images > SNUG_ENGINE_MAX_IMAGES || (j->n_images && !e->venc))
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "%d images: this engine takes at most %d, and only with a vision "
                                "tower (--mmproj)",
                                j->n_images, e->venc ? SNUG_ENGINE_MAX_IMAGES : 0);
        if (j->n_prompt < 1)
            return snug_err_set(err, SNUG_ERR_INVALID, "the prompt is empty (no tokens)");
        if (j->n_prompt >= e->n_ctx)
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "the prompt has %d tokens but the context holds %d tokens per slot "
                                "(leave room for at least one generated token)",
                                j->n_prompt, e->n_ctx);
    }
    pthread_mutex_lock(&e->mu);
    int32_t free_slots = e->n_slots - e->stats.slots_busy;
    if (e->stop || n < 1 || e->q_len + n - 1 - free_slots >= e->q_cap) {
        pthread_mutex_unlock(&e->mu);
        return snug_err_set(err, SNUG_ERR_BUDGET,
                            "the server is busy: %d requests are already waiting (queue limit %d)",
                            e->q_len, e->q_cap);
    }
    double now = snug_time_s();
    for (int32_t k = 0; k < n; k++) {
        struct snug_engine_job *j = jobs[k];
        j->t_submit = now;
        j->next = NULL;
        if (e->q_tail)
            e->q_tail->next = j;
        else
            e->q_head = j;
        e->q_tail = j;
        e->q_len++;
    }
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return SNUG_OK;
}

void snug_engine_wake(struct snug_engine *e) {
    pthread_mutex_lock(&e->mu);
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void snug_engine_get_stats(struct snug_engine *e, struct snug_engine_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    out->queue_len = e->q_len;
    pthread_mutex_unlock(&e->mu);
}

const char *snug_engine_self_test(const struct snug_engine *e) {
    return e->self_test;
}
