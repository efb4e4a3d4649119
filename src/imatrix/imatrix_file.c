/* imatrix_file.c — reading llama.cpp's imatrix files (both formats, see imatrix.h).
 *
 * The GGUF form goes through the validating GGUF reader; the legacy form is parsed here with
 * every length checked against the bytes left. Entries are normalised on load (divided by
 * their counts, as llama-quantize does before quantizing) and kept in one allocation, sorted
 * by name for lookup. Invariant: every stored value is finite (llama.cpp refuses NaN/inf too).
 * Read next: imatrix.h. */
#include "imatrix.h"

#include "core/core.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct im_entry {
    char *name;
    float *values;
    uint64_t n;
};

struct snug_imatrix {
    struct im_entry *e;
    int64_t n, cap;
    uint32_t chunk_count;
    char dataset[256];
};

static int add_entry(struct snug_imatrix *m, const char *name, size_t name_len, uint64_t n,
                     struct im_entry **out, struct snug_err *err) {
    if (m->n == m->cap) {
        int64_t cap = m->cap ? 2 * m->cap : 64;
        struct im_entry *e = snug_calloc((size_t)cap, sizeof *e);
        if (!e) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory for imatrix entries");
        if (m->n) memcpy(e, m->e, (size_t)m->n * sizeof *e);
        snug_free(m->e);
        m->e = e;
        m->cap = cap;
    }
    struct im_entry *e = &m->e[m->n];
    e->name = snug_malloc(name_len + 1);
    e->values = n ? snug_malloc((size_t)n * sizeof(float)) : NULL;
    if (!e->name || (n && !e->values)) {
        snug_free(e->name);
        snug_free(e->values);
        return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory for imatrix values");
    }
    memcpy(e->name, name, name_len);
    e->name[name_len] = 0;
    e->n = n;
    m->n++;
    *out = e;
    return SNUG_OK;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const struct im_entry *)a)->name, ((const struct im_entry *)b)->name);
}

/* Sort, refuse duplicate names and non-finite values. */
static int finish(struct snug_imatrix *m, const char *name, struct snug_err *err) {
    if (m->n == 0) return snug_err_set(err, SNUG_ERR_FORMAT, "%s: no importance data", name);
    qsort(m->e, (size_t)m->n, sizeof *m->e, cmp_entry);
    for (int64_t i = 0; i < m->n; i++) {
        if (i && !strcmp(m->e[i - 1].name, m->e[i].name))
            return snug_err_set(err, SNUG_ERR_FORMAT, "%s: tensor %s appears twice", name,
                                m->e[i].name);
        for (uint64_t j = 0; j < m->e[i].n; j++)
            if (!isfinite(m->e[i].values[j]))
                return snug_err_set(err, SNUG_ERR_FORMAT,
                                    "%s: entry %s holds a non-finite value at %llu (the "
                                    "imatrix run diverged; recompute it)",
                                    name, m->e[i].name, (unsigned long long)j);
    }
    return SNUG_OK;
}

static float rd_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

static bool ends_with(const char *s, const char *suffix, size_t *stem) {
    size_t ls = strlen(s), lx = strlen(suffix);
    if (ls <= lx || strcmp(s + ls - lx, suffix) != 0) return false;
    *stem = ls - lx;
    return true;
}

static int load_gguf(struct snug_imatrix *m, const struct snug_gguf *g, const char *name,
                     struct snug_err *err) {
    uint32_t cc = 0;
    if (snug_gguf_get_u32_opt(g, "imatrix.chunk_count", &cc, err) != SNUG_OK)
        return SNUG_ERR_FORMAT;
    m->chunk_count = cc;
    struct snug_gguf_str ds;
    if (snug_gguf_find_key(g, "imatrix.datasets") >= 0 &&
        snug_gguf_arr_str(g, "imatrix.datasets", 0, &ds) == SNUG_OK)
        snprintf(m->dataset, sizeof m->dataset, "%.*s", (int)(ds.len < 255 ? ds.len : 255),
                 ds.data);
    for (int64_t i = 0; i < snug_gguf_n_tensors(g); i++) {
        const struct snug_gguf_tensor *t = snug_gguf_tensor(g, i);
        size_t stem;
        if (!ends_with(t->name, ".in_sum2", &stem)) continue;
        char cname[512];
        if (stem + 8 > sizeof cname)
            return snug_err_set(err, SNUG_ERR_FORMAT, "%s: tensor name too long", name);
        memcpy(cname, t->name, stem);
        memcpy(cname + stem, ".counts", 8);
        const struct snug_gguf_tensor *c = snug_gguf_find_tensor(g, cname);
        if (!c) return snug_err_set(err, SNUG_ERR_FORMAT, "%s: %s has no %s", name, t->name, cname);
        if (t->type != SNUG_DTYPE_F32 || c->type != SNUG_DTYPE_F32)
            return snug_err_set(err, SNUG_ERR_FORMAT, "%s: %s and %s must be F32", name, t->name,
                                cname);
        uint64_t nc = c->n_elems, nv = t->n_elems;
        if (nc == 0 || nv == 0 || nv % nc)
            return snug_err_set(err, SNUG_ERR_FORMAT,
                                "%s: %s has %llu values for %llu counts (want a multiple)", name,
                                t->name, (unsigned long long)nv, (unsigned long long)nc);
        struct im_entry *e;
        int rc = add_entry(m, t->name, stem, nv, &e, err);
        if (rc != SNUG_OK) return rc;
        const uint8_t *sums = t->data, *counts = c->data;
        uint64_t ne0 = nv / nc;
        for (uint64_t j = 0; j < nc; j++) {
            float cf = rd_f32(counts + 4 * j);
            /* llama.cpp rounds the counts to integers, then divides in float */
            float count = isfinite(cf) && cf > 0 && cf < 9e18f ? (float)llroundf(cf) : 0.f;
            for (uint64_t k = 0; k < ne0; k++)
                e->values[j * ne0 + k] = count > 0 ? rd_f32(sums + 4 * (j * ne0 + k)) / count : 1.f;
        }
    }
    return SNUG_OK;
}

