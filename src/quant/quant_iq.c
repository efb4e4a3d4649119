/* quant_iq.c — the 1-3 bit i-quant encoders: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
 * IQ1_M, and the lattice search tables they need.
 *
 * The algorithms are llama.cpp's (ggml/src/ggml-quants.c: quantize_row_iq2_xxs_impl,
 * _iq2_xs_impl, _iq2_s_impl, _iq3_xxs_impl, _iq3_s_impl, _iq1_s_impl, _iq1_m_impl and the
 * tables of iq2xs_init_impl / iq3xs_init_impl), re-implemented here in our own words so that
 * a tensor we write has the same bytes as the one llama-quantize writes from the same source
 * and importance matrix. What they do, in short:
 *  - every grid point of a type is a short vector (8 or 4 elements) of small levels; the
 *    encoders work on magnitudes (signs are stored apart), round each group of 8 (or 4) to
 *    levels for a trial scale and, when that vector is not a grid point, take the grid point
 *    among its precomputed neighbours with the least weighted error;
 *  - IQ2_XXS/XS/S and IQ3_XXS/S try a fan of scales around max/(2·kmax−1) and keep the one with
 *    the largest (Σwxq)²/Σwq², re-round once with the least-squares scale, then store the
 *    sub-block scales as 4-bit multiples of a per-super-block f16 scale;
 *  - IQ1_S/M (levels −1, 0, +1 shifted by ±1/8) search exhaustively over the two cut points of
 *    the sorted values, per 32 (IQ1_S) or 16 (IQ1_M, each half of 8 with its own shift).
 * The neighbour table of a lattice: for every level vector that is not a grid point, the grid
 * points at the nearest `nwant` distinct squared distances, ordered by (distance, index) —
 * ggml's qsort order exactly. They are built once per lattice on first use (pthread_once,
 * snug_malloc'd; the library has no teardown hook, so they live as long as the process and
 * stay reachable from g_lat: 2.1 MiB for all six lattices).
 * Invariant: no allocation after a table exists; NaN/inf input gives some block, never a crash
 * or an undefined conversion (ggml asserts or reads out of bounds there; these diverge only
 * for non-finite input). Without importance data (imatrix == NULL) the types that ggml
 * refuses to quantize without it use uniform importance; the callers refuse those anyway.
 * Read next: quant_lowbit.c (the decoders and layouts), quant_quantize.c (the entry point). */
#include "core/core.h"
#include "quant.h"
#include "quant_grids.h"
#include "quant_iq.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

static inline void put_f16(uint8_t *p, float f) {
    uint16_t h = snug_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* ggml's nearest_int (round half to even) for the magnitudes that occur, clamped to [lo, hi]
 * first so NaN and huge values stay defined. */
static inline int near_clamp(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)lrintf(v);
}

/* ---- lattices and their neighbour tables -------------------------------------------------- */

enum { LAT_IQ2XXS, LAT_IQ2XS, LAT_IQ2S, LAT_IQ1S, LAT_IQ3XXS, LAT_IQ3S, LAT_COUNT };

struct lattice {
    int n_grid, dims, bits; /* grid points, elements per point, bits per level in a key */
    int n_key;              /* keys: sum of level_k << (bits*k), levels 0..max_level */
    int max_level, nwant;
    uint8_t *level; /* n_grid × dims levels of the grid points */
    int32_t *map;   /* per key: grid index, or -(offset + 1) into nbr, or INT32_MIN (unused) */
    uint16_t *nbr;  /* at an offset: count, then that many grid indices */
    bool ok;        /* built (false after an allocation failure) */
};

static struct lattice g_lat[LAT_COUNT];

/* The level of element j of grid point k, read from the decoding grids (quant_grids.c):
 * IQ2 bytes 8/25/43 are levels 0/1/2, IQ1 bytes −1/0/1 are 0/1/2, IQ3_XXS bytes 4, 12, ..,
 * 52, 62 are 0..7, IQ3_S odd bytes 1..15 are 0..7. */
static int grid_level(int lat, int k, int j) {
    switch (lat) {
    case LAT_IQ2XXS:
    case LAT_IQ2XS:
    case LAT_IQ2S: {
        const uint64_t *g = lat == LAT_IQ2XXS  ? snug_iq2xxs_grid
                            : lat == LAT_IQ2XS ? snug_iq2xs_grid
                                               : snug_iq2s_grid;
        int b = (int)((g[k] >> (8 * j)) & 0xff);
        return b == 8 ? 0 : b == 25 ? 1 : 2;
    }
    case LAT_IQ1S:
        return (int)(int8_t)((snug_iq1s_grid[k] >> (8 * j)) & 0xff) + 1;
    case LAT_IQ3XXS:
        return (int)((snug_iq3xxs_grid[k] >> (8 * j)) & 0xff) / 8;
    default:
        return ((int)((snug_iq3s_grid[k] >> (8 * j)) & 0xff) - 1) / 2;
    }
}

