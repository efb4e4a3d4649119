/* cuda_backend.c — the CUDA implementation of struct snug_backend_ops (backend.h): each op
 * forwards to cuda_ops.h / cuda_backend.h on the instance's stream, recording the first error;
 * plus the instance's device memory: weights (one allocation per GGUF file, uploaded by the
 * model's first instance and shared, refcounted, by any other), per sequence slot a KV/state
 * arena laid out as attention views + recurrent states (and with speculation its snapshots, MTP
 * cache and draft buffers), and once per instance the work arena the architecture bumps its
 * activations from, the op scratch and the positions. Built into libsnug_cuda.so, whose one
 * exported entry is snug_cuda_backend_module (src/backend/loader.c opens it).
 * Decode-sized steps are recorded as CUDA graphs and replayed (step_begin / step_end: the
 * first sighting of a step's key runs eagerly, the second is captured, later ones replay as one
 * launch; the step's positions and ids live in device memory, so a replay at the next position
 * needs only their upload).
 * Invariant: every cudaMalloc happens in cuda_open (graph instantiation allocates only the
 * driver's own small records); the token path only queues kernels and small synchronous copies
 * (the step's inputs, MoE routing of types without device kernels, logits).
 * Read next: backend.h, cuda_ops.h, src/model/context.c (the user).
 */
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_tp.h"
#include "kv/kv.h"
#include "kv/kvfmt.h"
#include "quant/quant.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(SNUG_MOE_TILE == SNUG_CUDA_MOE_TILE,
               "the MoE tile size of backend.h and the kernels");

#define MAX_FILES 64
#define GRAPH_MAX 16 /* recorded steps kept per instance (least recently used one replaced) */
#define RB_MAX    8  /* read-backs per recorded step */

/* A recorded step (CUDA graph) and the host copies to do after each run of it. */
struct cuda_readback {
    ptrdiff_t dst; /* from the step's host base (step_begin) */
    const void *src;
    size_t bytes;
};
struct cuda_graph {
    uint64_t key;
    cudaGraphExec_t exec; /* NULL until recorded */
    uint32_t seen;        /* eager runs of this key so far */
    bool bad;             /* its recording failed: always eager */
    bool used_slot;
    uint64_t used; /* least-recently-used stamp */
    int n_rb;
    struct cuda_readback rb[RB_MAX];
};

/* One sequence slot's device memory. */
struct cuda_slot {
    void *kv_mem;
    struct snug_kv kv; /* views point into kv_mem (device); views array on the host */
    void *snap_mem, *mtp_mem, *spec_mem; /* speculative decoding (NULL without) */
    struct snug_kv mtp_kv;               /* the MTP block's cache over mtp_mem */
};

struct cuda_be {
    struct snug_be be; /* first: the interface */
    struct snug_cuda cu;
    bool cu_ok;
    uint32_t n_files;
    const uint8_t *hbase[MAX_FILES]; /* host start of each file's tensor data */
    uint8_t *dbase[MAX_FILES];       /* its device copy */
    size_t wbytes[MAX_FILES];
    struct cuda_weights *shared; /* the model's shared device weights (NULL: dbase is ours) */
    int32_t n_slots;
    struct cuda_slot *slots; /* [n_slots] */
    void *work_mem;
    size_t work_bytes;
    struct snug_arena work, host_work;
    void *scratch;
    size_t scratch_bytes;
    int32_t *pos; /* device [n_chunk] */
    float *stage; /* host [n_chunk][H]: embedding rows before upload */
    int64_t stage_floats;
    size_t total;           /* device bytes this context uses (the shared weights included) */
    struct cuda_prof *prof; /* SNUG_CUDA_PROFILE=1: per-op timing (NULL: off, zero cost) */
    bool mv_f32;            /* SNUG_CUDA_MATVEC_F32=1: decode matvecs keep f32 activations */
    bool delta_wy;          /* prompts' delta rule in the WY form (SNUG_DELTA_WY=0|1) */
    /* tensor parallelism (cuda_tp.h): the rank's communicator (borrowed; NULL: one device) and
     * the ops table with all_reduce that be.ops then points to */
    struct snug_cuda_comm *comm;
    struct snug_backend_ops ops_tp;
    int32_t n_chunk;
    /* ops queued so far (each wrapper counts itself): the int8-rounded x in the scratch belongs
     * to (qx_x, qx_in, qx_T) while qx_ops == n_ops, i.e. no op ran since the matmul, norm or
     * elementwise producer that rounded it. The rounding is flat (blocks of 32 consecutive
     * elements, the scales after al256(qx_in·qx_T) bytes), so it serves any product over qx_x
     * of qx_in·qx_T elements; swiglu and sigmoid_mul, which know only their size, record
     * qx_in = n, qx_T = 1. */
    uint64_t n_ops, qx_ops;
    const float *qx_x;
    int64_t qx_in, qx_T;
    /* the most elements a decode product's x holds (SNUG_CUDA_MATVEC_MAX_T rows of the widest
     * matrix input): swiglu and sigmoid_mul round no larger output (a prompt's, which the
     * product after it would round its own way) */
    int64_t decode_x_max;
    /* the same for the expert products' rows in their work memory (moe_matmul) */
    uint64_t mqx_ops;
    const float *mqx_x;
    int64_t mqx_in, mqx_slots;
    const void *mqx_work;
    /* recorded steps (SNUG_CUDA_GRAPHS=0 turns them off, for comparisons) */
    bool graphs_on;
    /* conv_silu_runs / delta_decode_runs as one launch per batch of runs (SNUG_CUDA_RUNS=1);
     * off by default, one launch per run, until measured on a device (docs/perf/server.md) */
    bool runs_on;
    struct cuda_graph graphs[GRAPH_MAX];
    uint64_t graph_clock;
    struct cuda_graph *rec; /* the step being recorded (NULL: none) */
    char *rec_base;         /* its host base: read_back destinations are kept relative to it */
    bool rec_failed;        /* it asked for something a replay cannot repeat */
    uint64_t n_recorded, n_replayed, n_rec_failed;
};

/* ---- SNUG_CUDA_PROFILE=1: every op is bracketed by two cudaEvents and waited for (slow, but
 * each op's device time is exact); the table (count, total ms, share) goes to stderr at close.
 * Ops are keyed by the wrapper's name (__func__), matmuls also by weight type and T class. */
#define PROF_MAX 64
struct cuda_prof {
    cudaEvent_t e0, e1;
    int n;
    const char *name[PROF_MAX], *tag[PROF_MAX];
    int64_t count[PROF_MAX];
    double ms[PROF_MAX];
    int64_t steps;    /* embed calls: one per forward step */
    const char *ptag; /* tag of the op being timed (matmul: its type) */
};
static bool prof_begin(struct cuda_be *c) {
    if (!c->prof) return false;
    cudaEventRecord(c->prof->e0, (cudaStream_t)c->cu.stream);
    return true;
}
static void prof_end(struct cuda_be *c, const char *name) {
    struct cuda_prof *p = c->prof;
    float ms = 0.0f;
    cudaEventRecord(p->e1, (cudaStream_t)c->cu.stream);
    cudaEventSynchronize(p->e1);
    cudaEventElapsedTime(&ms, p->e0, p->e1);
    int i = 0;
    while (i < p->n && (p->name[i] != name || p->tag[i] != p->ptag)) i++;
    if (i == p->n) {
        if (p->n == PROF_MAX) return;
        p->name[i] = name, p->tag[i] = p->ptag, p->count[i] = 0, p->ms[i] = 0.0, p->n++;
    }
    p->count[i]++;
    p->ms[i] += ms;
}
static void prof_print(struct cuda_prof *p) {
    double tot = 0.0;
    for (int i = 0; i < p->n; i++) tot += p->ms[i];
    snug_log(SNUG_LOG_WARN,
             "cuda profile: %lld steps, %.3f ms of device time in ops (%.3f ms per step)\n",
             (long long)p->steps, tot, p->steps ? tot / (double)p->steps : 0.0);
    snug_log(SNUG_LOG_WARN, "cuda profile: %-16s %-12s %10s %12s %10s %7s\n", "op", "detail",
             "count", "total ms", "us/call", "%");
    for (int pass = 0; pass < p->n; pass++) { /* largest first */
        int b = -1;
        for (int i = 0; i < p->n; i++)
            if (p->count[i] >= 0 && (b < 0 || p->ms[i] > p->ms[b])) b = i;
        if (b < 0) break;
        snug_log(SNUG_LOG_WARN, "cuda profile: %-16s %-12s %10lld %12.3f %10.2f %6.2f%%\n",
                 p->name[b] + 3, p->tag[b] ? p->tag[b] : "", (long long)p->count[b], p->ms[b],
                 1e3 * p->ms[b] / (double)(p->count[b] ? p->count[b] : 1),
                 tot > 0 ? 100.0 * p->ms[b] / tot : 0.0);
        p->count[b] = -1;
    }
}

