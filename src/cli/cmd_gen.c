/* cmd_gen.c — `snug gen`: write a random-weight qwen35 / qwen35moe model, or a random-weight
 * vision tower for one (src/tools/gen.h).
 *   snug gen --preset NAME --type TYPE -o OUT.gguf [--seed S] [--vocab-from F.gguf|tokenizer.json]
 *            [--set key=value ...] [--name NAME] [--from-weights DIR] [--add-vision-tokens]
 *   snug gen --mmproj-preset qwen3.5 (--text-model M.gguf | --set projection_dim=N) -o OUT.gguf
 *            [--type f16|bf16|f32] [--seed S] [--set key=value ...] [--name NAME]
 * Prints progress to stderr and a one-line summary (path, size, seconds) to stdout. */
#include "cli.h"

#include "core/core.h"
#include "quant/quant.h"
#include "tools/gen.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void usage(void) {
    fprintf(
        stderr,
        "usage: snug gen --preset NAME --type TYPE -o OUT.gguf [--seed S]\n"
        "                [--vocab-from F.gguf|tokenizer.json] [--set key=value ...]\n"
        "                [--from-weights DIR] [--name NAME]\n"
        "  --from-weights DIR: the tensor values from DIR/<tensor name>.f32 (float32, GGUF\n"
        "    layout; tools/train/train.py writes them) instead of random ones\n"
        "  presets: demo (tiny, built-in byte vocabulary), demo-moe, qwen3.6-27b,\n"
        "           qwen3.6-35b-a3b\n"
        "  types:   " SNUG_RECIPES_WRITABLE "\n"
        "  --set keys: arch n_vocab n_layer nextn_predict_layers context_length\n"
        "    embedding_length feed_forward_length attention.head_count\n"
        "    attention.head_count_kv attention.key_length rope.dimension_count\n"
        "    rope.freq_base attention.layer_norm_rms_epsilon ssm.conv_kernel ssm.state_size\n"
        "    ssm.group_count ssm.time_step_rank full_attention_interval expert_count\n"
        "    expert_used_count expert_feed_forward_length expert_shared_feed_forward_length\n"
        "\n"
        "       snug gen --mmproj-preset qwen3.5 (--text-model M.gguf | --set projection_dim=N)\n"
        "                -o MMPROJ.gguf [--type f16|bf16|f32] [--seed S] [--set key=value ...]\n"
        "  a random-weight vision tower (an mmproj as llama.cpp's converter writes it) for\n"
        "  `--mmproj`: qwen3.5 is the released Qwen3.5/3.6 tower (27 blocks, width 1152),\n"
        "  projecting to the text model's embedding_length; default --type f16\n"
        "  --set keys (clip.vision.*): block_count embedding_length feed_forward_length\n"
        "    attention.head_count patch_size spatial_merge_size image_size projection_dim\n"
        "    attention.layer_norm_epsilon\n");
}

struct progress {
    double t0, last;
};

static void on_progress(void *user, uint64_t done, uint64_t total) {
    struct progress *pr = user;
    double now = snug_time_s();
    if (now - pr->last < 2.0 && done != total) return;
    pr->last = now;
    fprintf(stderr, "\rsnug gen: %.1f / %.1f GiB (%.0f%%)", done / 1073741824.0,
            total / 1073741824.0, total ? 100.0 * done / total : 100.0);
    if (done == total) fprintf(stderr, "\n");
}

