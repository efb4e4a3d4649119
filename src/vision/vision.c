/* vision.c — the Qwen3.5/3.6 vision tower on the CPU (docs/vision.md): mmproj loading with
 * every tensor's shape checked, then per image: patch matrix (the Conv3d's two frames),
 * bilinearly resampled learned positions, ViT blocks (LayerNorm, fused QKV, 2-D rotary over row
 * and column, bidirectional attention, GELU-tanh MLP), the merger (LayerNorm, 2×2 windows
 * concatenated, GELU MLP to the text width). Semantics follow Hugging Face transformers'
 * Qwen3_5VisionModel; tests/py/test_vision_fixture.py compares with its outputs.
 * The per-row steps are the encoder ops of src/backend/cpu/ops.h (ops_encoder.c) over the pool;
 * with a backend tower open (vision_backend.c) the host steps here feed it instead.
 * Invariant: snug_vision_encode allocates nothing; float32 activations.
 * Read next: vision.h, vision_impl.h, src/backend/cpu/ops.h, vision_backend.c. */
#include "vision/vision.h"
#include "vision/vision_impl.h"

#include "plan/plan.h"

#include "backend/cpu/ops.h"
#include "core/core.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- load ---------------------------------------------------------------------------------- */
/* The tensor `name` with exactly the dims ne[0..n) (the rest 1); f32 when must_f32. */
static int get_tensor(struct snug_vision *v, tensor *out, const char *name, int n,
                      const int64_t *ne, bool must_f32, struct snug_err *err) {
    tensor t = snug_gguf_find_tensor(v->g, name);
    if (!t) return snug_err_set(err, SNUG_ERR_FORMAT, "mmproj: tensor '%s' is missing", name);
    bool ok = true;
    for (int i = 0; i < SNUG_GGUF_MAX_DIMS; i++) ok &= (int64_t)t->ne[i] == (i < n ? ne[i] : 1);
    if (!ok)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "mmproj: tensor '%s' has shape [%llu, %llu, %llu, %llu], expected "
                            "[%lld, %lld, %lld, %lld]",
                            name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                            (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                            (long long)ne[0], (long long)(n > 1 ? ne[1] : 1),
                            (long long)(n > 2 ? ne[2] : 1), (long long)(n > 3 ? ne[3] : 1));
    const struct snug_dtype_info *ti = snug_dtype_info(t->type);
    if (must_f32 && t->type != SNUG_DTYPE_F32)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED, "mmproj: tensor '%s' is %s, expected f32",
                            name, ti ? ti->name : "?");
    if (!ti || !ti->computable || (int64_t)t->ne[0] % ti->block_elems)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "mmproj: tensor '%s' has type %s, which cannot be computed here", name,
                            ti ? ti->name : "?");
    *out = t;
    return SNUG_OK;
}

#define T1(dst, name, a, f32)                                                                      \
    do {                                                                                           \
        int64_t ne_[1] = {a};                                                                      \
        if ((rc = get_tensor(v, &(dst), name, 1, ne_, f32, err))) goto fail;                       \
    } while (0)
#define T2(dst, name, a, b)                                                                        \
    do {                                                                                           \
        int64_t ne_[2] = {a, b};                                                                   \
        if ((rc = get_tensor(v, &(dst), name, 2, ne_, false, err))) goto fail;                     \
    } while (0)

static int get_i32(const struct snug_gguf *g, const char *key, int32_t *out, struct snug_err *err) {
    uint32_t u;
    int rc = snug_gguf_get_u32(g, key, &u, err);
    if (rc) return rc;
    if (u == 0 || u > 1 << 20)
        return snug_err_set(err, SNUG_ERR_FORMAT, "mmproj: %s = %u is out of range", key, u);
    *out = (int32_t)u;
    return SNUG_OK;
}

static int read_f32x3(const struct snug_gguf *g, const char *key, float *out,
                      struct snug_err *err) {
    enum snug_gguf_type et;
    const void *data;
    uint64_t n;
    int rc = snug_gguf_get_arr(g, key, &et, &n, &data, err);
    if (rc) return rc;
    if (n != 3 || et != SNUG_GGUF_FLOAT32)
        return snug_err_set(err, SNUG_ERR_FORMAT, "mmproj: %s must be 3 floats", key);
    for (int i = 0; i < 3; i++) out[i] = (float)snug_gguf_arr_f64(et, data, (uint64_t)i);
    return SNUG_OK;
}

