/* cmd_vision.c — `snug vision -m MMPROJ.gguf (--image F | --pixels P.f32 --grid H W)
 * [-o OUT.f32] [--dump-pixels P.f32] [--min-image-pixels N] [--max-image-pixels N] [--threads N]
 * [--vision-backend cpu|cuda]`:
 * the vision tower (src/vision) over one image — a PNG/JPEG/WebP file, decoded, resized by the
 * smart-resize rule and laid out in patches (image.h), or already preprocessed patches (float32,
 * [H·W][3·2·P²] in merge-window-major order) — writing the projector's rows
 * [(H/merge)·(W/merge)][text hidden] as float32 (the layout of the vision fixture's
 * img*_features.f32, tests/data/vision, docs/vision.md). Prints the resized size and the image's
 * token count. A tool for checking the tower (and its CUDA form against the CPU's). */
#include "cli.h"

#include "core/core.h"
#include "core/threadpool.h"
#include "backend/backend.h"
#include "vision/image.h"
#include "vision/vision.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The Qwen3.5/3.6 processor's pixel bounds (vision.h). */
#define MIN_PIXELS SNUG_VISION_MIN_PIXELS
#define MAX_PIXELS SNUG_VISION_MAX_PIXELS

static int usage(void) {
    fprintf(stderr,
            "usage: snug vision -m MMPROJ.gguf (--image F | --pixels P.f32 --grid H W) "
            "[-o OUT.f32]\n"
            "                   [--dump-pixels P.f32] [--min-image-pixels N] "
            "[--max-image-pixels N] [--threads N] [--vision-backend cpu|cuda]\n"
            "  --image F   a PNG, JPEG or WebP file: decoded, resized (Qwen2-VL smart resize,\n"
            "              Pillow's bicubic) and cut into patches as the Hugging Face processor\n"
            "  --pixels/--grid  preprocessed patches and their patch rows and columns\n"
            "  --min-image-pixels / --max-image-pixels  the resize bounds (default %d / %d)\n"
            "  --vision-backend cuda  the whole tower on the GPU (weights uploaded, every\n"
            "              block there; the host cuts frames and positions)\n",
            MIN_PIXELS, MAX_PIXELS);
    return 2;
}

