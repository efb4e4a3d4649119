/* cuda_attention.cu — the KV-cache store (every device format of cuda_kvfmt.cuh, bytes equal
 * to the CPU's kvfmt.c) and causal GQA attention for few query tokens (decode, speculative
 * verify; semantics: src/backend/cpu/ops.h snug_op_attention), flash-decoding style: each block
 * streams a range of cache positions for one (query token, query head) with an online softmax
 * in registers; long contexts split the positions over several blocks whose partial
 * (max, sum, output) are merged by a second kernel. With 2..8 query heads per KV head and a
 * cache whose decode costs (q8_0, fp8, tq), the grouped kernel decodes each vector once into
 * shared memory for all the heads of its group.
 * Larger T goes to the tensor-core kernel of cuda_fa.cu, and so do decode steps whose KV heads
 * serve 2 or more query heads (att_form picks; the merge of split partials is here).
 * Invariant: the cache is read in place in its own format (no converted copy); scratch depends
 * on T·Hq·D only, never on the context length; nothing allocates.
 * Read next: cuda_fa.cu, cuda_delta.cu. */
#include "backend/cuda/cuda_fa.h"
#include "backend/cuda/cuda_kvfmt.cuh"

#include <algorithm>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ATT_WARPS     4
#define ATT_MAX_SPLIT 64
#define ATT_TARGET_BLOCKS                                                                          \
    1056 /* split until about this many blocks are in flight (8 per SM of an H200) */
/* The grouped kernel's blocks hold a whole KV head's query heads (6 warps for the 27B, 8 for
 * the 35B-A3B), so Hkv·T blocks cover few SMs: split until about five blocks per SM of an
 * H100/H200 (132 SMs) are in flight, up to 256 splits (k_att_merge's limit). With 44 splits
 * (the per-head rule) the 27B's 4 KV heads made 176 blocks, ~1.3 per SM, and the 35B's 2 KV
 * heads 128: each block's tile loop waited out every load in turn. */
#define ATT_G_TARGET_BLOCKS 640
#define ATT_G_MAX_SPLIT     256
/* The tensor-core decode kernel's blocks (4 warps, ~110 KB of shared memory at D 256 with a
 * q8_0 cache) fit two per SM: split until about two per SM of 132 are in flight. */
#define FD_TARGET_BLOCKS 264
#define ATT_GMAX         8 /* the grouped kernel's most query heads per KV head */

/* The K and V formats of a view (plain F16/F32 views hold both in that dtype). */
static bool kv_fmts(const struct snug_cuda_kv *kv, int *kf, int *vf) {
    if (kv->type == SNUG_DTYPE_F16) return *kf = *vf = SNUG_KV_F16, true;
    if (kv->type == SNUG_DTYPE_F32) return *kf = *vf = SNUG_KV_F32, true;
    if (kv->type != SNUG_CUDA_KV_FMT) return false;
    *kf = kv->k_fmt, *vf = kv->v_fmt;
    return kvf_cuda_ok(*kf) && kvf_cuda_ok(*vf);
}

/* kv_fmts for the store, which also writes tq4/tq3. */
static bool kv_store_fmts(const struct snug_cuda_kv *kv, int *kf, int *vf) {
    if (kv->type != SNUG_CUDA_KV_FMT) return kv_fmts(kv, kf, vf);
    *kf = kv->k_fmt, *vf = kv->v_fmt;
    return true;
}

extern "C" bool snug_cuda_kv_supported(int k_fmt, int v_fmt, int64_t D) {
    return kvf_cuda_ok(k_fmt) && kvf_cuda_ok(v_fmt) && D > 0 && D % 32 == 0 && D <= 256 &&
           kvf_cuda_store_ok(k_fmt, D) && kvf_cuda_store_ok(v_fmt, D);
}

/* One warp encodes one head vector (blockIdx.x = token·Hkv + kv head; blockIdx.y 0 = K,
 * 1 = V) from f32 into its format at cache position pos0 + token, exactly as
 * snug_kvfmt_quantize does (q8_0: d = amax/127 per 32, q = roundf(x/d·...) clamped; fp8:
 * scale = amax/448 per vector). Lane l takes elements l, l+32, ... so that q8_0 block j is
 * one warp-wide step. */
