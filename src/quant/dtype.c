/* dtype.c — the ggml type table: names, block sizes, block bytes (see quant.h).
 * Block sizes are from ggml's type traits (ggml/src/ggml.c `type_traits`) and the block
 * structs in ggml/src/ggml-common.h; the low-bit layouts are described in docs/quant-types.md. Ids
 * 4, 5, 31-33 and 36-38 were removed from ggml and are unknown here. */
#include "quant.h"

#include <ctype.h>
#include <string.h>

/* comp: snug decodes and dots it; enc: snug_quantize_row writes it (quant_quantize.c). */
#define T(id, nm, be, bb, comp) [id] = {nm, be, bb, comp, ENC_##id}
#define ENC_SNUG_DTYPE_F32      true
#define ENC_SNUG_DTYPE_F16      true
#define ENC_SNUG_DTYPE_Q4_0     true
#define ENC_SNUG_DTYPE_Q4_1     true
#define ENC_SNUG_DTYPE_Q5_0     true
#define ENC_SNUG_DTYPE_Q5_1     true
#define ENC_SNUG_DTYPE_Q8_0     true
#define ENC_SNUG_DTYPE_Q8_1     false
#define ENC_SNUG_DTYPE_Q2_K     true
#define ENC_SNUG_DTYPE_Q3_K     true
#define ENC_SNUG_DTYPE_Q4_K     true
#define ENC_SNUG_DTYPE_Q5_K     true
#define ENC_SNUG_DTYPE_Q6_K     true
#define ENC_SNUG_DTYPE_Q8_K     false
#define ENC_SNUG_DTYPE_IQ2_XXS  true
#define ENC_SNUG_DTYPE_IQ2_XS   true
#define ENC_SNUG_DTYPE_IQ3_XXS  true
#define ENC_SNUG_DTYPE_IQ1_S    true
#define ENC_SNUG_DTYPE_IQ4_NL   true
#define ENC_SNUG_DTYPE_IQ3_S    true
#define ENC_SNUG_DTYPE_IQ2_S    true
#define ENC_SNUG_DTYPE_IQ4_XS   true
#define ENC_SNUG_DTYPE_I8       false
#define ENC_SNUG_DTYPE_I16      false
#define ENC_SNUG_DTYPE_I32      false
#define ENC_SNUG_DTYPE_I64      false
#define ENC_SNUG_DTYPE_F64      false
#define ENC_SNUG_DTYPE_IQ1_M    true
#define ENC_SNUG_DTYPE_BF16     true
#define ENC_SNUG_DTYPE_TQ1_0    false
#define ENC_SNUG_DTYPE_TQ2_0    false
#define ENC_SNUG_DTYPE_MXFP4    false
static const struct snug_dtype_info TYPES[SNUG_DTYPE_COUNT] = {
    T(SNUG_DTYPE_F32, "f32", 1, 4, true),
    T(SNUG_DTYPE_F16, "f16", 1, 2, true),
    T(SNUG_DTYPE_Q4_0, "q4_0", 32, 18, true),  /* f16 d; 16 bytes of 4-bit values */
    T(SNUG_DTYPE_Q4_1, "q4_1", 32, 20, true),  /* f16 d, m; 16 bytes */
    T(SNUG_DTYPE_Q5_0, "q5_0", 32, 22, true),  /* f16 d; u32 high bits; 16 bytes */
    T(SNUG_DTYPE_Q5_1, "q5_1", 32, 24, true),  /* f16 d, m; u32 high bits; 16 bytes */
    T(SNUG_DTYPE_Q8_0, "q8_0", 32, 34, true),  /* f16 d; 32 int8 */
    T(SNUG_DTYPE_Q8_1, "q8_1", 32, 36, false), /* f16 d, s; 32 int8 */
    T(SNUG_DTYPE_Q2_K, "q2_K", 256, 84, true),
    T(SNUG_DTYPE_Q3_K, "q3_K", 256, 110, true),
    T(SNUG_DTYPE_Q4_K, "q4_K", 256, 144, true),  /* f16 d, dmin; 12 B scales; 128 B qs */
    T(SNUG_DTYPE_Q5_K, "q5_K", 256, 176, true),  /* f16 d, dmin; 12 B scales; 32 B qh; 128 B */
    T(SNUG_DTYPE_Q6_K, "q6_K", 256, 210, true),  /* 128 B ql; 64 B qh; 16 int8 scales; f16 d */
    T(SNUG_DTYPE_Q8_K, "q8_K", 256, 292, false), /* f32 d; 256 int8; 16 int16 bsums */
    T(SNUG_DTYPE_IQ2_XXS, "iq2_xxs", 256, 66, true),
    T(SNUG_DTYPE_IQ2_XS, "iq2_xs", 256, 74, true),
    T(SNUG_DTYPE_IQ3_XXS, "iq3_xxs", 256, 98, true),
    T(SNUG_DTYPE_IQ1_S, "iq1_s", 256, 50, true),
    T(SNUG_DTYPE_IQ4_NL, "iq4_nl", 32, 18, true),
    T(SNUG_DTYPE_IQ3_S, "iq3_s", 256, 110, true),
    T(SNUG_DTYPE_IQ2_S, "iq2_s", 256, 82, true),
    T(SNUG_DTYPE_IQ4_XS, "iq4_xs", 256, 136, true),
    T(SNUG_DTYPE_I8, "i8", 1, 1, false),
    T(SNUG_DTYPE_I16, "i16", 1, 2, false),
    T(SNUG_DTYPE_I32, "i32", 1, 4, false),
    T(SNUG_DTYPE_I64, "i64", 1, 8, false),
    T(SNUG_DTYPE_F64, "f64", 1, 8, false),
    T(SNUG_DTYPE_IQ1_M, "iq1_m", 256, 56, true),
    T(SNUG_DTYPE_BF16, "bf16", 1, 2, true),
    T(SNUG_DTYPE_TQ1_0, "tq1_0", 256, 54, true),
    T(SNUG_DTYPE_TQ2_0, "tq2_0", 256, 66, true),
    T(SNUG_DTYPE_MXFP4, "mxfp4", 32, 17, true),
};
#undef T
#undef ENC_SNUG_DTYPE_F32
#undef ENC_SNUG_DTYPE_F16
#undef ENC_SNUG_DTYPE_Q4_0
#undef ENC_SNUG_DTYPE_Q4_1
#undef ENC_SNUG_DTYPE_Q5_0
#undef ENC_SNUG_DTYPE_Q5_1
#undef ENC_SNUG_DTYPE_Q8_0
#undef ENC_SNUG_DTYPE_Q8_1
#undef ENC_SNUG_DTYPE_Q2_K
#undef ENC_SNUG_DTYPE_Q3_K
#undef ENC_SNUG_DTYPE_Q4_K
#undef ENC_SNUG_DTYPE_Q5_K
#undef ENC_SNUG_DTYPE_Q6_K
#undef ENC_SNUG_DTYPE_Q8_K
#undef ENC_SNUG_DTYPE_IQ2_XXS
#undef ENC_SNUG_DTYPE_IQ2_XS
#undef ENC_SNUG_DTYPE_IQ3_XXS
#undef ENC_SNUG_DTYPE_IQ1_S
#undef ENC_SNUG_DTYPE_IQ4_NL
#undef ENC_SNUG_DTYPE_IQ3_S
#undef ENC_SNUG_DTYPE_IQ2_S
#undef ENC_SNUG_DTYPE_IQ4_XS
#undef ENC_SNUG_DTYPE_I8
#undef ENC_SNUG_DTYPE_I16
#undef ENC_SNUG_DTYPE_I32
#undef ENC_SNUG_DTYPE_I64
#undef ENC_SNUG_DTYPE_F64
#undef ENC_SNUG_DTYPE_IQ1_M
#undef ENC_SNUG_DTYPE_BF16
#undef ENC_SNUG_DTYPE_TQ1_0
#undef ENC_SNUG_DTYPE_TQ2_0
#undef ENC_SNUG_DTYPE_MXFP4

const struct snug_dtype_info *snug_dtype_info(uint32_t type) {
    if (type >= SNUG_DTYPE_COUNT || TYPES[type].name == NULL) return NULL;
    return &TYPES[type];
}

int snug_dtype_from_name(const char *name) {
    for (int i = 0; i < SNUG_DTYPE_COUNT; i++) {
        const char *a = TYPES[i].name, *b = name;
        if (!a) continue;
        while (*a && *b && tolower((unsigned char)*a) == tolower((unsigned char)*b)) a++, b++;
        if (!*a && !*b) return i;
    }
    return -1;
}

uint64_t snug_dtype_row_bytes(uint32_t type, uint64_t n) {
    const struct snug_dtype_info *t = snug_dtype_info(type);
    if (!t || n % t->block_elems) return 0;
    return n / t->block_elems * t->block_bytes;
}
