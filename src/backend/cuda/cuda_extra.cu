/* cuda_extra.cu — the small kernels behind cuda_backend.h: residual add, scale, DeltaNet
 * gates (sigmoid β, g = a·softplus(α + dt)), row gather, row argmax, the MoE routing (softmax,
 * top-k and the grouping of (token, expert) pairs by expert, on the device) and the weighted
 * combine. Semantics: the CPU versions in src/backend/backend_cpu.c. Invariant: deterministic (the
 * combine sums the k experts of a token in selection order, the grouping keeps token order within
 * an expert, as the CPU does); nothing allocates. Read next: cuda_backend.c. */
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"

#include <limits.h>
#include <math.h>

#define EW_THREADS 256

static unsigned n_blocks(int64_t n) {
    return (unsigned)((n + EW_THREADS - 1) / EW_THREADS);
}

__global__ void k_add(float *x, const float *y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}
__global__ void k_scale(float *x, int64_t n, float s) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}
/* softplus linear above 20, as PyTorch's default. */
__global__ void k_delta_gates(float *beta, float *g, const float *a, const float *dt, int64_t T,
                              int64_t Nv) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * Nv) return;
    int64_t j = i % Nv;
    beta[i] = 1.0f / (1.0f + expf(-beta[i]));
    float x = g[i] + dt[j];
    g[i] = a[j] * (x > 20.0f ? x : log1pf(expf(x)));
}
__global__ void k_gather_rows(float *dst, const float *src, const int32_t *idx, int64_t n,
                              int64_t H) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * H) return;
    int64_t r = i / H, c = i % H;
    dst[i] = src[(int64_t)idx[r] * H + c];
}
__global__ void k_moe_combine(float *y, const float *d, const int32_t *slot, const float *w,
                              int64_t T, int64_t k, int64_t H) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * H) return;
    int64_t t = i / H, c = i % H;
    float acc = 0.0f;
    for (int64_t j = 0; j < k; j++) acc += w[t * k + j] * d[(int64_t)slot[t * k + j] * H + c];
    y[i] = acc;
}
__global__ void k_add_gated(float *y, const float *d, const float *gl, int64_t T, int64_t H) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * H) return;
    float s = 1.0f / (1.0f + expf(-gl[i / H]));
    y[i] += s * d[i];
}

extern "C" int snug_cuda_add(struct snug_cuda *cu, float *x, const float *y, int64_t n,
                             struct snug_err *err) {
    if (n <= 0) return SNUG_OK;
    k_add<<<n_blocks(n), EW_THREADS, 0, SNUG_CU_STREAM(cu)>>>(x, y, n);
    return snug_cu_launched(err, "add");
}
extern "C" int snug_cuda_scale(struct snug_cuda *cu, float *x, int64_t n, float s,
                               struct snug_err *err) {
    if (n <= 0) return SNUG_OK;
    k_scale<<<n_blocks(n), EW_THREADS, 0, SNUG_CU_STREAM(cu)>>>(x, n, s);
    return snug_cu_launched(err, "scale");
}
extern "C" int snug_cuda_delta_gates(struct snug_cuda *cu, float *beta, float *g, const float *a,
                                     const float *dt, int64_t T, int64_t Nv, struct snug_err *err) {
    if (T * Nv <= 0) return SNUG_OK;
    k_delta_gates<<<n_blocks(T * Nv), EW_THREADS, 0, SNUG_CU_STREAM(cu)>>>(beta, g, a, dt, T, Nv);
    return snug_cu_launched(err, "delta_gates");
}
extern "C" int snug_cuda_gather_rows(struct snug_cuda *cu, float *dst, const float *src,
                                     const int32_t *idx, int64_t n, int64_t H,
                                     struct snug_err *err) {
    if (n * H <= 0) return SNUG_OK;
    k_gather_rows<<<n_blocks(n * H), EW_THREADS, 0, SNUG_CU_STREAM(cu)>>>(dst, src, idx, n, H);
    return snug_cu_launched(err, "gather_rows");
}
/* One block per row: each thread scans its float4 columns (i = 4·(tid + k·blockDim)), keeping
 * the first of its largest; the block's candidates meet by (value, then lower index). NaN
 * compares false, so it is never taken; a NaN at index 0 wins, as in the host scan. */