static struct cuda_be *CB(struct snug_be *be) {
    return (struct cuda_be *)be;
}

/* Keep the first error of a step. */
static void keep(struct snug_be *be, int st, struct snug_err *e) {
    if (st != SNUG_OK && be->status == SNUG_OK) {
        be->status = st;
        be->err = *e;
    }
}
/* Record a failure of a runtime call that has no snug status of its own. */
static void bfail(struct snug_be *be, const char *what, cudaError_t e) {
    struct snug_err x = {0};
    keep(be,
         snug_err_set(&x, SNUG_ERR_INTERNAL, "cuda: %s failed: %s", what, cudaGetErrorString(e)),
         &x);
}
#define CK(call)                                                                                   \
    do {                                                                                           \
        struct snug_err e_ = {0};                                                                  \
        struct snug_err *err = &e_;                                                                \
        CB(be)->n_ops++;                                                                           \
        bool prof_ = prof_begin(CB(be));                                                           \
        keep(be, (call), err);                                                                     \
        if (prof_) prof_end(CB(be), __func__);                                                     \
    } while (0)

static const void *cb_weight(struct snug_be *be, const struct snug_gguf_tensor *t, uint64_t off) {
    struct cuda_be *c = CB(be);
    uint32_t f = t->file_idx < c->n_files ? t->file_idx : 0;
    return c->dbase[f] + ((const uint8_t *)t->data - c->hbase[f]) + off;
}
/* Products with few outputs keep f32 activations in a decode step (T <= 8: the one-row-per-block
 * f32 kernel), and over a prompt chunk where the weights have no int8 kernel (f16/bf16: the tiny
 * test models keep their reference precision). Quantized weights of a prompt chunk take the
 * int8 / bf16 tensor-core paths at any width (the shared expert's 512-wide gate and up: 212 µs per
 * 512 tokens on the f32 kernel). The products whose outputs feed decisions (routers, gates, β/α)
 * come through cb_matmul_precise instead and always keep f32 activations. */
#define PRECISE_MAX_OUT 512
/* The prompt's delta rule in the chunked WY form (cuda_delta.cu) instead of the recurrence, its
 * scan on tensor cores: 3.98 ms a layer at the 27B's shape and 8,192 tokens against 9.13 for
 * the recurrence (H100, docs/perf/cuda-kernels.md); SNUG_DELTA_WY=0 the recurrence, =1 the
 * f32 scan. */
#define DELTA_WY_DEFAULT 1
/* Whether the op scratch holds x's first n elements rounded to int8 (the qx_* record above):
 * the op just before rounded exactly this x (no op ran since, so nothing wrote x or the
 * scratch), and as many elements. The rounding is flat, so it is the rounded x of any product
 * of T rows of n_in with T·n_in = n (every int8 product's n_in is a multiple of 32). */
static bool scratch_holds_rounded(const struct cuda_be *c, const float *x, int64_t n) {
    return c->qx_ops == c->n_ops && c->qx_x == x && c->qx_in * c->qx_T == n;
}
/* The op just queued left x ([T][n_in]) rounded to int8 in the op scratch. */
static void record_rounding(struct cuda_be *c, const float *x, int64_t n_in, int64_t T) {
    c->qx_x = x, c->qx_in = n_in, c->qx_T = T, c->qx_ops = c->n_ops;
}
/* Whether an op may round its output ([T][n_in]) into the op scratch for the next product. */
static bool scratch_can_round(const struct cuda_be *c, int64_t n_in, int64_t T) {
    return !c->mv_f32 && snug_cuda_matmul_work_bytes(n_in, 1, T) <= c->scratch_bytes;
}
static void cb_matmul(struct snug_be *be, uint32_t type, const void *w, int64_t n_in, int64_t n_out,
                      const float *x, int64_t T, float *y, void *work) {
    struct cuda_be *c = CB(be);
    if (c->prof) {
        static char tags[128][24]; /* "q4_K T=1" per (type, T class); profiling only */
        int cls = T == 1 ? 0 : T <= SNUG_CUDA_MATVEC_MAX_T ? 1 : 2;
        const struct snug_dtype_info *ti = snug_dtype_info(type);
        char *tg = tags[(type * 3 + (uint32_t)cls) % 128];
        static const char *const cls_name[3] = {"T=1", "T<=8", "T>8"};
        snprintf(tg, sizeof tags[0], "%s %s", ti ? ti->name : "?", cls_name[cls]);
        c->prof->ptag = tg;
    }
    if (T <= SNUG_CUDA_MATVEC_MAX_T && (n_out <= PRECISE_MAX_OUT || c->mv_f32)) { /* f32 x */
        CK(snug_cuda_matmul(&c->cu, type, w, n_in, n_out, x, T, y, NULL, err));
        if (c->prof) c->prof->ptag = NULL;
        return;
    }
    if (T > SNUG_CUDA_MATVEC_MAX_T && n_out <= PRECISE_MAX_OUT && type != SNUG_DTYPE_F32 &&
        !snug_cuda_matvec_int8(type)) {
        CK(snug_cuda_matmul_f32x(&c->cu, type, w, n_in, n_out, x, T, y, err));
        if (c->prof) c->prof->ptag = NULL;
        return;
    }
    /* the int8 decode path: x rounded once for consecutive products of the same input (q, k,
     * v; qkv and z; gate and up), or by the op that wrote it (the norms, swiglu, sigmoid_mul,
     * gated_rmsnorm) */
    bool int8 = T <= SNUG_CUDA_MATVEC_MAX_T && snug_cuda_matvec_int8(type);
    if (int8 && scratch_holds_rounded(c, x, n_in * T))
        CK(snug_cuda_matvec_int8_again(&c->cu, type, w, n_in, n_out, T, y, c->scratch, err));
    else
        CK(snug_cuda_matmul(&c->cu, type, w, n_in, n_out, x, T, y, c->scratch, err));
    if (int8) record_rounding(c, x, n_in, T);
    if (c->prof) c->prof->ptag = NULL;
}
/* Two products of one x (backend.h matmul_pair: an FFN's gate and up): in a decode step with an
 * int8 type, one rounding of x (none where the op before left it: the norm) and one launch for
 * both, at any width (the shared expert's 512-wide pair too: its outputs feed an FFN, not a
 * decision); otherwise the two products as cb_matmul runs them. */
static void cb_matmul_pair(struct snug_be *be, uint32_t type, const void *w, int64_t n_out,
                           const void *w2, int64_t n_out2, int64_t n_in, const float *x, int64_t T,
                           float *y, float *y2, void *work) {
    struct cuda_be *c = CB(be);
    if (T > SNUG_CUDA_MATVEC_MAX_T || !snug_cuda_matvec_int8(type) ||
        !scratch_can_round(c, n_in, T)) { /* (scratch_can_round: also not with mv_f32) */
        cb_matmul(be, type, w, n_in, n_out, x, T, y, work);
        cb_matmul(be, type, w2, n_in, n_out2, x, T, y2, work);
        return;
    }
    bool rounded = scratch_holds_rounded(c, x, n_in * T);
    CK(snug_cuda_matvec_int8_pair(&c->cu, type, w, n_out, w2, n_out2, n_in, x, rounded, T, y, y2,
                                  c->scratch, err));
    record_rounding(c, x, n_in, T);
}
/* An op that writes neither the op scratch nor the rounded x (outputs y, y2) keeps the rounding
 * recorded just before it valid: a decode step's norm rounds x, the router's products and the
 * routing run, and the experts' gate and up still read the norm's rounding (cb_moe_matmul). */
static void keep_rounding(struct cuda_be *c, uint64_t ops_before, const float *y, const float *y2) {
    if (c->qx_ops == ops_before && c->qx_x != y && c->qx_x != y2) c->qx_ops = c->n_ops;
}
/* Routers, gates, β/α (backend.h matmul_precise): f32 activations at every T; two matrices of one
 * type in one launch (snug_cuda_matmul_f32x_pair), except f32 weights over a prompt chunk, which
 * run as f32 GEMMs one by one. */
