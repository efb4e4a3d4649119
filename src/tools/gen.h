/* gen.h — write a random-weight Qwen3.5/3.6 model (architecture qwen35 or qwen35moe) as GGUF:
 * every metadata key of docs/qwen35.md §4.2 and every tensor of §4.3, the MTP block included, with
 * a vocabulary (built-in, or from a GGUF / tokenizer.json, padded with unused tokens to n_vocab).
 *
 * Tensors stream through the GGUF writer one row batch at a time, so a 27B file never sits in
 * memory. Small tensors are drawn element by element and quantized exactly; large ones are built
 * from a pool of quantized blocks picked by a seeded generator (blocks are self-contained, so
 * every block is valid and rows differ), which writes a 27B Q4_K_M file in minutes.
 * Same parameters + same seed -> byte-identical file. Read next: gen.c, presets in gen.c.
 */
#ifndef SNUG_TOOLS_GEN_H
#define SNUG_TOOLS_GEN_H

#include "snug.h"

#include <stdint.h>

/* Hyper-parameters of the generated model (the GGUF key each one becomes in brackets). */
struct snug_gen_config {
    char arch[16];               /* "qwen35" or "qwen35moe" (general.architecture) */
    uint32_t n_vocab;            /* rows of token_embd/output; 0 = the vocabulary's size */
    uint32_t n_layer;            /* trunk layers (block_count = n_layer + nextn_predict_layers) */
    uint32_t n_nextn;            /* MTP blocks (nextn_predict_layers) */
    uint64_t n_ctx_train;        /* context_length */
    uint32_t n_embd;             /* embedding_length */
    uint32_t n_ff;               /* feed_forward_length (dense) */
    uint32_t n_head;             /* attention.head_count */
    uint32_t n_head_kv;          /* attention.head_count_kv */
    uint32_t head_dim;           /* attention.key_length = value_length */
    uint32_t n_rot;              /* rope.dimension_count */
    float rope_base;             /* rope.freq_base */
    float rms_eps;               /* attention.layer_norm_rms_epsilon */
    uint32_t conv_kernel;        /* ssm.conv_kernel */
    uint32_t ssm_d_state;        /* ssm.state_size (dk = dv) */
    uint32_t ssm_n_group;        /* ssm.group_count (Nk) */
    uint32_t ssm_dt_rank;        /* ssm.time_step_rank (Nv); inner_size = Nv * state_size */
    uint32_t full_attn_interval; /* full_attention_interval */
    uint32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp; /* MoE only */
};

/* Fill c from a preset: "demo" (tiny, like the trained fixture, built-in vocabulary),
 * "demo-moe" (the MoE fixture's shape), "qwen3.6-27b", "qwen3.6-35b-a3b" (docs/qwen35.md §1.1 /
 * §1.2). SNUG_ERR_INVALID for an unknown name (the message lists the presets). */
int snug_gen_preset(struct snug_gen_config *c, const char *name, struct snug_err *err);

/* Apply one "key=value" override. Keys: arch, n_vocab, n_layer, and the GGUF key suffixes
 * listed in struct snug_gen_config (e.g. embedding_length=512, attention.head_count=8). */
int snug_gen_set(struct snug_gen_config *c, const char *kv, struct snug_err *err);

/* Check the shapes are consistent (the model loader's rules). */
int snug_gen_validate(const struct snug_gen_config *c, struct snug_err *err);

struct snug_gen_params {
    const char *out_path;   /* the GGUF to write */
    const char *type;       /* recipe name: f32 f16 bf16 q8_0 q4_0 ... q4_k_m (quant.h) */
    uint64_t seed;          /* weights depend only on (seed, tensor name, shape, type) */
    const char *vocab_from; /* NULL: built-in byte vocabulary; else a .gguf or tokenizer.json */
    const char *name;       /* general.name; NULL = "snug random" */
    /* NULL: random weights. Else a folder holding one "<tensor name>.f32" file per tensor
     * (raw little-endian float32 in GGUF layout: ne[0] fastest, i.e. a weight of ne =
     * {n_in, n_out} is n_out rows of n_in), e.g. written by tools/train/train.py; each is
     * encoded as the recipe types it. */
    const char *weights_dir;
    /* Optional progress report (bytes of tensor data written so far, total). */
    void (*progress)(void *user, uint64_t done_bytes, uint64_t total_bytes);
    void *progress_user;
};

/* Write the model (random weights, or p->weights_dir's). On failure the partial file is removed and
 * err says what went wrong. */
int snug_gen_write(const struct snug_gen_config *c, const struct snug_gen_params *p,
                   struct snug_err *err);

#endif /* SNUG_TOOLS_GEN_H */
