/* gen_mmproj.c — `snug gen --mmproj-preset`: a random-weight Qwen3.5/3.6 vision tower written as
 * the "mmproj" GGUF llama.cpp's converter makes (convert_hf_to_gguf.py with --mmproj, the
 * Qwen3-VL vision model class: architecture "clip", projector "qwen3vl_merger"). The metadata
 * keys, their order and types, the tensor names, shapes and types are those of a converter
 * output (tests/data/vision/mmproj-f16.gguf; tests/py/test_gen_mmproj.py compares the two), and
 * src/vision/vision.c loads it: matrices (patch kernels, every block's qkv / output / MLP, the
 * merger's two) in the chosen type, vectors and the position table float32.
 * Owns: the tower's tensor list and its value recipe. Invariant: the values depend only on
 * (seed, tensor name, shape, type); the file's tensor bytes equal snug_vision_f16_bytes for f16.
 *
 * Value recipe (our choice, so the tower's rows are finite and O(1) for any image at any depth):
 * LayerNorm weights 1 + N(0, 0.02²), every bias N(0, 0.02²); a matrix of n_in inputs draws
 * N(0, 1/n_in) (unit-variance inputs give unit-variance outputs); the two products that write
 * into the residual stream (attn_out, ffn_down) are further scaled by 1/sqrt(2·depth), as GPT-2
 * scales its residual projections, so the stream's variance stays near its input's after all
 * blocks; each patch kernel (one of the Conv3d's two frames) draws N(0, 1/(2·3·patch²));
 * the learned position table N(0, 0.02²). The merger's LayerNorm and its N(0, 1/n_in) matrices
 * then give projector rows of variance about E[gelu(x)²] ≈ 0.4 whatever the image.
 * Fast like gen.c: a tensor of more than a million values is built from a pool of 32 drawn rows,
 * copied in 32-value chunks picked by the tensor's generator (the real tower, 0.93 GB f16, is
 * written in seconds). Read next: gen.h, src/vision/vision.c (the loader),
 * src/vision/vision_plan.c (snug_vision_preset, snug_vision_f16_bytes). */
#include "tools/gen.h"

#include "core/core.h"
#include "gguf/gguf.h"
#include "model/presets.h"
#include "quant/quant.h"
#include "sample/sample.h"
#include "vision/vision.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- shape --------------------------------------------------------------------------------- */

int snug_gen_mmproj_preset(struct snug_gen_mmproj *c, const char *name, struct snug_err *err) {
    struct snug_vision_hparams hp;
    uint64_t bytes;
    int rc = snug_vision_preset(name, 1, &hp, &bytes, err);
    if (rc) return rc;
    *c = (struct snug_gen_mmproj){.depth = (uint32_t)hp.depth,
                                  .hidden = (uint32_t)hp.hidden,
                                  .ff = (uint32_t)hp.ff,
                                  .heads = (uint32_t)hp.heads,
                                  .patch = (uint32_t)hp.patch,
                                  .merge = (uint32_t)hp.merge,
                                  .image_size = (uint32_t)(hp.pos_side * hp.patch),
                                  .out_dim = 0,
                                  .eps = hp.eps};
    return SNUG_OK;
}

#define FLD(k, kind, member)                                                                       \
    { k, kind, offsetof(struct snug_gen_mmproj, member) }
static const struct snug_set_field MMPROJ_FIELDS[] = {
    FLD("block_count", SNUG_SET_U32, depth),
    FLD("embedding_length", SNUG_SET_U32, hidden),
    FLD("feed_forward_length", SNUG_SET_U32, ff),
    FLD("attention.head_count", SNUG_SET_U32, heads),
    FLD("patch_size", SNUG_SET_U32, patch),
    FLD("spatial_merge_size", SNUG_SET_U32, merge),
    FLD("image_size", SNUG_SET_U32, image_size),
    FLD("projection_dim", SNUG_SET_U32, out_dim),
    FLD("attention.layer_norm_epsilon", SNUG_SET_F32, eps),
};
#undef FLD

