/* ops_delta.c — the gated delta rule of the Gated DeltaNet layers (docs/qwen35.md §2.5 step 7,
 * §2.6): the token-by-token recurrence for decode and the chunked (C = 64) WY form for prompts.
 * Both are parallel over value heads (each head's state S_j [dk][dv] is independent); value
 * head j reads key/query head j % Nk (GGUF order, docs/qwen35.md §4.4).
 * Invariant: the state stays float32; the chunked form's scratch (DN_CHUNK·(dk+dv+6) floats
 * per thread) does not depend on T; nothing allocates.
 * Read next: ops_attention.c, src/arch/qwen35.c (the caller). */
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_util.h"
#include "core/core.h"

#define DN_CHUNK 64 /* chunk length of the WY form (docs/qwen35.md §2.6, as HF and llama.cpp) */
#define DN_COLS  64 /* state columns per pass in the step form */

struct dn_ctx {
    int64_t T, Nk, Nv, dk, dv;
    const float *q, *k, *v, *g, *beta;
    float *state, *out;
    uint8_t *work;
    size_t per_thread;
};

/* ---- step form ---------------------------------------------------------------------------- */

/* One value head, T tokens, the recurrence of ops.h. With S' = e^g S + k δᵀ the output is
 * S'ᵀq = e^g Sᵀq + (k·q) δ, so one read of S gives both Sᵀk (for δ) and Sᵀq, and a second
 * pass writes S'. Columns of S are independent, so this runs DN_COLS columns at a time with
 * its vectors on the stack. */
SNUG_OPS_CLONES
static void dn_step_head(const struct dn_ctx *c, int64_t j) {
    int64_t dk = c->dk, dv = c->dv, kh = j % c->Nk;
    float *S = c->state + j * dk * dv;
    for (int64_t t = 0; t < c->T; t++) {
        const float *q = c->q + (t * c->Nk + kh) * dk, *k = c->k + (t * c->Nk + kh) * dk;
        const float *v = c->v + (t * c->Nv + j) * dv;
        float *o = c->out + (t * c->Nv + j) * dv;
        float decay = expf(c->g[t * c->Nv + j]), beta = c->beta[t * c->Nv + j];
        float kq = snug_ops_dot(k, q, dk);
        for (int64_t v0 = 0; v0 < dv; v0 += DN_COLS) {
            int64_t nc = SNUG_MIN((int64_t)DN_COLS, dv - v0);
            float sk[DN_COLS] = {0}, sq[DN_COLS] = {0}, delta[DN_COLS];
            snug_ops_vm2(k, q, S + v0, dk, nc, dv, sk, sq);
            for (int64_t x = 0; x < nc; x++) {
                delta[x] = beta * (v[v0 + x] - decay * sk[x]);
                o[v0 + x] = decay * sq[x] + kq * delta[x];
            }
            for (int64_t i = 0; i < dk; i++)
                snug_ops_axpby(S + i * dv + v0, decay, k[i], delta, nc);
        }
    }
}

static void dn_step_task(void *vctx, int ith, int nth) {
    const struct dn_ctx *c = vctx;
    long lo, hi;
    snug_split_range((long)c->Nv, ith, nth, &lo, &hi);
    for (long j = lo; j < hi; j++) dn_step_head(c, j);
}

void snug_op_gated_delta_step(struct snug_pool *pool, int64_t T, int64_t Nk, int64_t Nv, int64_t dk,
                              int64_t dv, const float *q, const float *k, const float *v,
                              const float *g, const float *beta, float *state, float *out) {
    SNUG_ASSERT(Nk > 0 && Nv > 0);
    struct dn_ctx c = {.T = T,
                       .Nk = Nk,
                       .Nv = Nv,
                       .dk = dk,
                       .dv = dv,
                       .q = q,
                       .k = k,
                       .v = v,
                       .g = g,
                       .beta = beta,
                       .state = state,
                       .out = out};
    snug_pool_run(pool, dn_step_task, &c);
}

/* ---- chunked (WY) form -------------------------------------------------------------------- */

static size_t dn_stride(int64_t dk, int64_t dv) {
    size_t floats = (size_t)(DN_CHUNK * (dk + dv + 6)); /* U, W, γ, β, 4 coefficient rows */
    return SNUG_ALIGN_UP(floats * sizeof(float), 64);
}

size_t snug_op_gated_delta_work_bytes(int64_t dk, int64_t dv, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    return dn_stride(dk, dv) * (size_t)n_threads + 64;
}