static int matmul_precise_one(struct cuda_be *c, uint32_t type, const void *w, int64_t n_in,
                              int64_t n_out, const float *x, int64_t T, float *y, void *work,
                              struct snug_err *err) {
    if (T <= SNUG_CUDA_MATVEC_MAX_T) /* no work memory: the f32 kernel */
        return snug_cuda_matmul(&c->cu, type, w, n_in, n_out, x, T, y, NULL, err);
    if (type == SNUG_DTYPE_F32)
        return snug_cuda_matmul(&c->cu, type, w, n_in, n_out, x, T, y, work, err);
    return snug_cuda_matmul_f32x(&c->cu, type, w, n_in, n_out, x, T, y, err);
}
static int matmul_precise(struct cuda_be *c, uint32_t type, const void *w, int64_t n_out,
                          const void *w2, int64_t n_out2, int64_t n_in, const float *x, int64_t T,
                          float *y, float *y2, void *work, struct snug_err *err) {
    if (w2 && !(T > SNUG_CUDA_MATVEC_MAX_T && type == SNUG_DTYPE_F32))
        return snug_cuda_matmul_f32x_pair(&c->cu, type, w, w2, n_in, n_out, n_out2, x, T, y, y2,
                                          err);
    int st = matmul_precise_one(c, type, w, n_in, n_out, x, T, y, work, err);
    if (!st && w2) st = matmul_precise_one(c, type, w2, n_in, n_out2, x, T, y2, work, err);
    return st;
}
static void cb_matmul_precise(struct snug_be *be, uint32_t type, const void *w, int64_t n_out,
                              const void *w2, int64_t n_out2, int64_t n_in, const float *x,
                              int64_t T, float *y, float *y2, void *work) {
    struct cuda_be *c = CB(be);
    uint64_t before = c->n_ops;
    CK(matmul_precise(c, type, w, n_out, w2, n_out2, n_in, x, T, y, y2, work, err));
    keep_rounding(c, before, y, y2); /* f32 x: the op scratch untouched */
}
/* A decode-sized norm also rounds its output to int8 in the op scratch (snug_cuda_*_q8), where
 * the product that follows would round it: that product then skips its rounding launch (the
 * qx_* bookkeeping above, as for consecutive products of one input). */
static bool norm_rounds(struct cuda_be *c, int64_t T, int64_t n) {
    return snug_cuda_norm_q8_fits(T, n) && scratch_can_round(c, n, T);
}
static void cb_rmsnorm(struct snug_be *be, const float *x, const float *w, float eps, int64_t T,
                       int64_t n, float *y) {
    struct cuda_be *c = CB(be);
    if (!norm_rounds(c, T, n)) {
        CK(snug_cuda_rmsnorm(&c->cu, x, w, eps, T, n, y, err));
        return;
    }
    CK(snug_cuda_rmsnorm_q8(&c->cu, x, w, eps, T, n, y, c->scratch, err));
    record_rounding(c, y, n, T);
}
static void cb_add_rmsnorm(struct snug_be *be, float *x, const float *y, const float *w, float eps,
                           int64_t T, int64_t n, float *xn) {
    struct cuda_be *c = CB(be);
    if (!norm_rounds(c, T, n)) {
        CK(snug_cuda_add_rmsnorm(&c->cu, x, y, w, eps, T, n, xn, err));
        return;
    }
    CK(snug_cuda_add_rmsnorm_q8(&c->cu, x, y, w, eps, T, n, xn, c->scratch, err));
    record_rounding(c, xn, n, T);
}
static void cb_l2norm(struct snug_be *be, float *x, int64_t rows, int64_t n, float eps) {
    CK(snug_cuda_l2norm(&CB(be)->cu, x, rows, n, eps, err));
}
static void cb_rope(struct snug_be *be, float *x, int64_t T, int64_t nh, int64_t hd, int64_t n_rot,
                    const int32_t *pos, float base) {
    CK(snug_cuda_rope_neox(&CB(be)->cu, x, T, nh, hd, n_rot, pos, base, err));
}
static void cb_rope_mrope(struct snug_be *be, float *x, int64_t T, int64_t nh, int64_t hd,
                          int64_t n_rot, const int32_t *pos3, const uint32_t sections[3],
                          float base) {
    CK(snug_cuda_rope_mrope(&CB(be)->cu, x, T, nh, hd, n_rot, pos3, sections, base, err));
}
/* The other ops whose output is a product's x round it the same way where it is decode-sized:
 * swiglu (the FFN's and the shared expert's down product; the experts' down, cb_moe_matmul),
 * sigmoid_mul (the attention output product) and gated_rmsnorm (the DeltaNet output product).
 * swiglu and sigmoid_mul know only their size n: they round where n is a multiple of 32 and at
 * most decode_x_max, and record the rounding flat (qx_in = n, qx_T = 1). */
