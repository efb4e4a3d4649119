/* cli_args.h — the one argument parser of the `snug` subcommands. Each command declares its
 * flags once, as a table of struct cli_opt (every spelling, the kind of value and its name, the
 * range, the default, the help text and its group) inside a struct cli_command (the synopsis,
 * a one-line summary, what the command does); cli_args_next reads argv against that table.
 * `snug CMD --help` prints the table to stdout (cli_args_help), and `snug help --markdown`
 * prints the README's command table and the docs' flag tables from the same declarations
 * (cli_docs.c), so the help, the README and docs/server.md cannot disagree.
 * Invariants: a value is checked against its kind and range before the command sees it, and
 * every error names the flag as written and says what was expected; `--flag value` and
 * `--flag=value` are the same; a value is the next argument even when it starts with '-'.
 * Read next: cli_args.c (the parser and --help), cli_docs.c, any cmd_*.c (a table and its
 * switch). */
#ifndef SNUG_CLI_ARGS_H
#define SNUG_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum cli_kind {
    CLI_SWITCH, /* no value */
    CLI_TEXT,   /* any text (a path, a name, a list the command parses itself) */
    CLI_INT,    /* an integer, in [lo, hi] unless both are 0; `word` may stand instead */
    CLI_NUM,    /* a decimal number (strtod) */
    CLI_SIZE,   /* a byte count: 23.5GiB, 24G, 512MiB or plain bytes (snug_plan_parse_size) */
    CLI_CHOICE, /* one of the words of `meta`, separated by '|': "cpu|cuda" */
};

#define CLI_REPEAT 1u /* may be given several times; each occurrence is returned */

struct cli_opt {
    int id;            /* > 0: what cli_args_next returns for it; 0 ends the table */
    const char *names; /* every spelling, ", "-separated: "-m, --model" */
    enum cli_kind kind;
    const char *meta;  /* the value's name in help ("FILE", "N|max"); CLI_CHOICE: the words */
    long long lo, hi;  /* CLI_INT: the accepted range; both 0 = any */
    const char *word;  /* CLI_INT: a word accepted instead of a number ("max") */
    int n_values;      /* 0 = 1; 2 for a flag that takes two values ("--grid H W") */
    const char *def;   /* the default as help and docs say it; NULL = none worth saying */
    const char *help;  /* what it does: one or two sentences, shown by --help and the docs */
    const char *more;  /* the docs tables only: detail after `help` (markdown) */
    const char *group; /* the section it is listed under; NULL = the previous row's */
    unsigned flags;    /* CLI_REPEAT */
};

struct cli_command {
    const char *name;                  /* "serve" */
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
    const char *usage;                 /* synopsis lines after "snug NAME ", '\n'-separated */
    const char *summary;               /* one line for `snug --help` */
    const char *about;                 /* what it does (markdown): the README row and --help */
    const char *notes;                 /* printed after the flags by --help; NULL = none */
    const struct cli_opt *opts;        /* the table, ended by a row with id 0 */
    int max_positional;                /* arguments that are not flags (IN.gguf OUT.gguf TYPE) */
};

/* One value, checked against its flag's kind. */
struct cli_val {
    const char *s;  /* the value as written (every kind but CLI_SWITCH) */
    long long i;    /* CLI_INT (0 when `word` was given) */
    double f;       /* CLI_NUM */
    uint64_t size;  /* CLI_SIZE */
    int choice;     /* CLI_CHOICE: the index of the word in `meta` */
    bool word;      /* CLI_INT: the flag's `word` was given instead of a number */
    const char *s2; /* two-value flags: the second value (with i2 for CLI_INT) */
    long long i2;
};

/* What cli_args_next returns besides a flag's id. */
#define CLI_END        0  /* argv is read */
#define CLI_POSITIONAL -1 /* v->s is an argument that is not a flag */
#define CLI_HELP       -2 /* --help / -h: the help is printed; exit 0 */
#define CLI_BAD        -3 /* an error, printed; exit 2 */
/* The exit status for a CLI_HELP / CLI_BAD result. */
#define CLI_EXIT(r) ((r) == CLI_HELP ? 0 : 2)

struct cli_args {
    const struct cli_command *cmd;
    int argc;
    char **argv;
    int i;                     /* the next argument to read */
    int n_positional;          /* read so far */
    const struct cli_opt *opt; /* the flag just read */
    char flag[64];             /* as written, without "=value" */
};

void cli_args_init(struct cli_args *p, const struct cli_command *cmd, int argc, char **argv);
/* The next flag's id with its value in *v, or CLI_END / CLI_POSITIONAL / CLI_HELP / CLI_BAD. */
int cli_args_next(struct cli_args *p, struct cli_val *v);
/* A value the command rejects after the parser's checks: prints "snug CMD: FLAG 'VALUE':
 * <why>" (or "snug CMD: FLAG: <why>" for a switch) and returns CLI_BAD. */
int cli_args_bad(const struct cli_args *p, const struct cli_val *v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A usage error not tied to one flag ("-p TEXT is required"): prints "snug CMD: <why>" and a
 * pointer to --help to stderr; returns the exit status 2. */
int cli_usage_error(const struct cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* `snug CMD --help`: usage, what it does, the flags by group, the notes. */
void cli_args_help(const struct cli_command *cmd, FILE *f);

/* The commands (main.c), in the order `snug --help` and the README list them. */
extern const struct cli_command *const cli_commands[];
extern const int cli_n_commands;
const struct cli_command *cli_command_find(const char *name);

/* `snug help [--markdown] [commands | flags CMD | CMD]` (cli_docs.c); cli_help_usage is
 * `snug --help`: the commands with their summaries. */
int cli_help_main(int argc, char **argv);
void cli_help_usage(FILE *f);

#endif
