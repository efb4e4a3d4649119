/* prefix_file.c — CRC-32C, the checkpoint file header (write + validating parse), the whole-file
 * check the fuzz target drives, and the model identity digest (see prefix_file.h).
 * The CRC is the table-driven byte-at-a-time form (slicing-by-8 over 8 tables): about 1-2 GB/s,
 * enough next to the disk. CRC-32C is the Castagnoli polynomial (RFC 3720, appendix B.4:
 * check value of "123456789" is 0xE3069283; tests/unit/test_prefix.c checks it).
 */
#define _POSIX_C_SOURCE 200809L /* pread, strnlen, fsync */
#include "prefix/prefix_file.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t snug_crc32c(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc_once, crc_init);
    const uint8_t *p = data;
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
              crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^
              crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

uint64_t snug_prefix_tokens_key(const snug_token *toks, int32_t n) {
    uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)(uint32_t)n;
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)toks[i];
        h *= 0x100000001b3ULL;
        h ^= h >> 29;
    }
    return h ? h : 1;
}

bool snug_prefix_file_payload_bytes(uint64_t state_bytes, uint64_t kv_row_bytes, int32_t pos,
                                    int32_t base, uint64_t *out) {
    uint64_t tok, kv, t;
    if (pos < 0 || base < 0 || base > pos) return false;
    if (!snug_mul_u64((uint64_t)pos, 4, &tok)) return false;
    if (!snug_mul_u64((uint64_t)(pos - base), kv_row_bytes, &kv)) return false;
    if (!snug_add_u64(tok, state_bytes, &t) || !snug_add_u64(t, kv, out)) return false;
    return true;
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) {
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* Field offsets inside the 256-byte header. */
enum {
    OFF_MAGIC = 0,
    OFF_VERSION = 8,
    OFF_HBYTES = 12,
    OFF_MODEL = 16,
    OFF_LAYOUT = 48,
    OFF_STATE = 112,
    OFF_ROW = 120,
    OFF_POS = 128,
    OFF_BASE = 132,
    OFF_KEY = 136,
    OFF_PARENT = 144,
    OFF_PAYLOAD = 152,
    OFF_PCRC = 160,
    OFF_ROPE = 164, /* version 3 */
    OFF_HCRC = 252,
};

void snug_prefix_file_header_write(const struct snug_prefix_file_header *h,
                                   uint8_t out[SNUG_PREFIX_HEADER_BYTES]) {
    memset(out, 0, SNUG_PREFIX_HEADER_BYTES);
    memcpy(out + OFF_MAGIC, SNUG_PREFIX_FILE_MAGIC, sizeof SNUG_PREFIX_FILE_MAGIC);
    put32(out + OFF_VERSION, SNUG_PREFIX_FILE_VERSION);
    put32(out + OFF_HBYTES, SNUG_PREFIX_HEADER_BYTES);
    memcpy(out + OFF_MODEL, h->model_id, SNUG_PREFIX_ID_BYTES);
    memcpy(out + OFF_LAYOUT, h->layout, strnlen(h->layout, SNUG_PREFIX_LAYOUT_BYTES - 1));
    put64(out + OFF_STATE, h->state_bytes);
    put64(out + OFF_ROW, h->kv_row_bytes);
    put32(out + OFF_POS, (uint32_t)h->pos);
    put32(out + OFF_BASE, (uint32_t)h->base);
    put64(out + OFF_KEY, h->key);
    put64(out + OFF_PARENT, h->parent_key);
    put64(out + OFF_PAYLOAD, h->payload_bytes);
    put32(out + OFF_PCRC, h->payload_crc);
    put32(out + OFF_ROPE, (uint32_t)h->rope_delta);
    put32(out + OFF_HCRC, snug_crc32c(0, out, OFF_HCRC));
}

int snug_prefix_file_header_parse(const uint8_t *buf, size_t n, uint64_t file_bytes,
                                  const struct snug_prefix_file_expect *expect,
                                  struct snug_prefix_file_header *out, struct snug_err *err) {
    memset(out, 0, sizeof *out);
    if (n < SNUG_PREFIX_HEADER_BYTES)
        return snug_err_set(err, SNUG_ERR_FORMAT, "truncated header (%zu of %u bytes)", n,
                            SNUG_PREFIX_HEADER_BYTES);
    if (memcmp(buf + OFF_MAGIC, SNUG_PREFIX_FILE_MAGIC, sizeof SNUG_PREFIX_FILE_MAGIC))
        return snug_err_set(err, SNUG_ERR_FORMAT, "not a snug prefix-cache file (bad magic)");
    uint32_t version = get32(buf + OFF_VERSION);
    if (version != SNUG_PREFIX_FILE_VERSION && version != 2)
        return snug_err_set(err, SNUG_ERR_FORMAT, "file version %u, this build reads 2 and %u",
                            version, SNUG_PREFIX_FILE_VERSION);
    if (get32(buf + OFF_HBYTES) != SNUG_PREFIX_HEADER_BYTES)
        return snug_err_set(err, SNUG_ERR_FORMAT, "header size %u, expected %u",
                            get32(buf + OFF_HBYTES), SNUG_PREFIX_HEADER_BYTES);
    if (get32(buf + OFF_HCRC) != snug_crc32c(0, buf, OFF_HCRC))
        return snug_err_set(err, SNUG_ERR_FORMAT, "header checksum mismatch (corrupt file)");
    for (size_t i = version >= 3 ? OFF_ROPE + 4 : OFF_ROPE; i < OFF_HCRC; i++)
        if (buf[i]) return snug_err_set(err, SNUG_ERR_FORMAT, "non-zero reserved header bytes");
    memcpy(out->model_id, buf + OFF_MODEL, SNUG_PREFIX_ID_BYTES);
    memcpy(out->layout, buf + OFF_LAYOUT, SNUG_PREFIX_LAYOUT_BYTES);
    if (out->layout[SNUG_PREFIX_LAYOUT_BYTES - 1])
        return snug_err_set(err, SNUG_ERR_FORMAT, "layout description not NUL-terminated");
    out->state_bytes = get64(buf + OFF_STATE);
    out->kv_row_bytes = get64(buf + OFF_ROW);
    out->pos = (int32_t)get32(buf + OFF_POS);
    out->base = (int32_t)get32(buf + OFF_BASE);
    out->key = get64(buf + OFF_KEY);
    out->parent_key = get64(buf + OFF_PARENT);
    out->payload_bytes = get64(buf + OFF_PAYLOAD);
    out->payload_crc = get32(buf + OFF_PCRC);
    out->rope_delta = version >= 3 ? (int32_t)get32(buf + OFF_ROPE) : 0; /* v2: text only */
    uint64_t want;
    if (out->pos < 1 || out->base < 0 || out->base >= out->pos ||
        !snug_prefix_file_payload_bytes(out->state_bytes, out->kv_row_bytes, out->pos, out->base,
                                        &want) ||
        want != out->payload_bytes)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "inconsistent sizes (pos %d, base %d, payload %llu bytes)", out->pos,
                            out->base, (unsigned long long)out->payload_bytes);
    if (out->rope_delta > 0 || -(int64_t)out->rope_delta >= out->pos)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "rotary offset %d at position %d (expected "
                            "-position < offset <= 0)",
                            out->rope_delta, out->pos);
    if ((out->base == 0) != (out->parent_key == 0))
        return snug_err_set(err, SNUG_ERR_FORMAT, "parent key and base disagree");
    if (file_bytes != SNUG_PREFIX_HEADER_BYTES + out->payload_bytes ||
        out->payload_bytes > UINT64_MAX - SNUG_PREFIX_HEADER_BYTES)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "file is %llu bytes, the header says %llu (truncated or extended)",
                            (unsigned long long)file_bytes,
                            (unsigned long long)(SNUG_PREFIX_HEADER_BYTES + out->payload_bytes));
    if (!expect) return SNUG_OK;
    if (memcmp(out->model_id, expect->model_id, SNUG_PREFIX_ID_BYTES))
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "written for another model file (identity "
                            "differs): refused");
    if (strncmp(out->layout, expect->layout, SNUG_PREFIX_LAYOUT_BYTES) ||
        out->state_bytes != expect->state_bytes || out->kv_row_bytes != expect->kv_row_bytes)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "KV/state layout \"%s\" (%llu state bytes, %llu bytes per row), this "
                            "run has \"%s\" (%llu, %llu): refused",
                            out->layout, (unsigned long long)out->state_bytes,
                            (unsigned long long)out->kv_row_bytes, expect->layout,
                            (unsigned long long)expect->state_bytes,
                            (unsigned long long)expect->kv_row_bytes);
    if (out->pos > expect->n_ctx)
        return snug_err_set(err, SNUG_ERR_FORMAT, "position %d past the context (%d)", out->pos,
                            expect->n_ctx);
    return SNUG_OK;
}

