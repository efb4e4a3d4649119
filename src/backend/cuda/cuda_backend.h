/* cuda_backend.h — the small device kernels the backend interface (src/backend/backend.h) adds
 * to cuda_ops.h: residual add, scale, the DeltaNet gates, row gather, row argmax, the MoE routing,
 * expert products and combine, and the encoder ops of the vision tower (cuda_encoder.cu). Device
 * pointers; queued on the context's stream; never allocate. Read next: cuda_extra.cu (the kernels),
 * cuda_backend.c (the vtable that calls them).
 */
#ifndef SNUG_CUDA_BACKEND_H
#define SNUG_CUDA_BACKEND_H

#include "backend/cuda/cuda_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

int snug_cuda_add(struct snug_cuda *cu, float *x, const float *y, int64_t n, struct snug_err *err);
int snug_cuda_scale(struct snug_cuda *cu, float *x, int64_t n, float s, struct snug_err *err);
int snug_cuda_delta_gates(struct snug_cuda *cu, float *beta, float *g, const float *a,
                          const float *dt, int64_t T, int64_t Nv, struct snug_err *err);
int snug_cuda_gather_rows(struct snug_cuda *cu, float *dst, const float *src, const int32_t *idx,
                          int64_t n, int64_t H, struct snug_err *err);
/* backend.h argmax: out[r] = the lowest index of the largest of row r (the host scan's rule). */
int snug_cuda_argmax(struct snug_cuda *cu, const float *x, int64_t rows, int64_t n, int32_t *out,
                     struct snug_err *err);
int snug_cuda_moe_combine(struct snug_cuda *cu, float *y, const float *d, const int32_t *slot,
                          const float *w, int64_t T, int64_t k, int64_t H, struct snug_err *err);
/* Slots per tile of the expert products: backend.h's SNUG_MOE_TILE (cuda_backend.c checks). */
#define SNUG_CUDA_MOE_TILE 8
/* backend.h moe_route / moe_matmul (the grouped expert products with int8 activations for the
 * types of the decode matvec: snug_cuda_moe_matmul_supported). */
int snug_cuda_moe_route(struct snug_cuda *cu, const float *logits, int64_t T, int64_t E, int64_t k,
                        int32_t *sel, int32_t *cnt, float *selw, int32_t *order, int32_t *slot,
                        int32_t *off, int32_t *tiles, struct snug_err *err);
bool snug_cuda_moe_matmul_supported(uint32_t type, int64_t n_in);
/* x NULL: work already holds the n_slots rows rounded to int8 by the previous call with the same
 * n_in and work (gate then up over the same grouped rows), or by the op that wrote them
 * (snug_cuda_swiglu_q8 over n_slots·n_in elements into this work: the down product). `work` holds
 * nothing but that rounding (the int8 matvec's layout, snug_cuda_matmul_work_bytes(n_slots·n_in,
 * ·, 1) bytes). single: 0 any tiles; 1 one slot per tile (one token); 2 the same and x is that
 * token's one row, read by every slot (the rounding then holds one row: x_rows = 1). */
int snug_cuda_moe_matmul(struct snug_cuda *cu, uint32_t type, const void *w, uint64_t expert_bytes,
                         int64_t n_in, int64_t n_out, const float *x, const int32_t *tiles,
                         int64_t n_slots, int64_t max_tiles, int single, float *y, void *work,
                         struct snug_err *err);
/* Bit 0: Q4_K/Q6_K expert products of several slots per tile on the dp4a tile kernel instead of
 * int8 tensor cores (the default). Bit 1: one-token products (decode) on the block-per-4-rows
 * kernel instead of the lanes-per-row one (the default). 0: the defaults. */
void snug_cuda_moe_tune(int dp4a);
/* 1: route with the block-per-token kernel even where the warp-per-token one applies (E <=
 * 1024); 0: the default. Tests compare both. */
void snug_cuda_moe_route_tune(int block);
int snug_cuda_add_gated(struct snug_cuda *cu, float *y, const float *d, const float *glogit,
                        int64_t T, int64_t H, struct snug_err *err);

/* Encoder ops (the vision tower; cuda_encoder.cu, semantics src/backend/cpu/ops.h):
 * LayerNorm, bias + activation (act: enum snug_act, 0 none, 1 GELU-tanh, 2 GELU-erf), rotary
 * by an angle table, and full attention (head_dim a multiple of 4 up to 128; others are
 * SNUG_ERR_UNSUPPORTED). */
int snug_cuda_layernorm(struct snug_cuda *cu, const float *x, const float *w, const float *b,
                        float eps, int64_t T, int64_t n, float *y, struct snug_err *err);
int snug_cuda_bias_act(struct snug_cuda *cu, float *y, const float *b, int64_t T, int64_t n,
                       int act, struct snug_err *err);
int snug_cuda_rope_angles(struct snug_cuda *cu, float *x, int64_t stride, int64_t T,
                          int64_t n_heads, int64_t head_dim, const float *ang,
                          struct snug_err *err);
int snug_cuda_attention_full(struct snug_cuda *cu, const float *q, const float *k, const float *v,
                             int64_t stride, int64_t T, int64_t n_heads, int64_t head_dim,
                             float scale, float *out, struct snug_err *err);
bool snug_cuda_attention_full_supported(int64_t head_dim);

#ifdef __cplusplus
}
#endif

#endif /* SNUG_CUDA_BACKEND_H */
