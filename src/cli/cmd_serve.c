/* cmd_serve.c — `snug serve`: parse the flags into struct snug_server_opts and run the
 * OpenAI-compatible server until SIGINT/SIGTERM; `snug serve --render-only REQUEST.json [same
 * flags]` prints the chat prompt a request renders to (the chat renderer's test hook), with
 * `--render-api messages|responses` for a body of the Anthropic / Responses APIs.
 * Read next: src/server/server.h.
 */
#include "cli.h"
#include "cli_cache.h"

#include "core/core.h"

#include "server/chat.h"
#include "plan/plan.h"
#include "vision/vision.h"
#include "server/server.h"
#include "server/think.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static void serve_usage(void) {
    fprintf(
        stderr,
        "usage: snug serve -m M.gguf [flags]\n"
        "       snug serve --render-only REQUEST.json [--render-api chat|messages|responses] "
        "[flags]\n"
        "  -m, --model FILE        the GGUF model to serve (default: the demo model,\n"
        "                          docs/demo-model.md)\n"
        "  --host ADDR             address or name to listen on: IPv4, IPv6 (::1, :: = all), "
        "localhost (default 127.0.0.1)\n"
        "  --port N                TCP port (default 8080; 0 = any free port)\n"
        "  --port-file FILE        write the bound port to FILE once listening\n"
        "  --ctx N|max             context per slot in tokens; default (or max): the largest the "
        "budget\n"
        "                          allows, capped at the trained length (docs/memory.md)\n"
        "  --slots N               requests generated concurrently (default 1)\n"
        "  --queue N               requests waiting beyond the free slots before 503 (default 4 x "
        "slots)\n"
        "  --kv F|auto             attention KV cache format for K and V: f16 f32 bf16 q8_0 fp8 "
        "tq4 tq3;\n"
        "                          auto: the least lossy format (or K/V pair) reaching the "
        "context\n"
        "  --kv-k F, --kv-v F      the KV format of the keys / of the values alone\n"
        "  --threads N, -t N       threads per context (default: all CPUs)\n"
        "  --spec-draft N          MTP drafts per speculative step (default 3 with an MTP block, "
        "else 0)\n"
        "  --step-prompt N         prompt tokens a new request adds per engine step, beside the "
        "other\n"
        "                          slots' decode rows (default 512, the chunk; smaller keeps their "
        "streams\n"
        "                          smoother while a long prompt is admitted)\n"
        "  --backend cpu|cuda      where the model runs (cuda: libsnug_cuda.so, loaded at start)\n"
        "  --vram-budget SIZE      --backend cuda: the GPU plan must fit SIZE\n"
        "  --mmproj FILE           the vision tower (the model's mmproj GGUF): image parts as "
        "data: URLs\n"
        "                          (its memory is in the plan)\n"
        "  --vision-backend cpu|cuda  where the tower runs (default: where the model runs)\n"
        "  --min-image-pixels N, --max-image-pixels N\n"
        "                          images are resized into [N, M] pixels (default 65536, "
        "16777216)\n"
        "  --max-source-pixels N   decoded images larger than N pixels get a 400 (default "
        "33554432)\n"
        "  --budget SIZE           the memory the plan must fit (e.g. 2GiB); default for sizing: "
        "the\n"
        "                          physical memory minus max(1/8, 1 GiB); the boot log's `plan:`\n"
        "                          line repeats the choice as flags that give the same plan\n"
        "  --api-key K             require 'Authorization: Bearer K' or 'x-api-key: K' (not on "
        "/health)\n"
        "  --timeout SECONDS       per-request time limit (default 600)\n"
        "  --max-body BYTES        request body limit (default 8 MiB; larger bodies get 413)\n"
        "  --alias NAME            also answer to model NAME (repeatable, up to 16)\n"
        "  --any-model             accept any model name in requests\n"
        "  --cors ORIGIN           allow browser clients from ORIGIN ('*' = any); off by default\n"
        "  --no-think, --no-thinking  thinking off unless a request turns it on\n"
        "  --thinking-budget N     default reasoning budget in tokens (then the server closes "
        "the block)\n"
        "  --reasoning-repeat-guard N,K  close a reasoning block once an N-token span occurred K "
        "times\n"
        "  --responses-store N     /v1/responses kept for previous_response_id (LRU, default 64)\n"
        "  --no-access-log         no per-request line on stderr\n"
        "  --no-webui              no chat page at / (by default the server answers / with it)\n"
        "  --no-prompt-normalize   keep agent clients' per-request spans (the Claude Code billing "
        "line)\n" CLI_CACHE_USAGE
        "  --script FILE           TEST ONLY: generation follows FILE's text (or a request's "
        "snug_script)\n"
        "  --render-only FILE      print the prompt a request body renders to and exit ('-' = "
        "stdin)\n"
        "  --render-api API        the body's API for --render-only: chat (default), messages, "
        "responses\n"
        "  --api-key-file FILE     the key is FILE's first line (--api-key is visible in the "
        "process list)\n"
        "  --http-threads N        connection threads (default 4)\n"
        "  --max-conns N           open connections in all (default 4096)\n"
        "  --max-conns-per-ip N    open connections of one client address (default 256)\n"
        "  --idle-timeout S        idle keep-alive connections closed after S seconds (default "
        "30)\n"
        "  --shutdown-grace S      on SIGTERM in-flight requests may finish for S seconds (default "
        "5)\n"
        "  --max-messages N, --max-parts N, --max-tools N, --max-prompt-bytes N  request-cost\n"
        "                          limits (defaults 1024, 256, 128, 4194304; over them: 413)\n"
        "  --special-tokens-in-content  parse special tokens (<|im_end|>, ...) inside message\n"
        "                          text as the template's own (injectable; off by default)\n");
}