static bool lattice_build(int id, int n_grid, int dims, int bits, int nwant) {
    struct lattice *L = &g_lat[id];
    L->n_grid = n_grid, L->dims = dims, L->bits = bits, L->nwant = nwant;
    L->max_level = bits == 2 ? 2 : 7;
    /* ggml's key ranges: 43692 for 8 two-bit levels (all of 0..2 fit below it), 4096 for four
     * three-bit ones */
    L->n_key = bits == 2 ? 43692 : 4096;
    L->level = snug_malloc((size_t)n_grid * (size_t)dims);
    L->map = snug_malloc((size_t)L->n_key * sizeof *L->map);
    int *d2 = snug_malloc((size_t)n_grid * sizeof *d2);
    size_t cap = (size_t)1 << 18, used = 0;
    L->nbr = snug_malloc(cap * sizeof *L->nbr);
    if (!L->level || !L->map || !d2 || !L->nbr) goto fail;
    for (int k = 0; k < n_grid; k++)
        for (int j = 0; j < dims; j++) L->level[k * dims + j] = (uint8_t)grid_level(id, k, j);
    for (int i = 0; i < L->n_key; i++) L->map[i] = -1;
    for (int k = 0; k < n_grid; k++) {
        int key = 0;
        for (int j = 0; j < dims; j++) key |= L->level[k * dims + j] << (bits * j);
        L->map[key] = k;
    }
    const int mask = (1 << bits) - 1;
    for (int key = 0; key < L->n_key; key++) {
        if (L->map[key] >= 0) continue;
        int lv[8];
        bool usable = true;
        for (int j = 0; j < dims; j++) {
            lv[j] = (key >> (bits * j)) & mask;
            if (lv[j] > L->max_level) usable = false;
        }
        if (!usable) { /* a key no encoder forms (a level above the clamp) */
            L->map[key] = INT32_MIN;
            continue;
        }
        for (int k = 0; k < n_grid; k++) {
            const uint8_t *g = L->level + k * dims;
            int s = 0;
            for (int j = 0; j < dims; j++) s += (g[j] - lv[j]) * (g[j] - lv[j]);
            d2[k] = s;
        }
        /* the nwant smallest distinct distances, then every point at them in (d2, index) order */
        int thr[3], n_thr = 0;
        for (; n_thr < nwant; n_thr++) {
            int lo = n_thr ? thr[n_thr - 1] : -1, best = INT32_MAX;
            for (int k = 0; k < n_grid; k++)
                if (d2[k] > lo && d2[k] < best) best = d2[k];
            if (best == INT32_MAX) break;
            thr[n_thr] = best;
        }
        size_t need = used + 1 + (size_t)n_grid; /* < 43692·2049: the offsets fit an int32 */
        if (need > cap) {
            size_t ncap = cap * 2;
            while (ncap < need) ncap *= 2;
            uint16_t *nb = snug_malloc(ncap * sizeof *nb);
            if (!nb) goto fail;
            memcpy(nb, L->nbr, used * sizeof *nb);
            snug_free(L->nbr);
            L->nbr = nb, cap = ncap;
        }
        size_t start = used++;
        int n = 0;
        for (int t = 0; t < n_thr; t++)
            for (int k = 0; k < n_grid; k++)
                if (d2[k] == thr[t]) L->nbr[used++] = (uint16_t)k, n++;
        L->nbr[start] = (uint16_t)n;
        L->map[key] = -(int32_t)start - 1;
    }
    snug_free(d2);
    d2 = NULL;
    uint16_t *exact = snug_malloc(used * sizeof *exact); /* give back the doubling slack */
    if (exact) {
        memcpy(exact, L->nbr, used * sizeof *exact);
        snug_free(L->nbr);
        L->nbr = exact;
    }
    L->ok = true;
    return true;
fail:
    snug_free(d2);
    snug_free(L->level);
    snug_free(L->map);
    snug_free(L->nbr);
    memset(L, 0, sizeof *L);
    return false;
}

/* ggml's nwant: 2 distinct distances for IQ2_XXS/XS and IQ3_XXS, 1 for IQ2_S, 3 for IQ1 and
 * IQ3_S. */
static void init_iq2xxs(void) {
    lattice_build(LAT_IQ2XXS, 256, 8, 2, 2);
}
static void init_iq2xs(void) {
    lattice_build(LAT_IQ2XS, 512, 8, 2, 2);
}
static void init_iq2s(void) {
    lattice_build(LAT_IQ2S, 1024, 8, 2, 1);
}
static void init_iq1s(void) {
    lattice_build(LAT_IQ1S, 2048, 8, 2, 3);
}
static void init_iq3xxs(void) {
    lattice_build(LAT_IQ3XXS, 256, 4, 3, 2);
}
static void init_iq3s(void) {
    lattice_build(LAT_IQ3S, 512, 4, 3, 3);
}

static pthread_once_t g_once[LAT_COUNT] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
                                           PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};
static void (*const g_init[LAT_COUNT])(void) = {init_iq2xxs, init_iq2xs,  init_iq2s,
                                                init_iq1s,   init_iq3xxs, init_iq3s};

static const struct lattice *lattice_get(int id) {
    pthread_once(&g_once[id], g_init[id]);
    return g_lat[id].ok ? &g_lat[id] : NULL;
}

/* The key of `dims` levels. */
static inline int lat_key(const struct lattice *lat, const int8_t *l) {
    int key = 0;
    for (int j = 0; j < lat->dims; j++) key |= l[j] << (lat->bits * j);
    return key;
}

/* The neighbour of an off-grid key with the least Σ w (scale·(2l+1) − x)² (first one on ties);
 * writes its levels to l and returns its index. */
