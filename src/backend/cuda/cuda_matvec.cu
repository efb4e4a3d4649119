/* cuda_matvec.cu — the decode matrix-vector product (T = 1..8 tokens) with int8 activations:
 * x is first quantised to int8 in blocks of 32 (one f32 scale d and the block sum d·Σq per
 * block, in the op's `work`), then every weight type here is multiplied with dp4a (four
 * int8 products per instruction) straight from its packed bytes: one thread owns 32 weights
 * of a row (one "unit") and reads them with 16-byte (Q4_K) or 4-byte funnel-shifted loads
 * (the 210-/34-byte blocks of Q6_K / Q8_0 are only 2-byte aligned).
 * Owns: k_quant_x8 and the k_mvq kernels for q4_K, q6_K, q8_0. Invariant: one pass over W;
 * no allocation; results equal Σ w·x̃ with x̃ the int8-rounded x (the CPU op's rounding too).
 * Read next: cuda_common.cuh (block layouts), cuda_matmul.cu (the dispatch and the f32 path),
 * docs/perf/cuda-kernels.md (versions and measurements). */
#include "backend/cuda/cuda_common.cuh"

#define MVQ_MAX_WARPS 8
#define MVQ_ROWS      2 /* rows per block: each x load serves both */

/* One warp per 32-element block of x (blocks run across the T rows, n_in % 32 == 0):
 * d = max|x| / 127, q = round(x / d), ds = (d, d · Σq). */
__global__ void k_quant_x8(const float *__restrict__ x, int64_t nblk, int8_t *__restrict__ qx,
                           float2 *__restrict__ ds) {
    int64_t b = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (b >= nblk) return; /* whole warps leave together */
    int lane = threadIdx.x & 31;
    float v = x[b * 32 + lane];
    float amax = warp_max(fabsf(v));
    float d = amax / 127.0f;
    int q = amax > 0.0f ? __float2int_rn(v / d) : 0;
    int s = q;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    qx[b * 32 + lane] = (int8_t)q;
    if (lane == 0) ds[b] = make_float2(d, d * (float)s);
}

/* Four little-endian words starting at any byte address p (the words at p & ~3 and the next
 * four, funnel-shifted). Reads up to 3 bytes past p + 16: callers only use it where the block
 * continues (Q6_K: scales and d follow; Q8_0: the last word is read at most 2 bytes in). */
__device__ __forceinline__ void ld_words(const uint8_t *p, int n, uint32_t *o) {
    const uint32_t *a = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
    uint32_t sh = (uint32_t)((uintptr_t)p & 3) * 8;
    uint32_t w[9];
#pragma unroll
    for (int i = 0; i <= 8; i++)
        if (i <= n) w[i] = (i < n || sh) ? __ldg(a + i) : 0u;
#pragma unroll
    for (int i = 0; i < 8; i++)
        if (i < n) o[i] = __funnelshift_r(w[i], w[i + 1], sh);
}

__device__ __forceinline__ uint32_t byte_of(uint32_t s0, uint32_t s1, uint32_t s2, int j) {
    uint32_t w = j < 4 ? s0 : (j < 8 ? s1 : s2);
    return (w >> (8 * (j & 3))) & 0xffu;
}

/* A unit's weights, loaded and with their scales decoded, ready for any number of x rows.
 * Unit u of a row covers elements 32u .. 32u+31 (in the type's own element order below). */
template <int TYPE> struct mvq_unit;

/* Q4_K (144 B / 256): unit u = superblock u/8, k = u%8: c = k/2 (32-byte qs group), h = k%2
 * (which 16 bytes of it). Its 16 bytes hold elements 64c+16h+i (low nibbles, sub-block 2c)
 * and 64c+32+16h+i (high nibbles, sub-block 2c+1), i < 16. The min term of a sub-block uses
 * the x block sum, so only the h = 0 unit adds it. */
