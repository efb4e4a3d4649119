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
__device__ __forceinline__ void
delta_small(int T, int64_t Nk, int64_t Nv, int64_t dv, const float *__restrict__ q,
            const float *__restrict__ k, const float *__restrict__ v, const float *__restrict__ g,
            const float *__restrict__ beta, float *state, float *out, int64_t qs, int64_t vs,
            const delta_prep &pp) {
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
template <int DK, bool PREP>
__global__ void __launch_bounds__(DK / DS_RPT * 32)
    k_delta_small(int T, int64_t Nk, int64_t Nv, int64_t dv, const float *__restrict__ q,
                  const float *__restrict__ k, const float *__restrict__ v,
                  const float *__restrict__ g, const float *__restrict__ beta, float *state,
                  float *out, int64_t qs, int64_t vs, delta_prep pp) {
    delta_small<DK, PREP>(T, Nk, Nv, dv, q, k, v, g, beta, state, out, qs, vs, pp);
}

/* The runs of a batched step (snug_cuda_delta_decode_runs), passed by value: blockIdx.z is the
 * run; its rows start at row0 of the step's q/k/v/g/β/out and it has its own state and
 * rollback points. Each run's blocks do what k_delta_small does for that run alone. */
struct delta_runs {
    int T[SNUG_CUDA_RUNS_MAX];
    int64_t row0[SNUG_CUDA_RUNS_MAX], snap_stride[SNUG_CUDA_RUNS_MAX];
    float *state[SNUG_CUDA_RUNS_MAX], *snap[SNUG_CUDA_RUNS_MAX];
};
template <int DK>
__global__ void __launch_bounds__(DK / DS_RPT * 32)
    k_delta_small_runs(int64_t Nk, int64_t Nv, int64_t dv, const float *__restrict__ q,
                       const float *__restrict__ k, const float *__restrict__ v,
                       const float *__restrict__ g, const float *__restrict__ beta, float *out,
                       int64_t qs, int64_t vs, delta_prep pp, const delta_runs rs) {
    int z = blockIdx.z;
    int64_t r0 = rs.row0[z];
    pp.snap = rs.snap[z], pp.snap_stride = rs.snap_stride[z];
    delta_small<DK, true>(rs.T[z], Nk, Nv, dv, q + r0 * qs, k + r0 * qs, v + r0 * vs, g + r0 * Nv,
                          beta + r0 * Nv, rs.state[z], out + r0 * Nv * dv, qs, vs, pp);
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

extern "C" int snug_cuda_delta_decode_runs(struct snug_cuda *cu, int32_t n,
                                           const struct snug_cuda_run *runs, int64_t Nk, int64_t Nv,
                                           int64_t dk, int64_t dv, const float *qkv, const float *b,
                                           const float *alpha, const float *a, const float *dt,
                                           float qscale, float eps, float *out,
                                           struct snug_err *err) {
    if (!a || !dt)
        return snug_err_set(err, SNUG_ERR_INVALID, "cuda delta_decode: the gate vectors a, dt");
    if (Nk <= 0 || Nv <= 0 || dv <= 0 || n < 0)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "cuda delta_decode_runs: Nk %lld, Nv %lld, dv %lld, %d runs",
                            (long long)Nk, (long long)Nv, (long long)dv, (int)n);
    int64_t cd = 2 * Nk * dk + Nv * dv;
    bool small = dk == 32 || dk == 64 || dk == 128;
    for (int32_t i = 0; i < n; i++) small = small && runs[i].T >= 1 && runs[i].T <= DS_MAXT;
    if (!small) { /* one launch per run (the kernel for longer runs, or another dk) */
        for (int32_t i = 0; i < n; i++) {
            const struct snug_cuda_run *r = &runs[i];
            int st = snug_cuda_delta_decode(cu, r->T, Nk, Nv, dk, dv, qkv + r->row0 * cd,
                                            b + r->row0 * Nv, alpha + r->row0 * Nv, a, dt, qscale,
                                            eps, r->state, out + r->row0 * Nv * dv, r->snap,
                                            r->snap_stride, err);
            if (st) return st;
        }
        return SNUG_OK;
    }
    cudaStream_t s = SNUG_CU_STREAM(cu);
    delta_prep pp = {a, dt, qscale, eps, NULL, 0};
    for (int32_t i0 = 0; i0 < n; i0 += SNUG_CUDA_RUNS_MAX) {
        int m = n - i0 < SNUG_CUDA_RUNS_MAX ? n - i0 : SNUG_CUDA_RUNS_MAX;
        delta_runs rs = {};
        for (int i = 0; i < m; i++) {
            const struct snug_cuda_run *r = &runs[i0 + i];
            rs.T[i] = (int)r->T, rs.row0[i] = r->row0, rs.state[i] = r->state;
            rs.snap[i] = r->snap, rs.snap_stride[i] = r->snap_stride;
        }
        dim3 gs((unsigned)Nv, (unsigned)((dv + 31) / 32), (unsigned)m);
        const float *q = qkv, *k = qkv + Nk * dk, *v = qkv + 2 * Nk * dk;
        if (dk == 32)
            k_delta_small_runs<32><<<gs, 32 / DS_RPT * 32, 0, s>>>(Nk, Nv, dv, q, k, v, alpha, b,
                                                                   out, cd, cd, pp, rs);
        else if (dk == 64)
            k_delta_small_runs<64><<<gs, 64 / DS_RPT * 32, 0, s>>>(Nk, Nv, dv, q, k, v, alpha, b,
                                                                   out, cd, cd, pp, rs);
        else
            k_delta_small_runs<128><<<gs, 128 / DS_RPT * 32, 0, s>>>(Nk, Nv, dv, q, k, v, alpha, b,
                                                                     out, cd, cd, pp, rs);
        int st = snug_cu_launched(err, "delta_decode_runs");
        if (st) return st;
    }
    return SNUG_OK;
}

/* ---- The chunked (WY) form for prompts, docs/qwen35.md §2.6 -------------------------------
 * Chunks of DC = 64 tokens. Two launches per piece of the prompt:
 *  k_dn_prep, one block per (chunk, value head), every chunk at once: the in-chunk cumulative
 *    log-decay γ, A[r][s] = β_r e^{γ_r−γ_s} (k_r·k_s) (s < r), the forward substitution
 *    X_r = rhs_r − Σ_{s<r} A[r][s] X_s for U (rhs β_r v_r) and W (rhs β_r e^{γ_r} k_r), one
 *    column per thread with the column in registers, and P[r][s] = e^{γ_r−γ_s} (q_r·k_s)
 *    (s ≤ r); it writes W, U, P and the decays e^{γ_r}, e^{γ_last−γ_r}, e^{γ_last} to `work`.
 *  k_dn_scan, one block per (value head, DN_BV state columns), the chunks in order with the
 *    state slice in shared memory: V' = U − W·S, O_r = e^{γ_r} (Sᵀq_r) + Σ_{s≤r} P[r][s] V'_s,
 *    S ← e^{γ_last} S + Σ_r e^{γ_last−γ_r} k_r V'_rᵀ. Columns are independent, so the slices
 *    need nothing from each other.
 * A last partial chunk is padded with zero keys, β and g: its padded rows of W, U and V' are
 * zero and γ stays at the last real token's, so every loop runs over all DC rows.
 * f32 throughout (the CPU's chunked form in another summation order: they agree to rounding).
 * The sequential part is DC-token steps of small products instead of single tokens (the
 * recurrence kernel above: one dependent step per token). */
#define DC        64  /* chunk length */
#define DN_BV     16  /* state columns per k_dn_scan block */
#define DN_PREP_T 256 /* k_dn_prep threads: one per column of [U | W] (dv + dk <= 256) */
static_assert(DN_BV * 8 == 2 * DC, "k_dn_scan's prefetch: a thread per query row and key row");

/* Floats of one (chunk, head) record in `work`: W [DC][dk], U [DC][dv], P [DC][DC], then three
 * rows of DC: e^{γ_r}, e^{γ_last−γ_r}, e^{γ_last} (first entry). */
static __host__ __device__ int64_t dn_rec_floats(int64_t dk, int64_t dv) {
    return DC * (dk + dv + DC + 3);
}

__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
    return fmaf(a.x, b.x, fmaf(a.y, b.y, fmaf(a.z, b.z, fmaf(a.w, b.w, acc))));
}