static int nearest_neighbour(const struct lattice *lat, int key, const float *x, const float *w,
                             float scale, int8_t *l) {
    const uint16_t *nb = lat->nbr + (-lat->map[key] - 1);
    int best = nb[1];
    float best_d2 = FLT_MAX;
    for (int j = 1; j <= nb[0]; j++) {
        const uint8_t *g = lat->level + nb[j] * lat->dims;
        float d2 = 0;
        for (int i = 0; i < lat->dims; i++) {
            float q = (float)(2 * g[i] + 1);
            float diff = scale * q - x[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) best_d2 = d2, best = nb[j];
    }
    const uint8_t *g = lat->level + best * lat->dims;
    for (int i = 0; i < lat->dims; i++) l[i] = (int8_t)g[i];
    return best;
}

/* The grid index of a group's levels; an off-grid key (only reachable with non-finite input)
 * takes its first neighbour and rewrites the levels. */
static int grid_index_of(const struct lattice *lat, int8_t *l) {
    int key = lat_key(lat, l);
    int32_t m = lat->map[key];
    if (m >= 0) return m;
    int idx = m == INT32_MIN ? 0 : lat->nbr[-m - 1 + 1];
    const uint8_t *g = lat->level + idx * lat->dims;
    for (int i = 0; i < lat->dims; i++) l[i] = (int8_t)g[i];
    return idx;
}

/* ---- shared pieces of the IQ2/IQ3 encoders -------------------------------------------------- */

/* The per-element weights: imatrix·sqrt(σ² + x²) with importance data, else the type's
 * default (x² for IQ3/IQ1_M, σ²/4 + x² for IQ2_S, uniform importance for the types ggml
 * refuses to quantize without it). */
enum wmode { W_UNIFORM_IM, W_X2, W_IQ2S };

static void make_weights(const float *x, const float *qw, int n, float sigma2, enum wmode m,
                         float *w) {
    for (int i = 0; i < n; i++) {
        if (qw)
            w[i] = qw[i] * sqrtf(sigma2 + x[i] * x[i]);
        else if (m == W_X2)
            w[i] = x[i] * x[i];
        else if (m == W_IQ2S)
            w[i] = 0.25f * sigma2 + x[i] * x[i];
        else
            w[i] = sqrtf(sigma2 + x[i] * x[i]);
    }
}

/* Magnitudes and sign bits of 8 values. With `even` (the types that store 7 sign bits and
 * imply the 8th by parity), an odd count of minus signs is made even by giving the element
 * with the least w·x² its sign back (its magnitude value turns negative). */
static uint8_t split_signs(const float *x, const float *w, bool even, float *xval) {
    uint8_t s = 0;
    int nflip = 0;
    for (int i = 0; i < 8; i++) {
        if (x[i] >= 0) {
            xval[i] = x[i];
        } else {
            xval[i] = -x[i];
            nflip++;
            s |= (uint8_t)(1u << i);
        }
    }
    if (even && nflip % 2) {
        int imin = 0;
        float min = w[0] * x[0] * x[0];
        for (int i = 1; i < 8; i++) {
            float a = w[i] * x[i] * x[i];
            if (a < min) min = a, imin = i;
        }
        xval[imin] = -xval[imin];
        s ^= (uint8_t)(1u << imin);
    }
    return even ? (uint8_t)(s & 127) : s;
}

/* How one of the fan-search types runs (the differences between ggml's five encoders). */
struct fan {
    int kmax;         /* levels 0..kmax−1 (q = 2l + 1) */
    int is_lo, is_hi; /* trial inverse scales (2·kmax − 1 + is·step)/max */
    float step;
    bool from_qp;       /* IQ2_XXS: the fan is around make_qp_quants's scale, not max */
    bool start_on_grid; /* the "on grid" flags before the fan (IQ3_S: false) */
    bool refine_all;    /* the re-rounding redoes every group, not only off-grid ones */
    bool refine_always; /* ... and runs whenever the scale is positive (IQ2_XXS) */
};

/* The Σwxq, Σwq² of levels l over n elements. */
static void sums(const float *xval, const float *w, const int8_t *l, int n, float *sqx,
                 float *sq2) {
    float a = 0, b = 0;
    for (int i = 0; i < n; i++) {
        float q = (float)(2 * l[i] + 1);
        a += w[i] * xval[i] * q;
        b += w[i] * q * q;
    }
    *sqx = a, *sq2 = b;
}

/* Rounds every group (or only the off-grid ones) of xval at scale `scale` to levels, moving
 * off-grid vectors to their best neighbour. onoff: per group, whether the rounding hit the grid
 * (NULL: not tracked). */
static void round_groups(const struct lattice *lat, const struct fan *f, int n, const float *xval,
                         const float *waux, float id, float scale, int8_t *l, bool *on_grid,
                         const bool *only_off) {
    const int D = lat->dims;
    for (int k = 0; k < n / D; k++) {
        if (only_off && only_off[k]) continue;
        for (int i = 0; i < D; i++)
            l[D * k + i] = (int8_t)near_clamp(0.5f * (id * xval[D * k + i] - 1), 0, f->kmax - 1);
        int key = lat_key(lat, l + D * k);
        bool on = lat->map[key] >= 0;
        if (on_grid) on_grid[k] = on;
        if (!on && lat->map[key] != INT32_MIN)
            nearest_neighbour(lat, key, xval + D * k, waux + D * k, scale, l + D * k);
    }
}

/* One sub-block of n elements (magnitudes xval, weights w, their square roots waux): the
 * fan search and the final re-rounding. Writes levels to l and the scale to *scale_out;
 * returns false when the sub-block is stored as zero (IQ2_XXS: make_qp_quants found no scale). */
static bool fan_fit(const struct lattice *lat, const struct fan *f, int n, const float *xval,
                    const float *w, const float *waux, float max, int8_t *l, float *scale_out) {
    const int D = lat->dims;
    int8_t la[32];
    bool on[8], on_aux[8];
    float best = 0, scale, base;
    memset(l, 0, (size_t)n);
    if (f->from_qp) {
        uint8_t lq[32];
        scale = snug_quant_fit_positive(n, f->kmax + 1, xval, lq, w);
        base = scale * (float)f->kmax;
        if (base <= 0) return false;
    } else {
        scale = max / (float)(2 * f->kmax - 1);
        base = max;
    }
    for (int k = 0; k < n / D; k++) on[k] = f->start_on_grid;
    for (int is = f->is_lo; is <= f->is_hi; is++) {
        float id = ((float)(2 * f->kmax - 1) + (float)is * f->step) / base;
        float this_scale = 1 / id;
        round_groups(lat, f, n, xval, waux, id, this_scale, la, on_aux, NULL);
        float sqx, sq2;
        sums(xval, w, la, n, &sqx, &sq2);
        if (sq2 > 0 && sqx * sqx > best * sq2) {
            scale = sqx / sq2;
            best = scale * sqx;
            memcpy(l, la, (size_t)n);
            memcpy(on, on_aux, sizeof on);
        }
    }
    bool any_off = false;
    for (int k = 0; k < n / D; k++) any_off |= !on[k];
    if ((any_off || f->refine_always) && scale > 0) {
        round_groups(lat, f, n, xval, waux, 1 / scale, scale, l, NULL, f->refine_all ? NULL : on);
        float sqx, sq2;
        sums(xval, w, l, n, &sqx, &sq2);
        if (sq2 > 0) scale = sqx / sq2;
    }
    *scale_out = scale;
    return true;
}

/* The 4-bit (3-bit) sub-block scale code: scale ≈ d·(2l + 1). */
static inline int scale_code(float id, float s, int hi) {
    return near_clamp(0.5f * (id * s - 1), 0, hi);
}

static float sum_sq(const float *x, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    return s;
}

static float max_of(const float *v, int n) {
    float m = v[0];
    for (int i = 1; i < n; i++) m = m > v[i] ? m : v[i];
    return m;
}

/* ---- IQ2_XXS (66 bytes: f16 d; per 32: 4 grid bytes, then 4×7 sign bits + 4-bit scale) ---- */

static void enc_iq2_xxs(const struct lattice *lat, const float *x, const float *qw, uint8_t *b) {
    static const struct fan f = {3, -6, 6, 0.1f, true, true, true, true};
    uint32_t q2[16] = {0};
    float scales[8], w[32], waux[32], xval[32], scale;
    int8_t l[32];
    float max_scale = 0, sigma2 = sum_sq(x, 256) / 256;
    put_f16(b, 0.f);
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        make_weights(xb, qw ? qw + 32 * ib : NULL, 32, sigma2, W_UNIFORM_IM, w);
        for (int i = 0; i < 32; i++) waux[i] = sqrtf(w[i]);
        uint8_t signs[4];
        for (int k = 0; k < 4; k++)
            signs[k] = split_signs(xb + 8 * k, w + 8 * k, true, xval + 8 * k);
        scales[ib] = 0;
        float max = max_of(xval, 32);
        if (max < 1e-15f || !fan_fit(lat, &f, 32, xval, w, waux, max, l, &scale)) continue;
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 4; k++) signs[k] = (uint8_t)(~signs[k] & 127);
        }
        for (int k = 0; k < 4; k++) {
            q2[2 * ib] |= (uint32_t)grid_index_of(lat, l + 8 * k) << (8 * k);
            q2[2 * ib + 1] |= (uint32_t)signs[k] << (7 * k);
        }
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (max_scale == 0) {
        memset(b + 2, 0, 64);
        return;
    }
    float d = max_scale / 31;
    put_f16(b, d);
    float id = 1 / d;
    for (int ib = 0; ib < 8; ib++) q2[2 * ib + 1] |= (uint32_t)scale_code(id, scales[ib], 15) << 28;
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 4; k++) b[2 + 4 * i + k] = (uint8_t)(q2[i] >> (8 * k));
}