__global__ void k_kv_store(uint8_t *kc, uint8_t *vc, const float *ks, const float *vs, int kf,
                           int vf, int D, int64_t Hkv, int64_t pos0, const int32_t *pos_dev) {
    if (pos_dev) pos0 = pos_dev[0]; /* a replayed launch: the step's first position */
    int lane = threadIdx.x;
    int64_t i = blockIdx.x;
    bool isv = blockIdx.y;
    int fmt = isv ? vf : kf;
    const float *x = (isv ? vs : ks) + i * D;
    int64_t vb = kvf_vec_bytes(fmt, D);
    uint8_t *dst = (isv ? vc : kc) + (pos0 * Hkv + i) * vb;
    switch (fmt) {
    case SNUG_KV_F32:
        for (int e = lane; e < D; e += 32) ((float *)dst)[e] = x[e];
        break;
    case SNUG_KV_F16:
        for (int e = lane; e < D; e += 32) ((__half *)dst)[e] = __float2half_rn(x[e]);
        break;
    case SNUG_KV_BF16:
        for (int e = lane; e < D; e += 32) ((__nv_bfloat16 *)dst)[e] = __float2bfloat16_rn(x[e]);
        break;
    case SNUG_KV_Q8_0:
        for (int b = 0; b < D / 32; b++) {
            float xv = x[b * 32 + lane];
            float amax = warp_max(fabsf(xv));
            float d = amax / 127.f, id = d != 0.0f ? 1.f / d : 0.f;
            uint8_t *blk = dst + b * 34;
            if (lane == 0) *(__half *)blk = __float2half_rn(d);
            float v = roundf(xv * id);
            int q = v >= 127.f ? 127 : v <= -127.f ? -127 : v == v ? (int)v : 0;
            blk[2 + lane] = (uint8_t)(int8_t)q;
        }
        break;
    case SNUG_KV_FP8: {
        float amax = 0.0f;
        for (int e = lane; e < D; e += 32) amax = fmaxf(amax, fabsf(x[e]));
        amax = warp_max(amax);
        float scale = amax / 448.0f, inv = scale > 0 ? 1.0f / scale : 0.0f;
        if (lane == 0) *(float *)dst = scale;
        for (int e = lane; e < D; e += 32) dst[4 + e] = kvf_to_e4m3(x[e] * inv);
        break;
    }
    case SNUG_KV_TQ4:
    case SNUG_KV_TQ3: { /* lane g encodes group g (at most 4 groups: D <= 256) */
        int bits = fmt == SNUG_KV_TQ4 ? 4 : 3, G = kvf_tq_group(D);
        if (lane < D / G)
            kvf_tq_store_group(bits, x + lane * G, G, dst + lane * kvf_tq_group_bytes(bits, G));
        break;
    }
    default:
        break;
    }
}

extern "C" int snug_cuda_kv_store(struct snug_cuda *cu, const struct snug_cuda_kv *kv, int64_t Hkv,
                                  int64_t D, int64_t pos0, const int32_t *pos_dev, int64_t T,
                                  const float *k, const float *v, struct snug_err *err) {
    if (pos0 < 0 || pos0 + T > kv->n_ctx)
        return snug_err_set(err, SNUG_ERR_BUDGET,
                            "cuda kv_store: positions %lld..%lld past the "
                            "cache capacity %lld",
                            (long long)pos0, (long long)(pos0 + T), (long long)kv->n_ctx);
    int kf, vf;
    if (!kv_store_fmts(kv, &kf, &vf) || D <= 0 || D % 32 || D > 256 || !kvf_cuda_store_ok(kf, D) ||
        !kvf_cuda_store_ok(vf, D))
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "cuda kv_store: cache type %u (K %d, V %d) at head size %lld: the "
                            "device writes f16 f32 bf16 q8_0 fp8 with D %% 32 == 0 and tq4 tq3 "
                            "with D %% 64 == 0, D <= 256",
                            kv->type, (int)kv->k_fmt, (int)kv->v_fmt, (long long)D);
    if (T * Hkv <= 0) return SNUG_OK;
    dim3 grid((unsigned)(T * Hkv), 2);
    k_kv_store<<<grid, 32, 0, SNUG_CU_STREAM(cu)>>>((uint8_t *)kv->k, (uint8_t *)kv->v, k, v, kf,
                                                    vf, (int)D, Hkv, pos0, pos_dev);
    return snug_cu_launched(err, "kv_store");
}

/* Splits of the nk keys for a launch of `base` blocks per split: until about `target` blocks,
 * at most `most` splits, at least ATT_MIN_KEYS keys each. */
static int att_nsplit(int64_t base, int64_t target, int64_t most, int64_t nk) {
    if (base >= target) return 1;
    int64_t ns = (target + base - 1) / base;
    int64_t by_keys = (nk + ATT_MIN_KEYS - 1) / ATT_MIN_KEYS;
    if (ns > by_keys) ns = by_keys;
    if (ns > most) ns = most;
    return ns < 1 ? 1 : (int)ns;
}

/* The per-head kernel's splits (grid splits × Hq × T) and the grouped kernel's (splits × Hkv ×
 * T). */
static int att_nsplit_head(int64_t Hq, int64_t T, int64_t nk) {
    return att_nsplit(Hq * T, ATT_TARGET_BLOCKS, ATT_MAX_SPLIT, nk);
}
static int att_nsplit_group(int64_t Hkv, int64_t T, int64_t nk) {
    return att_nsplit(Hkv * T, ATT_G_TARGET_BLOCKS, ATT_G_MAX_SPLIT, nk);
}
/* The tensor-core decode kernel's launch splits (grid splits × Hkv × row blocks of FD_ROWS):
 * until about two blocks per SM, never more than the grouped kernel's bound for the fewest KV
 * heads (what snug_cuda_attention_work_bytes sizes). */
static int att_nsplit_mma(int64_t Hq, int64_t Hkv, int64_t T) {
    int64_t rb = (T * (Hq / Hkv) + FD_ROWS - 1) / FD_ROWS;
    int ns = att_nsplit(Hkv * rb, FD_TARGET_BLOCKS, ATT_G_MAX_SPLIT, INT64_MAX / 2);
    return std::min(ns, att_nsplit_group(std::max<int64_t>(1, Hq / ATT_GMAX), T, INT64_MAX / 2));
}

