/* cuda_mmq_block.cuh — the body of the int8 tensor-core prompt product (cuda_mmq.cu): what one
 * thread of a 256-thread block does, and one lane of the activation quantiser, written against a
 * handful of primitives so that the same code runs on the GPU (cuda_mmq.cu defines them with
 * cp.async, ldmatrix, mma.sync, __syncthreads) and in a host emulator of a thread block
 * (tests/device/test_cuda_mmq_host.cpp: user-level threads, warp collectives computed from the
 * PTX fragment layouts), which checks the tiling, swizzle, unpacking and fragment bookkeeping
 * in ctest without a GPU.
 *
 * Primitives the includer defines before including this file:
 *   MMQ_FN                          function qualifier (device: __device__ __forceinline__)
 *   mmq_sa, mmq_sa_of(p)            a shared-memory address for ldmatrix, from a pointer into
 *                                   the block's shared memory; mmq_sa + bytes is an address
 *   mmq_sync()                      block barrier
 *   mmq_cp16(d, s), mmq_cp8(d, s, n), mmq_cp4(d, s), mmq_cp_commit(), mmq_cp_wait_all()
 *                                   asynchronous global → shared copies (cp8: n of 8 bytes, the
 *                                   rest zero-filled), visible after wait_all + a barrier
 *   mmq_ldsm_x4(r, a)               ldmatrix .x4 (matrix i addressed by lanes 8i .. 8i + 7)
 *   mmq_mma32(c, a, b0, b1)         c += a·b, mma.m16n8k32 s8·s8 → s32
 *   mmq_mma16(c, a0, a1, b0)        c += a·b, mma.m16n8k16 s8·s8 → s32
 *   mmq_shfl_xor_f(v, m), mmq_shfl_xor_i(v, m)   warp shuffles
 *   mmq_atomic_add(p, v)            *p += v, atomically (global float)
 *   mmq_funnel_r(lo, hi, s), mmq_byte_perm(x, y, s), mmq_vsub4(a, b), mmq_f2i_rn(f), mmq_h2f(bits),
 *   mmq_as_float(u), mmq_float_bits(f)           the CUDA intrinsics of those names
 * and includes uint2/uint4/float2 (cuda_runtime.h) and quant/quant.h.
 * Invariant: the code here is the kernel; nothing in it depends on which of the two runs it.
 * Read next: cuda_mmq.cu (the design, the device primitives, the launch). */
#ifndef SNUG_CUDA_MMQ_BLOCK_CUH
#define SNUG_CUDA_MMQ_BLOCK_CUH

#define MMQ_BM      128 /* weight rows per block */
#define MMQ_BN      64  /* tokens per block */
#define MMQ_THREADS 256 /* 8 warps: 4 along the rows × 2 along the tokens */
/* f32 bits of 1.5·2^23: as_float(MMQ_MAGIC_BITS + i) = MMQ_MAGIC + i exactly for |i| < 2^22 */
#define MMQ_MAGIC_BITS 0x4B400000
#define MMQ_MAGIC      12582912.0f

/* Shared memory (bytes): the unpacked weight tile, two x tiles, per-row scales (8 words a row:
 * scale bytes [16] | min bytes [8] | f32 d | f32 dmin), per-token x scales and min planes (two
 * buffers each), then the raw weight bytes of one super-block. */
#define MMQ_SM_A   0
#define MMQ_SM_B   (MMQ_SM_A + MMQ_BM * 256)
#define MMQ_SM_RI  (MMQ_SM_B + 2 * MMQ_BN * 256)
#define MMQ_SM_TD  (MMQ_SM_RI + MMQ_BM * 32)
#define MMQ_SM_TM  (MMQ_SM_TD + 2 * MMQ_BN * 4)
#define MMQ_SM_RAW (MMQ_SM_TM + 2 * MMQ_BN * 16)

/* Per weight type: bytes of a 256-input block, bytes of a row's raw buffer, whether it has the
 * q4_K minimum term. */
