/* image.h — images into the vision tower's input (docs/vision.md step 1): decoding (PNG, JPEG,
 * WebP through Debian's libpng, libjpeg-turbo and libwebp), the Qwen2-VL "smart resize" size
 * rule, Pillow's bicubic resampling reproduced to the byte (so pixels equal the Hugging Face
 * image processor's), and the merge-window-major patch layout with the model's normalisation.
 * Owns: the decoded RGB buffer of a struct snug_image (snug_image_free). Invariant: untrusted
 * bytes never crash the decoder (sizes are bounded before any buffer is sized; a fuzz target
 * runs the decoders), and nothing here prints.
 * Read next: image.c, vision.h. */
#ifndef SNUG_IMAGE_H
#define SNUG_IMAGE_H

#include "snug.h"

#include <stddef.h>
#include <stdint.h>

/* An 8-bit RGB image, rows top to bottom, 3 bytes per pixel. */
struct snug_image {
    int32_t w, h;
    uint8_t *rgb; /* [h][w][3], snug_malloc'd */
};

/* Decode PNG, JPEG or WebP bytes (recognised by their signatures) into RGB (alpha dropped, gray
 * expanded — as Pillow's convert("RGB")). Images of more than max_pixels pixels (or a side over
 * 16384) are refused with SNUG_ERR_BUDGET naming the limit, before any pixel buffer exists. */
int snug_image_decode(const uint8_t *bytes, size_t n, int64_t max_pixels, struct snug_image *out,
                      struct snug_err *err);
void snug_image_free(struct snug_image *im);

/* A caller's pixel buffer for snug_image_decode_into: SNUG_IMAGE_BUF_BYTES_PER_PIXEL bytes per
 * pixel of the largest image it takes (a PNG is read as RGBA, then packed to RGB in place). */
#define SNUG_IMAGE_BUF_BYTES_PER_PIXEL 4
struct snug_image_buf {
    uint8_t *data;
    size_t cap;
};
/* snug_image_decode into buf (NULL: a counted allocation, as snug_image_decode): out->rgb then
 * points into buf->data (do not snug_image_free it); an image larger than buf is SNUG_ERR_NOMEM.
 * The decoders' own state (libpng, libjpeg, libwebp) is theirs. */
int snug_image_decode_into(const uint8_t *bytes, size_t n, int64_t max_pixels,
                           const struct snug_image_buf *buf, struct snug_image *out,
                           struct snug_err *err);
/* The format (by signature) and the size from the header alone, no pixel buffer: what the
 * server checks a request's image with before queueing it. SNUG_ERR_UNSUPPORTED (not PNG, JPEG
 * or WebP) or SNUG_ERR_FORMAT (a broken header), with a message. */
int snug_image_probe(const uint8_t *bytes, size_t n, int32_t *w, int32_t *h, struct snug_err *err);
/* Decode the whole bitstream without keeping the pixels (no pixel buffer: a PNG's rows, a JPEG's
 * scanlines at 1/8 scale and a WebP scaled to one pixel are decoded and dropped): what the server
 * checks after the probe, so a file cut after a valid header (or corrupt past it) is a 400 at
 * validation, not an error when the engine encodes it. SNUG_ERR_FORMAT with a message; a JPEG
 * whose data ends early is refused here (libjpeg itself only warns and pads with gray). */
int snug_image_check(const uint8_t *bytes, size_t n, struct snug_err *err);

/* The Qwen2-VL size rule (transformers' smart_resize): both sides multiples of factor, the
 * pixel count within [min_pixels, max_pixels], the aspect ratio kept as closely as possible;
 * SNUG_ERR_INVALID for an aspect ratio above 200. */
int snug_image_smart_size(int32_t h, int32_t w, int32_t factor, int64_t min_pixels,
                          int64_t max_pixels, int32_t *out_h, int32_t *out_w, struct snug_err *err);

/* Bytes of scratch snug_image_resize needs for src → dst sizes. */
size_t snug_image_resize_scratch(int32_t src_w, int32_t src_h, int32_t dst_w, int32_t dst_h);
/* Pillow's bicubic resize (a = -0.5, support 2 scaled by the reduction, coefficients in 22-bit
 * fixed point, horizontal pass then vertical, each rounded to 8 bits). dst->rgb must hold
 * dst->w · dst->h · 3 bytes. */
void snug_image_resize(const struct snug_image *src, struct snug_image *dst, void *scratch);

/* Rescale by 1/255, normalise ((v − mean) / std per channel), repeat the image to 2 frames and
 * lay out patches of patch × patch pixels in merge × merge windows (window-major, row-major
 * inside): out [ (h/patch)·(w/patch) ][3][2][patch][patch]. h, w multiples of patch·merge. */
void snug_image_patches(const struct snug_image *im, const float mean[3], const float std[3],
                        int32_t patch, int32_t merge, float *out);

#endif /* SNUG_IMAGE_H */
