/* place.c — an image's place in a prompt's token ids (docs/vision.md step 6): each run of
 * `<|image_pad|>` is one image, in order; a single pad (as a rendered chat marker
 * `<|vision_start|><|image_pad|><|vision_end|>` tokenizes) is widened to the image's rows·cols
 * pads, a run already that long is kept, any other length is refused. With `prepend` a prompt
 * without pads gets `<|vision_start|>` pads `<|vision_end|>` in front, one group per image (the
 * CLI's convenience). The CLI (src/cli/cli_images.c) and the server (src/server/images.c) both
 * place images through here.
 * Invariant: after snug_vision_place, images[k].first is image k's pad run in out, runs in
 * order and not overlapping (snug_ctx_eval_images' input). Read next: vision.h. */
#include "vision/vision.h"

#include "core/core.h"
#include "tokenizer/tokenizer.h"

#include <string.h>

int snug_vision_tokens(const struct snug_tokenizer *tok, struct snug_vision_tokens *out,
                       struct snug_err *err) {
    out->pad = tok ? snug_tokenizer_token_id(tok, "<|image_pad|>") : -1;
    out->start = tok ? snug_tokenizer_token_id(tok, "<|vision_start|>") : -1;
    out->end = tok ? snug_tokenizer_token_id(tok, "<|vision_end|>") : -1;
    if (out->pad < 0 || out->start < 0 || out->end < 0)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "the model's vocabulary lacks <|image_pad|> / <|vision_start|> / "
                            "<|vision_end|>: not a vision-language model");
    return SNUG_OK;
}

int32_t snug_vision_count_places(const snug_token *ids, int32_t n, snug_token pad) {
    int32_t runs = 0;
    for (int32_t i = 0; i < n; i++)
        if (ids[i] == pad && (i == 0 || ids[i - 1] != pad)) runs++;
    return runs;
}

int64_t snug_vision_placed_len(const snug_token *ids, int32_t n, snug_token pad,
                               const struct snug_image_rows *images, int32_t n_images) {
    bool prepend = snug_vision_count_places(ids, n, pad) == 0;
    int64_t total = n;
    for (int32_t k = 0; k < n_images; k++)
        total += (int64_t)images[k].rows * images[k].cols + (prepend ? 2 : 0);
    return total; /* an upper bound when runs are already widened */
}

int snug_vision_place(const snug_token *ids, int32_t n, const struct snug_vision_tokens *vt,
                      struct snug_image_rows *images, int32_t n_images, bool prepend,
                      snug_token *out, int64_t cap, int32_t *n_out, int32_t *old_first,
                      struct snug_err *err) {
    int32_t n_runs = snug_vision_count_places(ids, n, vt->pad);
    prepend = prepend && n_runs == 0;
    if (!prepend && n_runs != n_images)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "the prompt has %d image places (runs of <|image_pad|>) but %d "
                            "images were given",
                            n_runs, n_images);
    if (snug_vision_placed_len(ids, n, vt->pad, images, n_images) > SNUG_MIN(cap, 1 << 30))
        return snug_err_set(err, SNUG_ERR_INVALID, "the prompt with its images is too long");
    int64_t o = 0;
    int32_t k = 0;
    if (prepend)
        for (; k < n_images; k++) {
            int32_t cnt = images[k].rows * images[k].cols;
            out[o++] = vt->start;
            images[k].first = (int32_t)o;
            if (old_first) old_first[k] = -1;
            for (int32_t j = 0; j < cnt; j++) out[o++] = vt->pad;
            out[o++] = vt->end;
        }
    for (int32_t i = 0; i < n;) {
        if (ids[i] != vt->pad) {
            out[o++] = ids[i++];
            continue;
        }
        int32_t run = 0;
        while (i + run < n && ids[i + run] == vt->pad) run++;
        int32_t cnt = images[k].rows * images[k].cols;
        if (run != 1 && run != cnt)
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "image place %d has %d <|image_pad|> tokens; image %d needs %d "
                                "(%d x %d) or a single pad to widen",
                                k, run, k, cnt, images[k].cols, images[k].rows);
        images[k].first = (int32_t)o;
        if (old_first) old_first[k] = i;
        for (int32_t j = 0; j < cnt; j++) out[o++] = vt->pad;
        i += run;
        k++;
    }
    *n_out = (int32_t)o;
    return SNUG_OK;
}
