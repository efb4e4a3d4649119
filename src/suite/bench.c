/* bench.c — `snug bench`: the canonical speed protocol of docs/suite.md against
 * an OpenAI-compatible server: narrative and code prompts, streamed with usage, warm-up runs
 * then measured runs; per run TTFT, wall time, completion tokens, wall and decode tokens/s;
 * mean/std/CV/min/max per prompt; speculative acceptance length when the server exposes it;
 * and the prefill probe (salted haystacks at 10K, 90K and deeper, prompt tokens / TTFT).
 * Also the comparison against an earlier run's JSON.
 * Invariant: a run counts only when it streamed with HTTP 200, ended with [DONE] and produced
 * tokens; failed runs are kept with their reason and excluded from the statistics.
 * Read next: svg.c.
 */
#include "suite/suite.h"

#include "core/core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name, *prompt;
    int max_tokens;
} PROMPTS[] = {
    {"narrative", "Write a detailed 800-word essay explaining transformer attention.", 1000},
    {"code", "Write a Python implementation of quicksort with comments explaining each step.", 800},
};
#define N_PROMPTS (sizeof PROMPTS / sizeof PROMPTS[0])

static const char *const METRICS[] = {"ttft_s", "wall_s", "tokens", "wall_tps", "decode_tps"};

/* {mean, std (sample), cv, min, max, n} of member `key` over the runs with "ok": true. */
static json_t *stats_of(const json_t *runs, const char *key) {
    double s = 0, s2 = 0, mn = INFINITY, mx = -INFINITY;
    int n = 0;
    size_t i;
    json_t *r;
    json_array_foreach(runs, i, r) {
        json_t *v = json_object_get(r, key);
        if (!json_is_true(json_object_get(r, "ok")) || !json_is_number(v)) continue;
        double x = json_number_value(v);
        s += x;
        mn = x < mn ? x : mn;
        mx = x > mx ? x : mx;
        n++;
    }
    if (!n) return json_pack("{s:i}", "n", 0);
    double mean = s / n;
    json_array_foreach(runs, i, r) {
        json_t *v = json_object_get(r, key);
        if (!json_is_true(json_object_get(r, "ok")) || !json_is_number(v)) continue;
        s2 += (json_number_value(v) - mean) * (json_number_value(v) - mean);
    }
    double sd = n > 1 ? sqrt(s2 / (n - 1)) : 0;
    return json_pack("{s:f,s:f,s:f,s:f,s:f,s:i}", "mean", mean, "std", sd, "cv",
                     mean != 0 ? sd / mean : 0, "min", mn, "max", mx, "n", n);
}

