/* vision_backend.c — the whole vision tower on a backend (`--vision-backend cuda`, docs/vision.md
 * "On CUDA"): a backend instance of its own over the mmproj GGUF (the CUDA one uploads the
 * weights once, at open) with every activation buffer for an image of up to max_patches patches
 * in its work arena. Per image the host cuts the two patch frames and computes the learned
 * positions and rotary angles (vision.c, cheap: O(patches · width)); they are uploaded, and
 * every block (LayerNorm, QKV, 2-D rotary, full attention, output projection, GELU MLP) and the
 * merger run as backend ops; the rows come back once, at the end.
 * Buffers ([rows][floats], N = max_patches, D the width, C = min(N, CHUNK_ROWS)):
 *   h [N][D] residual stream;  q [N][max(3D, 2·3P² + D)] frames + positions, then QKV, then
 *   products;  a [N][D] normed input / attention output / merged windows;  m [C][max(F, M²·D)]
 *   the MLP hidden (C rows at a time: the widest buffer does not grow with the image);
 *   rot [N][head_dim/2];  out [N/M²][out_dim];  the CPU ops' scratch.
 * Products run C rows at a time too, so the CUDA op scratch (bf16 copies of x) is sized for C.
 * Invariant: nothing allocates per image; planned bytes (snug_vision_be_plan: the work arena, op
 * scratch, step inputs and empty slot on the device, the embedding staging on the host, from the
 * limits the open passes) = allocated bytes;
 * an image over max_patches is refused (SNUG_ERR_INTERNAL), never written past a buffer.
 * Read next: vision_impl.h, src/backend/backend.h (the encoder ops), cuda/cuda_encoder.cu. */
#include "vision/vision_impl.h"

#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "kv/kv.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

/* Rows per product and per MLP pass: bounds the MLP buffer and the op scratch. */
#define CHUNK_ROWS 4096

struct vbufs {
    float *h, *q, *a, *m, *rot, *out;
    void *op_work; /* the CPU ops' scratch (matmul, attention scores); unused by CUDA */
};

struct snug_vision_be {
    struct snug_vision *v;
    struct snug_be *be;
    struct vbufs b;
    int64_t max_patches;
};

struct vextent {
    int64_t N, C, wq, wm, rot, out, max_in, max_out, op_work;
};

static struct vextent extent(const struct snug_vision_hparams *hp, int64_t N) {
    int64_t D = hp->hidden, F = hp->ff, P = hp->patch, M2 = (int64_t)hp->merge * hp->merge;
    int64_t PP = 3 * P * P, hd = D / hp->heads;
    struct vextent e = {.N = N, .C = SNUG_MIN(N, (int64_t)CHUNK_ROWS)};
    e.wq = SNUG_MAX(3 * D, 2 * PP + D);
    e.wm = SNUG_MAX(F, M2 * D);
    e.rot = hd / 2;
    e.out = (N / M2) * hp->out_dim;
    e.max_in = SNUG_MAX(SNUG_MAX(PP, D), SNUG_MAX(F, M2 * D));
    e.max_out = SNUG_MAX(SNUG_MAX(3 * D, F), SNUG_MAX(M2 * D, (int64_t)hp->out_dim));
    e.op_work = (int64_t)SNUG_MAX(snug_op_matmul_work_bytes(e.max_in, 1),
                                  snug_op_attention_full_work_bytes(N, 1));
    return e;
}

static size_t al256(size_t n) {
    return (n + 255) & ~(size_t)255;
}

/* The work arena's carve (base NULL: only the total). */
static size_t carve(const struct vextent *e, const struct snug_vision_hparams *hp, uint8_t *base,
                    struct vbufs *b) {
    int64_t D = hp->hidden, N = e->N;
    size_t sz[] = {(size_t)(N * D) * 4,        (size_t)(N * e->wq) * 4,  (size_t)(N * D) * 4,
                   (size_t)(e->C * e->wm) * 4, (size_t)(N * e->rot) * 4, (size_t)e->out * 4,
                   (size_t)e->op_work};
    void **dst[] = {(void **)&b->h,   (void **)&b->q,   (void **)&b->a, (void **)&b->m,
                    (void **)&b->rot, (void **)&b->out, &b->op_work};
    size_t off = 0;
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
        if (base) *dst[i] = base + off;
        off += al256(sz[i]);
    }
    return off + 256;
}

/* The limits the tower's instance opens with; *none is the one slot's empty cache shape (no
 * sequence state). The plan's items are sized from these (snug_vision_be_plan). */
