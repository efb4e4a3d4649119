/* cmd_bench.c — `snug bench`: the canonical speed protocol and prefill probe (src/suite/bench.c)
 * against an OpenAI-compatible server. Prints a table (or --json), writes --svg, and with
 * --compare prints this run's ratios against an earlier --json output. Exit status 0 when
 * every prompt produced measured runs, 1 otherwise.
 * Read next: src/suite/suite.h.
 */
#include "cli.h"

#include "core/core.h"
#include "suite/suite.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double num(const json_t *o, const char *metric, const char *key) {
    return json_number_value(json_object_get(json_object_get(o, metric), key));
}

/* The human-readable report. */
static void print_report(FILE *f, const json_t *res) {
    json_t *srv = json_object_get(res, "server");
    fprintf(f, "snug bench %s (model %s)\n", json_string_value(json_object_get(srv, "url")),
            json_string_value(json_object_get(srv, "model")));
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(res, "prompts"), i, p) {
        json_t *st = json_object_get(p, "stats");
        int n = (int)json_integer_value(json_object_get(json_object_get(st, "wall_s"), "n"));
        fprintf(f,
                "  %-10s %d runs  TTFT %.3f s  decode %.2f tok/s (std %.2f, CV %.3f, %.2f..%.2f)"
                "  wall %.2f tok/s  tokens %.0f\n",
                json_string_value(json_object_get(p, "name")), n, num(st, "ttft_s", "mean"),
                num(st, "decode_tps", "mean"), num(st, "decode_tps", "std"),
                num(st, "decode_tps", "cv"), num(st, "decode_tps", "min"),
                num(st, "decode_tps", "max"), num(st, "wall_tps", "mean"),
                num(st, "tokens", "mean"));
    }
    json_t *acc = json_object_get(res, "acceptance");
    if (json_is_true(json_object_get(acc, "available")))
        fprintf(f, "  acceptance length %.2f\n",
                json_number_value(json_object_get(acc, "mean_length")));
    else
        fprintf(f, "  acceptance length: n/a (%s)\n",
                json_string_value(json_object_get(acc, "reason")));
    json_array_foreach(json_object_get(res, "prefill"), i, p) {
        json_int_t d = json_integer_value(json_object_get(p, "depth"));
        const char *sk = json_string_value(json_object_get(p, "skipped"));
        if (sk)
            fprintf(f, "  prefill %7lld: skipped (%s)\n", (long long)d, sk);
        else if (num(p, "prefill_tps", "n") < 1)
            fprintf(f, "  prefill %7lld: FAILED (no probe succeeded)\n", (long long)d);
        else
            fprintf(f, "  prefill %7lld: %.1f tok/s (std %.1f), TTFT %.3f s\n", (long long)d,
                    num(p, "prefill_tps", "mean"), num(p, "prefill_tps", "std"),
                    num(p, "ttft_s", "mean"));
    }
}

/* Parse "a,b,c" into longs; "none" gives n = -1. */
static int parse_depths(const char *s, long *out, int cap, int *n) {
    if (!strcmp(s, "none")) {
        *n = -1;
        return 1;
    }
    *n = 0;
    for (char *e; *s && *n < cap; s = *e ? e + 1 : e) {
        long v = strtol(s, &e, 10);
        if (e == s || v < 16 || (*e && *e != ',')) return 0;
        out[(*n)++] = v;
    }
    return *n > 0;
}

