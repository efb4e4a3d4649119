/* cuda_matvec.cu — the decode matrix-vector product (T = 1..8 tokens) with int8 activations:
 * x is first quantised to int8 in blocks of 32 (one f32 scale d and the block sum d·Σq per
 * block, in the op's `work`), then every weight type here is multiplied with dp4a (four
 * int8 products per instruction) straight from its packed bytes: one thread owns 32 or 64
 * weights of a row (one "unit") and reads them with 16-byte (Q4_K), 8-byte (IQ4_XS) or 4-byte
 * funnel-shifted loads (the 210-/34-byte blocks of Q6_K / Q8_0 are only 2-byte aligned); with
 * 2..8 tokens, optionally 2 or 4 lanes share a unit and split the tokens (snug_cuda_matvec_lanes).
 * Owns: k_quant_x8, the k_mvq kernels for q4_K, q6_K, q8_0 and iq4_xs, and the MoE forms of
 * the first three (one launch over the tiles of slots grouped by expert that moe_route wrote
 * on the device): k_mvq_moe1 (dp4a, one slot per tile: decode), k_mvq_moe (dp4a, tiles of
 * several slots: q8_0) and
 * k_mmq_moe<q4_K / q6_K> (int8 tensor cores, tiles of several slots).
 * Invariant: one pass over W; no allocation; results equal Σ w·x̃ with x̃ the int8-rounded x
 * (the CPU op's rounding too).
 * Read next: cuda_common.cuh (block layouts), cuda_matmul.cu (the dispatch and the f32 path),
 * docs/perf/cuda-kernels.md (versions and measurements). */
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"

#include <stdlib.h>

#define MVQ_MAX_WARPS 8
#define MVQ_ROWS      4 /* rows per block (T <= 4; 2 above): each x load serves all */

/* One warp per 32-element block of x (blocks run across the T rows, n_in % 32 == 0):
 * d = max|x| / 127, q = round(x / d), ds = (d, d · Σq). */
__global__ void k_quant_x8(const float *__restrict__ x, int64_t nblk, int8_t *__restrict__ qx,
                           float2 *__restrict__ ds) {
    int64_t b = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (b >= nblk) return; /* whole warps leave together */
    int lane = threadIdx.x & 31;
    warp_round_q8(x[b * 32 + lane], qx + b * 32 + lane, ds + b);
}

/* n (<= 8) little-endian words starting at a 2-byte aligned address p (the words at p & ~3 and
 * the next n, funnel-shifted). Reads nothing past p + 4n: when p is 2 bytes off a word, the last
 * word is read as its low 16 bits (a Q8_0 block that ends its allocation stays inside it). */
__device__ __forceinline__ void ld_words(const uint8_t *p, int n, uint32_t *o) {
    const uint32_t *a = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
    uint32_t sh = (uint32_t)((uintptr_t)p & 3) * 8; /* 0 or 16 */
    uint32_t w[9];
#pragma unroll
    for (int i = 0; i <= 8; i++)
        if (i <= n)
            w[i] = i < n ? __ldg(a + i)
                   : sh  ? (uint32_t)__ldg((const unsigned short *)(a + i))
                         : 0u;
#pragma unroll
    for (int i = 0; i < 8; i++)
        if (i < n) o[i] = __funnelshift_r(w[i], w[i + 1], sh);
}

/* A unit's weights, loaded and with their scales decoded, ready for any number of x rows.
 * Unit u of a row covers elements EPU·u .. EPU·u + EPU − 1 (in the type's own element order
 * below). */
template <int TYPE> struct mvq_unit;

/* d·sc and dmin·m of the sub-blocks 2c and 2c + 1 of a Q4_K block from its first 16 bytes hd
 * (f16 d, f16 dmin, the 12-byte scale field): the two 6-bit pairs are adjacent bytes, decoded
 * as 16-bit pairs: c < 2: bytes 2c.. of s[0..3] (scales) and s[4..7] (mins); c >= 2: low
 * nibbles of s[8..11] (scale) / high nibbles (min), top bits from bits 6-7 of s[0..3] /
 * s[4..7]. */
__device__ __forceinline__ void q4k_pair(uint4 hd, int c, float *dA, float *dB, float *mA,
                                         float *mB) {
    float d = __half2float(__ushort_as_half((unsigned short)(hd.x & 0xffff)));
    float dm = __half2float(__ushort_as_half((unsigned short)(hd.x >> 16)));
    uint32_t sh = 16u * (uint32_t)(c & 1);
    uint32_t a = hd.y >> sh, m = hd.z >> sh, w = hd.w >> sh, sc2, mn2;
    if (c < 2) {
        sc2 = a & 0x3f3fu;
        mn2 = m & 0x3f3fu;
    } else {
        sc2 = (w & 0x0f0fu) | ((a >> 2) & 0x3030u);
        mn2 = ((w >> 4) & 0x0f0fu) | ((m >> 2) & 0x3030u);
    }
    *dA = d * (float)(sc2 & 0xffu), *dB = d * (float)((sc2 >> 8) & 0xffu);
    *mA = dm * (float)(mn2 & 0xffu), *mB = dm * (float)((mn2 >> 8) & 0xffu);
}

/* Q4_K (144 B / 256): unit u = superblock u/4, c = u%4: the 32-byte qs group c, whose low
 * nibbles are elements 64c+i (sub-block 2c) and high nibbles 64c+32+i (sub-block 2c+1),
 * i < 32: two 16-byte loads, one header load, one scale decode per 64 weights (v3 took 32
 * weights per thread and decoded the scales byte by byte: 44% of copy); the scales by
 * q4k_pair. */
template <> struct mvq_unit<SNUG_DTYPE_Q4_K> {
    static constexpr int EPU = 64;
    uint32_t q[8];
    float dA, dB, mA, mB; /* d·sc and dmin·m of sub-blocks 2c and 2c+1 */
    int e0;               /* 256·sb + 64c */
    __device__ __forceinline__ void load(const uint8_t *row, int u) {
        int sb = u >> 2, c = u & 3;
        const uint8_t *b = row + (size_t)sb * 144;
        uint4 hd = __ldg((const uint4 *)b);
        uint4 q0 = __ldg((const uint4 *)(b + 16 + 32 * c));
        uint4 q1 = __ldg((const uint4 *)(b + 32 + 32 * c));
        q[0] = q0.x, q[1] = q0.y, q[2] = q0.z, q[3] = q0.w;
        q[4] = q1.x, q[5] = q1.y, q[6] = q1.z, q[7] = q1.w;
        q4k_pair(hd, c, &dA, &dB, &mA, &mB);
        e0 = 256 * sb + 64 * c;
    }
    /* One token's quantised x over the unit's elements (loaded once, used by every row). */
    struct xs {
        int4 a0, a1, b0, b1;
        float2 da, db;
    };
    __device__ static __forceinline__ void load_x(const int8_t *__restrict__ qx,
                                                  const float2 *__restrict__ ds, int e0, xs &x) {
        const int4 *xp = (const int4 *)(qx + e0);
        x.a0 = __ldg(xp), x.a1 = __ldg(xp + 1), x.b0 = __ldg(xp + 2), x.b1 = __ldg(xp + 3);
        x.da = __ldg(ds + (e0 >> 5)), x.db = __ldg(ds + (e0 >> 5) + 1);
    }
    /* Σ w·x̃ over the unit for one token's x. */
    __device__ __forceinline__ float dot(const xs &x) const {
        const int xa[8] = {x.a0.x, x.a0.y, x.a0.z, x.a0.w, x.a1.x, x.a1.y, x.a1.z, x.a1.w};
        const int xb[8] = {x.b0.x, x.b0.y, x.b0.z, x.b0.w, x.b1.x, x.b1.y, x.b1.z, x.b1.w};
        int sa = 0, sbv = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            sa = __dp4a((int)(q[i] & 0x0f0f0f0fu), xa[i], sa);
            sbv = __dp4a((int)((q[i] >> 4) & 0x0f0f0f0fu), xb[i], sbv);
        }
        return dA * x.da.x * (float)sa + dB * x.db.x * (float)sbv - mA * x.da.y - mB * x.db.y;
    }
};

