/* image.c — decoding, the size rule, Pillow-exact bicubic resampling and the patch layout of
 * image.h. Pillow's resampling (src/libImaging/Resample.c in python-pillow/Pillow) is restated
 * from its published algorithm: per output pixel a window of input pixels around
 * center = (i + 0.5)·scale, weights of the Keys cubic with a = −0.5 evaluated at
 * (j − center + 0.5)/max(scale, 1), normalised to sum 1, then rounded to 22-bit fixed point
 * (half away from zero); each output byte is clamp((2^21 + Σ pixel·weight) >> 22, 0, 255). The
 * horizontal pass runs first and is itself rounded to bytes; a pass whose size does not change
 * is skipped (it would be the identity).
 * Invariant: the decoders bound the image size before allocating; libjpeg errors come back
 * through longjmp into this file only.
 * Read next: image.h, docs/vision.md. */
#include "vision/image.h"

#include "core/core.h"

#include <stdio.h> /* before jpeglib.h, which uses FILE */

#include <jpeglib.h>
#include <jerror.h> /* JWRN_JPEG_EOF */
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdbool.h>
#include <string.h>
#include <webp/decode.h>

#define MAX_SIDE 16384

void snug_image_free(struct snug_image *im) {
    if (!im) return;
    snug_free(im->rgb);
    im->rgb = NULL;
    im->w = im->h = 0;
}

static int check_size(int64_t w, int64_t h, int64_t max_pixels, const char *what,
                      struct snug_err *err) {
    if (w < 1 || h < 1) return snug_err_set(err, SNUG_ERR_FORMAT, "%s image has no pixels", what);
    if (w > MAX_SIDE || h > MAX_SIDE || w * h > max_pixels)
        return snug_err_set(err, SNUG_ERR_BUDGET,
                            "%s image of %lld x %lld pixels exceeds the limit of %lld pixels "
                            "(%d per side)",
                            what, (long long)w, (long long)h, (long long)max_pixels, MAX_SIDE);
    return SNUG_OK;
}

/* A pixel buffer of n bytes: the caller's (buf, when given: it holds
 * SNUG_IMAGE_BUF_BYTES_PER_PIXEL bytes per pixel of its bound) or a counted allocation. */
static uint8_t *get_buf(const struct snug_image_buf *buf, size_t n) {
    if (!buf) return snug_malloc(n);
    return n <= buf->cap ? buf->data : NULL;
}
static void put_buf(const struct snug_image_buf *buf, void *p) {
    if (!buf) snug_free(p);
}

static int alloc_rgb(const struct snug_image_buf *buf, struct snug_image *out, int32_t w, int32_t h,
                     struct snug_err *err) {
    out->rgb = get_buf(buf, (size_t)w * (size_t)h * 3);
    if (!out->rgb) return snug_err_set(err, SNUG_ERR_NOMEM, "image: out of memory");
    out->w = w, out->h = h;
    return SNUG_OK;
}

/* ---- PNG: libpng's simplified reader, to RGBA, alpha dropped ------------------------------ */
static int decode_png(const uint8_t *b, size_t n, int64_t max_pixels,
                      const struct snug_image_buf *buf, struct snug_image *out,
                      struct snug_err *err) {
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, b, n))
        return snug_err_set(err, SNUG_ERR_FORMAT, "PNG image: %s", im.message);
    int rc = check_size(im.width, im.height, max_pixels, "PNG", err);
    if (rc) {
        png_image_free(&im);
        return rc;
    }
    im.format = PNG_FORMAT_RGBA;
    size_t bytes = PNG_IMAGE_SIZE(im);
    uint8_t *rgba = get_buf(buf, bytes);
    if (!rgba) {
        png_image_free(&im);
        return snug_err_set(err, SNUG_ERR_NOMEM, "PNG image: out of memory");
    }
    if (!png_image_finish_read(&im, NULL, rgba, 0, NULL)) {
        rc = snug_err_set(err, SNUG_ERR_FORMAT, "PNG image: %s", im.message);
        put_buf(buf, rgba);
        png_image_free(&im);
        return rc;
    }
    if (buf) { /* in place: pixel i moves from 4i to 3i <= 4i, front to back */
        out->rgb = rgba, out->w = (int32_t)im.width, out->h = (int32_t)im.height;
        for (size_t i = 0, np = (size_t)im.width * im.height; i < np; i++)
            memmove(out->rgb + 3 * i, rgba + 4 * i, 3);
        return SNUG_OK;
    }
    if ((rc = alloc_rgb(NULL, out, (int32_t)im.width, (int32_t)im.height, err))) {
        snug_free(rgba);
        return rc;
    }
    for (size_t i = 0, np = (size_t)im.width * im.height; i < np; i++)
        memcpy(out->rgb + 3 * i, rgba + 4 * i, 3);
    snug_free(rgba);
    return SNUG_OK;
}

