/* test_prefix.c — the checkpoint store against a fake slot whose state and KV rows are known
 * functions of the tokens: stores along a conversation, restores into a fresh slot (state and
 * every KV row byte-equal to what a slot at that position holds), two conversations sharing a
 * system prompt, RAM eviction (LRU, descendants dropped), the disk tier across a restart
 * (reuse, then a flipped byte, a truncated file, another model's file, another layout: each
 * refused, the slot untouched, the lookup falling back), no allocation per operation; chains
 * kept whole by the disk tier's eviction, the folder brought within budget at boot and stale
 * temporaries removed; then the file format: the CRC-32C check value, header round trip, random
 * corruption refused. */
#define _DEFAULT_SOURCE /* mkdtemp, mkstemp, truncate, pwrite */
#include "prefix/prefix.h"
#include "test.h"

#include <dirent.h>
#include <unistd.h>

#define STATE_BYTES 3000
#define ROW_BYTES   48
#define N_CTX       4096

struct fake_slot {
    uint8_t state[STATE_BYTES];
    uint8_t kv[N_CTX][ROW_BYTES];
    int32_t n_state_in, n_kv_in;
    int32_t rope_delta; /* a context's rotary offset: -(pos % 7) here, so restores must carry it */
};

/* What a slot that evaluated toks[0..pos) holds. */
static void truth_state(const snug_token *t, int32_t pos, uint8_t *out) {
    uint64_t h = snug_prefix_tokens_key(t, pos);
    for (int i = 0; i < STATE_BYTES; i++) {
        h = h * 6364136223846793005ULL + 1442695040888963407ULL;
        out[i] = (uint8_t)(h >> 56);
    }
}
static void truth_row(const snug_token *t, int32_t r, uint8_t *out) {
    for (int i = 0; i < ROW_BYTES; i++) out[i] = (uint8_t)(t[r] * 7 + r * 13 + i);
}
static void slot_eval(struct fake_slot *s, const snug_token *t, int32_t pos) {
    truth_state(t, pos, s->state);
    for (int32_t r = 0; r < pos; r++) truth_row(t, r, s->kv[r]);
    s->rope_delta = -(pos % 7);
}

static int st_out(void *u, uint64_t off, void *dst, size_t n) {
    memcpy(dst, ((struct fake_slot *)u)->state + off, n);
    return 0;
}
static int st_in(void *u, uint64_t off, const void *src, size_t n) {
    struct fake_slot *s = u;
    s->n_state_in++;
    memcpy(s->state + off, src, n);
    return 0;
}
static int kv_out(void *u, int32_t r0, int32_t n, void *dst) {
    memcpy(dst, ((struct fake_slot *)u)->kv[r0], (size_t)n * ROW_BYTES);
    return 0;
}
static int kv_in(void *u, int32_t r0, int32_t n, const void *src) {
    struct fake_slot *s = u;
    s->n_kv_in++;
    memcpy(s->kv[r0], src, (size_t)n * ROW_BYTES);
    return 0;
}

static int32_t rope_out(void *u) {
    return ((struct fake_slot *)u)->rope_delta;
}
static int rope_in(void *u, int32_t d) {
    ((struct fake_slot *)u)->rope_delta = d;
    return 0;
}

static struct snug_prefix_io io_of(struct fake_slot *s) {
    return (struct snug_prefix_io){s, st_out, st_in, kv_out, kv_in, rope_out, rope_in};
}

/* The slot equals a slot that evaluated t[0..pos). */
static bool slot_is(const struct fake_slot *s, const snug_token *t, int32_t pos, bool kv) {
    uint8_t want[STATE_BYTES], row[ROW_BYTES];
    truth_state(t, pos, want);
    if (memcmp(want, s->state, STATE_BYTES) || s->rope_delta != -(pos % 7)) return false;
    for (int32_t r = 0; kv && r < pos; r++) {
        truth_row(t, r, row);
        if (memcmp(row, s->kv[r], ROW_BYTES)) return false;
    }
    return true;
}