/* Block (split s, query head h, token t). Warp w takes positions lo+w, lo+w+4, ..., ATT_U of
 * them per step (all their K and V loads issued before any is used, so several rows are in
 * flight per warp); lane l holds dims l·DPL .. l·DPL+DPL-1 of q and of the running output,
 * decoded from the stored vectors in place (kvf_dec). KF/VF: the formats as compile-time
 * constants for the common equal pairs (the decode switch folds away), -1 = read kf/vf. The
 * warps' states merge through shared memory; the result goes to out (one split) or to the
 * partials in work. */
#define ATT_U 4
template <int DPL, int KF, int VF>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    k_attention(const uint8_t *__restrict__ kc, const uint8_t *__restrict__ vc, int kf, int vf,
                int64_t Hq, int64_t Hkv, int64_t pos0_host, const int32_t *pos_dev, int64_t T,
                const float *__restrict__ q, float scale, float *out, float *part, int nsplit) {
    constexpr int D = DPL * 32;
    if constexpr (KF >= 0) kf = KF;
    if constexpr (VF >= 0) vf = VF;
    int s = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
    const att_split sp = att_split_of(pos0_host, pos_dev, T, nsplit);
    if (s >= sp.ns) return; /* (the whole block) */
    const int64_t pos0 = sp.pos0, chunk = sp.chunk;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int64_t kh = h / (Hq / Hkv);
    int64_t kvb = kvf_vec_bytes(kf, D), vvb = kvf_vec_bytes(vf, D);
    int64_t lo = (int64_t)s * chunk, hi = lo + chunk, last = pos0 + t + 1;
    if (hi > last) hi = last;
    float qv[DPL], o[DPL];
    const float *qp = q + ((int64_t)t * Hq + h) * D + lane * DPL;
#pragma unroll
    for (int i = 0; i < DPL; i++) qv[i] = qp[i] * scale, o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const uint8_t *kb = kc + kh * kvb, *vb = vc + kh * vvb;
    constexpr int TG = D % 128 == 0 ? 128 : 64; /* kvf_tq_group(D) */
    const float klut = kvf_tq_lut(KF), vlut = kvf_tq_lut(VF);
    for (int64_t p0 = lo + w; p0 < hi; p0 += ATT_WARPS * ATT_U) {
        float kr[ATT_U][DPL], vr[ATT_U][DPL], sc[ATT_U];
#pragma unroll
        for (int u = 0; u < ATT_U; u++) {
            int64_t p = p0 + u * ATT_WARPS;
            if (p < hi) { /* uniform across the warp (p depends on the warp only) */
                if constexpr (KF == SNUG_KV_TQ4 || KF == SNUG_KV_TQ3)
                    kvf_dec_tq_warp<DPL, KF>(kb + p * Hkv * kvb, lane * DPL, kr[u], TG, klut);
                else
                    kvf_dec<DPL>(kf, kb + p * Hkv * kvb, lane * DPL, kr[u], TG);
                if constexpr (VF == SNUG_KV_TQ4 || VF == SNUG_KV_TQ3)
                    kvf_dec_tq_warp<DPL, VF>(vb + p * Hkv * vvb, lane * DPL, vr[u], TG, vlut);
                else
                    kvf_dec<DPL>(vf, vb + p * Hkv * vvb, lane * DPL, vr[u], TG);
            } else {
#pragma unroll
                for (int i = 0; i < DPL; i++) kr[u][i] = vr[u][i] = 0.0f;
            }
        }
        float mn = m;
#pragma unroll
        for (int u = 0; u < ATT_U; u++) {
            float d = 0.0f;
#pragma unroll
            for (int i = 0; i < DPL; i++) d = fmaf(qv[i], kr[u][i], d);
            d = warp_sum(d);
            sc[u] = p0 + u * ATT_WARPS < hi ? d : -INFINITY;
            mn = fmaxf(mn, sc[u]);
        }
        float corr = __expf(m - mn);
        l *= corr;
#pragma unroll
        for (int i = 0; i < DPL; i++) o[i] *= corr;
#pragma unroll
        for (int u = 0; u < ATT_U; u++) {
            float e = __expf(sc[u] - mn);
            l += e;
#pragma unroll
            for (int i = 0; i < DPL; i++) o[i] = fmaf(e, vr[u][i], o[i]);
        }
        m = mn;
    }
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS], so[ATT_WARPS][D];
    if (lane == 0) sm[w] = m, sl[w] = l;
#pragma unroll
    for (int i = 0; i < DPL; i++) so[w][lane * DPL + i] = o[i];
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int j = 0; j < ATT_WARPS; j++) M = fmaxf(M, sm[j]);
    float L = 0.0f, f[ATT_WARPS];
#pragma unroll
    for (int j = 0; j < ATT_WARPS; j++) {
        f[j] = sm[j] == -INFINITY ? 0.0f : __expf(sm[j] - M);
        L += sl[j] * f[j];
    }
    int64_t row = (int64_t)t * Hq + h;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < ATT_WARPS; j++) acc += so[j][d] * f[j];
        if (nsplit == 1)
            out[row * D + d] = acc / L;
        else
            part[(row * nsplit + s) * (D + 2) + 2 + d] = acc;
    }
    if (nsplit > 1 && threadIdx.x == 0) {
        part[(row * nsplit + s) * (D + 2)] = M;
        part[(row * nsplit + s) * (D + 2) + 1] = L;
    }
}

