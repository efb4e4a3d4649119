/* gguf.h — validating reader and streaming writer for GGUF version 3 (llama.cpp's file format).
 *
 * File layout (facts from ggml's gguf.h / docs/gguf.md, cited, not copied):
 *   u32 magic "GGUF" | u32 version (3) | u64 n_tensors | u64 n_kv
 *   n_kv × { gguf_string key | u32 value_type | value }
 *   n_tensors × { gguf_string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
 *   padding to `general.alignment` (default 32) | tensor data (offsets relative to this start)
 *   gguf_string = u64 len | len bytes (UTF-8, not NUL-terminated); all values little-endian.
 *   Array value = u32 elem_type | u64 count | count elements.
 *
 * The reader mmaps the file(s) and validates everything before handing out a view: every
 * count, offset, product and dimension is checked against the file size with overflow-checked
 * arithmetic, tensor data must lie inside the data section, be aligned, and not overlap
 * another tensor. Split files (`name-00001-of-0000N.gguf`, keys `split.no`, `split.count`,
 * `split.tensors.count`) are opened together as one model: open the first part.
 * Owned: the mappings and the key/tensor tables; everything returned is borrowed and lives
 * until snug_gguf_close. Read next: src/quant/quant.h (what the tensor bytes mean).
 */
#ifndef SNUG_GGUF_H
#define SNUG_GGUF_H

#include "snug.h"

#include <stdbool.h>
#include <stdint.h>

enum snug_gguf_type {
    SNUG_GGUF_UINT8 = 0,
    SNUG_GGUF_INT8 = 1,
    SNUG_GGUF_UINT16 = 2,
    SNUG_GGUF_INT16 = 3,
    SNUG_GGUF_UINT32 = 4,
    SNUG_GGUF_INT32 = 5,
    SNUG_GGUF_FLOAT32 = 6,
    SNUG_GGUF_BOOL = 7,
    SNUG_GGUF_STRING = 8,
    SNUG_GGUF_ARRAY = 9,
    SNUG_GGUF_UINT64 = 10,
    SNUG_GGUF_INT64 = 11,
    SNUG_GGUF_FLOAT64 = 12,
};

#define SNUG_GGUF_MAX_DIMS          4
#define SNUG_GGUF_DEFAULT_ALIGNMENT 32

/* A string inside the mapping: `len` bytes at `data`, NOT NUL-terminated. */
struct snug_gguf_str {
    uint64_t len;
    const char *data;
};

struct snug_gguf_tensor {
    const char *name;                /* NUL-terminated copy owned by the reader */
    uint32_t n_dims;                 /* 1..4 */
    uint64_t ne[SNUG_GGUF_MAX_DIMS]; /* elements per dim, fastest first; unused dims = 1 */
    uint32_t type;                   /* ggml type id (enum snug_dtype in quant.h) */
    uint64_t n_elems;                /* product of ne */
    uint64_t n_bytes;                /* bytes of data (row size × rows) */
    uint64_t offset;                 /* offset inside its file's data section */
    uint32_t file_idx;               /* which split part holds the data (0 for a single file) */
    const void *data;                /* borrowed pointer into the mapping */
};

struct snug_gguf;

/* Open and validate a GGUF file (and, for `*-00001-of-0000N.gguf`, all its parts).
 * On failure *out is NULL and err names the file, the key or tensor, and what was expected. */
int snug_gguf_open(struct snug_gguf **out, const char *path, struct snug_err *err);
void snug_gguf_close(struct snug_gguf *g);

/* Validate a GGUF image held in memory (no file, no split parts). `data` must outlive the
 * handle. This is what the fuzz target drives. */
int snug_gguf_open_memory(struct snug_gguf **out, const void *data, uint64_t size, const char *name,
                          struct snug_err *err);

const char *snug_gguf_path(const struct snug_gguf *g); /* the path given to open */
uint32_t snug_gguf_alignment(const struct snug_gguf *g);
uint64_t snug_gguf_file_bytes(const struct snug_gguf *g); /* total size over all parts */

/* ---- metadata ----------------------------------------------------------------------------- */
int64_t snug_gguf_n_kv(const struct snug_gguf *g);
int64_t snug_gguf_find_key(const struct snug_gguf *g, const char *key); /* -1 if absent */
const char *snug_gguf_key_name(const struct snug_gguf *g, int64_t i);   /* NUL-terminated */
enum snug_gguf_type snug_gguf_key_type(const struct snug_gguf *g, int64_t i);

/* Typed getters by key name. Integers accept any integer type whose value fits; floats accept
 * FLOAT32 and FLOAT64. A missing key, a wrong type or an out-of-range value returns
 * SNUG_ERR_FORMAT with a message naming the file, the key, the expected and the actual type.
 * The `_opt` forms return SNUG_OK and leave *out untouched when the key is absent. */
int snug_gguf_get_u32(const struct snug_gguf *g, const char *key, uint32_t *out,
                      struct snug_err *err);
int snug_gguf_get_u64(const struct snug_gguf *g, const char *key, uint64_t *out,
                      struct snug_err *err);
int snug_gguf_get_i32(const struct snug_gguf *g, const char *key, int32_t *out,
                      struct snug_err *err);
int snug_gguf_get_f32(const struct snug_gguf *g, const char *key, float *out, struct snug_err *err);
int snug_gguf_get_bool(const struct snug_gguf *g, const char *key, bool *out, struct snug_err *err);
int snug_gguf_get_str(const struct snug_gguf *g, const char *key, struct snug_gguf_str *out,
                      struct snug_err *err);
int snug_gguf_get_u32_opt(const struct snug_gguf *g, const char *key, uint32_t *out,
                          struct snug_err *err);
