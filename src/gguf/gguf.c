/* gguf.c — the validating GGUF v3 reader (API and file layout in gguf.h).
 *
 * Owns: the file mappings, one key table and one tensor table per part, the merged tensor table
 * and two hash indexes (keys, tensor names). Invariant: nothing is handed out until the whole
 * image has been validated; every length, count, product and offset taken from the file is
 * checked against the bytes that remain with overflow-checked arithmetic, so a getter never
 * reads outside the mapping. Host byte order is assumed little-endian (checked at open).
 * Layout facts are from ggml's docs/gguf.md and ggml/src/gguf.cpp (read, not copied).
 * Read next: gguf_write.c (the writer follows the same layout rules), src/quant/quant.h. */
#define _POSIX_C_SOURCE 200809L

#include "gguf/gguf.h"

#include "core/core.h"
#include "quant/quant.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Arrays inside arrays are validated and skipped, up to this depth (a guard for the stack). */
#define GGUF_MAX_NESTING 8
/* Smallest possible encodings, used to reject absurd counts before allocating anything:
 * a key/value = u64 key length + u32 type + a 1-byte value; a tensor info = u64 name length +
 * u32 n_dims + one u64 dim + u32 type + u64 offset. */
#define GGUF_MIN_KV_BYTES     13u
#define GGUF_MIN_TENSOR_BYTES 32u

struct gguf_kv {
    const char *name;    /* NUL-terminated, in the part's name pool */
    uint32_t type;       /* enum snug_gguf_type */
    uint32_t elem_type;  /* arrays only */
    uint64_t count;      /* arrays only: element count */
    const uint8_t *raw;  /* the encoded value (after the type field) */
    uint64_t raw_bytes;  /* its length in bytes */
    const uint8_t *val;  /* scalars: the value; strings: the u64 length; arrays: element 0 */
    const uint8_t **str; /* string arrays: each element's u64 length field */
};

/* One open-addressing hash index of names → index + 1 (0 = empty slot). */
struct gguf_index {
    uint64_t *slots;
    uint64_t cap; /* power of two, > 2 × entries */
};

struct gguf_part {
    char *path; /* owned copy */
    const uint8_t *base;
    uint64_t size;
    bool mapped; /* munmap on close */
    uint64_t data_off;
    uint32_t alignment;
    struct gguf_kv *kv;
    uint64_t n_kv;
    struct gguf_index kv_index;
    struct snug_gguf_tensor *tensors;
    uint64_t n_tensors;
    char *names; /* pool of NUL-terminated key and tensor names */
};

struct snug_gguf {
    struct gguf_part *parts;
    uint32_t n_parts;
    struct snug_gguf_tensor *tensors; /* == parts[0].tensors for a single file, else merged */
    uint64_t n_tensors;
    struct gguf_index tensor_index;
};

/* ---- small helpers ------------------------------------------------------------------------ */