/* ---- JPEG: libjpeg-turbo with its default decoding (as Pillow uses it), to RGB ------------ */
struct jerr {
    struct jpeg_error_mgr mgr;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
    bool eof; /* jpeg_note_eof saw the data end early */
};
static void jpeg_fail(j_common_ptr c) {
    struct jerr *e = (struct jerr *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jb, 1);
}
static void jpeg_quiet(j_common_ptr c, int level) {
    (void)c;
    (void)level; /* warnings are not printed: the library never prints */
}
/* The same, remembering a premature end of the data (libjpeg only warns and pads the image
 * with gray): snug_image_check refuses such a file. */
static void jpeg_note_eof(j_common_ptr c, int level) {
    struct jerr *e = (struct jerr *)c->err;
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) e->eof = true;
}

static int decode_jpeg(const uint8_t *b, size_t n, int64_t max_pixels,
                       const struct snug_image_buf *buf_in, struct snug_image *out,
                       struct snug_err *err) {
    struct jpeg_decompress_struct c;
    struct jerr e;
    c.err = jpeg_std_error(&e.mgr);
    e.mgr.error_exit = jpeg_fail;
    e.mgr.emit_message = jpeg_quiet;
    uint8_t *volatile buf = NULL;
    if (setjmp(e.jb)) {
        jpeg_destroy_decompress(&c);
        put_buf(buf_in, buf);
        out->rgb = NULL;
        return snug_err_set(err, SNUG_ERR_FORMAT, "JPEG image: %s", e.msg);
    }
    jpeg_create_decompress(&c);
    jpeg_mem_src(&c, b, (unsigned long)n);
    jpeg_read_header(&c, TRUE);
    int rc = check_size(c.image_width, c.image_height, max_pixels, "JPEG", err);
    if (rc) {
        jpeg_destroy_decompress(&c);
        return rc;
    }
    c.out_color_space = JCS_RGB;
    jpeg_start_decompress(&c);
    if (c.output_components != 3) {
        jpeg_destroy_decompress(&c);
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "JPEG image with %d components cannot be read as RGB",
                            c.output_components);
    }
    buf = get_buf(buf_in, (size_t)c.output_width * c.output_height * 3);
    if (!buf) {
        jpeg_destroy_decompress(&c);
        return snug_err_set(err, SNUG_ERR_NOMEM, "JPEG image: out of memory");
    }
    while (c.output_scanline < c.output_height) {
        JSAMPROW row = buf + (size_t)c.output_scanline * c.output_width * 3;
        jpeg_read_scanlines(&c, &row, 1);
    }
    out->w = (int32_t)c.output_width, out->h = (int32_t)c.output_height;
    jpeg_finish_decompress(&c);
    jpeg_destroy_decompress(&c);
    out->rgb = buf;
    return SNUG_OK;
}

/* ---- WebP: libwebp, to RGB -------------------------------------------------------------- */
static int decode_webp(const uint8_t *b, size_t n, int64_t max_pixels,
                       const struct snug_image_buf *buf, struct snug_image *out,
                       struct snug_err *err) {
    int w, h;
    if (!WebPGetInfo(b, n, &w, &h))
        return snug_err_set(err, SNUG_ERR_FORMAT, "WebP image: not a valid WebP bitstream");
    int rc = check_size(w, h, max_pixels, "WebP", err);
    if (rc || (rc = alloc_rgb(buf, out, w, h, err))) return rc;
    if (!WebPDecodeRGBInto(b, n, out->rgb, (size_t)w * h * 3, w * 3)) {
        put_buf(buf, out->rgb);
        out->rgb = NULL;
        return snug_err_set(err, SNUG_ERR_FORMAT, "WebP image: decoding failed");
    }
    return SNUG_OK;
}

