/* gen.c — `snug gen`: presets, --set overrides, the tensor list of a qwen35 / qwen35moe model
 * and the streaming random-weight writer (see gen.h).
 *
 * Weight recipe (our choice, made so a forward pass stays finite): matrices ~ N(0, 0.02);
 * norm weights 1 + N(0, 0.02) (GGUF stores the already "+1"-ed zero-centred norms, docs/qwen35.md
 * §4.4); ssm_a = -U(0.1, 1) (the converter stores -exp(A_log), which is negative); ssm_dt.bias ~
 * N(0, 0.1); conv kernels ~ N(0, 0.1). Every tensor has its own generator seeded from (seed, tensor
 * name), so the file does not depend on the order of generation. With a weights folder
 * (gen.h: weights_dir) the values come from its files instead: how the trained demo model
 * (docs/demo-model.md) is written with this writer. Read next: src/quant/quant.h
 * (recipes), src/tools/vocab.h, src/arch/qwen35.c (the loader).
 */
#include "tools/gen.h"

#include "core/core.h"
#include "gguf/gguf.h"
#include "model/presets.h"
#include "quant/quant.h"
#include "sample/sample.h"
#include "tools/vocab.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- presets ------------------------------------------------------------------------------ */

/* The preset shapes live in one place, src/model/presets.c (the memory planner sizes them
 * too, so a plan and a generated file agree to the byte); this copies them into the gen
 * config. For the demo presets n_vocab stays 0 ("the vocabulary's size") so that
 * --vocab-from can bring any vocabulary. */
int snug_gen_preset(struct snug_gen_config *c, const char *name, struct snug_err *err) {
    struct snug_hparams hp;
    int rc = snug_preset_find(name, &hp, err);
    if (rc) return rc;
    memset(c, 0, sizeof *c);
    snprintf(c->arch, sizeof c->arch, "%.15s", hp.arch);
    c->n_vocab = strncmp(name, "demo", 4) ? hp.n_vocab : 0;
    c->n_layer = hp.n_layer;
    c->n_nextn = hp.n_nextn;
    c->n_ctx_train = hp.n_ctx_train;
    c->n_embd = hp.n_embd;
    c->n_ff = hp.n_ff;
    c->n_head = hp.n_head;
    c->n_head_kv = hp.n_head_kv;
    c->head_dim = hp.head_dim;
    c->n_rot = hp.n_rot;
    c->rope_base = hp.rope_base;
    c->rms_eps = hp.rms_eps;
    c->conv_kernel = hp.conv_kernel;
    c->ssm_d_state = hp.ssm_d_state;
    c->ssm_n_group = hp.ssm_n_group;
    c->ssm_dt_rank = hp.ssm_dt_rank;
    c->full_attn_interval = hp.full_attn_interval;
    c->n_expert = hp.n_expert;
    c->n_expert_used = hp.n_expert_used;
    c->n_ff_exp = hp.n_ff_exp;
    c->n_ff_shexp = hp.n_ff_shexp;
    return SNUG_OK;
}

/* ---- --set key=value (the table parser is presets.c's snug_set_apply) ------------------- */

#define FLD(k, kind, member)                                                                       \
    { k, kind, offsetof(struct snug_gen_config, member) }
static const struct snug_set_field FIELDS[] = {
    FLD("n_vocab", SNUG_SET_U32, n_vocab),
    FLD("n_layer", SNUG_SET_U32, n_layer),
    FLD("nextn_predict_layers", SNUG_SET_U32, n_nextn),
    FLD("context_length", SNUG_SET_U64, n_ctx_train),
    FLD("embedding_length", SNUG_SET_U32, n_embd),
    FLD("feed_forward_length", SNUG_SET_U32, n_ff),
    FLD("attention.head_count", SNUG_SET_U32, n_head),
    FLD("attention.head_count_kv", SNUG_SET_U32, n_head_kv),
    FLD("attention.key_length", SNUG_SET_U32, head_dim),
    FLD("rope.dimension_count", SNUG_SET_U32, n_rot),
    FLD("rope.freq_base", SNUG_SET_F32, rope_base),
    FLD("attention.layer_norm_rms_epsilon", SNUG_SET_F32, rms_eps),
    FLD("ssm.conv_kernel", SNUG_SET_U32, conv_kernel),
    FLD("ssm.state_size", SNUG_SET_U32, ssm_d_state),
    FLD("ssm.group_count", SNUG_SET_U32, ssm_n_group),
    FLD("ssm.time_step_rank", SNUG_SET_U32, ssm_dt_rank),
    FLD("full_attention_interval", SNUG_SET_U32, full_attn_interval),
    FLD("expert_count", SNUG_SET_U32, n_expert),
    FLD("expert_used_count", SNUG_SET_U32, n_expert_used),
    FLD("expert_feed_forward_length", SNUG_SET_U32, n_ff_exp),
    FLD("expert_shared_feed_forward_length", SNUG_SET_U32, n_ff_shexp),
};