/* q, k, v, g, beta start at the piece's first token; T is the piece's length. */
template <int DK>
__global__ void __launch_bounds__(DN_PREP_T)
    k_dn_prep(int64_t T, int64_t Nk, int64_t Nv, int64_t dv, const float *__restrict__ q,
              const float *__restrict__ k, const float *__restrict__ v, const float *__restrict__ g,
              const float *__restrict__ beta, float *__restrict__ work) {
    extern __shared__ float4 dn_sm4[];
    constexpr int KP = DK + 4; /* padded key row: float4 reads down the rows are conflict-free */
    float *Ks = (float *)dn_sm4, *A = Ks + DC * KP, *gam = A + DC * DC, *bet = gam + DC;
    float *eg = bet + DC; /* e^{γ_r} */
    int64_t j = blockIdx.y, kh = j % Nk, t0 = (int64_t)blockIdx.x * DC;
    int n = T - t0 < DC ? (int)(T - t0) : DC;
    int64_t ldq = Nk * DK, ldv = Nv * dv;
    float *Wo = work + ((int64_t)blockIdx.x * Nv + j) * dn_rec_floats(DK, dv);
    float *Uo = Wo + DC * DK, *Po = Uo + DC * dv, *Eo = Po + DC * DC;
    const float *kc = k + t0 * ldq + kh * DK, *qc = q + t0 * ldq + kh * DK;
    for (int e = threadIdx.x; e < DC * (DK / 4); e += blockDim.x) {
        int r = e / (DK / 4), i = 4 * (e % (DK / 4));
        float4 x = r < n ? __ldg((const float4 *)(kc + r * ldq + i)) : make_float4(0, 0, 0, 0);
        *(float4 *)(Ks + r * KP + i) = x;
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (w == 0) { /* γ: inclusive scan of g over the chunk (padding g = 0) */
        float g0 = lane < n ? g[(t0 + lane) * Nv + j] : 0.0f;
        float g1 = lane + 32 < n ? g[(t0 + lane + 32) * Nv + j] : 0.0f;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            float a = __shfl_up_sync(0xffffffffu, g0, o), b = __shfl_up_sync(0xffffffffu, g1, o);
            if (lane >= o) g0 += a, g1 += b;
        }
        g1 += __shfl_sync(0xffffffffu, g0, 31);
        float last = __shfl_sync(0xffffffffu, g1, 31);
        gam[lane] = g0, gam[lane + 32] = g1;
        bet[lane] = lane < n ? beta[(t0 + lane) * Nv + j] : 0.0f;
        bet[lane + 32] = lane + 32 < n ? beta[(t0 + lane + 32) * Nv + j] : 0.0f;
        eg[lane] = expf(g0), eg[lane + 32] = expf(g1);
        Eo[lane] = eg[lane], Eo[lane + 32] = eg[lane + 32];
        Eo[DC + lane] = expf(last - g0), Eo[DC + lane + 32] = expf(last - g1);
        if (lane == 0) Eo[2 * DC] = expf(last);
    }
    __syncthreads();
    /* A and P: warp w rows r = w, w + 8, ...; lane columns s = lane, lane + 32 */
    for (int r = w; r < DC; r += DN_PREP_T / 32) {
        float a0 = 0.0f, a1 = 0.0f, p0 = 0.0f, p1 = 0.0f;
        if (r < n) { /* (warp-uniform) */
            const float *kr = Ks + r * KP, *k0 = Ks + lane * KP, *k1 = Ks + (lane + 32) * KP;
            const float *qr = qc + r * ldq;
#pragma unroll 8
            for (int i = 0; i < DK; i += 4) {
                float4 x = *(const float4 *)(kr + i), y = __ldg((const float4 *)(qr + i));
                float4 u = *(const float4 *)(k0 + i), z = *(const float4 *)(k1 + i);
                a0 = dot4(x, u, a0), a1 = dot4(x, z, a1);
                p0 = dot4(y, u, p0), p1 = dot4(y, z, p1);
            }
        }
        float gr = gam[r], br = bet[r];
        float e0 = lane <= r ? expf(gr - gam[lane]) : 0.0f;
        float e1 = lane + 32 <= r ? expf(gr - gam[lane + 32]) : 0.0f;
        A[r * DC + lane] = lane < r ? br * e0 * a0 : 0.0f;
        A[r * DC + lane + 32] = lane + 32 < r ? br * e1 * a1 : 0.0f;
        Po[r * DC + lane] = e0 * p0;
        Po[r * DC + lane + 32] = e1 * p1;
    }
    __syncthreads();
    /* U (columns 0 .. dv-1) and W (dv .. dv+DK-1) by forward substitution, a column per thread */
    int col = threadIdx.x;
    if (col >= dv + DK) return;
    bool is_u = col < dv;
    const float *vc = v + t0 * ldv + j * dv + col;
    float *dst = is_u ? Uo + col : Wo + (col - dv);
    int64_t ld = is_u ? dv : DK;
    /* A's row read 4 entries per (broadcast) load: its entries from r on are 0 and so are the
     * X not yet solved, so the padded steps add exact zeros (the same bits as s < r alone) */
    float X[DC];
#pragma unroll
    for (int r = 0; r < DC; r++) X[r] = 0.0f;
#pragma unroll
    for (int r = 0; r < DC; r++) {
        float x =
            is_u ? (r < n ? bet[r] * vc[r * ldv] : 0.0f) : bet[r] * eg[r] * Ks[r * KP + (col - dv)];
#pragma unroll
        for (int s = 0; s < r; s += 4) {
            float4 a = *(const float4 *)(A + r * DC + s);
            x = fmaf(-a.x, X[s], x);
            x = fmaf(-a.y, X[s + 1], x);
            x = fmaf(-a.z, X[s + 2], x);
            x = fmaf(-a.w, X[s + 3], x);
        }
        X[r] = x;
        dst[r * ld] = x;
    }
}

