/* cuda_ops.h — the CUDA backend's operations, callable from C: the same ops as the CPU backend
 * (src/backend/cpu/ops.h, whose comments define the semantics) on device memory.
 *
 * Every pointer an op takes is a DEVICE pointer (cudaMalloc'd by the caller), except `cu`.
 * All ops are queued on the context's one stream and return at once (asynchronous);
 * snug_cuda_sync waits and reports the first device error. Ops never allocate: scratch comes
 * from the caller as `work`, sized by the matching *_work_bytes function (the memory plan calls
 * those). Ops return SNUG_OK or an error (bad shape, unsupported type, launch failure) with a
 * message in `err`; they never print or exit.
 * Read next: cuda_common.cuh (shared device helpers), cuda_matmul.cu, cuda_basic.cu,
 * cuda_attention.cu, cuda_delta.cu; tests/device/test_cuda_ops.c (each op against the CPU one). */
#ifndef SNUG_CUDA_OPS_H
#define SNUG_CUDA_OPS_H

#include "snug.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Kernels' launch settings made once per device (shared memory opt-ins) are kept in arrays of
 * this many devices; a device past them sets them at every launch. */
#define SNUG_CUDA_MAX_DEVICES 16

/* One device, one stream, one cuBLAS handle. */
struct snug_cuda {
    int device;
    void *stream; /* cudaStream_t */
    void *cublas; /* cublasHandle_t */
    int sm_count;
    int cc_major, cc_minor;
    size_t smem_optin; /* largest dynamic shared memory a block may opt into */
    char name[256];
};

/* Open device `device` (0 = first): creates the stream and the cuBLAS handle. */
int snug_cuda_init(struct snug_cuda *cu, int device, struct snug_err *err);
/* Destroys the stream and the handle; NULL or a zeroed struct is a no-op. */
void snug_cuda_free(struct snug_cuda *cu);
/* Wait for everything queued; report the first asynchronous device error. */
int snug_cuda_sync(struct snug_cuda *cu, struct snug_err *err);

/* ---- device memory (load time only; never on the token path) ------------------------------ */
int snug_cuda_malloc(void **p, size_t bytes, struct snug_err *err);
void snug_cuda_dfree(void *p); /* NULL is a no-op */
int snug_cuda_upload(struct snug_cuda *cu, void *dst, const void *src, size_t bytes,
                     struct snug_err *err); /* synchronous host -> device */
int snug_cuda_download(struct snug_cuda *cu, void *dst, const void *src, size_t bytes,
                       struct snug_err *err); /* synchronous device -> host */
int snug_cuda_copy(struct snug_cuda *cu, void *dst, const void *src, size_t bytes,
                   struct snug_err *err); /* asynchronous device -> device */
/* Free and total device memory in bytes (cudaMemGetInfo). */
int snug_cuda_mem_info(size_t *free_b, size_t *total_b, struct snug_err *err);

/* ---- matrix products ---------------------------------------------------------------------- */
/* Whether `type` has device kernels (f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q4_K q5_K q6_K). */
bool snug_cuda_type_supported(uint32_t type);
/* Whether snug_cuda_matmul with T <= SNUG_CUDA_MATVEC_MAX_T and work memory rounds x to int8
 * (blocks of 32: d = max|x|/127, q = round-half-even(x/d)) for this weight type. */
bool snug_cuda_matvec_int8(uint32_t type);
/* Rows per block of that int8 matvec (1, 2 or 4; anything else: the default, 4). A process-wide
 * tuning knob for tests and benchmarks; env SNUG_MVQ_ROWS sets it at the first call. */
void snug_cuda_matvec_tune(int rows);
/* Lanes per weight unit of that dp4a matvec with 2..8 tokens (1, 2 or 4; anything else: 1, the
 * default): L lanes read the same unit and split the tokens. Q4_K and Q6_K with 2 or 4 rows per
 * block; a tuning knob for tests and benchmarks. */
