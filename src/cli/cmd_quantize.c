/* cmd_quantize.c — `snug quantize IN.gguf OUT.gguf TYPE [--imatrix FILE] [--tensor-type
 * PATTERN=TYPE ...] [--threads N]`: rewrite a model with every tensor stored in the type the
 * recipe TYPE picks (src/quant/recipe.c), or the type of the first --tensor-type pattern (a
 * PCRE2 regular expression searched anywhere in the tensor name, lower-cased as llama-quantize
 * does) that matches it.
 *
 * With an importance matrix (llama.cpp's imatrix file, src/imatrix/imatrix.h) every tensor it
 * has an entry for is quantized with llama.cpp's importance-weighted encoders, row r of a 3-D
 * (expert) tensor with its expert's slice; the others without. As llama-quantize, the 1-3 bit
 * i-quants are refused for a tensor without importance data, and a size mismatch is an error.
 *
 * All metadata is copied except general.file_type (set to llama.cpp's ftype for the recipe),
 * general.quantization_version (set to 2, ggml's GGML_QNT_VERSION) and the split.* keys (the
 * output is one file). Tensors are taken in llama.cpp's order: by blk.N layer number (other
 * tensors first), then by name (llama-model-loader.h weight_name_comparer), because the
 * recipe's "more bits" counters depend on it; the output lists them in that order too.
 * They stream one at a time:
 * a tensor whose type does not change is copied byte for byte; any other is converted row by
 * row (dequantize the source row to f32 → quantize), with the rows of a chunk spread over the
 * thread pool. Memory: one output chunk plus one f32 row per thread, whatever the model size.
 * Progress (one line per tensor) and a size summary go to stderr.
 * Read next: src/quant/quant.h (kernels, recipes), src/gguf/gguf.h (reader / writer). */
#include "cli.h"
#include "core/core.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "imatrix/imatrix.h"
#include "quant/quant.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <pcre2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_BYTES (16u << 20) /* target size of one converted chunk of output rows */

/* One chunk of rows to convert: rows [row0, row0 + nrows) of the current tensor. */
struct conv_job {
    const uint8_t *src; /* the tensor's source bytes */
    uint8_t *dst;       /* output chunk */
    uint32_t src_type, dst_type;
    int64_t ncols, row0, nrows;
    uint64_t src_row_bytes, dst_row_bytes;
    float *scratch;       /* nth rows of ncols floats */
    const float *imatrix; /* importance per column, per expert (NULL: none) */
    int64_t rows_per_expert;
    int bad; /* set when a quantizer refused (cannot happen for a checked pair) */
};

/* Thread body: convert this thread's share of the chunk's rows. */
static void conv_rows(void *ctx, int ith, int nth) {
    struct conv_job *j = ctx;
    long lo, hi;
    snug_split_range((long)j->nrows, ith, nth, &lo, &hi);
    float *row = j->scratch + (size_t)ith * (size_t)j->ncols;
    for (long r = lo; r < hi; r++) {
        const uint8_t *s = j->src + (uint64_t)(j->row0 + r) * j->src_row_bytes;
        snug_dequantize_row(j->src_type, s, row, j->ncols);
        const float *im =
            j->imatrix ? j->imatrix + ((j->row0 + r) / j->rows_per_expert) * j->ncols : NULL;
        if (!snug_quantize_row(j->dst_type, row, j->dst + (uint64_t)r * j->dst_row_bytes, j->ncols,
                               im))
            j->bad = 1;
    }
}

/* llama.cpp's tensor order: layer number from "blk.N." (-1 for other tensors), then name. */
static const struct snug_gguf *g_sort; /* qsort has no context argument; the CLI runs once */
static int tensor_layer(const char *name) {
    int l = -1;
    if (sscanf(name, "blk.%d.", &l) != 1) l = -1;
    return l;
}
static int cmp_tensor_order(const void *a, const void *b) {
    const char *na = snug_gguf_tensor(g_sort, *(const int64_t *)a)->name;
    const char *nb = snug_gguf_tensor(g_sort, *(const int64_t *)b)->name;
    int la = tensor_layer(na), lb = tensor_layer(nb);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(na, nb);
}

