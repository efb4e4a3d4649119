/* vision.h — the Qwen3.5/3.6 vision tower on the CPU: an "mmproj" GGUF as llama.cpp's converter
 * writes it (projector qwen3vl_merger), and the encoder from preprocessed patches to the rows
 * that replace an image's pad tokens in the text model (docs/vision.md, steps 2–5).
 * Owns: the mmproj mapping and its tensor views. Invariant: snug_vision_encode allocates nothing
 * (the caller passes snug_vision_work_bytes of work memory); float32 activations; the weights
 * stay in the mapping (products through snug_op_matmul, any computable type), or the whole
 * tower runs on a backend (snug_vision_be_open).
 * Also here: file bytes → rows (encode.c) and the tower's plan items (vision_plan.c).
 * Read next: vision.c, encode.c, vision_backend.c (the products on a backend), docs/vision.md. */
#ifndef SNUG_VISION_H
#define SNUG_VISION_H

#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "snug.h"

#include <stdbool.h>
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
/* The same over an opened GGUF, which it takes over (closed with the tower, or at once on
 * failure): tests/fuzz/fuzz_vision_mmproj.c feeds it from memory. */
int snug_vision_from_gguf(struct snug_vision **out, struct snug_gguf *g, struct snug_err *err);
void snug_vision_free(struct snug_vision *v); /* NULL is a no-op */
const struct snug_vision_hparams *snug_vision_hparams(const struct snug_vision *v);

/* Values per preprocessed patch: 3 channels × 2 frames × patch² pixels. */
int64_t snug_vision_patch_values(const struct snug_vision *v);
/* Host work bytes of snug_vision_encode for one image of n_patches patches with n_threads
 * threads (less while a backend tower is open: snug_vision_be_open). */
size_t snug_vision_work_bytes(const struct snug_vision *v, int64_t n_patches, int n_threads);

/* One image: pixels [grid_h·grid_w][snug_vision_patch_values] in the processor's merge-window-
 * major patch order → out [(grid_h/merge)·(grid_w/merge)][out_dim]. grid_h, grid_w: patch rows
 * and columns, multiples of merge. pool may be NULL (one thread). */
int snug_vision_encode(const struct snug_vision *v, struct snug_pool *pool, const float *pixels,
                       int32_t grid_h, int32_t grid_w, float *out, void *work, size_t work_bytes,
                       struct snug_err *err);

/* The mmproj file (its tensors' data is what a backend uploads). */
const struct snug_gguf *snug_vision_gguf(const struct snug_vision *v);

/* The whole tower on a backend instance of its own over the mmproj (vision_backend.c;
 * `--vision-backend cuda`): weights uploaded once, every activation buffer for images of up to
 * max_patches patches in its work arena. While open, snug_vision_encode runs there (the host
 * keeps only the patch frames, positions and rotary angles); close returns it to the CPU.
 * Bytes it holds on the device: snug_vision_be_bytes. */
struct snug_vision_be;
int snug_vision_be_open(struct snug_vision_be **out, struct snug_vision *v, int backend,
                        int64_t max_patches, struct snug_err *err);
void snug_vision_be_close(
    struct snug_vision_be *vb); /* NULL is a no-op; the tower back on the CPU */
size_t snug_vision_be_bytes(const struct snug_vision_be *vb);
/* Its bytes besides the mmproj's weights, as snug_vision_be_open allocates them (the plan's
 * items; each from the limits the open passes, through backend.h's and kv.h's formulas). */
struct snug_vision_be_sizes {
    uint64_t work;    /* device: the work arena (activations of the largest image) */
    uint64_t scratch; /* device: the CUDA op scratch */
    uint64_t
        step_inputs; /* device: the instance's step inputs (snug_backend_plan_step_input_bytes) */
    uint64_t slot;   /* device: its one slot, an empty cache shape (snug_kv_bytes) */
    uint64_t host_stage; /* host: its embedding staging (snug_backend_plan_stage_bytes) */
};
void snug_vision_be_plan(const struct snug_vision_hparams *hp, int64_t max_patches,
                         struct snug_vision_be_sizes *out);