int snug_gguf_get_f32_opt(const struct snug_gguf *g, const char *key, float *out,
                          struct snug_err *err);
int snug_gguf_get_bool_opt(const struct snug_gguf *g, const char *key, bool *out,
                           struct snug_err *err);

/* Arrays. For numeric element types *data points at `n` packed little-endian elements inside
 * the mapping (possibly unaligned: read with memcpy or the helpers below). For STRING arrays
 * use snug_gguf_arr_str (the reader indexes string arrays at open, so it is O(1)); *data then
 * points at the first element's encoding. An array of arrays is validated at open but refused
 * here with SNUG_ERR_UNSUPPORTED ("nested arrays are not supported"). */
int snug_gguf_get_arr(const struct snug_gguf *g, const char *key, enum snug_gguf_type *elem_type,
                      uint64_t *n, const void **data, struct snug_err *err);
/* String i of a string array: SNUG_OK, SNUG_ERR_FORMAT (no such string-array key) or
 * SNUG_ERR_INVALID (i out of range). No message: callers check the key with get_arr first. */
int snug_gguf_arr_str(const struct snug_gguf *g, const char *key, uint64_t i,
                      struct snug_gguf_str *out);
/* Element i of a numeric array as int64 / double (converting any integer / float type). */
int64_t snug_gguf_arr_i64(enum snug_gguf_type elem_type, const void *data, uint64_t i);
double snug_gguf_arr_f64(enum snug_gguf_type elem_type, const void *data, uint64_t i);

/* The encoded value of key i (the bytes after its type field; for arrays: element type, count,
 * elements), borrowed from the mapping. Used to copy entries verbatim. */
int snug_gguf_kv_raw(const struct snug_gguf *g, int64_t i, const void **raw, uint64_t *n_bytes);
/* Short name of a metadata type ("u32", "str", "array", ...; "unknown" outside 0..12). */
const char *snug_gguf_type_name(enum snug_gguf_type t);
/* Element type and count of array key i (returns SNUG_ERR_INVALID when it is not an array). */
int snug_gguf_key_arr_info(const struct snug_gguf *g, int64_t i, enum snug_gguf_type *elem_type,
                           uint64_t *n);
/* Number of files the model was opened from (1, or N for a split model). */
uint32_t snug_gguf_n_files(const struct snug_gguf *g);

/* ---- tensors ------------------------------------------------------------------------------ */
int64_t snug_gguf_n_tensors(const struct snug_gguf *g);
const struct snug_gguf_tensor *snug_gguf_tensor(const struct snug_gguf *g, int64_t i);
const struct snug_gguf_tensor *snug_gguf_find_tensor(const struct snug_gguf *g,
                                                     const char *name); /* NULL if absent */

/* ---- writer ------------------------------------------------------------------------------- */
/* Streaming writer: add all metadata and tensor infos first, then write each tensor's bytes
 * in the order the infos were added (so a 27B model never needs to be in memory), then close.
 * Tensor data offsets are aligned to `general.alignment` (32 unless set with add_u32). */
struct snug_gguf_writer;
int snug_gguf_writer_open(struct snug_gguf_writer **out, const char *path, struct snug_err *err);
int snug_gguf_writer_add_u32(struct snug_gguf_writer *w, const char *key, uint32_t v);
int snug_gguf_writer_add_i32(struct snug_gguf_writer *w, const char *key, int32_t v);
int snug_gguf_writer_add_u64(struct snug_gguf_writer *w, const char *key, uint64_t v);
int snug_gguf_writer_add_f32(struct snug_gguf_writer *w, const char *key, float v);
int snug_gguf_writer_add_bool(struct snug_gguf_writer *w, const char *key, bool v);
int snug_gguf_writer_add_str(struct snug_gguf_writer *w, const char *key, const char *v);
/* Any fixed-size scalar (u8, i8, u16, i16, u32, i32, f32, bool, u64, i64, f64): the value's
 * little-endian bytes at v. */
int snug_gguf_writer_add_scalar(struct snug_gguf_writer *w, const char *key,
                                enum snug_gguf_type type, const void *v);
/* Numeric array: n elements of elem_type, packed little-endian at data (copied). */
int snug_gguf_writer_add_arr(struct snug_gguf_writer *w, const char *key,
                             enum snug_gguf_type elem_type, uint64_t n, const void *data);
/* String array: n strings given as (ptr, len) pairs (copied). */
int snug_gguf_writer_add_arr_str(struct snug_gguf_writer *w, const char *key, uint64_t n,
                                 const struct snug_gguf_str *strs);
/* Copy one metadata entry (any type, arrays included) from a reader. */
int snug_gguf_writer_copy_kv(struct snug_gguf_writer *w, const struct snug_gguf *src, int64_t i);
int snug_gguf_writer_add_tensor(struct snug_gguf_writer *w, const char *name, uint32_t type,
                                uint32_t n_dims, const uint64_t *ne);
/* Append bytes of the next tensor (may be called several times per tensor, in pieces; the
 * writer checks that each tensor receives exactly its size before the next begins). */
int snug_gguf_writer_write(struct snug_gguf_writer *w, const void *data, uint64_t n_bytes);
/* Finish: checks every tensor was written in full, flushes and closes. Frees w either way. */
int snug_gguf_writer_close(struct snug_gguf_writer *w, struct snug_err *err);
/* Abandon a writer (on an error path): frees it and removes the partial file. */
void snug_gguf_writer_abort(struct snug_gguf_writer *w);
/* The last error of a writer call that returned non-zero. */
const char *snug_gguf_writer_error(const struct snug_gguf_writer *w);

#endif /* SNUG_GGUF_H */