void snug_cuda_matvec_lanes(int lanes);
/* Which Q4_K / Q6_K products of T <= SNUG_CUDA_MATVEC_MAX_T tokens run on int8 tensor cores
 * instead of dp4a, a mask: 1 Q4_K with T >= 2 (the default), 2 Q4_K with T = 1, 4 Q6_K with
 * T >= 2, 8 Q6_K with T = 1, 16 on every shape (else only where n_in <= 2·n_out); -1 the env's
 * or the default. A tuning knob for tests and benchmarks
 * (env SNUG_MVQ_MMA sets it at the first call). Same int8 rounding of x either way. */
void snug_cuda_matvec_mma(int mask);
/* The same kind of knobs for the decode attention (3 = tensor cores where the formats allow,
 * 1 = grouped per KV head, 2 = its branch-free candidate form, 0 = per query head) and the
 * prompt attention's tile loader (1 = pipelined, 0 = plain); anything else = the default
 * (decode: tensor cores where the formats allow, else the choice by the cache formats). Env
 * SNUG_ATT_GROUPED / SNUG_FA_PIPE set them at the first call (docs/debugging.md). */
void snug_cuda_attention_tune(int grouped);
void snug_cuda_fa_tune(int pipe);
/* The kernel snug_cuda_attention picks for T tokens (K / V formats enum snug_kv_type; plain
 * f16 / f32 caches: SNUG_KV_F16 / SNUG_KV_F32 on both sides) under the knob above. The tensor-
 * core forms round q and the cache to f16 (error ~1e-3 of the output's scale); the others
 * compute in f32. */
enum snug_cuda_att_form {
    SNUG_CUDA_ATT_HEAD,    /* f32, a block per query head */
    SNUG_CUDA_ATT_GROUPED, /* f32, a block per KV head's query heads */
    SNUG_CUDA_ATT_FLAT,    /* the grouped kernel's branch-free form */
    SNUG_CUDA_ATT_MMA,     /* tensor cores, a block per KV head's query rows (decode) */
    SNUG_CUDA_ATT_PROMPT   /* tensor cores, T above 8 (prompt chunks) */
};
int snug_cuda_attention_form(const struct snug_cuda *cu, int k_fmt, int v_fmt, int64_t Hq,
                             int64_t Hkv, int64_t D, int64_t T);
/* y[T][n_out] = x[T][n_in] · Wᵀ (W: n_out rows of n_in elements of `type`, as GGUF stores it).
 * T <= SNUG_CUDA_MATVEC_MAX_T runs the decode kernel (one pass over W, dequantised in
 * registers, f32 accumulate): for q4_K/q6_K/q8_0 with `work` given, x is first rounded to int8
 * in blocks of 32 (as the CPU op does) and the product runs on dp4a (cuda_matvec.cu); with
 * work NULL, or other types, x stays f32. Larger T: q4_K and q6_K weights (where
 * snug_cuda_matmul_mmq says so) run on int8 tensor cores straight from the quantized blocks,
 * x rounded to int8 per 256 (d = max|x|/127, q = round-half-even(x·127/max|x|): the CPU's
 * A256 rounding; cuda_mmq.cu); other types dequantise W in tiles of SNUG_CUDA_GEMM_TILE_ROWS
 * rows to bf16 and multiply with cuBLAS (bf16 operands, f32 accumulate and output). work must
 * hold snug_cuda_matmul_work_bytes(n_in, n_out, T) (which covers both prompt paths).
 * n_in must be a multiple of 256 for K-quants, of 32 for the other block types, of 8 for
 * f32/f16/bf16. */
#define SNUG_CUDA_MATVEC_MAX_T   8
#define SNUG_CUDA_GEMM_TILE_ROWS 4096
int snug_cuda_matmul(struct snug_cuda *cu, uint32_t type, const void *w, int64_t n_in,
                     int64_t n_out, const float *x, int64_t T, float *y, void *work,
                     struct snug_err *err);
size_t snug_cuda_matmul_work_bytes(int64_t n_in, int64_t n_out, int64_t T);
/* y = W·x with x kept in f32 for any T (the decode matvec's f32 kernel, groups of 8 tokens in
 * one launch): the same values as snug_cuda_matmul without work memory at T <= 8, row group by
 * row group. For the products whose outputs feed decisions (routers, gates). */