int snug_vision_load(struct snug_vision **out, const char *path, struct snug_err *err) {
    *out = NULL;
    struct snug_gguf *g = NULL;
    int rc = snug_gguf_open(&g, path, err);
    if (rc == SNUG_OK) rc = snug_vision_from_gguf(out, g, err);
    if (rc) snug_err_prefix(err, "%s", path);
    return rc;
}

int snug_vision_from_gguf(struct snug_vision **out, struct snug_gguf *g, struct snug_err *err) {
    *out = NULL;
    struct snug_vision *v = snug_calloc(1, sizeof *v);
    if (!v) {
        snug_gguf_close(g);
        return snug_err_set(err, SNUG_ERR_NOMEM, "mmproj: out of memory");
    }
    v->g = g;
    int rc;
    struct snug_gguf_str s;
    if ((rc = snug_gguf_get_str(v->g, "clip.projector_type", &s, err))) goto fail;
    if (s.len != 14 || memcmp(s.data, "qwen3vl_merger", 14)) {
        rc = snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                          "mmproj: projector '%.*s' is not supported (expected qwen3vl_merger, the "
                          "Qwen3.5/3.6 vision tower)",
                          (int)(s.len > 64 ? 64 : s.len), s.data);
        goto fail;
    }
    struct snug_vision_hparams *hp = &v->hp;
    if ((rc = get_i32(v->g, "clip.vision.patch_size", &hp->patch, err)) ||
        (rc = get_i32(v->g, "clip.vision.spatial_merge_size", &hp->merge, err)) ||
        (rc = get_i32(v->g, "clip.vision.embedding_length", &hp->hidden, err)) ||
        (rc = get_i32(v->g, "clip.vision.attention.head_count", &hp->heads, err)) ||
        (rc = get_i32(v->g, "clip.vision.feed_forward_length", &hp->ff, err)) ||
        (rc = get_i32(v->g, "clip.vision.block_count", &hp->depth, err)) ||
        (rc = get_i32(v->g, "clip.vision.projection_dim", &hp->out_dim, err)))
        goto fail;
    hp->eps = 1e-6f;
    if ((rc = snug_gguf_get_f32_opt(v->g, "clip.vision.attention.layer_norm_epsilon", &hp->eps,
                                    err)))
        goto fail;
    if ((rc = read_f32x3(v->g, "clip.vision.image_mean", hp->mean, err)) ||
        (rc = read_f32x3(v->g, "clip.vision.image_std", hp->std, err)))
        goto fail;
    hp->rope_theta = 10000.0f; /* transformers' default for the vision rotary; not in the GGUF */
    int64_t D = hp->hidden, P = hp->patch, F = hp->ff, M = hp->merge;
    if (hp->depth > SNUG_VISION_MAX_BLOCKS || D % hp->heads || (D / hp->heads) % 4 || M > 8) {
        rc = snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                          "mmproj: %d blocks, width %d, %d heads, merge %d: expected at most %d "
                          "blocks, a head size divisible by 4 and merge <= 8",
                          hp->depth, hp->hidden, hp->heads, hp->merge, SNUG_VISION_MAX_BLOCKS);
        goto fail;
    }
    {
        int64_t ne4[4] = {P, P, 3, D};
        if ((rc = get_tensor(v, &v->patch_w[0], "v.patch_embd.weight", 4, ne4, false, err)) ||
            (rc = get_tensor(v, &v->patch_w[1], "v.patch_embd.weight.1", 4, ne4, false, err)))
            goto fail;
    }
    T1(v->patch_b, "v.patch_embd.bias", D, true);
    tensor pos = snug_gguf_find_tensor(v->g, "v.position_embd.weight");
    int64_t npos = pos ? (int64_t)pos->ne[1] : 0, side = (int64_t)sqrt((double)npos);
    if (!pos || side * side != npos || side < 2) {
        rc = snug_err_set(err, SNUG_ERR_FORMAT,
                          "mmproj: v.position_embd.weight must be a square table of rows");
        goto fail;
    }
    {
        int64_t ne2[2] = {D, npos};
        if ((rc = get_tensor(v, &v->pos, "v.position_embd.weight", 2, ne2, true, err))) goto fail;
    }
    hp->pos_side = (int32_t)side;
    for (int i = 0; i < hp->depth; i++) {
        struct vblock *b = &v->blk[i];
        char n[64];
#define BN(suffix) (snprintf(n, sizeof n, "v.blk.%d.%s", i, suffix), n)
        T1(b->ln1_w, BN("ln1.weight"), D, true);
        T1(b->ln1_b, BN("ln1.bias"), D, true);
        T2(b->qkv_w, BN("attn_qkv.weight"), D, 3 * D);
        T1(b->qkv_b, BN("attn_qkv.bias"), 3 * D, true);
        T2(b->out_w, BN("attn_out.weight"), D, D);
        T1(b->out_b, BN("attn_out.bias"), D, true);
        T1(b->ln2_w, BN("ln2.weight"), D, true);
        T1(b->ln2_b, BN("ln2.bias"), D, true);
        T2(b->up_w, BN("ffn_up.weight"), D, F);
        T1(b->up_b, BN("ffn_up.bias"), F, true);
        T2(b->down_w, BN("ffn_down.weight"), F, D);
        T1(b->down_b, BN("ffn_down.bias"), D, true);
#undef BN
    }
    T1(v->post_w, "v.post_ln.weight", D, true);
    T1(v->post_b, "v.post_ln.bias", D, true);
    T2(v->mm0_w, "mm.0.weight", M * M * D, M * M * D);
    T1(v->mm0_b, "mm.0.bias", M * M * D, true);
    T2(v->mm2_w, "mm.2.weight", M * M * D, hp->out_dim);
    T1(v->mm2_b, "mm.2.bias", hp->out_dim, true);
    *out = v;
    return SNUG_OK;
