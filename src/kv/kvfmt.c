/* kvfmt.c — the KV cache storage formats (see kvfmt.h): sizes, quantize, decode, and the
 * randomized Hadamard rotation of the TurboQuant formats.
 * Byte layouts of one head vector of D elements:
 *   f32 4D, f16 / bf16 2D (IEEE half / bfloat16, round to nearest even);
 *   q8_0  D/32 ggml blocks {fp16 d; int8 q[32]} (34 B), x ≈ d·q, d = max|x|/127;
 *   fp8   {float scale; e4m3 byte[D]}, x ≈ scale·e4m3, scale = max|x|/448 (OCP FP8 E4M3:
 *         bias 7, no infinities, largest finite 448);
 *   tq4   per G-group {fp16 norm; nib[G/2]}: index of element j in nibble j%2 of byte j/2;
 *   tq3   per G-group {fp16 norm; lo[G/4]; hi[G/8]}: low two index bits of element j at bits
 *         2·(j%4) of lo[j/4], the third (sign) bit at bit j%8 of hi[j/8] (docs/turboquant.md §2.2).
 * TurboQuant (docs/turboquant.md §1, §2.2-2.3): y = H·(s ⊙ x/‖x‖)/√G, index = number of codebook
 * midpoints ≤ y·√G (sorted ascending, so the top index bit is the sign), stored norm ‖x‖/‖c‖ with c
 * the chosen centroid vector ("norm correction" folded in at write time, docs/turboquant.md §1.3).
 * Read next: src/backend/cpu/ops_attention_kvq.c.
 */
#include "kv/kvfmt.h"

#include "core/core.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const FMT_NAMES[SNUG_KVFMT_N] = {"f16", "f32", "bf16", "q8_0",
                                                    "fp8", "tq4", "tq3"};

/* Signs s: two splitmix64 draws from SNUG_KVFMT_SIGN_SEED (the test regenerates them). */
const uint64_t snug_kvfmt_signs[2] = {0x411c55ec857955beull, 0xa47b4f3300226078ull};

/* Lloyd-Max quantizers of N(0, 1), from the closed-form iteration c_i = E[x | t_i < x < t_i+1]
 * with midpoint boundaries (docs/turboquant.md §1.2; the test re-solves and compares). MSE 0.034548
 * / 0.009501.
 */
const float snug_kvfmt_tq3_centroids[8] = {-2.1519457f, -1.3439093f, -0.7560053f, -0.2450942f,
                                           0.2450942f,  0.7560053f,  1.3439093f,  2.1519457f};
const float snug_kvfmt_tq4_centroids[16] = {-2.7325896f, -2.0690172f, -1.6180464f, -1.2562312f,
                                            -0.9423405f, -0.6567591f, -0.3880483f, -0.128395f,
                                            0.128395f,   0.3880483f,  0.6567591f,  0.9423405f,
                                            1.2562312f,  1.6180464f,  2.0690172f,  2.7325896f};

const char *snug_kvfmt_name(int fmt) {
    return fmt >= 0 && fmt < SNUG_KVFMT_N ? FMT_NAMES[fmt] : NULL;
}

int snug_kvfmt_parse(const char *name) {
    for (int i = 0; i < SNUG_KVFMT_N; i++)
        if (name && !strcmp(name, FMT_NAMES[i])) return i;
    return -1;
}

int32_t snug_kvfmt_code(int k, int v) {
    return k == v ? k : 16 * (v + 1) + k;
}

bool snug_kvfmt_split(int32_t code, int *k, int *v) {
    *k = *v = SNUG_KV_F16;
    if (code < 0) return false;
    if (code < 16) {
        if (code >= SNUG_KVFMT_N) return false;
        *k = *v = code;
        return true;
    }
    int kk = code % 16, vv = code / 16 - 1;
    if (kk >= SNUG_KVFMT_N || vv >= SNUG_KVFMT_N || kk == vv) return false;
    *k = kk;
    *v = vv;
    return true;
}

