/* ops.h — the CPU backend's operations: everything a forward pass of the Qwen3.5/3.6 family
 * needs, over plain float32 activation buffers, threaded through the pool.
 *
 * Conventions: activations are row-major float32, one row per token: a buffer described as
 * `[T][n]` holds T rows of n floats, row t at x + t*n (fastest dimension last in this
 * notation, which is the reverse of ggml's `ne` order). Weight matrices are GGUF tensors
 * `ne = {n_in, n_out}`: n_out rows of n_in elements in any computable dtype.
 * No op allocates: scratch memory comes from the caller as `work` (from the work arena), sized
 * by the matching `_work_bytes` function, which the memory plan also calls. `pool` may be NULL
 * (single thread). All ops are deterministic for a given thread count.
 * Read next: ops_basic.c, ops_matmul.c, ops_attention.c, ops_delta.c (one file per op family;
 * ops_util.h holds their shared loops), src/arch/qwen35.c (the caller).
 */
#ifndef SNUG_OPS_H
#define SNUG_OPS_H

#include "backend/backend.h"
#include "core/threadpool.h"
#include "kv/kv_view.h"

#include <stddef.h>
#include <stdint.h>

/* ---- matrix products ---------------------------------------------------------------------- */
/* y[T][n_out] = x[T][n_in] · Wᵀ, W a weight tensor of dtype `type` with n_out rows of n_in.
 * Each weight row is read once per call (dequantized into per-thread scratch when T > 1), so a
 * prompt chunk costs one pass over the weights. Threads split the output rows. */
void snug_op_matmul(struct snug_pool *pool, uint32_t type, const void *w, int64_t n_in,
                    int64_t n_out, const float *x, int64_t T, float *y, void *work);
size_t snug_op_matmul_work_bytes(int64_t n_in, int n_threads);
/* Up to this many rows T, weight types with int8 activations (quant.h snug_act_int8_use) run
 * on them; longer prompt chunks of every block type dequantize the weights and run on float
 * activations (faster there, and exact to float rounding). */
#define SNUG_OP_MATMUL_INT8_MAX_T 16
/* Up to this many rows, f16 / bf16 weights are dotted in place (a prompt row then has the bits
 * of decoding that token alone); longer chunks widen them to float rows (exact) for the
 * register-blocked tile product, summing in another order. */
#define SNUG_OP_MATMUL_F16_INPLACE_MAX_T 64

/* ---- elementwise and norms ---------------------------------------------------------------- */
/* The element-wise ops (this section, snug_op_conv_silu and snug_op_gated_rmsnorm) run on the
 * calling thread below this many elements (a decode step: no pool wake-up) and split rows or
 * channels over the pool above it; every element is computed by the same code either way, so
 * results are identical for any thread count. SiLU and sigmoid in them use snug_ops_expf
 * (ops_util.h, within 1 ulp of expf), not libm. */
#define SNUG_OP_EWISE_PAR_MIN 65536
/* y[T][n] = x · rsqrt(mean(x²) + eps) · w   (w may be NULL: no weight). y may alias x. */
void snug_op_rmsnorm(struct snug_pool *pool, const float *x, const float *w, float eps, int64_t T,
                     int64_t n, float *y);
/* In place: each of the `rows` rows of n floats scaled to unit L2 norm: x / sqrt(Σx² + eps). */
void snug_op_l2norm(struct snug_pool *pool, float *x, int64_t rows, int64_t n, float eps);
/* In place NeoX-style rotary embedding on the first n_rot dims of each head:
 * x: [T][n_heads][head_dim]; token t has position pos[t]; pairs (i, i + n_rot/2),
 * θ_i = pos · base^(−2i/n_rot). Dims ≥ n_rot are untouched. */
void snug_op_rope_neox(struct snug_pool *pool, float *x, int64_t T, int64_t n_heads,
                       int64_t head_dim, int64_t n_rot, const int32_t *pos, float base);
/* The same rotation with three positions per token (multimodal rows, docs/vision.md step 6):
 * pos3 [T][3] = (t, h, w); pair i takes one of them by the interleaved M-RoPE rule over
 * `sections` (the GGUF's rope.dimension_sections). With t = h = w: snug_op_rope_neox's result
 * bit for bit. n_rot/2 <= SNUG_ROPE_MAX_PAIRS (backend.h). */
void snug_op_rope_mrope(struct snug_pool *pool, float *x, int64_t T, int64_t n_heads,
                        int64_t head_dim, int64_t n_rot, const int32_t *pos3,
                        const uint32_t sections[3], float base);
