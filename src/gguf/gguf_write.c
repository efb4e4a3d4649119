/* gguf_write.c — the streaming GGUF v3 writer (API in gguf.h).
 *
 * Owns: the encoded metadata (small), the tensor infos and the output FILE. Tensor bytes are
 * never held: the header (KV + tensor infos + padding) is written when the first tensor byte
 * arrives (or at close), then each tensor's bytes are passed straight through, each followed by
 * zero padding to the alignment. Layout rules follow ggml's gguf.cpp writer, which llama.cpp's
 * reader expects (read, not copied): offsets are relative to the aligned end of the header, each
 * tensor starts at the previous offset + its size rounded up to the alignment, the last tensor
 * is padded too, names are shorter than 64 bytes (GGML_MAX_NAME). Invariant: after an error the
 * writer refuses further calls; close then fails and removes the partial file.
 * Read next: gguf.c (the reader validates exactly what this writes). */
#define _POSIX_C_SOURCE 200809L

#include "core/core.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define GGUF_MAX_NAME 64 /* ggml's GGML_MAX_NAME, including the NUL */

struct wtensor {
    char name[GGUF_MAX_NAME];
    uint32_t type, n_dims;
    uint64_t ne[SNUG_GGUF_MAX_DIMS];
    uint64_t n_bytes, offset;
};

struct snug_gguf_writer {
    char *path;
    FILE *f;
    uint8_t *kv; /* encoded key/value pairs */
    size_t kv_len, kv_cap;
    char **keys; /* key names, for the duplicate check */
    uint64_t n_kv, keys_cap;
    struct wtensor *t;
    uint64_t n_t, t_cap;
    uint32_t alignment;
    bool header_done, failed;
    int status;           /* of the first error */
    uint64_t cur;         /* tensor receiving bytes */
    uint64_t cur_written; /* bytes of it written so far */
    char errmsg[512];
};

/* Record an error on the writer (and poison it). Returns status. */
static int werr(struct snug_gguf_writer *w, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int werr(struct snug_gguf_writer *w, int status, const char *fmt, ...) {
    if (w->failed) return status; /* keep the first message */
    int n = snprintf(w->errmsg, sizeof w->errmsg, "%s: ", w->path);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof w->errmsg)
        vsnprintf(w->errmsg + n, sizeof w->errmsg - (size_t)n, fmt, ap);
    va_end(ap);
    if (!w->failed) w->status = status;
    w->failed = true;
    return status;
}

const char *snug_gguf_writer_error(const struct snug_gguf_writer *w) {
    return w ? w->errmsg : "no writer";
}

int snug_gguf_writer_open(struct snug_gguf_writer **out, const char *path, struct snug_err *err) {
    *out = NULL;
    struct snug_gguf_writer *w = snug_calloc(1, sizeof *w);
    size_t n = strlen(path) + 1;
    if (w) w->path = snug_malloc(n);
    if (!w || !w->path) {
        snug_free(w);
        return snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(w->path, path, n);
    w->f = fopen(path, "wb");
    if (!w->f) {
        int e = errno;
        snug_free(w->path);
        snug_free(w);
        return snug_err_set(err, SNUG_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    w->alignment = SNUG_GGUF_DEFAULT_ALIGNMENT;
    *out = w;
    return SNUG_OK;
}

/* ---- metadata ----------------------------------------------------------------------------- */

/* Size of one element of a fixed-size metadata type (0 for string, array, unknown). */
static uint64_t elem_bytes(uint32_t t) {
    static const uint8_t sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < sizeof sz ? sz[t] : 0;
}

static bool kv_put(struct snug_gguf_writer *w, const void *p, size_t n) {
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap : 1024;
        while (cap < w->kv_len + n) cap *= 2;
        uint8_t *b = snug_malloc(cap);
        if (!b) return false;
        if (w->kv_len) memcpy(b, w->kv, w->kv_len);
        snug_free(w->kv);
        w->kv = b;
        w->kv_cap = cap;
    }
    if (n) memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
    return true;
}

static bool kv_put_str(struct snug_gguf_writer *w, const char *s, uint64_t n) {
    return kv_put(w, &n, 8) && kv_put(w, s, (size_t)n);
}

/* Start a key: checks state and uniqueness, appends the name and type. */
static int kv_begin(struct snug_gguf_writer *w, const char *key, uint32_t type) {
    if (w->failed) return SNUG_ERR_INVALID;
    if (w->header_done)
        return werr(w, SNUG_ERR_INVALID, "key '%s' added after tensor data started", key);
    size_t n = strlen(key);
    if (n == 0) return werr(w, SNUG_ERR_INVALID, "empty key name");
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key)) return werr(w, SNUG_ERR_INVALID, "duplicate key '%s'", key);
    if (w->n_kv == w->keys_cap) {
        uint64_t cap = w->keys_cap ? 2 * w->keys_cap : 64;
        char **k = snug_malloc((size_t)cap * sizeof *k);
        if (!k) return werr(w, SNUG_ERR_NOMEM, "out of memory");
        if (w->n_kv) memcpy(k, w->keys, (size_t)w->n_kv * sizeof *k);
        snug_free(w->keys);
        w->keys = k;
        w->keys_cap = cap;
    }
    char *copy = snug_malloc(n + 1);
    if (!copy) return werr(w, SNUG_ERR_NOMEM, "out of memory");
    memcpy(copy, key, n + 1);
    w->keys[w->n_kv++] = copy;
    if (!kv_put_str(w, key, n) || !kv_put(w, &type, 4))
        return werr(w, SNUG_ERR_NOMEM, "out of memory");
    return SNUG_OK;
}