static const char *type_name(uint32_t t) {
    static const char *const names[] = {"u8",   "i8",  "u16",   "i16", "u32", "i32", "f32",
                                        "bool", "str", "array", "u64", "i64", "f64"};
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

/* Size of one scalar of a fixed-size type, 0 for string/array/unknown. */
static uint64_t scalar_bytes(uint32_t t) {
    switch (t) {
    case SNUG_GGUF_UINT8:
    case SNUG_GGUF_INT8:
    case SNUG_GGUF_BOOL:
        return 1;
    case SNUG_GGUF_UINT16:
    case SNUG_GGUF_INT16:
        return 2;
    case SNUG_GGUF_UINT32:
    case SNUG_GGUF_INT32:
    case SNUG_GGUF_FLOAT32:
        return 4;
    case SNUG_GGUF_UINT64:
    case SNUG_GGUF_INT64:
    case SNUG_GGUF_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

static uint64_t rd_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    return snug_fnv1a(1469598103934665603ull, s, n); /* FNV-1a from this file's own start */
}

/* Size the index for n entries. */
static int index_init(struct gguf_index *ix, uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n + 1) cap *= 2;
    ix->slots = snug_calloc(cap, sizeof *ix->slots);
    ix->cap = cap;
    return ix->slots ? SNUG_OK : SNUG_ERR_NOMEM;
}

/* Find `name` (len bytes) in the index; `name_of(i)` gives the name of entry i. Returns the
 * slot holding it, or the empty slot where it would go. */
static uint64_t index_slot(const struct gguf_index *ix, const char *name, size_t len,
                           const char *(*name_of)(const void *, uint64_t), const void *ctx) {
    uint64_t m = ix->cap - 1, s = hash_bytes(name, len) & m;
    while (ix->slots[s]) {
        const char *other = name_of(ctx, ix->slots[s] - 1);
        if (strlen(other) == len && !memcmp(other, name, len)) return s;
        s = (s + 1) & m;
    }
    return s;
}

static const char *kv_name_of(const void *ctx, uint64_t i) {
    return ((const struct gguf_part *)ctx)->kv[i].name;
}
static const char *tensor_name_of(const void *ctx, uint64_t i) {
    return ((const struct snug_gguf *)ctx)->tensors[i].name;
}

/* ---- the parsing cursor ------------------------------------------------------------------- */

struct cur {
    const uint8_t *base;
    uint64_t pos, size;
    const char *file;
    struct snug_err *err;
    bool nomem;     /* the failure was an allocation, not the file */
    char what[160]; /* what is being read, for messages */
};

static uint64_t left(const struct cur *c) {
    return c->size - c->pos;
}

/* Take n bytes; on a short file report what was being read and where. */
static const uint8_t *take(struct cur *c, uint64_t n) {
    if (n > left(c)) {
        snug_err_set(c->err, SNUG_ERR_FORMAT,
                     "%s: file truncated: %s needs %llu bytes at offset %llu, only %llu left",
                     c->file, c->what, (unsigned long long)n, (unsigned long long)c->pos,
                     (unsigned long long)left(c));
        return NULL;
    }
    const uint8_t *p = c->base + c->pos;
    c->pos += n;
    return p;
}

static bool take_u32(struct cur *c, uint32_t *v) {
    const uint8_t *p = take(c, 4);
    if (p) memcpy(v, p, 4);
    return p != NULL;
}

static bool take_u64(struct cur *c, uint64_t *v) {
    const uint8_t *p = take(c, 8);
    if (p) memcpy(v, p, 8);
    return p != NULL;
}

/* A gguf_string: u64 length then bytes. */
static bool take_str(struct cur *c, const char **s, uint64_t *len) {
    uint64_t n;
    if (!take_u64(c, &n)) return false;
    if (n > left(c)) {
        snug_err_set(c->err, SNUG_ERR_FORMAT,
                     "%s: %s: string length %llu at offset %llu exceeds the %llu bytes left in "
                     "the file (truncated or corrupt)",
                     c->file, c->what, (unsigned long long)n, (unsigned long long)(c->pos - 8),
                     (unsigned long long)left(c));
        return false;
    }
    *s = (const char *)take(c, n);
    *len = n;
    return true;
}

/* Skip one value of type t (arrays recursively, nesting bounded). Records the string-element
 * index for a top-level string array when `kv` is given. */
static bool skip_value(struct cur *c, uint32_t t, int depth, struct gguf_kv *kv) {
    uint64_t sz = scalar_bytes(t);
    if (sz) return take(c, sz) != NULL;
    if (t == SNUG_GGUF_STRING) {
        const char *s;
        uint64_t n;
        return take_str(c, &s, &n);
    }
    if (t != SNUG_GGUF_ARRAY) {
        snug_err_set(c->err, SNUG_ERR_FORMAT,
                     "%s: %s: unknown value type %u (expected 0..12) at offset %llu", c->file,
                     c->what, t, (unsigned long long)(c->pos - 4));
        return false;
    }
    if (depth >= GGUF_MAX_NESTING) {
        snug_err_set(c->err, SNUG_ERR_FORMAT, "%s: %s: arrays nested deeper than %d levels",
                     c->file, c->what, GGUF_MAX_NESTING);
        return false;
    }
    uint32_t et;
    uint64_t count;
    if (!take_u32(c, &et) || !take_u64(c, &count)) return false;
    uint64_t esz = scalar_bytes(et), min_elem = esz;
    if (et == SNUG_GGUF_STRING)
        min_elem = 8;
    else if (et == SNUG_GGUF_ARRAY)
        min_elem = 12;
    else if (!esz) {
        snug_err_set(c->err, SNUG_ERR_FORMAT,
                     "%s: %s: unknown array element type %u (expected 0..12)", c->file, c->what,
                     et);
        return false;
    }
    if (count > left(c) / min_elem) {
        snug_err_set(c->err, SNUG_ERR_FORMAT,
                     "%s: %s: array count %llu of %s needs at least %llu bytes each, only %llu "
                     "bytes left (truncated or corrupt)",
                     c->file, c->what, (unsigned long long)count, type_name(et),
                     (unsigned long long)min_elem, (unsigned long long)left(c));
        return false;
    }
    if (kv) {
        kv->elem_type = et;
        kv->count = count;
        kv->val = c->base + c->pos;
    }
    if (esz) return take(c, esz * count) != NULL; /* cannot overflow: count ≤ left / esz */
    if (kv && et == SNUG_GGUF_STRING) {
        kv->str = snug_malloc((size_t)(count ? count : 1) * sizeof *kv->str);
        if (!kv->str) {
            c->nomem = true;
            snug_err_set(c->err, SNUG_ERR_NOMEM, "%s: %s: out of memory indexing %llu strings",
                         c->file, c->what, (unsigned long long)count);
            return false;
        }
    }
    for (uint64_t i = 0; i < count; i++) {
        if (kv && kv->str) kv->str[i] = c->base + c->pos;
        if (et == SNUG_GGUF_STRING) {
            const char *s;
            uint64_t n;
            if (!take_str(c, &s, &n)) return false;
        } else if (!skip_value(c, SNUG_GGUF_ARRAY, depth + 1, NULL)) {
            return false;
        }
    }
    return true;
}

/* ---- parsing one image -------------------------------------------------------------------- */

static void part_free(struct gguf_part *p) {
    if (!p) return;
    for (uint64_t i = 0; p->kv && i < p->n_kv; i++) snug_free(p->kv[i].str);
    snug_free(p->kv);
    snug_free(p->kv_index.slots);
    snug_free(p->tensors);
    snug_free(p->names);
    if (p->mapped && p->base) munmap((void *)p->base, (size_t)p->size);
    snug_free(p->path);
    memset(p, 0, sizeof *p);
}

/* A name from the file as a printable prefix, for messages. */
#define SHOWN(len) ((int)((len) > 96 ? 96 : (len)))

/* Validate that a name has no NUL byte (names are handed out NUL-terminated). */
static bool name_ok(struct cur *c, const char *s, uint64_t n, const char *kind) {
    if (memchr(s, 0, (size_t)n)) {
        snug_err_set(c->err, SNUG_ERR_FORMAT, "%s: %s name '%.*s' contains a NUL byte", c->file,
                     kind, SHOWN(n), s);
        return false;
    }
    return true;
}

/* Overflow-checked byte size of a tensor: (ne0 / block) × block_bytes × ne1 × ne2 × ne3. */
static bool tensor_sizes(struct snug_gguf_tensor *t, const struct snug_dtype_info *di) {
    uint64_t elems = 1, bytes = (t->ne[0] / di->block_elems);
    for (uint32_t d = 0; d < SNUG_GGUF_MAX_DIMS; d++)
        if (!snug_mul_u64(elems, t->ne[d], &elems)) return false;
    if (!snug_mul_u64(bytes, di->block_bytes, &bytes)) return false;
    for (uint32_t d = 1; d < SNUG_GGUF_MAX_DIMS; d++)
        if (!snug_mul_u64(bytes, t->ne[d], &bytes)) return false;
    if (elems > (uint64_t)INT64_MAX || bytes > (uint64_t)INT64_MAX) return false;
    t->n_elems = elems;
    t->n_bytes = bytes;
    return true;
}

struct span {
    uint64_t off, end, idx;
};
static int span_cmp(const void *a, const void *b) {
    const struct span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : (x->idx < y->idx ? -1 : 1);
}

/* Parse and validate one GGUF image into p (base/size/path already set). */
static int part_parse(struct gguf_part *p, struct snug_err *err) {
    struct cur c = {.base = p->base, .size = p->size, .file = p->path, .err = err};
    const char **kname = NULL, **tname = NULL;
    uint64_t *klen = NULL, *tlen = NULL;
    struct span *spans = NULL;
    int rc = SNUG_ERR_FORMAT;

    snprintf(c.what, sizeof c.what, "the header");
    const uint8_t *magic = take(&c, 4);
    if (!magic) goto fail;
    if (memcmp(magic, "GGUF", 4)) {
        snug_err_set(err, SNUG_ERR_FORMAT,
                     "%s: bad magic: expected 'GGUF' (47 47 55 46), found %02x %02x %02x %02x: not "
                     "a GGUF file",
                     p->path, magic[0], magic[1], magic[2], magic[3]);
        goto fail;
    }
    uint32_t version;
    uint64_t n_tensors, n_kv;
    if (!take_u32(&c, &version)) goto fail;
    if (version != 3) {
        if (version == 0x03000000u)
            snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                         "%s: big-endian GGUF (version bytes 00 00 00 03): only little-endian "
                         "files are supported",
                         p->path);
        else
            snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                         "%s: unsupported GGUF version %u: expected version 3", p->path, version);
        rc = SNUG_ERR_UNSUPPORTED;
        goto fail;
    }
    if (!take_u64(&c, &n_tensors) || !take_u64(&c, &n_kv)) goto fail;
    if (n_kv > left(&c) / GGUF_MIN_KV_BYTES) {
        snug_err_set(err, SNUG_ERR_FORMAT,
                     "%s: n_kv = %llu is impossible: each key/value needs at least %u bytes and "
                     "only %llu bytes follow the header (truncated or corrupt)",
                     p->path, (unsigned long long)n_kv, GGUF_MIN_KV_BYTES,
                     (unsigned long long)left(&c));
        goto fail;
    }
    if (n_tensors > left(&c) / GGUF_MIN_TENSOR_BYTES) {
        snug_err_set(err, SNUG_ERR_FORMAT,
                     "%s: n_tensors = %llu is impossible: each tensor info needs at least %u bytes "
                     "and only %llu bytes follow the header (truncated or corrupt)",
                     p->path, (unsigned long long)n_tensors, GGUF_MIN_TENSOR_BYTES,
                     (unsigned long long)left(&c));
        goto fail;
    }

    rc = SNUG_ERR_NOMEM;
    p->kv = snug_calloc((size_t)n_kv + 1, sizeof *p->kv);
    p->tensors = snug_calloc((size_t)n_tensors + 1, sizeof *p->tensors);
    kname = snug_calloc((size_t)n_kv + 1, sizeof *kname);
    klen = snug_calloc((size_t)n_kv + 1, sizeof *klen);
    tname = snug_calloc((size_t)n_tensors + 1, sizeof *tname);
    tlen = snug_calloc((size_t)n_tensors + 1, sizeof *tlen);
    spans = snug_calloc((size_t)n_tensors + 1, sizeof *spans);
    if (!p->kv || !p->tensors || !kname || !klen || !tname || !tlen || !spans) {
        snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory for %llu keys and %llu tensors",
                     p->path, (unsigned long long)n_kv, (unsigned long long)n_tensors);
        goto fail;
    }
    rc = SNUG_ERR_FORMAT;

    /* -- key/value pairs -- */
    uint64_t pool_bytes = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        snprintf(c.what, sizeof c.what, "the name of key #%llu", (unsigned long long)i);
        if (!take_str(&c, &kname[i], &klen[i])) goto fail;
        if (!name_ok(&c, kname[i], klen[i], "key")) goto fail;
        pool_bytes += klen[i] + 1; /* ≤ file size: cannot overflow */
        struct gguf_kv *kv = &p->kv[i];
        snprintf(c.what, sizeof c.what, "key '%.*s'", SHOWN(klen[i]), kname[i]);
        if (!take_u32(&c, &kv->type)) goto fail;
        kv->raw = c.base + c.pos;
        kv->val = kv->raw;
        p->n_kv = i + 1; /* so part_free frees kv->str */
        if (!skip_value(&c, kv->type, 0, kv->type == SNUG_GGUF_ARRAY ? kv : NULL)) {
            if (c.nomem) rc = SNUG_ERR_NOMEM;
            goto fail;
        }
        kv->raw_bytes = (uint64_t)(c.base + c.pos - kv->raw);
    }
    p->n_kv = n_kv;

    /* -- tensor infos -- */
    for (uint64_t i = 0; i < n_tensors; i++) {
        struct snug_gguf_tensor *t = &p->tensors[i];
        snprintf(c.what, sizeof c.what, "the name of tensor #%llu", (unsigned long long)i);
        if (!take_str(&c, &tname[i], &tlen[i])) goto fail;
        if (!name_ok(&c, tname[i], tlen[i], "tensor")) goto fail;
        pool_bytes += tlen[i] + 1;
        const char *nm = tname[i];
        int nl = SHOWN(tlen[i]);
        snprintf(c.what, sizeof c.what, "tensor '%.*s'", nl, nm);
        if (!take_u32(&c, &t->n_dims)) goto fail;
        if (t->n_dims < 1 || t->n_dims > SNUG_GGUF_MAX_DIMS) {
            snug_err_set(err, SNUG_ERR_FORMAT, "%s: tensor '%.*s': n_dims = %u, expected 1..%d",
                         p->path, nl, nm, t->n_dims, SNUG_GGUF_MAX_DIMS);
            goto fail;
        }
        for (uint32_t d = 0; d < SNUG_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            if (!take_u64(&c, &t->ne[d])) goto fail;
            if (t->ne[d] < 1 || t->ne[d] > (uint64_t)INT64_MAX) {
                snug_err_set(err, SNUG_ERR_FORMAT,
                             "%s: tensor '%.*s': ne[%u] = %llu, expected 1..2^63-1", p->path, nl,
                             nm, d, (unsigned long long)t->ne[d]);
                goto fail;
            }
        }
        if (!take_u32(&c, &t->type) || !take_u64(&c, &t->offset)) goto fail;
        const struct snug_dtype_info *di = snug_dtype_info(t->type);
        if (!di) {
            snug_err_set(err, SNUG_ERR_FORMAT, "%s: tensor '%.*s': unknown tensor type %u", p->path,
                         nl, nm, t->type);
            goto fail;
        }
        if (t->ne[0] % di->block_elems) {
            snug_err_set(err, SNUG_ERR_FORMAT,
                         "%s: tensor '%.*s': ne[0] = %llu is not a multiple of the %s block size "
                         "%u",
                         p->path, nl, nm, (unsigned long long)t->ne[0], di->name, di->block_elems);
            goto fail;
        }
        if (!tensor_sizes(t, di)) {
            snug_err_set(err, SNUG_ERR_FORMAT,
                         "%s: tensor '%.*s': element count overflows (ne = %llu x %llu x %llu x "
                         "%llu)",
                         p->path, nl, nm, (unsigned long long)t->ne[0],
                         (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                         (unsigned long long)t->ne[3]);
            goto fail;
        }
    }
    p->n_tensors = n_tensors;

    /* -- names into one pool, key index with duplicate check -- */
    rc = SNUG_ERR_NOMEM;
    p->names = snug_malloc((size_t)pool_bytes + 1);
    if (!p->names || index_init(&p->kv_index, n_kv)) {
        snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory for names", p->path);
        goto fail;
    }
    rc = SNUG_ERR_FORMAT;
    char *w = p->names;
    for (uint64_t i = 0; i < n_kv; i++) {
        memcpy(w, kname[i], (size_t)klen[i]);
        w[klen[i]] = 0;
        p->kv[i].name = w;
        w += klen[i] + 1;
        uint64_t s = index_slot(&p->kv_index, p->kv[i].name, (size_t)klen[i], kv_name_of, p);
        if (p->kv_index.slots[s]) {
            snug_err_set(err, SNUG_ERR_FORMAT, "%s: duplicate key '%s' (entries #%llu and #%llu)",
                         p->path, p->kv[i].name, (unsigned long long)(p->kv_index.slots[s] - 1),
                         (unsigned long long)i);
            goto fail;
        }
        p->kv_index.slots[s] = i + 1;
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        memcpy(w, tname[i], (size_t)tlen[i]);
        w[tlen[i]] = 0;
        p->tensors[i].name = w;
        w += tlen[i] + 1;
    }

    /* -- alignment -- */
    p->alignment = SNUG_GGUF_DEFAULT_ALIGNMENT;
    uint64_t s = index_slot(&p->kv_index, "general.alignment", 17, kv_name_of, p);
    if (p->kv_index.slots[s]) {
        const struct gguf_kv *kv = &p->kv[p->kv_index.slots[s] - 1];
        if (kv->type != SNUG_GGUF_UINT32) {
            snug_err_set(err, SNUG_ERR_FORMAT,
                         "%s: key 'general.alignment' has type %s, expected u32", p->path,
                         type_name(kv->type));
            goto fail;
        }
        uint32_t a;
        memcpy(&a, kv->val, 4);
        if (a == 0 || (a & (a - 1))) {
            snug_err_set(err, SNUG_ERR_FORMAT,
                         "%s: key 'general.alignment' = %u, expected a power of two", p->path, a);
            goto fail;
        }
        p->alignment = a;
    }
    /* Data section: header end rounded up to the alignment. */
    uint64_t pad = (p->alignment - c.pos % p->alignment) % p->alignment;
    if (!snug_add_u64(c.pos, pad, &p->data_off)) p->data_off = UINT64_MAX;
    uint64_t data_bytes = p->data_off <= p->size ? p->size - p->data_off : 0;

    /* -- tensor data: aligned, inside the data section, not overlapping -- */
    for (uint64_t i = 0; i < n_tensors; i++) {
        struct snug_gguf_tensor *t = &p->tensors[i];
        if (t->offset % p->alignment) {
            snug_err_set(err, SNUG_ERR_FORMAT,
                         "%s: tensor '%s': data offset %llu is not a multiple of the alignment %u",
                         p->path, t->name, (unsigned long long)t->offset, p->alignment);
            goto fail;
        }
        uint64_t end;
        if (!snug_add_u64(t->offset, t->n_bytes, &end) || end > data_bytes) {
            snug_err_set(err, SNUG_ERR_FORMAT,
                         "%s: tensor '%s': data [%llu, +%llu bytes) lies outside the data section "
                         "(%llu bytes from file offset %llu): file truncated or offset corrupt",
                         p->path, t->name, (unsigned long long)t->offset,
                         (unsigned long long)t->n_bytes, (unsigned long long)data_bytes,
                         (unsigned long long)p->data_off);
            goto fail;
        }
        t->data = p->base + p->data_off + t->offset;
        spans[i] = (struct span){t->offset, end, i};
    }
    qsort(spans, (size_t)n_tensors, sizeof *spans, span_cmp);
    for (uint64_t i = 1; i < n_tensors; i++) {
        if (spans[i].off < spans[i - 1].end) {
            const struct snug_gguf_tensor *a = &p->tensors[spans[i - 1].idx];
            const struct snug_gguf_tensor *b = &p->tensors[spans[i].idx];
            snug_err_set(err, SNUG_ERR_FORMAT,
                         "%s: tensor '%s' data [%llu, %llu) overlaps tensor '%s' data [%llu, %llu)",
                         p->path, b->name, (unsigned long long)spans[i].off,
                         (unsigned long long)spans[i].end, a->name,
                         (unsigned long long)spans[i - 1].off,
                         (unsigned long long)spans[i - 1].end);
            goto fail;
        }
    }
    rc = SNUG_OK;
fail:
    snug_free(kname);
    snug_free(klen);
    snug_free(tname);
    snug_free(tlen);
    snug_free(spans);
    return rc;
}