template <int TYPE> struct mmq_t;
template <> struct mmq_t<SNUG_DTYPE_Q4_K> {
    static constexpr int BYTES = 144, RAW = 144;
    static constexpr bool MIN = true;
};
template <> struct mmq_t<SNUG_DTYPE_Q6_K> {
    static constexpr int BYTES = 210, RAW = 224; /* 27 8-byte pieces, padded to 16 */
    static constexpr bool MIN = false;
};
template <int TYPE> constexpr size_t mmq_smem() {
    return (size_t)MMQ_SM_RAW + (size_t)MMQ_BM * mmq_t<TYPE>::RAW;
}

/* ---- activations: int8 per 256 ------------------------------------------------------------ */
/* One warp per 256-block b of x (blocks run along the rows: n_in % 256 == 0), lane l rounding
 * inputs 8l .. 8l + 7 as quant_act.c's quant_group does: amax, id = 127 / amax, q =
 * round-half-even(x · id); xd[b] = amax / 127; xm[16b + j] = S_j & 127, xm[16b + 8 + j] =
 * S_j >> 7 with S_j = Σ q over inputs 32j .. 32j + 31 (|S_j| <= 4064). */
MMQ_FN void mmq_quant_lane(const float *__restrict__ x, int64_t b, int lane,
                           int8_t *__restrict__ qx, float *__restrict__ xd,
                           uint8_t *__restrict__ xm) {
    const float4 *p = (const float4 *)(x + b * 256 + 8 * lane);
    float4 u = p[0], v = p[1];
    const float f[8] = {u.x, u.y, u.z, u.w, v.x, v.y, v.z, v.w};
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(f[i]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, mmq_shfl_xor_f(amax, o));
    float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    uint32_t lo = 0, hi = 0;
    int s = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int q = mmq_f2i_rn(f[i] * id);
        s += q;
        if (i < 4)
            lo |= (uint32_t)(q & 0xff) << (8 * i);
        else
            hi |= (uint32_t)(q & 0xff) << (8 * (i - 4));
    }
    *(uint2 *)(qx + b * 256 + 8 * lane) = make_uint2(lo, hi);
    s += mmq_shfl_xor_i(s, 1);
    s += mmq_shfl_xor_i(s, 2);
    if ((lane & 3) == 0) { /* lanes 4j .. 4j + 3 hold sub-block j */
        xm[16 * b + (lane >> 2)] = (uint8_t)(s & 127);
        xm[16 * b + 8 + (lane >> 2)] = (uint8_t)((s >> 7) & 0xff);
    }
    if (lane == 0) xd[b] = amax / 127.0f;
}

/* ---- the block ----------------------------------------------------------------------------- */
/* Byte offset of 16-byte chunk c of row r in a swizzled [rows][256] int8 tile. */
MMQ_FN int mmq_sw(int r, int c) {
    return r * 256 + ((c ^ (r & 7)) << 4);
}
/* Four words at 4-aligned byte offsets of a block held in shared memory shifted by sh bytes:
 * w points at the block's word 0 (raw word sh / 4), fs = 8 · (sh % 4). */
MMQ_FN void mmq_words4(const uint32_t *w, int fs, uint32_t *o) {
    uint32_t v[5];
#pragma unroll
    for (int i = 0; i < 5; i++) v[i] = w[i];
#pragma unroll
    for (int i = 0; i < 4; i++) o[i] = mmq_funnel_r(v[i], v[i + 1], fs);
}

/* The kernel's arguments (one struct: the emulator passes the same). */
struct mmq_args {
    const uint8_t *w; /* n_out rows of row_bytes */
    size_t row_bytes;
    int n_in; /* a multiple of 256 */
    int64_t n_out, T;
    const int8_t *qx;  /* [T][n_in] int8 */
    const float *xd;   /* [T][n_in / 256] scales */
    const uint8_t *xm; /* [T][n_in / 256][16] min planes */
    float *y;          /* [T][n_out]; zeroed first when ksplit == 2 */
    int ksplit;        /* 1, or 2: each row's super-blocks in two halves (blockIdx.z) */
};