template <> struct mvq_unit<SNUG_DTYPE_Q4_K> {
    uint32_t q[4];
    float dA, dB, mA, mB; /* d·sc and dmin·m of sub-blocks 2c and 2c+1 (m zero when h = 1) */
    int e0;               /* first element of the low half: 256·sb + 64c + 16h */
    __device__ __forceinline__ void load(const uint8_t *row, int u) {
        int sb = u >> 3, k = u & 7, c = k >> 1, h = k & 1;
        const uint8_t *b = row + (size_t)sb * 144;
        uint4 hd = __ldg((const uint4 *)b);
        uint4 qv = __ldg((const uint4 *)(b + 16 + 32 * c + 16 * h));
        q[0] = qv.x, q[1] = qv.y, q[2] = qv.z, q[3] = qv.w;
        float d = __half2float(__ushort_as_half((unsigned short)(hd.x & 0xffff)));
        float dm = __half2float(__ushort_as_half((unsigned short)(hd.x >> 16)));
        int j = 2 * c;
        uint32_t scA, mnA, scB, mnB;
        if (j < 4) {
            scA = byte_of(hd.y, hd.z, hd.w, j) & 63, mnA = byte_of(hd.y, hd.z, hd.w, j + 4) & 63;
            scB = byte_of(hd.y, hd.z, hd.w, j + 1) & 63;
            mnB = byte_of(hd.y, hd.z, hd.w, j + 5) & 63;
        } else {
            scA = (byte_of(hd.y, hd.z, hd.w, j + 4) & 0xf) |
                  ((byte_of(hd.y, hd.z, hd.w, j - 4) >> 6) << 4);
            mnA = (byte_of(hd.y, hd.z, hd.w, j + 4) >> 4) |
                  ((byte_of(hd.y, hd.z, hd.w, j) >> 6) << 4);
            scB = (byte_of(hd.y, hd.z, hd.w, j + 5) & 0xf) |
                  ((byte_of(hd.y, hd.z, hd.w, j - 3) >> 6) << 4);
            mnB = (byte_of(hd.y, hd.z, hd.w, j + 5) >> 4) |
                  ((byte_of(hd.y, hd.z, hd.w, j + 1) >> 6) << 4);
        }
        dA = d * (float)scA, dB = d * (float)scB;
        mA = h ? 0.0f : dm * (float)mnA, mB = h ? 0.0f : dm * (float)mnB;
        e0 = 256 * sb + 64 * c + 16 * h;
    }
    /* Σ w·x̃ over the unit for one token's quantised x (qx, ds of that token). */
    __device__ __forceinline__ float dot(const int8_t *__restrict__ qx,
                                         const float2 *__restrict__ ds) const {
        int4 xa = __ldg((const int4 *)(qx + e0)), xb = __ldg((const int4 *)(qx + e0 + 32));
        float2 da = __ldg(ds + (e0 >> 5)), db = __ldg(ds + (e0 >> 5) + 1);
        int sa = 0, sbv = 0;
        sa = __dp4a((int)(q[0] & 0x0f0f0f0fu), xa.x, sa);
        sa = __dp4a((int)(q[1] & 0x0f0f0f0fu), xa.y, sa);
        sa = __dp4a((int)(q[2] & 0x0f0f0f0fu), xa.z, sa);
        sa = __dp4a((int)(q[3] & 0x0f0f0f0fu), xa.w, sa);
        sbv = __dp4a((int)((q[0] >> 4) & 0x0f0f0f0fu), xb.x, sbv);
        sbv = __dp4a((int)((q[1] >> 4) & 0x0f0f0f0fu), xb.y, sbv);
        sbv = __dp4a((int)((q[2] >> 4) & 0x0f0f0f0fu), xb.z, sbv);
        sbv = __dp4a((int)((q[3] >> 4) & 0x0f0f0f0fu), xb.w, sbv);
        return dA * da.x * (float)sa + dB * db.x * (float)sbv - mA * da.y - mB * db.y;
    }
};

/* Q6_K (210 B / 256): unit u = superblock u/8, k = u%8: h = k/4 (half), lq = k%4 (l = 8lq ..
 * 8lq+7). Quarter qq of half h at l is element 128h + 32qq + l: low nibble of ql[64h+l]
 * (qq 0) / ql[64h+32+l] (qq 1), high nibbles for qq 2/3; its top two bits are bits 2qq..2qq+1
 * of qh[32h+l]; scale sc[8h + l/16 + 2qq]; value d·sc·(q − 32). */
