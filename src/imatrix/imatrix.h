/* imatrix.h — importance matrices: llama.cpp's per-column mean squared activations of every
 * weight matrix, read from its imatrix files, for `snug quantize --imatrix`.
 *
 * Formats (facts from llama.cpp's common/imatrix-loader.cpp and tools/imatrix, cited, not
 * copied):
 *   GGUF (current): general.type = "imatrix", imatrix.datasets (string array),
 *     imatrix.chunk_count, imatrix.chunk_size (u32); per weight tensor W two F32 tensors
 *     "W.in_sum2" (Σ x² per input column, per expert: ne = [n_cols, n_expert]) and "W.counts"
 *     (activations counted, one per expert); an optional "W.in_sum" (Σ x). The importance of a
 *     column is in_sum2 / counts of its expert (counts rounded to integers; 0 counts give 1).
 *   legacy .dat: i32 n_entries, then per entry i32 len, name[len], i32 ncall, i32 nval,
 *     f32 values[nval] (already mean squares × ncall); optional trailing i32 chunk count,
 *     i32 len, dataset name. Importance = value / ncall (value as is when ncall is 0).
 * Computing one (imatrix_collect.c, `snug imatrix`): a matmul observer on a context sums x² and
 * x per input column of every weight product and counts the rows; written in the GGUF form.
 * Invariant: a loaded matrix holds only finite, validated entries; everything returned is
 * borrowed from it. Read next: src/cli/cmd_quantize.c (the reader's user),
 * src/cli/cmd_imatrix.c (the collector's). */
#ifndef SNUG_IMATRIX_H
#define SNUG_IMATRIX_H

#include "snug.h"

#include <stdbool.h>
#include <stdint.h>

struct snug_imatrix;

/* Load an imatrix file (GGUF or legacy, told apart by the GGUF magic). Errors name the file
 * and what is wrong with it. */
int snug_imatrix_load(struct snug_imatrix **out, const char *path, struct snug_err *err);
/* The same from memory (`name` is used in messages; `data` is not kept after the call). */
int snug_imatrix_load_memory(struct snug_imatrix **out, const void *data, uint64_t size,
                             const char *name, struct snug_err *err);
void snug_imatrix_free(struct snug_imatrix *m);

/* The importance values of a weight tensor (n_cols × n_expert floats, expert-major), or NULL
 * when the file has no entry of that name. */
const float *snug_imatrix_find(const struct snug_imatrix *m, const char *tensor_name,
                               uint64_t *n_values);
int64_t snug_imatrix_n_entries(const struct snug_imatrix *m);
uint32_t snug_imatrix_chunk_count(const struct snug_imatrix *m);
/* The first dataset name ("" when the file names none). */
const char *snug_imatrix_dataset(const struct snug_imatrix *m);

/* ---- computing one ------------------------------------------------------------------------ */
struct snug_model;
struct snug_mm_observer;
struct snug_imatrix_collector;

/* Zeroed sums for every weight of the model (blk.* tensors; per expert for 3-D ones). */
int snug_imatrix_collector_new(struct snug_imatrix_collector **out, const struct snug_model *m,
                               struct snug_err *err);
void snug_imatrix_collector_free(struct snug_imatrix_collector *c);
/* The observer to set on a context (snug_ctx_set_mm_observer, src/model/model.h); borrowed. */
const struct snug_mm_observer *snug_imatrix_collector_observer(struct snug_imatrix_collector *c);
/* Weights multiplied at least once so far (the entries a write holds). */
int64_t snug_imatrix_collector_n_entries(const struct snug_imatrix_collector *c);
/* A weight's rows counted so far, one per matrix (expert); NULL (and *n_mat 0) if it was never
 * multiplied. */
const int64_t *snug_imatrix_collector_counts(const struct snug_imatrix_collector *c,
                                             const char *tensor_name, int64_t *n_mat);
/* Its Σ x² per column (n_mat × n_in floats, expert-major); NULL if never multiplied. */
const float *snug_imatrix_collector_sum2(const struct snug_imatrix_collector *c,
                                         const char *tensor_name, int64_t *n_values);
/* Write the GGUF imatrix llama-imatrix writes (general.type "imatrix", imatrix.datasets =
 * [dataset], imatrix.chunk_count = max over counts of counts/chunk_size rounded,
 * imatrix.chunk_size; W.in_sum2, W.counts, W.in_sum per weight, names sorted). Refuses
 * non-finite sums. */
int snug_imatrix_collector_write(const struct snug_imatrix_collector *c, const char *path,
                                 const char *dataset, uint32_t chunk_size, struct snug_err *err);

#endif
