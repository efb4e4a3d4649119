/* step_budget.h — how many prompt rows a prefilling slot adds to one engine step under
 * `--step-prompt auto` (the server's default): a time budget, so the slots that are decoding
 * see their steps — their inter-token latency — grow by at most about one decode step while
 * another request's long prompt prefills.
 *
 * The engine measures every batched step it runs (monotonic clock around snug_step) and keeps
 * two moving averages (snug_step_cost_note): t_dec, the time of a step that carries only decode
 * or verification rows, and c_row, what a prompt row adds to a step beyond t_dec
 * ((step time − t_dec) / prompt rows, over the steps that carry prompt rows). With another slot
 * decoding in the step, the prompt rows are floor(t_dec / c_row) — the step then costs about
 * t_dec + t_dec — shared among the slots prefilling at once and clamped to
 * [SNUG_STEP_PROMPT_FLOOR, chunk]; with nobody decoding, the whole chunk (no stream waits);
 * before both averages exist, SNUG_STEP_PROMPT_START rows, and the rule takes over after the
 * first measured prompt step. c_row is measured at the piece size in use, so the loop settles
 * where the step costs ~2 × t_dec even when a row's cost depends on the piece size (kernels
 * that are memory-bound for a few rows) or on the prompt's depth (attention over more keys).
 * Owns: nothing; pure functions (no clock, no allocation) — the engine holds the state.
 * Invariant: snug_step_prompt_rows returns a value in [1, chunk] for any inputs.
 * Read next: src/engine/engine.c (engine_step: where the rows are asked and the steps timed),
 * src/prefix/prefix_sched.h (the piece ends the rows never cross).
 */
#ifndef SNUG_ENGINE_STEP_BUDGET_H
#define SNUG_ENGINE_STEP_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

/* The fewest prompt rows a prefilling slot adds to a step beside decoding slots (unless the
 * chunk is smaller): 32. A step of 32 rows or more always runs the prompt kernels (the decode
 * ones stop at 8 rows on CUDA, 16 on the CPU), so the step's cost is smooth in the rows and
 * c_row measures one kind of step; those kernels have a per-step part that does not shrink with
 * the rows (on CUDA the bf16 path dequantises every weight tile once per step), so a smaller
 * piece buys little step time while the prompt's progress falls in proportion; it fills half a
 * chunk of DeltaNet's chunked form (64 rows); it keeps prompt steps out of the decode-sized
 * steps the CUDA backend records as graphs (at most 8 rows, a small cache that arbitrary prompt
 * shapes would evict); and a 32K-token prompt still needs at most 1,024 steps beside streams. */
#define SNUG_STEP_PROMPT_FLOOR 32
/* The rows before the first measurements (clamped as the rule's): a conservative piece, an
 * eighth of a 512-row chunk, until one prompt step has been timed. */
#define SNUG_STEP_PROMPT_START 64

/* The engine's measurements, in seconds (0: none yet). */
struct snug_step_cost {
    double t_dec; /* moving average of a step of decode / verification rows only */
    double c_row; /* moving average of (step − t_dec) / prompt rows, steps with prompt rows */
};

/* Note one batched step that took `seconds` with dec_rows decode / verification rows and
 * prompt_rows prompt rows. A step of decode rows only updates t_dec (the first one sets it);
 * a step with prompt rows updates c_row once t_dec exists — also a step of prompt rows alone:
 * its fixed part (every weight read once) is what a decode step costs. A non-positive or
 * non-finite time, or a step without rows, is ignored. A prompt row never reads as free: its
 * sample is at least 1 ns (so c_row = 0 keeps meaning "not measured"). */
void snug_step_cost_note(struct snug_step_cost *c, double seconds, int32_t dec_rows,
                         int32_t prompt_rows);

/* The prompt rows each of n_prefill prefilling slots adds to a step (n_prefill < 1 reads as 1):
 * others_decode false: chunk. Otherwise floor(R / n_prefill) clamped to [min_rows, chunk]
 * (min_rows < 1 reads as 1; chunk wins over min_rows), where R, the step's prompt rows, is
 * t_dec / c_row, or SNUG_STEP_PROMPT_START while t_dec or c_row is not a positive finite number.
 * chunk < 1 reads as 1. */
int32_t snug_step_prompt_rows(double t_dec, double c_row, bool others_decode, int32_t n_prefill,
                              int32_t chunk, int32_t min_rows);

#endif /* SNUG_ENGINE_STEP_BUDGET_H */