static bool flat_rounds(const struct cuda_be *c, int64_t n) {
    return n > 0 && n % 32 == 0 && n <= c->decode_x_max && scratch_can_round(c, n, 1);
}
static void cb_swiglu(struct snug_be *be, const float *g, const float *u, int64_t n, float *y) {
    struct cuda_be *c = CB(be);
    if (!flat_rounds(c, n)) {
        CK(snug_cuda_swiglu(&c->cu, g, u, n, y, err));
        return;
    }
    CK(snug_cuda_swiglu_q8(&c->cu, g, u, n, y, c->scratch, err));
    record_rounding(c, y, n, 1);
}
static void cb_sigmoid_mul(struct snug_be *be, const float *x, const float *g, int64_t n,
                           float *y) {
    struct cuda_be *c = CB(be);
    if (!flat_rounds(c, n)) {
        CK(snug_cuda_sigmoid_mul(&c->cu, x, g, n, y, err));
        return;
    }
    CK(snug_cuda_sigmoid_mul_q8(&c->cu, x, g, n, y, c->scratch, err));
    record_rounding(c, y, n, 1);
}
static void cb_gated_rmsnorm(struct snug_be *be, const float *o, const float *z, const float *w,
                             float eps, int64_t T, int64_t Nv, int64_t dv, float *y) {
    struct cuda_be *c = CB(be);
    bool rounds = T >= 1 && T <= SNUG_CUDA_MATVEC_MAX_T && Nv >= 1 && dv > 0 && dv % 32 == 0 &&
                  scratch_can_round(c, Nv * dv, T);
    if (!rounds) {
        CK(snug_cuda_gated_rmsnorm(&c->cu, o, z, w, eps, T, Nv, dv, y, err));
        return;
    }
    CK(snug_cuda_gated_rmsnorm_q8(&c->cu, o, z, w, eps, T, Nv, dv, y, c->scratch, err));
    record_rounding(c, y, Nv * dv, T);
}
static void cb_conv_silu(struct snug_be *be, const float *x, int64_t T, int64_t C, int64_t K,
                         const float *w, float *st, float *y) {
    CK(snug_cuda_conv_silu(&CB(be)->cu, x, T, C, K, w, st, y, err));
}
static struct snug_cuda_kv cuda_view(const struct snug_kv_view *v) {
    return (struct snug_cuda_kv){.type = v->type == SNUG_KV_VIEW_FMT ? SNUG_CUDA_KV_FMT : v->type,
                                 .k = v->k,
                                 .v = v->v,
                                 .n_ctx = v->n_ctx,
                                 .k_fmt = v->k_fmt,
                                 .v_fmt = v->v_fmt};
}
static void cb_kv_store(struct snug_be *be, struct snug_kv_view *kv, int64_t Hkv, int64_t D,
                        int64_t pos0, const int32_t *pos_be, int64_t T, const float *k,
                        const float *v) {
    struct snug_cuda_kv cv = cuda_view(kv);
    CK(snug_cuda_kv_store(&CB(be)->cu, &cv, Hkv, D, pos0, pos_be, T, k, v, err));
}
static void cb_attention(struct snug_be *be, const struct snug_kv_view *kv, int64_t Hq, int64_t Hkv,
                         int64_t D, int64_t pos0, const int32_t *pos_be, int64_t T, const float *q,
                         float scale, float *out, void *work) {
    struct cuda_be *c = CB(be);
    struct snug_cuda_kv cv = cuda_view(kv);
    CK(snug_cuda_attention(&c->cu, &cv, Hq, Hkv, D, pos0, pos_be, T, q, scale, out, c->scratch,
                           err));
}
static void cb_delta_step(struct snug_be *be, int64_t T, int64_t Nk, int64_t Nv, int64_t dk,
                          int64_t dv, const float *q, const float *k, const float *v,
                          const float *g, const float *beta, float *state, float *out) {
    CK(snug_cuda_gated_delta_step(&CB(be)->cu, T, Nk, Nv, dk, dv, q, k, v, g, beta, state, out,
                                  err));
}
static void cb_delta_chunked(struct snug_be *be, int64_t T, int64_t Nk, int64_t Nv, int64_t dk,
                             int64_t dv, const float *q, const float *k, const float *v,
                             const float *g, const float *beta, float *state, float *out,
                             void *work) {
    (void)work; /* the host-sized op work; the device's chunked form takes the op scratch */
    struct cuda_be *c = CB(be);
    void *wy = c->delta_wy ? c->scratch : NULL; /* NULL: the recurrence */
    CK(snug_cuda_gated_delta_chunked(&c->cu, T, Nk, Nv, dk, dv, q, k, v, g, beta, state, out, wy,
                                     wy ? c->scratch_bytes : 0, err));
}
static void cb_delta_decode(struct snug_be *be, int64_t T, int64_t Nk, int64_t Nv, int64_t dk,
                            int64_t dv, const float *qkv, const float *b, const float *alpha,
                            const float *a, const float *dt, float qscale, float eps, float *state,
                            float *out, float *snap, int64_t snap_stride) {
    CK(snug_cuda_delta_decode(&CB(be)->cu, T, Nk, Nv, dk, dv, qkv, b, alpha, a, dt, qscale, eps,
                              state, out, snap, snap_stride, err));
}
/* The runs in the kernels' form (the two structs have the same fields). */
static void cuda_runs(int32_t n, const struct snug_be_run *runs, struct snug_cuda_run *out) {
    for (int32_t i = 0; i < n; i++)
        out[i] = (struct snug_cuda_run){.row0 = runs[i].row0,
                                        .T = runs[i].T,
                                        .state = runs[i].state,
                                        .snap = runs[i].snap,
                                        .snap_stride = runs[i].snap_stride};
}
static void cb_conv_silu_runs(struct snug_be *be, int32_t n, const struct snug_be_run *runs,
                              const float *x, int64_t C, int64_t K, const float *w, float *y) {
    if (!CB(be)->runs_on) {
        for (int32_t i = 0; i < n; i++)
            cb_conv_silu(be, x + runs[i].row0 * C, runs[i].T, C, K, w, runs[i].state,
                         y + runs[i].row0 * C);
        return;
    }
    struct snug_cuda_run cr[SNUG_CUDA_RUNS_MAX];
    for (int32_t i0 = 0; i0 < n; i0 += SNUG_CUDA_RUNS_MAX) {
        int32_t m = SNUG_MIN(n - i0, SNUG_CUDA_RUNS_MAX);
        cuda_runs(m, runs + i0, cr);
        CK(snug_cuda_conv_silu_runs(&CB(be)->cu, m, cr, x, C, K, w, y, err));
    }
}
static void cb_delta_decode_runs(struct snug_be *be, int32_t n, const struct snug_be_run *runs,
                                 int64_t Nk, int64_t Nv, int64_t dk, int64_t dv, const float *qkv,
                                 const float *b, const float *alpha, const float *a,
                                 const float *dt, float qscale, float eps, float *out) {
    if (!CB(be)->runs_on) {
        int64_t cd = 2 * Nk * dk + Nv * dv; /* a row of qkv */
        for (int32_t i = 0; i < n; i++) {
            const struct snug_be_run *r = &runs[i];
            cb_delta_decode(be, r->T, Nk, Nv, dk, dv, qkv + r->row0 * cd, b + r->row0 * Nv,
                            alpha + r->row0 * Nv, a, dt, qscale, eps, r->state,
                            out + r->row0 * Nv * dv, r->snap, r->snap_stride);
        }
        return;
    }
    struct snug_cuda_run cr[SNUG_CUDA_RUNS_MAX];
    for (int32_t i0 = 0; i0 < n; i0 += SNUG_CUDA_RUNS_MAX) {
        int32_t m = SNUG_MIN(n - i0, SNUG_CUDA_RUNS_MAX);
        cuda_runs(m, runs + i0, cr);
        CK(snug_cuda_delta_decode_runs(&CB(be)->cu, m, cr, Nk, Nv, dk, dv, qkv, b, alpha, a, dt,
                                       qscale, eps, out, err));
    }
}
static void cb_add(struct snug_be *be, float *x, const float *y, int64_t n) {
    CK(snug_cuda_add(&CB(be)->cu, x, y, n, err));
}
static void cb_layernorm(struct snug_be *be, const float *x, const float *w, const float *b,
                         float eps, int64_t T, int64_t n, float *y) {
    CK(snug_cuda_layernorm(&CB(be)->cu, x, w, b, eps, T, n, y, err));
}
static void cb_bias_act(struct snug_be *be, float *y, const float *b, int64_t T, int64_t n,
                        int act) {
    CK(snug_cuda_bias_act(&CB(be)->cu, y, b, T, n, act, err));
}
static void cb_rope_angles(struct snug_be *be, float *x, int64_t stride, int64_t T, int64_t n_heads,
                           int64_t head_dim, const float *ang) {
    CK(snug_cuda_rope_angles(&CB(be)->cu, x, stride, T, n_heads, head_dim, ang, err));
}
static void cb_attention_full(struct snug_be *be, const float *q, const float *k, const float *v,
                              int64_t stride, int64_t T, int64_t n_heads, int64_t head_dim,
                              float scale, float *out, void *work) {
    (void)work;
    CK(snug_cuda_attention_full(&CB(be)->cu, q, k, v, stride, T, n_heads, head_dim, scale, out,
                                err));
}
static void cb_scale(struct snug_be *be, float *x, int64_t n, float s) {
    CK(snug_cuda_scale(&CB(be)->cu, x, n, s, err));
}
static void cb_delta_gates(struct snug_be *be, float *beta, float *g, const float *a,
                           const float *dt, int64_t T, int64_t Nv) {
    CK(snug_cuda_delta_gates(&CB(be)->cu, beta, g, a, dt, T, Nv, err));
}
static void cb_copy2d(struct snug_be *be, float *dst, int64_t dp, const float *src, int64_t sp,
                      int64_t n, int64_t rows) {
    if (n <= 0 || rows <= 0) return;
    CB(be)->n_ops++;
    cudaError_t e =
        cudaMemcpy2DAsync(dst, (size_t)dp * 4, src, (size_t)sp * 4, (size_t)n * 4, (size_t)rows,
                          cudaMemcpyDeviceToDevice, (cudaStream_t)CB(be)->cu.stream);
    if (e != cudaSuccess) bfail(be, "cudaMemcpy2DAsync", e);
}
/* Host copies inside a step being recorded cannot be replayed (the host would read or write
 * them in the middle of the graph): they fail the recording, and the step runs again eagerly
 * (a download's destination is zeroed, so the caller's use of it stays harmless meanwhile). */
static void cb_upload(struct snug_be *be, void *dst, const void *src, size_t bytes) {
    if (CB(be)->rec) {
        CB(be)->rec_failed = true;
        return;
    }
    if (bytes) CK(snug_cuda_upload(&CB(be)->cu, dst, src, bytes, err));
}
static void cb_download(struct snug_be *be, void *dst, const void *src, size_t bytes) {
    if (CB(be)->rec) {
        CB(be)->rec_failed = true;
        memset(dst, 0, bytes);
        return;
    }
    if (bytes) CK(snug_cuda_download(&CB(be)->cu, dst, src, bytes, err));
}
/* A step's result: at once, or after the recorded step's work (kept with the recording). */
static void cb_read_back(struct snug_be *be, void *dst, const void *src, size_t bytes) {
    struct cuda_be *c = CB(be);
    if (!bytes) return;
    if (c->rec) {
        struct cuda_graph *g = c->rec;
        if (g->n_rb == RB_MAX) {
            c->rec_failed = true;
            return;
        }
        g->rb[g->n_rb++] =
            (struct cuda_readback){.dst = (char *)dst - c->rec_base, .src = src, .bytes = bytes};
        return;
    }
    CK(snug_cuda_download(&c->cu, dst, src, bytes, err));
}
/* Embedding rows are dequantised on the host from the mapping (T·H floats, cheap) and
 * uploaded: the table never needs a device-side f32 copy. */