int cmd_vision(int argc, char **argv) {
    const char *model = NULL, *pix = NULL, *outp = NULL, *image = NULL, *dump = NULL;
    long gh = 0, gw = 0, threads = 1;
    int vbackend = 0; /* --vision-backend: 0 cpu, 1 cuda */
    long long min_px = MIN_PIXELS, max_px = MAX_PIXELS;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(a, "--pixels") && i + 1 < argc)
            pix = argv[++i];
        else if (!strcmp(a, "--image") && i + 1 < argc)
            image = argv[++i];
        else if (!strcmp(a, "--dump-pixels") && i + 1 < argc)
            dump = argv[++i];
        else if (!strcmp(a, "-o") && i + 1 < argc)
            outp = argv[++i];
        else if (!strcmp(a, "--grid") && i + 2 < argc) {
            gh = strtol(argv[++i], NULL, 10);
            gw = strtol(argv[++i], NULL, 10);
        } else if (!strcmp(a, "--min-image-pixels") && i + 1 < argc)
            min_px = strtoll(argv[++i], NULL, 10);
        else if (!strcmp(a, "--max-image-pixels") && i + 1 < argc)
            max_px = strtoll(argv[++i], NULL, 10);
        else if (!strcmp(a, "--threads") && i + 1 < argc)
            threads = strtol(argv[++i], NULL, 10);
        else if (!strcmp(a, "--vision-backend") && i + 1 < argc) {
            const char *b = argv[++i];
            if (strcmp(b, "cpu") && strcmp(b, "cuda")) {
                fprintf(stderr, "snug vision: --vision-backend '%s': expected cpu or cuda\n", b);
                return 2;
            }
            vbackend = !strcmp(b, "cuda");
        } else
            return usage();
    }
    if (!model || !!pix == !!image || (pix && (gh <= 0 || gw <= 0 || gh > 4096 || gw > 4096)) ||
        threads < 1 || threads > 256 || min_px < 1 || max_px < min_px || max_px > (1LL << 28))
        return usage();
    struct snug_err err = {0};
    struct snug_vision *v = NULL;
    if (snug_vision_load(&v, model, &err)) return cli_fail("vision", &err);
    const struct snug_vision_hparams *hp = snug_vision_hparams(v);
    int64_t pv = snug_vision_patch_values(v);
    float *px = NULL, *out = NULL;
    void *work = NULL;
    struct snug_pool *pool = NULL;
    struct snug_vision_be *vbe = NULL;
    struct snug_image im = {0}, rs = {0};
    int rc = 1;
    if (image) { /* decode, resize, cut into patches */
        size_t nb = 0;
        struct snug_err rerr = {0};
        uint8_t *bytes = (uint8_t *)cli_read_file(image, "image", (size_t)64 << 20, &nb, &rerr);
        if (!bytes) {
            fprintf(stderr, "snug vision: %s\n", rerr.msg);
            goto done;
        }
        int32_t h, w;
        int st = snug_image_decode(bytes, nb, 1LL << 28, &im, &err);
        snug_free(bytes);
        if (st || snug_image_smart_size(im.h, im.w, hp->patch * hp->merge, min_px, max_px, &h, &w,
                                        &err)) {
            cli_fail("vision", &err);
            goto done;
        }
        rs.w = w, rs.h = h;
        rs.rgb = snug_malloc((size_t)w * h * 3);
        void *scratch = snug_malloc(snug_image_resize_scratch(im.w, im.h, w, h));
        px = snug_malloc((size_t)((int64_t)(h / hp->patch) * (w / hp->patch) * pv) * 4);
        if (!rs.rgb || !scratch || !px) {
            snug_free(scratch);
            fprintf(stderr, "snug vision: out of memory\n");
            goto done;
        }
        snug_image_resize(&im, &rs, scratch);
        snug_free(scratch);
        snug_image_patches(&rs, hp->mean, hp->std, hp->patch, hp->merge, px);
        gh = h / hp->patch, gw = w / hp->patch;
        printf("image %d x %d -> %d x %d pixels, %ld x %ld patches, %ld tokens\n", im.w, im.h, w, h,
               gw, gh, gh * gw / ((long)hp->merge * hp->merge));
    }
    int64_t n = gh * gw;
    int64_t rows = n / ((int64_t)hp->merge * hp->merge);
    if (pix) {
        FILE *f = fopen(pix, "rb");
        px = snug_malloc((size_t)(n * pv) * sizeof(float));
        if (!px || !f) {
            fprintf(stderr, "snug vision: %s: %s\n", pix, f ? "out of memory" : "cannot open");
            if (f) fclose(f);
            goto done;
        }
        bool ok =
            fread(px, sizeof(float), (size_t)(n * pv), f) == (size_t)(n * pv) && fgetc(f) == EOF;
        fclose(f);
        if (!ok) {
            fprintf(stderr, "snug vision: %s: expected exactly %lld x %lld floats\n", pix,
                    (long long)n, (long long)pv);
            goto done;
        }
    }
    if (dump) {
        FILE *o = fopen(dump, "wb");
        bool ok = o && fwrite(px, sizeof(float), (size_t)(n * pv), o) == (size_t)(n * pv);
        if (o) fclose(o);
        if (!ok) {
            fprintf(stderr, "snug vision: cannot write %s\n", dump);
            goto done;
        }
    }
    if (!outp) {
        rc = 0;
        goto done;
    }
    out = snug_malloc((size_t)(rows * hp->out_dim) * sizeof(float));
    if (threads > 1 && snug_pool_init(&pool, (int)threads, &err)) {
        cli_fail("vision", &err);
        goto done;
    }
    size_t wb = snug_vision_work_bytes(v, n, (int)threads);
    work = snug_malloc(wb);
    if (!out || !work) {
        fprintf(stderr, "snug vision: out of memory (%zu bytes of work)\n", wb);
        goto done;
    }
    if (vbackend && snug_vision_be_open(&vbe, v, SNUG_BACKEND_CUDA, n, &err)) {
        cli_fail("vision", &err);
        goto done;
    }
    if (snug_vision_encode(v, pool, px, (int32_t)gh, (int32_t)gw, out, work, wb, &err)) {
        cli_fail("vision", &err);
        goto done;
    }
    FILE *o = fopen(outp, "wb");
    bool ok = o && fwrite(out, sizeof(float), (size_t)(rows * hp->out_dim), o) ==
                       (size_t)(rows * hp->out_dim);
    if (o) fclose(o);
    if (!ok) {
        fprintf(stderr, "snug vision: cannot write %s\n", outp);
        goto done;
    }
    fprintf(stderr, "snug vision: wrote [%lld][%d] float32 to %s\n", (long long)rows, hp->out_dim,
            outp);
    rc = 0;
done:
    snug_free(px);
    snug_free(out);
    snug_free(work);
    snug_image_free(&im);
    snug_image_free(&rs);
    snug_pool_free(pool);
    snug_vision_be_close(vbe);
    snug_vision_free(v);
    return rc;
}
