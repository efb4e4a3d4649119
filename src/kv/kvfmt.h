/* kvfmt.h — the storage formats of the attention KV cache: f16, f32, bf16, q8_0, fp8 (e4m3 with
 * a per-vector scale) and the TurboQuant formats tq4 / tq3 (docs/turboquant.md §2.2-2.3:
 * per group of G = 128 elements (64 when the head is not a multiple of 128) a randomized
 * Hadamard rotation with fixed signs, a Lloyd-Max codebook for N(0, 1/G) and one fp16
 * corrected norm). One head vector of D elements is stored as snug_kvfmt_vec_bytes(fmt, D)
 * bytes; every size the cache and the memory plan use comes from that one function.
 * Invariant: formats are pure functions of their input (no state, no allocation); the rotated
 * formats decode to the ROTATED basis with snug_kvfmt_decode (attention rotates the query once
 * and un-rotates the output once) and to the original basis with snug_kvfmt_dequantize.
 * Read next: kvfmt.c, src/backend/cpu/ops_attention_kvq.c (the reader), docs/kv-formats.md.
 */
#ifndef SNUG_KVFMT_H
#define SNUG_KVFMT_H

#include "snug.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Formats are enum snug_kv_type values (include/snug.h), 0 .. SNUG_KVFMT_N-1. */
#define SNUG_KVFMT_N 7

/* "f16", "f32", "bf16", "q8_0", "fp8", "tq4", "tq3"; NULL outside the range. */
const char *snug_kvfmt_name(int fmt);
/* Inverse of snug_kvfmt_name (case-sensitive); -1 if unknown. */
int snug_kvfmt_parse(const char *name);

/* A K/V pair packed into one int32 (what travels through the plan limits and the arch plan
 * hook as `kv_type`): equal formats encode as the format itself (so the old values f16 = 0 and
 * f32 = 1 keep their meaning), different ones as 16·(v+1) + k. */
int32_t snug_kvfmt_code(int k, int v);
/* Split a code; false (and f16/f16) for a code no pair encodes to. */
bool snug_kvfmt_split(int32_t code, int *k, int *v);

/* A code's name into buf: "tq3" for equal formats, "tq4/tq3" (K/V) for a mix, "?" if invalid. */
const char *snug_kvfmt_code_name(int32_t code, char *buf, size_t n);

/* Whether fmt can store head vectors of D elements (q8_0: D % 32 == 0; tq*: D % 64 == 0). */
bool snug_kvfmt_supports(int fmt, int64_t D);
/* TurboQuant group size for head size D: 128 if D % 128 == 0, else 64. */
int64_t snug_kvfmt_group(int64_t D);
/* Bytes of one stored head vector of D elements (0 for an unsupported pair). */
size_t snug_kvfmt_vec_bytes(int fmt, int64_t D);
/* Whether snug_kvfmt_decode returns the rotated basis (tq4, tq3). */
bool snug_kvfmt_rotated(int fmt);

/* Store one head vector x[D] as fmt into dst (snug_kvfmt_vec_bytes bytes). */
void snug_kvfmt_quantize(int fmt, const float *x, int64_t D, void *dst);
/* Decode one stored vector into out[D]: the rotated basis for tq*, the original otherwise. */
void snug_kvfmt_decode(int fmt, const void *src, int64_t D, float *out);
/* Decode one stored vector into out[D] in the original basis (decode + inverse rotation). */
void snug_kvfmt_dequantize(int fmt, const void *src, int64_t D, float *out);

/* The randomized Hadamard transform of each G-group of x[D] (G = snug_kvfmt_group(D)), in
 * place: y = H·(s ⊙ x)/√G; snug_kvfmt_unrotate is its inverse x = s ⊙ (H·y)/√G. Orthogonal. */
void snug_kvfmt_rotate(float *x, int64_t D);
void snug_kvfmt_unrotate(float *x, int64_t D);

/* The constants, for tests and other backends (one copy of each, here):
 * the sign vector s (bit j of the 128-bit mask set = s_j is -1), and the Lloyd-Max centroids
 * for N(0, 1) in ascending order (multiply by 1/√G for the group's codebook). */
extern const uint64_t snug_kvfmt_signs[2];
extern const float snug_kvfmt_tq3_centroids[8];
extern const float snug_kvfmt_tq4_centroids[16];
/* The seed the signs come from (splitmix64, two draws; see kvfmt.c). */
#define SNUG_KVFMT_SIGN_SEED 0x736e75674b5651ull

#endif /* SNUG_KVFMT_H */
