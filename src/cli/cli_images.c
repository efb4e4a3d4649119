/* cli_images.c — images on the command line (`snug run` / `snug logits`): the flags (--mmproj,
 * --image, --min-image-pixels, --max-image-pixels), encoding every image through the vision
 * tower (src/vision/encode.c), and placing the encoded rows in the prompt's ids
 * (src/vision/place.c, shared with the server: each run of `<|image_pad|>` is one image, a
 * single pad widened to rows·cols pads; a prompt without pads gets the markers in front).
 * Invariant: after cli_images_place, ci->rows[k] describes image k's pad run in the returned ids
 * (snug_ctx_eval_images' input). Read next: src/vision/vision.h, docs/vision.md. */
#include "cli.h"

#include "core/core.h"
#include "core/threadpool.h"
#include "tokenizer/tokenizer.h"
#include "vision/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cli_images_opt(const struct cli_args *p, int id, const struct cli_val *v,
                    struct cli_images *ci) {
    if (id == CLI_O_MMPROJ) ci->mmproj = v->s;
    if (id == CLI_O_VISION_BACKEND) ci->vision_backend = v->choice; /* cpu|cuda: 0, 1 */
    if (id == CLI_O_MIN_PX) ci->min_px = v->i;
    if (id == CLI_O_MAX_PX) ci->max_px = v->i;
    if (id == CLI_O_IMAGE) {
        if (ci->n >= CLI_MAX_IMAGES)
            return cli_args_bad(p, v, "at most %d --image files", CLI_MAX_IMAGES), false;
        ci->paths[ci->n++] = v->s;
    }
    return true;
}

int cli_images_encode(struct cli_images *ci, const struct snug_model *m, int backend, int n_threads,
                      struct snug_err *err) {
    if (ci->n == 0 && !ci->mmproj) return SNUG_OK;
    if (!ci->mmproj)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "--image needs the vision tower: add --mmproj MMPROJ.gguf (the "
                            "model's mmproj file)");
    int vb = ci->vision_backend >= 0 ? ci->vision_backend : backend == 1;
    if (ci->min_px > ci->max_px)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "--min-image-pixels %lld is above --max-image-pixels %lld", ci->min_px,
                            ci->max_px);
    int rc = snug_vision_load(&ci->v, ci->mmproj, err);
    if (rc) return rc;
    const struct snug_vision_hparams *vh = snug_vision_hparams(ci->v);
    if (vh->out_dim != snug_model_n_embd(m))
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "%s projects to %d values per row but the model's hidden size is %d: "
                            "is it this model's mmproj?",
                            ci->mmproj, vh->out_dim, snug_model_n_embd(m));
    /* every file read once; on a device the tower is opened for the largest of them (its
     * header's size through the resize rule), not for the largest the bounds allow */
    uint8_t *bytes[CLI_MAX_IMAGES] = {0};
    size_t nb[CLI_MAX_IMAGES] = {0};
    int64_t max_patches = 0;
    for (int k = 0; k < ci->n && rc == SNUG_OK; k++) {
        if (!(bytes[k] =
                  (uint8_t *)cli_read_file(ci->paths[k], "image", (size_t)64 << 20, &nb[k], err))) {
            rc = SNUG_ERR_IO;
            break;
        }
        int32_t w, h, rows, cols;
        rc = snug_image_probe(bytes[k], nb[k], &w, &h, err);
        if (rc == SNUG_OK)
            rc = snug_vision_image_size(vh, w, h, ci->min_px, ci->max_px, &rows, &cols, NULL, err);
        if (rc == SNUG_OK)
            max_patches = SNUG_MAX(max_patches, (int64_t)rows * cols * vh->merge * vh->merge);
        else
            snug_err_prefix(err, "%s", ci->paths[k]);
    }
    if (rc == SNUG_OK && vb && max_patches > 0) {
        rc = snug_vision_be_open(&ci->vbe, ci->v, vb, max_patches, err);
        if (rc == SNUG_OK)
            fprintf(stderr, "vision tower on the cuda backend (%.1f MiB there)\n",
                    (double)snug_vision_be_bytes(ci->vbe) / 1048576.0);
    }
    struct snug_pool *pool = NULL;
    if (rc == SNUG_OK && n_threads != 1) rc = snug_pool_init(&pool, n_threads, err);
    for (int k = 0; k < ci->n && rc == SNUG_OK; k++) {
        rc = snug_vision_encode_bytes(ci->v, pool, bytes[k], nb[k], ci->min_px, ci->max_px,
                                      &ci->enc[k], err);
        if (rc) break;
        fprintf(stderr, "image %s: %d x %d -> %d x %d tokens\n", ci->paths[k], ci->enc[k].src_w,
                ci->enc[k].src_h, ci->enc[k].cols, ci->enc[k].rows);
    }
    for (int k = 0; k < ci->n; k++) snug_free(bytes[k]);
    snug_pool_free(pool);
    snug_vision_be_close(ci->vbe); /* the rows are on the host: give the device back */
    ci->vbe = NULL;
    return rc;
}

snug_token *cli_images_place(struct cli_images *ci, const struct snug_model *m,
                             const snug_token *ids, int32_t n, int32_t extra, int32_t *n_out,
                             struct snug_err *err) {
    struct snug_vision_tokens vt;
    if (snug_vision_tokens(snug_model_tokenizer(m), &vt, err)) return NULL;
    for (int k = 0; k < ci->n; k++)
        ci->rows[k] =
            (struct snug_image_rows){0, ci->enc[k].rows, ci->enc[k].cols, ci->enc[k].embd};
    int64_t cap = snug_vision_placed_len(ids, n, vt.pad, ci->rows, ci->n) + extra;
    if (cap > (1 << 30)) {
        snug_err_set(err, SNUG_ERR_INVALID, "the prompt with its images is too long");
        return NULL;
    }
    snug_token *out = malloc((size_t)cap * sizeof *out);
    if (!out) {
        snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (snug_vision_place(ids, n, &vt, ci->rows, ci->n, true, out, cap, n_out, NULL, err)) {
        free(out);
        return NULL;
    }
    return out;
}

void cli_images_free(struct cli_images *ci) {
    for (int k = 0; k < ci->n; k++) snug_vision_rows_free(&ci->enc[k]);
    snug_vision_be_close(ci->vbe);
    ci->vbe = NULL;
    snug_vision_free(ci->v);
    ci->v = NULL;
}