/* Q6_K (210 B / 256): unit u = superblock u/8, k = u%8: h = k/4 (half), lq = k%4 (l = 8lq ..
 * 8lq+7). Quarter qq of half h at l is element 128h + 32qq + l: low nibble of ql[64h+l]
 * (qq 0) / ql[64h+32+l] (qq 1), high nibbles for qq 2/3; its top two bits are bits 2qq..2qq+1
 * of qh[32h+l]; scale sc[8h + l/16 + 2qq]; value d·sc·(q − 32). */
template <> struct mvq_unit<SNUG_DTYPE_Q6_K> {
    static constexpr int EPU = 32;
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
    struct xs {
        int2 v[4];
        float d[4];
    };
    __device__ static __forceinline__ void load_x(const int8_t *__restrict__ qx,
                                                  const float2 *__restrict__ ds, int e0, xs &x) {
#pragma unroll
        for (int qq = 0; qq < 4; qq++) {
            x.v[qq] = __ldg((const int2 *)(qx + e0 + 32 * qq));
            x.d[qq] = __ldg(&ds[(e0 >> 5) + qq].x);
        }
    }
    __device__ __forceinline__ float dot(const xs &x) const {
        float r = 0.0f;
#pragma unroll
        for (int qq = 0; qq < 4; qq++) {
            int sq = __dp4a(q[qq][0], x.v[qq].x, 0);
            sq = __dp4a(q[qq][1], x.v[qq].y, sq);
            r += s[qq] * x.d[qq] * (float)sq;
        }
        return r;
    }
};

/* Q8_0 (34 B / 32): unit u = block u: d, then 32 int8. */
template <> struct mvq_unit<SNUG_DTYPE_Q8_0> {
    static constexpr int EPU = 32;
    uint32_t q[8];
    float d;
    int e0;
    __device__ __forceinline__ void load(const uint8_t *row, int u) {
        const uint8_t *b = row + (size_t)u * 34;
        ld_words(b + 2, 8, q);
        d = ld_f16(b);
        e0 = 32 * u;
    }
    struct xs {
        int4 a, b;
        float d;
    };
    __device__ static __forceinline__ void load_x(const int8_t *__restrict__ qx,
                                                  const float2 *__restrict__ ds, int e0, xs &x) {
        x.a = __ldg((const int4 *)(qx + e0)), x.b = __ldg((const int4 *)(qx + e0 + 16));
        x.d = __ldg(&ds[e0 >> 5].x);
    }
    __device__ __forceinline__ float dot(const xs &x) const {
        const int4 xa = x.a, xb = x.b;
        int s = __dp4a((int)q[0], xa.x, 0);
        s = __dp4a((int)q[1], xa.y, s);
        s = __dp4a((int)q[2], xa.z, s);
        s = __dp4a((int)q[3], xa.w, s);
        s = __dp4a((int)q[4], xb.x, s);
        s = __dp4a((int)q[5], xb.y, s);
        s = __dp4a((int)q[6], xb.z, s);
        s = __dp4a((int)q[7], xb.w, s);
        return d * x.d * (float)s;
    }
};

/* The 16 IQ4_NL / IQ4_XS levels as four words (levels 4i .. 4i + 3 in word i), for iq4_lut4. */
static __constant__ __align__(4) int8_t k_iq4_lv[16] = SNUG_IQ4NL_VALUES;

/* Four nibble indices (one per byte, 0x0N0N0N0N) to their four int8 levels: __byte_perm picks
 * from levels 0..7 and from 8..15 by the low three bits, the fourth bit chooses per byte. */
__device__ __forceinline__ int iq4_lut4(uint32_t n, const uint32_t *lv) {
    uint32_t sel = (n & 0x7u) | ((n >> 4) & 0x70u) | ((n >> 8) & 0x700u) | ((n >> 12) & 0x7000u);
    uint32_t lo = __byte_perm(lv[0], lv[1], sel), hi = __byte_perm(lv[2], lv[3], sel);
    uint32_t m = ((n >> 3) & 0x01010101u) * 0xffu;
    return (int)((lo & ~m) | (hi & m));
}

/* IQ4_XS (136 B / 256): f16 d | u16 scales_h | scales_l[4] | qs[128]. Unit u = superblock u/4,
 * c = u%4: sub-blocks 2c and 2c+1, the 32 bytes qs[32c ..]; in each 16-byte half the low
 * nibbles are elements 0..15 of its sub-block and the high nibbles 16..31; a value is the
 * level of its nibble (int8), the sub-block's scale d·(ls − 32) with ls = 4 bits of
 * scales_l[c] (low nibble: 2c, high: 2c+1) | 2 bits of scales_h (bits 2j, 2j+1) << 4. The
 * levels are looked up once per load (iq4_lut4) and serve every token. */
template <> struct mvq_unit<SNUG_DTYPE_IQ4_XS> {
    static constexpr int EPU = 64;
    int32_t q[2][8]; /* sub-block, word: words 0..3 elements 0..15, 4..7 elements 16..31 */
    float dA, dB;
    int e0; /* 256·sb + 64c */
    __device__ __forceinline__ void load(const uint8_t *row, int u) {
        int sb = u >> 2, c = u & 3;
        const uint8_t *b = row + (size_t)sb * 136; /* rows are 8-byte aligned (136 = 8·17) */
        uint2 hd = __ldg((const uint2 *)b);
        const uint2 *qp = (const uint2 *)(b + 8 + 32 * c);
        uint2 a0 = __ldg(qp), a1 = __ldg(qp + 1), b0 = __ldg(qp + 2), b1 = __ldg(qp + 3);
        const uint32_t wa[4] = {a0.x, a0.y, a1.x, a1.y}, wb[4] = {b0.x, b0.y, b1.x, b1.y};
        const uint32_t *lvp = (const uint32_t *)k_iq4_lv;
        const uint32_t lv[4] = {lvp[0], lvp[1], lvp[2], lvp[3]};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[0][i] = iq4_lut4(wa[i] & 0x0f0f0f0fu, lv);
            q[0][4 + i] = iq4_lut4((wa[i] >> 4) & 0x0f0f0f0fu, lv);
            q[1][i] = iq4_lut4(wb[i] & 0x0f0f0f0fu, lv);
            q[1][4 + i] = iq4_lut4((wb[i] >> 4) & 0x0f0f0f0fu, lv);
        }
        float d = __half2float(__ushort_as_half((unsigned short)(hd.x & 0xffffu)));
        uint32_t sh = hd.x >> 16, sl = (hd.y >> (8 * c)) & 0xffu;
        int lsA = (int)((sl & 0xfu) | (((sh >> (4 * c)) & 3u) << 4));
        int lsB = (int)((sl >> 4) | (((sh >> (4 * c + 2)) & 3u) << 4));
        dA = d * (float)(lsA - 32), dB = d * (float)(lsB - 32);
        e0 = 256 * sb + 64 * c;
    }
    using xs = mvq_unit<SNUG_DTYPE_Q4_K>::xs; /* the same 64 elements' x */
    __device__ static __forceinline__ void load_x(const int8_t *__restrict__ qx,
                                                  const float2 *__restrict__ ds, int e0, xs &x) {
        mvq_unit<SNUG_DTYPE_Q4_K>::load_x(qx, ds, e0, x);
    }
    __device__ __forceinline__ float dot(const xs &x) const {
        const int xv[16] = {x.a0.x, x.a0.y, x.a0.z, x.a0.w, x.a1.x, x.a1.y, x.a1.z, x.a1.w,
                            x.b0.x, x.b0.y, x.b0.z, x.b0.w, x.b1.x, x.b1.y, x.b1.z, x.b1.w};
        int sa = 0, sbv = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            sa = __dp4a(q[0][i], xv[i], sa);
            sbv = __dp4a(q[1][i], xv[8 + i], sbv);
        }
        return dA * x.da.x * (float)sa + dB * x.db.x * (float)sbv;
    }
};

