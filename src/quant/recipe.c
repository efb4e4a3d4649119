/* recipe.c — quantization recipes: the storage type of every tensor for a target like q4_k_m.
 *
 * The rules are llama.cpp's (src/llama-quant.cpp: tensor_allows_quantization,
 * llama_tensor_get_type_impl, tensor_type_fallback, use_more_bits; ftype numbers from
 * include/llama.h `enum llama_ftype`), restated for the recipes snug offers and the tensors of
 * the Qwen3.5/3.6 architectures. Facts worth knowing when reading it:
 *  - llama.cpp's "attn_v" category also covers attn_qkv (the DeltaNet in_proj_qkv) and
 *    attn_kv_b; its dedicated attn_qkv branch is never reached. The "more bits" choice for
 *    them uses a running index over those tensors in file order, not the layer number.
 *  - ffn_down uses a running counter over ffn_down* tensors for dense models and the blk.N
 *    number parsed from the name when the model has experts; n = block_count.
 *  - output.weight (or token_embd when there is no output.weight) gets Q6_K for every
 *    quantized recipe except Q8_0, or Q8_0 when its rows do not fit the recipe's blocks.
 * Invariant: the struct is plain data; snug_recipe_type must see tensors in file order.
 * Read next: src/cli/cmd_quantize.c (the caller). */
#include "quant.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* llama_ftype numbers (include/llama.h) */
enum {
    FT_F32 = 0,
    FT_F16 = 1,
    FT_Q4_0 = 2,
    FT_Q4_1 = 3,
    FT_Q8_0 = 7,
    FT_Q5_0 = 8,
    FT_Q5_1 = 9,
    FT_Q2_K = 10,
    FT_Q3_K_S = 11,
    FT_Q3_K_M = 12,
    FT_Q3_K_L = 13,
    FT_Q4_K_S = 14,
    FT_Q4_K_M = 15,
    FT_Q5_K_S = 16,
    FT_Q5_K_M = 17,
    FT_Q6_K = 18,
    FT_IQ2_XXS = 19,
    FT_IQ2_XS = 20,
    FT_IQ3_XS = 22,
    FT_IQ3_XXS = 23,
    FT_IQ1_S = 24,
    FT_IQ4_NL = 25,
    FT_IQ3_S = 26,
    FT_IQ3_M = 27,
    FT_IQ2_S = 28,
    FT_IQ2_M = 29,
    FT_IQ4_XS = 30,
    FT_IQ1_M = 31,
    FT_BF16 = 32,
};

struct recipe_def {
    const char *name;
    uint32_t base; /* default type of a quantizable tensor */
    uint32_t ftype;
};

static const struct recipe_def RECIPES[] = {
    {"f32", SNUG_DTYPE_F32, FT_F32},
    {"f16", SNUG_DTYPE_F16, FT_F16},
    {"bf16", SNUG_DTYPE_BF16, FT_BF16},
    {"q8_0", SNUG_DTYPE_Q8_0, FT_Q8_0},
    {"q4_0", SNUG_DTYPE_Q4_0, FT_Q4_0},
    {"q4_1", SNUG_DTYPE_Q4_1, FT_Q4_1},
    {"q5_0", SNUG_DTYPE_Q5_0, FT_Q5_0},
    {"q5_1", SNUG_DTYPE_Q5_1, FT_Q5_1},
    {"q4_k", SNUG_DTYPE_Q4_K, FT_Q4_K_S},
    {"q5_k", SNUG_DTYPE_Q5_K, FT_Q5_K_S},
    {"q6_k", SNUG_DTYPE_Q6_K, FT_Q6_K},
    {"q4_k_m", SNUG_DTYPE_Q4_K, FT_Q4_K_M},
    {"q5_k_m", SNUG_DTYPE_Q5_K, FT_Q5_K_M},
    /* the low-bit mixes (llama.cpp's default type per ftype, llama-quant.cpp
     * llama_ftype_get_default_type: IQ2_S's default is IQ2_XS, IQ3_M's IQ3_S) */
    {"q2_k", SNUG_DTYPE_Q2_K, FT_Q2_K},
    {"q3_k_s", SNUG_DTYPE_Q3_K, FT_Q3_K_S},
    {"q3_k_m", SNUG_DTYPE_Q3_K, FT_Q3_K_M},
    {"q3_k_l", SNUG_DTYPE_Q3_K, FT_Q3_K_L},
    {"iq4_nl", SNUG_DTYPE_IQ4_NL, FT_IQ4_NL},
    {"iq4_xs", SNUG_DTYPE_IQ4_XS, FT_IQ4_XS},
    {"iq3_s", SNUG_DTYPE_IQ3_S, FT_IQ3_S},
    {"iq3_m", SNUG_DTYPE_IQ3_S, FT_IQ3_M},
    {"iq3_xs", SNUG_DTYPE_IQ3_S, FT_IQ3_XS},
    {"iq3_xxs", SNUG_DTYPE_IQ3_XXS, FT_IQ3_XXS},
    {"iq2_m", SNUG_DTYPE_IQ2_S, FT_IQ2_M},
    {"iq2_s", SNUG_DTYPE_IQ2_XS, FT_IQ2_S},
    {"iq2_xs", SNUG_DTYPE_IQ2_XS, FT_IQ2_XS},
    {"iq2_xxs", SNUG_DTYPE_IQ2_XXS, FT_IQ2_XXS},
    {"iq1_m", SNUG_DTYPE_IQ1_M, FT_IQ1_M},
    {"iq1_s", SNUG_DTYPE_IQ1_S, FT_IQ1_S},
};
#define N_RECIPES ((int)(sizeof RECIPES / sizeof RECIPES[0]))

