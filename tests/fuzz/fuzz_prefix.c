/* fuzz_prefix.c — libFuzzer target for the prefix cache's file reader (prefix_file.c) and the
 * disk tier's loader (prefix.c). Byte 0 picks the mode:
 *   even: the input is a whole checkpoint file image, checked in memory against a fixed
 *         expectation (snug_prefix_file_check) and structurally (header parse, no expectation);
 *   odd:  the input is written as a file of a fresh cache folder (under the name its header
 *         claims when the header parses), the cache is opened on the folder (the loader) and a
 *         lookup + restore of the tokens it holds runs into a scratch slot.
 * Invariants: no crash, no sanitizer report, no leak; an accepted image's sizes add up.
 * Seeds: tests/fuzz/corpus-prefix/ (written by tests/unit/test_prefix.c's generator, or any
 * file a snug serve --cache-dir run leaves).
 * Build: CC=clang cmake -B build-fuzz -DSNUG_FUZZ=ON && cmake --build build-fuzz --target
 * fuzz_prefix. Read next: src/prefix/prefix_file.c. */
#define _DEFAULT_SOURCE /* mkdtemp */
#include "prefix/prefix.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define F_STATE 40
#define F_ROW   8
#define F_CTX   256

static uint8_t slot_state[F_STATE], slot_kv[F_CTX][F_ROW];

static int st_out(void *u, uint64_t off, void *dst, size_t n) {
    memcpy(dst, slot_state + off, n);
    return 0;
}
static int st_in(void *u, uint64_t off, const void *src, size_t n) {
    if (off + n > F_STATE) __builtin_trap();
    memcpy(slot_state + off, src, n);
    return 0;
}
static int kv_out(void *u, int32_t r0, int32_t n, void *dst) {
    memcpy(dst, slot_kv[r0], (size_t)n * F_ROW);
    return 0;
}
static int kv_in(void *u, int32_t r0, int32_t n, const void *src) {
    if (r0 < 0 || n < 0 || r0 + n > F_CTX) __builtin_trap();
    memcpy(slot_kv[r0], src, (size_t)n * F_ROW);
    return 0;
}

static void expect_of(struct snug_prefix_file_expect *ex) {
    memset(ex, 0, sizeof *ex);
    memset(ex->model_id, 0x5A, sizeof ex->model_id);
    snprintf(ex->layout, sizeof ex->layout, "fuzz");
    ex->state_bytes = F_STATE;
    ex->kv_row_bytes = F_ROW;
    ex->n_ctx = F_CTX;
}

static void via_loader(const uint8_t *data, size_t size) {
    /* $TMPDIR when set (a tmpfs such as /dev/shm keeps the run CPU-bound), else /tmp */
    const char *tmp = getenv("TMPDIR");
    char dir[200];
    snprintf(dir, sizeof dir, "%s/fuzz_prefix_XXXXXX",
             tmp && *tmp && strlen(tmp) < 150 ? tmp : "/tmp");
    if (!mkdtemp(dir)) return;
    struct snug_prefix_file_header h;
    struct snug_err err;
    char path[256];
    if (size >= SNUG_PREFIX_HEADER_BYTES &&
        snug_prefix_file_header_parse(data, size, size, NULL, &h, &err) == SNUG_OK)
        snprintf(path, sizeof path, "%s/%016llx-%d.snugpfx", dir, (unsigned long long)h.key, h.pos);
    else
        snprintf(path, sizeof path, "%s/0000000000000001-1.snugpfx", dir);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, size, f);
        fclose(f);
    }
    struct snug_prefix_cfg cfg = {0};
    struct snug_prefix_file_expect ex;
    expect_of(&ex);
    cfg.state_bytes = F_STATE;
    cfg.kv_row_bytes = F_ROW;
    cfg.n_ctx = F_CTX;
    cfg.ram_bytes = 64 * 1024;
    cfg.page_bytes = 64;
    cfg.max_entries = 8;
    cfg.disk_dir = dir;
    memcpy(cfg.model_id, ex.model_id, sizeof cfg.model_id);
    memcpy(cfg.layout, ex.layout, sizeof cfg.layout);
    struct snug_prefix pc;
    if (snug_prefix_init(&pc, &cfg, &err) == SNUG_OK) {
        /* the tokens the file holds (when it loaded) as the query */
        snug_token q[F_CTX];
        int32_t n = 0;
        if (size >= SNUG_PREFIX_HEADER_BYTES + 4) {
            n = (int32_t)((size - SNUG_PREFIX_HEADER_BYTES) / 4);
            if (n > F_CTX) n = F_CTX;
            memcpy(q, data + SNUG_PREFIX_HEADER_BYTES, (size_t)n * 4);
        }
        struct snug_prefix_hit hit;
        snug_prefix_lookup(&pc, q, n, &hit);
        struct snug_prefix_io io = {
            .state_out = st_out, .state_in = st_in, .kv_out = kv_out, .kv_in = kv_in};
        if (hit.entry >= 0) snug_prefix_restore(&pc, q, &hit, true, &io, &err);
        snug_prefix_free(&pc);
    }
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = data[0];
    data++;
    size--;
    if (mode & 1) {
        via_loader(data, size);
        return 0;
    }
    struct snug_prefix_file_expect ex;
    expect_of(&ex);
    struct snug_prefix_file_header h;
    struct snug_err err;
    if (snug_prefix_file_check(data, size, &ex, &h, &err) == SNUG_OK) {
        uint64_t want;
        if (!snug_prefix_file_payload_bytes(h.state_bytes, h.kv_row_bytes, h.pos, h.base, &want) ||
            want + SNUG_PREFIX_HEADER_BYTES != size)
            __builtin_trap();
    }
    snug_prefix_file_header_parse(data, size, size, NULL, &h, &err);
    return 0;
}
