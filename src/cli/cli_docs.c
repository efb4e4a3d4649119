/* cli_docs.c — `snug help`: a command's help (`snug help CMD` = `snug CMD --help`), and, with
 * --markdown, the tables the documentation carries, printed from the commands' declarations
 * (cli_args.h): `snug help --markdown commands` is the README's command table (one row per
 * command) and `snug help --markdown flags CMD` a flag table per group (docs/server.md has
 * serve's). The committed copies sit between marker lines and tests/py/test_cli_docs.py fails
 * when they differ from this output; scripts/gen_cli_docs.py rewrites them.
 * Read next: cli_args.h. */
#include "cli_args.h"

#include <string.h>

/* Markdown table cell text: '|' escaped, line breaks as spaces. */
static void cell(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", f);
        else if (*s == '\n')
            fputc(' ', f);
        else
            fputc(*s, f);
    }
}

/* The README's table: one row per command, its synopsis lines and what it does. */
static void markdown_commands(FILE *f) {
    fprintf(f, "| command | what it does |\n|---|---|\n");
    for (int k = 0; k < cli_n_commands; k++) {
        const struct cli_command *c = cli_commands[k];
        fprintf(f, "| ");
        for (const char *u = c->usage; *u;) {
            size_t n = strcspn(u, "\n");
            char line[512];
            snprintf(line, sizeof line, "snug %s %.*s", c->name, (int)n, u);
            fprintf(f, "%s`", u == c->usage ? "" : "<br>");
            cell(f, line);
            fprintf(f, "`");
            u += n + (u[n] == '\n');
        }
        fprintf(f, " | ");
        cell(f, c->about);
        fprintf(f, " |\n");
    }
    fprintf(
        f, "| `snug --version` | version, git commit, build options (CUDA on/off, SIMD level) |\n");
}

/* One table per group of the command's flags: spelling and value, default, what it does. */
static void markdown_flags(FILE *f, const struct cli_command *c) {
    const char *group = NULL;
    for (const struct cli_opt *o = c->opts; o && o->id; o++) {
        if (o == c->opts || (o->group && strcmp(o->group, group))) {
            if (o->group) group = o->group;
            fprintf(f, "%s**%s**\n\n| flag | default | what it does |\n|---|---|---|\n",
                    o == c->opts ? "" : "\n", group ? group : "Flags");
        }
        fprintf(f, "| `");
        cell(f, o->names);
        if (o->kind != CLI_SWITCH && o->meta) {
            fprintf(f, " ");
            cell(f, o->meta);
        }
        fprintf(f, "` | ");
        if (o->def) cell(f, o->def);
        fprintf(f, " | ");
        cell(f, o->help);
        if (o->more) {
            fprintf(f, ". ");
            cell(f, o->more);
        }
        if (o->flags & CLI_REPEAT) fprintf(f, " Repeatable.");
        fprintf(f, " |\n");
    }
}

static void help_usage(FILE *f) {
    fprintf(f, "usage: snug <command> [flags]   (snug <command> --help: its flags; snug --version: "
               "version and build)\n\ncommands:\n");
    for (int k = 0; k < cli_n_commands; k++)
        fprintf(f, "  %-11s %s\n", cli_commands[k]->name, cli_commands[k]->summary);
}

int cli_help_main(int argc, char **argv) {
    /* argv[0] is "help" */
    if (argc < 2) {
        help_usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--markdown")) {
        if (argc == 3 && !strcmp(argv[2], "commands")) {
            markdown_commands(stdout);
            return 0;
        }
        const struct cli_command *c =
            argc == 4 && !strcmp(argv[2], "flags") ? cli_command_find(argv[3]) : NULL;
        if (!c) {
            fprintf(stderr, "usage: snug help --markdown (commands | flags CMD)\n");
            return 2;
        }
        markdown_flags(stdout, c);
        return 0;
    }
    const struct cli_command *c = argc == 2 ? cli_command_find(argv[1]) : NULL;
    if (!c) {
        fprintf(stderr, "snug help: unknown command '%s'\n\n", argv[1]);
        help_usage(stderr);
        return 2;
    }
    cli_args_help(c, stdout);
    return 0;
}

void cli_help_usage(FILE *f) {
    help_usage(f);
}
