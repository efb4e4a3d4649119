/* test_quant_recipe.c — the per-tensor type choices of src/quant/recipe.c on a Qwen3.5-like
 * tensor list, against values worked out by hand from llama.cpp's rules (src/llama-quant.cpp):
 * use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2, which for n = 24 selects
 * i = 0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23.
 * Read next: src/quant/recipe.c. */
#include "quant/quant.h"
#include "test.h"

#include <stdio.h>

#define NL 24

struct tdesc {
    char name[64];
    uint32_t n_dims;
    uint64_t ne[4];
};

/* A dense hybrid model: every 4th layer (3, 7, ...) is full attention (attn_q/k/v/output),
 * the others DeltaNet (attn_qkv, attn_gate, ssm_*); all have an FFN. */
static int build(struct tdesc *t, bool with_output) {
    int n = 0;
#define ADD(nd, a, b, ...)                                                                         \
    do {                                                                                           \
        snprintf(t[n].name, sizeof t[n].name, __VA_ARGS__);                                        \
        t[n].n_dims = nd, t[n].ne[0] = a, t[n].ne[1] = b, t[n].ne[2] = t[n].ne[3] = 1;             \
        n++;                                                                                       \
    } while (0)
    ADD(2, 1024, 5000, "token_embd.weight");
    for (int l = 0; l < NL; l++) {
        ADD(1, 1024, 1, "blk.%d.attn_norm.weight", l);
        if (l % 4 == 3) {
            ADD(2, 1024, 4096, "blk.%d.attn_q.weight", l);
            ADD(2, 1024, 512, "blk.%d.attn_k.weight", l);
            ADD(2, 1024, 512, "blk.%d.attn_v.weight", l);
            ADD(2, 2048, 1024, "blk.%d.attn_output.weight", l);
            ADD(1, 256, 1, "blk.%d.attn_q_norm.weight", l);
        } else {
            ADD(2, 1024, 4096, "blk.%d.attn_qkv.weight", l);
            ADD(2, 1024, 2048, "blk.%d.attn_gate.weight", l);
            ADD(2, 4, 4096, "blk.%d.ssm_conv1d.weight", l);
            ADD(1, 16, 1, "blk.%d.ssm_a", l);
            ADD(1, 16, 1, "blk.%d.ssm_dt.bias", l);
            ADD(2, 1024, 16, "blk.%d.ssm_beta.weight", l);
            ADD(1, 128, 1, "blk.%d.ssm_norm.weight", l);
            ADD(2, 2048, 1024, "blk.%d.ssm_out.weight", l);
        }
        ADD(2, 1024, 3072, "blk.%d.ffn_gate.weight", l);
        ADD(2, 1024, 3072, "blk.%d.ffn_up.weight", l);
        ADD(2, 3072, 1024, "blk.%d.ffn_down.weight", l);
        ADD(1, 1024, 1, "blk.%d.post_attention_norm.weight", l);
    }
    ADD(1, 1024, 1, "output_norm.weight");
    if (with_output) ADD(2, 1024, 5000, "output.weight");
#undef ADD
    return n;
}

static struct tdesc T[1024];
static uint32_t TY[1024];

static int run(const char *recipe, bool with_output, int n_expert) {
    struct snug_recipe r;
    CHECK(snug_recipe_init(&r, recipe, NL, n_expert));
    int n = build(T, with_output);
    for (int i = 0; i < n; i++) snug_recipe_count(&r, T[i].name);
    for (int i = 0; i < n; i++) TY[i] = snug_recipe_type(&r, T[i].name, T[i].n_dims, T[i].ne);
    return n;
}

static uint32_t type_of(int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(T[i].name, name)) return TY[i];
    fprintf(stderr, "no tensor %s\n", name);
    return 9999;
}

static bool more_bits(int i) {
    return i < 3 || i >= 21 || (i - 3) % 3 == 2;
}

#define EXPECT(n, nm, ty)                                                                          \
    CHECKF(type_of(n, nm) == (ty), "%s: %s got %u want %u", recipe, nm, type_of(n, nm),            \
           (unsigned)(ty))