/* ---- IQ2_XS (74 bytes: f16 d; per 16: uint16 9-bit grid index | 7 sign bits << 9 (×2);
 * 8 bytes of 4-bit scales) ---------------------------------------------------------------- */

static void enc_iq2_xs(const struct lattice *lat, const float *x, const float *qw, uint8_t *b) {
    static const struct fan f = {3, -9, 9, 0.1f, false, true, false, false};
    uint16_t q2[32] = {0};
    float scales[16], w[16], waux[16], xval[16], scale;
    int8_t l[16];
    float max_scale = 0, sigma2 = sum_sq(x, 256) / 256;
    put_f16(b, 0.f);
    memset(b + 66, 0, 8);
    for (int ib = 0; ib < 16; ib++) {
        const float *xb = x + 16 * ib;
        make_weights(xb, qw ? qw + 16 * ib : NULL, 16, sigma2, W_UNIFORM_IM, w);
        for (int i = 0; i < 16; i++) waux[i] = sqrtf(w[i]);
        uint8_t signs[2];
        for (int k = 0; k < 2; k++)
            signs[k] = split_signs(xb + 8 * k, w + 8 * k, true, xval + 8 * k);
        scales[ib] = 0;
        float max = max_of(xval, 16);
        if (max < 1e-15f) continue;
        fan_fit(lat, &f, 16, xval, w, waux, max, l, &scale);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 2; k++) signs[k] = (uint8_t)(~signs[k] & 127);
        }
        for (int k = 0; k < 2; k++)
            q2[2 * ib + k] = (uint16_t)(grid_index_of(lat, l + 8 * k) | signs[k] << 9);
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (max_scale == 0) {
        memset(b + 2, 0, 64);
        return;
    }
    float d = max_scale / 31;
    put_f16(b, d);
    float id = 1 / d;
    for (int ib = 0; ib < 16; ib++)
        b[66 + ib / 2] |= (uint8_t)(scale_code(id, scales[ib], 15) << (4 * (ib % 2)));
    for (int i = 0; i < 32; i++)
        b[2 + 2 * i] = (uint8_t)q2[i], b[3 + 2 * i] = (uint8_t)(q2[i] >> 8);
}