static void cb_embed(struct snug_be *be, const struct snug_gguf_tensor *t, const snug_token *ids,
                     const int32_t *ids_be, int64_t T, int64_t H, float *x) {
    struct cuda_be *c = CB(be);
    if (c->prof) c->prof->steps++;
    if (ids_be && snug_cuda_type_supported(t->type)) { /* gathered on the device */
        struct snug_err e = {0};
        int rc = snug_cuda_embed(&c->cu, t->type, cb_weight(be, t, 0), H, (int64_t)t->ne[1], ids_be,
                                 T, x, &e);
        c->n_ops++;
        if (rc == SNUG_OK) return;
        if (rc != SNUG_ERR_INVALID && rc != SNUG_ERR_UNSUPPORTED) {
            keep(be, rc, &e);
            return;
        }
    }
    if (T * H > c->stage_floats) {
        bfail(be, "embedding (rows exceed the chunk)", cudaErrorInvalidValue);
        return;
    }
    int32_t few[8];
    if (!ids) { /* the ids exist only on the device (an MTP draft's argmax): fetch them */
        if (!ids_be || T > 8) {
            bfail(be, "embedding (no host ids)", cudaErrorInvalidValue);
            return;
        }
        cb_download(be, few, ids_be, (size_t)T * sizeof(int32_t));
        ids = few;
    }
    uint64_t erow = snug_dtype_row_bytes(t->type, (uint64_t)H);
    for (int64_t i = 0; i < T; i++)
        snug_dequantize_row(t->type, (const uint8_t *)t->data + (uint64_t)ids[i] * erow,
                            c->stage + i * H, H);
    cb_upload(be, x, c->stage, (size_t)(T * H) * sizeof(float));
}
static void cb_gather_rows(struct snug_be *be, float *dst, const float *src, const int32_t *idx,
                           int64_t n, int64_t H) {
    CK(snug_cuda_gather_rows(&CB(be)->cu, dst, src, idx, n, H, err));
}
static void cb_argmax(struct snug_be *be, const float *x, int64_t rows, int64_t n, int32_t *out) {
    CK(snug_cuda_argmax(&CB(be)->cu, x, rows, n, out, err));
}
static void cb_moe_combine(struct snug_be *be, float *y, const float *d, const int32_t *slot,
                           const float *w, int64_t T, int64_t k, int64_t H) {
    CK(snug_cuda_moe_combine(&CB(be)->cu, y, d, slot, w, T, k, H, err));
}
static void cb_moe_route(struct snug_be *be, const float *logits, int64_t T, int64_t E, int64_t k,
                         int32_t *sel, int32_t *cnt, float *selw, int32_t *order, int32_t *slot,
                         int32_t *off, int32_t *tiles) {
    struct cuda_be *c = CB(be);
    uint64_t before = c->n_ops;
    CK(snug_cuda_moe_route(&c->cu, logits, T, E, k, sel, cnt, selw, order, slot, off, tiles, err));
    keep_rounding(c, before, NULL, NULL); /* writes only its integer tables and weights */
}
/* The grouped int8 kernel for the decode matvec's types (one launch over the tile table, no host
 * round trip); other types (f16/bf16/f32 experts, widths off the 256 grid) download the expert
 * offsets and run one matmul per expert — a host sync per product, correct but slow. */
static void cb_moe_matmul(struct snug_be *be, uint32_t type, const void *w, uint64_t expert_bytes,
                          int64_t n_in, int64_t n_out, int64_t E, int64_t T, int64_t k,
                          const float *x, bool x_token, const int32_t *off, const int32_t *tiles,
                          float *y, void *work) {
    struct cuda_be *c = CB(be);
    if (snug_cuda_moe_matmul_supported(type, n_in)) {
        int64_t max_tiles = (snug_moe_tiles_len(T, E, k) - 1) / 3;
        int64_t rows = x_token ? 1 : T * k; /* the rows x holds */
        /* the same rows right after a product over them (gate, then up): rounded already where
         * that product left them (mqx_work); or right after the op that wrote them rounded them
         * into the op scratch (swiglu, then down: all T·k slots' own rows; a decode step's
         * norm, then the router and the routing, which keep it, then gate: the token's row):
         * read from there. */
        bool again =
            c->mqx_ops == c->n_ops && c->mqx_x == x && c->mqx_in == n_in && c->mqx_slots == rows;
        if (again)
            work = (void *)c->mqx_work;
        else if (scratch_holds_rounded(c, x, rows * n_in))
            again = true, work = c->scratch;
        CK(snug_cuda_moe_matmul(&c->cu, type, w, expert_bytes, n_in, n_out, again ? NULL : x, tiles,
                                T * k, max_tiles, x_token ? 2 : T == 1, y, work, err));
        c->mqx_x = x, c->mqx_in = n_in, c->mqx_slots = rows, c->mqx_work = work;
        c->mqx_ops = c->n_ops;
        return;
    }
    int32_t *h_off = snug_arena_alloc(&c->host_work, (size_t)(E + 1) * sizeof(int32_t), 64);
    if (!h_off) {
        snug_backend_fail(be, SNUG_ERR_BUDGET, "cuda moe matmul: host work arena full");
        return;
    }
    cb_download(be, h_off, off, (size_t)(E + 1) * sizeof(int32_t));
    for (int64_t e = 0; e < E; e++) {
        int64_t s0 = h_off[e], n = h_off[e + 1] - h_off[e];
        if (n <= 0) continue;
        cb_matmul(be, type, (const uint8_t *)w + (uint64_t)e * expert_bytes, n_in, n_out,
                  x_token ? x : x + s0 * n_in, n, y + s0 * n_out, work); /* (x_token: n = 1) */
    }
}
static void cb_add_gated(struct snug_be *be, float *y, const float *d, const float *gl, int64_t T,
                         int64_t H) {
    CK(snug_cuda_add_gated(&CB(be)->cu, y, d, gl, T, H, err));
}

static void cb_copy(struct snug_be *be, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) CK(snug_cuda_copy(&CB(be)->cu, dst, src, bytes, err));
}

/* The op scratch the kernels ask for (the plan's copy of this formula is
 * snug_backend_plan_cuda_scratch, src/backend/backend_plan.c; open checks the plan's is enough). */
static size_t scratch_need(int64_t max_n_in, int64_t max_n_out, int64_t n_chunk, int64_t Hq,
                           int64_t D) {
    size_t a = snug_cuda_matmul_work_bytes(max_n_in, max_n_out, n_chunk);
    size_t b = snug_cuda_attention_work_bytes(Hq, D, n_chunk);
    return SNUG_MAX(a, b);
}

static int dmalloc(struct cuda_be *c, void **p, size_t bytes, const char *what,
                   struct snug_err *err) {
    int rc = snug_cuda_malloc(p, bytes, err);
    if (rc) return snug_err_prefix(err, "%s (%zu bytes)", what, bytes);
    c->total += bytes ? bytes : 1;
    return SNUG_OK;
}

/* Upload the tensor data of every GGUF file (the range its tensors span) in 256 MiB pieces. */
static int upload_weights(struct cuda_be *c, const struct snug_gguf *g, int64_t *max_in,
                          int64_t *max_out, struct snug_err *err) {
    const uint8_t *lo[MAX_FILES] = {0}, *hi[MAX_FILES] = {0};
    int64_t n = snug_gguf_n_tensors(g);
    for (int64_t i = 0; i < n; i++) {
        const struct snug_gguf_tensor *t = snug_gguf_tensor(g, i);
        if (t->file_idx >= MAX_FILES)
            return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                                "tensor in split part %u: at most %d parts", t->file_idx,
                                MAX_FILES);
        const uint8_t *s = t->data, *e = s + t->n_bytes;
        if (!lo[t->file_idx] || s < lo[t->file_idx]) lo[t->file_idx] = s;
        if (e > hi[t->file_idx]) hi[t->file_idx] = e;
        if (t->file_idx + 1 > c->n_files) c->n_files = t->file_idx + 1;
        if (t->n_dims >= 2 && !snug_cuda_type_supported(t->type)) {
            const struct snug_dtype_info *ti = snug_dtype_info(t->type);
            return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                                "backend cuda: tensor '%s' is %s, which has no CUDA kernel yet "
                                "(use --backend cpu)",
                                t->name, ti ? ti->name : "an unknown type");
        }
        if (t->n_dims >= 2) {
            *max_in = SNUG_MAX(*max_in, (int64_t)t->ne[0]);
            *max_out = SNUG_MAX(*max_out, (int64_t)t->ne[1]);
        }
    }
    /* progress where people wait: a line every 2 s (info level, which `--backend cuda` sets)
     * while the pieces go up, and the total once it took that long */
    size_t all = 0, sent = 0;
    for (uint32_t f = 0; f < c->n_files; f++) all += lo[f] ? (size_t)(hi[f] - lo[f]) : 0;
    double t0 = snug_time_s(), last = t0;
    for (uint32_t f = 0; f < c->n_files; f++) {
        if (!lo[f]) continue;
        c->hbase[f] = lo[f];
        c->wbytes[f] = (size_t)(hi[f] - lo[f]);
        int rc = dmalloc(c, (void **)&c->dbase[f], c->wbytes[f], "weights", err);
        if (rc) return rc;
        for (size_t off = 0; off < c->wbytes[f]; off += (size_t)256 << 20) {
            size_t len = SNUG_MIN((size_t)256 << 20, c->wbytes[f] - off);
            rc = snug_cuda_upload(&c->cu, c->dbase[f] + off, lo[f] + off, len, err);
            if (rc) return rc;
            sent += len;
            double now = snug_time_s();
            if (now - last >= 2.0) {
                last = now;
                snug_log(SNUG_LOG_INFO, "cuda: uploading the weights: %.0f / %.0f MiB (%.0f%%)\n",
                         sent / 1048576.0, all / 1048576.0, 100.0 * (double)sent / (double)all);
            }
        }
    }
    if (last > t0)
        snug_log(SNUG_LOG_INFO, "cuda: uploaded %.0f MiB of weights in %.1f s\n", all / 1048576.0,
                 snug_time_s() - t0);
    return SNUG_OK;
}

