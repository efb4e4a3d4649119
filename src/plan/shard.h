/* shard.h — tensor parallelism's arithmetic: for a model's hyper-parameters and R ranks, what
 * each rank owns (attention query and KV heads, DeltaNet key and value heads and their state,
 * FFN / expert / shared-expert columns, LM-head vocabulary rows), which slice of every weight
 * tensor that is, the rank's own shape (struct snug_hparams of its slice: what the memory plan
 * and a rank's forward size their buffers by), and the refusals when a dimension does not
 * divide. Pure arithmetic: no model, no device. docs/tensor-parallel.md explains the split.
 *
 * The split (Megatron-LM's, as vLLM applies it; docs/tensor-parallel.md §1):
 *   - projections INTO a head-parallel or width-parallel part are split by output rows
 *     (ggml ne[1]: contiguous rows of the weight, no communication): attn_q/k/v, attn_qkv,
 *     attn_gate, ssm_beta/alpha, ffn_gate/up (dense, expert, shared expert);
 *   - projections OUT of it are split by input columns (ggml ne[0]) and give partial sums that
 *     one all-reduce adds: attn_output, ssm_out, ffn_down (dense, expert, shared expert) —
 *     two all-reduces of [T][H] per layer (after the mixer, after the FFN);
 *   - the LM head is split by vocabulary rows; each rank's logits columns are gathered;
 *   - everything else (embeddings, norms, the MoE router, the shared-expert gate, the MTP
 *     eh_proj) is held whole by every rank ("replicated").
 * Heads: rank r owns query heads [r·Hq/R, (r+1)·Hq/R). KV heads: Hkv/R per rank when R divides
 * Hkv; when Hkv < R (and Hkv divides R) every KV head is replicated on R/Hkv ranks and rank r
 * holds KV head r / (R/Hkv) — the rule of vLLM's QKVParallelLinear (num_kv_head_replicas =
 * tp_size / total_num_kv_heads, vllm/model_executor/layers/linear.py). DeltaNet: rank r owns
 * key heads [r·Nk/R, (r+1)·Nk/R) and, since GGUF value head j reads key head j mod Nk
 * (docs/qwen35.md §4.4), the value heads j with j mod Nk among them: Nv/Nk ranges of Nk/R
 * heads, at m·Nk + r·Nk/R for m = 0 .. Nv/Nk − 1. Within the rank the same tiling holds (local
 * value head j' reads local key head j' mod Nk/R), so a rank's slice is a model of the same
 * architecture with fewer heads: snug_shard_rank_hparams.
 *
 * Invariant: for every tensor the slices of the ranks that own them (struct snug_shard_slice
 * .copy false) cover it exactly once; the other slices are copies (whole tensors on ranks 1..,
 * replicated KV heads): Σ_r bytes_r = bytes + Σ_r copied bytes_r, to the byte
 * (tests/unit/test_plan_shard.c checks it on the presets and odd shapes).
 * Read next: shard.c, src/plan/plan.c (the plan per rank), docs/tensor-parallel.md.
 */
#ifndef SNUG_PLAN_SHARD_H
#define SNUG_PLAN_SHARD_H

#include "model/model.h"

#include <stdint.h>

/* The most DeltaNet value-head ranges a rank holds: Nv/Nk (3 for the 27B, 2 for the 35B). */
#define SNUG_SHARD_MAX_VRANGES 8
/* The most ranges one tensor's slice has: attn_qkv's Q and K ranges plus the value ranges. */
#define SNUG_SHARD_MAX_RANGES (2 + SNUG_SHARD_MAX_VRANGES)

/* [first, first + count) along one dimension. */
struct snug_shard_range {
    uint32_t first, count;
};

/* What rank `rank` of `n_ranks` owns. Head ranges in heads, widths in elements. */
struct snug_shard_rank {
    int32_t rank, n_ranks;
    struct snug_shard_range q_heads;  /* attention query heads */
    struct snug_shard_range kv_heads; /* attention KV heads (one replicated head when Hkv < R) */
    uint32_t kv_replicas;             /* ranks holding each KV head: R / Hkv when Hkv < R, else 1 */
    struct snug_shard_range key_heads; /* DeltaNet key (and query) heads */
    int32_t n_value_ranges;            /* DeltaNet value heads: Nv/Nk ranges of Nk/R heads */
    struct snug_shard_range value_heads[SNUG_SHARD_MAX_VRANGES];
    struct snug_shard_range ff;       /* dense FFN width */
    struct snug_shard_range ff_exp;   /* each routed expert's FFN width */
    struct snug_shard_range ff_shexp; /* the shared expert's FFN width */
    struct snug_shard_range vocab;    /* LM-head rows: [V·r/R, V·(r+1)/R), the one uneven split */
};

/* How a tensor is split: whole on every rank, by output rows (ne[1], per expert for 3-D
 * tensors), or by input columns (ne[0]; the product's partial sums are all-reduced). */
enum snug_shard_split {
    SNUG_SHARD_WHOLE = 0,
    SNUG_SHARD_ROWS = 1,
    SNUG_SHARD_COLS = 2,
};

/* One rank's slice of one tensor: the ranges along the split dimension (in elements: rows for
 * ROWS, columns for COLS), their total, and the bytes the rank holds. */
struct snug_shard_slice {
    enum snug_shard_split split;
    bool reduce; /* the product over this slice is a partial sum (all-reduced after) */
    bool gather; /* the product's outputs are gathered across ranks (the LM head) */
    /* The slice is a copy of what another rank owns: a whole tensor on ranks other than 0, a
     * replicated KV head on ranks other than the first of its R/Hkv holders. Σ over ranks of
     * the bytes of slices that are not copies = the tensor's bytes. */
    bool copy;
    int32_t n_ranges;
    struct snug_shard_range r[SNUG_SHARD_MAX_RANGES];
    uint64_t extent; /* Σ counts (ne[0] or ne[1] for WHOLE) */
    uint64_t bytes;  /* the rank's bytes of the tensor */
};

/* The split of hp over n_ranks is possible: SNUG_ERR_INVALID naming the dimension that does
 * not divide (or the rank count out of 1..SNUG_TP_MAX_RANKS) otherwise. n_ranks 1 always is. */
int snug_shard_check(const struct snug_hparams *hp, int32_t n_ranks, struct snug_err *err);

/* What rank `rank` owns (runs snug_shard_check first). */
int snug_shard_rank(const struct snug_hparams *hp, int32_t n_ranks, int32_t rank,
                    struct snug_shard_rank *out, struct snug_err *err);

/* The rank's shape: hp with the rank's heads and widths (n_head, n_head_kv, ssm_n_group,
 * ssm_dt_rank, ssm_d_inner, n_ff, n_ff_exp, n_ff_shexp); n_embd, the layer pattern and
 * n_vocab stay (the LM head's output is gathered into whole rows). The same for every rank. */
int snug_shard_rank_hparams(const struct snug_hparams *hp, int32_t n_ranks,
                            struct snug_hparams *out, struct snug_err *err);

/* The rank's slice of tensor `name` (a GGUF name: "output.weight", "blk.3.attn_q.weight" ...)
 * of shape ne and dtype `type`. Tensors the split does not name are held whole. A split by
 * input columns must fall on whole blocks of the type: SNUG_ERR_INVALID naming the tensor, the
 * width and the block size otherwise. */
int snug_shard_tensor(const struct snug_shard_rank *sr, const struct snug_hparams *hp,
                      const char *name, const uint64_t ne[4], uint32_t type,
                      struct snug_shard_slice *out, struct snug_err *err);

#endif /* SNUG_PLAN_SHARD_H */
