/* presets.c — built-in model shapes (docs/qwen35.md §1) and the enumeration of a model's tensors
 * with their recipe types (see presets.h). Owns no memory: everything is plain data passed to a
 * callback. Invariant: the tensor list is the set the loader (src/arch) requires, in the
 * order llama.cpp's converter writes it, so `snug gen` files and plans agree to the byte.
 * Read next: src/plan/plan.h (the user), src/quant/recipe.c (per-tensor types).
 */
#include "model/presets.h"

#include "quant/quant.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const snug_preset_names[] = {"demo", "demo-moe", "qwen3.6-27b", "qwen3.6-35b-a3b",
                                         NULL};

void snug_hparams_derive(struct snug_hparams *hp) {
    hp->n_layer_all = hp->n_layer + hp->n_nextn;
    hp->ssm_d_inner = hp->ssm_dt_rank * hp->ssm_d_state;
    memset(hp->recurrent, 0, sizeof hp->recurrent);
    for (uint32_t i = 0; i < hp->n_layer && i < SNUG_MAX_LAYERS; i++)
        hp->recurrent[i] = hp->full_attn_interval && (i + 1) % hp->full_attn_interval != 0;
}

/* Shared defaults of the family (docs/qwen35.md §1): 262144 trained positions, rope theta 1e7, eps
 * 1e-6, conv kernel 4, full attention every 4th layer, one MTP block, partial rotary 64 of 256. */
int snug_preset_find(const char *name, struct snug_hparams *hp, struct snug_err *err) {
    memset(hp, 0, sizeof *hp);
    snprintf(hp->arch, sizeof hp->arch, "qwen35");
    hp->n_ctx_train = 262144;
    hp->rope_base = 1e7f;
    hp->rms_eps = 1e-6f;
    hp->conv_kernel = 4;
    hp->full_attn_interval = 4;
    hp->n_nextn = 1;
    if (!strcmp(name, "demo") || !strcmp(name, "demo-moe")) {
        /* the reference fixtures' shapes (docs/testing.md): hidden 256, 4 layers, 4/2 heads of 64,
         * rotary 16, FFN 512, DeltaNet 2 key / 6 value heads of 64; the MoE fixture has 4 value
         * heads, 16 experts (4 used) of width 64, a shared expert of 64 and no MTP block.
         * Vocabulary: the built-in 265 tokens of snug_vocab_builtin (what `snug gen` writes by
         * default). */
        hp->n_vocab = 265;
        hp->n_embd = 256;
        hp->n_layer = 4;
        hp->n_ff = 512;
        hp->n_head = 4;
        hp->n_head_kv = 2;
        hp->head_dim = 64;
        hp->n_rot = 16;
        hp->ssm_d_state = 64;
        hp->ssm_n_group = 2;
        hp->ssm_dt_rank = 6;
        if (!strcmp(name, "demo-moe")) {
            snprintf(hp->arch, sizeof hp->arch, "qwen35moe");
            hp->n_ff = 0;
            hp->ssm_dt_rank = 4;
            hp->n_nextn = 0;
            hp->n_expert = 16;
            hp->n_expert_used = 4;
            hp->n_ff_exp = 64;
            hp->n_ff_shexp = 64;
        }
    } else if (!strcmp(name, "qwen3.6-27b")) { /* docs/qwen35.md §1.1 */
        hp->n_vocab = 248320;
        hp->n_embd = 5120;
        hp->n_layer = 64;
        hp->n_ff = 17408;
        hp->n_head = 24;
        hp->n_head_kv = 4;
        hp->head_dim = 256;
        hp->n_rot = 64;
        hp->ssm_d_state = 128;
        hp->ssm_n_group = 16;
        hp->ssm_dt_rank = 48;
    } else if (!strcmp(name, "qwen3.6-35b-a3b")) { /* docs/qwen35.md §1.2 */
        snprintf(hp->arch, sizeof hp->arch, "qwen35moe");
        hp->n_vocab = 248320;
        hp->n_embd = 2048;
        hp->n_layer = 40;
        hp->n_head = 16;
        hp->n_head_kv = 2;
        hp->head_dim = 256;
        hp->n_rot = 64;
        hp->ssm_d_state = 128;
        hp->ssm_n_group = 16;
        hp->ssm_dt_rank = 32;
        hp->n_expert = 256;
        hp->n_expert_used = 8;
        hp->n_ff_exp = 512;
        hp->n_ff_shexp = 512;
    } else {
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "unknown preset '%s': expected demo, demo-moe, qwen3.6-27b or "
                            "qwen3.6-35b-a3b",
                            name);
    }
    /* rope.dimension_sections: the 27B's [11, 11, 10, 0] (informational for text) */
    hp->rope_sections[0] = hp->rope_sections[1] = 11;
    hp->rope_sections[2] = 10;
    snug_hparams_derive(hp);
    return SNUG_OK;
}