/* ---- device weights shared by the contexts of one model ----------------------------------------
 * Every context of a model reads the same weights, so the first CUDA context of a GGUF file
 * uploads them and later ones take a reference (`snug serve --slots N --backend cuda` holds
 * one copy, as the plan counts it); the last close frees them. Keyed by the struct snug_gguf
 * (the loaded model, which outlives its contexts). A static table: no allocation; when it is
 * full a context keeps a private copy. */
#define MAX_SHARED 16
struct cuda_weights {
    const struct snug_gguf *g;
    int refs; /* 0: free entry */
    uint32_t n_files;
    const uint8_t *hbase[MAX_FILES];
    uint8_t *dbase[MAX_FILES];
    size_t wbytes[MAX_FILES];
    int64_t max_in, max_out;
    size_t bytes;
};
static struct cuda_weights g_weights[MAX_SHARED];
static pthread_mutex_t g_weights_lock = PTHREAD_MUTEX_INITIALIZER;

/* c's weights: a reference to the model's shared copy, or an upload that becomes it. The lock
 * is held through an upload so two contexts opening together upload once. */
static int acquire_weights(struct cuda_be *c, const struct snug_gguf *g, int64_t *max_in,
                           int64_t *max_out, struct snug_err *err) {
    pthread_mutex_lock(&g_weights_lock);
    struct cuda_weights *w = NULL, *slot = NULL;
    for (int i = 0; i < MAX_SHARED; i++) {
        if (g_weights[i].refs > 0 && g_weights[i].g == g) w = &g_weights[i];
        if (g_weights[i].refs == 0 && !slot) slot = &g_weights[i];
    }
    int rc = SNUG_OK;
    if (w) {
        c->n_files = w->n_files;
        memcpy(c->hbase, w->hbase, sizeof c->hbase);
        memcpy(c->dbase, w->dbase, sizeof c->dbase);
        memcpy(c->wbytes, w->wbytes, sizeof c->wbytes);
        *max_in = w->max_in;
        *max_out = w->max_out;
        c->total += w->bytes;
    } else {
        size_t t0 = c->total;
        rc = upload_weights(c, g, max_in, max_out, err);
        if (rc == SNUG_OK && slot) {
            w = slot;
            *w = (struct cuda_weights){.g = g,
                                       .n_files = c->n_files,
                                       .max_in = *max_in,
                                       .max_out = *max_out,
                                       .bytes = c->total - t0};
            memcpy(w->hbase, c->hbase, sizeof w->hbase);
            memcpy(w->dbase, c->dbase, sizeof w->dbase);
            memcpy(w->wbytes, c->wbytes, sizeof w->wbytes);
        }
    }
    if (w) {
        w->refs++;
        c->shared = w;
    }
    pthread_mutex_unlock(&g_weights_lock);
    return rc;
}

/* Drop c's reference (the last one frees the device copy), or free a private copy. */
static void release_weights(struct cuda_be *c) {
    if (!c->shared) {
        for (uint32_t f = 0; f < c->n_files; f++) snug_cuda_dfree(c->dbase[f]);
        return;
    }
    pthread_mutex_lock(&g_weights_lock);
    struct cuda_weights *w = c->shared;
    if (--w->refs == 0) {
        for (uint32_t f = 0; f < w->n_files; f++) snug_cuda_dfree(w->dbase[f]);
        memset(w, 0, sizeof *w);
    }
    pthread_mutex_unlock(&g_weights_lock);
    c->shared = NULL;
}

/* The KV/state arena on the device: per attention layer K then V (plain f16/f32 rows
 * [n_ctx][Hkv][D], or [n_ctx][Hkv] stored vectors of the kvfmt formats the device kernels run:
 * f16 f32 bf16 q8_0 fp8, K and V chosen separately), then every conv state, then every delta
 * state — inside the planned snug_kv_bytes. */
static int layout_kv(struct cuda_be *c, struct snug_kv *kv, void **mem,
                     const struct snug_kv_shape *s, size_t planned, struct snug_err *err) {
    int kf = SNUG_KV_F16, vf = SNUG_KV_F16;
    bool fmt = s->fmt != SNUG_KV_F16 && s->fmt != SNUG_KV_F32;
    if (fmt) {
        char nb[32];
        if (!snug_kvfmt_split(s->fmt, &kf, &vf) || !snug_cuda_kv_supported(kf, vf, s->head_dim))
            return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                                "KV cache format %s at head size %d: the CUDA "
                                "attention reads f16 f32 bf16 q8_0 fp8 with head sizes 32, 64, "
                                "128, 256 and tq4 tq3 with 64, 128, 256 (or use --backend cpu)",
                                snug_kvfmt_code_name(s->fmt, nb, sizeof nb), s->head_dim);
    } else if (s->type != SNUG_DTYPE_F16 && s->type != SNUG_DTYPE_F32) {
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "KV cache type %u: the CUDA attention reads f16 or f32 "
                            "rows (use --kv f16 or f32)",
                            s->type);
    } else {
        kf = vf = s->type == SNUG_DTYPE_F16 ? SNUG_KV_F16 : SNUG_KV_F32;
    }
    const size_t al = SNUG_KV_DEVICE_ALIGN; /* the layout snug_kv_device_bytes counts */
    size_t tok = (size_t)s->n_ctx * (size_t)s->n_head_kv;
    size_t krow = SNUG_ALIGN_UP(tok * snug_kvfmt_vec_bytes(kf, s->head_dim), al);
    size_t vrow = SNUG_ALIGN_UP(tok * snug_kvfmt_vec_bytes(vf, s->head_dim), al);
    size_t conv = SNUG_ALIGN_UP((size_t)s->n_rec * (size_t)s->conv_elems * 4, al);
    size_t need = snug_kv_device_bytes(s);
    if (planned && need > planned) /* (snug_backend_open refuses such limits first) */
        return snug_err_set(err, SNUG_ERR_INTERNAL,
                            "the KV cache + recurrent state of a slot needs %zu bytes on the "
                            "device but the memory plan has %zu (src/kv/kv.c snug_kv_bytes)",
                            need, planned);
    int rc = dmalloc(c, mem, planned ? planned : need, "kv cache + recurrent state", err);
    if (rc) return rc;
    kv->shape = *s;
    kv->views = snug_calloc((size_t)s->n_attn + 1, sizeof *kv->views);
    if (!kv->views) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
    uint8_t *p = *mem;
    for (int32_t i = 0; i < s->n_attn; i++) {
        kv->views[i].type = fmt ? SNUG_KV_VIEW_FMT : s->type;
        kv->views[i].k_fmt = kf;
        kv->views[i].v_fmt = vf;
        kv->views[i].n_ctx = s->n_ctx;
        kv->views[i].k = p;
        kv->views[i].v = p + krow;
        p += krow + vrow;
    }
    kv->conv = (float *)p;
    kv->delta = (float *)(p + conv);
    return SNUG_OK;
}

/* Speculative decoding on the device: n_snap snapshot slots of the recurrent state (slot t at
 * t·snap_stride floats, the layout of kv.h's snug_kv_snap_conv/_delta), the MTP block's cache
 * and the spec module's device buffers. */
static int layout_spec(struct cuda_be *c, struct cuda_slot *sl,
                       const struct snug_backend_limits *lim, struct snug_err *err) {
    if (lim->n_snap <= 0) return SNUG_OK;
    const struct snug_kv_shape *s = &sl->kv.shape;
    size_t bytes = snug_kv_snap_bytes(s, lim->n_snap);
    if (bytes) {
        int rc = dmalloc(c, &sl->snap_mem, bytes, "state snapshots (mtp)", err);
        if (rc) return rc;
        sl->kv.snap = sl->snap_mem;
        sl->kv.n_snap = lim->n_snap;
        sl->kv.snap_stride = bytes / (size_t)lim->n_snap / sizeof(float);
    }
    if (lim->mtp_kv_shape) {
        int rc = layout_kv(c, &sl->mtp_kv, &sl->mtp_mem, lim->mtp_kv_shape,
                           snug_kv_bytes(lim->mtp_kv_shape), err);
        if (rc) return rc;
    }
    return dmalloc(c, &sl->spec_mem, lim->spec_bytes, "mtp draft buffers", err);
}