/* ---- opening ------------------------------------------------------------------------------ */

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = snug_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* mmap path read-only into p. */
static int part_map(struct gguf_part *p, const char *path, struct snug_err *err) {
    p->path = dup_str(path);
    if (!p->path) return snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory", path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return snug_err_set(err, SNUG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return snug_err_set(err, SNUG_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return snug_err_set(err, SNUG_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "%s: file truncated: the file is empty (expected a GGUF header)", path);
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return snug_err_set(err, SNUG_ERR_IO, "%s: cannot mmap: %s", path, strerror(e));
    p->base = m;
    p->size = (uint64_t)st.st_size;
    p->mapped = true;
    return SNUG_OK;
}

static bool host_little_endian(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Build the merged tensor table and its name index; rejects duplicate names across parts. */
static int build_tensor_table(struct snug_gguf *g, struct snug_err *err) {
    if (g->n_parts == 1) {
        g->tensors = g->parts[0].tensors;
        g->n_tensors = g->parts[0].n_tensors;
    } else {
        uint64_t n = 0;
        for (uint32_t i = 0; i < g->n_parts; i++) n += g->parts[i].n_tensors;
        g->tensors = snug_calloc((size_t)n + 1, sizeof *g->tensors);
        if (!g->tensors)
            return snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory", g->parts[0].path);
        for (uint32_t i = 0; i < g->n_parts; i++)
            for (uint64_t j = 0; j < g->parts[i].n_tensors; j++) {
                g->tensors[g->n_tensors] = g->parts[i].tensors[j];
                g->tensors[g->n_tensors++].file_idx = i;
            }
    }
    if (index_init(&g->tensor_index, g->n_tensors))
        return snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory", g->parts[0].path);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const char *nm = g->tensors[i].name;
        uint64_t s = index_slot(&g->tensor_index, nm, strlen(nm), tensor_name_of, g);
        if (g->tensor_index.slots[s]) {
            const struct snug_gguf_tensor *o = &g->tensors[g->tensor_index.slots[s] - 1];
            return snug_err_set(err, SNUG_ERR_FORMAT,
                                "%s: duplicate tensor name '%s' (in %s and %s)", g->parts[0].path,
                                nm, g->parts[o->file_idx].path,
                                g->parts[g->tensors[i].file_idx].path);
        }
        g->tensor_index.slots[s] = i + 1;
    }
    return SNUG_OK;
}

