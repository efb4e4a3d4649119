/* main.c — `snug <command> [args]`: dispatch to the subcommands declared in cli.h. */
#include "cli.h"

#include "quant/quant.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct command COMMANDS[] = {
    {"run", cmd_run, "generate text: -m M.gguf -p TEXT [-n N] [--temp T] [--seed S]"},
    {"info", cmd_info, "architecture, hyper-parameters, tensor types and sizes: -m M.gguf"},
    {"tokenize", cmd_tokenize, "print token ids as JSON: -m M.gguf (--text S | --file F)"},
    {"logits", cmd_logits, "write [T][V] float32 logits: -m M.gguf --ids IDS.json -o OUT.f32"},
    {"perplexity", cmd_perplexity, "perplexity over windows: -m M.gguf --ids IDS.json"},
    {"vision", cmd_vision,
     "the vision tower over preprocessed patches: -m MMPROJ.gguf --pixels P.f32 --grid H W -o F"},
    {"gen", cmd_gen, "write a random-weight model: --preset NAME --type TYPE -o OUT.gguf"},
    {"quantize", cmd_quantize, "requantize a model: IN.gguf OUT.gguf TYPE"},
    {"imatrix", cmd_imatrix, "importance matrix of a text: -m M.gguf -f TEXT -o OUT.gguf"},
    {"plan", cmd_plan, "memory plan and largest context for a budget: -m M.gguf [--budget SIZE]"},
    {"serve", cmd_serve, "OpenAI-compatible server: -m M.gguf [--host H] [--port P]"},
    {"verify", cmd_verify, "functional checks of an OpenAI-compatible server: [--url U]"},
    {"stress", cmd_stress, "long-context boundary checks of a server: [--url U]"},
    {"bench", cmd_bench, "speed of a server: [--url U] [--json] [--svg F]"},
    {"bench-local", cmd_bench_local,
     "prompt/generation speed on this CPU: -m M.gguf [-p 512] [-n 128] [-t 2]"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: snug <command> [options]   (snug --version: version and build)\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-11s %s\n", COMMANDS[i].name, COMMANDS[i].help);
}

int cli_fail(const char *cmd, const struct snug_err *err) {
    fprintf(stderr, "snug %s: %s\n", cmd, err && err->msg[0] ? err->msg : "failed");
    return 1;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "snug: option %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_int(int argc, char **argv, int *i, long *out) {
    const char *v = cli_value(argc, argv, i);
    if (!v) return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v) {
        fprintf(stderr, "snug: option %s wants an integer, got '%s'\n", argv[*i - 1], v);
        return 0;
    }
    *out = x;
    return 1;
}

int cli_float(int argc, char **argv, int *i, double *out) {
    const char *v = cli_value(argc, argv, i);
    if (!v) return 0;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || *end || end == v) {
        fprintf(stderr, "snug: option %s wants a number, got '%s'\n", argv[*i - 1], v);
        return 0;
    }
    *out = x;
    return 1;
}

#ifndef SNUG_VERSION
#define SNUG_VERSION "0.0.0"
#endif
#ifndef SNUG_GIT_COMMIT
#define SNUG_GIT_COMMIT "unknown"
#endif

/* `snug --version`: version, the commit built, and the build options that change behaviour. */
static int version(void) {
#ifdef SNUG_HAVE_CUDA
    const char *cuda = "on";
#else
    const char *cuda = "off";
#endif
    printf("snug %s (commit %s)\nbuild: CUDA %s, SIMD %s (this CPU; SNUG_CPU overrides), %s\n",
           SNUG_VERSION, SNUG_GIT_COMMIT, cuda, snug_cpu_level_name(snug_cpu_level()),
#ifdef __OPTIMIZE__
           "optimized"
#else
           "debug"
#endif
    );
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")))
        return version();
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "snug: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
