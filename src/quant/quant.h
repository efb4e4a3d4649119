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
    bool computable;      /* snug can dequantize and dot it (load and run files with it) */
    bool quantizable;     /* snug_quantize_row can write it (implies computable) */
};

/* Info for a ggml type id, or NULL for an id that no ggml version defines. Types that exist
 * but that snug does not compute with have computable = false; the low-bit types (Q2_K, Q3_K,
 * the IQ family, TQ1_0/TQ2_0, MXFP4) are computable but not yet quantizable. */
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
 * per-element error the K-quant and i-quant searches minimise; IQ2_XXS/XS, IQ1_S (which
 * llama.cpp never quantizes without one) take uniform importance when it is NULL — callers
 * quantizing real weights refuse that (snug_recipe_needs_imatrix). Returns false for a type
 * that is not quantizable (see snug_dtype_info), a length that is not a whole number of
 * blocks, or when the i-quant search tables could not be allocated (first use only). */
bool snug_quantize_row(uint32_t type, const float *src, void *dst, int64_t n, const float *imatrix);

/* The scalar reference versions, always available (tests compare the fast ones to these). */
void snug_dequantize_row_ref(uint32_t type, const void *src, float *dst, int64_t n);
float snug_dot_row_ref(uint32_t type, const void *w, const float *x, int64_t n);

/* ---- run-time CPU dispatch (quant_act.c) ------------------------------------------------- */
/* Kernel sets: the scalar reference, AVX2 (+FMA, F16C) and AVX-512 (F, BW, VL, VNNI). The
 * level is detected once (cpuid) on first use; the environment variable SNUG_CPU=scalar|avx2|
 * avx512 caps it (a level the CPU lacks is never used). Thread-safe to query at any time. */
enum snug_cpu_level { SNUG_CPU_SCALAR = 0, SNUG_CPU_AVX2 = 1, SNUG_CPU_AVX512 = 2 };
int snug_cpu_level(void);
/* Force a level (tests, benchmarks); it is capped at what the CPU has. Returns the level now in
 * effect. Not meant to be called while other threads run kernels. */
int snug_cpu_set_level(int level);
const char *snug_cpu_level_name(int level);

/* ---- int8 activations (quant_act.c) ------------------------------------------------------- */
/* Matrix products quantize each activation row once to 8 bits and take integer dot products
 * with the weight blocks, as llama.cpp does. The activation format depends on the weight type:
 *   SNUG_DTYPE_Q8_0 — blocks of 32 int8 with a float scale (for Q8_0 weights),
 *   SNUG_DTYPE_Q8_K — blocks of 256 int8, a float scale and sums per 16 (Q3_K, Q4_K, Q5_K,
 *                     Q6_K, IQ4_XS),
 *   SNUG_DTYPE_F32  — the activations stay float32 (F32, F16, BF16 and every other type).
 * snug_act_dot's result equals Σ dequant(w)·dequant(xq) up to float rounding (the integer
 * parts are exact). */
uint32_t snug_act_type(uint32_t wtype);
/* Whether matrix products should use the int8 path for this weight type (accuracy policy in
 * quant_act.c; env SNUG_ACT8=all|none overrides). When false they dequantize weight rows and
 * dot them with float activations. */
bool snug_act_int8_use(uint32_t wtype);
/* Whether decode-sized products (a few rows) of this weight type should run on 14-bit
 * activations held as two int8 planes (snug_act_quantize_wide) instead of float activations:
 * Q6_K by default (env SNUG_ACT_WIDE=none|all; all adds Q8_0). Never true where snug_act_int8_use
 * is. */
bool snug_act_wide_use(uint32_t wtype);
/* One row of n activations as q = round(x / dx) (|q| ≤ 8191, dx per block of the type's
 * activation format) split exactly into two activation rows of that format: the high plane
 * floor(q / 128) with scale 128·dx at xq, the low plane q mod 128 with scale dx at xq + xs.
 * snug_act_dot of a weight row with both rows, summed, is the dot with the 14-bit values. */