/* Asks the L2 for `bytes` (a multiple of 16, 16-byte aligned) at p ahead of their use (sm_90:
 * one bulk prefetch; before it, nothing). */
__device__ __forceinline__ void dn_prefetch_l2(const void *p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
    (void)p, (void)bytes;
#endif
}

/* Chunk c of a scan over the piece (both scans): its first token, its length, its record (W, U,
 * P, the decays E) and the head's query and key rows. Before the chunk is used, the next one's
 * record, queries and keys are asked into the L2, by a block of 2·DC threads (the first DC a
 * query row each, the rest a key row; thread 0 also the record). */
struct dn_chunk {
    int64_t t0;
    int n;
    const float *W, *U, *P, *E, *q, *k;
};
template <int DK>
__device__ __forceinline__ dn_chunk dn_chunk_at(int64_t c, int64_t nch, int64_t T, int64_t Nk,
                                                int64_t Nv, int64_t dv, int64_t j, const float *q,
                                                const float *k, const float *work) {
    dn_chunk ch;
    int64_t ldq = Nk * DK;
    ch.t0 = c * DC;
    ch.n = T - ch.t0 < DC ? (int)(T - ch.t0) : DC;
    ch.W = work + (c * Nv + j) * dn_rec_floats(DK, dv);
    ch.U = ch.W + DC * DK, ch.P = ch.U + DC * dv, ch.E = ch.P + DC * DC;
    ch.q = q + ch.t0 * ldq + (j % Nk) * DK, ch.k = k + ch.t0 * ldq + (j % Nk) * DK;
    if (c + 1 < nch) {
        int64_t left = T - ch.t0 - DC;
        int nn = left < DC ? (int)left : DC, r = threadIdx.x % DC;
        if (threadIdx.x == 0)
            dn_prefetch_l2(ch.W + Nv * dn_rec_floats(DK, dv),
                           (unsigned)(dn_rec_floats(DK, dv) * sizeof(float)));
        if (r < nn)
            dn_prefetch_l2((threadIdx.x < DC ? ch.q : ch.k) + (DC + r) * ldq, DK * sizeof(float));
    }
    return ch;
}

