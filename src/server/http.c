/* http.c — the HTTP daemon (libmicrohttpd: a pool of epoll threads, suspend/resume for
 * generations), routing, the small endpoints (/health, /metrics, /v1/models, /tokenize,
 * /detokenize) and boot/graceful shutdown.
 *
 * Owns: struct snug_srv (model, engine, daemon, counters, the list of generations in flight)
 * for the life of snug_server_run, and each connection's body buffer. Invariant: route,
 * method, API key and origin are decided from the headers before any body byte is kept
 * (gate.c); a body is accumulated up to max_body_bytes and then discarded (413), one announced
 * larger is discarded from its first byte; every
 * request gets an answer (errors in OpenAI's {"error": {...}} shape, a fixed 500 body when
 * even that cannot be built) except /metrics (Prometheus text) and streams (SSE, reply.c).
 * Nothing here prints to stdout.
 * Read next: gate.c, submit.c and reply.c (generation requests), engine.c.
 */
#define _GNU_SOURCE
#include "server/fmt.h"
#include "server/gate.h"
#include "server/schema.h"
#include "server/server_impl.h"

#include "core/core.h"
#include "grammar/memo.h"
#include "kv/kvfmt.h"
#include "model/model.h"
#include "plan/plan.h"
#include "plan/plan_cache.h"
#include "prefix/prefix.h"
#include "vision/vision.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>

/* ==== small helpers ========================================================================= */

json_t *snug_srv_json_str(const char *s, size_t n) {
    return snug_json_string_lossy(s, n);
}

/* The answer of last resort: a fixed, valid error body (no allocation but MHD's). */
static enum MHD_Result send_static_error(struct MHD_Connection *c) {
    static const char body[] = "{\"error\":{\"message\":\"the server could not build its "
                               "answer (out of memory)\",\"type\":\"server_error\","
                               "\"param\":null,\"code\":500}}";
    struct MHD_Response *r =
        MHD_create_response_from_buffer(sizeof body - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result res = MHD_queue_response(c, 500, r);
    MHD_destroy_response(r);
    return res;
}

enum MHD_Result snug_srv_send_json_hdr(struct MHD_Connection *c, unsigned status, json_t *body,
                                       const char *hname, const char *hval) {
    char *txt = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!txt) return send_static_error(c);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(txt);
        return send_static_error(c);
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (hname && hval) MHD_add_response_header(r, hname, hval);
    enum MHD_Result res = snug_srv_queue(c, status, r);
    MHD_destroy_response(r);
    return res;
}

enum MHD_Result snug_srv_send_json(struct MHD_Connection *c, unsigned status, json_t *body) {
    return snug_srv_send_json_hdr(c, status, body, NULL, NULL);
}

/* The error body is built from checked parts: strings that are not valid UTF-8 go through
 * snug_srv_json_str (U+FFFD), so an error that echoes request text can always be sent. */
enum MHD_Result snug_srv_send_error_hdr(struct MHD_Connection *c, const struct snug_server_error *e,
                                        const char *hname, const char *hval) {
    json_t *inner = json_object();
    json_t *b = json_object();
    if (inner && b) {
        json_object_set_new(inner, "message", snug_srv_json_str(e->msg, strlen(e->msg)));
        json_object_set_new(inner, "type",
                            json_string(e->type ? e->type : "invalid_request_error"));
        json_object_set_new(inner, "param",
                            e->param[0] ? snug_srv_json_str(e->param, strlen(e->param))
                                        : json_null());
        json_object_set_new(inner, "code", json_integer(e->http_status));
        json_object_set(b, "error", inner);
    }
    json_decref(inner);
    if (!b || json_object_size(b) == 0) {
        json_decref(b);
        return send_static_error(c);
    }
    return snug_srv_send_json_hdr(c, (unsigned)e->http_status, b, hname, hval);
}

enum MHD_Result snug_srv_send_error(struct MHD_Connection *c, const struct snug_server_error *e) {
    return snug_srv_send_error_hdr(c, e, NULL, NULL);
}

void snug_srv_count(struct snug_srv *s, enum snug_route route, unsigned status) {
    if (status >= SNUG_SRV_N_STATUS) status = 0;
    atomic_fetch_add(&s->req_count[route][status], 1);
    snug_srv_access_counted(route, status); /* a drop turns it into 499 (access log) */
}

/* The name of a KV cache format code (snug_kvfmt_code: one format, or a K/V pair such as
 * "tq4/tq3"). Returns one of a few static buffers, enough for the calls of one printf. */
static const char *kv_name(int32_t code) {
    static char bufs[4][32];
    static atomic_int next;
    char *b = bufs[atomic_fetch_add(&next, 1) & 3];
    return snug_kvfmt_code_name(code, b, sizeof bufs[0]);
}

static const char *route_name(enum snug_route r) {
    static const char *names[ROUTE_COUNT] = {"/v1/chat/completions",
                                             "/v1/completions",
                                             "/v1/models",
                                             "/health",
                                             "/metrics",
                                             "/tokenize",
                                             "/detokenize",
                                             "/v1/messages",
                                             "/v1/messages/count_tokens",
                                             "/v1/responses",
                                             "/v1/models/{id}",
                                             "/v1/responses/{id}",
                                             "other"};
    return names[r];
}

/* The prefix cache's tiers: the RAM item added to the plan (the budget checked again with it),
 * the store made with the plan's layout and bound to the model file's identity (prefix.h). */
