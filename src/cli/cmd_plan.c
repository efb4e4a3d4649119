/* cmd_plan.c — `snug plan`: the memory plan of a model file (metadata only: no weights are
 * read) or of a preset shape with a weight recipe, as a budget table or JSON, and with
 * `--ctx max` the largest context that fits the budget. The numbers are snug_plan_make's,
 * the same the context allocates from. Read next: src/plan/plan.h, docs/memory.md.
 */
#include "cli.h"
#include "cli_cache.h"

#include "kv/kvfmt.h"
#include "model/presets.h"
#include "plan/plan_auto.h"
#include "plan/shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A JSON string body (names here are plain ASCII, but escape the two that matter). */
static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') putchar('\\');
        putchar(*s);
    }
    putchar('"');
}

/* The vision tower's items, when --mmproj or --vision-preset is given. */
struct plan_vision {
    bool on;
    const char *what; /* the mmproj path or the preset name */
    struct snug_vision_plan vp;
    uint64_t budget_bytes; /* its share of the budget: host items on cpu, device items on cuda */
};

/* --table: every KV choice x MTP off/on, the largest context (snug_plan_table). */
static int plan_table(const char *what, const struct snug_hparams *hp,
                      const struct snug_plan_weights *w, const struct snug_plan_limits *lim,
                      uint64_t budget, bool json, const struct plan_vision *vis,
                      uint64_t cache_bytes) {
    if (!budget) {
        fprintf(stderr, "snug plan: --table needs --budget SIZE\n");
        return 2;
    }
    int32_t draft_on = lim->n_draft > 0 ? lim->n_draft : hp->n_nextn > 0 ? 3 : 0;
    struct snug_plan_table_row rows[SNUG_PLAN_TABLE_MAX_ROWS];
    int n = 0;
    struct snug_err err = {0};
    uint64_t room = budget; /* with vision: what the tower leaves */
    if (vis->on) {
        if (vis->budget_bytes >= budget) {
            fprintf(stderr, "snug plan: the vision tower alone (%.2f GiB) exceeds the budget\n",
                    (double)vis->budget_bytes / 1073741824.0);
            return 1;
        }
        room = budget - vis->budget_bytes;
    }
    if (cache_bytes) { /* the cpu's prefix cache RAM tier: part of the budget (plan_cache.h) */
        if (cache_bytes >= room) {
            fprintf(stderr, "snug plan: the prefix cache (%.2f GiB) takes the whole budget\n",
                    (double)cache_bytes / 1073741824.0);
            return 1;
        }
        room -= cache_bytes;
    }
    if (snug_plan_table(hp, w, lim, room, draft_on, rows, &n, &err)) return cli_fail("plan", &err);
    for (int i = 0; i < n; i++)
        if (rows[i].device_total) rows[i].device_total += cache_bytes; /* as `--ctx max` plans */
    const char *backend = lim->backend == SNUG_BACKEND_CUDA ? "cuda" : "cpu";
    char size[32];
    snug_plan_size_str(budget, size, sizeof size);
    if (json) {
        printf("{\"model\": ");
        json_str(what);
        printf(", \"arch\": ");
        json_str(hp->arch);
        printf(", \"tp\": %d", lim->n_ranks > 1 ? lim->n_ranks : 1);
        printf(", \"backend\": \"%s\", \"budget\": %llu, \"budget_flag\": \"%s\", \"slots\": %d, "
               "\"n_ctx_train\": %llu, \"weights_bytes\": %llu, ",
               backend, (unsigned long long)budget, size, lim->n_slots,
               (unsigned long long)hp->n_ctx_train, (unsigned long long)w->total);
        if (vis->on)
            printf("\"vision\": {\"mmproj\": \"%s\", \"bytes\": %llu, \"device_bytes\": %llu, "
                   "\"backend\": \"%s\", \"image_tokens\": %lld}, ",
                   vis->what, (unsigned long long)snug_vision_plan_total(&vis->vp),
                   (unsigned long long)snug_vision_plan_device_total(&vis->vp),
                   vis->vp.backend ? "cuda" : "cpu", (long long)vis->vp.max_tokens);
        printf("\"rows\": [");
        for (int i = 0; i < n; i++) {
            char kv[24];
            int k, v;
            snug_kvfmt_split(rows[i].kv_type, &k, &v);
            snug_kvfmt_code_name(rows[i].kv_type, kv, sizeof kv);
            printf(
                "%s{\"kv\": \"%s\", \"k\": \"%s\", \"v\": \"%s\", \"mtp\": %d, \"max_ctx\": %lld, "
                "\"total_bytes\": %llu, \"auto\": %s}",
                i ? ", " : "", kv, snug_kvfmt_name(k), snug_kvfmt_name(v), rows[i].n_draft,
                (long long)rows[i].max_ctx, (unsigned long long)rows[i].device_total,
                rows[i].is_auto ? "true" : "false");
        }
        printf("]}\n");
        return 0;
    }
    printf("snug plan: %s (%s), %s, budget %s, %d slot%s: the largest context per KV format\n",
           what, hp->arch, backend, size, lim->n_slots, lim->n_slots == 1 ? "" : "s");
    if (lim->n_ranks > 1)
        printf("  tensor parallel over %d devices, the budget each; rank %d (the fullest) "
               "decides\n",
               lim->n_ranks, lim->rank);
    if (vis->on && vis->vp.backend)
        printf("  with vision (%s) on the GPU: %.2f GiB of device memory for the tower (and %.2f "
               "GiB of host memory); the largest image takes %lld context tokens\n",
               vis->what, (double)snug_vision_plan_device_total(&vis->vp) / 1073741824.0,
               (double)snug_vision_plan_total(&vis->vp) / 1073741824.0,
               (long long)vis->vp.max_tokens);
    else if (vis->on)
        printf("  with vision (%s): %.2f GiB of host memory for the tower; the largest image "
               "takes %lld context tokens\n",
               vis->what, (double)snug_vision_plan_total(&vis->vp) / 1073741824.0,
               (long long)vis->vp.max_tokens);
    printf("  %-10s %4s %12s %12s\n", "kv (K/V)", "mtp", "max ctx", "plan GiB");
    for (int i = 0; i < n; i++) {
        char kv[24];
        snug_kvfmt_code_name(rows[i].kv_type, kv, sizeof kv);
        printf("  %-10s %4d %12lld %12.2f%s%s\n", kv, rows[i].n_draft, (long long)rows[i].max_ctx,
               (double)(rows[i].device_total + vis->budget_bytes) / 1073741824.0,
               hp->n_ctx_train && (uint64_t)rows[i].max_ctx == hp->n_ctx_train
                   ? "  (trained length)"
                   : "",
               rows[i].is_auto ? "  <- --kv auto" : "");
    }
    return 0;
}