enum img_kind { IMG_NONE, IMG_PNG, IMG_JPEG, IMG_WEBP };
static enum img_kind img_kind(const uint8_t *b, size_t n) {
    if (n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8)) return IMG_PNG;
    if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return IMG_JPEG;
    if (n >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4)) return IMG_WEBP;
    return IMG_NONE;
}

int snug_image_decode_into(const uint8_t *b, size_t n, int64_t max_pixels,
                           const struct snug_image_buf *buf, struct snug_image *out,
                           struct snug_err *err) {
    memset(out, 0, sizeof *out);
    switch (img_kind(b, n)) {
    case IMG_PNG:
        return decode_png(b, n, max_pixels, buf, out, err);
    case IMG_JPEG:
        return decode_jpeg(b, n, max_pixels, buf, out, err);
    case IMG_WEBP:
        return decode_webp(b, n, max_pixels, buf, out, err);
    default:
        break;
    }
    return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                        "image: not PNG, JPEG or WebP (the formats snug decodes)");
}

int snug_image_decode(const uint8_t *b, size_t n, int64_t max_pixels, struct snug_image *out,
                      struct snug_err *err) {
    return snug_image_decode_into(b, n, max_pixels, NULL, out, err);
}

/* ---- the header alone ---------------------------------------------------------------------- */
static int probe_jpeg(const uint8_t *b, size_t n, int32_t *w, int32_t *h, struct snug_err *err) {
    struct jpeg_decompress_struct c;
    struct jerr e;
    c.err = jpeg_std_error(&e.mgr);
    e.mgr.error_exit = jpeg_fail;
    e.mgr.emit_message = jpeg_quiet;
    if (setjmp(e.jb)) {
        jpeg_destroy_decompress(&c);
        return snug_err_set(err, SNUG_ERR_FORMAT, "JPEG image: %s", e.msg);
    }
    jpeg_create_decompress(&c);
    jpeg_mem_src(&c, b, (unsigned long)n);
    jpeg_read_header(&c, TRUE);
    *w = (int32_t)SNUG_MIN(c.image_width, (JDIMENSION)INT32_MAX);
    *h = (int32_t)SNUG_MIN(c.image_height, (JDIMENSION)INT32_MAX);
    jpeg_destroy_decompress(&c);
    return SNUG_OK;
}

int snug_image_probe(const uint8_t *b, size_t n, int32_t *w, int32_t *h, struct snug_err *err) {
    *w = *h = 0;
    switch (img_kind(b, n)) {
    case IMG_PNG: {
        png_image im;
        memset(&im, 0, sizeof im);
        im.version = PNG_IMAGE_VERSION;
        if (!png_image_begin_read_from_memory(&im, b, n))
            return snug_err_set(err, SNUG_ERR_FORMAT, "PNG image: %s", im.message);
        *w = (int32_t)SNUG_MIN(im.width, (png_uint_32)INT32_MAX);
        *h = (int32_t)SNUG_MIN(im.height, (png_uint_32)INT32_MAX);
        png_image_free(&im);
        break;
    }
    case IMG_JPEG: {
        int rc = probe_jpeg(b, n, w, h, err);
        if (rc) return rc;
        break;
    }
    case IMG_WEBP: {
        int iw, ih;
        if (!WebPGetInfo(b, n, &iw, &ih))
            return snug_err_set(err, SNUG_ERR_FORMAT, "WebP image: not a valid WebP bitstream");
        *w = iw, *h = ih;
        break;
    }
    default:
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "image: not PNG, JPEG or WebP (the formats snug decodes)");
    }
    if (*w < 1 || *h < 1) return snug_err_set(err, SNUG_ERR_FORMAT, "image has no pixels");
    return SNUG_OK;
}