static inline float snug_silu(float x);
static inline float snug_sigmoid(float x);
/* y[i] = silu(gate[i]) * up[i] for i < n (y may alias either). */
void snug_op_swiglu(struct snug_pool *pool, const float *gate, const float *up, int64_t n,
                    float *y);
/* y[i] = x[i] · σ(g[i]) for i < n (y may alias either): the attention output gate. */
void snug_op_sigmoid_mul(struct snug_pool *pool, const float *x, const float *g, int64_t n,
                         float *y);
/* x[i] += y[i] for i < n (the residual add). */
void snug_op_add(struct snug_pool *pool, float *x, const float *y, int64_t n);
/* MoE combine: y[t] = Σ_j w[t·k+j] · d[slot[t·k+j]] (rows of H, terms in order j), y: [T][H]. */
void snug_op_moe_combine(struct snug_pool *pool, float *y, const float *d, const int32_t *slot,
                         const float *w, int64_t T, int64_t k, int64_t H);
/* MoE routing (docs/qwen35.md §2.8), host memory: for each of T tokens, softmax over its E
 * router logits (float32 values, double sum), the k largest logits (ties to the lower index),
 * their weights renormalised to sum 1 → sel/selw [T·k]; then the T·k (token, choice) pairs
 * grouped by expert, in token order within an expert: order[s] = token of slot s, slot[t·k+j]
 * = the slot of (t, j), off[e] = the first slot of expert e (off[E] = T·k). cnt: [E] scratch. */
void snug_op_moe_route(const float *logits, int64_t T, int64_t E, int64_t k, int32_t *sel,
                       int32_t *cnt, float *selw, int32_t *order, int32_t *slot, int32_t *off);
/* Shared-expert add: y[t] += σ(gl[t]) · d[t] for rows of H, t < T. */
void snug_op_add_gated(struct snug_pool *pool, float *y, const float *d, const float *gl, int64_t T,
                       int64_t H);

/* ---- attention (full-attention layers) ---------------------------------------------------- */
/* Caches are struct snug_kv_view (src/kv/kv_view.h). */
/* Store k, v rows ([T][Hkv][D] float32) at positions pos0 .. pos0+T-1 (converted to the
 * cache dtype). Caller guarantees pos0 + T <= n_ctx. */
void snug_op_kv_store(struct snug_kv_view *kv, int64_t Hkv, int64_t D, int64_t pos0, int64_t T,
                      const float *k, const float *v);
/* Causal GQA attention for T query tokens at positions pos0 .. pos0+T-1 over the cache
 * (which must already hold positions 0 .. pos0+T-1): query t attends to positions 0..pos0+t.
 * q: [T][Hq][D], out: [T][Hq][D]; query head h uses kv head h / (Hq/Hkv); softmax(scale·q·k)
 * computed as an online softmax over tiles of the cache, float32 throughout, so memory does
 * not grow with the context. `work` (snug_op_attention_work_bytes) may be NULL for an F32
 * cache. */
void snug_op_attention(struct snug_pool *pool, const struct snug_kv_view *kv, int64_t Hq,
                       int64_t Hkv, int64_t D, int64_t pos0, int64_t T, const float *q, float scale,
                       float *out, void *work);
size_t snug_op_attention_work_bytes(int64_t D, int n_threads);
/* The same two operations for any view: a plain F32/F16 view goes to the functions above, a
 * SNUG_KV_VIEW_FMT view to the compressed-cache kernels, which quantize each new K/V vector as
 * it is stored and attend over the stored cache directly (query rotated once for rotated K,
 * tiles decoded into per-thread scratch, output inverse-rotated once for rotated V); work is
 * snug_op_kvq_attention_work_bytes (≥ snug_op_attention_work_bytes), independent of n_ctx. */
void snug_op_kvq_store(struct snug_kv_view *kv, int64_t Hkv, int64_t D, int64_t pos0, int64_t T,
                       const float *k, const float *v);
void snug_op_kvq_attention(struct snug_pool *pool, const struct snug_kv_view *kv, int64_t Hq,
                           int64_t Hkv, int64_t D, int64_t pos0, int64_t T, const float *q,
                           float scale, float *out, void *work);
size_t snug_op_kvq_attention_work_bytes(int64_t D, int n_threads);

/* ---- Gated DeltaNet ----------------------------------------------------------------------- */
/* Causal depthwise conv1d (kernel K) + SiLU over T tokens of C channels.
 * x: [T][C] new inputs; conv_state: [K-1][C] the previous K-1 inputs (oldest first), updated in
 * place to the last K-1 inputs; w: GGUF ssm_conv1d, ne = {K, C}, float32: w[c*K + j], j = K-1
 * multiplies the current token. y: [T][C] = silu(Σ_j w[c][j] · x_{t-K+1+j}[c]).
 * y must not overlap x or conv_state. */
