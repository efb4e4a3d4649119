/* cli_autosize.c — sizing by itself for `snug serve` (and the `--ctx N|max` flag of run and
 * serve): the model's metadata is opened (no weight page is read), the context and KV formats
 * are chosen by snug_plan_auto with the limits the server's boot plan will use (slots,
 * threads, the default draft length; the context at chunk 512, then --chunk auto's chunk in what
 * that plan leaves), and the choice is printed as one line of flags a user can paste back. The
 * server then plans and allocates exactly that, on the model opened here (opts.model: the file is
 * opened once). Read next: src/plan/plan_auto.h, src/server/http.c (boot_plan).
 */
#include "cli.h"

#include "backend/backend.h"

#include "model/model.h"
#include "plan/plan_auto.h"
#include "plan/plan_cache.h"
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_serve_size(struct snug_server_opts *o, int32_t kv_code, struct snug_err *err) {
    struct snug_model *m = NULL;
    struct snug_model_params mp = {.path = o->model_path, .n_threads = o->n_threads};
    int rc = snug_model_load(&m, &mp, err);
    if (rc) return rc;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int32_t threads = o->n_threads > 0 ? o->n_threads : online > 0 ? (int32_t)online : 1;
    /* the server's default: 3 drafts with an MTP block, none under --script (http.c) */
    int32_t draft = o->n_draft >= 0                                  ? o->n_draft
                    : (snug_model_n_nextn(m) > 0 && !o->script_path) ? 3
                                                                     : 0;
    struct snug_plan_auto_req req = {
        .lim = {.n_ctx = o->n_ctx,
                .n_slots = o->n_slots > 0 ? o->n_slots : 1,
                .n_chunk = o->n_chunk, /* SNUG_PLAN_CHUNK_AUTO: chosen with the context */
                .n_draft = draft,
                .n_threads = threads,
                .kv_type = kv_code,
                .backend = o->backend == 1 ? SNUG_BACKEND_CUDA : SNUG_BACKEND_CPU},
        .budget = o->backend == 1 ? o->vram_budget : o->budget,
    };
    /* --mmproj: the tower's plan items come out of the budget first, so the context chosen
     * leaves room for them, as `snug plan --mmproj` reports it: on the CPU its host items from
     * the RAM budget; on CUDA with the tower there (--vision-backend cuda, the default) its
     * device items from the GPU budget (the host items are not budgeted there: the prefix
     * cache's automatic RAM tier leaves room for them instead) */
    uint64_t vision_bytes = 0;
    uint64_t vision_host = 0; /* cuda: the tower's host items (the prefix cache's rule) */
    int64_t image_tokens = 0; /* the largest image's context tokens */
    struct snug_vision_plan vp = {0};
    if (o->mmproj) { /* the tower's plan: on cuda with the tower on the CPU, for its host items */
        struct snug_vision *v = NULL;
        rc = snug_vision_load(&v, o->mmproj, err);
        if (rc == SNUG_OK)
            rc = snug_vision_plan_make(
                snug_vision_hparams(v), snug_vision_weight_bytes(v),
                o->max_image_pixels ? o->max_image_pixels : SNUG_VISION_MAX_PIXELS,
                o->max_source_pixels ? o->max_source_pixels : SNUG_VISION_MAX_SOURCE_PIXELS,
                threads, o->vision_backend, &vp, err);
        snug_vision_free(v);
        if (rc) {
            snug_model_free(m);
            return rc;
        }
        if (o->backend == 1) vision_host = snug_vision_plan_total(&vp);
    }
    if (o->mmproj && (o->backend != 1 || o->vision_backend)) {
        bool gpu = o->backend == 1;
        image_tokens = vp.max_tokens;
        vision_bytes = gpu ? snug_vision_plan_device_total(&vp) : snug_vision_plan_total(&vp);
        uint64_t base = req.budget ? req.budget : gpu ? 0 : snug_plan_host_memory();
        if (base && base <= vision_bytes) {
            snug_model_free(m);
            return snug_err_set(
                err, SNUG_ERR_BUDGET,
                "the vision tower's plan (%.2f GiB for images of up to %lld "
                "pixels) alone exceeds the %s (%.2f GiB): lower "
                "--max-image-pixels / --max-source-pixels",
                (double)vision_bytes / 1073741824.0,
                (long long)(o->max_image_pixels ? o->max_image_pixels : SNUG_VISION_MAX_PIXELS),
                req.budget ? (gpu ? "--vram-budget" : "--budget") : "machine's memory",
                (double)base / 1073741824.0);
        }
        if (req.budget)
            req.budget -= vision_bytes;
        else if (base)
            req.host_memory = base - vision_bytes;
    }
    /* no --vram-budget on CUDA: the device's free memory (minus the stated margin) */
    size_t dev_free = o->backend == 1 && !req.budget ? cli_cuda_free() : 0;
    if (dev_free) req.device_free = dev_free > vision_bytes ? dev_free - vision_bytes : 0;
    struct snug_plan_weights w;
    snug_plan_weights_from_gguf(m->gguf, &w);
    /* the prefix cache's RAM tier (--cache-ram auto unless given: plan_cache.h's rule); on the
     * cpu it is part of the budget, so the context is sized in what it leaves; on cuda it is
     * sized after the plan, in the host memory the plan's host items leave */
    struct snug_plan_cache_flags cf = {.ram_bytes = o->cache_ram};
    char cache_why[256];
    if (o->backend != 1) {
        snug_plan_cache_auto(&cf, SNUG_BACKEND_CPU, o->budget, w.total, 0, cache_why,
                             sizeof cache_why);
        rc = snug_plan_cache_reserve(&m->hp, &w, &req.lim, &cf, &req.reserve, err);
        if (rc) {
            snug_model_free(m);
            return rc;
        }
    }
    static struct snug_plan_auto a; /* a few KiB; one boot per process */
    rc = snug_plan_auto(&m->hp, &w, &req, &a, err);
    if (rc) {
        snug_model_free(m);
        return rc;
    }
    if (o->backend == 1) /* a.plan: the plan the server allocates, less the tier (http.c) */
        snug_plan_cache_auto(&cf, SNUG_BACKEND_CUDA, 0, w.total,
                             snug_plan_host_bytes(&a.plan) + vision_host, cache_why,
                             sizeof cache_why);
    o->cache_ram = cf.ram_bytes;
    /* a context it chose that cannot hold one largest image beside a prompt is no vision
     * server: say what to change rather than boot one that refuses every image (a --ctx the
     * user gave is theirs) */
    if (image_tokens && o->n_ctx <= 0 && a.n_ctx < image_tokens + SNUG_VISION_MIN_TEXT_CTX) {
        snug_model_free(m);
        return snug_err_set(
            err, SNUG_ERR_BUDGET,
            "with the vision tower%s (%.2f GiB for images of up to %lld pixels, "
            "%lld context tokens each) the largest context that fits is %lld "
            "tokens, too short for one such image and a prompt: lower "
            "--max-image-pixels (1048576, one megapixel, is 1024 tokens)%s",
            o->backend == 1 ? " on the GPU" : "", (double)vision_bytes / 1073741824.0,
            (long long)(o->max_image_pixels ? o->max_image_pixels : SNUG_VISION_MAX_PIXELS),
            (long long)image_tokens, (long long)a.n_ctx,
            o->backend == 1 ? ", or keep the tower on the CPU (--vision-backend "
                              "cpu)"
                            : ", or raise --budget");
    }
    o->model = m; /* the server takes the opened model over: it is opened once */
    if (vision_bytes && a.budget) a.budget += vision_bytes; /* the flags repeat the whole budget */
    a.has_cache = true;
    a.cache_ram = o->cache_ram;
    char line[768];
    snug_plan_auto_flags(&a, line, sizeof line);
    fprintf(stderr, "snug serve: plan: %s\n", line);
    if (o->cache_ram)
        fprintf(stderr, "snug serve: prefix cache: %.2f GiB of host RAM (%s)\n",
                (double)o->cache_ram / 1073741824.0, cache_why);
    else
        fprintf(stderr, "snug serve: prefix cache: off (%s)\n", cache_why);
    o->n_ctx = (int32_t)a.n_ctx;
    o->n_chunk = a.n_chunk;
    o->kv_type = a.kv_type;
    if (o->backend == 1)
        o->vram_budget = a.budget;
    else
        o->budget = a.budget;
    o->n_draft = draft;
    return SNUG_OK;
}
