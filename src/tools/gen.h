/* gen.h — write a random-weight Qwen3.5/3.6 model (architecture qwen35 or qwen35moe) as GGUF:
 * every metadata key of docs/qwen35.md §4.2 and every tensor of §4.3, the MTP block included, with
 * a vocabulary (built-in, or from a GGUF / tokenizer.json, padded with unused tokens to n_vocab).
 *
 * Tensors stream through the GGUF writer one row batch at a time, so a 27B file never sits in
 * memory. Small tensors are drawn element by element and quantized exactly; large ones are built
 * from a pool of quantized blocks picked by a seeded generator (blocks are self-contained, so
 * every block is valid and rows differ), which writes a 27B Q4_K_M file in minutes.
 * Same parameters + same seed -> byte-identical file. Also here: a random-weight vision tower
 * ("mmproj", gen_mmproj.c) for a text model's width. Read next: gen.c, presets in gen.c,
 * gen_mmproj.c.
 */
#ifndef SNUG_TOOLS_GEN_H
#define SNUG_TOOLS_GEN_H

#include "snug.h"

#include <stdbool.h>
#include <stdint.h>

struct snug_vision_hparams;
struct snug_gguf_writer;
struct snug_rng;

/* One tensor's rows streamed into a GGUF writer, out_cap bytes at a time (gen.c; gen_mmproj.c
 * uses it too). Each row comes from make_row, or — pooled (n_chunks > 0, for large tensors) —
 * SNUG_GEN_POOL_ROWS rows are made once into pool and every row is assembled from n_chunks
 * chunks of row_bytes / n_chunks bytes picked at random among the pool's. The rng draws are in
 * that order, so the same seed gives the same bytes. */
#define SNUG_GEN_POOL_ROWS 32
struct snug_gen_rows {
    struct snug_gguf_writer *w;
    const char *path, *name; /* for the error message */
    struct snug_rng *rng;
    uint64_t rows, row_bytes, n_chunks;
    uint8_t *pool, *out; /* [SNUG_GEN_POOL_ROWS][row_bytes], [out_cap] */
    uint64_t out_cap;
    void (*make_row)(void *ctx, struct snug_rng *rng, uint8_t *dst);
    void *ctx;
};
int snug_gen_write_rows(const struct snug_gen_rows *g, struct snug_err *err);

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
    /* Append <|vision_start|>, <|vision_end|>, <|vision_pad|>, <|image_pad|>, <|video_pad|>
     * (CONTROL) to a vocabulary that lacks them, so the model takes image prompts. */
    bool vision_tokens;
    /* Optional progress report (bytes of tensor data written so far, total). */
    void (*progress)(void *user, uint64_t done_bytes, uint64_t total_bytes);
    void *progress_user;
};

/* Write the model (random weights, or p->weights_dir's). On failure the partial file is removed and
 * err says what went wrong. */
int snug_gen_write(const struct snug_gen_config *c, const struct snug_gen_params *p,
                   struct snug_err *err);

/* ---- a random-weight vision tower: an "mmproj" GGUF (gen_mmproj.c) ---------------------------
 * The layout llama.cpp's converter writes for the Qwen3.5/3.6 vision tower (projector
 * qwen3vl_merger) and src/vision/vision.c loads: the same clip.* keys and tensor names, shapes
 * and types (matrices of the chosen type, vectors and the position table f32). The values keep
 * the tower's activations O(1) through any depth (see gen_mmproj.c). */
struct snug_gen_mmproj {
    /* the clip.vision.* key each one becomes */
    uint32_t depth;      /* block_count */
    uint32_t hidden;     /* embedding_length */
    uint32_t ff;         /* feed_forward_length */
    uint32_t heads;      /* attention.head_count */
    uint32_t patch;      /* patch_size */
    uint32_t merge;      /* spatial_merge_size */
    uint32_t image_size; /* image_size: the position table is (image_size / patch_size)² rows */
    uint32_t out_dim;    /* projection_dim: the text model's embedding_length */
    float eps;           /* attention.layer_norm_epsilon */
};

/* The shape of a vision preset ("qwen3.5": the released tower, src/vision/vision_plan.c
 * snug_vision_preset); out_dim is left 0 (from the text model, or --set projection_dim=N). */
int snug_gen_mmproj_preset(struct snug_gen_mmproj *c, const char *name, struct snug_err *err);
/* One "key=value" override; keys are the clip.vision.* suffixes above (e.g. block_count=2). */
int snug_gen_mmproj_set(struct snug_gen_mmproj *c, const char *kv, struct snug_err *err);
/* The text model's embedding_length (its "<arch>.embedding_length" key), for out_dim. */
int snug_gen_mmproj_text_width(const char *text_model, uint32_t *out, struct snug_err *err);
/* Check the shape (vision.c's load rules) and give it as the tower's hyper-parameters. */
int snug_gen_mmproj_hparams(const struct snug_gen_mmproj *c, struct snug_vision_hparams *hp,
                            struct snug_err *err);
/* Write the mmproj: p->out_path, p->type (f16, bf16 or f32: the matrices' type), p->seed,
 * p->name, p->progress are used (p->vocab_from and p->weights_dir must be NULL). */
int snug_gen_mmproj_write(const struct snug_gen_mmproj *c, const struct snug_gen_params *p,
                          struct snug_err *err);

#endif /* SNUG_TOOLS_GEN_H */