#define ARGMAX_THREADS 1024
__device__ __forceinline__ void argmax_take(float v, int i, float *bv, int *bi) {
    if (v > *bv || (v == *bv && i < *bi)) *bv = v, *bi = i;
}
__global__ void __launch_bounds__(ARGMAX_THREADS)
    k_argmax(const float *__restrict__ x, int64_t n, int32_t *__restrict__ out) {
    const float *row = x + (int64_t)blockIdx.x * n;
    float bv = -INFINITY;
    int bi = INT_MAX;
    bool vec = ((uintptr_t)row & 15) == 0;
    int64_t n4 = vec ? n / 4 : 0;
    for (int64_t j = threadIdx.x; j < n4; j += blockDim.x) {
        float4 v = __ldg((const float4 *)row + j);
        int i = (int)(4 * j);
        argmax_take(v.x, i, &bv, &bi), argmax_take(v.y, i + 1, &bv, &bi);
        argmax_take(v.z, i + 2, &bv, &bi), argmax_take(v.w, i + 3, &bv, &bi);
    }
    for (int64_t i = 4 * n4 + threadIdx.x; i < n; i += blockDim.x)
        argmax_take(__ldg(row + i), (int)i, &bv, &bi);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        argmax_take(ov, oi, &bv, &bi);
    }
    __shared__ float sv[ARGMAX_THREADS / 32];
    __shared__ int si[ARGMAX_THREADS / 32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) sv[wid] = bv, si[wid] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++) argmax_take(sv[w], si[w], &bv, &bi);
        out[blockIdx.x] = (isnan(row[0]) || bi == INT_MAX) ? 0 : bi;
    }
}
extern "C" int snug_cuda_argmax(struct snug_cuda *cu, const float *x, int64_t rows, int64_t n,
                                int32_t *out, struct snug_err *err) {
    if (rows <= 0 || n <= 0) return SNUG_OK;
    if (n > INT32_MAX || rows > INT32_MAX)
        return snug_err_set(err, SNUG_ERR_INVALID, "cuda argmax: %lld rows of %lld",
                            (long long)rows, (long long)n);
    k_argmax<<<(unsigned)rows, ARGMAX_THREADS, 0, SNUG_CU_STREAM(cu)>>>(x, n, out);
    return snug_cu_launched(err, "argmax");
}
extern "C" int snug_cuda_moe_combine(struct snug_cuda *cu, float *y, const float *d,
                                     const int32_t *slot, const float *w, int64_t T, int64_t k,
                                     int64_t H, struct snug_err *err) {
    if (T * H <= 0) return SNUG_OK;
    k_moe_combine<<<n_blocks(T * H), EW_THREADS, 0, SNUG_CU_STREAM(cu)>>>(y, d, slot, w, T, k, H);
    return snug_cu_launched(err, "moe_combine");
}
extern "C" int snug_cuda_add_gated(struct snug_cuda *cu, float *y, const float *d,
                                   const float *glogit, int64_t T, int64_t H,
                                   struct snug_err *err) {
    if (T * H <= 0) return SNUG_OK;
    k_add_gated<<<n_blocks(T * H), EW_THREADS, 0, SNUG_CU_STREAM(cu)>>>(y, d, glogit, T, H);
    return snug_cu_launched(err, "add_gated");
}

/* ---- MoE routing ---------------------------------------------------------------------------
 * As snug_op_moe_route (src/backend/cpu/ops_basic.c): per token, softmax over E router logits
 * with a double sum, the k largest logits with ties to the lower index, weights renormalised in
 * selection order. One block per token; the logits sit in shared memory. The expert choice
 * depends only on comparisons of the same float logits, so it is the CPU's choice for the same
 * logits; the weights can differ from the CPU's in the last bit (the double sum's order). */
#define ROUTE_THREADS 256
#define ROUTE_MAX_K   32

