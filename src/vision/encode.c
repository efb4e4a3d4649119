/* encode.c — one image from its file bytes to the rows the text model takes in place of its pad
 * tokens: decode (image.c), smart resize to the pixel bounds, Pillow's bicubic, patches,
 * the tower (vision.c). The path the CLI (`snug run/logits --image`) and the server share:
 * the CLI with counted allocations per image (snug_vision_encode_bytes), the server through an
 * encoder (struct snug_vision_encoder) whose buffers for the largest allowed image are one
 * allocation made at boot, sized by the plan (snug_vision_plan_make: the source, its resize
 * scratch, the resized RGB, the patches, the tower's work and the projector rows).
 * Invariant: snug_vision_encode_bytes frees everything but the output rows before returning;
 * snug_vision_encoder_run allocates nothing (its rows live in the encoder until the next run);
 * nothing prints. Read next: vision.h, image.h, src/model/context.c (snug_ctx_eval_images). */
#include "vision/image.h"
#include "vision/vision.h"

#include "core/core.h"

#include <string.h>

void snug_vision_rows_free(struct snug_vision_rows *r) {
    if (!r) return;
    snug_free(r->embd);
    memset(r, 0, sizeof *r);
}

/* The buffers of one encode: given (an encoder's) or allocated per image (NULL fields). */
struct enc_bufs {
    struct snug_image_buf src; /* decoded source (RGBA-sized) */
    uint8_t *rgb;              /* resized RGB */
    void *scratch;             /* resize scratch */
    size_t scratch_cap;
    float *px, *rows;
    void *work;
    size_t work_cap;
};

int snug_vision_image_size(const struct snug_vision_hparams *hp, int32_t src_w, int32_t src_h,
                           int64_t min_pixels, int64_t max_pixels, int32_t *rows, int32_t *cols,
                           size_t *scratch_bytes, struct snug_err *err) {
    int32_t h, w;
    int rc = snug_image_smart_size(src_h, src_w, hp->patch * hp->merge, min_pixels, max_pixels, &h,
                                   &w, err);
    if (rc) return rc;
    *rows = h / (hp->patch * hp->merge);
    *cols = w / (hp->patch * hp->merge);
    if (scratch_bytes) *scratch_bytes = snug_image_resize_scratch(src_w, src_h, w, h);
    return SNUG_OK;
}