void snug_op_conv_silu(struct snug_pool *pool, const float *x, int64_t T, int64_t C, int64_t K,
                       const float *w, float *conv_state, float *y);

/* The gated delta rule for T tokens of one layer, all value heads, state in float32.
 * q, k: [T][Nk][dk], already L2-normalised, q already scaled by 1/sqrt(dk).
 * v:    [T][Nv][dv].  g: [T][Nv] log-decay (≤ 0).  beta: [T][Nv] in (0, 1).
 * Value head j uses key head j % Nk (GGUF order). state: [Nv][dk][dv] (S[j][i][v]), updated in
 * place. out: [T][Nv][dv].
 * Per token:  S ← e^g S;  δ = β (v − Sᵀk);  S ← S + k δᵀ;  o = Sᵀ q.
 * _step runs that recurrence token by token (decode); _chunked runs the chunked (C = 64) WY
 * form over the prompt (docs/qwen35.md §2.6). Both give the same numbers up to float rounding. */
void snug_op_gated_delta_step(struct snug_pool *pool, int64_t T, int64_t Nk, int64_t Nv, int64_t dk,
                              int64_t dv, const float *q, const float *k, const float *v,
                              const float *g, const float *beta, float *state, float *out);
void snug_op_gated_delta_chunked(struct snug_pool *pool, int64_t T, int64_t Nk, int64_t Nv,
                                 int64_t dk, int64_t dv, const float *q, const float *k,
                                 const float *v, const float *g, const float *beta, float *state,
                                 float *out, void *work);
size_t snug_op_gated_delta_work_bytes(int64_t dk, int64_t dv, int n_threads);

/* y[T][Nv][dv] = rmsnorm(o_j) · w · silu(z_j) per value head (w: [dv], shared by all heads). */
void snug_op_gated_rmsnorm(struct snug_pool *pool, const float *o, const float *z, const float *w,
                           float eps, int64_t T, int64_t Nv, int64_t dv, float *y);

/* ---- encoder ops (bidirectional transformers: the vision tower, ops_encoder.c) ---------- */
/* y[T][n] = (x − mean) / sqrt(var + eps) · w + b per row (LayerNorm: biased variance, mean and
 * variance accumulated in double). y may alias x. */
void snug_op_layernorm(struct snug_pool *pool, const float *x, const float *w, const float *b,
                       float eps, int64_t T, int64_t n, float *y);
/* What follows a biased product: none, or a GELU. */
enum snug_act { SNUG_ACT_NONE = 0, SNUG_ACT_GELU_TANH = 1, SNUG_ACT_GELU_ERF = 2 };
/* In place over [T][n]: y = act(y + b) (b [n]; GELU-tanh: PyTorch's approximate="tanh"). */
void snug_op_bias_act(struct snug_pool *pool, float *y, const float *b, int64_t T, int64_t n,
                      enum snug_act act);
/* In place rotary embedding by a table of angles: rows t < T of x at x + t·stride hold n_heads
 * heads of head_dim; in each head the pair (i, i + head_dim/2) turns by ang[t][i]
 * (ang [T][head_dim/2]). The vision tower's 2-D rotary: the first half of the angles from the
 * patch's row, the rest from its column. */
void snug_op_rope_angles(struct snug_pool *pool, float *x, int64_t stride, int64_t T,
                         int64_t n_heads, int64_t head_dim, const float *ang);
/* Bidirectional attention over T rows (no mask, no cache): rows t of q, k, v at q + t·stride
 * (k, v likewise) hold n_heads heads of head_dim; out [T][n_heads·head_dim] =
 * softmax(scale · q·kᵀ) · v per head, the softmax sum in double. Threads split (head, four
 * queries) items; work: snug_op_attention_full_work_bytes (four rows of T scores per thread). */
void snug_op_attention_full(struct snug_pool *pool, const float *q, const float *k, const float *v,
                            int64_t stride, int64_t T, int64_t n_heads, int64_t head_dim,
                            float scale, float *out, void *work);
size_t snug_op_attention_full_work_bytes(int64_t T, int n_threads);

/* The libm forms (reference and test code; the ops use ops_util.h's snug_ops_silu/_sigmoid). */
#include <math.h>
static inline float snug_silu(float x) {
    return x / (1.0f + expf(-x));
}
static inline float snug_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

#endif /* SNUG_OPS_H */