fail:
    snug_vision_free(v);
    return rc;
}
#undef T1
#undef T2

void snug_vision_free(struct snug_vision *v) {
    if (!v) return;
    snug_gguf_close(v->g);
    snug_free(v);
}

const struct snug_vision_hparams *snug_vision_hparams(const struct snug_vision *v) {
    return &v->hp;
}

int64_t snug_vision_patch_values(const struct snug_vision *v) {
    return 3 * 2 * (int64_t)v->hp.patch * v->hp.patch;
}

/* ---- encode -------------------------------------------------------------------------------- */
static size_t al64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

size_t snug_vision_work_layout(const struct snug_vision_hparams *hp, int64_t N, int n_threads,
                               bool on_backend, uint8_t *base, struct vwork *w) {
    int64_t D = hp->hidden, F = hp->ff, P = hp->patch, M2 = (int64_t)hp->merge * hp->merge;
    int64_t hd = D / hp->heads, wide = SNUG_MAX(3 * D, F);
    int64_t max_in = SNUG_MAX(SNUG_MAX(3 * P * P, F), M2 * D);
    int nth = n_threads < 1 ? 1 : n_threads;
    int64_t cpu = on_backend ? 0 : 1; /* on a backend the host keeps frame, h and rot only */
    size_t sz[] = {(size_t)(N * 3 * P * P) * 4,
                   (size_t)(N * D) * 4,
                   (size_t)(cpu * N * wide) * 4,
                   (size_t)(cpu * N * SNUG_MAX(D, F)) * 4,
                   (size_t)(cpu * N * D) * 4,
                   cpu ? snug_op_attention_full_work_bytes(N, nth) : 0,
                   (size_t)(N * (hd / 2)) * 4,
                   (size_t)(cpu * N * D) * 4,
                   cpu ? snug_op_matmul_work_bytes(max_in, nth) : 0};
    void **dst[] = {(void **)&w->frame, (void **)&w->h,   (void **)&w->t,
                    (void **)&w->xn,    (void **)&w->att, (void **)&w->score,
                    (void **)&w->rot,   (void **)&w->mg,  &w->mm};
    size_t off = 0;
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
        if (base) *dst[i] = sz[i] ? base + off : NULL;
        off += al64(sz[i]);
    }
    return off + 64;
}

size_t snug_vision_work_bytes(const struct snug_vision *v, int64_t n_patches, int n_threads) {
    return snug_vision_work_bytes_hp(&v->hp, n_patches, n_threads, v->be != NULL);
}
size_t snug_vision_work_bytes_hp(const struct snug_vision_hparams *hp, int64_t n_patches,
                                 int n_threads, bool on_backend) {
    struct vwork w;
    return snug_vision_work_layout(hp, n_patches, n_threads, on_backend, NULL, &w);
}
uint64_t snug_vision_weight_bytes(const struct snug_vision *v) {
    struct snug_plan_weights w;
    snug_plan_weights_from_gguf(v->g, &w);
    return w.total;
}

