/* cmd_serve.c — `snug serve`: parse the flags into struct snug_server_opts and run the
 * OpenAI-compatible server until SIGINT/SIGTERM; `snug serve --render-only REQUEST.json` prints
 * the chat prompt a request renders to (the chat renderer's test hook).
 * Read next: src/server/server.h.
 */
#include "cli.h"

#include "server/chat.h"
#include "plan/plan.h"
#include "server/server.h"

#include <stdio.h>
#include <string.h>

static void serve_usage(void) {
    fprintf(
        stderr,
        "usage: snug serve [-m M.gguf] [--host 127.0.0.1] [--port 8080] [--ctx N] [--slots N]\n"
        "                  [--kv F] [--kv-k F] [--kv-v F] (F: f16 f32 bf16 q8_0 fp8 tq4 tq3) "
        "[--api-key K] [--threads N] "
        "[--spec-draft N] [--budget SIZE] "
        "[--no-think] [--no-webui]\n"
        "                  [--queue N] [--timeout SECONDS] [--max-body BYTES]\n"
        "                  [--port-file FILE] [--script FILE]\n"
        "       snug serve --render-only REQUEST.json [--no-thinking]\n"
        "  -m          the model (default: the demo model, docs/demo-model.md)\n"
        "  --ctx       context per slot in tokens (default 4096, capped at the training length)\n"
        "  --slots     concurrent requests (default 1); --queue: waiting requests beyond the\n"
        "              free slots before 503 (default 4 x slots)\n"
        "  --budget SIZE  refuse to start when the memory plan exceeds SIZE (e.g. 2GiB)\n"
        "  --spec-draft N  MTP drafts per speculative step (default 3 with an MTP block, else 0)\n"
        "  --no-webui  no chat page at / (by default the server answers / with it)\n"
        "  --no-think  thinking off unless a request sets chat_template_kwargs.enable_thinking\n"
        "  --port 0    any free port; --port-file writes the bound port to FILE\n"
        "  --script    TEST ONLY: generation follows FILE's text (or a request's snug_script)\n");
}

int cmd_serve(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--render-only")) return cmd_serve_render(argc, argv);
    struct snug_server_opts o = {.host = "127.0.0.1", .port = 8080, .n_slots = 1, .n_draft = -1};
    struct cli_kv kv = CLI_KV_DEFAULT;
    int kvr;
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
            if (!cli_int(argc, argv, &i, &v) || v < 0 || v > (1L << 30)) return 2;
            o.n_ctx = (int32_t)v;
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
        } else if (!strcmp(a, "--queue")) {
            if (!cli_int(argc, argv, &i, &v) || v < 1 || v > 100000) return 2;
            o.queue_cap = (int32_t)v;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (!cli_int(argc, argv, &i, &v) || v < 0 || v > 1024) return 2;
            o.n_threads = (int32_t)v;
        } else if ((kvr = cli_kv_flag(argc, argv, &i, "serve", &kv)) != 0) {
            if (kvr < 0) return 2;
            o.kv_type = cli_kv_code(&kv);
        } else if (!strcmp(a, "--api-key")) {
            if (!(o.api_key = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--no-think")) {
            o.no_think = true;
        } else if (!strcmp(a, "--no-webui")) {
            o.no_webui = true;
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
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage();
            return 0;
        } else {
            fprintf(stderr, "snug serve: unknown option '%s'\n", a);
            serve_usage();
            return 2;
        }
    }
    if (!o.model_path) {
        if (!(o.model_path = cli_default_model("serve"))) return 1;
        fprintf(stderr, "snug serve: no -m given: serving the demo model %s\n", o.model_path);
    }
    struct snug_err err = {0};
    if (snug_server_run(&o, &err) != SNUG_OK) return cli_fail("serve", &err);
    return 0;
}