void snug_act_quantize_wide(uint32_t wtype, const float *x, void *xq, size_t xs, int64_t n);
/* Bytes of one quantized activation row of n elements (n · 4 for the float format). */
size_t snug_act_row_bytes(uint32_t wtype, int64_t n);
/* Quantize (or, for the float format, copy) one row of n activations into xq. */
void snug_act_quantize(uint32_t wtype, const float *x, void *xq, int64_t n);
/* Most activation rows one snug_act_dot call takes. */
#define SNUG_ACT_MAX_ROWS 8
/* out[c] = dot(w row, activation row c) for c < nc (1..8); activation row c is at xq + c·xs
 * bytes. For the float format the rows are plain float32 and any n works for F32/F16/BF16;
 * other float-format types require n to be a multiple of their block. */
void snug_act_dot(uint32_t wtype, const void *w, const void *xq, size_t xs, int nc, int64_t n,
                  float *out);
/* Two weight rows w0, w1 against ONE quantized activation row (the decode form): out[0], out[1]
 * are bit-identical to snug_act_dot(wtype, w0 / w1, xq, 0, 1, n, ...); at the AVX-512 level
 * Q4_K runs both rows in one pass (shared activation loads, two memory streams in flight). */
void snug_act_dot2(uint32_t wtype, const void *w0, const void *w1, const void *xq, int64_t n,
                   float out[2]);
/* Float block product for prompts on float activations: y[t·ys + r] = Σ_k w[r·ws + k] ·
 * x[t·xs + k] for r < nr (1..SNUG_FGEMM_NR) weight rows and t < nt (1..SNUG_FGEMM_NT)
 * activation rows, n elements (any n), strides in floats. Each output element is formed the
 * same way whatever nr, nt and its place in the block (so results do not depend on tiling).
 * snug_fgemm_ref is the scalar reference. */
#define SNUG_FGEMM_NR 4
#define SNUG_FGEMM_NT 6
void snug_fgemm(const float *w, size_t ws, int nr, const float *x, size_t xs, int nt, int64_t n,
                float *y, size_t ys);
void snug_fgemm_ref(const float *w, size_t ws, int nr, const float *x, size_t xs, int nt, int64_t n,
                    float *y, size_t ys);
/* Float block product on transposed activations, for prompts on float activations:
 * y[t·ys + r] = Σ_k w[r·ws + k] · xt[k·xts + t] for r < nr (1..SNUG_TGEMM_MR) weight rows and
 * t < nt (any count) activation columns, n elements (any n), strides in floats. xt holds the
 * activations transposed (row k = element k of every token); each row must be readable up to
 * nt rounded up to SNUG_TGEMM_PAD floats (pad with zeros). Every output element is one
 * sequential chain of fused multiply-adds over k = 0..n-1 (fmaf order), so all levels give the
 * same bits and results do not depend on tiling or threads. snug_tgemm_ref is the reference. */
#define SNUG_TGEMM_MR  8
#define SNUG_TGEMM_PAD 16
void snug_tgemm(const float *w, size_t ws, int nr, const float *xt, size_t xts, int nt, int64_t n,
                float *y, size_t ys);
void snug_tgemm_ref(const float *w, size_t ws, int nr, const float *xt, size_t xts, int nt,
                    int64_t n, float *y, size_t ys);
/* Prompt products of Q4_K and Q6_K weights on 16-bit activations (quant_i16.c; AVX-512
 * only): rows prepared once per tile into int16 products plus per-super-block floats
 * (snug_i16_prep, snug_i16_row_bytes each), activations quantized per token and super-block
 * to |q| ≤ 8191 and transposed into a tile of ttpad columns (a multiple of SNUG_TGEMM_PAD:
 * snug_i16_quant_x per token, snug_i16_pad_x for the columns past the last), then y[t·ys + r]
 * = the row·token dot for r < nr (1..SNUG_TGEMM_MR), t < nt. Integer sums are exact and the
 * float steps fixed per output: snug_i16_gemm equals snug_i16_gemm_ref bit for bit. n must be
 * a multiple of 256. snug_i16_supports(type) says whether the vector kernel exists at the
 * current level for that type (else callers use the float path). */
