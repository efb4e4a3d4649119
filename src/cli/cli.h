/* cli.h — the `snug` subcommands. Each lives in its own cmd_<name>.c and returns the process
 * exit status (0 = success). The CLI is the only code that prints to stdout or exits.
 * Read next: main.c (dispatch), then the command you care about. */
#ifndef SNUG_CLI_H
#define SNUG_CLI_H

#include "cli_args.h"
#include "snug.h"
#include "vision/vision.h"

#include <stdbool.h>
#include <stdint.h>

int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_vision(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_imatrix(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench_local(int argc, char **argv); /* cmd_bench_local.c: pp/tg timing on this CPU */
struct cli_backend;
/* bench-local --verify (cmd_bench_verify.c): speculative verify/draft/rollback cost vs decode;
 * accept > 0 also prints the k = 3 speed-up at that many tokens per verification. */
int cli_bench_verify(const char *path, int n_threads, int reps, long n_prompt,
                     const struct cli_backend *bk, double accept);
int cmd_verify(int argc, char **argv);
int cmd_stress(int argc, char **argv);
int cmd_bench(int argc, char **argv);
struct snug_suite_client;
/* bench --agent-replay FILE (cmd_bench_replay.c) */
int cli_bench_replay(struct snug_suite_client *c, const char *file, bool as_json, const char *outp);

/* The demo model's path when no -m is given (cli_model.c): next to the binary, the source
 * tree, the install prefix; NULL (after printing where it looked) when it is in none. */
const char *cli_default_model(const char *cmd);

/* Print "snug <cmd>: <message>" for a failed status to stderr and return exit status 1. */
int cli_fail(const char *cmd, const struct snug_err *err);

/* Tiny argument helpers: argv[*i] is the flag; the value is argv[*i+1]. On a missing value
 * they print an error and return NULL / false. */
const char *cli_value(int argc, char **argv, int *i);
int cli_int(int argc, char **argv, int *i, long *out);
int cli_float(int argc, char **argv, int *i, double *out);

/* KV cache formats (cli_kv.c): `--kv TYPE` sets K and V, `--kv-k` / `--kv-v` one each. Start
 * from CLI_KV_DEFAULT (f16); cli_kv_flag consumes argv[*i] when it is one of the three flags
 * (1), prints an error naming the formats and returns -1 on a bad value, 0 if not a KV flag. */
struct cli_kv {
    int k, v;        /* enum snug_kv_type; SNUG_PLAN_KV_AUTO (-1) after `--kv auto` */
    bool allow_auto; /* the command sizes by itself (run, serve, plan): accept `--kv auto` */
};
#define CLI_KV_DEFAULT ((struct cli_kv){SNUG_KV_F16, SNUG_KV_F16, false})
int cli_kv_flag(int argc, char **argv, int *i, const char *cmd, struct cli_kv *kv);
/* the plan's kv_type (snug_kvfmt_code), SNUG_PLAN_KV_AUTO when either half is auto */
int32_t cli_kv_code(const struct cli_kv *kv);
void cli_kv_params(const struct cli_kv *kv, struct snug_ctx_params *cp);

/* A whole input file (cli_file.c): NUL-terminated, *len bytes, snug_malloc'd (snug_free it);
 * NULL with a message naming `what` and the path when it cannot be opened or read, or is over
 * max_bytes. */
char *cli_read_file(const char *path, const char *what, size_t max_bytes, size_t *len,
                    struct snug_err *err);

/* Server-client commands (cli_ops.c: verify, stress, bench): --url, --model, --api-key,
 * --timeout (same return convention as cli_kv_flag); cli_conn_open makes the client (on failure
 * it prints the error and returns exit status 1); cli_progress is the terminal progress bar. */
struct cli_conn {
    const char *url, *model, *key;
    double timeout_s;
};
#define CLI_CONN_DEFAULT ((struct cli_conn){NULL, NULL, NULL, 600})
struct snug_suite_client;
int cli_conn_flag(int argc, char **argv, int *i, struct cli_conn *cc);
int cli_conn_open(const struct cli_conn *cc, struct snug_suite_client *c, const char *cmd);
void cli_progress(void *user, const char *label, int done, int total);

/* Backend flags (cli_backend.c): `--backend cpu|cuda`, `--vram-budget SIZE`; same return
 * convention as cli_kv_flag. */
struct cli_backend {
    int backend; /* 0 cpu, 1 cuda */
    uint64_t vram_budget;
    bool profile; /* --cuda-profile */
};
int cli_backend_flag(int argc, char **argv, int *i, const char *cmd, struct cli_backend *b);
void cli_backend_params(const struct cli_backend *b, struct snug_ctx_params *cp);
/* backend cuda: print the device memory in use (cudaMemGetInfo) to stderr, tagged `when`. */
void cli_backend_report(const struct cli_backend *b, const char *when);

/* The memory plan at boot (cli_plan.c): size the context about to be created by itself
 * (cp->n_ctx 0 = the largest that fits, kv_code SNUG_PLAN_KV_AUTO = the least lossy format
 * reaching it; src/plan/plan_auto.h), write the choice into cp, print the one-line summary a
 * user can paste back as flags and the plan table to stderr; SNUG_ERR_BUDGET, naming the
 * largest context that fits, when it exceeds budget bytes (0 = no budget given). */
struct snug_model;
int cli_plan_boot(const char *cmd, const struct snug_model *m, struct snug_ctx_params *cp,
                  int32_t kv_code, uint64_t budget, struct snug_err *err);

/* `snug serve` sizing (cli_autosize.c): open the model's metadata, resolve the automatic
 * context (opts->n_ctx 0), `--kv auto` (kv_code SNUG_PLAN_KV_AUTO) and the default draft
 * length exactly as the server's boot plan will, print the paste-back line, and write the
 * choice (and the budget it was sized by) into opts, with the opened model (opts->model: the
 * server takes it over). */
struct snug_server_opts;
int cli_serve_size(struct snug_server_opts *opts, int32_t kv_code, struct snug_err *err);

/* `--ctx N` or `--ctx max` (cli_autosize.c): *n_ctx = N, or 0 with *max set; prints the error
 * and returns false on anything else. */
bool cli_ctx_value(int argc, char **argv, int *i, const char *cmd, long *n_ctx, bool *max);

/* Images on the command line (cli_images.c): --mmproj F, --image F (repeatable),
 * --min-image-pixels / --max-image-pixels (the processor's resize bounds, Qwen's defaults),
 * --vision-backend cpu|cuda (where the tower runs; default: where the model runs). */
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
/* Same return convention as cli_kv_flag. */
int cli_images_flag(int argc, char **argv, int *i, const char *cmd, struct cli_images *ci);
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