/* "4096 x 1024" into buf. */
static const char *shape_str(const struct snug_gguf_tensor *t, char *buf, size_t n) {
    int k = snprintf(buf, n, "%llu", (unsigned long long)t->ne[0]);
    for (uint32_t d = 1; d < t->n_dims && k > 0 && (size_t)k < n; d++)
        k += snprintf(buf + k, n - (size_t)k, " x %llu", (unsigned long long)t->ne[d]);
    return buf;
}

/* Read "<arch>.<suffix>" as an integer, or `dflt` when absent. */
static int arch_int(const struct snug_gguf *g, const char *arch, const char *suffix, int dflt,
                    struct snug_err *err) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t v = (uint32_t)dflt;
    if (snug_gguf_get_u32_opt(g, key, &v, err) != SNUG_OK) return -1;
    return (int)v;
}

#define TYPE_LIST SNUG_RECIPES_WRITABLE

/* The --tensor-type overrides, compiled. */
#define MAX_OVERRIDES 64
struct overrides {
    int n;
    pcre2_code *re[MAX_OVERRIDES];
    uint32_t type[MAX_OVERRIDES];
    pcre2_match_data *md;
};

static void overrides_free(struct overrides *o) {
    for (int i = 0; i < o->n; i++) pcre2_code_free(o->re[i]);
    pcre2_match_data_free(o->md);
    o->n = 0;
    o->md = NULL;
}

/* Parse "PATTERN=TYPE" (split at the first '=', as llama-quantize does). */
static int override_add(struct overrides *o, const char *arg, struct snug_err *err) {
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1])
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "--tensor-type '%s': want PATTERN=TYPE, e.g. 'ffn_down=q5_K'", arg);
    if (o->n == MAX_OVERRIDES)
        return snug_err_set(err, SNUG_ERR_INVALID, "more than %d --tensor-type options",
                            MAX_OVERRIDES);
    int t = snug_dtype_from_name(eq + 1);
    if (t < 0 || !snug_dtype_info((uint32_t)t) || !snug_dtype_info((uint32_t)t)->quantizable ||
        snug_dtype_info((uint32_t)t)->block_elems == 1)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "--tensor-type '%s': '%s' is not a quantized type snug writes (want "
                            "one of q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K iq4_nl "
                            "iq4_xs)",
                            arg, eq + 1);
    char pat[512];
    size_t len = (size_t)(eq - arg);
    if (len >= sizeof pat)
        return snug_err_set(err, SNUG_ERR_INVALID, "--tensor-type: pattern too long");
    for (size_t i = 0; i < len; i++) pat[i] = (char)tolower((unsigned char)arg[i]);
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len, 0, &code, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return snug_err_set(err, SNUG_ERR_INVALID, "--tensor-type '%s': bad pattern at %zu: %s",
                            arg, (size_t)off, (const char *)msg);
    }
    o->re[o->n] = re;
    o->type[o->n++] = (uint32_t)t;
    return SNUG_OK;
}

/* The override type for a tensor name, or -1. */
static int override_find(struct overrides *o, const char *name) {
    for (int i = 0; i < o->n; i++)
        if (pcre2_match(o->re[i], (PCRE2_SPTR)name, PCRE2_ZERO_TERMINATED, 0, 0, o->md, NULL) >= 0)
            return (int)o->type[i];
    return -1;
}

static bool is_token_embd(const char *name) {
    return !strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight");
}

