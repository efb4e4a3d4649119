/* cmd_run.c — `snug run`: tokenize a prompt, evaluate it, then generate with the generation
 * loop the server uses (src/engine/sequence.h: sampler, speculative steps, stops, detokenizer)
 * and stream the text (the flags: the table below, `snug run --help`).
 * Text goes to stdout through the streaming detokenizer (whole UTF-8 characters only);
 * generation stops at an end-of-generation token (EOS, <|im_end|>, <|endoftext|>: the server's
 * set, snug_tokenizer_eog) or after N tokens. Timings and peak memory go to
 * stderr. Read next: src/sample/sample.h, include/snug.h (model and context). */
#define _POSIX_C_SOURCE 200809L /* isatty */
#include "cli.h"

#include "core/core.h"
#include "engine/sequence.h"
#include "plan/plan_auto.h"
#include "sample/sample.h"
#include "speculative/speculative.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The prompt through the context. On a terminal (stderr is a TTY) a long prompt goes in slices
 * of n_chunk tokens (the chunks snug_ctx_eval makes anyway, so the numbers are the same) with
 * a progress line after each: tokens done / total, tokens/s, time left; the line is erased at
 * the end. Not on a terminal: one call and nothing printed, so logs get no control characters. */
static int cli_eval_prompt(struct snug_ctx *ctx, const snug_token *ids, int32_t n, int32_t n_chunk,
                           float *logits, struct snug_err *err) {
    if (!isatty(STDERR_FILENO) || n <= n_chunk)
        return snug_ctx_eval(ctx, ids, n, logits, SNUG_EVAL_LOGITS_LAST, err);
    double t0 = snug_time_s();
    for (int32_t off = 0; off < n; off += n_chunk) {
        int32_t k = SNUG_MIN(n_chunk, n - off);
        int rc = snug_ctx_eval(ctx, ids + off, k, off + k == n ? logits : NULL,
                               SNUG_EVAL_LOGITS_LAST, err);
        if (rc) {
            fprintf(stderr, "\n");
            return rc;
        }
        double dt = snug_time_s() - t0, rate = dt > 0 ? (off + k) / dt : 0;
        fprintf(stderr, "\rsnug run: prompt %d / %d tokens (%d%%), %.0f tok/s, ETA %.0f s   ",
                off + k, n, (int)(100.0 * (off + k) / n), rate,
                rate > 0 ? (n - off - k) / rate : 0.0);
        fflush(stderr);
    }
    fprintf(stderr, "\r\033[K");
    return SNUG_OK;
}

/* The loop's emitted text to stdout as it comes (whole UTF-8 characters). */
static bool on_token(void *user, snug_token id, const char *text, size_t len,
                     const struct snug_seq_logprob *lp) {
    (void)user, (void)id, (void)lp;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return false;
}

/* Model load progress on a terminal: the file read once through the page cache
 * (snug_file_prefetch) with "loading: X / Y MiB (Z%)" redrawn in place, then erased. Not on a
 * terminal: nothing (the mapping faults the weights in as they are used). */
struct load_line {
    double last;
};
static void on_load_progress(void *user, uint64_t done, uint64_t total) {
    struct load_line *l = user;
    double now = snug_time_s();
    if (done && done < total && now - l->last < 0.1) return;
    l->last = now;
    fprintf(stderr, "\rsnug run: loading the model: %.0f / %.0f MiB (%d%%)   ", done / 1048576.0,
            total / 1048576.0, total ? (int)(100.0 * (double)done / (double)total) : 100);
    fflush(stderr);
}

static void cli_prefetch_model(const char *path) {
    if (!isatty(STDERR_FILENO)) return;
    struct load_line l = {0};
    if (snug_file_prefetch(path, on_load_progress, &l)) fprintf(stderr, "\r\033[K");
}