const char *snug_kvfmt_code_name(int32_t code, char *buf, size_t n) {
    int k, v;
    if (!snug_kvfmt_split(code, &k, &v))
        snprintf(buf, n, "?");
    else if (k == v)
        snprintf(buf, n, "%s", FMT_NAMES[k]);
    else
        snprintf(buf, n, "%s/%s", FMT_NAMES[k], FMT_NAMES[v]);
    return buf;
}

int64_t snug_kvfmt_group(int64_t D) {
    return D % 128 == 0 ? 128 : 64;
}

bool snug_kvfmt_supports(int fmt, int64_t D) {
    if (D <= 0) return false;
    switch (fmt) {
    case SNUG_KV_F16:
    case SNUG_KV_F32:
    case SNUG_KV_BF16:
    case SNUG_KV_FP8:
        return true;
    case SNUG_KV_Q8_0:
        return D % 32 == 0;
    case SNUG_KV_TQ4:
    case SNUG_KV_TQ3:
        return D % 64 == 0;
    default:
        return false;
    }
}

bool snug_kvfmt_rotated(int fmt) {
    return fmt == SNUG_KV_TQ4 || fmt == SNUG_KV_TQ3;
}

/* Bytes of one TurboQuant group of G elements at `bits` per element (+ the fp16 norm). */
static size_t tq_group_bytes(int bits, int64_t G) {
    return 2 + (size_t)(G * bits / 8);
}

size_t snug_kvfmt_vec_bytes(int fmt, int64_t D) {
    if (!snug_kvfmt_supports(fmt, D)) return 0;
    size_t n = (size_t)D;
    switch (fmt) {
    case SNUG_KV_F32:
        return 4 * n;
    case SNUG_KV_F16:
    case SNUG_KV_BF16:
        return 2 * n;
    case SNUG_KV_Q8_0:
        return n / 32 * 34;
    case SNUG_KV_FP8:
        return 4 + n;
    case SNUG_KV_TQ4:
        return (size_t)(D / snug_kvfmt_group(D)) * tq_group_bytes(4, snug_kvfmt_group(D));
    case SNUG_KV_TQ3:
        return (size_t)(D / snug_kvfmt_group(D)) * tq_group_bytes(3, snug_kvfmt_group(D));
    default:
        return 0;
    }
}

/* ---- rotation ----------------------------------------------------------------------------- */
static inline float sign_of(int64_t j) {
    return (snug_kvfmt_signs[j >> 6] >> (j & 63)) & 1 ? -1.0f : 1.0f;
}

