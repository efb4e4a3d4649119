/* cli_backend.c — the compute-backend flags shared by logits, run and perplexity:
 * `--backend cpu|cuda`, `--vram-budget SIZE` (the whole plan, weights included, must fit;
 * sizes as snug_plan_parse_size: 23.5GiB, 24G, ...) and `--cuda-profile` (per-op device times
 * to stderr at the end). Owns nothing; see backend.h.
 * Read next: src/model/context.c (ctx_init_cuda). */
#include "cli.h"

#include "backend/backend.h"
#include "core/core.h"
#include "plan/plan.h"

#include <stdio.h>
#include <string.h>

int cli_backend_flag(int argc, char **argv, int *i, const char *cmd, struct cli_backend *b) {
    const char *a = argv[*i];
    if (!strcmp(a, "--cuda-profile")) {
        b->profile = true;
        return 1;
    }
    if (strcmp(a, "--backend") && strcmp(a, "--vram-budget")) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "snug %s: %s needs a value\n", cmd, a);
        return -1;
    }
    const char *v = argv[++*i];
    if (!strcmp(a, "--backend")) {
        if (!strcmp(v, "cpu"))
            b->backend = 0;
        else if (!strcmp(v, "cuda"))
            b->backend = 1;
        else {
            fprintf(stderr, "snug %s: --backend '%s': expected cpu or cuda\n", cmd, v);
            return -1;
        }
        return 1;
    }
    if (!snug_plan_parse_size(v, &b->vram_budget)) {
        fprintf(stderr, "snug %s: --vram-budget '%s': expected a size such as 23.5GiB\n", cmd, v);
        return -1;
    }
    return 1;
}

void cli_backend_params(const struct cli_backend *b, struct snug_ctx_params *cp) {
    cp->backend = b->backend;
    cp->vram_budget = b->vram_budget;
    cp->profile = b->profile;
    if (b->backend == 1) snug_log_set_level(SNUG_LOG_INFO); /* device memory before / after load */
}

void cli_backend_report(const struct cli_backend *b, const char *when) {
    size_t fr = 0, tot = 0;
    struct snug_err e = {0};
    const struct snug_backend_module *mod;
    if (b->backend != 1 || snug_backend_module_get(SNUG_BACKEND_CUDA, &mod, &e) ||
        mod->mem_info(&fr, &tot, &e))
        return;
    fprintf(stderr, "cuda: device memory used %.1f MiB of %.1f MiB %s\n", (tot - fr) / 1048576.0,
            tot / 1048576.0, when);
}

bool cli_backend_opt(int id, const struct cli_val *v, struct cli_backend *b) {
    if (id == CLI_O_BACKEND) b->backend = v->choice; /* cpu|cuda: 0, 1 */
    if (id == CLI_O_VRAM_BUDGET) b->vram_budget = v->size;
    if (id == CLI_O_CUDA_PROFILE) b->profile = true;
    return true;
}