static bool eq_nocase(const char *a, const char *b) {
    while (*a && *b && tolower((unsigned char)*a) == tolower((unsigned char)*b)) a++, b++;
    return !*a && !*b;
}

bool snug_recipe_init(struct snug_recipe *r, const char *name, int n_layer, int n_expert) {
    memset(r, 0, sizeof *r);
    r->n_gqa = 1;
    r->kind = -1;
    for (int i = 0; i < N_RECIPES; i++)
        if (name && eq_nocase(name, RECIPES[i].name)) r->kind = i;
    r->n_layer = n_layer > 0 ? n_layer : 0;
    r->n_expert = n_expert > 0 ? n_expert : 0;
    return r->kind >= 0;
}

uint32_t snug_recipe_file_type(const struct snug_recipe *r) {
    return RECIPES[r->kind].ftype;
}

const char *snug_recipe_name(const struct snug_recipe *r) {
    return RECIPES[r->kind].name;
}

void snug_recipe_set_model(struct snug_recipe *r, int n_gqa, bool has_imatrix) {
    r->n_gqa = n_gqa;
    r->has_imatrix = has_imatrix;
}

/* Every type the recipe can hand out (base, the rules' substitutes, fallbacks) is one
 * snug_quantize_row writes: the bases, K-quants, Q8_0, Q4_0/Q5_0 and every i-quant. */
bool snug_recipe_writable(const struct snug_recipe *r) {
    return snug_dtype_info(RECIPES[r->kind].base)->quantizable;
}

/* ---- tensor categories (llama.cpp's tensor_get_category, same precedence) ----------------- */
enum cat {
    C_OTHER,
    C_OUTPUT,
    C_TOKEN_EMBD,
    C_ATTN_V,
    C_ATTN_K,
    C_ATTN_Q,
    C_ATTN_OUT,
    C_FFN_UP,
    C_FFN_GATE,
    C_FFN_DOWN
};

static bool has(const char *s, const char *sub) {
    return strstr(s, sub) != NULL;
}

static enum cat category(const char *name) {
    if (!strcmp(name, "output.weight")) return C_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight"))
        return C_TOKEN_EMBD;
    if (has(name, "attn_qkv.weight") || has(name, "attn_kv_b.weight") || has(name, "attn_v.weight"))
        return C_ATTN_V;
    if (has(name, "attn_k.weight")) return C_ATTN_K;
    if (has(name, "attn_q.weight")) return C_ATTN_Q;
    if (has(name, "attn_output.weight")) return C_ATTN_OUT;
    if (has(name, "ffn_up")) return C_FFN_UP;
    if (has(name, "ffn_gate")) return C_FFN_GATE;
    if (has(name, "ffn_down")) return C_FFN_DOWN;
    return C_OTHER;
}