/* ---- the size rule ------------------------------------------------------------------------- */
int snug_image_smart_size(int32_t h, int32_t w, int32_t factor, int64_t min_pixels,
                          int64_t max_pixels, int32_t *out_h, int32_t *out_w,
                          struct snug_err *err) {
    if (h < 1 || w < 1 || factor < 1)
        return snug_err_set(err, SNUG_ERR_INVALID, "image: %d x %d pixels", w, h);
    if ((double)SNUG_MAX(h, w) / SNUG_MIN(h, w) > 200)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "image: aspect ratio %.1f exceeds 200 (%d x %d pixels)",
                            (double)SNUG_MAX(h, w) / SNUG_MIN(h, w), w, h);
    /* round half to even, as Python's round() */
    double hb = nearbyint((double)h / factor) * factor, wb = nearbyint((double)w / factor) * factor;
    if (hb * wb > (double)max_pixels) {
        double beta = sqrt((double)h * w / (double)max_pixels);
        hb = SNUG_MAX((double)factor, floor(h / beta / factor) * factor);
        wb = SNUG_MAX((double)factor, floor(w / beta / factor) * factor);
    } else if (hb * wb < (double)min_pixels) {
        double beta = sqrt((double)min_pixels / ((double)h * w));
        hb = ceil(h * beta / factor) * factor;
        wb = ceil(w * beta / factor) * factor;
    }
    *out_h = (int32_t)hb, *out_w = (int32_t)wb;
    return SNUG_OK;
}

/* ---- Pillow's bicubic resampling --------------------------------------------------------- */
#define RS_BITS 22 /* 32 − 8 − 2: room for the filter's negative lobes and overshoot */

static double keys_cubic(double x) { /* a = −0.5 */
    const double a = -0.5;
    if (x < 0) x = -x;
    if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
    return 0;
}

/* Taps per output pixel for in → out samples. */
static int rs_ksize(int32_t in, int32_t out) {
    double fs = SNUG_MAX((double)in / out, 1.0);
    return (int)ceil(2.0 * fs) * 2 + 1;
}

/* Fixed-point weights k[out][ksize] and windows bounds[out] = (first, count). */
static void rs_coeffs(int32_t in, int32_t out, int ksize, int32_t *bounds, int32_t *k,
                      double *tmp) {
    double scale = (double)in / out, fs = SNUG_MAX(scale, 1.0), support = 2.0 * fs;
    for (int32_t o = 0; o < out; o++) {
        double center = (o + 0.5) * scale, ww = 0, ss = 1.0 / fs;
        int32_t lo = (int32_t)(center - support + 0.5), hi = (int32_t)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in) hi = in;
        int32_t cnt = hi - lo;
        for (int32_t j = 0; j < cnt; j++) ww += tmp[j] = keys_cubic((j + lo - center + 0.5) * ss);
        for (int32_t j = 0; j < ksize; j++) {
            double v = j < cnt ? (ww != 0 ? tmp[j] / ww : tmp[j]) : 0;
            k[o * ksize + j] =
                (int32_t)(v < 0 ? -0.5 + v * (1 << RS_BITS) : 0.5 + v * (1 << RS_BITS));
        }
        bounds[2 * o] = lo, bounds[2 * o + 1] = cnt;
    }
}