static int encode_core(const struct snug_vision *v, struct snug_pool *pool, const uint8_t *bytes,
                       size_t n, int64_t min_pixels, int64_t max_pixels, int64_t max_source,
                       const struct enc_bufs *given, struct snug_vision_rows *out,
                       struct snug_err *err) {
    const struct snug_vision_hparams *hp = snug_vision_hparams(v);
    memset(out, 0, sizeof *out);
    if (min_pixels < 1 || max_pixels < min_pixels || max_pixels > SNUG_VISION_PIXELS_LIMIT)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "image pixel bounds %lld..%lld: expected 1 <= min <= max <= %lld",
                            (long long)min_pixels, (long long)max_pixels,
                            (long long)SNUG_VISION_PIXELS_LIMIT);
    struct snug_image im = {0}, rs = {0};
    struct enc_bufs b = given ? *given : (struct enc_bufs){0};
    int32_t h, w;
    int rc = snug_image_decode_into(bytes, n, max_source, given ? &b.src : NULL, &im, err);
    if (rc) return rc;
    rc = snug_image_smart_size(im.h, im.w, hp->patch * hp->merge, min_pixels, max_pixels, &h, &w,
                               err);
    if (rc) goto done;
    int64_t gh = h / hp->patch, gw = w / hp->patch, np = gh * gw;
    int64_t rows = np / ((int64_t)hp->merge * hp->merge);
    size_t wb = snug_vision_work_bytes(v, np, pool ? snug_pool_size(pool) : 1);
    size_t sb = snug_image_resize_scratch(im.w, im.h, w, h);
    rs.w = w, rs.h = h;
    if (given) {
        if (wb > b.work_cap || sb > b.scratch_cap ||
            (int64_t)w * h > max_pixels) { /* (the request's checks make this unreachable) */
            rc = snug_err_set(err, SNUG_ERR_BUDGET,
                              "image %d x %d: %zu bytes of encoder work and %zu of resize "
                              "scratch exceed the planned %zu and %zu",
                              im.w, im.h, wb, sb, b.work_cap, b.scratch_cap);
            goto done;
        }
        rs.rgb = b.rgb;
        out->embd = b.rows;
    } else {
        rs.rgb = snug_malloc((size_t)w * (size_t)h * 3);
        b.scratch = snug_malloc(sb);
        b.px = snug_malloc((size_t)(np * snug_vision_patch_values(v)) * sizeof(float));
        b.work = snug_malloc(wb);
        out->embd = snug_malloc((size_t)(rows * hp->out_dim) * sizeof(float));
        if (!rs.rgb || !b.scratch || !b.px || !b.work || !out->embd) {
            rc = snug_err_set(err, SNUG_ERR_NOMEM,
                              "image %d x %d: out of memory for its %lld patches (%zu bytes of "
                              "encoder work)",
                              w, h, (long long)np, wb);
            goto done;
        }
    }
    snug_image_resize(&im, &rs, b.scratch);
    snug_image_patches(&rs, hp->mean, hp->std, hp->patch, hp->merge, b.px);
    rc = snug_vision_encode(v, pool, b.px, (int32_t)gh, (int32_t)gw, out->embd, b.work, wb, err);
    if (rc) goto done;
    out->rows = (int32_t)(gh / hp->merge);
    out->cols = (int32_t)(gw / hp->merge);
    out->src_w = im.w, out->src_h = im.h;
done:
    if (!given) {
        if (rc) snug_vision_rows_free(out);
        snug_free(b.px);
        snug_free(b.work);
        snug_free(b.scratch);
        snug_image_free(&im);
        snug_image_free(&rs);
    } else if (rc) {
        memset(out, 0, sizeof *out);
    }
    return rc;
}

int snug_vision_encode_bytes(const struct snug_vision *v, struct snug_pool *pool,
                             const uint8_t *bytes, size_t n, int64_t min_pixels, int64_t max_pixels,
                             struct snug_vision_rows *out, struct snug_err *err) {
    return encode_core(v, pool, bytes, n, min_pixels, max_pixels, SNUG_VISION_DECODE_LIMIT, NULL,
                       out, err);
}

/* ---- the server's encoder: one block for the largest allowed image ------------------------ */
struct snug_vision_encoder {
    const struct snug_vision *v;
    int64_t min_pixels, max_pixels, max_source;
    int n_threads; /* the work was planned for pools of at most this many threads */
    struct snug_vision_plan plan;
    struct enc_bufs b;
    uint8_t *block;
};

static size_t al64(uint64_t n) {
    return (size_t)((n + 63) & ~(uint64_t)63);
}

