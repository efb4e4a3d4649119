/* vision.h — the Qwen3.5/3.6 vision tower on the CPU: an "mmproj" GGUF as llama.cpp's converter
 * writes it (projector qwen3vl_merger), and the encoder from preprocessed patches to the rows
 * that replace an image's pad tokens in the text model (docs/vision.md, steps 2–5).
 * Owns: the mmproj mapping and its tensor views. Invariant: snug_vision_encode allocates nothing
 * (the caller passes snug_vision_work_bytes of work memory); float32 everywhere; the weights
 * stay in the mapping (products through snug_op_matmul, any computable type).
 * Also here: file bytes → rows (encode.c) and the tower's plan items (vision_plan.c).
 * Read next: vision.c, encode.c, docs/vision.md. Not yet: CUDA, the server (issue 23). */
#ifndef SNUG_VISION_H
#define SNUG_VISION_H

#include "core/threadpool.h"
#include "snug.h"

#include <stddef.h>
#include <stdint.h>

#define SNUG_VISION_MAX_BLOCKS 64

struct snug_vision;

/* Hyper-parameters read from the mmproj's clip.vision.* keys. */
struct snug_vision_hparams {
    int32_t patch;    /* patch side in pixels (16) */
    int32_t merge;    /* spatial merge (2): merge² patches per output row */
    int32_t hidden;   /* ViT width */
    int32_t heads;    /* attention heads */
    int32_t ff;       /* MLP width */
    int32_t depth;    /* blocks */
    int32_t out_dim;  /* projector output = the text model's hidden size */
    int32_t pos_side; /* the learned position table is pos_side × pos_side */
    float eps;        /* LayerNorm epsilon */
    float rope_theta; /* 2-D rotary base (10000: not in the GGUF) */
    float mean[3], std[3];
};

/* Open and validate an mmproj GGUF (clip, projector qwen3vl_merger). */
int snug_vision_load(struct snug_vision **out, const char *path, struct snug_err *err);
void snug_vision_free(struct snug_vision *v); /* NULL is a no-op */
const struct snug_vision_hparams *snug_vision_hparams(const struct snug_vision *v);

/* Values per preprocessed patch: 3 channels × 2 frames × patch² pixels. */
int64_t snug_vision_patch_values(const struct snug_vision *v);
/* Work bytes of snug_vision_encode for one image of n_patches patches with n_threads threads. */
size_t snug_vision_work_bytes(const struct snug_vision *v, int64_t n_patches, int n_threads);

/* One image: pixels [grid_h·grid_w][snug_vision_patch_values] in the processor's merge-window-
 * major patch order → out [(grid_h/merge)·(grid_w/merge)][out_dim]. grid_h, grid_w: patch rows
 * and columns, multiples of merge. pool may be NULL (one thread). */
int snug_vision_encode(const struct snug_vision *v, struct snug_pool *pool, const float *pixels,
                       int32_t grid_h, int32_t grid_w, float *out, void *work, size_t work_bytes,
                       struct snug_err *err);

/* The Qwen3.5/3.6 processor's pixel bounds (preprocessor_config.json of the released models:
 * size.shortest_edge 65,536 and size.longest_edge 16,777,216, in pixels): an image is resized
 * into [min, max] pixels. SNUG_VISION_PIXELS_LIMIT caps --max-image-pixels; an encoded file
 * of more than SNUG_VISION_DECODE_LIMIT pixels is refused before decoding (image.h). */
#define SNUG_VISION_MIN_PIXELS   65536
#define SNUG_VISION_MAX_PIXELS   16777216
#define SNUG_VISION_PIXELS_LIMIT (1LL << 28)
#define SNUG_VISION_DECODE_LIMIT (1LL << 28)

/* An encoded image (encode.c): rows × cols merged grid, its rows [rows·cols][out_dim]. */
struct snug_vision_rows {
    int32_t rows, cols;
    int32_t src_w, src_h; /* the decoded image's size */
    float *embd;          /* snug_malloc'd; snug_vision_rows_free */
};
/* Decode PNG/JPEG/WebP bytes, resize into [min_pixels, max_pixels] by the smart-resize rule,
 * cut into patches and run the tower (pool may be NULL). */
int snug_vision_encode_bytes(const struct snug_vision *v, struct snug_pool *pool,
                             const uint8_t *bytes, size_t n, int64_t min_pixels, int64_t max_pixels,
                             struct snug_vision_rows *out, struct snug_err *err);
void snug_vision_rows_free(struct snug_vision_rows *r); /* NULL is a no-op */

/* ---- planning (vision_plan.c) ---- */
/* snug_vision_work_bytes from hyper-parameters alone (the planner's; same layout). */
size_t snug_vision_work_bytes_hp(const struct snug_vision_hparams *hp, int64_t n_patches,
                                 int n_threads);
uint64_t snug_vision_weight_bytes(const struct snug_vision *v); /* every mmproj tensor */
/* The bytes of an f16 mmproj of this shape (matrices f16, vectors and positions f32). */
uint64_t snug_vision_f16_bytes(const struct snug_vision_hparams *hp);
/* The released Qwen3.5/3.6 tower's shape ("qwen3.5") projecting to out_dim (the text model's
 * hidden size), and the bytes of its f16 mmproj. */
int snug_vision_preset(const char *name, int32_t out_dim, struct snug_vision_hparams *hp,
                       uint64_t *weight_bytes, struct snug_err *err);
/* The tower's memory for images of at most max_pixels pixels after the resize. */
struct snug_vision_plan {
    uint64_t weight_bytes; /* the mmproj's tensors */
    uint64_t work_bytes;   /* snug_vision_encode's work for the largest image */
    uint64_t image_bytes;  /* its resized RGB, patches and projector rows */
    int64_t max_patches;   /* patches of the largest image */
    int64_t max_tokens;    /* its context tokens (merged rows) */
};
int snug_vision_plan_make(const struct snug_vision_hparams *hp, uint64_t weight_bytes,
                          int64_t max_pixels, int n_threads, struct snug_vision_plan *out,
                          struct snug_err *err);
/* Add the three items to a plan (host memory: the tower runs on the CPU). */
struct snug_plan;
int snug_vision_plan_add(const struct snug_vision_plan *vp, struct snug_plan *p,
                         struct snug_err *err);
uint64_t snug_vision_plan_total(const struct snug_vision_plan *vp);

#endif /* SNUG_VISION_H */