int snug_gen_set(struct snug_gen_config *c, const char *kv, struct snug_err *err) {
    return snug_set_apply(c, c->arch, sizeof c->arch, FIELDS, sizeof FIELDS / sizeof FIELDS[0], kv,
                          err);
}

int snug_gen_validate(const struct snug_gen_config *c, struct snug_err *err) {
    bool moe = !strcmp(c->arch, "qwen35moe");
    if (!moe && strcmp(c->arch, "qwen35"))
        return snug_err_set(err, SNUG_ERR_INVALID, "arch '%s': expected qwen35 or qwen35moe",
                            c->arch);
    if (c->n_layer == 0 || c->n_layer + c->n_nextn > 512)
        return snug_err_set(err, SNUG_ERR_INVALID, "n_layer %u (+ %u MTP): expected 1..512 in all",
                            c->n_layer, c->n_nextn);
    if (c->n_embd == 0 || c->n_head == 0 || c->n_head_kv == 0 || c->head_dim == 0 ||
        c->n_head % c->n_head_kv)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "embedding_length %u, head_count %u, head_count_kv %u, key_length %u: "
                            "expected non-zero, heads a multiple of kv heads",
                            c->n_embd, c->n_head, c->n_head_kv, c->head_dim);
    if (c->n_rot == 0 || c->n_rot > c->head_dim || c->n_rot % 2)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "rope.dimension_count %u: expected an even number in 2..%u", c->n_rot,
                            c->head_dim);
    if (c->ssm_n_group == 0 || c->ssm_dt_rank == 0 || c->ssm_d_state == 0 ||
        c->ssm_dt_rank % c->ssm_n_group)
        return snug_err_set(
            err, SNUG_ERR_INVALID,
            "ssm.group_count %u, ssm.time_step_rank %u, ssm.state_size %u: expected "
            "non-zero, time_step_rank a multiple of group_count",
            c->ssm_n_group, c->ssm_dt_rank, c->ssm_d_state);
    if (c->conv_kernel < 1 || c->conv_kernel > 16 || c->full_attn_interval == 0)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "ssm.conv_kernel %u (1..16), full_attention_interval %u (> 0)",
                            c->conv_kernel, c->full_attn_interval);
    if (moe) {
        if (c->n_expert == 0 || c->n_expert_used == 0 || c->n_expert_used > c->n_expert ||
            c->n_ff_exp == 0 || c->n_ff_shexp == 0)
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "qwen35moe: expert_count %u, expert_used_count %u, expert ffn %u, "
                                "shared ffn %u: expected non-zero, used <= count",
                                c->n_expert, c->n_expert_used, c->n_ff_exp, c->n_ff_shexp);
    } else if (c->n_ff == 0) {
        return snug_err_set(err, SNUG_ERR_INVALID, "qwen35: feed_forward_length must be > 0");
    }
    if (!(c->rms_eps > 0) || !(c->rope_base > 0))
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "rope.freq_base %g and layer_norm_rms_epsilon %g must be > 0",
                            (double)c->rope_base, (double)c->rms_eps);
    return SNUG_OK;
}

/* ---- the tensor list ---------------------------------------------------------------------- */

enum init_kind { I_GAUSS, I_NORM, I_SSM_A, I_DT_BIAS, I_CONV };

struct gen_tensor {
    char name[64];
    uint32_t n_dims;
    uint64_t ne[4];
    enum init_kind init;
    uint32_t type;
};

struct tensor_list {
    struct gen_tensor *t;
    size_t n, cap;
};

