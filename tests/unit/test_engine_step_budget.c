/* test_engine_step_budget.c — `--step-prompt auto`'s rule (src/engine/step_budget.h), on given
 * numbers (no clock): the whole chunk with nobody decoding; floor(t_dec / c_row) shared by the
 * prefilling slots and clamped to [floor, chunk] with others decoding; the start before the
 * measurements (zero, negative, NaN, infinite); the clamps' corner cases; on random inputs the
 * result stays in [1, chunk], grows with t_dec, shrinks with c_row, and away from the clamps
 * the prompt rows cost at most t_dec; the moving averages (what each kind of step updates, what
 * is ignored); and the loop of rule and measurement on modelled step costs: a linear cost
 * settles at t_dec / c (a step of 2 × t_dec), a cost with a large fixed part per prompt step at
 * the floor, a cost that grows faster than the rows (as with memory-bound kernels) at the
 * piece where the step is 2 × t_dec. */
#include "engine/step_budget.h"
#include "test.h"

#include <math.h>
#include <stdint.h>

static int32_t rows_of(double t_dec, double c_row) {
    return snug_step_prompt_rows(t_dec, c_row, true, 1, 512, SNUG_STEP_PROMPT_FLOOR);
}

/* Run the engine's loop on a modelled step: `warm` decode-only steps of t_dec, then `steps`
 * steps with others decoding whose prompt rows are the rule's and whose time is cost(rows).
 * Returns the last step's rows; *last_s its time. */
static int32_t settle(double t_dec, double (*cost)(int32_t rows), int steps, double *last_s) {
    struct snug_step_cost c = {0};
    for (int i = 0; i < 20; i++) snug_step_cost_note(&c, t_dec, 1, 0);
    int32_t rows = 0;
    for (int i = 0; i < steps; i++) {
        rows = snug_step_prompt_rows(c.t_dec, c.c_row, true, 1, 2048, SNUG_STEP_PROMPT_FLOOR);
        *last_s = cost(rows);
        snug_step_cost_note(&c, *last_s, 1, rows);
    }
    return rows;
}
#define T_DEC 0.011
static double cost_linear(int32_t r) { /* decode step + 0.2 ms a row: settles at 55 */
    return T_DEC + 0.0002 * r;
}
static double cost_fixed(int32_t r) { /* a prompt step pays 3 decode steps more whatever r */
    return T_DEC + 3 * T_DEC + 0.0002 * r;
}
static double cost_square(int32_t r) { /* rows nearly free at first: 2 × T_DEC at r = 256 */
    return T_DEC + T_DEC * ((double)r / 256) * ((double)r / 256);
}

