/* model.c — snug_model_load: open the GGUF, read the hyper-parameters (docs/qwen35.md §4.2) into
 * struct snug_hparams, pick the architecture from the registry, let it map and shape-check
 * the tensors, load the embedded tokenizer. Owns the gguf handle and the layer table.
 * Invariant: a model that loaded has every tensor the forward pass reads, with checked shapes.
 * Read next: src/arch/arch.c (the registry, the shape checker), src/arch/qwen35.c.
 */
#include "model.h"

#include "quant/quant.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <string.h>

/* ---- hyper-parameters --------------------------------------------------------------------- */
/* Key "<arch>.<suffix>" into buf. */
static const char *akey(char *buf, size_t n, const char *arch, const char *suffix) {
    snprintf(buf, n, "%s.%s", arch, suffix);
    return buf;
}

#define GET_U32(field, suffix)                                                                     \
    do {                                                                                           \
        rc = snug_gguf_get_u32(g, akey(k, sizeof k, hp->arch, suffix), &hp->field, err);           \
        if (rc) return rc;                                                                         \
    } while (0)
#define GET_U32_OPT(field, suffix)                                                                 \
    do {                                                                                           \
        rc = snug_gguf_get_u32_opt(g, akey(k, sizeof k, hp->arch, suffix), &hp->field, err);       \
        if (rc) return rc;                                                                         \
    } while (0)

/* Read every hyper-parameter of docs/qwen35.md §4.2. Optional keys get their documented defaults:
 * full_attention_interval 4, nextn_predict_layers 0, recurrent_layers from the interval rule
 * ((i+1) % interval != 0) unless the bool array is present. */
static int read_hparams(struct snug_gguf *g, struct snug_hparams *hp, struct snug_err *err) {
    char k[128];
    int rc;
    struct snug_gguf_str s;
    rc = snug_gguf_get_str(g, "general.architecture", &s, err);
    if (rc) return rc;
    if (s.len >= sizeof hp->arch)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED, "unsupported architecture '%.*s'",
                            (int)SNUG_MIN(s.len, 64), s.data);
    memcpy(hp->arch, s.data, s.len);
    hp->arch[s.len] = 0;
    if (!snug_arch_find(hp->arch))
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "unsupported architecture '%s' (general.architecture); snug runs "
                            "qwen35 and qwen35moe",
                            hp->arch);

    rc = snug_gguf_get_u64(g, akey(k, sizeof k, hp->arch, "context_length"), &hp->n_ctx_train, err);
    if (rc) return rc;
    GET_U32(n_embd, "embedding_length");
    GET_U32(n_layer_all, "block_count");
    GET_U32_OPT(n_ff, "feed_forward_length");
    GET_U32(n_head, "attention.head_count");
    GET_U32(n_head_kv, "attention.head_count_kv");
    GET_U32(head_dim, "attention.key_length");
    uint32_t vlen = 0;
    rc = snug_gguf_get_u32(g, akey(k, sizeof k, hp->arch, "attention.value_length"), &vlen, err);
    if (rc) return rc;
    if (vlen != hp->head_dim)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "%s.attention.value_length = %u differs from key_length = %u", hp->arch,
                            vlen, hp->head_dim);
    GET_U32(n_rot, "rope.dimension_count");
    rc = snug_gguf_get_f32(g, akey(k, sizeof k, hp->arch, "rope.freq_base"), &hp->rope_base, err);
    if (rc) return rc;
    rc = snug_gguf_get_f32(g, akey(k, sizeof k, hp->arch, "attention.layer_norm_rms_epsilon"),
                           &hp->rms_eps, err);
    if (rc) return rc;
    GET_U32(conv_kernel, "ssm.conv_kernel");
    GET_U32(ssm_d_state, "ssm.state_size");
    GET_U32(ssm_n_group, "ssm.group_count");
    GET_U32(ssm_dt_rank, "ssm.time_step_rank");
    GET_U32(ssm_d_inner, "ssm.inner_size");
    hp->full_attn_interval = 4;
    GET_U32_OPT(full_attn_interval, "full_attention_interval");
    GET_U32_OPT(n_nextn, "nextn_predict_layers");
    GET_U32_OPT(n_expert, "expert_count");
    GET_U32_OPT(n_expert_used, "expert_used_count");
    GET_U32_OPT(n_ff_exp, "expert_feed_forward_length");
    GET_U32_OPT(n_ff_shexp, "expert_shared_feed_forward_length");

    /* rope.dimension_sections: informational for text (all sections share the position). */
    enum snug_gguf_type et;
    uint64_t n;
    const void *data;
    akey(k, sizeof k, hp->arch, "rope.dimension_sections");
    if (snug_gguf_find_key(g, k) >= 0) {
        rc = snug_gguf_get_arr(g, k, &et, &n, &data, err);
        if (rc) return rc;
        for (uint64_t i = 0; i < n && i < 4; i++)
            hp->rope_sections[i] = (uint32_t)snug_gguf_arr_i64(et, data, i);
    }

    const char *file = snug_gguf_path(g);
    if (hp->n_layer_all == 0 || hp->n_layer_all > SNUG_MAX_LAYERS)
        return snug_err_set(err, SNUG_ERR_FORMAT, "%s: %s.block_count = %u: expected 1..%d", file,
                            hp->arch, hp->n_layer_all, SNUG_MAX_LAYERS);
    if (hp->n_nextn >= hp->n_layer_all)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "%s: %s.nextn_predict_layers = %u must be below block_count = %u", file,
                            hp->arch, hp->n_nextn, hp->n_layer_all);
    hp->n_layer = hp->n_layer_all - hp->n_nextn;
    if (hp->n_embd == 0 || hp->n_head == 0 || hp->n_head_kv == 0 || hp->head_dim == 0 ||
        hp->n_head % hp->n_head_kv)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "%s: attention heads %u / kv heads %u / head dim %u: expected "
                            "non-zero, heads a multiple of kv heads",
                            file, hp->n_head, hp->n_head_kv, hp->head_dim);
    if (hp->n_rot == 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "%s: %s.rope.dimension_count = %u: expected an even number in 2..%u",
                            file, hp->arch, hp->n_rot, hp->head_dim);
    if (hp->ssm_n_group == 0 || hp->ssm_dt_rank == 0 || hp->ssm_d_state == 0 ||
        hp->ssm_dt_rank % hp->ssm_n_group || hp->ssm_d_inner != hp->ssm_dt_rank * hp->ssm_d_state)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "%s: DeltaNet shape: group_count %u, time_step_rank %u, state_size %u, "
                            "inner_size %u: expected inner_size = time_step_rank * state_size "
                            "and time_step_rank a multiple of group_count",
                            file, hp->ssm_n_group, hp->ssm_dt_rank, hp->ssm_d_state,
                            hp->ssm_d_inner);
    if (hp->conv_kernel < 1 || hp->conv_kernel > 16)
        return snug_err_set(err, SNUG_ERR_FORMAT, "%s: %s.ssm.conv_kernel = %u: expected 1..16",
                            file, hp->arch, hp->conv_kernel);
    if (hp->full_attn_interval == 0)
        return snug_err_set(err, SNUG_ERR_FORMAT, "%s: %s.full_attention_interval is 0", file,
                            hp->arch);
    for (uint32_t i = 0; i < hp->n_layer_all; i++)
        hp->recurrent[i] = i < hp->n_layer && (i + 1) % hp->full_attn_interval != 0;
    akey(k, sizeof k, hp->arch, "attention.recurrent_layers");
    if (snug_gguf_find_key(g, k) >= 0) {
        rc = snug_gguf_get_arr(g, k, &et, &n, &data, err);
        if (rc) return rc;
        if (n < hp->n_layer)
            return snug_err_set(err, SNUG_ERR_FORMAT,
                                "%s: %s has %llu entries, expected at least %u (one per layer)",
                                file, k, (unsigned long long)n, hp->n_layer);
        for (uint32_t i = 0; i < hp->n_layer; i++)
            hp->recurrent[i] = snug_gguf_arr_i64(et, data, i) != 0;
    }
    return SNUG_OK;
}

