/* cli_backend.c — the compute-backend flags shared by logits, run and perplexity:
 * `--backend cpu|cuda`, `--vram-budget SIZE` (the whole plan, weights included, must fit;
 * sizes as snug_plan_parse_size: 23.5GiB, 24G, ...) and `--cuda-profile` (per-op device times
 * to stderr at the end); and `--chunk N|auto` of run, serve, bench-local and plan (resolved by
 * the plan: snug_plan_chunk). Owns nothing; see backend.h.
 * Read next: src/model/context.c (ctx_init_cuda). */
#include "cli.h"

#include "backend/backend.h"
#include "core/core.h"
#include "plan/plan_auto.h"

#include <stdio.h>
#include <string.h>

void cli_backend_params(const struct cli_backend *b, struct snug_ctx_params *cp) {
    cp->backend = b->backend;
    cp->vram_budget = b->vram_budget;
    cp->profile = b->profile;
    if (b->backend == 1) snug_log_set_level(SNUG_LOG_INFO); /* device memory before / after load */
}

/* The device's free and total bytes; false when the backend cannot be loaded or asked. */
static bool cuda_mem(size_t *fr, size_t *tot) {
    struct snug_err e = {0};
    const struct snug_backend_module *mod;
    return snug_backend_module_get(SNUG_BACKEND_CUDA, &mod, &e) == SNUG_OK &&
           mod->mem_info(fr, tot, &e) == SNUG_OK;
}

size_t cli_cuda_free(void) {
    size_t fr = 0, tot = 0;
    return cuda_mem(&fr, &tot) ? fr : 0;
}

void cli_backend_report(const struct cli_backend *b, const char *when) {
    size_t fr = 0, tot = 0;
    if (b->backend != 1 || !cuda_mem(&fr, &tot)) return;
    fprintf(stderr, "cuda: device memory used %.1f MiB of %.1f MiB %s\n", (tot - fr) / 1048576.0,
            tot / 1048576.0, when);
}

bool cli_backend_opt(int id, const struct cli_val *v, struct cli_backend *b) {
    if (id == CLI_O_BACKEND) b->backend = v->choice; /* cpu|cuda: 0, 1 */
    if (id == CLI_O_VRAM_BUDGET) b->vram_budget = v->size;
    if (id == CLI_O_CUDA_PROFILE) b->profile = true;
    return true;
}

bool cli_chunk_opt(int id, const struct cli_val *v, int32_t *chunk) {
    if (id == CLI_O_CHUNK) *chunk = v->word ? SNUG_PLAN_CHUNK_AUTO : (int32_t)v->i;
    return true;
}