static int boot_cache(struct snug_srv *s, struct snug_plan *plan, struct snug_err *err) {
    const struct snug_model *m = s->model;
    struct snug_plan_cache_flags f = {.ram_bytes = s->opts.cache_ram,
                                      .disk_dir = s->opts.cache_dir,
                                      .disk_bytes = s->opts.cache_disk,
                                      .checkpoint_every = s->opts.cache_every};
    uint64_t disk = 0;
    int rc = snug_plan_add_cache(&m->hp, plan, &f, &disk, err);
    if (rc || !f.ram_bytes) return rc;
    if (s->opts.budget && plan->device_total > s->opts.budget)
        return snug_err_set(err, SNUG_ERR_BUDGET,
                            "the memory plan with --cache-ram is %.2f GiB, over --budget %.2f GiB",
                            (double)plan->device_total / 1073741824.0,
                            (double)s->opts.budget / 1073741824.0);
    struct snug_prefix_cfg c;
    if ((rc = snug_plan_cache_cfg(&m->hp, plan, &f, &c, err))) return rc;
    if ((rc = snug_prefix_model_id(s->opts.model_path, 0, c.model_id, err))) return rc;
    s->prefix = snug_calloc(1, sizeof *s->prefix);
    if (!s->prefix) return snug_err_set(err, SNUG_ERR_NOMEM, "serve: no memory for the cache");
    if ((rc = snug_prefix_init(s->prefix, &c, err))) {
        snug_free(s->prefix);
        s->prefix = NULL;
        return rc;
    }
    if (disk)
        fprintf(stderr, "snug serve: prefix cache disk tier: %s, %.2f GiB (not memory)\n",
                c.disk_dir, (double)disk / 1073741824.0);
    return SNUG_OK;
}

/* The memory plan at boot: the limits the engine's contexts will be made with (snug_ctx_init's
 * defaults resolved the same way: n_ctx 4096 capped at the trained length, the chunk the CLI's
 * sizing resolved or 512, one context per slot), the table printed to stderr, SNUG_ERR_BUDGET
 * (naming the largest context that fits, from snug_plan_check) when the total exceeds --budget.
 * Keeps total and item count for /health. */
static int boot_plan(struct snug_srv *s, const struct snug_engine_opts *eo, struct snug_err *err) {
    const struct snug_model *m = s->model;
    int64_t n_ctx = eo->n_ctx ? eo->n_ctx : 4096;
    if (!eo->n_ctx && m->hp.n_ctx_train && (uint64_t)n_ctx > m->hp.n_ctx_train)
        n_ctx = (int64_t)m->hp.n_ctx_train;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int32_t threads = eo->n_threads ? eo->n_threads : m->n_threads;
    if (threads <= 0) threads = online > 0 ? (int32_t)online : 1;
    struct snug_plan_limits lim = {.n_ctx = n_ctx,
                                   .n_slots = eo->n_slots,
                                   .n_chunk = eo->n_chunk > 0 ? eo->n_chunk : 512,
                                   .n_draft = eo->n_draft,
                                   .n_threads = threads,
                                   .kv_type = eo->kv_type,
                                   .backend =
                                       eo->backend == 1 ? SNUG_BACKEND_CUDA : SNUG_BACKEND_CPU};
    uint64_t budget = eo->backend == 1 ? eo->vram_budget : s->opts.budget;
    struct snug_plan_weights w;
    snug_plan_weights_from_gguf(m->gguf, &w);
    struct snug_plan *plan = snug_malloc(sizeof *plan);
    char *buf = snug_malloc(8192);
    if (!plan || !buf) {
        snug_free(plan);
        snug_free(buf);
        return snug_err_set(err, SNUG_ERR_NOMEM, "serve: out of memory for the memory plan");
    }
    int rc = snug_plan_check(&m->hp, &w, &lim, budget, plan, err);
    if (rc == SNUG_OK) rc = boot_cache(s, plan, err);
    if (rc == SNUG_OK && s->opts.mmproj) {
        rc = snug_srv_vision_boot(s, threads, plan, err);
        if (rc == SNUG_OK && eo->backend == 1 && budget && plan->device_total > budget)
            rc = snug_err_set(err, SNUG_ERR_BUDGET,
                              "the GPU plan with the vision tower (--vision-backend cuda) is %.2f "
                              "GiB, over --vram-budget %.2f GiB: lower --max-image-pixels or "
                              "--ctx, or run the tower with --vision-backend cpu",
                              (double)plan->device_total / 1073741824.0,
                              (double)budget / 1073741824.0);
    }
    if (rc == SNUG_OK || rc == SNUG_ERR_BUDGET) {
        fprintf(stderr, "snug serve: memory plan: %d slot(s) x ctx %lld, chunk %d, kv %s, mtp %d\n",
                plan->lim.n_slots, (long long)plan->lim.n_ctx, plan->lim.n_chunk,
                kv_name(eo->kv_type), plan->lim.n_draft);
        snug_plan_format(plan, budget, buf, 8192);
        fputs(buf, stderr);
        s->plan_total = plan->total;
        s->plan_items = plan->n_items;
    }
    snug_free(plan);
    snug_free(buf);
    return rc;
}

/* ==== small endpoints ======================================================================= */