int snug_gen_mmproj_set(struct snug_gen_mmproj *c, const char *kv, struct snug_err *err) {
    const size_t n_fields = sizeof MMPROJ_FIELDS / sizeof MMPROJ_FIELDS[0];
    const char *eq = strchr(kv, '=');
    const size_t klen = eq ? (size_t)(eq - kv) : strlen(kv);
    bool known = false; /* checked here: snug_set_apply would also take "arch" */
    for (size_t i = 0; i < n_fields && !known; i++)
        known = strlen(MMPROJ_FIELDS[i].key) == klen && !strncmp(MMPROJ_FIELDS[i].key, kv, klen);
    if (!known)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "--set '%s': unknown mmproj key; known (clip.vision.*): block_count "
                            "embedding_length feed_forward_length attention.head_count patch_size "
                            "spatial_merge_size image_size projection_dim "
                            "attention.layer_norm_epsilon",
                            kv);
    char arch[16] = "clip";
    return snug_set_apply(c, arch, sizeof arch, MMPROJ_FIELDS, n_fields, kv, err);
}

int snug_gen_mmproj_text_width(const char *text_model, uint32_t *out, struct snug_err *err) {
    struct snug_gguf *g;
    int rc = snug_gguf_open(&g, text_model, err);
    if (rc) return rc;
    struct snug_gguf_str arch;
    char key[96];
    rc = snug_gguf_get_str(g, "general.architecture", &arch, err);
    if (!rc) {
        snprintf(key, sizeof key, "%.*s.embedding_length", (int)SNUG_MIN(arch.len, 64), arch.data);
        if (snug_gguf_get_u32(g, key, out, err))
            rc = snug_err_set(err, SNUG_ERR_FORMAT,
                              "%s: no u32 key %s: --text-model takes the text model (qwen35 / "
                              "qwen35moe) the tower is for",
                              text_model, key);
    }
    snug_gguf_close(g);
    return rc;
}

int snug_gen_mmproj_hparams(const struct snug_gen_mmproj *c, struct snug_vision_hparams *hp,
                            struct snug_err *err) {
    if (c->depth < 1 || c->depth > SNUG_VISION_MAX_BLOCKS)
        return snug_err_set(err, SNUG_ERR_INVALID, "mmproj block_count %u: expected 1..%d",
                            c->depth, SNUG_VISION_MAX_BLOCKS);
    if (c->hidden < 4 || c->hidden > 65536 || c->heads < 1 || c->hidden % c->heads ||
        (c->hidden / c->heads) % 4)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "mmproj embedding_length %u, attention.head_count %u: expected a head "
                            "size divisible by 4",
                            c->hidden, c->heads);
    if (c->ff < 1 || c->ff > 1 << 18 || c->patch < 1 || c->patch > 64 || c->merge < 1 ||
        c->merge > 8)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "mmproj feed_forward_length %u (1..262144), patch_size %u (1..64), "
                            "spatial_merge_size %u (1..8)",
                            c->ff, c->patch, c->merge);
    uint32_t side = c->image_size / c->patch;
    if (c->image_size % c->patch || side < 2 || side > 1024)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "mmproj image_size %u: expected a multiple of patch_size %u, 2..1024 "
                            "patches a side (the position table)",
                            c->image_size, c->patch);
    if (c->out_dim < 1 || c->out_dim > 1 << 18)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "mmproj projection_dim %u: give the text model (--text-model M.gguf: "
                            "its embedding_length) or --set projection_dim=N",
                            c->out_dim);
    if (!(c->eps > 0) || c->eps > 1)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "mmproj attention.layer_norm_epsilon %g: expected (0, 1]",
                            (double)c->eps);
    *hp = (struct snug_vision_hparams){.patch = (int32_t)c->patch,
                                       .merge = (int32_t)c->merge,
                                       .hidden = (int32_t)c->hidden,
                                       .heads = (int32_t)c->heads,
                                       .ff = (int32_t)c->ff,
                                       .depth = (int32_t)c->depth,
                                       .out_dim = (int32_t)c->out_dim,
                                       .pos_side = (int32_t)side,
                                       .eps = c->eps,
                                       .rope_theta = 10000.0f,
                                       .mean = {0.5f, 0.5f, 0.5f},
                                       .std = {0.5f, 0.5f, 0.5f}};
    return SNUG_OK;
}