bool snug_i16_supports(uint32_t wtype);
size_t snug_i16_row_bytes(int64_t n);
size_t snug_i16_x_bytes(int64_t n, int ttpad);
void snug_i16_prep(uint32_t wtype, const void *src, void *dst, int64_t n);
void snug_i16_prep_q4k_ref(const void *src, void *dst, int64_t n);
void snug_i16_prep_q6k_ref(const void *src, void *dst, int64_t n);
void snug_i16_quant_x(const float *x, int64_t n, int t, int ttpad, void *xt);
void snug_i16_quant_x_ref(const float *x, int64_t n, int t, int ttpad, void *xt);
void snug_i16_pad_x(int64_t n, int t0, int ttpad, void *xt);
void snug_i16_gemm(uint32_t wtype, const void *wp, size_t wps, int nr, const void *xt, int ttpad,
                   int nt, int64_t n, float *y, size_t ys);
void snug_i16_gemm_ref(uint32_t wtype, const void *wp, size_t wps, int nr, const void *xt,
                       int ttpad, int nt, int64_t n, float *y, size_t ys);
/* Prompt products of Q4_K, Q5_K, IQ4_XS and Q3_K weights on 8-bit activations (quant_i16.c; AVX-512
 * VNNI only): the same arrangement as snug_i16_* with vpdpbusd (64 multiply-adds per
 * instruction instead of 32). Tile: per token and super-block dx = amax / 127 and int8
 * round(x / dx) (the A256 values), in quads (k .. k+3) per token, then the dx and the per-32
 * sums. Q4_K prepared row: the 4-bit values as bytes, then per super-block nine floats (d,
 * dmin·m_j) and the eight scales as int32; float steps those of the i16 Q4_K product; Q5_K the
 * same with 5-bit values. IQ4_XS
 * and Q3_K (the signed form: vpdpbusd needs one unsigned operand, so the tile's bytes are read
 * as x + 128 and the weights stay signed): prepared row of signed bytes (IQ4_XS the level,
 * Q3_K −q·scale: the scale folded in), then per super-block d, the int32 correction
 * 128·Σ scale·byte, and for IQ4_XS the eight scales. Integer sums exact: snug_i8_gemm equals
 * snug_i8_gemm_ref bit for bit. snug_i8_row_bytes fits every type. Used where the accuracy
 * policy gives the type int8 activations (snug_act_int8_use). */
bool snug_i8_supports(uint32_t wtype);
size_t snug_i8_row_bytes(int64_t n);
size_t snug_i8_x_bytes(int64_t n, int ttpad);
void snug_i8_prep(uint32_t wtype, const void *src, void *dst, int64_t n);
void snug_i8_prep_ref(uint32_t wtype, const void *src, void *dst, int64_t n);
void snug_i8_quant_x(const float *x, int64_t n, int t, int ttpad, void *xt);
void snug_i8_quant_x_ref(const float *x, int64_t n, int t, int ttpad, void *xt);
void snug_i8_pad_x(int64_t n, int t0, int ttpad, void *xt);
void snug_i8_gemm(uint32_t wtype, const void *wp, size_t wps, int nr, const void *xt, int ttpad,
                  int nt, int64_t n, float *y, size_t ys);
void snug_i8_gemm_ref(uint32_t wtype, const void *wp, size_t wps, int nr, const void *xt, int ttpad,
                      int nt, int64_t n, float *y, size_t ys);
/* The scalar reference versions of the two (tests compare the dispatched ones to these). */
void snug_act_quantize_ref(uint32_t wtype, const float *x, void *xq, int64_t n);
void snug_act_dot_ref(uint32_t wtype, const void *w, const void *xq, size_t xs, int nc, int64_t n,
                      float *out);