/* llama.cpp's tensor_allows_quantization, the parts that can apply to a GGUF we read: only
 * 2-D/3-D tensors (dimensions counted as ggml_n_dims does: [256, 1] is 1-D) whose name ends in
 * "weight", never norms, the MoE router, conv1d kernels, positional / token-type embeddings, or a
 * few tiny per-architecture tables. Everything else (biases, ssm_a, ssm_dt, ...) stays F32. */
static bool allows_quantization(const char *name, uint32_t n_dims, const uint64_t *ne) {
    while (n_dims > 1 && ne[n_dims - 1] == 1) n_dims--; /* ggml_n_dims ignores trailing 1s */
    if (n_dims < 2) return false;
    size_t len = strlen(name);
    if (len < 6 || strcmp(name + len - 6, "weight") != 0) return false;
    static const char *const never[] = {
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "attn_rel_b.weight",
        ".rel_pos",
        "ffn_gate_tid2eid.weight",
    };
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (has(name, never[i])) return false;
    if (!strcmp(name, "position_embd.weight") || !strcmp(name, "token_types.weight")) return false;
    return true;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers, and every third layer in
 * between, get the bigger type. */
static bool use_more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static bool is_quantized(uint32_t t) {
    return t != SNUG_DTYPE_F32 && t != SNUG_DTYPE_F16 && t != SNUG_DTYPE_BF16;
}

void snug_recipe_count(struct snug_recipe *r, const char *tensor_name) {
    enum cat c = category(tensor_name);
    if (c == C_ATTN_V) r->n_attn_v++;
    if (c == C_OUTPUT) r->has_output = true;
}

/* tensor_type_fallback: a row length that the chosen type's blocks do not divide. K-types and
 * i-quants fall back to a 32-block type (IQ* -> IQ4_NL, Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, ...);
 * anything still not dividing becomes F16. */
static uint32_t fallback(uint64_t ncols, uint32_t t) {
    if (ncols % snug_dtype_info(t)->block_elems == 0) return t;
    if (t == SNUG_DTYPE_IQ1_S || t == SNUG_DTYPE_IQ1_M || t == SNUG_DTYPE_IQ2_XXS ||
        t == SNUG_DTYPE_IQ2_XS || t == SNUG_DTYPE_IQ2_S || t == SNUG_DTYPE_IQ3_XXS ||
        t == SNUG_DTYPE_IQ3_S || t == SNUG_DTYPE_IQ4_XS)
        t = SNUG_DTYPE_IQ4_NL;
    else if (t == SNUG_DTYPE_Q2_K || t == SNUG_DTYPE_Q3_K)
        t = SNUG_DTYPE_Q4_0;
    else if (t == SNUG_DTYPE_Q4_K)
        t = SNUG_DTYPE_Q5_0;
    else if (t == SNUG_DTYPE_Q5_K)
        t = SNUG_DTYPE_Q5_1;
    else if (t == SNUG_DTYPE_Q6_K)
        t = SNUG_DTYPE_Q8_0;
    if (ncols % snug_dtype_info(t)->block_elems) t = SNUG_DTYPE_F16;
    return t;
}

/* The storage type of one tensor (the body of llama_tensor_get_type / _impl for our ftypes). */
uint32_t snug_recipe_type(struct snug_recipe *r, const char *name, uint32_t n_dims,
                          const uint64_t *ne) {
    const struct recipe_def *d = &RECIPES[r->kind];
    uint32_t t = d->base, ft = d->ftype;
    if (!allows_quantization(name, n_dims, ne)) return SNUG_DTYPE_F32;
    if (!is_quantized(t)) return t;
    uint64_t nx = ne[0];
    enum cat c = category(name);
    const bool gqa4 = r->n_gqa >= 4, e8 = r->n_expert == 8;
    /* the 1-2 bit mixes get their own rules for most categories */
    const bool lowest = ft == FT_IQ2_XXS || ft == FT_IQ2_XS || ft == FT_IQ1_S || ft == FT_IQ2_S ||
                        ft == FT_IQ2_M || ft == FT_IQ1_M;
    const bool iq2sm = ft == FT_IQ2_S || ft == FT_IQ2_M;
    if (c == C_OUTPUT || (c == C_TOKEN_EMBD && !r->has_output)) {
        if (nx % snug_dtype_info(t)->block_elems)
            t = SNUG_DTYPE_Q8_0;
        else if (lowest || ft == FT_IQ3_XXS)
            t = SNUG_DTYPE_Q5_K;
        else if (t != SNUG_DTYPE_Q8_0)
            t = SNUG_DTYPE_Q6_K;
    } else if (c == C_TOKEN_EMBD) {
        if (ft == FT_IQ2_XXS || ft == FT_IQ2_XS || ft == FT_IQ1_S || ft == FT_IQ1_M)
            t = SNUG_DTYPE_Q2_K;
        else if (iq2sm || ft == FT_IQ3_XXS)
            t = SNUG_DTYPE_IQ3_S;
    } else if (lowest) {
        if (c == C_ATTN_V) {
            if (gqa4 || r->n_expert >= 4)
                t = SNUG_DTYPE_Q4_K;
            else
                t = iq2sm ? SNUG_DTYPE_IQ3_S : SNUG_DTYPE_Q2_K;
            r->i_attn_v++;
        } else if (e8 && c == C_ATTN_K) {
            t = SNUG_DTYPE_Q4_K;
        } else if (c == C_FFN_DOWN) {
            if (r->i_ffn_down < r->n_layer / 8) t = iq2sm ? SNUG_DTYPE_IQ3_S : SNUG_DTYPE_Q2_K;
            r->i_ffn_down++;
        } else if (c == C_ATTN_OUT) {
            if (e8)
                t = SNUG_DTYPE_Q5_K;
            else if (ft == FT_IQ1_S || ft == FT_IQ1_M)
                t = SNUG_DTYPE_IQ2_XXS;
            else if (iq2sm)
                t = SNUG_DTYPE_IQ3_S;
        }
    } else if (c == C_ATTN_V) {
        if (ft == FT_Q2_K)
            t = gqa4 ? SNUG_DTYPE_Q4_K : SNUG_DTYPE_Q3_K;
        else if (ft == FT_IQ3_XXS)
            t = gqa4 ? SNUG_DTYPE_Q4_K : !r->has_imatrix ? SNUG_DTYPE_IQ3_S : SNUG_DTYPE_IQ3_XXS;
        else if ((ft == FT_IQ3_XS || ft == FT_IQ3_S) && gqa4)
            t = SNUG_DTYPE_Q4_K;
        else if (ft == FT_IQ3_M)
            t = SNUG_DTYPE_Q4_K;
        else if (ft == FT_Q3_K_M)
            t = r->i_attn_v < 2 ? SNUG_DTYPE_Q5_K : SNUG_DTYPE_Q4_K;
        else if (ft == FT_Q3_K_L)
            t = SNUG_DTYPE_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && gqa4)
            t = SNUG_DTYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(r->i_attn_v, r->n_attn_v))
            t = SNUG_DTYPE_Q6_K;
        else if (ft == FT_Q4_K_S && r->i_attn_v < 4)
            t = SNUG_DTYPE_Q5_K;
        if (e8) t = SNUG_DTYPE_Q8_0;
        r->i_attn_v++;
    } else if (c == C_ATTN_K) {
        if (e8)
            t = SNUG_DTYPE_Q8_0;
        else if (ft == FT_IQ3_XS)
            t = SNUG_DTYPE_IQ3_XXS;
        else if (ft == FT_IQ3_XXS)
            t = SNUG_DTYPE_IQ2_S;
    } else if (c == C_ATTN_Q) {
        if (ft == FT_IQ3_XS)
            t = SNUG_DTYPE_IQ3_XXS;
        else if (ft == FT_IQ3_XXS)
            t = SNUG_DTYPE_IQ2_S;
    } else if (c == C_FFN_DOWN) {
        int i_layer = r->i_ffn_down, n_layer = r->n_layer;
        if (r->n_expert > 1) { /* experts: the layer comes from the name */
            int l;
            if (sscanf(name, "blk.%d.", &l) == 1 && l >= 0) i_layer = l;
        }
        if (ft == FT_Q2_K)
            t = SNUG_DTYPE_Q3_K;
        else if (ft == FT_IQ3_XXS && !r->has_imatrix)
            t = i_layer < n_layer / 8 ? SNUG_DTYPE_Q4_K : SNUG_DTYPE_Q3_K;
        else if (ft == FT_Q3_K_M) /* llama.cpp: Q3_K only for Falcon's other layers */
            t = i_layer < n_layer / 16 ? SNUG_DTYPE_Q5_K : SNUG_DTYPE_Q4_K;
        else if (ft == FT_IQ3_M &&
                 (i_layer < n_layer / 8 || (e8 && use_more_bits(i_layer, n_layer))))
            t = SNUG_DTYPE_Q4_K;
        else if (ft == FT_Q3_K_L)
            t = SNUG_DTYPE_Q5_K;
        else if (ft == FT_Q4_K_M) {
            if (use_more_bits(i_layer, n_layer)) t = SNUG_DTYPE_Q6_K;
        } else if (i_layer < n_layer / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS) && !r->has_imatrix)
            t = SNUG_DTYPE_Q5_K;
        else if (ft == FT_Q5_K_M && use_more_bits(i_layer, n_layer))
            t = SNUG_DTYPE_Q6_K;
        else if (ft == FT_Q4_K_S && i_layer < n_layer / 8)
            t = SNUG_DTYPE_Q5_K;
        else if ((ft == FT_Q4_0 || ft == FT_Q5_0) && r->has_imatrix && i_layer < n_layer / 8)
            t = ft == FT_Q4_0 ? SNUG_DTYPE_Q4_1 : SNUG_DTYPE_Q5_1;
        r->i_ffn_down++;
    } else if (c == C_ATTN_OUT) {
        if (e8) {
            if (ft == FT_Q2_K || ft == FT_IQ3_XS || ft == FT_IQ3_XXS || ft == FT_Q3_K_S ||
                ft == FT_Q3_K_M || ft == FT_IQ4_NL || ft == FT_Q4_K_S || ft == FT_Q4_K_M ||
                ft == FT_IQ3_S || ft == FT_IQ3_M || ft == FT_IQ4_XS)
                t = SNUG_DTYPE_Q5_K;
        } else if (ft == FT_Q2_K) {
            t = SNUG_DTYPE_Q3_K;
        } else if (ft == FT_IQ3_XXS) {
            t = SNUG_DTYPE_IQ3_S;
        } else if (ft == FT_Q3_K_M || ft == FT_IQ3_M) {
            t = SNUG_DTYPE_Q4_K;
        } else if (ft == FT_Q3_K_L) {
            t = SNUG_DTYPE_Q5_K;
        }
    } else if (c == C_FFN_UP || c == C_FFN_GATE) {
        /* IQ3_XS: the middle three quarters of the layers in IQ3_XXS (counters as ffn_down's) */
        int *counter = c == C_FFN_UP ? &r->i_ffn_up : &r->i_ffn_gate;
        int i_layer = *counter, n_layer = r->n_layer;
        if (r->n_expert > 1) {
            int l;
            if (sscanf(name, "blk.%d.", &l) == 1 && l >= 0) i_layer = l;
        }
        if (ft == FT_IQ3_XS && i_layer >= n_layer / 8 && i_layer < 7 * n_layer / 8)
            t = SNUG_DTYPE_IQ3_XXS;
        (*counter)++;
    }
    return fallback(nx, t);
}

