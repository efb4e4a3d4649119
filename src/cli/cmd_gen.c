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

enum {
    O_PRESET = 1,
    O_MMPROJ_PRESET,
    O_TEXT_MODEL,
    O_VISION_TOKENS,
    O_TYPE,
    O_OUT,
    O_VOCAB,
    O_WEIGHTS,
    O_NAME,
    O_SEED,
    O_SET,
};
static const struct cli_opt OPTS[] = {
    {.id = O_PRESET,
     .names = "--preset",
     .kind = CLI_TEXT,
     .meta = "NAME",
     .help = "the shape: demo (tiny, built-in byte vocabulary), demo-moe, qwen3.6-27b, "
             "qwen3.6-35b-a3b",
     .group = "Text model"},
    {.id = O_TYPE,
     .names = "--type",
     .kind = CLI_TEXT,
     .meta = "TYPE",
     .def = "f16 for --mmproj-preset",
     .help = "the weight recipe: " SNUG_RECIPES_WRITABLE},
    {.id = O_OUT, .names = "-o, --out", .kind = CLI_TEXT, .meta = "OUT.gguf", .help = "the file"},
    {.id = O_VOCAB,
     .names = "--vocab-from",
     .kind = CLI_TEXT,
     .meta = "F.gguf|tokenizer.json",
     .def = "the preset's",
     .help = "the vocabulary of another model or of a Hugging Face tokenizer.json"},
    {.id = O_WEIGHTS,
     .names = "--from-weights",
     .kind = CLI_TEXT,
     .meta = "DIR",
     .help = "the tensor values from DIR/<tensor name>.f32 (float32, GGUF layout; "
             "tools/train/train.py writes them) instead of random ones"},
    {.id = O_VISION_TOKENS,
     .names = "--add-vision-tokens",
     .kind = CLI_SWITCH,
     .help = "append the vision tokens the vocabulary lacks"},
    {.id = O_MMPROJ_PRESET,
     .names = "--mmproj-preset",
     .kind = CLI_TEXT,
     .meta = "NAME",
     .help = "instead: a random-weight vision tower (an mmproj as llama.cpp's converter writes "
             "it) for --mmproj; qwen3.5 is the released Qwen3.5/3.6 tower (27 blocks, width 1152)",
     .group = "Vision tower"},
    {.id = O_TEXT_MODEL,
     .names = "--text-model",
     .kind = CLI_TEXT,
     .meta = "M.gguf",
     .help = "--mmproj-preset: project to this model's embedding_length (or --set "
             "projection_dim=N)"},
    {.id = O_SET,
     .names = "--set",
     .kind = CLI_TEXT,
     .meta = "key=value",
     .help = "override one hyper-parameter of the preset (the keys are listed below)",
     .group = "Both",
     .flags = CLI_REPEAT},
    {.id = O_SEED,
     .names = "--seed",
     .kind = CLI_INT,
     .meta = "S",
     .def = "0",
     .help = "the random weights' seed"},
    {.id = O_NAME, .names = "--name", .kind = CLI_TEXT, .meta = "NAME", .help = "general.name"},
    {0},
};
const struct cli_command cli_cmd_gen = {
    .name = "gen",
    .run = cmd_gen,
    .usage = "--preset NAME --type TYPE -o OUT.gguf [--set key=value]... [--from-weights DIR]\n"
             "--mmproj-preset qwen3.5 --text-model M.gguf -o MMPROJ.gguf [--type f16|bf16|f32]",
    .summary = "write a random-weight model or vision tower",
    .about = "a random-weight model: `demo`, `demo-moe`, `qwen3.6-27b`, `qwen3.6-35b-a3b`; with "
             "`--from-weights` the values come from trained float32 files (how the demo model is "
             "written). With `--mmproj-preset qwen3.5`: a random-weight vision tower of the "
             "released size (27 blocks, width 1152) for `--mmproj`, projecting to the text "
             "model's width, in the layout of llama.cpp's converter (docs/vision.md)",
    .notes = "--set keys of a text model: arch n_vocab n_layer nextn_predict_layers "
             "context_length embedding_length feed_forward_length attention.head_count "
             "attention.head_count_kv attention.key_length rope.dimension_count rope.freq_base "
             "attention.layer_norm_rms_epsilon ssm.conv_kernel ssm.state_size ssm.group_count "
             "ssm.time_step_rank full_attention_interval expert_count expert_used_count "
             "expert_feed_forward_length expert_shared_feed_forward_length\n\n"
             "--set keys of a vision tower (clip.vision.*): block_count embedding_length "
             "feed_forward_length attention.head_count patch_size spatial_merge_size image_size "
             "projection_dim attention.layer_norm_epsilon",
    .opts = OPTS,
};

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
    struct cli_args args;
    struct cli_val v;
    int r;
    cli_args_init(&args, &cli_cmd_gen, argc, argv);
    while ((r = cli_args_next(&args, &v)) > 0) {
        switch (r) {
        case O_PRESET:
            preset = v.s;
            break;
        case O_MMPROJ_PRESET:
            mmproj_preset = v.s;
            break;
        case O_TEXT_MODEL:
            text_model = v.s;
            break;
        case O_VISION_TOKENS:
            vision_tokens = true;
            break;
        case O_TYPE:
            type = v.s;
            break;
        case O_OUT:
            out = v.s;
            break;
        case O_VOCAB:
            vocab = v.s;
            break;
        case O_WEIGHTS:
            weights = v.s;
            break;
        case O_NAME:
            name = v.s;
            break;
        case O_SEED:
            seed = (long)v.i;
            break;
        case O_SET:
            if (n_sets == (int)(sizeof sets / sizeof sets[0]))
                return cli_args_bad(&args, &v, "at most %d --set options", n_sets), 2;
            sets[n_sets++] = v.s;
            break;
        }
    }
    if (r != CLI_END) return CLI_EXIT(r);
    if (mmproj_preset) {
        if (preset || vocab || weights || !out)
            return cli_usage_error(&cli_cmd_gen, "--mmproj-preset needs -o and takes no "
                                                 "--preset, --vocab-from or --from-weights");
        return gen_mmproj(mmproj_preset, text_model, type, out, sets, n_sets, seed, name);
    }
    if (text_model) {
        fprintf(stderr, "snug gen: --text-model goes with --mmproj-preset\n");
        return 2;
    }
    if (!preset || !type || !out)
        return cli_usage_error(&cli_cmd_gen, "--preset, --type and -o are required");
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