/* One value head over all chunks of T, carrying S between chunks (docs/qwen35.md §2.6). Within a
 * chunk of n ≤ 64 tokens (r, s index tokens of the chunk; γ = in-chunk cumulative log-decay):
 *   A[r][s] = β_r (k_r·k_s) e^{γ_r−γ_s} for s < r;
 *   U = (I+A)⁻¹ diag(β) V and W = (I+A)⁻¹ diag(βΓ) K, solved row by row by forward
 *   substitution (X_r = rhs_r − Σ_{s<r} A[r][s] X_s), the same as forming T = (I+A)⁻¹ first;
 *   V' = U − W S  (in place over U);
 *   O_r = Γ_r Sᵀq_r + Σ_{s≤r} e^{γ_r−γ_s} (q_r·k_s) V'_s;
 *   S ← e^{γ_n} S + Σ_r e^{γ_n−γ_r} k_r V'_rᵀ.
 * A last partial chunk simply has n < 64 (the zero padding of the spec contributes nothing). */
/* coef[s] = scale(s) · (b · K_s) for s < n (K rows of stride ldk): the dots four key rows at a
 * time sharing the loads of b; scale(s) = e^{γ_r − γ_s} · f. */
SNUG_OPS_INLINE void dn_dots(const float *b, const float *K, int64_t ldk, int64_t n, int64_t dk,
                             const float *gam, float gr, float f, float *coef) {
    for (int64_t s0 = 0; s0 < n; s0 += 4) {
        int nr = (int)SNUG_MIN((int64_t)4, n - s0);
        const float *rows[4];
        float d[4];
        for (int x = 0; x < nr; x++) rows[x] = K + (s0 + x) * ldk;
        snug_ops_dot_rows(rows, nr, b, dk, d);
        for (int x = 0; x < nr; x++) coef[s0 + x] = f * d[x] * expf(gr - gam[s0 + x]);
    }
}

/* One value head over all chunks of T, carrying S between chunks (docs/qwen35.md §2.6). Within a
 * chunk of n ≤ 64 tokens (r, s index tokens of the chunk; γ = in-chunk cumulative log-decay):
 *   A[r][s] = β_r (k_r·k_s) e^{γ_r−γ_s} for s < r;
 *   U = (I+A)⁻¹ diag(β) V and W = (I+A)⁻¹ diag(βΓ) K, solved row by row by forward
 *   substitution (X_r = rhs_r − Σ_{s<r} A[r][s] X_s), the same as forming T = (I+A)⁻¹ first;
 *   V' = U − W S  (in place over U);
 *   O_r = Γ_r Sᵀq_r + Σ_{s≤r} e^{γ_r−γ_s} (q_r·k_s) V'_s;
 *   S ← e^{γ_n} S + Σ_r e^{γ_n−γ_r} k_r V'_rᵀ.
 * A last partial chunk simply has n < 64 (the zero padding of the spec contributes nothing).
 * The products over S and U go four rows at a time (snug_ops_vm4: each row of S or U is read
 * once per four output rows); the per-element summation order is that of one row at a time. */
