/* fuzz_server_dataurl.c — libFuzzer target for a request image's path before the engine
 * (src/server/images.c, src/vision/image.c): every input is read as a data: URL
 * (snug_srv_data_url: the header, the base64 alphabet and length), and the decoded bytes go
 * through the header probe (snug_image_probe: format and size, no pixels), the size rule with
 * the server's defaults and, for images up to 2^20 pixels, the whole-bitstream check
 * (snug_image_check: a truncated or corrupt file refused with a message). A decoded length that
 * disagrees with the base64 rule, or a probe that accepts a size it must refuse, traps; an
 * out-of-bounds read is an ASan report. Seeds: tests/fuzz/corpus-server-dataurl/ (data: URLs of the
 * vision fixture's PNG header and malformed ones). Build: CC=clang cmake -B build-fuzz
 * -DSNUG_FUZZ=ON && cmake --build build-fuzz --target fuzz_server_dataurl. Read next:
 * src/server/images.h. */
#include "core/core.h"
#include "server/images.h"
#include "vision/image.h"
#include "vision/vision.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *url = snug_malloc(size + 1);
    if (!url) return 0;
    memcpy(url, data, size);
    url[size] = 0;
    uint8_t *bytes = NULL;
    size_t n = 0;
    char why[200];
    if (snug_srv_data_url(url, size, &bytes, &n, why, sizeof why) == 0) {
        const char *comma = memchr(url, ',', size);
        size_t chars = size - (size_t)(comma - url) - 1;
        if (!comma || n > chars / 4 * 3 + 2) __builtin_trap();
        int32_t w = 0, h = 0, rows, cols;
        struct snug_err err;
        if (snug_image_probe(bytes, n, &w, &h, &err) == SNUG_OK) {
            if (w < 1 || h < 1) __builtin_trap();
            struct snug_vision_hparams hp = {.patch = 16, .merge = 2};
            size_t scratch = 0;
            if ((int64_t)w * h <= SNUG_VISION_MAX_SOURCE_PIXELS &&
                snug_vision_image_size(&hp, w, h, SNUG_VISION_MIN_PIXELS, SNUG_VISION_MAX_PIXELS,
                                       &rows, &cols, &scratch, &err) == SNUG_OK &&
                ((int64_t)rows * cols * 1024 > SNUG_VISION_MAX_PIXELS || rows < 1 || cols < 1))
                __builtin_trap();
            /* the whole bitstream (the server's check after the size bound; kept to small
             * images here so an input costs milliseconds): refusals carry a message */
            err.msg[0] = 0;
            if ((int64_t)w * h <= (1 << 20) && snug_image_check(bytes, n, &err) != SNUG_OK &&
                !err.msg[0])
                __builtin_trap();
        }
    } else if (!why[0]) {
        __builtin_trap(); /* a refusal names its reason */
    }
    snug_free(bytes);
    snug_free(url);
    return 0;
}