/* Queue the copies of super-block sb: W's raw bytes of rows row0 .. (rows past n_out repeat the
 * last row, unused), the x tile of tokens tok0 .. (tokens past T repeat the last token, unused)
 * into x buffer `buf`, its scales and min planes. */
template <int TYPE>
MMQ_FN void mmq_issue(uint8_t *sm, int tid, const mmq_args &p, int64_t row0, int64_t tok0, int sb,
                      int buf) {
    const int nsb = p.n_in >> 8;
    if constexpr (TYPE == SNUG_DTYPE_Q4_K) { /* 9 pieces of 16 bytes a row (rows 16-aligned) */
        for (int i = tid; i < MMQ_BM * 9; i += MMQ_THREADS) {
            int r = i / 9, c = i - 9 * r;
            int64_t row = row0 + r < p.n_out ? row0 + r : p.n_out - 1;
            mmq_cp16(sm + MMQ_SM_RAW + r * 144 + 16 * c,
                     p.w + row * p.row_bytes + (size_t)sb * 144 + 16 * c);
        }
    } else { /* 27 pieces of 8 bytes from the 8-byte boundary at or before the block (2-byte
              * aligned); the last piece copies only the block's own bytes */
        for (int i = tid; i < MMQ_BM * 27; i += MMQ_THREADS) {
            int r = i / 27, k = i - 27 * r;
            int64_t row = row0 + r < p.n_out ? row0 + r : p.n_out - 1;
            const uint8_t *a = p.w + row * p.row_bytes + (size_t)sb * 210;
            int sh = (int)((uintptr_t)a & 7), n = sh + 210 - 8 * k;
            mmq_cp8(sm + MMQ_SM_RAW + r * 224 + 8 * k, a - sh + 8 * k, n < 8 ? n : 8);
        }
    }
    uint8_t *B = sm + MMQ_SM_B + buf * (MMQ_BN * 256);
    for (int i = tid; i < MMQ_BN * 16; i += MMQ_THREADS) {
        int n = i >> 4, c = i & 15;
        int64_t t = tok0 + n < p.T ? tok0 + n : p.T - 1;
        mmq_cp16(B + mmq_sw(n, c), p.qx + t * p.n_in + (size_t)sb * 256 + 16 * c);
    }
    if (tid < MMQ_BN) {
        int64_t t = tok0 + tid < p.T ? tok0 + tid : p.T - 1;
        mmq_cp4(sm + MMQ_SM_TD + (buf * MMQ_BN + tid) * 4, p.xd + t * nsb + sb);
    } else if (mmq_t<TYPE>::MIN && tid < 2 * MMQ_BN) {
        int n = tid - MMQ_BN;
        int64_t t = tok0 + n < p.T ? tok0 + n : p.T - 1;
        mmq_cp16(sm + MMQ_SM_TM + (buf * MMQ_BN + n) * 16, p.xm + (t * nsb + sb) * 16);
    }
    mmq_cp_commit();
}