static int kv_scalar(struct snug_gguf_writer *w, const char *key, uint32_t type, const void *v,
                     size_t n) {
    int rc = kv_begin(w, key, type);
    if (rc) return rc;
    return kv_put(w, v, n) ? SNUG_OK : werr(w, SNUG_ERR_NOMEM, "out of memory");
}

int snug_gguf_writer_add_u32(struct snug_gguf_writer *w, const char *key, uint32_t v) {
    if (!strcmp(key, "general.alignment")) {
        if (v == 0 || (v & (v - 1)))
            return werr(w, SNUG_ERR_INVALID, "general.alignment = %u is not a power of two", v);
        int rc = kv_scalar(w, key, SNUG_GGUF_UINT32, &v, 4);
        if (rc == SNUG_OK) w->alignment = v;
        return rc;
    }
    return kv_scalar(w, key, SNUG_GGUF_UINT32, &v, 4);
}
int snug_gguf_writer_add_i32(struct snug_gguf_writer *w, const char *key, int32_t v) {
    return kv_scalar(w, key, SNUG_GGUF_INT32, &v, 4);
}
int snug_gguf_writer_add_u64(struct snug_gguf_writer *w, const char *key, uint64_t v) {
    return kv_scalar(w, key, SNUG_GGUF_UINT64, &v, 8);
}
int snug_gguf_writer_add_f32(struct snug_gguf_writer *w, const char *key, float v) {
    return kv_scalar(w, key, SNUG_GGUF_FLOAT32, &v, 4);
}
int snug_gguf_writer_add_bool(struct snug_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return kv_scalar(w, key, SNUG_GGUF_BOOL, &b, 1);
}
int snug_gguf_writer_add_str(struct snug_gguf_writer *w, const char *key, const char *v) {
    int rc = kv_begin(w, key, SNUG_GGUF_STRING);
    if (rc) return rc;
    return kv_put_str(w, v, strlen(v)) ? SNUG_OK : werr(w, SNUG_ERR_NOMEM, "out of memory");
}

int snug_gguf_writer_add_scalar(struct snug_gguf_writer *w, const char *key,
                                enum snug_gguf_type type, const void *v) {
    uint64_t n = elem_bytes((uint32_t)type);
    if (!n) return werr(w, SNUG_ERR_INVALID, "key '%s': add_scalar takes a fixed-size type", key);
    if (type == SNUG_GGUF_UINT32) {
        uint32_t u;
        memcpy(&u, v, 4);
        return snug_gguf_writer_add_u32(w, key, u); /* general.alignment is checked there */
    }
    return kv_scalar(w, key, (uint32_t)type, v, (size_t)n);
}

int snug_gguf_writer_add_arr(struct snug_gguf_writer *w, const char *key,
                             enum snug_gguf_type elem_type, uint64_t n, const void *data) {
    uint64_t esz = elem_bytes((uint32_t)elem_type), bytes;
    if (!esz)
        return werr(w, SNUG_ERR_INVALID,
                    "key '%s': add_arr takes numeric element types (use add_arr_str for strings)",
                    key);
    if (!snug_mul_u64(n, esz, &bytes) || bytes > SIZE_MAX / 2)
        return werr(w, SNUG_ERR_INVALID, "key '%s': array of %llu elements is too large", key,
                    (unsigned long long)n);
    int rc = kv_begin(w, key, SNUG_GGUF_ARRAY);
    if (rc) return rc;
    uint32_t et = (uint32_t)elem_type;
    if (!kv_put(w, &et, 4) || !kv_put(w, &n, 8) || !kv_put(w, data, (size_t)bytes))
        return werr(w, SNUG_ERR_NOMEM, "out of memory");
    return SNUG_OK;
}