/* The grouped form, for 2..8 query heads per KV head (the 27B has 6): block (split s, KV head
 * kh, token t) with one warp per query head of the group. The warps first decode a tile of
 * ATT_JP·G positions into shared memory together (each cached vector is decoded once, not once
 * per query head; warp w decodes positions w and w + G), then each warp runs its head's online
 * softmax over the tile, lane l holding dims l·DPL .. l·DPL+DPL-1. The next tile's vectors are
 * loaded into registers before the current tile's math, so their loads are in flight during
 * it. The tile stores dim l·DPL+i at column i·32+l (every lane reads back the dims its own lane
 * index decoded: no bank conflicts). Each warp owns its head's output row, so there is no
 * cross-warp merge; splits use the same partials as k_attention.
 * FLAT (a candidate form, snug_cuda_attention_tune(2), measured before it becomes the default):
 * no branch in the tile loop, so the next tile's loads and the scores' shuffle chains can
 * overlap — the fetch clamps positions past the split's end to its last position (loaded,
 * never weighed: their scores are -inf), every slot of a tile is stored, and the score and
 * output loops run over all ATT_TP slots (the slots past 2·G are zeros, set once). */
#define ATT_JP 2
#define ATT_TP (ATT_JP * ATT_GMAX) /* the largest tile */
template <int DPL, int KF, int VF, bool FLAT>
__global__ void __launch_bounds__(ATT_GMAX * 32)
    k_attention_g(const uint8_t *__restrict__ kc, const uint8_t *__restrict__ vc, int kf, int vf,
                  int64_t Hq, int64_t Hkv, int64_t pos0_host, const int32_t *pos_dev, int64_t T,
                  const float *__restrict__ q, float scale, float *out, float *part, int nsplit) {
    constexpr int D = DPL * 32, TG = D % 128 == 0 ? 128 : 64; /* TG: kvf_tq_group(D) */
    if constexpr (KF >= 0) kf = KF;
    if constexpr (VF >= 0) vf = VF;
    const att_split sp = att_split_of(pos0_host, pos_dev, T, nsplit);
    if ((int)blockIdx.x >= sp.ns) return; /* (the whole block: before any barrier) */
    const int64_t pos0 = sp.pos0, chunk = sp.chunk;
    __shared__ __align__(16) float sK[ATT_TP][D], sV[ATT_TP][D];
    const int G = (int)(blockDim.x >> 5), lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int TP = ATT_JP * G;
    if constexpr (FLAT) /* the slots no warp stores (published by the loop's first barrier) */
        for (int i = threadIdx.x; i < (ATT_TP - TP) * D; i += blockDim.x)
            sK[TP + i / D][i % D] = 0.0f, sV[TP + i / D][i % D] = 0.0f;
    const int s = blockIdx.x, t = blockIdx.z;
    const int64_t kh = blockIdx.y, h = kh * G + w;
    const int64_t kvb = kvf_vec_bytes(kf, D), vvb = kvf_vec_bytes(vf, D);
    int64_t lo = (int64_t)s * chunk, hi = lo + chunk, last = pos0 + t + 1;
    if (hi > last) hi = last;
    float qv[DPL], o[DPL];
    const float *qp = q + ((int64_t)t * Hq + h) * D + lane * DPL;
#pragma unroll
    for (int i = 0; i < DPL; i++) qv[i] = qp[i] * scale, o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const uint8_t *kb = kc + kh * kvb, *vb = vc + kh * vvb;
    const float klut = kvf_tq_lut(KF), vlut = kvf_tq_lut(VF);
    float kr[ATT_JP][DPL], vr[ATT_JP][DPL]; /* the next tile's vectors of this warp */
    auto fetch =
        [&](int64_t pt) { /* uniform across the warp */
#pragma unroll
                          for (int jj = 0; jj < ATT_JP; jj++) {
                              int64_t p = pt + w + jj * G;
                              if (FLAT && p >= hi) p = hi - 1;
                              if (FLAT || p < hi) {
                                  if constexpr (KF == SNUG_KV_TQ4 || KF == SNUG_KV_TQ3)
                                      kvf_dec_tq_warp<DPL, KF>(kb + p * Hkv * kvb, lane * DPL,
                                                               kr[jj], TG, klut);
                                  else
                                      kvf_dec<DPL>(kf, kb + p * Hkv * kvb, lane * DPL, kr[jj], TG);
                                  if constexpr (VF == SNUG_KV_TQ4 || VF == SNUG_KV_TQ3)
                                      kvf_dec_tq_warp<DPL, VF>(vb + p * Hkv * vvb, lane * DPL,
                                                               vr[jj], TG, vlut);
                                  else
                                      kvf_dec<DPL>(vf, vb + p * Hkv * vvb, lane * DPL, vr[jj], TG);
                              }
                          }
        };
    fetch(lo);
    for (int64_t p0 = lo; p0 < hi; p0 += TP) { /* bounds uniform across the block */
        const int np = hi - p0 < TP ? (int)(hi - p0) : TP;
#pragma unroll
        for (int jj = 0; jj < ATT_JP; jj++) {
            const int j = w + jj * G;
            if (FLAT || j < np)
#pragma unroll
                for (int i = 0; i < DPL; i++)
                    sK[j][i * 32 + lane] = kr[jj][i], sV[j][i * 32 + lane] = vr[jj][i];
        }
        __syncthreads();
        if (p0 + TP < hi) fetch(p0 + TP);
        float sc[ATT_TP], mn = m;
#pragma unroll
        for (int j = 0; j < ATT_TP; j++) {
            sc[j] = -INFINITY;
            if constexpr (FLAT) {
                float d = 0.0f;
#pragma unroll
                for (int i = 0; i < DPL; i++) d = fmaf(qv[i], sK[j][i * 32 + lane], d);
                d = warp_sum(d);
                sc[j] = j < np ? d : -INFINITY;
                mn = fmaxf(mn, sc[j]);
            } else if (j < np) {
                float d = 0.0f;
#pragma unroll
                for (int i = 0; i < DPL; i++) d = fmaf(qv[i], sK[j][i * 32 + lane], d);
                sc[j] = warp_sum(d);
                mn = fmaxf(mn, sc[j]);
            }
        }
        float corr = __expf(m - mn);
        l *= corr;
#pragma unroll
        for (int i = 0; i < DPL; i++) o[i] *= corr;
#pragma unroll
        for (int j = 0; j < ATT_TP; j++) {
            if (FLAT || j < np) {
                float e = __expf(sc[j] - mn); /* 0 for the slots past np */
                l += e;
#pragma unroll
                for (int i = 0; i < DPL; i++) o[i] = fmaf(e, sV[j][i * 32 + lane], o[i]);
            }
        }
        m = mn;
        __syncthreads();
    }
    const int64_t row = (int64_t)t * Hq + h;
    if (nsplit == 1) {
#pragma unroll
        for (int i = 0; i < DPL; i++) out[row * D + lane * DPL + i] = o[i] / l;
        return;
    }
    float *pp = part + (row * nsplit + s) * (D + 2);
#pragma unroll
    for (int i = 0; i < DPL; i++) pp[2 + lane * DPL + i] = o[i];
    if (lane == 0) pp[0] = m, pp[1] = l;
}

