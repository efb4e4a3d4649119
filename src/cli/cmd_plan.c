/* cmd_plan.c — `snug plan`: the memory plan of a model file (metadata only: no weights are
 * read) or of a preset shape with a weight recipe, as a budget table or JSON, and with
 * `--ctx max` the largest context that fits the budget. The numbers are snug_plan_make's,
 * the same the context allocates from. Read next: src/plan/plan.h, docs/memory.md.
 */
#include "cli.h"

#include "kv/kvfmt.h"
#include "model/presets.h"
#include "plan/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(void) {
    fprintf(
        stderr,
        "usage: snug plan (-m MODEL.gguf | --preset NAME --weights TYPE [--set key=value]...)\n"
        "                 [--budget SIZE] [--ctx N|max] [--kv KV] [--kv-k KV] [--kv-v KV]\n"
        "                 [--mtp N] [--slots N] [--chunk N] [--threads N] [--backend cpu|cuda]\n"
        "                 [--json]\n"
        "  presets: demo demo-moe qwen3.6-27b qwen3.6-35b-a3b; TYPE: a quantize recipe\n"
        "  (q4_k_m q5_k_m q6_k q8_0 f16 ...); KV: the attention cache format, f16 f32 bf16\n"
        "  q8_0 fp8 tq4 tq3 (--kv both, --kv-k / --kv-v each; docs/kv-formats.md);\n"
        "  SIZE: 23.5GiB, 24G, 512M or bytes (binary units)\n"
        "  --ctx max needs --budget and reports the largest context that fits (per KV type\n"
        "  in --json: max_ctx_per_kv). Default --ctx 4096; the budget counts host memory on\n"
        "  cpu and device memory on cuda (cuda overheads are estimates, marked ~).\n");
}

/* A JSON string body (names here are plain ASCII, but escape the two that matter). */
static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') putchar('\\');
        putchar(*s);
    }
    putchar('"');
}

int cmd_plan(int argc, char **argv) {
    const char *model = NULL, *preset = NULL, *weights = NULL, *ctx_arg = NULL;
    const char *sets[64];
    int n_sets = 0;
    uint64_t budget = 0;
    bool json = false;
    struct snug_plan_limits lim = snug_plan_limits_default();
    struct cli_kv kv = CLI_KV_DEFAULT;
    long threads = sysconf(_SC_NPROCESSORS_ONLN);
    lim.n_threads = threads > 0 ? (int32_t)threads : 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        int r;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--preset")) {
            if (!(preset = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--weights")) {
            if (!(weights = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--set")) {
            if (n_sets == 64 || !(sets[n_sets++] = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) {
            if (!(ctx_arg = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--budget")) {
            const char *s = cli_value(argc, argv, &i);
            if (!s) return 2;
            if (!snug_plan_parse_size(s, &budget) || budget == 0) {
                fprintf(stderr,
                        "snug plan: --budget '%s': expected a size like 23.5GiB, 24G or "
                        "a byte count\n",
                        s);
                return 2;
            }
        } else if ((r = cli_kv_flag(argc, argv, &i, "plan", &kv)) != 0) {
            if (r < 0) return 2;
            lim.kv_type = cli_kv_code(&kv);
        } else if (!strcmp(a, "--backend")) {
            const char *s = cli_value(argc, argv, &i);
            if (!s) return 2;
            if (!strcmp(s, "cpu"))
                lim.backend = SNUG_BACKEND_CPU;
            else if (!strcmp(s, "cuda"))
                lim.backend = SNUG_BACKEND_CUDA;
            else {
                fprintf(stderr, "snug plan: --backend '%s': expected cpu or cuda\n", s);
                return 2;
            }
        } else if (!strcmp(a, "--mtp") || !strcmp(a, "--slots") || !strcmp(a, "--chunk") ||
                   !strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (!cli_int(argc, argv, &i, &v)) return 2;
            if (v < 0 || v > INT32_MAX || (v == 0 && strcmp(a, "--mtp"))) {
                fprintf(stderr, "snug plan: %s %ld: out of range\n", a, v);
                return 2;
            }
            if (!strcmp(a, "--mtp")) lim.n_draft = (int32_t)v;
            if (!strcmp(a, "--slots")) lim.n_slots = (int32_t)v;
            if (!strcmp(a, "--chunk")) lim.n_chunk = (int32_t)v;
            if (!strcmp(a, "--threads") || !strcmp(a, "-t")) lim.n_threads = (int32_t)v;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "snug plan: unknown option '%s'\n", a);
            usage();
            return 2;
        }
    }
    if (!model == !preset || (preset && !weights) || (model && (weights || n_sets))) {
        fprintf(stderr, "snug plan: give either -m MODEL.gguf, or --preset NAME --weights TYPE\n");
        usage();
        return 2;
    }

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
    snug_model_free(m);

    /* the largest context per KV type (json), and for the chosen one */
    int64_t max_per_kv[8] = {0};
    int n_kv = 0;
    for (; snug_plan_kv_names[n_kv] && n_kv < 8; n_kv++) {
        struct snug_plan_limits l = lim;
        l.kv_type = n_kv;
        max_per_kv[n_kv] = budget ? snug_plan_max_ctx(&hp, &w, &l, budget, 0) : -1;
    }
    int64_t max_ctx = budget ? snug_plan_max_ctx(&hp, &w, &lim, budget, 0) : -1;
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

    struct snug_plan p;
    if (snug_plan_make(&hp, &w, &lim, &p, &err)) return cli_fail("plan", &err);
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
        printf("]}\n");
        return fits ? 0 : 1;
    }
    printf("snug plan: %s (%s), ctx %lld, %d slot%s, chunk %d, kv %s, mtp %d, %s, %d threads\n",
           what, hp.arch, (long long)p.lim.n_ctx, p.lim.n_slots, p.lim.n_slots == 1 ? "" : "s",
           p.lim.n_chunk, kv_name, p.lim.n_draft, lim.backend == SNUG_BACKEND_CUDA ? "cuda" : "cpu",
           p.lim.n_threads);
    char buf[8192];
    snug_plan_format(&p, budget, buf, sizeof buf);
    fputs(buf, stdout);
    if (budget) {
        for (int k = 0; k < n_kv; k++) {
            printf("largest context that fits %.2f GiB with KV %s: %lld%s\n",
                   (double)budget / 1073741824.0, snug_plan_kv_names[k], (long long)max_per_kv[k],
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
