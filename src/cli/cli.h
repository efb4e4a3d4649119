/* cli.h — the `snug` subcommands. Each lives in its own cmd_<name>.c, declares its flags there
 * once (a struct cli_command with its table of struct cli_opt, read by the one parser of
 * cli_args.h) and returns the process exit status (0 = success). The flags several commands
 * share have their table rows and handlers here. The CLI is the only code that prints to
 * stdout or exits. Read next: cli_args.h, main.c (dispatch), then the command you care about. */
#ifndef SNUG_CLI_H
#define SNUG_CLI_H

#include "cli_args.h"
#include "snug.h"
#include "vision/vision.h"

#include <stdbool.h>
#include <stdint.h>

int cmd_run(int argc, char **argv);
extern const struct cli_command cli_cmd_run;
int cmd_info(int argc, char **argv);
extern const struct cli_command cli_cmd_info;
int cmd_tokenize(int argc, char **argv);
extern const struct cli_command cli_cmd_tokenize;
int cmd_logits(int argc, char **argv);
extern const struct cli_command cli_cmd_logits;
int cmd_vision(int argc, char **argv);
extern const struct cli_command cli_cmd_vision;
int cmd_perplexity(int argc, char **argv);
extern const struct cli_command cli_cmd_perplexity;
int cmd_gen(int argc, char **argv);
extern const struct cli_command cli_cmd_gen;
int cmd_quantize(int argc, char **argv);
extern const struct cli_command cli_cmd_quantize;
int cmd_imatrix(int argc, char **argv);
extern const struct cli_command cli_cmd_imatrix;
int cmd_plan(int argc, char **argv);
extern const struct cli_command cli_cmd_plan;
int cmd_serve(int argc, char **argv);
extern const struct cli_command cli_cmd_serve;
int cmd_bench_local(int argc, char **argv); /* cmd_bench_local.c: pp/tg timing, CPU or GPU */
extern const struct cli_command cli_cmd_bench_local;
struct cli_backend;
/* bench-local --verify (cmd_bench_verify.c): speculative verify/draft/rollback cost vs decode;
 * accept > 0 also prints the k = 3 speed-up at that many tokens per verification. */
int cli_bench_verify(const char *path, int n_threads, int reps, long n_prompt, int32_t chunk,
                     const struct cli_backend *bk, double accept);
int cmd_verify(int argc, char **argv);
extern const struct cli_command cli_cmd_verify;
int cmd_stress(int argc, char **argv);
extern const struct cli_command cli_cmd_stress;
int cmd_bench(int argc, char **argv);
extern const struct cli_command cli_cmd_bench;
struct snug_suite_client;
/* bench --agent-replay FILE (cmd_bench_replay.c) */
int cli_bench_replay(struct snug_suite_client *c, const char *file, bool as_json, const char *outp);

/* The demo model's path when no -m is given (cli_model.c): next to the binary, the source
 * tree, the install prefix; NULL (after printing where it looked) when it is in none. */
const char *cli_default_model(const char *cmd);

/* ---- Flags several commands share: their ids (a command's own ids stay below 1000), their
 * table rows (CLI_OPTS_*, spliced into a command's table) and their handlers. A handler takes
 * any id: it applies its own flags and ignores the others; false after printing the error
 * for a value it rejects. */
enum cli_shared_id {
    CLI_O_KV = 1000,
    CLI_O_KV_K,
    CLI_O_KV_V,
    CLI_O_BACKEND,
    CLI_O_VRAM_BUDGET,
    CLI_O_CUDA_PROFILE,
    CLI_O_MMPROJ,
    CLI_O_IMAGE,
    CLI_O_MIN_PX,
    CLI_O_MAX_PX,
    CLI_O_VISION_BACKEND,
    CLI_O_CACHE_RAM,
    CLI_O_CACHE_DIR,
    CLI_O_CACHE_DISK,
    CLI_O_CACHE_EVERY,
    CLI_O_URL,
    CLI_O_MODEL,
    CLI_O_API_KEY,
    CLI_O_TIMEOUT,
    CLI_O_CHUNK,
};

/* clang-format off */
#define CLI_KV_FORMATS "f16 f32 bf16 q8_0 fp8 tq4 tq3"
/* --kv, --kv-k, --kv-v (cli_kv.c); _AUTO where the command sizes by itself */
#define CLI_OPTS_KV_(META, AUTO_HELP)                                                              \
    {.id = CLI_O_KV, .names = "--kv", .kind = CLI_TEXT, .meta = META, .def = "f16",                \
     .help = "the attention KV cache format of keys and values: " CLI_KV_FORMATS                  \
             " (docs/kv-formats.md)" AUTO_HELP,                                                    \
     .group = "KV cache"},                                                                         \
    {.id = CLI_O_KV_K, .names = "--kv-k", .kind = CLI_TEXT, .meta = "F",                           \
     .help = "the keys' format alone"},                                                            \
    {.id = CLI_O_KV_V, .names = "--kv-v", .kind = CLI_TEXT, .meta = "F",                           \
     .help = "the values' format alone"}