/* The initialiser of a tensor, from its name (the norms end in "norm.weight"). */
static enum init_kind init_of(const char *name) {
    size_t n = strlen(name);
#define ENDS(sfx) (n >= sizeof(sfx) - 1 && !strcmp(name + n - (sizeof(sfx) - 1), sfx))
    if (ENDS(".ssm_a")) return I_SSM_A;
    if (ENDS(".ssm_dt.bias")) return I_DT_BIAS;
    if (ENDS(".ssm_conv1d.weight")) return I_CONV;
    if (ENDS("norm.weight")) return I_NORM;
    return I_GAUSS;
#undef ENDS
}

static int push_tensor(void *user, const struct snug_tensor_desc *d) {
    struct tensor_list *l = user;
    SNUG_ASSERT(l->n < l->cap);
    struct gen_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", d->name);
    t->n_dims = d->n_dims;
    memcpy(t->ne, d->ne, sizeof t->ne);
    t->init = init_of(d->name);
    return 0;
}

/* Every tensor of docs/qwen35.md §4.3 in llama.cpp's order, from the one shared enumeration
 * (src/model/presets.h, which the memory planner uses too, so plans and files agree to the
 * byte). l->t must hold 32 per layer + 3. */
static void build_tensors(const struct snug_gen_config *c, uint32_t n_vocab,
                          struct tensor_list *l) {
    struct snug_hparams hp;
    memset(&hp, 0, sizeof hp);
    snprintf(hp.arch, sizeof hp.arch, "%s", c->arch);
    hp.n_vocab = n_vocab;
    hp.n_embd = c->n_embd;
    hp.n_layer = c->n_layer;
    hp.n_nextn = c->n_nextn;
    hp.n_ff = c->n_ff;
    hp.n_head = c->n_head;
    hp.n_head_kv = c->n_head_kv;
    hp.head_dim = c->head_dim;
    hp.n_rot = c->n_rot;
    hp.n_ctx_train = c->n_ctx_train;
    hp.conv_kernel = c->conv_kernel;
    hp.ssm_d_state = c->ssm_d_state;
    hp.ssm_n_group = c->ssm_n_group;
    hp.ssm_dt_rank = c->ssm_dt_rank;
    hp.full_attn_interval = c->full_attn_interval;
    hp.n_expert = c->n_expert;
    hp.n_expert_used = c->n_expert_used;
    hp.n_ff_exp = c->n_ff_exp;
    hp.n_ff_shexp = c->n_ff_shexp;
    snug_hparams_derive(&hp);
    snug_model_tensor_list(&hp, push_tensor, l);
}

/* ---- random values ------------------------------------------------------------------------ */

static uint64_t name_seed(uint64_t seed, const char *name) {
    uint64_t h = snug_fnv1a(SNUG_FNV_OFFSET, name, strlen(name)); /* mixed with the seed */
    return h ^ (seed * 0x9E3779B97F4A7C15ull);
}

/* n values of the tensor's distribution (Box-Muller for the normals). */
static void fill_values(struct snug_rng *r, enum init_kind k, float *x, uint64_t n) {
    if (k == I_SSM_A) {
        for (uint64_t i = 0; i < n; i++) x[i] = (float)-(0.1 + 0.9 * snug_rng_uniform(r));
        return;
    }
    const double scale = k == I_DT_BIAS || k == I_CONV ? 0.1 : 0.02;
    const double shift = k == I_NORM ? 1.0 : 0.0;
    for (uint64_t i = 0; i < n; i += 2) {
        double u1 = 1.0 - snug_rng_uniform(r), u2 = snug_rng_uniform(r);
        double m = sqrt(-2.0 * log(u1)), a = 6.283185307179586 * u2;
        x[i] = (float)(shift + scale * m * cos(a));
        if (i + 1 < n) x[i + 1] = (float)(shift + scale * m * sin(a));
    }
}

/* Encode one row of n floats as `type` into dst. */
static void encode_row(uint32_t type, const float *x, void *dst, uint64_t n) {
    if (type == SNUG_DTYPE_F32) {
        memcpy(dst, x, n * sizeof(float));
    } else if (type == SNUG_DTYPE_F16 || type == SNUG_DTYPE_BF16) {
        uint16_t *o = dst;
        for (uint64_t i = 0; i < n; i++)
            o[i] = type == SNUG_DTYPE_F16 ? snug_f32_to_f16(x[i]) : snug_f32_to_bf16(x[i]);
    } else {
        bool ok = snug_quantize_row(type, x, dst, (int64_t)n, NULL);
        SNUG_ASSERT(ok); /* the recipe only hands out computable types */
    }
}