template <int DK>
__global__ void
__launch_bounds__(DN_BV * 8, 4) /* at most 128 registers: 384 blocks of the 27B resident at once */
    k_dn_scan(int64_t T, int64_t Nk, int64_t Nv, int64_t dv, const float *__restrict__ q,
              const float *__restrict__ k, const float *__restrict__ work, float *state,
              float *__restrict__ out) {
    constexpr int RPT = DK / 8; /* state rows per thread in the update */
    __shared__ float Ss[DK][DN_BV], Vp[DC][DN_BV], ex[3][DC];
    int col = threadIdx.x % DN_BV, rg = threadIdx.x / DN_BV; /* rg: 0 .. 7 */
    int64_t j = blockIdx.x, ldq = Nk * DK, ldv = Nv * dv;
    int64_t cc = (int64_t)blockIdx.y * DN_BV + col;
    bool cin = cc < dv;
    float *S = state + j * DK * dv;
#pragma unroll
    for (int ii = 0; ii < RPT; ii++) {
        int i = rg * RPT + ii;
        Ss[i][col] = cin ? S[i * dv + cc] : 0.0f;
    }
    __syncthreads();
    int64_t nch = (T + DC - 1) / DC;
    for (int64_t c = 0; c < nch; c++) {
        const struct dn_chunk ch = dn_chunk_at<DK>(c, nch, T, Nk, Nv, dv, j, q, k, work);
        const int64_t t0 = ch.t0;
        const int n = ch.n;
        const float *Wc = ch.W, *Uc = ch.U, *Pc = ch.P, *Ec = ch.E, *qc = ch.q, *kc = ch.k;
        /* W·S and Sᵀq for rows r = rg + 8m */
        float ws[DC / 8], qs[DC / 8];
#pragma unroll
        for (int m = 0; m < DC / 8; m++) ws[m] = qs[m] = 0.0f;
#pragma unroll 1
        for (int i = 0; i < DK; i += 4) {
            float4 sv = make_float4(Ss[i][col], Ss[i + 1][col], Ss[i + 2][col], Ss[i + 3][col]);
#pragma unroll
            for (int m = 0; m < DC / 8; m++) {
                int r = rg + 8 * m;
                ws[m] = dot4(__ldg((const float4 *)(Wc + r * DK + i)), sv, ws[m]);
                if (r < n) qs[m] = dot4(__ldg((const float4 *)(qc + r * ldq + i)), sv, qs[m]);
            }
        }
#pragma unroll
        for (int m = 0; m < DC / 8; m++) {
            int r = rg + 8 * m;
            Vp[r][col] = (cin ? __ldg(Uc + r * dv + cc) : 0.0f) - ws[m];
        }
        for (int e = threadIdx.x; e < 2 * DC + 1; e += blockDim.x) ex[e / DC][e % DC] = Ec[e];
        __syncthreads();
        /* O_r = e^{γ_r} (Sᵀq_r) + Σ_{s<=r} P[r][s] V'_s */
#pragma unroll
        for (int m = 0; m < DC / 8; m++) {
            int r = rg + 8 * m;
            if (r >= n) break;
            float o = ex[0][r] * qs[m];
            const float *pr = Pc + r * DC;
#pragma unroll
            for (int s = 0; s < DC; s += 4) { /* P[r][s] = 0 past r: all loads issued at once */
                float4 p = __ldg((const float4 *)(pr + s));
                o = fmaf(p.x, Vp[s][col], o);
                o = fmaf(p.y, Vp[s + 1][col], o);
                o = fmaf(p.z, Vp[s + 2][col], o);
                o = fmaf(p.w, Vp[s + 3][col], o);
            }
            if (cin) out[(t0 + r) * ldv + j * dv + cc] = o;
        }
        /* S ← e^{γ_last} S + Σ_r e^{γ_last−γ_r} k_r V'_rᵀ: rows rg·RPT .. of this column */
        float acc[RPT], dl = ex[2][0];
#pragma unroll
        for (int ii = 0; ii < RPT; ii++) acc[ii] = dl * Ss[rg * RPT + ii][col];
#pragma unroll 8
        for (int r = 0; r < n; r++) {
            float vp = ex[1][r] * Vp[r][col];
            const float *kr = kc + r * ldq + rg * RPT;
#pragma unroll
            for (int ii = 0; ii < RPT; ii += 4) {
                float4 kv = __ldg((const float4 *)(kr + ii));
                acc[ii] = fmaf(kv.x, vp, acc[ii]);
                acc[ii + 1] = fmaf(kv.y, vp, acc[ii + 1]);
                acc[ii + 2] = fmaf(kv.z, vp, acc[ii + 2]);
                acc[ii + 3] = fmaf(kv.w, vp, acc[ii + 3]);
            }
        }
#pragma unroll
        for (int ii = 0; ii < RPT; ii++) Ss[rg * RPT + ii][col] = acc[ii];
        __syncthreads();
    }
    if (cin)
#pragma unroll
        for (int ii = 0; ii < RPT; ii++) {
            int i = rg * RPT + ii;
            S[i * dv + cc] = Ss[i][col];
        }
}

