/* test_cuda_mmq_host.cpp — the int8 tensor-core prompt product (src/backend/cuda/
 * cuda_mmq_block.cuh, the code the GPU kernel runs) executed by a host emulator of a CUDA thread
 * block, against the CPU's own int8 product (snug_act_quantize + snug_act_dot: the same A256
 * rounding of x, integer sums, float scales) and the exact product of the reference decoder's
 * weights with the rounded x. In ctest: needs the toolkit's headers, not a GPU.
 * The emulator runs the 256 threads of a block as user-level threads (ucontext), one at a time,
 * each until its next synchronisation point: a block barrier, or a warp collective (ldmatrix,
 * mma, shuffle) whose result the last of the 32 lanes to arrive computes for all of them from
 * the PTX ISA's fragment layouts (the ones k_mmq_moe of cuda_matvec.cu, checked on a GPU, uses).
 * cp.async copies stay pending until the issuing thread waits for them, so a read of a tile
 * before its wait and barrier sees stale bytes; a barrier not reached by every thread, or a
 * collective not reached by a whole warp, is reported as a deadlock.
 * What this cannot see: the real instructions' timing and encoding (nvcc assembles those; the
 * device test tests/device/test_cuda_ops.c `mmq` runs the same cases on a GPU), and races the
 * one-at-a-time schedule hides (plain shared stores read by other threads before a barrier
 * would be visible here whenever the writer ran first).
 * Cases: q4_K and q6_K (q6_K rows of 3 super-blocks start at every 2-byte phase mod 8), T not a
 * multiple of the 64-token tile, rows not a multiple of the 128-row tile, each row's K in one
 * block or split over two (their sums added into a zeroed y, the second half's blocks run
 * first), outputs poisoned with NaN (one block per row). Prints one line per case; exit status 1 on
 * any failure. Read next: src/backend/cuda/cuda_mmq_block.cuh, src/backend/cuda/cuda_mmq.cu. */
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ucontext.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

extern "C" {
#include "quant/quant.h"
}

/* ---- the emulated block -------------------------------------------------------------------- */
namespace emu {
enum { NT = 256, STACK = 256 << 10 };
enum state { RUN, WAIT, DONE };
struct pending {
    uint8_t *dst;
    const uint8_t *src;
    int n, size;
};
struct warp_op { /* one collective in progress */
    int arrived = 0;
    uint32_t in[32][10];
    const uint8_t *addr[32];
    uint32_t out[32][4];
};
static ucontext_t sched_ctx, lane_ctx[NT];
static char *stacks;
static state st[NT];
static int cur, block_arrived;
static warp_op wop[NT / 32];
static std::vector<pending> pend[NT];
static void (*lane_fn)(int tid);
#if EMU_ASAN
static void *sched_fake, *lane_fake[NT];
static const void *sched_bottom;
static size_t sched_size;
#endif

/* Back to the scheduler (the calling lane is WAIT or DONE). */
static __attribute__((noinline)) void yield(bool finished) {
#if EMU_ASAN
    __sanitizer_start_switch_fiber(finished ? nullptr : &lane_fake[cur], sched_bottom, sched_size);
#endif
    if (finished) return; /* falls off the entry function into uc_link = the scheduler */
    swapcontext(&lane_ctx[cur], &sched_ctx);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(lane_fake[cur], nullptr, nullptr); /* cur: this lane again */
#endif
}
static void lane_entry(int tid) {
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched_bottom, &sched_size);
#endif
    lane_fn(tid);
    st[tid] = DONE;
    yield(true);
}
/* getcontext / swapcontext return twice: kept in functions of their own, so that no local of
 * a caller lives across them (-Wclobbered). */
static __attribute__((noinline)) void init_lane(int t) {
    st[t] = RUN;
    pend[t].clear();
    getcontext(&lane_ctx[t]);
    lane_ctx[t].uc_stack.ss_sp = stacks + (size_t)t * STACK;
    lane_ctx[t].uc_stack.ss_size = STACK;
    lane_ctx[t].uc_link = &sched_ctx;
    makecontext(&lane_ctx[t], (void (*)())lane_entry, 1, t);
}
static __attribute__((noinline)) void resume(int t) {
    cur = t;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&sched_fake, stacks + (size_t)t * STACK, STACK);
