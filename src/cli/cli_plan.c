/* cli_plan.c — the memory plan at boot for `run`: the context the command is about to create,
 * sized by itself where asked (src/plan/plan_auto.h: context, KV formats, the prompt chunk),
 * and the chunk alone for commands that size nothing else (cli_chunk_resolve: bench-local), its
 * one-line summary (flags a user can paste back) and plan table printed to stderr, and a refusal
 * naming the largest context that fits when it exceeds the budget. The limits are the ones
 * snug_ctx_init gives the planner (defaults resolved the same way), so the printed plan is what
 * gets allocated. Read next: src/plan/plan_auto.h, src/model/context.c.
 */
#include "cli.h"

#include "backend/backend.h"
#include "kv/kvfmt.h"
#include "model/model.h"
#include "plan/plan_auto.h"

#include <stdio.h>
#include <unistd.h>

/* The threads the context will run with: the context's, else the model's, else every CPU. */
static int32_t plan_threads(const struct snug_model *m, const struct snug_ctx_params *cp) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int32_t threads = cp->n_threads ? cp->n_threads : m->n_threads;
    return threads > 0 ? threads : online > 0 ? (int32_t)online : 1;
}

int cli_plan_boot(const char *cmd, const struct snug_model *m, struct snug_ctx_params *cp,
                  int32_t kv_code, uint64_t budget, struct snug_err *err) {
    int32_t threads = plan_threads(m, cp);
    struct snug_plan_auto_req req = {
        .lim = {.n_ctx = cp->n_ctx,
                .n_slots = 1,
                .n_chunk = cp->n_chunk, /* SNUG_PLAN_CHUNK_AUTO: chosen by the plan */
                .n_draft = cp->n_draft,
                .n_threads = threads,
                .kv_type = kv_code,
                .backend = cp->backend == 1 ? SNUG_BACKEND_CUDA : SNUG_BACKEND_CPU},
        .budget = budget,
    };
    if (req.lim.backend == SNUG_BACKEND_CUDA && !budget) req.device_free = cli_cuda_free();
    struct snug_plan_weights w;
    snug_plan_weights_from_gguf(m->gguf, &w);
    static struct snug_plan_auto a; /* a few KiB; the CLI runs one boot at a time */
    int rc = snug_plan_auto(&m->hp, &w, &req, &a, err);
    if (rc && rc != SNUG_ERR_BUDGET) return rc;
    if (rc == SNUG_ERR_BUDGET && a.plan.n_items == 0) return rc; /* nothing was planned */
    char line[768];
    snug_plan_auto_flags(&a, line, sizeof line);
    fprintf(stderr, "snug %s: plan: %s\n", cmd, line);
    char buf[8192];
    snug_plan_format(&a.plan, a.budget, buf, sizeof buf);
    fputs(buf, stderr);
    if (rc) return rc;
    cp->n_ctx = (int32_t)a.n_ctx;
    cp->n_chunk = a.n_chunk;
    int k, v;
    snug_kvfmt_split(a.kv_type, &k, &v);
    cp->kv_type = k == v ? k : SNUG_KV_F16;
    cp->kv_type_k = k == v ? SNUG_KV_F16 : k;
    cp->kv_type_v = k == v ? SNUG_KV_F16 : v;
    if (cp->backend == 1 && !cp->vram_budget) cp->vram_budget = a.budget;
    return SNUG_OK;
}

int32_t cli_chunk_resolve(const char *cmd, const struct snug_model *m,
                          const struct snug_ctx_params *cp, int32_t chunk, uint64_t budget) {
    int32_t threads = plan_threads(m, cp);
    bool pair = cp->kv_type_k != SNUG_KV_F16 || cp->kv_type_v != SNUG_KV_F16;
    struct snug_plan_limits lim = {
        .n_ctx = cp->n_ctx > 0 ? cp->n_ctx : 4096,
        .n_slots = 1,
        .n_chunk = chunk,
        .n_draft = cp->n_draft,
        .n_threads = threads,
        .kv_type = pair ? snug_kvfmt_code(cp->kv_type_k, cp->kv_type_v) : cp->kv_type,
        .backend = cp->backend == 1 ? SNUG_BACKEND_CUDA : SNUG_BACKEND_CPU};
    /* no budget on cuda: the free device memory minus the margin, as run sizes by */
    size_t dev_free = 0;
    if (chunk == SNUG_PLAN_CHUNK_AUTO && lim.backend == SNUG_BACKEND_CUDA && !budget &&
        (dev_free = cli_cuda_free()) > 0)
        budget = snug_plan_default_budget(lim.backend, dev_free, 0);
    struct snug_plan_weights w;
    snug_plan_weights_from_gguf(m->gguf, &w);
    enum snug_plan_chunk_why why;
    int32_t n = snug_plan_chunk(&m->hp, &w, &lim, budget, &why);
    char line[128];
    snug_plan_chunk_str(n, why, budget, line, sizeof line);
    fprintf(stderr, "snug %s: chunk %s\n", cmd, line);
    return n;
}