static struct snug_prefix_cfg base_cfg(uint64_t ram, const char *dir) {
    struct snug_prefix_cfg c = {0};
    c.state_bytes = STATE_BYTES;
    c.kv_row_bytes = ROW_BYTES;
    c.n_ctx = N_CTX;
    c.ram_bytes = ram;
    c.disk_dir = dir;
    c.page_bytes = 1024;
    c.block_tokens = 16;
    c.max_entries = 64;
    memset(c.model_id, 0xAB, sizeof c.model_id);
    snprintf(c.layout, sizeof c.layout, "test k=f16 v=f16 rows=%d", ROW_BYTES);
    return c;
}

static snug_token sys_[300], conv_a[1200], conv_b[1200];

static void make_convs(void) {
    for (int i = 0; i < 300; i++) sys_[i] = 1000 + i;
    memcpy(conv_a, sys_, sizeof sys_);
    memcpy(conv_b, sys_, sizeof sys_);
    for (int i = 300; i < 1200; i++) {
        conv_a[i] = 5000 + (i * 7) % 311;
        conv_b[i] = 9000 + (i * 11) % 313;
    }
}

static struct fake_slot slot_a, slot_b;

static void ram_tier(void) {
    struct snug_err err = {0};
    struct snug_prefix pc;
    struct snug_prefix_cfg cfg = base_cfg(4u << 20, NULL);
    CHECK(snug_prefix_init(&pc, &cfg, &err) == SNUG_OK);
    struct snug_prefix_io ioa = io_of(&slot_a), iob = io_of(&slot_b);
    bool stored;
    /* conversation A: checkpoints at the system end, 700 and 1000 */
    int32_t pts[] = {300, 700, 1000};
    for (int k = 0; k < 3; k++) {
        slot_eval(&slot_a, conv_a, pts[k]);
        uint64_t a0 = snug_alloc_count();
        CHECK(snug_prefix_store(&pc, conv_a, pts[k], &ioa, &stored, &err) == SNUG_OK && stored);
        CHECK(snug_alloc_count() == a0);
    }
    struct snug_prefix_stats st;
    snug_prefix_stats(&pc, &st); /* KV stored once: 1000 rows, not 300 + 700 + 1000 */
    CHECK(st.ram_bytes == 1008 * (3 * 3 + (300 + 20) / 21 + (400 + 20) / 21 + (300 + 20) / 21));
    CHECK(snug_prefix_store(&pc, conv_a, 700, &ioa, &stored, &err) == SNUG_OK && !stored);
    /* a later turn of A: prompt = A[0..1100) → the checkpoint at 1000 */
    struct snug_prefix_hit hit;
    uint64_t a0 = snug_alloc_count();
    snug_prefix_lookup(&pc, conv_a, 1100, &hit);
    CHECK(hit.n_common == 1000 && hit.pos == 1000); /* indexed up to its last checkpoint */
    memset(&slot_b, 0, sizeof slot_b);
    CHECK(snug_prefix_restore(&pc, conv_a, &hit, true, &iob, &err) == SNUG_OK);
    CHECK(snug_alloc_count() == a0);
    CHECK(slot_is(&slot_b, conv_a, 1000, true));
    /* the whole prompt cached: one token must stay */
    snug_prefix_lookup(&pc, conv_a, 1000, &hit);
    CHECK(hit.n_common == 1000 && hit.pos == 700);
    /* diverging inside: A[0..850) + other → 700 */
    snug_token q[900];
    memcpy(q, conv_a, 850 * sizeof *q);
    for (int i = 850; i < 900; i++) q[i] = 77;
    snug_prefix_lookup(&pc, q, 900, &hit);
    CHECK(hit.n_common == 850 && hit.pos == 700);
    /* same-slot restore: state only */
    memset(&slot_b, 0, sizeof slot_b);
    CHECK(snug_prefix_restore(&pc, q, &hit, false, &iob, &err) == SNUG_OK);
    CHECK(slot_is(&slot_b, conv_a, 700, false) && slot_b.n_kv_in == 0);
    /* conversation B shares the system prompt */
    snug_prefix_lookup(&pc, conv_b, 1200, &hit);
    CHECK(hit.n_common == 300 && hit.pos == 300);
    memset(&slot_b, 0, sizeof slot_b);
    CHECK(snug_prefix_restore(&pc, conv_b, &hit, true, &iob, &err) == SNUG_OK);
    CHECK(slot_is(&slot_b, conv_b, 300, true));
    /* restore of a stale hit is refused */
    struct snug_prefix_hit bad = {.n_common = 5, .pos = 5, .entry = 0};
    CHECK(snug_prefix_restore(&pc, conv_b, &bad, true, &iob, &err) == SNUG_ERR_INVALID);
    snug_prefix_stats(&pc, &st);
    CHECK(st.ram_entries == 3 && st.stores == 3 && st.restores == 3 && st.lookups == 4);
    snug_prefix_note_prompt(&pc, 1000, 100);
    snug_prefix_stats(&pc, &st);
    CHECK(st.tokens_reused == 1000 && st.tokens_evaluated == 100);
    snug_prefix_free(&pc);

    /* eviction: RAM for about 1.5 conversations' checkpoints */
    cfg = base_cfg(80 * 1024, NULL);
    CHECK(snug_prefix_init(&pc, &cfg, &err) == SNUG_OK);
    for (int k = 0; k < 3; k++) {
        slot_eval(&slot_a, conv_a, pts[k]);
        CHECK(snug_prefix_store(&pc, conv_a, pts[k], &ioa, &stored, &err) == SNUG_OK && stored);
    }
    snug_prefix_lookup(&pc, conv_a, 1100, &hit); /* A is recent */
    int32_t ptsb[] = {700, 1100};
    for (int k = 0; k < 2; k++) {
        slot_eval(&slot_b, conv_b, ptsb[k]);
        CHECK(snug_prefix_store(&pc, conv_b, ptsb[k], &iob, &stored, &err) == SNUG_OK);
    }
    snug_prefix_stats(&pc, &st);
    CHECK(st.ram_evictions > 0);
    CHECK(st.ram_bytes <= st.ram_capacity);
    /* whatever survived restores exactly; nothing dangles */
    snug_prefix_lookup(&pc, conv_b, 1200, &hit);
    if (hit.entry >= 0) {
        CHECK(snug_prefix_restore(&pc, conv_b, &hit, true, &iob, &err) == SNUG_OK);
        CHECK(slot_is(&slot_b, conv_b, hit.pos, true));
    }
    snug_prefix_lookup(&pc, conv_a, 1200, &hit);
    if (hit.entry >= 0) {
        CHECK(snug_prefix_restore(&pc, conv_a, &hit, true, &iob, &err) == SNUG_OK);
        CHECK(slot_is(&slot_b, conv_a, hit.pos, true));
    }
    snug_prefix_free(&pc);

    /* disabled cache: misses, keeps nothing */
    cfg = base_cfg(0, NULL);
    CHECK(snug_prefix_init(&pc, &cfg, &err) == SNUG_OK);
    snug_prefix_lookup(&pc, conv_a, 1100, &hit);
    CHECK(hit.entry < 0 && hit.n_common == 0);
    CHECK(snug_prefix_store(&pc, conv_a, 300, &ioa, &stored, &err) == SNUG_OK && !stored);
    snug_prefix_free(&pc);
    cfg = base_cfg(0, "cache-dir");
    CHECK(snug_prefix_init(&pc, &cfg, &err) == SNUG_ERR_INVALID);
    CHECK(strstr(err.msg, "--cache-ram") != NULL);
}

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strstr(de->d_name, ".snugpfx")) n++;
    if (d) closedir(d);
    return n;
}