/* Convert the whole file; returns a status and fills err. Owns nothing on return. */
static int quantize_file(const char *in, const char *out, const char *type_name, int n_threads,
                         const char *imatrix_path, struct overrides *ov, struct snug_err *err) {
    struct snug_gguf *g = NULL;
    struct snug_gguf_writer *w = NULL;
    struct snug_pool *pool = NULL;
    uint32_t *types = NULL;
    int64_t *order = NULL;
    uint8_t *chunk = NULL;
    float *scratch = NULL;
    const float **tensor_im = NULL;
    struct snug_imatrix *im = NULL;
    int rc = snug_gguf_open(&g, in, err);
    if (rc != SNUG_OK) return rc;
    if (imatrix_path) {
        rc = snug_imatrix_load(&im, imatrix_path, err);
        if (rc != SNUG_OK) goto done;
        fprintf(stderr, "snug quantize: %lld importance entries from %s (%u chunks%s%s)\n",
                (long long)snug_imatrix_n_entries(im), imatrix_path, snug_imatrix_chunk_count(im),
                snug_imatrix_dataset(im)[0] ? ", " : "", snug_imatrix_dataset(im));
    }

    /* hyper-parameters the recipe needs */
    char arch[128] = "";
    struct snug_gguf_str s;
    if (snug_gguf_find_key(g, "general.architecture") >= 0 &&
        snug_gguf_get_str(g, "general.architecture", &s, err) == SNUG_OK)
        snprintf(arch, sizeof arch, "%.*s", (int)(s.len < 120 ? s.len : 120), s.data);
    int n_layer = arch_int(g, arch, "block_count", 0, err);
    int n_expert = n_layer < 0 ? -1 : arch_int(g, arch, "expert_count", 0, err);
    int n_head = n_layer < 0 ? -1 : arch_int(g, arch, "attention.head_count", 0, err);
    int n_head_kv = n_head < 0 ? -1 : arch_int(g, arch, "attention.head_count_kv", 0, err);
    if (n_layer < 0 || n_expert < 0 || n_head < 0 || n_head_kv < 0) {
        rc = SNUG_ERR_FORMAT;
        goto done;
    }
    struct snug_recipe recipe;
    if (!snug_recipe_init(&recipe, type_name, n_layer, n_expert)) {
        rc = snug_err_set(err, SNUG_ERR_INVALID, "unknown type '%s' (want " TYPE_LIST ")",
                          type_name);
        goto done;
    }
    /* llama.cpp's n_gqa(): heads per KV head (a few mixes give attn_v more bits at >= 4) */
    snug_recipe_set_model(&recipe, n_head_kv > 0 ? n_head / n_head_kv : 0, im != NULL);

    /* pass 1: pick every tensor's type (llama.cpp's two-pass counting, see recipe.c) */
    int64_t nt = snug_gguf_n_tensors(g);
    types = snug_calloc((size_t)(nt > 0 ? nt : 1), sizeof *types);
    order = snug_calloc((size_t)(nt > 0 ? nt : 1), sizeof *order);
    tensor_im = snug_calloc((size_t)(nt > 0 ? nt : 1), sizeof *tensor_im);
    if (!types || !order || !tensor_im) {
        rc =
            snug_err_set(err, SNUG_ERR_NOMEM, "out of memory for %lld tensor types", (long long)nt);
        goto done;
    }
    for (int64_t i = 0; i < nt; i++) order[i] = i;
    g_sort = g;
    qsort(order, (size_t)nt, sizeof *order, cmp_tensor_order);
    for (int64_t i = 0; i < nt; i++) snug_recipe_count(&recipe, snug_gguf_tensor(g, i)->name);
    uint64_t max_cols = 1, in_bytes = 0, out_bytes = 0;
    for (int64_t i = 0; i < nt; i++) { /* types[i] is for the tensor order[i] */
        const struct snug_gguf_tensor *t = snug_gguf_tensor(g, order[i]);
        int manual = override_find(ov, t->name);
        types[i] = manual >= 0 ? snug_recipe_type_manual(&recipe, t->name, t->n_dims, t->ne,
                                                         (uint32_t)manual)
                               : snug_recipe_type(&recipe, t->name, t->n_dims, t->ne);
        if (types[i] == t->type) continue;
        if (!snug_dtype_info(types[i])->quantizable) {
            rc = snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                              "%s: the %s mix stores %s as %s, which snug quantize cannot write "
                              "yet (snug loads and runs such files; make them with llama.cpp's "
                              "llama-quantize)",
                              in, type_name, t->name, snug_dtype_info(types[i])->name);
            goto done;
        }
        uint64_t n_im = 0;
        const float *v = im ? snug_imatrix_find(im, t->name, &n_im) : NULL;
        uint64_t n_want = t->ne[0] * (t->n_dims > 2 ? t->ne[2] : 1);
        if (v && n_im != n_want) {
            if (!is_token_embd(t->name)) { /* llama.cpp ignores it for the embedding only */
                rc = snug_err_set(err, SNUG_ERR_FORMAT,
                                  "%s: the importance matrix has %llu values for %s, which needs "
                                  "%llu (an imatrix of another model?)",
                                  imatrix_path, (unsigned long long)n_im, t->name,
                                  (unsigned long long)n_want);
                goto done;
            }
            v = NULL;
        }
        tensor_im[i] = v;
        if (!v && snug_recipe_needs_imatrix(t->name, types[i])) {
            rc = snug_err_set(
                err, SNUG_ERR_INVALID,
                "%s as %s needs an importance matrix: at 1-3 bits per weight the rounding must "
                "know which input columns matter, or the result is garbage (llama.cpp refuses "
                "too). %s; or store such tensors in a bigger type with --tensor-type",
                t->name, snug_dtype_info(types[i])->name,
                im ? "The imatrix has no entry for it (a layer the imatrix run never executed, "
                     "such as the MTP layer?)"
                   : "Pass one with --imatrix FILE (llama.cpp's llama-imatrix computes it)");
            goto done;
        }
        const struct snug_dtype_info *si = snug_dtype_info(t->type);
        if (!si || !si->computable) {
            rc = snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                              "%s: tensor %s is stored as %s, which snug cannot convert (to %s)",
                              in, t->name, si ? si->name : "an unknown type",
                              snug_dtype_info(types[i])->name);
            goto done;
        }
        if (t->ne[0] > max_cols) max_cols = t->ne[0];
    }

    /* the writer: metadata, then tensor infos */
    rc = snug_gguf_writer_open(&w, out, err);
    if (rc != SNUG_OK) goto done;
    for (int64_t i = 0; i < snug_gguf_n_kv(g) && rc == SNUG_OK; i++) {
        const char *k = snug_gguf_key_name(g, i);
        if (!strcmp(k, "general.file_type") || !strcmp(k, "general.quantization_version") ||
            !strncmp(k, "split.", 6))
            continue;
        rc = snug_gguf_writer_copy_kv(w, g, i);
    }
    if (rc == SNUG_OK) rc = snug_gguf_writer_add_u32(w, "general.quantization_version", 2);
    if (rc == SNUG_OK)
        rc = snug_gguf_writer_add_u32(w, "general.file_type", snug_recipe_file_type(&recipe));
    if (im && rc == SNUG_OK) { /* llama-quantize's record of the importance matrix used */
        rc = snug_gguf_writer_add_str(w, "quantize.imatrix.file", imatrix_path);
        if (rc == SNUG_OK && snug_imatrix_dataset(im)[0])
            rc = snug_gguf_writer_add_str(w, "quantize.imatrix.dataset", snug_imatrix_dataset(im));
        if (rc == SNUG_OK)
            rc = snug_gguf_writer_add_u32(w, "quantize.imatrix.entries_count",
                                          (uint32_t)snug_imatrix_n_entries(im));
        if (rc == SNUG_OK)
            rc = snug_gguf_writer_add_u32(w, "quantize.imatrix.chunks_count",
                                          snug_imatrix_chunk_count(im));
    }
    for (int64_t i = 0; i < nt && rc == SNUG_OK; i++) {
        const struct snug_gguf_tensor *t = snug_gguf_tensor(g, order[i]);
        uint32_t nd = t->n_dims; /* llama.cpp writes ggml_n_dims: trailing 1s dropped */
        while (nd > 1 && t->ne[nd - 1] == 1) nd--;
        rc = snug_gguf_writer_add_tensor(w, t->name, types[i], nd, t->ne);
    }
    if (rc != SNUG_OK) {
        rc = snug_err_set(err, rc, "%s: %s", out, snug_gguf_writer_error(w));
        goto done;
    }

    /* buffers and threads */
    rc = snug_pool_init(&pool, n_threads, err);
    if (rc != SNUG_OK) goto done;
    int nth = snug_pool_size(pool);
    chunk = snug_malloc(CHUNK_BYTES + 4 * max_cols); /* room for at least one row */
    scratch = snug_malloc(sizeof(float) * (size_t)max_cols * (size_t)nth);
    if (!chunk || !scratch) {
        rc = snug_err_set(err, SNUG_ERR_NOMEM, "out of memory for conversion buffers");
        goto done;
    }

    /* pass 2: stream the tensors */
    double t0 = snug_time_s();
    for (int64_t i = 0; i < nt; i++) {
        const struct snug_gguf_tensor *t = snug_gguf_tensor(g, order[i]);
        uint64_t ncols = t->ne[0], nrows = t->n_elems / (ncols ? ncols : 1);
        uint64_t dst_rb = snug_dtype_row_bytes(types[i], ncols);
        uint64_t dst_bytes = dst_rb * nrows;
        if (types[i] == t->type) {
            rc = snug_gguf_writer_write(w, t->data, t->n_bytes);
        } else {
            struct conv_job j = {.src = t->data,
                                 .dst = chunk,
                                 .src_type = t->type,
                                 .dst_type = types[i],
                                 .ncols = (int64_t)ncols,
                                 .src_row_bytes = snug_dtype_row_bytes(t->type, ncols),
                                 .dst_row_bytes = dst_rb,
                                 .scratch = scratch,
                                 .imatrix = tensor_im[i],
                                 .rows_per_expert =
                                     (int64_t)SNUG_MAX(1, nrows / (t->n_dims > 2 ? t->ne[2] : 1))};
            uint64_t rows_per_chunk = dst_rb ? SNUG_MAX(1, CHUNK_BYTES / dst_rb) : 1;
            for (uint64_t r0 = 0; r0 < nrows && rc == SNUG_OK; r0 += rows_per_chunk) {
                j.row0 = (int64_t)r0;
                j.nrows = (int64_t)SNUG_MIN(rows_per_chunk, nrows - r0);
                snug_pool_run(pool, conv_rows, &j);
                if (j.bad) {
                    rc = snug_err_set(err, SNUG_ERR_INTERNAL, "quantizing %s to %s failed", t->name,
                                      snug_dtype_info(types[i])->name);
                    goto done;
                }
                rc = snug_gguf_writer_write(w, chunk, (uint64_t)j.nrows * dst_rb);
            }
        }
        if (rc != SNUG_OK) {
            rc = snug_err_set(err, rc, "%s: %s", out, snug_gguf_writer_error(w));
            goto done;
        }
        char shape[96];
        fprintf(stderr, "[%4lld/%4lld] %-40s %-22s %6s -> %-6s %9.3f MiB -> %9.3f MiB\n",
                (long long)i + 1, (long long)nt, t->name, shape_str(t, shape, sizeof shape),
                snug_dtype_info(t->type)->name, snug_dtype_info(types[i])->name,
                (double)t->n_bytes / 1048576.0, (double)dst_bytes / 1048576.0);
        in_bytes += t->n_bytes;
        out_bytes += dst_bytes;
    }
    rc = snug_gguf_writer_close(w, err);
    w = NULL;
    if (rc != SNUG_OK) goto done;
    fprintf(stderr,
            "snug quantize: %s (%s) -> %s: %lld tensors, %.2f MiB -> %.2f MiB (%.1f%%), "
            "file_type %u, %.1f s, %d threads\n",
            in, arch[0] ? arch : "?", out, (long long)nt, (double)in_bytes / 1048576.0,
            (double)out_bytes / 1048576.0,
            in_bytes ? 100.0 * (double)out_bytes / (double)in_bytes : 0,
            snug_recipe_file_type(&recipe), snug_time_s() - t0, nth);

