/* step_budget.c — the prompt rows of a step under `--step-prompt auto` and the step costs they
 * come from (see step_budget.h). Pure: the engine thread holds the state and the clock.
 * Read next: src/engine/engine.c (engine_step). */
#include "engine/step_budget.h"

#include <math.h>

/* Weights of a new sample in the moving averages. t_dec is sampled at every decode step
 * (hundreds a second), so it follows slowly and one slow step — a CUDA graph's first, eager,
 * sighting — does not move it much; c_row is sampled only at prompt steps and must follow the
 * piece size and the prompt's depth within a few steps. */
#define ALPHA_DEC 0.125
#define ALPHA_ROW 0.25
/* The least a prompt row counts (seconds): a step no slower than a decode step still says
 * "measured", as c_row = 0 means "not yet". */
#define ROW_MIN_S 1e-9

void snug_step_cost_note(struct snug_step_cost *c, double seconds, int32_t dec_rows,
                         int32_t prompt_rows) {
    if (!(seconds > 0) || !isfinite(seconds)) return;
    if (prompt_rows <= 0) {
        if (dec_rows > 0)
            c->t_dec = c->t_dec > 0 ? c->t_dec + ALPHA_DEC * (seconds - c->t_dec) : seconds;
        return;
    }
    if (!(c->t_dec > 0)) return; /* nothing to subtract yet */
    double per = (seconds - c->t_dec) / (double)prompt_rows;
    if (per < ROW_MIN_S) per = ROW_MIN_S;
    c->c_row = c->c_row > 0 ? c->c_row + ALPHA_ROW * (per - c->c_row) : per;
}

int32_t snug_step_prompt_rows(double t_dec, double c_row, bool others_decode, int32_t n_prefill,
                              int32_t chunk, int32_t min_rows) {
    if (chunk < 1) chunk = 1;
    if (!others_decode) return chunk;
    if (n_prefill < 1) n_prefill = 1;
    if (min_rows < 1) min_rows = 1;
    if (min_rows > chunk) min_rows = chunk;
    /* the step's prompt rows (compared as a double: no overflow), shared by the prefilling slots */
    double rows = t_dec > 0 && c_row > 0 && isfinite(t_dec) && isfinite(c_row)
                      ? t_dec / c_row
                      : SNUG_STEP_PROMPT_START;
    rows = floor(rows / (double)n_prefill);
    if (rows < (double)min_rows) return min_rows;
    if (rows > (double)chunk) return chunk;
    return (int32_t)rows;
}