static void file_of(const char *dir, int32_t pos, char *out, size_t n) {
    DIR *d = opendir(dir);
    struct dirent *de;
    char suffix[32];
    snprintf(suffix, sizeof suffix, "-%d.snugpfx", pos);
    out[0] = 0;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name), s = strlen(suffix);
        if (l > s && !strcmp(de->d_name + l - s, suffix))
            snprintf(out, n, "%s/%s", dir, de->d_name);
    }
    if (d) closedir(d);
}

static void disk_tier(void) {
    char dir[512];
    test_tmp_template(dir, sizeof dir, "snug_prefix_test");
    CHECK(mkdtemp(dir) != NULL);
    struct snug_err err = {0};
    struct snug_prefix pc;
    struct snug_prefix_cfg cfg = base_cfg(4u << 20, dir);
    CHECK(snug_prefix_init(&pc, &cfg, &err) == SNUG_OK);
    struct snug_prefix_io ioa = io_of(&slot_a), iob = io_of(&slot_b);
    bool stored;
    int32_t pts[] = {300, 700, 1000};
    for (int k = 0; k < 3; k++) {
        slot_eval(&slot_a, conv_a, pts[k]);
        CHECK(snug_prefix_store(&pc, conv_a, pts[k], &ioa, &stored, &err) == SNUG_OK && stored);
    }
    CHECK(count_files(dir) == 3);
    snug_prefix_free(&pc);

    /* restart: the files come back */
    CHECK(snug_prefix_init(&pc, &cfg, &err) == SNUG_OK);
    struct snug_prefix_stats st;
    snug_prefix_stats(&pc, &st);
    CHECK(st.files_loaded == 3 && st.disk_entries == 3 && st.ram_entries == 0);
    struct snug_prefix_hit hit;
    snug_prefix_lookup(&pc, conv_a, 1100, &hit);
    CHECK(hit.pos == 1000);
    memset(&slot_b, 0, sizeof slot_b);
    CHECK(snug_prefix_restore(&pc, conv_a, &hit, true, &iob, &err) == SNUG_OK);
    CHECK(slot_is(&slot_b, conv_a, 1000, true));
    snug_prefix_free(&pc);

    /* a flipped payload byte in the 1000 file: loads (header fine), refused at restore */
    char path[1200];
    file_of(dir, 1000, path, sizeof path);
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (f) {
        fseek(f, 256 + 4000 + 100, SEEK_SET);
        int c = fgetc(f);
        fseek(f, 256 + 4000 + 100, SEEK_SET);
        fputc(c ^ 0x10, f);
        fclose(f);
    }
    CHECK(snug_prefix_init(&pc, &cfg, &err) == SNUG_OK);
    snug_prefix_lookup(&pc, conv_a, 1100, &hit);
    CHECK(hit.pos == 1000);
    memset(&slot_b, 0, sizeof slot_b);
    CHECK(snug_prefix_restore(&pc, conv_a, &hit, true, &iob, &err) == SNUG_ERR_FORMAT);
    CHECK(slot_b.n_state_in == 0 && slot_b.n_kv_in == 0); /* nothing reached the slot */
    snug_prefix_lookup(&pc, conv_a, 1100, &hit);          /* the next lookup falls back */
    CHECK(hit.pos == 700);
    CHECK(snug_prefix_restore(&pc, conv_a, &hit, true, &iob, &err) == SNUG_OK);
    CHECK(slot_is(&slot_b, conv_a, 700, true));
    /* the bad file was removed with its entry; store it again */
    slot_eval(&slot_a, conv_a, 1000);
    CHECK(snug_prefix_store(&pc, conv_a, 1000, &ioa, &stored, &err) == SNUG_OK && stored);
    snug_prefix_free(&pc);

    /* truncated 700 file: refused at load, and the 1000 above it is orphaned (refused too) */
    file_of(dir, 700, path, sizeof path);
    CHECK(truncate(path, 256 + 1000) == 0);
    CHECK(snug_prefix_init(&pc, &cfg, &err) == SNUG_OK);
    snug_prefix_stats(&pc, &st);
    CHECK(st.files_loaded == 1 && st.files_refused == 2);
    snug_prefix_lookup(&pc, conv_a, 1100, &hit);
    CHECK(hit.pos == 300);
    snug_prefix_free(&pc);

    /* another model / another layout: every file refused, none deleted */
    int before = count_files(dir);
    struct snug_prefix_cfg other = cfg;
    other.model_id[3] ^= 1;
    CHECK(snug_prefix_init(&pc, &other, &err) == SNUG_OK);
    snug_prefix_stats(&pc, &st);
    CHECK(st.files_loaded == 0 && st.files_refused == (uint64_t)before);
    snug_prefix_lookup(&pc, conv_a, 1100, &hit);
    CHECK(hit.entry < 0);
    snug_prefix_free(&pc);
    other = cfg;
    snprintf(other.layout, sizeof other.layout, "test k=q8_0 v=f16");
    CHECK(snug_prefix_init(&pc, &other, &err) == SNUG_OK);
    snug_prefix_stats(&pc, &st);
    CHECK(st.files_loaded == 0);
    snug_prefix_free(&pc);
    CHECK(count_files(dir) == before);

    /* a file of the previous format version (1: no MTP row lag; its header CRC made valid
     * again): refused at load, left in place; then put back */
    file_of(dir, 300, path, sizeof path);
    f = fopen(path, "r+b");
    CHECK(f != NULL);
    uint8_t h300[256] = {0};
    if (f) {
        uint8_t h[256];
        CHECK(fread(h, 1, sizeof h, f) == sizeof h);
        memcpy(h300, h, sizeof h);
        CHECK(h[8] == SNUG_PREFIX_FILE_VERSION && SNUG_PREFIX_FILE_VERSION == 3);
        /* version 2 (no rotary offset): still read, with offset 0 */
        fseek(f, 0, SEEK_END);
        uint64_t fbytes = (uint64_t)ftell(f);
        struct snug_prefix_file_header hd2;
        struct snug_err perr2 = {0};
        uint8_t v2[256];
        memcpy(v2, h, sizeof v2);
        CHECK(snug_prefix_file_header_parse(v2, sizeof v2, fbytes, NULL, &hd2, &perr2) == SNUG_OK &&
              hd2.rope_delta == -(300 % 7));
        v2[8] = 2;
        memset(v2 + 164, 0, 4);
        uint32_t crc2 = snug_crc32c(0, v2, 252);
        for (int i = 0; i < 4; i++) v2[252 + i] = (uint8_t)(crc2 >> (8 * i));
        CHECKF(snug_prefix_file_header_parse(v2, sizeof v2, fbytes, NULL, &hd2, &perr2) ==
                       SNUG_OK &&
                   hd2.rope_delta == 0 && hd2.pos == 300,
               "v2 header: %s", perr2.msg);
        v2[8] = 3; /* a positive offset is refused */
        memset(v2 + 164, 0, 4);
        v2[164] = 5;
        crc2 = snug_crc32c(0, v2, 252);
        for (int i = 0; i < 4; i++) v2[252 + i] = (uint8_t)(crc2 >> (8 * i));
        CHECK(snug_prefix_file_header_parse(v2, sizeof v2, fbytes, NULL, &hd2, &perr2) ==
              SNUG_ERR_FORMAT);
        h[8] = 1;
        uint32_t crc = snug_crc32c(0, h, 252);
        for (int i = 0; i < 4; i++) h[252 + i] = (uint8_t)(crc >> (8 * i));
        struct snug_prefix_file_header hd;
        struct snug_err perr = {0};
        CHECK(snug_prefix_file_header_parse(h, sizeof h, 0, NULL, &hd, &perr) == SNUG_ERR_FORMAT);
        CHECKF(strstr(perr.msg, "version 1") != NULL, "%s", perr.msg);
        fseek(f, 0, SEEK_SET);
        CHECK(fwrite(h, 1, sizeof h, f) == sizeof h);
        fclose(f);
    }
    CHECK(snug_prefix_init(&pc, &cfg, &err) == SNUG_OK);
    snug_prefix_stats(&pc, &st);
    CHECKF(st.files_refused >= 1 && st.disk_entries == st.files_loaded, "%llu refused",
           (unsigned long long)st.files_refused);
    snug_prefix_lookup(&pc, conv_a, 1100, &hit);
    CHECK(hit.entry < 0); /* 300 was the root of what is left */
    snug_prefix_free(&pc);
    CHECK(count_files(dir) == before);
    f = fopen(path, "r+b");
    CHECK(f != NULL && fwrite(h300, 1, sizeof h300, f) == sizeof h300);
    if (f) fclose(f);

    /* a disk budget of one checkpoint: older files go */
    cfg.disk_bytes = 256 + 1100 * 4 + STATE_BYTES + 1100 * ROW_BYTES;
    CHECK(snug_prefix_init(&pc, &cfg, &err) == SNUG_OK);
    static snug_token conv_c[1100]; /* shares nothing: the loaded files may go */
    for (int i = 0; i < 1100; i++) conv_c[i] = 20000 + i;
    slot_eval(&slot_b, conv_c, 1100);
    CHECK(snug_prefix_store(&pc, conv_c, 1100, &iob, &stored, &err) == SNUG_OK && stored);
    snug_prefix_stats(&pc, &st);
    CHECKF(st.disk_bytes <= cfg.disk_bytes && st.disk_evictions >= 1, "%llu %llu %llu",
           (unsigned long long)st.disk_bytes, (unsigned long long)cfg.disk_bytes,
           (unsigned long long)st.disk_evictions);
    snug_prefix_free(&pc);

    /* clean up */
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

static void file_format(void) {
    CHECK(snug_crc32c(0, "123456789", 9) == 0xE3069283u);
    { /* the instruction form (when the CPU has it) and the table form = a bitwise reference */
        static uint8_t buf[4096 + 64];
        uint64_t x = 12345;
        for (size_t i = 0; i < sizeof buf; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            buf[i] = (uint8_t)(x >> 56);
        }
        bool same = true;
        for (size_t off = 0; off < 9; off++)
            for (size_t n = 0; n < 300; n += 1 + n / 8) {
                uint32_t c = ~0u;
                for (size_t i = 0; i < n; i++) {
                    c ^= buf[off + i];
                    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
                }
                c = ~c;
                same &=
                    snug_crc32c(0, buf + off, n) == c && snug_crc32c_table(0, buf + off, n) == c;
            }
        CHECK(same);
        CHECK(snug_crc32c(7, buf, sizeof buf) == snug_crc32c_table(7, buf, sizeof buf));
    }
    CHECK(snug_crc32c(snug_crc32c(0, "1234", 4), "56789", 5) == 0xE3069283u);
    /* an image: header + 10 tokens + state + 4 rows */
    struct snug_prefix_file_expect ex = {0};
    memset(ex.model_id, 7, sizeof ex.model_id);
    snprintf(ex.layout, sizeof ex.layout, "L");
    ex.state_bytes = 40;
    ex.kv_row_bytes = 8;
    ex.n_ctx = 100;
    struct snug_prefix_file_header h = {0};
    memcpy(h.model_id, ex.model_id, sizeof h.model_id);
    memcpy(h.layout, ex.layout, sizeof h.layout);
    h.state_bytes = 40;
    h.kv_row_bytes = 8;
    h.pos = 10;
    h.base = 6;
    h.key = 5;
    h.parent_key = 9;
    CHECK(snug_prefix_file_payload_bytes(40, 8, 10, 6, &h.payload_bytes));
    CHECK(h.payload_bytes == 40 + 40 + 32);
    uint8_t img[256 + 112];
    for (int i = 0; i < 112; i++) img[256 + i] = (uint8_t)(i % 4 == 0 ? i : 0);
    h.payload_crc = snug_crc32c(0, img + 256, 112);
    snug_prefix_file_header_write(&h, img);
    struct snug_prefix_file_header got;
    struct snug_err err = {0};
    CHECK(snug_prefix_file_check(img, sizeof img, &ex, &got, &err) == SNUG_OK);
    CHECK(got.pos == 10 && got.base == 6 && got.key == 5 && got.payload_crc == h.payload_crc);
    CHECK(snug_prefix_file_check(img, sizeof img - 1, &ex, &got, &err) == SNUG_ERR_FORMAT);
    CHECK(strstr(err.msg, "truncated") != NULL);
    ex.n_ctx = 9;
    CHECK(snug_prefix_file_check(img, sizeof img, &ex, &got, &err) == SNUG_ERR_FORMAT);
    ex.n_ctx = 100;
    /* every single-bit flip is refused */
    int accepted = 0;
    for (size_t i = 0; i < sizeof img; i++) {
        for (int b = 0; b < 8; b += 3) {
            img[i] ^= (uint8_t)(1 << b);
            if (snug_prefix_file_check(img, sizeof img, &ex, &got, &err) == SNUG_OK) accepted++;
            img[i] ^= (uint8_t)(1 << b);
        }
    }
    CHECKF(accepted == 0, "%d flipped images accepted", accepted);
    CHECK(snug_prefix_file_check(img, sizeof img, &ex, &got, &err) == SNUG_OK);
    /* model identity: stable, and sensitive to the content */
    char path[512];
    test_tmp_template(path, sizeof path, "snug_prefix_model");
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    static uint8_t blob[3 << 20];
    for (size_t i = 0; i < sizeof blob; i++) blob[i] = (uint8_t)(i * 31);
    CHECK(write(fd, blob, sizeof blob) == (ssize_t)sizeof blob);
    uint8_t id1[32], id2[32], id3[32];
    CHECK(snug_prefix_model_id(path, 1 << 20, id1, &err) == SNUG_OK);
    CHECK(snug_prefix_model_id(path, 1 << 20, id2, &err) == SNUG_OK);
    CHECK(!memcmp(id1, id2, 32));
    CHECK(pwrite(fd, "x", 1, (off_t)sizeof blob - 5) == 1); /* the last MiB */
    CHECK(snug_prefix_model_id(path, 1 << 20, id3, &err) == SNUG_OK);
    CHECK(memcmp(id1, id3, 32) != 0);
    close(fd);
    unlink(path);
    CHECK(snug_prefix_model_id("/nonexistent/model.gguf", 0, id3, &err) == SNUG_ERR_IO);
}

static uint64_t dir_bytes(const char *dir) {
    DIR *d = opendir(dir);
    uint64_t n = 0;
    struct dirent *de;
    char path[1200];
    while (d && (de = readdir(d))) {
        if (!strstr(de->d_name, ".snugpfx")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        n += (uint64_t)ftell(f);
        fclose(f);
    }
    if (d) closedir(d);
    return n;
}

/* The disk tier keeps chains whole: a checkpoint restored from disk (held only there) whose
 * descendants were then stored in RAM is not the disk tier's victim while they live (dropping
 * it would drop them), so a third conversation's writes evict other files; at boot the folder
 * is brought within --cache-disk (leaves first) and stale temporaries are removed. */
static void disk_chains(void) {
    char dir[512];
    test_tmp_template(dir, sizeof dir, "snug_prefix_chain");
    CHECK(mkdtemp(dir) != NULL);
    struct snug_err err = {0};
    struct snug_prefix pc;
    struct snug_prefix_cfg cfg = base_cfg(4u << 20, dir);
    cfg.disk_bytes = 100000; /* ~1.5 conversations of three checkpoints */
    static snug_token conv_c[1200];
    for (int i = 0; i < 1200; i++) conv_c[i] = 20000 + (i * 5) % 307;
    struct snug_prefix_io ioa = io_of(&slot_a), iob = io_of(&slot_b);
    bool stored;
    CHECK(snug_prefix_init(&pc, &cfg, &err) == SNUG_OK);
    slot_eval(&slot_a, conv_a, 300);
    CHECK(snug_prefix_store(&pc, conv_a, 300, &ioa, &stored, &err) == SNUG_OK && stored);
    snug_prefix_free(&pc);
    /* restart: 300 is on disk only; restored, and 700 / 1000 stored after it */
    CHECK(snug_prefix_init(&pc, &cfg, &err) == SNUG_OK);
    struct snug_prefix_hit hit;
    snug_prefix_lookup(&pc, conv_a, 1100, &hit);
    CHECK(hit.pos == 300);
    CHECK(snug_prefix_restore(&pc, conv_a, &hit, true, &iob, &err) == SNUG_OK);
    int32_t pts[] = {700, 1000};
    for (int k = 0; k < 2; k++) {
        slot_eval(&slot_a, conv_a, pts[k]);
        CHECK(snug_prefix_store(&pc, conv_a, pts[k], &ioa, &stored, &err) == SNUG_OK && stored);
    }
    int32_t cpts[] = {300, 700, 1000};
    for (int k = 0; k < 3; k++) { /* another conversation: the disk tier must make room */
        slot_eval(&slot_a, conv_c, cpts[k]);
        CHECK(snug_prefix_store(&pc, conv_c, cpts[k], &ioa, &stored, &err) == SNUG_OK && stored);
    }
    struct snug_prefix_stats st;
    snug_prefix_stats(&pc, &st);
    CHECKF(st.disk_evictions > 0 && st.disk_bytes <= cfg.disk_bytes, "%llu evictions, %llu bytes",
           (unsigned long long)st.disk_evictions, (unsigned long long)st.disk_bytes);
    snug_prefix_lookup(&pc, conv_a, 1100, &hit);
    CHECKF(hit.pos == 1000, "conversation A's chain survived the disk tier's evictions (hit %d)",
           hit.pos);
    memset(&slot_b, 0, sizeof slot_b);
    CHECK(snug_prefix_restore(&pc, conv_a, &hit, true, &iob, &err) == SNUG_OK);
    CHECK(slot_is(&slot_b, conv_a, 1000, true));
    snug_prefix_free(&pc);
    /* a smaller budget at boot, and two stale temporaries (the older name, a gone writer's) */
    char path[1200];
    snprintf(path, sizeof path, "%s/0123456789abcdef-64.snugpfx.tmp", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) fclose(f);
    snprintf(path, sizeof path, "%s/0123456789abcdef-128.snugpfx.999999999.tmp", dir);
    f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        fwrite(sys_, 1, sizeof sys_, f);
        fclose(f);
    }
    cfg.disk_bytes = 45000;
    CHECK(snug_prefix_init(&pc, &cfg, &err) == SNUG_OK);
    snug_prefix_stats(&pc, &st);
    CHECKF(st.stale_tmp_removed == 2 && dir_bytes(dir) <= cfg.disk_bytes && st.disk_entries > 0,
           "%llu temporaries removed, %llu bytes in the folder, %llu files",
           (unsigned long long)st.stale_tmp_removed, (unsigned long long)dir_bytes(dir),
           (unsigned long long)st.disk_entries);
    snug_prefix_free(&pc);
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

int main(void) {
    make_convs();
    ram_tier();
    disk_tier();
    disk_chains();
    file_format();
    return TEST_DONE();
}