done:
    if (w) snug_gguf_writer_abort(w);
    snug_free(scratch);
    snug_free(chunk);
    snug_free(types);
    snug_free(order);
    snug_free(tensor_im);
    snug_imatrix_free(im);
    snug_pool_free(pool);
    snug_gguf_close(g);
    return rc;
}

enum { O_THREADS = 1, O_IMATRIX, O_TENSOR_TYPE };
static const struct cli_opt OPTS[] = {
    {.id = O_IMATRIX,
     .names = "--imatrix",
     .kind = CLI_TEXT,
     .meta = "FILE",
     .help = "an importance matrix (llama.cpp's imatrix GGUF, or its legacy .dat, as "
             "llama-imatrix or snug imatrix write them): the tensors it covers are quantized with "
             "the importance-weighted encoders, as llama-quantize does"},
    {.id = O_TENSOR_TYPE,
     .names = "--tensor-type",
     .kind = CLI_TEXT,
     .meta = "PATTERN=TYPE",
     .help = "store the tensors whose name matches PATTERN as TYPE (a ggml type name: q4_K, q6_K, "
             "iq4_nl, ...) instead of what the mix picks; PATTERN is a regular expression (PCRE2, "
             "searched anywhere in the lower-cased name), e.g. 'blk\\.4\\.=q4_K' or "
             "'ffn_down=q5_K'; the first matching pattern wins",
     .flags = CLI_REPEAT},
    {.id = O_THREADS,
     .names = "-t, --threads",
     .kind = CLI_INT,
     .meta = "N",
     .lo = 0,
     .hi = 1024,
     .def = "all CPUs",
     .help = "threads"},
    {0},
};
const struct cli_command cli_cmd_quantize = {
    .name = "quantize",
    .run = cmd_quantize,
    .usage = "IN.gguf OUT.gguf TYPE [--imatrix FILE] [--tensor-type PATTERN=TYPE]...",
    .summary = "requantize a model (llama.cpp's mixes, the same bytes)",
    .about = "requantize to TYPE (" TYPE_LIST "), optionally with an importance matrix and "
             "per-tensor overrides: the same bytes as llama.cpp's quantizer "
             "(docs/quantization.md); the 1-3 bit mixes need an importance matrix "
             "(docs/quant-types.md)",
    .opts = OPTS,
    .max_positional = 3,
};

