/* vision_plan.c — the vision tower's share of the memory plan (docs/vision.md, docs/memory.md):
 * its weights, the encoder's work for the largest image the pixel bound allows, and that image's
 * buffers (resized RGB, patches, projector rows), the decoded source image with its resize
 * scratch (bounded by --max-source-pixels); the shape of the released Qwen3.5/3.6 tower as
 * a preset, for planning without a file. The host items are there whatever the backend; with
 * the tower on the GPU (vision_backend.c) its uploaded weights, activations, step inputs and
 * empty slot are device items besides, and the instance's embedding staging a host item.
 * Invariant: the work bytes are snug_vision_work_bytes' own layout (vision.c), so the plan is
 * what encoding the largest image allocates. Read next: vision.h, src/plan/plan.h. */
#include "vision/image.h"
#include "vision/vision.h"

#include "core/core.h"
#include "plan/plan.h"

#include <string.h>

uint64_t snug_vision_f16_bytes(const struct snug_vision_hparams *hp) {
    /* an f16 mmproj as llama.cpp's converter writes it: matrices f16, vectors and the
     * position table f32 (the layout vision.c checks at load) */
    uint64_t D = (uint64_t)hp->hidden, F = (uint64_t)hp->ff, P = (uint64_t)hp->patch;
    uint64_t M4 = (uint64_t)hp->merge * hp->merge * D, O = (uint64_t)hp->out_dim;
    uint64_t L = (uint64_t)hp->depth, S = (uint64_t)hp->pos_side;
    uint64_t f16 = 2 * (2 * P * P * 3 * D                         /* patch kernel, two frames */
                        + L * (D * 3 * D + D * D + D * F + F * D) /* qkv, out, fc1, fc2 */
                        + M4 * M4 + M4 * O);                      /* merger */
    uint64_t f32 = 4 * (D + S * S * D                             /* patch bias, position table */
                        + L * (9 * D + F)  /* norms and biases of the blocks */
                        + 2 * D + M4 + O); /* merger norm and biases */
    return f16 + f32;
}

int snug_vision_preset(const char *name, int32_t out_dim, struct snug_vision_hparams *hp,
                       uint64_t *weight_bytes, struct snug_err *err) {
    if (!name || strcmp(name, "qwen3.5"))
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "vision preset '%s': expected qwen3.5 (the Qwen3.5/3.6 tower)",
                            name ? name : "(null)");
    if (out_dim <= 0)
        return snug_err_set(err, SNUG_ERR_INVALID, "vision preset: text hidden size %d", out_dim);
    /* transformers 5.17 Qwen3_5VisionConfig defaults (models/qwen3_5/configuration_qwen3_5.py):
     * depth 27, hidden 1152, intermediate 4304, 16 heads, patch 16, merge 2, 2304 = 48²
     * position rows; out_hidden_size is the text model's hidden size. */
    *hp = (struct snug_vision_hparams){.patch = 16,
                                       .merge = 2,
                                       .hidden = 1152,
                                       .heads = 16,
                                       .ff = 4304,
                                       .depth = 27,
                                       .out_dim = out_dim,
                                       .pos_side = 48,
                                       .eps = 1e-6f,
                                       .rope_theta = 10000.0f,
                                       .mean = {0.5f, 0.5f, 0.5f},
                                       .std = {0.5f, 0.5f, 0.5f}};
    *weight_bytes = snug_vision_f16_bytes(hp);
    return SNUG_OK;
}

/* Resize scratch (image.c snug_image_resize_scratch) for any source of at most max_source pixels
 * (sides <= 16384, aspect ratio <= 200) resized into at most max_pixels: the horizontal pass
 * (destination width × source height: the smart resize scales both sides by one factor, then
 * rounds each to a multiple of 32, so it stays within the source or destination area plus one
 * rounding strip of 64 × 16384) and the coefficient tables (taps ≤ 4·in/out + 7 per output
 * pixel). The server refuses, with a 400, an image whose exact scratch would exceed this. */
static uint64_t resize_scratch_bound(int64_t max_source, int64_t max_pixels) {
    uint64_t side = 16384, dst_side = (uint64_t)max_pixels / 32 + 64;
    uint64_t pass = 3 * ((uint64_t)max_source + 2 * (uint64_t)max_pixels + 64 * side);
    uint64_t coef = 16 * 2 * side + 36 * 2 * dst_side + (4 * side + 8) * 8;
    return pass + coef + 128;
}

/* The tower's backend instance has a cuBLAS handle of its own: its 32 MiB workspace (cuBLAS
 * docs, "cublasSetWorkspace": the default on Hopper) plus handle and kernels, estimated at
 * 64 MiB as src/plan/plan.c estimates the text model's. */
#define VISION_CUBLAS_BYTES (64ull << 20)