/* Unpack the raw bytes of super-block sb (landed) into the int8 tile and the per-row scales. */
template <int TYPE>
MMQ_FN void mmq_unpack(uint8_t *sm, int tid, const mmq_args &p, int64_t row0, int sb) {
    uint8_t *A = sm + MMQ_SM_A;
    uint32_t *RI = (uint32_t *)(sm + MMQ_SM_RI);
    const uint8_t *raw = sm + MMQ_SM_RAW;
    if constexpr (TYPE == SNUG_DTYPE_Q4_K) {
        /* qs piece k (bytes 16 + 16k): low nibbles are inputs 64c + 16h .. (chunk 4c + h), high
         * nibbles 64c + 32 + 16h .. (chunk 4c + 2 + h), c = k / 2, h = k % 2 */
        for (int i = tid; i < MMQ_BM * 8; i += MMQ_THREADS) {
            int r = i >> 3, k = i & 7, c = k >> 1, h = k & 1;
            uint4 v = *(const uint4 *)(raw + r * 144 + 16 + 16 * k);
            uint4 lo = make_uint4(v.x & 0x0f0f0f0fu, v.y & 0x0f0f0f0fu, v.z & 0x0f0f0f0fu,
                                  v.w & 0x0f0f0f0fu);
            uint4 hi = make_uint4((v.x >> 4) & 0x0f0f0f0fu, (v.y >> 4) & 0x0f0f0f0fu,
                                  (v.z >> 4) & 0x0f0f0f0fu, (v.w >> 4) & 0x0f0f0f0fu);
            *(uint4 *)(A + mmq_sw(r, 4 * c + h)) = lo;
            *(uint4 *)(A + mmq_sw(r, 4 * c + 2 + h)) = hi;
        }
        if (tid < MMQ_BM) { /* f16 d | f16 dmin | 12 bytes of 6-bit scales and mins */
            uint4 hd = *(const uint4 *)(raw + tid * 144);
            const uint32_t sw[3] = {hd.y, hd.z, hd.w};
            uint32_t scw[2] = {0, 0}, mnw[2] = {0, 0};
#pragma unroll
            for (int j = 0; j < 8; j++) {
#define MMQ_SB(k) ((sw[(k) >> 2] >> (8 * ((k)&3))) & 0xffu) /* byte k of the field */
                uint32_t sc, mn;
                if (j < 4) {
                    sc = MMQ_SB(j) & 63u;
                    mn = MMQ_SB(j + 4) & 63u;
                } else {
                    sc = (MMQ_SB(j + 4) & 0xfu) | ((MMQ_SB(j - 4) >> 6) << 4);
                    mn = (MMQ_SB(j + 4) >> 4) | ((MMQ_SB(j) >> 6) << 4);
                }
#undef MMQ_SB
                scw[j >> 2] |= sc << (8 * (j & 3));
                mnw[j >> 2] |= mn << (8 * (j & 3));
            }
            float d = mmq_h2f((uint16_t)(hd.x & 0xffffu));
            float dmin = mmq_h2f((uint16_t)(hd.x >> 16));
            uint32_t *ri = RI + tid * 8;
            *(uint4 *)ri = make_uint4(scw[0], scw[1], 0u, 0u);
            *(uint4 *)(ri + 4) =
                make_uint4(mnw[0], mnw[1], mmq_float_bits(d), mmq_float_bits(dmin));
        }
    } else {
        /* task (r, h, m): l = 16m .. 16m + 15 of half h; quarter qq of it is inputs
         * 128h + 32qq + l (chunk 8h + 2qq + m): low (qq 0, 1) or high (qq 2, 3) nibbles of
         * ql[64h + 32(qq & 1) + l], bits 2qq, 2qq + 1 of qh[32h + l] on top, minus 32 */
        for (int i = tid; i < MMQ_BM * 4; i += MMQ_THREADS) {
            int r = i >> 2, h = (i >> 1) & 1, m = i & 1;
            int64_t row = row0 + r < p.n_out ? row0 + r : p.n_out - 1;
            int sh = (int)((uintptr_t)(p.w + row * p.row_bytes + (size_t)sb * 210) & 7);
            const uint32_t *rw = (const uint32_t *)(raw + r * 224) + (sh >> 2);
            int fs = 8 * (sh & 3);
            uint32_t qa[4], qb[4], qh[4];
            mmq_words4(rw + 16 * h + 4 * m, fs, qa);
            mmq_words4(rw + 16 * h + 8 + 4 * m, fs, qb);
            mmq_words4(rw + 32 + 8 * h + 4 * m, fs, qh);
            uint32_t o[4][4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                uint32_t a = qa[k], b = qb[k], hh = qh[k];
                o[0][k] = mmq_vsub4((a & 0x0f0f0f0fu) | ((hh << 4) & 0x30303030u), 0x20202020u);
                o[1][k] = mmq_vsub4((b & 0x0f0f0f0fu) | ((hh << 2) & 0x30303030u), 0x20202020u);
                o[2][k] = mmq_vsub4(((a >> 4) & 0x0f0f0f0fu) | (hh & 0x30303030u), 0x20202020u);
                o[3][k] =
                    mmq_vsub4(((b >> 4) & 0x0f0f0f0fu) | ((hh >> 2) & 0x30303030u), 0x20202020u);
            }
#pragma unroll
            for (int qq = 0; qq < 4; qq++)
                *(uint4 *)(A + mmq_sw(r, 8 * h + 2 * qq + m)) =
                    make_uint4(o[qq][0], o[qq][1], o[qq][2], o[qq][3]);
        }
        if (tid < MMQ_BM) { /* int8 sc[16] at 192, f16 d at 208 */
            int64_t row = row0 + tid < p.n_out ? row0 + tid : p.n_out - 1;
            int sh = (int)((uintptr_t)(p.w + row * p.row_bytes + (size_t)sb * 210) & 7);
            const uint32_t *rw = (const uint32_t *)(raw + tid * 224) + (sh >> 2);
            int fs = 8 * (sh & 3);
            uint32_t s[4];
            mmq_words4(rw + 48, fs, s);
            uint32_t dw = mmq_funnel_r(rw[52], rw[53], fs);
            float d = mmq_h2f((uint16_t)(dw & 0xffffu));
            uint32_t *ri = RI + tid * 8;
            *(uint4 *)ri = make_uint4(s[0], s[1], s[2], s[3]);
            *(uint4 *)(ri + 4) = make_uint4(0u, 0u, mmq_float_bits(d), 0u);
        }
    }
}