#endif
    swapcontext(&sched_ctx, &lane_ctx[t]);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(sched_fake, nullptr, nullptr);
#endif
}
/* Run fn(tid) for tid < 256 as one thread block; false on a deadlock. */
static bool run_block(void (*fn)(int)) {
    if (!stacks) stacks = (char *)malloc((size_t)NT * STACK);
    lane_fn = fn;
    block_arrived = 0;
    for (int t = 0; t < NT; t++) init_lane(t);
    for (int w = 0; w < NT / 32; w++) wop[w].arrived = 0;
    for (;;) {
        bool ran = false, all_done = true;
        for (int t = 0; t < NT; t++) {
            if (st[t] != DONE) all_done = false;
            if (st[t] != RUN) continue;
            ran = true;
            resume(t);
        }
        if (all_done) return true;
        if (!ran) return false;
    }
}

/* A warp collective: post this lane's inputs; the 32nd lane computes every lane's outputs. */
template <class F>
static const uint32_t *collective(const uint32_t *in, int n, const uint8_t *addr, F compute) {
    int t = cur, l = t & 31;
    warp_op &o = wop[t >> 5];
    for (int i = 0; i < n; i++) o.in[l][i] = in[i];
    o.addr[l] = addr;
    if (++o.arrived == 32) {
        compute(o);
        o.arrived = 0;
        for (int k = 0; k < 32; k++)
            if (k != l) st[(t & ~31) + k] = RUN;
    } else {
        st[t] = WAIT;
        yield(false);
    }
    return o.out[l];
}
static void block_sync() {
    int t = cur;
    if (++block_arrived == NT) {
        block_arrived = 0;
        for (int k = 0; k < NT; k++)
            if (k != t) st[k] = RUN;
    } else {
        st[t] = WAIT;
        yield(false);
    }
}
} // namespace emu

/* ---- the primitives cuda_mmq_block.cuh expects --------------------------------------------- */
#define MMQ_FN static inline
typedef const uint8_t *mmq_sa;
MMQ_FN mmq_sa mmq_sa_of(const void *p) {
    return (const uint8_t *)p;
}
MMQ_FN void mmq_sync() {
    emu::block_sync();
}
MMQ_FN void mmq_cp(void *dst, const void *src, int n, int size) {
    emu::pend[emu::cur].push_back({(uint8_t *)dst, (const uint8_t *)src, n, size});
}
MMQ_FN void mmq_cp16(void *dst, const void *src) {
    if ((uintptr_t)dst % 16 || (uintptr_t)src % 16) abort(); /* cp.async alignment */
    mmq_cp(dst, src, 16, 16);
}
MMQ_FN void mmq_cp8(void *dst, const void *src, int n) {
    if ((uintptr_t)dst % 8 || (uintptr_t)src % 8 || n < 1 || n > 8) abort();
    mmq_cp(dst, src, n, 8);
}
MMQ_FN void mmq_cp4(void *dst, const void *src) {
    if ((uintptr_t)dst % 4 || (uintptr_t)src % 4) abort();
    mmq_cp(dst, src, 4, 4);
}
MMQ_FN void mmq_cp_commit() {}
MMQ_FN void mmq_cp_wait_all() {
    for (const emu::pending &p : emu::pend[emu::cur]) {
        memcpy(p.dst, p.src, (size_t)p.n);
        memset(p.dst + p.n, 0, (size_t)(p.size - p.n));
    }
    emu::pend[emu::cur].clear();
}
/* ldmatrix .x4: matrix m's row r is 16 bytes at lane 8m + r's address; lane t receives the word
 * t % 4 of row t / 4 of each matrix. */
MMQ_FN void mmq_ldsm_x4(uint32_t *r, mmq_sa a) {
    if ((uintptr_t)a % 16) abort();
    const uint32_t *o = emu::collective(nullptr, 0, a, [](emu::warp_op &w) {
        for (int t = 0; t < 32; t++)
            for (int m = 0; m < 4; m++)
                memcpy(&w.out[t][m], w.addr[8 * m + t / 4] + 4 * (t % 4), 4);
    });
    for (int m = 0; m < 4; m++) r[m] = o[m];
}
static int8_t byte_of(uint32_t w, int i) {
    return (int8_t)(uint8_t)(w >> (8 * i));
}
/* mma.m16n8k{32,16} s8 (PTX ISA fragment layouts; g = lane / 4, q = lane % 4): A[g][4q + i]
 * from a0, A[g + 8][..] from a1, k + 16 from a2 / a3; B[4q + i][g] from b0, B[16 + 4q + i][g]
 * from b1; C/D[g][2q], [g][2q + 1], [g + 8][2q], [g + 8][2q + 1]. Inputs per lane: a0..a3, b0,
 * b1, c0..c3 (words 0..9), K = 32 or 16. */