/* ---- writing ------------------------------------------------------------------------------ */

#define DIRECT_MAX_ELEMS (4ull << 20)       /* tensors up to this size are drawn value by value */
#define POOL_ROWS        SNUG_GEN_POOL_ROWS /* rows quantized once for the block pool */
#define OUT_BUF_BYTES    (4u << 20)

struct gen_bufs {
    float *row;    /* [max row elems] */
    uint8_t *pool; /* [POOL_ROWS × max row bytes] */
    uint8_t *out;  /* [OUT_BUF_BYTES], at least one row */
    size_t out_cap;
};

/* Stream one tensor read from DIR/<name>.f32 (float32 in GGUF layout, exactly ne0 × rows
 * values) into the writer, each row encoded as t->type. */
static int write_tensor_from(struct snug_gguf_writer *w, const struct gen_tensor *t,
                             const char *dir, struct gen_bufs *b, const char *path,
                             struct snug_err *err) {
    char fn[4096];
    snprintf(fn, sizeof fn, "%s/%s.f32", dir, t->name);
    const uint64_t ne0 = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    const uint64_t rb = snug_dtype_row_bytes(t->type, ne0);
    FILE *f = fopen(fn, "rb");
    if (!f)
        return snug_err_set(err, SNUG_ERR_IO, "%s: %s (each tensor of the model needs one)", fn,
                            strerror(errno));
    int rc = SNUG_OK;
    if (fseek(f, 0, SEEK_END) || ftell(f) != (long)(ne0 * rows * sizeof(float))) {
        rc = snug_err_set(err, SNUG_ERR_FORMAT,
                          "%s: expected %llu float32 values (%llu x %llu) for %s, the file has "
                          "%ld bytes",
                          fn, (unsigned long long)(ne0 * rows), (unsigned long long)ne0,
                          (unsigned long long)rows, t->name, ftell(f));
        goto done;
    }
    rewind(f);
    const uint64_t rows_per_buf = SNUG_MAX(1, b->out_cap / rb);
    for (uint64_t r0 = 0; r0 < rows; r0 += rows_per_buf) {
        uint64_t nr = SNUG_MIN(rows_per_buf, rows - r0);
        for (uint64_t i = 0; i < nr; i++) {
            if (fread(b->row, sizeof(float), ne0, f) != ne0) {
                rc = snug_err_set(err, SNUG_ERR_IO, "%s: short read", fn);
                goto done;
            }
            for (uint64_t j = 0; j < ne0; j++)
                if (!isfinite(b->row[j])) {
                    rc = snug_err_set(err, SNUG_ERR_FORMAT, "%s: value %llu is not finite", fn,
                                      (unsigned long long)((r0 + i) * ne0 + j));
                    goto done;
                }
            encode_row(t->type, b->row, b->out + i * rb, ne0);
        }
        if (snug_gguf_writer_write(w, b->out, nr * rb)) {
            rc = snug_err_set(err, SNUG_ERR_IO, "%s: writing %s: %s", path, t->name,
                              snug_gguf_writer_error(w));
            goto done;
        }
    }
done:
    fclose(f);
    return rc;
}

int snug_gen_write_rows(const struct snug_gen_rows *g, struct snug_err *err) {
    const uint64_t rb = g->row_bytes, chunk_bytes = g->n_chunks ? rb / g->n_chunks : 0;
    const uint64_t rows_per_buf = SNUG_MAX(1, g->out_cap / rb);
    if (g->n_chunks)
        for (uint64_t i = 0; i < SNUG_GEN_POOL_ROWS; i++)
            g->make_row(g->ctx, g->rng, g->pool + i * rb);
    for (uint64_t r0 = 0; r0 < g->rows; r0 += rows_per_buf) {
        uint64_t nr = SNUG_MIN(rows_per_buf, g->rows - r0);
        for (uint64_t i = 0; i < nr; i++) {
            uint8_t *dst = g->out + i * rb;
            if (!g->n_chunks) {
                g->make_row(g->ctx, g->rng, dst);
                continue;
            }
            for (uint64_t c = 0; c < g->n_chunks; c++) { /* any chunk of any pool row */
                uint64_t pick = snug_rng_next(g->rng) % (SNUG_GEN_POOL_ROWS * g->n_chunks);
                memcpy(dst + c * chunk_bytes, g->pool + pick * chunk_bytes, chunk_bytes);
            }
        }
        if (snug_gguf_writer_write(g->w, g->out, nr * rb))
            return snug_err_set(err, SNUG_ERR_IO, "%s: writing %s: %s", g->path, g->name,
                                snug_gguf_writer_error(g->w));
    }
    return SNUG_OK;
}

