/* vision_backend.c — the vision tower's weight products on a backend (`--vision-backend cuda`,
 * docs/vision.md "On CUDA"): a backend instance of its own over the mmproj GGUF (the CUDA one
 * uploads the weights once, at open), with x and y buffers in its work arena for the widest
 * product of an image of up to max_patches patches; snug_vision_encode hands it every product
 * through snug_vision_set_mm (host x uploaded, host y downloaded), everything else of the tower
 * stays on the CPU. Invariant: nothing allocates per product; a product outside the sizes given
 * at open is refused (SNUG_ERR_INTERNAL), never written past a buffer.
 * Read next: vision.h (struct snug_vision_mm), src/backend/backend.h. */
#include "vision.h"

#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "kv/kv.h"
#include "quant/quant.h"

struct snug_vision_be {
    struct snug_vision *v;
    struct snug_be *be;
    float *dx, *dy; /* [max_rows][max_in], [max_rows][max_out] in the backend's memory */
    void *op_work;  /* the CPU matmul's scratch (a device backend uses its own op scratch) */
    int64_t max_rows, max_in, max_out;
};

void snug_vision_mm_extent(const struct snug_vision_hparams *hp, int64_t *max_in,
                           int64_t *max_out) {
    int64_t D = hp->hidden, F = hp->ff, P = hp->patch, M2 = (int64_t)hp->merge * hp->merge;
    *max_in = SNUG_MAX(SNUG_MAX(3 * P * P, D), SNUG_MAX(F, M2 * D));
    *max_out = SNUG_MAX(SNUG_MAX(3 * D, F), SNUG_MAX(M2 * D, (int64_t)hp->out_dim));
}

void snug_vision_be_plan(const struct snug_vision_hparams *hp, int64_t max_patches,
                         uint64_t *work_bytes, uint64_t *scratch_bytes) {
    int64_t in, out;
    snug_vision_mm_extent(hp, &in, &out);
    size_t xb = (size_t)(max_patches * in) * sizeof(float);
    size_t yb = (size_t)(max_patches * out) * sizeof(float);
    size_t wb = snug_op_matmul_work_bytes(in, 1);
    *work_bytes = SNUG_ALIGN_UP(xb, 256) + SNUG_ALIGN_UP(yb, 256) + SNUG_ALIGN_UP(wb, 256);
    *scratch_bytes = snug_backend_plan_cuda_scratch(in, out, max_patches, 1, 64);
}

static int be_product(void *user, const struct snug_gguf_tensor *w, int64_t n_in, int64_t n_out,
                      const float *x, int64_t T, float *y, struct snug_err *err) {
    struct snug_vision_be *vb = user;
    struct snug_be *be = vb->be;
    if (T > vb->max_rows || n_in > vb->max_in || n_out > vb->max_out)
        return snug_err_set(err, SNUG_ERR_INTERNAL,
                            "vision backend: a product of %lld rows %lld -> %lld is outside the "
                            "%lld rows %lld -> %lld it was opened for",
                            (long long)T, (long long)n_in, (long long)n_out,
                            (long long)vb->max_rows, (long long)vb->max_in, (long long)vb->max_out);
    be->ops->upload(be, vb->dx, x, (size_t)(T * n_in) * sizeof(float));
    be->ops->matmul(be, w->type, be->ops->weight(be, w, 0), n_in, n_out, vb->dx, T, vb->dy,
                    vb->op_work);
    be->ops->download(be, y, vb->dy, (size_t)(T * n_out) * sizeof(float));
    int rc = be->ops->sync(be, err);
    if (rc) snug_err_prefix(err, "vision tower on the %s backend", be->ops->name);
    return rc;
}

int snug_vision_be_open(struct snug_vision_be **out, struct snug_vision *v, int backend,
                        int64_t max_patches, struct snug_err *err) {
    *out = NULL;
    const struct snug_vision_hparams *hp = snug_vision_hparams(v);
    if (max_patches < 1 || max_patches > INT32_MAX)
        return snug_err_set(err, SNUG_ERR_INVALID, "vision backend: %lld patches",
                            (long long)max_patches);
    struct snug_vision_be *vb = snug_calloc(1, sizeof *vb);
    if (!vb) return snug_err_set(err, SNUG_ERR_NOMEM, "vision backend: out of memory");
    vb->v = v;
    vb->max_rows = max_patches;
    snug_vision_mm_extent(hp, &vb->max_in, &vb->max_out);
    size_t xb = (size_t)(max_patches * vb->max_in) * sizeof(float);
    size_t yb = (size_t)(max_patches * vb->max_out) * sizeof(float);
    size_t wb = snug_op_matmul_work_bytes(vb->max_in, 1);
    uint64_t work, scratch; /* the plan's numbers (snug_vision_be_plan): planned = allocated */
    snug_vision_be_plan(hp, max_patches, &work, &scratch);
    /* no sequence state: one slot of an empty cache shape */
    struct snug_kv_shape none = {.head_dim = 64, .n_ctx = 1, .type = SNUG_DTYPE_F16};
    struct snug_backend_limits lim = {
        .kv_shape = &none,
        .n_slots = 1,
        .work_bytes = (size_t)work,
        .scratch_bytes = (size_t)scratch,
        .n_chunk = (int32_t)max_patches,
        .n_embd = 1,
        .n_head = 1,
        .head_dim = 64,
    };
    lim.kv_bytes = snug_kv_bytes(&none);
    int rc = snug_backend_open((enum snug_backend)backend, &vb->be, snug_vision_gguf(v), &lim, NULL,
                               err);
    if (rc) {
        snug_free(vb);
        return snug_err_prefix(err, "vision tower on the backend");
    }
    struct snug_arena *a = vb->be->ops->work(vb->be);
    vb->dx = snug_arena_alloc(a, xb, 256);
    vb->dy = snug_arena_alloc(a, yb, 256);
    vb->op_work = snug_arena_alloc(a, wb, 256);
    if (!vb->dx || !vb->dy || !vb->op_work) {
        snug_backend_close(vb->be);
        snug_free(vb);
        return snug_err_set(err, SNUG_ERR_INTERNAL, "vision backend: work arena too small");
    }
    snug_vision_set_mm(v, &(struct snug_vision_mm){.matmul = be_product, .user = vb});
    *out = vb;
    return SNUG_OK;
}

void snug_vision_be_close(struct snug_vision_be *vb) {
    if (!vb) return;
    snug_vision_set_mm(vb->v, NULL);
    snug_backend_close(vb->be);
    snug_free(vb);
}

size_t snug_vision_be_bytes(const struct snug_vision_be *vb) {
    return vb ? vb->be->ops->bytes(vb->be) : 0;
}