static enum MHD_Result do_health(struct snug_srv *s, struct MHD_Connection *c) {
    struct snug_engine_stats st;
    snug_engine_get_stats(s->engine, &st);
    const char *self = snug_engine_self_test(s->engine);
    bool ok = !strcmp(self, "ok");
    json_t *b = json_pack(
        "{s:s, s:s, s:s, s:{s:i, s:i, s:s, s:i}, s:{s:i, s:i, s:i, s:i}, s:{s:I, s:I, s:I}, "
        "s:s, s:f}",
        "status", ok ? "ok" : "error", "model", s->model_id, "arch", snug_model_arch(s->model),
        "plan", "n_ctx", st.n_ctx, "n_slots", st.n_slots, "kv_type", kv_name(s->opts.kv_type),
        "n_threads", s->opts.n_threads, "slots", "total", st.n_slots, "busy", st.slots_busy,
        "queued", st.queue_len, "queue_capacity", st.queue_cap, "memory", "rss_bytes",
        (json_int_t)snug_rss_bytes(), "peak_rss_bytes", (json_int_t)snug_peak_rss_bytes(),
        "tokens_in_slots", (json_int_t)st.tokens_in_slots, "self_test", self, "uptime_s",
        snug_time_s() - s->t_start);
    json_t *mem = json_object_get(b, "memory");
    if (mem) {
        json_object_set_new(mem, "planned_bytes", json_integer((json_int_t)s->plan_total));
        json_object_set_new(mem, "planned_items", json_integer(s->plan_items));
        json_object_set_new(mem, "budget_bytes", json_integer((json_int_t)s->opts.budget));
    }
    json_t *pl = json_object_get(b, "plan");
    if (pl) json_object_set_new(pl, "spec_draft", json_integer(st.n_draft));
    snug_srv_count(s, ROUTE_HEALTH, ok ? 200 : 503);
    return snug_srv_send_json(c, ok ? 200 : 503, b);
}

static void metric(struct snug_sbuf *b, const char *name, const char *type, const char *help,
                   double v) {
    char line[512];
    snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type,
             name, v);
    snug_sbuf_puts(b, line);
}

