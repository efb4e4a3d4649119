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

static void stress_usage(void) {
    fprintf(stderr,
            "usage: snug stress [--url http://127.0.0.1:8080] [--model M] [--api-key K] [--json]\n"
            "                   [--ctx N] [--fractions 0.1,0.5,0.95] [--no-over-limit]\n"
            "                   [--needle 'teal otter 42'] [--max-tokens N] [--timeout S]\n"
            "  Needle ladder at depths from the server's context limit (/health, /v1/models or\n"
            "  /props; --ctx overrides) up to 0.95 of it plus one rung beyond it, salted\n"
            "  haystacks counted by the server's /tokenize; tool-response prefill at 100K and\n"
            "  130K characters; IDE-agent one-shot; multi-turn agent. Exit status = failed\n"
            "  checks. --max-tokens caps the long answers (spec: 2000 / 500).\n");
}

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

int cmd_stress(int argc, char **argv) {
    struct cli_conn cc = CLI_CONN_DEFAULT;
    int cr;
    bool as_json = false;
    double fr[32];
    struct snug_ops_stress_opts o = {.over_limit = true, .fractions = fr};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        if ((cr = cli_conn_flag(argc, argv, &i, &cc)) != 0) {
            if (cr < 0) return 2;
        } else if (!strcmp(a, "--json")) {
            as_json = true;
        } else if (!strcmp(a, "--ctx")) {
            if (!cli_int(argc, argv, &i, &v) || v < 64) return 2;
            o.n_ctx = v;
        } else if (!strcmp(a, "--max-tokens")) {
            if (!cli_int(argc, argv, &i, &v) || v < 1 || v > 1000000) return 2;
            o.max_tokens = (int)v;
        } else if (!strcmp(a, "--needle")) {
            if (!(o.needle = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--no-over-limit")) {
            o.over_limit = false;
        } else if (!strcmp(a, "--fractions")) {
            const char *s = cli_value(argc, argv, &i);
            if (!s) return 2;
            o.n_fractions = 0;
            for (char *e; *s && o.n_fractions < 32; s = *e ? e + 1 : e) {
                double f = strtod(s, &e);
                if (e == s || f <= 0 || f > 0.95 || (*e && *e != ',')) {
                    fprintf(stderr, "snug stress: --fractions wants numbers in (0, 0.95] "
                                    "separated by commas\n");
                    return 2;
                }
                fr[o.n_fractions++] = f;
            }
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            stress_usage();
            return 0;
        } else {
            fprintf(stderr, "snug stress: unknown option '%s'\n", a);
            stress_usage();
            return 2;
        }
    }
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