/* --render-only: the prompt of a request body, rendered as the server would. */
static int render_only(const struct snug_server_opts *o, const char *path, const char *api) {
    json_error_t jerr;
    json_t *req = !strcmp(path, "-") ? json_loadf(stdin, JSON_ALLOW_NUL, &jerr)
                                     : json_load_file(path, JSON_ALLOW_NUL, &jerr);
    if (!req) {
        fprintf(stderr, "error: %s: %s (line %d)\n", path, jerr.text, jerr.line);
        return 2;
    }
    struct snug_server_error e = {0};
    char *prompt = NULL;
    size_t len = 0;
    int rc;
    if (!strcmp(api, "chat")) {
        /* the renderer alone (no request validation), so its rejections are the template's own
         * (the golden comparison against jinja2: tests/py/test_chat_template.py) */
        struct snug_err err = {0};
        struct snug_chat_opts co = snug_chat_default_opts(!o->no_think);
        rc = snug_chat_opts_from_request(&co, req, &err);
        if (!rc)
            rc = snug_chat_render(json_object_get(req, "messages"), json_object_get(req, "tools"),
                                  &co, &prompt, &len, &err);
        if (rc) snprintf(e.msg, sizeof e.msg, "%.*s", (int)sizeof e.msg - 1, err.msg);
        json_decref(req);
    } else {
        json_t *chat = !strcmp(api, "messages") ? snug_server_messages_to_chat(req, &e)
                                                : snug_server_responses_to_chat(req, &e);
        json_decref(req);
        rc = !chat || snug_server_render_chat(o, chat, &prompt, &len, &e);
    }
    if (rc) {
        fprintf(stderr, "error: %s\n", e.msg);
        return 1;
    }
    fwrite(prompt, 1, len, stdout);
    fflush(stdout);
    snug_free(prompt);
    return 0;
}