/* y[t][row] = Σ_e W[row][e] x̃[t][e], t < T <= NT, for the R rows from row0. A block of
 * blockDim.x (32..256) threads owns R rows; L = 1: thread i takes units i, i + blockDim.x, ...
 * of each row (adjacent threads read adjacent weight bytes), loads all R rows' units before
 * using them (bytes in flight), then per token loads that token's x over the unit once and
 * multiplies it with every row's unit. L = 2 or 4 (2..8 tokens): L adjacent lanes take the same
 * unit (one load instruction: the same addresses, no extra traffic) and split the tokens, lane
 * sub taking tokens sub, sub + L, ..., so a thread keeps the x and sums of NT / L tokens instead
 * of NT (the registers of a T = 1 thread at L = NT). Partial sums meet in shared memory. */
template <int TYPE, int NT, int R, int L>
__device__ __forceinline__ void mvq_rows(const uint8_t *__restrict__ w, size_t row_bytes, int n_in,
                                         int64_t n_out, const int8_t *__restrict__ qx,
                                         const float2 *__restrict__ ds, int T,
                                         float *__restrict__ y, int64_t row0) {
    static_assert(NT % L == 0, "tokens split evenly over a unit's lanes");
    constexpr int TPL = NT / L; /* tokens per lane */
    const uint8_t *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) /* rows past the end re-read the last row, unused */
        wr[r] = w + (size_t)(row0 + r < n_out ? row0 + r : n_out - 1) * row_bytes;
    float acc[TPL][R];
#pragma unroll
    for (int k = 0; k < TPL; k++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[k][r] = 0.0f;
    int nu = n_in / mvq_unit<TYPE>::EPU, nb = n_in >> 5;
    int sub = L > 1 ? (int)(threadIdx.x % L) : 0;
    for (int u = threadIdx.x / L; u < nu; u += blockDim.x / L) {
        mvq_unit<TYPE> wu[R];
#pragma unroll
        for (int r = 0; r < R; r++) wu[r].load(wr[r], u);
#pragma unroll
        for (int k = 0; k < TPL; k++) {
            int t = sub + k * L;
            if (NT > 1 && t >= T) break;
            typename mvq_unit<TYPE>::xs xt;
            mvq_unit<TYPE>::load_x(qx + (size_t)t * n_in, ds + (size_t)t * nb, wu[0].e0, xt);
#pragma unroll
            for (int r = 0; r < R; r++) acc[k][r] += wu[r].dot(xt);
        }
    }
    __shared__ float part[MVQ_MAX_WARPS][NT][R];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int k = 0; k < TPL; k++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            float s = acc[k][r];
            if (L == 1) {
                s = warp_sum(s);
            } else { /* over the lanes of the same token */
#pragma unroll
                for (int o = 16; o >= L; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            }
            if (lane < L) part[wid][sub + k * L][r] = s;
        }
    __syncthreads();
    if (threadIdx.x < NT * R) {
        int t = threadIdx.x / R, r = threadIdx.x % R;
        if (t < T && row0 + r < n_out) {
            float s = 0.0f;
            for (int k = 0; k < nw; k++) s += part[k][t][r];
            y[(size_t)t * n_out + row0 + r] = s;
        }
    }
}

/* One matrix (blocks 0 .. nb1-1 over w's n_out rows), or two of one type and n_in over the same
 * x in one launch (blocks from nb1 over w2's n_out2 rows into y2): each block's rows are the
 * single-matrix launch's, so the results are its bits. */
template <int TYPE, int NT, int R, int L = 1>
__global__ void __launch_bounds__(MVQ_MAX_WARPS * 32)
    k_mvq(const uint8_t *__restrict__ w, const uint8_t *__restrict__ w2, unsigned nb1,
          size_t row_bytes, int n_in, int64_t n_out, int64_t n_out2, const int8_t *__restrict__ qx,
          const float2 *__restrict__ ds, int T, float *__restrict__ y, float *__restrict__ y2) {
    if (blockIdx.x < nb1)
        mvq_rows<TYPE, NT, R, L>(w, row_bytes, n_in, n_out, qx, ds, T, y, (int64_t)blockIdx.x * R);
    else
        mvq_rows<TYPE, NT, R, L>(w2, row_bytes, n_in, n_out2, qx, ds, T, y2,
                                 (int64_t)(blockIdx.x - nb1) * R);
}

/* The MoE expert products: blockIdx.y is a tile of the table moe_route wrote (expert e, first
 * slot s0, n <= NT slots of that expert); the tile's rows of x and y start at slot s0 and its
 * weights at w + e·expert_bytes. Blocks past the table's length leave at once (the grid is
 * sized by the table's bound, the table's length is only known on the device). */
/* Tile blockIdx.y of the table moe_route wrote (expert, first slot, slots); false past its
 * length (the grid is sized by the table's bound). */
__device__ __forceinline__ bool moe_tile(const int32_t *__restrict__ tiles, int *e, int *s0,
                                         int *n) {
    if ((int)blockIdx.y >= __ldg(tiles)) return false;
    const int32_t *tp = tiles + 1 + 3 * blockIdx.y;
    *e = __ldg(tp), *s0 = __ldg(tp + 1), *n = __ldg(tp + 2);
    return true;
}

template <int TYPE, int NT, int R>
__global__ void __launch_bounds__(MVQ_MAX_WARPS * 32)
    k_mvq_moe(const uint8_t *__restrict__ w, uint64_t expert_bytes, size_t row_bytes, int n_in,
              int64_t n_out, const int8_t *__restrict__ qx, const float2 *__restrict__ ds,
              const int32_t *__restrict__ tiles, float *__restrict__ y, int xrow) {
    int e, s0, n;
    if (!moe_tile(tiles, &e, &s0, &n)) return;
    int nb = n_in >> 5;
    size_t xs = (size_t)s0 * xrow; /* xrow 0: every slot reads the one token's row */
    mvq_rows<TYPE, NT, R, 1>(w + (uint64_t)e * expert_bytes, row_bytes, n_in, n_out, qx + xs * n_in,
                             ds + xs * nb, n, y + (size_t)s0 * n_out, (int64_t)blockIdx.x * R);
}