static struct snug_backend_limits be_limits(const struct snug_vision_hparams *hp,
                                            int64_t max_patches, struct snug_kv_shape *none) {
    struct vextent e = extent(hp, max_patches);
    *none = (struct snug_kv_shape){.head_dim = 64, .n_ctx = 1, .type = SNUG_DTYPE_F16};
    return (struct snug_backend_limits){
        .kv_shape = none,
        .kv_bytes = snug_kv_bytes(none),
        .n_slots = 1,
        .work_bytes = carve(&e, hp, NULL, &(struct vbufs){0}),
        .scratch_bytes = snug_backend_plan_cuda_scratch(e.max_in, e.max_out, e.C, 1, 64),
        .n_chunk = (int32_t)e.C,
        .n_embd = 1,
        .n_head = 1,
        .head_dim = 64,
    };
}

void snug_vision_be_plan(const struct snug_vision_hparams *hp, int64_t max_patches,
                         struct snug_vision_be_sizes *out) {
    struct snug_kv_shape none;
    struct snug_backend_limits lim = be_limits(hp, max_patches, &none);
    /* what cuda_backend.c's open allocates for these limits (backend.h's formulas): one
     * slot's arena, the work arena, the op scratch, the step inputs; on the host the
     * embedding staging (host_work_bytes 0: no host work arena) */
    *out = (struct snug_vision_be_sizes){
        .work = lim.work_bytes,
        .scratch = lim.scratch_bytes,
        .step_inputs = snug_backend_plan_step_input_bytes(lim.n_chunk),
        .slot = lim.kv_bytes,
        .host_stage = snug_backend_plan_stage_bytes(lim.n_chunk, lim.n_embd),
    };
}

int snug_vision_be_open(struct snug_vision_be **out, struct snug_vision *v, int backend,
                        int64_t max_patches, struct snug_err *err) {
    *out = NULL;
    const struct snug_vision_hparams *hp = snug_vision_hparams(v);
    if (max_patches < 1 || max_patches > INT32_MAX / 4)
        return snug_err_set(err, SNUG_ERR_INVALID, "vision backend: %lld patches",
                            (long long)max_patches);
    struct snug_vision_be *vb = snug_calloc(1, sizeof *vb);
    if (!vb) return snug_err_set(err, SNUG_ERR_NOMEM, "vision backend: out of memory");
    vb->v = v;
    vb->max_patches = max_patches;
    /* the plan's limits: planned = allocated */
    struct vextent e = extent(hp, max_patches);
    struct snug_kv_shape none;
    struct snug_backend_limits lim = be_limits(hp, max_patches, &none);
    size_t work = lim.work_bytes;
    int rc = snug_backend_open((enum snug_backend)backend, &vb->be, snug_vision_gguf(v), &lim, NULL,
                               err);
    if (rc) {
        snug_free(vb);
        return snug_err_prefix(err, "vision tower on the backend");
    }
    struct snug_arena *a = vb->be->ops->work(vb->be);
    uint8_t *base = snug_arena_alloc(a, work, 256);
    if (!base) {
        snug_backend_close(vb->be);
        snug_free(vb);
        return snug_err_set(err, SNUG_ERR_INTERNAL, "vision backend: work arena too small");
    }
    carve(&e, hp, (uint8_t *)(((uintptr_t)base + 255) & ~(uintptr_t)255), &vb->b);
    v->be = vb;
    *out = vb;
    return SNUG_OK;
}

void snug_vision_be_close(struct snug_vision_be *vb) {
    if (!vb) return;
    vb->v->be = NULL;
    snug_backend_close(vb->be);
    snug_free(vb);
}

size_t snug_vision_be_bytes(const struct snug_vision_be *vb) {
    return vb ? vb->be->ops->bytes(vb->be) : 0;
}

/* y[T][n_out] = W · x, CHUNK_ROWS rows at a time (the op scratch is sized for that many); W's
 * rows are its last dimension (the patch kernel [P][P][3][D] is D rows of 3·P²). */
static void product(struct snug_vision_be *vb, const struct snug_gguf_tensor *w, const float *x,
                    int64_t T, float *y) {
    struct snug_be *be = vb->be;
    int64_t n_out = (int64_t)w->ne[w->n_dims > 1 ? w->n_dims - 1 : 1];
    int64_t n_in = (int64_t)(w->n_elems / (uint64_t)n_out);
    const void *dw = be->ops->weight(be, w, 0);
    for (int64_t r = 0; r < T; r += CHUNK_ROWS) {
        int64_t n = SNUG_MIN((int64_t)CHUNK_ROWS, T - r);
        be->ops->matmul(be, w->type, dw, n_in, n_out, x + r * n_in, n, y + r * n_out,
                        vb->b.op_work);
    }
}

/* A weight vector (f32, checked at load) in the backend's memory. */
static const float *vec(struct snug_vision_be *vb, const struct snug_gguf_tensor *t) {
    return vb->be->ops->weight(vb->be, t, 0);
}