int snug_vision_encoder_init(struct snug_vision_encoder **out, const struct snug_vision *v,
                             int64_t min_pixels, int64_t max_pixels, int64_t max_source,
                             int n_threads, int backend, struct snug_err *err) {
    *out = NULL;
    if (min_pixels < 1 || min_pixels > max_pixels)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "--min-image-pixels %lld: expected 1..--max-image-pixels (%lld)",
                            (long long)min_pixels, (long long)max_pixels);
    struct snug_vision_encoder *e = snug_calloc(1, sizeof *e);
    if (!e) return snug_err_set(err, SNUG_ERR_NOMEM, "vision encoder: out of memory");
    const struct snug_vision_hparams *hp = snug_vision_hparams(v);
    int rc = snug_vision_plan_make(hp, snug_vision_weight_bytes(v), max_pixels, max_source,
                                   n_threads, backend, &e->plan, err);
    if (rc) {
        snug_free(e);
        return rc;
    }
    e->v = v, e->min_pixels = min_pixels, e->max_pixels = max_pixels, e->max_source = max_source;
    e->n_threads = n_threads < 1 ? 1 : n_threads;
    /* the plan's items, carved from one block in its order (vision_plan.c) */
    const struct snug_vision_plan *p = &e->plan;
    size_t src = al64((uint64_t)max_source * SNUG_IMAGE_BUF_BYTES_PER_PIXEL);
    size_t scratch = al64(p->source_bytes) - src;
    size_t rgb = al64((uint64_t)p->max_tokens * hp->patch * hp->merge * hp->patch * hp->merge * 3);
    size_t px = al64((uint64_t)p->max_patches * 6 * hp->patch * hp->patch * sizeof(float));
    size_t rows = al64((uint64_t)p->max_tokens * hp->out_dim * sizeof(float));
    size_t work = al64(p->work_bytes);
    e->block = snug_malloc(src + scratch + rgb + px + rows + work);
    if (!e->block) {
        snug_free(e);
        return snug_err_set(err, SNUG_ERR_NOMEM,
                            "vision encoder: out of memory for its %.2f GiB (the largest image's "
                            "buffers: lower --max-image-pixels or --max-source-pixels)",
                            (double)(src + scratch + rgb + px + rows + work) / 1073741824.0);
    }
    uint8_t *q = e->block;
    e->b.src = (struct snug_image_buf){q, src}, q += src;
    e->b.scratch = q, e->b.scratch_cap = scratch, q += scratch;
    e->b.rgb = q, q += rgb;
    e->b.px = (float *)q, q += px;
    e->b.rows = (float *)q, q += rows;
    e->b.work = q, e->b.work_cap = work;
    *out = e;
    return SNUG_OK;
}

void snug_vision_encoder_free(struct snug_vision_encoder *e) {
    if (!e) return;
    snug_free(e->block);
    snug_free(e);
}

const struct snug_vision_plan *snug_vision_encoder_plan(const struct snug_vision_encoder *e) {
    return &e->plan;
}

int snug_vision_encoder_check(const struct snug_vision_encoder *e, int32_t src_w, int32_t src_h,
                              int32_t *rows, int32_t *cols, struct snug_err *err) {
    if ((int64_t)src_w * src_h > e->max_source)
        return snug_err_set(err, SNUG_ERR_BUDGET,
                            "the image has %d x %d = %lld pixels, over this server's "
                            "--max-source-pixels %lld (the decoded image's bound; it is resized "
                            "to at most --max-image-pixels %lld afterwards)",
                            src_w, src_h, (long long)src_w * src_h, (long long)e->max_source,
                            (long long)e->max_pixels);
    size_t scratch = 0;
    int rc = snug_vision_image_size(snug_vision_hparams(e->v), src_w, src_h, e->min_pixels,
                                    e->max_pixels, rows, cols, &scratch, err);
    if (rc) return rc;
    if (scratch > e->b.scratch_cap)
        return snug_err_set(err, SNUG_ERR_BUDGET,
                            "the image of %d x %d pixels needs %zu bytes of resize scratch, over "
                            "the %zu this server planned for --max-source-pixels %lld",
                            src_w, src_h, scratch, e->b.scratch_cap, (long long)e->max_source);
    return SNUG_OK;
}

int snug_vision_encoder_run(struct snug_vision_encoder *e, struct snug_pool *pool,
                            const uint8_t *bytes, size_t n, struct snug_vision_rows *out,
                            struct snug_err *err) {
    if (pool && snug_pool_size(pool) > e->n_threads) pool = NULL; /* (a larger pool than planned) */
    return encode_core(e->v, pool, bytes, n, e->min_pixels, e->max_pixels, e->max_source, &e->b,
                       out, err);
}