/* Merge the splits of one (token, head): out = Σ_s e^{M_s−M} O_s / Σ_s e^{M_s−M} L_s. The
 * partials of a row are nsplit apart (at most ATT_G_MAX_SPLIT); with pos_dev the decode
 * kernels' splits in use (att_split_of) are merged, else all nsplit. The threads first take the
 * splits' weights e^{M_s−M} into shared memory together, then each output dim sums over the
 * splits with adjacent threads reading adjacent dims. */
__global__ void k_att_merge(const float *part, int nsplit, int D, float *out, int64_t pos0_host,
                            const int32_t *pos_dev, int64_t T) {
    __shared__ float wt[ATT_G_MAX_SPLIT], red[32];
    int64_t row = blockIdx.x;
    const float *p = part + row * nsplit * (D + 2);
    if (T > 0) nsplit = att_split_of(pos0_host, pos_dev, T, nsplit).ns;
    float M = -INFINITY;
    for (int s = threadIdx.x; s < nsplit; s += blockDim.x) M = fmaxf(M, p[s * (D + 2)]);
    M = warp_max(M);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = M;
    __syncthreads();
    M = -INFINITY;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) M = fmaxf(M, red[w]);
    float L = 0.0f;
    for (int s = threadIdx.x; s < nsplit; s += blockDim.x) {
        float ms = p[s * (D + 2)], f = ms == -INFINITY ? 0.0f : __expf(ms - M);
        wt[s] = f;
        L += p[s * (D + 2) + 1] * f;
    }
    L = block_sum(L, red); /* (its barriers also publish wt) */
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < nsplit; s++) acc += p[s * (D + 2) + 2 + d] * wt[s];
        out[row * D + d] = acc / L;
    }
}

/* The randomized Hadamard rotation of kvfmt.c (snug_kvfmt_rotate / _unrotate) of each
 * G-group of `rows` vectors of D floats, src to dst (may alias): one block of D threads per
 * vector, the butterflies in shared memory (each is the same a+b, a-b as the C code's, so the
 * result is the CPU's bit for bit). inv: the inverse (H, then 1/√G and the signs). */
__global__ void k_tq_rotate(const float *src, float *dst, int D, int inv) {
    __shared__ float x[256];
    int j = threadIdx.x, G = kvf_tq_group(D), jj = j % G;
    int64_t row = blockIdx.x;
    float sg = (kvf_tq_signs[jj >> 6] >> (jj & 63)) & 1 ? -1.0f : 1.0f;
    float ig = __fdiv_rn(1.0f, __fsqrt_rn((float)G));
    float a = src[row * D + j];
    x[j] = inv ? a : __fmul_rn(a, sg);
    __syncthreads();
    for (int h = 1; h < G; h *= 2) {
        float u = 0.0f;
        bool top = !(jj & h);
        float p = x[j], o = x[top ? j + h : j - h];
        u = top ? __fadd_rn(p, o) : __fsub_rn(o, p);
        __syncthreads();
        x[j] = u;
        __syncthreads();
    }
    dst[row * D + j] = inv ? __fmul_rn(x[j], __fmul_rn(ig, sg)) : __fmul_rn(x[j], ig);
}

