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

/* RPL = dk / 32 rows per lane. Per token, per column c:
 *   sk = Σ_i S[i][c] k_i, sq = Σ_i S[i][c] q_i (warp sums), δ = β (v_c − e^g sk),
 *   o_c = e^g sq + (k·q) δ, S[i][c] ← e^g S[i][c] + k_i δ   (as the CPU step form). */
template <int RPL>
__global__ void __launch_bounds__(DN_WARPS * 32)
    k_delta(int64_t T, int64_t Nk, int64_t Nv, int64_t dv, const float *__restrict__ q,
            const float *__restrict__ k, const float *__restrict__ v, const float *__restrict__ g,
            const float *__restrict__ beta, float *state, float *out) {
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
            sk[tt][e] = k[((t0 + tt) * Nk + kh) * dk + e];
            sq[tt][e] = q[((t0 + tt) * Nk + kh) * dk + e];
        }
        for (int i = threadIdx.x; i < n * DN_BCOLS; i += blockDim.x) {
            int tt = i / DN_BCOLS, e = i - tt * DN_BCOLS;
            sv[tt][e] = c0 + e < dv ? v[((t0 + tt) * Nv + j) * dv + c0 + e] : 0.0f;
        }
        if (threadIdx.x < n) {
            sg[threadIdx.x] = __expf(g[(t0 + threadIdx.x) * Nv + j]);
            sb[threadIdx.x] = beta[(t0 + threadIdx.x) * Nv + j];
        }
        __syncthreads();
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
        }
    }
#pragma unroll
    for (int c = 0; c < DN_WCOLS; c++)
#pragma unroll
        for (int r = 0; r < RPL; r++)
            if (cw + c < dv) S[(int64_t)(lane + 32 * r) * dv + cw + c] = st[c][r];
}

extern "C" int snug_cuda_gated_delta_step(struct snug_cuda *cu, int64_t T, int64_t Nk, int64_t Nv,
                                          int64_t dk, int64_t dv, const float *q, const float *k,
                                          const float *v, const float *g, const float *beta,
                                          float *state, float *out, struct snug_err *err) {
    if (Nk <= 0 || Nv <= 0 || dv <= 0)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "cuda delta: Nk %lld, Nv %lld, dv %lld must "
                            "be positive",
                            (long long)Nk, (long long)Nv, (long long)dv);
    if (T <= 0) return SNUG_OK;
    dim3 grid((unsigned)Nv, (unsigned)((dv + DN_BCOLS - 1) / DN_BCOLS));
    cudaStream_t s = SNUG_CU_STREAM(cu);
    switch (dk) {
    case 32:
        k_delta<1><<<grid, DN_WARPS * 32, 0, s>>>(T, Nk, Nv, dv, q, k, v, g, beta, state, out);
        break;
    case 64:
        k_delta<2><<<grid, DN_WARPS * 32, 0, s>>>(T, Nk, Nv, dv, q, k, v, g, beta, state, out);
        break;
    case 96:
        k_delta<3><<<grid, DN_WARPS * 32, 0, s>>>(T, Nk, Nv, dv, q, k, v, g, beta, state, out);
        break;
    case 128:
        k_delta<4><<<grid, DN_WARPS * 32, 0, s>>>(T, Nk, Nv, dv, q, k, v, g, beta, state, out);
        break;
    default:
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "cuda delta: key head dim %lld (32, 64, "
                            "96 or 128 supported)",
                            (long long)dk);
    }
    return snug_cu_launched(err, "gated_delta");
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