/* One token per tile (decode: the chosen experts' rows times one x): a group of L lanes (8, 16
 * or 32: the row's unit count rounded up to a power of two, at most 32) owns R rows, lane u
 * takes units u, u + L, ... of each, and the L partial sums meet by shuffles. No block barrier,
 * and short rows (the 35B's down product: 512 inputs, 8 or 16 units) keep every lane busy where
 * the block-per-4-rows kernel left 48 to 56 of its 64 threads idle (6.4-7.9 µs against
 * 11.0-13.5 µs on an H100, docs/perf/cuda-kernels.md). A block of 128 threads holds 128 / L
 * groups. */
#define MOE1_THREADS 128
template <int TYPE, int L, int R>
__global__ void __launch_bounds__(MOE1_THREADS)
    k_mvq_moe1(const uint8_t *__restrict__ w, uint64_t expert_bytes, size_t row_bytes, int n_in,
               int64_t n_out, const int8_t *__restrict__ qx, const float2 *__restrict__ ds,
               const int32_t *__restrict__ tiles, float *__restrict__ y, int xrow) {
    int e, s0, n;
    if (!moe_tile(tiles, &e, &s0, &n)) return;
    int g = threadIdx.x / L, u0 = threadIdx.x % L;
    int64_t row0 = ((int64_t)blockIdx.x * (MOE1_THREADS / L) + g) * R;
    /* (groups past the last row compute clamped rows and store nothing: the warp's shuffles
     * below need all its lanes) */
    const uint8_t *we = w + (uint64_t)e * expert_bytes, *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) /* rows past the end re-read the last row, unused */
        wr[r] = we + (size_t)(row0 + r < n_out ? row0 + r : n_out - 1) * row_bytes;
    const int8_t *xq = qx + (size_t)s0 * xrow * n_in; /* xrow 0: the one token's row */
    const float2 *xd = ds + (size_t)s0 * xrow * (n_in >> 5);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.0f;
    int nu = n_in / mvq_unit<TYPE>::EPU;
    for (int u = u0; u < nu; u += L) {
        mvq_unit<TYPE> wu[R];
#pragma unroll
        for (int r = 0; r < R; r++) wu[r].load(wr[r], u);
        typename mvq_unit<TYPE>::xs xt;
        mvq_unit<TYPE>::load_x(xq, xd, wu[0].e0, xt);
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] += wu[r].dot(xt);
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int o = L / 2; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o, L);
    if (u0 == 0)
#pragma unroll
        for (int r = 0; r < R; r++)
            if (row0 + r < n_out) y[(size_t)s0 * n_out + row0 + r] = acc[r];
}

static size_t al256(size_t x) {
    return (x + 255) & ~(size_t)255;
}

extern "C" bool snug_cu_mvq_supported(uint32_t type) {
    return type == SNUG_DTYPE_Q4_K || type == SNUG_DTYPE_Q6_K || type == SNUG_DTYPE_Q8_0 ||
           type == SNUG_DTYPE_IQ4_XS;
}

extern "C" bool snug_cuda_matvec_int8(uint32_t type) {
    return snug_cu_mvq_supported(type);
}

extern "C" size_t snug_cu_mvq_work_bytes(int64_t n_in, int64_t T) {
    return al256((size_t)(T * n_in)) + al256((size_t)(T * (n_in / 32)) * sizeof(float2)) + 256;
}

extern "C" void snug_cu_mvq_x(void *work, int64_t n_in, int64_t T, int8_t **qx, float2 **ds) {
    uint8_t *wk = (uint8_t *)(((uintptr_t)work + 255) & ~(uintptr_t)255);
    *qx = (int8_t *)wk;
    *ds = (float2 *)(wk + al256((size_t)(T * n_in)));
}

/* Warps per block for a row of nu units: the count in 2..8 that leaves the fewest idle thread
 * slots in the last pass over the row (q6_K 5120 → 160 units → 5 warps; q4_K 5120 → 80
 * units → 3 warps, 17408 → 272 → 3). */
static int mvq_warps(int nu) {
    int best = 4, waste_best = 1 << 30;
    for (int nw = 8; nw >= 2; nw--) {
        int per = 32 * nw, waste = (nu + per - 1) / per * per - nu;
        if (waste < waste_best) best = nw, waste_best = waste;
    }
    return best;
}

/* The dp4a products of w (and w2, when not NULL: the pair's second matrix). */
struct mvq_mats {
    const uint8_t *w, *w2;
    int64_t n_out, n_out2;
    float *y, *y2;
};

/* Lanes per unit for 2..8 tokens (mvq_rows' L; 1 = one lane per unit, the default): 2 or 4
 * for the Q4_K and Q6_K products with 2 or 4 rows per block (snug_cuda_matvec_lanes, env
 * SNUG_MVQ_LANES at the first call; docs/perf/cuda-kernels.md). */
static int g_mvq_lanes; /* 0: not set yet (env SNUG_MVQ_LANES at the first call) */
extern "C" void snug_cuda_matvec_lanes(int lanes) {
    g_mvq_lanes = lanes == 2 || lanes == 4 ? lanes : 1;
}

template <int TYPE, int R>
static void mvq_launch_r(int threads, cudaStream_t s, const mvq_mats &m, size_t rb, int n_in,
                         const int8_t *qx, const float2 *ds, int T) {
    unsigned nb1 = (unsigned)((m.n_out + R - 1) / R);
    unsigned blocks = nb1 + (m.w2 ? (unsigned)((m.n_out2 + R - 1) / R) : 0u);
#define MVQ_GO(NT, TT, LL)                                                                         \
    k_mvq<TYPE, NT, R, LL><<<blocks, threads, 0, s>>>(m.w, m.w2, nb1, rb, n_in, m.n_out, m.n_out2, \
                                                      qx, ds, TT, m.y, m.y2)
    constexpr bool lanes_ok = (TYPE == SNUG_DTYPE_Q4_K || TYPE == SNUG_DTYPE_Q6_K) && R >= 2;
    int L = lanes_ok && T > 1 ? (T == 2 && g_mvq_lanes > 2 ? 2 : g_mvq_lanes) : 1;
    if (L > 1) /* L lanes per unit: the threads for nu · L unit-lanes */
        threads = 32 * mvq_warps(n_in / mvq_unit<TYPE>::EPU * L);
    /* (the lanes forms exist only where lanes_ok; elsewhere L is 1 and L2 / L4 name 1 too) */
    constexpr int L2 = lanes_ok ? 2 : 1, L4 = lanes_ok ? 4 : 1;
#define MVQ_GO_L(NT, TT)                                                                           \
    do {                                                                                           \
        if (L == 4)                                                                                \
            MVQ_GO(NT, TT, L4);                                                                    \
        else if (L == 2)                                                                           \
            MVQ_GO(NT, TT, L2);                                                                    \
        else                                                                                       \
            MVQ_GO(NT, TT, 1);                                                                     \
    } while (0)
    if (T == 1)
        MVQ_GO(1, 1, 1);
    else if (T == 2 && L == 2)
        MVQ_GO(2, 2, L2);
    else if (T == 2)
        MVQ_GO(2, 2, 1);
    else if (T <= 4)
        MVQ_GO_L(4, T);
    else
        MVQ_GO_L(8, T);
#undef MVQ_GO_L
#undef MVQ_GO
}