/* ---- recipes: which type each tensor of a model is stored in (recipe.c) ------------------- */
/* A recipe is a target like "q4_k_m" plus llama.cpp's per-tensor rules (src/llama-quant.cpp):
 * 1-D and sensitive tensors stay F32, output.weight (or a tied token_embd) gets Q6_K, some
 * attn_v / attn_qkv / ffn_down layers get more bits, rows that are not a multiple of the block
 * size fall back. Usage, mirroring llama.cpp's two passes over the tensors in file order:
 *   struct snug_recipe r;
 *   snug_recipe_init(&r, "q4_k_m", n_layer, n_expert);   (block_count, expert_count or 0)
 *   for each tensor: snug_recipe_count(&r, name);
 *   for each tensor, in the same order: type = snug_recipe_type(&r, name, n_dims, ne);
 * The state is plain data; nothing allocates. */
struct snug_recipe {
    int kind;       /* internal recipe id */
    int n_layer;    /* block_count: all layers (MTP layers included) */
    int n_expert;   /* expert_count, 0 for a dense model */
    int n_attn_v;   /* attn_v + attn_qkv tensors seen by snug_recipe_count */
    int i_attn_v;   /* ... and handed out so far by snug_recipe_type */
    int i_ffn_down; /* ffn_down* tensors handed out so far (dense layer counter) */
    int i_ffn_up;   /* ... ffn_up* tensors, and ffn_gate* ones (IQ3_XS's rules) */
    int i_ffn_gate;
    bool has_output;  /* the model has its own output.weight (else token_embd is tied) */
    int n_gqa;        /* attention heads per KV head (llama.cpp's n_gqa()); 1 after init */
    bool has_imatrix; /* an importance matrix is given (changes a few low-bit rules) */
};
/* Returns false for an unknown recipe name (case-insensitive: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0
 * q5_1 q4_k q5_k q6_k q4_k_m q5_k_m; q4_k / q5_k are llama.cpp's Q4_K_S / Q5_K_S; the
 * low-bit mixes q2_k q3_k_s q3_k_m q3_k_l iq4_nl iq4_xs iq3_m iq3_s iq3_xs iq3_xxs iq2_m
 * iq2_s iq2_xs iq2_xxs iq1_m iq1_s). */
bool snug_recipe_init(struct snug_recipe *r, const char *name, int n_layer, int n_expert);
/* Model facts some rules need (call after init, before the passes): n_gqa = n_head /
 * n_head_kv (attn_v of the 3-bit and IQ4 mixes gets more bits at >= 4), and whether an
 * importance matrix is given. */
void snug_recipe_set_model(struct snug_recipe *r, int n_gqa, bool has_imatrix);
/* Whether snug_quantize_row can write every type this recipe hands out. */
bool snug_recipe_writable(const struct snug_recipe *r);
/* The recipe names snug can write (snug quantize, snug gen), for messages and --help. */
#define SNUG_RECIPES_WRITABLE                                                                      \
    "f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k q4_k_m q5_k_m q2_k q3_k_s q3_k_m "       \
    "q3_k_l iq4_nl iq4_xs iq3_m iq3_s iq3_xs iq3_xxs iq2_m iq2_s iq2_xs iq2_xxs iq1_m iq1_s"
void snug_recipe_count(struct snug_recipe *r, const char *tensor_name);
/* The type to store this tensor in (ne[0] is the row length). Call once per tensor, in order. */
uint32_t snug_recipe_type(struct snug_recipe *r, const char *name, uint32_t n_dims,
                          const uint64_t *ne);
/* The type of a tensor that a --tensor-type override names (call instead of snug_recipe_type
 * for that tensor): `type` with the usual exceptions (unquantizable tensors stay F32, an
 * unquantized recipe keeps its type, a row length the blocks do not divide falls back). */
uint32_t snug_recipe_type_manual(const struct snug_recipe *r, const char *name, uint32_t n_dims,
                                 const uint64_t *ne, uint32_t type);
/* Whether storing this tensor as `type` needs importance data (llama.cpp refuses otherwise). */
bool snug_recipe_needs_imatrix(const char *name, uint32_t type);
/* llama.cpp's general.file_type (enum llama_ftype) for the recipe, e.g. 15 for q4_k_m. */
uint32_t snug_recipe_file_type(const struct snug_recipe *r);
/* The recipe's canonical name ("q4_k_m"). */
const char *snug_recipe_name(const struct snug_recipe *r);

#endif /* SNUG_QUANT_H */
