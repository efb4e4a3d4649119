/* quant.h — tensor element types: block layouts, fp16/bf16 conversion, dequantize, dot product
 * and quantize for every type snug computes with.
 *
 * Type ids and block layouts are ggml's (ggml/include/ggml.h `enum ggml_type` and
 * ggml/src/ggml-common.h block structs, read, not copied): they are on-disk values, so the
 * numbering here must never change. A "block" is block_elems consecutive elements of one row
 * packed into block_bytes; rows are a whole number of blocks.
 *
 * Reference kernels (quant_ref.c) are plain scalar C and define the numbers; faster versions
 * are tested against them. Invariants: no function here allocates; every function takes the
 * element count n, which must be a multiple of the type's block_elems.
 * Read next: quant_ref.c (the block formats, with citations), src/backend/cpu/ops.h. */
#ifndef SNUG_QUANT_H
#define SNUG_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum snug_dtype {
    SNUG_DTYPE_F32 = 0,
    SNUG_DTYPE_F16 = 1,
    SNUG_DTYPE_Q4_0 = 2,
    SNUG_DTYPE_Q4_1 = 3,
    SNUG_DTYPE_Q5_0 = 6,
    SNUG_DTYPE_Q5_1 = 7,
    SNUG_DTYPE_Q8_0 = 8,
    SNUG_DTYPE_Q8_1 = 9,
    SNUG_DTYPE_Q2_K = 10,
    SNUG_DTYPE_Q3_K = 11,
    SNUG_DTYPE_Q4_K = 12,
    SNUG_DTYPE_Q5_K = 13,
    SNUG_DTYPE_Q6_K = 14,
    SNUG_DTYPE_Q8_K = 15,
    SNUG_DTYPE_IQ2_XXS = 16,
    SNUG_DTYPE_IQ2_XS = 17,
    SNUG_DTYPE_IQ3_XXS = 18,
    SNUG_DTYPE_IQ1_S = 19,
    SNUG_DTYPE_IQ4_NL = 20,
    SNUG_DTYPE_IQ3_S = 21,
    SNUG_DTYPE_IQ2_S = 22,
    SNUG_DTYPE_IQ4_XS = 23,
    SNUG_DTYPE_I8 = 24,
    SNUG_DTYPE_I16 = 25,
    SNUG_DTYPE_I32 = 26,
    SNUG_DTYPE_I64 = 27,
    SNUG_DTYPE_F64 = 28,
    SNUG_DTYPE_IQ1_M = 29,
    SNUG_DTYPE_BF16 = 30,
    SNUG_DTYPE_TQ1_0 = 34,
    SNUG_DTYPE_TQ2_0 = 35,
    SNUG_DTYPE_MXFP4 = 39,
    SNUG_DTYPE_COUNT = 40, /* one past the largest id */
};

struct snug_dtype_info {
    const char *name;     /* ggml's name, e.g. "q4_K" */
    uint32_t block_elems; /* elements per block */
    uint32_t block_bytes; /* bytes per block */
    bool computable;      /* snug can dequantize / dot / quantize it */
};

/* Info for a ggml type id, or NULL for an id that no ggml version defines. Types that exist
 * but that snug does not compute with have computable = false. */
const struct snug_dtype_info *snug_dtype_info(uint32_t type);
/* Parse a type name, case-insensitive ("q4_k", "Q8_0", "f16"). Returns -1 if unknown. */
int snug_dtype_from_name(const char *name);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size or type unknown. */
uint64_t snug_dtype_row_bytes(uint32_t type, uint64_t n);

/* ---- scalar conversions ------------------------------------------------------------------- */
float snug_f16_to_f32(uint16_t h);
uint16_t snug_f32_to_f16(float f); /* round to nearest even, IEEE half */
float snug_bf16_to_f32(uint16_t h);
uint16_t snug_f32_to_bf16(float f); /* round to nearest even */

/* ---- row kernels (reference semantics; dispatch to the fastest tested version) ------------ */
/* dst[0..n) = dequantized src row. */
void snug_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);
/* Σ dequant(w)[i] · x[i] over one row of n elements, accumulated in float32 (or better). */
float snug_dot_row(uint32_t type, const void *w, const float *x, int64_t n);
/* Quantize n floats into dst (row_bytes(type, n) bytes). `imatrix` (may be NULL) weights the
 * per-element error the K-quant searches minimise. Returns false for a non-computable type. */
bool snug_quantize_row(uint32_t type, const float *src, void *dst, int64_t n, const float *imatrix);

/* The scalar reference versions, always available (tests compare the fast ones to these). */
void snug_dequantize_row_ref(uint32_t type, const void *src, float *dst, int64_t n);
float snug_dot_row_ref(uint32_t type, const void *w, const float *x, int64_t n);

#endif /* SNUG_QUANT_H */
