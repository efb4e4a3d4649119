/* cmd_vision.c — `snug vision -m MMPROJ.gguf --pixels P.f32 --grid H W -o OUT.f32 [--threads N]`:
 * the vision tower (src/vision) over one image's preprocessed patches (float32, [H·W][3·2·P²]
 * in the processor's merge-window-major order), writing the projector's rows
 * [(H/merge)·(W/merge)][text hidden] as float32 — the layout of the vision fixture's
 * img*_features.f32 (tests/data/vision, docs/vision.md). A tool for checking the tower against a
 * reference until images reach the server (issue 23). */
#include "cli.h"

#include "core/core.h"
#include "core/threadpool.h"
#include "vision/vision.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void) {
    fprintf(stderr, "usage: snug vision -m MMPROJ.gguf --pixels P.f32 --grid H W -o OUT.f32 "
                    "[--threads N]\n"
                    "  H, W: the image's patch rows and columns (multiples of the merge size)\n");
    return 2;
}

int cmd_vision(int argc, char **argv) {
    const char *model = NULL, *pix = NULL, *outp = NULL;
    long gh = 0, gw = 0, threads = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(a, "--pixels") && i + 1 < argc)
            pix = argv[++i];
        else if (!strcmp(a, "-o") && i + 1 < argc)
            outp = argv[++i];
        else if (!strcmp(a, "--grid") && i + 2 < argc) {
            gh = strtol(argv[++i], NULL, 10);
            gw = strtol(argv[++i], NULL, 10);
        } else if (!strcmp(a, "--threads") && i + 1 < argc)
            threads = strtol(argv[++i], NULL, 10);
        else
            return usage();
    }
    if (!model || !pix || !outp || gh <= 0 || gw <= 0 || gh > 4096 || gw > 4096 || threads < 1 ||
        threads > 256)
        return usage();
    struct snug_err err = {0};
    struct snug_vision *v = NULL;
    if (snug_vision_load(&v, model, &err)) return cli_fail("vision", &err);
    const struct snug_vision_hparams *hp = snug_vision_hparams(v);
    int64_t n = gh * gw, pv = snug_vision_patch_values(v);
    int64_t rows = n / ((int64_t)hp->merge * hp->merge);
    float *px = malloc((size_t)(n * pv) * sizeof(float));
    float *out = malloc((size_t)(rows * hp->out_dim) * sizeof(float));
    struct snug_pool *pool = NULL;
    int rc = 1;
    FILE *f = fopen(pix, "rb");
    if (!px || !out || !f) {
        fprintf(stderr, "snug vision: %s: %s\n", pix, f ? "out of memory" : "cannot open");
        goto done;
    }
    if (fread(px, sizeof(float), (size_t)(n * pv), f) != (size_t)(n * pv) || fgetc(f) != EOF) {
        fprintf(stderr, "snug vision: %s: expected exactly %lld x %lld floats\n", pix, (long long)n,
                (long long)pv);
        goto done;
    }
    if (threads > 1 && snug_pool_init(&pool, (int)threads, &err)) {
        cli_fail("vision", &err);
        goto done;
    }
    size_t wb = snug_vision_work_bytes(v, n, (int)threads);
    void *work = malloc(wb);
    if (!work) {
        fprintf(stderr, "snug vision: out of memory (%zu bytes of work)\n", wb);
        goto done;
    }
    if (snug_vision_encode(v, pool, px, (int32_t)gh, (int32_t)gw, out, work, wb, &err)) {
        free(work);
        cli_fail("vision", &err);
        goto done;
    }
    free(work);
    FILE *o = fopen(outp, "wb");
    if (!o || fwrite(out, sizeof(float), (size_t)(rows * hp->out_dim), o) !=
                  (size_t)(rows * hp->out_dim)) {
        fprintf(stderr, "snug vision: cannot write %s\n", outp);
        if (o) fclose(o);
        goto done;
    }
    fclose(o);
    fprintf(stderr, "snug vision: wrote [%lld][%d] float32 to %s\n", (long long)rows, hp->out_dim,
            outp);
    rc = 0;
done:
    if (f) fclose(f);
    free(px);
    free(out);
    snug_pool_free(pool);
    snug_vision_free(v);
    return rc;
}