SNUG_OPS_CLONES
static void dn_chunk_head(const struct dn_ctx *c, int64_t j, float *buf) {
    int64_t dk = c->dk, dv = c->dv, kh = j % c->Nk, Nv = c->Nv;
    int64_t ldq = c->Nk * dk, ldv = Nv * dv;
    float *U = buf, *W = U + DN_CHUNK * dv; /* W holds −W, so V' = U + (−W) S */
    float *gam = W + DN_CHUNK * dk, *bet = gam + DN_CHUNK, *coef = bet + DN_CHUNK;
    float *cf[4] = {coef, coef + DN_CHUNK, coef + 2 * DN_CHUNK, coef + 3 * DN_CHUNK};
    float *S = c->state + j * dk * dv;
    for (int64_t c0 = 0; c0 < c->T; c0 += DN_CHUNK) {
        int64_t n = SNUG_MIN((int64_t)DN_CHUNK, c->T - c0);
        const float *Q = c->q + c0 * ldq + kh * dk, *K = c->k + c0 * ldq + kh * dk;
        const float *V = c->v + c0 * ldv + j * dv;
        float *O = c->out + c0 * ldv + j * dv;
        float acc = 0.0f;
        for (int64_t r = 0; r < n; r++) {
            acc += c->g[(c0 + r) * Nv + j];
            gam[r] = acc;
            bet[r] = c->beta[(c0 + r) * Nv + j];
        }
        /* Row r of A (as −A[r][s] in coef), then U_r and −W_r by forward substitution. */
        for (int64_t r = 0; r < n; r++) {
            const float *kr = K + r * ldq;
            float *Ur = U + r * dv, *Wr = W + r * dk, bG = -bet[r] * expf(gam[r]);
            for (int64_t x = 0; x < dv; x++) Ur[x] = bet[r] * V[r * ldv + x];
            for (int64_t i = 0; i < dk; i++) Wr[i] = bG * kr[i];
            dn_dots(kr, K, ldq, r, dk, gam, gam[r], -bet[r], coef);
            snug_ops_vm1(coef, U, r, dv, dv, Ur);
            snug_ops_vm1(coef, W, r, dk, dk, Wr);
        }
        /* V' = U − W S (over U) and Sᵀq_r in one read of S for two tokens; then
         * O_r = Γ_r Sᵀq_r plus the in-chunk terms Σ_{s≤r} e^{γ_r−γ_s} (q_r·k_s) V'_s. */
        int64_t r = 0;
        for (; r < n; r++) memset(O + r * ldv, 0, (size_t)dv * sizeof(float));
        for (r = 0; r + 2 <= n; r += 2) {
            const float *A4[4] = {W + r * dk, Q + r * ldq, W + (r + 1) * dk, Q + (r + 1) * ldq};
            float *Y4[4] = {U + r * dv, O + r * ldv, U + (r + 1) * dv, O + (r + 1) * ldv};
            snug_ops_vm4(A4, S, dk, dv, dv, Y4);
        }
        if (r < n) snug_ops_vm2(W + r * dk, Q + r * ldq, S, dk, dv, dv, U + r * dv, O + r * ldv);
        for (r = 0; r < n; r++) snug_ops_scale(O + r * ldv, expf(gam[r]), dv);
        for (r = 0; r + 4 <= n; r += 4) {
            float *Y4[4];
            for (int x = 0; x < 4; x++) {
                int64_t rx = r + x;
                dn_dots(Q + rx * ldq, K, ldq, rx + 1, dk, gam, gam[rx], 1.0f, cf[x]);
                for (int64_t s2 = rx + 1; s2 < r + 4; s2++) cf[x][s2] = 0.0f;
                Y4[x] = O + rx * ldv;
            }
            snug_ops_vm4((const float *const *)cf, U, r + 4, dv, dv, Y4);
        }
        for (; r < n; r++) {
            dn_dots(Q + r * ldq, K, ldq, r + 1, dk, gam, gam[r], 1.0f, coef);
            snug_ops_vm1(coef, U, r + 1, dv, dv, O + r * ldv);
        }
        /* S ← e^{γ_n} S + Σ_r e^{γ_n−γ_r} k_r V'_rᵀ, four rows i of S at a time; bet[] now
         * holds e^{γ_n−γ_r}. */
        float gn = gam[n - 1], dn = expf(gn);
        for (r = 0; r < n; r++) bet[r] = expf(gn - gam[r]);
        for (int64_t i = 0; i < dk; i++) snug_ops_scale(S + i * dv, dn, dv);
        int64_t i = 0;
        for (; i + 4 <= dk; i += 4) {
            float *Y4[4];
            for (int x = 0; x < 4; x++) {
                for (r = 0; r < n; r++) cf[x][r] = bet[r] * K[r * ldq + i + x];
                Y4[x] = S + (i + x) * dv;
            }
            snug_ops_vm4((const float *const *)cf, U, n, dv, dv, Y4);
        }
        for (; i < dk; i++) {
            for (r = 0; r < n; r++) coef[r] = bet[r] * K[r * ldq + i];
            snug_ops_vm1(coef, U, n, dv, dv, S + i * dv);
        }
    }
}

static void dn_chunk_task(void *vctx, int ith, int nth) {
    const struct dn_ctx *c = vctx;
    float *buf = (float *)(c->work + c->per_thread * (size_t)ith);
    long lo, hi;
    snug_split_range((long)c->Nv, ith, nth, &lo, &hi);
    for (long j = lo; j < hi; j++) dn_chunk_head(c, j, buf);
}

void snug_op_gated_delta_chunked(struct snug_pool *pool, int64_t T, int64_t Nk, int64_t Nv,
                                 int64_t dk, int64_t dv, const float *q, const float *k,
                                 const float *v, const float *g, const float *beta, float *state,
                                 float *out, void *work) {
    SNUG_ASSERT(Nk > 0 && Nv > 0 && work != NULL);
    struct dn_ctx c = {.T = T,
                       .Nk = Nk,
                       .Nv = Nv,
                       .dk = dk,
                       .dv = dv,
                       .q = q,
                       .k = k,
                       .v = v,
                       .g = g,
                       .beta = beta,
                       .state = state,
                       .out = out,
                       .work = (uint8_t *)SNUG_ALIGN_UP((uintptr_t)work, 64),
                       .per_thread = dn_stride(dk, dv)};
    snug_pool_run(pool, dn_chunk_task, &c);
}