/* Rows per block: 1, 2 or 4 (snug_cuda_matvec_tune; default MVQ_ROWS, or env SNUG_MVQ_ROWS
 * read at the first call). Four rows cost registers; T > 4 always uses at most 2. H200,
 * 27B shapes, T = 1: 4 rows 57-62% of copy for q4_K, 2 rows 56-57%, 1 row 45-47% (8 rows and
 * a 64-weight Q6_K unit were tried: no gain, docs/perf/cuda-kernels.md). */
static int g_mvq_rows;
extern "C" void snug_cuda_matvec_tune(int rows) {
    g_mvq_rows = rows == 1 || rows == 2 || rows == 4 ? rows : MVQ_ROWS;
}

template <int TYPE>
static void mvq_launch(int threads, cudaStream_t s, const mvq_mats &m, size_t rb, int n_in,
                       const int8_t *qx, const float2 *ds, int T) {
    int r = g_mvq_rows;
    if (r == 4 && T > 4) r = 2;
    if (r == 1)
        mvq_launch_r<TYPE, 1>(threads, s, m, rb, n_in, qx, ds, T);
    else if (r == 4)
        mvq_launch_r<TYPE, 4>(threads, s, m, rb, n_in, qx, ds, T);
    else
        mvq_launch_r<TYPE, 2>(threads, s, m, rb, n_in, qx, ds, T);
}

static void mmv_launch(uint32_t type, cudaStream_t s, const uint8_t *w, size_t rb, int n_in,
                       int64_t n_out, const int8_t *qx, const float2 *ds, int T, float *y);

/* Which Q4_K / Q6_K products take the tensor-core kernel k_mmv instead of the dp4a one, a mask:
 * 1 Q4_K with 2..8 tokens, 2 Q4_K with one, 4 Q6_K with 2..8, 8 Q6_K with one; 16 on every
 * shape, else only where n_in <= 2·n_out (snug_cuda_matvec_mma; env SNUG_MVQ_MMA at the first
 * call). The default is what measured faster (H100, 27B shapes, docs/perf/cuda-kernels.md):
 * Q4_K at T = 4 0.88-0.94x the dp4a kernel's time where n_in <= 2·n_out, 1.09x on 17408 ->
 * 5120 (a block owns 16 rows: 320 blocks for 5120 outputs), at T = 8 0.53-0.68x, at T = 1
 * 1.26-1.47x; Q6_K 1.07-1.17x at T = 4. */
#define MVQ_MMA_DEFAULT 1
#define MVQ_MMA_ANY     16
static int g_mvq_mma = -1;
extern "C" void snug_cuda_matvec_mma(int mask) {
    g_mvq_mma = mask >= 0 && mask <= 31 ? mask : -1;
}

/* x (T × n_in f32, device) to int8 blocks in `work`, then the dp4a matvec of w, and of w2 too
 * when not NULL (a second matrix of the same type and n_in: one launch for both where both take
 * the dp4a kernel). The caller has checked the type (snug_cu_mvq_supported), n_in % 256 (K
 * types) or % 32, 1 <= T <= 8 and the work size (snug_cu_mvq_work_bytes). */
extern "C" int snug_cu_mvq2(struct snug_cuda *cu, uint32_t type, const void *w, int64_t n_out,
                            const void *w2, int64_t n_out2, int64_t n_in, const float *x, int T,
                            float *y, float *y2, void *work, struct snug_err *err) {
    if (n_in > INT32_MAX / 8)
        return snug_err_set(err, SNUG_ERR_INVALID, "cuda matvec: n_in %lld too large",
                            (long long)n_in);
    cudaStream_t s = SNUG_CU_STREAM(cu);
    int8_t *qx;
    float2 *ds;
    snug_cu_mvq_x(work, n_in, T, &qx, &ds);
    int64_t nblk = (int64_t)T * (n_in / 32);
    if (x) { /* (NULL: work already holds this x rounded, snug_cuda_matvec_int8_again) */
        k_quant_x8<<<(unsigned)((nblk + 7) / 8), 256, 0, s>>>(x, nblk, qx, ds);
        int st = snug_cu_launched(err, "quant_x8");
        if (st) return st;
    }
    if (!g_mvq_rows) {
        const char *e = getenv("SNUG_MVQ_ROWS");
        snug_cuda_matvec_tune(e ? atoi(e) : MVQ_ROWS);
    }
    if (!g_mvq_lanes) {
        const char *e = getenv("SNUG_MVQ_LANES");
        snug_cuda_matvec_lanes(e ? atoi(e) : 1);
    }
    if (g_mvq_mma < 0) {
        const char *e = getenv("SNUG_MVQ_MMA");
        int m = e ? atoi(e) : MVQ_MMA_DEFAULT;
        g_mvq_mma = m >= 0 && m <= 31 ? m : MVQ_MMA_DEFAULT;
    }
    size_t rb = snug_dtype_row_bytes(type, (uint64_t)n_in);
    int ni = (int)n_in;
    int mma_bit = (type == SNUG_DTYPE_Q4_K ? 1 : type == SNUG_DTYPE_Q6_K ? 4 : 0) << (T == 1);
    /* the tensor-core kernel where the mask asks for it, one matrix at a time; the dp4a kernel
     * for the rest, both matrices in one launch */
    bool mma = (g_mvq_mma & mma_bit) != 0, any = (g_mvq_mma & MVQ_MMA_ANY) != 0;
    bool mma1 = mma && (any || n_in <= 2 * n_out), mma2 = w2 && mma && (any || n_in <= 2 * n_out2);
    const uint8_t *wb = (const uint8_t *)w, *wb2 = (const uint8_t *)w2;
    if (mma1) mmv_launch(type, s, wb, rb, ni, n_out, qx, ds, T, y);
    if (mma2) mmv_launch(type, s, wb2, rb, ni, n_out2, qx, ds, T, y2);
    mvq_mats m;
    if (!mma1 && w2 && !mma2)
        m = {wb, wb2, n_out, n_out2, y, y2};
    else if (!mma1)
        m = {wb, NULL, n_out, 0, y, NULL};
    else if (w2 && !mma2)
        m = {wb2, NULL, n_out2, 0, y2, NULL};
    else
        return snug_cu_launched(err, "mmv");
    switch (type) {
    case SNUG_DTYPE_Q4_K:
        mvq_launch<SNUG_DTYPE_Q4_K>(32 * mvq_warps(ni / 64), s, m, rb, ni, qx, ds, T);
        break;
    case SNUG_DTYPE_Q6_K:
        mvq_launch<SNUG_DTYPE_Q6_K>(32 * mvq_warps(ni / 32), s, m, rb, ni, qx, ds, T);
        break;
    case SNUG_DTYPE_IQ4_XS:
        mvq_launch<SNUG_DTYPE_IQ4_XS>(32 * mvq_warps(ni / 64), s, m, rb, ni, qx, ds, T);
        break;
    default:
        mvq_launch<SNUG_DTYPE_Q8_0>(32 * mvq_warps(ni / 32), s, m, rb, ni, qx, ds, T);
        break;
    }
    return snug_cu_launched(err, "matvec_q8");
}

extern "C" int snug_cu_mvq(struct snug_cuda *cu, uint32_t type, const void *w, int64_t n_in,
                           int64_t n_out, const float *x, int T, float *y, void *work,
                           struct snug_err *err) {
    return snug_cu_mvq2(cu, type, w, n_out, NULL, 0, n_in, x, T, y, NULL, work, err);
}