/* One streamed run: the request body is built by the caller. Returns the run record. */
static json_t *run_once(struct snug_suite_client *c, const json_t *body, struct snug_err *err) {
    struct snug_suite_stream s;
    if (snug_suite_stream_chat(c, body, c->timeout_s, &s, err)) return NULL;
    char why[512] = "";
    json_t *u = s.usage;
    json_int_t ct = json_integer_value(json_object_get(u, "completion_tokens"));
    json_int_t pt = json_integer_value(json_object_get(u, "prompt_tokens"));
    json_int_t cached = json_integer_value(
        json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    const char *tsrc = "usage";
    if (ct <= 0) { /* no usage: count the deltas, and say so */
        ct = s.n_content_chunks + s.n_reasoning_chunks + s.n_tool_chunks;
        tsrc = "chunks (no usage in the stream)";
    }
    double ttft = s.t_first >= 0 ? s.t_first : s.t_finish >= 0 ? s.t_finish : s.wall_s;
    bool ok = true;
    if (s.status != 200 || s.error_event || s.error[0] || !s.done) {
        ok = false;
        if (s.status != 200)
            snug_suite_describe(s.status, s.error, s.raw, why, sizeof why);
        else if (s.error_event)
            snprintf(why, sizeof why, "error event in the stream");
        else if (s.error[0])
            snprintf(why, sizeof why, "stream broke off: %s", s.error);
        else
            snprintf(why, sizeof why, "stream not terminated by [DONE]");
    } else if (ct <= 0) {
        ok = false;
        snprintf(why, sizeof why, "no tokens generated");
    }
    double dec = s.wall_s - ttft;
    json_t *r = json_pack("{s:b,s:f,s:f,s:I,s:s,s:f,s:s}", "ok", ok, "ttft_s", ttft, "wall_s",
                          s.wall_s, "tokens", (json_int_t)ct, "tokens_source", tsrc, "wall_tps",
                          s.wall_s > 0 ? ct / s.wall_s : 0.0, "finish_reason", s.finish_reason);
    json_object_set_new(r, "decode_tps", dec > 0 && ct > 1 ? json_real(ct / dec) : json_null());
    json_object_set_new(r, "prompt_tokens", pt > 0 ? json_integer(pt) : json_null());
    json_object_set_new(r, "cached_tokens", json_integer(cached));
    if (!ok) json_object_set_new(r, "error", json_string(why));
    snug_suite_stream_free(&s);
    return r;
}

/* A streamed bench request body. */
static json_t *bench_body(const struct snug_suite_client *c, const char *prompt, int max_tokens) {
    json_t *b = snug_suite_chat_body(c, NULL, prompt, max_tokens, 0.6, 0);
    json_object_set_new(b, "stream", json_true());
    json_object_set_new(b, "stream_options", json_pack("{s:b}", "include_usage", 1));
    json_object_set_new(b, "top_p", json_real(0.95));
    json_object_set_new(b, "top_k", json_integer(20));
    return b;
}

/* The prefill probe at one depth: fresh salted haystacks, max_tokens 1. */
static json_t *prefill_depth(struct snug_suite_client *c, long depth, long n_ctx,
                             const struct snug_ops_bench_opts *o, snug_ops_progress_fn progress,
                             void *user, int *step, int total, struct snug_err *err) {
    if (depth + 96 > n_ctx)
        return json_pack("{s:I,s:s}", "depth", (json_int_t)depth, "skipped",
                         "deeper than the server's context limit");
    json_t *runs = json_array();
    int nw = o->prefill_warmup, nr = o->prefill_runs;
    for (int i = 0; i < nw + nr; i++) {
        char label[64];
        snprintf(label, sizeof label, "prefill %ld %s %d", depth, i < nw ? "warm-up" : "run",
                 i < nw ? i + 1 : i - nw + 1);
        if (progress) progress(user, label, (*step)++, total);
        long measured;
        char *hay = snug_ops_haystack(c, depth - 48, NULL, &measured);
        if (!hay) {
            json_decref(runs);
            snug_err_set(err, SNUG_ERR_NOMEM, "out of memory building a haystack");
            return NULL;
        }
        struct snug_sbuf u = {0};
        snug_sbuf_puts(&u, hay);
        snug_free(hay);
        snug_sbuf_puts(&u, "\n\nSummarise the notes above in one sentence.");
        json_t *b = bench_body(c, u.data ? u.data : "", 1);
        snug_sbuf_free(&u);
        json_t *r = run_once(c, b, err);
        json_decref(b);
        if (!r) {
            json_decref(runs);
            return NULL;
        }
        json_int_t pt = json_integer_value(json_object_get(r, "prompt_tokens"));
        if (pt <= 0 && measured > 0) {
            pt = measured;
            json_object_set_new(r, "prompt_tokens", json_integer(pt));
            json_object_set_new(r, "prompt_tokens_source", json_string("/tokenize"));
        }
        double ttft = json_number_value(json_object_get(r, "ttft_s"));
        if (pt <= 0 && json_is_true(json_object_get(r, "ok"))) {
            json_object_set_new(r, "ok", json_false());
            json_object_set_new(r, "error",
                                json_string("no prompt token count (usage or "
                                            "/tokenize)"));
        }
        json_object_set_new(r, "prefill_tps",
                            ttft > 0 && pt > 0 ? json_real(pt / ttft) : json_null());
        if (i >= nw) json_array_append(runs, r);
        json_decref(r);
    }
    return json_pack("{s:I,s:o,s:o,s:o}", "depth", (json_int_t)depth, "runs", runs, "prefill_tps",
                     stats_of(runs, "prefill_tps"), "ttft_s", stats_of(runs, "ttft_s"));
}

int snug_ops_bench(struct snug_suite_client *c, const struct snug_ops_bench_opts *o,
                   snug_ops_progress_fn progress, void *user, json_t **out, struct snug_err *err) {
    *out = NULL;
    /* An unreachable server is an error, not a report of zeros. */
    if (!snug_suite_alive(c))
        return snug_err_set(err, SNUG_ERR_IO,
                            "no server answers at %s (GET /health and /v1/models failed): start "
                            "`snug serve` or check --url",
                            c->base);
    snug_suite_discover_model(c);
    long n_ctx = o->n_ctx;
    char source[96] = "--ctx";
    struct snug_err cerr = {0};
    if (!n_ctx && snug_suite_context_limit(c, &n_ctx, source, sizeof source, &cerr)) {
        n_ctx = 0;
        snprintf(source, sizeof source, "unknown (%.80s)", cerr.msg);
    }
    /* prefill depths: given, or 10K, 90K and 0.9 of the context when that is deeper */
    long depths[34];
    int nd = 0;
    if (o->depths)
        for (int i = 0; i < o->n_depths && nd < 32; i++) depths[nd++] = o->depths[i];
    else if (o->n_depths != -1) {
        depths[nd++] = 10000;
        depths[nd++] = 90000;
        if (n_ctx * 9 / 10 > 90000 * 5 / 4) depths[nd++] = n_ctx * 9 / 10;
    }
    int total = (int)N_PROMPTS * (o->warmup + o->runs) + nd * (o->prefill_warmup + o->prefill_runs);
    int step = 0;
    json_t *prompts = json_array(), *prefill = json_array();
    char reason[256] = "";
    double a0 = 0, d0 = 0, a1 = 0, d1 = 0, last_accepted = -1, last_pred = -1;
    int have0 = snug_suite_spec_counters(c, &a0, &d0, reason, sizeof reason);
    for (size_t p = 0; p < N_PROMPTS; p++) {
        int mt = o->max_tokens ? o->max_tokens : PROMPTS[p].max_tokens;
        json_t *runs = json_array();
        for (int i = 0; i < o->warmup + o->runs; i++) {
            char label[64];
            snprintf(label, sizeof label, "%s %s %d", PROMPTS[p].name,
                     i < o->warmup ? "warm-up" : "run", i < o->warmup ? i + 1 : i - o->warmup + 1);
            if (progress) progress(user, label, step++, total);
            json_t *b = bench_body(c, PROMPTS[p].prompt, mt);
            json_t *r = run_once(c, b, err);
            json_decref(b);
            if (!r) {
                json_decref(runs);
                goto fail;
            }
            if (i >= o->warmup) json_array_append(runs, r);
            json_decref(r);
        }
        json_t *st = json_object();
        for (size_t k = 0; k < sizeof METRICS / sizeof METRICS[0]; k++)
            json_object_set_new(st, METRICS[k], stats_of(runs, METRICS[k]));
        json_array_append_new(prompts, json_pack("{s:s,s:s,s:i,s:o,s:o}", "name", PROMPTS[p].name,
                                                 "prompt", PROMPTS[p].prompt, "max_tokens", mt,
                                                 "runs", runs, "stats", st));
    }
    (void)last_accepted;
    (void)last_pred;
    json_t *acc;
    if (have0 == 1 && snug_suite_spec_counters(c, &a1, &d1, reason, sizeof reason) == 1 && d1 > d0)
        acc = json_pack("{s:b,s:f,s:s}", "available", 1, "mean_length", 1 + (a1 - a0) / (d1 - d0),
                        "source", "/metrics");
    else
        acc = json_pack("{s:b,s:s}", "available", 0, "reason",
                        have0 == 1    ? "speculation counters did not move during the runs"
                        : have0 == -1 ? "the server exposes no /metrics"
                                      : reason);
    for (int i = 0; i < nd; i++) {
        json_t *d = prefill_depth(c, depths[i], n_ctx ? n_ctx : depths[i] + 1000, o, progress, user,
                                  &step, total, err);
        if (!d) {
            json_decref(acc);
            goto fail;
        }
        json_array_append_new(prefill, d);
    }
    if (progress) progress(user, "done", total, total);
    *out =
        json_pack("{s:{s:s,s:s,s:I,s:s},s:{s:i,s:i,s:f,s:f,s:i,s:i,s:i},s:o,s:o,s:o}", "server",
                  "url", c->base, "model", c->model, "n_ctx", (json_int_t)n_ctx, "ctx_source",
                  source, "protocol", "warmup", o->warmup, "runs", o->runs, "temperature", 0.6,
                  "top_p", 0.95, "top_k", 20, "prefill_warmup", o->prefill_warmup, "prefill_runs",
                  o->prefill_runs, "prompts", prompts, "acceptance", acc, "prefill", prefill);
    return *out ? SNUG_OK : snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
fail:
    json_decref(prompts);
    json_decref(prefill);
    return err && err->status ? err->status : snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
}

/* now / before of the mean of stats[metric], or null. */
static json_t *ratio(const json_t *now, const json_t *before, const char *metric) {
    double a = json_number_value(json_object_get(json_object_get(now, metric), "mean"));
    double b = json_number_value(json_object_get(json_object_get(before, metric), "mean"));
    return b > 0 && a > 0 ? json_real(a / b) : json_null();
}

json_t *snug_ops_bench_compare(const json_t *now, const json_t *before) {
    json_t *out = json_pack("{s:{},s:[]}", "prompts", "prefill");
    if (!out) return NULL;
    size_t i, j;
    json_t *p, *q;
    json_array_foreach(json_object_get(now, "prompts"), i, p) {
        const char *name = json_string_value(json_object_get(p, "name"));
        json_array_foreach(json_object_get(before, "prompts"), j, q) {
            const char *qn = json_string_value(json_object_get(q, "name"));
            if (!name || !qn || strcmp(name, qn)) continue;
            json_t *r = json_object();
            json_t *sa = json_object_get(p, "stats"), *sb = json_object_get(q, "stats");
            for (size_t k = 0; k < sizeof METRICS / sizeof METRICS[0]; k++)
                json_object_set_new(r, METRICS[k], ratio(sa, sb, METRICS[k]));
            json_object_set_new(json_object_get(out, "prompts"), name, r);
        }
    }
    json_array_foreach(json_object_get(now, "prefill"), i, p) {
        json_int_t d = json_integer_value(json_object_get(p, "depth"));
        json_array_foreach(json_object_get(before, "prefill"), j, q) {
            if (json_integer_value(json_object_get(q, "depth")) != d) continue;
            json_array_append_new(
                json_object_get(out, "prefill"),
                json_pack("{s:I,s:o}", "depth", d, "prefill_tps", ratio(p, q, "prefill_tps")));
        }
    }
    return out;
}