template <> struct mvq_unit<SNUG_DTYPE_Q6_K> {
    int32_t q[4][2]; /* quarter, word: q − 32 as signed bytes */
    float s[4];      /* d·sc of each quarter */
    int e0;          /* 256·sb + 128h + 8lq */
    __device__ __forceinline__ void load(const uint8_t *row, int u) {
        int sb = u >> 3, k = u & 7, h = k >> 2, lq = k & 3;
        const uint8_t *b = row + (size_t)sb * 210;
        uint32_t A[2], B[2], H[2];
        ld_words(b + 64 * h + 8 * lq, 2, A);
        ld_words(b + 64 * h + 32 + 8 * lq, 2, B);
        ld_words(b + 128 + 32 * h + 8 * lq, 2, H);
#pragma unroll
        for (int i = 0; i < 2; i++) {
            uint32_t a = A[i], bb = B[i], hh = H[i];
            q[0][i] = (int)__vsub4((a & 0x0f0f0f0fu) | ((hh << 4) & 0x30303030u), 0x20202020u);
            q[1][i] = (int)__vsub4((bb & 0x0f0f0f0fu) | ((hh << 2) & 0x30303030u), 0x20202020u);
            q[2][i] = (int)__vsub4(((a >> 4) & 0x0f0f0f0fu) | (hh & 0x30303030u), 0x20202020u);
            q[3][i] =
                (int)__vsub4(((bb >> 4) & 0x0f0f0f0fu) | ((hh >> 2) & 0x30303030u), 0x20202020u);
        }
        float d = ld_f16(b + 208);
        const int8_t *sc = (const int8_t *)(b + 192 + 8 * h + (lq >> 1));
#pragma unroll
        for (int qq = 0; qq < 4; qq++) s[qq] = d * (float)sc[2 * qq];
        e0 = 256 * sb + 128 * h + 8 * lq;
    }
    __device__ __forceinline__ float dot(const int8_t *__restrict__ qx,
                                         const float2 *__restrict__ ds) const {
        float r = 0.0f;
#pragma unroll
        for (int qq = 0; qq < 4; qq++) {
            int2 xv = __ldg((const int2 *)(qx + e0 + 32 * qq));
            int sq = __dp4a(q[qq][0], xv.x, 0);
            sq = __dp4a(q[qq][1], xv.y, sq);
            r += s[qq] * __ldg(&ds[(e0 >> 5) + qq].x) * (float)sq;
        }
        return r;
    }
};

/* Q8_0 (34 B / 32): unit u = block u: d, then 32 int8. */
template <> struct mvq_unit<SNUG_DTYPE_Q8_0> {
    uint32_t q[8];
    float d;
    int e0;
    __device__ __forceinline__ void load(const uint8_t *row, int u) {
        const uint8_t *b = row + (size_t)u * 34;
        ld_words(b + 2, 8, q);
        d = ld_f16(b);
        e0 = 32 * u;
    }
    __device__ __forceinline__ float dot(const int8_t *__restrict__ qx,
                                         const float2 *__restrict__ ds) const {
        int4 xa = __ldg((const int4 *)(qx + e0)), xb = __ldg((const int4 *)(qx + e0 + 16));
        int s = __dp4a((int)q[0], xa.x, 0);
        s = __dp4a((int)q[1], xa.y, s);
        s = __dp4a((int)q[2], xa.z, s);
        s = __dp4a((int)q[3], xa.w, s);
        s = __dp4a((int)q[4], xb.x, s);
        s = __dp4a((int)q[5], xb.y, s);
        s = __dp4a((int)q[6], xb.z, s);
        s = __dp4a((int)q[7], xb.w, s);
        return d * __ldg(&ds[e0 >> 5].x) * (float)s;
    }
};

/* y[t][row] = Σ_e W[row][e] x̃[t][e], t < T <= NT. A block of blockDim.x (32..256) threads
 * owns MVQ_ROWS rows; thread i takes units i, i + blockDim.x, ... of each row (adjacent
 * threads read adjacent weight bytes), loads both rows' units before using them (bytes in
 * flight), and multiplies each with every token's x. Partial sums meet in shared memory. */
template <int TYPE, int NT>
__global__ void __launch_bounds__(MVQ_MAX_WARPS * 32)
    k_mvq(const uint8_t *__restrict__ w, size_t row_bytes, int n_in, int64_t n_out,
          const int8_t *__restrict__ qx, const float2 *__restrict__ ds, int T,
          float *__restrict__ y) {
    int64_t row0 = (int64_t)blockIdx.x * MVQ_ROWS;
    const uint8_t *wr[MVQ_ROWS];
#pragma unroll
    for (int r = 0; r < MVQ_ROWS; r++) /* rows past the end re-read the last row, unused */
        wr[r] = w + (size_t)(row0 + r < n_out ? row0 + r : n_out - 1) * row_bytes;
    float acc[NT][MVQ_ROWS];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int r = 0; r < MVQ_ROWS; r++) acc[t][r] = 0.0f;
    int nu = n_in >> 5, nb = n_in >> 5;
    for (int u = threadIdx.x; u < nu; u += blockDim.x) {
        mvq_unit<TYPE> wu[MVQ_ROWS];
#pragma unroll
        for (int r = 0; r < MVQ_ROWS; r++) wu[r].load(wr[r], u);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (NT > 1 && t >= T) break;
#pragma unroll
            for (int r = 0; r < MVQ_ROWS; r++)
                acc[t][r] += wu[r].dot(qx + (size_t)t * n_in, ds + (size_t)t * nb);
        }
    }
    __shared__ float part[MVQ_MAX_WARPS][NT][MVQ_ROWS];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int r = 0; r < MVQ_ROWS; r++) {
            float s = warp_sum(acc[t][r]);
            if (lane == 0) part[wid][t][r] = s;
        }
    __syncthreads();
    if (threadIdx.x < NT * MVQ_ROWS) {
        int t = threadIdx.x / MVQ_ROWS, r = threadIdx.x % MVQ_ROWS;
        if (t < T && row0 + r < n_out) {
            float s = 0.0f;
            for (int k = 0; k < nw; k++) s += part[k][t][r];
            y[(size_t)t * n_out + row0 + r] = s;
        }
    }
}