/* ---- MoE expert products on int8 tensor cores (Q4_K) ----------------------------------------
 * A tile of up to 8 slots of one expert against 64 weight rows per block (4 warps × 16 rows):
 * per 32-element sub-block one mma.m16n8k32 (s8 × s8 → s32) gives the 16 × 8 exact integer dots
 * Σ q·x̃ of the warp's rows and the tile's slots, then each is scaled as the dp4a unit does it
 * (d·sc · d_x · dot − dmin·m · d_x·Σx̃) into f32. Both fragments come straight from global
 * memory (mmq_sb below): row g's nibbles of sub-block j sit in 16 + 32·(j/2) .. of its
 * 144-byte block (low nibbles for even j, high for odd), a slot's int8 x̃ in qx. The same
 * super-block steps serve the dense products of 2..8 tokens (k_mmv, a verification's rows).
 * Fragment layouts (PTX ISA, mma.m16n8k32 .s8): A: a0/a2 row groupID, a1/a3 row groupID + 8,
 * k = 4·(lane%4) + 0..3 (a0, a1) and + 16 (a2, a3); B: b0 k = 4·(lane%4) + 0..3, b1 + 16,
 * column groupID; C: c0/c1 row groupID, columns 2·(lane%4) + 0/1, c2/c3 row groupID + 8. */
__device__ __forceinline__ void mma_s8_16832(int &c0, int &c1, int &c2, int &c3, uint32_t a0,
                                             uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                             uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(c0), "+r"(c1), "+r"(c2), "+r"(c3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

#define MMQ_ROWS 64 /* weight rows per block: 4 warps × 16 */

/* One 256-element super-block of the warp's two rows (a: row groupID, b: groupID + 8) against
 * the lane's token: acc[0..3] = (a, t0), (a, t1), (b, t0), (b, t1) as the C fragment lays them.
 * xr: the lane's B-fragment token's x̃ row (NULL past the tile); ds0/ds1: the C columns' x
 * scales; q = lane % 4. */
template <int TYPE> struct mmq_sb;

/* Q4_K: the dot over a sub-block's 32 elements does not depend on their order, so the k index
 * of the fragments is permuted to make each lane's bytes contiguous: fragment k = 4q + i (a0,
 * b0) is element 8q + i and k = 16 + 4q + i (a2, b1) is element 8q + 4 + i, for A and B alike.
 * A lane then reads one 8-byte word of each row's 32-byte qs group c (low nibbles: sub-block
 * 2c, high: 2c + 1) and one of x̃ per sub-block, four lanes covering a 32-byte sector. */
template <> struct mmq_sb<SNUG_DTYPE_Q4_K> {
    static constexpr int BYTES = 144, UNROLL = 2; /* super-blocks per step of k_mmv's loop */
    __device__ __forceinline__ static void run(const uint8_t *ba, const uint8_t *bb,
                                               const int8_t *xr, const float2 *ds0,
                                               const float2 *ds1, int sb, int q, float *acc) {
        uint4 ha = __ldg((const uint4 *)ba), hb = __ldg((const uint4 *)bb);
        uint2 wa[4], wb[4], xa[4], xb[4];
#pragma unroll
        for (int c = 0; c < 4; c++) {
            wa[c] = __ldg((const uint2 *)(ba + 16 + 32 * c + 8 * q));
            wb[c] = __ldg((const uint2 *)(bb + 16 + 32 * c + 8 * q));
            const int8_t *xp = xr + 256 * sb + 64 * c + 8 * q;
            xa[c] = xr ? __ldg((const uint2 *)xp) : make_uint2(0u, 0u);
            xb[c] = xr ? __ldg((const uint2 *)(xp + 32)) : make_uint2(0u, 0u);
        }
#pragma unroll
        for (int c = 0; c < 4; c++) {
            float dA[2], mA[2], dB[2], mB[2]; /* [sub-block 2c, 2c + 1] */
            q4k_pair(ha, c, &dA[0], &dA[1], &mA[0], &mA[1]);
            q4k_pair(hb, c, &dB[0], &dB[1], &mB[0], &mB[1]);
#pragma unroll
            for (int hi = 0; hi < 2; hi++) {
                uint32_t sh = 4u * (uint32_t)hi;
                int c0 = 0, c1 = 0, c2 = 0, c3 = 0;
                uint2 xv = hi ? xb[c] : xa[c];
                mma_s8_16832(c0, c1, c2, c3, (wa[c].x >> sh) & 0x0f0f0f0fu,
                             (wb[c].x >> sh) & 0x0f0f0f0fu, (wa[c].y >> sh) & 0x0f0f0f0fu,
                             (wb[c].y >> sh) & 0x0f0f0f0fu, xv.x, xv.y);
                int j = 8 * sb + 2 * c + hi;
                float2 x0 = __ldg(ds0 + j), x1 = __ldg(ds1 + j);
                acc[0] += dA[hi] * x0.x * (float)c0 - mA[hi] * x0.y;
                acc[1] += dA[hi] * x1.x * (float)c1 - mA[hi] * x1.y;
                acc[2] += dB[hi] * x0.x * (float)c2 - mB[hi] * x0.y;
                acc[3] += dB[hi] * x1.x * (float)c3 - mB[hi] * x1.y;
            }
        }
    }
};

/* Q6_K on tensor cores: the scales cover 16 elements, so each 32-element sub-block j (half
 * h = j/4, quarter qq = j%4 of a 210-byte block: element 128h + 32qq + l) is two
 * mma.m16n8k16 (s8; A: a0 row groupID, a1 row groupID + 8, k = 4·(lane%4) + 0..3; B: the same k,
 * column groupID; C as m16n8k32), l < 16 and l >= 16, each scaled by its own sc. A lane's four
 * values: low (qq < 2) or high nibbles of ql[64h + 32·(qq&1) + l..] with bits 2qq.. of
 * qh[32h + l..] on top, minus 32. Blocks are 2-byte aligned: words by ld_words. */
__device__ __forceinline__ void mma_s8_16816(int &c0, int &c1, int &c2, int &c3, uint32_t a0,
                                             uint32_t a1, uint32_t b0) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, "
                 "{%6}, {%0,%1,%2,%3};"
                 : "+r"(c0), "+r"(c1), "+r"(c2), "+r"(c3)
                 : "r"(a0), "r"(a1), "r"(b0));
}
__device__ __forceinline__ uint32_t q6k_word(const uint8_t *b, int h, int qq, int l) {
    uint32_t ql, qh;
    ld_words(b + 64 * h + 32 * (qq & 1) + l, 1, &ql);
    ld_words(b + 128 + 32 * h + l, 1, &qh);
    uint32_t v = ((ql >> (4 * (qq >> 1))) & 0x0f0f0f0fu) | (((qh >> (2 * qq)) & 0x03030303u) << 4);
    return __vsub4(v, 0x20202020u);
}