/* ---- overrides ---------------------------------------------------------------------------- */
int snug_set_apply(void *base, char *arch, size_t arch_size, const struct snug_set_field *fields,
                   size_t n_fields, const char *kv, struct snug_err *err) {
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return snug_err_set(err, SNUG_ERR_INVALID, "--set '%s': expected key=value", kv);
    size_t klen = (size_t)(eq - kv);
    const char *val = eq + 1;
    if (klen == 4 && !strncmp(kv, "arch", 4)) {
        if (strcmp(val, "qwen35") && strcmp(val, "qwen35moe"))
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "--set arch=%s: expected qwen35 or qwen35moe", val);
        snprintf(arch, arch_size, "%s", val);
        return SNUG_OK;
    }
    for (size_t i = 0; i < n_fields; i++) {
        const struct snug_set_field *f = &fields[i];
        if (strlen(f->key) != klen || strncmp(f->key, kv, klen)) continue;
        char *end, *at = (char *)base + f->off;
        errno = 0;
        if (f->kind == SNUG_SET_F32) {
            double x = strtod(val, &end);
            if (errno || end == val || *end || !isfinite(x))
                return snug_err_set(err, SNUG_ERR_INVALID, "--set %s: '%s' is not a number", f->key,
                                    val);
            *(float *)at = (float)x;
            return SNUG_OK;
        }
        unsigned long long x = strtoull(val, &end, 10);
        if (errno || end == val || *end || val[0] == '-' ||
            (f->kind == SNUG_SET_U32 && x > UINT32_MAX))
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "--set %s: '%s' is not a non-negative integer%s", f->key, val,
                                f->kind == SNUG_SET_U32 ? " below 2^32" : "");
        if (f->kind == SNUG_SET_U32)
            *(uint32_t *)at = (uint32_t)x;
        else
            *(uint64_t *)at = (uint64_t)x;
        return SNUG_OK;
    }
    char keys[1024];
    size_t o = 0;
    for (size_t i = 0; i < n_fields && o < sizeof keys; i++)
        o += (size_t)snprintf(keys + o, sizeof keys - o, " %s", fields[i].key);
    return snug_err_set(err, SNUG_ERR_INVALID, "--set: unknown key '%.*s'; known: arch%s",
                        (int)klen, kv, keys);
}

#define HPF(k, member, kind)                                                                       \
    { k, kind, offsetof(struct snug_hparams, member) }
static const struct snug_set_field HP_FIELDS[] = {
    HPF("n_vocab", n_vocab, SNUG_SET_U32),
    HPF("n_layer", n_layer, SNUG_SET_U32),
    HPF("nextn_predict_layers", n_nextn, SNUG_SET_U32),
    HPF("context_length", n_ctx_train, SNUG_SET_U64),
    HPF("embedding_length", n_embd, SNUG_SET_U32),
    HPF("feed_forward_length", n_ff, SNUG_SET_U32),
    HPF("attention.head_count", n_head, SNUG_SET_U32),
    HPF("attention.head_count_kv", n_head_kv, SNUG_SET_U32),
    HPF("attention.key_length", head_dim, SNUG_SET_U32),
    HPF("rope.dimension_count", n_rot, SNUG_SET_U32),
    HPF("ssm.conv_kernel", conv_kernel, SNUG_SET_U32),
    HPF("ssm.state_size", ssm_d_state, SNUG_SET_U32),
    HPF("ssm.group_count", ssm_n_group, SNUG_SET_U32),
    HPF("ssm.time_step_rank", ssm_dt_rank, SNUG_SET_U32),
    HPF("full_attention_interval", full_attn_interval, SNUG_SET_U32),
    HPF("expert_count", n_expert, SNUG_SET_U32),
    HPF("expert_used_count", n_expert_used, SNUG_SET_U32),
    HPF("expert_feed_forward_length", n_ff_exp, SNUG_SET_U32),
    HPF("expert_shared_feed_forward_length", n_ff_shexp, SNUG_SET_U32),
};