static enum MHD_Result do_metrics(struct snug_srv *s, struct MHD_Connection *c) {
    snug_srv_count(s, ROUTE_METRICS, 200);
    struct snug_engine_stats st;
    snug_engine_get_stats(s->engine, &st);
    struct snug_sbuf b = {0};
    char line[256];
    snug_sbuf_puts(&b, "# HELP snug_requests_total HTTP requests answered, by route and status.\n"
                       "# TYPE snug_requests_total counter\n");
    for (int r = 0; r < ROUTE_COUNT; r++)
        for (int k = 0; k < SNUG_SRV_N_STATUS; k++) {
            uint64_t n = atomic_load(&s->req_count[r][k]);
            if (!n) continue;
            snprintf(line, sizeof line, "snug_requests_total{route=\"%s\",status=\"%d\"} %llu\n",
                     route_name((enum snug_route)r), k, (unsigned long long)n);
            snug_sbuf_puts(&b, line);
        }
    metric(&b, "snug_prompt_tokens_total", "counter", "Prompt tokens evaluated.",
           (double)st.prompt_tokens);
    metric(&b, "snug_prompt_tokens_cached_total", "counter",
           "Prompt tokens reused from a slot's cache.", (double)st.cached_tokens);
    metric(&b, "snug_generated_tokens_total", "counter", "Tokens generated.",
           (double)st.gen_tokens);
    metric(&b, "snug_prompt_tokens_per_second", "gauge",
           "Prompt tokens per second of prompt processing time, since start.",
           st.prompt_s > 0 ? st.prompt_tokens / st.prompt_s : 0);
    metric(&b, "snug_generation_tokens_per_second", "gauge",
           "Generated tokens per second of summed per-request generation time, since start.",
           st.gen_s > 0 ? st.gen_tokens / st.gen_s : 0);
    metric(&b, "snug_heap_allocations_total", "counter",
           "Heap allocations through the counted allocator (snug_malloc, jansson) since start.",
           (double)snug_alloc_count());
    metric(&b, "snug_requests_finished_total", "counter", "Generation jobs finished.",
           (double)st.jobs_done);
    metric(&b, "snug_requests_cancelled_total", "counter",
           "Generation jobs cancelled (client gone).", (double)st.jobs_cancelled);
    metric(&b, "snug_queue_length", "gauge", "Requests waiting for a slot.", st.queue_len);
    metric(&b, "snug_queue_capacity", "gauge", "Queue limit beyond free slots.", st.queue_cap);
    metric(&b, "snug_slots_busy", "gauge", "Slots running a request.", st.slots_busy);
    metric(&b, "snug_slots_total", "gauge", "Slots.", st.n_slots);
    if (s->grammar_memo) {
        struct snug_grammar_memo_stats gm;
        snug_grammar_memo_stats(s->grammar_memo, &gm);
        metric(&b, "snug_grammar_matchers_reused_total", "counter",
               "Constrained requests served by a warm grammar matcher of an earlier request.",
               (double)gm.hits);
        metric(&b, "snug_grammar_compiles_total", "counter",
               "Grammars compiled (not found among the remembered ones).", (double)gm.compiles);
    }
    snug_srv_metrics_prefix(&b, s->prefix);
    if (st.n_draft > 0) {
        const struct snug_spec_stats *sp = &st.spec;
        metric(&b, "snug_spec_draft_length", "gauge",
               st.spec_adapt ? "The most MTP drafts per speculative step (--spec-draft)."
                             : "MTP drafts per speculative step (--spec-draft).",
               st.n_draft);
        metric(&b, "snug_spec_adapt", "gauge",
               "1: the drafts per step are chosen from the measured acceptance and step costs "
               "(--spec-adapt on).",
               st.spec_adapt ? 1 : 0);
        metric(&b, "snug_spec_draft_length_chosen", "gauge",
               "Drafts per step chosen for the requests generating now, their mean (the last "
               "value while none is).",
               st.spec_draft_now);
        metric(&b, "snug_spec_acceptance_estimate", "gauge",
               "The adaptation's estimate of a draft's acceptance probability, mean over the "
               "requests generating now (the last value while none is).",
               st.spec_accept_now);
        metric(&b, "snug_spec_steps_total", "counter",
               "Steps of speculative requests, those that drafted nothing included (mean drafts "
               "per step: snug_spec_draft_tokens_total / this).",
               (double)st.spec_gen_steps);
        metric(&b, "snug_spec_drafts_total", "counter", "Speculative verification steps.",
               (double)sp->n_steps);
        metric(&b, "snug_spec_draft_tokens_total", "counter", "Draft tokens proposed.",
               (double)sp->n_drafted);
        metric(&b, "snug_spec_accepted_tokens_total", "counter", "Draft tokens accepted.",
               (double)sp->n_accepted);
        metric(&b, "snug_spec_emitted_tokens_total", "counter",
               "Tokens produced by verification steps (accepted drafts + 1 each).",
               (double)sp->n_emitted);
        metric(&b, "snug_spec_mean_acceptance_length", "gauge",
               "Tokens per verification step, the bonus token included.",
               sp->n_steps > 0 ? (double)sp->n_emitted / (double)sp->n_steps : 0);
        metric(&b, "snug_spec_verify_steps_total", "counter",
               "Engine steps holding at least one speculative verification.",
               (double)st.verify_steps);
        metric(&b, "snug_spec_verify_runs_total", "counter",
               "Verifications in those steps (one per speculative slot and step).",
               (double)st.verify_runs);
        metric(&b, "snug_spec_verify_forwards_total", "counter",
               "Trunk forwards of those steps (one per step: the verifications are batched).",
               (double)st.verify_forwards);
        metric(&b, "snug_spec_verify_runs_max", "gauge", "The most verifications one step held.",
               st.verify_runs_max);
        snug_sbuf_puts(&b, "# HELP snug_spec_acceptance_rate Acceptance rate of the draft at a "
                           "position (1 = first draft).\n"
                           "# TYPE snug_spec_acceptance_rate gauge\n");
        for (int k = 0; k < st.n_draft && k < SNUG_SPEC_MAX_DRAFT; k++) {
            snprintf(line, sizeof line, "snug_spec_acceptance_rate{position=\"%d\"} %.6g\n", k + 1,
                     sp->proposed_at[k] > 0
                         ? (double)sp->accepted_at[k] / (double)sp->proposed_at[k]
                         : 0.0);
            snug_sbuf_puts(&b, line);
        }
    }
    metric(&b, "snug_kv_tokens_used", "gauge",
           "Tokens held in slot caches (attention KV and recurrent state).",
           (double)st.tokens_in_slots);
    metric(&b, "snug_kv_tokens_capacity", "gauge", "Slots x context.",
           (double)st.n_slots * st.n_ctx);
    metric(&b, "snug_kv_usage_ratio", "gauge", "KV use: used / capacity.",
           st.n_ctx ? (double)st.tokens_in_slots / ((double)st.n_slots * st.n_ctx) : 0);
    metric(&b, "snug_engine_steps_total", "counter", "Engine steps run.", (double)st.steps);
    metric(&b, "snug_engine_forwards_total", "counter",
           "Trunk forwards run by the engine's steps (MTP drafting not counted).",
           (double)st.forwards);
    metric(&b, "snug_step_prompt_rows", "gauge",
           st.step_prompt_auto
               ? "Prompt rows a prefilling request adds to a step while others stream "
                 "(--step-prompt auto: from the measured step times)."
               : "Prompt rows a prefilling request adds to a step (--step-prompt).",
           st.step_prompt_rows);
    metric(&b, "snug_step_decode_seconds", "gauge",
           "Moving average of a step holding only decode rows (0: none yet).", st.step_decode_s);
    metric(&b, "snug_step_prompt_row_seconds", "gauge",
           "Moving average of what one prompt row adds to a step (0: none yet).",
           st.step_prompt_row_s);
    metric(&b, "snug_step_mixed_total", "counter",
           "Steps that carried prompt rows beside other requests' decode rows.",
           (double)st.mixed_steps);
    metric(&b, "snug_step_mixed_prompt_rows_total", "counter", "Prompt rows in those steps.",
           (double)st.mixed_prompt_rows);
    metric(&b, "snug_images_encoded_total", "counter",
           "Images run through the vision tower (a prefix-cache hit past an image skips it).",
           (double)st.images_encoded);
    metric(&b, "snug_resident_memory_bytes", "gauge", "Resident set size.",
           (double)snug_rss_bytes());
    if (b.oom || !b.data) {
        snug_sbuf_free(&b);
        return MHD_NO;
    }
    size_t n = 0;
    char *txt = snug_sbuf_take(&b, &n);
    struct MHD_Response *r = MHD_create_response_from_buffer(n, txt, MHD_RESPMEM_MUST_COPY);
    snug_free(txt);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4");
    enum MHD_Result res = snug_srv_queue(c, 200, r);
    MHD_destroy_response(r);
    return res;
}

/* POST /tokenize {"content": str, "parse_special": bool = true, "with_pieces": bool}
 *   → {"tokens": [ids]} or, with pieces, {"tokens": [{"id":, "piece":}]}. */