static uint8_t rs_clip(int32_t ss) {
    int32_t v = ss >> RS_BITS; /* arithmetic shift: floor */
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

size_t snug_image_resize_scratch(int32_t sw, int32_t sh, int32_t dw, int32_t dh) {
    size_t kx = (size_t)rs_ksize(sw, dw), ky = (size_t)rs_ksize(sh, dh);
    size_t n = (size_t)dw * kx * 4 + (size_t)dw * 8 + (size_t)dh * ky * 4 + (size_t)dh * 8;
    n += (size_t)SNUG_MAX(kx, ky) * 8; /* double weights of one window */
    n += (size_t)dw * (size_t)sh * 3;  /* the horizontal pass */
    return n + 64;
}

void snug_image_resize(const struct snug_image *src, struct snug_image *dst, void *scratch) {
    int32_t sw = src->w, sh = src->h, dw = dst->w, dh = dst->h;
    int kx = rs_ksize(sw, dw), ky = rs_ksize(sh, dh);
    uint8_t *p = (uint8_t *)(((uintptr_t)scratch + 7) & ~(uintptr_t)7);
    double *tmp = (double *)p;
    p += (size_t)SNUG_MAX(kx, ky) * 8;
    int32_t *bx = (int32_t *)p, *kxw = bx + 2 * (size_t)dw;
    int32_t *by = kxw + (size_t)dw * kx, *kyw = by + 2 * (size_t)dh;
    uint8_t *mid = (uint8_t *)(kyw + (size_t)dh * ky);
    const uint8_t *h_out = src->rgb; /* rows of dw pixels after the horizontal pass */
    if (dw != sw) {
        rs_coeffs(sw, dw, kx, bx, kxw, tmp);
        for (int32_t y = 0; y < sh; y++)
            for (int32_t x = 0; x < dw; x++) {
                const int32_t *k = kxw + (size_t)x * kx;
                const uint8_t *row = src->rgb + ((size_t)y * sw + bx[2 * x]) * 3;
                int32_t s0 = 1 << (RS_BITS - 1), s1 = s0, s2 = s0;
                for (int32_t j = 0; j < bx[2 * x + 1]; j++) {
                    s0 += row[3 * j] * k[j];
                    s1 += row[3 * j + 1] * k[j];
                    s2 += row[3 * j + 2] * k[j];
                }
                uint8_t *o = mid + ((size_t)y * dw + x) * 3;
                o[0] = rs_clip(s0), o[1] = rs_clip(s1), o[2] = rs_clip(s2);
            }
        h_out = mid;
    }
    if (dh == sh) {
        if (h_out != dst->rgb) memcpy(dst->rgb, h_out, (size_t)dw * dh * 3);
        return;
    }
    rs_coeffs(sh, dh, ky, by, kyw, tmp);
    for (int32_t y = 0; y < dh; y++) {
        const int32_t *k = kyw + (size_t)y * ky;
        for (int32_t x = 0; x < dw; x++) {
            int32_t s0 = 1 << (RS_BITS - 1), s1 = s0, s2 = s0;
            for (int32_t j = 0; j < by[2 * y + 1]; j++) {
                const uint8_t *px = h_out + ((size_t)(by[2 * y] + j) * dw + x) * 3;
                s0 += px[0] * k[j];
                s1 += px[1] * k[j];
                s2 += px[2] * k[j];
            }
            uint8_t *o = dst->rgb + ((size_t)y * dw + x) * 3;
            o[0] = rs_clip(s0), o[1] = rs_clip(s1), o[2] = rs_clip(s2);
        }
    }
}

/* ---- patches ------------------------------------------------------------------------------ */
void snug_image_patches(const struct snug_image *im, const float mean[3], const float std[3],
                        int32_t patch, int32_t merge, float *out) {
    int32_t gh = im->h / patch, gw = im->w / patch, P = patch, M = merge;
    size_t per = (size_t)3 * 2 * P * P;
    int64_t n = 0;
    for (int32_t br = 0; br < gh / M; br++)
        for (int32_t bc = 0; bc < gw / M; bc++)
            for (int32_t ir = 0; ir < M; ir++)
                for (int32_t ic = 0; ic < M; ic++, n++) {
                    int32_t r = br * M + ir, c = bc * M + ic;
                    float *o = out + (size_t)n * per;
                    for (int ch = 0; ch < 3; ch++)
                        for (int y = 0; y < P; y++)
                            for (int x = 0; x < P; x++) {
                                uint8_t v =
                                    im->rgb[((size_t)(r * P + y) * im->w + c * P + x) * 3 + ch];
                                float f = ((float)v / 255.0f - mean[ch]) / std[ch];
                                o[((size_t)ch * 2 + 0) * P * P + y * P + x] = f;
                                o[((size_t)ch * 2 + 1) * P * P + y * P + x] = f;
                            }
                }
}

/* ---- the whole bitstream, no pixel buffer -------------------------------------------------- */
/* PNG: libpng's row reader over the bytes, rows decoded and dropped (png_read_row with no
 * destination), then the chunks after the image data (png_read_end). */
struct png_mem {
    const uint8_t *b;
    size_t n, off;
};
static void png_mem_read(png_structp png, png_bytep dst, size_t len) {
    struct png_mem *m = png_get_io_ptr(png);
    if (len > m->n - m->off) png_error(png, "the data ends early (a truncated file)");
    memcpy(dst, m->b + m->off, len);
    m->off += len;
}
static void png_check_fail(png_structp png, png_const_charp msg) {
    char *out = png_get_error_ptr(png);
    snprintf(out, 200, "%s", msg);
    png_longjmp(png, 1);
}
static void png_check_warn(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg; /* the library never prints */
}
static int check_png(const uint8_t *b, size_t n, struct snug_err *err) {
    char msg[200] = "";
    struct png_mem m = {b, n, 0};
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, msg, png_check_fail, png_check_warn);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return snug_err_set(err, SNUG_ERR_NOMEM, "PNG image: out of memory");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        return snug_err_set(err, SNUG_ERR_FORMAT, "PNG image: %s", msg);
    }
    png_set_read_fn(png, &m, png_mem_read);
    png_read_info(png, info);
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    png_uint_32 h = png_get_image_height(png, info);
    for (int p = 0; p < passes; p++)
        for (png_uint_32 y = 0; y < h; y++) png_read_row(png, NULL, NULL);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    return SNUG_OK;
}