/* ---- lifecycle ------------------------------------------------------------------------------ */
static void cuda_close(struct snug_be *be) {
    if (!be) return;
    struct cuda_be *c = CB(be);
    if (c->cu_ok) cudaStreamSynchronize((cudaStream_t)c->cu.stream);
    if (c->n_recorded || c->n_rec_failed)
        snug_log(SNUG_LOG_INFO,
                 "cuda graphs: %llu steps recorded, %llu replayed, %llu eager "
                 "(not replayable)\n",
                 (unsigned long long)c->n_recorded, (unsigned long long)c->n_replayed,
                 (unsigned long long)c->n_rec_failed);
    for (int i = 0; i < GRAPH_MAX; i++)
        if (c->graphs[i].exec) cudaGraphExecDestroy(c->graphs[i].exec);
    if (c->prof) {
        prof_print(c->prof);
        cudaEventDestroy(c->prof->e0);
        cudaEventDestroy(c->prof->e1);
        snug_free(c->prof);
    }
    release_weights(c);
    for (int32_t i = 0; c->slots && i < c->n_slots; i++) {
        struct cuda_slot *sl = &c->slots[i];
        snug_cuda_dfree(sl->kv_mem);
        snug_cuda_dfree(sl->snap_mem);
        snug_cuda_dfree(sl->mtp_mem);
        snug_cuda_dfree(sl->spec_mem);
        snug_free(sl->mtp_kv.views);
        snug_free(sl->kv.views);
    }
    snug_free(c->slots);
    snug_cuda_dfree(c->work_mem);
    snug_cuda_dfree(c->scratch);
    snug_cuda_dfree(c->pos);
    snug_free(c->stage);
    snug_arena_free(&c->host_work);
    if (c->cu_ok) snug_cuda_free(&c->cu);
    snug_free(c);
}

static struct cuda_slot *slot_of(struct snug_be *be, int32_t slot) {
    SNUG_ASSERT(slot >= 0 && slot < CB(be)->n_slots);
    return &CB(be)->slots[slot];
}
static struct snug_kv *cuda_slot_kv(struct snug_be *be, int32_t slot) {
    return &slot_of(be, slot)->kv;
}
static struct snug_kv *cuda_slot_mtp_kv(struct snug_be *be, int32_t slot) {
    struct cuda_slot *sl = slot_of(be, slot);
    return sl->mtp_mem ? &sl->mtp_kv : NULL;
}
static void *cuda_slot_spec_mem(struct snug_be *be, int32_t slot) {
    return slot_of(be, slot)->spec_mem;
}
static struct snug_arena *cuda_work(struct snug_be *be) {
    return &CB(be)->work;
}
static struct snug_arena *cuda_host_work(struct snug_be *be) {
    return &CB(be)->host_work;
}
static int32_t *cuda_positions(struct snug_be *be) {
    return CB(be)->pos;
}

static void cuda_reset_slot(struct snug_be *be, int32_t slot) {
    struct snug_kv *kv = cuda_slot_kv(be, slot);
    const struct snug_kv_shape *s = &kv->shape;
    size_t conv = (size_t)s->n_rec * (size_t)s->conv_elems * 4;
    size_t delta = (size_t)s->n_rec * (size_t)s->delta_elems * 4;
    cudaStream_t st = (cudaStream_t)CB(be)->cu.stream;
    cudaError_t e = cudaMemsetAsync(kv->conv, 0, conv, st);
    if (e == cudaSuccess) e = cudaMemsetAsync(kv->delta, 0, delta, st);
    if (e != cudaSuccess) bfail(be, "cudaMemsetAsync", e);
}

/* Every recurrent state of a slot into its snapshot t or back: two queued device copies (the
 * conv states and the delta states are contiguous, in the layout of kv.h's snapshot slots). */
static void cuda_snapshot(struct snug_be *be, int32_t slot, int32_t t, bool save) {
    struct snug_kv *kv = cuda_slot_kv(be, slot);
    const struct snug_kv_shape *s = &kv->shape;
    SNUG_ASSERT(t >= 0 && t < kv->n_snap);
    if (s->n_rec == 0) return;
    size_t cb = (size_t)s->n_rec * (size_t)s->conv_elems * 4;
    size_t db = (size_t)s->n_rec * (size_t)s->delta_elems * 4;
    if (save) {
        cb_copy(be, snug_kv_snap_conv(kv, t, 0), kv->conv, cb);
        cb_copy(be, snug_kv_snap_delta(kv, t, 0), kv->delta, db);
    } else {
        cb_copy(be, kv->conv, snug_kv_snap_conv(kv, t, 0), cb);
        cb_copy(be, kv->delta, snug_kv_snap_delta(kv, t, 0), db);
    }
}

static int cuda_sync(struct snug_be *be, struct snug_err *err) {
    int rc = snug_cuda_sync(&CB(be)->cu, err);
    if (rc) return rc;
    if (be->status != SNUG_OK) {
        rc = be->status;
        be->status = SNUG_OK;
        return snug_err_set(err, rc, "%s", be->err.msg);
    }
    return SNUG_OK;
}

static size_t cuda_bytes(const struct snug_be *be) {
    return ((const struct cuda_be *)be)->total;
}

/* ---- recorded steps (CUDA graphs) ----------------------------------------------------------- */
/* Launch a recorded step and do its read-backs (into base + their offsets). */
static void graph_run(struct cuda_be *c, struct cuda_graph *g, char *base) {
    struct snug_be *be = &c->be;
    cudaError_t e = cudaGraphLaunch(g->exec, (cudaStream_t)c->cu.stream);
    if (e != cudaSuccess) {
        bfail(be, "cudaGraphLaunch", e);
        return;
    }
    for (int i = 0; i < g->n_rb; i++)
        CK(snug_cuda_download(&c->cu, base + g->rb[i].dst, g->rb[i].src, g->rb[i].bytes, err));
}

/* The entry of key: found, or a free one, or the least recently used one (its graph freed). */
static struct cuda_graph *graph_slot(struct cuda_be *c, uint64_t key) {
    struct cuda_graph *victim = &c->graphs[0];
    for (int i = 0; i < GRAPH_MAX; i++) {
        struct cuda_graph *g = &c->graphs[i];
        if (g->used_slot && g->key == key) return g;
        if (!g->used_slot || (victim->used_slot && g->used < victim->used)) victim = g;
    }
    if (victim->exec) cudaGraphExecDestroy(victim->exec);
    memset(victim, 0, sizeof *victim);
    victim->used_slot = true;
    victim->key = key;
    return victim;
}

static int cuda_step_begin(struct snug_be *be, uint64_t key, void *host_base) {
    struct cuda_be *c = CB(be);
    c->qx_x = NULL; /* no rounded x carries across steps */
    if (!c->graphs_on || c->prof || c->comm || be->status != SNUG_OK || c->rec)
        return SNUG_STEP_EAGER;
    struct cuda_graph *g = graph_slot(c, key);
    g->used = ++c->graph_clock;
    if (g->bad) return SNUG_STEP_EAGER;
    if (g->exec) {
        graph_run(c, g, host_base);
        c->n_replayed++;
        return SNUG_STEP_REPLAYED;
    }
    if (g->seen++ < 1) return SNUG_STEP_EAGER; /* record a key seen before, not a one-off */
    cudaError_t e =
        cudaStreamBeginCapture((cudaStream_t)c->cu.stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        g->bad = true;
        return SNUG_STEP_EAGER;
    }
    c->rec = g;
    c->rec_base = host_base;
    c->rec_failed = false;
    g->n_rb = 0;
    return SNUG_STEP_RECORDING;
}

static bool cuda_step_end(struct snug_be *be) {
    struct cuda_be *c = CB(be);
    struct cuda_graph *g = c->rec;
    if (!g) return false;
    c->rec = NULL;
    c->qx_x = NULL;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaStreamEndCapture((cudaStream_t)c->cu.stream, &graph);
    bool ok = e == cudaSuccess && graph && !c->rec_failed && be->status == SNUG_OK;
    if (ok) ok = cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    if (graph) cudaGraphDestroy(graph);
    if (!ok) { /* nothing ran: the caller runs the step eagerly (which reports real errors) */
        (void)cudaGetLastError();
        if (exec) cudaGraphExecDestroy(exec);
        be->status = SNUG_OK;
        memset(&be->err, 0, sizeof be->err);
        g->bad = true;
        g->n_rb = 0;
        c->n_rec_failed++;
        return false;
    }
    g->exec = exec;
    c->n_recorded++;
    graph_run(c, g, c->rec_base);
    return true;
}