static bool rd_i32(const uint8_t **p, const uint8_t *end, int32_t *v) {
    if (end - *p < 4) return false;
    memcpy(v, *p, 4);
    *p += 4;
    return true;
}

static int load_legacy(struct snug_imatrix *m, const uint8_t *p, const uint8_t *end,
                       const char *name, struct snug_err *err) {
    int32_t n_entries;
    if (!rd_i32(&p, end, &n_entries) || n_entries < 1)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "%s: neither a GGUF imatrix nor a legacy .dat one (no entries)", name);
    for (int32_t i = 0; i < n_entries; i++) {
        int32_t len, ncall, nval;
        if (!rd_i32(&p, end, &len) || len < 1 || len > 511 || end - p < len)
            return snug_err_set(err, SNUG_ERR_FORMAT, "%s: entry %d: bad name length", name, i);
        const char *ename = (const char *)p;
        p += len;
        if (!rd_i32(&p, end, &ncall) || !rd_i32(&p, end, &nval) || nval < 1 ||
            (uint64_t)(end - p) / 4 < (uint64_t)nval)
            return snug_err_set(err, SNUG_ERR_FORMAT, "%s: entry %d: truncated values", name, i);
        size_t nlen = 0; /* the name stops at a NUL inside it, as llama.cpp reads it */
        while (nlen < (size_t)len && ename[nlen]) nlen++;
        struct im_entry *e;
        int rc = add_entry(m, ename, nlen, (uint64_t)nval, &e, err);
        if (rc != SNUG_OK) return rc;
        for (int32_t k = 0; k < nval; k++) {
            float v = rd_f32(p + 4 * k);
            e->values[k] = ncall > 0 ? v / (float)ncall : v;
        }
        p += 4 * (size_t)nval;
    }
    int32_t chunks, len;
    if (rd_i32(&p, end, &chunks)) {
        m->chunk_count = chunks > 0 ? (uint32_t)chunks : 0;
        if (rd_i32(&p, end, &len) && len > 0 && end - p >= len)
            snprintf(m->dataset, sizeof m->dataset, "%.*s", len < 255 ? len : 255, (const char *)p);
    }
    return SNUG_OK;
}

int snug_imatrix_load_memory(struct snug_imatrix **out, const void *data, uint64_t size,
                             const char *name, struct snug_err *err) {
    *out = NULL;
    struct snug_imatrix *m = snug_calloc(1, sizeof *m);
    if (!m) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory for an imatrix");
    int rc;
    if (size >= 4 && !memcmp(data, "GGUF", 4)) {
        struct snug_gguf *g = NULL;
        rc = snug_gguf_open_memory(&g, data, size, name, err);
        if (rc == SNUG_OK) rc = load_gguf(m, g, name, err);
        snug_gguf_close(g);
    } else {
        rc = load_legacy(m, data, (const uint8_t *)data + size, name, err);
    }
    if (rc == SNUG_OK) rc = finish(m, name, err);
    if (rc != SNUG_OK) {
        snug_imatrix_free(m);
        return rc;
    }
    *out = m;
    return SNUG_OK;
}

int snug_imatrix_load(struct snug_imatrix **out, const char *path, struct snug_err *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return snug_err_set(err, SNUG_ERR_IO, "cannot open imatrix file %s", path);
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return snug_err_set(err, SNUG_ERR_IO, "cannot read imatrix file %s", path);
    }
    uint8_t *buf = snug_malloc((size_t)size + 1);
    if (!buf) {
        fclose(f);
        return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory reading %s", path);
    }
    size_t got = fread(buf, 1, (size_t)size, f);
    fclose(f);
    int rc = got == (size_t)size
                 ? snug_imatrix_load_memory(out, buf, (uint64_t)size, path, err)
                 : snug_err_set(err, SNUG_ERR_IO, "short read of imatrix file %s", path);
    snug_free(buf);
    return rc;
}

void snug_imatrix_free(struct snug_imatrix *m) {
    if (!m) return;
    for (int64_t i = 0; i < m->n; i++) {
        snug_free(m->e[i].name);
        snug_free(m->e[i].values);
    }
    snug_free(m->e);
    snug_free(m);
}

const float *snug_imatrix_find(const struct snug_imatrix *m, const char *tensor_name,
                               uint64_t *n_values) {
    struct im_entry key = {.name = (char *)tensor_name};
    const struct im_entry *e = bsearch(&key, m->e, (size_t)m->n, sizeof *m->e, cmp_entry);
    if (n_values) *n_values = e ? e->n : 0;
    return e ? e->values : NULL;
}

int64_t snug_imatrix_n_entries(const struct snug_imatrix *m) {
    return m->n;
}
uint32_t snug_imatrix_chunk_count(const struct snug_imatrix *m) {
    return m->chunk_count;
}
const char *snug_imatrix_dataset(const struct snug_imatrix *m) {
    return m->dataset;
}