void snug_gguf_close(struct snug_gguf *g) {
    if (!g) return;
    if (g->n_parts > 1) snug_free(g->tensors);
    snug_free(g->tensor_index.slots);
    for (uint32_t i = 0; i < g->n_parts; i++) part_free(&g->parts[i]);
    snug_free(g->parts);
    snug_free(g);
}

static struct snug_gguf *gguf_alloc(uint32_t n_parts) {
    struct snug_gguf *g = snug_calloc(1, sizeof *g);
    if (!g) return NULL;
    g->parts = snug_calloc(n_parts, sizeof *g->parts);
    if (!g->parts) {
        snug_free(g);
        return NULL;
    }
    g->n_parts = n_parts;
    return g;
}

int snug_gguf_open_memory(struct snug_gguf **out, const void *data, uint64_t size, const char *name,
                          struct snug_err *err) {
    *out = NULL;
    if (!name) name = "<memory>";
    if (!host_little_endian())
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED, "%s: big-endian hosts are not supported",
                            name);
    if (!data && size) return snug_err_set(err, SNUG_ERR_INVALID, "%s: NULL data", name);
    struct snug_gguf *g = gguf_alloc(1);
    if (!g) return snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory", name);
    struct gguf_part *p = &g->parts[0];
    p->path = dup_str(name);
    p->base = data;
    p->size = size;
    int rc = p->path ? part_parse(p, err) : snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
    if (rc == SNUG_OK) rc = build_tensor_table(g, err);
    if (rc != SNUG_OK) {
        snug_gguf_close(g);
        return rc;
    }
    *out = g;
    return SNUG_OK;
}

