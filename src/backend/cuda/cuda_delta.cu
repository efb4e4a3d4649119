/* cuda_delta.cu — the gated delta rule of the Gated DeltaNet layers on the device (semantics:
 * src/backend/cpu/ops.h snug_op_gated_delta_step, docs/qwen35.md §2.5-2.6), state f32 [Nv][dk][dv].
 * Columns of a head's state evolve independently (δ_v and S[:, v] depend only on column v),
 * so a block owns (value head j, DN_BCOLS columns) and keeps that slice of S in registers for
 * the whole call: each warp DN_WCOLS columns, lane l rows l, l+32, ... of them. Tokens are
 * staged DN_STAGE at a time in shared memory (coalesced loads of q, k, v, g, β).
 * Invariant: S is read once and written once per call whatever T is; value head j reads key
 * head j % Nk; nothing allocates.
 * Read next: cuda_ops.h (the chunked entry point's status), docs/perf/cuda-kernels.md. */
#include "backend/cuda/cuda_common.cuh"

#define DN_WARPS 4
#define DN_WCOLS 8
#define DN_BCOLS (DN_WARPS * DN_WCOLS)
#define DN_STAGE 16

/* The decode form's preparation, folded into the kernel (PREP): q, k and v are read straight
 * from the conv output (row stride `qs` for q and k, `vs` for v), q and k L2-normed per head
 * (x · rsqrt(Σx² + eps)) and q scaled by qscale, β = sigmoid(b) and g = a·softplus(α + dt) from
 * the raw projections — the arithmetic of k_l2norm, k_scale and k_delta_gates, one launch instead
 * of seven. Optional snapshots: the state after token t also goes to snap + t·snap_stride
 * (speculative verification's rollback points), written from the registers. */
struct delta_prep {
    const float *a, *dt; /* NULL: g and β are ready (the plain step) */
    float qscale, eps;   /* PREP only */
    float *snap;         /* NULL: no snapshots */
    int64_t snap_stride; /* floats between token t's snapshot and t + 1's */
};

/* Token gi's decay e^g and β (PREP: from the raw projections, k_delta_gates' arithmetic:
 * β = sigmoid(b), g = a·softplus(α + dt)). */
template <bool PREP>
__device__ __forceinline__ void delta_gate(const float *__restrict__ g,
                                           const float *__restrict__ beta, int64_t gi, int64_t j,
                                           const delta_prep &pp, float *decay, float *b) {
    float gv = g[gi], bv = beta[gi];
    if (PREP) {
        bv = 1.0f / (1.0f + expf(-bv));
        float x = gv + pp.dt[j];
        gv = pp.a[j] * (x > 20.0f ? x : log1pf(expf(x)));
    }
    *decay = __expf(gv);
    *b = bv;
}

/* The inverse L2 norms of one token's k and q (dk = 32·RPL floats each, lane l holding
 * elements l, l + 32, ...), summed over the warp. */
template <int RPL>
__device__ __forceinline__ void delta_inv_norms(const float *kt, const float *qt, float eps,
                                                float *ik, float *iq) {
    int lane = threadIdx.x & 31;
    float a2 = 0.0f, b2 = 0.0f;
#pragma unroll
    for (int r = 0; r < RPL; r++) {
        float kv_ = kt[lane + 32 * r], qv_ = qt[lane + 32 * r];
        a2 = fmaf(kv_, kv_, a2);
        b2 = fmaf(qv_, qv_, b2);
    }
    *ik = rsqrtf(warp_sum(a2) + eps);
    *iq = rsqrtf(warp_sum(b2) + eps);
}

/* RPL = dk / 32 rows per lane. Per token, per column c:
 *   sk = Σ_i S[i][c] k_i, sq = Σ_i S[i][c] q_i (warp sums), δ = β (v_c − e^g sk),
 *   o_c = e^g sq + (k·q) δ, S[i][c] ← e^g S[i][c] + k_i δ   (as the CPU step form).
 * qs / vs: floats between consecutive tokens' q (and k) / v rows. */