/* The Qwen3.5/3.6 processor's pixel bounds (preprocessor_config.json of the released models:
 * size.shortest_edge 65,536 and size.longest_edge 16,777,216, in pixels): an image is resized
 * into [min, max] pixels. SNUG_VISION_PIXELS_LIMIT caps --max-image-pixels; an encoded file
 * of more than SNUG_VISION_DECODE_LIMIT pixels is refused before decoding (image.h). */
#define SNUG_VISION_MIN_PIXELS   65536
#define SNUG_VISION_MAX_PIXELS   16777216
#define SNUG_VISION_PIXELS_LIMIT (1LL << 28)
#define SNUG_VISION_DECODE_LIMIT (1LL << 28)
/* The server's default bound on a decoded image before the resize (--max-source-pixels):
 * 2^25 = 33.5 megapixels takes an 8K UHD frame (7680 × 4320) or a 24-megapixel camera photo
 * (6000 × 4000); its source buffer (4 bytes a pixel: a PNG is read as RGBA) is 128 MiB, planned
 * with the resize scratch at boot. Larger sources are a 400 naming the bound. */
#define SNUG_VISION_MAX_SOURCE_PIXELS (1LL << 25)
/* A server sizing its own context (`snug serve` without --ctx) refuses to boot a vision plan
 * whose context holds less than the largest image plus this many tokens of text. */
#define SNUG_VISION_MIN_TEXT_CTX 1024

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

/* The merged grid (rows × cols tokens) of a src_w × src_h image resized into the bounds, and the
 * bytes of resize scratch it takes (may be NULL). SNUG_ERR_INVALID for an aspect ratio > 200. */
int snug_vision_image_size(const struct snug_vision_hparams *hp, int32_t src_w, int32_t src_h,
                           int64_t min_pixels, int64_t max_pixels, int32_t *rows, int32_t *cols,
                           size_t *scratch_bytes, struct snug_err *err);

/* The server's encoder: every buffer for the largest allowed image (decoded source of at most
 * max_source pixels, resized into [min_pixels, max_pixels]) in one counted allocation made at
 * init, sized by snug_vision_plan_make with n_threads (the pool's size at run) and backend (1:
 * the caller opens the tower there, snug_vision_be_open, before the first run). One image at a
 * time: the caller serialises runs (the server's engine thread). */
struct snug_vision_encoder;
int snug_vision_encoder_init(struct snug_vision_encoder **out, const struct snug_vision *v,
                             int64_t min_pixels, int64_t max_pixels, int64_t max_source,
                             int n_threads, int backend, struct snug_err *err);
void snug_vision_encoder_free(struct snug_vision_encoder *e); /* NULL is a no-op */
const struct snug_vision_plan *snug_vision_encoder_plan(const struct snug_vision_encoder *e);
/* Before queueing: a src_w × src_h image (from its header) fits the encoder's buffers;
 * SNUG_ERR_BUDGET naming the limit otherwise; its merged grid. */
int snug_vision_encoder_check(const struct snug_vision_encoder *e, int32_t src_w, int32_t src_h,
                              int32_t *rows, int32_t *cols, struct snug_err *err);
/* Encode one image; out->embd points into the encoder (valid until the next run; do not
 * snug_vision_rows_free it). Allocates nothing. */
int snug_vision_encoder_run(struct snug_vision_encoder *e, struct snug_pool *pool,
                            const uint8_t *bytes, size_t n, struct snug_vision_rows *out,
                            struct snug_err *err);

/* ---- images in a prompt's ids (place.c) ---- */
struct snug_tokenizer;
struct snug_vision_tokens {
    snug_token pad, start, end; /* <|image_pad|>, <|vision_start|>, <|vision_end|> */
};
/* The three ids from the vocabulary; SNUG_ERR_UNSUPPORTED when it lacks them. */
int snug_vision_tokens(const struct snug_tokenizer *tok, struct snug_vision_tokens *out,
                       struct snug_err *err);