/* Integers only (the float keys do not change any size). */
int snug_preset_set(struct snug_hparams *hp, const char *kv, struct snug_err *err) {
    int rc = snug_set_apply(hp, hp->arch, sizeof hp->arch, HP_FIELDS,
                            sizeof HP_FIELDS / sizeof HP_FIELDS[0], kv, err);
    if (rc == SNUG_OK) snug_hparams_derive(hp);
    return rc;
}

/* ---- tensor enumeration ------------------------------------------------------------------- */
struct emit {
    snug_tensor_desc_fn fn;
    void *user;
    int rc;
};

/* Hand one tensor to the callback unless an earlier one failed. */
static void emit(struct emit *e, int layer, const char *suffix, uint32_t n_dims, uint64_t ne0,
                 uint64_t ne1, uint64_t ne2) {
    if (e->rc) return;
    struct snug_tensor_desc t = {.n_dims = n_dims, .ne = {ne0, ne1, ne2, 1}};
    if (layer >= 0)
        snprintf(t.name, sizeof t.name, "blk.%d.%s", layer, suffix);
    else
        snprintf(t.name, sizeof t.name, "%s", suffix);
    e->rc = e->fn(e->user, &t);
}

/* Shapes from docs/qwen35.md §4.3 (what src/arch/qwen35*.c checks at load): attention q carries the
 * output gate (2·Hq·D rows), DeltaNet conv_dim = 2·Nk·dk + Nv·dv, MTP blocks are attention
 * blocks plus the nextn.* tensors. */