#define CLI_OPTS_KV CLI_OPTS_KV_("F", "")
#define CLI_OPTS_KV_AUTO                                                                           \
    CLI_OPTS_KV_("F|auto", "; auto: the least lossy format, or K/V pair, that reaches the context")

/* --chunk N|auto (run, serve, bench-local, plan): the value SNUG_PLAN_CHUNK_AUTO (-1) for auto,
 * applied by cli_chunk_opt; the commands resolve it through the plan (snug_plan_chunk) */
#define CLI_OPTS_CHUNK                                                                             \
    {.id = CLI_O_CHUNK, .names = "--chunk", .kind = CLI_INT, .meta = "N|auto", .lo = 1,            \
     .hi = 1 << 20, .word = "auto", .def = "auto",                                                 \
     .help = "prompt tokens per forward step (at most the context); auto: on cuda the largest "    \
             "of 512, 1024, 2048 whose plan still fits the budget once the context is "            \
             "settled, on the cpu 512 (docs/memory.md)"}

/* --backend, --vram-budget, --cuda-profile (cli_backend.c) */
#define CLI_OPTS_BACKEND                                                                           \
    {.id = CLI_O_BACKEND, .names = "--backend", .kind = CLI_CHOICE, .meta = "cpu|cuda",           \
     .def = "cpu",                                                                                 \
     .help = "where the model runs (cuda: libsnug_cuda.so, loaded when this flag asks for it)",   \
     .group = "Backend"},                                                                          \
    {.id = CLI_O_VRAM_BUDGET, .names = "--vram-budget", .kind = CLI_SIZE, .meta = "SIZE",          \
     .help = "--backend cuda: the GPU plan, weights included, must fit SIZE"},                     \
    {.id = CLI_O_CUDA_PROFILE, .names = "--cuda-profile", .kind = CLI_SWITCH,                      \
     .help = "--backend cuda: per-op device times to stderr at the end"}

/* --mmproj, --image, --min-image-pixels, --max-image-pixels, --vision-backend (cli_images.c) */
#define CLI_OPTS_IMAGES                                                                            \
    {.id = CLI_O_MMPROJ, .names = "--mmproj", .kind = CLI_TEXT, .meta = "FILE",                    \
     .help = "the vision tower: the model's mmproj GGUF (docs/vision.md)", .group = "Images"},     \
    {.id = CLI_O_IMAGE, .names = "--image", .kind = CLI_TEXT, .meta = "IMG",                       \
     .help = "a PNG, JPEG or WebP file, in order at each <|image_pad|> run of the prompt (write "  \
             "<|vision_start|><|image_pad|><|vision_end|>), or in front of a prompt without one; " \
             "at most 16",                                                                         \
     .flags = CLI_REPEAT},                                                                         \
    {.id = CLI_O_MIN_PX, .names = "--min-image-pixels", .kind = CLI_INT, .meta = "N", .lo = 1,     \
     .hi = SNUG_VISION_PIXELS_LIMIT, .def = "65536",                                               \
     .help = "an image is resized to at least N pixels (the processor's bound)"},                  \
    {.id = CLI_O_MAX_PX, .names = "--max-image-pixels", .kind = CLI_INT, .meta = "N", .lo = 1,     \
     .hi = SNUG_VISION_PIXELS_LIMIT, .def = "16777216",                                            \
     .help = "an image is resized to at most N pixels (the processor's bound)"},                   \
    {.id = CLI_O_VISION_BACKEND, .names = "--vision-backend", .kind = CLI_CHOICE,                  \
     .meta = "cpu|cuda", .def = "where the model runs", .help = "where the vision tower runs"}

