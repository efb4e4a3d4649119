/* main.c — `snug <command> [args]`: dispatch to the subcommands, each declared once as a
 * struct cli_command (cli_args.h) in its cmd_<name>.c; the list below is the order of
 * `snug --help` and of the README's command table. Read next: cli_args.h. */
#include "cli.h"

#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct cli_command *const cli_commands[] = {
    &cli_cmd_run,      &cli_cmd_serve,   &cli_cmd_plan,        &cli_cmd_verify,
    &cli_cmd_stress,   &cli_cmd_bench,   &cli_cmd_bench_local, &cli_cmd_info,
    &cli_cmd_tokenize, &cli_cmd_logits,  &cli_cmd_perplexity,  &cli_cmd_vision,
    &cli_cmd_quantize, &cli_cmd_imatrix, &cli_cmd_gen,
};
const int cli_n_commands = (int)(sizeof cli_commands / sizeof cli_commands[0]);

const struct cli_command *cli_command_find(const char *name) {
    for (int k = 0; k < cli_n_commands; k++)
        if (!strcmp(cli_commands[k]->name, name)) return cli_commands[k];
    return NULL;
}

int cli_fail(const char *cmd, const struct snug_err *err) {
    fprintf(stderr, "snug %s: %s\n", cmd, err && err->msg[0] ? err->msg : "failed");
    return 1;
}

#ifndef SNUG_VERSION
#define SNUG_VERSION "0.0.0"
#endif
#ifdef SNUG_HAVE_COMMIT_H
#include "snug_commit.h" /* SNUG_GIT_COMMIT at build time (cmake/snug_commit.cmake) */
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
    if (argc < 2) {
        cli_help_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        cli_help_usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "help")) return cli_help_main(argc - 1, argv + 1);
    const struct cli_command *c = cli_command_find(argv[1]);
    if (c) return c->run(argc - 1, argv + 1);
    fprintf(stderr, "snug: unknown command '%s'\n\n", argv[1]);
    cli_help_usage(stderr);
    return 2;
}