struct idx_val {
    float v;
    int e;
};
/* The better of two candidates: the larger value, on a tie the lower index; e < 0 = none. */
__device__ __forceinline__ idx_val better(idx_val a, idx_val b) {
    if (a.e < 0) return b;
    if (b.e < 0) return a;
    return (b.v > a.v || (b.v == a.v && b.e < a.e)) ? b : a;
}

/* The best candidate of the warp, in every lane. */
__device__ __forceinline__ idx_val warp_better(idx_val b) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        idx_val c;
        c.v = __shfl_xor_sync(0xffffffffu, b.v, o);
        c.e = __shfl_xor_sync(0xffffffffu, b.e, o);
        b = better(b, c);
    }
    return b;
}

__global__ void __launch_bounds__(ROUTE_THREADS)
    k_moe_route(const float *__restrict__ logits, int E, int k, int32_t *__restrict__ sel,
                float *__restrict__ selw) {
    extern __shared__ float lg[]; /* [E] logits, then [E] taken flags (as floats) */
    float *taken = lg + E;
    __shared__ double dsh[32];
    __shared__ float fsh[32];
    __shared__ idx_val ish[32];
    __shared__ float w[ROUTE_MAX_K];
    int t = blockIdx.x, lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const float *l = logits + (size_t)t * E;
    float mx = -INFINITY;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        lg[e] = l[e];
        taken[e] = 0.0f;
        mx = fmaxf(mx, lg[e]);
    }
    mx = warp_max(mx);
    if (lane == 0) fsh[wid] = mx;
    __syncthreads();
    mx = fsh[0];
    for (int i = 1; i < nw; i++) mx = fmaxf(mx, fsh[i]);
    double sum = 0.0;
    for (int e = threadIdx.x; e < E; e += blockDim.x) sum += exp((double)lg[e] - (double)mx);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) dsh[wid] = sum;
    __syncthreads();
    sum = 0.0;
    for (int i = 0; i < nw; i++) sum += dsh[i];
    for (int j = 0; j < k; j++) {
        idx_val b = {0.0f, -1};
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            if (taken[e] == 0.0f) b = better(b, idx_val{lg[e], e});
        b = warp_better(b);
        if (lane == 0) ish[wid] = b;
        __syncthreads();
        if (threadIdx.x == 0) {
            idx_val r = ish[0];
            for (int i = 1; i < nw; i++) r = better(r, ish[i]);
            taken[r.e] = 1.0f;
            sel[(size_t)t * k + j] = r.e;
            w[j] = (float)(exp((double)lg[r.e] - (double)mx) / sum);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        float ws = 0.0f;
        for (int j = 0; j < k; j++) ws += w[j];
        for (int j = 0; j < k; j++) selw[(size_t)t * k + j] = w[j] / ws;
    }
}

/* The same routing with one warp per token (E <= 1024: each lane holds the logits e = lane +
 * 32·i, i < E/32, and a bit per logit it has given away): the max and the double sum by warp
 * reductions, then k rounds of a warp-wide `better` over each lane's best remaining logit (a
 * lane rescans its own E/32 logits only after its candidate was taken). Lane j keeps the j-th
 * weight; every lane sums the weights in selection order (the old kernel's float order). The
 * choice is the CPU's (comparisons only); the double sum's order differs, so a weight can
 * differ from the CPU's in the last bit, as before. */
#define ROUTE_WARPS 4
/* One token's routing by one warp: logits l[E] staged in lg[E] (shared), sel/selw its k
 * outputs. */