/* --cache-ram, --cache-dir, --cache-disk, --cache-checkpoint-every (cli_cache.c) */
#define CLI_OPTS_CACHE                                                                             \
    {.id = CLI_O_CACHE_RAM, .names = "--cache-ram", .kind = CLI_TEXT, .meta = "SIZE|auto",         \
     .def = "serve: auto; plan: none",                                                             \
     .help = "the prefix cache in host RAM: checkpoints reused across requests "                   \
             "(docs/prefix-cache.md); auto: a quarter of the host memory left for it, at most "    \
             "16 GiB; 0: off",                                                                     \
     .group = "Prefix cache"},                                                                     \
    {.id = CLI_O_CACHE_DIR, .names = "--cache-dir", .kind = CLI_TEXT, .meta = "DIR",               \
     .help = "a disk tier in DIR that survives restarts (needs --cache-ram)"},                     \
    {.id = CLI_O_CACHE_DISK, .names = "--cache-disk", .kind = CLI_SIZE, .meta = "SIZE",            \
     .def = "4 x --cache-ram", .help = "the disk tier's budget"},                                  \
    {.id = CLI_O_CACHE_EVERY, .names = "--cache-checkpoint-every", .kind = CLI_INT, .meta = "N",   \
     .lo = 1, .hi = 1LL << 30, .def = "4096",                                                      \
     .help = "a checkpoint every N prompt tokens during prefill"}

/* --url, --model, --api-key, --timeout of the commands that talk to a server (cli_ops.c) */
#define CLI_OPTS_CONN                                                                              \
    {.id = CLI_O_URL, .names = "--url", .kind = CLI_TEXT, .meta = "U",                             \
     .def = "http://127.0.0.1:8080", .help = "the server's base URL", .group = "Server"},          \
    {.id = CLI_O_MODEL, .names = "--model", .kind = CLI_TEXT, .meta = "M",                         \
     .def = "the first of /v1/models", .help = "the model name sent in requests"},                 \
    {.id = CLI_O_API_KEY, .names = "--api-key", .kind = CLI_TEXT, .meta = "K",                     \
     .help = "sent as 'Authorization: Bearer K'"},                                                 \
    {.id = CLI_O_TIMEOUT, .names = "--timeout", .kind = CLI_NUM, .meta = "SECONDS",                \
     .def = "600", .help = "the limit of one request"}
/* clang-format on */

/* Print "snug <cmd>: <message>" for a failed status to stderr and return exit status 1. */
int cli_fail(const char *cmd, const struct snug_err *err);

/* KV cache formats (cli_kv.c): `--kv TYPE` sets K and V, `--kv-k` / `--kv-v` one each. Start
 * from CLI_KV_DEFAULT (f16); cli_kv_opt applies the CLI_OPTS_KV flags (an error naming the
 * formats on a bad value). */
struct cli_kv {
    int k, v;        /* enum snug_kv_type; SNUG_PLAN_KV_AUTO (-1) after `--kv auto` */
    bool allow_auto; /* the command sizes by itself (run, serve, plan): accept `--kv auto` */
};
#define CLI_KV_DEFAULT ((struct cli_kv){SNUG_KV_F16, SNUG_KV_F16, false})
bool cli_kv_opt(const struct cli_args *p, int id, const struct cli_val *v, struct cli_kv *kv);
/* the plan's kv_type (snug_kvfmt_code), SNUG_PLAN_KV_AUTO when either half is auto */
int32_t cli_kv_code(const struct cli_kv *kv);
void cli_kv_params(const struct cli_kv *kv, struct snug_ctx_params *cp);

/* A whole input file (cli_file.c): NUL-terminated, *len bytes, snug_malloc'd (snug_free it);
 * NULL with a message naming `what` and the path when it cannot be opened or read, or is over
 * max_bytes. */
char *cli_read_file(const char *path, const char *what, size_t max_bytes, size_t *len,
                    struct snug_err *err);

/* Server-client commands (cli_ops.c: verify, stress, bench): --url, --model, --api-key,
 * --timeout (CLI_OPTS_CONN, applied by cli_conn_opt); cli_conn_open makes the client (on failure
 * it prints the error and returns exit status 1); cli_progress is the terminal progress bar. */
struct cli_conn {
    const char *url, *model, *key;
    double timeout_s;
};
#define CLI_CONN_DEFAULT ((struct cli_conn){NULL, NULL, NULL, 600})
struct snug_suite_client;
bool cli_conn_opt(const struct cli_args *p, int id, const struct cli_val *v, struct cli_conn *cc);
int cli_conn_open(const struct cli_conn *cc, struct snug_suite_client *c, const char *cmd);
void cli_progress(void *user, const char *label, int done, int total);

/* Backend flags (cli_backend.c): `--backend cpu|cuda`, `--vram-budget SIZE`, `--cuda-profile`
 * (CLI_OPTS_BACKEND, applied by cli_backend_opt). */