/* Parse "<prefix>-NNNNN-of-MMMMM.gguf": returns true with the part number, count and prefix
 * length (bytes before "-NNNNN"). The naming is llama.cpp's split convention
 * (llama_split_path: "%s-%05d-of-%05d.gguf"). */
static bool split_name(const char *path, uint32_t *no, uint32_t *count, size_t *prefix_len) {
    size_t n = strlen(path);
    const char *tail = "-00000-of-00000.gguf";
    size_t tl = strlen(tail);
    if (n <= tl) return false;
    const char *s = path + n - tl;
    for (size_t i = 0; i < tl; i++) {
        if (tail[i] == '0') {
            if (s[i] < '0' || s[i] > '9') return false;
        } else if (tail[i] != s[i]) {
            return false;
        }
    }
    *no = (uint32_t)strtoul(s + 1, NULL, 10);
    *count = (uint32_t)strtoul(s + 10, NULL, 10);
    *prefix_len = n - tl;
    return true;
}

/* Read an integer key of part p (any integer type) as uint64; false if absent/not integer. */
static bool part_key_uint(const struct gguf_part *p, const char *key, uint64_t *v, bool *present) {
    uint64_t s = index_slot(&p->kv_index, key, strlen(key), kv_name_of, p);
    *present = p->kv_index.slots[s] != 0;
    if (!*present) return false;
    const struct gguf_kv *kv = &p->kv[p->kv_index.slots[s] - 1];
    uint64_t sz = scalar_bytes(kv->type);
    if (!sz || kv->type == SNUG_GGUF_BOOL || kv->type == SNUG_GGUF_FLOAT32 ||
        kv->type == SNUG_GGUF_FLOAT64)
        return false;
    int64_t x = snug_gguf_arr_i64(kv->type, kv->val, 0);
    if (x < 0 && kv->type != SNUG_GGUF_UINT64) return false;
    *v = kv->type == SNUG_GGUF_UINT64 ? rd_u64(kv->val) : (uint64_t)x;
    return true;
}

