/* cmd_stress.c — `snug stress`: the long-context boundary checks (src/suite/stress.c) against an
 * OpenAI-compatible server; prints the ladder and the probes (or --json). The exit status is
 * the number of failed checks; rejections and skips are shown with the server's reason.
 * Read next: src/suite/suite.h.
 */
#include "cli.h"

#include "suite/suite.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Print one result row: status, name, detail, memory delta. */
static void print_row(const json_t *r) {
    const char *st = json_string_value(json_object_get(r, "status"));
    printf("  %-8s %-20s %s", st, json_string_value(json_object_get(r, "name")),
           json_string_value(json_object_get(r, "detail")));
    json_t *a = json_object_get(r, "memory_before"), *b = json_object_get(r, "memory_after");
    const char *k = json_object_get(a, "health.rss_bytes") ? "health.rss_bytes"
                                                           : "process_resident_memory_bytes";
    if (json_is_number(json_object_get(a, k)) && json_is_number(json_object_get(b, k)))
        printf(" [rss %.0f -> %.0f MiB]", json_number_value(json_object_get(a, k)) / 1048576.0,
               json_number_value(json_object_get(b, k)) / 1048576.0);
    printf("\n");
}

enum { O_JSON = 1, O_CTX, O_MAX_TOKENS, O_NEEDLE, O_NO_OVER_LIMIT, O_FRACTIONS, O_ONLY };
static const struct cli_opt OPTS[] = {
    CLI_OPTS_CONN,
    {.id = O_CTX,
     .names = "--ctx",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 64,
     .hi = 1LL << 40,
     .def = "the server's limit, from /health, /v1/models or /props",
     .help = "the context limit the ladder climbs to",
     .group = "Checks"},
    {.id = O_FRACTIONS,
     .names = "--fractions",
     .kind = CLI_TEXT,
     .meta = "F,F,...",
     .def = "0.1,0.25,0.5,0.75,0.9,0.95",
     .help = "the needle depths as fractions of the context, each in (0, 0.95]"},
    {.id = O_NO_OVER_LIMIT,
     .names = "--no-over-limit",
     .kind = CLI_SWITCH,
     .help = "no rung beyond the context limit"},
    {.id = O_ONLY,
     .names = "--only",
     .kind = CLI_TEXT,
     .meta = "PART,...",
     .def = "all",
     .help = "run only these parts: ladder, beyond-limit, tool-prefill-100K, tool-prefill-130K, "
             "ide-agent-oneshot, multi-turn-agent"},
    {.id = O_NEEDLE,
     .names = "--needle",
     .kind = CLI_TEXT,
     .meta = "TEXT",
     .def = "a random colour, animal and number",
     .help = "the phrase hidden in the haystacks (its first three words are checked)"},
    {.id = O_MAX_TOKENS,
     .names = "--max-tokens",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 1000000,
     .def = "2000 (IDE agent), 500 (multi-turn)",
     .help = "caps the long answers"},
    {.id = O_JSON,
     .names = "--json",
     .kind = CLI_SWITCH,
     .help = "print the results as JSON",
     .group = "Output"},
    {0},
};
const struct cli_command cli_cmd_stress = {
    .name = "stress",
    .run = cmd_stress,
    .usage = "[--url U] [--ctx N] [--fractions F,...] [--only PART,...] [--json]",
    .summary = "long-context boundary checks of a server",
    .about = "long-context boundary checks of any OpenAI-compatible server: a needle ladder at "
             "depths of the context limit up to 0.95 of it plus one rung beyond, on salted "
             "haystacks counted by the server's /tokenize; tool-response prefill at 100K and 130K "
             "characters; an IDE-agent one-shot; a multi-turn agent; the exit status is the "
             "number of failed checks — docs/suite.md",
    .opts = OPTS,
};

int cmd_stress(int argc, char **argv) {
    struct cli_conn cc = CLI_CONN_DEFAULT;
    bool as_json = false;
    double fr[32];
    struct snug_ops_stress_opts o = {.over_limit = true, .fractions = fr};
    struct cli_args p;
    struct cli_val v;
    int r;
    cli_args_init(&p, &cli_cmd_stress, argc, argv);
    while ((r = cli_args_next(&p, &v)) > 0) {
        if (!cli_conn_opt(&p, r, &v, &cc)) return 2;
        switch (r) {
        case O_JSON:
            as_json = true;
            break;
        case O_CTX:
            o.n_ctx = v.i;
            break;
        case O_MAX_TOKENS:
            o.max_tokens = (int)v.i;
            break;
        case O_NEEDLE:
            o.needle = v.s;
            break;
        case O_ONLY: {
            char why[256];
            if (snug_ops_stress_parts(v.s, &o.parts, why, sizeof why))
                return cli_args_bad(&p, &v, "%s", why), 2;
            break;
        }
        case O_NO_OVER_LIMIT:
            o.over_limit = false;
            break;
        case O_FRACTIONS:
            o.n_fractions = 0;
            for (const char *s = v.s; *s && o.n_fractions < 32;) {
                char *e;
                double f = strtod(s, &e);
                if (e == s || f <= 0 || f > 0.95 || (*e && *e != ','))
                    return cli_args_bad(&p, &v,
                                        "expected numbers in (0, 0.95] separated by "
                                        "commas"),
                           2;
                fr[o.n_fractions++] = f;
                s = *e ? e + 1 : e;
            }
            break;
        }
    }
    if (r != CLI_END) return CLI_EXIT(r);
    struct snug_err err = {0};
    struct snug_suite_client c;
    if (cli_conn_open(&cc, &c, "stress")) return 1;
    json_t *res = NULL;
    if (snug_ops_stress(&c, &o, cli_progress, NULL, &res, &err)) return cli_fail("stress", &err);
    json_t *checks = json_object_get(res, "checks");
    int failed = snug_ops_count_failed(checks);
    if (as_json) {
        json_dumpf(res, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
    } else {
        json_t *ctx = json_object_get(res, "context");
        printf("snug stress %s (model %s): context %lld tokens (from %s), needle '%s'\n", c.base,
               c.model, json_integer_value(json_object_get(ctx, "n_ctx")),
               json_string_value(json_object_get(ctx, "source")),
               json_string_value(json_object_get(res, "needle")));
        printf("ladder:\n");
        size_t i;
        json_t *r;
        json_array_foreach(json_object_get(res, "ladder"), i, r) print_row(r);
        printf("checks:\n");
        json_array_foreach(checks, i, r) print_row(r);
        printf("%zu checks, %d failed\n", json_array_size(checks), failed);
    }
    json_decref(res);
    return failed;
}
