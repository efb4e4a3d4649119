/* test_model_load.c — snug_model_load on the fixtures: every hyper-parameter of docs/qwen35.md §4.2
 * read as the HF configs say (each fixture folder's config.json), layer types, the MTP block
 * mapped, the plan's sizes by hand arithmetic; and the failures a user can cause: a tensor with a
 * wrong shape (a copy of the trained GGUF rewritten with the GGUF writer) names the tensor and both
 * shapes, an unknown architecture is SNUG_ERR_UNSUPPORTED naming it, a missing file is IO. */
#include "test.h"

#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/quant.h"

/* Copy src to path, changing tensor `alter` to have ne1 = new_ne1 (writing the first bytes of
 * its data) and, if arch != NULL, general.architecture to arch. */
static int rewrite(const char *src_path, const char *path, const char *alter, uint64_t new_ne1,
                   const char *arch) {
    struct snug_err err = {0};
    struct snug_gguf *g = NULL;
    if (snug_gguf_open(&g, src_path, &err)) return fprintf(stderr, "%s\n", err.msg), -1;
    struct snug_gguf_writer *w = NULL;
    if (snug_gguf_writer_open(&w, path, &err)) return fprintf(stderr, "%s\n", err.msg), -1;
    int rc = 0;
    for (int64_t i = 0; i < snug_gguf_n_kv(g) && !rc; i++) {
        const char *k = snug_gguf_key_name(g, i);
        if (arch && !strcmp(k, "general.architecture"))
            rc = snug_gguf_writer_add_str(w, k, arch);
        else
            rc = snug_gguf_writer_copy_kv(w, g, i);
    }
    uint64_t sizes[512];
    int64_t nt = snug_gguf_n_tensors(g);
    for (int64_t i = 0; i < nt && !rc; i++) {
        const struct snug_gguf_tensor *t = snug_gguf_tensor(g, i);
        uint64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        sizes[i] = t->n_bytes;
        if (!strcmp(t->name, alter)) {
            ne[1] = new_ne1;
            sizes[i] = snug_dtype_row_bytes(t->type, ne[0]) * new_ne1;
        }
        rc = snug_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne);
    }
    for (int64_t i = 0; i < nt && !rc; i++)
        rc = snug_gguf_writer_write(w, snug_gguf_tensor(g, i)->data, sizes[i]);
    if (rc) {
        fprintf(stderr, "writer: %s\n", snug_gguf_writer_error(w));
        snug_gguf_writer_abort(w);
    } else {
        rc = snug_gguf_writer_close(w, &err);
        if (rc) fprintf(stderr, "writer close: %s\n", err.msg);
    }
    snug_gguf_close(g);
    return rc;
}

static void test_trained(const char *fx) {
    char path[4096];
    snprintf(path, sizeof path, "%s/trained/trained-f16.gguf", fx);
    struct snug_err err = {0};
    struct snug_model *m = NULL;
    int rc = snug_model_load(&m, &(struct snug_model_params){.path = path}, &err);
    CHECKF(rc == SNUG_OK, "%s", err.msg);
    if (rc) return;
    const struct snug_hparams *hp = &m->hp;
    /* values from fixtures/trained/config.json */
    CHECK(!strcmp(hp->arch, "qwen35"));
    CHECK(hp->n_vocab == 2048 && hp->n_embd == 256 && hp->n_ff == 512);
    CHECK(hp->n_layer_all == 5 && hp->n_nextn == 1 && hp->n_layer == 4);
    CHECK(hp->n_head == 4 && hp->n_head_kv == 2 && hp->head_dim == 64 && hp->n_rot == 16);
    CHECK(hp->rope_base == 1e7f && fabsf(hp->rms_eps - 1e-6f) < 1e-12f);
    CHECK(hp->conv_kernel == 4 && hp->ssm_d_state == 64 && hp->ssm_n_group == 2);
    CHECK(hp->ssm_dt_rank == 6 && hp->ssm_d_inner == 384 && snug_hp_conv_dim(hp) == 640);
    CHECK(hp->full_attn_interval == 4 && hp->n_ctx_train == 262144);
    CHECK(hp->recurrent[0] && hp->recurrent[1] && hp->recurrent[2] && !hp->recurrent[3]);
    CHECK(m->n_rec_layers == 3 && m->n_attn_layers == 1);
    CHECK(m->layers[3].attn_idx == 0 && m->layers[2].rec_idx == 2);
    CHECK(m->output != m->tok_embd); /* untied */
    /* MTP block blk.4: attention + FFN + nextn tensors, loaded for later */
    const struct snug_layer *mtp = &m->layers[4];
    CHECK(mtp->nextn_eh_proj && mtp->nextn_enorm && mtp->nextn_hnorm &&
          mtp->nextn_shared_head_norm && mtp->wq && mtp->ffn_down);
    CHECK(mtp->nextn_eh_proj && mtp->nextn_eh_proj->ne[0] == 512 &&
          mtp->nextn_eh_proj->ne[1] == 256);
    CHECK(snug_model_tokenizer(m) != NULL);
    /* plan: K+V of 1 attention layer × 2 heads × 64 dims; states 3 × (3·640 + 6·64·64) floats */
    struct snug_arch_plan p;
    m->arch->plan(&m->hp, 512, 2, SNUG_KV_F16, &p);
    CHECK(p.kv_bytes_per_token == 2 * 2 * 64 * 2);
    CHECK(p.state_bytes == 3 * (3 * 640 + 6 * 64 * 64) * 4);
    m->arch->plan(&m->hp, 512, 2, SNUG_KV_F32, &p);
    CHECK(p.kv_bytes_per_token == 2 * 2 * 64 * 4);
    size_t w512 = p.work_bytes;
    m->arch->plan(&m->hp, 64, 2, SNUG_KV_F32, &p);
    printf("plan: work %zu bytes at chunk 512, %zu at chunk 64; kv %zu B/token; state %zu B\n",
           w512, p.work_bytes, p.kv_bytes_per_token, p.state_bytes);
    CHECK(p.work_bytes < w512 && p.work_bytes > 64 * 256 * 4 * 3);
    snug_model_free(m);
}

