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
    FT_Q4_K_S = 14,
    FT_Q4_K_M = 15,
    FT_Q5_K_S = 16,
    FT_Q5_K_M = 17,
    FT_Q6_K = 18,
    FT_BF16 = 32,
};

struct recipe_def {
    const char *name;
    uint32_t base; /* default type of a quantizable tensor */
    uint32_t ftype;
};

static const struct recipe_def RECIPES[] = {
    {"f32", SNUG_DTYPE_F32, FT_F32},        {"f16", SNUG_DTYPE_F16, FT_F16},
    {"bf16", SNUG_DTYPE_BF16, FT_BF16},     {"q8_0", SNUG_DTYPE_Q8_0, FT_Q8_0},
    {"q4_0", SNUG_DTYPE_Q4_0, FT_Q4_0},     {"q4_1", SNUG_DTYPE_Q4_1, FT_Q4_1},
    {"q5_0", SNUG_DTYPE_Q5_0, FT_Q5_0},     {"q5_1", SNUG_DTYPE_Q5_1, FT_Q5_1},
    {"q4_k", SNUG_DTYPE_Q4_K, FT_Q4_K_S},   {"q5_k", SNUG_DTYPE_Q5_K, FT_Q5_K_S},
    {"q6_k", SNUG_DTYPE_Q6_K, FT_Q6_K},     {"q4_k_m", SNUG_DTYPE_Q4_K, FT_Q4_K_M},
    {"q5_k_m", SNUG_DTYPE_Q5_K, FT_Q5_K_M},
};
#define N_RECIPES ((int)(sizeof RECIPES / sizeof RECIPES[0]))

static bool eq_nocase(const char *a, const char *b) {
    while (*a && *b && tolower((unsigned char)*a) == tolower((unsigned char)*b)) a++, b++;
    return !*a && !*b;
}

bool snug_recipe_init(struct snug_recipe *r, const char *name, int n_layer, int n_expert) {
    memset(r, 0, sizeof *r);
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

/* ---- tensor categories (llama.cpp's tensor_get_category, same precedence) ----------------- */
enum cat { C_OTHER, C_OUTPUT, C_TOKEN_EMBD, C_ATTN_V, C_ATTN_K, C_ATTN_Q, C_ATTN_OUT, C_FFN_DOWN };

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
    if (has(name, "ffn_up") || has(name, "ffn_gate")) return C_OTHER; /* no rule for our recipes */
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

/* tensor_type_fallback: a row length that the chosen type's blocks do not divide. K-types fall
 * back to the 32-block type of similar size; anything still not dividing becomes F16. */
static uint32_t fallback(uint64_t ncols, uint32_t t) {
    if (ncols % snug_dtype_info(t)->block_elems == 0) return t;
    if (t == SNUG_DTYPE_Q4_K)
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
    if (c == C_OUTPUT || (c == C_TOKEN_EMBD && !r->has_output)) {
        if (nx % snug_dtype_info(t)->block_elems)
            t = SNUG_DTYPE_Q8_0;
        else if (t != SNUG_DTYPE_Q8_0)
            t = SNUG_DTYPE_Q6_K;
    } else if (c == C_ATTN_V) {
        if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(r->i_attn_v, r->n_attn_v))
            t = SNUG_DTYPE_Q6_K;
        else if (ft == FT_Q4_K_S && r->i_attn_v < 4)
            t = SNUG_DTYPE_Q5_K;
        if (r->n_expert == 8) t = SNUG_DTYPE_Q8_0;
        r->i_attn_v++;
    } else if (c == C_ATTN_K) {
        if (r->n_expert == 8) t = SNUG_DTYPE_Q8_0;
    } else if (c == C_FFN_DOWN) {
        int i_layer = r->i_ffn_down, n_layer = r->n_layer;
        if (r->n_expert > 1) { /* experts: the layer comes from the name */
            int l;
            if (sscanf(name, "blk.%d.", &l) == 1 && l >= 0) i_layer = l;
        }
        if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(i_layer, n_layer))
            t = SNUG_DTYPE_Q6_K;
        else if (ft == FT_Q4_K_S && i_layer < n_layer / 8)
            t = SNUG_DTYPE_Q5_K;
        r->i_ffn_down++;
    } else if (c == C_ATTN_OUT) {
        if (r->n_expert == 8 && (ft == FT_Q4_K_S || ft == FT_Q4_K_M)) t = SNUG_DTYPE_Q5_K;
    }
    return fallback(nx, t);
}