enum {
    O_MODEL = 1,
    O_PRESET,
    O_WEIGHTS,
    O_SET,
    O_CTX,
    O_BUDGET,
    O_VRAM_BUDGET,
    O_BACKEND,
    O_MTP,
    O_SLOTS,
    O_THREADS,
    O_TP,
    O_MMPROJ,
    O_VPRESET,
    O_VBACKEND,
    O_MAX_PX,
    O_MAX_SRC,
    O_JSON,
    O_TABLE,
};
static const struct cli_opt OPTS[] = {
    {.id = O_MODEL,
     .names = "-m, --model",
     .kind = CLI_TEXT,
     .meta = "M.gguf",
     .help = "the model file (its header and tensor table; no weight is read)",
     .group = "Model"},
    {.id = O_PRESET,
     .names = "--preset",
     .kind = CLI_TEXT,
     .meta = "NAME",
     .help = "instead of -m: a shape (demo, demo-moe, qwen3.6-27b, qwen3.6-35b-a3b) ..."},
    {.id = O_WEIGHTS,
     .names = "--weights",
     .kind = CLI_TEXT,
     .meta = "TYPE",
     .help = "... with the weights of a quantize recipe (q4_k_m q5_k_m q6_k q8_0 f16 ...)"},
    {.id = O_SET,
     .names = "--set",
     .kind = CLI_TEXT,
     .meta = "key=value",
     .help = "--preset: override one hyper-parameter (the keys of snug gen --set)",
     .flags = CLI_REPEAT},
    {.id = O_BUDGET,
     .names = "--budget",
     .kind = CLI_SIZE,
     .meta = "SIZE",
     .help = "the memory the plan must fit: host memory on cpu, device memory on cuda (cuda "
             "overheads are estimates, marked ~); SIZE as 23.5GiB, 24G, 512M or bytes",
     .group = "Budget and context"},
    {.id = O_VRAM_BUDGET,
     .names = "--vram-budget",
     .kind = CLI_SIZE,
     .meta = "SIZE",
     .help = "= --backend cuda --budget SIZE (so the plan line of run and serve pastes here)"},
    {.id = O_CTX,
     .names = "-c, --ctx",
     .kind = CLI_INT,
     .meta = "N|max",
     .lo = 1,
     .hi = INT32_MAX,
     .word = "max",
     .def = "4096",
     .help = "the context per slot; max (needs --budget): the largest that fits (per KV format "
             "in --json: max_ctx_per_kv)"},
    {.id = O_TABLE,
     .names = "--table",
     .kind = CLI_SWITCH,
     .help = "(needs --budget) the largest context for every KV format and mixed pair, MTP off "
             "and on"},
    {.id = O_SLOTS,
     .names = "--slots",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = INT32_MAX,
     .def = "1",
     .help = "contexts served at once"},
    {.id = O_MTP,
     .names = "--mtp, --spec-draft",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = INT32_MAX,
     .def = "0; 3 in --table when the model has an MTP block",
     .help = "MTP drafts per speculative step"},
    CLI_OPTS_CHUNK,
    {.id = O_THREADS,
     .names = "-t, --threads",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = INT32_MAX,
     .def = "all CPUs",
     .help = "threads (their scratch is in the plan)"},
    CLI_OPTS_KV_AUTO,
    {.id = O_BACKEND,
     .names = "--backend",
     .kind = CLI_CHOICE,
     .meta = "cpu|cuda",
     .def = "cpu",
     .help = "the device the plan is for",
     .group = "Devices"},
    {.id = O_TP,
     .names = "--tp, --tensor-parallel",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = SNUG_TP_MAX_RANKS,
     .def = "1",
     .help = "N devices, each with the budget: one table per rank (its slice of the weights, "
             "the KV and recurrent state of its heads, its buffers); --ctx max, --kv auto and "
             "--table answer for the fullest rank (docs/tensor-parallel.md)"},
    {.id = O_MMPROJ,
     .names = "--mmproj",
     .kind = CLI_TEXT,
     .meta = "FILE",
     .help = "with the vision tower: its weights, the encoder's work and buffers for the largest "
             "image, the decoded source and its resize scratch; the contexts reported leave "
             "room for them (docs/vision.md)",
     .group = "Images"},
    {.id = O_VPRESET,
     .names = "--vision-preset",
     .kind = CLI_TEXT,
     .meta = "qwen3.5",
     .help = "instead of --mmproj: the released Qwen3.5/3.6 tower projecting to the model's "
             "hidden size, as an f16 mmproj"},
    {.id = O_VBACKEND,
     .names = "--vision-backend",
     .kind = CLI_CHOICE,
     .meta = "cpu|cuda",
     .def = "the --backend",
     .help = "where the tower runs (on cuda its weights and activations are device items)"},
    {.id = O_MAX_PX,
     .names = "--max-image-pixels",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = SNUG_VISION_PIXELS_LIMIT,
     .def = "16777216",
     .help = "the largest image after the resize"},
    {.id = O_MAX_SRC,
     .names = "--max-source-pixels",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = SNUG_VISION_PIXELS_LIMIT,
     .def = "33554432",
     .help = "the largest decoded source image"},
    CLI_OPTS_CACHE,
    {.id = O_JSON,
     .names = "--json",
     .kind = CLI_SWITCH,
     .help = "JSON instead of the table",
     .group = "Output"},
    {0},
};
const struct cli_command cli_cmd_plan = {
    .name = "plan",
    .run = cmd_plan,
    .usage = "(-m M.gguf | --preset NAME --weights TYPE) [--budget SIZE] [--ctx N|max] "
             "[--kv F|auto] [--mtp N] [--slots N] [--chunk N|auto] [--table] [--json]\n"
             "... --tp N\n"
             "... (--mmproj MMPROJ.gguf | --vision-preset qwen3.5) [--max-image-pixels N]",
    .summary = "the memory plan and the largest context for a budget",
    .about = "the memory plan: every buffer to the byte, the largest context that fits a budget, "
             "`--kv auto` the choice run and serve make (with their flags), `--table` the "
             "largest context per KV format and MTP off/on — docs/memory.md, docs/PICKER.md; "
             "`--tp N`: one table per rank of N GPUs — docs/tensor-parallel.md; with the vision "
             "tower, the contexts leave room for it — docs/vision.md; the prefix cache's tiers "
             "— docs/prefix-cache.md",
    .opts = OPTS,
};