/* Partials for any chunk of up to T tokens (a prompt's last chunk is shorter, and a shorter
 * chunk may split more): the largest need of either kernel over T' = 1 .. T. */
extern "C" size_t snug_cuda_attention_work_bytes(int64_t Hq, int64_t D, int64_t T) {
    int64_t most = 0;
    for (int64_t t = 1; t <= T; t++) {
        /* the grouped kernel splits most with the fewest KV heads it serves (Hq / ATT_GMAX) */
        int64_t ns =
            std::max(att_nsplit_head(Hq, t, INT64_MAX / 2),
                     att_nsplit_group(std::max<int64_t>(1, Hq / ATT_GMAX), t, INT64_MAX / 2));
        if (t > ATT_FA_MIN_T) ns = std::max(ns, (int64_t)snug_cuda_fa_nsplit(Hq, t, INT64_MAX / 2));
        if (ns > 1) most = std::max(most, t * Hq * ns);
    }
    /* then the rotated queries of a TurboQuant K cache (T·Hq·D floats), placed first */
    return (size_t)(most * (D + 2) + T * Hq * D) * sizeof(float);
}

/* Threads of a merge block: one per output dim, up to 256. */
static unsigned att_merge_threads(int64_t D) {
    return (unsigned)(D < 256 ? (D + 31) / 32 * 32 : 256);
}

/* Merge the partials of `ns` splits (k_att_merge) into out; used by cuda_fa.cu too. */
int snug_cuda_att_merge(struct snug_cuda *cu, const float *part, int ns, int64_t rows, int64_t D,
                        float *out, struct snug_err *err) {
    k_att_merge<<<(unsigned)rows, att_merge_threads(D), 0, SNUG_CU_STREAM(cu)>>>(part, ns, (int)D,
                                                                                 out, 0, NULL, 0);
    return snug_cu_launched(err, "attention merge");
}

/* Launch the decode kernel (GROUPED: k_attention_g with G warps per block on grid (splits, Hkv,
 * T); else k_attention on grid (splits, Hq, T)) with the formats as compile-time constants for
 * the common pairs (the decode switch folds away; tq: the codebook by warp shuffles; q8_0/tq4:
 * the 27B's 262K pairing), -1 = read kf/vf at run time. */
template <int DPL, bool GROUPED>
static void att_launch(cudaStream_t st, const struct snug_cuda_kv *kv, int kf, int vf, dim3 grid,
                       int G, bool flat, int64_t Hq, int64_t Hkv, int64_t pos0,
                       const int32_t *pos_dev, int64_t T, const float *q, float scale, float *out,
                       float *part, int ns) {
    const uint8_t *k = (const uint8_t *)kv->k, *v = (const uint8_t *)kv->v;
#define ATT_GO(KF, VF)                                                                             \
    do {                                                                                           \
        if constexpr (GROUPED) {                                                                   \
            if (flat)                                                                              \
                k_attention_g<DPL, KF, VF, true><<<grid, G * 32, 0, st>>>(                         \
                    k, v, kf, vf, Hq, Hkv, pos0, pos_dev, T, q, scale, out, part, ns);             \
            else                                                                                   \
                k_attention_g<DPL, KF, VF, false><<<grid, G * 32, 0, st>>>(                        \
                    k, v, kf, vf, Hq, Hkv, pos0, pos_dev, T, q, scale, out, part, ns);             \
        } else                                                                                     \
            k_attention<DPL, KF, VF><<<grid, ATT_WARPS * 32, 0, st>>>(                             \
                k, v, kf, vf, Hq, Hkv, pos0, pos_dev, T, q, scale, out, part, ns);                 \
    } while (0)
    if (kf == vf && kf == SNUG_KV_F16)
        ATT_GO(SNUG_KV_F16, SNUG_KV_F16);
    else if (kf == vf && kf == SNUG_KV_Q8_0)
        ATT_GO(SNUG_KV_Q8_0, SNUG_KV_Q8_0);
    else if (kf == vf && kf == SNUG_KV_FP8)
        ATT_GO(SNUG_KV_FP8, SNUG_KV_FP8);
    else if (kf == vf && kf == SNUG_KV_BF16)
        ATT_GO(SNUG_KV_BF16, SNUG_KV_BF16);
    else if (kf == vf && kf == SNUG_KV_TQ4)
        ATT_GO(SNUG_KV_TQ4, SNUG_KV_TQ4);
    else if (kf == SNUG_KV_Q8_0 && vf == SNUG_KV_TQ4)
        ATT_GO(SNUG_KV_Q8_0, SNUG_KV_TQ4);
    else
        ATT_GO(-1, -1);
#undef ATT_GO
}

static int att_run(struct snug_cuda *cu, const struct snug_cuda_kv *kv, int kf, int vf, int64_t Hq,
                   int64_t Hkv, int64_t D, int64_t pos0, const int32_t *pos_dev, int64_t T,
                   const float *q, float scale, float *out, void *work, struct snug_err *err);