/* The math of one super-block. Warp tile 32 rows × 32 tokens: m-tile mt (rows 32·wr + 16·mt ..),
 * n-tile nt (tokens 32·wn + 8·nt ..); element c of the C fragment of (mt, nt) is row
 * 16·mt + grp + 8·(c / 2), token 8·nt + 2·q + c % 2 of the warp tile (grp = lane / 4,
 * q = lane % 4). Per 32 inputs j: int32 D from the tensor cores, one IMAD by the sub-block's
 * integer scale into I; after the eight steps the float terms. The step loop is not unrolled:
 * unrolled, the compiler hoisted the fragment loads of later steps and spilled. */
template <int TYPE>
MMQ_FN void mmq_compute(const uint8_t *sm, int tid, int buf, float (&acc)[2][4][4]) {
    const int lane = tid & 31, wid = tid >> 5, wr = wid & 3, wn = wid >> 2;
    const int grp = lane >> 2, q = lane & 3, key = lane & 7;
    const uint8_t *A = sm + MMQ_SM_A, *B = sm + MMQ_SM_B + buf * (MMQ_BN * 256);
    const uint32_t *RI = (const uint32_t *)(sm + MMQ_SM_RI);
    /* ldmatrix: lanes 8i .. 8i + 7 address the rows of matrix i. A (one m-tile): matrices
     * (rows 0-7, k 0-15), (8-15, 0-15), (0-7, 16-31), (8-15, 16-31) = a0 .. a3. B (two n-tiles):
     * (tokens 0-7, k 0-15), (0-7, 16-31), (8-15, 0-15), (8-15, 16-31) = b0, b1 of each. The
     * rows of a matrix are 8 consecutive tile rows, so row & 7 = lane & 7 = key. */
    mmq_sa a_row[2], b_row[2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
        a_row[mt] = mmq_sa_of(A + (32 * wr + 16 * mt + key + 8 * ((lane >> 3) & 1)) * 256);
#pragma unroll
    for (int np = 0; np < 2; np++)
        b_row[np] = mmq_sa_of(B + (32 * wn + 16 * np + key + 8 * (lane >> 4)) * 256);
    const int a_hi = lane >> 4, b_hi = (lane >> 3) & 1;
    /* the thread's rows' scale words: q4_K's 8 bytes held for the super-block; q6_K's 16 read
     * per step (word j / 2) */
    const uint32_t *ri_row[2][2];
    uint32_t scw[2][2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            ri_row[mt][r] = RI + (32 * wr + 16 * mt + grp + 8 * r) * 8;
            scw[mt][r][0] = ri_row[mt][r][0], scw[mt][r][1] = ri_row[mt][r][1];
        }
    int I[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int c = 0; c < 4; c++) I[mt][nt][c] = 0;
#pragma unroll 1
    for (int j = 0; j < 8; j++) { /* inputs 32j .. 32j + 31 of the super-block */
        uint32_t a[2][4], b[4][2];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
            mmq_ldsm_x4(a[mt], a_row[mt] + (((2 * j + a_hi) ^ key) << 4));
#pragma unroll
        for (int np = 0; np < 2; np++) {
            uint32_t t[4];
            mmq_ldsm_x4(t, b_row[np] + (((2 * j + b_hi) ^ key) << 4));
            b[2 * np][0] = t[0], b[2 * np][1] = t[1], b[2 * np + 1][0] = t[2],
                  b[2 * np + 1][1] = t[3];
        }
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
            if constexpr (TYPE == SNUG_DTYPE_Q4_K) { /* sub-block j: 6-bit scale sc_j */
                /* byte j of the 8 (a branch-free select: a select between the two words
                 * became a branch, and the compiler then split every IMAD into IMAD + IADD) */
                int s0 = (int)(mmq_byte_perm(scw[mt][0][0], scw[mt][0][1], j) & 0xffu);
                int s1 = (int)(mmq_byte_perm(scw[mt][1][0], scw[mt][1][1], j) & 0xffu);
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    int c[4] = {0, 0, 0, 0};
                    mmq_mma32(c, a[mt], b[nt][0], b[nt][1]);
                    I[mt][nt][0] += s0 * c[0];
                    I[mt][nt][1] += s0 * c[1];
                    I[mt][nt][2] += s1 * c[2];
                    I[mt][nt][3] += s1 * c[3];
                }
            } else { /* sub-blocks 2j, 2j + 1 of 16 inputs: int8 scales in word j / 2 */
                int sh = 16 * (j & 1);
                uint32_t w0 = ri_row[mt][0][j >> 1], w1 = ri_row[mt][1][j >> 1];
                int l0 = (int)(int8_t)(w0 >> sh), h0 = (int)(int8_t)(w0 >> (sh + 8));
                int l1 = (int)(int8_t)(w1 >> sh), h1 = (int)(int8_t)(w1 >> (sh + 8));
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    int c[4] = {0, 0, 0, 0}, e[4] = {0, 0, 0, 0};
                    mmq_mma16(c, a[mt][0], a[mt][1], b[nt][0]);
                    mmq_mma16(e, a[mt][2], a[mt][3], b[nt][1]);
                    /* two IMADs into I each (written as one sum, the compiler made three
                     * instructions of it) */
                    I[mt][nt][0] += l0 * c[0];
                    I[mt][nt][1] += l0 * c[1];
                    I[mt][nt][2] += l1 * c[2];
                    I[mt][nt][3] += l1 * c[3];
                    I[mt][nt][0] += h0 * e[0];
                    I[mt][nt][1] += h0 * e[1];
                    I[mt][nt][2] += h1 * e[2];
                    I[mt][nt][3] += h1 * e[3];
                }
            }
        }
    }
    /* once per super-block: the float terms */
    const float *TD = (const float *)(sm + MMQ_SM_TD) + buf * MMQ_BN;
    float2 dx[4];