int snug_gguf_writer_add_arr_str(struct snug_gguf_writer *w, const char *key, uint64_t n,
                                 const struct snug_gguf_str *strs) {
    int rc = kv_begin(w, key, SNUG_GGUF_ARRAY);
    if (rc) return rc;
    uint32_t et = SNUG_GGUF_STRING;
    if (!kv_put(w, &et, 4) || !kv_put(w, &n, 8)) return werr(w, SNUG_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < n; i++)
        if (!kv_put_str(w, strs[i].data, strs[i].len))
            return werr(w, SNUG_ERR_NOMEM, "out of memory");
    return SNUG_OK;
}

int snug_gguf_writer_copy_kv(struct snug_gguf_writer *w, const struct snug_gguf *src, int64_t i) {
    const char *key = snug_gguf_key_name(src, i);
    const void *raw;
    uint64_t n;
    if (!key || snug_gguf_kv_raw(src, i, &raw, &n) != SNUG_OK)
        return werr(w, SNUG_ERR_INVALID, "copy_kv: no key #%lld in the source", (long long)i);
    uint32_t type = (uint32_t)snug_gguf_key_type(src, i);
    if (!strcmp(key, "general.alignment")) {
        uint32_t a;
        memcpy(&a, raw, 4); /* the reader checked it is a u32 power of two */
        return snug_gguf_writer_add_u32(w, key, a);
    }
    int rc = kv_begin(w, key, type);
    if (rc) return rc;
    return kv_put(w, raw, (size_t)n) ? SNUG_OK : werr(w, SNUG_ERR_NOMEM, "out of memory");
}

/* ---- tensors ------------------------------------------------------------------------------ */

int snug_gguf_writer_add_tensor(struct snug_gguf_writer *w, const char *name, uint32_t type,
                                uint32_t n_dims, const uint64_t *ne) {
    if (w->failed) return SNUG_ERR_INVALID;
    if (w->header_done)
        return werr(w, SNUG_ERR_INVALID, "tensor '%s' added after tensor data started", name);
    size_t len = strlen(name);
    if (len == 0 || len >= GGUF_MAX_NAME)
        return werr(w, SNUG_ERR_INVALID, "tensor name '%s' must be 1..%d bytes long", name,
                    GGUF_MAX_NAME - 1);
    if (n_dims < 1 || n_dims > SNUG_GGUF_MAX_DIMS)
        return werr(w, SNUG_ERR_INVALID, "tensor '%s': n_dims = %u, expected 1..%d", name, n_dims,
                    SNUG_GGUF_MAX_DIMS);
    const struct snug_dtype_info *di = snug_dtype_info(type);
    if (!di) return werr(w, SNUG_ERR_INVALID, "tensor '%s': unknown tensor type %u", name, type);
    struct wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    memcpy(t.name, name, len + 1);
    uint64_t elems = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        t.ne[d] = ne[d];
        if (ne[d] < 1 || ne[d] > (uint64_t)INT64_MAX || !snug_mul_u64(elems, ne[d], &elems))
            return werr(w, SNUG_ERR_INVALID, "tensor '%s': bad shape (ne[%u] = %llu)", name, d,
                        (unsigned long long)ne[d]);
    }
    if (t.ne[0] % di->block_elems)
        return werr(w, SNUG_ERR_INVALID,
                    "tensor '%s': ne[0] = %llu is not a multiple of the %s block size %u", name,
                    (unsigned long long)t.ne[0], di->name, di->block_elems);
    t.n_bytes = t.ne[0] / di->block_elems;
    bool ok = snug_mul_u64(t.n_bytes, di->block_bytes, &t.n_bytes);
    for (uint32_t d = 1; d < SNUG_GGUF_MAX_DIMS; d++)
        ok = ok && snug_mul_u64(t.n_bytes, t.ne[d], &t.n_bytes);
    if (!ok || t.n_bytes > (uint64_t)INT64_MAX)
        return werr(w, SNUG_ERR_INVALID, "tensor '%s': size overflows", name);
    for (uint64_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return werr(w, SNUG_ERR_INVALID, "duplicate tensor name '%s'", name);
    if (w->n_t == w->t_cap) {
        uint64_t cap = w->t_cap ? 2 * w->t_cap : 64;
        struct wtensor *nt = snug_malloc((size_t)cap * sizeof *nt);
        if (!nt) return werr(w, SNUG_ERR_NOMEM, "out of memory");
        if (w->n_t) memcpy(nt, w->t, (size_t)w->n_t * sizeof *nt);
        snug_free(w->t);
        w->t = nt;
        w->t_cap = cap;
    }
    w->t[w->n_t++] = t;
    return SNUG_OK;
}