enum {
    O_JSON = 1,
    O_REPLAY,
    O_SVG,
    O_OUT,
    O_COMPARE,
    O_WARMUP,
    O_RUNS,
    O_PREFILL_WARMUP,
    O_PREFILL_RUNS,
    O_MAX_TOKENS,
    O_CTX,
    O_DEPTHS,
};
static const struct cli_opt OPTS[] = {
    CLI_OPTS_CONN,
    {.id = O_WARMUP,
     .names = "--warmup",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 10000000,
     .def = "3",
     .help = "unmeasured runs of each prompt first",
     .group = "Protocol"},
    {.id = O_RUNS,
     .names = "--runs",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 10000000,
     .def = "5",
     .help = "measured runs of each prompt"},
    {.id = O_MAX_TOKENS,
     .names = "--max-tokens",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 10000000,
     .def = "1000 (narrative), 800 (code)",
     .help = "tokens each generation may produce"},
    {.id = O_CTX,
     .names = "--ctx",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 10000000,
     .def = "the server's limit, from /health, /v1/models or /props",
     .help = "the context the prefill depths are fitted into"},
    {.id = O_DEPTHS,
     .names = "--depths",
     .kind = CLI_TEXT,
     .meta = "N,N,...|none",
     .def = "10000,90000 and 0.9 of the context when that is deeper",
     .help = "prefill probe depths in tokens (each >= 16); none: no prefill probe"},
    {.id = O_PREFILL_WARMUP,
     .names = "--prefill-warmup",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 10000000,
     .def = "1",
     .help = "unmeasured prefill probes at each depth first"},
    {.id = O_PREFILL_RUNS,
     .names = "--prefill-runs",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 10000000,
     .def = "3",
     .help = "measured prefill probes at each depth"},
    {.id = O_REPLAY,
     .names = "--agent-replay",
     .kind = CLI_TEXT,
     .meta = "FILE",
     .help = "instead: replay a recorded agent conversation (tests/data/agent_replay/sample.json) "
             "turn by turn, the history resent each time without reasoning; per turn TTFT, "
             "prompt and cached tokens (docs/prefix-cache.md)"},
    {.id = O_JSON,
     .names = "--json",
     .kind = CLI_SWITCH,
     .help = "print the results as JSON (the report goes to stderr)",
     .group = "Output"},
    {.id = O_OUT,
     .names = "--out",
     .kind = CLI_TEXT,
     .meta = "F.json",
     .help = "write the JSON to F"},
    {.id = O_SVG, .names = "--svg", .kind = CLI_TEXT, .meta = "F.svg", .help = "write a chart"},
    {.id = O_COMPARE,
     .names = "--compare",
     .kind = CLI_TEXT,
     .meta = "OTHER.json",
     .help = "also print this run's ratios (this / other) against an earlier --json output"},
    {0},
};
const struct cli_command cli_cmd_bench = {
    .name = "bench",
    .run = cmd_bench,
    .usage = "[--url U] [--json] [--out F.json] [--svg F.svg] [--compare OTHER.json]\n"
             "--agent-replay FILE [--url U] [--json] [--out F.json]",
    .summary = "speed of a server, or an agent conversation replayed",
    .about = "the speed of any OpenAI-compatible server: narrative and code prompts (streamed, "
             "T 0.6, top_p 0.95, top_k 20) with TTFT, wall and decode tokens/s (mean, std, CV, "
             "min, max), the acceptance length from /metrics, and prefill tokens/s on salted "
             "haystacks at 10K, 90K and deeper where the context allows — docs/suite.md; "
             "`--agent-replay` replays an agent conversation and reports per-turn TTFT and cached "
             "tokens — docs/prefix-cache.md",
    .opts = OPTS,
};