int snug_vision_plan_make(const struct snug_vision_hparams *hp, uint64_t weight_bytes,
                          int64_t max_pixels, int64_t max_source, int n_threads, int backend,
                          struct snug_vision_plan *out, struct snug_err *err) {
    memset(out, 0, sizeof *out);
    if (max_source < 1 || max_source > SNUG_VISION_DECODE_LIMIT)
        return snug_err_set(err, SNUG_ERR_INVALID, "--max-source-pixels %lld: expected 1..%lld",
                            (long long)max_source, (long long)SNUG_VISION_DECODE_LIMIT);
    int64_t factor = (int64_t)hp->patch * hp->merge;
    if (max_pixels < factor * factor || max_pixels > SNUG_VISION_PIXELS_LIMIT)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "--max-image-pixels %lld: expected %lld..%lld (one %lld x %lld merge "
                            "window at least)",
                            (long long)max_pixels, (long long)(factor * factor),
                            (long long)SNUG_VISION_PIXELS_LIMIT, (long long)factor,
                            (long long)factor);
    /* the smart resize keeps h·w <= max_pixels with both sides multiples of factor, so at most
     * floor(max_pixels / factor²) merge windows */
    int64_t windows = max_pixels / (factor * factor);
    int64_t M2 = (int64_t)hp->merge * hp->merge;
    out->weight_bytes = weight_bytes;
    out->max_tokens = windows;
    out->max_patches = windows * M2;
    out->work_bytes = snug_vision_work_bytes_hp(hp, out->max_patches, n_threads, backend != 0);
    out->backend = backend;
    if (backend) { /* vision_backend.c: the weights uploaded, its work arena and op scratch,
                    * its step inputs and empty slot; on the host the instance's staging */
        struct snug_vision_be_sizes be;
        snug_vision_be_plan(hp, out->max_patches, &be);
        out->device_weight_bytes = weight_bytes;
        out->device_work_bytes = be.work + be.scratch + VISION_CUBLAS_BYTES;
        out->device_inputs_bytes = be.step_inputs + be.slot;
        out->host_stage_bytes = be.host_stage;
    }
    int64_t pv = 3 * 2 * (int64_t)hp->patch * hp->patch;
    int64_t px = windows * factor * factor;
    out->image_bytes = (uint64_t)px * 3                         /* resized RGB */
                       + (uint64_t)(out->max_patches * pv) * 4  /* patches */
                       + (uint64_t)(windows * hp->out_dim) * 4; /* projector rows */
    out->max_source = max_source;
    out->source_bytes = (((uint64_t)max_source * SNUG_IMAGE_BUF_BYTES_PER_PIXEL + 63) & ~63ull) +
                        resize_scratch_bound(max_source, max_pixels);
    return SNUG_OK;
}

int snug_vision_plan_add(const struct snug_vision_plan *vp, struct snug_plan *p,
                         struct snug_err *err) {
    int rc =
        snug_plan_add_item(p, "vision weights (mmproj)", vp->weight_bytes, SNUG_DEVICE_HOST, err);
    if (!rc)
        rc = snug_plan_add_item(p, "vision encoder work (largest image)", vp->work_bytes,
                                SNUG_DEVICE_HOST, err);
    if (!rc)
        rc = snug_plan_add_item(p, "vision image buffers (largest)", vp->image_bytes,
                                SNUG_DEVICE_HOST, err);
    if (!rc)
        rc = snug_plan_add_item(p, "vision source (decode+resize)", vp->source_bytes,
                                SNUG_DEVICE_HOST, err);
    if (!rc && vp->backend)
        rc = snug_plan_add_item(p, "vision weights (gpu)", vp->device_weight_bytes, SNUG_DEVICE_GPU,
                                err);
    if (!rc && vp->backend)
        rc = snug_plan_add_item(p, "vision activations + scratch (gpu)", vp->device_work_bytes,
                                SNUG_DEVICE_GPU, err);
    if (!rc && vp->backend)
        rc = snug_plan_add_item(p, "vision step inputs + slot (gpu)", vp->device_inputs_bytes,
                                SNUG_DEVICE_GPU, err);
    if (!rc && vp->backend)
        rc = snug_plan_add_item(p, "vision cuda staging (host)", vp->host_stage_bytes,
                                SNUG_DEVICE_HOST, err);
    return rc;
}

uint64_t snug_vision_plan_total(const struct snug_vision_plan *vp) {
    return vp->weight_bytes + vp->work_bytes + vp->image_bytes + vp->source_bytes +
           vp->host_stage_bytes;
}

uint64_t snug_vision_plan_device_total(const struct snug_vision_plan *vp) {
    return vp->device_weight_bytes + vp->device_work_bytes + vp->device_inputs_bytes;
}