__device__ __forceinline__ void route_token_warp(const float *__restrict__ l, float *lg, int E,
                                                 int k, int32_t *__restrict__ sel,
                                                 float *__restrict__ selw) {
    int lane = threadIdx.x & 31;
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) {
        lg[e] = l[e];
        mx = fmaxf(mx, lg[e]);
    }
    __syncwarp(); /* lane j reads the weight logit another lane stored */
    mx = warp_max(mx);
    double sum = 0.0;
    for (int e = lane; e < E; e += 32) sum += exp((double)lg[e] - (double)mx);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    uint32_t given = 0; /* bit i: logit lane + 32·i taken */
    idx_val mine = {0.0f, -1};
    for (int e = lane; e < E; e += 32) mine = better(mine, idx_val{lg[e], e});
    float wj = 0.0f;
    int ej = 0;
    for (int j = 0; j < k; j++) {
        idx_val b = warp_better(mine);
        if (lane == j) wj = (float)(exp((double)lg[b.e] - (double)mx) / sum), ej = b.e;
        if ((b.e & 31) == lane) { /* this lane's candidate went: its next best */
            given |= 1u << (b.e >> 5);
            mine = idx_val{0.0f, -1};
            for (int e = lane, i = 0; e < E; e += 32, i++)
                if (!(given >> i & 1u)) mine = better(mine, idx_val{lg[e], e});
        }
    }
    float ws = 0.0f;
    for (int j = 0; j < k; j++) ws += __shfl_sync(0xffffffffu, wj, j);
    if (lane < k) sel[lane] = ej, selw[lane] = wj / ws;
}
__global__ void __launch_bounds__(ROUTE_WARPS * 32)
    k_moe_route_warp(const float *__restrict__ logits, int64_t T, int E, int k,
                     int32_t *__restrict__ sel, float *__restrict__ selw) {
    extern __shared__ float lgw[]; /* [ROUTE_WARPS][E] */
    int wid = threadIdx.x >> 5;
    int64_t t = (int64_t)blockIdx.x * ROUTE_WARPS + wid;
    if (t >= T) return; /* whole warps leave together */
    route_token_warp(logits + (size_t)t * E, lgw + (size_t)wid * E, E, k, sel + (size_t)t * k,
                     selw + (size_t)t * k);
}

/* One token routed and grouped in one block (a decode step: T = 1, E <= 1024), thread e owning
 * logit e. The top-k by rank instead of k rounds of an arg-max: rank(e) = the number of logits
 * better than logit e (larger, or equal at a lower index: the order `better` uses), so the
 * expert of rank j is selection j, with no barrier per round. Weights as the other kernels
 * compute them (the double sum over every logit, each weight (float)(exp(l - max) / sum), then
 * divided by their float sum in selection order). An expert holds at most one slot of one token,
 * so the grouping is a prefix count: expert e's slot is the number of chosen experts below e,
 * the tile table one tile per chosen expert — what k_moe_group writes for T = 1. A NaN logit
 * counts as -inf here (ranks stay a permutation). */
__global__ void __launch_bounds__(1024)
    k_moe_route1(const float *__restrict__ logits, int E, int k, int32_t *__restrict__ sel,
                 float *__restrict__ selw, int32_t *__restrict__ cnt, int32_t *__restrict__ order,
                 int32_t *__restrict__ slot, int32_t *__restrict__ off,
                 int32_t *__restrict__ tiles) {
    extern __shared__ float lg1[]; /* [E] */
    __shared__ float fsh[32];
    __shared__ double dsh[32];
    __shared__ int csh[33];
    __shared__ float wsh[ROUTE_MAX_K];
    int e = threadIdx.x, lane = e & 31, wid = e >> 5, nw = blockDim.x >> 5;
    float v = -INFINITY;
    if (e < E) {
        v = logits[e];
        if (v != v) v = -INFINITY;
        lg1[e] = v;
    }
    float mx = warp_max(v);
    if (lane == 0) fsh[wid] = mx;
    __syncthreads();
    mx = fsh[0];
    for (int i = 1; i < nw; i++) mx = fmaxf(mx, fsh[i]);
    double ex = e < E ? exp((double)v - (double)mx) : 0.0;
    double sum = ex;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) dsh[wid] = sum;
    int rank = E;
    if (e < E) {
        rank = 0;
        for (int i = 0; i < E; i++) {
            float u = lg1[i];
            rank += (u > v) | ((u == v) & (i < e));
        }
    }
    bool chosen = rank < k;
    unsigned ball = __ballot_sync(0xffffffffu, chosen);
    if (lane == 0) csh[wid] = __popc(ball);
    __syncthreads();
    sum = 0.0;
    for (int i = 0; i < nw; i++) sum += dsh[i];
    int below = __popc(ball & ((1u << lane) - 1u)); /* chosen experts below e */
    for (int i = 0; i < wid; i++) below += csh[i];
    if (chosen) wsh[rank] = (float)(ex / sum);
    if (e < E) {
        cnt[e] = chosen;
        off[e] = below;
    }
    if (e == 0) off[E] = k, tiles[0] = k;
    __syncthreads();
    if (chosen) {
        float ws = 0.0f;
        for (int j = 0; j < k; j++) ws += wsh[j];
        sel[rank] = e;
        selw[rank] = wsh[rank] / ws;
        slot[rank] = below;
        order[below] = 0;
        int32_t *tp = tiles + 1 + 3 * below;
        tp[0] = e, tp[1] = below, tp[2] = 1;
    }
}