template <int RPL, bool PREP>
__global__ void __launch_bounds__(DN_WARPS * 32)
    k_delta(int64_t T, int64_t Nk, int64_t Nv, int64_t dv, const float *__restrict__ q,
            const float *__restrict__ k, const float *__restrict__ v, const float *__restrict__ g,
            const float *__restrict__ beta, float *state, float *out, int64_t qs, int64_t vs,
            delta_prep pp) {
    constexpr int dk = RPL * 32;
    __shared__ float sk[DN_STAGE][dk], sq[DN_STAGE][dk], sv[DN_STAGE][DN_BCOLS];
    __shared__ float sg[DN_STAGE], sb[DN_STAGE];
    int64_t j = blockIdx.x, kh = j % Nk;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int c0 = blockIdx.y * DN_BCOLS; /* first column of the block */
    int cw = c0 + w * DN_WCOLS;     /* first column of the warp */
    float *S = state + j * dk * dv;
    float st[DN_WCOLS][RPL];
#pragma unroll
    for (int c = 0; c < DN_WCOLS; c++)
#pragma unroll
        for (int r = 0; r < RPL; r++)
            st[c][r] = cw + c < dv ? S[(int64_t)(lane + 32 * r) * dv + cw + c] : 0.0f;
    for (int64_t t0 = 0; t0 < T; t0 += DN_STAGE) {
        int n = T - t0 < DN_STAGE ? (int)(T - t0) : DN_STAGE;
        __syncthreads();
        for (int i = threadIdx.x; i < n * dk; i += blockDim.x) {
            int tt = i / dk, e = i - tt * dk;
            sk[tt][e] = k[(t0 + tt) * qs + kh * dk + e];
            sq[tt][e] = q[(t0 + tt) * qs + kh * dk + e];
        }
        for (int i = threadIdx.x; i < n * DN_BCOLS; i += blockDim.x) {
            int tt = i / DN_BCOLS, e = i - tt * DN_BCOLS;
            sv[tt][e] = c0 + e < dv ? v[(t0 + tt) * vs + j * dv + c0 + e] : 0.0f;
        }
        if (threadIdx.x < n)
            delta_gate<PREP>(g, beta, (t0 + threadIdx.x) * Nv + j, j, pp, &sg[threadIdx.x],
                             &sb[threadIdx.x]);
        __syncthreads();
        if (PREP) { /* L2-norm q and k per token (warp w: tokens w, w + DN_WARPS, ...) */
            for (int tt = w; tt < n; tt += DN_WARPS) {
                float ik, iq;
                delta_inv_norms<RPL>(sk[tt], sq[tt], pp.eps, &ik, &iq);
#pragma unroll
                for (int r = 0; r < RPL; r++) {
                    sk[tt][lane + 32 * r] *= ik;
                    sq[tt][lane + 32 * r] = sq[tt][lane + 32 * r] * iq * pp.qscale;
                }
            }
            __syncthreads();
        }
        for (int tt = 0; tt < n; tt++) {
            float kr[RPL], qr[RPL], kq = 0.0f;
#pragma unroll
            for (int r = 0; r < RPL; r++) {
                kr[r] = sk[tt][lane + 32 * r];
                qr[r] = sq[tt][lane + 32 * r];
                kq = fmaf(kr[r], qr[r], kq);
            }
            kq = warp_sum(kq);
            float decay = sg[tt], bt = sb[tt];
            float *o = out + ((t0 + tt) * Nv + j) * dv;
#pragma unroll
            for (int c = 0; c < DN_WCOLS; c++) {
                float a = 0.0f, b = 0.0f;
#pragma unroll
                for (int r = 0; r < RPL; r++) {
                    a = fmaf(st[c][r], kr[r], a);
                    b = fmaf(st[c][r], qr[r], b);
                }
                a = warp_sum(a);
                b = warp_sum(b);
                float delta = bt * (sv[tt][w * DN_WCOLS + c] - decay * a);
                if (lane == 0 && cw + c < dv) o[cw + c] = decay * b + kq * delta;
#pragma unroll
                for (int r = 0; r < RPL; r++) st[c][r] = fmaf(decay, st[c][r], kr[r] * delta);
            }
            if (pp.snap) { /* the rollback point after this token */
                float *P = pp.snap + (t0 + tt) * pp.snap_stride + j * dk * dv;
#pragma unroll
                for (int c = 0; c < DN_WCOLS; c++)
#pragma unroll
                    for (int r = 0; r < RPL; r++)
                        if (cw + c < dv) P[(int64_t)(lane + 32 * r) * dv + cw + c] = st[c][r];
            }
        }
    }
#pragma unroll
    for (int c = 0; c < DN_WCOLS; c++)
#pragma unroll
        for (int r = 0; r < RPL; r++)
            if (cw + c < dv) S[(int64_t)(lane + 32 * r) * dv + cw + c] = st[c][r];
}

/* The small-T form (decode, verification, MTP steps: T <= DS_MAXT), one thread per (column,
 * DS_RPT rows): lane l of a block holds column c0 + l and warp w rows DS_RPT·w .. DS_RPT·w +
 * DS_RPT − 1, so each load of the state is one 128-byte row piece per warp (k_delta's lanes run
 * down a column: 32 rows dv floats apart per load, 20 µs per 27B layer under ncu against a
 * 1.5 µs floor). Per token the column sums Σ_i S[i][c] k_i and Σ_i S[i][c] q_i meet across the
 * warps in shared memory (double-buffered by token parity: one barrier per token). All T
 * tokens' q, k (L2-normed and scaled with PREP), gates and k·q are staged first. The sums run
 * in another order than k_delta's, so the two agree to rounding, not bits. */