static const float *F32(tensor t) {
    return (const float *)t->data;
}

const struct snug_gguf *snug_vision_gguf(const struct snug_vision *v) {
    return v->g;
}

/* y[T][n_out] = W · x of weight w (n_out rows of n_in), the CPU op over the pool. */
#define MATMUL(wt, x, T, y)                                                                        \
    snug_op_matmul(pool, (wt)->type, (wt)->data, (int64_t)(wt)->ne[0], (int64_t)(wt)->ne[1], x, T, \
                   y, w.mm)

/* Patch p of the processor's merge-window-major order → its row and column in the patch grid. */
static void patch_rc(int64_t p, int64_t gw, int64_t M, int64_t *r, int64_t *c) {
    int64_t in_col = p % M, in_row = (p / M) % M, bw = gw / M;
    int64_t block_col = (p / (M * M)) % bw, block_row = p / (M * M * bw);
    *r = block_row * M + in_row;
    *c = block_col * M + in_col;
}

/* Bilinear taps (align_corners) of target index i on an axis of `size` into `side` rows. */
static void taps(int64_t i, int64_t size, int64_t side, int64_t *t0, int64_t *t1, float *w0,
                 float *w1) {
    float src = (float)i * (float)(side - 1) / (float)(size > 1 ? size - 1 : 1);
    float fl = floorf(src);
    int64_t f = (int64_t)fl;
    *t0 = SNUG_MIN(SNUG_MAX(f, 0), side - 1);
    *t1 = SNUG_MIN(SNUG_MAX(f + 1, 0), side - 1);
    float d0 = fabsf(src - fl), d1 = fabsf(src - fl - 1.0f);
    *w0 = SNUG_MAX(1.0f - d0, 0.0f);
    *w1 = SNUG_MAX(1.0f - d1, 0.0f);
}

void snug_vision_patch_frame(const struct snug_vision *v, const float *pixels, int64_t N, int f,
                             float *frame) {
    int64_t P = v->hp.patch, PP = 3 * P * P;
    for (int64_t p = 0; p < N; p++)
        for (int64_t c = 0; c < 3; c++)
            memcpy(frame + p * PP + c * P * P,
                   pixels + p * 2 * PP + c * 2 * P * P + (int64_t)f * P * P,
                   (size_t)(P * P) * sizeof(float));
}

void snug_vision_positions(const struct snug_vision *v, int64_t gh, int64_t gw, float *h,
                           float *rot) {
    const struct snug_vision_hparams *hp = &v->hp;
    int64_t M = hp->merge, D = hp->hidden, hd = D / hp->heads, N = gh * gw;
    int64_t side = hp->pos_side, q4 = hd / 4;
    const float *pos = F32(v->pos);
    for (int64_t p = 0; p < N; p++) {
        int64_t r, c, r0, r1, c0, c1;
        float wr0, wr1, wc0, wc1;
        patch_rc(p, gw, M, &r, &c);
        taps(r, gh, side, &r0, &r1, &wr0, &wr1);
        taps(c, gw, side, &c0, &c1, &wc0, &wc1);
        const float *e00 = pos + (r0 * side + c0) * D, *e01 = pos + (r0 * side + c1) * D;
        const float *e10 = pos + (r1 * side + c0) * D, *e11 = pos + (r1 * side + c1) * D;
        float k00 = wr0 * wc0, k01 = wr0 * wc1, k10 = wr1 * wc0, k11 = wr1 * wc1;
        for (int64_t i = 0; i < D; i++)
            h[p * D + i] += ((e00[i] * k00 + e01[i] * k01) + e10[i] * k10) + e11[i] * k11;
    }
    for (int64_t i = 0; i < q4; i++) { /* each frequency once, then every patch's angles */
        float inv = 1.0f / powf(hp->rope_theta, (float)(2 * i) / (float)(hd / 2));
        for (int64_t p = 0; p < N; p++) {
            int64_t r, c;
            patch_rc(p, gw, M, &r, &c);
            rot[p * (hd / 2) + i] = (float)r * inv;
            rot[p * (hd / 2) + q4 + i] = (float)c * inv;
        }
    }
}