/* ---- IQ2_S (82 bytes: f16 d; 32 grid low bytes; 32 sign bytes; 8 bytes of 2-bit grid high
 * parts; 8 bytes of 4-bit scales) ------------------------------------------------------------ */

static void enc_iq2_s(const struct lattice *lat, const float *x, const float *qw, uint8_t *b) {
    static const struct fan f = {3, -9, 9, 0.1f, false, true, false, false};
    float scales[16], w[16], waux[16], xval[16], scale;
    int8_t l[16];
    float max_scale = 0, sigma2 = 2 * sum_sq(x, 256) / 256;
    memset(b, 0, 82);
    uint8_t *qs = b + 2, *qh = b + 66, *sc = b + 74;
    for (int ib = 0; ib < 16; ib++) {
        const float *xb = x + 16 * ib;
        make_weights(xb, qw ? qw + 16 * ib : NULL, 16, sigma2, W_IQ2S, w);
        for (int i = 0; i < 16; i++) waux[i] = sqrtf(w[i]);
        uint8_t signs[2];
        for (int k = 0; k < 2; k++)
            signs[k] = split_signs(xb + 8 * k, w + 8 * k, false, xval + 8 * k);
        scales[ib] = 0;
        float max = max_of(xval, 16);
        if (max < 1e-8f) continue;
        fan_fit(lat, &f, 16, xval, w, waux, max, l, &scale);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 2; k++) signs[k] = (uint8_t)~signs[k];
        }
        for (int k = 0; k < 2; k++) {
            int g = grid_index_of(lat, l + 8 * k), i8 = 2 * ib + k;
            qs[i8] = (uint8_t)g;
            qh[i8 / 4] |= (uint8_t)((g >> 8) << (2 * (i8 % 4)));
            qs[32 + i8] = signs[k];
        }
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (max_scale == 0) return;
    float d = max_scale / 31;
    put_f16(b, d * 0.9875f);
    float id = 1 / d;
    for (int ib = 0; ib < 16; ib++)
        sc[ib / 2] |= (uint8_t)(scale_code(id, scales[ib], 15) << (4 * (ib % 2)));
}

/* ---- IQ3_XXS (98 bytes: f16 d; 64 grid bytes; per 32: uint32 4×7 sign bits + 4-bit scale) -- */

static void enc_iq3_xxs(const struct lattice *lat, const float *x, const float *qw, uint8_t *b) {
    static const struct fan f = {8, -15, 15, 0.2f, false, true, false, false};
    uint8_t q3[64] = {0};
    uint32_t ss[8] = {0};
    float scales[8], w[32], waux[32], xval[32], scale;
    int8_t l[32];
    float max_scale = 0, sigma2 = 2 * sum_sq(x, 256) / 256;
    put_f16(b, 0.f);
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        make_weights(xb, qw ? qw + 32 * ib : NULL, 32, sigma2, W_X2, w);
        for (int i = 0; i < 32; i++) waux[i] = sqrtf(w[i]);
        uint8_t signs[4];
        for (int k = 0; k < 4; k++)
            signs[k] = split_signs(xb + 8 * k, w + 8 * k, true, xval + 8 * k);
        scales[ib] = 0;
        float max = max_of(xval, 32);
        if (max < 1e-8f) continue;
        fan_fit(lat, &f, 32, xval, w, waux, max, l, &scale);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 4; k++) signs[k] = (uint8_t)(~signs[k] & 127);
        }
        for (int k = 0; k < 8; k++) q3[8 * ib + k] = (uint8_t)grid_index_of(lat, l + 4 * k);
        ss[ib] = (uint32_t)signs[0] | (uint32_t)signs[1] << 7 | (uint32_t)signs[2] << 14 |
                 (uint32_t)signs[3] << 21;
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (max_scale == 0) {
        memset(b + 2, 0, 96);
        return;
    }
    float d = max_scale / 31;
    put_f16(b, d * 1.0125f);
    float id = 1 / d;
    for (int ib = 0; ib < 8; ib++) ss[ib] |= (uint32_t)scale_code(id, scales[ib], 15) << 28;
    memcpy(b + 2, q3, 64);
    for (int ib = 0; ib < 8; ib++)
        for (int k = 0; k < 4; k++) b[66 + 4 * ib + k] = (uint8_t)(ss[ib] >> (8 * k));
}

/* ---- IQ3_S (110 bytes: f16 d; 64 grid low bytes; 8 bytes of grid high bits; 32 sign bytes;
 * 4 bytes of 4-bit scales) ------------------------------------------------------------------ */