#define DS_MAXT 8
#define DS_RPT  16
template <int DK, bool PREP>
__global__ void __launch_bounds__(DK / DS_RPT * 32)
    k_delta_small(int T, int64_t Nk, int64_t Nv, int64_t dv, const float *__restrict__ q,
                  const float *__restrict__ k, const float *__restrict__ v,
                  const float *__restrict__ g, const float *__restrict__ beta, float *state,
                  float *out, int64_t qs, int64_t vs, delta_prep pp) {
    constexpr int W = DK / DS_RPT;
    __shared__ float sk[DS_MAXT][DK], sq[DS_MAXT][DK];
    __shared__ float sg[DS_MAXT], sb[DS_MAXT], skq[DS_MAXT];
    __shared__ float pa[2][W][32], pb[2][W][32];
    int64_t j = blockIdx.x, kh = j % Nk;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int64_t c = (int64_t)blockIdx.y * 32 + lane;
    bool cin = c < dv;
    int row0 = w * DS_RPT;
    float *S = state + j * DK * dv;
    float st[DS_RPT];
#pragma unroll
    for (int r = 0; r < DS_RPT; r++) st[r] = cin ? S[(int64_t)(row0 + r) * dv + c] : 0.0f;
    for (int i = threadIdx.x; i < T * DK; i += blockDim.x) {
        int tt = i / DK, e = i - tt * DK;
        sk[tt][e] = k[tt * qs + kh * DK + e];
        sq[tt][e] = q[tt * qs + kh * DK + e];
    }
    if (threadIdx.x < T)
        delta_gate<PREP>(g, beta, (int64_t)threadIdx.x * Nv + j, j, pp, &sg[threadIdx.x],
                         &sb[threadIdx.x]);
    __syncthreads();
    for (int tt = w; tt < T; tt += W) { /* warp w: tokens w, w + W, ...: norms and k·q */
        constexpr int RPL = DK / 32;
        float ik = 1.0f, iq = 1.0f;
        if (PREP) {
            delta_inv_norms<RPL>(sk[tt], sq[tt], pp.eps, &ik, &iq);
            iq *= pp.qscale;
        }
        float kq = 0.0f;
#pragma unroll
        for (int r = 0; r < RPL; r++) {
            float kv_ = sk[tt][lane + 32 * r] * ik, qv_ = sq[tt][lane + 32 * r] * iq;
            sk[tt][lane + 32 * r] = kv_;
            sq[tt][lane + 32 * r] = qv_;
            kq = fmaf(kv_, qv_, kq);
        }
        kq = warp_sum(kq);
        if (lane == 0) skq[tt] = kq;
    }
    __syncthreads();
    for (int tt = 0; tt < T; tt++) {
        int par = tt & 1;
        float a = 0.0f, b = 0.0f;
#pragma unroll
        for (int r = 0; r < DS_RPT; r++) {
            a = fmaf(st[r], sk[tt][row0 + r], a);
            b = fmaf(st[r], sq[tt][row0 + r], b);
        }
        pa[par][w][lane] = a;
        pb[par][w][lane] = b;
        float vv = cin ? v[tt * vs + j * dv + c] : 0.0f;
        __syncthreads();
        float A = 0.0f, B = 0.0f;
#pragma unroll
        for (int x = 0; x < W; x++) A += pa[par][x][lane], B += pb[par][x][lane];
        float decay = sg[tt];
        float delta = sb[tt] * (vv - decay * A);
        if (w == 0 && cin) out[((int64_t)tt * Nv + j) * dv + c] = decay * B + skq[tt] * delta;
#pragma unroll
        for (int r = 0; r < DS_RPT; r++) st[r] = fmaf(decay, st[r], sk[tt][row0 + r] * delta);
        if (pp.snap && cin) { /* the rollback point after this token */
            float *P = pp.snap + tt * pp.snap_stride + j * DK * dv;
#pragma unroll
            for (int r = 0; r < DS_RPT; r++) P[(int64_t)(row0 + r) * dv + c] = st[r];
        }
    }
    if (cin)
#pragma unroll
        for (int r = 0; r < DS_RPT; r++) S[(int64_t)(row0 + r) * dv + c] = st[r];
}

