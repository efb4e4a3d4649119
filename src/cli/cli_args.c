/* cli_args.c — the argument parser and `--help` of every subcommand (see cli_args.h): argv is
 * matched against the command's table of struct cli_opt, each value is checked against its
 * kind before the command sees it, and the help is printed from the same table.
 * Read next: cli_docs.c (the README and docs tables from the same declarations). */
#include "cli_args.h"

#include "plan/plan.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void cli_args_init(struct cli_args *p, const struct cli_command *cmd, int argc, char **argv) {
    *p = (struct cli_args){.cmd = cmd, .argc = argc, .argv = argv, .i = 1};
}

/* Does `name` (one spelling) equal the n bytes at s? */
static bool spelled(const char *names, const char *s, size_t n) {
    for (const char *a = names; *a;) {
        const char *e = strchr(a, ',');
        size_t len = e ? (size_t)(e - a) : strlen(a);
        if (len == n && !memcmp(a, s, n)) return true;
        if (!e) break;
        a = e + 1;
        while (*a == ' ') a++;
    }
    return false;
}

static const struct cli_opt *find(const struct cli_opt *opts, const char *s, size_t n) {
    for (const struct cli_opt *o = opts; o && o->id; o++)
        if (spelled(o->names, s, n)) return o;
    return NULL;
}

/* The k-th '|'-separated word of a choice list; its length in *len (NULL past the end). */
static const char *choice_word(const char *meta, int k, size_t *len) {
    const char *a = meta;
    for (int j = 0; j < k; j++) {
        a = strchr(a, '|');
        if (!a) return NULL;
        a++;
    }
    const char *e = strchr(a, '|');
    *len = e ? (size_t)(e - a) : strlen(a);
    return a;
}

/* "cpu or cuda", "chat, messages or responses" */
static void print_choices(FILE *f, const char *meta) {
    int n = 0;
    size_t len;
    while (choice_word(meta, n, &len)) n++;
    for (int k = 0; k < n; k++) {
        const char *w = choice_word(meta, k, &len);
        fprintf(f, "%s%.*s", k == 0 ? "" : k == n - 1 ? " or " : ", ", (int)len, w);
    }
}

static int bad_value(const struct cli_args *p, const char *s) {
    const struct cli_opt *o = p->opt;
    fprintf(stderr, "snug %s: %s '%s': expected ", p->cmd->name, p->flag, s);
    switch (o->kind) {
    case CLI_INT:
        if (o->lo || o->hi)
            fprintf(stderr, "an integer in %lld..%lld", o->lo, o->hi);
        else
            fprintf(stderr, "an integer");
        if (o->word) fprintf(stderr, " or %s", o->word);
        break;
    case CLI_NUM:
        fprintf(stderr, "a number");
        break;
    case CLI_SIZE:
        fprintf(stderr, "a size such as 23.5GiB, 512MiB or a byte count");
        break;
    case CLI_CHOICE:
        print_choices(stderr, o->meta);
        break;
    default:
        fprintf(stderr, "%s", o->meta ? o->meta : "a value");
        break;
    }
    fprintf(stderr, "\n");
    return CLI_BAD;
}

/* One value s of the flag p->opt into v (the second of a two-value flag when second). */
static int parse_value(const struct cli_args *p, const char *s, bool second, struct cli_val *v) {
    const struct cli_opt *o = p->opt;
    char *end;
    if (second)
        v->s2 = s;
    else
        v->s = s;
    switch (o->kind) {
    case CLI_SWITCH:
    case CLI_TEXT:
        return 0;
    case CLI_INT: {
        if (!second && o->word && !strcmp(s, o->word)) {
            v->word = true;
            v->i = 0;
            return 0;
        }
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (errno || end == s || *end || ((o->lo || o->hi) && (x < o->lo || x > o->hi)))
            return bad_value(p, s);
        if (second)
            v->i2 = x;
        else
            v->i = x;
        return 0;
    }
    case CLI_NUM:
        errno = 0;
        v->f = strtod(s, &end);
        return errno || end == s || *end ? bad_value(p, s) : 0;
    case CLI_SIZE:
        return snug_plan_parse_size(s, &v->size) ? 0 : bad_value(p, s);
    case CLI_CHOICE: {
        size_t len;
        const char *w;
        for (int k = 0; (w = choice_word(o->meta, k, &len)); k++)
            if (strlen(s) == len && !memcmp(s, w, len)) {
                v->choice = k;
                return 0;
            }
        return bad_value(p, s);
    }
    }
    return 0;
}