static int put(struct snug_gguf_writer *w, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, w->f) != n)
        return werr(w, SNUG_ERR_IO, "write failed: %s", strerror(errno));
    return SNUG_OK;
}

static int put_zeros(struct snug_gguf_writer *w, uint64_t n) {
    static const uint8_t zeros[256];
    while (n) {
        size_t k = n > sizeof zeros ? sizeof zeros : (size_t)n;
        if (put(w, zeros, k)) return SNUG_ERR_IO;
        n -= k;
    }
    return SNUG_OK;
}

/* Write magic, version, counts, metadata, tensor infos (offsets assigned here) and padding. */
static int write_header(struct snug_gguf_writer *w) {
    uint64_t off = 0, pos = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        uint64_t padded = SNUG_ALIGN_UP(w->t[i].n_bytes, (uint64_t)w->alignment);
        if (padded < w->t[i].n_bytes || !snug_add_u64(off, padded, &off))
            return werr(w, SNUG_ERR_INVALID, "total tensor size overflows");
    }
    uint32_t version = 3;
    if (put(w, "GGUF", 4) || put(w, &version, 4) || put(w, &w->n_t, 8) || put(w, &w->n_kv, 8) ||
        put(w, w->kv, w->kv_len))
        return SNUG_ERR_IO;
    pos = 24 + w->kv_len;
    for (uint64_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        uint64_t len = strlen(t->name);
        if (put(w, &len, 8) || put(w, t->name, (size_t)len) || put(w, &t->n_dims, 4) ||
            put(w, t->ne, 8 * (size_t)t->n_dims) || put(w, &t->type, 4) || put(w, &t->offset, 8))
            return SNUG_ERR_IO;
        pos += 8 + len + 4 + 8ull * t->n_dims + 4 + 8;
    }
    w->header_done = true;
    return put_zeros(w, (w->alignment - pos % w->alignment) % w->alignment);
}

int snug_gguf_writer_write(struct snug_gguf_writer *w, const void *data, uint64_t n_bytes) {
    if (w->failed) return SNUG_ERR_INVALID;
    if (!w->header_done && write_header(w)) return SNUG_ERR_IO;
    const uint8_t *p = data;
    while (n_bytes) {
        if (w->cur >= w->n_t)
            return werr(w, SNUG_ERR_INVALID, "%llu bytes written past the last tensor",
                        (unsigned long long)n_bytes);
        struct wtensor *t = &w->t[w->cur];
        uint64_t k = SNUG_MIN(n_bytes, t->n_bytes - w->cur_written);
        if (put(w, p, (size_t)k)) return SNUG_ERR_IO;
        p += k;
        n_bytes -= k;
        w->cur_written += k;
        if (w->cur_written == t->n_bytes) {
            if (put_zeros(w, SNUG_ALIGN_UP(t->n_bytes, (uint64_t)w->alignment) - t->n_bytes))
                return SNUG_ERR_IO;
            w->cur++;
            w->cur_written = 0;
        }
    }
    return SNUG_OK;
}

/* ---- finishing ---------------------------------------------------------------------------- */

static void writer_free(struct snug_gguf_writer *w) {
    for (uint64_t i = 0; i < w->n_kv; i++) snug_free(w->keys[i]);
    snug_free(w->keys);
    snug_free(w->kv);
    snug_free(w->t);
    snug_free(w->path);
    snug_free(w);
}

int snug_gguf_writer_close(struct snug_gguf_writer *w, struct snug_err *err) {
    if (!w) return snug_err_set(err, SNUG_ERR_INVALID, "snug_gguf_writer_close: NULL writer");
    int rc = SNUG_OK;
    if (!w->failed && !w->header_done) write_header(w);
    if (!w->failed && w->cur < w->n_t)
        werr(w, SNUG_ERR_INVALID,
             "tensor '%s' received %llu of its %llu bytes (%llu of %llu "
             "tensors complete)",
             w->t[w->cur].name, (unsigned long long)w->cur_written,
             (unsigned long long)w->t[w->cur].n_bytes, (unsigned long long)w->cur,
             (unsigned long long)w->n_t);
    if (fclose(w->f) != 0 && !w->failed) werr(w, SNUG_ERR_IO, "close failed: %s", strerror(errno));
    if (w->failed) {
        rc = snug_err_set(err, w->status, "%s", w->errmsg);
        remove(w->path);
    }
    writer_free(w);
    return rc;
}

void snug_gguf_writer_abort(struct snug_gguf_writer *w) {
    if (!w) return;
    fclose(w->f);
    remove(w->path);
    writer_free(w);
}