/* ---- k_dn_scan on tensor cores (3xTF32) -----------------------------------------------------
 * The same block shape and the same three products per chunk as k_dn_scan, as mma.m16n8k8
 * (tf32 in, f32 accumulate), each product as three of them (a_hi·b_hi + a_hi·b_lo + a_lo·b_hi
 * with x = hi + lo split to tf32: about f32's accuracy, so the results agree with the f32 scan to
 * rounding). Warp w owns the chunk rows 16w .. 16w + 15 (A fragment rows g and g + 8, g = lane/4,
 * t = lane%4); the 16 state columns are two n-tiles of 8.
 * The k index inside each pair of k-steps is permuted so that a lane's A values are one float4
 * of a row: k-step 2kk + h, fragment column t is element 16kk + 4t + 2h and column t + 4 is
 * 16kk + 4t + 2h + 1 (the B rows use the same map; a dot product does not care about order).
 *   1. V' = U − W·S and Sᵀq: A = W and q rows (float4 loads), B = the state slice (shared);
 *      V' into shared memory.
 *   2. O = e^{γ} ⊙ (Sᵀq) + P·V': A = P rows, B = V' (k-steps up to the warp's last row only: P
 *      is lower triangular).
 *   3. S ← e^{γ_last} S + Kᵀ·(e^{γ_last−γ} ⊙ V'): M = the dk state rows in tiles of 16, tile row
 *      g ↔ state row 16m + 2g and g + 8 ↔ 16m + 2g + 1, so a lane's two A values per token are
 *      one float2 of a key row. */
#define DN_LD 18 /* floats per row of the shared slices: B fragment reads conflict-free */

