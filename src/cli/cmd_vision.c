/* cmd_vision.c — `snug vision -m MMPROJ.gguf (--image F | --pixels P.f32 --grid H W)
 * [-o OUT.f32]`: the vision tower (src/vision) over one image — a PNG/JPEG/WebP file, decoded,
 * resized by the smart-resize rule and laid out in patches (image.h), or already preprocessed
 * patches (float32, [H·W][3·2·P²] in merge-window-major order) — writing the projector's rows
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

enum { O_MODEL = 1, O_PIXELS, O_IMAGE, O_DUMP, O_OUT, O_GRID, O_MIN_PX, O_MAX_PX, O_THREADS, O_VB };
static const struct cli_opt OPTS[] = {
    {.id = O_MODEL,
     .names = "-m",
     .kind = CLI_TEXT,
     .meta = "MMPROJ.gguf",
     .help = "the vision tower (a model's mmproj GGUF)"},
    {.id = O_IMAGE,
     .names = "--image",
     .kind = CLI_TEXT,
     .meta = "F",
     .help = "a PNG, JPEG or WebP file: decoded, resized (Qwen2-VL smart resize, Pillow's "
             "bicubic) and cut into patches as the Hugging Face processor does",
     .group = "Input"},
    {.id = O_PIXELS,
     .names = "--pixels",
     .kind = CLI_TEXT,
     .meta = "P.f32",
     .help = "instead: preprocessed patches, float32 [H·W][3·2·P²] in merge-window-major order"},
    {.id = O_GRID,
     .names = "--grid",
     .kind = CLI_INT,
     .meta = "H W",
     .lo = 1,
     .hi = 4096,
     .n_values = 2,
     .help = "--pixels: the patch rows and columns"},
    {.id = O_MIN_PX,
     .names = "--min-image-pixels",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 1LL << 28,
     .def = "65536",
     .help = "--image is resized to at least N pixels"},
    {.id = O_MAX_PX,
     .names = "--max-image-pixels",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 1LL << 28,
     .def = "16777216",
     .help = "--image is resized to at most N pixels"},
    {.id = O_OUT,
     .names = "-o",
     .kind = CLI_TEXT,
     .meta = "OUT.f32",
     .help = "the projector's rows, float32 [(H/merge)·(W/merge)][text hidden]",
     .group = "Output"},
    {.id = O_DUMP,
     .names = "--dump-pixels",
     .kind = CLI_TEXT,
     .meta = "P.f32",
     .help = "also write the patches the tower reads"},
    {.id = O_THREADS,
     .names = "--threads",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 256,
     .def = "1",
     .help = "threads",
     .group = "Where it runs"},
    {.id = O_VB,
     .names = "--vision-backend",
     .kind = CLI_CHOICE,
     .meta = "cpu|cuda",
     .def = "cpu",
     .help = "cuda: the whole tower on the GPU (weights uploaded, every block there; the host "
             "cuts frames and positions)"},
    {0},
};
const struct cli_command cli_cmd_vision = {
    .name = "vision",
    .run = cmd_vision,
    .usage = "-m MMPROJ.gguf (--image F | --pixels P.f32 --grid H W) [-o OUT.f32]",
    .summary = "the vision tower over an image or preprocessed patches",
    .about = "an image (PNG/JPEG/WebP) or preprocessed patches through the vision tower: the "
             "resized size, the token count, the projector rows (a checking tool) — "
             "docs/vision.md",
    .opts = OPTS,
};

int cmd_vision(int argc, char **argv) {
    const char *model = NULL, *pix = NULL, *outp = NULL, *image = NULL, *dump = NULL;
    long gh = 0, gw = 0, threads = 1;
    int vbackend = 0; /* --vision-backend: 0 cpu, 1 cuda */
    long long min_px = MIN_PIXELS, max_px = MAX_PIXELS;
    struct cli_args args;
    struct cli_val val;
    int r;
    cli_args_init(&args, &cli_cmd_vision, argc, argv);
    while ((r = cli_args_next(&args, &val)) > 0) {
        switch (r) {
        case O_MODEL:
            model = val.s;
            break;
        case O_PIXELS:
            pix = val.s;
            break;
        case O_IMAGE:
            image = val.s;
            break;
        case O_DUMP:
            dump = val.s;
            break;
        case O_OUT:
            outp = val.s;
            break;
        case O_GRID:
            gh = (long)val.i, gw = (long)val.i2;
            break;
        case O_MIN_PX:
            min_px = val.i;
            break;
        case O_MAX_PX:
            max_px = val.i;
            break;
        case O_THREADS:
            threads = (long)val.i;
            break;
        case O_VB:
            vbackend = val.choice;
            break;
        }
    }
    if (r != CLI_END) return CLI_EXIT(r);
    if (!model || !!pix == !!image || (pix && (gh <= 0 || gw <= 0)))
        return cli_usage_error(&cli_cmd_vision,
                               "give -m MMPROJ.gguf and either --image F or --pixels P.f32 "
                               "--grid H W");
    if (max_px < min_px)
        return cli_usage_error(&cli_cmd_vision,
                               "--max-image-pixels %lld is below "
                               "--min-image-pixels %lld",
                               max_px, min_px);
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