/* The grouping, one block of 1024 threads, in three passes over the n = T·k selections cut into
 * nseg contiguous segments (warp s owns segment s; nseg·E counters fit shared memory):
 * 1. each warp counts its segment's selections per expert, 32 at a time (lanes with the same
 *    expert found by __match_any_sync; the lowest of them adds their number);
 * 2. per expert, the segments' counts become running bases (an exclusive sum over segments),
 *    and block-wide exclusive scans over the experts give each expert's first slot (off) and
 *    first tile; each expert's tiles (at most SNUG_CUDA_MOE_TILE slots) are written by its
 *    thread;
 * 3. each warp walks its segment again and places every selection at its expert's first slot +
 *    its segment's base + its rank so far: token order within each expert, as the CPU. */
#define GROUP_THREADS 1024
#define GROUP_SMEM    8192 /* ints of per-segment counters: nseg · E <= this */
__device__ __forceinline__ void block_scan2(int *a, int *b, int *sh) {
    /* exclusive scans of (a, b) over the block's threads in thread order; totals to sh[64..65] */
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    int ia = *a, ib = *b;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int ua = __shfl_up_sync(0xffffffffu, ia, o), ub = __shfl_up_sync(0xffffffffu, ib, o);
        if (lane >= o) ia += ua, ib += ub;
    }
    if (lane == 31) sh[wid] = ia, sh[32 + wid] = ib;
    __syncthreads();
    if (wid == 0) {
        int va = sh[lane], vb = sh[32 + lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int ua = __shfl_up_sync(0xffffffffu, va, o), ub = __shfl_up_sync(0xffffffffu, vb, o);
            if (lane >= o) va += ua, vb += ub;
        }
        sh[lane] = va - sh[lane], sh[32 + lane] = vb - sh[32 + lane];
        if (lane == 31) sh[64] = va, sh[65] = vb;
    }
    __syncthreads();
    *a = sh[wid] + ia - *a, *b = sh[32 + wid] + ib - *b;
}
__global__ void __launch_bounds__(GROUP_THREADS)
    k_moe_group(const int32_t *__restrict__ sel, int n, int E, int nseg, int32_t *__restrict__ cnt,
                int32_t *__restrict__ order, int32_t *__restrict__ slot, int32_t *__restrict__ off,
                int32_t *__restrict__ tiles, int k) {
    __shared__ int sc[GROUP_SMEM]; /* [nseg][E]: counts, then running bases */
    __shared__ int sh[66];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < nseg * E; i += GROUP_THREADS) sc[i] = 0;
    __syncthreads();
    int len = (n + nseg - 1) / nseg;
    int lo = wid * len, hi = min(n, lo + len);
    if (wid < nseg) /* 1. counts per segment */
        for (int i0 = lo; i0 < hi; i0 += 32) {
            int i = i0 + lane;
            unsigned act = __ballot_sync(0xffffffffu, i < hi);
            if (i < hi) {
                int e = sel[i];
                unsigned m = __match_any_sync(act, e);
                if (lane == __ffs(m) - 1) sc[wid * E + e] += __popc(m);
            }
            __syncwarp();
        }
    __syncthreads();
    /* 2. bases per segment, then the scans over experts: thread j owns experts j·per .. */
    int per = (E + GROUP_THREADS - 1) / GROUP_THREADS, e0 = threadIdx.x * per;
    int c_own = 0, t_own = 0;
    for (int e = e0; e < e0 + per && e < E; e++) {
        int c = 0;
        for (int sgi = 0; sgi < nseg; sgi++) {
            int v = sc[sgi * E + e];
            sc[sgi * E + e] = c;
            c += v;
        }
        cnt[e] = c;
        c_own += c;
        t_own += (c + SNUG_CUDA_MOE_TILE - 1) / SNUG_CUDA_MOE_TILE;
    }
    int c_base = c_own, t_base = t_own;
    block_scan2(&c_base, &t_base, sh);
    for (int e = e0; e < e0 + per && e < E; e++) {
        int c = cnt[e];
        off[e] = c_base;
        for (int s0 = 0; s0 < c; s0 += SNUG_CUDA_MOE_TILE) {
            int32_t *tp = tiles + 1 + 3 * t_base++;
            tp[0] = e;
            tp[1] = c_base + s0;
            tp[2] = min(SNUG_CUDA_MOE_TILE, c - s0);
        }
        for (int sgi = 0; sgi < nseg; sgi++) sc[sgi * E + e] += c_base;
        c_base += c;
    }
    if (threadIdx.x == 0) off[E] = sh[64], tiles[0] = sh[65];
    __syncthreads();
    if (wid < nseg) /* 3. placement */
        for (int i0 = lo; i0 < hi; i0 += 32) {
            int i = i0 + lane;
            unsigned act = __ballot_sync(0xffffffffu, i < hi);
            if (i < hi) {
                int e = sel[i];
                unsigned m = __match_any_sync(act, e);
                int s = sc[wid * E + e] + __popc(m & ((1u << lane) - 1u));
                order[s] = i / k;
                slot[i] = s;
                __syncwarp(act);
                if (lane == __ffs(m) - 1) sc[wid * E + e] += __popc(m);
            }
            __syncwarp();
        }
}