int main(void) {
    const int32_t F = SNUG_STEP_PROMPT_FLOOR, S = SNUG_STEP_PROMPT_START;
    CHECK(F >= 9 && F <= S && S <= 512); /* past the decode-sized steps; start within reach */

    /* nobody else decodes: the whole chunk, measured or not */
    CHECK(snug_step_prompt_rows(0.011, 0.0004, false, 1, 512, F) == 512);
    CHECK(snug_step_prompt_rows(0, 0, false, 1, 2048, F) == 2048);
    CHECK(snug_step_prompt_rows(1.0, 1e-12, false, 3, 512, F) == 512);

    /* the rule: floor(t_dec / c_row), clamped */
    CHECK(rows_of(1.0, 1.0 / 100.5) == 100);
    CHECK(rows_of(0.5, 0.0078125) == 64); /* exactly 64 */
    CHECK(rows_of(0.011, 0.0001) == 109 || rows_of(0.011, 0.0001) == 110);
    CHECK(rows_of(0.011, 0.19 / 512) == F); /* 29.6 → the floor (the 27B's numbers) */
    CHECK(rows_of(1.0, 1.0 / 33.0) == 33 || rows_of(1.0, 1.0 / 33.0) == 32);
    CHECK(rows_of(0.011, 1.0) == F);      /* prompt rows far dearer than a step */
    CHECK(rows_of(0.011, 1e-7) == 512);   /* prompt rows nearly free: the chunk */
    CHECK(rows_of(1e300, 1e-300) == 512); /* no overflow */
    CHECK(rows_of(1.0, 1.0 / 512.0) == 512);
    CHECK(rows_of(1.0, 1.0 / 511.5) == 511);

    /* before the measurements: the start, clamped like the rule */
    CHECK(rows_of(0, 0) == S);
    CHECK(rows_of(0.011, 0) == S);
    CHECK(rows_of(0, 0.0001) == S);
    CHECK(rows_of(-1, 0.0001) == S);
    CHECK(rows_of(0.011, -0.5) == S);
    CHECK(rows_of(NAN, 0.0001) == S);
    CHECK(rows_of(0.011, NAN) == S);
    CHECK(rows_of(INFINITY, 0.0001) == S);
    CHECK(rows_of(0.011, INFINITY) == S);
    CHECK(snug_step_prompt_rows(0, 0, true, 1, 48, F) == 48);     /* chunk below the start */
    CHECK(snug_step_prompt_rows(0, 0, true, 1, 512, 100) == 100); /* floor above the start */
    CHECK(snug_step_prompt_rows(0, 0, true, 2, 512, F) == S / 2); /* shared like the rule */

    /* several prefilling slots share the step's rows */
    CHECK(snug_step_prompt_rows(1.0, 1.0 / 300.5, true, 2, 512, F) == 150);
    CHECK(snug_step_prompt_rows(1.0, 1.0 / 300.5, true, 3, 512, F) == 100);
    CHECK(snug_step_prompt_rows(1.0, 1.0 / 300.5, true, 16, 512, F) == F);  /* each ≥ the floor */
    CHECK(snug_step_prompt_rows(1.0, 1.0 / 300.5, true, 0, 512, F) == 300); /* 0 reads as 1 */
    CHECK(snug_step_prompt_rows(1.0, 1.0 / 300.5, true, -4, 512, F) == 300);

    /* the clamps' corners: chunk below the floor wins; floor < 1 reads as 1; chunk < 1 as 1 */
    CHECK(snug_step_prompt_rows(0.011, 1.0, true, 1, 16, F) == 16);
    CHECK(snug_step_prompt_rows(0.011, 1e-7, true, 1, 16, F) == 16);
    CHECK(snug_step_prompt_rows(1.0, 2.0, true, 1, 512, 0) == 1);
    CHECK(snug_step_prompt_rows(1.0, 2.0, true, 1, 512, -7) == 1);
    CHECK(snug_step_prompt_rows(1.0, 1.0 / 7.5, true, 1, 512, 1) == 7);
    CHECK(snug_step_prompt_rows(1.0, 1.0 / 7.5, true, 1, 0, F) == 1);
    CHECK(snug_step_prompt_rows(1.0, 1.0 / 7.5, false, 1, -3, F) == 1);

    /* random inputs: within [1, chunk]; monotone in t_dec and c_row; away from the clamps the
     * prompt rows cost at most t_dec and one more row would cost more */
    int bad_range = 0, bad_mono = 0, bad_cost = 0;
    for (int it = 0; it < 200000; it++) {
        double t = pow(10, -5 + 6 * test_rand01()), c = pow(10, -8 + 7 * test_rand01());
        int32_t chunk = 1 + (int32_t)(test_rand01() * 4096), fl = (int32_t)(test_rand01() * 80) - 4;
        int32_t np = 1 + (int32_t)(test_rand01() * 4);
        int32_t r = snug_step_prompt_rows(t, c, true, np, chunk, fl);
        if (r < 1 || r > chunk) bad_range++;
        if (snug_step_prompt_rows(t * 1.5, c, true, np, chunk, fl) < r ||
            snug_step_prompt_rows(t, c * 1.5, true, np, chunk, fl) > r)
            bad_mono++;
        int32_t lo = fl < 1 ? 1 : fl > chunk ? chunk : fl;
        if (r > lo && r < chunk && (r * np * c > t * (1 + 1e-12) || (r + 1) * np * c <= t))
            bad_cost++;
    }
    CHECKF(!bad_range, "%d results outside [1, chunk]", bad_range);
    CHECKF(!bad_mono, "%d results not monotone", bad_mono);
    CHECKF(!bad_cost, "%d results not floor(t_dec / c_row / n)", bad_cost);

    /* the moving averages */
    struct snug_step_cost c = {0};
    snug_step_cost_note(&c, 0.05, 1, 100); /* prompt rows before any decode step: ignored */
    CHECK(c.t_dec == 0 && c.c_row == 0);
    snug_step_cost_note(&c, 0.010, 1, 0); /* the first decode step sets t_dec */
    CHECK(c.t_dec == 0.010 && c.c_row == 0);
    snug_step_cost_note(&c, 0.018, 3, 0); /* then it moves by 1/8 of the difference */
    CHECK_NEAR(c.t_dec, 0.011, 1e-15);
    snug_step_cost_note(&c, 0.031, 1, 100); /* the first prompt step sets c_row */
    CHECK_NEAR(c.c_row, 0.0002, 1e-15);
    CHECK_NEAR(c.t_dec, 0.011, 1e-15);                     /* (a prompt step leaves t_dec alone) */
    snug_step_cost_note(&c, 0.011 + 100 * 0.0006, 0, 100); /* prompt rows alone count too */
    CHECK_NEAR(c.c_row, 0.0003, 1e-15);                    /* moves by 1/4 */
    struct snug_step_cost keep = c;
    snug_step_cost_note(&c, 0, 1, 0);
    snug_step_cost_note(&c, -1, 1, 10);
    snug_step_cost_note(&c, NAN, 1, 0);
    snug_step_cost_note(&c, INFINITY, 1, 10);
    snug_step_cost_note(&c, 0.02, 0, 0); /* no rows */
    CHECK(c.t_dec == keep.t_dec && c.c_row == keep.c_row);
    struct snug_step_cost z = {.t_dec = 0.011};
    snug_step_cost_note(&z, 0.009, 1, 64); /* faster than a decode step: still "measured" */
    CHECK(z.c_row > 0 && z.c_row < 1e-8);
    CHECK(rows_of(z.t_dec, z.c_row) == 512);

    /* the loop on modelled costs */
    double last = 0;
    int32_t r = settle(T_DEC, cost_linear, 30, &last);
    CHECKF(r >= 54 && r <= 55, "linear cost settles at %d rows (55 expected)", r);
    CHECKF(last <= 2 * T_DEC * (1 + 1e-9), "linear cost: the step takes %.6f s", last);
    r = settle(T_DEC, cost_fixed, 30, &last);
    CHECKF(r == F, "a prompt step's fixed part above t_dec: %d rows (the floor expected)", r);
    r = settle(T_DEC, cost_square, 80, &last);
    CHECKF(r >= 250 && r <= 262, "rows nearly free at first: settles at %d rows (256)", r);
    CHECKF(last <= 2.1 * T_DEC, "the step takes %.6f s (2 × %.3f)", last, T_DEC);
    /* the first prompt step, before c_row exists, uses the start */
    struct snug_step_cost w = {.t_dec = T_DEC};
    CHECK(snug_step_prompt_rows(w.t_dec, w.c_row, true, 1, 2048, F) == S);
    return TEST_DONE();
}