static int delta_launch(struct snug_cuda *cu, int64_t T, int64_t Nk, int64_t Nv, int64_t dk,
                        int64_t dv, const float *q, const float *k, const float *v, const float *g,
                        const float *beta, float *state, float *out, int64_t qs, int64_t vs,
                        delta_prep pp, struct snug_err *err) {
    if (Nk <= 0 || Nv <= 0 || dv <= 0)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "cuda delta: Nk %lld, Nv %lld, dv %lld must "
                            "be positive",
                            (long long)Nk, (long long)Nv, (long long)dv);
    if (T <= 0) return SNUG_OK;
    cudaStream_t s = SNUG_CU_STREAM(cu);
    if (T <= DS_MAXT && (dk == 32 || dk == 64 || dk == 128)) {
        dim3 gs((unsigned)Nv, (unsigned)((dv + 31) / 32));
        int t = (int)T;
#define DS_GO(DK)                                                                                  \
    do {                                                                                           \
        if (pp.a)                                                                                  \
            k_delta_small<DK, true><<<gs, DK / DS_RPT * 32, 0, s>>>(t, Nk, Nv, dv, q, k, v, g,     \
                                                                    beta, state, out, qs, vs, pp); \
        else                                                                                       \
            k_delta_small<DK, false><<<gs, DK / DS_RPT * 32, 0, s>>>(                              \
                t, Nk, Nv, dv, q, k, v, g, beta, state, out, qs, vs, pp);                          \
    } while (0)
        if (dk == 32)
            DS_GO(32);
        else if (dk == 64)
            DS_GO(64);
        else
            DS_GO(128);
#undef DS_GO
        return snug_cu_launched(err, "gated_delta_small");
    }
    dim3 grid((unsigned)Nv, (unsigned)((dv + DN_BCOLS - 1) / DN_BCOLS));
#define DN_GO(RPL)                                                                                 \
    do {                                                                                           \
        if (pp.a)                                                                                  \
            k_delta<RPL, true><<<grid, DN_WARPS * 32, 0, s>>>(T, Nk, Nv, dv, q, k, v, g, beta,     \
                                                              state, out, qs, vs, pp);             \
        else                                                                                       \
            k_delta<RPL, false><<<grid, DN_WARPS * 32, 0, s>>>(T, Nk, Nv, dv, q, k, v, g, beta,    \
                                                               state, out, qs, vs, pp);            \
    } while (0)
    switch (dk) {
    case 32:
        DN_GO(1);
        break;
    case 64:
        DN_GO(2);
        break;
    case 96:
        DN_GO(3);
        break;
    case 128:
        DN_GO(4);
        break;
    default:
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "cuda delta: key head dim %lld (32, 64, "
                            "96 or 128 supported)",
                            (long long)dk);
    }
#undef DN_GO
    return snug_cu_launched(err, "gated_delta");
}

extern "C" int snug_cuda_gated_delta_step(struct snug_cuda *cu, int64_t T, int64_t Nk, int64_t Nv,
                                          int64_t dk, int64_t dv, const float *q, const float *k,
                                          const float *v, const float *g, const float *beta,
                                          float *state, float *out, struct snug_err *err) {
    delta_prep pp = {};
    return delta_launch(cu, T, Nk, Nv, dk, dv, q, k, v, g, beta, state, out, Nk * dk, Nv * dv, pp,
                        err);
}

extern "C" int snug_cuda_delta_decode(struct snug_cuda *cu, int64_t T, int64_t Nk, int64_t Nv,
                                      int64_t dk, int64_t dv, const float *qkv, const float *b,
                                      const float *alpha, const float *a, const float *dt,
                                      float qscale, float eps, float *state, float *out,
                                      float *snap, int64_t snap_stride, struct snug_err *err) {
    if (!a || !dt)
        return snug_err_set(err, SNUG_ERR_INVALID, "cuda delta_decode: the gate vectors a, dt");
    int64_t cd = 2 * Nk * dk + Nv * dv;
    delta_prep pp = {a, dt, qscale, eps, snap, snap_stride};
    return delta_launch(cu, T, Nk, Nv, dk, dv, qkv, qkv + Nk * dk, qkv + 2 * Nk * dk, alpha, b,
                        state, out, cd, cd, pp, err);
}

/* The prompt entry point. This first slice runs the same column-parallel recurrence as the
 * step form (state in registers for the whole chunk sequence, tokens staged through shared
 * memory); the WY tensor-core form of docs/qwen35.md §2.6 (chunks of 64) is the planned replacement
 * and must match this to float rounding. */
extern "C" int snug_cuda_gated_delta_chunked(struct snug_cuda *cu, int64_t T, int64_t Nk,
                                             int64_t Nv, int64_t dk, int64_t dv, const float *q,
                                             const float *k, const float *v, const float *g,
                                             const float *beta, float *state, float *out,
                                             struct snug_err *err) {
    return snug_cuda_gated_delta_step(cu, T, Nk, Nv, dk, dv, q, k, v, g, beta, state, out, err);
}
