/* test_gguf_recipes.c — snug's low-bit recipes (src/quant/recipe.c) against the files llama.cpp's
 * llama-quantize made with an importance matrix (tests/data/llamacpp/trained-<type>.gguf): for
 * every tensor, in the file's order (which is llama.cpp's processing order), the type snug's
 * recipe picks must be the type llama.cpp stored. The 1-3 bit files were made with layer 4 (the
 * MTP layer, absent from the imatrix) overridden to Q4_K (tests/data/llamacpp/README.md), so
 * blk.4 tensors are skipped for them.
 * Read next: src/quant/recipe.c, tests/unit/test_quant_recipe.c (hand-worked cases). */
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

static void check_file(const char *type, bool skip_blk4) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/llamacpp/trained-%s.gguf", SNUG_SOURCE_DIR, type);
    struct snug_gguf *g = NULL;
    struct snug_err err = {0};
    if (snug_gguf_open(&g, path, &err) != SNUG_OK) {
        CHECKF(0, "%s: %s", path, err.msg);
        return;
    }
    uint32_t n_layer = 0, n_head = 0, n_head_kv = 0;
    CHECK(snug_gguf_get_u32(g, "qwen35.block_count", &n_layer, &err) == SNUG_OK);
    CHECK(snug_gguf_get_u32(g, "qwen35.attention.head_count", &n_head, &err) == SNUG_OK);
    CHECK(snug_gguf_get_u32(g, "qwen35.attention.head_count_kv", &n_head_kv, &err) == SNUG_OK);
    struct snug_recipe r;
    CHECK(snug_recipe_init(&r, type, (int)n_layer, 0));
    snug_recipe_set_model(&r, n_head_kv ? (int)(n_head / n_head_kv) : 0, true);
    int64_t n = snug_gguf_n_tensors(g);
    for (int64_t i = 0; i < n; i++) snug_recipe_count(&r, snug_gguf_tensor(g, i)->name);
    int bad = 0, checked = 0;
    for (int64_t i = 0; i < n; i++) {
        const struct snug_gguf_tensor *t = snug_gguf_tensor(g, i);
        /* the source is F16 with F32 vectors: what the recipe keeps unquantized stays as is */
        uint32_t want = snug_recipe_type(&r, t->name, t->n_dims, t->ne);
        if (want == SNUG_DTYPE_F32 && t->type == SNUG_DTYPE_F32) continue;
        if (skip_blk4 && !strncmp(t->name, "blk.4.", 6)) continue;
        checked++;
        if (want != t->type) {
            bad++;
            fprintf(stderr, "  %s %s: snug %s, llama.cpp %s\n", type, t->name,
                    snug_dtype_info(want)->name, snug_dtype_info(t->type)->name);
        }
    }
    CHECKF(bad == 0, "%s: %d of %d quantized tensors typed differently from llama.cpp", type, bad,
           checked);
    printf("recipe %-8s %d quantized tensors typed as llama.cpp typed them\n", type, checked - bad);
    snug_gguf_close(g);
}

int main(void) {
    check_file("iq4_xs", false);
    check_file("q3_k_m", false);
    check_file("q2_k", false);
    check_file("iq3_xxs", true);
    check_file("iq2_xxs", true);
    check_file("iq1_s", true);
    return TEST_DONE();
}
