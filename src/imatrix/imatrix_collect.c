/* imatrix_collect.c — computing an importance matrix (`snug imatrix`): a matmul observer
 * (model.h struct snug_mm_observer) that sums, per weight tensor and input column j, the
 * squares x_j² and the values x_j of every activation row the forward multiplies by it, and the
 * count of those rows; then the GGUF file llama.cpp's llama-imatrix writes (imatrix.h).
 *
 * What is collected, as llama-imatrix collects it (tools/imatrix/imatrix.cpp in llama.cpp, read
 * for the facts, not copied): every weight named blk.* that the trunk multiplies activations
 * with (the LM head and the MTP block are not: llama-imatrix skips them unless asked); a 2-D
 * product counts only when it has at least 16 rows (llama-imatrix ignores smaller batches); a
 * 3-D expert tensor keeps one row of sums and one count per expert, each expert counting only
 * the (token, choice) pairs routed to it. Sums are float32, accumulated row after row in
 * token order (llama-imatrix's `acc[j] += x[j] * x[j]` in float), counts are integers.
 *
 * Invariant: every buffer is allocated by snug_imatrix_collector_new (one per weight of the
 * model, sized from its shape); the observer callbacks only add into them (no allocation on
 * the token path). Read next: imatrix.h, src/cli/cmd_imatrix.c (the driver). */
#include "imatrix.h"

#include "core/core.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* llama-imatrix's threshold: products over fewer rows are not collected (2-D weights only). */
#define MIN_ROWS 16

struct im_acc {
    snug_tensor w;
    int64_t n_in, n_mat; /* columns; matrices (experts of a 3-D tensor, else 1) */
    float *sum2, *sum;   /* [n_mat][n_in] */
    int64_t *counts;     /* [n_mat] */
    bool seen;           /* the forward multiplied by it at least once */
};

struct snug_imatrix_collector {
    struct snug_mm_observer obs;
    struct im_acc *acc; /* sorted by w (pointer order) */
    int64_t n;
};

static int cmp_acc(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)((const struct im_acc *)a)->w;
    uintptr_t y = (uintptr_t)((const struct im_acc *)b)->w;
    return x < y ? -1 : x > y;
}

static struct im_acc *find(struct snug_imatrix_collector *c, snug_tensor w) {
    struct im_acc key = {.w = w};
    return bsearch(&key, c->acc, (size_t)c->n, sizeof *c->acc, cmp_acc);
}

static void add_rows(float *sum2, float *sum, const float *x, int64_t rows, int64_t n_in) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * n_in;
        for (int64_t j = 0; j < n_in; j++) {
            sum2[j] += row[j] * row[j];
            sum[j] += row[j];
        }
    }
}

static void obs_dense(void *user, snug_tensor w, const float *x, int64_t T) {
    struct im_acc *a = find(user, w);
    if (!a || a->n_mat != 1 || T < MIN_ROWS) return;
    add_rows(a->sum2, a->sum, x, T, a->n_in);
    a->counts[0] += T;
    a->seen = true;
}

static void obs_experts(void *user, snug_tensor w, const float *x, const int32_t *off, int64_t E) {
    struct im_acc *a = find(user, w);
    if (!a || a->n_mat != E) return;
    for (int64_t e = 0; e < E; e++) {
        int64_t rows = off[e + 1] - off[e];
        if (rows <= 0) continue;
        add_rows(a->sum2 + e * a->n_in, a->sum + e * a->n_in, x + (int64_t)off[e] * a->n_in, rows,
                 a->n_in);
        a->counts[e] += rows;
    }
    a->seen = true;
}

/* A weight the forward may multiply activations with: blk.<i>.<name>.weight with n_dims ≤ 3. */
static bool candidate(const struct snug_gguf_tensor *t) {
    size_t n = strlen(t->name);
    return !strncmp(t->name, "blk.", 4) && n > 7 && !strcmp(t->name + n - 7, ".weight") &&
           t->ne[3] == 1 && t->ne[0] > 0;
}