/* Runs of pad in ids (each is one image's place). */
int32_t snug_vision_count_places(const snug_token *ids, int32_t n, snug_token pad);
/* An upper bound of the placed length (out's capacity). */
int64_t snug_vision_placed_len(const snug_token *ids, int32_t n, snug_token pad,
                               const struct snug_image_rows *images, int32_t n_images);
/* ids → out (cap ids) with every image's pad run widened to images[k].rows · cols pads (a single
 * pad, or a run already that long); with prepend, a prompt without pads gets the three markers
 * per image in front. Sets images[k].first (in out) and, when old_first is not NULL, the run's
 * position in ids (-1: prepended). SNUG_ERR_INVALID (count or run length mismatch). */
int snug_vision_place(const snug_token *ids, int32_t n, const struct snug_vision_tokens *vt,
                      struct snug_image_rows *images, int32_t n_images, bool prepend,
                      snug_token *out, int64_t cap, int32_t *n_out, int32_t *old_first,
                      struct snug_err *err);

/* ---- planning (vision_plan.c) ---- */
/* snug_vision_work_bytes from hyper-parameters alone (the planner's; same layout): the host
 * work of the CPU tower, or with on_backend what the host keeps for a backend tower. */
size_t snug_vision_work_bytes_hp(const struct snug_vision_hparams *hp, int64_t n_patches,
                                 int n_threads, bool on_backend);
uint64_t snug_vision_weight_bytes(const struct snug_vision *v); /* every mmproj tensor */
/* The bytes of an f16 mmproj of this shape (matrices f16, vectors and positions f32). */
uint64_t snug_vision_f16_bytes(const struct snug_vision_hparams *hp);
/* The released Qwen3.5/3.6 tower's shape ("qwen3.5") projecting to out_dim (the text model's
 * hidden size), and the bytes of its f16 mmproj. */
int snug_vision_preset(const char *name, int32_t out_dim, struct snug_vision_hparams *hp,
                       uint64_t *weight_bytes, struct snug_err *err);
/* The tower's memory for images of at most max_pixels pixels after the resize; with backend 1
 * (`--vision-backend cuda`) the tower runs on the GPU: its weights and activations are device
 * items, the host keeps the mapping, the image buffers and the little work of the host steps. */
struct snug_vision_plan {
    uint64_t weight_bytes; /* the mmproj's tensors (host: the mapping) */
    uint64_t work_bytes;   /* snug_vision_encode's host work for the largest image */
    uint64_t image_bytes;  /* its resized RGB, patches and projector rows */
    int64_t max_patches;   /* patches of the largest image */
    int64_t max_tokens;    /* its context tokens (merged rows) */
    uint64_t source_bytes; /* the decoded source (max_source pixels) and its resize scratch */
    int64_t max_source;    /* --max-source-pixels */
    int backend;           /* 0 the CPU, 1 CUDA (the device items below) */
    uint64_t device_weight_bytes; /* the weights uploaded */
    uint64_t device_work_bytes;   /* activations of the largest image + the op scratch */
    uint64_t device_inputs_bytes; /* the instance's step inputs and its one (empty) slot */
    uint64_t host_stage_bytes;    /* the instance's host embedding staging */
};
int snug_vision_plan_make(const struct snug_vision_hparams *hp, uint64_t weight_bytes,
                          int64_t max_pixels, int64_t max_source, int n_threads, int backend,
                          struct snug_vision_plan *out, struct snug_err *err);
/* Add the items to a plan (host items; with the tower on the GPU its three device items and the
 * instance's host staging too). */
struct snug_plan;
int snug_vision_plan_add(const struct snug_vision_plan *vp, struct snug_plan *p,
                         struct snug_err *err);
uint64_t snug_vision_plan_total(const struct snug_vision_plan *vp);        /* host bytes */
uint64_t snug_vision_plan_device_total(const struct snug_vision_plan *vp); /* GPU bytes */

#endif /* SNUG_VISION_H */
