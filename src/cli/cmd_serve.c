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
#include "plan/plan_auto.h"
#include "vision/vision.h"
#include "server/server.h"
#include "server/think.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

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
        struct snug_server_req q;
        rc = !strcmp(api, "messages") ? snug_server_messages_parse(&q, req, &e)
                                      : snug_server_responses_parse(&q, req, &e);
        json_decref(req);
        if (!rc) {
            rc = snug_server_render_req(o, &q, &prompt, &len, &e);
            snug_server_req_free(&q);
        }
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

enum {
    O_MODEL = 1,
    O_HOST,
    O_PORT,
    O_PORT_FILE,
    O_CTX,
    O_SLOTS,
    O_QUEUE,
    O_BUDGET,
    O_SPEC,
    O_SPEC_ADAPT,
    O_STEP_PROMPT,
    O_THREADS,
    O_BACKEND,
    O_VRAM_BUDGET,
    O_CUDA_PROFILE,
    O_API_KEY,
    O_API_KEY_FILE,
    O_ALIAS,
    O_ANY_MODEL,
    O_CORS,
    O_NO_WEBUI,
    O_NO_ACCESS_LOG,
    O_NO_THINK,
    O_THINKING_BUDGET,
    O_REPEAT_GUARD,
    O_RESPONSES_STORE,
    O_TIMEOUT,
    O_SPECIAL_IN_CONTENT,
    O_MAX_BODY,
    O_MAX_MESSAGES,
    O_MAX_PARTS,
    O_MAX_TOOLS,
    O_MAX_PROMPT_BYTES,
    O_HTTP_THREADS,
    O_MAX_CONNS,
    O_MAX_CONNS_PER_IP,
    O_IDLE_TIMEOUT,
    O_SHUTDOWN_GRACE,
    O_MMPROJ,
    O_VISION_BACKEND,
    O_MIN_PX,
    O_MAX_PX,
    O_MAX_SRC,
    O_NO_PROMPT_NORMALIZE,
    O_SCRIPT,
    O_RENDER_ONLY,
    O_RENDER_API,
};
static const struct cli_opt OPTS[] = {
    /* ---- the model and its memory */
    {.id = O_MODEL,
     .names = "-m, --model",
     .kind = CLI_TEXT,
     .meta = "FILE",
     .def = "the demo model",
     .help = "the GGUF model to serve",
     .more = "Without it: the demo model (`data/demo/snug-demo-q8_0.gguf`, next to the binary, "
             "in the source tree or `<prefix>/share/snug`; docs/demo-model.md), and the boot log "
             "says so.",
     .group = "Model and memory"},
    {.id = O_CTX,
     .names = "--ctx",
     .kind = CLI_INT,
     .meta = "N|max",
     .lo = 1,
     .hi = 1 << 30,
     .word = "max",
     .def = "max",
     .help = "context per slot in tokens; max: the largest context whose plan fits the budget, "
             "capped at the model's trained length",
     .more = "How: docs/memory.md, \"Sizing by itself\"; the boot log's `plan:` line repeats the "
             "choice as flags that give the same plan."},
    {.id = O_SLOTS,
     .names = "--slots",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 256,
     .def = "1",
     .help = "requests generated concurrently",
     .more = "Each slot has its own KV cache and DeltaNet state (and MTP state), all allocated at "
             "boot; the slots share the model's one backend instance, work arena and thread pool "
             "(`src/engine/slots.h`)."},
    {.id = O_QUEUE,
     .names = "--queue",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 100000,
     .def = "4 x slots",
     .help = "requests that may wait beyond the free slots; more get 503 with Retry-After: 1"},
    {.id = O_BUDGET,
     .names = "--budget",
     .kind = CLI_SIZE,
     .meta = "SIZE",
     .def = "physical memory minus max(1/8, 1 GiB)",
     .help = "host memory the boot plan must fit (e.g. 2GiB); over it the server refuses to "
             "start and names the largest context that fits"},
    {.id = O_SPEC,
     .names = "--spec-draft",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = SNUG_SPEC_MAX_DRAFT,
     .def = "3 with an MTP block and no --script, else 0",
     .help = "speculative decoding with the model's MTP block: N drafts per step (0 = off)",
     .more = "Greedy output is identical to plain decoding; sampled output follows the same "
             "distribution (docs/spec-decode.md). Requests with `logprobs` decode plainly."},
    {.id = O_SPEC_ADAPT,
     .names = "--spec-adapt",
     .kind = CLI_CHOICE,
     .meta = "on|off",
     .def = "on",
     .help = "each step's drafts chosen in 0..N (--spec-draft N) from the request's measured "
             "acceptance and step times; off: N drafts every step",
     .more = "Per request, a moving average of the drafts' acceptance and of the time of a step "
             "with j drafts; each step takes the j with the most expected tokens per second, and "
             "every 16th step tries a neighbouring j, so a request whose drafts stopped paying "
             "goes back to drafting when they pay again (docs/spec-decode.md). The output does "
             "not depend on the draft counts (greedy, and sampled with the same seed); `off` "
             "is for measuring a fixed N."},
    CLI_OPTS_CHUNK,
    {.id = O_STEP_PROMPT,
     .names = "--step-prompt",
     .kind = CLI_INT,
     .meta = "N|auto",
     .lo = 1,
     .hi = 1 << 20,
     .word = "auto",
     .def = "auto",
     .help = "prompt tokens a new request adds per engine step, beside the other slots' decode "
             "rows. auto: while other requests are streaming, as many as keep a step within "
             "about twice a plain decode step (measured as the server runs; at least 32), else "
             "the whole chunk; N: always N (at most the chunk)",
     .more = "auto trades prompt speed for steady streams: a long prompt that arrives while "
             "others stream prefills in smaller pieces and takes longer, and in exchange each "
             "stream's time between tokens grows to about twice its usual instead of by a "
             "whole chunk's time (pieces stay at 32 tokens or more, so where a step with "
             "prompt rows costs more than that on its own, the streams slow by one such "
             "step). A fixed N cuts the same pieces whatever else runs (smaller: smoother "
             "streams, slower prompts). `snug_step_prompt_rows` in /metrics shows the piece "
             "auto uses now."},
    {.id = O_THREADS,
     .names = "-t, --threads",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 1024,
     .def = "all CPUs",
     .help = "threads of the model's pool"},
    CLI_OPTS_KV_AUTO,
    /* ---- where it runs */
    {.id = O_BACKEND,
     .names = "--backend",
     .kind = CLI_CHOICE,
     .meta = "cpu|cuda",
     .def = "cpu",
     .help = "where the model runs",
     .more = "`cuda` loads `libsnug_cuda.so` (built beside `snug` when nvcc was found; searched "
             "next to the executable, then in the build directory; `SNUG_CUDA_LIB=PATH` "
             "overrides, for debugging) and fails at boot, naming the flag, when the library, "
             "the CUDA runtime or a GPU is missing.",
     .group = "Backend"},
    {.id = O_VRAM_BUDGET,
     .names = "--vram-budget",
     .kind = CLI_SIZE,
     .meta = "SIZE",
     .def = "the device's free memory",
     .help = "--backend cuda: the GPU plan, weights included, must fit SIZE, else the server "
             "refuses to start and names the largest context that fits"},
    {.id = O_CUDA_PROFILE,
     .names = "--cuda-profile",
     .kind = CLI_SWITCH,
     .help = "accepted for symmetry with run; the server prints no profile"},
    /* ---- how clients reach it */
    {.id = O_HOST,
     .names = "--host",
     .kind = CLI_TEXT,
     .meta = "ADDR",
     .def = "127.0.0.1",
     .help = "address or name to listen on: IPv4, IPv6 (::1; :: = every address, IPv4 too), "
             "localhost (the default: nothing outside the machine can reach it)",
     .group = "Listening and access"},
    {.id = O_PORT,
     .names = "--port",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 65535,
     .def = "8080",
     .help = "TCP port; 0 = any free port"},
    {.id = O_PORT_FILE,
     .names = "--port-file",
     .kind = CLI_TEXT,
     .meta = "FILE",
     .help = "write the bound port to FILE once the server is ready"},
    {.id = O_API_KEY,
     .names = "--api-key",
     .kind = CLI_TEXT,
     .meta = "K",
     .help = "every endpoint except /health requires 'Authorization: Bearer K' or 'x-api-key: K' "
             "(else 401, answered from the headers before any body is read)",
     .more = "The key is visible to every user of the machine in the process list "
             "(`/proc/PID/cmdline`): prefer `--api-key-file`."},
    {.id = O_API_KEY_FILE,
     .names = "--api-key-file",
     .kind = CLI_TEXT,
     .meta = "FILE",
     .help = "the key is FILE's first line (trailing CR/LF and blanks dropped; at most 4094 "
             "bytes)"},
    {.id = O_ALIAS,
     .names = "--alias",
     .kind = CLI_TEXT,
     .meta = "NAME",
     .help = "also answer to model NAME (up to 16); /v1/models lists the file name, then each "
             "alias",
     .flags = CLI_REPEAT},
    {.id = O_ANY_MODEL,
     .names = "--any-model",
     .kind = CLI_SWITCH,
     .help = "accept any model name in requests (clients with a hard-coded name)"},
    {.id = O_CORS,
     .names = "--cors",
     .kind = CLI_TEXT,
     .meta = "ORIGIN",
     .def = "off",
     .help = "allow browser clients from ORIGIN ('*' = any)",
     .more = "Every answer carries `Access-Control-Allow-Origin`, and `OPTIONS` preflights get "
             "`204` with `Access-Control-Allow-Methods` / `-Headers` / `-Max-Age` (no key needed: "
             "browsers send none). Without it `OPTIONS` is `404`/`405`."},
    {.id = O_NO_WEBUI,
     .names = "--no-webui",
     .kind = CLI_SWITCH,
     .help = "no chat page at / (it then answers 404)"},
    {.id = O_NO_ACCESS_LOG,
     .names = "--no-access-log",
     .kind = CLI_SWITCH,
     .help = "no per-request line on stderr"},
    /* ---- requests */
    {.id = O_NO_THINK,
     .names = "--no-think, --no-thinking",
     .kind = CLI_SWITCH,
     .help = "thinking off unless a request turns it on (chat_template_kwargs.enable_thinking, "
             "a reasoning effort)",
     .group = "Requests"},
    {.id = O_THINKING_BUDGET,
     .names = "--thinking-budget",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = INT32_MAX,
     .def = "none",
     .help = "default reasoning budget in tokens for a request that leaves the model thinking; "
             "then the server closes the block (a request's own budget wins)"},
    {.id = O_REPEAT_GUARD,
     .names = "--reasoning-repeat-guard",
     .kind = CLI_TEXT,
     .meta = "N,K",
     .def = "off",
     .help = "close a reasoning block once one N-token span has occurred K times in it (a "
             "reasoning loop)"},
    {.id = O_RESPONSES_STORE,
     .names = "--responses-store",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 1000000,
     .def = "64",
     .help = "/v1/responses kept for previous_response_id and GET /v1/responses/{id} (in "
             "memory, least recently used out "
             "first)"},
    {.id = O_TIMEOUT,
     .names = "--timeout",
     .kind = CLI_NUM,
     .meta = "SECONDS",
     .def = "600",
     .help = "per-request time limit; a request that hits it ends with finish_reason \"length\""},
    {.id = O_SPECIAL_IN_CONTENT,
     .names = "--special-tokens-in-content",
     .kind = CLI_SWITCH,
     .help = "parse special tokens (<|im_end|>, <|im_start|> ...) inside message text as the "
             "template's own: open to prompt injection; off by default"},
    /* ---- limits */
    {.id = O_MAX_BODY,
     .names = "--max-body",
     .kind = CLI_INT,
     .meta = "BYTES",
     .lo = 1024,
     .hi = 1LL << 40,
     .def = "8 MiB",
     .help = "request body limit; larger bodies get 413",
     .more = "A body its `Content-Length` announces larger is never kept (read and dropped as it "
             "arrives), and one without a length is dropped once past the limit.",
     .group = "Limits and hardening"},
    {.id = O_MAX_MESSAGES,
     .names = "--max-messages",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 1L << 30,
     .def = "1024",
     .help = "chat messages in one request; over it: 413 naming the flag"},
    {.id = O_MAX_PARTS,
     .names = "--max-parts",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 1L << 30,
     .def = "256",
     .help = "content parts of one message; over it: 413"},
    {.id = O_MAX_TOOLS,
     .names = "--max-tools",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 1L << 30,
     .def = "128",
     .help = "tools in one request; over it: 413"},
    {.id = O_MAX_PROMPT_BYTES,
     .names = "--max-prompt-bytes",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1024,
     .hi = 1LL << 40,
     .def = "4194304",
     .help = "prompt text of the messages and of the rendered prompt (also the /tokenize "
             "content limit); over it: 413",
     .more = "These request-cost limits are checked before any rendering or tokenizing."},
    {.id = O_HTTP_THREADS,
     .names = "--http-threads",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 256,
     .def = "4",
     .help = "connection threads (each an epoll loop over many connections)"},
    {.id = O_MAX_CONNS,
     .names = "--max-conns",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 1000000,
     .def = "4096",
     .help = "open connections in all; beyond it a new connection is closed at once"},
    {.id = O_MAX_CONNS_PER_IP,
     .names = "--max-conns-per-ip",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = 1000000,
     .def = "256",
     .help = "open connections of one client address (loopback clients share one address)"},
    {.id = O_IDLE_TIMEOUT,
     .names = "--idle-timeout",
     .kind = CLI_INT,
     .meta = "S",
     .lo = 1,
     .hi = 86400,
     .def = "30",
     .help = "an idle keep-alive connection is closed after S seconds"},
    {.id = O_SHUTDOWN_GRACE,
     .names = "--shutdown-grace",
     .kind = CLI_NUM,
     .meta = "S",
     .def = "5",
     .help = "on SIGTERM/SIGINT in-flight requests may finish for S seconds (0.01 to 3600); then "
             "streams end with a final SSE error event and waiting requests get a 503"},
    /* ---- images */
    {.id = O_MMPROJ,
     .names = "--mmproj",
     .kind = CLI_TEXT,
     .meta = "FILE",
     .help = "the vision tower (the model's mmproj GGUF): image parts as base64 data: URLs "
             "(docs/vision.md)",
     .more = "Its memory (weights, the encoder's work and buffers for the largest image, the "
             "decoded source and its resize scratch; on the GPU its uploaded weights and "
             "activations) is in the boot plan and comes out of the budget before the context "
             "is sized; it works with `--spec-draft N` on either backend.",
     .group = "Images"},
    {.id = O_VISION_BACKEND,
     .names = "--vision-backend",
     .kind = CLI_CHOICE,
     .meta = "cpu|cuda",
     .def = "where the model runs",
     .help = "where the tower runs (on cuda every block runs on the GPU)"},
    {.id = O_MIN_PX,
     .names = "--min-image-pixels",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = SNUG_VISION_PIXELS_LIMIT,
     .def = "65536",
     .help = "images are resized to at least N pixels (the released processor's bound)"},
    {.id = O_MAX_PX,
     .names = "--max-image-pixels",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = SNUG_VISION_PIXELS_LIMIT,
     .def = "16777216",
     .help = "images are resized to at most N pixels; N sizes the encoder's memory"},
    {.id = O_MAX_SRC,
     .names = "--max-source-pixels",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 1,
     .hi = SNUG_VISION_PIXELS_LIMIT,
     .def = "33554432",
     .help = "a decoded image over N pixels is a 400 naming the bound and its size (the source "
             "buffer is 4 bytes a pixel of N)"},
    /* ---- the prefix cache */
    CLI_OPTS_CACHE,
    {.id = O_NO_PROMPT_NORMALIZE,
     .names = "--no-prompt-normalize",
     .kind = CLI_SWITCH,
     .help = "keep agent clients' per-request spans (the Claude Code billing line) instead of "
             "dropping them, so their prompts differ in the cache"},
    /* ---- testing */
    {.id = O_SCRIPT,
     .names = "--script",
     .kind = CLI_TEXT,
     .meta = "FILE",
     .help = "TEST ONLY: generation follows FILE's text (or a request's snug_script) instead of "
             "sampling (\"Test seam\" below)",
     .group = "Testing"},
    {.id = O_RENDER_ONLY,
     .names = "--render-only",
     .kind = CLI_TEXT,
     .meta = "FILE",
     .help = "print the prompt a request body renders to and exit ('-' = stdin); takes serve's "
             "flags (e.g. --no-think)"},
    {.id = O_RENDER_API,
     .names = "--render-api",
     .kind = CLI_CHOICE,
     .meta = "chat|messages|responses",
     .def = "chat",
     .help = "the API of the --render-only body (an Anthropic / Responses body is converted "
             "first)"},
    {0},
};
const struct cli_command cli_cmd_serve = {
    .name = "serve",
    .run = cmd_serve,
    .usage = "[-m M.gguf] [--host H] [--port P] [--ctx N|max] [--slots N] [--kv F|auto] [flags]\n"
             "--render-only REQUEST.json [--render-api chat|messages|responses] [flags]",
    .summary = "the OpenAI- and Anthropic-compatible server",
    .about =
        "the server for the clients people use: OpenAI chat / completions / Responses "
        "(`/v1/responses`: Codex, openai-agents) and Anthropic Messages (`/v1/messages`: Claude "
        "Code), streaming, tool calls, reasoning split, bounded thinking, structured outputs "
        "(JSON Schema, GBNF, Lark / regex custom tools), images with `--mmproj`, the prefix "
        "cache (on by default: `--cache-ram`), every slot's decode row and a bounded chunk of a "
        "new prompt "
        "in one step, `/health`, `/metrics`, `/tokenize` and a chat page at `/`; hardened "
        "against hostile clients; without `--ctx` it takes the largest context the budget "
        "allows, `--kv auto` the least lossy format reaching it (docs/memory.md) — "
        "docs/server.md, docs/grammar.md, docs/vision.md, docs/prefix-cache.md",
    .opts = OPTS,
};