/* --mmproj-preset: the vision tower (gen_mmproj.c). */
static int gen_mmproj(const char *preset, const char *text_model, const char *type, const char *out,
                      const char **sets, int n_sets, long seed, const char *name) {
    struct snug_err err = {0};
    struct snug_gen_mmproj c;
    if (snug_gen_mmproj_preset(&c, preset, &err)) return cli_fail("gen", &err);
    if (text_model && snug_gen_mmproj_text_width(text_model, &c.out_dim, &err))
        return cli_fail("gen", &err);
    for (int i = 0; i < n_sets; i++)
        if (snug_gen_mmproj_set(&c, sets[i], &err)) return cli_fail("gen", &err);
    struct progress pr = {snug_time_s(), 0};
    struct snug_gen_params p = {
        .out_path = out,
        .type = type ? type : "f16",
        .seed = (uint64_t)seed,
        .name = name,
        .progress = on_progress,
        .progress_user = &pr,
    };
    if (snug_gen_mmproj_write(&c, &p, &err)) return cli_fail("gen", &err);
    struct stat st;
    double bytes = stat(out, &st) == 0 ? (double)st.st_size : 0;
    printf("wrote %s: mmproj %s (%u blocks, width %u, projection %u) %s, %.1f MiB in %.1f s\n", out,
           preset, c.depth, c.hidden, c.out_dim, p.type, bytes / 1048576.0, snug_time_s() - pr.t0);
    return 0;
}

int cmd_gen(int argc, char **argv) {
    const char *preset = NULL, *type = NULL, *out = NULL, *vocab = NULL, *name = NULL;
    const char *weights = NULL, *mmproj_preset = NULL, *text_model = NULL;
    bool vision_tokens = false;
    const char *sets[64];
    int n_sets = 0;
    long seed = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--preset")) {
            if (!(preset = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--mmproj-preset")) {
            if (!(mmproj_preset = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--text-model")) {
            if (!(text_model = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--add-vision-tokens")) {
            vision_tokens = true;
        } else if (!strcmp(a, "--type")) {
            if (!(type = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
            if (!(out = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--vocab-from")) {
            if (!(vocab = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--from-weights")) {
            if (!(weights = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--name")) {
            if (!(name = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--seed")) {
            if (!cli_int(argc, argv, &i, &seed)) return 2;
        } else if (!strcmp(a, "--set")) {
            const char *v = cli_value(argc, argv, &i);
            if (!v) return 2;
            if (n_sets == (int)(sizeof sets / sizeof sets[0])) {
                fprintf(stderr, "snug gen: too many --set options\n");
                return 2;
            }
            sets[n_sets++] = v;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "snug gen: unknown option '%s'\n", a);
            usage();
            return 2;
        }
    }
    if (mmproj_preset) {
        if (preset || vocab || weights || !out) {
            fprintf(stderr, "snug gen: --mmproj-preset needs -o and takes no --preset, "
                            "--vocab-from or --from-weights\n");
            usage();
            return 2;
        }
        return gen_mmproj(mmproj_preset, text_model, type, out, sets, n_sets, seed, name);
    }
    if (text_model) {
        fprintf(stderr, "snug gen: --text-model goes with --mmproj-preset\n");
        return 2;
    }
    if (!preset || !type || !out) {
        fprintf(stderr, "snug gen: --preset, --type and -o are required\n");
        usage();
        return 2;
    }
    struct snug_err err = {0};
    struct snug_gen_config c;
    if (snug_gen_preset(&c, preset, &err)) return cli_fail("gen", &err);
    for (int i = 0; i < n_sets; i++)
        if (snug_gen_set(&c, sets[i], &err)) return cli_fail("gen", &err);
    struct progress pr = {snug_time_s(), 0};
    struct snug_gen_params p = {
        .out_path = out,
        .type = type,
        .seed = (uint64_t)seed,
        .vocab_from = vocab,
        .name = name,
        .weights_dir = weights,
        .vision_tokens = vision_tokens,
        .progress = on_progress,
        .progress_user = &pr,
    };
    if (snug_gen_write(&c, &p, &err)) return cli_fail("gen", &err);
    struct stat st;
    double bytes = stat(out, &st) == 0 ? (double)st.st_size : 0;
    printf("wrote %s: %s %s, %.1f MiB in %.1f s\n", out, preset, type, bytes / 1048576.0,
           snug_time_s() - pr.t0);
    return 0;
}