static void enc_iq3_s(const struct lattice *lat, const float *x, const float *qw, uint8_t *b) {
    static const struct fan f = {8, -9, 9, 0.2f, false, false, true, false};
    float scales[8], w[32], waux[32], xval[32], scale;
    int8_t l[32];
    float max_scale = 0, sigma2 = 2 * sum_sq(x, 256) / 256;
    memset(b, 0, 110);
    uint8_t *qs = b + 2, *qh = b + 66, *sg = b + 74, *sc = b + 106;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        make_weights(xb, qw ? qw + 32 * ib : NULL, 32, sigma2, W_X2, w);
        for (int i = 0; i < 32; i++) waux[i] = sqrtf(w[i]);
        uint8_t signs[4];
        for (int k = 0; k < 4; k++)
            signs[k] = split_signs(xb + 8 * k, w + 8 * k, false, xval + 8 * k);
        scales[ib] = 0;
        float max = max_of(xval, 32);
        /* an all-zero sub-block writes nothing, and (as in ggml) the grid and sign cursors do not
         * advance past it: the following sub-blocks' bytes move up */
        if (max == 0) continue;
        fan_fit(lat, &f, 32, xval, w, waux, max, l, &scale);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 4; k++) signs[k] = (uint8_t)~signs[k];
        }
        for (int k = 0; k < 8; k++) {
            int g = grid_index_of(lat, l + 4 * k);
            qs[k] = (uint8_t)g;
            qh[(8 * ib + k) / 8] |= (uint8_t)((g >> 8) << ((8 * ib + k) % 8));
        }
        qs += 8;
        memcpy(sg, signs, 4);
        sg += 4;
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (max_scale == 0) return;
    float d = max_scale / 31;
    put_f16(b, d * 1.033f);
    float id = 1 / d;
    for (int ib = 0; ib < 8; ib += 2)
        sc[ib / 2] =
            (uint8_t)(scale_code(id, scales[ib], 15) | scale_code(id, scales[ib + 1], 15) << 4);
}

/* ---- IQ1_S / IQ1_M -------------------------------------------------------------------------- */

/* Sorts the indices 0..n−1 by x, ties in index order (ggml sorts (value, index) pairs with
 * glibc's qsort, a stable merge sort for arrays this small). */
static void sort_by_value(const float *x, int n, int *idx) {
    for (int i = 0; i < n; i++) {
        int j = i;
        while (j > 0 && x[idx[j - 1]] > x[i]) idx[j] = idx[j - 1], j--;
        idx[j] = i;
    }
}

/* The neighbour of an off-grid IQ1 key with the least Σ w (scale·v[l] − x)², v = the shifted
 * levels (first one on ties); writes its levels and returns its index. */