static enum MHD_Result do_tokenize(struct snug_srv *s, struct MHD_Connection *c, const char *body,
                                   size_t len) {
    struct snug_server_error e = {0};
    struct snug_tokenize_req q;
    if (snug_server_tokenize_parse(&q, body, len, s->opts.limits.max_prompt_bytes, &e)) {
        snug_srv_count(s, ROUTE_TOKENIZE, (unsigned)e.http_status);
        return snug_srv_send_error(c, &e);
    }
    json_t *root = q.root;
    size_t n = q.len, got = 0;
    snug_token *ids = snug_malloc((n + 16) * sizeof *ids);
    struct snug_err err = {0};
    int rc =
        ids ? snug_tokenizer_encode(s->tok, q.content, n, q.parse_special, ids, n + 16, &got, &err)
            : SNUG_ERR_NOMEM;
    if (rc == SNUG_OK && q.with_pieces && got > SNUG_SRV_MAX_PIECES) {
        snug_free(ids);
        json_decref(root);
        snug_server_error_set(&e, 413, "invalid_request_error", "with_pieces",
                              "'with_pieces' answers at most %d tokens and this content has %zu; "
                              "ask without pieces or in parts",
                              SNUG_SRV_MAX_PIECES, got);
        snug_srv_count(s, ROUTE_TOKENIZE, 413);
        return snug_srv_send_error(c, &e);
    }
    json_t *arr = json_array();
    for (size_t i = 0; rc == SNUG_OK && i < got; i++) {
        if (q.with_pieces) {
            size_t bl = 0;
            const char *b = snug_tokenizer_token_bytes(s->tok, ids[i], &bl);
            json_array_append_new(arr, json_pack("{s:i, s:o}", "id", ids[i], "piece",
                                                 snug_srv_json_str(b ? b : "", bl)));
        } else {
            json_array_append_new(arr, json_integer(ids[i]));
        }
    }
    snug_free(ids);
    json_decref(root);
    if (rc != SNUG_OK) {
        json_decref(arr);
        snug_server_error_set(&e, 500, "server_error", NULL, "tokenize failed: %s", err.msg);
        snug_srv_count(s, ROUTE_TOKENIZE, 500);
        return snug_srv_send_error(c, &e);
    }
    snug_srv_count(s, ROUTE_TOKENIZE, 200);
    return snug_srv_send_json(c, 200, json_pack("{s:o}", "tokens", arr));
}

/* POST /detokenize {"tokens": [ids]} → {"content": str} (valid UTF-8: broken bytes → U+FFFD). */
static enum MHD_Result do_detokenize(struct snug_srv *s, struct MHD_Connection *c, const char *body,
                                     size_t len) {
    struct snug_server_error e = {0};
    json_t *root = NULL;
    const json_t *toks = NULL;
    if (snug_server_detokenize_parse(&root, &toks, body, len, snug_tokenizer_n_vocab(s->tok), &e)) {
        snug_srv_count(s, ROUTE_DETOKENIZE, 400);
        return snug_srv_send_error(c, &e);
    }
    struct snug_detok d;
    struct snug_err err = {0};
    struct snug_sbuf out = {0};
    if (snug_detok_init(&d, s->tok, 0, &err) == SNUG_OK) {
        size_t i;
        json_t *t;
        const char *txt;
        size_t tl;
        json_array_foreach(toks, i, t) {
            if (snug_detok_push(&d, (snug_token)json_integer_value(t), &txt, &tl) == SNUG_OK)
                snug_sbuf_append(&out, txt, tl);
        }
        snug_detok_flush(&d, &txt, &tl);
        snug_sbuf_append(&out, txt, tl);
        snug_detok_free(&d);
    }
    json_decref(root);
    json_t *b = json_pack("{s:o}", "content", snug_srv_json_str(out.data ? out.data : "", out.len));
    snug_sbuf_free(&out);
    snug_srv_count(s, ROUTE_DETOKENIZE, 200);
    return snug_srv_send_json(c, 200, b);
}

/* ==== routing =============================================================================== */

struct conn {
    struct snug_sbuf body;
    bool too_big;
    struct snug_srv_access log;
    enum snug_route route;
    void *pending; /* a non-streaming generation the (suspended) connection waits for */
};

/* The API whose error shape a request's errors take: Anthropic's for /v1/messages and
 * everything under it (also the gate's 401 / 404 / 405 / 415), else OpenAI's. */
static const struct snug_fmt *url_api(const char *url) {
    return snug_srv_anthropic_route(url) ? &snug_fmt_messages : &snug_fmt_chat;
}

/* An error answer in the shape of the route's API. */
static enum MHD_Result reject(struct snug_srv *s, struct MHD_Connection *c, const char *url,
                              enum snug_route r, int status, const char *type, const char *fmt,
                              const char *arg) {
    struct snug_server_error e;
    snug_server_error_set(&e, status, type, NULL, fmt, arg);
    snug_srv_count(s, r, (unsigned)status);
    return snug_srv_send_api_error(c, url_api(url), &e);
}

static size_t body_limit(const struct snug_srv *s) {
    return s->opts.max_body_bytes ? s->opts.max_body_bytes : (size_t)8 << 20;
}

static bool origin_ok(const void *ctx, const char *origin) {
    return snug_srv_origin_allowed(ctx, origin);
}

/* The checks made on the first call for a request, before any of its body is read (gate.c).
 * Answers (and returns true) when the request is refused; the body is then never buffered. */