template <int K> static void mma_compute(emu::warp_op &w) {
    int8_t A[16][32], B[32][8];
    int C[16][8];
    for (int t = 0; t < 32; t++) {
        int g = t / 4, q = t % 4;
        const uint32_t *in = w.in[t];
        for (int i = 0; i < 4; i++) {
            A[g][4 * q + i] = byte_of(in[0], i);
            A[g + 8][4 * q + i] = byte_of(in[1], i);
            B[4 * q + i][g] = byte_of(in[4], i);
            if (K == 32) {
                A[g][16 + 4 * q + i] = byte_of(in[2], i);
                A[g + 8][16 + 4 * q + i] = byte_of(in[3], i);
                B[16 + 4 * q + i][g] = byte_of(in[5], i);
            }
        }
        C[g][2 * q] = (int)in[6], C[g][2 * q + 1] = (int)in[7];
        C[g + 8][2 * q] = (int)in[8], C[g + 8][2 * q + 1] = (int)in[9];
    }
    for (int t = 0; t < 32; t++) {
        int g = t / 4, q = t % 4;
        int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * q, 2 * q + 1, 2 * q, 2 * q + 1};
        for (int e = 0; e < 4; e++) {
            int64_t s = C[rows[e]][cols[e]];
            for (int k = 0; k < K; k++) s += (int)A[rows[e]][k] * (int)B[k][cols[e]];
            w.out[t][e] = (uint32_t)(int32_t)s;
        }
    }
}
template <int K> static void mma(int *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    uint32_t in[10] = {
        a[0], a[1],           K == 32 ? a[2] : 0u, K == 32 ? a[3] : 0u, b0,
        b1,   (uint32_t)c[0], (uint32_t)c[1],      (uint32_t)c[2],      (uint32_t)c[3]};
    const uint32_t *o = emu::collective(in, 10, nullptr, mma_compute<K>);
    for (int e = 0; e < 4; e++) c[e] = (int)o[e];
}
MMQ_FN void mmq_mma32(int *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    mma<32>(c, a, b0, b1);
}
MMQ_FN void mmq_mma16(int *c, uint32_t a0, uint32_t a1, uint32_t b0) {
    const uint32_t a[4] = {a0, a1, 0u, 0u};
    mma<16>(c, a, b0, 0u);
}
MMQ_FN void mmq_atomic_add(float *p, float v) { /* threads run one at a time */
    *p += v;
}
MMQ_FN uint32_t mmq_shfl(uint32_t v, int m) {
    uint32_t in[2] = {v, (uint32_t)m};
    return emu::collective(in, 2, nullptr, [](emu::warp_op &w) {
        for (int t = 0; t < 32; t++) w.out[t][0] = w.in[t ^ (int)w.in[t][1]][0];
    })[0];
}
MMQ_FN float mmq_shfl_xor_f(float v, int m) {
    uint32_t u;
    memcpy(&u, &v, 4);
    u = mmq_shfl(u, m);
    memcpy(&v, &u, 4);
    return v;
}
MMQ_FN int mmq_shfl_xor_i(int v, int m) {
    return (int)mmq_shfl((uint32_t)v, m);
}
MMQ_FN uint32_t mmq_funnel_r(uint32_t lo, uint32_t hi, int s) {
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (s & 31));
}
MMQ_FN uint32_t mmq_byte_perm(uint32_t x, uint32_t y, int s) { /* 3-bit selectors */
    uint64_t v = ((uint64_t)y << 32) | x;
    uint32_t r = 0;
    for (int n = 0; n < 4; n++)
        r |= (uint32_t)((v >> (8 * ((s >> (4 * n)) & 7))) & 0xff) << (8 * n);
    return r;
}
MMQ_FN uint32_t mmq_vsub4(uint32_t a, uint32_t b) {
    uint32_t r = 0;
    for (int n = 0; n < 4; n++) r |= (((a >> (8 * n)) - (b >> (8 * n))) & 0xffu) << (8 * n);
    return r;
}
MMQ_FN int mmq_f2i_rn(float f) {
    return (int)nearbyintf(f);
}
MMQ_FN float mmq_h2f(uint16_t h) {
    return snug_f16_to_f32(h);
}
MMQ_FN float mmq_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
MMQ_FN uint32_t mmq_float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