int cmd_plan(int argc, char **argv) {
    const char *model = NULL, *preset = NULL, *weights = NULL, *ctx_arg = NULL;
    const char *sets[64];
    int n_sets = 0;
    uint64_t budget = 0;
    bool json = false, table = false;
    struct plan_vision vis = {0};
    const char *mmproj = NULL, *vpreset = NULL;
    int vbackend = -1; /* --vision-backend; unset: where the model runs */
    long long max_img = SNUG_VISION_MAX_PIXELS, max_src = SNUG_VISION_MAX_SOURCE_PIXELS;
    struct snug_plan_limits lim = snug_plan_limits_default();
    lim.n_chunk = SNUG_PLAN_CHUNK_AUTO; /* --chunk: chosen once the context is settled */
    struct cli_kv kv = CLI_KV_DEFAULT;
    kv.allow_auto = true;
    struct snug_plan_cache_flags cache = {0};
    long tp = 1;
    long threads = sysconf(_SC_NPROCESSORS_ONLN);
    lim.n_threads = threads > 0 ? (int32_t)threads : 1;
    struct cli_args args;
    struct cli_val v;
    int r;
    cli_args_init(&args, &cli_cmd_plan, argc, argv);
    while ((r = cli_args_next(&args, &v)) > 0) {
        if (!cli_kv_opt(&args, r, &v, &kv)) return 2;
        if (r == CLI_O_KV || r == CLI_O_KV_K || r == CLI_O_KV_V) lim.kv_type = cli_kv_code(&kv);
        if (!cli_cache_opt(r, &v, &cache)) return 2;
        cli_chunk_opt(r, &v, &lim.n_chunk);
        switch (r) {
        case O_MODEL:
            model = v.s;
            break;
        case O_PRESET:
            preset = v.s;
            break;
        case O_WEIGHTS:
            weights = v.s;
            break;
        case O_SET:
            if (n_sets == 64) return cli_args_bad(&args, &v, "at most 64 --set options"), 2;
            sets[n_sets++] = v.s;
            break;
        case O_CTX:
            ctx_arg = v.s;
            break; /* checked: 1..INT32_MAX or max */
        case O_VRAM_BUDGET:
            lim.backend = SNUG_BACKEND_CUDA; /* fall through */
        case O_BUDGET:
            if (!v.size) return cli_args_bad(&args, &v, "expected a size above 0"), 2;
            budget = v.size;
            break;
        case O_BACKEND:
            lim.backend = v.choice ? SNUG_BACKEND_CUDA : SNUG_BACKEND_CPU;
            break;
        case O_MTP:
            lim.n_draft = (int32_t)v.i;
            break;
        case O_SLOTS:
            lim.n_slots = (int32_t)v.i;
            break;
        case O_THREADS:
            lim.n_threads = (int32_t)v.i;
            break;
        case O_TP:
            tp = (long)v.i;
            break;
        case O_MMPROJ:
            mmproj = v.s;
            break;
        case O_VPRESET:
            vpreset = v.s;
            break;
        case O_VBACKEND:
            vbackend = v.choice;
            break;
        case O_MAX_PX:
            max_img = v.i;
            break;
        case O_MAX_SRC:
            max_src = v.i;
            break;
        case O_JSON:
            json = true;
            break;
        case O_TABLE:
            table = true;
            break;
        }
    }
    if (r != CLI_END) return CLI_EXIT(r);
    if (!model == !preset || (preset && !weights) || (model && (weights || n_sets)))
        return cli_usage_error(&cli_cmd_plan,
                               "give either -m MODEL.gguf, or --preset NAME --weights TYPE");

    struct snug_err err = {0};
    struct snug_hparams hp;
    struct snug_plan_weights w;
    struct snug_model *m = NULL;
    const char *what = model ? model : preset;
    if (model) { /* header + tensor table: the file is mapped, no weight page is touched */
        if (snug_model_load(&m, &(struct snug_model_params){.path = model, .n_threads = 1}, &err))
            return cli_fail("plan", &err);
        hp = m->hp;
        snug_plan_weights_from_gguf(m->gguf, &w);
    } else {
        if (snug_preset_find(preset, &hp, &err)) return cli_fail("plan", &err);
        for (int k = 0; k < n_sets; k++)
            if (snug_preset_set(&hp, sets[k], &err)) return cli_fail("plan", &err);
        if (snug_plan_weights_from_recipe(&hp, weights, &w, &err)) return cli_fail("plan", &err);
    }
    /* --tp N: every rank's weights; the fullest rank decides every answer below (the ranks
     * differ only there: the LM head's uneven vocabulary rows, the copies) */
    static struct snug_plan_weights w_rank[SNUG_TP_MAX_RANKS];
    const struct snug_plan_weights w_one = w;
    if (tp > 1) {
        int32_t R = (int32_t)tp, full = 0;
        for (int32_t r = 0; r < R; r++) {
            int rc = m ? snug_plan_weights_rank_from_gguf(m->gguf, &hp, R, r, &w_rank[r], &err)
                       : snug_plan_weights_rank_from_recipe(&hp, weights, R, r, &w_rank[r], &err);
            if (rc) {
                snug_model_free(m);
                return cli_fail("plan", &err);
            }
            if (w_rank[r].total > w_rank[full].total) full = r;
        }
        w = w_rank[full];
        lim.n_ranks = R;
        lim.rank = full;
    }
    snug_model_free(m);
    if (mmproj && vpreset) {
        fprintf(stderr, "snug plan: give --mmproj FILE or --vision-preset NAME, not both\n");
        return 2;
    }
    if (mmproj || vpreset) { /* the tower's items (src/vision/vision_plan.c) */
        struct snug_vision_hparams vh;
        uint64_t vw = 0;
        if (mmproj) {
            struct snug_vision *vm = NULL;
            if (snug_vision_load(&vm, mmproj, &err)) return cli_fail("plan", &err);
            vh = *snug_vision_hparams(vm);
            vw = snug_vision_weight_bytes(vm);
            snug_vision_free(vm);
            if ((uint32_t)vh.out_dim != hp.n_embd) {
                fprintf(stderr,
                        "snug plan: %s projects to %d but the model's hidden size is %u: is it "
                        "this model's mmproj?\n",
                        mmproj, vh.out_dim, hp.n_embd);
                return 1;
            }
        } else if (snug_vision_preset(vpreset, (int32_t)hp.n_embd, &vh, &vw, &err)) {
            return cli_fail("plan", &err);
        }
        if (vbackend < 0) vbackend = lim.backend == SNUG_BACKEND_CUDA;
        if (snug_vision_plan_make(&vh, vw, max_img, max_src, lim.n_threads, vbackend, &vis.vp,
                                  &err))
            return cli_fail("plan", &err);
        vis.on = true;
        vis.what = mmproj ? mmproj : vpreset;
        vis.budget_bytes = lim.backend == SNUG_BACKEND_CUDA ? snug_vision_plan_device_total(&vis.vp)
                                                            : snug_vision_plan_total(&vis.vp);
    }
    /* --cache-ram (auto: the server's rule, plan_cache.h): on the cpu the RAM tier is part of
     * the budget, so the contexts below are those it leaves room for; on cuda it is sized once
     * the plan is made, in the host memory the plan's host items leave */
    char cache_why[256] = "";
    bool cache_given = cache.ram_bytes != 0;
    if (lim.backend != SNUG_BACKEND_CUDA)
        snug_plan_cache_auto(&cache, lim.backend, budget, w.total, 0, cache_why, sizeof cache_why);
    uint64_t cache_cpu = 0; /* what the tier's item may take on the cpu (0 on cuda) */
    if (lim.backend != SNUG_BACKEND_CUDA &&
        snug_plan_cache_reserve(&hp, &w, &lim, &cache, &cache_cpu, &err))
        return cli_fail("plan", &err);
    if (table) return plan_table(what, &hp, &w, &lim, budget, json, &vis, cache_cpu);
    /* with vision, the contexts below are those the tower leaves room for */
    uint64_t text_budget = budget;
    if (budget && vis.budget_bytes) {
        if (vis.budget_bytes >= budget) {
            fprintf(stderr, "snug plan: the vision tower alone (%.2f GiB) exceeds the budget\n",
                    (double)vis.budget_bytes / 1073741824.0);
            return 1;
        }
        text_budget = budget - vis.budget_bytes;
    }
    uint64_t sized_budget = text_budget; /* and what the cpu's prefix cache leaves */
    if (budget && cache_cpu) {
        if (cache_cpu >= text_budget) {
            fprintf(stderr, "snug plan: the prefix cache (%.2f GiB) takes the whole budget\n",
                    (double)cache_cpu / 1073741824.0);
            return 1;
        }
        sized_budget = text_budget - cache_cpu;
    }

    /* --kv auto: the choice run and serve make with these settings, then its plan below */
    char auto_line[768] = "";
    static struct snug_plan_auto a;
    bool kv_chosen = false;
    enum snug_plan_chunk_why chunk_why = SNUG_PLAN_CHUNK_GIVEN;
    uint64_t chunk_budget = sized_budget;
    if (lim.kv_type == SNUG_PLAN_KV_AUTO) {
        if (!budget) {
            fprintf(stderr, "snug plan: --kv auto needs --budget SIZE\n");
            return 2;
        }
        struct snug_plan_auto_req req = {.lim = lim, .budget = text_budget, .reserve = cache_cpu};
        req.lim.n_ctx = 0;
        if (ctx_arg && strcmp(ctx_arg, "max")) {
            char *end;
            long long c = strtoll(ctx_arg, &end, 10);
            if (*end || end == ctx_arg || c < 1 || c > INT32_MAX) {
                fprintf(stderr, "snug plan: --ctx '%s': expected 1..%d or max\n", ctx_arg,
                        INT32_MAX);
                return 2;
            }
            req.lim.n_ctx = c;
        }
        if (snug_plan_auto(&hp, &w, &req, &a, &err)) return cli_fail("plan", &err);
        /* the flags repeat the whole budget (serve --mmproj takes the tower off it again) */
        if (vis.budget_bytes && a.budget) a.budget += vis.budget_bytes;
        a.has_cache = cache_given;
        kv_chosen = true; /* its line is written once the cache is sized (below) */
        lim.kv_type = a.kv_type;
        ctx_arg = NULL;
        lim.n_ctx = a.n_ctx;
        chunk_why = a.chunk_why;
        chunk_budget = a.chunk_budget;
        lim.n_chunk = a.n_chunk;
    }
    /* the contexts below are the base chunk's: --chunk auto chooses in what they leave */
    struct snug_plan_limits lim_ctx = lim;
    if (lim_ctx.n_chunk == SNUG_PLAN_CHUNK_AUTO) lim_ctx.n_chunk = SNUG_PLAN_CHUNK_BASE;

    /* the largest context per KV type (json), and for the chosen one */
    int64_t max_per_kv[8] = {0};
    int n_kv = 0;
    for (; snug_plan_kv_names[n_kv] && n_kv < 8; n_kv++) {
        struct snug_plan_limits l = lim_ctx;
        l.kv_type = n_kv;
        max_per_kv[n_kv] = budget ? snug_plan_max_ctx(&hp, &w, &l, sized_budget, 0) : -1;
    }
    int64_t max_ctx = budget ? snug_plan_max_ctx(&hp, &w, &lim_ctx, sized_budget, 0) : -1;
    char kv_name[24];
    snug_kvfmt_code_name(lim.kv_type, kv_name, sizeof kv_name);
    if (ctx_arg && !strcmp(ctx_arg, "max")) {
        if (!budget) {
            fprintf(stderr, "snug plan: --ctx max needs --budget SIZE\n");
            return 2;
        }
        if (max_ctx == 0) {
            fprintf(stderr,
                    "snug plan: %s: not even a 1-token context fits %.2f GiB (the weights and "
                    "fixed buffers exceed it)\n",
                    what, (double)budget / 1073741824.0);
            return 1;
        }
        lim.n_ctx = max_ctx;
    } else if (ctx_arg) {
        char *end;
        long long c = strtoll(ctx_arg, &end, 10);
        if (*end || end == ctx_arg || c < 1 || c > INT32_MAX) {
            fprintf(stderr, "snug plan: --ctx '%s': expected 1..%d or max\n", ctx_arg, INT32_MAX);
            return 2;
        }
        lim.n_ctx = c;
    }
    /* the chunk, once the context is settled (snug_plan_chunk: what run and serve choose) */
    if (!kv_chosen) /* (--kv auto chose it with the context) */
        lim.n_chunk = snug_plan_chunk(&hp, &w, &lim, chunk_budget, &chunk_why);
    char chunk_line[128];
    snug_plan_chunk_str(lim.n_chunk, chunk_why, chunk_budget, chunk_line, sizeof chunk_line);

    struct snug_plan p;
    if (snug_plan_make(&hp, &w, &lim, &p, &err)) return cli_fail("plan", &err);
    if (lim.backend == SNUG_BACKEND_CUDA) /* the host items of this plan and the tower's */
        snug_plan_cache_auto(&cache, lim.backend, 0, w.total,
                             snug_plan_host_bytes(&p) +
                                 (vis.on ? snug_vision_plan_total(&vis.vp) : 0),
                             cache_why, sizeof cache_why);
    if (kv_chosen) {
        a.cache_ram = cache.ram_bytes;
        snug_plan_auto_flags(&a, auto_line, sizeof auto_line);
    }
    uint64_t cache_disk = 0;
    if (snug_plan_add_cache(&hp, &p, &cache, &cache_disk, &err)) return cli_fail("plan", &err);
    if (vis.on && snug_vision_plan_add(&vis.vp, &p, &err)) return cli_fail("plan", &err);
    const bool fits = !budget || p.device_total <= budget;
    if (json) {
        printf("{\"model\": ");
        json_str(what);
        printf(", \"arch\": ");
        json_str(hp.arch);
        printf(", \"backend\": \"%s\", \"kv\": \"%s\", \"ctx\": %lld, \"slots\": %d, "
               "\"chunk\": %d, \"mtp\": %d, \"threads\": %d, \"n_ctx_train\": %llu",
               lim.backend == SNUG_BACKEND_CUDA ? "cuda" : "cpu", kv_name, (long long)p.lim.n_ctx,
               p.lim.n_slots, p.lim.n_chunk, p.lim.n_draft, p.lim.n_threads,
               (unsigned long long)hp.n_ctx_train);
        printf(", \"chunk_why\": ");
        json_str(chunk_line);
        if (budget)
            printf(", \"budget\": %llu, \"fits\": %s, \"max_ctx\": %lld",
                   (unsigned long long)budget, fits ? "true" : "false", (long long)max_ctx);
        else
            printf(", \"budget\": null, \"fits\": true, \"max_ctx\": null");
        printf(", \"max_ctx_per_kv\": {");
        for (int k = 0; k < n_kv; k++) {
            printf("%s\"%s\": ", k ? ", " : "", snug_plan_kv_names[k]);
            if (budget)
                printf("%lld", (long long)max_per_kv[k]);
            else
                printf("null");
        }
        printf("}, \"kv_types\": [");
        for (int k = 0; k < n_kv; k++) printf("%s\"%s\"", k ? ", " : "", snug_plan_kv_names[k]);
        printf("], \"weights_bytes\": %llu, \"total_bytes\": %llu, \"all_bytes\": %llu",
               (unsigned long long)w.total, (unsigned long long)p.device_total,
               (unsigned long long)p.total);
        printf(", \"cache_disk_bytes\": %llu", (unsigned long long)cache_disk);
        if (vis.on)
            printf(", \"vision\": {\"weights_bytes\": %llu, \"work_bytes\": %llu, "
                   "\"image_bytes\": %llu, \"source_bytes\": %llu, \"max_image_pixels\": %lld, "
                   "\"max_source_pixels\": %lld, \"image_tokens\": %lld, \"image_patches\": "
                   "%lld, \"backend\": \"%s\", \"device_weights_bytes\": %llu, "
                   "\"device_work_bytes\": %llu, \"device_inputs_bytes\": %llu, "
                   "\"host_stage_bytes\": %llu}",
                   (unsigned long long)vis.vp.weight_bytes, (unsigned long long)vis.vp.work_bytes,
                   (unsigned long long)vis.vp.image_bytes, (unsigned long long)vis.vp.source_bytes,
                   max_img, max_src, (long long)vis.vp.max_tokens, (long long)vis.vp.max_patches,
                   vis.vp.backend ? "cuda" : "cpu", (unsigned long long)vis.vp.device_weight_bytes,
                   (unsigned long long)vis.vp.device_work_bytes,
                   (unsigned long long)vis.vp.device_inputs_bytes,
                   (unsigned long long)vis.vp.host_stage_bytes);
        printf(", \"items\": {");
        for (int k = 0; k < p.n_items; k++) {
            printf("%s", k ? ", " : "");
            json_str(p.items[k].name);
            printf(": %llu", (unsigned long long)p.items[k].bytes);
        }
        printf("}, \"per_slot\": [");
        for (int k = 0, first = 1; k < p.n_items; k++)
            if (p.items[k].scope == SNUG_PLAN_PER_SLOT) {
                printf("%s", first ? "" : ", ");
                json_str(p.items[k].name);
                first = 0;
            }
        printf("], \"model_bytes\": %llu, \"slot_bytes\": %llu",
               (unsigned long long)p.model_device_bytes, (unsigned long long)p.slot_device_bytes);
        printf(", \"estimated\": [");
        for (int k = 0, first = 1; k < p.n_items; k++)
            if (p.items[k].estimated) {
                printf("%s", first ? "" : ", ");
                json_str(p.items[k].name);
                first = 0;
            }
        printf("]");
        if (auto_line[0]) {
            printf(", \"auto\": ");
            json_str(auto_line);
        }
        printf(", \"tp\": %ld, \"one_device_weights_bytes\": %llu", tp,
               (unsigned long long)w_one.total);
        if (tp > 1) {
            printf(", \"deciding_rank\": %d, \"ranks\": [", lim.rank);
            for (int32_t r = 0; r < (int32_t)tp; r++) {
                struct snug_plan pr;
                struct snug_plan_limits lr = p.lim;
                lr.rank = r;
                if (snug_plan_make(&hp, &w_rank[r], &lr, &pr, &err)) return cli_fail("plan", &err);
                printf("%s{\"rank\": %d, \"weights_bytes\": %llu, \"replicated_bytes\": %llu, "
                       "\"total_bytes\": %llu, \"items\": {",
                       r ? ", " : "", r, (unsigned long long)w_rank[r].total,
                       (unsigned long long)w_rank[r].replicated,
                       (unsigned long long)pr.device_total);
                for (int k = 0; k < pr.n_items; k++) {
                    printf("%s", k ? ", " : "");
                    json_str(pr.items[k].name);
                    printf(": %llu", (unsigned long long)pr.items[k].bytes);
                }
                printf("}}");
            }
            printf("]");
        }
        printf("}\n");
        return fits ? 0 : 1;
    }
    printf("snug plan: %s (%s), ctx %lld, %d slot%s, chunk %d, kv %s, mtp %d, %s, %d threads\n",
           what, hp.arch, (long long)p.lim.n_ctx, p.lim.n_slots, p.lim.n_slots == 1 ? "" : "s",
           p.lim.n_chunk, kv_name, p.lim.n_draft, lim.backend == SNUG_BACKEND_CUDA ? "cuda" : "cpu",
           p.lim.n_threads);
    printf("chunk %s\n", chunk_line);
    if (auto_line[0]) printf("--kv auto: %s\n", auto_line);
    char buf[8192];
    if (tp > 1)
        printf("tensor parallel over %ld devices (docs/tensor-parallel.md); rank %d holds the "
               "most and decides the context%s:\n",
               tp, lim.rank, budget ? " (the budget is each device's)" : "");
    snug_plan_format(&p, budget, buf, sizeof buf);
    fputs(buf, stdout);
    for (int32_t r = 0; tp > 1 && r < (int32_t)tp; r++) {
        if (r == lim.rank) continue;
        struct snug_plan pr;
        struct snug_plan_limits lr = p.lim;
        lr.rank = r;
        if (snug_plan_make(&hp, &w_rank[r], &lr, &pr, &err)) return cli_fail("plan", &err);
        printf("rank %d of %ld:\n", r, tp);
        snug_plan_format(&pr, budget, buf, sizeof buf);
        fputs(buf, stdout);
    }
    if (tp > 1) {
        uint64_t copies = 0; /* rank 0 owns the whole tensors; each other rank holds copies */
        for (int32_t r = 0; r < (int32_t)tp; r++) copies = SNUG_MAX(copies, w_rank[r].replicated);
        printf("weights: %.2f GiB on one device; %.2f GiB on the fullest rank; the other ranks "
               "hold up to %.2f GiB of copies (tensors every rank holds whole, replicated KV "
               "heads)\n",
               (double)w_one.total / 1073741824.0, (double)w.total / 1073741824.0,
               (double)copies / 1073741824.0);
    }
    if (vis.on)
        printf("vision (%s): images up to %lld pixels after the resize: %lld patches, %lld "
               "context tokens each (in the ctx above)\n",
               vis.what, max_img, (long long)vis.vp.max_patches, (long long)vis.vp.max_tokens);
    if (cache_given)
        printf("prefix cache (ram): %.2f GiB (%s)\n", (double)cache.ram_bytes / 1073741824.0,
               cache_why);
    if (cache_disk)
        printf("prefix cache (disk): %.2f GiB in %s (disk, not memory)\n",
               (double)cache_disk / 1073741824.0, cache.disk_dir);
    if (budget) {
        for (int k = 0; k < n_kv; k++) {
            printf("largest context that fits %.2f GiB%s with KV %s: %lld%s\n",
                   (double)budget / 1073741824.0, tp > 1 ? " per device" : "",
                   snug_plan_kv_names[k], (long long)max_per_kv[k],
                   hp.n_ctx_train && (uint64_t)max_per_kv[k] == hp.n_ctx_train
                       ? " (the trained context; more would fit)"
                       : "");
        }
        if (!fits) {
            fprintf(stderr,
                    "snug plan: does not fit: %.2f GiB planned, budget %.2f GiB; the largest "
                    "context that fits is %lld\n",
                    (double)p.device_total / 1073741824.0, (double)budget / 1073741824.0,
                    (long long)max_ctx);
            return 1;
        }
    }
    return 0;
}