#pragma unroll
    for (int nt = 0; nt < 4; nt++) dx[nt] = *(const float2 *)(TD + 32 * wn + 8 * nt + 2 * q);
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
        float d[2], dmin[2];
        uint32_t mw[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            d[r] = mmq_as_float(ri_row[mt][r][6]);
            dmin[r] = mmq_as_float(ri_row[mt][r][7]);
            mw[r] = ri_row[mt][r][4 + (q & 1)];
        }
        if constexpr (mmq_t<TYPE>::MIN) {
            /* Σ_j m_j·S_j = C1 + 128·C2: A1 = [m_0..m_7 | 0], A2 = [0 | m_0..m_7] (lane q holds
             * k 4q .. 4q + 3), B = the token's plane [l_0..l_7 | h_0..h_7] (word q); C1 starts
             * at the magic bits, so C1 + 128·C2 reads as MMQ_MAGIC + Σ m·S in f32
             * (|Σ m·S| <= 8·63·4064 < 2^22) */
            const uint32_t *TM = (const uint32_t *)(sm + MMQ_SM_TM) + buf * MMQ_BN * 4;
            uint32_t a10 = q < 2 ? mw[0] : 0u, a11 = q < 2 ? mw[1] : 0u;
            uint32_t a20 = q < 2 ? 0u : mw[0], a21 = q < 2 ? 0u : mw[1];
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                uint32_t bm = TM[(32 * wn + 8 * nt + grp) * 4 + q];
                int c1[4] = {MMQ_MAGIC_BITS, MMQ_MAGIC_BITS, MMQ_MAGIC_BITS, MMQ_MAGIC_BITS};
                int c2[4] = {0, 0, 0, 0};
                mmq_mma16(c1, a10, a11, bm);
                mmq_mma16(c2, a20, a21, bm);
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    float f2 = mmq_as_float((uint32_t)(c1[c] + 128 * c2[c])) - MMQ_MAGIC;
                    float t = d[c >> 1] * (float)I[mt][nt][c];
                    t = fmaf(-dmin[c >> 1], f2, t);
                    acc[mt][nt][c] = fmaf((c & 1) ? dx[nt].y : dx[nt].x, t, acc[mt][nt][c]);
                }
            }
        } else {
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int c = 0; c < 4; c++)
                    acc[mt][nt][c] = fmaf((c & 1) ? dx[nt].y : dx[nt].x,
                                          d[c >> 1] * (float)I[mt][nt][c], acc[mt][nt][c]);
        }
    }
}