int snug_cuda_matmul_f32x(struct snug_cuda *cu, uint32_t type, const void *w, int64_t n_in,
                          int64_t n_out, const float *x, int64_t T, float *y, struct snug_err *err);
/* Two such products of one type and input width over the same x in one launch (y = W·x,
 * y2 = W2·x): each row's value is snug_cuda_matmul_f32x's for a matrix of so few rows that it
 * takes one row per block (fewer row blocks of 4 than the device has multiprocessors). */
int snug_cuda_matmul_f32x_pair(struct snug_cuda *cu, uint32_t type, const void *w, const void *w2,
                               int64_t n_in, int64_t n_out, int64_t n_out2, const float *x,
                               int64_t T, float *y, float *y2, struct snug_err *err);
/* Whether snug_cuda_matmul (with work memory) runs this product on the int8 tensor-core kernel
 * (cuda_mmq.cu): q4_K or q6_K, T > SNUG_CUDA_MATVEC_MAX_T, n_in % 256 == 0, a device with the
 * shared memory, and the switch (snug_cuda_mmq_tune) says so for this T and n_out. */
bool snug_cuda_matmul_mmq(const struct snug_cuda *cu, uint32_t type, int64_t n_in, int64_t n_out,
                          int64_t T);
/* The switch: 0 = the bf16 cuBLAS path for every prompt product; 1 = the int8 tensor-core kernel
 * where its table says it is the faster (the default: small steps with many outputs, cuda_mmq.cu
 * MMQ_MAX_T, MMQ_MIN_OUT_*); 2 = the kernel
 * for every product it can take; 3 = the same with every row's super-blocks split over two
 * blocks (a form it otherwise takes only for grids that fill the card badly; tests); anything
 * else = the default or env SNUG_CUDA_MMQ=0..3 (read at the first call; docs/debugging.md).
 * Process-wide; for tests and benchmarks. */
void snug_cuda_mmq_tune(int on);
/* Dequantise rows [0, n_rows) of W to bf16 (dst: n_rows × n_in uint16). Used by matmul;
 * exposed for tests and for callers that keep a bf16 copy. */
int snug_cuda_dequant_bf16(struct snug_cuda *cu, uint32_t type, const void *w, int64_t n_in,
                           int64_t n_rows, uint16_t *dst, struct snug_err *err);
/* snug_cuda_matmul's int8 decode path (T <= SNUG_CUDA_MATVEC_MAX_T, snug_cuda_matvec_int8(type))
 * when `work` already holds x rounded to int8 by the previous such call over the same x, n_in
 * and T with nothing written to work since (the q/k/v or gate/up products of one input): the
 * rounding is skipped, the result is the same. */
int snug_cuda_matvec_int8_again(struct snug_cuda *cu, uint32_t type, const void *w, int64_t n_in,
                                int64_t n_out, int64_t T, float *y, void *work,
                                struct snug_err *err);
/* The int8 decode path for two matrices of one type and n_in over the same x (an FFN's gate and
 * up): y = W·x̃, y2 = W2·x̃ with one rounding of x (none when `rounded`: work holds it, as for
 * snug_cuda_matvec_int8_again) and, where both take the dp4a kernel, one launch; each result
 * has the bits of its single product. T <= SNUG_CUDA_MATVEC_MAX_T, snug_cuda_matvec_int8(type),
 * work of snug_cuda_matmul_work_bytes(n_in, ·, T). */
int snug_cuda_matvec_int8_pair(struct snug_cuda *cu, uint32_t type, const void *w, int64_t n_out,
                               const void *w2, int64_t n_out2, int64_t n_in, const float *x,
                               bool rounded, int64_t T, float *y, float *y2, void *work,
                               struct snug_err *err);
/* x[T][H] = the rows ids[t] (device int32[T]) of the table W (n_rows rows of H elements of
 * `type`, as GGUF stores the token embeddings), dequantised to f32 exactly as the CPU's
 * snug_dequantize_row. SNUG_ERR_UNSUPPORTED for a type without a device decoder (the caller
 * then dequantises on the host). Ids outside [0, n_rows) give zero rows. */