enum {
    O_MODEL = 1,
    O_PROMPT,
    O_FILE,
    O_N,
    O_TEMP,
    O_TOP_K,
    O_TOP_P,
    O_MIN_P,
    O_REPEAT,
    O_REPEAT_N,
    O_PRESENCE,
    O_FREQUENCY,
    O_SEED,
    O_THREADS,
    O_SPEC,
    O_SPEC_ADAPT,
    O_CTX,
    O_BUDGET,
};
static const struct cli_opt OPTS[] = {
    {.id = O_MODEL,
     .names = "-m, --model",
     .kind = CLI_TEXT,
     .meta = "M.gguf",
     .def = "the demo model",
     .help = "the model (the demo model: data/demo/snug-demo-q8_0.gguf, docs/demo-model.md)",
     .group = "Input"},
    {.id = O_PROMPT,
     .names = "-p, --prompt",
     .kind = CLI_TEXT,
     .meta = "TEXT",
     .help = "the prompt"},
    {.id = O_FILE,
     .names = "-f, --file",
     .kind = CLI_TEXT,
     .meta = "FILE",
     .help = "the prompt is FILE's contents"},
    {.id = O_N,
     .names = "-n, --n-predict",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 1 << 30,
     .def = "128",
     .help = "tokens to generate at most (generation also stops at an end-of-generation token)",
     .group = "Sampling"},
    {.id = O_TEMP,
     .names = "--temp",
     .kind = CLI_NUM,
     .meta = "T",
     .def = "0.8",
     .help = "temperature; 0 is greedy"},
    {.id = O_TOP_K,
     .names = "--top-k",
     .kind = CLI_INT,
     .meta = "K",
     .lo = 0,
     .hi = 1 << 30,
     .def = "40",
     .help = "keep the K likeliest tokens (0 = all)"},
    {.id = O_TOP_P,
     .names = "--top-p",
     .kind = CLI_NUM,
     .meta = "P",
     .def = "0.95",
     .help = "nucleus"},
    {.id = O_MIN_P,
     .names = "--min-p",
     .kind = CLI_NUM,
     .meta = "P",
     .def = "0.05",
     .help = "drop tokens below P times the likeliest's probability"},
    {.id = O_REPEAT,
     .names = "--repeat-penalty",
     .kind = CLI_NUM,
     .meta = "R",
     .def = "1, off",
     .help = "the logits of recent tokens: positive ones divided by R, negative ones multiplied"},
    {.id = O_REPEAT_N,
     .names = "--repeat-last-n",
     .kind = CLI_INT,
     .meta = "N",
     .lo = -1,
     .hi = 1 << 30,
     .def = "64",
     .help = "the recent tokens the penalties look at (-1 = all)"},
    {.id = O_PRESENCE,
     .names = "--presence-penalty",
     .kind = CLI_NUM,
     .meta = "P",
     .def = "0",
     .help = "subtract P from the logit of every recent token"},
    {.id = O_FREQUENCY,
     .names = "--frequency-penalty",
     .kind = CLI_NUM,
     .meta = "F",
     .def = "0",
     .help = "subtract F times its count from the logit of every recent token"},
    {.id = O_SEED,
     .names = "--seed",
     .kind = CLI_INT,
     .meta = "S",
     .def = "the time",
     .help = "the sampler's seed (printed at the end; a negative S is the time)"},
    {.id = O_SPEC,
     .names = "--spec-draft",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = SNUG_SPEC_MAX_DRAFT,
     .def = "0, off",
     .help = "speculative decoding with the model's MTP block: N drafts per step "
             "(docs/spec-decode.md)"},
    {.id = O_SPEC_ADAPT,
     .names = "--spec-adapt",
     .kind = CLI_CHOICE,
     .meta = "on|off",
     .def = "on",
     .help = "each step's drafts chosen in 0..N (--spec-draft N) from the measured acceptance "
             "and step times; off: N drafts every step (to measure a fixed N). The text is the "
             "same either way"},
    {.id = O_CTX,
     .names = "-c, --ctx",
     .kind = CLI_INT,
     .meta = "N|max",
     .lo = 1,
     .hi = 1 << 30,
     .word = "max",
     .def = "the prompt + -n",
     .help = "the context in tokens; max: the largest that fits the budget (docs/memory.md)",
     .group = "Memory"},
    {.id = O_BUDGET,
     .names = "--budget",
     .kind = CLI_SIZE,
     .meta = "SIZE",
     .def = "none; --ctx max sizes by the physical memory minus max(1/8, 1 GiB)",
     .help = "host memory the plan must fit (--vram-budget on cuda); the plan is printed, with "
             "its choices as flags to paste back"},
    CLI_OPTS_CHUNK,
    {.id = O_THREADS,
     .names = "-t, --threads",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 4096,
     .def = "all CPUs",
     .help = "threads"},
    CLI_OPTS_KV_AUTO,
    CLI_OPTS_BACKEND,
    CLI_OPTS_IMAGES,
    {0},
};
const struct cli_command cli_cmd_run = {
    .name = "run",
    .run = cmd_run,
    .usage = "[-m M.gguf] (-p TEXT | -f FILE) [-n N] [--temp T] [--ctx N|max] [--kv F|auto] "
             "[flags]\n"
             "-m M.gguf --mmproj MMPROJ.gguf --image IMG -p TEXT [--max-image-pixels N]",
    .summary = "generate text from a prompt",
    .about = "generate with the server's generation loop: the text to stdout; the chosen plan as "
             "paste-back flags, the memory plan, prompt and generation tokens/s and peak memory "
             "to stderr. Images (PNG/JPEG/WebP, `--image`) go through the vision tower at the "
             "prompt's `<|vision_start|><|image_pad|><|vision_end|>` (or in front) — "
             "docs/vision.md",
    .opts = OPTS,
};

int cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *prompt_file = NULL;
    long n_predict = 128, top_k = 40, threads = 0, n_ctx = 0, last_n = 64, seed = -1;
    long spec_draft = 0;
    bool spec_adapt = true;
    double temp = 0.8, top_p = 0.95, min_p = 0.05, rep = 1.0, pres = 0.0, freq = 0.0;
    struct cli_kv kv = CLI_KV_DEFAULT;
    kv.allow_auto = true;
    bool ctx_max = false;
    struct cli_backend bk = {0};
    uint64_t budget = 0; /* --budget: host bytes the whole plan must fit (0 = none) */
    int32_t chunk = SNUG_PLAN_CHUNK_AUTO; /* --chunk: resolved by the plan at boot */
    struct cli_images ci = CLI_IMAGES_DEFAULT;
    struct cli_args args;
    struct cli_val v;
    int r;
    cli_args_init(&args, &cli_cmd_run, argc, argv);
    while ((r = cli_args_next(&args, &v)) > 0) {
        if (!cli_kv_opt(&args, r, &v, &kv) || !cli_images_opt(&args, r, &v, &ci)) return 2;
        cli_backend_opt(r, &v, &bk);
        cli_chunk_opt(r, &v, &chunk);
        switch (r) {
        case O_MODEL:
            model_path = v.s;
            break;
        case O_PROMPT:
            prompt = v.s;
            break;
        case O_FILE:
            prompt_file = v.s;
            break;
        case O_N:
            n_predict = (long)v.i;
            break;
        case O_TEMP:
            temp = v.f;
            break;
        case O_TOP_K:
            top_k = (long)v.i;
            break;
        case O_TOP_P:
            top_p = v.f;
            break;
        case O_MIN_P:
            min_p = v.f;
            break;
        case O_REPEAT:
            rep = v.f;
            break;
        case O_REPEAT_N:
            last_n = (long)v.i;
            break;
        case O_PRESENCE:
            pres = v.f;
            break;
        case O_FREQUENCY:
            freq = v.f;
            break;
        case O_SEED:
            seed = (long)v.i;
            break;
        case O_THREADS:
            threads = (long)v.i;
            break;
        case O_SPEC:
            spec_draft = (long)v.i;
            break;
        case O_SPEC_ADAPT:
            spec_adapt = v.choice == 0; /* on|off */
            break;
        case O_CTX:
            n_ctx = (long)v.i, ctx_max = v.word;
            break;
        case O_BUDGET:
            budget = v.size;
            break;
        }
    }
    if (r != CLI_END) return CLI_EXIT(r);
    if (!prompt && !prompt_file)
        return cli_usage_error(&cli_cmd_run, "-p TEXT (or -f FILE) is required");
    if (!model_path) {
        if (!(model_path = cli_default_model("run"))) return 1;
        fprintf(stderr, "snug run: no -m given: using the demo model %s\n", model_path);
    }
    if (seed < 0) seed = (long)time(NULL);

    struct snug_err err = {0};
    int status = 1;
    char *file_text = NULL;
    size_t prompt_len = 0;
    if (prompt_file) {
        file_text = cli_read_file(prompt_file, "prompt file", (size_t)1 << 30, &prompt_len, &err);
        if (!file_text) {
            fprintf(stderr, "snug run: %s\n", err.msg);
            return 1;
        }
        prompt = file_text;
    } else {
        prompt_len = strlen(prompt);
    }

    struct snug_model *m = NULL;
    struct snug_ctx *ctx = NULL;
    struct snug_seq seq = {0};
    struct snug_step_row rows[SNUG_SPEC_MAX_DRAFT + 1];
    snug_token *ids = NULL;
    float *logits = NULL;
    double t_load = snug_time_s();
    struct snug_model_params mp = {.path = model_path, .n_threads = (int)threads};
    cli_prefetch_model(model_path);
    if (snug_model_load(&m, &mp, &err)) goto fail;
    const struct snug_tokenizer *tok = snug_model_tokenizer(m);
    if (!tok) {
        snug_err_set(&err, SNUG_ERR_FORMAT, "%s has no vocabulary (tokenizer.ggml.* keys)",
                     model_path);
        goto fail;
    }
    size_t n_prompt = 0;
    int rc = snug_tokenizer_encode(tok, prompt, prompt_len, true, NULL, 0, &n_prompt, &err);
    if (rc && rc != SNUG_ERR_BUDGET) goto fail;
    if (n_prompt > (size_t)(1 << 30)) {
        snug_err_set(&err, SNUG_ERR_INVALID, "prompt of %zu tokens is too long", n_prompt);
        goto fail;
    }
    size_t cap = n_prompt + (size_t)n_predict + 1 + (size_t)spec_draft + 1;
    ids = malloc(cap * sizeof *ids);
    const int32_t V = snug_model_n_vocab(m);
    /* the prompt's last row, then a step's: the pending token and its drafts */
    logits = malloc((size_t)V * ((size_t)spec_draft + 1) * sizeof *logits);
    if (!ids || !logits) {
        snug_err_set(&err, SNUG_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (n_prompt && snug_tokenizer_encode(tok, prompt, prompt_len, true, ids, cap, &n_prompt, &err))
        goto fail;
    if (n_prompt == 0) { /* an empty prompt starts from BOS */
        snug_token bos = snug_tokenizer_bos(tok);
        if (bos < 0) {
            snug_err_set(&err, SNUG_ERR_INVALID, "the prompt is empty and the model has no BOS");
            goto fail;
        }
        ids[n_prompt++] = bos;
    }
    if (ci.n || ci.mmproj) { /* the images' rows at their pad runs (cli_images.c) */
        if (cli_images_encode(&ci, m, bk.backend, (int)threads, &err)) goto fail;
        int32_t np = 0;
        snug_token *placed = ci.n ? cli_images_place(&ci, m, ids, (int32_t)n_prompt,
                                                     (int32_t)(cap - n_prompt), &np, &err)
                                  : NULL;
        if (ci.n && !placed) goto fail;
        if (placed) {
            free(ids);
            ids = placed;
            n_prompt = (size_t)np;
        }
    }
    struct snug_ctx_params cp = snug_ctx_default_params();
    cp.n_threads = (int32_t)threads;
    cp.n_draft = (int32_t)spec_draft;
    cli_kv_params(&kv, &cp);
    cli_backend_params(&bk, &cp);
    cp.n_chunk = chunk; /* auto: chosen by the plan at boot (cli_plan_boot) */
    /* no --ctx: prompt + N tokens; --ctx max: the largest that fits (0, sized at boot) */
    cp.n_ctx = ctx_max ? 0
               : n_ctx ? (int32_t)n_ctx
                       : (int32_t)SNUG_MIN(n_prompt + (size_t)n_predict, 1u << 30);
    /* the plan at boot: sized (--ctx max, --kv auto), printed as paste-back flags and a table,
     * refused over --budget (host) / --vram-budget (cuda) */
    if (cli_plan_boot("run", m, &cp, cli_kv_code(&kv), cp.backend == 1 ? bk.vram_budget : budget,
                      &err))
        goto fail;
    if (snug_ctx_init(&ctx, m, &cp, &err)) goto fail;
    int32_t room = snug_ctx_n_ctx(ctx) - (int32_t)n_prompt;
    if (room < 0) {
        snug_err_set(&err, SNUG_ERR_BUDGET, "the prompt has %zu tokens, more than --ctx %d",
                     n_prompt, snug_ctx_n_ctx(ctx));
        goto fail;
    }
    if (n_predict > room) {
        fprintf(stderr, "snug run: context of %d tokens leaves room for %d new tokens\n",
                snug_ctx_n_ctx(ctx), room);
        n_predict = room;
    }
    struct snug_sampler_params sp = snug_sampler_params_default();
    sp.temperature = (float)temp;
    sp.top_k = (int32_t)top_k;
    sp.top_p = (float)top_p;
    sp.min_p = (float)min_p;
    sp.repeat_penalty = (float)rep;
    sp.repeat_last_n = (int32_t)last_n;
    sp.presence_penalty = (float)pres;
    sp.frequency_penalty = (float)freq;
    sp.seed = (uint64_t)seed;
    if (snug_seq_init(&seq, m, ctx, &err)) goto fail;
    struct snug_seq_params gp = {.sampler = sp,
                                 .max_tokens = (int32_t)n_predict,
                                 .speculate = spec_draft > 0,
                                 .spec_adapt = spec_adapt,
                                 .on_token = on_token};
    if (snug_seq_begin(&seq, &gp, &err)) goto fail;
    t_load = snug_time_s() - t_load;

    /* prompt */
    double t0 = snug_time_s();
    if (ci.n ? snug_ctx_eval_images(ctx, ids, (int32_t)n_prompt, ci.rows, ci.n, logits,
                                    SNUG_EVAL_LOGITS_LAST, &err)
             : cli_eval_prompt(ctx, ids, (int32_t)n_prompt, cp.n_chunk ? cp.n_chunk : 512, logits,
                               &err))
        goto fail;
    double t_prompt = snug_time_s() - t0;
    cli_backend_report(&bk, "after the prompt");

    /* generation: the loop picks the first token from the prompt's logits, then each step
     * evaluates its rows (the pending token, or it and its MTP drafts as a verification) */
    snug_seq_evaluated(&seq, ids, (int32_t)n_prompt);
    t0 = snug_time_s();
    if (n_predict > 0) snug_seq_first(&seq, logits);
    while (seq.state == SNUG_SEQ_RUNNING) {
        int32_t nr = snug_seq_rows(&seq, rows, (int32_t)spec_draft + 1, &err);
        if (nr < 0 || snug_step(rows, nr, logits, &err) || snug_seq_take(&seq, logits, &err))
            goto fail;
    }
    long n_gen = seq.n_gen;
    snug_seq_flush(&seq, false);
    double t_gen = snug_time_s() - t0;
    fprintf(stderr,
            "\n\nsnug run: load %.2f s | prompt %zu tokens, %.2f s, %.1f tok/s | "
            "generation %ld tokens, %.2f s, %.1f tok/s | seed %ld | peak memory %.1f MiB\n",
            t_load, n_prompt, t_prompt, t_prompt > 0 ? n_prompt / t_prompt : 0.0, n_gen, t_gen,
            t_gen > 0 ? n_gen / t_gen : 0.0, seed, snug_peak_rss_bytes() / 1048576.0);
    cli_backend_report(&bk, "after generation");
    if (spec_draft > 0) {
        struct snug_spec_stats st;
        snug_ctx_spec_stats(ctx, &st);
        fprintf(stderr,
                "snug run: speculative (MTP, %ld drafts): %lld verifications, %.3f tokens per "
                "verification, %lld of %lld drafts accepted; by draft position:",
                spec_draft, (long long)st.n_steps,
                st.n_steps ? (double)st.n_emitted / (double)st.n_steps : 0.0,
                (long long)st.n_accepted, (long long)st.n_drafted);
        for (long i = 0; i < spec_draft; i++)
            fprintf(stderr, " %.3f",
                    st.proposed_at[i] ? (double)st.accepted_at[i] / (double)st.proposed_at[i]
                                      : 0.0);
        fprintf(stderr, "\n");
        /* the draft count per step (src/speculative/adapt.h): what the steps ran, and the
         * estimates the adaptation chose from (or would have, with --spec-adapt off) */
        const struct snug_spec_adapt *ad = &seq.adapt;
        double c[SNUG_SPEC_MAX_DRAFT + 1];
        snug_spec_adapt_current_costs(ad, c);
        fprintf(stderr,
                "snug run: draft length (--spec-adapt %s): %.2f drafts per step over %lld "
                "steps; steps by drafts:",
                spec_adapt ? "on" : "off",
                ad->n_steps ? (double)ad->n_drafts / (double)ad->n_steps : 0.0,
                (long long)ad->n_steps);
        for (int32_t j = 0; j <= ad->n_max; j++)
            fprintf(stderr, " %d:%lld", j, (long long)ad->steps_at[j]);
        fprintf(stderr, "; acceptance estimate %.3f; step cost by drafts (plain step = 1):", ad->a);
        for (int32_t j = 0; j <= ad->n_max; j++)
            fprintf(stderr, " %.2f%s", c[j], ad->t[j] > 0 ? "" : "?");
        fprintf(stderr, "\n");
    }
    status = 0;
fail:
    if (status) cli_fail("run", &err);
    snug_seq_free(&seq);
    snug_ctx_free(ctx);
    snug_model_free(m);
    cli_images_free(&ci);
    free(ids);
    free(logits);
    snug_free(file_text);
    return status;
}