int cli_args_next(struct cli_args *p, struct cli_val *v) {
    *v = (struct cli_val){0};
    p->opt = NULL;
    p->flag[0] = 0;
    if (p->i >= p->argc) return CLI_END;
    const char *a = p->argv[p->i++];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
        cli_args_help(p->cmd, stdout);
        return CLI_HELP;
    }
    if (a[0] != '-' || !a[1]) { /* "x" or "-" (stdin): not a flag */
        if (p->n_positional >= p->cmd->max_positional) {
            fprintf(stderr, "snug %s: unexpected argument '%s' (%s; snug %s --help lists them)\n",
                    p->cmd->name, a,
                    p->cmd->max_positional ? "too many arguments" : "flags start with -",
                    p->cmd->name);
            return CLI_BAD;
        }
        p->n_positional++;
        v->s = a;
        return CLI_POSITIONAL;
    }
    /* --name=value: the name is matched alone */
    const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
    size_t n = eq ? (size_t)(eq - a) : strlen(a);
    snprintf(p->flag, sizeof p->flag, "%.*s", (int)n, a);
    const struct cli_opt *o = find(p->cmd->opts, a, n);
    if (!o) {
        fprintf(stderr, "snug %s: unknown flag '%s' (snug %s --help lists the flags)\n",
                p->cmd->name, p->flag, p->cmd->name);
        return CLI_BAD;
    }
    p->opt = o;
    if (o->kind == CLI_SWITCH) {
        if (eq) {
            fprintf(stderr, "snug %s: %s takes no value (got '%s')\n", p->cmd->name, p->flag,
                    eq + 1);
            return CLI_BAD;
        }
        return o->id;
    }
    int need = o->n_values > 1 ? o->n_values : 1;
    if (eq && need > 1) {
        fprintf(stderr, "snug %s: %s takes %d values: %s %s\n", p->cmd->name, p->flag, need,
                p->flag, o->meta);
        return CLI_BAD;
    }
    if (!eq && p->i + need > p->argc) {
        fprintf(stderr, "snug %s: %s needs a value: %s %s\n", p->cmd->name, p->flag, p->flag,
                o->meta ? o->meta : "VALUE");
        return CLI_BAD;
    }
    if (parse_value(p, eq ? eq + 1 : p->argv[p->i++], false, v)) return CLI_BAD;
    if (need > 1 && parse_value(p, p->argv[p->i++], true, v)) return CLI_BAD;
    return o->id;
}

int cli_args_bad(const struct cli_args *p, const struct cli_val *v, const char *fmt, ...) {
    if (v && v->s)
        fprintf(stderr, "snug %s: %s '%s': ", p->cmd->name, p->flag, v->s);
    else
        fprintf(stderr, "snug %s: %s: ", p->cmd->name, p->flag);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return CLI_BAD;
}

int cli_usage_error(const struct cli_command *cmd, const char *fmt, ...) {
    fprintf(stderr, "snug %s: ", cmd->name);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: snug %s %.*s   (snug %s --help: every flag)\n", cmd->name,
            (int)strcspn(cmd->usage, "\n"), cmd->usage, cmd->name);
    return 2;
}

/* ---- --help --------------------------------------------------------------------------------- */

#define HELP_WIDTH 100
#define HELP_COL   28

/* Words of text from column col (where the line is now) wrapped at HELP_WIDTH, continuation
 * lines indented to `indent`; markdown backticks are dropped. Returns the column it ends at. */
static int wrap(FILE *f, const char *text, int col, int indent) {
    const char *s = text;
    while (*s) {
        while (*s == ' ') s++;
        if (*s == '\n') { /* an explicit line break */
            fprintf(f, "\n%*s", indent, "");
            col = indent;
            s++;
            continue;
        }
        size_t n = strcspn(s, " \n");
        if (!n) break;
        int w = 0;
        for (size_t k = 0; k < n; k++) w += s[k] != '`' && ((unsigned char)s[k] & 0xC0) != 0x80;
        if (col > indent && col + 1 + w > HELP_WIDTH) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        for (size_t k = 0; k < n; k++)
            if (s[k] != '`') fputc(s[k], f);
        col += w;
        s += n;
    }
    return col;
}

void cli_args_help(const struct cli_command *cmd, FILE *f) {
    const char *u = cmd->usage;
    for (int line = 0; *u; line++) {
        size_t n = strcspn(u, "\n");
        fprintf(f, "%s snug %s %.*s\n", line ? "      " : "usage:", cmd->name, (int)n, u);
        u += n + (u[n] == '\n');
    }
    fprintf(f, "\n");
    wrap(f, cmd->about, 0, 0);
    fprintf(f, "\n");
    const char *group = NULL;
    for (const struct cli_opt *o = cmd->opts; o && o->id; o++) {
        if (o->group && (!group || strcmp(o->group, group))) {
            group = o->group;
            fprintf(f, "\n%s:\n", group);
        } else if (o == cmd->opts) {
            fprintf(f, "\nflags:\n");
        }
        int col = fprintf(f, "  %s%s%s", o->names, o->meta && o->kind != CLI_SWITCH ? " " : "",
                          o->kind != CLI_SWITCH && o->meta ? o->meta : "");
        if (col + 2 > HELP_COL) {
            fprintf(f, "\n%*s", HELP_COL, "");
        } else {
            fprintf(f, "%*s", HELP_COL - col, "");
        }
        col = wrap(f, o->help, HELP_COL, HELP_COL);
        if (o->def) {
            char d[256];
            snprintf(d, sizeof d, "(default: %s)", o->def);
            col = wrap(f, d, col, HELP_COL);
        }
        if (o->flags & CLI_REPEAT) wrap(f, "(repeatable)", col, HELP_COL);
        fprintf(f, "\n");
    }
    fprintf(f, "\n  -h, --help                this help\n");
    if (cmd->notes) {
        fprintf(f, "\n");
        wrap(f, cmd->notes, 0, 0);
        fprintf(f, "\n");
    }
}