int snug_cuda_embed(struct snug_cuda *cu, uint32_t type, const void *w, int64_t H, int64_t n_rows,
                    const int32_t *ids, int64_t T, float *x, struct snug_err *err);

/* ---- elementwise and norms (ops.h semantics) ----------------------------------------------- */
int snug_cuda_rmsnorm(struct snug_cuda *cu, const float *x, const float *w, float eps, int64_t T,
                      int64_t n, float *y, struct snug_err *err);
/* x[T][n] += y, then xn = rmsnorm(x) · w: the bits of snug_cuda_add then snug_cuda_rmsnorm in one
 * pass (xn must not overlap x or y). */
int snug_cuda_add_rmsnorm(struct snug_cuda *cu, float *x, const float *y, const float *w, float eps,
                          int64_t T, int64_t n, float *xn, struct snug_err *err);
/* The same two with their output also rounded to int8 into `work` exactly as snug_cuda_matmul's
 * int8 matvec would round it (the layout of its work memory), so a product of that output can
 * skip the rounding (snug_cuda_matvec_int8_again). Only where snug_cuda_norm_q8_fits(T, n):
 * 1 <= T <= SNUG_CUDA_MATVEC_MAX_T, n % 32 == 0, n <= 8192; work as snug_cuda_matmul_work_bytes
 * (n, ·, T) asks. */
bool snug_cuda_norm_q8_fits(int64_t T, int64_t n);
int snug_cuda_rmsnorm_q8(struct snug_cuda *cu, const float *x, const float *w, float eps, int64_t T,
                         int64_t n, float *y, void *work, struct snug_err *err);
int snug_cuda_add_rmsnorm_q8(struct snug_cuda *cu, float *x, const float *y, const float *w,
                             float eps, int64_t T, int64_t n, float *xn, void *work,
                             struct snug_err *err);
int snug_cuda_l2norm(struct snug_cuda *cu, float *x, int64_t rows, int64_t n, float eps,
                     struct snug_err *err);
/* pos: device int32[T]. */
int snug_cuda_rope_neox(struct snug_cuda *cu, float *x, int64_t T, int64_t n_heads,
                        int64_t head_dim, int64_t n_rot, const int32_t *pos, float base,
                        struct snug_err *err);
/* Interleaved M-RoPE (ops.h snug_op_rope_mrope): pos3 device int32[T][3] = (t, h, w); pair i
 * takes h when i % 3 == 1 and i < 3·sections[1], w when i % 3 == 2 and i < 3·sections[2], else
 * t. With t = h = w: snug_cuda_rope_neox's result. */
int snug_cuda_rope_mrope(struct snug_cuda *cu, float *x, int64_t T, int64_t n_heads,
                         int64_t head_dim, int64_t n_rot, const int32_t *pos3,
                         const uint32_t sections[3], float base, struct snug_err *err);
int snug_cuda_swiglu(struct snug_cuda *cu, const float *gate, const float *up, int64_t n, float *y,
                     struct snug_err *err);
/* y[i] = x[i] · sigmoid(gate[i]) (the output gate of the full-attention layers). */
int snug_cuda_sigmoid_mul(struct snug_cuda *cu, const float *x, const float *gate, int64_t n,
                          float *y, struct snug_err *err);
int snug_cuda_gated_rmsnorm(struct snug_cuda *cu, const float *o, const float *z, const float *w,
                            float eps, int64_t T, int64_t Nv, int64_t dv, float *y,
                            struct snug_err *err);
/* The three above with their output also rounded to int8 into `work` as the _q8 norms do (the
 * same bits in y as without). The rounding is laid out flat, blocks of 32 consecutive elements
 * of y: it is the rounded x of a product of T' rows of n_in for any T'·n_in equal to the output's
 * size (n; gated: T·Nv·dv) with n_in % 32 == 0 — snug_cuda_matvec_int8_again, or
 * snug_cuda_moe_matmul with x NULL, over that `work`. n % 32 == 0 (gated: dv % 32 == 0); work
 * as snug_cuda_matmul_work_bytes(size, ·, 1) asks. */