/* A row of t: values drawn by its init rule, encoded to its type. */
struct row_ctx {
    const struct gen_tensor *t;
    float *row;
    uint64_t ne0;
};
static void make_row(void *vctx, struct snug_rng *r, uint8_t *dst) {
    const struct row_ctx *c = vctx;
    fill_values(r, c->t->init, c->row, c->ne0);
    encode_row(c->t->type, c->row, dst, c->ne0);
}

/* Stream one tensor's data into the writer. */
static int write_tensor(struct snug_gguf_writer *w, const struct gen_tensor *t, uint64_t seed,
                        struct gen_bufs *b, const char *path, struct snug_err *err) {
    struct snug_rng r;
    snug_rng_seed(&r, name_seed(seed, t->name));
    const uint64_t ne0 = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    const uint64_t rb = snug_dtype_row_bytes(t->type, ne0);
    const uint64_t n_elems = ne0 * rows;
    const uint32_t be = snug_dtype_info(t->type)->block_elems;
    /* pool chunks: one block, or 32 elements for the plain float types */
    const uint64_t chunk_elems = be == 1 ? 32 : be;
    const bool pooled = n_elems > DIRECT_MAX_ELEMS && rows > POOL_ROWS && ne0 % chunk_elems == 0;
    struct row_ctx rc = {.t = t, .row = b->row, .ne0 = ne0};
    struct snug_gen_rows g = {.w = w,
                              .path = path,
                              .name = t->name,
                              .rng = &r,
                              .rows = rows,
                              .row_bytes = rb,
                              .n_chunks = pooled ? ne0 / chunk_elems : 0,
                              .pool = b->pool,
                              .out = b->out,
                              .out_cap = b->out_cap,
                              .make_row = make_row,
                              .ctx = &rc};
    return snug_gen_write_rows(&g, err);
}

/* v's token arrays replaced by toks / types (n entries, v's own strings moved over). */
static void install_tokens(struct snug_vocab *v, struct snug_gguf_str *toks, int32_t *types,
                           uint64_t n) {
    snug_free(v->tokens);
    snug_free(v->token_types);
    v->tokens = toks;
    v->token_types = types;
    v->n_tokens = n;
}

/* Pad v to n tokens with UNUSED tokens "<|unused_N|>" (the tokenizer ignores that type). */
static int pad_vocab(struct snug_vocab *v, uint64_t n, struct snug_err *err) {
    struct snug_gguf_str *toks = snug_calloc(n, sizeof *toks);
    int32_t *types = snug_calloc(n, sizeof *types);
    if (!toks || !types) goto nomem;
    memcpy(toks, v->tokens, v->n_tokens * sizeof *toks);
    memcpy(types, v->token_types, v->n_tokens * sizeof *types);
    for (uint64_t i = v->n_tokens; i < n; i++) {
        char buf[48];
        int len = snprintf(buf, sizeof buf, "<|unused_%llu|>", (unsigned long long)i);
        char *s = snug_malloc((size_t)len + 1);
        if (!s) {
            for (uint64_t j = v->n_tokens; j < i; j++) snug_free((void *)toks[j].data);
            goto nomem;
        }
        memcpy(s, buf, (size_t)len + 1);
        toks[i] = (struct snug_gguf_str){(uint64_t)len, s};
        types[i] = SNUG_TOKEN_UNUSED;
    }
    install_tokens(v, toks, types, n);
    return SNUG_OK;
nomem:
    snug_free(toks);
    snug_free(types);
    return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory padding the vocabulary to %llu",
                        (unsigned long long)n);
}