/* A --tensor-type override (llama.cpp's llama_tensor_get_type: a matching pattern replaces the
 * mix's rules for that tensor, which then neither consults nor advances the rules' counters;
 * only tensors that may be quantized at all, and only in a quantized recipe, take it; a row
 * length the type's blocks do not divide still falls back). */
uint32_t snug_recipe_type_manual(const struct snug_recipe *r, const char *name, uint32_t n_dims,
                                 const uint64_t *ne, uint32_t type) {
    uint32_t base = RECIPES[r->kind].base;
    if (!allows_quantization(name, n_dims, ne)) return SNUG_DTYPE_F32;
    if (!is_quantized(base)) return base;
    return fallback(ne[0], type);
}

/* llama.cpp's tensor_requires_imatrix: the 1-3 bit i-quants (IQ3_XXS, IQ2_XXS/XS/S, IQ1_S/M)
 * give garbage without importance data, except for the token embedding and output tables
 * (never seen by an imatrix run; the mixes do not use these types there anyway). */
bool snug_recipe_needs_imatrix(const char *name, uint32_t type) {
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight") ||
        !strcmp(name, "output.weight"))
        return false;
    return type == SNUG_DTYPE_IQ3_XXS || type == SNUG_DTYPE_IQ2_XXS || type == SNUG_DTYPE_IQ2_XS ||
           type == SNUG_DTYPE_IQ2_S || type == SNUG_DTYPE_IQ1_M || type == SNUG_DTYPE_IQ1_S;
}
