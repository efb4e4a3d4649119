/* vision_impl.h — what vision.c shares with vision_backend.c (the tower on a backend): the
 * mmproj's tensor views, the host work layout of one encode, and the host-side steps both
 * paths run (the patch frames, the learned positions, the rotary angles).
 * Invariant: private to src/vision/; the public interface is vision.h.
 * Read next: vision.c, vision_backend.c. */
#ifndef SNUG_VISION_IMPL_H
#define SNUG_VISION_IMPL_H

#include "vision/vision.h"

typedef const struct snug_gguf_tensor *tensor;

struct vblock {
    tensor ln1_w, ln1_b, qkv_w, qkv_b, out_w, out_b, ln2_w, ln2_b, up_w, up_b, down_w, down_b;
};

struct snug_vision {
    struct snug_gguf *g;
    struct snug_vision_hparams hp;
    tensor patch_w[2], patch_b, pos, post_w, post_b, mm0_w, mm0_b, mm2_w, mm2_b;
    struct vblock blk[SNUG_VISION_MAX_BLOCKS];
    struct snug_vision_be *be; /* the tower on a backend (snug_vision_be_open), or NULL: CPU */
};

/* Work layout for N patches (floats unless noted), each 64-byte aligned. */
struct vwork {
    float *frame; /* [N][3·P²] one frame of every patch */
    float *h;     /* [N][D] the residual stream */
    float *t;     /* [N][max(D, 3D, F)] products */
    float *xn;    /* [N][max(D, F)] normed input / MLP hidden */
    float *att;   /* [N][D] attention output before the projection */
    float *score; /* [n_threads][N] one query's scores per thread */
    float *rot;   /* [N][hd/2] rotary angles per patch (hd/4 by row, then hd/4 by column) */
    float *mg;    /* [N/M²][M²·D] merged windows */
    void *mm;     /* snug_op_matmul scratch */
};

/* Lay out the host work of N patches at base (NULL: only size it); returns its bytes. With the
 * tower on a backend the host keeps frame, h and rot only (the other fields are NULL). */
size_t snug_vision_work_layout(const struct snug_vision_hparams *hp, int64_t N, int n_threads,
                               bool on_backend, uint8_t *base, struct vwork *w);
/* Frame f (0, 1) of every patch of pixels into frame [N][3·P²] (the Conv3d's two time steps). */
void snug_vision_patch_frame(const struct snug_vision *v, const float *pixels, int64_t N, int f,
                             float *frame);
/* h[p][:] += the learned position of patch p (bilinearly resampled to the grid); rot[p][:]
 * = its rotary angles (the first head_dim/4 by row, the rest by column). */
void snug_vision_positions(const struct snug_vision *v, int64_t gh, int64_t gw, float *h,
                           float *rot);
/* An encode on the tower's backend (vision_backend.c): w is the host layout with on_backend
 * (frame, h, rot); pixels as snug_vision_encode takes them. */
int snug_vision_be_encode(struct snug_vision_be *vb, const float *pixels, int32_t grid_h,
                          int32_t grid_w, float *out, struct vwork *w, struct snug_err *err);

#endif /* SNUG_VISION_IMPL_H */