int snug_vision_encode(const struct snug_vision *v, struct snug_pool *pool, const float *pixels,
                       int32_t grid_h, int32_t grid_w, float *out, void *work, size_t work_bytes,
                       struct snug_err *err) {
    const struct snug_vision_hparams *hp = &v->hp;
    int64_t M = hp->merge, gh = grid_h, gw = grid_w;
    if (gh < M || gw < M || gh % M || gw % M || gh > 4096 || gw > 4096)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "vision: a grid of %d x %d patches: expected multiples of %d, at most "
                            "4096 each",
                            grid_h, grid_w, hp->merge);
    int64_t N = gh * gw, D = hp->hidden, F = hp->ff, P = hp->patch, H = hp->heads;
    int64_t hd = D / H, PP = 3 * P * P, M2 = M * M;
    int n_threads = pool ? snug_pool_size(pool) : 1;
    bool on_be = v->be != NULL;
    size_t need = snug_vision_work_layout(&v->hp, N, n_threads, on_be, NULL, &(struct vwork){0});
    if (work_bytes < need)
        return snug_err_set(err, SNUG_ERR_BUDGET, "vision: work memory %zu bytes, %zu needed",
                            work_bytes, need);
    struct vwork w;
    snug_vision_work_layout(&v->hp, N, n_threads, on_be,
                            (uint8_t *)(((uintptr_t)work + 63) & ~(uintptr_t)63), &w);
    if (on_be) return snug_vision_be_encode(v->be, pixels, grid_h, grid_w, out, &w, err);

    /* patch embedding: the Conv3d's two frames as two products, plus the bias */
    for (int f = 0; f < 2; f++) {
        snug_vision_patch_frame(v, pixels, N, f, w.frame);
        tensor pw = v->patch_w[f]; /* [P][P][3][D]: D rows of 3·P² */
        snug_op_matmul(pool, pw->type, pw->data, PP, D, w.frame, N, f ? w.t : w.h, w.mm);
    }
    snug_op_add(pool, w.h, w.t, N * D);
    snug_op_bias_act(pool, w.h, F32(v->patch_b), N, D, SNUG_ACT_NONE);
    /* learned positions, bilinearly resampled to the grid; rotary angles by row and column */
    snug_vision_positions(v, gh, gw, w.h, w.rot);

    /* blocks */
    float scale = 1.0f / sqrtf((float)hd);
    for (int b = 0; b < hp->depth; b++) {
        const struct vblock *B = &v->blk[b];
        snug_op_layernorm(pool, w.h, F32(B->ln1_w), F32(B->ln1_b), hp->eps, N, D, w.xn);
        MATMUL(B->qkv_w, w.xn, N, w.t); /* [N][q | k | v] */
        snug_op_bias_act(pool, w.t, F32(B->qkv_b), N, 3 * D, SNUG_ACT_NONE);
        snug_op_rope_angles(pool, w.t, 3 * D, N, H, hd, w.rot);
        snug_op_rope_angles(pool, w.t + D, 3 * D, N, H, hd, w.rot);
        snug_op_attention_full(pool, w.t, w.t + D, w.t + 2 * D, 3 * D, N, H, hd, scale, w.att,
                               w.score);
        MATMUL(B->out_w, w.att, N, w.xn);
        snug_op_bias_act(pool, w.xn, F32(B->out_b), N, D, SNUG_ACT_NONE);
        snug_op_add(pool, w.h, w.xn, N * D);
        snug_op_layernorm(pool, w.h, F32(B->ln2_w), F32(B->ln2_b), hp->eps, N, D, w.att);
        MATMUL(B->up_w, w.att, N, w.xn);
        snug_op_bias_act(pool, w.xn, F32(B->up_b), N, F, SNUG_ACT_GELU_TANH);
        MATMUL(B->down_w, w.xn, N, w.t);
        snug_op_bias_act(pool, w.t, F32(B->down_b), N, D, SNUG_ACT_NONE);
        snug_op_add(pool, w.h, w.t, N * D);
    }

    /* merger: LayerNorm per patch, each window's M² patches side by side, GELU MLP */
    snug_op_layernorm(pool, w.h, F32(v->post_w), F32(v->post_b), hp->eps, N, D, w.mg);
    int64_t nw = N / M2; /* w.mg as [nw][M²·D] */
    MATMUL(v->mm0_w, w.mg, nw, w.t);
    snug_op_bias_act(pool, w.t, F32(v->mm0_b), nw, M2 * D, SNUG_ACT_GELU_ERF);
    MATMUL(v->mm2_w, w.t, nw, out);
    snug_op_bias_act(pool, out, F32(v->mm2_b), nw, hp->out_dim, SNUG_ACT_NONE);
    return SNUG_OK;
}