/* In-place unnormalised Walsh-Hadamard transform of n (a power of two) floats. */
static void wht(float *x, int64_t n) {
    for (int64_t h = 1; h < n; h *= 2)
        for (int64_t i = 0; i < n; i += 2 * h)
            for (int64_t j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}

/* Forward RHT of every group: signs, then H, then 1/√G. */
void snug_kvfmt_rotate(float *x, int64_t D) {
    int64_t G = snug_kvfmt_group(D);
    float inv = 1.0f / sqrtf((float)G);
    for (int64_t g = 0; g < D; g += G) {
        float *y = x + g;
        for (int64_t j = 0; j < G; j++) y[j] *= sign_of(j);
        wht(y, G);
        for (int64_t j = 0; j < G; j++) y[j] *= inv;
    }
}

/* Inverse RHT (H is symmetric and H·H = G·I): H, then 1/√G and the signs. */
void snug_kvfmt_unrotate(float *x, int64_t D) {
    int64_t G = snug_kvfmt_group(D);
    float inv = 1.0f / sqrtf((float)G);
    for (int64_t g = 0; g < D; g += G) {
        float *y = x + g;
        wht(y, G);
        for (int64_t j = 0; j < G; j++) y[j] *= inv * sign_of(j);
    }
}

/* ---- fp8 e4m3 ----------------------------------------------------------------------------- */
/* Round |f| ≤ 448 to the nearest e4m3 value (ties to even), saturating at 448. */
static uint8_t f32_to_e4m3(float f) {
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (!(a < 448.0f)) return sign | 0x7E; /* also NaN: the cache never holds one */
    if (a < 0.015625f) {                   /* subnormals: steps of 2^-9; 8 rounds up to 2^-6 */
        return sign | (uint8_t)nearbyintf(a * 512.0f);
    }
    int e;
    float fr = frexpf(a, &e); /* a = fr·2^e, fr in [0.5, 1) */
    int m = (int)nearbyintf((fr * 2.0f - 1.0f) * 8.0f), E = e - 1 + 7;
    if (m == 8) m = 0, E++;
    int c = (E << 3) | m;
    return sign | (uint8_t)(c > 0x7E ? 0x7E : c);
}

/* Branch-free (a select, so the decode loop vectorises): subnormals are m·2^-9, normals have
 * float exponent E − 7 + 127 and the 3 mantissa bits on top of float's 23. */
static inline float e4m3_to_f32(uint8_t c) {
    uint32_t E = (c >> 3) & 15, m = c & 7;
    uint32_t bits = ((E + 120u) << 23) | (m << 20) | ((uint32_t)(c & 0x80) << 24);
    float a, sub = (float)m * 0.001953125f;
    memcpy(&a, &bits, 4);
    return E ? a : (c & 0x80 ? -sub : sub);
}

/* ---- TurboQuant --------------------------------------------------------------------------- */
/* One group: rotate a copy, pick indices, write norm + planes. */
static void tq_quantize_group(int bits, const float *x, int64_t G, uint8_t *dst) {
    const float *cb = bits == 4 ? snug_kvfmt_tq4_centroids : snug_kvfmt_tq3_centroids;
    const int nc = 1 << bits;
    float y[128];
    double n2 = 0;
    for (int64_t j = 0; j < G; j++) n2 += (double)x[j] * x[j];
    float nrm = (float)sqrt(n2), inv = nrm > 1e-30f ? 1.0f / nrm : 0.0f;
    for (int64_t j = 0; j < G; j++) y[j] = x[j] * inv;
    snug_kvfmt_rotate(y, G);
    float mid[15], sg = sqrtf((float)G);
    for (int i = 0; i + 1 < nc; i++) mid[i] = 0.5f * (cb[i] + cb[i + 1]);
    uint8_t idx[128];
    double c2 = 0;
    for (int64_t j = 0; j < G; j++) {
        float u = y[j] * sg;
        int k = 0;
        for (int i = 0; i + 1 < nc; i++) k += u >= mid[i];
        idx[j] = (uint8_t)k;
        c2 += (double)cb[k] * cb[k];
    }
    /* centroid vector c = cb[idx]/√G, so ‖c‖ = sqrt(c2/G) */
    double cn = sqrt(c2 / (double)G);
    float stored = cn > 0 && nrm > 0 ? (float)(nrm / cn) : 0.0f;
    if (stored > 65504.0f) stored = 65504.0f;
    uint16_t h = snug_f32_to_f16(stored);
    memcpy(dst, &h, 2);
    uint8_t *p = dst + 2;
    if (bits == 4) {
        for (int64_t j = 0; j < G; j += 2) p[j / 2] = (uint8_t)(idx[j] | (idx[j + 1] << 4));
    } else {
        uint8_t *lo = p, *hi = p + G / 4;
        memset(p, 0, (size_t)(G / 4 + G / 8));
        for (int64_t j = 0; j < G; j++) {
            lo[j / 4] |= (uint8_t)((idx[j] & 3) << (2 * (j % 4)));
            hi[j / 8] |= (uint8_t)(((idx[j] >> 2) & 1) << (j % 8));
        }
    }
}

/* One group decoded in the rotated basis: norm · cb[idx] / √G. */
static void tq_decode_group(int bits, const uint8_t *src, int64_t G, float *out) {
    uint16_t h;
    memcpy(&h, src, 2);
    float s = snug_f16_to_f32(h) / sqrtf((float)G);
    const uint8_t *p = src + 2;
    if (bits == 4) {
        float t[16];
        for (int i = 0; i < 16; i++) t[i] = s * snug_kvfmt_tq4_centroids[i];
        for (int64_t j = 0; j < G; j += 2) {
            out[j] = t[p[j / 2] & 15];
            out[j + 1] = t[p[j / 2] >> 4];
        }
    } else {
        float t[8];
        for (int i = 0; i < 8; i++) t[i] = s * snug_kvfmt_tq3_centroids[i];
        const uint8_t *lo = p, *hi = p + G / 4;
        for (int64_t j = 0; j < G; j += 8) {
            unsigned l0 = lo[j / 4], l1 = lo[j / 4 + 1], hb = hi[j / 8];
            for (int i = 0; i < 4; i++) {
                out[j + i] = t[((l0 >> (2 * i)) & 3) | (((hb >> i) & 1) << 2)];
                out[j + 4 + i] = t[((l1 >> (2 * i)) & 3) | (((hb >> (4 + i)) & 1) << 2)];
            }
        }
    }
}

/* ---- per vector --------------------------------------------------------------------------- */
void snug_kvfmt_quantize(int fmt, const float *x, int64_t D, void *dst) {
    SNUG_ASSERT(snug_kvfmt_supports(fmt, D));
    uint8_t *d = dst;
    switch (fmt) {
    case SNUG_KV_F32:
        memcpy(d, x, (size_t)D * 4);
        break;
    case SNUG_KV_F16:
        for (int64_t i = 0; i < D; i++) {
            uint16_t h = snug_f32_to_f16(x[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        break;
    case SNUG_KV_BF16:
        for (int64_t i = 0; i < D; i++) {
            uint16_t h = snug_f32_to_bf16(x[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        break;
    case SNUG_KV_Q8_0:
        snug_quantize_row(SNUG_DTYPE_Q8_0, x, d, D, NULL);
        break;
    case SNUG_KV_FP8: {
        float amax = 0;
        for (int64_t i = 0; i < D; i++) amax = fmaxf(amax, fabsf(x[i]));
        float scale = amax / 448.0f, inv = scale > 0 ? 1.0f / scale : 0.0f;
        memcpy(d, &scale, 4);
        for (int64_t i = 0; i < D; i++) d[4 + i] = f32_to_e4m3(x[i] * inv);
        break;
    }
    case SNUG_KV_TQ4:
    case SNUG_KV_TQ3: {
        int bits = fmt == SNUG_KV_TQ4 ? 4 : 3;
        int64_t G = snug_kvfmt_group(D);
        size_t gb = tq_group_bytes(bits, G);
        for (int64_t g = 0; g < D / G; g++) tq_quantize_group(bits, x + g * G, G, d + g * gb);
        break;
    }
    default:
        SNUG_ASSERT(!"unknown KV format");
    }
}

void snug_kvfmt_decode(int fmt, const void *src, int64_t D, float *out) {
    const uint8_t *s = src;
    switch (fmt) {
    case SNUG_KV_F32:
        memcpy(out, s, (size_t)D * 4);
        break;
    case SNUG_KV_F16:
        for (int64_t i = 0; i < D; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            out[i] = snug_f16_to_f32(h);
        }
        break;
    case SNUG_KV_BF16: /* bfloat16 is the top half of a float */
        for (int64_t i = 0; i < D; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            uint32_t bits = (uint32_t)h << 16;
            memcpy(out + i, &bits, 4);
        }
        break;
    case SNUG_KV_Q8_0:
        snug_dequantize_row(SNUG_DTYPE_Q8_0, s, out, D);
        break;
    case SNUG_KV_FP8: {
        float scale;
        memcpy(&scale, s, 4);
        for (int64_t i = 0; i < D; i++) out[i] = scale * e4m3_to_f32(s[4 + i]);
        break;
    }
    case SNUG_KV_TQ4:
    case SNUG_KV_TQ3: {
        int bits = fmt == SNUG_KV_TQ4 ? 4 : 3;
        int64_t G = snug_kvfmt_group(D);
        size_t gb = tq_group_bytes(bits, G);
        for (int64_t g = 0; g < D / G; g++) tq_decode_group(bits, s + g * gb, G, out + g * G);
        break;
    }
    default:
        SNUG_ASSERT(!"unknown KV format");
    }
}

void snug_kvfmt_dequantize(int fmt, const void *src, int64_t D, float *out) {
    snug_kvfmt_decode(fmt, src, D, out);
    if (snug_kvfmt_rotated(fmt)) snug_kvfmt_unrotate(out, D);
}