int snug_prefix_file_check(const uint8_t *buf, size_t n,
                           const struct snug_prefix_file_expect *expect,
                           struct snug_prefix_file_header *out, struct snug_err *err) {
    int rc = snug_prefix_file_header_parse(buf, n, n, expect, out, err);
    if (rc) return rc;
    const uint8_t *pl = buf + SNUG_PREFIX_HEADER_BYTES;
    if (snug_crc32c(0, pl, (size_t)out->payload_bytes) != out->payload_crc)
        return snug_err_set(err, SNUG_ERR_FORMAT, "payload checksum mismatch (corrupt file)");
    for (int32_t i = 0; i < out->pos; i++) {
        uint32_t t = get32(pl + 4 * (size_t)i);
        if (t > INT32_MAX) return snug_err_set(err, SNUG_ERR_FORMAT, "token %d: negative id", i);
    }
    return SNUG_OK;
}

/* Mix `n` bytes into four 64-bit lanes of the digest. */
static void digest_mix(uint64_t lanes[4], const uint8_t *p, size_t n, int which) {
    uint32_t c = snug_crc32c((uint32_t)which, p, n);
    uint64_t h = 0x9e3779b97f4a7c15ULL * (uint64_t)(which + 1);
    for (size_t i = 0; i + 8 <= n; i += 4096) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    lanes[which & 3] ^= h ^ ((uint64_t)c << 32 | c);
    lanes[(which + 1) & 3] += (uint64_t)n * 0x100000001b3ULL + c;
}