template <> struct mmq_sb<SNUG_DTYPE_Q6_K> {
    static constexpr int BYTES = 210, UNROLL = 1;
    __device__ __forceinline__ static void run(const uint8_t *ba, const uint8_t *bb,
                                               const int8_t *xr, const float2 *ds0,
                                               const float2 *ds1, int sb, int q, float *acc) {
        float da = ld_f16(ba + 208), db = ld_f16(bb + 208);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int h = j >> 2, qq = j & 3, ke = 256 * sb + 32 * j;
            const int8_t *sca = (const int8_t *)(ba + 192 + 8 * h + 2 * qq);
            const int8_t *scb = (const int8_t *)(bb + 192 + 8 * h + 2 * qq);
            float2 x0 = __ldg(ds0 + 8 * sb + j), x1 = __ldg(ds1 + 8 * sb + j);
#pragma unroll
            for (int half = 0; half < 2; half++) {
                int l = 16 * half + 4 * q;
                uint32_t a0 = q6k_word(ba, h, qq, l), a1 = q6k_word(bb, h, qq, l);
                uint32_t b0 = xr ? __ldg((const uint32_t *)(xr + ke + 16 * half + 4 * q)) : 0u;
                int c0 = 0, c1 = 0, c2 = 0, c3 = 0;
                mma_s8_16816(c0, c1, c2, c3, a0, a1, b0);
                float sa = da * (float)__ldg(sca + half), sbv = db * (float)__ldg(scb + half);
                acc[0] += sa * x0.x * (float)c0;
                acc[1] += sa * x1.x * (float)c1;
                acc[2] += sbv * x0.x * (float)c2;
                acc[3] += sbv * x1.x * (float)c3;
            }
        }
    }
};

/* A warp's C fragment: 16 weight rows from r0 (this lane's rows ra = r0 + groupID and
 * rb = ra + 8, rows past n_out re-read the last one) against up to 8 tokens of x̃ rows qx and
 * scales ds (T of them; this lane's B column groupID, its C columns t0 = 2·(lane%4), t1 = t0 + 1,
 * columns past T read token 0's scales and are never stored). */
struct mmq_frag {
    const uint8_t *wa, *wb;
    const int8_t *xr; /* NULL past T */
    const float2 *ds0, *ds1;
    int64_t ra, rb;
    int t0, t1, q;
    __device__ __forceinline__ mmq_frag(const uint8_t *w, size_t row_bytes, int n_in, int64_t n_out,
                                        const int8_t *qx, const float2 *ds, int T, int64_t r0) {
        int lane = threadIdx.x & 31, grp = lane >> 2, nb = n_in >> 5;
        q = lane & 3;
        ra = r0 + grp, rb = ra + 8;
        wa = w + (size_t)(ra < n_out ? ra : n_out - 1) * row_bytes;
        wb = w + (size_t)(rb < n_out ? rb : n_out - 1) * row_bytes;
        xr = grp < T ? qx + (size_t)grp * n_in : NULL;
        t0 = 2 * q, t1 = 2 * q + 1;
        ds0 = ds + (size_t)(t0 < T ? t0 : 0) * nb;
        ds1 = ds + (size_t)(t1 < T ? t1 : 0) * nb;
    }
    /* super-block sb of both rows into acc (mmq_sb) */
    template <int TYPE> __device__ __forceinline__ void step(int sb, float *acc) const {
        constexpr int B = mmq_sb<TYPE>::BYTES;
        mmq_sb<TYPE>::run(wa + (size_t)sb * B, wb + (size_t)sb * B, xr, ds0, ds1, sb, q, acc);
    }
    /* acc into y [T][n_out] for the rows and tokens that exist */
    __device__ __forceinline__ void store(const float *acc, int64_t n_out, int T, float *y) const {
        if (ra < n_out) {
            if (t0 < T) y[(size_t)t0 * n_out + ra] = acc[0];
            if (t1 < T) y[(size_t)t1 * n_out + ra] = acc[1];
        }
        if (rb < n_out) {
            if (t0 < T) y[(size_t)t0 * n_out + rb] = acc[2];
            if (t1 < T) y[(size_t)t1 * n_out + rb] = acc[3];
        }
    }
};

/* The tile's block: 64 rows (warp w: rows 16w..16w+15 of the block) × the tile's slots. */
template <int TYPE>
__global__ void __launch_bounds__(128)
    k_mmq_moe(const uint8_t *__restrict__ w, uint64_t expert_bytes, size_t row_bytes, int n_in,
              int64_t n_out, const int8_t *__restrict__ qx, const float2 *__restrict__ ds,
              const int32_t *__restrict__ tiles, float *__restrict__ y) {
    int e, s0, n;
    if (!moe_tile(tiles, &e, &s0, &n)) return;
    int64_t r0 = (int64_t)blockIdx.x * MMQ_ROWS + (threadIdx.x >> 5) * 16;
    if (r0 >= n_out) return; /* whole warps leave together */
    const mmq_frag f(w + (uint64_t)e * expert_bytes, row_bytes, n_in, n_out, qx + (size_t)s0 * n_in,
                     ds + (size_t)s0 * (n_in >> 5), n, r0);
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int sb = 0; sb < (n_in >> 8); sb++) f.step<TYPE>(sb, acc);
    f.store(acc, n_out, n, y + (size_t)s0 * n_out);
}

/* Dense products of T <= 8 tokens on the same tensor-core steps: a block of NW warps owns 16
 * rows (the A fragment's two row groups) and its warps split the row's super-blocks (warp w
 * takes w, w + NW, ...), so a row's bytes are read by NW warps at once; the partial C fragments
 * meet in shared memory. Every token is one B column (columns past T are zeros), so the work per
 * weight byte does not grow with T: a verification of 3 drafts reads the weights once at the
 * cost of one token. */
template <int TYPE, int NW>
__global__ void __launch_bounds__(NW * 32, 16 / NW) /* at most 128 registers */
    k_mmv(const uint8_t *__restrict__ w, size_t row_bytes, int n_in, int64_t n_out,
          const int8_t *__restrict__ qx, const float2 *__restrict__ ds, int T,
          float *__restrict__ y) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nsb = n_in >> 8;
    const mmq_frag f(w, row_bytes, n_in, n_out, qx, ds, T, (int64_t)blockIdx.x * 16);
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    constexpr int U = mmq_sb<TYPE>::UNROLL;
#pragma unroll U
    for (int sb = wid; sb < nsb; sb += NW) f.step<TYPE>(sb, acc);
    __shared__ float part[NW][4][32];
    if (NW > 1) {
#pragma unroll
        for (int i = 0; i < 4; i++) part[wid][i][lane] = acc[i];
        __syncthreads();
        if (wid) return;
        for (int k = 1; k < NW; k++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[i] += part[k][i][lane];
    }
    f.store(acc, n_out, T, y);
}

/* The dense tensor-core product (k_mmv) for Q4_K / Q6_K: 4 warps per 16 rows, 8 for rows of
 * more than 32 super-blocks. */
template <int TYPE>
static void mmv_launch_t(cudaStream_t s, const uint8_t *w, size_t rb, int n_in, int64_t n_out,
                         const int8_t *qx, const float2 *ds, int T, float *y) {
    unsigned blocks = (unsigned)((n_out + 15) / 16);
    if (n_in / 256 > 32)
        k_mmv<TYPE, 8><<<blocks, 256, 0, s>>>(w, rb, n_in, n_out, qx, ds, T, y);
    else
        k_mmv<TYPE, 4><<<blocks, 128, 0, s>>>(w, rb, n_in, n_out, qx, ds, T, y);
}
static void mmv_launch(uint32_t type, cudaStream_t s, const uint8_t *w, size_t rb, int n_in,
                       int64_t n_out, const int8_t *qx, const float2 *ds, int T, float *y) {
    if (type == SNUG_DTYPE_Q4_K)
        mmv_launch_t<SNUG_DTYPE_Q4_K>(s, w, rb, n_in, n_out, qx, ds, T, y);
    else
        mmv_launch_t<SNUG_DTYPE_Q6_K>(s, w, rb, n_in, n_out, qx, ds, T, y);
}