/* --api-key-file: the key is the file's first line (trailing CR/LF and blanks dropped). */
static const char *read_key_file(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "snug serve: cannot open the API key file %s\n", path);
        return NULL;
    }
    size_t n = fread(buf, 1, cap - 1, f);
    bool more = fgetc(f) != EOF;
    fclose(f);
    buf[n] = 0;
    char *nl = strpbrk(buf, "\r\n");
    if (nl)
        *nl = 0;
    else if (more) {
        fprintf(stderr, "snug serve: the API key in %s is longer than %zu bytes\n", path, cap - 2);
        return NULL;
    }
    n = strlen(buf);
    while (n && (buf[n - 1] == ' ' || buf[n - 1] == '\t')) buf[--n] = 0;
    if (!n) {
        fprintf(stderr, "snug serve: the API key file %s is empty\n", path);
        return NULL;
    }
    return buf;
}

/* A non-negative integer flag in [lo, hi] into *out (size_t or int32_t through a long). */
static bool serve_int(int argc, char **argv, int *i, long lo, long hi, long *out) {
    long v;
    if (!cli_int(argc, argv, i, &v) || v < lo || v > hi) {
        fprintf(stderr, "snug serve: %s wants %ld..%ld\n", argv[*i - 1 < 0 ? 0 : *i - 1], lo, hi);
        return false;
    }
    *out = v;
    return true;
}