/* ---- load / free -------------------------------------------------------------------------- */
int snug_model_load(struct snug_model **out, const struct snug_model_params *params,
                    struct snug_err *err) {
    *out = NULL;
    if (!params || !params->path)
        return snug_err_set(err, SNUG_ERR_INVALID, "snug_model_load: no model path given");
    struct snug_model *m = snug_calloc(1, sizeof *m);
    if (!m) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory loading %s", params->path);
    m->n_threads = params->n_threads;
    int rc = snug_gguf_open(&m->gguf, params->path, err);
    if (rc) { /* the reader's message already names the file */
        snug_model_free(m);
        return rc;
    }
    rc = read_hparams(m->gguf, &m->hp, err);
    if (rc) goto fail;
    m->arch = snug_arch_find(m->hp.arch);
    m->layers = snug_calloc(m->hp.n_layer_all, sizeof *m->layers);
    if (!m->layers) {
        rc = snug_err_set(err, SNUG_ERR_NOMEM, "out of memory loading %s", params->path);
        goto fail;
    }
    rc = m->arch->load(m, err);
    if (rc) goto fail;
    if (snug_gguf_find_key(m->gguf, "tokenizer.ggml.model") >= 0) {
        rc = snug_tokenizer_load(&m->tok, m->gguf, err);
        if (rc) goto fail;
    }
    *out = m;
    return SNUG_OK;
fail:
    snug_err_prefix(err, "loading %s", params->path);
    snug_model_free(m);
    return rc;
}

void snug_model_free(struct snug_model *m) {
    if (!m) return;
    snug_tokenizer_free(m->tok);
    snug_free(m->layers);
    snug_gguf_close(m->gguf);
    snug_free(m);
}

const char *snug_model_arch(const struct snug_model *m) {
    return m->hp.arch;
}
int32_t snug_model_n_vocab(const struct snug_model *m) {
    return (int32_t)m->hp.n_vocab;
}
int32_t snug_model_n_embd(const struct snug_model *m) {
    return (int32_t)m->hp.n_embd;
}
int32_t snug_model_n_layer(const struct snug_model *m) {
    return (int32_t)m->hp.n_layer;
}
int64_t snug_model_n_ctx_train(const struct snug_model *m) {
    return (int64_t)m->hp.n_ctx_train;
}
const struct snug_tokenizer *snug_model_tokenizer(const struct snug_model *m) {
    return m->tok;
}
