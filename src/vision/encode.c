/* encode.c — one image from its file bytes to the rows the text model takes in place of its pad
 * tokens: decode (image.c), smart resize to the pixel bounds, Pillow's bicubic, patches,
 * the tower (vision.c). The path the CLI (`snug run/logits --image`) and the server share.
 * Invariant: every buffer is a counted allocation freed before return except the output rows
 * (snug_vision_rows_free); nothing prints.
 * Read next: vision.h, image.h, src/model/context.c (snug_ctx_eval_images). */
#include "vision/image.h"
#include "vision/vision.h"

#include "core/core.h"

#include <string.h>

void snug_vision_rows_free(struct snug_vision_rows *r) {
    if (!r) return;
    snug_free(r->embd);
    memset(r, 0, sizeof *r);
}

int snug_vision_encode_bytes(const struct snug_vision *v, struct snug_pool *pool,
                             const uint8_t *bytes, size_t n, int64_t min_pixels, int64_t max_pixels,
                             struct snug_vision_rows *out, struct snug_err *err) {
    const struct snug_vision_hparams *hp = snug_vision_hparams(v);
    memset(out, 0, sizeof *out);
    if (min_pixels < 1 || max_pixels < min_pixels || max_pixels > SNUG_VISION_PIXELS_LIMIT)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "image pixel bounds %lld..%lld: expected 1 <= min <= max <= %lld",
                            (long long)min_pixels, (long long)max_pixels,
                            (long long)SNUG_VISION_PIXELS_LIMIT);
    struct snug_image im = {0}, rs = {0};
    float *px = NULL;
    void *scratch = NULL, *work = NULL;
    int32_t h, w;
    int rc = snug_image_decode(bytes, n, SNUG_VISION_DECODE_LIMIT, &im, err);
    if (rc) return rc;
    rc = snug_image_smart_size(im.h, im.w, hp->patch * hp->merge, min_pixels, max_pixels, &h, &w,
                               err);
    if (rc) goto done;
    int64_t gh = h / hp->patch, gw = w / hp->patch, np = gh * gw;
    int64_t rows = np / ((int64_t)hp->merge * hp->merge);
    size_t wb = snug_vision_work_bytes(v, np, pool ? snug_pool_size(pool) : 1);
    rs.w = w, rs.h = h;
    rs.rgb = snug_malloc((size_t)w * (size_t)h * 3);
    scratch = snug_malloc(snug_image_resize_scratch(im.w, im.h, w, h));
    px = snug_malloc((size_t)(np * snug_vision_patch_values(v)) * sizeof(float));
    work = snug_malloc(wb);
    out->embd = snug_malloc((size_t)(rows * hp->out_dim) * sizeof(float));
    if (!rs.rgb || !scratch || !px || !work || !out->embd) {
        rc = snug_err_set(err, SNUG_ERR_NOMEM,
                          "image %d x %d: out of memory for its %lld patches (%zu bytes of "
                          "encoder work)",
                          w, h, (long long)np, wb);
        goto done;
    }
    snug_image_resize(&im, &rs, scratch);
    snug_image_patches(&rs, hp->mean, hp->std, hp->patch, hp->merge, px);
    rc = snug_vision_encode(v, pool, px, (int32_t)gh, (int32_t)gw, out->embd, work, wb, err);
    if (rc) goto done;
    out->rows = (int32_t)(gh / hp->merge);
    out->cols = (int32_t)(gw / hp->merge);
    out->src_w = im.w, out->src_h = im.h;
done:
    if (rc) snug_vision_rows_free(out);
    snug_free(px);
    snug_free(work);
    snug_free(scratch);
    snug_image_free(&im);
    snug_image_free(&rs);
    return rc;
}
