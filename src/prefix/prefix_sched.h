/* prefix_sched.h — where a prefill takes checkpoints and where its chunks end.
 *
 * Checkpoints go at: the end of the system prompt, the end of the last message before the
 * generation prompt (the next request of an agent re-renders the assistant turn, so the
 * divergence point is there, not at the prompt's end), the end of the last user query (once a
 * new user turn arrives the template re-renders the assistant turns after it without their
 * reasoning, so the next turn's prompt diverges there), and every `every` tokens (positions
 * that are multiples of it, so two runs agree on them). The end of generation is the engine's
 * own (not a prefill position).
 *
 * Exactness: a run restored at checkpoint p and continued must compute what a cold prefill
 * of the same prompt computes from p — so both must cut their chunks at the same positions
 * from p on. Chunks therefore end at every "boundary": every message start of the rendered
 * chat (a restore point from an earlier request is a message end of this one, whichever
 * message it was then), every multiple of `every`, and the prompt's end; between two
 * boundaries chunks are n_chunk tokens counted from the earlier boundary. So from any boundary
 * the chunk sequence depends only on the boundaries after it: a cold run and a restored run
 * agree from the restore point on. A run starting between boundaries (today's strict-extension
 * reuse) joins the same grid at the next boundary.
 * Owns: nothing; pure functions over the caller's arrays; nothing allocated.
 * Read next: prefix.h (the store), src/server/chat.h (snug_chat_marks: the message offsets).
 */
#ifndef SNUG_PREFIX_SCHED_H
#define SNUG_PREFIX_SCHED_H

#include <stdbool.h>
#include <stdint.h>

struct snug_prefix_sched {
    int32_t n_prompt; /* tokens of the prompt */
    int32_t n_chunk;  /* most tokens per forward step (>= 1) */
    int32_t every;    /* --cache-checkpoint-every (0: no periodic checkpoints) */
    /* token positions where messages start (ascending; 0 and n_prompt may be included or
     * not): the chunk boundaries */
    const int32_t *msg_starts;
    int32_t n_msg_starts;
    int32_t system_end; /* end of the system prompt in tokens (0: none) */
    int32_t last_end;   /* end of the last message before the generation prompt (0: none) */
    int32_t user_end;   /* end of the last user query (0: none): where a new user turn diverges */
};

/* The end of the chunk that starts at pos (pos < n_prompt): pos + 1 .. n_prompt. */
int32_t snug_prefix_chunk_end(const struct snug_prefix_sched *s, int32_t pos);
/* Whether the prefill takes a checkpoint after evaluating [0, pos) (0 < pos < n_prompt). */
bool snug_prefix_checkpoint_at(const struct snug_prefix_sched *s, int32_t pos);
/* The checkpoint positions in (from, n_prompt), ascending, into out[0..cap); returns how many
 * there are (may exceed cap: only cap are written). */
int32_t snug_prefix_checkpoints(const struct snug_prefix_sched *s, int32_t from, int32_t *out,
                                int32_t cap);

#endif /* SNUG_PREFIX_SCHED_H */
