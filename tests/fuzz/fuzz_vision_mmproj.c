/* fuzz_vision_mmproj.c — libFuzzer target for the mmproj checks (src/vision/vision.c): every
 * input is opened as an in-memory GGUF and handed to snug_vision_from_gguf (the projector type,
 * the clip.vision.* keys, every tensor's name, shape and type); a tower that validates with
 * small shapes is then run on one merge window of patches (pixels from the input's bytes), so a
 * check that lets a shape through which the encoder then mis-sizes shows up as an ASan/UBSan
 * report. Seeds: tests/fuzz/corpus-vision-mmproj/ (tests/fuzz/make_mmproj_corpus.py: tiny
 * towers of f32 and f16 tensors, and the fixture's layout).
 * Build: CC=clang cmake -B build-fuzz -DSNUG_FUZZ=ON && cmake --build build-fuzz
 * --target fuzz_vision_mmproj. Read next: src/vision/vision.h. */
#include "core/core.h"
#include "gguf/gguf.h"
#include "vision/vision.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct snug_err err;
    struct snug_gguf *g = NULL;
    if (snug_gguf_open_memory(&g, data, size, "fuzz.gguf", &err) != SNUG_OK) return 0;
    struct snug_vision *v = NULL;
    if (snug_vision_from_gguf(&v, g, &err) != SNUG_OK) return 0; /* g closed */
    const struct snug_vision_hparams *hp = snug_vision_hparams(v);
    /* encode only shapes that keep one run cheap (the checks above are the target) */
    int64_t M = hp->merge, pv = snug_vision_patch_values(v);
    if (hp->hidden <= 256 && hp->ff <= 512 && hp->depth <= 4 && hp->out_dim <= 256 &&
        hp->patch <= 16 && M <= 4) {
        int64_t n = M * M;
        size_t wb = snug_vision_work_bytes(v, n, 1);
        float *px = snug_malloc((size_t)(n * pv) * sizeof(float));
        float *out = snug_malloc((size_t)hp->out_dim * sizeof(float));
        void *work = snug_malloc(wb);
        if (px && out && work) {
            for (int64_t i = 0; i < n * pv; i++)
                px[i] = (float)(data[(size_t)i % size]) / 128.0f - 1.0f;
            (void)snug_vision_encode(v, NULL, px, (int32_t)M, (int32_t)M, out, work, wb, &err);
        }
        snug_free(px);
        snug_free(out);
        snug_free(work);
    }
    snug_vision_free(v);
    return 0;
}
