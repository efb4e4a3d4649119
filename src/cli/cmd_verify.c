/* cmd_verify.c — `snug verify`: run the nine functional checks (src/suite/verify.c) against an
 * OpenAI-compatible server and print a table (or --json). The exit status is the number of
 * failed checks; a skip is shown with its reason and is not a pass.
 * Read next: src/suite/suite.h.
 */
#include "cli.h"

#include "suite/suite.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { O_JSON = 1, O_MAX_TOKENS };
static const struct cli_opt OPTS[] = {
    CLI_OPTS_CONN,
    {.id = O_MAX_TOKENS,
     .names = "--max-tokens",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 1000000,
     .def = "each check's own (30 to 4000)",
     .help = "caps every check's answer length (a quick run, a slow server); the pass conditions "
             "stay",
     .group = "Checks"},
    {.id = O_JSON,
     .names = "--json",
     .kind = CLI_SWITCH,
     .help = "print {\"checks\": [{\"name\", \"status\": pass|fail|skip, \"detail\"}]}",
     .group = "Output"},
    {0},
};
const struct cli_command cli_cmd_verify = {
    .name = "verify",
    .run = cmd_verify,
    .usage = "[--url U] [--model M] [--api-key K] [--max-tokens N] [--json]",
    .summary = "functional checks of an OpenAI-compatible server",
    .about = "nine functional checks of any OpenAI-compatible server (snug, vLLM, llama.cpp): "
             "reachable, engine-self-check (/health), basic-answer, tool-call, streaming, "
             "thinking, quality, speculative (/metrics), stream-tool-thinking; the exit status is "
             "the number of failed checks — docs/suite.md",
    .opts = OPTS,
};

int cmd_verify(int argc, char **argv) {
    struct cli_conn cc = CLI_CONN_DEFAULT;
    bool as_json = false;
    struct snug_ops_verify_opts o = {0};
    struct cli_args p;
    struct cli_val v;
    int r;
    cli_args_init(&p, &cli_cmd_verify, argc, argv);
    while ((r = cli_args_next(&p, &v)) > 0) {
        if (r == O_JSON) as_json = true;
        if (r == O_MAX_TOKENS) o.max_tokens = (int)v.i;
        if (!cli_conn_opt(&p, r, &v, &cc)) return 2;
    }
    if (r != CLI_END) return CLI_EXIT(r);
    struct snug_err err = {0};
    struct snug_suite_client c;
    if (cli_conn_open(&cc, &c, "verify")) return 1;
    json_t *res = NULL;
    if (snug_ops_verify(&c, &o, cli_progress, NULL, &res, &err)) return cli_fail("verify", &err);
    json_t *checks = json_object_get(res, "checks");
    int failed = snug_ops_count_failed(checks);
    if (as_json) {
        json_dumpf(res, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
    } else {
        printf("snug verify %s (model %s)\n", c.base, c.model[0] ? c.model : "?");
        size_t i;
        json_t *r;
        int pass = 0, skip = 0;
        json_array_foreach(checks, i, r) {
            const char *st = json_string_value(json_object_get(r, "status"));
            pass += !strcmp(st, "pass");
            skip += !strcmp(st, "skip");
            printf("  %-5s %-21s %s\n",
                   !strcmp(st, "pass")   ? "PASS"
                   : !strcmp(st, "fail") ? "FAIL"
                                         : "SKIP",
                   json_string_value(json_object_get(r, "name")),
                   json_string_value(json_object_get(r, "detail")));
        }
        printf("%d passed, %d failed, %d skipped\n", pass, failed, skip);
    }
    json_decref(res);
    return failed > 100 ? 100 : failed; /* the count of failed checks (capped: no wrap to 0) */
}