static size_t al256(size_t x) {
    return (x + 255) & ~(size_t)255;
}

extern "C" bool snug_cu_mvq_supported(uint32_t type) {
    return type == SNUG_DTYPE_Q4_K || type == SNUG_DTYPE_Q6_K || type == SNUG_DTYPE_Q8_0;
}

extern "C" bool snug_cuda_matvec_int8(uint32_t type) {
    return snug_cu_mvq_supported(type);
}

extern "C" size_t snug_cu_mvq_work_bytes(int64_t n_in, int64_t T) {
    return al256((size_t)(T * n_in)) + al256((size_t)(T * (n_in / 32)) * sizeof(float2)) + 256;
}

/* Warps per block for a row of nu units: the count in 4..8 that leaves the fewest idle thread
 * slots in the last pass over the row (5120 → 160 units → 5 warps, 17408 → 544 → 6). */
static int mvq_warps(int nu) {
    int best = 4, waste_best = 1 << 30;
    for (int nw = 8; nw >= 4; nw--) {
        int per = 32 * nw, waste = (nu + per - 1) / per * per - nu;
        if (waste < waste_best) best = nw, waste_best = waste;
    }
    return best;
}

template <int TYPE>
static void mvq_launch(unsigned blocks, int threads, cudaStream_t s, const uint8_t *w, size_t rb,
                       int n_in, int64_t n_out, const int8_t *qx, const float2 *ds, int T,
                       float *y) {
    if (T == 1)
        k_mvq<TYPE, 1><<<blocks, threads, 0, s>>>(w, rb, n_in, n_out, qx, ds, 1, y);
    else if (T == 2)
        k_mvq<TYPE, 2><<<blocks, threads, 0, s>>>(w, rb, n_in, n_out, qx, ds, 2, y);
    else if (T <= 4)
        k_mvq<TYPE, 4><<<blocks, threads, 0, s>>>(w, rb, n_in, n_out, qx, ds, T, y);
    else
        k_mvq<TYPE, 8><<<blocks, threads, 0, s>>>(w, rb, n_in, n_out, qx, ds, T, y);
}

/* x (T × n_in f32, device) to int8 blocks in `work`, then the dp4a matvec. The caller has
 * checked the type (snug_cu_mvq_supported), n_in % 256 (K types) or % 32, 1 <= T <= 8 and
 * the work size (snug_cu_mvq_work_bytes). */
extern "C" int snug_cu_mvq(struct snug_cuda *cu, uint32_t type, const void *w, int64_t n_in,
                           int64_t n_out, const float *x, int T, float *y, void *work,
                           struct snug_err *err) {
    if (n_in > INT32_MAX / 8)
        return snug_err_set(err, SNUG_ERR_INVALID, "cuda matvec: n_in %lld too large",
                            (long long)n_in);
    cudaStream_t s = SNUG_CU_STREAM(cu);
    uint8_t *wk = (uint8_t *)(((uintptr_t)work + 255) & ~(uintptr_t)255);
    int8_t *qx = (int8_t *)wk;
    float2 *ds = (float2 *)(wk + al256((size_t)(T * n_in)));
    int64_t nblk = (int64_t)T * (n_in / 32);
    k_quant_x8<<<(unsigned)((nblk + 7) / 8), 256, 0, s>>>(x, nblk, qx, ds);
    int st = snug_cu_launched(err, "quant_x8");
    if (st) return st;
    size_t rb = snug_dtype_row_bytes(type, (uint64_t)n_in);
    int nu = (int)(n_in / 32), threads = 32 * mvq_warps(nu);
    unsigned blocks = (unsigned)((n_out + MVQ_ROWS - 1) / MVQ_ROWS);
    const uint8_t *wb = (const uint8_t *)w;
    switch (type) {
    case SNUG_DTYPE_Q4_K:
        mvq_launch<SNUG_DTYPE_Q4_K>(blocks, threads, s, wb, rb, (int)n_in, n_out, qx, ds, T, y);
        break;
    case SNUG_DTYPE_Q6_K:
        mvq_launch<SNUG_DTYPE_Q6_K>(blocks, threads, s, wb, rb, (int)n_in, n_out, qx, ds, T, y);
        break;
    default:
        mvq_launch<SNUG_DTYPE_Q8_0>(blocks, threads, s, wb, rb, (int)n_in, n_out, qx, ds, T, y);
        break;
    }
    return snug_cu_launched(err, "matvec_q8");
}
