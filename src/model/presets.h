/* presets.h — the model shapes snug knows without a file, and the one enumeration of a
 * qwen35 / qwen35moe model's tensors (name, shape; types from a quant recipe). The memory
 * planner (src/plan) sizes presets from these; `snug gen` writes files of the same shapes.
 * Invariant: for any hparams, snug_model_tensor_types lists exactly the tensors (and types)
 * a file of that shape quantized with that recipe holds, in llama.cpp's file order.
 * Read next: presets.c, src/quant/quant.h (recipes), docs/qwen35.md §1 and §4.3.
 */
#ifndef SNUG_MODEL_PRESETS_H
#define SNUG_MODEL_PRESETS_H

#include "model/model.h"

/* Fill hp from a preset: "demo" (the trained fixture's shape with the built-in 265-token
 * vocabulary), "demo-moe" (the MoE fixture's shape), "qwen3.6-27b" (docs/qwen35.md §1.1),
 * "qwen3.6-35b-a3b" (docs/qwen35.md §1.2). SNUG_ERR_INVALID for an unknown name (lists the
 * presets). */
int snug_preset_find(const char *name, struct snug_hparams *hp, struct snug_err *err);
/* The preset names, NULL-terminated. */
extern const char *const snug_preset_names[];

/* Apply one "key=value" override (the same keys as `snug gen --set`: arch, n_vocab, n_layer
 * (trunk), nextn_predict_layers, embedding_length, feed_forward_length, attention.head_count,
 * attention.head_count_kv, attention.key_length, rope.dimension_count, ssm.conv_kernel,
 * ssm.state_size, ssm.group_count, ssm.time_step_rank, full_attention_interval, expert_count,
 * expert_used_count, expert_feed_forward_length, expert_shared_feed_forward_length,
 * context_length), then re-derive the dependent fields (snug_hparams_derive). */
int snug_preset_set(struct snug_hparams *hp, const char *kv, struct snug_err *err);

/* The "key=value" overrides behind snug_preset_set and snug_gen_set (src/tools/gen.c): a table
 * of fields (key, kind, byte offset into `base`); "arch" (qwen35 or qwen35moe) goes into the
 * arch_size-byte string `arch`. Integers must be non-negative (u32 below 2^32), floats finite.
 * Errors name the key and, for an unknown one, list the table's keys. */
enum snug_set_kind { SNUG_SET_U32, SNUG_SET_U64, SNUG_SET_F32 };
struct snug_set_field {
    const char *key;
    enum snug_set_kind kind;
    size_t off;
};
int snug_set_apply(void *base, char *arch, size_t arch_size, const struct snug_set_field *fields,
                   size_t n_fields, const char *kv, struct snug_err *err);

/* Recompute n_layer_all = n_layer + n_nextn, ssm_d_inner = Nv·dv and recurrent[] from the
 * full-attention interval. */
void snug_hparams_derive(struct snug_hparams *hp);

/* One tensor of a model: name, dims, ne (fastest first, unused = 1), type (a dtype id). */
struct snug_tensor_desc {
    char name[64];
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
};
typedef int (*snug_tensor_desc_fn)(void *user, const struct snug_tensor_desc *t);

/* Every tensor of docs/qwen35.md §4.3 for hp (type left 0), llama.cpp's order: token_embd,
 * output_norm, output, then each block (trunk, then MTP blocks). Stops at the first non-zero return
 * of fn and passes it on. */
int snug_model_tensor_list(const struct snug_hparams *hp, snug_tensor_desc_fn fn, void *user);

/* The same list with each tensor's type under the quant recipe `recipe` (quant.h names:
 * f32 f16 bf16 q8_0 ... q4_k_m q5_k_m), using llama.cpp's two passes; a row no block of the
 * type fits stays F32. SNUG_ERR_INVALID for an unknown recipe. */
int snug_model_tensor_types(const struct snug_hparams *hp, const char *recipe,
                            snug_tensor_desc_fn fn, void *user, struct snug_err *err);

#endif /* SNUG_MODEL_PRESETS_H */