int cmd_quantize(int argc, char **argv) {
    const char *pos[3], *imatrix = NULL;
    int npos = 0;
    long threads = 0;
    struct overrides ov = {0};
    struct snug_err err = {0};
    struct cli_args args;
    struct cli_val v;
    int r;
    ov.md = pcre2_match_data_create(4, NULL);
    if (!ov.md) return 1;
    cli_args_init(&args, &cli_cmd_quantize, argc, argv);
    while ((r = cli_args_next(&args, &v)) > 0 || r == CLI_POSITIONAL) {
        if (r == CLI_POSITIONAL) pos[npos++] = v.s; /* at most 3: the parser counts */
        if (r == O_THREADS) threads = (long)v.i;
        if (r == O_IMATRIX) imatrix = v.s;
        if (r == O_TENSOR_TYPE && override_add(&ov, v.s, &err) != SNUG_OK) {
            overrides_free(&ov);
            return cli_fail("quantize", &err);
        }
    }
    if (r != CLI_END) return overrides_free(&ov), CLI_EXIT(r);
    if (npos != 3) {
        overrides_free(&ov);
        return cli_usage_error(&cli_cmd_quantize, "give IN.gguf OUT.gguf TYPE");
    }
    int rc = quantize_file(pos[0], pos[1], pos[2], (int)threads, imatrix, &ov, &err);
    overrides_free(&ov);
    if (rc != SNUG_OK) return cli_fail("quantize", &err);
    return 0;
}