int cmd_bench(int argc, char **argv) {
    struct cli_conn cc = CLI_CONN_DEFAULT;
    const char *svg = NULL, *cmp = NULL, *outp = NULL, *replay = NULL;
    bool as_json = false;
    long depths[32];
    struct snug_ops_bench_opts o = {.warmup = 3, .runs = 5, .prefill_warmup = 1, .prefill_runs = 3};
    struct cli_args args;
    struct cli_val v;
    int r;
    cli_args_init(&args, &cli_cmd_bench, argc, argv);
    while ((r = cli_args_next(&args, &v)) > 0) {
        if (!cli_conn_opt(&args, r, &v, &cc)) return 2;
        switch (r) {
        case O_JSON:
            as_json = true;
            break;
        case O_REPLAY:
            replay = v.s;
            break;
        case O_SVG:
            svg = v.s;
            break;
        case O_OUT:
            outp = v.s;
            break;
        case O_COMPARE:
            cmp = v.s;
            break;
        case O_WARMUP:
            o.warmup = (int)v.i;
            break;
        case O_RUNS:
            o.runs = (int)v.i;
            break;
        case O_PREFILL_WARMUP:
            o.prefill_warmup = (int)v.i;
            break;
        case O_PREFILL_RUNS:
            o.prefill_runs = (int)v.i;
            break;
        case O_MAX_TOKENS:
            o.max_tokens = (int)v.i;
            break;
        case O_CTX:
            o.n_ctx = v.i;
            break;
        case O_DEPTHS:
            if (!parse_depths(v.s, depths, 32, &o.n_depths))
                return cli_args_bad(&args, &v,
                                    "expected token counts >= 16 separated by commas, or none"),
                       2;
            o.depths = o.n_depths > 0 ? depths : NULL;
            break;
        }
    }
    if (r != CLI_END) return CLI_EXIT(r);
    if (replay) {
        struct snug_suite_client rc_client;
        if (cli_conn_open(&cc, &rc_client, "bench")) return 1;
        return cli_bench_replay(&rc_client, replay, as_json, outp);
    }
    struct snug_err err = {0};
    json_t *before = NULL;
    if (cmp && !(before = json_load_file(cmp, 0, NULL))) {
        fprintf(stderr, "snug bench: --compare %s is not a JSON file from snug bench --json\n",
                cmp);
        return 2;
    }
    struct snug_suite_client c;
    if (cli_conn_open(&cc, &c, "bench")) return 1;
    json_t *res = NULL;
    if (snug_ops_bench(&c, &o, cli_progress, NULL, &res, &err)) {
        json_decref(before);
        return cli_fail("bench", &err);
    }
    if (before) json_object_set_new(res, "compare", snug_ops_bench_compare(res, before));
    int rc = 0;
    size_t i;
    json_t *p;
    json_array_foreach(
        json_object_get(res, "prompts"), i,
        p) if (json_integer_value(json_object_get(json_object_get(json_object_get(p, "stats"),
                                                                  "wall_s"),
                                                  "n")) < 1) rc = 1;
    json_array_foreach(json_object_get(res, "prefill"), i, p) {
        json_t *st = json_object_get(p, "prefill_tps");
        if (!json_object_get(p, "skipped") && json_integer_value(json_object_get(st, "n")) < 1) {
            json_t *r0 = json_array_get(json_object_get(p, "runs"), 0);
            fprintf(stderr, "snug bench: every prefill probe at depth %lld failed (%s)\n",
                    (long long)json_integer_value(json_object_get(p, "depth")),
                    r0 && json_string_value(json_object_get(r0, "error"))
                        ? json_string_value(json_object_get(r0, "error"))
                        : "no successful run");
            rc = 1;
        }
    }
    if (outp && json_dump_file(res, outp, JSON_INDENT(2))) {
        fprintf(stderr, "snug bench: cannot write %s\n", outp);
        rc = 1;
    }
    if (svg) {
        char *doc = snug_ops_bench_svg(res);
        FILE *f = doc ? fopen(svg, "w") : NULL;
        if (!f || fputs(doc, f) < 0 || fclose(f)) {
            fprintf(stderr, "snug bench: cannot write the SVG %s\n", svg);
            rc = 1;
        }
        snug_free(doc);
    }
    if (as_json) {
        json_dumpf(res, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
    }
    print_report(as_json ? stderr : stdout, res);
    if (before) {
        FILE *f = as_json ? stderr : stdout;
        fprintf(f, "compared with %s (ratio = this / that):\n", cmp);
        json_t *cp = json_object_get(res, "compare");
        const char *name;
        json_t *r;
        json_object_foreach(json_object_get(cp, "prompts"), name, r)
            fprintf(f, "  %-10s decode x%.3f  wall x%.3f  TTFT x%.3f\n", name,
                    json_number_value(json_object_get(r, "decode_tps")),
                    json_number_value(json_object_get(r, "wall_tps")),
                    json_number_value(json_object_get(r, "ttft_s")));
        json_array_foreach(json_object_get(cp, "prefill"), i, r)
            fprintf(f, "  prefill %7lld x%.3f\n",
                    (long long)json_integer_value(json_object_get(r, "depth")),
                    json_number_value(json_object_get(r, "prefill_tps")));
    }
    json_decref(before);
    json_decref(res);
    return rc;
}
