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

static void bench_usage(void) {
    fprintf(
        stderr,
        "usage: snug bench [--url http://127.0.0.1:8080] [--model M] [--api-key K] [--json]\n"
        "                  [--out F.json] [--svg F.svg] [--compare OTHER.json]\n"
        "                  [--warmup 3] [--runs 5] [--max-tokens N] [--ctx N]\n"
        "                  [--depths 10000,90000|none] [--prefill-warmup 1] [--prefill-runs 3]\n"
        "  Narrative and code prompts (streamed, T 0.6, top_p 0.95, top_k 20): TTFT, wall and\n"
        "  decode tokens/s with mean/std/CV/min/max; acceptance length from /metrics; prefill\n"
        "  tokens/s on salted haystacks at 10K, 90K and deeper where the context allows.\n"
        "  --json prints the results (--out writes them to a file); --compare prints ratios\n"
        "  (this / other) against an earlier JSON.\n"
        "       snug bench --agent-replay FILE [--url U] [--json] [--out F.json]\n"
        "  Replays a recorded agent conversation (tests/data/agent_replay/sample.json) turn by\n"
        "  turn, the history resent each time without reasoning: per turn TTFT, prompt and\n"
        "  cached tokens (docs/prefix-cache.md).\n");
}

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

int cmd_bench(int argc, char **argv) {
    struct cli_conn cc = CLI_CONN_DEFAULT;
    int cr;
    const char *svg = NULL, *cmp = NULL, *outp = NULL, *replay = NULL;
    bool as_json = false;
    long depths[32];
    struct snug_ops_bench_opts o = {.warmup = 3, .runs = 5, .prefill_warmup = 1, .prefill_runs = 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        if ((cr = cli_conn_flag(argc, argv, &i, &cc)) != 0) {
            if (cr < 0) return 2;
        } else if (!strcmp(a, "--json")) {
            as_json = true;
        } else if (!strcmp(a, "--agent-replay")) {
            if (!(replay = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--svg")) {
            if (!(svg = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--out")) {
            if (!(outp = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--compare")) {
            if (!(cmp = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--warmup") || !strcmp(a, "--runs") ||
                   !strcmp(a, "--prefill-warmup") || !strcmp(a, "--prefill-runs") ||
                   !strcmp(a, "--max-tokens") || !strcmp(a, "--ctx")) {
            if (!cli_int(argc, argv, &i, &v) || v < 0 || v > 10000000) return 2;
            if (!strcmp(a, "--warmup"))
                o.warmup = (int)v;
            else if (!strcmp(a, "--runs"))
                o.runs = (int)v;
            else if (!strcmp(a, "--prefill-warmup"))
                o.prefill_warmup = (int)v;
            else if (!strcmp(a, "--prefill-runs"))
                o.prefill_runs = (int)v;
            else if (!strcmp(a, "--max-tokens"))
                o.max_tokens = (int)v;
            else
                o.n_ctx = v;
        } else if (!strcmp(a, "--depths")) {
            const char *s = cli_value(argc, argv, &i);
            if (!s) return 2;
            if (!parse_depths(s, depths, 32, &o.n_depths)) {
                fprintf(stderr, "snug bench: --depths wants token counts >= 16 separated by "
                                "commas, or 'none'\n");
                return 2;
            }
            o.depths = o.n_depths > 0 ? depths : NULL;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_usage();
            return 0;
        } else {
            fprintf(stderr, "snug bench: unknown option '%s'\n", a);
            bench_usage();
            return 2;
        }
    }
    if (o.runs < 1) {
        fprintf(stderr, "snug bench: --runs must be at least 1\n");
        return 2;
    }
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