#include "backend/cuda/cuda_mmq_block.cuh"

/* ---- the launches, emulated ---------------------------------------------------------------- */
static uint8_t *g_sm;
static mmq_args g_p;
static int64_t g_bx, g_by, g_nblk;
static int g_bz;
static const float *g_x;
static int8_t *g_qx;
static float *g_xd;
static uint8_t *g_xm;

template <int TYPE> static void mmq_thread(int tid) {
    mmq_block<TYPE>(g_sm, tid, g_bx, g_by, g_bz, g_p);
}
static void quant_thread(int tid) { /* k_quant_a256: 8 warps a block, one 256-block a warp */
    int64_t b = g_bx * 8 + (tid >> 5);
    if (b < g_nblk) mmq_quant_lane(g_x, b, tid & 31, g_qx, g_xd, g_xm);
}

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static float frand() { /* [-1, 1) */
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static int g_fail;

/* One product: random weights (snug_quantize_row) and x; the emulated quantiser and kernel
 * against the CPU's int8 product and the exact product. */
template <int TYPE> static void run_case(int64_t n_in, int64_t n_out, int64_t T, int ksplit) {
    const struct snug_dtype_info *ti = snug_dtype_info(TYPE);
    size_t rb = snug_dtype_row_bytes(TYPE, (uint64_t)n_in);
    /* the weights at a 16-byte-aligned base, as the device's are */
    std::vector<uint8_t> wbuf(rb * (size_t)n_out + 64);
    uint8_t *w = (uint8_t *)(((uintptr_t)wbuf.data() + 15) & ~(uintptr_t)15);
    std::vector<float> src((size_t)n_in), x((size_t)(T * n_in));
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++) src[(size_t)i] = frand() * (1.0f + (float)(r % 5));
        snug_quantize_row(TYPE, src.data(), w + (size_t)r * rb, n_in, nullptr);
    }
    for (int64_t i = 0; i < T * n_in; i++) x[(size_t)i] = frand() * (i % 97 == 0 ? 40.0f : 1.0f);
    /* emulated quantiser */
    int64_t nsb = n_in / 256, nblk = T * nsb;
    std::vector<int8_t> qx((size_t)(T * n_in));
    std::vector<float> xd((size_t)nblk);
    std::vector<uint8_t> xm((size_t)nblk * 16);
    g_x = x.data(), g_qx = qx.data(), g_xd = xd.data(), g_xm = xm.data(), g_nblk = nblk;
    for (g_bx = 0; g_bx < (nblk + 7) / 8; g_bx++)
        if (!emu::run_block(quant_thread)) {
            printf("FAIL quantiser: deadlock\n");
            g_fail = 1;
            return;
        }
    /* the CPU's A256 rows: the same bytes, scale and 32-sums */
    size_t ab = snug_act_row_bytes(TYPE, n_in);
    std::vector<uint8_t> xq(ab * (size_t)T);
    long qbad = 0;
    for (int64_t t = 0; t < T; t++) {
        uint8_t *a = xq.data() + (size_t)t * ab;
        snug_act_quantize(TYPE, x.data() + t * n_in, a, n_in);
        for (int64_t s = 0; s < nsb; s++) {
            const uint8_t *blk = a + s * 292; /* qs[256] | float d | int16 bsums[16] */
            int64_t b = t * nsb + s;
            qbad += memcmp(blk, qx.data() + b * 256, 256) != 0;
            float d;
            memcpy(&d, blk + 256, 4);
            qbad += memcmp(&d, &xd[(size_t)b], 4) != 0;
            for (int j = 0; j < 8; j++) {
                int16_t s0, s1;
                memcpy(&s0, blk + 260 + 4 * j, 2), memcpy(&s1, blk + 262 + 4 * j, 2);
                int S = s0 + s1, l = xm[(size_t)b * 16 + j], h = (int8_t)xm[(size_t)b * 16 + 8 + j];
                qbad += 128 * h + l != S || l > 127;
            }
        }
    }
    if (qbad) {
        printf("FAIL quantiser %s n_in=%lld T=%lld: %ld of the blocks' bytes/scales/sums differ "
               "from the CPU's A256\n",
               ti->name, (long long)n_in, (long long)T, qbad);
        g_fail = 1;
    }
    /* emulated kernel: every block of the grid */
    std::vector<float> y((size_t)(T * n_out), ksplit == 2 ? 0.0f : NAN); /* launcher zeroes */
    std::vector<uint8_t> smbuf(mmq_smem<TYPE>() + 16);
    g_sm = (uint8_t *)(((uintptr_t)smbuf.data() + 15) & ~(uintptr_t)15);
    memset(g_sm, 0xa5, mmq_smem<TYPE>());
    g_p = mmq_args{w, rb, (int)n_in, n_out, T, qx.data(), xd.data(), xm.data(), y.data(), ksplit};
    for (g_bz = ksplit - 1; g_bz >= 0; g_bz--) /* the second half first: order must not matter */
        for (g_by = 0; g_by < (n_out + MMQ_BM - 1) / MMQ_BM; g_by++)
            for (g_bx = 0; g_bx < (T + MMQ_BN - 1) / MMQ_BN; g_bx++)
                if (!emu::run_block(mmq_thread<TYPE>)) {
                    printf("FAIL mmq %s: deadlock in block (%lld, %lld)\n", ti->name,
                           (long long)g_bx, (long long)g_by);
                    g_fail = 1;
                    return;
                }
    /* references: the CPU's int8 product; the exact product of the decoded weights with the
     * rounded x */
    std::vector<float> wrow((size_t)n_in), xe((size_t)(T * n_in));
    for (int64_t i = 0; i < T * n_in; i++)
        xe[(size_t)i] = (float)qx[(size_t)i] * xd[(size_t)(i / 256)];
    double mx = 0, e_cpu = 0, e_exact = 0;
    long nan = 0;
    for (int64_t r = 0; r < n_out; r++) {
        snug_dequantize_row(TYPE, w + (size_t)r * rb, wrow.data(), n_in);
        for (int64_t t = 0; t < T; t++) {
            float cpu;
            snug_act_dot(TYPE, w + (size_t)r * rb, xq.data() + (size_t)t * ab, 0, 1, n_in, &cpu);
            double ex = 0;
            for (int64_t i = 0; i < n_in; i++)
                ex += (double)wrow[(size_t)i] * xe[(size_t)(t * n_in + i)];
            float got = y[(size_t)(t * n_out + r)];
            if (!std::isfinite(got)) nan++;
            mx = fmax(mx, fabs(ex));
            e_cpu = fmax(e_cpu, fabs((double)got - cpu));
            e_exact = fmax(e_exact, fabs((double)got - ex));
        }
    }
    double rc = e_cpu / (mx > 0 ? mx : 1), re = e_exact / (mx > 0 ? mx : 1);
    bool ok = nan == 0 && rc <= 1e-5 && re <= 1e-5;
    printf("%s mmq %s n_in=%-5lld n_out=%-4lld T=%-4lld K parts %d: rel. to the CPU int8 op %.2e, "
           "to the exact product %.2e, unwritten %ld\n",
           ok ? "PASS" : "FAIL", ti->name, (long long)n_in, (long long)n_out, (long long)T, ksplit,
           rc, re, nan);
    if (!ok) g_fail = 1;
}

int main() {
    run_case<SNUG_DTYPE_Q4_K>(512, 130, 70, 1); /* two partial tiles each way */
    run_case<SNUG_DTYPE_Q4_K>(256, 37, 9, 1);   /* one super-block, one partial tile */
    run_case<SNUG_DTYPE_Q6_K>(768, 130, 70, 1); /* rows of 630 bytes: every phase mod 8 */
    run_case<SNUG_DTYPE_Q6_K>(256, 131, 65, 1); /* rows of 210 bytes */
    run_case<SNUG_DTYPE_Q4_K>(768, 130, 9, 2);  /* K in two halves of 1 and 2 super-blocks */
    run_case<SNUG_DTYPE_Q6_K>(768, 37, 70, 2);
    free(emu::stacks);
    printf("%s\n", g_fail ? "test_cuda_mmq_host: FAIL" : "test_cuda_mmq_host: PASS");
    return g_fail;
}