static const struct snug_backend_ops CUDA_OPS = {
    .name = "cuda",
    .weight = cb_weight,
    .matmul = cb_matmul,
    .matmul_precise = cb_matmul_precise,
    .matmul_pair = cb_matmul_pair,
    .rmsnorm = cb_rmsnorm,
    .l2norm = cb_l2norm,
    .rope_neox = cb_rope,
    .rope_mrope = cb_rope_mrope,
    .swiglu = cb_swiglu,
    .sigmoid_mul = cb_sigmoid_mul,
    .gated_rmsnorm = cb_gated_rmsnorm,
    .conv_silu = cb_conv_silu,
    .kv_store = cb_kv_store,
    .attention = cb_attention,
    .delta_step = cb_delta_step,
    .delta_chunked = cb_delta_chunked,
    .add = cb_add,
    .add_rmsnorm = cb_add_rmsnorm,
    .scale = cb_scale,
    .delta_gates = cb_delta_gates,
    .copy2d = cb_copy2d,
    .embed = cb_embed,
    .upload = cb_upload,
    .download = cb_download,
    .read_back = cb_read_back,
    .gather_rows = cb_gather_rows,
    .moe_combine = cb_moe_combine,
    .moe_route = cb_moe_route,
    .moe_matmul = cb_moe_matmul,
    .add_gated = cb_add_gated,
    .copy = cb_copy,
    .argmax = cb_argmax,
    .layernorm = cb_layernorm,
    .bias_act = cb_bias_act,
    .rope_angles = cb_rope_angles,
    .attention_full = cb_attention_full,
    .close = cuda_close,
    .slot_kv = cuda_slot_kv,
    .slot_mtp_kv = cuda_slot_mtp_kv,
    .slot_spec_mem = cuda_slot_spec_mem,
    .work = cuda_work,
    .host_work = cuda_host_work,
    .positions = cuda_positions,
    .reset_slot = cuda_reset_slot,
    .snapshot = cuda_snapshot,
    .sync = cuda_sync,
    .bytes = cuda_bytes,
    .step_begin = cuda_step_begin,
    .step_end = cuda_step_end,
    .delta_decode = cb_delta_decode,
    .conv_silu_runs = cb_conv_silu_runs,
    .delta_decode_runs = cb_delta_decode_runs,
};

/* Tensor parallelism: the rank's partial sums added over the ranks, in place, on this
 * instance's stream (NCCL). */
static void cb_all_reduce(struct snug_be *be, float *x, int64_t n) {
    CK(snug_cuda_comm_all_reduce(CB(be)->comm, x, n, CB(be)->cu.stream, err));
}

int snug_cuda_be_attach_comm(struct snug_be *be, struct snug_cuda_comm *comm,
                             struct snug_err *err) {
    struct cuda_be *c = be ? CB(be) : NULL;
    if (!c || (be->ops != &CUDA_OPS && be->ops != &c->ops_tp) || !comm)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "tensor parallel: a communicator goes to a CUDA backend instance");
    c->comm = comm;
    c->ops_tp = CUDA_OPS;
    c->ops_tp.all_reduce = cb_all_reduce;
    be->ops = &c->ops_tp;
    return SNUG_OK;
}

/* Open an instance: the weights (shared per model), n_slots slots of KV/state (+ speculation
 * buffers), one work arena, one op scratch, one position table, all device memory now; and on
 * the host the embedding staging and the host work arena (the plan's host items). */
static int cuda_open(struct snug_be **out, const struct snug_gguf *g,
                     const struct snug_backend_limits *lim, struct snug_pool *pool,
                     struct snug_err *err) {
    *out = NULL;
    struct cuda_be *c = snug_calloc(1, sizeof *c);
    if (!c) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
    c->be.ops = &CUDA_OPS;
    c->be.impl = c;
    int rc = snug_cuda_init(&c->cu, 0, err);
    if (rc) {
        snug_err_prefix(err, "no usable GPU");
        goto fail;
    }
    c->cu_ok = true;
    const char *dw = getenv("SNUG_DELTA_WY");
    c->delta_wy = dw && *dw ? strcmp(dw, "0") != 0 : DELTA_WY_DEFAULT;
    if (dw && strcmp(dw, "1") == 0) snug_cuda_delta_tune(0); /* the f32 scan */
    const char *mf = getenv("SNUG_CUDA_MATVEC_F32");
    c->mv_f32 = mf && *mf && strcmp(mf, "0") != 0;
    const char *ge = getenv("SNUG_CUDA_GRAPHS"); /* 0: every step eager (comparisons) */
    c->graphs_on = !(ge && strcmp(ge, "0") == 0);
    const char *re = getenv("SNUG_CUDA_RUNS"); /* 1: the multi-run launches (comparisons) */
    c->runs_on = re && strcmp(re, "1") == 0;
    const char *pe = getenv("SNUG_CUDA_PROFILE"); /* the debugging override of --cuda-profile */
    if (lim->profile || (pe && *pe && strcmp(pe, "0") != 0)) {
        c->prof = snug_calloc(1, sizeof *c->prof);
        if (!c->prof) {
            rc = snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
            goto fail;
        }
        cudaEventCreate(&c->prof->e0);
        cudaEventCreate(&c->prof->e1);
    }
    int64_t max_in = 0, max_out = 0;
    if ((rc = acquire_weights(c, g, &max_in, &max_out, err))) goto fail;
    c->decode_x_max = SNUG_CUDA_MATVEC_MAX_T * max_in;
    int32_t n = lim->n_slots > 0 ? lim->n_slots : 1;
    c->slots = snug_calloc((size_t)n, sizeof *c->slots);
    if (!c->slots) {
        rc = snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
        goto fail;
    }
    c->n_slots = n;
    for (int32_t i = 0; i < n; i++) {
        struct cuda_slot *sl = &c->slots[i];
        if ((rc = layout_kv(c, &sl->kv, &sl->kv_mem, lim->kv_shape, lim->kv_bytes, err))) goto fail;
        if ((rc = layout_spec(c, sl, lim, err))) goto fail;
    }
    c->work_bytes = lim->work_bytes;
    if ((rc = dmalloc(c, &c->work_mem, c->work_bytes, "work arena", err))) goto fail;
    c->work = (struct snug_arena){.name = "work (cuda)", .base = c->work_mem, .cap = c->work_bytes};
    /* the op scratch is the plan's number; the file's widest matrices must fit in it */
    size_t need = scratch_need(max_in, max_out, lim->n_chunk, lim->n_head, lim->head_dim);
    c->scratch_bytes = lim->scratch_bytes ? lim->scratch_bytes : need;
    if (need > c->scratch_bytes) {
        rc = snug_err_set(err, SNUG_ERR_INTERNAL,
                          "the file's matrices (widest input %lld, output %lld) "
                          "need %zu bytes of op scratch but the memory plan has %zu; the plan "
                          "under-counts this model's shape (src/plan/plan.c plan_matrix_extent, "
                          "src/backend/backend_plan.c)",
                          (long long)max_in, (long long)max_out, need, c->scratch_bytes);
        goto fail;
    }
    if ((rc = dmalloc(c, &c->scratch, c->scratch_bytes, "op scratch", err))) goto fail;
    /* the step's inputs: positions, then token ids */
    c->n_chunk = lim->n_chunk;
    if ((rc = dmalloc(c, (void **)&c->pos, snug_backend_plan_step_input_bytes(lim->n_chunk),
                      "step inputs", err)))
        goto fail;
    /* host side, the plan's host items: the embedding staging and the host work arena (MoE
     * expert offsets, hook copies), sized by backend.h's formulas */
    c->stage_floats = (int64_t)lim->n_chunk * lim->n_embd;
    c->stage = snug_malloc(snug_backend_plan_stage_bytes(lim->n_chunk, lim->n_embd));
    if (!c->stage) {
        rc = snug_err_set(err, SNUG_ERR_NOMEM, "out of memory for the embedding staging");
        goto fail;
    }
    if ((rc = snug_arena_init(&c->host_work, "host work (cuda)", lim->host_work_bytes, err)))
        goto fail;
    for (int32_t i = 0; i < n; i++) cuda_reset_slot(&c->be, i);
    if ((rc = cuda_sync(&c->be, err))) goto fail;
    *out = &c->be;
    return SNUG_OK;
fail:
    cuda_close(&c->be);
    return rc;
}

static int cuda_mem_info(size_t *free_b, size_t *total_b, struct snug_err *err) {
    return snug_cuda_mem_info(free_b, total_b, err);
}

static const struct snug_backend_module CUDA_MODULE = {
    .abi = SNUG_BACKEND_ABI,
    .name = "cuda",
    .open = cuda_open,
    .mem_info = cuda_mem_info,
};

/* The library's one entry point (src/backend/loader.c looks it up by name). */
__attribute__((visibility("default"))) const struct snug_backend_module *
snug_cuda_backend_module(void) {
    return &CUDA_MODULE;
}
