/* cli_plan.c — the memory plan at boot for `run` (and `serve`): the plan of the context the
 * command is about to create, printed to stderr, and a refusal naming the largest context
 * that fits when it exceeds the budget. The limits are the ones snug_ctx_init gives the
 * planner (defaults resolved the same way), so the printed plan is what gets allocated.
 * Read next: src/plan/plan.h, src/model/context.c.
 */
#include "cli.h"

#include "kv/kvfmt.h"
#include "model/model.h"
#include "plan/plan.h"

#include <stdio.h>
#include <unistd.h>

int cli_plan_boot(const char *cmd, const struct snug_model *m, const struct snug_ctx_params *cp,
                  uint64_t budget, struct snug_err *err) {
    struct snug_ctx_params p = *cp;
    if (p.n_ctx == 0) { /* snug_ctx_init's defaults */
        p.n_ctx = 4096;
        if (m->hp.n_ctx_train && (uint64_t)p.n_ctx > m->hp.n_ctx_train)
            p.n_ctx = (int32_t)m->hp.n_ctx_train;
    }
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int32_t threads = p.n_threads ? p.n_threads : m->n_threads;
    if (threads <= 0) threads = online > 0 ? (int32_t)online : 1;
    bool pair = p.kv_type_k != SNUG_KV_F16 || p.kv_type_v != SNUG_KV_F16;
    struct snug_plan_limits lim = {
        .n_ctx = p.n_ctx,
        .n_slots = 1,
        .n_chunk = p.n_chunk ? p.n_chunk : 512,
        .n_draft = p.n_draft,
        .n_threads = threads,
        .kv_type = pair ? snug_kvfmt_code(p.kv_type_k, p.kv_type_v) : p.kv_type,
        .backend = p.backend == 1 ? SNUG_BACKEND_CUDA : SNUG_BACKEND_CPU,
    };
    struct snug_plan_weights w;
    snug_plan_weights_from_gguf(m->gguf, &w);
    struct snug_plan plan;
    int rc = snug_plan_check(&m->hp, &w, &lim, budget, &plan, err);
    if (rc && rc != SNUG_ERR_BUDGET) return rc;
    char kv[24];
    snug_kvfmt_code_name(plan.lim.kv_type, kv, sizeof kv);
    fprintf(stderr, "snug %s: memory plan: ctx %lld, chunk %d, kv %s, mtp %d, %s\n", cmd,
            (long long)plan.lim.n_ctx, plan.lim.n_chunk, kv, plan.lim.n_draft,
            plan.lim.backend == SNUG_BACKEND_CUDA ? "cuda" : "cpu");
    char buf[8192];
    snug_plan_format(&plan, budget, buf, sizeof buf);
    fputs(buf, stderr);
    return rc;
}