int snug_gguf_open(struct snug_gguf **out, const char *path, struct snug_err *err) {
    *out = NULL;
    if (!path) return snug_err_set(err, SNUG_ERR_INVALID, "snug_gguf_open: NULL path");
    if (!host_little_endian())
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED, "%s: big-endian hosts are not supported",
                            path);
    uint32_t no = 0, count = 1;
    size_t prefix_len = 0;
    bool is_split = split_name(path, &no, &count, &prefix_len) && count > 1;
    if (is_split && no != 1)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "%s: this is part %u of a %u-part split model: open the first part "
                            "(-00001-of-%05u.gguf)",
                            path, no, count, count);
    if (is_split && count > 9999)
        return snug_err_set(err, SNUG_ERR_FORMAT, "%s: split count %u is absurd", path, count);
    struct snug_gguf *g = gguf_alloc(is_split ? count : 1);
    if (!g) return snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory", path);
    int rc = SNUG_OK;
    char *part_path = NULL;
    uint64_t total_tensors = 0;
    for (uint32_t i = 0; i < g->n_parts; i++) {
        struct gguf_part *p = &g->parts[i];
        if (i == 0) {
            rc = part_map(p, path, err);
        } else {
            size_t cap = prefix_len + 32;
            snug_free(part_path);
            part_path = snug_malloc(cap);
            if (!part_path) {
                rc = snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory", path);
                goto fail;
            }
            snprintf(part_path, cap, "%.*s-%05u-of-%05u.gguf", (int)prefix_len, path, i + 1, count);
            rc = part_map(p, part_path, err);
            if (rc != SNUG_OK)
                snug_err_prefix(err, "split part %u of %u of %s is missing or unreadable", i + 1,
                                count, path);
        }
        if (rc == SNUG_OK) rc = part_parse(p, err);
        if (rc != SNUG_OK) goto fail;
        total_tensors += p->n_tensors;

        /* Split bookkeeping keys (llama.cpp gguf-split: split.no is 0-based, u16;
         * split.count u16; split.tensors.count i32). */
        uint64_t v;
        bool present;
        bool ok = part_key_uint(p, "split.count", &v, &present);
        if (!is_split) {
            if (present && (!ok || v > 1)) {
                rc = snug_err_set(err, SNUG_ERR_FORMAT,
                                  "%s: key 'split.count' says this is one part of a split model, "
                                  "but the file name does not end in -00001-of-NNNNN.gguf",
                                  path);
                goto fail;
            }
            continue;
        }
        if (!ok || v != count) {
            rc = snug_err_set(err, SNUG_ERR_FORMAT,
                              "%s: key 'split.count' %s, expected %u (from the file name)", p->path,
                              present ? "has another value or type" : "is missing", count);
            goto fail;
        }
        ok = part_key_uint(p, "split.no", &v, &present);
        if (!ok || v != i) {
            rc = snug_err_set(err, SNUG_ERR_FORMAT,
                              "%s: key 'split.no' %s, expected %u (0-based part index)", p->path,
                              present ? "has another value or type" : "is missing", i);
            goto fail;
        }
    }
    if (is_split) {
        uint64_t v;
        bool present;
        if (!part_key_uint(&g->parts[0], "split.tensors.count", &v, &present) ||
            v != total_tensors) {
            rc = snug_err_set(err, SNUG_ERR_FORMAT,
                              "%s: key 'split.tensors.count' %s, expected %llu (tensors found in "
                              "all %u parts)",
                              path, present ? "has another value or type" : "is missing",
                              (unsigned long long)total_tensors, count);
            goto fail;
        }
    }
    rc = build_tensor_table(g, err);
    if (rc != SNUG_OK) goto fail;
    snug_free(part_path);
    *out = g;
    return SNUG_OK;
fail:
    snug_free(part_path);
    snug_gguf_close(g);
    return rc;
}

/* ---- file-level accessors ----------------------------------------------------------------- */

const char *snug_gguf_path(const struct snug_gguf *g) {
    return g->parts[0].path;
}
uint32_t snug_gguf_alignment(const struct snug_gguf *g) {
    return g->parts[0].alignment;
}
uint64_t snug_gguf_file_bytes(const struct snug_gguf *g) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < g->n_parts; i++) n += g->parts[i].size;
    return n;
}

/* ---- metadata ----------------------------------------------------------------------------- */

int64_t snug_gguf_n_kv(const struct snug_gguf *g) {
    return (int64_t)g->parts[0].n_kv;
}

int64_t snug_gguf_find_key(const struct snug_gguf *g, const char *key) {
    const struct gguf_part *p = &g->parts[0];
    uint64_t s = index_slot(&p->kv_index, key, strlen(key), kv_name_of, p);
    return p->kv_index.slots[s] ? (int64_t)p->kv_index.slots[s] - 1 : -1;
}