int snug_cuda_swiglu_q8(struct snug_cuda *cu, const float *gate, const float *up, int64_t n,
                        float *y, void *work, struct snug_err *err);
int snug_cuda_sigmoid_mul_q8(struct snug_cuda *cu, const float *x, const float *gate, int64_t n,
                             float *y, void *work, struct snug_err *err);
int snug_cuda_gated_rmsnorm_q8(struct snug_cuda *cu, const float *o, const float *z, const float *w,
                               float eps, int64_t T, int64_t Nv, int64_t dv, float *y, void *work,
                               struct snug_err *err);
/* One run of a batched step for the multi-run forms below (conv_silu_runs, delta_decode_runs):
 * its rows [row0, row0 + T) of the step's inputs and outputs, its own state (conv or delta),
 * and for delta_decode_runs its rollback points (snap NULL: none; as snug_cuda_delta_decode). */
#define SNUG_CUDA_RUNS_MAX 16 /* runs per launch (more go in further launches) */
struct snug_cuda_run {
    int64_t row0, T;
    float *state, *snap;
    int64_t snap_stride;
};
/* y must not overlap x or conv_state (as on the CPU). */
int snug_cuda_conv_silu(struct snug_cuda *cu, const float *x, int64_t T, int64_t C, int64_t K,
                        const float *w, float *conv_state, float *y, struct snug_err *err);
/* snug_cuda_conv_silu for n runs in one launch per SNUG_CUDA_RUNS_MAX of them: run i over rows
 * runs[i].row0 .. of x and y with its state runs[i].state; the same bits as one call per run. */
int snug_cuda_conv_silu_runs(struct snug_cuda *cu, int32_t n, const struct snug_cuda_run *runs,
                             const float *x, int64_t C, int64_t K, const float *w, float *y,
                             struct snug_err *err);

/* ---- attention ---------------------------------------------------------------------------- */
/* Same layout as struct snug_kv_view (ops.h), device pointers: type F32 or F16 (both K and V
 * in that dtype), or SNUG_CUDA_KV_FMT with K and V in the kvfmt formats k_fmt / v_fmt (enum
 * snug_kv_type: f16 f32 bf16 q8_0 fp8 tq4 tq3 run on the device; a position holds Hkv stored
 * vectors of snug_kvfmt_vec_bytes each). */
#define SNUG_CUDA_KV_FMT 0x4b56u /* = SNUG_KV_VIEW_FMT of src/kv/kv_view.h */
struct snug_cuda_kv {
    uint32_t type;
    void *k, *v;
    int64_t n_ctx;
    int32_t k_fmt, v_fmt; /* type SNUG_CUDA_KV_FMT only */
};
/* Whether the device kernels run a K/V format pair (enum snug_kv_type each) at head size D. */
bool snug_cuda_kv_supported(int k_fmt, int v_fmt, int64_t D);
/* kv_store and attention: pos_dev NULL, or the rows' positions in device memory (int32[T],
 * pos_dev[0] == pos0, consecutive): the kernels then read the first position there when they
 * run, so a captured launch (a CUDA graph) replays at later positions; pos0 is checked against
 * the cache here. The results do not depend on which is given. */
int snug_cuda_kv_store(struct snug_cuda *cu, const struct snug_cuda_kv *kv, int64_t Hkv, int64_t D,
                       int64_t pos0, const int32_t *pos_dev, int64_t T, const float *k,
                       const float *v, struct snug_err *err);
/* Causal GQA attention of T queries at pos0.. over the cache, flash-style (online softmax;
 * the cache is read in place in its own format). Small T (decode, speculative verify) runs
 * on CUDA cores, long contexts split across blocks (partial max/sum/output in `work`, then
 * merged); larger T runs the tensor-core kernel (cuda_fa.cu: K/V tiles dequantised to f16 in
 * shared memory, mma.sync, f32 softmax) when D is 64, 128 or 256 and the device has the
 * shared memory. D <= 256, D % 32 == 0. */