/* The vision-language tokens of the Qwen2-VL .. Qwen3.6 vocabularies (their tokenizer.json
 * added tokens, special), which an image prompt needs (src/vision/place.c). */
static const char *const VISION_TOKENS[] = {"<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                                            "<|image_pad|>", "<|video_pad|>"};

/* Append each vision token v lacks, as a CONTROL token after the last id. */
static int add_vision_tokens(struct snug_vocab *v, struct snug_err *err) {
    const size_t n_vt = sizeof VISION_TOKENS / sizeof VISION_TOKENS[0];
    bool missing[sizeof VISION_TOKENS / sizeof VISION_TOKENS[0]];
    uint64_t n_add = 0;
    for (size_t k = 0; k < n_vt; k++) {
        size_t len = strlen(VISION_TOKENS[k]);
        missing[k] = true;
        for (uint64_t i = 0; i < v->n_tokens && missing[k]; i++)
            missing[k] =
                !(v->tokens[i].len == len && !memcmp(v->tokens[i].data, VISION_TOKENS[k], len));
        n_add += missing[k];
    }
    if (!n_add) return SNUG_OK;
    const uint64_t n = v->n_tokens + n_add;
    struct snug_gguf_str *toks = snug_calloc(n, sizeof *toks);
    int32_t *types = snug_calloc(n, sizeof *types);
    if (!toks || !types) goto nomem;
    memcpy(toks, v->tokens, v->n_tokens * sizeof *toks);
    memcpy(types, v->token_types, v->n_tokens * sizeof *types);
    uint64_t at = v->n_tokens;
    for (size_t k = 0; k < n_vt; k++) {
        if (!missing[k]) continue;
        size_t len = strlen(VISION_TOKENS[k]);
        char *str = snug_malloc(len + 1);
        if (!str) {
            for (uint64_t j = v->n_tokens; j < at; j++) snug_free((void *)toks[j].data);
            goto nomem;
        }
        memcpy(str, VISION_TOKENS[k], len + 1);
        toks[at] = (struct snug_gguf_str){(uint64_t)len, str};
        types[at++] = SNUG_TOKEN_CONTROL;
    }
    install_tokens(v, toks, types, n);
    return SNUG_OK;
nomem:
    snug_free(toks);
    snug_free(types);
    return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory adding the vision tokens");
}

static int load_vocab(struct snug_vocab *v, const char *from, struct snug_err *err) {
    if (!from) return snug_vocab_builtin(v, err);
    size_t n = strlen(from);
    if (n >= 5 && !strcmp(from + n - 5, ".gguf")) {
        struct snug_gguf *g;
        int rc = snug_gguf_open(&g, from, err);
        if (rc) return rc;
        rc = snug_vocab_from_gguf(v, g, err);
        snug_gguf_close(g);
        return rc;
    }
    return snug_vocab_from_hf_json(v, from, err);
}

#define WCHK(call)                                                                                 \
    do {                                                                                           \
        if (call) {                                                                                \
            rc = snug_err_set(err, SNUG_ERR_IO, "%s: %s", p->out_path, snug_gguf_writer_error(w)); \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* The whole file: config checks, vocabulary, tensor types from the recipe, metadata, data. */
int snug_gen_write(const struct snug_gen_config *c, const struct snug_gen_params *p,
                   struct snug_err *err) {
    int rc = snug_gen_validate(c, err);
    if (rc) return rc;
    if (!p->out_path || !p->type)
        return snug_err_set(err, SNUG_ERR_INVALID, "gen: an output path and a type are needed");
    const bool moe = !strcmp(c->arch, "qwen35moe");
    const uint32_t n_all = c->n_layer + c->n_nextn;
    struct snug_recipe recipe;
    if (!snug_recipe_init(&recipe, p->type, (int)n_all, moe ? (int)c->n_expert : 0))
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "unknown type '%s': expected " SNUG_RECIPES_WRITABLE, p->type);
    if (!snug_recipe_writable(&recipe))
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "gen: snug cannot write %s weights yet (it runs files llama.cpp's "
                            "llama-quantize makes); choose one of " SNUG_RECIPES_WRITABLE,
                            p->type);
    snug_recipe_set_model(&recipe, (int)(c->n_head / c->n_head_kv), false);

    struct snug_vocab v = {0};
    struct tensor_list tl = {0};
    struct gen_bufs b = {0};
    struct snug_gguf_writer *w = NULL;
    rc = load_vocab(&v, p->vocab_from, err);
    if (rc) goto fail;
    if (p->vision_tokens && (rc = add_vision_tokens(&v, err))) goto fail;
    uint64_t n_vocab = c->n_vocab ? c->n_vocab : v.n_tokens;
    if (n_vocab < v.n_tokens) {
        rc = snug_err_set(err, SNUG_ERR_INVALID,
                          "n_vocab %llu is smaller than the vocabulary (%llu tokens%s%s)",
                          (unsigned long long)n_vocab, (unsigned long long)v.n_tokens,
                          p->vocab_from ? " in " : "", p->vocab_from ? p->vocab_from : "");
        goto fail;
    }
    if (n_vocab > INT32_MAX) {
        rc = snug_err_set(err, SNUG_ERR_INVALID, "n_vocab %llu is too large",
                          (unsigned long long)n_vocab);
        goto fail;
    }
    if (n_vocab > v.n_tokens && (rc = pad_vocab(&v, n_vocab, err))) goto fail;

    tl.cap = 3 + (size_t)n_all * 32;
    tl.t = snug_calloc(tl.cap, sizeof *tl.t);
    if (!tl.t) {
        rc = snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
        goto fail;
    }
    build_tensors(c, (uint32_t)n_vocab, &tl);
    for (size_t i = 0; i < tl.n; i++) snug_recipe_count(&recipe, tl.t[i].name);
    uint64_t max_row_elems = 0, max_row_bytes = 0, total = 0;
    for (size_t i = 0; i < tl.n; i++) {
        struct gen_tensor *t = &tl.t[i];
        t->type = snug_recipe_type(&recipe, t->name, t->n_dims, t->ne);
        uint64_t rb = snug_dtype_row_bytes(t->type, t->ne[0]);
        if (rb == 0) { /* no block fits this row length: keep it exact */
            t->type = SNUG_DTYPE_F32;
            rb = snug_dtype_row_bytes(t->type, t->ne[0]);
        }
        max_row_elems = SNUG_MAX(max_row_elems, t->ne[0] + 1);
        max_row_bytes = SNUG_MAX(max_row_bytes, rb);
        total += rb * t->ne[1] * t->ne[2] * t->ne[3];
    }
    b.out_cap = SNUG_MAX((size_t)OUT_BUF_BYTES, (size_t)max_row_bytes);
    b.row = snug_malloc((size_t)max_row_elems * sizeof(float));
    b.pool = snug_malloc((size_t)max_row_bytes * POOL_ROWS);
    b.out = snug_malloc(b.out_cap);
    if (!b.row || !b.pool || !b.out) {
        rc = snug_err_set(err, SNUG_ERR_NOMEM, "out of memory for generation buffers");
        goto fail;
    }

    rc = snug_gguf_writer_open(&w, p->out_path, err);
    if (rc) goto fail;
    char k[128];
    const char *a = c->arch;
#define KEY(suffix) (snprintf(k, sizeof k, "%s.%s", a, suffix), k)
    WCHK(snug_gguf_writer_add_str(w, "general.architecture", a));
    WCHK(snug_gguf_writer_add_str(w, "general.type", "model"));
    WCHK(snug_gguf_writer_add_str(w, "general.name", p->name ? p->name : "snug random"));
    WCHK(snug_gguf_writer_add_u32(w, "general.file_type", snug_recipe_file_type(&recipe)));
    WCHK(snug_gguf_writer_add_u32(w, "general.quantization_version", 2));
    WCHK(snug_gguf_writer_add_u32(w, KEY("block_count"), n_all));
    WCHK(snug_gguf_writer_add_u32(w, KEY("context_length"),
                                  (uint32_t)SNUG_MIN(c->n_ctx_train, UINT32_MAX)));
    WCHK(snug_gguf_writer_add_u32(w, KEY("embedding_length"), c->n_embd));
    if (!moe) WCHK(snug_gguf_writer_add_u32(w, KEY("feed_forward_length"), c->n_ff));
    WCHK(snug_gguf_writer_add_u32(w, KEY("attention.head_count"), c->n_head));
    WCHK(snug_gguf_writer_add_u32(w, KEY("attention.head_count_kv"), c->n_head_kv));
    WCHK(snug_gguf_writer_add_u32(w, KEY("attention.key_length"), c->head_dim));
    WCHK(snug_gguf_writer_add_u32(w, KEY("attention.value_length"), c->head_dim));
    WCHK(snug_gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), c->rms_eps));
    WCHK(snug_gguf_writer_add_f32(w, KEY("rope.freq_base"), c->rope_base));
    WCHK(snug_gguf_writer_add_u32(w, KEY("rope.dimension_count"), c->n_rot));
    /* mrope sections: the 27B's [11, 11, 10, 0] scaled to n_rot / 2 frequency slots */
    int32_t half = (int32_t)c->n_rot / 2, s0 = (half * 11 + 16) / 32;
    int32_t sect[4] = {s0, s0, half - 2 * s0, 0};
    if (sect[2] < 0) sect[0] = half, sect[1] = sect[2] = 0;
    WCHK(snug_gguf_writer_add_arr(w, KEY("rope.dimension_sections"), SNUG_GGUF_INT32, 4, sect));
    WCHK(snug_gguf_writer_add_u32(w, KEY("ssm.conv_kernel"), c->conv_kernel));
    WCHK(snug_gguf_writer_add_u32(w, KEY("ssm.state_size"), c->ssm_d_state));
    WCHK(snug_gguf_writer_add_u32(w, KEY("ssm.group_count"), c->ssm_n_group));
    WCHK(snug_gguf_writer_add_u32(w, KEY("ssm.time_step_rank"), c->ssm_dt_rank));
    WCHK(snug_gguf_writer_add_u32(w, KEY("ssm.inner_size"), c->ssm_dt_rank * c->ssm_d_state));
    WCHK(snug_gguf_writer_add_u32(w, KEY("full_attention_interval"), c->full_attn_interval));
    uint8_t recur[512];
    for (uint32_t i = 0; i < n_all; i++)
        recur[i] = i < c->n_layer && (i + 1) % c->full_attn_interval != 0;
    WCHK(snug_gguf_writer_add_arr(w, KEY("attention.recurrent_layers"), SNUG_GGUF_BOOL, n_all,
                                  recur));
    WCHK(snug_gguf_writer_add_u32(w, KEY("nextn_predict_layers"), c->n_nextn));
    if (moe) {
        WCHK(snug_gguf_writer_add_u32(w, KEY("expert_count"), c->n_expert));
        WCHK(snug_gguf_writer_add_u32(w, KEY("expert_used_count"), c->n_expert_used));
        WCHK(snug_gguf_writer_add_u32(w, KEY("expert_feed_forward_length"), c->n_ff_exp));
        WCHK(snug_gguf_writer_add_u32(w, KEY("expert_shared_feed_forward_length"), c->n_ff_shexp));
    }