static void test_moe(const char *fx) {
    char path[4096];
    snprintf(path, sizeof path, "%s/moe/moe-f16.gguf", fx);
    struct snug_err err = {0};
    struct snug_model *m = NULL;
    int rc = snug_model_load(&m, &(struct snug_model_params){.path = path}, &err);
    CHECKF(rc == SNUG_OK, "%s", err.msg);
    if (rc) return;
    const struct snug_hparams *hp = &m->hp;
    CHECK(!strcmp(hp->arch, "qwen35moe") && hp->n_nextn == 0 && hp->n_layer == 4);
    CHECK(hp->n_expert == 16 && hp->n_expert_used == 4 && hp->n_ff_exp == 64);
    CHECK(hp->n_ff_shexp == 64 && hp->ssm_dt_rank == 4);
    CHECK(m->layers[0].gate_exps && m->layers[0].gate_exps->ne[2] == 16);
    CHECK(m->layers[3].down_shexp && m->layers[3].gate_inp_shexp);
    snug_model_free(m);
}

static void test_errors(const char *fx) {
    char src[4096];
    snprintf(src, sizeof src, "%s/trained/trained-f16.gguf", fx);
    const char *bad = "test_model_load_bad.gguf";
    struct snug_err err = {0};
    struct snug_model *m = NULL;

    CHECK(rewrite(src, bad, "blk.3.attn_k.weight", 64, NULL) == 0);
    int rc = snug_model_load(&m, &(struct snug_model_params){.path = bad}, &err);
    printf("wrong shape: %s\n", err.msg);
    CHECK(rc == SNUG_ERR_FORMAT && m == NULL);
    CHECK(strstr(err.msg, "blk.3.attn_k.weight") && strstr(err.msg, "expected shape [256, 128]") &&
          strstr(err.msg, "got [256, 64]") && strstr(err.msg, bad));

    CHECK(rewrite(src, bad, "blk.0.ssm_out.weight", 255, NULL) == 0);
    rc = snug_model_load(&m, &(struct snug_model_params){.path = bad}, &err);
    printf("wrong shape: %s\n", err.msg);
    CHECK(rc == SNUG_ERR_FORMAT && strstr(err.msg, "blk.0.ssm_out.weight") &&
          strstr(err.msg, "[384, 256]") && strstr(err.msg, "[384, 255]"));

    CHECK(rewrite(src, bad, "", 0, "mamba9") == 0);
    rc = snug_model_load(&m, &(struct snug_model_params){.path = bad}, &err);
    printf("unknown arch: %s\n", err.msg);
    CHECK(rc == SNUG_ERR_UNSUPPORTED && strstr(err.msg, "mamba9"));
    remove(bad);

    rc = snug_model_load(&m, &(struct snug_model_params){.path = "/nonexistent/x.gguf"}, &err);
    CHECK(rc == SNUG_ERR_IO && m == NULL);
    rc = snug_model_load(&m, &(struct snug_model_params){0}, &err);
    CHECK(rc == SNUG_ERR_INVALID);
    snug_model_free(NULL);
    snug_ctx_free(NULL);
}

int main(void) {
    const char *fx = test_fixtures_dir();
    if (!fx) return TEST_DONE();
    test_trained(fx);
    test_moe(fx);
    test_errors(fx);
    return TEST_DONE();
}