int snug_vision_be_encode(struct snug_vision_be *vb, const float *pixels, int32_t grid_h,
                          int32_t grid_w, float *out, struct vwork *w, struct snug_err *err) {
    const struct snug_vision *v = vb->v;
    const struct snug_vision_hparams *hp = &v->hp;
    struct snug_be *be = vb->be;
    const struct snug_backend_ops *op = be->ops;
    const struct vbufs *b = &vb->b;
    int64_t gh = grid_h, gw = grid_w, N = gh * gw, D = hp->hidden, F = hp->ff, H = hp->heads;
    int64_t hd = D / H, P = hp->patch, PP = 3 * P * P, M2 = (int64_t)hp->merge * hp->merge;
    if (N > vb->max_patches)
        return snug_err_set(err, SNUG_ERR_INTERNAL,
                            "vision backend: an image of %lld patches, opened for at most %lld",
                            (long long)N, (long long)vb->max_patches);
    /* host: the two frames, then the learned positions (into zeroed rows) and the angles */
    float *f0 = b->q, *f1 = b->q + N * PP, *pos = b->q + 2 * N * PP;
    snug_vision_patch_frame(v, pixels, N, 0, w->frame);
    op->upload(be, f0, w->frame, (size_t)(N * PP) * sizeof(float));
    snug_vision_patch_frame(v, pixels, N, 1, w->frame);
    op->upload(be, f1, w->frame, (size_t)(N * PP) * sizeof(float));
    memset(w->h, 0, (size_t)(N * D) * sizeof(float));
    snug_vision_positions(v, gh, gw, w->h, w->rot);
    op->upload(be, pos, w->h, (size_t)(N * D) * sizeof(float));
    op->upload(be, b->rot, w->rot, (size_t)(N * (hd / 2)) * sizeof(float));

    /* patch embedding: h = W0·frame0 + W1·frame1 + bias + positions (the CPU path's order) */
    product(vb, v->patch_w[0], f0, N, b->h);
    product(vb, v->patch_w[1], f1, N, b->a);
    op->add(be, b->h, b->a, N * D);
    op->bias_act(be, b->h, vec(vb, v->patch_b), N, D, SNUG_ACT_NONE);
    op->add(be, b->h, pos, N * D);

    float scale = 1.0f / sqrtf((float)hd);
    for (int i = 0; i < hp->depth; i++) {
        const struct vblock *B = &v->blk[i];
        op->layernorm(be, b->h, vec(vb, B->ln1_w), vec(vb, B->ln1_b), hp->eps, N, D, b->a);
        product(vb, B->qkv_w, b->a, N, b->q); /* [N][q | k | v] */
        op->bias_act(be, b->q, vec(vb, B->qkv_b), N, 3 * D, SNUG_ACT_NONE);
        op->rope_angles(be, b->q, 3 * D, N, H, hd, b->rot);
        op->rope_angles(be, b->q + D, 3 * D, N, H, hd, b->rot);
        op->attention_full(be, b->q, b->q + D, b->q + 2 * D, 3 * D, N, H, hd, scale, b->a,
                           b->op_work);
        product(vb, B->out_w, b->a, N, b->q); /* q is free again: [N][D] */
        op->bias_act(be, b->q, vec(vb, B->out_b), N, D, SNUG_ACT_NONE);
        op->add(be, b->h, b->q, N * D);
        op->layernorm(be, b->h, vec(vb, B->ln2_w), vec(vb, B->ln2_b), hp->eps, N, D, b->a);
        for (int64_t r = 0; r < N; r += CHUNK_ROWS) {
            int64_t n = SNUG_MIN((int64_t)CHUNK_ROWS, N - r);
            product(vb, B->up_w, b->a + r * D, n, b->m);
            op->bias_act(be, b->m, vec(vb, B->up_b), n, F, SNUG_ACT_GELU_TANH);
            product(vb, B->down_w, b->m, n, b->q + r * D);
        }
        op->bias_act(be, b->q, vec(vb, B->down_b), N, D, SNUG_ACT_NONE);
        op->add(be, b->h, b->q, N * D);
    }

    /* merger: LayerNorm per patch → [N/M²][M²·D] windows, GELU MLP to the text width */
    int64_t nw = N / M2;
    op->layernorm(be, b->h, vec(vb, v->post_w), vec(vb, v->post_b), hp->eps, N, D, b->a);
    for (int64_t r = 0; r < nw; r += CHUNK_ROWS) {
        int64_t n = SNUG_MIN((int64_t)CHUNK_ROWS, nw - r);
        product(vb, v->mm0_w, b->a + r * M2 * D, n, b->m);
        op->bias_act(be, b->m, vec(vb, v->mm0_b), n, M2 * D, SNUG_ACT_GELU_ERF);
        product(vb, v->mm2_w, b->m, n, b->out + r * hp->out_dim);
    }
    op->bias_act(be, b->out, vec(vb, v->mm2_b), nw, hp->out_dim, SNUG_ACT_NONE);
    op->download(be, out, b->out, (size_t)(nw * hp->out_dim) * sizeof(float));
    int rc = op->sync(be, err);
    if (rc) snug_err_prefix(err, "vision tower on the %s backend", op->name);
    return rc;
}