/* One block: rows 128·by .., tokens 64·bx .., super-blocks of part bz of p.ksplit (1 or 2: the
 * first or second half of the row). One barrier after the math (the raw bytes and the next x
 * tile landed; the int8 tile free), one after the unpack. With two parts both add into y, which
 * the launcher zeroed: 0 + a + b is the same float whichever part comes first, so the result
 * does not depend on the order the blocks run in. */
template <int TYPE>
MMQ_FN void mmq_block(uint8_t *sm, int tid, int64_t bx, int64_t by, int bz, const mmq_args &p) {
    const int64_t tok0 = bx * MMQ_BN, row0 = by * MMQ_BM;
    const int nsb = p.n_in >> 8, half = nsb / 2;
    const int sb0 = p.ksplit == 2 && bz == 1 ? half : 0;
    const int sb1 = p.ksplit == 2 && bz == 0 ? half : nsb;
    float acc[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[mt][nt][c] = 0.0f;
    mmq_issue<TYPE>(sm, tid, p, row0, tok0, sb0, 0);
    mmq_cp_wait_all();
    mmq_sync();
    mmq_unpack<TYPE>(sm, tid, p, row0, sb0);
    mmq_sync();
    for (int sb = sb0; sb < sb1; sb++) {
        const int buf = (sb - sb0) & 1;
        if (sb + 1 < sb1) mmq_issue<TYPE>(sm, tid, p, row0, tok0, sb + 1, buf ^ 1);
        mmq_compute<TYPE>(sm, tid, buf, acc);
        mmq_cp_wait_all();
        mmq_sync();
        if (sb + 1 < sb1) {
            mmq_unpack<TYPE>(sm, tid, p, row0, sb + 1);
            mmq_sync();
        }
    }
    const int lane = tid & 31, wid = tid >> 5, wr = wid & 3, wn = wid >> 2;
    const int grp = lane >> 2, q = lane & 3;
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int64_t row = row0 + 32 * wr + 16 * mt + grp + 8 * (c >> 1);
                int64_t t = tok0 + 32 * wn + 8 * nt + 2 * q + (c & 1);
                if (row >= p.n_out || t >= p.T) continue;
                if (p.ksplit == 2)
                    mmq_atomic_add(p.y + t * p.n_out + row, acc[mt][nt][c]);
                else
                    p.y[t * p.n_out + row] = acc[mt][nt][c];
            }
}

#endif /* SNUG_CUDA_MMQ_BLOCK_CUH */
