/* prefix_file.h — the disk tier's file format: one checkpoint per file, written atomically
 * (temporary name, fsync, rename, fsync of the folder), checksummed (CRC-32C), bound to the
 * model file's identity and the KV/state layout, and read back through a validating parser.
 *
 * Layout (little-endian; docs/prefix-cache.md has the table):
 *   header (256 bytes): magic "SNUGPFX\0", version, header bytes, model identity (32 bytes),
 *     layout description (64 bytes, NUL padded), state bytes, KV row bytes, pos, base, key,
 *     parent key, payload bytes, payload CRC-32C, rotary offset (v3), zero padding, header
 *     CRC-32C (last 4 bytes)
 *   payload: tokens int32[pos], the recurrent state (state bytes), KV rows [base, pos)
 *     (KV row bytes each).
 * A checkpoint at pos stores the KV rows since its parent checkpoint at base (the latest
 * earlier checkpoint on the same token path, 0 for none): a chain of files restores [0, pos).
 * Owns: nothing (pure functions over caller buffers and file descriptors).
 * Invariant: a header is accepted only if its magic, version, sizes, CRC, identity and layout
 * all match and every size adds up without overflow to the file's size; anything else is
 * refused with a message, never partly used.
 * Read next: prefix.h (the store that writes and reads these), tests/fuzz/fuzz_prefix.c.
 */
#ifndef SNUG_PREFIX_FILE_H
#define SNUG_PREFIX_FILE_H

#include "core/core.h"

#include <stdbool.h>
#include <stdint.h>

#define SNUG_PREFIX_FILE_MAGIC "SNUGPFX"
/* Version 2: with speculative decoding the state ends with the MTP block's pending hidden row
 * and a KV row carries the MTP block's row of the position before it, in the trunk's K/V
 * formats (src/model/ctx_prefix.h); version 1 files are refused (skipped with a log line).
 * Version 3: the header holds the sequence's rotary offset at pos (int32 at byte 164: the
 * context's rope_delta, negative after images, docs/vision.md step 6); version 2 files are read
 * with offset 0 (they hold text only: no server before version 3 cached images). */
#define SNUG_PREFIX_FILE_VERSION 3u
#define SNUG_PREFIX_HEADER_BYTES 256u
#define SNUG_PREFIX_ID_BYTES     32
#define SNUG_PREFIX_LAYOUT_BYTES 64

/* What a file must match to be loaded. */
struct snug_prefix_file_expect {
    uint8_t model_id[SNUG_PREFIX_ID_BYTES];
    char layout[SNUG_PREFIX_LAYOUT_BYTES]; /* NUL-terminated description of formats/shapes */
    uint64_t state_bytes, kv_row_bytes;
    int32_t n_ctx; /* positions at most */
};

struct snug_prefix_file_header {
    uint8_t model_id[SNUG_PREFIX_ID_BYTES];
    char layout[SNUG_PREFIX_LAYOUT_BYTES];
    uint64_t state_bytes, kv_row_bytes;
    int32_t pos, base;
    uint64_t key, parent_key;
    uint64_t payload_bytes;
    uint32_t payload_crc;
    int32_t rope_delta; /* rotary position - cache position at pos (0 for text) */
};

/* CRC-32C (Castagnoli, reflected, polynomial 0x82F63B78), incremental: start with crc = 0. */
uint32_t snug_crc32c(uint32_t crc, const void *data, size_t n);
/* The same by tables alone (snug_crc32c uses the CPU's CRC32 instruction when it has one). */
uint32_t snug_crc32c_table(uint32_t crc, const void *data, size_t n);

/* 64-bit key of a token sequence (not cryptographic; names files, checked against tokens). */
uint64_t snug_prefix_tokens_key(const snug_token *toks, int32_t n);

/* Payload bytes of a checkpoint; false on overflow. */
bool snug_prefix_file_payload_bytes(uint64_t state_bytes, uint64_t kv_row_bytes, int32_t pos,
                                    int32_t base, uint64_t *out);

/* Serialise a header (payload_crc must be set) into 256 bytes. */
void snug_prefix_file_header_write(const struct snug_prefix_file_header *h,
                                   uint8_t out[SNUG_PREFIX_HEADER_BYTES]);

/* Parse and validate a header against `expect` (NULL: structure only) and the file's size.
 * SNUG_ERR_FORMAT with a message naming the first problem. */
int snug_prefix_file_header_parse(const uint8_t *buf, size_t n, uint64_t file_bytes,
                                  const struct snug_prefix_file_expect *expect,
                                  struct snug_prefix_file_header *out, struct snug_err *err);

/* Validate a whole file image in memory: the header, then the payload CRC, then the tokens
 * (non-negative ids). What the fuzz target drives. */
int snug_prefix_file_check(const uint8_t *buf, size_t n,
                           const struct snug_prefix_file_expect *expect,
                           struct snug_prefix_file_header *out, struct snug_err *err);

/* Identity of a model file: SHA-free by design — a 32-byte digest built from the file size,
 * then CRC-32C/key mixes of the first `head` bytes (the GGUF header, metadata and tensor
 * table come first: pass the tensor data offset, or 0 for 4 MiB), and of the first and last
 * MiB of the rest. Cheap to compute at boot on a 20 GB file; changes when the header, the
 * tensor table or either end of the weights change. See docs/prefix-cache.md. */
int snug_prefix_model_id(const char *path, uint64_t head, uint8_t out[SNUG_PREFIX_ID_BYTES],
                         struct snug_err *err);

#endif /* SNUG_PREFIX_FILE_H */