__device__ __forceinline__ uint32_t dn_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
/* x as hi + lo, both tf32 */
__device__ __forceinline__ void dn_split(float x, uint32_t &hi, uint32_t &lo) {
    hi = dn_tf32(x);
    lo = dn_tf32(x - __uint_as_float(hi));
}
__device__ __forceinline__ void dn_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* c += a·b in 3xTF32: a = (a0 row g col t, a1 row g+8 col t, a2 row g col t+4, a3 row g+8
 * col t+4), b = (row t, row t + 4) of column g. */
__device__ __forceinline__ void dn_mma3(float *c, const float *a, float b0, float b1) {
    uint32_t ah[4], al[4], bh0, bl0, bh1, bl1;
#pragma unroll
    for (int i = 0; i < 4; i++) dn_split(a[i], ah[i], al[i]);
    dn_split(b0, bh0, bl0);
    dn_split(b1, bh1, bl1);
    dn_mma(c, al, bh0, bh1);
    dn_mma(c, ah, bl0, bl1);
    dn_mma(c, ah, bh0, bh1);
}

template <int DK>
__global__ void __launch_bounds__(128, 4)
    k_dn_scan_tc(int64_t T, int64_t Nk, int64_t Nv, int64_t dv, const float *__restrict__ q,
                 const float *__restrict__ k, const float *__restrict__ work, float *state,
                 float *__restrict__ out) {
    static_assert(DK % 16 == 0, "k-steps in pairs of 8");
    __shared__ float Ss[DK][DN_LD], Vp[DC][DN_LD], ex[3][DC];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int64_t j = blockIdx.x, ldq = Nk * DK, ldv = Nv * dv;
    int64_t c0 = (int64_t)blockIdx.y * DN_BV; /* first state column of the block */
    float *S = state + j * DK * dv;
    for (int e = threadIdx.x; e < DK * DN_BV; e += blockDim.x) {
        int i = e / DN_BV, cl = e % DN_BV;
        Ss[i][cl] = c0 + cl < dv ? S[i * dv + c0 + cl] : 0.0f;
    }
    const int R0 = 16 * w + g, R1 = R0 + 8; /* this lane's chunk rows in products 1 and 2 */
    int64_t nch = (T + DC - 1) / DC;
    for (int64_t c = 0; c < nch; c++) {
        const struct dn_chunk ch = dn_chunk_at<DK>(c, nch, T, Nk, Nv, dv, j, q, k, work);
        const int64_t t0 = ch.t0;
        const int n = ch.n;
        const float *Wc = ch.W, *Uc = ch.U, *Pc = ch.P, *Ec = ch.E, *qc = ch.q, *kc = ch.k;
        for (int e = threadIdx.x; e < 2 * DC + 1; e += blockDim.x) ex[e / DC][e % DC] = Ec[e];
        __syncthreads(); /* the state slice (first chunk, or the last update) and the decays */
        /* 1. W·S and q·S for rows R0, R1 */
        float cw[2][4] = {}, cq[2][4] = {};
#pragma unroll 2
        for (int kk = 0; kk < DK / 16; kk++) {
            const int e0 = 16 * kk + 4 * t;
            float4 w0 = __ldg((const float4 *)(Wc + R0 * DK + e0));
            float4 w1 = __ldg((const float4 *)(Wc + R1 * DK + e0));
            float4 q0 =
                R0 < n ? __ldg((const float4 *)(qc + R0 * ldq + e0)) : make_float4(0, 0, 0, 0);
            float4 q1 =
                R1 < n ? __ldg((const float4 *)(qc + R1 * ldq + e0)) : make_float4(0, 0, 0, 0);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float aw[4] = {h ? w0.z : w0.x, h ? w1.z : w1.x, h ? w0.w : w0.y, h ? w1.w : w1.y};
                float aq[4] = {h ? q0.z : q0.x, h ? q1.z : q1.x, h ? q0.w : q0.y, h ? q1.w : q1.y};
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    float b0 = Ss[e0 + 2 * h][8 * nt + g], b1 = Ss[e0 + 2 * h + 1][8 * nt + g];
                    dn_mma3(cw[nt], aw, b0, b1);
                    dn_mma3(cq[nt], aq, b0, b1);
                }
            }
        }
        /* V' = U − W·S into shared memory (C: rows R0 / R1, columns 8nt + 2t, + 1) */
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int r = i < 2 ? R0 : R1, cl = 8 * nt + 2 * t + (i & 1);
                float u = c0 + cl < dv ? __ldg(Uc + r * dv + c0 + cl) : 0.0f;
                Vp[r][cl] = u - cw[nt][i];
            }
        __syncthreads(); /* V' complete; every warp is done reading the old state */
        /* 2. O = e^{γ} ⊙ (q·S) + P·V' for rows R0, R1 (tokens up to 16w + 15) */
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) cq[nt][i] *= ex[0][i < 2 ? R0 : R1];
        for (int kk = 0; kk <= w; kk++) {
            const int e0 = 16 * kk + 4 * t;
            float4 p0 = __ldg((const float4 *)(Pc + R0 * DC + e0));
            float4 p1 = __ldg((const float4 *)(Pc + R1 * DC + e0));
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float ap[4] = {h ? p0.z : p0.x, h ? p1.z : p1.x, h ? p0.w : p0.y, h ? p1.w : p1.y};
#pragma unroll
                for (int nt = 0; nt < 2; nt++)
                    dn_mma3(cq[nt], ap, Vp[e0 + 2 * h][8 * nt + g], Vp[e0 + 2 * h + 1][8 * nt + g]);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int i = 0; i < 4; i += 2) {
                int r = i < 2 ? R0 : R1, cl = 8 * nt + 2 * t;
                if (r >= n) continue;
                float *o = out + (t0 + r) * ldv + j * dv + c0 + cl;
                if (c0 + cl < dv) o[0] = cq[nt][i];
                if (c0 + cl + 1 < dv) o[1] = cq[nt][i + 1];
            }
        /* 3. S ← e^{γ_last} S + Kᵀ·(e^{γ_last−γ} ⊙ V'): state rows 16m + 2g (C rows g) and
         * 16m + 2g + 1 (C rows g + 8) of tiles m = w, w + 4, ... */
        const float dl = ex[2][0];
        for (int m = w; m < DK / 16; m += 4) {
            const int s0 = 16 * m + 2 * g;
            float cs[2][4];
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                int cl = 8 * nt + 2 * t;
                cs[nt][0] = dl * Ss[s0][cl], cs[nt][1] = dl * Ss[s0][cl + 1];
                cs[nt][2] = dl * Ss[s0 + 1][cl], cs[nt][3] = dl * Ss[s0 + 1][cl + 1];
            }