int main(void) {
    char nm[64];
    const char *recipe = "Q4_K_M";
    int n = run(recipe, true, 0);
    EXPECT(n, "output.weight", SNUG_DTYPE_Q6_K);
    EXPECT(n, "token_embd.weight", SNUG_DTYPE_Q4_K);
    EXPECT(n, "output_norm.weight", SNUG_DTYPE_F32);
    for (int l = 0; l < NL; l++) {
        /* attn_v / attn_qkv: one per layer here, so the running index is the layer */
        snprintf(nm, sizeof nm, l % 4 == 3 ? "blk.%d.attn_v.weight" : "blk.%d.attn_qkv.weight", l);
        EXPECT(n, nm, more_bits(l) ? SNUG_DTYPE_Q6_K : SNUG_DTYPE_Q4_K);
        snprintf(nm, sizeof nm, "blk.%d.ffn_down.weight", l);
        EXPECT(n, nm, more_bits(l) ? SNUG_DTYPE_Q6_K : SNUG_DTYPE_Q4_K);
        snprintf(nm, sizeof nm, "blk.%d.ffn_up.weight", l);
        EXPECT(n, nm, SNUG_DTYPE_Q4_K);
        snprintf(nm, sizeof nm, "blk.%d.attn_norm.weight", l);
        EXPECT(n, nm, SNUG_DTYPE_F32);
        if (l % 4 != 3) {
            snprintf(nm, sizeof nm, "blk.%d.ssm_conv1d.weight", l);
            EXPECT(n, nm, SNUG_DTYPE_F32);
            snprintf(nm, sizeof nm, "blk.%d.ssm_a", l);
            EXPECT(n, nm, SNUG_DTYPE_F32);
            snprintf(nm, sizeof nm, "blk.%d.ssm_dt.bias", l);
            EXPECT(n, nm, SNUG_DTYPE_F32);
            snprintf(nm, sizeof nm, "blk.%d.ssm_beta.weight", l);
            EXPECT(n, nm, SNUG_DTYPE_Q4_K);
            snprintf(nm, sizeof nm, "blk.%d.ssm_out.weight", l);
            EXPECT(n, nm, SNUG_DTYPE_Q4_K);
        } else {
            snprintf(nm, sizeof nm, "blk.%d.attn_q_norm.weight", l);
            EXPECT(n, nm, SNUG_DTYPE_F32);
        }
    }

    recipe = "q5_k_m";
    n = run(recipe, true, 0);
    EXPECT(n, "blk.0.attn_qkv.weight", SNUG_DTYPE_Q6_K);
    EXPECT(n, "blk.3.attn_v.weight", SNUG_DTYPE_Q5_K);
    EXPECT(n, "blk.4.ffn_down.weight", SNUG_DTYPE_Q5_K);
    EXPECT(n, "blk.5.ffn_down.weight", SNUG_DTYPE_Q6_K);
    EXPECT(n, "blk.5.ffn_gate.weight", SNUG_DTYPE_Q5_K);

    recipe = "q4_k"; /* llama.cpp Q4_K_S: first 4 attn_v and first n/8 ffn_down get Q5_K */
    n = run(recipe, true, 0);
    EXPECT(n, "blk.3.attn_v.weight", SNUG_DTYPE_Q5_K);
    EXPECT(n, "blk.4.attn_qkv.weight", SNUG_DTYPE_Q4_K);
    EXPECT(n, "blk.2.ffn_down.weight", SNUG_DTYPE_Q5_K);
    EXPECT(n, "blk.3.ffn_down.weight", SNUG_DTYPE_Q4_K);

    /* llama.cpp IQ3_XS: base IQ3_S; attn_q / attn_k and, for layers n/8 <= i < 7n/8 (3..20 of
     * 24), ffn_up / ffn_gate in IQ3_XXS (dense: running counters per tensor kind) */
    recipe = "iq3_xs";
    n = run(recipe, true, 0);
    EXPECT(n, "output.weight", SNUG_DTYPE_Q6_K);
    EXPECT(n, "token_embd.weight", SNUG_DTYPE_IQ3_S);
    EXPECT(n, "blk.3.attn_q.weight", SNUG_DTYPE_IQ3_XXS);
    EXPECT(n, "blk.3.attn_k.weight", SNUG_DTYPE_IQ3_XXS);
    EXPECT(n, "blk.3.attn_v.weight", SNUG_DTYPE_IQ3_S);
    EXPECT(n, "blk.0.attn_qkv.weight", SNUG_DTYPE_IQ3_S);
    EXPECT(n, "blk.0.ssm_out.weight", SNUG_DTYPE_IQ3_S);
    for (int l = 0; l < NL; l++) {
        uint32_t want = l >= 3 && l < 21 ? SNUG_DTYPE_IQ3_XXS : SNUG_DTYPE_IQ3_S;
        snprintf(nm, sizeof nm, "blk.%d.ffn_up.weight", l);
        EXPECT(n, nm, want);
        snprintf(nm, sizeof nm, "blk.%d.ffn_gate.weight", l);
        EXPECT(n, nm, want);
        snprintf(nm, sizeof nm, "blk.%d.ffn_down.weight", l);
        EXPECT(n, nm, SNUG_DTYPE_IQ3_S);
    }

    recipe = "q4_0"; /* the output tensor still gets Q6_K */
    n = run(recipe, true, 0);
    EXPECT(n, "output.weight", SNUG_DTYPE_Q6_K);
    EXPECT(n, "blk.0.ffn_down.weight", SNUG_DTYPE_Q4_0);
    EXPECT(n, "blk.0.attn_qkv.weight", SNUG_DTYPE_Q4_0);

    recipe = "q8_0";
    n = run(recipe, true, 0);
    EXPECT(n, "output.weight", SNUG_DTYPE_Q8_0);
    EXPECT(n, "blk.0.ffn_down.weight", SNUG_DTYPE_Q8_0);
    EXPECT(n, "blk.0.ssm_conv1d.weight", SNUG_DTYPE_F32);

    recipe = "f16";
    n = run(recipe, true, 0);
    EXPECT(n, "output.weight", SNUG_DTYPE_F16);
    EXPECT(n, "blk.0.ffn_down.weight", SNUG_DTYPE_F16);
    EXPECT(n, "blk.0.attn_norm.weight", SNUG_DTYPE_F32);
    recipe = "bf16";
    n = run(recipe, true, 0);
    EXPECT(n, "blk.0.ssm_out.weight", SNUG_DTYPE_BF16);

    recipe = "q6_k tied"; /* no output.weight: token_embd takes its rule */
    {
        struct snug_recipe r;
        CHECK(snug_recipe_init(&r, "q4_k_m", NL, 0));
        n = build(T, false);
        for (int i = 0; i < n; i++) snug_recipe_count(&r, T[i].name);
        for (int i = 0; i < n; i++) TY[i] = snug_recipe_type(&r, T[i].name, T[i].n_dims, T[i].ne);
        EXPECT(n, "token_embd.weight", SNUG_DTYPE_Q6_K);
    }

    recipe = "q4_k_m fallback";
    {
        struct snug_recipe r;
        CHECK(snug_recipe_init(&r, "q4_k_m", NL, 0));
        uint64_t ne64[2] = {64, 8}, ne100[2] = {100, 8}, ne96[2] = {96, 8};
        CHECK(snug_recipe_type(&r, "blk.9.ffn_up.weight", 2, ne64) == SNUG_DTYPE_Q5_0);
        CHECK(snug_recipe_type(&r, "blk.9.ffn_up.weight", 2, ne100) == SNUG_DTYPE_F16);
        CHECK(snug_recipe_type(&r, "output.weight", 2, ne96) == SNUG_DTYPE_Q8_0);
        struct snug_recipe r5;
        CHECK(snug_recipe_init(&r5, "q5_k", NL, 0));
        CHECK(snug_recipe_type(&r5, "blk.9.ffn_up.weight", 2, ne64) == SNUG_DTYPE_Q5_1);
        struct snug_recipe r6;
        CHECK(snug_recipe_init(&r6, "q6_k", NL, 0));
        CHECK(snug_recipe_type(&r6, "blk.9.ffn_up.weight", 2, ne64) == SNUG_DTYPE_Q8_0);
        struct snug_recipe r0;
        CHECK(snug_recipe_init(&r0, "q4_0", NL, 0));
        CHECK(snug_recipe_type(&r0, "blk.9.ffn_up.weight", 2, ne100) == SNUG_DTYPE_F16);
    }

    /* MoE with 8 experts: attn_v / attn_k -> Q8_0; ffn_down layer from the name */
    {
        struct snug_recipe r;
        CHECK(snug_recipe_init(&r, "q4_k_m", NL, 8));
        uint64_t ne[3] = {512, 1024, 8};
        snug_recipe_count(&r, "blk.3.attn_v.weight");
        CHECK(snug_recipe_type(&r, "blk.3.attn_v.weight", 2, ne) == SNUG_DTYPE_Q8_0);
        CHECK(snug_recipe_type(&r, "blk.3.attn_k.weight", 2, ne) == SNUG_DTYPE_Q8_0);
        CHECK(snug_recipe_type(&r, "blk.4.ffn_down_exps.weight", 3, ne) == SNUG_DTYPE_Q4_K);
        CHECK(snug_recipe_type(&r, "blk.5.ffn_down_exps.weight", 3, ne) == SNUG_DTYPE_Q6_K);
        CHECK(snug_recipe_type(&r, "blk.5.ffn_gate_inp.weight", 2, ne) == SNUG_DTYPE_F32);
        uint64_t ne_col[2] = {512, 1}; /* [512, 1] counts as 1-D (ggml_n_dims) */
        CHECK(snug_recipe_type(&r, "blk.5.ffn_gate_inp_shexp.weight", 2, ne_col) == SNUG_DTYPE_F32);
        CHECK(snug_recipe_type(&r, "blk.5.ffn_up_shexp.weight", 2, ne) == SNUG_DTYPE_Q4_K);
        CHECK(snug_recipe_type(&r, "blk.5.attn_output.weight", 2, ne) == SNUG_DTYPE_Q5_K);
    }

    /* names, file types */
    struct snug_recipe r;
    CHECK(!snug_recipe_init(&r, "q3_k_xl", NL, 0));
    CHECK(!snug_recipe_init(&r, "", NL, 0));
    static const struct {
        const char *n;
        uint32_t ft;
    } FT[] = {{"F32", 0},     {"f16", 1},     {"q4_0", 2},     {"Q4_1", 3},    {"q8_0", 7},
              {"q5_0", 8},    {"q5_1", 9},    {"q4_k", 14},    {"q4_k_m", 15}, {"q5_k", 16},
              {"Q5_K_M", 17}, {"q6_k", 18},   {"bf16", 32},    {"q2_k", 10},   {"q3_k_s", 11},
              {"q3_k_m", 12}, {"q3_k_l", 13}, {"iq2_xxs", 19}, {"iq2_xs", 20}, {"iq3_xxs", 23},
              {"iq1_s", 24},  {"iq4_nl", 25}, {"iq3_s", 26},   {"iq3_m", 27},  {"iq2_s", 28},
              {"iq2_m", 29},  {"iq4_xs", 30}, {"iq1_m", 31},   {"iq3_xs", 22}};
    for (size_t i = 0; i < sizeof FT / sizeof FT[0]; i++) {
        CHECK(snug_recipe_init(&r, FT[i].n, NL, 0));
        CHECKF(snug_recipe_file_type(&r) == FT[i].ft, "%s", FT[i].n);
        /* snug writes every recipe it knows */
        CHECKF(snug_recipe_writable(&r), "%s writable", FT[i].n);
    }
    CHECK(snug_recipe_init(&r, "Q4_K_M", NL, 0) && !strcmp(snug_recipe_name(&r), "q4_k_m"));
    return TEST_DONE();
}