static int iq1_neighbour(const struct lattice *lat, int key, const float *x, const float *w,
                         float scale, const float *v, int8_t *l) {
    const uint16_t *nb = lat->nbr + (-lat->map[key] - 1);
    int best = nb[1];
    float best_d2 = FLT_MAX;
    for (int j = 1; j <= nb[0]; j++) {
        const uint8_t *g = lat->level + nb[j] * 8;
        float d2 = 0;
        for (int i = 0; i < 8; i++) {
            float diff = scale * v[g[i]] - x[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) best_d2 = d2, best = nb[j];
    }
    const uint8_t *g = lat->level + best * 8;
    for (int i = 0; i < 8; i++) l[i] = (int8_t)g[i];
    return best;
}

/* The grid index of 8 IQ1 levels, moving an off-grid vector to its best neighbour; *off is
 * set when that happened. */
static int iq1_index(const struct lattice *lat, int8_t *l, const float *x, const float *w,
                     float scale, const float *v, bool *off) {
    int key = lat_key(lat, l);
    if (lat->map[key] >= 0) return lat->map[key];
    *off = true;
    return iq1_neighbour(lat, key, x, w, scale, v, l);
}

static const float IQ1_P[3] = {-1 + 0.125f, 0.125f, 1 + 0.125f};  /* IQ1S_DELTA = IQ1M_DELTA */
static const float IQ1_M[3] = {-1 - 0.125f, -0.125f, 1 - 0.125f}; /* = 1/8 (ggml-common.h) */

/* IQ1_S (50 bytes: f16 d; 32 grid low bytes; per 32: uint16 of 4×3 grid high bits, 3-bit
 * scale << 12, shift sign << 15). */
static void enc_iq1_s(const struct lattice *lat, const float *x, const float *qw, uint8_t *b) {
    float scales[8], w[32], sumx[33], sumw[33];
    int idx[32], shifts[8];
    int8_t l[32];
    uint16_t qh[8] = {0};
    float max_scale = 0, sigma2 = 2 * sum_sq(x, 256) / 256;
    memset(b, 0, 50);
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        make_weights(xb, qw ? qw + 32 * ib : NULL, 32, sigma2, W_UNIFORM_IM, w);
        scales[ib] = 0, shifts[ib] = 1;
        float max = fabsf(xb[0]);
        for (int i = 1; i < 32; i++) max = max > fabsf(xb[i]) ? max : fabsf(xb[i]);
        if (max < 1e-12f) continue;
        sort_by_value(xb, 32, idx);
        sumx[0] = sumw[0] = 0;
        for (int j = 0; j < 32; j++) {
            sumx[j + 1] = sumx[j] + w[idx[j]] * xb[idx[j]];
            sumw[j + 1] = sumw[j] + w[idx[j]];
        }
        /* values sorted ascending: the first i1 get level 0, the next up to i2 level 1, the
         * rest level 2; both shifts, least-squares scale, best (Σwxq)²/Σwq² */
        float best = -FLT_MAX, scale = max;
        int bi1 = -1, bi2 = -1, shift = 0;
        for (int i1 = 0; i1 <= 32; i1++) {
            for (int i2 = i1; i2 <= 32; i2++) {
                for (int s = 0; s < 2; s++) {
                    const float *v = s ? IQ1_M : IQ1_P;
                    float sqx = (sumx[i1] - sumx[0]) * v[0] + (sumx[i2] - sumx[i1]) * v[1] +
                                (sumx[32] - sumx[i2]) * v[2];
                    float sq2 = (sumw[i1] - sumw[0]) * v[0] * v[0] +
                                (sumw[i2] - sumw[i1]) * v[1] * v[1] +
                                (sumw[32] - sumw[i2]) * v[2] * v[2];
                    if (sq2 > 0 && sqx * sqx > best * sq2) {
                        scale = sqx / sq2, best = scale * sqx;
                        bi1 = i1, bi2 = i2, shift = s ? -1 : 1;
                    }
                }
            }
        }
        if (bi1 < 0 || bi2 < 0 || shift == 0) continue;
        for (int j = 0; j < 32; j++) l[idx[j]] = (int8_t)(j < bi1 ? 0 : j < bi2 ? 1 : 2);
        if (scale < 0) {
            for (int j = 0; j < 32; j++) l[j] = (int8_t)(2 - l[j]);
            scale = -scale, shift = -shift;
        }
        const float *v = shift == 1 ? IQ1_P : IQ1_M;
        bool off = false;
        int gi[4];
        for (int k = 0; k < 4; k++)
            gi[k] = iq1_index(lat, l + 8 * k, xb + 8 * k, w + 8 * k, scale, v, &off);
        if (off) {
            float sqx = 0, sq2 = 0;
            for (int k = 0; k < 4; k++) {
                const uint8_t *g = lat->level + gi[k] * 8;
                for (int j = 0; j < 8; j++) {
                    float q = v[g[j]];
                    sqx += w[8 * k + j] * q * xb[8 * k + j];
                    sq2 += w[8 * k + j] * q * q;
                }
            }
            if (sqx > 0 && sq2 > 0) scale = sqx / sq2;
        }
        uint16_t h = 0;
        for (int k = 0; k < 4; k++) {
            b[2 + 4 * ib + k] = (uint8_t)gi[k];
            h |= (uint16_t)((gi[k] >> 8) << (3 * k));
        }
        qh[ib] = h;
        scales[ib] = scale, shifts[ib] = shift;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (max_scale != 0) {
        float d = max_scale / 15;
        put_f16(b, d * 1.125f);
        float id = 1 / d;
        for (int ib = 0; ib < 8; ib++) {
            int c = scale_code(id, scales[ib], 7);
            if (shifts[ib] == -1) c |= 8;
            qh[ib] |= (uint16_t)(c << 12);
        }
    }
    for (int ib = 0; ib < 8; ib++)
        b[34 + 2 * ib] = (uint8_t)qh[ib], b[35 + 2 * ib] = (uint8_t)(qh[ib] >> 8);
}

/* IQ1_M (56 bytes: 32 grid low bytes; per 16: a byte of 2×3 grid high bits and the two
 * halves' shift signs (0x08, 0x80); 4 uint16 of 4×3-bit scales, their top nibbles the f16
 * super-scale). The shift combination k: bit 1 the first half's, bit 0 the second's (0: +). */
static void enc_iq1_m(const struct lattice *lat, const float *x, const float *qw, uint8_t *b) {
    static const uint8_t masks[4] = {0x00, 0x80, 0x08, 0x88};
    float scales[16], w[16];
    int idx[16], shifts[16];
    int8_t l[16];
    uint16_t sc[4] = {0};
    uint8_t *qs = b, *qh = b + 32;
    float max_scale = 0, sigma2 = 2 * sum_sq(x, 256) / 256;
    memset(b, 0, 56);
    for (int ib = 0; ib < 16; ib++) {
        const float *xb = x + 16 * ib;
        make_weights(xb, qw ? qw + 16 * ib : NULL, 16, sigma2, W_X2, w);
        scales[ib] = 0, shifts[ib] = 0;
        float max = fabsf(xb[0]);
        for (int i = 1; i < 16; i++) max = max > fabsf(xb[i]) ? max : fabsf(xb[i]);
        if (max < 1e-7f) continue;
        sort_by_value(xb, 16, idx);
        /* prefix sums per half (each half of 8 may take its own shift) */
        float px[2][17], pw[2][17];
        px[0][0] = px[1][0] = pw[0][0] = pw[1][0] = 0;
        for (int j = 0; j < 16; j++) {
            int i = idx[j], h = i < 8 ? 0 : 1;
            px[h][j + 1] = px[h][j] + w[i] * xb[i];
            px[1 - h][j + 1] = px[1 - h][j];
            pw[h][j + 1] = pw[h][j] + w[i];
            pw[1 - h][j + 1] = pw[1 - h][j];
        }
        const float tx[2] = {px[0][16], px[1][16]}, tw[2] = {pw[0][16], pw[1][16]};
        const float p2 = IQ1_P[2], m2 = IQ1_M[2];
        const float cp1 = IQ1_P[0] * IQ1_P[0] - IQ1_P[1] * IQ1_P[1];
        const float cp2 = IQ1_P[1] * IQ1_P[1] - IQ1_P[2] * IQ1_P[2];
        const float cm1 = IQ1_M[0] * IQ1_M[0] - IQ1_M[1] * IQ1_M[1];
        const float cm2 = IQ1_M[1] * IQ1_M[1] - IQ1_M[2] * IQ1_M[2];
        float best = -FLT_MAX, scale = max;
        int bi1 = -1, bi2 = -1, bk = -1;
        for (int i1 = 0; i1 <= 16; i1++) {
            for (int i2 = i1; i2 <= 16; i2++) {
                float qxp[2], qxm[2], q2p[2], q2m[2];
                for (int h = 0; h < 2; h++) {
                    float s = px[h][i1] + px[h][i2];
                    qxp[h] = tx[h] * p2 - s;
                    qxm[h] = tx[h] * m2 - s;
                    q2p[h] = tw[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                    q2m[h] = tw[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
                }
                const float sqx[4] = {qxp[0] + qxp[1], qxp[0] + qxm[1], qxm[0] + qxp[1],
                                      qxm[0] + qxm[1]};
                const float sq2[4] = {q2p[0] + q2p[1], q2p[0] + q2m[1], q2m[0] + q2p[1],
                                      q2m[0] + q2m[1]};
                for (int k = 0; k < 4; k++) {
                    if (sq2[k] > 0 && sqx[k] * sqx[k] > best * sq2[k]) {
                        scale = sqx[k] / sq2[k], best = scale * sqx[k];
                        bi1 = i1, bi2 = i2, bk = k;
                    }
                }
            }
        }
        if (bi1 < 0 || bi2 < 0 || bk < 0) continue;
        for (int j = 0; j < 16; j++) l[idx[j]] = (int8_t)(j < bi1 ? 0 : j < bi2 ? 1 : 2);
        if (scale < 0) {
            for (int j = 0; j < 16; j++) l[j] = (int8_t)(2 - l[j]);
            scale = -scale;
            bk = 3 - bk;
        }
        const float *v[2] = {bk < 2 ? IQ1_P : IQ1_M, bk % 2 == 0 ? IQ1_P : IQ1_M};
        bool off = false;
        int gi[2];
        for (int k = 0; k < 2; k++)
            gi[k] = iq1_index(lat, l + 8 * k, xb + 8 * k, w + 8 * k, scale, v[k], &off);
        if (off) {
            float sqx = 0, sq2 = 0;
            for (int k = 0; k < 2; k++) {
                const uint8_t *g = lat->level + gi[k] * 8;
                for (int j = 0; j < 8; j++) {
                    float q = v[k][g[j]];
                    sqx += w[8 * k + j] * q * xb[8 * k + j];
                    sq2 += w[8 * k + j] * q * q;
                }
            }
            if (sqx > 0 && sq2 > 0) scale = sqx / sq2;
        }
        qs[2 * ib] = (uint8_t)gi[0];
        qs[2 * ib + 1] = (uint8_t)gi[1];
        qh[ib] = (uint8_t)((gi[0] >> 8) | ((gi[1] >> 8) << 4));
        scales[ib] = scale, shifts[ib] = bk;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (max_scale == 0) return;
    /* the 3-bit sub-block scales, then the super-scale refitted over the whole block with them */
    float d = max_scale / 15, id = 1 / d, sqx = 0, sq2 = 0;
    for (int ib = 0; ib < 16; ib++) {
        int c = scale_code(id, scales[ib], 7);
        sc[ib / 4] |= (uint16_t)(c << (3 * (ib % 4)));
        qh[ib] |= masks[shifts[ib]];
        const float *xb = x + 16 * ib;
        make_weights(xb, qw ? qw + 16 * ib : NULL, 16, sigma2, W_X2, w);
        for (int k = 0; k < 2; k++) {
            const float *v =
                k == 0 ? (shifts[ib] < 2 ? IQ1_P : IQ1_M) : (shifts[ib] % 2 == 0 ? IQ1_P : IQ1_M);
            int g = qs[2 * ib + k] + ((qh[ib] << (8 - 4 * k)) & 0x700);
            const uint8_t *lv = lat->level + g * 8;
            for (int j = 0; j < 8; j++) {
                float q = v[lv[j]] * (float)(2 * c + 1);
                sqx += w[8 * k + j] * q * xb[8 * k + j];
                sq2 += w[8 * k + j] * q * q;
            }
        }
    }
    if (sq2 > 0) d = sqx / sq2;
    uint16_t h = snug_f32_to_f16(d * 1.1125f);
    sc[0] |= (uint16_t)((h & 0x000f) << 12);
    sc[1] |= (uint16_t)((h & 0x00f0) << 8);
    sc[2] |= (uint16_t)((h & 0x0f00) << 4);
    sc[3] |= (uint16_t)(h & 0xf000);
    for (int i = 0; i < 4; i++)
        b[48 + 2 * i] = (uint8_t)sc[i], b[49 + 2 * i] = (uint8_t)(sc[i] >> 8);
}

/* ---- entry ---------------------------------------------------------------------------------- */

bool snug_quant_iq_block(uint32_t type, const float *x, const float *qw, uint8_t *b) {
    int id;
    switch (type) {
    case SNUG_DTYPE_IQ2_XXS:
        id = LAT_IQ2XXS;
        break;
    case SNUG_DTYPE_IQ2_XS:
        id = LAT_IQ2XS;
        break;
    case SNUG_DTYPE_IQ2_S:
        id = LAT_IQ2S;
        break;
    case SNUG_DTYPE_IQ1_S:
    case SNUG_DTYPE_IQ1_M:
        id = LAT_IQ1S;
        break;
    case SNUG_DTYPE_IQ3_XXS:
        id = LAT_IQ3XXS;
        break;
    case SNUG_DTYPE_IQ3_S:
        id = LAT_IQ3S;
        break;
    default:
        return false;
    }
    const struct lattice *lat = lattice_get(id);
    if (!lat) return false;
    switch (type) {
    case SNUG_DTYPE_IQ2_XXS:
        enc_iq2_xxs(lat, x, qw, b);
        break;
    case SNUG_DTYPE_IQ2_XS:
        enc_iq2_xs(lat, x, qw, b);
        break;
    case SNUG_DTYPE_IQ2_S:
        enc_iq2_s(lat, x, qw, b);
        break;
    case SNUG_DTYPE_IQ1_S:
        enc_iq1_s(lat, x, qw, b);
        break;
    case SNUG_DTYPE_IQ1_M:
        enc_iq1_m(lat, x, qw, b);
        break;
    case SNUG_DTYPE_IQ3_XXS:
        enc_iq3_xxs(lat, x, qw, b);
        break;
    default:
        enc_iq3_s(lat, x, qw, b);
        break;
    }
    return true;
}