#pragma unroll 2
            for (int kk = 0; kk < DC / 16; kk++) {
                const int e0 = 16 * kk + 4 * t;
                float2 kv[4];
#pragma unroll
                for (int i = 0; i < 4; i++)
                    kv[i] = e0 + i < n ? __ldg((const float2 *)(kc + (e0 + i) * ldq + s0))
                                       : make_float2(0.0f, 0.0f);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    /* tokens e0 + 2h (fragment column t) and e0 + 2h + 1 (column t + 4) */
                    float ak[4] = {kv[2 * h].x, kv[2 * h].y, kv[2 * h + 1].x, kv[2 * h + 1].y};
                    float x0 = ex[1][e0 + 2 * h], x1 = ex[1][e0 + 2 * h + 1];
#pragma unroll
                    for (int nt = 0; nt < 2; nt++)
                        dn_mma3(cs[nt], ak, x0 * Vp[e0 + 2 * h][8 * nt + g],
                                x1 * Vp[e0 + 2 * h + 1][8 * nt + g]);
                }
            }
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                int cl = 8 * nt + 2 * t;
                Ss[s0][cl] = cs[nt][0], Ss[s0][cl + 1] = cs[nt][1];
                Ss[s0 + 1][cl] = cs[nt][2], Ss[s0 + 1][cl + 1] = cs[nt][3];
            }
        }
        __syncthreads(); /* the new state before the next chunk's products; V' and ex free */
    }
    for (int e = threadIdx.x; e < DK * DN_BV; e += blockDim.x) {
        int i = e / DN_BV, cl = e % DN_BV;
        if (c0 + cl < dv) S[i * dv + c0 + cl] = Ss[i][cl];
    }
}

extern "C" size_t snug_cuda_delta_chunk_work_bytes(int64_t T, int64_t Nv, int64_t dk, int64_t dv) {
    return (size_t)((T + DC - 1) / DC) * (size_t)Nv * (size_t)dn_rec_floats(dk, dv) * sizeof(float);
}

/* Which scan the WY form runs: 0 the f32 one (k_dn_scan), 1 the tensor-core one (k_dn_scan_tc,
 * the default: with the prep, 3.98 against 6.68 ms a layer at the 27B's shape and 8,192 tokens
 * on an H100); snug_cuda_delta_tune sets it (tests and the benchmark run both). */
#define DN_SCAN_TC_DEFAULT 1
static int g_dn_scan_tc = DN_SCAN_TC_DEFAULT;
extern "C" void snug_cuda_delta_tune(int scan) {
    g_dn_scan_tc = scan < 0 ? DN_SCAN_TC_DEFAULT : scan == 1;
}

/* k_dn_prep's dynamic shared memory: the padded keys, A, γ, β and e^{γ}. */
static size_t dn_prep_smem(int64_t dk) {
    return (size_t)(DC * (dk + 4) + DC * DC + 3 * DC) * sizeof(float);
}

