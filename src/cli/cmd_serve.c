/* cmd_serve.c — `snug serve`: parse the flags into struct snug_server_opts and run the
 * OpenAI-compatible server until SIGINT/SIGTERM; `snug serve --render-only REQUEST.json` prints
 * the chat prompt a request renders to (the chat renderer's test hook).
 * Read next: src/server/server.h.
 */
#include "cli.h"

#include "server/chat.h"
#include "plan/plan.h"
#include "server/server.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static void serve_usage(void) {
    fprintf(
        stderr,
        "usage: snug serve -m M.gguf [--host 127.0.0.1] [--port 8080] [--ctx N] [--slots N]\n"
        "                  [--kv F] [--kv-k F] [--kv-v F] (F: f16 f32 bf16 q8_0 fp8 tq4 tq3) "
        "[--api-key K] [--threads N] "
        "[--spec-draft N] [--budget SIZE] "
        "[--no-think]\n"
        "                  [--queue N] [--timeout SECONDS] [--max-body BYTES]\n"
        "                  [--port-file FILE] [--script FILE]\n"
        "       snug serve --render-only REQUEST.json [--no-thinking]\n"
        "  --ctx       context per slot in tokens (default 4096, capped at the training length)\n"
        "  --slots     concurrent requests (default 1); --queue: waiting requests beyond the\n"
        "              free slots before 503 (default 4 x slots)\n"
        "  --budget SIZE  refuse to start when the memory plan exceeds SIZE (e.g. 2GiB)\n"
        "  --spec-draft N  MTP drafts per speculative step (default 3 with an MTP block, else 0)\n"
        "  --no-think  thinking off unless a request sets chat_template_kwargs.enable_thinking\n"
        "  --port 0    any free port; --port-file writes the bound port to FILE\n"
        "  --script    TEST ONLY: generation follows FILE's text (or a request's snug_script)\n"
        "  --api-key K  clients must send 'Authorization: Bearer K' (visible in the process list;\n"
        "              prefer --api-key-file FILE: the key is FILE's first line)\n"
        "  limits:     [--http-threads 4] [--max-conns 4096] [--max-conns-per-ip 256]\n"
        "              [--idle-timeout 30] [--shutdown-grace 5] [--max-messages 1024]\n"
        "              [--max-parts 256] [--max-tools 128] [--max-prompt-bytes 4194304]\n"
        "  --special-tokens-in-content  parse special tokens (<|im_end|>, ...) inside message\n"
        "              text as the template's own (injectable; off by default)\n");
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
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--render-only")) return cmd_serve_render(argc, argv);
    struct snug_server_opts o = {.host = "127.0.0.1", .port = 8080, .n_slots = 1, .n_draft = -1};
    struct cli_kv kv = CLI_KV_DEFAULT;
    static char key_buf[4096];
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
        } else if (!strcmp(a, "--no-think")) {
            o.no_think = true;
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
        serve_usage();
        return 2;
    }
    struct snug_err err = {0};
    if (snug_server_run(&o, &err) != SNUG_OK) return cli_fail("serve", &err);
    return 0;
}
