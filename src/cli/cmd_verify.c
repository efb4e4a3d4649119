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

static void verify_usage(void) {
    fprintf(stderr,
            "usage: snug verify [--url http://127.0.0.1:8080] [--model M] [--api-key K] [--json]\n"
            "                   [--timeout SECONDS]\n"
            "  Nine functional checks of an OpenAI-compatible server (snug, vLLM, llama.cpp):\n"
            "  reachable, engine-self-check (/health), basic-answer, tool-call, streaming,\n"
            "  thinking, quality, speculative (/metrics), stream-tool-thinking.\n"
            "  Exit status = number of failed checks. --json prints\n"
            "  {\"checks\": [{\"name\", \"status\": pass|fail|skip, \"detail\"}]}.\n");
}

int cmd_verify(int argc, char **argv) {
    struct cli_conn cc = CLI_CONN_DEFAULT;
    int cr;
    bool as_json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((cr = cli_conn_flag(argc, argv, &i, &cc)) != 0) {
            if (cr < 0) return 2;
        } else if (!strcmp(a, "--json")) {
            as_json = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            verify_usage();
            return 0;
        } else {
            fprintf(stderr, "snug verify: unknown option '%s'\n", a);
            verify_usage();
            return 2;
        }
    }
    struct snug_err err = {0};
    struct snug_suite_client c;
    if (cli_conn_open(&cc, &c, "verify")) return 1;
    json_t *res = NULL;
    if (snug_ops_verify(&c, cli_progress, NULL, &res, &err)) return cli_fail("verify", &err);
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
