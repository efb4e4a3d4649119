/* tp.h — tensor parallelism's forward, emulated on the CPU: R ranks in one process, each a
 * model of the same architecture with its heads and widths (src/plan/shard.h), its own caches
 * and work arena, run by its own thread; the backend's all_reduce op (backend.h) sums the
 * ranks' partial outputs at a barrier, in rank order, so the ranks keep identical residual
 * streams, as NCCL's all-reduce gives them on devices. It checks the split's arithmetic end to
 * end against the one-device forward (tests/e2e/test_tp_cpu.c) before any GPU runs it.
 * One sequence, trunk only (no MTP drafts), CPU only; the engine's slots and the CUDA ranks
 * come next (docs/tensor-parallel.md).
 * Invariant: a rank's weights are views into the model's mapping where its slice is one range
 * of rows, copies gathered once at open otherwise; nothing is allocated by snug_tp_cpu_eval
 * except the R threads it starts.
 * Read next: tp_cpu.c, src/plan/shard.h, src/arch/qwen35.c (the all_reduce points).
 */
#ifndef SNUG_TP_H
#define SNUG_TP_H

#include "model/model.h"

struct snug_tp_cpu;

/* R ranks over the loaded model m (borrowed; outlives the result), caches for one sequence of
 * n_ctx positions in steps of at most n_chunk tokens, KV format kv_type. Errors: the split's
 * refusals (shard.h), out of memory. */
int snug_tp_cpu_open(struct snug_tp_cpu **out, const struct snug_model *m, int32_t n_ranks,
                     int32_t n_ctx, int32_t n_chunk, int32_t kv_type, struct snug_err *err);
void snug_tp_cpu_free(struct snug_tp_cpu *tp);

/* Append n tokens to the sequence (steps of at most n_chunk) and write the logits of the last
 * n_logits tokens (0..n) to logits ([n_logits][V], gathered from the ranks' vocabulary rows).
 * SNUG_ERR_BUDGET when the sequence would pass n_ctx. */
int snug_tp_cpu_eval(struct snug_tp_cpu *tp, const snug_token *ids, int32_t n, int32_t n_logits,
                     float *logits, struct snug_err *err);

#endif /* SNUG_TP_H */