/* ---- the tensor list ----------------------------------------------------------------------- */

struct mm_tensor {
    char name[48];
    uint32_t n_dims;
    uint64_t ne[4];
    bool matrix;         /* of the file's type; else float32 */
    double shift, scale; /* values shift + scale · N(0, 1) */
};

static void add(struct mm_tensor *t, size_t *n, const char *name, uint32_t n_dims, uint64_t ne0,
                uint64_t ne1, uint64_t ne2, uint64_t ne3, bool matrix, double shift, double scale) {
    struct mm_tensor *x = &t[(*n)++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->n_dims = n_dims;
    x->ne[0] = ne0, x->ne[1] = ne1, x->ne[2] = ne2, x->ne[3] = ne3;
    x->matrix = matrix;
    x->shift = shift;
    x->scale = scale;
}

#define SMALL 0.02 /* biases, LayerNorm jitter, positions */

/* In the converter's order (the fixture's): the blocks, the merger, the post-LayerNorm, the
 * patch embedding, the positions. t holds 12 per block + 10. */
static size_t build_list(const struct snug_vision_hparams *hp, struct mm_tensor *t) {
    const uint64_t D = (uint64_t)hp->hidden, F = (uint64_t)hp->ff, P = (uint64_t)hp->patch;
    const uint64_t M4 = (uint64_t)hp->merge * hp->merge * D, O = (uint64_t)hp->out_dim;
    const uint64_t S = (uint64_t)hp->pos_side;
    const double resid = 1.0 / sqrt(2.0 * hp->depth);
    size_t n = 0;
    char nm[48];
    for (int32_t i = 0; i < hp->depth; i++) {
#define BN(sfx) (snprintf(nm, sizeof nm, "v.blk.%d.%s", (int)i, sfx), nm)
        add(t, &n, BN("attn_out.bias"), 1, D, 1, 1, 1, false, 0, SMALL);
        add(t, &n, BN("attn_out.weight"), 2, D, D, 1, 1, true, 0, resid / sqrt((double)D));
        add(t, &n, BN("attn_qkv.bias"), 1, 3 * D, 1, 1, 1, false, 0, SMALL);
        add(t, &n, BN("attn_qkv.weight"), 2, D, 3 * D, 1, 1, true, 0, 1 / sqrt((double)D));
        add(t, &n, BN("ffn_up.bias"), 1, F, 1, 1, 1, false, 0, SMALL);
        add(t, &n, BN("ffn_up.weight"), 2, D, F, 1, 1, true, 0, 1 / sqrt((double)D));
        add(t, &n, BN("ffn_down.bias"), 1, D, 1, 1, 1, false, 0, SMALL);
        add(t, &n, BN("ffn_down.weight"), 2, F, D, 1, 1, true, 0, resid / sqrt((double)F));
        add(t, &n, BN("ln1.bias"), 1, D, 1, 1, 1, false, 0, SMALL);
        add(t, &n, BN("ln1.weight"), 1, D, 1, 1, 1, false, 1, SMALL);
        add(t, &n, BN("ln2.bias"), 1, D, 1, 1, 1, false, 0, SMALL);
        add(t, &n, BN("ln2.weight"), 1, D, 1, 1, 1, false, 1, SMALL);
#undef BN
    }
    add(t, &n, "mm.0.bias", 1, M4, 1, 1, 1, false, 0, SMALL);
    add(t, &n, "mm.0.weight", 2, M4, M4, 1, 1, true, 0, 1 / sqrt((double)M4));
    add(t, &n, "mm.2.bias", 1, O, 1, 1, 1, false, 0, SMALL);
    add(t, &n, "mm.2.weight", 2, M4, O, 1, 1, true, 0, 1 / sqrt((double)M4));
    add(t, &n, "v.post_ln.bias", 1, D, 1, 1, 1, false, 0, SMALL);
    add(t, &n, "v.post_ln.weight", 1, D, 1, 1, 1, false, 1, SMALL);
    add(t, &n, "v.patch_embd.bias", 1, D, 1, 1, 1, false, 0, SMALL);
    const double kernel = 1 / sqrt(2.0 * 3.0 * (double)(P * P)); /* two frames summed */
    add(t, &n, "v.patch_embd.weight", 4, P, P, 3, D, true, 0, kernel);
    add(t, &n, "v.patch_embd.weight.1", 4, P, P, 3, D, true, 0, kernel);
    add(t, &n, "v.position_embd.weight", 2, D, S * S, 1, 1, false, 0, SMALL);
    return n;
}

/* ---- values -------------------------------------------------------------------------------- */

#define POOL_ROWS       SNUG_GEN_POOL_ROWS
#define POOL_MIN_ELEMS  (1ull << 20) /* smaller tensors are drawn value by value */
#define CHUNK_ELEMS     32
#define OUT_BUFFER_SIZE (4u << 20)

static uint64_t tensor_seed(uint64_t seed, const char *name) {
    uint64_t h = snug_fnv1a(SNUG_FNV_OFFSET, name, strlen(name)); /* mixed with the seed */
    return h ^ (seed * 0x9E3779B97F4A7C15ull);
}

/* n values shift + scale · N(0, 1) (Box-Muller), encoded as type into dst. */
static void draw_row(struct snug_rng *r, const struct mm_tensor *t, uint32_t type, float *x,
                     void *dst, uint64_t n) {
    for (uint64_t i = 0; i < n; i += 2) {
        double u1 = 1.0 - snug_rng_uniform(r), u2 = snug_rng_uniform(r);
        double m = sqrt(-2.0 * log(u1)), a = 6.283185307179586 * u2;
        x[i] = (float)(t->shift + t->scale * m * cos(a));
        if (i + 1 < n) x[i + 1] = (float)(t->shift + t->scale * m * sin(a));
    }
    if (type == SNUG_DTYPE_F32) {
        memcpy(dst, x, n * sizeof(float));
        return;
    }
    uint16_t *o = dst;
    for (uint64_t i = 0; i < n; i++)
        o[i] = type == SNUG_DTYPE_F16 ? snug_f32_to_f16(x[i]) : snug_f32_to_bf16(x[i]);
}

struct mm_bufs {
    float *row;    /* [widest row] */
    uint8_t *pool; /* [POOL_ROWS][widest row bytes] */
    uint8_t *out;  /* [cap], at least one row */
    size_t cap;
};

/* A row of t: draw_row into the row buffer's type. */
struct mm_row_ctx {
    const struct mm_tensor *t;
    uint32_t type;
    float *row;
    uint64_t ne0;
};
static void make_row(void *vctx, struct snug_rng *r, uint8_t *dst) {
    const struct mm_row_ctx *c = vctx;
    draw_row(r, c->t, c->type, c->row, dst, c->ne0);
}

static int write_values(struct snug_gguf_writer *w, const struct mm_tensor *t, uint32_t type,
                        uint64_t seed, struct mm_bufs *b, const char *path, struct snug_err *err) {
    struct snug_rng r;
    snug_rng_seed(&r, tensor_seed(seed, t->name));
    const uint64_t ne0 = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    const uint64_t esz = type == SNUG_DTYPE_F32 ? 4 : 2, rb = ne0 * esz;
    const bool pooled = ne0 * rows > POOL_MIN_ELEMS && rows > POOL_ROWS && ne0 % CHUNK_ELEMS == 0;
    struct mm_row_ctx rc = {.t = t, .type = type, .row = b->row, .ne0 = ne0};
    struct snug_gen_rows g = {.w = w,
                              .path = path,
                              .name = t->name,
                              .rng = &r,
                              .rows = rows,
                              .row_bytes = rb,
                              .n_chunks = pooled ? ne0 / CHUNK_ELEMS : 0,
                              .pool = b->pool,
                              .out = b->out,
                              .out_cap = b->cap,
                              .make_row = make_row,
                              .ctx = &rc};
    return snug_gen_write_rows(&g, err);
}

/* general.size_label as the converter writes it: the parameter count in K / M / B / T with at
 * least two significant digits ("268K", "1.2M", "461M"). */
static void size_label(uint64_t n, char *buf, size_t cap) {
    double x = (double)n;
    const char *sfx = "K";
    if (x > 1e12)
        x *= 1e-12, sfx = "T";
    else if (x > 1e9)
        x *= 1e-9, sfx = "B";
    else if (x > 1e6)
        x *= 1e-6, sfx = "M";
    else
        x *= 1e-3;
    int digits = snprintf(NULL, 0, "%.0f", x);
    if (x < 0.5) digits = 0; /* "0" has no significant digit */
    snprintf(buf, cap, "%.*f%s", digits >= 2 ? 0 : 2 - digits, x, sfx);
}

#define WCHK(call)                                                                                 \
    do {                                                                                           \
        if (call) {                                                                                \
            rc = snug_err_set(err, SNUG_ERR_IO, "%s: %s", p->out_path, snug_gguf_writer_error(w)); \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

int snug_gen_mmproj_write(const struct snug_gen_mmproj *c, const struct snug_gen_params *p,
                          struct snug_err *err) {
    struct snug_vision_hparams hp;
    int rc = snug_gen_mmproj_hparams(c, &hp, err);
    if (rc) return rc;
    if (!p->out_path || !p->type || p->vocab_from || p->weights_dir)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "mmproj: an output path and a type are needed (no vocabulary, no "
                            "weights folder)");
    uint32_t type, file_type;
    if (!strcmp(p->type, "f16"))
        type = SNUG_DTYPE_F16, file_type = 1; /* llama.cpp's LLAMA_FTYPE_MOSTLY_F16 */
    else if (!strcmp(p->type, "bf16"))
        type = SNUG_DTYPE_BF16, file_type = 32; /* LLAMA_FTYPE_MOSTLY_BF16 */
    else if (!strcmp(p->type, "f32"))
        type = SNUG_DTYPE_F32, file_type = 0; /* LLAMA_FTYPE_ALL_F32 */
    else
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "mmproj: --type %s: expected f16, bf16 or f32 (the converter's "
                            "mmproj types)",
                            p->type);

    const size_t cap_tensors = 12 * (size_t)hp.depth + 10;
    struct mm_tensor *t = snug_calloc(cap_tensors, sizeof *t);
    struct mm_bufs b = {0};
    struct snug_gguf_writer *w = NULL;
    if (!t) return snug_err_set(err, SNUG_ERR_NOMEM, "mmproj: out of memory");
    const size_t n = build_list(&hp, t);
    SNUG_ASSERT(n == cap_tensors);
    uint64_t params = 0, total = 0, widest = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t e = t[i].ne[0] * t[i].ne[1] * t[i].ne[2] * t[i].ne[3];
        params += e;
        total += e * (t[i].matrix && type != SNUG_DTYPE_F32 ? 2 : 4);
        widest = SNUG_MAX(widest, t[i].ne[0]);
    }
    b.cap = SNUG_MAX((size_t)OUT_BUFFER_SIZE, (size_t)widest * 4);
    b.row = snug_malloc((size_t)(widest + 1) * sizeof(float));
    b.pool = snug_malloc((size_t)widest * 4 * POOL_ROWS);
    b.out = snug_malloc(b.cap);
    if (!b.row || !b.pool || !b.out) {
        rc = snug_err_set(err, SNUG_ERR_NOMEM, "mmproj: out of memory for buffers");
        goto done;
    }

    /* metadata: the keys of a converter output, in its order */
    rc = snug_gguf_writer_open(&w, p->out_path, err);
    if (rc) goto done;
    char label[32];
    size_label(params, label, sizeof label);
    uint8_t deepstack[SNUG_VISION_MAX_BLOCKS] = {0}; /* Qwen3.5/3.6: no deepstack layers */
    WCHK(snug_gguf_writer_add_str(w, "general.architecture", "clip"));
    WCHK(snug_gguf_writer_add_str(w, "general.type", "mmproj"));
    WCHK(snug_gguf_writer_add_str(w, "general.name", p->name ? p->name : "snug random mmproj"));
    WCHK(snug_gguf_writer_add_str(w, "general.size_label", label));
    WCHK(snug_gguf_writer_add_u32(w, "general.file_type", file_type));
    WCHK(snug_gguf_writer_add_bool(w, "clip.has_vision_encoder", true));
    WCHK(snug_gguf_writer_add_u32(w, "clip.vision.projection_dim", c->out_dim));
    WCHK(snug_gguf_writer_add_u32(w, "clip.vision.image_size", c->image_size));
    WCHK(snug_gguf_writer_add_u32(w, "clip.vision.patch_size", c->patch));
    WCHK(snug_gguf_writer_add_u32(w, "clip.vision.embedding_length", c->hidden));
    WCHK(snug_gguf_writer_add_u32(w, "clip.vision.feed_forward_length", c->ff));
    WCHK(snug_gguf_writer_add_u32(w, "clip.vision.block_count", c->depth));
    WCHK(snug_gguf_writer_add_u32(w, "clip.vision.attention.head_count", c->heads));
    WCHK(snug_gguf_writer_add_arr(w, "clip.vision.image_mean", SNUG_GGUF_FLOAT32, 3, hp.mean));
    WCHK(snug_gguf_writer_add_arr(w, "clip.vision.image_std", SNUG_GGUF_FLOAT32, 3, hp.std));
    WCHK(snug_gguf_writer_add_str(w, "clip.projector_type", "qwen3vl_merger"));
    WCHK(snug_gguf_writer_add_bool(w, "clip.use_gelu", true));
    WCHK(snug_gguf_writer_add_u32(w, "clip.vision.spatial_merge_size", c->merge));
    WCHK(snug_gguf_writer_add_f32(w, "clip.vision.attention.layer_norm_epsilon", c->eps));
    WCHK(snug_gguf_writer_add_arr(w, "clip.vision.is_deepstack_layers", SNUG_GGUF_BOOL, c->depth,
                                  deepstack));
    WCHK(snug_gguf_writer_add_u32(w, "general.quantization_version", 2));
    for (size_t i = 0; i < n; i++)
        WCHK(snug_gguf_writer_add_tensor(w, t[i].name, t[i].matrix ? type : SNUG_DTYPE_F32,
                                         t[i].n_dims, t[i].ne));
    uint64_t done = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t ty = t[i].matrix ? type : SNUG_DTYPE_F32;
        if ((rc = write_values(w, &t[i], ty, p->seed, &b, p->out_path, err))) goto done;
        done += t[i].ne[0] * t[i].ne[1] * t[i].ne[2] * t[i].ne[3] * (ty == SNUG_DTYPE_F32 ? 4 : 2);
        if (p->progress) p->progress(p->progress_user, done, total);
    }
    rc = snug_gguf_writer_close(w, err);
    w = NULL;
done:
    if (w) snug_gguf_writer_abort(w);
    snug_free(b.row);
    snug_free(b.pool);
    snug_free(b.out);
    snug_free(t);
    return rc;
}