int snug_cuda_attention(struct snug_cuda *cu, const struct snug_cuda_kv *kv, int64_t Hq,
                        int64_t Hkv, int64_t D, int64_t pos0, const int32_t *pos_dev, int64_t T,
                        const float *q, float scale, float *out, void *work, struct snug_err *err);
size_t snug_cuda_attention_work_bytes(int64_t Hq, int64_t D, int64_t T);

/* ---- Gated DeltaNet (ops.h semantics; state f32 [Nv][dk][dv]) ------------------------------ */
int snug_cuda_gated_delta_step(struct snug_cuda *cu, int64_t T, int64_t Nk, int64_t Nv, int64_t dk,
                               int64_t dv, const float *q, const float *k, const float *v,
                               const float *g, const float *beta, float *state, float *out,
                               struct snug_err *err);
/* The decode rows' recurrence fused with its preparation (backend.h delta_decode): T rows of
 * the conv output qkv [T][2·Nk·dk + Nv·dv] = [q | k | v], the raw β and α projections b, alpha
 * [T][Nv]; q and k L2-normed (eps) and q scaled, β = sigmoid(b), g = a·softplus(α + dt), then the
 * step form, token after token; with snap the state after token t is also written to
 * snap + t·snap_stride (floats). */
int snug_cuda_delta_decode(struct snug_cuda *cu, int64_t T, int64_t Nk, int64_t Nv, int64_t dk,
                           int64_t dv, const float *qkv, const float *b, const float *alpha,
                           const float *a, const float *dt, float qscale, float eps, float *state,
                           float *out, float *snap, int64_t snap_stride, struct snug_err *err);
/* snug_cuda_delta_decode for n runs of a batched step: run i's rows runs[i].row0 .. of qkv, b,
 * alpha and out, its state and rollback points; one launch per SNUG_CUDA_RUNS_MAX runs when
 * every run has at most 8 rows and dk is 32, 64 or 128 (else one call per run). The same bits
 * as one call per run. */
int snug_cuda_delta_decode_runs(struct snug_cuda *cu, int32_t n, const struct snug_cuda_run *runs,
                                int64_t Nk, int64_t Nv, int64_t dk, int64_t dv, const float *qkv,
                                const float *b, const float *alpha, const float *a, const float *dt,
                                float qscale, float eps, float *out, struct snug_err *err);
/* The prompt form (ops.h: chunked, C = 64): the WY form in two launches per piece of the prompt
 * (cuda_delta.cu) where T >= 32, dk is 32, 64 or 128, dv + dk <= 256 and `work` (16-byte
 * aligned) holds at least one chunk's records; pieces as long as `work_bytes` allows (the whole
 * prompt with snug_cuda_delta_chunk_work_bytes(T, ...)). Otherwise, or with work NULL, the
 * recurrence of _step (dk in {32, 64, 96, 128}). The two agree to float rounding. */
int snug_cuda_gated_delta_chunked(struct snug_cuda *cu, int64_t T, int64_t Nk, int64_t Nv,
                                  int64_t dk, int64_t dv, const float *q, const float *k,
                                  const float *v, const float *g, const float *beta, float *state,
                                  float *out, void *work, size_t work_bytes, struct snug_err *err);
/* Work bytes for the chunked form over T tokens in one piece. */
size_t snug_cuda_delta_chunk_work_bytes(int64_t T, int64_t Nv, int64_t dk, int64_t dv);
/* Whether snug_cuda_gated_delta_chunked runs the WY form for this shape with `work_bytes` of
 * work (given 16-byte aligned q, k and work); else it runs the recurrence. */
bool snug_cuda_delta_wy(const struct snug_cuda *cu, int64_t T, int64_t Nv, int64_t dk, int64_t dv,
                        size_t work_bytes);
/* The WY form's scan over the chunks: 1 on tensor cores (3xTF32, the default), -1 the default,
 * anything else the f32 one. For tests and benchmarks; not thread-safe. */
void snug_cuda_delta_tune(int scan);

#ifdef __cplusplus
}
#endif

#endif /* SNUG_CUDA_OPS_H */