int cmd_serve(int argc, char **argv) {
    int vision_backend = -1; /* --vision-backend; unset: where the model runs */
    struct snug_server_opts o = {
        .host = "127.0.0.1", .port = 8080, .n_slots = 1, .n_draft = -1, .thinking_budget = -1};
    struct cli_kv kv = CLI_KV_DEFAULT;
    kv.allow_auto = true;
    int32_t kv_code = SNUG_KV_F16;
    bool ctx_max = false;
    struct snug_plan_cache_flags cache = {.ram_bytes = SNUG_CACHE_RAM_AUTO}; /* on by default */
    const char *render_path = NULL, *render_api = "chat";
    static char key_buf[4096];
    struct cli_backend bk = {0};
    int kvr, bkr;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        double d;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(o.model_path = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--host")) {
            if (!(o.host = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--port")) {
            if (!cli_int(argc, argv, &i, &v) || v < 0 || v > 65535) return 2;
            o.port = (int)v;
        } else if (!strcmp(a, "--ctx")) {
            if (!cli_ctx_value(argc, argv, &i, "serve", &v, &ctx_max)) return 2;
            o.n_ctx = (int32_t)v; /* 0 with max: sized by itself, as without --ctx */
        } else if (!strcmp(a, "--slots")) {
            if (!cli_int(argc, argv, &i, &v) || v < 1 || v > 256) {
                fprintf(stderr, "snug serve: --slots wants 1..256\n");
                return 2;
            }
            o.n_slots = (int32_t)v;
        } else if (!strcmp(a, "--budget")) {
            const char *b = cli_value(argc, argv, &i);
            if (!b || !snug_plan_parse_size(b, &o.budget)) {
                fprintf(stderr, "snug serve: --budget wants a size such as 2GiB or 512MiB\n");
                return 2;
            }
        } else if (!strcmp(a, "--spec-draft")) {
            if (!cli_int(argc, argv, &i, &v) || v < 0 || v > 16) {
                fprintf(stderr, "snug serve: --spec-draft wants 0..16 (0 = off)\n");
                return 2;
            }
            o.n_draft = (int32_t)v;
        } else if (!strcmp(a, "--step-prompt")) {
            if (!cli_int(argc, argv, &i, &v) || v < 1 || v > 1 << 20) {
                fprintf(stderr, "snug serve: --step-prompt wants a token count >= 1\n");
                return 2;
            }
            o.prompt_budget = (int32_t)v;
        } else if (!strcmp(a, "--queue")) {
            if (!cli_int(argc, argv, &i, &v) || v < 1 || v > 100000) return 2;
            o.queue_cap = (int32_t)v;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (!cli_int(argc, argv, &i, &v) || v < 0 || v > 1024) return 2;
            o.n_threads = (int32_t)v;
        } else if ((kvr = cli_kv_flag(argc, argv, &i, "serve", &kv)) != 0) {
            if (kvr < 0) return 2;
            kv_code = cli_kv_code(&kv);
        } else if ((bkr = cli_backend_flag(argc, argv, &i, "serve", &bk)) != 0) {
            if (bkr < 0) return 2;
            o.backend = bk.backend;
            o.vram_budget = bk.vram_budget;
        } else if (!strcmp(a, "--api-key")) {
            if (!(o.api_key = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--api-key-file")) {
            const char *path = cli_value(argc, argv, &i);
            if (!path || !(o.api_key = read_key_file(path, key_buf, sizeof key_buf))) return 2;
        } else if (!strcmp(a, "--http-threads")) {
            if (!serve_int(argc, argv, &i, 1, 256, &v)) return 2;
            o.http_threads = (int32_t)v;
        } else if (!strcmp(a, "--max-conns")) {
            if (!serve_int(argc, argv, &i, 1, 1000000, &v)) return 2;
            o.max_conns = (int32_t)v;
        } else if (!strcmp(a, "--max-conns-per-ip")) {
            if (!serve_int(argc, argv, &i, 1, 1000000, &v)) return 2;
            o.max_conns_per_ip = (int32_t)v;
        } else if (!strcmp(a, "--idle-timeout")) {
            if (!serve_int(argc, argv, &i, 1, 86400, &v)) return 2;
            o.idle_timeout_s = (int32_t)v;
        } else if (!strcmp(a, "--shutdown-grace")) {
            if (!cli_float(argc, argv, &i, &d) || d < 0.01 || d > 3600) return 2;
            o.shutdown_grace_s = d;
        } else if (!strcmp(a, "--max-messages")) {
            if (!serve_int(argc, argv, &i, 1, 1L << 30, &v)) return 2;
            o.limits.max_messages = (size_t)v;
        } else if (!strcmp(a, "--max-parts")) {
            if (!serve_int(argc, argv, &i, 1, 1L << 30, &v)) return 2;
            o.limits.max_parts = (size_t)v;
        } else if (!strcmp(a, "--max-tools")) {
            if (!serve_int(argc, argv, &i, 1, 1L << 30, &v)) return 2;
            o.limits.max_tools = (size_t)v;
        } else if (!strcmp(a, "--max-prompt-bytes")) {
            if (!serve_int(argc, argv, &i, 1024, 1L << 40, &v)) return 2;
            o.limits.max_prompt_bytes = (size_t)v;
        } else if (!strcmp(a, "--special-tokens-in-content")) {
            o.special_in_content = true;
        } else if (!strcmp(a, "--no-think") || !strcmp(a, "--no-thinking")) {
            o.no_think = true;
        } else if (!strcmp(a, "--no-prompt-normalize")) {
            o.no_prompt_normalize = true;
        } else if ((kvr = cli_cache_flag(argc, argv, &i, "serve", &cache)) != 0) {
            if (kvr < 0) return 2;
        } else if (!strcmp(a, "--no-webui")) {
            o.no_webui = true;
        } else if (!strcmp(a, "--mmproj")) {
            if (!(o.mmproj = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--vision-backend")) {
            const char *b = cli_value(argc, argv, &i);
            if (!b) return 2;
            if (strcmp(b, "cpu") && strcmp(b, "cuda")) {
                fprintf(stderr, "snug serve: --vision-backend '%s': expected cpu or cuda\n", b);
                return 2;
            }
            vision_backend = !strcmp(b, "cuda");
        } else if (!strcmp(a, "--min-image-pixels") || !strcmp(a, "--max-image-pixels") ||
                   !strcmp(a, "--max-source-pixels")) {
            long v = 0;
            if (!cli_int(argc, argv, &i, &v)) return 2;
            if (v < 1 || v > SNUG_VISION_PIXELS_LIMIT) {
                fprintf(stderr, "snug serve: %s %ld: expected 1..%lld\n", a, v,
                        (long long)SNUG_VISION_PIXELS_LIMIT);
                return 2;
            }
            if (!strcmp(a, "--min-image-pixels"))
                o.min_image_pixels = v;
            else if (!strcmp(a, "--max-image-pixels"))
                o.max_image_pixels = v;
            else
                o.max_source_pixels = v;
        } else if (!strcmp(a, "--script")) {
            if (!(o.script_path = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--timeout")) {
            if (!cli_float(argc, argv, &i, &d) || d <= 0) return 2;
            o.timeout_s = d;
        } else if (!strcmp(a, "--max-body")) {
            if (!cli_int(argc, argv, &i, &v) || v < 1024) return 2;
            o.max_body_bytes = (size_t)v;
        } else if (!strcmp(a, "--port-file")) {
            if (!(o.port_file = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--alias")) {
            const char *n = cli_value(argc, argv, &i);
            if (!n) return 2;
            if (o.n_aliases >= SNUG_SERVER_MAX_ALIASES) {
                fprintf(stderr, "snug serve: at most %d --alias names\n", SNUG_SERVER_MAX_ALIASES);
                return 2;
            }
            o.aliases[o.n_aliases++] = n;
        } else if (!strcmp(a, "--any-model")) {
            o.any_model = true;
        } else if (!strcmp(a, "--cors")) {
            if (!(o.cors_origin = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--thinking-budget")) {
            if (!cli_int(argc, argv, &i, &v) || v < 0 || v > INT32_MAX) {
                fprintf(stderr, "snug serve: --thinking-budget wants a token count >= 0\n");
                return 2;
            }
            o.thinking_budget = (int32_t)v;
        } else if (!strcmp(a, "--reasoning-repeat-guard")) {
            const char *g = cli_value(argc, argv, &i);
            if (!g || !snug_think_parse_guard(g, &o.repeat_n, &o.repeat_k)) {
                fprintf(stderr, "snug serve: --reasoning-repeat-guard wants N,K (span of N in "
                                "1..4096 tokens, K >= 2 occurrences), e.g. 16,4\n");
                return 2;
            }
        } else if (!strcmp(a, "--responses-store")) {
            if (!cli_int(argc, argv, &i, &v) || v < 1 || v > 1000000) return 2;
            o.responses_store = (int32_t)v;
        } else if (!strcmp(a, "--no-access-log")) {
            o.no_access_log = true;
        } else if (!strcmp(a, "--render-only")) {
            if (!(render_path = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--render-api")) {
            if (!(render_api = cli_value(argc, argv, &i))) return 2;
            if (strcmp(render_api, "chat") && strcmp(render_api, "messages") &&
                strcmp(render_api, "responses")) {
                fprintf(stderr, "snug serve: --render-api wants chat, messages or responses\n");
                return 2;
            }
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage();
            return 0;
        } else {
            fprintf(stderr, "snug serve: unknown option '%s'\n", a);
            serve_usage();
            return 2;
        }
    }
    o.vision_backend = vision_backend >= 0 ? vision_backend : o.backend == 1;
    if (render_path) return render_only(&o, render_path, render_api);
    if (!o.model_path) {
        if (!(o.model_path = cli_default_model("serve"))) return 1;
        fprintf(stderr, "snug serve: no -m given: serving the demo model %s\n", o.model_path);
    }
    o.cache_ram = cache.ram_bytes;
    o.cache_dir = cache.disk_dir;
    o.cache_disk = cache.disk_bytes;
    o.cache_every = cache.checkpoint_every;
    struct snug_err err = {0};
    /* the context and KV formats, sized by itself unless both are given (cli_autosize.c) */
    if (cli_serve_size(&o, kv_code, &err) != SNUG_OK) return cli_fail("serve", &err);
    if (snug_server_run(&o, &err) != SNUG_OK) return cli_fail("serve", &err);
    return 0;
}