/* JPEG: every scanline decoded at 1/8 scale (all of the entropy-coded data is still read; the
 * row is libjpeg's own small buffer), a premature end refused. */
static int check_jpeg(const uint8_t *b, size_t n, struct snug_err *err) {
    struct jpeg_decompress_struct c;
    struct jerr e;
    c.err = jpeg_std_error(&e.mgr);
    e.mgr.error_exit = jpeg_fail;
    e.mgr.emit_message = jpeg_note_eof;
    e.eof = false;
    if (setjmp(e.jb)) {
        jpeg_destroy_decompress(&c);
        return snug_err_set(err, SNUG_ERR_FORMAT, "JPEG image: %s", e.msg);
    }
    jpeg_create_decompress(&c);
    jpeg_mem_src(&c, b, (unsigned long)n);
    jpeg_read_header(&c, TRUE);
    c.scale_num = 1, c.scale_denom = 8;
    c.out_color_space = JCS_RGB; /* as the decoder reads it (CMYK is refused there and here) */
    jpeg_start_decompress(&c);
    if (c.output_components != 3) {
        jpeg_destroy_decompress(&c);
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "JPEG image with %d components cannot be read as RGB",
                            c.output_components);
    }
    JSAMPARRAY row = (*c.mem->alloc_sarray)((j_common_ptr)&c, JPOOL_IMAGE,
                                            c.output_width * c.output_components, 1);
    while (c.output_scanline < c.output_height && !e.eof) jpeg_read_scanlines(&c, row, 1);
    if (!e.eof) jpeg_finish_decompress(&c);
    jpeg_destroy_decompress(&c);
    if (e.eof)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "JPEG image: the data ends early (a truncated file)");
    return SNUG_OK;
}

/* WebP: the whole bitstream decoded, scaled to one pixel (libwebp's own tiny output). */
static int check_webp(const uint8_t *b, size_t n, struct snug_err *err) {
    WebPDecoderConfig cfg;
    if (!WebPInitDecoderConfig(&cfg))
        return snug_err_set(err, SNUG_ERR_INTERNAL, "WebP image: libwebp version mismatch");
    cfg.options.use_scaling = 1;
    cfg.options.scaled_width = cfg.options.scaled_height = 1;
    cfg.output.colorspace = MODE_RGB;
    VP8StatusCode st = WebPDecode(b, n, &cfg);
    WebPFreeDecBuffer(&cfg.output);
    if (st == VP8_STATUS_OK) return SNUG_OK;
    return snug_err_set(err, SNUG_ERR_FORMAT, "WebP image: %s",
                        st == VP8_STATUS_NOT_ENOUGH_DATA ? "the data ends early (a truncated file)"
                                                         : "decoding failed");
}

int snug_image_check(const uint8_t *b, size_t n, struct snug_err *err) {
    switch (img_kind(b, n)) {
    case IMG_PNG:
        return check_png(b, n, err);
    case IMG_JPEG:
        return check_jpeg(b, n, err);
    case IMG_WEBP:
        return check_webp(b, n, err);
    default:
        break;
    }
    return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                        "image: not PNG, JPEG or WebP (the formats snug decodes)");
}