int snug_imatrix_collector_new(struct snug_imatrix_collector **out, const struct snug_model *m,
                               struct snug_err *err) {
    *out = NULL;
    struct snug_imatrix_collector *c = snug_calloc(1, sizeof *c);
    if (!c) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory for the imatrix collector");
    int64_t nt = snug_gguf_n_tensors(m->gguf), n = 0;
    for (int64_t i = 0; i < nt; i++) n += candidate(snug_gguf_tensor(m->gguf, i));
    c->acc = snug_calloc((size_t)(n ? n : 1), sizeof *c->acc);
    if (!c->acc) goto nomem;
    for (int64_t i = 0; i < nt; i++) {
        const struct snug_gguf_tensor *t = snug_gguf_tensor(m->gguf, i);
        if (!candidate(t)) continue;
        struct im_acc *a = &c->acc[c->n++];
        a->w = t;
        a->n_in = (int64_t)t->ne[0];
        a->n_mat = t->n_dims >= 3 ? (int64_t)t->ne[2] : 1;
        size_t vals = (size_t)(a->n_in * a->n_mat);
        a->sum2 = snug_calloc(vals, sizeof(float));
        a->sum = snug_calloc(vals, sizeof(float));
        a->counts = snug_calloc((size_t)a->n_mat, sizeof(int64_t));
        if (!a->sum2 || !a->sum || !a->counts) goto nomem;
    }
    qsort(c->acc, (size_t)c->n, sizeof *c->acc, cmp_acc);
    c->obs = (struct snug_mm_observer){.user = c, .dense = obs_dense, .experts = obs_experts};
    *out = c;
    return SNUG_OK;
nomem:
    snug_imatrix_collector_free(c);
    return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory for the imatrix sums");
}

void snug_imatrix_collector_free(struct snug_imatrix_collector *c) {
    if (!c) return;
    for (int64_t i = 0; i < c->n; i++) {
        snug_free(c->acc[i].sum2);
        snug_free(c->acc[i].sum);
        snug_free(c->acc[i].counts);
    }
    snug_free(c->acc);
    snug_free(c);
}

const struct snug_mm_observer *snug_imatrix_collector_observer(struct snug_imatrix_collector *c) {
    return &c->obs;
}

static const struct im_acc *find_name(const struct snug_imatrix_collector *c, const char *name) {
    for (int64_t i = 0; i < c->n; i++)
        if (!strcmp(c->acc[i].w->name, name)) return &c->acc[i];
    return NULL;
}

const int64_t *snug_imatrix_collector_counts(const struct snug_imatrix_collector *c,
                                             const char *tensor_name, int64_t *n_mat) {
    const struct im_acc *a = find_name(c, tensor_name);
    if (n_mat) *n_mat = a && a->seen ? a->n_mat : 0;
    return a && a->seen ? a->counts : NULL;
}

const float *snug_imatrix_collector_sum2(const struct snug_imatrix_collector *c,
                                         const char *tensor_name, int64_t *n_values) {
    const struct im_acc *a = find_name(c, tensor_name);
    if (n_values) *n_values = a && a->seen ? a->n_in * a->n_mat : 0;
    return a && a->seen ? a->sum2 : NULL;
}

int64_t snug_imatrix_collector_n_entries(const struct snug_imatrix_collector *c) {
    int64_t n = 0;
    for (int64_t i = 0; i < c->n; i++) n += c->acc[i].seen;
    return n;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const struct im_acc *const *)a)->w->name,
                  (*(const struct im_acc *const *)b)->w->name);
}

/* Counts as llama-imatrix's rows_to_chunks: rows / chunk rounded to the nearest. */
static uint32_t rows_to_chunks(int64_t rows, uint32_t chunk) {
    return (uint32_t)((rows + chunk / 2) / chunk);
}