int snug_model_tensor_list(const struct snug_hparams *hp, snug_tensor_desc_fn fn, void *user) {
    struct emit e = {fn, user, 0};
    const uint64_t H = hp->n_embd, D = hp->head_dim, Hq = hp->n_head, Hkv = hp->n_head_kv;
    const uint64_t dk = hp->ssm_d_state, Nk = hp->ssm_n_group, Nv = hp->ssm_dt_rank;
    const uint64_t di = Nv * dk, cd = 2 * Nk * dk + di, V = hp->n_vocab;
    const bool moe = !strcmp(hp->arch, "qwen35moe");
    emit(&e, -1, "token_embd.weight", 2, H, V, 1);
    emit(&e, -1, "output_norm.weight", 1, H, 1, 1);
    emit(&e, -1, "output.weight", 2, H, V, 1);
    for (uint32_t il = 0; il < hp->n_layer + hp->n_nextn; il++) {
        const int b = (int)il;
        const bool mtp = il >= hp->n_layer;
        emit(&e, b, "attn_norm.weight", 1, H, 1, 1);
        if (!mtp && hp->recurrent[il]) {
            emit(&e, b, "attn_qkv.weight", 2, H, cd, 1);
            emit(&e, b, "attn_gate.weight", 2, H, di, 1);
            emit(&e, b, "ssm_conv1d.weight", 2, hp->conv_kernel, cd, 1);
            emit(&e, b, "ssm_dt.bias", 1, Nv, 1, 1);
            emit(&e, b, "ssm_a", 1, Nv, 1, 1);
            emit(&e, b, "ssm_beta.weight", 2, H, Nv, 1);
            emit(&e, b, "ssm_alpha.weight", 2, H, Nv, 1);
            emit(&e, b, "ssm_norm.weight", 1, dk, 1, 1);
            emit(&e, b, "ssm_out.weight", 2, di, H, 1);
        } else {
            emit(&e, b, "attn_q.weight", 2, H, 2 * Hq * D, 1);
            emit(&e, b, "attn_k.weight", 2, H, Hkv * D, 1);
            emit(&e, b, "attn_v.weight", 2, H, Hkv * D, 1);
            emit(&e, b, "attn_output.weight", 2, Hq * D, H, 1);
            emit(&e, b, "attn_q_norm.weight", 1, D, 1, 1);
            emit(&e, b, "attn_k_norm.weight", 1, D, 1, 1);
        }
        emit(&e, b, "post_attention_norm.weight", 1, H, 1, 1);
        if (moe) {
            const uint64_t E = hp->n_expert, F = hp->n_ff_exp, Fs = hp->n_ff_shexp;
            emit(&e, b, "ffn_gate_inp.weight", 2, H, E, 1);
            emit(&e, b, "ffn_gate_exps.weight", 3, H, F, E);
            emit(&e, b, "ffn_up_exps.weight", 3, H, F, E);
            emit(&e, b, "ffn_down_exps.weight", 3, F, H, E);
            if (Fs) {
                emit(&e, b, "ffn_gate_inp_shexp.weight", 2, H, 1, 1);
                emit(&e, b, "ffn_gate_shexp.weight", 2, H, Fs, 1);
                emit(&e, b, "ffn_up_shexp.weight", 2, H, Fs, 1);
                emit(&e, b, "ffn_down_shexp.weight", 2, Fs, H, 1);
            }
        } else {
            emit(&e, b, "ffn_gate.weight", 2, H, hp->n_ff, 1);
            emit(&e, b, "ffn_up.weight", 2, H, hp->n_ff, 1);
            emit(&e, b, "ffn_down.weight", 2, hp->n_ff, H, 1);
        }
        if (mtp) {
            emit(&e, b, "nextn.eh_proj.weight", 2, 2 * H, H, 1);
            emit(&e, b, "nextn.enorm.weight", 1, H, 1, 1);
            emit(&e, b, "nextn.hnorm.weight", 1, H, 1, 1);
            emit(&e, b, "nextn.shared_head_norm.weight", 1, H, 1, 1);
        }
    }
    return e.rc;
}

/* The two recipe passes over the list: count, then type in the same order. */
struct typing {
    struct snug_recipe r;
    bool second;
    snug_tensor_desc_fn fn;
    void *user;
};

static int typing_pass(void *user, const struct snug_tensor_desc *t) {
    struct typing *ty = user;
    if (!ty->second) {
        snug_recipe_count(&ty->r, t->name);
        return 0;
    }
    struct snug_tensor_desc d = *t;
    d.type = snug_recipe_type(&ty->r, d.name, d.n_dims, d.ne);
    if (snug_dtype_row_bytes(d.type, d.ne[0]) == 0) d.type = SNUG_DTYPE_F32;
    return ty->fn(ty->user, &d);
}

int snug_model_tensor_types(const struct snug_hparams *hp, const char *recipe,
                            snug_tensor_desc_fn fn, void *user, struct snug_err *err) {
    struct typing ty = {.fn = fn, .user = user};
    bool moe = !strcmp(hp->arch, "qwen35moe");
    if (!snug_recipe_init(&ty.r, recipe, (int)(hp->n_layer + hp->n_nextn),
                          moe ? (int)hp->n_expert : 0))
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "unknown weight type '%s': expected f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 "
                            "q5_1 q4_k q5_k q6_k q4_k_m q5_k_m q2_k q3_k_s q3_k_m q3_k_l iq4_nl "
                            "iq4_xs iq3_s iq3_m iq3_xxs iq2_m iq2_s iq2_xs iq2_xxs iq1_m iq1_s",
                            recipe);
    /* files made with an importance matrix, as the low-bit ones are published */
    snug_recipe_set_model(&ty.r, hp->n_head_kv ? (int)(hp->n_head / hp->n_head_kv) : 0, true);
    int rc = snug_model_tensor_list(hp, typing_pass, &ty);
    if (rc) return rc;
    ty.second = true;
    return snug_model_tensor_list(hp, typing_pass, &ty);
}