static int read_at(int fd, uint8_t *buf, size_t n, uint64_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)(off + got));
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

int snug_prefix_model_id(const char *path, uint64_t head, uint8_t out[SNUG_PREFIX_ID_BYTES],
                         struct snug_err *err) {
    enum { MIB = 1 << 20 };
    memset(out, 0, SNUG_PREFIX_ID_BYTES);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return snug_err_set(err, SNUG_ERR_IO, "%s: cannot open to identify it", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return snug_err_set(err, SNUG_ERR_IO, "%s: cannot stat", path);
    }
    uint64_t size = (uint64_t)st.st_size;
    if (head == 0) head = 4ull * MIB;
    if (head > size) head = size;
    uint8_t *buf = snug_malloc(MIB);
    if (!buf) {
        close(fd);
        return snug_err_set(err, SNUG_ERR_NOMEM, "model identity: no memory");
    }
    uint64_t lanes[4] = {size, size * 0x9e3779b97f4a7c15ULL, 0, 0};
    int rc = SNUG_OK;
    /* the head (header + tensor table) in MiB pieces, then the first and last MiB of the rest */
    for (uint64_t off = 0; off < head && rc == SNUG_OK; off += MIB) {
        size_t n = (size_t)SNUG_MIN((uint64_t)MIB, head - off);
        if (read_at(fd, buf, n, off))
            rc = SNUG_ERR_IO;
        else
            digest_mix(lanes, buf, n, (int)(off / MIB) & 3);
    }
    uint64_t rest = size - head;
    if (rc == SNUG_OK && rest) {
        size_t n = (size_t)SNUG_MIN((uint64_t)MIB, rest);
        if (read_at(fd, buf, n, head))
            rc = SNUG_ERR_IO;
        else
            digest_mix(lanes, buf, n, 1);
        if (rc == SNUG_OK) {
            if (read_at(fd, buf, n, size - n))
                rc = SNUG_ERR_IO;
            else
                digest_mix(lanes, buf, n, 2);
        }
    }
    snug_free(buf);
    close(fd);
    if (rc) return snug_err_set(err, SNUG_ERR_IO, "%s: read failed while identifying it", path);
    for (int i = 0; i < 4; i++) {
        uint64_t v = lanes[i];
        v ^= v >> 31;
        v *= 0xbf58476d1ce4e5b9ULL;
        v ^= v >> 27;
        memcpy(out + 8 * i, &v, 8);
    }
    return SNUG_OK;
}