const char *snug_gguf_key_name(const struct snug_gguf *g, int64_t i) {
    if (i < 0 || (uint64_t)i >= g->parts[0].n_kv) return NULL;
    return g->parts[0].kv[i].name;
}

enum snug_gguf_type snug_gguf_key_type(const struct snug_gguf *g, int64_t i) {
    if (i < 0 || (uint64_t)i >= g->parts[0].n_kv) return (enum snug_gguf_type) - 1;
    return (enum snug_gguf_type)g->parts[0].kv[i].type;
}

int snug_gguf_kv_raw(const struct snug_gguf *g, int64_t i, const void **raw, uint64_t *n_bytes) {
    if (i < 0 || (uint64_t)i >= g->parts[0].n_kv) return SNUG_ERR_INVALID;
    *raw = g->parts[0].kv[i].raw;
    *n_bytes = g->parts[0].kv[i].raw_bytes;
    return SNUG_OK;
}

const char *snug_gguf_type_name(enum snug_gguf_type t) {
    return type_name((uint32_t)t);
}

/* Find a key for a getter; sets a "missing key" error. */
static const struct gguf_kv *need_key(const struct snug_gguf *g, const char *key,
                                      struct snug_err *err) {
    int64_t i = snug_gguf_find_key(g, key);
    if (i < 0) {
        snug_err_set(err, SNUG_ERR_FORMAT, "%s: missing key '%s'", g->parts[0].path, key);
        return NULL;
    }
    return &g->parts[0].kv[i];
}

static int wrong_type(const struct snug_gguf *g, const struct gguf_kv *kv, const char *want,
                      struct snug_err *err) {
    if (kv->type == SNUG_GGUF_ARRAY)
        return snug_err_set(err, SNUG_ERR_FORMAT, "%s: key '%s' is an array of %s, expected %s",
                            g->parts[0].path, kv->name, type_name(kv->elem_type), want);
    return snug_err_set(err, SNUG_ERR_FORMAT, "%s: key '%s' has type %s, expected %s",
                        g->parts[0].path, kv->name, type_name(kv->type), want);
}

/* Read an integer-typed key as a signed/unsigned pair and check it lies in [lo, hi]. */
static int get_int(const struct snug_gguf *g, const char *key, int64_t lo, uint64_t hi,
                   const char *want, int64_t *s_out, uint64_t *u_out, struct snug_err *err) {
    const struct gguf_kv *kv = need_key(g, key, err);
    if (!kv) return SNUG_ERR_FORMAT;
    uint32_t t = kv->type;
    if (!scalar_bytes(t) || t == SNUG_GGUF_BOOL || t == SNUG_GGUF_FLOAT32 || t == SNUG_GGUF_FLOAT64)
        return wrong_type(g, kv, want, err);
    bool neg = false;
    uint64_t u = 0;
    int64_t s = 0;
    if (t == SNUG_GGUF_UINT64) {
        u = rd_u64(kv->val);
        s = (int64_t)u;
    } else {
        s = snug_gguf_arr_i64(t, kv->val, 0);
        neg = s < 0;
        u = (uint64_t)s;
    }
    if (neg ? s < lo : u > hi) {
        if (neg)
            return snug_err_set(err, SNUG_ERR_FORMAT, "%s: key '%s' = %lld does not fit %s",
                                g->parts[0].path, key, (long long)s, want);
        return snug_err_set(err, SNUG_ERR_FORMAT, "%s: key '%s' = %llu does not fit %s",
                            g->parts[0].path, key, (unsigned long long)u, want);
    }
    *s_out = s;
    *u_out = u;
    return SNUG_OK;
}

int snug_gguf_get_u32(const struct snug_gguf *g, const char *key, uint32_t *out,
                      struct snug_err *err) {
    int64_t s;
    uint64_t u;
    int rc = get_int(g, key, 0, UINT32_MAX, "u32", &s, &u, err);
    if (rc == SNUG_OK) *out = (uint32_t)u;
    return rc;
}

int snug_gguf_get_u64(const struct snug_gguf *g, const char *key, uint64_t *out,
                      struct snug_err *err) {
    int64_t s;
    uint64_t u;
    int rc = get_int(g, key, 0, UINT64_MAX, "u64", &s, &u, err);
    if (rc == SNUG_OK) *out = u;
    return rc;
}

int snug_gguf_get_i32(const struct snug_gguf *g, const char *key, int32_t *out,
                      struct snug_err *err) {
    int64_t s;
    uint64_t u;
    int rc = get_int(g, key, INT32_MIN, INT32_MAX, "i32", &s, &u, err);
    if (rc == SNUG_OK) *out = (int32_t)s;
    return rc;
}

int snug_gguf_get_f32(const struct snug_gguf *g, const char *key, float *out,
                      struct snug_err *err) {
    const struct gguf_kv *kv = need_key(g, key, err);
    if (!kv) return SNUG_ERR_FORMAT;
    if (kv->type != SNUG_GGUF_FLOAT32 && kv->type != SNUG_GGUF_FLOAT64)
        return wrong_type(g, kv, "f32", err);
    *out = (float)snug_gguf_arr_f64(kv->type, kv->val, 0);
    return SNUG_OK;
}

int snug_gguf_get_bool(const struct snug_gguf *g, const char *key, bool *out,
                       struct snug_err *err) {
    const struct gguf_kv *kv = need_key(g, key, err);
    if (!kv) return SNUG_ERR_FORMAT;
    if (kv->type != SNUG_GGUF_BOOL) return wrong_type(g, kv, "bool", err);
    *out = kv->val[0] != 0;
    return SNUG_OK;
}

int snug_gguf_get_str(const struct snug_gguf *g, const char *key, struct snug_gguf_str *out,
                      struct snug_err *err) {
    const struct gguf_kv *kv = need_key(g, key, err);
    if (!kv) return SNUG_ERR_FORMAT;
    if (kv->type != SNUG_GGUF_STRING) return wrong_type(g, kv, "str", err);
    out->len = rd_u64(kv->val);
    out->data = (const char *)kv->val + 8;
    return SNUG_OK;
}