static bool early_refusal(struct snug_srv *s, struct MHD_Connection *c, const char *url,
                          const char *method, enum snug_route *r, enum MHD_Result *res) {
    struct snug_gate_request q = {
        .url = url,
        .method = method,
        .authorization = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"),
        .origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin"),
        .content_type = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type"),
        .x_api_key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key"),
        .host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host")};
    struct snug_gate_policy p = {.api_key = s->opts.api_key, .origin_ok = origin_ok, .ctx = s};
    struct snug_server_error e;
    const char *allow = NULL;
    int status = snug_gate_check(&q, &p, r, &e, &allow);
    if (!status) return false;
    snug_srv_count(s, *r, (unsigned)status);
    *res = snug_srv_send_api_error_hdr(c, url_api(url), &e, allow ? "Allow" : NULL, allow);
    return true;
}

bool snug_srv_origin_allowed(const struct snug_srv *s, const char *origin) {
    const char *allow = s->opts.cors_origin; /* --cors; NULL: CORS off, no page may */
    return allow && origin && (!strcmp(allow, "*") || !strcmp(allow, origin));
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    struct snug_srv *s = cls;
    struct conn *cc = *con_cls;
    (void)version;
    if (!cc) {
        enum snug_route r;
        enum MHD_Result res;
        cc = snug_calloc(1, sizeof *cc);
        if (!cc) return send_static_error(c); /* out of memory: still an answer */
        *con_cls = cc;
        snug_srv_access_begin(&cc->log, method, url); /* refusals are logged too */
        snug_srv_access_enter(&cc->log);
        if (s->opts.cors_origin && !strcmp(method, "OPTIONS"))
            return snug_srv_preflight(c); /* no key: browsers send none */
        /* the chat page (webui.c): static, no key (the page asks for it) */
        if (!strcmp(method, "GET") && !s->opts.no_webui && snug_webui_route(url))
            return snug_webui_send(c);
        if (early_refusal(s, c, url, method, &r, &res)) return res;
        cc->route = r;
        cc->log.route = r; /* a request dropped before its answer counts as 499 there */
        cc->log.has_route = true;
        /* a body announced over the limit is dropped as it arrives, never kept (then 413) */
        cc->too_big = snug_gate_announced_over(
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length"), body_limit(s));
        return MHD_YES;
    }
    snug_srv_access_enter(&cc->log);
    enum snug_route r = cc->route;
    if (cc->pending) return snug_srv_generate_resume(s, c, &cc->pending);
    if (*upload_data_size) {
        snug_gate_body_add(&cc->body, &cc->too_big, body_limit(s), upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (cc->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "%zu bytes", body_limit(s));
        return reject(s, c, url, r, 413, "invalid_request_error",
                      "the request body is larger than the limit of %s", msg);
    }
    if (cc->body.oom) return reject(s, c, url, r, 500, "server_error", "%s", "out of memory");
    const char *body = cc->body.data ? cc->body.data : "";
    size_t len = cc->body.len;
    switch (r) {
    case ROUTE_CHAT:
        return snug_srv_generate(s, c, SNUG_REQ_CHAT, body, len, &cc->pending);
    case ROUTE_COMPLETION:
        return snug_srv_generate(s, c, SNUG_REQ_COMPLETION, body, len, &cc->pending);
    case ROUTE_MODELS:
        return snug_srv_models(s, c);
    case ROUTE_HEALTH:
        return do_health(s, c);
    case ROUTE_METRICS:
        return do_metrics(s, c);
    case ROUTE_TOKENIZE:
        return do_tokenize(s, c, body, len);
    case ROUTE_DETOKENIZE:
        return do_detokenize(s, c, body, len);
    case ROUTE_MESSAGES:
        return snug_msgs_handle(s, c, body, len, &cc->pending);
    case ROUTE_COUNT_TOKENS:
        return snug_msgs_count_tokens(s, c, body, len);
    case ROUTE_RESPONSES:
        return snug_resp_handle(s, c, body, len, &cc->pending);
    case ROUTE_MODEL:
        return snug_srv_model(s, c, url + 11);
    case ROUTE_RESPONSE:
        return snug_resp_stored(s, c, method, url + 14);
    default:
        return MHD_NO;
    }
}

/* A large body (a big schema, a long conversation) is parsed into many small blocks, each
 * below the mmap threshold (heap_policy below); once freed they stay in the connection thread's
 * arena (a schema of 0.7 MB refused ten times left RSS 74 MB up). After such a request, the free
 * pages of every arena go back to the system (malloc_trim(3)); a few milliseconds, only for bodies
 * of 256 KiB or more. */
#define HEAP_TRIM_BODY (256u * 1024)
static void heap_trim(void) {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    struct conn *cc = *con_cls;
    if (!cc) return;
    snug_srv_access_end(cls, &cc->log, c, toe);
    if (cc->pending) snug_srv_generate_abandon(cc->pending);
    bool large = cc->body.len >= HEAP_TRIM_BODY;
    snug_sbuf_free(&cc->body);
    snug_free(cc);
    *con_cls = NULL;
    if (large) heap_trim();
}

/* ==== boot and shutdown ===================================================================== */

static int read_file(const char *path, char **out, size_t *out_len, struct snug_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return snug_err_set(err, SNUG_ERR_IO, "cannot open the script file %s: %s", path,
                            strerror(errno));
    struct snug_sbuf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) snug_sbuf_append(&b, chunk, n);
    bool bad = ferror(f) || b.oom;
    fclose(f);
    if (bad) {
        snug_sbuf_free(&b);
        return snug_err_set(err, SNUG_ERR_IO, "cannot read the script file %s", path);
    }
    *out = snug_sbuf_take(&b, out_len);
    return *out ? SNUG_OK : snug_err_set(err, SNUG_ERR_NOMEM, "out of memory reading %s", path);
}

/* Thousands of connections need as many descriptors: lift the soft limit toward `want`
 * (never above the hard limit). */
static void raise_fd_limit(rlim_t want) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Request buffers come and go on the connection threads: bodies up to --max-body, rendered
 * prompts, /tokenize answers. glibc gives each thread its own arena and, after the first large
 * block is freed, raises its mmap threshold toward 32 MiB (and the trim threshold with it), so
 * later large buffers are carved from the arenas, whose freed pages stay resident: under 10
 * minutes of mixed traffic RSS climbed 13-24 MiB while each connection thread's arena held
 * 20-36 MiB with < 1 MiB in use (malloc_stats). A fixed threshold (it also stops the dynamic
 * adjustment, mallopt(3)) gives every block of 256 KiB or more its own mapping, returned to
 * the system when freed; the token path allocates nothing, so it costs nothing there. */
static void heap_policy(void) {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
#endif
}

/* MHD's accept policy: once SIGTERM is seen, a new connection is closed at once. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
    (void)addr, (void)addrlen;
    struct snug_srv *s = cls;
    return atomic_load(&s->draining) ? MHD_NO : MHD_YES;
}

/* SIGTERM: stop accepting, let in-flight generations finish for the grace period, then end
 * the rest (streams get a final SSE error event, waiting requests a 503) and give their
 * connections a moment to flush. Every suspended connection is resumed before the daemon
 * stops (MHD requires it). */
static void shutdown_gracefully(struct snug_srv *s) {
    if (!s->daemon) return;
    /* New connections are closed as they are accepted (on_accept); the listening socket itself
     * closes with MHD_stop_daemon. Not MHD_quiesce_daemon: libmicrohttpd 0.9.75 (Debian 12)
     * races it against its own epoll workers, which remove the listening socket from their
     * sets once they see the quiesce flag; the loser's epoll_ctl answers ENOENT and MHD_PANIC
     * aborts the process (seen in CI; later MHD versions tolerate ENOENT in one of the two
     * places). */
    atomic_store(&s->draining, true);
    double t_end = snug_time_s() + s->opts.shutdown_grace_s;
    while (snug_srv_live_count(s) > 0 && snug_time_s() < t_end) sleep_ms(20);
    atomic_store(&s->stopping, true);
    if (snug_srv_cancel_all(s) > 0) {
        double t_flush = snug_time_s() + 5.0;
        while (snug_srv_live_count(s) > 0 && snug_time_s() < t_flush) sleep_ms(20);
    }
}

int snug_server_run(const struct snug_server_opts *opts, struct snug_err *err) {
    struct snug_srv *s = snug_calloc(1, sizeof *s);
    if (!s) {
        snug_model_free(opts->model);
        return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
    }
    s->opts = *opts;
    s->model = opts->model; /* the caller's opened model, now the server's (or NULL) */
    if (!s->opts.host) s->opts.host = "127.0.0.1";
    if (s->opts.n_slots <= 0) s->opts.n_slots = 1;
    if (s->opts.queue_cap <= 0) s->opts.queue_cap = 4 * s->opts.n_slots;
    if (s->opts.http_threads <= 0) s->opts.http_threads = 4;
    if (s->opts.max_conns <= 0) s->opts.max_conns = 4096;
    if (s->opts.max_conns_per_ip <= 0) s->opts.max_conns_per_ip = 256;
    if (s->opts.idle_timeout_s <= 0) s->opts.idle_timeout_s = 30;
    if (s->opts.shutdown_grace_s <= 0) s->opts.shutdown_grace_s = 5;
    {
        struct snug_server_limits d = snug_server_limits_default(), *l = &s->opts.limits;
        if (!l->max_messages) l->max_messages = d.max_messages;
        if (!l->max_parts) l->max_parts = d.max_parts;
        if (!l->max_tools) l->max_tools = d.max_tools;
        if (!l->max_prompt_bytes) l->max_prompt_bytes = d.max_prompt_bytes;
    }
    pthread_mutex_init(&s->live_mu, NULL);
    raise_fd_limit((rlim_t)s->opts.max_conns + 256);
    /* jansson allocates through the counted allocator, so snug_heap_allocations_total in
     * /metrics covers the JSON side too (snug_free is free: objects made before are safe) */
    json_set_alloc_funcs(snug_malloc, snug_free);
    heap_policy();
    snug_srv_cors_init(opts->cors_origin);
    s->t_start = snug_time_s();
    s->created = (long)time(NULL);
    const char *base = strrchr(opts->model_path, '/');
    snprintf(s->model_id, sizeof s->model_id, "%s", base ? base + 1 : opts->model_path);
    int rc = SNUG_OK;

    /* block the stop signals in every thread; this one waits for them below */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* the port opens first; /health reports the load (boot.c) */
    struct snug_boot *boot = NULL;
    if ((rc = snug_boot_start(&boot, &s->opts, s->model_id, err))) goto done;
    snug_boot_read_weights(boot, opts->model_path);
    snug_boot_phase(boot, "planning and starting the engine");

    if (opts->script_path &&
        (rc = read_file(opts->script_path, &s->script_text, &s->script_len, err)))
        goto done;
    struct snug_model_params mp = {.path = opts->model_path, .n_threads = opts->n_threads};
    if (!s->model && (rc = snug_model_load(&s->model, &mp, err))) goto done;
    s->tok = snug_model_tokenizer(s->model);
    if (!s->tok) {
        rc = snug_err_set(err, SNUG_ERR_FORMAT, "%s carries no tokenizer (tokenizer.ggml.* keys)",
                          opts->model_path);
        goto done;
    }
    /* the vocabulary trie for grammar masks (src/grammar), shared by all requests */
    if ((rc = snug_vocab_trie_build(&s->trie, s->tok, err))) goto done;
    /* compiled grammars and warm matchers across requests (src/grammar/memo.h) */
    if ((rc = snug_grammar_memo_init(&s->grammar_memo, s->trie, 0, 0, err))) goto done;
    struct snug_engine_opts eo = {
        .n_slots = s->opts.n_slots,
        .n_ctx = opts->n_ctx,
        .kv_type = opts->kv_type,
        .n_threads = opts->n_threads,
        .queue_cap = s->opts.queue_cap,
        .backend = opts->backend,
        .vram_budget = opts->vram_budget,
        .n_chunk = opts->n_chunk,
        /* default: 3 drafts when the model has an MTP block — but not under --script, whose
         * generation follows a text and never drafts (verify would see idle counters) */
        .n_draft = opts->n_draft >= 0                                         ? opts->n_draft
                   : (snug_model_n_nextn(s->model) > 0 && !opts->script_path) ? 3
                                                                              : 0,
        .spec_adapt = opts->spec_adapt};
    if (eo.n_draft > 0 && snug_model_n_nextn(s->model) <= 0) {
        rc = snug_err_set(err, SNUG_ERR_INVALID,
                          "--spec-draft %d: %s has no MTP block (nextn_predict_layers = 0); use "
                          "--spec-draft 0",
                          eo.n_draft, opts->model_path);
        goto done;
    }
    if ((rc = boot_plan(s, &eo, err))) goto done;
    eo.prefix = s->prefix;
    eo.cache_every = opts->cache_every;
    eo.prompt_budget = opts->prompt_budget;
    eo.vision = s->venc;
    if ((rc = snug_engine_init(&s->engine, s->model, &eo, err))) goto done;
    if ((rc = snug_responses_store_init(&s->responses, opts->responses_store))) {
        rc = snug_err_set(err, SNUG_ERR_NOMEM, "out of memory for the responses store");
        goto done;
    }

    /* a few connection threads, each an epoll loop over many connections; generations
     * suspend their connection while the engine works (reply.c), so no thread blocks on one.
     * The listening socket is the loading daemon's (boot.c: --host resolved and bound there). */
    s->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME, 0, on_accept, s,
        on_request, s, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)snug_boot_handoff(boot),
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)s->opts.http_threads, MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->opts.max_conns,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->opts.max_conns_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->opts.idle_timeout_s,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_END);
    if (!s->daemon) {
        rc = snug_err_set(err, SNUG_ERR_IO, "cannot serve on %s port %d", s->opts.host, opts->port);
        goto done;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    int port = di && di->port ? di->port : snug_boot_port(boot);

    struct snug_engine_stats st;
    snug_engine_get_stats(s->engine, &st);
    fprintf(stderr,
            "snug serve: model %s (%s, %d layers, n_embd %d, vocab %d)\n"
            "snug serve: %d slot(s) x %d tokens of context, KV %s, queue %d, threads %d, "
            "spec-draft %d%s%s%s\n"
            "snug serve: memory: %.1f MiB resident; self-test %s\n"
            "snug serve: listening on http://%s:%d%s\n",
            opts->model_path, snug_model_arch(s->model), snug_model_n_layer(s->model),
            snug_model_n_embd(s->model), snug_model_n_vocab(s->model), st.n_slots, st.n_ctx,
            kv_name(opts->kv_type), st.queue_cap, opts->n_threads, st.n_draft,
            st.n_draft > 0 && st.spec_adapt ? " (at most: --spec-adapt on)" : "",
            opts->no_think ? ", thinking off" : "",
            s->script_text ? ", SCRIPTED generation (test mode)" : "", snug_rss_bytes() / 1048576.0,
            snug_engine_self_test(s->engine), snug_boot_addr(boot), port,
            opts->api_key ? " (API key required)" : "");
    if (opts->port_file) {
        FILE *pf = fopen(opts->port_file, "w");
        if (pf) fprintf(pf, "%d\n", port), fclose(pf);
    }
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "snug serve: signal %d, shutting down (grace %.1f s)\n", sig,
            s->opts.shutdown_grace_s);
    shutdown_gracefully(s);

done:
    snug_boot_free(boot);
    if (s->daemon) MHD_stop_daemon(s->daemon);
    pthread_mutex_destroy(&s->live_mu);
    snug_engine_free(s->engine);
    snug_vision_encoder_free(s->venc);
    snug_vision_be_close(s->vision_be);
    snug_vision_free(s->vision);
    if (s->prefix) snug_prefix_free(s->prefix);
    snug_free(s->prefix);
    snug_responses_store_free(s->responses);
    snug_grammar_memo_free(s->grammar_memo); /* (the engine, and every request, is gone) */
    snug_vocab_trie_free(s->trie);
    snug_model_free(s->model);
    snug_free(s->script_text);
    snug_free(s);
    return rc;
}