/* 1: the block-per-token routing kernel even where the warp one applies (tests compare both) */
static int g_route_block;
extern "C" void snug_cuda_moe_route_tune(int block) {
    g_route_block = block;
}

extern "C" int snug_cuda_moe_route(struct snug_cuda *cu, const float *logits, int64_t T, int64_t E,
                                   int64_t k, int32_t *sel, int32_t *cnt, float *selw,
                                   int32_t *order, int32_t *slot, int32_t *off, int32_t *tiles,
                                   struct snug_err *err) {
    if (T <= 0) return SNUG_OK;
    if (k > ROUTE_MAX_K || k > E || E > 4096 || T * k > INT32_MAX / 2)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "cuda moe routing: %lld experts, %lld used per token: expected at most "
                            "4096 experts and %d used",
                            (long long)E, (long long)k, ROUTE_MAX_K);
    cudaStream_t s = SNUG_CU_STREAM(cu);
    if (T == 1 && E <= 1024 && g_route_block == 0) { /* a decode step: one launch */
        k_moe_route1<<<1, (unsigned)((E + 31) / 32 * 32), (size_t)E * sizeof(float), s>>>(
            logits, (int)E, (int)k, sel, selw, cnt, order, slot, off, tiles);
        return snug_cu_launched(err, "moe_route1");
    }
    if (E <= 1024 && g_route_block == 0)
        k_moe_route_warp<<<(unsigned)((T + ROUTE_WARPS - 1) / ROUTE_WARPS), ROUTE_WARPS * 32,
                           (size_t)(ROUTE_WARPS * E) * sizeof(float), s>>>(logits, T, (int)E,
                                                                           (int)k, sel, selw);
    else
        k_moe_route<<<(unsigned)T, ROUTE_THREADS, (size_t)(2 * E) * sizeof(float), s>>>(
            logits, (int)E, (int)k, sel, selw);
    int st = snug_cu_launched(err, "moe_route");
    if (st) return st;
    int n = (int)(T * k);
    int nseg = (n + 63) / 64; /* about 64 selections per warp, at most 32 warps */
    if (nseg > 32) nseg = 32;
    if (nseg > GROUP_SMEM / (int)E) nseg = GROUP_SMEM / (int)E;
    k_moe_group<<<1, GROUP_THREADS, 0, s>>>(sel, n, (int)E, nseg, cnt, order, slot, off, tiles,
                                            (int)k);
    return snug_cu_launched(err, "moe_group");
}