int snug_imatrix_collector_write(const struct snug_imatrix_collector *c, const char *path,
                                 const char *dataset, uint32_t chunk_size, struct snug_err *err) {
    if (chunk_size == 0) return snug_err_set(err, SNUG_ERR_INVALID, "imatrix chunk size 0");
    int64_t n = snug_imatrix_collector_n_entries(c);
    if (n == 0)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "no weight product was observed (the text gave no chunk of at least "
                            "%d tokens?): nothing to write to %s",
                            MIN_ROWS, path);
    const struct im_acc **order = snug_malloc((size_t)n * sizeof *order);
    if (!order) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory writing %s", path);
    uint32_t chunks = 0;
    int64_t k = 0;
    for (int64_t i = 0; i < c->n; i++) {
        const struct im_acc *a = &c->acc[i];
        if (!a->seen) continue;
        order[k++] = a;
        for (int64_t e = 0; e < a->n_mat; e++) {
            uint32_t ch = rows_to_chunks(a->counts[e], chunk_size);
            chunks = ch > chunks ? ch : chunks;
        }
        for (int64_t j = 0; j < a->n_in * a->n_mat; j++)
            if (!isfinite(a->sum2[j]) || !isfinite(a->sum[j])) {
                snug_free(order);
                return snug_err_set(err, SNUG_ERR_FORMAT,
                                    "%s: a non-finite activation sum (the forward diverged); "
                                    "nothing written to %s",
                                    a->w->name, path);
            }
    }
    qsort(order, (size_t)n, sizeof *order, cmp_name);

    struct snug_gguf_writer *w = NULL;
    int rc = snug_gguf_writer_open(&w, path, err);
    if (rc != SNUG_OK) {
        snug_free(order);
        return rc;
    }
    struct snug_gguf_str ds = {.len = strlen(dataset), .data = dataset};
    bool ok = !snug_gguf_writer_add_str(w, "general.type", "imatrix") &&
              !snug_gguf_writer_add_arr_str(w, "imatrix.datasets", 1, &ds) &&
              !snug_gguf_writer_add_u32(w, "imatrix.chunk_count", chunks) &&
              !snug_gguf_writer_add_u32(w, "imatrix.chunk_size", chunk_size);
    /* per entry, as llama-imatrix: W.in_sum2 [n_in, n_mat], W.counts [1, n_mat], W.in_sum; the
     * trailing 1-sized dimensions are dropped (a dense entry is [n_in] and [1]) */
    char name[600];
    for (int64_t i = 0; ok && i < n; i++) {
        const struct im_acc *a = order[i];
        uint32_t nd = a->n_mat > 1 ? 2 : 1;
        uint64_t ne_v[2] = {(uint64_t)a->n_in, (uint64_t)a->n_mat};
        uint64_t ne_c[2] = {1, (uint64_t)a->n_mat};
        static const char *const suffix[3] = {"in_sum2", "counts", "in_sum"};
        for (int s = 0; ok && s < 3; s++) {
            snprintf(name, sizeof name, "%s.%s", a->w->name, suffix[s]);
            ok = !snug_gguf_writer_add_tensor(w, name, SNUG_DTYPE_F32, nd, s == 1 ? ne_c : ne_v);
        }
    }
    for (int64_t i = 0; ok && i < n; i++) {
        const struct im_acc *a = order[i];
        ok = !snug_gguf_writer_write(w, a->sum2, (uint64_t)(a->n_in * a->n_mat) * sizeof(float));
        for (int64_t e = 0; ok && e < a->n_mat; e++) {
            float cf = (float)a->counts[e];
            ok = !snug_gguf_writer_write(w, &cf, sizeof cf);
        }
        if (ok)
            ok = !snug_gguf_writer_write(w, a->sum, (uint64_t)(a->n_in * a->n_mat) * sizeof(float));
    }
    snug_free(order);
    if (!ok) {
        snug_err_set(err, SNUG_ERR_IO, "writing %s: %s", path, snug_gguf_writer_error(w));
        snug_gguf_writer_abort(w);
        return SNUG_ERR_IO;
    }
    return snug_gguf_writer_close(w, err);
}