#undef KEY
    rc = snug_vocab_write_gguf(&v, w, err);
    if (rc) goto fail;
    for (size_t i = 0; i < tl.n; i++)
        WCHK(
            snug_gguf_writer_add_tensor(w, tl.t[i].name, tl.t[i].type, tl.t[i].n_dims, tl.t[i].ne));
    uint64_t done = 0;
    for (size_t i = 0; i < tl.n; i++) {
        const struct gen_tensor *t = &tl.t[i];
        rc = p->weights_dir ? write_tensor_from(w, t, p->weights_dir, &b, p->out_path, err)
                            : write_tensor(w, t, p->seed, &b, p->out_path, err);
        if (rc) goto fail;
        done += snug_dtype_row_bytes(t->type, t->ne[0]) * t->ne[1] * t->ne[2] * t->ne[3];
        if (p->progress) p->progress(p->progress_user, done, total);
    }
    rc = snug_gguf_writer_close(w, err);
    w = NULL;
    if (rc) goto fail;
    snug_free(b.row);
    snug_free(b.pool);
    snug_free(b.out);
    snug_free(tl.t);
    snug_vocab_free(&v);
    return SNUG_OK;
fail:
    if (w) snug_gguf_writer_abort(w);
    snug_free(b.row);
    snug_free(b.pool);
    snug_free(b.out);
    snug_free(tl.t);
    snug_vocab_free(&v);
    return rc;
}