int cmd_serve(int argc, char **argv) {
    int vision_backend = -1; /* --vision-backend; unset: where the model runs */
    struct snug_server_opts o = {.host = "127.0.0.1",
                                 .port = 8080,
                                 .n_slots = 1,
                                 .n_draft = -1,
                                 .spec_adapt = true,
                                 .thinking_budget = -1};
    struct cli_kv kv = CLI_KV_DEFAULT;
    kv.allow_auto = true;
    int32_t kv_code = SNUG_KV_F16;
    o.n_chunk = SNUG_PLAN_CHUNK_AUTO; /* --chunk: resolved by the sizing (cli_autosize.c) */
    struct snug_plan_cache_flags cache = {.ram_bytes = SNUG_CACHE_RAM_AUTO}; /* on by default */
    const char *render_path = NULL, *render_api = "chat";
    static char key_buf[4096];
    struct cli_args args;
    struct cli_val v;
    int r;
    cli_args_init(&args, &cli_cmd_serve, argc, argv);
    while ((r = cli_args_next(&args, &v)) > 0) {
        if (!cli_kv_opt(&args, r, &v, &kv)) return 2;
        if (r == CLI_O_KV || r == CLI_O_KV_K || r == CLI_O_KV_V) kv_code = cli_kv_code(&kv);
        if (!cli_cache_opt(r, &v, &cache)) return 2;
        cli_chunk_opt(r, &v, &o.n_chunk);
        switch (r) {
        case O_MODEL:
            o.model_path = v.s;
            break;
        case O_HOST:
            o.host = v.s;
            break;
        case O_PORT:
            o.port = (int)v.i;
            break;
        case O_CTX:
            o.n_ctx = (int32_t)v.i;
            break; /* 0 with max: sized by itself */
        case O_SLOTS:
            o.n_slots = (int32_t)v.i;
            break;
        case O_BUDGET:
            o.budget = v.size;
            break;
        case O_SPEC:
            o.n_draft = (int32_t)v.i;
            break;
        case O_SPEC_ADAPT:
            o.spec_adapt = v.choice == 0; /* on|off */
            break;
        case O_STEP_PROMPT:
            o.prompt_budget = v.word ? 0 : (int32_t)v.i; /* 0: auto */
            break;
        case O_QUEUE:
            o.queue_cap = (int32_t)v.i;
            break;
        case O_THREADS:
            o.n_threads = (int32_t)v.i;
            break;
        case O_BACKEND:
            o.backend = v.choice;
            break; /* cpu|cuda: 0, 1 */
        case O_VRAM_BUDGET:
            o.vram_budget = v.size;
            break;
        case O_CUDA_PROFILE:
            break;
        case O_API_KEY:
            o.api_key = v.s;
            break;
        case O_API_KEY_FILE:
            if (!(o.api_key = read_key_file(v.s, key_buf, sizeof key_buf))) return 2;
            break;
        case O_HTTP_THREADS:
            o.http_threads = (int32_t)v.i;
            break;
        case O_MAX_CONNS:
            o.max_conns = (int32_t)v.i;
            break;
        case O_MAX_CONNS_PER_IP:
            o.max_conns_per_ip = (int32_t)v.i;
            break;
        case O_IDLE_TIMEOUT:
            o.idle_timeout_s = (int32_t)v.i;
            break;
        case O_SHUTDOWN_GRACE:
            if (!(v.f >= 0.01 && v.f <= 3600))
                return cli_args_bad(&args, &v, "expected 0.01..3600 seconds"), 2;
            o.shutdown_grace_s = v.f;
            break;
        case O_MAX_MESSAGES:
            o.limits.max_messages = (size_t)v.i;
            break;
        case O_MAX_PARTS:
            o.limits.max_parts = (size_t)v.i;
            break;
        case O_MAX_TOOLS:
            o.limits.max_tools = (size_t)v.i;
            break;
        case O_MAX_PROMPT_BYTES:
            o.limits.max_prompt_bytes = (size_t)v.i;
            break;
        case O_SPECIAL_IN_CONTENT:
            o.special_in_content = true;
            break;
        case O_NO_THINK:
            o.no_think = true;
            break;
        case O_NO_PROMPT_NORMALIZE:
            o.no_prompt_normalize = true;
            break;
        case O_NO_WEBUI:
            o.no_webui = true;
            break;
        case O_MMPROJ:
            o.mmproj = v.s;
            break;
        case O_VISION_BACKEND:
            vision_backend = v.choice;
            break;
        case O_MIN_PX:
            o.min_image_pixels = v.i;
            break;
        case O_MAX_PX:
            o.max_image_pixels = v.i;
            break;
        case O_MAX_SRC:
            o.max_source_pixels = v.i;
            break;
        case O_SCRIPT:
            o.script_path = v.s;
            break;
        case O_TIMEOUT:
            if (!(v.f > 0)) return cli_args_bad(&args, &v, "expected a number of seconds > 0"), 2;
            o.timeout_s = v.f;
            break;
        case O_MAX_BODY:
            o.max_body_bytes = (size_t)v.i;
            break;
        case O_PORT_FILE:
            o.port_file = v.s;
            break;
        case O_ALIAS:
            if (o.n_aliases >= SNUG_SERVER_MAX_ALIASES)
                return cli_args_bad(&args, &v, "at most %d --alias names", SNUG_SERVER_MAX_ALIASES),
                       2;
            o.aliases[o.n_aliases++] = v.s;
            break;
        case O_ANY_MODEL:
            o.any_model = true;
            break;
        case O_CORS:
            o.cors_origin = v.s;
            break;
        case O_THINKING_BUDGET:
            o.thinking_budget = (int32_t)v.i;
            break;
        case O_REPEAT_GUARD:
            if (!snug_think_parse_guard(v.s, &o.repeat_n, &o.repeat_k))
                return cli_args_bad(&args, &v,
                                    "expected N,K (a span of N in 1..4096 tokens, K >= 2 "
                                    "occurrences), e.g. 16,4"),
                       2;
            break;
        case O_RESPONSES_STORE:
            o.responses_store = (int32_t)v.i;
            break;
        case O_NO_ACCESS_LOG:
            o.no_access_log = true;
            break;
        case O_RENDER_ONLY:
            render_path = v.s;
            break;
        case O_RENDER_API:
            render_api = v.s;
            break;
        }
    }
    if (r != CLI_END) return CLI_EXIT(r);
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