struct cli_backend {
    int backend; /* 0 cpu, 1 cuda */
    uint64_t vram_budget;
    bool profile; /* --cuda-profile */
};
bool cli_backend_opt(int id, const struct cli_val *v, struct cli_backend *b);
/* CLI_OPTS_CHUNK: *chunk = N, or SNUG_PLAN_CHUNK_AUTO for auto (cli_backend.c). */
bool cli_chunk_opt(int id, const struct cli_val *v, int32_t *chunk);
void cli_backend_params(const struct cli_backend *b, struct snug_ctx_params *cp);
/* backend cuda: print the device memory in use (cudaMemGetInfo) to stderr, tagged `when`. */
void cli_backend_report(const struct cli_backend *b, const char *when);
/* The CUDA device's free bytes (cudaMemGetInfo through the loaded backend); 0 when the backend
 * cannot be loaded or asked (cli_backend.c). */
size_t cli_cuda_free(void);

/* The memory plan at boot (cli_plan.c): size the context about to be created by itself
 * (cp->n_ctx 0 = the largest that fits, kv_code SNUG_PLAN_KV_AUTO = the least lossy format
 * reaching it, cp->n_chunk SNUG_PLAN_CHUNK_AUTO = the chunk snug_plan_chunk chooses;
 * src/plan/plan_auto.h), write the choice into cp, print the one-line summary a
 * user can paste back as flags and the plan table to stderr; SNUG_ERR_BUDGET, naming the
 * largest context that fits, when it exceeds budget bytes (0 = no budget given). */
struct snug_model;
int cli_plan_boot(const char *cmd, const struct snug_model *m, struct snug_ctx_params *cp,
                  int32_t kv_code, uint64_t budget, struct snug_err *err);
/* The prompt chunk of a context about to be created with cp (its context, KV format, draft,
 * threads and backend settled) for --chunk `chunk` (N, or SNUG_PLAN_CHUNK_AUTO: snug_plan_chunk
 * in budget bytes, 0 = none: on cuda the free device memory minus the margin when known); the
 * choice and why printed to stderr (cli_plan.c). */
int32_t cli_chunk_resolve(const char *cmd, const struct snug_model *m,
                          const struct snug_ctx_params *cp, int32_t chunk, uint64_t budget);

/* `snug serve` sizing (cli_autosize.c): open the model's metadata, resolve the automatic
 * context (opts->n_ctx 0), `--kv auto` (kv_code SNUG_PLAN_KV_AUTO), the prompt chunk
 * (opts->n_chunk SNUG_PLAN_CHUNK_AUTO) and the default draft length exactly as the server's
 * boot plan will, print the paste-back line, and write the
 * choice (and the budget it was sized by) into opts, with the opened model (opts->model: the
 * server takes it over). */
struct snug_server_opts;
int cli_serve_size(struct snug_server_opts *opts, int32_t kv_code, struct snug_err *err);

/* Images on the command line (cli_images.c): --mmproj F, --image F (repeatable),
 * --min-image-pixels / --max-image-pixels (the processor's resize bounds, Qwen's defaults),
 * --vision-backend cpu|cuda (where the tower runs; default: where the model runs): the
 * CLI_OPTS_IMAGES rows, applied by cli_images_opt. */
#define CLI_MAX_IMAGES 16
struct cli_images {
    const char *mmproj;
    const char *paths[CLI_MAX_IMAGES];
    int n;
    long long min_px, max_px;
    int vision_backend;                          /* -1 unset (the model's), 0 cpu, 1 cuda */
    struct snug_vision *v;                       /* after cli_images_encode */
    struct snug_vision_be *vbe;                  /* its backend instance (vision_backend 1) */
    struct snug_vision_rows enc[CLI_MAX_IMAGES]; /* one per --image */
    struct snug_image_rows rows[CLI_MAX_IMAGES]; /* after cli_images_place */
};
#define CLI_IMAGES_DEFAULT                                                                         \
    ((struct cli_images){                                                                          \
        .min_px = SNUG_VISION_MIN_PIXELS, .max_px = SNUG_VISION_MAX_PIXELS, .vision_backend = -1})
bool cli_images_opt(const struct cli_args *p, int id, const struct cli_val *v,
                    struct cli_images *ci);
/* Load the mmproj and encode every image (backend: the context's, either; the tower runs there
 * unless --vision-backend says otherwise; a GPU tower is closed again before returning, so the
 * text model's context finds the device as it was). */
int cli_images_encode(struct cli_images *ci, const struct snug_model *m, int backend, int n_threads,
                      struct snug_err *err);
/* The ids with each image's pad run sized to it (a malloc'd array of *n_out + extra ids). */
snug_token *cli_images_place(struct cli_images *ci, const struct snug_model *m,
                             const snug_token *ids, int32_t n, int32_t extra, int32_t *n_out,
                             struct snug_err *err);
void cli_images_free(struct cli_images *ci);

#endif