int snug_gguf_get_u32_opt(const struct snug_gguf *g, const char *key, uint32_t *out,
                          struct snug_err *err) {
    if (snug_gguf_find_key(g, key) < 0) return SNUG_OK;
    return snug_gguf_get_u32(g, key, out, err);
}

int snug_gguf_get_f32_opt(const struct snug_gguf *g, const char *key, float *out,
                          struct snug_err *err) {
    if (snug_gguf_find_key(g, key) < 0) return SNUG_OK;
    return snug_gguf_get_f32(g, key, out, err);
}

int snug_gguf_get_bool_opt(const struct snug_gguf *g, const char *key, bool *out,
                           struct snug_err *err) {
    if (snug_gguf_find_key(g, key) < 0) return SNUG_OK;
    return snug_gguf_get_bool(g, key, out, err);
}

/* Arrays: numeric element data is handed out in place; string arrays give the address of the
 * first element's length field in *data (use snug_gguf_arr_str); nested arrays are refused. */
int snug_gguf_get_arr(const struct snug_gguf *g, const char *key, enum snug_gguf_type *elem_type,
                      uint64_t *n, const void **data, struct snug_err *err) {
    const struct gguf_kv *kv = need_key(g, key, err);
    if (!kv) return SNUG_ERR_FORMAT;
    if (kv->type != SNUG_GGUF_ARRAY) return wrong_type(g, kv, "an array", err);
    if (kv->elem_type == SNUG_GGUF_ARRAY)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "%s: key '%s' is an array of arrays (nested arrays are not supported)",
                            g->parts[0].path, key);
    *elem_type = (enum snug_gguf_type)kv->elem_type;
    *n = kv->count;
    *data = kv->val;
    return SNUG_OK;
}

int snug_gguf_arr_str(const struct snug_gguf *g, const char *key, uint64_t i,
                      struct snug_gguf_str *out) {
    int64_t k = snug_gguf_find_key(g, key);
    if (k < 0) return SNUG_ERR_FORMAT;
    const struct gguf_kv *kv = &g->parts[0].kv[k];
    if (kv->type != SNUG_GGUF_ARRAY || kv->elem_type != SNUG_GGUF_STRING) return SNUG_ERR_FORMAT;
    if (i >= kv->count) return SNUG_ERR_INVALID;
    out->len = rd_u64(kv->str[i]);
    out->data = (const char *)kv->str[i] + 8;
    return SNUG_OK;
}

int64_t snug_gguf_arr_i64(enum snug_gguf_type elem_type, const void *data, uint64_t i) {
    const uint8_t *p = data;
    switch (elem_type) {
    case SNUG_GGUF_UINT8:
    case SNUG_GGUF_BOOL:
        return p[i];
    case SNUG_GGUF_INT8:
        return (int8_t)p[i];
    case SNUG_GGUF_UINT16: {
        uint16_t v;
        memcpy(&v, p + 2 * i, 2);
        return v;
    }
    case SNUG_GGUF_INT16: {
        int16_t v;
        memcpy(&v, p + 2 * i, 2);
        return v;
    }
    case SNUG_GGUF_UINT32: {
        uint32_t v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    case SNUG_GGUF_INT32: {
        int32_t v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    case SNUG_GGUF_UINT64:
    case SNUG_GGUF_INT64: {
        int64_t v;
        memcpy(&v, p + 8 * i, 8);
        return v;
    }
    case SNUG_GGUF_FLOAT32:
    case SNUG_GGUF_FLOAT64: {
        double d = snug_gguf_arr_f64(elem_type, data, i);
        if (!(d >= -9.2e18 && d <= 9.2e18)) return 0; /* NaN / out of range */
        return (int64_t)d;
    }
    default:
        return 0;
    }
}

double snug_gguf_arr_f64(enum snug_gguf_type elem_type, const void *data, uint64_t i) {
    const uint8_t *p = data;
    if (elem_type == SNUG_GGUF_FLOAT32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    if (elem_type == SNUG_GGUF_FLOAT64) {
        double d;
        memcpy(&d, p + 8 * i, 8);
        return d;
    }
    if (elem_type == SNUG_GGUF_UINT64) return (double)rd_u64(p + 8 * i);
    return (double)snug_gguf_arr_i64(elem_type, data, i);
}

/* ---- tensors ------------------------------------------------------------------------------ */

int64_t snug_gguf_n_tensors(const struct snug_gguf *g) {
    return (int64_t)g->n_tensors;
}

const struct snug_gguf_tensor *snug_gguf_tensor(const struct snug_gguf *g, int64_t i) {
    if (i < 0 || (uint64_t)i >= g->n_tensors) return NULL;
    return &g->tensors[i];
}

const struct snug_gguf_tensor *snug_gguf_find_tensor(const struct snug_gguf *g, const char *name) {
    uint64_t s = index_slot(&g->tensor_index, name, strlen(name), tensor_name_of, g);
    return g->tensor_index.slots[s] ? &g->tensors[g->tensor_index.slots[s] - 1] : NULL;
}

int snug_gguf_key_arr_info(const struct snug_gguf *g, int64_t i, enum snug_gguf_type *elem_type,
                           uint64_t *n) {
    if (i < 0 || (uint64_t)i >= g->parts[0].n_kv) return SNUG_ERR_INVALID;
    const struct gguf_kv *kv = &g->parts[0].kv[i];
    if (kv->type != SNUG_GGUF_ARRAY) return SNUG_ERR_INVALID;
    *elem_type = (enum snug_gguf_type)kv->elem_type;
    *n = kv->count;
    return SNUG_OK;
}

uint32_t snug_gguf_n_files(const struct snug_gguf *g) {
    return g->n_parts;
}
