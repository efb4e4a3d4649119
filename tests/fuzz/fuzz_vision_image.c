/* fuzz_vision_image.c — libFuzzer target for the image decoders (src/vision/image.c): every input
 * goes through snug_image_decode (PNG, JPEG, WebP by signature; at most 4 megapixels here), and a
 * decoded image through the size rule, Pillow-exact resize and the patch layout, so a bound or
 * buffer mistake shows up as an ASan/UBSan report. Seeds: the vision fixture's PNGs
 * (the PNG files of tests/data/vision) and any JPEG/WebP files.
 * Build: CC=clang cmake -B build-fuzz -DSNUG_FUZZ=ON && cmake --build build-fuzz
 * --target fuzz_vision_image. Read next: src/vision/image.h. */
#include "core/core.h"
#include "vision/image.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct snug_err err;
    struct snug_image im;
    if (snug_image_decode(data, size, 4 << 20, &im, &err) != SNUG_OK) return 0;
    int32_t h, w;
    if (snug_image_smart_size(im.h, im.w, 32, 1024, 64 * 1024, &h, &w, &err) == SNUG_OK) {
        struct snug_image rs = {.w = w, .h = h, .rgb = snug_malloc((size_t)w * h * 3)};
        void *scratch = snug_malloc(snug_image_resize_scratch(im.w, im.h, w, h));
        float *px = snug_malloc((size_t)(h / 16) * (w / 16) * 1536 * sizeof(float));
        if (rs.rgb && scratch && px) {
            snug_image_resize(&im, &rs, scratch);
            const float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.5f, 0.5f, 0.5f};
            snug_image_patches(&rs, mean, std, 16, 2, px);
        }
        snug_free(px);
        snug_free(scratch);
        snug_image_free(&rs);
    }
    snug_image_free(&im);
    return 0;
}
