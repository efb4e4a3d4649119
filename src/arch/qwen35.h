/* qwen35.h — what the files of the qwen35 family share: the hybrid trunk (qwen35.c: load,
 * scratch, plan, forward, the step's image rows and LM head) and the MTP block (qwen35_mtp.c),
 * each run with an FFN of the architecture's (dense in qwen35.c, MoE in qwen35moe.c).
 * Invariant: plan and forward size their buffers through the same functions, so the planned
 * work arena always holds a step of n_chunk rows. Read next: qwen35.c.
 */
#ifndef SNUG_ARCH_QWEN35_H
#define SNUG_ARCH_QWEN35_H

#include "arch/arch.h"

/* Shared trunk of the qwen35 family (src/arch/qwen35.c), used by qwen35moe. */
typedef void (*snug_qwen35_ffn_fn)(struct snug_fwd *f, const struct snug_layer *L, const float *x,
                                   float *y);
int snug_qwen35_load_trunk(struct snug_model *m, struct snug_err *err);
size_t snug_qwen35_trunk_work_bytes(const struct snug_hparams *hp, int32_t T, int32_t n_threads);
void snug_qwen35_plan_common(const struct snug_hparams *hp, int32_t n_chunk, int32_t n_threads,
                             enum snug_kv_type kv_type, size_t ffn_work_bytes,
                             struct snug_arch_plan *out);
void snug_qwen35_forward_common(struct snug_fwd *f, snug_qwen35_ffn_fn ffn);
/* The products whose outputs feed decisions (routers, gates, β/α): y = w·x and, with w2, y2 =
 * w2·x (backend.h matmul_precise). x: [T][w->ne[0]]. */
void snug_qwen35_matmul_precise(struct snug_fwd *f, snug_tensor w, snug_tensor w2, const float *x,
                                int64_t T, float *y, float *y2);
/* Two ordinary products of one x (the gate and up of an FFN): y = w·x, y2 = w2·x, in one
 * backend op (backend.h matmul_pair) when w2 has w's type and n_in, else one by one. */
void snug_qwen35_matmul_pair(struct snug_fwd *f, snug_tensor w, snug_tensor w2, const float *x,
                             int64_t T, float *y, float *y2);
/* A step's image rows (f->embd_rows) into x [T][H], backend memory: trunk and MTP block. */
void snug_qwen35_place_rows(struct snug_fwd *f, float *x);
/* The LM head of a step: each run's last n_logits rows of xn ([T][H], backend memory) into
 * f->logits (host), packed in row order; lg: a staging buffer of min(T, SNUG_FWD_LG_ROWS) rows
 * of V floats for a backend whose memory is not the host's. */
void snug_fwd_logits(struct snug_fwd *f, const float *xn, float *lg);
/* The MTP block of the qwen35 family (src/arch/qwen35_mtp.c): scratch of a step of T
 * positions (without the FFN's) and the forward (see snug_arch.mtp_forward). */
size_t snug_qwen35_mtp_work_bytes(const struct snug_hparams *hp, int32_t T, int32_t n_threads);
void snug_qwen35_mtp_forward_common(struct snug_fwd *f, snug_qwen35_ffn_fn ffn);

#endif /* SNUG_ARCH_QWEN35_H */