/* Decode attention kernel: -2 = not decided yet (SNUG_ATT_GROUPED read at the first call),
 * -1 = the default (tensor cores where the formats allow, else by the formats), 0 = per head, 1 =
 * grouped, 2 = grouped in its FLAT form, 3 = tensor cores (snug_cuda_attention_tune). */
static int g_att_grouped = -2;
extern "C" void snug_cuda_attention_tune(int grouped) {
    g_att_grouped = grouped >= 0 && grouped <= 3 ? grouped : -1;
}

/* Which kernel runs T tokens of Hq query heads over Hkv KV heads (the enum in cuda_ops.h). */
static int att_form(const struct snug_cuda *cu, int kf, int vf, int64_t Hq, int64_t Hkv, int64_t D,
                    int64_t T) {
    if (g_att_grouped == -2) { /* first call: the debugging override, read once */
        const char *ge = getenv("SNUG_ATT_GROUPED");
        g_att_grouped = !ge || !*ge        ? -1
                        : !strcmp(ge, "3") ? 3
                        : !strcmp(ge, "2") ? 2
                                           : strcmp(ge, "0") != 0;
    }
    if (T > ATT_FA_MIN_T) return SNUG_CUDA_ATT_PROMPT;
    int64_t G = Hq / Hkv;
    /* tensor cores for 2 or more query heads per KV head, every format the kernel reads: on an
     * H100 1.4-9.1x the f32 kernel it replaces from 32K and 1.0-3.0x at 4K, but for f16 with
     * one token and 24 query heads at 4K (33.7 against 30.3 us); whole-model decode at 32K
     * +15% (35B-A3B) and +24% (27B) (docs/perf/cuda-kernels.md "Decode on tensor cores").
     * SNUG_ATT_GROUPED=0 / 1 / 2 force the f32 kernels below, for comparisons. */
    if ((g_att_grouped == 3 || g_att_grouped == -1) && G >= 2 && snug_cuda_fa_dec_ok(cu, kf, vf, D))
        return SNUG_CUDA_ATT_MMA;
    /* where tensor cores do not apply (one query head per KV head, an f32 cache, tq at head
     * sizes 64 / 128), measured on an H100 at 4K-128K (docs/perf/cuda-kernels.md): grouped
     * 1.2-3.3x faster for fp8 and q8_0/tq4, 1.1-2.2x for q8_0 from 32K (within 10% at 4K); for
     * f16 (whose decode is free) about equal on the 27B and slower at 4K with one token: the
     * per-head kernel keeps f16 / bf16 / f32 caches; SNUG_ATT_GROUPED=1 / 0 forces either */
    bool cheap = (kf == SNUG_KV_F16 || kf == SNUG_KV_BF16 || kf == SNUG_KV_F32) &&
                 (vf == SNUG_KV_F16 || vf == SNUG_KV_BF16 || vf == SNUG_KV_F32);
    bool grouped = g_att_grouped >= 0 && g_att_grouped != 3 ? g_att_grouped >= 1 : !cheap;
    if (!(grouped && G >= 2 && G <= ATT_GMAX && D >= 64)) return SNUG_CUDA_ATT_HEAD;
    return g_att_grouped == 2 ? SNUG_CUDA_ATT_FLAT : SNUG_CUDA_ATT_GROUPED;
}

extern "C" int snug_cuda_attention_form(const struct snug_cuda *cu, int k_fmt, int v_fmt,
                                        int64_t Hq, int64_t Hkv, int64_t D, int64_t T) {
    return att_form(cu, k_fmt, v_fmt, Hq, Hkv, D, T);
}

extern "C" int snug_cuda_attention(struct snug_cuda *cu, const struct snug_cuda_kv *kv, int64_t Hq,
                                   int64_t Hkv, int64_t D, int64_t pos0, const int32_t *pos_dev,
                                   int64_t T, const float *q, float scale, float *out, void *work,
                                   struct snug_err *err) {
    int kf, vf;
    if (!kv_fmts(kv, &kf, &vf) || !snug_cuda_kv_supported(kf, vf, D))
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "cuda attention: cache type %u (K %d, V %d) at head size %lld: the "
                            "device reads f16 f32 bf16 q8_0 fp8 with D %% 32 == 0, D <= 256",
                            kv->type, (int)kv->k_fmt, (int)kv->v_fmt, (long long)D);
    if (Hkv <= 0 || Hq % Hkv)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "cuda attention: %lld query heads not a "
                            "multiple of %lld kv heads",
                            (long long)Hq, (long long)Hkv);
    if (pos0 + T > kv->n_ctx)
        return snug_err_set(err, SNUG_ERR_BUDGET,
                            "cuda attention: positions up to %lld past "
                            "the cache capacity %lld",
                            (long long)(pos0 + T), (long long)kv->n_ctx);
    if (T <= 0) return SNUG_OK;
    if (kvf_rotated(kf) || kvf_rotated(vf)) {
        /* TurboQuant: rotate q once into the start of work (K rotated), attend in the rotated
         * basis, un-rotate the output rows in place (V rotated). */
        if (!work)
            return snug_err_set(err, SNUG_ERR_INVALID,
                                "cuda attention: work memory required for a tq cache "
                                "(snug_cuda_attention_work_bytes)");
        float *qr = (float *)work;
        const float *qq = q;
        if (kvf_rotated(kf)) {
            k_tq_rotate<<<(unsigned)(T * Hq), (unsigned)D, 0, SNUG_CU_STREAM(cu)>>>(q, qr, (int)D,
                                                                                    0);
            int rc = snug_cu_launched(err, "attention tq rotate");
            if (rc) return rc;
            qq = qr;
        }
        int rc = att_run(cu, kv, kf, vf, Hq, Hkv, D, pos0, pos_dev, T, qq, scale, out,
                         (void *)(qr + T * Hq * D), err);
        if (rc || !kvf_rotated(vf)) return rc;
        k_tq_rotate<<<(unsigned)(T * Hq), (unsigned)D, 0, SNUG_CU_STREAM(cu)>>>(out, out, (int)D,
                                                                                1);
        return snug_cu_launched(err, "attention tq unrotate");
    }
    return att_run(cu, kv, kf, vf, Hq, Hkv, D, pos0, pos_dev, T, q, scale, out, work, err);
}