/* Whether the chunked form serves this shape with `work_bytes` of work (else the recurrence):
 * T of at least half a chunk, dk 32 / 64 / 128, dv + dk <= 256, room for one chunk's records. */
extern "C" bool snug_cuda_delta_wy(const struct snug_cuda *cu, int64_t T, int64_t Nv, int64_t dk,
                                   int64_t dv, size_t work_bytes) {
    return work_bytes && T >= DC / 2 && (dk == 32 || dk == 64 || dk == 128) && dv >= 1 &&
           dv + dk <= DN_PREP_T && dn_prep_smem(dk) <= cu->smem_optin &&
           snug_cuda_delta_chunk_work_bytes(DC, Nv, dk, dv) <= work_bytes;
}

template <int DK>
static int dn_wy_launch(cudaStream_t s, int64_t T, int64_t Nk, int64_t Nv, int64_t dv,
                        const float *q, const float *k, const float *v, const float *g,
                        const float *beta, float *state, float *out, float *work, size_t work_bytes,
                        struct snug_err *err) {
    /* set on every call: the attribute belongs to the current device (a prompt piece is
     * thousands of tokens; the call costs microseconds of host time) */
    size_t smem = dn_prep_smem(DK);
    cudaError_t e =
        cudaFuncSetAttribute(k_dn_prep<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return snug_err_set(err, SNUG_ERR_INTERNAL, "cuda delta: shared memory attribute: %s",
                            cudaGetErrorString(e));
    /* pieces of whole chunks whose records fit the work memory */
    int64_t per_chunk = (int64_t)snug_cuda_delta_chunk_work_bytes(DC, Nv, DK, dv);
    int64_t piece = (int64_t)(work_bytes / (size_t)per_chunk) * DC;
    int64_t ldq = Nk * DK, ldv = Nv * dv;
    for (int64_t t0 = 0; t0 < T; t0 += piece) {
        int64_t n = T - t0 < piece ? T - t0 : piece;
        dim3 gp((unsigned)((n + DC - 1) / DC), (unsigned)Nv);
        k_dn_prep<DK><<<gp, DN_PREP_T, smem, s>>>(n, Nk, Nv, dv, q + t0 * ldq, k + t0 * ldq,
                                                  v + t0 * ldv, g + t0 * Nv, beta + t0 * Nv, work);
        int st = snug_cu_launched(err, "delta_prep");
        if (st) return st;
        dim3 gs((unsigned)Nv, (unsigned)((dv + DN_BV - 1) / DN_BV));
        if (g_dn_scan_tc)
            k_dn_scan_tc<DK><<<gs, 128, 0, s>>>(n, Nk, Nv, dv, q + t0 * ldq, k + t0 * ldq, work,
                                                state, out + t0 * ldv);
        else
            k_dn_scan<DK><<<gs, DN_BV * 8, 0, s>>>(n, Nk, Nv, dv, q + t0 * ldq, k + t0 * ldq, work,
                                                   state, out + t0 * ldv);
        st = snug_cu_launched(err, "delta_scan");
        if (st) return st;
    }
    return SNUG_OK;
}

/* The prompt entry point: the chunked form where the shape and the work memory allow, else the
 * recurrence (the same numbers to float rounding). */
extern "C" int snug_cuda_gated_delta_chunked(struct snug_cuda *cu, int64_t T, int64_t Nk,
                                             int64_t Nv, int64_t dk, int64_t dv, const float *q,
                                             const float *k, const float *v, const float *g,
                                             const float *beta, float *state, float *out,
                                             void *work, size_t work_bytes, struct snug_err *err) {
    if (!work || !snug_cuda_delta_wy(cu, T, Nv, dk, dv, work_bytes) ||
        (((uintptr_t)q | (uintptr_t)k | (uintptr_t)work) & 15) != 0)
        return snug_cuda_gated_delta_step(cu, T, Nk, Nv, dk, dv, q, k, v, g, beta, state, out, err);
    cudaStream_t s = SNUG_CU_STREAM(cu);
    float *wk = (float *)work;
    switch (dk) {
    case 32:
        return dn_wy_launch<32>(s, T, Nk, Nv, dv, q, k, v, g, beta, state, out, wk, work_bytes,
                                err);
    case 64:
        return dn_wy_launch<64>(s, T, Nk, Nv, dv, q, k, v, g, beta, state, out, wk, work_bytes,
                                err);
    default:
        return dn_wy_launch<128>(s, T, Nk, Nv, dv, q, k, v, g, beta, state, out, wk, work_bytes,
                                 err);
    }
}