/* ---- MoE expert products (backend.h moe_matmul) ------------------------------------------- */
/* The dp4a tile kernel for Q4_K tiles of several slots instead of the tensor-core one
 * (snug_cuda_moe_tune(1); tests and benchmarks compare both). */
static int g_moe_dp4a, g_moe_single_rows;
extern "C" void snug_cuda_moe_tune(int dp4a) {
    g_moe_dp4a = dp4a & 1;
    g_moe_single_rows = dp4a >> 1 & 1;
}
extern "C" bool snug_cuda_moe_matmul_supported(uint32_t type, int64_t n_in) {
    int64_t q = type == SNUG_DTYPE_Q8_0 ? 32 : 256;
    return snug_cu_mvq_supported(type) && n_in % q == 0 && n_in <= INT32_MAX / 8;
}

template <int TYPE>
static void mvq_moe_launch(int threads, cudaStream_t s, dim3 grid_t, const uint8_t *w, uint64_t eb,
                           size_t rb, int n_in, int64_t n_out, const int8_t *qx, const float2 *ds,
                           const int32_t *tiles, int single, float *y) {
    /* one slot per tile (decode: every expert has one token): the one-token kernel, 4 rows
     * per block; else up to SNUG_CUDA_MOE_TILE tokens per tile, 2 rows per block */
    int xrow = single == 2 ? 0 : 1;
    if (single && g_moe_single_rows) {
        dim3 g((unsigned)((n_out + 3) / 4), grid_t.y);
        k_mvq_moe<TYPE, 1, 4><<<g, threads, 0, s>>>(w, eb, rb, n_in, n_out, qx, ds, tiles, y, xrow);
    } else if (single) { /* lanes per row: the units of a row, 8 to 32 */
        int nu = n_in / mvq_unit<TYPE>::EPU;
        const int R = 4;
        if (nu <= 8) {
            dim3 g((unsigned)((n_out + R * (MOE1_THREADS / 8) - 1) / (R * (MOE1_THREADS / 8))),
                   grid_t.y);
            k_mvq_moe1<TYPE, 8, R>
                <<<g, MOE1_THREADS, 0, s>>>(w, eb, rb, n_in, n_out, qx, ds, tiles, y, xrow);
        } else if (nu <= 16) {
            dim3 g((unsigned)((n_out + R * (MOE1_THREADS / 16) - 1) / (R * (MOE1_THREADS / 16))),
                   grid_t.y);
            k_mvq_moe1<TYPE, 16, R>
                <<<g, MOE1_THREADS, 0, s>>>(w, eb, rb, n_in, n_out, qx, ds, tiles, y, xrow);
        } else {
            dim3 g((unsigned)((n_out + R * (MOE1_THREADS / 32) - 1) / (R * (MOE1_THREADS / 32))),
                   grid_t.y);
            k_mvq_moe1<TYPE, 32, R>
                <<<g, MOE1_THREADS, 0, s>>>(w, eb, rb, n_in, n_out, qx, ds, tiles, y, xrow);
        }
    } else {
        dim3 g((unsigned)((n_out + 1) / 2), grid_t.y);
        k_mvq_moe<TYPE, SNUG_CUDA_MOE_TILE, 2>
            <<<g, threads, 0, s>>>(w, eb, rb, n_in, n_out, qx, ds, tiles, y, 1);
    }
}

/* x [n_slots][n_in] (grouped by expert) to int8 blocks in `work`, then one launch over the tile
 * table: max_tiles bounds its length (backend.h snug_moe_tiles_len); single 1: every tile holds
 * one slot (one token: an expert holds at most one slot per token); single 2: the same, and x is
 * that token's one row [n_in], read by every slot (the gate and up products of a decode step:
 * no gathered copies, one row rounded). */
extern "C" int snug_cuda_moe_matmul(struct snug_cuda *cu, uint32_t type, const void *w,
                                    uint64_t expert_bytes, int64_t n_in, int64_t n_out,
                                    const float *x, const int32_t *tiles, int64_t n_slots,
                                    int64_t max_tiles, int single, float *y, void *work,
                                    struct snug_err *err) {
    if (n_slots <= 0) return SNUG_OK;
    if (!snug_cuda_moe_matmul_supported(type, n_in) || max_tiles > 65535)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "cuda moe matmul: type %u with %lld inputs, %lld tiles", type,
                            (long long)n_in, (long long)max_tiles);
    cudaStream_t s = SNUG_CU_STREAM(cu);
    uint8_t *wk = (uint8_t *)(((uintptr_t)work + 255) & ~(uintptr_t)255);
    int64_t x_rows = single == 2 ? 1 : n_slots; /* (the layout of snug_cu_mvq_x) */
    int8_t *qx = (int8_t *)wk;
    float2 *ds = (float2 *)(wk + al256((size_t)(x_rows * n_in)));
    int64_t nblk = x_rows * (n_in / 32);
    if (x) { /* NULL: work holds these rows rounded already (the previous product's x) */
        k_quant_x8<<<(unsigned)((nblk + 7) / 8), 256, 0, s>>>(x, nblk, qx, ds);
        int st = snug_cu_launched(err, "quant_x8");
        if (st) return st;
    }
    size_t rb = snug_dtype_row_bytes(type, (uint64_t)n_in);
    const uint8_t *wb = (const uint8_t *)w;
    int ni = (int)n_in;
    dim3 gt(1, (unsigned)max_tiles);
    if ((type == SNUG_DTYPE_Q4_K || type == SNUG_DTYPE_Q6_K) && !single && !g_moe_dp4a) {
        /* several slots per tile: int8 tensor cores */
        dim3 g((unsigned)((n_out + MMQ_ROWS - 1) / MMQ_ROWS), (unsigned)max_tiles);
        if (type == SNUG_DTYPE_Q4_K)
            k_mmq_moe<SNUG_DTYPE_Q4_K>
                <<<g, 128, 0, s>>>(wb, expert_bytes, rb, ni, n_out, qx, ds, tiles, y);
        else
            k_mmq_moe<SNUG_DTYPE_Q6_K>
                <<<g, 128, 0, s>>>(wb, expert_bytes, rb, ni, n_out, qx, ds, tiles, y);
        return snug_cu_launched(err, "mmq_moe");
    }
    switch (type) {
    case SNUG_DTYPE_Q4_K:
        mvq_moe_launch<SNUG_DTYPE_Q4_K>(32 * mvq_warps(ni / 64), s, gt, wb, expert_bytes, rb, ni,
                                        n_out, qx, ds, tiles, single, y);
        break;
    case SNUG_DTYPE_Q6_K:
        mvq_moe_launch<SNUG_DTYPE_Q6_K>(32 * mvq_warps(ni / 32), s, gt, wb, expert_bytes, rb, ni,
                                        n_out, qx, ds, tiles, single, y);
        break;
    default:
        mvq_moe_launch<SNUG_DTYPE_Q8_0>(32 * mvq_warps(ni / 32), s, gt, wb, expert_bytes, rb, ni,
                                        n_out, qx, ds, tiles, single, y);
        break;
    }
    return snug_cu_launched(err, "matvec_moe");
}