/* The f32 flash-decoding kernels (k_attention / k_attention_g) for a decode step. */
static int att_f32(struct snug_cuda *cu, const struct snug_cuda_kv *kv, int kf, int vf,
                   bool grouped, bool flat, int64_t Hq, int64_t Hkv, int64_t D, int64_t pos0,
                   const int32_t *pos_dev, int64_t T, const float *q, float scale, float *out,
                   float *part, int ns, struct snug_err *err) {
    cudaStream_t st = SNUG_CU_STREAM(cu);
    const int64_t G = Hq / Hkv;
    dim3 grid((unsigned)ns, (unsigned)(grouped ? Hkv : Hq), (unsigned)T);
#define ATT_D(DPL)                                                                                 \
    do {                                                                                           \
        if (grouped)                                                                               \
            att_launch<DPL, true>(st, kv, kf, vf, grid, (int)G, flat, Hq, Hkv, pos0, pos_dev, T,   \
                                  q, scale, out, part, ns);                                        \
        else                                                                                       \
            att_launch<DPL, false>(st, kv, kf, vf, grid, (int)G, flat, Hq, Hkv, pos0, pos_dev, T,  \
                                   q, scale, out, part, ns);                                       \
    } while (0)
    switch (D) {
    case 32: /* never grouped (D >= 64 above) */
        att_launch<1, false>(st, kv, kf, vf, grid, (int)G, flat, Hq, Hkv, pos0, pos_dev, T, q,
                             scale, out, part, ns);
        break;
    case 64:
        ATT_D(2);
        break;
    case 128:
        ATT_D(4);
        break;
    case 256:
        ATT_D(8);
        break;
    default:
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "cuda attention: head dim %lld (32, 64, "
                            "128 or 256 supported)",
                            (long long)D);
    }
#undef ATT_D
    return snug_cu_launched(err, "attention");
}

/* The attention proper (after the checks; q in the basis the K cache stores). */
static int att_run(struct snug_cuda *cu, const struct snug_cuda_kv *kv, int kf, int vf, int64_t Hq,
                   int64_t Hkv, int64_t D, int64_t pos0, const int32_t *pos_dev, int64_t T,
                   const float *q, float scale, float *out, void *work, struct snug_err *err) {
    if (T > ATT_FA_MIN_T) {
        int rc = snug_cuda_fa(cu, kv, kf, vf, Hq, Hkv, D, pos0, T, q, scale, out, work, err);
        if (rc != SNUG_ERR_UNSUPPORTED) return rc; /* else: the shape falls back to the below */
    }
    float *part = (float *)work;
    /* (a prompt chunk the tensor-core prompt kernel left: the decode kernels) */
    const int form = att_form(cu, kf, vf, Hq, Hkv, D, std::min<int64_t>(T, ATT_FA_MIN_T));
    const bool grouped = form == SNUG_CUDA_ATT_GROUPED || form == SNUG_CUDA_ATT_FLAT,
               flat = form == SNUG_CUDA_ATT_FLAT;
    /* the launch is sized for any cache length (ns splits at most); the kernels take the
     * splits the actual length asks for (att_split_of): the same splits, and so the same
     * bits, as sizing the launch by the length */
    int ns = form == SNUG_CUDA_ATT_MMA ? att_nsplit_mma(Hq, Hkv, T)
             : grouped                 ? att_nsplit_group(Hkv, T, INT64_MAX / 2)
                                       : att_nsplit_head(Hq, T, INT64_MAX / 2);
    if (ns > 1 && !work)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "cuda attention: work memory required "
                            "(snug_cuda_attention_work_bytes)");
    int rc = form == SNUG_CUDA_ATT_MMA ? snug_cuda_fa_dec(cu, kv, kf, vf, Hq, Hkv, D, pos0, pos_dev,
                                                          T, q, scale, out, part, ns, err)
                                       : att_f32(cu, kv, kf, vf, grouped, flat, Hq, Hkv, D, pos0,
                                                 pos_dev, T, q, scale, out, part, ns, err);
    if (rc || ns == 1) return rc;
    k_att_merge<<<(unsigned)(T * Hq), att_merge_threads(D), 0, SNUG_CU_STREAM(cu)>>>(
        part, ns, (int)D, out, pos0, pos_dev, T);
    return snug_cu_launched(err, "attention merge");
}
