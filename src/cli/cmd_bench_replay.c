/* cmd_bench_replay.c — `snug bench --agent-replay FILE`: replays a recorded agent conversation
 * (src/suite/replay.c) and prints per turn the time to first token, prompt tokens, cached
 * tokens and the reuse of the previous request's prompt; --json prints the results, --out
 * writes them. Exit status 0 when every turn answered, 1 otherwise.
 * Read next: src/suite/replay.c, docs/prefix-cache.md.
 */
#include "cli.h"

#include "suite/suite.h"

#include <stdio.h>

int cli_bench_replay(struct snug_suite_client *c, const char *file, bool as_json,
                     const char *outp) {
    json_error_t je;
    json_t *replay = json_load_file(file, 0, &je);
    if (!replay) {
        fprintf(stderr, "snug bench: --agent-replay %s: %s (line %d)\n", file, je.text, je.line);
        return 2;
    }
    struct snug_err err = {0};
    json_t *res = NULL;
    int rc = snug_ops_agent_replay(c, replay, cli_progress, NULL, &res, &err);
    json_decref(replay);
    if (rc) return cli_fail("bench", &err);
    json_object_set_new(res, "file", json_string(file));
    int status = 0;
    if (outp && json_dump_file(res, outp, JSON_INDENT(2))) {
        fprintf(stderr, "snug bench: cannot write %s\n", outp);
        status = 1;
    }
    if (as_json) {
        json_dumpf(res, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
    }
    FILE *f = as_json ? stderr : stdout;
    fprintf(f, "snug bench --agent-replay %s (%s, model %s)\n", file,
            json_string_value(json_object_get(json_object_get(res, "server"), "url")),
            json_string_value(json_object_get(json_object_get(res, "server"), "model")));
    fprintf(f, "  turn  ok   TTFT s   prompt   cached  reuse of previous prompt\n");
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(res, "turns"), i, t) {
        bool ok = json_is_true(json_object_get(t, "ok"));
        if (!ok) status = 1;
        json_t *r = json_object_get(t, "reuse_of_prev");
        char reuse[32] = "-";
        if (json_is_number(r)) snprintf(reuse, sizeof reuse, "%.1f%%", 100 * json_number_value(r));
        fprintf(f, "  %4lld  %-3s %8.3f %8lld %8lld  %s%s%s\n",
                (long long)json_integer_value(json_object_get(t, "turn")), ok ? "yes" : "NO",
                json_number_value(json_object_get(t, "ttft_s")),
                (long long)json_integer_value(json_object_get(t, "prompt_tokens")),
                (long long)json_integer_value(json_object_get(t, "cached_tokens")), reuse,
                ok ? "" : "  ", ok ? "" : json_string_value(json_object_get(t, "error")));
    }
    json_t *s = json_object_get(res, "summary");
    fprintf(
        f, "  after the first turn: %lld of %lld prompt tokens cached (%.1f%%); mean TTFT %.3f s\n",
        (long long)json_integer_value(json_object_get(s, "cached_tokens_after_first")),
        (long long)json_integer_value(json_object_get(s, "prompt_tokens_after_first")),
        100 * json_number_value(json_object_get(s, "reuse_after_first")),
        json_number_value(json_object_get(s, "mean_ttft_s")));
    json_decref(res);
    return status;
}
